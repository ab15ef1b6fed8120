//! The IPv6 half of the bench rig: `web6` on [`VIP6`]:80 with IPv6
//! backends, full NAT from IPv6 SNAT addresses, the frames of IPv6 client
//! flows and of their backends' replies.

use crate::{IN_MAC, INSIDE, OUT_MAC, ROUTER_MAC, Rig, RigConfig, backend_mac, pad};
use dataplane::flow::{FlowKey6, Proto};
use dataplane::snapshot::{AddrRole, NeighbourSpec, Route, ServiceSpec, SnapshotSpec};
use dataplane::wire::build;
use std::net::{Ipv6Addr, SocketAddr};

pub const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 0x10);

pub fn backend6(i: u32) -> Ipv6Addr {
    Ipv6Addr::from(u128::from(Ipv6Addr::new(0xfd00, 1, 1, 0, 0, 0, 0, 0)) + u128::from(i))
}

/// The i-th distinct IPv6 client's source (address, port).
pub fn client6(i: u32) -> (Ipv6Addr, u16) {
    let base = u128::from(Ipv6Addr::new(0x2001, 0xdb8, 0x64, 0, 0, 0, 0, 0));
    (
        Ipv6Addr::from(base + u128::from(i / 50_000)),
        10_000 + (i % 50_000) as u16,
    )
}

/// `web6`, the IPv6 SNAT addresses, the backends' route and neighbours.
pub fn add_to_spec(spec: &mut SnapshotSpec, cfg: &RigConfig) {
    let mut web6 = ServiceSpec::new("web6", Proto::Tcp, VIP6, 80);
    for b in 0..cfg.backends {
        web6 = web6.endpoint(SocketAddr::new(backend6(b).into(), 8080));
        spec.neighbours.push(NeighbourSpec {
            addr: backend6(b).into(),
            mac: backend_mac(b).0,
        });
    }
    spec.services.push(web6);
    for i in 0..u16::from(cfg.snat_addrs) {
        spec.addresses.push((
            Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 1 + i).into(),
            INSIDE,
            AddrRole::Snat,
        ));
    }
    spec.routes.push(Route {
        dest: Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0).into(),
        prefix_len: 32,
        port: INSIDE,
        via: None,
    });
}

/// Client → VIP6 TCP segment of IPv6 flow `i` (74 bytes).
pub fn client_tcp6(i: u32, flags: u8, seq: u32, ack: u32) -> Vec<u8> {
    let (ip, port) = client6(i);
    pad(build::eth_ipv6_tcp(
        ROUTER_MAC,
        OUT_MAC,
        (ip, port),
        (VIP6, 80),
        flags,
        seq,
        ack,
        b"",
    ))
}

/// Backend → SNAT TCP segment for an IPv6 flow's reply key.
pub fn backend_frame6(reply: &FlowKey6, flags: u8) -> Vec<u8> {
    let i = (u128::from(reply.src_ip) - u128::from(backend6(0))) as u32;
    build::eth_ipv6_tcp(
        backend_mac(i),
        IN_MAC,
        (reply.src_ip, reply.src_port),
        (reply.dst_ip, reply.dst_port),
        flags,
        2,
        2,
        b"",
    )
}

impl Rig {
    /// Reply key of IPv6 client flow `i`.
    pub fn reply_key6(&self, i: u32) -> FlowKey6 {
        let (ip, port) = client6(i);
        let key = FlowKey6::new(Proto::Tcp, ip, port, VIP6, 80);
        let ct = &self
            .worker
            .pipeline()
            .ipv6()
            .expect("a rig with `ipv6` has IPv6 tables")
            .ct;
        let (id, _) = ct.lookup(&key, ct.hash(&key)).expect("flow is tracked");
        *ct.flow(id).reply()
    }
}
