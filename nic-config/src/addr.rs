//! Address value types of the plan: IP prefixes and ranges of either
//! family and MAC addresses, with their text forms (`192.0.2.1/24`,
//! `2001:db8::1/64`, `192.0.2.10-192.0.2.20`, `02:00:00:00:00:01`).
//!
//! Invariants: an [`IpPrefix`] has `prefix_len <= 32` for IPv4 and `<= 128`
//! for IPv6; an [`IpRange`] has `first <= last`, both of one family; a
//! [`MacAddr`] parses from exactly six two-digit hex groups separated by
//! `:`. Arithmetic is on the address as a number ([`addr_bits`]: 32 or 128
//! bits in a `u128`), the same code for both families.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An address's family: its width in bits, 32 or 128.
pub fn family_bits(addr: IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

/// The address as a number (IPv4 in the low 32 bits).
pub fn addr_bits(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// The address of the family of `like` whose number is `bits` (truncated
/// to 32 bits for IPv4).
pub fn addr_from_bits(like: IpAddr, bits: u128) -> IpAddr {
    match like {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(bits as u32)),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(bits)),
    }
}

/// Every bit of the family's width set (`0xffff_ffff` for IPv4).
fn family_mask(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(_) => u128::from(u32::MAX),
        IpAddr::V6(_) => u128::MAX,
    }
}

/// The family's name in messages: `IPv4` or `IPv6`.
pub fn family_name(addr: IpAddr) -> &'static str {
    match addr {
        IpAddr::V4(_) => "IPv4",
        IpAddr::V6(_) => "IPv6",
    }
}

/// An IP address with a prefix length: an interface address
/// (`192.0.2.1/24`, `2001:db8::1/64`, host bits kept) or a route
/// destination (`0.0.0.0/0`, `::/0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IpPrefix {
    pub address: IpAddr,
    /// `0..=32` (IPv4) or `0..=128` (IPv6).
    pub prefix_len: u8,
}

/// Why a text is not an [`IpPrefix`], an [`IpRange`] or a [`MacAddr`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddrParseError {
    #[error("expected an IP address with a prefix length, like 192.0.2.1/24 or 2001:db8::1/64")]
    NoPrefixLen,
    #[error("{0:?} is not an IP address")]
    BadAddress(String),
    #[error("prefix length {given:?} is not a number in 0..={max}")]
    BadPrefixLen { given: String, max: u8 },
    #[error("{0:?} is not a MAC address like 02:00:00:00:00:01")]
    BadMac(String),
    #[error(
        "{0:?} is neither a CIDR like 192.0.2.0/28 or 2001:db8:1::/120 nor a range like \
         192.0.2.10-192.0.2.20 or 2001:db8::10-2001:db8::20"
    )]
    BadRange(String),
    #[error("{given} has host bits set; did you mean {network}?")]
    HostBits { given: IpPrefix, network: IpPrefix },
    #[error("{first}-{last} is empty (first > last)")]
    Reversed { first: IpAddr, last: IpAddr },
    #[error("{first}-{last} mixes an {} and an {} address", family_name(*first), family_name(*last))]
    MixedFamilies { first: IpAddr, last: IpAddr },
}

impl IpPrefix {
    /// `address/prefix_len`; `prefix_len` is clamped to the family's width.
    pub fn new(address: impl Into<IpAddr>, prefix_len: u8) -> Self {
        let address = address.into();
        IpPrefix {
            address,
            prefix_len: prefix_len.min(family_bits(address)),
        }
    }

    /// Whether the prefix is an IPv4 one.
    pub fn is_ipv4(&self) -> bool {
        self.address.is_ipv4()
    }

    /// Whether the prefix is one address (`/32` for IPv4, `/128` for IPv6).
    pub fn is_host(&self) -> bool {
        self.prefix_len >= family_bits(self.address)
    }

    /// The netmask as a number of the family's width (`/24` →
    /// `0xffff_ff00`).
    pub fn mask(&self) -> u128 {
        let full = family_mask(self.address);
        // The top `prefix_len` bits of the family's width.
        full & !full.checked_shr(u32::from(self.prefix_len)).unwrap_or(0)
    }

