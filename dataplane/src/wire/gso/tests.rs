use super::*;
use crate::wire::build;
use crate::wire::ethernet::MacAddr;
use crate::wire::tcp::flags;
use std::net::Ipv4Addr;

const A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
const SRC: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const DST: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + 3) as u8).collect()
}

#[test]
fn completing_a_partial_checksum_gives_the_full_one() {
    let full = build::eth_ipv4_tcp(A, B, SRC, 1000, DST, 80, flags::ACK, 5, 6, &payload(333));
    let mut partial = full.clone();
    let o = build::make_partial(&mut partial, 0);
    assert_ne!(partial, full, "the seed differs from the checksum");
    complete_checksum(&mut partial, &o).unwrap();
    assert_eq!(partial, full);

    let full = build::eth_ipv4_udp(A, B, SRC, 53, DST, 5353, &payload(41));
    let mut partial = full.clone();
    let o = build::make_partial(&mut partial, 0);
    complete_checksum(&mut partial, &o).unwrap();
    assert_eq!(partial, full);
}

#[test]
fn a_checksum_field_outside_the_frame_is_refused() {
    let mut f = build::eth_ipv4_udp(A, B, SRC, 53, DST, 5353, &payload(1));
    let mut o = build::make_partial(&mut f, 0);
    o.csum_offset = 4000;
    assert_eq!(
        complete_checksum(&mut f, &o),
        Err(GsoError::BadChecksumRange)
    );
}

#[test]
fn a_tcp_super_packet_is_cut_as_the_kernel_would() {
    let data = payload(3500);
    let fl = flags::ACK | flags::PSH | flags::FIN | flags::CWR;
    let mut sp = build::eth_ipv4_tcp(A, B, SRC, 1000, DST, 80, fl, 0xffff_fff0, 9, &data);
    let o = build::make_partial(&mut sp, 1200);
    let mut buf = [0u8; 2000];
    let mut segs: Vec<Vec<u8>> = Vec::new();
    let n = segment(&sp, &o, &mut buf, |s| segs.push(s.to_vec())).unwrap();
    assert_eq!(n, 3);
    let mut joined = Vec::new();
    for (k, s) in segs.iter().enumerate() {
        let ip = ipv4::Packet::new_checked(&s[14..]).unwrap();
        assert!(ip.verify_checksum(), "segment {k} IPv4 checksum");
        assert_eq!(usize::from(ip.total_len()), s.len() - 14);
        let t = tcp::Packet::new_checked(&s[34..]).unwrap();
        assert!(t.verify_checksum(SRC, DST), "segment {k} TCP checksum");
        assert_eq!(t.seq_number(), 0xffff_fff0u32.wrapping_add(1200 * k as u32));
        let last = k == 2;
        assert_eq!(t.flags() & (flags::FIN | flags::PSH) != 0, last);
        assert_eq!(t.flags() & flags::CWR != 0, k == 0);
        assert_eq!(t.flags() & flags::ACK, flags::ACK);
        joined.extend_from_slice(t.payload());
    }
    assert_eq!(segs[2].len(), 54 + 1100);
    assert_eq!(joined, data);
}

#[test]
fn a_udp_super_packet_is_cut_into_datagrams() {
    let data = payload(2500);
    let mut sp = build::eth_ipv4_udp(A, B, SRC, 53, DST, 5353, &data);
    let o = build::make_partial(&mut sp, 1000);
    assert_eq!(o.gso, Gso::UdpL4);
    let mut buf = [0u8; 1100];
    let mut joined = Vec::new();
    let n = segment(&sp, &o, &mut buf, |s| {
        let u = udp::Packet::new_checked(&s[34..]).unwrap();
        assert!(u.verify_checksum(SRC, DST));
        joined.extend_from_slice(u.payload());
    })
    .unwrap();
    assert_eq!(n, 3);
    assert_eq!(joined, data);
}

#[test]
fn a_buffer_smaller_than_a_segment_is_an_error_not_a_panic() {
    let mut sp = build::eth_ipv4_tcp(A, B, SRC, 1, DST, 2, flags::ACK, 0, 0, &payload(3000));
    let o = build::make_partial(&mut sp, 1400);
    let mut buf = [0u8; 100];
    assert_eq!(
        segment(&sp, &o, &mut buf, |_| {}),
        Err(GsoError::BufferTooSmall(100))
    );
    let mut broken = sp.clone();
    broken.truncate(40);
    assert_eq!(
        segment(&broken, &o, &mut [0u8; 2000], |_| {}),
        Err(GsoError::BadHeaders)
    );
}
