//! The RFC 4271 §8 finite state machine of one session, as a tokio task.
//!
//! We are the active side only (no listener, so no connection collisions
//! to resolve, RFC 4271 §6.8): Idle → Connect (TCP connect) → OpenSent
//! (our OPEN sent) → OpenConfirm (the router's OPEN accepted, our
//! KEEPALIVE sent) → Established (its KEEPALIVE received). A failed
//! connect waits in Active, a failed session in Idle, for the
//! connect-retry delay: `connect_retry_s` doubling per failure up to
//! `connect_retry_max_s`, with RFC 4271 §10 jitter (×0.75..1), reset once
//! a session has stayed Established for [`STABLE_AFTER`].
//!
//! Families (RFC 4760 §8, RFC 5492): our OPEN carries a Multiprotocol
//! capability per offered family (`PeerConfig::offered_families`); the
//! session carries the families both OPENs list (a router without any
//! Multiprotocol capability implies IPv4 unicast only). Over an IPv6
//! session it also carries the Extended Next Hop Encoding capability
//! (RFC 8950 §4: AFI 1, SAFI 1, next hop AFI 2) unless configured off;
//! when the router's OPEN has the same tuple, IPv4 routes get the IPv6
//! next hop (§3) and IPv4 MP_REACH_NLRI with one decodes (`DecodeContext`). Routes of another
//! family are not sent, counted in `prefixes_skipped`; no common family
//! at all refuses the OPEN (Unsupported Capability, RFC 5492 §3). Once
//! Established, each carried family gets its End-of-RIB (RFC 4724 §2)
//! after the initial routes, and a ROUTE-REFRESH resends only its family
//! (one not negotiated is ignored, RFC 2918 §4).
//!
//! Timers: the hold timer runs from our OPEN (4 minutes until the OPENs
//! are exchanged, RFC 4271 §8.2.2) and then uses the negotiated hold time
//! (the smaller of both; 0 disables hold and keepalive timers); the
//! keepalive timer fires every `keepalive_s` (default a third of the hold
//! time) and restarts when an UPDATE is sent. Every received message
//! restarts the hold timer; its expiry sends Hold Timer Expired.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::backoff::Backoff;
use super::rib::{AdjRibOut, Speaker, end_of_rib};
use super::{Desired, SessionStats, State, transport};
use crate::config::{Family, PeerConfig};
use crate::wire::notification::{cease, fsm as fsm_sub, open as open_sub};
use crate::wire::{
    AFI_IPV4, Capability, DecodeContext, DecodeError, ErrorAction, MAX_MESSAGE_LEN, Message,
    NextHopTuple, Notification, OpenRepr, SAFI_UNICAST, UpdateRepr, frame_len,
};

/// How long a TCP connect may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The hold time before the OPENs are exchanged (RFC 4271 §8.2.2).
const OPEN_HOLD_TIME: Duration = Duration::from_secs(240);
/// A session up this long resets the connect-retry backoff.
pub(crate) const STABLE_AFTER: Duration = Duration::from_secs(30);
/// How long a NOTIFICATION (then our FIN) may take to leave, and the
/// router to close its side, before we drop the connection.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Runs the session until it is told to stop.
pub(super) async fn run(
    cfg: PeerConfig,
    mut desired: watch::Receiver<Desired>,
    mut stop: watch::Receiver<Option<String>>,
    stats: watch::Sender<SessionStats>,
) {
    let mut fsm = Fsm {
        peer: cfg.name(),
        backoff: Backoff::new(&cfg),
        cfg,
        stats,
        state: State::Idle,
    };
    info!(peer = %fsm.peer, asn = fsm.cfg.peer_asn, "bgp: session starts");
    loop {
        if stop.borrow_and_update().is_some() {
            break;
        }
        fsm.transition(State::Connect);
        fsm.stats.send_modify(|s| s.connect_attempts += 1);
        let attempt = tokio::time::timeout(CONNECT_TIMEOUT, transport::connect(&fsm.cfg));
        let connected = tokio::select! {
            r = attempt => r,
            _ = stop.changed() => break,
        };
        let wait_in = match connected {
            Ok(Ok(stream)) => {
                match Connection::new(&mut fsm, stream) {
                    Ok(mut conn) => {
                        let end = conn.run(&mut desired, &mut stop).await;
                        let up_for = conn.established_at.map(|t| t.elapsed());
                        drop(conn);
                        fsm.connection_ended(up_for, end == End::Stopped);
                        if end == End::Stopped {
                            break;
                        }
                    }
                    Err(e) => fsm.error(format!("connection without a local address: {e}")),
                }
                State::Idle
            }
            Ok(Err(e)) => {
                fsm.error(e.to_string());
                State::Active
            }
            Err(_) => {
                fsm.error(format!("connect timed out after {CONNECT_TIMEOUT:?}"));
                State::Active
            }
        };
        fsm.transition(wait_in);
        let delay = fsm.backoff.next_delay();
        info!(peer = %fsm.peer, "bgp: next connection attempt in {delay:.1?}");
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stop.changed() => break,
        }
    }
    fsm.transition(State::Idle);
    info!(peer = %fsm.peer, "bgp: session stopped");
}

