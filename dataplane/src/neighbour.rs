//! The neighbour (ARP) table: IPv4 next hop → MAC, per port, shared by all
//! workers (RFC 826 resolution; states after RFC 4861 §7.3.2 / Linux
//! neighbour states, simplified; garbage collection after Linux's
//! `gc_stale_time` / `gc_thresh1`).
//!
//! Any worker may learn an entry (whichever received the ARP reply) and every
//! worker reads it on the forwarding path, so the table is a fixed-size
//! open-addressing array of atomics: no lock, no allocation after
//! construction, no per-packet syscall. A full table refuses new entries and
//! counts them (`refused`).
//!
//! States of an entry:
//! * **incomplete**: requested, no answer yet. A request is (re)sent at most
//!   every `retrans_ms`; after `max_probes` unanswered requests the entry is
//!   **failed** for `failed_hold_ms`, then probing starts over.
//! * **reachable**: a MAC confirmed less than `reachable_ms` ago.
//! * **stale**: a MAC older than that: still used, and re-probed (at most one
//!   request per `retrans_ms`) until a reply confirms it again; after
//!   `max_probes` unanswered re-probes the MAC is forgotten and the entry is
//!   failed like an unanswered one.
//! * **static**: configured; never probed, never replaced by learning, never
//!   reclaimed.
//!
//! Every access is `Relaxed` except the MAC publication: the learner stores
//! the MAC with `Release` after the key, readers load it with `Acquire`, so a
//! reader that sees a MAC sees the entry it belongs to.
//!
//! # Reclaiming entries (generations)
//!
//! With on-link Kubernetes pods every backend pod IP is a next hop, and pods
//! come and go all day: entries must be removed or the table fills up. They
//! are removed by replacing the whole array, never in place:
//!
//! * The slots live in a *generation* ([`NeighbourTable::load`] returns a
//!   [`Neighbours`] view of the current one, held for one batch, like a
//!   snapshot). Within a generation a slot's key, once set, never changes
//!   and is never cleared. That is what makes lock-free linear probing
//!   correct: no key is stored twice (an insert claims the first empty slot
//!   of its probe sequence by CAS, and every slot before it is occupied for
//!   good, so a concurrent insert of the same key meets the same slot), and
//!   a `&Slot` found for a key stays that key's slot, so a learner never
//!   writes a MAC into another address's entry. In-place deletion would
//!   break both (a tombstone reused by a concurrent insert can duplicate a
//!   key that lies further along the probe sequence, and a slot freed and
//!   reused under a worker holding it would receive the wrong MAC).
//! * Every [`Neighbours::resolve`] stamps its entry with a coarse last-use
//!   time (`used_ms`, rounded up to the next [`USE_TICK_MS`] boundary, stored
//!   only when it grows: at most one shared write per entry per tick, not
//!   one per packet). Learning from ARP is not a use (a neighbour that keeps
//!   announcing itself does not keep its entry alive).
//! * An entry is *reclaimable* when it is not static and unused for at least
//!   `gc_stale_ms` (at tick granularity, rounded in its favour: never
//!   earlier). An entry not stamped yet (`used_ms == 0`: inserted by
//!   learning or just being inserted) is stamped by the collector instead,
//!   so it lives at least `gc_stale_ms` from then.
//! * [`NeighbourTable::collect_garbage`], called periodically off the
//!   workers (the gateway's control thread, once a second), compacts when
//!   there is something to reclaim and at least `gc_min_entries` entries
//!   are in use: it copies every non-reclaimable entry (MAC, state, timers)
//!   into a fresh generation of the same size, publishes it with one
//!   `arc-swap` store and bumps [`NeighbourTable::generation`]. The old
//!   generation is kept by the collector until no view of it is left, and
//!   freed by a later collection: a worker dropping the last view never
//!   pays for the free (of a large block: possibly `munmap`). Compactions
//!   are serialised by a mutex only the collector takes.
//! * A change a worker makes to the old generation after the collector
//!   copied that slot (a MAC learned, an entry inserted, a static set, a
//!   probe claimed) is lost with it. Losing a learned or inserted entry
//!   costs one re-ARP: the next resolve finds no entry and sends a request
//!   at once. Static entries are not left to chance: workers re-apply the
//!   static neighbours of their snapshot whenever the generation changes
//!   (see [`crate::worker`]).
//!
//! Sizing: the table refuses only when more than `capacity` next hops were
//! used within `gc_stale_ms` (plus one collection interval), e.g. with the
//! defaults 16 384 entries and 60 s, about 270 new next hops a second
//! sustained.

use crate::packet::PortId;
use arc_swap::{ArcSwap, Guard};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Timers and limits of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeighbourConfig {
    /// Entries (next hops over all ports); rounded up to a power of two.
    pub capacity: u32,
    /// How long a confirmed MAC is used without re-probing.
    pub reachable_ms: u64,
    /// Minimum gap between two requests for one address.
    pub retrans_ms: u64,
    /// Unanswered requests before an entry is failed.
    pub max_probes: u32,
    /// How long a failed entry stays failed before probing again.
    pub failed_hold_ms: u64,
    /// How long a non-static entry may go unused before it can be
    /// reclaimed (Linux `gc_stale_time`).
    pub gc_stale_ms: u64,
    /// Below this many entries nothing is reclaimed (Linux `gc_thresh1`):
    /// a small table keeps its quiet next hops instead of re-resolving them.
    pub gc_min_entries: u32,
}

