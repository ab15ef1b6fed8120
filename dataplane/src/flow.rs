//! Flow identity: the 5-tuple every stage after parsing works with.
//!
//! The key is generic over the address family ([`IpFamily`]):
//! [`FlowKey`] (IPv4, 16 bytes) and [`FlowKey6`] (IPv6, 38 bytes) are the
//! two instances of [`FlowKeyOf`], and every table keyed by them is
//! monomorphised per family, so IPv4 flows keep their size and cost.
//!
//! A key is directional: `src -> dst` exactly as the packet carries it.
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
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

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

/// An IP family; on a parsed packet (re-exported as
/// `packet::Family`), which of `PacketMeta::key` (IPv4) and
/// `PacketMeta::key6` (IPv6) is valid.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum Family {
    #[default]
    V4,
    V6,
}

/// An IP address family the flow tables are generic over: implemented for
/// [`Ipv4Addr`] and [`Ipv6Addr`]. Every table is monomorphised per family,
/// so an IPv4 flow never pays for IPv6's wider addresses (see
/// [`FlowKeyOf`]).
pub trait IpFamily:
    Copy + Eq + Ord + std::hash::Hash + std::fmt::Debug + std::fmt::Display + Send + Sync + 'static
{
    /// The [`Family`] tag of packets of this family.
    const FAMILY: Family;
    /// The unspecified address (`0.0.0.0`, `::`).
    const UNSPECIFIED: Self;
    /// Width of the address in bytes (4, 16).
    const LEN: usize;
    /// The fixed byte layout of a key of this family ([`FlowKeyOf::to_bytes`]).
    type KeyBytes: AsRef<[u8]> + Copy;
    /// A socket address of this family ([`SocketAddrV4`], [`SocketAddrV6`]).
    type Socket: Copy + Eq + std::hash::Hash + std::fmt::Debug + std::fmt::Display + Send + Sync;
    /// The address and port of a socket address.
    fn socket_parts(socket: Self::Socket) -> (Self, u16);
    /// A socket address of this family.
    fn socket(addr: Self, port: u16) -> Self::Socket;
    /// The address's octets, as the wire carries them.
    type Octets: AsRef<[u8]> + Copy;
    fn octets(self) -> Self::Octets;
    /// The layout of [`FlowKeyOf::to_bytes`] for this family.
    fn key_bytes(key: &FlowKeyOf<Self>) -> Self::KeyBytes;
    /// The address as an [`IpAddr`].
    fn to_ip(self) -> IpAddr;
    /// The address of this family in `ip`, if it is one.
    fn from_ip(ip: IpAddr) -> Option<Self>;
}

impl IpFamily for Ipv4Addr {
    const FAMILY: Family = Family::V4;
    const UNSPECIFIED: Self = Ipv4Addr::UNSPECIFIED;
    const LEN: usize = 4;
    type KeyBytes = [u8; 16];
    type Octets = [u8; 4];
    type Socket = SocketAddrV4;

    #[inline(always)]
    fn socket_parts(socket: SocketAddrV4) -> (Self, u16) {
        (*socket.ip(), socket.port())
    }

    #[inline(always)]
    fn socket(addr: Self, port: u16) -> SocketAddrV4 {
        SocketAddrV4::new(addr, port)
    }

    #[inline(always)]
    fn octets(self) -> [u8; 4] {
        Ipv4Addr::octets(&self)
    }

    /// `src (4) dst (4) src port (2, BE) dst port (2, BE) proto (1) 0 0 0`.
    #[inline(always)]
    fn key_bytes(key: &FlowKey) -> [u8; 16] {
        let s = key.src_ip.octets();
        let d = key.dst_ip.octets();
        let sp = key.src_port.to_be_bytes();
        let dp = key.dst_port.to_be_bytes();
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
            key.proto as u8,
            0,
            0,
            0,
        ]
    }

    #[inline]
    fn to_ip(self) -> IpAddr {
        IpAddr::V4(self)
    }

    #[inline]
    fn from_ip(ip: IpAddr) -> Option<Self> {
        match ip {
            IpAddr::V4(a) => Some(a),
            IpAddr::V6(_) => None,
        }
    }
}

impl IpFamily for Ipv6Addr {
    const FAMILY: Family = Family::V6;
    const UNSPECIFIED: Self = Ipv6Addr::UNSPECIFIED;
    const LEN: usize = 16;
    type KeyBytes = [u8; 40];
    type Octets = [u8; 16];
    type Socket = SocketAddrV6;

    #[inline(always)]
    fn socket_parts(socket: SocketAddrV6) -> (Self, u16) {
        (*socket.ip(), socket.port())
    }

    #[inline(always)]
    fn socket(addr: Self, port: u16) -> SocketAddrV6 {
        SocketAddrV6::new(addr, port, 0, 0)
    }

    #[inline(always)]
    fn octets(self) -> [u8; 16] {
        Ipv6Addr::octets(&self)
    }

    /// `src (16) dst (16) src port (2, BE) dst port (2, BE) proto (1) 0 0 0`.
    #[inline(always)]
    fn key_bytes(key: &FlowKey6) -> [u8; 40] {
        let mut b = [0u8; 40];
        b[..16].copy_from_slice(&key.src_ip.octets());
        b[16..32].copy_from_slice(&key.dst_ip.octets());
        b[32..34].copy_from_slice(&key.src_port.to_be_bytes());
        b[34..36].copy_from_slice(&key.dst_port.to_be_bytes());
        b[36] = key.proto as u8;
        b
    }

