//! Tests of the metrics: the families of a known report (`sample`), read
//! back by a small exposition parser (`parse`), and the HTTP server. One
//! file over 700 lines: every test shares that report and that parser.

use super::*;
use crate::admin::{
    BackendReport, CounterReport, PortCounters, PortReport, ServiceReport, SnapshotReport,
};
use dataplane::counters::{Counters, DropReason, Gauges};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::Ordering;

fn sample() -> StatsReport {
    let mut c = Counters {
        rx_packets: 40,
        flows_created: 6,
        flows_expired: 2,
        flows_early_dropped: 1,
        to_host: 7,
        from_host: 5,
        ..Counters::default()
    };
    for _ in 0..3 {
        c.drop(DropReason::NoFlow);
    }
    StatsReport {
        pid: 1,
        uptime_ms: 10_000,
        config: "portico.toml".into(),
        snapshot: SnapshotReport {
            generation: 4,
            age_ms: 2_500,
        },
        total: CounterReport::new(
            &c,
            Gauges {
                live_flows: 4,
                snat_in_use: 3,
                live_flows_v6: 1,
                snat_in_use_v6: 1,
                // SYN_SENT 1, ESTABLISHED 2, TIME_WAIT 0 ..., UDP 1.
                flows_by_state: [1, 0, 2, 0, 0, 0, 0, 0, 1, 0],
            },
        ),
        workers: Vec::new(),
        ports: vec![PortReport {
            port: 0,
            name: "outside".into(),
            interface: "veth0".into(),
            stats: PortCounters {
                rx_frames: 11,
                rx_bytes: 1100,
                tx_frames: 9,
                tx_bytes: 900,
                tx_ring_full: 2,
                kernel_rx_drops: 5,
                kernel_rx_dropped: 1,
                kernel_fill_ring_empty: 4,
                ..PortCounters::default()
            },
        }],
        services: vec![ServiceReport {
            name: "web".into(),
            protocol: "tcp".into(),
            packets: 7,
            bytes: 700,
            flows_created: 2,
            flows_active: 1,
            listeners: Vec::new(),
            backends: vec![BackendReport {
                address: "10.1.0.10:8080".into(),
                condition: "ready".into(),
                weight: 1,
                packets: 5,
                bytes: 500,
                flows_created: 2,
                flows_active: 1,
            }],
        }],
        snat: vec![
            crate::admin::SnatAddrReport {
                address: "10.1.0.1".into(),
                family: "ipv4".into(),
                ports_in_use: 2,
                exhausted: 6,
            },
            crate::admin::SnatAddrReport {
                address: "2001:db8:1::1".into(),
                family: "ipv6".into(),
                ports_in_use: 1,
                exhausted: 0,
            },
        ],
        control_plane: {
            let m = crate::admin::ControlPlaneMetrics::new();
            m.observe_build_ms(3.0);
            m.observe_build_ms(40.0);
            m.inc_watch_restarts("services");
            m.set_pool_usage("default", 2, 16);
            // A /64: beyond u64.
            m.set_pool_usage("v6", 1, 1 << 64);
            m.set_members(crate::admin::MembersReport {
                me: "gw-a".into(),
                known: true,
                me_live: true,
                live: vec!["gw-a".into(), "gw-b".into()],
            });
            m.report()
        },
        neighbours: crate::admin::NeighbourReport {
            capacity: 16_384,
            entries: 25,
            statics: 20,
            refused: 2,
            reclaimed: 700,
            compactions: 9,
        },
        announcements: crate::admin::AnnouncementReport {
            announced: vec![std::net::Ipv4Addr::new(203, 0, 113, 10)],
            silent: vec![std::net::Ipv4Addr::new(203, 0, 113, 11)],
            announced6: Vec::new(),
            silent6: vec!["2001:db8:5::10".parse().expect("address")],
        },
        bgp: crate::admin::BgpReport::default(),
    }
}

