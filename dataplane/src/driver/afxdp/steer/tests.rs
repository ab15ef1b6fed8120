//! The steering program in the kernel: loaded once (the verifier accepts
//! it, both the normal and the `xdp.frags` variant), then rule after rule
//! installed into its maps and the program run with `BPF_PROG_TEST_RUN`
//! over frames of both families from random tuples, on every queue of a
//! 4-queue veth, against [`SteeringRule::owner`]/[`SteeringRule::owner6`]:
//! the slot it picks is `queue * workers + owner` each time. The program's
//! choice is observed through [`Sink::ReturnSlot`], which returns the
//! first-choice slot instead of redirecting; the redirect itself (and its
//! fallback to the queue's own socket) is exercised on live sockets in
//! `afxdp/tests.rs`.

use super::*;
use crate::driver::afpacket::steering::tests::{
    ETH_LEN, addresses, both_families, frame, frame6, key_pool, key_pool6, largest_rule,
};
use crate::driver::afxdp::sys;
use crate::flow::{FlowKey, Proto};
use crate::steering::tests::{KeyPool, KeyPool6, Rng, shapes};
use portico_netns::{Netns, Veth, in_netns, require_root};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsFd, OwnedFd};
use std::time::Instant;

const QUEUES: u32 = 4;
/// Bytes of a multi-buffer test frame: past one page, so
/// `BPF_PROG_TEST_RUN` puts the rest into frags.
const JUMBO_BYTES: usize = 9000;

/// A namespace with a veth pair of [`QUEUES`] queues; runs `f` in it with
/// the ifindex of one end. `None` (after a skip banner) without root.
fn with_queues(f: impl FnOnce(u32) + Send) -> Option<()> {
    if !require_root("XDP steering program test") {
        return None;
    }
    let a = Netns::new("xsa").expect("namespace a");
    let b = Netns::new("xsb").expect("namespace b");
    Veth::new(&a, "sa0", &b, "sb0")
        .queues(QUEUES)
        .create()
        .expect("veth with queues");
    in_netns(&b, || {
        let ifindex = crate::driver::sys::if_index("sb0").expect("ifindex");
        f(ifindex);
    });
    Some(())
}

/// A loaded program and its slots per queue.
struct Prog {
    fd: OwnedFd,
    workers: u32,
}

/// The program over `maps` with `workers` slots per queue, returning its
/// slot; `frags`: the `xdp.frags` variant.
fn load(maps: &SteerMaps, workers: u32, frags: bool) -> Prog {
    let insns = steering_program(maps, workers, Sink::ReturnSlot).expect("assembles");
    match bpf::load_insns(&insns, bpf::PROGRAM_NAME, frags) {
        Ok(fd) => Prog { fd, workers },
        Err(e) => panic!("verifier refused: {}\n{}", e.source, e.verifier_log),
    }
}

/// A frame plus, for the `xdp.frags` variant, padding up to
/// [`JUMBO_BYTES`] (the headers stay in the first buffer).
fn sized(mut f: Vec<u8>, frags: bool) -> Vec<u8> {
    if frags {
        f.resize(JUMBO_BYTES, 0xa5);
    }
    f
}

/// Run the program (a rule installed) over 2,000 frames from `next` (a
/// frame, its owner, a description), each on a random queue: slot
/// `q * W + owner` (`W` the program's slots per queue). Returns how many owners were seen.
fn check(
    ifindex: u32,
    prog: &Prog,
    rng: &mut Rng,
    mut next: impl FnMut(&mut Rng) -> (Vec<u8>, u8, String),
) -> usize {
    let workers = prog.workers;
    let mut seen = std::collections::HashSet::new();
    for _ in 0..2_000 {
        let (f, owner, what) = next(rng);
        let q = (rng.next() % u64::from(QUEUES)) as u32;
        let slot = bpf::test_run(prog.fd.as_fd(), &f, ifindex, q).expect("test run");
        assert_eq!(
            slot,
            q * workers + u32::from(owner),
            "queue {q}, {} bytes: {what}",
            f.len()
        );
        seen.insert(owner);
    }
    seen.len()
}

