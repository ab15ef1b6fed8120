//! HTTP through `portico run` on veth: real curl in the client namespace,
//! real nginx (or the built-in server) in three backend namespaces, the
//! gateway namespace with no addresses and no forwarding. Each backend
//! answers `backend NAME saw $remote_addr`.

mod common;

use common::{curl, gateway, tally, topology};
use portico::demo::topology::{CLIENT_ADDR, NODE_ADDR, NODE_PORT, SNAT_ADDR, ServiceOptions, VIP};

/// Requests per address; each backend must get at least `MIN_SHARE` of them
/// (a third is expected; Maglev over random client ports).
const REQUESTS: usize = 150;
const MIN_SHARE: f64 = 0.15;

fn assert_spread(label: &str, bodies: &[Option<String>], backends: usize, source: &str) {
    let (per_backend, per_source, failed) = tally(bodies);
    assert_eq!(
        failed, 0,
        "{label}: failed requests; answers {per_backend:?}"
    );
    assert_eq!(
        per_backend.len(),
        backends,
        "{label}: every backend answers: {per_backend:?}"
    );
    for (name, n) in &per_backend {
        assert!(
            *n as f64 >= MIN_SHARE * REQUESTS as f64,
            "{label}: backend {name} got {n} of {REQUESTS}: {per_backend:?}"
        );
    }
    assert_eq!(
        per_source.keys().collect::<Vec<_>>(),
        vec![source],
        "{label}: the address the backends saw"
    );
}

#[test]
fn vip_and_node_port_reach_every_backend_from_the_snat_address() {
    let Some(t) = topology(
        "http::vip_and_node_port_reach_every_backend_from_the_snat_address",
        3,
    ) else {
        return;
    };
    let gw = gateway(&t, &ServiceOptions::all(&t));
    let snat = SNAT_ADDR.to_string();
    let vip = curl(&t, &format!("http://{VIP}/"), REQUESTS, true);
    assert_spread("VIP", &vip, 3, &snat);
    let node_port = curl(
        &t,
        &format!("http://{NODE_ADDR}:{NODE_PORT}/"),
        REQUESTS,
        true,
    );
    assert_spread("NodePort", &node_port, 3, &snat);
    let s = common::stats(&gw);
    assert!(
        common::number(&s, "/total/flows_created") >= 2 * REQUESTS as u64,
        "a flow per connection: {s}"
    );
}

#[test]
fn without_snat_the_backends_see_the_client_address() {
    let Some(t) = topology("http::without_snat_the_backends_see_the_client_address", 3) else {
        return;
    };
    let options = ServiceOptions {
        snat: false,
        ..ServiceOptions::all(&t)
    };
    let gw = gateway(&t, &options);
    let client = CLIENT_ADDR.to_string();
    let vip = curl(&t, &format!("http://{VIP}/"), REQUESTS, true);
    assert_spread("VIP without SNAT", &vip, 3, &client);
    let node_port = curl(
        &t,
        &format!("http://{NODE_ADDR}:{NODE_PORT}/"),
        REQUESTS,
        true,
    );
    assert_spread("NodePort without SNAT", &node_port, 3, &client);
    let s = common::stats(&gw);
    assert_eq!(common::number(&s, "/total/snat_allocations"), 0, "{s}");
}
