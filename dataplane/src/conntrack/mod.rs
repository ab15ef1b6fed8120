//! Per-core connection tracking: one flow record per connection, found by
//! either of its two directional keys.
//!
//! A [`Flow`] is reachable by its *original* key (client -> service address,
//! as the client sent it) and its *reply* key (backend -> gateway SNAT address,
//! or backend -> client when SNAT is off, as the backend will send it). Each
//! worker core owns one [`Conntrack`]; it is single-threaded and lock-free by
//! construction.
//!
//! # Storage
//! * **Slab**: `Vec<Flow>` of exactly `capacity` records, allocated in
//!   [`Conntrack::new`]. A [`FlowId`] is a slot index. Free slots hold a record
//!   whose `LIVE` flag is clear.
//! * **Free list**: a stack of the free slots threaded through their own
//!   records (each free record names the next free slot, see
//!   [`Flow`]), so it costs no memory of its own. Invariant: `free_len +
//!   live flows == capacity`; the records reachable from `free_head` are
//!   exactly the free slots.
//! * **Index**: an `index::Index`, a fixed-size open-addressing table
//!   (linear probing in 64-byte lines, backward-shift deletion, so no
//!   tombstones) whose entries are `slot << 1 | dir` (`dir` 0 = original,
//!   1 = reply) tagged with 32 bits of the key's hash. A lookup compares the
//!   probe key with the slab record's orig or reply key. Every live flow has
//!   exactly two entries; nothing else is in the index. It is sized for
//!   `2 * capacity` entries at <= 53% load (not rounded up to a power of
//!   two), allocated once, and never resizes (see its module docs); no entry lies more than `MAX_PROBE`
//!   (64) entries from its home, so a lookup reads at most 8 lines whatever
//!   the keys. Callers must pass exactly [`Conntrack::hash`] of the key as
//!   the hash: the index places entries by it. That hash is keyed with the
//!   table's [`TableHasher`] (a per-process secret), not the public
//!   `stable_hash`, so colliding tuples cannot be precomputed (hash flood).
//!
//! Records are 64-byte aligned ([`Flow`] is exactly one cache line), so a
//! flow costs one cache miss at most.
//!
//! * **TCP array**: `Vec<TcpExt>` parallel to the slab, 32 B per slot: the
//!   two directions' sequence windows ([`window`]; the window scales are a
//!   byte of the record). Written at insert and read by every TCP packet;
//!   UDP never touches it.
//! * **Splice array**: the SYN proxy's [`Splice`] states, `syn_proxy_flows`
//!   entries (default one per 16 slots, [`default_syn_proxy_flows`]) that
//!   SYN-proxied flows take and give back (see `splice.rs`); no other flow
//!   needs one.
//!
//! Memory at capacity 2^20 (IPv4): 64 B slab + 32 B TCP array + 30.19 B
//! index (3,956,960 entries of 8 B) + 1.63 B splice array (65,536 × 26 B)
//! = 127.8 B per flow; the same for any capacity, within a line of index
//! rounding (IPv6: 64 B more, its record).
//!
//! # Batched lookups (memory-level parallelism)
//! At a million flows every lookup misses the caches twice (index line,
//! then record). [`Conntrack::prefetch_index`]
//! and [`Conntrack::probe`] let a batch issue those misses for all its
//! packets first (VPP style): pass 1 prefetches every packet's index line,
//! pass 2 probes the (now cached) lines and prefetches the records, pass 3
//! confirms each candidate with [`Conntrack::lookup_probed`].
//! The "prefetch" is a load nobody waits on (see `index::touch`): safe
//! Rust has no prefetch instruction.
//!
//! # Time and expiry
//! Every accepted packet moves a flow's deadline to `now + timeout(state)`
//! (see [`Timeouts`]); a flow is expired once `now_ms >= expires_ms`. Lookups
//! are pure: they return expired flows too, and the caller decides (the
//! worker treats an expired flow as absent). [`Conntrack::expire`] removes
//! expired flows with bounded work per call from a persistent cursor that
//! wraps around the slab.
//!
//! # Early drop
//! When the table is full, [`Conntrack::insert`] scans up to
//! `early_drop_scan` slots from the sweep cursor (like Linux `early_drop`)
//! and evicts the first expired flow, else the first flow that never saw a
//! reply (not assured). A replied, unexpired flow is never evicted. The victim
//! is returned so the caller can release its SNAT tuple.
//!
//! TCP state tracking is in [`tcp`] (simplified Linux
//! `nf_conntrack_proto_tcp.c`, RFC 9293 states), sequence-window tracking
//! (Linux's `tcp_in_window`, RFC 5961 RST rules) in [`window`].
//!
//! # Layout
//! This file: the table (slab, free list, insert, lookup, track, remove).
//! `record.rs`: the flow record ([`Flow`], [`FlowId`], [`Dir`],
//! [`FlowState`]). `splice.rs`: the SYN proxy's [`Splice`] states.
//! `expiry.rs`: the expiry sweep and early drop.
//! `index.rs`: the key index. [`tcp`]: the TCP state machine. [`timeouts`]:
//! per-state timeouts. [`affinity`]: the ClientIP affinity table.
//!
//! # Panics
//! None on the packet path: slots are reached with `get`, the free list and
//! the index never grow past their reservations, deadlines saturate.

