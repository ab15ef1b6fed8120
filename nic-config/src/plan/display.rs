//! `Display` of a [`Plan`] and its parts: what `portico check` prints, one
//! line per setting, in the order of the file's sections.

use super::*;

impl fmt::Display for DriverKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DriverKind::Afpacket => "afpacket",
            DriverKind::Afxdp => "afxdp",
            DriverKind::Dpdk => "dpdk",
            DriverKind::Mem => "mem",
        })
    }
}

impl fmt::Display for XdpModeSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            XdpModeSetting::Native => "native",
            XdpModeSetting::Generic => "generic",
            XdpModeSetting::Auto => "auto",
        })
    }
}

impl fmt::Display for MultiBufferSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MultiBufferSetting::Auto => "auto",
            MultiBufferSetting::On => "on",
            MultiBufferSetting::Off => "off",
        })
    }
}

impl fmt::Display for ZeroCopySetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ZeroCopySetting::Auto => "auto",
            ZeroCopySetting::On => "on",
            ZeroCopySetting::Off => "off",
        })
    }
}

impl fmt::Display for PortRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PortRole::Outside => "outside",
            PortRole::Inside => "inside",
            PortRole::Both => "both",
        })
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        })
    }
}

impl fmt::Display for IdlePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IdlePolicy::Spin => "spin",
            IdlePolicy::Adaptive => "adaptive",
        })
    }
}

impl fmt::Display for BackendGone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendGone::Drop => "drop",
            BackendGone::Reset => "reset",
        })
    }
}

impl EndpointCondition {
    /// The name in files and reports.
    pub fn name(self) -> &'static str {
        match self {
            EndpointCondition::Ready => "ready",
            EndpointCondition::ServingTerminating => "serving_terminating",
            EndpointCondition::Draining => "draining",
        }
    }
}

impl fmt::Display for EndpointCondition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl ListenerKind {
    /// The name in reports (`portico services`, `simulate`, `check`).
    pub fn name(self) -> &'static str {
        match self {
            ListenerKind::Vip => "vip",
            ListenerKind::ExternalIp => "external_ip",
            ListenerKind::NodePort => "node_port",
        }
    }
}

impl fmt::Display for ListenerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Seconds when `ms` is a whole number of seconds, else milliseconds.
struct Duration(u64);

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_multiple_of(1000) {
            write!(f, "{} s", self.0 / 1000)
        } else {
            write!(f, "{} ms", self.0)
        }
    }
}

