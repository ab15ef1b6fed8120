//! The reports the admin socket answers with and `/metrics` is built
//! from, as JSON types, and how they are summed from the workers' cells.
//!
//! Invariants: [`CounterReport`] is generated from the dataplane's one list
//! of counters; every drop reason and conntrack state is present by its
//! stable name, zero or not; `total` is the field-wise sum of `workers`.

use super::ControlPlaneReport;
use crate::mirror::ToConfig;
use dataplane::conntrack::FlowState;
use dataplane::counters::{Counters, DropReason, Gauges, ServiceCounters, SnatAddrStats};
use dataplane::driver::PortCounters;
use dataplane::snapshot::{Backend, Listener, Service, Snapshot};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Everything `portico stats` shows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatsReport {
    pub pid: u32,
    pub uptime_ms: u64,
    /// The configuration file the gateway runs from.
    pub config: String,
    pub snapshot: SnapshotReport,
    /// Sum over all workers.
    pub total: CounterReport,
    pub workers: Vec<WorkerReport>,
    pub ports: Vec<PortReport>,
    /// Packets and bytes per service and per backend, summed over workers.
    #[serde(default)]
    pub services: Vec<ServiceReport>,
    /// Per SNAT address, summed over workers.
    #[serde(default)]
    pub snat: Vec<SnatAddrReport>,
    /// The control plane's own measurements.
    #[serde(default)]
    pub control_plane: ControlPlaneReport,
    /// The shared neighbour (ARP) table.
    #[serde(default)]
    pub neighbours: NeighbourReport,
    /// Which VIPs this instance answers ARP for (the tier's members are in
    /// `control_plane.members`).
    #[serde(default)]
    pub announcements: AnnouncementReport,
    /// The BGP sessions and what they announce (`portico bgp`); empty
    /// without `[[bgp.peer]]`.
    #[serde(default)]
    pub bgp: BgpReport,
}

/// The VIPs and externalIPs of the current snapshot by whether this
/// instance announces them (answers ARP, sends gratuitous ARP) or leaves
/// them to the instance elected for them (and only forwards).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnnouncementReport {
    /// Announced here, sorted.
    pub announced: Vec<Ipv4Addr>,
    /// Owned and forwarded here, announced by another instance, sorted.
    pub silent: Vec<Ipv4Addr>,
    /// The IPv6 VIPs announced here (Neighbour Advertisements), sorted.
    #[serde(default)]
    pub announced6: Vec<Ipv6Addr>,
    /// The IPv6 VIPs another instance announces, sorted.
    #[serde(default)]
    pub silent6: Vec<Ipv6Addr>,
}

/// The [`AnnouncementReport`] of `snap` (cold path: one pass over the
/// owned addresses).
pub fn announcement_report(snap: &Snapshot) -> AnnouncementReport {
    let mut report = AnnouncementReport::default();
    for (addr, owned) in snap.owned.iter().filter(|(_, o)| o.vip) {
        if owned.announce {
            report.announced.push(*addr);
        } else {
            report.silent.push(*addr);
        }
    }
    for (addr, owned) in snap.owned6.iter().filter(|(_, o)| o.vip) {
        if owned.announce {
            report.announced6.push(*addr);
        } else {
            report.silent6.push(*addr);
        }
    }
    report.announced.sort_unstable();
    report.silent.sort_unstable();
    report.announced6.sort_unstable();
    report.silent6.sort_unstable();
    report
}

/// The BGP speaker of the gateway: its sessions and why routes are or are
/// not announced.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BgpReport {
    /// One per `[[bgp.peer]]`, in file order.
    pub peers: Vec<BgpPeerReport>,
    /// The VIPs that qualify for an announcement (served, with a ready or
    /// serving backend), sorted; announced unless `withdrawn` says why not.
    pub vips: Vec<String>,
    /// Why everything is withdrawn now: `watchdog` (a worker stopped
    /// polling) or `stopping` (graceful stop, draining); `None`: announcing.
    pub withdrawn: Option<String>,
    /// Times the worker watchdog withdrew every route.
    pub watchdog_trips: u64,
}

