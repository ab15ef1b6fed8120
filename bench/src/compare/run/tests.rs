use super::super::rules::{Proto, Service, ServiceSet};
use super::measure::{OurTicks, is_paws, is_syn_retrans, pid_cpu_fields};
use super::rig::{client_addr, snat_addr};
use super::*;
use portico::demo::topology::{AFXDP_QUEUES, VIP};
use std::net::Ipv4Addr;

#[test]
fn wrk_summary_with_and_without_errors() {
    let ok = "Running 3s test @ http://192.0.2.10:80/\n  1 threads and 32 connections\n\
              12345 requests in 3.00s, 2.1MB read\nRequests/sec:   4115.00\nTransfer/sec: 700KB\n";
    assert_eq!(parse_wrk(ok), Some((12345, 4115.0, 0)));
    let bad = "  999 requests in 3.00s, 1MB read\n  Socket errors: connect 2, read 3, write 0, timeout 4\n\
               Non-2xx or 3xx responses: 5\nRequests/sec:    333.00\n";
    assert_eq!(parse_wrk(bad), Some((999, 333.0, 14)));
    assert_eq!(parse_wrk("unable to connect"), None);
    assert_eq!(
        parse_wrk_errors(bad),
        WrkErrors {
            connect: 2,
            read: 3,
            write: 0,
            timeout: 4,
            non_2xx: 5
        }
    );
    assert_eq!(parse_wrk_errors(ok), WrkErrors::default());
}

#[test]
fn conntrack_count_and_rss_parse() {
    assert_eq!(parse_conntrack_count("123456\n"), Some(123_456));
    assert_eq!(parse_conntrack_count("conntrack v1.4.7: error"), None);
    assert_eq!(parse_conntrack_count(""), None);
    assert!(rss_kb(std::process::id()).expect("own RSS") > 0);
    assert!(rss_kb(0).is_err());
}

#[test]
fn defences_parse_back_and_the_flood_subnet_is_nobodys() {
    for d in Defence::ALL {
        assert_eq!(d.key().parse::<Defence>().unwrap(), d);
    }
    assert!(matches!(
        "kernel".parse::<Defence>(),
        Err(CompareError::BadDefence(_))
    ));
    // The flood's sources are outside every address the rig gives out.
    let flood: crate::pktgen::SpoofRange = FLOOD_CIDR.parse().expect("CIDR");
    for i in 0..150 {
        assert!(!flood.contains(client_addr(i)));
        assert!(!flood.contains(snat_addr(i)));
    }
    assert!(!flood.contains(VIP));
    assert!(!flood.contains(portico::demo::topology::CLIENT_ADDR));
}

#[test]
fn wrk_latency_in_ms() {
    let text = "  Thread Stats   Avg      Stdev     Max   +/- Stdev\n\
                    Latency   912.00us  300.00us  20.00ms   90.00%\n\
                    Req/Sec    35.00k     1.00k   40.00k    70.00%\n\
                  Latency Distribution\n     50%  812.00us\n     75%    1.20ms\n\
                90%    2.00ms\n     99%    1.50s\n";
    let l = parse_wrk_latency(text).unwrap();
    assert_eq!(
        (l.mean_ms, l.p50_ms, l.p90_ms, l.p99_ms),
        (0.912, 0.812, 2.0, 1500.0)
    );
    // Minutes, and a distribution without its mean: not a latency.
    let minutes = text.replace("1.50s", "2.00m");
    assert_eq!(parse_wrk_latency(&minutes).unwrap().p99_ms, 120e3);
    assert_eq!(parse_wrk_latency("     50%    1.25ms\n"), None);
    assert_eq!(parse_wrk_latency("no distribution"), None);
}

#[test]
fn tcpext_counters_are_summed_by_name() {
    let netstat = "TcpExt: SyncookiesSent PAWSActive PAWSEstab TCPSynRetrans\n\
                   TcpExt: 1 2 3 4\n\
                   IpExt: InNoRoutes PAWSFake\n\
                   IpExt: 100 200\n";
    assert_eq!(tcpext_sum(netstat, is_paws), 5);
    assert_eq!(tcpext_sum(netstat, is_syn_retrans), 4);
    assert_eq!(tcpext_sum("", is_paws), 0);
}

#[test]
fn process_cpu_fields_and_deltas() {
    // Our own stat parses, and a process that appears counts whole.
    let me = pid_cpu_fields("self").expect("own stat");
    assert!(me.iter().all(|&t| t < u64::MAX / 4));
    assert_eq!(pid_cpu_fields("0"), None);
    let before = OurTicks {
        per_pid: [("10".to_owned(), 5), ("11".to_owned(), 7)].into(),
        reaped_children: 100,
    };
    let after = OurTicks {
        per_pid: [("10".to_owned(), 9), ("12".to_owned(), 3)].into(),
        reaped_children: 130,
    };
    assert_eq!(before.delta(&after), 4 + 3 + 30);
}

