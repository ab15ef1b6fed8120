//! Reconciler windows without an API server: IPAM, the model and the
//! snapshot update of one debounce window, checked against the specs.

use super::super::watch::Update;
use super::*;
use dataplane::flow::Proto;
use dataplane::snapshot::{
    AddrRole, BackendGonePolicy, PortSpec, Route, SnapshotSpec, SynProxyMode,
};
use std::net::Ipv4Addr;

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap_or(Ipv4Addr::UNSPECIFIED)
}

fn reconciler() -> Reconciler {
    let mut builder = SnapshotBuilder::new();
    let base = SnapshotSpec {
        ports: vec![
            PortSpec {
                mac: [2, 0, 0, 0, 0, 1],
                mtu: 1500,
                mss_clamp: None,
            };
            2
        ],
        vip_port: 0,
        addresses: vec![
            (ip("192.0.2.1").into(), 0, AddrRole::Node),
            (ip("10.1.0.1").into(), 1, AddrRole::Snat),
        ],
        routes: vec![Route {
            dest: ip("10.1.0.0").into(),
            prefix_len: 24,
            port: 1,
            via: None,
        }],
        neighbours: Vec::new(),
        services: Vec::new(),
        maglev_table_size: 251,
    };
    if let Err(e) = builder.build(&base) {
        panic!("base: {e}");
    }
    let options = ModelConfig {
        load_balancer_class: "portico.dev/lb".into(),
        serve_unclassed: true,
        node_addresses: vec![ip("192.0.2.1").into()],
        gateway_addresses: vec![ip("10.1.0.1").into(), ip("192.0.2.1").into()],
        tcp_backend_gone: BackendGonePolicy::Drop,
        external_ip_cidrs: vec!["192.0.2.0/24".parse().expect("cidr")],
        syn_proxy: SynProxyMode::Off,
        syn_proxy_half_open_threshold: 1000,
    };
    Reconciler::new(options, Allocator::new(&[]), builder)
}

fn external_ip_service(name: &str, rv: &str) -> Service {
    dated_external_ip_service(name, rv, None, "192.0.2.50")
}

fn dated_external_ip_service(
    name: &str,
    rv: &str,
    created: Option<&str>,
    external_ip: &str,
) -> Service {
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": name,
            "namespace": "default",
            "resourceVersion": rv,
            "creationTimestamp": created,
        },
        "spec": {
            "type": "ClusterIP",
            "externalIPs": [external_ip],
            "ports": [{ "port": 80, "targetPort": 8080 }],
        },
    }))
    .unwrap_or_default()
}

#[test]
fn a_clashing_service_is_left_out_reported_and_served_once_the_clash_goes() {
    let mut r = reconciler();
    let mut state = ClusterState::default();
    state.apply_slices(Update::Listed(Vec::new()));
    let touched = state.apply_services(Update::Listed(vec![external_ip_service("first", "1")]));
    let out = r.window(&state, &touched, true);
    let snap = out.snapshot.unwrap_or_else(|| panic!("first is served"));
    let listener = snap.listener(Proto::Tcp, ip("192.0.2.50"), 80);
    let first = listener
        .and_then(|l| snap.service(l.service))
        .map(|s| s.name.to_string());
    assert_eq!(first.as_deref(), Some("default/first:80/tcp"));

    // The same externalIP:port again: left out, with a Warning Event.
    let touched = state.apply_services(Update::Applied(external_ip_service("second", "2")));
    let out = r.window(&state, &touched, true);
    assert!(out.snapshot.is_none(), "nothing changed in the tables");
    assert!(!out.build_failed);
    let rejected: Vec<(String, String)> = out
        .events
        .iter()
        .map(|e| (ServiceKey::of(&e.service).to_string(), e.reason.clone()))
        .collect();
    assert_eq!(
        rejected,
        [("default/second".to_owned(), "ServiceRejected".to_owned())]
    );

    // The first goes: the second is retried and served.
    let touched = state.apply_services(Update::Deleted(external_ip_service("first", "3")));
    let out = r.window(&state, &touched, true);
    let snap = out.snapshot.unwrap_or_else(|| panic!("second is served"));
    let listener = snap.listener(Proto::Tcp, ip("192.0.2.50"), 80);
    let served = listener
        .and_then(|l| snap.service(l.service))
        .map(|s| s.name.to_string());
    assert_eq!(served.as_deref(), Some("default/second:80/tcp"));
}

/// The name of the Service serving 192.0.2.50:80/tcp.
fn served_at_50(snap: &Snapshot) -> Option<String> {
    snap.listener(Proto::Tcp, ip("192.0.2.50"), 80)
        .and_then(|l| snap.service(l.service))
        .map(|s| s.name.to_string())
}

