//! A small eBPF assembler for the steering program: instructions by name
//! (Documentation/bpf/standardization/instruction-set.rst for the
//! encoding) and forward or backward jumps to labels, resolved at the end.
//!
//! Invariants: every jump's label is bound before [`Asm::finish`] (an
//! unbound one is an error, never a silent fall-through), and every offset
//! fits eBPF's signed 16 bits ([`SteerError::JumpTooFar`]).

use super::SteerError;
use crate::driver::afxdp::bpf::{self, Insn};

// Instruction classes, sizes, modes and sources (include/uapi/linux/bpf.h).
pub(super) const LDX: u8 = 0x01;
pub(super) const ST: u8 = 0x02;
pub(super) const STX: u8 = 0x03;
pub(super) const ALU: u8 = 0x04;
pub(super) const JMP: u8 = 0x05;
pub(super) const ALU64: u8 = 0x07;
pub(super) const W: u8 = 0x00;
pub(super) const H: u8 = 0x08;
pub(super) const B: u8 = 0x10;
pub(super) const DW: u8 = 0x18;
const MEM: u8 = 0x60;
const K: u8 = 0x00;
const X: u8 = 0x08;
// ALU operations.
pub(super) const ADD: u8 = 0x00;
pub(super) const SUB: u8 = 0x10;
pub(super) const MUL: u8 = 0x20;
pub(super) const DIV: u8 = 0x30;
pub(super) const OR: u8 = 0x40;
pub(super) const AND: u8 = 0x50;
pub(super) const LSH: u8 = 0x60;
pub(super) const RSH: u8 = 0x70;
pub(super) const MOD: u8 = 0x90;
pub(super) const XOR: u8 = 0xa0;
pub(super) const MOV: u8 = 0xb0;
const END: u8 = 0xd0;
const TO_BE: u8 = 0x08;
// Jump operations (unsigned comparisons).
const JA: u8 = 0x00;
pub(super) const JEQ: u8 = 0x10;
pub(super) const JGT: u8 = 0x20;
pub(super) const JGE: u8 = 0x30;
pub(super) const JNE: u8 = 0x50;
pub(super) const JLT: u8 = 0xa0;
const CALL: u8 = 0x80;
const EXIT: u8 = 0x90;

/// Where a jump goes, bound with [`Asm::bind`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Label(usize);

/// The program being assembled.
#[derive(Default)]
pub(super) struct Asm {
    code: Vec<Insn>,
    labels: Vec<Option<usize>>,
    fixups: Vec<(usize, Label)>,
}

impl Asm {
    pub(super) fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    /// The next instruction is `label`'s.
    pub(super) fn bind(&mut self, label: Label) {
        if let Some(l) = self.labels.get_mut(label.0) {
            *l = Some(self.code.len());
        }
    }

    fn op(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) {
        self.code.push(Insn::new(code, dst, src, off, imm));
    }

    /// `dst = imm` (64-bit, sign-extended).
    pub(super) fn mov_imm(&mut self, dst: u8, imm: i32) {
        self.op(ALU64 | MOV | K, dst, 0, 0, imm);
    }

    /// `dst = src` (64-bit).
    pub(super) fn mov(&mut self, dst: u8, src: u8) {
        self.op(ALU64 | MOV | X, dst, src, 0, 0);
    }

    /// `dst op= imm` in `class` (`ALU`: 32-bit, zero-extending; `ALU64`).
    pub(super) fn alu_imm(&mut self, class: u8, op: u8, dst: u8, imm: i32) {
        self.op(class | op | K, dst, 0, 0, imm);
    }

    /// `dst op= src` in `class`.
    pub(super) fn alu(&mut self, class: u8, op: u8, dst: u8, src: u8) {
        self.op(class | op | X, dst, src, 0, 0);
    }

    /// `dst = to_be(dst)` of its low `bits` (16 or 32), zero-extended: the
    /// value of a big-endian field loaded on a little-endian host.
    pub(super) fn be(&mut self, dst: u8, bits: i32) {
        self.op(ALU | END | TO_BE, dst, 0, 0, bits);
    }

    /// `dst = *(size *)(src + off)`.
    pub(super) fn ldx(&mut self, size: u8, dst: u8, src: u8, off: i16) {
        self.op(LDX | MEM | size, dst, src, off, 0);
    }

    /// `*(size *)(dst + off) = src`.
    pub(super) fn stx(&mut self, size: u8, dst: u8, off: i16, src: u8) {
        self.op(STX | MEM | size, dst, src, off, 0);
    }

    /// `*(size *)(dst + off) = imm`.
    pub(super) fn st(&mut self, size: u8, dst: u8, off: i16, imm: i32) {
        self.op(ST | MEM | size, dst, 0, off, imm);
    }

    /// `dst = map` (`ld_imm64` of a map fd).
    pub(super) fn ld_map(&mut self, dst: u8, fd: i32) {
        self.code.extend(bpf::ld_map_fd(dst, fd));
    }

    pub(super) fn call(&mut self, helper: i32) {
        self.op(JMP | CALL, 0, 0, 0, helper);
    }

    pub(super) fn exit(&mut self) {
        self.op(JMP | EXIT, 0, 0, 0, 0);
    }

    /// `goto to`.
    pub(super) fn ja(&mut self, to: Label) {
        self.fixups.push((self.code.len(), to));
        self.op(JMP | JA, 0, 0, 0, 0);
    }

    /// `if dst op imm goto to` (64-bit comparison).
    pub(super) fn jmp_imm(&mut self, op: u8, dst: u8, imm: i32, to: Label) {
        self.fixups.push((self.code.len(), to));
        self.op(JMP | op | K, dst, 0, 0, imm);
    }

    /// `if dst op src goto to` (64-bit comparison).
    pub(super) fn jmp(&mut self, op: u8, dst: u8, src: u8, to: Label) {
        self.fixups.push((self.code.len(), to));
        self.op(JMP | op | X, dst, src, 0, 0);
    }

    /// The instructions with every jump resolved.
    pub(super) fn finish(mut self) -> Result<Vec<Insn>, SteerError> {
        for (pos, label) in std::mem::take(&mut self.fixups) {
            let target = self
                .labels
                .get(label.0)
                .copied()
                .flatten()
                .ok_or(SteerError::UnboundLabel { label: label.0 })?;
            let delta = target as i64 - (pos as i64 + 1);
            let off = i16::try_from(delta).map_err(|_| SteerError::JumpTooFar { insns: delta })?;
            if let Some(i) = self.code.get_mut(pos) {
                i.off = off;
            }
        }
        Ok(self.code)
    }
}
