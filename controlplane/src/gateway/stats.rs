//! What the admin socket and the Prometheus endpoint report from: the
//! cells each worker publishes (counters, port stats, inspect mailbox) and
//! the [`StatsSource`] that sums them into a [`StatsReport`].

use crate::admin::{
    BgpReport, ControlPlaneMetrics, CounterReport, PortCounters, PortReport, PortStatsCell,
    SnapshotReport, StatsReport, WorkerReport, announcement_report, service_reports, snat_reports,
    sum_workers,
};
use dataplane::counters::{ServiceCounters, SharedCounters};
use dataplane::inspect::InspectClient;
use dataplane::neighbour::NeighbourTable;
use dataplane::snapshot::Publisher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What one worker publishes for the admin thread.
#[derive(Debug)]
pub(super) struct WorkerCells {
    /// The core the worker is pinned to, if any.
    pub(super) core: Option<usize>,
    pub(super) counters: Arc<SharedCounters>,
    /// One per port.
    pub(super) ports: Vec<PortStatsCell>,
    /// The admin thread's end of the worker's inspect mailbox.
    pub(super) inspect: Arc<Mutex<InspectClient>>,
}

/// What the admin thread builds reports from.
#[derive(Debug)]
pub(super) struct StatsSource {
    pub(super) started: Instant,
    pub(super) config: String,
    pub(super) publisher: Publisher,
    /// Milliseconds after `started` the current snapshot was published.
    pub(super) published_at_ms: Arc<AtomicU64>,
    pub(super) workers: Vec<Arc<WorkerCells>>,
    /// `(name, interface)` per port.
    pub(super) ports: Vec<(String, String)>,
    pub(super) control: ControlPlaneMetrics,
    pub(super) neighbours: Arc<NeighbourTable>,
    /// The BGP speaker's report (refreshed every control tick).
    pub(super) bgp: Arc<Mutex<BgpReport>>,
}

impl StatsSource {
    pub(super) fn report(&self) -> StatsReport {
        let uptime_ms = self.started.elapsed().as_millis() as u64;
        let workers: Vec<WorkerReport> = self
            .workers
            .iter()
            .enumerate()
            .map(|(i, cells)| {
                let (c, g) = cells.counters.read();
                WorkerReport {
                    worker: i,
                    core: cells.core,
                    counters: CounterReport::new(&c, g),
                }
            })
            .collect();
        let ports = self
            .ports
            .iter()
            .enumerate()
            .map(|(i, (name, interface))| {
                let mut stats = PortCounters::default();
                for cells in &self.workers {
                    if let Some(cell) = cells.ports.get(i) {
                        stats.accumulate(&cell.load());
                    }
                }
                PortReport {
                    port: i,
                    name: name.clone(),
                    interface: interface.clone(),
                    stats,
                }
            })
            .collect();
        StatsReport {
            pid: std::process::id(),
            uptime_ms,
            config: self.config.clone(),
            snapshot: SnapshotReport {
                generation: self.publisher.current().generation,
                age_ms: uptime_ms.saturating_sub(self.published_at_ms.load(Ordering::Relaxed)),
            },
            total: sum_workers(&workers),
            workers,
            ports,
            services: {
                let mut counted = ServiceCounters::default();
                for cells in &self.workers {
                    counted.accumulate(&cells.counters.read_services());
                }
                service_reports(&self.publisher.current(), &counted)
            },
            snat: snat_reports(
                &self
                    .workers
                    .iter()
                    .map(|c| c.counters.read_snat())
                    .collect::<Vec<_>>(),
            ),
            control_plane: self.control.report(),
            neighbours: self.neighbours.stats().into(),
            announcements: announcement_report(&self.publisher.current()),
            bgp: self.bgp.lock().map(|r| r.clone()).unwrap_or_default(),
        }
    }

    /// The dataplane counters summed over the workers.
    pub(super) fn totals(&self) -> dataplane::counters::Counters {
        let mut total = dataplane::counters::Counters::default();
        for cells in &self.workers {
            total.accumulate(&cells.counters.read().0);
        }
        total
    }
}
