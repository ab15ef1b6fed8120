//! etcd over its HTTP/JSON gateway: waiting for health, and the v3 range
//! and compaction calls the harness makes (plain HTTP/1.0 on 127.0.0.1).

use super::daemon::Daemon;
use super::{KubeClusterError, READY_TIMEOUT};
use std::io;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Wait until etcd (on client port `port`) reports itself healthy, or it
/// exits, or [`READY_TIMEOUT`] passes.
pub(super) async fn wait_etcd_healthy(
    etcd: &mut Daemon,
    port: u16,
) -> Result<(), KubeClusterError> {
    let started = Instant::now();
    let mut last_error = String::from("not polled yet");
    while started.elapsed() < READY_TIMEOUT {
        if let Some(exit) = etcd.exited() {
            last_error = exit;
            break;
        }
        match http_request(port, "GET", "/health", "").await {
            Ok(body) if body.contains("\"true\"") => return Ok(()),
            Ok(body) => last_error = body,
            Err(e) => last_error = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(KubeClusterError::NotReady {
        what: "etcd",
        waited_ms: started.elapsed().as_millis(),
        last_error,
        log_tail: etcd.log_tail(),
    })
}

/// POST `body` to etcd's `path` (`/v3/kv/range`, `/v3/kv/compaction`); its
/// JSON answer, an error when etcd reports one.
pub(super) async fn etcd_post(
    port: u16,
    path: &str,
    body: &str,
) -> Result<serde_json::Value, KubeClusterError> {
    let what = if path.ends_with("compaction") {
        "compaction"
    } else {
        "range"
    };
    let text =
        http_request(port, "POST", path, body)
            .await
            .map_err(|e| KubeClusterError::Etcd {
                what,
                detail: e.to_string(),
            })?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| KubeClusterError::Etcd {
            what,
            detail: format!("{e}: {text}"),
        })?;
    if value.get("error").is_some() || value.get("code").is_some() {
        return Err(KubeClusterError::Etcd { what, detail: text });
    }
    Ok(value)
}

/// One HTTP/1.0 request to 127.0.0.1:`port` (so the answer is never
/// chunked) with a 10 s bound; the body of a 2xx answer.
async fn http_request(port: u16, method: &str, path: &str, body: &str) -> io::Result<String> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        let request = format!(
            "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        Ok::<_, io::Error>(String::from_utf8_lossy(&response).into_owned())
    };
    let response = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no answer in 10 s"))??;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| io::Error::other(format!("not an HTTP response: {response}")))?;
    let ok = head
        .split_whitespace()
        .nth(1)
        .is_some_and(|code| code.starts_with('2'));
    if ok {
        Ok(body.to_string())
    } else {
        Err(io::Error::other(format!("{head}\n{body}")))
    }
}
