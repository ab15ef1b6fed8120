//! Ethernet II frames (IEEE 802.3) with at most one IEEE 802.1Q tag.
//!
//! Layout: destination MAC (0..6), source MAC (6..12), EtherType (12..14).
//! With an 802.1Q tag the EtherType field holds the TPID `0x8100`, followed
//! by the tag control information (14..16, VLAN id in the low 12 bits) and the
//! real EtherType (16..18). Frames with a second stacked tag, or an 802.1ad
//! service tag (`0x88a8`), are refused ([`Error::VlanStacked`]): the gateway
//! serves access ports, not provider bridges.

use super::field::{array_at, set_bytes, set_u16, u16_at};
use super::{Error, Header, check_min};

/// EtherType values (IEEE registry).
pub mod ethertype {
    pub const IPV4: u16 = 0x0800;
    pub const ARP: u16 = 0x0806;
    /// IEEE 802.1Q customer tag (TPID).
    pub const VLAN: u16 = 0x8100;
    /// IEEE 802.1ad service tag (QinQ outer TPID).
    pub const QINQ: u16 = 0x88a8;
    pub const IPV6: u16 = 0x86dd;
}

/// Length of an untagged Ethernet header.
pub const HEADER_LEN: usize = 14;
/// Length of one 802.1Q tag.
pub const VLAN_TAG_LEN: usize = 4;
/// Mask of the VLAN id in the tag control information.
pub const VLAN_ID_MASK: u16 = 0x0fff;

/// A 48-bit MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
    pub const ZERO: MacAddr = MacAddr([0; 6]);

    #[inline]
    pub const fn octets(self) -> [u8; 6] {
        self.0
    }

    #[inline]
    pub fn is_broadcast(self) -> bool {
        self == Self::BROADCAST
    }

    /// Group bit set (multicast or broadcast).
    #[inline]
    pub fn is_multicast(self) -> bool {
        self.0[0] & 1 == 1
    }
}

impl std::fmt::Display for MacAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

impl std::fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// Where the network-layer header of a frame starts, after the optional tag.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct L3Info {
    /// VLAN id of the single 802.1Q tag, if any.
    pub vlan: Option<u16>,
    /// EtherType of the payload (after the tag).
    pub ethertype: u16,
    /// Offset of the payload from the start of the frame (14 or 18).
    pub offset: usize,
}

/// A view of an Ethernet frame.
#[derive(Clone, Copy, Debug)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

mod off {
    pub const DST: usize = 0;
    pub const SRC: usize = 6;
    pub const ETHERTYPE: usize = 12;
    pub const TCI: usize = 14;
    pub const INNER_ETHERTYPE: usize = 16;
}

