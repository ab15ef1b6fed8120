use super::*;
use crate::wire::MacAddr;
use crate::wire::build;
use crate::wire::icmp::{kind, unreachable};
use crate::wire::tcp::flags::{ACK, FIN, PSH, RST, SYN};
use proptest::prelude::*;
use std::collections::HashSet;

const CLIENT_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x01]);
const GW_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0xfe]);
const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);
const VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
const BACKEND: Ipv4Addr = Ipv4Addr::new(10, 244, 1, 5);

fn tcp_frame(flags: u8, payload: &[u8]) -> Vec<u8> {
    build::eth_ipv4_tcp(
        CLIENT_MAC, GW_MAC, CLIENT, 40000, VIP, 443, flags, 1000, 0, payload,
    )
}

fn udp_frame(payload: &[u8]) -> Vec<u8> {
    build::eth_ipv4_udp(CLIENT_MAC, GW_MAC, CLIENT, 5353, VIP, 53, payload)
}

fn echo_frame(icmp_type: u8) -> Vec<u8> {
    build::eth_ipv4_icmp_echo(
        CLIENT_MAC, GW_MAC, CLIENT, VIP, icmp_type, 0x4242, 1, b"ping",
    )
}

/// An ICMP error from `BACKEND`'s router about the packet `inner`.
fn icmp_error_frame(icmp_type: u8, code: u8, inner: &[u8]) -> Vec<u8> {
    build::eth_ipv4_icmp_error(
        CLIENT_MAC,
        GW_MAC,
        Ipv4Addr::new(10, 244, 1, 1),
        VIP,
        icmp_type,
        code,
        inner,
    )
}

/// The gateway's SNATed packet towards the backend, as an ICMP error
/// would quote it (header + first 8 bytes).
fn inner_tcp() -> Vec<u8> {
    let mut p = build::ipv4_tcp(VIP, 61000, BACKEND, 8080, SYN, 1, 0, b"");
    p.truncate(28);
    p
}

fn inner_udp() -> Vec<u8> {
    build::ipv4_udp(VIP, 61001, BACKEND, 5353, b"dns query payload")
}

/// Edit the IPv4 header at 14.. and optionally refill its checksum.
fn edit_ip(
    mut f: Vec<u8>,
    refill: bool,
    edit: impl FnOnce(&mut ipv4::Packet<&mut [u8]>),
) -> Vec<u8> {
    let mut p = ipv4::Packet::new_unchecked(&mut f[14..]);
    edit(&mut p);
    if refill {
        p.fill_checksum();
    }
    f
}

/// Edit the L4 bytes at 34.. (no IP options), refilling nothing.
fn edit_l4(mut f: Vec<u8>, edit: impl FnOnce(&mut [u8])) -> Vec<u8> {
    edit(&mut f[34..]);
    f
}

/// Cut the IP packet to `l4_len` bytes of L4 (total length and header
/// checksum updated).
fn cut_l4(mut f: Vec<u8>, l4_len: usize) -> Vec<u8> {
    f.truncate(34 + l4_len);
    edit_ip(f, true, |p| p.set_total_len(20 + l4_len as u16))
}

fn set_ethertype(mut f: Vec<u8>, et: u16) -> Vec<u8> {
    ethernet::Packet::new_unchecked(&mut f[..]).set_ethertype(et);
    f
}

fn refill_icmp(mut f: Vec<u8>) -> Vec<u8> {
    let end = 14 + usize::from(ipv4::Packet::new_unchecked(&f[14..]).total_len());
    icmp::Packet::new_unchecked(&mut f[34..end]).fill_checksum();
    f
}

fn arp_with(byte: usize, value: u8) -> Vec<u8> {
    let mut f = build::arp_request(CLIENT_MAC, CLIENT, VIP);
    f[14 + byte] = value;
    f
}

