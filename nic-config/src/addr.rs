//! Address value types of the plan: IPv4 prefixes and MAC addresses, with
//! their text forms (`192.0.2.1/24`, `02:00:00:00:00:01`).
//!
//! Invariants: an [`Ipv4Prefix`] has `prefix_len <= 32`; a [`MacAddr`]
//! parses from exactly six two-digit hex groups separated by `:`; an
//! [`Ipv4Range`] has `first <= last`.

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// An IPv4 address with a prefix length: an interface address
/// (`192.0.2.1/24`, host bits kept) or a route destination (`0.0.0.0/0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ipv4Prefix {
    pub address: Ipv4Addr,
    /// `0..=32`.
    pub prefix_len: u8,
}

/// Why a text is not an [`Ipv4Prefix`] or a [`MacAddr`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddrParseError {
    #[error("expected an IPv4 address with a prefix length, like 192.0.2.1/24")]
    NoPrefixLen,
    #[error("{0:?} is not an IPv4 address")]
    BadAddress(String),
    #[error("prefix length {0:?} is not a number in 0..=32")]
    BadPrefixLen(String),
    #[error("{0:?} is not a MAC address like 02:00:00:00:00:01")]
    BadMac(String),
    #[error("{0:?} is neither a CIDR like 192.0.2.0/28 nor a range like 192.0.2.10-192.0.2.20")]
    BadRange(String),
    #[error("{given} has host bits set; did you mean {network}?")]
    HostBits {
        given: Ipv4Prefix,
        network: Ipv4Prefix,
    },
    #[error("{first}-{last} is empty (first > last)")]
    Reversed { first: Ipv4Addr, last: Ipv4Addr },
}

impl Ipv4Prefix {
    pub const fn new(address: Ipv4Addr, prefix_len: u8) -> Self {
        Ipv4Prefix {
            address,
            prefix_len,
        }
    }

    /// The netmask as a number (`/24` → `0xffff_ff00`).
    pub fn mask(&self) -> u32 {
        u32::MAX
            .checked_shl(32 - u32::from(self.prefix_len.min(32)))
            .unwrap_or(0)
    }

    /// The prefix with its host bits cleared (`192.0.2.1/24` →
    /// `192.0.2.0/24`).
    pub fn network(&self) -> Ipv4Prefix {
        Ipv4Prefix::new(
            Ipv4Addr::from(u32::from(self.address) & self.mask()),
            self.prefix_len,
        )
    }

    /// Whether the address has no host bits set.
    pub fn is_network(&self) -> bool {
        self.network().address == self.address
    }

    /// Whether `addr` is inside the prefix.
    pub fn contains(&self, addr: Ipv4Addr) -> bool {
        u32::from(addr) & self.mask() == u32::from(self.address) & self.mask()
    }
}

impl FromStr for Ipv4Prefix {
    type Err = AddrParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, len) = s.split_once('/').ok_or(AddrParseError::NoPrefixLen)?;
        let address: Ipv4Addr = addr
            .parse()
            .map_err(|_| AddrParseError::BadAddress(addr.to_owned()))?;
        let prefix_len: u8 = len
            .parse()
            .ok()
            .filter(|l| *l <= 32 && !len.starts_with('+'))
            .ok_or_else(|| AddrParseError::BadPrefixLen(len.to_owned()))?;
        Ok(Ipv4Prefix::new(address, prefix_len))
    }
}

impl fmt::Display for Ipv4Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix_len)
    }
}

/// An inclusive range of IPv4 addresses, `first <= last`: an address pool
/// entry, written as a CIDR (`192.0.2.0/28`) or a range
/// (`192.0.2.10-192.0.2.20`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ipv4Range {
    pub first: Ipv4Addr,
    pub last: Ipv4Addr,
}

impl Ipv4Range {
    /// The range `first..=last`; `None` when `first > last`.
    pub fn new(first: Ipv4Addr, last: Ipv4Addr) -> Option<Self> {
        (first <= last).then_some(Ipv4Range { first, last })
    }

