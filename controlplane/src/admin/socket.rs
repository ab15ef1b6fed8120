//! The unix socket: a plain std thread accepting connections, and the client
//! side `portico stats`, `services`, `flows` and `simulate --live` use.
//!
//! Per connection: the client writes one JSON [`Request`] line (and may
//! shut down its write side); the server reads at most
//! [`MAX_REQUEST_BYTES`], answers with one JSON document and a newline, and
//! closes. An empty request, or none within half a second, is
//! [`Request::Stats`]. Connections are served one at a time; every read and
//! write is bounded by a timeout.
//!
//! The server owns its socket file: a stale file from a gateway that died is
//! removed at start (a live one — something accepts connections on it — is
//! an error, so two gateways never share a socket), and the file is removed
//! when the server stops.

use super::StatsReport;
use super::protocol::{ErrorAnswer, Request};
use serde::de::DeserializeOwned;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// Where `portico run` listens and `portico stats` connects by default.
pub const DEFAULT_SOCKET: &str = "/run/portico/portico.sock";

/// How long the accept loop sleeps when no client is waiting (also bounds
/// how long stopping the server takes).
const ACCEPT_IDLE_MS: u64 = 50;
/// A client that does not send its request or read its answer within this
/// time is dropped.
pub const CLIENT_TIMEOUT_MS: u64 = 2000;
/// How long the server waits for the first bytes of a request before it
/// takes the connection as a stats request.
const REQUEST_WAIT_MS: u64 = 500;
/// Longest request line read.
pub const MAX_REQUEST_BYTES: u64 = 64 * 1024;
/// How long a client waits for an answer (flow listings of big tables take
/// a while).
const CLIENT_ANSWER_TIMEOUT_MS: u64 = 30_000;

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
    #[error("starting the admin thread: {0}")]
    Thread(io::Error),
}

/// Why `portico stats` could not get a report.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("the gateway is not running (no admin socket at {})", path.display())]
    NotRunning { path: PathBuf },
    #[error("permission denied on {} (run as root or as the gateway's user)", path.display())]
    PermissionDenied { path: PathBuf },
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("{}: the gateway sent an unreadable report: {source}", path.display())]
    BadReport {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("the gateway refused the request: {0}")]
    Refused(String),
}

/// What the server does with one request: the JSON answer, or an error
/// message sent as `{"error": …}`.
pub type Handler = dyn Fn(Request) -> Result<String, String> + Send;

/// The running admin endpoint; stops and removes its socket on drop.
#[derive(Debug)]
pub struct AdminServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl AdminServer {
    /// Listen on `path` and answer every connection's request with
    /// `handler`.
    pub fn start(
        path: &Path,
        handler: impl Fn(Request) -> Result<String, String> + Send + 'static,
    ) -> Result<Self, AdminError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| AdminError::CreateDir {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        remove_stale(path)?;
        let listener = UnixListener::bind(path).map_err(|source| AdminError::Bind {
            path: path.to_path_buf(),
            source,
        })?;
        // Counters are not secret, but the socket is the gateway's: owner
        // and group only.
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660));
        listener
            .set_nonblocking(true)
            .map_err(|source| AdminError::Bind {
                path: path.to_path_buf(),
                source,
            })?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("portico-admin".into())
                .spawn(move || serve(&listener, &stop, &handler))
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

    /// Stop accepting, join the thread, remove the socket file.
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

fn serve(listener: &UnixListener, stop: &AtomicBool, handler: &Handler) {
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                if let Err(e) = answer(stream, handler) {
                    tracing::debug!(error = %e, "admin client went away");
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(ACCEPT_IDLE_MS));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::warn!(error = %e, "admin socket accept failed");
                std::thread::sleep(Duration::from_millis(ACCEPT_IDLE_MS));
            }
        }
    }
}

fn answer(stream: UnixStream, handler: &Handler) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    let timeout = Some(Duration::from_millis(CLIENT_TIMEOUT_MS));
    stream.set_read_timeout(timeout)?;
    stream.set_write_timeout(timeout)?;
    // A client that says nothing within REQUEST_WAIT_MS (an old client, or
    // `socat - UNIX:…`) asks for the stats.
    stream.set_read_timeout(Some(Duration::from_millis(REQUEST_WAIT_MS)))?;
    let mut line = String::new();
    match BufReader::new(&stream)
        .take(MAX_REQUEST_BYTES)
        .read_line(&mut line)
    {
        Ok(_) => {}
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            if !line.is_empty() {
                return Err(e);
            }
        }
        Err(e) => return Err(e),
    }
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
    let mut stream = stream;
    stream.write_all(&body)?;
    stream.flush()
}

