//! One Service (+ its EndpointSlices + its assigned addresses) → one
//! [`ServiceSpec`] per servable port, or the reason it is ignored.
//!
//! Semantics (Kubernetes' own, as kube-proxy implements them; see
//! <https://kubernetes.io/docs/reference/kubernetes-api/service-resources/service-v1/>
//! and `endpoint-slice-v1/`):
//! * `type: LoadBalancer`: listeners on the assigned addresses (kind `Vip`),
//!   plus `nodePort` on every node address unless
//!   `allocateLoadBalancerNodePorts: false`; only Services of Portico's
//!   `loadBalancerClass`, or unclassed ones when `serve_unclassed`;
//! * `type: NodePort`: `nodePort` on every node address;
//! * `spec.externalIPs` (any type): listeners of kind `ExternalIp`, only
//!   inside `[kubernetes] external_ip_cidrs` (default: none — any tenant may
//!   write any externalIP, as Kubernetes' DenyServiceExternalIPs admission
//!   plugin warns), never on the gateway's own node/SNAT addresses, and
//!   only of one of the Service's families (as kube-proxy filters them);
//! * families (`spec.ipFamilies`, read as the allocator reads them:
//!   `crate::ipam::service_families`): a Service is served per family it
//!   has — one spec per port and family, each single-family (its
//!   listeners and endpoints all IPv4 or all IPv6: no NAT46/64). The IPv4
//!   spec keeps the name `namespace/name:port/protocol`, the IPv6 one adds
//!   `/ipv6`. NodePorts listen on the node addresses of each family;
//! * `type: ClusterIP` without externalIPs, headless (`clusterIP: None`) and
//!   `type: ExternalName` are ignored, with a reason;
//! * ports: TCP and UDP (absent protocol = TCP); SCTP and others are skipped
//!   with a reason, per port;
//! * endpoints come from the EndpointSlices of the Service (label
//!   `kubernetes.io/service-name`, same namespace) whose `addressType` is
//!   one of the Service's families (`IPv4`, `IPv6`; FQDN slices are
//!   skipped); a family's spec takes the endpoints of that family's slices.
//!   A Service port takes its endpoint
//!   port from the slice port with the same name and protocol — the
//!   EndpointSlice controller has already resolved `targetPort`, by number
//!   or by container-port name, into that number per endpoint. A slice
//!   without that port contributes no endpoints to it; a slice port without
//!   a number uses a numeric `targetPort` (a named one cannot be resolved);
//! * an endpoint is its first address (as kube-proxy does); its condition:
//!   `ready` (absent = ready, per the API) → Ready; else `serving` (absent =
//!   serving) and `terminating` → ServingTerminating (KEP-1669); else
//!   Draining. An address in several slices appears once, with its best
//!   condition;
//! * `sessionAffinity: ClientIP` → affinity for `timeoutSeconds` (default
//!   10800, bounded to 1..=86400);
//! * `externalTrafficPolicy: Local` → no SNAT: the client address is kept
//!   (the gateway is then on the backends' return path). The per-node
//!   endpoint filtering of kube-proxy does not apply to a gateway;
//! * the annotation `portico.dev/syn-proxy` (`off`, `on` or `auto`) sets
//!   the SYN proxy of the Service's TCP ports; without it, `[kubernetes]
//!   syn_proxy` applies (default `off`); `auto`'s threshold is `[kubernetes]
//!   syn_proxy_half_open_threshold`. Another value is reported (a
//!   Warning Event naming it and the accepted ones) and the default applies
//!   (to the specs of both families);
//! * spec names are stable: `namespace/name:port/protocol`, with the port's
//!   name, or its number when unnamed; listeners and endpoints are sorted,
//!   so equal inputs give equal specs.

