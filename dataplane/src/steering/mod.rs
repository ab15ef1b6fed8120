//! Flow ownership as facts a packet classifier in the kernel can test:
//! [`client_hash`] (the owner of a client's flows) and [`SteeringRule`],
//! the workers' owner function (`stage::steer`, `Steering::owner`)
//! flattened into sorted address lists, a port range and a worker count,
//! so a driver can deliver each packet to the worker that owns its flow in
//! the first place and the handoff rings carry only the exceptions.
//!
//! Invariants: for every TCP/UDP key, [`SteeringRule::owner`] equals the
//! worker's owner function with the snapshot the rule was taken from
//! (`Steering::rule`; tested in `stage/steer/tests.rs` on random tuples),
//! as long as the rule is not [`SteeringRule::truncated`]. The drivers'
//! programs (af_packet's fanout program, `driver/afpacket/steering/`)
//! compute [`SteeringRule::owner`] and are tested against it. A truncated
//! rule (more entries than a program may hold) only costs handoffs, never
//! correctness: the worker still decides ownership itself.
//!
//! Ownership is not Maglev's stable hash: that one picks backends and must
//! agree across instances; ownership only matters inside one process, and
//! [`client_hash`] is chosen so classic BPF (32-bit arithmetic) computes it.

#[cfg(test)]
pub(crate) mod tests;

use crate::flow::{FlowKey, Proto};
use crate::packet::WorkerId;
use std::net::Ipv4Addr;
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

/// Most SNAT addresses a rule lists (beyond: treated as plain owned).
pub const MAX_SNAT_ADDRS: usize = 64;
/// Most listeners on shared SNAT + node/VIP addresses a rule lists.
pub const MAX_SNAT_LISTENERS: usize = 128;
/// Most merged ranges of owned addresses a rule lists.
pub const MAX_OWNED_RANGES: usize = 768;

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
        snat_addrs.sort_unstable();
        snat_addrs.dedup();
        snat_listeners.retain(|(_, _, p)| snat_ports.contains(p));
        snat_listeners.sort_unstable();
        snat_listeners.dedup();
        let mut ranges: Vec<(u32, u32)> = Vec::new();
        for a in owned.into_iter().map(u32::from) {
            match ranges.last_mut() {
                Some((_, hi)) if *hi == a || hi.checked_add(1) == Some(a) => *hi = a,
                _ => ranges.push((a, a)),
            }
        }
        let truncated = snat_addrs.len() > MAX_SNAT_ADDRS
            || snat_listeners.len() > MAX_SNAT_LISTENERS
            || ranges.len() > MAX_OWNED_RANGES;
        snat_addrs.truncate(MAX_SNAT_ADDRS);
        snat_listeners.truncate(MAX_SNAT_LISTENERS);
        ranges.truncate(MAX_OWNED_RANGES);
        SteeringRule {
            workers,
            snat_ports,
            snat_addrs,
            snat_listeners,
            owned: ranges,
            truncated,
        }
    }

    /// The worker owning a TCP/UDP packet with this key, by the rule alone
    /// (the function the drivers' programs compute).
    pub fn owner(&self, key: &FlowKey) -> WorkerId {
        if self.workers <= 1 {
            return 0;
        }
        if self.snat_addrs.binary_search(&key.dst_ip).is_ok()
            && self.snat_ports.contains(&key.dst_port)
            && self
                .snat_listeners
                .binary_search(&(key.proto, key.dst_ip, key.dst_port))
                .is_err()
        {
            return crate::snat::owner_of_port(
                self.snat_ports.clone(),
                key.dst_port,
                usize::from(self.workers),
            )
            .map_or(0, |w| w as WorkerId);
        }
        if self.is_owned(key.dst_ip) {
            client_hash(key.src_ip, self.workers)
        } else {
            client_hash(key.dst_ip, self.workers)
        }
    }

    fn is_owned(&self, addr: Ipv4Addr) -> bool {
        let a = u32::from(addr);
        let i = self.owned.partition_point(|&(lo, _)| lo <= a);
        i > 0 && self.owned.get(i - 1).is_some_and(|&(_, hi)| a <= hi)
    }
}
