//! The Kubernetes source against a real kube-apiserver + etcd (the
//! `portico_tests::kube_cluster` harness; never a mock of the API): what
//! the source publishes (the Publisher's snapshots, no dataplane), what it
//! writes back (statuses, Events), leader election between two instances,
//! a leader that loses its Lease, an API server outage and a 410 Gone
//! relist.
//!
//! Every wait is bounded ([`WAIT`]); no test asserts a duration.

use dataplane::flow::Proto;
use dataplane::snapshot::{EndpointCondition, Publisher, Snapshot, SnapshotBuilder};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use portico::source::kube::{KubeSource, KubeSourceParts};
use portico::source::static_file::{PortFacts, snapshot_spec};
use portico_tests::kube_cluster::{KubeCluster, KubeClusterOptions};
use serde_json::json;
use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::time::{Duration, Instant};

/// Longest wait for anything to happen (the machine is shared and slow).
const WAIT: Duration = Duration::from_secs(60);
const NS: &str = "default";

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// A plan with two ports, a dual-stack pool of 11 auto-assigned addresses
/// per family and one IPv4 pool that is never auto-assigned; leader
/// election in ~seconds.
fn plan(kubeconfig: &Path, identity: &str) -> nic_config::Plan {
    let text = format!(
        r#"
        [[port]]
        name = "outside"
        driver = "afpacket"
        interface = "o0"
        role = "outside"
        node_addresses = ["192.0.2.1/24"]
        [[port]]
        name = "inside"
        driver = "afpacket"
        interface = "i0"
        role = "inside"
        snat_addresses = ["10.1.0.1/24"]
        [kubernetes]
        kubeconfig = "{}"
        serve_unclassed = true
        debounce_ms = 5
        debounce_max_ms = 50
        lease_name = "portico-test"
        lease_duration_ms = 3000
        renew_deadline_ms = 2000
        retry_period_ms = 300
        identity = "{identity}"
        [[address_pool]]
        name = "public"
        addresses = ["192.0.2.100-192.0.2.110", "2001:db8:100::10-2001:db8:100::1a"]
        [[address_pool]]
        name = "reserved"
        addresses = ["198.51.100.0/28"]
        auto_assign = false
        "#,
        kubeconfig.display()
    );
    nic_config::parse(&text).unwrap_or_else(|e| panic!("test plan: {e}"))
}

/// Logs of the source in the test output (`RUST_LOG=portico=debug`).
fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("portico=info")),
        )
        .with_test_writer()
        .try_init();
}

/// One Portico control plane: the source and the publisher it feeds.
struct Instance {
    source: Option<KubeSource>,
    publisher: Publisher,
}

impl Instance {
    fn start(cluster: &KubeCluster, identity: &str) -> Self {
        init_logs();
        let plan = plan(cluster.kubeconfig_path(), identity);
        let facts = vec![
            PortFacts {
                mac: [2, 0, 0, 0, 0, 1],
                mtu: 1500
            };
            plan.ports.len()
        ];
        let mut builder = SnapshotBuilder::new();
        let base = builder
            .build(&snapshot_spec(&plan, &facts))
            .unwrap_or_else(|e| panic!("base snapshot: {e}"));
        let publisher = Publisher::new(base);
        let parts = KubeSourceParts::from_plan(&plan, builder, publisher.clone())
            .unwrap_or_else(|| panic!("the plan has a [kubernetes] section"));
        let source = KubeSource::start(parts).unwrap_or_else(|e| panic!("kube source: {e}"));
        Instance {
            source: Some(source),
            publisher,
        }
    }

    fn source(&self) -> &KubeSource {
        self.source
            .as_ref()
            .unwrap_or_else(|| panic!("source stopped"))
    }

    fn leads(&self) -> bool {
        self.source().leadership().may_write()
    }

    fn stop(&mut self) {
        if let Some(source) = self.source.take() {
            source.stop();
        }
    }