/// Both families of `pool`/`pool6` over `rule` (installed) with one
/// program.
fn check_both(
    ifindex: u32,
    program: &Prog,
    rule: &SteeringRule,
    (pool, pool6): (&KeyPool, &KeyPool6),
    rng: &mut Rng,
    frags: bool,
) -> (usize, usize) {
    let mut n = 0;
    let seen = check(ifindex, program, rng, |rng| {
        let k = pool.key(rng);
        let options = (n % 3) * 2;
        n += 1;
        let what = format!("{k}, {options} option words, {rule:?}");
        (sized(frame(&k, options, 0), frags), rule.owner(&k), what)
    });
    let seen6 = check(ifindex, program, rng, |rng| {
        let k = pool6.key(rng);
        let what = format!("{k:?}, {rule:?}");
        let f = sized(frame6(&k, k.proto.ip_number()), frags);
        (f, rule.owner6(&k), what)
    });
    (seen, seen6)
}

#[test]
fn one_program_picks_each_installed_rules_owner_for_both_families_on_every_queue() {
    with_queues(|ifindex| {
        // Over the owned addresses and the backends: the address-steered
        // listeners and endpoints of `both_families` (two endpoints on one
        // address: the shared-endpoint case) are drawn too.
        let pools = (&key_pool(), &key_pool6());
        let mut rng = Rng(0x5eed_00d9);
        for frags in [false, true] {
            let maps = SteerMaps::create().expect("maps");
            // The XSK map's workers: the most of `shapes`.
            let prog = load(&maps, 7, frags);
            for (workers, ports) in shapes() {
                let rule = both_families(workers, ports.clone());
                maps.install(&rule).expect("install");
                let w = check_both(ifindex, &prog, &rule, pools, &mut rng, frags);
                assert_eq!(
                    w,
                    (workers.into(), workers.into()),
                    "every worker owns some"
                );
            }
        }
    })
    .unwrap_or(());
}

/// Rule with more owned addresses, SNAT addresses and listeners than a
/// rule holds: [`SteeringRule::truncated`], its lists cut.
fn truncated_rule(workers: u8) -> SteeringRule {
    let (mut owned, snat, mut listeners) = addresses();
    // Every other address: no two merge into one range.
    owned.extend((0..1200u32).map(|i| Ipv4Addr::from(0x0a05_0000 + 2 * i)));
    listeners.extend((0..200u16).map(|i| (Proto::Tcp, Ipv4Addr::new(192, 0, 2, 1), 2000 + i)));
    SteeringRule::new(workers, 1024..=65535, owned, snat, listeners)
}

#[test]
fn rules_replace_each_other_without_leftovers_and_truncated_rules_hold() {
    with_queues(|ifindex| {
        let maps = SteerMaps::create().expect("maps");
        let prog = load(&maps, 4, false);
        let (pool, pool6) = (key_pool(), key_pool6());
        let mut wide = truncated_rule(4);
        assert!(wide.truncated, "the rule is cut");
        wide = crate::driver::afpacket::steering::tests::with_affinity_lists(wide);
        let mut wide_pool = key_pool();
        wide_pool
            .owned
            .extend(wide.owned.iter().step_by(37).map(|r| Ipv4Addr::from(r.0)));
        // Another rule: no IPv6, other SNAT addresses, ports and workers.
        let (owned, _, _) = addresses();
        let other = SteeringRule::new(
            3,
            40000..=50000,
            owned.clone(),
            owned[2..4].to_vec(),
            vec![],
        );
        let rules = [
            both_families(4, 1024..=65535),
            wide,
            other,
            both_families(2, 30000..=40000),
            truncated_rule(4),
        ];
        let mut rng = Rng(0x0123_4567);
        let mut entries = Vec::new();
        for (i, rule) in rules.iter().enumerate() {
            let p = if i == 1 { &wide_pool } else { &pool };
            maps.install(rule).expect("install");
            check_both(ifindex, &prog, rule, (p, &pool6), &mut rng, false);
            // The install just done reused the generation of the rule
            // before last: it deleted exactly that rule's entries.
            let stats = maps.install(rule).expect("reinstall");
            entries.push(stats.set_entries + stats.owned_prefixes);
            let before = if i >= 1 { entries[i - 1] } else { 0 };
            assert_eq!(stats.deleted, before, "rule {i}: {stats:?}");
            // The same frames again after the second install (the other
            // generation now): still the rule's owners.
            check_both(ifindex, &prog, rule, (p, &pool6), &mut rng, false);
        }
    })
    .unwrap_or(());
}

