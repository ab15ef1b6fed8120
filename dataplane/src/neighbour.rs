//! The neighbour (ARP) table: IPv4 next hop → MAC, per port, shared by all
//! workers (RFC 826 resolution; states after RFC 4861 §7.3.2 / Linux
//! neighbour states, simplified).
//!
//! Any worker may learn an entry (whichever received the ARP reply) and every
//! worker reads it on the forwarding path, so the table is a fixed-size
//! open-addressing array of atomics: no lock, no allocation after
//! construction, no per-packet syscall. Entries are never removed (next hops
//! are few and long-lived); a full table refuses new entries and counts them.
//!
//! States of an entry:
//! * **incomplete**: requested, no answer yet. A request is (re)sent at most
//!   every `retrans_ms`; after `max_probes` unanswered requests the entry is
//!   **failed** for `failed_hold_ms`, then probing starts over.
//! * **reachable**: a MAC confirmed less than `reachable_ms` ago.
//! * **stale**: a MAC older than that: still used, and re-probed (at most one
//!   request per `retrans_ms`) until a reply confirms it again; after
//!   `max_probes` unanswered re-probes the MAC is forgotten and the entry is
//!   failed like an unanswered one.
//! * **static**: configured; never probed, never replaced by learning.
//!
//! Every access is `Relaxed` except the MAC publication: the learner stores
//! the MAC with `Release` after the key, readers load it with `Acquire`, so a
//! reader that sees a MAC sees the entry it belongs to.

use crate::packet::PortId;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Timers and limits of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeighbourConfig {
    /// Entries (next hops over all ports); rounded up to a power of two.
    pub capacity: u32,
    /// How long a confirmed MAC is used without re-probing.
    pub reachable_ms: u64,
    /// Minimum gap between two requests for one address.
    pub retrans_ms: u64,
    /// Unanswered requests before an entry is failed.
    pub max_probes: u32,
    /// How long a failed entry stays failed before probing again.
    pub failed_hold_ms: u64,
}

impl Default for NeighbourConfig {
    fn default() -> Self {
        NeighbourConfig {
            capacity: 16_384,
            reachable_ms: 30_000,
            retrans_ms: 1_000,
            max_probes: 3,
            failed_hold_ms: 5_000,
        }
    }
}

/// What the forwarding path should do for a next hop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// Send to this MAC; `probe` asks the caller to send an ARP request too
    /// (a stale entry being re-confirmed).
    Known { mac: [u8; 6], probe: bool },
    /// No MAC yet: hold the packet; `probe` asks the caller to send a request
    /// now (this caller won the right to, for this `retrans_ms` period).
    Pending { probe: bool },
    /// Resolution failed recently: drop.
    Failed,
    /// The table is full: drop.
    TableFull,
}

const MAC_VALID: u64 = 1 << 48;
const MAC_STATIC: u64 = 1 << 49;

#[derive(Debug, Default)]
struct Slot {
    /// 0 = empty, else `1 << 40 | port << 32 | ip`.
    key: AtomicU64,
    /// 48-bit MAC | `MAC_VALID` | `MAC_STATIC`, 0 while incomplete.
    mac: AtomicU64,
    confirmed_ms: AtomicU64,
    requested_ms: AtomicU64,
    probes: AtomicU32,
}

/// One neighbour as listed for operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeighbourEntry {
    pub port: PortId,
    pub addr: Ipv4Addr,
    pub mac: Option<[u8; 6]>,
    pub is_static: bool,
    pub confirmed_ms: u64,
    pub probes: u32,
}

/// The shared neighbour table.
#[derive(Debug)]
pub struct NeighbourTable {
    slots: Box<[Slot]>,
    mask: usize,
    config: NeighbourConfig,
    refused: AtomicU64,
}

#[inline]
fn slot_key(port: PortId, ip: Ipv4Addr) -> u64 {
    1 << 40 | u64::from(port) << 32 | u64::from(u32::from(ip))
}

#[inline]
fn mac_bits(mac: [u8; 6]) -> u64 {
    let mut b = [0u8; 8];
    b[2..].copy_from_slice(&mac);
    u64::from_be_bytes(b)
}

