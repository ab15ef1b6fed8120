//! The IPv6 parsers (issue 17) over arbitrary bytes: the fixed-header view,
//! the extension-header walk, ICMPv6 and Neighbour Discovery. Byte 0 is the
//! hop limit NDP is judged with; the rest is an IPv6 packet. Invariants: no
//! panic; a checked view's payload is exactly `payload_len` bytes; a walk
//! that succeeds ends inside the payload and within its bounds; an NDP
//! message that parses has a unicast target, and a solicitation from `::`
//! went to a solicited-node address without a link-layer option.
#![no_main]

use dataplane::wire::{icmpv6, ipv6, ndp};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&hop_limit, packet)) = data.split_first() else {
        return;
    };
    let unchecked = ipv6::Packet::new_unchecked(packet);
    let _ = (
        unchecked.version(),
        unchecked.traffic_class(),
        unchecked.flow_label(),
        unchecked.payload().len(),
    );
    let Ok(ip) = ipv6::Packet::new_checked(packet) else {
        return;
    };
    let payload = ip.payload();
    assert_eq!(payload.len(), usize::from(ip.payload_len()));
    let Ok(chain) = ipv6::walk(ip.next_header(), payload) else {
        return;
    };
    assert!(chain.l4_offset <= payload.len());
    assert!(chain.l4_offset <= ipv6::MAX_EXT_BYTES);
    assert!(usize::from(chain.headers) <= ipv6::MAX_EXT_HEADERS);
    if chain.protocol != ipv6::next_header::ICMPV6 || chain.fragment.is_some() {
        return;
    }
    let body = &payload[chain.l4_offset..];
    let icmp = icmpv6::Packet::new_unchecked(body);
    let _ = (icmp.mtu(), icmp.echo_seq(), icmp.payload().len());
    let _ = icmp.verify_checksum(ip.src_addr(), ip.dst_addr());
    match ndp::parse(ip.src_addr(), ip.dst_addr(), hop_limit, body) {
        Ok(ndp::Message::Solicit(s)) => {
            assert!(!s.target.is_multicast());
            if ip.src_addr().is_unspecified() {
                assert!(ndp::is_solicited_node(ip.dst_addr()) && s.source_mac.is_none());
            }
        }
        Ok(ndp::Message::Advert(a)) => {
            assert!(!a.target.is_multicast());
            assert_eq!(hop_limit, ndp::HOP_LIMIT);
        }
        Err(_) => {}
    }
});
