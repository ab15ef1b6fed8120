//! Tests of the Maglev table: completeness, determinism, balance, weights,
//! disruption, lookup, errors.

use super::*;
use proptest::prelude::*;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};

/// Distinct, unordered-looking backend addresses.
fn addr(i: u32) -> SocketAddr {
    // Multiplying by an odd constant is a bijection on u32, so the addresses
    // are distinct, and their order is unrelated to `i`.
    SocketAddr::from(SocketAddrV4::new(
        Ipv4Addr::from_bits(i.wrapping_mul(0x9e37_79b1)),
        8080,
    ))
}

fn equal(n: u32) -> Vec<MaglevBackend> {
    (0..n).map(|i| MaglevBackend::new(addr(i), 1)).collect()
}

/// The owner address of every slot.
fn owners(table: &MaglevTable, backends: &[MaglevBackend]) -> Vec<SocketAddr> {
    table
        .slots()
        .iter()
        .map(|&i| backends[usize::from(i)].addr)
        .collect()
}

/// The paper's pseudocode (NSDI 2016, fig. 3/"Populate") with materialised
/// permutations `(offset + j * skip) mod M` in 64-bit arithmetic, turns taken
/// in address order: an independent reference for equal weights.
fn reference_table(backends: &[MaglevBackend], m: u32) -> Vec<u16> {
    let mut order: Vec<usize> = (0..backends.len()).collect();
    order.sort_by_key(|&i| backends[i].addr);
    let perms: Vec<Vec<u32>> = order
        .iter()
        .map(|&i| {
            let bytes = {
                let SocketAddr::V4(a) = backends[i].addr else {
                    panic!("IPv4 backends")
                };
                let ip = a.ip().octets();
                let port = a.port().to_be_bytes();
                [ip[0], ip[1], ip[2], ip[3], port[0], port[1]]
            };
            let m64 = u64::from(m);
            let offset = xxhash_rust::xxh3::xxh3_64_with_seed(&bytes, OFFSET_SEED) % m64;
            let skip = xxhash_rust::xxh3::xxh3_64_with_seed(&bytes, SKIP_SEED) % (m64 - 1) + 1;
            (0..m64)
                .map(|j| ((offset + j * skip) % m64) as u32)
                .collect()
        })
        .collect();
    let mut next = vec![0usize; order.len()];
    let mut entry = vec![None::<u16>; m as usize];
    let mut n = 0;
    loop {
        for (k, &i) in order.iter().enumerate() {
            let mut c = perms[k][next[k]];
            while entry[c as usize].is_some() {
                next[k] += 1;
                c = perms[k][next[k]];
            }
            entry[c as usize] = Some(i as u16);
            next[k] += 1;
            n += 1;
            if n == m {
                return entry.into_iter().map(|e| e.unwrap()).collect();
            }
        }
    }
}

fn max_min_ratio(shares: &[u32]) -> f64 {
    let max = *shares.iter().max().unwrap();
    let min = *shares.iter().min().unwrap();
    f64::from(max) / f64::from(min)
}

/// Fraction of all slots whose owner changed although neither the old nor the
/// new owner is `exempt` (the removed or added backend).
fn extra_moved(before: &[SocketAddr], after: &[SocketAddr], exempt: SocketAddr) -> f64 {
    let moved = before
        .iter()
        .zip(after)
        .filter(|(b, a)| b != a && **b != exempt && **a != exempt)
        .count();
    moved as f64 / before.len() as f64
}

// ---------------------------------------------------------------- primes

fn naive_is_prime(n: u32) -> bool {
    n >= 2
        && (2..n)
            .take_while(|d| d * d <= n)
            .all(|d| !n.is_multiple_of(d))
}

#[test]
fn is_prime_agrees_with_naive_below_20000_and_on_known_values() {
    for n in 0..20_000 {
        assert_eq!(is_prime(n), naive_is_prime(n), "n = {n}");
    }
    for p in [DEFAULT_TABLE_SIZE, 65_537, 1_000_003, LARGEST_U32_PRIME] {
        assert!(is_prime(p), "{p}");
    }
    // 16383 = 3 * 43 * 127, 65535 = 3 * 5 * 17 * 257, u32::MAX = 3 * 5 * 17 * 257 * 65537,
    // and products of two primes near 2^16 (no small factor for trial division to hit).
    for c in [16_383, 65_535, u32::MAX, 65_521 * 65_521, 65_537 * 65_521] {
        assert!(!is_prime(c), "{c}");
    }
}