struct Fsm {
    cfg: PeerConfig,
    peer: String,
    stats: watch::Sender<SessionStats>,
    state: State,
    backoff: Backoff,
}

impl Fsm {
    fn transition(&mut self, to: State) {
        if self.state == to {
            return;
        }
        info!(peer = %self.peer, from = %self.state, to = %to, "bgp: session state");
        self.state = to;
        self.stats.send_modify(|s| {
            s.state = to;
            if to == State::Established {
                s.established_since = Some(std::time::Instant::now());
            }
        });
    }

    fn error(&mut self, reason: String) {
        warn!(peer = %self.peer, state = %self.state, error = %reason, "bgp: session error");
        self.stats.send_modify(|s| s.last_error = Some(reason));
    }

    fn connection_ended(&mut self, up_for: Option<Duration>, stopped: bool) {
        if let Some(up) = up_for {
            if !stopped {
                self.stats.send_modify(|s| s.flaps += 1);
            }
            if up >= STABLE_AFTER {
                self.backoff.reset();
            }
        }
        self.stats.send_modify(|s| {
            s.established_since = None;
            s.families.clear();
            s.extended_next_hop = false;
            s.local_address = None;
            s.next_hop_v6 = None;
            s.next_hop_v6_link_local = None;
            s.prefixes_sent = 0;
            s.prefixes_sent_v6 = 0;
            s.hold_time_s = 0;
        });
    }
}

/// How a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Told to stop (Cease sent).
    Stopped,
    /// An error, a NOTIFICATION from the router, or a closed connection.
    Down,
}

/// Marker error: the connection is over (already logged and counted).
struct Down;

enum Event {
    Read(std::io::Result<usize>),
    HoldExpired,
    KeepaliveDue,
    Desired(bool),
    Stop,
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

struct Connection<'a> {
    fsm: &'a mut Fsm,
    rd: OwnedReadHalf,
    wr: OwnedWriteHalf,
    local: SocketAddr,
    buf: Vec<u8>,
    ctx: DecodeContext,
    speaker: Option<Speaker>,
    hold_time: Duration,
    keepalive: Option<Duration>,
    hold_deadline: Option<Instant>,
    keepalive_deadline: Option<Instant>,
    rib: AdjRibOut,
    /// Desired prefixes skipped at the last sync (logged when it changes).
    skipped: usize,
    established_at: Option<Instant>,
    out: Vec<u8>,
}

impl<'a> Connection<'a> {
    fn new(fsm: &'a mut Fsm, stream: TcpStream) -> std::io::Result<Self> {
        let local = stream.local_addr()?;
        fsm.stats
            .send_modify(|s| s.local_address = Some(local.ip()));
        let (rd, wr) = stream.into_split();
        Ok(Connection {
            ctx: DecodeContext {
                four_octet_as: false,
                ibgp: fsm.cfg.is_ibgp(),
                extended_next_hop: false,
            },
            fsm,
            rd,
            wr,
            local,
            buf: Vec::with_capacity(2 * MAX_MESSAGE_LEN),
            speaker: None,
            hold_time: OPEN_HOLD_TIME,
            keepalive: None,
            hold_deadline: None,
            keepalive_deadline: None,
            rib: AdjRibOut::default(),
            skipped: 0,
            established_at: None,
            out: Vec::new(),
        })
    }

    async fn run(
        &mut self,
        desired: &mut watch::Receiver<Desired>,
        stop: &mut watch::Receiver<Option<String>>,
    ) -> End {
        match self.session(desired, stop).await {
            Ok(()) => End::Stopped,
            Err(Down) => End::Down,
        }
    }

