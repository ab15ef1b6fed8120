//! The flow stage: conntrack lookup, classification of new flows, backend
//! selection, SNAT allocation, flow creation and TCP/UDP state tracking.
//!
//! Sub-passes over the batch, in order:
//! 1. **lookup** every TCP/UDP packet in conntrack (by the hash the parse
//!    stage computed). An expired entry is removed and counts as a miss. A
//!    SYN from the client that meets a TIME_WAIT/CLOSE entry removes it and
//!    starts a fresh flow with a fresh backend choice (no IPVS-style reuse of
//!    a connection to a backend that may be gone). A client packet whose
//!    backend has left its service (the endpoint is no longer listed; a
//!    draining endpoint keeps its flows): UDP flows are removed and
//!    re-selected (no stale black hole); TCP flows are removed and the packet
//!    dropped or answered with a RST, per the service's policy. A packet of a
//!    live flow gets its [`NatPlan`] here.
//! 2. **classify** misses: `(proto, dst, dport)` listener → new flow (TCP only
//!    on a SYN; other TCP segments are answered with a RST when the service's
//!    policy is `Reset`, so a client whose flow was reset keeps getting RSTs,
//!    else dropped as `no_flow`); a host address → [`Verdict::Host`] (the
//!    kernel's, through the host path: only misses pay for this check, as
//!    host addresses have no listeners and no flows); owned address without
//!    listener → `no_listener`; SNAT address → `no_flow`; anything else → `not_owned`.
//! 3. **select + create**: the per-source new-flow rate limit
//!    ([`super::source_limit`], `new_flow_rate_limited`), ClientIP affinity entry, else Maglev (on the
//!    5-tuple, or on the client address for affinity services) over the
//!    service's ready endpoints, or its serving-terminating endpoints when
//!    none is ready; egress checks (route, MTU, VLAN); SNAT tuple; conntrack
//!    insert (early drop when full); only then the affinity pin.
//! 4. **track**: advance the TCP state machine / UDP replied state of every
//!    packet of an existing flow, if its flow is still the one it found
//!    (a later packet of the batch may have removed it). TCP segments first
//!    pass window tracking ([`crate::conntrack::window`]): outside the
//!    window they are dropped (`tcp_out_of_window`), an RST inside the
//!    window but not exact is answered with a challenge ACK (RFC 5961
//!    §3.2). Segments the TCP state machine calls invalid are dropped
//!    (`tcp_invalid`), as kube-proxy drops conntrack INVALID. Packets of
//!    SYN-proxied flows go through [`super::synproxy`] around this.
//!
//! Every check that can drop a packet runs before the packet changes any
//! flow state, so a dropped packet never advances a connection.
//!
//! One stage for both families: [`run`] is generic over
//! [`StageFamily`] and runs once per family over the batch, each run
//! taking only the pending packets of its family (IPv6 first, from
//! [`super::ipv6`], over the IPv6 tables; then IPv4). Every defence above
//! (RSTs, challenge ACKs, client-port remapping, the per-source limit, the
//! SYN proxy) is this code for both; what differs per family is
//! [`super::family`]'s.

use super::family::StageFamily;
use super::source_limit::SourceLimit;
use super::synproxy::{self, CookieSecret, NewSegment, Outbox, Proxied};
use super::{FlowSlot, L2Next, MAX_BATCH, NatPlan};
use crate::conntrack::affinity::AffinityTable;
use crate::conntrack::window::{SegmentInfo, WindowVerdict};
use crate::conntrack::{Conntrack, Dir, Flow, FlowId, FlowInit, InsertError, Probe, TcpState};
use crate::counters::{Counters, DropReason, ServiceCounters};
use crate::driver::Frame;
use crate::flow::{Family, FlowKeyOf, IpFamily, Proto, stable_addr_hash};
use crate::packet::{PacketKind, PacketMeta, PortId, Verdict};
use crate::snapshot::{BackendGonePolicy, BackendId, BackendSet, Service, Snapshot};
use crate::snat::{SnatAllocator, SnatExhausted, SnatTuple};
use crate::wire::ethernet;
use crate::wire::tcp;
use crate::wire::tcp::SynOptions;
use crate::wire::tcp::flags as tcp_flags;
use std::net::Ipv4Addr;

