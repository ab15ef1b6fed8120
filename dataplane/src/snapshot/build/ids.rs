//! Stable ids of services and backends.

/// Ids handed out from a free list, then from a counter. A batch first
/// *peeks* the ids it would take and commits them only when it succeeds, so
/// a failed build changes nothing.
#[derive(Debug, Default)]
pub(super) struct IdPool {
    free: Vec<u32>,
    next: u32,
}

impl IdPool {
    /// The `k`-th (from 0) new id of the current batch.
    pub(super) fn peek(&self, k: usize) -> u32 {
        match self.free.len().checked_sub(k + 1) {
            Some(i) => self.free[i],
            None => self.next + (k - self.free.len()) as u32,
        }
    }

    /// The batch took `taken` ids.
    pub(super) fn commit(&mut self, taken: usize) {
        let from_free = taken.min(self.free.len());
        self.free.truncate(self.free.len() - from_free);
        self.next += (taken - from_free) as u32;
    }

    /// `id` is free again (its service or backend is gone).
    pub(super) fn release(&mut self, id: u32) {
        self.free.push(id);
    }
}
