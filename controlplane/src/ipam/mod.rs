//! LoadBalancer address management, MetalLB-style: deterministic and pure
//! (no I/O, no clock, no randomness), so several Portico instances that see
//! the same Services in the same order make the same choices.
//!
//! An [`Allocator`] holds the pools of the plan and who holds which address.
//! [`Allocator::assign`] gives a Service its addresses, in MetalLB's order:
//! 1. the addresses it requests (`spec.loadBalancerIP`, or the
//!    `portico.dev/loadBalancerIPs` annotation), each only if it is in a pool
//!    (the requested one, if the Service also names a pool; auto-assign or
//!    not) and free or shareable — all of them or none;
//! 2. else the lowest usable address of the pool it names
//!    (`portico.dev/address-pool`);
//! 3. else the lowest usable address of the first auto-assign pool, in
//!    file order, that has one.
//!
//! Steps 2 and 3 are taken once per family the Service asks for
//! (`spec.ipFamilies`, read in `request.rs`): a pool may list ranges of both
//! families, and each family's address comes from the first pool (the
//! named one, or the auto-assign ones in file order) that has a usable
//! one of that family. `SingleStack` takes the first family only;
//! `RequireDualStack` takes one address of each or none at all (a pool
//! lacking a family is the problem [`IpamProblem::NoPoolForFamily`], so a
//! Service's status never shows half of what it asked for);
//! `PreferDualStack` takes what it can, at least one. A `PreferDualStack`
//! Service that holds one family gains the other when a pool can give it,
//! keeping the address it has.
//!
//! "Usable" means free, or held only by Services with the same
//! `portico.dev/allow-shared-ip` key as the requester and none of the
//! requester's (protocol, port) pairs; with `avoid_buggy_ips`, never an
//! address ending in `.0` or `.255`. Lowest wins, free or shared, as in
//! MetalLB.
//!
//! A Service that already holds addresses keeps them as long as they still
//! satisfy its request (same requested addresses, same pool, sharing still
//! compatible); otherwise they are released and it is assigned afresh, and
//! when that fails it holds nothing (its status must then be cleared).
//! [`Allocator::release`] frees a Service's addresses (deleted, no longer of
//! type LoadBalancer, no longer of Portico's class). [`Allocator::restore`]
//! rebuilds the state at start-up from the Services' statuses before anything
//! is assigned, oldest Service first, so no address is ever given twice.
//!
//! Invariants (checked by the property tests):
//! * a Service holds at most one auto-assigned address per family, each
//!   of a family it asks for;
//! * an address is held by one Service, or by several that all have the same
//!   sharing key and pairwise disjoint (protocol, port) sets;
//! * every held address is offered by its pool (in a range, not a buggy IP
//!   when those are avoided); a pool's `in_use` counts its held addresses,
//!   and its free addresses plus `in_use` make its size;
//! * releasing every Service leaves every pool as it started.

mod free;
mod request;

pub use request::{
    ANNOTATION_ADDRESS_POOL, ANNOTATION_ALLOW_SHARED_IP, ANNOTATION_LOAD_BALANCER_IPS, Claim,
    PortProtocol, ServiceKey, ServiceRequest,
};

pub use request::{Family, FamilyPolicy, service_families};

