//! Per-core counters and the stable [`DropReason`] catalogue.
//!
//! Every packet ends in a verdict; a dropped packet is counted under exactly
//! one reason. Reason names are part of the operator interface (metrics,
//! `portico stats`): they are append-only and never renamed.
//!
//! Workers count into a plain, core-local [`Counters`] (no atomics, no sharing
//! on the packet path) and copy it into their [`SharedCounters`] once per poll
//! loop; readers sum the shared copies of all cores off the hot path.
//!
//! This module depends on nothing else in the crate: every other module
//! counts into it. The per-state flow gauges are indexed by
//! [`crate::conntrack::FlowState::ordinal`]; conntrack checks at compile time
//! that it has exactly [`FLOW_STATES`] states.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Number of per-state flow gauges: one per conntrack flow state (8 TCP
/// states, UDP, ICMP), indexed by the state's ordinal.
pub const FLOW_STATES: usize = 10;

macro_rules! drop_reasons {
    ($($(#[$doc:meta])* $variant:ident => $name:literal,)*) => {
        /// Why a packet was dropped. Stable names, see the module docs.
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
        #[repr(u8)]
        pub enum DropReason {
            $($(#[$doc])* $variant,)*
        }

        impl DropReason {
            /// Every reason, in counter order.
            pub const ALL: &'static [DropReason] = &[$(DropReason::$variant,)*];
            /// Number of reasons.
            pub const COUNT: usize = Self::ALL.len();

            /// The stable snake_case name used in metrics and CLI output.
            pub const fn name(self) -> &'static str {
                match self {
                    $(DropReason::$variant => $name,)*
                }
            }
        }
    };
}

drop_reasons! {
    /// Shorter than an Ethernet header.
    EthTruncated => "eth_truncated",
    /// 802.1Q tag cut off, or more than one stacked tag.
    VlanMalformed => "vlan_malformed",
    /// An EtherType the gateway does not handle (LLDP, MPLS, ...).
    UnsupportedEthertype => "unsupported_ethertype",
    /// A well-formed IPv6 packet the pipeline has no stage for yet (IPv6
    /// parses; forwarding it arrives stage by stage, issue 17).
    Ipv6Unsupported => "ipv6_unsupported",
    /// ARP shorter than its fixed size or not Ethernet/IPv4.
    ArpMalformed => "arp_malformed",
    /// ARP request for an address the gateway does not own, or an ARP reply
    /// the dataplane has no use for.
    ArpNotOwned => "arp_not_owned",
    /// Shorter than a 20-byte IPv4 header.
    Ipv4Truncated => "ipv4_truncated",
    /// Version field is not 4.
    Ipv4BadVersion => "ipv4_bad_version",
    /// IHL below 5 or beyond the frame.
    Ipv4BadIhl => "ipv4_bad_ihl",
    /// Total length below the header length or beyond the frame.
    Ipv4BadLength => "ipv4_bad_length",
    /// Header checksum does not verify.
    Ipv4BadChecksum => "ipv4_bad_checksum",
    /// A fragment (MF set or non-zero offset): reassembly is not supported.
    Ipv4Fragment => "ipv4_fragment",
    /// TTL would reach zero on forwarding.
    Ipv4TtlExpired => "ipv4_ttl_expired",
    /// Source address is multicast, broadcast, loopback or unspecified.
    Ipv4BadSource => "ipv4_bad_source",
    /// An IP protocol other than TCP, UDP or ICMP.
    UnsupportedProtocol => "unsupported_protocol",
    /// TCP header cut off, or data offset below 5 / beyond the packet.
    TcpMalformed => "tcp_malformed",
    /// TCP flag combination no stack sends (SYN+FIN, SYN+RST, none, ...).
    TcpBadFlags => "tcp_bad_flags",
    /// TCP checksum does not verify.
    TcpBadChecksum => "tcp_bad_checksum",
    /// UDP header cut off or its length field disagrees with IPv4.
    UdpMalformed => "udp_malformed",
    /// UDP checksum does not verify.
    UdpBadChecksum => "udp_bad_checksum",
    /// ICMP header cut off, or an error message without its inner header.
    IcmpMalformed => "icmp_malformed",
    /// ICMP checksum does not verify.
    IcmpBadChecksum => "icmp_bad_checksum",
    /// ICMP type the gateway neither answers nor translates.
    IcmpUnsupported => "icmp_unsupported",
    /// ICMP error whose inner packet matches no tracked flow.
    IcmpErrorNoFlow => "icmp_error_no_flow",
    /// Destination is not an address the gateway owns and matches no flow.
    NotOwned => "not_owned",
    /// Owned address, but no listener on that protocol and port.
    NoListener => "no_listener",
    /// Service has no ready and no serving endpoint.
    NoBackend => "no_backend",
    /// Non-SYN TCP (or a reply) without a tracked flow.
    NoFlow => "no_flow",
    /// The new flow's reply tuple is already tracked (a client reusing its
    /// source port towards a second service without SNAT).
    TupleInUse => "tuple_in_use",
    /// Conntrack full and nothing could be early-dropped.
    ConntrackFull => "conntrack_full",
    /// No free SNAT tuple towards the chosen backend.
    SnatExhausted => "snat_exhausted",
    /// The flow's backend left the service (TCP, policy drop).
    BackendGone => "backend_gone",
    /// No port/neighbour to reach the next hop.
    NoRoute => "no_route",
    /// Packet larger than the egress MTU.
    TooBig => "too_big",
    /// Handoff ring to the owning worker is full.
    HandoffFull => "handoff_full",
    /// Driver TX ring full.
    TxFull => "tx_full",
    /// The driver's buffer pool was empty when a handed-over frame, or a
    /// frame the kernel wrote to a host path, arrived.
    PoolExhausted => "pool_exhausted",
    /// A TCP segment the state machine rejects (conntrack INVALID, which
    /// kube-proxy drops too): e.g. a SYN/ACK from the client side.
    TcpInvalid => "tcp_invalid",
    /// An 802.1Q-tagged frame that would leave on another port (VLAN
    /// tagging per port is not configured).
    VlanMismatch => "vlan_mismatch",
    /// A packet ended the pipeline without a verdict (a bug; never expected).
    Internal => "internal",
    /// The next hop's ARP resolution failed recently, or the neighbour
    /// table is full.
    NeighbourUnresolved => "neighbour_unresolved",
    /// Held for ARP resolution and the neighbour never answered.
    NeighbourTimeout => "neighbour_timeout",
    /// The queue of packets waiting for ARP resolution is full.
    NeighbourQueueFull => "neighbour_queue_full",
    /// A new flow's key found no free conntrack index entry within the
    /// probe bound of its home, and no flow there could be early-dropped.
    ConntrackCrowded => "conntrack_crowded",
    /// ARP request for a VIP this instance owns but does not announce:
    /// another instance of the tier is elected for it and answers.
    ArpNotAnnounced => "arp_not_announced",
    /// A TCP ACK without a flow for a SYN-proxied service whose
    /// acknowledgment number is not a valid SYN cookie (forged, or older
    /// than two 64 s slices).
    SynCookieInvalid => "syn_cookie_invalid",
    /// A segment of a SYN-proxied flow whose backend has not answered the
    /// gateway's SYN yet (other than the client's ACKs, which re-send it).
    SynProxyPending => "syn_proxy_pending",
    /// The SYN proxy's queue of generated window updates was full.
    SynProxyOutboxFull => "syn_proxy_outbox_full",
    /// A TCP segment outside its flow's sequence window (conntrack's
    /// `tcp_in_window`): data or an ACK for bytes never sent, or an RST
    /// outside the receive window (RFC 5961 §3.2: a blind reset).
    TcpOutOfWindow => "tcp_out_of_window",
    /// A new flow from a client address over its new-flow rate
    /// (`[dataplane] new_flows_per_source_per_s`).
    NewFlowRateLimited => "new_flow_rate_limited",
    /// A frame for a host address met a full host-path queue (the TAP
    /// queue did not take it: `EAGAIN`/`ENOBUFS`; the kernel is not
    /// reading). The worker never waits for it.
    HostQueueFull => "host_queue_full",
    /// A frame for a host address could not reach the kernel: the host
    /// interface is down (`EIO`) or gone, or the port it came in on has no
    /// host path.
    HostPathDown => "host_path_down",
    /// A frame whose offload metadata (the driver's `virtio_net_hdr`:
    /// GSO/GRO super-packet or partial checksum) does not match the packet:
    /// a super-packet that is not TCP/UDP of its GSO type or carries SYN or
    /// RST, a checksum start that is not its L4 header, or one that could
    /// not be cut into segments for a destination that takes none.
    GsoMalformed => "gso_malformed",
    /// Shorter than a 40-byte IPv6 header.
    Ipv6Truncated => "ipv6_truncated",
    /// EtherType 0x86DD but the version field is not 6.
    Ipv6BadVersion => "ipv6_bad_version",
    /// Payload length beyond the frame.
    Ipv6BadLength => "ipv6_bad_length",
    /// More extension headers (8) or extension bytes (512) than the parse
    /// stage follows (RFC 8200 §4, RFC 7112).
    Ipv6ExtChainTooLong => "ipv6_ext_chain_too_long",
    /// An extension header runs past the payload.
    Ipv6ExtTruncated => "ipv6_ext_truncated",
    /// A Hop-by-Hop Options header anywhere but first (RFC 8200 §4.1).
    Ipv6HopByHopMisplaced => "ipv6_hop_by_hop_misplaced",
    /// An IPv6 packet with a Fragment header: reassembly is not supported.
    Ipv6Fragment => "ipv6_fragment",
    /// Source address is multicast or loopback, or unspecified outside
    /// duplicate address detection (RFC 4291 §2.5.2, §2.7).
    Ipv6BadSource => "ipv6_bad_source",
    /// Hop limit would reach zero on forwarding (answered with ICMPv6 time
    /// exceeded, rate-limited).
    Ipv6HopLimitExpired => "ipv6_hop_limit_expired",
    /// An NDP message (ICMPv6 133..=137) whose hop limit is not 255: the
    /// sender is not on the link (RFC 4861 §7.1).
    NdpBadHopLimit => "ndp_bad_hop_limit",
    /// An NDP message with an option of length 0 or running past the
    /// message (RFC 4861 §7.1.1, §7.1.2).
    NdpBadOption => "ndp_bad_option",
    /// An NDP message failing another rule of RFC 4861 §7.1: code not 0,
    /// shorter than its body, multicast target, a solicitation from `::`
    /// not for duplicate address detection, or a solicited advertisement to
    /// a multicast address.
    NdpMalformed => "ndp_malformed",
    /// A Neighbour Solicitation whose target the gateway does not own on
    /// the port it came in on (including duplicate address detection of
    /// such an address; RFC 4861 §7.2.3).
    NdpNotOwned => "ndp_not_owned",
    /// A Neighbour Solicitation for a VIP another instance of the tier is
    /// elected to announce (silence, as `arp_not_announced`).
    NdpNotAnnounced => "ndp_not_announced",
    /// A Neighbour Advertisement for a neighbour the table does not wait
    /// for, or without a target link-layer address (RFC 4861 §7.2.5).
    NdpAdvertIgnored => "ndp_advert_ignored",
    /// A Router Solicitation/Advertisement or Redirect not sent to a host
    /// address: the gateway is no IPv6 router or host for them.
    NdpRouterIgnored => "ndp_router_ignored",
    /// A solicitation to answer whose frame buffer cannot hold the
    /// advertisement.
    NdpNoRoom => "ndp_no_room",
    /// A client's handshake ACK with a valid SYN cookie while the
    /// conntrack table's splice states (`syn_proxy_flows` per worker) are
    /// all taken by SYN-proxied flows: the connection cannot be spliced.
    SynProxyTableFull => "syn_proxy_table_full",
}

impl std::fmt::Display for DropReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Calls `$callback! { $(#[doc] name,)* }` with every scalar counter of
/// [`Counters`], in storage order. The one list of counters: [`Counters`]
/// itself, its publication, and the admin report of the control plane
/// (`portico::admin::CounterReport`) are all generated from it, so a new
/// counter cannot be forgotten anywhere.
#[macro_export]
macro_rules! with_counters {
    ($callback:ident) => {
        $callback! {
            rx_packets,
            rx_bytes,
            tx_packets,
            tx_bytes,
            /// Packets handed to another worker.
            handoff_out,
            /// Packets another worker handed to this one (not counted in rx).
            handoff_in,
            /// Of the packets steered to another worker (handoff_out plus
            /// handoff_full drops), by cause: replies to an SNAT tuple whose
            /// port is in another worker's slice...
            handoff_snat_reply,
            /// ...client-side packets (and replies without SNAT) whose
            /// client address hashes to another worker...
            handoff_client,
            /// ...and ICMP errors, owned by the flow they quote (no driver
            /// steers by the inner header).
            handoff_icmp_error,
            /// Steering programs installed in the driver (af_packet's
            /// fanout program), on start and when the owned addresses,
            /// SNAT listeners or port range changed.
            steering_installs,
            /// Steering programs the driver refused (frames keep the last
            /// program, or none, and are handed off).
            steering_install_failures,
            /// ARP replies (and requests) the neighbour table learned from.
            arp_learned,
            /// ARP requests sent to resolve next hops.
            arp_requests_sent,
            /// Gratuitous ARPs sent for owned addresses.
            garp_sent,
            /// Frames for host addresses written to the host path (the
            /// kernel's TAP).
            to_host,
            /// Frames the kernel wrote to the host path, sent out of the
            /// port.
            from_host,
            /// Packets that waited for ARP resolution and were then sent.
            neighbour_held_sent,
            /// Flows without SNAT whose client port was remapped to avoid a
            /// backend-side tuple clash.
            client_ports_remapped,
            /// ARP replies, NDP advertisements answering solicitations
            /// and ICMP echo replies sent.
            local_replies,
            /// ICMP errors translated back to the other side of a flow.
            icmp_errors_translated,
            /// ICMP errors the gateway originated: fragmentation needed
            /// (RFC 1191) for DF packets over the egress MTU, time exceeded
            /// for expired TTLs (`stage::icmp_reply`).
            icmp_errors_sent,
            /// ICMP errors not sent: the per-worker rate limit was reached.
            icmp_errors_rate_limited,
            /// TCP RSTs generated for flows whose backend was removed.
            resets_sent,
            /// Conntrack inserts.
            flows_created,
            /// Flows removed because their timeout passed.
            flows_expired,
            /// Flows evicted to make room in a full table.
            flows_early_dropped,
            /// SYN met a TIME_WAIT/CLOSE entry and started a fresh flow.
            flows_recycled,
            /// Existing UDP flows moved to a new backend after their backend left.
            flows_reselected,
            affinity_hits,
            snat_allocations,
            /// SNAT tuples reused while still inside the quarantine period.
            snat_quarantine_reuses,
            /// Half-open (unassured) flows evicted because the SNAT tuple
            /// space towards their backend was exhausted (also counted in
            /// `flows_early_dropped`).
            snat_early_drops,
            /// Client SYNs answered with a SYN cookie (SYN proxy).
            syn_cookies_sent,
            /// Client ACKs whose SYN cookie validated: proxied flows opened
            /// towards a backend.
            syn_cookies_validated,
            /// Proxied flows whose backend answered: sequence spaces spliced.
            syn_proxy_spliced,
            /// Window updates sent to proxied clients once spliced.
            syn_proxy_window_updates,
            /// Challenge ACKs answering an in-window but inexact RST
            /// (RFC 5961 §3.2).
            challenge_acks_sent,
            /// TCP SYNs and SYN-ACKs whose MSS option was lowered (or
            /// added) to their egress port's `mss_clamp`.
            mss_clamped,
            /// NDP solicitations and advertisements the IPv6 neighbour
            /// table learned from.
            ndp_learned,
            /// Neighbour Solicitations sent to resolve IPv6 next hops.
            ndp_solicits_sent,
            /// Unsolicited Neighbour Advertisements sent for owned IPv6
            /// addresses (the IPv6 gratuitous ARP).
            unsolicited_adverts_sent,
        }
    };
}

macro_rules! define_counters {
    ($($(#[$doc:meta])* $field:ident,)*) => {
        /// Core-local counters, plain integers: only the owning worker
        /// writes them. Fields: see [`with_counters`].
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub struct Counters {
            $($(#[$doc])* pub $field: u64,)*
            pub drops: [u64; DropReason::COUNT],
        }

        /// Number of scalar (non-drop) counters in [`Counters`].
        pub const SCALARS: usize = [$(stringify!($field),)*].len();

        impl Counters {
            /// The scalar counters' names, in [`Counters::scalars`] order.
            pub const SCALAR_NAMES: [&'static str; SCALARS] = [$(stringify!($field),)*];

            /// Every scalar counter, in [`with_counters`] order.
            pub fn scalars(&self) -> [u64; SCALARS] {
                [$(self.$field,)*]
            }

            /// The inverse of [`Counters::scalars`].
            pub fn from_scalars(s: [u64; SCALARS], drops: [u64; DropReason::COUNT]) -> Self {
                let mut it = s.into_iter();
                Counters {
                    $($field: it.next().unwrap_or(0),)*
                    drops,
                }
            }
        }
    };
}

with_counters!(define_counters);

impl Default for Counters {
    fn default() -> Self {
        Counters::from_scalars([0; SCALARS], [0; DropReason::COUNT])
    }
}

impl Counters {
    #[inline]
    pub fn drop(&mut self, reason: DropReason) {
        self.drops[reason as usize] += 1;
    }

    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.drops[reason as usize]
    }

    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }

    /// Field-wise sum, for aggregating several cores.
    pub fn accumulate(&mut self, other: &Counters) {
        let mut scalars = self.scalars();
        for (a, b) in scalars.iter_mut().zip(other.scalars()) {
            *a += b;
        }
        let mut drops = self.drops;
        for (a, b) in drops.iter_mut().zip(other.drops) {
            *a += b;
        }
        *self = Counters::from_scalars(scalars, drops);
    }
}

/// A worker's published copy of its counters, read by other threads.
///
/// Single writer (the owning worker, with relaxed stores once per poll loop),
/// any number of readers. Aligned to its own cache lines so that cores never
/// write to a shared line.
#[derive(Debug)]
#[repr(align(128))]
pub struct SharedCounters {
    scalars: [AtomicU64; SCALARS],
    drops: [AtomicU64; DropReason::COUNT],
    /// Live flows in the worker's conntrack tables (both families).
    live_flows: AtomicU64,
    /// SNAT tuples in use by the worker (both families).
    snat_in_use: AtomicU64,
    /// Of which IPv6.
    live_flows_v6: AtomicU64,
    snat_in_use_v6: AtomicU64,
    /// Live flows per flow state ordinal.
    flows_by_state: [AtomicU64; FLOW_STATES],
    /// Per-service/backend counters and per-SNAT-address stats, copied by
    /// the worker at most every 100 ms with `try_lock` (the worker never
    /// waits for a reader).
    services: Mutex<ServiceCounters>,
    snat: Mutex<Vec<SnatAddrStats<IpAddr>>>,
    /// The dataplane clock's time of the worker's latest poll loop (stored
    /// at most once per millisecond): the BGP watchdog's heartbeat.
    heartbeat_ms: AtomicU64,
}

impl Default for SharedCounters {
    fn default() -> Self {
        SharedCounters {
            scalars: std::array::from_fn(|_| AtomicU64::new(0)),
            drops: std::array::from_fn(|_| AtomicU64::new(0)),
            live_flows: AtomicU64::new(0),
            snat_in_use: AtomicU64::new(0),
            live_flows_v6: AtomicU64::new(0),
            snat_in_use_v6: AtomicU64::new(0),
            flows_by_state: std::array::from_fn(|_| AtomicU64::new(0)),
            services: Mutex::new(ServiceCounters::default()),
            snat: Mutex::new(Vec::new()),
            heartbeat_ms: AtomicU64::new(0),
        }
    }
}

/// Calls `$callback! { name, … }` with every per-id vector of
/// [`ServiceCounters`]: the one list its storage, copying and summing are
/// generated from.
macro_rules! with_service_counters {
    ($callback:ident) => {
        $callback! {
            services: service_packets, service_bytes, service_flows_created, service_flows_active;
            backends: backend_packets, backend_bytes, backend_flows_created, backend_flows_active;
        }
    };
}

macro_rules! define_service_counters {
    (services: $($s:ident),*; backends: $($b:ident),*;) => {
        /// Traffic and flows per service and per backend, indexed by the
        /// snapshot's stable ids. Core-local; the vectors grow only when a
        /// new snapshot generation has more ids (cold path), never per
        /// packet.
        ///
        /// `*_packets`/`*_bytes` count both directions; `*_flows_created`
        /// counts conntrack inserts; `*_flows_active` is a gauge (inserts
        /// minus removals of flows of that id; a flow of a removed service
        /// whose id was reused is not told apart).
        #[derive(Debug, Default, PartialEq, Eq)]
        pub struct ServiceCounters {
            $(pub $s: Vec<u64>,)*
            $(pub $b: Vec<u64>,)*
        }

        impl Clone for ServiceCounters {
            fn clone(&self) -> Self {
                ServiceCounters {
                    $($s: self.$s.clone(),)*
                    $($b: self.$b.clone(),)*
                }
            }

            /// Reuses this copy's storage: publishing allocates only when
            /// the number of ids grew.
            fn clone_from(&mut self, source: &Self) {
                $(self.$s.clone_from(&source.$s);)*
                $(self.$b.clone_from(&source.$b);)*
            }
        }

        impl ServiceCounters {
            fn service_vecs(&mut self) -> [&mut Vec<u64>; [$(stringify!($s)),*].len()] {
                [$(&mut self.$s),*]
            }

            fn backend_vecs(&mut self) -> [&mut Vec<u64>; [$(stringify!($b)),*].len()] {
                [$(&mut self.$b),*]
            }

            /// Element-wise sum, for aggregating several cores.
            pub fn accumulate(&mut self, other: &ServiceCounters) {
                self.ensure(other.service_packets.len(), other.backend_packets.len());
                $(add_into(&mut self.$s, &other.$s);)*
                $(add_into(&mut self.$b, &other.$b);)*
            }
        }
    };
}

with_service_counters!(define_service_counters);

fn add_into(mine: &mut [u64], theirs: &[u64]) {
    for (a, b) in mine.iter_mut().zip(theirs) {
        *a += b;
    }
}

impl ServiceCounters {
    /// Make room for `services` service ids and `backends` backend ids.
    pub fn ensure(&mut self, services: usize, backends: usize) {
        for v in self.service_vecs() {
            if v.len() < services {
                v.resize(services, 0);
            }
        }
        for v in self.backend_vecs() {
            if v.len() < backends {
                v.resize(backends, 0);
            }
        }
    }

    /// Zero one service id's counters (the id was given to a new service).
    pub fn reset_service(&mut self, id: usize) {
        for v in self.service_vecs() {
            if let Some(x) = v.get_mut(id) {
                *x = 0;
            }
        }
    }

    /// Zero one backend id's counters.
    pub fn reset_backend(&mut self, id: usize) {
        for v in self.backend_vecs() {
            if let Some(x) = v.get_mut(id) {
                *x = 0;
            }
        }
    }

    #[inline]
    pub fn count(&mut self, service: u32, backend: u32, bytes: u64) {
        let (s, b) = (service as usize, backend as usize);
        if let (Some(p), Some(y)) = (
            self.service_packets.get_mut(s),
            self.service_bytes.get_mut(s),
        ) {
            *p += 1;
            *y += bytes;
        }
        if let (Some(p), Some(y)) = (
            self.backend_packets.get_mut(b),
            self.backend_bytes.get_mut(b),
        ) {
            *p += 1;
            *y += bytes;
        }
    }

    /// A flow of `service` to `backend` was inserted into conntrack.
    #[inline]
    pub fn flow_opened(&mut self, service: u32, backend: u32) {
        let (s, b) = (service as usize, backend as usize);
        for x in [
            self.service_flows_created.get_mut(s),
            self.service_flows_active.get_mut(s),
            self.backend_flows_created.get_mut(b),
            self.backend_flows_active.get_mut(b),
        ]
        .into_iter()
        .flatten()
        {
            *x += 1;
        }
    }

    /// A flow of `service` to `backend` left conntrack (expired, removed or
    /// evicted).
    #[inline]
    pub fn flow_closed(&mut self, service: u32, backend: u32) {
        let (s, b) = (service as usize, backend as usize);
        for x in [
            self.service_flows_active.get_mut(s),
            self.backend_flows_active.get_mut(b),
        ]
        .into_iter()
        .flatten()
        {
            *x = x.saturating_sub(1);
        }
    }
}

/// One SNAT address (of family `A`) of one worker's allocator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnatAddrStats<A = Ipv4Addr> {
    pub addr: A,
    /// Tuples of this address in use now (gauge).
    pub in_use: u64,
    /// Allocations that found no free tuple on this address (total).
    pub exhausted: u64,
}

impl<A: Into<IpAddr>> SnatAddrStats<A> {
    /// The same stats with the address as an [`IpAddr`].
    pub fn any(self) -> SnatAddrStats<IpAddr> {
        SnatAddrStats {
            addr: self.addr.into(),
            in_use: self.in_use,
            exhausted: self.exhausted,
        }
    }
}

/// Gauges a worker publishes next to its counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gauges {
    /// Live flows of both families.
    pub live_flows: u64,
    /// SNAT tuples in use, both families.
    pub snat_in_use: u64,
    /// Of `live_flows`, the IPv6 flows.
    pub live_flows_v6: u64,
    /// Of `snat_in_use`, the IPv6 tuples.
    pub snat_in_use_v6: u64,
    /// Live flows per flow state, in
    /// [`crate::conntrack::FlowState::ALL`] order.
    pub flows_by_state: [u64; FLOW_STATES],
}

impl Gauges {
    /// Field-wise sum.
    pub fn accumulate(&mut self, other: &Gauges) {
        self.live_flows += other.live_flows;
        self.snat_in_use += other.snat_in_use;
        self.live_flows_v6 += other.live_flows_v6;
        self.snat_in_use_v6 += other.snat_in_use_v6;
        add_into(&mut self.flows_by_state, &other.flows_by_state);
    }
}

impl SharedCounters {
    /// Copy the worker's local counters out (owner only).
    pub fn publish(&self, local: &Counters, gauges: Gauges) {
        for (cell, v) in self.scalars.iter().zip(local.scalars()) {
            cell.store(v, Ordering::Relaxed);
        }
        for (cell, v) in self.drops.iter().zip(local.drops) {
            cell.store(v, Ordering::Relaxed);
        }
        self.live_flows.store(gauges.live_flows, Ordering::Relaxed);
        self.snat_in_use
            .store(gauges.snat_in_use, Ordering::Relaxed);
        self.live_flows_v6
            .store(gauges.live_flows_v6, Ordering::Relaxed);
        self.snat_in_use_v6
            .store(gauges.snat_in_use_v6, Ordering::Relaxed);
        for (cell, v) in self.flows_by_state.iter().zip(gauges.flows_by_state) {
            cell.store(v, Ordering::Relaxed);
        }
    }

    /// The worker completed a poll loop at `now_ms` (owner only; once per
    /// millisecond at most, never per packet).
    #[inline]
    pub fn beat(&self, now_ms: u64) {
        self.heartbeat_ms.store(now_ms, Ordering::Relaxed);
    }

    /// The time of the worker's latest [`SharedCounters::beat`]: a value
    /// that stops changing means the worker stopped polling.
    pub fn heartbeat_ms(&self) -> u64 {
        self.heartbeat_ms.load(Ordering::Relaxed)
    }

    /// Copy the worker's per-service counters out (owner only). Skipped when
    /// a reader holds the copy; `clone_from` reuses the copy's storage.
    pub fn publish_services(&self, local: &ServiceCounters) {
        if let Ok(mut copy) = self.services.try_lock() {
            copy.clone_from(local);
        }
    }

    /// Copy the worker's per-SNAT-address stats out (owner only), the
    /// IPv4 addresses then the IPv6 ones; skipped when a reader holds the
    /// copy. Allocates only the first time (and if the number of addresses
    /// grew).
    pub fn publish_snat(&self, local: &[SnatAddrStats], local6: &[SnatAddrStats<Ipv6Addr>]) {
        if let Ok(mut copy) = self.snat.try_lock() {
            copy.clear();
            copy.extend(local.iter().map(|s| s.any()));
            copy.extend(local6.iter().map(|s| s.any()));
        }
    }

    /// The last published per-service counters.
    pub fn read_services(&self) -> ServiceCounters {
        self.services.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// The last published per-SNAT-address stats.
    pub fn read_snat(&self) -> Vec<SnatAddrStats<IpAddr>> {
        self.snat.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// A consistent-enough copy for reporting.
    pub fn read(&self) -> (Counters, Gauges) {
        let s = std::array::from_fn(|i| self.scalars[i].load(Ordering::Relaxed));
        let d = std::array::from_fn(|i| self.drops[i].load(Ordering::Relaxed));
        (
            Counters::from_scalars(s, d),
            Gauges {
                live_flows: self.live_flows.load(Ordering::Relaxed),
                snat_in_use: self.snat_in_use.load(Ordering::Relaxed),
                live_flows_v6: self.live_flows_v6.load(Ordering::Relaxed),
                snat_in_use_v6: self.snat_in_use_v6.load(Ordering::Relaxed),
                flows_by_state: std::array::from_fn(|i| {
                    self.flows_by_state[i].load(Ordering::Relaxed)
                }),
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_snake_case() {
        let mut names: Vec<_> = DropReason::ALL.iter().map(|r| r.name()).collect();
        assert!(names.iter().all(|n| {
            n.chars()
                .all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit())
        }));
        names.sort();
        names.dedup();
        assert_eq!(names.len(), DropReason::COUNT);
    }

    #[test]
    fn every_scalar_has_its_own_slot() {
        let distinct: [u64; SCALARS] = std::array::from_fn(|i| i as u64 + 1);
        assert_eq!(
            Counters::from_scalars(distinct, [0; DropReason::COUNT]).scalars(),
            distinct
        );
    }

    #[test]
    fn publish_then_read_round_trips() {
        let mut c = Counters {
            rx_packets: 7,
            snat_quarantine_reuses: 3,
            ..Counters::default()
        };
        c.drop(DropReason::NoFlow);
        c.drop(DropReason::NoFlow);
        let shared = SharedCounters::default();
        let g = Gauges {
            live_flows: 5,
            snat_in_use: 2,
            live_flows_v6: 3,
            snat_in_use_v6: 1,
            flows_by_state: std::array::from_fn(|i| i as u64),
        };
        shared.publish(&c, g);
        assert_eq!(shared.read(), (c, g));
    }
}
