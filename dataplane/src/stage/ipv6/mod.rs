//! Forwarding of IPv6 (issue 17): the stages after parse for packets of
//! [`Family::V6`], run as one pass over the batch before the IPv4 stages
//! (which then see no pending IPv6 packet).
//!
//! The flow logic is the IPv4 flow stage's ([`super::flow`]) over the
//! IPv6 instances of the family-generic tables ([`Ipv6Tables`]):
//! conntrack lookup by the parse stage's hash, classification of misses
//! by the IPv6 listeners and owned addresses of the snapshot, ClientIP
//! affinity then Maglev over the same stable hash (the IPv6 key's fixed
//! 40-byte layout, [`crate::flow::FlowKeyOf::stable_hash`]), SNAT from
//! the snapshot's IPv6 SNAT addresses with the worker's port slice and
//! quarantine, TCP state and window tracking. Then the NAT rewrite
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
//! an IPv4 table. Not (yet) for IPv6: the SYN proxy (SYN-proxied services
//! forward IPv6 SYNs to a backend as with `syn_proxy = off`), RSTs for the
//! `reset` backend-gone policy (dropped instead), challenge ACKs (an
//! in-window inexact RST is dropped), client-port remapping without SNAT
//! (a clash is `tuple_in_use`), and the per-source new-flow limit.
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

use super::flow::{egress_check, is_pickup, is_syn, refused, segment_info, select_backend};
use super::neighbour::NeighbourCtx;
use super::{MAX_BATCH, Steering};
use crate::conntrack::affinity::AffinityTable;
use crate::conntrack::window::WindowVerdict;
use crate::conntrack::{
    Conntrack, ConntrackConfig, ConntrackError, Dir, Flow, FlowId, FlowInit, TcpState,
};
use crate::counters::{Counters, DropReason, ServiceCounters};
use crate::driver::Frame;
use crate::flow::{FlowKey6, Proto, TableHasher};
use crate::packet::{Family, PacketKind, PacketMeta, PortId, Verdict, WorkerId};
use crate::snapshot::Snapshot;
use crate::snat::{SnatAllocator, SnatConfig, SnatError};
use crate::wire::tcp::flags as tcp_flags;
use crate::wire::{ethernet, ipv6 as wire6};
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6};

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
        })
    }

    /// Remove a flow and give its SNAT tuple back.
    fn remove_flow(&mut self, id: FlowId, services: &mut ServiceCounters, now_ms: u64) {
        if let Some(flow) = self.ct.remove(id) {
            self.release(&flow, services, now_ms);
        }
    }

    fn release(&mut self, flow: &Flow<Ipv6Addr>, services: &mut ServiceCounters, now_ms: u64) {
        services.flow_closed(flow.service, flow.backend);
        if flow.snat()
            && let Some(snat) = self.snat.as_mut()
        {
            snat.release(flow.reply(), now_ms);
        }
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

/// Where a tracked IPv6 packet goes (the IPv6 `NatPlan`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan6 {
    pub key: FlowKey6,
    pub out_port: PortId,
    /// The destination MAC: the client's, or the next hop's to resolve.
    pub next: Next6,
    pub service: u32,
    pub backend: u32,
}

/// The Ethernet destination of a translated IPv6 packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next6 {
    Mac([u8; 6]),
    Neighbour(Ipv6Addr),
}

/// What the IPv6 pass needs of the pipeline besides its tables.
#[derive(Debug)]
pub struct Ctx6<'a> {
    pub counters: &'a mut Counters,
    pub services: &'a mut ServiceCounters,
    pub steering: &'a Steering,
    pub may_hand_off: bool,
    pub now_ms: u64,
}

