//! The steering program's instructions (the pseudo code is in the module
//! docs of `steer/`): the active generation's scalars, the frame's headers
//! into stack slots, the decisions as map lookups, the owner into the XSK
//! map slot.

use super::SteerError;
use super::asm::*;
use super::maps::*;
use crate::driver::afxdp::bpf::{self, Insn};

/// Where the program's choice goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sink {
    /// `bpf_redirect_map` into the XSK map with this fd (the real program).
    Redirect { map_fd: i32 },
    /// Return the first-choice slot `q * W + w` (tests: `BPF_PROG_TEST_RUN`
    /// reports it as the return value).
    ReturnSlot,
}

// Registers: r1..r5 arguments and scratch (clobbered by calls), r0 result.
const R0: u8 = 0;
const R1: u8 = 1;
const R2: u8 = 2;
const R3: u8 = 3;
const R4: u8 = 4;
/// `struct xdp_md *`.
const CTX: u8 = 6;
const DATA: u8 = 7;
const DATA_END: u8 = 8;
/// The active generation's scalars (a map value pointer).
const CFG: u8 = 9;
const FP: u8 = 10;

/// Helpers: `bpf_map_lookup_elem`, `bpf_redirect_map`,
/// `bpf_xdp_load_bytes` (Linux 5.18+, reads across a multi-buffer
/// packet's frags).
const FUNC_MAP_LOOKUP: i32 = 1;
const FUNC_REDIRECT_MAP: i32 = 51;
const FUNC_XDP_LOAD_BYTES: i32 = 189;
/// `XDP_REDIRECT`.
const XDP_REDIRECT: i32 = 4;
/// `offsetof(struct xdp_md, ...)`.
const MD_DATA: i16 = 0;
const MD_DATA_END: i16 = 4;
const MD_RX_QUEUE_INDEX: i16 = 16;

// Frame offsets (Ethernet header, then RFC 791 §3.1 / RFC 8200 §3).
const ETH_HLEN: i32 = 14;
const ETH_TYPE: i16 = 12;
/// EtherTypes as a little-endian 16-bit load sees them.
const ETH_P_IP_LE: i32 = 0x0008;
const ETH_P_IPV6_LE: i32 = 0xdd86;
const IP4_FRAG: i16 = 14 + 6;
const IP4_PROTO: i16 = 14 + 9;
const IP4_SRC: i16 = 14 + 12;
const IP4_DST: i16 = 14 + 16;
const IP6_NEXT: i16 = 14 + 6;
const IP6_SRC: i16 = 14 + 8;
const IP6_DST: i16 = 14 + 24;
const IP6_PORTS: i16 = 14 + 40;
const TCP: i32 = 6;
const UDP: i32 = 17;

// Stack slots (offsets from the frame pointer, each 8-aligned).
/// A `config` key.
const S_KEY: i16 = -8;
/// The active generation.
const S_GEN: i16 = -16;
const S_PROTO: i16 = -24;
/// Ports as on the wire (network order in the low 16 bits).
const S_SPORT: i16 = -32;
const S_DPORT: i16 = -40;
/// Source and destination as the hash takes them (host order; IPv6: the
/// xor of the four words).
const S_SRC_HASH: i16 = -48;
const S_DST_HASH: i16 = -56;
/// 0: IPv4, 1: IPv6.
const S_V6: i16 = -64;
/// Addresses as on the wire, 16 bytes each (IPv4: 4, then zeros).
const S_SRC: i16 = -80;
const S_DST: i16 = -96;
/// A `sets` key, an `owned` key (24 bytes each).
const S_SET_KEY: i16 = -120;
const S_OWNED_KEY: i16 = -144;
/// `bpf_xdp_load_bytes`'s buffer (the IPv4 ports).
const S_LOAD: i16 = -152;

/// Multiplier of `steering::client_hash` (as the immediate's bits).
const HASH_MULTIPLIER: i32 = crate::steering::CLIENT_HASH_MULTIPLIER as i32;
const HASH_SHIFT: i32 = crate::steering::CLIENT_HASH_SHIFT as i32;

