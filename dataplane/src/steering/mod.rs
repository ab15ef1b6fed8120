//! Flow ownership as facts a packet classifier in the kernel can test:
//! [`client_port_hash`] (the owner of a client's connection: by client
//! address and port, or by the address alone, [`client_hash`], for the
//! address-steered flows of [`AffinityTuples`]: ClientIP affinity) and
//! [`SteeringRule`],
//! the workers' owner function (`stage::steer`, `Steering::owner`)
//! flattened into sorted address lists, a port range and a worker count,
//! so a driver can deliver each packet to the worker that owns its flow in
//! the first place and the handoff rings carry only the exceptions.
//!
//! Invariants: for every TCP/UDP key, [`SteeringRule::owner`] (IPv4) and
//! [`SteeringRule::owner6`] (IPv6) equal the worker's owner functions
//! (`Steering::owner`, `Steering::owner6`) with the snapshot the rule was
//! taken from (`Steering::rule`; tested in `stage/steer/tests.rs` on random
//! tuples of both families), as long as the rule is not
//! [`SteeringRule::truncated`]. The drivers'
//! programs (af_packet's fanout program, `driver/afpacket/steering/`)
//! compute [`SteeringRule::owner`] and [`SteeringRule::owner6`] and are
//! tested against them. A truncated
//! rule (more entries than a program may hold) only costs handoffs, never
//! correctness: the worker still decides ownership itself.
//!
//! Ownership is not Maglev's stable hash: that one picks backends and must
//! agree across instances; ownership only matters inside one process, and
//! [`client_hash`] is chosen so classic BPF (32-bit arithmetic) computes it;
//! [`client_port_hash`] hashes the address xor the port the same way (one
//! client's ports spread evenly over 2 to 8 workers, tested);
//! [`client_hash6`] and [`client_port_hash6`] are the same hashes of the
//! xor of an IPv6 address's four 32-bit words, for the same reason.

#[cfg(test)]
pub(crate) mod tests;

pub use crate::snapshot::{AffinityFamily, AffinityTuples};

use crate::flow::{FlowKey, FlowKey6, FlowKeyOf, Proto};
use crate::packet::WorkerId;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::RangeInclusive;

/// Multiplier of [`client_hash`] (2^32 / golden ratio, odd).
pub const CLIENT_HASH_MULTIPLIER: u32 = 0x9e37_79b1;
/// Right shift of [`client_hash`]: the product's upper 16 bits, where a
/// multiplicative hash mixes best.
pub const CLIENT_HASH_SHIFT: u32 = 16;

/// The worker owning a client: by its address alone, so every connection of
/// a client lives on one core and ClientIP affinity is exact (drivers that
/// steer in hardware hash on addresses only, e.g. RSS without L4 ports).
/// `((ip * CLIENT_HASH_MULTIPLIER) mod 2^32 >> CLIENT_HASH_SHIFT) % workers`:
/// 32-bit arithmetic only, as classic BPF has it.
#[inline]
pub fn client_hash(ip: Ipv4Addr, workers: u8) -> WorkerId {
    let x = u32::from(ip).wrapping_mul(CLIENT_HASH_MULTIPLIER) >> CLIENT_HASH_SHIFT;
    (x % u32::from(workers.max(1))) as WorkerId
}

/// The worker owning an IPv6 client: [`client_hash`] of the xor of the
/// address's four 32-bit words (big-endian, as the wire carries them), so
/// classic BPF computes it with 32-bit loads and `xor`.
#[inline]
pub fn client_hash6(ip: Ipv6Addr, workers: u8) -> WorkerId {
    let w = ip.to_bits();
    let folded = (w >> 96) as u32 ^ (w >> 64) as u32 ^ (w >> 32) as u32 ^ w as u32;
    client_hash(Ipv4Addr::from(folded), workers)
}

/// The worker owning one connection of a client: [`client_hash`] of the
/// client address xor the client port, so the connections of one client
/// spread over the workers (services without ClientIP affinity). Port 0
/// gives [`client_hash`] itself. 32-bit arithmetic only (classic BPF).
#[inline]
pub fn client_port_hash(ip: Ipv4Addr, port: u16, workers: u8) -> WorkerId {
    client_hash(Ipv4Addr::from(u32::from(ip) ^ u32::from(port)), workers)
}

/// [`client_port_hash`] for an IPv6 client: of the xor of the address's
/// four words (as [`client_hash6`]) and the port.
#[inline]
pub fn client_port_hash6(ip: Ipv6Addr, port: u16, workers: u8) -> WorkerId {
    let w = ip.to_bits();
    let folded = (w >> 96) as u32 ^ (w >> 64) as u32 ^ (w >> 32) as u32 ^ w as u32;
    client_port_hash(Ipv4Addr::from(folded), port, workers)
}

