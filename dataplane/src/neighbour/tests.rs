//! The table's tests run once per family (the `family_tests!` list at
//! the end): IPv6 next hops are resolved, learned, aged and reclaimed
//! exactly as IPv4 ones. Addresses are written as 32-bit numbers: the IPv4
//! address itself, or `2001:db8::` plus it for IPv6.

use super::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

const MAC: [u8; 6] = [2, 0xbb, 0, 0, 0, 10];

/// a::<I>() family under test.
trait Addr: NeighbourAddr {
    /// The address numbered `n` (see the module docs).
    fn nth(n: u32) -> Self;
    /// Its low 32 bits.
    fn low32(self) -> u32;
}

impl Addr for Ipv4Addr {
    fn nth(n: u32) -> Self {
        Ipv4Addr::from(n)
    }
    fn low32(self) -> u32 {
        u32::from(self)
    }
}

impl Addr for Ipv6Addr {
    fn nth(n: u32) -> Self {
        Ipv6Addr::from(0x2001_0db8_u128 << 96 | u128::from(n))
    }
    fn low32(self) -> u32 {
        u128::from(self) as u32
    }
}

/// The first next hop of most tests (10.1.0.10, 2001:db8::a01:a).
fn a<I: Addr>() -> I {
    I::nth(0x0a01_000a)
}

fn table<I: Addr>() -> FamilyTable<I> {
    FamilyTable::new(NeighbourConfig::default())
}

fn unknown_next_hop_is_probed_once_per_retrans_period_then_learned<I: Addr>() {
    let t = table::<I>();
    assert_eq!(
        t.resolve(1, a::<I>(), 100),
        Resolution::Pending { probe: true }
    );
    assert_eq!(
        t.resolve(1, a::<I>(), 500),
        Resolution::Pending { probe: false },
        "one request per second"
    );
    assert_eq!(
        t.resolve(1, a::<I>(), 1_100),
        Resolution::Pending { probe: true }
    );
    assert!(t.learn(1, a::<I>(), MAC, 1_200, true));
    assert_eq!(
        t.resolve(1, a::<I>(), 1_300),
        Resolution::Known {
            mac: MAC,
            probe: false
        }
    );
    assert_eq!(t.peek(1, a::<I>()), Some(MAC));
    assert_eq!(t.peek(0, a::<I>()), None, "per port");
}

fn unanswered_probes_fail_the_entry_for_the_hold_time_then_retry<I: Addr>() {
    let t = table::<I>();
    for (now, probe) in [(1, true), (1_001, true), (2_001, true)] {
        assert_eq!(t.resolve(0, a::<I>(), now), Resolution::Pending { probe });
    }
    assert_eq!(t.resolve(0, a::<I>(), 3_001), Resolution::Failed);
    assert_eq!(t.resolve(0, a::<I>(), 7_999), Resolution::Failed);
    assert_eq!(
        t.resolve(0, a::<I>(), 8_002),
        Resolution::Pending { probe: true },
        "probing starts over"
    );
}

fn stale_entries_keep_forwarding_and_are_reprobed<I: Addr>() {
    let t = table::<I>();
    t.learn(0, a::<I>(), MAC, 0, false);
    assert_eq!(
        t.resolve(0, a::<I>(), 29_999),
        Resolution::Known {
            mac: MAC,
            probe: false
        }
    );
    assert_eq!(
        t.resolve(0, a::<I>(), 30_000),
        Resolution::Known {
            mac: MAC,
            probe: true
        }
    );
    assert_eq!(
        t.resolve(0, a::<I>(), 30_500),
        Resolution::Known {
            mac: MAC,
            probe: false
        }
    );
    let new_mac = [2, 0xbb, 0, 0, 0, 99];
    t.learn(0, a::<I>(), new_mac, 30_600, true);
    assert_eq!(
        t.resolve(0, a::<I>(), 30_700),
        Resolution::Known {
            mac: new_mac,
            probe: false
        }
    );
}