#[test]
fn next_prime_finds_the_smallest_prime_at_or_above() {
    assert_eq!(next_prime(0), 2);
    assert_eq!(next_prime(2), 2);
    assert_eq!(next_prime(16_380), DEFAULT_TABLE_SIZE);
    assert_eq!(next_prime(DEFAULT_TABLE_SIZE), DEFAULT_TABLE_SIZE);
    assert_eq!(next_prime(65_536), 65_537);
    assert_eq!(
        checked_next_prime(LARGEST_U32_PRIME),
        Some(LARGEST_U32_PRIME)
    );
    assert_eq!(checked_next_prime(LARGEST_U32_PRIME + 1), None);
    assert_eq!(next_prime(u32::MAX), LARGEST_U32_PRIME);
}

proptest! {
    #[test]
    fn next_prime_is_prime_and_minimal(n in 0u32..2_000_000) {
        let p = next_prime(n);
        prop_assert!(p >= n);
        prop_assert!(naive_is_prime(p));
        prop_assert!((n..p).all(|k| !naive_is_prime(k)));
    }
}

// ---------------------------------------------------------------- errors

#[test]
fn the_size_ladder_is_prime_and_sizes_follow_the_backend_count() {
    for pair in TABLE_SIZE_LADDER.windows(2) {
        assert!(pair[0] < pair[1]);
    }
    for (k, &m) in TABLE_SIZE_LADDER.iter().enumerate() {
        assert!(is_prime(m), "{m}");
        // The largest prime below 2^(k+8).
        let power = 1u64 << (k + 8);
        assert!(u64::from(m) < power);
        assert!(
            (u64::from(m) + 1..power).all(|n| !is_prime(n as u32)),
            "{m}"
        );
    }
    assert_eq!(table_size_for(1, 65_537), 251);
    assert_eq!(table_size_for(10, 65_537), 1021);
    assert_eq!(table_size_for(11, 65_537), 2039);
    assert_eq!(table_size_for(100, 65_537), 16381);
    assert_eq!(table_size_for(1000, 65_537), 65_537, "capped");
    assert_eq!(table_size_for(10, 251), 251, "capped");
    assert_eq!(table_size_for(200_000, 16_777_213), 16_777_213);
    for n in 1..2000 {
        let m = table_size_for(n, MAX_TABLE_SIZE);
        assert!(u64::from(m) >= 100 * n as u64 && u64::from(m) < 200 * n as u64 + 251);
    }
}

#[test]
fn rejects_a_size_that_is_not_prime() {
    for size in [0, 1, 4, 16_383, 65_536] {
        assert_eq!(
            MaglevTable::build(&equal(3), size),
            Err(MaglevError::TableSizeNotPrime(size))
        );
    }
}

#[test]
fn rejects_a_size_above_the_maximum() {
    let size = next_prime(MAX_TABLE_SIZE + 1);
    assert_eq!(
        MaglevTable::build(&equal(3), size),
        Err(MaglevError::TableTooLarge {
            size,
            max: MAX_TABLE_SIZE
        })
    );
}

#[test]
fn rejects_fewer_slots_than_weighted_backends() {
    assert_eq!(
        MaglevTable::build(&equal(12), 11),
        Err(MaglevError::TableTooSmall {
            size: 11,
            backends: 12
        })
    );
    // Weight-0 backends take no slot and do not count.
    let mut backends = equal(12);
    backends[3].weight = 0;
    let table = MaglevTable::build(&backends, 11).unwrap();
    assert_eq!(table.shares()[3], 0);
    assert!(
        table
            .shares()
            .iter()
            .enumerate()
            .all(|(i, &s)| i == 3 || s == 1)
    );
}

