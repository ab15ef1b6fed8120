//! A tokio runtime whose one thread lives in a network namespace, for async
//! code under test (a BGP speaker, a client) that must open its sockets
//! there while the test thread drives it.
//!
//! Invariants:
//! * the runtime's thread enters the namespace before the runtime is built,
//!   so every task spawned on it opens its sockets in that namespace; the
//!   caller's thread never moves;
//! * that thread runs the runtime's IO and timer drivers until the runtime
//!   stops, so [`NsRuntime::block_on`] on any other thread makes progress;
//! * stopping (or dropping) an [`NsRuntime`] drops the tasks still on it:
//!   their sockets close at once, as in a crash, without a goodbye.

use crate::ns::Netns;
use std::future::Future;
use std::io;
use std::sync::mpsc;
use std::thread::JoinHandle;
use tokio::runtime::{Builder, Handle};
use tokio::sync::oneshot;

/// A current-thread tokio runtime on a thread of its own that entered a
/// network namespace; stopped, with every task on it, on drop.
///
/// Spawn onto it inside [`NsRuntime::enter`] (`tokio::spawn` then lands on
/// the namespace thread) and wait with [`NsRuntime::block_on`].
#[derive(Debug)]
pub struct NsRuntime {
    handle: Handle,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl NsRuntime {
    /// Start the runtime's thread in `ns`. Fails if the thread cannot be
    /// started, cannot enter the namespace, or the runtime cannot be built.
    pub fn new(ns: &Netns) -> io::Result<NsRuntime> {
        let path = ns.path();
        let (ready_tx, ready_rx) = mpsc::channel::<io::Result<Handle>>();
        let (stop, stop_rx) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(format!("rt-{}", ns.name))
            .spawn(move || {
                let built = crate::sys::enter_netns(&path)
                    .map_err(|e| {
                        io::Error::new(
                            e.kind(),
                            format!("entering network namespace {}: {e}", path.display()),
                        )
                    })
                    .and_then(|()| Builder::new_current_thread().enable_all().build());
                let runtime = match built {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                if ready_tx.send(Ok(runtime.handle().clone())).is_err() {
                    return;
                }
                // Drives IO and timers (for every task and every caller of
                // `block_on`) until asked to stop, or until the sender goes.
                runtime.block_on(async {
                    let _ = stop_rx.await;
                });
                // Dropping `runtime` drops the tasks still on it.
            })?;
        let started = ready_rx.recv();
        match started {
            Ok(Ok(handle)) => Ok(NsRuntime {
                handle,
                stop: Some(stop),
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(mpsc::RecvError) => {
                let _ = thread.join();
                Err(io::Error::other(
                    "the namespace runtime's thread ended before its runtime started",
                ))
            }
        }
    }

    /// The runtime's handle (spawn onto it from anywhere).
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Run `f` with the runtime entered, so that `tokio::spawn` (and
    /// anything that spawns, such as a task-owning constructor) lands on
    /// the namespace thread.
    pub fn enter<T>(&self, f: impl FnOnce() -> T) -> T {
        let _guard = self.handle.enter();
        f()
    }

    /// Wait for `fut` on the calling thread. The future itself is polled
    /// here (in the caller's namespace: open sockets in spawned tasks, not
    /// in `fut`); IO and timers are driven by the namespace thread.
    ///
    /// # Panics
    /// When called from inside an async context. After [`Self::stop`] the
    /// drivers are gone: timers panic and IO fails.
    pub fn block_on<F: Future>(&self, fut: F) -> F::Output {
        self.handle.block_on(fut)
    }

    /// Stop the runtime and join its thread, dropping every task still on
    /// it. Idempotent.
    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for NsRuntime {
    fn drop(&mut self) {
        self.stop();
    }
}
