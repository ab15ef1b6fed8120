//! The frame format: what a pktgen frame carries and how it is built,
//! stamped and parsed.
//!
//! Invariants:
//! * Every generated frame is Ethernet II + IPv4 (20-byte header, DF) + UDP
//!   (RFC 768) or TCP (RFC 9293, no options), with valid IPv4 and L4
//!   checksums, and (except `syn-flood`'s bare SYNs, see `spoof`) carries
//!   a [`Probe`] at the start of its L4 payload
//!   (a SYN with data, as TCP Fast Open sends, RFC 7413). Frames are padded
//!   to the requested size by growing the payload with zeros; sizes count
//!   the Ethernet header but not the FCS.
//! * Flow `i` of `N` uses source port `1024 + i % 64512` and source address
//!   `src + i / 64512`, so `N` up to 1M gives `N` distinct 5-tuples.
//! * Sequence numbers start at 0 and grow by one per sent frame; the
//!   timestamp is the sender's monotonic clock in ns since it started, so only
//!   the sender can turn it into a latency (the round-trip time of an echo).
//! * Parsing never panics on any input: every access is bounds-checked.
//!
//! The layout helpers here (`layout`, `fill_checksums`, the field offsets)
//! are shared with the echo transform and the TCP stream segments.

use dataplane::wire::checksum;
use dataplane::wire::{MacAddr, build};
use std::net::Ipv4Addr;
use std::str::FromStr;

/// Marks a probe the generator sent ("PKTG").
pub const PROBE_MAGIC: u32 = 0x504b_5447;
/// Marks a probe a sink sent back ("PKTE").
pub const ECHO_MAGIC: u32 = 0x504b_5445;
/// Bytes of [`Probe`] on the wire, big-endian: magic(4) seq(8) sent_ns(8).
/// A UDP probe fits a 64-byte frame (62 bytes minimum).
pub const PROBE_LEN: usize = 20;
/// [`Probe::kind`] of a frame the generator sent.
pub const KIND_PROBE: u8 = 0;
/// [`Probe::kind`] of a frame a sink sent back.
pub const KIND_ECHO: u8 = 1;
/// Lowest source port of generated flows.
pub const FLOW_PORT_BASE: u16 = 1024;
/// Source ports per source address.
pub const FLOW_PORTS_PER_ADDR: u32 = 65536 - FLOW_PORT_BASE as u32;

const ETH_LEN: usize = 14;
pub(super) const IP_OFF: usize = ETH_LEN;
const IP_HDR_LEN: usize = 20;
const L4_OFF: usize = IP_OFF + IP_HDR_LEN;
const UDP_HDR_LEN: usize = 8;
const TCP_HDR_LEN: usize = 20;
pub(super) const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;
pub(super) const TCP_SYN: u8 = 0x02;
pub(super) const TCP_ACK: u8 = 0x10;
pub(super) const TCP_PSH: u8 = 0x08;

/// Errors of parsing pktgen's arguments.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PktgenError {
    #[error("bad MAC address {0:?} (want aa:bb:cc:dd:ee:ff)")]
    BadMac(String),
    #[error("bad protocol {0:?} (want udp, tcp-syn, tcp-stream or syn-flood)")]
    BadProto(String),
    #[error("bad --src-cidr {0:?} (want a.b.c.d/len, len 1..=32, no host bits)")]
    BadCidr(String),
    #[error("--proto syn-flood needs --src-cidr, and --src-cidr needs --proto syn-flood")]
    SpoofNeedsSynFlood,
    #[error("frame size {size_bytes} is below the minimum {min_bytes} for {proto}")]
    FrameTooSmall {
        size_bytes: usize,
        min_bytes: usize,
        proto: &'static str,
    },
    #[error("frame size {size_bytes} is above the maximum {max_bytes}")]
    FrameTooBig { size_bytes: usize, max_bytes: usize },
    #[error("flow count {0} must be between 1 and {max}", max = MAX_FLOWS)]
    BadFlowCount(u32),
}

