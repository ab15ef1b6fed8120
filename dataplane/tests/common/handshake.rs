//! The SYN proxy's handshake through the fixture, step by step, in either
//! family ([`Ends`]): the cookie SYN-ACK, the backend SYN
//! its ACK opens, the backend's SYN-ACK (the splice: an ACK to the backend
//! and a window update to the client) and data both ways. Every step
//! checks the frames sent byte for byte against frames built from scratch.
//!
//! The connection: the client (`CLIENT`/`CLIENT6`, [`CPORT`]) to the VIP's
//! port 80, its ISN [`ISN`]; the backend's ISN [`BACKEND_ISN`]; the
//! client's window after the handshake [`CLIENT_WINDOW`].

use super::ipv6::*;
use super::*;
use dataplane::conntrack::{Flow, TcpState};
use dataplane::flow::FlowKey6;
use dataplane::packet::Verdict;
use dataplane::wire::tcp::flags as F;
use std::net::IpAddr;

pub const ISN: u32 = 1_000_000;
pub const BACKEND_ISN: u32 = 7_000_000;
/// The (unscaled) window of the client's ACKs.
pub const CLIENT_WINDOW: u16 = 502;
/// The window scale the gateway announces to the client.
pub const OUR_WSCALE: u8 = 7;

/// An end of a TCP connection: its MAC and its address and port.
pub type End = (MacAddr, (IpAddr, u16));

/// One family's ends of the fixture's proxied connection: the frames each
/// end sends or should receive (hop limit/TTL as given), and the flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ends {
    /// IPv4: the fixture's `web` on VIP:80.
    V4,
    /// IPv6: `web6` on VIP6:80.
    V6,
}

pub use Ends::{V4, V6};

/// What the handshake steps check of the client's flow.
#[derive(Clone, Copy, Debug)]
pub struct FlowView {
    pub syn_proxied: bool,
    pub state: Option<TcpState>,
    /// The backend (the reply key's source) and the SNAT tuple (its
    /// destination).
    pub backend: (IpAddr, u16),
    pub snat: (IpAddr, u16),
}

impl<A: dataplane::flow::IpFamily + Into<IpAddr>> From<&Flow<A>> for FlowView {
    fn from(f: &Flow<A>) -> Self {
        let r = f.reply();
        FlowView {
            syn_proxied: f.syn_proxied(),
            state: f.tcp_state(),
            backend: (r.src_ip.into(), r.src_port),
            snat: (r.dst_ip.into(), r.dst_port),
        }
    }
}

/// The IPv6 flow of `key` (either direction), if tracked.
pub fn flow6(gw: &Gateway, key: &FlowKey6) -> Option<Flow<std::net::Ipv6Addr>> {
    let t = gw.worker.pipeline().ipv6()?;
    let (id, _) = t.ct.lookup(key, t.ct.hash(key))?;
    Some(*t.ct.flow(id))
}

/// The original key of the client's IPv6 flow to VIP6:80.
pub fn client_key6() -> FlowKey6 {
    FlowKey6::new(Proto::Tcp, CLIENT6, CPORT, VIP6, 80)
}

impl Ends {
    /// An Ethernet/IP/TCP frame built from scratch (both ends of one
    /// family).
    #[allow(clippy::too_many_arguments)]
    fn frame(
        from: End,
        to: End,
        flags: u8,
        (seq, ack): (u32, u32),
        w: u16,
        o: &[u8],
        d: &[u8],
        hop: u8,
    ) -> Vec<u8> {
        match (from.1.0, to.1.0) {
            (IpAddr::V4(s), IpAddr::V4(t)) => tcp(
                (from.0, to.0),
                (s, from.1.1),
                (t, to.1.1),
                flags,
                seq,
                ack,
                w,
                o,
                d,
                hop,
            ),
            (IpAddr::V6(s), IpAddr::V6(t)) => {
                let (src, dst) = ((s, from.1.1), (t, to.1.1));
                tcp6((from.0, to.0), src, dst, flags, (seq, ack), w, o, d, hop)
            }
            _ => panic!("ends of two families"),
        }
    }

