//! The fanout program against the rule it compiles (which
//! `stage/steer/tests.rs` checks against the workers' owner function): an
//! interpreter of the classic-BPF subset the program uses (the kernel's
//! semantics: 32-bit unsigned arithmetic, a load past the packet ends the
//! program with 0) runs it over frames built from random tuples. That the
//! kernel accepts and runs it the same way is checked end to end by
//! `tests/tests/steering.rs`.

use super::*;
use crate::flow::{FlowKey, FlowKey6};
use crate::steering::tests::{KeyPool, KeyPool6, Rng, shapes};
use crate::steering::{
    MAX_AFFINITY_ENDPOINTS, MAX_AFFINITY_ENDPOINTS6, MAX_AFFINITY_LISTENERS,
    MAX_AFFINITY_LISTENERS6, MAX_OWNED_RANGES, MAX_OWNED_RANGES6, MAX_SNAT_ADDRS, MAX_SNAT_ADDRS6,
    MAX_SNAT_LISTENERS, MAX_SNAT_LISTENERS6,
};
use std::net::{Ipv4Addr, Ipv6Addr};

/// Owned addresses, SNAT addresses, listeners on shared addresses.
pub(crate) type Addresses = (Vec<Ipv4Addr>, Vec<Ipv4Addr>, Vec<(Proto, Ipv4Addr, u16)>);

/// A gateway's addresses: a node address that is also an SNAT address with
/// NodePort listeners, a separate SNAT address, a run of VIPs and a lone one.
pub(crate) fn addresses() -> Addresses {
    let node = Ipv4Addr::new(192, 0, 2, 1);
    let snat = vec![node, Ipv4Addr::new(10, 1, 0, 1)];
    let mut owned = snat.clone();
    owned.extend((10..=14).map(|d| Ipv4Addr::new(203, 0, 113, d)));
    owned.push(Ipv4Addr::new(198, 18, 0, 77));
    let listeners = (0..6)
        .flat_map(|i| [(Proto::Tcp, node, 30080 + i), (Proto::Udp, node, 31000 + i)])
        .collect();
    (owned, snat, listeners)
}

pub(crate) const ETH_LEN: usize = 14;

/// An Ethernet + IPv4 (+ `options` words of IP options) + L4 header frame.
pub(crate) fn frame(k: &FlowKey, options: usize, frag: u16) -> Vec<u8> {
    let mut f = vec![0u8; ETH_LEN];
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ihl = 5 + options;
    let mut ip = vec![0u8; ihl * 4];
    ip[0] = 0x40 | ihl as u8;
    ip[6..8].copy_from_slice(&frag.to_be_bytes());
    ip[8] = 64;
    ip[9] = k.proto.ip_number();
    ip[12..16].copy_from_slice(&k.src_ip.octets());
    ip[16..20].copy_from_slice(&k.dst_ip.octets());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&k.src_port.to_be_bytes());
    f.extend_from_slice(&k.dst_port.to_be_bytes());
    f.extend_from_slice(&[0u8; 16]);
    f
}

/// IPv6 owned, SNAT addresses and listeners on them: a node and SNAT
/// address with NodePorts, a separate SNAT address, a run of VIPs across a
/// /96 boundary and a lone VIP in another /96.
pub(crate) type Addresses6 = (Vec<Ipv6Addr>, Vec<Ipv6Addr>, Vec<(Proto, Ipv6Addr, u16)>);

pub(crate) fn addresses6() -> Addresses6 {
    let node: Ipv6Addr = "2001:db8::1".parse().unwrap();
    let snat = vec![node, "fd00:1::1".parse().unwrap()];
    let mut owned = snat.clone();
    let edge: u128 = 0x2001_0db8_0000_0000_0000_0001_ffff_fffd;
    owned.extend((0..5).map(|d| Ipv6Addr::from_bits(edge + d)));
    owned.push("2001:db8:c::10".parse().unwrap());
    let listeners = (0..6)
        .flat_map(|i| [(Proto::Tcp, node, 30080 + i), (Proto::Udp, node, 31000 + i)])
        .collect();
    (owned, snat, listeners)
}

