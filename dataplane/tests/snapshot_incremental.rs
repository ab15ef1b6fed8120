//! `SnapshotBuilder::update` against the reference, a full `build` of the
//! resulting spec by a fresh builder: for random sequences of upserts and
//! removals (with listener conflicts, duplicates and NodePorts off node
//! addresses among them) both accept or both reject, and accepted snapshots
//! are equivalent (listeners, owned addresses, services, backends, the backend
//! chosen for many hashes); ids stay stable; a published snapshot never
//! changes afterwards.

use dataplane::flow::Proto;
use dataplane::snapshot::{
    AddrRole, BackendGonePolicy, EndpointCondition, EndpointSpec, ListenerKind, NextHop, PortSpec,
    Route, ServiceChanges, ServiceSpec, Snapshot, SnapshotBuilder, SnapshotSpec, SynProxyMode,
};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};

const NODE: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const SNAT: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 1);
const NAMES: [&str; 8] = ["a", "b", "c", "d", "e", "f", "g", "h"];

fn base_spec() -> SnapshotSpec {
    SnapshotSpec {
        ports: vec![
            PortSpec {
                mac: [2, 0, 0, 0, 0, 1],
                mtu: 1500,
                mss_clamp: None,
            },
            PortSpec {
                mac: [2, 0, 0, 0, 0, 2],
                mtu: 1500,
                mss_clamp: None,
            },
        ],
        vip_port: 0,
        addresses: vec![
            (NODE.into(), 0, AddrRole::Node),
            (SNAT.into(), 1, AddrRole::Snat),
        ],
        routes: vec![
            Route {
                dest: Ipv4Addr::new(10, 1, 0, 0).into(),
                prefix_len: 24,
                port: 1,
                via: None,
            },
            Route {
                dest: Ipv4Addr::new(10, 2, 0, 0).into(),
                prefix_len: 16,
                port: 1,
                via: Some(Ipv4Addr::new(10, 1, 0, 254).into()),
            },
        ],
        neighbours: Vec::new(),
        services: Vec::new(),
        maglev_table_size: 16381,
    }
}

fn listener() -> impl Strategy<Value = (Ipv4Addr, u16, ListenerKind)> {
    prop_oneof![
        8 => (0u8..10, 0u16..3).prop_map(|(a, p)| (Ipv4Addr::new(203, 0, 113, a),
            80 + p,
            ListenerKind::Vip
        )),
        2 => (0u8..10, 0u16..3).prop_map(|(a, p)| (Ipv4Addr::new(203, 0, 113, a),
            80 + p,
            ListenerKind::ExternalIp
        )),
        2 => (0u16..3).prop_map(|p| (NODE, 30080 + p, ListenerKind::NodePort)),
        // Invalid: a NodePort off the node addresses, a VIP on a gateway address.
        1 => Just((Ipv4Addr::new(203, 0, 113, 1), 30080, ListenerKind::NodePort)),
        1 => Just((SNAT, 80, ListenerKind::Vip)),
    ]
}

fn endpoint_addr(i: u8) -> SocketAddr {
    // Half directly connected, half behind the gateway route, one unrouted.
    let ip = match i {
        0..20 => Ipv4Addr::new(10, 1, 0, 10 + i),
        20..39 => Ipv4Addr::new(10, 2, 7, i),
        _ => Ipv4Addr::new(172, 16, 0, 1),
    };
    SocketAddrV4::new(ip, 8080).into()
}

