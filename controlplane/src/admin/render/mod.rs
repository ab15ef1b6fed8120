//! The text the admin clients print: `portico stats` ([`StatsReport`]'s
//! Display, [`Rates`] between two reports), `portico services`
//! ([`ServicesTable`]) and `portico bgp` ([`BgpTable`]).

use super::PortCounters;
use super::report::{BgpReport, ServiceReport, StatsReport};
use dataplane::counters::DropReason;
use std::fmt::{self, Write as _};

/// Rates between two reports of the same gateway (`portico stats`): per
/// second, over the time between them.
#[derive(Debug)]
pub struct Rates<'a> {
    pub before: &'a StatsReport,
    pub after: &'a StatsReport,
}

impl fmt::Display for Rates<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dt_ms = self.after.uptime_ms.saturating_sub(self.before.uptime_ms);
        if dt_ms == 0 || self.after.pid != self.before.pid {
            return Ok(());
        }
        let per_s = |a: u64, b: u64| a.saturating_sub(b) as f64 * 1000.0 / dt_ms as f64;
        let (a, b) = (&self.after.total, &self.before.total);
        writeln!(
            f,
            "\nrates over the last {:.1} s (per second):",
            dt_ms as f64 / 1000.0
        )?;
        writeln!(
            f,
            "  rx {:.1} pkt/s {:.1} B/s, tx {:.1} pkt/s {:.1} B/s, dropped {:.1}/s, new flows {:.1}/s",
            per_s(a.rx_packets, b.rx_packets),
            per_s(a.rx_bytes, b.rx_bytes),
            per_s(a.tx_packets, b.tx_packets),
            per_s(a.tx_bytes, b.tx_bytes),
            per_s(a.dropped, b.dropped),
            per_s(a.flows_created, b.flows_created)
        )?;
        for s in &self.after.services {
            let Some(old) = self
                .before
                .services
                .iter()
                .find(|o| o.name == s.name && o.protocol == s.protocol)
            else {
                continue;
            };
            writeln!(
                f,
                "  {:<32} {:>10.1} pkt/s {:>12.1} B/s {:>8.1} flows/s",
                format!("{} ({})", s.name, s.protocol),
                per_s(s.packets, old.packets),
                per_s(s.bytes, old.bytes),
                per_s(s.flows_created, old.flows_created)
            )?;
        }
        Ok(())
    }
}

/// Milliseconds as `1h02m03s`, `4.5s` or `12ms`.
fn fmt_duration_ms(ms: u64) -> String {
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let s = ms / 1000;
    if s < 60 {
        return format!("{}.{}s", s, (ms % 1000) / 100);
    }
    let (h, m, s) = (s / 3600, (s / 60) % 60, s % 60);
    if h > 0 {
        format!("{h}h{m:02}m{s:02}s")
    } else {
        format!("{m}m{s:02}s")
    }
}

/// What `portico services` prints: like `ipvsadm -Ln`, each service with
/// its listeners, then its backends with weight, condition and traffic.
#[derive(Debug)]
pub struct ServicesTable<'a>(pub &'a [ServiceReport]);

impl fmt::Display for ServicesTable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return writeln!(f, "no services");
        }
        writeln!(
            f,
            "{:<5} {:<28} {:>6} {:<20} {:>12} {:>14} {:>10} {:>8}",
            "Prot",
            "Service / Listener",
            "Weight",
            "Condition",
            "Packets",
            "Bytes",
            "NewFlows",
            "Active"
        )?;
        writeln!(f, "  -> Backend")?;
        for s in self.0 {
            writeln!(
                f,
                "{:<5} {:<28} {:>6} {:<20} {:>12} {:>14} {:>10} {:>8}",
                s.protocol.to_uppercase(),
                s.name,
                "",
                "",
                s.packets,
                s.bytes,
                s.flows_created,
                s.flows_active
            )?;
            for l in &s.listeners {
                writeln!(f, "      {:<28} ({})", l.address, l.kind)?;
            }
            for b in &s.backends {
                writeln!(
                    f,
                    "  -> {:<29} {:>6} {:<20} {:>12} {:>14} {:>10} {:>8}",
                    b.address,
                    b.weight,
                    b.condition,
                    b.packets,
                    b.bytes,
                    b.flows_created,
                    b.flows_active
                )?;
            }
        }
        Ok(())
    }
}