/// An Ethernet + IPv6 + L4 header frame (`next` the next header).
pub(crate) fn frame6(k: &FlowKey6, next: u8) -> Vec<u8> {
    let mut f = vec![0u8; ETH_LEN];
    f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    let mut ip = vec![0u8; 40];
    ip[0] = 0x60;
    ip[4..6].copy_from_slice(&20u16.to_be_bytes());
    ip[6] = next;
    ip[7] = 64;
    ip[8..24].copy_from_slice(&k.src_ip.octets());
    ip[24..40].copy_from_slice(&k.dst_ip.octets());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&k.src_port.to_be_bytes());
    f.extend_from_slice(&k.dst_port.to_be_bytes());
    f.extend_from_slice(&[0u8; 16]);
    f
}

/// The rule of [`addresses`] and [`addresses6`] for `workers` sharing
/// `ports`, with [`with_affinity_lists`].
pub(crate) fn both_families(workers: u8, ports: std::ops::RangeInclusive<u16>) -> SteeringRule {
    let (owned, snat, listeners) = addresses();
    let (owned6, snat6, listeners6) = addresses6();
    with_affinity_lists(
        SteeringRule::new(workers, ports, owned, snat, listeners)
            .with_ipv6(owned6, snat6, listeners6),
    )
}

/// `(proto, address, port)` tuples of one family.
pub(crate) type Tuples<A> = Vec<(Proto, A, u16)>;

/// Backend endpoints of [`with_affinity_lists`] (IPv4, IPv6): two on one
/// address (TCP 8080, UDP 53), one on another.
pub(crate) fn backends() -> (Tuples<Ipv4Addr>, Tuples<Ipv6Addr>) {
    let b = |d| Ipv4Addr::new(10, 244, 1, d);
    let b6 = |h| Ipv6Addr::new(0xfd00, 2, 0, 0, 0, 0, 0, h);
    (
        vec![
            (Proto::Tcp, b(5), 8080),
            (Proto::Udp, b(5), 53),
            (Proto::Tcp, b(6), 8080),
        ],
        vec![
            (Proto::Tcp, b6(5), 8080),
            (Proto::Udp, b6(5), 53),
            (Proto::Tcp, b6(6), 8080),
        ],
    )
}

/// `rule` with address-steered tuples over [`addresses`],
/// [`addresses6`] and [`backends`]: some NodePorts of the node (both
/// protocols), port 80 of a VIP, the first two backend endpoints.
pub(crate) fn with_affinity_lists(mut rule: SteeringRule) -> SteeringRule {
    let (_, _, listeners) = addresses();
    let (_, _, listeners6) = addresses6();
    let (ep, ep6) = backends();
    rule.affinity_listeners = listeners[..5].to_vec();
    rule.affinity_listeners
        .push((Proto::Tcp, Ipv4Addr::new(203, 0, 113, 11), 80));
    rule.affinity_listeners.sort_unstable();
    rule.affinity_endpoints = ep[..2].to_vec();
    rule.affinity_endpoints.sort_unstable();
    rule.affinity_listeners6 = listeners6[..3].to_vec();
    rule.affinity_listeners6.sort_unstable();
    rule.affinity_endpoints6 = ep6[..2].to_vec();
    rule.affinity_endpoints6.sort_unstable();
    rule
}

/// An IPv6 key pool over [`addresses6`] and [`backends`].
pub(crate) fn key_pool6() -> KeyPool6 {
    let (owned6, _, listeners6) = addresses6();
    let (_, ep6) = backends();
    KeyPool6 {
        owned: owned6.into_iter().chain(ep6.iter().map(|e| e.1)).collect(),
        listen: listeners6.iter().chain(&ep6).map(|&(_, _, p)| p).collect(),
    }
}

