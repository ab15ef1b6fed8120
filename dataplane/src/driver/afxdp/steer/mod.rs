//! Flow-affine steering in the XDP program: the redirect program of an
//! interface computes the owner of each frame ([`SteeringRule::owner`] /
//! [`SteeringRule::owner6`]) and redirects it to the XSK map slot of that
//! worker on the frame's queue.
//!
//! The program is **data-driven and loaded once**, when the port opens
//! ([`steering_program`], 281 instructions whatever the rule): the rule
//! lives in three BPF maps ([`SteerMaps`]), so installing one
//! ([`SteerMaps::install`]) is map updates (about 1,500 at the lists'
//! maxima when owned ranges are single prefixes, up to ~50,000 deletes and
//! writes when each of 536 ranges splits into its most, 62, prefixes), no
//! program load, no verifier run, and needs only the maps' fds (no
//! capability on Linux 6.5+, where `bpf(2)` checks capabilities only to
//! create maps and load programs; the gateway then drops `CAP_BPF` and
//! `CAP_NET_ADMIN` after start-up; before 6.5 with
//! `kernel.unprivileged_bpf_disabled` set it keeps `CAP_BPF`). A kernel
//! without `bpf_xdp_load_bytes` (before 5.18) refuses the program: the
//! port opens with [`queue_own_program`] and installs fail, counted.
//!
//! Maps (`maps.rs` has the byte layouts):
//!
//! * `config`, an array of 3 values of 32 bytes: entry 0 holds the active
//!   generation `g` (0 or 1); entry `1 + g` the generation's scalars:
//!   workers (0: no rule yet), the SNAT port range and its slices
//!   (`snat::owner_of_port` precomputed: long part, remainder, the two
//!   slice lengths).
//! * `sets`, a hash of `(gen, kind | family, proto, port, address)` →
//!   1: the SNAT addresses (proto and port 0), the listeners on SNAT
//!   addresses, the address-steered listeners and endpoints, both
//!   families (bit 7 of the kind: IPv6; an IPv4 address is its 4 bytes
//!   followed by 12 zeros). Sized for both generations at the rule maxima
//!   (`steering::MAX_*`, 424 entries each).
//! * `owned`, an LPM trie of `(gen, family, address)` prefixes: each owned
//!   range as the fewest prefixes covering it (at most 62 per range; an
//!   IPv6 range lies in one /96, so its prefixes are /96 to /128). Sized
//!   for both generations at the maxima with every range of the worst
//!   shape; a lookup is one helper call whatever the number of ranges.
//!
//! The program (`program.rs`; `q` = `xdp_md.rx_queue_index`, `W` = the XSK
//! map's workers, `w` = the rule's):
//!
//! ```text
//!   g = config[0]; s = config[1 + g]
//!   if s.workers == 0 -> own                         (no rule yet)
//!   if s.workers == 1 -> owner 0
//!   headers from the first buffer (direct access bounded by data_end):
//!   IPv4: TCP/UDP, not a later fragment, src, dst;
//!         ports at 14 + 4 * IHL through bpf_xdp_load_bytes (any buffer)
//!   IPv6: next header TCP/UDP (no extension header walked), src, dst, ports
//!   else (or a frame too short) -> owner 0
//!   if dport in s.snat_ports and sets[g, SNAT_ADDR, dst]
//!      and not sets[g, SNAT_LISTENER, proto, dport, dst] -> slice(dport)
//!   if owned[g, family, dst]:
//!      port = sets[g, AFFINITY_LISTENER, proto, dport, dst] ? 0 : sport
//!      owner = client_port_hash(src, port)
//!   else:
//!      port = sets[g, AFFINITY_ENDPOINT, proto, sport, src] ? 0 : dport
//!      owner = client_port_hash(dst, port)    (IPv6: the xor of the words)
//!   epilogue: redirect to slot q * W + owner % W, else (an empty slot) to
//!   own: slot q * W + q % W, the queue's own worker, with XDP_PASS as the
//!   last fallback
//! ```
//!
//! These are af_packet's fanout program's decisions
//! (`driver/afpacket/steering/`) on the same [`SteeringRule`]; both are
//! tested against [`SteeringRule::owner`] / [`SteeringRule::owner6`].
//!
//! **Installing a rule** ([`SteerMaps::install`]): the rule goes into the
//! *inactive* generation `g' = 1 - g`: first the entries the rule before
//! last left there are deleted (nothing reads `g'`), then the new entries
//! and `g'`'s scalars are written, and last the generation index
//! (`config[0]`, a 4-byte value whose old and new contents differ in one
//! byte) flips to `g'`. A frame's program reads the index once and only
//! that generation's entries after, so it decides by the old rule or by
//! the new one, never by a mix; the old generation stays intact until the
//! next install (a frame would have to stay in the program for a whole
//! snapshot interval to see it change; and any misdirected frame is
//! repaired by the worker's handoff, which decides ownership itself). A
//! failed install (a map update refused) leaves the active generation
//! untouched.
//!
//! **Multi-buffer** (`XDP_USE_SG` ports): the same program is loaded as
//! the `xdp.frags` variant (`BPF_F_XDP_HAS_FRAGS`). It reads the Ethernet
//! and IP headers from the first buffer (where drivers put at least the
//! first chunk's bytes) and the IPv4 ports with `bpf_xdp_load_bytes`,
//! which reads across buffers. A frame whose IP header does not fit the
//! first buffer (34 bytes for IPv4, 58 for IPv6 with the ports) gets owner
//! 0: worker 0 hands it off if another worker owns it.
//!
//! Invariants: the owner equals [`SteeringRule::owner`]/[`SteeringRule::owner6`]
//! modulo `W` for every frame of a rule installed by [`SteerMaps::install`]
//! (tested in the kernel with `BPF_PROG_TEST_RUN`, `tests.rs`, both
//! variants); the program's instructions do not depend on the rule (only
//! on the maps' fds and `W`); a `sets`/`owned` entry of generation `g` is
//! written only while `g` is inactive.

