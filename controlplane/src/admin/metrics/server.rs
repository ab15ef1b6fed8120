//! The HTTP side of the Prometheus endpoint: a std thread accepting
//! connections, each served on a thread of its own (one request head read
//! and answered, then closed).
//!
//! Invariants:
//! * at most [`MAX_CONNECTIONS`] scrapes are served at once; one more is
//!   answered `503` at once and closed, never queued, so a slow or stuck
//!   client never delays another scrape;
//! * a client holds its slot for at most [`REQUEST_TIMEOUT_MS`] to send its
//!   whole request head (a byte at a time does not extend it) plus
//!   [`ANSWER_TIMEOUT_MS`] to take the answer;
//! * stopping the server ends the connections in progress and joins every
//!   thread it started.

use super::super::StatsReport;
use super::super::connections::Connections;
use super::{CONTENT_TYPE, MetricsError, encode_report};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the accept loop sleeps when no client is waiting (also bounds
/// how long stopping the server takes).
const ACCEPT_IDLE_MS: u64 = 50;
/// The whole request head must arrive within this time of the accept.
pub const REQUEST_TIMEOUT_MS: u64 = 2000;
/// The whole answer must be taken within this time.
pub const ANSWER_TIMEOUT_MS: u64 = 5000;
/// Scrapes served at once: Prometheus servers and a few curls.
pub const MAX_CONNECTIONS: usize = 16;
/// Longest request head read.
const MAX_REQUEST_BYTES: usize = 8192;

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
        report: impl Fn() -> StatsReport + Send + Sync + 'static,
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
                .spawn(move || serve(&listener, &stop, Arc::new(report)))
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

/// The report function, shared by the connection threads.
type Report = dyn Fn() -> StatsReport + Send + Sync;

fn serve(listener: &TcpListener, stop: &AtomicBool, report: Arc<Report>) {
    let mut connections: Connections<TcpStream> =
        Connections::new(MAX_CONNECTIONS, "portico-metrics-conn");
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                connections.reap();
                if connections.full() {
                    tracing::debug!(MAX_CONNECTIONS, "metrics endpoint busy, refusing");
                    busy(stream);
                    continue;
                }
                let report = Arc::clone(&report);
                let spawned = connections.spawn(stream, move |stream| {
                    if let Err(e) = answer(stream, &*report) {
                        tracing::debug!(error = %e, "metrics client went away");
                    }
                });
                if let Err((stream, e)) = spawned {
                    tracing::warn!(error = %e, "cannot start a metrics connection thread");
                    busy(stream);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                connections.reap();
                std::thread::sleep(Duration::from_millis(ACCEPT_IDLE_MS));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::warn!(error = %e, "metrics accept failed");
                std::thread::sleep(Duration::from_millis(ACCEPT_IDLE_MS));
            }
        }
    }
    connections.close_all();
}

/// Answer `503` without reading the request, in at most 100 ms.
fn busy(mut stream: TcpStream) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
    let body = "too many scrapes in progress; try again\n";
    let _ = write!(
        stream,
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

/// Read the request head (up to the blank line) and answer it.
fn answer(mut stream: &TcpStream, report: &Report) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    let accepted = Instant::now();
    let request_deadline = Duration::from_millis(REQUEST_TIMEOUT_MS);
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST_BYTES {
        let left = request_deadline.saturating_sub(accepted.elapsed());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the request head did not arrive in time",
            ));
        }
        stream.set_read_timeout(Some(left))?;
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
    write_within(
        stream,
        response.as_bytes(),
        Duration::from_millis(ANSWER_TIMEOUT_MS),
    )
}

/// Write all of `bytes` within `deadline`, however slowly the client reads.
fn write_within(mut stream: &TcpStream, bytes: &[u8], deadline: Duration) -> io::Result<()> {
    let started = Instant::now();
    let mut rest = bytes;
    while !rest.is_empty() {
        let left = deadline.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client did not take the answer in time",
            ));
        }
        stream.set_write_timeout(Some(left))?;
        match stream.write(rest) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => rest = rest.get(n..).unwrap_or_default(),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    stream.flush()
}
