//! L2 mode with two instances (issue 13 §3 and §4): two `portico run`
//! (af_packet) from one configuration file, each as its own `[[instance]]`
//! (own node and SNAT address), on one client segment and one backend
//! segment, fed by the real kube-apiserver. A LoadBalancer Service gets an
//! address from the pool; exactly one instance answers ARP for it (captured
//! with a raw socket on the client's interface); SIGKILL that instance and
//! the other sends a gratuitous ARP and serves the VIP once the dead
//! member's Lease expires; restart it and it takes the VIP back; stop it
//! cleanly (SIGTERM) and the other takes over at its next list. ARP for the
//! VIP comes from one instance at a time throughout. The failover times are
//! printed, never asserted.
//!
//! ```text
//!  client ns 192.0.2.100 ── veth ── [bridge, seg ns] ──┬── veth ── gw-a ns [outside] node 192.0.2.1
//!                                                      └── veth ── gw-b ns [outside] node 192.0.2.2
//!  gw-a [inside] SNAT 10.1.0.1 ─┬── veth ── [bridge, lan ns] ── veth ── backend ns × 2 (nginx :8080)
//!  gw-b [inside] SNAT 10.1.0.2 ─┘
//!  host ── veth ── gw-a (API server bound to the host end); host ── veth ── gw-b (routed to it)
//! ```
//!
//! The gateway namespaces have no address on their packet ports and kernel
//! forwarding off: only Portico answers ARP there. Every wait is bounded.

mod common;

use common::kube::{curl_vip as curl, endpoint_slice, eventually, lb_service, status_ips};
use common::{PORTICO, tally};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, PostParams};
use portico::admin::{self, StatsReport};
use portico_tests::kube_cluster::{KubeCluster, KubeClusterOptions};
use portico_tests::{
    HostVeth, Netns, Process, RawSocket, TempDir, in_netns, nginx, require_programs, require_root,
    unique_name, veth,
};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TEST: &str = "l2_election::one_instance_answers_arp_for_a_vip_and_the_other_takes_over";
const NS: &str = "default";
const SERVICE: &str = "web";
const CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 100);
const POOL_FIRST: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 20);
const POOL_LAST: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 29);
const BACKEND_PORT: u16 = 8080;
/// The member Lease timings (`[kubernetes]`): a dead member is dropped
/// `LEASE_MS` after its last renewal was seen.
const LEASE_MS: u64 = 3000;
const RENEW_MS: u64 = 2000;
const RETRY_MS: u64 = 300;

/// One instance: its name, node and SNAT address, namespace and ports.
struct Instance {
    name: &'static str,
    node: Ipv4Addr,
    snat: Ipv4Addr,
    ns: Netns,
    outside_if: String,
    inside_if: String,
    mac: [u8; 6],
}

/// A running `portico run --instance`; SIGKILLed on drop if still running.
struct Running {
    process: Process,
    socket: PathBuf,
    log: PathBuf,
}