/// [`client_port_hash`] or [`client_port_hash6`], by the address's family.
#[inline]
pub fn client_port_hash_ip(ip: IpAddr, port: u16, workers: u8) -> WorkerId {
    match ip {
        IpAddr::V4(a) => client_port_hash(a, port, workers),
        IpAddr::V6(a) => client_port_hash6(a, port, workers),
    }
}

/// `tries` candidate client ports in 1024..=65535 to remap `port` of
/// `client` to (a flow without SNAT whose reply tuple clashes, see
/// `stage::flow`), spread by `seed`, each with the owner of `port`
/// ([`client_port_hash`]), so the backend's reply to the new port is
/// steered to the worker that owns the client's packets. Ports of another
/// worker are skipped (at most `8 × tries × workers` draws: about
/// `tries × workers` find `tries`).
pub fn remap_candidates(
    client: IpAddr,
    port: u16,
    workers: u8,
    seed: u64,
    tries: u32,
) -> impl Iterator<Item = u16> {
    let mine = client_port_hash_ip(client, port, workers);
    let mut x = seed | 1;
    (0..8 * tries * u32::from(workers.max(1)))
        .map(move |_| {
            x = x.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
            1024 + (x % (65536 - 1024)) as u16
        })
        .filter(move |&p| client_port_hash_ip(client, p, workers) == mine)
        .take(tries as usize)
}

// The maxima keep the fanout program (both families, every list at its
// maximum) within `BPF_MAXINSNS` (4096): `the_largest_rule_fits_the_kernel_limit`
// in `driver/afpacket/steering/tests.rs` builds it.

/// Most SNAT addresses a rule lists (beyond: treated as plain owned).
pub const MAX_SNAT_ADDRS: usize = 64;
/// Most listeners on shared SNAT + node/VIP addresses a rule lists.
pub const MAX_SNAT_LISTENERS: usize = 96;
/// Most merged ranges of owned addresses a rule lists.
pub const MAX_OWNED_RANGES: usize = 512;
/// Most listeners of address-steered services ([`AffinityTuples`]) a rule
/// lists.
pub const MAX_AFFINITY_LISTENERS: usize = 96;
/// Most backend endpoints of address-steered services without SNAT a rule
/// lists.
pub const MAX_AFFINITY_ENDPOINTS: usize = 128;
/// Most IPv6 SNAT addresses a rule lists. The IPv6 maxima are small: an
/// IPv6 entry costs a classic-BPF program three to four times the
/// instructions of an IPv4 one, and both share `BPF_MAXINSNS`.
pub const MAX_SNAT_ADDRS6: usize = 8;
/// Most listeners on IPv6 SNAT addresses a rule lists.
pub const MAX_SNAT_LISTENERS6: usize = 16;
/// Most merged ranges of owned IPv6 addresses a rule lists.
pub const MAX_OWNED_RANGES6: usize = 24;
/// Most IPv6 listeners of address-steered services a rule lists.
pub const MAX_AFFINITY_LISTENERS6: usize = 8;
/// Most IPv6 backend endpoints of address-steered services without SNAT a
/// rule lists.
pub const MAX_AFFINITY_ENDPOINTS6: usize = 8;

/// The steering facts of one snapshot (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SteeringRule {
    pub workers: u8,
    pub snat_ports: RangeInclusive<u16>,
    /// Addresses with the SNAT role, ascending.
    pub snat_addrs: Vec<Ipv4Addr>,
    /// Listeners `(proto, address, port)` on SNAT addresses that are also
    /// node or VIP addresses, with the port inside `snat_ports`: client
    /// traffic that looks like a reply to an SNAT tuple. Ascending.
    pub snat_listeners: Vec<(Proto, Ipv4Addr, u16)>,
    /// Every owned address as merged inclusive ranges of `u32`, ascending.
    pub owned: Vec<(u32, u32)>,
    /// IPv6 addresses with the SNAT role, ascending.
    pub snat_addrs6: Vec<Ipv6Addr>,
    /// Listeners `(proto, address, port)` on IPv6 SNAT addresses with the
    /// port inside `snat_ports`, ascending.
    pub snat_listeners6: Vec<(Proto, Ipv6Addr, u16)>,
    /// Every owned IPv6 address as merged inclusive ranges of `u128`,
    /// ascending, each inside one /96 (`lo >> 32 == hi >> 32`: a program
    /// compares the upper three words once, then the last as a range).
    pub owned6: Vec<(u128, u128)>,
    /// Listeners `(proto, address, port)` of address-steered services
    /// ([`AffinityTuples::listeners`]): their clients are owned by the
    /// client address alone. Ascending.
    pub affinity_listeners: Vec<(Proto, Ipv4Addr, u16)>,
    /// Backend endpoints `(proto, address, port)` whose replies go
    /// straight to the client and are owned by the client address alone
    /// ([`AffinityTuples::endpoints`]). Ascending.
    pub affinity_endpoints: Vec<(Proto, Ipv4Addr, u16)>,
    /// The IPv6 address-steered listeners, ascending.
    pub affinity_listeners6: Vec<(Proto, Ipv6Addr, u16)>,
    /// The IPv6 address-steered backend endpoints, ascending.
    pub affinity_endpoints6: Vec<(Proto, Ipv6Addr, u16)>,
    /// Some list was cut to its maximum: packets the cut part decides go
    /// to a worker that hands them off.
    pub truncated: bool,
}

