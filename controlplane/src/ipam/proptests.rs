//! Random sequences of assign / release / restart / foreign claims, over
//! pools of both families (one dual-stack, one IPv4 only, one IPv6 only)
//! and Services of every family and family policy: the
//! allocator's invariants hold after every step, each Service gets what its
//! policy promises (one address of each family it must have, never two of
//! one family), no address is ever held by
//! two Services that may not share it (checked independently of the
//! allocator's own bookkeeping), releasing everything returns every address,
//! and a restart from the statuses restores the same state.

use super::*;
use nic_config::IpRange;
use proptest::prelude::*;
use std::collections::BTreeMap;

fn pools() -> Vec<AddressPoolPlan> {
    let p = |name: &str, ranges: &[&str], auto_assign, avoid_buggy_ips| AddressPoolPlan {
        name: name.to_owned(),
        ranges: ranges
            .iter()
            .map(|r| r.parse::<IpRange>().unwrap())
            .collect(),
        auto_assign,
        avoid_buggy_ips,
    };
    vec![
        p(
            "a",
            &["10.0.0.254-10.0.1.1", "2001:db8::1-2001:db8::2"],
            true,
            true,
        ),
        p("b", &["10.0.2.0/30", "10.0.3.7/32"], true, false),
        p("c", &["2001:db8:1::/127"], true, false),
        p("m", &["10.0.4.0/31", "2001:db8:4::/127"], false, false),
    ]
}

/// Addresses requests and foreign claims pick from: every pool address,
/// the buggy ones, and one outside every pool, in each family.
const ADDRESSES: &[&str] = &[
    "10.0.0.254",
    "10.0.0.255",
    "10.0.1.0",
    "10.0.1.1",
    "10.0.2.0",
    "10.0.2.3",
    "10.0.3.7",
    "10.0.4.0",
    "10.0.4.1",
    "10.9.9.9",
    "2001:db8::1",
    "2001:db8::2",
    "2001:db8:1::",
    "2001:db8:1::1",
    "2001:db8:4::",
    "2001:db8:9::9",
];

fn address(i: usize) -> IpAddr {
    ADDRESSES[i].parse().unwrap()
}

/// Every `spec.ipFamilies` an API server writes.
const FAMILIES: &[&[Family]] = &[
    &[Family::V4],
    &[Family::V6],
    &[Family::V4, Family::V6],
    &[Family::V6, Family::V4],
];
const POLICIES: [FamilyPolicy; 3] = [
    FamilyPolicy::SingleStack,
    FamilyPolicy::PreferDualStack,
    FamilyPolicy::RequireDualStack,
];
const PORTS: &[(PortProtocol, u16)] = &[
    (PortProtocol::Tcp, 80),
    (PortProtocol::Tcp, 443),
    (PortProtocol::Udp, 53),
];
const SERVICES: usize = 8;

fn request() -> impl Strategy<Value = ServiceRequest> {
    (
        0..SERVICES,
        prop::collection::vec(0..ADDRESSES.len(), 0..3),
        prop::option::weighted(0.3, prop::sample::select(vec!["a", "b", "c", "m", "x"])),
        prop::option::weighted(0.6, prop::sample::select(vec!["k1", "k2"])),
        prop::collection::vec(0..PORTS.len(), 0..3),
        (0..FAMILIES.len(), 0..POLICIES.len()),
    )
        .prop_map(
            |(svc, mut ips, pool, sharing, mut ports, (families, policy))| {
                // What the API server writes: one family for SingleStack, both
                // for RequireDualStack.
                let family_policy = POLICIES[policy];
                let mut families = FAMILIES[families].to_vec();
                match family_policy {
                    FamilyPolicy::SingleStack => families.truncate(1),
                    FamilyPolicy::PreferDualStack => {}
                    FamilyPolicy::RequireDualStack if families.len() == 1 => {
                        families.push(families[0].other());
                    }
                    FamilyPolicy::RequireDualStack => {}
                }
                // Mostly auto-assign: keep requested addresses rare, and of
                // the Service's families (what `from_service` accepts).
                ips.truncate(usize::from(svc % 3 == 0) * 2);
                let mut requested_ips: Vec<IpAddr> = ips
                    .into_iter()
                    .map(address)
                    .filter(|ip| families.contains(&Family::of(*ip)))
                    .collect();
                requested_ips.sort();
                requested_ips.dedup();
                if family_policy == FamilyPolicy::RequireDualStack
                    && !families
                        .iter()
                        .all(|f| requested_ips.iter().any(|ip| Family::of(*ip) == *f))
                {
                    requested_ips.clear();
                }
                ports.sort();
                ports.dedup();
                ServiceRequest {
                    key: ServiceKey::new("ns", format!("s{svc}")),
                    requested_ips,
                    families,
                    family_policy,
                    pool: pool.map(str::to_owned),
                    sharing_key: sharing.map(str::to_owned),
                    ports: ports.into_iter().map(|i| PORTS[i]).collect(),
                }
            },
        )
}