fn service() -> impl Strategy<Value = ServiceSpec> {
    (
        prop::sample::select(&NAMES[..]),
        prop::bool::ANY,
        prop::collection::vec(listener(), 1..3),
        prop::collection::btree_map(0u8..40, (0u32..3, 0u8..3), 0..9),
        prop::bool::weighted(0.04),
        prop::option::of(1u64..100_000),
        prop::bool::ANY,
    )
        .prop_map(|(name, udp, listeners, eps, dup, affinity, reset)| {
            let mut endpoints: Vec<EndpointSpec> = eps
                .into_iter()
                .map(|(i, (weight, c))| EndpointSpec {
                    addr: endpoint_addr(i),
                    weight,
                    condition: match c {
                        0 => EndpointCondition::Ready,
                        1 => EndpointCondition::ServingTerminating,
                        _ => EndpointCondition::Draining,
                    },
                })
                .collect();
            if dup && let Some(&first) = endpoints.first() {
                endpoints.push(first);
            }
            ServiceSpec {
                name: name.to_owned(),
                proto: if udp { Proto::Udp } else { Proto::Tcp },
                listeners: listeners
                    .into_iter()
                    .map(|(a, p, k): (Ipv4Addr, u16, ListenerKind)| (a.into(), p, k))
                    .collect(),
                endpoints,
                snat: !reset,
                affinity_timeout_ms: affinity,
                tcp_backend_gone: if reset {
                    BackendGonePolicy::Reset
                } else {
                    BackendGonePolicy::Drop
                },
                syn_proxy: SynProxyMode::Off,
                tcp_pickup: false,
            }
        })
}

#[derive(Clone, Debug)]
enum Step {
    Update(ServiceChanges),
    /// A full build of the model's spec on the same (warm) builder.
    FullBuild,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        9 => (
            prop::collection::vec(service(), 0..4),
            prop::collection::vec(prop::sample::select(&NAMES[..]), 0..3),
        )
            .prop_map(|(upserts, removals)| Step::Update(ServiceChanges {
                upserts,
                removals: removals.into_iter().map(str::to_owned).collect(),
            })),
        1 => Just(Step::FullBuild),
    ]
}

/// The spec `changes` make of `spec`: removals, then upserts replacing in
/// place or appending (a second upsert of a name is appended: a duplicate).
fn apply(spec: &SnapshotSpec, changes: &ServiceChanges) -> SnapshotSpec {
    let mut next = spec.clone();
    next.services
        .retain(|s| !changes.removals.contains(&s.name));
    let mut seen = BTreeSet::new();
    for up in &changes.upserts {
        let first = seen.insert(up.name.clone());
        match next.services.iter_mut().find(|s| s.name == up.name) {
            Some(s) if first => *s = up.clone(),
            _ => next.services.push(up.clone()),
        }
    }
    next
}

type ServiceView = (
    Proto,
    bool,
    Option<u64>,
    BackendGonePolicy,
    Option<(u32, Vec<SocketAddr>)>,
    Option<(u32, Vec<SocketAddr>)>,
    Vec<Option<SocketAddr>>,
);

/// (service, address, weight, condition, next hop port and address).
type BackendView = (String, SocketAddr, u32, u8, Option<(u8, IpAddr)>);

/// Everything a snapshot forwards with, by names and addresses (not ids).
#[derive(Debug, PartialEq)]
struct View {
    ports: usize,
    listeners: BTreeMap<(u8, Ipv4Addr, u16), (String, ListenerKind)>,
    owned: BTreeMap<Ipv4Addr, (u8, bool, bool, bool)>,
    services: BTreeMap<String, ServiceView>,
    backends: BTreeSet<BackendView>,
    arp_source: Vec<Option<Ipv4Addr>>,
}

fn proto_code(p: Proto) -> u8 {
    match p {
        Proto::Tcp => 6,
        Proto::Udp => 17,
        Proto::Icmp => 1,
    }
}

