//! `portico simulate --config FILE 'tcp 198.51.100.7:40000 -> 203.0.113.10:80'`:
//! where would this packet go, and why.
//!
//! Nothing here re-implements the dataplane's decisions. The configuration
//! is mapped onto a snapshot exactly as `portico run` maps it
//! ([`snapshot_spec`], [`worker_config`], [`SnapshotBuilder`]); a real
//! [`Pipeline`] of the worker that owns the flow (the dataplane's own
//! [`Steering::owner`]) processes one crafted first packet (a TCP SYN or a
//! UDP datagram, built by [`dataplane::wire::build`]) received on the
//! VIP/outside port; the report is read back from what that pipeline did:
//! the packet's verdict, the flow it created in conntrack (whose reply key
//! names the backend and the SNAT tuple), and the snapshot's listener,
//! service and Maglev table.
//!
//! Invariants:
//! * the backend reported is the one in the created conntrack flow, i.e.
//!   the one the dataplane selected; the Maglev slot shown is
//!   `hash % table size` of the service's active set, with the flow hash
//!   (or, for ClientIP affinity, the client-address hash) the selection used;
//! * a packet held for ARP (`AwaitNeighbour`) is a forward, not a failure:
//!   next hops without a static neighbour are resolved at run time;
//! * the simulation starts from empty state (no existing flows, affinity
//!   pins or used SNAT ports): it answers for a new connection.
//!
//! `--live` runs the same [`simulate_in`] inside the running gateway's admin
//! thread, against the snapshot in force, with the worker configuration the
//! gateway started with ([`SimContext`]); before that, the owning worker is
//! asked (through its [`dataplane::inspect`] mailbox, see
//! `admin::live`) for a tracked flow with the packet's tuple and for the
//! client's ClientIP affinity pin, which is seeded into the simulated
//! pipeline so the choice is the one the worker would make. What the live
//! simulation cannot know in advance is the SNAT port: the dataplane draws it
//! at random from the owning worker's slice.

use crate::mirror::ToConfig;
use crate::source::static_file::{PortFacts, snapshot_spec, worker_config};
use dataplane::driver::Frame;
use dataplane::flow::{FlowKey, Proto, stable_addr_hash};
use dataplane::neighbour::NeighbourTable;
use dataplane::packet::{PacketMeta, PortId, Verdict};
use dataplane::snapshot::{BackendId, BuildError, EndpointCondition, Snapshot, SnapshotBuilder};
use dataplane::stage::{Pipeline, PipelineConfig, PipelineError, Steering};
use dataplane::wire::build;
use dataplane::wire::ethernet::MacAddr;
use dataplane::wire::tcp::flags as tcp_flags;
use nic_config::Plan;
use serde::Serialize;
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

/// The MAC the simulated client's frame comes from (any unicast MAC does).
const CLIENT_MAC: [u8; 6] = [0x02, 0x00, 0x5e, 0x00, 0x00, 0x01];
/// Clock of the simulated packet, in milliseconds (a fresh pipeline).
const NOW_MS: u64 = 1_000;

/// Why a simulation could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    #[error(
        "bad flow spec {spec:?}: {reason} (expected e.g. 'tcp 198.51.100.7:40000 -> 203.0.113.10:80')"
    )]
    BadSpec { spec: String, reason: String },
    #[error("{path}: invalid configuration: {problems}")]
    Config { path: String, problems: String },
    #[error("snapshot: {0}")]
    Snapshot(#[from] BuildError),
    #[error("pipeline: {0}")]
    Pipeline(#[from] PipelineError),
    #[error("no worker {worker} in the configuration")]
    NoWorker { worker: u8 },
}

/// A connection's first packet: `tcp A:P -> B:Q` or `udp A:P -> B:Q`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowSpec {
    pub proto: Proto,
    pub client: SocketAddrV4,
    pub dest: SocketAddrV4,
}

