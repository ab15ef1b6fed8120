//! The flow record: one tracked connection ([`Flow`], one cache line), its
//! slot ([`FlowId`]), the direction of a packet within it ([`Dir`]) and its
//! protocol state ([`FlowState`]). The table that stores and indexes the
//! records is [`super::Conntrack`]; it alone changes a record's keys, state
//! and flags (fields visible to `conntrack` only).

use super::TcpState;
use super::window::WindowScales;
use crate::flow::{FlowKeyOf, IpFamily, Proto};
use std::net::Ipv4Addr;

/// Which way a packet travels within its flow.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(u8)]
pub enum Dir {
    /// Client -> service, as the client sent it.
    Original = 0,
    /// Backend -> gateway (or client, without SNAT), as the backend sends it.
    Reply = 1,
}

impl Dir {
    #[inline]
    pub(super) fn from_bit(bit: u32) -> Self {
        if bit & 1 == 0 {
            Dir::Original
        } else {
            Dir::Reply
        }
    }

    /// The other direction.
    #[inline]
    pub fn reverse(self) -> Self {
        match self {
            Dir::Original => Dir::Reply,
            Dir::Reply => Dir::Original,
        }
    }
}

/// Protocol state of a flow.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum FlowState {
    Tcp(TcpState),
    Udp,
    Icmp,
}

impl FlowState {
    /// Number of distinct states (8 TCP + UDP + ICMP): the number of
    /// per-state gauges the counters publish.
    pub const COUNT: usize = crate::counters::FLOW_STATES;
    /// Every state, in [`FlowState::ordinal`] order.
    pub const ALL: [FlowState; Self::COUNT] = [
        FlowState::Tcp(TcpState::SynSent),
        FlowState::Tcp(TcpState::SynRecv),
        FlowState::Tcp(TcpState::Established),
        FlowState::Tcp(TcpState::FinWait),
        FlowState::Tcp(TcpState::CloseWait),
        FlowState::Tcp(TcpState::LastAck),
        FlowState::Tcp(TcpState::TimeWait),
        FlowState::Tcp(TcpState::Close),
        FlowState::Udp,
        FlowState::Icmp,
    ];

    /// Dense index `0..COUNT` (for per-state counters).
    #[inline]
    pub const fn ordinal(self) -> usize {
        match self {
            FlowState::Tcp(s) => s as usize,
            FlowState::Udp => 8,
            FlowState::Icmp => 9,
        }
    }

    /// Upper-case name: the TCP state name, `UDP` or `ICMP`.
    pub const fn name(self) -> &'static str {
        match self {
            FlowState::Tcp(s) => s.name(),
            FlowState::Udp => "UDP",
            FlowState::Icmp => "ICMP",
        }
    }
}

impl std::fmt::Display for FlowState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A slot of the table: stable for the flow's lifetime, reused after
/// removal.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct FlowId(pub(super) u32);

impl FlowId {
    /// The slot index.
    #[inline]
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// Flag bits of a [`Flow`]'s `flags`.
pub(super) mod flag {
    /// The slot holds a flow.
    pub const LIVE: u8 = 1 << 0;
    /// A reply-direction packet was seen (assured).
    pub const REPLIED: u8 = 1 << 1;
    /// Replies are addressed to a gateway SNAT address.
    pub const SNAT: u8 = 1 << 2;
    /// The first FIN came from the reply side (TCP closing states).
    pub const FIN_FIRST_REPLY: u8 = 1 << 3;
    /// A SYN-proxied flow: its splice state is in the table's splice
    /// array, at the record's `splice_at` (see [`super::Splice`]).
    pub const SYN_PROXIED: u8 = 1 << 4;
}

/// One tracked connection.
///
/// The keys are read-only (`orig()`, `reply()`): the index is keyed on them,
/// so changing them through [`super::Conntrack::flow_mut`] would orphan
/// index entries. Use [`super::Conntrack::rekey_reply`] to move a flow to a
/// new backend.
///
/// Generic over the address family: `Flow` (IPv4) is one 64-byte cache
/// line (with no byte to spare: the last went to the window scales);
/// `Flow<Ipv6Addr>` two (its keys are 38 bytes each).
///
/// A free slot's record is `Flow::free_slot`: not live, its `service`
/// the next free slot (the table's free list runs through the slab).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(align(64))]
pub struct Flow<A = Ipv4Addr> {
    pub(super) orig: FlowKeyOf<A>,
    pub(super) reply: FlowKeyOf<A>,
    /// Stable service id from the snapshot.
    pub service: u32,
    /// Stable backend id from the snapshot.
    pub backend: u32,
    /// Deadline on the dataplane clock; expired once `now_ms >= expires_ms`.
    pub expires_ms: u64,
    /// Source MAC of the client's packets (L2 return path).
    pub client_mac: [u8; 6],
    /// Port the client's packets arrived on.
    pub client_port: u8,
    /// When the flow was inserted, in whole seconds of the dataplane clock
    /// (saturating; for listings, `portico flows`).
    pub created_s: u32,
    pub(super) state: FlowState,
    pub(super) flags: u8,
    /// With `SYN_PROXIED`: the flow's entry in the table's splice array.
    pub(super) splice_at: u16,
    /// TCP: the window scales of the two sides (the rest of the window
    /// tracking is in the table's TCP array, [`super::TcpExt`]).
    pub(super) wscale: WindowScales,
}

impl<A: IpFamily> Flow<A> {
    const UNSPECIFIED_KEY: FlowKeyOf<A> =
        FlowKeyOf::new(Proto::Tcp, A::UNSPECIFIED, 0, A::UNSPECIFIED, 0);