/// Most flows one run can generate.
pub const MAX_FLOWS: u32 = 1 << 24;
/// Largest frame (a 1500-byte MTU plus the Ethernet header).
pub const MAX_FRAME_BYTES: usize = 1514;

/// Parse `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(text: &str) -> Result<MacAddr, PktgenError> {
    let bad = || PktgenError::BadMac(text.to_string());
    let mut out = [0u8; 6];
    let mut parts = text.split(':');
    for byte in &mut out {
        let part = parts.next().ok_or_else(bad)?;
        if part.len() != 2 {
            return Err(bad());
        }
        *byte = u8::from_str_radix(part, 16).map_err(|_| bad())?;
    }
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok(MacAddr(out))
}

/// Which traffic the generator sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrafficProto {
    Udp,
    TcpSyn,
    /// Handshake, then data both ways (see the module invariants).
    TcpStream,
    /// Bare SYNs from random spoofed sources (see `spoof`).
    SynFlood,
}

impl TrafficProto {
    pub fn name(self) -> &'static str {
        match self {
            TrafficProto::Udp => "udp",
            TrafficProto::TcpSyn => "tcp-syn",
            TrafficProto::TcpStream => "tcp-stream",
            TrafficProto::SynFlood => "syn-flood",
        }
    }
    fn l4_header_len(self) -> usize {
        match self {
            TrafficProto::Udp => UDP_HDR_LEN,
            TrafficProto::TcpSyn | TrafficProto::TcpStream | TrafficProto::SynFlood => TCP_HDR_LEN,
        }
    }
    /// Smallest frame that holds the headers and a [`Probe`] (a
    /// `syn-flood` frame carries no probe: just the headers).
    pub fn min_frame_bytes(self) -> usize {
        match self {
            TrafficProto::SynFlood => L4_OFF + TCP_HDR_LEN,
            _ => L4_OFF + self.l4_header_len() + PROBE_LEN,
        }
    }
    /// The default frame size: the minimum, at least 64 bytes for the
    /// probe-carrying protocols; a bare SYN's 54 bytes for `syn-flood`.
    pub fn default_frame_bytes(self) -> usize {
        match self {
            TrafficProto::SynFlood => self.min_frame_bytes(),
            _ => self.min_frame_bytes().max(64),
        }
    }
}

impl FromStr for TrafficProto {
    type Err = PktgenError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "udp" => Ok(TrafficProto::Udp),
            "tcp-syn" => Ok(TrafficProto::TcpSyn),
            "tcp-stream" => Ok(TrafficProto::TcpStream),
            "syn-flood" => Ok(TrafficProto::SynFlood),
            other => Err(PktgenError::BadProto(other.to_string())),
        }
    }
}

/// What every generated frame of a run looks like.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameSpec {
    pub src_mac: MacAddr,
    pub dst_mac: MacAddr,
    /// Source address of flow 0.
    pub src_ip: Ipv4Addr,
    pub dst_ip: Ipv4Addr,
    pub dst_port: u16,
    pub proto: TrafficProto,
    pub flows: u32,
    pub frame_bytes: usize,
}

/// The payload marker of a pktgen frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    pub kind: u8,
    pub seq: u64,
    /// Sender's monotonic ns since it started.
    pub sent_ns: u64,
}

impl FrameSpec {
    /// Check sizes and flow count.
    pub fn validate(&self) -> Result<(), PktgenError> {
        let min_bytes = self.proto.min_frame_bytes();
        if self.frame_bytes < min_bytes {
            return Err(PktgenError::FrameTooSmall {
                size_bytes: self.frame_bytes,
                min_bytes,
                proto: self.proto.name(),
            });
        }
        if self.frame_bytes > MAX_FRAME_BYTES {
            return Err(PktgenError::FrameTooBig {
                size_bytes: self.frame_bytes,
                max_bytes: MAX_FRAME_BYTES,
            });
        }
        if self.flows == 0 || self.flows > MAX_FLOWS {
            return Err(PktgenError::BadFlowCount(self.flows));
        }
        Ok(())
    }