impl Running {
    fn stats(&self) -> Option<StatsReport> {
        admin::fetch(&self.socket).ok().map(|(_, r)| r)
    }
    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// An ARP frame seen on the client's interface.
#[derive(Clone, Debug)]
struct SeenArp {
    at: Instant,
    op: u16,
    sender_mac: [u8; 6],
    sender_ip: Ipv4Addr,
    target_ip: Ipv4Addr,
}

impl SeenArp {
    fn parse(frame: &[u8], at: Instant) -> Option<SeenArp> {
        if frame.len() < 42 || frame[12..14] != [0x08, 0x06] {
            return None;
        }
        let ip = |o: usize| Ipv4Addr::new(frame[o], frame[o + 1], frame[o + 2], frame[o + 3]);
        let mut sender_mac = [0u8; 6];
        sender_mac.copy_from_slice(&frame[22..28]);
        Some(SeenArp {
            at,
            op: u16::from_be_bytes([frame[20], frame[21]]),
            sender_mac,
            sender_ip: ip(28),
            target_ip: ip(38),
        })
    }
    fn is_garp(&self) -> bool {
        self.op == 1 && self.sender_ip == self.target_ip
    }
}

/// Every ARP frame arriving on the client's interface, from a thread.
struct Capture {
    seen: Arc<Mutex<Vec<SeenArp>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Capture {
    fn start(ns: &Netns, ifname: &str) -> Capture {
        let socket = in_netns(ns, || RawSocket::open(ifname)).expect("raw socket on the client");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen2, stop2) = (Arc::clone(&seen), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                if let Ok(Some(frame)) = socket.recv()
                    && let Some(arp) = SeenArp::parse(&frame, Instant::now())
                {
                    seen2.lock().unwrap_or_else(|e| e.into_inner()).push(arp);
                }
            }
        });
        Capture {
            seen,
            stop,
            thread: Some(thread),
        }
    }

    /// The ARP frames about `vip` sent by a gateway (replies and
    /// gratuitous ARPs), in arrival order.
    fn about(&self, vip: Ipv4Addr) -> Vec<SeenArp> {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.iter()
            .filter(|a| a.sender_ip == vip && (a.op == 2 || a.is_garp()))
            .cloned()
            .collect()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn mac_of(ns: &Netns, ifname: &str) -> [u8; 6] {
    let out = ns
        .exec("cat", &[&format!("/sys/class/net/{ifname}/address")])
        .expect("read the MAC");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut mac = [0u8; 6];
    for (b, part) in mac.iter_mut().zip(text.trim().split(':')) {
        *b = u8::from_str_radix(part, 16).expect("hex MAC");
    }
    mac
}

fn offloads_off(ns: &Netns, ifname: &str) {
    ns.exec(PORTICO, &["tool", "offloads-off", ifname])
        .expect("offloads off");
}

fn quiet(ns: &Netns) {
    for key in [
        "net.ipv6.conf.all.disable_ipv6=1",
        "net.ipv6.conf.default.disable_ipv6=1",
    ] {
        ns.exec("sysctl", &["-qw", key]).expect("sysctl");
    }
}

fn bridge(ns: &Netns) {
    ns.exec(
        "ip",
        &[
            "link",
            "add",
            "br0",
            "type",
            "bridge",
            "mcast_snooping",
            "0",
        ],
    )
    .expect("bridge");
    ns.exec("ip", &["link", "set", "br0", "up"])
        .expect("bridge up");
}

/// A veth from `ns` (end `ifname`, no address) to a new port of the bridge
/// in `seg`.
fn to_bridge(seg: &Netns, ns: &Netns, ifname: &str, addr: Option<&str>) {
    let port = unique_name("bp");
    veth(seg, &port, None, ns, ifname, addr).expect("veth to the bridge");
    seg.exec("ip", &["link", "set", &port, "master", "br0"])
        .expect("bridge port");
    offloads_off(seg, &port);
}

/// The shared configuration file: two instances, each with its node and
/// SNAT address; the ports' interface names are the same in both
/// namespaces.
fn config(kubeconfig: &Path, a: &Instance, b: &Instance) -> String {
    let instance = |i: &Instance| {
        format!(
            "[[instance]]\nname = \"{}\"\n[[instance.port]]\nname = \"outside\"\nnode_addresses = [\"{}/24\"]\n[[instance.port]]\nname = \"inside\"\nsnat_addresses = [\"{}/24\"]\n",
            i.name, i.node, i.snat
        )
    };
    format!(
        r#"# Written by tests/tests/l2_election.rs.
[dataplane]
workers = 1
idle = "adaptive"

[[port]]
name = "outside"
driver = "afpacket"
interface = "{outside}"
role = "outside"

[[port]]
name = "inside"
driver = "afpacket"
interface = "{inside}"
role = "inside"

[kubernetes]
kubeconfig = "{kubeconfig}"
serve_unclassed = true
debounce_ms = 5
debounce_max_ms = 50
lease_name = "portico-l2"
lease_duration_ms = {LEASE_MS}
renew_deadline_ms = {RENEW_MS}
retry_period_ms = {RETRY_MS}

[[address_pool]]
name = "public"
addresses = ["{POOL_FIRST}-{POOL_LAST}"]

{a}
{b}"#,
        outside = a.outside_if,
        inside = a.inside_if,
        kubeconfig = kubeconfig.display(),
        a = instance(a),
        b = instance(b),
    )
}

fn start(i: &Instance, config: &Path, dir: &Path) -> Running {
    let socket = dir.join(format!("{}.sock", i.name));
    let log = dir.join(format!("{}.log", i.name));
    let process =
        i.ns.spawn_logged(
            PORTICO,
            &[
                "run",
                "--config",
                config.to_str().expect("utf-8"),
                "--admin-socket",
                socket.to_str().expect("utf-8"),
                "--instance",
                i.name,
                "--log-format",
                "json",
            ],
            &log,
        )
        .expect("spawn portico run");
    Running {
        process,
        socket,
        log,
    }
}

fn fmt_mac(mac: [u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_instance_answers_arp_for_a_vip_and_the_other_takes_over() {
    if !require_root(TEST)
        || !require_programs(TEST, &["curl", "nginx"], "tests/run.sh installs them")
    {
        return;
    }
    // Namespaces and links (dropped last: declared first).
    let dir = TempDir::new("portico-l2").expect("temp dir");
    let client = Netns::new("lc").expect("client ns");
    let seg = Netns::new("ls").expect("client segment ns");
    let lan = Netns::new("ll").expect("backend segment ns");
    for ns in [&client, &seg, &lan] {
        quiet(ns);
    }
    bridge(&seg);
    bridge(&lan);
    let client_if = unique_name("ci");
    to_bridge(
        &seg,
        &client,
        &client_if,
        Some(&format!("{CLIENT_ADDR}/24")),
    );
    offloads_off(&client, &client_if);
    let mut backends = Vec::new();
    let mut servers = Vec::new();
    for i in 0..2u8 {
        let ns = Netns::new("lb").expect("backend ns");
        quiet(&ns);
        let ifname = unique_name("be");
        let addr = Ipv4Addr::new(10, 1, 0, 10 + i);
        to_bridge(&lan, &ns, &ifname, Some(&format!("{addr}/24")));
        offloads_off(&ns, &ifname);
        servers
            .push(nginx(&ns, &format!("{i}"), &format!("{addr}:{BACKEND_PORT}")).expect("nginx"));
        backends.push((ns, addr));
    }
    let (outside_if, inside_if) = (unique_name("go"), unique_name("gi"));
    let mut instances = Vec::new();
    for (name, last) in [("gw-a", 1u8), ("gw-b", 2u8)] {
        let ns = Netns::new("lg").expect("gateway ns");
        quiet(&ns);
        ns.exec("sysctl", &["-qw", "net.ipv4.ip_forward=0"])
            .expect("forwarding off");
        to_bridge(&seg, &ns, &outside_if, None);
        to_bridge(&lan, &ns, &inside_if, None);
        let mac = mac_of(&ns, &outside_if);
        instances.push(Instance {
            name,
            node: Ipv4Addr::new(192, 0, 2, last),
            snat: Ipv4Addr::new(10, 1, 0, last),
            ns,
            outside_if: outside_if.clone(),
            inside_if: inside_if.clone(),
            mac,
        });
    }
    // The API server on the host end of a veth into gw-a; gw-b reaches it
    // through its own veth, routed by the host.
    let pid = std::process::id();
    let (third, block) = ((pid % 256) as u8, ((pid / 256 % 32) * 8) as u8);
    let host = |n: u8| Ipv4Addr::new(10, 253, third, block + n);
    let link_a = HostVeth::new(
        &instances[0].ns,
        &format!("{}/30", host(1)),
        &format!("{}/30", host(2)),
    )
    .expect("API veth a");
    let link_b = HostVeth::new(
        &instances[1].ns,
        &format!("{}/30", host(5)),
        &format!("{}/30", host(6)),
    )
    .expect("API veth b");
    instances[1]
        .ns
        .exec(
            "ip",
            &[
                "route",
                "add",
                &format!("{}/32", host(1)),
                "via",
                &host(5).to_string(),
            ],
        )
        .expect("route to the API server");
    let options = KubeClusterOptions {
        bind_address: Some(host(1)),
        ..KubeClusterOptions::default()
    };
    let Some(cluster) = KubeCluster::start_or_skip(TEST, options).await else {
        return;
    };
    let kube = cluster.client();

    let config_path = dir.path.join("portico.toml");
    std::fs::write(
        &config_path,
        config(cluster.kubeconfig_path(), &instances[0], &instances[1]),
    )
    .expect("write the config");
    let capture = Capture::start(&client, &client_if);
    let mut running: Vec<Option<Running>> = instances
        .iter()
        .map(|i| Some(start(i, &config_path, &dir.path)))
        .collect();
    let logs = |running: &[Option<Running>]| {
        running
            .iter()
            .flatten()
            .map(Running::log_text)
            .collect::<Vec<_>>()
            .join("\n----\n")
    };

    // Both members live in both views.
    eventually("both instances to see both members", async || {
        let both = running.iter().flatten().all(|r| {
            r.stats()
                .and_then(|s| s.control_plane.members)
                .is_some_and(|m| {
                    m.known && m.me_live && m.live == ["gw-a".to_owned(), "gw-b".to_owned()]
                })
        });
        both.then_some(())
    })
    .await;

    // A LoadBalancer Service: an address of the pool.
    let services: Api<Service> = Api::namespaced(kube.clone(), NS);
    services
        .create(
            &PostParams::default(),
            &lb_service(NS, SERVICE, BACKEND_PORT),
        )
        .await
        .expect("create the Service");
    let slices: Api<EndpointSlice> = Api::namespaced(kube.clone(), NS);
    let ready: Vec<(Ipv4Addr, bool)> = backends.iter().map(|(_, a)| (*a, true)).collect();
    slices
        .create(
            &PostParams::default(),
            &endpoint_slice(NS, SERVICE, BACKEND_PORT, &ready),
        )
        .await
        .expect("create the EndpointSlice");
    let vip = eventually("status.loadBalancer.ingress", async || {
        let ips = status_ips(&kube, NS, SERVICE).await;
        (ips.len() == 1).then(|| ips[0])
    })
    .await;
    assert!(
        (POOL_FIRST..=POOL_LAST).contains(&vip),
        "{vip} from the pool"
    );

    // Exactly one instance announces the VIP; the other owns it silently.
    let owner = eventually("one announcer of the VIP", async || {
        let views: Vec<(bool, bool)> = running
            .iter()
            .flatten()
            .filter_map(Running::stats)
            .map(|s| {
                let a = &s.announcements;
                (a.announced.contains(&vip), a.silent.contains(&vip))
            })
            .collect();
        match views.as_slice() {
            [(true, false), (false, true)] => Some(0),
            [(false, true), (true, false)] => Some(1),
            _ => None,
        }
    })
    .await;
    let other = 1 - owner;
    println!(
        "VIP {vip}: announced by {} ({}), silent on {} ({})",
        instances[owner].name,
        fmt_mac(instances[owner].mac),
        instances[other].name,
        fmt_mac(instances[other].mac)
    );

    // Traffic through the owner: from its own SNAT address.
    let first = eventually("a first answer from the VIP", async || {
        curl(&client, vip, 1, 2)[0].clone()
    })
    .await;
    assert!(first.starts_with("backend "), "{first}");
    let (_, per_source, failed) = tally(&curl(&client, vip, 20, 5));
    assert_eq!(failed, 0, "log:\n{}", logs(&running));
    assert_eq!(
        per_source.keys().cloned().collect::<Vec<_>>(),
        vec![instances[owner].snat.to_string()],
        "the owner's own SNAT address (its [[instance]])"
    );
    // Fresh ARP resolutions: the client asks again, only the owner answers.
    for _ in 0..3 {
        client
            .exec("ip", &["neigh", "flush", "dev", &client_if])
            .expect("flush the client's ARP cache");
        assert!(
            curl(&client, vip, 1, 5)[0].is_some(),
            "answered after a flush"
        );
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = capture.about(vip);
    assert!(
        before.iter().any(|a| a.op == 2),
        "the client saw ARP replies for {vip}: {before:?}"
    );
    assert!(
        before.iter().all(|a| a.sender_mac == instances[owner].mac),
        "only {} answers ARP for {vip}: {before:?}",
        instances[owner].name
    );

    // SIGKILL the owner: the other announces the VIP and serves it.
    let killed = Instant::now();
    let victim = running[owner].take().expect("the owner runs");
    victim.process.signal("KILL").expect("SIGKILL the owner");
    drop(victim);
    let garp_at = eventually("the survivor's gratuitous ARP", async || {
        capture
            .about(vip)
            .into_iter()
            .find(|a| a.at > killed && a.is_garp() && a.sender_mac == instances[other].mac)
            .map(|a| a.at)
    })
    .await;
    let served_at = eventually("the VIP served again", async || {
        curl(&client, vip, 1, 1)[0].is_some().then(Instant::now)
    })
    .await;
    println!(
        "failover after SIGKILL of {}: gratuitous ARP from {} after {} ms, VIP served after {} ms \
         (member lease {LEASE_MS} ms, retry {RETRY_MS} ms)",
        instances[owner].name,
        instances[other].name,
        garp_at.duration_since(killed).as_millis(),
        served_at.duration_since(killed).as_millis()
    );
    let (_, per_source, failed) = tally(&curl(&client, vip, 20, 5));
    assert_eq!(failed, 0, "log:\n{}", logs(&running));
    assert_eq!(
        per_source.keys().cloned().collect::<Vec<_>>(),
        vec![instances[other].snat.to_string()],
        "the survivor's own SNAT address"
    );
    client
        .exec("ip", &["neigh", "flush", "dev", &client_if])
        .expect("flush");
    assert!(curl(&client, vip, 1, 5)[0].is_some());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let survivor = running[other].as_ref().expect("survivor runs");
    let stats = survivor.stats().expect("survivor's stats");
    assert!(stats.announcements.announced.contains(&vip));
    assert_eq!(
        stats.control_plane.members.map(|m| m.live),
        Some(vec![instances[other].name.to_owned()])
    );

    // The killed instance comes back: it rejoins, and once the survivor
    // counts it (and is silent for the VIP it wins) it takes the VIP back
    // with a gratuitous ARP.
    let restarted = Instant::now();
    running[owner] = Some(start(&instances[owner], &config_path, &dir.path));
    let back_at = eventually("the returning owner's gratuitous ARP", async || {
        capture
            .about(vip)
            .into_iter()
            .find(|a| a.at > restarted && a.is_garp() && a.sender_mac == instances[owner].mac)
            .map(|a| a.at)
    })
    .await;
    eventually("the VIP served by its owner again", async || {
        let (_, per_source, failed) = tally(&curl(&client, vip, 5, 2));
        (failed == 0 && per_source.keys().eq([&instances[owner].snat.to_string()])).then_some(())
    })
    .await;
    println!(
        "rejoin of {}: its gratuitous ARP {} ms after the restart",
        instances[owner].name,
        back_at.duration_since(restarted).as_millis()
    );

    // A clean stop (SIGTERM): the member Lease is released and the other
    // instance takes over at its next list, without waiting for expiry.
    let stopping = running[owner].take().expect("the owner runs again");
    let stopped = Instant::now();
    stopping.process.signal("TERM").expect("SIGTERM the owner");
    let handover_at = eventually("the gratuitous ARP after a clean stop", async || {
        capture
            .about(vip)
            .into_iter()
            .find(|a| a.at > stopped && a.is_garp() && a.sender_mac == instances[other].mac)
            .map(|a| a.at)
    })
    .await;
    let served_at = eventually("the VIP served after the clean stop", async || {
        curl(&client, vip, 1, 1)[0].is_some().then(Instant::now)
    })
    .await;
    println!(
        "clean stop of {}: gratuitous ARP from {} after {} ms, VIP served after {} ms",
        instances[owner].name,
        instances[other].name,
        handover_at.duration_since(stopped).as_millis(),
        served_at.duration_since(stopped).as_millis()
    );
    drop(stopping);
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Over the whole run, ARP for the VIP came from one instance at a time:
    // the owner until the kill, the survivor until the owner's return, the
    // owner until its stop, the survivor after.
    for a in capture.about(vip) {
        let expected = if a.at <= killed {
            owner
        } else if a.at < back_at {
            other
        } else if a.at <= stopped {
            owner
        } else {
            other
        };
        assert_eq!(
            a.sender_mac,
            instances[expected].mac,
            "ARP for {vip} from the wrong instance: {a:?} (killed {:?}, back {:?}, stopped {:?} after the start)",
            killed.elapsed(),
            back_at.elapsed(),
            stopped.elapsed()
        );
    }
    drop(running);
    drop(capture);
    drop(link_a);
    drop(link_b);
    drop(servers);
}
