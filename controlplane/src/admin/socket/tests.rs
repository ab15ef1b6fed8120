use super::*;
use crate::admin::{CounterReport, SnapshotReport, StatsReport};
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
        announcements: Default::default(),
        bgp: Default::default(),
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

/// Every wait in these tests: long enough for a loaded CI machine, and
/// a hang fails the test instead of stalling it.
const BOUND: Duration = Duration::from_secs(10);

/// One request with reads bounded by [`BOUND`]; the raw answer.
fn ask_bounded(path: &Path, request: &Request) -> io::Result<String> {
    let mut s = UnixStream::connect(path)?;
    s.set_read_timeout(Some(BOUND))?;
    let mut line = serde_json::to_string(request).map_err(io::Error::other)?;
    line.push('\n');
    s.write_all(line.as_bytes())?;
    s.shutdown(std::net::Shutdown::Write)?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    Ok(raw)
}

/// The stats, asking again while the server is busy, for at most
/// [`BOUND`].
fn stats_when_free(path: &Path) -> StatsReport {
    let start = Instant::now();
    loop {
        match fetch(path) {
            Ok((_, r)) => return r,
            Err(ClientError::Refused(m)) if m.contains("busy") && start.elapsed() < BOUND => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("stats: {e}"),
        }
    }
}

fn stats_json(generation: u64) -> Result<String, String> {
    serde_json::to_string(&report(generation)).map_err(|e| e.to_string())
}

fn flows_request() -> Request {
    Request::Flows(crate::admin::FlowsQuery::default())
}

/// A server whose flows requests block until released (each announces
/// itself on `entered` first); stats answer at once.
fn blocking_server(
    name: &str,
    limits: AdminLimits,
) -> (
    PathBuf,
    AdminServer,
    std::sync::mpsc::Receiver<()>,
    std::sync::mpsc::Sender<()>,
) {
    let path = temp_socket(name);
    let (entered_tx, entered) = std::sync::mpsc::channel();
    let (release, release_rx) = std::sync::mpsc::channel::<()>();
    let entered_tx = std::sync::Mutex::new(entered_tx);
    let release_rx = std::sync::Mutex::new(release_rx);
    let server =
        AdminServer::start_with(
            &path,
            limits,
            AdminAccess::default(),
            move |request| match request {
                Request::Flows(_) => {
                    let _ = entered_tx.lock().map(|tx| tx.send(()));
                    // Released by a message, or by the test dropping the
                    // sender (it ended); never waits past the bound.
                    let _ = release_rx.lock().map(|rx| rx.recv_timeout(BOUND * 6));
                    Ok("{\"flows\":[]}".into())
                }
                _ => stats_json(1),
            },
        )
        .expect("starts");
    (path, server, entered, release)
}

fn remove_temp(path: &Path) {
    let _ = std::fs::remove_dir_all(path.parent().and_then(Path::parent).unwrap_or(path));
}

#[test]
fn a_long_request_or_a_silent_client_does_not_delay_stats() {
    let limits = AdminLimits {
        // A silent client holds its connection as long as the test.
        request_wait_ms: 60_000,
        ..AdminLimits::default()
    };
    let (path, server, entered, release) = blocking_server("concurrent", limits);
    let silent = UnixStream::connect(&path).expect("silent client connects");
    let listing = {
        let path = path.clone();
        std::thread::spawn(move || ask_bounded(&path, &flows_request()))
    };
    entered
        .recv_timeout(BOUND)
        .expect("the listing is being served");
    // Served one at a time, this would wait for the listing (released
    // only below) and the read would time out.
    let raw = ask_bounded(&path, &Request::Stats).expect("stats answered meanwhile");
    let stats: StatsReport = serde_json::from_str(&raw).expect("a stats report");
    assert_eq!(stats.snapshot.generation, 1);
    release.send(()).expect("listing still waiting");
    let raw = listing
        .join()
        .expect("listing thread")
        .expect("listing answered");
    assert_eq!(raw, "{\"flows\":[]}\n");
    drop(silent);
    server.stop();
    remove_temp(&path);
}

