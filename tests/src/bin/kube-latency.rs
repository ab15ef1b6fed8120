//! End-to-end latency of the Kubernetes control plane: from an
//! EndpointSlice write on a real API server (the `kube_cluster` harness:
//! etcd + kube-apiserver v1.20.2 on 127.0.0.1) to the new snapshot
//! generation being live in the Publisher the dataplane workers read.
//!
//! `kube-latency [--writes N] [--debounce-ms MS] [--services K]`: one
//! LoadBalancer Service (plus `K - 1` others, so the builder has something
//! to skip), then N replace calls of its EndpointSlice alternating between
//! two endpoint sets; each is timed from just before the API call to the
//! first published snapshot that serves the new set. Prints median, p90,
//! p99 and max, plus the source's own figures (watch arrival to live, build
//! time). Bounded: every wait gives up after 30 s.

use anyhow::{Context, Result, bail};
use dataplane::flow::Proto;
use dataplane::snapshot::Publisher;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, PostParams};
use portico_tests::kube_cluster::{KubeCluster, KubeClusterOptions};
use portico_tests::kube_source_rig;
use serde_json::json;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

const NS: &str = "default";
const WAIT: Duration = Duration::from_secs(30);

struct Args {
    writes: usize,
    debounce_ms: u64,
    services: usize,
}

fn args() -> Result<Args> {
    let mut a = Args {
        writes: 50,
        debounce_ms: 20,
        services: 100,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--writes" => a.writes = value.parse()?,
            "--debounce-ms" => a.debounce_ms = value.parse()?,
            "--services" => a.services = value.parse::<usize>()?.max(1),
            _ => bail!("unknown flag {flag}"),
        }
    }
    Ok(a)
}

fn service(name: &str) -> Result<Service> {
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": NS },
        "spec": {
            "type": "LoadBalancer",
            "ports": [{ "name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP" }],
        },
    }))?)
}

fn slice(service: &str, name: &str, addresses: &[Ipv4Addr]) -> Result<EndpointSlice> {
    let endpoints: Vec<serde_json::Value> = addresses
        .iter()
        .map(|a| json!({ "addresses": [a.to_string()], "conditions": { "ready": true } }))
        .collect();
    Ok(serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": { "kubernetes.io/service-name": service },
        },
        "addressType": "IPv4",
        "ports": [{ "name": "http", "port": 8080, "protocol": "TCP" }],
        "endpoints": endpoints,
    }))?)
}

/// The backend addresses served on `vip:80`, sorted.
fn served(publisher: &Publisher, vip: Ipv4Addr) -> Option<Vec<SocketAddrV4>> {
    let snap = publisher.current();
    let listener = snap.listener(Proto::Tcp, vip, 80)?;
    let mut v: Vec<SocketAddrV4> = snap
        .backends
        .iter()
        .flatten()
        .filter(|b| b.service == listener.service)
        .filter_map(|b| match b.addr {
            std::net::SocketAddr::V4(a) => Some(a),
            std::net::SocketAddr::V6(_) => None,
        })
        .collect();
    v.sort();
    Some(v)
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + WAIT;
    while !f() {
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    Ok(())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or(f64::NAN)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args = args()?;
    // Wide enough for one NodePort per LoadBalancer Service at 10k+ (the
    // default 30000-32767 holds 2,768).
    let cluster = KubeCluster::start(KubeClusterOptions {
        node_port_range: Some((20_000, 59_999)),
        ..KubeClusterOptions::default()
    })
    .await?;
    let plan = kube_source_rig::plan(
        cluster.kubeconfig_path(),
        args.debounce_ms,
        "latency",
        r#"["192.0.2.100-192.0.2.250", "198.51.100.0/24", "203.0.113.0/24"]"#,
    )?;
    let (source, publisher) = kube_source_rig::start(&plan)?;

    let client = cluster.client();
    let services: Api<Service> = Api::namespaced(client.clone(), NS);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), NS);
    for i in 0..args.services {
        let name = format!("svc-{i}");
        services
            .create(&PostParams::default(), &service(&name)?)
            .await?;
        let backends = [Ipv4Addr::new(
            10,
            1,
            (i / 200) as u8 + 1,
            (i % 200) as u8 + 10,
        )];
        slices
            .create(
                &PostParams::default(),
                &slice(&name, &format!("{name}-1"), &backends)?,
            )
            .await?;
    }
    let target = "svc-0";
    let vip = Ipv4Addr::new(192, 0, 2, 100);
    let sets = [
        vec![Ipv4Addr::new(10, 9, 0, 1), Ipv4Addr::new(10, 9, 0, 2)],
        vec![Ipv4Addr::new(10, 9, 0, 1), Ipv4Addr::new(10, 9, 0, 3)],
    ];
    wait_for("the first service", || served(&publisher, vip).is_some())?;

    let mut samples_ms = Vec::with_capacity(args.writes);
    for n in 0..args.writes {
        let set = &sets[n % 2];
        let want: Vec<SocketAddrV4> = set.iter().map(|a| SocketAddrV4::new(*a, 8080)).collect();
        let mut s = slice(target, &format!("{target}-1"), set)?;
        s.metadata.resource_version = slices
            .get(&format!("{target}-1"))
            .await?
            .metadata
            .resource_version;
        let t0 = Instant::now();
        slices
            .replace(&format!("{target}-1"), &PostParams::default(), &s)
            .await?;
        let publisher = publisher.clone();
        let want2 = want.clone();
        tokio::task::spawn_blocking(move || {
            wait_for("the new endpoints", || {
                served(&publisher, vip).as_ref() == Some(&want2)
            })
        })
        .await??;
        samples_ms.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    let report = source.stats().report();
    source.stop();

    samples_ms.sort_by(f64::total_cmp);
    let recent: Vec<_> = report
        .recent
        .iter()
        .rev()
        .take(args.writes)
        .copied()
        .collect();
    let mut arrival_ms: Vec<f64> = recent
        .iter()
        .map(|t| t.event_to_live_us as f64 / 1000.0)
        .collect();
    arrival_ms.sort_by(f64::total_cmp);
    let mut build_ms: Vec<f64> = recent.iter().map(|t| t.build_us as f64 / 1000.0).collect();
    build_ms.sort_by(f64::total_cmp);
    println!(
        "{} EndpointSlice writes, {} services, debounce {} ms",
        args.writes, args.services, args.debounce_ms
    );
    for (what, v) in [
        ("write -> live (client clock)", &samples_ms),
        ("watch event -> live (source)", &arrival_ms),
        ("snapshot build", &build_ms),
    ] {
        println!(
            "{what:30} median {:7.2} ms  p90 {:7.2} ms  p99 {:7.2} ms  max {:7.2} ms",
            percentile(v, 0.5),
            percentile(v, 0.9),
            percentile(v, 0.99),
            v.last().copied().unwrap_or(f64::NAN)
        );
    }
    Ok(())
}
