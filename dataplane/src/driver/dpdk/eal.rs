//! The EAL command line, built from [`EalConfig`] (pure: no DPDK call).
//!
//! Shape: `portico --lcores 0@(CPUS) -m MB (--no-huge | --in-memory)
//! --no-shconf --no-telemetry [--no-pci | -a PCI...] [--vdev SPEC...]
//! [EXTRA...]`.
//!
//! * `--lcores 0@(CPUS)`: one main lcore whose affinity is the whole CPU set
//!   (by default every CPU the process may run on), because `rte_eal_init`
//!   pins the calling thread to the main lcore's set and the worker threads
//!   the caller starts afterwards inherit it. The workers pin themselves
//!   (`dataplane.cores`) and register as non-EAL lcores
//!   (`rte_thread_register`) for the mempool caches.
//! * Without hugepages (`--no-huge`) the EAL backs `-m` megabytes with
//!   ordinary memory: enough for vdevs (`net_af_packet`, `net_af_xdp`),
//!   which copy frames, not for PCI devices that DMA. With hugepages
//!   `--in-memory` keeps the EAL from creating shared files (several
//!   processes can run side by side).
//! * `--no-shconf --no-telemetry`: no runtime directory, no socket; two
//!   Portico processes (or two tests) never see each other.
//! * `--no-pci` unless a PCI device is listed, then `-a ADDR` for each one
//!   (only those are probed).

use std::fmt;

/// A DPDK device of a port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DpdkDevice {
    /// A PCI function bound to a DPDK-capable kernel driver (vfio-pci,
    /// uio), e.g. `0000:03:00.0`.
    Pci(String),
    /// A virtual device, e.g. `name = "net_af_packet0"`,
    /// `args = "iface=veth0,qpairs=2"`.
    Vdev { name: String, args: String },
}

impl DpdkDevice {
    /// An `net_af_packet` vdev on kernel interface `ifname` with `queues`
    /// queue pairs (one socket per queue, spread by `PACKET_FANOUT`).
    pub fn af_packet(index: usize, ifname: &str, queues: usize) -> Self {
        DpdkDevice::Vdev {
            name: format!("net_af_packet{index}"),
            args: format!("iface={ifname},qpairs={queues},qdisc_bypass=1"),
        }
    }

    /// An `net_af_xdp` vdev on `ifname`'s rx queues `0..queues`.
    pub fn af_xdp(index: usize, ifname: &str, queues: usize) -> Self {
        DpdkDevice::Vdev {
            name: format!("net_af_xdp{index}"),
            args: format!("iface={ifname},start_queue=0,queue_count={queues}"),
        }
    }

    /// The name `rte_eth_dev_get_port_by_name` knows the device by.
    pub fn port_name(&self) -> &str {
        match self {
            DpdkDevice::Pci(addr) => addr,
            DpdkDevice::Vdev { name, .. } => name,
        }
    }
}

impl fmt::Display for DpdkDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DpdkDevice::Pci(addr) => write!(f, "{addr}"),
            DpdkDevice::Vdev { name, args } if args.is_empty() => write!(f, "{name}"),
            DpdkDevice::Vdev { name, args } => write!(f, "{name},{args}"),
        }
    }
}

/// What the EAL is started with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EalConfig {
    /// CPUs the main lcore (and so the thread calling `rte_eal_init`) may
    /// run on; empty: every CPU the process may run on.
    pub main_lcore_cpus: Vec<usize>,
    /// Memory the EAL reserves, in megabytes (`-m`).
    pub memory_mb: u32,
    /// Back the memory with hugepages (`--in-memory`) instead of ordinary
    /// pages (`--no-huge`).
    pub hugepages: bool,
    /// The ports' devices, in port order.
    pub devices: Vec<DpdkDevice>,
    /// Appended verbatim (e.g. `--log-level=pmd.net.af_packet:debug`).
    pub extra_args: Vec<String>,
}

impl EalConfig {
    /// Vdevs without hugepages, 512 MB.
    pub fn vdevs(devices: Vec<DpdkDevice>) -> Self {
        EalConfig {
            main_lcore_cpus: Vec::new(),
            memory_mb: 512,
            hugepages: false,
            devices,
            extra_args: Vec::new(),
        }
    }

    /// The full argument vector, program name first. `allowed_cpus` is
    /// used when `main_lcore_cpus` is empty.
    pub fn args(&self, allowed_cpus: &[usize]) -> Vec<String> {
        let cpus = if self.main_lcore_cpus.is_empty() {
            allowed_cpus
        } else {
            &self.main_lcore_cpus
        };
        let mut args = vec!["portico".to_string()];
        if !cpus.is_empty() {
            let list: Vec<String> = cpus.iter().map(usize::to_string).collect();
            args.push("--lcores".into());
            args.push(format!("0@({})", list.join(",")));
        }
        args.push("-m".into());
        args.push(self.memory_mb.to_string());
        args.push(
            if self.hugepages {
                "--in-memory"
            } else {
                "--no-huge"
            }
            .into(),
        );
        args.push("--no-shconf".into());
        args.push("--no-telemetry".into());
        let mut any_pci = false;
        for d in &self.devices {
            if let DpdkDevice::Pci(addr) = d {
                any_pci = true;
                args.push("-a".into());
                args.push(addr.clone());
            }
        }
        if !any_pci {
            args.push("--no-pci".into());
        }
        for d in &self.devices {
            if matches!(d, DpdkDevice::Vdev { .. }) {
                args.push(format!("--vdev={d}"));
            }
        }
        args.extend(self.extra_args.iter().cloned());
        args
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vdevs_run_without_hugepages_or_pci() {
        let c = EalConfig::vdevs(vec![
            DpdkDevice::af_packet(0, "o0", 2),
            DpdkDevice::af_xdp(1, "i0", 1),
        ]);
        assert_eq!(
            c.args(&[0, 1]),
            [
                "portico",
                "--lcores",
                "0@(0,1)",
                "-m",
                "512",
                "--no-huge",
                "--no-shconf",
                "--no-telemetry",
                "--no-pci",
                "--vdev=net_af_packet0,iface=o0,qpairs=2,qdisc_bypass=1",
                "--vdev=net_af_xdp1,iface=i0,start_queue=0,queue_count=1",
            ]
        );
    }

    #[test]
    fn pci_devices_are_allow_listed_and_hugepages_stay_in_memory() {
        let mut c = EalConfig::vdevs(vec![
            DpdkDevice::Pci("0000:03:00.0".into()),
            DpdkDevice::Pci("0000:03:00.1".into()),
        ]);
        c.hugepages = true;
        c.memory_mb = 2048;
        c.main_lcore_cpus = vec![3];
        c.extra_args = vec!["--log-level=lib.eal:debug".into()];
        let args = c.args(&[0, 1, 2, 3]);
        assert_eq!(
            args,
            [
                "portico",
                "--lcores",
                "0@(3)",
                "-m",
                "2048",
                "--in-memory",
                "--no-shconf",
                "--no-telemetry",
                "-a",
                "0000:03:00.0",
                "-a",
                "0000:03:00.1",
                "--log-level=lib.eal:debug",
            ]
        );
        assert_eq!(c.devices[1].port_name(), "0000:03:00.1");
    }
}