use free::FreeRanges;
use nic_config::AddressPoolPlan;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// Why a Service did not get (or keep) an address. [`reason`] is a stable
/// CamelCase word for the Kubernetes Event's `reason`; `Display` is the
/// Event's message.
///
/// [`reason`]: IpamProblem::reason
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IpamProblem {
    /// Every pool that could serve the request with an address of
    /// `family` has none left.
    #[error("no free {family} address in pool(s) {}", .pools.join(", "))]
    PoolExhausted { pools: Vec<String>, family: Family },
    /// No pool that could serve the request has a range of `family`, and
    /// the Service needs an address of it (its only or first family, or
    /// `RequireDualStack`).
    #[error(
        "{} no {family} range; ipFamilyPolicy {policy} needs an {family} address \
         (add an {family} range to {}{})",
        pools_have(.pools),
        if .pools.len() == 1 { "the pool" } else { "one of them" },
        if *.policy == FamilyPolicy::RequireDualStack { ", or use PreferDualStack" } else { "" },
        policy = .policy.name()
    )]
    NoPoolForFamily {
        family: Family,
        policy: FamilyPolicy,
        /// The pools that could serve the request.
        pools: Vec<String>,
    },
    /// The Service names no pool and requests no address, and no pool hands
    /// out addresses automatically.
    #[error(
        "no address pool has auto_assign; name a pool in the portico.dev/address-pool annotation"
    )]
    NoAutoAssignPool,
    /// The Service names a pool the configuration does not have.
    #[error("no address pool is named {pool:?}")]
    UnknownPool { pool: String },
    /// A requested address is outside every pool (or outside the pool the
    /// Service names, or a `.0`/`.255` address its pool avoids).
    #[error("requested address {ip} is not in {}", match pool { Some(p) => format!("pool {p:?}"), None => "any address pool".to_owned() })]
    RequestedIpNotInPool { ip: IpAddr, pool: Option<String> },
    /// A requested address is held by another Service and cannot be shared.
    #[error("requested address {ip} is held by {holder}{}", sharing_hint(.holder_sharing_key.as_deref()))]
    RequestedIpTaken {
        ip: IpAddr,
        holder: ServiceKey,
        holder_sharing_key: Option<String>,
    },
    /// An annotation does not parse.
    #[error("annotation {annotation}={value:?}: {reason}")]
    InvalidAnnotation {
        annotation: &'static str,
        value: String,
        reason: String,
    },
    /// The spec asks for something impossible (a bad
    /// `spec.loadBalancerIP`, or both it and the annotation).
    #[error("{reason}")]
    InvalidRequest { reason: String },
    /// At start-up: the address in the Service's status is already held by
    /// an older Service (or one that sorts first) and cannot be shared.
    #[error(
        "address {ip} in the status is already held by {holder}; a new address will be assigned"
    )]
    AddressConflict { ip: IpAddr, holder: ServiceKey },
    /// At start-up: the address in the Service's status is in no pool (the
    /// pools changed).
    #[error(
        "address {ip} in the status is not in any address pool; a new address will be assigned"
    )]
    StatusIpNotInPool { ip: IpAddr },
}

/// "pool "a" has" / "pools "a", "b" have".
fn pools_have(pools: &[String]) -> String {
    let quoted: Vec<String> = pools.iter().map(|p| format!("{p:?}")).collect();
    match quoted.len() {
        1 => format!("pool {} has", quoted[0]),
        _ => format!("pools {} have", quoted.join(", ")),
    }
}

fn sharing_hint(key: Option<&str>) -> String {
    match key {
        Some(k) => format!(
            " (sharing key {k:?}: share it with the same portico.dev/allow-shared-ip key and other ports)"
        ),
        None => " (which does not share it)".to_owned(),
    }
}

impl IpamProblem {
    /// Stable reason word, for Kubernetes Events and metrics labels.
    pub fn reason(&self) -> &'static str {
        match self {
            IpamProblem::PoolExhausted { .. } => "PoolExhausted",
            IpamProblem::NoPoolForFamily { .. } => "NoPoolForFamily",
            IpamProblem::NoAutoAssignPool => "NoAutoAssignPool",
            IpamProblem::UnknownPool { .. } => "UnknownAddressPool",
            IpamProblem::RequestedIpNotInPool { .. } => "RequestedIPNotInPool",
            IpamProblem::RequestedIpTaken { .. } => "RequestedIPTaken",
            IpamProblem::InvalidAnnotation { .. } => "InvalidAnnotation",
            IpamProblem::InvalidRequest { .. } => "InvalidRequest",
            IpamProblem::AddressConflict { .. } => "AddressConflict",
            IpamProblem::StatusIpNotInPool { .. } => "AddressNotInPool",
        }
    }

    /// The message (same as `Display`).
    pub fn message(&self) -> String {
        self.to_string()
    }
}

/// Use of one pool, for metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolUsage {
    pub name: String,
    /// Addresses held by at least one Service.
    pub in_use: u64,
    /// Addresses that can be handed out (a `u128`: an IPv6 /64 alone
    /// holds 2^64).
    pub size: u128,
}

#[derive(Clone, Debug)]
struct Pool {
    plan: AddressPoolPlan,
    free: FreeRanges,
    in_use: u64,
    size: u128,
}

