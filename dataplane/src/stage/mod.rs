//! The pipeline stages. Each stage works on a whole batch (VPP style): it
//! walks the packets still [`Verdict::Pending`](crate::packet::Verdict) and
//! either decides their verdict or leaves them for the next stage.
//!
//! ```text
//! parse -> local (ARP, ICMP echo) -> steer -> flow (conntrack lookup,
//! classify, select + create, track) -> icmp_error -> nat (rewrite, L2)
//! ```
//!
//! [`Pipeline`] holds a worker's state (conntrack, SNAT allocator, affinity,
//! counters) and per-batch scratch space, all allocated up front; running a
//! batch allocates nothing.

pub mod flow;
pub mod icmp_error;
pub mod local;
pub mod nat;
pub mod parse;
pub mod steer;

pub use steer::Steering;

use crate::conntrack::affinity::AffinityTable;
use crate::conntrack::{Conntrack, ConntrackConfig, ConntrackError, Dir, FlowId};
use crate::counters::{Counters, DropReason, ServiceCounters};
use crate::driver::Frame;
use crate::flow::FlowKey;
use crate::neighbour::{NeighbourTable, Neighbours, Resolution};
use crate::packet::{PacketMeta, PortId, Verdict, WorkerId};
use crate::snapshot::{BackendId, ServiceId, Snapshot};
use crate::snat::{SnatAllocator, SnatConfig, SnatError};
use std::net::Ipv4Addr;
use std::sync::Arc;

/// Largest batch the pipeline processes at once.
pub const MAX_BATCH: usize = 64;

/// Settings of one worker's pipeline.
#[derive(Clone, Debug)]
pub struct PipelineConfig {
    pub worker: WorkerId,
    pub workers: u8,
    pub conntrack: ConntrackConfig,
    pub snat: SnatConfig,
    /// Entries of the ClientIP affinity table.
    pub affinity_capacity: u32,
    /// Seed of the worker's SNAT port randomisation.
    pub seed: u64,
}

/// Why a pipeline could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error("conntrack: {0}")]
    Conntrack(#[from] ConntrackError),
    #[error("snat: {0}")]
    Snat(#[from] SnatError),
    #[error("worker {worker} out of range for {workers} workers")]
    WorkerOutOfRange { worker: WorkerId, workers: u8 },
}

/// Where a tracked packet goes: its new 4-tuple and its next hop, decided
/// when the packet found (or created) its flow.
///
/// The packet keeps its own copy, as a Linux skb keeps its conntrack
/// reference: if a later packet of the same batch removes or early-drops the
/// flow (and its slot is reused), this packet is still sent exactly as its
/// flow said when it was classified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NatPlan {
    /// The packet's 5-tuple after translation.
    pub key: FlowKey,
    pub out_port: PortId,
    pub next: L2Next,
    /// The flow's service and backend (per-service/backend counters).
    pub service: ServiceId,
    pub backend: BackendId,
}

/// The Ethernet destination of a translated packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L2Next {
    /// Known: the MAC the client's packets came from.
    Mac([u8; 6]),
    /// A next-hop address the neighbour table resolves.
    Neighbour(Ipv4Addr),
}

/// A packet's flow, once the flow stage found or created it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowSlot {
    None,
    /// Found in conntrack (existing flow), in this direction.
    Hit {
        id: FlowId,
        dir: Dir,
        plan: NatPlan,
    },
    /// Created by this packet (original direction).
    Created {
        id: FlowId,
        plan: NatPlan,
    },
}

impl FlowSlot {
    pub fn plan(&self) -> Option<&NatPlan> {
        match self {
            FlowSlot::None => None,
            FlowSlot::Hit { plan, .. } | FlowSlot::Created { plan, .. } => Some(plan),
        }
    }
}

/// Neighbour resolution state the NAT and ICMP-error stages share.
#[derive(Debug)]
pub struct NeighbourCtx<'a> {
    /// The table's generation loaded for this batch.
    pub table: &'a Neighbours<'a>,
    pub now_ms: u64,
    /// ARP requests to send: `(port, address)`; bounded by its capacity.
    pub arp_requests: &'a mut Vec<(PortId, Ipv4Addr)>,
    pub await_addr: &'a mut [Ipv4Addr],
}

impl NeighbourCtx<'_> {
    /// The MAC for `next` on `port`, or the verdict for the packet when it
    /// has none (held, or dropped).
    #[inline]
    pub fn resolve(&mut self, port: PortId, next: L2Next, i: usize) -> Result<[u8; 6], Verdict> {
        let addr = match next {
            L2Next::Mac(mac) => return Ok(mac),
            L2Next::Neighbour(addr) => addr,
        };
        let (result, probe) = match self.table.resolve(port, addr, self.now_ms) {
            Resolution::Known { mac, probe } => (Ok(mac), probe),
            Resolution::Pending { probe } => {
                if let Some(slot) = self.await_addr.get_mut(i) {
                    *slot = addr;
                }
                (Err(Verdict::AwaitNeighbour(port)), probe)
            }
            Resolution::Failed | Resolution::TableFull => {
                (Err(Verdict::Drop(DropReason::NeighbourUnresolved)), false)
            }
        };
        if probe && self.arp_requests.len() < self.arp_requests.capacity() {
            self.arp_requests.push((port, addr));
        }
        result
    }
}