/// One malformed frame per case; each must yield exactly its reason.
fn drop_cases() -> Vec<(&'static str, Vec<u8>, DropReason)> {
    use DropReason::*;
    let tcp_ok = tcp_frame(SYN, b"");
    let udp_ok = udp_frame(b"hello");
    let mut cases = vec![
        ("empty frame", vec![], EthTruncated),
        ("13 bytes", tcp_ok[..13].to_vec(), EthTruncated),
        (
            "vlan tag cut off",
            build::with_vlan(&tcp_ok, 7)[..17].to_vec(),
            VlanMalformed,
        ),
        (
            "two 802.1Q tags",
            build::with_vlan(&build::with_vlan(&tcp_ok, 7), 8),
            VlanMalformed,
        ),
        (
            "802.1Q over 802.1ad inner",
            {
                let mut f = build::with_vlan(&tcp_ok, 7);
                f[16..18].copy_from_slice(&ethertype::QINQ.to_be_bytes());
                f
            },
            VlanMalformed,
        ),
        (
            "outer 802.1ad tag",
            set_ethertype(build::with_vlan(&tcp_ok, 7), ethertype::QINQ),
            VlanMalformed,
        ),
        (
            "ipv6",
            set_ethertype(tcp_ok.clone(), ethertype::IPV6),
            Ipv6BadVersion,
        ),
        (
            "lldp",
            set_ethertype(tcp_ok.clone(), 0x88cc),
            UnsupportedEthertype,
        ),
        (
            "ipv6 behind a tag",
            {
                let mut f = build::with_vlan(&tcp_ok, 7);
                ethernet::Packet::new_unchecked(&mut f[..]).set_inner_ethertype(ethertype::IPV6);
                f
            },
            Ipv6BadVersion,
        ),
        (
            "arp 27 bytes",
            build::arp_request(CLIENT_MAC, CLIENT, VIP)[..41].to_vec(),
            ArpMalformed,
        ),
        ("arp htype 6", arp_with(1, 6), ArpMalformed),
        ("arp ptype ipv6", arp_with(2, 0x86), ArpMalformed),
        ("arp hlen 8", arp_with(4, 8), ArpMalformed),
        ("arp plen 16", arp_with(5, 16), ArpMalformed),
        ("ipv4 19 bytes", tcp_ok[..33].to_vec(), Ipv4Truncated),
        (
            "version 6",
            edit_ip(tcp_ok.clone(), true, |p| p.set_version_ihl_byte(0x65)),
            Ipv4BadVersion,
        ),
        (
            "ihl 4",
            edit_ip(tcp_ok.clone(), true, |p| p.set_version_ihl(4)),
            Ipv4BadIhl,
        ),
        (
            "ihl 0",
            edit_ip(tcp_ok.clone(), true, |p| p.set_version_ihl(0)),
            Ipv4BadIhl,
        ),
        (
            "ihl beyond frame",
            edit_ip(tcp_ok[..36].to_vec(), true, |p| p.set_version_ihl(6)),
            Ipv4BadIhl,
        ),
        (
            "total < ihl",
            edit_ip(tcp_ok.clone(), true, |p| p.set_total_len(19)),
            Ipv4BadLength,
        ),
        (
            "total beyond frame",
            edit_ip(tcp_ok.clone(), true, |p| p.set_total_len(41)),
            Ipv4BadLength,
        ),
        (
            "header checksum",
            edit_ip(tcp_ok.clone(), false, |p| p.set_ttl(63)),
            Ipv4BadChecksum,
        ),
        (
            "mf set",
            edit_ip(tcp_ok.clone(), true, |p| p.set_flags_frag(false, true, 0)),
            Ipv4Fragment,
        ),
        (
            "offset 8",
            edit_ip(tcp_ok.clone(), true, |p| p.set_flags_frag(false, false, 8)),
            Ipv4Fragment,
        ),
        (
            "last fragment",
            edit_ip(tcp_ok.clone(), true, |p| {
                p.set_flags_frag(true, false, 1480)
            }),
            Ipv4Fragment,
        ),
        (
            "gre",
            edit_ip(tcp_ok.clone(), true, |p| p.set_protocol(47)),
            UnsupportedProtocol,
        ),
        ("tcp 19 bytes", cut_l4(tcp_ok.clone(), 19), TcpMalformed),
        (
            "tcp doff 4",
            edit_l4(tcp_ok.clone(), |s| s[12] = 4 << 4),
            TcpMalformed,
        ),
        (
            "tcp doff beyond",
            edit_l4(tcp_ok.clone(), |s| s[12] = 6 << 4),
            TcpMalformed,
        ),
        ("tcp no flags", tcp_frame(0, b""), TcpBadFlags),
        ("tcp psh only", tcp_frame(PSH, b"x"), TcpBadFlags),
        ("syn fin", tcp_frame(SYN | FIN, b""), TcpBadFlags),
        ("syn rst", tcp_frame(SYN | RST, b""), TcpBadFlags),
        ("fin without ack", tcp_frame(FIN, b""), TcpBadFlags),
        ("fin rst ack", tcp_frame(FIN | RST | ACK, b""), TcpBadFlags),
        (
            "tcp checksum",
            edit_l4(tcp_frame(ACK, b"data"), |s| s[20] ^= 1),
            TcpBadChecksum,
        ),
        ("udp 7 bytes", cut_l4(udp_ok.clone(), 7), UdpMalformed),
        (
            "udp length 7",
            edit_l4(udp_ok.clone(), |s| {
                s[4..6].copy_from_slice(&7u16.to_be_bytes())
            }),
            UdpMalformed,
        ),
        (
            "udp length beyond",
            edit_l4(udp_ok.clone(), |s| {
                s[4..6].copy_from_slice(&14u16.to_be_bytes())
            }),
            UdpMalformed,
        ),
        (
            "udp checksum",
            edit_l4(udp_ok.clone(), |s| s[8] ^= 0x80),
            UdpBadChecksum,
        ),
        (
            "icmp 7 bytes",
            cut_l4(echo_frame(kind::ECHO_REQUEST), 7),
            IcmpMalformed,
        ),
        (
            "icmp checksum",
            edit_l4(echo_frame(kind::ECHO_REQUEST), |s| s[9] ^= 1),
            IcmpBadChecksum,
        ),
        (
            "icmp redirect",
            refill_icmp(edit_l4(echo_frame(kind::ECHO_REQUEST), |s| s[0] = 5)),
            IcmpUnsupported,
        ),
        (
            "icmp timestamp",
            refill_icmp(edit_l4(echo_frame(kind::ECHO_REQUEST), |s| s[0] = 13)),
            IcmpUnsupported,
        ),
        (
            "icmp error, inner header cut",
            icmp_error_frame(
                kind::DEST_UNREACHABLE,
                unreachable::PORT,
                &inner_udp()[..19],
            ),
            IcmpMalformed,
        ),
        (
            "icmp error, 7 inner l4 bytes",
            icmp_error_frame(kind::TIME_EXCEEDED, 0, &inner_udp()[..27]),
            IcmpMalformed,
        ),
        (
            "icmp error, inner options cut",
            icmp_error_frame(kind::TIME_EXCEEDED, 0, &{
                let mut i = inner_tcp();
                i[0] = 0x46; // IHL 6 leaves 4 bytes of "L4"
                i
            }),
            IcmpMalformed,
        ),
        (
            "icmp error, inner ihl 4",
            icmp_error_frame(kind::TIME_EXCEEDED, 0, &{
                let mut i = inner_tcp();
                i[0] = 0x44;
                i
            }),
            IcmpMalformed,
        ),
        (
            "icmp error, inner version 6",
            icmp_error_frame(kind::PARAMETER_PROBLEM, 0, &{
                let mut i = inner_tcp();
                i[0] = 0x65;
                i
            }),
            IcmpMalformed,
        ),
        (
            "icmp error about icmp",
            icmp_error_frame(
                kind::DEST_UNREACHABLE,
                unreachable::HOST,
                &build::ipv4_icmp_echo(VIP, BACKEND, kind::ECHO_REQUEST, 1, 1, b""),
            ),
            IcmpMalformed,
        ),
    ];
    for (name, src) in [
        ("source multicast", Ipv4Addr::new(224, 0, 0, 1)),
        ("source broadcast", Ipv4Addr::BROADCAST),
        ("source loopback", Ipv4Addr::new(127, 0, 0, 1)),
        ("source unspecified", Ipv4Addr::UNSPECIFIED),
    ] {
        let f = build::eth_ipv4_udp(CLIENT_MAC, GW_MAC, src, 1, VIP, 2, b"");
        cases.push((name, f, Ipv4BadSource));
    }
    cases.extend(super::tests_ipv6::drop_cases6());
    cases
}

