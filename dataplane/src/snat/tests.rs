use super::*;
use crate::flow::FlowKey;
use proptest::prelude::*;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddrV4;

const SNAT_A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const SNAT_B: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);

fn backend(n: u8, port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::new(10, 1, 0, n), port)
}

fn config(addrs: &[Ipv4Addr], range: RangeInclusive<u16>) -> SnatConfig {
    SnatConfig {
        addrs: addrs.to_vec(),
        port_range: range,
        ..SnatConfig::default()
    }
}

fn allocator(cfg: &SnatConfig) -> SnatAllocator {
    match SnatAllocator::new(cfg, 0, 1, 7, TableHasher::from_seed(5)) {
        Ok(a) => a,
        Err(e) => panic!("config rejected: {e}"),
    }
}

/// Conntrack stand-in: the set of tracked reply keys.
#[derive(Default)]
struct Live(HashSet<FlowKey>);

impl Live {
    fn alloc(
        &mut self,
        snat: &mut SnatAllocator,
        proto: Proto,
        b: SocketAddrV4,
        now_ms: u64,
    ) -> Result<(SnatTuple, FlowKey), SnatExhausted> {
        let t = snat.alloc(proto, b, now_ms, |k| self.0.contains(k))?;
        let key = reply_key(proto, t.addr, t.port, b);
        assert!(self.0.insert(key), "handed out live tuple {key}");
        Ok((t, key))
    }

    fn release(&mut self, snat: &mut SnatAllocator, key: &FlowKey, now_ms: u64) {
        assert!(self.0.remove(key));
        snat.release(key, now_ms);
    }
}

