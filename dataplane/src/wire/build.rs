//! Frame builders for tests, benches and the packet generator.
//!
//! They allocate a fresh `Vec` per frame and are not for the packet path.
//! Every builder fills all checksums (IPv4 header, TCP/UDP over the
//! pseudo-header, ICMP over the message; for IPv6, TCP/UDP/ICMPv6 over the
//! IPv6 pseudo-header). IPv4 headers have no options, TTL
//! [`DEFAULT_TTL`], identification 0 and DF set; TCP headers have no options
//! and window [`DEFAULT_WINDOW`]. Frames are untagged; [`with_vlan`] adds a
//! tag. Lengths beyond what IPv4 can carry are the caller's bug: the builders
//! truncate length fields to 16 bits.

use super::ethernet::{self, MacAddr, ethertype};
use super::ipv4::{self, protocol};
use super::{arp, checksum, icmp, icmpv6, ipv6, ndp, tcp, udp};
use std::net::{Ipv4Addr, Ipv6Addr};

/// Hop limit of built IPv6 packets (NDP messages: [`ndp::HOP_LIMIT`]).
pub const DEFAULT_HOP_LIMIT: u8 = 64;

/// TTL of built IPv4 packets.
pub const DEFAULT_TTL: u8 = 64;
/// Window of built TCP segments.
pub const DEFAULT_WINDOW: u16 = 64240;

/// An IPv4 packet (20-byte header, checksum filled) around `l4`.
pub fn ipv4_packet(src_ip: Ipv4Addr, dst_ip: Ipv4Addr, proto: u8, l4: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; ipv4::HEADER_LEN];
    buf.extend_from_slice(l4);
    let total = buf.len() as u16;
    let mut p = ipv4::Packet::new_unchecked(&mut buf[..]);
    p.set_version_ihl(5);
    p.set_total_len(total);
    p.set_flags_frag(true, false, 0);
    p.set_ttl(DEFAULT_TTL);
    p.set_protocol(proto);
    p.set_src_addr(src_ip);
    p.set_dst_addr(dst_ip);
    p.fill_checksum();
    buf
}

/// An Ethernet II frame around `payload`.
pub fn ethernet_frame(
    src_mac: MacAddr,
    dst_mac: MacAddr,
    ethertype: u16,
    payload: &[u8],
) -> Vec<u8> {
    let mut buf = vec![0u8; ethernet::HEADER_LEN];
    let mut p = ethernet::Packet::new_unchecked(&mut buf[..]);
    p.set_dst_addr(dst_mac);
    p.set_src_addr(src_mac);
    p.set_ethertype(ethertype);
    buf.extend_from_slice(payload);
    buf
}

/// Insert one 802.1Q tag (priority 0) with `vlan_id` into an untagged frame.
/// Frames shorter than an Ethernet header are returned unchanged.
pub fn with_vlan(frame: &[u8], vlan_id: u16) -> Vec<u8> {
    let (Some(addrs), Some(rest)) = (frame.get(..12), frame.get(12..)) else {
        return frame.to_vec();
    };
    let mut buf = Vec::with_capacity(frame.len() + ethernet::VLAN_TAG_LEN);
    buf.extend_from_slice(addrs);
    buf.extend_from_slice(&ethertype::VLAN.to_be_bytes());
    buf.extend_from_slice(&(vlan_id & ethernet::VLAN_ID_MASK).to_be_bytes());
    buf.extend_from_slice(rest);
    buf
}

/// A TCP segment with checksum filled for the given addresses.
#[allow(clippy::too_many_arguments)]
pub fn tcp_segment(
    src_ip: Ipv4Addr,
    sport: u16,
    dst_ip: Ipv4Addr,
    dport: u16,
    flags: u8,
    seq: u32,
    ack: u32,
    payload: &[u8],
) -> Vec<u8> {
    let mut buf = tcp_unchecksummed((sport, dport), flags, seq, ack, payload);
    tcp::Packet::new_unchecked(&mut buf[..]).fill_checksum(src_ip, dst_ip);
    buf
}