/// Every reason the parse stage can give, and only those.
const PARSE_REASONS: &[DropReason] = &[
    DropReason::EthTruncated,
    DropReason::VlanMalformed,
    DropReason::UnsupportedEthertype,
    DropReason::ArpMalformed,
    DropReason::Ipv4Truncated,
    DropReason::Ipv4BadVersion,
    DropReason::Ipv4BadIhl,
    DropReason::Ipv4BadLength,
    DropReason::Ipv4BadChecksum,
    DropReason::Ipv4Fragment,
    DropReason::Ipv4BadSource,
    DropReason::UnsupportedProtocol,
    DropReason::TcpMalformed,
    DropReason::TcpBadFlags,
    DropReason::TcpBadChecksum,
    DropReason::UdpMalformed,
    DropReason::UdpBadChecksum,
    DropReason::IcmpMalformed,
    DropReason::IcmpBadChecksum,
    DropReason::IcmpUnsupported,
    DropReason::Ipv6Truncated,
    DropReason::Ipv6BadVersion,
    DropReason::Ipv6BadLength,
    DropReason::Ipv6ExtChainTooLong,
    DropReason::Ipv6ExtTruncated,
    DropReason::Ipv6HopByHopMisplaced,
    DropReason::Ipv6Fragment,
    DropReason::Ipv6BadSource,
    DropReason::NdpBadHopLimit,
    DropReason::NdpBadOption,
    DropReason::NdpMalformed,
];

