//! The IPv6 half of the parse stage: every drop reason of its table, and
//! the valid kinds with their offsets and keys.

use super::tests::TestFrame;
use super::*;
use crate::wire::MacAddr;
use crate::wire::build;
use crate::wire::icmpv6::msg_type;
use crate::wire::ipv6::next_header;
use crate::wire::tcp::flags::{ACK, PSH, SYN};
use crate::wire::{icmpv6, ipv6 as wire6, ndp};
use proptest::prelude::*;

const CLIENT_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x01]);
const GW_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0xfe]);
pub(super) const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 7);
pub(super) const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 0x10);
const BACKEND6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x244, 0, 1, 0, 0, 0, 5);

fn hasher() -> TableHasher {
    TableHasher::from_seed(1)
}

pub(super) fn tcp6(flags: u8, payload: &[u8]) -> Vec<u8> {
    build::eth_ipv6_tcp(
        CLIENT_MAC,
        GW_MAC,
        (CLIENT6, 40000),
        (VIP6, 443),
        flags,
        1000,
        0,
        payload,
    )
}

fn udp6(payload: &[u8]) -> Vec<u8> {
    build::eth_ipv6_udp(CLIENT_MAC, GW_MAC, (CLIENT6, 5353), (VIP6, 53), payload)
}

fn echo6(t: u8) -> Vec<u8> {
    build::eth_ipv6_echo(CLIENT_MAC, GW_MAC, (CLIENT6, VIP6), t, (0x4242, 1), b"ping")
}

/// The gateway's packet towards the backend as an ICMPv6 error quotes it.
fn inner6(proto: u8) -> Vec<u8> {
    let mut l4 = [0u8; 20];
    l4[..4].copy_from_slice(&[0xee, 0x48, 0x1f, 0x90]); // 61000 -> 8080
    build::ipv6_packet(VIP6, BACKEND6, proto, 63, &l4)
}

fn error6(t: u8, word: u32, inner: &[u8]) -> Vec<u8> {
    build::eth_ipv6_icmpv6(
        (CLIENT_MAC, GW_MAC),
        ("fd00:244::1".parse().unwrap(), VIP6),
        (t, 0, word),
        inner,
    )
}

/// Insert extension headers `(kind, bytes)` between the fixed header (at
/// 14) and the upper layer, chaining Next Header and fixing the payload
/// length (the upper layer's checksum does not change: its pseudo-header
/// carries the upper-layer protocol and length, RFC 8200 §8.1).
pub(super) fn with_ext(mut f: Vec<u8>, headers: &[(u8, usize)]) -> Vec<u8> {
    let upper = f[14 + 6];
    let mut ext = Vec::new();
    for (i, &(kind, len)) in headers.iter().enumerate() {
        let next = headers.get(i + 1).map_or(upper, |h| h.0);
        let mut h = vec![0u8; len];
        h[0] = next;
        match kind {
            next_header::AH => h[1] = (len / 4 - 2) as u8,
            next_header::FRAGMENT => {}
            _ => h[1] = (len / 8 - 1) as u8,
        }
        if kind == next_header::DEST_OPTS || kind == next_header::HOP_BY_HOP {
            // One PadN option filling the rest.
            h[2] = 1;
            h[3] = (len - 4) as u8;
        }
        ext.extend_from_slice(&h);
    }
    if let Some(&(first, _)) = headers.first() {
        f[14 + 6] = first;
    }
    let tail = f.split_off(14 + wire6::HEADER_LEN);
    f.extend_from_slice(&ext);
    f.extend_from_slice(&tail);
    let mut p = wire6::Packet::new_unchecked(&mut f[14..]);
    let len = p.payload_len() + ext.len() as u16;
    p.set_payload_len(len);
    f
}

fn set_hop_limit(mut f: Vec<u8>, hop: u8) -> Vec<u8> {
    f[14 + 7] = hop;
    f
}