mod asm;
mod maps;
mod program;
#[cfg(test)]
mod tests;

pub use maps::{InstallStats, SteerMaps};
pub use program::{Sink, queue_own_program, steering_program};

use super::bpf::{self, LoadError, XskMap};
#[cfg(any(doc, test))]
use crate::steering::SteeringRule;
use std::io;
use std::os::fd::OwnedFd;

/// Why a steering program could not be built or a rule not installed.
#[derive(Debug, thiserror::Error)]
pub enum SteerError {
    #[error("steering program: a jump of {insns} instructions does not fit eBPF's 16-bit offset")]
    JumpTooFar { insns: i64 },
    #[error("steering program: label {label} is jumped to but never placed")]
    UnboundLabel { label: usize },
    #[error("steering map {name}: {what}: {source}")]
    Map {
        what: &'static str,
        name: &'static str,
        source: io::Error,
    },
}

/// The redirect program for `xsk` (its fd and workers) reading `maps`,
/// loaded under `name` (`frags`: the `xdp.frags` variant).
pub fn load(maps: &SteerMaps, xsk: &XskMap, name: &str, frags: bool) -> Result<OwnedFd, LoadError> {
    load_redirect(xsk, name, frags, |workers, sink| {
        steering_program(maps, workers, sink)
    })
}

/// [`queue_own_program`] for `xsk`, loaded (the fallback of [`load`] on a
/// kernel without `bpf_xdp_load_bytes`).
pub fn load_queue_own(xsk: &XskMap, name: &str, frags: bool) -> Result<OwnedFd, LoadError> {
    load_redirect(xsk, name, frags, queue_own_program)
}

/// Assemble `program` for `xsk`'s workers, redirecting into `xsk`, and load it.
fn load_redirect(
    xsk: &XskMap,
    name: &str,
    frags: bool,
    program: impl FnOnce(u32, Sink) -> Result<Vec<bpf::Insn>, SteerError>,
) -> Result<OwnedFd, LoadError> {
    let sink = Sink::Redirect {
        map_fd: xsk.raw_fd(),
    };
    let insns = program(xsk.workers(), sink).map_err(|e| LoadError {
        source: io::Error::new(io::ErrorKind::InvalidInput, e),
        verifier_log: String::new(),
    })?;
    bpf::load_insns(&insns, name, frags)
}