#[test]
fn every_malformed_frame_drops_with_its_reason() {
    let cases = drop_cases();
    for (name, frame, reason) in &cases {
        let got = parse_frame(frame, 0, false, &hasher());
        assert_eq!(got.err(), Some(*reason), "case {name:?}");
    }
    let covered: HashSet<_> = cases.iter().map(|c| c.2).collect();
    let expected: HashSet<_> = PARSE_REASONS.iter().copied().collect();
    assert_eq!(covered, expected);
}

#[test]
fn driver_verified_checksums_skip_l4_but_not_ipv4() {
    use DropReason::*;
    let l4_bad = [
        edit_l4(tcp_frame(ACK, b"data"), |s| s[20] ^= 1),
        edit_l4(udp_frame(b"hello"), |s| s[8] ^= 0x80),
        edit_l4(echo_frame(kind::ECHO_REQUEST), |s| s[9] ^= 1),
    ];
    for f in &l4_bad {
        assert!(parse_frame(f, 0, false, &hasher()).is_err());
        assert!(parse_frame(f, 0, true, &hasher()).is_ok());
    }
    let ip_bad = edit_ip(tcp_frame(ACK, b""), false, |p| p.set_ttl(1));
    assert_eq!(
        parse_frame(&ip_bad, 0, true, &hasher()).err(),
        Some(Ipv4BadChecksum)
    );
}

#[test]
fn valid_tcp_frame() {
    let f = tcp_frame(SYN | ACK | PSH, b"hello");
    let m = parse_frame(&f, 3, false, &hasher()).unwrap();
    assert_eq!(m.in_port, 3);
    assert_eq!(m.kind, PacketKind::Tcp);
    assert_eq!(m.vlan, None);
    assert_eq!(
        (m.l3_offset, m.l4_offset, m.l3_end),
        (14, 34, f.len() as u16)
    );
    assert_eq!(m.tcp_flags, SYN | ACK | PSH);
    assert_eq!(m.key, FlowKey::new(Proto::Tcp, CLIENT, 40000, VIP, 443));
    assert_eq!(m.hash, hasher().hash(&m.key));
    assert_eq!(m.verdict, Verdict::Pending);
}

#[test]
fn valid_udp_frame_with_ethernet_padding() {
    let mut f = udp_frame(b"hi");
    let ip_end = f.len();
    f.resize(60, 0); // minimum Ethernet frame
    let m = parse_frame(&f, 0, false, &hasher()).unwrap();
    assert_eq!(m.kind, PacketKind::Udp);
    assert_eq!(m.l3_end as usize, ip_end);
    assert_eq!(m.key, FlowKey::new(Proto::Udp, CLIENT, 5353, VIP, 53));
    assert_eq!(m.hash, hasher().hash(&m.key));
}

