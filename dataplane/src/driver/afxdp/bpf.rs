//! The XDP program and its XSK map, built as raw eBPF instructions and
//! loaded with `bpf(2)`: no clang, LLVM or libbpf at build or run time.
//!
//! The program (Documentation/bpf/standardization/instruction-set.rst for
//! the encoding):
//!
//! ```text
//! r2 = *(u32 *)(r1 + 16)        ; xdp_md.rx_queue_index
//! r1 = map_fd(xsks_map)         ; 64-bit immediate, BPF_PSEUDO_MAP_FD
//! r3 = XDP_PASS                 ; flags: the action when the lookup fails
//! call bpf_redirect_map         ; helper 51
//! exit                          ; r0 = XDP_REDIRECT, or XDP_PASS
//! ```
//!
//! Every frame received on a queue that has a Portico socket in the map
//! goes to that socket; a queue without one (a worker not started yet, or
//! gone) passes its frames to the kernel (the lower bits of the flags of
//! `bpf_redirect_map` are the fallback action, Linux 5.6+).
//!
//! Why everything and not only IPv4/ARP: a Portico port belongs to Portico
//! (the kernel has no addresses on it, see the README), the af_packet
//! driver also sees every frame, and the pipeline counts what it does not
//! handle by reason (`ipv6_unsupported`, `unknown_ethertype`, ...). A filter
//! in the program would hide those frames from the counters and from IPv6
//! support later, for no gain on a dedicated port.

use super::sys;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

/// `BPF_PROG_TYPE_XDP`.
const BPF_PROG_TYPE_XDP: u32 = 6;
/// `BPF_MAP_TYPE_XSKMAP`.
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
/// `BPF_XDP` attach type (`expected_attach_type` and `BPF_LINK_CREATE`).
pub(super) const BPF_XDP: u32 = 37;
/// `BPF_FUNC_redirect_map`.
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
/// `BPF_PSEUDO_MAP_FD`: the immediate of a `ld_imm64` is a map fd.
const BPF_PSEUDO_MAP_FD: u8 = 1;
/// `XDP_PASS`.
pub(super) const XDP_PASS: i32 = 2;
/// `offsetof(struct xdp_md, rx_queue_index)`.
const XDP_MD_RX_QUEUE_INDEX: i16 = 16;

/// `BPF_F_XDP_HAS_FRAGS`: the program handles multi-buffer packets (it
/// reads no packet bytes, so it is frags-safe as is).
const BPF_F_XDP_HAS_FRAGS: u32 = 1 << 5;

/// Name of the program (`bpf_prog_info.name`), how a later start recognises
/// a program a crashed Portico left attached.
pub const PROGRAM_NAME: &str = "portico_xsk";
const MAP_NAME: &str = "portico_xsks";
/// License string of the program (it calls no GPL-only helper).
const LICENSE: &[u8] = b"Apache-2.0\0";
/// Bytes of verifier log surfaced when loading fails.
const VERIFIER_LOG_BYTES: usize = 64 * 1024;

// Opcode parts.
const BPF_LDX: u8 = 0x01;
const BPF_LD: u8 = 0x00;
const BPF_ALU64: u8 = 0x07;
const BPF_JMP: u8 = 0x05;
const BPF_W: u8 = 0x00;
const BPF_DW: u8 = 0x18;
const BPF_MEM: u8 = 0x60;
const BPF_IMM: u8 = 0x00;
const BPF_MOV: u8 = 0xb0;
const BPF_K: u8 = 0x00;
const BPF_CALL: u8 = 0x80;
const BPF_EXIT: u8 = 0x90;

/// One eBPF instruction (`struct bpf_insn`), 8 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    /// `dst_reg` in the low nibble, `src_reg` in the high nibble.
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

impl Insn {
    const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            regs: (src << 4) | (dst & 0x0f),
            off,
            imm,
        }
    }

    /// The 8 bytes as the kernel reads them (little-endian host).
    pub fn to_bytes(self) -> [u8; 8] {
        let off = self.off.to_le_bytes();
        let imm = self.imm.to_le_bytes();
        [
            self.code, self.regs, off[0], off[1], imm[0], imm[1], imm[2], imm[3],
        ]
    }
}

