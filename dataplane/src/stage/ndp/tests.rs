//! Golden frames and the answers to each kind of NDP message.

use super::*;
use crate::flow::{FlowKey6, Proto};
use crate::neighbour::{NeighbourTable, Resolution};
use crate::packet::{Family, PacketKind};
use crate::snapshot::PortInfo;
use crate::wire::build;

const PORT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const CLIENT_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 7]);
const NODE: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
const VIP: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x100);
const CLIENT: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 7);

/// The ICMPv6 checksum over the IPv6 pseudo-header (RFC 8200 §8.1),
/// computed here from scratch, independently of `wire::checksum`.
fn reference_checksum(src: Ipv6Addr, dst: Ipv6Addr, msg: &[u8]) -> u16 {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&src.octets());
    bytes.extend_from_slice(&dst.octets());
    bytes.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    bytes.extend_from_slice(&[0, 0, 0, 58]);
    bytes.extend_from_slice(msg);
    bytes[40 + 2..40 + 4].fill(0);
    if bytes.len() % 2 == 1 {
        bytes.push(0);
    }
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Check the IPv6 header and both checksum computations of an NDP
/// frame; returns its ICMPv6 message.
fn checked(frame: &[u8]) -> &[u8] {
    let ip = ipv6::Packet::new_checked(&frame[14..]).unwrap();
    assert_eq!((ip.next_header(), ip.hop_limit()), (58, 255));
    let msg = &frame[54..];
    assert_eq!(usize::from(ip.payload_len()), msg.len());
    let carried = u16::from_be_bytes([msg[2], msg[3]]);
    assert_eq!(
        carried,
        reference_checksum(ip.src_addr(), ip.dst_addr(), msg)
    );
    assert!(
        icmpv6::Packet::new_checked(msg)
            .unwrap()
            .verify_checksum(ip.src_addr(), ip.dst_addr())
    );
    msg
}

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn a_solicitation_goes_to_the_solicited_node_group_golden() {
    let target: Ipv6Addr = "2001:db8::abcd:ef01".parse().unwrap();
    let mut buf = [0u8; NDP_FRAME_BYTES];
    let len = write_solicit(&mut buf, PORT_MAC, NODE, target);
    let mut want = hex("3333ffcdef01 020000000001 86dd 60000000 0020 3a ff");
    want.extend_from_slice(&NODE.octets());
    want.extend_from_slice(&hex("ff02 0000 0000 0000 0000 0001 ffcd ef01"));
    want.extend_from_slice(&hex("87 00 918c 00000000"));
    want.extend_from_slice(&target.octets());
    want.extend_from_slice(&hex("01 01 020000000001"));
    assert_eq!(&buf[..len], &want[..]);
    checked(&buf[..len]);
    assert_eq!(
        ndp::parse(NODE, ndp::solicited_node(target), 255, &buf[54..len]),
        Ok(ndp::Message::Solicit(ndp::Solicit {
            target,
            source_mac: Some(MacAddr(PORT_MAC))
        }))
    );
}

#[test]
fn a_solicitation_without_a_source_address_carries_no_option() {
    let target: Ipv6Addr = "2001:db8::abcd:ef01".parse().unwrap();
    let mut buf = [0u8; NDP_FRAME_BYTES];
    let len = write_solicit(&mut buf, PORT_MAC, Ipv6Addr::UNSPECIFIED, target);
    assert_eq!(len, 14 + 40 + 24);
    let msg = checked(&buf[..len]);
    assert_eq!(&msg[..4], &[135, 0, 0xc2, 0x50], "golden checksum");
    assert_eq!(
        ndp::parse(Ipv6Addr::UNSPECIFIED, ndp::solicited_node(target), 255, msg),
        Ok(ndp::Message::Solicit(ndp::Solicit {
            target,
            source_mac: None
        }))
    );
}