#[test]
fn udp_zero_checksum_is_accepted_and_length_below_payload_is_fine() {
    let f = edit_l4(udp_frame(b"hello"), |s| s[6..8].copy_from_slice(&[0, 0]));
    assert_eq!(
        parse_frame(&f, 0, false, &hasher()).unwrap().kind,
        PacketKind::Udp
    );
    // Length field 8 (no payload) inside a longer IP payload, checksum 0.
    let f = edit_l4(f, |s| s[4..6].copy_from_slice(&8u16.to_be_bytes()));
    assert_eq!(
        parse_frame(&f, 0, false, &hasher()).unwrap().kind,
        PacketKind::Udp
    );
}

#[test]
fn valid_vlan_tagged_frame() {
    let f = build::with_vlan(&tcp_frame(ACK, b""), 100);
    let m = parse_frame(&f, 0, false, &hasher()).unwrap();
    assert_eq!(m.vlan, Some(100));
    assert_eq!(
        (m.l3_offset, m.l4_offset, m.l3_end),
        (18, 38, f.len() as u16)
    );
    assert_eq!(m.key, FlowKey::new(Proto::Tcp, CLIENT, 40000, VIP, 443));
    let arp = build::with_vlan(&build::arp_request(CLIENT_MAC, CLIENT, VIP), 5);
    let m = parse_frame(&arp, 0, false, &hasher()).unwrap();
    assert_eq!(
        (m.kind, m.vlan, m.l3_offset, m.l3_end),
        (PacketKind::Arp, Some(5), 18, 46)
    );
}

#[test]
fn ip_and_tcp_options_move_the_offsets() {
    // IPv4 header with 4 bytes of NOP options, TCP header with 8 bytes
    // of options (NOPs), both checksums recomputed.
    let ip = build::ipv4_tcp(CLIENT, 40000, VIP, 443, ACK, 1, 2, b"");
    let mut seg = ip[20..].to_vec();
    seg.splice(20..20, [1u8; 8]);
    let mut t = tcp::Packet::new_unchecked(&mut seg[..]);
    t.set_data_offset_words(7);
    t.fill_checksum(CLIENT, VIP);
    let mut pkt = ip[..20].to_vec();
    pkt.extend_from_slice(&[1u8; 4]);
    pkt.extend_from_slice(&seg);
    let total = pkt.len() as u16;
    let mut p = ipv4::Packet::new_unchecked(&mut pkt[..]);
    p.set_version_ihl(6);
    p.set_total_len(total);
    p.fill_checksum();
    let f = build::ethernet_frame(CLIENT_MAC, GW_MAC, ethertype::IPV4, &pkt);
    let m = parse_frame(&f, 0, false, &hasher()).unwrap();
    assert_eq!(
        (m.l3_offset, m.l4_offset, m.l3_end),
        (14, 38, f.len() as u16)
    );
    assert_eq!(m.kind, PacketKind::Tcp);
}

#[test]
fn valid_arp_request_and_reply() {
    let f = build::arp_request(CLIENT_MAC, CLIENT, VIP);
    let m = parse_frame(&f, 1, false, &hasher()).unwrap();
    assert_eq!(
        (m.kind, m.l3_offset, m.l3_end, m.hash),
        (PacketKind::Arp, 14, 42, 0)
    );
    let mut f = build::arp_reply(CLIENT_MAC, CLIENT, GW_MAC, VIP);
    f.resize(60, 0);
    assert_eq!(
        parse_frame(&f, 1, false, &hasher()).unwrap().kind,
        PacketKind::Arp
    );
}

#[test]
fn valid_icmp_echo_uses_identifier_as_both_ports() {
    for t in [kind::ECHO_REQUEST, kind::ECHO_REPLY] {
        let m = parse_frame(&echo_frame(t), 0, false, &hasher()).unwrap();
        assert_eq!(m.kind, PacketKind::IcmpEcho);
        assert_eq!((m.icmp_type, m.icmp_code), (t, 0));
        assert_eq!(
            m.key,
            FlowKey::new(Proto::Icmp, CLIENT, 0x4242, VIP, 0x4242)
        );
        assert_eq!(m.hash, hasher().hash(&m.key));
    }
}

