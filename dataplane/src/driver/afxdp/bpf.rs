//! The XDP program and its XSK map, built as raw eBPF instructions and
//! loaded with `bpf(2)`: no clang, LLVM or libbpf at build or run time.
//!
//! The program is built by [`super::steer`] (Documentation/bpf/standardization/instruction-set.rst
//! for the encoding): before a steering rule is installed it redirects
//! every frame of queue `q` to the map slot of the queue's own worker
//! ([`XskMap::slot`]`(q, q % workers)`; slot `q` with one worker per
//! queue, as in the first version), with `XDP_PASS` as the fallback
//! action when the slot is empty (a worker not started yet, or gone: the
//! lower bits of the flags of `bpf_redirect_map` are the fallback action,
//! Linux 5.6+); with a rule it computes the frame's owner first.
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
/// `BPF_MAP_TYPE_HASH`.
pub(super) const BPF_MAP_TYPE_HASH: u32 = 1;
/// `BPF_MAP_TYPE_ARRAY`.
pub(super) const BPF_MAP_TYPE_ARRAY: u32 = 2;
/// `BPF_MAP_TYPE_LPM_TRIE`.
pub(super) const BPF_MAP_TYPE_LPM_TRIE: u32 = 11;
/// `BPF_F_NO_PREALLOC` (an LPM trie requires it).
pub(super) const BPF_F_NO_PREALLOC: u32 = 1;
/// `BPF_XDP` attach type (`expected_attach_type` and `BPF_LINK_CREATE`).
pub(super) const BPF_XDP: u32 = 37;
/// `BPF_PSEUDO_MAP_FD`: the immediate of a `ld_imm64` is a map fd.
const BPF_PSEUDO_MAP_FD: u8 = 1;
/// `XDP_PASS`.
pub(super) const XDP_PASS: i32 = 2;

/// `BPF_F_XDP_HAS_FRAGS`: the program handles multi-buffer packets (it
/// reads only the headers, in the first buffer, with direct packet access
/// bounded by `data_end`: frags-safe as is).
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
const BPF_LD: u8 = 0x00;
const BPF_DW: u8 = 0x18;
const BPF_IMM: u8 = 0x00;

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
    pub(super) const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
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

/// `dst = map` (the two-slot `ld_imm64` with `BPF_PSEUDO_MAP_FD`).
pub(super) const fn ld_map_fd(dst: u8, fd: i32) -> [Insn; 2] {
    [
        Insn::new(BPF_LD | BPF_DW | BPF_IMM, dst, BPF_PSEUDO_MAP_FD, 0, fd),
        Insn::new(0, 0, 0, 0, 0),
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

/// `bpf_attr` for `BPF_PROG_LOAD` (prefix; rest zero; also af_packet's
/// kernel-RX program's).
#[repr(C)]
#[derive(Clone, Copy)]
pub(in crate::driver) struct ProgLoadAttr {
    pub(in crate::driver) prog_type: u32,
    pub(in crate::driver) insn_cnt: u32,
    pub(in crate::driver) insns: u64,
    pub(in crate::driver) license: u64,
    pub(in crate::driver) log_level: u32,
    pub(in crate::driver) log_size: u32,
    pub(in crate::driver) log_buf: u64,
    pub(in crate::driver) kern_version: u32,
    pub(in crate::driver) prog_flags: u32,
    pub(in crate::driver) prog_name: [u8; 16],
    pub(in crate::driver) prog_ifindex: u32,
    pub(in crate::driver) expected_attach_type: u32,
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

/// The shape of a map [`create_map`] makes.
#[derive(Clone, Copy, Debug)]
pub(super) struct MapSpec {
    pub map_type: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    pub map_flags: u32,
    pub name: &'static str,
}

/// A BPF map of [`MapSpec`]'s shape, owned.
#[derive(Debug)]
pub(super) struct BpfMap {
    fd: OwnedFd,
    spec: MapSpec,
}

impl BpfMap {
    /// A new map of `spec`'s shape (`BPF_MAP_CREATE`).
    pub(super) fn create(spec: MapSpec) -> io::Result<BpfMap> {
        let mut attr = MapCreateAttr {
            map_type: spec.map_type,
            key_size: spec.key_size,
            value_size: spec.value_size,
            max_entries: spec.max_entries,
            map_flags: spec.map_flags,
            inner_map_fd: 0,
            numa_node: 0,
            map_name: obj_name(spec.name),
            map_ifindex: 0,
            btf_fd: 0,
            btf_key_type_id: 0,
            btf_value_type_id: 0,
            btf_vmlinux_value_type_id: 0,
            map_extra: 0,
        };
        let fd = sys::bpf_fd(sys::BPF_MAP_CREATE, &mut attr)?;
        Ok(BpfMap { fd, spec })
    }

    /// The size check every element call makes first: the kernel reads
    /// exactly the map's key and value sizes from the pointers.
    fn sized(&self, key: &[u8], value: Option<&[u8]>) -> io::Result<()> {
        let ok = key.len() == self.spec.key_size as usize
            && value.is_none_or(|v| v.len() == self.spec.value_size as usize);
        if ok {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "map {}: key of {} bytes / value of {:?} bytes, the map has {} / {}",
                    self.spec.name,
                    key.len(),
                    value.map(<[u8]>::len),
                    self.spec.key_size,
                    self.spec.value_size
                ),
            ))
        }
    }

    /// `map[key] = value` (`BPF_MAP_UPDATE_ELEM`, `BPF_ANY`): needs only
    /// the fd (no capability since Linux 6.5).
    pub(super) fn update(&self, key: &[u8], value: &[u8]) -> io::Result<()> {
        self.sized(key, Some(value))?;
        let mut attr = MapElemAttr {
            map_fd: self.fd.as_raw_fd() as u32,
            _pad: 0,
            key: key.as_ptr() as u64,
            value: value.as_ptr() as u64,
            flags: 0,
        };
        sys::bpf(sys::BPF_MAP_UPDATE_ELEM, &mut attr).map(drop)
    }

    /// Remove `key` (`BPF_MAP_DELETE_ELEM`); `ENOENT` when absent.
    pub(super) fn delete(&self, key: &[u8]) -> io::Result<()> {
        self.sized(key, None)?;
        let mut attr = MapElemAttr {
            map_fd: self.fd.as_raw_fd() as u32,
            _pad: 0,
            key: key.as_ptr() as u64,
            value: 0,
            flags: 0,
        };
        sys::bpf(sys::BPF_MAP_DELETE_ELEM, &mut attr).map(drop)
    }

    pub(super) fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    pub(super) fn name(&self) -> &'static str {
        self.spec.name
    }
}

