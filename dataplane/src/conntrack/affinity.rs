//! ClientIP session affinity: `(service, client address) -> backend` with an
//! idle timeout, like kube-proxy's `sessionAffinity: ClientIP` (the iptables
//! `recent` match, IPVS persistence templates).
//!
//! The entry is refreshed by every new flow of the client; it expires
//! `timeout_ms` after the last one. When no live entry exists the caller falls
//! back to Maglev on the client address alone, so a client keeps landing on
//! the same backend on every core and every gateway while the backend set is
//! stable; the table only pins clients across backend-set changes.
//!
//! Invariants: storage is allocated once (`capacity` entries); the table
//! never grows. Entries are placed with the process's keyed
//! [`TableHasher`] (a sender picks its own source addresses; a public hash
//! would let it flood one bucket). When it is full, an insert first reclaims an expired entry
//! found by a bounded scan, else it is refused (`inserts_refused`), which only
//! costs stickiness, never a packet.

use crate::flow::{IpFamily, TableHasher};
use crate::snapshot::{BackendId, ServiceId};
use hashbrown::HashTable;
use std::net::Ipv4Addr;

const SCAN_ON_FULL: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry<A> {
    service: ServiceId,
    client: A,
    backend: BackendId,
    expires_ms: u64,
    live: bool,
}

/// Per-core affinity table of one family's clients (`AffinityTable` IPv4,
/// `AffinityTable<Ipv6Addr>` IPv6).
#[derive(Debug)]
pub struct AffinityTable<A = Ipv4Addr> {
    slots: Vec<Entry<A>>,
    free: Vec<u32>,
    index: HashTable<u32>,
    cursor: usize,
    /// Inserts refused because the table was full of live entries.
    pub inserts_refused: u64,
    hasher: TableHasher,
}

/// The service id (4 bytes, big-endian) then the client's address bytes
/// (4 or 16).
fn hash<A: IpFamily>(hasher: &TableHasher, service: ServiceId, client: A) -> u64 {
    let mut b = [0u8; 20];
    b[..4].copy_from_slice(&service.to_be_bytes());
    let c = client.octets();
    let c = c.as_ref();
    let end = 4 + c.len();
    b[4..end].copy_from_slice(c);
    hasher.hash_bytes(b.get(..end).unwrap_or(&b))
}

impl<A: IpFamily> AffinityTable<A> {
    pub fn new(capacity: u32, hasher: TableHasher) -> Self {
        let capacity = capacity.max(1) as usize;
        let blank = Entry {
            service: 0,
            client: A::UNSPECIFIED,
            backend: 0,
            expires_ms: 0,
            live: false,
        };
        AffinityTable {
            slots: vec![blank; capacity],
            free: (0..capacity as u32).rev().collect(),
            // Twice the entries: removals leave tombstones, and hashbrown
            // rehashes in place (no allocation) while items <= capacity / 2.
            index: HashTable::with_capacity(capacity * 2),
            cursor: 0,
            inserts_refused: 0,
            hasher,
        }
    }

    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn find(&self, service: ServiceId, client: A, h: u64) -> Option<u32> {
        let slots = &self.slots;
        self.index
            .find(h, |&i| {
                let e = &slots[i as usize];
                e.service == service && e.client == client
            })
            .copied()
    }

    /// The client's pinned backend if the entry is still live at `now_ms`.
    #[inline]
    pub fn lookup(&self, service: ServiceId, client: A, now_ms: u64) -> Option<BackendId> {
        let i = self.find(service, client, hash(&self.hasher, service, client))?;
        let e = &self.slots[i as usize];
        (e.expires_ms > now_ms).then_some(e.backend)
    }

