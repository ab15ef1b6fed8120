//! Maglev consistent hashing: the per-service lookup table that maps a flow
//! hash to a backend.
//!
//! The algorithm is the one of Eisenbud et al., "Maglev: A Fast and Reliable
//! Software Network Load Balancer", NSDI 2016, section 3.4 ("Consistent
//! Hashing"), with the weighted variant the paper sketches (a backend's *turns*
//! come at a frequency proportional to its weight).
//!
//! # Building a table
//!
//! Every backend `i` has a preference list over the `M` slots (`M` prime):
//! `permutation[i][j] = (offset_i + j * skip_i) mod M` with
//! `offset_i = h1(i) mod M` and `skip_i = h2(i) mod (M - 1) + 1`. Because `M` is
//! prime and `1 <= skip_i < M`, every list is a permutation of `0..M`. The
//! backends then take turns, round after round; on its turn a backend walks its
//! list to the first slot nobody owns yet and claims it. The table is complete
//! when all `M` slots are claimed.
//!
//! * **Stable identity hash.** `h1`/`h2` are xxh3-64 over the backend's
//!   identity bytes (4 IPv4 address bytes then 2 port bytes, big-endian) with
//!   the fixed seeds [`OFFSET_SEED`] and [`SKIP_SEED`]. Two gateways (or two
//!   builds on different machines) therefore build identical tables from the
//!   same backend set, which is what lets several Portico instances behind ECMP
//!   send one flow to one backend without sharing state.
//! * **Order independence.** Turns are taken in ascending `(address, port)`
//!   order, not in the caller's order, so the table content (as backend
//!   addresses) does not depend on how the caller listed the backends. The
//!   slots nevertheless hold indices into the caller's own slice.
//! * **Weights.** Each round a backend earns credit `w_i * N` (N = backends
//!   with weight > 0) and claims one slot per `T` of credit it holds, where
//!   `T = min(w_max * N, HEAVY_WEIGHT_FACTOR * W)` (`W` = sum of weights).
//!   When no weight exceeds [`HEAVY_WEIGHT_FACTOR`] times the mean weight,
//!   `T = w_max * N`: the heaviest backend claims one slot every round and a
//!   backend of weight `w` claims `floor(r * w / w_max)` slots in `r` rounds,
//!   which is the per-round rule of Envoy's and Cilium's weighted Maglev. With
//!   all weights equal this is exactly the paper's unweighted algorithm (one
//!   claim per backend per round). The cap on `T` bounds the number of rounds
//!   (fewer than `HEAVY_WEIGHT_FACTOR * (M + N) / N + 1`) when one weight dwarfs the
//!   others: such a backend then claims several slots per turn. The share of
//!   backend `i` is within `N * w_i / W + w_i * N / T + 1` slots of the ideal
//!   `M * w_i / W` (proof at the weight tests in `tests.rs`); `w_i * N / T` is
//!   at most 1 unless `w_i` exceeds `HEAVY_WEIGHT_FACTOR` times the mean, and
//!   `N * w_i / W` (the last, partial round) is `w_i` over the mean weight, so
//!   the relative error is about `2 N / M` at most. With equal weights shares
//!   differ by at most one slot. A backend of weight 0 gets no slot.
//! * **Incremental permutations.** A backend's list is never materialised: its
//!   cursor advances by `skip` and wraps with one subtraction. Building
//!   allocates the output table, one scratch vector of per-backend cursors
//!   and, for the last `sqrt(M / 2)` claims, the list of unclaimed slots: a
//!   claim then takes the listed slot its walk would reach first (computed
//!   with `skip⁻¹ mod M`) instead of walking past ~`M / u` claimed slots.
//!   Same table, with a third of the walk's steps gone at 100 slots per
//!   backend (the tail is where most steps land on claimed slots).
//!
//! # Invariants
//!
//! * `size()` is prime, `2 <= size() <= MAX_TABLE_SIZE`.
//! * If at least one backend has weight > 0, `slots().len() == size()`, every
//!   slot holds the index of a backend with weight > 0 in the slice the table
//!   was built from, and [`MaglevTable::lookup`] never returns `None`.
//!   Otherwise the table is empty (`slots()` is empty, `lookup` returns `None`).
//! * The same backend set (same addresses and weights, in any order) and the
//!   same size give the same table on every machine and in every process.
//!
//! # Disruption
//!
//! Maglev trades perfect minimal disruption for balance: when a backend goes
//! away, its slots are redistributed and, in addition, a small fraction of the
//! other slots change owner (the paper's figure 12). The unit tests measure
//! and bound this; conntrack keeps established flows on their backend anyway.
//!
//! # Lookup
//!
//! [`MaglevTable::lookup`] returns `slots[hash mod M]`. The modulo is computed
//! with a precomputed reciprocal (Barrett reduction: one 64x64->128 multiply,
//! one multiply, one conditional subtract) instead of a 64-bit division; the
//! result is exactly `hash % M`.