/// One BGP session ([`portico_bgp::SessionStats`] and its configuration).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BgpPeerReport {
    /// `address:port` of the router.
    pub peer: String,
    pub peer_asn: u32,
    pub my_asn: u32,
    /// RFC 4271 §8.2.2 state name (`Established`, `Active`, …).
    pub state: String,
    /// The RFC's number of the state: Idle 1 … Established 6.
    pub state_number: u8,
    /// Seconds since the session became Established (`None` while not).
    pub uptime_s: Option<u64>,
    /// The negotiated hold time (0: no keepalives).
    pub hold_time_s: u16,
    /// Prefixes the router has from us now (both families).
    pub prefixes_sent: u64,
    /// Prefixes we want the router to have (equal to `prefixes_sent` once
    /// the session is Established and synced).
    pub prefixes_desired: u64,
    /// Of `prefixes_sent`, IPv6 unicast prefixes (MP_REACH_NLRI).
    #[serde(default)]
    pub prefixes_sent_v6: u64,
    /// Desired prefixes not sent at the last sync because their family
    /// was not negotiated with the router (or has no next hop: IPv4 over
    /// an IPv6 session without RFC 8950).
    #[serde(default)]
    pub prefixes_skipped: u64,
    /// The desired prefixes themselves (both families, sorted: IPv4
    /// first), e.g. `203.0.113.10/32`, `2001:db8:100::10/128`.
    #[serde(default)]
    pub prefixes: Vec<String>,
    /// The families we offer the router (`ipv4-unicast`, `ipv6-unicast`),
    /// from the configuration with the derived IPv6 next hop.
    #[serde(default)]
    pub families_offered: Vec<String>,
    /// The families the session carries (offered by both sides, RFC 4760
    /// §8); empty while not Established.
    #[serde(default)]
    pub families: Vec<String>,
    /// The global IPv6 next hop of our IPv6 routes (and of IPv4 routes
    /// over RFC 8950): the one the Established session announces, else
    /// the one set or derived before it connects (`next_hop_v6`, or the
    /// first global IPv6 host address); `None`: the session's local
    /// address once connected if it is global IPv6, else no IPv6 routes.
    #[serde(default)]
    pub next_hop_v6: Option<String>,
    /// The link-local next hop sent after the global one (RFC 2545 §3)
    /// while Established, if any.
    #[serde(default)]
    pub next_hop_v6_link_local: Option<String>,
    /// Our address on the session's TCP connection, while connected.
    #[serde(default)]
    pub local_address: Option<String>,
    /// We offer the Extended Next Hop Encoding capability (RFC 8950 §4:
    /// IPv4 routes with an IPv6 next hop; IPv6 sessions by default).
    #[serde(default)]
    pub extended_next_hop_offered: bool,
    /// Both OPENs carried it: IPv4 routes go over this IPv6 session with
    /// the IPv6 next hop. False while not Established.
    #[serde(default)]
    pub extended_next_hop: bool,
    /// GTSM (RFC 5082): the router's configured distance in hops
    /// (`ttl_security_hops`); we send with TTL 255 and accept segments
    /// with at least `min_ttl`. `None`: off.
    #[serde(default)]
    pub ttl_security_hops: Option<u8>,
    /// The TTL / hop limit of our packets (255 with GTSM, else
    /// `multihop_ttl` or its default).
    #[serde(default)]
    pub ttl: u8,
    /// With GTSM, the least TTL / hop limit accepted from the router:
    /// 255 − (hops − 1).
    #[serde(default)]
    pub min_ttl: Option<u8>,
    pub updates_sent: u64,
    pub updates_received: u64,
    pub notifications_sent: u64,
    pub notifications_received: u64,
    /// Times the session went down from Established.
    pub flaps: u64,
    pub connect_attempts: u64,
    pub last_error: Option<String>,
}

/// The neighbour table shared by the workers
/// ([`dataplane::neighbour::NeighbourStats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeighbourReport {
    /// Slots: next hops the table can hold.
    pub capacity: u64,
    /// Next hops in the table now.
    pub entries: u64,
    /// Of which configured (static).
    pub statics: u64,
    /// New next hops refused because the table was full.
    pub refused: u64,
    /// Entries removed because they were unused for `gc_stale_ms`.
    pub reclaimed: u64,
    /// Compactions that reclaimed entries.
    pub compactions: u64,
}

