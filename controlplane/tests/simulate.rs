//! `portico simulate`: the library call against the example configurations,
//! agreement with an independently built dataplane pipeline, and the binary's
//! exit codes and messages.

use dataplane::driver::Driver;
use dataplane::driver::mem::{MemConfig, MemDriver};
use dataplane::flow::{FlowKey, Proto};
use dataplane::neighbour::NeighbourTable;
use dataplane::packet::{PortId, Verdict};
use dataplane::snapshot::SnapshotBuilder;
use dataplane::stage::Pipeline;
use dataplane::wire::tcp::flags as tcp_flags;
use dataplane::wire::{MacAddr, build};
use nic_config::Plan;
use portico::simulate::{AffinityReport, FlowSpec, Outcome, simulate};
use portico::source::static_file::{PortFacts, snapshot_spec, worker_config};
use serde_json::Value;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;

const BIN: &str = env!("CARGO_BIN_EXE_portico");

fn example_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name)
}

fn example(name: &str) -> Plan {
    nic_config::load(example_path(name)).expect("example loads")
}

fn run(plan: &Plan, spec: &str) -> Outcome {
    let spec: FlowSpec = spec.parse().expect("valid spec");
    simulate(plan, &spec).expect("simulation runs")
}

fn portico(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("portico runs")
}

/// The backends of service `name` in the plan.
fn backends_of(plan: &Plan, name: &str) -> Vec<SocketAddr> {
    plan.services
        .iter()
        .find(|s| s.name == name)
        .expect("service exists")
        .backends
        .iter()
        .map(|b| b.address)
        .collect()
}

#[test]
fn a_tcp_flow_to_the_vip_gets_a_backend_of_its_service_and_an_snat_tuple() {
    let plan = example("standalone-two-port.toml");
    let web = plan.services.iter().find(|s| s.name == "web").unwrap();
    let vip = web.listeners[0].address;
    let spec = format!("tcp 198.51.100.7:40000 -> {vip}:{}", web.listeners[0].port);
    let out = run(&plan, &spec);

    assert_eq!(out.service.as_deref(), Some("web"));
    assert_eq!(out.listener.as_ref().unwrap().kind, "vip");
    assert_eq!(out.affinity, Some(AffinityReport::None));
    let backend = out.backend.as_ref().expect("a backend").address;
    assert!(backends_of(&plan, "web").contains(&backend), "{backend}");
    // The Maglev slot shown is the one that chose this backend.
    let maglev = out.maglev.as_ref().expect("maglev lookup");
    // The table size follows the ready backend count, capped by the config.
    let ready = web
        .backends
        .iter()
        .filter(|b| b.weight > 0 && b.condition == nic_config::EndpointCondition::Ready)
        .count();
    assert_eq!(
        maglev.table_size,
        dataplane::maglev::table_size_for(ready, plan.dataplane.maglev_table_size)
    );
    assert!(maglev.slot < maglev.table_size);
    assert_eq!(maglev.slot as u64, maglev.hash % maglev.table_size as u64);
    assert_eq!(maglev.backend, Some(backend));
    // SNAT from the configured address and port range.
    let snat = out.snat.expect("web uses SNAT");
    assert!(plan.dataplane.snat.addresses.contains(&snat.ip()), "{snat}");
    assert!(
        plan.dataplane.snat.port_range.contains(&snat.port()),
        "{snat}"
    );
    assert_eq!(
        out.translated.as_deref(),
        Some(format!("tcp {snat} -> {backend}").as_str())
    );
    // No static neighbour: held for ARP, reported as a forward.
    assert_eq!(out.verdict, "forward");
    assert_eq!(out.drop_reason, None);
    let fw = out.forward.as_ref().unwrap();
    assert_eq!(fw.port, "inside");
    assert_eq!(fw.next_hop, Some(backend.ip()));
    assert!(out.to_string().contains(&format!(
        "forward to inside (next hop {} resolved by ARP at run time)",
        backend.ip()
    )));
}

#[test]
fn the_same_five_tuple_gets_the_same_answer() {
    let plan = example("standalone-two-port.toml");
    for spec in [
        "tcp 198.51.100.7:40000 -> 192.0.2.10:80",
        "udp 203.0.113.9:5353 -> 192.0.2.10:53",
        "tcp 198.51.100.200:1234 -> 192.0.2.1:30080",
    ] {
        assert_eq!(run(&plan, spec), run(&plan, spec), "{spec}");
    }
}