    /// Source address and port of flow `index` (taken modulo the flow count).
    pub fn flow_source(&self, index: u64) -> (Ipv4Addr, u16) {
        let i = index % u64::from(self.flows.max(1));
        let per_addr = u64::from(FLOW_PORTS_PER_ADDR);
        let port = FLOW_PORT_BASE + (i % per_addr) as u16;
        let addr = u32::from(self.src_ip).wrapping_add((i / per_addr) as u32);
        (Ipv4Addr::from(addr), port)
    }

    /// The flow whose source is `(addr, port)`, the inverse of
    /// [`Self::flow_source`]; `None` for a source no flow of this spec uses.
    pub fn flow_index(&self, addr: Ipv4Addr, port: u16) -> Option<u64> {
        let port_off = u64::from(port.checked_sub(FLOW_PORT_BASE)?);
        let addr_off = u64::from(u32::from(addr).wrapping_sub(u32::from(self.src_ip)));
        let index = addr_off
            .checked_mul(u64::from(FLOW_PORTS_PER_ADDR))?
            .checked_add(port_off)?;
        (index < u64::from(self.flows)).then_some(index)
    }

    /// The frame of flow 0, sequence 0 (the generator copies it and then
    /// [`stamp`]s each copy). Its length is `max(frame_bytes, minimum)`.
    pub fn template(&self) -> Vec<u8> {
        if self.proto == TrafficProto::SynFlood {
            return super::spoof::syn_template(self);
        }
        let payload_len = self
            .frame_bytes
            .max(self.proto.min_frame_bytes())
            .saturating_sub(L4_OFF + self.proto.l4_header_len());
        let mut payload = vec![0u8; payload_len];
        write_probe(
            &mut payload,
            Probe {
                kind: KIND_PROBE,
                seq: 0,
                sent_ns: 0,
            },
        );
        let (src_ip, sport) = self.flow_source(0);
        match self.proto {
            TrafficProto::Udp => build::eth_ipv4_udp(
                self.src_mac,
                self.dst_mac,
                src_ip,
                sport,
                self.dst_ip,
                self.dst_port,
                &payload,
            ),
            TrafficProto::TcpSyn | TrafficProto::TcpStream | TrafficProto::SynFlood => {
                build::eth_ipv4_tcp(
                    self.src_mac,
                    self.dst_mac,
                    src_ip,
                    sport,
                    self.dst_ip,
                    self.dst_port,
                    TCP_SYN,
                    0,
                    0,
                    &payload,
                )
            }
        }
    }
}

pub(super) fn write_probe(payload: &mut [u8], probe: Probe) -> bool {
    let magic = match probe.kind {
        KIND_PROBE => PROBE_MAGIC,
        _ => ECHO_MAGIC,
    };
    let Some(p) = payload.get_mut(..PROBE_LEN) else {
        return false;
    };
    p[0..4].copy_from_slice(&magic.to_be_bytes());
    p[4..12].copy_from_slice(&probe.seq.to_be_bytes());
    p[12..20].copy_from_slice(&probe.sent_ns.to_be_bytes());
    true
}

pub(super) fn read_probe(payload: &[u8]) -> Option<Probe> {
    let p = payload.get(..PROBE_LEN)?;
    let kind = match u32::from_be_bytes(p.get(0..4)?.try_into().ok()?) {
        PROBE_MAGIC => KIND_PROBE,
        ECHO_MAGIC => KIND_ECHO,
        _ => return None,
    };
    Some(Probe {
        kind,
        seq: u64::from_be_bytes(p.get(4..12)?.try_into().ok()?),
        sent_ns: u64::from_be_bytes(p.get(12..20)?.try_into().ok()?),
    })
}

/// Where the parts of an IPv4 TCP/UDP frame are.
pub(super) struct Layout {
    pub(super) l4_off: usize,
    /// End of the IPv4 packet (the frame may carry Ethernet padding after).
    pub(super) ip_end: usize,
    pub(super) proto: u8,
    pub(super) payload_off: usize,
}