#[test]
fn rejects_more_than_max_backends() {
    let backends: Vec<_> = (0..=MAX_BACKENDS as u32)
        .map(|i| MaglevBackend::new(addr(i), 1))
        .collect();
    assert_eq!(
        MaglevTable::build(&backends, 65_537),
        Err(MaglevError::TooManyBackends(MAX_BACKENDS + 1))
    );
}

#[test]
fn accepts_exactly_max_backends() {
    let backends: Vec<_> = (0..MAX_BACKENDS as u32)
        .map(|i| MaglevBackend::new(addr(i), 1))
        .collect();
    let table = MaglevTable::build(&backends, 65_537).unwrap();
    let shares = table.shares();
    assert!(
        shares.iter().all(|&s| s == 1 || s == 2),
        "65537 slots over 65535 backends"
    );
    assert_eq!(shares.iter().filter(|&&s| s == 2).count(), 2);
}

#[test]
fn rejects_duplicate_backends_even_with_weight_zero() {
    let mut backends = equal(5);
    backends.push(MaglevBackend::new(backends[2].addr, 0));
    assert_eq!(
        MaglevTable::build(&backends, DEFAULT_TABLE_SIZE),
        Err(MaglevError::DuplicateBackend(backends[2].addr))
    );
    // Same IP, other port: distinct backends.
    let a = SocketAddr::from(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 80));
    let b = SocketAddr::from(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 81));
    let table = MaglevTable::build(&[MaglevBackend::new(a, 1), MaglevBackend::new(b, 1)], 13);
    assert!(table.is_ok());
}

// ---------------------------------------------------------------- basics

#[test]
fn no_weighted_backend_gives_an_empty_table() {
    for backends in [vec![], {
        let mut b = equal(4);
        b.iter_mut().for_each(|b| b.weight = 0);
        b
    }] {
        let table = MaglevTable::build(&backends, DEFAULT_TABLE_SIZE).unwrap();
        assert!(table.is_empty());
        assert_eq!(table.size(), DEFAULT_TABLE_SIZE);
        assert!(table.slots().is_empty());
        assert_eq!(table.lookup(0), None);
        assert_eq!(table.lookup(u64::MAX), None);
        assert_eq!(table.shares(), vec![0; backends.len()]);
    }
}

#[test]
fn one_backend_owns_every_slot() {
    let mut backends = equal(3);
    backends[0].weight = 0;
    backends[2].weight = 0;
    let table = MaglevTable::build(&backends, 251).unwrap();
    assert_eq!(table.shares(), vec![0, 251, 0]);
    assert_eq!(table.lookup(12_345), Some(1));
}

#[test]
fn smallest_table() {
    let table = MaglevTable::build(&equal(2), 2).unwrap();
    assert_eq!(table.shares(), vec![1, 1]);
}

#[test]
fn equal_weights_match_the_papers_pseudocode() {
    for (n, m) in [
        (1, 13),
        (2, 13),
        (3, 251),
        (7, 251),
        (10, 16_381),
        (50, 16_381),
        (13, 13),
    ] {
        let backends = equal(n);
        let table = MaglevTable::build(&backends, m).unwrap();
        assert_eq!(
            table.slots(),
            reference_table(&backends, m),
            "n = {n}, m = {m}"
        );
    }
}

#[test]
fn permutation_comes_from_the_stable_identity_hash() {
    let a = MaglevBackend::new(SocketAddrV4::new(Ipv4Addr::new(10, 1, 2, 3), 8443), 1);
    let b = MaglevBackend::new(SocketAddrV4::new(Ipv4Addr::new(10, 1, 2, 4), 8443), 1);
    let bytes = [10, 1, 2, 3, 0x20, 0xfb];
    let (got, len) = a.identity_bytes();
    assert_eq!(&got[..len], &bytes);
    let m = DEFAULT_TABLE_SIZE;
    let offset = xxhash_rust::xxh3::xxh3_64_with_seed(&bytes, OFFSET_SEED) % u64::from(m);
    let skip = xxhash_rust::xxh3::xxh3_64_with_seed(&bytes, SKIP_SEED) % u64::from(m - 1) + 1;
    assert_eq!(a.permutation(m), (offset as u32, skip as u32));
    assert_ne!(OFFSET_SEED, SKIP_SEED);
    // `a` sorts first, so its first turn claims its first preference, whatever
    // the caller's order.
    for (backends, a_index) in [([a, b], 0), ([b, a], 1)] {
        let table = MaglevTable::build(&backends, m).unwrap();
        assert_eq!(table.slots()[offset as usize], a_index);
    }
}

