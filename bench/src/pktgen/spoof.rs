//! Spoofed SYNs (`send --proto syn-flood --src-cidr CIDR`): bare TCP SYNs
//! (RFC 9293, no options, no payload) from random source addresses and
//! ports inside a subnet the caller owns, the shape of a SYN flood.
//!
//! Invariants:
//! * Every frame's source address lies inside the [`SpoofRange`] (its
//!   network and broadcast addresses included when the prefix is shorter
//!   than /31), its source port in `1024..=65535`, its sequence number
//!   random; the IPv4 and TCP checksums are valid.
//! * The sources come from the dataplane's xorshift64* generator
//!   ([`XorShift64Star`], the SNAT allocator's): cheap (no syscall, no
//!   allocation per frame) and reproducible from its seed, not
//!   cryptographic.
//! * Frames are 54 bytes (Ethernet + IPv4 + TCP) unless a larger size is
//!   asked for; the extra bytes are Ethernet padding after the IPv4
//!   packet, never TCP payload.

use super::frame::{FrameSpec, IP_OFF, PktgenError, fill_checksums, layout};
use dataplane::snat::XorShift64Star;
use dataplane::wire::build;
use nic_config::IpPrefix;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// Size of a bare SYN frame: Ethernet (14) + IPv4 (20) + TCP (20).
pub const SYN_FLOOD_FRAME_BYTES: usize = 54;

/// The subnet spoofed sources are drawn from (`198.18.0.0/15`): an IPv4
/// [`IpPrefix`] without host bits, at least /1 long (its first address
/// kept as IPv4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpoofRange(IpPrefix, Ipv4Addr);

impl SpoofRange {
    /// The subnet's first address.
    pub fn base(self) -> Ipv4Addr {
        self.1
    }

    /// Addresses in the range.
    pub fn size(self) -> u64 {
        1u64 << (32 - u32::from(self.0.prefix_len))
    }

    pub fn contains(self, addr: Ipv4Addr) -> bool {
        self.0.contains(addr)
    }
}

impl FromStr for SpoofRange {
    type Err = PktgenError;
    /// `a.b.c.d/len`, `len` in 1..=32, no host bits set.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse::<IpPrefix>()
            .ok()
            .filter(|p| p.prefix_len >= 1 && p.is_network())
            .and_then(|p| match p.address {
                std::net::IpAddr::V4(base) => Some(SpoofRange(p, base)),
                std::net::IpAddr::V6(_) => None,
            })
            .ok_or_else(|| PktgenError::BadCidr(s.to_owned()))
    }
}

/// Random sources inside a [`SpoofRange`].
#[derive(Clone, Debug)]
pub struct Spoofer {
    range: SpoofRange,
    rng: XorShift64Star,
}

impl Spoofer {
    /// A generator seeded with `seed`.
    pub fn new(range: SpoofRange, seed: u64) -> Self {
        Spoofer {
            range,
            rng: XorShift64Star::new(seed),
        }
    }

    /// The next spoofed (source address, source port, sequence number).
    pub fn next_source(&mut self) -> (Ipv4Addr, u16, u32) {
        let r = self.rng.next_u64();
        let host = (r >> 32) % self.range.size();
        let addr = Ipv4Addr::from(u32::from(self.range.base()).wrapping_add(host as u32));
        let port = 1024 + ((r >> 16) & 0xffff) as u16 % (65535 - 1024 + 1);
        let seq = self.rng.next_u64() as u32;
        (addr, port, seq)
    }
}

/// The bare SYN of `spec` (its MACs, destination and `frame_bytes`; the
/// source is overwritten per frame by [`stamp_spoofed`]).
pub fn syn_template(spec: &FrameSpec) -> Vec<u8> {
    let mut frame = build::eth_ipv4_tcp(
        spec.src_mac,
        spec.dst_mac,
        spec.src_ip,
        1024,
        spec.dst_ip,
        spec.dst_port,
        dataplane::wire::tcp::flags::SYN,
        0,
        0,
        b"",
    );
    if spec.frame_bytes > frame.len() {
        frame.resize(spec.frame_bytes, 0);
    }
    frame
}