impl Pool {
    fn usable(&self, addr: IpAddr) -> bool {
        !(self.plan.avoid_buggy_ips && nic_config::is_buggy_ip(addr))
    }
}

/// Who holds an address.
#[derive(Clone, Debug)]
struct Holding {
    pool: usize,
    /// The same for every holder.
    sharing_key: Option<String>,
    /// Holders with their (protocol, port) pairs.
    services: BTreeMap<ServiceKey, Vec<(PortProtocol, u16)>>,
}

/// What a Service holds.
#[derive(Clone, Debug)]
struct Held {
    request: ServiceRequest,
    /// Sorted.
    ips: Vec<IpAddr>,
}

/// The address allocator. See the module docs.
#[derive(Clone, Debug)]
pub struct Allocator {
    pools: Vec<Pool>,
    holdings: BTreeMap<IpAddr, Holding>,
    services: BTreeMap<ServiceKey, Held>,
}

impl Allocator {
    /// An allocator with every address of `pools` free. The pools are a
    /// validated plan's (disjoint, unique names).
    pub fn new(pools: &[AddressPoolPlan]) -> Self {
        Allocator {
            pools: pools
                .iter()
                .map(|p| Pool {
                    plan: p.clone(),
                    free: FreeRanges::new(p.ranges.iter().copied()),
                    in_use: 0,
                    size: p.size(),
                })
                .collect(),
            holdings: BTreeMap::new(),
            services: BTreeMap::new(),
        }
    }

    /// Give `request.key` its addresses (see the module docs for the
    /// order). Returns the addresses it holds now, sorted; unchanged when
    /// its current ones still satisfy the request.
    pub fn assign(&mut self, request: &ServiceRequest) -> Result<Vec<IpAddr>, IpamProblem> {
        if let Some(pool) = &request.pool
            && self.pool_index(pool).is_none()
        {
            self.release(&request.key);
            return Err(IpamProblem::UnknownPool { pool: pool.clone() });
        }
        if let Some(held) = self.services.get(&request.key)
            && self.still_satisfies(&held.ips, request)
        {
            let ips = held.ips.clone();
            // Keep the holdings' view of this Service current (its ports or
            // a sole holder's sharing key may have changed).
            for ip in &ips {
                if let Some(h) = self.holdings.get_mut(ip) {
                    if h.services.len() == 1 {
                        h.sharing_key = request.sharing_key.clone();
                    }
                    h.services
                        .insert(request.key.clone(), request.ports.clone());
                }
            }
            if let Some(held) = self.services.get_mut(&request.key) {
                held.request = request.clone();
            }
            // A PreferDualStack Service gains a family it lacks when a
            // pool can give it now.
            if request.requested_ips.is_empty() {
                for &family in &request.families {
                    if !ips.iter().any(|ip| Family::of(*ip) == family)
                        && let Ok(ip) = self.choose_family(request, family)
                    {
                        self.hold(ip, request);
                    }
                }
            }
            return Ok(self.addresses(&request.key).to_vec());
        }
        self.release(&request.key);
        let ips = self.choose(request)?;
        for &ip in &ips {
            self.hold(ip, request);
        }
        Ok(ips)
    }

    /// Free every address `key` holds (an address stays in use while
    /// another Service shares it). Returns the addresses it held.
    pub fn release(&mut self, key: &ServiceKey) -> Vec<IpAddr> {
        let Some(held) = self.services.remove(key) else {
            return Vec::new();
        };
        for ip in &held.ips {
            let Some(h) = self.holdings.get_mut(ip) else {
                continue;
            };
            h.services.remove(key);
            if h.services.is_empty() {
                let pool = h.pool;
                self.holdings.remove(ip);
                if let Some(p) = self.pools.get_mut(pool) {
                    p.free.give_back(*ip);
                    p.in_use -= 1;
                }
            }
        }
        held.ips
    }

