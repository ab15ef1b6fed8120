//! The pipeline stages. Each stage works on a whole batch (VPP style): it
//! walks the packets still [`Verdict::Pending`](crate::packet::Verdict) and
//! either decides their verdict or leaves them for the next stage. Their
//! order, and what the worker does around them, is the pipeline diagram in
//! [the crate docs](crate#the-packet-path).
//!
//! One file per stage: [`parse`], [`local`], [`ipv6`] (the IPv6 packets,
//! whole, through the same [`flow`] stage as IPv4, over [`family`]),
//! [`steer`], [`flow`],
//! [`icmp_error`], [`nat`] (with [`mss_clamp`]), [`neighbour`] (next-hop resolution, L2, frames
//! held for ARP, ARP out), [`ndp`] (NDP in and out for IPv6 next hops).
//!
//! [`Pipeline`] holds a worker's state (conntrack, SNAT allocator, affinity,
//! counters, neighbour-stage state) and per-batch scratch space, all
//! allocated up front; running a batch allocates nothing.

pub mod family;
pub mod flow;
pub mod icmp_error;
pub mod icmp_reply;
pub mod ipv6;
pub mod local;
pub mod mss_clamp;
pub mod nat;
pub mod ndp;
pub mod neighbour;
pub mod parse;
pub mod source_limit;
pub mod steer;
pub mod synproxy;

pub use neighbour::{HeldFrames, NeighbourCtx};
pub use steer::Steering;

use crate::conntrack::affinity::AffinityTable;
use crate::conntrack::{Conntrack, ConntrackConfig, ConntrackError, Dir, FlowId};
use crate::counters::{Counters, ServiceCounters};
use crate::driver::Frame;
use crate::flow::{FlowKeyOf, IpFamily, TableHasher};
use crate::neighbour::NeighbourTable;
use crate::packet::{PacketMeta, PortId, WorkerId};
use crate::snapshot::{BackendId, ServiceId, Snapshot};
use crate::snat::{SnatAllocator, SnatConfig, SnatError};
use neighbour::NeighbourStage;
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
    /// Seed of the worker's SNAT port randomisation (mixed with a random
    /// per-process value by the gateway).
    pub seed: u64,
    /// The keyed hash of the per-worker tables: the same for every worker
    /// of a process, random per process in a gateway.
    pub table_hasher: TableHasher,
    /// New flows per second one client address may open on this worker
    /// (0: no limit; see [`source_limit`]).
    pub new_flows_per_source_per_s: u32,
    /// Leading bits of an IPv6 source that the per-source limit counts as
    /// one source (64: a /64; see [`source_limit`]).
    pub source_prefix_len_v6: u8,
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
pub struct NatPlan<A: IpFamily = Ipv4Addr> {
    /// The packet's 5-tuple after translation.
    pub key: FlowKeyOf<A>,
    pub out_port: PortId,
    pub next: L2Next<A>,
    /// The flow's service and backend (per-service/backend counters).
    pub service: ServiceId,
    pub backend: BackendId,
}

/// The Ethernet destination of a translated packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L2Next<A = Ipv4Addr> {
    /// Known: the MAC the client's packets came from.
    Mac([u8; 6]),
    /// A next-hop address the neighbour table resolves.
    Neighbour(A),
}

/// A packet's flow, once the flow stage found or created it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowSlot<A: IpFamily = Ipv4Addr> {
    None,
    /// Found in conntrack (existing flow), in this direction.
    Hit {
        id: FlowId,
        dir: Dir,
        plan: NatPlan<A>,
    },
    /// Created by this packet (original direction).
    Created {
        id: FlowId,
        plan: NatPlan<A>,
    },
}

impl<A: IpFamily> FlowSlot<A> {
    pub fn plan(&self) -> Option<&NatPlan<A>> {
        match self {
            FlowSlot::None => None,
            FlowSlot::Hit { plan, .. } | FlowSlot::Created { plan, .. } => Some(plan),
        }
    }
}

