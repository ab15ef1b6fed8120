//! Portico's dataplane: a poll-mode, run-to-completion packet pipeline.
//!
//! ```text
//! rx_burst(port) -> batch(<=64) -> parse -> conntrack/classify -> select -> nat
//!               -> tx_burst(port)      (drops counted by DropReason at each stage)
//! ```
//!
//! * [`driver`]: the port trait and the drivers (`mem` here; af_packet, AF_XDP
//!   and DPDK plug in behind the same trait).
//! * [`wire`]: zero-copy header views and checksums (RFC 1071, RFC 1624).
//! * [`stage`]: the pipeline stages, each working on a whole batch.
//! * [`conntrack`]: per-core flow table, TCP state machine, ClientIP affinity.
//! * [`snat`]: SNAT tuple allocation with TIME_WAIT-aware quarantine.
//! * [`maglev`]: consistent-hash lookup tables.
//! * [`snapshot`]: the immutable tables the control plane publishes, and the
//!   lock-free publisher the workers load once per batch.
//! * [`worker`]: one core's poll loop tying it together.
//! * [`inspect`]: per-worker mailboxes through which the admin thread lists
//!   flows and looks them up, once per poll loop, never per packet.

pub mod clock;
pub mod conntrack;
pub mod counters;
pub mod driver;
pub mod flow;
pub mod handoff;
pub mod inspect;
pub mod maglev;
pub mod neighbour;
pub mod packet;
pub mod snapshot;
pub mod snat;
pub mod stage;
pub mod wire;
pub mod worker;

pub use counters::DropReason;
pub use flow::{FlowKey, Proto};
pub use packet::{PacketMeta, PortId, Verdict};