use crate::ipam::{Family, service_families};
use crate::mirror::{ToConfig, ToDataplane};
use dataplane::flow::Proto;
use dataplane::snapshot::{
    BackendGonePolicy, EndpointCondition, EndpointSpec, ListenerKind, ServiceSpec, SynProxyMode,
};
use k8s_openapi::api::core::v1::{Service, ServicePort};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use nic_config::{AddressRole, IpPrefix, Plan};
use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// Annotation setting the SYN proxy of a Service's TCP ports: one of
/// [`SYN_PROXY_VALUES`].
pub const ANNOTATION_SYN_PROXY: &str = "portico.dev/syn-proxy";
/// What [`ANNOTATION_SYN_PROXY`] accepts (as a static service's
/// `syn_proxy`).
pub const SYN_PROXY_VALUES: [&str; 3] = ["off", "on", "auto"];

/// The label joining an EndpointSlice to its Service.
pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";
/// Kubernetes' default ClientIP affinity timeout.
const DEFAULT_AFFINITY_TIMEOUT_S: i32 = 10_800;
/// Kubernetes' bound on `timeoutSeconds`.
const MAX_AFFINITY_TIMEOUT_S: i32 = 86_400;

/// What the model needs from the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelConfig {
    /// Portico's `loadBalancerClass`.
    pub load_balancer_class: String,
    /// Also serve LoadBalancer Services without a class.
    pub serve_unclassed: bool,
    /// Where NodePorts listen (both families, sorted).
    pub node_addresses: Vec<IpAddr>,
    /// Every node, SNAT and host address: no externalIP listener goes
    /// there.
    pub gateway_addresses: Vec<IpAddr>,
    /// Fate of an established TCP flow whose backend left.
    pub tcp_backend_gone: BackendGonePolicy,
    /// Where `spec.externalIPs` may be (`[kubernetes] external_ip_cidrs`);
    /// empty: nowhere.
    pub external_ip_cidrs: Vec<IpPrefix>,
    /// SYN proxy of TCP ports without [`ANNOTATION_SYN_PROXY`]
    /// (`[kubernetes] syn_proxy`).
    pub syn_proxy: SynProxyMode,
    /// Threshold of an annotation's `auto`.
    pub syn_proxy_half_open_threshold: u32,
}

impl ModelConfig {
    /// From a plan with a `[kubernetes]` section (`None` without one).
    pub fn from_plan(plan: &Plan) -> Option<Self> {
        let k = plan.kubernetes.as_ref()?;
        let mut node_addresses: Vec<IpAddr> = plan
            .addresses
            .iter()
            .filter(|a| a.role == AddressRole::Node)
            .map(|a| a.address)
            .collect();
        node_addresses.sort();
        node_addresses.dedup();
        let mut gateway_addresses: Vec<IpAddr> = plan
            .addresses
            .iter()
            .map(|a| a.address)
            .chain(
                plan.ports
                    .iter()
                    .flat_map(|p| p.host_addresses.iter().map(|h| h.address)),
            )
            .collect();
        gateway_addresses.sort();
        gateway_addresses.dedup();
        Some(ModelConfig {
            load_balancer_class: k.load_balancer_class.clone(),
            serve_unclassed: k.serve_unclassed,
            node_addresses,
            gateway_addresses,
            tcp_backend_gone: BackendGonePolicy::Drop,
            external_ip_cidrs: k.external_ip_cidrs.clone(),
            syn_proxy: k.syn_proxy.to_dataplane(),
            syn_proxy_half_open_threshold: k.syn_proxy_half_open_threshold,
        })
    }
}

/// Why a whole Service is not served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IgnoreReason {
    /// No `spec`.
    NoSpec,
    /// `type: ExternalName`: a DNS alias, nothing to forward.
    ExternalName,
    /// `clusterIP: None`: clients reach the pods directly.
    Headless,
    /// `type: ClusterIP` without externalIPs: reachable only inside the
    /// cluster.
    ClusterIpOnly,
    /// A LoadBalancer Service of another class.
    OtherClass { class: String },
    /// A LoadBalancer Service without a class while `serve_unclassed` is
    /// off.
    Unclassed,
    /// A `type` Kubernetes does not define.
    UnknownType { type_: String },
    /// No port can be served; why, per port.
    NoServablePort { skipped: Vec<Skip> },
}

