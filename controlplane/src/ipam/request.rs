//! What a Service asks of the allocator, read from its spec and
//! annotations, and what it claimed before a restart (its status).
//!
//! The families a Service's addresses are of come from `spec.ipFamilies`
//! (the API server fills it in from `spec.ipFamilyPolicy` and the cluster's
//! service CIDRs: one family for `SingleStack`, and for `PreferDualStack`
//! in a single-stack cluster; both, primary first, otherwise). Without it
//! (an object not defaulted by an API server) a Service is IPv4 only.
//! `RequireDualStack` asks for both families whatever `ipFamilies` lists.

use super::IpamProblem;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::fmt;
use std::net::IpAddr;

/// Annotation naming the pool to take the address from.
pub const ANNOTATION_ADDRESS_POOL: &str = "portico.dev/address-pool";
/// Annotation listing the addresses wanted, comma-separated
/// (`"192.0.2.10,192.0.2.11"`); instead of `spec.loadBalancerIP`, which
/// Kubernetes deprecated.
pub const ANNOTATION_LOAD_BALANCER_IPS: &str = "portico.dev/loadBalancerIPs";
/// Annotation with a sharing key: Services with the same key may share an
/// address when their (protocol, port) sets do not overlap.
pub const ANNOTATION_ALLOW_SHARED_IP: &str = "portico.dev/allow-shared-ip";

/// A Service by namespace and name; ordered by namespace, then name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceKey {
    pub namespace: String,
    pub name: String,
}

impl ServiceKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        ServiceKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key of a Service (`default` when it has no namespace).
    pub fn of(svc: &Service) -> Self {
        ServiceKey::new(
            svc.metadata.namespace.as_deref().unwrap_or("default"),
            svc.metadata.name.as_deref().unwrap_or_default(),
        )
    }
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Transport protocol of a Service port (for address sharing, SCTP ports
/// count too, though Portico does not forward SCTP).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PortProtocol {
    Tcp,
    Udp,
    Sctp,
}

impl PortProtocol {
    /// From `ServicePort.protocol` (absent means TCP); `None` for an
    /// unknown protocol.
    pub fn parse(protocol: Option<&str>) -> Option<Self> {
        match protocol.unwrap_or("TCP") {
            "TCP" => Some(PortProtocol::Tcp),
            "UDP" => Some(PortProtocol::Udp),
            "SCTP" => Some(PortProtocol::Sctp),
            _ => None,
        }
    }
}

impl fmt::Display for PortProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PortProtocol::Tcp => "TCP",
            PortProtocol::Udp => "UDP",
            PortProtocol::Sctp => "SCTP",
        })
    }
}

/// An address family, as Kubernetes names it in `spec.ipFamilies` and
/// EndpointSlices' `addressType` (`IPv4`, `IPv6`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    /// The family of `addr`.
    pub fn of(addr: IpAddr) -> Self {
        if addr.is_ipv4() {
            Family::V4
        } else {
            Family::V6
        }
    }

    pub fn is_ipv4(self) -> bool {
        self == Family::V4
    }

    /// Kubernetes' name: `IPv4` or `IPv6`.
    pub fn name(self) -> &'static str {
        match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        }
    }

    /// From Kubernetes' name; `None` for anything else.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "IPv4" => Some(Family::V4),
            "IPv6" => Some(Family::V6),
            _ => None,
        }
    }

    /// The other family.
    pub fn other(self) -> Self {
        match self {
            Family::V4 => Family::V6,
            Family::V6 => Family::V4,
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `spec.ipFamilyPolicy`: whether a Service wants one family or both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FamilyPolicy {
    /// One address, of the first family (the default).
    #[default]
    SingleStack,
    /// One address per listed family; the second only if a pool can give
    /// it (the Service is served on the first alone otherwise).
    PreferDualStack,
    /// One address of each family, or none at all.
    RequireDualStack,
}

impl FamilyPolicy {
    /// From Kubernetes' name; `None` for anything else.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "SingleStack" => Some(FamilyPolicy::SingleStack),
            "PreferDualStack" => Some(FamilyPolicy::PreferDualStack),
            "RequireDualStack" => Some(FamilyPolicy::RequireDualStack),
            _ => None,
        }
    }

    /// Kubernetes' name.
    pub fn name(self) -> &'static str {
        match self {
            FamilyPolicy::SingleStack => "SingleStack",
            FamilyPolicy::PreferDualStack => "PreferDualStack",
            FamilyPolicy::RequireDualStack => "RequireDualStack",
        }
    }
}

