//! Bad input from a peer: a raw TCP listener in the test speaks a valid
//! OPEN (and KEEPALIVE), then garbage or a protocol violation; the speaker
//! must answer with the NOTIFICATION RFC 4271 §6 prescribes, log it, count
//! it and close — or, for what RFC 7606 says to treat as withdraw, keep
//! the session. Loopback only: needs no root.

mod support;

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use portico_bgp::wire::{Capability, DecodeContext, MARKER, Message, Notification, OpenRepr};
use portico_bgp::{PeerConfig, Session, State};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

const PEER_ASN: u32 = 65000;
const MY_ASN: u32 = 65001;

struct FakePeer {
    stream: TcpStream,
}

impl FakePeer {
    /// Reads one message (raw bytes, header included).
    async fn read_msg(&mut self) -> Option<Vec<u8>> {
        let mut head = [0u8; 19];
        tokio::time::timeout(Duration::from_secs(10), self.stream.read_exact(&mut head))
            .await
            .expect("a message within 10 s")
            .ok()?;
        assert_eq!(head[..16], MARKER);
        let len = usize::from(u16::from_be_bytes([head[16], head[17]]));
        let mut body = vec![0u8; len - 19];
        self.stream.read_exact(&mut body).await.ok()?;
        Some([&head[..], &body].concat())
    }

    async fn read_parsed(&mut self) -> Message {
        let bytes = self.read_msg().await.expect("a message");
        Message::parse(&bytes, DecodeContext::default()).expect("the speaker sends valid messages")
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.stream
            .write_all(bytes)
            .await
            .expect("write to the speaker");
    }

    /// Reads until a KEEPALIVE (skipping UPDATEs): the session still talks.
    async fn expect_keepalive(&mut self) {
        loop {
            match self.read_parsed().await {
                Message::Keepalive => return,
                Message::Update(_) => continue,
                other => panic!("{other:?}"),
            }
        }
    }

    /// Reads until a NOTIFICATION (skipping KEEPALIVEs/UPDATEs), then
    /// expects the speaker to close.
    async fn expect_notification(&mut self) -> Notification {
        loop {
            match self.read_parsed().await {
                Message::Notification(n) => {
                    // As a router does: close our side on a NOTIFICATION.
                    let _ = self.stream.shutdown().await;
                    let mut rest = Vec::new();
                    let eof = tokio::time::timeout(
                        Duration::from_secs(5),
                        self.stream.read_to_end(&mut rest),
                    )
                    .await;
                    assert!(
                        matches!(eof, Ok(Ok(0))),
                        "the speaker closes after its NOTIFICATION"
                    );
                    return n;
                }
                Message::Keepalive | Message::Update(_) => continue,
                other => panic!("unexpected {other:?}"),
            }
        }
    }
}

fn open_bytes(asn: u32, hold_time_s: u16) -> Vec<u8> {
    open_with_families(asn, hold_time_s, &[(1, 1)])
}

/// An OPEN offering these AFI/SAFIs (RFC 4760 §8).
fn open_with_families(asn: u32, hold_time_s: u16, families: &[(u16, u8)]) -> Vec<u8> {
    Message::Open(OpenRepr::new(
        asn,
        hold_time_s,
        Ipv4Addr::new(10, 0, 0, 1),
        families
            .iter()
            .map(|&(afi, safi)| Capability::Multiprotocol { afi, safi })
            .collect(),
    ))
    .to_bytes(DecodeContext::default())
}

fn keepalive() -> Vec<u8> {
    Message::Keepalive.to_bytes(DecodeContext::default())
}

/// A speaker connected to a fake peer; `established` also exchanges OPEN
/// and KEEPALIVE.
async fn setup(established: bool) -> (Session, FakePeer) {
    setup_with(established, |_| {}).await
}

