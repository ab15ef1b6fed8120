//! Thousands of short connections (`Connection: close`, so the backend
//! closes first and holds TIME_WAIT for the SNAT tuple) complete without a
//! single SYN retransmission at the client: SNAT never hands a port to a
//! new connection while the backend still has the old one in TIME_WAIT.
//!
//! To make port reuse happen within the test, conntrack forgets closed
//! flows after 1 s (their tuples go back to the SNAT allocator) and the
//! port range is a few thousand ports; the quarantine (default 60 s, Linux's
//! TIME_WAIT length) must keep recently released tuples away from the same
//! backend.

mod common;

use common::{client_tcp_counter, gateway, number, stats_until, topology};
use portico::demo::topology::ServiceOptions;
use std::time::Duration;

const CONNECTIONS: u64 = 2000;

#[test]
fn thousands_of_short_connections_cause_no_syn_retransmission() {
    let Some(t) = topology(
        "short_connections::thousands_of_short_connections_cause_no_syn_retransmission",
        3,
    ) else {
        return;
    };
    let options = ServiceOptions {
        dataplane_extra: "[dataplane.snat]\nport_range = \"20000-27999\"\n\n\
                          [dataplane.conntrack.timeouts]\ntcp_time_wait_s = 1\ntcp_close_s = 1\n"
            .to_owned(),
        ..ServiceOptions::all(&t)
    };
    let gw = gateway(&t, &options);
    let retrans = |t: &_| client_tcp_counter(t, "/proc/net/snmp", "Tcp", "RetransSegs");
    let syn_retrans = |t: &_| client_tcp_counter(t, "/proc/net/netstat", "TcpExt", "TCPSynRetrans");
    let (retrans_before, syn_before) = (retrans(&t), syn_retrans(&t));

    // Two rounds with a pause, so the second round allocates from tuples
    // the first released (conntrack forgets them after ~1 s).
    for _ in 0..2 {
        let (ok, failures) = common::http_get(&t, CONNECTIONS / 2, 8, Duration::from_secs(240));
        assert_eq!(
            ok,
            CONNECTIONS / 2,
            "every connection answered; failures: {failures:?}"
        );
        std::thread::sleep(Duration::from_secs(3));
    }

    let s = stats_until(&gw, |s| {
        number(s, "/total/flows_expired") >= CONNECTIONS / 2
    });
    let syn_delta = syn_retrans(&t) - syn_before;
    let retrans_delta = retrans(&t) - retrans_before;
    assert_eq!(
        syn_delta, 0,
        "SYN retransmissions at the client (TcpExt TCPSynRetrans); gateway: {s}"
    );
    assert_eq!(
        retrans_delta, 0,
        "retransmitted segments at the client (Tcp RetransSegs); gateway: {s}"
    );
    assert!(number(&s, "/total/snat_allocations") >= CONNECTIONS, "{s}");
    assert_eq!(number(&s, "/total/drops/snat_exhausted"), 0, "{s}");
    eprintln!(
        "{CONNECTIONS} connections: snat allocations {}, quarantine reuses {}, flows expired {}",
        number(&s, "/total/snat_allocations"),
        number(&s, "/total/snat_quarantine_reuses"),
        number(&s, "/total/flows_expired"),
    );
}