/// One sample line: `name{labels} value`, labels as a sorted map.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parse the exposition line by line; panics on a line that is neither
/// a `# TYPE|HELP|UNIT` comment, `# EOF`, nor a sample. Returns the
/// declared types and the samples.
fn parse(text: &str) -> (BTreeMap<String, String>, Vec<Sample>) {
    let mut types = BTreeMap::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# ") {
            let mut w = rest.splitn(3, ' ');
            match (w.next(), w.next(), w.next()) {
                (Some("TYPE"), Some(name), Some(t)) => {
                    types.insert(name.to_owned(), t.to_owned());
                }
                (Some("HELP" | "UNIT"), Some(_), Some(_)) => {}
                (Some("EOF"), None, None) => {}
                _ => panic!("bad comment line {line:?}"),
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("`series value`");
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').expect("labels close");
                let labels = body
                    .split(',')
                    .map(|kv| {
                        let (k, v) = kv.split_once('=').expect("k=v");
                        let v = v
                            .strip_prefix('"')
                            .and_then(|v| v.strip_suffix('"'))
                            .expect("quoted value");
                        (k.to_owned(), v.to_owned())
                    })
                    .collect();
                (name, labels)
            }
            None => (series, BTreeMap::new()),
        };
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "metric name {name:?}"
        );
        samples.push(Sample {
            name: name.to_owned(),
            labels,
            value: value.parse().expect("numeric value"),
        });
    }
    (types, samples)
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    let want: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let found: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.name == name && s.labels == want)
        .collect();
    assert_eq!(found.len(), 1, "{name} {want:?} in {samples:#?}");
    found.first().map_or(f64::NAN, |s| s.value)
}

