//! Flow-affine steering in the XDP program: the redirect program of an
//! interface computes the owner of each frame ([`SteeringRule::owner`] /
//! [`SteeringRule::owner6`]) and redirects it to the XSK map slot of that
//! worker on the frame's queue.
//!
//! The owner is computed by af_packet's fanout program
//! ([`fanout_program`], the classic-BPF program tested against the rule),
//! translated here instruction by instruction into eBPF, so both drivers
//! compute the same owner by construction. The translation (the subset
//! `fanout_program` emits; anything else is refused by name,
//! [`SteerError::Unsupported`]):
//!
//! * `A` is `w2`, `X` is `w3`, both kept as zero-extended 32-bit values
//!   (every ALU operation is the 32-bit `BPF_ALU` class, every comparison
//!   the 32-bit `BPF_JMP32` class, so classic BPF's unsigned 32-bit
//!   semantics hold); the scratch words `M[0..16]` are 64 stack bytes,
//!   zeroed first.
//! * Packet loads are big-endian (`BPF_END` to big-endian after the load),
//!   bounds-checked against `data_end` first; a load past the end ends the
//!   program with owner 0, as the kernel's classic BPF does. Offsets are
//!   relative to the network header (`SKF_NET_OFF`: the Ethernet header
//!   is 14 bytes; a VLAN-tagged frame has EtherType 0x8100 and goes to
//!   worker 0 like any other EtherType); `SKF_AD_PROTOCOL` is the
//!   EtherType. An indexed load (`X + k`: the IPv4 ports after the
//!   options) goes through `bpf_xdp_load_bytes` (Linux 5.18+) into a stack
//!   buffer instead of a variable offset on the packet pointer, which the
//!   verifier refuses without `CAP_PERFMON` (Spectre v1 sanitation); the
//!   gateway keeps only `CAP_NET_ADMIN` and `CAP_BPF` after start-up.
//! * `ret` jumps to the epilogue with the owner in `A`.
//!
//! Epilogue (`q` = `xdp_md.rx_queue_index`, `W` = the map's workers):
//!
//! ```text
//!   w = A % W
//!   if bpf_redirect_map(xsks, q * W + w, XDP_PASS) == XDP_REDIRECT -> done
//!   return bpf_redirect_map(xsks, q * W + q % W, XDP_PASS)
//! ```
//!
//! Slot `q * W + w` holds worker `w`'s socket on queue `q` ([`XskMap::slot`];
//! `queues.rs` opens them), unless the kernel refused it; slot
//! `q * W + q % W` is the socket of the queue's own worker, which every
//! layout has. Without a rule (before
//! worker 0 installs the first) the program is the epilogue's last line
//! alone; with one worker it is exactly the old redirect program's choice
//! (slot `q`).
//!
//! Invariants: the program's owner equals [`fanout_program`]'s return
//! value modulo `W` for every frame (tested by running both through
//! `BPF_PROG_TEST_RUN` and the rule, `tests.rs`); its size is at most
//! [`MAX_INSNS_PER_CBPF`] times the classic program's plus a constant, far
//! below the kernel's limit of one million.

#[cfg(test)]
mod tests;

use super::bpf::{self, Insn, XskMap};
use crate::driver::afpacket::steering::{Insn as CInsn, fanout_program};
use crate::steering::SteeringRule;

/// eBPF instructions one classic instruction becomes at most (an indexed
/// load: bound check of `X`, save `X`, helper arguments, call, restore,
/// result check, load, byte swap).
pub const MAX_INSNS_PER_CBPF: usize = 13;

/// Why a rule could not be turned into an XDP program.
#[derive(Debug, thiserror::Error)]
pub enum SteerError {
    #[error(
        "steering program: classic instruction {at} (code {code:#06x}, k {k:#x}) has no \
         translation to eBPF"
    )]
    Unsupported { at: usize, code: u16, k: u32 },
    #[error("steering program: a jump of {insns} instructions does not fit eBPF's 16-bit offset")]
    JumpTooFar { insns: usize },
}

/// Where the program's choice goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sink {
    /// `bpf_redirect_map` into the XSK map with this fd (the real program).
    Redirect { map_fd: i32 },
    /// Return the first-choice slot `q * W + w` (tests: `BPF_PROG_TEST_RUN`
    /// reports it as the return value).
    ReturnSlot,
}

