//! The HTTP side of the Prometheus endpoint: a std thread accepting
//! connections, one request head read and answered per connection.

use super::super::StatsReport;
use super::{CONTENT_TYPE, MetricsError, encode_report};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long the accept loop sleeps when no client is waiting (also bounds
/// how long stopping the server takes).
const ACCEPT_IDLE_MS: u64 = 50;
/// A client that does not send its request or read its answer within this
/// time is dropped.
const CLIENT_TIMEOUT_MS: u64 = 2000;
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
        report: impl Fn() -> StatsReport + Send + 'static,
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
                .spawn(move || serve(&listener, &stop, &report))
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

fn serve(listener: &TcpListener, stop: &AtomicBool, report: &dyn Fn() -> StatsReport) {
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                if let Err(e) = answer(stream, report) {
                    tracing::debug!(error = %e, "metrics client went away");
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(ACCEPT_IDLE_MS));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::warn!(error = %e, "metrics accept failed");
                std::thread::sleep(Duration::from_millis(ACCEPT_IDLE_MS));
            }
        }
    }
}

/// Read the request head (up to the blank line) and answer it.
fn answer(mut stream: TcpStream, report: &dyn Fn() -> StatsReport) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    let timeout = Some(Duration::from_millis(CLIENT_TIMEOUT_MS));
    stream.set_read_timeout(timeout)?;
    stream.set_write_timeout(timeout)?;
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST_BYTES {
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
    stream.write_all(response.as_bytes())?;
    stream.flush()
}
