//! `compare`: Portico against the kernel's NAT in kube-proxy's iptables and
//! nftables rule shapes, on one namespace topology, in one run (issue 5):
//! UDP echoes, new TCP connections, keep-alive HTTP requests, connection
//! churn (SYN retransmits, PAWS rejects), single-flow TCP throughput, the
//! CPU each costs and the time to program a service change, at several
//! service counts, repeated for the spread.
//!
//! * [`rules`] writes the three rule sets (same services for each);
//! * [`run`] builds the topology, runs the loads through each datapath in
//!   turn and returns the raw samples;
//! * [`report`] summarises them (median, min–max, ratios within a run) into
//!   markdown tables;
//! * [`plot`] draws them as SVG;
//! * `compare --syn-flood` ([`run::run_syn_flood`], issue 15) measures
//!   real connections under a spoofed SYN flood per SYN defence on the
//!   same rig, [`flood_report`] tabulates it.
//!
//! How the CPU figures are taken, and what they cannot tell: see
//! bench/RESULTS.md ("Portico vs kernel NAT").

pub mod flood_report;
pub mod plot;
pub mod report;
pub mod rules;
pub mod run;