fn a_stale_mac_that_stops_answering_is_forgotten<I: Addr>() {
    let t = table::<I>();
    t.learn(0, a::<I>(), MAC, 0, false);
    for now in [30_000, 31_000, 32_000] {
        assert_eq!(
            t.resolve(0, a::<I>(), now),
            Resolution::Known {
                mac: MAC,
                probe: true
            }
        );
    }
    assert_eq!(
        t.resolve(0, a::<I>(), 32_500),
        Resolution::Known {
            mac: MAC,
            probe: false
        }
    );
    assert_eq!(
        t.resolve(0, a::<I>(), 33_000),
        Resolution::Failed,
        "three re-probes unanswered"
    );
    assert_eq!(t.peek(0, a::<I>()), None);
    // a::<I>() reply brings it back.
    assert!(t.learn(0, a::<I>(), MAC, 33_100, true));
    assert_eq!(
        t.resolve(0, a::<I>(), 33_200),
        Resolution::Known {
            mac: MAC,
            probe: false
        }
    );
}

fn static_entries_are_never_probed_or_overwritten<I: Addr>() {
    let t = table::<I>();
    t.set_static(0, a::<I>(), MAC);
    assert!(!t.learn(0, a::<I>(), [9; 6], 5, false));
    assert_eq!(
        t.resolve(0, a::<I>(), 10_000_000),
        Resolution::Known {
            mac: MAC,
            probe: false
        }
    );
    assert!(t.entries()[0].is_static);
}

fn strangers_are_not_learned_unless_asked_and_a_full_table_refuses<I: Addr>() {
    let t = FamilyTable::<I>::new(NeighbourConfig {
        capacity: 16,
        ..NeighbourConfig::default()
    });
    assert!(!t.learn(0, a::<I>(), MAC, 0, true), "unsolicited");
    for i in 0..16u32 {
        t.resolve(0, I::nth(0x0a00_0000 + i), 0);
    }
    assert_eq!(t.resolve(0, I::nth(0x0a09_0909), 0), Resolution::TableFull);
    assert_eq!(t.refused(), 1);
    assert_eq!(t.entries().len(), 16);
}