fn view(snap: &Snapshot) -> View {
    let name = |id| snap.service(id).map(|s| s.name.to_string()).unwrap();
    let addr = |id| snap.backend(id).map(|b| b.addr).unwrap();
    for (key, l) in snap.listeners.iter() {
        assert!(
            snap.service(l.service).is_some(),
            "dangling listener {key:?}"
        );
    }
    let hashes: Vec<u64> = (0..200u64)
        .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i << 7))
        .collect();
    View {
        ports: snap.ports.len(),
        listeners: snap
            .listeners
            .iter()
            .map(|(k, l)| {
                (
                    (proto_code(k.proto), k.addr, k.port),
                    (name(l.service), l.kind),
                )
            })
            .collect(),
        owned: snap
            .owned
            .iter()
            .map(|(a, o)| (*a, (o.port, o.vip, o.node, o.snat)))
            .collect(),
        services: snap
            .services
            .iter()
            .flatten()
            .map(|s| {
                let set = |set: &Option<std::sync::Arc<dataplane::snapshot::BackendSet>>| {
                    set.as_ref().map(|set| {
                        for &b in set.backends.iter() {
                            assert_eq!(snap.backend(b).unwrap().service, s.id, "foreign backend");
                        }
                        (
                            set.table.size(),
                            set.backends.iter().map(|&b| addr(b)).collect(),
                        )
                    })
                };
                let picks = hashes
                    .iter()
                    .map(|&h| s.active_set().and_then(|set| set.pick(h)).map(addr))
                    .collect();
                (
                    s.name.to_string(),
                    (
                        s.proto,
                        s.snat,
                        s.affinity_timeout_ms,
                        s.tcp_backend_gone,
                        set(&s.ready),
                        set(&s.serving),
                        picks,
                    ),
                )
            })
            .collect(),
        backends: snap
            .backends
            .iter()
            .flatten()
            .map(|b| {
                (
                    name(b.service),
                    b.addr,
                    b.weight,
                    b.condition as u8,
                    b.next_hop.map(|h: NextHop| (h.port, h.addr)),
                )
            })
            .collect(),
        arp_source: snap.arp_source.clone(),
    }
}

/// Ids by service name and by (service name, backend address).
fn ids(snap: &Snapshot) -> (BTreeMap<String, u32>, BTreeMap<(String, SocketAddr), u32>) {
    let services = snap
        .services
        .iter()
        .flatten()
        .map(|s| (s.name.to_string(), s.id))
        .collect();
    let backends = snap
        .backends
        .iter()
        .flatten()
        .map(|b| {
            (
                (snap.service(b.service).unwrap().name.to_string(), b.addr),
                b.id,
            )
        })
        .collect();
    (services, backends)
}

