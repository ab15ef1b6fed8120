//! Keeping the port's own kernel stack off the frames the dataplane takes
//! ([`AfPacketConfig::kernel_stack_rx`](super::AfPacketConfig::kernel_stack_rx) off).
//!
//! Why (measured on veth, bench/RESULTS.md "af_packet over veth: the
//! kernel's second look at every frame"): the kernel hands each frame a
//! port receives to the packet sockets (the taps of
//! `__netif_receive_skb_core`) and then to the port's own IP stack, which
//! has nothing to do with it (a gateway port has no addresses and no
//! forwarding): `ip_rcv` looks up a route, finds none, allocates an
//! uncached `RTN_UNREACHABLE` dst (`ip_route_input_slow`), drops the frame
//! in `ip_error` and frees the dst after an RCU grace period. That work
//! runs in the sender's context (over veth: the client's, the backends'
//! and the worker's own TX kicks).
//!
//! A tcx ingress program (`BPF_TCX_INGRESS`, Linux 6.6+) runs after the
//! taps and before the protocol handlers (`sch_handle_ingress`): the
//! program `r0 = TCX_DROP; exit` ends every frame there, after the
//! packet sockets (the workers', `tcpdump`'s) got it. It is attached by a
//! BPF link whose fd the port holds, so it lives exactly as long as the
//! port: closing it (also when the process dies) detaches the program and
//! leaves nothing on the interface. The host path is unaffected (it is a
//! TAP of its own); frames the kernel sends out of the port still leave.
//!
//! A kernel without tcx refuses the link: the port then opens without it
//! (the kernel keeps its second look, as before).

use crate::driver::afxdp::bpf::ProgLoadAttr;
use crate::driver::afxdp::sys as bpf_sys;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// `BPF_PROG_TYPE_SCHED_CLS`.
const BPF_PROG_TYPE_SCHED_CLS: u32 = 3;
/// `BPF_TCX_INGRESS`.
const BPF_TCX_INGRESS: u32 = 46;
/// `TCX_DROP` (`TC_ACT_SHOT`): the frame ends here. tcx knows only
/// pass, drop and redirect; any other code (`TC_ACT_STOLEN` too) means
/// "next program", then the stack.
const TCX_DROP: i32 = 2;
/// `r0 = TCX_DROP; exit` (`BPF_ALU64 | BPF_MOV | BPF_K`, `BPF_JMP | BPF_EXIT`).
static PROGRAM: [[u8; 8]; 2] = [mov_r0(TCX_DROP), [0x95, 0, 0, 0, 0, 0, 0, 0]];
static LICENSE: &[u8] = b"Apache-2.0\0";
/// `bpf_prog_info.name` of the program (what `bpftool net` shows).
const NAME: [u8; 16] = *b"portico_kstack\0\0";

const fn mov_r0(imm: i32) -> [u8; 8] {
    let i = imm.to_le_bytes();
    [0xb7, 0, 0, 0, i[0], i[1], i[2], i[3]]
}

/// `bpf_attr` for `BPF_LINK_CREATE` with a tcx target (prefix; the
/// relative-to fields zero: appended last).
#[repr(C)]
#[derive(Clone, Copy)]
struct TcxLinkAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
    relative: [u64; 2],
}

/// Attach the stealing program to `ifindex`'s ingress; the link lives as
/// long as the returned fd.
pub(super) fn steal_ingress(ifindex: u32) -> io::Result<OwnedFd> {
    let mut load = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_SCHED_CLS,
        insn_cnt: PROGRAM.len() as u32,
        insns: PROGRAM.as_ptr() as u64,
        license: LICENSE.as_ptr() as u64,
        log_level: 0,
        log_size: 0,
        log_buf: 0,
        kern_version: 0,
        prog_flags: 0,
        prog_name: NAME,
        prog_ifindex: 0,
        expected_attach_type: BPF_TCX_INGRESS,
    };
    let prog = bpf_sys::bpf_fd(bpf_sys::BPF_PROG_LOAD, &mut load)?;
    let mut link = TcxLinkAttr {
        prog_fd: prog.as_raw_fd() as u32,
        target_ifindex: ifindex,
        attach_type: BPF_TCX_INGRESS,
        flags: 0,
        relative: [0; 2],
    };
    // The link holds the program; `prog` may close.
    bpf_sys::bpf_fd(bpf_sys::BPF_LINK_CREATE, &mut link)
}
