//! The Prometheus endpoint: `GET /metrics` on a plain TCP listener (a std
//! thread, no async runtime), in the OpenMetrics text format of the
//! `prometheus-client` crate.
//!
//! Invariants:
//! * the metrics are built from a [`StatsReport`], the same report
//!   `portico stats` prints, so the two never disagree; the report is summed
//!   from the workers' published counters off the hot path;
//! * names follow OpenMetrics: a `portico_` prefix, the unit as a suffix
//!   (`_bytes`, `_seconds`) with a `# UNIT` line, counters end in `_total`;
//! * every [`dataplane::counters::DropReason`] appears as a `reason` label
//!   of `portico_drops_total` under its stable name, zero or not;
//! * the server reads at most one request head per connection and answers
//!   it; anything but `GET /metrics` gets a 404 (or 405 for another method).
//!
//! Families (all prefixed `portico_`):
//! * ports: `port_{rx,tx}_packets_total`, `port_{rx,tx}_bytes_total`,
//!   `port_driver_drops_total` {port, interface}, the same by cause in
//!   `port_drops_total` {port, interface, cause} (every cause, zero or not)
//!   and every other driver counter of [`crate::admin::PortCounters`] as
//!   `port_<field>_total` {port, interface} with its help text (e.g.
//!   `port_kernel_fill_ring_empty_total`, AF_XDP's cross-queue
//!   `port_rx_other_queues_total` and `port_queue_socket_failures_total`,
//!   `port_kernel_freezes_total`, `port_rx_gso_frames_total`; `ports`);
//! * dataplane: `drops_total{reason}`, `flows_{created,expired,early_dropped}_total`,
//!   `flows_live`, `snat_tuples_in_use` (both families), and per family
//!   `flows_live_by_family{family}`, `snat_tuples_in_use_by_family{family}`
//!   (`ipv4`, `ipv6`);
//! * host path: `host_path_frames_total{direction}` (`to_kernel`,
//!   `from_kernel`);
//! * workers: `handoff_packets_total{direction}` (`out`, `in`),
//!   `handoff_by_cause_total{cause}` (`snat_reply`, `client`,
//!   `icmp_error`), `steering_installs_total`,
//!   `steering_install_failures_total`;
//! * conntrack: `conntrack_flows{protocol[,state]}` (TCP states in lower
//!   case), `conntrack_{inserts,expiries,early_drops,insert_refusals}_total`;
//! * SNAT: `snat_ports_in_use{snat_ip,family}`,
//!   `snat_exhausted_total{snat_ip,family}`;
//! * services and backends: `{service,backend}_{packets,bytes}_total`,
//!   `{service,backend}_flows_created_total`, `{service,backend}_flows_active`
//!   {service, protocol[, backend]};
//! * control plane: `snapshot_generation`, `snapshot_age_seconds`,
//!   `snapshot_build_seconds` and `event_to_live_seconds` (histograms),
//!   `watch_restarts_total{watch}`, `watch_failing{watch}`,
//!   `ipam_pool_addresses{,_used}{pool}` (the size a float gauge: an IPv6
//!   pool exceeds 2^64 addresses; exact up to 2^53),
//!   `leader` (see [`super::ControlPlaneMetrics`]);
//! * BGP (with `[[bgp.peer]]`s): `bgp_session_state{peer}` — the RFC 4271
//!   state *number* (Idle 1 … Established 6, as the BGP4-MIB's
//!   `bgpPeerState`; alert on `!= 6`), `bgp_session_uptime_seconds{peer}`,
//!   `bgp_prefixes_announced{peer}` (the router has them now),
//!   `bgp_prefixes_announced_by_family{peer,family}`,
//!   `bgp_prefixes_skipped{peer}` (family not negotiated),
//!   `bgp_family_negotiated{peer,family}` (one per offered family,
//!   `ipv4-unicast`/`ipv6-unicast`: 1 when the session carries it, RFC 4760
//!   §8; 0 while not Established or not offered back),
//!   `bgp_extended_next_hop{peer}` (1: IPv4 routes over the IPv6 session
//!   with an IPv6 next hop, RFC 8950; only for peers we offer it to),
//!   `bgp_ttl_security_hops{peer}` (GTSM, RFC 5082: the configured hops, 0
//!   off) and `bgp_ttl_security_min_ttl{peer}` (the least TTL accepted;
//!   only for peers with GTSM),
//!   `bgp_updates_{sent,received}_total{peer}`, `bgp_session_flaps_total{peer}`,
//!   `bgp_withdrawn{reason}` (1 while everything is withdrawn: `watchdog`,
//!   `stopping`) and `bgp_watchdog_trips_total`.
//!
//! The families are built here ([`encode_report`]), the ports' in `ports`,
//! BGP's in `bgp`; the HTTP server is in `server`, the tests in `tests`.