pub mod affinity;
mod expiry;
mod index;
mod record;
mod splice;
pub mod tcp;
pub mod timeouts;
pub mod window;

pub use record::{Dir, Flow, FlowId, FlowState};
pub use splice::{
    DEFAULT_SYN_PROXY_SHARE, MAX_SYN_PROXY_FLOWS, NO_WSCALE, Splice, default_syn_proxy_flows,
};
pub use tcp::TcpState;
pub use timeouts::Timeouts;

use crate::flow::{FlowKeyOf, IpFamily, Proto, TableHasher};
use crate::wire::tcp::flags as tcp_bits;
use index::{Index, IndexFull};
use record::flag;
use splice::SpliceTable;
use std::net::Ipv4Addr;

/// Largest configurable capacity (`slot << 1 | dir` must fit in a `u32`).
pub const MAX_CAPACITY: u32 = 1 << 30;
/// Default slots examined by one expiry sweep in the poll loop.
pub const DEFAULT_EXPIRY_SCAN_PER_POLL: u32 = 64;
/// Default slots examined when looking for an early-drop victim.
pub const DEFAULT_EARLY_DROP_SCAN: u32 = 64;
/// Index entries per flow (original and reply key).
const INDEX_ENTRIES_PER_FLOW: usize = 2;
/// End of the free list.
const NO_SLOT: u32 = u32::MAX;

/// Configuration of one core's table.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ConntrackConfig {
    /// Maximum number of live flows, `1..=MAX_CAPACITY`.
    pub capacity: u32,
    pub timeouts: Timeouts,
    /// Slots examined per call of [`Conntrack::poll_expire`] (the worker's
    /// housekeeping slice: after every idle poll, once per millisecond
    /// while busy); non-zero.
    pub expiry_scan_per_poll: u32,
    /// Slots examined for an early-drop victim when full; 0 disables early
    /// drop.
    pub early_drop_scan: u32,
    /// SYN-proxied flows the table can hold at once (their splice states),
    /// `0..=MAX_SYN_PROXY_FLOWS` (more than `capacity` is taken as
    /// `capacity`); default [`default_syn_proxy_flows`]. A cookie-validated handshake beyond it
    /// is dropped (`syn_proxy_table_full`).
    pub syn_proxy_flows: u32,
}

impl ConntrackConfig {
    /// Default timeouts and scan lengths with the given capacity.
    pub fn with_capacity(capacity: u32) -> Self {
        ConntrackConfig {
            capacity,
            timeouts: Timeouts::default(),
            expiry_scan_per_poll: DEFAULT_EXPIRY_SCAN_PER_POLL,
            early_drop_scan: DEFAULT_EARLY_DROP_SCAN,
            syn_proxy_flows: default_syn_proxy_flows(capacity),
        }
    }
}