#[test]
fn valid_icmp_errors_carry_the_inner_tuple() {
    let cases = [
        (
            kind::DEST_UNREACHABLE,
            unreachable::FRAG_NEEDED,
            inner_tcp(),
            Proto::Tcp,
            61000,
            8080,
        ),
        (
            kind::DEST_UNREACHABLE,
            unreachable::PORT,
            inner_udp(),
            Proto::Udp,
            61001,
            5353,
        ),
        (
            kind::TIME_EXCEEDED,
            0,
            inner_udp()[..28].to_vec(),
            Proto::Udp,
            61001,
            5353,
        ),
        (
            kind::PARAMETER_PROBLEM,
            0,
            inner_tcp(),
            Proto::Tcp,
            61000,
            8080,
        ),
    ];
    for (t, code, inner, proto, sport, dport) in cases {
        let f = icmp_error_frame(t, code, &inner);
        let m = parse_frame(&f, 0, false, &hasher()).unwrap();
        assert_eq!(m.kind, PacketKind::IcmpError);
        assert_eq!((m.icmp_type, m.icmp_code), (t, code));
        assert_eq!(m.key, FlowKey::new(proto, VIP, sport, BACKEND, dport));
        assert_eq!(
            (m.l4_offset, m.inner_l3_offset, m.inner_l4_offset),
            (34, 42, 62)
        );
        assert_eq!(m.hash, hasher().hash(&m.key));
    }
    // Inner checksums are not verified: corrupt the inner IPv4 and TCP
    // checksums of a fully quoted packet (the outer ICMP checksum is
    // computed over the corrupted bytes, so it stays valid).
    let mut inner = build::ipv4_tcp(VIP, 61000, BACKEND, 8080, ACK, 1, 2, b"data");
    inner[10] ^= 0xff;
    inner[20 + 16] ^= 0xff;
    let f = icmp_error_frame(kind::TIME_EXCEEDED, 0, &inner);
    assert_eq!(
        parse_frame(&f, 0, false, &hasher()).unwrap().kind,
        PacketKind::IcmpError
    );
}

#[derive(Debug)]
pub(super) struct TestFrame(pub(super) Vec<u8>, pub(super) bool, pub(super) Offload);

impl Frame for TestFrame {
    fn data(&self) -> &[u8] {
        &self.0
    }
    fn data_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
    fn truncate(&mut self, len: usize) {
        self.0.truncate(len);
    }
    fn checksum_verified(&self) -> bool {
        self.1
    }
    fn offload(&self) -> Offload {
        self.2
    }
}

#[test]
fn batch_fills_one_meta_per_frame() {
    let bad_tcp_csum = edit_l4(tcp_frame(ACK, b"data"), |s| s[20] ^= 1);
    let frames = [
        TestFrame(tcp_frame(SYN, b""), false, Offload::NONE),
        TestFrame(vec![0; 10], false, Offload::NONE),
        TestFrame(bad_tcp_csum.clone(), false, Offload::NONE),
        TestFrame(bad_tcp_csum, true, Offload::NONE),
        TestFrame(
            build::arp_request(CLIENT_MAC, CLIENT, VIP),
            false,
            Offload::NONE,
        ),
    ];
    let mut metas = [PacketMeta::empty(9); 8];
    metas[1].l3_offset = 99; // stale data from a previous batch
    parse_batch(&frames, 2, &mut metas, &hasher());
    assert_eq!(metas[0].verdict, Verdict::Pending);
    assert_eq!(metas[0].kind, PacketKind::Tcp);
    assert_eq!(metas[1].verdict, Verdict::Drop(DropReason::EthTruncated));
    assert_eq!(metas[1].l3_offset, 0);
    assert_eq!(metas[2].verdict, Verdict::Drop(DropReason::TcpBadChecksum));
    assert_eq!(metas[3].verdict, Verdict::Pending);
    assert_eq!(metas[4].kind, PacketKind::Arp);
    assert!(metas[..5].iter().all(|m| m.in_port == 2));
    assert_eq!(metas[5].in_port, 9, "slots past the batch are untouched");
    // The batch form agrees with the single-frame form.
    for (f, m) in frames.iter().zip(&metas) {
        match parse_frame(&f.0, 2, f.1, &hasher()) {
            Ok(single) => assert_eq!((single.key, single.l4_offset), (m.key, m.l4_offset)),
            Err(r) => assert_eq!(m.verdict, Verdict::Drop(r)),
        }
    }
}

