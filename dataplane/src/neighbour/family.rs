//! One family's table: its generations of slots and the per-batch view
//! ([`Neighbours`]: resolve, learn). Generic over the address family
//! ([`NeighbourAddr`]) and monomorphised per family: the IPv4 table is the
//! code it was before IPv6 existed, the key layout being the only
//! difference (see [`super::key`]).

use super::key::{KeyProbe, NeighbourAddr, SlotKey};
use super::{NeighbourConfig, NeighbourStats, Resolution, USE_TICK_MS};
use crate::packet::PortId;
use arc_swap::{ArcSwap, Guard};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub(super) const MAC_VALID: u64 = 1 << 48;
pub(super) const MAC_STATIC: u64 = 1 << 49;

#[derive(Debug)]
pub(super) struct Slot<A: NeighbourAddr> {
    /// `(port, address)`; never changes once set.
    pub(super) key: A::Key,
    /// 48-bit MAC | `MAC_VALID` | `MAC_STATIC`, 0 while incomplete.
    pub(super) mac: AtomicU64,
    pub(super) confirmed_ms: AtomicU64,
    pub(super) requested_ms: AtomicU64,
    /// Last use, rounded up to a tick end; 0 = not stamped yet.
    pub(super) used_ms: AtomicU64,
    pub(super) probes: AtomicU32,
}

impl<A: NeighbourAddr> Default for Slot<A> {
    fn default() -> Self {
        Slot {
            key: A::Key::default(),
            mac: AtomicU64::new(0),
            confirmed_ms: AtomicU64::new(0),
            requested_ms: AtomicU64::new(0),
            used_ms: AtomicU64::new(0),
            probes: AtomicU32::new(0),
        }
    }
}

/// One generation of slots.
#[derive(Debug)]
pub(super) struct Slots<A: NeighbourAddr> {
    pub(super) slots: Box<[Slot<A>]>,
    mask: usize,
}

/// One neighbour as listed for operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeighbourEntry<A = std::net::Ipv4Addr> {
    pub port: PortId,
    pub addr: A,
    pub mac: Option<[u8; 6]>,
    pub is_static: bool,
    pub confirmed_ms: u64,
    pub probes: u32,
    /// Last use by the forwarding path (tick end), 0 if never.
    pub used_ms: u64,
}

/// The table of one address family (a handle on its current generation).
#[derive(Debug)]
pub struct FamilyTable<A: NeighbourAddr> {
    pub(super) current: ArcSwap<Slots<A>>,
    /// Bumped after each new generation is published.
    pub(super) generation: AtomicU64,
    pub(super) config: NeighbourConfig,
    refused: AtomicU64,
    pub(super) reclaimed: AtomicU64,
    pub(super) compactions: AtomicU64,
    /// Replaced generations not freed yet; the mutex serialises
    /// compactions (never taken by workers).
    pub(super) retired: Mutex<Vec<Arc<Slots<A>>>>,
}

/// A view of one generation of a family's table: load it once per batch
/// with [`super::NeighbourTable::load`] and drop it at the end of the batch.
#[derive(Debug)]
pub struct Neighbours<'a, A: NeighbourAddr = std::net::Ipv4Addr> {
    table: &'a FamilyTable<A>,
    slots: Guard<Arc<Slots<A>>>,
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
pub(super) fn use_stamp(now_ms: u64) -> u64 {
    now_ms | (USE_TICK_MS - 1)
}

impl<A: NeighbourAddr> Slots<A> {
    pub(super) fn new(len: usize) -> Self {
        Slots {
            slots: (0..len).map(|_| Slot::default()).collect(),
            mask: len - 1,
        }
    }

    /// Find the slot of `(port, addr)`, inserting it if `insert`. `None`:
    /// absent (or, when inserting, the table is full).
    #[inline]
    pub(super) fn find(&self, port: PortId, addr: A, insert: bool) -> Option<&Slot<A>> {
        let start = A::Key::start(port, addr);
        for i in 0..=self.mask {
            let slot = self.slots.get((start + i) & self.mask)?;
            match slot.key.probe(port, addr, insert) {
                KeyProbe::Mine => return Some(slot),
                KeyProbe::Other => continue,
                KeyProbe::Absent => return None,
            }
        }
        None
    }
}

