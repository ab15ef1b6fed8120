//! Tests of the text the admin clients print.

use super::*;
use crate::admin::report::tests::worker;
use crate::admin::{
    BackendReport, ControlPlaneReport, ListenerReport, NeighbourReport, PortReport, SnapshotReport,
    sum_workers,
};

#[test]
fn port_counters_of_an_older_gateway_read_missing_counters_as_zero() {
    let c: PortCounters =
        serde_json::from_str(r#"{"rx_frames": 3, "kernel_rx_drops": 2}"#).expect("parses");
    assert_eq!((c.rx_frames, c.kernel_rx_drops), (3, 2));
    assert_eq!((c.kernel_rx_dropped, c.kernel_fill_ring_empty), (0, 0));
}

/// Every port counter a driver fills shows in the text (by name, when
/// not zero), so none is visible only in the JSON.
#[test]
fn every_port_counter_shows_in_the_text() {
    let mut values = [0u64; PortCounters::FIELDS];
    for (i, v) in values.iter_mut().enumerate() {
        *v = 1_000 + i as u64;
    }
    let json: serde_json::Map<String, serde_json::Value> = PortCounters::HELP
        .iter()
        .zip(values)
        .map(|(&(name, _), v)| (name.to_owned(), v.into()))
        .collect();
    let stats: PortCounters =
        serde_json::from_value(json.into()).expect("every HELP name is a field");
    assert_eq!(stats.values(), values);
    let report = StatsReport {
        pid: 1,
        uptime_ms: 1,
        config: "portico.toml".into(),
        snapshot: SnapshotReport {
            generation: 1,
            age_ms: 0,
        },
        total: sum_workers(&[]),
        workers: Vec::new(),
        ports: vec![PortReport {
            port: 0,
            name: "outside".into(),
            interface: "veth0".into(),
            stats,
        }],
        services: Vec::new(),
        snat: Vec::new(),
        control_plane: ControlPlaneReport::default(),
        neighbours: NeighbourReport::default(),
        announcements: Default::default(),
        bgp: BgpReport::default(),
    };
    let text = report.to_string();
    for (i, &(name, _)) in PortCounters::HELP.iter().enumerate() {
        let v = values[i];
        assert!(
            text.contains(&format!("={v}")) || text.contains(&format!(" {v} ")),
            "{name} ({v}) missing: {text}"
        );
    }
}

#[test]
fn report_survives_json_and_renders() {
    let workers = vec![worker(0, 10, &[(DropReason::NotOwned, 2)], 1)];
    let report = StatsReport {
        pid: 42,
        uptime_ms: 65_000,
        config: "/etc/portico.toml".into(),
        snapshot: SnapshotReport {
            generation: 3,
            age_ms: 1500,
        },
        total: sum_workers(&workers),
        workers,
        ports: vec![PortReport {
            port: 0,
            name: "outside".into(),
            interface: "veth0".into(),
            stats: PortCounters {
                rx_frames: 11,
                kernel_rx_drops: 4,
                tx_ring_full: 2,
                rx_other_queues: 5,
                queue_socket_failures: 1,
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
            listeners: vec![ListenerReport {
                kind: "vip".into(),
                address: "203.0.113.10:80".into(),
            }],
            backends: vec![BackendReport {
                address: "10.1.0.10:8080".into(),
                condition: "ready".into(),
                weight: 3,
                packets: 7,
                bytes: 700,
                flows_created: 2,
                flows_active: 1,
            }],
        }],
        snat: Vec::new(),
        control_plane: ControlPlaneReport {
            members: Some(crate::admin::MembersReport {
                me: "gw-a".into(),
                known: true,
                me_live: true,
                live: vec!["gw-a".into(), "gw-b".into()],
            }),
            ..ControlPlaneReport::default()
        },
        neighbours: NeighbourReport {
            capacity: 16_384,
            entries: 21,
            statics: 20,
            refused: 3,
            reclaimed: 1_234,
            compactions: 5,
        },
        announcements: crate::admin::AnnouncementReport {
            announced: vec![std::net::Ipv4Addr::new(203, 0, 113, 10)],
            silent: vec![std::net::Ipv4Addr::new(203, 0, 113, 11)],
            ..Default::default()
        },
        bgp: BgpReport::default(),
    };
    let json = serde_json::to_string(&report).expect("serializes");
    let value: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert_eq!(value["workers"][0]["rx_packets"], 10, "flattened");
    assert_eq!(value["ports"][0]["rx_frames"], 11, "flattened");
    assert_eq!(value["total"]["drops"]["not_owned"], 2);
    let back: StatsReport = serde_json::from_str(&json).expect("parses back");
    assert_eq!(back, report);
    let text = report.to_string();
    assert!(text.contains("generation 3"), "{text}");
    assert!(text.contains("not_owned"), "{text}");
    assert!(text.contains("outside"), "{text}");
    assert!(
        text.contains(
            "kernel: rx_ring_full=4 portico: tx_ring_full=2 \
             driver: rx_other_queues=5 queue_socket_failures=1\n"
        ),
        "drops by cause, the kernel's apart, then the other driver counters: {text}"
    );
    assert_eq!(value["ports"][0]["rx_other_queues"], 5);
    assert_eq!(value["ports"][0]["queue_socket_failures"], 1);
    assert!(text.contains("1m05s"), "{text}");
    assert!(
        text.contains(
            "neighbours: 21 of 16384 (20 static), refused 3, reclaimed 1234 in 5 compactions"
        ),
        "{text}"
    );
    assert_eq!(value["neighbours"]["reclaimed"], 1_234);
    assert!(
        text.contains("l2: announcing 1 of 2 VIPs [203.0.113.10]"),
        "{text}"
    );
    assert!(text.contains("members: gw-a, gw-b (gw-a live)"), "{text}");
    assert!(
        text.contains("web (tcp)") && text.contains("10.1.0.10:8080 ready"),
        "{text}"
    );
    assert_eq!(value["services"][0]["backends"][0]["packets"], 7);
    assert_eq!(value["services"][0]["backends"][0]["weight"], 3);
    let table = ServicesTable(&report.services).to_string();
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("TCP") && l.contains("web") && l.contains(" 7 ")),
        "{table}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("203.0.113.10:80") && l.contains("(vip)")),
        "{table}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("  -> 10.1.0.10:8080")
            && l.split_whitespace().collect::<Vec<_>>()[2..5] == ["3", "ready", "7"]),
        "{table}"
    );
}

