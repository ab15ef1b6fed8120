//! The file as written: `portico.toml`, section by section.
//!
//! These structs are the reference for the file format; every field's doc
//! comment says what it means, its unit and its default. Every table rejects
//! unknown keys (`deny_unknown_fields`), so a misspelt key is an error, never
//! silently ignored.
//!
//! Values that need checking against each other (addresses, prefixes, MACs,
//! port numbers, ranges) are kept loose here (strings, `u64`) so that
//! [`validate`](crate::validate()) can report every problem of a file at once,
//! each with its field path, instead of stopping at the first bad value.
//!
//! One section is not defined here: `[bgp]` is portico-bgp's
//! [`BgpConfig`] (`[[bgp.peer]]`, `[[bgp.advertisement]]`), embedded as is:
//! that crate owns the types, their defaults and their own checks
//! ([`BgpConfig::validate`]); [`mod@crate::validate`] adds the checks that
//! need the rest of the file (addresses, pools, services).
//!
//! Why one file of ~900 lines: it is the format's reference, read top to
//! bottom like the specification it is (one struct per table, in the
//! file's order, each field with its meaning, unit and default; a third of
//! it is doc comments). The checks live apart, one file per section, in
//! [`mod@crate::validate`].

pub use portico_bgp::BgpConfig;
use serde::Deserialize;

/// The whole file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// `[dataplane]`: workers, batching, tables. Every key has a default.
    #[serde(default)]
    pub dataplane: DataplaneSection,
    /// `[[port]]`: the network ports the gateway owns, in order (the first
    /// is port index 0).
    #[serde(default, rename = "port")]
    pub ports: Vec<PortSection>,
    /// `[[route]]`: static routes. Directly connected subnets come from the
    /// port addresses and need no entry.
    #[serde(default, rename = "route")]
    pub routes: Vec<RouteSection>,
    /// `[[neighbour]]`: static IP → MAC entries (ARP for IPv4, NDP for
    /// IPv6). Optional: ARP and NDP resolve every other next hop and
    /// backend.
    #[serde(default, rename = "neighbour")]
    pub neighbours: Vec<NeighbourSection>,
    /// `[[service]]`: the standalone services (no Kubernetes).
    #[serde(default, rename = "service")]
    pub services: Vec<ServiceSection>,
    /// `[dpdk]`: the EAL of the `dpdk` driver. Read only when a port has
    /// `driver = "dpdk"`; every key has a default.
    #[serde(default)]
    pub dpdk: DpdkSection,
    /// `[kubernetes]`: watch a cluster's Services and EndpointSlices. Its
    /// presence turns the Kubernetes source on; every key has a default.
    #[serde(default)]
    pub kubernetes: Option<KubernetesSection>,
    /// `[[address_pool]]` (also accepted as `[[address_pools]]`): addresses
    /// handed out to LoadBalancer Services, MetalLB-style. Used with
    /// `[kubernetes]`.
    #[serde(default, rename = "address_pool", alias = "address_pools")]
    pub address_pools: Vec<AddressPoolSection>,
    /// `[bgp]`: `[[bgp.peer]]` sessions and `[[bgp.advertisement]]`
    /// attribute sets, portico-bgp's [`BgpConfig`] (see its fields for the
    /// keys, units and defaults). Pools and services choose the
    /// advertisements their addresses are announced with
    /// (`bgp_advertisements`). Default: no BGP.
    #[serde(default)]
    pub bgp: BgpConfig,
    /// `[[instance]]`: the instances of a tier run from this one file, each
    /// with its own node and SNAT addresses (two instances must never
    /// claim the same address). An instance runs as one of them with
    /// `portico run --instance NAME` (or `PORTICO_INSTANCE`). Default none:
    /// the `[[port]]` addresses are the one instance's.
    #[serde(default, rename = "instance")]
    pub instances: Vec<InstanceSection>,
}

/// `[[instance]]`: one instance of the tier.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceSection {
    /// Unique among the instances, a DNS subdomain name of at most 180
    /// bytes (it names the instance's member Lease): the node name the
    /// shipped Deployment passes in (`PORTICO_INSTANCE` from
    /// `spec.nodeName`).
    pub name: String,
    /// `[[instance.port]]`: the instance's addresses on each `[[port]]`.
    #[serde(default, rename = "port")]
    pub ports: Vec<PortOverrideSection>,
    /// The BGP identifier (an IPv4 address) this instance uses in every
    /// `[[bgp.peer]]` session, in place of the peer's `router_id`: two
    /// speakers of a tier must not share one (RFC 4271 §6.8 collision
    /// detection). Required for every instance when the file has
    /// `[[bgp.peer]]`s and more than one instance. Default none.
    #[serde(default)]
    pub bgp_router_id: Option<String>,
}

/// `[[instance.port]]`: what one instance has of its own on one port: the
/// per-instance keys of `[[port]]`, which the `[[port]]` itself then leaves
/// empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortOverrideSection {
    /// The `[[port]]`'s name.
    pub name: String,
    /// As `[[port]]`'s `node_addresses`, for this instance. Default none.
    #[serde(default)]
    pub node_addresses: Vec<String>,
    /// As `[[port]]`'s `snat_addresses`, for this instance. Default none.
    #[serde(default)]
    pub snat_addresses: Vec<String>,
    /// As `[[port]]`'s `host_addresses`, for this instance (its own BGP
    /// source address, its own SSH address). Default none.
    #[serde(default)]
    pub host_addresses: Vec<String>,
    /// This instance's kernel interface for the port, when its name differs
    /// from the `[[port]]`'s (boxes with other NIC names). Default: the
    /// `[[port]]`'s.
    #[serde(default)]
    pub interface: Option<String>,
    /// This instance's driver for the port, when it differs from the
    /// `[[port]]`'s (a box with other NICs in the tier). Default: the
    /// `[[port]]`'s.
    #[serde(default)]
    pub driver: Option<DriverKind>,
}