#[test]
fn the_metrics_text_has_every_family_with_units_and_labels() {
    let report = sample();
    let text = encode_report(&report).expect("encodes");
    assert!(text.ends_with("# EOF\n"), "{text}");
    let (types, samples) = parse(&text);

    for (family, t) in [
        ("portico_port_rx_packets", "counter"),
        ("portico_port_rx_bytes", "counter"),
        ("portico_port_tx_packets", "counter"),
        ("portico_port_tx_bytes", "counter"),
        ("portico_port_driver_drops", "counter"),
        ("portico_port_drops", "counter"),
        ("portico_port_kernel_fill_ring_empty", "counter"),
        ("portico_drops", "counter"),
        ("portico_flows_created", "counter"),
        ("portico_flows_expired", "counter"),
        ("portico_flows_early_dropped", "counter"),
        ("portico_flows_live", "gauge"),
        ("portico_snat_tuples_in_use", "gauge"),
        ("portico_service_packets", "counter"),
        ("portico_service_bytes", "counter"),
        ("portico_backend_packets", "counter"),
        ("portico_backend_bytes", "counter"),
        ("portico_snapshot_generation", "gauge"),
        ("portico_snapshot_age_seconds", "gauge"),
        ("portico_neighbour_entries", "gauge"),
        ("portico_neighbour_capacity", "gauge"),
        ("portico_neighbour_refusals", "counter"),
        ("portico_neighbour_reclaimed", "counter"),
        ("portico_neighbour_compactions", "counter"),
    ] {
        assert_eq!(
            types.get(family).map(String::as_str),
            Some(t),
            "{family}\n{text}"
        );
    }
    assert!(
        text.contains("# UNIT portico_port_rx_bytes bytes"),
        "{text}"
    );
    assert!(
        text.contains("# UNIT portico_snapshot_age_seconds seconds"),
        "{text}"
    );
    for s in &samples {
        if types
            .get(s.name.trim_end_matches("_total"))
            .map(String::as_str)
            == Some("counter")
        {
            assert!(s.name.ends_with("_total"), "counter sample {}", s.name);
        }
    }

    assert_eq!(value(&samples, "portico_l2_members", &[]), 2.0);
    assert_eq!(
        value(&samples, "portico_l2_announced", &[("vip", "203.0.113.10")]),
        1.0
    );
    assert_eq!(
        value(&samples, "portico_l2_announced", &[("vip", "203.0.113.11")]),
        0.0
    );
    assert_eq!(
        value(
            &samples,
            "portico_l2_announced",
            &[("vip", "2001:db8:5::10")]
        ),
        0.0,
        "an IPv6 VIP another instance announces"
    );

    let port = [("port", "outside"), ("interface", "veth0")];
    assert_eq!(
        value(&samples, "portico_port_rx_packets_total", &port),
        11.0
    );
    assert_eq!(
        value(&samples, "portico_port_rx_bytes_total", &port),
        1100.0
    );
    assert_eq!(value(&samples, "portico_port_tx_packets_total", &port), 9.0);
    assert_eq!(value(&samples, "portico_port_tx_bytes_total", &port), 900.0);
    assert_eq!(
        value(&samples, "portico_port_driver_drops_total", &port),
        8.0
    );
    // The same drops by cause, the kernel's apart from Portico's.
    for (cause, n) in [
        ("kernel_rx_ring_full", 5.0),
        ("kernel_rx_other", 1.0),
        ("tx_ring_full", 2.0),
        ("rx_too_big", 0.0),
    ] {
        let labels = [port[0], port[1], ("cause", cause)];
        assert_eq!(
            value(&samples, "portico_port_drops_total", &labels),
            n,
            "{cause}"
        );
    }
    assert_eq!(
        value(&samples, "portico_port_kernel_fill_ring_empty_total", &port),
        4.0
    );

    let reasons: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.name == "portico_drops_total")
        .collect();
    assert_eq!(
        reasons.len(),
        DropReason::COUNT,
        "every reason, zero or not"
    );
    for r in DropReason::ALL {
        let want = if *r == DropReason::NoFlow { 3.0 } else { 0.0 };
        assert_eq!(
            value(&samples, "portico_drops_total", &[("reason", r.name())]),
            want
        );
    }

    assert_eq!(value(&samples, "portico_flows_created_total", &[]), 6.0);
    assert_eq!(value(&samples, "portico_flows_expired_total", &[]), 2.0);
    assert_eq!(
        value(&samples, "portico_flows_early_dropped_total", &[]),
        1.0
    );
    assert_eq!(value(&samples, "portico_flows_live", &[]), 4.0);
    assert_eq!(value(&samples, "portico_snat_tuples_in_use", &[]), 3.0);

    let svc = [("service", "web"), ("protocol", "tcp")];
    assert_eq!(value(&samples, "portico_service_packets_total", &svc), 7.0);
    assert_eq!(value(&samples, "portico_service_bytes_total", &svc), 700.0);
    let be = [
        ("service", "web"),
        ("protocol", "tcp"),
        ("backend", "10.1.0.10:8080"),
    ];
    assert_eq!(value(&samples, "portico_backend_packets_total", &be), 5.0);
    assert_eq!(value(&samples, "portico_backend_bytes_total", &be), 500.0);

    assert_eq!(value(&samples, "portico_snapshot_generation", &[]), 4.0);
    assert_eq!(value(&samples, "portico_snapshot_age_seconds", &[]), 2.5);
    assert_eq!(value(&samples, "portico_neighbour_entries", &[]), 25.0);
    assert_eq!(value(&samples, "portico_neighbour_capacity", &[]), 16_384.0);
    assert_eq!(
        value(&samples, "portico_neighbour_refusals_total", &[]),
        2.0
    );
    assert_eq!(
        value(&samples, "portico_neighbour_reclaimed_total", &[]),
        700.0
    );
    assert_eq!(
        value(&samples, "portico_neighbour_compactions_total", &[]),
        9.0
    );

    // Conntrack by protocol and state, and its counters.
    let tcp = |state: &'static str| [("protocol", "tcp"), ("state", state)];
    assert_eq!(
        value(&samples, "portico_conntrack_flows", &tcp("syn_sent")),
        1.0
    );
    assert_eq!(
        value(&samples, "portico_conntrack_flows", &tcp("established")),
        2.0
    );
    assert_eq!(
        value(&samples, "portico_conntrack_flows", &tcp("time_wait")),
        0.0
    );
    assert_eq!(
        value(&samples, "portico_conntrack_flows", &[("protocol", "udp")]),
        1.0
    );
    assert_eq!(value(&samples, "portico_conntrack_inserts_total", &[]), 6.0);
    assert_eq!(
        value(&samples, "portico_conntrack_expiries_total", &[]),
        2.0
    );
    assert_eq!(
        value(&samples, "portico_conntrack_early_drops_total", &[]),
        1.0
    );
    assert_eq!(
        value(&samples, "portico_conntrack_insert_refusals_total", &[]),
        0.0
    );
    assert_eq!(
        value(
            &samples,
            "portico_host_path_frames_total",
            &[("direction", "to_kernel")]
        ),
        7.0
    );
    assert_eq!(
        value(
            &samples,
            "portico_host_path_frames_total",
            &[("direction", "from_kernel")]
        ),
        5.0
    );
    // SNAT per address.
    let ip = [("snat_ip", "10.1.0.1"), ("family", "ipv4")];
    assert_eq!(value(&samples, "portico_snat_ports_in_use", &ip), 2.0);
    assert_eq!(value(&samples, "portico_snat_exhausted_total", &ip), 6.0);
    let ip6 = [("snat_ip", "2001:db8:1::1"), ("family", "ipv6")];
    assert_eq!(value(&samples, "portico_snat_ports_in_use", &ip6), 1.0);
    // Per family: the IPv6 part and the rest.
    for (name, v4, v6) in [
        ("portico_flows_live_by_family", 3.0, 1.0),
        ("portico_snat_tuples_in_use_by_family", 2.0, 1.0),
    ] {
        assert_eq!(value(&samples, name, &[("family", "ipv4")]), v4, "{name}");
        assert_eq!(value(&samples, name, &[("family", "ipv6")]), v6, "{name}");
    }
    // Flows per service and backend.
    assert_eq!(
        value(&samples, "portico_service_flows_created_total", &svc),
        2.0
    );
    assert_eq!(value(&samples, "portico_service_flows_active", &svc), 1.0);
    assert_eq!(
        value(&samples, "portico_backend_flows_created_total", &be),
        2.0
    );
    assert_eq!(value(&samples, "portico_backend_flows_active", &be), 1.0);
    // Control plane: a histogram in seconds, cumulative buckets.
    assert_eq!(
        types
            .get("portico_snapshot_build_seconds")
            .map(String::as_str),
        Some("histogram")
    );
    assert_eq!(
        types
            .get("portico_event_to_live_seconds")
            .map(String::as_str),
        Some("histogram")
    );
    assert_eq!(
        value(&samples, "portico_snapshot_build_seconds_count", &[]),
        2.0
    );
    assert!((value(&samples, "portico_snapshot_build_seconds_sum", &[]) - 0.043).abs() < 1e-9);
    assert_eq!(
        value(
            &samples,
            "portico_snapshot_build_seconds_bucket",
            &[("le", "0.005")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &samples,
            "portico_snapshot_build_seconds_bucket",
            &[("le", "0.05")]
        ),
        2.0
    );
    assert_eq!(
        value(
            &samples,
            "portico_snapshot_build_seconds_bucket",
            &[("le", "+Inf")]
        ),
        2.0
    );
    assert_eq!(
        value(&samples, "portico_event_to_live_seconds_count", &[]),
        0.0
    );
    assert_eq!(
        value(
            &samples,
            "portico_watch_restarts_total",
            &[("watch", "services")]
        ),
        1.0
    );
    let pool = [("pool", "default")];
    assert_eq!(
        value(&samples, "portico_ipam_pool_addresses_used", &pool),
        2.0
    );
    assert_eq!(value(&samples, "portico_ipam_pool_addresses", &pool), 16.0);
    assert_eq!(
        value(&samples, "portico_ipam_pool_addresses", &[("pool", "v6")]),
        18_446_744_073_709_551_616.0,
        "an IPv6 pool's size is not saturated at u64::MAX"
    );
    assert!(!types.contains_key("portico_leader"), "no leader election");
    assert!(
        !types.contains_key("portico_bgp_session_state"),
        "no BGP families without peers"
    );
}