fn set_src(mut f: Vec<u8>, src: Ipv6Addr) -> Vec<u8> {
    f[22..38].copy_from_slice(&src.octets());
    f
}

/// Refill the ICMPv6 checksum of a frame without extension headers.
fn refill6(mut f: Vec<u8>) -> Vec<u8> {
    let (src, dst) = {
        let p = wire6::Packet::new_unchecked(&f[14..]);
        (p.src_addr(), p.dst_addr())
    };
    let mut m = icmpv6::Packet::new_unchecked(&mut f[54..]);
    m.set_checksum(0);
    m.fill_checksum(src, dst);
    f
}

fn solicit() -> Vec<u8> {
    build::ndp_solicit(CLIENT_MAC, CLIENT6, VIP6)
}

/// Every IPv6 drop the parse stage makes, by reason.
pub(super) fn drop_cases6() -> Vec<(&'static str, Vec<u8>, DropReason)> {
    use DropReason::*;
    let tcp_ok = tcp6(ACK, b"data");
    let short_ip: Vec<u8> = tcp_ok[..14 + 39].to_vec();
    let mut v4_in_v6 = tcp_ok.clone();
    v4_in_v6[14] = 0x45;
    let mut long_payload = tcp_ok.clone();
    long_payload[18..20].copy_from_slice(&200u16.to_be_bytes());
    let nine_dest_opts = with_ext(tcp_ok.clone(), &[(next_header::DEST_OPTS, 8); 9]);
    let big_ext = with_ext(tcp_ok.clone(), &[(next_header::DEST_OPTS, 8 * 65)]);
    let mut truncated_ext = with_ext(udp6(b""), &[(next_header::ROUTING, 24)]);
    // The routing header claims 40 bytes, 24 + 8 (UDP) are there.
    truncated_ext[14 + 40 + 1] = 4;
    let hbh_second = with_ext(
        tcp_ok.clone(),
        &[(next_header::DEST_OPTS, 8), (next_header::HOP_BY_HOP, 8)],
    );
    let first_fragment = with_ext(udp6(b"x"), &[(next_header::FRAGMENT, 8)]);
    let mut later_fragment = first_fragment.clone();
    later_fragment[14 + 40 + 2] = 0x05; // offset 0x500
    let mut esp = tcp_ok.clone();
    esp[20] = next_header::ESP;
    let mut bad_tcp_sum = tcp_ok.clone();
    bad_tcp_sum[14 + 40 + 20] ^= 1;
    let mut zero_udp_sum = udp6(b"q");
    zero_udp_sum[14 + 40 + 6..14 + 40 + 8].copy_from_slice(&[0, 0]);
    let mut bad_udp_sum = udp6(b"q");
    bad_udp_sum[14 + 40 + 8] ^= 1;
    let mut udp_len_long = udp6(b"q");
    udp_len_long[14 + 40 + 5] = 100;
    let mut short_icmp = echo6(msg_type::ECHO_REQUEST);
    short_icmp.truncate(14 + 40 + 7);
    short_icmp[18..20].copy_from_slice(&7u16.to_be_bytes());
    let mut bad_icmp_sum = echo6(msg_type::ECHO_REQUEST);
    bad_icmp_sum[14 + 40 + 9] ^= 1;
    let mut ns_bad_option = solicit();
    ns_bad_option[14 + 40 + 25] = 0;
    let ns_bad_option = refill6(ns_bad_option);
    let mut ns_code = solicit();
    ns_code[14 + 40 + 1] = 1;
    let ns_code = refill6(ns_code);
    let rs_hop = {
        let f = build::eth_ipv6_icmpv6(
            (CLIENT_MAC, GW_MAC),
            (CLIENT6, "ff02::2".parse().unwrap()),
            (msg_type::ROUTER_SOLICIT, 0, 0),
            b"",
        );
        set_hop_limit(f, 64)
    };
    let mut inner_v4 = inner6(next_header::TCP);
    inner_v4[0] = 0x45;
    let inner_short = inner6(next_header::UDP)[..40 + 7].to_vec();
    let mut cases = vec![
        ("ipv6 39 bytes", short_ip, Ipv6Truncated),
        ("ipv6 with version 4", v4_in_v6, Ipv6BadVersion),
        ("ipv6 payload past the frame", long_payload, Ipv6BadLength),
        (
            "nine extension headers",
            nine_dest_opts,
            Ipv6ExtChainTooLong,
        ),
        (
            "520 bytes of extension headers",
            big_ext,
            Ipv6ExtChainTooLong,
        ),
        ("routing header cut off", truncated_ext, Ipv6ExtTruncated),
        ("hop-by-hop second", hbh_second, Ipv6HopByHopMisplaced),
        ("first fragment", first_fragment, Ipv6Fragment),
        ("later fragment", later_fragment, Ipv6Fragment),
        ("esp", esp, UnsupportedProtocol),
        ("tcp checksum", bad_tcp_sum, TcpBadChecksum),
        (
            "tcp 19 bytes",
            {
                let mut f = tcp_ok[..14 + 40 + 19].to_vec();
                f[18..20].copy_from_slice(&19u16.to_be_bytes());
                f
            },
            TcpMalformed,
        ),
        ("udp zero checksum", zero_udp_sum, UdpBadChecksum),
        ("udp checksum", bad_udp_sum, UdpBadChecksum),
        ("udp length past the payload", udp_len_long, UdpMalformed),
        ("icmpv6 7 bytes", short_icmp, IcmpMalformed),
        ("icmpv6 checksum", bad_icmp_sum, IcmpBadChecksum),
        (
            "icmpv6 unknown type",
            refill6({
                let mut f = echo6(msg_type::ECHO_REQUEST);
                f[14 + 40] = 200;
                f
            }),
            IcmpUnsupported,
        ),
        (
            "ns hop limit 64",
            set_hop_limit(solicit(), 64),
            NdpBadHopLimit,
        ),
        ("rs hop limit 64", rs_hop, NdpBadHopLimit),
        ("ns option of length 0", ns_bad_option, NdpBadOption),
        ("ns code 1", ns_code, NdpMalformed),
        (
            "error with an ipv4 inner header",
            error6(msg_type::DEST_UNREACHABLE, 0, &inner_v4),
            IcmpMalformed,
        ),
        (
            "error quoting 7 bytes of udp",
            error6(msg_type::TIME_EXCEEDED, 0, &inner_short),
            IcmpMalformed,
        ),
        (
            "error about icmpv6",
            error6(msg_type::PACKET_TOO_BIG, 1280, &inner6(next_header::ICMPV6)),
            IcmpMalformed,
        ),
    ];
    for (name, src) in [
        ("source multicast", "ff02::1".parse::<Ipv6Addr>().unwrap()),
        ("source loopback", Ipv6Addr::LOCALHOST),
        ("source unspecified", Ipv6Addr::UNSPECIFIED),
    ] {
        cases.push((name, set_src(udp6(b""), src), Ipv6BadSource));
    }
    cases.push((
        "vlan-tagged bad version",
        {
            let mut f = build::with_vlan(&tcp_ok, 9);
            f[18] = 0x45;
            f
        },
        Ipv6BadVersion,
    ));
    cases
}

