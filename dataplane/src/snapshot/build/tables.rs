//! Backend sets' Maglev tables: what a set was built from, a set pending
//! in a batch (absent, reused or to be built), and building the pending
//! ones, on several threads when a build has many (a build from scratch).

use crate::maglev::{MaglevBackend, MaglevError, MaglevTable};
use crate::snapshot::{BackendId, BackendSet};
use std::net::SocketAddr;
use std::sync::Arc;

/// What a backend set was built from: (address, weight, id) in input order.
pub(super) type SetFingerprint = Vec<(SocketAddr, u32, BackendId)>;

/// A built backend set and what it was built from (table size, members).
#[derive(Debug, Clone)]
pub(super) struct BuiltSet {
    pub(super) table_size: u32,
    pub(super) members: SetFingerprint,
    pub(super) set: Arc<BackendSet>,
}

/// A backend set of a service being built: absent, reused or to be built.
#[derive(Debug)]
pub(super) enum PendingSet {
    None,
    Ready(BuiltSet),
    Build {
        table_size: u32,
        members: SetFingerprint,
    },
}

/// The hook a table-building thread runs first (given its index).
#[derive(Clone)]
pub(super) struct ThreadStart(pub(super) Arc<dyn Fn(usize) + Send + Sync>);

impl std::fmt::Debug for ThreadStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ThreadStart")
    }
}

/// Below this many tables to build, one thread builds them all.
const PARALLEL_MIN_TABLES: usize = 256;

/// Build the tables of `jobs` (each a [`PendingSet::Build`], turned into
/// [`PendingSet::Ready`]), on up to `threads` threads when there are many.
/// Returns the failures as (service name, error); failed jobs stay as they
/// were.
pub(super) fn build_tables(
    mut jobs: Vec<(&str, &mut PendingSet)>,
    threads: usize,
    thread_start: Option<&ThreadStart>,
) -> Vec<(String, MaglevError)> {
    let threads = threads.min(jobs.len() / PARALLEL_MIN_TABLES).max(1);
    if threads == 1 {
        return build_some(&mut jobs);
    }
    let per_thread = jobs.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = jobs
            .chunks_mut(per_thread)
            .enumerate()
            .map(|(index, chunk)| {
                scope.spawn(move || {
                    if let Some(ThreadStart(hook)) = thread_start {
                        hook(index);
                    }
                    build_some(chunk)
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

/// Build the tables of `jobs` on this thread; the failures as in
/// [`build_tables`].
fn build_some(jobs: &mut [(&str, &mut PendingSet)]) -> Vec<(String, MaglevError)> {
    let mut failures = Vec::new();
    let mut input: Vec<MaglevBackend> = Vec::new();
    for (service, job) in jobs.iter_mut() {
        let PendingSet::Build {
            table_size,
            members,
        } = &**job
        else {
            continue;
        };
        input.clear();
        input.extend(
            members
                .iter()
                .map(|&(addr, weight, _)| MaglevBackend { addr, weight }),
        );
        match MaglevTable::build(&input, *table_size) {
            Ok(table) => {
                let set = Arc::new(BackendSet {
                    table,
                    backends: members.iter().map(|m| m.2).collect(),
                });
                let table_size = *table_size;
                let PendingSet::Build { members, .. } =
                    std::mem::replace(&mut **job, PendingSet::None)
                else {
                    continue;
                };
                **job = PendingSet::Ready(BuiltSet {
                    table_size,
                    members,
                    set,
                });
            }
            Err(source) => failures.push(((*service).to_owned(), source)),
        }
    }
    failures
}