/// An XSK map: slot `queue * workers + worker` -> worker `worker`'s
/// AF_XDP socket on RX queue `queue` ([`XskMap::slot`]).
#[derive(Debug)]
pub struct XskMap {
    map: BpfMap,
    entries: u32,
    workers: u32,
}

impl XskMap {
    /// A map with `workers` slots per RX queue.
    pub fn create(queues: u32, workers: u32) -> io::Result<XskMap> {
        let workers = workers.max(1);
        let entries = queues.max(1).saturating_mul(workers);
        let map = BpfMap::create(MapSpec {
            map_type: BPF_MAP_TYPE_XSKMAP,
            key_size: 4,
            value_size: 4,
            max_entries: entries,
            map_flags: 0,
            name: MAP_NAME,
        })?;
        Ok(XskMap {
            map,
            entries,
            workers,
        })
    }

    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// RX queues (slots per worker).
    pub fn queues(&self) -> u32 {
        self.entries / self.workers
    }

    /// Workers per queue.
    pub fn workers(&self) -> u32 {
        self.workers
    }

    /// The slot of `worker`'s socket on `queue`.
    pub fn slot(&self, queue: u32, worker: u32) -> u32 {
        queue.saturating_mul(self.workers).saturating_add(worker)
    }

    /// The slot of the socket the queue's own worker (`queue % workers`)
    /// binds there: where every frame of the queue goes without a rule.
    pub fn own_slot(&self, queue: u32) -> u32 {
        self.slot(queue, queue % self.workers)
    }

    /// Point slot `slot` at the socket `xsk`.
    pub fn insert(&self, slot: u32, xsk: BorrowedFd<'_>) -> io::Result<()> {
        let value = xsk.as_raw_fd() as u32;
        self.map.update(&slot.to_ne_bytes(), &value.to_ne_bytes())
    }

    /// Empty slot `slot` (frames for it fall back, see the module docs).
    pub fn remove(&self, slot: u32) -> io::Result<()> {
        self.map.delete(&slot.to_ne_bytes())
    }

    pub(super) fn raw_fd(&self) -> i32 {
        self.map.raw_fd()
    }
}

/// Why loading the program failed, with what the verifier said.
#[derive(Debug)]
pub struct LoadError {
    pub source: io::Error,
    pub verifier_log: String,
}