#[test]
fn bgp_sessions_have_their_families() {
    let mut report = sample();
    report.bgp = crate::admin::BgpReport {
        peers: vec![crate::admin::BgpPeerReport {
            peer: "192.0.2.100:179".into(),
            state: "Active".into(),
            state_number: 3,
            prefixes_sent: 3,
            prefixes_sent_v6: 1,
            prefixes_skipped: 2,
            updates_sent: 12,
            updates_received: 4,
            flaps: 2,
            families_offered: vec!["ipv4-unicast".into(), "ipv6-unicast".into()],
            families: vec!["ipv6-unicast".into()],
            extended_next_hop_offered: true,
            extended_next_hop: false,
            ..Default::default()
        }],
        vips: vec!["192.0.2.10".into()],
        withdrawn: Some("watchdog".into()),
        watchdog_trips: 3,
    };
    let text = encode_report(&report).expect("encodes");
    let (types, samples) = parse(&text);
    for (family, t) in [
        ("portico_bgp_session_state", "gauge"),
        ("portico_bgp_session_uptime_seconds", "gauge"),
        ("portico_bgp_prefixes_announced", "gauge"),
        ("portico_bgp_updates_sent", "counter"),
        ("portico_bgp_updates_received", "counter"),
        ("portico_bgp_session_flaps", "counter"),
        ("portico_bgp_withdrawn", "gauge"),
        ("portico_bgp_watchdog_trips", "counter"),
    ] {
        assert_eq!(types.get(family).map(String::as_str), Some(t), "{family}");
    }
    let peer = [("peer", "192.0.2.100:179")];
    assert_eq!(value(&samples, "portico_bgp_session_state", &peer), 3.0);
    assert_eq!(
        value(&samples, "portico_bgp_prefixes_announced", &peer),
        3.0
    );
    assert_eq!(value(&samples, "portico_bgp_prefixes_skipped", &peer), 2.0);
    for (family, n) in [("ipv4", 2.0), ("ipv6", 1.0)] {
        let l = [("peer", "192.0.2.100:179"), ("family", family)];
        assert_eq!(
            value(&samples, "portico_bgp_prefixes_announced_by_family", &l),
            n
        );
    }
    for (family, negotiated) in [("ipv4-unicast", 0.0), ("ipv6-unicast", 1.0)] {
        let l = [("peer", "192.0.2.100:179"), ("family", family)];
        assert_eq!(
            value(&samples, "portico_bgp_family_negotiated", &l),
            negotiated,
            "{family}"
        );
    }
    assert_eq!(
        types
            .get("portico_bgp_family_negotiated")
            .map(String::as_str),
        Some("gauge")
    );
    assert_eq!(value(&samples, "portico_bgp_extended_next_hop", &peer), 0.0);
    assert_eq!(
        value(&samples, "portico_bgp_updates_sent_total", &peer),
        12.0
    );
    assert_eq!(
        value(&samples, "portico_bgp_updates_received_total", &peer),
        4.0
    );
    assert_eq!(
        value(&samples, "portico_bgp_session_flaps_total", &peer),
        2.0
    );
    assert_eq!(
        value(&samples, "portico_bgp_withdrawn", &[("reason", "watchdog")]),
        1.0
    );
    assert_eq!(
        value(&samples, "portico_bgp_withdrawn", &[("reason", "stopping")]),
        0.0
    );
    assert_eq!(
        value(&samples, "portico_bgp_watchdog_trips_total", &[]),
        3.0
    );
}

