//! Portico's configuration file (`portico.toml`) and its validated plan.
//!
//! The schema (ports, drivers, queues, cores, addresses, pools, standalone
//! services) lands with the af_packet driver; see the project's issue list.
