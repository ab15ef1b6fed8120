//! The packet generator: its frame format, echo transform and statistics,
//! and the send and sink runs the `pktgen` binary drives over the af_packet
//! driver.
//!
//! Each file holds one role and states its invariants:
//! * `frame`: the frame format (Ethernet + IPv4 + UDP/TCP carrying a
//!   [`Probe`]), flow numbering, building, stamping and parsing.
//! * `echo`: the sink's in-place answer to a probe.
//! * `stream`: TCP "established-like" streams, the sender's per-flow state.
//! * `spoof`: bare SYNs from random sources in a subnet (a SYN flood).
//! * `stats`: latency histogram, percentiles, loss and reordering.
//! * `session`: what a run shares (its af_packet port, bounds, errors).
//! * `send`, `sink`: the two runs; `report`: their progress lines and
//!   summaries.

mod echo;
mod frame;
mod report;
mod send;
mod session;
mod sink;
mod spoof;
mod stats;
mod stream;

pub use echo::echo_in_place;
pub use frame::{
    ECHO_MAGIC, FLOW_PORT_BASE, FLOW_PORTS_PER_ADDR, FrameSpec, KIND_ECHO, KIND_PROBE, MAX_FLOWS,
    MAX_FRAME_BYTES, PROBE_LEN, PROBE_MAGIC, PktgenError, Probe, TrafficProto, parse_mac,
    parse_probe, stamp,
};
pub use send::{SendConfig, send};
pub use session::SessionError;
pub use sink::{SinkConfig, sink};
pub use spoof::{SYN_FLOOD_FRAME_BYTES, SpoofRange, Spoofer, stamp_spoofed, syn_template};
pub use stats::{Histogram, Percentiles, SeqTracker, ratio};
pub use stream::{
    StreamFlow, StreamSegment, StreamState, TcpEcho, parse_tcp_echo, stamp_stream, stream_isn,
};