/// The worker state the flow and ICMP-error stages share: the tables of
/// family `A`, and the family-independent rest.
#[derive(Debug)]
pub struct FlowCtx<'a, A: IpFamily = Ipv4Addr> {
    pub ct: &'a mut Conntrack<A>,
    /// `None` while there is no SNAT address of the family.
    pub snat: Option<&'a mut SnatAllocator<A>>,
    pub affinity: &'a mut AffinityTable<A>,
    pub counters: &'a mut Counters,
    /// Per-service/backend flow counts (new and active flows).
    pub services: &'a mut ServiceCounters,
    /// The SYN proxy's cookie key and its queue of generated frames.
    pub cookies: &'a CookieSecret,
    pub outbox: &'a mut Outbox,
    /// The per-source new-flow rate limit.
    pub source_limit: &'a mut SourceLimit,
    pub now_ms: u64,
    /// The workers sharing the flows (`Steering::workers`): a remapped
    /// client port must keep the reply on this worker.
    pub workers: u8,
}

impl<A: IpFamily> FlowCtx<'_, A> {
    /// Remove a flow and give its SNAT tuple back (exactly once: a flow
    /// already removed is not released again).
    pub fn remove_flow(&mut self, id: FlowId) {
        if let Some(flow) = self.ct.remove(id) {
            self.release_tuple(&flow);
        }
    }

    /// Give back the SNAT tuple of a flow that left the table, and count
    /// it out of its service's and backend's active flows.
    fn release_tuple(&mut self, flow: &Flow<A>) {
        self.services.flow_closed(flow.service, flow.backend);
        if flow.snat()
            && let Some(snat) = self.snat.as_deref_mut()
        {
            snat.release(flow.reply(), self.now_ms);
        }
    }
}

#[inline]
pub(super) fn is_syn(flags: u8) -> bool {
    flags & (tcp_flags::SYN | tcp_flags::ACK | tcp_flags::RST) == tcp_flags::SYN
}

/// A segment that may start a flow picked up mid-stream (Linux's loose
/// mode: an ACK, without SYN, FIN or RST).
#[inline]
pub(super) fn is_pickup(flags: u8) -> bool {
    flags & (tcp_flags::SYN | tcp_flags::ACK | tcp_flags::RST | tcp_flags::FIN) == tcp_flags::ACK
}

/// Where a packet of `flow` travelling in `dir` goes, or why it cannot.
#[inline]
pub(crate) fn plan_for<A: StageFamily>(
    snap: &Snapshot,
    flow: &Flow<A>,
    dir: Dir,
    meta: &mut PacketMeta,
) -> Result<NatPlan<A>, DropReason> {
    let (key, hop) = match dir {
        Dir::Original => (
            flow.reply().reversed(),
            snap.backend(flow.backend)
                .and_then(|b| b.next_hop)
                .and_then(|h| Some((h.port, L2Next::Neighbour(A::next_hop(&h)?)))),
        ),
        Dir::Reply => (
            flow.orig().reversed(),
            Some((flow.client_port, L2Next::Mac(flow.client_mac))),
        ),
    };
    let (out_port, next) = hop.ok_or(DropReason::NoRoute)?;
    egress_check(snap, meta, out_port)?;
    Ok(NatPlan {
        key,
        out_port,
        next,
        service: flow.service,
        backend: flow.backend,
    })
}

/// Checks of the egress port a packet would leave on. A packet too big
/// for it has the port's MTU noted for its ICMP error (see
/// [`super::icmp_reply`]). A GSO/GRO super-packet is too big when its
/// segments are ([`PacketMeta::wire_l3_len`]), not by its own length.
#[inline(always)]
pub(super) fn egress_check(
    snap: &Snapshot,
    meta: &mut PacketMeta,
    out_port: PortId,
) -> Result<(), DropReason> {
    let port = snap
        .ports
        .get(out_port as usize)
        .ok_or(DropReason::NoRoute)?;
    if meta.wire_l3_len() > port.mtu {
        meta.egress_mtu = port.mtu;
        return Err(DropReason::TooBig);
    }
    if meta.vlan.is_some() && out_port != meta.in_port {
        return Err(DropReason::VlanMismatch);
    }
    Ok(())
}

