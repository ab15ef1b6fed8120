//! The validated plan: what the file means, resolved and typed.
//!
//! Invariants of a [`Plan`] (established by [`validate`](crate::validate())):
//! * every [`PortIndex`] is an index into [`Plan::ports`];
//! * [`Plan::vip_port`] is the outside port (or the single port of role
//!   both);
//! * an address is owned on one port only; it is listed once per role it
//!   has (node, SNAT); a port's host addresses (its own list, not in
//!   [`Plan::addresses`]) are no node, SNAT, VIP, external IP or pool
//!   address, and a port has a host interface exactly when it has host
//!   addresses;
//! * [`Plan::routes`] holds the connected subnets of the port addresses
//!   (`via: None`) first, then the static routes in file order; destinations
//!   have no host bits and are unique;
//! * every service has at least one listener, listeners are unique per
//!   `(protocol, address, port)` over all services, backends are unique per
//!   service; a service's listeners and backends are of one family;
//! * every address and prefix is IPv4 or IPv6; a route's next hop and its
//!   destination are of one family; only a next hop may be link-local;
//! * durations are in milliseconds and non-zero where the dataplane
//!   requires it;
//! * address pools have unique names and at least one usable address; no
//!   address is in two pool ranges (of one pool or of two), and none is a
//!   node or SNAT address or a standalone service's VIP or external IP;
//! * with Kubernetes, `retry_period_ms < renew_deadline_ms <
//!   lease_duration_ms` and `debounce_ms <= debounce_max_ms`;
//! * [`Plan::bgp`] passes portico-bgp's own `BgpConfig::validate` (so it
//!   can be handed to the sessions as is); peer addresses are unique
//!   (advertisements name peers by address), of a family some host
//!   address has, and not the gateway's own; every peer has the same router id, one of the node or host
//!   addresses; a source address is a host address; an eBGP peer without
//!   multihop is in the connected subnet of a host address; every advertisement is used by a pool or a
//!   service, and every name a pool or service lists is an advertisement.
//!
//! How `portico check` prints a plan (`Display`) is in `plan/display.rs`.

use crate::addr::{IpPrefix, IpRange, MacAddr};
pub use crate::schema::{
    AfpacketRxPath, AfpacketRxRing, AfpacketTxPath, BackendGone, DriverKind, EndpointCondition,
    IdlePolicy, MultiBufferSetting, PortRole, Protocol, XdpModeSetting, ZeroCopySetting,
};
pub use portico_bgp::{Advertisement, PeerConfig};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;
use std::path::PathBuf;

mod display;

/// Index of a port in [`Plan::ports`] (the dataplane's port id).
pub type PortIndex = usize;

/// A validated configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub dataplane: DataplanePlan,
    pub ports: Vec<PortPlan>,
    /// Port on which VIPs and external IPs are answered: the outside port.
    pub vip_port: PortIndex,
    /// Every node and SNAT address with its port; an address with both
    /// roles appears twice.
    pub addresses: Vec<OwnedAddress>,
    pub routes: Vec<RoutePlan>,
    pub neighbours: Vec<NeighbourPlan>,
    pub services: Vec<ServicePlan>,
    /// The EAL settings (used when a port has driver `dpdk`).
    pub dpdk: DpdkPlan,
    /// The Kubernetes source; `None`: no `[kubernetes]` section.
    pub kubernetes: Option<KubernetesPlan>,
    /// LoadBalancer address pools, in file order (the order in which
    /// auto-assign pools are tried).
    pub address_pools: Vec<AddressPoolPlan>,
    /// `[bgp]`: the peers and what is announced to them; empty without
    /// the section.
    pub bgp: BgpPlan,
    /// The instance this plan is for (`--instance`): its `[[instance]]`'s
    /// addresses are the ports' addresses above, and it is this instance's
    /// name in the tier. `None`: no name given (one instance).
    pub instance: Option<String>,
    /// Whether VIPs and externalIPs are announced by ARP (answered, with a
    /// gratuitous ARP when they appear) on the outside port: true for one
    /// instance and for a tier with `[kubernetes]` (its per-VIP election
    /// then picks one instance per VIP); false for a tier without
    /// `[kubernetes]`, whose VIPs are announced by BGP only (the routers
    /// reach them through each instance's next hop).
    pub vips_by_arp: bool,
}