#[test]
fn bgp_table_shows_every_session() {
    use crate::admin::BgpPeerReport;
    assert_eq!(
        BgpTable(&BgpReport::default()).to_string(),
        "no BGP peers configured\n"
    );
    let report = BgpReport {
        peers: vec![BgpPeerReport {
            peer: "192.0.2.100:179".into(),
            peer_asn: 65000,
            my_asn: 65001,
            state: "Established".into(),
            state_number: 6,
            uptime_s: Some(65),
            hold_time_s: 9,
            prefixes_sent: 2,
            prefixes_desired: 2,
            updates_sent: 3,
            updates_received: 1,
            flaps: 1,
            last_error: Some("hold timer expired".into()),
            ..Default::default()
        }],
        vips: vec!["192.0.2.10".into(), "192.0.2.11".into()],
        withdrawn: Some("watchdog".into()),
        watchdog_trips: 4,
    };
    let text = BgpTable(&report).to_string();
    let row: Vec<&str> = text.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        row[..9],
        [
            "192.0.2.100:179",
            "65000",
            "65001",
            "Established",
            "1m05s",
            "2/2",
            "3",
            "1",
            "1"
        ],
        "{text}"
    );
    assert!(text.contains("hold timer expired"), "{text}");
    assert!(text.contains("192.0.2.10, 192.0.2.11"), "{text}");
    assert!(
        text.contains("WITHDRAWN: a worker stopped polling (watchdog; 4 trips)"),
        "{text}"
    );
}

