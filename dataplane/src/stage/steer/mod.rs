//! The steering stage: which worker owns each packet's flow. A packet
//! another worker owns gets [`Verdict::Handoff`] and goes to that worker's
//! handoff ring; the rest of the pipeline runs on the owner only, so every
//! flow lives in exactly one worker's conntrack.
//!
//! Frames another worker handed over are not steered again (see
//! [`super::Pipeline::process`]), so a frame never bounces between workers
//! that momentarily disagree (two snapshots in flight).
//!
//! The owner function is what the drivers steer by before the packet
//! reaches a worker ([`SteeringRule`], `rule.rs`): a client's flows by
//! [`client_hash`] of the client address (a 32-bit multiply and shift, so a
//! classic-BPF fanout program computes it too), replies to an SNAT address
//! by the SNAT port's slice. Maglev's stable hash is not involved: it
//! chooses backends and must agree across instances, ownership only within
//! one process.

mod rule;
#[cfg(test)]
pub(crate) mod tests;

pub use rule::{MAX_OWNED_RANGES, MAX_SNAT_ADDRS, MAX_SNAT_LISTENERS, SteeringRule};

use crate::counters::Counters;
use crate::flow::FlowKey;
use crate::packet::{PacketKind, PacketMeta, Verdict, WorkerId};
use crate::snapshot::Snapshot;
use std::net::Ipv4Addr;
use std::ops::RangeInclusive;

/// Which worker owns a packet's flow.
#[derive(Clone, Debug)]
pub struct Steering {
    pub worker: WorkerId,
    pub workers: u8,
    pub snat_ports: RangeInclusive<u16>,
}

impl Steering {
    /// Owner of a TCP/UDP packet with this (outer or inner-reversed) key.
    ///
    /// Client-side packets are owned by the hash of the client address;
    /// replies to an SNAT address by the worker owning the SNAT port's slice
    /// (the allocator of that worker handed the port out); replies straight
    /// to a client (no SNAT) by the client's hash, the same worker that owns
    /// the client's original direction.
    #[inline]
    pub fn owner(&self, key: &FlowKey, snap: &Snapshot) -> WorkerId {
        self.owner_by(key, snap).0
    }

    /// [`Self::owner`], and whether the SNAT port's slice decided it.
    fn owner_by(&self, key: &FlowKey, snap: &Snapshot) -> (WorkerId, bool) {
        if self.workers <= 1 {
            return (self.worker, false);
        }
        match snap.owned(key.dst_ip) {
            // A reply to an SNAT tuple: the worker whose slice holds the port.
            // (An address that is also a node or VIP address carries client
            // traffic too: that is recognised by its listener.)
            Some(o)
                if o.snat
                    && self.snat_ports.contains(&key.dst_port)
                    && !((o.node || o.vip)
                        && snap.listener(key.proto, key.dst_ip, key.dst_port).is_some()) =>
            {
                let w = crate::snat::owner_of_port(
                    self.snat_ports.clone(),
                    key.dst_port,
                    self.workers as usize,
                )
                .map_or(self.worker, |w| w as WorkerId);
                (w, true)
            }
            Some(_) => (client_hash(key.src_ip, self.workers), false),
            None => (client_hash(key.dst_ip, self.workers), false),
        }
    }
}

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

/// Mark every pending packet another worker owns for handoff, counted by
/// cause (`handoff_snat_reply`, `handoff_client`, `handoff_icmp_error`).
/// ARP and ICMP echo stay here (answered by the local stage, whoever
/// receives them).
#[inline]
pub fn run(steering: &Steering, snap: &Snapshot, metas: &mut [PacketMeta], c: &mut Counters) {
    if steering.workers <= 1 {
        return;
    }
    for m in metas.iter_mut().filter(|m| m.is_pending()) {
        let (owner, by_slice) = match m.kind {
            PacketKind::Tcp | PacketKind::Udp => steering.owner_by(&m.key, snap),
            PacketKind::IcmpError => (steering.owner(&m.key.reversed(), snap), false),
            PacketKind::Arp | PacketKind::IcmpEcho => continue,
        };
        if owner != steering.worker {
            m.verdict = Verdict::Handoff(owner);
            match (m.kind, by_slice) {
                (PacketKind::IcmpError, _) => c.handoff_icmp_error += 1,
                (_, true) => c.handoff_snat_reply += 1,
                (_, false) => c.handoff_client += 1,
            }
        }
    }
}