/// `[bgp]`, validated. The peers and advertisements are portico-bgp's
/// types (that crate owns them); this adds what each advertisement is
/// attached to. `portico run` starts one session per peer from it (the
/// gateway's `bgp` module); `portico check` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BgpPlan {
    /// `[[bgp.peer]]` in file order; addresses unique.
    pub peers: Vec<PeerConfig>,
    /// `[[bgp.advertisement]]` in file order, each with its users.
    pub advertisements: Vec<AdvertisementPlan>,
    /// How long a graceful stop keeps forwarding after the withdrawal,
    /// `0..=3600` s.
    pub shutdown_drain_s: u16,
    /// The worker watchdog's timeout, `100..=60000` ms.
    pub watchdog_timeout_ms: u32,
}

impl Default for BgpPlan {
    fn default() -> Self {
        BgpPlan {
            peers: Vec::new(),
            advertisements: Vec::new(),
            shutdown_drain_s: portico_bgp::config::DEFAULT_SHUTDOWN_DRAIN_S,
            watchdog_timeout_ms: portico_bgp::config::DEFAULT_WATCHDOG_TIMEOUT_MS,
        }
    }
}

/// One `[[bgp.advertisement]]` and the addresses announced with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdvertisementPlan {
    pub advertisement: Advertisement,
    /// Names of the address pools that list it, in file order: their
    /// addresses, once assigned to a Service with a ready backend.
    pub address_pools: Vec<String>,
    /// The standalone services' VIPs and external IPs that list it, in
    /// file order, each once (either family).
    pub vips: Vec<IpAddr>,
}

/// `[dpdk]`, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DpdkPlan {
    /// CPUs of the EAL's main lcore; empty: every allowed CPU.
    pub cores: Vec<usize>,
    /// `64..=1048576`.
    pub memory_mb: u32,
    pub hugepages: bool,
    /// `64..=16384`.
    pub rx_desc: u16,
    /// `64..=16384`.
    pub tx_desc: u16,
    pub extra_args: Vec<String>,
}

/// The DPDK device of a port with driver `dpdk`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DpdkDevicePlan {
    /// `net_af_packet` vdev on the port's interface.
    AfPacket,
    /// `net_af_xdp` vdev on the port's interface.
    AfXdp,
    /// A PCI function, `DDDD:BB:DD.F` (domain added when left out).
    Pci(String),
    /// A vdev as written: `name` (`net_...`) and its `args` (may be empty).
    Vdev { name: String, args: String },
}

/// `[kubernetes]`, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubernetesPlan {
    /// `None`: `$KUBECONFIG`, `~/.kube/config`, then in-cluster.
    pub kubeconfig: Option<PathBuf>,
    /// A qualified name (`portico.dev/lb`).
    pub load_balancer_class: String,
    /// Also serve Services without a class.
    pub serve_unclassed: bool,
    /// Quiet time after the last event of a burst, `0..=10000`.
    pub debounce_ms: u64,
    /// Longest delay after the first event of a burst, `debounce_ms..=60000`.
    pub debounce_max_ms: u64,
    /// The leader's pacing of status PATCHes and Events.
    pub status_writes: StatusWritesPlan,
    pub leader_election: LeaderElectionPlan,
    /// Where Services' `spec.externalIPs` may be (network prefixes of
    /// either family); empty: nowhere.
    pub external_ip_cidrs: Vec<IpPrefix>,
    /// The SYN proxy of TCP Services without the `portico.dev/syn-proxy`
    /// annotation.
    pub syn_proxy: SynProxyPlan,
    /// The threshold of `"auto"` (the default's or an annotation's),
    /// `1..=16777216`.
    pub syn_proxy_half_open_threshold: u32,
}

/// How fast the leader writes back to the API server (a token bucket plus
/// an in-flight cap; `controlplane/src/source/kube/pace.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusWritesPlan {
    /// Requests per second after a burst, `1..=10000`.
    pub per_s: u32,
    /// Requests at once after a quiet period, `1..=10000`.
    pub burst: u32,
    /// Requests in flight at most, `1..=256`.
    pub in_flight: usize,
}