impl From<dataplane::neighbour::NeighbourStats> for NeighbourReport {
    fn from(s: dataplane::neighbour::NeighbourStats) -> Self {
        NeighbourReport {
            capacity: s.capacity,
            entries: s.entries,
            statics: s.statics,
            refused: s.refused,
            reclaimed: s.reclaimed,
            compactions: s.compactions,
        }
    }
}

/// One SNAT address, summed over the workers' allocators.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnatAddrReport {
    pub address: String,
    /// `ipv4` or `ipv6`.
    #[serde(default)]
    pub family: String,
    /// Tuples in use now.
    pub ports_in_use: u64,
    /// Allocations that found no free tuple on this address.
    pub exhausted: u64,
}

/// Sum the workers' per-address SNAT stats, addresses in first-seen order.
pub fn snat_reports(per_worker: &[Vec<SnatAddrStats<IpAddr>>]) -> Vec<SnatAddrReport> {
    let mut out: Vec<SnatAddrReport> = Vec::new();
    for s in per_worker.iter().flatten() {
        let address = s.addr.to_string();
        let i = match out.iter().position(|r| r.address == address) {
            Some(i) => i,
            None => {
                out.push(SnatAddrReport {
                    address,
                    family: family_name(s.addr).to_owned(),
                    ..SnatAddrReport::default()
                });
                out.len() - 1
            }
        };
        if let Some(r) = out.get_mut(i) {
            r.ports_in_use += s.in_use;
            r.exhausted += s.exhausted;
        }
    }
    out
}

/// `ipv4` or `ipv6`: the `family` of reports and metric labels.
pub fn family_name(addr: IpAddr) -> &'static str {
    match addr {
        IpAddr::V4(_) => "ipv4",
        IpAddr::V6(_) => "ipv6",
    }
}

/// Traffic of one service (both directions), with its backends.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceReport {
    pub name: String,
    pub protocol: String,
    pub packets: u64,
    pub bytes: u64,
    /// Conntrack inserts for this service.
    #[serde(default)]
    pub flows_created: u64,
    /// Its flows in conntrack now.
    #[serde(default)]
    pub flows_active: u64,
    /// Where the service accepts traffic, sorted.
    #[serde(default)]
    pub listeners: Vec<ListenerReport>,
    pub backends: Vec<BackendReport>,
}

/// One `(protocol, address, port)` a service accepts traffic on.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ListenerReport {
    /// `vip`, `external_ip` or `node_port`.
    pub kind: String,
    /// `address:port`.
    pub address: String,
}

/// Traffic of one backend of a service (both directions).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendReport {
    pub address: String,
    /// `ready`, `serving_terminating` or `draining`.
    pub condition: String,
    /// Maglev weight.
    #[serde(default)]
    pub weight: u32,
    pub packets: u64,
    pub bytes: u64,
    /// Conntrack inserts towards this backend.
    #[serde(default)]
    pub flows_created: u64,
    /// Its flows in conntrack now.
    #[serde(default)]
    pub flows_active: u64,
}

/// Per-service and per-backend traffic of the snapshot in force, from the
/// workers' summed [`ServiceCounters`] (indexed by the snapshot's ids).
///
/// Services in id order, each with its listeners sorted and its backends in
/// id order. Linear in services + listeners + backends: the listeners and
/// backends are sorted into per-service buckets (indexed by service id) in
/// one pass each, not searched per service.
pub fn service_reports(snap: &Snapshot, counted: &ServiceCounters) -> Vec<ServiceReport> {
    // Every service id in use is below `snap.services.len()`; a listener or
    // backend naming any other id belongs to no service and is not shown.
    let ids = snap.services.len();
    let mut listeners: Vec<Vec<ListenerReport>> = Vec::new();
    listeners.resize_with(ids, Vec::new);
    for (addr, l) in listeners_of(snap) {
        if let Some(bucket) = listeners.get_mut(l.service as usize) {
            bucket.push(ListenerReport::of(addr, l));
        }
    }
    let mut backends: Vec<Vec<BackendReport>> = Vec::new();
    backends.resize_with(ids, Vec::new);
    for b in snap.backends.iter().flatten() {
        if let Some(bucket) = backends.get_mut(b.service as usize) {
            bucket.push(BackendReport::of(b, counted));
        }
    }
    snap.services
        .iter()
        .flatten()
        .map(|s| {
            let mut listeners = listeners
                .get_mut(s.id as usize)
                .map(std::mem::take)
                .unwrap_or_default();
            listeners.sort();
            let backends = backends
                .get_mut(s.id as usize)
                .map(std::mem::take)
                .unwrap_or_default();
            ServiceReport::of(s, counted, listeners, backends)
        })
        .collect()
}