impl<A: NeighbourAddr> FamilyTable<A> {
    pub fn new(config: NeighbourConfig) -> Self {
        let n = config.capacity.max(16).next_power_of_two() as usize;
        FamilyTable {
            current: ArcSwap::from_pointee(Slots::new(n)),
            generation: AtomicU64::new(0),
            config,
            refused: AtomicU64::new(0),
            reclaimed: AtomicU64::new(0),
            compactions: AtomicU64::new(0),
            retired: Mutex::new(Vec::new()),
        }
    }

    /// The current generation, for one batch.
    #[inline]
    pub fn load(&self) -> Neighbours<'_, A> {
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
    pub fn resolve(&self, port: PortId, ip: A, now_ms: u64) -> Resolution {
        self.load().resolve(port, ip, now_ms)
    }

    /// [`Neighbours::peek`] on the current generation (one load per call).
    pub fn peek(&self, port: PortId, ip: A) -> Option<[u8; 6]> {
        self.load().peek(port, ip)
    }

    /// [`Neighbours::learn`] on the current generation (one load per call).
    pub fn learn(&self, port: PortId, ip: A, mac: [u8; 6], now_ms: u64, only_known: bool) -> bool {
        self.load().learn(port, ip, mac, now_ms, only_known)
    }

    /// Configure a static neighbour (never probed, never learned over, never
    /// reclaimed).
    pub fn set_static(&self, port: PortId, ip: A, mac: [u8; 6]) -> bool {
        let view = self.load();
        let Some(slot) = view.find(port, ip, true) else {
            return false;
        };
        slot.mac
            .store(mac_bits(mac) | MAC_VALID | MAC_STATIC, Ordering::Release);
        true
    }

    /// Turn static entries that `keep` rejects back into ordinary,
    /// unresolved ones (a reload removed them from the configuration): ARP
    /// or NDP resolves them from now on, and they are reclaimed once
    /// unused. Cold path: walks the whole table.
    pub fn retain_static(&self, mut keep: impl FnMut(PortId, A) -> bool) {
        let view = self.load();
        for slot in view.slots.slots.iter() {
            if slot.mac.load(Ordering::Acquire) & MAC_STATIC == 0 {
                continue;
            }
            let Some((port, addr)) = slot.key.get() else {
                continue;
            };
            if !keep(port, addr) {
                slot.probes.store(0, Ordering::Relaxed);
                slot.requested_ms.store(0, Ordering::Relaxed);
                slot.mac.store(0, Ordering::Release);
            }
        }
    }

    /// Every entry of the current generation, for operators (cold path;
    /// allocates).
    pub fn entries(&self) -> Vec<NeighbourEntry<A>> {
        let view = self.load();
        view.slots
            .slots
            .iter()
            .filter_map(|s| {
                let (port, addr) = s.key.get()?;
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
            if s.key.get().is_some() {
                stats.entries += 1;
                if s.mac.load(Ordering::Acquire) & MAC_STATIC != 0 {
                    stats.statics += 1;
                }
            }
        }
        stats
    }
}

impl<A: NeighbourAddr> Neighbours<'_, A> {
    #[inline]
    fn find(&self, port: PortId, ip: A, insert: bool) -> Option<&Slot<A>> {
        let found = self.slots.find(port, ip, insert);
        if found.is_none() && insert {
            self.table.refused.fetch_add(1, Ordering::Relaxed);
        }
        found
    }

    /// Claim the right to send a request for this slot now.
    #[inline]
    fn claim_probe(&self, slot: &Slot<A>, now_ms: u64) -> bool {
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
    pub fn resolve(&self, port: PortId, ip: A, now_ms: u64) -> Resolution {
        let Some(slot) = self.find(port, ip, true) else {
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
    pub fn peek(&self, port: PortId, ip: A) -> Option<[u8; 6]> {
        let slot = self.slots.find(port, ip, false)?;
        let mac = slot.mac.load(Ordering::Acquire);
        (mac & MAC_VALID != 0).then(|| mac_of(mac))
    }

    /// Record `mac` for `ip` on `port` (from an ARP reply or request, an
    /// NDP advertisement or solicitation). Static entries are not replaced.
    /// Only addresses already in the table are learned when `only_known`
    /// (unsolicited ARP/NDP from strangers must not fill the table). Not a
    /// use of the entry.
    pub fn learn(&self, port: PortId, ip: A, mac: [u8; 6], now_ms: u64, only_known: bool) -> bool {
        let Some(slot) = self.find(port, ip, !only_known) else {
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