pub(super) fn assert_meta_invariants(frame: &[u8], m: &PacketMeta) {
    assert!(m.l3_offset == 14 || m.l3_offset == 18);
    assert!(usize::from(m.l3_end) <= frame.len());
    match (m.kind, m.family) {
        (PacketKind::Arp, _) => assert_eq!(m.family, Family::V4),
        (_, Family::V4) => {
            assert!(m.l4_offset >= m.l3_offset + 20 && m.l4_offset <= m.l3_end);
            assert_eq!(m.hash, hasher().hash(&m.key));
        }
        (_, Family::V6) => {
            assert!(m.l4_offset >= m.l3_offset + 40 && m.l4_offset <= m.l3_end);
            assert_eq!(m.hash, hasher().hash(&m.key6));
        }
    }
    if m.kind == PacketKind::IcmpError {
        assert_eq!(m.inner_l3_offset, m.l4_offset + 8);
        assert!(m.inner_l4_offset + 8 <= m.l3_end);
    }
}

proptest! {
    #[test]
    fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..128),
                                       verified in any::<bool>()) {
        if let Ok(m) = parse_frame(&bytes, 0, verified, &hasher()) {
            assert_meta_invariants(&bytes, &m);
        }
    }

    /// Valid frames with random bytes overwritten and a random cut reach
    /// the deeper checks; the parser must hold its invariants there too.
    #[test]
    fn never_panics_on_mutated_frames(
        which in 0usize..6, cut in any::<prop::sample::Index>(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        verified in any::<bool>(),
    ) {
        let mut f = match which {
            0 => tcp_frame(ACK, b"payload"),
            1 => udp_frame(b"payload"),
            2 => echo_frame(kind::ECHO_REQUEST),
            3 => icmp_error_frame(kind::DEST_UNREACHABLE, 3, &inner_udp()),
            4 => build::arp_request(CLIENT_MAC, CLIENT, VIP),
            _ => build::with_vlan(&tcp_frame(SYN, b""), 3),
        };
        for (i, b) in edits {
            let i = i.index(f.len());
            f[i] = b;
        }
        f.truncate(cut.index(f.len() + 1));
        if let Ok(m) = parse_frame(&f, 0, verified, &hasher()) {
            assert_meta_invariants(&f, &m);
        }
    }

    #[test]
    fn random_valid_tcp_and_udp_frames_parse_exactly(
        src in any::<u32>(), dst in any::<u32>(), sport in any::<u16>(), dport in any::<u16>(),
        is_tcp in any::<bool>(), flag_idx in 0usize..6, seq in any::<u32>(), ack in any::<u32>(),
        payload in proptest::collection::vec(any::<u8>(), 0..200),
        vlan in proptest::option::of(0u16..4096), padding in 0usize..20,
    ) {
        let src = Ipv4Addr::from(src);
        prop_assume!(!is_bad_source(src));
        let dst = Ipv4Addr::from(dst);
        let flags = [SYN, SYN | ACK, ACK, ACK | PSH, FIN | ACK, RST][flag_idx];
        let mut f = if is_tcp {
            build::eth_ipv4_tcp(CLIENT_MAC, GW_MAC, src, sport, dst, dport, flags, seq, ack, &payload)
        } else {
            build::eth_ipv4_udp(CLIENT_MAC, GW_MAC, src, sport, dst, dport, &payload)
        };
        if let Some(v) = vlan {
            f = build::with_vlan(&f, v);
        }
        let ip_end = f.len();
        f.resize(ip_end + padding, 0);
        let m = parse_frame(&f, 0, false, &hasher()).unwrap();
        let l3 = if vlan.is_some() { 18 } else { 14 };
        let proto = if is_tcp { Proto::Tcp } else { Proto::Udp };
        prop_assert_eq!(m.key, FlowKey::new(proto, src, sport, dst, dport));
        prop_assert_eq!(m.kind, if is_tcp { PacketKind::Tcp } else { PacketKind::Udp });
        prop_assert_eq!(m.vlan, vlan);
        prop_assert_eq!((m.l3_offset, m.l4_offset, m.l3_end), (l3, l3 + 20, ip_end as u16));
        prop_assert_eq!(m.tcp_flags, if is_tcp { flags } else { 0 });
        prop_assert_eq!(m.hash, hasher().hash(&m.key));
    }
}

/// The table hasher of these tests (any fixed secret).
fn hasher() -> TableHasher {
    TableHasher::from_seed(1)
}

