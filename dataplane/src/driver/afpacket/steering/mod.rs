//! Flow-affine fanout: the classic-BPF program a port's `PACKET_FANOUT`
//! group runs (`PACKET_FANOUT_CBPF`) to pick the socket — the worker — of
//! each frame, computing [`SteeringRule::owner`] (and
//! [`SteeringRule::owner6`]) so frames reach the
//! worker that owns their flow and the handoff rings carry only the
//! exceptions (ICMP errors, frames of a rule cut short, frames that crossed
//! a snapshot change).
//!
//! The kernel runs the program on each received skb and delivers it to
//! member `return value % members` (`fanout_demux_bpf`,
//! net/packet/af_packet.c); members are numbered in the order they joined,
//! so the workers join in worker order (the gateway opens their drivers
//! one after the other) and member `w` is worker `w`.
//!
//! The program (filter.txt / `Documentation/networking/filter.rst` for the
//! encoding). Loads are relative to the network header (`SKF_NET_OFF`),
//! so it does not depend on where `skb->data` points at the fanout hook:
//!
//! ```text
//!   if skb->protocol == IPv6 -> V6
//!   if skb->protocol != IPv4 -> ANY
//!   proto = ip[9]; if proto not in {TCP, UDP} -> ANY
//!   if ip[6..8] & 0x1fff (a later fragment, no ports) -> ANY
//!   src = ip[12..16]; dst = ip[16..20]; x = 4 * (ip[0] & 15)
//!   sport = l4[x..x+2]; dport = l4[x+2..x+4]
//!   spp = proto << 16 | sport; dpp = proto << 16 | dport
//!   if dst in snat_addrs and dport in snat_ports
//!      and (dst, dpp) not in snat_listeners -> return slice(dport)
//!   if dst in owned:
//!      if (dst, dpp) in affinity_listeners -> return client_hash(src)
//!      return client_hash(src ^ sport)
//!   if (src, spp) in affinity_endpoints -> return client_hash(dst)
//!   return client_hash(dst ^ dport)
//! V6 (RFC 8200 §3; no extension header is walked):
//!   proto = ip[6]; if proto not in {TCP, UDP} -> ANY
//!   sport = ip[40..42]; dport = ip[42..44]; spp, dpp as above
//!   s0..s3, d0..d3 = the words of ip[8..24], ip[24..40]
//!   srcx = s0 ^ s1 ^ s2 ^ s3; dstx = d0 ^ d1 ^ d2 ^ d3
//!   if dst in snat_addrs6 and dport in snat_ports
//!      and (dst, dpp) not in snat_listeners6 -> return slice(dport)
//!   then as IPv4 over the IPv6 lists, with srcx and dstx for src and dst
//!      (client_port_hash6: the hash of the folded words; owned6 is tested
//!      per /96: d0, d1, d2 once, then d3 against each range)
//! ANY: return 0 (worker 0; it hands off what another worker owns)
//! ```
//!
//! A set of `(proto, address, port)` tuples (the listener and endpoint
//! lists) is tested grouped by address: the address once, then
//! `proto << 16 | port` against each of its entries (two instructions
//! each), so the NodePorts of a node address cost little.
//!
//! A frame the program cannot read that far (shorter than its headers)
//! also returns 0: the kernel ends a classic-BPF program on a load past
//! the packet with 0.
//!
//! Conditional jumps reach at most 255 instructions ahead, so every jump to
//! a label is a short conditional over an unconditional `ja` (32-bit
//! offset). Size: about 2 to 5 instructions per IPv4 list entry, 9 to 13
//! per IPv6 one; 4070 instructions (at most [`MAX_INSTRUCTIONS`], the
//! kernel's `BPF_MAXINSNS`) for the [`SteeringRule`] maxima, every tuple
//! on its own address (`the_largest_rule_fits_the_kernel_limit`).

#[cfg(test)]
pub(crate) mod tests;

use super::{AfPacketConfig, FanoutMode};
use crate::driver::sys;
use crate::flow::Proto;
use crate::steering::{CLIENT_HASH_MULTIPLIER, CLIENT_HASH_SHIFT, SteeringRule};
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::AsFd;