impl Default for NeighbourConfig {
    fn default() -> Self {
        NeighbourConfig {
            capacity: 16_384,
            reachable_ms: 30_000,
            retrans_ms: 1_000,
            max_probes: 3,
            failed_hold_ms: 5_000,
            gc_stale_ms: 60_000,
            gc_min_entries: 4_096,
        }
    }
}

/// What the forwarding path should do for a next hop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// Send to this MAC; `probe` asks the caller to send an ARP request too
    /// (a stale entry being re-confirmed).
    Known { mac: [u8; 6], probe: bool },
    /// No MAC yet: hold the packet; `probe` asks the caller to send a request
    /// now (this caller won the right to, for this `retrans_ms` period).
    Pending { probe: bool },
    /// Resolution failed recently: drop.
    Failed,
    /// The table is full: drop.
    TableFull,
}

const MAC_VALID: u64 = 1 << 48;
const MAC_STATIC: u64 = 1 << 49;

/// Granularity of the last-use stamp: a power of two.
pub const USE_TICK_MS: u64 = 1024;

#[derive(Debug, Default)]
struct Slot {
    /// 0 = empty, else `1 << 40 | port << 32 | ip`. Never changes once set.
    key: AtomicU64,
    /// 48-bit MAC | `MAC_VALID` | `MAC_STATIC`, 0 while incomplete.
    mac: AtomicU64,
    confirmed_ms: AtomicU64,
    requested_ms: AtomicU64,
    /// Last use, rounded up to a tick end; 0 = not stamped yet.
    used_ms: AtomicU64,
    probes: AtomicU32,
}

/// One generation of slots.
#[derive(Debug)]
struct Slots {
    slots: Box<[Slot]>,
    mask: usize,
}

/// One neighbour as listed for operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeighbourEntry {
    pub port: PortId,
    pub addr: Ipv4Addr,
    pub mac: Option<[u8; 6]>,
    pub is_static: bool,
    pub confirmed_ms: u64,
    pub probes: u32,
    /// Last use by the forwarding path (tick end), 0 if never.
    pub used_ms: u64,
}

/// Occupancy and counters of the table, for operators.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NeighbourStats {
    /// Slots of a generation.
    pub capacity: u64,
    /// Entries in the current generation.
    pub entries: u64,
    /// Of which static.
    pub statics: u64,
    /// New entries refused because the table was full.
    pub refused: u64,
    /// Entries removed by compactions (unused for `gc_stale_ms`).
    pub reclaimed: u64,
    /// Generations published by compactions.
    pub compactions: u64,
}

/// What one [`NeighbourTable::collect_garbage`] found and did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GcOutcome {
    /// Entries in the generation examined.
    pub entries: u64,
    /// Entries reclaimed (0 when it did not compact).
    pub reclaimed: u64,
    /// Whether a new generation was published.
    pub compacted: bool,
}

/// The shared neighbour table (a handle on the current generation).
#[derive(Debug)]
pub struct NeighbourTable {
    current: ArcSwap<Slots>,
    /// Bumped after each new generation is published.
    generation: AtomicU64,
    config: NeighbourConfig,
    refused: AtomicU64,
    reclaimed: AtomicU64,
    compactions: AtomicU64,
    /// Replaced generations not freed yet; the mutex serialises
    /// compactions (never taken by workers).
    retired: Mutex<Vec<Arc<Slots>>>,
}

/// A view of one generation of the table: load it once per batch with
/// [`NeighbourTable::load`] and drop it at the end of the batch.
#[derive(Debug)]
pub struct Neighbours<'a> {
    table: &'a NeighbourTable,
    slots: Guard<Arc<Slots>>,
}

#[inline]
fn slot_key(port: PortId, ip: Ipv4Addr) -> u64 {
    1 << 40 | u64::from(port) << 32 | u64::from(u32::from(ip))
}

#[inline]
fn key_parts(key: u64) -> (PortId, Ipv4Addr) {
    ((key >> 32 & 0xff) as PortId, Ipv4Addr::from(key as u32))
}

#[inline]
fn mac_bits(mac: [u8; 6]) -> u64 {
    let mut b = [0u8; 8];
    b[2..].copy_from_slice(&mac);
    u64::from_be_bytes(b)
}

#[inline]
fn mac_of(bits: u64) -> [u8; 6] {
    let b = bits.to_be_bytes();
    [b[2], b[3], b[4], b[5], b[6], b[7]]
}

/// `now_ms` rounded up to the end of its tick (never 0).
#[inline]
fn use_stamp(now_ms: u64) -> u64 {
    now_ms | (USE_TICK_MS - 1)
}

impl Slots {
    fn new(len: usize) -> Self {
        Slots {
            slots: (0..len).map(|_| Slot::default()).collect(),
            mask: len - 1,
        }
    }

