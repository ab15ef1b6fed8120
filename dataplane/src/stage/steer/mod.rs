//! The steering stage: which worker owns each packet's flow. A packet
//! another worker owns gets [`Verdict::Handoff`] and goes to that worker's
//! handoff ring; the rest of the pipeline runs on the owner only, so every
//! flow lives in exactly one worker's conntrack.
//!
//! Frames another worker handed over are not steered again (see
//! [`super::Pipeline::process`]), so a frame never bounces between workers
//! that momentarily disagree (two snapshots in flight).
//!
//! The owner function is also what the drivers steer by before the packet
//! reaches a worker ([`Steering::rule`], see [`crate::steering`]): a
//! client's flows by [`client_port_hash`] of the client address and port
//! (port 0, the address alone, for the address-steered services of
//! [`crate::steering::AffinityTuples`]: ClientIP affinity), replies to an
//! SNAT address by the SNAT port's slice.

#[cfg(test)]
mod tests;

use crate::counters::Counters;
use crate::flow::{FlowKey, FlowKey6, FlowKeyOf};
use crate::packet::{PacketKind, PacketMeta, Verdict, WorkerId};
use crate::snapshot::Snapshot;
use crate::steering::{
    AffinityFamily, AffinityTuples, SteeringRule, client_port_hash, client_port_hash6,
};
use std::hash::Hash;
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
    /// Client-side packets are owned by the hash of the client address and
    /// port (the address alone for an address-steered listener); replies to
    /// an SNAT address by the worker owning the SNAT port's slice (the
    /// allocator of that worker handed the port out); replies straight to a
    /// client (no SNAT) by the same hash of the client's address and port
    /// (the address alone from an address-steered endpoint), the worker
    /// that owns the client's original direction.
    #[inline]
    pub fn owner(&self, key: &FlowKey, snap: &Snapshot) -> WorkerId {
        self.owner_by(key, snap).0
    }

    /// Owner of an IPv6 TCP/UDP packet with this key: replies to an IPv6
    /// SNAT tuple by the SNAT port's slice, everything else by
    /// [`client_port_hash6`] of the client address and port (the source;
    /// for a packet to an address the gateway does not own, the
    /// destination), as [`Steering::owner`] decides. The drivers' programs
    /// compute the same ([`SteeringRule::owner6`]).
    pub fn owner6(&self, key: &FlowKey6, snap: &Snapshot) -> WorkerId {
        self.owner6_by(key, snap).0
    }

    /// [`Steering::owner6`], and whether the owner is by the SNAT port's
    /// slice (else by the client address).
    pub fn owner6_by(&self, key: &FlowKey6, snap: &Snapshot) -> (WorkerId, bool) {
        match snap.owned6(key.dst_ip) {
            Some(o)
                if o.snat
                    && self.snat_ports.contains(&key.dst_port)
                    && snap
                        .listener6(key.proto, key.dst_ip, key.dst_port)
                        .is_none() =>
            {
                let w = crate::snat::owner_of_port(
                    self.snat_ports.clone(),
                    key.dst_port,
                    usize::from(self.workers),
                );
                (w.map_or(self.worker, |w| w as WorkerId), true)
            }
            o => {
                let (client, port) = client_side(snap, key, o.is_some());
                (client_port_hash6(client, port, self.workers), false)
            }
        }
    }

    /// The steering facts of `snap` for these workers (the owner function
    /// as a driver's program computes it). Cold path (a snapshot change):
    /// allocates, walks the owned addresses of both families and, when an
    /// SNAT address is also a node or VIP address (IPv6: any SNAT address),
    /// the listeners.
    pub fn rule(&self, snap: &Snapshot) -> SteeringRule {
        let mut owned = Vec::with_capacity(snap.owned.len());
        let mut snat = Vec::new();
        let mut shared = Vec::new();
        for (addr, o) in snap.owned.iter() {
            owned.push(*addr);
            if o.snat {
                snat.push(*addr);
                if o.node || o.vip {
                    shared.push(*addr);
                }
            }
        }
        let listeners = if shared.is_empty() {
            Vec::new()
        } else {
            snap.listeners
                .iter()
                .filter(|(k, _)| shared.contains(&k.addr))
                .map(|(k, _)| (k.proto, k.addr, k.port))
                .collect()
        };
        let mut owned6 = Vec::with_capacity(snap.owned6.len());
        let mut snat6 = Vec::new();
        for (addr, o) in snap.owned6.iter() {
            owned6.push(*addr);
            if o.snat {
                snat6.push(*addr);
            }
        }
        // `owner6_by` asks for a listener on any SNAT address.
        let listeners6 = if snat6.is_empty() {
            Vec::new()
        } else {
            snap.listeners6
                .iter()
                .filter(|(k, _)| snat6.contains(&k.addr))
                .map(|(k, _)| (k.proto, k.addr, k.port))
                .collect()
        };
        SteeringRule::new(
            self.workers,
            self.snat_ports.clone(),
            owned,
            snat,
            listeners,
        )
        .with_ipv6(owned6, snat6, listeners6)
        .with_affinity(&snap.affinity)
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
            o => {
                let (client, port) = client_side(snap, key, o.is_some());
                (client_port_hash(client, port, self.workers), false)
            }
        }
    }
}

/// The client address of `key` and the port to hash with it: the source
/// when the destination is an owned address (`to_owned`), else the
/// destination (a backend's reply straight to the client); port 0 (the
/// address alone) when the listener, or the replying endpoint, is
/// address-steered ([`crate::steering::AffinityTuples`]).
#[inline]
fn client_side<A: Copy + Eq + Hash>(snap: &Snapshot, key: &FlowKeyOf<A>, to_owned: bool) -> (A, u16)
where
    AffinityTuples: AffinityFamily<A>,
{
    let a = &snap.affinity;
    if to_owned {
        let by_addr = a.listener(key.proto, key.dst_ip, key.dst_port);
        (key.src_ip, if by_addr { 0 } else { key.src_port })
    } else {
        let by_addr = a.endpoint(key.proto, key.src_ip, key.src_port);
        (key.dst_ip, if by_addr { 0 } else { key.dst_port })
    }
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
            PacketKind::Arp | PacketKind::IcmpEcho | PacketKind::Ndp => continue,
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
