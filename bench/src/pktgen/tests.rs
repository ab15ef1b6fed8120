use super::*;
use proptest::prelude::*;

fn spec(proto: TrafficProto, flows: u32, frame_bytes: usize) -> FrameSpec {
    FrameSpec {
        src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
        dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
        src_ip: Ipv4Addr::new(10, 0, 0, 1),
        dst_ip: Ipv4Addr::new(10, 9, 0, 1),
        dst_port: 9000,
        proto,
        flows,
        frame_bytes,
    }
}

fn l4_ok(frame: &[u8]) -> bool {
    let l = layout(frame).unwrap();
    let ip_ok = checksum::checksum(&frame[IP_OFF..l.l4_off]) == 0;
    let src = ip_at(frame, IP_OFF + 12).unwrap();
    let dst = ip_at(frame, IP_OFF + 16).unwrap();
    ip_ok && checksum::verify_l4(src, dst, l.proto, &frame[l.l4_off..l.ip_end])
}

#[test]
fn parse_mac_accepts_only_six_hex_pairs() {
    assert_eq!(
        parse_mac("02:ab:00:00:10:ff"),
        Ok(MacAddr([2, 0xab, 0, 0, 0x10, 0xff]))
    );
    for bad in [
        "",
        "02:ab:00:00:10",
        "02:ab:00:00:10:ff:00",
        "2:ab:00:00:10:ff",
        "zz:ab:00:00:10:ff",
    ] {
        assert!(parse_mac(bad).is_err(), "{bad}");
    }
}

#[test]
fn validate_rejects_small_big_and_zero_flows() {
    let min = TrafficProto::Udp.min_frame_bytes();
    assert!(spec(TrafficProto::Udp, 1, min).validate().is_ok());
    assert!(spec(TrafficProto::Udp, 1, min - 1).validate().is_err());
    assert!(spec(TrafficProto::TcpSyn, 1, min).validate().is_err());
    assert!(
        spec(TrafficProto::Udp, 1, MAX_FRAME_BYTES + 1)
            .validate()
            .is_err()
    );
    assert!(spec(TrafficProto::Udp, 0, 64).validate().is_err());
}

#[test]
fn flows_are_distinct_five_tuples() {
    let s = spec(TrafficProto::Udp, 200_000, 128);
    let mut seen = std::collections::HashSet::new();
    for i in 0..200_000u64 {
        assert!(seen.insert(s.flow_source(i)));
    }
    // Flow index wraps at the flow count.
    assert_eq!(s.flow_source(200_000), s.flow_source(0));
}