#[test]
fn valid_ipv6_tcp_udp_and_echo() {
    let f = tcp6(SYN, b"");
    let m = parse_frame(&f, 3, false, &hasher()).unwrap();
    assert_eq!(
        (m.family, m.kind, m.tcp_flags),
        (Family::V6, PacketKind::Tcp, SYN)
    );
    assert_eq!(
        m.key6,
        FlowKeyOf::new(Proto::Tcp, CLIENT6, 40000, VIP6, 443)
    );
    assert_eq!((m.l3_offset, m.l4_offset, m.l3_end), (14, 54, 74));
    assert_eq!(m.hash, hasher().hash(&m.key6));

    let mut f = udp6(b"query");
    f.extend_from_slice(&[0; 6]); // Ethernet padding
    let m = parse_frame(&f, 0, false, &hasher()).unwrap();
    assert_eq!(m.kind, PacketKind::Udp);
    assert_eq!(m.key6.dst_port, 53);
    assert_eq!(usize::from(m.l3_end), f.len() - 6);

    let m = parse_frame(&echo6(msg_type::ECHO_REQUEST), 0, false, &hasher()).unwrap();
    assert_eq!((m.kind, m.icmp_type), (PacketKind::IcmpEcho, 128));
    assert_eq!((m.key6.src_port, m.key6.dst_port), (0x4242, 0x4242));
    assert_eq!(m.key6.proto, Proto::Icmp);

    let tagged = build::with_vlan(&tcp6(ACK | PSH, b"x"), 42);
    let m = parse_frame(&tagged, 0, false, &hasher()).unwrap();
    assert_eq!((m.vlan, m.l3_offset, m.l4_offset), (Some(42), 18, 58));
}