fn rejections(out: &WindowOutcome) -> Vec<String> {
    out.events
        .iter()
        .filter(|e| e.reason == "ServiceRejected")
        .map(|e| ServiceKey::of(&e.service).to_string())
        .collect()
}

#[test]
fn of_two_clashing_services_the_older_is_served_whatever_the_order_of_events() {
    // "late" is named first in order but created later.
    let old =
        |rv| dated_external_ip_service("zz-old", rv, Some("2026-01-01T00:00:00Z"), "192.0.2.50");
    let late = |rv, external_ip| {
        dated_external_ip_service("aa-late", rv, Some("2026-06-01T00:00:00Z"), external_ip)
    };

    // Both in the initial list (a fresh or restarted instance).
    let mut r = reconciler();
    let mut state = ClusterState::default();
    state.apply_slices(Update::Listed(Vec::new()));
    let touched = state.apply_services(Update::Listed(vec![late("1", "192.0.2.50"), old("2")]));
    let out = r.window(&state, &touched, true);
    let snap = out
        .snapshot
        .as_ref()
        .unwrap_or_else(|| panic!("one of them is served"));
    assert_eq!(served_at_50(snap).as_deref(), Some("default/zz-old:80/tcp"));
    assert_eq!(rejections(&out), ["default/aa-late"]);

    // One at a time, the younger first and in force: when the older
    // comes, it takes the listener and the younger gives way.
    let mut r = reconciler();
    let mut state = ClusterState::default();
    state.apply_slices(Update::Listed(Vec::new()));
    let touched = state.apply_services(Update::Listed(vec![late("1", "192.0.2.50")]));
    let out = r.window(&state, &touched, true);
    let snap = out
        .snapshot
        .as_ref()
        .unwrap_or_else(|| panic!("late is served alone"));
    assert_eq!(
        served_at_50(snap).as_deref(),
        Some("default/aa-late:80/tcp")
    );
    let touched = state.apply_services(Update::Applied(old("2")));
    let out = r.window(&state, &touched, true);
    let snap = out
        .snapshot
        .as_ref()
        .unwrap_or_else(|| panic!("the older replaces it"));
    assert_eq!(served_at_50(snap).as_deref(), Some("default/zz-old:80/tcp"));
    assert_eq!(rejections(&out), ["default/aa-late"]);

    // Another change retries the rejected one: still refused, and not
    // reported again for the same problem.
    let other = dated_external_ip_service("other", "3", Some("2026-02-01T00:00:00Z"), "192.0.2.60");
    let touched = state.apply_services(Update::Applied(other));
    let out = r.window(&state, &touched, true);
    let snap = out
        .snapshot
        .as_ref()
        .unwrap_or_else(|| panic!("other is served"));
    assert_eq!(served_at_50(snap).as_deref(), Some("default/zz-old:80/tcp"));
    assert!(rejections(&out).is_empty(), "{:?}", out.events);

    // The younger moves off the clashing address: served again.
    let touched = state.apply_services(Update::Applied(late("4", "192.0.2.70")));
    let out = r.window(&state, &touched, true);
    let snap = out
        .snapshot
        .as_ref()
        .unwrap_or_else(|| panic!("late is served again"));
    assert_eq!(served_at_50(snap).as_deref(), Some("default/zz-old:80/tcp"));
    let at_70 = snap
        .listener(Proto::Tcp, ip("192.0.2.70"), 80)
        .and_then(|l| snap.service(l.service))
        .map(|s| s.name.to_string());
    assert_eq!(at_70.as_deref(), Some("default/aa-late:80/tcp"));
}

#[test]
fn an_external_ip_outside_the_allowed_cidrs_is_not_served_and_gets_one_warning() {
    let mut r = reconciler();
    let mut state = ClusterState::default();
    let _ = state.apply_services(Update::Listed(Vec::new()));
    let _ = state.apply_slices(Update::Listed(Vec::new()));
    let _ = r.window(&state, &BTreeSet::new(), true);
    // A tenant asks for an address this gateway was not given.
    let svc = dated_external_ip_service("grab", "1", None, "203.0.113.7");
    let touched = state.apply_services(Update::Applied(svc));
    let out = r.window(&state, &touched, true);
    if let Some(snap) = &out.snapshot {
        assert!(
            snap.listener(Proto::Tcp, ip("203.0.113.7"), 80).is_none(),
            "never served"
        );
        assert!(
            snap.owned(ip("203.0.113.7")).is_none(),
            "never answered for"
        );
    }
    let warnings: Vec<(String, bool, String)> = out
        .events
        .iter()
        .map(|e| (e.reason.clone(), e.warning, e.note.clone()))
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].0, "ExternalIPNotAllowed");
    assert!(warnings[0].1, "a Warning");
    assert!(
        warnings[0].2.contains("externalIP 203.0.113.7 is outside"),
        "{warnings:?}"
    );
    // Nothing changed: no second Event.
    let touched = state.apply_services(Update::Applied(dated_external_ip_service(
        "grab",
        "2",
        None,
        "203.0.113.7",
    )));
    let out = r.window(&state, &touched, true);
    assert!(out.events.is_empty(), "{:?}", out.events);
}

