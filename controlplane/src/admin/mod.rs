//! The admin endpoint: live counters of a running gateway over a unix
//! socket, the `portico stats`, `services`, `flows` and `simulate --live`
//! client, and the Prometheus endpoint ([`MetricsServer`]) that renders the
//! same report.
//!
//! Protocol ([`protocol`]): a client connects and sends one JSON
//! [`Request`] line; the server answers with one JSON document (a
//! [`StatsReport`], a [`FlowsReport`], a [`LiveOutcome`] or
//! `{"error": …}`) and a newline, and closes the connection. A client that
//! sends nothing gets the [`StatsReport`]. Up to [`DEFAULT_MAX_CONNECTIONS`]
//! clients are served at once, each on its own thread (one more is told the
//! socket is busy); reads and writes are bounded by deadlines and the
//! request by a size limit, so no client holds a slot for long and a slow
//! one never delays the others ([`AdminServer`]). The API is read-only: nothing a
//! client sends changes the gateway.
//!
//! Invariants:
//! * the report is assembled from the workers' published copies of their
//!   counters ([`dataplane::counters::SharedCounters`]) and the driver stats
//!   the worker threads publish ([`PortStatsCell`]); the admin thread never
//!   touches a worker's state — flow listings and live lookups are answered
//!   by the workers themselves through their [`dataplane::inspect`]
//!   mailboxes ([`live`]);
//! * [`CounterReport`] is generated from the dataplane's one list of
//!   counters ([`dataplane::with_counters`]): a new counter appears in the
//!   report, its JSON and the sums without further code;
//! * every [`DropReason`] appears in every report under its stable name,
//!   zero or not, so scripts can rely on the keys;
//! * `total` is the field-wise sum of `workers`, and `ports[i]` the sum over
//!   workers of their driver's stats for port `i`.

mod control;
mod drop_log;
pub mod live;
mod metrics;
pub mod protocol;
mod socket;

pub use control::{
    ControlPlaneMetrics, ControlPlaneReport, HistogramReport, LATENCY_BUCKETS_MS, PoolUsage,
};
/// The port counters every driver reports ([`dataplane::driver::stats`]),
/// and the cell each worker publishes them through.
pub use dataplane::driver::{PortCounters, PortStatsCell};
pub use drop_log::{DEFAULT_DROP_LOG_INTERVAL_MS, DropLog};
pub use live::{LiveAdmin, LiveOutcome};
pub use metrics::{CONTENT_TYPE, DEFAULT_METRICS_ADDR, MetricsError, MetricsServer, encode_report};
pub use protocol::{DEFAULT_FLOW_LIMIT, FlowRow, FlowsQuery, FlowsReport, Request};
pub use socket::{
    AdminError, AdminLimits, AdminServer, ClientError, DEFAULT_MAX_CONNECTIONS, DEFAULT_SOCKET,
    Handler, ask, fetch,
};

use dataplane::conntrack::FlowState;
use dataplane::counters::{Counters, DropReason, Gauges, ServiceCounters, SnatAddrStats};
use dataplane::snapshot::{
    Backend, EndpointCondition, Listener, ListenerKey, ListenerKind, Service, Snapshot,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

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
    /// Tuples in use now.
    pub ports_in_use: u64,
    /// Allocations that found no free tuple on this address.
    pub exhausted: u64,
}