pub(super) fn layout(frame: &[u8]) -> Option<Layout> {
    if frame.get(12..14)? != [0x08, 0x00] {
        return None;
    }
    let ver_ihl = *frame.get(IP_OFF)?;
    if ver_ihl >> 4 != 4 {
        return None;
    }
    let ihl = usize::from(ver_ihl & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([
        *frame.get(IP_OFF + 2)?,
        *frame.get(IP_OFF + 3)?,
    ]));
    let ip_end = IP_OFF.checked_add(total)?;
    let l4_off = IP_OFF + ihl;
    if ihl < IP_HDR_LEN || ip_end > frame.len() || l4_off > ip_end {
        return None;
    }
    let proto = *frame.get(IP_OFF + 9)?;
    let payload_off = match proto {
        PROTO_UDP => l4_off + UDP_HDR_LEN,
        PROTO_TCP => l4_off + usize::from(*frame.get(l4_off + 12)? >> 4) * 4,
        _ => return None,
    };
    if payload_off > ip_end {
        return None;
    }
    Some(Layout {
        l4_off,
        ip_end,
        proto,
        payload_off,
    })
}

/// The probe a frame carries, if it is a pktgen frame.
pub fn parse_probe(frame: &[u8]) -> Option<Probe> {
    let l = layout(frame)?;
    read_probe(frame.get(l.payload_off..l.ip_end)?)
}

pub(super) fn ip_at(frame: &[u8], off: usize) -> Option<Ipv4Addr> {
    let b: [u8; 4] = frame.get(off..off + 4)?.try_into().ok()?;
    Some(Ipv4Addr::from(b))
}

/// Recompute the IPv4 header and the TCP/UDP checksums of a parsed frame.
pub(super) fn fill_checksums(frame: &mut [u8], l: &Layout) -> Option<()> {
    frame.get_mut(IP_OFF + 10..IP_OFF + 12)?.fill(0);
    let ip_sum = checksum::checksum(frame.get(IP_OFF..l.l4_off)?);
    frame
        .get_mut(IP_OFF + 10..IP_OFF + 12)?
        .copy_from_slice(&ip_sum.to_be_bytes());
    let src = ip_at(frame, IP_OFF + 12)?;
    let dst = ip_at(frame, IP_OFF + 16)?;
    let csum_off = l.l4_off + if l.proto == PROTO_UDP { 6 } else { 16 };
    frame.get_mut(csum_off..csum_off + 2)?.fill(0);
    let mut c = checksum::l4_checksum(src, dst, l.proto, frame.get(l.l4_off..l.ip_end)?);
    if l.proto == PROTO_UDP && c == 0 {
        c = 0xffff;
    }
    frame
        .get_mut(csum_off..csum_off + 2)?
        .copy_from_slice(&c.to_be_bytes());
    Some(())
}

/// Turn a copy of [`FrameSpec::template`] into the frame of flow
/// `seq % flows` with sequence `seq` sent at `sent_ns`: rewrites the source
/// address and port, the probe (and the TCP sequence number) and refills the
/// checksums. False if `frame` is not a pktgen frame.
pub fn stamp(frame: &mut [u8], spec: &FrameSpec, seq: u64, sent_ns: u64) -> bool {
    stamp_inner(frame, spec, seq, sent_ns).is_some()
}

fn stamp_inner(frame: &mut [u8], spec: &FrameSpec, seq: u64, sent_ns: u64) -> Option<()> {
    let l = layout(frame)?;
    let (src_ip, sport) = spec.flow_source(seq);
    frame
        .get_mut(IP_OFF + 12..IP_OFF + 16)?
        .copy_from_slice(&src_ip.octets());
    frame
        .get_mut(l.l4_off..l.l4_off + 2)?
        .copy_from_slice(&sport.to_be_bytes());
    if l.proto == PROTO_TCP {
        frame
            .get_mut(l.l4_off + 4..l.l4_off + 8)?
            .copy_from_slice(&(seq as u32).to_be_bytes());
    }
    let probe = Probe {
        kind: KIND_PROBE,
        seq,
        sent_ns,
    };
    if !write_probe(frame.get_mut(l.payload_off..l.ip_end)?, probe) {
        return None;
    }
    fill_checksums(frame, &l)
}