    /// One Multiprotocol capability per offered family (RFC 4760 §8),
    /// extended next hop (RFC 8950 §4, IPv6 sessions), route refresh,
    /// 4-octet ASN.
    fn our_capabilities(&self) -> Vec<Capability> {
        let mut caps: Vec<Capability> = self
            .fsm
            .cfg
            .offered_families()
            .into_iter()
            .map(|f| {
                let (afi, safi) = f.afi_safi();
                Capability::Multiprotocol { afi, safi }
            })
            .collect();
        if self.fsm.cfg.offers_extended_next_hop() {
            caps.push(Capability::ExtendedNextHop(vec![
                NextHopTuple::IPV4_UNICAST_OVER_IPV6,
            ]));
        }
        caps.push(Capability::RouteRefresh);
        caps.push(Capability::FourOctetAs(self.fsm.cfg.my_asn));
        caps
    }

    async fn session(
        &mut self,
        desired: &mut watch::Receiver<Desired>,
        stop: &mut watch::Receiver<Option<String>>,
    ) -> Result<(), Down> {
        let cfg = &self.fsm.cfg;
        let open = OpenRepr::new(
            cfg.my_asn,
            cfg.hold_time_s,
            cfg.router_id,
            self.our_capabilities(),
        );
        self.send(&[Message::Open(open)]).await?;
        self.fsm.transition(State::OpenSent);
        self.hold_deadline = Some(Instant::now() + OPEN_HOLD_TIME);
        let mut desired_open = true;
        loop {
            // Every complete message in the buffer, in order.
            loop {
                let len = match frame_len(&self.buf) {
                    Ok(Some(len)) => len,
                    Ok(None) => break,
                    Err(e) => return Err(self.decode_failed(e).await),
                };
                let parsed = Message::parse(&self.buf[..len], self.ctx);
                self.buf.drain(..len);
                self.restart_hold_timer();
                match parsed {
                    Ok(m) => self.handle(m, desired).await?,
                    Err(e) => self.malformed(e).await?,
                }
            }
            let established = self.fsm.state == State::Established;
            let (hold, ka) = (self.hold_deadline, self.keepalive_deadline);
            self.buf.reserve(MAX_MESSAGE_LEN);
            let event = tokio::select! {
                r = self.rd.read_buf(&mut self.buf) => Event::Read(r),
                _ = sleep_until(hold) => Event::HoldExpired,
                _ = sleep_until(ka) => Event::KeepaliveDue,
                r = desired.changed(), if established && desired_open => Event::Desired(r.is_ok()),
                _ = stop.changed() => Event::Stop,
            };
            match event {
                Event::Read(Ok(0)) => {
                    return Err(self.down("the router closed the connection".into()));
                }
                Event::Read(Ok(_)) => {}
                Event::Read(Err(e)) => return Err(self.down(format!("read: {e}"))),
                Event::HoldExpired => {
                    let secs = self.hold_time.as_secs();
                    return Err(self
                        .fail(
                            Notification::hold_timer_expired(),
                            format!("hold timer expired: nothing from the router for {secs} s"),
                        )
                        .await);
                }
                Event::KeepaliveDue => self.send(&[Message::Keepalive]).await?,
                Event::Desired(true) => self.sync(desired).await?,
                Event::Desired(false) => desired_open = false,
                Event::Stop => {
                    let msg = stop.borrow().clone().unwrap_or_default();
                    let n = Notification::cease(cease::ADMINISTRATIVE_SHUTDOWN, &msg);
                    info!(peer = %self.fsm.peer, "bgp: administrative shutdown, sending {n}");
                    self.notify_and_close(n).await;
                    return Ok(());
                }
            }
        }
    }

    fn restart_hold_timer(&mut self) {
        if self.hold_time.is_zero() {
            self.hold_deadline = None;
        } else {
            self.hold_deadline = Some(Instant::now() + self.hold_time);
        }
    }