/// Sum the workers' per-address SNAT stats, addresses in first-seen order.
pub fn snat_reports(per_worker: &[Vec<SnatAddrStats>]) -> Vec<SnatAddrReport> {
    let mut out: Vec<SnatAddrReport> = Vec::new();
    for s in per_worker.iter().flatten() {
        let address = s.addr.to_string();
        let i = match out.iter().position(|r| r.address == address) {
            Some(i) => i,
            None => {
                out.push(SnatAddrReport {
                    address,
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
    for (k, l) in snap.listeners.iter() {
        if let Some(bucket) = listeners.get_mut(l.service as usize) {
            bucket.push(ListenerReport::of(k, l));
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
    /// The row of one listener.
    pub fn of(key: &ListenerKey, listener: &Listener) -> Self {
        ListenerReport {
            kind: match listener.kind {
                ListenerKind::Vip => "vip",
                ListenerKind::ExternalIp => "external_ip",
                ListenerKind::NodePort => "node_port",
            }
            .to_owned(),
            address: format!("{}:{}", key.addr, key.port),
        }
    }
}

impl BackendReport {
    /// The row of backend `b` with its summed counters.
    pub fn of(b: &Backend, counted: &ServiceCounters) -> Self {
        BackendReport {
            address: b.addr.to_string(),
            condition: match b.condition {
                EndpointCondition::Ready => "ready",
                EndpointCondition::ServingTerminating => "serving_terminating",
                EndpointCondition::Draining => "draining",
            }
            .to_owned(),
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
            /// Flows in the conntrack tables now.
            pub live_flows: u64,
            /// SNAT tuples in use now.
            pub snat_in_use: u64,
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

/// Rates between two reports of the same gateway (`portico stats`): per
/// second, over the time between them.
#[derive(Debug)]
pub struct Rates<'a> {
    pub before: &'a StatsReport,
    pub after: &'a StatsReport,
}

impl fmt::Display for Rates<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dt_ms = self.after.uptime_ms.saturating_sub(self.before.uptime_ms);
        if dt_ms == 0 || self.after.pid != self.before.pid {
            return Ok(());
        }
        let per_s = |a: u64, b: u64| a.saturating_sub(b) as f64 * 1000.0 / dt_ms as f64;
        let (a, b) = (&self.after.total, &self.before.total);
        writeln!(
            f,
            "\nrates over the last {:.1} s (per second):",
            dt_ms as f64 / 1000.0
        )?;
        writeln!(
            f,
            "  rx {:.1} pkt/s {:.1} B/s, tx {:.1} pkt/s {:.1} B/s, dropped {:.1}/s, new flows {:.1}/s",
            per_s(a.rx_packets, b.rx_packets),
            per_s(a.rx_bytes, b.rx_bytes),
            per_s(a.tx_packets, b.tx_packets),
            per_s(a.tx_bytes, b.tx_bytes),
            per_s(a.dropped, b.dropped),
            per_s(a.flows_created, b.flows_created)
        )?;
        for s in &self.after.services {
            let Some(old) = self
                .before
                .services
                .iter()
                .find(|o| o.name == s.name && o.protocol == s.protocol)
            else {
                continue;
            };
            writeln!(
                f,
                "  {:<32} {:>10.1} pkt/s {:>12.1} B/s {:>8.1} flows/s",
                format!("{} ({})", s.name, s.protocol),
                per_s(s.packets, old.packets),
                per_s(s.bytes, old.bytes),
                per_s(s.flows_created, old.flows_created)
            )?;
        }
        Ok(())
    }
}

/// Answer one admin request: the stats report, a flow listing or a live
/// simulation, as JSON.
pub fn handle(
    request: Request,
    report: impl FnOnce() -> StatsReport,
    live: &LiveAdmin,
) -> Result<String, String> {
    let json = |r: Result<String, serde_json::Error>| r.map_err(|e| e.to_string());
    match request {
        Request::Stats => json(serde_json::to_string(&report())),
        Request::Flows(query) => json(serde_json::to_string(&live.flows(&query)?)),
        Request::Simulate { flow } => json(serde_json::to_string(&live.simulate(&flow)?)),
    }
}

/// Milliseconds as `1h02m03s`, `4.5s` or `12ms`.
fn fmt_duration_ms(ms: u64) -> String {
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let s = ms / 1000;
    if s < 60 {
        return format!("{}.{}s", s, (ms % 1000) / 100);
    }
    let (h, m, s) = (s / 3600, (s / 60) % 60, s % 60);
    if h > 0 {
        format!("{h}h{m:02}m{s:02}s")
    } else {
        format!("{m}m{s:02}s")
    }
}

/// What `portico services` prints: like `ipvsadm -Ln`, each service with
/// its listeners, then its backends with weight, condition and traffic.
#[derive(Debug)]
pub struct ServicesTable<'a>(pub &'a [ServiceReport]);

impl fmt::Display for ServicesTable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return writeln!(f, "no services");
        }
        writeln!(
            f,
            "{:<5} {:<28} {:>6} {:<20} {:>12} {:>14} {:>10} {:>8}",
            "Prot",
            "Service / Listener",
            "Weight",
            "Condition",
            "Packets",
            "Bytes",
            "NewFlows",
            "Active"
        )?;
        writeln!(f, "  -> Backend")?;
        for s in self.0 {
            writeln!(
                f,
                "{:<5} {:<28} {:>6} {:<20} {:>12} {:>14} {:>10} {:>8}",
                s.protocol.to_uppercase(),
                s.name,
                "",
                "",
                s.packets,
                s.bytes,
                s.flows_created,
                s.flows_active
            )?;
            for l in &s.listeners {
                writeln!(f, "      {:<28} ({})", l.address, l.kind)?;
            }
            for b in &s.backends {
                writeln!(
                    f,
                    "  -> {:<29} {:>6} {:<20} {:>12} {:>14} {:>10} {:>8}",
                    b.address,
                    b.weight,
                    b.condition,
                    b.packets,
                    b.bytes,
                    b.flows_created,
                    b.flows_active
                )?;
            }
        }
        Ok(())
    }
}

/// What `portico stats` prints.
fn write_services(f: &mut fmt::Formatter<'_>, services: &[ServiceReport]) -> fmt::Result {
    if services.is_empty() {
        return Ok(());
    }
    writeln!(f, "\nservices:")?;
    writeln!(
        f,
        "  {:<32} {:>12} {:>14} {:>10} {:>8}",
        "service / backend", "packets", "bytes", "new flows", "active"
    )?;
    for s in services {
        writeln!(
            f,
            "  {:<32} {:>12} {:>14} {:>10} {:>8}",
            format!("{} ({})", s.name, s.protocol),
            s.packets,
            s.bytes,
            s.flows_created,
            s.flows_active
        )?;
        for b in &s.backends {
            writeln!(
                f,
                "    {:<30} {:>12} {:>14} {:>10} {:>8}",
                format!("{} {}", b.address, b.condition),
                b.packets,
                b.bytes,
                b.flows_created,
                b.flows_active
            )?;
        }
    }
    Ok(())
}

impl fmt::Display for StatsReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "portico pid {}, up {}, config {}",
            self.pid,
            fmt_duration_ms(self.uptime_ms),
            self.config
        )?;
        writeln!(
            f,
            "snapshot generation {}, published {} ago",
            self.snapshot.generation,
            fmt_duration_ms(self.snapshot.age_ms)
        )?;

        writeln!(f, "\nports:")?;
        writeln!(
            f,
            "  {:<12} {:<16} {:>12} {:>14} {:>12} {:>14} {:>10}",
            "port", "interface", "rx frames", "rx bytes", "tx frames", "tx bytes", "dropped"
        )?;
        for p in &self.ports {
            let s = &p.stats;
            writeln!(
                f,
                "  {:<12} {:<16} {:>12} {:>14} {:>12} {:>14} {:>10}",
                p.name,
                p.interface,
                s.rx_frames,
                s.rx_bytes,
                s.tx_frames,
                s.tx_bytes,
                s.dropped()
            )?;
            let mut details = String::new();
            for (name, v) in [
                ("rx_too_big", s.rx_too_big),
                ("rx_truncated", s.rx_truncated),
                ("tx_too_big", s.tx_too_big),
                ("tx_ring_full", s.tx_ring_full),
                ("kernel_rx_drops", s.kernel_rx_drops),
                ("rx_pool_empty", s.rx_pool_empty),
                ("tx_send_errors", s.tx_send_errors),
                ("socket_errors", s.socket_errors),
            ] {
                if v > 0 {
                    let _ = write!(details, " {name}={v}");
                }
            }
            if !details.is_empty() {
                writeln!(f, "    {}", details.trim_start())?;
            }
        }

        writeln!(f, "\nworkers:")?;
        writeln!(
            f,
            "  {:<8} {:>6} {:>12} {:>12} {:>10} {:>10} {:>10} {:>10}",
            "worker", "core", "rx pkts", "tx pkts", "dropped", "flows", "snat", "handoff"
        )?;
        let rows = self
            .workers
            .iter()
            .map(|w| (w.worker.to_string(), w.core, &w.counters))
            .chain(std::iter::once(("total".to_owned(), None, &self.total)));
        for (name, core, c) in rows {
            writeln!(
                f,
                "  {:<8} {:>6} {:>12} {:>12} {:>10} {:>10} {:>10} {:>10}",
                name,
                core.map_or_else(|| "-".to_owned(), |c| c.to_string()),
                c.rx_packets,
                c.tx_packets,
                c.dropped,
                c.live_flows,
                c.snat_in_use,
                c.handoff_out,
            )?;
        }

        let t = &self.total;
        writeln!(f, "\nflows:")?;
        writeln!(
            f,
            "  live {}, created {}, expired {}, early-dropped {}, recycled {}, reselected {}",
            t.live_flows,
            t.flows_created,
            t.flows_expired,
            t.flows_early_dropped,
            t.flows_recycled,
            t.flows_reselected
        )?;
        writeln!(
            f,
            "  snat tuples in use {}, allocations {}, quarantine reuses {}; affinity hits {}",
            t.snat_in_use, t.snat_allocations, t.snat_quarantine_reuses, t.affinity_hits
        )?;
        writeln!(
            f,
            "  local replies {}, icmp errors translated {}, resets sent {}, handoff out {} / in {}",
            t.local_replies, t.icmp_errors_translated, t.resets_sent, t.handoff_out, t.handoff_in
        )?;
        writeln!(
            f,
            "  arp: learned {}, requests {}, gratuitous {}, held packets sent {}",
            t.arp_learned, t.arp_requests_sent, t.garp_sent, t.neighbour_held_sent
        )?;
        let n = &self.neighbours;
        writeln!(
            f,
            "  neighbours: {} of {} ({} static), refused {}, reclaimed {} in {} compactions",
            n.entries, n.capacity, n.statics, n.refused, n.reclaimed, n.compactions
        )?;
        let states: Vec<String> = t
            .flows_by_state
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(s, n)| format!("{s} {n}"))
            .collect();
        if !states.is_empty() {
            writeln!(f, "  by state: {}", states.join(", "))?;
        }
        for a in &self.snat {
            writeln!(
                f,
                "  snat {}: ports in use {}, exhausted {}",
                a.address, a.ports_in_use, a.exhausted
            )?;
        }
        let cp = &self.control_plane;
        if cp.build_ms.count > 0 {
            writeln!(
                f,
                "  control plane: {} snapshot builds (mean {:.2} ms), {} changes live (mean {:.2} ms after the event)",
                cp.build_ms.count,
                cp.build_ms.sum_ms / cp.build_ms.count as f64,
                cp.event_to_live_ms.count,
                cp.event_to_live_ms.sum_ms / cp.event_to_live_ms.count.max(1) as f64
            )?;
        }

        writeln!(f, "\ndrops ({} total):", t.dropped)?;
        let mut any = false;
        for r in DropReason::ALL {
            let v = t.drops.get(r.name()).copied().unwrap_or(0);
            if v > 0 {
                any = true;
                writeln!(f, "  {:<24} {v:>12}", r.name())?;
            }
        }
        if !any {
            writeln!(f, "  none")?;
        }
        write_services(f, &self.services)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(i: usize, rx: u64, drops: &[(DropReason, u64)], flows: u64) -> WorkerReport {
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
    }

    #[test]
    fn report_survives_json_and_renders() {
        let workers = vec![worker(0, 10, &[(DropReason::NotOwned, 2)], 1)];
        let report = StatsReport {
            pid: 42,
            uptime_ms: 65_000,
            config: "/etc/portico.toml".into(),
            snapshot: SnapshotReport {
                generation: 3,
                age_ms: 1500,
            },
            total: sum_workers(&workers),
            workers,
            ports: vec![PortReport {
                port: 0,
                name: "outside".into(),
                interface: "veth0".into(),
                stats: PortCounters {
                    rx_frames: 11,
                    ..PortCounters::default()
                },
            }],
            services: vec![ServiceReport {
                name: "web".into(),
                protocol: "tcp".into(),
                packets: 7,
                bytes: 700,
                flows_created: 2,
                flows_active: 1,
                listeners: vec![ListenerReport {
                    kind: "vip".into(),
                    address: "203.0.113.10:80".into(),
                }],
                backends: vec![BackendReport {
                    address: "10.1.0.10:8080".into(),
                    condition: "ready".into(),
                    weight: 3,
                    packets: 7,
                    bytes: 700,
                    flows_created: 2,
                    flows_active: 1,
                }],
            }],
            snat: Vec::new(),
            control_plane: ControlPlaneReport::default(),
            neighbours: NeighbourReport {
                capacity: 16_384,
                entries: 21,
                statics: 20,
                refused: 3,
                reclaimed: 1_234,
                compactions: 5,
            },
        };
        let json = serde_json::to_string(&report).expect("serializes");
        let value: serde_json::Value = serde_json::from_str(&json).expect("json");
        assert_eq!(value["workers"][0]["rx_packets"], 10, "flattened");
        assert_eq!(value["ports"][0]["rx_frames"], 11, "flattened");
        assert_eq!(value["total"]["drops"]["not_owned"], 2);
        let back: StatsReport = serde_json::from_str(&json).expect("parses back");
        assert_eq!(back, report);
        let text = report.to_string();
        assert!(text.contains("generation 3"), "{text}");
        assert!(text.contains("not_owned"), "{text}");
        assert!(text.contains("outside"), "{text}");
        assert!(text.contains("1m05s"), "{text}");
        assert!(
            text.contains(
                "neighbours: 21 of 16384 (20 static), refused 3, reclaimed 1234 in 5 compactions"
            ),
            "{text}"
        );
        assert_eq!(value["neighbours"]["reclaimed"], 1_234);
        assert!(
            text.contains("web (tcp)") && text.contains("10.1.0.10:8080 ready"),
            "{text}"
        );
        assert_eq!(value["services"][0]["backends"][0]["packets"], 7);
        assert_eq!(value["services"][0]["backends"][0]["weight"], 3);
        let table = ServicesTable(&report.services).to_string();
        let lines: Vec<&str> = table.lines().collect();
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("TCP") && l.contains("web") && l.contains(" 7 ")),
            "{table}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.contains("203.0.113.10:80") && l.contains("(vip)")),
            "{table}"
        );
        assert!(
            lines.iter().any(|l| l.starts_with("  -> 10.1.0.10:8080")
                && l.split_whitespace().collect::<Vec<_>>()[2..5] == ["3", "ready", "7"]),
            "{table}"
        );
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(fmt_duration_ms(12), "12ms");
        assert_eq!(fmt_duration_ms(4_500), "4.5s");
        assert_eq!(fmt_duration_ms(3_723_000), "1h02m03s");
    }
}