fn check(steps: Vec<Step>) -> Result<(), TestCaseError> {
    let mut spec = base_spec();
    let mut inc = SnapshotBuilder::new();
    let mut last = inc.build(&spec).unwrap();
    let mut last_view = view(&last);
    for step in steps {
        let (next_spec, result) = match &step {
            Step::Update(changes) => {
                let next = apply(&spec, changes);
                (next, inc.update(changes))
            }
            Step::FullBuild => (spec.clone(), inc.build(&spec)),
        };
        let reference = SnapshotBuilder::new().build(&next_spec);
        // The previous snapshot, which workers may still hold, is untouched.
        prop_assert_eq!(&view(&last), &last_view);
        match (result, reference) {
            (Ok(got), Ok(want)) => {
                let got_view = view(&got);
                prop_assert_eq!(&got_view, &view(&want), "{:?}", step);
                prop_assert_eq!(got.generation, last.generation + 1);
                let (s0, b0) = ids(&last);
                let (s1, b1) = ids(&got);
                for (name, id) in &s1 {
                    if let Some(before) = s0.get(name) {
                        prop_assert_eq!(before, id, "service {} changed id", name);
                    }
                }
                for (key, id) in &b1 {
                    if let Some(before) = b0.get(key) {
                        prop_assert_eq!(before, id, "backend {:?} changed id", key);
                    }
                }
                spec = next_spec;
                last = got;
                last_view = got_view;
            }
            (Err(_), Err(_)) => {
                prop_assert_eq!(
                    inc.generation(),
                    last.generation,
                    "a failed update changed nothing"
                );
            }
            (got, want) => {
                prop_assert!(
                    false,
                    "update {:?} but full build {:?} for {:?}",
                    got.map(|s| s.generation),
                    want.map(|s| s.generation),
                    step
                );
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn update_equals_a_full_build_of_the_resulting_spec(
        steps in prop::collection::vec(step(), 1..16)
    ) {
        check(steps)?;
    }
}

#[test]
fn update_needs_a_build_first_and_a_vip_is_owned_while_a_service_listens_on_it() {
    let mut b = SnapshotBuilder::new();
    let web = ServiceSpec::new("web", Proto::Tcp, Ipv4Addr::new(203, 0, 113, 5), 80)
        .endpoint(endpoint_addr(1));
    let changes = ServiceChanges {
        upserts: vec![web.clone()],
        removals: Vec::new(),
    };
    assert!(b.update(&changes).is_err(), "no base spec yet");
    b.build(&base_spec()).unwrap();
    let s1 = b.update(&changes).unwrap();
    let vip = Ipv4Addr::new(203, 0, 113, 5);
    assert!(s1.owned(vip).is_some_and(|o| o.vip && o.port == 0));
    // A second service on the same VIP, another port: still owned after
    // the first leaves.
    let mut api = ServiceSpec::new("api", Proto::Tcp, vip, 443).endpoint(endpoint_addr(2));
    let s2 = b
        .update(&ServiceChanges {
            upserts: vec![api.clone()],
            removals: vec!["web".into()],
        })
        .unwrap();
    assert!(s2.owned(vip).is_some());
    assert!(s2.listener(Proto::Tcp, vip, 80).is_none());
    // A conflict with a listener of a service that stays is refused...
    api.name = "api2".into();
    let err = b
        .update(&ServiceChanges {
            upserts: vec![api.clone()],
            removals: Vec::new(),
        })
        .unwrap_err();
    assert!(
        err.to_string().contains("already used by service \"api\""),
        "{err}"
    );
    // ...and accepted when that service leaves in the same update.
    let s3 = b
        .update(&ServiceChanges {
            upserts: vec![api],
            removals: vec!["api".into()],
        })
        .unwrap();
    assert!(s3.service_by_name("api").is_none());
    let api2 = s3.service_by_name("api2").unwrap().id;
    assert_eq!(s3.listener(Proto::Tcp, vip, 443).unwrap().service, api2);
    let s4 = b
        .update(&ServiceChanges {
            upserts: Vec::new(),
            removals: vec!["api2".into()],
        })
        .unwrap();
    assert!(s4.owned(vip).is_none(), "no listener left on the VIP");
    assert!(s4.owned(NODE).is_some_and(|o| o.node));
}

#[test]
fn a_threaded_build_equals_a_single_threaded_one_and_runs_the_start_hook_per_thread() {
    // 1 100 services with a ready and a serving set: 2 200 tables, enough
    // for four threads.
    let mut spec = base_spec();
    for s in 0u32..1100 {
        let vip = Ipv4Addr::from(u32::from(Ipv4Addr::new(203, 0, 0, 0)) + s);
        let endpoints = (0..6u32)
            .map(|e| EndpointSpec {
                addr: SocketAddrV4::new(Ipv4Addr::from(0x0a02_0000 + s * 8 + e), 8080).into(),
                weight: 1 + e % 3,
                condition: if e < 4 {
                    EndpointCondition::Ready
                } else {
                    EndpointCondition::ServingTerminating
                },
            })
            .collect();
        spec.services.push(ServiceSpec {
            endpoints,
            ..ServiceSpec::new(&format!("ns/svc-{s}"), Proto::Tcp, vip, 80)
        });
    }
    let single = SnapshotBuilder::new().build(&spec).unwrap();
    let hook_calls = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = std::sync::Arc::clone(&hook_calls);
    let mut builder = SnapshotBuilder::new()
        .with_threads(4)
        .with_thread_start(move |index| {
            record
                .lock()
                .unwrap()
                .push((index, std::thread::current().id()));
        });
    let threaded = builder.build(&spec).unwrap();
    assert_eq!(view(&threaded), view(&single));
    assert_eq!(builder.stats.maglev_tables_built, 2200);

    let mut started = std::mem::take(&mut *hook_calls.lock().unwrap());
    started.sort_by_key(|&(index, _)| index);
    let indices: Vec<usize> = started.iter().map(|&(i, _)| i).collect();
    assert_eq!(indices, [0, 1, 2, 3], "each thread runs the hook once");
    let threads: BTreeSet<String> = started.iter().map(|(_, t)| format!("{t:?}")).collect();
    assert_eq!(threads.len(), 4, "on four distinct threads");
    assert!(
        !threads.contains(&format!("{:?}", std::thread::current().id())),
        "not on the caller's thread"
    );

    // A small change builds one table on the caller's thread: no hook.
    let mut changed = spec.services[7].clone();
    changed.endpoints.pop();
    builder
        .update(&ServiceChanges {
            upserts: vec![changed],
            removals: Vec::new(),
        })
        .unwrap();
    assert_eq!(builder.stats.maglev_tables_built, 2201);
    assert!(hook_calls.lock().unwrap().is_empty());
}