    async fn handle(
        &mut self,
        msg: Message,
        desired: &mut watch::Receiver<Desired>,
    ) -> Result<(), Down> {
        let state = self.fsm.state;
        match (state, msg) {
            (_, Message::Notification(n)) => {
                warn!(peer = %self.fsm.peer, state = %state, "bgp: NOTIFICATION received: {n}");
                let reason = format!("NOTIFICATION received: {n}");
                self.fsm.stats.send_modify(|s| {
                    s.notifications_received += 1;
                    s.last_notification_received = Some(n);
                    s.last_error = Some(reason);
                });
                Err(Down)
            }
            (State::OpenSent, Message::Open(o)) => {
                self.accept_open(&o).await?;
                self.send(&[Message::Keepalive]).await?;
                self.fsm.transition(State::OpenConfirm);
                Ok(())
            }
            (State::OpenConfirm, Message::Keepalive) => {
                self.fsm.transition(State::Established);
                self.established_at = Some(Instant::now());
                self.sync(desired).await?;
                let eor: Vec<Message> = Family::ALL
                    .into_iter()
                    .filter(|f| self.speaker.as_ref().is_some_and(|s| s.carries(*f)))
                    .map(|f| Message::Update(Box::new(end_of_rib(f))))
                    .collect();
                self.send(&eor).await
            }
            (State::Established, Message::Keepalive) => Ok(()),
            (State::Established, Message::Update(u)) => {
                self.received_update(&u);
                Ok(())
            }
            (State::Established, Message::RouteRefresh(rr)) => {
                let family = Family::from_afi_safi(rr.afi, rr.safi)
                    .filter(|f| self.speaker.as_ref().is_some_and(|s| s.carries(*f)));
                let Some(family) = family else {
                    // RFC 2918 §4: a family not negotiated is ignored.
                    warn!(peer = %self.fsm.peer, afi = rr.afi, safi = rr.safi, "bgp: ROUTE-REFRESH for a family this session does not carry: ignored");
                    return Ok(());
                };
                info!(peer = %self.fsm.peer, %family, "bgp: ROUTE-REFRESH: sending every route of the family again");
                self.rib.clear_family(family);
                self.sync(desired).await
            }
            (state, other) => {
                let subcode = match state {
                    State::OpenSent => fsm_sub::UNEXPECTED_IN_OPENSENT,
                    State::OpenConfirm => fsm_sub::UNEXPECTED_IN_OPENCONFIRM,
                    State::Established => fsm_sub::UNEXPECTED_IN_ESTABLISHED,
                    _ => fsm_sub::UNSPECIFIED,
                };
                let reason = format!("unexpected message type {} in {state}", other.msg_type());
                Err(self.fail(Notification::fsm(subcode), reason).await)
            }
        }
    }

    fn received_update(&mut self, u: &UpdateRepr) {
        let announced = u.announced().count() as u64;
        debug!(peer = %self.fsm.peer, announced, withdrawn = u.withdrawals().count(), "bgp: UPDATE received (ignored: we keep no routes)");
        for e in &u.discarded {
            warn!(peer = %self.fsm.peer, "bgp: malformed attribute discarded (RFC 7606): {e}");
        }
        let malformed = u64::from(!u.discarded.is_empty());
        self.fsm.stats.send_modify(|s| {
            s.updates_received += 1;
            s.prefixes_received += announced;
            s.updates_malformed += malformed;
        });
    }

