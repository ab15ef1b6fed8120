//! The SYN proxy: the gateway completes a client's TCP handshake itself
//! with a SYN cookie (RFC 4987 §3.6, [`cookie`]) and opens the backend
//! connection only once the client proved it receives at its address, then
//! splices the two sequence spaces (as Linux's nf_synproxy and DPVS do).
//!
//! For services whose [`SynProxyMode`] is on (or `auto` while the worker
//! tracks more half-open flows than the threshold):
//!
//! 1. **Client SYN** → answered in place with a SYN-ACK whose sequence
//!    number is the cookie, window 0 (so the client sends no data before
//!    the backend is connected, as nf_synproxy does), MSS (the ingress
//!    port's MTU − 40 for IPv4, − 60 for IPv6, or its `mss_clamp` if
//!    lower) and window scale [`OUR_WSCALE`] if the client sent
//!    one. No flow, no SNAT tuple: a flood of spoofed SYNs costs nothing
//!    but the answers (`syn_cookies_sent`).
//! 2. **Client ACK without a flow** → its acknowledgment number − 1 is
//!    checked as a cookie for this tuple and the client's ISN (its
//!    sequence number − 1). Invalid: dropped as `syn_cookie_invalid` (in
//!    `auto` mode it falls through to the usual no-flow handling). Valid
//!    (`syn_cookies_validated`): the frame becomes the SYN to the backend
//!    (the client's ISN, MSS and window scale from the cookie) and the flow
//!    stage goes on exactly as for a SYN: backend selection, SNAT tuple,
//!    flow insert, NAT. Any data on that ACK is dropped with it (the SYN-ACK
//!    offered window 0, so a conforming client sends none); the gateway
//!    buffers nothing.
//! 3. **Client segments while the backend has not answered** → each ACK is
//!    turned into the backend SYN again (a lost SYN is retransmitted by the
//!    client's window probes); anything else is dropped as
//!    `syn_proxy_pending`.
//! 4. **Backend SYN-ACK** → `delta = backend ISN − cookie`; the frame
//!    becomes the ACK of the backend's SYN (sent straight back), the flow
//!    goes to ESTABLISHED, and a window update (an ACK with the backend's
//!    window, rescaled to the shift the client was told) is queued to the
//!    client in the pipeline's [`Outbox`] (`syn_proxy_spliced`). A backend
//!    RST instead is passed to the client with a sequence number the client
//!    accepts (RFC 9293 §3.10.7.3), so the client sees the refusal.
//! 5. **Every later packet** (RFC 9293 §3.4 sequence spaces): backend →
//!    client sequence numbers − `delta`, client → backend acknowledgment
//!    numbers + `delta`, the backend's window rescaled when its shift
//!    differs from [`OUR_WSCALE`]; checksums updated incrementally
//!    (RFC 1624), except a partial one (a GSO/GRO super-packet's seed,
//!    which covers only the pseudo-header: the device sums the shifted
//!    fields itself). A retransmitted backend SYN-ACK is answered again.
//!
//! Timestamps (RFC 7323): offered to a client whose SYN offers them, with
//! the options in the TSval's low bits as Linux does (see [`cookie`]); the
//! backend's SYN carries the client's TSval; at the splice the offset
//! between the backend's clock and the one the client saw (nf_synproxy's
//! `tsoff`) is kept, and from then on backend → client TSvals are shifted
//! down and client → backend TSecrs up by it, checksums updated
//! incrementally. A backend that does not answer with timestamps leaves
//! the offset 0 (nothing shifted).
//!
//! Both families: the proxy is generic over [`StageFamily`] (the IPv6
//! SYN-ACK, backend SYN and window update are built over the IPv6
//! pseudo-header; cookies over the IPv6 tuple, see [`cookie`]).
//!
//! What is not done: SACK and ECN are not offered to proxied clients (see
//! [`cookie`]); 802.1Q-tagged SYNs are not proxied. When the frame of the
//! client's ACK has no room for the backend SYN's options (a driver that
//! cannot grow frames; every driver of the gateway can) the SYN carries
//! none: the backend then assumes MSS 536 and no window scaling, which is
//! correct but slow.

pub mod cookie;
mod segment;