/// A TCP segment (no options, window [`DEFAULT_WINDOW`]) with a zero
/// checksum field: the part both address families share.
fn tcp_unchecksummed(
    (sport, dport): (u16, u16),
    flags: u8,
    seq: u32,
    ack: u32,
    payload: &[u8],
) -> Vec<u8> {
    let mut buf = vec![0u8; tcp::HEADER_LEN];
    buf.extend_from_slice(payload);
    let mut p = tcp::Packet::new_unchecked(&mut buf[..]);
    p.set_src_port(sport);
    p.set_dst_port(dport);
    p.set_seq_number(seq);
    p.set_ack_number(ack);
    p.set_data_offset_words(5);
    p.set_flags(flags);
    p.set_window(DEFAULT_WINDOW);
    buf
}

/// A UDP datagram with a zero checksum field.
fn udp_unchecksummed((sport, dport): (u16, u16), payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; udp::HEADER_LEN];
    buf.extend_from_slice(payload);
    let len = buf.len() as u16;
    let mut p = udp::Packet::new_unchecked(&mut buf[..]);
    p.set_src_port(sport);
    p.set_dst_port(dport);
    p.set_len(len);
    buf
}

/// A UDP datagram with checksum filled for the given addresses.
pub fn udp_datagram(
    src_ip: Ipv4Addr,
    sport: u16,
    dst_ip: Ipv4Addr,
    dport: u16,
    payload: &[u8],
) -> Vec<u8> {
    let mut buf = udp_unchecksummed((sport, dport), payload);
    udp::Packet::new_unchecked(&mut buf[..]).fill_checksum(src_ip, dst_ip);
    buf
}

/// IPv4 + TCP, no Ethernet header.
#[allow(clippy::too_many_arguments)]
pub fn ipv4_tcp(
    src_ip: Ipv4Addr,
    sport: u16,
    dst_ip: Ipv4Addr,
    dport: u16,
    flags: u8,
    seq: u32,
    ack: u32,
    payload: &[u8],
) -> Vec<u8> {
    let seg = tcp_segment(src_ip, sport, dst_ip, dport, flags, seq, ack, payload);
    ipv4_packet(src_ip, dst_ip, protocol::TCP, &seg)
}

/// IPv4 + UDP, no Ethernet header.
pub fn ipv4_udp(
    src_ip: Ipv4Addr,
    sport: u16,
    dst_ip: Ipv4Addr,
    dport: u16,
    payload: &[u8],
) -> Vec<u8> {
    let seg = udp_datagram(src_ip, sport, dst_ip, dport, payload);
    ipv4_packet(src_ip, dst_ip, protocol::UDP, &seg)
}

/// IPv4 + ICMP echo (`icmp_type` [`icmp::kind::ECHO_REQUEST`] or
/// [`icmp::kind::ECHO_REPLY`]), no Ethernet header.
pub fn ipv4_icmp_echo(
    src_ip: Ipv4Addr,
    dst_ip: Ipv4Addr,
    icmp_type: u8,
    ident: u16,
    seq: u16,
    payload: &[u8],
) -> Vec<u8> {
    let mut msg = vec![0u8; icmp::HEADER_LEN];
    msg.extend_from_slice(payload);
    let mut p = icmp::Packet::new_unchecked(&mut msg[..]);
    p.set_msg_type(icmp_type);
    p.set_msg_code(0);
    p.set_echo_ident(ident);
    p.set_echo_seq(seq);
    p.fill_checksum();
    ipv4_packet(src_ip, dst_ip, protocol::ICMP, &msg)
}

/// IPv4 + ICMP error (`icmp_type` 3, 11 or 12) embedding `inner` (an IPv4
/// packet, possibly truncated by the caller) verbatim; no Ethernet header.
/// For "fragmentation needed" set the MTU with [`icmp::Packet::set_next_hop_mtu`]
/// and refill the checksum.
pub fn ipv4_icmp_error(
    src_ip: Ipv4Addr,
    dst_ip: Ipv4Addr,
    icmp_type: u8,
    code: u8,
    inner: &[u8],
) -> Vec<u8> {
    let mut msg = vec![0u8; icmp::HEADER_LEN];
    msg.extend_from_slice(inner);
    let mut p = icmp::Packet::new_unchecked(&mut msg[..]);
    p.set_msg_type(icmp_type);
    p.set_msg_code(code);
    p.fill_checksum();
    ipv4_packet(src_ip, dst_ip, protocol::ICMP, &msg)
}