impl PortOverrideSection {
    /// The per-instance keys, by name (as in the file).
    pub const KEYS: [&'static str; 3] = ["node_addresses", "snat_addresses", "host_addresses"];

    /// Put this instance's keys into `port` (the one place that knows
    /// which keys are per instance).
    pub fn apply_to(&self, port: &mut PortSection) {
        port.node_addresses.clone_from(&self.node_addresses);
        port.snat_addresses.clone_from(&self.snat_addresses);
        port.host_addresses.clone_from(&self.host_addresses);
        if let Some(interface) = &self.interface {
            port.interface.clone_from(interface);
        }
        if let Some(driver) = self.driver {
            port.driver = driver;
        }
    }

    /// The per-instance keys a `[[port]]` sets itself (those must stay
    /// empty when instances are declared), by key name.
    pub fn keys_set_in(port: &PortSection) -> Vec<&'static str> {
        let mut keys = Vec::new();
        if !port.node_addresses.is_empty() {
            keys.push("node_addresses");
        }
        if !port.snat_addresses.is_empty() {
            keys.push("snat_addresses");
        }
        if !port.host_addresses.is_empty() {
            keys.push("host_addresses");
        }
        keys
    }
}

/// `[dpdk]`: how the DPDK environment (EAL) starts. Workers, their cores
/// and the batch size stay in `[dataplane]`: each worker drives one RX and
/// one TX queue of every port and has its own mbuf pool.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DpdkSection {
    /// CPU cores the EAL's main lcore (the control thread) may run on, all
    /// different. Default: every CPU the process may run on.
    #[serde(default)]
    pub cores: Option<Vec<u64>>,
    /// Memory the EAL reserves, in megabytes, `64..=1048576`. Default 512.
    #[serde(default = "default_dpdk_memory_mb")]
    pub memory_mb: u64,
    /// Back the memory with hugepages (`--in-memory`); needed for PCI
    /// devices. `false` runs on ordinary pages (`--no-huge`), enough for
    /// vdevs. Default false.
    #[serde(default)]
    pub hugepages: bool,
    /// RX descriptors per queue, `64..=16384` (the device may adjust it).
    /// Default 1024.
    #[serde(default = "default_dpdk_desc")]
    pub rx_desc: u64,
    /// TX descriptors per queue, `64..=16384`. Default 1024.
    #[serde(default = "default_dpdk_desc")]
    pub tx_desc: u64,
    /// Further EAL arguments, passed verbatim after Portico's own (e.g.
    /// `["--log-level=pmd.net.af_packet:debug"]`). Default none.
    #[serde(default)]
    pub extra_args: Vec<String>,
}

impl Default for DpdkSection {
    fn default() -> Self {
        DpdkSection {
            cores: None,
            memory_mb: default_dpdk_memory_mb(),
            hugepages: false,
            rx_desc: default_dpdk_desc(),
            tx_desc: default_dpdk_desc(),
            extra_args: Vec::new(),
        }
    }
}

/// `[kubernetes]`: the Kubernetes source (Services, EndpointSlices), status
/// write-back and leader election. Node addresses are the ports'
/// `node_addresses`: NodePorts listen there.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesSection {
    /// Path of a kubeconfig file. Default: `$KUBECONFIG`, then
    /// `~/.kube/config`, then the in-cluster service account.
    #[serde(default)]
    pub kubeconfig: Option<String>,
    /// `spec.loadBalancerClass` of the Services Portico serves: a qualified
    /// name like a label key (`"example.com/name"`). Default
    /// `"portico.dev/lb"`.
    #[serde(default = "default_load_balancer_class")]
    pub load_balancer_class: String,
    /// Also serve Services without a `loadBalancerClass` (Portico is the
    /// cluster's default load balancer, as MetalLB is). Default false.
    #[serde(default)]
    pub serve_unclassed: bool,
    /// Quiet time in milliseconds after the last API event of a burst
    /// before the dataplane's tables are rebuilt, `0..=10000`. Default 20.
    #[serde(default = "default_debounce_ms")]
    pub debounce_ms: u64,
    /// Longest wait in milliseconds from the first event of a burst to the
    /// rebuild, however long the burst goes on; at least `debounce_ms`, at
    /// most 60000. Default 10 × `debounce_ms`.
    #[serde(default)]
    pub debounce_max_ms: Option<u64>,
    /// Name of the coordination.k8s.io/v1 Lease the instances compete for
    /// (a DNS subdomain name). Default `"portico"`.
    #[serde(default = "default_lease_name")]
    pub lease_name: String,
    /// Namespace of the Lease (a DNS label). Default `"default"`.
    #[serde(default = "default_lease_namespace")]
    pub lease_namespace: String,
    /// How long a Lease holds without renewal, in milliseconds; more than
    /// `renew_deadline_ms`. Default 15000 (client-go's default).
    #[serde(default = "default_lease_duration_ms")]
    pub lease_duration_ms: u64,
    /// How long the leader keeps trying to renew before it gives up
    /// leadership (and stops writing), in milliseconds; more than
    /// `retry_period_ms`, less than `lease_duration_ms`. Default 10000.
    #[serde(default = "default_renew_deadline_ms")]
    pub renew_deadline_ms: u64,
    /// Time between two attempts to acquire or renew, in milliseconds, at
    /// least 1. Default 2000.
    #[serde(default = "default_retry_period_ms")]
    pub retry_period_ms: u64,
    /// This instance's name in the Lease (`holderIdentity`), non-empty.
    /// Default: the host name.
    #[serde(default)]
    pub identity: Option<String>,
    /// The leader's budget on the API server for what it writes back
    /// (status PATCHes and Events, which have no batch form): requests per
    /// second at most after a burst, `1..=10000`. Default 200 (ten times
    /// controller-runtime's default client QPS; a cold start at 10,000
    /// Services writes every status in 50 s).
    #[serde(default = "default_status_writes_per_s")]
    pub status_writes_per_s: u64,
    /// Requests the leader may send at once after a quiet period,
    /// `1..=10000`. Default 50.
    #[serde(default = "default_status_write_burst")]
    pub status_write_burst: u64,
    /// Status PATCHes and Events in flight at most, `1..=256`. Default 8.
    #[serde(default = "default_status_writes_in_flight")]
    pub status_writes_in_flight: u64,
    /// CIDRs of either family (`"203.0.113.0/24"`, `"2001:db8:e::/64"`) a
    /// Service's `spec.externalIPs` may come from. Anyone who can create a Service can ask for any externalIP, and
    /// Portico would answer ARP for it, so by default none is served (what
    /// Kubernetes' DenyServiceExternalIPs admission plugin intends); a
    /// Service asking for one outside these gets a Warning Event.
    #[serde(default)]
    pub external_ip_cidrs: Vec<String>,
    /// SYN flood defence of TCP Services without the `portico.dev/syn-proxy`
    /// annotation: `"off"`, `"on"` or `"auto"`, as a static service's
    /// `syn_proxy`. Default `"off"`. The annotation (same values) overrides
    /// it per Service.
    #[serde(default)]
    pub syn_proxy: Option<SynProxy>,
    /// Half-open flows per worker above which `"auto"` (here or in a
    /// Service's annotation) answers SYNs with cookies, `1..=16777216`.
    /// Default 1000.
    #[serde(default)]
    pub syn_proxy_half_open_threshold: Option<u64>,
}