fn must<T>(r: Result<T, SnatExhausted>) -> T {
    match r {
        Ok(t) => t,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn slices_split_the_range_evenly_in_worker_order() {
    let r = 1024..=65535u16; // 64512 ports, 16128 per worker
    assert_eq!(port_slice(r.clone(), 0, 4), 1024..=17151);
    assert_eq!(port_slice(r.clone(), 1, 4), 17152..=33279);
    assert_eq!(port_slice(r.clone(), 3, 4), 49408..=65535);
    // 10 ports over 3 workers: 4, 3, 3.
    assert_eq!(port_slice(10..=19, 0, 3), 10..=13);
    assert_eq!(port_slice(10..=19, 1, 3), 14..=16);
    assert_eq!(port_slice(10..=19, 2, 3), 17..=19);
    assert_eq!(owner_of_port(10..=19, 13, 3), Some(0));
    assert_eq!(owner_of_port(10..=19, 14, 3), Some(1));
    assert_eq!(owner_of_port(10..=19, 19, 3), Some(2));
    assert_eq!(owner_of_port(10..=19, 20, 3), None);
    assert_eq!(owner_of_port(10..=19, 9, 3), None);
    assert_eq!(owner_of_port(10..=19, 12, 0), None);
    // Degenerate inputs give empty slices, not panics.
    assert!(port_slice(10..=19, 3, 3).is_empty());
    assert!(port_slice(10..=19, 0, 0).is_empty());
    assert!(port_slice(RangeInclusive::new(20, 19), 0, 1).is_empty());
    assert!(port_slice(10..=11, 2, 3).is_empty());
    assert_eq!(port_slice(0..=65535, 0, 1), 0..=65535);
    assert_eq!(owner_of_port(0..=65535, 65535, 1), Some(0));
}

#[test]
fn allocator_stays_in_its_slice() {
    let cfg = config(&[SNAT_A], 1024..=65535);
    for worker in 0..3 {
        let mut snat = match SnatAllocator::new(&cfg, worker, 3, 99, TableHasher::from_seed(5)) {
            Ok(a) => a,
            Err(e) => panic!("{e}"),
        };
        let slice = port_slice(cfg.port_range.clone(), worker, 3);
        assert_eq!(snat.slice(), slice);
        let mut live = Live::default();
        for i in 0..2000 {
            let (t, _) = must(live.alloc(&mut snat, Proto::Udp, backend(1, 80), i));
            assert!(slice.contains(&t.port), "{} outside {slice:?}", t.port);
            assert_eq!(
                owner_of_port(cfg.port_range.clone(), t.port, 3),
                Some(worker)
            );
            assert!(snat.owns(t.addr, t.port));
        }
    }
}

#[test]
fn probing_skips_in_use_tuples() {
    let mut snat = allocator(&config(&[SNAT_A], 2000..=2099));
    let b = backend(1, 443);
    for free_port in [2000u16, 2057, 2099] {
        // Everything but `free_port` is tracked.
        let t = must(snat.alloc(Proto::Tcp, b, 0, |k| k.dst_port != free_port));
        assert_eq!((t.addr, t.port), (SNAT_A, free_port));
        assert!(!t.reused_in_quarantine);
    }
}

#[test]
fn probe_limit_bounds_the_search() {
    let mut cfg = config(&[SNAT_A], 2000..=2999);
    cfg.probe_limit = 4;
    let mut snat = allocator(&cfg);
    let mut probes_per_call = Vec::new();
    let (mut found, mut missed) = (0, 0);
    for _ in 0..200 {
        let mut probes = 0u32;
        match snat.alloc(Proto::Udp, backend(1, 53), 0, |k| {
            probes += 1;
            k.dst_port != 2500
        }) {
            Ok(t) => {
                assert_eq!(t.port, 2500);
                found += 1;
            }
            Err(SnatExhausted) => missed += 1,
        }
        probes_per_call.push(probes);
    }
    // Up to PROBE_ROUNDS windows of 4 probes from fresh random starts.
    assert!(probes_per_call.iter().all(|&p| (1..=16).contains(&p)));
    assert!(
        probes_per_call.contains(&16),
        "exhaustion tries every round"
    );
    assert!(missed > 0, "16 probes always hit one port of 1000");
    assert_eq!(snat.stats().exhausted, missed);
    assert_eq!(snat.stats().allocations, found);
}

#[test]
fn same_port_serves_different_backends_at_once() {
    let mut snat = allocator(&config(&[SNAT_A], 5000..=5000));
    let mut live = Live::default();
    let (a, _) = must(live.alloc(&mut snat, Proto::Tcp, backend(1, 80), 0));
    let (b, _) = must(live.alloc(&mut snat, Proto::Tcp, backend(2, 80), 0));
    let (c, _) = must(live.alloc(&mut snat, Proto::Tcp, backend(1, 81), 0));
    let (d, _) = must(live.alloc(&mut snat, Proto::Udp, backend(1, 80), 0));
    for t in [a, b, c, d] {
        assert_eq!((t.addr, t.port), (SNAT_A, 5000));
    }
    // The tuple towards backend 1:80/tcp itself is taken.
    assert!(
        live.alloc(&mut snat, Proto::Tcp, backend(1, 80), 0)
            .is_err()
    );
    assert_eq!(snat.stats().in_use, 4);
}

#[test]
fn released_tcp_tuple_is_skipped_while_other_ports_are_free() {
    let mut snat = allocator(&config(&[SNAT_A], 3000..=3007));
    let mut live = Live::default();
    let b = backend(1, 80);
    let (first, key) = must(live.alloc(&mut snat, Proto::Tcp, b, 0));
    live.release(&mut snat, &key, 0);
    assert_eq!(snat.stats().quarantined, 1);
    // Seven other ports are free: none of them is the quarantined one.
    for t_ms in 1..=7 {
        let (t, _) = must(live.alloc(&mut snat, Proto::Tcp, b, t_ms));
        assert_ne!(t.port, first.port);
        assert!(!t.reused_in_quarantine);
    }
    // Only the quarantined tuple is left: it is reused, and counted.
    let (t, _) = must(live.alloc(&mut snat, Proto::Tcp, b, 8));
    assert_eq!(t.port, first.port);
    assert!(t.reused_in_quarantine);
    let s = snat.stats();
    assert_eq!(s.quarantine_reuses, 1);
    assert_eq!(s.quarantined, 0);
    // A different backend is not affected by that quarantine.
    let mut snat = allocator(&config(&[SNAT_A], 3000..=3000));
    let mut live = Live::default();
    let (_, key) = must(live.alloc(&mut snat, Proto::Tcp, b, 0));
    live.release(&mut snat, &key, 0);
    let (t, _) = must(live.alloc(&mut snat, Proto::Tcp, backend(2, 80), 1));
    assert!(!t.reused_in_quarantine);
}

#[test]
fn forced_reuse_takes_the_oldest_released_tuple() {
    let mut snat = allocator(&config(&[SNAT_A], 4000..=4003));
    let mut live = Live::default();
    let b = backend(1, 80);
    let mut keys = Vec::new();
    for _ in 0..4 {
        keys.push(must(live.alloc(&mut snat, Proto::Tcp, b, 0)).1);
    }
    // Release in a shuffled order at increasing times.
    let order = [2usize, 0, 3, 1];
    for (i, &k) in order.iter().enumerate() {
        live.release(&mut snat, &keys[k], 10 * (i as u64 + 1));
    }
    for (n, &k) in order.iter().enumerate() {
        let (t, got) = must(live.alloc(&mut snat, Proto::Tcp, b, 100));
        assert!(t.reused_in_quarantine);
        assert_eq!(got, keys[k], "reuse {n} is not the oldest released");
        assert_eq!(snat.stats().quarantine_reuses, n as u64 + 1);
    }
    assert!(live.alloc(&mut snat, Proto::Tcp, b, 100).is_err());
}

#[test]
fn quarantine_expires_after_quarantine_ms() {
    let mut cfg = config(&[SNAT_A], 4000..=4001);
    cfg.quarantine_ms = 1000;
    let mut snat = allocator(&cfg);
    let mut live = Live::default();
    let b = backend(1, 80);
    let (_, k0) = must(live.alloc(&mut snat, Proto::Tcp, b, 0));
    let (_, k1) = must(live.alloc(&mut snat, Proto::Tcp, b, 0));
    live.release(&mut snat, &k0, 0);
    live.release(&mut snat, &k1, 500);
    // At 999 both are quarantined.
    let (t, k) = must(live.alloc(&mut snat, Proto::Tcp, b, 999));
    assert!(t.reused_in_quarantine);
    assert_eq!(k, k0);
    live.release(&mut snat, &k, 999);
    // At 1500 k1 (released at 500) has expired, k0 (999) has not.
    let (t, k) = must(live.alloc(&mut snat, Proto::Tcp, b, 1500));
    assert!(!t.reused_in_quarantine);
    assert_eq!(k, k1);
    assert_eq!(snat.stats().quarantine_reuses, 1);
    // Idle expiry purges the rest once it is old.
    assert_eq!(snat.expire(1998, 64), 0);
    assert_eq!(snat.stats().quarantined, 1);
    assert_eq!(snat.expire(1999, 64), 1);
    assert_eq!(snat.stats().quarantined, 0);
}

#[test]
fn udp_and_icmp_are_not_quarantined() {
    let mut snat = allocator(&config(&[SNAT_A], 4000..=4000));
    let mut live = Live::default();
    for proto in [Proto::Udp, Proto::Icmp] {
        let b = backend(1, 53);
        for now in 0..10 {
            let (t, k) = must(live.alloc(&mut snat, proto, b, now));
            assert_eq!(t.port, 4000);
            assert!(!t.reused_in_quarantine);
            live.release(&mut snat, &k, now);
        }
    }
    let s = snat.stats();
    assert_eq!((s.quarantined, s.quarantine_reuses, s.in_use), (0, 0, 0));
}

#[test]
fn icmp_reply_key_uses_the_identifier_as_both_ports() {
    let k = reply_key(Proto::Icmp, SNAT_A, 4242, backend(1, 9));
    assert_eq!((k.src_port, k.dst_port), (4242, 4242));
    let k = reply_key(Proto::Tcp, SNAT_A, 4242, backend(1, 9));
    assert_eq!((k.src_ip, k.src_port), (Ipv4Addr::new(10, 1, 0, 1), 9));
    assert_eq!((k.dst_ip, k.dst_port), (SNAT_A, 4242));
}

#[test]
fn exhaustion_is_an_error_and_counted() {
    let mut snat = allocator(&config(&[SNAT_A], 6000..=6001));
    let mut live = Live::default();
    let b = backend(1, 80);
    must(live.alloc(&mut snat, Proto::Udp, b, 0));
    must(live.alloc(&mut snat, Proto::Udp, b, 0));
    assert_eq!(
        live.alloc(&mut snat, Proto::Udp, b, 0).err(),
        Some(SnatExhausted)
    );
    assert_eq!(
        live.alloc(&mut snat, Proto::Udp, b, 0).err(),
        Some(SnatExhausted)
    );
    let s = snat.stats();
    assert_eq!((s.allocations, s.exhausted, s.in_use), (2, 2, 2));
}

#[test]
fn second_address_is_used_when_the_first_is_exhausted() {
    let mut snat = allocator(&config(&[SNAT_A, SNAT_B], 7000..=7002));
    let mut live = Live::default();
    let b = backend(1, 80);
    let mut got = Vec::new();
    for _ in 0..6 {
        let (t, _) = must(live.alloc(&mut snat, Proto::Tcp, b, 0));
        got.push(t.addr);
    }
    assert_eq!(got, [SNAT_A, SNAT_A, SNAT_A, SNAT_B, SNAT_B, SNAT_B]);
    assert!(live.alloc(&mut snat, Proto::Tcp, b, 0).is_err());
    assert_eq!(snat.stats().exhausted, 1);

    // A free tuple on the second address beats a quarantined one on the first.
    let mut snat = allocator(&config(&[SNAT_A, SNAT_B], 7000..=7002));
    let mut live = Live::default();
    let keys: Vec<_> = (0..3)
        .map(|_| must(live.alloc(&mut snat, Proto::Tcp, b, 0)).1)
        .collect();
    assert!(keys.iter().all(|k| k.dst_ip == SNAT_A));
    live.release(&mut snat, &keys[1], 1);
    let (t, _) = must(live.alloc(&mut snat, Proto::Tcp, b, 2));
    assert_eq!((t.addr, t.reused_in_quarantine), (SNAT_B, false));
}

#[test]
fn quarantine_overflow_forgets_the_oldest_and_counts() {
    let mut cfg = config(&[SNAT_A], 8000..=8009);
    cfg.quarantine_capacity = 2;
    let mut snat = allocator(&cfg);
    let mut live = Live::default();
    let b = backend(1, 80);
    let keys: Vec<_> = (0..3)
        .map(|_| must(live.alloc(&mut snat, Proto::Tcp, b, 0)).1)
        .collect();
    for (i, k) in keys.iter().enumerate() {
        live.release(&mut snat, k, i as u64);
    }
    let s = snat.stats();
    assert_eq!((s.quarantined, s.quarantine_overflows), (2, 1));
    // The forgotten tuple is free again; the other two are still skipped.
    let mut not_quarantined = HashSet::new();
    while let Ok((t, k)) = live.alloc(&mut snat, Proto::Tcp, b, 10) {
        if !t.reused_in_quarantine {
            not_quarantined.insert(k);
        }
    }
    assert!(not_quarantined.contains(&keys[0]));
    assert!(!not_quarantined.contains(&keys[1]));
    assert!(!not_quarantined.contains(&keys[2]));
}

#[test]
fn release_ignores_foreign_tuples() {
    let cfg = config(&[SNAT_A], 1000..=1999);
    let mut snat = match SnatAllocator::new(&cfg, 1, 2, 1, TableHasher::from_seed(5)) {
        Ok(a) => a,
        Err(e) => panic!("{e}"),
    };
    let mut live = Live::default();
    must(live.alloc(&mut snat, Proto::Tcp, backend(1, 80), 0));
    // Port of worker 0, and an address that is not a SNAT address.
    snat.release(&reply_key(Proto::Tcp, SNAT_A, 1000, backend(1, 80)), 0);
    snat.release(&reply_key(Proto::Tcp, SNAT_B, 1600, backend(1, 80)), 0);
    assert!(!snat.owns(SNAT_A, 1499));
    assert!(snat.owns(SNAT_A, 1500));
    assert!(snat.owns(SNAT_A, 1999));
    assert!(!snat.owns(SNAT_B, 1500));
    let s = snat.stats();
    assert_eq!((s.in_use, s.quarantined), (1, 0));
}

#[test]
fn config_errors() {
    let ok = config(&[SNAT_A], 1024..=1027);
    let new =
        |c: &SnatConfig, w, n| SnatAllocator::new(c, w, n, 0, TableHasher::from_seed(5)).err();
    assert_eq!(new(&ok, 0, 4), None);
    assert_eq!(
        new(&config(&[], 1024..=2000), 0, 1),
        Some(SnatError::NoAddresses)
    );
    assert_eq!(
        new(&config(&[SNAT_A, SNAT_B, SNAT_A], 1024..=2000), 0, 1),
        Some(SnatError::DuplicateAddress(SNAT_A.into()))
    );
    assert_eq!(
        new(&config(&[SNAT_A], RangeInclusive::new(2000, 1999)), 0, 1),
        Some(SnatError::EmptyRange {
            start: 2000,
            end: 1999
        })
    );
    assert_eq!(new(&ok, 0, 0), Some(SnatError::NoWorkers));
    assert_eq!(
        new(&ok, 4, 4),
        Some(SnatError::WorkerOutOfRange {
            worker: 4,
            workers: 4
        })
    );
    assert_eq!(
        new(&ok, 4, 5),
        Some(SnatError::SliceTooSmall {
            ports: 4,
            worker: 4,
            workers: 5
        })
    );
    let mut c = ok.clone();
    c.probe_limit = 0;
    assert_eq!(new(&c, 0, 1), Some(SnatError::ZeroProbeLimit));
    let mut c = ok.clone();
    c.quarantine_capacity = 0;
    assert_eq!(new(&c, 0, 1), Some(SnatError::BadQuarantineCapacity(0)));
}

#[test]
fn workers_with_the_same_seed_draw_different_ports() {
    let cfg = config(&[SNAT_A], 1024..=65535);
    let draws = |w: usize| -> Vec<u16> {
        let mut s = match SnatAllocator::new(&cfg, w, 2, 5, TableHasher::from_seed(5)) {
            Ok(a) => a,
            Err(e) => panic!("{e}"),
        };
        let start = *s.slice().start();
        (0..16)
            .map(|_| must(s.alloc(Proto::Udp, backend(1, 80), 0, |_| false)).port - start)
            .collect()
    };
    assert_ne!(draws(0), draws(1));
}

proptest! {
    /// Slices are contiguous, in worker order, differ in size by at most one,
    /// cover the range exactly; `owner_of_port` agrees with them.
    #[test]
    fn slices_partition_the_range(start in any::<u16>(), len in 1u32..=65536, workers in 1usize..=300, probes in proptest::collection::vec(any::<u16>(), 32)) {
        let end = (u32::from(start) + len - 1).min(65535) as u16;
        let range = start..=end;
        let len = range_len(&range);
        let slices: Vec<_> = (0..workers).map(|w| port_slice(range.clone(), w, workers)).collect();
        let mut next = u32::from(start);
        let sizes: Vec<u32> = slices.iter().map(range_len).collect();
        for s in slices.iter().filter(|s| !s.is_empty()) {
            prop_assert_eq!(u32::from(*s.start()), next);
            next = u32::from(*s.end()) + 1;
        }
        prop_assert_eq!(next, u32::from(end) + 1);
        prop_assert_eq!(sizes.iter().sum::<u32>(), len);
        let max = sizes.iter().copied().max().unwrap_or(0);
        let min = sizes.iter().copied().min().unwrap_or(0);
        prop_assert!(max - min <= 1);
        // Boundaries of every slice and random ports map to their owner.
        let mut ports: Vec<u16> = probes;
        for s in slices.iter().filter(|s| !s.is_empty()) {
            ports.push(*s.start());
            ports.push(*s.end());
        }
        for p in ports {
            let owner = owner_of_port(range.clone(), p, workers);
            let holders: Vec<usize> = (0..workers).filter(|&w| slices[w].contains(&p)).collect();
            match owner {
                Some(w) => prop_assert_eq!(holders, vec![w]),
                None => {
                    prop_assert!(!range.contains(&p));
                    prop_assert!(holders.is_empty());
                }
            }
        }
    }

    /// Exhaustively for small ranges: every port of the range has exactly one
    /// owner.
    #[test]
    fn every_port_has_exactly_one_owner(start in 0u16..=65000, len in 1u16..=300, workers in 1usize..=40) {
        let range = start..=start.saturating_add(len - 1);
        let slices: Vec<_> = (0..workers).map(|w| port_slice(range.clone(), w, workers)).collect();
        for p in range.clone() {
            let holders: Vec<usize> = (0..workers).filter(|&w| slices[w].contains(&p)).collect();
            prop_assert_eq!(holders.len(), 1);
            prop_assert_eq!(owner_of_port(range.clone(), p, workers), holders.first().copied());
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Alloc { tcp: bool, backend: u8 },
    Release { pick: usize },
    Advance { ms: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (any::<bool>(), 0u8..3).prop_map(|(tcp, backend)| Op::Alloc { tcp, backend }),
        3 => any::<usize>().prop_map(|pick| Op::Release { pick }),
        1 => (1u64..700).prop_map(|ms| Op::Advance { ms }),
    ]
}

/// Runs `ops` against an allocator with a model conntrack and a model
/// quarantine, checking the invariants after each step.
fn run_model(
    cfg: &SnatConfig,
    worker: usize,
    workers: usize,
    seed: u64,
    ops: &[Op],
) -> Result<SnatAllocator, TestCaseError> {
    let mut snat = SnatAllocator::new(cfg, worker, workers, seed, TableHasher::from_seed(5))
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let slice = snat.slice();
    let ports_per_addr = range_len(&slice);
    // Each probe window covers the whole slice: exhaustion and forced reuse
    // mean every tuple is taken.
    let exhaustive = cfg.probe_limit >= ports_per_addr;
    let mut live: Vec<FlowKey> = Vec::new();
    let mut live_set: HashSet<FlowKey> = HashSet::new();
    // Model quarantine: TCP reply key -> release time (never overflows here
    // when quarantine_capacity exceeds the number of releases).
    let mut quarantined: HashMap<FlowKey, u64> = HashMap::new();
    let mut now = 0u64;
    let q_ms = cfg.quarantine_ms;
    let is_q = |q: &HashMap<FlowKey, u64>, k: &FlowKey, now: u64| {
        q.get(k).is_some_and(|&t| now - t < q_ms)
    };
    for op in ops {
        match *op {
            Op::Advance { ms } => now += ms,
            Op::Release { pick } => {
                if live.is_empty() {
                    continue;
                }
                let key = live.swap_remove(pick % live.len());
                live_set.remove(&key);
                snat.release(&key, now);
                if key.proto == Proto::Tcp {
                    quarantined.insert(key, now);
                }
            }
            Op::Alloc { tcp, backend: n } => {
                let proto = if tcp { Proto::Tcp } else { Proto::Udp };
                let b = backend(n, 8080);
                let all = || {
                    cfg.addrs
                        .iter()
                        .flat_map(|&a| slice.clone().map(move |p| (a, p)))
                };
                match snat.alloc(proto, b, now, |k| live_set.contains(k)) {
                    Ok(t) => {
                        let key = reply_key(proto, t.addr, t.port, b);
                        prop_assert!(!live_set.contains(&key), "live tuple handed out: {}", key);
                        prop_assert!(slice.contains(&t.port));
                        prop_assert!(cfg.addrs.contains(&t.addr));
                        let was_q = is_q(&quarantined, &key, now);
                        if cfg.quarantine_capacity > ops.len() {
                            prop_assert_eq!(t.reused_in_quarantine, was_q);
                        }
                        if t.reused_in_quarantine
                            && exhaustive
                            && cfg.quarantine_capacity > ops.len()
                        {
                            // No tuple was free, and this was the oldest.
                            let released = quarantined.get(&key).copied().unwrap_or(0);
                            for (a, p) in all() {
                                let k = reply_key(proto, a, p, b);
                                prop_assert!(
                                    live_set.contains(&k) || is_q(&quarantined, &k, now),
                                    "forced reuse while {} was free",
                                    k
                                );
                                if !live_set.contains(&k) {
                                    prop_assert!(
                                        quarantined.get(&k).copied().unwrap_or(u64::MAX)
                                            >= released
                                    );
                                }
                            }
                        }
                        quarantined.remove(&key);
                        live_set.insert(key);
                        live.push(key);
                    }
                    Err(SnatExhausted) => {
                        if exhaustive {
                            for (a, p) in all() {
                                prop_assert!(live_set.contains(&reply_key(proto, a, p, b)));
                            }
                        }
                    }
                }
            }
        }
        prop_assert_eq!(snat.stats().in_use, live.len() as u64);
        prop_assert!(snat.stats().quarantined <= cfg.quarantine_capacity as u64);
    }
    for key in live.drain(..) {
        snat.release(&key, now);
    }
    prop_assert_eq!(snat.stats().in_use, 0);
    Ok(snat)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Under pressure (a tiny slice, two SNAT IPs, three backends): no live
    /// tuple is ever handed out, stats track the model, forced reuse and
    /// exhaustion only happen when nothing better exists.
    #[test]
    fn no_live_tuple_is_handed_out_under_pressure(ops in proptest::collection::vec(op(), 1..400), seed in any::<u64>(), worker in 0usize..3) {
        let cfg = SnatConfig {
            addrs: vec![SNAT_A, SNAT_B],
            port_range: 20000..=20017, // 6 ports per worker
            quarantine_ms: 2000,
            quarantine_capacity: 1024,
            probe_limit: 8,
        };
        run_model(&cfg, worker, 3, seed, &ops)?;
    }

    /// With a small quarantine ring, overflows happen but the tuple
    /// invariants still hold.
    #[test]
    fn invariants_hold_with_quarantine_overflow(ops in proptest::collection::vec(op(), 1..400), seed in any::<u64>()) {
        let cfg = SnatConfig {
            addrs: vec![SNAT_A],
            port_range: 30000..=30009,
            quarantine_ms: 5000,
            quarantine_capacity: 3,
            probe_limit: 4,
        };
        run_model(&cfg, 0, 1, seed, &ops)?;
    }

    /// Without pressure (fewer tuples ever touched than one probe window), a
    /// quarantined tuple is never handed out.
    #[test]
    fn no_quarantine_reuse_without_pressure(ops in proptest::collection::vec(op(), 1..200), seed in any::<u64>(), worker in 0usize..4) {
        let cfg = SnatConfig {
            addrs: vec![SNAT_A],
            ..SnatConfig::default()
        };
        let snat = run_model(&cfg, worker, 4, seed, &ops)?;
        prop_assert_eq!(snat.stats().quarantine_reuses, 0);
        prop_assert_eq!(snat.stats().exhausted, 0);
    }
}

#[test]
fn fresh_random_starts_find_free_tuples_outside_the_first_window() {
    // One free port in 1000; a 32-port window from one random start finds it
    // about 3% of the time, four windows about 12%: retries must help.
    let mut cfg = config(&[SNAT_A], 2000..=2999);
    cfg.probe_limit = 32;
    let mut snat = allocator(&cfg);
    let mut found = 0;
    for _ in 0..2_000 {
        if snat
            .alloc(Proto::Udp, backend(1, 53), 0, |k| k.dst_port != 2500)
            .is_ok()
        {
            found += 1;
            let key = reply_key(Proto::Udp, SNAT_A, 2500, backend(1, 53));
            snat.release(&key, 0);
        }
    }
    assert!(found > 150, "found the free port {found} times in 2000");
}

/// The hashed variant hands out exactly what `alloc` does (same candidates
/// in the same order, same quarantine decisions), gives `in_use` each
/// candidate's stable hash, and announces every checked candidate through
/// `prefetch` before checking it.
#[test]
fn alloc_hashed_matches_alloc_and_prefetches_what_it_checks() {
    let mut cfg = config(&[SNAT_A, SNAT_B], 3000..=3199);
    cfg.quarantine_ms = 1_000;
    let (mut plain, mut hashed) = (allocator(&cfg), allocator(&cfg));
    let (mut live_plain, mut live_hashed) = (Live::default(), Live::default());
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut checked_in_windows = 0;
    for step in 0..4_000u64 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let now = step / 4;
        let b = backend((rng % 3) as u8, 80);
        // Mostly allocate (to well past the first address's 200 ports,
        // so probing and windows happen), sometimes release.
        if rng.is_multiple_of(5) && !live_plain.0.is_empty() {
            let mut keys: Vec<_> = live_plain.0.iter().copied().collect();
            keys.sort_by_key(|k| (k.dst_ip, k.dst_port, k.src_ip));
            let key = keys[(rng >> 8) as usize % keys.len()];
            live_plain.release(&mut plain, &key, now);
            live_hashed.release(&mut hashed, &key, now);
            continue;
        }
        let want = live_plain
            .alloc(&mut plain, Proto::Tcp, b, now)
            .map(|r| r.0);
        let prefetched: std::cell::RefCell<HashSet<u64>> = Default::default();
        let mut checks = 0;
        let got = hashed.alloc_hashed(
            Proto::Tcp,
            b,
            now,
            |k, hash| {
                assert_eq!(hash, TableHasher::from_seed(5).hash(k));
                assert!(
                    prefetched.borrow().contains(&hash),
                    "checked before prefetch"
                );
                checks += 1;
                live_hashed.0.contains(k)
            },
            |hash| {
                prefetched.borrow_mut().insert(hash);
            },
        );
        assert_eq!(got, want, "step {step}");
        if let Ok(t) = got {
            assert!(
                live_hashed
                    .0
                    .insert(reply_key(Proto::Tcp, t.addr, t.port, b))
            );
        }
        if checks > 1 {
            checked_in_windows += 1;
        }
    }
    assert!(
        checked_in_windows > 100,
        "windows exercised {checked_in_windows} times"
    );
    assert_eq!(plain.stats(), hashed.stats());
}

#[test]
fn per_address_stats_count_use_and_exhaustion() {
    // 8 ports: the first address fills up, then the second takes over.
    let cfg = SnatConfig {
        quarantine_ms: 0,
        ..config(&[SNAT_A, SNAT_B], 2000..=2007)
    };
    let mut snat = allocator(&cfg);
    let mut live = Live::default();
    let b = backend(10, 8080);
    let mut keys = Vec::new();
    for _ in 0..8 {
        keys.push(must(live.alloc(&mut snat, Proto::Udp, b, 1)).1);
    }
    let stats = |s: &SnatAllocator| {
        s.addr_stats()
            .iter()
            .map(|a| (a.addr, a.in_use, a.exhausted))
            .collect::<Vec<_>>()
    };
    assert_eq!(stats(&snat), [(SNAT_A, 8, 0), (SNAT_B, 0, 0)]);
    let (t, key) = must(live.alloc(&mut snat, Proto::Udp, b, 2));
    assert_eq!(t.addr, SNAT_B);
    assert_eq!(stats(&snat), [(SNAT_A, 8, 1), (SNAT_B, 1, 0)]);
    for k in keys.iter().chain([&key]) {
        live.release(&mut snat, k, 3);
    }
    assert_eq!(stats(&snat), [(SNAT_A, 0, 1), (SNAT_B, 0, 0)]);
    // Both full: a failed allocation counts on every address.
    let one = config(&[SNAT_A, SNAT_B], 2000..=2000);
    let mut snat = allocator(&one);
    let mut live = Live::default();
    must(live.alloc(&mut snat, Proto::Udp, b, 1));
    must(live.alloc(&mut snat, Proto::Udp, b, 1));
    assert!(live.alloc(&mut snat, Proto::Udp, b, 1).is_err());
    assert_eq!(stats(&snat), [(SNAT_A, 1, 2), (SNAT_B, 1, 1)]);
}

/// IPv6 SNAT addresses get the same slices and quarantine.
#[test]
fn ipv6_allocators_share_the_slices_and_quarantine() {
    use std::net::{Ipv6Addr, SocketAddrV6};
    let a: Ipv6Addr = "fd00:1::1".parse().unwrap();
    let cfg = SnatConfig {
        addrs: vec![a],
        port_range: 1024..=1031,
        quarantine_ms: 60_000,
        ..SnatConfig::default()
    };
    let b = SocketAddrV6::new("fd00:1::10".parse().unwrap(), 8080, 0, 0);
    let mut w0: SnatAllocator<Ipv6Addr> =
        SnatAllocator::new(&cfg, 0, 2, 7, TableHasher::from_seed(5)).unwrap();
    let w1: SnatAllocator<Ipv6Addr> =
        SnatAllocator::new(&cfg, 1, 2, 7, TableHasher::from_seed(5)).unwrap();
    assert_eq!(w0.slice(), 1024..=1027);
    assert_eq!(w1.slice(), 1028..=1031);
    let mut live: HashSet<FlowKeyOf<Ipv6Addr>> = HashSet::new();
    for _ in 0..4 {
        let t = w0.alloc(Proto::Tcp, b, 0, |k| live.contains(k)).unwrap();
        assert!(w0.owns(t.addr, t.port) && !w1.owns(t.addr, t.port));
        let key = reply_key(Proto::Tcp, t.addr, t.port, b);
        assert_eq!(key.src_ip, *b.ip());
        assert!(live.insert(key));
    }
    assert_eq!(
        w0.alloc(Proto::Tcp, b, 0, |k| live.contains(k)),
        Err(SnatExhausted)
    );
    // A released tuple is quarantined: reused only under pressure.
    let k = *live.iter().next().unwrap();
    live.remove(&k);
    w0.release(&k, 10);
    assert_eq!(w0.stats().quarantined, 1);
    let t = w0.alloc(Proto::Tcp, b, 20, |k| live.contains(k)).unwrap();
    assert!(t.reused_in_quarantine);
    assert_eq!((t.addr, t.port), (k.dst_ip, k.dst_port));
}