/// Ethernet + IPv4 + TCP.
#[allow(clippy::too_many_arguments)]
pub fn eth_ipv4_tcp(
    src_mac: MacAddr,
    dst_mac: MacAddr,
    src_ip: Ipv4Addr,
    sport: u16,
    dst_ip: Ipv4Addr,
    dport: u16,
    flags: u8,
    seq: u32,
    ack: u32,
    payload: &[u8],
) -> Vec<u8> {
    let ip = ipv4_tcp(src_ip, sport, dst_ip, dport, flags, seq, ack, payload);
    ethernet_frame(src_mac, dst_mac, ethertype::IPV4, &ip)
}

/// Ethernet + IPv4 + UDP.
#[allow(clippy::too_many_arguments)]
pub fn eth_ipv4_udp(
    src_mac: MacAddr,
    dst_mac: MacAddr,
    src_ip: Ipv4Addr,
    sport: u16,
    dst_ip: Ipv4Addr,
    dport: u16,
    payload: &[u8],
) -> Vec<u8> {
    let ip = ipv4_udp(src_ip, sport, dst_ip, dport, payload);
    ethernet_frame(src_mac, dst_mac, ethertype::IPV4, &ip)
}

/// Ethernet + IPv4 + ICMP echo request/reply.
#[allow(clippy::too_many_arguments)]
pub fn eth_ipv4_icmp_echo(
    src_mac: MacAddr,
    dst_mac: MacAddr,
    src_ip: Ipv4Addr,
    dst_ip: Ipv4Addr,
    icmp_type: u8,
    ident: u16,
    seq: u16,
    payload: &[u8],
) -> Vec<u8> {
    let ip = ipv4_icmp_echo(src_ip, dst_ip, icmp_type, ident, seq, payload);
    ethernet_frame(src_mac, dst_mac, ethertype::IPV4, &ip)
}

/// Ethernet + IPv4 + ICMP error wrapping the IPv4 packet `inner`.
#[allow(clippy::too_many_arguments)]
pub fn eth_ipv4_icmp_error(
    src_mac: MacAddr,
    dst_mac: MacAddr,
    src_ip: Ipv4Addr,
    dst_ip: Ipv4Addr,
    icmp_type: u8,
    code: u8,
    inner: &[u8],
) -> Vec<u8> {
    let ip = ipv4_icmp_error(src_ip, dst_ip, icmp_type, code, inner);
    ethernet_frame(src_mac, dst_mac, ethertype::IPV4, &ip)
}

/// Broadcast "who has `target_ip`? tell `sender_ip`" from `sender_mac`
/// (target hardware address zero).
pub fn arp_request(sender_mac: MacAddr, sender_ip: Ipv4Addr, target_ip: Ipv4Addr) -> Vec<u8> {
    let mut frame = vec![0u8; arp::FRAME_LEN];
    // Cannot fail: the buffer is exactly `FRAME_LEN` bytes.
    let _ = arp::write_request(&mut frame, sender_mac, sender_ip, target_ip);
    frame
}

/// Unicast "`sender_ip` is at `sender_mac`" to `target_mac`/`target_ip`.
pub fn arp_reply(
    sender_mac: MacAddr,
    sender_ip: Ipv4Addr,
    target_mac: MacAddr,
    target_ip: Ipv4Addr,
) -> Vec<u8> {
    let mut frame = vec![0u8; arp::FRAME_LEN];
    // Cannot fail: the buffer is exactly `FRAME_LEN` bytes.
    let _ = arp::write_frame(
        &mut frame,
        arp::op::REPLY,
        target_mac,
        sender_mac,
        sender_ip,
        target_mac,
        target_ip,
    );
    frame
}

/// An IPv6 packet (no extension headers, hop limit `hop_limit`) around
/// `upper`, whose checksum the caller filled.
pub fn ipv6_packet(
    src_ip: Ipv6Addr,
    dst_ip: Ipv6Addr,
    next_header: u8,
    hop_limit: u8,
    upper: &[u8],
) -> Vec<u8> {
    let mut buf = vec![0u8; ipv6::HEADER_LEN];
    buf.extend_from_slice(upper);
    let mut p = ipv6::Packet::new_unchecked(&mut buf[..]);
    p.set_version_tc_flow(0, 0);
    p.set_payload_len(upper.len() as u16);
    p.set_next_header(next_header);
    p.set_hop_limit(hop_limit);
    p.set_src_addr(src_ip);
    p.set_dst_addr(dst_ip);
    buf
}