    /// Find the slot of `key`, inserting it if `insert`. `None`: absent
    /// (or, when inserting, the table is full).
    #[inline]
    fn find(&self, key: u64, insert: bool) -> Option<&Slot> {
        let start = (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize;
        for i in 0..=self.mask {
            let slot = self.slots.get((start + i) & self.mask)?;
            let k = slot.key.load(Ordering::Acquire);
            if k == key {
                return Some(slot);
            }
            if k == 0 {
                if !insert {
                    return None;
                }
                match slot
                    .key
                    .compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => return Some(slot),
                    Err(other) if other == key => return Some(slot),
                    Err(_) => continue,
                }
            }
        }
        None
    }
}

impl Default for NeighbourTable {
    fn default() -> Self {
        Self::new(NeighbourConfig::default())
    }
}

impl NeighbourTable {
    pub fn new(config: NeighbourConfig) -> Self {
        let n = config.capacity.max(16).next_power_of_two() as usize;
        NeighbourTable {
            current: ArcSwap::from_pointee(Slots::new(n)),
            generation: AtomicU64::new(0),
            config,
            refused: AtomicU64::new(0),
            reclaimed: AtomicU64::new(0),
            compactions: AtomicU64::new(0),
            retired: Mutex::new(Vec::new()),
        }
    }

    pub fn config(&self) -> &NeighbourConfig {
        &self.config
    }