/// Invalid configuration or allocation failure when building a table.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
pub enum ConntrackError {
    #[error("conntrack capacity {capacity} is out of range 1..={max}")]
    InvalidCapacity { capacity: u32, max: u32 },
    #[error("conntrack timeout {name} is zero")]
    ZeroTimeout { name: &'static str },
    #[error("conntrack expiry_scan_per_poll is zero: flows would never expire")]
    ZeroExpiryScan,
    #[error("conntrack syn_proxy_flows {flows} is above {max}")]
    InvalidSynProxyFlows { flows: u32, max: u32 },
    #[error("cannot allocate the conntrack {part} for {capacity} flows")]
    Alloc { part: &'static str, capacity: u32 },
}

/// Why [`Conntrack::insert`] (or [`Conntrack::rekey_reply`]) refused.
#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
pub enum InsertError<A: IpFamily = Ipv4Addr> {
    #[error("conntrack table is full and no flow could be early-dropped")]
    Full,
    #[error("the original or reply key is already tracked (or both keys are equal)")]
    KeyExists,
    #[error("the flow id does not name a live flow")]
    UnknownFlow,
    /// No room within the index's probe bound of a key's home, even after
    /// an early drop there. `evicted`: the flow that early drop removed (its
    /// SNAT tuple is the caller's to release, as with [`Inserted::evicted`]).
    #[error("the index has no room near the key's home and no flow there could be early-dropped")]
    Crowded { evicted: Option<Flow<A>> },
}

/// What [`Conntrack::probe`] found: the first index entry with the key's
/// hash tag, if any, and when.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Probe {
    entry: u32,
    /// [`Conntrack`]'s count of inserts and rekeys at probe time.
    keys_added: u64,
}

impl Probe {
    const NO_ENTRY: u32 = u32::MAX;
    /// A probe that knows nothing (answered by a full lookup).
    pub const NONE: Probe = Probe {
        entry: Probe::NO_ENTRY,
        keys_added: u64::MAX,
    };
}

/// What a new flow is made of.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct FlowInit<A = Ipv4Addr> {
    pub orig: FlowKeyOf<A>,
    pub reply: FlowKeyOf<A>,
    pub service: u32,
    pub backend: u32,
    pub client_mac: [u8; 6],
    pub client_port: u8,
    pub snat: bool,
}

/// A successful insert.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Inserted<A = Ipv4Addr> {
    pub id: FlowId,
    /// The flow early-dropped to make room, copied out so the caller can
    /// release its SNAT tuple.
    pub evicted: Option<Flow<A>>,
}

/// Result of [`Conntrack::track_checked`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Tracked {
    /// The flow's state after the packet.
    pub state: FlowState,
    /// False when the packet is invalid in the flow's state (or the id is not
    /// live): nothing changed, the deadline was not refreshed.
    pub valid: bool,
}

/// Per-slot TCP state beside the flow record (see the module docs): 32 B,
/// aligned so that no entry straddles a cache line. The two sides' window
/// scales are in the record ([`Flow`]'s `wscale`, one byte).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
#[repr(align(32))]
pub struct TcpExt {
    pub win: [window::TcpWindow; 2],
}

/// One core's flow table of one address family (`Conntrack` is IPv4's,
/// `Conntrack<Ipv6Addr>` IPv6's: monomorphised, see [`IpFamily`]). See the
/// module docs for the layout and invariants.
pub struct Conntrack<A = Ipv4Addr> {
    slab: Vec<Flow<A>>,
    /// TCP window-tracking state per slot (parallel to `slab`, so [`Flow`]
    /// stays one cache line; UDP flows never touch it).
    tcp: Vec<TcpExt>,
    /// Splice states of the SYN-proxied flows.
    splices: SpliceTable,
    /// First free slot ([`NO_SLOT`]: none); see the module docs.
    free_head: u32,
    /// Free slots.
    free_len: u32,
    index: Index,
    /// Inserts and rekeys so far (never wraps: one per packet at most); see
    /// [`Probe`].
    keys_added: u64,
    /// Next slot the expiry sweep (and early drop) looks at.
    cursor: u32,
    timeouts: Timeouts,
    expiry_scan_per_poll: u32,
    early_drop_scan: u32,
    /// Live flows per [`FlowState::ordinal`].
    state_counts: [u32; FlowState::COUNT],
    /// Target of [`Conntrack::flow_mut`] for an id from another table.
    scratch: Flow<A>,
    /// What [`Conntrack::flow`] shows for an id from another table (a free
    /// slot's contents; never written).
    vacant: Flow<A>,
    /// Places keys in the index (keyed: see the module docs).
    hasher: TableHasher,
}

impl<A: IpFamily> std::fmt::Debug for Conntrack<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conntrack")
            .field("len", &self.len())
            .field("capacity", &self.capacity())
            .field("cursor", &self.cursor)
            .field("memory_bytes", &self.memory_bytes())
            .finish_non_exhaustive()
    }
}