#[test]
fn a_failed_install_leaves_the_active_rule_and_the_next_one_cleans_up() {
    with_queues(|ifindex| {
        let maps = SteerMaps::create().expect("maps");
        let prog = load(&maps, 4, false);
        let pools = (&key_pool(), &key_pool6());
        let mut rng = Rng(0xfa11);
        let active = both_families(4, 1024..=65535);
        maps.install(&active).expect("install");
        // More SNAT addresses than the `sets` map holds (a rule past the
        // maxima, which `SteeringRule` never builds): the install fails
        // part way into the inactive generation.
        let mut too_big = both_families(3, 20000..=20010);
        too_big
            .snat_addrs
            .extend((0..1000u32).map(|i| Ipv4Addr::from(0x0e00_0000 + i)));
        let err = maps.install(&too_big).expect_err("the sets map is full");
        assert!(err.to_string().contains("portico_sets"), "{err}");
        // Frames still decided by the active rule, not a mix.
        check_both(ifindex, &prog, &active, pools, &mut rng, false);
        // The next install reuses that generation: it deletes what the
        // failed one wrote, then steers by the new rule.
        let next = both_families(2, 30000..=40000);
        let stats = maps.install(&next).expect("install after a failure");
        assert!(stats.deleted > 700, "the partial rule's entries: {stats:?}");
        check_both(ifindex, &prog, &next, pools, &mut rng, false);
    })
    .unwrap_or(());
}

#[test]
fn frames_without_an_owner_go_to_worker_zero_of_their_queue() {
    with_queues(|ifindex| {
        let (owned, snat, listeners) = addresses();
        let rule = SteeringRule::new(4, 1024..=65535, owned, snat, listeners);
        let maps = SteerMaps::create().expect("maps");
        maps.install(&rule).expect("install");
        let k = FlowKey::new(
            Proto::Udp,
            Ipv4Addr::new(198, 51, 100, 9),
            5353,
            Ipv4Addr::new(203, 0, 113, 10),
            53,
        );
        let owner = u32::from(rule.owner(&k));
        assert_ne!(owner, 0, "a client another worker owns");
        for frags in [false, true] {
            let prog = load(&maps, 4, frags);
            let whole = frame(&k, 0, 0);
            let mut icmp = whole.clone();
            icmp[ETH_LEN + 9] = 1;
            let mut arp = whole.clone();
            arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
            let k6 = crate::flow::FlowKey6::new(
                Proto::Tcp,
                "2001:db8:9::9".parse().expect("v6"),
                40000,
                "2001:db8::1".parse().expect("v6"),
                80,
            );
            // A hop-by-hop options header first: not walked.
            let hop_by_hop = frame6(&k6, 0);
            for q in 0..QUEUES {
                let run = |f: &[u8]| {
                    let f = sized(f.to_vec(), frags);
                    bpf::test_run(prog.fd.as_fd(), &f, ifindex, q).expect("run")
                };
                assert_eq!(run(&whole), q * 4 + owner);
                // A later fragment, ICMP, ARP, IPv6 with an extension
                // header: worker 0 (as af_packet's program).
                assert_eq!(run(&frame(&k, 0, 185)), q * 4, "later fragment");
                assert_eq!(run(&icmp), q * 4, "ICMP");
                assert_eq!(run(&arp), q * 4, "ARP");
                assert_eq!(run(&hop_by_hop), q * 4, "IPv6 hop-by-hop");
            }
            // Frames cut inside the IP header or the ports (single buffer).
            if !frags {
                let run = |f: &[u8]| bpf::test_run(prog.fd.as_fd(), f, ifindex, 1).expect("run");
                assert_eq!(run(&whole[..ETH_LEN + 12]), 4, "cut in the IP header");
                assert_eq!(run(&whole[..ETH_LEN + 22]), 4, "cut in the ports");
                assert_eq!(run(&whole[..ETH_LEN + 24]), 4 + owner, "ports complete");
            }
        }
    })
    .unwrap_or(());
}

