//! Address value types of the plan: IPv4 prefixes and MAC addresses, with
//! their text forms (`192.0.2.1/24`, `02:00:00:00:00:01`).
//!
//! Invariants: an [`Ipv4Prefix`] has `prefix_len <= 32`; a [`MacAddr`]
//! parses from exactly six two-digit hex groups separated by `:`.

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

    proptest! {
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