/// Give a copy of [`syn_template`] the next spoofed source, port and
/// sequence number of `spoofer`, and refill its checksums. False if `frame`
/// is not an IPv4 TCP frame.
pub fn stamp_spoofed(frame: &mut [u8], spoofer: &mut Spoofer) -> bool {
    stamp_inner(frame, spoofer).is_some()
}

fn stamp_inner(frame: &mut [u8], spoofer: &mut Spoofer) -> Option<()> {
    let l = layout(frame)?;
    let (addr, port, seq) = spoofer.next_source();
    frame
        .get_mut(IP_OFF + 12..IP_OFF + 16)?
        .copy_from_slice(&addr.octets());
    frame
        .get_mut(l.l4_off..l.l4_off + 2)?
        .copy_from_slice(&port.to_be_bytes());
    frame
        .get_mut(l.l4_off + 4..l.l4_off + 8)?
        .copy_from_slice(&seq.to_be_bytes());
    fill_checksums(frame, &l)
}

#[cfg(test)]
mod tests {
    use super::super::frame::TrafficProto;
    use super::super::frame::test_frames::{l4_ok, spec};
    use super::*;

    #[test]
    fn cidrs_parse_and_reject_host_bits_and_bad_lengths() {
        let range: SpoofRange = "198.18.0.0/15".parse().unwrap();
        assert_eq!(range.base(), Ipv4Addr::new(198, 18, 0, 0));
        assert_eq!(range.size(), 1 << 17);
        assert!(range.contains(Ipv4Addr::new(198, 19, 255, 255)));
        assert!(!range.contains(Ipv4Addr::new(198, 20, 0, 0)));
        assert_eq!("10.0.0.7/32".parse::<SpoofRange>().map(|r| r.size()), Ok(1));
        for bad in [
            "198.18.0.0",
            "198.18.0.1/15",
            "198.18.0.0/0",
            "198.18.0.0/33",
            "198.18.0/16",
            "x/16",
        ] {
            assert!(bad.parse::<SpoofRange>().is_err(), "{bad}");
        }
    }

    #[test]
    fn spoofed_syns_stay_in_range_with_valid_checksums_and_vary() {
        let range: SpoofRange = "198.18.0.0/16".parse().unwrap();
        let mut s = spec(TrafficProto::SynFlood, 1, SYN_FLOOD_FRAME_BYTES);
        s.src_ip = range.base();
        let template = syn_template(&s);
        assert_eq!(template.len(), SYN_FLOOD_FRAME_BYTES);
        let mut spoofer = Spoofer::new(range, 42);
        let mut sources = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let mut frame = template.clone();
            assert!(stamp_spoofed(&mut frame, &mut spoofer));
            assert!(l4_ok(&frame));
            let src = Ipv4Addr::new(frame[26], frame[27], frame[28], frame[29]);
            let sport = u16::from_be_bytes([frame[34], frame[35]]);
            assert!(range.contains(src), "{src}");
            assert!(sport >= 1024);
            // A bare SYN: flags SYN only, data offset 5 (no options).
            assert_eq!(frame[47], 0x02);
            assert_eq!(frame[46] >> 4, 5);
            sources.insert((src, sport));
        }
        // Random sources: (almost) every frame a new 2-tuple.
        assert!(sources.len() > 9_900, "{}", sources.len());
        // Reproducible from the seed.
        let (mut a, mut b) = (Spoofer::new(range, 7), Spoofer::new(range, 7));
        assert_eq!(a.next_source(), b.next_source());
    }

    #[test]
    fn larger_frames_are_padded_after_the_ip_packet() {
        let mut s = spec(TrafficProto::SynFlood, 1, 64);
        s.src_ip = Ipv4Addr::new(198, 18, 0, 0);
        let mut frame = syn_template(&s);
        assert_eq!(frame.len(), 64);
        // IPv4 total length: still header + TCP header.
        assert_eq!(u16::from_be_bytes([frame[16], frame[17]]), 40);
        let mut spoofer = Spoofer::new("198.18.0.0/16".parse().unwrap(), 1);
        assert!(stamp_spoofed(&mut frame, &mut spoofer));
        assert!(l4_ok(&frame));
    }
}