/// One worker's pipeline state.
#[derive(Debug)]
pub struct Pipeline {
    pub ct: Conntrack,
    pub snat: SnatAllocator,
    pub affinity: AffinityTable,
    pub counters: Counters,
    /// Packets and bytes per service and backend.
    pub services: ServiceCounters,
    pub steering: Steering,
    /// The neighbour table shared by all workers.
    pub neighbours: Arc<NeighbourTable>,
    expiry_scan_per_poll: u32,
    metas: Box<[PacketMeta; MAX_BATCH]>,
    flows: Box<[FlowSlot; MAX_BATCH]>,
    /// For a packet with verdict `AwaitNeighbour`: the address it waits for.
    await_addr: Box<[Ipv4Addr; MAX_BATCH]>,
    /// ARP requests the last batch asked for: `(port, address)`.
    arp_requests: Vec<(PortId, Ipv4Addr)>,
}

impl Pipeline {
    pub fn new(
        config: &PipelineConfig,
        neighbours: Arc<NeighbourTable>,
    ) -> Result<Self, PipelineError> {
        if config.worker >= config.workers.max(1) {
            return Err(PipelineError::WorkerOutOfRange {
                worker: config.worker,
                workers: config.workers,
            });
        }
        Ok(Pipeline {
            ct: Conntrack::new(config.conntrack)?,
            snat: SnatAllocator::new(
                &config.snat,
                config.worker as usize,
                config.workers.max(1) as usize,
                config.seed,
            )?,
            affinity: AffinityTable::new(config.affinity_capacity),
            counters: Counters::default(),
            services: ServiceCounters::default(),
            steering: Steering {
                worker: config.worker,
                workers: config.workers.max(1),
                snat_ports: config.snat.port_range.clone(),
            },
            neighbours,
            expiry_scan_per_poll: config.conntrack.expiry_scan_per_poll,
            metas: Box::new([PacketMeta::empty(0); MAX_BATCH]),
            flows: Box::new([FlowSlot::None; MAX_BATCH]),
            await_addr: Box::new([Ipv4Addr::UNSPECIFIED; MAX_BATCH]),
            arp_requests: Vec::with_capacity(2 * MAX_BATCH),
        })
    }

    /// Verdicts of the last batch, one per frame.
    pub fn metas(&self) -> &[PacketMeta] {
        &self.metas[..]
    }

    /// The next-hop address packet `i` of the last batch waits for (valid
    /// when its verdict is `AwaitNeighbour`).
    pub fn awaited_neighbour(&self, i: usize) -> Ipv4Addr {
        self.await_addr
            .get(i)
            .copied()
            .unwrap_or(Ipv4Addr::UNSPECIFIED)
    }

    /// ARP requests `(port, address)` the batches since the last flush
    /// asked for; the worker sends and clears them.
    pub fn arp_requests_mut(&mut self) -> &mut Vec<(PortId, Ipv4Addr)> {
        &mut self.arp_requests
    }

    /// Run every stage over `frames` (at most [`MAX_BATCH`]) received on
    /// `in_port`. Frames are rewritten in place; the verdict of frame `i` is
    /// `self.metas()[i].verdict` afterwards.
    ///
    /// `may_hand_off` is false for frames another worker already handed to
    /// this one: they are processed here whatever the steering says, so a
    /// frame never bounces between workers that momentarily disagree (two
    /// snapshots in flight).
    pub fn process<F: Frame>(
        &mut self,
        snap: &Snapshot,
        in_port: PortId,
        frames: &mut [F],
        now_ms: u64,
        may_hand_off: bool,
    ) {
        let n = frames.len().min(MAX_BATCH);
        let frames = &mut frames[..n];
        let metas = &mut self.metas[..n];
        parse::parse_batch(frames, in_port, metas);
        if may_hand_off {
            // Frames from the driver; handed-over ones were counted as rx by
            // the worker that received them (and as handoff_in here).
            self.counters.rx_packets += n as u64;
            self.counters.rx_bytes += frames.iter().map(|f| f.data().len() as u64).sum::<u64>();
        }
        // One generation of the neighbour table for the whole batch.
        let neighbour_view = self.neighbours.load();
        local::run(
            snap,
            frames,
            metas,
            &mut self.counters,
            &neighbour_view,
            now_ms,
        );
        if may_hand_off {
            steer::run(&self.steering, snap, metas);
        }
        let flows = &mut self.flows[..n];
        flows.fill(FlowSlot::None);
        let mut ctx = flow::FlowCtx {
            ct: &mut self.ct,
            snat: &mut self.snat,
            affinity: &mut self.affinity,
            counters: &mut self.counters,
            services: &mut self.services,
            now_ms,
        };
        flow::run(&mut ctx, snap, frames, metas, flows);
        let neighbours = NeighbourCtx {
            table: &neighbour_view,
            now_ms,
            arp_requests: &mut self.arp_requests,
            await_addr: &mut self.await_addr[..n],
        };
        let mut neighbours = neighbours;
        icmp_error::run(&mut ctx, snap, frames, metas, &mut neighbours);
        nat::run(
            snap,
            frames,
            metas,
            flows,
            &mut neighbours,
            &mut self.services,
        );
    }

    /// Bounded housekeeping for one poll loop: examine
    /// `ConntrackConfig::expiry_scan_per_poll` flow slots for expiry
    /// (releasing their SNAT tuples), a few affinity entries and a few
    /// quarantine entries.
    pub fn housekeeping(&mut self, now_ms: u64) {
        let snat = &mut self.snat;
        let services = &mut self.services;
        let max_scan = self.expiry_scan_per_poll;
        let expired = self.ct.expire(now_ms, max_scan, |flow| {
            services.flow_closed(flow.service, flow.backend);
            if flow.snat() {
                snat.release(flow.reply(), now_ms);
            }
        });
        self.counters.flows_expired += u64::from(expired);
        self.affinity.expire(now_ms, max_scan as usize / 4 + 1);
        self.snat.expire(now_ms, 8);
    }
}
