//! The allocator's rules, one case at a time.

use super::*;
use k8s_openapi::api::core::v1::Service;
use nic_config::IpRange;
use serde_json::json;

fn pool(name: &str, ranges: &[&str], auto_assign: bool, avoid_buggy_ips: bool) -> AddressPoolPlan {
    AddressPoolPlan {
        name: name.to_owned(),
        ranges: ranges
            .iter()
            .map(|r| r.parse::<IpRange>().unwrap())
            .collect(),
        auto_assign,
        avoid_buggy_ips,
    }
}

/// Pools: "manual" (192.0.2.0/29, not auto), "first" (198.51.100.0/30,
/// avoiding .0/.255), "second" (203.0.113.10-203.0.113.12).
fn pools() -> Vec<AddressPoolPlan> {
    vec![
        pool("manual", &["192.0.2.0/29"], false, false),
        pool("first", &["198.51.100.0/30"], true, true),
        pool("second", &["203.0.113.10-203.0.113.12"], true, false),
    ]
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A LoadBalancer Service `default/<name>` with TCP ports, annotations and
/// an optional spec.loadBalancerIP.
fn svc(
    name: &str,
    annotations: &[(&str, &str)],
    ports: &[(&str, i32)],
    lb_ip: Option<&str>,
) -> Service {
    let annotations: serde_json::Map<String, serde_json::Value> = annotations
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    let ports: Vec<_> = ports
        .iter()
        .map(|(proto, port)| json!({ "protocol": proto, "port": port }))
        .collect();
    let mut spec = json!({ "type": "LoadBalancer", "ports": ports });
    if let Some(lb_ip) = lb_ip {
        spec["loadBalancerIP"] = json!(lb_ip);
    }
    serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": "default", "annotations": annotations },
        "spec": spec,
    }))
    .unwrap()
}

fn req(name: &str, annotations: &[(&str, &str)], ports: &[(&str, i32)]) -> ServiceRequest {
    ServiceRequest::from_service(&svc(name, annotations, ports, None)).unwrap()
}

fn key(name: &str) -> ServiceKey {
    ServiceKey::new("default", name)
}

fn assigned(a: &mut Allocator, r: &ServiceRequest) -> Vec<String> {
    let got = a.assign(r).unwrap_or_else(|e| panic!("{}: {e}", r.key));
    a.check_invariants().unwrap();
    got.iter().map(IpAddr::to_string).collect()
}

#[test]
fn auto_assign_takes_the_lowest_usable_address_of_the_first_auto_pool() {
    let mut a = Allocator::new(&pools());
    // "manual" is skipped (no auto_assign); "first" avoids .0 and has .1-.3.
    for (name, want) in [
        ("a", "198.51.100.1"),
        ("b", "198.51.100.2"),
        ("c", "198.51.100.3"),
        ("d", "203.0.113.10"),
        ("e", "203.0.113.11"),
        ("f", "203.0.113.12"),
    ] {
        assert_eq!(
            assigned(&mut a, &req(name, &[], &[("TCP", 80)])),
            [want],
            "{name}"
        );
    }
    let err = a.assign(&req("g", &[], &[("TCP", 80)])).unwrap_err();
    assert_eq!(
        err,
        IpamProblem::PoolExhausted {
            pools: vec!["first".into(), "second".into()],
            family: Family::V4,
        }
    );
    assert_eq!(err.reason(), "PoolExhausted");
    assert_eq!(
        err.to_string(),
        "no free IPv4 address in pool(s) first, second"
    );
    // A release makes the lowest address available again.
    assert_eq!(a.release(&key("b")), [ip("198.51.100.2")]);
    assert_eq!(assigned(&mut a, &req("g", &[], &[])), ["198.51.100.2"]);
}

