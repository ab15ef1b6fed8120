//! Throughput smoke through `portico run` on veth (af_packet): wrk (or,
//! without wrk, a bounded loop of curl batches) against the VIP for a few
//! seconds, one backend per core-ish. Prints requests per second and the
//! gateway's CPU use (from `/proc/PID/stat`); asserts only that every
//! request succeeded (no timing is asserted — a loaded CI machine is slow).
//!
//! Figures: bench/RESULTS.md, "af_packet end-to-end smoke (issue 3)". Run
//! it alone, optimised, with its output:
//! `cargo test --release -p portico-tests --test throughput -- --nocapture`.

mod common;

use common::{curl, gateway, number, stats, topology};
use portico::demo::topology::{ServiceOptions, VIP, clock_ticks_per_s};
use portico_tests::{have, skip};
use std::time::{Duration, Instant};

const SECONDS: u64 = 5;

/// One load run: what was used, requests, errors, the tool's output.
struct Run {
    tool: String,
    requests: u64,
    errors: u64,
    detail: String,
}

fn wrk(t: &portico::demo::topology::Topology, url: &str, close: bool) -> Run {
    let duration = format!("{SECONDS}s");
    let mut args = vec!["-t", "2", "-c", "32", "-d", &duration, "--timeout", "2s"];
    if close {
        args.extend(["-H", "Connection: close"]);
    }
    args.push(url);
    let out = t
        .client
        .spawn("wrk", &args)
        .expect("start wrk")
        .wait_output(Duration::from_secs(SECONDS + 60))
        .expect("wrk finishes");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "wrk: {text}");
    // "12345 requests in 5.00s, ..." and, on errors, "Socket errors: ..."
    // / "Non-2xx or 3xx responses: N".
    let requests = text
        .lines()
        .find(|l| l.contains(" requests in "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no request count in {text}"));
    let errors = u64::from(text.contains("Socket errors") || text.contains("Non-2xx"));
    Run {
        tool: format!("wrk {}", args[..args.len() - 1].join(" ")),
        requests,
        errors,
        detail: text,
    }
}

fn curl_loop(t: &portico::demo::topology::Topology, url: &str) -> Run {
    let start = Instant::now();
    let (mut requests, mut errors) = (0u64, 0u64);
    while start.elapsed() < Duration::from_secs(SECONDS) {
        let bodies = curl(t, url, 50, true);
        requests += bodies.len() as u64;
        errors += bodies.iter().filter(|b| b.is_none()).count() as u64;
    }
    Run {
        tool: "curl batches of 50, one connection per request".to_owned(),
        requests,
        errors,
        detail: String::new(),
    }
}

#[test]
fn throughput_smoke_through_the_vip() {
    let Some(t) = topology("throughput::throughput_smoke_through_the_vip", 3) else {
        return;
    };
    let gw = gateway(&t, &ServiceOptions::all(&t));
    let url = format!("http://{VIP}/");
    let modes: &[Option<bool>] = if have("wrk") {
        &[Some(false), Some(true)]
    } else {
        skip(
            "throughput_smoke_through_the_vip with wrk",
            "wrk is missing (tests/run.sh installs it); measuring a curl loop instead",
        );
        &[None]
    };
    for mode in modes {
        let ticks_before = gw.cpu_ticks().expect("gateway CPU time");
        let before = stats(&gw);
        let start = Instant::now();
        let run = match mode {
            Some(close) => wrk(&t, &url, *close),
            None => curl_loop(&t, &url),
        };
        let wall = start.elapsed().as_secs_f64();
        let ticks = gw.cpu_ticks().expect("gateway CPU time") - ticks_before;
        let cpu_s = ticks as f64 / clock_ticks_per_s() as f64;
        // Let the workers publish their counters.
        std::thread::sleep(Duration::from_millis(500));
        let s = stats(&gw);
        let drops: Vec<String> = s["total"]["drops"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| {
                        let d = v.as_u64()? - before["total"]["drops"][k].as_u64()?;
                        (d > 0).then(|| format!("{k}={d}"))
                    })
                    .collect()
            })
            .unwrap_or_default();
        eprintln!("{}", run.detail);
        eprintln!(
            "throughput smoke ({}, {}): {} requests in {wall:.1} s = {:.0} req/s; \
             gateway CPU {cpu_s:.2} s = {:.0}% of one core (2 workers, adaptive idle); \
             flows created {}; drops [{}]",
            run.tool,
            if cfg!(debug_assertions) {
                "debug build"
            } else {
                "release build"
            },
            run.requests,
            run.requests as f64 / wall,
            cpu_s * 100.0 / wall,
            number(&s, "/total/flows_created") - number(&before, "/total/flows_created"),
            drops.join(" "),
        );
        assert!(run.requests > 0, "{}", run.detail);
        assert_eq!(run.errors, 0, "every request answered: {}", run.detail);
    }
}