use std::net::{IpAddr, SocketAddr};

#[cfg(test)]
mod tests;

/// The default table size: prime, about 160 slots per backend for 100
/// backends (the paper recommends `M` > 100 × N).
pub const DEFAULT_TABLE_SIZE: u32 = 16381;

/// Slots per backend a service's table aims for: the paper's `M` > 100 × N,
/// which keeps every backend's share within about 1 % of its ideal.
pub const SLOTS_PER_BACKEND: u32 = 100;

/// The sizes a table may have when its size follows its backend count: the
/// largest prime below each power of two from 2^8 to 2^24. A size is a pure
/// function of the backend count (so every gateway picks the same one) and
/// only changes when the count crosses a factor-2 band, so most endpoint
/// changes keep the size and with it Maglev's minimal disruption.
pub const TABLE_SIZE_LADDER: [u32; 17] = [
    251, 509, 1021, 2039, 4093, 8191, 16381, 32749, 65521, 131_071, 262_139, 524_287, 1_048_573,
    2_097_143, 4_194_301, 8_388_593, 16_777_213,
];

/// Table size for `backends` backends of weight > 0: the smallest size of
/// [`TABLE_SIZE_LADDER`] with at least [`SLOTS_PER_BACKEND`] slots per
/// backend, or `max` if that is smaller (`max` is the configured limit and
/// should be prime).
pub fn table_size_for(backends: usize, max: u32) -> u32 {
    let wanted = (backends as u64).saturating_mul(u64::from(SLOTS_PER_BACKEND));
    TABLE_SIZE_LADDER
        .iter()
        .copied()
        .find(|&m| u64::from(m) >= wanted)
        .map_or(max, |m| m.min(max))
}

/// Largest accepted table size (2^24 slots, 32 MiB of `u16`).
pub const MAX_TABLE_SIZE: u32 = 1 << 24;

/// Largest number of backends one table can index (`u16` slots, `u16::MAX`
/// itself is reserved as the "unclaimed" marker while building).
pub const MAX_BACKENDS: usize = u16::MAX as usize;

/// Seed of `h1`, the hash giving a backend's first preferred slot. Changing it
/// changes every table: never change it in a running fleet.
pub const OFFSET_SEED: u64 = 0x6d61_676c_6576_6f66; // "maglevof"

/// Seed of `h2`, the hash giving a backend's stride. Must differ from
/// [`OFFSET_SEED`]. Never change it in a running fleet.
pub const SKIP_SEED: u64 = 0x6d61_676c_6576_736b; // "maglevsk"

/// A backend of weight up to this many times the mean weight claims at most
/// one slot per round; heavier ones claim several (see the module docs).
pub const HEAVY_WEIGHT_FACTOR: u64 = 16;

/// Slot value of a not-yet-claimed slot while building.
const UNCLAIMED: u16 = u16::MAX;

/// One backend as the table builder sees it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct MaglevBackend {
    /// Identity of the backend; unique within one table. A table's
    /// backends are of one family (a service is single-family).
    pub addr: SocketAddr,
    /// Relative weight; 0 excludes the backend from the table.
    pub weight: u32,
}

impl MaglevBackend {
    /// A backend of the given address and weight.
    pub fn new(addr: impl Into<SocketAddr>, weight: u32) -> Self {
        MaglevBackend {
            addr: addr.into(),
            weight,
        }
    }

