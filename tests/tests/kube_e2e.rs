//! Portico driven by a real Kubernetes API server forwards real traffic:
//! `portico run` with a `[kubernetes]` section in the gateway namespace of
//! the demo topology ([`portico::demo::topology`]), kube-apiserver + etcd
//! from the harness ([`portico_tests::kube_cluster`]), real nginx backends
//! and real curl in the client namespace.
//!
//! The gateway namespace cannot reach the host's 127.0.0.1, so the API
//! server binds to the host end of a veth pair into the gateway namespace
//! (a /30 out of 10.254.0.0/16, unique per process); etcd stays on
//! 127.0.0.1. That veth carries only the control plane's kube client; the
//! gateway's packet ports are the topology's two other veths.
//!
//! Every wait is bounded (`common::kube::WAIT`); no test asserts a duration.

mod common;

use common::kube::{curl_vip, endpoint_slice, eventually, lb_service, status_ips};
use common::{router, tally};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, PostParams};
use portico::demo::topology::{
    BACKEND_HTTP_PORT, NODE_ADDR, SNAT_ADDR, Topology, backend_addr, backend_name,
};
use portico_tests::HostVeth;
use portico_tests::kube_cluster::KubeCluster;
use std::net::Ipv4Addr;

const NS: &str = "default";
const SERVICE: &str = "web";
/// Requests per check; with two backends each must answer at least
/// `MIN_SHARE` of them (half is expected; Maglev over random client ports).
const REQUESTS: usize = 60;
const MIN_SHARE: f64 = 0.15;
/// The address pool, inside the client-facing subnet 192.0.2.0/24.
const POOL_FIRST: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 20);
const POOL_LAST: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 29);