impl Default for KubernetesSection {
    fn default() -> Self {
        KubernetesSection {
            kubeconfig: None,
            load_balancer_class: default_load_balancer_class(),
            serve_unclassed: false,
            debounce_ms: default_debounce_ms(),
            debounce_max_ms: None,
            lease_name: default_lease_name(),
            lease_namespace: default_lease_namespace(),
            lease_duration_ms: default_lease_duration_ms(),
            renew_deadline_ms: default_renew_deadline_ms(),
            retry_period_ms: default_retry_period_ms(),
            identity: None,
            status_writes_per_s: default_status_writes_per_s(),
            status_write_burst: default_status_write_burst(),
            status_writes_in_flight: default_status_writes_in_flight(),
            external_ip_cidrs: Vec::new(),
            syn_proxy: None,
            syn_proxy_half_open_threshold: None,
        }
    }
}

/// `[[address_pool]]`: addresses for LoadBalancer Services.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddressPoolSection {
    /// Unique name, as Services request it in the `portico.dev/address-pool`
    /// annotation: 1 to 63 lowercase letters, digits and `-`, starting and
    /// ending with a letter or digit (a DNS label).
    pub name: String,
    /// The pool's addresses: CIDRs (`"192.0.2.0/28"`, `"2001:db8:1::/120"`,
    /// no host bits) and inclusive ranges (`"192.0.2.10-192.0.2.20"`,
    /// `"2001:db8::10-2001:db8::20"`, first <= last, one family), of either
    /// family or both (a dual-stack Service takes one of each). At least
    /// one; no address in two entries or two pools, none a node or SNAT
    /// address or a standalone service's address; no IPv6 link-local,
    /// multicast or `::/8` address.
    pub addresses: Vec<String>,
    /// Hand out addresses of this pool to Services that ask for no pool and
    /// no address. `false`: only Services that name the pool or one of its
    /// addresses get them. Default true.
    #[serde(default = "yes")]
    pub auto_assign: bool,
    /// Never hand out addresses ending in `.0` or `.255` (some old
    /// equipment mistakes them for network or broadcast addresses).
    /// Default false.
    #[serde(default)]
    pub avoid_buggy_ips: bool,
    /// Names of the `[[bgp.advertisement]]`s the pool's addresses are
    /// announced with (when assigned to a Service with a ready backend),
    /// each listed once. Default none: the pool's addresses are not
    /// announced by BGP (only by ARP on the outside port).
    #[serde(default)]
    pub bgp_advertisements: Vec<String>,
}

/// `[dataplane]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataplaneSection {
    /// Number of worker threads, `1..=64`. Default: the number of `cores`
    /// when `cores` is given, else 1. When both are given they must agree.
    #[serde(default)]
    pub workers: Option<u64>,
    /// CPU cores to pin the workers to, one per worker, all different.
    /// Default: unpinned.
    #[serde(default)]
    pub cores: Option<Vec<u64>>,
    /// Frames per receive burst, `1..=64`. Default 64.
    #[serde(default = "default_batch_size")]
    pub batch_size: u64,
    /// What a worker does when a poll finds nothing: `"adaptive"` (spin
    /// briefly, then block in the kernel until the first packet; for shared machines and CI) or `"spin"`
    /// (busy-poll; one dedicated core per worker). Default `"adaptive"`.
    #[serde(default)]
    pub idle: IdlePolicy,
    /// With `idle = "adaptive"`: idle polls a worker spins before it blocks,
    /// `0..=1000000` (0: block after the first idle poll). Spinning keeps a
    /// packet that arrives soon after the last from waiting for a wake-up,
    /// at the price of CPU the core could give to other processes.
    /// Default 64, chosen by measurement (bench/RESULTS.md, "The idle spin
    /// budget").
    #[serde(default)]
    pub idle_spin_polls: Option<u64>,
    /// Largest Maglev lookup table: a prime, at least the largest backend
    /// count of any service, at most 2^24. Each service's table has about
    /// 100-200 slots per backend (the next size of a ladder of primes, see
    /// the dataplane's `maglev::table_size_for`), at most this many. Larger
    /// tables spread load more evenly and disrupt fewer flows when backends
    /// change. Default 16381.
    #[serde(default = "default_maglev_table_size")]
    pub maglev_table_size: u64,
    /// New flows per second one client address may open, per worker,
    /// `0..=1000000`; 0 (the default) is no limit. Flows over it are
    /// dropped as `new_flow_rate_limited`.
    #[serde(default)]
    pub new_flows_per_source_per_s: u64,
    /// How many leading bits of an IPv6 client address make one source
    /// for `new_flows_per_source_per_s`, `1..=128`; 64 (the default)
    /// counts a /64 as one source (one host owns a /64, so a per-address
    /// limit would be trivial to evade).
    #[serde(default = "default_source_prefix_len_v6")]
    pub source_prefix_len_v6: u64,
    /// `[dataplane.conntrack]`.
    #[serde(default)]
    pub conntrack: ConntrackSection,
    /// `[dataplane.snat]`.
    #[serde(default)]
    pub snat: SnatSection,
    /// `[dataplane.affinity]`.
    #[serde(default)]
    pub affinity: AffinitySection,
    /// `[dataplane.afxdp]`: settings of the AF_XDP driver (used by ports
    /// with `driver = "afxdp"`).
    #[serde(default)]
    pub afxdp: AfxdpSection,
    /// `[dataplane.afpacket]`: settings of the af_packet driver (used by
    /// ports with `driver = "afpacket"`).
    #[serde(default)]
    pub afpacket: AfpacketSection,
    /// `[dataplane.neighbour_table]`: the ARP table's size and timers.
    #[serde(default)]
    pub neighbour_table: NeighbourTableSection,
}

/// `dataplane.idle_spin_polls` when not given.
pub const DEFAULT_IDLE_SPIN_POLLS: u64 = 64;