/// The steering program for `maps`, `workers` slots per queue in the XSK
/// map, the choice going to `sink`.
pub fn steering_program(
    maps: &super::SteerMaps,
    workers: u32,
    sink: Sink,
) -> Result<Vec<Insn>, SteerError> {
    let workers = workers.max(1) as i32;
    let mut a = Asm::default();
    let own = a.label();
    let owner0 = a.label();
    let epilogue = a.label();
    let v6 = a.label();
    let decide = a.label();
    a.mov(CTX, R1);

    // The active generation, then its scalars.
    a.st(W, FP, S_KEY, ACTIVE as i32);
    lookup(&mut a, maps.config.raw_fd(), S_KEY);
    a.jmp_imm(JEQ, R0, 0, own);
    a.ldx(W, R1, R0, 0);
    a.jmp_imm(JGT, R1, 1, own);
    a.stx(DW, FP, S_GEN, R1);
    a.alu_imm(ALU64, ADD, R1, SCALARS as i32);
    a.stx(W, FP, S_KEY, R1);
    lookup(&mut a, maps.config.raw_fd(), S_KEY);
    a.jmp_imm(JEQ, R0, 0, own);
    a.mov(CFG, R0);
    a.ldx(W, R1, CFG, CFG_WORKERS);
    a.jmp_imm(JEQ, R1, 0, own);
    a.jmp_imm(JEQ, R1, 1, owner0);

    // Headers in the first buffer (direct access up to `data_end`).
    a.ldx(W, DATA, CTX, MD_DATA);
    a.ldx(W, DATA_END, CTX, MD_DATA_END);
    need(&mut a, ETH_HLEN, owner0);
    a.ldx(H, R1, DATA, ETH_TYPE);
    a.jmp_imm(JEQ, R1, ETH_P_IPV6_LE, v6);
    a.jmp_imm(JNE, R1, ETH_P_IP_LE, owner0);

    // IPv4: TCP or UDP, first fragment, addresses, ports after the options.
    need(&mut a, ETH_HLEN + 20, owner0);
    a.ldx(B, R1, DATA, IP4_PROTO);
    tcp_or_udp(&mut a, owner0);
    a.ldx(H, R1, DATA, IP4_FRAG);
    a.be(R1, 16);
    a.alu_imm(ALU, AND, R1, 0x1fff);
    a.jmp_imm(JNE, R1, 0, owner0);
    for (field, slot, hash) in [(IP4_SRC, S_SRC, S_SRC_HASH), (IP4_DST, S_DST, S_DST_HASH)] {
        a.st(DW, FP, slot, 0);
        a.st(DW, FP, slot + 8, 0);
        a.ldx(W, R1, DATA, field);
        a.stx(W, FP, slot, R1);
        a.be(R1, 32);
        a.stx(DW, FP, hash, R1);
    }
    a.st(DW, FP, S_V6, 0);
    a.ldx(B, R2, DATA, ETH_HLEN as i16);
    a.alu_imm(ALU64, AND, R2, 15);
    a.alu_imm(ALU64, LSH, R2, 2);
    a.alu_imm(ALU64, ADD, R2, ETH_HLEN);
    a.mov(R1, CTX);
    a.mov(R3, FP);
    a.alu_imm(ALU64, ADD, R3, i32::from(S_LOAD));
    a.mov_imm(R4, 4);
    a.call(FUNC_XDP_LOAD_BYTES);
    a.jmp_imm(JNE, R0, 0, owner0);
    a.ldx(H, R1, FP, S_LOAD);
    a.stx(DW, FP, S_SPORT, R1);
    a.ldx(H, R1, FP, S_LOAD + 2);
    a.stx(DW, FP, S_DPORT, R1);
    a.ja(decide);

    // IPv6 (no extension header is walked): TCP or UDP, addresses, ports.
    a.bind(v6);
    need(&mut a, i32::from(IP6_PORTS) + 4, owner0);
    a.ldx(B, R1, DATA, IP6_NEXT);
    tcp_or_udp(&mut a, owner0);
    for (field, slot, hash) in [(IP6_SRC, S_SRC, S_SRC_HASH), (IP6_DST, S_DST, S_DST_HASH)] {
        a.mov_imm(R2, 0);
        for w in 0..4 {
            a.ldx(W, R1, DATA, field + 4 * w);
            a.stx(W, FP, slot + 4 * w, R1);
            a.alu(ALU64, XOR, R2, R1);
        }
        a.be(R2, 32);
        a.stx(DW, FP, hash, R2);
    }
    a.st(DW, FP, S_V6, 1);
    a.ldx(H, R1, DATA, IP6_PORTS);
    a.stx(DW, FP, S_SPORT, R1);
    a.ldx(H, R1, DATA, IP6_PORTS + 2);
    a.stx(DW, FP, S_DPORT, R1);

    // A reply to an SNAT tuple: the port's slice.
    a.bind(decide);
    let not_reply = a.label();
    a.ldx(DW, R1, FP, S_DPORT);
    a.be(R1, 16);
    a.ldx(W, R2, CFG, CFG_SNAT_LO);
    a.jmp(JLT, R1, R2, not_reply);
    a.ldx(W, R2, CFG, CFG_SNAT_HI);
    a.jmp(JGT, R1, R2, not_reply);
    set_lookup(&mut a, maps, KIND_SNAT_ADDR, None, S_DST);
    a.jmp_imm(JEQ, R0, 0, not_reply);
    set_lookup(&mut a, maps, KIND_SNAT_LISTENER, Some(S_DPORT), S_DST);
    a.jmp_imm(JNE, R0, 0, not_reply);
    let short = a.label();
    a.ldx(DW, R1, FP, S_DPORT);
    a.be(R1, 16);
    a.ldx(W, R2, CFG, CFG_SNAT_LO);
    a.alu(ALU, SUB, R1, R2);
    a.ldx(W, R2, CFG, CFG_LONG);
    a.jmp(JGE, R1, R2, short);
    a.ldx(W, R3, CFG, CFG_LONG_SLICE);
    a.alu(ALU, DIV, R1, R3);
    a.mov(R2, R1);
    a.ja(epilogue);
    a.bind(short);
    a.alu(ALU, SUB, R1, R2);
    a.ldx(W, R3, CFG, CFG_SHORT_SLICE);
    a.alu(ALU, DIV, R1, R3);
    a.ldx(W, R3, CFG, CFG_REM);
    a.alu(ALU, ADD, R1, R3);
    a.mov(R2, R1);
    a.ja(epilogue);

    // To an owned address: the client is the source; else the destination.
    a.bind(not_reply);
    let not_owned = a.label();
    let hash = a.label();
    let k = S_OWNED_KEY;
    for off in [0, 8, 16] {
        a.st(DW, FP, k + off, 0);
    }
    // Prefix length: 32 + 32 (IPv4) or 32 + 128 (IPv6); family 4 or 6.
    a.ldx(DW, R1, FP, S_V6);
    a.alu_imm(ALU64, MUL, R1, 96);
    a.alu_imm(ALU64, ADD, R1, (OWNED_HEAD_BITS + 32) as i32);
    a.stx(W, FP, k, R1);
    a.ldx(DW, R1, FP, S_GEN);
    a.stx(B, FP, k + OWNED_GEN, R1);
    a.ldx(DW, R1, FP, S_V6);
    a.alu_imm(ALU64, LSH, R1, 1);
    a.alu_imm(ALU64, ADD, R1, 4);
    a.stx(B, FP, k + OWNED_FAMILY, R1);
    copy_addr(&mut a, S_DST, k + KEY_ADDR);
    lookup(&mut a, maps.owned.raw_fd(), k);
    a.jmp_imm(JEQ, R0, 0, not_owned);
    // Address-steered listener: port 0 (the client address alone).
    set_lookup(&mut a, maps, KIND_AFFINITY_LISTENER, Some(S_DPORT), S_DST);
    a.ldx(DW, R1, FP, S_SRC_HASH);
    a.ldx(DW, R2, FP, S_SPORT);
    a.jmp_imm(JEQ, R0, 0, hash);
    a.mov_imm(R2, 0);
    a.ja(hash);
    // A backend's reply straight to the client: port 0 from an
    // address-steered endpoint.
    a.bind(not_owned);
    set_lookup(&mut a, maps, KIND_AFFINITY_ENDPOINT, Some(S_SPORT), S_SRC);
    a.ldx(DW, R1, FP, S_DST_HASH);
    a.ldx(DW, R2, FP, S_DPORT);
    a.jmp_imm(JEQ, R0, 0, hash);
    a.mov_imm(R2, 0);
    // client_port_hash: ((client ^ port) * M >> 16) % workers, 32-bit.
    a.bind(hash);
    a.be(R2, 16);
    a.alu(ALU, XOR, R1, R2);
    a.alu_imm(ALU, MUL, R1, HASH_MULTIPLIER);
    a.alu_imm(ALU, RSH, R1, HASH_SHIFT);
    a.ldx(W, R2, CFG, CFG_WORKERS);
    a.alu(ALU, MOD, R1, R2);
    a.mov(R2, R1);
    a.ja(epilogue);

    a.bind(owner0);
    a.mov_imm(R2, 0);
    // Owner in r2: slot q * W + owner % W.
    a.bind(epilogue);
    a.alu_imm(ALU, MOD, R2, workers);
    a.ldx(W, R1, CTX, MD_RX_QUEUE_INDEX);
    a.alu_imm(ALU64, MUL, R1, workers);
    a.alu(ALU64, ADD, R2, R1);
    let done = a.label();
    match sink {
        Sink::ReturnSlot => {
            a.mov(R0, R2);
            a.exit();
        }
        Sink::Redirect { map_fd } => {
            a.ld_map(R1, map_fd);
            a.mov_imm(R3, bpf::XDP_PASS);
            a.call(FUNC_REDIRECT_MAP);
            a.jmp_imm(JEQ, R0, XDP_REDIRECT, done);
        }
    }
    a.bind(own);
    own_worker(&mut a, workers, sink);
    a.bind(done);
    a.exit();
    a.finish()
}