/// Send `request` to the gateway listening on `path`; the raw JSON answer
/// and its parsed form.
pub fn ask<T: DeserializeOwned>(
    path: &Path,
    request: &Request,
) -> Result<(String, T), ClientError> {
    let mut stream = UnixStream::connect(path).map_err(|source| match source.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => ClientError::NotRunning {
            path: path.to_path_buf(),
        },
        io::ErrorKind::PermissionDenied => ClientError::PermissionDenied {
            path: path.to_path_buf(),
        },
        _ => ClientError::Io {
            path: path.to_path_buf(),
            source,
        },
    })?;
    let io_err = |source| ClientError::Io {
        path: path.to_path_buf(),
        source,
    };
    stream
        .set_read_timeout(Some(Duration::from_millis(CLIENT_ANSWER_TIMEOUT_MS)))
        .map_err(io_err)?;
    stream
        .set_write_timeout(Some(Duration::from_millis(CLIENT_TIMEOUT_MS)))
        .map_err(io_err)?;
    let mut line = serde_json::to_string(request).map_err(|source| ClientError::BadReport {
        path: path.to_path_buf(),
        source,
    })?;
    line.push('\n');
    stream.write_all(line.as_bytes()).map_err(io_err)?;
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut raw = String::new();
    stream.read_to_string(&mut raw).map_err(io_err)?;
    if let Ok(ErrorAnswer { error }) = serde_json::from_str::<ErrorAnswer>(&raw) {
        return Err(ClientError::Refused(error));
    }
    let parsed = serde_json::from_str(&raw).map_err(|source| ClientError::BadReport {
        path: path.to_path_buf(),
        source,
    })?;
    Ok((raw, parsed))
}

/// Fetch the raw JSON report from the gateway listening on `path`.
pub fn fetch(path: &Path) -> Result<(String, StatsReport), ClientError> {
    ask(path, &Request::Stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::{CounterReport, SnapshotReport};
    use std::sync::atomic::AtomicU64;

    fn temp_socket(name: &str) -> PathBuf {
        std::env::temp_dir()
            .join(format!("portico-admin-{}-{name}", std::process::id()))
            .join("nested")
            .join("portico.sock")
    }

    fn report(generation: u64) -> StatsReport {
        StatsReport {
            pid: std::process::id(),
            uptime_ms: 1,
            config: "test.toml".into(),
            snapshot: SnapshotReport {
                generation,
                age_ms: 0,
            },
            total: CounterReport::default(),
            workers: Vec::new(),
            ports: Vec::new(),
            services: Vec::new(),
            snat: Vec::new(),
            control_plane: Default::default(),
            neighbours: Default::default(),
        }
    }

    #[test]
    fn serves_fresh_reports_and_removes_its_socket() {
        let path = temp_socket("serve");
        let generation = Arc::new(AtomicU64::new(1));
        let server = {
            let generation = Arc::clone(&generation);
            AdminServer::start(&path, move |request| match request {
                Request::Stats => {
                    serde_json::to_string(&report(generation.fetch_add(1, Ordering::Relaxed)))
                        .map_err(|e| e.to_string())
                }
                other => Err(format!("not here: {other:?}")),
            })
            .expect("starts")
        };
        let (raw, first) = fetch(&path).expect("first report");
        assert!(raw.ends_with('\n'));
        let (_, second) = fetch(&path).expect("second report");
        assert_eq!(first.snapshot.generation, 1);
        assert_eq!(second.snapshot.generation, 2, "built per connection");
        // A client that sends nothing still gets the counters.
        let mut raw = String::new();
        UnixStream::connect(&path)
            .expect("connects")
            .read_to_string(&mut raw)
            .expect("reads");
        let third: StatsReport = serde_json::from_str(&raw).expect("stats");
        assert_eq!(third.snapshot.generation, 3);
        // Requests the handler refuses, and garbage, come back as one-line
        // errors.
        let refused = ask::<StatsReport>(
            &path,
            &Request::Simulate {
                flow: "tcp 1.2.3.4:5 -> 5.6.7.8:80".into(),
            },
        )
        .unwrap_err();
        assert!(
            matches!(&refused, ClientError::Refused(m) if m.starts_with("not here")),
            "{refused}"
        );
        let mut s = UnixStream::connect(&path).expect("connects");
        s.write_all(b"{not json\n").expect("writes");
        let mut raw = String::new();
        s.read_to_string(&mut raw).expect("reads");
        assert!(raw.starts_with("{\"error\":\"bad request"), "{raw}");
        assert!(
            matches!(
                AdminServer::start(&path, |_| Ok(String::new())),
                Err(AdminError::InUse { .. })
            ),
            "a live socket is not taken over"
        );
        server.stop();
        assert!(!path.exists(), "socket removed at stop");
        assert!(matches!(fetch(&path), Err(ClientError::NotRunning { .. })));
        let _ = std::fs::remove_dir_all(path.parent().and_then(Path::parent).unwrap_or(&path));
    }

    #[test]
    fn a_stale_socket_is_replaced_and_other_files_are_kept() {
        let path = temp_socket("stale");
        std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
        drop(UnixListener::bind(&path).expect("stale socket"));
        assert!(path.exists());
        assert!(
            matches!(fetch(&path), Err(ClientError::NotRunning { .. })),
            "nobody listens on a stale socket"
        );
        let server = AdminServer::start(&path, |_| {
            serde_json::to_string(&report(7)).map_err(|e| e.to_string())
        })
        .expect("replaces stale socket");
        assert_eq!(fetch(&path).expect("report").1.snapshot.generation, 7);
        drop(server);
        assert!(!path.exists());

        std::fs::write(&path, b"not a socket").expect("regular file");
        assert!(matches!(
            AdminServer::start(&path, |_| Ok(String::new())),
            Err(AdminError::NotASocket { .. })
        ));
        assert!(path.exists(), "a regular file is never removed");
        let _ = std::fs::remove_dir_all(path.parent().and_then(Path::parent).unwrap_or(&path));
    }
}
