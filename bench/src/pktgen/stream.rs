//! TCP "established-like" streams
//! ([`TrafficProto::TcpStream`](super::TrafficProto::TcpStream)): the
//! sender's per-flow state and the segments both sides exchange.
//!
//! Invariants:
//! * Each flow opens with a SYN (sequence [`stream_isn`] of the flow), the
//!   sink answers SYN-ACK (its own ISN = the client's, ack = ISN + 1); then
//!   the client sends ACK|PSH segments carrying a probe at its next sequence
//!   number, acknowledging everything the sink sent, and the sink echoes
//!   each as an ACK|PSH segment of the same length whose sequence is the
//!   client's ack and whose ack covers the client's payload. Both sides'
//!   sequence numbers therefore advance exactly as a real connection's
//!   would, within the window a stateful firewall tracks (one segment in
//!   flight per flow; the sender keeps the per-flow state, [`StreamFlow`]).
//! * Parsing never panics on any input: every access is bounds-checked.

use super::frame::{
    FrameSpec, IP_OFF, KIND_ECHO, KIND_PROBE, PROTO_TCP, Probe, TCP_ACK, TCP_PSH, TCP_SYN, be32_at,
    fill_checksums, ip_at, layout, read_probe, write_probe,
};
use std::net::Ipv4Addr;

/// Initial sequence number of stream flow `flow` (spread over the space,
/// distinct for neighbouring flows).
pub fn stream_isn(flow: u64) -> u32 {
    (flow as u32).wrapping_mul(0x9e37_79b9).wrapping_add(0x1000)
}

/// Where a [`TrafficProto::TcpStream`](super::TrafficProto::TcpStream) flow stands, kept by the sender.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pktgen::echo::echo_in_place;
    use crate::pktgen::frame::TrafficProto;
    use crate::pktgen::frame::test_frames::{l4_ok, spec};
    use proptest::prelude::*;

    fn tcp_field(frame: &[u8], off: usize) -> u32 {
        u32::from_be_bytes(frame[34 + off..34 + off + 4].try_into().unwrap())
    }

    proptest! {
        /// A stream flow through the sink's echo: SYN → SYN-ACK → data both
        /// ways, every sequence and ack number where a real connection's would
        /// be, checksums valid throughout.
        #[test]
        fn stream_flow_handshakes_then_exchanges_data(
            flows in 1u32..300_000,
            flow_pick in any::<u64>(),
            extra in 0usize..1000,
            rounds in 1usize..20,
        ) {
            let s = spec(TrafficProto::TcpStream, flows, TrafficProto::TcpStream.min_frame_bytes() + extra);
            let flow = flow_pick % u64::from(flows);
            let template = s.template();
            let mut state = StreamFlow::default();
            prop_assert!(state.ready(0, 1_000));

            // SYN.
            let syn = state.next_segment(flow, 5);
            prop_assert_eq!(syn.flags, TCP_SYN);
            prop_assert_eq!(syn.seq, stream_isn(flow));
            prop_assert!(!state.ready(6, 1_000));
            prop_assert!(state.ready(1_005, 1_000));
            let mut frame = template.clone();
            prop_assert!(stamp_stream(&mut frame, &s, flow, syn, 0, 5));
            prop_assert!(l4_ok(&frame));
            let (ip, port) = s.flow_source(flow);
            prop_assert_eq!(&frame[26..30], &ip.octets()[..]);
            prop_assert_eq!(&frame[34..36], &port.to_be_bytes()[..]);
            prop_assert!(echo_in_place(&mut frame).is_some());
            prop_assert!(l4_ok(&frame));
            let synack = parse_tcp_echo(&frame).unwrap();
            prop_assert_eq!(synack.flags, TCP_SYN | TCP_ACK);
            prop_assert_eq!(s.flow_index(synack.dst, synack.dst_port), Some(flow));
            prop_assert!(state.on_echo(&synack));
            prop_assert_eq!(state.state, StreamState::Established);
            prop_assert!(state.ready(6, 1_000));

            let payload = (frame.len() - 54) as u32;
            let isn = stream_isn(flow);
            for round in 0..rounds {
                let seg = state.next_segment(flow, 10);
                prop_assert_eq!(seg.flags, TCP_ACK | TCP_PSH);
                prop_assert_eq!(seg.seq, isn.wrapping_add(1).wrapping_add(round as u32 * payload));
                prop_assert_eq!(seg.ack, isn.wrapping_add(1).wrapping_add(round as u32 * payload));
                let mut data = template.clone();
                prop_assert!(stamp_stream(&mut data, &s, flow, seg, round as u64 + 1, 10));
                prop_assert!(l4_ok(&data));
                prop_assert!(echo_in_place(&mut data).is_some());
                prop_assert!(l4_ok(&data));
                // The sink's segment starts where the client acked and acks the
                // client's payload.
                prop_assert_eq!(tcp_field(&data, 4), seg.ack);
                prop_assert_eq!(tcp_field(&data, 8), seg.seq.wrapping_add(payload));
                let echo = parse_tcp_echo(&data).unwrap();
                prop_assert_eq!(echo.flags, TCP_ACK | TCP_PSH);
                prop_assert_eq!(echo.payload_len, payload);
                prop_assert!(state.on_echo(&echo));
                // The same answer again (a duplicate) moves nothing.
                prop_assert!(!state.on_echo(&echo));
            }
        }
    }
}