use super::{HistogramReport, StatsReport};
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::{Registry, Unit};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;

mod bgp;
mod ports;
mod server;
#[cfg(test)]
mod tests;

pub use server::MetricsServer;

/// Where `portico run` serves /metrics by default.
pub const DEFAULT_METRICS_ADDR: &str = "127.0.0.1:9464";
/// The content type of the OpenMetrics text format.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Why the metrics endpoint could not be served.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("listening on {addr} for metrics: {source}")]
    Bind { addr: SocketAddr, source: io::Error },
    #[error("starting the metrics thread: {0}")]
    Thread(io::Error),
    #[error("encoding metrics: {0}")]
    Encode(#[from] std::fmt::Error),
}

type Labels = Vec<(&'static str, String)>;

fn counter(
    registry: &mut Registry,
    name: &str,
    help: &str,
    unit: Option<Unit>,
) -> Family<Labels, Counter> {
    let family = Family::<Labels, Counter>::default();
    match unit {
        Some(u) => registry.register_with_unit(name, help, u, family.clone()),
        None => registry.register(name, help, family.clone()),
    }
    family
}

/// Register a labelled gauge family.
fn gauges(registry: &mut Registry, name: &str, help: &str) -> Family<Labels, Gauge> {
    let family = Family::<Labels, Gauge>::default();
    registry.register(name, help, family.clone());
    family
}

/// A histogram kept in milliseconds ([`HistogramReport`]), exposed in
/// seconds.
#[derive(Debug)]
struct HistogramMetric(HistogramReport);

impl TypedMetric for HistogramMetric {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for HistogramMetric {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let h = &self.0;
        let mut buckets: Vec<(f64, u64)> = h
            .bounds_ms
            .iter()
            .map(|b| b / 1000.0)
            .chain(std::iter::once(f64::MAX))
            .zip(h.counts.iter().copied())
            .collect();
        if buckets.is_empty() {
            buckets.push((f64::MAX, h.count));
        }
        encoder.encode_histogram::<NoLabelSet>(h.sum_ms / 1000.0, h.count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// Register an unlabelled gauge holding `value`.
fn gauge(registry: &mut Registry, name: &str, help: &str, value: u64) {
    let g = Gauge::<u64, AtomicU64>::default();
    g.set(value);
    registry.register(name, help, g);
}

/// The OpenMetrics text for `report`.
pub fn encode_report(report: &StatsReport) -> Result<String, MetricsError> {
    let mut r = Registry::with_prefix("portico");

    ports::encode_ports(&mut r, &report.ports);

    // Dataplane totals.
    let t = &report.total;
    let drops = counter(
        &mut r,
        "drops",
        "Packets the dataplane dropped, by reason",
        None,
    );
    for (reason, n) in &t.drops {
        drops
            .get_or_create(&vec![("reason", reason.clone())])
            .inc_by(*n);
    }
    for (name, help, value) in [
        (
            "flows_created",
            "Conntrack entries created",
            t.flows_created,
        ),
        (
            "flows_expired",
            "Conntrack entries expired",
            t.flows_expired,
        ),
        (
            "flows_early_dropped",
            "Conntrack entries evicted early to make room",
            t.flows_early_dropped,
        ),
    ] {
        let c = Counter::<u64>::default();
        c.inc_by(value);
        r.register(name, help, c);
    }
    gauge(
        &mut r,
        "flows_live",
        "Conntrack entries now (both families)",
        t.live_flows,
    );
    gauge(
        &mut r,
        "snat_tuples_in_use",
        "SNAT tuples allocated now (both families)",
        t.snat_in_use,
    );
    let by_family = |r: &mut Registry, name, help, v4: u64, v6: u64| {
        let g = gauges(r, name, help);
        for (family, v) in [("ipv4", v4), ("ipv6", v6)] {
            g.get_or_create(&vec![("family", family.to_owned())])
                .set(v as i64);
        }
    };
    by_family(
        &mut r,
        "flows_live_by_family",
        "Conntrack entries now, per address family",
        t.live_flows.saturating_sub(t.live_flows_v6),
        t.live_flows_v6,
    );
    by_family(
        &mut r,
        "snat_tuples_in_use_by_family",
        "SNAT tuples allocated now, per address family",
        t.snat_in_use.saturating_sub(t.snat_in_use_v6),
        t.snat_in_use_v6,
    );

    // Services and backends.
    let svc_packets = counter(
        &mut r,
        "service_packets",
        "Packets of a service (both directions)",
        None,
    );
    let svc_bytes = counter(
        &mut r,
        "service",
        "Bytes of a service (both directions)",
        Some(Unit::Bytes),
    );
    let be_packets = counter(
        &mut r,
        "backend_packets",
        "Packets of a backend (both directions)",
        None,
    );
    let be_bytes = counter(
        &mut r,
        "backend",
        "Bytes of a backend (both directions)",
        Some(Unit::Bytes),
    );
    for s in &report.services {
        let l: Labels = vec![
            ("service", s.name.clone()),
            ("protocol", s.protocol.clone()),
        ];
        svc_packets.get_or_create(&l).inc_by(s.packets);
        svc_bytes.get_or_create(&l).inc_by(s.bytes);
        for b in &s.backends {
            let l: Labels = vec![
                ("service", s.name.clone()),
                ("protocol", s.protocol.clone()),
                ("backend", b.address.clone()),
            ];
            be_packets.get_or_create(&l).inc_by(b.packets);
            be_bytes.get_or_create(&l).inc_by(b.bytes);
        }
    }

    // Control plane.
    gauge(
        &mut r,
        "snapshot_generation",
        "Generation of the forwarding tables in force",
        report.snapshot.generation,
    );
    let age = Gauge::<f64, AtomicU64>::default();
    age.set(report.snapshot.age_ms as f64 / 1000.0);
    r.register_with_unit(
        "snapshot_age",
        "Time since the forwarding tables in force were published",
        Unit::Seconds,
        age.clone(),
    );

    // Conntrack.
    let by_state = gauges(
        &mut r,
        "conntrack_flows",
        "Live conntrack entries by protocol and TCP state",
    );
    for (state, n) in &t.flows_by_state {
        let l: Labels = match state.as_str() {
            "UDP" => vec![("protocol", "udp".to_owned())],
            "ICMP" => vec![("protocol", "icmp".to_owned())],
            tcp => vec![
                ("protocol", "tcp".to_owned()),
                ("state", tcp.to_ascii_lowercase()),
            ],
        };
        by_state.get_or_create(&l).set(*n as i64);
    }
    for (name, help, value) in [
        (
            "conntrack_inserts",
            "Conntrack entries inserted",
            t.flows_created,
        ),
        (
            "conntrack_expiries",
            "Conntrack entries removed at their timeout",
            t.flows_expired,
        ),
        (
            "conntrack_early_drops",
            "Conntrack entries evicted to make room in a full table",
            t.flows_early_dropped,
        ),
        (
            "conntrack_insert_refusals",
            "New flows refused because the table was full and nothing could be evicted",
            t.drops
                .get(dataplane::DropReason::ConntrackFull.name())
                .copied()
                .unwrap_or(0),
        ),
    ] {
        let c = Counter::<u64>::default();
        c.inc_by(value);
        r.register(name, help, c);
    }

    // The host path (frames to and from the kernel's TAPs; its drops are
    // `drops_total{reason="host_queue_full"|"host_path_down"}`).
    let host = counter(
        &mut r,
        "host_path_frames",
        "Frames between the ports and the kernel's host interfaces (TAPs), by direction",
        None,
    );
    for (direction, n) in [("to_kernel", t.to_host), ("from_kernel", t.from_host)] {
        host.get_or_create(&vec![("direction", direction.to_owned())])
            .inc_by(n);
    }

    // Handoff between workers and the steering programs that avoid it.
    let handoff = counter(
        &mut r,
        "handoff_packets",
        "Packets one worker handed to another (out) and received from another (in): \
         frames that reached a worker not owning their flow. With several workers and \
         steering installed a small share of rx; if it grows, look at \
         steering_install_failures and port_queue_socket_failures",
        None,
    );
    for (direction, n) in [("out", t.handoff_out), ("in", t.handoff_in)] {
        handoff
            .get_or_create(&vec![("direction", direction.to_owned())])
            .inc_by(n);
    }
    let handoff_cause = counter(
        &mut r,
        "handoff_by_cause",
        "Packets steered to another worker, by cause: snat_reply (a reply to an SNAT \
         port in another worker's slice), client (a client address another worker \
         owns), icmp_error (owned by the flow it quotes)",
        None,
    );
    for (cause, n) in [
        ("snat_reply", t.handoff_snat_reply),
        ("client", t.handoff_client),
        ("icmp_error", t.handoff_icmp_error),
    ] {
        handoff_cause
            .get_or_create(&vec![("cause", cause.to_owned())])
            .inc_by(n);
    }
    for (name, help, value) in [
        (
            "steering_installs",
            "Steering programs installed in the driver (af_packet's fanout program, \
             AF_XDP's redirect program), on start and when owned addresses, SNAT \
             listeners or ports changed",
            t.steering_installs,
        ),
        (
            "steering_install_failures",
            "Steering programs the driver refused: frames keep the previous program \
             (or none) and are handed off between workers; read the gateway's log",
            t.steering_install_failures,
        ),
    ] {
        let c = Counter::<u64>::default();
        c.inc_by(value);
        r.register(name, help, c);
    }

    // Neighbour (ARP) table.
    let n = &report.neighbours;
    gauge(
        &mut r,
        "neighbour_entries",
        "Next hops in the neighbour table now",
        n.entries,
    );
    gauge(
        &mut r,
        "neighbour_capacity",
        "Next hops the neighbour tables (IPv4 and IPv6 together) can hold",
        n.capacity,
    );
    for (name, help, value) in [
        (
            "neighbour_refusals",
            "New next hops refused because the neighbour table was full",
            n.refused,
        ),
        (
            "neighbour_reclaimed",
            "Neighbour entries removed after going unused for gc_stale_ms",
            n.reclaimed,
        ),
        (
            "neighbour_compactions",
            "Compactions of the neighbour table that reclaimed entries",
            n.compactions,
        ),
    ] {
        let c = Counter::<u64>::default();
        c.inc_by(value);
        r.register(name, help, c);
    }

    // SNAT per address.
    let snat_in_use = gauges(
        &mut r,
        "snat_ports_in_use",
        "SNAT tuples (address, port) in use, per SNAT address",
    );
    let snat_exhausted = counter(
        &mut r,
        "snat_exhausted",
        "Allocations that found no free tuple on a SNAT address",
        None,
    );
    for a in &report.snat {
        let l: Labels = vec![("snat_ip", a.address.clone()), ("family", a.family.clone())];
        snat_in_use.get_or_create(&l).set(a.ports_in_use as i64);
        snat_exhausted.get_or_create(&l).inc_by(a.exhausted);
    }

    // Flows per service and backend.
    let svc_new = counter(
        &mut r,
        "service_flows_created",
        "New flows (conntrack inserts) of a service",
        None,
    );
    let svc_active = gauges(
        &mut r,
        "service_flows_active",
        "Flows of a service in conntrack now",
    );
    let be_new = counter(
        &mut r,
        "backend_flows_created",
        "New flows (conntrack inserts) towards a backend",
        None,
    );
    let be_active = gauges(
        &mut r,
        "backend_flows_active",
        "Flows of a backend in conntrack now",
    );
    for s in &report.services {
        let l: Labels = vec![
            ("service", s.name.clone()),
            ("protocol", s.protocol.clone()),
        ];
        svc_new.get_or_create(&l).inc_by(s.flows_created);
        svc_active.get_or_create(&l).set(s.flows_active as i64);
        for b in &s.backends {
            let l: Labels = vec![
                ("service", s.name.clone()),
                ("protocol", s.protocol.clone()),
                ("backend", b.address.clone()),
            ];
            be_new.get_or_create(&l).inc_by(b.flows_created);
            be_active.get_or_create(&l).set(b.flows_active as i64);
        }
    }

    // Control plane.
    let cp = &report.control_plane;
    r.register_with_unit(
        "snapshot_build",
        "Time to build one snapshot from the desired model",
        Unit::Seconds,
        HistogramMetric(cp.build_ms.clone()),
    );
    r.register_with_unit(
        "event_to_live",
        "Time from the event that changed the model (API watch event, SIGHUP) to the snapshot being live",
        Unit::Seconds,
        HistogramMetric(cp.event_to_live_ms.clone()),
    );
    let restarts = counter(
        &mut r,
        "watch_restarts",
        "Restarts (relists) of a Kubernetes watch",
        None,
    );
    for (watch, n) in &cp.watch_restarts {
        restarts
            .get_or_create(&vec![("watch", watch.clone())])
            .inc_by(*n);
    }
    let failing = gauges(
        &mut r,
        "watch_failing",
        "1 while a Kubernetes watch is failing (from its error until it resumes)",
    );
    for (watch, f) in &cp.watch_failing {
        failing
            .get_or_create(&vec![("watch", watch.clone())])
            .set(i64::from(*f));
    }
    let pool_used = gauges(
        &mut r,
        "ipam_pool_addresses_used",
        "Addresses of an IPAM pool allocated to services",
    );
    // A float gauge: an IPv6 pool's size exceeds any integer gauge (a /64
    // holds 2^64), and Prometheus samples are float64 anyway: exact up to
    // 2^53 addresses, the nearest float above (a /64 is 1.8446744073709552e19).
    let pool_size = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    r.register(
        "ipam_pool_addresses",
        "Addresses in an IPAM pool (float: IPv6 pools exceed 2^64)",
        pool_size.clone(),
    );
    for (pool, u) in &cp.pools {
        let l: Labels = vec![("pool", pool.clone())];
        pool_used.get_or_create(&l).set(u.used as i64);
        pool_size.get_or_create(&l).set(u.size as f64);
    }
    if let Some(members) = &cp.members {
        gauge(
            &mut r,
            "l2_members",
            "Live members of the tier this instance sees (the per-VIP ARP election's input)",
            members.live.len() as u64,
        );
    }
    let announced = gauges(
        &mut r,
        "l2_announced",
        "1 for a VIP this instance answers ARP for, 0 for one another instance announces",
    );
    let a = &report.announcements;
    let v4 = [(&a.announced, 1), (&a.silent, 0)]
        .into_iter()
        .flat_map(|(list, value)| list.iter().map(move |vip| (vip.to_string(), value)));
    let v6 = [(&a.announced6, 1), (&a.silent6, 0)]
        .into_iter()
        .flat_map(|(list, value)| list.iter().map(move |vip| (vip.to_string(), value)));
    for (vip, value) in v4.chain(v6) {
        announced.get_or_create(&vec![("vip", vip)]).set(value);
    }
    if let Some(leader) = cp.leader {
        gauge(
            &mut r,
            "leader",
            "1 when this instance is the leader, 0 on standby",
            u64::from(leader),
        );
    }

    bgp::encode_bgp(&mut r, &report.bgp);

    let mut text = String::new();
    encode(&mut text, &r)?;
    Ok(text)
}