    fn snapshot(&self) -> std::sync::Arc<Snapshot> {
        self.publisher.current()
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Backends (address, condition) of the service listening on `vip:port`,
/// sorted; `None` when nothing listens there.
fn served(
    snap: &Snapshot,
    vip: Ipv4Addr,
    port: u16,
) -> Option<Vec<(SocketAddrV4, EndpointCondition)>> {
    let listener = snap.listener(Proto::Tcp, vip, port)?;
    let mut backends: Vec<(SocketAddrV4, EndpointCondition)> = snap
        .backends
        .iter()
        .flatten()
        .filter(|b| b.service == listener.service)
        .filter_map(|b| match b.addr {
            std::net::SocketAddr::V4(a) => Some((a, b.condition)),
            std::net::SocketAddr::V6(_) => None,
        })
        .collect();
    backends.sort_by_key(|(a, _)| *a);
    Some(backends)
}

/// Poll `f` every 50 ms until it returns `Some`, at most [`WAIT`].
async fn eventually<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn lb_service(name: &str, extra_spec: serde_json::Value) -> Service {
    let mut spec = json!({
        "type": "LoadBalancer",
        "ports": [{ "name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP" }],
    });
    if let (Some(s), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        for (k, v) in extra {
            s.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": name, "namespace": NS },
        "spec": spec,
    }))
    .unwrap_or_else(|e| panic!("service {name}: {e}"))
}

/// `(address, ready, serving, terminating)`.
type Ep<'a> = (&'a str, bool, bool, bool);

fn slice(service: &str, name: &str, endpoints: &[Ep<'_>]) -> EndpointSlice {
    let endpoints: Vec<serde_json::Value> = endpoints
        .iter()
        .map(|(a, ready, serving, terminating)| {
            json!({
                "addresses": [a],
                "conditions": { "ready": ready, "serving": serving, "terminating": terminating },
            })
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": { "kubernetes.io/service-name": service },
        },
        "addressType": "IPv4",
        "ports": [{ "name": "http", "port": 8080, "protocol": "TCP" }],
        "endpoints": endpoints,
    }))
    .unwrap_or_else(|e| panic!("slice {name}: {e}"))
}

/// An EndpointSlice of `addressType: IPv6`.
fn slice6(service: &str, name: &str, endpoints: &[Ep<'_>]) -> EndpointSlice {
    let mut s = slice(service, name, endpoints);
    s.address_type = "IPv6".to_owned();
    s
}

async fn create_service(client: &Client, svc: &Service) {
    let api: Api<Service> = Api::namespaced(client.clone(), NS);
    api.create(&PostParams::default(), svc)
        .await
        .unwrap_or_else(|e| panic!("create service: {e}"));
}

async fn apply_slice(client: &Client, s: &EndpointSlice) {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), NS);
    let name = s.metadata.name.clone().unwrap_or_default();
    match api.get_opt(&name).await {
        Ok(Some(old)) => {
            let mut new = s.clone();
            new.metadata.resource_version = old.metadata.resource_version;
            api.replace(&name, &PostParams::default(), &new)
                .await
                .unwrap_or_else(|e| panic!("replace slice {name}: {e}"));
        }
        Ok(None) => {
            api.create(&PostParams::default(), s)
                .await
                .unwrap_or_else(|e| panic!("create slice {name}: {e}"));
        }
        Err(e) => panic!("get slice {name}: {e}"),
    }
}

/// The addresses in the Service's status, both families (empty when none
/// or gone).
async fn status_ips_all(client: &Client, name: &str) -> Vec<IpAddr> {
    let api: Api<Service> = Api::namespaced(client.clone(), NS);
    match api.get_opt(name).await {
        Ok(Some(svc)) => portico::source::kube::status::ingress_addresses(&svc),
        _ => Vec::new(),
    }
}

/// The IPv4 addresses in the Service's status (empty when none or gone).
async fn status_ips(client: &Client, name: &str) -> Vec<Ipv4Addr> {
    status_ips_all(client, name)
        .await
        .into_iter()
        .filter_map(|a| match a {
            IpAddr::V4(a) => Some(a),
            IpAddr::V6(_) => None,
        })
        .collect()
}

/// Wait until the Service's status shows exactly one address; return it.
async fn wait_status_ip(client: &Client, name: &str) -> Ipv4Addr {
    eventually(&format!("status of {name}"), async || {
        let ips = status_ips(client, name).await;
        (ips.len() == 1).then(|| ips[0])
    })
    .await
}