impl SteeringRule {
    /// The rule for `workers` workers sharing `snat_ports`, from the owned
    /// addresses, the SNAT addresses and the listeners on SNAT addresses
    /// that are also node or VIP addresses (those with a port outside
    /// `snat_ports` are left out), in any order: sorts, merges adjacent
    /// owned addresses into ranges and cuts each list to its maximum. Cold
    /// path (a snapshot change): allocates.
    pub fn new(
        workers: u8,
        snat_ports: RangeInclusive<u16>,
        mut owned: Vec<Ipv4Addr>,
        mut snat_addrs: Vec<Ipv4Addr>,
        mut snat_listeners: Vec<(Proto, Ipv4Addr, u16)>,
    ) -> Self {
        owned.sort_unstable();
        sort_snat(&mut snat_addrs, &mut snat_listeners, &snat_ports);
        let mut ranges = merge(owned.into_iter().map(u32::from), |_, hi, a| {
            hi.checked_add(1) == Some(a)
        });
        let truncated = cut(&mut snat_addrs, MAX_SNAT_ADDRS)
            | cut(&mut snat_listeners, MAX_SNAT_LISTENERS)
            | cut(&mut ranges, MAX_OWNED_RANGES);
        SteeringRule {
            workers,
            snat_ports,
            snat_addrs,
            snat_listeners,
            owned: ranges,
            snat_addrs6: Vec::new(),
            snat_listeners6: Vec::new(),
            owned6: Vec::new(),
            affinity_listeners: Vec::new(),
            affinity_endpoints: Vec::new(),
            affinity_listeners6: Vec::new(),
            affinity_endpoints6: Vec::new(),
            truncated,
        }
    }

    /// This rule with the address-steered tuples of `tuples` (see
    /// [`AffinityTuples`]), sorted and cut to their maxima (which sets
    /// `truncated`). Cold path: allocates.
    pub fn with_affinity(mut self, tuples: &AffinityTuples) -> Self {
        fn list<A: Ord + Copy>(
            keys: impl Iterator<Item = (Proto, A, u16)>,
            max: usize,
            truncated: &mut bool,
        ) -> Vec<(Proto, A, u16)> {
            let mut v: Vec<_> = keys.collect();
            v.sort_unstable();
            *truncated |= cut(&mut v, max);
            v
        }
        let t = &mut self.truncated;
        self.affinity_listeners = list(tuples.listeners(), MAX_AFFINITY_LISTENERS, t);
        self.affinity_endpoints = list(tuples.endpoints(), MAX_AFFINITY_ENDPOINTS, t);
        self.affinity_listeners6 = list(tuples.listeners6(), MAX_AFFINITY_LISTENERS6, t);
        self.affinity_endpoints6 = list(tuples.endpoints6(), MAX_AFFINITY_ENDPOINTS6, t);
        self
    }

    /// This rule with the IPv6 facts: the owned IPv6 addresses, the IPv6
    /// SNAT addresses and the listeners on IPv6 SNAT addresses, in any
    /// order (those with a port outside `snat_ports` are left out); sorted,
    /// merged into ranges that do not cross a /96 and cut to the IPv6
    /// maxima (which sets `truncated`). Cold path: allocates.
    pub fn with_ipv6(
        mut self,
        mut owned: Vec<Ipv6Addr>,
        mut snat_addrs: Vec<Ipv6Addr>,
        mut snat_listeners: Vec<(Proto, Ipv6Addr, u16)>,
    ) -> Self {
        owned.sort_unstable();
        sort_snat(&mut snat_addrs, &mut snat_listeners, &self.snat_ports);
        let mut ranges = merge(owned.into_iter().map(Ipv6Addr::to_bits), |lo, hi, a| {
            hi.checked_add(1) == Some(a) && lo >> 32 == a >> 32
        });
        self.truncated |= cut(&mut snat_addrs, MAX_SNAT_ADDRS6)
            | cut(&mut snat_listeners, MAX_SNAT_LISTENERS6)
            | cut(&mut ranges, MAX_OWNED_RANGES6);
        self.snat_addrs6 = snat_addrs;
        self.snat_listeners6 = snat_listeners;
        self.owned6 = ranges;
        self
    }