/// The program of a kernel without `bpf_xdp_load_bytes` (before Linux
/// 5.18), where [`steering_program`] does not load: every frame to its
/// queue's own worker (what [`steering_program`] does without a rule), no
/// map read, no helper but `bpf_redirect_map`. Ports still open and
/// forward; the other workers' flows arrive by handoff.
pub fn queue_own_program(workers: u32, sink: Sink) -> Result<Vec<Insn>, SteerError> {
    let mut a = Asm::default();
    a.mov(CTX, R1);
    own_worker(&mut a, workers.max(1) as i32, sink);
    a.exit();
    a.finish()
}

/// The queue's own worker: slot `q * W + q % W` (`CTX` holds the
/// `xdp_md`), redirected or returned as `sink` says; `exit` follows.
fn own_worker(a: &mut Asm, workers: i32, sink: Sink) {
    a.ldx(W, R2, CTX, MD_RX_QUEUE_INDEX);
    a.mov(R1, R2);
    a.alu_imm(ALU64, MOD, R2, workers);
    a.alu_imm(ALU64, MUL, R1, workers);
    a.alu(ALU64, ADD, R2, R1);
    match sink {
        Sink::ReturnSlot => a.mov(R0, R2),
        Sink::Redirect { map_fd } => {
            a.ld_map(R1, map_fd);
            a.mov_imm(R3, bpf::XDP_PASS);
            a.call(FUNC_REDIRECT_MAP);
        }
    }
}

