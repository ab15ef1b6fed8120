//! The address families of the neighbour table and how each stores its
//! key in a slot: `(port, address)`, set once per slot and generation,
//! never changed or cleared (see "Reclaiming entries" in [the module
//! docs](super)).
//!
//! * **IPv4** ([`Key4`]): the whole key fits one word,
//!   `1 << 40 | port << 32 | address`, claimed with one compare-and-swap:
//!   exactly the code the table had before it served two families.
//! * **IPv6** ([`Key6`]): 8 + 128 bits do not fit one atomic word, so a slot
//!   holds a *tag* word (claimed by compare-and-swap: `CLAIMED | port << 48
//!   | 48-bit fingerprint of the address`) and the address in two more
//!   words, written by the claimer after its CAS and published by setting
//!   `READY` in the tag with `Release`. A lookup skips a slot whose tag
//!   differs (a different port or fingerprint: certainly another key) and
//!   compares the full address only once `READY` is seen (`Acquire`). An
//!   *insert* that meets its own tag not yet `READY` waits for it (a spin
//!   of at most the claimer's two stores, unless the claimer is preempted
//!   between them): going on past it could store the key twice, which the
//!   table's invariant forbids. A lookup that does not insert treats such a
//!   slot as absent (the entry is being created right now; not finding it
//!   is what it would have seen a moment earlier).

use super::{FamilyTable, NeighbourTable};
use crate::packet::PortId;
use std::fmt::Debug;
use std::hash::Hash;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};

/// What a slot's key is, for a lookup of one `(port, address)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyProbe {
    /// This key's slot (found, or claimed by this insert).
    Mine,
    /// Another key's slot: probe on.
    Other,
    /// An empty slot and the lookup does not insert: the key is absent.
    Absent,
}

/// How one family stores `(port, address)` in a slot.
pub trait SlotKey<A>: Default + Debug + Send + Sync {
    /// Where the probe sequence of `(port, addr)` starts (any `usize`, the
    /// table masks it).
    fn start(port: PortId, addr: A) -> usize;
    /// Compare this slot with `(port, addr)`; an empty slot is claimed when
    /// `insert`.
    fn probe(&self, port: PortId, addr: A, insert: bool) -> KeyProbe;
    /// The key stored, if any (and, for IPv6, published).
    fn get(&self) -> Option<(PortId, A)>;
}

/// An address family the neighbour table serves: [`Ipv4Addr`] (ARP) and
/// [`Ipv6Addr`] (NDP). Sealed: the table's invariants are proven for these
/// two key layouts only.
pub trait NeighbourAddr:
    Copy + Eq + Ord + Hash + Debug + Send + Sync + 'static + sealed::Sealed
{
    /// The slot key of this family.
    type Key: SlotKey<Self>;
    /// The family's unspecified address (`0.0.0.0`, `::`).
    const UNSPECIFIED: Self;
    /// This family's table in the two-family [`NeighbourTable`].
    fn family(table: &NeighbourTable) -> &FamilyTable<Self>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for std::net::Ipv4Addr {}
    impl Sealed for std::net::Ipv6Addr {}
}

/// The IPv4 slot key: `1 << 40 | port << 32 | address`, 0 = empty.
#[derive(Debug, Default)]
pub struct Key4(AtomicU64);

#[inline]
fn key4(port: PortId, ip: Ipv4Addr) -> u64 {
    1 << 40 | u64::from(port) << 32 | u64::from(u32::from(ip))
}

impl SlotKey<Ipv4Addr> for Key4 {
    #[inline]
    fn start(port: PortId, addr: Ipv4Addr) -> usize {
        (key4(port, addr).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize
    }

    #[inline]
    fn probe(&self, port: PortId, addr: Ipv4Addr, insert: bool) -> KeyProbe {
        let key = key4(port, addr);
        let k = self.0.load(Ordering::Acquire);
        if k == key {
            return KeyProbe::Mine;
        }
        if k != 0 {
            return KeyProbe::Other;
        }
        if !insert {
            return KeyProbe::Absent;
        }
        match self
            .0
            .compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => KeyProbe::Mine,
            Err(other) if other == key => KeyProbe::Mine,
            Err(_) => KeyProbe::Other,
        }
    }

