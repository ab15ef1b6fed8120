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
//!   (see [`crate::stage::neighbour`]).
//!
//! Layout: this file holds the table, its generations and the per-batch
//! view ([`Neighbours`]: resolve, learn); `gc.rs` the compaction
//! ([`NeighbourTable::collect_garbage`]). The forwarding path's use of the
//! table (hold, release, ARP frames) is the neighbour stage,
//! [`crate::stage::neighbour`].
//!
//! Sizing: the table refuses only when more than `capacity` next hops were
//! used within `gc_stale_ms` (plus one collection interval), e.g. with the
//! defaults 16 384 entries and 60 s, about 270 new next hops a second
//! sustained.

mod gc;

use crate::packet::PortId;
use arc_swap::{ArcSwap, Guard};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

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
mod tests;
