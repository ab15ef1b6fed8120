//! The packet generator's frame format, echo transform and statistics
//! (the `pktgen` binary drives them over the af_packet driver).
//!
//! Invariants:
//! * Every generated frame is Ethernet II + IPv4 (20-byte header, DF) + UDP
//!   (RFC 768) or TCP (RFC 9293, no options), with valid IPv4 and L4
//!   checksums, and carries a [`Probe`] at the start of its L4 payload
//!   (a SYN with data, as TCP Fast Open sends, RFC 7413). Frames are padded
//!   to the requested size by growing the payload with zeros; sizes count
//!   the Ethernet header but not the FCS.
//! * Flow `i` of `N` uses source port `1024 + i % 64512` and source address
//!   `src + i / 64512`, so `N` up to 1M gives `N` distinct 5-tuples.
//! * Sequence numbers start at 0 and grow by one per sent frame; the
//!   timestamp is the sender's monotonic clock in ns since it started, so only
//!   the sender can turn it into a latency (the round-trip time of an echo).
//! * TCP "established-like" streams ([`TrafficProto::TcpStream`]): each
//!   flow opens with a SYN (sequence [`stream_isn`] of the flow), the sink
//!   answers SYN-ACK (its own ISN = the client's, ack = ISN + 1); then the
//!   client sends ACK|PSH segments carrying a probe at its next sequence
//!   number, acknowledging everything the sink sent, and the sink echoes
//!   each as an ACK|PSH segment of the same length whose sequence is the
//!   client's ack and whose ack covers the client's payload. Both sides'
//!   sequence numbers therefore advance exactly as a real connection's
//!   would, within the window a stateful firewall tracks (one segment in
//!   flight per flow; the sender keeps the per-flow state, [`StreamFlow`]).
//! * Parsing never panics on any input: every access is bounds-checked.

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
const IP_OFF: usize = ETH_LEN;
const IP_HDR_LEN: usize = 20;
const L4_OFF: usize = IP_OFF + IP_HDR_LEN;
const UDP_HDR_LEN: usize = 8;
const TCP_HDR_LEN: usize = 20;
const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;
const TCP_SYN: u8 = 0x02;
const TCP_ACK: u8 = 0x10;
const TCP_PSH: u8 = 0x08;

/// Errors of parsing pktgen's arguments.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PktgenError {
    #[error("bad MAC address {0:?} (want aa:bb:cc:dd:ee:ff)")]
    BadMac(String),
    #[error("bad protocol {0:?} (want udp, tcp-syn or tcp-stream)")]
    BadProto(String),
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
}

impl TrafficProto {
    pub fn name(self) -> &'static str {
        match self {
            TrafficProto::Udp => "udp",
            TrafficProto::TcpSyn => "tcp-syn",
            TrafficProto::TcpStream => "tcp-stream",
        }
    }
    fn l4_header_len(self) -> usize {
        match self {
            TrafficProto::Udp => UDP_HDR_LEN,
            TrafficProto::TcpSyn | TrafficProto::TcpStream => TCP_HDR_LEN,
        }
    }
    /// Smallest frame that holds the headers and a [`Probe`].
    pub fn min_frame_bytes(self) -> usize {
        L4_OFF + self.l4_header_len() + PROBE_LEN
    }
}

impl FromStr for TrafficProto {
    type Err = PktgenError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "udp" => Ok(TrafficProto::Udp),
            "tcp-syn" => Ok(TrafficProto::TcpSyn),
            "tcp-stream" => Ok(TrafficProto::TcpStream),
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
            TrafficProto::TcpSyn | TrafficProto::TcpStream => build::eth_ipv4_tcp(
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
            ),
        }
    }
}