    /// Number of addresses, `1..=2^32`.
    pub fn len(&self) -> u64 {
        u64::from(u32::from(self.last)) - u64::from(u32::from(self.first)) + 1
    }

    /// Always false (a range holds at least one address); for clippy's
    /// `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        false
    }

    pub fn contains(&self, addr: Ipv4Addr) -> bool {
        self.first <= addr && addr <= self.last
    }

    /// Whether the two ranges share an address.
    pub fn overlaps(&self, other: &Ipv4Range) -> bool {
        self.first <= other.last && other.first <= self.last
    }

    /// Addresses ending in `.0` or `.255`, which some equipment mistakes
    /// for network or broadcast addresses (MetalLB's "buggy IPs").
    pub fn buggy_count(&self) -> u64 {
        // Numbers in 0..=n whose low byte is `low`.
        let upto = |n: i64, low: i64| if n >= low { (n - low) / 256 + 1 } else { 0 };
        let (a, b) = (
            i64::from(u32::from(self.first)),
            i64::from(u32::from(self.last)),
        );
        let count = |low| upto(b, low) - upto(a - 1, low);
        (count(0) + count(255)) as u64
    }

    /// Addresses that may be handed out: all of them, or all but the
    /// buggy ones.
    pub fn usable_count(&self, avoid_buggy_ips: bool) -> u64 {
        if avoid_buggy_ips {
            self.len() - self.buggy_count()
        } else {
            self.len()
        }
    }
}

/// Whether `addr` ends in `.0` or `.255` (see [`Ipv4Range::buggy_count`]).
pub fn is_buggy_ip(addr: Ipv4Addr) -> bool {
    matches!(addr.octets()[3], 0 | 255)
}

impl FromStr for Ipv4Range {
    type Err = AddrParseError;

    /// A CIDR without host bits or a range `first-last`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some((a, b)) = s.split_once('-') {
            let parse = |t: &str| {
                t.trim()
                    .parse::<Ipv4Addr>()
                    .map_err(|_| AddrParseError::BadAddress(t.trim().to_owned()))
            };
            let (first, last) = (parse(a)?, parse(b)?);
            return Ipv4Range::new(first, last).ok_or(AddrParseError::Reversed { first, last });
        }
        if !s.contains('/') {
            return Err(AddrParseError::BadRange(s.to_owned()));
        }
        let prefix: Ipv4Prefix = s.parse()?;
        if !prefix.is_network() {
            return Err(AddrParseError::HostBits {
                given: prefix,
                network: prefix.network(),
            });
        }
        let first = u32::from(prefix.address);
        Ok(Ipv4Range {
            first: prefix.address,
            last: Ipv4Addr::from(first | !prefix.mask()),
        })
    }
}