    /// The bytes the permutation hashes are computed over: the address
    /// bytes (4 for IPv4, 16 for IPv6) then the 2 port bytes, big-endian;
    /// `(buffer, length)`.
    #[inline]
    pub fn identity_bytes(&self) -> ([u8; 18], usize) {
        let mut b = [0u8; 18];
        let n = match self.addr.ip() {
            IpAddr::V4(a) => {
                b[..4].copy_from_slice(&a.octets());
                4
            }
            IpAddr::V6(a) => {
                b[..16].copy_from_slice(&a.octets());
                16
            }
        };
        b[n..n + 2].copy_from_slice(&self.addr.port().to_be_bytes());
        (b, n + 2)
    }

    /// The key that orders backends (address, then port), as one integer.
    fn order_key(&self) -> u128 {
        let ip = match self.addr.ip() {
            IpAddr::V4(a) => u128::from(a.to_bits()),
            IpAddr::V6(a) => a.to_bits(),
        };
        (ip << 16) | u128::from(self.addr.port())
    }

    /// `(offset, skip)` of this backend's preference list in a table of
    /// `table_size` slots (`table_size >= 2`).
    pub fn permutation(&self, table_size: u32) -> (u32, u32) {
        let (buf, len) = self.identity_bytes();
        let bytes = buf.get(..len).unwrap_or(&buf);
        let m = u64::from(table_size.max(2));
        let h1 = xxhash_rust::xxh3::xxh3_64_with_seed(bytes, OFFSET_SEED);
        let h2 = xxhash_rust::xxh3::xxh3_64_with_seed(bytes, SKIP_SEED);
        // Both results are < m <= u32::MAX, so the narrowing is lossless.
        let offset = (h1 % m) as u32;
        let skip = (h2 % (m - 1) + 1) as u32;
        (offset, skip)
    }
}

/// Why a table could not be built.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
pub enum MaglevError {
    /// Maglev needs a prime table size for every preference list to be a
    /// permutation.
    #[error("maglev table size {0} is not prime")]
    TableSizeNotPrime(u32),
    /// Fewer slots than backends of weight > 0.
    #[error("maglev table size {size} is smaller than the {backends} backends with weight > 0")]
    TableTooSmall { size: u32, backends: usize },
    /// Above [`MAX_TABLE_SIZE`].
    #[error("maglev table size {size} exceeds the maximum of {max}")]
    TableTooLarge { size: u32, max: u32 },
    /// More than [`MAX_BACKENDS`] backends.
    #[error("{0} backends exceed the maglev maximum of {MAX_BACKENDS}")]
    TooManyBackends(usize),
    /// The same address:port is listed twice.
    #[error("backend {0} is listed more than once")]
    DuplicateBackend(SocketAddr),
}

/// A built Maglev lookup table. Immutable; rebuild it when the backend set
/// changes.
#[derive(Clone, PartialEq, Eq)]
pub struct MaglevTable {
    /// `M`, prime.
    size: u32,
    /// `floor((2^64 - 1) / M)`, for [`Self::reduce`].
    reciprocal: u64,
    /// Length of the backend slice the table was built from.
    backend_count: usize,
    /// `M` indices into that slice, or empty if no backend has weight > 0.
    slots: Box<[u16]>,
}

impl std::fmt::Debug for MaglevTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MaglevTable")
            .field("size", &self.size)
            .field("backend_count", &self.backend_count)
            .field("empty", &self.slots.is_empty())
            .finish_non_exhaustive()
    }
}

/// Builder state of one backend: its place in its preference list and its
/// weight credit.
#[derive(Clone, Copy)]
struct Cursor {
    /// Sort key: address then port.
    key: u128,
    /// Index in the caller's slice.
    index: u16,
    /// Next slot of its preference list to try.
    next: u32,
    /// Stride of its preference list.
    skip: u32,
    /// Credit earned per round: `weight * N`.
    step: u64,
    /// Credit not yet spent on claims.
    credit: u64,
    /// `skip⁻¹ mod M` once needed (0: not computed yet).
    skip_inverse: u32,
}

impl MaglevTable {
    /// A table of `size` slots with no backend of weight > 0.
    fn empty(size: u32, backend_count: usize) -> MaglevTable {
        MaglevTable {
            size,
            reciprocal: u64::MAX / u64::from(size.max(1)),
            backend_count,
            slots: Box::default(),
        }
    }

