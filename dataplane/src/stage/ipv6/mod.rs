//! Forwarding of IPv6 (issue 17): the stages after parse for packets of
//! [`Family::V6`], run as one pass over the batch before the IPv4 stages
//! (which then see no pending IPv6 packet).
//!
//! The flow logic is the flow stage's ([`super::flow`], generic over the
//! family) run over the IPv6 instances of the family-generic tables
//! ([`Ipv6Tables`]): conntrack lookup by the parse stage's hash,
//! classification of misses by the IPv6 listeners and owned addresses of
//! the snapshot, ClientIP affinity then Maglev over the same stable hash
//! (the IPv6 key's fixed 40-byte layout,
//! [`crate::flow::FlowKeyOf::stable_hash`]), SNAT from the snapshot's
//! IPv6 SNAT addresses with the worker's port slice and quarantine, TCP
//! state and window tracking, and every defence of IPv4: the SYN proxy,
//! RSTs for the `reset` backend-gone policy, challenge ACKs (RFC 5961),
//! client-port remapping without SNAT, and the per-source new-flow limit
//! (by /64 by default). Then the NAT rewrite
//! ([`nat`]: no header checksum, incremental TCP/UDP checksums over the
//! IPv6 pseudo-header, hop limit decremented) and the Ethernet header
//! from the IPv6 neighbour table, resolved by NDP (a packet waits,
//! translated, for its next hop as with ARP: [`super::neighbour`],
//! [`super::ndp`]). Echo requests to
//! owned IPv6 addresses are answered ([`reply`]); packets whose hop limit
//! runs out or that exceed the egress MTU are dropped and answered with
//! ICMPv6 Time Exceeded / Packet Too Big by [`super::icmp_reply`]
//! (IPv6 routers never fragment, RFC 8200 §5). ICMPv6 errors about a
//! translated flow are translated back ([`icmp_error`]).
//!
//! Services are single-family (no NAT46/64), so an IPv6 flow never meets
//! an IPv4 table.
//!
//! Tables are allocated when a snapshot first has IPv6 listeners (cold:
//! [`super::Pipeline::on_snapshot`]), with the IPv4 flow capacity: a
//! gateway without IPv6 services pays nothing. An IPv6 flow costs 128 B of
//! record (two cache lines; IPv4: 64 B) + 64 B of TCP tracking + 4 B of
//! free list + 32 B of index at capacity 2^20. With several workers an
//! IPv6 packet is handed to the worker owning its flow (SNAT replies by
//! port slice, the rest by client address, `client_hash6`); af_packet's
//! steering program computes the same owner, so a handoff is the exception.

pub mod icmp_error;
pub mod nat;
pub mod reply;

use super::flow::{self, FlowCtx};
use super::neighbour::NeighbourCtx;
use super::source_limit::SourceLimit;
use super::synproxy::{CookieSecret, Outbox};
use super::{FlowSlot, L2Next, MAX_BATCH, NatPlan, Steering};
use crate::conntrack::affinity::AffinityTable;
use crate::conntrack::{Conntrack, ConntrackConfig, ConntrackError};
use crate::counters::{Counters, DropReason, ServiceCounters};
use crate::driver::Frame;
use crate::flow::TableHasher;
use crate::packet::{Family, PacketKind, PacketMeta, Verdict, WorkerId};
use crate::snapshot::Snapshot;
use crate::snat::{SnatAllocator, SnatConfig, SnatError};
use std::net::Ipv6Addr;