    #[inline]
    fn to_ip(self) -> IpAddr {
        IpAddr::V6(self)
    }

    #[inline]
    fn from_ip(ip: IpAddr) -> Option<Self> {
        match ip {
            IpAddr::V6(a) => Some(a),
            IpAddr::V4(_) => None,
        }
    }
}

/// A directional 5-tuple of family `A`. For ICMP echo the identifier takes
/// the place of both ports (as Linux conntrack does). [`Proto::Icmp`] is
/// the family's ICMP: ICMPv4 (protocol 1) in a [`FlowKey`], ICMPv6 (next
/// header 58) in a [`FlowKey6`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct FlowKeyOf<A> {
    pub src_ip: A,
    pub dst_ip: A,
    pub src_port: u16,
    pub dst_port: u16,
    pub proto: Proto,
}

/// An IPv4 5-tuple (16 bytes).
pub type FlowKey = FlowKeyOf<Ipv4Addr>;
/// An IPv6 5-tuple (38 bytes).
pub type FlowKey6 = FlowKeyOf<Ipv6Addr>;

impl<A: IpFamily> FlowKeyOf<A> {
    pub const fn new(proto: Proto, src_ip: A, src_port: u16, dst_ip: A, dst_port: u16) -> Self {
        FlowKeyOf {
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
        FlowKeyOf {
            src_ip: self.dst_ip,
            dst_ip: self.src_ip,
            src_port: self.dst_port,
            dst_port: self.src_port,
            proto: self.proto,
        }
    }

    /// Fixed, endian-independent byte layout used for hashing (16 bytes for
    /// IPv4, 40 for IPv6; see [`IpFamily::key_bytes`]).
    #[inline]
    pub fn to_bytes(&self) -> A::KeyBytes {
        A::key_bytes(self)
    }

    /// xxh3-64 of [`Self::to_bytes`] with [`STABLE_HASH_SEED`]; identical in
    /// every Portico process.
    #[inline]
    pub fn stable_hash(&self) -> u64 {
        xxhash_rust::xxh3::xxh3_64_with_seed(self.to_bytes().as_ref(), STABLE_HASH_SEED)
    }
}

/// Stable hash of a client address alone (ClientIP affinity falls back to
/// Maglev on this, so a client keeps its backend on every core and gateway).
#[inline]
pub fn stable_addr_hash<A: IpFamily>(addr: A) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(addr.octets().as_ref(), STABLE_HASH_SEED)
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

    /// Where `key` goes in a table: keyed xxh3-64 of
    /// [`FlowKeyOf::to_bytes`].
    #[inline]
    pub fn hash<A: IpFamily>(&self, key: &FlowKeyOf<A>) -> u64 {
        xxhash_rust::xxh3::xxh3_64_with_secret(key.to_bytes().as_ref(), &self.secret)
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

impl<A: IpFamily> std::fmt::Display for FlowKeyOf<A> {
    /// `tcp 10.0.0.1:40000 -> 10.0.0.2:80`, `tcp [2001:db8::1]:40000 -> ...`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} -> {}",
            self.proto,
            SocketAddr::new(self.src_ip.to_ip(), self.src_port),
            SocketAddr::new(self.dst_ip.to_ip(), self.dst_port)
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

    #[test]
    fn ipv6_stable_hash_is_pinned_and_keys_display_with_brackets() {
        let src: Ipv6Addr = "2001:db8::7".parse().unwrap();
        let dst: Ipv6Addr = "2001:db8:1::10".parse().unwrap();
        let k = FlowKey6::new(Proto::Tcp, src, 40000, dst, 443);
        let mut bytes = [0u8; 40];
        bytes[..16].copy_from_slice(&src.octets());
        bytes[16..32].copy_from_slice(&dst.octets());
        bytes[32..37].copy_from_slice(&[0x9c, 0x40, 0x01, 0xbb, 6]);
        assert_eq!(
            k.stable_hash(),
            xxhash_rust::xxh3::xxh3_64_with_seed(&bytes, STABLE_HASH_SEED)
        );
        assert_eq!(k.reversed().reversed(), k);
        assert_ne!(k.stable_hash(), k.reversed().stable_hash());
        assert_eq!(
            k.to_string(),
            "tcp [2001:db8::7]:40000 -> [2001:db8:1::10]:443"
        );
        let v4 = FlowKey::new(
            Proto::Udp,
            Ipv4Addr::new(10, 0, 0, 1),
            5,
            Ipv4Addr::new(10, 0, 0, 2),
            53,
        );
        assert_eq!(v4.to_string(), "udp 10.0.0.1:5 -> 10.0.0.2:53");
        assert_eq!(
            stable_addr_hash(Ipv4Addr::new(10, 0, 0, 1)),
            xxhash_rust::xxh3::xxh3_64_with_seed(&[10, 0, 0, 1], STABLE_HASH_SEED)
        );
        let h = TableHasher::from_seed(3);
        assert_ne!(h.hash(&k), h.hash(&k.reversed()));
    }
}
