//! The reload decision: which differences between the running plan and a
//! re-read one only a restart can apply (ports, workers and everything the
//! workers were built with), and what a reload did. The plan's halves come
//! from [`Plan::split`], so every setting is in one of them.

use dataplane::snapshot::BuildError;
use nic_config::{ConfigError, Plan};

/// What a reload did.
#[derive(Debug)]
pub enum ReloadOutcome {
    /// A new snapshot is in force.
    Applied { generation: u64 },
    /// The file describes the running configuration; nothing published.
    Unchanged,
    /// The file does not load; the old configuration stays.
    Invalid(ConfigError),
    /// The file changes settings only a restart applies; the old
    /// configuration stays.
    NeedsRestart(Vec<String>),
    /// The snapshot builder rejected the new spec; the old one stays.
    Rejected(BuildError),
}

/// What a re-read plan asks of the running gateway.
#[derive(Debug, PartialEq, Eq)]
pub enum ReloadDecision {
    /// Nothing differs.
    Unchanged,
    /// Only what a new snapshot applies differs.
    Live,
    /// Settings only a restart applies differ, each as `path (old -> new)`.
    NeedsRestart(Vec<String>),
}

/// Compare the restart parts and the live parts of `old` and `new` (see
/// [`nic_config::restart`]).
pub fn decide(old: &Plan, new: &Plan) -> ReloadDecision {
    let (old_restart, old_live) = old.split();
    let (new_restart, new_live) = new.split();
    if old_restart != new_restart {
        ReloadDecision::NeedsRestart(old_restart.changes_to(&new_restart))
    } else if old_live == new_live {
        ReloadDecision::Unchanged
    } else {
        ReloadDecision::Live
    }
}

/// Settings of `new` that differ from `old` and cannot change while the
/// gateway runs (ports, workers and everything the workers were built
/// with), each as `path (old -> new)`. Empty: `new` can be applied live.
pub fn restart_required(old: &Plan, new: &Plan) -> Vec<String> {
    match decide(old, new) {
        ReloadDecision::NeedsRestart(changes) => changes,
        ReloadDecision::Unchanged | ReloadDecision::Live => Vec::new(),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::gateway) fn plan(text: &str) -> Plan {
        nic_config::parse(text).unwrap_or_else(|e| panic!("{e}"))
    }

    pub(in crate::gateway) const BASE: &str = r#"
        [dataplane]
        workers = 1
        [[port]]
        name = "outside"
        driver = "afpacket"
        interface = "o0"
        role = "outside"
        node_addresses = ["192.0.2.1/24"]
        [[port]]
        name = "inside"
        driver = "afpacket"
        interface = "i0"
        role = "inside"
        snat_addresses = ["10.1.0.1/24"]
        [[service]]
        name = "web"
        protocol = "tcp"
        vip = "192.0.2.10"
        port = 80
        backends = [{ address = "10.1.0.10", port = 8080 }]
    "#;

    #[test]
    fn service_and_address_changes_apply_live() {
        let old = plan(BASE);
        let new = plan(
            &BASE
                .replace("port = 80\n", "port = 8080\n")
                .replace("192.0.2.1/24", "192.0.2.2/24")
                .replace(
                    r#"{ address = "10.1.0.10", port = 8080 }"#,
                    r#"{ address = "10.1.0.10", port = 8080 }, { address = "10.1.0.11", port = 8080 }"#,
                ),
        );
        assert_ne!(old, new);
        assert_eq!(restart_required(&old, &new), Vec::<String>::new());
    }

    #[test]
    fn the_decision_compares_both_parts() {
        let old = plan(BASE);
        assert_eq!(decide(&old, &old.clone()), ReloadDecision::Unchanged);
        let more_backends = plan(&BASE.replace(
            r#"{ address = "10.1.0.10", port = 8080 }"#,
            r#"{ address = "10.1.0.10", port = 8080 }, { address = "10.1.0.11", port = 8080 }"#,
        ));
        assert_eq!(decide(&old, &more_backends), ReloadDecision::Live);
        // A section the hand-kept list used to forget: adding [kubernetes]
        // to a running file-only gateway would not start the source.
        let with_kubernetes = plan(&format!("{BASE}\n[kubernetes]\n"));
        let ReloadDecision::NeedsRestart(changes) = decide(&old, &with_kubernetes) else {
            panic!("adding [kubernetes] needs a restart");
        };
        assert!(
            changes[0].starts_with("kubernetes (None -> Some("),
            "{changes:?}"
        );
    }

    #[test]
    fn worker_and_port_changes_need_a_restart() {
        let old = plan(BASE);
        let cases = [
            ("workers = 1", "workers = 2", "dataplane.workers (1 -> 2)"),
            (
                "interface = \"i0\"",
                "interface = \"i1\"",
                "port[1].interface (i0 -> i1)",
            ),
            (
                "10.1.0.1/24",
                "10.1.0.2/24",
                "SNAT addresses ([10.1.0.1] -> [10.1.0.2])",
            ),
            (
                // The default syn_proxy_flows (one per 16 flows, 16,384)
                // stays: only the capacity changes.
                "workers = 1",
                "workers = 1\n[dataplane.conntrack]\ncapacity = 262143",
                "dataplane.conntrack.capacity",
            ),
            (
                "workers = 1",
                "workers = 1\n[dataplane.conntrack]\nsyn_proxy_flows = 4096",
                "dataplane.conntrack.syn_proxy_flows (16384 -> 4096)",
            ),
            (
                "workers = 1",
                "workers = 1\n[dataplane.snat]\nport_range = \"2000-3000\"",
                "dataplane.snat.port_range",
            ),
        ];
        for (from, to, expected) in cases {
            let new = plan(&BASE.replace(from, to));
            let changes = restart_required(&old, &new);
            assert_eq!(changes.len(), 1, "{to}: {changes:?}");
            assert!(changes[0].starts_with(expected), "{to}: {changes:?}");
        }
        let one_port = plan(
            r#"
            [[port]]
            name = "lan"
            driver = "afpacket"
            interface = "o0"
            role = "both"
            node_addresses = ["192.0.2.1/24"]
            snat_addresses = ["192.0.2.2/24"]
        "#,
        );
        let changes = restart_required(&old, &one_port);
        assert!(
            changes
                .iter()
                .any(|c| c.starts_with("number of ports (2 -> 1)")),
            "{changes:?}"
        );
    }
}