// ---------------------------------------------------------------- lookup

#[test]
fn reduce_is_exact_at_the_edges() {
    for m in [
        2,
        3,
        13,
        DEFAULT_TABLE_SIZE,
        65_537,
        MAX_TABLE_SIZE - 3,
        LARGEST_U32_PRIME,
    ] {
        let table = MaglevTable::empty(m, 0);
        let m64 = u64::from(m);
        for hash in [
            0,
            1,
            m64 - 1,
            m64,
            m64 + 1,
            m64 * m64 - 1,
            u64::MAX,
            u64::MAX - 1,
            u64::MAX / m64 * m64,
            u64::MAX / m64 * m64 - 1,
            1 << 63,
        ] {
            assert_eq!(
                table.reduce(hash) as u64,
                hash % m64,
                "m = {m}, hash = {hash}"
            );
        }
    }
}

proptest! {
    #[test]
    fn reduce_equals_modulo(hash in any::<u64>(), m in 2u32..) {
        let table = MaglevTable::empty(m, 0);
        prop_assert_eq!(table.reduce(hash) as u64, hash % u64::from(m));
    }

    #[test]
    fn lookup_is_the_slot_at_hash_mod_size(hash in any::<u64>(), n in 1u32..20) {
        let table = MaglevTable::build(&equal(n), 251).unwrap();
        let expected = table.slots()[(hash % 251) as usize];
        prop_assert_eq!(table.lookup(hash), Some(expected));
    }
}

/// The fill without the unclaimed-list tail: every claim walks its
/// preference list (the builder before the tail optimisation), weights
/// included. The builder must give exactly this table.
fn walk_only_slots(backends: &[MaglevBackend], m: u32) -> Vec<u16> {
    let mut order: Vec<usize> = (0..backends.len())
        .filter(|&i| backends[i].weight > 0)
        .collect();
    order.sort_by_key(|&i| backends[i].addr);
    let n = order.len() as u64;
    let sum: u64 = order.iter().map(|&i| u64::from(backends[i].weight)).sum();
    let max: u64 = order
        .iter()
        .map(|&i| u64::from(backends[i].weight))
        .max()
        .unwrap();
    let threshold = (max * n).min(HEAVY_WEIGHT_FACTOR * sum);
    let mut cursor: Vec<(u32, u32, u64)> = order
        .iter()
        .map(|&i| {
            let (offset, skip) = backends[i].permutation(m);
            (offset, skip, 0)
        })
        .collect();
    let mut slots = vec![u16::MAX; m as usize];
    let mut claimed = 0;
    loop {
        for (k, &i) in order.iter().enumerate() {
            let c = &mut cursor[k];
            c.2 += u64::from(backends[i].weight) * n;
            while c.2 >= threshold {
                c.2 -= threshold;
                while slots[c.0 as usize] != u16::MAX {
                    c.0 = (c.0 + c.1) % m;
                }
                slots[c.0 as usize] = i as u16;
                c.0 = (c.0 + c.1) % m;
                claimed += 1;
                if claimed == m {
                    return slots;
                }
            }
        }
    }
}

#[test]
fn the_unclaimed_list_tail_gives_the_walked_table() {
    for (n, m) in [
        (1, 2),
        (2, 13),
        (10, 1021),
        (10, 251),
        (32, 4093),
        (100, 16_381),
    ] {
        let backends = equal(n);
        let table = MaglevTable::build(&backends, m).unwrap();
        assert_eq!(
            table.slots(),
            walk_only_slots(&backends, m),
            "n = {n}, m = {m}"
        );
    }
}

proptest! {
    #[test]
    fn weighted_tables_equal_the_walked_table(backends in backend_set(), m in table_size()) {
        let active = backends.iter().filter(|b| b.weight > 0).count();
        prop_assume!(active > 0 && active <= m as usize);
        let table = MaglevTable::build(&backends, m).unwrap();
        prop_assert_eq!(table.slots(), &walk_only_slots(&backends, m)[..]);
    }
}

