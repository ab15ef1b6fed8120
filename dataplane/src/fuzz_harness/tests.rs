//! The seeds reach the paths they are written for (a seed that stopped
//! reaching its path would leave it unfuzzed without failing anything).

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