/// An Ethernet frame around an IPv6 packet around `upper`.
fn eth_ipv6(
    (src_mac, dst_mac): (MacAddr, MacAddr),
    (src_ip, dst_ip): (Ipv6Addr, Ipv6Addr),
    next_header: u8,
    hop_limit: u8,
    upper: &[u8],
) -> Vec<u8> {
    let ip = ipv6_packet(src_ip, dst_ip, next_header, hop_limit, upper);
    ethernet_frame(src_mac, dst_mac, ethertype::IPV6, &ip)
}

/// Ethernet + IPv6 + TCP (no options, window [`DEFAULT_WINDOW`]),
/// checksum over the IPv6 pseudo-header.
#[allow(clippy::too_many_arguments)]
pub fn eth_ipv6_tcp(
    src_mac: MacAddr,
    dst_mac: MacAddr,
    (src_ip, sport): (Ipv6Addr, u16),
    (dst_ip, dport): (Ipv6Addr, u16),
    flags: u8,
    seq: u32,
    ack: u32,
    payload: &[u8],
) -> Vec<u8> {
    let mut seg = tcp_unchecksummed((sport, dport), flags, seq, ack, payload);
    let c = checksum::l4_checksum_v6(src_ip, dst_ip, ipv6::next_header::TCP, &seg);
    seg[16..18].copy_from_slice(&c.to_be_bytes());
    eth_ipv6(
        (src_mac, dst_mac),
        (src_ip, dst_ip),
        ipv6::next_header::TCP,
        DEFAULT_HOP_LIMIT,
        &seg,
    )
}

/// Ethernet + IPv6 + UDP, checksum over the IPv6 pseudo-header (a computed
/// 0 sent as `0xffff`: UDP over IPv6 always has one).
pub fn eth_ipv6_udp(
    src_mac: MacAddr,
    dst_mac: MacAddr,
    (src_ip, sport): (Ipv6Addr, u16),
    (dst_ip, dport): (Ipv6Addr, u16),
    payload: &[u8],
) -> Vec<u8> {
    let mut dgram = udp_unchecksummed((sport, dport), payload);
    let c = match checksum::l4_checksum_v6(src_ip, dst_ip, ipv6::next_header::UDP, &dgram) {
        0 => 0xffff,
        c => c,
    };
    dgram[6..8].copy_from_slice(&c.to_be_bytes());
    eth_ipv6(
        (src_mac, dst_mac),
        (src_ip, dst_ip),
        ipv6::next_header::UDP,
        DEFAULT_HOP_LIMIT,
        &dgram,
    )
}

/// Ethernet + IPv6 + ICMPv6 echo request or reply.
pub fn eth_ipv6_echo(
    src_mac: MacAddr,
    dst_mac: MacAddr,
    (src_ip, dst_ip): (Ipv6Addr, Ipv6Addr),
    msg_type: u8,
    (ident, seq): (u16, u16),
    payload: &[u8],
) -> Vec<u8> {
    let word = (u32::from(ident) << 16) | u32::from(seq);
    eth_ipv6_icmpv6(
        (src_mac, dst_mac),
        (src_ip, dst_ip),
        (msg_type, 0, word),
        payload,
    )
}

/// Ethernet + IPv6 + an ICMPv6 message of `msg_type`/`code` whose 4
/// type-specific bytes are `word` (Packet Too Big: the MTU; others 0) and
/// whose body is `body` (an error's: the invoking packet), hop limit
/// [`DEFAULT_HOP_LIMIT`].
pub fn eth_ipv6_icmpv6(
    (src_mac, dst_mac): (MacAddr, MacAddr),
    (src_ip, dst_ip): (Ipv6Addr, Ipv6Addr),
    (msg_type, code, word): (u8, u8, u32),
    body: &[u8],
) -> Vec<u8> {
    let mut msg = vec![0u8; icmpv6::HEADER_LEN];
    msg.extend_from_slice(body);
    let mut p = icmpv6::Packet::new_unchecked(&mut msg[..]);
    p.set_msg_type(msg_type);
    p.set_msg_code(code);
    p.set_mtu(word);
    p.fill_checksum(src_ip, dst_ip);
    eth_ipv6(
        (src_mac, dst_mac),
        (src_ip, dst_ip),
        ipv6::next_header::ICMPV6,
        DEFAULT_HOP_LIMIT,
        &msg,
    )
}