/// Run the flow stage over the pending TCP/UDP packets of family `A`:
/// each ends with a verdict or a [`FlowSlot`] with its plan.
pub fn run<A: StageFamily, F: Frame>(
    ctx: &mut FlowCtx<'_, A>,
    snap: &Snapshot,
    frames: &mut [F],
    metas: &mut [PacketMeta],
    flows: &mut [FlowSlot<A>],
) {
    // 0. Overlap the batch's conntrack cache misses (see the conntrack
    // module docs): index lines first, then the records they point to.
    // The IPv4 run comes after the IPv6 pass, which leaves no IPv6 packet
    // pending: only the IPv6 run needs the family test (a constant for
    // IPv4).
    let tracked = |m: &PacketMeta| {
        m.is_pending()
            && matches!(m.kind, PacketKind::Tcp | PacketKind::Udp)
            && (A::FAMILY == Family::V4 || m.family == A::FAMILY)
    };
    for meta in metas.iter().filter(|m| tracked(m)) {
        ctx.ct.prefetch_index(meta.hash);
    }
    let mut probes = [Probe::NONE; MAX_BATCH];
    for (meta, probe) in metas.iter().zip(probes.iter_mut()) {
        if tracked(meta) {
            *probe = ctx.ct.probe(meta.hash);
        }
    }

    // 1. lookup
    for (((frame, meta), slot), &probe) in frames
        .iter_mut()
        .zip(metas.iter_mut())
        .zip(flows.iter_mut())
        .zip(probes.iter())
    {
        if !tracked(meta) {
            continue;
        }
        let Some((id, dir)) = ctx.ct.lookup_probed(A::key(meta), meta.hash, probe) else {
            continue;
        };
        let flow = *ctx.ct.flow(id);
        if flow.is_expired(ctx.now_ms) {
            ctx.remove_flow(id);
            ctx.counters.flows_expired += 1;
            continue;
        }
        if dir == Dir::Original {
            if meta.kind == PacketKind::Tcp && is_syn(meta.tcp_flags) && flow.accepts_new_syn() {
                ctx.remove_flow(id);
                ctx.counters.flows_recycled += 1;
                continue;
            }
            let backend_listed = snap.backend(flow.backend).is_some_and(|b| {
                b.service == flow.service
                    && A::socket_of(&b.addr).is_some_and(|s| {
                        A::socket_parts(s) == (flow.reply().src_ip, flow.reply().src_port)
                    })
            });
            if !backend_listed {
                let policy = snap
                    .service(flow.service)
                    .map_or(BackendGonePolicy::Drop, |s| s.tcp_backend_gone);
                ctx.remove_flow(id);
                if meta.kind == PacketKind::Udp {
                    ctx.counters.flows_reselected += 1;
                    continue;
                }
                answer_gone_tcp(ctx, snap, frame, meta, policy, DropReason::BackendGone);
                continue;
            }
        }
        match plan_for(snap, &flow, dir, meta) {
            Ok(plan) => *slot = FlowSlot::Hit { id, dir, plan },
            Err(reason) => meta.drop(reason),
        }
    }

    // 2 + 3. classify misses and create flows
    for ((frame, meta), slot) in frames
        .iter_mut()
        .zip(metas.iter_mut())
        .zip(flows.iter_mut())
    {
        if !tracked(meta) || *slot != FlowSlot::None {
            continue;
        }
        *slot = create(ctx, snap, frame, meta);
    }

    // 4. track
    for ((frame, meta), slot) in frames
        .iter_mut()
        .zip(metas.iter_mut())
        .zip(flows.iter_mut())
    {
        let FlowSlot::Hit { id, dir, .. } = *slot else {
            continue;
        };
        if !meta.is_pending() {
            continue;
        }
        // The slot may have been freed (and reused) by a later packet of
        // this batch; such a packet still leaves per its plan, untracked.
        let flow = ctx.ct.flow(id);
        if !flow.is_live() || flow.key(dir) != A::key(meta) {
            continue;
        }
        let proxied = flow.syn_proxied();
        // Linux's IGNORE: a backend's ACK to a SYN (its challenge ACK for
        // an old connection on the tuple, RFC 9293 §3.10.7.4) passes
        // without window tracking, so the client's RST can clear it.
        let ignored = flow.tcp_state() == Some(TcpState::SynSent)
            && dir == Dir::Reply
            && meta.tcp_flags & tcp_flags::SYN == 0;
        if proxied {
            match synproxy::proxied(ctx, snap, id, dir, frame, meta) {
                Proxied::Forward => {}
                Proxied::ForwardUntracked => continue,
                Proxied::Done => {
                    *slot = FlowSlot::None;
                    continue;
                }
            }
            // Windows are tracked in the client's view: a backend packet
            // moves to it first.
            if dir == Dir::Reply {
                synproxy::splice(ctx, id, dir, frame, meta);
            }
        }
        if meta.kind == PacketKind::Tcp
            && !ignored
            && let Some(seg) = segment_info(frame.data(), meta)
        {
            match ctx.ct.check_window(id, dir, &seg) {
                WindowVerdict::Accept => {}
                WindowVerdict::OutOfWindow => {
                    meta.drop(DropReason::TcpOutOfWindow);
                    *slot = FlowSlot::None;
                    continue;
                }
                WindowVerdict::Challenge { seq, ack, window } => {
                    // RFC 5961 §3.2: the RST's sender must prove it sees
                    // the connection by answering with an exact RST. (A
                    // proxied backend's numbers were moved to the client's
                    // view: its acknowledgment goes back to its own.)
                    let ack = match (proxied, dir) {
                        (true, Dir::Reply) => {
                            ack.wrapping_add(ctx.ct.splice(id).map_or(0, |s| s.delta))
                        }
                        _ => ack,
                    };
                    if synproxy::answer_ack::<A, F>(snap, frame, meta, seq, ack, window) {
                        ctx.counters.challenge_acks_sent += 1;
                    } else {
                        meta.drop(DropReason::TcpOutOfWindow);
                    }
                    *slot = FlowSlot::None;
                    continue;
                }
            }
        }
        if !ctx
            .ct
            .track_checked(id, dir, meta.tcp_flags, ctx.now_ms)
            .valid
        {
            meta.drop(DropReason::TcpInvalid);
            *slot = FlowSlot::None;
        } else if proxied && dir == Dir::Original {
            synproxy::splice(ctx, id, dir, frame, meta);
        }
    }
}