/// What `portico stats` prints.
fn write_services(f: &mut fmt::Formatter<'_>, services: &[ServiceReport]) -> fmt::Result {
    if services.is_empty() {
        return Ok(());
    }
    writeln!(f, "\nservices:")?;
    writeln!(
        f,
        "  {:<32} {:>12} {:>14} {:>10} {:>8}",
        "service / backend", "packets", "bytes", "new flows", "active"
    )?;
    for s in services {
        writeln!(
            f,
            "  {:<32} {:>12} {:>14} {:>10} {:>8}",
            format!("{} ({})", s.name, s.protocol),
            s.packets,
            s.bytes,
            s.flows_created,
            s.flows_active
        )?;
        for b in &s.backends {
            writeln!(
                f,
                "    {:<30} {:>12} {:>14} {:>10} {:>8}",
                format!("{} {}", b.address, b.condition),
                b.packets,
                b.bytes,
                b.flows_created,
                b.flows_active
            )?;
        }
    }
    Ok(())
}

impl fmt::Display for StatsReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "portico pid {}, up {}, config {}",
            self.pid,
            fmt_duration_ms(self.uptime_ms),
            self.config
        )?;
        writeln!(
            f,
            "snapshot generation {}, published {} ago",
            self.snapshot.generation,
            fmt_duration_ms(self.snapshot.age_ms)
        )?;

        writeln!(f, "\nports:")?;
        writeln!(
            f,
            "  {:<12} {:<16} {:>12} {:>14} {:>12} {:>14} {:>10}",
            "port", "interface", "rx frames", "rx bytes", "tx frames", "tx bytes", "dropped"
        )?;
        for p in &self.ports {
            let s = &p.stats;
            writeln!(
                f,
                "  {:<12} {:<16} {:>12} {:>14} {:>12} {:>14} {:>10}",
                p.name,
                p.interface,
                s.rx_frames,
                s.rx_bytes,
                s.tx_frames,
                s.tx_bytes,
                s.dropped()
            )?;
            // Drops by cause, the kernel's (its rings overflowed: the
            // worker did not keep up) apart from Portico's own; then every
            // other driver counter (offloads, AF_XDP's cross-queue path)
            // by its field name.
            let kernel = [
                ("rx_ring_full", s.kernel_rx_drops),
                ("rx_dropped", s.kernel_rx_dropped),
                ("fill_ring_empty", s.kernel_fill_ring_empty),
                ("freezes", s.kernel_freezes),
            ];
            let portico = [
                ("rx_too_big", s.rx_too_big),
                ("rx_truncated", s.rx_truncated),
                ("tx_too_big", s.tx_too_big),
                ("tx_ring_full", s.tx_ring_full),
                ("rx_offload_bad", s.rx_offload_bad),
                ("rx_bad_chain", s.rx_bad_chain),
                ("rx_pool_empty", s.rx_pool_empty),
                ("rx_ring_errors", s.rx_ring_errors),
                ("tx_send_errors", s.tx_send_errors),
                ("socket_errors", s.socket_errors),
            ];
            let shown = |name: &str| {
                portico.iter().any(|&(n, _)| n == name)
                    || matches!(
                        name,
                        "rx_frames"
                            | "rx_bytes"
                            | "tx_frames"
                            | "tx_bytes"
                            | "kernel_rx_drops"
                            | "kernel_rx_dropped"
                            | "kernel_fill_ring_empty"
                            | "kernel_freezes"
                    )
            };
            let driver: Vec<(&str, u64)> = PortCounters::HELP
                .iter()
                .zip(s.values())
                .filter(|((name, _), _)| !shown(name))
                .map(|(&(name, _), v)| (name, v))
                .collect();
            let mut details = String::new();
            for (group, counters) in [
                ("kernel:", &kernel[..]),
                ("portico:", &portico[..]),
                ("driver:", &driver[..]),
            ] {
                if counters.iter().any(|&(_, v)| v > 0) {
                    let _ = write!(details, " {group}");
                    for &(name, v) in counters.iter().filter(|&&(_, v)| v > 0) {
                        let _ = write!(details, " {name}={v}");
                    }
                }
            }
            if !details.is_empty() {
                writeln!(f, "    {}", details.trim_start())?;
            }
        }

        writeln!(f, "\nworkers:")?;
        writeln!(
            f,
            "  {:<8} {:>6} {:>12} {:>12} {:>10} {:>10} {:>10} {:>10}",
            "worker", "core", "rx pkts", "tx pkts", "dropped", "flows", "snat", "handoff"
        )?;
        let rows = self
            .workers
            .iter()
            .map(|w| (w.worker.to_string(), w.core, &w.counters))
            .chain(std::iter::once(("total".to_owned(), None, &self.total)));
        for (name, core, c) in rows {
            writeln!(
                f,
                "  {:<8} {:>6} {:>12} {:>12} {:>10} {:>10} {:>10} {:>10}",
                name,
                core.map_or_else(|| "-".to_owned(), |c| c.to_string()),
                c.rx_packets,
                c.tx_packets,
                c.dropped,
                c.live_flows,
                c.snat_in_use,
                c.handoff_out,
            )?;
        }

        let t = &self.total;
        writeln!(f, "\nflows:")?;
        writeln!(
            f,
            "  live {}, created {}, expired {}, early-dropped {}, recycled {}, reselected {}",
            t.live_flows,
            t.flows_created,
            t.flows_expired,
            t.flows_early_dropped,
            t.flows_recycled,
            t.flows_reselected
        )?;
        writeln!(
            f,
            "  snat tuples in use {}, allocations {}, quarantine reuses {}; affinity hits {}",
            t.snat_in_use, t.snat_allocations, t.snat_quarantine_reuses, t.affinity_hits
        )?;
        writeln!(
            f,
            "  by family: ipv4 {} live, {} snat tuples; ipv6 {} live, {} snat tuples",
            t.live_flows.saturating_sub(t.live_flows_v6),
            t.snat_in_use.saturating_sub(t.snat_in_use_v6),
            t.live_flows_v6,
            t.snat_in_use_v6
        )?;
        writeln!(
            f,
            "  local replies {}, icmp errors translated {}, resets sent {}",
            t.local_replies, t.icmp_errors_translated, t.resets_sent
        )?;
        writeln!(
            f,
            "  handoff out {} / in {} (by cause: snat reply {}, client {}, icmp error {}); \
             steering programs installed {}, refused {}",
            t.handoff_out,
            t.handoff_in,
            t.handoff_snat_reply,
            t.handoff_client,
            t.handoff_icmp_error,
            t.steering_installs,
            t.steering_install_failures
        )?;
        writeln!(
            f,
            "  arp: learned {}, requests {}, gratuitous {}, held packets sent {}",
            t.arp_learned, t.arp_requests_sent, t.garp_sent, t.neighbour_held_sent
        )?;
        writeln!(
            f,
            "  ndp: learned {}, solicitations {}, unsolicited advertisements {}",
            t.ndp_learned, t.ndp_solicits_sent, t.unsolicited_adverts_sent
        )?;
        writeln!(
            f,
            "  host path: to kernel {}, from kernel {}, queue full {}, down {}",
            t.to_host,
            t.from_host,
            t.drops
                .get(dataplane::DropReason::HostQueueFull.name())
                .unwrap_or(&0),
            t.drops
                .get(dataplane::DropReason::HostPathDown.name())
                .unwrap_or(&0)
        )?;
        let n = &self.neighbours;
        writeln!(
            f,
            "  neighbours: {} of {} ({} static), refused {}, reclaimed {} in {} compactions",
            n.entries, n.capacity, n.statics, n.refused, n.reclaimed, n.compactions
        )?;
        let a = &self.announcements;
        let announced: Vec<String> = a
            .announced
            .iter()
            .map(ToString::to_string)
            .chain(a.announced6.iter().map(ToString::to_string))
            .collect();
        let all = announced.len() + a.silent.len() + a.silent6.len();
        if all > 0 {
            writeln!(
                f,
                "  l2: announcing {} of {all} VIPs [{}]",
                announced.len(),
                announced.join(", ")
            )?;
        }
        if let Some(m) = &self.control_plane.members {
            writeln!(
                f,
                "  members: {} ({} {})",
                m.live.join(", "),
                m.me,
                match (m.known, m.me_live) {
                    (false, _) => "starting",
                    (true, true) => "live",
                    (true, false) => "not renewed: announcing nothing",
                }
            )?;
        }
        let states: Vec<String> = t
            .flows_by_state
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(s, n)| format!("{s} {n}"))
            .collect();
        if !states.is_empty() {
            writeln!(f, "  by state: {}", states.join(", "))?;
        }
        for a in &self.snat {
            writeln!(
                f,
                "  snat {}: ports in use {}, exhausted {}",
                a.address, a.ports_in_use, a.exhausted
            )?;
        }
        let cp = &self.control_plane;
        if cp.build_ms.count > 0 {
            writeln!(
                f,
                "  control plane: {} snapshot builds (mean {:.2} ms), {} changes live (mean {:.2} ms after the event)",
                cp.build_ms.count,
                cp.build_ms.sum_ms / cp.build_ms.count as f64,
                cp.event_to_live_ms.count,
                cp.event_to_live_ms.sum_ms / cp.event_to_live_ms.count.max(1) as f64
            )?;
        }

        writeln!(f, "\ndrops ({} total):", t.dropped)?;
        let mut any = false;
        for r in DropReason::ALL {
            let v = t.drops.get(r.name()).copied().unwrap_or(0);
            if v > 0 {
                any = true;
                writeln!(f, "  {:<24} {v:>12}", r.name())?;
            }
        }
        if !any {
            writeln!(f, "  none")?;
        }
        write_services(f, &self.services)?;
        Ok(())
    }
}