    /// Rebuild the state from what Services held before a restart. Claims
    /// are taken oldest first (`created`, then namespace/name; a claim
    /// without a timestamp comes last); an address goes to the first claim
    /// that can hold it. Returns the problems of the claims (or the parts
    /// of them) that could not be honoured; those Services should then be
    /// [`assign`](Allocator::assign)ed.
    pub fn restore(&mut self, mut claims: Vec<Claim>) -> Vec<(ServiceKey, IpamProblem)> {
        claims.sort_by(|a, b| {
            (a.created.is_none(), &a.created, &a.request.key).cmp(&(
                b.created.is_none(),
                &b.created,
                &b.request.key,
            ))
        });
        let mut problems = Vec::new();
        for claim in claims {
            let key = &claim.request.key;
            for &ip in &claim.ips {
                // Only the Service's families, and one automatic address
                // per family (a status may say more than was asked).
                let family = Family::of(ip);
                if !claim.request.families.contains(&family)
                    || (claim.request.requested_ips.is_empty()
                        && self
                            .addresses(key)
                            .iter()
                            .any(|held| Family::of(*held) == family))
                {
                    continue;
                }
                if self.pool_offering(ip).is_none() {
                    problems.push((key.clone(), IpamProblem::StatusIpNotInPool { ip }));
                    continue;
                }
                if let Err(holder) = self.shareable(ip, &claim.request) {
                    problems.push((key.clone(), IpamProblem::AddressConflict { ip, holder }));
                    continue;
                }
                self.hold(ip, &claim.request);
            }
        }
        problems
    }

    /// The addresses `key` holds, sorted (empty if none).
    pub fn addresses(&self, key: &ServiceKey) -> &[IpAddr] {
        self.services.get(key).map_or(&[], |h| &h.ips)
    }

    /// The Services holding `ip`, in key order.
    pub fn holders(&self, ip: IpAddr) -> Vec<&ServiceKey> {
        self.holdings
            .get(&ip)
            .map(|h| h.services.keys().collect())
            .unwrap_or_default()
    }

    /// Every address held by some Service, ascending: the VIPs the gateway
    /// answers for.
    pub fn held_addresses(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.holdings.keys().copied()
    }