// ---------------------------------------------------------------- invariants

fn backend_set() -> impl Strategy<Value = Vec<MaglevBackend>> {
    proptest::collection::btree_map((any::<u32>(), 1u16..4), 0u32..20, 1..40).prop_map(|map| {
        map.into_iter()
            .map(|((ip, port), weight)| {
                MaglevBackend::new(SocketAddrV4::new(Ipv4Addr::from_bits(ip), port), weight)
            })
            .collect()
    })
}

fn table_size() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(41u32),
        Just(251),
        Just(1_021),
        Just(DEFAULT_TABLE_SIZE)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn table_is_full_of_weighted_backends(backends in backend_set(), m in table_size()) {
        let weighted = backends.iter().filter(|b| b.weight > 0).count();
        let table = match MaglevTable::build(&backends, m) {
            Err(MaglevError::TableTooSmall { size, backends: count }) => {
                prop_assert_eq!((size, count), (m, weighted));
                prop_assert!((m as usize) < weighted);
                return Ok(());
            }
            other => other.unwrap(),
        };
        prop_assert_eq!(table.size(), m);
        prop_assert_eq!(table.backend_count(), backends.len());
        if weighted == 0 {
            prop_assert!(table.is_empty());
            prop_assert_eq!(table.lookup(7), None);
        } else {
            prop_assert_eq!(table.slots().len(), m as usize);
            for &slot in table.slots() {
                prop_assert!(backends[usize::from(slot)].weight > 0);
            }
            let shares = table.shares();
            prop_assert_eq!(shares.iter().sum::<u32>(), m);
        }
    }

    #[test]
    fn table_does_not_depend_on_input_order(
        (backends, shuffled) in backend_set().prop_flat_map(|b| {
            let shuffled = Just(b.clone()).prop_shuffle();
            (Just(b), shuffled)
        }),
        m in table_size(),
    ) {
        let a = MaglevTable::build(&backends, m);
        let b = MaglevTable::build(&shuffled, m);
        match (a, b) {
            (Ok(a), Ok(b)) => {
                prop_assert_eq!(owners(&a, &backends), owners(&b, &shuffled));
            }
            (a, b) => prop_assert_eq!(a.err(), b.err()),
        }
    }

    #[test]
    fn rebuilding_gives_the_same_table(backends in backend_set(), m in table_size()) {
        prop_assert_eq!(MaglevTable::build(&backends, m), MaglevTable::build(&backends, m));
    }
}

// ---------------------------------------------------------------- balance

/// With equal weights every backend gets exactly one slot per round, so
/// shares differ by at most one slot and the max/min ratio is at most
/// `ceil(M/N) / floor(M/N)`: 1.0061 for N = 100 at M = 16381, well under the
/// 1.05 the design asks for.
#[test]
fn equal_weights_are_balanced_within_one_slot() {
    for (n, m) in [
        (3, DEFAULT_TABLE_SIZE),
        (10, DEFAULT_TABLE_SIZE),
        (100, DEFAULT_TABLE_SIZE),
        (1000, 65_537),
    ] {
        let table = MaglevTable::build(&equal(n), m).unwrap();
        let shares = table.shares();
        let max = *shares.iter().max().unwrap();
        let min = *shares.iter().min().unwrap();
        let ratio = max_min_ratio(&shares);
        println!("balance M={m} N={n}: min {min} max {max} max/min {ratio:.4}");
        assert!(max - min <= 1, "M={m} N={n}: min {min} max {max}");
        let bound = f64::from(m.div_ceil(n)) / f64::from(m / n);
        assert!(
            ratio <= bound && ratio <= 1.05,
            "M={m} N={n}: ratio {ratio}"
        );
    }
}

// ---------------------------------------------------------------- weights