#[test]
fn assignment_is_stable_while_the_request_holds() {
    let mut a = Allocator::new(&pools());
    let r = req("web", &[], &[("TCP", 80)]);
    assert_eq!(assigned(&mut a, &r), ["198.51.100.1"]);
    assigned(&mut a, &req("other", &[], &[]));
    // Same request, or a port change: the address stays.
    assert_eq!(assigned(&mut a, &r), ["198.51.100.1"]);
    assert_eq!(
        assigned(&mut a, &req("web", &[], &[("TCP", 443)])),
        ["198.51.100.1"]
    );
    // Naming another pool moves it.
    let moved = req("web", &[(ANNOTATION_ADDRESS_POOL, "second")], &[]);
    assert_eq!(assigned(&mut a, &moved), ["203.0.113.10"]);
    assert_eq!(a.holders(ip("198.51.100.1")), Vec::<&ServiceKey>::new());
    // Requesting an address moves it there.
    let pinned = ServiceRequest::from_service(&svc("web", &[], &[], Some("192.0.2.5"))).unwrap();
    assert_eq!(assigned(&mut a, &pinned), ["192.0.2.5"]);
    assert_eq!(a.addresses(&key("web")), [ip("192.0.2.5")]);
}

#[test]
fn requested_addresses_are_honoured_or_refused() {
    /// The addresses assigned, or the problem's reason.
    type Want = Result<&'static [&'static str], &'static str>;
    let table: &[(&str, Service, Want)] = &[
        // From a pool without auto_assign: allowed when asked for.
        (
            "spec",
            svc("s", &[], &[], Some("192.0.2.3")),
            Ok(&["192.0.2.3"]),
        ),
        (
            "annotation, two addresses, repeats and spaces",
            svc(
                "s",
                &[(
                    ANNOTATION_LOAD_BALANCER_IPS,
                    "203.0.113.12, 192.0.2.1,192.0.2.1",
                )],
                &[],
                None,
            ),
            Ok(&["192.0.2.1", "203.0.113.12"]),
        ),
        (
            "outside every pool",
            svc("s", &[], &[], Some("192.0.2.99")),
            Err("RequestedIPNotInPool"),
        ),
        // .0 of a pool that avoids buggy IPs is not offered.
        (
            "buggy ip",
            svc("s", &[], &[], Some("198.51.100.0")),
            Err("RequestedIPNotInPool"),
        ),
        (
            "outside the named pool",
            svc(
                "s",
                &[(ANNOTATION_ADDRESS_POOL, "second")],
                &[],
                Some("192.0.2.3"),
            ),
            Err("RequestedIPNotInPool"),
        ),
        (
            "inside the named pool",
            svc(
                "s",
                &[(ANNOTATION_ADDRESS_POOL, "manual")],
                &[],
                Some("192.0.2.3"),
            ),
            Ok(&["192.0.2.3"]),
        ),
        (
            "held by another",
            svc("s", &[], &[], Some("192.0.2.7")),
            Err("RequestedIPTaken"),
        ),
        (
            "one of two held: none assigned",
            svc(
                "s",
                &[(ANNOTATION_LOAD_BALANCER_IPS, "192.0.2.6,192.0.2.7")],
                &[],
                None,
            ),
            Err("RequestedIPTaken"),
        ),
        (
            "unknown pool",
            svc("s", &[(ANNOTATION_ADDRESS_POOL, "nope")], &[], None),
            Err("UnknownAddressPool"),
        ),
        // A named pool without auto_assign serves the lowest free address.
        (
            "named manual pool",
            svc("s", &[(ANNOTATION_ADDRESS_POOL, "manual")], &[], None),
            Ok(&["192.0.2.0"]),
        ),
    ];
    for (what, service, want) in table {
        let mut a = Allocator::new(&pools());
        let holder =
            ServiceRequest::from_service(&svc("holder", &[], &[], Some("192.0.2.7"))).unwrap();
        a.assign(&holder).unwrap();
        let got = ServiceRequest::from_service(service).and_then(|r| a.assign(&r));
        a.check_invariants().unwrap();
        match (got, want) {
            (Ok(ips), Ok(want)) => {
                let ips: Vec<String> = ips.iter().map(IpAddr::to_string).collect();
                assert_eq!(ips, *want, "{what}");
            }
            (Err(e), Err(reason)) => {
                assert_eq!(e.reason(), *reason, "{what}: {e}");
                // A refused request holds nothing.
                assert!(a.addresses(&key("s")).is_empty(), "{what}");
            }
            (got, want) => panic!("{what}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn invalid_requests_are_reported() {
    let table: &[(&str, Service, &str, &str)] = &[
        (
            "bad list item",
            svc(
                "s",
                &[(ANNOTATION_LOAD_BALANCER_IPS, "192.0.2.1,nope")],
                &[],
                None,
            ),
            "InvalidAnnotation",
            "\"nope\": not an IP address",
        ),
        (
            "IPv6 for an IPv4 Service",
            svc(
                "s",
                &[(ANNOTATION_LOAD_BALANCER_IPS, "2001:db8::1")],
                &[],
                None,
            ),
            "InvalidRequest",
            "requested address 2001:db8::1 is IPv6, but the Service's ipFamilies are [IPv4]",
        ),
        (
            "bad spec",
            svc("s", &[], &[], Some("1.2.3")),
            "InvalidRequest",
            "spec.loadBalancerIP \"1.2.3\"",
        ),
        (
            "both",
            svc(
                "s",
                &[(ANNOTATION_LOAD_BALANCER_IPS, "192.0.2.1")],
                &[],
                Some("192.0.2.1"),
            ),
            "InvalidRequest",
            "both spec.loadBalancerIP and the portico.dev/loadBalancerIPs annotation",
        ),
    ];
    for (what, service, reason, words) in table {
        let e = ServiceRequest::from_service(service).unwrap_err();
        assert_eq!(e.reason(), *reason, "{what}");
        assert!(e.message().contains(words), "{what}: {e}");
    }
    // Empty annotations and an empty spec.loadBalancerIP mean "not set".
    let r = ServiceRequest::from_service(&svc(
        "s",
        &[
            (ANNOTATION_LOAD_BALANCER_IPS, " "),
            (ANNOTATION_ADDRESS_POOL, ""),
            (ANNOTATION_ALLOW_SHARED_IP, ""),
        ],
        &[("UDP", 53), ("TCP", 53), ("TCP", 53)],
        Some(""),
    ))
    .unwrap();
    assert!(r.requested_ips.is_empty());
    assert_eq!((r.pool.as_deref(), r.sharing_key.as_deref()), (None, None));
    assert_eq!(r.ports, [(PortProtocol::Tcp, 53), (PortProtocol::Udp, 53)]);
}

#[test]
fn no_auto_assign_pool() {
    let mut a = Allocator::new(&[pool("manual", &["192.0.2.0/29"], false, false)]);
    let e = a.assign(&req("s", &[], &[])).unwrap_err();
    assert_eq!(e, IpamProblem::NoAutoAssignPool);
    assert_eq!(e.reason(), "NoAutoAssignPool");
}

#[test]
fn sharing_needs_the_same_key_and_disjoint_ports() {
    let share = |name: &str, k: &str, ports: &[(&str, i32)]| {
        ServiceRequest::from_service(&svc(
            name,
            &[(ANNOTATION_ALLOW_SHARED_IP, k)],
            ports,
            Some("192.0.2.4"),
        ))
        .unwrap()
    };
    let mut a = Allocator::new(&pools());
    assert_eq!(
        assigned(&mut a, &share("dns-tcp", "dns", &[("TCP", 53)])),
        ["192.0.2.4"]
    );
    // Same key, other protocol: shared.
    assert_eq!(
        assigned(&mut a, &share("dns-udp", "dns", &[("UDP", 53)])),
        ["192.0.2.4"]
    );
    assert_eq!(
        a.holders(ip("192.0.2.4")),
        [&key("dns-tcp"), &key("dns-udp")]
    );
    // Same key, overlapping port: refused.
    let e = a
        .assign(&share("dns-udp2", "dns", &[("UDP", 53), ("UDP", 5353)]))
        .unwrap_err();
    assert_eq!(e.reason(), "RequestedIPTaken");
    assert!(e.message().contains("sharing key \"dns\""), "{e}");
    // Other key, no overlap: refused.
    assert_eq!(
        a.assign(&share("web", "web", &[("TCP", 80)]))
            .unwrap_err()
            .reason(),
        "RequestedIPTaken"
    );
    // No key: refused.
    let lone =
        ServiceRequest::from_service(&svc("lone", &[], &[("TCP", 80)], Some("192.0.2.4"))).unwrap();
    assert_eq!(a.assign(&lone).unwrap_err().reason(), "RequestedIPTaken");
    a.check_invariants().unwrap();
    // A sharer that adds a clashing port loses the address (and gets none:
    // it requested exactly that one).
    assert!(
        a.assign(&share("dns-udp", "dns", &[("UDP", 53), ("TCP", 53)]))
            .is_err()
    );
    assert!(a.addresses(&key("dns-udp")).is_empty());
    // The address stays in use until its last holder leaves.
    let usage = |a: &Allocator| a.pool_usage()[0].in_use;
    assert_eq!(usage(&a), 1);
    a.release(&key("dns-tcp"));
    assert_eq!(usage(&a), 0);
    a.check_invariants().unwrap();
}

#[test]
fn auto_assign_shares_the_lowest_compatible_address() {
    let mut a = Allocator::new(&pools());
    let k =
        |name: &str, port: i32| req(name, &[(ANNOTATION_ALLOW_SHARED_IP, "k")], &[("TCP", port)]);
    assert_eq!(assigned(&mut a, &k("a", 80)), ["198.51.100.1"]);
    assert_eq!(assigned(&mut a, &req("plain", &[], &[])), ["198.51.100.2"]);
    // .1 is lower than the free .3 and compatible: shared, as MetalLB does.
    assert_eq!(assigned(&mut a, &k("b", 443)), ["198.51.100.1"]);
    // Port 80 is taken on .1: the next usable address.
    assert_eq!(assigned(&mut a, &k("c", 80)), ["198.51.100.3"]);
}

#[test]
fn buggy_ips_are_skipped_at_every_boundary() {
    let mut a = Allocator::new(&[pool("p", &["10.0.0.254-10.0.1.1"], true, true)]);
    assert_eq!(assigned(&mut a, &req("a", &[], &[])), ["10.0.0.254"]);
    assert_eq!(assigned(&mut a, &req("b", &[], &[])), ["10.0.1.1"]);
    assert_eq!(
        a.assign(&req("c", &[], &[])).unwrap_err().reason(),
        "PoolExhausted"
    );
    assert_eq!(
        a.pool_usage(),
        [PoolUsage {
            name: "p".into(),
            in_use: 2,
            size: 2
        }]
    );
}

fn claim(
    name: &str,
    status_ips: &[&str],
    created: Option<&str>,
    annotations: &[(&str, &str)],
    ports: &[(&str, i32)],
) -> Claim {
    let mut s = svc(name, annotations, ports, None);
    let ingress: Vec<_> = status_ips.iter().map(|i| json!({ "ip": i })).collect();
    s.status =
        Some(serde_json::from_value(json!({ "loadBalancer": { "ingress": ingress } })).unwrap());
    s.metadata.creation_timestamp = created.map(|t| serde_json::from_value(json!(t)).unwrap());
    Claim::from_service(&s).unwrap().unwrap()
}

#[test]
fn restore_gives_conflicting_addresses_to_the_oldest() {
    let mut a = Allocator::new(&pools());
    let problems = a.restore(vec![
        claim(
            "young",
            &["198.51.100.2"],
            Some("2024-05-01T00:00:00Z"),
            &[],
            &[],
        ),
        claim(
            "old",
            &["198.51.100.2"],
            Some("2023-01-01T00:00:00Z"),
            &[],
            &[],
        ),
        claim("undated", &["198.51.100.2", "203.0.113.11"], None, &[], &[]),
        claim(
            "b-same-age",
            &["192.0.2.1"],
            Some("2023-01-01T00:00:00Z"),
            &[],
            &[],
        ),
        claim(
            "a-same-age",
            &["192.0.2.1"],
            Some("2023-01-01T00:00:00Z"),
            &[],
            &[],
        ),
        claim(
            "gone-pool",
            &["10.9.9.9"],
            Some("2020-01-01T00:00:00Z"),
            &[],
            &[],
        ),
    ]);
    a.check_invariants().unwrap();
    let got: Vec<String> = problems
        .iter()
        .map(|(k, p)| format!("{k} {}", p.reason()))
        .collect();
    assert_eq!(
        got,
        [
            "default/gone-pool AddressNotInPool",
            "default/b-same-age AddressConflict",
            "default/young AddressConflict",
            "default/undated AddressConflict",
        ]
    );
    assert_eq!(a.addresses(&key("old")), [ip("198.51.100.2")]);
    assert_eq!(a.addresses(&key("a-same-age")), [ip("192.0.2.1")]);
    // The undated claim keeps the address nobody else claimed.
    assert_eq!(a.addresses(&key("undated")), [ip("203.0.113.11")]);
    // The losers are assigned afresh, never onto a restored address.
    assert_eq!(assigned(&mut a, &req("young", &[], &[])), ["198.51.100.1"]);
    assert_eq!(
        assigned(&mut a, &req("b-same-age", &[], &[])),
        ["198.51.100.3"]
    );
    assert_eq!(
        assigned(&mut a, &req("gone-pool", &[], &[])),
        ["203.0.113.10"]
    );
    // A restored Service whose request still holds keeps its address.
    assert_eq!(assigned(&mut a, &req("old", &[], &[])), ["198.51.100.2"]);
}

#[test]
fn restore_keeps_shared_addresses_and_ignores_foreign_status() {
    let mut a = Allocator::new(&pools());
    let sk = [(ANNOTATION_ALLOW_SHARED_IP, "dns")];
    let problems = a.restore(vec![
        claim(
            "tcp",
            &["203.0.113.10"],
            Some("2023-01-01T00:00:00Z"),
            &sk,
            &[("TCP", 53)],
        ),
        claim(
            "udp",
            &["203.0.113.10"],
            Some("2023-01-02T00:00:00Z"),
            &sk,
            &[("UDP", 53)],
        ),
        claim(
            "clash",
            &["203.0.113.10"],
            Some("2023-01-03T00:00:00Z"),
            &sk,
            &[("UDP", 53)],
        ),
    ]);
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].0, key("clash"));
    assert_eq!(a.holders(ip("203.0.113.10")), [&key("tcp"), &key("udp")]);
    a.check_invariants().unwrap();

    // Hostnames, and addresses of a family the Service does not have, in a
    // status are not claims.
    let mut s = svc("x", &[], &[], None);
    s.status = Some(
        serde_json::from_value(json!({ "loadBalancer": { "ingress": [
            { "hostname": "lb.example" }, { "ip": "2001:db8::1" }
        ] } }))
        .unwrap(),
    );
    assert_eq!(Claim::from_service(&s).unwrap(), None);
}

