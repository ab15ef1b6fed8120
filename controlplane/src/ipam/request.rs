//! What a Service asks of the allocator, read from its spec and
//! annotations, and what it claimed before a restart (its status).

use super::IpamProblem;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

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

/// What a LoadBalancer Service asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceRequest {
    pub key: ServiceKey,
    /// Specific addresses (`spec.loadBalancerIP` or the
    /// [`ANNOTATION_LOAD_BALANCER_IPS`] list), sorted, without repeats;
    /// empty: any address.
    pub requested_ips: Vec<Ipv4Addr>,
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
            pool: None,
            sharing_key: None,
            ports: Vec::new(),
        }
    }

    /// Read a Service's request. Problems: an annotation or
    /// `spec.loadBalancerIP` that does not parse, or both a
    /// `spec.loadBalancerIP` and the annotation.
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
                requested_ips.push(parse_ipv4(text).map_err(|reason| {
                    IpamProblem::InvalidRequest {
                        reason: format!("spec.loadBalancerIP {text:?}: {reason}"),
                    }
                })?);
            }
            (None, Some(list)) => {
                for item in list.split(',') {
                    let item = item.trim();
                    requested_ips.push(parse_ipv4(item).map_err(|reason| {
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

fn parse_ipv4(text: &str) -> Result<Ipv4Addr, String> {
    match text.parse::<IpAddr>() {
        Ok(IpAddr::V4(a)) => Ok(a),
        Ok(IpAddr::V6(_)) => Err("Portico hands out IPv4 addresses only".to_owned()),
        Err(_) => Err("not an IP address".to_owned()),
    }
}

/// What a Service held before a restart: its request and the IPv4
/// addresses in `status.loadBalancer.ingress[].ip`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    pub request: ServiceRequest,
    /// Sorted, without repeats.
    pub ips: Vec<Ipv4Addr>,
    /// `metadata.creationTimestamp`: older claims win conflicts.
    pub created: Option<Time>,
}

impl Claim {
    /// The claim of a Service; `Ok(None)` when its status holds no IPv4
    /// address. Hostnames and IPv6 addresses in the status are not
    /// Portico's and are left out.
    pub fn from_service(svc: &Service) -> Result<Option<Self>, IpamProblem> {
        let mut ips: Vec<Ipv4Addr> = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|i| i.ip.as_deref()?.parse::<Ipv4Addr>().ok())
            .collect();
        if ips.is_empty() {
            return Ok(None);
        }
        ips.sort();
        ips.dedup();
        Ok(Some(Claim {
            request: ServiceRequest::from_service(svc)?,
            ips,
            created: svc.metadata.creation_timestamp.clone(),
        }))
    }
}