    /// Pin (or re-pin) the client to `backend` until `now_ms + timeout_ms`.
    pub fn upsert(
        &mut self,
        service: ServiceId,
        client: A,
        backend: BackendId,
        timeout_ms: u64,
        now_ms: u64,
    ) {
        let h = hash(&self.hasher, service, client);
        let expires_ms = now_ms.saturating_add(timeout_ms);
        if let Some(i) = self.find(service, client, h) {
            let e = &mut self.slots[i as usize];
            e.backend = backend;
            e.expires_ms = expires_ms;
            return;
        }
        if self.free.is_empty() {
            self.expire(now_ms, SCAN_ON_FULL);
        }
        let Some(i) = self.free.pop() else {
            self.inserts_refused += 1;
            return;
        };
        self.slots[i as usize] = Entry {
            service,
            client,
            backend,
            expires_ms,
            live: true,
        };
        let (slots, hasher) = (&self.slots, &self.hasher);
        self.index.insert_unique(h, i, |&j| {
            let e = &slots[j as usize];
            hash(hasher, e.service, e.client)
        });
    }

    /// Remove expired entries among the next `max_scan` slots (bounded work
    /// per poll loop); returns how many were removed.
    pub fn expire(&mut self, now_ms: u64, max_scan: usize) -> usize {
        let n = self.slots.len();
        let mut removed = 0;
        for _ in 0..max_scan.min(n) {
            let i = self.cursor;
            self.cursor = (self.cursor + 1) % n;
            let e = self.slots[i];
            if e.live && e.expires_ms <= now_ms {
                let h = hash(&self.hasher, e.service, e.client);
                if let Ok(entry) = self.index.find_entry(h, |&j| j as usize == i) {
                    entry.remove();
                }
                self.slots[i].live = false;
                self.free.push(i as u32);
                removed += 1;
            }
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C1: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
    const C2: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);

    #[test]
    fn entry_lives_until_timeout_and_is_refreshed_by_upsert() {
        let mut t = AffinityTable::new(8, TableHasher::from_seed(2));
        t.upsert(1, C1, 7, 10_000, 0);
        assert_eq!(t.lookup(1, C1, 9_999), Some(7));
        assert_eq!(t.lookup(2, C1, 0), None, "per service");
        t.upsert(1, C1, 7, 10_000, 9_000);
        assert_eq!(t.lookup(1, C1, 18_999), Some(7));
        assert_eq!(t.lookup(1, C1, 19_000), None);
        assert_eq!(t.expire(19_000, 8), 1);
        assert!(t.is_empty());
    }

    #[test]
    fn full_table_reclaims_expired_entries_then_refuses() {
        let mut t = AffinityTable::new(2, TableHasher::from_seed(2));
        t.upsert(1, C1, 1, 100, 0);
        t.upsert(1, C2, 2, 1_000, 0);
        t.upsert(1, Ipv4Addr::new(198, 51, 100, 3), 3, 1_000, 500);
        assert_eq!(t.lookup(1, Ipv4Addr::new(198, 51, 100, 3), 500), Some(3));
        assert_eq!(t.inserts_refused, 0);
        t.upsert(1, Ipv4Addr::new(198, 51, 100, 4), 4, 1_000, 600);
        assert_eq!(t.inserts_refused, 1);
        assert_eq!(t.lookup(1, C2, 600), Some(2), "live entries are kept");
    }

    #[test]
    fn churn_never_grows_the_index() {
        let mut t = AffinityTable::new(64, TableHasher::from_seed(2));
        let cap = t.index.capacity();
        for round in 0..10_000u32 {
            let c = Ipv4Addr::from(round.wrapping_mul(2_654_435_761));
            t.upsert(round % 5, c, round, 10, u64::from(round));
            t.expire(u64::from(round), 4);
        }
        assert_eq!(t.index.capacity(), cap);
        assert!(t.len() <= 64);
    }
}

#[cfg(test)]
mod tests_ipv6 {
    use super::*;
    use std::net::Ipv6Addr;

    #[test]
    fn ipv6_clients_pin_and_expire() {
        let mut t: AffinityTable<Ipv6Addr> = AffinityTable::new(4, TableHasher::from_seed(1));
        let c1: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let c2: Ipv6Addr = "2001:db8::2".parse().unwrap();
        t.upsert(1, c1, 5, 1_000, 0);
        assert_eq!(t.lookup(1, c1, 500), Some(5));
        assert_eq!(t.lookup(1, c2, 500), None);
        assert_eq!(t.lookup(2, c1, 500), None);
        assert_eq!(t.expire(2_000, 4), 1);
        assert!(t.is_empty());
    }
}