fn default_source_prefix_len_v6() -> u64 {
    64
}

impl Default for DataplaneSection {
    fn default() -> Self {
        DataplaneSection {
            workers: None,
            cores: None,
            batch_size: default_batch_size(),
            idle: IdlePolicy::default(),
            idle_spin_polls: None,
            maglev_table_size: default_maglev_table_size(),
            new_flows_per_source_per_s: 0,
            source_prefix_len_v6: default_source_prefix_len_v6(),
            conntrack: ConntrackSection::default(),
            snat: SnatSection::default(),
            affinity: AffinitySection::default(),
            afxdp: AfxdpSection::default(),
            afpacket: AfpacketSection::default(),
            neighbour_table: NeighbourTableSection::default(),
        }
    }
}

/// `[dataplane.neighbour_table]`: the ARP table shared by the workers (next
/// hops and on-link backends). Static entries are `[[neighbour]]`. The
/// defaults are Linux's (`base_reachable_time_ms`, `retrans_time_ms`,
/// `mcast_solicit`, `gc_stale_time`, `gc_thresh1`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NeighbourTableSection {
    /// Entries over all ports, `16..=4194304`, rounded up to a power of
    /// two. Default 16384.
    #[serde(default = "default_neighbour_capacity")]
    pub capacity: u64,
    /// How long a confirmed MAC is used before it is re-probed,
    /// `1000..=86400000`. Default 30000.
    #[serde(default = "default_reachable_ms")]
    pub reachable_ms: u64,
    /// Least time between two ARP requests for one address, `10..=60000`.
    /// Default 1000.
    #[serde(default = "default_retrans_ms")]
    pub retrans_ms: u64,
    /// Unanswered requests before an entry fails, `1..=100`. Default 3.
    #[serde(default = "default_max_probes")]
    pub max_probes: u64,
    /// How long a failed entry drops packets before probing again,
    /// `0..=3600000`. Default 5000.
    #[serde(default = "default_failed_hold_ms")]
    pub failed_hold_ms: u64,
    /// How long an entry may go unused before it is reclaimed,
    /// `1000..=86400000`. Default 60000.
    #[serde(default = "default_gc_stale_ms")]
    pub gc_stale_ms: u64,
    /// Nothing is reclaimed while fewer entries are in use, at most
    /// `capacity`. Default 4096.
    #[serde(default = "default_gc_min_entries")]
    pub gc_min_entries: u64,
}

impl Default for NeighbourTableSection {
    fn default() -> Self {
        NeighbourTableSection {
            capacity: default_neighbour_capacity(),
            reachable_ms: default_reachable_ms(),
            retrans_ms: default_retrans_ms(),
            max_probes: default_max_probes(),
            failed_hold_ms: default_failed_hold_ms(),
            gc_stale_ms: default_gc_stale_ms(),
            gc_min_entries: default_gc_min_entries(),
        }
    }
}

fn default_neighbour_capacity() -> u64 {
    16_384
}
fn default_reachable_ms() -> u64 {
    30_000
}
fn default_retrans_ms() -> u64 {
    1_000
}
fn default_max_probes() -> u64 {
    3
}
fn default_failed_hold_ms() -> u64 {
    5_000
}
fn default_gc_stale_ms() -> u64 {
    60_000
}
fn default_gc_min_entries() -> u64 {
    4_096
}

/// `[dataplane.conntrack]`: the per-worker flow table.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConntrackSection {
    /// Most live flows per worker, `1..=2^30`. When full, unassured flows
    /// (no reply seen) are dropped early to make room. Default 262144.
    #[serde(default = "default_conntrack_capacity")]
    pub capacity: u64,
    /// Flow slots examined for expiry in one slice, at least 1 (bounded
    /// work): a worker runs a slice after every poll that found no
    /// packets and, while packets keep coming, once per millisecond; so a
    /// saturated worker sweeps 64,000 slots a second at the default.
    /// Default 64.
    #[serde(default = "default_scan")]
    pub expiry_scan_per_poll: u64,
    /// Flow slots examined for an early-drop victim when the table is
    /// full; 0 disables early drop. Default 64.
    #[serde(default = "default_scan")]
    pub early_drop_scan: u64,
    /// Most SYN-proxied flows per worker at a time: the size of the SYN
    /// proxy's splice array, `1..=65536` and at most `capacity`. A client
    /// whose cookie validates beyond it is dropped
    /// (`syn_proxy_table_full`); unproxied flows are unaffected. Default
    /// one per 16 flows of `capacity` (at most 65536).
    pub syn_proxy_flows: Option<u64>,
    /// `[dataplane.conntrack.timeouts]`.
    #[serde(default)]
    pub timeouts: TimeoutsSection,
}

impl Default for ConntrackSection {
    fn default() -> Self {
        ConntrackSection {
            capacity: default_conntrack_capacity(),
            expiry_scan_per_poll: default_scan(),
            early_drop_scan: default_scan(),
            syn_proxy_flows: None,
            timeouts: TimeoutsSection::default(),
        }
    }
}

/// `[dataplane.conntrack.timeouts]`: idle timeouts per flow state, in
/// seconds, each at least 1. The defaults are Linux's `nf_conntrack`
/// timeouts with kube-proxy's overrides (established 24 h, close-wait 1 h),
/// so flows are forgotten when a kube-proxy node would forget them.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeoutsSection {
    /// TCP, SYN seen, no reply yet. Default 120.
    #[serde(default = "s120")]
    pub tcp_syn_sent_s: u64,
    /// TCP, SYN-ACK seen. Default 60.
    #[serde(default = "s60")]
    pub tcp_syn_recv_s: u64,
    /// TCP, established. Default 86400 (kube-proxy's 24 h).
    #[serde(default = "s86400")]
    pub tcp_established_s: u64,
    /// TCP, first FIN seen. Default 120.
    #[serde(default = "s120")]
    pub tcp_fin_wait_s: u64,
    /// TCP, FIN answered by ACK only. Default 3600 (kube-proxy's 1 h).
    #[serde(default = "s3600")]
    pub tcp_close_wait_s: u64,
    /// TCP, both FINs seen, last ACK pending. Default 30.
    #[serde(default = "s30")]
    pub tcp_last_ack_s: u64,
    /// TCP, closed by FINs. Default 120.
    #[serde(default = "s120")]
    pub tcp_time_wait_s: u64,
    /// TCP, closed by RST. Default 10.
    #[serde(default = "s10")]
    pub tcp_close_s: u64,
    /// UDP, no reply seen yet. Default 30.
    #[serde(default = "s30")]
    pub udp_s: u64,
    /// UDP, a reply was seen (Linux's `udp_timeout_stream`). Default 120.
    #[serde(default = "s120")]
    pub udp_stream_s: u64,
    /// ICMP echo. Default 30.
    #[serde(default = "s30")]
    pub icmp_s: u64,
}

