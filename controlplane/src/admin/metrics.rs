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
//!   `port_driver_drops_total` {port, interface};
//! * dataplane: `drops_total{reason}`, `flows_{created,expired,early_dropped}_total`,
//!   `flows_live`, `snat_tuples_in_use`;
//! * conntrack: `conntrack_flows{protocol[,state]}` (TCP states in lower
//!   case), `conntrack_{inserts,expiries,early_drops,insert_refusals}_total`;
//! * SNAT: `snat_ports_in_use{snat_ip}`, `snat_exhausted_total{snat_ip}`;
//! * services and backends: `{service,backend}_{packets,bytes}_total`,
//!   `{service,backend}_flows_created_total`, `{service,backend}_flows_active`
//!   {service, protocol[, backend]};
//! * control plane: `snapshot_generation`, `snapshot_age_seconds`,
//!   `snapshot_build_seconds` and `event_to_live_seconds` (histograms),
//!   `watch_restarts_total{watch}`, `watch_failing{watch}`,
//!   `ipam_pool_addresses{,_used}{pool}`,
//!   `leader` (see [`super::ControlPlaneMetrics`]).

use super::{HistogramReport, StatsReport};
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::{Registry, Unit};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// Where `portico run` serves /metrics by default.
pub const DEFAULT_METRICS_ADDR: &str = "127.0.0.1:9464";
/// The content type of the OpenMetrics text format.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How long the accept loop sleeps when no client is waiting (also bounds
/// how long stopping the server takes).
const ACCEPT_IDLE_MS: u64 = 50;
/// A client that does not send its request or read its answer within this
/// time is dropped.
const CLIENT_TIMEOUT_MS: u64 = 2000;
/// Longest request head read.
const MAX_REQUEST_BYTES: usize = 8192;

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

    // Ports.
    let port_rx_packets = counter(&mut r, "port_rx_packets", "Frames received on a port", None);
    let port_rx_bytes = counter(
        &mut r,
        "port_rx",
        "Bytes received on a port",
        Some(Unit::Bytes),
    );
    let port_tx_packets = counter(&mut r, "port_tx_packets", "Frames sent on a port", None);
    let port_tx_bytes = counter(&mut r, "port_tx", "Bytes sent on a port", Some(Unit::Bytes));
    let port_drops = counter(
        &mut r,
        "port_driver_drops",
        "Frames the driver or the kernel lost on a port (too big, truncated, TX ring full, RX ring full)",
        None,
    );
    for p in &report.ports {
        let l: Labels = vec![("port", p.name.clone()), ("interface", p.interface.clone())];
        port_rx_packets.get_or_create(&l).inc_by(p.stats.rx_frames);
        port_rx_bytes.get_or_create(&l).inc_by(p.stats.rx_bytes);
        port_tx_packets.get_or_create(&l).inc_by(p.stats.tx_frames);
        port_tx_bytes.get_or_create(&l).inc_by(p.stats.tx_bytes);
        port_drops.get_or_create(&l).inc_by(p.stats.dropped());
    }

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
    gauge(&mut r, "flows_live", "Conntrack entries now", t.live_flows);
    gauge(
        &mut r,
        "snat_tuples_in_use",
        "SNAT tuples allocated now",
        t.snat_in_use,
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
        "Next hops the neighbour table can hold",
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
        let l: Labels = vec![("snat_ip", a.address.clone())];
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
    let pool_size = gauges(&mut r, "ipam_pool_addresses", "Addresses in an IPAM pool");
    for (pool, u) in &cp.pools {
        let l: Labels = vec![("pool", pool.clone())];
        pool_used.get_or_create(&l).set(u.used as i64);
        pool_size.get_or_create(&l).set(u.size as i64);
    }
    if let Some(leader) = cp.leader {
        gauge(
            &mut r,
            "leader",
            "1 when this instance is the leader, 0 on standby",
            u64::from(leader),
        );
    }

    let mut text = String::new();
    encode(&mut text, &r)?;
    Ok(text)
}