    /// The prefix with its host bits cleared (`192.0.2.1/24` →
    /// `192.0.2.0/24`).
    pub fn network(&self) -> IpPrefix {
        IpPrefix {
            address: addr_from_bits(self.address, addr_bits(self.address) & self.mask()),
            prefix_len: self.prefix_len,
        }
    }

    /// Whether the address has no host bits set.
    pub fn is_network(&self) -> bool {
        self.network().address == self.address
    }

    /// Whether `addr` is inside the prefix (never for an address of the
    /// other family).
    pub fn contains(&self, addr: impl Into<IpAddr>) -> bool {
        let addr = addr.into();
        addr.is_ipv4() == self.address.is_ipv4()
            && addr_bits(addr) & self.mask() == addr_bits(self.address) & self.mask()
    }

    /// The prefix's addresses as a range.
    pub fn range(&self) -> IpRange {
        let net = self.network();
        let full = family_mask(self.address);
        IpRange {
            first: net.address,
            last: addr_from_bits(net.address, addr_bits(net.address) | (full & !self.mask())),
        }
    }
}

impl FromStr for IpPrefix {
    type Err = AddrParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, len) = s.split_once('/').ok_or(AddrParseError::NoPrefixLen)?;
        let address: IpAddr = addr
            .parse()
            .map_err(|_| AddrParseError::BadAddress(addr.to_owned()))?;
        let max = family_bits(address);
        let prefix_len: u8 = len
            .parse()
            .ok()
            .filter(|l| *l <= max && !len.starts_with('+'))
            .ok_or_else(|| AddrParseError::BadPrefixLen {
                given: len.to_owned(),
                max,
            })?;
        Ok(IpPrefix::new(address, prefix_len))
    }
}

impl fmt::Display for IpPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix_len)
    }
}

/// An inclusive range of addresses of one family, `first <= last`: an
/// address pool entry, written as a CIDR (`192.0.2.0/28`,
/// `2001:db8:1::/120`) or a range (`192.0.2.10-192.0.2.20`,
/// `2001:db8::10-2001:db8::20`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IpRange {
    pub first: IpAddr,
    pub last: IpAddr,
}

impl IpRange {
    /// The range `first..=last`; `None` when `first > last` or the two are
    /// of different families.
    pub fn new(first: impl Into<IpAddr>, last: impl Into<IpAddr>) -> Option<Self> {
        let (first, last) = (first.into(), last.into());
        (first.is_ipv4() == last.is_ipv4() && first <= last).then_some(IpRange { first, last })
    }

    /// Whether the range holds IPv4 addresses.
    pub fn is_ipv4(&self) -> bool {
        self.first.is_ipv4()
    }

    /// Number of addresses, `1..=2^128`, saturated at `u128::MAX` (only
    /// `::/0` holds more).
    pub fn len(&self) -> u128 {
        (addr_bits(self.last) - addr_bits(self.first)).saturating_add(1)
    }

    /// Always false (a range holds at least one address); for clippy's
    /// `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Whether `addr` is inside (never for an address of the other family).
    pub fn contains(&self, addr: impl Into<IpAddr>) -> bool {
        let addr = addr.into();
        addr.is_ipv4() == self.is_ipv4() && self.first <= addr && addr <= self.last
    }

    /// Whether the two ranges share an address (never across families).
    pub fn overlaps(&self, other: &IpRange) -> bool {
        self.is_ipv4() == other.is_ipv4() && self.first <= other.last && other.first <= self.last
    }

    /// IPv4 addresses ending in `.0` or `.255`, which some equipment
    /// mistakes for network or broadcast addresses (MetalLB's "buggy
    /// IPs"); none in an IPv6 range (IPv6 has no broadcast address).
    pub fn buggy_count(&self) -> u128 {
        if !self.is_ipv4() {
            return 0;
        }
        // Numbers in 0..=n whose low byte is `low`.
        let upto = |n: i64, low: i64| if n >= low { (n - low) / 256 + 1 } else { 0 };
        let (a, b) = (addr_bits(self.first) as i64, addr_bits(self.last) as i64);
        let count = |low| upto(b, low) - upto(a - 1, low);
        (count(0) + count(255)) as u128
    }