/// [`setup`] with `edit` applied to the speaker's configuration.
async fn setup_with(established: bool, edit: impl FnOnce(&mut PeerConfig)) -> (Session, FakePeer) {
    support::logs();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let mut cfg = PeerConfig::new(
        "127.0.0.1".parse().unwrap(),
        PEER_ASN,
        MY_ASN,
        Ipv4Addr::new(10, 0, 0, 2),
    );
    cfg.port = listener.local_addr().unwrap().port();
    cfg.hold_time_s = 3;
    edit(&mut cfg);
    // Loopback: a TTL of 1 still reaches 127.0.0.1.
    let session = Session::spawn(cfg);
    let (stream, _) = tokio::time::timeout(Duration::from_secs(5), listener.accept())
        .await
        .expect("the speaker connects")
        .expect("accept");
    let mut peer = FakePeer { stream };
    let Message::Open(open) = peer.read_parsed().await else {
        panic!("OPEN first")
    };
    assert_eq!(open.asn(), MY_ASN);
    assert_eq!(open.hold_time_s, 3);
    assert!(open.has(&Capability::FourOctetAs(MY_ASN)));
    if established {
        peer.send(&open_bytes(PEER_ASN, 3)).await;
        peer.send(&keepalive()).await;
        assert_eq!(peer.read_parsed().await, Message::Keepalive);
        session
            .wait_established(Duration::from_secs(5))
            .await
            .expect("Established");
    }
    (session, peer)
}

fn code(n: &Notification) -> (u8, u8) {
    (n.code, n.subcode)
}

async fn assert_counted(session: &Session, n: &Notification, log_part: &str) {
    let s = session
        .wait_for(Duration::from_secs(5), |s| {
            s.notifications_sent >= 1 && s.state != State::Established
        })
        .await
        .expect("counted");
    assert_eq!(s.last_notification_sent.as_ref(), Some(n));
    assert_eq!(s.flaps, 1, "Established → down is a flap");
    let err = s.last_error.clone().unwrap_or_default();
    assert!(
        err.contains(log_part),
        "last_error {err:?} names {log_part:?}"
    );
    let log = support::log_text();
    assert!(
        log.contains("bgp: malformed message")
            || log.contains("bgp: hold timer")
            || log.contains("bgp: unexpected"),
        "a log line for the error: {log}"
    );
}

#[tokio::test]
async fn garbage_after_open_is_connection_not_synchronized() {
    let (session, mut peer) = setup(true).await;
    peer.send(b"GET / HTTP/1.1\r\nHost: portico\r\n\r\n").await;
    let n = peer.expect_notification().await;
    assert_eq!(
        code(&n),
        (1, 1),
        "Message Header Error / Connection Not Synchronized"
    );
    assert_counted(&session, &n, "marker").await;
}

#[tokio::test]
async fn bad_length_is_bad_message_length_with_the_length() {
    let (session, mut peer) = setup(true).await;
    let mut m = MARKER.to_vec();
    m.extend_from_slice(&5000u16.to_be_bytes());
    m.push(2);
    peer.send(&m).await;
    let n = peer.expect_notification().await;
    assert_eq!(code(&n), (1, 2));
    assert_eq!(n.data, 5000u16.to_be_bytes());
    assert_counted(&session, &n, "length").await;
}

#[tokio::test]
async fn unknown_type_is_bad_message_type() {
    let (session, mut peer) = setup(true).await;
    let mut m = MARKER.to_vec();
    m.extend_from_slice(&[0, 19, 42]);
    peer.send(&m).await;
    let n = peer.expect_notification().await;
    assert_eq!((code(&n), n.data.as_slice()), ((1, 3), &[42u8][..]));
    assert_counted(&session, &n, "type 42").await;
}

#[tokio::test]
async fn overrunning_update_is_malformed_attribute_list() {
    let (session, mut peer) = setup(true).await;
    let mut m = MARKER.to_vec();
    // Withdrawn routes length 200 in a 4-byte body.
    m.extend_from_slice(&[0, 23, 2, 0, 200, 0, 0]);
    peer.send(&m).await;
    let n = peer.expect_notification().await;
    assert_eq!(
        code(&n),
        (3, 1),
        "UPDATE Message Error / Malformed Attribute List"
    );
    assert_counted(&session, &n, "withdrawn routes length").await;
}

#[tokio::test]
async fn bad_origin_is_treat_as_withdraw_and_keeps_the_session() {
    let (session, mut peer) = setup(true).await;
    let attrs: &[u8] = &[
        0x40, 1, 1, 7, // ORIGIN 7
        0x40, 2, 6, 2, 1, 0, 0, 0xfd, 0xe8, // AS_PATH 65000
        0x40, 3, 4, 127, 0, 0, 1, // NEXT_HOP
    ];
    let mut m = MARKER.to_vec();
    let len = 19 + 4 + attrs.len() + 4;
    m.extend_from_slice(&(len as u16).to_be_bytes());
    m.push(2);
    m.extend_from_slice(&[0, 0, 0, attrs.len() as u8]);
    m.extend_from_slice(attrs);
    m.extend_from_slice(&[24, 192, 0, 2]);
    peer.send(&m).await;
    let s = session
        .wait_for(Duration::from_secs(5), |s| s.updates_malformed == 1)
        .await
        .expect("counted as malformed");
    assert_eq!(s.state, State::Established, "RFC 7606: no session reset");
    assert_eq!(s.notifications_sent, 0);
    assert!(support::log_text().contains("kept the session (RFC 7606)"));
    // Still talking: a KEEPALIVE comes within the keepalive interval (1 s)
    // (after the End-of-RIB).
    peer.expect_keepalive().await;
    session.shutdown("test over").await;
}