/// Every listener of `snap` with its address, the IPv4 ones then the IPv6
/// ones.
pub fn listeners_of(snap: &Snapshot) -> impl Iterator<Item = (SocketAddr, &Listener)> {
    let v4 = snap
        .listeners
        .iter()
        .map(|(k, l)| (SocketAddr::new(k.addr.into(), k.port), l));
    let v6 = snap
        .listeners6
        .iter()
        .map(|(k, l)| (SocketAddr::new(k.addr.into(), k.port), l));
    v4.chain(v6)
}

/// The value of id `i` in a per-id counter vector (0 past its end).
fn counter_at(v: &[u64], i: u32) -> u64 {
    v.get(i as usize).copied().unwrap_or(0)
}

impl ServiceReport {
    /// The row of service `s` with the given listeners and backends.
    pub fn of(
        s: &Service,
        counted: &ServiceCounters,
        listeners: Vec<ListenerReport>,
        backends: Vec<BackendReport>,
    ) -> Self {
        ServiceReport {
            name: s.name.to_string(),
            protocol: s.proto.name().to_owned(),
            packets: counter_at(&counted.service_packets, s.id),
            bytes: counter_at(&counted.service_bytes, s.id),
            flows_created: counter_at(&counted.service_flows_created, s.id),
            flows_active: counter_at(&counted.service_flows_active, s.id),
            listeners,
            backends,
        }
    }
}

impl ListenerReport {
    /// The row of one listener at `addr` (IPv6: `[address]:port`).
    pub fn of(addr: SocketAddr, listener: &Listener) -> Self {
        ListenerReport {
            kind: listener.kind.to_config().name().to_owned(),
            address: addr.to_string(),
        }
    }
}

impl BackendReport {
    /// The row of backend `b` with its summed counters.
    pub fn of(b: &Backend, counted: &ServiceCounters) -> Self {
        BackendReport {
            address: b.addr.to_string(),
            condition: b.condition.to_config().name().to_owned(),
            weight: b.weight,
            packets: counter_at(&counted.backend_packets, b.id),
            bytes: counter_at(&counted.backend_bytes, b.id),
            flows_created: counter_at(&counted.backend_flows_created, b.id),
            flows_active: counter_at(&counted.backend_flows_active, b.id),
        }
    }
}

/// The forwarding tables in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotReport {
    /// Increases by one with every published snapshot (start and each
    /// applied reload).
    pub generation: u64,
    /// Time since it was published.
    pub age_ms: u64,
}