pub use cookie::{CookieData, CookieSecret, CookieTuple};
pub use segment::Outbox;
pub(crate) use segment::reset_in_place;

use super::family::StageFamily;
use super::flow::FlowCtx;
use crate::conntrack::window::{TcpWindow, WindowScales};
use crate::conntrack::{Dir, FlowId, NO_WSCALE, Splice};
use crate::counters::DropReason;
use crate::driver::Frame;
use crate::packet::PacketMeta;
use crate::snapshot::{Service, Snapshot, SynProxyMode};
use crate::wire::tcp::flags as tcp_flags;
use segment::{Fields, Segment, SynOptions, TsField};

/// The window scale shift the gateway announces to a proxied client that
/// offered window scaling.
pub const OUR_WSCALE: u8 = 7;

/// What [`new_segment`] did with a TCP segment without a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NewSegment {
    /// Not the proxy's: handle it as usual.
    Pass,
    /// Answered or dropped (the verdict is set).
    Done,
    /// A validated cookie ACK, now the SYN to the backend: create the flow
    /// and then [`proxied`] it with this state.
    Open(Splice),
}

/// Whether SYNs of `service` are answered with cookies now.
#[inline]
fn active<A: StageFamily>(mode: SynProxyMode, ctx: &FlowCtx<'_, A>) -> bool {
    match mode {
        SynProxyMode::Off => false,
        SynProxyMode::On => true,
        SynProxyMode::Auto {
            half_open_threshold,
        } => ctx.ct.half_open() > half_open_threshold,
    }
}

fn tuple<A: StageFamily>(meta: &PacketMeta) -> CookieTuple<A> {
    let key = A::key(meta);
    CookieTuple {
        client: key.src_ip,
        client_port: key.src_port,
        service: key.dst_ip,
        service_port: key.dst_port,
    }
}