    /// The current generation, for one batch.
    #[inline]
    pub fn load(&self) -> Neighbours<'_> {
        Neighbours {
            table: self,
            slots: self.current.load(),
        }
    }

    /// Increases each time a compaction publishes a new generation; a view
    /// loaded after reading it sees that generation or a newer one.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// New entries refused because the table was full.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Entries reclaimed by compactions so far.
    pub fn reclaimed(&self) -> u64 {
        self.reclaimed.load(Ordering::Relaxed)
    }

    /// [`Neighbours::resolve`] on the current generation (one load per call:
    /// for cold paths and tests; the forwarding path loads a view per batch).
    pub fn resolve(&self, port: PortId, ip: Ipv4Addr, now_ms: u64) -> Resolution {
        self.load().resolve(port, ip, now_ms)
    }

    /// [`Neighbours::peek`] on the current generation (one load per call:
    /// for cold paths and tests; the forwarding path loads a view per batch).
    pub fn peek(&self, port: PortId, ip: Ipv4Addr) -> Option<[u8; 6]> {
        self.load().peek(port, ip)
    }

    /// [`Neighbours::learn`] on the current generation (one load per call:
    /// for cold paths and tests; the forwarding path loads a view per batch).
    pub fn learn(
        &self,
        port: PortId,
        ip: Ipv4Addr,
        mac: [u8; 6],
        now_ms: u64,
        only_known: bool,
    ) -> bool {
        self.load().learn(port, ip, mac, now_ms, only_known)
    }

    /// Configure a static neighbour (never probed, never learned over, never
    /// reclaimed).
    pub fn set_static(&self, port: PortId, ip: Ipv4Addr, mac: [u8; 6]) -> bool {
        let view = self.load();
        let Some(slot) = view.find(slot_key(port, ip), true) else {
            return false;
        };
        slot.mac
            .store(mac_bits(mac) | MAC_VALID | MAC_STATIC, Ordering::Release);
        true
    }

    /// Turn static entries that `keep` rejects back into ordinary,
    /// unresolved ones (a reload removed them from the configuration): ARP
    /// resolves them from now on, and they are reclaimed once unused. Cold
    /// path: walks the whole table.
    pub fn retain_static(&self, mut keep: impl FnMut(PortId, Ipv4Addr) -> bool) {
        let view = self.load();
        for slot in view.slots.slots.iter() {
            let key = slot.key.load(Ordering::Acquire);
            if key == 0 || slot.mac.load(Ordering::Acquire) & MAC_STATIC == 0 {
                continue;
            }
            let (port, addr) = key_parts(key);
            if !keep(port, addr) {
                slot.probes.store(0, Ordering::Relaxed);
                slot.requested_ms.store(0, Ordering::Relaxed);
                slot.mac.store(0, Ordering::Release);
            }
        }
    }

    /// Every entry of the current generation, for operators (cold path;
    /// allocates).
    pub fn entries(&self) -> Vec<NeighbourEntry> {
        let view = self.load();
        view.slots
            .slots
            .iter()
            .filter_map(|s| {
                let key = s.key.load(Ordering::Acquire);
                if key == 0 {
                    return None;
                }
                let (port, addr) = key_parts(key);
                let mac = s.mac.load(Ordering::Acquire);
                Some(NeighbourEntry {
                    port,
                    addr,
                    mac: (mac & MAC_VALID != 0).then(|| mac_of(mac)),
                    is_static: mac & MAC_STATIC != 0,
                    confirmed_ms: s.confirmed_ms.load(Ordering::Relaxed),
                    probes: s.probes.load(Ordering::Relaxed),
                    used_ms: s.used_ms.load(Ordering::Relaxed),
                })
            })
            .collect()
    }

    /// Occupancy and counters (cold path: walks the table).
    pub fn stats(&self) -> NeighbourStats {
        let view = self.load();
        let mut stats = NeighbourStats {
            capacity: view.slots.slots.len() as u64,
            refused: self.refused(),
            reclaimed: self.reclaimed(),
            compactions: self.compactions.load(Ordering::Relaxed),
            ..NeighbourStats::default()
        };
        for s in view.slots.slots.iter() {
            if s.key.load(Ordering::Acquire) != 0 {
                stats.entries += 1;
                if s.mac.load(Ordering::Acquire) & MAC_STATIC != 0 {
                    stats.statics += 1;
                }
            }
        }
        stats
    }

    /// Whether the entry in `slot` (key set) may be dropped at `now_ms`; an
    /// entry never used is stamped now instead.
    fn reclaimable(&self, slot: &Slot, now_ms: u64) -> bool {
        if slot.mac.load(Ordering::Acquire) & MAC_STATIC != 0 {
            return false;
        }
        let used = slot.used_ms.load(Ordering::Relaxed);
        if used == 0 {
            let _ = slot.used_ms.compare_exchange(
                0,
                use_stamp(now_ms),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            return false;
        }
        now_ms.saturating_sub(used) >= self.config.gc_stale_ms
    }

    /// Reclaim entries unused for `gc_stale_ms` when there are any and at
    /// least `gc_min_entries` entries are in use: publish a new generation
    /// holding every other entry (see the module docs). Cold path: walks
    /// the table and allocates one generation; call it periodically from a
    /// thread that is not a worker.
    pub fn collect_garbage(&self, now_ms: u64) -> GcOutcome {
        let mut retired = self.retired.lock().unwrap_or_else(PoisonError::into_inner);
        // Free the replaced generations no worker holds any more (a view
        // holds a counted reference: arc-swap pays its debt on the swap).
        retired.retain(|g| Arc::strong_count(g) > 1);
        let old = self.current.load_full();
        let mut outcome = GcOutcome::default();
        let mut reclaimable = 0u64;
        for slot in old.slots.iter() {
            if slot.key.load(Ordering::Acquire) == 0 {
                continue;
            }
            outcome.entries += 1;
            if self.reclaimable(slot, now_ms) {
                reclaimable += 1;
            }
        }
        if reclaimable == 0 || outcome.entries < u64::from(self.config.gc_min_entries) {
            return outcome;
        }
        let fresh = Slots::new(old.slots.len());
        for slot in old.slots.iter() {
            let key = slot.key.load(Ordering::Acquire);
            if key == 0 {
                continue;
            }
            if self.reclaimable(slot, now_ms) {
                outcome.reclaimed += 1;
                continue;
            }
            // The fresh generation is private until the store below, which
            // publishes every write made to it.
            let Some(copy) = fresh.find(key, true) else {
                continue; // cannot happen: same size, fewer keys
            };
            copy.mac
                .store(slot.mac.load(Ordering::Acquire), Ordering::Relaxed);
            for (to, from) in [
                (&copy.confirmed_ms, &slot.confirmed_ms),
                (&copy.requested_ms, &slot.requested_ms),
                (&copy.used_ms, &slot.used_ms),
            ] {
                to.store(from.load(Ordering::Relaxed), Ordering::Relaxed);
            }
            copy.probes
                .store(slot.probes.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        self.current.store(Arc::new(fresh));
        self.generation.fetch_add(1, Ordering::Release);
        retired.push(old);
        self.reclaimed
            .fetch_add(outcome.reclaimed, Ordering::Relaxed);
        self.compactions.fetch_add(1, Ordering::Relaxed);
        outcome.compacted = true;
        outcome
    }
}

impl Neighbours<'_> {
    #[inline]
    fn find(&self, key: u64, insert: bool) -> Option<&Slot> {
        let found = self.slots.find(key, insert);
        if found.is_none() && insert {
            self.table.refused.fetch_add(1, Ordering::Relaxed);
        }
        found
    }

    /// Claim the right to send a request for this slot now.
    #[inline]
    fn claim_probe(&self, slot: &Slot, now_ms: u64) -> bool {
        let last = slot.requested_ms.load(Ordering::Relaxed);
        if last != 0 && now_ms.saturating_sub(last) < self.table.config.retrans_ms {
            return false;
        }
        slot.requested_ms
            .compare_exchange(last, now_ms.max(1), Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// Look up the next hop `ip` on `port` for a packet to send now (a use
    /// of the entry: it is not reclaimed for `gc_stale_ms`).
    #[inline]
    pub fn resolve(&self, port: PortId, ip: Ipv4Addr, now_ms: u64) -> Resolution {
        let Some(slot) = self.find(slot_key(port, ip), true) else {
            return Resolution::TableFull;
        };
        let stamp = use_stamp(now_ms);
        if slot.used_ms.load(Ordering::Relaxed) < stamp {
            slot.used_ms.store(stamp, Ordering::Relaxed);
        }
        let config = &self.table.config;
        let mac = slot.mac.load(Ordering::Acquire);
        if mac & MAC_VALID != 0 {
            let stale = mac & MAC_STATIC == 0
                && now_ms.saturating_sub(slot.confirmed_ms.load(Ordering::Relaxed))
                    >= config.reachable_ms;
            if !stale {
                return Resolution::Known {
                    mac: mac_of(mac),
                    probe: false,
                };
            }
            // A stale MAC whose re-probes all went unanswered is forgotten
            // (Linux PROBE -> FAILED): the neighbour moved or died.
            let probes = slot.probes.load(Ordering::Relaxed);
            let since_ms = now_ms.saturating_sub(slot.requested_ms.load(Ordering::Relaxed));
            if probes >= config.max_probes && since_ms >= config.retrans_ms {
                let _ = slot
                    .mac
                    .compare_exchange(mac, 0, Ordering::AcqRel, Ordering::Relaxed);
                return Resolution::Failed;
            }
            let probe = self.claim_probe(slot, now_ms);
            if probe {
                slot.probes.fetch_add(1, Ordering::Relaxed);
            }
            return Resolution::Known {
                mac: mac_of(mac),
                probe,
            };
        }
        let probes = slot.probes.load(Ordering::Relaxed);
        if probes >= config.max_probes {
            let since_ms = now_ms.saturating_sub(slot.requested_ms.load(Ordering::Relaxed));
            // The last request gets its full retrans period to be answered.
            if since_ms < config.retrans_ms {
                return Resolution::Pending { probe: false };
            }
            if since_ms < config.retrans_ms + config.failed_hold_ms {
                return Resolution::Failed;
            }
            slot.probes.store(0, Ordering::Relaxed);
        }
        let probe = self.claim_probe(slot, now_ms);
        if probe {
            slot.probes.fetch_add(1, Ordering::Relaxed);
        }
        Resolution::Pending { probe }
    }

    /// The MAC of a next hop without side effects (not a use).
    #[inline]
    pub fn peek(&self, port: PortId, ip: Ipv4Addr) -> Option<[u8; 6]> {
        let slot = self.slots.find(slot_key(port, ip), false)?;
        let mac = slot.mac.load(Ordering::Acquire);
        (mac & MAC_VALID != 0).then(|| mac_of(mac))
    }

    /// Record `mac` for `ip` on `port` (from an ARP reply or request).
    /// Static entries are not replaced. Only addresses already in the table
    /// are learned when `only_known` (unsolicited ARP from strangers must not
    /// fill the table). Not a use of the entry.
    pub fn learn(
        &self,
        port: PortId,
        ip: Ipv4Addr,
        mac: [u8; 6],
        now_ms: u64,
        only_known: bool,
    ) -> bool {
        let Some(slot) = self.find(slot_key(port, ip), !only_known) else {
            return false;
        };
        if slot.mac.load(Ordering::Acquire) & MAC_STATIC != 0 {
            return false;
        }
        slot.confirmed_ms.store(now_ms, Ordering::Relaxed);
        slot.probes.store(0, Ordering::Relaxed);
        slot.mac.store(mac_bits(mac) | MAC_VALID, Ordering::Release);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const A: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 10);
    const MAC: [u8; 6] = [2, 0xbb, 0, 0, 0, 10];

    fn table() -> NeighbourTable {
        NeighbourTable::new(NeighbourConfig::default())
    }

    #[test]
    fn unknown_next_hop_is_probed_once_per_retrans_period_then_learned() {
        let t = table();
        assert_eq!(t.resolve(1, A, 100), Resolution::Pending { probe: true });
        assert_eq!(
            t.resolve(1, A, 500),
            Resolution::Pending { probe: false },
            "one request per second"
        );
        assert_eq!(t.resolve(1, A, 1_100), Resolution::Pending { probe: true });
        assert!(t.learn(1, A, MAC, 1_200, true));
        assert_eq!(
            t.resolve(1, A, 1_300),
            Resolution::Known {
                mac: MAC,
                probe: false
            }
        );
        assert_eq!(t.peek(1, A), Some(MAC));
        assert_eq!(t.peek(0, A), None, "per port");
    }

    #[test]
    fn unanswered_probes_fail_the_entry_for_the_hold_time_then_retry() {
        let t = table();
        for (now, probe) in [(1, true), (1_001, true), (2_001, true)] {
            assert_eq!(t.resolve(0, A, now), Resolution::Pending { probe });
        }
        assert_eq!(t.resolve(0, A, 3_001), Resolution::Failed);
        assert_eq!(t.resolve(0, A, 7_999), Resolution::Failed);
        assert_eq!(
            t.resolve(0, A, 8_002),
            Resolution::Pending { probe: true },
            "probing starts over"
        );
    }

    #[test]
    fn stale_entries_keep_forwarding_and_are_reprobed() {
        let t = table();
        t.learn(0, A, MAC, 0, false);
        assert_eq!(
            t.resolve(0, A, 29_999),
            Resolution::Known {
                mac: MAC,
                probe: false
            }
        );
        assert_eq!(
            t.resolve(0, A, 30_000),
            Resolution::Known {
                mac: MAC,
                probe: true
            }
        );
        assert_eq!(
            t.resolve(0, A, 30_500),
            Resolution::Known {
                mac: MAC,
                probe: false
            }
        );
        let new_mac = [2, 0xbb, 0, 0, 0, 99];
        t.learn(0, A, new_mac, 30_600, true);
        assert_eq!(
            t.resolve(0, A, 30_700),
            Resolution::Known {
                mac: new_mac,
                probe: false
            }
        );
    }

    #[test]
    fn a_stale_mac_that_stops_answering_is_forgotten() {
        let t = table();
        t.learn(0, A, MAC, 0, false);
        for now in [30_000, 31_000, 32_000] {
            assert_eq!(
                t.resolve(0, A, now),
                Resolution::Known {
                    mac: MAC,
                    probe: true
                }
            );
        }
        assert_eq!(
            t.resolve(0, A, 32_500),
            Resolution::Known {
                mac: MAC,
                probe: false
            }
        );
        assert_eq!(
            t.resolve(0, A, 33_000),
            Resolution::Failed,
            "three re-probes unanswered"
        );
        assert_eq!(t.peek(0, A), None);
        // A reply brings it back.
        assert!(t.learn(0, A, MAC, 33_100, true));
        assert_eq!(
            t.resolve(0, A, 33_200),
            Resolution::Known {
                mac: MAC,
                probe: false
            }
        );
    }

    #[test]
    fn static_entries_are_never_probed_or_overwritten() {
        let t = table();
        t.set_static(0, A, MAC);
        assert!(!t.learn(0, A, [9; 6], 5, false));
        assert_eq!(
            t.resolve(0, A, 10_000_000),
            Resolution::Known {
                mac: MAC,
                probe: false
            }
        );
        assert!(t.entries()[0].is_static);
    }

    #[test]
    fn strangers_are_not_learned_unless_asked_and_a_full_table_refuses() {
        let t = NeighbourTable::new(NeighbourConfig {
            capacity: 16,
            ..NeighbourConfig::default()
        });
        assert!(!t.learn(0, A, MAC, 0, true), "unsolicited");
        for i in 0..16u32 {
            t.resolve(0, Ipv4Addr::from(0x0a00_0000 + i), 0);
        }
        assert_eq!(
            t.resolve(0, Ipv4Addr::new(10, 9, 9, 9), 0),
            Resolution::TableFull
        );
        assert_eq!(t.refused(), 1);
        assert_eq!(t.entries().len(), 16);
    }

    #[test]
    fn concurrent_learners_and_readers_agree() {
        let t = Arc::new(table());
        let writers: Vec<_> = (0..2u8)
            .map(|w| {
                let t = Arc::clone(&t);
                std::thread::spawn(move || {
                    for i in 0..2_000u32 {
                        let ip = Ipv4Addr::from(0x0a01_0000 + i);
                        let b = i.to_be_bytes();
                        t.learn(w, ip, [2, w, b[0], b[1], b[2], b[3]], 1, false);
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        for w in 0..2u8 {
            for i in 0..2_000u32 {
                let b = i.to_be_bytes();
                assert_eq!(
                    t.peek(w, Ipv4Addr::from(0x0a01_0000 + i)),
                    Some([2, w, b[0], b[1], b[2], b[3]])
                );
            }
        }
    }

    fn gc_table(capacity: u32, gc_stale_ms: u64, gc_min_entries: u32) -> NeighbourTable {
        NeighbourTable::new(NeighbourConfig {
            capacity,
            gc_stale_ms,
            gc_min_entries,
            ..NeighbourConfig::default()
        })
    }

    fn mac_for(port: PortId, ip: Ipv4Addr) -> [u8; 6] {
        let b = u32::from(ip).to_be_bytes();
        [2, port, b[0], b[1], b[2], b[3]]
    }

    /// Resolve a new next hop and answer its request, like a worker and the
    /// neighbour would.
    fn use_and_learn(t: &NeighbourTable, port: PortId, ip: Ipv4Addr, now_ms: u64) -> Resolution {
        let first = t.resolve(port, ip, now_ms);
        if first == Resolution::TableFull {
            return first;
        }
        t.learn(port, ip, mac_for(port, ip), now_ms, true);
        t.resolve(port, ip, now_ms)
    }

    /// Next hops come and go (pods churning): 4 new ones a second, each
    /// used for a moment, 10x the capacity in all. Collected once a second,
    /// the table never refuses; without collection the same churn does.
    #[test]
    fn churn_of_ten_times_the_capacity_never_refuses_once_old_entries_are_idle() {
        let collected = gc_table(64, 10_000, 0);
        let uncollected = gc_table(64, 10_000, 0);
        let hops = 640u32;
        let mut now_ms = 1_000;
        for i in 0..hops {
            let ip = Ipv4Addr::from(0x0a40_0000 + i);
            assert_eq!(
                use_and_learn(&collected, 0, ip, now_ms),
                Resolution::Known {
                    mac: mac_for(0, ip),
                    probe: false
                },
                "next hop {i} at {now_ms} ms"
            );
            uncollected.resolve(0, ip, now_ms);
            if i % 4 == 3 {
                now_ms += 1_000;
                collected.collect_garbage(now_ms);
            }
        }
        assert_eq!(collected.refused(), 0);
        let stats = collected.stats();
        assert_eq!(stats.capacity, 64);
        assert!(stats.entries <= 4 * 12, "{stats:?}");
        assert_eq!(
            stats.reclaimed + stats.entries,
            u64::from(hops),
            "{stats:?}"
        );
        assert!(
            uncollected.refused() > 0,
            "the churn overflows a table never collected"
        );
    }

    #[test]
    fn a_used_entry_is_never_reclaimed_and_an_idle_one_not_before_gc_stale_ms() {
        let t = gc_table(16, 10_000, 0);
        let (idle, busy) = (Ipv4Addr::new(10, 2, 0, 1), Ipv4Addr::new(10, 2, 0, 2));
        use_and_learn(&t, 0, idle, 1_000);
        // Last use at 1 000 ms: still there gc_stale_ms later (the stamp is
        // rounded up to the tick end, 1 023 ms).
        for now_ms in (1_000..=11_022).step_by(500).chain([11_022]) {
            // The busy one is used every half second and answers its probes.
            if let Resolution::Known { probe: true, .. } | Resolution::Pending { .. } =
                t.resolve(0, busy, now_ms)
            {
                t.learn(0, busy, mac_for(0, busy), now_ms, false);
            }
            assert!(!t.collect_garbage(now_ms).compacted, "at {now_ms} ms");
        }
        assert_eq!(t.peek(0, idle), Some(mac_for(0, idle)));
        let mut now_ms = 11_023;
        let gc = t.collect_garbage(now_ms);
        assert_eq!((gc.compacted, gc.reclaimed), (true, 1));
        assert_eq!(t.peek(0, idle), None, "reclaimed");
        // The busy one survives any number of collections while used.
        for _ in 0..200 {
            now_ms += 777;
            if let Resolution::Known { probe: true, .. } = t.resolve(0, busy, now_ms) {
                t.learn(0, busy, mac_for(0, busy), now_ms, true);
            }
            assert_eq!(t.peek(0, busy), Some(mac_for(0, busy)), "at {now_ms} ms");
            t.collect_garbage(now_ms);
        }
        assert_eq!(t.reclaimed(), 1);
    }

    #[test]
    fn static_entries_survive_compactions_and_demoted_ones_are_reclaimed_later() {
        let t = gc_table(16, 10_000, 0);
        let (kept, demoted, idle) = (
            Ipv4Addr::new(10, 3, 0, 1),
            Ipv4Addr::new(10, 3, 0, 2),
            Ipv4Addr::new(10, 3, 0, 3),
        );
        t.set_static(1, kept, MAC);
        t.set_static(1, demoted, MAC);
        use_and_learn(&t, 1, idle, 0);
        let gc = t.collect_garbage(1_000_000);
        assert_eq!((gc.compacted, gc.reclaimed), (true, 1));
        for ip in [kept, demoted] {
            assert_eq!(
                t.resolve(1, ip, 2_000_000),
                Resolution::Known {
                    mac: MAC,
                    probe: false
                }
            );
        }
        assert_eq!(t.stats().statics, 2);
        // A reload removes one static neighbour: an ordinary entry from now
        // on, reclaimed once unused for gc_stale_ms.
        t.retain_static(|_, ip| ip == kept);
        assert!(
            !t.collect_garbage(2_005_000).compacted,
            "used at 2 000 000 ms"
        );
        assert!(t.collect_garbage(2_020_000).compacted);
        assert_eq!(t.peek(1, demoted), None);
        assert_eq!(t.peek(1, kept), Some(MAC));
        assert_eq!(t.stats().entries, 1);
    }

    #[test]
    fn entries_never_used_are_stamped_by_the_collector_and_small_tables_are_left_alone() {
        let t = gc_table(64, 10_000, 4);
        // Learned without a use (not from a resolve): stamped at the first
        // collection, reclaimed gc_stale_ms after that.
        for i in 0..3u32 {
            t.learn(0, Ipv4Addr::from(0x0a05_0000 + i), MAC, 0, false);
        }
        assert!(!t.collect_garbage(50_000).compacted);
        assert!(t.entries().iter().all(|e| e.used_ms == 50_000 | 1023));
        assert!(
            !t.collect_garbage(100_000).compacted,
            "3 entries, below gc_min_entries"
        );
        t.learn(0, Ipv4Addr::new(10, 5, 1, 0), MAC, 0, false);
        let gc = t.collect_garbage(100_000);
        assert_eq!(
            (gc.entries, gc.reclaimed, gc.compacted),
            (4, 3, true),
            "the 4th entry was stamped just now"
        );
        assert_eq!(t.stats().compactions, 1);
    }

    /// A worker still holding the old generation during a compaction: what
    /// it learns there is lost, and costs exactly one immediate re-request.
    #[test]
    fn a_change_to_a_replaced_generation_costs_one_re_arp() {
        let t = gc_table(16, 10_000, 0);
        let old_hop = Ipv4Addr::new(10, 6, 0, 1);
        use_and_learn(&t, 0, old_hop, 0);
        let batch = t.load();
        let generation = t.generation();
        assert!(t.collect_garbage(20_000).compacted);
        assert_eq!(t.generation(), generation + 1);
        // The batch goes on with its generation: A is resolved and learned
        // there, in the replaced generation.
        assert_eq!(
            batch.resolve(0, A, 20_000),
            Resolution::Pending { probe: true }
        );
        assert!(batch.learn(0, A, MAC, 20_001, true));
        assert_eq!(batch.peek(0, A), Some(MAC));
        drop(batch);
        // The collector still holds the replaced generation (freed by the
        // next collection, not by the worker's drop).
        let replaced = t.retired.lock().unwrap()[0].clone();
        assert_eq!(Arc::strong_count(&replaced), 2);
        drop(replaced);
        assert!(!t.collect_garbage(20_001).compacted);
        assert!(t.retired.lock().unwrap().is_empty());
        assert_eq!(t.peek(0, A), None, "lost with the old generation");
        assert_eq!(
            t.resolve(0, A, 20_002),
            Resolution::Pending { probe: true },
            "requested again at once"
        );
        assert!(t.learn(0, A, MAC, 20_003, true));
        assert_eq!(
            t.resolve(0, A, 20_004),
            Resolution::Known {
                mac: MAC,
                probe: false
            }
        );
    }

    /// Learners and readers on two threads while a third compacts the table
    /// 200 times under a simulated clock: every MAC read belongs to the
    /// address looked up, statics are always there, the table never
    /// refuses, and idle entries are reclaimed.
    #[test]
    fn concurrent_learners_and_readers_agree_during_compactions() {
        use std::sync::atomic::AtomicBool;
        const WINDOW: u32 = 64;
        let t = Arc::new(gc_table(1_024, 2 * USE_TICK_MS, 0));
        let clock = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let progress = Arc::new(AtomicU64::new(0));
        let statics: Vec<Ipv4Addr> = (0..8u32).map(|i| Ipv4Addr::from(0x0a07_0000 + i)).collect();
        for &ip in &statics {
            t.set_static(3, ip, mac_for(3, ip));
        }
        // Idle from the start: reclaimed whatever the threads' timing.
        for i in 0..128u32 {
            let ip = Ipv4Addr::from(0x0a08_0000 + i);
            use_and_learn(&t, 2, ip, 0);
        }
        let workers: Vec<_> = (0..2u8)
            .map(|w| {
                let (t, clock, done, progress, statics) = (
                    Arc::clone(&t),
                    Arc::clone(&clock),
                    Arc::clone(&done),
                    Arc::clone(&progress),
                    statics.clone(),
                );
                std::thread::spawn(move || {
                    let mut checked = 0u64;
                    for i in 0..2_000_000u32 {
                        if done.load(Ordering::Relaxed) {
                            break;
                        }
                        progress.fetch_add(1, Ordering::Relaxed);
                        let now_ms = clock.load(Ordering::Relaxed);
                        // A window of addresses that moves with the clock:
                        // the ones left behind go idle.
                        let window = (now_ms / USE_TICK_MS) as u32 * 37;
                        let ip = Ipv4Addr::from(0x0a09_0000 + (window + i % WINDOW) % 4_096);
                        let batch = t.load();
                        match batch.resolve(w, ip, now_ms) {
                            Resolution::Known { mac, .. } => {
                                assert_eq!(mac, mac_for(w, ip), "{ip} on {w}");
                                checked += 1;
                            }
                            Resolution::Pending { .. } | Resolution::Failed => {
                                batch.learn(w, ip, mac_for(w, ip), now_ms, true);
                            }
                            Resolution::TableFull => panic!("table full at {now_ms} ms"),
                        }
                        let s = statics[i as usize % statics.len()];
                        assert_eq!(
                            batch.resolve(3, s, now_ms),
                            Resolution::Known {
                                mac: mac_for(3, s),
                                probe: false
                            }
                        );
                    }
                    checked
                })
            })
            .collect();
        let mut compactions = 0;
        for _ in 0..200 {
            clock.fetch_add(USE_TICK_MS / 2, Ordering::Relaxed);
            if t.collect_garbage(clock.load(Ordering::Relaxed)).compacted {
                compactions += 1;
            }
            // Let the readers work on this generation before the next one
            // (bounded: a descheduled reader does not stall the test).
            let seen = progress.load(Ordering::Relaxed);
            for _ in 0..100_000 {
                if progress.load(Ordering::Relaxed) >= seen + 200
                    || workers.iter().all(|w| w.is_finished())
                {
                    break;
                }
                std::thread::yield_now();
            }
        }
        done.store(true, Ordering::Relaxed);
        let checked: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
        assert!(checked > 0, "readers saw learned MACs");
        assert!(compactions > 0);
        assert_eq!(t.refused(), 0);
        assert!(t.reclaimed() >= 128, "{:?}", t.stats());
        for i in 0..128u32 {
            assert_eq!(t.peek(2, Ipv4Addr::from(0x0a08_0000 + i)), None);
        }
        for e in t.entries() {
            if let Some(mac) = e.mac {
                assert_eq!(mac, mac_for(e.port, e.addr), "{e:?}");
            }
        }
        assert_eq!(t.stats().statics, 8);
    }
}
