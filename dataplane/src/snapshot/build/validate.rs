//! What a spec may not be: the [`Problem`]s a build reports (all at once,
//! in a [`BuildError`]) and the checks of the static part (ports, routes,
//! owned addresses). The per-service checks (listeners, endpoints, Maglev)
//! run while the batch is prepared (`prepare.rs`, `tables.rs`).

use super::SnapshotSpec;
use crate::flow::Proto;
use crate::maglev::MaglevError;
use crate::packet::PortId;
use hashbrown::HashMap;
use std::net::{IpAddr, SocketAddr};

/// One thing wrong with a spec. A build reports all of them at once.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("port {port}: {what} refers to a port that does not exist")]
    NoSuchPort { port: PortId, what: String },
    #[error("address {addr} is owned on two ports ({first} and {second})")]
    AddressOnTwoPorts {
        addr: IpAddr,
        first: PortId,
        second: PortId,
    },
    #[error("service {0:?} is defined twice")]
    DuplicateService(String),
    #[error(
        "service {service:?}: listener {proto} {addr}:{port} is already used by service {other:?}"
    )]
    DuplicateListener {
        service: String,
        other: String,
        proto: Proto,
        addr: IpAddr,
        port: u16,
    },
    #[error("service {service:?}: NodePort listener on {addr}, which is not a node address")]
    NodePortOffNode { service: String, addr: IpAddr },
    #[error(
        "service {service:?}: listener on {addr}, which is a node or SNAT address of the gateway"
    )]
    VipIsGatewayAddress { service: String, addr: IpAddr },
    #[error("service {service:?}: endpoint {addr} is listed twice")]
    DuplicateEndpoint { service: String, addr: SocketAddr },
    #[error("service {service:?}: {source}")]
    Maglev {
        service: String,
        source: MaglevError,
    },
    #[error("route {dest}/{prefix_len}: prefix length above {max}")]
    BadPrefix {
        dest: IpAddr,
        prefix_len: u8,
        max: u8,
    },
    #[error("route {dest}/{prefix_len}: gateway {via} is of the other address family")]
    RouteMixesFamilies {
        dest: IpAddr,
        prefix_len: u8,
        via: IpAddr,
    },
    #[error(
        "service {service:?}: listeners and endpoints mix IPv4 and IPv6 (a service is single-family: one service per family, no NAT46/64)"
    )]
    MixedFamilies { service: String },
    #[error("an incremental update needs a successful full build first")]
    NoBaseSpec,
}

/// A spec that cannot be built, with every problem found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid snapshot spec: {}", .problems.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("; "))]
pub struct BuildError {
    pub problems: Vec<Problem>,
}

/// Every problem of the static part of `spec` (no services), added to
/// `problems`.
pub(super) fn validate_static(spec: &SnapshotSpec, problems: &mut Vec<Problem>) {
    let ports = spec.ports.len();
    let mut check_port = |port: PortId, what: String| {
        if port as usize >= ports {
            problems.push(Problem::NoSuchPort { port, what });
        }
    };
    check_port(spec.vip_port, "vip_port".to_owned());
    for &(addr, port, _) in &spec.addresses {
        check_port(port, format!("address {addr}"));
    }
    for r in &spec.routes {
        check_port(r.port, format!("route {}/{}", r.dest, r.prefix_len));
    }
    for r in &spec.routes {
        let max = r.max_prefix_len();
        if r.prefix_len > max {
            problems.push(Problem::BadPrefix {
                dest: r.dest,
                prefix_len: r.prefix_len,
                max,
            });
        }
        if let Some(via) = r.via
            && via.is_ipv4() != r.dest.is_ipv4()
        {
            problems.push(Problem::RouteMixesFamilies {
                dest: r.dest,
                prefix_len: r.prefix_len,
                via,
            });
        }
    }
    let mut seen: HashMap<IpAddr, PortId> = HashMap::new();
    for &(addr, port, _) in &spec.addresses {
        if let Some(&first) = seen.get(&addr)
            && first != port
        {
            problems.push(Problem::AddressOnTwoPorts {
                addr,
                first,
                second: port,
            });
        }
        seen.insert(addr, port);
    }
}
