//! ARP for IPv4 over Ethernet (RFC 826), the only combination the gateway
//! speaks: htype 1, ptype 0x0800, hlen 6, plen 4, 28 bytes.
//!
//! Layout: htype (0..2), ptype (2..4), hlen (4), plen (5), operation (6..8),
//! sender hardware address (8..14), sender protocol address (14..18), target
//! hardware address (18..24), target protocol address (24..28).
//!
//! [`Packet::make_reply`] turns a request into the reply in place (RFC 826
//! "Packet Reception": swap sender and target, put our hardware address in the
//! sender field, set the opcode to reply); [`reply_in_place`] does the same
//! for a whole Ethernet frame, Ethernet addresses included.
//! [`write_frame`] and [`write_request`] write a whole Ethernet/ARP frame
//! (requests, gratuitous ARP) into a caller's buffer, allocating nothing.

use super::ethernet::{self, MacAddr};
use super::field::{array_at, ipv4_at, set_bytes, set_u16, u8_at, u16_at};
use super::{Error, Header, check_min};
use std::net::Ipv4Addr;

/// Length of an Ethernet/IPv4 ARP packet.
pub const PACKET_LEN: usize = 28;
/// Hardware type Ethernet.
pub const HTYPE_ETHERNET: u16 = 1;
/// Protocol type IPv4 (an EtherType).
pub const PTYPE_IPV4: u16 = 0x0800;

/// ARP operation codes.
pub mod op {
    pub const REQUEST: u16 = 1;
    pub const REPLY: u16 = 2;
}

mod off {
    pub const HTYPE: usize = 0;
    pub const PTYPE: usize = 2;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: usize = 6;
    pub const SHA: usize = 8;
    pub const SPA: usize = 14;
    pub const THA: usize = 18;
    pub const TPA: usize = 24;
}

/// A view of an Ethernet/IPv4 ARP packet.
#[derive(Clone, Copy, Debug)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// A view of at least 28 bytes of Ethernet/IPv4 ARP.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let p = Packet { buffer };
        check_min(Header::Arp, p.buffer.as_ref().len(), PACKET_LEN)?;
        if !p.is_ethernet_ipv4() {
            return Err(Error::ArpNotEthernetIpv4 {
                htype: p.hardware_type(),
                ptype: p.protocol_type(),
                hlen: p.hardware_len(),
                plen: p.protocol_len(),
            });
        }
        Ok(p)
    }

    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    pub fn hardware_type(&self) -> u16 {
        u16_at(self.buffer.as_ref(), off::HTYPE)
    }

    #[inline]
    pub fn protocol_type(&self) -> u16 {
        u16_at(self.buffer.as_ref(), off::PTYPE)
    }

    #[inline]
    pub fn hardware_len(&self) -> u8 {
        u8_at(self.buffer.as_ref(), off::HLEN)
    }

    #[inline]
    pub fn protocol_len(&self) -> u8 {
        u8_at(self.buffer.as_ref(), off::PLEN)
    }

    /// htype 1, ptype 0x0800, hlen 6, plen 4.
    #[inline]
    pub fn is_ethernet_ipv4(&self) -> bool {
        self.hardware_type() == HTYPE_ETHERNET
            && self.protocol_type() == PTYPE_IPV4
            && self.hardware_len() == 6
            && self.protocol_len() == 4
    }

    /// Operation ([`op::REQUEST`], [`op::REPLY`], ...).
    #[inline]
    pub fn operation(&self) -> u16 {
        u16_at(self.buffer.as_ref(), off::OPER)
    }

    #[inline]
    pub fn sender_hw_addr(&self) -> MacAddr {
        MacAddr(array_at(self.buffer.as_ref(), off::SHA))
    }

    #[inline]
    pub fn sender_proto_addr(&self) -> Ipv4Addr {
        ipv4_at(self.buffer.as_ref(), off::SPA)
    }

    #[inline]
    pub fn target_hw_addr(&self) -> MacAddr {
        MacAddr(array_at(self.buffer.as_ref(), off::THA))
    }

    #[inline]
    pub fn target_proto_addr(&self) -> Ipv4Addr {
        ipv4_at(self.buffer.as_ref(), off::TPA)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Write the fixed Ethernet/IPv4 header fields (htype, ptype, hlen, plen).
    #[inline]
    pub fn set_ethernet_ipv4(&mut self) {
        let b = self.buffer.as_mut();
        set_u16(b, off::HTYPE, HTYPE_ETHERNET);
        set_u16(b, off::PTYPE, PTYPE_IPV4);
        set_bytes(b, off::HLEN, &[6, 4]);
    }

    #[inline]
    pub fn set_operation(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), off::OPER, value);
    }

    #[inline]
    pub fn set_sender_hw_addr(&mut self, addr: MacAddr) {
        set_bytes(self.buffer.as_mut(), off::SHA, &addr.0);
    }

    #[inline]
    pub fn set_sender_proto_addr(&mut self, addr: Ipv4Addr) {
        set_bytes(self.buffer.as_mut(), off::SPA, &addr.octets());
    }

    #[inline]
    pub fn set_target_hw_addr(&mut self, addr: MacAddr) {
        set_bytes(self.buffer.as_mut(), off::THA, &addr.0);
    }

    #[inline]
    pub fn set_target_proto_addr(&mut self, addr: Ipv4Addr) {
        set_bytes(self.buffer.as_mut(), off::TPA, &addr.octets());
    }

    /// Turn this request into our reply in place: the requester becomes the
    /// target, `our_mac` and the address that was asked for become the sender,
    /// the operation becomes [`op::REPLY`]. The caller decides beforehand that
    /// the target address is one we own.
    #[inline]
    pub fn make_reply(&mut self, our_mac: MacAddr) {
        let asked_for = self.target_proto_addr();
        let requester_mac = self.sender_hw_addr();
        let requester_ip = self.sender_proto_addr();
        self.set_operation(op::REPLY);
        self.set_target_hw_addr(requester_mac);
        self.set_target_proto_addr(requester_ip);
        self.set_sender_hw_addr(our_mac);
        self.set_sender_proto_addr(asked_for);
    }
}