#[test]
fn concurrent_requests_each_get_their_own_answer() {
    const CLIENTS: usize = 4;
    let path = temp_socket("each");
    // Every handler waits until all are in it at once: proof that they
    // run concurrently (bounded, so a serial server fails, not hangs).
    let inside = Arc::new((std::sync::Mutex::new(0usize), std::sync::Condvar::new()));
    let server = {
        let inside = Arc::clone(&inside);
        AdminServer::start_with(
            &path,
            AdminLimits {
                max_connections: CLIENTS,
                ..AdminLimits::default()
            },
            AdminAccess::default(),
            move |request| {
                let Request::Simulate { flow } = request else {
                    return Err("simulate only".into());
                };
                let (count, all_in) = &*inside;
                let mut n = count.lock().map_err(|e| e.to_string())?;
                *n += 1;
                all_in.notify_all();
                let (n, _) = all_in
                    .wait_timeout_while(n, BOUND, |n| *n < CLIENTS)
                    .map_err(|e| e.to_string())?;
                Ok(serde_json::json!({ "flow": flow, "together": *n }).to_string())
            },
        )
        .expect("starts")
    };
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let path = path.clone();
            std::thread::spawn(move || {
                let flow = format!("tcp 192.0.2.{i}:4000 -> 203.0.113.1:80");
                let answer = ask_bounded(&path, &Request::Simulate { flow: flow.clone() });
                (flow, answer)
            })
        })
        .collect();
    for c in clients {
        let (flow, answer) = c.join().expect("client thread");
        let answer: serde_json::Value =
            serde_json::from_str(&answer.expect("answered")).expect("json");
        assert_eq!(answer["flow"], flow.as_str(), "its own answer");
        assert_eq!(answer["together"], CLIENTS, "all served at once");
    }
    server.stop();
    remove_temp(&path);
}

#[test]
fn beyond_the_limit_a_client_is_told_the_socket_is_busy() {
    let limits = AdminLimits {
        max_connections: 2,
        ..AdminLimits::default()
    };
    let (path, server, entered, release) = blocking_server("busy", limits);
    let listings: Vec<_> = (0..2)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || ask_bounded(&path, &flows_request()))
        })
        .collect();
    for _ in 0..2 {
        entered.recv_timeout(BOUND).expect("both listings served");
    }
    let busy = ask::<StatsReport>(&path, &Request::Stats).unwrap_err();
    assert!(
        matches!(&busy, ClientError::Refused(m) if m.starts_with("admin socket busy: 2 requests in progress")),
        "{busy}"
    );
    // A client that sends nothing gets the same one line, at once.
    let mut raw = String::new();
    let mut s = UnixStream::connect(&path).expect("connects");
    s.set_read_timeout(Some(BOUND)).expect("timeout");
    s.read_to_string(&mut raw).expect("busy line, then closed");
    let error: ErrorAnswer = serde_json::from_str(&raw).expect("an error answer");
    assert!(error.error.contains("busy"), "{raw}");
    for _ in 0..2 {
        release.send(()).expect("listing waiting");
    }
    for l in listings {
        assert!(
            l.join()
                .expect("thread")
                .expect("answered")
                .contains("flows")
        );
    }
    assert_eq!(stats_when_free(&path).snapshot.generation, 1);
    server.stop();
    remove_temp(&path);
}

#[test]
fn silent_trickling_and_non_reading_clients_lose_their_slot() {
    let path = temp_socket("slots");
    let server = AdminServer::start_with(
        &path,
        AdminLimits {
            max_connections: 1,
            request_wait_ms: 100,
            request_timeout_ms: 300,
            answer_timeout_ms: 300,
        },
        AdminAccess::default(),
        |request| match request {
            // Far more than the socket buffers hold.
            Request::Simulate { .. } => Ok(format!("\"{}\"", "x".repeat(32 << 20))),
            _ => stats_json(5),
        },
    )
    .expect("starts");
    // Says nothing, never reads: answered with the stats after the
    // wait, which fit in the socket buffer; the slot is free again.
    let mut silent = UnixStream::connect(&path).expect("connects");
    assert_eq!(stats_when_free(&path).snapshot.generation, 5);
    silent.set_read_timeout(Some(BOUND)).expect("timeout");
    let mut raw = String::new();
    silent.read_to_string(&mut raw).expect("answered, closed");
    let stats: StatsReport = serde_json::from_str(&raw).expect("stats");
    assert_eq!(stats.snapshot.generation, 5);
    // Sends half a request and stops: dropped without an answer.
    let mut trickle = UnixStream::connect(&path).expect("connects");
    trickle.write_all(b"{\"request\":").expect("writes");
    trickle.set_read_timeout(Some(BOUND)).expect("timeout");
    let mut raw = String::new();
    trickle
        .read_to_string(&mut raw)
        .expect("closed by the server");
    assert_eq!(raw, "", "no answer to half a request");
    assert_eq!(stats_when_free(&path).snapshot.generation, 5);
    // Asks for a big answer and does not read it: dropped at the
    // answer deadline.
    let mut greedy = UnixStream::connect(&path).expect("connects");
    greedy
        .write_all(b"{\"request\":\"simulate\",\"flow\":\"x\"}\n")
        .expect("writes");
    assert_eq!(stats_when_free(&path).snapshot.generation, 5);
    let mut taken = Vec::new();
    greedy.set_read_timeout(Some(BOUND)).expect("timeout");
    let _ = greedy.read_to_end(&mut taken);
    assert!(taken.len() < 32 << 20, "the answer was cut off");
    server.stop();
    remove_temp(&path);
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