/// The running metrics endpoint; stops on drop.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listen on `addr` and answer `GET /metrics` with the metrics of a
    /// fresh `report()`.
    pub fn start(
        addr: SocketAddr,
        report: impl Fn() -> StatsReport + Send + 'static,
    ) -> Result<Self, MetricsError> {
        let bind_err = |source| MetricsError::Bind { addr, source };
        let listener = TcpListener::bind(addr).map_err(bind_err)?;
        listener.set_nonblocking(true).map_err(bind_err)?;
        let addr = listener.local_addr().map_err(bind_err)?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("portico-metrics".into())
                .spawn(move || serve(&listener, &stop, &report))
                .map_err(MetricsError::Thread)?
        };
        Ok(MetricsServer {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// The address it listens on (the port resolved if 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(listener: &TcpListener, stop: &AtomicBool, report: &dyn Fn() -> StatsReport) {
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                if let Err(e) = answer(stream, report) {
                    tracing::debug!(error = %e, "metrics client went away");
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(ACCEPT_IDLE_MS));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::warn!(error = %e, "metrics accept failed");
                std::thread::sleep(Duration::from_millis(ACCEPT_IDLE_MS));
            }
        }
    }
}

/// Read the request head (up to the blank line) and answer it.
fn answer(mut stream: TcpStream, report: &dyn Fn() -> StatsReport) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    let timeout = Some(Duration::from_millis(CLIENT_TIMEOUT_MS));
    stream.set_read_timeout(timeout)?;
    stream.set_write_timeout(timeout)?;
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST_BYTES {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(buf.get(..n).unwrap_or_default());
    }
    let head = String::from_utf8_lossy(&head);
    let mut words = head.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") => match encode_report(&report()) {
            Ok(text) => ("200 OK", CONTENT_TYPE, text),
            Err(e) => (
                "500 Internal Server Error",
                "text/plain; charset=utf-8",
                format!("{e}\n"),
            ),
        },
        (_, "/metrics") => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET\n".to_owned(),
        ),
        _ => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "metrics are at /metrics\n".to_owned(),
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes())?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::{
        BackendReport, CounterReport, PortCounters, PortReport, ServiceReport, SnapshotReport,
    };
    use dataplane::counters::{Counters, DropReason, Gauges};
    use std::collections::BTreeMap;

    fn sample() -> StatsReport {
        let mut c = Counters {
            rx_packets: 40,
            flows_created: 6,
            flows_expired: 2,
            flows_early_dropped: 1,
            ..Counters::default()
        };
        for _ in 0..3 {
            c.drop(DropReason::NoFlow);
        }
        StatsReport {
            pid: 1,
            uptime_ms: 10_000,
            config: "portico.toml".into(),
            snapshot: SnapshotReport {
                generation: 4,
                age_ms: 2_500,
            },
            total: CounterReport::new(
                &c,
                Gauges {
                    live_flows: 4,
                    snat_in_use: 3,
                    // SYN_SENT 1, ESTABLISHED 2, TIME_WAIT 0 ..., UDP 1.
                    flows_by_state: [1, 0, 2, 0, 0, 0, 0, 0, 1, 0],
                },
            ),
            workers: Vec::new(),
            ports: vec![PortReport {
                port: 0,
                name: "outside".into(),
                interface: "veth0".into(),
                stats: PortCounters {
                    rx_frames: 11,
                    rx_bytes: 1100,
                    tx_frames: 9,
                    tx_bytes: 900,
                    tx_ring_full: 2,
                    kernel_rx_drops: 5,
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
                listeners: Vec::new(),
                backends: vec![BackendReport {
                    address: "10.1.0.10:8080".into(),
                    condition: "ready".into(),
                    weight: 1,
                    packets: 5,
                    bytes: 500,
                    flows_created: 2,
                    flows_active: 1,
                }],
            }],
            snat: vec![crate::admin::SnatAddrReport {
                address: "10.1.0.1".into(),
                ports_in_use: 3,
                exhausted: 6,
            }],
            control_plane: {
                let m = crate::admin::ControlPlaneMetrics::new();
                m.observe_build_ms(3.0);
                m.observe_build_ms(40.0);
                m.inc_watch_restarts("services");
                m.set_pool_usage("default", 2, 16);
                m.report()
            },
            neighbours: crate::admin::NeighbourReport {
                capacity: 16_384,
                entries: 25,
                statics: 20,
                refused: 2,
                reclaimed: 700,
                compactions: 9,
            },
        }
    }

    /// One sample line: `name{labels} value`, labels as a sorted map.
    #[derive(Debug)]
    struct Sample {
        name: String,
        labels: BTreeMap<String, String>,
        value: f64,
    }

    /// Parse the exposition line by line; panics on a line that is neither
    /// a `# TYPE|HELP|UNIT` comment, `# EOF`, nor a sample. Returns the
    /// declared types and the samples.
    fn parse(text: &str) -> (BTreeMap<String, String>, Vec<Sample>) {
        let mut types = BTreeMap::new();
        let mut samples = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# ") {
                let mut w = rest.splitn(3, ' ');
                match (w.next(), w.next(), w.next()) {
                    (Some("TYPE"), Some(name), Some(t)) => {
                        types.insert(name.to_owned(), t.to_owned());
                    }
                    (Some("HELP" | "UNIT"), Some(_), Some(_)) => {}
                    (Some("EOF"), None, None) => {}
                    _ => panic!("bad comment line {line:?}"),
                }
                continue;
            }
            let (series, value) = line.rsplit_once(' ').expect("`series value`");
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => {
                    let body = rest.strip_suffix('}').expect("labels close");
                    let labels = body
                        .split(',')
                        .map(|kv| {
                            let (k, v) = kv.split_once('=').expect("k=v");
                            let v = v
                                .strip_prefix('"')
                                .and_then(|v| v.strip_suffix('"'))
                                .expect("quoted value");
                            (k.to_owned(), v.to_owned())
                        })
                        .collect();
                    (name, labels)
                }
                None => (series, BTreeMap::new()),
            };
            assert!(
                name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "metric name {name:?}"
            );
            samples.push(Sample {
                name: name.to_owned(),
                labels,
                value: value.parse().expect("numeric value"),
            });
        }
        (types, samples)
    }

    fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
        let want: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let found: Vec<&Sample> = samples
            .iter()
            .filter(|s| s.name == name && s.labels == want)
            .collect();
        assert_eq!(found.len(), 1, "{name} {want:?} in {samples:#?}");
        found.first().map_or(f64::NAN, |s| s.value)
    }

    #[test]
    fn the_metrics_text_has_every_family_with_units_and_labels() {
        let report = sample();
        let text = encode_report(&report).expect("encodes");
        assert!(text.ends_with("# EOF\n"), "{text}");
        let (types, samples) = parse(&text);

        for (family, t) in [
            ("portico_port_rx_packets", "counter"),
            ("portico_port_rx_bytes", "counter"),
            ("portico_port_tx_packets", "counter"),
            ("portico_port_tx_bytes", "counter"),
            ("portico_port_driver_drops", "counter"),
            ("portico_drops", "counter"),
            ("portico_flows_created", "counter"),
            ("portico_flows_expired", "counter"),
            ("portico_flows_early_dropped", "counter"),
            ("portico_flows_live", "gauge"),
            ("portico_snat_tuples_in_use", "gauge"),
            ("portico_service_packets", "counter"),
            ("portico_service_bytes", "counter"),
            ("portico_backend_packets", "counter"),
            ("portico_backend_bytes", "counter"),
            ("portico_snapshot_generation", "gauge"),
            ("portico_snapshot_age_seconds", "gauge"),
            ("portico_neighbour_entries", "gauge"),
            ("portico_neighbour_capacity", "gauge"),
            ("portico_neighbour_refusals", "counter"),
            ("portico_neighbour_reclaimed", "counter"),
            ("portico_neighbour_compactions", "counter"),
        ] {
            assert_eq!(
                types.get(family).map(String::as_str),
                Some(t),
                "{family}\n{text}"
            );
        }
        assert!(
            text.contains("# UNIT portico_port_rx_bytes bytes"),
            "{text}"
        );
        assert!(
            text.contains("# UNIT portico_snapshot_age_seconds seconds"),
            "{text}"
        );
        for s in &samples {
            if types
                .get(s.name.trim_end_matches("_total"))
                .map(String::as_str)
                == Some("counter")
            {
                assert!(s.name.ends_with("_total"), "counter sample {}", s.name);
            }
        }

        let port = [("port", "outside"), ("interface", "veth0")];
        assert_eq!(
            value(&samples, "portico_port_rx_packets_total", &port),
            11.0
        );
        assert_eq!(
            value(&samples, "portico_port_rx_bytes_total", &port),
            1100.0
        );
        assert_eq!(value(&samples, "portico_port_tx_packets_total", &port), 9.0);
        assert_eq!(value(&samples, "portico_port_tx_bytes_total", &port), 900.0);
        assert_eq!(
            value(&samples, "portico_port_driver_drops_total", &port),
            7.0
        );

        let reasons: Vec<&Sample> = samples
            .iter()
            .filter(|s| s.name == "portico_drops_total")
            .collect();
        assert_eq!(
            reasons.len(),
            DropReason::COUNT,
            "every reason, zero or not"
        );
        for r in DropReason::ALL {
            let want = if *r == DropReason::NoFlow { 3.0 } else { 0.0 };
            assert_eq!(
                value(&samples, "portico_drops_total", &[("reason", r.name())]),
                want
            );
        }

        assert_eq!(value(&samples, "portico_flows_created_total", &[]), 6.0);
        assert_eq!(value(&samples, "portico_flows_expired_total", &[]), 2.0);
        assert_eq!(
            value(&samples, "portico_flows_early_dropped_total", &[]),
            1.0
        );
        assert_eq!(value(&samples, "portico_flows_live", &[]), 4.0);
        assert_eq!(value(&samples, "portico_snat_tuples_in_use", &[]), 3.0);

        let svc = [("service", "web"), ("protocol", "tcp")];
        assert_eq!(value(&samples, "portico_service_packets_total", &svc), 7.0);
        assert_eq!(value(&samples, "portico_service_bytes_total", &svc), 700.0);
        let be = [
            ("service", "web"),
            ("protocol", "tcp"),
            ("backend", "10.1.0.10:8080"),
        ];
        assert_eq!(value(&samples, "portico_backend_packets_total", &be), 5.0);
        assert_eq!(value(&samples, "portico_backend_bytes_total", &be), 500.0);

        assert_eq!(value(&samples, "portico_snapshot_generation", &[]), 4.0);
        assert_eq!(value(&samples, "portico_snapshot_age_seconds", &[]), 2.5);
        assert_eq!(value(&samples, "portico_neighbour_entries", &[]), 25.0);
        assert_eq!(value(&samples, "portico_neighbour_capacity", &[]), 16_384.0);
        assert_eq!(
            value(&samples, "portico_neighbour_refusals_total", &[]),
            2.0
        );
        assert_eq!(
            value(&samples, "portico_neighbour_reclaimed_total", &[]),
            700.0
        );
        assert_eq!(
            value(&samples, "portico_neighbour_compactions_total", &[]),
            9.0
        );

        // Conntrack by protocol and state, and its counters.
        let tcp = |state: &'static str| [("protocol", "tcp"), ("state", state)];
        assert_eq!(
            value(&samples, "portico_conntrack_flows", &tcp("syn_sent")),
            1.0
        );
        assert_eq!(
            value(&samples, "portico_conntrack_flows", &tcp("established")),
            2.0
        );
        assert_eq!(
            value(&samples, "portico_conntrack_flows", &tcp("time_wait")),
            0.0
        );
        assert_eq!(
            value(&samples, "portico_conntrack_flows", &[("protocol", "udp")]),
            1.0
        );
        assert_eq!(value(&samples, "portico_conntrack_inserts_total", &[]), 6.0);
        assert_eq!(
            value(&samples, "portico_conntrack_expiries_total", &[]),
            2.0
        );
        assert_eq!(
            value(&samples, "portico_conntrack_early_drops_total", &[]),
            1.0
        );
        assert_eq!(
            value(&samples, "portico_conntrack_insert_refusals_total", &[]),
            0.0
        );
        // SNAT per address.
        let ip = [("snat_ip", "10.1.0.1")];
        assert_eq!(value(&samples, "portico_snat_ports_in_use", &ip), 3.0);
        assert_eq!(value(&samples, "portico_snat_exhausted_total", &ip), 6.0);
        // Flows per service and backend.
        assert_eq!(
            value(&samples, "portico_service_flows_created_total", &svc),
            2.0
        );
        assert_eq!(value(&samples, "portico_service_flows_active", &svc), 1.0);
        assert_eq!(
            value(&samples, "portico_backend_flows_created_total", &be),
            2.0
        );
        assert_eq!(value(&samples, "portico_backend_flows_active", &be), 1.0);
        // Control plane: a histogram in seconds, cumulative buckets.
        assert_eq!(
            types
                .get("portico_snapshot_build_seconds")
                .map(String::as_str),
            Some("histogram")
        );
        assert_eq!(
            types
                .get("portico_event_to_live_seconds")
                .map(String::as_str),
            Some("histogram")
        );
        assert_eq!(
            value(&samples, "portico_snapshot_build_seconds_count", &[]),
            2.0
        );
        assert!((value(&samples, "portico_snapshot_build_seconds_sum", &[]) - 0.043).abs() < 1e-9);
        assert_eq!(
            value(
                &samples,
                "portico_snapshot_build_seconds_bucket",
                &[("le", "0.005")]
            ),
            1.0
        );
        assert_eq!(
            value(
                &samples,
                "portico_snapshot_build_seconds_bucket",
                &[("le", "0.05")]
            ),
            2.0
        );
        assert_eq!(
            value(
                &samples,
                "portico_snapshot_build_seconds_bucket",
                &[("le", "+Inf")]
            ),
            2.0
        );
        assert_eq!(
            value(&samples, "portico_event_to_live_seconds_count", &[]),
            0.0
        );
        assert_eq!(
            value(
                &samples,
                "portico_watch_restarts_total",
                &[("watch", "services")]
            ),
            1.0
        );
        let pool = [("pool", "default")];
        assert_eq!(
            value(&samples, "portico_ipam_pool_addresses_used", &pool),
            2.0
        );
        assert_eq!(value(&samples, "portico_ipam_pool_addresses", &pool), 16.0);
        assert!(!types.contains_key("portico_leader"), "no leader election");
    }

    fn get(addr: SocketAddr, request: &str) -> String {
        let mut s = TcpStream::connect(addr).expect("connects");
        s.write_all(request.as_bytes()).expect("sends");
        let mut out = String::new();
        s.read_to_string(&mut out).expect("reads");
        out
    }

    #[test]
    fn the_server_answers_get_metrics_and_nothing_else() {
        let generation = Arc::new(AtomicU64::new(10));
        let server = {
            let generation = Arc::clone(&generation);
            MetricsServer::start("127.0.0.1:0".parse().expect("addr"), move || {
                let mut r = sample();
                r.snapshot.generation = generation.fetch_add(1, Ordering::Relaxed);
                r
            })
            .expect("starts")
        };
        let addr = server.addr();
        assert_ne!(addr.port(), 0);
        let first = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(first.starts_with("HTTP/1.1 200 OK\r\n"), "{first}");
        assert!(first.contains(CONTENT_TYPE), "{first}");
        assert!(
            first.contains("portico_snapshot_generation 10\n"),
            "{first}"
        );
        let second = get(addr, "GET /metrics?x=1 HTTP/1.0\r\n\r\n");
        assert!(
            second.contains("portico_snapshot_generation 11\n"),
            "fresh per scrape"
        );
        let (head, body) = second.split_once("\r\n\r\n").expect("head and body");
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .and_then(|v| v.parse().ok())
            .expect("content length");
        assert_eq!(length, body.len());
        assert!(get(addr, "GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(get(addr, "POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        drop(server);
        assert!(TcpStream::connect(addr).is_err(), "closed on drop");
    }
}