/// Service `web`'s endpoints: its one EndpointSlice, `web-1`, created or
/// replaced.
async fn set_web(client: &Client, endpoints: &[Ep<'_>]) {
    apply_slice(client, &slice("web", "web-1", endpoints)).await;
}

/// Create Service `web` with one ready endpoint 10.1.0.10 and wait until
/// `a` serves its VIP; return the VIP and the backends served.
async fn serve_web(
    client: &Client,
    a: &Instance,
) -> (Ipv4Addr, Vec<(SocketAddrV4, EndpointCondition)>) {
    create_service(client, &lb_service("web", json!({}))).await;
    set_web(client, &[("10.1.0.10", true, true, false)]).await;
    let vip = wait_status_ip(client, "web").await;
    let want = vec![(addr("10.1.0.10"), EndpointCondition::Ready)];
    eventually("the VIP served", async || {
        (served(&a.snapshot(), vip, 80).as_ref() == Some(&want)).then_some(())
    })
    .await;
    (vip, want)
}

/// Events about Service `name` with `reason`: `(note, reporting instance)`.
async fn events(client: &Client, name: &str, reason: &str) -> Vec<(String, String)> {
    let api: Api<Event> = Api::namespaced(client.clone(), NS);
    let list = api
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("list events: {e}"));
    list.items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.reason.as_deref() == Some(reason)
        })
        .map(|e| {
            (
                e.note.unwrap_or_default(),
                e.reporting_instance.unwrap_or_default(),
            )
        })
        .collect()
}

fn addr(s: &str) -> SocketAddrV4 {
    SocketAddrV4::new(ip(s), 8080)
}

async fn wait_leader(instance: &Instance) {
    eventually("the lease", async || instance.leads().then_some(())).await;
}

/// Every test's start: a cluster with `options` (`None`: `test` skips,
/// no kube-apiserver), its client, and instance "a" once it holds the
/// Lease. Bind them in this order, so that "a" is dropped (stopped) first,
/// and an unused cluster as `_cluster` (not `_`: it lives to the test's
/// end).
async fn start_leading_with(
    test: &str,
    options: KubeClusterOptions,
) -> Option<(KubeCluster, Client, Instance)> {
    let cluster = KubeCluster::start_or_skip(test, options).await?;
    let client = cluster.client();
    let a = Instance::start(&cluster, "a");
    wait_leader(&a).await;
    Some((cluster, client, a))
}