/// A TCP segment of `service` that matched no flow (steps 1 and 2).
pub fn new_segment<A: StageFamily, F: Frame>(
    ctx: &mut FlowCtx<'_, A>,
    snap: &Snapshot,
    service: &Service,
    frame: &mut F,
    meta: &mut PacketMeta,
) -> NewSegment {
    if service.syn_proxy == SynProxyMode::Off || meta.vlan.is_some() {
        return NewSegment::Pass;
    }
    let flags =
        meta.tcp_flags & (tcp_flags::SYN | tcp_flags::ACK | tcp_flags::RST | tcp_flags::FIN);
    if flags == tcp_flags::SYN {
        if !active(service.syn_proxy, ctx) {
            return NewSegment::Pass;
        }
        let Some(port) = snap.ports.get(usize::from(meta.in_port)) else {
            return NewSegment::Pass;
        };
        let Some(seg) = Segment::read(frame.data(), meta) else {
            meta.drop(DropReason::TcpMalformed);
            return NewSegment::Done;
        };
        let opts = seg.syn_options(frame.data(), meta);
        let data = CookieData::from_options_in(&A::COOKIE_MSS, opts.mss, opts.wscale, opts.sack);
        let cookie = ctx
            .cookies
            .generate(&tuple::<A>(meta), seg.seq, data, ctx.now_ms);
        // What a backend behind this port could announce: the port's MTU
        // less the IP and TCP headers, within its clamp.
        let our_mss = A::mss_for_mtu(port.mtu).min(port.mss_clamp.unwrap_or(u16::MAX));
        let ecn =
            meta.tcp_flags & (tcp_flags::ECE | tcp_flags::CWR) == tcp_flags::ECE | tcp_flags::CWR;
        let answer = SynOptions {
            mss: Some(our_mss),
            wscale: opts.wscale.map(|_| OUR_WSCALE),
            sack: false,
            ts: opts
                .ts
                .map(|(client_ts, _)| (cookie::timestamp(ctx.now_ms, data, ecn), client_ts)),
        };
        let written = segment::answer_in_place::<A, F>(
            frame,
            meta,
            port.mac,
            Fields {
                seq: cookie,
                ack: seg.seq.wrapping_add(1),
                flags: tcp_flags::SYN | tcp_flags::ACK,
                window: 0,
            },
            &answer,
        );
        if written.wscale.is_none() && opts.wscale.is_some() {
            // No room for the window scale option in the answer: then
            // nobody scales (RFC 7323 §2.2), and the cookie must say so.
            let data = CookieData {
                wscale: cookie::WSCALE_NONE,
                ..data
            };
            let cookie = ctx
                .cookies
                .generate(&tuple::<A>(meta), seg.seq, data, ctx.now_ms);
            segment::set_seq(frame, meta, cookie);
        }
        ctx.counters.syn_cookies_sent += 1;
        return NewSegment::Done;
    }
    if flags != tcp_flags::ACK {
        return NewSegment::Pass;
    }
    let Some(seg) = Segment::read(frame.data(), meta) else {
        meta.drop(DropReason::TcpMalformed);
        return NewSegment::Done;
    };
    let client_isn = seg.seq.wrapping_sub(1);
    let our_isn = seg.ack.wrapping_sub(1);
    let Some(data) = ctx
        .cookies
        .validate(&tuple::<A>(meta), client_isn, our_isn, ctx.now_ms)
    else {
        if service.syn_proxy == SynProxyMode::On {
            meta.drop(DropReason::SynCookieInvalid);
            return NewSegment::Done;
        }
        return NewSegment::Pass;
    };
    // With timestamps, the client echoes the TSval of the SYN-ACK, whose low
    // bits repeat the cookie's options.
    let ack_opts = seg.syn_options(frame.data(), meta);
    if let Some((_, tsecr)) = ack_opts.ts
        && !cookie::timestamp_agrees(tsecr, data)
    {
        if service.syn_proxy == SynProxyMode::On {
            meta.drop(DropReason::SynCookieInvalid);
            return NewSegment::Done;
        }
        return NewSegment::Pass;
    }
    ctx.counters.syn_cookies_validated += 1;
    if !ctx.ct.splice_room() {
        // Every splice state is taken: the flow could not be spliced.
        meta.drop(DropReason::SynProxyTableFull);
        return NewSegment::Done;
    }
    let splice = Splice {
        client_isn,
        our_isn,
        delta: 0,
        client_mss: data.mss,
        client_window: seg.window,
        client_wscale: if data.wscale == cookie::WSCALE_NONE {
            NO_WSCALE
        } else {
            data.wscale
        },
        backend_wscale: 0,
        spliced: false,
        timestamps: ack_opts.ts.is_some(),
        ts: ack_opts.ts.map_or(0, |(_, tsecr)| tsecr),
    };
    segment::backend_syn_in_place::<A, F>(frame, meta, &splice, ack_opts.ts.map(|(v, _)| v));
    NewSegment::Open(splice)
}

/// What [`proxied`] decided for a packet of a SYN-proxied flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proxied {
    /// Track it and forward it through NAT as usual, then [`splice`] it.
    Forward,
    /// Forward it through NAT without tracking (the backend SYN again).
    ForwardUntracked,
    /// Answered or dropped here (the verdict is set): no NAT.
    Done,
}

