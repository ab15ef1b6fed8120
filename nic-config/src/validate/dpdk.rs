//! `[dpdk]` (the EAL's settings) and each port's `dpdk_device`.

use super::Validator;
use super::limits::{DPDK_DESC_RANGE, DPDK_MEMORY_MB_RANGE};
use crate::plan::{DpdkDevicePlan, DpdkPlan};
use crate::schema::{ConfigFile, DriverKind};

/// `DDDD:BB:DD.F` or `BB:DD.F` (hex digits; device up to 1f, function up
/// to 7), normalized with the domain.
fn pci_address(text: &str) -> Option<String> {
    let full = if text.matches(':').count() == 1 {
        format!("0000:{text}")
    } else {
        text.to_string()
    };
    let (domain, rest) = full.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (device, function) = rest.split_once('.')?;
    let hex = |s: &str, len: usize| s.len() == len && s.chars().all(|c| c.is_ascii_hexdigit());
    let ok = hex(domain, 4)
        && hex(bus, 2)
        && hex(device, 2)
        && u8::from_str_radix(device, 16).is_ok_and(|d| d <= 0x1f)
        && function.len() == 1
        && function.chars().all(|c| ('0'..='7').contains(&c));
    ok.then(|| full.to_ascii_lowercase())
}

impl Validator {
    /// `port[i].dpdk_device`: `Some` exactly for driver `dpdk`.
    pub(super) fn dpdk_device(
        &mut self,
        at: &str,
        driver: DriverKind,
        text: Option<&str>,
    ) -> Option<DpdkDevicePlan> {
        let path = format!("{at}.dpdk_device");
        if driver != DriverKind::Dpdk {
            if text.is_some() {
                self.problem(
                    path,
                    format!(
                        "only ports with driver \"dpdk\" have a DPDK device (this one is {driver})"
                    ),
                );
            }
            return None;
        }
        let Some(text) = text else {
            return Some(DpdkDevicePlan::AfPacket);
        };
        match text {
            "net_af_packet" => return Some(DpdkDevicePlan::AfPacket),
            "net_af_xdp" => return Some(DpdkDevicePlan::AfXdp),
            _ => {}
        }
        if let Some(pci) = pci_address(text) {
            return Some(DpdkDevicePlan::Pci(pci));
        }
        let (name, args) = text.split_once(',').unwrap_or((text, ""));
        let name_ok = name.len() > 4
            && name.starts_with("net_")
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !name_ok || text.chars().any(|c| c.is_whitespace()) {
            self.problem(
                path,
                format!(
                    "{text:?} is neither \"net_af_packet\", \"net_af_xdp\", a PCI address \
                     (0000:03:00.0) nor a vdev (net_NAME[,ARGS], no spaces)"
                ),
            );
            return None;
        }
        Some(DpdkDevicePlan::Vdev {
            name: name.to_string(),
            args: args.to_string(),
        })
    }

    /// `[dpdk]`.
    pub(super) fn dpdk(&mut self, file: &ConfigFile) -> DpdkPlan {
        let d = &file.dpdk;
        let mut cores = Vec::new();
        if let Some(list) = &d.cores {
            if list.is_empty() {
                self.problem("dpdk.cores", "is empty; leave it out to allow every CPU");
            }
            cores = self.core_list("dpdk.cores", list);
        }
        let memory_mb = self.ranged("dpdk.memory_mb", d.memory_mb, DPDK_MEMORY_MB_RANGE);
        let rx_desc = self.ranged("dpdk.rx_desc", d.rx_desc, DPDK_DESC_RANGE);
        let tx_desc = self.ranged("dpdk.tx_desc", d.tx_desc, DPDK_DESC_RANGE);
        for (i, arg) in d.extra_args.iter().enumerate() {
            if arg.is_empty() || arg.contains('\0') {
                self.problem(
                    format!("dpdk.extra_args[{i}]"),
                    "is empty or contains a NUL byte",
                );
            }
        }
        DpdkPlan {
            cores,
            memory_mb: memory_mb.and_then(|m| u32::try_from(m).ok()).unwrap_or(0),
            hugepages: d.hugepages,
            rx_desc: rx_desc.and_then(|v| u16::try_from(v).ok()).unwrap_or(0),
            tx_desc: tx_desc.and_then(|v| u16::try_from(v).ok()).unwrap_or(0),
            extra_args: d.extra_args.clone(),
        }
    }
}