    /// Every Service holding addresses, in key order.
    pub fn services(&self) -> impl Iterator<Item = (&ServiceKey, &[IpAddr])> + '_ {
        self.services.iter().map(|(k, h)| (k, h.ips.as_slice()))
    }

    /// The name of the pool `ip` would come from.
    pub fn pool_of(&self, ip: IpAddr) -> Option<&str> {
        self.pool_offering(ip)
            .and_then(|i| self.pools.get(i))
            .map(|p| p.plan.name.as_str())
    }

    /// In use and size of every pool, in configuration order.
    pub fn pool_usage(&self) -> Vec<PoolUsage> {
        self.pools
            .iter()
            .map(|p| PoolUsage {
                name: p.plan.name.clone(),
                in_use: p.in_use,
                size: p.size,
            })
            .collect()
    }

    fn pool_index(&self, name: &str) -> Option<usize> {
        self.pools.iter().position(|p| p.plan.name == name)
    }

    fn pool_offering(&self, ip: IpAddr) -> Option<usize> {
        self.pools.iter().position(|p| p.plan.offers(ip))
    }

    /// Whether `request` may hold `ip` next to its current holders (other
    /// than itself); `Err` names a holder in the way.
    fn shareable(&self, ip: IpAddr, request: &ServiceRequest) -> Result<(), ServiceKey> {
        let Some(h) = self.holdings.get(&ip) else {
            return Ok(());
        };
        for (other, ports) in &h.services {
            if *other == request.key {
                continue;
            }
            if !request.can_share_with(h.sharing_key.as_deref(), ports) {
                return Err(other.clone());
            }
        }
        Ok(())
    }

    fn still_satisfies(&self, ips: &[IpAddr], request: &ServiceRequest) -> bool {
        if ips.is_empty() {
            return false;
        }
        let in_pool = |ip: IpAddr| match &request.pool {
            Some(pool) => self.pool_of(ip).is_some_and(|p| p == pool.as_str()),
            None => self.pool_of(ip).is_some(),
        };
        let placed = if request.requested_ips.is_empty() {
            // At most one address per family, each of a family asked for,
            // every family when both are required.
            let mut families: Vec<Family> = ips.iter().map(|ip| Family::of(*ip)).collect();
            families.dedup();
            families.len() == ips.len()
                && families.iter().all(|f| request.families.contains(f))
                && (request.family_policy != FamilyPolicy::RequireDualStack
                    || families.len() == request.families.len())
                && ips.iter().all(|&ip| in_pool(ip))
        } else {
            ips == request.requested_ips.as_slice()
                && (request.pool.is_none() || ips.iter().all(|&ip| in_pool(ip)))
        };
        placed && ips.iter().all(|&ip| self.shareable(ip, request).is_ok())
    }

    /// The addresses to give `request` (which holds nothing now).
    fn choose(&self, request: &ServiceRequest) -> Result<Vec<IpAddr>, IpamProblem> {
        if !request.requested_ips.is_empty() {
            for &ip in &request.requested_ips {
                let pool = self.pool_offering(ip);
                let in_wanted_pool = match (&request.pool, pool) {
                    (_, None) => false,
                    (None, Some(_)) => true,
                    (Some(want), Some(i)) => {
                        self.pools.get(i).is_some_and(|p| p.plan.name == *want)
                    }
                };
                if !in_wanted_pool {
                    return Err(IpamProblem::RequestedIpNotInPool {
                        ip,
                        pool: request.pool.clone(),
                    });
                }
                if let Err(holder) = self.shareable(ip, request) {
                    let holder_sharing_key =
                        self.holdings.get(&ip).and_then(|h| h.sharing_key.clone());
                    return Err(IpamProblem::RequestedIpTaken {
                        ip,
                        holder,
                        holder_sharing_key,
                    });
                }
            }
            return Ok(request.requested_ips.clone());
        }
        let wanted: &[Family] = match request.family_policy {
            FamilyPolicy::SingleStack => &request.families[..1.min(request.families.len())],
            _ => &request.families,
        };
        if request.family_policy != FamilyPolicy::PreferDualStack {
            // A pool lacking a family is the problem to fix, before any
            // family's exhaustion.
            let candidates = self.candidate_pools(request)?;
            for &family in wanted {
                if !candidates.iter().any(|&i| {
                    self.pools
                        .get(i)
                        .is_some_and(|p| p.plan.has_family(family.is_ipv4()))
                }) {
                    return Err(IpamProblem::NoPoolForFamily {
                        family,
                        policy: request.family_policy,
                        pools: candidates
                            .iter()
                            .filter_map(|&i| self.pools.get(i).map(|p| p.plan.name.clone()))
                            .collect(),
                    });
                }
            }
        }
        let mut ips = Vec::with_capacity(wanted.len());
        let mut first_problem = None;
        for &family in wanted {
            match self.choose_family(request, family) {
                Ok(ip) => ips.push(ip),
                Err(e) if request.family_policy == FamilyPolicy::PreferDualStack => {
                    first_problem.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        match first_problem {
            Some(e) if ips.is_empty() => Err(e),
            _ => {
                ips.sort();
                Ok(ips)
            }
        }
    }

    /// The pools `request` may take an automatic address from: the one it
    /// names, else the auto-assign ones in file order.
    fn candidate_pools(&self, request: &ServiceRequest) -> Result<Vec<usize>, IpamProblem> {
        let candidates: Vec<usize> = match &request.pool {
            Some(name) => self.pool_index(name).into_iter().collect(),
            None => (0..self.pools.len())
                .filter(|&i| self.pools.get(i).is_some_and(|p| p.plan.auto_assign))
                .collect(),
        };
        if candidates.is_empty() {
            return Err(IpamProblem::NoAutoAssignPool);
        }
        Ok(candidates)
    }

    /// The lowest usable address of `family` for `request` in the first
    /// candidate pool that has one.
    fn choose_family(
        &self,
        request: &ServiceRequest,
        family: Family,
    ) -> Result<IpAddr, IpamProblem> {
        let candidates = self.candidate_pools(request)?;
        let names = |list: &[usize]| -> Vec<String> {
            list.iter()
                .filter_map(|&i| self.pools.get(i).map(|p| p.plan.name.clone()))
                .collect()
        };
        let with_family: Vec<usize> = candidates
            .iter()
            .copied()
            .filter(|&i| {
                self.pools
                    .get(i)
                    .is_some_and(|p| p.plan.has_family(family.is_ipv4()))
            })
            .collect();
        if with_family.is_empty() {
            return Err(IpamProblem::NoPoolForFamily {
                family,
                policy: request.family_policy,
                pools: names(&candidates),
            });
        }
        for &i in &with_family {
            let Some(pool) = self.pools.get(i) else {
                continue;
            };
            let free = pool.free.lowest(family.is_ipv4(), |a| pool.usable(a));
            let shared = match &request.sharing_key {
                Some(key) => self
                    .holdings
                    .iter()
                    .filter(|(ip, h)| {
                        h.pool == i
                            && Family::of(**ip) == family
                            && h.sharing_key.as_deref() == Some(key)
                    })
                    .map(|(ip, _)| *ip)
                    .find(|ip| self.shareable(*ip, request).is_ok()),
                None => None,
            };
            let best = match (free, shared) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if let Some(ip) = best {
                return Ok(ip);
            }
        }
        Err(IpamProblem::PoolExhausted {
            pools: names(&with_family),
            family,
        })
    }

    /// Record that `request.key` holds `ip` (offered by a pool, shareable).
    fn hold(&mut self, ip: IpAddr, request: &ServiceRequest) {
        let Some(pool) = self.pool_offering(ip) else {
            return;
        };
        let holding = self.holdings.entry(ip).or_insert_with(|| Holding {
            pool,
            sharing_key: request.sharing_key.clone(),
            services: BTreeMap::new(),
        });
        if holding.services.is_empty()
            && let Some(p) = self.pools.get_mut(pool)
        {
            p.free.take(ip);
            p.in_use += 1;
        }
        holding
            .services
            .insert(request.key.clone(), request.ports.clone());
        let held = self
            .services
            .entry(request.key.clone())
            .or_insert_with(|| Held {
                request: request.clone(),
                ips: Vec::new(),
            });
        if let Err(at) = held.ips.binary_search(&ip) {
            held.ips.insert(at, ip);
        }
    }

    /// Every invariant of the module docs; for tests.
    #[cfg(test)]
    fn check_invariants(&self) -> Result<(), String> {
        let mut in_use = vec![0u64; self.pools.len()];
        for (ip, h) in &self.holdings {
            if h.services.is_empty() {
                return Err(format!("{ip}: empty holding"));
            }
            let pool = self.pools.get(h.pool).ok_or("bad pool index")?;
            if !pool.plan.offers(*ip) || pool.free.contains(*ip) {
                return Err(format!(
                    "{ip}: not offered by or free in {}",
                    pool.plan.name
                ));
            }
            in_use[h.pool] += 1;
            let holders: Vec<_> = h.services.iter().collect();
            for (i, (a, pa)) in holders.iter().enumerate() {
                let held = self
                    .services
                    .get(*a)
                    .ok_or(format!("{ip}: {a} not recorded"))?;
                if !held.ips.contains(ip) {
                    return Err(format!("{ip}: {a} does not list it"));
                }
                for (b, pb) in holders.iter().skip(i + 1) {
                    let sk = h.sharing_key.as_deref();
                    let same = held.request.sharing_key.as_deref() == sk && sk.is_some();
                    if !same || pa.iter().any(|p| pb.contains(p)) {
                        return Err(format!("{ip}: {a} and {b} may not share it"));
                    }
                }
            }
        }
        for (key, held) in &self.services {
            if held.request.requested_ips.is_empty() {
                let mut families: Vec<Family> = held.ips.iter().map(|ip| Family::of(*ip)).collect();
                families.dedup();
                if families.len() != held.ips.len()
                    || !families.iter().all(|f| held.request.families.contains(f))
                {
                    return Err(format!(
                        "{key} holds {:?} for families {:?}",
                        held.ips, held.request.families
                    ));
                }
            }
            for ip in &held.ips {
                if !self
                    .holdings
                    .get(ip)
                    .is_some_and(|h| h.services.contains_key(key))
                {
                    return Err(format!("{key} lists {ip}, not recorded as its holder"));
                }
            }
        }
        for (p, n) in self.pools.iter().zip(in_use) {
            if p.in_use != n {
                return Err(format!(
                    "pool {}: in_use {} but {n} held",
                    p.plan.name, p.in_use
                ));
            }
            let free = p.free.count(p.plan.avoid_buggy_ips);
            if free + u128::from(n) != p.size {
                return Err(format!(
                    "pool {}: {free} free + {n} held != {}",
                    p.plan.name, p.size
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