/// The fields window tracking reads of the TCP segment at `meta`'s
/// offsets (the options only on SYNs).
#[inline]
pub(super) fn segment_info(data: &[u8], meta: &PacketMeta) -> Option<SegmentInfo> {
    let seg = data.get(usize::from(meta.l4_offset)..usize::from(meta.l3_end))?;
    if seg.len() < tcp::HEADER_LEN {
        return None;
    }
    // The parse stage checked the header's length and data offset.
    let p = tcp::Packet::new_unchecked(seg);
    let header_len = p.header_len().clamp(tcp::HEADER_LEN, seg.len());
    let wscale = if meta.tcp_flags & tcp_flags::SYN != 0 {
        seg.get(tcp::HEADER_LEN..header_len)
            .map_or(SynOptions::NONE, SynOptions::parse)
            .wscale
    } else {
        None
    };
    Some(SegmentInfo {
        seq: p.seq_number(),
        ack: p.ack_number(),
        len: (seg.len() - header_len) as u32,
        window: p.window(),
        flags: meta.tcp_flags,
        wscale,
    })
}

/// The reply tuple of a flow without SNAT: the backend answers the client
/// directly, so the backend-side tuple is `backend -> client:port` and can
/// clash with another flow (the same client port used towards a second
/// service on the same backend). On a clash, like Linux's NAT picking a
/// unique tuple: a closing TCP flow (TIME_WAIT/CLOSE) gives its tuple to the
/// new SYN; otherwise the client's source port is remapped to a free one
/// (its address, which is what `snat = false` preserves, is kept) whose
/// `client_port_hash` names the worker of the original port, so the
/// backend's reply is steered to this worker as the client's packets are
/// (`crate::steering`). `None` when no free port was found in a bounded
/// number of tries.
fn client_side_tuple<A: IpFamily>(
    ctx: &mut FlowCtx<'_, A>,
    direct: FlowKeyOf<A>,
    meta: &PacketMeta,
) -> Option<FlowKeyOf<A>> {
    const REMAP_TRIES: u32 = 64;
    let Some((holder, _)) = ctx.ct.lookup(&direct, ctx.ct.hash(&direct)) else {
        return Some(direct);
    };
    let held = ctx.ct.flow(holder);
    if held.is_expired(ctx.now_ms) || (direct.proto == Proto::Tcp && held.accepts_new_syn()) {
        ctx.remove_flow(holder);
        ctx.counters.flows_recycled += 1;
        return Some(direct);
    }
    // Candidates spread over 1024..=65535 from the packet's hash, each
    // with this worker as the owner.
    let client = direct.dst_ip.to_ip();
    let candidates = crate::steering::remap_candidates(
        client,
        direct.dst_port,
        ctx.workers,
        meta.hash,
        REMAP_TRIES,
    );
    for port in candidates {
        let candidate = FlowKeyOf {
            dst_port: port,
            ..direct
        };
        if !ctx.ct.contains(&candidate, ctx.ct.hash(&candidate)) {
            ctx.counters.client_ports_remapped += 1;
            return Some(candidate);
        }
    }
    None
}

