//! Flow identity: the 5-tuple every stage after parsing works with.
//!
//! A [`FlowKey`] is directional: `src -> dst` exactly as the packet carries it.
//! Conntrack indexes one flow under two keys, the *original* key (client ->
//! service address, as the client sent it) and the *reply* key (backend ->
//! gateway, as the backend will send it after NAT).
//!
//! [`FlowKey::stable_hash`] is xxh3-64 with a fixed seed over a fixed byte
//! layout, so two Portico processes (or two builds on different machines) hash
//! the same tuple to the same value. Maglev relies on this to make several
//! gateways behind ECMP choose the same backend without sharing state.
//!
//! The tables a sender can fill with tuples of its choosing (the conntrack
//! index, the ClientIP affinity table, the SNAT quarantine) must not be
//! placed by that public function: precomputed colliding tuples would make
//! every lookup walk one long cluster (a hash flood). They use a
//! [`TableHasher`] instead: xxh3-64 keyed with a per-process random secret
//! (XXH3's custom-secret mode), the same on every worker of the process, and
//! unknown outside it. The two never mix: Maglev and steering use
//! `stable_hash`, table placement uses `TableHasher::hash`.

use std::io::{self, Read};
use std::net::Ipv4Addr;

/// Fixed seed of every stable hash in the dataplane. Changing it changes the
/// backend every flow maps to: never change it in a running fleet.
pub const STABLE_HASH_SEED: u64 = 0x706f_7274_6963_6f21; // "portico!"

/// IP protocols the dataplane tracks.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
#[repr(u8)]
pub enum Proto {
    Icmp = 1,
    Tcp = 6,
    Udp = 17,
}

impl Proto {
    /// The protocol for an IPv4 protocol number, if the dataplane tracks it.
    pub fn from_ip_number(n: u8) -> Option<Self> {
        match n {
            1 => Some(Proto::Icmp),
            6 => Some(Proto::Tcp),
            17 => Some(Proto::Udp),
            _ => None,
        }
    }

    /// IANA protocol number.
    pub fn ip_number(self) -> u8 {
        self as u8
    }

    /// Lower-case name, as used in configs and CLI output.
    pub fn name(self) -> &'static str {
        match self {
            Proto::Icmp => "icmp",
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }
}

impl std::fmt::Display for Proto {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A directional 5-tuple. For ICMP echo the identifier takes the place of
/// both ports (as Linux conntrack does).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct FlowKey {
    pub src_ip: Ipv4Addr,
    pub dst_ip: Ipv4Addr,
    pub src_port: u16,
    pub dst_port: u16,
    pub proto: Proto,
}

impl FlowKey {
    pub const fn new(
        proto: Proto,
        src_ip: Ipv4Addr,
        src_port: u16,
        dst_ip: Ipv4Addr,
        dst_port: u16,
    ) -> Self {
        FlowKey {
            src_ip,
            dst_ip,
            src_port,
            dst_port,
            proto,
        }
    }

    /// The same flow seen from the other end.
    #[inline]
    pub fn reversed(&self) -> Self {
        FlowKey {
            src_ip: self.dst_ip,
            dst_ip: self.src_ip,
            src_port: self.dst_port,
            dst_port: self.src_port,
            proto: self.proto,
        }
    }

    /// Fixed, endian-independent byte layout used for hashing.
    #[inline]
    pub fn to_bytes(&self) -> [u8; 16] {
        let s = self.src_ip.octets();
        let d = self.dst_ip.octets();
        let sp = self.src_port.to_be_bytes();
        let dp = self.dst_port.to_be_bytes();
        [
            s[0],
            s[1],
            s[2],
            s[3],
            d[0],
            d[1],
            d[2],
            d[3],
            sp[0],
            sp[1],
            dp[0],
            dp[1],
            self.proto as u8,
            0,
            0,
            0,
        ]
    }

    /// xxh3-64 of [`Self::to_bytes`] with [`STABLE_HASH_SEED`]; identical in
    /// every Portico process.
    #[inline]
    pub fn stable_hash(&self) -> u64 {
        xxhash_rust::xxh3::xxh3_64_with_seed(&self.to_bytes(), STABLE_HASH_SEED)
    }
}

/// Stable hash of a client address alone (ClientIP affinity falls back to
/// Maglev on this, so a client keeps its backend on every core and gateway).
#[inline]
pub fn stable_addr_hash(addr: Ipv4Addr) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(&addr.octets(), STABLE_HASH_SEED)
}