/// What a LoadBalancer Service asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceRequest {
    pub key: ServiceKey,
    /// Specific addresses (`spec.loadBalancerIP` or the
    /// [`ANNOTATION_LOAD_BALANCER_IPS`] list), sorted, without repeats, of
    /// the Service's families; empty: any address.
    pub requested_ips: Vec<IpAddr>,
    /// The families to give an address of, primary first, distinct,
    /// never empty (`spec.ipFamilies`; `[IPv4]` without it).
    pub families: Vec<Family>,
    /// `spec.ipFamilyPolicy` (absent: `SingleStack`).
    pub family_policy: FamilyPolicy,
    /// The pool to take from ([`ANNOTATION_ADDRESS_POOL`]); `None`: the
    /// auto-assign pools.
    pub pool: Option<String>,
    /// [`ANNOTATION_ALLOW_SHARED_IP`]; `None`: the address is this
    /// Service's alone.
    pub sharing_key: Option<String>,
    /// The Service's (protocol, port) pairs, sorted, without repeats.
    pub ports: Vec<(PortProtocol, u16)>,
}

impl ServiceRequest {
    /// A request for any address, no pool, no sharing, no ports.
    pub fn new(key: ServiceKey) -> Self {
        ServiceRequest {
            key,
            requested_ips: Vec::new(),
            families: vec![Family::V4],
            family_policy: FamilyPolicy::SingleStack,
            pool: None,
            sharing_key: None,
            ports: Vec::new(),
        }
    }

    /// Read a Service's request. Problems: an annotation or
    /// `spec.loadBalancerIP` that does not parse, or both a
    /// `spec.loadBalancerIP` and the annotation; an unknown family or
    /// family policy; a requested address of a family the Service does not
    /// have; `RequireDualStack` with requested addresses of one family.
    pub fn from_service(svc: &Service) -> Result<Self, IpamProblem> {
        let annotations = svc.metadata.annotations.as_ref();
        let annotation = |name: &str| {
            annotations
                .and_then(|a| a.get(name))
                .map(|v| v.trim())
                .filter(|v| !v.is_empty())
        };
        let spec = svc.spec.as_ref();
        let spec_ip = spec
            .and_then(|s| s.load_balancer_ip.as_deref())
            .map(str::trim)
            .filter(|v| !v.is_empty());

        let mut requested_ips = Vec::new();
        match (spec_ip, annotation(ANNOTATION_LOAD_BALANCER_IPS)) {
            (Some(_), Some(_)) => {
                return Err(IpamProblem::InvalidRequest {
                    reason: format!(
                        "both spec.loadBalancerIP and the {ANNOTATION_LOAD_BALANCER_IPS} annotation are set; use only the annotation"
                    ),
                });
            }
            (Some(text), None) => {
                requested_ips.push(parse_ip(text).map_err(|reason| {
                    IpamProblem::InvalidRequest {
                        reason: format!("spec.loadBalancerIP {text:?}: {reason}"),
                    }
                })?);
            }
            (None, Some(list)) => {
                for item in list.split(',') {
                    let item = item.trim();
                    requested_ips.push(parse_ip(item).map_err(|reason| {
                        IpamProblem::InvalidAnnotation {
                            annotation: ANNOTATION_LOAD_BALANCER_IPS,
                            value: list.to_owned(),
                            reason: format!("{item:?}: {reason}"),
                        }
                    })?);
                }
            }
            (None, None) => {}
        }
        requested_ips.sort();
        requested_ips.dedup();
        let (families, family_policy) = families_of(spec)?;
        if let Some(ip) = requested_ips
            .iter()
            .find(|ip| !families.contains(&Family::of(**ip)))
        {
            let listed: Vec<&str> = families.iter().map(|f| f.name()).collect();
            return Err(IpamProblem::InvalidRequest {
                reason: format!(
                    "requested address {ip} is {}, but the Service's ipFamilies are [{}]",
                    Family::of(*ip),
                    listed.join(", ")
                ),
            });
        }
        if family_policy == FamilyPolicy::RequireDualStack
            && !requested_ips.is_empty()
            && let Some(missing) = families
                .iter()
                .find(|f| !requested_ips.iter().any(|ip| Family::of(*ip) == **f))
        {
            return Err(IpamProblem::InvalidRequest {
                reason: format!(
                    "ipFamilyPolicy RequireDualStack with requested addresses needs an {missing} one too"
                ),
            });
        }

        let mut ports: Vec<(PortProtocol, u16)> = spec
            .and_then(|s| s.ports.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|p| {
                Some((
                    PortProtocol::parse(p.protocol.as_deref())?,
                    u16::try_from(p.port).ok()?,
                ))
            })
            .collect();
        ports.sort();
        ports.dedup();

        Ok(ServiceRequest {
            key: ServiceKey::of(svc),
            requested_ips,
            families,
            family_policy,
            pool: annotation(ANNOTATION_ADDRESS_POOL).map(str::to_owned),
            sharing_key: annotation(ANNOTATION_ALLOW_SHARED_IP).map(str::to_owned),
            ports,
        })
    }

