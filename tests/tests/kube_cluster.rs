//! The Kubernetes test harness itself ([`portico_tests::kube_cluster`]): a
//! real kube-apiserver v1.20.2 + etcd answer, serve discovery.k8s.io/v1
//! EndpointSlices through the test CRD, survive an API server restart, give
//! 410 Gone on a stale watch after a compaction with the watch cache off, and
//! authenticate tokens, ServiceAccounts and impersonated users under RBAC,
//! apply a NodePort range and the LoadBalancer node-port opt-out, and give
//! dual-stack Services a ClusterIP of each family.

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{
    ConfigMap, LoadBalancerIngress, Namespace, Service, ServiceAccount,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use kube::api::{
    Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchParams,
};
use kube::core::WatchEvent;
use portico_tests::kube_cluster::{KubeCluster, KubeClusterOptions, LB_NODE_PORT_OPT_OUT_GATE};
use std::collections::BTreeMap;
use std::time::Duration;

/// Bound for every single API call in these tests.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

async fn bounded<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(CALL_TIMEOUT, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {CALL_TIMEOUT:?}"))
}

fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

async fn create_namespace(client: &kube::Client, name: &str) {
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": name }
    }))
    .expect("namespace object");
    bounded(
        "create namespace",
        Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns),
    )
    .await
    .expect("create namespace");
}

fn slice(name: &str, service: &str, ip: &str) -> EndpointSlice {
    EndpointSlice {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([(
                "kubernetes.io/service-name".to_string(),
                service.to_string(),
            )])),
            ..Default::default()
        },
        address_type: "IPv4".into(),
        endpoints: Some(vec![Endpoint {
            addresses: vec![ip.into()],
            conditions: Some(EndpointConditions {
                ready: Some(true),
                serving: Some(true),
                terminating: Some(false),
            }),
            node_name: Some("node-a".into()),
            zone: Some("zone-1".into()),
            ..Default::default()
        }]),
        ports: Some(vec![EndpointPort {
            name: Some("http".into()),
            port: Some(8080),
            protocol: Some("TCP".into()),
            app_protocol: None,
        }]),
    }
}

#[tokio::test]
async fn api_server_answers_and_serves_v1_endpointslices_through_the_crd() {
    let test = "kube_cluster::api_server_answers_and_serves_v1_endpointslices_through_the_crd";
    let Some(cluster) = KubeCluster::start_or_skip(test, KubeClusterOptions::default()).await
    else {
        return;
    };
    let client = cluster.client();
    let version = bounded("version", client.apiserver_version())
        .await
        .expect("GET /version");
    assert_eq!(version.git_version, "v1.20.2");
    // The built-in v1beta1 group is off (it would shadow nothing, but the
    // CRD must be the only EndpointSlice API).
    let v1beta1 = http::Request::get("/apis/discovery.k8s.io/v1beta1")
        .body(Vec::new())
        .expect("request");
    let err = bounded("v1beta1 discovery", client.request_text(v1beta1))
        .await
        .expect_err("discovery.k8s.io/v1beta1 is disabled");
    assert_eq!(api_code(&err), Some(404), "{err}");

    create_namespace(&client, "slices").await;
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "slices");
    let typed = slice("web-typed", "web", "10.1.0.1");
    let created = bounded(
        "create typed slice",
        slices.create(&PostParams::default(), &typed),
    )
    .await
    .expect("a k8s-openapi discovery/v1 EndpointSlice is accepted");
    assert_eq!(
        created.endpoints, typed.endpoints,
        "fields survive the round trip"
    );
    assert_eq!(created.ports, typed.ports);

    // The same kind with explicit nulls in every optional field, as a client
    // may send them (k8s-openapi itself omits unset fields).
    let resource = ApiResource::erase::<EndpointSlice>(&());
    let dynamic: Api<DynamicObject> = Api::namespaced_with(client.clone(), "slices", &resource);
    let mut with_nulls = DynamicObject::new("web-nulls", &resource).data(serde_json::json!({
        "addressType": "IPv4",
        "endpoints": [{
            "addresses": ["10.1.0.2"],
            "conditions": { "ready": null, "serving": null, "terminating": null },
            "hostname": null, "nodeName": null, "zone": null,
            "targetRef": null, "hints": null, "deprecatedTopology": null
        }],
        "ports": [{ "name": null, "port": null, "protocol": null, "appProtocol": null }]
    }));
    with_nulls.metadata.labels = Some(BTreeMap::from([(
        "kubernetes.io/service-name".to_string(),
        "web".to_string(),
    )]));
    bounded(
        "create slice with nulls",
        dynamic.create(&PostParams::default(), &with_nulls),
    )
    .await
    .expect("null-valued optional fields are accepted");
    let read_back = bounded("get slice with nulls", slices.get("web-nulls"))
        .await
        .expect("typed read of the slice with nulls");
    let endpoints = read_back.endpoints.unwrap_or_default();
    assert_eq!(endpoints.len(), 1, "{endpoints:?}");
    let endpoint = &endpoints[0];
    assert_eq!(endpoint.addresses, vec!["10.1.0.2".to_string()]);
    assert_eq!(endpoint.node_name, None);
    assert_eq!(endpoint.conditions.as_ref().and_then(|c| c.ready), None);

    bounded(
        "create other slice",
        slices.create(&PostParams::default(), &slice("db-1", "db", "10.1.0.3")),
    )
    .await
    .expect("second service's slice");

    let listed = bounded(
        "list by label",
        slices.list(&ListParams::default().labels("kubernetes.io/service-name=web")),
    )
    .await
    .expect("label-selector list");
    let mut names: Vec<String> = listed
        .items
        .iter()
        .filter_map(|s| s.metadata.name.clone())
        .collect();
    names.sort();
    assert_eq!(names, ["web-nulls", "web-typed"]);

    // The schema is enforced: a bad address type is refused.
    let mut bad = slice("bad", "web", "10.1.0.4");
    bad.address_type = "IPv5".into();
    let err = bounded(
        "create invalid slice",
        slices.create(&PostParams::default(), &bad),
    )
    .await
    .expect_err("addressType IPv5 is invalid");
    assert_eq!(api_code(&err), Some(422), "{err}");
}