#[test]
fn extension_headers_move_the_l4_offset() {
    let f = with_ext(
        tcp6(ACK, b"abc"),
        &[
            (next_header::HOP_BY_HOP, 8),
            (next_header::DEST_OPTS, 16),
            (next_header::ROUTING, 24),
            (next_header::AH, 12),
        ],
    );
    let m = parse_frame(&f, 0, false, &hasher()).unwrap();
    assert_eq!(m.l4_offset, 14 + 40 + 8 + 16 + 24 + 12);
    assert_eq!(m.key6.src_port, 40000);
    assert_eq!(usize::from(m.l3_end), f.len());
}

#[test]
fn ndp_messages_parse_as_ndp() {
    let m = parse_frame(&solicit(), 0, false, &hasher()).unwrap();
    assert_eq!(
        (m.kind, m.icmp_type),
        (PacketKind::Ndp, msg_type::NEIGHBOR_SOLICIT)
    );
    assert_eq!(m.l4_offset, 54);
    assert_eq!(m.key6.src_ip, CLIENT6);
    let na = build::ndp_advert(CLIENT_MAC, CLIENT6, GW_MAC, VIP6);
    let m = parse_frame(&na, 0, false, &hasher()).unwrap();
    assert_eq!(m.kind, PacketKind::Ndp);
    // Duplicate address detection: from ::, no source link-layer option.
    let mut dad = set_src(solicit(), Ipv6Addr::UNSPECIFIED);
    dad.truncate(14 + 40 + ndp::BODY_LEN);
    dad[18..20].copy_from_slice(&(ndp::BODY_LEN as u16).to_be_bytes());
    let dad = refill6(dad);
    let m = parse_frame(&dad, 0, false, &hasher()).unwrap();
    assert_eq!(m.kind, PacketKind::Ndp);
}

#[test]
fn icmpv6_errors_carry_the_inner_tuple_past_inner_extension_headers() {
    let f = error6(msg_type::PACKET_TOO_BIG, 1400, &inner6(next_header::TCP));
    let m = parse_frame(&f, 0, false, &hasher()).unwrap();
    assert_eq!(m.kind, PacketKind::IcmpError);
    assert_eq!(m.icmp_type, msg_type::PACKET_TOO_BIG);
    assert_eq!(
        m.key6,
        FlowKeyOf::new(Proto::Tcp, VIP6, 61000, BACKEND6, 8080)
    );
    assert_eq!((m.inner_l3_offset, m.inner_l4_offset), (62, 102));
    // An inner Destination Options header.
    let mut inner = inner6(next_header::UDP);
    inner[6] = next_header::DEST_OPTS;
    let tail = inner.split_off(40);
    inner.extend_from_slice(&[next_header::UDP, 0, 1, 4, 0, 0, 0, 0]);
    inner.extend_from_slice(&tail);
    let m = parse_frame(
        &error6(msg_type::DEST_UNREACHABLE, 0, &inner),
        0,
        false,
        &hasher(),
    )
    .unwrap();
    assert_eq!(m.key6.proto, Proto::Udp);
    assert_eq!(m.inner_l4_offset, 62 + 40 + 8);
}