#[test]
fn names_parse_back() {
    for load in Load::ALL {
        assert_eq!(load.key().parse::<Load>().ok(), Some(load));
    }
    assert!("tcp".parse::<Load>().is_err());
    for d in [
        PorticoDriver::AfPacket,
        PorticoDriver::AfXdp,
        PorticoDriver::Dpdk,
    ] {
        assert_eq!(d.config_name().parse::<PorticoDriver>().ok(), Some(d));
    }
    assert_eq!(
        "afpacket-blocks".parse::<PorticoDriver>().ok(),
        Some(PorticoDriver::AfPacketBlocks)
    );
    assert_eq!(
        "afxdp-busy-poll".parse::<PorticoDriver>().ok(),
        Some(PorticoDriver::AfXdpBusyPoll)
    );
    assert!("xdp".parse::<PorticoDriver>().is_err());
}

#[test]
fn every_driver_row_gets_a_valid_configuration() {
    let set = ServiceSet {
        measured: vec![Service {
            vip: VIP,
            port: UDP_PORT,
            proto: Proto::Udp,
            syn_proxy: None,
            endpoints: vec![(Ipv4Addr::new(10, 1, 0, 10), UDP_BACKEND_PORT)],
        }],
        services: 5,
    };
    let snat = snat_addr(3);
    for driver in [
        PorticoDriver::AfPacket,
        PorticoDriver::AfXdp,
        PorticoDriver::Dpdk,
        PorticoDriver::AfPacketBlocks,
        PorticoDriver::AfXdpBusyPoll,
    ] {
        let workers = workers_for(driver, 1);
        let text = portico_config(driver, workers, ("go1", "gi1"), &set, snat, "");
        // The schema accepts it whatever this build's drivers are.
        let file =
            nic_config::parse_file(&text).unwrap_or_else(|e| panic!("{driver:?}: {e}\n{text}"));
        assert_eq!(file.ports.len(), 2, "{text}");
        for port in &file.ports {
            assert_eq!(port.driver.to_string(), driver.config_name());
            let want_device = (driver == PorticoDriver::Dpdk).then(|| DPDK_DEVICE.to_owned());
            assert_eq!(port.dpdk_device, want_device, "{text}");
        }
        if driver == PorticoDriver::Dpdk {
            assert_eq!(file.dpdk.memory_mb, u64::from(DPDK_MEMORY_MB), "{text}");
        }
        // Validation passes, except for DPDK in a build without it.
        match nic_config::parse(&text) {
            Ok(plan) => {
                assert_eq!(plan.dataplane.workers, workers as usize);
                assert_eq!(plan.services.len(), 5);
                let blocks = plan.dataplane.afpacket.rx_ring == nic_config::AfpacketRxRing::Blocks;
                assert_eq!(blocks, driver == PorticoDriver::AfPacketBlocks);
                let busy = plan.dataplane.afxdp.busy_poll;
                assert_eq!(busy, driver == PorticoDriver::AfXdpBusyPoll);
            }
            Err(e) => assert!(
                driver == PorticoDriver::Dpdk && e.to_string().contains("dpdk"),
                "{driver:?}: {e}\n{text}"
            ),
        }
    }
    // Keys given for `[dataplane]` land in that table.
    let text = portico_config(
        PorticoDriver::AfPacket,
        1,
        ("go1", "gi1"),
        &set,
        snat,
        "idle_spin_polls = 7",
    );
    let plan = nic_config::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(plan.dataplane.idle_spin_polls, 7);
    // Queue-bound drivers run one worker per veth queue.
    assert_eq!(workers_for(PorticoDriver::AfPacket, 1), 1);
    assert_eq!(workers_for(PorticoDriver::AfXdp, 1), AFXDP_QUEUES);
    assert_eq!(workers_for(PorticoDriver::Dpdk, 3), AFXDP_QUEUES);
}

#[test]
fn addresses_stay_in_their_subnets_and_clear_of_fixed_ones() {
    for i in 0..1000 {
        let c = client_addr(i).octets();
        assert_eq!(&c[..3], &[192, 0, 2]);
        assert!((101..=250).contains(&c[3]));
        let s = snat_addr(i).octets();
        assert_eq!(&s[..3], &[10, 1, 0]);
        assert!((100..=249).contains(&s[3]));
    }
}
