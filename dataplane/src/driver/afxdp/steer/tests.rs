//! The XDP steering program in the kernel: loaded (the verifier accepts
//! it, also for the largest rule) and run with `BPF_PROG_TEST_RUN` over
//! frames of both families from random tuples, on every queue of a
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
use crate::flow::{FlowKey, Proto};
use crate::steering::tests::{Rng, shapes};
use portico_netns::{Netns, Veth, in_netns, require_root};
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, OwnedFd};

const QUEUES: u32 = 4;

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

fn load(rule: Option<&SteeringRule>, workers: u32) -> OwnedFd {
    let insns = steering_program(rule, workers, Sink::ReturnSlot).expect("translates");
    match bpf::load_insns(&insns) {
        Ok(fd) => fd,
        Err(e) => panic!("verifier refused: {}\n{}", e.source, e.verifier_log),
    }
}

/// Run `rule`'s program over 3,000 frames from `next` (a frame, its
/// owner, a description), each on a random queue: slot `q * W + owner`.
fn check(
    ifindex: u32,
    rule: &SteeringRule,
    rng: &mut Rng,
    mut next: impl FnMut(&mut Rng) -> (Vec<u8>, u8, String),
) {
    let prog = load(Some(rule), u32::from(rule.workers));
    let workers = u32::from(rule.workers);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..3_000 {
        let (f, owner, what) = next(rng);
        let q = (rng.next() % u64::from(QUEUES)) as u32;
        let slot = bpf::test_run(prog.as_fd(), &f, ifindex, q).expect("test run");
        assert_eq!(slot, q * workers + u32::from(owner), "queue {q}: {what}");
        seen.insert(owner);
    }
    assert_eq!(
        seen.len(),
        usize::from(rule.workers),
        "every worker owns some"
    );
}

#[test]
fn the_xdp_program_picks_the_rules_owner_for_both_families_on_every_queue() {
    with_queues(|ifindex| {
        // Over the owned addresses and the backends: the address-steered
        // listeners and endpoints of `both_families` are drawn too.
        let (keys, keys6) = (key_pool(), key_pool6());
        let mut rng = Rng(0x5eed_00d9);
        for (workers, ports) in shapes() {
            let rule = both_families(workers, ports.clone());
            let mut n = 0;
            check(ifindex, &rule, &mut rng, |rng| {
                let k = keys.key(rng);
                let options = (n % 3) * 2;
                n += 1;
                let what = format!("{k}, {options} option words, {workers} workers, {ports:?}");
                (frame(&k, options, 0), rule.owner(&k), what)
            });
            check(ifindex, &rule, &mut rng, |rng| {
                let k = keys6.key(rng);
                let what = format!("{k:?}, {workers} workers, {ports:?}");
                (frame6(&k, k.proto.ip_number()), rule.owner6(&k), what)
            });
        }
    })
    .unwrap_or(());
}

#[test]
fn frames_without_an_owner_go_to_worker_zero_of_their_queue() {
    with_queues(|ifindex| {
        let (owned, snat, listeners) = addresses();
        let rule = SteeringRule::new(4, 1024..=65535, owned, snat, listeners);
        let prog = load(Some(&rule), 4);
        let k = FlowKey::new(
            Proto::Udp,
            Ipv4Addr::new(198, 51, 100, 9),
            5353,
            Ipv4Addr::new(203, 0, 113, 10),
            53,
        );
        let whole = frame(&k, 0, 0);
        let owner = u32::from(rule.owner(&k));
        assert_ne!(owner, 0, "a client another worker owns");
        let mut icmp = whole.clone();
        icmp[ETH_LEN + 9] = 1;
        let mut arp = whole.clone();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        for q in 0..QUEUES {
            let run = |f: &[u8]| bpf::test_run(prog.as_fd(), f, ifindex, q).expect("run");
            assert_eq!(run(&whole), q * 4 + owner);
            // A later fragment, ICMP, ARP, a frame cut inside its IP
            // header or its ports: worker 0 (as af_packet's program).
            assert_eq!(run(&frame(&k, 0, 185)), q * 4, "later fragment");
            assert_eq!(run(&icmp), q * 4, "ICMP");
            assert_eq!(run(&arp), q * 4, "ARP");
            assert_eq!(run(&whole[..ETH_LEN + 12]), q * 4, "cut in the IP header");
            assert_eq!(run(&whole[..ETH_LEN + 22]), q * 4, "cut in the ports");
        }
    })
    .unwrap_or(());
}

#[test]
fn without_a_rule_each_queue_goes_to_its_own_worker() {
    with_queues(|ifindex| {
        for workers in [1, 2, 4] {
            let prog = load(None, workers);
            for q in 0..QUEUES {
                let f = vec![0u8; 64];
                let slot = bpf::test_run(prog.as_fd(), &f, ifindex, q).expect("run");
                assert_eq!(slot, q * workers + q % workers, "{workers} workers");
            }
        }
    })
    .unwrap_or(());
}

#[test]
fn the_largest_rule_passes_the_verifier_and_stays_small() {
    let rule = largest_rule();
    let classic = fanout_program(&rule);
    let insns =
        steering_program(Some(&rule), 64, Sink::Redirect { map_fd: 0 }).expect("translates");
    assert!(
        insns.len() <= 32 + MAX_INSNS_PER_CBPF * classic.len(),
        "{} eBPF for {} classic",
        insns.len(),
        classic.len()
    );
    let typical = both_families(2, 1024..=65535);
    let typical_insns =
        steering_program(Some(&typical), 2, Sink::Redirect { map_fd: 0 }).expect("translates");
    eprintln!(
        "instructions: largest rule {} classic -> {} eBPF; test rule {} classic -> {} eBPF",
        classic.len(),
        insns.len(),
        fanout_program(&typical).len(),
        typical_insns.len()
    );
    with_queues(|_| {
        load(Some(&rule), 64);
    })
    .unwrap_or(());
}