#[test]
fn both_families_show_in_stats_services_and_bgp() {
    use crate::admin::BgpPeerReport;
    use crate::admin::report::{SnatAddrReport, snat_reports};
    use dataplane::counters::SnatAddrStats;
    // Worker 0: 10 flows of which 5 IPv6 (the helper's halves).
    let workers = vec![worker(0, 10, &[], 10), worker(1, 4, &[], 2)];
    let snat = snat_reports(&[
        vec![
            SnatAddrStats {
                addr: "10.1.0.1".parse().unwrap(),
                in_use: 3,
                exhausted: 0,
            },
            SnatAddrStats {
                addr: "2001:db8:1::1".parse().unwrap(),
                in_use: 5,
                exhausted: 1,
            },
        ],
        vec![SnatAddrStats {
            addr: "2001:db8:1::1".parse().unwrap(),
            in_use: 1,
            exhausted: 0,
        }],
    ]);
    assert_eq!(
        snat[1],
        SnatAddrReport {
            address: "2001:db8:1::1".into(),
            family: "ipv6".into(),
            ports_in_use: 6,
            exhausted: 1,
        }
    );
    assert_eq!(snat[0].family, "ipv4");
    let report = StatsReport {
        pid: 1,
        uptime_ms: 1_000,
        config: "dual.toml".into(),
        snapshot: SnapshotReport {
            generation: 1,
            age_ms: 0,
        },
        total: sum_workers(&workers),
        workers,
        ports: Vec::new(),
        services: vec![ServiceReport {
            name: "web6".into(),
            protocol: "tcp".into(),
            listeners: vec![ListenerReport {
                kind: "vip".into(),
                address: "[2001:db8:ffff::10]:80".into(),
            }],
            backends: vec![BackendReport {
                address: "[2001:db8:1::10]:8080".into(),
                condition: "ready".into(),
                weight: 1,
                ..BackendReport::default()
            }],
            ..ServiceReport::default()
        }],
        snat,
        control_plane: ControlPlaneReport::default(),
        neighbours: NeighbourReport::default(),
        announcements: crate::admin::AnnouncementReport {
            announced6: vec!["2001:db8:ffff::10".parse().unwrap()],
            ..crate::admin::AnnouncementReport::default()
        },
        bgp: BgpReport::default(),
    };
    let text = report.to_string();
    assert!(
        text.contains("  by family: ipv4 6 live, 6 snat tuples; ipv6 6 live, 6 snat tuples\n"),
        "{text}"
    );
    assert!(
        text.contains("  snat 2001:db8:1::1: ports in use 6, exhausted 1\n"),
        "{text}"
    );
    assert!(
        text.contains("  l2: announcing 1 of 1 VIPs [2001:db8:ffff::10]\n"),
        "{text}"
    );
    let table = ServicesTable(&report.services).to_string();
    assert!(
        table.contains("      [2001:db8:ffff::10]:80       (vip)\n"),
        "{table}"
    );
    assert!(table.contains("  -> [2001:db8:1::10]:8080"), "{table}");

    let bgp = BgpReport {
        peers: vec![
            BgpPeerReport {
                peer: "[2001:db8::100]:179".into(),
                state: "Established".into(),
                prefixes_sent: 3,
                prefixes_sent_v6: 1,
                prefixes_skipped: 2,
                families_offered: vec!["ipv4-unicast".into(), "ipv6-unicast".into()],
                families: vec!["ipv4-unicast".into(), "ipv6-unicast".into()],
                extended_next_hop_offered: true,
                extended_next_hop: true,
                next_hop_v6: Some("2001:db8::2".into()),
                next_hop_v6_link_local: Some("fe80::2".into()),
                local_address: Some("2001:db8::2".into()),
                ..Default::default()
            },
            BgpPeerReport {
                peer: "[fe80::1%out-host]:179".into(),
                state: "Active".into(),
                families_offered: vec!["ipv4-unicast".into()],
                extended_next_hop_offered: true,
                ttl_security_hops: Some(2),
                ttl: 255,
                min_ttl: Some(254),
                ..Default::default()
            },
        ],
        ..BgpReport::default()
    };
    let text = BgpTable(&bgp).to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[2..4],
        [
            "  families offered [ipv4-unicast, ipv6-unicast], negotiated [ipv4-unicast, ipv6-unicast]; extended next hop (RFC 8950): negotiated",
            "  ipv6 next hop 2001:db8::2 + fe80::2; local address 2001:db8::2; ipv6 prefixes sent 1, skipped 2 (family not negotiated)",
        ],
        "{text}"
    );
    assert_eq!(
        lines[5..8],
        [
            "  families offered [ipv4-unicast], negotiated [none]; extended next hop (RFC 8950): offered, not negotiated",
            "  ipv6 next hop none; local address -; ipv6 prefixes sent 0, skipped 0 (family not negotiated)",
            "  ttl security (GTSM, RFC 5082): on, router 2 hops: sends ttl 255, accepts ttl >= 254",
        ],
        "{text}"
    );
    assert!(lines[4].starts_with("[fe80::1%out-host]:179 "), "{text}");
}

#[test]
fn durations_read_naturally() {
    assert_eq!(fmt_duration_ms(12), "12ms");
    assert_eq!(fmt_duration_ms(4_500), "4.5s");
    assert_eq!(fmt_duration_ms(3_723_000), "1h02m03s");
}