/// Bound on `|share_i - M * w_i / W|` (N backends of weight > 0, W their sum,
/// T the claim threshold, a_i = w_i * N the credit per round).
///
/// After r full rounds backend i has claimed exactly floor(r * a_i / T) slots.
/// Let the table fill during round r + 1. Then
/// sum_i floor(r a_i / T) < M <= sum_i floor((r + 1) a_i / T), so
/// r N W / T - N < M (i.e. r / T < (M + N) / (N W)) and (r + 1) / T >= M / (N W).
/// share_i <= (r + 1) a_i / T < M w_i / W + N w_i / W + a_i / T, and
/// share_i > r a_i / T - 1 >= M w_i / W - a_i / T - 1. Hence
/// |share_i - M w_i / W| < N w_i / W + a_i / T + 1.
fn share_tolerance(backends: &[MaglevBackend], i: usize) -> f64 {
    let weights: Vec<u64> = backends
        .iter()
        .map(|b| u64::from(b.weight))
        .filter(|&w| w > 0)
        .collect();
    let n = weights.len() as u64;
    let sum: u64 = weights.iter().sum();
    let max = *weights.iter().max().unwrap();
    let threshold = (max * n).min(HEAVY_WEIGHT_FACTOR * sum);
    let w = u64::from(backends[i].weight);
    (n * w) as f64 / sum as f64 + (w * n) as f64 / threshold as f64 + 1.0
}

fn ideal_share(backends: &[MaglevBackend], i: usize, m: u32) -> f64 {
    let sum: u64 = backends.iter().map(|b| u64::from(b.weight)).sum();
    f64::from(m) * f64::from(backends[i].weight) / sum as f64
}