    /// The client (its router's MAC) and the VIP's port 80 (the
    /// gateway's outside MAC).
    fn client_and_vip(self) -> (End, End) {
        match self {
            V4 => (
                (ROUTER_MAC, (CLIENT.into(), CPORT)),
                (OUT_MAC, (VIP.into(), 80)),
            ),
            V6 => (
                (CLIENT_MAC6, (CLIENT6.into(), CPORT)),
                (OUT_MAC, (VIP6.into(), 80)),
            ),
        }
    }

    /// The client's flow, if tracked.
    pub fn flow(self, gw: &Gateway) -> Option<FlowView> {
        match self {
            V4 => gw
                .flow(Proto::Tcp, CLIENT, CPORT, VIP, 80)
                .as_ref()
                .map(FlowView::from),
            V6 => flow6(gw, &client_key6()).as_ref().map(FlowView::from),
        }
    }

    /// The backend of the client's flow and the flow's SNAT tuple (the
    /// gateway's inside MAC).
    fn backend_and_snat(self, gw: &Gateway) -> (End, End) {
        let f = self.flow(gw).expect("the client's flow");
        let mac = match f.backend.0 {
            IpAddr::V4(a) => backend_mac(a),
            IpAddr::V6(a) => backend6_mac_of(a),
        };
        ((mac, f.backend), (IN_MAC, f.snat))
    }

    /// The sequence number of a frame of this family.
    pub fn seq_of(self, frame: &[u8]) -> u32 {
        match self {
            V4 => seq_of(frame),
            V6 => seq6_of(frame),
        }
    }

    /// From the client to the VIP's port 80, hop 64.
    pub fn client_sends(
        self,
        flags: u8,
        seq_ack: (u32, u32),
        w: u16,
        o: &[u8],
        d: &[u8],
    ) -> Vec<u8> {
        let (client, vip) = self.client_and_vip();
        Self::frame(client, vip, flags, seq_ack, w, o, d, 64)
    }

    /// From the gateway (the VIP's port 80) to the client.
    #[allow(clippy::too_many_arguments)]
    pub fn client_gets(
        self,
        flags: u8,
        seq_ack: (u32, u32),
        w: u16,
        o: &[u8],
        d: &[u8],
        hop: u8,
    ) -> Vec<u8> {
        let (client, vip) = self.client_and_vip();
        Self::frame(vip, client, flags, seq_ack, w, o, d, hop)
    }

    /// From the backend of the client's flow, hop 64.
    #[allow(clippy::too_many_arguments)]
    pub fn backend_sends(
        self,
        gw: &Gateway,
        flags: u8,
        seq_ack: (u32, u32),
        w: u16,
        o: &[u8],
        d: &[u8],
    ) -> Vec<u8> {
        let (backend, snat) = self.backend_and_snat(gw);
        Self::frame(backend, snat, flags, seq_ack, w, o, d, 64)
    }

    /// From the gateway (the flow's SNAT tuple) to its backend.
    #[allow(clippy::too_many_arguments)]
    pub fn backend_gets(
        self,
        gw: &Gateway,
        flags: u8,
        seq_ack: (u32, u32),
        w: u16,
        o: &[u8],
        d: &[u8],
        hop: u8,
    ) -> Vec<u8> {
        let (backend, snat) = self.backend_and_snat(gw);
        Self::frame(snat, backend, flags, seq_ack, w, o, d, hop)
    }
}

/// The client's SYN (window 64240, `syn_opts`) is answered with a SYN
/// cookie: a SYN-ACK with `want_opts`, window 0, hop 64, and no flow.
/// Returns the cookie.
pub fn cookie_syn(e: Ends, gw: &mut Gateway, syn_opts: &[u8], want_opts: &[u8]) -> u32 {
    let (v, out) = gw.send(
        OUTSIDE,
        &e.client_sends(F::SYN, (ISN, 0), 64240, syn_opts, b""),
    );
    assert_eq!(v, Verdict::Reply);
    assert_eq!(out.len(), 1);
    let cookie = e.seq_of(&out[0].1);
    let want = e.client_gets(F::SYN | F::ACK, (cookie, ISN + 1), 0, want_opts, b"", 64);
    assert_eq!(out, vec![(OUTSIDE, want)]);
    assert!(e.flow(gw).is_none(), "a SYN leaves no state");
    cookie
}