/// `dst = *(u32 *)(src + off)`.
const fn ldx_w(dst: u8, src: u8, off: i16) -> Insn {
    Insn::new(BPF_LDX | BPF_MEM | BPF_W, dst, src, off, 0)
}

/// `dst = imm` (64-bit move of a sign-extended 32-bit immediate).
const fn mov64_imm(dst: u8, imm: i32) -> Insn {
    Insn::new(BPF_ALU64 | BPF_MOV | BPF_K, dst, 0, 0, imm)
}

/// `dst = map` (the two-slot `ld_imm64` with `BPF_PSEUDO_MAP_FD`).
const fn ld_map_fd(dst: u8, fd: i32) -> [Insn; 2] {
    [
        Insn::new(BPF_LD | BPF_DW | BPF_IMM, dst, BPF_PSEUDO_MAP_FD, 0, fd),
        Insn::new(0, 0, 0, 0, 0),
    ]
}

const fn call(helper: i32) -> Insn {
    Insn::new(BPF_JMP | BPF_CALL, 0, 0, 0, helper)
}

const fn exit() -> Insn {
    Insn::new(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)
}

/// The redirect program for the XSK map `map_fd`.
pub fn redirect_program(map_fd: i32) -> [Insn; 6] {
    let [ld0, ld1] = ld_map_fd(1, map_fd);
    [
        ldx_w(2, 1, XDP_MD_RX_QUEUE_INDEX),
        ld0,
        ld1,
        mov64_imm(3, XDP_PASS),
        call(BPF_FUNC_REDIRECT_MAP),
        exit(),
    ]
}

/// A name field of `bpf_attr` (16 bytes, NUL-terminated).
fn obj_name(name: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (d, s) in out.iter_mut().zip(name.bytes().take(15)) {
        *d = s;
    }
    out
}

/// `bpf_attr` for `BPF_MAP_CREATE` (the prefix we use; rest zero).
#[repr(C)]
#[derive(Clone, Copy)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
    map_ifindex: u32,
    btf_fd: u32,
    btf_key_type_id: u32,
    btf_value_type_id: u32,
    btf_vmlinux_value_type_id: u32,
    map_extra: u64,
}

/// `bpf_attr` for `BPF_PROG_LOAD` (prefix; rest zero).
#[repr(C)]
#[derive(Clone, Copy)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// `bpf_attr` for `BPF_MAP_UPDATE_ELEM` / `BPF_MAP_DELETE_ELEM`.
#[repr(C)]
#[derive(Clone, Copy)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// `bpf_attr` for `BPF_LINK_CREATE` (XDP target).
#[repr(C)]
#[derive(Clone, Copy)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
    _rest: [u64; 4],
}

/// `bpf_attr` for `BPF_PROG_GET_FD_BY_ID`.
#[repr(C)]
#[derive(Clone, Copy)]
struct GetFdByIdAttr {
    id: u32,
    next_id: u32,
    open_flags: u32,
}

/// `bpf_attr` for `BPF_OBJ_GET_INFO_BY_FD`.
#[repr(C)]
#[derive(Clone, Copy)]
struct InfoByFdAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// The prefix of `struct bpf_prog_info` up to the name.
#[repr(C)]
#[derive(Clone, Copy)]
struct ProgInfo {
    prog_type: u32,
    id: u32,
    tag: [u8; 8],
    jited_prog_len: u32,
    xlated_prog_len: u32,
    jited_prog_insns: u64,
    xlated_prog_insns: u64,
    load_time: u64,
    created_by_uid: u32,
    nr_map_ids: u32,
    map_ids: u64,
    name: [u8; 16],
}

const _: () = assert!(std::mem::offset_of!(ProgInfo, name) == 64);
const _: () = assert!(std::mem::offset_of!(ProgLoadAttr, prog_name) == 48);
const _: () = assert!(std::mem::offset_of!(ProgLoadAttr, expected_attach_type) == 68);
const _: () = assert!(std::mem::offset_of!(MapCreateAttr, map_name) == 28);