#[tokio::test]
async fn api_server_restarts_on_the_same_port_with_its_state() {
    let test = "kube_cluster::api_server_restarts_on_the_same_port_with_its_state";
    let Some(mut cluster) = KubeCluster::start_or_skip(test, KubeClusterOptions::default()).await
    else {
        return;
    };
    let client = cluster.client();
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let service: Service = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": { "name": "web" },
        "spec": {
            "type": "LoadBalancer",
            "selector": { "app": "web" },
            "ports": [{ "name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP" }]
        }
    }))
    .expect("service object");
    let created = bounded(
        "create service",
        services.create(&PostParams::default(), &service),
    )
    .await
    .expect("create LoadBalancer service");
    // services/status is writable (what the IPAM write-back uses).
    let status = serde_json::json!({
        "status": { "loadBalancer": { "ingress": [{ "ip": "192.0.2.10" }] } }
    });
    bounded(
        "patch status",
        services.patch_status("web", &PatchParams::default(), &Patch::Merge(&status)),
    )
    .await
    .expect("merge-patch services/status");

    let pid_before = cluster.apiserver_pid().expect("running");
    cluster.stop_apiserver();
    assert_eq!(cluster.apiserver_pid(), None);
    let err = bounded("get while stopped", services.get("web"))
        .await
        .expect_err("no API server while stopped");
    assert_eq!(
        api_code(&err),
        None,
        "a connection error, not an API answer: {err}"
    );

    bounded("restart", cluster.start_apiserver())
        .await
        .expect("API server starts again");
    assert_ne!(cluster.apiserver_pid(), Some(pid_before));
    // The client made before the restart works again (same port, same CA).
    let after = bounded("get after restart", services.get("web"))
        .await
        .expect("service still there");
    assert_eq!(after.metadata.uid, created.metadata.uid);
    let ingress = after
        .status
        .and_then(|s| s.load_balancer)
        .and_then(|lb| lb.ingress)
        .unwrap_or_default();
    assert_eq!(
        ingress,
        vec![LoadBalancerIngress {
            ip: Some("192.0.2.10".into()),
            ..Default::default()
        }]
    );
    // The CRD came back with etcd's state.
    let slices: Api<EndpointSlice> = Api::namespaced(client, "default");
    bounded(
        "list slices after restart",
        slices.list(&ListParams::default()),
    )
    .await
    .expect("v1 EndpointSlices served after the restart");
}