#[test]
fn reasons_are_stable() {
    let k = key("x");
    let table = [
        (
            IpamProblem::PoolExhausted {
                pools: vec![],
                family: Family::V4,
            },
            "PoolExhausted",
        ),
        (IpamProblem::NoAutoAssignPool, "NoAutoAssignPool"),
        (
            IpamProblem::UnknownPool { pool: "p".into() },
            "UnknownAddressPool",
        ),
        (
            IpamProblem::RequestedIpNotInPool {
                ip: ip("192.0.2.1"),
                pool: None,
            },
            "RequestedIPNotInPool",
        ),
        (
            IpamProblem::RequestedIpTaken {
                ip: ip("192.0.2.1"),
                holder: k.clone(),
                holder_sharing_key: None,
            },
            "RequestedIPTaken",
        ),
        (
            IpamProblem::InvalidAnnotation {
                annotation: ANNOTATION_ADDRESS_POOL,
                value: String::new(),
                reason: String::new(),
            },
            "InvalidAnnotation",
        ),
        (
            IpamProblem::InvalidRequest { reason: "r".into() },
            "InvalidRequest",
        ),
        (
            IpamProblem::AddressConflict {
                ip: ip("192.0.2.1"),
                holder: k,
            },
            "AddressConflict",
        ),
        (
            IpamProblem::StatusIpNotInPool {
                ip: ip("192.0.2.1"),
            },
            "AddressNotInPool",
        ),
    ];
    for (problem, reason) in table {
        assert_eq!(problem.reason(), reason);
        assert!(!problem.message().is_empty());
    }
    assert_eq!(
        IpamProblem::RequestedIpNotInPool {
            ip: ip("192.0.2.1"),
            pool: Some("p".into())
        }
        .to_string(),
        "requested address 192.0.2.1 is not in pool \"p\""
    );
}

