//! The seeds reach the paths they are written for (a seed that stopped
//! reaching its path would leave it unfuzzed without failing anything),
//! and the checks catch what they are for.

use super::*;
use crate::counters::DropReason;

/// Runs the seed whose position in [`seed_inputs`] is `i`; its counters.
fn run_seed(i: usize) -> (RunStats, crate::counters::Counters) {
    let seed = &seed_inputs()[i];
    let mut h = SequenceHarness::new();
    let stats = h.run(seed).expect("invariants hold");
    (stats, h.counters().clone())
}

#[test]
fn the_conversation_seeds_open_use_and_close_a_flow_in_both_families() {
    for i in [0, 1] {
        let (stats, c) = run_seed(i);
        assert_eq!(c.flows_created, 1, "seed {i}: {c:?}");
        // SYN, SYN-ACK, ACK, data both ways, FIN both ways, last ACK.
        assert_eq!(stats.frames_sent, 8, "seed {i}: {stats:?}");
        assert_eq!(c.total_drops(), 0, "seed {i}: {c:?}");
    }
}

#[test]
fn the_ipv6_icmp_seed_translates_an_icmpv6_error() {
    let (stats, c) = run_seed(4);
    assert_eq!(stats.flows_created, 1, "{c:?}");
    assert_eq!(c.icmp_errors_translated, 1, "{c:?}");
}

#[test]
fn the_proxy_seeds_validate_a_cookie_splice_and_refuse_a_forged_one() {
    for i in [7, 8] {
        let (_, c) = run_seed(i);
        assert_eq!(c.syn_cookies_sent, 2, "seed {i}: {c:?}");
        assert_eq!(c.syn_cookies_validated, 1, "seed {i}: {c:?}");
        assert_eq!(c.syn_proxy_spliced, 1, "seed {i}: {c:?}");
        assert_eq!(
            c.dropped(DropReason::SynCookieInvalid),
            1,
            "seed {i}: {c:?}"
        );
        assert_eq!(c.total_drops(), 1, "seed {i}: {c:?}");
    }
}

#[test]
fn the_reset_seeds_answer_without_a_flow_and_after_the_backend_left() {
    for i in [9, 10] {
        let (_, c) = run_seed(i);
        assert_eq!(c.resets_sent, 2, "seed {i}: {c:?}");
        assert_eq!(c.flows_created, 1, "seed {i}: {c:?}");
    }
}

#[test]
fn the_challenge_seeds_earn_a_challenge_ack() {
    for i in [11, 12] {
        let (_, c) = run_seed(i);
        assert_eq!(c.challenge_acks_sent, 1, "seed {i}: {c:?}");
    }
}

#[test]
fn the_remap_seeds_remap_a_client_port() {
    for i in [13, 14] {
        let (_, c) = run_seed(i);
        assert_eq!(c.client_ports_remapped, 1, "seed {i}: {c:?}");
        assert_eq!(c.flows_created, 2, "seed {i}: {c:?}");
        assert_eq!(c.total_drops(), 0, "seed {i}: {c:?}");
    }
}

/// The frame check catches a bad L4 checksum in both families (the IPv4
/// header checksum alone would pass it).
#[test]
fn a_frame_with_a_bad_tcp_checksum_is_malformed_in_both_families() {
    use std::net::IpAddr;
    let ends: [((IpAddr, u16), (IpAddr, u16)); 2] = [
        ((VIP.into(), 80), (client(1).into(), 1001)),
        ((VIP6.into(), 80), (client6(1).into(), 1001)),
    ];
    for (from, to) in ends {
        let mut frame = tcp_frame(
            (OUT_MAC, ROUTER_MAC),
            (from, to),
            (crate::wire::tcp::flags::ACK, 1, 2),
            &[],
            b"data",
        );
        assert_eq!(check::malformed_output(&frame), None, "{from:?}");
        *frame.last_mut().unwrap() ^= 1;
        assert!(check::malformed_output(&frame).is_some(), "{from:?}");
    }
}

/// The counter check: one frame in, one verdict, one drop reason exactly
/// when dropped.
#[test]
fn the_counter_check_wants_one_verdict_and_its_drop_reason() {
    use crate::counters::Counters;
    use crate::packet::Verdict;
    let before = Counters::default();
    let mut received = before.clone();
    received.rx_packets += 1;
    let mut dropped = received.clone();
    dropped.drop(DropReason::NoFlow);
    let check = check::frame_counters;
    assert_eq!(check(&before, &received, Verdict::Forward(1)), Ok(()));
    assert_eq!(
        check(&before, &dropped, Verdict::Drop(DropReason::NoFlow)),
        Ok(())
    );
    assert!(check(&before, &received, Verdict::Pending).is_err());
    assert!(
        check(&before, &before, Verdict::Reply).is_err(),
        "not received"
    );
    assert!(check(&before, &dropped, Verdict::Reply).is_err());
    assert!(check(&before, &received, Verdict::Drop(DropReason::NoFlow)).is_err());
    assert!(check(&before, &dropped, Verdict::Drop(DropReason::NotOwned)).is_err());
}

/// Mode `auto` crosses its threshold both ways within one input: three
/// SYNs make flows, the fourth a cookie (validated by its ACK: a proxied
/// flow), and after everything expired the next SYN makes a flow again.
#[test]
fn the_auto_seeds_engage_the_proxy_above_the_threshold_and_release_it() {
    for i in [16, 17] {
        let (_, c) = run_seed(i);
        assert_eq!(c.syn_cookies_sent, 1, "seed {i}: {c:?}");
        assert_eq!(c.syn_cookies_validated, 1, "seed {i}: {c:?}");
        // 3 before the threshold, the proxied one, the one after expiry.
        assert_eq!(c.flows_created, 5, "seed {i}: {c:?}");
        assert_eq!(c.total_drops(), 0, "seed {i}: {c:?}");
    }
}

/// ECN and SACK through NAT: the whole conversation forwarded, nothing
/// dropped, in both families.
#[test]
fn the_ecn_sack_seeds_forward_every_segment() {
    for i in [18, 19] {
        let (stats, c) = run_seed(i);
        assert_eq!(c.flows_created, 1, "seed {i}: {c:?}");
        // SYN, SYN-ACK, ACK, data, data, ACK, data, FIN both ways, ACK.
        assert_eq!(stats.frames_sent, 10, "seed {i}: {stats:?}");
        assert_eq!(c.total_drops(), 0, "seed {i}: {c:?}");
    }
}

/// ECN and SACK through the SYN proxy: the ECN-setup SYN's cookie
/// validates, the flow is spliced, and the marked data passes.
#[test]
fn the_proxied_ecn_sack_seeds_validate_splice_and_forward() {
    for i in [20, 21] {
        let (_, c) = run_seed(i);
        assert_eq!(
            (
                c.syn_cookies_sent,
                c.syn_cookies_validated,
                c.syn_proxy_spliced
            ),
            (1, 1, 1),
            "seed {i}: {c:?}"
        );
        assert_eq!(c.total_drops(), 0, "seed {i}: {c:?}");
    }
}
