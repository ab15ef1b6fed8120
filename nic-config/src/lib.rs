//! Portico's configuration file (`portico.toml`) and its validated [`Plan`].
//!
//! [`parse`] (or [`load`] for a file) reads the TOML text into the schema of
//! [`schema`] — every table rejects unknown keys — and [`validate()`]s it into
//! a [`Plan`]: ports with their resolved addresses, the VIP port, connected
//! and static routes resolved to ports, static neighbours, and services with
//! their listeners and backends, the Kubernetes source's settings and the
//! LoadBalancer address pools, and the BGP peers with what is announced to
//! them, with every duration in milliseconds.
//!
//! `[bgp]` is portico-bgp's `BgpConfig`, embedded unchanged: that crate owns
//! the types and their own checks; [`validate()`] reports its problems with
//! the rest of the file's and adds the checks that need the rest of the
//! file (see [`plan::BgpPlan`]).
//!
//! Errors come in two kinds ([`ConfigError`]):
//! * the text is not TOML, or does not have the schema's shape (unknown key,
//!   wrong type, unknown enum value): the first such error, with its line,
//!   column and key path;
//! * the file is well-formed but wrong: [`ConfigError::Invalid`] lists every
//!   [`Problem`] at once, each with its key path and reason.
//!
//! The plan uses plain types (std::net, this crate's enums); the control
//! plane maps it to the dataplane's types, in one place (`portico::mirror`,
//! which also says which side owns each concept both define). This crate
//! does not depend on the dataplane; where the dataplane has limits (batch
//! size, Maglev table size, conntrack capacity), they are restated in
//! [`validate::limits`] and checked here, so a plan always builds; the
//! control plane's tests assert the restated values equal the dataplane's.
//!
//! A running gateway applies some of a plan live and needs a restart for
//! the rest: [`Plan::split`] ([`restart`]) cuts a plan into the two parts.
//!
//! ```
//! let plan = nic_config::parse(r#"
//!     [[port]]
//!     name = "lan"
//!     driver = "afpacket"
//!     interface = "eth0"
//!     role = "both"
//!     node_addresses = ["192.0.2.1/24"]
//!     snat_addresses = ["192.0.2.2/24"]
//!
//!     [[service]]
//!     name = "web"
//!     protocol = "tcp"
//!     vip = "192.0.2.10"
//!     port = 80
//!     backends = [{ address = "192.0.2.100", port = 8080 }]
//! "#).unwrap();
//! assert_eq!(plan.services[0].listeners.len(), 1);
//! assert_eq!(plan.routes[0].destination.to_string(), "192.0.2.0/24");
//! ```

pub mod addr;
pub mod plan;
pub mod restart;
pub mod schema;
pub mod validate;

pub use addr::{IpPrefix, IpRange, MacAddr, is_buggy_ip, is_host_address, is_link_local};
pub use plan::{
    AddressPoolPlan, AddressRole, AdvertisementPlan, AfpacketPlan, AfxdpPlan, BackendPlan, BgpPlan,
    ConntrackPlan, DataplanePlan, DpdkDevicePlan, DpdkPlan, KubernetesPlan, LeaderElectionPlan,
    ListenerKind, ListenerPlan, MssClampPlan, NeighbourPlan, NeighbourTablePlan, OwnedAddress,
    Plan, PortIndex, PortPlan, RoutePlan, ServicePlan, SnatPlan, StatusWritesPlan, SynProxyPlan,
    TimeoutsMs,
};
pub use restart::{LivePart, PortLivePart, PortRestartPart, RestartPart};
pub use schema::{
    AddressPoolSection, AfpacketRxPath, AfpacketRxRing, AfpacketSection, AfpacketTxPath,
    AfxdpSection, BackendGone, ConfigFile, DriverKind, EndpointCondition, IdlePolicy,
    InstanceSection, KubernetesSection, MssClampSetting, MultiBufferSetting, NeighbourTableSection,
    PortOverrideSection, PortRole, Protocol, SessionAffinity, SynProxy, XdpModeSetting,
    ZeroCopySetting,
};
pub use validate::{InstanceChoice, default_syn_proxy_flows, validate, validate_instance};

use std::fmt;
use std::path::{Path, PathBuf};

/// One thing wrong with a configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Key path in the file: `dataplane.snat.port_range`,
    /// `port[1].snat_addresses[0]`, `service[0].backends[2].port`; arrays
    /// of tables are indexed from 0 in file order. A problem about a section
    /// as a whole names the section (`service[2]`, `port`).
    pub path: String,
    /// What is wrong, in words.
    pub reason: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.reason)
    }
}

/// Why a configuration could not be turned into a [`Plan`].
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Not TOML, or not the schema's shape (unknown key, wrong type, missing
    /// key, unknown value of an enum).
    #[error("{}", fmt_syntax(*line, *column, key_path, message))]
    Syntax {
        /// 1-based line of the offending text (0 when unknown).
        line: usize,
        /// 1-based column (0 when unknown).
        column: usize,
        /// Key path of the value being read (`service[0].backends[1]`;
        /// empty at the top level).
        key_path: String,
        /// The TOML parser's message, e.g. "unknown field `prot`, expected
        /// one of ...".
        message: String,
    },
    /// Well-formed but wrong: every problem found.
    #[error("{}", fmt_problems(.0))]
    Invalid(Vec<Problem>),
}

fn fmt_syntax(line: usize, column: usize, key_path: &str, message: &str) -> String {
    let mut out = String::new();
    if line > 0 {
        out.push_str(&format!("line {line}, column {column}: "));
    }
    if !key_path.is_empty() {
        out.push_str(key_path);
        out.push_str(": ");
    }
    out.push_str(message);
    out
}

fn fmt_problems(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(Problem::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

impl ConfigError {
    /// The problems of an [`Invalid`](ConfigError::Invalid) file (empty
    /// otherwise).
    pub fn problems(&self) -> &[Problem] {
        match self {
            ConfigError::Invalid(problems) => problems,
            _ => &[],
        }
    }
}

/// 1-based line and column of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset.min(text.len())).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
    (line, column)
}

/// Parse TOML text into the schema, without validating it.
pub fn parse_file(text: &str) -> Result<ConfigFile, ConfigError> {
    let deserializer = toml::Deserializer::new(text);
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let key_path = e.path().to_string();
        let inner = e.into_inner();
        let (line, column) = inner
            .span()
            .map_or((0, 0), |span| line_column(text, span.start));
        ConfigError::Syntax {
            line,
            column,
            key_path: if key_path == "." {
                String::new()
            } else {
                key_path
            },
            message: inner.message().trim_end().to_owned(),
        }
    })
}

/// Parse and validate TOML text (a file without `[[instance]]`).
pub fn parse(text: &str) -> Result<Plan, ConfigError> {
    parse_instance(text, InstanceChoice::Unnamed)
}

/// Parse and validate TOML text into the plan of one instance.
pub fn parse_instance(text: &str, choice: InstanceChoice<'_>) -> Result<Plan, ConfigError> {
    validate_instance(&parse_file(text)?, choice).map_err(ConfigError::Invalid)
}

/// Read, parse and validate a file (without `[[instance]]`).
pub fn load(path: impl AsRef<Path>) -> Result<Plan, ConfigError> {
    load_instance(path, InstanceChoice::Unnamed)
}

/// Read, parse and validate a file into the plan of one instance.
pub fn load_instance(
    path: impl AsRef<Path>,
    choice: InstanceChoice<'_>,
) -> Result<Plan, ConfigError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse_instance(&text, choice)
}