fn concurrent_learners_and_readers_agree<I: Addr>() {
    let t = Arc::new(table());
    let writers: Vec<_> = (0..2u8)
        .map(|w| {
            let t = Arc::clone(&t);
            std::thread::spawn(move || {
                for i in 0..2_000u32 {
                    let ip = I::nth(0x0a01_0000 + i);
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
                t.peek(w, I::nth(0x0a01_0000 + i)),
                Some([2, w, b[0], b[1], b[2], b[3]])
            );
        }
    }
}

fn gc_table<I: Addr>(capacity: u32, gc_stale_ms: u64, gc_min_entries: u32) -> FamilyTable<I> {
    FamilyTable::new(NeighbourConfig {
        capacity,
        gc_stale_ms,
        gc_min_entries,
        ..NeighbourConfig::default()
    })
}

fn mac_for<I: Addr>(port: PortId, ip: I) -> [u8; 6] {
    let b = ip.low32().to_be_bytes();
    [2, port, b[0], b[1], b[2], b[3]]
}

/// Resolve a new next hop and answer its request, like a worker and the
/// neighbour would.
fn use_and_learn<I: Addr>(t: &FamilyTable<I>, port: PortId, ip: I, now_ms: u64) -> Resolution {
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
fn churn_of_ten_times_the_capacity_never_refuses_once_old_entries_are_idle<I: Addr>() {
    let collected = gc_table::<I>(64, 10_000, 0);
    let uncollected = gc_table::<I>(64, 10_000, 0);
    let hops = 640u32;
    let mut now_ms = 1_000;
    for i in 0..hops {
        let ip = I::nth(0x0a40_0000 + i);
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

fn a_used_entry_is_never_reclaimed_and_an_idle_one_not_before_gc_stale_ms<I: Addr>() {
    let t = gc_table::<I>(16, 10_000, 0);
    let (idle, busy) = (I::nth(0x0a02_0001), I::nth(0x0a02_0002));
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

fn static_entries_survive_compactions_and_demoted_ones_are_reclaimed_later<I: Addr>() {
    let t = gc_table::<I>(16, 10_000, 0);
    let (kept, demoted, idle) = (
        I::nth(0x0a03_0001),
        I::nth(0x0a03_0002),
        I::nth(0x0a03_0003),
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
    // a::<I>() reload removes one static neighbour: an ordinary entry from now
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

fn entries_never_used_are_stamped_by_the_collector_and_small_tables_are_left_alone<I: Addr>() {
    let t = gc_table::<I>(64, 10_000, 4);
    // Learned without a use (not from a resolve): stamped at the first
    // collection, reclaimed gc_stale_ms after that.
    for i in 0..3u32 {
        t.learn(0, I::nth(0x0a05_0000 + i), MAC, 0, false);
    }
    assert!(!t.collect_garbage(50_000).compacted);
    assert!(t.entries().iter().all(|e| e.used_ms == 50_000 | 1023));
    assert!(
        !t.collect_garbage(100_000).compacted,
        "3 entries, below gc_min_entries"
    );
    t.learn(0, I::nth(0x0a05_0100), MAC, 0, false);
    let gc = t.collect_garbage(100_000);
    assert_eq!(
        (gc.entries, gc.reclaimed, gc.compacted),
        (4, 3, true),
        "the 4th entry was stamped just now"
    );
    assert_eq!(t.stats().compactions, 1);
}

/// a::<I>() worker still holding the old generation during a compaction: what
/// it learns there is lost, and costs exactly one immediate re-request.
fn a_change_to_a_replaced_generation_costs_one_re_arp<I: Addr>() {
    let t = gc_table::<I>(16, 10_000, 0);
    let old_hop = I::nth(0x0a06_0001);
    use_and_learn(&t, 0, old_hop, 0);
    let batch = t.load();
    let generation = t.generation();
    assert!(t.collect_garbage(20_000).compacted);
    assert_eq!(t.generation(), generation + 1);
    // The batch goes on with its generation: a::<I>() is resolved and learned
    // there, in the replaced generation.
    assert_eq!(
        batch.resolve(0, a::<I>(), 20_000),
        Resolution::Pending { probe: true }
    );
    assert!(batch.learn(0, a::<I>(), MAC, 20_001, true));
    assert_eq!(batch.peek(0, a::<I>()), Some(MAC));
    drop(batch);
    // The collector still holds the replaced generation (freed by the
    // next collection, not by the worker's drop).
    let replaced = t.retired.lock().unwrap()[0].clone();
    assert_eq!(Arc::strong_count(&replaced), 2);
    drop(replaced);
    assert!(!t.collect_garbage(20_001).compacted);
    assert!(t.retired.lock().unwrap().is_empty());
    assert_eq!(t.peek(0, a::<I>()), None, "lost with the old generation");
    assert_eq!(
        t.resolve(0, a::<I>(), 20_002),
        Resolution::Pending { probe: true },
        "requested again at once"
    );
    assert!(t.learn(0, a::<I>(), MAC, 20_003, true));
    assert_eq!(
        t.resolve(0, a::<I>(), 20_004),
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
fn concurrent_learners_and_readers_agree_during_compactions<I: Addr>() {
    use std::sync::atomic::AtomicBool;
    const WINDOW: u32 = 64;
    let t = Arc::new(gc_table::<I>(1_024, 2 * USE_TICK_MS, 0));
    let clock = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(AtomicU64::new(0));
    let statics: Vec<I> = (0..8u32).map(|i| I::nth(0x0a07_0000 + i)).collect();
    for &ip in &statics {
        t.set_static(3, ip, mac_for(3, ip));
    }
    // Idle from the start: reclaimed whatever the threads' timing.
    for i in 0..128u32 {
        let ip = I::nth(0x0a08_0000 + i);
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
                    // a::<I>() window of addresses that moves with the clock:
                    // the ones left behind go idle.
                    let window = (now_ms / USE_TICK_MS) as u32 * 37;
                    let ip = I::nth(0x0a09_0000 + (window + i % WINDOW) % 4_096);
                    let batch = t.load();
                    match batch.resolve(w, ip, now_ms) {
                        Resolution::Known { mac, .. } => {
                            assert_eq!(mac, mac_for(w, ip), "{ip:?} on {w}");
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
        assert_eq!(t.peek(2, I::nth(0x0a08_0000 + i)), None);
    }
    for e in t.entries() {
        if let Some(mac) = e.mac {
            assert_eq!(mac, mac_for(e.port, e.addr), "{e:?}");
        }
    }
    assert_eq!(t.stats().statics, 8);
}

/// Two threads insert the same new next hops at once (the race the IPv6
/// key's claim-then-publish protocol must settle): one entry per address,
/// never two.
fn concurrent_inserts_of_one_address_make_one_entry<I: Addr>() {
    let t = Arc::new(table::<I>());
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let t = Arc::clone(&t);
            std::thread::spawn(move || {
                for i in 0..3_000u32 {
                    t.load().resolve(1, I::nth(0x0a0a_0000 + i), 1);
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    let mut seen: Vec<I> = t.entries().iter().map(|e| e.addr).collect();
    assert_eq!(seen.len(), 3_000);
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), 3_000, "an address stored twice");
}

/// Instantiate every test above for one family.
macro_rules! family_tests {
    ($family:ident, $addr:ty, [$($test:ident),* $(,)?]) => {
        mod $family {
            use super::*;
            $(
                #[test]
                fn $test() {
                    super::$test::<$addr>();
                }
            )*
        }
    };
}

macro_rules! both_families {
    ($($test:ident),* $(,)?) => {
        family_tests!(v4, Ipv4Addr, [$($test),*]);
        family_tests!(v6, Ipv6Addr, [$($test),*]);
    };
}

both_families!(
    unknown_next_hop_is_probed_once_per_retrans_period_then_learned,
    unanswered_probes_fail_the_entry_for_the_hold_time_then_retry,
    stale_entries_keep_forwarding_and_are_reprobed,
    a_stale_mac_that_stops_answering_is_forgotten,
    static_entries_are_never_probed_or_overwritten,
    strangers_are_not_learned_unless_asked_and_a_full_table_refuses,
    concurrent_learners_and_readers_agree,
    churn_of_ten_times_the_capacity_never_refuses_once_old_entries_are_idle,
    a_used_entry_is_never_reclaimed_and_an_idle_one_not_before_gc_stale_ms,
    static_entries_survive_compactions_and_demoted_ones_are_reclaimed_later,
    entries_never_used_are_stamped_by_the_collector_and_small_tables_are_left_alone,
    a_change_to_a_replaced_generation_costs_one_re_arp,
    concurrent_learners_and_readers_agree_during_compactions,
    concurrent_inserts_of_one_address_make_one_entry,
);

/// The two-family table: each address goes to its family's table, the
/// same low bits in both families are two entries, and collection,
/// statistics and generations cover both.
#[test]
fn the_two_families_are_separate_tables_collected_together() {
    let t = NeighbourTable::new(NeighbourConfig {
        capacity: 16,
        gc_stale_ms: 10_000,
        gc_min_entries: 0,
        ..NeighbourConfig::default()
    });
    let (v4, v6) = (Ipv4Addr::nth(0x0a00_0001), Ipv6Addr::nth(0x0a00_0001));
    assert_eq!(t.resolve(0, v4, 1), Resolution::Pending { probe: true });
    assert_eq!(
        t.resolve(0, v6, 1),
        Resolution::Pending { probe: true },
        "not the IPv4 entry"
    );
    assert!(t.learn(0, v6, MAC, 2, true));
    assert_eq!(t.peek(0, v6), Some(MAC));
    assert_eq!(t.peek(0, v4), None);
    assert!(t.set_static(1, Ipv6Addr::nth(7), MAC));
    assert_eq!(t.entries::<Ipv4Addr>().len(), 1);
    assert_eq!(t.entries::<Ipv6Addr>().len(), 2);
    let stats = t.stats();
    assert_eq!((stats.capacity, stats.entries, stats.statics), (32, 3, 1));
    let generation = t.generation();
    let gc = t.collect_garbage(100_000);
    assert_eq!((gc.entries, gc.reclaimed, gc.compacted), (3, 2, true));
    assert_eq!(t.generation(), generation + 2, "both tables compacted");
    assert_eq!(t.peek(0, v6), None);
    assert_eq!(t.peek(1, Ipv6Addr::nth(7)), Some(MAC), "static kept");
    t.retain_static::<Ipv6Addr>(|_, _| false);
    assert_eq!(t.stats().statics, 0);
}