fn write_probe(payload: &mut [u8], probe: Probe) -> bool {
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

fn read_probe(payload: &[u8]) -> Option<Probe> {
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
struct Layout {
    l4_off: usize,
    /// End of the IPv4 packet (the frame may carry Ethernet padding after).
    ip_end: usize,
    proto: u8,
    payload_off: usize,
}

fn layout(frame: &[u8]) -> Option<Layout> {
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

fn ip_at(frame: &[u8], off: usize) -> Option<Ipv4Addr> {
    let b: [u8; 4] = frame.get(off..off + 4)?.try_into().ok()?;
    Some(Ipv4Addr::from(b))
}

/// Recompute the IPv4 header and the TCP/UDP checksums of a parsed frame.
fn fill_checksums(frame: &mut [u8], l: &Layout) -> Option<()> {
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

/// Turn a received probe into its echo in place: swap MACs, addresses and
/// ports, mark the probe [`KIND_ECHO`], answer a SYN with a SYN-ACK
/// (ack = seq + 1) and refill the checksums. Returns the probe, or `None`
/// (frame unchanged) if it is not a pktgen probe.
pub fn echo_in_place(frame: &mut [u8]) -> Option<Probe> {
    let l = layout(frame)?;
    let probe = read_probe(frame.get(l.payload_off..l.ip_end)?)?;
    if probe.kind != KIND_PROBE {
        return None;
    }
    let (macs, _) = frame.split_at_mut_checked(12)?;
    let (dst, src) = macs.split_at_mut(6);
    dst.swap_with_slice(src);
    let addrs = frame.get_mut(IP_OFF + 12..IP_OFF + 20)?;
    let (a, b) = addrs.split_at_mut(4);
    a.swap_with_slice(b);
    let ports = frame.get_mut(l.l4_off..l.l4_off + 4)?;
    let (a, b) = ports.split_at_mut(2);
    a.swap_with_slice(b);
    if l.proto == PROTO_TCP {
        let seq = be32_at(frame, l.l4_off + 4)?;
        let flags = *frame.get(l.l4_off + 13)?;
        let (reply_seq, reply_ack, reply_flags) = if flags & TCP_SYN != 0 {
            // SYN-ACK: the sink's ISN is the client's, acking the SYN only.
            (seq, seq.wrapping_add(1), TCP_SYN | TCP_ACK)
        } else {
            // Data of an established-like stream: echo the payload as the
            // sink's next segment, acking the client's payload.
            let ack = be32_at(frame, l.l4_off + 8)?;
            let payload_len = (l.ip_end - l.payload_off) as u32;
            (ack, seq.wrapping_add(payload_len), TCP_ACK | TCP_PSH)
        };
        frame
            .get_mut(l.l4_off + 4..l.l4_off + 8)?
            .copy_from_slice(&reply_seq.to_be_bytes());
        frame
            .get_mut(l.l4_off + 8..l.l4_off + 12)?
            .copy_from_slice(&reply_ack.to_be_bytes());
        *frame.get_mut(l.l4_off + 13)? = reply_flags;
    }
    frame
        .get_mut(l.payload_off..l.payload_off + 4)?
        .copy_from_slice(&ECHO_MAGIC.to_be_bytes());
    fill_checksums(frame, &l)?;
    Some(probe)
}

fn be32_at(frame: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_be_bytes(
        frame.get(off..off + 4)?.try_into().ok()?,
    ))
}

/// Initial sequence number of stream flow `flow` (spread over the space,
/// distinct for neighbouring flows).
pub fn stream_isn(flow: u64) -> u32 {
    (flow as u32).wrapping_mul(0x9e37_79b9).wrapping_add(0x1000)
}

/// Where a [`TrafficProto::TcpStream`] flow stands, kept by the sender.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamFlow {
    /// The client's next sequence number (0 until the SYN is sent).
    pub next_seq: u32,
    /// The sink's next sequence number: what the client acknowledges.
    pub peer_next: u32,
    pub state: StreamState,
    /// When the segment in flight was sent (sender's ns), if one is.
    pub in_flight_since_ns: Option<u64>,
}

/// The states of a stream flow at the sender.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StreamState {
    #[default]
    Closed,
    SynSent,
    Established,
}

/// The TCP fields of one segment a stream flow sends next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamSegment {
    pub flags: u8,
    pub seq: u32,
    pub ack: u32,
}

impl StreamFlow {
    /// The segment to (re)send for flow `flow`: the SYN while not
    /// established, else data at the next sequence number acking all the
    /// sink sent. Marks it in flight from `now_ns`.
    pub fn next_segment(&mut self, flow: u64, now_ns: u64) -> StreamSegment {
        self.in_flight_since_ns = Some(now_ns);
        match self.state {
            StreamState::Closed | StreamState::SynSent => {
                self.state = StreamState::SynSent;
                self.next_seq = stream_isn(flow);
                StreamSegment {
                    flags: TCP_SYN,
                    seq: self.next_seq,
                    ack: 0,
                }
            }
            StreamState::Established => StreamSegment {
                flags: TCP_ACK | TCP_PSH,
                seq: self.next_seq,
                ack: self.peer_next,
            },
        }
    }