/// The families lines of a `portico bgp` session: offered and negotiated
/// (RFC 4760 §8), the extended next hop state (RFC 8950), the IPv6 next
/// hop(s) and the local address, the IPv6 and skipped prefix counts.
fn write_peer_families(f: &mut fmt::Formatter<'_>, p: &super::BgpPeerReport) -> fmt::Result {
    let list = |l: &[String]| {
        if l.is_empty() {
            "none".to_owned()
        } else {
            l.join(", ")
        }
    };
    let enh = match (p.extended_next_hop_offered, p.extended_next_hop) {
        (_, true) => "negotiated",
        (true, false) => "offered, not negotiated",
        (false, false) => "off",
    };
    writeln!(
        f,
        "  families offered [{}], negotiated [{}]; extended next hop (RFC 8950): {enh}",
        list(&p.families_offered),
        list(&p.families),
    )?;
    let next_hop = match (&p.next_hop_v6, &p.next_hop_v6_link_local) {
        (Some(g), Some(ll)) => format!("{g} + {ll}"),
        (Some(g), None) => g.clone(),
        (None, Some(ll)) => format!("none + {ll}"),
        (None, None) => "none".to_owned(),
    };
    writeln!(
        f,
        "  ipv6 next hop {next_hop}; local address {}; ipv6 prefixes sent {}, skipped {} (family not negotiated)",
        p.local_address.as_deref().unwrap_or("-"),
        p.prefixes_sent_v6,
        p.prefixes_skipped
    )
}