/// Bytes of a [`TableHasher`] secret (XXH3's default secret size; at least
/// `XXH3_SECRET_SIZE_MIN`, 136).
pub const TABLE_SECRET_LEN: usize = 192;

/// The keyed hash that places flows in the per-worker tables (see the
/// module docs). Cheap to copy into each table that needs it; the secret
/// is never printed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TableHasher {
    secret: [u8; TABLE_SECRET_LEN],
}

impl TableHasher {
    /// A hasher with a secret from the kernel's random source
    /// (`/dev/urandom`), for a gateway process.
    pub fn random() -> io::Result<Self> {
        let mut secret = [0u8; TABLE_SECRET_LEN];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut secret)?;
        Ok(TableHasher { secret })
    }

    /// A hasher whose secret is derived from `seed` (SplitMix64): for tests,
    /// benches and simulations that must be reproducible, never for a
    /// gateway facing traffic.
    pub fn from_seed(seed: u64) -> Self {
        let mut secret = [0u8; TABLE_SECRET_LEN];
        let mut z = seed;
        for chunk in secret.chunks_mut(8) {
            z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut x = z;
            x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            x ^= x >> 31;
            chunk.copy_from_slice(x.to_le_bytes().get(..chunk.len()).unwrap_or_default());
        }
        TableHasher { secret }
    }

    /// Where `key` goes in a table: keyed xxh3-64 of [`FlowKey::to_bytes`].
    #[inline]
    pub fn hash(&self, key: &FlowKey) -> u64 {
        xxhash_rust::xxh3::xxh3_64_with_secret(&key.to_bytes(), &self.secret)
    }

    /// Where an arbitrary short byte string goes (the affinity table's
    /// service + client address).
    #[inline]
    pub fn hash_bytes(&self, bytes: &[u8]) -> u64 {
        xxhash_rust::xxh3::xxh3_64_with_secret(bytes, &self.secret)
    }
}

impl std::fmt::Debug for TableHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TableHasher { secret: <hidden> }")
    }
}

impl std::fmt::Display for FlowKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}:{} -> {}:{}",
            self.proto, self.src_ip, self.src_port, self.dst_ip, self.dst_port
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reversed_twice_is_identity_and_hash_is_directional() {
        let k = FlowKey::new(
            Proto::Tcp,
            Ipv4Addr::new(10, 0, 0, 1),
            40000,
            Ipv4Addr::new(10, 0, 0, 2),
            80,
        );
        assert_eq!(k.reversed().reversed(), k);
        assert_ne!(k.stable_hash(), k.reversed().stable_hash());
    }

    #[test]
    fn table_hashers_differ_by_secret_and_hide_it() {
        let k = FlowKey::new(
            Proto::Tcp,
            Ipv4Addr::new(10, 0, 0, 1),
            40000,
            Ipv4Addr::new(10, 0, 0, 2),
            80,
        );
        let a = TableHasher::random().expect("urandom");
        let b = TableHasher::random().expect("urandom");
        assert_ne!(
            a.hash(&k),
            b.hash(&k),
            "two processes place flows differently"
        );
        assert_ne!(a.hash(&k), k.stable_hash(), "not the public hash");
        assert_eq!(
            TableHasher::from_seed(7).hash(&k),
            TableHasher::from_seed(7).hash(&k)
        );
        assert_ne!(
            TableHasher::from_seed(7).hash(&k),
            TableHasher::from_seed(8).hash(&k)
        );
        assert_eq!(format!("{a:?}"), "TableHasher { secret: <hidden> }");
    }

    #[test]
    fn stable_hash_is_pinned() {
        // The value is part of the wire contract between gateways in one fleet.
        let k = FlowKey::new(
            Proto::Udp,
            Ipv4Addr::new(198, 51, 100, 7),
            40000,
            Ipv4Addr::new(203, 0, 113, 10),
            53,
        );
        let expected = xxhash_rust::xxh3::xxh3_64_with_seed(
            &[
                198, 51, 100, 7, 203, 0, 113, 10, 0x9c, 0x40, 0, 53, 17, 0, 0, 0,
            ],
            STABLE_HASH_SEED,
        );
        assert_eq!(k.stable_hash(), expected);
    }
}
