//! The client side of the admin socket: `portico stats`, `services`,
//! `flows` and `simulate --live` send one request and read one answer.

use super::super::StatsReport;
use super::super::protocol::{ErrorAnswer, Request};
use super::{CLIENT_ANSWER_TIMEOUT_MS, CLIENT_TIMEOUT_MS};
use serde::de::DeserializeOwned;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

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
    match stream.read_to_string(&mut raw) {
        Ok(_) => {}
        // The server answered and closed before reading all we sent (a
        // busy refusal): the answer line is there.
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset && raw.ends_with('\n') => {}
        Err(e) => return Err(io_err(e)),
    }
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
