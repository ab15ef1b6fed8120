//! Lock-free publication of snapshots (`arc-swap`): one writer swaps a new
//! `Arc<Snapshot>` in; workers load the current one once per poll. A worker
//! keeps the snapshot it loaded for the whole poll (every batch of it, the
//! held frames and the ARP frames), so every packet of a poll sees one
//! consistent set of tables; the old snapshot is freed when the last poll
//! using it ends.

use super::Snapshot;
use arc_swap::{ArcSwap, Guard};
use std::sync::Arc;

/// The writer side, held by the control plane.
#[derive(Debug, Clone)]
pub struct Publisher {
    cell: Arc<ArcSwap<Snapshot>>,
}

/// The reader side, one per worker.
#[derive(Debug, Clone)]
pub struct SnapshotReader {
    cell: Arc<ArcSwap<Snapshot>>,
}

impl Publisher {
    pub fn new(initial: Snapshot) -> Self {
        Publisher {
            cell: Arc::new(ArcSwap::from_pointee(initial)),
        }
    }

    /// Make `snapshot` the current one for every batch that starts from now.
    pub fn publish(&self, snapshot: Snapshot) {
        self.cell.store(Arc::new(snapshot));
    }

    pub fn current(&self) -> Arc<Snapshot> {
        self.cell.load_full()
    }

    pub fn reader(&self) -> SnapshotReader {
        SnapshotReader {
            cell: Arc::clone(&self.cell),
        }
    }
}

impl SnapshotReader {
    /// The current snapshot; hold it for one poll, not longer.
    #[inline]
    pub fn load(&self) -> Guard<Arc<Snapshot>> {
        self.cell.load()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_see_the_latest_publication_and_old_guards_stay_valid() {
        let p = Publisher::new(Snapshot::empty(Vec::new()));
        let r = p.reader();
        let old = r.load();
        let mut next = Snapshot::empty(Vec::new());
        next.generation = 7;
        p.publish(next);
        assert_eq!(old.generation, 0, "a batch keeps the snapshot it loaded");
        assert_eq!(r.load().generation, 7);
        assert_eq!(p.current().generation, 7);
    }
}