/// A super-packet's offload is taken into the meta with the length of its
/// segments; offload metadata that does not fit the packet is dropped as
/// `gso_malformed`, one check each.
#[test]
fn offload_metadata_is_checked_against_the_packet() {
    use crate::packet::Gso;
    let payload = vec![7u8; 4000];
    let mut sp = tcp_frame(ACK, &payload);
    let o = build::make_partial(&mut sp, 1448);
    let mut syn = tcp_frame(SYN, &payload);
    let syn_o = build::make_partial(&mut syn, 1448);
    let wrong_start = Offload {
        csum_start: o.csum_start + 4,
        ..o
    };
    let v6_type = Offload {
        gso: Gso::TcpV6,
        ..o
    };
    let no_csum = Offload {
        needs_csum: false,
        ..o
    };
    let mut udp = build::eth_ipv4_udp(CLIENT_MAC, GW_MAC, CLIENT, 5000, VIP, 53, &payload);
    let udp_as_tcp = Offload {
        gso: Gso::TcpV4,
        ..build::make_partial(&mut udp, 1000)
    };
    let frames = [
        TestFrame(sp.clone(), true, o),
        TestFrame(syn, true, syn_o),
        TestFrame(sp.clone(), true, wrong_start),
        TestFrame(sp.clone(), true, v6_type),
        TestFrame(sp, true, no_csum),
        TestFrame(udp, true, udp_as_tcp),
    ];
    let mut metas = [PacketMeta::empty(0); 6];
    parse_batch(&frames, 0, &mut metas, &hasher());
    assert_eq!(metas[0].verdict, Verdict::Pending);
    assert_eq!(metas[0].offload, o);
    assert_eq!(metas[0].segment_l3_len, 20 + 20 + 1448);
    assert_eq!(metas[0].wire_l3_len(), 1488);
    assert_eq!(usize::from(metas[0].l3_end - metas[0].l3_offset), 4040);
    for m in &metas[1..] {
        assert_eq!(m.verdict, Verdict::Drop(DropReason::GsoMalformed));
    }
}

/// An IPv6 super-packet (`TcpV6`) is taken with the length of its segments
/// (40-byte header, 20-byte TCP header, `gso_size`); one of the wrong family,
/// a SYN or a checksum start before the L4 header is `gso_malformed`. A
/// UDP super-packet (`UdpL4`) over IPv6 is taken as well.
#[test]
fn ipv6_offload_metadata_is_checked_against_the_packet() {
    use super::tests_ipv6::tcp6;
    use crate::packet::Gso;
    let payload = vec![7u8; 4000];
    let mut sp = tcp6(ACK, &payload);
    let o = build::make_partial(&mut sp, 1440);
    assert_eq!(o.gso, Gso::TcpV6);
    let mut syn = tcp6(SYN, &payload);
    let syn_o = build::make_partial(&mut syn, 1440);
    let v4_type = Offload {
        gso: Gso::TcpV4,
        ..o
    };
    let before_l4 = Offload {
        csum_start: o.csum_start - 20,
        ..o
    };
    let mut udp = build::eth_ipv6_udp(
        CLIENT_MAC,
        GW_MAC,
        (super::tests_ipv6::CLIENT6, 5000),
        (super::tests_ipv6::VIP6, 53),
        &payload,
    );
    let udp_o = build::make_partial(&mut udp, 1200);
    assert_eq!(udp_o.gso, Gso::UdpL4);
    let frames = [
        TestFrame(sp.clone(), true, o),
        TestFrame(udp, true, udp_o),
        TestFrame(syn, true, syn_o),
        TestFrame(sp.clone(), true, v4_type),
        TestFrame(sp, true, before_l4),
    ];
    let mut metas = [PacketMeta::empty(0); 5];
    parse_batch(&frames, 0, &mut metas, &hasher());
    assert_eq!(metas[0].verdict, Verdict::Pending);
    assert_eq!(metas[0].offload, o);
    assert_eq!(metas[0].wire_l3_len(), 40 + 20 + 1440);
    assert_eq!(
        usize::from(metas[0].l3_end - metas[0].l3_offset),
        40 + 20 + 4000
    );
    assert_eq!(metas[1].verdict, Verdict::Pending);
    assert_eq!(metas[1].wire_l3_len(), 40 + 8 + 1200);
    for m in &metas[2..] {
        assert_eq!(m.verdict, Verdict::Drop(DropReason::GsoMalformed));
    }
}