/// What `portico check` prints.
impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(instance) = &self.instance {
            writeln!(f, "instance: {instance}")?;
        }
        if !self.vips_by_arp {
            writeln!(
                f,
                "VIPs announced by BGP only (a tier without [kubernetes]: no ARP for them)"
            )?;
        }
        let d = &self.dataplane;
        write!(f, "dataplane: {} worker(s)", d.workers)?;
        if d.cores.is_empty() {
            write!(f, " (unpinned)")?;
        } else {
            let cores: Vec<String> = d.cores.iter().map(usize::to_string).collect();
            write!(f, " on cores {}", cores.join(", "))?;
        }
        write!(f, ", batch {}, idle {}", d.batch_size, d.idle)?;
        if d.idle == IdlePolicy::Adaptive {
            write!(f, " (spin {} polls)", d.idle_spin_polls)?;
        }
        writeln!(f, ", maglev table {} slots", d.maglev_table_size)?;
        let c = &d.conntrack;
        writeln!(
            f,
            "  conntrack: {} flows per worker ({} SYN-proxied at most), expiry scan {} per poll, \
             early-drop scan {}",
            c.capacity, c.syn_proxy_flows, c.expiry_scan_per_poll, c.early_drop_scan
        )?;
        let timeouts: Vec<String> = c
            .timeouts
            .named()
            .iter()
            .map(|(name, ms)| format!("{} {}", name.trim_end_matches("_ms"), Duration(*ms)))
            .collect();
        writeln!(f, "  timeouts: {}", timeouts.join(", "))?;
        let s = &d.snat;
        let snat_addrs: Vec<String> = s.addresses.iter().map(IpAddr::to_string).collect();
        writeln!(
            f,
            "  snat: ports {}-{}, quarantine {}, addresses {}",
            s.port_range.start(),
            s.port_range.end(),
            Duration(s.quarantine_ms),
            if snat_addrs.is_empty() {
                "none".to_owned()
            } else {
                snat_addrs.join(", ")
            }
        )?;
        writeln!(f, "  affinity: {} entries per worker", d.affinity_capacity)?;

        writeln!(f, "ports:")?;
        for (i, p) in self.ports.iter().enumerate() {
            write!(
                f,
                "  [{i}] {} ({}, {} {}): mac {}, mtu ",
                p.name,
                p.role,
                p.driver,
                p.interface,
                p.mac
                    .map_or_else(|| "from interface".to_owned(), |m| m.to_string()),
            )?;
            match p.mtu {
                Some(mtu) => write!(f, "{mtu}")?,
                None => write!(f, "from interface")?,
            }
            if let Some(c) = p.mss_clamp {
                write!(f, ", MSS clamped to {c}")?;
            }
            if i == self.vip_port {
                write!(f, "; VIPs announced here")?;
            }
            writeln!(f)?;
            for a in &p.node_addresses {
                writeln!(f, "      node {a}")?;
            }
            for a in &p.snat_addresses {
                writeln!(f, "      snat {a}")?;
            }
            if let Some(tap) = &p.host_interface {
                for a in &p.host_addresses {
                    writeln!(f, "      host {a} (kernel, via {tap})")?;
                }
            }
        }

        writeln!(f, "routes:")?;
        for r in &self.routes {
            match r.via {
                Some(via) => writeln!(
                    f,
                    "  {} via {via} on {}",
                    r.destination,
                    self.port_name(r.port)
                )?,
                None => writeln!(
                    f,
                    "  {} connected on {}",
                    r.destination,
                    self.port_name(r.port)
                )?,
            }
        }

        if !self.neighbours.is_empty() {
            writeln!(f, "neighbours:")?;
            for n in &self.neighbours {
                writeln!(f, "  {} is {}", n.address, n.mac)?;
            }
        }

        if let Some(k) = &self.kubernetes {
            let le = &k.leader_election;
            writeln!(
                f,
                "kubernetes: kubeconfig {}, class {}{}, debounce {} ms (at most {} ms)",
                k.kubeconfig
                    .as_ref()
                    .map_or_else(|| "inferred".to_owned(), |p| p.display().to_string()),
                k.load_balancer_class,
                if k.serve_unclassed {
                    " and unclassed Services"
                } else {
                    ""
                },
                k.debounce_ms,
                k.debounce_max_ms,
            )?;
            writeln!(
                f,
                "  leader election: lease {}/{} as {}, duration {} ms, renew deadline {} ms, retry {} ms",
                le.lease_namespace,
                le.lease_name,
                le.identity.as_deref().unwrap_or("the host name"),
                le.lease_duration_ms,
                le.renew_deadline_ms,
                le.retry_period_ms,
            )?;
            if k.external_ip_cidrs.is_empty() {
                writeln!(f, "  externalIPs: none served (external_ip_cidrs is empty)")?;
            } else {
                let cidrs: Vec<String> = k
                    .external_ip_cidrs
                    .iter()
                    .map(ToString::to_string)
                    .collect();
                writeln!(f, "  externalIPs: served only inside {}", cidrs.join(", "))?;
            }
            writeln!(
                f,
                "  syn proxy of TCP Services: {} unless annotated (auto above {} half-open flows)",
                k.syn_proxy, k.syn_proxy_half_open_threshold
            )?;
        }
        if !self.address_pools.is_empty() {
            writeln!(f, "address pools:")?;
            for p in &self.address_pools {
                let ranges: Vec<String> = p.ranges.iter().map(IpRange::to_string).collect();
                // An IPv4 pool's count as ever; one with IPv6 per family.
                let size = match (p.has_family(true), p.has_family(false)) {
                    (_, false) => p.size().to_string(),
                    (false, true) => format!("{} IPv6", p.size()),
                    (true, true) => format!(
                        "{} IPv4 and {} IPv6",
                        p.size_of_family(true),
                        p.size_of_family(false)
                    ),
                };
                writeln!(
                    f,
                    "  {}: {} ({} addresses{}{})",
                    p.name,
                    ranges.join(", "),
                    size,
                    if p.auto_assign { ", auto-assign" } else { "" },
                    if p.avoid_buggy_ips {
                        ", avoiding .0 and .255"
                    } else {
                        ""
                    },
                )?;
            }
        }

        fmt_bgp(f, &self.bgp)?;

        writeln!(f, "services:")?;
        if self.services.is_empty() {
            writeln!(f, "  none")?;
        }
        for s in &self.services {
            write!(
                f,
                "  {} ({}): {}",
                s.name,
                s.protocol,
                if s.snat { "full NAT" } else { "client IP kept" }
            )?;
            if let Some(ms) = s.affinity_timeout_ms {
                write!(f, ", client_ip affinity {}", Duration(ms))?;
            }
            if s.protocol == Protocol::Tcp {
                write!(f, ", backend gone: {}", s.tcp_backend_gone)?;
                if s.tcp_pickup {
                    write!(f, ", tcp pickup")?;
                }
                if s.syn_proxy != SynProxyPlan::Off {
                    write!(f, ", syn proxy {}", s.syn_proxy)?;
                }
            }
            writeln!(f)?;
            for l in &s.listeners {
                writeln!(
                    f,
                    "      listen {} ({})",
                    std::net::SocketAddr::new(l.address, l.port),
                    l.kind
                )?;
            }
            if s.backends.is_empty() {
                writeln!(f, "      no backends")?;
            }
            for b in &s.backends {
                writeln!(
                    f,
                    "      backend {} weight {} {}",
                    b.address, b.weight, b.condition
                )?;
            }
        }
        Ok(())
    }
}