/// GTSM per peer: the configured hops (0 when off) for every peer, the
/// least TTL accepted only for the peers with GTSM.
#[test]
fn bgp_ttl_security_is_exported_per_peer() {
    let mut report = sample();
    let peer = |addr: &str, hops: Option<u8>, min_ttl: Option<u8>| crate::admin::BgpPeerReport {
        peer: addr.into(),
        state: "Established".into(),
        state_number: 6,
        ttl_security_hops: hops,
        ttl: if hops.is_some() { 255 } else { 1 },
        min_ttl,
        ..Default::default()
    };
    report.bgp.peers = vec![
        peer("192.0.2.100:179", Some(2), Some(254)),
        peer("192.0.2.101:179", None, None),
    ];
    let text = encode_report(&report).expect("encodes");
    let (types, samples) = parse(&text);
    for family in [
        "portico_bgp_ttl_security_hops",
        "portico_bgp_ttl_security_min_ttl",
    ] {
        assert_eq!(
            types.get(family).map(String::as_str),
            Some("gauge"),
            "{family}"
        );
        assert!(text.contains(&format!("# HELP {family} ")), "{text}");
    }
    let gtsm = [("peer", "192.0.2.100:179")];
    let plain = [("peer", "192.0.2.101:179")];
    assert_eq!(value(&samples, "portico_bgp_ttl_security_hops", &gtsm), 2.0);
    assert_eq!(
        value(&samples, "portico_bgp_ttl_security_min_ttl", &gtsm),
        254.0
    );
    assert_eq!(
        value(&samples, "portico_bgp_ttl_security_hops", &plain),
        0.0
    );
    assert!(
        !samples
            .iter()
            .any(|s| s.name == "portico_bgp_ttl_security_min_ttl"
                && s.labels.get("peer").map(String::as_str) == Some("192.0.2.101:179")),
        "no minimum TTL without GTSM: {text}"
    );
}