    /// The worker owning a TCP/UDP packet with this key, by the rule alone
    /// (the function the drivers' programs compute): a reply to an SNAT
    /// tuple by the port's slice; a packet to an owned address by
    /// [`client_port_hash`] of its source (port 0 for an address-steered
    /// listener); any other (a backend's reply straight to the client) by
    /// [`client_port_hash`] of its destination (port 0 from an
    /// address-steered endpoint).
    pub fn owner(&self, key: &FlowKey) -> WorkerId {
        if self.workers <= 1 {
            return 0;
        }
        if let Some(w) = self.snat_reply_owner(&self.snat_addrs, &self.snat_listeners, key) {
            return w;
        }
        let (client, port) = if in_ranges(&self.owned, u32::from(key.dst_ip)) {
            client_side(&self.affinity_listeners, key)
        } else {
            client_side(&self.affinity_endpoints, &key.reversed())
        };
        client_port_hash(client, port, self.workers)
    }

    /// The worker owning an IPv6 TCP/UDP packet with this key, by the rule
    /// alone: [`Self::owner`]'s decisions over the IPv6 lists, clients by
    /// [`client_hash6`].
    pub fn owner6(&self, key: &FlowKey6) -> WorkerId {
        if self.workers <= 1 {
            return 0;
        }
        if let Some(w) = self.snat_reply_owner(&self.snat_addrs6, &self.snat_listeners6, key) {
            return w;
        }
        let (client, port) = if in_ranges(&self.owned6, key.dst_ip.to_bits()) {
            client_side(&self.affinity_listeners6, key)
        } else {
            client_side(&self.affinity_endpoints6, &key.reversed())
        };
        client_port_hash6(client, port, self.workers)
    }

    /// The SNAT port slice's worker when `key` is a reply to an SNAT tuple
    /// (its destination in `addrs`, its port in the range, no listener of
    /// `listeners` there), of either family.
    fn snat_reply_owner<A: Ord + Copy>(
        &self,
        addrs: &[A],
        listeners: &[(Proto, A, u16)],
        key: &FlowKeyOf<A>,
    ) -> Option<WorkerId> {
        let reply = addrs.binary_search(&key.dst_ip).is_ok()
            && self.snat_ports.contains(&key.dst_port)
            && listeners
                .binary_search(&(key.proto, key.dst_ip, key.dst_port))
                .is_err();
        reply.then(|| {
            crate::snat::owner_of_port(
                self.snat_ports.clone(),
                key.dst_port,
                usize::from(self.workers),
            )
            .map_or(0, |w| w as WorkerId)
        })
    }
}

/// The client address and the port to hash with it for `key`, a packet
/// from the client (the source) to a listener or, reversed, to a backend
/// endpoint: port 0 (the address alone) when `(proto, dst, dst port)` is in
/// `address_steered`, else the client port.
fn client_side<A: Ord + Copy>(address_steered: &[(Proto, A, u16)], key: &FlowKeyOf<A>) -> (A, u16) {
    let by_addr = address_steered
        .binary_search(&(key.proto, key.dst_ip, key.dst_port))
        .is_ok();
    (key.src_ip, if by_addr { 0 } else { key.src_port })
}

/// Sort and dedup the SNAT addresses and the listeners on them, leaving
/// out listeners with a port outside `ports`.
fn sort_snat<A: Ord>(
    addrs: &mut Vec<A>,
    listeners: &mut Vec<(Proto, A, u16)>,
    ports: &RangeInclusive<u16>,
) {
    addrs.sort_unstable();
    addrs.dedup();
    listeners.retain(|(_, _, p)| ports.contains(p));
    listeners.sort_unstable();
    listeners.dedup();
}

/// Ascending addresses as inclusive ranges: `a` joins the last range
/// `(lo, hi)` when it repeats `hi` or `joins(lo, hi, a)`.
fn merge<N: Copy + Eq>(
    sorted: impl Iterator<Item = N>,
    joins: impl Fn(N, N, N) -> bool,
) -> Vec<(N, N)> {
    let mut ranges: Vec<(N, N)> = Vec::new();
    for a in sorted {
        match ranges.last_mut() {
            Some((lo, hi)) if *hi == a || joins(*lo, *hi, a) => *hi = a,
            _ => ranges.push((a, a)),
        }
    }
    ranges
}

/// Cut `v` to `max` entries; whether it was longer.
fn cut<T>(v: &mut Vec<T>, max: usize) -> bool {
    let longer = v.len() > max;
    v.truncate(max);
    longer
}

/// Whether `a` lies in one of the ascending, disjoint `ranges`.
fn in_ranges<N: Copy + Ord>(ranges: &[(N, N)], a: N) -> bool {
    let i = ranges.partition_point(|&(lo, _)| lo <= a);
    i > 0 && ranges.get(i - 1).is_some_and(|&(_, hi)| a <= hi)
}