pub(super) fn be32_at(frame: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_be_bytes(
        frame.get(off..off + 4)?.try_into().ok()?,
    ))
}

/// Test fixtures of the frame format, shared with the echo and stream tests.
#[cfg(test)]
pub(super) mod test_frames {
    use super::*;

    pub(in crate::pktgen) fn spec(
        proto: TrafficProto,
        flows: u32,
        frame_bytes: usize,
    ) -> FrameSpec {
        FrameSpec {
            src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
            src_ip: Ipv4Addr::new(10, 0, 0, 1),
            dst_ip: Ipv4Addr::new(10, 9, 0, 1),
            dst_port: 9000,
            proto,
            flows,
            frame_bytes,
        }
    }

    pub(in crate::pktgen) fn l4_ok(frame: &[u8]) -> bool {
        let l = layout(frame).unwrap();
        let ip_ok = checksum::checksum(&frame[IP_OFF..l.l4_off]) == 0;
        let src = ip_at(frame, IP_OFF + 12).unwrap();
        let dst = ip_at(frame, IP_OFF + 16).unwrap();
        ip_ok && checksum::verify_l4(src, dst, l.proto, &frame[l.l4_off..l.ip_end])
    }
}

#[cfg(test)]
mod tests {
    use super::test_frames::spec;
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parse_mac_accepts_only_six_hex_pairs() {
        assert_eq!(
            parse_mac("02:ab:00:00:10:ff"),
            Ok(MacAddr([2, 0xab, 0, 0, 0x10, 0xff]))
        );
        for bad in [
            "",
            "02:ab:00:00:10",
            "02:ab:00:00:10:ff:00",
            "2:ab:00:00:10:ff",
            "zz:ab:00:00:10:ff",
        ] {
            assert!(parse_mac(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn validate_rejects_small_big_and_zero_flows() {
        let min = TrafficProto::Udp.min_frame_bytes();
        assert!(spec(TrafficProto::Udp, 1, min).validate().is_ok());
        assert!(spec(TrafficProto::Udp, 1, min - 1).validate().is_err());
        assert!(spec(TrafficProto::TcpSyn, 1, min).validate().is_err());
        assert!(
            spec(TrafficProto::Udp, 1, MAX_FRAME_BYTES + 1)
                .validate()
                .is_err()
        );
        assert!(spec(TrafficProto::Udp, 0, 64).validate().is_err());
    }

    #[test]
    fn flows_are_distinct_five_tuples() {
        let s = spec(TrafficProto::Udp, 200_000, 128);
        let mut seen = std::collections::HashSet::new();
        for i in 0..200_000u64 {
            assert!(seen.insert(s.flow_source(i)));
        }
        // Flow index wraps at the flow count.
        assert_eq!(s.flow_source(200_000), s.flow_source(0));
    }

    #[test]
    fn flow_index_inverts_flow_source() {
        let s = spec(TrafficProto::TcpStream, 200_000, 80);
        for i in [0u64, 1, 64_511, 64_512, 64_513, 199_999] {
            let (ip, port) = s.flow_source(i);
            assert_eq!(s.flow_index(ip, port), Some(i));
        }
        // Ports below the base, addresses below the first and flows past the
        // count belong to no flow.
        assert_eq!(s.flow_index(Ipv4Addr::new(10, 0, 0, 1), 80), None);
        assert_eq!(s.flow_index(Ipv4Addr::new(10, 0, 0, 0), 2000), None);
        assert_eq!(s.flow_index(Ipv4Addr::new(10, 0, 0, 5), 2000), None);
    }

    proptest! {
        #[test]
        fn truncated_frames_are_not_probes(cut in 0usize..64) {
            let s = spec(TrafficProto::Udp, 1, 64);
            let mut frame = s.template();
            stamp(&mut frame, &s, 7, 9);
            prop_assert_eq!(parse_probe(&frame[..cut]), None);
        }
    }
}