/// Whether `rule` owns `k` by its client address alone (an
/// address-steered listener or endpoint), of either family.
fn address_steered<A: Ord + Copy>(
    listeners: &[(Proto, A, u16)],
    endpoints: &[(Proto, A, u16)],
    k: &crate::flow::FlowKeyOf<A>,
) -> bool {
    listeners
        .binary_search(&(k.proto, k.dst_ip, k.dst_port))
        .is_ok()
        || endpoints
            .binary_search(&(k.proto, k.src_ip, k.src_port))
            .is_ok()
}

/// A key pool over [`addresses`] and [`backends`] (addresses and ports).
pub(crate) fn key_pool() -> KeyPool {
    let (owned, _, listeners) = addresses();
    let (ep, _) = backends();
    KeyPool {
        owned: owned.into_iter().chain(ep.iter().map(|e| e.1)).collect(),
        listen: listeners.iter().chain(&ep).map(|&(_, _, p)| p).collect(),
    }
}

/// Run `prog` over `frame` (network header at [`ETH_LEN`]).
fn run(prog: &[Insn], frame: &[u8]) -> u32 {
    let load = |off: u32, size: usize| -> Option<u32> {
        let off = off as i32;
        let at = if off == AD_PROTOCOL as i32 {
            12
        } else if (libc::SKF_NET_OFF..libc::SKF_NET_OFF + 0x10000).contains(&off) {
            ETH_LEN + (off - libc::SKF_NET_OFF) as usize
        } else {
            usize::try_from(off).ok()?
        };
        let bytes = frame.get(at..at + size)?;
        Some(bytes.iter().fold(0u32, |v, b| (v << 8) | u32::from(*b)))
    };
    let (mut a, mut x, mut mem) = (0u32, 0u32, [0u32; 16]);
    let mut pc = 0usize;
    for _ in 0..100_000 {
        let i = prog[pc];
        pc += 1;
        let size = match i.code & 0x18 {
            0x00 => 4,
            0x08 => 2,
            _ => 1,
        };
        match i.code & 0x07 {
            c if c == LD => match i.code & 0xe0 {
                m if m == ABS => match load(i.k, size) {
                    Some(v) => a = v,
                    None => return 0,
                },
                m if m == IND => match load(x.wrapping_add(i.k), size) {
                    Some(v) => a = v,
                    None => return 0,
                },
                m if m == MEM => a = mem[i.k as usize],
                _ => panic!("unsupported load {:#x}", i.code),
            },
            c if c == ST => mem[i.k as usize] = a,
            c if c == ALU => {
                let v = if i.code & X == X { x } else { i.k };
                a = match i.code & 0xf0 {
                    op if op == ADD => a.wrapping_add(v),
                    op if op == SUB => a.wrapping_sub(v),
                    op if op == MUL => a.wrapping_mul(v),
                    op if op == DIV => a / v,
                    op if op == MOD => a % v,
                    op if op == AND => a & v,
                    op if op == OR => a | v,
                    op if op == XOR => a ^ v,
                    op if op == LSH => a << v,
                    op if op == RSH => a >> v,
                    _ => panic!("unsupported alu {:#x}", i.code),
                }
            }
            c if c == JMP => {
                assert_eq!(i.code & X, 0, "jumps compare with k only");
                let taken = match i.code & 0xf0 {
                    op if op == JA => {
                        pc += i.k as usize;
                        continue;
                    }
                    op if op == JEQ => a == i.k,
                    op if op == JGT => a > i.k,
                    op if op == JGE => a >= i.k,
                    op if op == JSET => a & i.k != 0,
                    _ => panic!("unsupported jump {:#x}", i.code),
                };
                pc += usize::from(if taken { i.jt } else { i.jf });
            }
            c if c == RET => return if i.code & 0x18 == A { a } else { i.k },
            c if c == MISC => x = a,
            _ => panic!("unsupported class {:#x}", i.code),
        }
    }
    panic!("program does not end")
}

