//! SNAT tuple allocation with a TIME_WAIT-aware quarantine.
//!
//! Portico does full NAT: a client flow `client:cport -> VIP:vport` leaves the
//! gateway as `snat_addr:snat_port -> backend:bport`. The flow's *reply key* is
//! `FlowKey { proto, src: backend:bport, dst: snat_addr:snat_port }` (see
//! [`reply_key`]); it must identify exactly one flow, so an [`SnatAllocator`]
//! hands out the SNAT side of it.
//!
//! # Invariants and policy
//!
//! * **Uniqueness per tuple.** A tuple `(proto, SNAT IP, SNAT port, backend IP,
//!   backend port)` is never handed out while it is in use. "In use" is decided
//!   by the caller's conntrack, through the `in_use` closure given to
//!   [`SnatAllocator::alloc`] (true when the reply key is tracked). The same
//!   SNAT port may serve several backends at once.
//! * **Per-core slices.** Each of `workers` workers owns a disjoint, contiguous
//!   slice of the configured port range ([`port_slice`]); together the slices
//!   cover the range exactly, and [`owner_of_port`] maps a port back to its
//!   worker, so replies can be steered (or handed over) to the owning core by
//!   SNAT port alone. An allocator only hands out ports of its own slice.
//! * **Random start, bounded probing** (like Linux's
//!   `NF_NAT_RANGE_PROTO_RANDOM_FULLY`, but per core). Every allocation draws a
//!   start port in the slice from a per-worker xorshift64* generator (no
//!   syscalls), then probes up to `probe_limit` ports linearly from it,
//!   wrapping inside the slice, for each SNAT IP in configuration order. The
//!   first IP is used until its candidates are exhausted, then the next one;
//!   when no IP had a free tuple in its window, up to four rounds retry from
//!   fresh random starts before a quarantined tuple is reused or the
//!   allocation fails.
//! * **Quarantine (TCP only).** Released ports are reused oldest-released first
//!   and, while the port space allows, not within the quarantine period towards
//!   the same backend. Precisely: a released TCP tuple is quarantined for
//!   `quarantine_ms` (default 60 000 ms, Linux's `TCP_TIMEWAIT_LEN`, its value
//!   for the 2 x MSL TIME-WAIT wait of RFC 9293). Probing skips quarantined
//!   tuples.
//!   When probing over all SNAT IPs finds no tuple that is neither in use nor
//!   quarantined, the quarantined candidate with the oldest release time among
//!   those probed is handed out instead, flagged
//!   [`SnatTuple::reused_in_quarantine`] and counted in
//!   [`SnatStats::quarantine_reuses`]. Without this a new SYN can reach a
//!   backend socket still in TIME_WAIT, which answers it with an ACK of the old
//!   connection or drops it under PAWS (RFC 7323 section 5): the SYN
//!   retransmissions kernel NAT shows under connection churn. UDP and ICMP
//!   tuples are free again as soon as they are released.
//! * **Bounded quarantine memory.** The quarantine is a fixed-capacity FIFO
//!   ring plus a hash index, both allocated in [`SnatAllocator::new`]. When the
//!   ring is full the oldest entry is forgotten early and counted in
//!   [`SnatStats::quarantine_overflows`]. Expired entries are purged lazily
//!   from the front, at most a few per call; an expired entry that has not been
//!   purged yet is treated as free.
//! * **Exhaustion** is the value [`SnatExhausted`] (counted in
//!   [`SnatStats::exhausted`]), never a panic.
//! * **Time** is the caller's monotonic milliseconds; a `now_ms` smaller than
//!   one seen before is treated as the latest one seen.
//!
//! Hot-path methods ([`SnatAllocator::alloc`], [`SnatAllocator::release`],
//! [`SnatAllocator::expire`]) do not allocate, lock, make syscalls or panic.
//! The caller must call [`SnatAllocator::release`] exactly once for each tuple
//! [`SnatAllocator::alloc`] returned, when conntrack removes the flow;
//! [`SnatStats::in_use`] counts allocations minus releases.

mod quarantine;

use crate::counters::SnatAddrStats;
use crate::flow::{FlowKeyOf, IpFamily, Proto, TableHasher};
use quarantine::Quarantine;
use std::net::Ipv4Addr;
use std::ops::RangeInclusive;