#[test]
fn fragments_and_other_protocols_keep_their_destination_for_the_host_path() {
    let frames = [with_ext(udp6(b"x"), &[(next_header::FRAGMENT, 8)]), {
        let mut f = tcp6(ACK, b"");
        f[20] = 89; // OSPF
        f
    }];
    let mut metas = [PacketMeta::empty(0); 2];
    parse_batch(
        &frames.map(|f| TestFrame(f, false, Offload::NONE)),
        0,
        &mut metas,
        &hasher(),
    );
    for m in &metas {
        assert!(matches!(m.verdict, Verdict::Drop(_)));
        assert_eq!((m.family, m.key6.dst_ip), (Family::V6, VIP6));
    }
}

proptest! {
    /// Random valid IPv6 TCP/UDP frames, with random extension headers,
    /// tags and padding, parse to exactly their tuple and offsets.
    #[test]
    fn random_valid_ipv6_frames_parse_exactly(
        src in any::<u128>(), dst in any::<u128>(), sport in any::<u16>(), dport in any::<u16>(),
        is_tcp in any::<bool>(), payload in proptest::collection::vec(any::<u8>(), 0..200),
        dest_opts in 0usize..4, vlan in proptest::option::of(0u16..4096), padding in 0usize..20,
    ) {
        let src = Ipv6Addr::from(src);
        prop_assume!(!src.is_multicast() && !src.is_loopback() && !src.is_unspecified());
        let dst = Ipv6Addr::from(dst);
        let f = if is_tcp {
            build::eth_ipv6_tcp(CLIENT_MAC, GW_MAC, (src, sport), (dst, dport), ACK, 1, 2, &payload)
        } else {
            build::eth_ipv6_udp(CLIENT_MAC, GW_MAC, (src, sport), (dst, dport), &payload)
        };
        let mut f = with_ext(f, &vec![(next_header::DEST_OPTS, 8); dest_opts]);
        if let Some(v) = vlan {
            f = build::with_vlan(&f, v);
        }
        let ip_end = f.len();
        f.resize(ip_end + padding, 0);
        let m = parse_frame(&f, 0, false, &hasher()).unwrap();
        let l3: u16 = if vlan.is_some() { 18 } else { 14 };
        let proto = if is_tcp { Proto::Tcp } else { Proto::Udp };
        prop_assert_eq!(m.family, Family::V6);
        prop_assert_eq!(m.key6, FlowKeyOf::new(proto, src, sport, dst, dport));
        prop_assert_eq!(
            (m.l3_offset, m.l4_offset, m.l3_end),
            (l3, l3 + 40 + 8 * dest_opts as u16, ip_end as u16)
        );
        prop_assert_eq!(m.hash, hasher().hash(&m.key6));
    }

    /// Valid IPv6 frames mutated and cut: never a panic, and the
    /// invariants of a parsed meta hold.
    #[test]
    fn never_panics_on_mutated_ipv6_frames(
        which in 0usize..6, cut in any::<prop::sample::Index>(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        verified in any::<bool>(),
    ) {
        let mut f = match which {
            0 => tcp6(ACK, b"payload"),
            1 => with_ext(udp6(b"payload"), &[(next_header::HOP_BY_HOP, 8), (next_header::ROUTING, 16)]),
            2 => echo6(msg_type::ECHO_REQUEST),
            3 => error6(msg_type::PACKET_TOO_BIG, 1280, &inner6(next_header::TCP)),
            4 => solicit(),
            _ => build::with_vlan(&tcp6(SYN, b""), 3),
        };
        for (i, b) in edits {
            let i = i.index(f.len());
            f[i] = b;
        }
        f.truncate(cut.index(f.len() + 1));
        if let Ok(m) = parse_frame(&f, 0, verified, &hasher()) {
            super::tests::assert_meta_invariants(&f, &m);
        }
    }
}
