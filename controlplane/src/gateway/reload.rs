//! The reload decision: which differences between the running plan and a
//! re-read one only a restart can apply (ports, workers and everything the
//! workers were built with), and what a reload did.

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

/// Settings of `new` that differ from `old` and cannot change while the
/// gateway runs (ports, workers and everything the workers were built
/// with), each as `path (old -> new)`. Empty: `new` can be applied live.
pub fn restart_required(old: &Plan, new: &Plan) -> Vec<String> {
    let mut changed = Vec::new();
    let mut check = |path: &str, a: String, b: String| {
        if a != b {
            changed.push(format!("{path} ({a} -> {b})"));
        }
    };
    let (a, b) = (&old.dataplane, &new.dataplane);
    check(
        "dataplane.workers",
        a.workers.to_string(),
        b.workers.to_string(),
    );
    check(
        "dataplane.cores",
        format!("{:?}", a.cores),
        format!("{:?}", b.cores),
    );
    check(
        "dataplane.batch_size",
        a.batch_size.to_string(),
        b.batch_size.to_string(),
    );
    check("dataplane.idle", a.idle.to_string(), b.idle.to_string());
    check(
        "dataplane.conntrack.capacity",
        a.conntrack.capacity.to_string(),
        b.conntrack.capacity.to_string(),
    );
    check(
        "dataplane.conntrack.expiry_scan_per_poll",
        a.conntrack.expiry_scan_per_poll.to_string(),
        b.conntrack.expiry_scan_per_poll.to_string(),
    );
    check(
        "dataplane.conntrack.early_drop_scan",
        a.conntrack.early_drop_scan.to_string(),
        b.conntrack.early_drop_scan.to_string(),
    );
    for ((name, x), (_, y)) in a
        .conntrack
        .timeouts
        .named()
        .iter()
        .zip(b.conntrack.timeouts.named().iter())
    {
        check(
            &format!("dataplane.conntrack.timeouts.{name}"),
            x.to_string(),
            y.to_string(),
        );
    }
    check(
        "SNAT addresses",
        format!("{:?}", a.snat.addresses),
        format!("{:?}", b.snat.addresses),
    );
    check(
        "dataplane.snat.port_range",
        format!("{:?}", a.snat.port_range),
        format!("{:?}", b.snat.port_range),
    );
    check(
        "dataplane.snat.quarantine_ms",
        a.snat.quarantine_ms.to_string(),
        b.snat.quarantine_ms.to_string(),
    );
    check(
        "dataplane.affinity.capacity",
        a.affinity_capacity.to_string(),
        b.affinity_capacity.to_string(),
    );
    check(
        "dataplane.afxdp",
        format!("{:?}", a.afxdp),
        format!("{:?}", b.afxdp),
    );
    check(
        "dataplane.neighbour_table",
        format!("{:?}", a.neighbour_table),
        format!("{:?}", b.neighbour_table),
    );
    if old.ports.len() != new.ports.len() {
        check(
            "number of ports",
            old.ports.len().to_string(),
            new.ports.len().to_string(),
        );
    } else {
        for (i, (p, q)) in old.ports.iter().zip(&new.ports).enumerate() {
            check(&format!("port[{i}].name"), p.name.clone(), q.name.clone());
            check(
                &format!("port[{i}].driver"),
                p.driver.to_string(),
                q.driver.to_string(),
            );
            check(
                &format!("port[{i}].interface"),
                p.interface.clone(),
                q.interface.clone(),
            );
            check(
                &format!("port[{i}].role"),
                p.role.to_string(),
                q.role.to_string(),
            );
            check(
                &format!("port[{i}].mac"),
                format!("{:?}", p.mac.map(|m| m.to_string())),
                format!("{:?}", q.mac.map(|m| m.to_string())),
            );
            check(
                &format!("port[{i}].mtu"),
                format!("{:?}", p.mtu),
                format!("{:?}", q.mtu),
            );
        }
    }
    changed
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
                "workers = 1",
                "workers = 1\n[dataplane.conntrack]\ncapacity = 4096",
                "dataplane.conntrack.capacity",
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