/// The advertisement of `VIP` at `PORT_MAC`, written out by hand: to
/// `eth_dst`/`dst`, its ICMPv6 header and flags `head` (type, code,
/// checksum, flags and reserved, in hex).
fn golden_advert(eth_dst: &str, dst: Ipv6Addr, head: &str) -> Vec<u8> {
    let mut want = hex(eth_dst);
    want.extend_from_slice(&hex("020000000001 86dd 60000000 0020 3a ff"));
    want.extend_from_slice(&VIP.octets());
    want.extend_from_slice(&dst.octets());
    want.extend_from_slice(&hex(head));
    want.extend_from_slice(&VIP.octets());
    want.extend_from_slice(&hex("02 01 020000000001"));
    want
}

#[test]
fn an_unsolicited_advertisement_goes_to_all_nodes_with_override_golden() {
    let mut buf = [0u8; NDP_FRAME_BYTES];
    let len = write_unsolicited_advert(&mut buf, PORT_MAC, VIP);
    let want = golden_advert("333300000001", ALL_NODES, "88 00 f72c 20000000");
    assert_eq!(&buf[..len], &want[..]);
    checked(&buf[..len]);
}

/// A frame in a buffer that can grow, like a driver's.
struct TestFrame(Vec<u8>, usize);

impl Frame for TestFrame {
    fn data(&self) -> &[u8] {
        &self.0[..self.1]
    }
    fn data_mut(&mut self) -> &mut [u8] {
        &mut self.0[..self.1]
    }
    fn truncate(&mut self, len: usize) {
        self.1 = self.1.min(len);
    }
    fn extend(&mut self, len: usize) -> bool {
        if len > self.0.len() {
            return false;
        }
        self.1 = self.1.max(len);
        true
    }
}

fn frame(bytes: &[u8]) -> TestFrame {
    let mut buf = bytes.to_vec();
    let len = buf.len();
    buf.resize(256, 0xee);
    TestFrame(buf, len)
}

/// What the parse stage hands over for an untagged NDP frame.
fn meta_of(frame: &[u8]) -> PacketMeta {
    let ip = ipv6::Packet::new_checked(&frame[14..]).unwrap();
    let mut meta = PacketMeta::empty(0);
    meta.kind = PacketKind::Ndp;
    meta.family = Family::V6;
    meta.l3_offset = 14;
    meta.l4_offset = 54;
    meta.l3_end = (54 + usize::from(ip.payload_len())) as u16;
    meta.icmp_type = frame[54];
    meta.key6 = FlowKey6::new(Proto::Icmp, ip.src_addr(), 0, ip.dst_addr(), 0);
    meta
}

fn snapshot(owned: &[(Ipv6Addr, OwnedAddr)]) -> Snapshot {
    let mut snap = Snapshot::empty(vec![
        PortInfo {
            mac: PORT_MAC,
            mtu: 1500,
            mss_clamp: None,
        };
        2
    ]);
    for &(addr, o) in owned {
        snap.owned6.insert(addr, o);
    }
    snap
}

const ANNOUNCED_VIP: OwnedAddr = OwnedAddr {
    port: 0,
    vip: true,
    node: false,
    snat: false,
    announce: true,
    host: false,
};

/// Run `answer` on `bytes`; the verdict, the frame after, whether the
/// table learned.
fn answer_frame(table: &NeighbourTable, snap: &Snapshot, bytes: &[u8]) -> (Verdict, Vec<u8>, bool) {
    let mut f = frame(bytes);
    let mut meta = meta_of(bytes);
    let learned = answer(&table.load(), 1_000, snap, &mut f, &mut meta);
    (meta.verdict, f.data().to_vec(), learned)
}