#[tokio::test]
async fn unexpected_open_in_established_is_an_fsm_error() {
    let (session, mut peer) = setup(true).await;
    peer.send(&open_bytes(PEER_ASN, 3)).await;
    let n = peer.expect_notification().await;
    assert_eq!(
        code(&n),
        (5, 3),
        "FSM Error / Unexpected Message in Established"
    );
    assert_counted(&session, &n, "unexpected message type 1 in Established").await;
}

#[tokio::test]
async fn hold_time_one_is_unacceptable() {
    let (session, mut peer) = setup(false).await;
    let mut open = open_bytes(PEER_ASN, 3);
    open[22..24].copy_from_slice(&1u16.to_be_bytes());
    peer.send(&open).await;
    let n = peer.expect_notification().await;
    assert_eq!(
        code(&n),
        (2, 6),
        "OPEN Message Error / Unacceptable Hold Time"
    );
    let s = session
        .wait_for(Duration::from_secs(5), |s| s.notifications_sent == 1)
        .await
        .unwrap();
    assert_eq!(s.flaps, 0, "never Established: no flap");
}

#[tokio::test]
async fn wrong_peer_asn_is_bad_peer_as() {
    let (session, mut peer) = setup(false).await;
    peer.send(&open_bytes(65099, 3)).await;
    let n = peer.expect_notification().await;
    assert_eq!(code(&n), (2, 2), "OPEN Message Error / Bad Peer AS");
    let s = session
        .wait_for(Duration::from_secs(5), |s| s.notifications_sent == 1)
        .await
        .unwrap();
    assert!(s.last_error.unwrap().contains("AS 65099"));
}

#[tokio::test]
async fn silent_peer_expires_the_hold_timer() {
    let (session, mut peer) = setup(true).await;
    let start = Instant::now();
    // Read (and drop) our KEEPALIVEs; send nothing.
    let n = peer.expect_notification().await;
    let waited = start.elapsed();
    assert_eq!(code(&n), (4, 0), "Hold Timer Expired");
    assert!(
        waited >= Duration::from_millis(2500) && waited < Duration::from_secs(5),
        "after the 3 s hold time, not {waited:?}"
    );
    assert_counted(&session, &n, "hold timer expired").await;
}

#[tokio::test]
async fn shutdown_sends_cease_with_the_shutdown_communication() {
    let (session, mut peer) = setup(true).await;
    let stats = tokio::spawn(session.shutdown("maintenance"));
    let n = peer.expect_notification().await;
    assert_eq!(code(&n), (6, 2), "Cease / Administrative Shutdown");
    assert_eq!(n.shutdown_message(), Some("maintenance"));
    let s = stats.await.unwrap();
    assert_eq!(s.state, State::Idle);
    assert_eq!(s.flaps, 0, "a shutdown is not a flap");
}

