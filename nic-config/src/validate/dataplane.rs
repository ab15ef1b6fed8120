//! `[dataplane]`: workers and cores, the receive burst, the Maglev table
//! size, and the conntrack, SNAT, affinity, AF_XDP and neighbour tables.

use super::Validator;
use super::limits::{
    BUSY_POLL_BUDGET_RANGE, BUSY_POLL_US_RANGE, DEFAULT_SYN_PROXY_SHARE, MAX_BATCH_SIZE,
    MAX_IDLE_SPIN_POLLS, MAX_MAGLEV_TABLE_SIZE, MAX_NEW_FLOWS_PER_SOURCE_PER_S,
    MAX_SYN_PROXY_FLOWS, MAX_TABLE_CAPACITY, MAX_UMEM_FRAMES, MAX_WORKERS,
    MIN_SNAT_PORTS_PER_WORKER, XDP_HEADROOM_BYTES, XDP_L2_OVERHEAD_BYTES, XDP_RING_RANGE,
};
use crate::plan::{
    AfpacketPlan, AfxdpPlan, ConntrackPlan, DataplanePlan, NeighbourTablePlan, SnatPlan, TimeoutsMs,
};
use crate::schema::{
    ConfigFile, DEFAULT_IDLE_SPIN_POLLS, DriverKind, IdlePolicy, MultiBufferSetting,
    NeighbourTableSection, TimeoutsSection, XdpModeSetting, ZeroCopySetting,
};
use std::net::IpAddr;
use std::ops::RangeInclusive;

/// What `[dataplane]` resolved to before the ports are read; `None`: the
/// value has a problem (reported) and is left out of later cross-checks.
pub(super) struct DataplaneValues {
    workers: Option<u64>,
    cores: Vec<usize>,
    batch_size: Option<u64>,
    idle_spin_polls: Option<u32>,
    maglev: u64,
    ct_capacity: Option<u64>,
    expiry_scan: Option<u64>,
    early_drop_scan: Option<u64>,
    syn_proxy_flows: Option<u64>,
    timeouts: TimeoutsMs,
    /// The SNAT port range (the services' node ports are checked against
    /// it).
    pub(super) port_range: Option<RangeInclusive<u16>>,
    quarantine_ms: Option<u64>,
    affinity_capacity: Option<u64>,
    new_flows_per_source_per_s: Option<u32>,
    source_prefix_len_v6: Option<u8>,
}

impl DataplaneValues {
    /// The dataplane's plan, with the SNAT addresses of the ports and the
    /// AF_XDP and neighbour table settings checked after the services.
    pub(super) fn into_plan(
        self,
        file: &ConfigFile,
        snat_addresses: Vec<IpAddr>,
        afxdp: AfxdpPlan,
        afpacket: AfpacketPlan,
        neighbour_table: NeighbourTablePlan,
    ) -> DataplanePlan {
        // A value with a problem becomes 0 (the plan is dropped then).
        let narrow = |v: Option<u64>| v.and_then(|v| u32::try_from(v).ok()).unwrap_or(0);
        DataplanePlan {
            workers: self.workers.unwrap_or(1) as usize,
            cores: self.cores,
            batch_size: self.batch_size.unwrap_or(1) as usize,
            idle: file.dataplane.idle,
            idle_spin_polls: self.idle_spin_polls.unwrap_or(0),
            maglev_table_size: u32::try_from(self.maglev).unwrap_or(0),
            conntrack: ConntrackPlan {
                capacity: narrow(self.ct_capacity),
                expiry_scan_per_poll: narrow(self.expiry_scan),
                early_drop_scan: narrow(self.early_drop_scan),
                syn_proxy_flows: narrow(self.syn_proxy_flows),
                timeouts: self.timeouts,
            },
            snat: SnatPlan {
                addresses: snat_addresses,
                port_range: self.port_range.unwrap_or(1..=1),
                quarantine_ms: self.quarantine_ms.unwrap_or(0),
            },
            affinity_capacity: narrow(self.affinity_capacity),
            afxdp,
            afpacket,
            neighbour_table,
            new_flows_per_source_per_s: self.new_flows_per_source_per_s.unwrap_or(0),
            source_prefix_len_v6: self.source_prefix_len_v6.unwrap_or(64),
        }
    }
}