impl fmt::Display for Ipv4Range {
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

/// Whether `addr` can be a host address: not unspecified, loopback,
/// multicast, broadcast or reserved (240/4).
pub fn is_host_address(addr: Ipv4Addr) -> bool {
    !(addr.is_unspecified()
        || addr.is_loopback()
        || addr.is_multicast()
        || addr.is_broadcast()
        || addr.octets()[0] >= 240)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn prefix_parses_and_normalises() {
        let p: Ipv4Prefix = "192.0.2.1/24".parse().unwrap();
        assert_eq!(p.address, Ipv4Addr::new(192, 0, 2, 1));
        assert_eq!(p.prefix_len, 24);
        assert!(!p.is_network());
        assert_eq!(p.network().to_string(), "192.0.2.0/24");
        assert!(p.contains(Ipv4Addr::new(192, 0, 2, 254)));
        assert!(!p.contains(Ipv4Addr::new(192, 0, 3, 1)));
        let all: Ipv4Prefix = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(Ipv4Addr::new(8, 8, 8, 8)));
        assert_eq!(all.mask(), 0);
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
        ] {
            assert!(bad.parse::<Ipv4Prefix>().is_err(), "{bad}");
        }
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
        let r: Ipv4Range = "192.0.2.0/28".parse().unwrap();
        assert_eq!(r.to_string(), "192.0.2.0-192.0.2.15");
        assert_eq!(r.len(), 16);
        let r: Ipv4Range = "192.0.2.10 - 192.0.2.20".parse().unwrap();
        assert_eq!((r.len(), r.first), (11, Ipv4Addr::new(192, 0, 2, 10)));
        let one: Ipv4Range = "192.0.2.7/32".parse().unwrap();
        assert_eq!(one.len(), 1);
        let all: Ipv4Range = "0.0.0.0/0".parse().unwrap();
        assert_eq!(all.len(), 1 << 32);
        assert!(matches!(
            "192.0.2.1/28".parse::<Ipv4Range>(),
            Err(AddrParseError::HostBits { .. })
        ));
        assert!(matches!(
            "192.0.2.9-192.0.2.8".parse::<Ipv4Range>(),
            Err(AddrParseError::Reversed { .. })
        ));
        for bad in ["192.0.2.1", "x-192.0.2.1", "192.0.2.1-", "192.0.2.0/33", ""] {
            assert!(bad.parse::<Ipv4Range>().is_err(), "{bad}");
        }
    }

    #[test]
    fn buggy_ips_are_counted() {
        let r: Ipv4Range = "192.0.2.0/24".parse().unwrap();
        assert_eq!((r.buggy_count(), r.usable_count(true)), (2, 254));
        let r: Ipv4Range = "192.0.2.255-192.0.3.0".parse().unwrap();
        assert_eq!(r.usable_count(true), 0);
        let r: Ipv4Range = "10.0.0.0/8".parse().unwrap();
        assert_eq!(r.buggy_count(), 2 * 65_536);
        assert!(is_buggy_ip(Ipv4Addr::new(10, 1, 2, 0)));
        assert!(is_buggy_ip(Ipv4Addr::new(10, 1, 2, 255)));
        assert!(!is_buggy_ip(Ipv4Addr::new(10, 1, 2, 1)));
    }

    proptest! {
        #[test]
        fn buggy_count_matches_enumeration(start: u32, len in 1u32..2000) {
            let last = start.saturating_add(len - 1);
            let r = Ipv4Range::new(Ipv4Addr::from(start), Ipv4Addr::from(last)).unwrap();
            let counted = (start..=last).filter(|&a| is_buggy_ip(Ipv4Addr::from(a))).count() as u64;
            prop_assert_eq!(r.buggy_count(), counted);
            prop_assert_eq!(r.len(), u64::from(last - start) + 1);
        }

        #[test]
        fn overlap_matches_enumeration(a in 0u32..64, b in 0u32..64, c in 0u32..64, d in 0u32..64) {
            let r1 = Ipv4Range::new(Ipv4Addr::from(a.min(b)), Ipv4Addr::from(a.max(b))).unwrap();
            let r2 = Ipv4Range::new(Ipv4Addr::from(c.min(d)), Ipv4Addr::from(c.max(d))).unwrap();
            let shared = (0u32..64).any(|x| r1.contains(Ipv4Addr::from(x)) && r2.contains(Ipv4Addr::from(x)));
            prop_assert_eq!(r1.overlaps(&r2), shared);
        }

        #[test]
        fn prefix_round_trips(bits: u32, len in 0u8..=32) {
            let p = Ipv4Prefix::new(Ipv4Addr::from(bits), len);
            let back: Ipv4Prefix = p.to_string().parse().unwrap();
            prop_assert_eq!(back, p);
            prop_assert!(p.contains(p.address));
            prop_assert!(p.network().is_network());
            prop_assert!(p.network().contains(p.address));
        }

        #[test]
        fn contains_matches_mask_arithmetic(a: u32, b: u32, len in 0u8..=32) {
            let p = Ipv4Prefix::new(Ipv4Addr::from(a), len);
            let same_top = len == 0 || (a >> (32 - u32::from(len))) == (b >> (32 - u32::from(len)));
            prop_assert_eq!(p.contains(Ipv4Addr::from(b)), same_top);
        }

        #[test]
        fn mac_round_trips(bytes: [u8; 6]) {
            let m = MacAddr(bytes);
            prop_assert_eq!(m.to_string().parse::<MacAddr>().unwrap(), m);
        }
    }
}