#[test]
fn a_solicitation_for_an_announced_vip_gets_a_solicited_advertisement_golden() {
    let table = NeighbourTable::default();
    let snap = snapshot(&[(VIP, ANNOUNCED_VIP)]);
    let ns = build::ndp_solicit(CLIENT_MAC, CLIENT, VIP);
    let (verdict, out, learned) = answer_frame(&table, &snap, &ns);
    assert_eq!(verdict, Verdict::Reply);
    assert!(!learned, "the client was not in the table");
    assert_eq!(
        out,
        golden_advert("020000000007", CLIENT, "88 00 8870 60000000")
    );
    checked(&out);
    // A client the table waits for is learned from its solicitation.
    table.resolve(0, CLIENT, 900);
    let (verdict, _, learned) = answer_frame(&table, &snap, &ns);
    assert_eq!((verdict, learned), (Verdict::Reply, true));
    assert_eq!(table.peek(0, CLIENT), Some(CLIENT_MAC.0));
}

#[test]
fn duplicate_address_detection_is_answered_for_owned_addresses_only() {
    let table = NeighbourTable::default();
    let snap = snapshot(&[(VIP, ANNOUNCED_VIP)]);
    // A DAD probe: from ::, no option (78 bytes: the answer grows it).
    let mut dad = [0u8; NDP_FRAME_BYTES];
    let len = write_solicit(&mut dad, CLIENT_MAC.0, Ipv6Addr::UNSPECIFIED, VIP);
    let (verdict, out, learned) = answer_frame(&table, &snap, &dad[..len]);
    assert_eq!((verdict, learned), (Verdict::Reply, false));
    assert_eq!(
        out,
        golden_advert("333300000001", ALL_NODES, "88 00 f72c 20000000"),
        "to all-nodes, Solicited clear"
    );
    checked(&out);
    // DAD of an address the gateway does not own: silence.
    let other: Ipv6Addr = "2001:db8::99".parse().unwrap();
    let len = write_solicit(&mut dad, CLIENT_MAC.0, Ipv6Addr::UNSPECIFIED, other);
    let (verdict, _, _) = answer_frame(&table, &snap, &dad[..len]);
    assert_eq!(verdict, Verdict::Drop(DropReason::NdpNotOwned));
}

#[test]
fn solicitations_are_answered_only_where_the_address_is_announced() {
    let table = NeighbourTable::default();
    let host: Ipv6Addr = "2001:db8::5".parse().unwrap();
    let elsewhere: Ipv6Addr = "2001:db8::101".parse().unwrap();
    let other_port: Ipv6Addr = "2001:db8:1::1".parse().unwrap();
    let snap = snapshot(&[
        (
            host,
            OwnedAddr {
                host: true,
                ..OwnedAddr::default()
            },
        ),
        (
            elsewhere,
            OwnedAddr {
                announce: false,
                ..ANNOUNCED_VIP
            },
        ),
        (
            other_port,
            OwnedAddr {
                port: 1,
                ..ANNOUNCED_VIP
            },
        ),
    ]);
    let ask = |target| {
        answer_frame(
            &table,
            &snap,
            &build::ndp_solicit(CLIENT_MAC, CLIENT, target),
        )
        .0
    };
    assert_eq!(ask(host), Verdict::Host, "the kernel answers");
    assert_eq!(ask(elsewhere), Verdict::Drop(DropReason::NdpNotAnnounced));
    assert_eq!(ask(other_port), Verdict::Drop(DropReason::NdpNotOwned));
    assert_eq!(ask(CLIENT), Verdict::Drop(DropReason::NdpNotOwned));
}