    /// Addresses that may be handed out: all of them, or all but the
    /// buggy ones.
    pub fn usable_count(&self, avoid_buggy_ips: bool) -> u128 {
        if avoid_buggy_ips {
            self.len() - self.buggy_count()
        } else {
            self.len()
        }
    }
}

/// Whether `addr` is an IPv4 address ending in `.0` or `.255` (see
/// [`IpRange::buggy_count`]); never for IPv6.
pub fn is_buggy_ip(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(a) => matches!(a.octets()[3], 0 | 255),
        IpAddr::V6(_) => false,
    }
}

impl FromStr for IpRange {
    type Err = AddrParseError;

    /// A CIDR without host bits or a range `first-last` of one family.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some((a, b)) = s.split_once('-') {
            let parse = |t: &str| {
                t.trim()
                    .parse::<IpAddr>()
                    .map_err(|_| AddrParseError::BadAddress(t.trim().to_owned()))
            };
            let (first, last) = (parse(a)?, parse(b)?);
            if first.is_ipv4() != last.is_ipv4() {
                return Err(AddrParseError::MixedFamilies { first, last });
            }
            return IpRange::new(first, last).ok_or(AddrParseError::Reversed { first, last });
        }
        if !s.contains('/') {
            return Err(AddrParseError::BadRange(s.to_owned()));
        }
        let prefix: IpPrefix = s.parse()?;
        if !prefix.is_network() {
            return Err(AddrParseError::HostBits {
                given: prefix,
                network: prefix.network(),
            });
        }
        Ok(prefix.range())
    }
}

impl fmt::Display for IpRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

/// An Ethernet MAC address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// Neither multicast/broadcast (I/G bit) nor all zeros.
    pub fn is_unicast(&self) -> bool {
        self.0[0] & 1 == 0 && self.0 != [0; 6]
    }
}

impl FromStr for MacAddr {
    type Err = AddrParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || AddrParseError::BadMac(s.to_owned());
        let mut mac = [0u8; 6];
        let mut groups = s.split(':');
        for byte in &mut mac {
            let group = groups.next().ok_or_else(bad)?;
            if group.len() != 2 || !group.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(bad());
            }
            *byte = u8::from_str_radix(group, 16).map_err(|_| bad())?;
        }
        if groups.next().is_some() {
            return Err(bad());
        }
        Ok(MacAddr(mac))
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

/// Whether `addr` can be a host address: IPv4 not unspecified, loopback,
/// multicast, broadcast or reserved (240/4); IPv6 not unspecified,
/// loopback, multicast or IPv4-mapped (`::ffff:0:0/96`, RFC 4291 §2.5.5.2:
/// an IPv4 address in IPv6 clothing, which Portico does not translate).
/// Link-local IPv6 addresses pass (see [`is_link_local`]).
pub fn is_host_address(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(a) => {
            !(a.is_unspecified()
                || a.is_loopback()
                || a.is_multicast()
                || a.is_broadcast()
                || a.octets()[0] >= 240)
        }
        IpAddr::V6(a) => {
            !(a.is_unspecified()
                || a.is_loopback()
                || a.is_multicast()
                || a.to_ipv4_mapped().is_some())
        }
    }
}

