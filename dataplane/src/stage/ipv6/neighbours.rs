//! The static IPv6 neighbours of the snapshot (`SnapshotSpec.neighbours`
//! with IPv6 addresses), looked up by (port, address) for the next hop of
//! a translated IPv6 packet.
//!
//! A thin stand-in: dynamic resolution of IPv6 neighbours (NDP, with
//! incomplete/reachable/stale states and a hold queue) is the neighbour
//! table's (`crate::neighbour`, the NDP stage); this table only knows the
//! configured ones, rebuilt from each snapshot generation (cold path), and
//! a next hop it does not know is dropped as `neighbour_unresolved`.

use crate::packet::PortId;
use crate::snapshot::Snapshot;
use hashbrown::HashMap;
use std::net::Ipv6Addr;

/// (port, address) → MAC of the configured IPv6 neighbours.
#[derive(Debug, Default)]
pub struct StaticNeighbours6 {
    generation: Option<u64>,
    macs: HashMap<(PortId, Ipv6Addr), [u8; 6]>,
}

impl StaticNeighbours6 {
    /// Take the static IPv6 neighbours of `snap` if it is a generation not
    /// seen yet (allocates: cold path).
    pub fn load(&mut self, snap: &Snapshot) {
        if self.generation == Some(snap.generation) {
            return;
        }
        self.generation = Some(snap.generation);
        self.macs = snap
            .static_neighbours6
            .iter()
            .map(|&(port, addr, mac)| ((port, addr), mac))
            .collect();
    }

    #[inline]
    pub fn get(&self, port: PortId, addr: Ipv6Addr) -> Option<[u8; 6]> {
        self.macs.get(&(port, addr)).copied()
    }
}