#[test]
fn a_node_port_flow_reports_the_node_port_listener() {
    let plan = example("standalone-two-port.toml");
    let out = run(&plan, "tcp 198.51.100.7:40000 -> 192.0.2.1:30080");
    assert_eq!(out.listener.as_ref().unwrap().kind, "node_port");
    assert_eq!(out.service.as_deref(), Some("web"));
    assert!(backends_of(&plan, "web").contains(&out.backend.unwrap().address));
}

#[test]
fn client_ip_affinity_picks_by_client_address_on_the_owning_worker() {
    // Two workers and ClientIP affinity: the slot comes from the client
    // address alone, so every port of a client lands on one backend.
    let plan = example("one-arm.toml");
    assert!(plan.dataplane.workers > 1);
    let mut workers_seen = std::collections::HashSet::new();
    for c in 1..=40u8 {
        let first = run(
            &plan,
            &format!("tcp 203.0.113.{c}:1000 -> 198.51.100.10:443"),
        );
        let Some(AffinityReport::ClientIp { timeout_ms }) = first.affinity else {
            panic!("affinity {:?}", first.affinity)
        };
        assert_eq!(timeout_ms, 3_600_000);
        let backend = first.backend.as_ref().unwrap().address;
        assert_eq!(first.maglev.as_ref().unwrap().backend, Some(backend));
        assert_ne!(first.backend.as_ref().unwrap().condition, "draining");
        let again = run(
            &plan,
            &format!("tcp 203.0.113.{c}:2000 -> 198.51.100.10:443"),
        );
        assert_eq!(again.backend.unwrap().address, backend);
        assert_eq!(again.worker, first.worker);
        // The SNAT port comes from the owning worker's slice, so the reply
        // steers back to the same worker.
        let snat = first.snat.unwrap();
        let slice_owner = dataplane::snat::owner_of_port(
            plan.dataplane.snat.port_range.clone(),
            snat.port(),
            plan.dataplane.workers,
        );
        assert_eq!(slice_owner, Some(first.worker as usize));
        workers_seen.insert(first.worker);
    }
    assert_eq!(workers_seen.len(), plan.dataplane.workers);
}