/// The `[bgp]` part of the printed plan (nothing without peers).
fn fmt_bgp(f: &mut fmt::Formatter<'_>, bgp: &BgpPlan) -> fmt::Result {
    if bgp.peers.is_empty() && bgp.advertisements.is_empty() {
        return Ok(());
    }
    writeln!(f, "bgp peers:")?;
    for p in &bgp.peers {
        write!(
            f,
            "  {} AS {} ({}), local AS {}, router id {}, from {}, hold {} s, keepalive ",
            p.name(),
            p.peer_asn,
            if p.is_ibgp() { "iBGP" } else { "eBGP" },
            p.my_asn,
            p.router_id,
            p.source_address
                .map_or_else(|| "the kernel's choice".to_owned(), |a| a.to_string()),
            p.hold_time_s,
        )?;
        match p.keepalive_s {
            Some(k) => write!(f, "{k} s")?,
            None => write!(f, "a third of the hold time")?,
        }
        write!(
            f,
            ", ttl {}, connect retry {}-{} s",
            p.ttl(),
            p.connect_retry_s,
            p.connect_retry_max_s
        )?;
        if let (Some(hops), Some(min_ttl)) = (p.ttl_security_hops, p.min_ttl()) {
            write!(
                f,
                ", GTSM (RFC 5082): {hops} hop(s), accepts ttl >= {min_ttl}"
            )?;
        }
        if p.md5_password.is_some() {
            write!(f, ", TCP-MD5")?;
        }
        if p.offers_extended_next_hop() {
            write!(f, ", extended next hop (RFC 8950)")?;
        }
        writeln!(f)?;
    }
    writeln!(
        f,
        "bgp stop: withdraw, then forward for {} s; watchdog: withdraw when a worker stalls {} ms",
        bgp.shutdown_drain_s, bgp.watchdog_timeout_ms
    )?;
    writeln!(f, "bgp advertisements:")?;
    for a in &bgp.advertisements {
        let adv = &a.advertisement;
        let peers: Vec<String> = adv.peers.iter().map(ToString::to_string).collect();
        write!(
            f,
            "  {}: to {}, as /{}",
            adv.name,
            if peers.is_empty() {
                "every peer".to_owned()
            } else {
                peers.join(", ")
            },
            adv.aggregation_length
        )?;
        if let Some(lp) = adv.local_pref {
            write!(f, ", local_pref {lp} (iBGP)")?;
        }
        if !adv.communities.is_empty() {
            let c: Vec<String> = adv.communities.iter().map(ToString::to_string).collect();
            write!(f, ", communities {}", c.join(" "))?;
        }
        writeln!(f)?;
        for pool in &a.address_pools {
            writeln!(f, "      address pool {pool}")?;
        }
        for vip in &a.vips {
            writeln!(f, "      vip {vip}")?;
        }
    }
    Ok(())
}