// Registers.
const CTX: u8 = 6;
const DATA: u8 = 7;
const DATA_END: u8 = 8;
const QUEUE: u8 = 9;
const A: u8 = 2;
const X: u8 = 3;
const T0: u8 = 4;
const T1: u8 = 5;
const FP: u8 = 10;

// eBPF opcode parts (include/uapi/linux/bpf.h, bpf_common.h).
const LDX: u8 = 0x01;
const ST: u8 = 0x02;
const STX: u8 = 0x03;
const ALU: u8 = 0x04;
const JMP: u8 = 0x05;
const JMP32: u8 = 0x06;
const ALU64: u8 = 0x07;
const SZ_W: u8 = 0x00;
const SZ_H: u8 = 0x08;
const SZ_B: u8 = 0x10;
const SZ_DW: u8 = 0x18;
const MEM: u8 = 0x60;
const SRC_K: u8 = 0x00;
const SRC_X: u8 = 0x08;
const MOV: u8 = 0xb0;
const ADD: u8 = 0x00;
const MUL: u8 = 0x20;
const MOD: u8 = 0x90;
const END: u8 = 0xd0;
const TO_BE: u8 = 0x08;
const JA: u8 = 0x00;
const JGT: u8 = 0x20;
const JNE: u8 = 0x50;
const CALL: u8 = 0x80;
const EXIT: u8 = 0x90;

/// `bpf_redirect_map`.
const FUNC_REDIRECT_MAP: i32 = 51;
/// `bpf_xdp_load_bytes` (Linux 5.18+).
const FUNC_XDP_LOAD_BYTES: i32 = 189;
/// Stack slot where `X` waits out a helper call.
const SAVED_X: i16 = -SCRATCH_BYTES - 8;
/// Stack buffer of `bpf_xdp_load_bytes`.
const LOAD_BUFFER: i16 = -SCRATCH_BYTES - 16;
/// `XDP_REDIRECT`.
const XDP_REDIRECT: i32 = 4;
/// `offsetof(struct xdp_md, ...)`.
const MD_DATA: i16 = 0;
const MD_DATA_END: i16 = 4;
const MD_RX_QUEUE_INDEX: i16 = 16;
/// Stack bytes of the scratch words `M[0..16]`.
const SCRATCH_BYTES: i16 = 64;
/// Ethernet header bytes before the network header.
const ETH_HLEN: i64 = 14;
/// Largest `X` an indexed load accepts (beyond: no frame is that long).
const MAX_INDEX: i32 = 0x3fff;

// Classic BPF (linux/filter.h): classes, sizes, modes, sources.
const C_LD: u16 = 0x00;
const C_LDX: u16 = 0x01;
const C_ST: u16 = 0x02;
const C_STX: u16 = 0x03;
const C_ALU: u16 = 0x04;
const C_JMP: u16 = 0x05;
const C_RET: u16 = 0x06;
const C_MISC: u16 = 0x07;
const C_ABS: u16 = 0x20;
const C_IND: u16 = 0x40;
const C_MEM: u16 = 0x60;
const C_IMM: u16 = 0x00;
const C_RET_A: u16 = 0x10;
const C_RET_X: u16 = 0x08;
const C_TXA: u16 = 0x80;
const SKF_AD_OFF: u32 = libc::SKF_AD_OFF as u32;
const SKF_NET_OFF: u32 = libc::SKF_NET_OFF as u32;
const AD_PROTOCOL: u32 = SKF_AD_OFF + libc::SKF_AD_PROTOCOL as u32;

/// Where a jump lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// The first eBPF instruction of classic instruction `i`.
    Classic(usize),
    /// Owner 0 (a load past the end).
    Fail,
    /// The epilogue, owner in `A`.
    Epilogue,
    /// The fallback slot `q * W + q % W`.
    Fallback,
    /// `exit`.
    Exit,
}

struct Emit {
    code: Vec<Insn>,
    fixups: Vec<(usize, Target)>,
}

impl Emit {
    fn op(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) {
        self.code.push(Insn::new(code, dst, src, off, imm));
    }

    fn jump(&mut self, code: u8, dst: u8, src: u8, imm: i32, to: Target) {
        self.fixups.push((self.code.len(), to));
        self.op(code, dst, src, 0, imm);
    }

    fn ld_map(&mut self, dst: u8, fd: i32) {
        self.code.extend(bpf::ld_map_fd(dst, fd));
    }