#[test]
fn the_fanout_program_picks_the_rules_owner_for_random_tuples() {
    let (owned, snat, listeners) = addresses();
    let keys = key_pool();
    let mut rng = Rng(0x5eed);
    let mut by_addr = 0;
    for (i, (workers, ports)) in shapes().into_iter().enumerate() {
        let rule = SteeringRule::new(
            workers,
            ports.clone(),
            owned.clone(),
            snat.clone(),
            listeners.clone(),
        );
        // Every other shape without address-steered tuples.
        let rule = if i % 2 == 0 {
            with_affinity_lists(rule)
        } else {
            rule
        };
        let mut n = 0;
        check_program(&rule, || {
            let k = keys.key(&mut rng);
            let options = (n % 3) * 2;
            n += 1;
            let what = format!("{k}, {options} option words, {workers} workers, {ports:?}");
            by_addr += usize::from(address_steered(
                &rule.affinity_listeners,
                &rule.affinity_endpoints,
                &k,
            ));
            (frame(&k, options, 0), rule.owner(&k), what)
        });
    }
    assert!(by_addr > 100, "address-steered tuples drawn: {by_addr}");
}

/// Run the program of `rule` over 20,000 frames from `next` (a frame,
/// the owner the rule names, a description): the same owner each time,
/// every worker owning some.
fn check_program(rule: &SteeringRule, mut next: impl FnMut() -> (Vec<u8>, u8, String)) {
    let prog = fanout_program(rule);
    assert!(prog.len() <= MAX_INSTRUCTIONS);
    let workers = u32::from(rule.workers);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..20_000 {
        let (f, want, what) = next();
        assert_eq!(run(&prog, &f) % workers, u32::from(want), "{what}");
        seen.insert(want);
    }
    assert_eq!(
        seen.len(),
        usize::from(rule.workers),
        "every worker owns some"
    );
}

#[test]
fn the_fanout_program_picks_the_rules_ipv6_owner_for_random_tuples() {
    let keys = key_pool6();
    let mut by_addr = 0;
    let mut rng = Rng(0x5eed6);
    for (workers, ports) in shapes() {
        let rule = both_families(workers, ports.clone());
        assert_eq!(rule.owned6.len(), 5, "{:x?}", rule.owned6);
        check_program(&rule, || {
            let k = keys.key(&mut rng);
            let what = format!("{k:?}, {workers} workers, {ports:?}");
            by_addr += usize::from(address_steered(
                &rule.affinity_listeners6,
                &rule.affinity_endpoints6,
                &k,
            ));
            (frame6(&k, k.proto.ip_number()), rule.owner6(&k), what)
        });
        // IPv4 frames are steered as before with the IPv6 lists present.
        let keys4 = key_pool();
        check_program(&rule, || {
            let k = keys4.key(&mut rng);
            (frame(&k, 0, 0), rule.owner(&k), k.to_string())
        });
    }
    assert!(
        by_addr > 100,
        "address-steered IPv6 tuples drawn: {by_addr}"
    );
}

#[test]
fn ipv6_frames_without_tcp_or_udp_next_go_to_worker_zero() {
    let (owned6, snat6, listeners6) = addresses6();
    let rule = SteeringRule::new(4, 1024..=65535, Vec::new(), Vec::new(), Vec::new())
        .with_ipv6(owned6, snat6, listeners6);
    let prog = fanout_program(&rule);
    let k = FlowKey6::new(
        Proto::Udp,
        "2001:db8:77::9".parse().unwrap(),
        5353,
        "2001:db8:c::10".parse().unwrap(),
        53,
    );
    assert_ne!(run(&prog, &frame6(&k, 17)) % 4, 0, "steered by its client");
    // An extension header (hop-by-hop, fragment, routing) is not walked;
    // ICMPv6 (NDP among it) has no ports.
    for next in [0u8, 44, 43, 58] {
        assert_eq!(run(&prog, &frame6(&k, next)), 0, "next header {next}");
    }
    // Cut inside the ports.
    assert_eq!(run(&prog, &frame6(&k, 17)[..ETH_LEN + 42]), 0);
}