impl Default for TimeoutsSection {
    fn default() -> Self {
        TimeoutsSection {
            tcp_syn_sent_s: 120,
            tcp_syn_recv_s: 60,
            tcp_established_s: 86_400,
            tcp_fin_wait_s: 120,
            tcp_close_wait_s: 3_600,
            tcp_last_ack_s: 30,
            tcp_time_wait_s: 120,
            tcp_close_s: 10,
            udp_s: 30,
            udp_stream_s: 120,
            icmp_s: 30,
        }
    }
}

impl TimeoutsSection {
    /// Every timeout with its key name, in file order.
    pub fn named(&self) -> [(&'static str, u64); 11] {
        [
            ("tcp_syn_sent_s", self.tcp_syn_sent_s),
            ("tcp_syn_recv_s", self.tcp_syn_recv_s),
            ("tcp_established_s", self.tcp_established_s),
            ("tcp_fin_wait_s", self.tcp_fin_wait_s),
            ("tcp_close_wait_s", self.tcp_close_wait_s),
            ("tcp_last_ack_s", self.tcp_last_ack_s),
            ("tcp_time_wait_s", self.tcp_time_wait_s),
            ("tcp_close_s", self.tcp_close_s),
            ("udp_s", self.udp_s),
            ("udp_stream_s", self.udp_stream_s),
            ("icmp_s", self.icmp_s),
        ]
    }
}

/// `[dataplane.snat]`: source ports for full NAT. The addresses are the
/// ports' `snat_addresses`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnatSection {
    /// Source ports handed out, `"first-last"` (inclusive, `1..=65535`).
    /// Each worker owns a disjoint slice of at least 64 ports. Must not
    /// contain a NodePort when an address is both a node and a SNAT
    /// address. Default `"1024-65535"`.
    #[serde(default = "default_port_range")]
    pub port_range: String,
    /// Seconds a released TCP source port stays unused towards the same
    /// backend (so a new connection never meets the old one's TIME_WAIT);
    /// 0 disables. Default 60.
    #[serde(default = "s60")]
    pub quarantine_s: u64,
}

impl Default for SnatSection {
    fn default() -> Self {
        SnatSection {
            port_range: default_port_range(),
            quarantine_s: 60,
        }
    }
}

/// `[dataplane.affinity]`: the ClientIP session-affinity table.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AffinitySection {
    /// Entries (client, service) per worker, `1..=2^30`. Default 65536.
    #[serde(default = "default_affinity_capacity")]
    pub capacity: u64,
}

impl Default for AffinitySection {
    fn default() -> Self {
        AffinitySection {
            capacity: default_affinity_capacity(),
        }
    }
}

/// `[dataplane.afxdp]`: the AF_XDP driver. Each worker has one UMEM
/// (packet memory shared with the kernel) for all its ports and binds RX
/// queue `w` of every port (worker `w`), so every afxdp interface needs as
/// many RX queues as there are workers.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AfxdpSection {
    /// Where the XDP program runs: `"native"` (in the NIC driver),
    /// `"generic"` (the kernel's generic path; any interface, copy mode
    /// only) or `"auto"` (native if the driver supports it). Default
    /// `"auto"`.
    #[serde(default)]
    pub mode: XdpModeSetting,
    /// Zero-copy (the NIC writes into the UMEM): `"auto"` (where the driver
    /// supports it; veth does not), `"on"` (fail without it; needs native
    /// mode) or `"off"` (copy mode). Default `"auto"`.
    #[serde(default)]
    pub zero_copy: ZeroCopySetting,
    /// Bytes per UMEM frame: 2048 or 4096. A frame holds one packet after
    /// 256 bytes of XDP headroom, so the MTU + 18 must fit in the rest.
    /// Default 4096.
    #[serde(default = "default_xdp_frame_size")]
    pub frame_size: u64,
    /// Frames in each worker's UMEM, at most 2^20; at least the fill and
    /// TX ring sizes times the number of afxdp ports. Default 8192.
    #[serde(default = "default_umem_frames")]
    pub umem_frames: u64,
    /// Entries of the fill ring (frames lent to the kernel for receiving),
    /// a power of two, `64..=32768`. Default 2048.
    #[serde(default = "default_xdp_ring")]
    pub fill_ring_size: u64,
    /// Entries of the completion ring (sent frames coming back), a power
    /// of two, `64..=32768`. Default 2048.
    #[serde(default = "default_xdp_ring")]
    pub completion_ring_size: u64,
    /// Entries of the RX ring, a power of two, `64..=32768`. Default 2048.
    #[serde(default = "default_xdp_ring")]
    pub rx_ring_size: u64,
    /// Entries of the TX ring, a power of two, `64..=32768`. Default 2048.
    #[serde(default = "default_xdp_ring")]
    pub tx_ring_size: u64,
    /// `XDP_USE_NEED_WAKEUP`: the kernel flags when it needs a syscall to
    /// make progress, so a busy worker makes fewer. Default true.
    #[serde(default = "yes")]
    pub need_wakeup: bool,
    /// Busy polling (`SO_PREFER_BUSY_POLL`, `SO_BUSY_POLL`,
    /// `SO_BUSY_POLL_BUDGET`): the worker's own receive calls run the
    /// interface's NAPI poll instead of waiting for the kernel's softirq.
    /// Where the kernel refuses an option the socket runs without it (the
    /// log says so). Default false.
    #[serde(default)]
    pub busy_poll: bool,
    /// With `busy_poll`: microseconds a receive call may busy-poll,
    /// `1..=1000`. Default 20.
    #[serde(default = "default_busy_poll_us")]
    pub busy_poll_us: u64,
    /// With `busy_poll`: packets one busy poll may take, `1..=1024`.
    /// Default 64.
    #[serde(default = "default_busy_poll_budget")]
    pub busy_poll_budget: u64,
    /// One UMEM for all of a worker's ports (`XDP_SHARED_UMEM`), so a
    /// packet forwarded between ports is not copied; false (or a kernel
    /// that refuses) gives each port its own UMEM and one copy per
    /// forwarded packet. Default true.
    #[serde(default = "yes")]
    pub shared_umem: bool,
    /// Multi-buffer packets (`XDP_USE_SG`, Linux 6.6+): a frame larger
    /// than one frame (jumbo MTUs such as 9000) arrives and leaves as a
    /// chain of frames. `"auto"` (only where a port's MTU + 18 does not fit
    /// a frame after the 256-byte headroom), `"on"` (always; fail where the
    /// kernel or driver refuses) or `"off"` (every port's MTU must fit one
    /// frame). With it each UMEM also holds one span of consecutive frames
    /// per RX/TX ring entry (MTU 9000, 4096-byte frames, 2048-entry rings:
    /// 2048 × 3 × 4 KiB = 24 MiB per worker). Default `"auto"`.
    #[serde(default)]
    pub multi_buffer: MultiBufferSetting,
}