impl fmt::Display for IgnoreReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IgnoreReason::NoSpec => write!(f, "the Service has no spec"),
            IgnoreReason::ExternalName => {
                write!(
                    f,
                    "type ExternalName is a DNS alias; there is nothing to forward"
                )
            }
            IgnoreReason::Headless => write!(
                f,
                "headless (clusterIP: None): clients reach the pods directly"
            ),
            IgnoreReason::ClusterIpOnly => write!(
                f,
                "type ClusterIP without externalIPs is only reachable inside the cluster"
            ),
            IgnoreReason::OtherClass { class } => {
                write!(f, "loadBalancerClass {class:?} is another load balancer's")
            }
            IgnoreReason::Unclassed => write!(
                f,
                "no loadBalancerClass, and kubernetes.serve_unclassed is off"
            ),
            IgnoreReason::UnknownType { type_ } => write!(f, "unknown Service type {type_:?}"),
            IgnoreReason::NoServablePort { skipped } => {
                write!(f, "no port can be served")?;
                for (i, s) in skipped.iter().enumerate() {
                    write!(f, "{} {s}", if i == 0 { ":" } else { ";" })?;
                }
                Ok(())
            }
        }
    }
}

/// A part of a served Service that is left out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skip {
    /// A port whose protocol Portico does not forward (SCTP).
    Protocol { port: String, protocol: String },
    /// A port or nodePort outside 1..=65535.
    BadPort { port: String },
    /// A port with nowhere to listen (a LoadBalancer without an address
    /// yet and without node ports, ...).
    NoListener { port: String },
    /// An externalIP that is not an IP address.
    BadExternalIp { text: String },
    /// An externalIP that is one of the gateway's own addresses.
    ExternalIpIsGatewayAddress { ip: IpAddr },
    /// An externalIP outside `[kubernetes] external_ip_cidrs`.
    ExternalIpNotAllowed { ip: IpAddr },
    /// An externalIP of a family the Service does not have
    /// (`spec.ipFamilies`).
    ExternalIpWrongFamily { ip: IpAddr, families: Vec<Family> },
    /// An [`ANNOTATION_SYN_PROXY`] value not in [`SYN_PROXY_VALUES`]; the
    /// Service's TCP ports get `default` instead.
    BadSynProxy {
        value: String,
        default: SynProxyMode,
    },
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Skip::Protocol { port, protocol } => {
                write!(f, "port {port}: protocol {protocol} is not forwarded")
            }
            Skip::BadPort { port } => write!(f, "port {port}: number out of range"),
            Skip::NoListener { port } => write!(
                f,
                "port {port}: nowhere to listen (no address assigned, no node port, no externalIPs)"
            ),
            Skip::BadExternalIp { text } => {
                write!(f, "externalIP {text:?} is not an IP address")
            }
            Skip::ExternalIpWrongFamily { ip, families } => write!(
                f,
                "externalIP {ip} is {}, but the Service's ipFamilies are [{}]",
                Family::of(*ip),
                families
                    .iter()
                    .map(|f| f.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Skip::ExternalIpIsGatewayAddress { ip } => {
                write!(f, "externalIP {ip} is one of the gateway's own addresses")
            }
            Skip::ExternalIpNotAllowed { ip } => write!(
                f,
                "externalIP {ip} is outside the CIDRs this gateway serves externalIPs from ([kubernetes] external_ip_cidrs); not announced or served"
            ),
            Skip::BadSynProxy { value, default } => write!(
                f,
                "annotation {ANNOTATION_SYN_PROXY}={value:?} is not one of {}; the gateway's default ({}) applies",
                SYN_PROXY_VALUES
                    .iter()
                    .map(|v| format!("{v:?}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                default.to_config()
            ),
        }
    }
}

/// What to do with a Service.
#[derive(Clone, Debug, PartialEq)]
pub enum ServiceOutcome {
    /// Serve these specs (at least one); `skipped` lists what was left out.
    Serve {
        specs: Vec<ServiceSpec>,
        skipped: Vec<Skip>,
    },
    /// Serve nothing.
    Ignored { reason: IgnoreReason },
}

/// Whether a LoadBalancer Service's class is Portico's (or it is unclassed
/// and Portico serves unclassed Services). Other types have no class and
/// pass.
pub fn is_served_class(svc: &Service, cfg: &ModelConfig) -> bool {
    class_verdict(svc, cfg).is_none()
}

/// Whether the Service should hold LoadBalancer addresses: of type
/// LoadBalancer and of a served class. When this turns false (deleted,
/// type or class changed), its addresses are to be released.
pub fn wants_load_balancer_address(svc: &Service, cfg: &ModelConfig) -> bool {
    svc.spec
        .as_ref()
        .is_some_and(|s| s.type_.as_deref() == Some("LoadBalancer"))
        && is_served_class(svc, cfg)
}

fn class_verdict(svc: &Service, cfg: &ModelConfig) -> Option<IgnoreReason> {
    let spec = svc.spec.as_ref()?;
    if spec.type_.as_deref() != Some("LoadBalancer") {
        return None;
    }
    match spec.load_balancer_class.as_deref() {
        Some(class) if class == cfg.load_balancer_class => None,
        Some(class) => Some(IgnoreReason::OtherClass {
            class: class.to_owned(),
        }),
        None if cfg.serve_unclassed => None,
        None => Some(IgnoreReason::Unclassed),
    }
}

/// The specs of a Service. `slices`: its EndpointSlices (others are
/// skipped: a different `kubernetes.io/service-name` or namespace);
/// `vips`: the addresses assigned to it (used for type LoadBalancer only).
pub fn service_specs(
    svc: &Service,
    slices: &[&EndpointSlice],
    vips: &[IpAddr],
    cfg: &ModelConfig,
) -> ServiceOutcome {
    let ignored = |reason| ServiceOutcome::Ignored { reason };
    let Some(spec) = svc.spec.as_ref() else {
        return ignored(IgnoreReason::NoSpec);
    };
    let type_ = spec.type_.as_deref().unwrap_or("ClusterIP");
    if type_ == "ExternalName" {
        return ignored(IgnoreReason::ExternalName);
    }
    if spec.cluster_ip.as_deref() == Some("None") {
        return ignored(IgnoreReason::Headless);
    }
    let mut skipped = Vec::new();
    let (families, _) = service_families(svc);
    let mut external_ips: Vec<IpAddr> = Vec::new();
    for text in spec.external_ips.iter().flatten() {
        match text.trim().parse::<IpAddr>() {
            Ok(ip) if cfg.gateway_addresses.binary_search(&ip).is_ok() => {
                skipped.push(Skip::ExternalIpIsGatewayAddress { ip });
            }
            Ok(ip) if !cfg.external_ip_cidrs.iter().any(|c| c.contains(ip)) => {
                skipped.push(Skip::ExternalIpNotAllowed { ip });
            }
            Ok(ip) if !families.contains(&Family::of(ip)) => {
                skipped.push(Skip::ExternalIpWrongFamily {
                    ip,
                    families: families.clone(),
                });
            }
            Ok(ip) => external_ips.push(ip),
            Err(_) => skipped.push(Skip::BadExternalIp { text: text.clone() }),
        }
    }
    external_ips.sort();
    external_ips.dedup();
    let (lb, node_ports) = match type_ {
        "LoadBalancer" => {
            if let Some(reason) = class_verdict(svc, cfg) {
                return ignored(reason);
            }
            (true, spec.allocate_load_balancer_node_ports != Some(false))
        }
        "NodePort" => (false, true),
        "ClusterIP" if external_ips.is_empty() && skipped.is_empty() => {
            return ignored(IgnoreReason::ClusterIpOnly);
        }
        "ClusterIP" => (false, false),
        other => {
            return ignored(IgnoreReason::UnknownType {
                type_: other.to_owned(),
            });
        }
    };
    let syn_proxy = syn_proxy_of(svc, cfg, &mut skipped);
    let mut vips: Vec<IpAddr> = if lb { vips.to_vec() } else { Vec::new() };
    vips.sort();
    vips.dedup();

    let namespace = svc.metadata.namespace.as_deref().unwrap_or("default");
    let name = svc.metadata.name.as_deref().unwrap_or_default();
    let slices: Vec<&EndpointSlice> = slices
        .iter()
        .copied()
        .filter(|s| {
            s.metadata.namespace.as_deref().unwrap_or("default") == namespace
                && s.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(LABEL_SERVICE_NAME))
                    .is_some_and(|n| n == name)
                && Family::parse(&s.address_type).is_some_and(|f| families.contains(&f))
        })
        .collect();
    let snat = spec.external_traffic_policy.as_deref() != Some("Local");
    let affinity_timeout_ms = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
        let s = spec
            .session_affinity_config
            .as_ref()
            .and_then(|c| c.client_ip.as_ref())
            .and_then(|c| c.timeout_seconds)
            .unwrap_or(DEFAULT_AFFINITY_TIMEOUT_S)
            .clamp(1, MAX_AFFINITY_TIMEOUT_S);
        u64::from(s.unsigned_abs()) * 1000
    });

    let mut specs = Vec::new();
    for port in spec.ports.iter().flatten() {
        let label = port_label(port);
        let protocol = port.protocol.as_deref().unwrap_or("TCP");
        let proto = match protocol {
            "TCP" => Proto::Tcp,
            "UDP" => Proto::Udp,
            other => {
                skipped.push(Skip::Protocol {
                    port: label,
                    protocol: other.to_owned(),
                });
                continue;
            }
        };
        let Some(number) = u16::try_from(port.port).ok().filter(|p| *p != 0) else {
            skipped.push(Skip::BadPort { port: label });
            continue;
        };
        let node_port = if node_ports {
            match port.node_port {
                None | Some(0) => None,
                Some(np) => match u16::try_from(np) {
                    Ok(np) => Some(np),
                    Err(_) => {
                        skipped.push(Skip::BadPort { port: label });
                        continue;
                    }
                },
            }
        } else {
            None
        };
        let port_name = port
            .name
            .as_deref()
            .filter(|n| !n.is_empty())
            .map_or_else(|| number.to_string(), str::to_owned);
        let mut any_listener = false;
        for &family in &families {
            let of_family = |ip: &&IpAddr| Family::of(**ip) == family;
            let mut listeners: Vec<(IpAddr, u16, ListenerKind)> = Vec::new();
            listeners.extend(
                vips.iter()
                    .filter(of_family)
                    .map(|&ip| (ip, number, ListenerKind::Vip)),
            );
            listeners.extend(
                external_ips
                    .iter()
                    .filter(of_family)
                    .map(|&ip| (ip, number, ListenerKind::ExternalIp)),
            );
            if let Some(np) = node_port {
                listeners.extend(
                    cfg.node_addresses
                        .iter()
                        .filter(of_family)
                        .map(|&ip| (ip, np, ListenerKind::NodePort)),
                );
            }
            if listeners.is_empty() {
                continue;
            }
            any_listener = true;
            let syn_proxy = match proto {
                Proto::Tcp => syn_proxy,
                Proto::Udp | Proto::Icmp => SynProxyMode::Off,
            };
            specs.push(ServiceSpec {
                name: format!(
                    "{namespace}/{name}:{port_name}/{}{}",
                    if proto == Proto::Tcp { "tcp" } else { "udp" },
                    if family == Family::V6 { "/ipv6" } else { "" }
                ),
                proto,
                listeners,
                endpoints: endpoints(port, protocol, &slices, family),
                snat,
                affinity_timeout_ms,
                tcp_backend_gone: if proto == Proto::Tcp {
                    cfg.tcp_backend_gone
                } else {
                    BackendGonePolicy::Drop
                },
                syn_proxy,
                // Not a Kubernetes setting (yet): a static `[[service]]` one.
                tcp_pickup: false,
            });
        }
        if !any_listener {
            skipped.push(Skip::NoListener { port: label });
        }
    }
    if specs.is_empty() {
        return ignored(IgnoreReason::NoServablePort { skipped });
    }
    ServiceOutcome::Serve { specs, skipped }
}