impl<A: IpFamily> Conntrack<A> {
    /// Validates `config` and allocates the slab, free list and index;
    /// keys are placed with `hasher` (the process's [`TableHasher`]).
    pub fn new(config: ConntrackConfig, hasher: TableHasher) -> Result<Self, ConntrackError> {
        let cap = config.capacity;
        if cap == 0 || cap > MAX_CAPACITY {
            return Err(ConntrackError::InvalidCapacity {
                capacity: cap,
                max: MAX_CAPACITY,
            });
        }
        if let Some(name) = config.timeouts.first_zero() {
            return Err(ConntrackError::ZeroTimeout { name });
        }
        if config.expiry_scan_per_poll == 0 {
            return Err(ConntrackError::ZeroExpiryScan);
        }
        if config.syn_proxy_flows > MAX_SYN_PROXY_FLOWS {
            return Err(ConntrackError::InvalidSynProxyFlows {
                flows: config.syn_proxy_flows,
                max: MAX_SYN_PROXY_FLOWS,
            });
        }
        let alloc = |part| ConntrackError::Alloc {
            part,
            capacity: cap,
        };
        let n = cap as usize;

        let mut slab = Vec::new();
        slab.try_reserve_exact(n).map_err(|_| alloc("slab"))?;
        // The free list: 0 -> 1 -> ... -> cap - 1, so flows fill the slab
        // from the front.
        slab.extend(
            (1..=cap).map(|next| Flow::free_slot(if next == cap { NO_SLOT } else { next })),
        );

        let mut tcp = Vec::new();
        tcp.try_reserve_exact(n)
            .map_err(|_| alloc("TCP tracking array"))?;
        tcp.resize(n, TcpExt::default());

        let splices =
            SpliceTable::new(config.syn_proxy_flows.min(cap)).map_err(|_| alloc("splice array"))?;

        let index = Index::new(n * INDEX_ENTRIES_PER_FLOW).map_err(|_| alloc("index"))?;

        Ok(Conntrack {
            slab,
            tcp,
            splices,
            free_head: 0,
            free_len: cap,
            index,
            keys_added: 0,
            cursor: 0,
            timeouts: config.timeouts,
            expiry_scan_per_poll: config.expiry_scan_per_poll,
            early_drop_scan: config.early_drop_scan,
            state_counts: [0; FlowState::COUNT],
            scratch: Flow::FREE,
            vacant: Flow::FREE,
            hasher,
        })
    }

    /// Where `key` goes in this table (what every `hash` argument must be).
    #[inline]
    pub fn hash(&self, key: &FlowKeyOf<A>) -> u64 {
        self.hasher.hash(key)
    }

    /// The keyed hash of this table (the parse stage computes each packet's
    /// hash with it once).
    #[inline]
    pub fn hasher(&self) -> &TableHasher {
        &self.hasher
    }

    /// The flow and direction `key` belongs to. `hash` must be
    /// [`Conntrack::hash`]`(key)`. Pure: expired flows are returned too.
    #[inline]
    pub fn lookup(&self, key: &FlowKeyOf<A>, hash: u64) -> Option<(FlowId, Dir)> {
        let slab = &self.slab;
        self.index
            .find(hash, |e| {
                slab.get((e >> 1) as usize)
                    .is_some_and(|f| f.key_of_entry(e) == key)
            })
            .map(|e| (FlowId(e >> 1), Dir::from_bit(e)))
    }

    /// Pass 1 of a batched lookup: start loading the index line where the
    /// lookup of `hash` begins. A hint only; never changes anything.
    #[inline]
    pub fn prefetch_index(&self, hash: u64) {
        self.index.prefetch(hash);
    }

    /// Pass 2 of a batched lookup: probe the index for `hash` (best after
    /// [`Conntrack::prefetch_index`]), start loading the record of the first
    /// entry whose hash tag matches, and remember that entry for
    /// [`Conntrack::lookup_probed`].
    #[inline]
    pub fn probe(&self, hash: u64) -> Probe {
        let entry = self.index.find(hash, |_| true);
        if let Some(f) = entry.and_then(|e| self.slab.get((e >> 1) as usize)) {
            index::touch(&f.expires_ms);
        }
        Probe {
            entry: entry.unwrap_or(Probe::NO_ENTRY),
            keys_added: self.keys_added,
        }
    }

    /// Pass 3 of a batched lookup: [`Conntrack::lookup`], answered from the
    /// probe without a second index walk when possible: a candidate that is
    /// a live flow with exactly this key is the hit, and "no entry with this
    /// hash tag" is a miss as long as no key was added since the probe
    /// (removals never make a key appear). Anything else takes a full
    /// lookup, so any probe gives the right answer.
    #[inline]
    pub fn lookup_probed(
        &self,
        key: &FlowKeyOf<A>,
        hash: u64,
        probe: Probe,
    ) -> Option<(FlowId, Dir)> {
        let e = probe.entry;
        if e == Probe::NO_ENTRY {
            if probe.keys_added == self.keys_added {
                return None;
            }
        } else if let Some(f) = self.slab.get((e >> 1) as usize)
            && f.is_live()
            && f.key_of_entry(e) == key
        {
            return Some((FlowId(e >> 1), Dir::from_bit(e)));
        }
        self.lookup(key, hash)
    }