    /// Contents of a free slot; reads as a CLOSE flow that is not live.
    pub(super) const FREE: Flow<A> = Flow {
        orig: Self::UNSPECIFIED_KEY,
        reply: Self::UNSPECIFIED_KEY,
        service: 0,
        backend: 0,
        expires_ms: 0,
        client_mac: [0; 6],
        client_port: 0,
        created_s: 0,
        state: FlowState::Tcp(TcpState::Close),
        flags: 0,
        splice_at: 0,
        wscale: WindowScales::NONE,
    };

    /// A free slot's record whose free-list successor is slot `next`
    /// (`u32::MAX`: none).
    #[inline]
    pub(super) const fn free_slot(next: u32) -> Flow<A> {
        Flow {
            service: next,
            ..Self::FREE
        }
    }

    /// The free-list successor of a free slot's record.
    #[inline]
    pub(super) const fn next_free(&self) -> u32 {
        self.service
    }

    /// Key of the client's packets (client -> service address).
    #[inline]
    pub fn orig(&self) -> &FlowKeyOf<A> {
        &self.orig
    }

    /// Key of the backend's packets (backend -> SNAT address or client).
    #[inline]
    pub fn reply(&self) -> &FlowKeyOf<A> {
        &self.reply
    }

    /// The key of packets travelling in `dir`.
    #[inline]
    pub fn key(&self, dir: Dir) -> &FlowKeyOf<A> {
        match dir {
            Dir::Original => &self.orig,
            Dir::Reply => &self.reply,
        }
    }

    #[inline]
    pub fn state(&self) -> FlowState {
        self.state
    }

    #[inline]
    pub fn tcp_state(&self) -> Option<TcpState> {
        match self.state {
            FlowState::Tcp(s) => Some(s),
            _ => None,
        }
    }

    /// A reply-direction packet was accepted (Linux's seen-reply).
    #[inline]
    pub fn replied(&self) -> bool {
        self.flags & flag::REPLIED != 0
    }

    /// May early drop evict this flow to make room? As Linux's `ASSURED`
    /// bit: a TCP flow is protected once its handshake completed and until
    /// it is closing (SYN_SENT and SYN_RECV flows, and TIME_WAIT/CLOSE ones,
    /// are fair game: a SYN flood the backends answer must not fill the table
    /// with flows nobody can evict); a UDP/ICMP flow once it was replied.
    #[inline]
    pub fn evictable(&self) -> bool {
        match self.tcp_state() {
            Some(s) => matches!(
                s,
                TcpState::SynSent | TcpState::SynRecv | TcpState::TimeWait | TcpState::Close
            ),
            None => !self.replied(),
        }
    }

    /// The gateway answered the client's handshake itself (SYN proxy); its
    /// packets are spliced with [`super::Conntrack::splice`]'s state.
    #[inline]
    pub fn syn_proxied(&self) -> bool {
        self.flags & flag::SYN_PROXIED != 0
    }

    /// Replies come back to a gateway SNAT address.
    #[inline]
    pub fn snat(&self) -> bool {
        self.flags & flag::SNAT != 0
    }

    /// The slot holds a tracked flow (false for a removed flow's id).
    #[inline]
    pub fn is_live(&self) -> bool {
        self.flags & flag::LIVE != 0
    }

    #[inline]
    pub fn is_expired(&self, now_ms: u64) -> bool {
        now_ms >= self.expires_ms
    }

    /// A new SYN on this tuple starts a new connection (TIME_WAIT or CLOSE),
    /// so the caller may recycle the tuple with a fresh backend choice.
    #[inline]
    pub fn accepts_new_syn(&self) -> bool {
        matches!(
            self.state,
            FlowState::Tcp(TcpState::TimeWait | TcpState::Close)
        )
    }

    /// The side that sent the first FIN (TCP closing states only).
    #[inline]
    pub fn first_fin(&self) -> Dir {
        if self.flags & flag::FIN_FIRST_REPLY != 0 {
            Dir::Reply
        } else {
            Dir::Original
        }
    }

    #[inline]
    pub(super) fn key_of_entry(&self, entry: u32) -> &FlowKeyOf<A> {
        self.key(Dir::from_bit(entry))
    }
}
