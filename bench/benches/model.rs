//! The Kubernetes model at 10k Services × 10 endpoints: Service +
//! EndpointSlice → specs for all of them (what a cold start or a full
//! resync costs before the snapshot builder), for one Service (an endpoint
//! change), and the address allocator: 10k assignments from a /16 and a
//! restart restoring 10k claims.

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use nic_config::{AddressPoolPlan, IpRange};
use portico::build::{ModelConfig, ServiceOutcome, service_specs};
use portico::ipam::{Allocator, Claim, ServiceKey, ServiceRequest};
use serde_json::json;
use std::hint::black_box;
use std::net::Ipv4Addr;

const SERVICES: u32 = 10_000;
const ENDPOINTS: u32 = 10;

fn cluster() -> Vec<(Service, EndpointSlice)> {
    (0..SERVICES)
        .map(|s| {
            let name = format!("svc-{s}");
            let svc: Service = serde_json::from_value(json!({
                "metadata": { "name": name, "namespace": "bench" },
                "spec": {
                    "type": "LoadBalancer",
                    "ports": [{ "name": "http", "port": 80, "targetPort": 8080, "nodePort": 30000 + s % 2768 }],
                },
            }))
            .unwrap();
            let endpoints: Vec<_> = (0..ENDPOINTS)
                .map(|e| {
                    let pod = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 64, 0, 0)) + s * ENDPOINTS + e);
                    json!({ "addresses": [pod.to_string()], "conditions": { "ready": true } })
                })
                .collect();
            let slice: EndpointSlice = serde_json::from_value(json!({
                "metadata": {
                    "name": format!("{name}-abcde"),
                    "namespace": "bench",
                    "labels": { "kubernetes.io/service-name": name },
                },
                "addressType": "IPv4",
                "ports": [{ "name": "http", "port": 8080, "protocol": "TCP" }],
                "endpoints": endpoints,
            }))
            .unwrap();
            (svc, slice)
        })
        .collect()
}

fn config() -> ModelConfig {
    ModelConfig {
        load_balancer_class: "portico.dev/lb".into(),
        serve_unclassed: true,
        node_addresses: vec![Ipv4Addr::new(192, 0, 2, 1).into()],
        gateway_addresses: vec![Ipv4Addr::new(192, 0, 2, 1).into()],
        tcp_backend_gone: Default::default(),
        external_ip_cidrs: Vec::new(),
        syn_proxy: dataplane::snapshot::SynProxyMode::Off,
        syn_proxy_half_open_threshold: 1000,
    }
}

fn pools() -> Vec<AddressPoolPlan> {
    vec![AddressPoolPlan {
        name: "bench".into(),
        ranges: vec!["198.18.0.0/16".parse::<IpRange>().unwrap()],
        auto_assign: true,
        avoid_buggy_ips: true,
    }]
}

fn bench_model(c: &mut Criterion) {
    let cluster = cluster();
    let cfg = config();
    let vip = |s: u32| Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 0, 0)) + s + 1);
    let mut g = c.benchmark_group("model_10k_services_x10");
    g.sample_size(10);
    g.bench_function("specs_all", |b| {
        b.iter(|| {
            let mut n = 0;
            for (i, (svc, slice)) in cluster.iter().enumerate() {
                if let ServiceOutcome::Serve { specs, .. } =
                    service_specs(svc, &[slice], &[vip(i as u32).into()], &cfg)
                {
                    n += specs.len();
                }
            }
            assert_eq!(n, SERVICES as usize);
            black_box(n)
        })
    });
    let (svc, slice) = &cluster[4321];
    g.bench_function("specs_one", |b| {
        b.iter(|| black_box(service_specs(svc, &[slice], &[vip(4321).into()], &cfg)))
    });
    let requests: Vec<ServiceRequest> = cluster
        .iter()
        .map(|(svc, _)| ServiceRequest::from_service(svc).unwrap())
        .collect();
    g.bench_function("ipam_assign_all", |b| {
        b.iter(|| {
            let mut a = Allocator::new(&pools());
            for r in &requests {
                a.assign(r).unwrap();
            }
            black_box(a.pool_usage())
        })
    });
    let mut full = Allocator::new(&pools());
    let claims: Vec<Claim> = requests
        .iter()
        .map(|r| Claim {
            ips: full.assign(r).unwrap(),
            request: r.clone(),
            created: None,
        })
        .collect();
    g.bench_function("ipam_restore_all", |b| {
        b.iter(|| {
            let mut a = Allocator::new(&pools());
            assert!(a.restore(claims.clone()).is_empty());
            black_box(a.pool_usage())
        })
    });
    g.bench_function("ipam_assign_one_more", |b| {
        let key = ServiceKey::new("bench", "extra");
        b.iter(|| {
            let ip = full.assign(&ServiceRequest::new(key.clone())).unwrap();
            full.release(&key);
            black_box(ip)
        })
    });
    g.finish();
}

criterion_group!(benches, bench_model);
criterion_main!(benches);