/// How many ports use the AF_XDP driver (they share one UMEM per worker).
pub(super) fn afxdp_ports(file: &ConfigFile) -> u64 {
    file.ports
        .iter()
        .filter(|p| p.driver == DriverKind::Afxdp)
        .count() as u64
}

/// The default `dataplane.conntrack.syn_proxy_flows` of a table of
/// `capacity` flows (the dataplane's `conntrack::default_syn_proxy_flows`).
pub fn default_syn_proxy_flows(capacity: u64) -> u64 {
    capacity
        .div_ceil(DEFAULT_SYN_PROXY_SHARE)
        .clamp(1, MAX_SYN_PROXY_FLOWS)
}

fn is_prime(n: u64) -> bool {
    if n < 2 {
        return false;
    }
    let mut d = 2u64;
    while d * d <= n {
        if n.is_multiple_of(d) {
            return false;
        }
        d += 1;
    }
    true
}

impl Validator {
    /// `[dataplane]` up to the affinity table (AF_XDP and the neighbour
    /// table come after the services).
    pub(super) fn dataplane(&mut self, file: &ConfigFile) -> DataplaneValues {
        let dp = &file.dataplane;

        // --- workers and cores
        let mut cores = Vec::new();
        if let Some(list) = &dp.cores {
            if list.is_empty() {
                self.problem(
                    "dataplane.cores",
                    "is empty; leave it out to run the workers unpinned",
                );
            } else if list.len() as u64 > MAX_WORKERS {
                self.problem(
                    "dataplane.cores",
                    format!("lists {} cores; at most {MAX_WORKERS} workers", list.len()),
                );
            }
            cores = self.core_list("dataplane.cores", list);
        }
        let workers = match (dp.workers, &dp.cores) {
            (Some(w), cores_given) => {
                let w = self.ranged("dataplane.workers", w, 1..=MAX_WORKERS);
                match (w, cores_given) {
                    (Some(w), Some(list)) if !list.is_empty() && list.len() as u64 != w => {
                        self.problem(
                            "dataplane.workers",
                            format!(
                                "is {w} but cores lists {} cores (one per worker)",
                                list.len()
                            ),
                        );
                        None
                    }
                    (w, _) => w,
                }
            }
            (None, Some(list)) => Some(list.len() as u64).filter(|n| (1..=MAX_WORKERS).contains(n)),
            (None, None) => Some(1),
        };

        let batch_size = self.ranged("dataplane.batch_size", dp.batch_size, 1..=MAX_BATCH_SIZE);
        let idle_spin_polls = match (dp.idle, dp.idle_spin_polls) {
            (IdlePolicy::Spin, Some(_)) => {
                self.problem(
                    "dataplane.idle_spin_polls",
                    "applies only to idle = \"adaptive\" (a spinning worker never blocks); \
                     remove it or set idle = \"adaptive\"",
                );
                None
            }
            (IdlePolicy::Spin, None) => Some(0),
            (IdlePolicy::Adaptive, polls) => self
                .ranged(
                    "dataplane.idle_spin_polls",
                    polls.unwrap_or(DEFAULT_IDLE_SPIN_POLLS),
                    0..=MAX_IDLE_SPIN_POLLS,
                )
                .map(|p| p as u32),
        };

        let largest = file
            .services
            .iter()
            .enumerate()
            .max_by_key(|(_, s)| s.backends.len());
        let maglev = dp.maglev_table_size;
        // Bound first: primality by trial division is only cheap up to it.
        if maglev > MAX_MAGLEV_TABLE_SIZE {
            self.problem(
                "dataplane.maglev_table_size",
                format!("{maglev} exceeds the maximum of {MAX_MAGLEV_TABLE_SIZE}"),
            );
        } else if !is_prime(maglev) {
            self.problem(
                "dataplane.maglev_table_size",
                format!(
                    "{maglev} is not prime (Maglev needs a prime table size, e.g. 16381, 65537)"
                ),
            );
        } else if let Some((i, s)) = largest
            && (s.backends.len() as u64) > maglev
        {
            self.problem(
                "dataplane.maglev_table_size",
                format!(
                    "{maglev} slots are fewer than the {} backends of service[{i}] ({:?})",
                    s.backends.len(),
                    s.name
                ),
            );
        }

        // --- conntrack
        let ct = &dp.conntrack;
        let ct_capacity = self.ranged(
            "dataplane.conntrack.capacity",
            ct.capacity,
            1..=MAX_TABLE_CAPACITY,
        );
        let expiry_scan = self.ranged(
            "dataplane.conntrack.expiry_scan_per_poll",
            ct.expiry_scan_per_poll,
            1..=u64::from(u32::MAX),
        );
        let early_drop_scan = self.ranged(
            "dataplane.conntrack.early_drop_scan",
            ct.early_drop_scan,
            0..=u64::from(u32::MAX),
        );
        let syn_proxy_flows = self.syn_proxy_flows(ct.syn_proxy_flows, ct_capacity);
        let timeouts = self.timeouts(&ct.timeouts);

        // --- SNAT ports
        let port_range = self.port_range(&dp.snat.port_range);
        if let (Some(range), Some(w)) = (&port_range, workers) {
            let width = u64::from(*range.end()) - u64::from(*range.start()) + 1;
            if width < w * MIN_SNAT_PORTS_PER_WORKER {
                self.problem(
                    "dataplane.snat.port_range",
                    format!(
                        "{width} ports are too few for {w} workers (each needs at least {MIN_SNAT_PORTS_PER_WORKER})"
                    ),
                );
            }
        }
        let quarantine_ms = self.seconds_ms("dataplane.snat.quarantine_s", dp.snat.quarantine_s, 0);
        let affinity_capacity = self.ranged(
            "dataplane.affinity.capacity",
            dp.affinity.capacity,
            1..=MAX_TABLE_CAPACITY,
        );
        let new_flows_per_source_per_s = self
            .ranged(
                "dataplane.new_flows_per_source_per_s",
                dp.new_flows_per_source_per_s,
                0..=MAX_NEW_FLOWS_PER_SOURCE_PER_S,
            )
            .and_then(|v| u32::try_from(v).ok());
        let source_prefix_len_v6 = self
            .ranged(
                "dataplane.source_prefix_len_v6",
                dp.source_prefix_len_v6,
                1..=128,
            )
            .and_then(|v| u8::try_from(v).ok());
        DataplaneValues {
            workers,
            cores,
            batch_size,
            idle_spin_polls,
            maglev,
            ct_capacity,
            expiry_scan,
            early_drop_scan,
            syn_proxy_flows,
            timeouts,
            port_range,
            quarantine_ms,
            affinity_capacity,
            new_flows_per_source_per_s,
            source_prefix_len_v6,
        }
    }

