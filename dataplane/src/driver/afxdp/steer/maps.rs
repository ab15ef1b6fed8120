//! The steering rule as map entries, and installing a rule: the layout the
//! program reads (`program.rs`), written by [`SteerMaps::install`] into the
//! inactive generation before the generation index flips (see the module
//! docs of `steer/` for the invariants).

use super::SteerError;
use crate::driver::afxdp::bpf::{
    BPF_F_NO_PREALLOC, BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_HASH, BPF_MAP_TYPE_LPM_TRIE, BpfMap,
    MapSpec,
};
use crate::flow::Proto;
use crate::steering::{
    MAX_AFFINITY_ENDPOINTS, MAX_AFFINITY_ENDPOINTS6, MAX_AFFINITY_LISTENERS,
    MAX_AFFINITY_LISTENERS6, MAX_OWNED_RANGES, MAX_OWNED_RANGES6, MAX_SNAT_ADDRS, MAX_SNAT_ADDRS6,
    MAX_SNAT_LISTENERS, MAX_SNAT_LISTENERS6, SteeringRule,
};
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Mutex;

/// Bytes of a `sets` key and of an `owned` key (both 24).
pub(super) const KEY_BYTES: usize = 24;
/// Bytes of a `config` value.
pub(super) const CONFIG_BYTES: usize = 32;
/// `config` entry holding the active generation (0 or 1) at offset 0.
pub(super) const ACTIVE: u32 = 0;
/// `config` entry of generation `g`'s scalars: `SCALARS + g`.
pub(super) const SCALARS: u32 = 1;

// Offsets of generation scalars in a `config` value (all u32).
/// Workers of the rule; 0: no rule (each queue's own worker).
pub(super) const CFG_WORKERS: i16 = 0;
/// First and last SNAT port.
pub(super) const CFG_SNAT_LO: i16 = 4;
pub(super) const CFG_SNAT_HI: i16 = 8;
/// [`crate::snat::owner_of_port`] precomputed: ports `lo..lo + long` go
/// to worker `offset / long_slice`, the others to `rem + (offset - long)
/// / short_slice`.
pub(super) const CFG_LONG: i16 = 12;
pub(super) const CFG_REM: i16 = 16;
pub(super) const CFG_LONG_SLICE: i16 = 20;
pub(super) const CFG_SHORT_SLICE: i16 = 24;

// `sets` key: [generation, kind | family, proto, 0, port (network order, 2), 0, 0,
// address (16, an IPv4 one in the first 4, the rest 0)].
/// Kinds of `sets` entries (bit 7 set for the IPv6 lists).
pub(super) const KIND_SNAT_ADDR: i32 = 1;
pub(super) const KIND_SNAT_LISTENER: i32 = 2;
pub(super) const KIND_AFFINITY_LISTENER: i32 = 3;
pub(super) const KIND_AFFINITY_ENDPOINT: i32 = 4;
/// Family bit of a kind: IPv6.
pub(super) const KIND_V6: u8 = 0x80;
/// Offsets in a `sets` key.
pub(super) const SET_GEN: i16 = 0;
pub(super) const SET_KIND: i16 = 1;
pub(super) const SET_PROTO: i16 = 2;
pub(super) const SET_PORT: i16 = 4;
pub(super) const KEY_ADDR: i16 = 8;

// `owned` (LPM trie) key: [prefix length in bits (u32, host order),
// generation, family (4 or 6), 0, 0, address (16)]: the prefix length counts the
// 32 bits of generation, family and padding first.
/// Bits before the address in an `owned` key's data.
pub(super) const OWNED_HEAD_BITS: u32 = 32;
pub(super) const OWNED_GEN: i16 = 4;
pub(super) const OWNED_FAMILY: i16 = 5;