    /// Whether the flow may send now: nothing in flight, or the segment in
    /// flight is older than `retransmit_ns` (then it is sent again).
    pub fn ready(&self, now_ns: u64, retransmit_ns: u64) -> bool {
        self.in_flight_since_ns
            .is_none_or(|t| now_ns.saturating_sub(t) >= retransmit_ns)
    }

    /// Take in the sink's answer; true if it moved the flow on (a late
    /// answer to an older segment is ignored).
    pub fn on_echo(&mut self, echo: &TcpEcho) -> bool {
        match self.state {
            StreamState::SynSent
                if echo.flags & (TCP_SYN | TCP_ACK) == TCP_SYN | TCP_ACK
                    && echo.ack == self.next_seq.wrapping_add(1) =>
            {
                self.next_seq = echo.ack;
                self.peer_next = echo.seq.wrapping_add(1);
                self.state = StreamState::Established;
                self.in_flight_since_ns = None;
                true
            }
            StreamState::Established
                if echo.flags & TCP_SYN == 0
                    && echo.seq == self.peer_next
                    && echo.ack == self.next_seq.wrapping_add(echo.payload_len) =>
            {
                self.next_seq = echo.ack;
                self.peer_next = echo.seq.wrapping_add(echo.payload_len);
                self.in_flight_since_ns = None;
                true
            }
            _ => false,
        }
    }
}

/// Write `segment` of stream flow `flow` into a copy of the template: the
/// flow's source, the TCP sequence, ack and flags, the probe, checksums.
/// False if `frame` is not a pktgen TCP frame.
pub fn stamp_stream(
    frame: &mut [u8],
    spec: &FrameSpec,
    flow: u64,
    segment: StreamSegment,
    probe_seq: u64,
    sent_ns: u64,
) -> bool {
    stamp_stream_inner(frame, spec, flow, segment, probe_seq, sent_ns).is_some()
}

fn stamp_stream_inner(
    frame: &mut [u8],
    spec: &FrameSpec,
    flow: u64,
    segment: StreamSegment,
    probe_seq: u64,
    sent_ns: u64,
) -> Option<()> {
    let l = layout(frame)?;
    if l.proto != PROTO_TCP {
        return None;
    }
    let (src_ip, sport) = spec.flow_source(flow);
    frame
        .get_mut(IP_OFF + 12..IP_OFF + 16)?
        .copy_from_slice(&src_ip.octets());
    frame
        .get_mut(l.l4_off..l.l4_off + 2)?
        .copy_from_slice(&sport.to_be_bytes());
    frame
        .get_mut(l.l4_off + 4..l.l4_off + 8)?
        .copy_from_slice(&segment.seq.to_be_bytes());
    frame
        .get_mut(l.l4_off + 8..l.l4_off + 12)?
        .copy_from_slice(&segment.ack.to_be_bytes());
    *frame.get_mut(l.l4_off + 13)? = segment.flags;
    let probe = Probe {
        kind: KIND_PROBE,
        seq: probe_seq,
        sent_ns,
    };
    if !write_probe(frame.get_mut(l.payload_off..l.ip_end)?, probe) {
        return None;
    }
    fill_checksums(frame, &l)
}

/// What the sender needs from a sink's TCP answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpEcho {
    pub probe: Probe,
    /// The answer's destination: the client flow's source.
    pub dst: Ipv4Addr,
    pub dst_port: u16,
    pub flags: u8,
    pub seq: u32,
    pub ack: u32,
    pub payload_len: u32,
}

/// Parse a sink's TCP answer (an echo probe in a TCP segment).
pub fn parse_tcp_echo(frame: &[u8]) -> Option<TcpEcho> {
    let l = layout(frame)?;
    if l.proto != PROTO_TCP {
        return None;
    }
    let probe = read_probe(frame.get(l.payload_off..l.ip_end)?)?;
    if probe.kind != KIND_ECHO {
        return None;
    }
    Some(TcpEcho {
        probe,
        dst: ip_at(frame, IP_OFF + 16)?,
        dst_port: u16::from_be_bytes(frame.get(l.l4_off + 2..l.l4_off + 4)?.try_into().ok()?),
        flags: *frame.get(l.l4_off + 13)?,
        seq: be32_at(frame, l.l4_off + 4)?,
        ack: be32_at(frame, l.l4_off + 8)?,
        payload_len: (l.ip_end - l.payload_off) as u32,
    })
}

