//! The port families of the metrics: traffic
//! (`port_{rx,tx}_packets_total`, `port_{rx,tx}_bytes_total`), drops
//! (`port_driver_drops_total`, and by cause `port_drops_total{cause}`), and
//! every other driver counter of [`PortCounters`] as
//! `port_<field>_total` with the field's help text
//! ([`PortCounters::HELP`]), all labelled {port, interface}.
//!
//! Invariant: every field of [`PortCounters`] is exported exactly once:
//! the four traffic counters under their names, the fields that count in
//! [`PortCounters::dropped`] as causes of `port_drops_total`, every other
//! one as its own counter (a new driver counter appears without code here).

use super::{Labels, counter};
use crate::admin::{PortCounters, PortReport};
use prometheus_client::registry::{Registry, Unit};

/// The traffic counters, exported under names of their own.
const TRAFFIC: [&str; 4] = ["rx_frames", "rx_bytes", "tx_frames", "tx_bytes"];

/// Whether the field at `index` of [`PortCounters::HELP`] counts in
/// [`PortCounters::dropped`] (and so in `port_drops_total{cause}`).
fn is_drop(index: usize) -> bool {
    let mut values = [0u64; PortCounters::FIELDS];
    values[index] = 1;
    PortCounters::from_values(values).dropped() == 1
}

/// The fields exported as `port_<field>_total`: neither traffic nor a
/// drop cause.
pub(super) fn event_fields() -> impl Iterator<Item = (usize, &'static str, &'static str)> {
    PortCounters::HELP
        .iter()
        .enumerate()
        .filter(|&(i, &(name, _))| !TRAFFIC.contains(&name) && !is_drop(i))
        .map(|(i, &(name, help))| (i, name, help))
}

/// Register the port families for `ports`.
pub(super) fn encode_ports(r: &mut Registry, ports: &[PortReport]) {
    let rx_packets = counter(r, "port_rx_packets", "Frames received on a port", None);
    let rx_bytes = counter(r, "port_rx", "Bytes received on a port", Some(Unit::Bytes));
    let tx_packets = counter(r, "port_tx_packets", "Frames sent on a port", None);
    let tx_bytes = counter(r, "port_tx", "Bytes sent on a port", Some(Unit::Bytes));
    let drops = counter(
        r,
        "port_driver_drops",
        "Frames the driver or the kernel lost on a port (too big, truncated, TX ring full, \
         RX ring full)",
        None,
    );
    let drops_by_cause = counter(
        r,
        "port_drops",
        "Frames lost on a port by cause: the kernel's (kernel_rx_ring_full: the RX ring \
         overflowed, the worker did not keep up; kernel_rx_other) and Portico's own \
         (rx_too_big, rx_truncated, tx_too_big, tx_ring_full, rx_offload_bad, rx_bad_chain)",
        None,
    );
    let events: Vec<_> = event_fields()
        .map(|(i, name, help)| (i, counter(r, &format!("port_{name}"), help, None)))
        .collect();
    for p in ports {
        let l: Labels = vec![("port", p.name.clone()), ("interface", p.interface.clone())];
        let s = &p.stats;
        rx_packets.get_or_create(&l).inc_by(s.rx_frames);
        rx_bytes.get_or_create(&l).inc_by(s.rx_bytes);
        tx_packets.get_or_create(&l).inc_by(s.tx_frames);
        tx_bytes.get_or_create(&l).inc_by(s.tx_bytes);
        drops.get_or_create(&l).inc_by(s.dropped());
        for (cause, n) in s.drops_by_cause() {
            let mut lc = l.clone();
            lc.push(("cause", cause.to_string()));
            drops_by_cause.get_or_create(&lc).inc_by(n);
        }
        let values = s.values();
        for (i, family) in &events {
            family.get_or_create(&l).inc_by(values[*i]);
        }
    }
}
