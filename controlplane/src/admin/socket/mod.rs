//! The unix socket: a std thread accepting connections, one thread per
//! connection being served, and the client side `portico stats`,
//! `services`, `flows` and `simulate --live` use.
//!
//! Per connection: the client writes one JSON [`Request`] line (and may
//! shut down its write side); the server reads at most
//! [`MAX_REQUEST_BYTES`], answers with one JSON document and a newline, and
//! closes. An empty request, or none within [`AdminLimits::request_wait_ms`]
//! (half a second by default), is [`Request::Stats`].
//!
//! Invariants:
//! * at most [`AdminLimits::max_connections`] connections are served at
//!   once, each on its own thread, so a long `portico flows` listing or a
//!   client that connects and says nothing never delays another client's
//!   `portico stats`; a connection beyond the limit is answered at once with
//!   one `{"error": "admin socket busy: …"}` line and closed (never queued
//!   behind the others, never left hanging);
//! * no client holds a connection slot for long: the whole request line
//!   must arrive within [`AdminLimits::request_timeout_ms`] of the
//!   connection being accepted, and the whole answer must be taken within
//!   [`AdminLimits::answer_timeout_ms`] (and no single write may stall
//!   longer than [`CLIENT_TIMEOUT_MS`]); only the handler's own work is not
//!   bounded here (the workers bound theirs, see [`super::live`]);
//! * the API is read-only: the handler answers questions, nothing a client
//!   sends changes the gateway;
//! * only root, the gateway's user and the admin group are served: the
//!   socket file is created `0660` (never wider, not even for an instant)
//!   and given to the admin group, and every connection's peer credentials
//!   are checked before its request is read (see [`access`]);
//! * stopping the server shuts down the connections in progress and joins
//!   every thread it started.
//!
//! The server owns its socket file: a stale file from a gateway that died is
//! removed at start (a live one — something accepts connections on it — is
//! an error, so two gateways never share a socket), and the file is removed
//! when the server stops.
//!
//! The server is here, the client in `client`, the tests in `tests`.

pub mod access;
mod client;
#[cfg(test)]
mod tests;

pub use access::{AccessError, AdminAccess};
pub use client::{ClientError, ask, fetch};

use super::connections::Connections;
use super::protocol::{ErrorAnswer, Request};
use std::io::{self, Read, Write};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Where `portico run` listens and `portico stats` connects by default.
pub const DEFAULT_SOCKET: &str = "/run/portico/portico.sock";

/// How long the accept loop sleeps when no client is waiting (also bounds
/// how long stopping the server takes).
const ACCEPT_IDLE_MS: u64 = 50;
/// A client that does not send its request, or stops reading its answer,
/// for this long is dropped.
pub const CLIENT_TIMEOUT_MS: u64 = 2000;
/// Longest request line read.
pub const MAX_REQUEST_BYTES: u64 = 64 * 1024;
/// How long a client waits for an answer (flow listings of big tables take
/// a while).
const CLIENT_ANSWER_TIMEOUT_MS: u64 = 30_000;
/// Connections served at once by default: a few operators and a scraper,
/// with room for a slow listing.
pub const DEFAULT_MAX_CONNECTIONS: usize = 8;
/// How long writing the one-line busy answer may take.
const REFUSAL_WRITE_MS: u64 = 100;

/// How many connections the server serves at once and how long each may
/// take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdminLimits {
    /// Connections served at once (at least one); one more is answered
    /// with a busy error and closed.
    pub max_connections: usize,
    /// A connection that sends no byte within this time asks for the stats
    /// (an old client, or `socat - UNIX:…`).
    pub request_wait_ms: u64,
    /// The whole request line must have arrived this long after the
    /// connection was accepted.
    pub request_timeout_ms: u64,
    /// The whole answer must have been taken by the client within this
    /// time of the handler returning it.
    pub answer_timeout_ms: u64,
}

impl Default for AdminLimits {
    fn default() -> Self {
        AdminLimits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            request_wait_ms: 500,
            request_timeout_ms: CLIENT_TIMEOUT_MS,
            answer_timeout_ms: CLIENT_ANSWER_TIMEOUT_MS,
        }
    }
}