impl Default for AfxdpSection {
    fn default() -> Self {
        AfxdpSection {
            mode: XdpModeSetting::default(),
            zero_copy: ZeroCopySetting::default(),
            frame_size: default_xdp_frame_size(),
            umem_frames: default_umem_frames(),
            fill_ring_size: default_xdp_ring(),
            completion_ring_size: default_xdp_ring(),
            rx_ring_size: default_xdp_ring(),
            tx_ring_size: default_xdp_ring(),
            need_wakeup: true,
            busy_poll: false,
            busy_poll_us: default_busy_poll_us(),
            busy_poll_budget: default_busy_poll_budget(),
            shared_umem: true,
            multi_buffer: MultiBufferSetting::default(),
        }
    }
}

/// `[dataplane.afpacket]`: the af_packet driver's rings (one RX and one TX
/// ring per worker and port).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AfpacketSection {
    /// How the RX ring hands frames over: `"frames"` (`TPACKET_V2`: each
    /// frame as soon as it arrives, no added latency) or `"blocks"`
    /// (`TPACKET_V3`: a block of frames when it is full or
    /// `rx_block_timeout_ms` after its first frame; more small frames per
    /// byte of ring, up to the timeout of added latency at light load).
    /// Default `"frames"`.
    #[serde(default)]
    pub rx_ring: AfpacketRxRing,
    /// `"frames"` only: RX slots per socket (each holds one frame of up to
    /// the MTU), `64..=262144`. Default 4096.
    #[serde(default)]
    pub rx_frame_count: Option<u64>,
    /// `"blocks"` only: bytes per RX block, a multiple of 4096 in
    /// `4096..=4194304` that holds the largest frame. Default 262144.
    #[serde(default)]
    pub rx_block_size: Option<u64>,
    /// `"blocks"` only: RX blocks per socket, `1..=1024`. Default 16.
    #[serde(default)]
    pub rx_block_count: Option<u64>,
    /// `"blocks"` only: milliseconds after which the kernel hands over a
    /// partly filled block, `1..=1000`. Default 1.
    #[serde(default)]
    pub rx_block_timeout_ms: Option<u64>,
    /// TX slots per socket, `64..=262144`. Default 1024 (256 with `gso`).
    #[serde(default)]
    pub tx_frame_count: Option<u64>,
    /// GSO/GRO pass-through: the sockets take `virtio_net_hdr`s
    /// (`PACKET_VNET_HDR`), the port keeps GRO/GSO/TSO on, and TCP moves
    /// through the gateway as super-packets of up to 64 KiB, segmented
    /// by the egress device (or the peer veth's stack). Ring slots grow
    /// to 64 KiB each: the slot-count defaults drop to 256. Default
    /// false.
    #[serde(default)]
    pub gso: bool,
    /// How frames leave a port: `"ring"` (the socket's TX ring: one copy
    /// into a slot, the device DMAs the slot's pages), `"sendmsg"` (one
    /// `sendmmsg(2)` per burst on a send-only socket: the kernel copies
    /// each frame once into pages of its own, which a veth passes on
    /// without the second copy the ring's pages cost it), or `"auto"`:
    /// `"sendmsg"` on veth ports with `gso`, `"ring"` otherwise. Default
    /// `"auto"`.
    #[serde(default)]
    pub tx_path: AfpacketTxPath,
    /// How frames arrive at a port: `"ring"` (the socket's RX ring: the
    /// kernel copies each frame into a slot, the worker copies it on into
    /// a buffer of its own; no syscall while frames wait), `"recvmsg"`
    /// (no RX ring, one `recvmmsg(2)` per burst straight into the
    /// worker's buffers: one copy of each frame instead of two, at one
    /// syscall per burst, also an empty one; its one copy runs on the
    /// worker's core), or `"auto"`: the driver's measured choice, `"ring"`
    /// on every port today. Default `"auto"`.
    #[serde(default)]
    pub rx_path: AfpacketRxPath,
}

/// How the af_packet driver sends (`[dataplane.afpacket] tx_path`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AfpacketTxPath {
    #[default]
    Auto,
    Ring,
    Sendmsg,
}

/// How the af_packet driver receives (`[dataplane.afpacket] rx_path`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AfpacketRxPath {
    #[default]
    Auto,
    Ring,
    Recvmsg,
}

/// How the af_packet RX ring hands frames to the worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AfpacketRxRing {
    #[default]
    Frames,
    Blocks,
}

/// Where the AF_XDP driver's XDP program runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum XdpModeSetting {
    Native,
    Generic,
    #[default]
    Auto,
}

/// Whether AF_XDP takes multi-buffer packets (`[dataplane.afxdp]
/// multi_buffer`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MultiBufferSetting {
    #[default]
    Auto,
    On,
    Off,
}

/// Whether the AF_XDP sockets run zero-copy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ZeroCopySetting {
    #[default]
    Auto,
    On,
    Off,
}

