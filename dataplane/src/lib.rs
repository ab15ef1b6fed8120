//! Portico's dataplane: a poll-mode, run-to-completion packet pipeline.
//!
//! # The packet path
//!
//! This is the one pipeline diagram (DESIGN.md and [`stage`] refer to it).
//! One worker core, [`worker::Worker::poll`]:
//!
//! ```text
//! load the snapshot (once per poll); on a new generation:
//!   re-key per-service counters, apply static neighbours,
//!   announce new owned addresses (worker 0, gratuitous ARP)   stage::neighbour
//! for each port: rx_burst(port) -> batch (<= 64 frames)
//!   Pipeline::process, each stage over the whole batch:
//!     parse       PacketMeta: offsets, 5-tuple, hash          stage::parse
//!     local       ARP for the gateway, ICMP echo answered;    stage::local
//!                 ARP/echo for a host address, fragments and
//!                 other protocols to one -> Host
//!     ipv6        every IPv6 packet, whole: owner (Handoff),  stage::ipv6
//!                 flow, NAT, L2 (NDP-resolved), echo,
//!                 ICMPv6 errors translated
//!     steer       owned by another worker -> Handoff          stage::steer
//!     flow        conntrack lookup; new flows: classify,      stage::flow
//!                 select (affinity, Maglev), SNAT, insert;
//!                 track state; a miss to a host address -> Host
//!     icmp_error  ICMP errors about tracked flows translated  stage::icmp_error
//!                 (about the kernel's packets -> Host)
//!     nat         addresses, ports, TTL, checksums rewritten  stage::nat
//!     neighbour   (ends icmp_error and nat) next-hop MAC,     stage::neighbour
//!                 L2 rewrite; unresolved -> AwaitNeighbour
//!     icmp_reply  too_big (DF) / TTL expired -> ICMP error    stage::icmp_reply
//!                 to the sender (IPv6: Packet Too Big / Time
//!                 Exceeded), rate-limited -> Reply
//!   release held frames whose neighbour answered              stage::neighbour
//!   dispatch by verdict: Forward, Reply -> tx queue;          worker
//!     Handoff -> ring; AwaitNeighbour -> held;
//!     Host -> write to the port's TAP queue (full/down:       driver::hostpath
//!       dropped, counted; never waits);
//!     Drop(reason) -> counted, released; Consumed -> released
//!   tx_burst(port)
//! handoff rings -> the same, not steered again                worker
//! host path: <= 64 frames the kernel wrote per port's TAP     driver::hostpath
//!   queue -> driver buffer -> tx queue of that port
//! release held frames; send the ARP requests asked for        stage::neighbour
//! tx_burst; housekeeping (expiry); inspect mailbox; publish counters
//! ```
//!
//! Every packet ends in exactly one verdict; a drop is counted under one
//! [`DropReason`] at the stage that decided it.
//!
//! # Modules, in layers
//!
//! Each module uses only modules of the layers above it (checked by a test
//! on the source, `layering.rs`):
//!
//! 1. [`wire`] (zero-copy header views, checksums: RFC 1071, RFC 1624),
//!    [`flow`] (the 5-tuple, its stable hash and the keyed table hash), [`counters`] (the
//!    [`DropReason`] catalogue, per-core counters), [`clock`], [`maglev`]
//!    (consistent-hash lookup tables).
//! 2. [`packet`] (per-packet metadata and verdicts), [`snat`] (SNAT tuple
//!    allocation with TIME_WAIT-aware quarantine).
//! 3. [`snapshot`] (the immutable tables the control plane publishes and
//!    the lock-free publisher), [`neighbour`] (the shared ARP table),
//!    [`handoff`] (rings between workers), [`steering`] (flow ownership as
//!    facts a driver's classifier tests), [`driver`] (the port trait and
//!    the drivers: `mem` here; af_packet, AF_XDP and DPDK behind the same
//!    trait; the host path's TAPs, the same for every driver).
//! 4. [`conntrack`] (per-core flow table, TCP state machine, ClientIP
//!    affinity).
//! 5. [`stage`] (the pipeline stages, each over a whole batch),
//!    [`inspect`] (per-worker mailboxes through which the admin thread
//!    lists and looks up flows, once per poll loop, never per packet).
//! 6. [`worker`] (one core's poll loop: moves frames between the driver,
//!    the pipeline, the handoff rings and the tx queues).
//! 7. [`fuzz_harness`] (the stateful fuzz harness: a small gateway on the
//!    mem driver fed byte-encoded frame sequences; tests and fuzz targets
//!    only, never on a packet path).

pub mod clock;
pub mod conntrack;
pub mod counters;
pub mod driver;
pub mod flow;
pub mod fuzz_harness;
pub mod handoff;
pub mod inspect;
pub mod maglev;
pub mod neighbour;
pub mod packet;
pub mod snapshot;
pub mod snat;
pub mod stage;
pub mod steering;
pub mod wire;
pub mod worker;

#[cfg(test)]
mod layering;

pub use counters::DropReason;
pub use flow::{FlowKey, Proto};
pub use packet::{PacketMeta, PortId, Verdict};