impl FlowSpec {
    /// The flow's directional 5-tuple (client to destination).
    pub fn key(&self) -> FlowKey {
        FlowKey::new(
            self.proto,
            *self.client.ip(),
            self.client.port(),
            *self.dest.ip(),
            self.dest.port(),
        )
    }
}

impl fmt::Display for FlowSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} -> {}", self.proto.name(), self.client, self.dest)
    }
}

impl FromStr for FlowSpec {
    type Err = SimulateError;

    /// Exactly four words: `tcp|udp`, `A.B.C.D:PORT`, `->`, `A.B.C.D:PORT`;
    /// ports 1..=65535.
    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let bad = |reason: String| SimulateError::BadSpec {
            spec: spec.to_owned(),
            reason,
        };
        let words: Vec<&str> = spec.split_whitespace().collect();
        let [proto, client, arrow, dest] = words[..] else {
            return Err(bad(format!(
                "expected 4 words (protocol, source, '->', destination), found {}",
                words.len()
            )));
        };
        let proto = match proto {
            "tcp" => Proto::Tcp,
            "udp" => Proto::Udp,
            other => return Err(bad(format!("protocol {other:?} is not tcp or udp"))),
        };
        if arrow != "->" {
            return Err(bad(format!("expected '->', found {arrow:?}")));
        }
        let endpoint = |word: &str, what: &str| -> Result<SocketAddrV4, SimulateError> {
            let addr = SocketAddrV4::from_str(word).map_err(|_| {
                bad(format!(
                    "{what} {word:?} is not an IPv4 address:port (like 198.51.100.7:40000)"
                ))
            })?;
            if addr.port() == 0 {
                return Err(bad(format!("{what} {word:?} has port 0")));
            }
            Ok(addr)
        };
        Ok(FlowSpec {
            proto,
            client: endpoint(client, "source")?,
            dest: endpoint(dest, "destination")?,
        })
    }
}

/// The listener a packet matched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ListenerReport {
    /// `vip`, `external_ip` or `node_port`.
    pub kind: &'static str,
    pub address: SocketAddrV4,
}

/// The session-affinity decision of the service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum AffinityReport {
    /// Maglev on the 5-tuple hash.
    None,
    /// Maglev on the client address; the choice is pinned for `timeout_ms`.
    ClientIp { timeout_ms: u64 },
}

/// The Maglev lookup of the service's active backend set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MaglevReport {
    /// The hash the lookup used (flow hash, or client-address hash).
    pub hash: u64,
    pub table_size: u32,
    /// `hash % table_size`.
    pub slot: u32,
    /// The backend in that slot.
    pub backend: Option<SocketAddrV4>,
    /// Whether the active set is the ready endpoints (else serving-terminating).
    pub ready_set: bool,
}

/// The backend the flow was given.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BackendReport {
    pub address: SocketAddrV4,
    pub weight: u32,
    /// `ready`, `serving_terminating` or `draining`.
    pub condition: &'static str,
}

/// Where the translated packet goes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ForwardReport {
    /// Name of the port it leaves by.
    pub port: String,
    /// Index of that port.
    #[serde(skip)]
    pub port_index: PortId,
    /// The next hop whose MAC the frame is sent to.
    pub next_hop: Option<Ipv4Addr>,
    /// True when the next hop's MAC is a static neighbour of the
    /// configuration; false when ARP resolves it at run time.
    pub next_hop_static: bool,
}

/// Everything the simulation found out about one packet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Outcome {
    /// The simulated packet, as given.
    pub flow: String,
    pub in_port: String,
    /// The worker owning the flow, of `workers`.
    pub worker: u8,
    pub workers: u8,
    pub listener: Option<ListenerReport>,
    pub service: Option<String>,
    pub affinity: Option<AffinityReport>,
    pub maglev: Option<MaglevReport>,
    pub backend: Option<BackendReport>,
    /// The gateway-side address of the translated flow (when the service
    /// uses SNAT).
    pub snat: Option<SocketAddrV4>,
    /// The packet's 5-tuple after translation.
    pub translated: Option<String>,
    /// `forward`, `reply`, `drop`, `consumed` or `handoff`.
    pub verdict: &'static str,
    pub forward: Option<ForwardReport>,
    /// The stable drop-reason name, when dropped.
    pub drop_reason: Option<&'static str>,
}