/// An XSK map: queue index -> AF_XDP socket.
#[derive(Debug)]
pub struct XskMap {
    fd: OwnedFd,
    entries: u32,
}

impl XskMap {
    /// A map with one slot per RX queue.
    pub fn create(entries: u32) -> io::Result<XskMap> {
        let mut attr = MapCreateAttr {
            map_type: BPF_MAP_TYPE_XSKMAP,
            key_size: 4,
            value_size: 4,
            max_entries: entries.max(1),
            map_flags: 0,
            inner_map_fd: 0,
            numa_node: 0,
            map_name: obj_name(MAP_NAME),
            map_ifindex: 0,
            btf_fd: 0,
            btf_key_type_id: 0,
            btf_value_type_id: 0,
            btf_vmlinux_value_type_id: 0,
            map_extra: 0,
        };
        let fd = sys::bpf_fd(sys::BPF_MAP_CREATE, &mut attr)?;
        Ok(XskMap {
            fd,
            entries: entries.max(1),
        })
    }

    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// Point slot `queue` at the socket `xsk`.
    pub fn insert(&self, queue: u32, xsk: BorrowedFd<'_>) -> io::Result<()> {
        let key = queue;
        let value = xsk.as_raw_fd() as u32;
        let mut attr = MapElemAttr {
            map_fd: self.fd.as_raw_fd() as u32,
            _pad: 0,
            key: &key as *const u32 as u64,
            value: &value as *const u32 as u64,
            flags: 0,
        };
        sys::bpf(sys::BPF_MAP_UPDATE_ELEM, &mut attr).map(drop)
    }

    /// Empty slot `queue` (frames on the queue pass to the kernel).
    pub fn remove(&self, queue: u32) -> io::Result<()> {
        let key = queue;
        let mut attr = MapElemAttr {
            map_fd: self.fd.as_raw_fd() as u32,
            _pad: 0,
            key: &key as *const u32 as u64,
            value: 0,
            flags: 0,
        };
        sys::bpf(sys::BPF_MAP_DELETE_ELEM, &mut attr).map(drop)
    }

    pub(super) fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }
}

/// Why loading the program failed, with what the verifier said.
#[derive(Debug)]
pub struct LoadError {
    pub source: io::Error,
    pub verifier_log: String,
}

/// Load the redirect program for `map`, named [`PROGRAM_NAME`].
pub fn load_program(map: &XskMap) -> Result<OwnedFd, LoadError> {
    load_program_named(map, PROGRAM_NAME)
}

/// Load the redirect program for `map` under `name` (tests load one under
/// another name to play someone else's program). It is loaded with
/// `BPF_F_XDP_HAS_FRAGS` (Linux 5.18+), so multi-buffer packets reach it
/// (veth refuses a program without the flag on a jumbo MTU); a kernel that
/// refuses the flag gets the program without it.
pub fn load_program_named(map: &XskMap, name: &str) -> Result<OwnedFd, LoadError> {
    match load_with_flags(map, name, BPF_F_XDP_HAS_FRAGS) {
        Err(e) if e.source.raw_os_error() == Some(libc::EINVAL) => load_with_flags(map, name, 0),
        r => r,
    }
}

fn load_with_flags(map: &XskMap, name: &str, prog_flags: u32) -> Result<OwnedFd, LoadError> {
    let insns = redirect_program(map.raw_fd());
    let mut log = vec![0u8; VERIFIER_LOG_BYTES];
    let mut attr = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_XDP,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: LICENSE.as_ptr() as u64,
        log_level: 1,
        log_size: log.len() as u32,
        log_buf: log.as_mut_ptr() as u64,
        kern_version: 0,
        prog_flags,
        prog_name: obj_name(name),
        prog_ifindex: 0,
        expected_attach_type: BPF_XDP,
    };
    sys::bpf_fd(sys::BPF_PROG_LOAD, &mut attr).map_err(|source| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        LoadError {
            source,
            verifier_log: String::from_utf8_lossy(&log[..end]).trim().to_owned(),
        }
    })
}