macro_rules! define_counter_report {
    ($($(#[$doc:meta])* $field:ident,)*) => {
        /// The dataplane counters of one worker, or of all of them: every
        /// scalar of [`Counters`] (generated from the same list,
        /// [`dataplane::with_counters`]), the drops by reason and the gauges.
        #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
        pub struct CounterReport {
            $($(#[$doc])* pub $field: u64,)*
            /// Sum of `drops`.
            pub dropped: u64,
            /// Every drop reason by its stable name.
            pub drops: BTreeMap<String, u64>,
            /// Flows in the conntrack tables now (IPv4 and IPv6).
            pub live_flows: u64,
            /// SNAT tuples in use now (IPv4 and IPv6).
            pub snat_in_use: u64,
            /// Of `live_flows`, the IPv6 flows.
            #[serde(default)]
            pub live_flows_v6: u64,
            /// Of `snat_in_use`, the IPv6 tuples.
            #[serde(default)]
            pub snat_in_use_v6: u64,
            /// Live flows per conntrack state (`ESTABLISHED`, …, `UDP`,
            /// `ICMP`), every state present.
            #[serde(default)]
            pub flows_by_state: BTreeMap<String, u64>,
        }

        impl CounterReport {
            pub fn new(c: &Counters, g: Gauges) -> Self {
                CounterReport {
                    $($field: c.$field,)*
                    dropped: c.total_drops(),
                    drops: DropReason::ALL
                        .iter()
                        .map(|r| (r.name().to_owned(), c.dropped(*r)))
                        .collect(),
                    live_flows: g.live_flows,
                    snat_in_use: g.snat_in_use,
                    live_flows_v6: g.live_flows_v6,
                    snat_in_use_v6: g.snat_in_use_v6,
                    flows_by_state: FlowState::ALL
                        .iter()
                        .zip(g.flows_by_state)
                        .map(|(s, n)| (s.name().to_owned(), n))
                        .collect(),
                }
            }

            /// The counters and gauges back (the inverse of
            /// [`CounterReport::new`]; names it does not know are ignored).
            pub fn split(&self) -> (Counters, Gauges) {
                let drops = std::array::from_fn(|i| {
                    DropReason::ALL
                        .get(i)
                        .and_then(|r| self.drops.get(r.name()))
                        .copied()
                        .unwrap_or(0)
                });
                let counters = Counters {
                    $($field: self.$field,)*
                    drops,
                };
                let gauges = Gauges {
                    live_flows: self.live_flows,
                    snat_in_use: self.snat_in_use,
                    live_flows_v6: self.live_flows_v6,
                    snat_in_use_v6: self.snat_in_use_v6,
                    flows_by_state: std::array::from_fn(|i| {
                        FlowState::ALL
                            .get(i)
                            .and_then(|s| self.flows_by_state.get(s.name()))
                            .copied()
                            .unwrap_or(0)
                    }),
                };
                (counters, gauges)
            }
        }
    };
}

dataplane::with_counters!(define_counter_report);

/// One worker thread.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerReport {
    pub worker: usize,
    /// The core it is pinned to, if any.
    pub core: Option<usize>,
    #[serde(flatten)]
    pub counters: CounterReport,
}

/// One port's driver counters, summed over the workers' sockets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortReport {
    pub port: usize,
    pub name: String,
    pub interface: String,
    #[serde(flatten)]
    pub stats: PortCounters,
}

/// Aggregate per-worker counters into `total`.
pub fn sum_workers(workers: &[WorkerReport]) -> CounterReport {
    let mut counters = Counters::default();
    let mut gauges = Gauges::default();
    for w in workers {
        let (c, g) = w.counters.split();
        counters.accumulate(&c);
        gauges.accumulate(&g);
    }
    CounterReport::new(&counters, gauges)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::admin) fn worker(
        i: usize,
        rx: u64,
        drops: &[(DropReason, u64)],
        flows: u64,
    ) -> WorkerReport {
        let mut c = Counters {
            rx_packets: rx,
            tx_packets: rx / 2,
            ..Counters::default()
        };
        for (r, n) in drops {
            for _ in 0..*n {
                c.drop(*r);
            }
        }
        WorkerReport {
            worker: i,
            core: Some(i),
            counters: CounterReport::new(
                &c,
                Gauges {
                    live_flows: flows,
                    snat_in_use: flows,
                    live_flows_v6: flows / 2,
                    snat_in_use_v6: flows / 2,
                    flows_by_state: [0; dataplane::conntrack::FlowState::COUNT],
                },
            ),
        }
    }

    #[test]
    fn every_drop_reason_is_reported_by_name() {
        let w = worker(0, 10, &[(DropReason::NoFlow, 3)], 1);
        assert_eq!(w.counters.drops.len(), DropReason::COUNT);
        for r in DropReason::ALL {
            assert!(w.counters.drops.contains_key(r.name()), "{r}");
        }
        assert_eq!(w.counters.drops["no_flow"], 3);
        assert_eq!(w.counters.dropped, 3);
    }

    #[test]
    fn total_is_the_sum_of_the_workers() {
        let workers = vec![
            worker(0, 10, &[(DropReason::NoFlow, 3)], 4),
            worker(1, 7, &[(DropReason::NoFlow, 1), (DropReason::TxFull, 2)], 5),
        ];
        let t = sum_workers(&workers);
        assert_eq!(t.rx_packets, 17);
        assert_eq!(t.tx_packets, 5 + 3);
        assert_eq!(t.drops["no_flow"], 4);
        assert_eq!(t.drops["tx_full"], 2);
        assert_eq!(t.dropped, 6);
        assert_eq!(t.live_flows, 9);
        assert_eq!(t.snat_in_use, 9);
        assert_eq!((t.live_flows_v6, t.snat_in_use_v6), (2 + 2, 2 + 2));
    }
}
