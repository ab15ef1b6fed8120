//! The neighbour table: next hop → MAC, per port, shared by all workers,
//! for both address families: IPv4 resolved by ARP (RFC 826), IPv6 by
//! Neighbour Discovery (RFC 4861 §7.2). States after RFC 4861 §7.3.2 /
//! Linux neighbour states, simplified the same way for both families;
//! garbage collection after Linux's `gc_stale_time` / `gc_thresh1`.
//!
//! [`NeighbourTable`] holds one [`FamilyTable`] per family (`family.rs`),
//! each its own array of slots, generations and counters, monomorphised
//! over the address type ([`NeighbourAddr`], `key.rs`: how a family stores
//! its key). IPv4 pays nothing for IPv6: its slots, key and probe loop are
//! what they were, and a batch that forwards no IPv6 never loads the IPv6
//! table. Every method of the two-family table is generic over the address
//! (`resolve(port, Ipv4Addr, ..)` or `resolve(port, Ipv6Addr, ..)`) and
//! goes to that family's table.
//!
//! Any worker may learn an entry (whichever received the ARP reply or NDP
//! advertisement) and every
//! worker reads it on the forwarding path, so the table is a fixed-size
//! open-addressing array of atomics: no lock, no allocation after
//! construction, no per-packet syscall. A full table refuses new entries and
//! counts them (`refused`).
//!
//! States of an entry (the same for both families; RFC 4861 §7.3.2's names
//! in parentheses):
//! * **incomplete** (INCOMPLETE): requested, no answer yet. A request is (re)sent at most
//!   every `retrans_ms`; after `max_probes` unanswered requests the entry is
//!   **failed** for `failed_hold_ms`, then probing starts over.
//! * **reachable** (REACHABLE): a MAC confirmed less than `reachable_ms`
//!   ago.
//! * **stale** (STALE, DELAY and PROBE folded into one): a MAC older than
//!   that: still used, and re-probed (at most one request per `retrans_ms`)
//!   until a reply confirms it again; after `max_probes` unanswered
//!   re-probes the MAC is forgotten and the entry is failed like an
//!   unanswered one. RFC 4861 §7.3.3 waits `DELAY_FIRST_PROBE_TIME` (5 s)
//!   in DELAY before probing, hoping an upper-layer hint (§7.3.1, e.g. a TCP
//!   ACK) confirms reachability for free. The table takes no such hints
//!   (the forwarding path does not know which direction of a flow proves
//!   the next hop alive), so the delay would only postpone the probe: it is
//!   sent at the first use of a stale entry, the MAC still in use meanwhile,
//!   and PROBE's unicast retransmissions (§7.3.3, `MAX_UNICAST_SOLICIT`) are
//!   the `max_probes` re-probes. Re-probes are sent like first requests (to
//!   the solicited-node address for IPv6, broadcast for ARP) rather than
//!   unicast to the cached MAC: one request builder per family, and a
//!   neighbour that changed its MAC still hears them.
//! * **static**: configured; never probed, never replaced by learning, never
//!   reclaimed.
//!
//! RFC 4861 §7.2.5's rules for an advertisement received for an entry are
//! folded the way ARP's are: any valid advertisement (solicited or not,
//! Override set or not) carrying a link-layer address updates a known,
//! non-static entry and makes it reachable; the gateway has one link-layer
//! address per port and no proxies to protect, so the Override flag's
//! protection of a proxy's entry does not apply. See
//! [`crate::stage::ndp`] for which messages are learned from.
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
//!   costs one re-ARP (or re-solicitation): the next resolve finds no entry
//!   and sends a request
//!   at once. Static entries are not left to chance: workers re-apply the
//!   static neighbours of their snapshot whenever the generation changes
//!   (see [`crate::stage::neighbour`]).
//!
//! Layout: this file holds the two-family table and what both families
//! share (configuration, resolutions, statistics); `family.rs` one
//! family's table, its generations and the per-batch view ([`Neighbours`]:
//! resolve, learn); `key.rs` the families and their slot keys; `gc.rs` the
//! compaction ([`FamilyTable::collect_garbage`]). The forwarding path's use
//! of the table (hold, release, ARP frames) is the neighbour stage,
//! [`crate::stage::neighbour`]; NDP in and out is [`crate::stage::ndp`].
//!
//! Sizing: a family's table refuses only when more than `capacity` next
//! hops of that family were used within `gc_stale_ms` (plus one collection
//! interval), e.g. with the defaults 16 384 entries and 60 s, about 270 new
//! next hops a second sustained. An IPv4 slot is 48 bytes, an IPv6 slot 64
//! (the address in two more words): 0.75 and 1 MiB per generation with
//! the default capacity.

mod family;
mod gc;
pub mod key;

pub use family::{FamilyTable, NeighbourEntry, Neighbours};
pub use key::NeighbourAddr;

