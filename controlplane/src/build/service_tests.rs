//! Table-driven cases of the Kubernetes semantics: each case is a Service
//! (+ slices + assigned VIPs) and the specs it must produce, rendered as
//! text, or the reason it is ignored.

use super::*;
use serde_json::{Value, json};
use std::net::{Ipv4Addr, Ipv6Addr};

fn cfg() -> ModelConfig {
    ModelConfig {
        load_balancer_class: "portico.dev/lb".into(),
        serve_unclassed: true,
        // Dual-stack: the IPv4 cases' output is what it was without the
        // IPv6 addresses.
        node_addresses: vec![
            Ipv4Addr::new(192, 0, 2, 1).into(),
            Ipv4Addr::new(192, 0, 2, 2).into(),
            NODE6.into(),
        ],
        gateway_addresses: vec![
            Ipv4Addr::new(192, 0, 2, 1).into(),
            Ipv4Addr::new(192, 0, 2, 2).into(),
            Ipv4Addr::new(192, 0, 2, 3).into(),
            NODE6.into(),
            SNAT6.into(),
        ],
        tcp_backend_gone: BackendGonePolicy::Reset,
        external_ip_cidrs: vec![
            "198.51.100.0/24".parse().expect("cidr"),
            "2001:db8:e::/64".parse().expect("cidr"),
        ],
        syn_proxy: SynProxyMode::Off,
        syn_proxy_half_open_threshold: 1000,
    }
}

/// Service `ns/web` with `spec`.
fn service(spec: Value) -> Service {
    serde_json::from_value(json!({
        "metadata": { "name": "web", "namespace": "ns" },
        "spec": spec,
    }))
    .unwrap()
}

/// An EndpointSlice of `ns/web` (unless `labels`/`namespace` override it).
fn slice(name: &str, extra: Value) -> EndpointSlice {
    let mut v = json!({
        "metadata": {
            "name": name,
            "namespace": "ns",
            "labels": { "kubernetes.io/service-name": "web" },
        },
        "addressType": "IPv4",
        "ports": [{ "name": "http", "port": 8080, "protocol": "TCP" }],
        "endpoints": [],
    });
    if let (Some(base), Value::Object(extra)) = (v.as_object_mut(), extra) {
        for (k, val) in extra {
            if k == "metadata" {
                if let (Some(m), Value::Object(em)) =
                    (base.get_mut("metadata").and_then(Value::as_object_mut), val)
                {
                    m.extend(em);
                }
            } else {
                base.insert(k, val);
            }
        }
    }
    serde_json::from_value(v).unwrap()
}

fn ep(addr: &str, conditions: Value) -> Value {
    json!({ "addresses": [addr], "conditions": conditions })
}

fn render_spec(s: &ServiceSpec) -> String {
    let listeners: Vec<String> = s
        .listeners
        .iter()
        .map(|(a, p, k)| {
            let kind = match k {
                ListenerKind::Vip => "vip",
                ListenerKind::ExternalIp => "ext",
                ListenerKind::NodePort => "node",
            };
            format!("{} {kind}", std::net::SocketAddr::new(*a, *p))
        })
        .collect();
    let endpoints: Vec<String> = s
        .endpoints
        .iter()
        .map(|e| {
            let c = match e.condition {
                EndpointCondition::Ready => "ready",
                EndpointCondition::ServingTerminating => "terminating",
                EndpointCondition::Draining => "draining",
            };
            format!("{} {c}", e.addr)
        })
        .collect();
    let mut out = format!(
        "{} [{}] -> [{}]",
        s.name,
        listeners.join(", "),
        endpoints.join(", ")
    );
    if !s.snat {
        out.push_str(" no-snat");
    }
    if let Some(ms) = s.affinity_timeout_ms {
        out.push_str(&format!(" affinity={ms}"));
    }
    out
}

fn render(o: &ServiceOutcome) -> Vec<String> {
    match o {
        ServiceOutcome::Serve { specs, skipped } => specs
            .iter()
            .map(render_spec)
            .chain(skipped.iter().map(|s| format!("skip: {s}")))
            .collect(),
        ServiceOutcome::Ignored { reason } => vec![format!("ignored: {reason}")],
    }
}