/// A Neighbour Solicitation from `src_ip`/`src_mac` for `target`, to its
/// solicited-node multicast address (RFC 4861 §7.2.2), hop limit 255.
pub fn ndp_solicit(src_mac: MacAddr, src_ip: Ipv6Addr, target: Ipv6Addr) -> Vec<u8> {
    let dst_ip = ndp::solicited_node(target);
    let mut msg = [0u8; ndp::BODY_LEN + ndp::LLA_OPTION_LEN];
    let _ = ndp::write(
        &mut msg,
        icmpv6::msg_type::NEIGHBOR_SOLICIT,
        0,
        target,
        src_mac,
        (src_ip, dst_ip),
    );
    eth_ipv6(
        (src_mac, ndp::multicast_mac(dst_ip)),
        (src_ip, dst_ip),
        ipv6::next_header::ICMPV6,
        ndp::HOP_LIMIT,
        &msg,
    )
}

/// A solicited Neighbour Advertisement (S and O set) of `target` at
/// `src_mac`, from `target` to `dst_ip`/`dst_mac`, hop limit 255.
pub fn ndp_advert(
    src_mac: MacAddr,
    target: Ipv6Addr,
    dst_mac: MacAddr,
    dst_ip: Ipv6Addr,
) -> Vec<u8> {
    let mut msg = [0u8; ndp::BODY_LEN + ndp::LLA_OPTION_LEN];
    let _ = ndp::write(
        &mut msg,
        icmpv6::msg_type::NEIGHBOR_ADVERT,
        ndp::flags::SOLICITED | ndp::flags::OVERRIDE,
        target,
        src_mac,
        (target, dst_ip),
    );
    eth_ipv6(
        (src_mac, dst_mac),
        (target, dst_ip),
        ipv6::next_header::ICMPV6,
        ndp::HOP_LIMIT,
        &msg,
    )
}

/// Insert `count` Destination Options headers of `8 * (1 + ext_words)` bytes
/// each (PadN filled; RFC 8200 §4.6) between the fixed IPv6 header and the
/// upper layer of an untagged Ethernet/IPv6 frame, fixing the payload length
/// and the Next Header chain. Returns the new upper-layer offset.
pub fn with_dest_opts(frame: &mut Vec<u8>, count: usize, ext_words: u8) -> usize {
    let l3 = ethernet::HEADER_LEN;
    let upper = ipv6::Packet::new_unchecked(&frame[l3..]).next_header();
    let len = 8 * (1 + usize::from(ext_words));
    let mut ext = Vec::with_capacity(count * len);
    for i in 0..count {
        let next = if i + 1 == count {
            upper
        } else {
            ipv6::next_header::DEST_OPTS
        };
        let start = ext.len();
        ext.resize(start + len, 0);
        ext[start] = next;
        ext[start + 1] = ext_words;
        ext[start + 2] = 1; // PadN
        ext[start + 3] = (len - 4) as u8;
    }
    let at = l3 + ipv6::HEADER_LEN;
    frame.splice(at..at, ext.iter().copied());
    let mut ip = ipv6::Packet::new_unchecked(&mut frame[l3..]);
    let payload = ip.payload_len() + ext.len() as u16;
    ip.set_payload_len(payload);
    if count > 0 {
        ip.set_next_header(ipv6::next_header::DEST_OPTS);
    }
    at + ext.len()
}

