//! The frames of the drivers' namespace tests: IPv4/UDP frames to a test
//! port with a numbered payload, and the filter that tells them from the
//! IPv6 neighbour discovery / MLD chatter a namespace makes on link-up.
//! (The namespaces, veth pairs and raw socket peers come from the
//! `portico-netns` crate.)

use crate::wire::{ethernet, ipv4, udp};

/// Whether `frame` (VLAN-tagged or not) is IPv4/UDP to port `port`.
pub(crate) fn is_udp_to(frame: &[u8], port: u16) -> bool {
    let Ok(l3) = ethernet::Packet::new_unchecked(frame).l3_info() else {
        return false;
    };
    let Some(ip_bytes) = frame.get(l3.offset..) else {
        return false;
    };
    let Ok(ip) = ipv4::Packet::new_checked(ip_bytes) else {
        return false;
    };
    l3.ethertype == ethernet::ethertype::IPV4
        && ip.protocol() == ipv4::protocol::UDP
        && udp::Packet::new_checked(ip.payload()).is_ok_and(|u| u.dst_port() == port)
}

/// The UDP payload that makes an untagged Ethernet/IPv4/UDP frame `frame_len`
/// bytes long (at least 4 bytes): `id` big-endian, then bytes that depend
/// on `id` and their offset, so a frame's bytes tell which one it is.
pub(crate) fn numbered_payload(frame_len: usize, id: u32) -> Vec<u8> {
    let mut payload = vec![0u8; frame_len.saturating_sub(42).max(4)];
    payload[..4].copy_from_slice(&id.to_be_bytes());
    for (i, b) in payload.iter_mut().enumerate().skip(4) {
        *b = (i as u32 ^ id) as u8;
    }
    payload
}