    /// `A = packet[off..off + size]` (big-endian) from `base` (`DATA`, or a
    /// pointer `DATA + X`), or owner 0 when the packet is shorter.
    fn load(&mut self, base: u8, off: i64, size: u8) {
        let bytes = match size {
            SZ_W => 4,
            SZ_H => 2,
            _ => 1,
        };
        self.op(ALU64 | MOV | SRC_X, T0, base, 0, 0);
        self.op(ALU64 | ADD | SRC_K, T0, 0, 0, (off + bytes) as i32);
        self.jump(JMP | JGT | SRC_X, T0, DATA_END, 0, Target::Fail);
        self.op(LDX | MEM | size, A, base, off as i16, 0);
        if bytes > 1 {
            self.op(ALU | END | TO_BE, A, 0, 0, (bytes * 8) as i32);
        }
    }

    /// `A = packet[X + off..][..size]` (big-endian) through
    /// `bpf_xdp_load_bytes` into a stack buffer, or owner 0 when the packet
    /// is shorter: a variable offset on a packet pointer would need
    /// `CAP_PERFMON` (the verifier's Spectre v1 sanitation refuses it
    /// otherwise), which the running gateway does not keep. `X` is saved
    /// around the call (it clobbers `r1`..`r5`).
    fn load_indexed(&mut self, off: i64, size: u8) {
        let bytes = match size {
            SZ_W => 4,
            SZ_H => 2,
            _ => 1,
        };
        self.jump(JMP | JGT | SRC_K, X, 0, MAX_INDEX, Target::Fail);
        self.op(STX | MEM | SZ_W, FP, X, SAVED_X, 0);
        self.op(ALU64 | MOV | SRC_X, 2, X, 0, 0);
        self.op(ALU64 | ADD | SRC_K, 2, 0, 0, off as i32);
        self.op(ALU64 | MOV | SRC_X, 1, CTX, 0, 0);
        self.op(ALU64 | MOV | SRC_X, 3, FP, 0, 0);
        self.op(ALU64 | ADD | SRC_K, 3, 0, 0, i32::from(LOAD_BUFFER));
        self.op(ALU64 | MOV | SRC_K, 4, 0, 0, bytes);
        self.op(JMP | CALL, 0, 0, 0, FUNC_XDP_LOAD_BYTES);
        self.op(LDX | MEM | SZ_W, X, FP, SAVED_X, 0);
        self.jump(JMP | JNE | SRC_K, 0, 0, 0, Target::Fail);
        self.op(LDX | MEM | size, A, FP, LOAD_BUFFER, 0);
        if bytes > 1 {
            self.op(ALU | END | TO_BE, A, 0, 0, bytes * 8);
        }
    }

    fn resolve(
        mut self,
        at: &[usize],
        labels: &[(Target, usize)],
    ) -> Result<Vec<Insn>, SteerError> {
        for (pos, to) in std::mem::take(&mut self.fixups) {
            let target = match to {
                Target::Classic(i) => at.get(i).copied(),
                other => labels.iter().find(|(l, _)| *l == other).map(|&(_, p)| p),
            }
            .unwrap_or(pos + 1);
            let insns = target.saturating_sub(pos + 1);
            let off = i16::try_from(insns).map_err(|_| SteerError::JumpTooFar { insns })?;
            if let Some(i) = self.code.get_mut(pos) {
                i.off = off;
            }
        }
        Ok(self.code)
    }
}