#[inline]
fn mac_of(bits: u64) -> [u8; 6] {
    let b = bits.to_be_bytes();
    [b[2], b[3], b[4], b[5], b[6], b[7]]
}

impl Default for NeighbourTable {
    fn default() -> Self {
        Self::new(NeighbourConfig::default())
    }
}

impl NeighbourTable {
    pub fn new(config: NeighbourConfig) -> Self {
        let n = config.capacity.max(16).next_power_of_two() as usize;
        NeighbourTable {
            slots: (0..n).map(|_| Slot::default()).collect(),
            mask: n - 1,
            config,
            refused: AtomicU64::new(0),
        }
    }

    pub fn config(&self) -> &NeighbourConfig {
        &self.config
    }

    /// New entries refused because the table was full.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Find the slot of `key`, inserting it if `insert`.
    #[inline]
    fn find(&self, key: u64, insert: bool) -> Option<&Slot> {
        let start = (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize;
        for i in 0..=self.mask {
            let slot = &self.slots[(start + i) & self.mask];
            let k = slot.key.load(Ordering::Acquire);
            if k == key {
                return Some(slot);
            }
            if k == 0 {
                if !insert {
                    return None;
                }
                match slot
                    .key
                    .compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => return Some(slot),
                    Err(other) if other == key => return Some(slot),
                    Err(_) => continue,
                }
            }
        }
        if insert {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        None
    }

    /// Claim the right to send a request for this slot now.
    #[inline]
    fn claim_probe(&self, slot: &Slot, now_ms: u64) -> bool {
        let last = slot.requested_ms.load(Ordering::Relaxed);
        if last != 0 && now_ms.saturating_sub(last) < self.config.retrans_ms {
            return false;
        }
        slot.requested_ms
            .compare_exchange(last, now_ms.max(1), Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// Look up the next hop `ip` on `port` for a packet to send now.
    #[inline]
    pub fn resolve(&self, port: PortId, ip: Ipv4Addr, now_ms: u64) -> Resolution {
        let Some(slot) = self.find(slot_key(port, ip), true) else {
            return Resolution::TableFull;
        };
        let mac = slot.mac.load(Ordering::Acquire);
        if mac & MAC_VALID != 0 {
            let stale = mac & MAC_STATIC == 0
                && now_ms.saturating_sub(slot.confirmed_ms.load(Ordering::Relaxed))
                    >= self.config.reachable_ms;
            if !stale {
                return Resolution::Known {
                    mac: mac_of(mac),
                    probe: false,
                };
            }
            // A stale MAC whose re-probes all went unanswered is forgotten
            // (Linux PROBE -> FAILED): the neighbour moved or died.
            let probes = slot.probes.load(Ordering::Relaxed);
            let since_ms = now_ms.saturating_sub(slot.requested_ms.load(Ordering::Relaxed));
            if probes >= self.config.max_probes && since_ms >= self.config.retrans_ms {
                let _ = slot
                    .mac
                    .compare_exchange(mac, 0, Ordering::AcqRel, Ordering::Relaxed);
                return Resolution::Failed;
            }
            let probe = self.claim_probe(slot, now_ms);
            if probe {
                slot.probes.fetch_add(1, Ordering::Relaxed);
            }
            return Resolution::Known {
                mac: mac_of(mac),
                probe,
            };
        }
        let probes = slot.probes.load(Ordering::Relaxed);
        if probes >= self.config.max_probes {
            let since_ms = now_ms.saturating_sub(slot.requested_ms.load(Ordering::Relaxed));
            // The last request gets its full retrans period to be answered.
            if since_ms < self.config.retrans_ms {
                return Resolution::Pending { probe: false };
            }
            if since_ms < self.config.retrans_ms + self.config.failed_hold_ms {
                return Resolution::Failed;
            }
            slot.probes.store(0, Ordering::Relaxed);
        }
        let probe = self.claim_probe(slot, now_ms);
        if probe {
            slot.probes.fetch_add(1, Ordering::Relaxed);
        }
        Resolution::Pending { probe }
    }

    /// The MAC of a next hop without side effects (holding queues re-check
    /// with this).
    #[inline]
    pub fn peek(&self, port: PortId, ip: Ipv4Addr) -> Option<[u8; 6]> {
        let slot = self.find(slot_key(port, ip), false)?;
        let mac = slot.mac.load(Ordering::Acquire);
        (mac & MAC_VALID != 0).then(|| mac_of(mac))
    }

    /// Record `mac` for `ip` on `port` (from an ARP reply or request).
    /// Static entries are not replaced. Only addresses already in the table
    /// are learned when `only_known` (unsolicited ARP from strangers must not
    /// fill the table).
    pub fn learn(
        &self,
        port: PortId,
        ip: Ipv4Addr,
        mac: [u8; 6],
        now_ms: u64,
        only_known: bool,
    ) -> bool {
        let Some(slot) = self.find(slot_key(port, ip), !only_known) else {
            return false;
        };
        if slot.mac.load(Ordering::Acquire) & MAC_STATIC != 0 {
            return false;
        }
        slot.confirmed_ms.store(now_ms, Ordering::Relaxed);
        slot.probes.store(0, Ordering::Relaxed);
        slot.mac.store(mac_bits(mac) | MAC_VALID, Ordering::Release);
        true
    }

    /// Configure a static neighbour (never probed, never learned over).
    pub fn set_static(&self, port: PortId, ip: Ipv4Addr, mac: [u8; 6]) -> bool {
        let Some(slot) = self.find(slot_key(port, ip), true) else {
            return false;
        };
        slot.mac
            .store(mac_bits(mac) | MAC_VALID | MAC_STATIC, Ordering::Release);
        true
    }

    /// Turn static entries that `keep` rejects back into ordinary,
    /// unresolved ones (a reload removed them from the configuration): ARP
    /// resolves them from now on. Cold path: walks the whole table.
    pub fn retain_static(&self, mut keep: impl FnMut(PortId, Ipv4Addr) -> bool) {
        for slot in self.slots.iter() {
            let key = slot.key.load(Ordering::Acquire);
            if key == 0 || slot.mac.load(Ordering::Acquire) & MAC_STATIC == 0 {
                continue;
            }
            if !keep((key >> 32 & 0xff) as PortId, Ipv4Addr::from(key as u32)) {
                slot.probes.store(0, Ordering::Relaxed);
                slot.requested_ms.store(0, Ordering::Relaxed);
                slot.mac.store(0, Ordering::Release);
            }
        }
    }

    /// Every entry, for operators (cold path; allocates).
    pub fn entries(&self) -> Vec<NeighbourEntry> {
        self.slots
            .iter()
            .filter_map(|s| {
                let key = s.key.load(Ordering::Acquire);
                if key == 0 {
                    return None;
                }
                let mac = s.mac.load(Ordering::Acquire);
                Some(NeighbourEntry {
                    port: (key >> 32 & 0xff) as PortId,
                    addr: Ipv4Addr::from(key as u32),
                    mac: (mac & MAC_VALID != 0).then(|| mac_of(mac)),
                    is_static: mac & MAC_STATIC != 0,
                    confirmed_ms: s.confirmed_ms.load(Ordering::Relaxed),
                    probes: s.probes.load(Ordering::Relaxed),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const A: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 10);
    const MAC: [u8; 6] = [2, 0xbb, 0, 0, 0, 10];

    fn table() -> NeighbourTable {
        NeighbourTable::new(NeighbourConfig::default())
    }

    #[test]
    fn unknown_next_hop_is_probed_once_per_retrans_period_then_learned() {
        let t = table();
        assert_eq!(t.resolve(1, A, 100), Resolution::Pending { probe: true });
        assert_eq!(
            t.resolve(1, A, 500),
            Resolution::Pending { probe: false },
            "one request per second"
        );
        assert_eq!(t.resolve(1, A, 1_100), Resolution::Pending { probe: true });
        assert!(t.learn(1, A, MAC, 1_200, true));
        assert_eq!(
            t.resolve(1, A, 1_300),
            Resolution::Known {
                mac: MAC,
                probe: false
            }
        );
        assert_eq!(t.peek(1, A), Some(MAC));
        assert_eq!(t.peek(0, A), None, "per port");
    }

    #[test]
    fn unanswered_probes_fail_the_entry_for_the_hold_time_then_retry() {
        let t = table();
        for (now, probe) in [(1, true), (1_001, true), (2_001, true)] {
            assert_eq!(t.resolve(0, A, now), Resolution::Pending { probe });
        }
        assert_eq!(t.resolve(0, A, 3_001), Resolution::Failed);
        assert_eq!(t.resolve(0, A, 7_999), Resolution::Failed);
        assert_eq!(
            t.resolve(0, A, 8_002),
            Resolution::Pending { probe: true },
            "probing starts over"
        );
    }

    #[test]
    fn stale_entries_keep_forwarding_and_are_reprobed() {
        let t = table();
        t.learn(0, A, MAC, 0, false);
        assert_eq!(
            t.resolve(0, A, 29_999),
            Resolution::Known {
                mac: MAC,
                probe: false
            }
        );
        assert_eq!(
            t.resolve(0, A, 30_000),
            Resolution::Known {
                mac: MAC,
                probe: true
            }
        );
        assert_eq!(
            t.resolve(0, A, 30_500),
            Resolution::Known {
                mac: MAC,
                probe: false
            }
        );
        let new_mac = [2, 0xbb, 0, 0, 0, 99];
        t.learn(0, A, new_mac, 30_600, true);
        assert_eq!(
            t.resolve(0, A, 30_700),
            Resolution::Known {
                mac: new_mac,
                probe: false
            }
        );
    }

    #[test]
    fn a_stale_mac_that_stops_answering_is_forgotten() {
        let t = table();
        t.learn(0, A, MAC, 0, false);
        for now in [30_000, 31_000, 32_000] {
            assert_eq!(
                t.resolve(0, A, now),
                Resolution::Known {
                    mac: MAC,
                    probe: true
                }
            );
        }
        assert_eq!(
            t.resolve(0, A, 32_500),
            Resolution::Known {
                mac: MAC,
                probe: false
            }
        );
        assert_eq!(
            t.resolve(0, A, 33_000),
            Resolution::Failed,
            "three re-probes unanswered"
        );
        assert_eq!(t.peek(0, A), None);
        // A reply brings it back.
        assert!(t.learn(0, A, MAC, 33_100, true));
        assert_eq!(
            t.resolve(0, A, 33_200),
            Resolution::Known {
                mac: MAC,
                probe: false
            }
        );
    }

    #[test]
    fn static_entries_are_never_probed_or_overwritten() {
        let t = table();
        t.set_static(0, A, MAC);
        assert!(!t.learn(0, A, [9; 6], 5, false));
        assert_eq!(
            t.resolve(0, A, 10_000_000),
            Resolution::Known {
                mac: MAC,
                probe: false
            }
        );
        assert!(t.entries()[0].is_static);
    }

    #[test]
    fn strangers_are_not_learned_unless_asked_and_a_full_table_refuses() {
        let t = NeighbourTable::new(NeighbourConfig {
            capacity: 16,
            ..NeighbourConfig::default()
        });
        assert!(!t.learn(0, A, MAC, 0, true), "unsolicited");
        for i in 0..16u32 {
            t.resolve(0, Ipv4Addr::from(0x0a00_0000 + i), 0);
        }
        assert_eq!(
            t.resolve(0, Ipv4Addr::new(10, 9, 9, 9), 0),
            Resolution::TableFull
        );
        assert_eq!(t.refused(), 1);
        assert_eq!(t.entries().len(), 16);
    }

    #[test]
    fn concurrent_learners_and_readers_agree() {
        let t = Arc::new(table());
        let writers: Vec<_> = (0..2u8)
            .map(|w| {
                let t = Arc::clone(&t);
                std::thread::spawn(move || {
                    for i in 0..2_000u32 {
                        let ip = Ipv4Addr::from(0x0a01_0000 + i);
                        let b = i.to_be_bytes();
                        t.learn(w, ip, [2, w, b[0], b[1], b[2], b[3]], 1, false);
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        for w in 0..2u8 {
            for i in 0..2_000u32 {
                let b = i.to_be_bytes();
                assert_eq!(
                    t.peek(w, Ipv4Addr::from(0x0a01_0000 + i)),
                    Some([2, w, b[0], b[1], b[2], b[3]])
                );
            }
        }
    }
}