/// Run the IPv6 stages over every pending IPv6 packet of the batch: each
/// ends with a verdict. `tables` is `None` until a snapshot had IPv6
/// listeners (then only echo is answered).
pub fn run<F: Frame>(
    tables: Option<&mut Ipv6Tables>,
    snap: &Snapshot,
    frames: &mut [F],
    metas: &mut [PacketMeta],
    ctx: &mut Ctx6<'_>,
    neighbours: &mut NeighbourCtx<'_>,
) {
    let mut tables = tables;
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
                Some(t) => {
                    if let Some(owner) = hand_off(ctx, snap, meta) {
                        meta.verdict = Verdict::Handoff(owner);
                        continue;
                    }
                    match track(t, ctx, snap, frame, meta) {
                        Ok(plan) => forward(neighbours, ctx, snap, (frame, meta, i), &plan),
                        Err(Some(reason)) => meta.drop(reason),
                        Err(None) => {}
                    }
                }
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

/// Find (or create) the packet's flow and track it; its plan. `Err(None)`:
/// the verdict is set already (host path).
fn track<F: Frame>(
    t: &mut Ipv6Tables,
    ctx: &mut Ctx6<'_>,
    snap: &Snapshot,
    frame: &mut F,
    meta: &mut PacketMeta,
) -> Result<Plan6, Option<DropReason>> {
    let key = meta.key6;
    let now = ctx.now_ms;
    let (id, dir) = match t.ct.lookup(&key, meta.hash) {
        Some((id, dir)) => {
            let flow = *t.ct.flow(id);
            let stale = flow.is_expired(now)
                || (dir == Dir::Original
                    && meta.kind == PacketKind::Tcp
                    && is_syn(meta.tcp_flags)
                    && flow.accepts_new_syn());
            let gone = dir == Dir::Original
                && !snap.backend(flow.backend).is_some_and(|b| {
                    b.service == flow.service
                        && b.addr
                            == SocketAddr::V6(SocketAddrV6::new(
                                flow.reply().src_ip,
                                flow.reply().src_port,
                                0,
                                0,
                            ))
                });
            if stale || gone {
                t.remove_flow(id, ctx.services, now);
                if gone && !stale && meta.kind == PacketKind::Tcp {
                    return Err(Some(DropReason::BackendGone));
                }
                create(t, ctx, snap, frame, meta)?
            } else {
                (id, dir)
            }
        }
        None => create(t, ctx, snap, frame, meta)?,
    };
    let flow = *t.ct.flow(id);
    let plan = plan_for(snap, &flow, dir, meta)?;
    // TCP: window tracking, then the state machine (as the IPv4 stage).
    let ignored = flow.tcp_state() == Some(TcpState::SynSent)
        && dir == Dir::Reply
        && meta.tcp_flags & tcp_flags::SYN == 0;
    if meta.kind == PacketKind::Tcp
        && !ignored
        && let Some(seg) = segment_info(frame.data(), meta)
        && t.ct.check_window(id, dir, &seg) != WindowVerdict::Accept
    {
        return Err(Some(DropReason::TcpOutOfWindow));
    }
    if !t.ct.track_checked(id, dir, meta.tcp_flags, now).valid {
        return Err(Some(DropReason::TcpInvalid));
    }
    Ok(plan)
}

/// Where a packet of `flow` in `dir` goes.
fn plan_for(
    snap: &Snapshot,
    flow: &Flow<Ipv6Addr>,
    dir: Dir,
    meta: &mut PacketMeta,
) -> Result<Plan6, Option<DropReason>> {
    let (key, out_port, next) = match dir {
        Dir::Original => {
            let hop = snap
                .backend(flow.backend)
                .and_then(|b| b.next_hop)
                .and_then(|h| Some((h.port, h.v6()?)))
                .ok_or(DropReason::NoRoute)?;
            (flow.reply().reversed(), hop.0, Next6::Neighbour(hop.1))
        }
        Dir::Reply => (
            flow.orig().reversed(),
            flow.client_port,
            Next6::Mac(flow.client_mac),
        ),
    };
    egress_check(snap, meta, out_port)?;
    Ok(Plan6 {
        key,
        out_port,
        next,
        service: flow.service,
        backend: flow.backend,
    })
}

/// Classify a packet without a flow and, for a listener, create its flow
/// (the IPv4 stage's `create`, see the module docs for what IPv6 lacks).
fn create<F: Frame>(
    t: &mut Ipv6Tables,
    ctx: &mut Ctx6<'_>,
    snap: &Snapshot,
    frame: &F,
    meta: &mut PacketMeta,
) -> Result<(FlowId, Dir), Option<DropReason>> {
    let key = meta.key6;
    let now = ctx.now_ms;
    let Some(listener) = snap.listener6(key.proto, key.dst_ip, key.dst_port) else {
        return Err(match snap.owned6(key.dst_ip) {
            Some(o) if o.host => {
                meta.verdict = Verdict::Host;
                None
            }
            Some(o) if o.snat && !o.vip && !o.node => Some(DropReason::NoFlow),
            Some(_) => Some(DropReason::NoListener),
            None => Some(DropReason::NotOwned),
        });
    };
    let service = snap
        .service(listener.service)
        .ok_or(DropReason::NoListener)?;
    if key.proto == Proto::Tcp
        && !is_syn(meta.tcp_flags)
        && !(service.tcp_pickup && is_pickup(meta.tcp_flags))
    {
        // No RST for the `reset` policy over IPv6 yet: dropped.
        return Err(Some(DropReason::NoFlow));
    }
    let set = service.active_set().ok_or(DropReason::NoBackend)?;
    let (backend_id, pinned) = select_backend(snap, service, set, &t.affinity, &key, now);
    let backend = backend_id
        .and_then(|id| snap.backend(id))
        .ok_or(DropReason::NoBackend)?;
    let SocketAddr::V6(backend_addr) = backend.addr else {
        return Err(Some(DropReason::NoBackend));
    };
    let hop = backend
        .next_hop
        .filter(|h| h.v6().is_some())
        .ok_or(DropReason::NoRoute)?;
    // A packet whose hop limit runs out here is never forwarded: no flow.
    let hop_limit = frame
        .data()
        .get(usize::from(meta.l3_offset)..)
        .map_or(0, |ip| wire6::Packet::new_unchecked(ip).hop_limit());
    if hop_limit <= 1 {
        return Err(Some(DropReason::Ipv6HopLimitExpired));
    }
    egress_check(snap, meta, hop.port)?;

    let reply = if service.snat {
        let snat = t.snat.as_mut().ok_or(DropReason::SnatExhausted)?;
        let ct = &t.ct;
        let tuple = snat
            .alloc_hashed(
                key.proto,
                backend_addr,
                now,
                |k, hash| ct.contains(k, hash),
                |_| {},
            )
            .map_err(|_| DropReason::SnatExhausted)?;
        ctx.counters.snat_allocations += 1;
        if tuple.reused_in_quarantine {
            ctx.counters.snat_quarantine_reuses += 1;
        }
        crate::snat::reply_key(key.proto, tuple.addr, tuple.port, backend_addr)
    } else {
        let direct = FlowKey6::new(
            key.proto,
            *backend_addr.ip(),
            backend_addr.port(),
            key.src_ip,
            key.src_port,
        );
        if t.ct.contains(&direct, t.ct.hash(&direct)) {
            return Err(Some(DropReason::TupleInUse));
        }
        direct
    };
    let init = FlowInit {
        orig: key,
        reply,
        service: service.id,
        backend: backend.id,
        client_mac: ethernet::Packet::new_unchecked(frame.data()).src_addr().0,
        client_port: meta.in_port,
        snat: service.snat,
    };
    let reply_hash = t.ct.hash(&reply);
    match t
        .ct
        .insert(init, meta.hash, reply_hash, meta.tcp_flags, now)
    {
        Ok(inserted) => {
            if let Some(victim) = inserted.evicted {
                ctx.counters.flows_early_dropped += 1;
                t.release(&victim, ctx.services, now);
            }
            ctx.counters.flows_created += 1;
            ctx.services.flow_opened(service.id, backend.id);
            if let Some(timeout_ms) = service.affinity_timeout_ms {
                if pinned {
                    ctx.counters.affinity_hits += 1;
                }
                t.affinity
                    .upsert(service.id, key.src_ip, backend.id, timeout_ms, now);
            }
            Ok((inserted.id, Dir::Original))
        }
        Err(e) => {
            if service.snat
                && let Some(snat) = t.snat.as_mut()
            {
                snat.release(&reply, now);
            }
            Err(Some(refused(e, |victim| {
                ctx.counters.flows_early_dropped += 1;
                t.release(victim, ctx.services, now);
            })))
        }
    }
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
        Next6::Mac(mac) => {
            super::neighbour::set_l2(buf, port.mac, mac);
            Verdict::Forward(plan.out_port)
        }
        Next6::Neighbour(addr) => neighbours.forward6(buf, plan.out_port, port.mac, addr, i),
    };
    if !matches!(meta.verdict, Verdict::Drop(_)) {
        ctx.services.count(
            plan.service,
            plan.backend,
            u64::from(meta.l3_end - meta.l3_offset),
        );
    }
}