/// A SNAT tuple towards `backend`. When every candidate probed is in use,
/// the oldest unassured flow among them (SYN_SENT/SYN_RECV, closing, or an
/// unreplied UDP flow: [`Flow::evictable`]) is evicted and the allocation
/// tried once more, as Linux's `early_drop` makes room in conntrack: a
/// flood of half-open flows towards one backend cannot lock real clients
/// out of its tuple space. `probed` gets the last candidate checked and its
/// hash (see `create`).
fn alloc_snat<A: IpFamily>(
    ctx: &mut FlowCtx<'_, A>,
    proto: Proto,
    backend: A::Socket,
    probed: &mut Option<(FlowKeyOf<A>, u64)>,
) -> Result<SnatTuple<A>, SnatExhausted> {
    // (created_s, expires_ms, id) of the oldest evictable holder seen.
    let mut victim: Option<(u32, u64, FlowId)> = None;
    let ct = &*ctx.ct;
    let Some(snat) = ctx.snat.as_deref_mut() else {
        return Err(SnatExhausted);
    };
    let result = snat.alloc_hashed(
        proto,
        backend,
        ctx.now_ms,
        |k, hash| {
            *probed = Some((*k, hash));
            let Some((id, _)) = ct.lookup(k, hash) else {
                return false;
            };
            let f = ct.flow(id);
            if f.evictable() && victim.is_none_or(|(c, e, _)| (f.created_s, f.expires_ms) < (c, e))
            {
                victim = Some((f.created_s, f.expires_ms, id));
            }
            true
        },
        |hash| ct.prefetch_index(hash),
    );
    let (Err(exhausted), Some((_, _, id))) = (result, victim) else {
        return result;
    };
    // The victim's tuple goes straight to the new flow (no quarantine: the
    // backend never completed a connection on it, or is closing it).
    let Some(flow) = ctx.ct.remove(id) else {
        return Err(exhausted);
    };
    ctx.services.flow_closed(flow.service, flow.backend);
    ctx.counters.flows_early_dropped += 1;
    ctx.counters.snat_early_drops += 1;
    match ctx.snat.as_deref().and_then(|s| s.reassign(flow.reply())) {
        Some(t) => {
            *probed = Some((*flow.reply(), ctx.ct.hash(flow.reply())));
            Ok(t)
        }
        None => Err(exhausted),
    }
}

/// A TCP segment for a service whose flow cannot continue: a RST back to the
/// client under the `Reset` policy, else dropped with `reason`.
fn answer_gone_tcp<A: StageFamily, F: Frame>(
    ctx: &mut FlowCtx<'_, A>,
    snap: &Snapshot,
    frame: &mut F,
    meta: &mut PacketMeta,
    policy: BackendGonePolicy,
    reason: DropReason,
) {
    if policy == BackendGonePolicy::Reset && synproxy::reset_in_place::<A, F>(snap, frame, meta) {
        ctx.counters.resets_sent += 1;
    } else {
        meta.drop(reason);
    }
}