/// [`start_leading_with`] the default options.
async fn start_leading(test: &str) -> Option<(KubeCluster, Client, Instance)> {
    start_leading_with(test, KubeClusterOptions::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_is_served_follows_its_endpoints_and_releases_its_address() {
    let Some((_cluster, client, a)) =
        start_leading("a_service_is_served_follows_its_endpoints_and_releases_its_address").await
    else {
        return;
    };

    create_service(&client, &lb_service("web", json!({}))).await;
    set_web(
        &client,
        &[
            ("10.1.0.10", true, true, false),
            ("10.1.0.11", true, true, false),
        ],
    )
    .await;
    let vip = wait_status_ip(&client, "web").await;
    assert_eq!(
        vip,
        ip("192.0.2.100"),
        "the lowest address of the auto-assign pool"
    );
    let ready = vec![
        (addr("10.1.0.10"), EndpointCondition::Ready),
        (addr("10.1.0.11"), EndpointCondition::Ready),
    ];
    eventually("both backends behind the VIP", async || {
        (served(&a.snapshot(), vip, 80).as_ref() == Some(&ready)).then_some(())
    })
    .await;
    let snap = a.snapshot();
    assert!(
        snap.owned(vip).is_some_and(|o| o.vip && o.port == 0),
        "the VIP is owned on the outside port"
    );
    let allocated = eventually("IPAllocated event", async || {
        let e = events(&client, "web", "IPAllocated").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert!(allocated[0].0.contains("192.0.2.100"), "{allocated:?}");

    // One endpoint terminates but still serves, then stops serving.
    for (serving, want) in [
        (true, EndpointCondition::ServingTerminating),
        (false, EndpointCondition::Draining),
    ] {
        set_web(
            &client,
            &[
                ("10.1.0.10", true, true, false),
                ("10.1.0.11", false, serving, true),
            ],
        )
        .await;
        let expected = vec![
            (addr("10.1.0.10"), EndpointCondition::Ready),
            (addr("10.1.0.11"), want),
        ];
        eventually(&format!("10.1.0.11 {want:?}"), async || {
            (served(&a.snapshot(), vip, 80).as_ref() == Some(&expected)).then_some(())
        })
        .await;
    }
    // Not ready at all: gone from the tables' view of ready backends.
    set_web(&client, &[("10.1.0.10", false, false, false)]).await;
    eventually("10.1.0.10 not ready", async || {
        let s = served(&a.snapshot(), vip, 80)?;
        (s == vec![(addr("10.1.0.10"), EndpointCondition::Draining)]).then_some(())
    })
    .await;

    // Deleted: listener and owned address gone, the address free again.
    let services: Api<Service> = Api::namespaced(client.clone(), NS);
    services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete: {e}"));
    eventually("the VIP released from the tables", async || {
        let s = a.snapshot();
        (s.listener(Proto::Tcp, vip, 80).is_none() && s.owned(vip).is_none()).then_some(())
    })
    .await;
    create_service(&client, &lb_service("api", json!({}))).await;
    assert_eq!(
        wait_status_ip(&client, "api").await,
        vip,
        "the released address is handed out again"
    );

    // Type change: the address is released and the status cleared.
    services
        .patch(
            "api",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "type": "NodePort" } })),
        )
        .await
        .unwrap_or_else(|e| panic!("patch type: {e}"));
    eventually("status of api cleared", async || {
        status_ips(&client, "api").await.is_empty().then_some(())
    })
    .await;
    eventually("api's VIP gone", async || {
        a.snapshot().owned(vip).is_none().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requested_addresses_are_honoured_or_refused_with_an_event() {
    let Some((_cluster, client, a)) =
        start_leading("requested_addresses_are_honoured_or_refused_with_an_event").await
    else {
        return;
    };

    create_service(
        &client,
        &lb_service("want", json!({ "loadBalancerIP": "192.0.2.105" })),
    )
    .await;
    assert_eq!(wait_status_ip(&client, "want").await, ip("192.0.2.105"));

    create_service(
        &client,
        &lb_service("clash", json!({ "loadBalancerIP": "192.0.2.105" })),
    )
    .await;
    create_service(
        &client,
        &lb_service("outside", json!({ "loadBalancerIP": "203.0.113.5" })),
    )
    .await;
    let mut reserved = lb_service("reserved", json!({}));
    reserved.metadata.annotations =
        Some([("portico.dev/address-pool".to_owned(), "reserved".to_owned())].into());
    create_service(&client, &reserved).await;
    let from_reserved = wait_status_ip(&client, "reserved").await;
    assert_eq!(
        from_reserved,
        ip("198.51.100.0"),
        "the named pool's first address"
    );

    let taken = eventually("RequestedIPTaken event", async || {
        let e = events(&client, "clash", "RequestedIPTaken").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert!(
        taken[0].0.contains("192.0.2.105") && taken[0].0.contains("default/want"),
        "{taken:?}"
    );
    assert_eq!(taken[0].1, "a", "reported by the instance");
    eventually("RequestedIPNotInPool event", async || {
        (!events(&client, "outside", "RequestedIPNotInPool")
            .await
            .is_empty())
        .then_some(())
    })
    .await;
    assert!(status_ips(&client, "clash").await.is_empty());
    assert!(status_ips(&client, "outside").await.is_empty());
    let snap = a.snapshot();
    assert!(snap.owned(ip("192.0.2.105")).is_some());
    assert!(snap.owned(ip("203.0.113.5")).is_none());
}

/// `svc` asking for the pool "reserved" (IPv4 only).
fn from_reserved(mut svc: Service) -> Service {
    svc.metadata.annotations =
        Some([("portico.dev/address-pool".to_owned(), "reserved".to_owned())].into());
    svc
}

/// Wait until the Service's status shows `n` addresses (either family);
/// return them.
async fn wait_status_ips(client: &Client, name: &str, n: usize) -> Vec<IpAddr> {
    eventually(
        &format!("{n} addresses in the status of {name}"),
        async || {
            let ips = status_ips_all(client, name).await;
            (ips.len() == n).then_some(ips)
        },
    )
    .await
}

fn ips_of(list: &[&str]) -> Vec<IpAddr> {
    list.iter()
        .map(|a| a.parse().unwrap_or_else(|e| panic!("{a}: {e}")))
        .collect()
}

/// The Service as the API server stored it (its defaulted `ipFamilies`).
async fn stored(client: &Client, name: &str) -> Service {
    let api: Api<Service> = Api::namespaced(client.clone(), NS);
    api.get(name)
        .await
        .unwrap_or_else(|e| panic!("get service {name}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dual_stack_services_get_an_address_per_family_or_a_warning() {
    let Some((_cluster, client, a)) =
        start_leading("dual_stack_services_get_an_address_per_family_or_a_warning").await
    else {
        return;
    };

    // RequireDualStack: the API server (dual-stack) lists both families,
    // the pool gives one address of each, both go to the status.
    create_service(
        &client,
        &lb_service("dual", json!({ "ipFamilyPolicy": "RequireDualStack" })),
    )
    .await;
    let families = stored(&client, "dual")
        .await
        .spec
        .and_then(|s| s.ip_families)
        .unwrap_or_default();
    assert_eq!(families, ["IPv4", "IPv6"], "a dual-stack API server");
    apply_slice(
        &client,
        &slice("dual", "dual-4", &[("10.1.0.10", true, true, false)]),
    )
    .await;
    apply_slice(
        &client,
        &slice6("dual", "dual-6", &[("fd00:1::10", true, true, false)]),
    )
    .await;
    assert_eq!(
        wait_status_ips(&client, "dual", 2).await,
        ips_of(&["192.0.2.100", "2001:db8:100::10"])
    );
    // Each half is served with its family's endpoints only.
    eventually("the IPv4 VIP served", async || {
        (served(&a.snapshot(), ip("192.0.2.100"), 80).as_ref()
            == Some(&vec![(addr("10.1.0.10"), EndpointCondition::Ready)]))
        .then_some(())
    })
    .await;
    let vip6: std::net::Ipv6Addr = "2001:db8:100::10".parse().expect("ip");
    eventually("the IPv6 VIP served", async || {
        let snap = a.snapshot();
        let listener = snap.listener6(Proto::Tcp, vip6, 80)?;
        let backends: Vec<(std::net::SocketAddr, EndpointCondition)> = snap
            .backends
            .iter()
            .flatten()
            .filter(|b| b.service == listener.service)
            .map(|b| (b.addr, b.condition))
            .collect();
        (backends
            == [(
                "[fd00:1::10]:8080".parse().expect("addr"),
                EndpointCondition::Ready,
            )]
            && snap.owned6(vip6).is_some())
        .then_some(())
    })
    .await;

    // IPv6 first, PreferDualStack: both, the status lists them.
    create_service(
        &client,
        &lb_service(
            "prefer6",
            json!({ "ipFamilyPolicy": "PreferDualStack", "ipFamilies": ["IPv6", "IPv4"] }),
        ),
    )
    .await;
    assert_eq!(
        wait_status_ips(&client, "prefer6", 2).await,
        ips_of(&["192.0.2.101", "2001:db8:100::11"])
    );

    // RequireDualStack from an IPv4-only pool: a Warning Event naming the
    // missing family, nothing in the status (not half of it).
    create_service(
        &client,
        &from_reserved(lb_service(
            "v4only",
            json!({ "ipFamilyPolicy": "RequireDualStack" }),
        )),
    )
    .await;
    let warned = eventually("NoPoolForFamily event", async || {
        let e = events(&client, "v4only", "NoPoolForFamily").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert!(
        warned[0].0.contains("pool \"reserved\" has no IPv6 range"),
        "{warned:?}"
    );
    // PreferDualStack from the same pool: its IPv4 address alone.
    create_service(
        &client,
        &from_reserved(lb_service(
            "prefer",
            json!({ "ipFamilyPolicy": "PreferDualStack" }),
        )),
    )
    .await;
    assert_eq!(
        wait_status_ips(&client, "prefer", 1).await,
        [IpAddr::from(ip("198.51.100.0"))]
    );
    assert!(status_ips_all(&client, "v4only").await.is_empty());

    // Down to SingleStack IPv4: the IPv6 address leaves the status.
    let api: Api<Service> = Api::namespaced(client.clone(), NS);
    api.patch(
        "dual",
        &PatchParams::default(),
        &Patch::Merge(
            json!({ "spec": { "ipFamilyPolicy": "SingleStack", "ipFamilies": ["IPv4"] } }),
        ),
    )
    .await
    .unwrap_or_else(|e| panic!("patch dual: {e}"));
    eventually("dual's status down to IPv4", async || {
        (status_ips_all(&client, "dual").await == [IpAddr::from(ip("192.0.2.100"))]).then_some(())
    })
    .await;
    eventually("the IPv6 VIP no longer served", async || {
        let snap = a.snapshot();
        (snap.listener6(Proto::Tcp, vip6, 80).is_none() && snap.owned6(vip6).is_none())
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_instance_keeps_the_addresses_it_handed_out() {
    let Some((cluster, client, mut a)) =
        start_leading("a_restarted_instance_keeps_the_addresses_it_handed_out").await
    else {
        return;
    };
    // The second gets .101 only because the first holds .100.
    create_service(&client, &lb_service("one", json!({}))).await;
    let one = wait_status_ip(&client, "one").await;
    create_service(&client, &lb_service("two", json!({}))).await;
    let two = wait_status_ip(&client, "two").await;
    assert_eq!((one, two), (ip("192.0.2.100"), ip("192.0.2.101")));
    a.stop();

    // A new instance with an empty allocator: it must rebuild from the
    // statuses before handing out anything.
    let b = Instance::start(&cluster, "b");
    wait_leader(&b).await;
    create_service(&client, &lb_service("three", json!({}))).await;
    assert_eq!(wait_status_ip(&client, "three").await, ip("192.0.2.102"));
    assert_eq!(status_ips(&client, "one").await, vec![one]);
    assert_eq!(status_ips(&client, "two").await, vec![two]);
    eventually("all three VIPs served", async || {
        let s = b.snapshot();
        [one, two, ip("192.0.2.102")]
            .iter()
            .all(|v| s.owned(*v).is_some())
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_forward_one_writes_and_the_other_takes_over() {
    let Some((cluster, client, mut a)) =
        start_leading("two_instances_forward_one_writes_and_the_other_takes_over").await
    else {
        return;
    };
    let mut b = Instance::start(&cluster, "b");
    create_service(&client, &lb_service("web", json!({}))).await;
    set_web(&client, &[("10.1.0.10", true, true, false)]).await;
    let vip = wait_status_ip(&client, "web").await;
    let want = vec![(addr("10.1.0.10"), EndpointCondition::Ready)];
    eventually("both instances serve the VIP", async || {
        (served(&a.snapshot(), vip, 80).as_ref() == Some(&want)
            && served(&b.snapshot(), vip, 80).as_ref() == Some(&want))
        .then_some(())
    })
    .await;
    assert!(a.leads() && !b.leads(), "exactly one leader");
    // The API server shows a status before the writer's task has resumed to
    // count it: the counter catches up, it is not read at the same instant.
    eventually("a counts its status write", async || {
        (a.source().stats().report().status_writes >= 1).then_some(())
    })
    .await;
    let b_report = b.source().stats().report();
    assert_eq!(
        b_report.status_writes, 0,
        "the follower wrote: {b_report:?}"
    );
    assert_eq!(
        b_report.events_sent, 0,
        "the follower sent events: {b_report:?}"
    );
    let allocated = events(&client, "web", "IPAllocated").await;
    assert!(
        allocated.iter().all(|(_, instance)| instance == "a"),
        "{allocated:?}"
    );

    // The leader stops (releasing the Lease); the follower takes over and
    // serves and writes for a new Service.
    a.stop();
    eventually("b takes the lease", async || b.leads().then_some(())).await;
    create_service(&client, &lb_service("api", json!({}))).await;
    let api_vip = wait_status_ip(&client, "api").await;
    assert_ne!(api_vip, vip);
    eventually("b serves api's VIP", async || {
        b.snapshot().owned(api_vip).is_some().then_some(())
    })
    .await;
    eventually("b counts its status write", async || {
        (b.source().stats().report().status_writes >= 1).then_some(())
    })
    .await;
    let b_report = b.source().stats().report();
    assert_eq!(b_report.status_write_errors, 0, "{b_report:?}");
    b.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_snapshot_stays_while_the_api_server_is_down_then_it_resyncs() {
    let Some((mut cluster, client, a)) =
        start_leading("the_last_snapshot_stays_while_the_api_server_is_down_then_it_resyncs").await
    else {
        return;
    };
    let (vip, want) = serve_web(&client, &a).await;
    // The last snapshot is the settled one: the per-VIP election has
    // elected this (only) instance for the VIP.
    eventually("the VIP announced", async || {
        a.snapshot()
            .owned(vip)
            .is_some_and(|o| o.announce)
            .then_some(())
    })
    .await;
    let generation = a.snapshot().generation;

    cluster.stop_apiserver();
    // Down: the watches fail, the snapshot in force stays as it was.
    let source = a.source();
    eventually("the watches notice", async || {
        source.stats().report().watch_failing.then_some(())
    })
    .await;
    for _ in 0..40 {
        let s = a.snapshot();
        assert_eq!(s.generation, generation, "nothing published while down");
        assert_eq!(served(&s, vip, 80).as_ref(), Some(&want));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    cluster
        .start_apiserver()
        .await
        .unwrap_or_else(|e| panic!("restart: {e}"));
    let client = cluster.client();
    // The watches resume from their resourceVersion and nothing changed:
    // no event comes, yet the source tells it is no longer failing.
    eventually("the watches resume with nothing to report", async || {
        (!source.stats().report().watch_failing).then_some(())
    })
    .await;
    assert_eq!(a.snapshot().generation, generation, "nothing to publish");
    // A change made now arrives as an ordinary event.
    set_web(
        &client,
        &[
            ("10.1.0.10", true, true, false),
            ("10.1.0.12", true, true, false),
        ],
    )
    .await;
    let want = vec![
        (addr("10.1.0.10"), EndpointCondition::Ready),
        (addr("10.1.0.12"), EndpointCondition::Ready),
    ];
    eventually("the change made after the restart", async || {
        (served(&a.snapshot(), vip, 80).as_ref() == Some(&want)).then_some(())
    })
    .await;
    assert!(!a.source().stats().report().watch_failing);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_410_gone_relists_without_losing_state() {
    let Some((mut cluster, client, a)) = start_leading_with(
        "a_410_gone_relists_without_losing_state",
        KubeClusterOptions {
            watch_cache: false,
            ..KubeClusterOptions::default()
        },
    )
    .await
    else {
        return;
    };
    let (vip, want) = serve_web(&client, &a).await;
    let lists = a.source().stats().report().lists;

    // The Lease renewals (every 300 ms) move etcd's revision past what the
    // watches saw; compacting while the API server is down makes their
    // resume point unavailable: the API server answers both resumed
    // watches with 410 Gone.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    cluster.stop_apiserver();
    cluster
        .compact_etcd()
        .await
        .unwrap_or_else(|e| panic!("compact: {e}"));
    cluster
        .start_apiserver()
        .await
        .unwrap_or_else(|e| panic!("restart: {e}"));
    let source = a.source();
    eventually("a relist", async || {
        let r = source.stats().report();
        (r.lists >= lists + 2 && !r.watch_failing).then_some(())
    })
    .await;
    assert_eq!(
        served(&a.snapshot(), vip, 80).as_ref(),
        Some(&want),
        "the relist kept the service"
    );
    let client = cluster.client();
    set_web(&client, &[("10.1.0.11", true, true, false)]).await;
    let want = vec![(addr("10.1.0.11"), EndpointCondition::Ready)];
    eventually("a change after the relist", async || {
        (served(&a.snapshot(), vip, 80).as_ref() == Some(&want)).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_lease_is_taken_stops_writing() {
    let Some((_cluster, client, a)) =
        start_leading("a_leader_whose_lease_is_taken_stops_writing").await
    else {
        return;
    };
    create_service(&client, &lb_service("web", json!({}))).await;
    let vip = wait_status_ip(&client, "web").await;

    // Someone else holds the Lease now (as after a partition in which it
    // expired): at its next renewal attempt the instance sees it and stops
    // writing.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), NS);
    leases
        .patch(
            "portico-test",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": {
                "holderIdentity": "intruder",
                "leaseDurationSeconds": 3600,
            } })),
        )
        .await
        .unwrap_or_else(|e| panic!("take the lease: {e}"));
    eventually("a steps down", async || (!a.leads()).then_some(())).await;
    let writes = a.source().stats().report().status_writes;

    // A new LoadBalancer Service gets no address from a follower, and the
    // old one keeps being served from its status.
    create_service(&client, &lb_service("late", json!({}))).await;
    eventually("late seen (served on its node port only)", async || {
        let svc: Api<Service> = Api::namespaced(client.clone(), NS);
        let node_port = svc
            .get("late")
            .await
            .ok()?
            .spec?
            .ports?
            .first()?
            .node_port?;
        a.snapshot()
            .listener(Proto::Tcp, ip("192.0.2.1"), u16::try_from(node_port).ok()?)
            .map(|_| ())
    })
    .await;
    assert!(status_ips(&client, "late").await.is_empty());
    let report = a.source().stats().report();
    assert_eq!(report.status_writes, writes, "{report:?}");
    assert!(a.snapshot().owned(vip).is_some(), "web still served");
}

/// The SYN proxy of the Service listening on `vip:80`, if one does.
fn syn_proxy_at(snap: &Snapshot, vip: Ipv4Addr) -> Option<dataplane::snapshot::SynProxyMode> {
    let listener = snap.listener(Proto::Tcp, vip, 80)?;
    snap.service(listener.service).map(|s| s.syn_proxy)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_syn_proxy_annotation_is_followed_and_a_bad_value_gets_a_warning() {
    use dataplane::snapshot::SynProxyMode;
    let Some((_cluster, client, a)) =
        start_leading("the_syn_proxy_annotation_is_followed_and_a_bad_value_gets_a_warning").await
    else {
        return;
    };
    let annotated = |name: &str, value: Option<&str>| {
        let mut svc = lb_service(name, json!({}));
        svc.metadata.annotations =
            value.map(|v| [("portico.dev/syn-proxy".to_owned(), v.to_owned())].into());
        svc
    };
    create_service(&client, &annotated("guarded", Some("on"))).await;
    create_service(&client, &annotated("plain", None)).await;
    create_service(&client, &annotated("typo", Some("yes"))).await;
    let mut vips = Vec::new();
    for name in ["guarded", "plain", "typo"] {
        vips.push(wait_status_ip(&client, name).await);
    }
    // The plan's [kubernetes] syn_proxy is the default ("off").
    let want = [
        Some(SynProxyMode::On),
        Some(SynProxyMode::Off),
        Some(SynProxyMode::Off),
    ];
    eventually("the annotations applied", async || {
        let snap = a.snapshot();
        (vips
            .iter()
            .map(|&v| syn_proxy_at(&snap, v))
            .collect::<Vec<_>>()
            == want)
            .then_some(())
    })
    .await;
    let warned = eventually("InvalidSynProxyAnnotation event", async || {
        let e = events(&client, "typo", "InvalidSynProxyAnnotation").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(warned.len(), 1, "one Event: {warned:?}");
    assert!(
        warned[0].0.contains("\"yes\"") && warned[0].0.contains("\"off\", \"on\", \"auto\""),
        "the Event names the value and the accepted ones: {warned:?}"
    );
    let api: Api<Event> = Api::namespaced(client.clone(), NS);
    let types: Vec<Option<String>> = api
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("list events: {e}"))
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("InvalidSynProxyAnnotation"))
        .map(|e| e.type_)
        .collect();
    assert_eq!(types, vec![Some("Warning".to_owned())]);
    assert!(
        events(&client, "guarded", "InvalidSynProxyAnnotation")
            .await
            .is_empty()
    );

    // A change of the annotation is followed.
    let services: Api<Service> = Api::namespaced(client.clone(), NS);
    services
        .patch(
            "plain",
            &PatchParams::default(),
            &Patch::Merge(
                json!({ "metadata": { "annotations": { "portico.dev/syn-proxy": "auto" } } }),
            ),
        )
        .await
        .unwrap_or_else(|e| panic!("annotate plain: {e}"));
    eventually("plain turned auto", async || {
        (syn_proxy_at(&a.snapshot(), vips[1])
            == Some(SynProxyMode::Auto {
                half_open_threshold: 1000,
            }))
        .then_some(())
    })
    .await;
}
