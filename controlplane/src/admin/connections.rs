//! The connections an admin endpoint (the unix socket, the metrics HTTP
//! server) is serving: one thread per connection, at most `max` at once.
//!
//! Invariants:
//! * a slot is taken before a connection's thread starts and given back
//!   when its work returns (also if it panics), *before* the client sees
//!   the end of its answer, so a client that connects after reading an
//!   answer to its end finds that slot free;
//! * [`Connections::close_all`] shuts every stream down (a blocked read or
//!   write returns) and joins every thread started, so stopping a server
//!   leaves no thread behind.

use std::io;
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;

/// A stream one thread serves while the accept loop keeps a handle to end
/// it.
pub(crate) trait ServedStream: Send + Sized + 'static {
    fn try_clone_stream(&self) -> io::Result<Self>;
    fn shutdown_both(&self);
}

impl ServedStream for UnixStream {
    fn try_clone_stream(&self) -> io::Result<Self> {
        self.try_clone()
    }
    fn shutdown_both(&self) {
        let _ = self.shutdown(std::net::Shutdown::Both);
    }
}

impl ServedStream for TcpStream {
    fn try_clone_stream(&self) -> io::Result<Self> {
        self.try_clone()
    }
    fn shutdown_both(&self) {
        let _ = self.shutdown(std::net::Shutdown::Both);
    }
}

/// A connection being served: its thread and a handle on its stream.
struct Connection<S> {
    thread: JoinHandle<()>,
    stream: S,
}

/// One of the `max` slots; given back on drop.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The connections in progress of one server.
pub(crate) struct Connections<S> {
    active: Vec<Connection<S>>,
    busy: Arc<AtomicUsize>,
    max: usize,
    /// Thread name of the connection threads.
    name: &'static str,
}

impl<S: ServedStream> Connections<S> {
    /// At most `max` (at least one) connections at once.
    pub(crate) fn new(max: usize, name: &'static str) -> Self {
        Connections {
            active: Vec::new(),
            busy: Arc::new(AtomicUsize::new(0)),
            max: max.max(1),
            name,
        }
    }

    /// Connections being served now.
    pub(crate) fn in_progress(&self) -> usize {
        self.busy.load(Ordering::Acquire)
    }

    /// Whether every slot is taken.
    pub(crate) fn full(&self) -> bool {
        self.in_progress() >= self.max
    }

    /// Serve `stream` with `work` on a thread of its own; on failure the
    /// stream back (to refuse it) and why. The stream is shut down when
    /// `work` returns.
    pub(crate) fn spawn(
        &mut self,
        stream: S,
        work: impl FnOnce(&S) + Send + 'static,
    ) -> Result<(), (S, io::Error)> {
        self.reap();
        let control = match stream.try_clone_stream() {
            Ok(c) => c,
            Err(e) => return Err((stream, e)),
        };
        self.busy.fetch_add(1, Ordering::AcqRel);
        let slot = Slot(Arc::clone(&self.busy));
        let spawned = std::thread::Builder::new()
            .name(self.name.into())
            .spawn(move || {
                work(&stream);
                drop(slot);
                // The accept loop holds a clone until it reaps this
                // thread: end the connection now.
                stream.shutdown_both();
            });
        match spawned {
            Ok(thread) => {
                self.active.push(Connection {
                    thread,
                    stream: control,
                });
                Ok(())
            }
            // The closure (and with it the slot) was dropped.
            Err(e) => Err((control, e)),
        }
    }

    /// Join the connection threads that are done.
    pub(crate) fn reap(&mut self) {
        let (done, running): (Vec<_>, Vec<_>) =
            self.active.drain(..).partition(|c| c.thread.is_finished());
        self.active = running;
        for c in done {
            if c.thread.join().is_err() {
                tracing::warn!(server = self.name, "a connection thread panicked");
            }
        }
    }

    /// End every connection in progress and join its thread.
    pub(crate) fn close_all(self) {
        for c in self.active {
            // Unblocks a read or write in progress; work still running
            // finishes and finds the stream closed.
            c.stream.shutdown_both();
            if c.thread.join().is_err() {
                tracing::warn!(server = self.name, "a connection thread panicked");
            }
        }
    }
}