/// The backend of a new flow of `key` (either family) and whether the
/// client's ClientIP affinity pin chose it: the pin while its backend may
/// take new flows, else Maglev over `set`, on the client address for an
/// affinity service, else on the 5-tuple.
#[inline(always)]
pub(super) fn select_backend<A: IpFamily>(
    snap: &Snapshot,
    service: &Service,
    set: &BackendSet,
    affinity: &AffinityTable<A>,
    key: &FlowKeyOf<A>,
    now_ms: u64,
) -> (Option<BackendId>, bool) {
    let pinned = service.affinity_timeout_ms.and_then(|_| {
        affinity
            .lookup(service.id, key.src_ip, now_ms)
            .filter(|&id| {
                snap.backend(id)
                    .is_some_and(|b| b.service == service.id && service.accepts_new_flows(b))
            })
    });
    let id = match (pinned, service.affinity_timeout_ms) {
        (Some(id), _) => Some(id),
        (None, Some(_)) => set.pick(stable_addr_hash(key.src_ip)),
        // The public stable hash, not the table hash: every instance
        // behind ECMP picks the same backend for this flow.
        (None, None) => set.pick(key.stable_hash()),
    };
    (id, pinned.is_some())
}

/// The drop reason of a refused insert (either family); a flow early
/// drop removed on the way goes to `evicted` (its SNAT tuple is the
/// caller's to release).
pub(super) fn refused<A: IpFamily>(
    e: InsertError<A>,
    evicted: impl FnOnce(&Flow<A>),
) -> DropReason {
    match e {
        InsertError::Full => DropReason::ConntrackFull,
        InsertError::KeyExists | InsertError::UnknownFlow => DropReason::TupleInUse,
        InsertError::Crowded { evicted: victim } => {
            if let Some(victim) = victim {
                evicted(&victim);
            }
            DropReason::ConntrackCrowded
        }
    }
}