#[test]
fn pool_usage_and_lookups() {
    let mut a = Allocator::new(&pools());
    assigned(&mut a, &req("a", &[], &[]));
    assigned(
        &mut a,
        &req("b", &[(ANNOTATION_ADDRESS_POOL, "manual")], &[]),
    );
    let usage: Vec<(String, u64, u128)> = a
        .pool_usage()
        .into_iter()
        .map(|u| (u.name, u.in_use, u.size))
        .collect();
    assert_eq!(
        usage,
        [
            ("manual".into(), 1, 8),
            ("first".into(), 1, 3),
            ("second".into(), 0, 3)
        ]
    );
    assert_eq!(a.pool_of(ip("203.0.113.12")), Some("second"));
    assert_eq!(a.pool_of(ip("198.51.100.0")), None);
    assert_eq!(
        a.held_addresses().collect::<Vec<_>>(),
        [ip("192.0.2.0"), ip("198.51.100.1")]
    );
    assert_eq!(a.services().count(), 2);
    assert!(a.release(&key("nobody")).is_empty());
}

/// A LoadBalancer Service `default/<name>` on TCP 80 with `ipFamilies`
/// and `ipFamilyPolicy` (as the API server writes them) and annotations.
fn dual_svc(name: &str, families: &[&str], policy: &str, annotations: &[(&str, &str)]) -> Service {
    let mut s = svc(name, annotations, &[("TCP", 80)], None);
    if let Some(spec) = s.spec.as_mut() {
        spec.ip_families = Some(families.iter().map(|f| (*f).to_owned()).collect());
        spec.ip_family_policy = Some(policy.to_owned());
    }
    s
}