const VIP: IpAddr = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7));
const VIP9: IpAddr = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 9));
const VIP6: IpAddr = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 5, 0, 0, 0, 0, 7));
const NODE6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
const SNAT6: Ipv6Addr = Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 1);

struct Case {
    what: &'static str,
    spec: Value,
    slices: Vec<EndpointSlice>,
    vips: &'static [IpAddr],
    want: &'static [&'static str],
}

fn http_lb(extra: Value) -> Value {
    let mut spec = json!({
        "type": "LoadBalancer",
        "ports": [{ "name": "http", "port": 80, "targetPort": 8080, "nodePort": 30080 }],
    });
    if let (Some(s), Value::Object(extra)) = (spec.as_object_mut(), extra) {
        s.extend(extra);
    }
    spec
}

/// An IPv4 slice (10.0.0.1 ready) and an IPv6 one (fd00:1::10 ready,
/// fd00:1::11 serving and terminating).
fn dual_slices() -> Vec<EndpointSlice> {
    vec![
        slice(
            "a",
            json!({ "endpoints": [ep("10.0.0.1", json!({ "ready": true }))] }),
        ),
        slice(
            "a6",
            json!({
                "addressType": "IPv6",
                "endpoints": [
                    ep("fd00:1::11", json!({ "ready": false, "serving": true, "terminating": true })),
                    ep("fd00:1::10", json!({ "ready": true })),
                    // An IPv4 address in an IPv6 slice is not taken.
                    ep("10.0.0.9", json!({ "ready": true })),
                ],
            }),
        ),
    ]
}