/// The most prefixes an inclusive range of 32-bit values splits into.
const PREFIXES_PER_RANGE: usize = 62;
/// `sets` entries of one generation at the rule maxima.
const SET_ENTRIES: usize = MAX_SNAT_ADDRS
    + MAX_SNAT_LISTENERS
    + MAX_AFFINITY_LISTENERS
    + MAX_AFFINITY_ENDPOINTS
    + MAX_SNAT_ADDRS6
    + MAX_SNAT_LISTENERS6
    + MAX_AFFINITY_LISTENERS6
    + MAX_AFFINITY_ENDPOINTS6;
/// `owned` prefixes of one generation at the rule maxima (every range of
/// the worst shape).
const OWNED_ENTRIES: usize = (MAX_OWNED_RANGES + MAX_OWNED_RANGES6) * PREFIXES_PER_RANGE;

/// One map entry a generation holds, to delete it when the generation is
/// reused.
#[derive(Clone, Copy, Debug)]
enum Written {
    Set([u8; KEY_BYTES]),
    Owned([u8; KEY_BYTES]),
}

/// What the installer remembers between rules.
#[derive(Debug, Default)]
struct Generations {
    /// The generation the program reads.
    active: u32,
    /// The entries each generation holds.
    written: [Vec<Written>; 2],
}

/// What one [`SteerMaps::install`] wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InstallStats {
    /// Entries deleted from the generation being reused.
    pub deleted: usize,
    /// `sets` entries written.
    pub set_entries: usize,
    /// `owned` prefixes written.
    pub owned_prefixes: usize,
    /// The generation now active.
    pub generation: u32,
}

/// The maps the steering program reads: `config` (array: the active
/// generation, each generation's scalars), `sets` (hash: SNAT addresses,
/// listeners and affinity tuples) and `owned` (LPM trie: owned address
/// prefixes). See the module docs of `steer/`.
#[derive(Debug)]
pub struct SteerMaps {
    pub(super) config: BpfMap,
    pub(super) sets: BpfMap,
    pub(super) owned: BpfMap,
    state: Mutex<Generations>,
}

impl SteerMaps {
    /// The three maps, empty: the program sends each queue's frames to
    /// its own worker until the first rule.
    pub fn create() -> Result<SteerMaps, SteerError> {
        let map = |spec: MapSpec| {
            BpfMap::create(spec).map_err(|source| SteerError::Map {
                what: "creating a steering map (BPF_MAP_CREATE)",
                name: spec.name,
                source,
            })
        };
        Ok(SteerMaps {
            config: map(MapSpec {
                map_type: BPF_MAP_TYPE_ARRAY,
                key_size: 4,
                value_size: CONFIG_BYTES as u32,
                max_entries: SCALARS + 2,
                map_flags: 0,
                name: "portico_steer",
            })?,
            sets: map(MapSpec {
                map_type: BPF_MAP_TYPE_HASH,
                key_size: KEY_BYTES as u32,
                value_size: 1,
                max_entries: 2 * SET_ENTRIES as u32,
                map_flags: 0,
                name: "portico_sets",
            })?,
            owned: map(MapSpec {
                map_type: BPF_MAP_TYPE_LPM_TRIE,
                key_size: KEY_BYTES as u32,
                value_size: 1,
                max_entries: 2 * OWNED_ENTRIES as u32,
                map_flags: BPF_F_NO_PREALLOC,
                name: "portico_owned",
            })?,
            state: Mutex::new(Generations::default()),
        })
    }