/// `[[port]]`: one network port of the gateway.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortSection {
    /// Unique, non-empty name used by routes (`port = "..."`) and in
    /// messages.
    pub name: String,
    /// How frames are sent and received: `"afpacket"`, `"afxdp"` (see
    /// `[dataplane.afxdp]`); `"dpdk"` (when built with the cargo feature
    /// `dpdk`, see `[dpdk]`); `"mem"` (in-memory, for tests). `portico run`
    /// needs the same driver on every port.
    pub driver: DriverKind,
    /// Kernel interface name, 1 to 15 bytes (IFNAMSIZ), no `/` or
    /// whitespace; each interface belongs to one port. For the `mem`
    /// driver, a label.
    pub interface: String,
    /// `"outside"` (faces clients; VIPs are announced here), `"inside"`
    /// (faces backends), or `"both"` (a one-arm gateway with a single
    /// port). A gateway has exactly one outside port and at least one inside
    /// port, or exactly one port, of role both.
    pub role: PortRole,
    /// Node addresses with their prefix (`"192.0.2.1/24"`,
    /// `"2001:db8::1/64"`): NodePorts listen on those of the service's
    /// family, and the prefix is a directly connected subnet. Not
    /// link-local. Default none.
    #[serde(default)]
    pub node_addresses: Vec<String>,
    /// Source addresses for full NAT, with their prefix, of either family
    /// (a service's SNAT address is of its family). An address may be both
    /// a node and a SNAT address of the same port. Default none.
    #[serde(default)]
    pub snat_addresses: Vec<String>,
    /// The port's host addresses with their prefix (`"192.0.2.2/24"`):
    /// addresses of the appliance itself (BGP sessions, SSH, health probes
    /// of the box), answered by the kernel's stack through the port's host
    /// interface (a TAP in the gateway's namespace; the host path, see
    /// DESIGN.md). Distinct from every node, SNAT, VIP, external IP and
    /// pool address. Default none (no host interface).
    #[serde(default)]
    pub host_addresses: Vec<String>,
    /// Name of the port's host interface (the TAP that carries
    /// `host_addresses`), 1 to 15 bytes. Default: the port's name, cut to
    /// 10 bytes, followed by `-host`. Ignored without host addresses.
    #[serde(default)]
    pub host_interface: Option<String>,
    /// The port's MAC (`"02:00:00:00:00:01"`), unicast. Default: read from
    /// the interface at run time.
    #[serde(default)]
    pub mac: Option<String>,
    /// Largest IP packet sent or received, in bytes, `68..=9216`. Default:
    /// the interface's.
    #[serde(default)]
    pub mtu: Option<u64>,
    /// Clamp the MSS option of TCP SYNs and SYN-ACKs leaving this port
    /// (lowered, never raised; Linux's `TCPMSS` target): a number of bytes,
    /// `88..=9176` and at most the port's `mtu` − 40, or `"pmtu"` (the
    /// port's MTU − 40). For links behind the port with a smaller MTU than
    /// the ends know of, where ICMP "fragmentation needed" does not come
    /// back. Default: not clamped.
    #[serde(default)]
    pub mss_clamp: Option<MssClampSetting>,
    /// Only with `driver = "dpdk"`: the port's DPDK device. `"net_af_packet"`
    /// or `"net_af_xdp"`: a vdev on the kernel interface `interface` with a
    /// queue per worker (no NIC bound to DPDK needed); a PCI address
    /// (`"0000:03:00.0"`): a NIC bound to vfio-pci; or a whole vdev
    /// specification (`"net_pcap0,iface=eth1"`), used as written. Default
    /// `"net_af_packet"`.
    #[serde(default)]
    pub dpdk_device: Option<String>,
}

/// `[[route]]`: a static route.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSection {
    /// Destination prefix (`"0.0.0.0/0"`, `"198.51.100.0/24"`, `"::/0"`),
    /// without host bits; unique among the routes.
    pub destination: String,
    /// Next hop of the destination's family, inside a directly connected
    /// subnet, or an IPv6 link-local address (`"fe80::1"`, then `port` is
    /// required). Without it the destination is reached directly on `port`
    /// (an on-link route).
    #[serde(default)]
    pub via: Option<String>,
    /// Name of the port to send on. Default: the port whose connected
    /// subnet contains `via` (longest prefix). Required without `via`.
    #[serde(default)]
    pub port: Option<String>,
}

/// `[[neighbour]]`: a static neighbour entry.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NeighbourSection {
    /// IPv4 or IPv6 address inside a directly connected subnet, unique
    /// among the neighbours, not an address of the gateway.
    pub address: String,
    /// Its MAC, unicast.
    pub mac: String,
}

/// `[[service]]`: a standalone service.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceSection {
    /// Unique, non-empty name.
    pub name: String,
    /// `"tcp"` or `"udp"`.
    pub protocol: Protocol,
    /// LoadBalancer IP answered on the outside port; not a node or SNAT
    /// address. Optional, but a service needs at least one of `vip`,
    /// `node_port`, `external_ips`. A service is single-family: its `vip`,
    /// `external_ips` and backends are all IPv4 or all IPv6.
    #[serde(default)]
    pub vip: Option<String>,
    /// Service port on `vip` and `external_ips`, `1..=65535`.
    pub port: u64,
    /// NodePort, `1..=65535`, served on every node address of the
    /// service's family; needs at least one. Optional.
    #[serde(default)]
    pub node_port: Option<u64>,
    /// Further addresses served on `port` (Kubernetes externalIPs),
    /// announced on the outside port. Default none.
    #[serde(default)]
    pub external_ips: Vec<String>,
    /// Full NAT: rewrite the client source to a SNAT address, so backends
    /// on any network reply through the gateway. `false` keeps the client
    /// address (the gateway must be on the backends' return path). Needs at
    /// least one SNAT address. Default true.
    #[serde(default = "yes")]
    pub snat: bool,
    /// TCP flows picked up mid-stream (Linux's `nf_conntrack_tcp_loose`):
    /// an ACK without a flow creates one, ESTABLISHED, with liberal window
    /// tracking, so a connection moved to this instance (an ECMP change in
    /// a tier) carries on. Only with `snat = false` (with SNAT the backend
    /// would see a source it has no connection with) and for tcp. Default
    /// false: such an ACK is answered as for a gone flow.
    #[serde(default)]
    pub tcp_pickup: bool,
    /// `"none"` or `"client_ip"` (a client keeps its backend for
    /// `affinity_timeout_s` after its last packet). Default `"none"`.
    #[serde(default)]
    pub session_affinity: SessionAffinity,
    /// Affinity timeout in seconds, `1..=86400` like Kubernetes'
    /// `timeoutSeconds`; only with `session_affinity = "client_ip"`.
    /// Default 10800 (Kubernetes' default).
    #[serde(default)]
    pub affinity_timeout_s: Option<u64>,
    /// What happens to an established TCP flow whose backend left the
    /// service: `"drop"` its packets (the client times out) or `"reset"`
    /// (answer with a TCP RST). TCP services only. Default `"drop"`. UDP
    /// flows always move to another backend.
    #[serde(default)]
    pub tcp_backend_gone: Option<BackendGone>,
    /// SYN flood defence (TCP services only): `"on"` answers every client
    /// SYN with a SYN cookie and opens the backend connection only once the
    /// client's ACK proves its address; `"auto"` does so only while a
    /// worker tracks more than `syn_proxy_half_open_threshold` half-open
    /// flows; `"off"` forwards every SYN. Default `"off"`.
    #[serde(default)]
    pub syn_proxy: Option<SynProxy>,
    /// Half-open flows per worker above which `syn_proxy = "auto"` answers
    /// SYNs with cookies, `1..=16777216`; only with `"auto"`. Default 1000.
    #[serde(default)]
    pub syn_proxy_half_open_threshold: Option<u64>,
    /// The backends, e.g. `[{ address = "10.1.0.10", port = 8080 }]`.
    /// Default none (traffic is dropped).
    #[serde(default)]
    pub backends: Vec<BackendSection>,
    /// Names of the `[[bgp.advertisement]]`s `vip` and `external_ips` are
    /// announced with, each listed once; needs a `vip` or `external_ips`.
    /// Default none: not announced by BGP (only by ARP on the outside
    /// port).
    #[serde(default)]
    pub bgp_advertisements: Vec<String>,
}