/// Probing rounds (each from a fresh random start, over every SNAT address)
/// before an allocation settles for a quarantined tuple or fails.
const PROBE_ROUNDS: u32 = 4;
/// Front entries examined for expiry on each `alloc`/`release`.
const EXPIRE_PER_CALL: usize = 8;

/// The Linux TIME_WAIT length (`TCP_TIMEWAIT_LEN`).
pub const DEFAULT_QUARANTINE_MS: u64 = 60_000;
/// Quarantine entries per worker: 60 s of churn at about 4,400 closed TCP
/// connections per second per worker before the oldest are forgotten early
/// (counted as overflows). About 12 MiB per worker.
pub const DEFAULT_QUARANTINE_CAPACITY: usize = 262_144;
pub const DEFAULT_PROBE_LIMIT: u32 = 256;
/// Candidates whose lookups [`SnatAllocator::alloc_hashed`] overlaps once
/// the first candidate was taken.
const PREFETCH_WINDOW: u32 = 4;
pub const DEFAULT_PORT_RANGE: RangeInclusive<u16> = 1024..=65535;

/// SNAT configuration, shared by all workers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnatConfig<A = Ipv4Addr> {
    /// SNAT source addresses, in the order they are tried.
    pub addrs: Vec<A>,
    /// Ports handed out, split between the workers.
    pub port_range: RangeInclusive<u16>,
    /// How long a released TCP tuple is kept from the same backend.
    pub quarantine_ms: u64,
    /// Most TCP tuples remembered in quarantine per worker.
    pub quarantine_capacity: usize,
    /// Ports probed per SNAT address and allocation.
    pub probe_limit: u32,
}

impl<A> Default for SnatConfig<A> {
    fn default() -> Self {
        SnatConfig {
            addrs: Vec::new(),
            port_range: DEFAULT_PORT_RANGE,
            quarantine_ms: DEFAULT_QUARANTINE_MS,
            quarantine_capacity: DEFAULT_QUARANTINE_CAPACITY,
            probe_limit: DEFAULT_PROBE_LIMIT,
        }
    }
}

/// Configuration errors of [`SnatAllocator::new`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnatError {
    #[error("no SNAT addresses configured")]
    NoAddresses,
    #[error("SNAT address {0} is configured twice")]
    DuplicateAddress(std::net::IpAddr),
    #[error("SNAT port range {start}..={end} is empty")]
    EmptyRange { start: u16, end: u16 },
    #[error("worker count is zero")]
    NoWorkers,
    #[error("worker {worker} out of range for {workers} workers")]
    WorkerOutOfRange { worker: usize, workers: usize },
    #[error("SNAT port range of {ports} ports leaves worker {worker} of {workers} no port")]
    SliceTooSmall {
        ports: u32,
        worker: usize,
        workers: usize,
    },
    #[error("SNAT probe limit is zero")]
    ZeroProbeLimit,
    #[error("SNAT quarantine capacity {0} is outside 1..=4294967295")]
    BadQuarantineCapacity(usize),
}

/// No free tuple towards the backend (the packet is dropped as
/// `DropReason::SnatExhausted`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("no free SNAT tuple towards the backend")]
pub struct SnatExhausted;

/// A tuple handed out by [`SnatAllocator::alloc`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnatTuple<A = Ipv4Addr> {
    pub addr: A,
    pub port: u16,
    /// The tuple was still in quarantine (the port space towards this backend
    /// is under pressure).
    pub reused_in_quarantine: bool,
}

/// Counters and gauges of one allocator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnatStats {
    /// Tuples handed out (total).
    pub allocations: u64,
    /// Tuples handed out and not released yet (gauge).
    pub in_use: u64,
    /// Allocations that failed for lack of a tuple (total).
    pub exhausted: u64,
    /// Tuples handed out while still in quarantine (total).
    pub quarantine_reuses: u64,
    /// Quarantined tuples forgotten early because the ring was full (total).
    pub quarantine_overflows: u64,
    /// Tuples held in quarantine, including expired ones not purged yet (gauge).
    pub quarantined: u64,
}

/// The reply key of a flow whose SNAT side is `addr:port` towards `backend`.
/// For ICMP echo the identifier takes the place of both ports (as in
/// [`FlowKeyOf`]), so the SNAT port is the identifier and the backend port
/// is ignored.
#[inline]
pub fn reply_key<A: IpFamily>(
    proto: Proto,
    addr: A,
    port: u16,
    backend: A::Socket,
) -> FlowKeyOf<A> {
    let (backend_ip, backend_port) = A::socket_parts(backend);
    let backend_port = match proto {
        Proto::Icmp => port,
        Proto::Tcp | Proto::Udp => backend_port,
    };
    FlowKeyOf::new(proto, backend_ip, backend_port, addr, port)
}