/// Where frames leave the pipeline outside a batch's verdicts (held frames
/// released, ARP requests and announcements): the worker's tx queues over
/// its driver's buffers.
pub trait Egress<F> {
    /// A driver buffer holding a copy of `bytes`, or `None` when the pool is
    /// empty.
    fn frame_from(&mut self, bytes: &[u8]) -> Option<F>;
    /// Queue `frame` for tx on `port`. False: it could not be (no such
    /// port, ring full), was counted in `counters` and released.
    fn send(&mut self, port: PortId, frame: F, counters: &mut Counters) -> bool;
    /// Give a frame the pipeline dropped back to the driver.
    fn release(&mut self, frame: F);
}

/// One worker's pipeline: its flow state (conntrack, SNAT allocator,
/// affinity), its counters, its steering and neighbour-stage state, and
/// per-batch scratch space, all allocated up front. Fields are private:
/// the worker drives it through [`Pipeline::process`] and the neighbour
/// stage's methods, readers use the accessors.
#[derive(Debug)]
pub struct Pipeline {
    ct: Conntrack,
    snat: SnatAllocator,
    affinity: AffinityTable,
    icmp_errors: icmp_reply::IcmpErrorLimiter,
    counters: Counters,
    /// Packets and bytes per service and backend.
    services: ServiceCounters,
    steering: Steering,
    neighbour: NeighbourStage,
    /// The SYN proxy's cookie key (random per pipeline) and generated frames.
    cookies: synproxy::CookieSecret,
    outbox: synproxy::Outbox,
    source_limit: source_limit::SourceLimit,
    expiry_scan_per_poll: u32,
    /// The IPv6 flow tables, allocated when a snapshot first has IPv6
    /// listeners (see [`ipv6`]).
    v6: Option<Box<ipv6::Ipv6Tables>>,
    /// What the IPv6 tables are built from.
    config: PipelineConfig,
    metas: Box<[PacketMeta; MAX_BATCH]>,
    flows: Box<[FlowSlot; MAX_BATCH]>,
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
            ct: Conntrack::new(config.conntrack, config.table_hasher)?,
            snat: SnatAllocator::new(
                &config.snat,
                config.worker as usize,
                config.workers.max(1) as usize,
                config.seed,
                config.table_hasher,
            )?,
            affinity: AffinityTable::new(config.affinity_capacity, config.table_hasher),
            icmp_errors: icmp_reply::IcmpErrorLimiter::default(),
            counters: Counters::default(),
            services: ServiceCounters::default(),
            steering: Steering {
                worker: config.worker,
                workers: config.workers.max(1),
                snat_ports: config.snat.port_range.clone(),
            },
            neighbour: NeighbourStage::new(neighbours),
            cookies: synproxy::CookieSecret::random(),
            outbox: synproxy::Outbox::default(),
            source_limit: source_limit::SourceLimit::new(
                config.new_flows_per_source_per_s,
                config.source_prefix_len_v6,
            ),
            expiry_scan_per_poll: config.conntrack.expiry_scan_per_poll,
            v6: None,
            config: config.clone(),
            metas: Box::new([PacketMeta::empty(0); MAX_BATCH]),
            flows: Box::new([FlowSlot::None; MAX_BATCH]),
        })
    }

    /// Verdicts of the last batch, one per frame.
    pub fn metas(&self) -> &[PacketMeta] {
        &self.metas[..]
    }

    /// The next-hop address packet `i` of the last batch waits for (valid
    /// when its verdict is `AwaitNeighbour`).
    pub fn awaited_neighbour(&self, i: usize) -> std::net::IpAddr {
        self.neighbour.awaited(i)
    }

    pub fn conntrack(&self) -> &Conntrack {
        &self.ct
    }

    pub fn snat(&self) -> &SnatAllocator {
        &self.snat
    }

    pub fn affinity(&self) -> &AffinityTable {
        &self.affinity
    }

    /// The ClientIP affinity table, to seed pins (`portico simulate`).
    pub fn affinity_mut(&mut self) -> &mut AffinityTable {
        &mut self.affinity
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The counters, for what the worker counts around the pipeline (rx of
    /// handed-over frames, tx, handoff, drops of the verdicts).
    #[inline]
    pub fn counters_mut(&mut self) -> &mut Counters {
        &mut self.counters
    }

    /// Packets, bytes and flows per service and backend.
    pub fn services(&self) -> &ServiceCounters {
        &self.services
    }

    /// The per-service counters, for the worker to size and zero them when
    /// a snapshot reuses ids.
    pub fn services_mut(&mut self) -> &mut ServiceCounters {
        &mut self.services
    }

    pub fn steering(&self) -> &Steering {
        &self.steering
    }

    /// The IPv6 flow tables, once a snapshot had IPv6 listeners.
    pub fn ipv6(&self) -> Option<&ipv6::Ipv6Tables> {
        self.v6.as_deref()
    }

    /// The IPv6 flow tables, to seed affinity pins (`portico simulate`).
    pub fn ipv6_mut(&mut self) -> Option<&mut ipv6::Ipv6Tables> {
        self.v6.as_deref_mut()
    }

    /// The flow and SNAT gauges of both families' tables (the IPv6 part
    /// also on its own).
    pub fn gauges(&self) -> crate::counters::Gauges {
        let mut g = crate::counters::Gauges {
            live_flows: self.ct.len() as u64,
            snat_in_use: self.snat.stats().in_use,
            live_flows_v6: 0,
            snat_in_use_v6: 0,
            flows_by_state: self.ct.count_by_state().map(|(_, n)| u64::from(n)),
        };
        if let Some(v6) = self.v6.as_deref() {
            g.live_flows_v6 = v6.ct.len() as u64;
            g.snat_in_use_v6 = v6.snat.as_ref().map_or(0, |s| s.stats().in_use);
            g.live_flows += g.live_flows_v6;
            g.snat_in_use += g.snat_in_use_v6;
            for (n, (_, m)) in g.flows_by_state.iter_mut().zip(v6.ct.count_by_state()) {
                *n += u64::from(m);
            }
        }
        g
    }

    /// The neighbour table shared by all workers.
    pub fn neighbours(&self) -> &NeighbourTable {
        self.neighbour.table()
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
        parse::parse_batch(frames, in_port, metas, self.ct.hasher());
        if may_hand_off {
            // Frames from the driver; handed-over ones were counted as rx by
            // the worker that received them (and as handoff_in here).
            self.counters.rx_packets += n as u64;
            self.counters.rx_bytes += frames.iter().map(|f| f.data().len() as u64).sum::<u64>();
        }
        // One generation of the neighbour table for the whole batch.
        let mut neighbours = self.neighbour.batch(now_ms, n);
        let any_v6 = local::run(snap, frames, metas, &mut self.counters, &neighbours);
        if any_v6 {
            neighbours = ipv6::run(
                self.v6.as_deref_mut(),
                snap,
                frames,
                metas,
                &mut ipv6::Ctx6 {
                    counters: &mut self.counters,
                    services: &mut self.services,
                    steering: &self.steering,
                    cookies: &self.cookies,
                    outbox: &mut self.outbox,
                    source_limit: &mut self.source_limit,
                    may_hand_off,
                    now_ms,
                },
                neighbours,
            );
        }
        if may_hand_off {
            steer::run(&self.steering, snap, metas, &mut self.counters);
        }
        let flows = &mut self.flows[..n];
        flows.fill(FlowSlot::None);
        let mut ctx = flow::FlowCtx {
            ct: &mut self.ct,
            snat: Some(&mut self.snat),
            affinity: &mut self.affinity,
            counters: &mut self.counters,
            services: &mut self.services,
            cookies: &self.cookies,
            outbox: &mut self.outbox,
            source_limit: &mut self.source_limit,
            now_ms,
            workers: self.steering.workers,
        };
        flow::run(&mut ctx, snap, frames, metas, flows);
        icmp_error::run(&mut ctx, snap, frames, metas, &mut neighbours);
        nat::run(
            snap,
            frames,
            metas,
            flows,
            &mut neighbours,
            &mut self.services,
            &mut self.counters,
        );
        icmp_reply::run(
            snap,
            frames,
            metas,
            &mut self.counters,
            &mut self.icmp_errors,
            now_ms,
        );
    }

    /// Hold frame `i` of the last batch, whose verdict is
    /// `AwaitNeighbour(port)`, in `held` until its neighbour answers (see
    /// [`neighbour`]). `Err(frame)`: the queue is full; the drop is counted
    /// and the caller gives the frame back to its driver.
    #[inline]
    pub fn hold<F>(
        &mut self,
        held: &mut HeldFrames<F>,
        i: usize,
        port: PortId,
        frame: F,
        now_ms: u64,
    ) -> Result<(), F> {
        self.neighbour
            .hold(held, i, port, frame, now_ms, &mut self.counters)
    }

    /// Send the frames in `held` whose neighbour answered, drop the ones
    /// whose time is up (see [`neighbour`]).
    #[inline]
    pub fn release_held<F: Frame>(
        &mut self,
        held: &mut HeldFrames<F>,
        snap: &Snapshot,
        now_ms: u64,
        out: &mut impl Egress<F>,
    ) {
        if held.is_empty() {
            return;
        }
        self.neighbour
            .release(held, snap, now_ms, &mut self.counters, out);
    }

    /// Send the ARP requests the batches since the last call asked for, and
    /// the frames the SYN proxy generated (window updates to clients).
    #[inline]
    pub fn send_arp_requests<F>(&mut self, snap: &Snapshot, out: &mut impl Egress<F>) {
        self.neighbour.send_requests(snap, &mut self.counters, out);
        if !self.outbox.is_empty() {
            self.outbox.send(out, &mut self.counters);
        }
    }

    /// A snapshot generation not seen before: apply its static neighbours
    /// and (worker 0) announce owned addresses not announced yet. Cold path.
    pub fn on_snapshot<F>(&mut self, snap: &Snapshot, out: &mut impl Egress<F>) {
        let announce = self.steering.worker == 0;
        self.neighbour
            .on_snapshot(snap, announce, &mut self.counters, out);
        self.load_ipv6(snap);
    }

    /// Allocate the IPv6 tables when `snap` is the first snapshot with
    /// IPv6 listeners (cold: allocates the IPv6 conntrack, with the IPv4
    /// flow capacity, and an SNAT allocator over the snapshot's IPv6 SNAT
    /// addresses, which are fixed from then on as the IPv4 ones are from
    /// the configuration). A table
    /// that cannot be allocated leaves IPv6 flows dropped (`not_owned`,
    /// `no_listener`), IPv4 untouched.
    pub fn load_ipv6(&mut self, snap: &Snapshot) {
        if self.v6.is_none() && !snap.listeners6.is_empty() {
            let mut snat_addrs: Vec<std::net::Ipv6Addr> = snap
                .owned6
                .iter()
                .filter(|(_, o)| o.snat)
                .map(|(a, _)| *a)
                .collect();
            snat_addrs.sort_unstable();
            let snat = crate::snat::SnatConfig {
                addrs: snat_addrs,
                port_range: self.config.snat.port_range.clone(),
                quarantine_ms: self.config.snat.quarantine_ms,
                quarantine_capacity: self.config.snat.quarantine_capacity,
                probe_limit: self.config.snat.probe_limit,
            };
            self.v6 = ipv6::Ipv6Tables::new(
                self.config.conntrack,
                &snat,
                (self.config.worker, self.config.workers, self.config.seed),
                self.config.affinity_capacity,
                self.config.table_hasher,
            )
            .ok()
            .map(Box::new);
        }
    }

    /// Once per poll without a new snapshot: re-apply the static neighbours
    /// if the neighbour table published a new generation.
    #[inline]
    pub fn check_neighbour_generation(&mut self, snap: &Snapshot) {
        self.neighbour.check_generation(snap);
    }

    /// Bounded housekeeping, one slice (the worker runs one after every
    /// idle poll and once per millisecond while busy): examine
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
        if let Some(v6) = self.v6.as_mut() {
            let expired = v6.housekeeping(now_ms, max_scan, &mut self.services);
            self.counters.flows_expired += u64::from(expired);
        }
    }
}