#[tokio::test]
async fn stale_watch_gets_410_after_compaction_without_watch_cache() {
    let test = "kube_cluster::stale_watch_gets_410_after_compaction_without_watch_cache";
    let options = KubeClusterOptions {
        watch_cache: false,
        ..KubeClusterOptions::default()
    };
    let Some(cluster) = KubeCluster::start_or_skip(test, options).await else {
        return;
    };
    let configmaps: Api<ConfigMap> = Api::namespaced(cluster.client(), "default");
    let mut cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("counter".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("n".to_string(), "0".to_string())])),
        ..Default::default()
    };
    let first = bounded("create", configmaps.create(&PostParams::default(), &cm))
        .await
        .expect("create configmap");
    let stale_version = first.metadata.resource_version.clone().expect("rv");
    for n in 1..=3 {
        cm.data = Some(BTreeMap::from([("n".to_string(), n.to_string())]));
        let patch = serde_json::json!({ "data": { "n": n.to_string() } });
        bounded(
            "update",
            configmaps.patch("counter", &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await
        .expect("patch configmap");
    }

    // Before the compaction the old version is still watchable...
    let ok_stream = bounded(
        "watch before compaction",
        configmaps.watch(&WatchParams::default().timeout(5), &stale_version),
    )
    .await
    .expect("watch from an uncompacted version");
    let first_event = bounded("first event", ok_stream.boxed().try_next())
        .await
        .expect("watch stream")
        .expect("an event");
    assert!(
        matches!(first_event, WatchEvent::Modified(_)),
        "replays the history: {first_event:?}"
    );

    let compacted_at = bounded("compact", cluster.compact_etcd())
        .await
        .expect("etcd compaction");
    let stale: i64 = stale_version.parse().expect("etcd revision");
    assert!(compacted_at > stale, "{compacted_at} > {stale}");
    let again = bounded("compact again", cluster.compact_etcd())
        .await
        .expect("a second compaction with nothing new is no error");
    assert!(again >= compacted_at, "{again} >= {compacted_at}");

    // ...after it, the same watch gets 410 Gone (Expired).
    let code = match bounded(
        "watch after compaction",
        configmaps.watch(&WatchParams::default().timeout(5), &stale_version),
    )
    .await
    {
        Err(e) => api_code(&e),
        Ok(stream) => match bounded("error event", stream.boxed().next()).await {
            Some(Ok(WatchEvent::Error(status))) => Some(status.code),
            Some(Err(e)) => api_code(&e),
            other => panic!("expected 410 Gone, got {other:?}"),
        },
    };
    assert_eq!(code, Some(410));
}

#[tokio::test]
async fn tokens_service_accounts_and_impersonation_are_authenticated_under_rbac() {
    let test =
        "kube_cluster::tokens_service_accounts_and_impersonation_are_authenticated_under_rbac";
    let Some(cluster) = KubeCluster::start_or_skip(test, KubeClusterOptions::default()).await
    else {
        return;
    };
    let admin = cluster.client();
    let sa: ServiceAccount = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": { "name": "nobody" }
    }))
    .expect("serviceaccount object");
    bounded(
        "create serviceaccount",
        Api::<ServiceAccount>::namespaced(admin.clone(), "default")
            .create(&PostParams::default(), &sa),
    )
    .await
    .expect("create serviceaccount");
    let token = bounded(
        "token request",
        cluster.service_account_token("default", "nobody"),
    )
    .await
    .expect("TokenRequest for the ServiceAccount");

    // Authenticated but not authorized: 403 (RBAC), not 401.
    let as_sa: Api<Service> = Api::all(cluster.client_with_token(&token));
    let err = bounded("list as sa", as_sa.list(&ListParams::default()))
        .await
        .expect_err("a fresh ServiceAccount may not list services");
    assert_eq!(api_code(&err), Some(403), "{err}");
    let as_alice: Api<Service> = Api::all(cluster.client_impersonating("alice", &["devs"]));
    let err = bounded("list as alice", as_alice.list(&ListParams::default()))
        .await
        .expect_err("alice has no role");
    assert_eq!(api_code(&err), Some(403), "{err}");
    // Unknown token: 401.
    let as_stranger: Api<Service> = Api::all(cluster.client_with_token("not-a-token"));
    let err = bounded("list as stranger", as_stranger.list(&ListParams::default()))
        .await
        .expect_err("unknown token");
    assert_eq!(api_code(&err), Some(401), "{err}");
    // The admin may.
    bounded(
        "list as admin",
        Api::<Service>::all(admin).list(&ListParams::default()),
    )
    .await
    .expect("system:masters lists services");

    // The kubeconfig written for a token works for a kube::Config loader.
    let path = cluster
        .write_kubeconfig_for_token("nobody", &token)
        .expect("kubeconfig");
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).expect("kubeconfig parses");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("kubeconfig loads");
    let from_file = kube::Client::try_from(config).expect("client from kubeconfig");
    let err = bounded(
        "list via kubeconfig",
        Api::<Service>::all(from_file).list(&ListParams::default()),
    )
    .await
    .expect_err("still the ServiceAccount");
    assert_eq!(api_code(&err), Some(403), "{err}");
    let admin_config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(cluster.kubeconfig_path()).expect("admin kubeconfig"),
        &Default::default(),
    )
    .await
    .expect("admin kubeconfig loads");
    let admin_from_file = kube::Client::try_from(admin_config).expect("admin client");
    bounded(
        "list via admin kubeconfig",
        Api::<Service>::all(admin_from_file).list(&ListParams::default()),
    )
    .await
    .expect("admin kubeconfig lists services");
}