/// Join a bound socket to fanout `group` in `mode` (`id | (mode | flags) <<
/// 16`). `PACKET_FANOUT_FLAG_IGNORE_OUTGOING`: the group's hook replaces
/// the socket's own, so the socket's `PACKET_IGNORE_OUTGOING` no longer
/// applies and the group needs the flag itself.
///
/// No program is installed here: the program belongs to the group, and a
/// later member's join must not replace the rule worker 0 installed (it
/// may have done so before the others joined). Until worker 0 installs
/// one, the kernel sends every frame to member 0, which hands off what it
/// does not own.
pub(super) fn join(fd: impl AsFd, group: u16, mode: FanoutMode) -> io::Result<()> {
    let flags = libc::PACKET_FANOUT_FLAG_IGNORE_OUTGOING;
    let arg = (u32::from(group) | ((mode.raw() | flags) << 16)) as libc::c_int;
    sys::setsockopt(fd.as_fd(), libc::SOL_PACKET, libc::PACKET_FANOUT, &arg)
}

/// Replace the steering program of the fanout group `fd` belongs to (any
/// member's socket sets the group's program).
pub(super) fn install(fd: impl AsFd, rule: &SteeringRule) -> io::Result<()> {
    sys::setsockopt_program(
        fd,
        libc::SOL_PACKET,
        libc::PACKET_FANOUT_DATA,
        &fanout_program(rule),
    )
}

/// Indices of the ports of `config` whose group runs the steering program.
pub(super) fn steered_ports(config: &AfPacketConfig) -> Vec<usize> {
    match config.fanout_mode {
        FanoutMode::Steered => config
            .ports
            .iter()
            .enumerate()
            .filter(|(_, p)| p.fanout_group_id.is_some())
            .map(|(i, _)| i)
            .collect(),
        _ => Vec::new(),
    }
}

/// The kernel's `BPF_MAXINSNS`.
pub const MAX_INSTRUCTIONS: usize = 4096;

// Classic BPF opcode parts (linux/filter.h, linux/bpf_common.h).
const LD: u16 = 0x00;
const ST: u16 = 0x02;
const ALU: u16 = 0x04;
const JMP: u16 = 0x05;
const RET: u16 = 0x06;
const MISC: u16 = 0x07;
const W: u16 = 0x00;
const H: u16 = 0x08;
const B: u16 = 0x10;
const ABS: u16 = 0x20;
const IND: u16 = 0x40;
const MEM: u16 = 0x60;
const K: u16 = 0x00;
const A: u16 = 0x10;
const ADD: u16 = 0x00;
const SUB: u16 = 0x10;
const MUL: u16 = 0x20;
const DIV: u16 = 0x30;
const AND: u16 = 0x50;
const LSH: u16 = 0x60;
const OR: u16 = 0x40;
const XOR: u16 = 0xa0;
/// The ALU source is `X`, not `k`.
const X: u16 = 0x08;
const RSH: u16 = 0x70;
const MOD: u16 = 0x90;
const JA: u16 = 0x00;
const JEQ: u16 = 0x10;
const JGT: u16 = 0x20;
const JGE: u16 = 0x30;
const JSET: u16 = 0x40;
const TAX: u16 = 0x00;

/// `SKF_NET_OFF`: loads at this offset plus `k` read from the network
/// header.
const NET: u32 = libc::SKF_NET_OFF as u32;
/// `SKF_AD_OFF + SKF_AD_PROTOCOL`: `ntohs(skb->protocol)`.
const AD_PROTOCOL: u32 = (libc::SKF_AD_OFF + libc::SKF_AD_PROTOCOL) as u32;
const ETH_P_IP: u32 = 0x0800;
const ETH_P_IPV6: u32 = 0x86dd;

// Scratch memory words.
const M_PROTO: u32 = 0;
const M_SRC: u32 = 1;
const M_DST: u32 = 2;
const M_DPORT: u32 = 3;
/// IPv6: `M_D6 + i` holds word `i` of the destination address; `M_SRC`
/// and `M_DST` hold the xor of the source's and the destination's words.
const M_D6: u32 = 4;
const M_SPORT: u32 = 8;
/// `proto << 16 | sport`, `proto << 16 | dport`.
const M_SPP: u32 = 9;
const M_DPP: u32 = 10;
/// IPv6: `M_S6 + i` holds word `i` of the source address.
const M_S6: u32 = 11;
/// Most entries of one address a tuple group tests (its skip over them
/// must fit a conditional jump).
const GROUP_MAX: usize = 100;

/// One classic BPF instruction, as `struct sock_filter`.
pub type Insn = libc::sock_filter;