fn dual_req(name: &str, families: &[&str], policy: &str) -> ServiceRequest {
    ServiceRequest::from_service(&dual_svc(name, families, policy, &[])).unwrap()
}

/// "dual" (auto): 198.51.100.0/30 and 2001:db8::10-2001:db8::11;
/// "v4only" (auto): 203.0.113.10; "v6only" (not auto): 2001:db8:1::/127.
fn dual_pools() -> Vec<AddressPoolPlan> {
    vec![
        pool(
            "dual",
            &["198.51.100.0/30", "2001:db8::10-2001:db8::11"],
            true,
            true,
        ),
        pool("v4only", &["203.0.113.10/32"], true, false),
        pool("v6only", &["2001:db8:1::/127"], false, false),
    ]
}

#[test]
fn families_and_policies_are_read_as_the_api_server_writes_them() {
    let r = dual_req("a", &["IPv6", "IPv4"], "PreferDualStack");
    assert_eq!(r.families, [Family::V6, Family::V4]);
    assert_eq!(r.family_policy, FamilyPolicy::PreferDualStack);
    // RequireDualStack demands both whatever is listed; SingleStack one.
    assert_eq!(
        dual_req("a", &["IPv6"], "RequireDualStack").families,
        [Family::V6, Family::V4]
    );
    assert_eq!(
        dual_req("a", &["IPv6", "IPv4"], "SingleStack").families,
        [Family::V6]
    );
    // Without the fields (an object no API server defaulted): IPv4 only.
    assert_eq!(req("a", &[], &[]).families, [Family::V4]);
    for (families, policy, words) in [
        (&["IPv5"][..], "SingleStack", "spec.ipFamilies: \"IPv5\""),
        (
            &["IPv4"][..],
            "DualStackPlease",
            "spec.ipFamilyPolicy \"DualStackPlease\"",
        ),
    ] {
        let e = ServiceRequest::from_service(&dual_svc("a", families, policy, &[])).unwrap_err();
        assert_eq!(e.reason(), "InvalidRequest");
        assert!(e.message().contains(words), "{e}");
    }
    // Requested addresses: of the Service's families, both for
    // RequireDualStack.
    let e = ServiceRequest::from_service(&dual_svc(
        "a",
        &["IPv4", "IPv6"],
        "RequireDualStack",
        &[(ANNOTATION_LOAD_BALANCER_IPS, "198.51.100.1")],
    ))
    .unwrap_err();
    assert!(
        e.message()
            .contains("RequireDualStack with requested addresses needs an IPv6 one too"),
        "{e}"
    );
    let r = ServiceRequest::from_service(&dual_svc(
        "a",
        &["IPv4", "IPv6"],
        "RequireDualStack",
        &[(ANNOTATION_LOAD_BALANCER_IPS, "2001:db8::11, 198.51.100.1")],
    ))
    .unwrap();
    assert_eq!(r.requested_ips, [ip("198.51.100.1"), ip("2001:db8::11")]);
}