/// `portico bgp`: one line per session (router, ASNs, state, uptime,
/// prefixes sent of desired, updates sent/received, flaps, last error),
/// its families, extended next hop and IPv6 next hop, then what qualifies
/// for announcement and why nothing is announced, if so.
#[derive(Debug)]
pub struct BgpTable<'a>(pub &'a BgpReport);

impl fmt::Display for BgpTable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.0;
        if r.peers.is_empty() {
            return writeln!(f, "no BGP peers configured");
        }
        writeln!(
            f,
            "{:<22} {:>10} {:>10} {:<12} {:>10} {:>9} {:>8} {:>8} {:>6}  Last error",
            "Peer",
            "Peer AS",
            "Local AS",
            "State",
            "Uptime",
            "Prefixes",
            "Upd out",
            "Upd in",
            "Flaps"
        )?;
        for p in &r.peers {
            let uptime = p
                .uptime_s
                .map_or_else(|| "-".to_owned(), |s| fmt_duration_ms(s * 1000));
            writeln!(
                f,
                "{:<22} {:>10} {:>10} {:<12} {:>10} {:>9} {:>8} {:>8} {:>6}  {}",
                p.peer,
                p.peer_asn,
                p.my_asn,
                p.state,
                uptime,
                format!("{}/{}", p.prefixes_sent, p.prefixes_desired),
                p.updates_sent,
                p.updates_received,
                p.flaps,
                p.last_error.as_deref().unwrap_or("-"),
            )?;
            write_peer_families(f, p)?;
            if let (Some(hops), Some(min_ttl)) = (p.ttl_security_hops, p.min_ttl) {
                writeln!(
                    f,
                    "  ttl security (GTSM, RFC 5082): on, router {hops} hop{}: sends ttl {}, accepts ttl >= {min_ttl}",
                    if hops == 1 { "" } else { "s" },
                    p.ttl
                )?;
            }
        }
        write!(f, "VIPs with a serving backend: ")?;
        if r.vips.is_empty() {
            writeln!(f, "none")?;
        } else {
            writeln!(f, "{}", r.vips.join(", "))?;
        }
        match r.withdrawn.as_deref() {
            Some("watchdog") => writeln!(
                f,
                "every route WITHDRAWN: a worker stopped polling (watchdog; {} trips)",
                r.watchdog_trips
            ),
            Some("stopping") => writeln!(f, "every route WITHDRAWN: stopping (draining)"),
            Some(other) => writeln!(f, "every route WITHDRAWN: {other}"),
            None => writeln!(f, "announcing (watchdog trips: {})", r.watchdog_trips),
        }
    }
}

#[cfg(test)]
mod tests;