/// A one-frame buffer the pipeline processes in place.
struct SimFrame(Vec<u8>);

impl Frame for SimFrame {
    fn data(&self) -> &[u8] {
        &self.0
    }
    fn data_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
    fn truncate(&mut self, len: usize) {
        self.0.truncate(len);
    }
}

/// Load and validate a configuration file, with the problems on one line
/// (a file with `[[instance]]`s: every instance checked, the first one's
/// addresses simulated).
pub fn load_plan(path: &Path) -> Result<Plan, SimulateError> {
    nic_config::load_instance(path, nic_config::InstanceChoice::Every).map_err(|e| {
        SimulateError::Config {
            path: path.display().to_string(),
            problems: e
                .to_string()
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join("; "),
        }
    })
}

/// The snapshot `portico run` would build from `plan`. Port MACs the file
/// does not give are placeholders (locally administered), as the simulation
/// reads no interfaces.
pub fn snapshot(plan: &Plan) -> Result<Snapshot, SimulateError> {
    let facts: Vec<PortFacts> = (0..plan.ports.len())
        .map(|i| PortFacts {
            mac: [0x02, 0, 0, 0, 0, (i as u8).wrapping_add(1)],
            mtu: 1500,
        })
        .collect();
    Ok(SnapshotBuilder::new().build(&snapshot_spec(plan, &facts))?)
}

/// The worker of `plan` owning `key`'s flow, by the dataplane's steering.
pub fn owner(plan: &Plan, snap: &Snapshot, key: &FlowKey) -> u8 {
    SimContext::from_plan(plan).owner(snap, key)
}

/// What a simulation needs besides the snapshot: the pipeline settings of
/// every worker (as `portico run` builds them), the port packets arrive on,
/// the ports' names. Restart-only settings, so a running gateway keeps the
/// one it started with.
#[derive(Clone, Debug)]
pub struct SimContext {
    /// One per worker, with tables shrunk to a few entries: a simulation
    /// starts from empty tables and inserts one flow.
    pub workers: Vec<PipelineConfig>,
    pub in_port: PortId,
    pub port_names: Vec<String>,
}

/// Table sizes of a simulated pipeline (it tracks one flow).
const SIM_TABLE_ENTRIES: u32 = 64;

impl SimContext {
    pub fn from_plan(plan: &Plan) -> Self {
        let workers = plan.dataplane.workers.max(1);
        SimContext {
            workers: (0..workers)
                .map(|w| {
                    let mut c = worker_config(plan, w).pipeline;
                    c.conntrack.capacity = SIM_TABLE_ENTRIES;
                    c.snat.quarantine_capacity = SIM_TABLE_ENTRIES as usize;
                    c.affinity_capacity = SIM_TABLE_ENTRIES;
                    c
                })
                .collect(),
            in_port: plan.vip_port as PortId,
            port_names: plan.ports.iter().map(|p| p.name.clone()).collect(),
        }
    }

    /// The worker owning `key`'s flow, by the dataplane's steering.
    pub fn owner(&self, snap: &Snapshot, key: &FlowKey) -> u8 {
        let Some(config) = self.workers.first() else {
            return 0;
        };
        Steering {
            worker: 0,
            workers: config.workers.max(1),
            snat_ports: config.snat.port_range.clone(),
        }
        .owner(key, snap)
    }

    /// The SNAT port slice of `worker`.
    pub fn snat_slice(&self, worker: u8) -> Option<std::ops::RangeInclusive<u16>> {
        let c = self.workers.get(worker as usize)?;
        Some(dataplane::snat::port_slice(
            c.snat.port_range.clone(),
            worker as usize,
            c.workers.max(1) as usize,
        ))
    }
}

