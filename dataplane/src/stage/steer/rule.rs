//! [`SteeringRule`]: the owner function of [`Steering::owner`] flattened
//! into the few facts a packet classifier in the kernel can test without
//! the snapshot (sorted address lists, a port range, a worker count), so a
//! driver can deliver each packet to the worker that owns its flow in the
//! first place and the handoff rings carry only the exceptions.
//!
//! Invariant (tested in `tests.rs` on random tuples): for every TCP/UDP
//! key, [`SteeringRule::owner`] equals [`Steering::owner`] with the
//! snapshot the rule was taken from, as long as the rule is not
//! [`SteeringRule::truncated`]. The drivers' programs (af_packet's fanout
//! program, `driver/afpacket/steering.rs`) compute `SteeringRule::owner`
//! and are tested against it; a truncated rule (more listeners or owned
//! address ranges than a program may hold) only costs handoffs, never
//! correctness, since the worker still steers with [`Steering::owner`].

use super::{Steering, client_hash};
use crate::flow::{FlowKey, Proto};
use crate::packet::WorkerId;
use crate::snapshot::Snapshot;
use std::net::Ipv4Addr;
use std::ops::RangeInclusive;

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
    /// The rule of `snap` for `steering`'s worker count and SNAT ports.
    /// Cold path (a snapshot change): allocates, walks the owned addresses
    /// and, when an SNAT address is also a node or VIP address, the
    /// listeners.
    pub fn from_snapshot(snap: &Snapshot, steering: &Steering) -> Self {
        let mut owned: Vec<u32> = Vec::with_capacity(snap.owned.len());
        let mut snat_addrs = Vec::new();
        let mut shared = Vec::new();
        for (addr, o) in snap.owned.iter() {
            owned.push(u32::from(*addr));
            if o.snat {
                snat_addrs.push(*addr);
                if o.node || o.vip {
                    shared.push(*addr);
                }
            }
        }
        owned.sort_unstable();
        snat_addrs.sort_unstable();
        let mut snat_listeners: Vec<(Proto, Ipv4Addr, u16)> = if shared.is_empty() {
            Vec::new()
        } else {
            snap.listeners
                .iter()
                .map(|(k, _)| (k.proto, k.addr, k.port))
                .filter(|(_, a, p)| shared.contains(a) && steering.snat_ports.contains(p))
                .collect()
        };
        snat_listeners.sort_unstable();
        let mut ranges: Vec<(u32, u32)> = Vec::new();
        for a in owned {
            match ranges.last_mut() {
                Some((_, hi)) if hi.checked_add(1) == Some(a) || *hi == a => *hi = a,
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
            workers: steering.workers,
            snat_ports: steering.snat_ports.clone(),
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