#[test]
fn advertisements_teach_only_awaited_neighbours() {
    let table = NeighbourTable::default();
    let host: Ipv6Addr = "2001:db8::5".parse().unwrap();
    let snap = snapshot(&[(
        host,
        OwnedAddr {
            host: true,
            ..OwnedAddr::default()
        },
    )]);
    let backend: Ipv6Addr = "2001:db8::20".parse().unwrap();
    let backend_mac = MacAddr([2, 0, 0, 0, 0, 0x20]);
    let na = build::ndp_advert(backend_mac, backend, MacAddr(PORT_MAC), NODE);
    let (verdict, _, learned) = answer_frame(&table, &snap, &na);
    assert_eq!(
        (verdict, learned),
        (Verdict::Drop(DropReason::NdpAdvertIgnored), false),
        "a stranger"
    );
    assert_eq!(table.peek(0, backend), None);
    assert_eq!(
        table.resolve(0, backend, 900),
        Resolution::Pending { probe: true }
    );
    let (verdict, _, learned) = answer_frame(&table, &snap, &na);
    assert_eq!((verdict, learned), (Verdict::Consumed, true));
    assert_eq!(
        table.resolve(0, backend, 1_100),
        Resolution::Known {
            mac: backend_mac.0,
            probe: false
        }
    );
    // An advertisement to a host address is the kernel's.
    let na = build::ndp_advert(backend_mac, backend, MacAddr(PORT_MAC), host);
    assert_eq!(answer_frame(&table, &snap, &na).0, Verdict::Host);
}

#[test]
fn router_messages_are_not_the_gateways() {
    let table = NeighbourTable::default();
    let snap = snapshot(&[]);
    // A router solicitation: type 133, reserved, no options.
    let mut rs = [133u8, 0, 0, 0, 0, 0, 0, 0];
    let all_routers: Ipv6Addr = "ff02::2".parse().unwrap();
    icmpv6::Packet::new_unchecked(&mut rs[..]).fill_checksum(CLIENT, all_routers);
    let ip = build::ipv6_packet(CLIENT, all_routers, 58, 255, &rs);
    let f = build::ethernet_frame(
        CLIENT_MAC,
        MacAddr([0x33, 0x33, 0, 0, 0, 2]),
        ethernet::ethertype::IPV6,
        &ip,
    );
    assert_eq!(
        answer_frame(&table, &snap, &f).0,
        Verdict::Drop(DropReason::NdpRouterIgnored)
    );
}

#[test]
fn every_announced_address_but_host_addresses_is_advertised() {
    let snap = snapshot(&[
        (VIP, ANNOUNCED_VIP),
        (
            NODE,
            OwnedAddr {
                snat: true,
                announce: true,
                ..OwnedAddr::default()
            },
        ),
        (
            "2001:db8::5".parse().unwrap(),
            OwnedAddr {
                host: true,
                announce: true,
                ..OwnedAddr::default()
            },
        ),
        (
            "2001:db8::101".parse().unwrap(),
            OwnedAddr {
                announce: false,
                ..ANNOUNCED_VIP
            },
        ),
    ]);
    let mut announced_now: Vec<_> = announced(&snap).collect();
    announced_now.sort_unstable();
    assert_eq!(announced_now, vec![(0, NODE), (0, VIP)]);
}

/// The worker's tx queues, as far as the neighbour stage sees them.
#[derive(Default)]
struct Wire {
    sent: Vec<(PortId, Vec<u8>)>,
}

impl crate::stage::Egress<TestFrame> for Wire {
    fn frame_from(&mut self, bytes: &[u8]) -> Option<TestFrame> {
        Some(frame(bytes))
    }
    fn send(&mut self, port: PortId, f: TestFrame, _: &mut crate::counters::Counters) -> bool {
        self.sent.push((port, f.data().to_vec()));
        true
    }
    fn release(&mut self, _: TestFrame) {}
}