#[test]
fn a_static_neighbour_is_forwarded_without_arp() {
    let text = std::fs::read_to_string(example_path("standalone-two-port.toml")).unwrap();
    let dir = std::env::temp_dir().join(format!("portico-simulate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("static.toml");
    let mut with_neighbours = text.clone();
    for last in 10..=12 {
        with_neighbours.push_str(&format!(
            "\n[[neighbour]]\naddress = \"10.1.0.{last}\"\nmac = \"02:00:00:00:01:{last}\"\n"
        ));
    }
    std::fs::write(&path, with_neighbours).unwrap();
    let plan = nic_config::load(&path).expect("config with neighbours loads");
    std::fs::remove_dir_all(&dir).ok();
    let out = run(&plan, "tcp 198.51.100.7:40000 -> 192.0.2.10:80");
    let backend = out.backend.as_ref().unwrap().address;
    let fw = out.forward.as_ref().unwrap();
    assert_eq!(out.verdict, "forward");
    assert_eq!(fw.next_hop, Some(backend.ip()));
    assert!(fw.next_hop_static);
    assert!(out.to_string().contains("static neighbour"));
    // The neighbours change only the L2 step, not the choice.
    let plain = run(
        &example("standalone-two-port.toml"),
        "tcp 198.51.100.7:40000 -> 192.0.2.10:80",
    );
    assert_eq!(plain.backend, out.backend);
    assert!(!plain.forward.unwrap().next_hop_static);
}

/// A small deterministic generator (splitmix64) for the random 5-tuples.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[test]
fn simulate_agrees_with_an_independent_pipeline_on_200_random_flows() {
    let plan = example("standalone-two-port.toml");
    // The dataplane as the gateway builds it, independently of simulate.
    let facts = vec![
        PortFacts {
            mac: [2, 0, 0, 0, 0, 7],
            mtu: 1500,
        };
        plan.ports.len()
    ];
    let snap = SnapshotBuilder::new()
        .build(&snapshot_spec(&plan, &facts))
        .unwrap();
    assert_eq!(plan.dataplane.workers, 1, "one worker owns every flow");
    let mut pipeline = Pipeline::new(
        &worker_config(&plan, 0).pipeline,
        Arc::new(NeighbourTable::default()),
    )
    .unwrap();
    let mut driver = MemDriver::new(MemConfig {
        ports: plan.ports.len(),
        ..MemConfig::default()
    });
    let in_port = plan.vip_port as PortId;
    let targets = [
        (Proto::Tcp, Ipv4Addr::new(192, 0, 2, 10), 80, "web"),
        (Proto::Udp, Ipv4Addr::new(192, 0, 2, 10), 53, "dns"),
        (Proto::Tcp, Ipv4Addr::new(192, 0, 2, 1), 30080, "web"),
    ];
    let mut rng = SplitMix(0x5eed);
    let mut backends_seen = std::collections::HashSet::new();
    for i in 0..200u64 {
        let r = rng.next();
        let (proto, dst, dport, service) = targets[(r % 3) as usize];
        // Clients in 100.64.0.0/10, ports 1..=65535.
        let client = Ipv4Addr::from(0x6440_0000 | ((r >> 8) as u32 & 0x003f_ffff));
        let sport = ((r >> 40) as u16).max(1);
        let key = FlowKey::new(proto, client, sport, dst, dport);
        let bytes = match proto {
            Proto::Udp => build::eth_ipv4_udp(
                MacAddr([2, 1, 2, 3, 4, 5]),
                MacAddr(facts[0].mac),
                client,
                sport,
                dst,
                dport,
                b"x",
            ),
            _ => build::eth_ipv4_tcp(
                MacAddr([2, 1, 2, 3, 4, 5]),
                MacAddr(facts[0].mac),
                client,
                sport,
                dst,
                dport,
                tcp_flags::SYN,
                1,
                0,
                &[],
            ),
        };
        let mut frames = vec![driver.frame_from(&bytes).expect("frame")];
        pipeline.process(&snap, in_port, &mut frames, 1_000 + i, true);
        let verdict = pipeline.metas()[0].verdict;
        assert!(
            matches!(verdict, Verdict::AwaitNeighbour(_) | Verdict::Forward(_)),
            "{key:?}: {verdict:?}"
        );
        let (id, _) = pipeline
            .conntrack()
            .lookup(&key, pipeline.metas()[0].hash)
            .expect("flow created");
        let reply = *pipeline.conntrack().flow(id).reply();
        let picked = SocketAddr::V4(SocketAddrV4::new(reply.src_ip, reply.src_port));

        let spec = format!("{} {client}:{sport} -> {dst}:{dport}", proto.name());
        let out = run(&plan, &spec);
        assert_eq!(out.service.as_deref(), Some(service), "{spec}");
        assert_eq!(
            out.backend.as_ref().map(|b| b.address),
            Some(picked),
            "{spec}"
        );
        assert_eq!(out.maglev.as_ref().unwrap().backend, Some(picked), "{spec}");
        backends_seen.insert(picked);
    }
    // The flows spread over more than one backend (else the check is weak).
    assert!(backends_seen.len() > 3, "{backends_seen:?}");
}

#[test]
fn a_flow_to_an_unknown_port_is_dropped_with_no_listener() {
    let config = example_path("standalone-two-port.toml");
    let config = config.to_str().unwrap();
    let text = portico(&[
        "simulate",
        "--config",
        config,
        "tcp 198.51.100.7:40000 -> 192.0.2.10:8080",
    ]);
    assert!(text.status.success(), "{text:?}");
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(stdout.contains("verdict    drop: no_listener"), "{stdout}");
    assert!(stdout.contains("listener   none"), "{stdout}");

    let json = portico(&[
        "simulate",
        "--config",
        config,
        "--json",
        "tcp 198.51.100.7:40000 -> 192.0.2.10:8080",
    ]);
    assert!(json.status.success(), "{json:?}");
    let v: Value = serde_json::from_slice(&json.stdout).expect("JSON output");
    assert_eq!(v["verdict"], "drop");
    assert_eq!(v["drop_reason"], "no_listener");
    assert!(v["backend"].is_null());
    assert!(v["listener"].is_null());
}

#[test]
fn the_binary_reports_a_backend_as_json() {
    let plan = example("standalone-two-port.toml");
    let config = example_path("standalone-two-port.toml");
    let out = portico(&[
        "simulate",
        "--config",
        config.to_str().unwrap(),
        "--json",
        "tcp 198.51.100.7:40000 -> 192.0.2.10:80",
    ]);
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON output");
    assert_eq!(v["service"], "web");
    assert_eq!(v["listener"]["kind"], "vip");
    let backend: SocketAddr = v["backend"]["address"].as_str().unwrap().parse().unwrap();
    assert!(backends_of(&plan, "web").contains(&backend));
    let lib = run(&plan, "tcp 198.51.100.7:40000 -> 192.0.2.10:80");
    assert_eq!(v, serde_json::to_value(&lib).unwrap());
}

#[test]
fn a_bad_spec_or_config_exits_2_with_one_line() {
    let config = example_path("standalone-two-port.toml");
    let config = config.to_str().unwrap();
    for (cfg, spec) in [
        (config, "tcp 198.51.100.7 -> 192.0.2.10:80"),
        (config, "sctp 198.51.100.7:1 -> 192.0.2.10:80"),
        (config, "tcp 198.51.100.7:1 to 192.0.2.10:80"),
        (config, "tcp 198.51.100.7:1 -> 192.0.2.10:99999"),
        (
            "/nonexistent/portico.toml",
            "tcp 198.51.100.7:1 -> 192.0.2.10:80",
        ),
    ] {
        let out = portico(&["simulate", "--config", cfg, spec]);
        assert_eq!(out.status.code(), Some(2), "{spec}: {out:?}");
        assert!(out.stdout.is_empty(), "{spec}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{spec}: {stderr}");
        assert!(stderr.starts_with("portico simulate: "), "{stderr}");
    }
}

#[test]
fn an_ipv6_flow_gets_an_ipv6_backend_and_snat_tuple_and_a_family_mismatch_is_refused() {
    let plan = example("dual-stack.toml");
    let spec = "tcp [2001:db8::7]:40000 -> [2001:db8:5::10]:80";
    let out = run(&plan, spec);
    assert_eq!(out.service.as_deref(), Some("web6"), "{out}");
    assert_eq!(out.listener.as_ref().map(|l| l.kind), Some("vip"));
    let backend = out.backend.as_ref().expect("a backend").address;
    assert!(backends_of(&plan, "web6").contains(&backend), "{backend}");
    assert_eq!(out.maglev.as_ref().and_then(|m| m.backend), Some(backend));
    let snat = out.snat.expect("web6 uses SNAT");
    assert_eq!(snat.ip(), "fd00:1::1".parse::<std::net::IpAddr>().unwrap());
    assert_eq!(out.verdict, "forward", "{out}");
    // fd00:1::10 has a static NDP entry, fd00:1::11 is resolved at run time.
    let fw = out.forward.as_ref().expect("forwarded");
    assert_eq!(fw.port, "inside");
    assert_eq!(fw.next_hop, Some(backend.ip()));
    assert_eq!(
        fw.next_hop_static,
        backend.ip() == "fd00:1::10".parse::<std::net::IpAddr>().unwrap()
    );
    let text = out.to_string();
    assert!(
        text.contains(&format!("backend    {backend} (ready, weight 1)")),
        "{text}"
    );
    assert!(
        text.contains(&format!("rewritten  tcp {snat} -> {backend}")),
        "{text}"
    );

    // Every IPv6 client lands on a backend of web6, both eventually.
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..64 {
        let out = run(
            &plan,
            &format!("tcp [2001:db8::{i:x}]:{} -> [2001:db8:5::10]:80", 40000 + i),
        );
        seen.insert(out.backend.expect("backend").address);
    }
    assert_eq!(seen.len(), 2, "{seen:?}");

    // No NAT46/64.
    let bad = portico(&[
        "simulate",
        "--config",
        example_path("dual-stack.toml").to_str().unwrap(),
        "tcp 198.51.100.7:40000 -> [2001:db8:5::10]:80",
    ]);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("different families"), "{err}");

    // The binary, as JSON.
    let json = portico(&[
        "simulate",
        "--config",
        example_path("dual-stack.toml").to_str().unwrap(),
        "--json",
        spec,
    ]);
    assert!(json.status.success(), "{json:?}");
    let v: Value = serde_json::from_slice(&json.stdout).expect("JSON output");
    assert_eq!(v["service"], "web6");
    assert_eq!(v["backend"]["address"], backend.to_string());
    assert_eq!(v["listener"]["address"], "[2001:db8:5::10]:80");
}