/// Classify a packet without a flow and, for a listener, create its flow.
fn create<A: StageFamily, F: Frame>(
    ctx: &mut FlowCtx<'_, A>,
    snap: &Snapshot,
    frame: &mut F,
    meta: &mut PacketMeta,
) -> FlowSlot<A> {
    let key = *A::key(meta);
    let Some(listener) = A::listener(snap, key.proto, key.dst_ip, key.dst_port) else {
        let reason = match A::owned(snap, key.dst_ip) {
            Some(o) if o.host => {
                meta.verdict = Verdict::Host;
                return FlowSlot::None;
            }
            Some(o) if o.snat && !o.vip && !o.node => DropReason::NoFlow,
            Some(_) => DropReason::NoListener,
            None => DropReason::NotOwned,
        };
        meta.drop(reason);
        return FlowSlot::None;
    };
    let Some(service) = snap.service(listener.service) else {
        meta.drop(DropReason::NoListener);
        return FlowSlot::None;
    };
    let mut splice = None;
    if key.proto == Proto::Tcp {
        match synproxy::new_segment(ctx, snap, service, frame, meta) {
            NewSegment::Pass => {}
            NewSegment::Done => return FlowSlot::None,
            NewSegment::Open(s) => splice = Some(s),
        }
    }
    if key.proto == Proto::Tcp
        && !is_syn(meta.tcp_flags)
        && !(service.tcp_pickup && is_pickup(meta.tcp_flags))
    {
        answer_gone_tcp(
            ctx,
            snap,
            frame,
            meta,
            service.tcp_backend_gone,
            DropReason::NoFlow,
        );
        return FlowSlot::None;
    }
    // A second packet of a flow created earlier in this same batch.
    if let Some((id, dir)) = ctx.ct.lookup(&key, meta.hash) {
        let flow = *ctx.ct.flow(id);
        return match plan_for(snap, &flow, dir, meta) {
            Ok(plan) => FlowSlot::Hit { id, dir, plan },
            Err(reason) => {
                meta.drop(reason);
                FlowSlot::None
            }
        };
    }
    if ctx.source_limit.enabled()
        && !ctx.source_limit.allow(
            A::source_key(key.src_ip, ctx.source_limit.prefix_len_v6()),
            ctx.now_ms,
        )
    {
        meta.drop(DropReason::NewFlowRateLimited);
        return FlowSlot::None;
    }
    let Some(set) = service.active_set() else {
        meta.drop(DropReason::NoBackend);
        return FlowSlot::None;
    };

    let (backend_id, pinned) = select_backend(snap, service, set, ctx.affinity, &key, ctx.now_ms);
    let Some(backend) = backend_id.and_then(|id| snap.backend(id)) else {
        meta.drop(DropReason::NoBackend);
        return FlowSlot::None;
    };
    // A service is single-family: a listener has backends of its family.
    let Some(backend_addr) = A::socket_of(&backend.addr) else {
        meta.drop(DropReason::NoBackend);
        return FlowSlot::None;
    };
    let (backend_ip, backend_port) = A::socket_parts(backend_addr);
    let Some((hop, hop_addr)) = backend.next_hop.and_then(|h| Some((h, A::next_hop(&h)?))) else {
        meta.drop(DropReason::NoRoute);
        return FlowSlot::None;
    };
    // A packet whose TTL / hop limit runs out here is never forwarded: no
    // flow, no SNAT tuple for it (the NAT stage checks the packets of
    // existing flows). `stage::icmp_reply` answers it.
    let ttl = frame
        .data()
        .get(usize::from(meta.l3_offset)..)
        .map_or(0, A::hop_limit);
    if ttl <= 1 {
        meta.drop(A::HOP_EXPIRED);
        return FlowSlot::None;
    }
    if let Err(reason) = egress_check(snap, meta, hop.port) {
        meta.drop(reason);
        return FlowSlot::None;
    }

    // The hash of the last reply key the SNAT probe looked up: the one
    // handed out, unless a quarantined tuple was reused.
    let mut probed: Option<(FlowKeyOf<A>, u64)> = None;
    let reply = if service.snat {
        match alloc_snat(ctx, key.proto, backend_addr, &mut probed) {
            Ok(t) => {
                ctx.counters.snat_allocations += 1;
                if t.reused_in_quarantine {
                    ctx.counters.snat_quarantine_reuses += 1;
                }
                crate::snat::reply_key(key.proto, t.addr, t.port, backend_addr)
            }
            Err(_) => {
                meta.drop(DropReason::SnatExhausted);
                return FlowSlot::None;
            }
        }
    } else {
        let direct = FlowKeyOf::new(
            key.proto,
            backend_ip,
            backend_port,
            key.src_ip,
            key.src_port,
        );
        match client_side_tuple(ctx, direct, meta) {
            Some(reply) => reply,
            None => {
                meta.drop(DropReason::TupleInUse);
                return FlowSlot::None;
            }
        }
    };
    let reply_hash = match probed {
        Some((k, hash)) if k == reply => hash,
        _ => ctx.ct.hash(&reply),
    };

    let client_mac = ethernet::Packet::new_unchecked(frame.data()).src_addr().0;
    let init = FlowInit {
        orig: key,
        reply,
        service: service.id,
        backend: backend.id,
        client_mac,
        client_port: meta.in_port,
        snat: service.snat,
    };
    match ctx
        .ct
        .insert(init, meta.hash, reply_hash, meta.tcp_flags, ctx.now_ms)
    {
        Ok(inserted) => {
            if let Some(victim) = inserted.evicted {
                ctx.counters.flows_early_dropped += 1;
                ctx.release_tuple(&victim);
            }
            ctx.counters.flows_created += 1;
            ctx.services.flow_opened(service.id, backend.id);
            if let Some(splice) = splice {
                // Room was checked by `new_segment`, and inserting only
                // frees splice states (an early-dropped proxied flow).
                let spliced = ctx.ct.set_splice(inserted.id, splice);
                debug_assert!(spliced, "a splice state was free");
            } else if key.proto == Proto::Tcp
                && let Some(seg) = segment_info(frame.data(), meta)
            {
                // The first segment sets up the client's side of the
                // window tracking (its SYN's window and scale; anything
                // else marks a flow picked up mid-stream).
                ctx.ct.check_window(inserted.id, Dir::Original, &seg);
            }
            if let Some(timeout_ms) = service.affinity_timeout_ms {
                if pinned {
                    ctx.counters.affinity_hits += 1;
                }
                ctx.affinity
                    .upsert(service.id, key.src_ip, backend.id, timeout_ms, ctx.now_ms);
            }
            FlowSlot::Created {
                id: inserted.id,
                plan: NatPlan {
                    key: reply.reversed(),
                    out_port: hop.port,
                    next: L2Next::Neighbour(hop_addr),
                    service: service.id,
                    backend: backend.id,
                },
            }
        }
        Err(e) => {
            if service.snat
                && let Some(snat) = ctx.snat.as_deref_mut()
            {
                snat.release(&reply, ctx.now_ms);
            }
            meta.drop(refused(e, |victim| {
                ctx.counters.flows_early_dropped += 1;
                ctx.release_tuple(victim);
            }));
            FlowSlot::None
        }
    }
}