/// An IPv6 packet whose next hop is unknown waits in the hold queue while
/// a solicitation goes out from the port's node address; the next hop's
/// advertisement releases it with the learned MAC. A next hop that never
/// answers costs its packet `neighbour_timeout` after the last probe's
/// period, as for ARP.
#[test]
fn ipv6_next_hops_are_held_solicited_and_released_like_arp() {
    use crate::counters::Counters;
    use crate::stage::HeldFrames;
    use crate::stage::neighbour::NeighbourStage;
    use std::sync::Arc;

    let table = Arc::new(NeighbourTable::default());
    let mut stage = NeighbourStage::new(Arc::clone(&table));
    let node = OwnedAddr {
        node: true,
        announce: true,
        ..OwnedAddr::default()
    };
    let mut snap = snapshot(&[(NODE, node)]);
    // Solicitations leave from the port's NDP source address.
    snap.ndp_source = vec![Some(NODE), None];
    let (mut counters, mut wire) = (Counters::default(), Wire::default());
    stage.on_snapshot(&snap, true, &mut counters, &mut wire);
    let mut buf = [0u8; NDP_FRAME_BYTES];
    let len = write_unsolicited_advert(&mut buf, PORT_MAC, NODE);
    assert_eq!(wire.sent, vec![(0, buf[..len].to_vec())]);
    assert_eq!(counters.unsolicited_adverts_sent, 1);
    wire.sent.clear();

    let (backend, silent): (Ipv6Addr, Ipv6Addr) = (
        "2001:db8::20".parse().unwrap(),
        "2001:db8::21".parse().unwrap(),
    );
    let backend_mac = MacAddr([2, 0, 0, 0, 0, 0x20]);
    let mut held = HeldFrames::new();
    for (i, next) in [backend, silent].into_iter().enumerate() {
        let bytes = build::eth_ipv6_udp(
            CLIENT_MAC,
            MacAddr(PORT_MAC),
            (CLIENT, 1000),
            (next, 53),
            b"query",
        );
        let mut pkt = frame(&bytes);
        let verdict = stage
            .batch(1_000, 2)
            .forward6(pkt.data_mut(), 0, PORT_MAC, next, i);
        assert_eq!(verdict, Verdict::AwaitNeighbour(0));
        assert_eq!(stage.awaited(i), std::net::IpAddr::V6(next));
        assert!(
            stage
                .hold(&mut held, i, 0, pkt, 1_000, &mut counters)
                .is_ok()
        );
    }
    stage.send_requests(&snap, &mut counters, &mut wire);
    let solicit = |target| {
        let mut buf = [0u8; NDP_FRAME_BYTES];
        let len = write_solicit(&mut buf, PORT_MAC, NODE, target);
        (0, buf[..len].to_vec())
    };
    assert_eq!(wire.sent, vec![solicit(backend), solicit(silent)]);
    assert_eq!(counters.ndp_solicits_sent, 2);
    wire.sent.clear();

    // No answer yet: both stay.
    stage.release(&mut held, &snap, 1_100, &mut counters, &mut wire);
    assert_eq!((held.len(), wire.sent.len()), (2, 0));
    // The backend answers the solicitation.
    let na = build::ndp_advert(backend_mac, backend, MacAddr(PORT_MAC), NODE);
    let (mut f, mut meta) = (frame(&na), meta_of(&na));
    assert!(stage.batch(1_200, 1).answer_ndp(&snap, &mut f, &mut meta));
    assert_eq!(meta.verdict, Verdict::Consumed);
    stage.release(&mut held, &snap, 1_300, &mut counters, &mut wire);
    assert_eq!(held.len(), 1);
    assert_eq!(wire.sent.len(), 1);
    let (port, sent) = &wire.sent[0];
    assert_eq!(*port, 0);
    assert_eq!(&sent[..6], &backend_mac.0, "to the learned MAC");
    assert_eq!(&sent[6..12], &PORT_MAC, "from the port");
    assert_eq!(counters.neighbour_held_sent, 1);
    wire.sent.clear();

    // The silent one is solicited again each retransmission period while
    // its packet waits, then dropped.
    for now_ms in [2_000, 3_000] {
        stage.release(&mut held, &snap, now_ms, &mut counters, &mut wire);
        stage.send_requests(&snap, &mut counters, &mut wire);
        assert_eq!(wire.sent, vec![solicit(silent)], "at {now_ms} ms");
        wire.sent.clear();
    }
    stage.release(&mut held, &snap, 4_000, &mut counters, &mut wire);
    assert_eq!(held.len(), 0);
    assert_eq!(counters.dropped(DropReason::NeighbourTimeout), 1);
}