    /// `dataplane.conntrack.syn_proxy_flows`: `1..=MAX_SYN_PROXY_FLOWS`
    /// and at most the (valid) capacity; default one per
    /// [`DEFAULT_SYN_PROXY_SHARE`] flows of the capacity.
    fn syn_proxy_flows(&mut self, flows: Option<u64>, capacity: Option<u64>) -> Option<u64> {
        const AT: &str = "dataplane.conntrack.syn_proxy_flows";
        let Some(n) = flows else {
            return capacity.map(default_syn_proxy_flows);
        };
        let n = self.ranged(AT, n, 1..=MAX_SYN_PROXY_FLOWS)?;
        if let Some(cap) = capacity
            && n > cap
        {
            self.problem(
                AT,
                format!("{n} is more than dataplane.conntrack.capacity ({cap} flows)"),
            );
            return None;
        }
        Some(n)
    }

    fn timeouts(&mut self, t: &TimeoutsSection) -> TimeoutsMs {
        let mut ms = [0u64; 11];
        for (slot, (name, seconds)) in ms.iter_mut().zip(t.named()) {
            let path = format!("dataplane.conntrack.timeouts.{name}");
            *slot = self.seconds_ms(&path, seconds, 1).unwrap_or(0);
        }
        let [
            tcp_syn_sent_ms,
            tcp_syn_recv_ms,
            tcp_established_ms,
            tcp_fin_wait_ms,
            tcp_close_wait_ms,
            tcp_last_ack_ms,
            tcp_time_wait_ms,
            tcp_close_ms,
            udp_ms,
            udp_stream_ms,
            icmp_ms,
        ] = ms;
        TimeoutsMs {
            tcp_syn_sent_ms,
            tcp_syn_recv_ms,
            tcp_established_ms,
            tcp_fin_wait_ms,
            tcp_close_wait_ms,
            tcp_last_ack_ms,
            tcp_time_wait_ms,
            tcp_close_ms,
            udp_ms,
            udp_stream_ms,
            icmp_ms,
        }
    }