/// Load the redirect program for `map` with fresh, empty steering maps
/// (each queue to its own worker) under `name`, the `xdp.frags` variant
/// (tests load one under another name to play someone else's program).
pub fn load_program_named(map: &XskMap, name: &str) -> Result<OwnedFd, LoadError> {
    let maps = super::steer::SteerMaps::create().map_err(|e| LoadError {
        source: io::Error::other(e),
        verifier_log: String::new(),
    })?;
    super::steer::load(&maps, map, name, true)
}

/// [`load_program_named`] under [`PROGRAM_NAME`].
pub fn load_program(map: &XskMap) -> Result<OwnedFd, LoadError> {
    load_program_named(map, PROGRAM_NAME)
}

/// Load `insns` as an XDP program named `name`: with `frags`, flagged
/// `BPF_F_XDP_HAS_FRAGS` (Linux 5.18+, the `xdp.frags` variant), so
/// multi-buffer packets reach it (veth refuses a program without the flag
/// on a jumbo MTU, and so does an `XDP_USE_SG` port); a kernel that refuses
/// the flag gets the program without it.
pub fn load_insns(insns: &[Insn], name: &str, frags: bool) -> Result<OwnedFd, LoadError> {
    if !frags {
        return load_with_flags(insns, name, 0);
    }
    match load_with_flags(insns, name, BPF_F_XDP_HAS_FRAGS) {
        Err(e) if e.source.raw_os_error() == Some(libc::EINVAL) => load_with_flags(insns, name, 0),
        r => r,
    }
}

/// Load without a verifier log first (a log of a long program's every
/// branch would not fit, the kernel then fails with `ENOSPC`); on failure
/// load again with the log, for the message.
fn load_with_flags(insns: &[Insn], name: &str, prog_flags: u32) -> Result<OwnedFd, LoadError> {
    let attempt = |log: &mut [u8]| {
        let mut attr = ProgLoadAttr {
            prog_type: BPF_PROG_TYPE_XDP,
            insn_cnt: insns.len() as u32,
            insns: insns.as_ptr() as u64,
            license: LICENSE.as_ptr() as u64,
            log_level: u32::from(!log.is_empty()),
            log_size: log.len() as u32,
            log_buf: if log.is_empty() {
                0
            } else {
                log.as_mut_ptr() as u64
            },
            kern_version: 0,
            prog_flags,
            prog_name: obj_name(name),
            prog_ifindex: 0,
            expected_attach_type: BPF_XDP,
        };
        sys::bpf_fd(sys::BPF_PROG_LOAD, &mut attr)
    };
    attempt(&mut []).map_err(|source| {
        let mut log = vec![0u8; VERIFIER_LOG_BYTES];
        // The second attempt fails the same way (or with ENOSPC when the
        // log is cut): what it wrote is the explanation.
        let _ = attempt(&mut log);
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

/// `bpf_attr` for `BPF_PROG_TEST_RUN` (prefix; rest zero).
#[repr(C)]
#[derive(Clone, Copy)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    _pad: u32,
}

/// `struct xdp_md` as `BPF_PROG_TEST_RUN` takes it.
#[repr(C)]
#[derive(Clone, Copy)]
struct XdpMd {
    data: u32,
    data_end: u32,
    data_meta: u32,
    ingress_ifindex: u32,
    rx_queue_index: u32,
    egress_ifindex: u32,
}

/// Run the XDP program `prog` once over `frame` as if received on
/// `(ifindex, queue)` of the caller's namespace (`BPF_PROG_TEST_RUN`);
/// returns the program's return value. Tests and diagnostics only.
pub fn test_run(prog: BorrowedFd<'_>, frame: &[u8], ifindex: u32, queue: u32) -> io::Result<u32> {
    let md = XdpMd {
        data: 0,
        data_end: frame.len() as u32,
        data_meta: 0,
        ingress_ifindex: ifindex,
        rx_queue_index: queue,
        egress_ifindex: 0,
    };
    let mut attr = TestRunAttr {
        prog_fd: prog.as_raw_fd() as u32,
        retval: 0,
        data_size_in: frame.len() as u32,
        data_size_out: 0,
        data_in: frame.as_ptr() as u64,
        data_out: 0,
        repeat: 1,
        duration: 0,
        ctx_size_in: size_of::<XdpMd>() as u32,
        ctx_size_out: 0,
        ctx_in: &md as *const XdpMd as u64,
        ctx_out: 0,
        flags: 0,
        cpu: 0,
        batch_size: 0,
        _pad: 0,
    };
    sys::bpf(sys::BPF_PROG_TEST_RUN, &mut attr)?;
    Ok(attr.retval)
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
    fn negative_offsets_and_immediates_are_little_endian_twos_complement() {
        let i = Insn::new(0x61, 10, 3, -8, -2);
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