/// Ports in `range` (0 for an empty range).
#[inline]
fn range_len(range: &RangeInclusive<u16>) -> u32 {
    if range.start() > range.end() {
        0
    } else {
        u32::from(*range.end()) - u32::from(*range.start()) + 1
    }
}

/// The slice of `range` owned by `worker` of `workers`: the range is cut into
/// `workers` contiguous slices in worker order whose lengths differ by at most
/// one (the first `len % workers` slices get one port more). Returns an empty
/// range (`start > end`) when the range is empty, `worker >= workers`, or the
/// range has fewer ports than workers and this worker gets none.
pub fn port_slice(
    range: RangeInclusive<u16>,
    worker: usize,
    workers: usize,
) -> RangeInclusive<u16> {
    // `start > end`: the canonical empty inclusive range.
    const EMPTY: RangeInclusive<u16> = RangeInclusive::new(1, 0);
    let len = range_len(&range);
    if len == 0 || workers == 0 || worker >= workers {
        return EMPTY;
    }
    let (Ok(workers), Ok(worker)) = (u32::try_from(workers), u32::try_from(worker)) else {
        return EMPTY;
    };
    let base = len / workers;
    let rem = len % workers;
    let slice_len = base + u32::from(worker < rem);
    if slice_len == 0 {
        return EMPTY;
    }
    let start = u32::from(*range.start()) + worker * base + worker.min(rem);
    let end = start + slice_len - 1;
    match (u16::try_from(start), u16::try_from(end)) {
        (Ok(s), Ok(e)) => s..=e,
        _ => EMPTY,
    }
}

/// The worker whose [`port_slice`] of `range` holds `port`, or `None` when the
/// port is outside the range or `workers` is zero.
pub fn owner_of_port(range: RangeInclusive<u16>, port: u16, workers: usize) -> Option<usize> {
    let len = range_len(&range);
    if len == 0 || workers == 0 || !range.contains(&port) {
        return None;
    }
    let offset = u32::from(port) - u32::from(*range.start());
    // More workers than ports: worker i owns port start + i.
    let workers = u32::try_from(workers).unwrap_or(u32::MAX);
    let base = len / workers;
    let rem = len % workers;
    let long_part = rem * (base + 1);
    let owner = if offset < long_part {
        offset / (base + 1)
    } else {
        // Here base >= 1: offset < len = long_part + (workers - rem) * base.
        rem + (offset - long_part) / base.max(1)
    };
    usize::try_from(owner).ok()
}

/// xorshift64* (Vigna, "An experimental exploration of Marsaglia's xorshift
/// generators, scrambled", 2016). Not cryptographic: it only spreads start
/// ports, as `get_random_u32()` does for Linux's random-fully (and the
/// benchmark's spoofed SYN sources, `portico-bench`'s `pktgen`).
#[derive(Debug, Clone)]
pub struct XorShift64Star {
    state: u64,
}

impl XorShift64Star {
    /// A generator whose stream depends on every bit of `seed`.
    pub fn new(seed: u64) -> Self {
        // SplitMix64 finaliser so that nearby seeds give unrelated streams;
        // the state must not be zero.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        XorShift64Star {
            state: if z == 0 { 0x2545_f491_4f6c_dd1d } else { z },
        }
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform-enough value in `0..n` (`n >= 1`), by multiply-shift.
    #[inline]
    pub fn below(&mut self, n: u32) -> u32 {
        (((self.next_u64() >> 32) * u64::from(n)) >> 32) as u32
    }
}

/// A quarantined candidate seen while probing.
#[derive(Debug, Clone, Copy)]
struct Candidate<A> {
    addr: A,
    port: u16,
    slot: u32,
    released_ms: u64,
}