    /// Whether the two requests may share an address: both carry the same
    /// sharing key and no (protocol, port) is in both.
    pub fn can_share_with(&self, sharing_key: Option<&str>, ports: &[(PortProtocol, u16)]) -> bool {
        match (&self.sharing_key, sharing_key) {
            (Some(mine), Some(theirs)) if mine == theirs => {
                !self.ports.iter().any(|p| ports.binary_search(p).is_ok())
            }
            _ => false,
        }
    }
}

fn parse_ip(text: &str) -> Result<IpAddr, String> {
    text.parse::<IpAddr>()
        .map_err(|_| "not an IP address".to_owned())
}

/// The families of a Service as [`ServiceRequest::from_service`] reads
/// them; `[IPv4]`, `SingleStack` when they do not parse (the API server
/// validates both fields, so only a hand-made object gets here).
pub fn service_families(svc: &Service) -> (Vec<Family>, FamilyPolicy) {
    families_of(svc.spec.as_ref()).unwrap_or((vec![Family::V4], FamilyPolicy::SingleStack))
}

/// `spec.ipFamilies` (distinct, primary first; `[IPv4]` when absent or
/// empty) and `spec.ipFamilyPolicy`; `RequireDualStack` adds the family
/// `ipFamilies` leaves out.
fn families_of(
    spec: Option<&k8s_openapi::api::core::v1::ServiceSpec>,
) -> Result<(Vec<Family>, FamilyPolicy), IpamProblem> {
    let policy = match spec.and_then(|s| s.ip_family_policy.as_deref()) {
        None => FamilyPolicy::SingleStack,
        Some(p) => FamilyPolicy::parse(p).ok_or_else(|| IpamProblem::InvalidRequest {
            reason: format!(
                "spec.ipFamilyPolicy {p:?} is none of SingleStack, PreferDualStack, RequireDualStack"
            ),
        })?,
    };
    let mut families = Vec::new();
    for name in spec
        .and_then(|s| s.ip_families.as_ref())
        .into_iter()
        .flatten()
    {
        let f = Family::parse(name).ok_or_else(|| IpamProblem::InvalidRequest {
            reason: format!("spec.ipFamilies: {name:?} is neither IPv4 nor IPv6"),
        })?;
        if !families.contains(&f) {
            families.push(f);
        }
    }
    if families.is_empty() {
        families.push(Family::V4);
    }
    match policy {
        FamilyPolicy::SingleStack => families.truncate(1),
        FamilyPolicy::PreferDualStack => {}
        FamilyPolicy::RequireDualStack => {
            if families.len() == 1 {
                families.push(families[0].other());
            }
        }
    }
    Ok((families, policy))
}

/// What a Service held before a restart: its request and the addresses in
/// `status.loadBalancer.ingress[].ip`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    pub request: ServiceRequest,
    /// Sorted, without repeats; of either family.
    pub ips: Vec<IpAddr>,
    /// `metadata.creationTimestamp`: older claims win conflicts.
    pub created: Option<Time>,
}

impl Claim {
    /// The claim of a Service; `Ok(None)` when its status holds no
    /// address of its families. Hostnames and addresses of another family
    /// in the status are not Portico's and are left out.
    pub fn from_service(svc: &Service) -> Result<Option<Self>, IpamProblem> {
        let request = ServiceRequest::from_service(svc)?;
        let mut ips: Vec<IpAddr> = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|i| i.ip.as_deref()?.parse::<IpAddr>().ok())
            .filter(|ip| request.families.contains(&Family::of(*ip)))
            .collect();
        if ips.is_empty() {
            return Ok(None);
        }
        ips.sort();
        ips.dedup();
        Ok(Some(Claim {
            request,
            ips,
            created: svc.metadata.creation_timestamp.clone(),
        }))
    }
}