/// Why the IPv6 tables could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum Ipv6Error {
    #[error("IPv6 conntrack: {0}")]
    Conntrack(#[from] ConntrackError),
    #[error("IPv6 SNAT: {0}")]
    Snat(#[from] SnatError),
}

/// A worker's IPv6 flow state: the IPv6 instances of the flow tables and
/// (the neighbours are the shared table's, [`crate::neighbour`]).
#[derive(Debug)]
pub struct Ipv6Tables {
    pub ct: Conntrack<Ipv6Addr>,
    /// `None` while the snapshot has no IPv6 SNAT address.
    pub snat: Option<SnatAllocator<Ipv6Addr>>,
    pub affinity: AffinityTable<Ipv6Addr>,
    /// The flow stage's per-batch slots of the IPv6 packets.
    flows: Box<[FlowSlot<Ipv6Addr>; MAX_BATCH]>,
}

impl Ipv6Tables {
    /// Tables of `conntrack`'s capacity; SNAT from `snat.addrs` (none: no
    /// allocator) with the IPv4 allocator's range, slice and quarantine.
    pub fn new(
        conntrack: ConntrackConfig,
        snat: &SnatConfig<Ipv6Addr>,
        (worker, workers, seed): (WorkerId, u8, u64),
        affinity_capacity: u32,
        hasher: TableHasher,
    ) -> Result<Self, Ipv6Error> {
        let snat = if snat.addrs.is_empty() {
            None
        } else {
            Some(SnatAllocator::new(
                snat,
                usize::from(worker),
                usize::from(workers.max(1)),
                seed ^ 0x6970_7636, // "ipv6": another sequence than IPv4's
                hasher,
            )?)
        };
        Ok(Ipv6Tables {
            ct: Conntrack::new(conntrack, hasher)?,
            snat,
            affinity: AffinityTable::new(affinity_capacity, hasher),
            flows: Box::new([FlowSlot::None; MAX_BATCH]),
        })
    }

    /// Bounded housekeeping, as the IPv4 tables'.
    pub fn housekeeping(
        &mut self,
        now_ms: u64,
        max_scan: u32,
        services: &mut ServiceCounters,
    ) -> u32 {
        let snat = &mut self.snat;
        let expired = self.ct.expire(now_ms, max_scan, |flow| {
            services.flow_closed(flow.service, flow.backend);
            if flow.snat()
                && let Some(s) = snat.as_mut()
            {
                s.release(flow.reply(), now_ms);
            }
        });
        self.affinity.expire(now_ms, max_scan as usize / 4 + 1);
        if let Some(s) = self.snat.as_mut() {
            s.expire(now_ms, 8);
        }
        expired
    }
}

/// Where a tracked IPv6 packet goes.
pub type Plan6 = NatPlan<Ipv6Addr>;

/// What the IPv6 pass needs of the pipeline besides its tables.
#[derive(Debug)]
pub struct Ctx6<'a> {
    pub counters: &'a mut Counters,
    pub services: &'a mut ServiceCounters,
    pub steering: &'a Steering,
    /// The SYN proxy's cookie key and outbox, the per-source limit: the
    /// pipeline's, shared by both families.
    pub cookies: &'a CookieSecret,
    pub outbox: &'a mut Outbox,
    pub source_limit: &'a mut SourceLimit,
    pub may_hand_off: bool,
    pub now_ms: u64,
}

/// Run the IPv6 stages over every pending IPv6 packet of the batch: each
/// ends with a verdict. `tables` is `None` until a snapshot had IPv6
/// listeners (then only echo is answered).
///
/// Never inlined into [`super::Pipeline::process`], and the batch's
/// neighbour context is moved in and back out rather than lent: a context
/// whose address reached an out-of-line call could no longer live in
/// registers in the IPv4 stages, which would pay for it per packet (an
/// IPv4 packet's instruction count does not depend on the IPv6 pass).
#[inline(never)]
pub fn run<'n, F: Frame>(
    tables: Option<&mut Ipv6Tables>,
    snap: &Snapshot,
    frames: &mut [F],
    metas: &mut [PacketMeta],
    ctx: &mut Ctx6<'_>,
    mut neighbours: NeighbourCtx<'n>,
) -> NeighbourCtx<'n> {
    pass(tables, snap, frames, metas, ctx, &mut neighbours);
    neighbours
}