/// `r0 = bpf_map_lookup_elem(map, fp + key)`.
fn lookup(a: &mut Asm, map_fd: i32, key: i16) {
    a.ld_map(R1, map_fd);
    a.mov(R2, FP);
    a.alu_imm(ALU64, ADD, R2, i32::from(key));
    a.call(FUNC_MAP_LOOKUP);
}

/// Owner 0 unless the first buffer holds `bytes` bytes.
fn need(a: &mut Asm, bytes: i32, owner0: Label) {
    a.mov(R1, DATA);
    a.alu_imm(ALU64, ADD, R1, bytes);
    a.jmp(JGT, R1, DATA_END, owner0);
}

/// Owner 0 unless `r1` is TCP or UDP; stores it as the protocol.
fn tcp_or_udp(a: &mut Asm, owner0: Label) {
    let ok = a.label();
    a.jmp_imm(JEQ, R1, TCP, ok);
    a.jmp_imm(JNE, R1, UDP, owner0);
    a.bind(ok);
    a.stx(DW, FP, S_PROTO, R1);
}

/// The 16 address bytes at `fp + from` to `fp + to`.
fn copy_addr(a: &mut Asm, from: i16, to: i16) {
    for off in [0, 8] {
        a.ldx(DW, R1, FP, from + off);
        a.stx(DW, FP, to + off, R1);
    }
}

/// `r0` = whether the `sets` entry `(kind of this family, proto and the
/// port in `port` when given, the address at `addr`)` of the active
/// generation exists (a value pointer or 0).
fn set_lookup(a: &mut Asm, maps: &super::SteerMaps, kind: i32, port: Option<i16>, addr: i16) {
    let k = S_SET_KEY;
    for off in [0, 8, 16] {
        a.st(DW, FP, k + off, 0);
    }
    a.ldx(DW, R1, FP, S_GEN);
    a.stx(B, FP, k + SET_GEN, R1);
    a.ldx(DW, R1, FP, S_V6);
    a.alu_imm(ALU64, LSH, R1, 7);
    a.alu_imm(ALU64, OR, R1, kind);
    a.stx(B, FP, k + SET_KIND, R1);
    if let Some(port) = port {
        a.ldx(DW, R1, FP, S_PROTO);
        a.stx(B, FP, k + SET_PROTO, R1);
        a.ldx(DW, R1, FP, port);
        a.stx(H, FP, k + SET_PORT, R1);
    }
    copy_addr(a, addr, k + KEY_ADDR);
    lookup(a, maps.sets.raw_fd(), k);
}