    /// Whether `key` (with `hash = self.hash(key)`) is tracked.
    #[inline]
    pub fn contains(&self, key: &FlowKeyOf<A>, hash: u64) -> bool {
        self.lookup(key, hash).is_some()
    }

    /// The record in slot `id`. For an id that was removed this is a record
    /// that is not [`Flow::is_live`]; an id from another, larger table reads
    /// as an empty record. Never panics.
    #[inline]
    pub fn flow(&self, id: FlowId) -> &Flow<A> {
        self.slab.get(id.index()).unwrap_or(&self.vacant)
    }

    /// Mutable access to the record of live flow `id`; for any other id a
    /// scratch record (a free slot's record holds the free list).
    #[inline]
    pub fn flow_mut(&mut self, id: FlowId) -> &mut Flow<A> {
        match self.slab.get_mut(id.index()).filter(|f| f.is_live()) {
            Some(f) => f,
            None => {
                self.scratch = Flow::FREE;
                &mut self.scratch
            }
        }
    }

    /// Tracks a new flow created by a packet with `tcp_flags` (0 for UDP and
    /// ICMP) at `now_ms`. `orig_hash`/`reply_hash` must be the keys'
    /// [`Conntrack::hash`].
    ///
    /// TCP flows start in SYN_SENT on a SYN (see [`tcp`] for mid-stream
    /// pickup); UDP and ICMP flows start unreplied. When the table is full an
    /// early-drop victim is evicted and returned, else `Err(Full)`. A key
    /// already tracked, or `orig == reply`, gives `Err(KeyExists)`; on any
    /// error nothing is modified except the early-drop scan position.
    pub fn insert(
        &mut self,
        init: FlowInit<A>,
        orig_hash: u64,
        reply_hash: u64,
        tcp_flags: u8,
        now_ms: u64,
    ) -> Result<Inserted<A>, InsertError<A>> {
        debug_assert_eq!(orig_hash, self.hash(&init.orig), "orig_hash");
        debug_assert_eq!(reply_hash, self.hash(&init.reply), "reply_hash");
        if init.orig == init.reply
            || self.contains(&init.orig, orig_hash)
            || self.contains(&init.reply, reply_hash)
        {
            return Err(InsertError::KeyExists);
        }

        let mut evicted = None;
        if self.free_len == 0 {
            let victim = self.early_drop_victim(now_ms).ok_or(InsertError::Full)?;
            evicted = self.unlink(victim);
        }
        let slot = self.pop_free().ok_or(InsertError::Full)?;

        let (state, first_fin) = match init.orig.proto {
            Proto::Tcp => {
                let (s, fin) = tcp::initial_state(tcp_flags);
                (FlowState::Tcp(s), fin)
            }
            Proto::Udp => (FlowState::Udp, Dir::Original),
            Proto::Icmp => (FlowState::Icmp, Dir::Original),
        };
        let mut flags = flag::LIVE;
        if init.snat {
            flags |= flag::SNAT;
        }
        if first_fin == Dir::Reply {
            flags |= flag::FIN_FIRST_REPLY;
        }
        let flow = Flow {
            orig: init.orig,
            reply: init.reply,
            service: init.service,
            backend: init.backend,
            expires_ms: now_ms.saturating_add(self.timeouts.for_state(state, false)),
            client_mac: init.client_mac,
            client_port: init.client_port,
            created_s: u32::try_from(now_ms / 1000).unwrap_or(u32::MAX),
            state,
            flags,
            splice_at: 0,
            wscale: window::WindowScales::NONE,
        };
        if init.orig.proto == Proto::Tcp
            && let Some(t) = self.tcp.get_mut(slot as usize)
        {
            t.win = [window::TcpWindow::default(); 2];
        }
        match self.slab.get_mut(slot as usize) {
            Some(rec) => *rec = flow,
            None => {
                // Unreachable: the free list only holds slab indices.
                return Err(InsertError::Full);
            }
        }
        // Room in the index: at most two entries per flow, which it is
        // sized for; but a probe window may be full (bounded probing).
        self.keys_added = self.keys_added.wrapping_add(1);
        if let Err(full) = self.index_both(slot, orig_hash, reply_hash, now_ms, &mut evicted) {
            self.push_free(slot);
            return Err(match full {
                IndexFull::Full => InsertError::Full,
                IndexFull::Crowded => InsertError::Crowded { evicted },
            });
        }
        self.count(state, true);
        Ok(Inserted {
            id: FlowId(slot),
            evicted,
        })
    }

