//! `compare`: Portico against the kernel's NAT in kube-proxy's iptables and
//! nftables rule shapes, on one namespace topology, in one run (issue 5,
//! first cut: UDP echoes per second, loss, CPU, and the time to program a
//! service change).
//!
//! * [`rules`] writes the three rule sets (same services for each);
//! * [`run`] builds the topology, runs the loads through each datapath in
//!   turn and writes the table.

pub mod rules;
pub mod run;