/// A packet of SYN-proxied flow `id` (steps 3 and 4), before tracking.
pub fn proxied<A: StageFamily, F: Frame>(
    ctx: &mut FlowCtx<'_, A>,
    snap: &Snapshot,
    id: FlowId,
    dir: Dir,
    frame: &mut F,
    meta: &mut PacketMeta,
) -> Proxied {
    let Some(&sp) = ctx.ct.splice(id) else {
        return Proxied::Forward;
    };
    let flags =
        meta.tcp_flags & (tcp_flags::SYN | tcp_flags::ACK | tcp_flags::RST | tcp_flags::FIN);
    let syn_ack = tcp_flags::SYN | tcp_flags::ACK;
    match (dir, sp.spliced) {
        (Dir::Original, false) => {
            if flags == tcp_flags::ACK {
                let client_ts = Segment::read(frame.data(), meta)
                    .and_then(|s| s.syn_options(frame.data(), meta).ts)
                    .map(|(v, _)| v);
                segment::backend_syn_in_place::<A, F>(frame, meta, &sp, client_ts);
                Proxied::ForwardUntracked
            } else {
                meta.drop(DropReason::SynProxyPending);
                Proxied::Done
            }
        }
        (Dir::Reply, false) if flags == syn_ack => {
            let Some(seg) = Segment::read(frame.data(), meta) else {
                meta.drop(DropReason::TcpMalformed);
                return Proxied::Done;
            };
            let opts = seg.syn_options(frame.data(), meta);
            let backend_wscale = match (opts.wscale, sp.client_wscale) {
                (Some(w), c) if c != NO_WSCALE => w.min(14),
                _ => 0,
            };
            let delta = seg.seq.wrapping_sub(sp.our_isn);
            // Timestamps: the backend's clock starts at its TSval, the
            // client's view of ours at the SYN-ACK's TSval (`sp.ts`); the
            // backend echoes the client's TSval the backend SYN carried. A
            // backend that answers without them gets an offset of 0.
            let backend_ts = opts.ts.filter(|_| sp.timestamps);
            let tsoff = backend_ts.map_or(0, |(val, _)| val.wrapping_sub(sp.ts));
            if let Some(s) = ctx.ct.splice_mut(id) {
                s.delta = delta;
                s.backend_wscale = backend_wscale;
                s.spliced = true;
                s.ts = tsoff;
            }
            let our_wscale = our_wscale(&sp);
            // Window tracking in the client's view (the handshakes it
            // would have seen): the client sent up to its ISN + 1 and may
            // send what it announced; the gateway's side ("the server")
            // sent up to the cookie + 1.
            let client_scale = if sp.client_wscale == NO_WSCALE {
                0
            } else {
                sp.client_wscale
            };
            let client_win = (u32::from(sp.client_window) << client_scale).max(1);
            let server_win =
                (u32::from(rescale(seg.window, backend_wscale, our_wscale)) << our_wscale).max(1);
            if let Some(([c, g], scales)) = ctx.ct.windows_mut(id) {
                *c = TcpWindow::acked(
                    sp.client_isn.wrapping_add(1),
                    sp.client_isn.wrapping_add(1).wrapping_add(server_win),
                    client_win,
                    sp.our_isn.wrapping_add(1),
                );
                *g = TcpWindow::acked(
                    sp.our_isn.wrapping_add(1),
                    sp.our_isn.wrapping_add(1).wrapping_add(client_win),
                    server_win,
                    sp.client_isn.wrapping_add(1),
                );
                *scales = WindowScales::both(client_scale, our_wscale);
            }
            let now = ctx.now_ms;
            ctx.ct.track(id, Dir::Reply, syn_ack, now);
            ctx.ct.track(id, Dir::Original, tcp_flags::ACK, now);
            // The window update to the client, then the ACK to the backend.
            let flow = *ctx.ct.flow(id);
            let window = rescale(seg.window, backend_wscale, our_wscale);
            if let Some(port) = snap.ports.get(usize::from(flow.client_port)) {
                let queued = ctx.outbox.push_ack(
                    flow.client_port,
                    port.mac,
                    flow.client_mac,
                    &flow.orig().reversed(),
                    sp.our_isn.wrapping_add(1),
                    sp.client_isn.wrapping_add(1),
                    window,
                    backend_ts.map(|(_, client_ts)| (sp.ts, client_ts)),
                );
                if !queued {
                    ctx.counters.drop(DropReason::SynProxyOutboxFull);
                }
            }
            ack_backend::<A, F>(snap, frame, meta, &sp, seg.seq, backend_ts);
            ctx.counters.syn_proxy_spliced += 1;
            Proxied::Done
        }
        (Dir::Reply, false) if flags & tcp_flags::RST != 0 => {
            // The backend refused: tell the client, in its sequence space.
            segment::set_seq(frame, meta, sp.our_isn.wrapping_add(1));
            Proxied::Forward
        }
        (Dir::Reply, false) => {
            meta.drop(DropReason::SynProxyPending);
            Proxied::Done
        }
        (Dir::Reply, true) if flags == syn_ack => {
            // Our ACK was lost: the backend retransmits its SYN-ACK.
            let (seq, ts) = Segment::read(frame.data(), meta)
                .map_or((0, None), |s| (s.seq, s.syn_options(frame.data(), meta).ts));
            ack_backend::<A, F>(snap, frame, meta, &sp, seq, ts.filter(|_| sp.timestamps));
            Proxied::Done
        }
        (_, true) => Proxied::Forward,
    }
}

