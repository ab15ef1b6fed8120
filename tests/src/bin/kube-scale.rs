//! The Kubernetes control plane at scale, end to end through a real API
//! server (the `kube_cluster` harness: etcd + kube-apiserver v1.20.2 on
//! 127.0.0.1), for bench/RESULTS.md "Kubernetes at scale (issue 18)".
//!
//! `kube-scale [--services N] [--endpoints E] [--writes W] [--burst B]
//! [--debounce-ms MS] [--node-ports allocate|none] [--create-concurrency C]`:
//!
//! 1. creates N LoadBalancer Services with one EndpointSlice of E ready
//!    endpoints each (the API server runs with a NodePort range wide enough
//!    for them, or the Services opt out of node ports with
//!    `spec.allocateLoadBalancerNodePorts: false` under the 1.20 alpha gate);
//! 2. **cold start**: runs itself as a child process (`--child`), which
//!    starts the Kubernetes source as `portico run` does (client, Lease,
//!    watches, IPAM, snapshot builder, publisher) with the Services already
//!    in the cluster and empty statuses, and reports the time from its
//!    `main` to the first published snapshot serving all N VIPs, its peak
//!    RSS (VmHWM), and the time until it has written all N
//!    `status.loadBalancer.ingress` with the number of PATCH requests and
//!    their rate; the parent then checks the statuses on the API server;
//! 3. **warm start**: the same child again, now with the statuses present
//!    (IPAM restores every address from them, nothing to write);
//! 4. **write -> live** in this process: W single EndpointSlice changes one
//!    after the other, then a burst of B changes to B different Services
//!    sent with 32 requests in flight; each timed from just before its API
//!    call to the first published snapshot that serves it.
//!
//! Bounded: every wait gives up after [`WAIT`] (a child is killed by PID).

use anyhow::{Context, Result, bail};
use dataplane::flow::Proto;
use dataplane::snapshot::Publisher;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use portico::source::kube::KubeSource;
use portico::source::kube::status::ingress_addresses;
use portico_tests::kube_cluster::{KubeCluster, KubeClusterOptions, LB_NODE_PORT_OPT_OUT_GATE};
use portico_tests::kube_source_rig;
use serde_json::json;
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

const NS: &str = "default";
/// Upper bound of every wait (creating 20,000 Services on a shared 2-core
/// machine is the slowest step).
const WAIT: Duration = Duration::from_secs(900);
/// NodePorts for the `allocate` mode: 40,000 of them.
const NODE_PORT_RANGE: (u16, u16) = (20_000, 59_999);
/// Requests in flight during the burst.
const BURST_IN_FLIGHT: usize = 32;

#[derive(Clone, Debug)]
struct Args {
    services: usize,
    endpoints: usize,
    writes: usize,
    burst: usize,
    debounce_ms: u64,
    node_ports: bool,
    create_concurrency: usize,
}

fn args(mut it: impl Iterator<Item = String>) -> Result<Args> {
    let mut a = Args {
        services: 1_000,
        endpoints: 10,
        writes: 30,
        burst: 1_000,
        debounce_ms: 0,
        node_ports: true,
        create_concurrency: 16,
    };
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--services" => a.services = value.parse::<usize>()?.max(2),
            "--endpoints" => a.endpoints = value.parse::<usize>()?.clamp(1, 250),
            "--writes" => a.writes = value.parse()?,
            "--burst" => a.burst = value.parse()?,
            "--debounce-ms" => a.debounce_ms = value.parse()?,
            "--create-concurrency" => a.create_concurrency = value.parse::<usize>()?.max(1),
            "--node-ports" => {
                a.node_ports = match value.as_str() {
                    "allocate" => true,
                    "none" => false,
                    _ => bail!("--node-ports allocate|none"),
                }
            }
            _ => bail!("unknown flag {flag}"),
        }
    }
    a.burst = a.burst.min(a.services - 1);
    Ok(a)
}

fn service(name: &str, node_ports: bool) -> Result<Service> {
    let mut spec = json!({
        "type": "LoadBalancer",
        "ports": [{ "name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP" }],
    });
    if !node_ports {
        spec["allocateLoadBalancerNodePorts"] = json!(false);
    }
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": NS },
        "spec": spec,
    }))?)
}

/// `count` endpoint addresses of Service `i`, the first one `first`.
fn endpoints_json(first: Ipv4Addr, count: usize) -> Vec<serde_json::Value> {
    (0..count as u32)
        .map(|k| {
            let a = Ipv4Addr::from(u32::from(first) + k);
            json!({ "addresses": [a.to_string()], "conditions": { "ready": true } })
        })
        .collect()
}