/// Leader election over a coordination.k8s.io/v1 Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderElectionPlan {
    /// A DNS subdomain name.
    pub lease_name: String,
    /// A DNS label.
    pub lease_namespace: String,
    /// `> renew_deadline_ms`.
    pub lease_duration_ms: u64,
    /// `> retry_period_ms`.
    pub renew_deadline_ms: u64,
    /// `>= 1`.
    pub retry_period_ms: u64,
    /// Non-empty; `None`: the host name.
    pub identity: Option<String>,
}

/// A LoadBalancer address pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddressPoolPlan {
    /// A DNS label, unique among the pools.
    pub name: String,
    /// The pool's addresses in file order; pairwise disjoint. A pool may
    /// list ranges of both families (a dual-stack Service takes one
    /// address of each).
    pub ranges: Vec<IpRange>,
    /// Addresses go to Services that request nothing in particular.
    pub auto_assign: bool,
    /// IPv4 addresses ending in `.0` or `.255` are never handed out.
    pub avoid_buggy_ips: bool,
}

impl AddressPoolPlan {
    /// Whether `addr` may be handed out from this pool (inside a range,
    /// and not a buggy IP when those are avoided).
    pub fn offers(&self, addr: impl Into<IpAddr>) -> bool {
        let addr = addr.into();
        self.ranges.iter().any(|r| r.contains(addr))
            && !(self.avoid_buggy_ips && crate::addr::is_buggy_ip(addr))
    }

    /// Addresses that may be handed out (saturated at `u128::MAX`).
    pub fn size(&self) -> u128 {
        self.ranges.iter().fold(0u128, |n, r| {
            n.saturating_add(r.usable_count(self.avoid_buggy_ips))
        })
    }

    /// Addresses of one family (`ipv4`) that may be handed out.
    pub fn size_of_family(&self, ipv4: bool) -> u128 {
        self.ranges
            .iter()
            .filter(|r| r.is_ipv4() == ipv4)
            .fold(0u128, |n, r| {
                n.saturating_add(r.usable_count(self.avoid_buggy_ips))
            })
    }

    /// Whether the pool lists a range of the family (`ipv4`).
    pub fn has_family(&self, ipv4: bool) -> bool {
        self.ranges.iter().any(|r| r.is_ipv4() == ipv4)
    }
}

/// Worker and table settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataplanePlan {
    /// Worker threads, `1..=64`.
    pub workers: usize,
    /// Core of each worker (`cores.len() == workers`), or empty: unpinned.
    pub cores: Vec<usize>,
    /// Frames per receive burst, `1..=64`.
    pub batch_size: usize,
    pub idle: IdlePolicy,
    /// Idle polls an adaptive worker spins before it blocks (0 with
    /// `idle = spin`, where it means nothing).
    pub idle_spin_polls: u32,
    /// Prime, at least the largest backend count.
    pub maglev_table_size: u32,
    pub conntrack: ConntrackPlan,
    pub snat: SnatPlan,
    /// ClientIP affinity entries per worker.
    pub affinity_capacity: u32,
    pub afxdp: AfxdpPlan,
    pub afpacket: AfpacketPlan,
    pub neighbour_table: NeighbourTablePlan,
    /// New flows per second and client address per worker; 0: no limit.
    pub new_flows_per_source_per_s: u32,
    /// Leading bits of an IPv6 client address counted as one source.
    pub source_prefix_len_v6: u8,
}

/// The ARP table's size and timers (`[dataplane.neighbour_table]`),
/// validated; the same fields as the dataplane's `NeighbourConfig`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeighbourTablePlan {
    /// A power of two, `16..=2^22`.
    pub capacity: u32,
    pub reachable_ms: u64,
    pub retrans_ms: u64,
    pub max_probes: u32,
    pub failed_hold_ms: u64,
    pub gc_stale_ms: u64,
    /// At most `capacity`.
    pub gc_min_entries: u32,
}

/// The AF_XDP driver's settings (`[dataplane.afxdp]`), validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AfxdpPlan {
    pub mode: XdpModeSetting,
    pub zero_copy: ZeroCopySetting,
    /// 2048 or 4096.
    pub frame_size: u32,
    pub umem_frames: u32,
    /// Ring entries, powers of two.
    pub fill_ring_size: u32,
    pub completion_ring_size: u32,
    pub rx_ring_size: u32,
    pub tx_ring_size: u32,
    pub need_wakeup: bool,
    /// `SO_PREFER_BUSY_POLL` and friends; `busy_poll_us` and
    /// `busy_poll_budget` are non-zero.
    pub busy_poll: bool,
    pub busy_poll_us: u32,
    pub busy_poll_budget: u32,
    pub shared_umem: bool,
    pub multi_buffer: MultiBufferSetting,
}