#[tokio::test]
async fn routes_are_sent_once_established_and_diffed() {
    use portico_bgp::{Prefix, RouteAttributes, Routes};
    let (session, mut peer) = setup(false).await;
    let attrs = RouteAttributes::new(None, None, [(65001 << 16) | 7]);
    let routes: Routes = ["192.0.2.1/32", "192.0.2.2/32", "198.51.100.0/24"]
        .iter()
        .map(|p| (p.parse::<Prefix>().unwrap(), attrs.clone()))
        .collect();
    let generation = session.set_routes(routes.clone());
    // Nothing before Established.
    peer.send(&open_bytes(PEER_ASN, 3)).await;
    assert_eq!(peer.read_parsed().await, Message::Keepalive);
    peer.send(&keepalive()).await;
    let Message::Update(u) = peer.read_parsed().await else {
        panic!("UPDATE after Established")
    };
    assert_eq!(
        u.nlri.len(),
        3,
        "one UPDATE for three prefixes sharing attributes"
    );
    let a = &u.attributes;
    assert_eq!(
        a.next_hop,
        Some(Ipv4Addr::LOCALHOST),
        "NEXT_HOP is our address"
    );
    assert_eq!(a.as_path.as_ref().unwrap().segments[0].asns, [MY_ASN]);
    assert_eq!(a.communities, [(65001 << 16) | 7]);
    assert_eq!(a.local_pref, None, "eBGP");
    // End-of-RIB.
    let Message::Update(eor) = peer.read_parsed().await else {
        panic!("End-of-RIB")
    };
    assert_eq!(*eor, portico_bgp::wire::UpdateRepr::end_of_rib());
    session
        .wait_synced(generation, Duration::from_secs(5))
        .await
        .unwrap();
    // Withdraw one.
    let mut fewer = routes;
    fewer.remove(&"192.0.2.2/32".parse().unwrap());
    session.set_routes(fewer);
    let u = loop {
        match peer.read_parsed().await {
            Message::Update(u) => break u,
            Message::Keepalive => continue,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(u.withdrawn, ["192.0.2.2/32".parse::<Prefix>().unwrap()]);
    assert!(u.nlri.is_empty());
    let s = session.stats();
    assert_eq!((s.prefixes_sent, s.updates_sent), (2, 3));
}

/// An UPDATE with ORIGIN, AS_PATH 65000 and `mp` (a whole raw attribute).
fn update_with_mp(mp: &[u8]) -> Vec<u8> {
    let mut attrs = vec![0x40, 1, 1, 0, 0x40, 2, 6, 2, 1, 0, 0, 0xfd, 0xe8];
    attrs.extend_from_slice(mp);
    let mut m = MARKER.to_vec();
    m.extend_from_slice(&((19 + 4 + attrs.len()) as u16).to_be_bytes());
    m.push(2);
    m.extend_from_slice(&[0, 0]);
    m.extend_from_slice(&(attrs.len() as u16).to_be_bytes());
    m.extend_from_slice(&attrs);
    m
}

/// MP_REACH_NLRI of IPv6 unicast announcing 2001:db8:100::10/128 via
/// `next_hop` (raw bytes, any length).
fn mp_reach_v6(next_hop: &[u8]) -> Vec<u8> {
    let mut v = vec![0, 2, 1, next_hop.len() as u8];
    v.extend_from_slice(next_hop);
    v.push(0);
    v.push(128);
    v.extend_from_slice(&"2001:db8:100::10".parse::<Ipv6Addr>().unwrap().octets());
    let mut a = vec![0x80, 14, v.len() as u8];
    a.extend_from_slice(&v);
    a
}

#[tokio::test]
async fn mp_reach_with_a_bad_next_hop_length_is_an_optional_attribute_error() {
    let (session, mut peer) = setup(true).await;
    // 20 bytes: neither 16 nor 32 (RFC 2545 §3); RFC 7606 §7.11 resets.
    let mp = mp_reach_v6(&[0x20; 20]);
    peer.send(&update_with_mp(&mp)).await;
    let n = peer.expect_notification().await;
    assert_eq!(
        code(&n),
        (3, 9),
        "UPDATE Message Error / Optional Attribute Error"
    );
    assert_eq!(n.data, mp, "the data is the attribute (RFC 4760 §7)");
    assert_counted(&session, &n, "next hop of 20 bytes").await;
}

#[tokio::test]
async fn mp_reach_with_an_impossible_next_hop_is_treat_as_withdraw() {
    let (session, mut peer) = setup(true).await;
    // A link-local address in the global slot: RFC 2545 §3 forbids it;
    // semantic next hop errors keep the session (RFC 4271 §6.3, RFC 7606).
    let ll = "fe80::1".parse::<Ipv6Addr>().unwrap().octets();
    peer.send(&update_with_mp(&mp_reach_v6(&ll))).await;
    let s = session
        .wait_for(Duration::from_secs(5), |s| s.updates_malformed == 1)
        .await
        .expect("counted as malformed");
    assert_eq!((s.state, s.notifications_sent), (State::Established, 0));
    // Still talking.
    peer.expect_keepalive().await;
    session.shutdown("test over").await;
}

#[tokio::test]
async fn ipv6_routes_go_in_mp_reach_with_their_end_of_rib_and_refresh() {
    use portico_bgp::wire::{AFI_IPV6, UpdateRepr};
    use portico_bgp::{Family, Prefix, RouteAttributes, Routes};
    let next_hop: Ipv6Addr = "2001:db8::2".parse().unwrap();
    let (session, mut peer) = setup_with(false, |c| c.next_hop_v6 = Some(next_hop)).await;
    let attrs = RouteAttributes::new(None, None, [(65001 << 16) | 7]);
    let v4: Prefix = "192.0.2.1/32".parse().unwrap();
    let v6: Prefix = "2001:db8:100::10/128".parse().unwrap();
    let routes: Routes = [(v4, attrs.clone()), (v6, attrs.clone())].into();
    session.set_routes(routes.clone());
    peer.send(&open_with_families(PEER_ASN, 3, &[(1, 1), (2, 1)]))
        .await;
    assert_eq!(peer.read_parsed().await, Message::Keepalive);
    peer.send(&keepalive()).await;
    let mut updates = Vec::new();
    while updates.len() < 4 {
        match peer.read_parsed().await {
            Message::Update(u) => updates.push(*u),
            Message::Keepalive => continue,
            other => panic!("{other:?}"),
        }
    }
    // IPv4 in the NLRI field, IPv6 in MP_REACH_NLRI with the configured
    // next hop and no NEXT_HOP attribute, then both End-of-RIBs.
    assert_eq!(updates[0].nlri, [v4]);
    let mp = updates[1].attributes.mp_reach.as_ref().expect("MP_REACH");
    assert_eq!((mp.afi, mp.nlri.as_slice()), (AFI_IPV6, &[v6][..]));
    assert_eq!(mp.next_hop, next_hop.octets());
    assert_eq!(updates[1].attributes.next_hop, None);
    assert_eq!(updates[1].attributes.communities, [(65001 << 16) | 7]);
    assert_eq!(updates[2], UpdateRepr::end_of_rib());
    let eor6 = updates[3].attributes.mp_unreach.as_ref().expect("EoR");
    assert_eq!((eor6.afi, eor6.safi, eor6.withdrawn.len()), (2, 1, 0));
    let s = session.stats();
    assert_eq!(s.families, [Family::Ipv4Unicast, Family::Ipv6Unicast]);
    assert_eq!((s.prefixes_sent, s.prefixes_sent_v6), (2, 1));
    // ROUTE-REFRESH of IPv6 unicast: the IPv6 route alone again.
    peer.send(
        &Message::RouteRefresh(portico_bgp::wire::RouteRefresh { afi: 2, safi: 1 })
            .to_bytes(DecodeContext::default()),
    )
    .await;
    let next_update = async |peer: &mut FakePeer| loop {
        match peer.read_parsed().await {
            Message::Update(u) => break *u,
            Message::Keepalive => continue,
            other => panic!("{other:?}"),
        }
    };
    let u = next_update(&mut peer).await;
    assert!(u.nlri.is_empty(), "no IPv4 route: {u:?}");
    assert_eq!(u.attributes.mp_reach.map(|r| r.nlri), Some(vec![v6]));
    // Withdrawn in MP_UNREACH_NLRI.
    let mut fewer = routes;
    fewer.remove(&v6);
    session.set_routes(fewer);
    let u = next_update(&mut peer).await;
    assert_eq!(u.attributes.mp_unreach.map(|r| r.withdrawn), Some(vec![v6]));
    assert!(u.withdrawn.is_empty() && u.nlri.is_empty());
    session.shutdown("test over").await;
}

#[tokio::test]
async fn no_family_in_common_is_unsupported_capability() {
    let (session, mut peer) = setup_with(false, |c| {
        c.families = Some(vec![portico_bgp::Family::Ipv6Unicast]);
        c.next_hop_v6 = Some("2001:db8::2".parse().unwrap());
    })
    .await;
    peer.send(&open_bytes(PEER_ASN, 3)).await;
    let n = peer.expect_notification().await;
    assert_eq!(
        code(&n),
        (2, 7),
        "OPEN Message Error / Unsupported Capability"
    );
    // The capability we need (RFC 5492 §3): Multiprotocol, AFI 2, SAFI 1.
    assert_eq!(n.data, [1, 4, 0, 2, 0, 1]);
    let s = session
        .wait_for(Duration::from_secs(5), |s| s.notifications_sent >= 1)
        .await
        .expect("counted");
    assert!(
        s.last_error.unwrap_or_default().contains("ipv6-unicast"),
        "names what we offered"
    );
    session.shutdown("test over").await;
}