fn one_ready() -> Vec<EndpointSlice> {
    vec![slice(
        "a",
        json!({ "endpoints": [ep("10.0.0.1", json!({ "ready": true }))] }),
    )]
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            what: "LoadBalancer: VIP and node ports",
            spec: http_lb(json!({})),
            slices: one_ready(),
            vips: &[VIP],
            want: &[
                "ns/web:http/tcp [203.0.113.7:80 vip, 192.0.2.1:30080 node, 192.0.2.2:30080 node] -> [10.0.0.1:8080 ready]",
            ],
        },
        Case {
            what: "LoadBalancer without node ports",
            spec: http_lb(json!({ "allocateLoadBalancerNodePorts": false })),
            slices: one_ready(),
            vips: &[VIP],
            want: &["ns/web:http/tcp [203.0.113.7:80 vip] -> [10.0.0.1:8080 ready]"],
        },
        Case {
            what: "LoadBalancer before its address: node ports only",
            spec: http_lb(json!({})),
            slices: one_ready(),
            vips: &[],
            want: &[
                "ns/web:http/tcp [192.0.2.1:30080 node, 192.0.2.2:30080 node] -> [10.0.0.1:8080 ready]",
            ],
        },
        Case {
            what: "LoadBalancer before its address, no node ports",
            spec: http_lb(json!({ "allocateLoadBalancerNodePorts": false })),
            slices: one_ready(),
            vips: &[],
            want: &[
                "ignored: no port can be served: port \"http\" (TCP/80): nowhere to listen (no address assigned, no node port, no externalIPs)",
            ],
        },
        Case {
            what: "LoadBalancer of Portico's class",
            spec: http_lb(
                json!({ "loadBalancerClass": "portico.dev/lb", "allocateLoadBalancerNodePorts": false }),
            ),
            slices: one_ready(),
            vips: &[VIP],
            want: &["ns/web:http/tcp [203.0.113.7:80 vip] -> [10.0.0.1:8080 ready]"],
        },
        Case {
            what: "LoadBalancer of another class",
            spec: http_lb(json!({ "loadBalancerClass": "example.com/other" })),
            slices: one_ready(),
            vips: &[VIP],
            want: &["ignored: loadBalancerClass \"example.com/other\" is another load balancer's"],
        },
        Case {
            what: "NodePort: node addresses only, VIPs not used",
            spec: json!({ "type": "NodePort", "ports": [{ "name": "http", "port": 80, "nodePort": 30080 }] }),
            slices: one_ready(),
            vips: &[VIP],
            want: &[
                "ns/web:http/tcp [192.0.2.1:30080 node, 192.0.2.2:30080 node] -> [10.0.0.1:8080 ready]",
            ],
        },
        Case {
            what: "ClusterIP with externalIPs (sorted; own and bad ones skipped)",
            spec: json!({
                "type": "ClusterIP",
                "externalIPs": ["198.51.100.9", "192.0.2.3", "nope", "198.51.100.8"],
                "ports": [{ "name": "http", "port": 80 }],
            }),
            slices: one_ready(),
            vips: &[VIP],
            want: &[
                "ns/web:http/tcp [198.51.100.8:80 ext, 198.51.100.9:80 ext] -> [10.0.0.1:8080 ready]",
                "skip: externalIP 192.0.2.3 is one of the gateway's own addresses",
                "skip: externalIP \"nope\" is not an IP address",
            ],
        },
        Case {
            what: "externalIPs outside external_ip_cidrs are left out",
            spec: json!({
                "type": "ClusterIP",
                "externalIPs": ["203.0.113.7", "198.51.100.8"],
                "ports": [{ "name": "http", "port": 80 }],
            }),
            slices: one_ready(),
            vips: &[VIP],
            want: &[
                "ns/web:http/tcp [198.51.100.8:80 ext] -> [10.0.0.1:8080 ready]",
                "skip: externalIP 203.0.113.7 is outside the CIDRs this gateway serves externalIPs from ([kubernetes] external_ip_cidrs); not announced or served",
            ],
        },
        Case {
            what: "ClusterIP only",
            spec: json!({ "ports": [{ "port": 80 }] }),
            slices: vec![],
            vips: &[],
            want: &[
                "ignored: type ClusterIP without externalIPs is only reachable inside the cluster",
            ],
        },
        Case {
            what: "headless",
            spec: json!({ "type": "ClusterIP", "clusterIP": "None", "externalIPs": ["198.51.100.8"], "ports": [{ "port": 80 }] }),
            slices: vec![],
            vips: &[],
            want: &["ignored: headless (clusterIP: None): clients reach the pods directly"],
        },
        Case {
            what: "ExternalName",
            spec: json!({ "type": "ExternalName", "externalName": "db.example" }),
            slices: vec![],
            vips: &[],
            want: &["ignored: type ExternalName is a DNS alias; there is nothing to forward"],
        },
        Case {
            what: "unknown type",
            spec: json!({ "type": "Magic" }),
            slices: vec![],
            vips: &[],
            want: &["ignored: unknown Service type \"Magic\""],
        },
        Case {
            what: "TCP and UDP ports, unnamed-port naming, SCTP skipped",
            spec: json!({
                "type": "LoadBalancer",
                "allocateLoadBalancerNodePorts": false,
                "ports": [
                    { "name": "dns-udp", "port": 53, "protocol": "UDP" },
                    { "name": "dns-tcp", "port": 53, "protocol": "TCP" },
                    { "name": "sig", "port": 9, "protocol": "SCTP" },
                ],
            }),
            slices: vec![slice(
                "a",
                json!({
                    "ports": [
                        { "name": "dns-udp", "port": 5353, "protocol": "UDP" },
                        { "name": "dns-tcp", "port": 5354 },
                    ],
                    "endpoints": [ep("10.0.0.1", json!({}))],
                }),
            )],
            vips: &[VIP],
            want: &[
                "ns/web:dns-udp/udp [203.0.113.7:53 vip] -> [10.0.0.1:5353 ready]",
                "ns/web:dns-tcp/tcp [203.0.113.7:53 vip] -> [10.0.0.1:5354 ready]",
                "skip: port \"sig\" (SCTP/9): protocol SCTP is not forwarded",
            ],
        },
        Case {
            what: "unnamed port: named by number, matched to the unnamed slice port",
            spec: json!({ "type": "LoadBalancer", "allocateLoadBalancerNodePorts": false, "ports": [{ "port": 80, "targetPort": "web" }] }),
            slices: vec![slice(
                "a",
                json!({
                    "ports": [{ "port": 8081 }],
                    "endpoints": [ep("10.0.0.1", json!({}))],
                }),
            )],
            vips: &[VIP],
            want: &["ns/web:80/tcp [203.0.113.7:80 vip] -> [10.0.0.1:8081 ready]"],
        },
        Case {
            what: "a slice without the port contributes nothing; protocol must match too",
            spec: http_lb(json!({ "allocateLoadBalancerNodePorts": false })),
            slices: vec![
                slice("a", json!({ "endpoints": [ep("10.0.0.1", json!({}))] })),
                slice(
                    "b",
                    json!({
                        "ports": [{ "name": "metrics", "port": 9100 }],
                        "endpoints": [ep("10.0.0.2", json!({}))],
                    }),
                ),
                slice(
                    "c",
                    json!({
                        "ports": [{ "name": "http", "port": 8080, "protocol": "UDP" }],
                        "endpoints": [ep("10.0.0.3", json!({}))],
                    }),
                ),
            ],
            vips: &[VIP],
            want: &["ns/web:http/tcp [203.0.113.7:80 vip] -> [10.0.0.1:8080 ready]"],
        },
        Case {
            what: "slice port without a number: numeric targetPort is used, a named one cannot be",
            spec: json!({
                "type": "LoadBalancer",
                "allocateLoadBalancerNodePorts": false,
                "ports": [
                    { "name": "http", "port": 80, "targetPort": 8080 },
                    { "name": "admin", "port": 81, "targetPort": "admin" },
                ],
            }),
            slices: vec![slice(
                "a",
                json!({
                    "ports": [{ "name": "http" }, { "name": "admin" }],
                    "endpoints": [ep("10.0.0.1", json!({}))],
                }),
            )],
            vips: &[VIP],
            want: &[
                "ns/web:http/tcp [203.0.113.7:80 vip] -> [10.0.0.1:8080 ready]",
                "ns/web:admin/tcp [203.0.113.7:81 vip] -> []",
            ],
        },
        Case {
            what: "endpoint conditions (KEP-1669), nil ready is ready",
            spec: http_lb(json!({ "allocateLoadBalancerNodePorts": false })),
            slices: vec![slice(
                "a",
                json!({ "endpoints": [
                ep("10.0.0.1", json!({})),
                ep("10.0.0.2", json!({ "ready": true })),
                ep("10.0.0.3", json!({ "ready": false, "serving": true, "terminating": true })),
                ep("10.0.0.4", json!({ "ready": false, "terminating": true })),
                ep("10.0.0.5", json!({ "ready": false })),
                ep("10.0.0.6", json!({ "ready": false, "serving": false, "terminating": true })),
                ep("10.0.0.7", json!({ "ready": false, "serving": true })),
                { "addresses": ["10.0.0.8"] },
            ] }),
            )],
            vips: &[VIP],
            want: &[
                "ns/web:http/tcp [203.0.113.7:80 vip] -> [10.0.0.1:8080 ready, 10.0.0.2:8080 ready, 10.0.0.3:8080 terminating, 10.0.0.4:8080 terminating, 10.0.0.5:8080 draining, 10.0.0.6:8080 draining, 10.0.0.7:8080 draining, 10.0.0.8:8080 ready]",
            ],
        },
        Case {
            what: "IPv6, FQDN, other Service's and other namespace's slices are skipped",
            spec: http_lb(json!({ "allocateLoadBalancerNodePorts": false })),
            slices: vec![
                slice(
                    "v6",
                    json!({ "addressType": "IPv6", "endpoints": [ep("2001:db8::1", json!({}))] }),
                ),
                slice(
                    "fqdn",
                    json!({ "addressType": "FQDN", "endpoints": [ep("pod.example", json!({}))] }),
                ),
                slice(
                    "other",
                    json!({
                        "metadata": { "labels": { "kubernetes.io/service-name": "api" } },
                        "endpoints": [ep("10.0.0.9", json!({}))],
                    }),
                ),
                slice(
                    "elsewhere",
                    json!({
                        "metadata": { "namespace": "other" },
                        "endpoints": [ep("10.0.0.10", json!({}))],
                    }),
                ),
                slice(
                    "mine",
                    json!({ "endpoints": [
                    { "addresses": ["10.0.0.1", "10.0.0.99"] },
                    { "addresses": ["not-an-ip"] },
                ] }),
                ),
            ],
            vips: &[VIP],
            want: &["ns/web:http/tcp [203.0.113.7:80 vip] -> [10.0.0.1:8080 ready]"],
        },
        Case {
            what: "an address in two slices appears once, with its best condition",
            spec: http_lb(json!({ "allocateLoadBalancerNodePorts": false })),
            slices: vec![
                slice(
                    "a",
                    json!({ "endpoints": [
                    ep("10.0.0.1", json!({ "ready": false })),
                    ep("10.0.0.2", json!({ "ready": true })),
                ] }),
                ),
                slice(
                    "b",
                    json!({ "endpoints": [
                    ep("10.0.0.1", json!({ "ready": false, "serving": true, "terminating": true })),
                    ep("10.0.0.2", json!({ "ready": false })),
                ] }),
                ),
            ],
            vips: &[VIP],
            want: &[
                "ns/web:http/tcp [203.0.113.7:80 vip] -> [10.0.0.1:8080 terminating, 10.0.0.2:8080 ready]",
            ],
        },
        Case {
            what: "ClientIP affinity (default, explicit, clamped) and externalTrafficPolicy Local",
            spec: json!({
                "type": "LoadBalancer",
                "allocateLoadBalancerNodePorts": false,
                "sessionAffinity": "ClientIP",
                "externalTrafficPolicy": "Local",
                "ports": [{ "name": "http", "port": 80 }],
            }),
            slices: one_ready(),
            vips: &[VIP],
            want: &[
                "ns/web:http/tcp [203.0.113.7:80 vip] -> [10.0.0.1:8080 ready] no-snat affinity=10800000",
            ],
        },
        Case {
            what: "ClientIP affinity with timeoutSeconds",
            spec: json!({
                "type": "LoadBalancer",
                "allocateLoadBalancerNodePorts": false,
                "sessionAffinity": "ClientIP",
                "sessionAffinityConfig": { "clientIP": { "timeoutSeconds": 60 } },
                "externalTrafficPolicy": "Cluster",
                "ports": [{ "name": "http", "port": 80 }],
            }),
            slices: one_ready(),
            vips: &[VIP],
            want: &["ns/web:http/tcp [203.0.113.7:80 vip] -> [10.0.0.1:8080 ready] affinity=60000"],
        },
        Case {
            what: "several VIPs, sorted",
            spec: http_lb(json!({ "allocateLoadBalancerNodePorts": false })),
            slices: one_ready(),
            vips: &[VIP9, VIP],
            want: &[
                "ns/web:http/tcp [203.0.113.7:80 vip, 203.0.113.9:80 vip] -> [10.0.0.1:8080 ready]",
            ],
        },
        Case {
            what: "bad port numbers",
            spec: json!({
                "type": "NodePort",
                "ports": [{ "name": "a", "port": 70000, "nodePort": 30001 }, { "name": "b", "port": 80, "nodePort": 70000 }],
            }),
            slices: vec![],
            vips: &[],
            want: &[
                "ignored: no port can be served: port \"a\" (TCP/70000): number out of range; port \"b\" (TCP/80): number out of range",
            ],
        },
        Case {
            what: "dual-stack LoadBalancer: one spec per family, each with its family's VIP, node ports and slices",
            spec: http_lb(
                json!({ "ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv4", "IPv6"] }),
            ),
            slices: dual_slices(),
            vips: &[VIP, VIP6],
            want: &[
                "ns/web:http/tcp [203.0.113.7:80 vip, 192.0.2.1:30080 node, 192.0.2.2:30080 node] -> [10.0.0.1:8080 ready]",
                "ns/web:http/tcp/ipv6 [[2001:db8:5::7]:80 vip, [2001:db8::1]:30080 node] -> [[fd00:1::10]:8080 ready, [fd00:1::11]:8080 terminating]",
            ],
        },
        Case {
            what: "IPv6 single-stack: the IPv4 slice and VIP are not its own",
            spec: http_lb(
                json!({ "ipFamilies": ["IPv6"], "allocateLoadBalancerNodePorts": false }),
            ),
            slices: dual_slices(),
            vips: &[VIP, VIP6],
            want: &[
                "ns/web:http/tcp/ipv6 [[2001:db8:5::7]:80 vip] -> [[fd00:1::10]:8080 ready, [fd00:1::11]:8080 terminating]",
            ],
        },
        Case {
            what: "IPv4 single-stack (no ipFamilies): IPv6 slices are not used",
            spec: http_lb(json!({ "allocateLoadBalancerNodePorts": false })),
            slices: dual_slices(),
            vips: &[VIP],
            want: &["ns/web:http/tcp [203.0.113.7:80 vip] -> [10.0.0.1:8080 ready]"],
        },
        Case {
            what: "externalIPs of either family, each where the Service has the family",
            spec: json!({
                "type": "ClusterIP",
                "ipFamilies": ["IPv6"],
                "ipFamilyPolicy": "SingleStack",
                "externalIPs": ["2001:db8:e::5", "198.51.100.8", "2001:db8:f::5", "fd00:1::1"],
                "ports": [{ "name": "http", "port": 80 }],
            }),
            slices: dual_slices(),
            vips: &[],
            want: &[
                "ns/web:http/tcp/ipv6 [[2001:db8:e::5]:80 ext] -> [[fd00:1::10]:8080 ready, [fd00:1::11]:8080 terminating]",
                "skip: externalIP 198.51.100.8 is IPv4, but the Service's ipFamilies are [IPv6]",
                "skip: externalIP 2001:db8:f::5 is outside the CIDRs this gateway serves externalIPs from ([kubernetes] external_ip_cidrs); not announced or served",
                "skip: externalIP fd00:1::1 is one of the gateway's own addresses",
            ],
        },
    ]
}