    /// Builds the table of `table_size` slots for `backends`.
    ///
    /// The slots hold indices into `backends`. Backends of weight 0 get no
    /// slot; if all have weight 0 the table is empty (every lookup misses).
    ///
    /// Errors: more than [`MAX_BACKENDS`] backends, a size that is not prime
    /// or above [`MAX_TABLE_SIZE`], a duplicate address, or fewer slots than
    /// backends of weight > 0.
    pub fn build(backends: &[MaglevBackend], table_size: u32) -> Result<MaglevTable, MaglevError> {
        if backends.len() > MAX_BACKENDS {
            return Err(MaglevError::TooManyBackends(backends.len()));
        }
        if !is_prime(table_size) {
            return Err(MaglevError::TableSizeNotPrime(table_size));
        }
        if table_size > MAX_TABLE_SIZE {
            return Err(MaglevError::TableTooLarge {
                size: table_size,
                max: MAX_TABLE_SIZE,
            });
        }
        let m = table_size;

        // The one scratch vector: a cursor per backend, in identity order.
        let mut cursors: Vec<Cursor> = Vec::with_capacity(backends.len());
        // Zipped this way round so the u16 counter never steps past the last index.
        for (backend, index) in backends.iter().zip(0u16..) {
            cursors.push(Cursor {
                key: backend.order_key(),
                index,
                next: 0,
                skip: 0,
                step: u64::from(backend.weight),
                credit: 0,
                skip_inverse: 0,
            });
        }
        cursors.sort_unstable_by_key(|c| c.key);
        if let Some(pair) = cursors.windows(2).find(|pair| pair[0].key == pair[1].key) {
            let addr = backends
                .get(usize::from(pair[0].index))
                .map_or(SocketAddr::from(([0, 0, 0, 0], 0)), |b| b.addr);
            return Err(MaglevError::DuplicateBackend(addr));
        }
        cursors.retain(|c| c.step > 0);

        let active = cursors.len();
        let empty = MaglevTable::empty(m, backends.len());
        if active == 0 {
            return Ok(empty);
        }
        if (m as usize) < active {
            return Err(MaglevError::TableTooSmall {
                size: m,
                backends: active,
            });
        }

        // Weights are u32 and N <= 65535, so every product below is < 2^53.
        let n = active as u64;
        let weight_sum: u64 = cursors.iter().map(|c| c.step).sum();
        let weight_max: u64 = cursors.iter().map(|c| c.step).max().unwrap_or(1);
        let threshold = (weight_max * n).min(HEAVY_WEIGHT_FACTOR * weight_sum);
        for c in &mut cursors {
            let backend = backends.get(usize::from(c.index)).copied();
            let (offset, skip) = backend.map_or((0, 1), |b| b.permutation(m));
            c.next = offset;
            c.skip = skip;
            c.step *= n;
        }

        let mut slots = vec![UNCLAIMED; m as usize].into_boxed_slice();
        let mut fill = Fill {
            slots: &mut slots,
            m,
            reciprocal: empty.reciprocal,
            left: m,
            tail: tail_len(m),
            unclaimed: Vec::new(),
        };
        // Terminates: every round the heaviest backend earns
        // `weight_max * n >= threshold` credit and so claims at least one slot;
        // each claim finds an unclaimed slot because a preference list visits
        // every slot and fewer than `m` are claimed.
        if cursors.iter().all(|c| c.step == cursors[0].step) {
            // Equal weights: `step == threshold`, one claim per turn. Whole
            // rounds that stay above the tail walk without the per-claim
            // phase and completion checks (the same claims in the same
            // order as `claim` makes).
            let round = cursors.len() as u32;
            while fill.left >= fill.tail + round {
                for c in &mut cursors {
                    fill.walk(c);
                }
                fill.left -= round;
            }
            'equal: loop {
                for c in &mut cursors {
                    if fill.claim(c) {
                        break 'equal;
                    }
                }
            }
        } else {
            'weighted: loop {
                for c in &mut cursors {
                    c.credit += c.step;
                    while c.credit >= threshold {
                        c.credit -= threshold;
                        if fill.claim(c) {
                            break 'weighted;
                        }
                    }
                }
            }
        }
        Ok(MaglevTable { slots, ..empty })
    }

    /// The backend index (into the slice the table was built from) for a flow
    /// hash: `slots[hash % size]`. `None` only for an empty table.
    #[inline]
    pub fn lookup(&self, hash: u64) -> Option<u16> {
        self.slots.get(self.reduce(hash)).copied()
    }

    /// `hash % size` by Barrett reduction with the precomputed
    /// `reciprocal = floor((2^64 - 1) / M)`: the quotient estimate
    /// `floor(hash * reciprocal / 2^64)` is the true quotient or one less, so
    /// one conditional subtraction gives the exact remainder.
    #[inline]
    fn reduce(&self, hash: u64) -> usize {
        barrett(hash, u64::from(self.size), self.reciprocal) as usize
    }

    /// `M`, the number of slots (also for an empty table).
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The slots: `size()` backend indices, or empty if no backend has
    /// weight > 0.
    pub fn slots(&self) -> &[u16] {
        &self.slots
    }

    /// Whether no backend has weight > 0 (every lookup misses).
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Length of the backend slice the table was built from.
    pub fn backend_count(&self) -> usize {
        self.backend_count
    }

    /// Slots owned by each backend, indexed like the slice the table was
    /// built from.
    pub fn shares(&self) -> Vec<u32> {
        let mut shares = vec![0u32; self.backend_count];
        for &slot in self.slots.iter() {
            if let Some(share) = shares.get_mut(usize::from(slot)) {
                *share += 1;
            }
        }
        shares
    }
}

