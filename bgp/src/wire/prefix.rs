//! IP prefixes and their NLRI encoding (RFC 4271 §4.3, RFC 4760 §5): one
//! length byte (in bits), then the fewest whole bytes that hold the prefix.
//!
//! Invariant: a [`Prefix`] never has host bits set (constructors mask them),
//! so two prefixes are equal exactly when they cover the same addresses and
//! decode → encode is the identity on canonical input.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// Address Family Identifiers (RFC 4760) this codec knows.
pub const AFI_IPV4: u16 = 1;
pub const AFI_IPV6: u16 = 2;
/// Subsequent AFI: unicast.
pub const SAFI_UNICAST: u8 = 1;

/// An IPv4 or IPv6 prefix with its host bits cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Prefix {
    addr: IpAddr,
    len: u8,
}

/// Why a prefix could not be built or parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    #[error("prefix length {len} is longer than the {max} bits of the address")]
    TooLong { len: u8, max: u8 },
    #[error("`{0}` is not an address/length prefix (like 192.0.2.0/24)")]
    Syntax(String),
}

impl Prefix {
    /// The prefix `addr/len` with the host bits of `addr` cleared.
    pub fn new(addr: IpAddr, len: u8) -> Result<Self, PrefixError> {
        let max = max_len(addr);
        if len > max {
            return Err(PrefixError::TooLong { len, max });
        }
        Ok(Prefix {
            addr: mask(addr, len),
            len,
        })
    }

    /// A host route (`/32` or `/128`).
    pub fn host(addr: IpAddr) -> Self {
        Prefix {
            addr,
            len: max_len(addr),
        }
    }

    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    pub fn len(&self) -> u8 {
        self.len
    }

    /// True for the default route (`0.0.0.0/0`, `::/0`); for clippy's
    /// `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn is_ipv4(&self) -> bool {
        self.addr.is_ipv4()
    }

    /// The address family (`AFI_IPV4` or `AFI_IPV6`).
    pub fn afi(&self) -> u16 {
        if self.is_ipv4() { AFI_IPV4 } else { AFI_IPV6 }
    }

    /// Whether `addr` lies inside this prefix.
    pub fn contains(&self, addr: IpAddr) -> bool {
        addr.is_ipv4() == self.addr.is_ipv4() && mask(addr, self.len) == self.addr
    }

    /// Bytes this prefix takes in an NLRI field.
    pub fn encoded_len(&self) -> usize {
        1 + usize::from(self.len).div_ceil(8)
    }

    /// Appends the NLRI encoding.
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.push(self.len);
        let n = usize::from(self.len).div_ceil(8);
        match self.addr {
            IpAddr::V4(a) => out.extend_from_slice(&a.octets()[..n]),
            IpAddr::V6(a) => out.extend_from_slice(&a.octets()[..n]),
        }
    }

    /// Decodes one prefix of family `afi` from the front of `buf`; returns
    /// it and the bytes it took, or `None` if the length byte exceeds the
    /// family's width or the bytes run out (an Invalid Network Field). The
    /// trailing bits beyond the length are ignored (RFC 4271 §4.3).
    pub fn parse(buf: &[u8], afi: u16) -> Option<(Self, usize)> {
        let (&len, rest) = buf.split_first()?;
        let n = usize::from(len).div_ceil(8);
        let bytes = rest.get(..n)?;
        let addr = match afi {
            AFI_IPV4 if len <= 32 => {
                let mut o = [0u8; 4];
                o[..n].copy_from_slice(bytes);
                IpAddr::V4(Ipv4Addr::from(o))
            }
            AFI_IPV6 if len <= 128 => {
                let mut o = [0u8; 16];
                o[..n].copy_from_slice(bytes);
                IpAddr::V6(Ipv6Addr::from(o))
            }
            _ => return None,
        };
        Some((
            Prefix {
                addr: mask(addr, len),
                len,
            },
            1 + n,
        ))
    }

    /// Decodes a whole NLRI field (every byte must belong to a prefix).
    pub fn parse_all(mut buf: &[u8], afi: u16) -> Option<Vec<Self>> {
        let mut out = Vec::new();
        while !buf.is_empty() {
            let (p, used) = Self::parse(buf, afi)?;
            out.push(p);
            buf = &buf[used..];
        }
        Some(out)
    }
}

fn max_len(addr: IpAddr) -> u8 {
    if addr.is_ipv4() { 32 } else { 128 }
}

fn mask(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let bits = u32::from(a);
            let m = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(bits & m))
        }
        IpAddr::V6(a) => {
            let bits = u128::from(a);
            let m = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(bits & m))
        }
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl FromStr for Prefix {
    type Err = PrefixError;

    /// `192.0.2.0/24`, `2001:db8::/32`; a bare address is a host route.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let syntax = || PrefixError::Syntax(s.to_string());
        match s.split_once('/') {
            Some((a, l)) => {
                let addr: IpAddr = a.parse().map_err(|_| syntax())?;
                let len: u8 = l.parse().map_err(|_| syntax())?;
                Prefix::new(addr, len)
            }
            None => Ok(Prefix::host(s.parse().map_err(|_| syntax())?)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_host_bits_and_encodes_minimal_bytes() {
        let p: Prefix = "10.1.2.3/23".parse().unwrap();
        assert_eq!(p.to_string(), "10.1.2.0/23");
        let mut out = Vec::new();
        p.emit(&mut out);
        assert_eq!(out, [23, 10, 1, 2]);
        assert_eq!(Prefix::parse(&out, AFI_IPV4), Some((p, 4)));
        let d: Prefix = "0.0.0.0/0".parse().unwrap();
        assert_eq!(d.encoded_len(), 1);
        assert!(d.contains("8.8.8.8".parse().unwrap()));
        let v6: Prefix = "2001:db8::1/64".parse().unwrap();
        assert_eq!(v6.to_string(), "2001:db8::/64");
        assert!(!v6.contains("10.0.0.1".parse().unwrap()));
    }

    #[test]
    fn rejects_overlong_and_truncated() {
        assert_eq!(Prefix::parse(&[33, 1, 2, 3, 4, 5], AFI_IPV4), None);
        assert_eq!(Prefix::parse(&[24, 1, 2], AFI_IPV4), None);
        assert_eq!(Prefix::parse(&[], AFI_IPV4), None);
        assert_eq!(Prefix::parse(&[8, 1], 3), None);
        assert!("10.0.0.0/33".parse::<Prefix>().is_err());
        assert!("nonsense".parse::<Prefix>().is_err());
    }
}