    /// Checks the router's OPEN against the configuration and negotiates.
    async fn accept_open(&mut self, o: &OpenRepr) -> Result<(), Down> {
        let cfg = &self.fsm.cfg;
        let offered = cfg.offered_families();
        let families: Vec<Family> = offered
            .iter()
            .copied()
            .filter(|f| {
                let (afi, safi) = f.afi_safi();
                o.supports(afi, safi)
            })
            .collect();
        let refuse = if o.asn() != cfg.peer_asn {
            Some((
                open_sub::BAD_PEER_AS,
                Vec::new(),
                format!(
                    "the router is AS {}, configured peer_asn is {}",
                    o.asn(),
                    cfg.peer_asn
                ),
            ))
        } else if cfg.is_ibgp() && o.bgp_id == cfg.router_id {
            Some((
                open_sub::BAD_BGP_IDENTIFIER,
                Vec::new(),
                format!("the iBGP router has our BGP identifier {}", o.bgp_id),
            ))
        } else if self.local.is_ipv4()
            && offered.contains(&Family::Ipv4Unicast)
            && !o.supports(AFI_IPV4, SAFI_UNICAST)
        {
            // We exist to announce IPv4 VIPs: the capability data is the
            // one we need (RFC 5492 §3).
            Some((
                open_sub::UNSUPPORTED_CAPABILITY,
                vec![1, 4, 0, 1, 0, 1],
                "the router does not take IPv4 unicast".to_string(),
            ))
        } else if families.is_empty() {
            // Nothing in common: the data is every Multiprotocol
            // capability we offered (RFC 5492 §3).
            let mut data = Vec::new();
            for f in &offered {
                let (afi, safi) = f.afi_safi();
                data.extend_from_slice(&[1, 4]);
                data.extend_from_slice(&afi.to_be_bytes());
                data.extend_from_slice(&[0, safi]);
            }
            Some((
                open_sub::UNSUPPORTED_CAPABILITY,
                data,
                format!(
                    "the router offers none of the families we offer ({})",
                    offered
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ))
        } else {
            None
        };
        if let Some((subcode, data, reason)) = refuse {
            let n = Notification::new(crate::wire::notification::code::OPEN_MESSAGE, subcode, data);
            return Err(self.fail(n, reason).await);
        }
        let hold_s = cfg.hold_time_s.min(o.hold_time_s);
        self.hold_time = Duration::from_secs(u64::from(hold_s));
        self.keepalive = (hold_s > 0).then(|| {
            let third = (hold_s / 3).max(1);
            Duration::from_secs(u64::from(cfg.keepalive_s.unwrap_or(third).clamp(1, third)))
        });
        self.keepalive_deadline = self.keepalive.map(|k| Instant::now() + k);
        let (my_asn, ibgp) = (cfg.my_asn, cfg.is_ibgp());
        self.restart_hold_timer();
        self.ctx.four_octet_as = o.four_octet_as().is_some();
        let local = self.local.ip();
        let cfg = &self.fsm.cfg;
        let v4 = families.contains(&Family::Ipv4Unicast);
        let v6 = families.contains(&Family::Ipv6Unicast);
        // RFC 8950 §4: only when both OPENs carry the tuple.
        let extended_next_hop = v4
            && cfg.offers_extended_next_hop()
            && o.extended_next_hop(NextHopTuple::IPV4_UNICAST_OVER_IPV6);
        self.ctx.extended_next_hop = extended_next_hop;
        let next_hop_v4 = match local {
            IpAddr::V4(a) if v4 => Some(a),
            _ => None,
        };
        let ipv4_over_v6 = extended_next_hop && next_hop_v4.is_none();
        let has_v6_routes = v6 || ipv4_over_v6;
        let next_hop_v6 = has_v6_routes.then(|| cfg.next_hop_v6_for(local)).flatten();
        let next_hop_v6_link_local = has_v6_routes
            .then(|| cfg.next_hop_v6_link_local_for(local))
            .flatten();
        self.speaker = Some(Speaker {
            my_asn,
            ibgp,
            ctx: self.ctx,
            next_hop_v4,
            next_hop_v6,
            next_hop_v6_link_local,
            ipv6_unicast: v6,
            ipv4_over_v6,
        });
        let shown: Vec<String> = families.iter().map(ToString::to_string).collect();
        info!(
            peer = %self.fsm.peer,
            router_id = %o.bgp_id,
            hold_time_s = hold_s,
            four_octet_as = self.ctx.four_octet_as,
            families = %shown.join(","),
            extended_next_hop,
            "bgp: OPEN accepted"
        );
        if v4 && next_hop_v4.is_none() && !ipv4_over_v6 {
            warn!(peer = %self.fsm.peer, "bgp: IPv4 unicast over an IPv6 session without the extended next hop (RFC 8950) on both sides: no IPv4 route is sent on this session");
        }
        for f in offered.iter().filter(|f| !families.contains(f)) {
            warn!(peer = %self.fsm.peer, family = %f, "bgp: the router does not offer {f}: none of its routes are sent on this session");
        }
        self.fsm.stats.send_modify(|s| {
            s.hold_time_s = hold_s;
            s.families = families;
            s.extended_next_hop = extended_next_hop;
            s.next_hop_v6 = next_hop_v6;
            s.next_hop_v6_link_local = next_hop_v6_link_local;
        });
        Ok(())
    }

    /// Sends the difference between the router's routes and the desired
    /// ones.
    async fn sync(&mut self, desired: &mut watch::Receiver<Desired>) -> Result<(), Down> {
        let Desired { generation, routes } = desired.borrow_and_update().clone();
        let Some(speaker) = self.speaker.as_ref() else {
            return Ok(());
        };
        let mut delta = self.rib.delta(&routes, speaker);
        if delta.skipped != self.skipped {
            self.skipped = delta.skipped;
            if delta.skipped > 0 {
                warn!(peer = %self.fsm.peer, skipped = delta.skipped, "bgp: prefixes of a family this session does not carry (not negotiated, or no next hop of that family) not sent");
            }
        }
        let skipped = delta.skipped as u64;
        let updates: Vec<Message> = std::mem::take(&mut delta.updates)
            .into_iter()
            .map(|u| Message::Update(Box::new(u)))
            .collect();
        let (announced, withdrawn) = (delta.announced, delta.withdrawn);
        self.send(&updates).await?;
        self.rib.commit(delta);
        let total = self.rib.len() as u64;
        let total_v6 = self.rib.len_of(Family::Ipv6Unicast) as u64;
        if !updates.is_empty() {
            info!(peer = %self.fsm.peer, announced, withdrawn, updates = updates.len(), total, "bgp: routes sent");
        }
        self.fsm.stats.send_modify(|s| {
            s.prefixes_sent = total;
            s.prefixes_sent_v6 = total_v6;
            s.prefixes_skipped = skipped;
            s.synced_generation = generation;
        });
        Ok(())
    }

    /// Writes `msgs` in one go (bounded by the hold time, so a router that
    /// stops reading cannot wedge us).
    async fn send(&mut self, msgs: &[Message]) -> Result<(), Down> {
        if msgs.is_empty() {
            return Ok(());
        }
        self.out.clear();
        let (mut updates, mut keepalives) = (0, false);
        for m in msgs {
            m.emit(self.ctx, &mut self.out);
            match m {
                Message::Update(_) => updates += 1,
                Message::Keepalive => keepalives = true,
                _ => {}
            }
        }
        let limit = if self.hold_time.is_zero() {
            OPEN_HOLD_TIME
        } else {
            self.hold_time
        };
        match tokio::time::timeout(limit, self.wr.write_all(&self.out)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(self.down(format!("write: {e}"))),
            Err(_) => {
                return Err(self.down(format!(
                    "write blocked for {limit:?}: the router does not read"
                )));
            }
        }
        if updates > 0 || keepalives {
            self.keepalive_deadline = self.keepalive.map(|k| Instant::now() + k);
        }
        if updates > 0 {
            self.fsm.stats.send_modify(|s| s.updates_sent += updates);
        }
        Ok(())
    }

    /// A message that could not be decoded: RFC 7606 says whether it ends
    /// the session.
    async fn malformed(&mut self, e: DecodeError) -> Result<(), Down> {
        if e.action != ErrorAction::SessionReset && self.fsm.state == State::Established {
            warn!(peer = %self.fsm.peer, action = ?e.action, "bgp: malformed UPDATE kept the session (RFC 7606): {e}");
            self.fsm.stats.send_modify(|s| {
                s.updates_received += 1;
                s.updates_malformed += 1;
            });
            return Ok(());
        }
        Err(self.decode_failed(e).await)
    }

    async fn decode_failed(&mut self, e: DecodeError) -> Down {
        let reason = format!("malformed message: {}", e.reason);
        self.fail(e.notification, reason).await
    }

    /// Sends `n`, closes, records the error.
    async fn fail(&mut self, n: Notification, reason: String) -> Down {
        warn!(peer = %self.fsm.peer, state = %self.fsm.state, "bgp: {reason}; sending {n}");
        self.fsm
            .stats
            .send_modify(|s| s.last_error = Some(format!("{reason} (sent {})", n.describe())));
        self.notify_and_close(n).await;
        Down
    }

    /// Sends a NOTIFICATION, half-closes, and waits briefly for the router
    /// to close its side, so the NOTIFICATION is not lost to a reset.
    async fn notify_and_close(&mut self, n: Notification) {
        let bytes = Message::Notification(n.clone()).to_bytes(self.ctx);
        let _ = tokio::time::timeout(CLOSE_GRACE, async {
            self.wr.write_all(&bytes).await?;
            self.wr.shutdown().await?;
            let mut sink = [0u8; 4096];
            while self.rd.read(&mut sink).await? > 0 {}
            Ok::<(), std::io::Error>(())
        })
        .await;
        self.fsm.stats.send_modify(|s| {
            s.notifications_sent += 1;
            s.last_notification_sent = Some(n);
        });
    }

    /// The connection is gone without a NOTIFICATION from us.
    fn down(&mut self, reason: String) -> Down {
        self.fsm.error(reason);
        Down
    }
}