/// Whether `addr` is an IPv6 link-local address (`fe80::/10`, RFC 4291
/// §2.5.6): valid on one link only, so a next hop (with its port) but no
/// VIP, service address, backend or pool address.
pub fn is_link_local(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(_) => false,
        IpAddr::V6(a) => a.segments()[0] & 0xffc0 == 0xfe80,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn prefix_parses_and_normalises() {
        let p: IpPrefix = "192.0.2.1/24".parse().unwrap();
        assert_eq!(p.address, v4(192, 0, 2, 1));
        assert_eq!(p.prefix_len, 24);
        assert!(!p.is_network());
        assert_eq!(p.network().to_string(), "192.0.2.0/24");
        assert!(p.contains(v4(192, 0, 2, 254)));
        assert!(!p.contains(v4(192, 0, 3, 1)));
        assert_eq!(p.mask(), 0xffff_ff00);
        let all: IpPrefix = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(v4(8, 8, 8, 8)));
        assert!(
            !all.contains(ip("2001:db8::1")),
            "no prefix holds the other family"
        );
        assert_eq!(all.mask(), 0);
        assert_eq!(
            "192.0.2.7/32".parse::<IpPrefix>().unwrap().mask(),
            0xffff_ffff
        );
    }

    #[test]
    fn ipv6_prefix_parses_and_normalises() {
        let p: IpPrefix = "2001:db8::1/64".parse().unwrap();
        assert_eq!((p.address, p.prefix_len), (ip("2001:db8::1"), 64));
        assert!(!p.is_network() && !p.is_ipv4() && !p.is_host());
        assert_eq!(p.network().to_string(), "2001:db8::/64");
        assert!(p.contains(ip("2001:db8::ffff:1")));
        assert!(!p.contains(ip("2001:db8:0:1::1")));
        assert!(!p.contains(v4(32, 1, 13, 184)));
        assert_eq!(p.mask(), u128::MAX << 64);
        let all: IpPrefix = "::/0".parse().unwrap();
        assert_eq!(all.mask(), 0);
        assert!(all.contains(ip("fd00::1")));
        let one: IpPrefix = "2001:db8::5/128".parse().unwrap();
        assert!(one.is_host() && one.is_network());
        assert_eq!(one.mask(), u128::MAX);
        assert_eq!(
            "2001:db8:1::/120"
                .parse::<IpPrefix>()
                .unwrap()
                .range()
                .to_string(),
            "2001:db8:1::-2001:db8:1::ff"
        );
    }

    #[test]
    fn prefix_rejects_bad_text() {
        for bad in [
            "192.0.2.1",
            "192.0.2.1/33",
            "192.0.2/24",
            "x/1",
            "1.2.3.4/",
            "1.2.3.4/+8",
            "2001:db8::1",
            "2001:db8::1/129",
            "2001:db8:::1/64",
        ] {
            assert!(bad.parse::<IpPrefix>().is_err(), "{bad}");
        }
        assert_eq!(
            "2001:db8::/129"
                .parse::<IpPrefix>()
                .unwrap_err()
                .to_string(),
            "prefix length \"129\" is not a number in 0..=128"
        );
    }

    #[test]
    fn host_addresses_by_family() {
        for good in ["192.0.2.1", "2001:db8::1", "fe80::1", "fd00::5"] {
            assert!(is_host_address(ip(good)), "{good}");
        }
        for bad in [
            "0.0.0.0",
            "127.0.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "::",
            "::1",
            "ff02::1",
            "::ffff:192.0.2.1",
        ] {
            assert!(!is_host_address(ip(bad)), "{bad}");
        }
        assert!(is_link_local(ip("fe80::1")) && is_link_local(ip("febf::1")));
        assert!(!is_link_local(ip("fec0::1")) && !is_link_local(v4(169, 254, 0, 1)));
    }

    #[test]
    fn mac_parses_and_rejects() {
        let m: MacAddr = "02:00:0a:FF:00:01".parse().unwrap();
        assert_eq!(m.0, [2, 0, 0x0a, 0xff, 0, 1]);
        assert_eq!(m.to_string(), "02:00:0a:ff:00:01");
        assert!(m.is_unicast());
        assert!(!"01:00:5e:00:00:01".parse::<MacAddr>().unwrap().is_unicast());
        assert!(!"00:00:00:00:00:00".parse::<MacAddr>().unwrap().is_unicast());
        for bad in [
            "02:00:00:00:00",
            "02:00:00:00:00:01:02",
            "2:0:0:0:0:1",
            "02-00-00-00-00-01",
            "+2:00:00:00:00:01",
        ] {
            assert!(bad.parse::<MacAddr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn range_parses_cidrs_and_ranges() {
        let r: IpRange = "192.0.2.0/28".parse().unwrap();
        assert_eq!(r.to_string(), "192.0.2.0-192.0.2.15");
        assert_eq!(r.len(), 16);
        let r: IpRange = "192.0.2.10 - 192.0.2.20".parse().unwrap();
        assert_eq!((r.len(), r.first), (11, v4(192, 0, 2, 10)));
        let one: IpRange = "192.0.2.7/32".parse().unwrap();
        assert_eq!(one.len(), 1);
        let all: IpRange = "0.0.0.0/0".parse().unwrap();
        assert_eq!(all.len(), 1 << 32);
        assert!(matches!(
            "192.0.2.1/28".parse::<IpRange>(),
            Err(AddrParseError::HostBits { .. })
        ));
        assert!(matches!(
            "192.0.2.9-192.0.2.8".parse::<IpRange>(),
            Err(AddrParseError::Reversed { .. })
        ));
        for bad in ["192.0.2.1", "x-192.0.2.1", "192.0.2.1-", "192.0.2.0/33", ""] {
            assert!(bad.parse::<IpRange>().is_err(), "{bad}");
        }
    }

    #[test]
    fn ipv6_range_parses_cidrs_and_ranges() {
        let r: IpRange = "2001:db8::10-2001:db8::20".parse().unwrap();
        assert_eq!(
            (r.len(), r.first, r.is_ipv4()),
            (17, ip("2001:db8::10"), false)
        );
        let r: IpRange = "2001:db8:1::/120".parse().unwrap();
        assert_eq!(
            (r.first, r.last, r.len()),
            (ip("2001:db8:1::"), ip("2001:db8:1::ff"), 256)
        );
        let r: IpRange = "2001:db8::/64".parse().unwrap();
        assert_eq!(r.len(), 1 << 64);
        let all: IpRange = "::/0".parse().unwrap();
        assert_eq!(all.len(), u128::MAX, "saturated");
        assert!(matches!(
            "2001:db8::1/120".parse::<IpRange>(),
            Err(AddrParseError::HostBits { .. })
        ));
        assert!(matches!(
            "2001:db8::20-2001:db8::10".parse::<IpRange>(),
            Err(AddrParseError::Reversed { .. })
        ));
        let mixed = "192.0.2.1-2001:db8::1".parse::<IpRange>().unwrap_err();
        assert!(matches!(mixed, AddrParseError::MixedFamilies { .. }));
        assert!(
            mixed
                .to_string()
                .contains("mixes an IPv4 and an IPv6 address")
        );
        assert!(IpRange::new(v4(192, 0, 2, 1), ip("2001:db8::1")).is_none());
        let v4r: IpRange = "0.0.0.0/0".parse().unwrap();
        assert!(!v4r.overlaps(&all) && !all.contains(v4(192, 0, 2, 1)));
        assert_eq!(r.buggy_count(), 0, "IPv6 has no buggy IPs");
        assert!(!is_buggy_ip(ip("2001:db8::ff")) && !is_buggy_ip(ip("2001:db8::")));
    }

    #[test]
    fn buggy_ips_are_counted() {
        let r: IpRange = "192.0.2.0/24".parse().unwrap();
        assert_eq!((r.buggy_count(), r.usable_count(true)), (2, 254));
        let r: IpRange = "192.0.2.255-192.0.3.0".parse().unwrap();
        assert_eq!(r.usable_count(true), 0);
        let r: IpRange = "10.0.0.0/8".parse().unwrap();
        assert_eq!(r.buggy_count(), 2 * 65_536);
        assert!(is_buggy_ip(v4(10, 1, 2, 0)));
        assert!(is_buggy_ip(v4(10, 1, 2, 255)));
        assert!(!is_buggy_ip(v4(10, 1, 2, 1)));
    }

    proptest! {
        #[test]
        fn buggy_count_matches_enumeration(start: u32, len in 1u32..2000) {
            let last = start.saturating_add(len - 1);
            let r = IpRange::new(Ipv4Addr::from(start), Ipv4Addr::from(last)).unwrap();
            let counted = (start..=last).filter(|&a| is_buggy_ip(Ipv4Addr::from(a).into())).count() as u128;
            prop_assert_eq!(r.buggy_count(), counted);
            prop_assert_eq!(r.len(), u128::from(last - start) + 1);
        }

        #[test]
        fn overlap_matches_enumeration(a in 0u32..64, b in 0u32..64, c in 0u32..64, d in 0u32..64) {
            let r1 = IpRange::new(Ipv4Addr::from(a.min(b)), Ipv4Addr::from(a.max(b))).unwrap();
            let r2 = IpRange::new(Ipv4Addr::from(c.min(d)), Ipv4Addr::from(c.max(d))).unwrap();
            let shared = (0u32..64).any(|x| r1.contains(Ipv4Addr::from(x)) && r2.contains(Ipv4Addr::from(x)));
            prop_assert_eq!(r1.overlaps(&r2), shared);
        }

        #[test]
        fn ipv6_overlap_matches_enumeration(base: u128, a in 0u128..64, b in 0u128..64, c in 0u128..64, d in 0u128..64) {
            let base = base & !0xff;
            let at = |x: u128| Ipv6Addr::from(base + x);
            let r1 = IpRange::new(at(a.min(b)), at(a.max(b))).unwrap();
            let r2 = IpRange::new(at(c.min(d)), at(c.max(d))).unwrap();
            let shared = (0u128..64).any(|x| r1.contains(at(x)) && r2.contains(at(x)));
            prop_assert_eq!(r1.overlaps(&r2), shared);
            prop_assert_eq!(r1.len(), a.max(b) - a.min(b) + 1);
        }

        #[test]
        fn prefix_round_trips(bits: u32, len in 0u8..=32) {
            let p = IpPrefix::new(Ipv4Addr::from(bits), len);
            let back: IpPrefix = p.to_string().parse().unwrap();
            prop_assert_eq!(back, p);
            prop_assert!(p.contains(p.address));
            prop_assert!(p.network().is_network());
            prop_assert!(p.network().contains(p.address));
        }

        #[test]
        fn contains_matches_mask_arithmetic(a: u32, b: u32, len in 0u8..=32) {
            let p = IpPrefix::new(Ipv4Addr::from(a), len);
            let same_top = len == 0 || (a >> (32 - u32::from(len))) == (b >> (32 - u32::from(len)));
            prop_assert_eq!(p.contains(Ipv4Addr::from(b)), same_top);
        }

        #[test]
        fn ipv6_prefix_round_trips(bits: u128, len in 0u8..=128) {
            let p = IpPrefix::new(Ipv6Addr::from(bits), len);
            let back: IpPrefix = p.to_string().parse().unwrap();
            prop_assert_eq!(back, p);
            prop_assert!(p.contains(p.address));
            prop_assert!(p.network().is_network());
            prop_assert!(p.range().contains(p.address));
            let expected = if len == 0 { u128::MAX } else { 1u128 << (128 - u32::from(len)) };
            prop_assert_eq!(p.range().len(), expected);
        }

        #[test]
        fn ipv6_contains_matches_mask_arithmetic(a: u128, b: u128, len in 0u8..=128) {
            let p = IpPrefix::new(Ipv6Addr::from(a), len);
            let same_top = len == 0 || (a >> (128 - u32::from(len))) == (b >> (128 - u32::from(len)));
            prop_assert_eq!(p.contains(Ipv6Addr::from(b)), same_top);
        }

        #[test]
        fn mac_round_trips(bytes: [u8; 6]) {
            let m = MacAddr(bytes);
            prop_assert_eq!(m.to_string().parse::<MacAddr>().unwrap(), m);
        }
    }
}