    /// Advances flow `id` by one packet travelling in `dir` at `now_ms`
    /// (`tcp_flags` 0 for UDP/ICMP) and returns its new state. Invalid TCP
    /// segments leave the flow untouched; see [`Conntrack::track_checked`].
    #[inline]
    pub fn track(&mut self, id: FlowId, dir: Dir, tcp_flags: u8, now_ms: u64) -> FlowState {
        self.track_checked(id, dir, tcp_flags, now_ms).state
    }

    /// [`Conntrack::track`], also telling whether the packet was valid in
    /// the flow's state (kube-proxy drops conntrack-INVALID packets).
    ///
    /// A valid packet moves the state, marks the flow replied if `dir` is
    /// [`Dir::Reply`], and sets `expires_ms = now_ms + timeout(new state)`.
    #[inline]
    pub fn track_checked(&mut self, id: FlowId, dir: Dir, tcp_flags: u8, now_ms: u64) -> Tracked {
        let Some(flow) = self.slab.get_mut(id.index()) else {
            return Tracked {
                state: Flow::<A>::FREE.state,
                valid: false,
            };
        };
        let old = flow.state;
        if !flow.is_live() {
            return Tracked {
                state: old,
                valid: false,
            };
        }
        // Fast path, the bulk of all traffic: an ACK-only segment (no SYN,
        // FIN or RST) of an ESTABLISHED flow keeps the state and every flag
        // but REPLIED; exactly what `tcp::step` returns for it ("keep").
        if old == FlowState::Tcp(TcpState::Established)
            && tcp_flags & (tcp_bits::SYN | tcp_bits::FIN | tcp_bits::RST | tcp_bits::ACK)
                == tcp_bits::ACK
        {
            if dir == Dir::Reply {
                flow.flags |= flag::REPLIED;
            }
            flow.expires_ms = now_ms.saturating_add(self.timeouts.tcp_established_ms);
            return Tracked {
                state: old,
                valid: true,
            };
        }
        let new = match old {
            FlowState::Tcp(s) => match tcp::step(s, flow.first_fin(), dir, tcp_flags) {
                None => {
                    return Tracked {
                        state: old,
                        valid: false,
                    };
                }
                Some(next) => {
                    if next.reopened {
                        flow.flags &= !(flag::REPLIED | flag::FIN_FIRST_REPLY);
                    }
                    if next.first_fin == Dir::Reply {
                        flow.flags |= flag::FIN_FIRST_REPLY;
                    } else {
                        flow.flags &= !flag::FIN_FIRST_REPLY;
                    }
                    FlowState::Tcp(next.state)
                }
            },
            other => other,
        };
        if dir == Dir::Reply {
            flow.flags |= flag::REPLIED;
        }
        flow.state = new;
        flow.expires_ms = now_ms.saturating_add(self.timeouts.for_state(new, flow.replied()));
        if old != new {
            self.count(old, false);
            self.count(new, true);
        }
        Tracked {
            state: new,
            valid: true,
        }
    }

    /// Removes flow `id` and returns its record, or `None` if `id` is not
    /// live (already removed, expired or evicted): a double remove cannot
    /// release a SNAT tuple twice.
    pub fn remove(&mut self, id: FlowId) -> Option<Flow<A>> {
        self.unlink(id.0)
    }

    /// Points the reply key of flow `id` at a new backend (e.g. re-selecting
    /// a UDP flow whose backend disappeared). `reply_hash` must be
    /// [`Conntrack::hash`]`(reply)`. Fails with `KeyExists` if another flow
    /// (or this flow's original direction) uses `reply`, with `Crowded` if
    /// its probe window is full; nothing changes on error.
    pub fn rekey_reply(
        &mut self,
        id: FlowId,
        reply: FlowKeyOf<A>,
        reply_hash: u64,
    ) -> Result<(), InsertError<A>> {
        debug_assert_eq!(reply_hash, self.hash(&reply), "reply_hash");
        let slot = id.0;
        let Some(flow) = self.slab.get(id.index()).filter(|f| f.is_live()) else {
            return Err(InsertError::UnknownFlow);
        };
        let (old_reply, orig) = (flow.reply, flow.orig);
        if old_reply == reply {
            return Ok(());
        }
        if orig == reply || self.contains(&reply, reply_hash) {
            return Err(InsertError::KeyExists);
        }
        self.unindex(slot << 1 | 1, self.hash(&old_reply));
        self.keys_added = self.keys_added.wrapping_add(1);
        if self.index.insert(reply_hash, slot << 1 | 1).is_err() {
            // Crowded (the old entry's room is elsewhere): put it back.
            let restored = self
                .index
                .insert(self.hasher.hash(&old_reply), slot << 1 | 1)
                .is_ok();
            debug_assert!(restored, "the old reply entry's window had room");
            return Err(InsertError::Crowded { evicted: None });
        }
        if let Some(rec) = self.slab.get_mut(id.index()) {
            rec.reply = reply;
        }
        Ok(())
    }