impl<T: AsRef<[u8]>> Packet<T> {
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// A view of a buffer that holds at least the untagged header.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        check_min(Header::Ethernet, buffer.as_ref().len(), HEADER_LEN)?;
        Ok(Packet { buffer })
    }

    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    pub fn dst_addr(&self) -> MacAddr {
        MacAddr(array_at(self.buffer.as_ref(), off::DST))
    }

    #[inline]
    pub fn src_addr(&self) -> MacAddr {
        MacAddr(array_at(self.buffer.as_ref(), off::SRC))
    }

    /// The EtherType field at offset 12 (the TPID for a tagged frame).
    #[inline]
    pub fn ethertype(&self) -> u16 {
        u16_at(self.buffer.as_ref(), off::ETHERTYPE)
    }

    #[inline]
    pub fn is_vlan_tagged(&self) -> bool {
        self.ethertype() == ethertype::VLAN
    }

    /// VLAN id of the tag (meaningful when [`Self::is_vlan_tagged`]).
    #[inline]
    pub fn vlan_id(&self) -> u16 {
        u16_at(self.buffer.as_ref(), off::TCI) & VLAN_ID_MASK
    }

    /// The EtherType after the tag (meaningful when tagged).
    #[inline]
    pub fn inner_ethertype(&self) -> u16 {
        u16_at(self.buffer.as_ref(), off::INNER_ETHERTYPE)
    }

    /// Resolve the optional single 802.1Q tag: where the payload starts and
    /// what it is.
    #[inline]
    pub fn l3_info(&self) -> Result<L3Info, Error> {
        let buf = self.buffer.as_ref();
        check_min(Header::Ethernet, buf.len(), HEADER_LEN)?;
        match u16_at(buf, off::ETHERTYPE) {
            ethertype::VLAN => {
                check_min(Header::Vlan, buf.len(), HEADER_LEN + VLAN_TAG_LEN)?;
                let inner = u16_at(buf, off::INNER_ETHERTYPE);
                if inner == ethertype::VLAN || inner == ethertype::QINQ {
                    return Err(Error::VlanStacked);
                }
                Ok(L3Info {
                    vlan: Some(u16_at(buf, off::TCI) & VLAN_ID_MASK),
                    ethertype: inner,
                    offset: HEADER_LEN + VLAN_TAG_LEN,
                })
            }
            ethertype::QINQ => Err(Error::VlanStacked),
            et => Ok(L3Info {
                vlan: None,
                ethertype: et,
                offset: HEADER_LEN,
            }),
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    #[inline]
    pub fn set_dst_addr(&mut self, addr: MacAddr) {
        set_bytes(self.buffer.as_mut(), off::DST, &addr.0);
    }

    #[inline]
    pub fn set_src_addr(&mut self, addr: MacAddr) {
        set_bytes(self.buffer.as_mut(), off::SRC, &addr.0);
    }

    #[inline]
    pub fn set_ethertype(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), off::ETHERTYPE, value);
    }

    /// Set the VLAN id of a tagged frame, keeping priority and DEI bits.
    #[inline]
    pub fn set_vlan_id(&mut self, vlan_id: u16) {
        let tci = u16_at(self.buffer.as_ref(), off::TCI);
        set_u16(
            self.buffer.as_mut(),
            off::TCI,
            (tci & !VLAN_ID_MASK) | (vlan_id & VLAN_ID_MASK),
        );
    }

    /// Set the EtherType after the tag of a tagged frame.
    #[inline]
    pub fn set_inner_ethertype(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), off::INNER_ETHERTYPE, value);
    }

    /// Swap source and destination MAC (for locally answered frames).
    #[inline]
    pub fn swap_addrs(&mut self) {
        let (src, dst) = (self.src_addr(), self.dst_addr());
        self.set_src_addr(dst);
        self.set_dst_addr(src);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
    const B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

    fn frame(ethertype: u16, extra: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; HEADER_LEN];
        let mut p = Packet::new_unchecked(&mut f[..]);
        p.set_dst_addr(A);
        p.set_src_addr(B);
        p.set_ethertype(ethertype);
        f.extend_from_slice(extra);
        f
    }

    #[test]
    fn untagged_fields_round_trip() {
        let f = frame(ethertype::IPV4, &[0x45]);
        let p = Packet::new_checked(&f[..]).unwrap();
        assert_eq!(p.dst_addr(), A);
        assert_eq!(p.src_addr(), B);
        assert_eq!(p.ethertype(), ethertype::IPV4);
        assert_eq!(
            p.l3_info().unwrap(),
            L3Info {
                vlan: None,
                ethertype: ethertype::IPV4,
                offset: 14
            }
        );
    }

    #[test]
    fn single_tag_is_resolved_and_settable() {
        let mut f = frame(ethertype::VLAN, &[0xe0, 0x64, 0x08, 0x06]);
        let mut p = Packet::new_checked(&mut f[..]).unwrap();
        assert!(p.is_vlan_tagged());
        assert_eq!(p.vlan_id(), 100);
        p.set_vlan_id(4000);
        // Priority bits (0xe000) are kept.
        assert_eq!(u16_at(&f, 14), 0xe000 | 4000);
        let p = Packet::new_checked(&f[..]).unwrap();
        assert_eq!(
            p.l3_info().unwrap(),
            L3Info {
                vlan: Some(4000),
                ethertype: ethertype::ARP,
                offset: 18
            }
        );
    }

    #[test]
    fn stacked_truncated_and_short_frames_are_refused() {
        let stacked = frame(ethertype::VLAN, &[0, 5, 0x81, 0x00]);
        assert_eq!(
            Packet::new_unchecked(&stacked[..]).l3_info(),
            Err(Error::VlanStacked)
        );
        let qinq = frame(ethertype::QINQ, &[0, 5, 0x08, 0x00]);
        assert_eq!(
            Packet::new_unchecked(&qinq[..]).l3_info(),
            Err(Error::VlanStacked)
        );
        let cut = frame(ethertype::VLAN, &[0, 5, 0x08]);
        assert!(matches!(
            Packet::new_unchecked(&cut[..]).l3_info(),
            Err(Error::Truncated {
                header: Header::Vlan,
                needed_bytes: 18,
                len_bytes: 17
            })
        ));
        assert!(Packet::new_checked(&[0u8; 13][..]).is_err());
    }

    #[test]
    fn swap_addrs_swaps() {
        let mut f = frame(ethertype::IPV4, &[]);
        Packet::new_unchecked(&mut f[..]).swap_addrs();
        let p = Packet::new_unchecked(&f[..]);
        assert_eq!((p.dst_addr(), p.src_addr()), (B, A));
        assert_eq!(A.to_string(), "02:00:00:00:00:01");
        assert!(MacAddr::BROADCAST.is_multicast() && !A.is_multicast());
    }
}