/// Sub-buckets per power of two: values are kept to 1/64 (≈1.6 %).
const SUB_BITS: u32 = 6;
const SUB: usize = 1 << SUB_BITS;
/// Values below this are exact.
const LINEAR: u64 = 2 * SUB as u64;
const BUCKETS: usize = 2 * SUB + (63 - SUB_BITS as usize) * SUB;

/// A log-linear histogram of u64 values (latencies in ns) with fixed memory:
/// values below 128 are exact, larger ones are kept to within 1/64 of their
/// value. Percentiles report the upper edge of the bucket holding the rank,
/// capped at the exact maximum, so `p50 <= p90 <= p99 <= max`.
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Box<[u64]>,
    count: u64,
    min: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; BUCKETS].into_boxed_slice(),
            count: 0,
            min: u64::MAX,
            max: 0,
        }
    }
}

fn bucket_of(value: u64) -> usize {
    if value < LINEAR {
        return value as usize;
    }
    let exp = 63 - value.leading_zeros(); // >= 7
    let mantissa = (value >> (exp - SUB_BITS)) as usize; // in [64, 128)
    LINEAR as usize + (exp as usize - SUB_BITS as usize - 1) * SUB + (mantissa - SUB)
}

/// Largest value that falls in `bucket`.
fn bucket_high(bucket: usize) -> u64 {
    if bucket < LINEAR as usize {
        return bucket as u64;
    }
    let rel = bucket - LINEAR as usize;
    let exp = (rel / SUB) as u32 + SUB_BITS + 1;
    let mantissa = (SUB + rel % SUB) as u64;
    let shift = exp - SUB_BITS;
    ((mantissa + 1) << shift).wrapping_sub(1)
}

impl Histogram {
    pub fn record(&mut self, value: u64) {
        if let Some(c) = self.counts.get_mut(bucket_of(value)) {
            *c += 1;
        }
        self.count += 1;
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }
    pub fn count(&self) -> u64 {
        self.count
    }
    pub fn max(&self) -> Option<u64> {
        (self.count > 0).then_some(self.max)
    }
    pub fn min(&self) -> Option<u64> {
        (self.count > 0).then_some(self.min)
    }
    /// The value at quantile `q` (0..=1): the smallest bucket edge with at
    /// least `ceil(q * count)` values at or below it. `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (bucket, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(bucket_high(bucket).min(self.max).max(self.min));
            }
        }
        Some(self.max)
    }
}

/// Latency percentiles in ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Percentiles {
    pub samples: u64,
    pub min_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

impl Histogram {
    pub fn percentiles(&self) -> Option<Percentiles> {
        Some(Percentiles {
            samples: self.count,
            min_ns: self.min()?,
            p50_ns: self.quantile(0.50)?,
            p90_ns: self.quantile(0.90)?,
            p99_ns: self.quantile(0.99)?,
            max_ns: self.max()?,
        })
    }
}

/// Loss seen by a sink from sequence numbers (a sender's sequence starts at
/// 0): expected = highest sequence + 1, loss = expected - received
/// (saturating). A sequence at or below the highest seen counts as
/// reordered; a duplicated frame counts as received, so duplicates hide
/// loss (af_packet over veth does not duplicate).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeqTracker {
    pub received: u64,
    pub highest: Option<u64>,
    pub reordered: u64,
}

impl SeqTracker {
    pub fn record(&mut self, seq: u64) {
        self.received += 1;
        match self.highest {
            Some(h) if seq <= h => self.reordered += 1,
            _ => self.highest = Some(seq),
        }
    }
    pub fn expected(&self) -> u64 {
        self.highest.map_or(0, |h| h.saturating_add(1))
    }
    pub fn lost(&self) -> u64 {
        self.expected().saturating_sub(self.received)
    }
}

/// `part / whole`, 0 when `whole` is 0.
pub fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

#[cfg(test)]
mod tests;