#[test]
fn without_a_rule_each_queue_goes_to_its_own_worker() {
    with_queues(|ifindex| {
        for workers in [1, 2, 4] {
            let maps = SteerMaps::create().expect("maps");
            let prog = load(&maps, workers, true);
            // The fallback of a kernel refusing the steering program
            // decides the same without maps.
            let insns = queue_own_program(workers, Sink::ReturnSlot).expect("assembles");
            let fallback = bpf::load_insns(&insns, bpf::PROGRAM_NAME, true).expect("loads");
            let mut rng = Rng(u64::from(workers));
            for q in 0..QUEUES {
                let pool = KeyPool {
                    owned: vec![Ipv4Addr::new(10, 0, 0, 1)],
                    listen: vec![80, 443],
                };
                let k = pool.key(&mut rng);
                for f in [vec![0u8; 64], frame(&k, 0, 0)] {
                    let slot = bpf::test_run(prog.fd.as_fd(), &f, ifindex, q).expect("run");
                    assert_eq!(slot, q * workers + q % workers, "{workers} workers");
                    let slot = bpf::test_run(fallback.as_fd(), &f, ifindex, q).expect("run");
                    assert_eq!(
                        slot,
                        q * workers + q % workers,
                        "fallback, {workers} workers"
                    );
                }
            }
        }
    })
    .unwrap_or(());
}

/// Keys over every list of `rule` (the largest rule's addresses are far
/// from the usual pools).
fn pools_of(rule: &SteeringRule) -> (KeyPool, KeyPool6) {
    let mut owned: Vec<Ipv4Addr> = rule.snat_addrs.clone();
    owned.extend(
        rule.owned
            .iter()
            .flat_map(|&(lo, hi)| [lo, hi, hi + 1])
            .map(Ipv4Addr::from),
    );
    let mut listen = Vec::new();
    for l in [
        &rule.snat_listeners,
        &rule.affinity_listeners,
        &rule.affinity_endpoints,
    ] {
        owned.extend(l.iter().map(|t| t.1));
        listen.extend(l.iter().map(|t| t.2));
    }
    let mut owned6: Vec<Ipv6Addr> = rule.snat_addrs6.clone();
    owned6.extend(
        rule.owned6
            .iter()
            .flat_map(|&(lo, hi)| [lo, hi, hi + 1])
            .map(Ipv6Addr::from_bits),
    );
    let mut listen6 = Vec::new();
    for l in [
        &rule.snat_listeners6,
        &rule.affinity_listeners6,
        &rule.affinity_endpoints6,
    ] {
        owned6.extend(l.iter().map(|t| t.1));
        listen6.extend(l.iter().map(|t| t.2));
    }
    (
        KeyPool { owned, listen },
        KeyPool6 {
            owned: owned6,
            listen: listen6,
        },
    )
}