fn load_balancer(name: &str, node_ports: bool) -> Service {
    let mut spec = serde_json::json!({
        "type": "LoadBalancer",
        "ports": [{ "name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP" }],
    });
    if !node_ports {
        spec["allocateLoadBalancerNodePorts"] = serde_json::json!(false);
    }
    serde_json::from_value(serde_json::json!({
        "metadata": { "name": name, "namespace": "default" },
        "spec": spec,
    }))
    .expect("service object")
}

fn node_ports(svc: &Service) -> Vec<i32> {
    svc.spec
        .iter()
        .flat_map(|s| s.ports.iter().flatten())
        .filter_map(|p| p.node_port)
        .collect()
}

/// The scale benchmark's two ways past the default 2,768 NodePorts: a
/// wider `--service-node-port-range` (here a two-port one, so its end is
/// reachable) and Services that opt out of node ports.
#[tokio::test]
async fn node_port_range_and_the_load_balancer_opt_out_are_applied() {
    let test = "kube_cluster::node_port_range_and_the_load_balancer_opt_out_are_applied";
    let options = KubeClusterOptions {
        node_port_range: Some((40_000, 40_001)),
        feature_gates: vec![LB_NODE_PORT_OPT_OUT_GATE.into()],
        ..KubeClusterOptions::default()
    };
    let Some(cluster) = KubeCluster::start_or_skip(test, options).await else {
        return;
    };
    let api: Api<Service> = Api::namespaced(cluster.client(), "default");
    let pp = PostParams::default();
    let mut allocated = Vec::new();
    for name in ["with-a", "with-b"] {
        let svc = bounded("create", api.create(&pp, &load_balancer(name, true)))
            .await
            .expect("a Service with a NodePort inside the range");
        allocated.extend(node_ports(&svc));
    }
    allocated.sort_unstable();
    assert_eq!(
        allocated,
        [40_000, 40_001],
        "NodePorts from the configured range"
    );
    let full = bounded("create", api.create(&pp, &load_balancer("with-c", true))).await;
    assert!(
        full.as_ref()
            .err()
            .is_some_and(|e| e.to_string().contains("range is full")),
        "a third NodePort does not fit: {full:?}"
    );
    // The opt-out needs no NodePort, so it fits into the full range.
    let none = bounded("create", api.create(&pp, &load_balancer("without", false)))
        .await
        .expect("a LoadBalancer Service without node ports");
    assert!(node_ports(&none).is_empty(), "no NodePort: {:?}", none.spec);
    assert_eq!(
        none.spec.and_then(|s| s.allocate_load_balancer_node_ports),
        Some(false),
        "the API server kept the opt-out (feature gate on)"
    );
}

/// The cluster is dual-stack (`SERVICE_CIDRS`): a Service without a
/// family is IPv4 as in a single-stack cluster, `RequireDualStack` gets a
/// ClusterIP of each family, `PreferDualStack` with IPv6 first lists IPv6
/// first.
#[tokio::test]
async fn services_are_dual_stack_when_they_ask_and_ipv4_otherwise() {
    let test = "kube_cluster::services_are_dual_stack_when_they_ask_and_ipv4_otherwise";
    let Some(cluster) = KubeCluster::start_or_skip(test, KubeClusterOptions::default()).await
    else {
        return;
    };
    let api: Api<Service> = Api::namespaced(cluster.client(), "default");
    let pp = PostParams::default();
    let families = |svc: &Service| -> (Vec<String>, Option<String>, Vec<String>) {
        let spec = svc.spec.clone().unwrap_or_default();
        (
            spec.ip_families.unwrap_or_default(),
            spec.ip_family_policy,
            spec.cluster_ips.unwrap_or_default(),
        )
    };
    let plain = bounded("create", api.create(&pp, &load_balancer("plain", true)))
        .await
        .expect("a Service without families");
    let (f, policy, ips) = families(&plain);
    assert_eq!(
        (f, policy.as_deref()),
        (vec!["IPv4".to_owned()], Some("SingleStack"))
    );
    assert!(ips.len() == 1 && ips[0].starts_with("10.96."), "{ips:?}");
    for (name, policy, asked, want) in [
        ("dual", "RequireDualStack", vec![], ["IPv4", "IPv6"]),
        (
            "six-first",
            "PreferDualStack",
            vec!["IPv6", "IPv4"],
            ["IPv6", "IPv4"],
        ),
    ] {
        let mut svc = load_balancer(name, true);
        if let Some(spec) = svc.spec.as_mut() {
            spec.ip_family_policy = Some(policy.to_owned());
            if !asked.is_empty() {
                spec.ip_families = Some(asked.iter().map(|f| (*f).to_owned()).collect());
            }
        }
        let created = bounded("create", api.create(&pp, &svc))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let (f, _, ips) = families(&created);
        assert_eq!(f, want, "{name}");
        let v6 = ips.iter().filter(|ip| ip.starts_with("fd00:96::")).count();
        assert!(ips.len() == 2 && v6 == 1, "{name}: {ips:?}");
    }
}