const fn stmt(code: u16, k: u32) -> Insn {
    Insn {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

const fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
    Insn { code, jt, jf, k }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Label {
    Any,
    Snat,
    NotSnat,
    DstAddr,
    Owned,
    SrcAddr,
    Hash,
    V6,
    Snat6,
    NotSnat6,
    DstAddr6,
    Owned6,
    SrcAddr6,
    Hash6,
    Any6,
}

/// The labels of one family's client part ([`client_part`]).
struct ClientLabels {
    dst_addr: Label,
    owned: Label,
    src_addr: Label,
    hash: Label,
}

/// Instructions with forward `ja` to labels, resolved in [`Asm::finish`].
struct Asm {
    code: Vec<Insn>,
    fixups: Vec<(usize, Label)>,
    labels: Vec<(Label, usize)>,
}

impl Asm {
    fn op(&mut self, insn: Insn) {
        self.code.push(insn);
    }

    fn ja(&mut self, to: Label) {
        self.fixups.push((self.code.len(), to));
        self.code.push(stmt(JMP | JA, 0));
    }

    /// `if A == k goto to`.
    fn jeq(&mut self, k: u32, to: Label) {
        self.op(jump(JMP | JEQ | K, k, 0, 1));
        self.ja(to);
    }

    /// `if lo <= A <= hi goto to`.
    fn jin(&mut self, lo: u32, hi: u32, to: Label) {
        self.op(jump(JMP | JGE | K, lo, 0, 2));
        self.op(jump(JMP | JGT | K, hi, 1, 0));
        self.ja(to);
    }

    /// `if A == k` go on, else jump to the next [`Asm::end_entry`]: the
    /// entry (a list element) is short, so the jump fits a conditional.
    fn or_next(&mut self, k: u32, pending: &mut Vec<usize>) {
        pending.push(self.code.len());
        self.op(jump(JMP | JEQ | K, k, 0, 0));
    }

    /// Where the `or_next` jumps of the entry just emitted land.
    fn end_entry(&mut self, pending: &mut Vec<usize>) {
        let here = self.code.len();
        for at in pending.drain(..) {
            let off = here - at - 1;
            debug_assert!(off <= usize::from(u8::MAX), "entry too long: {off}");
            if let Some(insn) = self.code.get_mut(at) {
                insn.jf = off as u8;
            }
        }
    }

    /// Jump on unless the first `words` words of the IPv6 address kept in
    /// `base..` (`M_D6`, `M_S6`) equal those of `addr` (a next-entry check
    /// each).
    fn addr6_prefix(&mut self, base: u32, addr: u128, words: u32, pending: &mut Vec<usize>) {
        for i in 0..words {
            self.op(stmt(LD | MEM, base + i));
            self.or_next((addr >> (96 - 32 * i)) as u32, pending);
        }
    }

    /// `if (addr, pp) in tuples goto to`: per address (of `n` words, at
    /// `addr_at`), the address once, then `pp_at`'s `proto << 16 | port`
    /// against each of its tuples.
    fn tuples_to<A: Ord + Copy>(
        &mut self,
        tuples: &[(Proto, A, u16)],
        addr_test: impl Fn(&mut Self, A, &mut Vec<usize>),
        pp_at: u32,
        to: Label,
    ) {
        let mut by_addr: Vec<(A, u32)> = tuples
            .iter()
            .map(|&(proto, addr, port)| {
                (addr, u32::from(proto.ip_number()) << 16 | u32::from(port))
            })
            .collect();
        by_addr.sort_unstable();
        let mut pending = Vec::new();
        for group in by_addr.chunk_by(|x, y| x.0 == y.0) {
            for part in group.chunks(GROUP_MAX) {
                let Some(&(addr, _)) = part.first() else {
                    continue;
                };
                addr_test(self, addr, &mut pending);
                self.op(stmt(LD | MEM, pp_at));
                for &(_, pp) in part {
                    self.jeq(pp, to);
                }
                self.end_entry(&mut pending);
            }
        }
    }

    /// `M_PROTO = ip[at]; if it is neither TCP nor UDP goto to`.
    fn proto_at_or(&mut self, at: u32, to: Label) {
        self.op(stmt(LD | B | ABS, NET.wrapping_add(at)));
        self.op(stmt(ST, M_PROTO));
        self.op(jump(JMP | JEQ | K, u32::from(Proto::Tcp.ip_number()), 2, 0));
        self.op(jump(JMP | JEQ | K, u32::from(Proto::Udp.ip_number()), 1, 0));
        self.ja(to);
    }

    /// `if !(lo <= dport <= hi) goto to` (dport from `M_DPORT`).
    fn port_in_or(&mut self, lo: u16, hi: u16, to: Label) {
        self.op(stmt(LD | MEM, M_DPORT));
        self.op(jump(JMP | JGE | K, u32::from(lo), 1, 0));
        self.ja(to);
        self.op(jump(JMP | JGT | K, u32::from(hi), 0, 1));
        self.ja(to);
    }

    fn label(&mut self, l: Label) {
        self.labels.push((l, self.code.len()));
    }

    /// Resolve the jumps; every label lies after its jumps (classic BPF
    /// jumps forward only).
    fn finish(mut self) -> Vec<Insn> {
        for (at, to) in self.fixups {
            let target = self
                .labels
                .iter()
                .find(|(l, _)| *l == to)
                .map_or(at + 1, |&(_, pos)| pos);
            if let Some(insn) = self.code.get_mut(at) {
                insn.k = (target - at - 1) as u32;
            }
        }
        self.code
    }
}

/// The fanout program computing `rule`'s owner (see the module docs).
/// At most [`MAX_INSTRUCTIONS`] long for any rule within the
/// [`SteeringRule`] maxima.
pub fn fanout_program(rule: &SteeringRule) -> Vec<Insn> {
    let mut a = Asm {
        code: Vec::with_capacity(
            128 + 3 * rule.owned.len()
                + 5 * (rule.snat_listeners.len()
                    + rule.affinity_listeners.len()
                    + rule.affinity_endpoints.len())
                + 9 * rule.snat_addrs6.len()
                + 13 * (rule.snat_listeners6.len()
                    + rule.affinity_listeners6.len()
                    + rule.affinity_endpoints6.len())
                + 10 * rule.owned6.len(),
        ),
        fixups: Vec::new(),
        labels: Vec::new(),
    };
    let workers = u32::from(rule.workers.max(1));
    // Parse.
    a.op(stmt(LD | H | ABS, AD_PROTOCOL));
    a.op(jump(JMP | JEQ | K, ETH_P_IP, 3, 0));
    a.op(jump(JMP | JEQ | K, ETH_P_IPV6, 0, 1));
    a.ja(Label::V6);
    a.ja(Label::Any);
    a.proto_at_or(9, Label::Any);
    a.op(stmt(LD | H | ABS, NET.wrapping_add(6)));
    a.op(jump(JMP | JSET | K, 0x1fff, 0, 1));
    a.ja(Label::Any);
    a.op(stmt(LD | W | ABS, NET.wrapping_add(12)));
    a.op(stmt(ST, M_SRC));
    a.op(stmt(LD | W | ABS, NET.wrapping_add(16)));
    a.op(stmt(ST, M_DST));
    a.op(stmt(LD | B | ABS, NET));
    a.op(stmt(ALU | AND | K, 0x0f));
    a.op(stmt(ALU | LSH | K, 2));
    a.op(stmt(MISC | TAX, 0));
    a.op(stmt(LD | H | IND, NET));
    a.op(stmt(ST, M_SPORT));
    a.op(stmt(LD | H | IND, NET.wrapping_add(2)));
    a.op(stmt(ST, M_DPORT));
    proto_ports(&mut a);
    let addr_at = |at: u32| {
        move |a: &mut Asm, addr: Ipv4Addr, pending: &mut Vec<usize>| {
            a.op(stmt(LD | MEM, at));
            a.or_next(u32::from(addr), pending);
        }
    };
    // A reply to an SNAT tuple?
    let (lo, hi) = (*rule.snat_ports.start(), *rule.snat_ports.end());
    if lo <= hi && !rule.snat_addrs.is_empty() {
        a.op(stmt(LD | MEM, M_DST));
        for addr in &rule.snat_addrs {
            a.jeq(u32::from(*addr), Label::Snat);
        }
        a.ja(Label::NotSnat);
        a.label(Label::Snat);
        a.port_in_or(lo, hi, Label::NotSnat);
        // proto, address and port all equal: a client of the listener.
        a.tuples_to(&rule.snat_listeners, addr_at(M_DST), M_DPP, Label::Owned);
        slice_owner(&mut a, lo, hi, workers);
    }
    // Client side: by the client address and port.
    a.label(Label::NotSnat);
    a.op(stmt(LD | MEM, M_DST));
    for &(lo, hi) in &rule.owned {
        if lo == hi {
            a.jeq(lo, Label::Owned);
        } else {
            a.jin(lo, hi, Label::Owned);
        }
    }
    let labels = ClientLabels {
        dst_addr: Label::DstAddr,
        owned: Label::Owned,
        src_addr: Label::SrcAddr,
        hash: Label::Hash,
    };
    client_part(
        &mut a,
        labels,
        (&rule.affinity_endpoints, addr_at(M_SRC)),
        (&rule.affinity_listeners, addr_at(M_DST)),
    );
    hash_tail(&mut a, workers);
    a.label(Label::Any);
    a.op(stmt(RET | K, 0));
    ipv6_part(&mut a, rule, workers);
    a.finish()
}

/// `M_SPP = proto << 16 | sport; M_DPP = proto << 16 | dport`.
fn proto_ports(a: &mut Asm) {
    a.op(stmt(LD | MEM, M_PROTO));
    a.op(stmt(ALU | LSH | K, 16));
    a.op(stmt(MISC | TAX, 0));
    a.op(stmt(LD | MEM, M_SPORT));
    a.op(stmt(ALU | OR | X, 0));
    a.op(stmt(ST, M_SPP));
    a.op(stmt(LD | MEM, M_DPORT));
    a.op(stmt(ALU | OR | X, 0));
    a.op(stmt(ST, M_DPP));
}

/// The client part of one family, after the owned-address tests (which
/// jump to `owned`), ending at `hash` with the word to hash in `A`: a
/// packet to an address not owned (a reply to the client) is by the
/// destination and its port, or the destination alone from an endpoint of
/// `endpoints` (tested on `M_SRC`'s address and `M_SPP`); a packet to an
/// owned address by the source and its port, or the source alone to a
/// listener of `listeners` (`M_DST`'s address, `M_DPP`). A block only a
/// listed tuple reaches is left out when its list is empty (the eBPF
/// verifier refuses unreachable code).
fn client_part<A: Ord + Copy, F: Fn(&mut Asm, A, &mut Vec<usize>)>(
    a: &mut Asm,
    l: ClientLabels,
    endpoints: (&[(Proto, A, u16)], F),
    listeners: (&[(Proto, A, u16)], F),
) {
    a.tuples_to(endpoints.0, endpoints.1, M_SPP, l.dst_addr);
    xor_port(a, M_DST, M_DPORT);
    a.ja(l.hash);
    if !endpoints.0.is_empty() {
        a.label(l.dst_addr);
        a.op(stmt(LD | MEM, M_DST));
        a.ja(l.hash);
    }
    a.label(l.owned);
    a.tuples_to(listeners.0, listeners.1, M_DPP, l.src_addr);
    xor_port(a, M_SRC, M_SPORT);
    if !listeners.0.is_empty() {
        a.ja(l.hash);
        a.label(l.src_addr);
        a.op(stmt(LD | MEM, M_SRC));
    }
    a.label(l.hash);
}

/// `A = M[addr] ^ M[port]` (`X` = the port).
fn xor_port(a: &mut Asm, addr: u32, port: u32) {
    a.op(stmt(LD | MEM, port));
    a.op(stmt(MISC | TAX, 0));
    a.op(stmt(LD | MEM, addr));
    a.op(stmt(ALU | XOR | X, 0));
}

/// The `V6` part of the program (see the module docs): parse, then the
/// SNAT and owned tests over the IPv6 lists, ending in `Hash` or `Any`.
fn ipv6_part(a: &mut Asm, rule: &SteeringRule, workers: u32) {
    let mut pending = Vec::new();
    a.label(Label::V6);
    a.proto_at_or(6, Label::Any6);
    a.op(stmt(LD | H | ABS, NET.wrapping_add(40)));
    a.op(stmt(ST, M_SPORT));
    a.op(stmt(LD | H | ABS, NET.wrapping_add(42)));
    a.op(stmt(ST, M_DPORT));
    proto_ports(a);
    // The words of the source and of the destination, and their xors.
    for (at, base, xor) in [(8u32, M_S6, M_SRC), (24, M_D6, M_DST)] {
        for i in 0..4u32 {
            if i > 0 {
                a.op(stmt(MISC | TAX, 0));
            }
            a.op(stmt(LD | W | ABS, NET.wrapping_add(at + 4 * i)));
            a.op(stmt(ST, base + i));
            if i > 0 {
                a.op(stmt(ALU | XOR | X, 0));
            }
        }
        a.op(stmt(ST, xor));
    }
    let addr_at = |base: u32| {
        move |a: &mut Asm, addr: Ipv6Addr, pending: &mut Vec<usize>| {
            a.addr6_prefix(base, addr.to_bits(), 4, pending);
        }
    };
    let (lo, hi) = (*rule.snat_ports.start(), *rule.snat_ports.end());
    if lo <= hi && !rule.snat_addrs6.is_empty() {
        for addr in &rule.snat_addrs6 {
            a.addr6_prefix(M_D6, addr.to_bits(), 4, &mut pending);
            a.ja(Label::Snat6);
            a.end_entry(&mut pending);
        }
        a.ja(Label::NotSnat6);
        a.label(Label::Snat6);
        a.port_in_or(lo, hi, Label::NotSnat6);
        // proto, port and address all equal: a client of the listener.
        a.tuples_to(&rule.snat_listeners6, addr_at(M_D6), M_DPP, Label::Owned6);
        slice_owner(a, lo, hi, workers);
    }
    a.label(Label::NotSnat6);
    // Owned ranges, grouped by their /96 (`SteeringRule::owned6` never
    // crosses one): the upper three words once per group.
    for group in rule.owned6.chunk_by(|x, y| x.0 >> 32 == y.0 >> 32) {
        let Some(&(first, _)) = group.first() else {
            continue;
        };
        a.addr6_prefix(M_D6, first, 3, &mut pending);
        a.op(stmt(LD | MEM, M_D6 + 3));
        for &(lo, hi) in group {
            let (lo, hi) = (lo as u32, hi as u32);
            if lo == hi {
                a.jeq(lo, Label::Owned6);
            } else {
                a.jin(lo, hi, Label::Owned6);
            }
        }
        a.end_entry(&mut pending);
    }
    // Jumps go forward only: the IPv4 part's tails are behind.
    let labels = ClientLabels {
        dst_addr: Label::DstAddr6,
        owned: Label::Owned6,
        src_addr: Label::SrcAddr6,
        hash: Label::Hash6,
    };
    client_part(
        a,
        labels,
        (&rule.affinity_endpoints6, addr_at(M_S6)),
        (&rule.affinity_listeners6, addr_at(M_D6)),
    );
    hash_tail(a, workers);
    a.label(Label::Any6);
    a.op(stmt(RET | K, 0));
}

/// `return client_hash(A) % workers` (the rest of [`client_hash`] and
/// [`client_port_hash`]: the kernel takes the result modulo the members).
///
/// [`client_hash`]: crate::steering::client_hash
/// [`client_port_hash`]: crate::steering::client_port_hash
fn hash_tail(a: &mut Asm, workers: u32) {
    a.op(stmt(ALU | MUL | K, CLIENT_HASH_MULTIPLIER));
    a.op(stmt(ALU | RSH | K, CLIENT_HASH_SHIFT));
    a.op(stmt(ALU | MOD | K, workers));
    a.op(stmt(RET | A, 0));
}

/// `return owner_of_port(lo..=hi, dport, workers)` with `dport` in the
/// range (see [`crate::snat::owner_of_port`]): the first `rem` slices are
/// `base + 1` ports long, the others `base`.
fn slice_owner(a: &mut Asm, lo: u16, hi: u16, workers: u32) {
    let len = u32::from(hi) - u32::from(lo) + 1;
    let base = len / workers;
    let rem = len % workers;
    let long_part = rem * (base + 1);
    a.op(stmt(LD | MEM, M_DPORT));
    a.op(stmt(ALU | SUB | K, u32::from(lo)));
    if base == 0 {
        // Fewer ports than workers: port lo + i belongs to worker i.
        a.op(stmt(RET | A, 0));
        return;
    }
    if long_part > 0 {
        a.op(jump(JMP | JGE | K, long_part, 2, 0));
        a.op(stmt(ALU | DIV | K, base + 1));
        a.op(stmt(RET | A, 0));
        a.op(stmt(ALU | SUB | K, long_part));
    }
    a.op(stmt(ALU | DIV | K, base));
    a.op(stmt(ALU | ADD | K, rem));
    a.op(stmt(RET | A, 0));
}