/// The first backend address of Service `i` at creation: 10.x.y.z, 16
/// addresses apart (≤ 250 endpoints fit below the next Service's).
fn base_address(i: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 64, 0, 0)) + (i as u32) * 256)
}

/// The marker a changed slice of Service `i` carries first, generation `g`.
fn marker(i: usize, g: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(100, 64, 0, 0)) + (i as u32) * 4 + g % 4)
}

fn slice(service: &str, first: Ipv4Addr, count: usize) -> Result<EndpointSlice> {
    Ok(serde_json::from_value(json!({
        "metadata": {
            "name": format!("{service}-1"),
            "namespace": NS,
            "labels": { "kubernetes.io/service-name": service },
        },
        "addressType": "IPv4",
        "ports": [{ "name": "http", "port": 8080, "protocol": "TCP" }],
        "endpoints": endpoints_json(first, count),
    }))?)
}

/// The source as `portico run` starts it, publishing into a fresh
/// Publisher.
fn start_source(kubeconfig: &Path, debounce_ms: u64) -> Result<(KubeSource, Publisher)> {
    let plan = kube_source_rig::plan(
        kubeconfig,
        debounce_ms,
        "kube-scale",
        r#"["100.96.0.0/16"]"#,
    )?;
    Ok(kube_source_rig::start(&plan)?)
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + WAIT;
    while !f() {
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(())
}

/// `VmHWM` / `VmRSS` of this process, in KiB.
fn memory_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// The child: one start of the source; prints one JSON line.
fn child(kubeconfig: &Path, services: usize, debounce_ms: u64, cold: bool) -> Result<()> {
    let t0 = Instant::now();
    let ms = |t: Instant| t.duration_since(t0).as_secs_f64() * 1000.0;
    let (source, publisher) = start_source(kubeconfig, debounce_ms)?;
    let stats = source.stats();
    let mut lists_at = None;
    wait_for("every VIP live", || {
        if lists_at.is_none() && stats.report().lists >= 2 {
            lists_at = Some(Instant::now());
        }
        publisher.current().listeners.len() >= services
    })?;
    // The timing is recorded right after the publish.
    wait_for("the first generation's timing", || {
        stats.report().generations_published >= 1
    })?;
    let live = Instant::now();
    let rss_live_kib = memory_kib("VmHWM:");
    let report = stats.report();
    let first_build_ms = report
        .recent
        .last()
        .map_or(0.0, |t| t.build_us as f64 / 1000.0);
    // Cold: wait until the leader has written every status; warm: nothing
    // is owed.
    let statuses_done = if cold {
        wait_for("every status written", || {
            stats.report().status_writes >= services as u64
        })?;
        Some(Instant::now())
    } else {
        None
    };
    let report = stats.report();
    let rss_end_kib = memory_kib("VmHWM:");
    source.stop();
    let out = json!({
        "startup_ms": ms(live),
        "lists_ms": lists_at.map(ms),
        "first_build_ms": first_build_ms,
        "peak_rss_kib_at_live": rss_live_kib,
        "peak_rss_kib": rss_end_kib,
        "statuses_done_ms": statuses_done.map(ms),
        "status_writes": report.status_writes,
        "status_write_errors": report.status_write_errors,
        "events_sent": report.events_sent,
        "lists": report.lists,
        "generations": report.generations_published,
    });
    println!("{out}");
    Ok(())
}

/// Run the child and parse its line (killed by PID after [`WAIT`]).
fn run_child(kubeconfig: &Path, a: &Args, cold: bool) -> Result<serde_json::Value> {
    let exe = std::env::current_exe()?;
    let mut child = std::process::Command::new(exe)
        .arg("--child")
        .arg(kubeconfig)
        .arg(a.services.to_string())
        .arg(a.debounce_ms.to_string())
        .arg(if cold { "cold" } else { "warm" })
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let deadline = Instant::now() + WAIT;
    loop {
        if child.try_wait()?.is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the child did not finish in {WAIT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("the child failed: {}", out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().context("no output from the child")?;
    Ok(serde_json::from_str(line)?)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or(f64::NAN)
}

fn summary(v: &mut [f64]) -> String {
    v.sort_by(f64::total_cmp);
    format!(
        "median {:8.2} ms  p99 {:8.2} ms  max {:8.2} ms  (n={})",
        percentile(v, 0.5),
        percentile(v, 0.99),
        v.last().copied().unwrap_or(f64::NAN),
        v.len()
    )
}

/// Whether the snapshot serves `marker` as the first-listed backend
/// address of the Service behind `vip:80` (lookups only: O(endpoints)).
fn serves(publisher: &Publisher, vip: Ipv4Addr, marker: Ipv4Addr) -> bool {
    let snap = publisher.current();
    let Some(listener) = snap.listener(Proto::Tcp, vip, 80) else {
        return false;
    };
    let Some(set) = snap.service(listener.service).and_then(|s| s.active_set()) else {
        return false;
    };
    set.backends
        .iter()
        .filter_map(|id| snap.backend(*id))
        .any(|b| b.addr.ip() == marker)
}

async fn patch_endpoints(
    slices: &Api<EndpointSlice>,
    i: usize,
    first: Ipv4Addr,
    count: usize,
) -> Result<()> {
    let patch = json!({ "endpoints": endpoints_json(first, count) });
    slices
        .patch(
            &format!("svc-{i}-1"),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}

/// A complete paged list; returns the object count.
async fn list_all<K>(api: &Api<K>, page: u32) -> Result<usize>
where
    K: kube::Resource + Clone + k8s_openapi::serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut n = 0;
    let mut params = ListParams::default().limit(page);
    loop {
        let list = api.list(&params).await?;
        n += list.items.len();
        match list.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(n),
        }
    }
}

async fn create_all(client: &kube::Client, a: &Args) -> Result<()> {
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..a.create_concurrency {
        let client = client.clone();
        let a = a.clone();
        tasks.spawn(async move {
            let services: Api<Service> = Api::namespaced(client.clone(), NS);
            let slices: Api<EndpointSlice> = Api::namespaced(client, NS);
            let pp = PostParams::default();
            for i in (k..a.services).step_by(a.create_concurrency) {
                let name = format!("svc-{i}");
                services.create(&pp, &service(&name, a.node_ports)?).await?;
                slices
                    .create(&pp, &slice(&name, base_address(i), a.endpoints)?)
                    .await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let mut argv = std::env::args().skip(1).peekable();
    if argv.peek().map(String::as_str) == Some("--child") {
        let v: Vec<String> = argv.skip(1).collect();
        let [kubeconfig, services, debounce, phase] = v.as_slice() else {
            bail!("--child KUBECONFIG SERVICES DEBOUNCE_MS cold|warm");
        };
        return tokio::task::spawn_blocking({
            let (k, s, d) = (kubeconfig.clone(), services.parse()?, debounce.parse()?);
            let cold = phase == "cold";
            move || child(Path::new(&k), s, d, cold)
        })
        .await?;
    }
    let a = args(argv)?;
    let cluster = KubeCluster::start(KubeClusterOptions {
        node_port_range: a.node_ports.then_some(NODE_PORT_RANGE),
        feature_gates: vec![LB_NODE_PORT_OPT_OUT_GATE.into()],
        ..KubeClusterOptions::default()
    })
    .await?;
    let client = cluster.client();
    println!(
        "kube-scale: {} LoadBalancer Services x {} endpoints, node ports {}, debounce {} ms",
        a.services,
        a.endpoints,
        if a.node_ports { "allocated" } else { "none" },
        a.debounce_ms
    );
    let t = Instant::now();
    create_all(&client, &a).await?;
    let created_s = t.elapsed().as_secs_f64();
    println!(
        "created {} Services + {} EndpointSlices in {created_s:.1} s ({:.0} objects/s)",
        a.services,
        a.services,
        2.0 * a.services as f64 / created_s
    );

    let services: Api<Service> = Api::namespaced(client.clone(), NS);
    // What the API server (and the client's decoding) alone take for the
    // two lists the source makes at start, by page size.
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), NS);
    for page in [500u32, 5_000] {
        let t = Instant::now();
        let n_services = list_all(&services, page).await?;
        let services_ms = t.elapsed().as_secs_f64() * 1000.0;
        let t = Instant::now();
        let n_slices = list_all(&slices, page).await?;
        println!(
            "list alone, pages of {page}: {n_services} Services {services_ms:.0} ms, \
             {n_slices} EndpointSlices {:.0} ms",
            t.elapsed().as_secs_f64() * 1000.0
        );
    }
    let kubeconfig = cluster.kubeconfig_path().to_path_buf();
    for (cold, phase) in [
        (true, "cold (empty statuses)"),
        (false, "warm (statuses present)"),
    ] {
        let r = run_child(&kubeconfig, &a, cold)?;
        println!("start-up {phase}: {r}");
        if let (Some(done), Some(writes)) =
            (r["statuses_done_ms"].as_f64(), r["status_writes"].as_u64())
        {
            let from = r["startup_ms"].as_f64().unwrap_or(0.0);
            println!(
                "  statuses: {writes} PATCHes, all written {done:.0} ms after start \
                 ({:.0} ms after the first snapshot), {:.0} requests/s",
                done - from,
                writes as f64 * 1000.0 / (done - from).max(1.0)
            );
        }
        let list = services.list(&ListParams::default()).await?;
        let with = list
            .items
            .iter()
            .filter(|s| !ingress_addresses(s).is_empty())
            .count();
        println!(
            "  API server: {with} of {} Services have an ingress address",
            list.items.len()
        );
    }

    // write -> live, in this process.
    let vips: HashMap<String, Ipv4Addr> = services
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter_map(|s| {
            let vip = match *ingress_addresses(s).first()? {
                std::net::IpAddr::V4(a) => a,
                std::net::IpAddr::V6(_) => return None,
            };
            Some((s.metadata.name.clone()?, vip))
        })
        .collect();
    let vip = |i: usize| vips.get(&format!("svc-{i}")).copied();
    let (source, publisher) = start_source(&kubeconfig, a.debounce_ms)?;
    let p = publisher.clone();
    let n = a.services;
    tokio::task::spawn_blocking(move || {
        wait_for("every VIP live", || p.current().listeners.len() >= n)
    })
    .await??;
    let vip0 = vip(0).context("svc-0 has no ingress address")?;
    let published_before = source.stats().report().generations_published;
    let mut single = Vec::with_capacity(a.writes);
    for g in 0..a.writes {
        let m = marker(0, g as u32);
        let t0 = Instant::now();
        patch_endpoints(&slices, 0, m, a.endpoints).await?;
        let p = publisher.clone();
        tokio::task::spawn_blocking(move || wait_for("the change", || serves(&p, vip0, m)))
            .await??;
        single.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    let report = source.stats().report();
    let own: Vec<f64> = report
        .recent
        .iter()
        .rev()
        .take((report.generations_published - published_before) as usize)
        .map(|t| t.event_to_live_us as f64 / 1000.0)
        .collect();

    // The burst: Services 1..=B, each changed once.
    let targets: Vec<(usize, Ipv4Addr)> = (1..=a.burst)
        .map(|i| vip(i).map(|v| (i, v)).context("a Service without ingress"))
        .collect::<Result<_>>()?;
    let sent: Arc<Mutex<Vec<Option<Instant>>>> = Arc::new(Mutex::new(vec![None; a.burst]));
    let gen_before = publisher.current().generation;
    let burst_t0 = Instant::now();
    let watcher = {
        let (p, sent, targets) = (publisher.clone(), Arc::clone(&sent), targets.clone());
        tokio::task::spawn_blocking(move || -> Result<Vec<f64>> {
            let mut done: Vec<Option<f64>> = vec![None; targets.len()];
            let mut left = targets.len();
            wait_for("the burst", || {
                for (k, (i, v)) in targets.iter().enumerate() {
                    if done[k].is_none() && serves(&p, *v, marker(*i, 1)) {
                        let t = sent.lock().unwrap_or_else(PoisonError::into_inner)[k];
                        if let Some(t) = t {
                            done[k] = Some(t.elapsed().as_secs_f64() * 1000.0);
                            left -= 1;
                        }
                    }
                }
                left == 0
            })?;
            Ok(done.into_iter().flatten().collect())
        })
    };
    let mut tasks = tokio::task::JoinSet::new();
    for lane in 0..BURST_IN_FLIGHT {
        let (slices, sent, targets) = (slices.clone(), Arc::clone(&sent), targets.clone());
        let count = a.endpoints;
        tasks.spawn(async move {
            for k in (lane..targets.len()).step_by(BURST_IN_FLIGHT) {
                let i = targets[k].0;
                sent.lock().unwrap_or_else(PoisonError::into_inner)[k] = Some(Instant::now());
                patch_endpoints(&slices, i, marker(i, 1), count).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    let sent_s = burst_t0.elapsed().as_secs_f64();
    let mut burst = watcher.await??;
    let all_live_s = burst_t0.elapsed().as_secs_f64();
    let report = source.stats().report();
    let gens = publisher.current().generation - gen_before;
    let mut builds: Vec<f64> = report
        .recent
        .iter()
        .rev()
        .take(gens as usize)
        .map(|t| t.build_us as f64 / 1000.0)
        .collect();
    source.stop();

    println!(
        "write -> live, one change   (client clock) {}",
        summary(&mut single)
    );
    println!(
        "write -> live, one change   (source)       {}",
        summary(&mut own.clone())
    );
    println!(
        "write -> live, burst of {:4} (client clock) {}",
        a.burst,
        summary(&mut burst)
    );
    println!(
        "  burst sent in {sent_s:.2} s, all live after {all_live_s:.2} s, {gens} generations, \
         build per generation {}",
        summary(&mut builds)
    );
    Ok(())
}
