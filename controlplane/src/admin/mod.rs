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
//! client sends changes the gateway (but for the test hook
//! [`Request::StallWorker`], refused unless `PORTICO_TEST_HOOKS=1`).
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
//! * every [`DropReason`](dataplane::counters::DropReason) appears in every report under its stable name,
//!   zero or not, so scripts can rely on the keys;
//! * `total` is the field-wise sum of `workers`, and `ports[i]` the sum over
//!   workers of their driver's stats for port `i`.
//!
//! Files: `report` (the report types and how they are summed from the
//! workers' cells; a port's counters are the dataplane's
//! [`PortCounters`], filled by each driver), `render` (the text `portico stats` and
//! `portico services` print), [`protocol`] (requests, answers and
//! [`handle`], which answers one request), `socket` (the unix socket
//! server and client), `metrics` (the Prometheus endpoint), `control`
//! (the control plane's measurements), `drop_log` and [`live`].

mod connections;
mod control;
mod drop_log;
pub mod live;
mod metrics;
pub mod protocol;
mod render;
mod report;
mod socket;

pub use control::{
    ControlPlaneMetrics, ControlPlaneReport, HistogramReport, LATENCY_BUCKETS_MS, MembersReport,
    PoolUsage,
};
/// The port counters every driver reports ([`dataplane::driver::stats`]),
/// and the cell each worker publishes them through.
pub use dataplane::driver::{PortCounters, PortStatsCell};
pub use drop_log::{DEFAULT_DROP_LOG_INTERVAL_MS, DropLog};
pub use live::{LiveAdmin, LiveOutcome};
pub use metrics::{CONTENT_TYPE, DEFAULT_METRICS_ADDR, MetricsError, MetricsServer, encode_report};
pub use protocol::{
    DEFAULT_FLOW_LIMIT, FlowRow, FlowsQuery, FlowsReport, MAX_FLOW_LIMIT, Request, handle,
};
pub use render::{BgpTable, Rates, ServicesTable};
pub use report::{
    AnnouncementReport, BackendReport, BgpPeerReport, BgpReport, CounterReport, ListenerReport,
    NeighbourReport, PortReport, ServiceReport, SnapshotReport, SnatAddrReport, StatsReport,
    WorkerReport, announcement_report, listeners_of, service_reports, snat_reports, sum_workers,
};
pub use socket::{
    AccessError, AdminAccess, AdminError, AdminLimits, AdminServer, ClientError,
    DEFAULT_MAX_CONNECTIONS, DEFAULT_SOCKET, Handler, ask, fetch,
};