/// The SYN proxy of the Service's TCP ports: its annotation's, else the
/// gateway's default (a value not understood is reported in `skipped`).
fn syn_proxy_of(svc: &Service, cfg: &ModelConfig, skipped: &mut Vec<Skip>) -> SynProxyMode {
    let Some(value) = svc
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_SYN_PROXY))
    else {
        return cfg.syn_proxy;
    };
    match value.trim() {
        "off" => SynProxyMode::Off,
        "on" => SynProxyMode::On,
        "auto" => SynProxyMode::Auto {
            half_open_threshold: cfg.syn_proxy_half_open_threshold,
        },
        _ => {
            skipped.push(Skip::BadSynProxy {
                value: value.clone(),
                default: cfg.syn_proxy,
            });
            cfg.syn_proxy
        }
    }
}

/// `"name (TCP/80)"` or `"TCP/80"`.
fn port_label(port: &ServicePort) -> String {
    let protocol = port.protocol.as_deref().unwrap_or("TCP");
    match port.name.as_deref().filter(|n| !n.is_empty()) {
        Some(n) => format!("{n:?} ({protocol}/{})", port.port),
        None => format!("{protocol}/{}", port.port),
    }
}

/// Rank of a condition: lower is better.
fn rank(c: EndpointCondition) -> u8 {
    match c {
        EndpointCondition::Ready => 0,
        EndpointCondition::ServingTerminating => 1,
        EndpointCondition::Draining => 2,
    }
}

