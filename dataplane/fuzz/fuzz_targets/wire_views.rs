//! Every view over arbitrary bytes: `new_checked` must either refuse or give
//! a view whose getters stay inside the buffer; unchecked views and setters
//! must never panic either.
#![no_main]

use dataplane::wire::{MacAddr, arp, ethernet, icmp, ipv4, tcp, udp};
use libfuzzer_sys::fuzz_target;
use std::net::Ipv4Addr;

fuzz_target!(|data: &[u8]| {
    let addr = Ipv4Addr::new(192, 0, 2, 1);

    let e = ethernet::Packet::new_unchecked(data);
    let _ = (e.dst_addr(), e.src_addr(), e.vlan_id(), e.inner_ethertype());
    if let Ok(e) = ethernet::Packet::new_checked(data) {
        if let Ok(info) = e.l3_info() {
            assert!(info.offset <= data.len());
        }
    }

    let a = arp::Packet::new_unchecked(data);
    let _ = (a.operation(), a.sender_hw_addr(), a.target_proto_addr());
    if let Ok(a) = arp::Packet::new_checked(data) {
        assert!(a.is_ethernet_ipv4());
    }

    let i = ipv4::Packet::new_unchecked(data);
    let _ = (
        i.verify_checksum(),
        i.payload().len(),
        i.frag_offset_bytes(),
        i.src_addr(),
    );
    if let Ok(i) = ipv4::Packet::new_checked(data) {
        assert!(i.header_len() >= ipv4::HEADER_LEN);
        assert!(usize::from(i.total_len()) <= data.len());
        assert_eq!(
            i.payload().len(),
            usize::from(i.total_len()) - i.header_len()
        );
    }

    let t = tcp::Packet::new_unchecked(data);
    let _ = (t.verify_checksum(addr, addr), t.payload().len(), t.flags());
    if let Ok(t) = tcp::Packet::new_checked(data) {
        assert!(t.header_len() >= tcp::HEADER_LEN && t.header_len() <= data.len());
    }

    let u = udp::Packet::new_unchecked(data);
    let _ = (u.verify_checksum(addr, addr), u.payload().len());
    if let Ok(u) = udp::Packet::new_checked(data) {
        assert_eq!(u.payload().len(), usize::from(u.len()) - udp::HEADER_LEN);
    }

    let c = icmp::Packet::new_unchecked(data);
    let _ = (
        c.verify_checksum(),
        c.echo_ident(),
        c.next_hop_mtu(),
        c.payload().len(),
    );

    // Setters on a copy: fill, rewrite, and the checksums must verify after
    // (an L4 segment over IPv4 is at most 65535 bytes).
    if data.len() > usize::from(u16::MAX) {
        return;
    }
    let mut buf = data.to_vec();
    {
        let mut i = ipv4::Packet::new_unchecked(&mut buf[..]);
        i.set_src_addr_incremental(addr);
        let _ = i.decrement_ttl();
    }
    let mut arp_buf = data.to_vec();
    let _ = arp::reply_in_place(
        &mut arp_buf,
        ethernet::HEADER_LEN,
        MacAddr([2, 0, 0, 0, 0, 1]),
    );
    if let Ok(mut t) = tcp::Packet::new_checked(&mut buf[..]) {
        t.fill_checksum(addr, addr);
        assert!(t.verify_checksum(addr, addr));
        t.set_dst_port_incremental(80);
        assert!(t.verify_checksum(addr, addr));
    }
    let mut buf = data.to_vec();
    if let Ok(mut u) = udp::Packet::new_checked(&mut buf[..]) {
        u.fill_checksum(addr, addr);
        assert!(u.verify_checksum(addr, addr));
        u.set_src_port_incremental(53);
        assert!(u.verify_checksum(addr, addr));
    }
    let mut buf = data.to_vec();
    if let Ok(mut c) = icmp::Packet::new_checked(&mut buf[..]) {
        c.fill_checksum();
        assert!(c.verify_checksum());
    }
});