/// The XDP steering program for `workers` workers per queue: with `rule`,
/// every frame goes to the slot of its owner on its queue (falling back to
/// the queue's own worker); without, straight to the queue's own worker
/// (see the module docs).
pub fn steering_program(
    rule: Option<&SteeringRule>,
    workers: u32,
    sink: Sink,
) -> Result<Vec<Insn>, SteerError> {
    let classic = rule.map(fanout_program).unwrap_or_default();
    let workers = workers.max(1) as i32;
    let mut e = Emit {
        code: Vec::with_capacity(32 + MAX_INSNS_PER_CBPF * classic.len()),
        fixups: Vec::new(),
    };
    e.op(ALU64 | MOV | SRC_X, CTX, 1, 0, 0);
    e.op(LDX | MEM | SZ_W, QUEUE, CTX, MD_RX_QUEUE_INDEX, 0);
    let mut at = Vec::with_capacity(classic.len());
    let mut labels = Vec::new();
    if !classic.is_empty() {
        e.op(LDX | MEM | SZ_W, DATA, CTX, MD_DATA, 0);
        e.op(LDX | MEM | SZ_W, DATA_END, CTX, MD_DATA_END, 0);
        for i in 0..SCRATCH_BYTES / 8 {
            e.op(ST | MEM | SZ_DW, FP, 0, -SCRATCH_BYTES + 8 * i, 0);
        }
        e.op(ALU64 | MOV | SRC_K, A, 0, 0, 0);
        e.op(ALU64 | MOV | SRC_K, X, 0, 0, 0);
        let live = reachable(&classic);
        for (i, c) in classic.iter().enumerate() {
            at.push(e.code.len());
            if live.get(i).copied().unwrap_or(false) {
                translate(&mut e, i, c)?;
            }
        }
        labels.push((Target::Fail, e.code.len()));
        e.op(ALU64 | MOV | SRC_K, A, 0, 0, 0);
        labels.push((Target::Epilogue, e.code.len()));
        e.op(ALU | MOD | SRC_K, A, 0, 0, workers);
        e.op(ALU64 | MOV | SRC_X, T1, QUEUE, 0, 0);
        e.op(ALU64 | MUL | SRC_K, T1, 0, 0, workers);
        e.op(ALU64 | ADD | SRC_X, A, T1, 0, 0);
        match sink {
            Sink::ReturnSlot => {
                // The first choice is the answer: no fallback part.
                e.op(ALU64 | MOV | SRC_X, 0, A, 0, 0);
                e.op(JMP | EXIT, 0, 0, 0, 0);
                return e.resolve(&at, &labels);
            }
            Sink::Redirect { map_fd } => {
                e.ld_map(1, map_fd);
                e.op(ALU64 | MOV | SRC_K, 3, 0, 0, bpf::XDP_PASS);
                e.op(JMP | CALL, 0, 0, 0, FUNC_REDIRECT_MAP);
                e.jump(JMP | JNE | SRC_K, 0, 0, XDP_REDIRECT, Target::Fallback);
                e.jump(JMP | JA, 0, 0, 0, Target::Exit);
            }
        }
    }
    labels.push((Target::Fallback, e.code.len()));
    // q % W + q * W.
    e.op(ALU64 | MOV | SRC_X, A, QUEUE, 0, 0);
    e.op(ALU64 | MOD | SRC_K, A, 0, 0, workers);
    e.op(ALU64 | MOV | SRC_X, T1, QUEUE, 0, 0);
    e.op(ALU64 | MUL | SRC_K, T1, 0, 0, workers);
    e.op(ALU64 | ADD | SRC_X, A, T1, 0, 0);
    match sink {
        Sink::ReturnSlot => e.op(ALU64 | MOV | SRC_X, 0, A, 0, 0),
        Sink::Redirect { map_fd } => {
            e.ld_map(1, map_fd);
            e.op(ALU64 | MOV | SRC_K, 3, 0, 0, bpf::XDP_PASS);
            e.op(JMP | CALL, 0, 0, 0, FUNC_REDIRECT_MAP);
        }
    }
    labels.push((Target::Exit, e.code.len()));
    e.op(JMP | EXIT, 0, 0, 0, 0);
    e.resolve(&at, &labels)
}

/// The program for `map` (its fd and workers), loaded.
pub(super) fn redirect_program(
    map: &XskMap,
    rule: Option<&SteeringRule>,
) -> Result<Vec<Insn>, SteerError> {
    steering_program(
        rule,
        map.workers(),
        Sink::Redirect {
            map_fd: map.raw_fd(),
        },
    )
}

/// Which classic instructions some path reaches: the eBPF verifier
/// refuses unreachable code, which classic BPF allows (`fanout_program`
/// leaves some behind when a list is empty). Classic jumps go forward
/// only, so one pass in order marks every successor of a reached one.
fn reachable(classic: &[CInsn]) -> Vec<bool> {
    let mut live = vec![false; classic.len()];
    if let Some(first) = live.first_mut() {
        *first = true;
    }
    for (i, c) in classic.iter().enumerate() {
        if !live.get(i).copied().unwrap_or(false) {
            continue;
        }
        let next = i + 1;
        let successors: [Option<usize>; 2] = match c.code & 0x07 {
            C_RET => [None, None],
            C_JMP if c.code & 0xf0 == 0 => [Some(next + c.k as usize), None],
            C_JMP => [
                Some(next + usize::from(c.jt)),
                Some(next + usize::from(c.jf)),
            ],
            _ => [Some(next), None],
        };
        for s in successors.into_iter().flatten() {
            if let Some(l) = live.get_mut(s) {
                *l = true;
            }
        }
    }
    live
}