    /// Make `rule` the one the program steers by: empty the inactive
    /// generation (what the rule before last left there), write the rule
    /// into it, then flip the active generation (one 4-byte value). A
    /// failure before the flip leaves the active rule as it was (what was
    /// written is deleted by the next install). Cold path: about 1,500
    /// map updates at the lists' maxima with single-prefix owned ranges (a
    /// range costs at most 62, then the same again to delete it later),
    /// no program load, only the maps' fds needed.
    pub fn install(&self, rule: &SteeringRule) -> Result<InstallStats, SteerError> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let g = 1 - state.active.min(1);
        let mut stats = InstallStats {
            generation: g,
            ..InstallStats::default()
        };
        let slot = g as usize;
        let stale = std::mem::take(&mut state.written[slot]);
        for (i, w) in stale.iter().enumerate() {
            let (map, key) = match w {
                Written::Set(k) => (&self.sets, k),
                Written::Owned(k) => (&self.owned, k),
            };
            match map.delete(key) {
                Ok(()) => stats.deleted += 1,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(source) => {
                    state.written[slot] = stale.get(i..).unwrap_or_default().to_vec();
                    return Err(map_error("deleting a stale entry", map, source));
                }
            }
        }
        let generation = g as u8;
        for key in set_keys(rule, generation) {
            state.written[slot].push(Written::Set(key));
            self.sets
                .update(&key, &[1])
                .map_err(|e| map_error("adding a set entry", &self.sets, e))?;
            stats.set_entries += 1;
        }
        for key in owned_keys(rule, generation) {
            state.written[slot].push(Written::Owned(key));
            self.owned
                .update(&key, &[1])
                .map_err(|e| map_error("adding an owned prefix", &self.owned, e))?;
            stats.owned_prefixes += 1;
        }
        self.config
            .update(&(SCALARS + g).to_ne_bytes(), &scalars(rule))
            .map_err(|e| map_error("writing the rule's scalars", &self.config, e))?;
        let mut active = [0u8; CONFIG_BYTES];
        active[..4].copy_from_slice(&g.to_ne_bytes());
        self.config
            .update(&ACTIVE.to_ne_bytes(), &active)
            .map_err(|e| map_error("flipping the generation", &self.config, e))?;
        state.active = g;
        Ok(stats)
    }
}

fn map_error(what: &'static str, map: &BpfMap, source: io::Error) -> SteerError {
    SteerError::Map {
        what,
        name: map.name(),
        source,
    }
}

/// A generation's scalars (see the `CFG_` offsets).
fn scalars(rule: &SteeringRule) -> [u8; CONFIG_BYTES] {
    let (lo, hi) = (
        u32::from(*rule.snat_ports.start()),
        u32::from(*rule.snat_ports.end()),
    );
    let workers = u32::from(rule.workers);
    // As `snat::owner_of_port`.
    let len = if hi >= lo { hi - lo + 1 } else { 0 };
    let base = len / workers.max(1);
    let rem = len % workers.max(1);
    let mut out = [0u8; CONFIG_BYTES];
    for (off, v) in [
        (CFG_WORKERS, workers),
        (CFG_SNAT_LO, lo),
        (CFG_SNAT_HI, hi),
        (CFG_LONG, rem * (base + 1)),
        (CFG_REM, rem),
        (CFG_LONG_SLICE, base + 1),
        (CFG_SHORT_SLICE, base.max(1)),
    ] {
        let off = off as usize;
        if let Some(d) = out.get_mut(off..off + 4) {
            d.copy_from_slice(&v.to_ne_bytes());
        }
    }
    out
}

/// A `sets` key.
fn set_key(
    generation: u8,
    kind: i32,
    v6: bool,
    proto: u8,
    port: u16,
    addr: &[u8],
) -> [u8; KEY_BYTES] {
    let mut k = [0u8; KEY_BYTES];
    k[SET_GEN as usize] = generation;
    k[SET_KIND as usize] = kind as u8 | if v6 { KIND_V6 } else { 0 };
    k[SET_PROTO as usize] = proto;
    k[SET_PORT as usize..SET_PORT as usize + 2].copy_from_slice(&port.to_be_bytes());
    let a = KEY_ADDR as usize;
    if let Some(d) = k.get_mut(a..a + addr.len()) {
        d.copy_from_slice(addr);
    }
    k
}