/// `x % m` given `reciprocal = floor((2^64 - 1) / m)`, `m >= 1` (see
/// [`MaglevTable::reduce`]).
#[inline]
fn barrett(x: u64, m: u64, reciprocal: u64) -> u64 {
    let quotient = ((u128::from(x) * u128::from(reciprocal)) >> 64) as u64;
    // quotient * m <= x, so neither operation wraps.
    let mut rest = x - quotient * m;
    if rest >= m {
        rest -= m;
    }
    rest
}

/// The table being filled.
struct Fill<'a> {
    slots: &'a mut [u16],
    m: u32,
    reciprocal: u64,
    /// Slots not claimed yet.
    left: u32,
    /// From this many slots left on, claims search `unclaimed`.
    tail: u32,
    /// The unclaimed slots, once `left <= tail`.
    unclaimed: Vec<u32>,
}

impl Fill<'_> {
    /// Backend `c` claims the next unclaimed slot of its preference list.
    /// Returns whether the table is complete. Call only while it is not.
    #[inline(always)]
    fn claim(&mut self, c: &mut Cursor) -> bool {
        if self.left > self.tail {
            self.walk(c);
        } else {
            if self.unclaimed.is_empty() {
                collect_unclaimed(self.slots, &mut self.unclaimed);
            }
            let slot = claim_from_list(c, &mut self.unclaimed, self.m, self.reciprocal);
            if let Some(s) = self.slots.get_mut(slot as usize) {
                *s = c.index;
            }
        }
        self.left -= 1;
        self.left == 0
    }
}

impl Fill<'_> {
    /// Backend `c` walks its preference list to the first unclaimed slot
    /// and claims it (`left` is the caller's to update). Call only while
    /// some slot is unclaimed.
    #[inline(always)]
    fn walk(&mut self, c: &mut Cursor) {
        let (m, skip) = (self.m, c.skip);
        let mut next = c.next;
        loop {
            let slot = next as usize;
            next += skip;
            if next >= m {
                next -= m;
            }
            // `slot < m == slots.len()` by construction (offset < m,
            // skip < m and the wrap above): `None` cannot happen.
            match self.slots.get_mut(slot) {
                Some(s) if *s == UNCLAIMED => {
                    *s = c.index;
                    break;
                }
                Some(_) => {}
                None => break,
            }
        }
        c.next = next;
    }
}

/// Append the indices of the unclaimed slots to `out`, in order. Few are
/// left when this runs (`tail_len`), so whole chunks are tested first with
/// a branch-free (vectorisable) test and only chunks holding one are
/// walked.
fn collect_unclaimed(slots: &[u16], out: &mut Vec<u32>) {
    const CHUNK: usize = 32;
    let mut base = 0u32;
    for chunk in slots.chunks(CHUNK) {
        if chunk.iter().fold(false, |any, &s| any | (s == UNCLAIMED)) {
            out.extend(
                (base..)
                    .zip(chunk)
                    .filter(|&(_, &s)| s == UNCLAIMED)
                    .map(|(i, _)| i),
            );
        }
        // chunk.len() <= CHUNK, and the slot count is below 2^24.
        base += chunk.len() as u32;
    }
}