/// The af_packet driver's rings (`[dataplane.afpacket]`), validated, with
/// the defaults of the mode filled in (the other mode's fields keep their
/// defaults and are unused).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AfpacketPlan {
    pub rx_ring: AfpacketRxRing,
    pub rx_frame_count: u32,
    /// A multiple of 4096.
    pub rx_block_size: u32,
    pub rx_block_count: u32,
    pub rx_block_timeout_ms: u32,
    pub tx_frame_count: u32,
    /// GSO/GRO pass-through (`PACKET_VNET_HDR`, offloads kept on).
    pub gso: bool,
    pub tx_path: AfpacketTxPath,
    pub rx_path: AfpacketRxPath,
}

/// Per-worker flow table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConntrackPlan {
    /// `1..=2^30` flows per worker.
    pub capacity: u32,
    /// Non-zero.
    pub expiry_scan_per_poll: u32,
    /// 0 disables early drop.
    pub early_drop_scan: u32,
    /// Most SYN-proxied flows at a time (the splice array),
    /// `1..=min(capacity, 65536)`.
    pub syn_proxy_flows: u32,
    pub timeouts: TimeoutsMs,
}

/// Idle timeouts per flow state in milliseconds, all non-zero (the same
/// fields as the dataplane's `conntrack::Timeouts`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeoutsMs {
    pub tcp_syn_sent_ms: u64,
    pub tcp_syn_recv_ms: u64,
    pub tcp_established_ms: u64,
    pub tcp_fin_wait_ms: u64,
    pub tcp_close_wait_ms: u64,
    pub tcp_last_ack_ms: u64,
    pub tcp_time_wait_ms: u64,
    pub tcp_close_ms: u64,
    pub udp_ms: u64,
    pub udp_stream_ms: u64,
    pub icmp_ms: u64,
}

/// Full-NAT source addresses and ports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnatPlan {
    /// Every SNAT address, in file order (port by port), of either family.
    pub addresses: Vec<IpAddr>,
    /// At least 64 ports per worker.
    pub port_range: RangeInclusive<u16>,
    pub quarantine_ms: u64,
}

/// One port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortPlan {
    pub name: String,
    pub driver: DriverKind,
    pub interface: String,
    pub role: PortRole,
    pub node_addresses: Vec<IpPrefix>,
    pub snat_addresses: Vec<IpPrefix>,
    /// Addresses of the appliance itself on this port, with their prefix,
    /// answered by the kernel through [`PortPlan::host_interface`] (the
    /// host path). A plain per-port list: not in [`Plan::addresses`], so a
    /// per-instance override can replace it whole.
    pub host_addresses: Vec<IpPrefix>,
    /// The TAP carrying `host_addresses`; `Some` exactly when there are
    /// host addresses. A valid interface name, distinct from every port's
    /// interface and every other host interface.
    pub host_interface: Option<String>,
    /// `None`: read from the interface at run time.
    pub mac: Option<MacAddr>,
    /// `None`: the interface's.
    pub mtu: Option<u16>,
    /// `None`: SYNs leaving the port are not clamped.
    pub mss_clamp: Option<MssClampPlan>,
    /// `Some` exactly for driver `dpdk`.
    pub dpdk_device: Option<DpdkDevicePlan>,
}

/// A port's MSS clamp, validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MssClampPlan {
    /// This many bytes.
    Bytes(u16),
    /// The port's MTU − 40 (IPv4 and TCP headers without options).
    Pmtu,
}

impl MssClampPlan {
    /// The clamp in bytes on a port of `mtu`.
    pub fn bytes(self, mtu: u16) -> u16 {
        match self {
            MssClampPlan::Bytes(b) => b,
            MssClampPlan::Pmtu => mtu.saturating_sub(40),
        }
    }
}

impl std::fmt::Display for MssClampPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MssClampPlan::Bytes(b) => write!(f, "{b}"),
            MssClampPlan::Pmtu => f.write_str("pmtu (MTU - 40)"),
        }
    }
}