    /// `[dataplane.afxdp]`, with the ports that use the driver (they share
    /// one UMEM per worker; their configured MTUs must fit a frame unless
    /// multi-buffer is allowed).
    pub(super) fn afxdp(&mut self, file: &ConfigFile) -> AfxdpPlan {
        let a = &file.dataplane.afxdp;
        let afxdp_ports = afxdp_ports(file);
        let mut ring = |key: &str, v: u64| -> u32 {
            let path = format!("dataplane.afxdp.{key}");
            match self.ranged(&path, v, XDP_RING_RANGE) {
                Some(v) if v.is_power_of_two() => v as u32,
                Some(v) => {
                    self.problem(path, format!("{v} is not a power of two"));
                    0
                }
                None => 0,
            }
        };
        let fill = ring("fill_ring_size", a.fill_ring_size);
        let completion = ring("completion_ring_size", a.completion_ring_size);
        let rx = ring("rx_ring_size", a.rx_ring_size);
        let tx = ring("tx_ring_size", a.tx_ring_size);
        let frame_size = if matches!(a.frame_size, 2048 | 4096) {
            a.frame_size as u32
        } else {
            self.problem(
                "dataplane.afxdp.frame_size",
                format!("{} is not 2048 or 4096", a.frame_size),
            );
            0
        };
        let umem_frames = self
            .ranged(
                "dataplane.afxdp.umem_frames",
                a.umem_frames,
                1..=MAX_UMEM_FRAMES,
            )
            .unwrap_or(0) as u32;
        let needed = afxdp_ports * (u64::from(fill) + u64::from(tx));
        if umem_frames > 0 && fill > 0 && tx > 0 && u64::from(umem_frames) < needed {
            self.problem(
                "dataplane.afxdp.umem_frames",
                format!(
                    "{umem_frames} frames cannot fill the fill and TX rings of {afxdp_ports} \
                     afxdp port(s) ({afxdp_ports} × ({fill} + {tx}) = {needed})"
                ),
            );
        }
        if a.multi_buffer == MultiBufferSetting::Off && frame_size > 0 {
            let fits = u64::from(frame_size) - XDP_HEADROOM_BYTES - XDP_L2_OVERHEAD_BYTES;
            for (i, p) in file.ports.iter().enumerate() {
                match p.mtu {
                    Some(mtu) if p.driver == DriverKind::Afxdp && mtu > fits => self.problem(
                        format!("port[{i}].mtu"),
                        format!(
                            "{mtu} does not fit one {frame_size}-byte AF_XDP frame (at most \
                             {fits}: 256 bytes of headroom and 18 of Ethernet header) and \
                             dataplane.afxdp.multi_buffer is \"off\"; set it to \"auto\" or \
                             lower the MTU"
                        ),
                    ),
                    _ => {}
                }
            }
        }
        if a.zero_copy == ZeroCopySetting::On && a.mode == XdpModeSetting::Generic {
            self.problem(
                "dataplane.afxdp.zero_copy",
                "\"on\" needs native XDP, but mode is \"generic\" (copy mode only)",
            );
        }
        let busy_poll_us = self
            .ranged(
                "dataplane.afxdp.busy_poll_us",
                a.busy_poll_us,
                BUSY_POLL_US_RANGE,
            )
            .unwrap_or(0) as u32;
        let busy_poll_budget = self
            .ranged(
                "dataplane.afxdp.busy_poll_budget",
                a.busy_poll_budget,
                BUSY_POLL_BUDGET_RANGE,
            )
            .unwrap_or(0) as u32;
        AfxdpPlan {
            mode: a.mode,
            zero_copy: a.zero_copy,
            frame_size,
            umem_frames,
            fill_ring_size: fill,
            completion_ring_size: completion,
            rx_ring_size: rx,
            tx_ring_size: tx,
            need_wakeup: a.need_wakeup,
            busy_poll: a.busy_poll,
            busy_poll_us,
            busy_poll_budget,
            shared_umem: a.shared_umem,
            multi_buffer: a.multi_buffer,
        }
    }