/// The gateway's configuration: the topology's two ports, no static
/// services, the Kubernetes source and one pool in the client subnet.
fn gateway_config(t: &Topology, kubeconfig: &std::path::Path) -> String {
    format!(
        r#"# Written by tests/tests/kube_e2e.rs.
[dataplane]
workers = 1
idle = "adaptive"

[[port]]
name = "outside"
driver = "{driver}"
interface = "{outside}"
role = "outside"
node_addresses = ["{NODE_ADDR}/24"]

[[port]]
name = "inside"
driver = "{driver}"
interface = "{inside}"
role = "inside"
snat_addresses = ["{SNAT_ADDR}/24"]

[kubernetes]
kubeconfig = "{kubeconfig}"
serve_unclassed = true
debounce_ms = 5
debounce_max_ms = 50
lease_name = "portico-e2e"
lease_duration_ms = 3000
renew_deadline_ms = 2000
retry_period_ms = 300

[[address_pool]]
name = "public"
addresses = ["{POOL_FIRST}-{POOL_LAST}"]
"#,
        driver = t.driver,
        outside = t.outside_if,
        inside = t.inside_if,
        kubeconfig = kubeconfig.display(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubernetes_load_balancer_service_forwards_follows_readiness_and_goes_away() {
    const TEST: &str =
        "kube_e2e::a_kubernetes_load_balancer_service_forwards_follows_readiness_and_goes_away";
    let Some(t) = common::topology(TEST, 2) else {
        return;
    };
    let Some((_link, cluster)) = api_server(TEST, &t).await else {
        return;
    };
    let client = cluster.client();
    let gw = t
        .start_gateway(&gateway_config(&t, cluster.kubeconfig_path()))
        .expect("portico run starts");
    let log = || gw.log_text();

    // A LoadBalancer Service over both backends: Portico hands out an
    // address of the pool and writes it to the status.
    let services: Api<Service> = Api::namespaced(client.clone(), NS);
    services
        .create(&PostParams::default(), &lb())
        .await
        .expect("create the Service");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), NS);
    slices
        .create(&PostParams::default(), &slice(&[(0, true), (1, true)]))
        .await
        .expect("create the EndpointSlice");
    let vip = eventually("status.loadBalancer.ingress", async || {
        let ips = status_ips(&client, NS, SERVICE).await;
        (ips.len() == 1).then(|| ips[0])
    })
    .await;
    assert!(
        (POOL_FIRST..=POOL_LAST).contains(&vip),
        "{vip} is from the pool"
    );

    // Traffic: first answer (ARP both ways), then every request answered,
    // by both backends.
    let answered = eventually("a first answer from the VIP", async || {
        curl(&t, vip, 1, 2)[0].clone()
    })
    .await;
    assert!(answered.starts_with("backend "), "{answered}");
    let (per_backend, per_source, failed) = tally(&curl(&t, vip, REQUESTS, 5));
    assert_eq!(failed, 0, "answers {per_backend:?}; log:\n{}", log());
    assert_eq!(
        per_backend.keys().cloned().collect::<Vec<_>>(),
        vec![backend_name(0), backend_name(1)],
        "both backends answer"
    );
    for (name, n) in &per_backend {
        assert!(
            *n as f64 >= MIN_SHARE * REQUESTS as f64,
            "backend {name} got {n} of {REQUESTS}: {per_backend:?}"
        );
    }
    assert_eq!(
        per_source.keys().cloned().collect::<Vec<_>>(),
        vec![SNAT_ADDR.to_string()],
        "the backends see the SNAT address"
    );

    // Backend 0 not ready: new connections go only to backend 1.
    let mut not_ready = slice(&[(0, false), (1, true)]);
    let old = slices
        .get(&format!("{SERVICE}-1"))
        .await
        .expect("get the EndpointSlice");
    not_ready.metadata.resource_version = old.metadata.resource_version;
    slices
        .replace(&format!("{SERVICE}-1"), &PostParams::default(), &not_ready)
        .await
        .expect("replace the EndpointSlice");
    let only_b1 = |bodies: &[Option<String>]| {
        let (per_backend, _, failed) = tally(bodies);
        failed == 0 && per_backend.keys().eq([&backend_name(1)])
    };
    eventually("backend 0 leaving the rotation", async || {
        only_b1(&curl(&t, vip, 10, 5)).then_some(())
    })
    .await;
    let bodies = curl(&t, vip, REQUESTS, 5);
    assert!(
        only_b1(&bodies),
        "only backend 1 answers: {:?}; log:\n{}",
        tally(&bodies),
        log()
    );

    // The Service deleted: the VIP stops answering.
    services
        .delete(SERVICE, &DeleteParams::default())
        .await
        .expect("delete the Service");
    eventually("the VIP to stop answering", async || {
        curl(&t, vip, 1, 1)[0].is_none().then_some(())
    })
    .await;
    let bodies = curl(&t, vip, 5, 1);
    assert!(
        bodies.iter().all(Option::is_none),
        "no answers after the delete: {bodies:?}"
    );
}

fn lb() -> Service {
    lb_service(NS, SERVICE, BACKEND_HTTP_PORT)
}

/// The Service's EndpointSlice: backend `i` with its readiness.
fn slice(endpoints: &[(usize, bool)]) -> EndpointSlice {
    let endpoints: Vec<(Ipv4Addr, bool)> = endpoints
        .iter()
        .map(|&(i, ready)| (backend_addr(i), ready))
        .collect();
    endpoint_slice(NS, SERVICE, BACKEND_HTTP_PORT, &endpoints)
}

fn curl(t: &Topology, vip: Ipv4Addr, count: usize, max_time_s: u32) -> Vec<Option<String>> {
    curl_vip(&t.client, vip, count, max_time_s)
}

/// The API server on a veth of its own to the gateway's namespace
/// (10.254.0.0/16).
async fn api_server(test: &str, t: &Topology) -> Option<(HostVeth, KubeCluster)> {
    common::kube::api_server_into(test, &t.gateway, 254).await
}

/// The LoadBalancer Service over both backends (both ready), and the
/// address Portico writes to its status.
async fn create_service(client: &kube::Client) -> (Api<Service>, Api<EndpointSlice>, Ipv4Addr) {
    let services: Api<Service> = Api::namespaced(client.clone(), NS);
    services
        .create(&PostParams::default(), &lb())
        .await
        .expect("create the Service");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), NS);
    slices
        .create(&PostParams::default(), &slice(&[(0, true), (1, true)]))
        .await
        .expect("create the EndpointSlice");
    let vip = eventually("status.loadBalancer.ingress", async || {
        let ips = status_ips(client, NS, SERVICE).await;
        (ips.len() == 1).then(|| ips[0])
    })
    .await;
    (services, slices, vip)
}

/// Replace the Service's EndpointSlice by one with `endpoints`.
async fn replace_slice(slices: &Api<EndpointSlice>, endpoints: &[(usize, bool)]) {
    let mut next = slice(endpoints);
    let old = slices
        .get(&format!("{SERVICE}-1"))
        .await
        .expect("get the EndpointSlice");
    next.metadata.resource_version = old.metadata.resource_version;
    slices
        .replace(&format!("{SERVICE}-1"), &PostParams::default(), &next)
        .await
        .expect("replace the EndpointSlice");
}