/// One worker's SNAT allocator for the SNAT addresses of one family
/// (`SnatAllocator` IPv4, `SnatAllocator<Ipv6Addr>` IPv6, with the same
/// port slices and quarantine). See the module docs for the policy.
#[derive(Debug)]
pub struct SnatAllocator<A: IpFamily = Ipv4Addr> {
    addrs: Box<[A]>,
    full_range: RangeInclusive<u16>,
    slice_start: u16,
    slice_len: u32,
    probe_limit: u32,
    quarantine_ms: u64,
    quarantine: Quarantine<A>,
    rng: XorShift64Star,
    /// Latest time seen (keeps the quarantine FIFO ordered).
    now_ms: u64,
    /// The last allocation's first candidate was in use (prefetch hint
    /// only; see [`SnatAllocator::alloc_hashed`]).
    crowded: bool,
    stats: SnatStats,
    /// In-use and exhaustion per SNAT address, in `addrs` order.
    per_addr: Box<[SnatAddrStats<A>]>,
}

impl<A: IpFamily> SnatAllocator<A> {
    /// The allocator of `worker` (of `workers`). `seed` seeds the start-port
    /// generator; it is mixed with the worker index so that workers given the
    /// same seed still draw different sequences. `hasher` is the conntrack's
    /// keyed hash: candidates are hashed with it once, for the conntrack
    /// lookup and the quarantine.
    pub fn new(
        config: &SnatConfig<A>,
        worker: usize,
        workers: usize,
        seed: u64,
        hasher: TableHasher,
    ) -> Result<Self, SnatError> {
        if config.addrs.is_empty() {
            return Err(SnatError::NoAddresses);
        }
        for (i, addr) in config.addrs.iter().enumerate() {
            if config
                .addrs
                .get(..i)
                .is_some_and(|seen| seen.contains(addr))
            {
                return Err(SnatError::DuplicateAddress(addr.to_ip()));
            }
        }
        let ports = range_len(&config.port_range);
        if ports == 0 {
            return Err(SnatError::EmptyRange {
                start: *config.port_range.start(),
                end: *config.port_range.end(),
            });
        }
        if workers == 0 {
            return Err(SnatError::NoWorkers);
        }
        if worker >= workers {
            return Err(SnatError::WorkerOutOfRange { worker, workers });
        }
        let slice = port_slice(config.port_range.clone(), worker, workers);
        let slice_len = range_len(&slice);
        if slice_len == 0 {
            return Err(SnatError::SliceTooSmall {
                ports,
                worker,
                workers,
            });
        }
        if config.probe_limit == 0 {
            return Err(SnatError::ZeroProbeLimit);
        }
        if config.quarantine_capacity == 0 || u32::try_from(config.quarantine_capacity).is_err() {
            return Err(SnatError::BadQuarantineCapacity(config.quarantine_capacity));
        }
        Ok(SnatAllocator {
            addrs: config.addrs.clone().into_boxed_slice(),
            full_range: config.port_range.clone(),
            slice_start: *slice.start(),
            slice_len,
            probe_limit: config.probe_limit,
            quarantine_ms: config.quarantine_ms,
            quarantine: Quarantine::new(config.quarantine_capacity, hasher),
            rng: XorShift64Star::new(seed ^ (worker as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            now_ms: 0,
            crowded: false,
            stats: SnatStats::default(),
            per_addr: config
                .addrs
                .iter()
                .map(|&addr| SnatAddrStats {
                    addr,
                    in_use: 0,
                    exhausted: 0,
                })
                .collect(),
        })
    }

    /// Hands out a SNAT tuple towards `backend` whose reply key is not
    /// `in_use`, following the module's policy.
    pub fn alloc(
        &mut self,
        proto: Proto,
        backend: A::Socket,
        now_ms: u64,
        mut in_use: impl FnMut(&FlowKeyOf<A>) -> bool,
    ) -> Result<SnatTuple<A>, SnatExhausted> {
        self.alloc_hashed(proto, backend, now_ms, |k, _| in_use(k), |_| {})
    }

    /// [`SnatAllocator::alloc`] for a caller whose table is keyed by
    /// the [`TableHasher`] given to [`SnatAllocator::new`]: `in_use` gets each candidate reply key with
    /// its hash (computed once, also used for the quarantine), and
    /// `prefetch` is told the hashes of the next few candidates before they
    /// are checked, so their cache misses overlap (a hint: it must not
    /// change anything). Candidates, their order and the outcome are exactly
    /// those of `alloc`.
    pub fn alloc_hashed(
        &mut self,
        proto: Proto,
        backend: A::Socket,
        now_ms: u64,
        mut in_use: impl FnMut(&FlowKeyOf<A>, u64) -> bool,
        mut prefetch: impl FnMut(u64),
    ) -> Result<SnatTuple<A>, SnatExhausted> {
        let now_ms = self.tick(now_ms);
        let quarantines = proto == Proto::Tcp && self.quarantine_ms > 0;
        let probes = self.probe_limit.min(self.slice_len);
        // A window that covers the slice needs no second look; otherwise
        // retry from fresh random starts (as Linux's nf_nat_l4proto does)
        // before settling for a quarantined tuple or giving up, so free
        // tuples elsewhere in the slice are found.
        let rounds = if probes >= self.slice_len {
            1
        } else {
            PROBE_ROUNDS
        };
        let mut oldest: Option<Candidate<A>> = None;
        let addrs = self.addrs.len();
        // Addresses (by index, the first 64) whose window had no free tuple.
        let mut passed: u64 = 0;
        for attempt in 0..rounds as usize * addrs {
            if attempt > 0 {
                passed |= 1u64
                    .checked_shl(((attempt - 1) % addrs) as u32)
                    .unwrap_or(0);
            }
            let addr = self.addrs[attempt % addrs];
            let start = self.rng.below(self.slice_len);
            let mut i = 0;
            while i < probes {
                // Windows of PREFETCH_WINDOW candidates whose lookups
                // overlap; the first candidate alone while the previous
                // allocation found its first candidate free (low
                // occupancy: do not hash candidates that are not needed).
                let window = if i == 0 && !self.crowded {
                    1
                } else {
                    PREFETCH_WINDOW.min(probes - i)
                };
                let mut ports = [0u16; PREFETCH_WINDOW as usize];
                let mut hashes = [0u64; PREFETCH_WINDOW as usize];
                for ((port, hash), j) in ports.iter_mut().zip(hashes.iter_mut()).zip(0..window) {
                    // start < slice_len and i + j < probes <= slice_len: one
                    // conditional subtraction wraps it (no division).
                    let mut offset = start + i + j;
                    if offset >= self.slice_len {
                        offset -= self.slice_len;
                    }
                    // offset < slice_len, so the port stays inside the slice.
                    *port = self.slice_start.wrapping_add(offset as u16);
                    *hash = self
                        .quarantine
                        .hash(&reply_key(proto, addr, *port, backend));
                    prefetch(*hash);
                }
                i += window;
                for ((&port, &hash), j) in ports.iter().zip(hashes.iter()).zip(0..window) {
                    let key = reply_key(proto, addr, port, backend);
                    if in_use(&key, hash) {
                        continue;
                    }
                    self.crowded = i > window || j > 0;
                    if !quarantines {
                        self.count_exhausted(passed);
                        return Ok(self.hand_out(addr, port, false));
                    }
                    match self.quarantine.find_hashed(&key, hash) {
                        Some(found)
                            if now_ms.saturating_sub(found.released_ms) < self.quarantine_ms =>
                        {
                            if oldest.is_none_or(|o| found.released_ms < o.released_ms) {
                                oldest = Some(Candidate {
                                    addr,
                                    port,
                                    slot: found.slot,
                                    released_ms: found.released_ms,
                                });
                            }
                        }
                        Some(expired) => {
                            self.quarantine.remove_slot(expired.slot);
                            self.count_exhausted(passed);
                            return Ok(self.hand_out(addr, port, false));
                        }
                        None => {
                            self.count_exhausted(passed);
                            return Ok(self.hand_out(addr, port, false));
                        }
                    }
                }
            }
        }
        // Every address was tried without a fresh tuple.
        self.count_exhausted(u64::MAX);
        match oldest {
            Some(c) => {
                // The quarantine was not mutated since `c.slot` was found.
                self.quarantine.remove_slot(c.slot);
                self.stats.quarantine_reuses += 1;
                Ok(self.hand_out(c.addr, c.port, true))
            }
            None => {
                self.stats.exhausted += 1;
                Err(SnatExhausted)
            }
        }
    }

    /// Count an exhaustion on every address whose bit is set in `passed`.
    #[inline]
    fn count_exhausted(&mut self, passed: u64) {
        if passed == 0 {
            return;
        }
        for (i, a) in self.per_addr.iter_mut().enumerate().take(64) {
            if passed & (1 << i) != 0 {
                a.exhausted += 1;
            }
        }
    }

    #[inline]
    fn hand_out(&mut self, addr: A, port: u16, reused_in_quarantine: bool) -> SnatTuple<A> {
        self.stats.allocations += 1;
        self.stats.in_use += 1;
        if let Some(a) = self.per_addr.iter_mut().find(|a| a.addr == addr) {
            a.in_use += 1;
        }
        SnatTuple {
            addr,
            port,
            reused_in_quarantine,
        }
    }

    /// Hands the tuple of a flow that was just removed to a new flow
    /// towards the same backend, without a release (no quarantine: the
    /// caller evicted a half-open flow to make room, Linux's early drop).
    /// `None` for a key this allocator does not own. The tuple stays in use
    /// (neither an allocation nor a release is counted), so
    /// [`SnatStats::in_use`] keeps counting allocations minus releases.
    pub fn reassign(&self, reply_key: &FlowKeyOf<A>) -> Option<SnatTuple<A>> {
        if !self.owns(reply_key.dst_ip, reply_key.dst_port) {
            return None;
        }
        Some(SnatTuple {
            addr: reply_key.dst_ip,
            port: reply_key.dst_port,
            reused_in_quarantine: false,
        })
    }

    /// Releases the tuple of a removed flow, given the flow's reply key. TCP
    /// tuples enter quarantine. Keys this allocator does not own (SNAT address
    /// or port not its own) are ignored.
    pub fn release(&mut self, reply_key: &FlowKeyOf<A>, now_ms: u64) {
        let now_ms = self.tick(now_ms);
        if !self.owns(reply_key.dst_ip, reply_key.dst_port) {
            return;
        }
        self.stats.in_use = self.stats.in_use.saturating_sub(1);
        if let Some(a) = self
            .per_addr
            .iter_mut()
            .find(|a| a.addr == reply_key.dst_ip)
        {
            a.in_use = a.in_use.saturating_sub(1);
        }
        if reply_key.proto == Proto::Tcp
            && self.quarantine_ms > 0
            && self.quarantine.push(*reply_key, now_ms)
        {
            self.stats.quarantine_overflows += 1;
        }
    }

    /// Purges up to `max_entries` expired quarantine entries (for idle
    /// moments; `alloc` and `release` purge a few on their own). Returns the
    /// number purged.
    pub fn expire(&mut self, now_ms: u64, max_entries: usize) -> usize {
        let now_ms = self.advance(now_ms);
        self.quarantine
            .expire(now_ms, self.quarantine_ms, max_entries)
    }

    /// Advances the monotonic clock and purges a few expired entries.
    #[inline]
    fn tick(&mut self, now_ms: u64) -> u64 {
        let now_ms = self.advance(now_ms);
        self.quarantine
            .expire(now_ms, self.quarantine_ms, EXPIRE_PER_CALL);
        now_ms
    }

    #[inline]
    fn advance(&mut self, now_ms: u64) -> u64 {
        self.now_ms = self.now_ms.max(now_ms);
        self.now_ms
    }

    pub fn stats(&self) -> SnatStats {
        SnatStats {
            quarantined: self.quarantine.live() as u64,
            ..self.stats
        }
    }

    /// In-use tuples and exhausted allocations per SNAT address, in
    /// configuration order. An allocation that moved on from an address
    /// (its probe window had no fresh tuple) counts an exhaustion on it,
    /// once per allocation (the first 64 addresses are told apart); a
    /// failed or quarantine-reusing allocation counts one on every address.
    pub fn addr_stats(&self) -> &[SnatAddrStats<A>] {
        &self.per_addr
    }

    /// This worker's port slice.
    pub fn slice(&self) -> RangeInclusive<u16> {
        // slice_len >= 1 and the slice lies inside a u16 range.
        let end = u32::from(self.slice_start) + self.slice_len - 1;
        self.slice_start..=u16::try_from(end).unwrap_or(u16::MAX)
    }

    /// The whole configured port range (all workers).
    pub fn port_range(&self) -> RangeInclusive<u16> {
        self.full_range.clone()
    }

    pub fn addrs(&self) -> &[A] {
        &self.addrs
    }

    /// True when `addr:port` is one of this allocator's SNAT addresses and a
    /// port of its slice.
    #[inline]
    pub fn owns(&self, addr: A, port: u16) -> bool {
        let offset = u32::from(port).wrapping_sub(u32::from(self.slice_start));
        port >= self.slice_start && offset < self.slice_len && self.addrs.contains(&addr)
    }
}

#[cfg(test)]
mod tests;