    /// `[dataplane.neighbour_table]`.
    pub(super) fn neighbour_table(&mut self, n: &NeighbourTableSection) -> NeighbourTablePlan {
        let mut field = |key: &str, value: u64, range: RangeInclusive<u64>| {
            self.ranged(&format!("dataplane.neighbour_table.{key}"), value, range)
        };
        let capacity = field("capacity", n.capacity, 16..=1 << 22).map(u64::next_power_of_two);
        let reachable_ms = field("reachable_ms", n.reachable_ms, 1_000..=86_400_000);
        let retrans_ms = field("retrans_ms", n.retrans_ms, 10..=60_000);
        let max_probes = field("max_probes", n.max_probes, 1..=100);
        let failed_hold_ms = field("failed_hold_ms", n.failed_hold_ms, 0..=3_600_000);
        let gc_stale_ms = field("gc_stale_ms", n.gc_stale_ms, 1_000..=86_400_000);
        let gc_min_entries = match capacity {
            Some(c) if n.gc_min_entries > c => {
                self.problem(
                    "dataplane.neighbour_table.gc_min_entries",
                    format!(
                        "{} is more than the {c} entries of the table (capacity, rounded up to \
                         a power of two)",
                        n.gc_min_entries
                    ),
                );
                None
            }
            _ => Some(n.gc_min_entries),
        };
        // Every value below is range-checked, so each fits its type.
        let narrow = |v: Option<u64>| v.and_then(|v| u32::try_from(v).ok()).unwrap_or(0);
        NeighbourTablePlan {
            capacity: narrow(capacity),
            reachable_ms: reachable_ms.unwrap_or(0),
            retrans_ms: retrans_ms.unwrap_or(0),
            max_probes: narrow(max_probes),
            failed_hold_ms: failed_hold_ms.unwrap_or(0),
            gc_stale_ms: gc_stale_ms.unwrap_or(0),
            gc_min_entries: narrow(gc_min_entries),
        }
    }

    /// `"first-last"`, both in `1..=65535`, `first <= last`.
    fn port_range(&mut self, text: &str) -> Option<RangeInclusive<u16>> {
        let path = "dataplane.snat.port_range";
        let parsed = text.split_once('-').and_then(|(a, b)| {
            let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
            if digits(a) && digits(b) {
                Some((a.parse::<u16>().ok()?, b.parse::<u16>().ok()?))
            } else {
                None
            }
        });
        match parsed {
            None => {
                self.problem(
                    path,
                    format!("{text:?} is not a port range like \"1024-65535\""),
                );
                None
            }
            Some((0, _)) => {
                self.problem(path, "port 0 cannot be a source port");
                None
            }
            Some((a, b)) if a > b => {
                self.problem(path, format!("{a}-{b} is empty (first > last)"));
                None
            }
            Some((a, b)) => Some(a..=b),
        }
    }
}