/// Why the admin socket could not be served.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("creating the directory {}: {source}", path.display())]
    CreateDir { path: PathBuf, source: io::Error },
    #[error("{} is in use by a running gateway", path.display())]
    InUse { path: PathBuf },
    #[error("{} exists and is not a socket; refusing to remove it", path.display())]
    NotASocket { path: PathBuf },
    #[error("removing the stale socket {}: {source}", path.display())]
    RemoveStale { path: PathBuf, source: io::Error },
    #[error("listening on {}: {source}", path.display())]
    Bind { path: PathBuf, source: io::Error },
    #[error("admin socket access: {0}")]
    Access(#[from] AccessError),
    #[error("starting the admin thread: {0}")]
    Thread(io::Error),
}

/// What the server does with one request: the JSON answer, or an error
/// message sent as `{"error": …}`. Called from several connection threads
/// at once.
pub type Handler = dyn Fn(Request) -> Result<String, String> + Send + Sync;

/// The running admin endpoint; stops and removes its socket on drop.
#[derive(Debug)]
pub struct AdminServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl AdminServer {
    /// Listen on `path` and answer every connection's request with
    /// `handler`, within the [`AdminLimits::default`].
    pub fn start(
        path: &Path,
        handler: impl Fn(Request) -> Result<String, String> + Send + Sync + 'static,
    ) -> Result<Self, AdminError> {
        Self::start_with(
            path,
            AdminLimits::default(),
            AdminAccess::default(),
            handler,
        )
    }

    /// [`AdminServer::start`] within `limits`, serving the peers `access`
    /// permits.
    pub fn start_with(
        path: &Path,
        limits: AdminLimits,
        access: AdminAccess,
        handler: impl Fn(Request) -> Result<String, String> + Send + Sync + 'static,
    ) -> Result<Self, AdminError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| AdminError::CreateDir {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        remove_stale(path)?;
        let listener = access::bind_with_mode(|| UnixListener::bind(path)).map_err(|source| {
            AdminError::Bind {
                path: path.to_path_buf(),
                source,
            }
        })?;
        if let Err(e) = access::finish_socket_file(path, &access) {
            let _ = std::fs::remove_file(path);
            return Err(e.into());
        }
        listener
            .set_nonblocking(true)
            .map_err(|source| AdminError::Bind {
                path: path.to_path_buf(),
                source,
            })?;
        let stop = Arc::new(AtomicBool::new(false));
        let handler: Arc<Handler> = Arc::new(handler);
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("portico-admin".into())
                .spawn(move || serve(&listener, &stop, &handler, limits, access))
                .map_err(AdminError::Thread)?
        };
        Ok(AdminServer {
            path: path.to_path_buf(),
            stop,
            thread: Some(thread),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stop accepting, end the connections in progress, join the threads,
    /// remove the socket file.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Remove `path` if it is a socket nobody listens on.
fn remove_stale(path: &Path) -> Result<(), AdminError> {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        return Err(AdminError::NotASocket {
            path: path.to_path_buf(),
        });
    }
    if UnixStream::connect(path).is_ok() {
        return Err(AdminError::InUse {
            path: path.to_path_buf(),
        });
    }
    tracing::info!(path = %path.display(), "removing stale admin socket");
    std::fs::remove_file(path).map_err(|source| AdminError::RemoveStale {
        path: path.to_path_buf(),
        source,
    })
}

fn serve(
    listener: &UnixListener,
    stop: &AtomicBool,
    handler: &Arc<Handler>,
    limits: AdminLimits,
    access: AdminAccess,
) {
    let mut connections: Connections<UnixStream> =
        Connections::new(limits.max_connections, "portico-admin-conn");
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                connections.reap();
                let permitted = access::peer_credentials(&stream)
                    .map_err(|e| format!("permission denied: peer credentials unknown ({e})"))
                    .and_then(|peer| access.permits(&peer));
                if let Err(reason) = permitted {
                    tracing::warn!(%reason, "admin socket: connection refused");
                    refuse(stream, &reason);
                    continue;
                }
                if connections.full() {
                    let in_progress = connections.in_progress();
                    tracing::debug!(in_progress, "admin socket busy, refusing");
                    refuse(
                        stream,
                        &format!(
                            "admin socket busy: {in_progress} requests in progress (the limit); try again"
                        ),
                    );
                    continue;
                }
                let handler = Arc::clone(handler);
                let spawned = connections.spawn(stream, move |stream| {
                    if let Err(e) = answer(stream, &*handler, limits) {
                        tracing::debug!(error = %e, "admin client went away");
                    }
                });
                if let Err((stream, e)) = spawned {
                    tracing::warn!(error = %e, "cannot start an admin connection thread");
                    refuse(stream, &format!("admin socket: cannot serve now ({e})"));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                connections.reap();
                std::thread::sleep(Duration::from_millis(ACCEPT_IDLE_MS));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::warn!(error = %e, "admin socket accept failed");
                std::thread::sleep(Duration::from_millis(ACCEPT_IDLE_MS));
            }
        }
    }
    connections.close_all();
}