/// Length of an untagged Ethernet frame carrying ARP, without padding.
pub const FRAME_LEN: usize = ethernet::HEADER_LEN + PACKET_LEN;

/// Write an untagged Ethernet/IPv4 ARP frame into the first [`FRAME_LEN`]
/// bytes of `frame`: Ethernet from `sender_mac` to `eth_dst`, then the ARP
/// packet. Bytes after [`FRAME_LEN`] are left as they are (zero padding up
/// to the Ethernet minimum, say). Fails, writing nothing, when `frame` is
/// shorter than [`FRAME_LEN`].
pub fn write_frame(
    frame: &mut [u8],
    op: u16,
    eth_dst: MacAddr,
    sender_mac: MacAddr,
    sender_ip: Ipv4Addr,
    target_mac: MacAddr,
    target_ip: Ipv4Addr,
) -> Result<(), Error> {
    check_min(Header::Arp, frame.len(), FRAME_LEN)?;
    let (eth_bytes, arp_bytes) = frame.split_at_mut(ethernet::HEADER_LEN);
    let mut eth = ethernet::Packet::new_unchecked(eth_bytes);
    eth.set_dst_addr(eth_dst);
    eth.set_src_addr(sender_mac);
    eth.set_ethertype(ethernet::ethertype::ARP);
    let mut p = Packet::new_unchecked(arp_bytes);
    p.set_ethernet_ipv4();
    p.set_operation(op);
    p.set_sender_hw_addr(sender_mac);
    p.set_sender_proto_addr(sender_ip);
    p.set_target_hw_addr(target_mac);
    p.set_target_proto_addr(target_ip);
    Ok(())
}

/// [`write_frame`] for a broadcast request "who has `target_ip`? tell
/// `sender_ip`" from `sender_mac` (target hardware address zero); a
/// gratuitous ARP has `sender_ip == target_ip`.
pub fn write_request(
    frame: &mut [u8],
    sender_mac: MacAddr,
    sender_ip: Ipv4Addr,
    target_ip: Ipv4Addr,
) -> Result<(), Error> {
    write_frame(
        frame,
        op::REQUEST,
        MacAddr::BROADCAST,
        sender_mac,
        sender_ip,
        MacAddr::ZERO,
        target_ip,
    )
}

