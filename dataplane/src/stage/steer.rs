//! The steering stage: which worker owns each packet's flow. A packet
//! another worker owns gets [`Verdict::Handoff`] and goes to that worker's
//! handoff ring; the rest of the pipeline runs on the owner only, so every
//! flow lives in exactly one worker's conntrack.
//!
//! Frames another worker handed over are not steered again (see
//! [`super::Pipeline::process`]), so a frame never bounces between workers
//! that momentarily disagree (two snapshots in flight).

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
    pub fn owner(&self, key: &FlowKey, snap: &Snapshot) -> WorkerId {
        if self.workers <= 1 {
            return self.worker;
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
                crate::snat::owner_of_port(
                    self.snat_ports.clone(),
                    key.dst_port,
                    self.workers as usize,
                )
                .map_or(self.worker, |w| w as WorkerId)
            }
            Some(_) => client_hash(key.src_ip, self.workers),
            None => client_hash(key.dst_ip, self.workers),
        }
    }
}

/// The worker owning a client: by its address alone, so every connection of
/// a client lives on one core and ClientIP affinity is exact (drivers that
/// steer in hardware hash on addresses only, e.g. RSS without L4 ports).
#[inline]
fn client_hash(ip: Ipv4Addr, workers: u8) -> WorkerId {
    let x = u64::from(u32::from(ip)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    ((x >> 32) % u64::from(workers.max(1))) as WorkerId
}

/// Mark every pending packet another worker owns for handoff. ARP and ICMP
/// echo stay here (answered by the local stage, whoever receives them).
#[inline]
pub fn run(steering: &Steering, snap: &Snapshot, metas: &mut [PacketMeta]) {
    if steering.workers <= 1 {
        return;
    }
    for m in metas.iter_mut().filter(|m| m.is_pending()) {
        let owner = match m.kind {
            PacketKind::Tcp | PacketKind::Udp => steering.owner(&m.key, snap),
            PacketKind::IcmpError => steering.owner(&m.key.reversed(), snap),
            PacketKind::Arp | PacketKind::IcmpEcho => steering.worker,
        };
        if owner != steering.worker {
            m.verdict = Verdict::Handoff(owner);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::Proto;
    use crate::snapshot::{
        AddrRole, ListenerKind, PortSpec, ServiceSpec, SnapshotBuilder, SnapshotSpec,
    };

    #[test]
    fn steering_splits_clients_and_snat_replies_on_a_shared_node_and_snat_address() {
        let node = Ipv4Addr::new(192, 0, 2, 1);
        let mut svc = ServiceSpec::new("web", Proto::Tcp, Ipv4Addr::new(203, 0, 113, 10), 80);
        svc.listeners.push((node, 30080, ListenerKind::NodePort));
        let snap = SnapshotBuilder::new()
            .build(&SnapshotSpec {
                ports: vec![PortSpec {
                    mac: [2, 0, 0, 0, 0, 1],
                    mtu: 1500,
                    mss_clamp: None,
                }],
                vip_port: 0,
                addresses: vec![(node, 0, AddrRole::Node), (node, 0, AddrRole::Snat)],
                routes: Vec::new(),
                neighbours: Vec::new(),
                services: vec![svc],
                maglev_table_size: 251,
            })
            .unwrap();
        let steer = |worker| Steering {
            worker,
            workers: 4,
            snat_ports: 1024..=65535,
        };
        // Clients of the NodePort spread over workers by client address.
        let owners: std::collections::HashSet<_> = (1..=64u8)
            .map(|c| {
                let k = FlowKey::new(
                    Proto::Tcp,
                    Ipv4Addr::new(198, 51, 100, c),
                    40000,
                    node,
                    30080,
                );
                steer(0).owner(&k, &snap)
            })
            .collect();
        assert_eq!(owners.len(), 4);
        // A backend's reply to an SNAT port goes to the port's slice owner.
        for port in [1024u16, 20000, 40000, 65535] {
            let k = FlowKey::new(Proto::Tcp, Ipv4Addr::new(10, 1, 0, 10), 8080, node, port);
            let expected = crate::snat::owner_of_port(1024..=65535, port, 4).unwrap() as WorkerId;
            assert_eq!(steer(1).owner(&k, &snap), expected);
        }
    }
}