/// Claims made from the list of unclaimed slots at the end of a build:
/// about `sqrt(m / 2)`.
///
/// Near the end of a build almost every slot is claimed and a walk along a
/// preference list needs about `m / u` steps to find one of the `u` unclaimed
/// slots (each a hard-to-predict branch): about half of all the steps of a
/// build fall in its last `sqrt(m)` claims. Scanning the `u` unclaimed slots
/// instead costs `u` evaluations of a modular product, about three walk
/// steps each (callgrind), so the scan pays from `3 u² < m` on.
fn tail_len(m: u32) -> u32 {
    (u64::from(m) / 2).isqrt().max(1) as u32
}

/// The claim of backend `c` when only the slots in `unclaimed` are left:
/// the slot its walk would reach first. The walk visits
/// `next, next + skip, next + 2 skip, ...` (mod `m`), so slot `s` comes after
/// `((s - next) * skip⁻¹) mod m` steps; the smallest wins, and the walk
/// resumes after it, exactly as if it had stepped there one slot at a time.
fn claim_from_list(c: &mut Cursor, unclaimed: &mut Vec<u32>, m: u32, reciprocal: u64) -> u32 {
    let m64 = u64::from(m);
    if c.skip_inverse == 0 {
        c.skip_inverse = inverse_mod_prime(c.skip, m, reciprocal);
    }
    let inverse = u64::from(c.skip_inverse);
    let mut best = (u64::MAX, 0usize);
    for (i, &s) in unclaimed.iter().enumerate() {
        let delta = if s >= c.next {
            s - c.next
        } else {
            s + m - c.next
        };
        let steps = barrett(u64::from(delta) * inverse, m64, reciprocal);
        if steps < best.0 {
            best = (steps, i);
        }
    }
    let slot = if best.1 < unclaimed.len() {
        unclaimed.swap_remove(best.1)
    } else {
        c.next // unreachable: the list is not empty while claims remain
    };
    c.next = slot + c.skip;
    if c.next >= m {
        c.next -= m;
    }
    slot
}

/// `a⁻¹ mod m` for prime `m` and `0 < a < m`, by Fermat: `a^(m-2)`.
fn inverse_mod_prime(a: u32, m: u32, reciprocal: u64) -> u32 {
    let m64 = u64::from(m);
    let mut base = u64::from(a);
    let mut exponent = m.saturating_sub(2);
    let mut result = 1u64 % m64;
    while exponent > 0 {
        if exponent & 1 == 1 {
            result = barrett(result * base, m64, reciprocal);
        }
        base = barrett(base * base, m64, reciprocal);
        exponent >>= 1;
    }
    // result < m <= u32::MAX.
    result as u32
}

/// Whether `n` is prime (deterministic trial division by 2, 3 and `6k ± 1`;
/// at most about 22 000 divisions for any `u32`).
pub fn is_prime(n: u32) -> bool {
    if n < 4 {
        return n >= 2;
    }
    if n.is_multiple_of(2) || n.is_multiple_of(3) {
        return false;
    }
    let n = u64::from(n);
    let mut d: u64 = 5;
    while d * d <= n {
        if n % d == 0 || n % (d + 2) == 0 {
            return false;
        }
        d += 6;
    }
    true
}

/// The largest prime representable as `u32`.
pub const LARGEST_U32_PRIME: u32 = 4_294_967_291;

/// The smallest prime `>= n`. Above [`LARGEST_U32_PRIME`] there is none in
/// `u32`; the function then returns [`LARGEST_U32_PRIME`] (use
/// [`checked_next_prime`] to tell).
pub fn next_prime(n: u32) -> u32 {
    checked_next_prime(n).unwrap_or(LARGEST_U32_PRIME)
}

/// The smallest prime `>= n`, or `None` if it does not fit in `u32`.
pub fn checked_next_prime(n: u32) -> Option<u32> {
    (n..=u32::MAX).find(|&candidate| is_prime(candidate))
}