#[test]
fn shares_follow_weights() {
    let cases: [&[u32]; 4] = [
        &[1, 2, 3, 4],
        &[1, 1, 1, 1, 1, 1, 1, 1, 1, 10],
        &[100, 50, 25, 0, 5],
        // One backend far above HEAVY_WEIGHT_FACTOR x the mean.
        &[
            1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1000,
        ],
    ];
    for weights in cases {
        let backends: Vec<_> = (0u32..)
            .zip(weights)
            .map(|(i, &w)| MaglevBackend::new(addr(i), w))
            .collect();
        let table = MaglevTable::build(&backends, DEFAULT_TABLE_SIZE).unwrap();
        let shares = table.shares();
        let mut worst = 0.0f64;
        for (i, &share) in shares.iter().enumerate() {
            let ideal = ideal_share(&backends, i, DEFAULT_TABLE_SIZE);
            let error = (f64::from(share) - ideal).abs();
            assert!(
                error < share_tolerance(&backends, i),
                "weights {weights:?}: backend {i} share {share}, ideal {ideal:.1}"
            );
            if ideal > 0.0 {
                worst = worst.max(error / ideal);
            }
        }
        println!("weights {weights:?}: shares {shares:?}, worst relative error {worst:.5}");
        assert!(worst < 0.01, "weights {weights:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn shares_are_within_the_proven_bound(
        weights in proptest::collection::vec(
            prop_oneof![0u32..5, 1u32..100, 1u32..100_000, Just(u32::MAX)], 1..60),
        m in prop_oneof![Just(1_021u32), Just(DEFAULT_TABLE_SIZE)],
    ) {
        prop_assume!(weights.iter().any(|&w| w > 0));
        let backends: Vec<_> = (0u32..)
            .zip(&weights)
            .map(|(i, &w)| MaglevBackend::new(addr(i), w))
            .collect();
        let table = MaglevTable::build(&backends, m).unwrap();
        for (i, &share) in table.shares().iter().enumerate() {
            if backends[i].weight == 0 {
                prop_assert_eq!(share, 0);
                continue;
            }
            let error = (f64::from(share) - ideal_share(&backends, i, m)).abs();
            prop_assert!(error < share_tolerance(&backends, i), "backend {} share {}", i, share);
        }
    }
}

// ---------------------------------------------------------------- disruption

/// Removing one backend: all its slots move (necessarily) and only a small
/// fraction of the others do.
#[test]
fn removing_a_backend_moves_few_other_slots() {
    for (n, m) in [
        (3, DEFAULT_TABLE_SIZE),
        (10, DEFAULT_TABLE_SIZE),
        (100, DEFAULT_TABLE_SIZE),
        (100, 65_537),
        (1000, 65_537),
    ] {
        let backends = equal(n);
        let before = owners(&MaglevTable::build(&backends, m).unwrap(), &backends);
        let mut worst = 0.0f64;
        let mut total = 0.0f64;
        let samples = n.min(10);
        for removed in 0..samples {
            let mut rest = backends.clone();
            let gone = rest.remove(removed as usize).addr;
            let after = owners(&MaglevTable::build(&rest, m).unwrap(), &rest);
            assert!(after.iter().all(|&a| a != gone));
            let extra = extra_moved(&before, &after, gone);
            worst = worst.max(extra);
            total += extra;
        }
        println!(
            "remove 1 of N={n} at M={m}: extra slots moved mean {:.4}% worst {:.4}%",
            100.0 * total / f64::from(samples),
            100.0 * worst
        );
        assert!(worst < DISRUPTION_BOUND, "N={n} M={m}: {worst}");
    }
}

/// Measured worst case over the cases above is about 1% (see the test
/// output); 2% leaves headroom while still catching a broken permutation
/// (which moves a large fraction of slots).
const DISRUPTION_BOUND: f64 = 0.02;

#[test]
fn adding_a_backend_moves_about_one_share() {
    for (n, m) in [
        (3, DEFAULT_TABLE_SIZE),
        (10, DEFAULT_TABLE_SIZE),
        (100, DEFAULT_TABLE_SIZE),
        (1000, 65_537),
    ] {
        let backends = equal(n);
        let before = owners(&MaglevTable::build(&backends, m).unwrap(), &backends);
        let mut grown = backends.clone();
        let added = addr(n);
        grown.push(MaglevBackend::new(added, 1));
        let table = MaglevTable::build(&grown, m).unwrap();
        let after = owners(&table, &grown);
        let to_new = after.iter().filter(|&&a| a == added).count();
        let changed = before.iter().zip(&after).filter(|(b, a)| b != a).count();
        let fraction = changed as f64 / f64::from(m);
        let expected = 1.0 / f64::from(n + 1);
        let extra = extra_moved(&before, &after, added);
        println!(
            "add 1 to N={n} at M={m}: {:.4}% of slots changed (1/(N+1) = {:.4}%), extra {:.4}%",
            100.0 * fraction,
            100.0 * expected,
            100.0 * extra
        );
        // The new backend gets a fair share (equal weights: within one slot).
        assert!(to_new.abs_diff((m / (n + 1)) as usize) <= 1);
        assert!(extra < DISRUPTION_BOUND, "N={n} M={m}: extra {extra}");
        assert!(fraction >= expected - 1.0 / f64::from(m));
    }
}

/// Backend sets drawn from a fixed generator, so the figures are reproducible.
fn sample_sets(count: usize, max_n: u32) -> impl Iterator<Item = (Vec<MaglevBackend>, usize)> {
    let mut state: u64 = 0x1234_5678_9abc_def1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..count).map(move |_| {
        let n = 3 + (next() % u64::from(max_n - 2)) as u32;
        let seed = next() as u32;
        let backends: Vec<_> = (0..n)
            .map(|i| MaglevBackend::new(addr(i ^ seed), 1))
            .collect();
        let removed = (next() % u64::from(n)) as usize;
        (backends, removed)
    })
}

/// Owner changes caused by removing `backends[removed]`, as a fraction of all
/// slots: (all extra moves, extra moves except those between two backends
/// that share a skip).
fn removal_disruption(backends: &[MaglevBackend], removed: usize, m: u32) -> (f64, f64) {
    let before = owners(&MaglevTable::build(backends, m).unwrap(), backends);
    let mut rest = backends.to_vec();
    let gone = rest.remove(removed).addr;
    let after = owners(&MaglevTable::build(&rest, m).unwrap(), &rest);
    let skip_of = |a: SocketAddr| MaglevBackend::new(a, 1).permutation(m).1;
    let shares_skip = |a: SocketAddr| {
        backends
            .iter()
            .filter(|b| b.permutation(m).1 == skip_of(a))
            .count()
            > 1
    };
    let outside = before
        .iter()
        .zip(&after)
        .filter(|(b, a)| {
            b != a && **b != gone && !(skip_of(**b) == skip_of(**a) && shares_skip(**b))
        })
        .count();
    (
        extra_moved(&before, &after, gone),
        outside as f64 / f64::from(m),
    )
}