/// Every field of the port counters reaches the metrics exactly once:
/// traffic under its own families, drops by cause, every other one as
/// `port_<field>_total` with its help text (AF_XDP's cross-queue counters
/// among them).
#[test]
fn every_port_counter_is_exported_once_with_its_help() {
    let mut report = sample();
    let values: [u64; PortCounters::FIELDS] = std::array::from_fn(|i| 100 + i as u64);
    let stats = PortCounters::from_values(values);
    report.ports[0].stats = stats;
    let text = encode_report(&report).expect("encodes");
    let (types, samples) = parse(&text);
    let port = [("port", "outside"), ("interface", "veth0")];
    let causes: f64 = samples
        .iter()
        .filter(|s| s.name == "portico_port_drops_total")
        .map(|s| s.value)
        .sum();
    assert_eq!(causes, stats.dropped() as f64, "every drop by one cause");
    assert_eq!(
        value(&samples, "portico_port_driver_drops_total", &port),
        stats.dropped() as f64
    );
    let mut exported = 0;
    for (i, (name, help)) in PortCounters::HELP.iter().enumerate() {
        let family = format!("portico_port_{name}");
        let own = types.get(&family).map(String::as_str);
        let mut alone = PortCounters::default();
        let mut one = alone.values();
        one[i] = 1;
        alone = PortCounters::from_values(one);
        match *name {
            "rx_frames" | "rx_bytes" | "tx_frames" | "tx_bytes" => {}
            _ if alone.dropped() == 1 => assert_eq!(own, None, "{name} is a drop cause"),
            _ => {
                exported += 1;
                assert_eq!(own, Some("counter"), "{name}\n{text}");
                assert_eq!(
                    value(&samples, &format!("{family}_total"), &port),
                    values[i] as f64,
                    "{name}"
                );
                // The help text is the field's, as the exposition escapes it.
                assert!(
                    text.contains(&format!("# HELP {family} {help}")),
                    "{name}: {help}\n{text}"
                );
            }
        }
    }
    assert_eq!(exported, ports::event_fields().count());
    let other_queues = PortCounters::HELP
        .iter()
        .position(|(n, _)| *n == "rx_other_queues")
        .expect("a field");
    assert_eq!(
        value(&samples, "portico_port_rx_other_queues_total", &port),
        values[other_queues] as f64
    );
    assert!(
        value(&samples, "portico_port_queue_socket_failures_total", &port) > 0.0,
        "{text}"
    );
}