#[test]
fn the_largest_rule_installs_without_a_program_load_and_steers() {
    let rule = largest_rule();
    let maps_for_size = with_queues(|ifindex| {
        let maps = SteerMaps::create().expect("maps");
        let prog = load(&maps, 64, true);
        let (pool, pool6) = pools_of(&rule);
        let mut rng = Rng(0xb16_0001);
        let started = Instant::now();
        let stats = maps.install(&rule).expect("install at the maxima");
        eprintln!(
            "largest rule installed in {:?}: {stats:?}",
            started.elapsed()
        );
        assert_eq!(
            stats.set_entries, 424,
            "every list at its maximum: {stats:?}"
        );
        for frags in [false, true] {
            let (w, w6) = check_both(ifindex, &prog, &rule, (&pool, &pool6), &mut rng, frags);
            assert!(w > 32 && w6 > 32, "owners seen: {w}, {w6}");
        }
    });
    // The program does not grow with the rule: the same instructions for
    // any rule, far below any verifier limit.
    if maps_for_size.is_some() {
        let maps = SteerMaps::create().expect("maps");
        let insns = steering_program(&maps, 64, Sink::Redirect { map_fd: 0 }).expect("program");
        eprintln!("steering program: {} instructions", insns.len());
        assert!(insns.len() < 400, "{} instructions", insns.len());
    }
}

#[test]
fn a_rule_installs_through_the_map_fds_without_capabilities() {
    with_queues(|ifindex| {
        let maps = SteerMaps::create().expect("maps");
        let prog = load(&maps, 4, true);
        let rule = both_families(4, 1024..=65535);
        maps.install(&both_families(2, 1..=5))
            .expect("install before");
        // CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_BPF, CAP_PERFMON: what creating
        // maps and loading programs need; the drop is per thread.
        let caps: u64 = 1 << 21 | 1 << 12 | 1 << 39 | 1 << 38;
        std::thread::scope(|s| {
            s.spawn(|| {
                sys::drop_effective_capabilities(caps).expect("capset");
                assert!(
                    SteerMaps::create().is_err(),
                    "creating maps needs the dropped capabilities"
                );
                maps.install(&rule).expect("install without capabilities");
                maps.install(&rule)
                    .expect("and again (deleting the rule before)");
            })
            .join()
            .expect("thread");
        });
        let mut rng = Rng(7);
        let (pool, pool6) = (key_pool(), key_pool6());
        let w = check_both(ifindex, &prog, &rule, (&pool, &pool6), &mut rng, true);
        assert_eq!(w, (4, 4));
    })
    .unwrap_or(());
}

#[test]
fn ranges_become_the_fewest_prefixes_covering_exactly_them() {
    use super::maps::prefixes;
    assert_eq!(prefixes(0, u32::MAX), vec![(0, 0)]);
    assert_eq!(prefixes(5, 5), vec![(5, 32)]);
    assert_eq!(prefixes(4, 7), vec![(4, 30)]);
    assert_eq!(prefixes(3, 8), vec![(3, 32), (4, 30), (8, 32)]);
    assert_eq!(prefixes(9, 8), vec![]);
    assert_eq!(prefixes(1, u32::MAX - 1).len(), 62, "the worst shape");
    let mut rng = Rng(99);
    for _ in 0..500 {
        let (a, b) = (rng.next() as u32, rng.next() as u32 >> (rng.next() % 32));
        let (lo, hi) = (a.min(b), a.max(b));
        let p = prefixes(lo, hi);
        assert!(p.len() <= 62);
        // Contiguous, aligned and exactly the range.
        let mut next = u64::from(lo);
        for &(base, bits) in &p {
            assert_eq!(u64::from(base), next, "{lo}..={hi}: {p:?}");
            let size = 1u64 << (32 - bits);
            assert_eq!(u64::from(base) % size, 0, "aligned");
            next += size;
        }
        assert_eq!(next, u64::from(hi) + 1, "{lo}..={hi}: {p:?}");
    }
}