#[derive(Clone, Debug)]
enum Op {
    Assign(ServiceRequest),
    Release(usize),
    /// Rebuild from the claims, in the order given by the seed.
    Restart(u64),
    /// Start afresh from arbitrary, possibly conflicting claims.
    ForeignClaims(Vec<(ServiceRequest, Vec<usize>, Option<u8>)>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => request().prop_map(Op::Assign),
        2 => (0..SERVICES).prop_map(Op::Release),
        1 => any::<u64>().prop_map(Op::Restart),
        1 => prop::collection::vec(
            (request(), prop::collection::vec(0..ADDRESSES.len(), 1..3), prop::option::of(0u8..4)),
            0..6,
        )
        .prop_map(Op::ForeignClaims),
    ]
}

/// From the outside: who holds each address according to `addresses()`.
fn no_forbidden_sharing(
    a: &Allocator,
    requests: &BTreeMap<ServiceKey, ServiceRequest>,
) -> Result<(), String> {
    let mut by_ip: BTreeMap<IpAddr, Vec<&ServiceKey>> = BTreeMap::new();
    for (key, ips) in a.services() {
        for ip in ips {
            by_ip.entry(*ip).or_default().push(key);
        }
    }
    for (ip, keys) in by_ip {
        if a.pool_of(ip).is_none() {
            return Err(format!("{ip} held but in no pool"));
        }
        for (i, x) in keys.iter().enumerate() {
            for y in keys.iter().skip(i + 1) {
                let (rx, ry) = (&requests[*x], &requests[*y]);
                if !rx.can_share_with(ry.sharing_key.as_deref(), &ry.ports) {
                    return Err(format!("{ip} held by {x} and {y}, which may not share"));
                }
            }
        }
    }
    Ok(())
}

fn day_time(d: u8) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    serde_json::from_value(serde_json::json!(format!("2024-01-{:02}T00:00:00Z", d + 1))).unwrap()
}