/// Every `sets` key of `rule` in generation `generation`.
fn set_keys(rule: &SteeringRule, generation: u8) -> Vec<[u8; KEY_BYTES]> {
    fn tuples<A>(
        out: &mut Vec<[u8; KEY_BYTES]>,
        generation: u8,
        kind: i32,
        v6: bool,
        list: &[(Proto, A, u16)],
        octets: impl Fn(&A) -> Vec<u8>,
    ) {
        out.extend(
            list.iter().map(|(p, a, port)| {
                set_key(generation, kind, v6, p.ip_number(), *port, &octets(a))
            }),
        );
    }
    let v4 = |a: &Ipv4Addr| a.octets().to_vec();
    let v6 = |a: &Ipv6Addr| a.octets().to_vec();
    let mut out = Vec::new();
    out.extend(
        rule.snat_addrs
            .iter()
            .map(|a| set_key(generation, KIND_SNAT_ADDR, false, 0, 0, &a.octets())),
    );
    out.extend(
        rule.snat_addrs6
            .iter()
            .map(|a| set_key(generation, KIND_SNAT_ADDR, true, 0, 0, &a.octets())),
    );
    let k = KIND_SNAT_LISTENER;
    tuples(&mut out, generation, k, false, &rule.snat_listeners, v4);
    tuples(&mut out, generation, k, true, &rule.snat_listeners6, v6);
    let k = KIND_AFFINITY_LISTENER;
    tuples(&mut out, generation, k, false, &rule.affinity_listeners, v4);
    tuples(&mut out, generation, k, true, &rule.affinity_listeners6, v6);
    let k = KIND_AFFINITY_ENDPOINT;
    tuples(&mut out, generation, k, false, &rule.affinity_endpoints, v4);
    tuples(&mut out, generation, k, true, &rule.affinity_endpoints6, v6);
    out
}

/// An `owned` key: `addr` (family 4 or 6) with its first `bits` bits.
fn owned_key(generation: u8, family: u8, addr: &[u8], bits: u32) -> [u8; KEY_BYTES] {
    let mut k = [0u8; KEY_BYTES];
    k[..4].copy_from_slice(&(OWNED_HEAD_BITS + bits).to_ne_bytes());
    k[OWNED_GEN as usize] = generation;
    k[OWNED_FAMILY as usize] = family;
    let a = KEY_ADDR as usize;
    if let Some(d) = k.get_mut(a..a + addr.len()) {
        d.copy_from_slice(addr);
    }
    k
}

/// Every `owned` key of `rule` in generation `generation`: each range as the
/// fewest prefixes covering exactly it ([`prefixes`]); an IPv6 range lies
/// in one /96, so its prefixes are the /96 and those of its last word.
fn owned_keys(rule: &SteeringRule, generation: u8) -> Vec<[u8; KEY_BYTES]> {
    let mut out = Vec::new();
    for &(lo, hi) in &rule.owned {
        for (p, bits) in prefixes(lo, hi) {
            out.push(owned_key(generation, 4, &p.to_be_bytes(), bits));
        }
    }
    for &(lo, hi) in &rule.owned6 {
        let upper = lo & !0xffff_ffff;
        for (p, bits) in prefixes(lo as u32, hi as u32) {
            let a = upper | u128::from(p);
            out.push(owned_key(generation, 6, &a.to_be_bytes(), 96 + bits));
        }
    }
    out
}

/// The inclusive range `lo..=hi` of 32-bit values as the fewest prefixes
/// `(base, bits)` (at most [`PREFIXES_PER_RANGE`]); empty when `lo > hi`.
pub(super) fn prefixes(lo: u32, hi: u32) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let (mut lo, hi) = (u64::from(lo), u64::from(hi));
    while lo <= hi {
        // The largest aligned block at `lo` that stays inside the range.
        let mut size: u64 = if lo == 0 {
            1 << 32
        } else {
            lo & lo.wrapping_neg()
        };
        while lo + size - 1 > hi {
            size >>= 1;
        }
        out.push((lo as u32, 32 - size.trailing_zeros()));
        lo += size;
    }
    out
}