/// Turn a built Ethernet/IPv4 or Ethernet/IPv6 TCP or UDP frame (no VLAN
/// tag, no IPv6 extension header) into what a local sender with checksum
/// offload hands a device: the L4 checksum field holds the pseudo-header
/// seed (`NEEDS_CSUM`); with `gso_size` > 0 it is a super-packet of
/// `gso_size`-byte segments (`TcpV4`, `TcpV6` or `UdpL4`). Returns its
/// offload metadata.
pub fn make_partial(frame: &mut [u8], gso_size: u16) -> crate::wire::vnet::Offload {
    use crate::wire::vnet::{Gso, Offload};
    let l3 = ethernet::HEADER_LEN;
    let v6 = ethernet::Packet::new_unchecked(&*frame).ethertype() == ethertype::IPV6;
    let (l4, proto, seed) = if v6 {
        let ip = ipv6::Packet::new_unchecked(&frame[l3..]);
        let (l4, proto) = (l3 + ipv6::HEADER_LEN, ip.next_header());
        let len = u32::from(ip.payload_len());
        let seed = checksum::pseudo_header_sum_v6(ip.src_addr(), ip.dst_addr(), proto, len);
        (l4, proto, seed)
    } else {
        let ip = ipv4::Packet::new_unchecked(&frame[l3..]);
        let l4 = l3 + ip.header_len();
        let len = (l3 + usize::from(ip.total_len()) - l4) as u16;
        let seed = checksum::pseudo_header_sum(ip.src_addr(), ip.dst_addr(), ip.protocol(), len);
        (l4, ip.protocol(), seed)
    };
    let csum_offset: u16 = if proto == protocol::TCP { 16 } else { 6 };
    let field = l4 + usize::from(csum_offset);
    frame[field..field + 2].copy_from_slice(&seed.to_be_bytes());
    Offload {
        gso: match (gso_size > 0, proto, v6) {
            (false, _, _) => Gso::None,
            (true, protocol::TCP, false) => Gso::TcpV4,
            (true, protocol::TCP, true) => Gso::TcpV6,
            (true, _, _) => Gso::UdpL4,
        },
        ecn: false,
        gso_size,
        needs_csum: true,
        csum_start: l4 as u16,
        csum_offset,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
    const B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

    /// The IPv6 payload of an untagged frame, checked.
    fn ip(frame: &[u8]) -> ipv6::Packet<&[u8]> {
        assert_eq!(
            ethernet::Packet::new_checked(frame).unwrap().ethertype(),
            ethertype::IPV6
        );
        ipv6::Packet::new_checked(&frame[ethernet::HEADER_LEN..]).unwrap()
    }

    #[test]
    fn ipv6_builders_make_frames_that_verify() {
        let (c, s): (Ipv6Addr, Ipv6Addr) = (
            "2001:db8::7".parse().unwrap(),
            "2001:db8:1::10".parse().unwrap(),
        );
        let f = eth_ipv6_tcp(A, B, (c, 40000), (s, 80), tcp::flags::SYN, 1, 0, b"");
        let p = ip(&f);
        assert!(checksum::verify_l4_v6(
            c,
            s,
            ipv6::next_header::TCP,
            p.payload()
        ));
        let f = eth_ipv6_udp(A, B, (c, 5353), (s, 53), b"query");
        let p = ip(&f);
        assert!(checksum::verify_l4_v6(
            c,
            s,
            ipv6::next_header::UDP,
            p.payload()
        ));
        let f = eth_ipv6_echo(
            A,
            B,
            (c, s),
            icmpv6::msg_type::ECHO_REQUEST,
            (1, 2),
            b"ping",
        );
        let p = ip(&f);
        assert!(
            icmpv6::Packet::new_checked(p.payload())
                .unwrap()
                .verify_checksum(c, s)
        );
        let f = ndp_solicit(A, c, s);
        let p = ip(&f);
        assert_eq!(
            ndp::parse(p.src_addr(), p.dst_addr(), p.hop_limit(), p.payload()),
            Ok(ndp::Message::Solicit(ndp::Solicit {
                target: s,
                source_mac: Some(A)
            }))
        );
        assert_eq!(
            ethernet::Packet::new_checked(&f[..]).unwrap().dst_addr(),
            ndp::multicast_mac(ndp::solicited_node(s))
        );
        let f = ndp_advert(B, s, A, c);
        let p = ip(&f);
        assert!(matches!(
            ndp::parse(p.src_addr(), p.dst_addr(), p.hop_limit(), p.payload()),
            Ok(ndp::Message::Advert(ndp::Advert { target, target_mac: Some(B), .. })) if target == s
        ));
    }
}