#[test]
fn frames_without_ports_go_to_worker_zero() {
    let (owned, snat, listeners) = addresses();
    let prog = fanout_program(&SteeringRule::new(4, 1024..=65535, owned, snat, listeners));
    let k = FlowKey::new(
        Proto::Udp,
        Ipv4Addr::new(198, 51, 100, 9),
        5353,
        Ipv4Addr::new(203, 0, 113, 10),
        53,
    );
    assert_ne!(run(&prog, &frame(&k, 0, 0)) % 4, 0, "steered by its client");
    // A later fragment carries no ports.
    assert_eq!(run(&prog, &frame(&k, 0, 185)), 0);
    // ICMP, ARP and a frame cut inside its IP header.
    let mut icmp = frame(&k, 0, 0);
    icmp[ETH_LEN + 9] = 1;
    assert_eq!(run(&prog, &icmp), 0);
    let mut arp = frame(&k, 0, 0);
    arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    assert_eq!(run(&prog, &arp), 0);
    assert_eq!(run(&prog, &frame(&k, 0, 0)[..ETH_LEN + 12]), 0);
}

/// A rule with every list at its maximum, the owned IPv6 ranges each in
/// its own /96: the longest program.
pub(crate) fn largest_rule() -> SteeringRule {
    SteeringRule {
        workers: 64,
        snat_ports: 1024..=65535,
        snat_addrs: (0..MAX_SNAT_ADDRS as u32).map(Ipv4Addr::from).collect(),
        snat_listeners: (0..MAX_SNAT_LISTENERS as u16)
            .map(|p| {
                (
                    Proto::Tcp,
                    Ipv4Addr::from(0x0a00_0000 + u32::from(p)),
                    30000 + p,
                )
            })
            .collect(),
        owned: (0..MAX_OWNED_RANGES as u32)
            .map(|i| (i * 4, i * 4 + 1))
            .collect(),
        snat_addrs6: (0..MAX_SNAT_ADDRS6 as u128)
            .map(|i| Ipv6Addr::from_bits(i << 64))
            .collect(),
        snat_listeners6: (0..MAX_SNAT_LISTENERS6 as u16)
            .map(|p| (Proto::Tcp, Ipv6Addr::from_bits(u128::from(p)), 30000 + p))
            .collect(),
        // Every range in its own /96: the most instructions.
        owned6: (0..MAX_OWNED_RANGES6 as u128)
            .map(|i| (i << 32, (i << 32) + 1))
            .collect(),
        // Every tuple on its own address: the most instructions.
        affinity_listeners: (0..MAX_AFFINITY_LISTENERS as u32)
            .map(|i| (Proto::Tcp, Ipv4Addr::from(0x0b00_0000 + i), 80))
            .collect(),
        affinity_endpoints: (0..MAX_AFFINITY_ENDPOINTS as u32)
            .map(|i| (Proto::Tcp, Ipv4Addr::from(0x0c00_0000 + i), 8080))
            .collect(),
        affinity_listeners6: (0..MAX_AFFINITY_LISTENERS6 as u128)
            .map(|i| (Proto::Tcp, Ipv6Addr::from_bits(1 << 100 | i), 80))
            .collect(),
        affinity_endpoints6: (0..MAX_AFFINITY_ENDPOINTS6 as u128)
            .map(|i| (Proto::Tcp, Ipv6Addr::from_bits(1 << 101 | i), 8080))
            .collect(),
        truncated: true,
    }
}

#[test]
fn the_largest_rule_fits_the_kernel_limit() {
    let prog = fanout_program(&largest_rule());
    println!("largest rule: {} instructions", prog.len());
    assert!(
        prog.len() <= MAX_INSTRUCTIONS,
        "{} instructions",
        prog.len()
    );
}