#[test]
fn every_semantic_case() {
    let mut failures = Vec::new();
    for c in cases() {
        let svc = service(c.spec.clone());
        let slices: Vec<&EndpointSlice> = c.slices.iter().collect();
        let got = render(&service_specs(&svc, &slices, c.vips, &cfg()));
        if got != c.want {
            failures.push(format!(
                "{}:\n  got  {got:#?}\n  want {:#?}",
                c.what, c.want
            ));
        }
        // The same inputs in another order give the same specs.
        let mut reversed = slices.clone();
        reversed.reverse();
        let vips: Vec<IpAddr> = c.vips.iter().rev().copied().collect();
        assert_eq!(
            service_specs(&svc, &reversed, &vips, &cfg()),
            service_specs(&svc, &slices, c.vips, &cfg()),
            "{}",
            c.what
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn unclassed_services_need_serve_unclassed() {
    let svc = service(http_lb(json!({})));
    let off = ModelConfig {
        serve_unclassed: false,
        ..cfg()
    };
    assert_eq!(
        service_specs(&svc, &[], &[VIP], &off),
        ServiceOutcome::Ignored {
            reason: IgnoreReason::Unclassed
        }
    );
    assert!(!is_served_class(&svc, &off) && is_served_class(&svc, &cfg()));
    assert!(!wants_load_balancer_address(&svc, &off));
    assert!(wants_load_balancer_address(&svc, &cfg()));
    // Classes only concern LoadBalancer Services.
    let np = service(json!({ "type": "NodePort", "ports": [{ "port": 80, "nodePort": 30080 }] }));
    assert!(is_served_class(&np, &off));
    assert!(!wants_load_balancer_address(&np, &cfg()));
    let classed = service(http_lb(json!({ "loadBalancerClass": "portico.dev/lb" })));
    assert!(wants_load_balancer_address(&classed, &off));
    let foreign = service(http_lb(json!({ "loadBalancerClass": "x.io/y" })));
    assert!(!wants_load_balancer_address(&foreign, &cfg()));
}

#[test]
fn tcp_backend_gone_comes_from_the_config_for_tcp_only() {
    let svc = service(json!({
        "type": "LoadBalancer",
        "ports": [{ "name": "t", "port": 53 }, { "name": "u", "port": 53, "protocol": "UDP" }],
    }));
    let ServiceOutcome::Serve { specs, .. } = service_specs(&svc, &[], &[VIP], &cfg()) else {
        panic!("not served")
    };
    assert_eq!(specs[0].tcp_backend_gone, BackendGonePolicy::Reset);
    assert_eq!(specs[1].tcp_backend_gone, BackendGonePolicy::Drop);
    assert!(specs.iter().all(|s| s.endpoints.is_empty()));
}

#[test]
fn model_config_comes_from_the_plan() {
    let plan = nic_config::parse(
        r#"
        [[port]]
        name = "lan"
        driver = "mem"
        interface = "lan"
        role = "both"
        node_addresses = ["192.0.2.2/24", "192.0.2.1/24"]
        snat_addresses = ["192.0.2.1/24", "192.0.2.9/24"]
        host_addresses = ["192.0.2.3/24"]

        [kubernetes]
        load_balancer_class = "example.com/lb"
        "#,
    )
    .unwrap();
    let c = ModelConfig::from_plan(&plan).unwrap();
    assert_eq!(c.load_balancer_class, "example.com/lb");
    assert!(!c.serve_unclassed);
    let ips =
        |list: &[&str]| -> Vec<IpAddr> { list.iter().map(|a| a.parse().expect("ip")).collect() };
    assert_eq!(c.node_addresses, ips(&["192.0.2.1", "192.0.2.2"]));
    assert_eq!(
        c.gateway_addresses,
        ips(&["192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.9"])
    );
    let mut without = plan.clone();
    without.kubernetes = None;
    assert_eq!(ModelConfig::from_plan(&without), None);
}

/// What the model produces, the dataplane's builder accepts.
#[test]
fn specs_build_into_a_snapshot() {
    use dataplane::snapshot::{AddrRole, PortSpec, SnapshotBuilder, SnapshotSpec};
    let mut services = Vec::new();
    for c in cases() {
        let svc = service(c.spec.clone());
        let slices: Vec<&EndpointSlice> = c.slices.iter().collect();
        if let ServiceOutcome::Serve { specs, .. } = service_specs(&svc, &slices, c.vips, &cfg()) {
            services.push(specs);
        }
    }
    // The cases reuse one Service name and its listeners: build each alone.
    for specs in services {
        let spec = SnapshotSpec {
            ports: vec![PortSpec {
                mac: [2, 0, 0, 0, 0, 1],
                mtu: 1500,
                mss_clamp: None,
            }],
            vip_port: 0,
            addresses: cfg()
                .gateway_addresses
                .iter()
                .map(|&a| {
                    (
                        a,
                        0,
                        if a == IpAddr::from(Ipv4Addr::new(192, 0, 2, 3)) || a == SNAT6 {
                            AddrRole::Snat
                        } else {
                            AddrRole::Node
                        },
                    )
                })
                .collect(),
            routes: vec![],
            neighbours: vec![],
            services: specs,
            maglev_table_size: 251,
        };
        SnapshotBuilder::new()
            .build(&spec)
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

/// `ns/web` (LoadBalancer, TCP 80 and UDP 53) with `annotations`.
fn annotated(annotations: Value) -> Service {
    serde_json::from_value(json!({
        "metadata": { "name": "web", "namespace": "ns", "annotations": annotations },
        "spec": {
            "type": "LoadBalancer",
            "allocateLoadBalancerNodePorts": false,
            "ports": [
                { "name": "http", "port": 80, "protocol": "TCP" },
                { "name": "dns", "port": 53, "protocol": "UDP" },
            ],
        },
    }))
    .unwrap()
}

/// The SYN proxy of each spec, and what was skipped.
fn syn_proxies(svc: &Service, cfg: &ModelConfig) -> (Vec<(String, SynProxyMode)>, Vec<String>) {
    let slices = one_ready();
    let slices: Vec<&EndpointSlice> = slices.iter().collect();
    match service_specs(svc, &slices, &[VIP], cfg) {
        ServiceOutcome::Serve { specs, skipped } => (
            specs
                .iter()
                .map(|s| (s.name.clone(), s.syn_proxy))
                .collect(),
            skipped.iter().map(ToString::to_string).collect(),
        ),
        ServiceOutcome::Ignored { reason } => panic!("ignored: {reason}"),
    }
}

#[test]
fn the_syn_proxy_annotation_overrides_the_gateway_default_on_tcp_ports() {
    let auto = SynProxyMode::Auto {
        half_open_threshold: 1000,
    };
    let off_by_default = cfg();
    let on_by_default = ModelConfig {
        syn_proxy: SynProxyMode::On,
        ..cfg()
    };
    let tcp_udp = |tcp: SynProxyMode| {
        vec![
            ("ns/web:http/tcp".to_owned(), tcp),
            ("ns/web:dns/udp".to_owned(), SynProxyMode::Off),
        ]
    };
    let cases: Vec<(&str, Value, &ModelConfig, SynProxyMode)> = vec![
        (
            "no annotation, default off",
            json!({}),
            &off_by_default,
            SynProxyMode::Off,
        ),
        (
            "no annotation, default on",
            json!({}),
            &on_by_default,
            SynProxyMode::On,
        ),
        (
            "on",
            json!({ ANNOTATION_SYN_PROXY: "on" }),
            &off_by_default,
            SynProxyMode::On,
        ),
        (
            "auto",
            json!({ ANNOTATION_SYN_PROXY: "auto" }),
            &off_by_default,
            auto,
        ),
        (
            "spaces",
            json!({ ANNOTATION_SYN_PROXY: " on " }),
            &off_by_default,
            SynProxyMode::On,
        ),
        (
            "off over on",
            json!({ ANNOTATION_SYN_PROXY: "off" }),
            &on_by_default,
            SynProxyMode::Off,
        ),
    ];
    for (what, annotations, cfg, want) in cases {
        let got = syn_proxies(&annotated(annotations), cfg);
        assert_eq!(got, (tcp_udp(want), Vec::new()), "{what}");
    }
}

#[test]
fn a_bad_syn_proxy_annotation_is_named_with_the_accepted_values_and_the_default_applies() {
    let on_by_default = ModelConfig {
        syn_proxy: SynProxyMode::On,
        ..cfg()
    };
    let svc = annotated(json!({ ANNOTATION_SYN_PROXY: "yes" }));
    let (specs, skipped) = syn_proxies(&svc, &on_by_default);
    assert_eq!(
        specs,
        vec![
            ("ns/web:http/tcp".to_owned(), SynProxyMode::On),
            ("ns/web:dns/udp".to_owned(), SynProxyMode::Off),
        ]
    );
    assert_eq!(
        skipped,
        vec![
            "annotation portico.dev/syn-proxy=\"yes\" is not one of \"off\", \"on\", \"auto\"; the gateway's default (on) applies"
                .to_owned()
        ]
    );
}

#[test]
fn both_families_of_a_dual_stack_spec_take_the_syn_proxy_without_a_warning() {
    let svc: Service = serde_json::from_value(json!({
        "metadata": { "name": "web", "namespace": "ns",
                      "annotations": { ANNOTATION_SYN_PROXY: "on" } },
        "spec": {
            "type": "LoadBalancer",
            "allocateLoadBalancerNodePorts": false,
            "ipFamilyPolicy": "RequireDualStack",
            "ipFamilies": ["IPv4", "IPv6"],
            "ports": [{ "name": "http", "port": 80, "protocol": "TCP" }],
        },
    }))
    .unwrap();
    let slices = dual_slices();
    let slices: Vec<&EndpointSlice> = slices.iter().collect();
    let ServiceOutcome::Serve { specs, skipped } =
        service_specs(&svc, &slices, &[VIP, VIP6], &cfg())
    else {
        panic!("the service is served");
    };
    let modes: Vec<(String, SynProxyMode)> = specs
        .iter()
        .map(|s| (s.name.clone(), s.syn_proxy))
        .collect();
    assert_eq!(
        modes,
        vec![
            ("ns/web:http/tcp".to_owned(), SynProxyMode::On),
            ("ns/web:http/tcp/ipv6".to_owned(), SynProxyMode::On),
        ]
    );
    assert!(skipped.is_empty(), "{skipped:?}");
}
