//! What the suites that drive `portico run` through the real kube-apiserver
//! share: the LoadBalancer Service and EndpointSlice they create, the
//! addresses Portico writes to the Service's status, bounded polling, and
//! curl against a VIP from a client namespace.

use super::parse_curl;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::Api;
use portico_tests::kube_cluster::{KubeCluster, KubeClusterOptions};
use portico_tests::{HostVeth, Netns};
use serde_json::json;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// Longest wait for anything to happen (the machine is shared and slow).
pub const WAIT: Duration = Duration::from_secs(60);

/// Poll `f` every 50 ms until it returns `Some`, at most [`WAIT`].
pub async fn eventually<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A LoadBalancer Service `ns/name`: TCP port 80 (`http`) to `target_port`.
pub fn lb_service(ns: &str, name: &str, target_port: u16) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": name, "namespace": ns },
        "spec": {
            "type": "LoadBalancer",
            "ports": [{ "name": "http", "port": 80, "targetPort": target_port, "protocol": "TCP" }],
        },
    }))
    .expect("the Service manifest")
}

/// The EndpointSlice `<service>-1` of `ns/service`: each address with its
/// readiness (ready and serving alike), port `http` = `port`.
pub fn endpoint_slice(
    ns: &str,
    service: &str,
    port: u16,
    endpoints: &[(Ipv4Addr, bool)],
) -> EndpointSlice {
    let endpoints: Vec<serde_json::Value> = endpoints
        .iter()
        .map(|&(addr, ready)| {
            json!({
                "addresses": [addr.to_string()],
                "conditions": { "ready": ready, "serving": ready, "terminating": false },
            })
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": format!("{service}-1"),
            "namespace": ns,
            "labels": { "kubernetes.io/service-name": service },
        },
        "addressType": "IPv4",
        "ports": [{ "name": "http", "port": port, "protocol": "TCP" }],
        "endpoints": endpoints,
    }))
    .expect("the EndpointSlice manifest")
}

/// The IPv4 addresses in `ns/name`'s `status.loadBalancer.ingress`.
pub async fn status_ips(client: &Client, ns: &str, name: &str) -> Vec<Ipv4Addr> {
    let api: Api<Service> = Api::namespaced(client.clone(), ns);
    match api.get_opt(name).await {
        Ok(Some(svc)) => portico::source::kube::status::ingress_addresses(&svc)
            .into_iter()
            .filter_map(|a| match a {
                std::net::IpAddr::V4(a) => Some(a),
                std::net::IpAddr::V6(_) => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// `count` GETs of `http://vip/` from `client`, each on its own connection,
/// each bounded by `max_time_s`: the bodies (`None` for a failed transfer).
pub fn curl_vip(
    client: &Netns,
    vip: Ipv4Addr,
    count: usize,
    max_time_s: u32,
) -> Vec<Option<String>> {
    let url = format!("http://{vip}/");
    let max_time = max_time_s.to_string();
    let mut args = vec!["-sS", "--max-time", &max_time, "-w", "\n== %{http_code}\n"];
    args.extend(["-H", "Connection: close"]);
    args.extend(std::iter::repeat_n(url.as_str(), count));
    let out = client.exec_unchecked("curl", &args).expect("curl runs");
    parse_curl(&String::from_utf8_lossy(&out.stdout), count)
}

/// The API server bound to the host end of a veth pair into `gateway` (the
/// gateway namespace cannot reach the host's 127.0.0.1; etcd stays there):
/// a /30 out of 10.`second_octet`.0.0/16, unique per process
/// (10.x.(pid % 256).(4 × (pid / 256 % 64)), host `.1`, gateway `.2` of
/// the block); each suite binary takes its own `second_octet`. `None` after
/// a loud SKIP without the API server's binaries.
pub async fn api_server_into(
    test: &str,
    gateway: &Netns,
    second_octet: u8,
) -> Option<(HostVeth, KubeCluster)> {
    let pid = std::process::id();
    let third = (pid % 256) as u8;
    let block = ((pid / 256 % 64) * 4) as u8;
    let host_addr = Ipv4Addr::new(10, second_octet, third, block + 1);
    let gateway_addr = Ipv4Addr::new(10, second_octet, third, block + 2);
    let link = HostVeth::new(
        gateway,
        &format!("{host_addr}/30"),
        &format!("{gateway_addr}/30"),
    )
    .expect("the API server veth");
    let options = KubeClusterOptions {
        bind_address: Some(host_addr),
        ..KubeClusterOptions::default()
    };
    let cluster = KubeCluster::start_or_skip(test, options).await?;
    Some((link, cluster))
}