use crate::packet::PortId;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Timers and limits of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeighbourConfig {
    /// Entries per family (next hops over all ports); rounded up to a
    /// power of two.
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
    /// Send to this MAC; `probe` asks the caller to send a request too (ARP
    /// or NDP solicitation: a stale entry being re-confirmed).
    Known { mac: [u8; 6], probe: bool },
    /// No MAC yet: hold the packet; `probe` asks the caller to send a request
    /// now (this caller won the right to, for this `retrans_ms` period).
    Pending { probe: bool },
    /// Resolution failed recently: drop.
    Failed,
    /// The table is full: drop.
    TableFull,
}

/// Granularity of the last-use stamp: a power of two.
pub const USE_TICK_MS: u64 = 1024;

/// Occupancy and counters of a table, for operators.
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

/// The shared neighbour table of both families: IPv4 (ARP) and IPv6
/// (NDP) next hops, each in its own [`FamilyTable`]. Methods taking an
/// address go to that address's family.
#[derive(Debug)]
pub struct NeighbourTable {
    v4: FamilyTable<Ipv4Addr>,
    v6: FamilyTable<Ipv6Addr>,
}

impl Default for NeighbourTable {
    fn default() -> Self {
        Self::new(NeighbourConfig::default())
    }
}

impl NeighbourTable {
    /// Two tables of `config.capacity` entries each.
    pub fn new(config: NeighbourConfig) -> Self {
        NeighbourTable {
            v4: FamilyTable::new(config),
            v6: FamilyTable::new(config),
        }
    }

    pub fn config(&self) -> &NeighbourConfig {
        &self.v4.config
    }

    /// The table of `A`'s family.
    #[inline]
    pub fn family<A: NeighbourAddr>(&self) -> &FamilyTable<A> {
        A::family(self)
    }

    /// The current generation of `A`'s table, for one batch.
    #[inline]
    pub fn load<A: NeighbourAddr>(&self) -> Neighbours<'_, A> {
        self.family::<A>().load()
    }

    /// Increases each time a compaction publishes a new generation of
    /// either family's table (the sum of both tables' generations).
    #[inline]
    pub fn generation(&self) -> u64 {
        self.v4.generation().wrapping_add(self.v6.generation())
    }

    /// New entries refused because a table was full (both families).
    pub fn refused(&self) -> u64 {
        self.v4.refused() + self.v6.refused()
    }

    /// Entries reclaimed by compactions so far (both families).
    pub fn reclaimed(&self) -> u64 {
        self.v4.reclaimed() + self.v6.reclaimed()
    }

    /// [`FamilyTable::resolve`] in `ip`'s family (one load per call: for
    /// cold paths and tests; the forwarding path loads a view per batch).
    pub fn resolve<A: NeighbourAddr>(&self, port: PortId, ip: A, now_ms: u64) -> Resolution {
        self.family::<A>().resolve(port, ip, now_ms)
    }

    /// [`FamilyTable::peek`] in `ip`'s family (one load per call).
    pub fn peek<A: NeighbourAddr>(&self, port: PortId, ip: A) -> Option<[u8; 6]> {
        self.family::<A>().peek(port, ip)
    }

    /// [`FamilyTable::learn`] in `ip`'s family (one load per call).
    pub fn learn<A: NeighbourAddr>(
        &self,
        port: PortId,
        ip: A,
        mac: [u8; 6],
        now_ms: u64,
        only_known: bool,
    ) -> bool {
        self.family::<A>().learn(port, ip, mac, now_ms, only_known)
    }

    /// [`FamilyTable::set_static`] in `ip`'s family.
    pub fn set_static<A: NeighbourAddr>(&self, port: PortId, ip: A, mac: [u8; 6]) -> bool {
        self.family::<A>().set_static(port, ip, mac)
    }

    /// [`FamilyTable::retain_static`] in `A`'s family.
    pub fn retain_static<A: NeighbourAddr>(&self, keep: impl FnMut(PortId, A) -> bool) {
        self.family::<A>().retain_static(keep)
    }

    /// Every entry of `A`'s table, for operators (cold path; allocates).
    pub fn entries<A: NeighbourAddr>(&self) -> Vec<NeighbourEntry<A>> {
        self.family::<A>().entries()
    }

    /// Occupancy and counters of both families together (cold path:
    /// walks the tables); per family: [`FamilyTable::stats`].
    pub fn stats(&self) -> NeighbourStats {
        let (a, b) = (self.v4.stats(), self.v6.stats());
        NeighbourStats {
            capacity: a.capacity + b.capacity,
            entries: a.entries + b.entries,
            statics: a.statics + b.statics,
            refused: a.refused + b.refused,
            reclaimed: a.reclaimed + b.reclaimed,
            compactions: a.compactions + b.compactions,
        }
    }

    /// [`FamilyTable::collect_garbage`] on both families; the outcome is
    /// their sum (`compacted`: either compacted). Cold path.
    pub fn collect_garbage(&self, now_ms: u64) -> GcOutcome {
        let (a, b) = (
            self.v4.collect_garbage(now_ms),
            self.v6.collect_garbage(now_ms),
        );
        GcOutcome {
            entries: a.entries + b.entries,
            reclaimed: a.reclaimed + b.reclaimed,
            compacted: a.compacted || b.compacted,
        }
    }
}

#[cfg(test)]
mod tests;
