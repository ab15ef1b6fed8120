//! Which VIPs and externalIPs this gateway announces (answers ARP for, sends
//! a gratuitous ARP for): the [`AnnounceFilter`] the control plane sets from
//! its per-VIP election, applied to every VIP the builder owns.
//!
//! Invariants: node and SNAT addresses are always announced (they are this
//! instance's own); a VIP's `announce` flag is the filter's verdict for it,
//! set when the VIP becomes owned and again for every owned VIP when the
//! filter changes ([`SnapshotBuilder::set_announce`]), so the flag never
//! lags the election by more than one published snapshot. Changing the
//! filter touches only the VIPs whose flag flips: no service, listener or
//! Maglev table is rebuilt.

use super::SnapshotBuilder;
use crate::snapshot::{OwnedAddr, Snapshot};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

/// Which VIPs (of both families) this instance announces. Cheap to clone.
#[derive(Clone, Default)]
pub struct AnnounceFilter(Option<Arc<dyn Fn(IpAddr) -> bool + Send + Sync>>);

impl AnnounceFilter {
    /// Every VIP (a single instance: nobody else could answer).
    pub fn all() -> Self {
        AnnounceFilter(None)
    }

    /// No VIP (an instance not yet, or no longer, sure of its membership).
    pub fn none() -> Self {
        AnnounceFilter(Some(Arc::new(|_| false)))
    }

    /// The IPv4 VIPs for which `elected` is true, and no IPv6 VIP (an
    /// election that only knows IPv4 claims no IPv6 address; see
    /// [`Self::only_ip`]).
    pub fn only(elected: impl Fn(Ipv4Addr) -> bool + Send + Sync + 'static) -> Self {
        AnnounceFilter(Some(Arc::new(move |vip| match vip {
            IpAddr::V4(v4) => elected(v4),
            IpAddr::V6(_) => false,
        })))
    }

    /// The VIPs of either family for which `elected` is true.
    pub fn only_ip(elected: impl Fn(IpAddr) -> bool + Send + Sync + 'static) -> Self {
        AnnounceFilter(Some(Arc::new(elected)))
    }

    /// Whether the IPv4 `vip` is announced.
    pub fn covers(&self, vip: Ipv4Addr) -> bool {
        self.covers_ip(IpAddr::V4(vip))
    }

    /// Whether `vip` is announced.
    pub fn covers_ip(&self, vip: IpAddr) -> bool {
        self.0.as_ref().is_none_or(|f| f(vip))
    }
}

impl std::fmt::Debug for AnnounceFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            None => "AnnounceFilter::all",
            Some(_) => "AnnounceFilter::only(..)",
        })
    }
}

impl SnapshotBuilder {
    /// Announce the VIPs `filter` covers from now on: every owned VIP's
    /// flag is set to the filter's verdict. Returns the next snapshot when
    /// a flag changed (`None`: nothing to publish). Cost: one filter call
    /// per owned address.
    pub fn set_announce(&mut self, filter: AnnounceFilter) -> Option<Snapshot> {
        self.announce = filter;
        let owned = self.owned.iter().map(|(a, o)| (IpAddr::V4(*a), o));
        let owned6 = self.owned6.iter().map(|(a, o)| (IpAddr::V6(*a), o));
        let flips: Vec<(IpAddr, OwnedAddr)> = owned
            .chain(owned6)
            .filter(|(_, o)| o.vip && !o.node && !o.snat)
            .filter_map(|(addr, o)| {
                let announce = self.announce.covers_ip(addr);
                (announce != o.announce).then_some((addr, OwnedAddr { announce, ..*o }))
            })
            .collect();
        if flips.is_empty() {
            return None;
        }
        for (addr, o) in flips {
            self.insert_owned(addr, o);
        }
        self.generation += 1;
        Some(self.snapshot())
    }

    /// The filter in force.
    pub fn announce_filter(&self) -> &AnnounceFilter {
        &self.announce
    }
}