/// The ACK of `cookie` becomes the backend SYN: the client's ISN, the
/// options the cookie remembered (`want_opts`), window 65535, full NAT
/// from `snat`, hop one lower. The flow is proxied, waiting for the
/// backend.
pub fn cookie_ack(e: Ends, gw: &mut Gateway, cookie: u32, want_opts: &[u8], snat: IpAddr) {
    let before = gw.counters().syn_cookies_validated;
    let ack = e.client_sends(
        F::ACK,
        (ISN + 1, cookie.wrapping_add(1)),
        CLIENT_WINDOW,
        &[],
        b"",
    );
    let (v, out) = gw.send(OUTSIDE, &ack);
    assert_eq!(v, Verdict::Forward(INSIDE));
    let flow = e.flow(gw).expect("proxied flow");
    assert!(flow.syn_proxied);
    assert_eq!(flow.state, Some(TcpState::SynSent));
    assert_eq!(flow.snat.0, snat);
    let want = e.backend_gets(gw, F::SYN, (ISN, 0), u16::MAX, want_opts, b"", 63);
    assert_eq!(out, vec![(INSIDE, want)]);
    assert_eq!(gw.counters().syn_cookies_validated, before + 1);
}

/// The backend's SYN-ACK (`window`, `opts` announcing window scale
/// `backend_scale`) is acknowledged by the gateway (the client's ACK,
/// hop 64); the client gets a window update in its scale
/// ([`OUR_WSCALE`]). The flow is established and spliced.
pub fn backend_synack(
    e: Ends,
    gw: &mut Gateway,
    cookie: u32,
    (window, opts, backend_scale): (u16, &[u8], u8),
) {
    let synack = e.backend_sends(
        gw,
        F::SYN | F::ACK,
        (BACKEND_ISN, ISN + 1),
        window,
        opts,
        b"",
    );
    let (v, out) = gw.send(INSIDE, &synack);
    assert_eq!(v, Verdict::Reply);
    let update = e.client_gets(
        F::ACK,
        (cookie.wrapping_add(1), ISN + 1),
        client_window(window, backend_scale),
        &[],
        b"",
        64,
    );
    let ack = e.backend_gets(
        gw,
        F::ACK,
        (ISN + 1, BACKEND_ISN + 1),
        CLIENT_WINDOW,
        &[],
        b"",
        64,
    );
    assert_eq!(out, vec![(OUTSIDE, update), (INSIDE, ack)]);
    let flow = e.flow(gw).expect("the flow");
    assert_eq!(flow.state, Some(TcpState::Established));
    assert_eq!(gw.counters().syn_proxy_spliced, 1);
}

/// A backend window (scale `backend_scale`) in the client's scale.
pub fn client_window(window: u16, backend_scale: u8) -> u16 {
    (u32::from(window) << backend_scale >> OUR_WSCALE) as u16
}

/// Data both ways after the splice: the client's `request` reaches the
/// backend with its acknowledgment in the backend's sequence space; the
/// backend's `response` (window `window`) reaches the client with its
/// sequence number in the cookie's space and the window in the client's
/// scale. Returns the frame the client got.
pub fn data_both_ways(
    e: Ends,
    gw: &mut Gateway,
    cookie: u32,
    request: &[u8],
    (response, window, backend_scale): (&[u8], u16, u8),
) -> Vec<u8> {
    let seg = e.client_sends(
        F::ACK | F::PSH,
        (ISN + 1, cookie.wrapping_add(1)),
        CLIENT_WINDOW,
        &[],
        request,
    );
    let (v, out) = gw.send(OUTSIDE, &seg);
    assert_eq!(v, Verdict::Forward(INSIDE));
    let want = e.backend_gets(
        gw,
        F::ACK | F::PSH,
        (ISN + 1, BACKEND_ISN + 1),
        CLIENT_WINDOW,
        &[],
        request,
        63,
    );
    assert_eq!(out, vec![(INSIDE, want)]);

    let acked = ISN + 1 + request.len() as u32;
    let seg = e.backend_sends(
        gw,
        F::ACK | F::PSH,
        (BACKEND_ISN + 1, acked),
        window,
        &[],
        response,
    );
    let (v, out) = gw.send(INSIDE, &seg);
    assert_eq!(v, Verdict::Forward(OUTSIDE));
    let want = e.client_gets(
        F::ACK | F::PSH,
        (cookie.wrapping_add(1), acked),
        client_window(window, backend_scale),
        &[],
        response,
        63,
    );
    assert_eq!(out, vec![(OUTSIDE, want.clone())]);
    want
}