/// One classic instruction `c` (index `i`) in eBPF.
fn translate(e: &mut Emit, i: usize, c: &CInsn) -> Result<(), SteerError> {
    let unsupported = || SteerError::Unsupported {
        at: i,
        code: c.code,
        k: c.k,
    };
    let size = match c.code & 0x18 {
        0x00 => SZ_W,
        0x08 => SZ_H,
        0x10 => SZ_B,
        _ => return Err(unsupported()),
    };
    let scratch = |k: u32| -> Result<i16, SteerError> {
        if k < 16 {
            Ok(-SCRATCH_BYTES + 4 * k as i16)
        } else {
            Err(unsupported())
        }
    };
    let k = c.k as i32;
    match c.code & 0x07 {
        C_LD => match c.code & 0xe0 {
            C_ABS if c.k == AD_PROTOCOL && size == SZ_H => e.load(DATA, 12, SZ_H),
            C_ABS if (SKF_NET_OFF..SKF_AD_OFF).contains(&c.k) => {
                e.load(DATA, ETH_HLEN + i64::from(c.k - SKF_NET_OFF), size)
            }
            C_IND if (SKF_NET_OFF..SKF_AD_OFF).contains(&c.k) => {
                e.load_indexed(ETH_HLEN + i64::from(c.k - SKF_NET_OFF), size)
            }
            C_MEM => e.op(LDX | MEM | SZ_W, A, FP, scratch(c.k)?, 0),
            C_IMM => e.op(ALU | MOV | SRC_K, A, 0, 0, k),
            _ => return Err(unsupported()),
        },
        C_LDX => match c.code & 0xe0 {
            C_MEM => e.op(LDX | MEM | SZ_W, X, FP, scratch(c.k)?, 0),
            C_IMM => e.op(ALU | MOV | SRC_K, X, 0, 0, k),
            _ => return Err(unsupported()),
        },
        C_ST => e.op(STX | MEM | SZ_W, FP, A, scratch(c.k)?, 0),
        C_STX => e.op(STX | MEM | SZ_W, FP, X, scratch(c.k)?, 0),
        C_ALU => {
            // Same operation codes in both encodings; NEG has no source.
            let op = (c.code & 0xf0) as u8;
            if op == 0x80 {
                e.op(ALU | op, A, 0, 0, 0);
            } else if c.code & 0x08 != 0 {
                e.op(ALU | op | SRC_X, A, X, 0, 0);
            } else {
                e.op(ALU | op | SRC_K, A, 0, 0, k);
            }
        }
        C_JMP => {
            let op = (c.code & 0xf0) as u8;
            let next = i + 1;
            if op == JA {
                if c.k > 0 {
                    e.jump(JMP | JA, 0, 0, 0, Target::Classic(next + c.k as usize));
                }
                return Ok(());
            }
            if !matches!(op, 0x10..=0x40) {
                return Err(unsupported());
            }
            let (src, reg, imm) = if c.code & 0x08 != 0 {
                (SRC_X, X, 0)
            } else {
                (SRC_K, 0, k)
            };
            let (jt, jf) = (next + usize::from(c.jt), next + usize::from(c.jf));
            if jt == jf {
                if jt != next {
                    e.jump(JMP | JA, 0, 0, 0, Target::Classic(jt));
                }
                return Ok(());
            }
            if jf == next {
                e.jump(JMP32 | op | src, A, reg, imm, Target::Classic(jt));
            } else {
                // True: to jt, or over the `ja` to jf when jt is next.
                if jt == next {
                    e.op(JMP32 | op | src, A, reg, 1, imm);
                } else {
                    e.jump(JMP32 | op | src, A, reg, imm, Target::Classic(jt));
                }
                e.jump(JMP | JA, 0, 0, 0, Target::Classic(jf));
            }
        }
        C_RET => {
            match c.code & 0x18 {
                C_RET_A => {}
                C_RET_X => e.op(ALU | MOV | SRC_X, A, X, 0, 0),
                _ => e.op(ALU | MOV | SRC_K, A, 0, 0, k),
            }
            e.jump(JMP | JA, 0, 0, 0, Target::Epilogue);
        }
        C_MISC => {
            if c.code & 0xf8 == C_TXA {
                e.op(ALU | MOV | SRC_X, A, X, 0, 0);
            } else {
                e.op(ALU | MOV | SRC_X, X, A, 0, 0);
            }
        }
        _ => return Err(unsupported()),
    }
    Ok(())
}