fn claims_of(a: &Allocator, requests: &BTreeMap<ServiceKey, ServiceRequest>) -> Vec<Claim> {
    a.services()
        .map(|(key, ips)| Claim {
            request: requests[key].clone(),
            ips: ips.to_vec(),
            created: None,
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_under_any_sequence(ops in prop::collection::vec(op(), 1..40)) {
        let mut a = Allocator::new(&pools());
        // The request each holder last made (what its status would say).
        let mut requests: BTreeMap<ServiceKey, ServiceRequest> = BTreeMap::new();
        for op in ops {
            match op {
                Op::Assign(r) => {
                    let result = a.assign(&r);
                    match &result {
                        Ok(ips) => {
                            prop_assert_eq!(ips.as_slice(), a.addresses(&r.key));
                            if !r.requested_ips.is_empty() {
                                prop_assert_eq!(ips, &r.requested_ips);
                            } else {
                                // One address per family, of its families;
                                // what the policy promises.
                                let mut got: Vec<Family> = ips.iter().map(|ip| Family::of(*ip)).collect();
                                got.sort();
                                got.dedup();
                                prop_assert_eq!(got.len(), ips.len());
                                prop_assert!(got.iter().all(|f| r.families.contains(f)));
                                match r.family_policy {
                                    FamilyPolicy::SingleStack => {
                                        prop_assert_eq!(got, vec![r.families[0]]);
                                    }
                                    FamilyPolicy::PreferDualStack => prop_assert!(!got.is_empty()),
                                    FamilyPolicy::RequireDualStack => {
                                        prop_assert_eq!(got.len(), 2);
                                    }
                                }
                            }
                            if let Some(p) = &r.pool {
                                prop_assert!(ips.iter().all(|ip| a.pool_of(*ip) == Some(p.as_str())));
                            }
                        }
                        Err(_) => prop_assert!(a.addresses(&r.key).is_empty()),
                    }
                    requests.insert(r.key.clone(), r);
                }
                Op::Release(i) => {
                    let key = ServiceKey::new("ns", format!("s{i}"));
                    let had = a.addresses(&key).to_vec();
                    prop_assert_eq!(a.release(&key), had);
                    prop_assert!(a.addresses(&key).is_empty());
                }
                Op::Restart(seed) => {
                    let before: Vec<(ServiceKey, Vec<IpAddr>)> =
                        a.services().map(|(k, ips)| (k.clone(), ips.to_vec())).collect();
                    let mut claims = claims_of(&a, &requests);
                    // Any ages: the state was consistent, so nothing
                    // conflicts whatever order the claims are taken in.
                    for (i, c) in claims.iter_mut().enumerate() {
                        c.created = Some(day_time((seed >> ((i * 3) % 60)) as u8 & 7));
                    }
                    a = Allocator::new(&pools());
                    let problems = a.restore(claims);
                    prop_assert!(problems.is_empty(), "{:?}", problems);
                    let after: Vec<(ServiceKey, Vec<IpAddr>)> =
                        a.services().map(|(k, ips)| (k.clone(), ips.to_vec())).collect();
                    prop_assert_eq!(before, after);
                }
                Op::ForeignClaims(raw) => {
                    a = Allocator::new(&pools());
                    requests.clear();
                    let mut claims = Vec::new();
                    for (r, ips, day) in raw {
                        let mut ips: Vec<IpAddr> = ips.into_iter().map(address).collect();
                        ips.sort();
                        ips.dedup();
                        let created = day.map(day_time);
                        // One claim per Service, as one Service has one status.
                        if let std::collections::btree_map::Entry::Vacant(e) = requests.entry(r.key.clone()) {
                            e.insert(r.clone());
                            claims.push(Claim { request: r, ips, created });
                        }
                    }
                    let problems = a.restore(claims.clone());
                    // Every claimed address of the claim's families that is
                    // in a pool is held by someone, unless the claim took
                    // another (automatic) address of its family; every
                    // problem concerns a claim.
                    for c in &claims {
                        for ip in &c.ips {
                            let family = Family::of(*ip);
                            let took_another = c.request.requested_ips.is_empty()
                                && a.addresses(&c.request.key).iter().any(|h| h != ip && Family::of(*h) == family);
                            if a.pool_of(*ip).is_some()
                                && c.request.families.contains(&family)
                                && !took_another
                            {
                                prop_assert!(!a.holders(*ip).is_empty(), "{} not held", ip);
                            }
                        }
                    }
                    prop_assert!(problems.iter().all(|(k, _)| claims.iter().any(|c| &c.request.key == k)));
                }
            }
            a.check_invariants().map_err(TestCaseError::fail)?;
            no_forbidden_sharing(&a, &requests).map_err(TestCaseError::fail)?;
        }
        // Releasing everyone returns every address.
        let keys: Vec<ServiceKey> = a.services().map(|(k, _)| k.clone()).collect();
        for k in keys {
            a.release(&k);
        }
        a.check_invariants().map_err(TestCaseError::fail)?;
        prop_assert!(a.pool_usage().iter().all(|u| u.in_use == 0));
        prop_assert_eq!(a.held_addresses().count(), 0);
        let fresh = Allocator::new(&pools());
        for (p, q) in a.pools.iter().zip(&fresh.pools) {
            prop_assert_eq!(&p.free, &q.free);
        }
    }
}