/// Simulate the first packet of `flow` arriving on the plan's VIP port.
pub fn simulate(plan: &Plan, flow: &FlowSpec) -> Result<Outcome, SimulateError> {
    simulate_in(&SimContext::from_plan(plan), &snapshot(plan)?, flow, None)
}

/// Simulate the first packet of `flow` against `snap`. `pinned` is a live
/// ClientIP affinity pin of the client (its backend id), seeded into the
/// simulated pipeline's affinity table first.
pub fn simulate_in(
    ctx: &SimContext,
    snap: &Snapshot,
    flow: &FlowSpec,
    pinned: Option<BackendId>,
) -> Result<Outcome, SimulateError> {
    let key = flow.key();
    let worker = ctx.owner(snap, &key);
    let config = ctx
        .workers
        .get(worker as usize)
        .cloned()
        .ok_or(SimulateError::NoWorker { worker })?;
    let workers = config.workers.max(1);
    let neighbours = Arc::new(NeighbourTable::default());
    // As the worker does when a snapshot arrives.
    for &(port, addr, mac) in &snap.static_neighbours {
        neighbours.set_static(port, addr, mac);
    }
    let mut pipeline = Pipeline::new(&config, neighbours)?;
    if let (Some(backend), Some(service)) = (
        pinned,
        snap.listener(key.proto, key.dst_ip, key.dst_port)
            .and_then(|l| snap.service(l.service)),
    ) && let Some(timeout_ms) = service.affinity_timeout_ms
    {
        pipeline
            .affinity_mut()
            .upsert(service.id, key.src_ip, backend, timeout_ms, NOW_MS);
    }

    let in_port = ctx.in_port;
    let gateway_mac = snap.ports.get(in_port as usize).map_or([0; 6], |p| p.mac);
    let bytes = match flow.proto {
        Proto::Udp => build::eth_ipv4_udp(
            MacAddr(CLIENT_MAC),
            MacAddr(gateway_mac),
            *flow.client.ip(),
            flow.client.port(),
            *flow.dest.ip(),
            flow.dest.port(),
            b"portico simulate",
        ),
        // A connection's first TCP segment.
        _ => build::eth_ipv4_tcp(
            MacAddr(CLIENT_MAC),
            MacAddr(gateway_mac),
            *flow.client.ip(),
            flow.client.port(),
            *flow.dest.ip(),
            flow.dest.port(),
            tcp_flags::SYN,
            0x5eed_0001,
            0,
            &[],
        ),
    };
    let mut frames = [SimFrame(bytes)];
    pipeline.process(snap, in_port, &mut frames, NOW_MS, true);
    // Always present (the batch has one frame); a missing verdict would be
    // reported as the `internal` drop below.
    let meta = pipeline
        .metas()
        .first()
        .copied()
        .unwrap_or(PacketMeta::empty(in_port));

    let port_name = |p: PortId| {
        ctx.port_names
            .get(p as usize)
            .map_or_else(|| format!("port {p}"), Clone::clone)
    };
    let mut outcome = Outcome {
        flow: flow.to_string(),
        in_port: port_name(in_port),
        worker,
        workers,
        listener: None,
        service: None,
        affinity: None,
        maglev: None,
        backend: None,
        snat: None,
        translated: None,
        verdict: "drop",
        forward: None,
        drop_reason: None,
    };

    let listener = snap.listener(key.proto, key.dst_ip, key.dst_port);
    let service = listener.and_then(|l| snap.service(l.service));
    outcome.listener = listener.map(|l| ListenerReport {
        kind: l.kind.to_config().name(),
        address: flow.dest,
    });
    if let Some(service) = service {
        outcome.service = Some(service.name.to_string());
        outcome.affinity = Some(match service.affinity_timeout_ms {
            Some(timeout_ms) => AffinityReport::ClientIp { timeout_ms },
            None => AffinityReport::None,
        });
        if let Some(set) = service.active_set() {
            let hash = match service.affinity_timeout_ms {
                Some(_) => stable_addr_hash(key.src_ip),
                // Maglev's public hash (meta.hash is the table hash).
                None => key.stable_hash(),
            };
            let table_size = set.table.size();
            let slot = (hash % u64::from(table_size.max(1))) as u32;
            let backend = set
                .table
                .slots()
                .get(slot as usize)
                .and_then(|&i| set.backends.get(i as usize))
                .and_then(|&id| snap.backend(id))
                .and_then(|b| match b.addr {
                    SocketAddr::V4(a) => Some(a),
                    SocketAddr::V6(_) => None,
                });
            outcome.maglev = Some(MaglevReport {
                hash,
                table_size,
                slot,
                backend,
                ready_set: service.ready.is_some(),
            });
        }
    }

    // The flow the pipeline created: its reply key is the backend's view.
    if let Some((id, _)) = pipeline.conntrack().lookup(&key, meta.hash) {
        let created = pipeline.conntrack().flow(id);
        let reply = created.reply();
        let backend_addr = SocketAddrV4::new(reply.src_ip, reply.src_port);
        let backend = snap.backends.iter().flatten().find(|b| {
            b.addr == SocketAddr::V4(backend_addr) && Some(b.service) == listener.map(|l| l.service)
        });
        outcome.backend = Some(BackendReport {
            address: backend_addr,
            weight: backend.map_or(0, |b| b.weight),
            condition: match backend.map(|b| b.condition) {
                Some(EndpointCondition::Ready) | None => "ready",
                Some(EndpointCondition::ServingTerminating) => "serving_terminating",
                Some(EndpointCondition::Draining) => "draining",
            },
        });
        if created.snat() {
            outcome.snat = Some(SocketAddrV4::new(reply.dst_ip, reply.dst_port));
        }
        let translated = reply.reversed();
        outcome.translated = Some(format!(
            "{} {}:{} -> {}:{}",
            translated.proto.name(),
            translated.src_ip,
            translated.src_port,
            translated.dst_ip,
            translated.dst_port
        ));
    }

    let static_next_hop = |port: PortId, addr: Ipv4Addr| {
        snap.static_neighbours
            .iter()
            .any(|&(p, a, _)| p == port && a == addr)
    };
    match meta.verdict {
        Verdict::Forward(port) => {
            let next_hop = outcome
                .backend
                .as_ref()
                .and_then(|b| {
                    snap.backends
                        .iter()
                        .flatten()
                        .find(|x| x.addr == SocketAddr::V4(b.address))
                })
                .and_then(|b| b.next_hop)
                .and_then(|n| n.v4());
            outcome.verdict = "forward";
            outcome.forward = Some(ForwardReport {
                port: port_name(port),
                port_index: port,
                next_hop,
                next_hop_static: next_hop.is_some_and(|a| static_next_hop(port, a)),
            });
        }
        Verdict::AwaitNeighbour(port) => {
            // (An IPv6 next hop is not reported: the report is IPv4 only.)
            let next_hop = match pipeline.awaited_neighbour(0) {
                std::net::IpAddr::V4(a) => Some(a),
                std::net::IpAddr::V6(_) => None,
            };
            outcome.verdict = "forward";
            outcome.forward = Some(ForwardReport {
                port: port_name(port),
                port_index: port,
                next_hop,
                next_hop_static: false,
            });
        }
        Verdict::Drop(reason) => {
            outcome.verdict = "drop";
            outcome.drop_reason = Some(reason.name());
        }
        Verdict::Reply => outcome.verdict = "reply",
        Verdict::Consumed => outcome.verdict = "consumed",
        Verdict::Host => outcome.verdict = "host",
        Verdict::Handoff(_) => outcome.verdict = "handoff",
        Verdict::Pending => {
            outcome.verdict = "drop";
            outcome.drop_reason = Some("internal");
        }
    }
    Ok(outcome)
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "packet     {} (in on {}, worker {} of {})",
            self.flow, self.in_port, self.worker, self.workers
        )?;
        match &self.listener {
            Some(l) => writeln!(f, "listener   {} {}", l.address, l.kind)?,
            None => writeln!(f, "listener   none")?,
        }
        if let Some(s) = &self.service {
            writeln!(f, "service    {s}")?;
        }
        match &self.affinity {
            Some(AffinityReport::None) => writeln!(f, "affinity   none (Maglev on the 5-tuple)")?,
            Some(AffinityReport::ClientIp { timeout_ms }) => writeln!(
                f,
                "affinity   client_ip, timeout {timeout_ms} ms (Maglev on the client address)"
            )?,
            None => {}
        }
        if let Some(m) = &self.maglev {
            write!(
                f,
                "maglev     hash {:#018x}, slot {} of {} ({} set)",
                m.hash,
                m.slot,
                m.table_size,
                if m.ready_set {
                    "ready"
                } else {
                    "serving_terminating"
                }
            )?;
            match m.backend {
                Some(b) => writeln!(f, " -> {b}")?,
                None => writeln!(f)?,
            }
        }
        if let Some(b) = &self.backend {
            writeln!(
                f,
                "backend    {} ({}, weight {})",
                b.address, b.condition, b.weight
            )?;
        }
        match self.snat {
            Some(s) => writeln!(f, "snat       {s}")?,
            None if self.backend.is_some() => {
                writeln!(f, "snat       none (client address preserved)")?
            }
            None => {}
        }
        if let Some(t) = &self.translated {
            writeln!(f, "rewritten  {t}")?;
        }
        match (&self.forward, self.drop_reason) {
            (Some(fw), _) => match fw.next_hop {
                Some(hop) if fw.next_hop_static => writeln!(
                    f,
                    "verdict    forward to {} (next hop {hop}, static neighbour)",
                    fw.port
                ),
                Some(hop) => writeln!(
                    f,
                    "verdict    forward to {} (next hop {hop} resolved by ARP at run time)",
                    fw.port
                ),
                None => writeln!(f, "verdict    forward to {}", fw.port),
            },
            (None, Some(reason)) => writeln!(f, "verdict    drop: {reason}"),
            (None, None) => writeln!(f, "verdict    {}", self.verdict),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_strictly() {
        let ok: FlowSpec = "tcp 198.51.100.7:40000 -> 203.0.113.10:80".parse().unwrap();
        assert_eq!(ok.proto, Proto::Tcp);
        assert_eq!(ok.client, "198.51.100.7:40000".parse().unwrap());
        assert_eq!(ok.dest, "203.0.113.10:80".parse().unwrap());
        assert_eq!(ok.to_string(), "tcp 198.51.100.7:40000 -> 203.0.113.10:80");
        let udp: FlowSpec = "  udp 1.2.3.4:5   ->   5.6.7.8:53 ".parse().unwrap();
        assert_eq!(udp.proto, Proto::Udp);
        for bad in [
            "",
            "tcp 1.2.3.4:5 -> 5.6.7.8",
            "tcp 1.2.3.4:5 5.6.7.8:80",
            "icmp 1.2.3.4:5 -> 5.6.7.8:80",
            "TCP 1.2.3.4:5 -> 5.6.7.8:80",
            "tcp 1.2.3.4:5 => 5.6.7.8:80",
            "tcp 1.2.3.4:0 -> 5.6.7.8:80",
            "tcp 1.2.3.4:5 -> 5.6.7.8:65536",
            "tcp 1.2.3.4:5->5.6.7.8:80",
            "tcp 1.2.3:5 -> 5.6.7.8:80",
            "tcp [::1]:5 -> 5.6.7.8:80",
            "tcp 1.2.3.4:5 -> 5.6.7.8:80 extra",
        ] {
            let err = bad.parse::<FlowSpec>().unwrap_err();
            assert!(matches!(err, SimulateError::BadSpec { .. }), "{bad:?}");
            assert_eq!(err.to_string().lines().count(), 1, "{bad:?}");
        }
    }
}