/// Turn the ARP request in `frame` (ARP header at `arp_offset`, after the
/// Ethernet header and an optional tag) into our reply in place: ARP fields
/// as [`Packet::make_reply`], Ethernet destination = the requester, Ethernet
/// source = `our_mac`. Returns the requester's MAC. The frame keeps its
/// length (and VLAN tag); the caller may truncate padding.
pub fn reply_in_place(
    frame: &mut [u8],
    arp_offset: usize,
    our_mac: MacAddr,
) -> Result<MacAddr, Error> {
    check_min(Header::Ethernet, frame.len(), ethernet::HEADER_LEN)?;
    let len = frame.len();
    let arp_buf = frame.get_mut(arp_offset..).ok_or(Error::Truncated {
        header: Header::Arp,
        needed_bytes: arp_offset.saturating_add(PACKET_LEN),
        len_bytes: len,
    })?;
    let mut arp = Packet::new_checked(arp_buf)?;
    let requester = arp.sender_hw_addr();
    arp.make_reply(our_mac);
    let mut eth = ethernet::Packet::new_unchecked(frame);
    eth.set_dst_addr(requester);
    eth.set_src_addr(our_mac);
    Ok(requester)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::build;

    const CLIENT: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xc1]);
    const US: MacAddr = MacAddr([2, 0, 0, 0, 0, 0x99]);
    const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const VIP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 100);

    #[test]
    fn request_fields_read_back() {
        let f = build::arp_request(CLIENT, CLIENT_IP, VIP);
        let p = Packet::new_checked(&f[14..]).unwrap();
        assert_eq!(p.operation(), op::REQUEST);
        assert_eq!(p.sender_hw_addr(), CLIENT);
        assert_eq!(p.sender_proto_addr(), CLIENT_IP);
        assert_eq!(p.target_proto_addr(), VIP);
        assert_eq!(p.target_hw_addr(), MacAddr::ZERO);
    }

    #[test]
    fn write_frame_is_ethernet_then_arp_and_leaves_padding_alone() {
        let mut f = [0xee_u8; 60];
        write_request(&mut f, US, VIP, VIP).unwrap();
        let eth = ethernet::Packet::new_checked(&f[..]).unwrap();
        assert_eq!(eth.dst_addr(), MacAddr::BROADCAST);
        assert_eq!(eth.src_addr(), US);
        assert_eq!(eth.ethertype(), ethernet::ethertype::ARP);
        let p = Packet::new_checked(&f[14..FRAME_LEN]).unwrap();
        assert_eq!(p.operation(), op::REQUEST);
        assert_eq!((p.sender_hw_addr(), p.sender_proto_addr()), (US, VIP));
        assert_eq!(
            (p.target_hw_addr(), p.target_proto_addr()),
            (MacAddr::ZERO, VIP)
        );
        assert!(f[FRAME_LEN..].iter().all(|&b| b == 0xee), "padding kept");
        let mut short = [0u8; FRAME_LEN - 1];
        assert!(write_frame(&mut short, op::REPLY, US, US, VIP, CLIENT, CLIENT_IP).is_err());
        assert_eq!(short, [0u8; FRAME_LEN - 1], "nothing written");
    }

    #[test]
    fn reply_in_place_equals_built_reply() {
        let mut f = build::arp_request(CLIENT, CLIENT_IP, VIP);
        assert_eq!(reply_in_place(&mut f, 14, US), Ok(CLIENT));
        assert_eq!(f, build::arp_reply(US, VIP, CLIENT, CLIENT_IP));
    }

    #[test]
    fn non_ethernet_ipv4_and_short_packets_are_refused() {
        let f = build::arp_request(CLIENT, CLIENT_IP, VIP);
        let mut arp = f[14..].to_vec();
        assert!(matches!(
            Packet::new_checked(&arp[..27]),
            Err(Error::Truncated {
                header: Header::Arp,
                ..
            })
        ));
        arp[5] = 16; // plen of IPv6
        assert!(matches!(
            Packet::new_checked(&arp[..]),
            Err(Error::ArpNotEthernetIpv4 { plen: 16, .. })
        ));
        let mut short = f.clone();
        assert!(reply_in_place(&mut short[..30], 14, US).is_err());
        assert!(reply_in_place(&mut short, 100, US).is_err());
        assert_eq!(short, f);
    }
}