    fn get(&self) -> Option<(PortId, Ipv4Addr)> {
        let key = self.0.load(Ordering::Acquire);
        (key != 0).then(|| ((key >> 32 & 0xff) as PortId, Ipv4Addr::from(key as u32)))
    }
}

impl NeighbourAddr for Ipv4Addr {
    type Key = Key4;
    const UNSPECIFIED: Self = Ipv4Addr::UNSPECIFIED;

    #[inline]
    fn family(table: &NeighbourTable) -> &FamilyTable<Self> {
        &table.v4
    }
}

/// The IPv6 slot key: a tag (`CLAIMED | port << 48 | fingerprint`, with
/// `READY` once the address words are written; 0 = empty) and the address.
#[derive(Debug, Default)]
pub struct Key6 {
    tag: AtomicU64,
    hi: AtomicU64,
    lo: AtomicU64,
}

const CLAIMED: u64 = 1 << 62;
const READY: u64 = 1 << 63;
const FINGERPRINT_BITS: u64 = (1 << 48) - 1;

#[inline]
fn halves(addr: Ipv6Addr) -> (u64, u64) {
    let bits = u128::from(addr);
    ((bits >> 64) as u64, bits as u64)
}

/// A 64-bit mix of the key (multiply-xorshift; not keyed: the addresses
/// resolved come from routes and backends, and learning only updates
/// addresses already in the table).
#[inline]
fn hash6(port: PortId, addr: Ipv6Addr) -> u64 {
    let (hi, lo) = halves(addr);
    let mut h = (hi ^ u64::from(port).rotate_left(56)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h = (h ^ h >> 29 ^ lo).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^ h >> 32
}

#[inline]
fn tag6(port: PortId, addr: Ipv6Addr) -> u64 {
    CLAIMED | u64::from(port) << 48 | hash6(port, addr) & FINGERPRINT_BITS
}

impl SlotKey<Ipv6Addr> for Key6 {
    #[inline]
    fn start(port: PortId, addr: Ipv6Addr) -> usize {
        // The top 16 bits first: independent of the fingerprint (low 48).
        hash6(port, addr).rotate_left(16) as usize
    }

    #[inline]
    fn probe(&self, port: PortId, addr: Ipv6Addr, insert: bool) -> KeyProbe {
        let want = tag6(port, addr);
        let mut tag = self.tag.load(Ordering::Acquire);
        loop {
            if tag == 0 {
                if !insert {
                    return KeyProbe::Absent;
                }
                match self
                    .tag
                    .compare_exchange(0, want, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => {
                        let (hi, lo) = halves(addr);
                        self.hi.store(hi, Ordering::Relaxed);
                        self.lo.store(lo, Ordering::Relaxed);
                        self.tag.store(want | READY, Ordering::Release);
                        return KeyProbe::Mine;
                    }
                    Err(now) => {
                        tag = now;
                        continue;
                    }
                }
            }
            if tag & !READY != want {
                return KeyProbe::Other;
            }
            if tag & READY == 0 {
                if !insert {
                    return KeyProbe::Absent;
                }
                // Another insert with this tag is writing the address.
                std::hint::spin_loop();
                tag = self.tag.load(Ordering::Acquire);
                continue;
            }
            let (hi, lo) = halves(addr);
            return if self.hi.load(Ordering::Relaxed) == hi && self.lo.load(Ordering::Relaxed) == lo
            {
                KeyProbe::Mine
            } else {
                KeyProbe::Other
            };
        }
    }

    fn get(&self) -> Option<(PortId, Ipv6Addr)> {
        let tag = self.tag.load(Ordering::Acquire);
        if tag & READY == 0 {
            return None;
        }
        let (hi, lo) = (
            self.hi.load(Ordering::Relaxed),
            self.lo.load(Ordering::Relaxed),
        );
        let port = (tag >> 48 & 0xff) as PortId;
        Some((port, Ipv6Addr::from(u128::from(hi) << 64 | u128::from(lo))))
    }
}

impl NeighbourAddr for Ipv6Addr {
    type Key = Key6;
    const UNSPECIFIED: Self = Ipv6Addr::UNSPECIFIED;

    #[inline]
    fn family(table: &NeighbourTable) -> &FamilyTable<Self> {
        &table.v6
    }
}
