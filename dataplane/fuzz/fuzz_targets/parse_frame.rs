//! Arbitrary bytes through `parse_frame`; on success, every view at the
//! recorded offsets must be constructible and consistent with the meta.
//!
//! Input: one control byte, then the frame. Bit 0: the driver verified the
//! L4 checksums. Bit 1: fill the IPv4 header and L4 checksums before parsing,
//! so the fuzzer gets past the checksum checks without seeds (the raw bytes
//! are parsed first either way).
#![no_main]

use dataplane::flow::{Family, FlowKey6, TableHasher};
use dataplane::packet::{PacketKind, PacketMeta};
use dataplane::stage::parse::parse_frame;
use dataplane::wire::{arp, icmp, ipv4, ipv6, tcp, udp};
use dataplane::{FlowKey, Proto};
use libfuzzer_sys::fuzz_target;

/// Fill the IPv4 header checksum and the TCP/UDP/ICMP checksum, as far as
/// the (possibly bogus) length fields allow.
fn fix_checksums(frame: &mut [u8]) {
    let l3 = match frame.get(12..14) {
        Some([0x81, 0x00]) => 18,
        Some(_) => 14,
        None => return,
    };
    let Some(ip_bytes) = frame.get_mut(l3..) else {
        return;
    };
    let mut ip = ipv4::Packet::new_unchecked(&mut *ip_bytes);
    ip.fill_checksum();
    let (hlen, total, proto) = (ip.header_len(), usize::from(ip.total_len()), ip.protocol());
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let Some(l4) = ip_bytes.get_mut(hlen..total) else {
        return;
    };
    match proto {
        6 => tcp::Packet::new_unchecked(l4).fill_checksum(src, dst),
        17 => udp::Packet::new_unchecked(l4).fill_checksum(src, dst),
        1 => icmp::Packet::new_unchecked(l4).fill_checksum(),
        _ => {}
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&flag, frame)) = data.split_first() else {
        return;
    };
    let verified = flag & 1 == 1;
    check(frame, verified);
    if flag & 2 == 2 {
        let mut fixed = frame.to_vec();
        fix_checksums(&mut fixed);
        check(&fixed, verified);
    }
});

fn check(frame: &[u8], verified: bool) {
    let hasher = TableHasher::from_seed(0xf022);
    let Ok(m) = parse_frame(frame, 0, verified, &hasher) else {
        return;
    };
    let l3 = usize::from(m.l3_offset);
    let l4 = usize::from(m.l4_offset);
    let end = usize::from(m.l3_end);
    assert!(end <= frame.len());
    let l3_bytes = &frame[l3..end];
    if m.family == Family::V6 {
        check_v6(frame, &m);
        return;
    }
    if m.kind == PacketKind::Arp {
        let a = arp::Packet::new_checked(l3_bytes).expect("parsed ARP is Ethernet/IPv4");
        let _ = (a.operation(), a.sender_proto_addr(), a.target_hw_addr());
        return;
    }
    let ip = ipv4::Packet::new_checked(l3_bytes).expect("parsed IPv4 header");
    assert_eq!(ip.version(), 4);
    assert!(ip.verify_checksum());
    assert!(!ip.is_fragment());
    assert_eq!(l3 + ip.header_len(), l4);
    assert_eq!(ip.payload(), &frame[l4..end]);
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let l4_bytes = &frame[l4..end];
    match m.kind {
        PacketKind::Tcp => {
            let t = tcp::Packet::new_checked(l4_bytes).expect("parsed TCP header");
            assert_eq!(
                m.key,
                FlowKey::new(Proto::Tcp, src, t.src_port(), dst, t.dst_port())
            );
            assert_eq!(m.tcp_flags, t.flags());
            assert!(tcp::flags_are_valid(t.flags()));
            let _ = (
                t.seq_number(),
                t.ack_number(),
                t.window(),
                t.payload().len(),
            );
        }
        PacketKind::Udp => {
            let u = udp::Packet::new_checked(l4_bytes).expect("parsed UDP header");
            assert_eq!(
                m.key,
                FlowKey::new(Proto::Udp, src, u.src_port(), dst, u.dst_port())
            );
            let _ = u.payload().len();
        }
        PacketKind::IcmpEcho => {
            let i = icmp::Packet::new_checked(l4_bytes).expect("parsed ICMP header");
            assert!(icmp::is_echo(i.msg_type()));
            assert_eq!(m.key.src_port, i.echo_ident());
        }
        PacketKind::IcmpError => {
            let i = icmp::Packet::new_checked(l4_bytes).expect("parsed ICMP header");
            assert!(icmp::is_error(i.msg_type()));
            let inner_l3 = usize::from(m.inner_l3_offset);
            let inner_l4 = usize::from(m.inner_l4_offset);
            assert_eq!(inner_l3, l4 + icmp::ERROR_INNER_OFFSET);
            assert!(inner_l4 + 8 <= end);
            // The inner packet is truncated: only its header is checked.
            let inner = ipv4::Packet::new_unchecked(&frame[inner_l3..end]);
            assert_eq!(inner_l3 + inner.header_len(), inner_l4);
            assert_eq!(m.key.src_ip, inner.src_addr());
            assert_eq!(m.key.dst_ip, inner.dst_addr());
            assert_eq!(m.key.proto.ip_number(), inner.protocol());
        }
        PacketKind::Arp | PacketKind::Ndp => unreachable!("not IPv4 L4 kinds"),
    }
    assert_eq!(m.hash, hasher.hash(&m.key));
}

/// An IPv6 meta against the frame: the fixed header parses, the upper
/// layer starts past it (after the extension headers) and ends with the
/// packet, and the tuple is the upper layer's.
fn check_v6(frame: &[u8], m: &PacketMeta) {
    let (l3, l4, end) = (
        usize::from(m.l3_offset),
        usize::from(m.l4_offset),
        usize::from(m.l3_end),
    );
    let ip = ipv6::Packet::new_checked(&frame[l3..end]).expect("parsed IPv6 header");
    assert_eq!(ip.version(), 6);
    assert!(l3 + ipv6::HEADER_LEN <= l4 && l4 <= end);
    assert_eq!(end, l3 + ipv6::HEADER_LEN + usize::from(ip.payload_len()));
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let upper = &frame[l4..end];
    match m.kind {
        PacketKind::Tcp => {
            let t = tcp::Packet::new_checked(upper).expect("parsed TCP header");
            assert_eq!(
                m.key6,
                FlowKey6::new(Proto::Tcp, src, t.src_port(), dst, t.dst_port())
            );
            assert_eq!(m.tcp_flags, t.flags());
            assert!(tcp::flags_are_valid(t.flags()));
        }
        PacketKind::Udp => {
            let u = udp::Packet::new_checked(upper).expect("parsed UDP header");
            assert_eq!(
                m.key6,
                FlowKey6::new(Proto::Udp, src, u.src_port(), dst, u.dst_port())
            );
        }
        PacketKind::IcmpEcho => assert_eq!(m.key6.src_port, m.key6.dst_port),
        PacketKind::IcmpError => {
            let (inner_l3, inner_l4) = (
                usize::from(m.inner_l3_offset),
                usize::from(m.inner_l4_offset),
            );
            assert!(l4 < inner_l3 && inner_l3 + ipv6::HEADER_LEN <= inner_l4);
            assert!(inner_l4 + 8 <= end);
        }
        PacketKind::Ndp => assert!((133..=137).contains(&upper[0])),
        PacketKind::Arp => unreachable!("ARP is not IPv6"),
    }
}