/// Why the gateway owns an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AddressRole {
    /// NodePorts listen here.
    Node,
    /// Full-NAT source address.
    Snat,
}

/// An address the gateway owns (answers ARP or NDP and ICMP echo for) on
/// a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnedAddress {
    pub address: IpAddr,
    pub port: PortIndex,
    pub role: AddressRole,
}

/// A connected subnet (`via: None`, from a port address or an on-link
/// static route) or a route through a next hop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoutePlan {
    /// No host bits set.
    pub destination: IpPrefix,
    pub port: PortIndex,
    /// Of the destination's family; an IPv6 next hop may be link-local
    /// (`fe80::/10`) when the route names its port.
    pub via: Option<IpAddr>,
}

/// A static neighbour entry (an ARP entry for IPv4, an NDP one for IPv6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeighbourPlan {
    pub address: IpAddr,
    pub mac: MacAddr,
}

/// What kind of address a listener is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ListenerKind {
    /// The service's `vip` (a LoadBalancer IP).
    Vip,
    /// One of the service's `external_ips`.
    ExternalIp,
    /// The service's `node_port` on a node address.
    NodePort,
}

/// Traffic a service accepts: its protocol to `address:port`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenerPlan {
    pub address: IpAddr,
    pub port: u16,
    pub kind: ListenerKind,
}

/// A backend of a service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackendPlan {
    pub address: SocketAddr,
    /// `0..=65535`; 0 takes no new flows.
    pub weight: u32,
    pub condition: EndpointCondition,
}

/// A standalone service: single-family (its listeners and backends are all
/// IPv4 or all IPv6; no NAT46/64).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServicePlan {
    pub name: String,
    pub protocol: Protocol,
    /// VIP first, then external IPs, then the NodePort on every node
    /// address of the service's family.
    pub listeners: Vec<ListenerPlan>,
    pub backends: Vec<BackendPlan>,
    /// Full NAT.
    pub snat: bool,
    /// ClientIP affinity timeout; `None`: no affinity.
    pub affinity_timeout_ms: Option<u64>,
    pub tcp_backend_gone: BackendGone,
    pub syn_proxy: SynProxyPlan,
    /// TCP flows picked up mid-stream (`snat = false` only).
    pub tcp_pickup: bool,
}

/// A service's SYN proxy setting, validated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SynProxyPlan {
    #[default]
    Off,
    On,
    /// Cookies while a worker tracks more half-open flows than this.
    Auto {
        half_open_threshold: u32,
    },
}

impl std::fmt::Display for SynProxyPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SynProxyPlan::Off => f.write_str("off"),
            SynProxyPlan::On => f.write_str("on"),
            SynProxyPlan::Auto {
                half_open_threshold,
            } => write!(f, "auto above {half_open_threshold} half-open flows"),
        }
    }
}

impl Plan {
    /// Index of the port called `name`.
    pub fn port_index(&self, name: &str) -> Option<PortIndex> {
        self.ports.iter().position(|p| p.name == name)
    }

    /// The service called `name`.
    pub fn service(&self, name: &str) -> Option<&ServicePlan> {
        self.services.iter().find(|s| s.name == name)
    }

    /// Name of port `index` (or `?` when out of range).
    fn port_name(&self, index: PortIndex) -> &str {
        self.ports.get(index).map_or("?", |p| p.name.as_str())
    }
}

impl TimeoutsMs {
    /// Every timeout with its field name.
    pub fn named(&self) -> [(&'static str, u64); 11] {
        [
            ("tcp_syn_sent_ms", self.tcp_syn_sent_ms),
            ("tcp_syn_recv_ms", self.tcp_syn_recv_ms),
            ("tcp_established_ms", self.tcp_established_ms),
            ("tcp_fin_wait_ms", self.tcp_fin_wait_ms),
            ("tcp_close_wait_ms", self.tcp_close_wait_ms),
            ("tcp_last_ack_ms", self.tcp_last_ack_ms),
            ("tcp_time_wait_ms", self.tcp_time_wait_ms),
            ("tcp_close_ms", self.tcp_close_ms),
            ("udp_ms", self.udp_ms),
            ("udp_stream_ms", self.udp_stream_ms),
            ("icmp_ms", self.icmp_ms),
        ]
    }
}