#[test]
fn a_dual_stack_service_gets_one_address_per_family() {
    let mut a = Allocator::new(&dual_pools());
    assert_eq!(
        assigned(
            &mut a,
            &dual_req("a", &["IPv4", "IPv6"], "RequireDualStack")
        ),
        ["198.51.100.1", "2001:db8::10"]
    );
    assert_eq!(
        assigned(&mut a, &dual_req("b", &["IPv6", "IPv4"], "PreferDualStack")),
        ["198.51.100.2", "2001:db8::11"]
    );
    // IPv6 used up in the auto-assign pools: a single-stack IPv6 Service
    // gets nothing and is told so, by family.
    let err = a
        .assign(&dual_req("c", &["IPv6"], "SingleStack"))
        .unwrap_err();
    assert_eq!(
        err,
        IpamProblem::PoolExhausted {
            pools: vec!["dual".into()],
            family: Family::V6
        }
    );
    assert_eq!(err.to_string(), "no free IPv6 address in pool(s) dual");
    // IPv4 is left (dual's .3), IPv6 is not: a RequireDualStack Service
    // holds nothing at all, no half of what it asked for.
    let err = a
        .assign(&dual_req("d", &["IPv4", "IPv6"], "RequireDualStack"))
        .unwrap_err();
    assert_eq!(err.reason(), "PoolExhausted");
    assert!(a.addresses(&key("d")).is_empty());
    assert_eq!(a.pool_usage()[0].in_use, 4, "198.51.100.3 not taken by d");
    // PreferDualStack takes what it can, and gains the other family
    // once a pool has it.
    assert_eq!(
        assigned(&mut a, &dual_req("e", &["IPv4", "IPv6"], "PreferDualStack")),
        ["198.51.100.3"]
    );
    a.release(&key("b"));
    assert_eq!(
        assigned(&mut a, &dual_req("e", &["IPv4", "IPv6"], "PreferDualStack")),
        ["198.51.100.3", "2001:db8::11"],
        "kept its IPv4 address, gained an IPv6 one"
    );
    // IPv4 from the next auto-assign pool that has one.
    assert_eq!(
        assigned(&mut a, &dual_req("h", &["IPv4"], "SingleStack")),
        ["198.51.100.2"]
    );
    assert_eq!(
        assigned(&mut a, &dual_req("i", &["IPv4"], "SingleStack")),
        ["203.0.113.10"]
    );
    // A pool without the family at all: named by the Service.
    let mut v4pool = dual_svc("f", &["IPv4", "IPv6"], "RequireDualStack", &[]);
    v4pool
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(ANNOTATION_ADDRESS_POOL.into(), "v4only".into());
    let err = a
        .assign(&ServiceRequest::from_service(&v4pool).unwrap())
        .unwrap_err();
    assert_eq!(
        err,
        IpamProblem::NoPoolForFamily {
            family: Family::V6,
            policy: FamilyPolicy::RequireDualStack,
            pools: vec!["v4only".into()],
        }
    );
    assert_eq!(err.reason(), "NoPoolForFamily");
    assert_eq!(
        err.to_string(),
        "pool \"v4only\" has no IPv6 range; ipFamilyPolicy RequireDualStack needs an IPv6 \
         address (add an IPv6 range to the pool, or use PreferDualStack)"
    );
    assert!(a.addresses(&key("f")).is_empty());
    // A named IPv6-only pool serves an IPv6 Service.
    let mut v6 = dual_svc("g", &["IPv6"], "SingleStack", &[]);
    v6.metadata
        .annotations
        .get_or_insert_default()
        .insert(ANNOTATION_ADDRESS_POOL.into(), "v6only".into());
    assert_eq!(
        assigned(&mut a, &ServiceRequest::from_service(&v6).unwrap()),
        ["2001:db8:1::"]
    );
    a.check_invariants().unwrap();
}