    /// Live flows.
    #[inline]
    pub fn len(&self) -> usize {
        self.slab.len() - self.free_len as usize
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Maximum number of live flows.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.slab.len()
    }

    /// Live flows, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (FlowId, &Flow<A>)> + '_ {
        self.slab
            .iter()
            .enumerate()
            .filter(|(_, f)| f.is_live())
            .map(|(i, f)| (FlowId(i as u32), f))
    }

    /// Live flows among the `count` slots from slot `start` (clamped to
    /// the table), in slot order: bounded work for listings that walk the
    /// table a chunk at a time.
    pub fn live_in(
        &self,
        start: usize,
        count: usize,
    ) -> impl Iterator<Item = (FlowId, &Flow<A>)> + '_ {
        let end = start.saturating_add(count).min(self.slab.len());
        self.slab
            .get(start.min(end)..end)
            .unwrap_or_default()
            .iter()
            .enumerate()
            .filter(|(_, f)| f.is_live())
            .map(move |(i, f)| (FlowId((start + i) as u32), f))
    }

    /// Marks flow `id` SYN-proxied with `splice` as its state (replacing
    /// the state of a flow that already is). False (nothing changed) when
    /// `id` is not live, or when every splice state is taken (see
    /// [`Conntrack::splice_room`]).
    pub fn set_splice(&mut self, id: FlowId, splice: Splice) -> bool {
        let Some(flow) = self.slab.get_mut(id.index()).filter(|f| f.is_live()) else {
            return false;
        };
        if flow.syn_proxied() {
            if let Some(s) = self.splices.get_mut(flow.splice_at) {
                *s = splice;
            }
            return true;
        }
        let Some(at) = self.splices.take(splice) else {
            return false;
        };
        flow.flags |= flag::SYN_PROXIED;
        flow.splice_at = at;
        true
    }

    /// A new flow could be SYN-proxied: a splice state is free.
    #[inline]
    pub fn splice_room(&self) -> bool {
        self.splices.has_room()
    }

    /// SYN-proxied flows (splice states taken).
    pub fn syn_proxied_len(&self) -> usize {
        self.splices.taken()
    }

    /// The splice state of a SYN-proxied flow (`None` for any other id).
    #[inline]
    pub fn splice(&self, id: FlowId) -> Option<&Splice> {
        let flow = self
            .slab
            .get(id.index())
            .filter(|f| f.is_live() && f.syn_proxied())?;
        self.splices.get(flow.splice_at)
    }

    /// Mutable [`Conntrack::splice`].
    #[inline]
    pub fn splice_mut(&mut self, id: FlowId) -> Option<&mut Splice> {
        let flow = self
            .slab
            .get(id.index())
            .filter(|f| f.is_live() && f.syn_proxied())?;
        self.splices.get_mut(flow.splice_at)
    }

    /// Window tracking of a TCP segment of flow `id` travelling in `dir`
    /// (see [`window`]): updates the flow's windows when the segment is
    /// accepted. A slot that is not live accepts (the caller checks
    /// liveness).
    #[inline(always)]
    pub fn check_window(
        &mut self,
        id: FlowId,
        dir: Dir,
        seg: &window::SegmentInfo,
    ) -> window::WindowVerdict {
        match (self.tcp.get_mut(id.index()), self.slab.get_mut(id.index())) {
            (Some(t), Some(f)) => window::check(&mut t.win, &mut f.wscale, dir, seg),
            _ => window::WindowVerdict::Accept,
        }
    }

    /// The window-tracking state of flow `id` (original sender, reply
    /// sender) and its window scales, e.g. to set it up for a SYN-proxied
    /// flow whose handshakes the table never saw.
    #[inline]
    pub fn windows_mut(
        &mut self,
        id: FlowId,
    ) -> Option<(&mut [window::TcpWindow; 2], &mut window::WindowScales)> {
        let flow = self.slab.get_mut(id.index()).filter(|f| f.is_live())?;
        let t = self.tcp.get_mut(id.index())?;
        Some((&mut t.win, &mut flow.wscale))
    }

    /// The window-tracking state and window scales of flow `id` (`None`
    /// when it is not live).
    pub fn windows(&self, id: FlowId) -> Option<([window::TcpWindow; 2], window::WindowScales)> {
        let flow = self.slab.get(id.index()).filter(|f| f.is_live())?;
        Some((self.tcp.get(id.index())?.win, flow.wscale))
    }

    /// Live flows in the half-open states (SYN_SENT, SYN_RECV): what the
    /// SYN proxy's `auto` mode compares with its threshold.
    #[inline]
    pub fn half_open(&self) -> u32 {
        self.count_in_state(FlowState::Tcp(TcpState::SynSent))
            + self.count_in_state(FlowState::Tcp(TcpState::SynRecv))
    }

    /// Bytes allocated by the table: slab (with its free list) + TCP array
    /// + splice array + index.
    pub fn memory_bytes(&self) -> usize {
        self.tcp.capacity() * std::mem::size_of::<TcpExt>()
            + self.slab.capacity() * std::mem::size_of::<Flow<A>>()
            + self.splices.allocation_size()
            + self.index.allocation_size()
    }

    /// Index entries held and allocated (two per live flow; tests, stats).
    pub fn index_entries(&self) -> (usize, usize) {
        (self.index.len(), self.index.entries())
    }

    /// Live flows in `state`.
    #[inline]
    pub fn count_in_state(&self, state: FlowState) -> u32 {
        self.state_counts.get(state.ordinal()).copied().unwrap_or(0)
    }

    /// Live flows per state, in [`FlowState::ALL`] order (kept up to date on
    /// every change, so reading it costs nothing on the worker).
    pub fn count_by_state(&self) -> [(FlowState, u32); FlowState::COUNT] {
        FlowState::ALL.map(|s| (s, self.count_in_state(s)))
    }

    /// The configured timeouts.
    pub fn timeouts(&self) -> &Timeouts {
        &self.timeouts
    }

    fn count(&mut self, state: FlowState, add: bool) {
        if let Some(c) = self.state_counts.get_mut(state.ordinal()) {
            *c = if add {
                c.saturating_add(1)
            } else {
                c.saturating_sub(1)
            };
        }
    }

    /// Index the new flow in `slot` under both hashes. A crowded probe
    /// window gets one early drop inside it (an expired or unassured flow
    /// with an entry there, when no victim was evicted already) and one
    /// more try; else the insert is refused and nothing stays indexed.
    fn index_both(
        &mut self,
        slot: u32,
        orig_hash: u64,
        reply_hash: u64,
        now_ms: u64,
        evicted: &mut Option<Flow<A>>,
    ) -> Result<(), IndexFull> {
        for (dir, hash) in [(0, orig_hash), (1, reply_hash)] {
            let mut placed = self.index.insert(hash, slot << 1 | dir);
            if placed == Err(IndexFull::Crowded) && evicted.is_none() {
                let victim = self.index.window(hash).map(|e| e >> 1).find(|&s| {
                    s != slot
                        && self
                            .slab
                            .get(s as usize)
                            .is_some_and(|f| f.is_live() && (f.is_expired(now_ms) || f.evictable()))
                });
                if let Some(victim) = victim {
                    *evicted = self.unlink(victim);
                    placed = self.index.insert(hash, slot << 1 | dir);
                }
            }
            if let Err(full) = placed {
                if dir == 1 {
                    self.unindex(slot << 1, orig_hash);
                }
                return Err(full);
            }
        }
        Ok(())
    }

    /// Removes the live flow in `slot` from the index and the slab (and
    /// gives its splice state back).
    fn unlink(&mut self, slot: u32) -> Option<Flow<A>> {
        let flow = *self.slab.get(slot as usize).filter(|f| f.is_live())?;
        self.unindex(slot << 1, self.hash(&flow.orig));
        self.unindex(slot << 1 | 1, self.hash(&flow.reply));
        if flow.syn_proxied() {
            self.splices.give_back(flow.splice_at);
        }
        self.push_free(slot);
        self.count(flow.state, false);
        Some(flow)
    }

    /// Takes the first free slot.
    #[inline]
    fn pop_free(&mut self) -> Option<u32> {
        let slot = self.free_head;
        let next = self.slab.get(slot as usize)?.next_free();
        self.free_head = next;
        self.free_len -= 1;
        Some(slot)
    }

    /// Frees `slot` (whose flow is unlinked or was never indexed).
    #[inline]
    fn push_free(&mut self, slot: u32) {
        if let Some(rec) = self.slab.get_mut(slot as usize) {
            *rec = Flow::free_slot(self.free_head);
            self.free_head = slot;
            self.free_len += 1;
        }
    }

    /// Removes exactly the index entry `entry` (compared by identity, not by
    /// key).
    fn unindex(&mut self, entry: u32, hash: u64) {
        let found = self.index.remove(hash, entry);
        debug_assert!(found, "index entry {entry} missing");
    }
}

#[cfg(test)]
mod tests;