/// The Warning Events of a window: `(reason, note)`.
fn warnings(out: &WindowOutcome) -> Vec<(String, String)> {
    out.events
        .iter()
        .filter(|e| e.warning)
        .map(|e| (e.reason.clone(), e.note.clone()))
        .collect()
}

/// A reconciler whose allocator has one auto-assign pool with ranges of
/// both families.
fn dual_reconciler() -> Reconciler {
    let mut r = reconciler();
    r.options
        .external_ip_cidrs
        .push("2001:db8:e::/64".parse().expect("cidr"));
    let pool = nic_config::AddressPoolPlan {
        name: "dual".into(),
        ranges: vec![
            "203.0.113.0/29".parse().expect("range"),
            "2001:db8:5::/126".parse().expect("range"),
        ],
        auto_assign: true,
        avoid_buggy_ips: false,
    };
    Reconciler::new(r.options, Allocator::new(&[pool]), r.builder)
}

fn dual_lb(name: &str, rv: &str, policy: &str, families: &[&str]) -> Service {
    serde_json::from_value(serde_json::json!({
        "metadata": { "name": name, "namespace": "default", "resourceVersion": rv },
        "spec": {
            "type": "LoadBalancer",
            "ipFamilyPolicy": policy,
            "ipFamilies": families,
            "allocateLoadBalancerNodePorts": false,
            "ports": [{ "name": "http", "port": 80, "targetPort": 8080 }],
        },
    }))
    .unwrap_or_default()
}

fn family_slice(
    service: &str,
    name: &str,
    family: &str,
    address: &str,
) -> k8s_openapi::api::discovery::v1::EndpointSlice {
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": name,
            "namespace": "default",
            "resourceVersion": "1",
            "labels": { "kubernetes.io/service-name": service },
        },
        "addressType": family,
        "ports": [{ "name": "http", "port": 8080, "protocol": "TCP" }],
        "endpoints": [{ "addresses": [address], "conditions": { "ready": true } }],
    }))
    .unwrap_or_default()
}

#[test]
fn a_dual_stack_window_serves_both_families_and_writes_both_addresses() {
    let mut r = dual_reconciler();
    let mut state = ClusterState::default();
    state.apply_slices(Update::Listed(vec![
        family_slice("web", "web-4", "IPv4", "10.1.0.10"),
        family_slice("web", "web-6", "IPv6", "fd00:1::10"),
    ]));
    let touched = state.apply_services(Update::Listed(vec![dual_lb(
        "web",
        "1",
        "RequireDualStack",
        &["IPv4", "IPv6"],
    )]));
    let out = r.window(&state, &touched, true);
    let snap = out.snapshot.unwrap_or_else(|| panic!("web is served"));
    let v6: std::net::Ipv6Addr = "2001:db8:5::".parse().expect("ip");
    let names: Vec<Option<String>> = [
        snap.listener(Proto::Tcp, ip("203.0.113.0"), 80),
        snap.listener6(Proto::Tcp, v6, 80),
    ]
    .iter()
    .map(|l| {
        l.and_then(|l| snap.service(l.service))
            .map(|s| s.name.to_string())
    })
    .collect();
    assert_eq!(
        names,
        [
            Some("default/web:http/tcp".to_owned()),
            Some("default/web:http/tcp/ipv6".to_owned())
        ]
    );
    let allocated: Vec<&str> = out
        .events
        .iter()
        .filter(|e| e.reason == "IPAllocated")
        .map(|e| e.note.as_str())
        .collect();
    assert_eq!(allocated, ["assigned 203.0.113.0, 2001:db8:5::"]);
    let writes = r.status_writes(&state, &touched);
    let want: Vec<std::net::IpAddr> = vec![ip("203.0.113.0").into(), v6.into()];
    assert_eq!(writes, [(ServiceKey::new("default", "web"), want)]);

    // A second RequireDualStack Service while IPv6 is left: both again;
    // a third finds IPv6 used up: a Warning Event and nothing held.
    let touched = state.apply_services(Update::Applied(dual_lb(
        "b",
        "2",
        "RequireDualStack",
        &["IPv6", "IPv4"],
    )));
    r.window(&state, &touched, true);
    assert_eq!(
        r.allocator()
            .addresses(&ServiceKey::new("default", "b"))
            .len(),
        2
    );
    for (i, name) in ["c", "d"].iter().enumerate() {
        let touched = state.apply_services(Update::Applied(dual_lb(
            name,
            &(3 + i).to_string(),
            "RequireDualStack",
            &["IPv4", "IPv6"],
        )));
        r.window(&state, &touched, true);
    }
    // 2001:db8:5::/126 holds four (web, b, c, d): e gets a Warning Event
    // and neither family (203.0.113.0/29 has addresses left).
    let touched = state.apply_services(Update::Applied(dual_lb(
        "e",
        "8",
        "RequireDualStack",
        &["IPv4", "IPv6"],
    )));
    let out = r.window(&state, &touched, true);
    let warnings = warnings(&out);
    assert_eq!(
        warnings,
        [(
            "PoolExhausted".to_owned(),
            "no free IPv6 address in pool(s) dual".to_owned()
        )]
    );
    let e = ServiceKey::new("default", "e");
    assert!(r.allocator().addresses(&e).is_empty());
    assert!(
        r.status_writes(&state, &touched).is_empty(),
        "no half status"
    );
    let touched = state.apply_services(Update::Applied(dual_lb(
        "e",
        "9",
        "RequireDualStack",
        &["IPv4", "IPv6"],
    )));
    let out = r.window(&state, &touched, true);
    assert!(
        out.events.is_empty(),
        "the problem is reported once, not on every window: {:?}",
        out.events.iter().map(|e| &e.note).collect::<Vec<_>>()
    );
}

