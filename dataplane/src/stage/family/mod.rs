//! What the flow stage ([`super::flow`]) and the SYN proxy
//! ([`super::synproxy`]) need to know of an address family, and nothing
//! else: the flow logic is written once over [`StageFamily`] and
//! monomorphised per family ([`v4`], [`v6`]), so every defence (RSTs for
//! the `reset` policy, challenge ACKs, client-port remapping, the
//! per-source limit, the SYN proxy) exists once and both families get it
//! by construction, while an IPv4 packet pays nothing for IPv6.
//!
//! Per family: where the packet's key is ([`PacketMeta::key`] or
//! [`PacketMeta::key6`]), the snapshot's listeners and owned addresses of
//! the family, the TTL/hop limit check, the L3 header of a TCP segment the
//! gateway writes itself (an answer in place, a generated ACK; IPv4
//! header checksum, or the IPv6 payload length), the TCP checksum over
//! the family's pseudo-header (RFC 9293 §3.1, RFC 8200 §8.1), the MSS a
//! backend behind a port could announce (MTU − 40 for IPv4, − 60 for IPv6,
//! never below IPv6's 1220: RFC 8200 §5's minimum MTU 1280) and the SYN
//! cookie's MSS table, and the bucket key of the per-source limit (the
//! address, or for IPv6 its prefix: one host owns a /64).
//!
//! Invariant: an answer written in place has no IP options or extension
//! headers (an IPv6 answer drops them and moves the TCP header up to 40
//! bytes after the IPv6 header, [`StageFamily::answer_l3`] updates
//! `meta.l4_offset`).

pub mod v4;
pub mod v6;

use crate::counters::DropReason;
use crate::flow::{FlowKeyOf, IpFamily, Proto};
use crate::packet::PacketMeta;
use crate::snapshot::{Listener, NextHop, OwnedAddr, Snapshot};
use std::net::SocketAddr;

/// An address family as the flow stage sees it (implemented for
/// [`std::net::Ipv4Addr`] and [`std::net::Ipv6Addr`]).
pub trait StageFamily: IpFamily {
    /// Length of the L3 header the gateway writes (no options).
    const L3_HEADER_LEN: usize;
    /// Ethertype of the family.
    const ETHERTYPE: u16;
    /// Why a packet whose TTL / hop limit runs out here is dropped.
    const HOP_EXPIRED: DropReason;
    /// The MSS values a SYN cookie of this family can carry (3 bits).
    const COOKIE_MSS: [u16; 8];

    /// The packet's key of this family.
    fn key(meta: &PacketMeta) -> &FlowKeyOf<Self>;
    /// The listener of `(proto, addr, port)`.
    fn listener(snap: &Snapshot, proto: Proto, addr: Self, port: u16) -> Option<&Listener>;
    /// The owned address `addr`.
    fn owned(snap: &Snapshot, addr: Self) -> Option<&OwnedAddr>;
    /// `addr` as a socket address of this family, if it is one.
    fn socket_of(addr: &SocketAddr) -> Option<Self::Socket>;
    /// The next hop's address, if of this family.
    fn next_hop(hop: &NextHop) -> Option<Self>;
    /// The TTL / hop limit of the L3 header at the start of `l3`.
    fn hop_limit(l3: &[u8]) -> u8;
    /// The TCP checksum of `seg` (checksum field zero) from `key.src_ip`
    /// to `key.dst_ip`.
    fn tcp_checksum(key: &FlowKeyOf<Self>, seg: &[u8]) -> u16;
    /// Make the L3 header at `meta.l3_offset` of `buf` the header of a
    /// TCP segment of `l4_len` bytes from `key.src_ip` to `key.dst_ip`
    /// (TTL / hop limit `ttl` when given, else kept), without options or
    /// extension headers: may move `meta.l4_offset` down (the caller
    /// writes the TCP header after). False when `buf` is too short.
    fn answer_l3(
        buf: &mut [u8],
        meta: &mut PacketMeta,
        key: &FlowKeyOf<Self>,
        l4_len: usize,
        ttl: Option<u8>,
    ) -> bool;
    /// Write a fresh L3 header (TTL `ttl`) into `h` (exactly
    /// [`Self::L3_HEADER_LEN`] bytes) for a TCP segment of `l4_len` bytes.
    fn write_l3(h: &mut [u8], key: &FlowKeyOf<Self>, l4_len: usize, ttl: u8);
    /// The MSS a backend behind a port of `mtu` could announce.
    fn mss_for_mtu(mtu: u16) -> u16;
    /// The key of `src`'s bucket in the per-source new-flow limit: the
    /// address, or its first `v6_prefix_len` bits for IPv6.
    fn source_key(src: Self, v6_prefix_len: u8) -> u128;
}