#[test]
fn a_dual_stack_status_is_restored_per_family() {
    let mut s = dual_svc("a", &["IPv4", "IPv6"], "RequireDualStack", &[]);
    s.status = Some(
        serde_json::from_value(json!({ "loadBalancer": { "ingress": [
            { "ip": "2001:db8::11" }, { "ip": "198.51.100.2" }, { "ip": "2001:db8::10" }
        ] } }))
        .unwrap(),
    );
    let claim = Claim::from_service(&s).unwrap().unwrap();
    assert_eq!(
        claim.ips,
        [ip("198.51.100.2"), ip("2001:db8::10"), ip("2001:db8::11")]
    );
    let mut a = Allocator::new(&dual_pools());
    assert!(a.restore(vec![claim]).is_empty());
    // One automatic address per family: the lowest of each claimed.
    assert_eq!(
        a.addresses(&key("a")),
        [ip("198.51.100.2"), ip("2001:db8::10")]
    );
    a.check_invariants().unwrap();
    // Still what it asks for: kept.
    assert_eq!(
        assigned(
            &mut a,
            &dual_req("a", &["IPv4", "IPv6"], "RequireDualStack")
        ),
        ["198.51.100.2", "2001:db8::10"]
    );
    // Downgraded to SingleStack IPv4: the IPv6 address is released.
    assert_eq!(
        assigned(&mut a, &dual_req("a", &["IPv4"], "SingleStack")),
        ["198.51.100.1"]
    );
}

#[test]
fn an_ipv6_service_without_an_ipv6_auto_assign_pool_is_told_which_pools_lack_it() {
    let mut a = Allocator::new(&pools());
    let err = a
        .assign(&dual_req("a", &["IPv6"], "SingleStack"))
        .unwrap_err();
    assert_eq!(err.reason(), "NoPoolForFamily");
    assert_eq!(
        err.to_string(),
        "pools \"first\", \"second\" have no IPv6 range; ipFamilyPolicy SingleStack needs an \
         IPv6 address (add an IPv6 range to one of them)"
    );
    // PreferDualStack with IPv6 first falls back to IPv4.
    assert_eq!(
        assigned(&mut a, &dual_req("b", &["IPv6", "IPv4"], "PreferDualStack")),
        ["198.51.100.1"]
    );
}