/// One backend of a service.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendSection {
    /// IPv4 or IPv6 address (a unicast host, not link-local), of the
    /// service's family.
    pub address: String,
    /// Port, `1..=65535`. Each `address:port` appears once per service.
    pub port: u64,
    /// Relative share of new flows, `0..=65535`; 0 takes no new flows but
    /// keeps its established ones. Default 1.
    #[serde(default = "one")]
    pub weight: u64,
    /// `"ready"` (takes new flows), `"serving_terminating"` (takes new
    /// flows only when no backend is ready) or `"draining"` (keeps its
    /// flows, takes no new ones). Default `"ready"`.
    #[serde(default)]
    pub condition: EndpointCondition,
}

/// Worker idle policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdlePolicy {
    /// Busy-poll.
    Spin,
    /// Spin briefly, then block in the kernel (poll on the rings) until the first packet.
    #[default]
    Adaptive,
}

/// Packet I/O driver of a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DriverKind {
    /// Linux `AF_PACKET` (TPACKET_V3 rings).
    Afpacket,
    /// Linux `AF_XDP` sockets with an XDP redirect program.
    Afxdp,
    /// DPDK poll-mode drivers (with the cargo feature `dpdk`).
    Dpdk,
    /// In-memory rings, for tests.
    Mem,
}

/// What a port faces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PortRole {
    /// Clients (and routers towards them); VIPs are announced here.
    Outside,
    /// Backends.
    Inside,
    /// Both, on a single port (one-arm gateway).
    Both,
}

/// Transport protocol of a service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    Tcp,
    Udp,
}

/// Session affinity of a service.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionAffinity {
    #[default]
    None,
    ClientIp,
}

/// Fate of an established TCP flow whose backend was removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendGone {
    #[default]
    Drop,
    Reset,
}

/// When a service's TCP handshakes are answered by the gateway (SYN proxy).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SynProxy {
    #[default]
    Off,
    On,
    Auto,
}

/// `mss_clamp` of a port as written: a number or a keyword.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum MssClampSetting {
    Bytes(u64),
    Keyword(String),
}

/// Default `syn_proxy_half_open_threshold`.
pub const DEFAULT_SYN_PROXY_HALF_OPEN_THRESHOLD: u64 = 1000;
/// Largest `syn_proxy_half_open_threshold`.
pub const MAX_SYN_PROXY_HALF_OPEN_THRESHOLD: u64 = 1 << 24;

/// Condition of a backend (Kubernetes EndpointSlice conditions).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndpointCondition {
    /// Ready: takes new flows.
    #[default]
    Ready,
    /// Serving but terminating: takes new flows only when none is ready.
    ServingTerminating,
    /// Neither: keeps its flows, takes no new ones.
    Draining,
}

/// Kubernetes' default ClientIP affinity timeout, in seconds.
pub const DEFAULT_AFFINITY_TIMEOUT_S: u64 = 10_800;

fn default_dpdk_memory_mb() -> u64 {
    512
}
fn default_dpdk_desc() -> u64 {
    1024
}
/// Default `kubernetes.load_balancer_class`.
pub const DEFAULT_LOAD_BALANCER_CLASS: &str = "portico.dev/lb";

fn default_load_balancer_class() -> String {
    DEFAULT_LOAD_BALANCER_CLASS.to_owned()
}
fn default_debounce_ms() -> u64 {
    20
}
fn default_status_writes_per_s() -> u64 {
    200
}
fn default_status_write_burst() -> u64 {
    50
}
fn default_status_writes_in_flight() -> u64 {
    8
}
fn default_lease_name() -> String {
    "portico".to_owned()
}
fn default_lease_namespace() -> String {
    "default".to_owned()
}
fn default_lease_duration_ms() -> u64 {
    15_000
}
fn default_renew_deadline_ms() -> u64 {
    10_000
}
fn default_retry_period_ms() -> u64 {
    2_000
}
fn default_batch_size() -> u64 {
    64
}
fn default_maglev_table_size() -> u64 {
    16_381
}
fn default_conntrack_capacity() -> u64 {
    262_144
}
fn default_scan() -> u64 {
    64
}
fn default_affinity_capacity() -> u64 {
    65_536
}
fn default_port_range() -> String {
    "1024-65535".to_owned()
}
fn default_xdp_frame_size() -> u64 {
    4096
}
fn default_umem_frames() -> u64 {
    8192
}
fn default_xdp_ring() -> u64 {
    2048
}
fn default_busy_poll_us() -> u64 {
    20
}
fn default_busy_poll_budget() -> u64 {
    64
}
fn s10() -> u64 {
    10
}
fn s30() -> u64 {
    30
}
fn s60() -> u64 {
    60
}
fn s120() -> u64 {
    120
}
fn s3600() -> u64 {
    3_600
}
fn s86400() -> u64 {
    86_400
}
fn yes() -> bool {
    true
}
fn one() -> u64 {
    1
}