proptest! {
    #[test]
    fn stamped_frames_parse_back_and_checksum(
        tcp in any::<bool>(),
        flows in 1u32..100_000,
        extra in 0usize..1400,
        seq in any::<u64>(),
        sent_ns in any::<u64>(),
    ) {
        let proto = if tcp { TrafficProto::TcpSyn } else { TrafficProto::Udp };
        let s = spec(proto, flows, proto.min_frame_bytes() + extra);
        let mut frame = s.template();
        prop_assert_eq!(frame.len(), s.frame_bytes);
        prop_assert!(stamp(&mut frame, &s, seq, sent_ns));
        prop_assert!(l4_ok(&frame));
        prop_assert_eq!(parse_probe(&frame), Some(Probe { kind: KIND_PROBE, seq, sent_ns }));
        let (ip, port) = s.flow_source(seq);
        prop_assert_eq!(&frame[26..30], &ip.octets()[..]);
        prop_assert_eq!(&frame[34..36], &port.to_be_bytes()[..]);

        // The echo swaps everything back and keeps the probe.
        let before = frame.clone();
        let probe = echo_in_place(&mut frame);
        prop_assert_eq!(probe, Some(Probe { kind: KIND_PROBE, seq, sent_ns }));
        prop_assert!(l4_ok(&frame));
        prop_assert_eq!(parse_probe(&frame), Some(Probe { kind: KIND_ECHO, seq, sent_ns }));
        prop_assert_eq!(&frame[0..6], &before[6..12]);
        prop_assert_eq!(&frame[6..12], &before[0..6]);
        prop_assert_eq!(&frame[26..30], &before[30..34]);
        prop_assert_eq!(&frame[30..34], &before[26..30]);
        prop_assert_eq!(&frame[34..36], &before[36..38]);
        if tcp {
            prop_assert_eq!(frame[34 + 13], TCP_SYN | TCP_ACK);
            let ack = u32::from_be_bytes(frame[42..46].try_into().unwrap());
            prop_assert_eq!(ack, (seq as u32).wrapping_add(1));
        }
        // An echo is never echoed again.
        prop_assert_eq!(echo_in_place(&mut frame), None);
    }

    #[test]
    fn parsing_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut b = bytes.clone();
        let _ = parse_probe(&bytes);
        let _ = echo_in_place(&mut b);
        let s = spec(TrafficProto::Udp, 1, 80);
        let _ = stamp(&mut b, &s, 1, 1);
    }

    #[test]
    fn truncated_frames_are_not_probes(cut in 0usize..64) {
        let s = spec(TrafficProto::Udp, 1, 64);
        let mut frame = s.template();
        stamp(&mut frame, &s, 7, 9);
        prop_assert_eq!(parse_probe(&frame[..cut]), None);
    }

    #[test]
    fn histogram_quantiles_are_within_a_64th_of_exact(
        mut values in proptest::collection::vec(0u64..10_000_000_000, 1..500),
        q in 0.0f64..=1.0,
    ) {
        let mut h = Histogram::default();
        for &v in &values {
            h.record(v);
        }
        values.sort_unstable();
        let rank = ((q * values.len() as f64).ceil() as usize).max(1);
        let exact = values[rank - 1];
        let got = h.quantile(q).unwrap();
        prop_assert!(got >= exact, "got {} exact {}", got, exact);
        prop_assert!(got - exact <= exact / 64, "got {} exact {}", got, exact);
        let p = h.percentiles().unwrap();
        prop_assert!(p.min_ns <= p.p50_ns && p.p50_ns <= p.p90_ns);
        prop_assert!(p.p90_ns <= p.p99_ns && p.p99_ns <= p.max_ns);
        prop_assert_eq!(p.max_ns, *values.last().unwrap());
        prop_assert_eq!(p.min_ns, values[0]);
    }

    #[test]
    fn seq_tracker_loss_is_missing_distinct_sequences(
        keep in proptest::collection::vec(any::<bool>(), 1..300),
    ) {
        let mut t = SeqTracker::default();
        let kept: Vec<u64> = keep.iter().enumerate().filter(|(_, k)| **k).map(|(i, _)| i as u64).collect();
        for &s in &kept {
            t.record(s);
        }
        let expected = kept.last().map_or(0, |l| l + 1);
        prop_assert_eq!(t.expected(), expected);
        prop_assert_eq!(t.lost(), expected - kept.len() as u64);
        prop_assert_eq!(t.reordered, 0);
    }
}

#[test]
fn histogram_bucket_edges_are_monotonic_and_cover_u64() {
    let mut prev = None;
    for b in 0..BUCKETS {
        let high = bucket_high(b);
        assert_eq!(bucket_of(high), b, "bucket {b}");
        if let Some(p) = prev {
            assert!(high > p);
            assert_eq!(bucket_of(p + 1), b);
        }
        prev = Some(high);
    }
    assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    assert!(Histogram::default().percentiles().is_none());
}

#[test]
fn reordered_sequences_do_not_count_as_new() {
    let mut t = SeqTracker::default();
    for s in [0, 2, 1, 3] {
        t.record(s);
    }
    assert_eq!((t.expected(), t.lost(), t.reordered), (4, 0, 1));
}

