//! The IPv6 part of the fixture: a node address on the outside port, an
//! SNAT address on the inside one, the backends' /64 with static
//! neighbours, "web6" (TCP VIP6:80 and NodePort NODE6:30080, full NAT) and
//! "dns6" (UDP VIP6:53, client address preserved).
//!
//! ```text
//! client 2001:db8::7 -- port 0 [gateway] port 1 -- fd00:1::/64 backends fd00:1::10..
//! VIP6 2001:db8:ffff::10, NODE6 2001:db8:ffff::1, SNAT6 fd00:1::1
//! ```

use super::*;
use dataplane::wire::build;
use dataplane::wire::tcp::flags as F;
use std::net::{Ipv6Addr, SocketAddr};

pub const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 7);
pub const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 0x10);
pub const NODE6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 1);
pub const SNAT6: Ipv6Addr = Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 1);
pub const CLIENT_MAC6: MacAddr = MacAddr([0x02, 0xcc, 0, 0, 0, 0x07]);

pub fn backend6(i: u16) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0x10 + i)
}

pub fn backend6_mac(i: u16) -> MacAddr {
    MacAddr([0x02, 0xbb, 0x66, 0, 0, 0x10 + i as u8])
}

/// The MAC of the IPv6 backend at `addr`.
pub fn backend6_mac_of(addr: Ipv6Addr) -> MacAddr {
    backend6_mac(addr.segments()[7] - 0x10)
}

/// web6: VIP6:80 and NODE6:30080 → backends :8080, full NAT.
pub fn web6(backends: &[u16]) -> ServiceSpec {
    let mut s = ServiceSpec::new("web6", Proto::Tcp, VIP6, 80);
    s.listeners
        .push((NODE6.into(), NODE_PORT, ListenerKind::NodePort));
    for &b in backends {
        s = s.endpoint(SocketAddr::new(backend6(b).into(), 8080));
    }
    s
}

/// dns6: VIP6:53 → backends :5353, client address preserved.
pub fn dns6(backends: &[u16]) -> ServiceSpec {
    let mut s = ServiceSpec::new("dns6", Proto::Udp, VIP6, 53);
    s.snat = false;
    for &b in backends {
        s = s.endpoint(SocketAddr::new(backend6(b).into(), 5353));
    }
    s
}

/// The IPv4 fixture plus a node address on the outside, an SNAT address
/// on the inside, the backends' /64 and their static neighbours.
pub fn spec6(services: Vec<ServiceSpec>) -> SnapshotSpec {
    let mut s = spec(services);
    s.addresses.push((NODE6.into(), OUTSIDE, AddrRole::Node));
    s.addresses.push((SNAT6.into(), INSIDE, AddrRole::Snat));
    s.routes.push(Route {
        dest: Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0).into(),
        prefix_len: 64,
        port: INSIDE,
        via: None,
    });
    for i in 0..4 {
        s.neighbours.push(NeighbourSpec {
            addr: backend6(i).into(),
            mac: backend6_mac(i).0,
        });
    }
    s
}

pub fn gateway6() -> Gateway {
    Gateway::with_spec(
        spec6(vec![web(&[0]), web6(&[0]), dns6(&[1])]),
        pipeline_config(0, 1),
    )
}

pub fn client_syn6(dst: Ipv6Addr, dport: u16, sport: u16, payload: &[u8]) -> Vec<u8> {
    build::eth_ipv6_tcp(
        CLIENT_MAC6,
        OUT_MAC,
        (CLIENT6, sport),
        (dst, dport),
        F::SYN,
        1000,
        0,
        payload,
    )
}

/// `frame` (Ethernet + IPv6) with its hop limit set.
pub fn with_hop(mut frame: Vec<u8>, hop: u8) -> Vec<u8> {
    frame[14 + 7] = hop;
    frame
}

/// An Ethernet/IPv6/TCP frame built from scratch with options, window and
/// hop limit (checksum over the IPv6 pseudo-header).
#[allow(clippy::too_many_arguments)]
pub fn tcp6(
    macs: (MacAddr, MacAddr),
    (src, sport): (Ipv6Addr, u16),
    (dst, dport): (Ipv6Addr, u16),
    flags: u8,
    (seq, ack): (u32, u32),
    window: u16,
    options: &[u8],
    payload: &[u8],
    hop: u8,
) -> Vec<u8> {
    let mut seg = tcp_segment((sport, dport), flags, (seq, ack), window, options, payload);
    let csum = dataplane::wire::checksum::l4_checksum_v6(src, dst, 6, &seg);
    seg[16..18].copy_from_slice(&csum.to_be_bytes());
    let ip = build::ipv6_packet(src, dst, 6, hop, &seg);
    build::ethernet_frame(
        macs.0,
        macs.1,
        dataplane::wire::ethernet::ethertype::IPV6,
        &ip,
    )
}

/// The sequence number of an Ethernet/IPv6 (no extension headers)/TCP
/// frame.
pub fn seq6_of(frame: &[u8]) -> u32 {
    u32::from_be_bytes(frame[58..62].try_into().unwrap())
}