/// Handoffs by direction and cause, and the steering installs, from the
/// workers' totals.
#[test]
fn handoffs_and_steering_installs_are_exported() {
    let mut report = sample();
    let c = Counters {
        handoff_out: 10,
        handoff_in: 9,
        handoff_snat_reply: 6,
        handoff_client: 3,
        handoff_icmp_error: 1,
        steering_installs: 2,
        steering_install_failures: 1,
        ..Counters::default()
    };
    report.total = CounterReport::new(&c, Gauges::default());
    let text = encode_report(&report).expect("encodes");
    let (types, samples) = parse(&text);
    for family in [
        "portico_handoff_packets",
        "portico_handoff_by_cause",
        "portico_steering_installs",
        "portico_steering_install_failures",
    ] {
        assert_eq!(
            types.get(family).map(String::as_str),
            Some("counter"),
            "{family}"
        );
    }
    for (direction, n) in [("out", 10.0), ("in", 9.0)] {
        let l = [("direction", direction)];
        assert_eq!(value(&samples, "portico_handoff_packets_total", &l), n);
    }
    for (cause, n) in [("snat_reply", 6.0), ("client", 3.0), ("icmp_error", 1.0)] {
        let l = [("cause", cause)];
        assert_eq!(value(&samples, "portico_handoff_by_cause_total", &l), n);
    }
    assert_eq!(value(&samples, "portico_steering_installs_total", &[]), 2.0);
    assert_eq!(
        value(&samples, "portico_steering_install_failures_total", &[]),
        1.0
    );
}

fn get(addr: SocketAddr, request: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connects");
    s.write_all(request.as_bytes()).expect("sends");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("reads");
    out
}

#[test]
fn the_server_answers_get_metrics_and_nothing_else() {
    let generation = Arc::new(AtomicU64::new(10));
    let server = {
        let generation = Arc::clone(&generation);
        MetricsServer::start("127.0.0.1:0".parse().expect("addr"), move || {
            let mut r = sample();
            r.snapshot.generation = generation.fetch_add(1, Ordering::Relaxed);
            r
        })
        .expect("starts")
    };
    let addr = server.addr();
    assert_ne!(addr.port(), 0);
    let first = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(first.starts_with("HTTP/1.1 200 OK\r\n"), "{first}");
    assert!(first.contains(CONTENT_TYPE), "{first}");
    assert!(
        first.contains("portico_snapshot_generation 10\n"),
        "{first}"
    );
    let second = get(addr, "GET /metrics?x=1 HTTP/1.0\r\n\r\n");
    assert!(
        second.contains("portico_snapshot_generation 11\n"),
        "fresh per scrape"
    );
    let (head, body) = second.split_once("\r\n\r\n").expect("head and body");
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .and_then(|v| v.parse().ok())
        .expect("content length");
    assert_eq!(length, body.len());
    assert!(get(addr, "GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
    assert!(get(addr, "POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
    drop(server);
    assert!(TcpStream::connect(addr).is_err(), "closed on drop");
}

#[test]
fn stalled_clients_neither_block_scrapes_nor_keep_their_slot() {
    use super::server::{MAX_CONNECTIONS, REQUEST_TIMEOUT_MS};
    use std::time::{Duration, Instant};
    let server =
        MetricsServer::start("127.0.0.1:0".parse().expect("addr"), sample).expect("starts");
    let addr = server.addr();
    // Clients that connect and say nothing, filling every slot but one.
    let silent: Vec<TcpStream> = (0..MAX_CONNECTIONS - 1)
        .map(|_| TcpStream::connect(addr).expect("connects"))
        .collect();
    // A client that trickles its head a byte at a time holds the last one.
    let mut trickler = TcpStream::connect(addr).expect("connects");
    trickler.write_all(b"G").expect("first byte");
    // Wait until the server has taken all of them (accept loop idles 50 ms).
    std::thread::sleep(Duration::from_millis(300));
    // One more is told at once that the endpoint is busy.
    let refused = get(addr, "GET /metrics HTTP/1.1\r\n\r\n");
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    // The stalled ones are cut off once the request deadline passes,
    // however they trickle, and their slots serve scrapes again.
    let started = Instant::now();
    let mut trickled = 0;
    while started.elapsed() < Duration::from_millis(REQUEST_TIMEOUT_MS + 500) {
        if trickler.write_all(b"E").is_err() {
            break;
        }
        trickled += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut rest = String::new();
    let _ = trickler.read_to_string(&mut rest);
    assert!(
        rest.is_empty(),
        "a trickled, never-finished head gets no answer: {rest}"
    );
    assert!(trickled >= 3, "the trickler kept sending for a while");
    let answer = get(addr, "GET /metrics HTTP/1.1\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    drop(silent);
    drop(server);
}