#[test]
fn flow_index_inverts_flow_source() {
    let s = spec(TrafficProto::TcpStream, 200_000, 80);
    for i in [0u64, 1, 64_511, 64_512, 64_513, 199_999] {
        let (ip, port) = s.flow_source(i);
        assert_eq!(s.flow_index(ip, port), Some(i));
    }
    // Ports below the base, addresses below the first and flows past the
    // count belong to no flow.
    assert_eq!(s.flow_index(Ipv4Addr::new(10, 0, 0, 1), 80), None);
    assert_eq!(s.flow_index(Ipv4Addr::new(10, 0, 0, 0), 2000), None);
    assert_eq!(s.flow_index(Ipv4Addr::new(10, 0, 0, 5), 2000), None);
}

fn tcp_field(frame: &[u8], off: usize) -> u32 {
    u32::from_be_bytes(frame[34 + off..34 + off + 4].try_into().unwrap())
}

proptest! {
    /// A stream flow through the sink's echo: SYN → SYN-ACK → data both
    /// ways, every sequence and ack number where a real connection's would
    /// be, checksums valid throughout.
    #[test]
    fn stream_flow_handshakes_then_exchanges_data(
        flows in 1u32..300_000,
        flow_pick in any::<u64>(),
        extra in 0usize..1000,
        rounds in 1usize..20,
    ) {
        let s = spec(TrafficProto::TcpStream, flows, TrafficProto::TcpStream.min_frame_bytes() + extra);
        let flow = flow_pick % u64::from(flows);
        let template = s.template();
        let mut state = StreamFlow::default();
        prop_assert!(state.ready(0, 1_000));

        // SYN.
        let syn = state.next_segment(flow, 5);
        prop_assert_eq!(syn.flags, TCP_SYN);
        prop_assert_eq!(syn.seq, stream_isn(flow));
        prop_assert!(!state.ready(6, 1_000));
        prop_assert!(state.ready(1_005, 1_000));
        let mut frame = template.clone();
        prop_assert!(stamp_stream(&mut frame, &s, flow, syn, 0, 5));
        prop_assert!(l4_ok(&frame));
        let (ip, port) = s.flow_source(flow);
        prop_assert_eq!(&frame[26..30], &ip.octets()[..]);
        prop_assert_eq!(&frame[34..36], &port.to_be_bytes()[..]);
        prop_assert!(echo_in_place(&mut frame).is_some());
        prop_assert!(l4_ok(&frame));
        let synack = parse_tcp_echo(&frame).unwrap();
        prop_assert_eq!(synack.flags, TCP_SYN | TCP_ACK);
        prop_assert_eq!(s.flow_index(synack.dst, synack.dst_port), Some(flow));
        prop_assert!(state.on_echo(&synack));
        prop_assert_eq!(state.state, StreamState::Established);
        prop_assert!(state.ready(6, 1_000));

        let payload = (frame.len() - 54) as u32;
        let isn = stream_isn(flow);
        for round in 0..rounds {
            let seg = state.next_segment(flow, 10);
            prop_assert_eq!(seg.flags, TCP_ACK | TCP_PSH);
            prop_assert_eq!(seg.seq, isn.wrapping_add(1).wrapping_add(round as u32 * payload));
            prop_assert_eq!(seg.ack, isn.wrapping_add(1).wrapping_add(round as u32 * payload));
            let mut data = template.clone();
            prop_assert!(stamp_stream(&mut data, &s, flow, seg, round as u64 + 1, 10));
            prop_assert!(l4_ok(&data));
            prop_assert!(echo_in_place(&mut data).is_some());
            prop_assert!(l4_ok(&data));
            // The sink's segment starts where the client acked and acks the
            // client's payload.
            prop_assert_eq!(tcp_field(&data, 4), seg.ack);
            prop_assert_eq!(tcp_field(&data, 8), seg.seq.wrapping_add(payload));
            let echo = parse_tcp_echo(&data).unwrap();
            prop_assert_eq!(echo.flags, TCP_ACK | TCP_PSH);
            prop_assert_eq!(echo.payload_len, payload);
            prop_assert!(state.on_echo(&echo));
            // The same answer again (a duplicate) moves nothing.
            prop_assert!(!state.on_echo(&echo));
        }
    }
}