/// Turn the backend's SYN-ACK (sequence number `backend_isn`, timestamps
/// `ts`: its TSval and the client's TSval it echoes) into the ACK of it,
/// sent straight back (echoing the backend's TSval).
fn ack_backend<A: StageFamily, F: Frame>(
    snap: &Snapshot,
    frame: &mut F,
    meta: &mut PacketMeta,
    sp: &Splice,
    backend_isn: u32,
    ts: Option<(u32, u32)>,
) {
    let Some(port) = snap.ports.get(usize::from(meta.in_port)) else {
        meta.drop(DropReason::NoRoute);
        return;
    };
    segment::answer_in_place::<A, F>(
        frame,
        meta,
        port.mac,
        Fields {
            seq: sp.client_isn.wrapping_add(1),
            ack: backend_isn.wrapping_add(1),
            flags: tcp_flags::ACK,
            window: sp.client_window,
        },
        &SynOptions {
            ts: ts.map(|(backend_ts, client_ts)| (client_ts, backend_ts)),
            ..SynOptions::NONE
        },
    );
}

/// The window scale shift the gateway announced to the client of `sp`.
#[inline]
fn our_wscale(sp: &Splice) -> u8 {
    if sp.client_wscale == NO_WSCALE {
        0
    } else {
        OUR_WSCALE
    }
}

/// Answer the TCP segment in place with an ACK (`seq`, `ack`, `window`)
/// back to its sender, out of the port it came in on (the challenge ACK of
/// window tracking, RFC 5961 §3.2). False when the port is unknown.
pub fn answer_ack<A: StageFamily, F: Frame>(
    snap: &Snapshot,
    frame: &mut F,
    meta: &mut PacketMeta,
    seq: u32,
    ack: u32,
    window: u16,
) -> bool {
    let Some(port) = snap.ports.get(usize::from(meta.in_port)) else {
        return false;
    };
    segment::answer_in_place::<A, F>(
        frame,
        meta,
        port.mac,
        Fields {
            seq,
            ack,
            flags: tcp_flags::ACK,
            window,
        },
        &SynOptions::NONE,
    );
    true
}

/// A window field scaled by `from` as the same window scaled by `to`.
#[inline]
fn rescale(window: u16, from: u8, to: u8) -> u16 {
    let bytes = u64::from(window) << from;
    u16::try_from(bytes >> to).unwrap_or(u16::MAX)
}

/// Step 5: shift the sequence spaces of a tracked, forwarded packet of a
/// spliced flow (before NAT, which then updates the same checksum for the
/// addresses).
#[inline]
pub fn splice<A: StageFamily, F: Frame>(
    ctx: &FlowCtx<'_, A>,
    id: FlowId,
    dir: Dir,
    frame: &mut F,
    meta: &PacketMeta,
) {
    let Some(sp) = ctx.ct.splice(id).filter(|s| s.spliced) else {
        return;
    };
    // A partial checksum (a GSO/GRO super-packet) is a pseudo-header seed:
    // the header fields shifted below are summed by the device later, so
    // the seed must not follow them.
    let seed = if meta.offload.needs_csum {
        segment::checksum_field(frame, meta)
    } else {
        None
    };
    match dir {
        Dir::Original => {
            if meta.tcp_flags & tcp_flags::ACK != 0 {
                segment::shift_ack(frame, meta, sp.delta);
            }
            if sp.timestamps && sp.ts != 0 {
                segment::shift_timestamp(frame, meta, TsField::Tsecr, sp.ts);
            }
        }
        Dir::Reply => {
            let ours = our_wscale(sp);
            segment::shift_seq_and_window(frame, meta, sp.delta, |w| {
                if sp.backend_wscale == ours {
                    w
                } else {
                    rescale(w, sp.backend_wscale, ours)
                }
            });
            if sp.timestamps && sp.ts != 0 {
                segment::shift_timestamp(frame, meta, TsField::Tsval, sp.ts.wrapping_neg());
            }
        }
    }
    if let Some(seed) = seed {
        segment::set_checksum_field(frame, meta, seed);
    }
}