/// The pool's LoadBalancer addresses announced with BGP (issue 13 §2): a
/// Service with a ready endpoint has its address announced to a real BIRD
/// 2 in the client namespace; no ready (or serving) endpoint → withdrawn;
/// ready again → announced; the Service deleted (address released) →
/// withdrawn. See `common/router.rs` for the router.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_balancer_address_is_announced_while_it_has_a_ready_endpoint() {
    const TEST: &str =
        "kube_e2e::a_load_balancer_address_is_announced_while_it_has_a_ready_endpoint";
    if !portico_tests::require_programs(TEST, &["bird", "birdc"], "apt-get install bird2") {
        return;
    }
    let Some(t) = common::topology(TEST, 2) else {
        return;
    };
    let Some((_link, cluster)) = api_server(TEST, &t).await else {
        return;
    };
    let client = cluster.client();
    let bird = router::bird_router(&t);
    let pool = format!("addresses = [\"{POOL_FIRST}-{POOL_LAST}\"]\n");
    let config =
        router::with_host_address(&gateway_config(&t, cluster.kubeconfig_path())).replacen(
            &pool,
            &format!("{pool}bgp_advertisements = [\"pool\"]\n"),
            1,
        ) + &router::bgp_section("", "pool", "communities = [\"65000:7\"]");
    assert!(config.contains("bgp_advertisements"), "{config}");
    let gw = t.start_gateway(&config).expect("portico run starts");
    let log = || gw.log_text();

    let (services, slices, vip) = create_service(&client).await;
    let route = format!("{vip}/32");
    let routes = router::bird_has(&bird, &log, &[&route]);
    assert_eq!(routes[0].attrs["BGP.community"], "(65000,7)", "{routes:?}");
    assert_eq!(routes[0].attrs["BGP.next_hop"], router::HOST_ADDR);

    // No endpoint ready or serving: withdrawn; ready again: announced.
    replace_slice(&slices, &[(0, false), (1, false)]).await;
    router::bird_has(&bird, &log, &[]);
    replace_slice(&slices, &[(0, false), (1, true)]).await;
    router::bird_has(&bird, &log, &[&route]);

    // The Service deleted: the address is released and withdrawn.
    services
        .delete(SERVICE, &DeleteParams::default())
        .await
        .expect("delete the Service");
    router::bird_has(&bird, &log, &[]);
    let report = gw.stats().expect("stats").bgp;
    assert_eq!(report.peers[0].state, "Established", "{report:?}");
    assert!(report.vips.is_empty(), "{report:?}");
}

/// A Service annotated `portico.dev/syn-proxy: "on"` is SYN-proxied end to
/// end: every request through its address completes a cookie handshake with
/// the gateway, then the spliced connection to an nginx backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_annotated_service_is_syn_proxied_end_to_end() {
    const TEST: &str = "kube_e2e::an_annotated_service_is_syn_proxied_end_to_end";
    let Some(t) = common::topology(TEST, 2) else {
        return;
    };
    let Some((_link, cluster)) = api_server(TEST, &t).await else {
        return;
    };
    let client = cluster.client();
    let gw = t
        .start_gateway(&gateway_config(&t, cluster.kubeconfig_path()))
        .expect("portico run starts");
    let mut svc = lb();
    svc.metadata.annotations = Some([("portico.dev/syn-proxy".to_owned(), "on".to_owned())].into());
    Api::<Service>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &svc)
        .await
        .expect("create the Service");
    Api::<EndpointSlice>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &slice(&[(0, true), (1, true)]))
        .await
        .expect("create the EndpointSlice");
    let vip = eventually("status.loadBalancer.ingress", async || {
        let ips = status_ips(&client, NS, SERVICE).await;
        (ips.len() == 1).then(|| ips[0])
    })
    .await;
    eventually("the VIP to answer", async || {
        curl(&t, vip, 1, 2)[0].is_some().then_some(())
    })
    .await;
    let bodies = curl(&t, vip, REQUESTS, 5);
    let failed = bodies.iter().filter(|b| b.is_none()).count();
    assert_eq!(
        failed,
        0,
        "every request answered: {bodies:?}\n{}",
        gw.log_text()
    );
    let s = common::stats(&gw);
    let proxied = REQUESTS as u64 + 1;
    assert!(
        common::number(&s, "/total/syn_cookies_validated") >= proxied,
        "{s}"
    );
    assert!(
        common::number(&s, "/total/syn_proxy_spliced") >= proxied,
        "{s}"
    );
    assert_eq!(
        common::number(&s, "/total/drops/syn_cookie_invalid"),
        0,
        "{s}"
    );
}