/// Attach `prog` to `ifindex` with a BPF link (`flags`: the XDP mode).
/// The attachment lives as long as the returned fd: closing it (also when
/// the process dies) detaches the program.
pub fn link_create(prog: BorrowedFd<'_>, ifindex: u32, flags: u32) -> io::Result<OwnedFd> {
    let mut attr = LinkCreateAttr {
        prog_fd: prog.as_raw_fd() as u32,
        target_ifindex: ifindex,
        attach_type: BPF_XDP,
        flags,
        _rest: [0; 4],
    };
    sys::bpf_fd(sys::BPF_LINK_CREATE, &mut attr)
}

/// The name of the loaded program with id `id`.
pub fn program_name(id: u32) -> io::Result<String> {
    let mut attr = GetFdByIdAttr {
        id,
        next_id: 0,
        open_flags: 0,
    };
    let fd = sys::bpf_fd(sys::BPF_PROG_GET_FD_BY_ID, &mut attr)?;
    program_name_of(fd.as_fd())
}

/// The name of the loaded program `fd`.
pub fn program_name_of(fd: BorrowedFd<'_>) -> io::Result<String> {
    let mut info = ProgInfo {
        prog_type: 0,
        id: 0,
        tag: [0; 8],
        jited_prog_len: 0,
        xlated_prog_len: 0,
        jited_prog_insns: 0,
        xlated_prog_insns: 0,
        load_time: 0,
        created_by_uid: 0,
        nr_map_ids: 0,
        map_ids: 0,
        name: [0; 16],
    };
    let mut attr = InfoByFdAttr {
        bpf_fd: fd.as_raw_fd() as u32,
        info_len: size_of::<ProgInfo>() as u32,
        info: &mut info as *mut ProgInfo as u64,
    };
    sys::bpf(sys::BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    let end = info.name.iter().position(|&b| b == 0).unwrap_or(16);
    Ok(String::from_utf8_lossy(&info.name[..end]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_encodes_to_the_expected_bytes() {
        let bytes: Vec<[u8; 8]> = redirect_program(7).iter().map(|i| i.to_bytes()).collect();
        assert_eq!(
            bytes,
            vec![
                // ldxw r2, [r1+16]: LDX|MEM|W = 0x61, dst 2, src 1.
                [0x61, 0x12, 16, 0, 0, 0, 0, 0],
                // lddw r1, map fd 7: 0x18, dst 1, src BPF_PSEUDO_MAP_FD.
                [0x18, 0x11, 0, 0, 7, 0, 0, 0],
                [0, 0, 0, 0, 0, 0, 0, 0],
                // mov64 r3, 2 (XDP_PASS): ALU64|MOV|K = 0xb7.
                [0xb7, 0x03, 0, 0, 2, 0, 0, 0],
                // call 51 (bpf_redirect_map): JMP|CALL = 0x85.
                [0x85, 0x00, 0, 0, 51, 0, 0, 0],
                // exit: JMP|EXIT = 0x95.
                [0x95, 0, 0, 0, 0, 0, 0, 0],
            ]
        );
    }

    #[test]
    fn negative_offsets_and_immediates_are_little_endian_twos_complement() {
        let i = Insn::new(BPF_LDX | BPF_MEM | BPF_W, 10, 3, -8, -2);
        assert_eq!(
            i.to_bytes(),
            [0x61, 0x3a, 0xf8, 0xff, 0xfe, 0xff, 0xff, 0xff]
        );
        assert_eq!(size_of::<Insn>(), 8);
    }

    #[test]
    fn object_names_are_truncated_and_nul_terminated() {
        let n = obj_name("a-name-longer-than-sixteen");
        assert_eq!(&n[..15], b"a-name-longer-t");
        assert_eq!(n[15], 0);
        assert_eq!(&obj_name(PROGRAM_NAME)[..12], b"portico_xsk\0");
    }
}