fn condition(e: &Endpoint) -> EndpointCondition {
    let c = e.conditions.as_ref();
    let ready = c.and_then(|c| c.ready).unwrap_or(true);
    let serving = c.and_then(|c| c.serving).unwrap_or(true);
    let terminating = c.and_then(|c| c.terminating).unwrap_or(false);
    if ready {
        EndpointCondition::Ready
    } else if serving && terminating {
        EndpointCondition::ServingTerminating
    } else {
        EndpointCondition::Draining
    }
}

/// The endpoints of one Service port in the slices of `family`, sorted by
/// address.
fn endpoints(
    port: &ServicePort,
    protocol: &str,
    slices: &[&EndpointSlice],
    family: Family,
) -> Vec<EndpointSpec> {
    let wanted_name = port.name.as_deref().unwrap_or("");
    let mut found: Vec<(SocketAddr, u8)> = Vec::new();
    for slice in slices
        .iter()
        .filter(|s| Family::parse(&s.address_type) == Some(family))
    {
        let Some(slice_port) = slice.ports.iter().flatten().find(|p| {
            p.name.as_deref().unwrap_or("") == wanted_name
                && p.protocol.as_deref().unwrap_or("TCP") == protocol
        }) else {
            continue;
        };
        let number = match (slice_port.port, &port.target_port) {
            (Some(n), _) => n,
            (None, Some(IntOrString::Int(n))) => *n,
            (None, None) => port.port,
            (None, Some(IntOrString::String(_))) => continue,
        };
        let Some(number) = u16::try_from(number).ok().filter(|p| *p != 0) else {
            continue;
        };
        found.extend(slice.endpoints.iter().flatten().filter_map(|e| {
            let ip = e.addresses.first()?.parse::<IpAddr>().ok()?;
            (Family::of(ip) == family).then(|| (SocketAddr::new(ip, number), rank(condition(e))))
        }));
    }
    // By address, best condition first; then one entry per address.
    found.sort_unstable();
    found.dedup_by_key(|(addr, _)| *addr);
    found
        .into_iter()
        .map(|(addr, rank)| EndpointSpec {
            addr,
            weight: 1,
            condition: match rank {
                0 => EndpointCondition::Ready,
                1 => EndpointCondition::ServingTerminating,
                _ => EndpointCondition::Draining,
            },
        })
        .collect()
}

#[cfg(test)]
#[path = "service_tests.rs"]
mod tests;