#[test]
fn an_external_ip_of_a_family_the_service_lacks_is_a_warning_event() {
    let mut r = dual_reconciler();
    let mut state = ClusterState::default();
    state.apply_slices(Update::Listed(Vec::new()));
    let mut svc = dated_external_ip_service("web", "1", None, "192.0.2.50");
    if let Some(spec) = svc.spec.as_mut() {
        spec.external_ips = Some(vec!["192.0.2.50".into(), "2001:db8:e::5".into()]);
    }
    let touched = state.apply_services(Update::Listed(vec![svc]));
    let out = r.window(&state, &touched, true);
    let snap = out
        .snapshot
        .as_ref()
        .unwrap_or_else(|| panic!("the IPv4 externalIP is served"));
    assert!(snap.listener(Proto::Tcp, ip("192.0.2.50"), 80).is_some());
    let v6: std::net::Ipv6Addr = "2001:db8:e::5".parse().expect("ip");
    assert!(snap.listener6(Proto::Tcp, v6, 80).is_none());
    let warnings = warnings(&out);
    assert_eq!(
        warnings,
        [(
            "ExternalIPWrongFamily".to_owned(),
            "externalIP 2001:db8:e::5 is IPv6, but the Service's ipFamilies are [IPv4]".to_owned()
        )]
    );
}

#[test]
fn a_follower_serves_both_addresses_of_a_dual_stack_status() {
    let mut r = dual_reconciler();
    let mut state = ClusterState::default();
    state.apply_slices(Update::Listed(vec![
        family_slice("web", "web-4", "IPv4", "10.1.0.10"),
        family_slice("web", "web-6", "IPv6", "fd00:1::10"),
    ]));
    let mut svc = dual_lb("web", "1", "RequireDualStack", &["IPv4", "IPv6"]);
    svc.status = serde_json::from_value(serde_json::json!({ "loadBalancer": { "ingress": [
        { "ip": "203.0.113.3" }, { "ip": "2001:db8:5::2" }
    ] } }))
    .ok();
    let touched = state.apply_services(Update::Listed(vec![svc]));
    let out = r.window(&state, &touched, false);
    let snap = out.snapshot.unwrap_or_else(|| panic!("web is served"));
    let v6: std::net::Ipv6Addr = "2001:db8:5::2".parse().expect("ip");
    assert!(snap.listener(Proto::Tcp, ip("203.0.113.3"), 80).is_some());
    assert!(snap.listener6(Proto::Tcp, v6, 80).is_some());
    assert!(out.events.is_empty(), "a follower writes nothing");
    assert_eq!(
        r.allocator().addresses(&ServiceKey::new("default", "web")),
        [std::net::IpAddr::from(ip("203.0.113.3")), v6.into()]
    );
}