/// The distribution of removal disruption over many random sets (3 to 60
/// backends, M = 16381). Two backends with the same skip walk the same cycle
/// of slots and the phase of their interleaving can flip when a third goes
/// away: that pair then swaps many slots, which makes the tail heavy (about
/// 1 set in 1000 above 2.5%, observed maximum 9% in 20 000 sets, always with
/// a shared skip). The bulk stays well under 1%.
#[test]
fn removal_disruption_distribution() {
    let m = DEFAULT_TABLE_SIZE;
    let mut all = Vec::new();
    let mut worst_outside = 0.0f64;
    for (backends, removed) in sample_sets(400, 60) {
        let (extra, outside) = removal_disruption(&backends, removed, m);
        all.push(extra);
        worst_outside = worst_outside.max(outside);
    }
    all.sort_by(f64::total_cmp);
    let mean = all.iter().sum::<f64>() / all.len() as f64;
    let p50 = all[all.len() / 2];
    let p99 = all[all.len() * 99 / 100];
    let max = all[all.len() - 1];
    println!(
        "remove 1 of 3..60 at M={m}, {} sets: extra moved mean {:.3}% p50 {:.3}% p99 {:.3}% max {:.3}%; \
         excluding swaps between skip-sharing backends max {:.3}%",
        all.len(),
        100.0 * mean,
        100.0 * p50,
        100.0 * p99,
        100.0 * max,
        100.0 * worst_outside
    );
    assert!(mean < 0.01, "mean {mean}");
    assert!(p50 < 0.01, "p50 {p50}");
    assert!(p99 < DISRUPTION_BOUND, "p99 {p99}");
    assert!(worst_outside < DISRUPTION_TAIL_BOUND, "{worst_outside}");
}

/// Bound on extra moves outside skip-sharing backends for any one set: the
/// observed maximum over 20 000 random sets is 2.6% (N = 4), so 5% leaves
/// margin against flakiness while still failing for a broken permutation or
/// turn order (which moves a large fraction of all slots).
const DISRUPTION_TAIL_BOUND: f64 = 0.05;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn removal_disruption_is_bounded(
        n in 3u32..60,
        removed in any::<prop::sample::Index>(),
        seed in any::<u32>(),
    ) {
        let backends: Vec<_> = (0..n).map(|i| MaglevBackend::new(addr(i ^ seed), 1)).collect();
        let (_, outside) = removal_disruption(&backends, removed.index(backends.len()), DEFAULT_TABLE_SIZE);
        prop_assert!(outside < DISRUPTION_TAIL_BOUND, "{}", outside);
    }
}

/// IPv6 backends hash their 16 address bytes and port; a table over them
/// is complete and the same in every process, and an IPv4 backend's
/// identity is the 6 bytes it always was.
#[test]
fn ipv6_backends_build_complete_deterministic_tables() {
    let v4 = MaglevBackend::new(SocketAddrV4::new(Ipv4Addr::new(10, 1, 2, 3), 8443), 1);
    let (b, n) = v4.identity_bytes();
    assert_eq!(&b[..n], &[10, 1, 2, 3, 0x20, 0xfb]);
    let backends: Vec<MaglevBackend> = (0..7u16)
        .map(|i| {
            let ip = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, i + 1);
            MaglevBackend::new(SocketAddr::new(ip.into(), 8080), 1)
        })
        .collect();
    let (b, n) = backends[0].identity_bytes();
    assert_eq!(n, 18);
    assert_eq!(
        &b[..16],
        &Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1).octets()
    );
    let t = MaglevTable::build(&backends, 251).unwrap();
    let mut reversed = backends.clone();
    reversed.reverse();
    let r = MaglevTable::build(&reversed, 251).unwrap();
    assert_eq!(owners(&t, &backends), owners(&r, &reversed));
    let mut counts = [0u32; 7];
    for &s in t.slots() {
        counts[usize::from(s)] += 1;
    }
    assert!(counts.iter().all(|&c| (35..=37).contains(&c)), "{counts:?}");
}