/// Answer `stream` with one `{"error": reason}` line without waiting for
/// anything: the request already sent is drained first (so the client's
/// read sees the answer, not a reset), what has not arrived yet is not
/// waited for.
fn refuse(mut stream: UnixStream, reason: &str) {
    let _ = stream.set_nonblocking(true);
    let mut sink = [0u8; 4096];
    let mut drained: u64 = 0;
    while drained < MAX_REQUEST_BYTES {
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n as u64,
        }
    }
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_write_timeout(Some(Duration::from_millis(REFUSAL_WRITE_MS)));
    if let Ok(mut body) = serde_json::to_vec(&ErrorAnswer {
        error: reason.to_owned(),
    }) {
        body.push(b'\n');
        let _ = stream.write_all(&body);
    }
    let _ = stream.shutdown(std::net::Shutdown::Write);
}

/// The request line, or an empty string when the client said nothing
/// within `request_wait_ms` (or closed without a word).
fn read_request(stream: &UnixStream, limits: AdminLimits) -> io::Result<String> {
    let accepted = Instant::now();
    let wait = Duration::from_millis(limits.request_wait_ms);
    let whole = Duration::from_millis(limits.request_timeout_ms);
    let mut line: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 4096];
    while !line.contains(&b'\n') && (line.len() as u64) < MAX_REQUEST_BYTES {
        let deadline = if line.is_empty() { wait } else { whole };
        let left = deadline.saturating_sub(accepted.elapsed());
        if left.is_zero() {
            if line.is_empty() {
                break;
            }
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the request line did not arrive in time",
            ));
        }
        stream.set_read_timeout(Some(left))?;
        let room = (MAX_REQUEST_BYTES as usize)
            .saturating_sub(line.len())
            .min(chunk.len());
        match (&*stream).read(chunk.get_mut(..room).unwrap_or_default()) {
            Ok(0) => break,
            Ok(n) => line.extend_from_slice(chunk.get(..n).unwrap_or_default()),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e),
        }
    }
    if let Some(end) = line.iter().position(|b| *b == b'\n') {
        line.truncate(end);
    }
    // Not UTF-8: a request that cannot parse, answered as such.
    Ok(String::from_utf8_lossy(&line).into_owned())
}

/// Write `body` within the answer deadline, no write stalling longer than
/// [`CLIENT_TIMEOUT_MS`].
fn write_answer(stream: &UnixStream, body: &[u8], limits: AdminLimits) -> io::Result<()> {
    let started = Instant::now();
    let whole = Duration::from_millis(limits.answer_timeout_ms);
    let stall = Duration::from_millis(CLIENT_TIMEOUT_MS);
    let mut rest = body;
    while !rest.is_empty() {
        let left = whole.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client did not take the answer in time",
            ));
        }
        stream.set_write_timeout(Some(left.min(stall)))?;
        match (&*stream).write(rest) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => rest = rest.get(n..).unwrap_or_default(),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    (&*stream).flush()
}

fn answer(stream: &UnixStream, handler: &Handler, limits: AdminLimits) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    let line = read_request(stream, limits)?;
    let result = if line.trim().is_empty() {
        handler(Request::Stats)
    } else {
        match serde_json::from_str::<Request>(line.trim()) {
            Ok(request) => handler(request),
            Err(e) => Err(format!("bad request: {e}")),
        }
    };
    let mut body = match result {
        Ok(body) => body.into_bytes(),
        Err(error) => serde_json::to_vec(&ErrorAnswer { error }).map_err(io::Error::other)?,
    };
    body.push(b'\n');
    write_answer(stream, &body, limits)
}