/// [`run`]'s body.
fn pass<F: Frame>(
    tables: Option<&mut Ipv6Tables>,
    snap: &Snapshot,
    frames: &mut [F],
    metas: &mut [PacketMeta],
    ctx: &mut Ctx6<'_>,
    neighbours: &mut NeighbourCtx<'_>,
) {
    let mut tables = tables;
    let mut flows_pending = false;
    for (i, (frame, meta)) in frames
        .iter_mut()
        .zip(metas.iter_mut())
        .take(MAX_BATCH)
        .enumerate()
    {
        if meta.family != Family::V6 || !meta.is_pending() {
            continue;
        }
        match meta.kind {
            PacketKind::IcmpEcho => reply::answer_echo(snap, frame.data_mut(), meta),
            PacketKind::Tcp | PacketKind::Udp => match tables.as_deref_mut() {
                Some(_) => match hand_off(ctx, snap, meta) {
                    Some(owner) => meta.verdict = Verdict::Handoff(owner),
                    None => flows_pending = true,
                },
                None => classify_without_flows(snap, meta),
            },
            PacketKind::IcmpError => match tables.as_deref() {
                Some(t) => icmp_error::translate(
                    t,
                    snap,
                    (frame.data_mut(), meta, i),
                    ctx.counters,
                    neighbours,
                    ctx.now_ms,
                ),
                None => meta.drop(DropReason::IcmpErrorNoFlow),
            },
            // Neighbour Discovery is the NDP stage's (`stage::ndp`).
            PacketKind::Ndp | PacketKind::Arp => meta.drop(DropReason::Ipv6Unsupported),
        }
        if meta.verdict == Verdict::Reply {
            ctx.counters.local_replies += 1;
        }
    }
    let Some(t) = tables.filter(|_| flows_pending) else {
        return;
    };
    let n = frames.len().min(MAX_BATCH);
    let (frames, metas) = (&mut frames[..n], &mut metas[..n]);
    let flows = &mut t.flows[..n];
    flows.fill(FlowSlot::None);
    flow::run(
        &mut FlowCtx {
            ct: &mut t.ct,
            snat: t.snat.as_mut(),
            affinity: &mut t.affinity,
            counters: ctx.counters,
            services: ctx.services,
            cookies: ctx.cookies,
            outbox: ctx.outbox,
            source_limit: ctx.source_limit,
            now_ms: ctx.now_ms,
            workers: ctx.steering.workers,
        },
        snap,
        frames,
        metas,
        flows,
    );
    for (i, ((frame, meta), slot)) in frames
        .iter_mut()
        .zip(metas.iter_mut())
        .zip(flows.iter())
        .enumerate()
    {
        if meta.family != Family::V6 || !meta.is_pending() {
            continue;
        }
        match slot.plan() {
            Some(plan) => forward(neighbours, ctx, snap, (frame, meta, i), plan),
            // The flow stage leaves no tracked packet without a verdict
            // or a plan.
            None => meta.drop(DropReason::Internal),
        }
    }
}

/// The worker owning an IPv6 packet's flow, when it is not this one:
/// replies to an IPv6 SNAT tuple by the SNAT port's slice, everything else
/// by the client address (the source; the destination of a reply without
/// SNAT is the client too, but such a reply's source is the backend: it is
/// owned by the backend address's hash, which only holds with one worker
/// or SNAT, see the module docs).
fn hand_off(ctx: &mut Ctx6<'_>, snap: &Snapshot, meta: &PacketMeta) -> Option<WorkerId> {
    let s = ctx.steering;
    if !ctx.may_hand_off || s.workers <= 1 {
        return None;
    }
    let (owner, by_slice) = s.owner6_by(&meta.key6, snap);
    if owner == s.worker {
        return None;
    }
    if by_slice {
        ctx.counters.handoff_snat_reply += 1;
    } else {
        ctx.counters.handoff_client += 1;
    }
    Some(owner)
}

/// Without IPv6 tables no flow exists: what the address is decides the
/// drop (or the host path).
fn classify_without_flows(snap: &Snapshot, meta: &mut PacketMeta) {
    let reason = match snap.owned6(meta.key6.dst_ip) {
        Some(o) if o.host => {
            meta.verdict = Verdict::Host;
            return;
        }
        Some(_) => DropReason::NoListener,
        None => DropReason::NotOwned,
    };
    meta.drop(reason);
}

/// Rewrite packet `i` per `plan` and give it its Ethernet header and
/// verdict: the next hop's MAC from the neighbour table, or the packet
/// waits, translated, for its NDP resolution (`AwaitNeighbour`, as for
/// ARP; see [`super::neighbour`]).
fn forward<F: Frame>(
    neighbours: &mut NeighbourCtx<'_>,
    ctx: &mut Ctx6<'_>,
    snap: &Snapshot,
    (frame, meta, i): (&mut F, &mut PacketMeta, usize),
    plan: &Plan6,
) {
    let Some(port) = snap.ports.get(usize::from(plan.out_port)) else {
        return meta.drop(DropReason::NoRoute);
    };
    if let Err(reason) = nat::rewrite(frame.data_mut(), meta, &meta.key6, &plan.key) {
        return meta.drop(reason);
    }
    let buf = frame.data_mut();
    meta.verdict = match plan.next {
        L2Next::Mac(mac) => {
            super::neighbour::set_l2(buf, port.mac, mac);
            Verdict::Forward(plan.out_port)
        }
        L2Next::Neighbour(addr) => neighbours.forward6(buf, plan.out_port, port.mac, addr, i),
    };
    if !matches!(meta.verdict, Verdict::Drop(_)) {
        ctx.services.count(
            plan.service,
            plan.backend,
            u64::from(meta.l3_end - meta.l3_offset),
        );
    }
}
