//! Bytes per flow of each family, from the types' sizes and from what a
//! worker's conntrack table allocates at 2^20 flows — the figures
//! bench/RESULTS.md ("IPv6 next to IPv4 in criterion") and DESIGN.md
//! ("Performance") state:
//!
//! | per flow            | IPv4  | IPv6  |
//! |---------------------|-------|-------|
//! | record (`Flow<A>`)  |  64 B | 128 B |
//! | TCP line (`TcpExt`) |  64 B |  64 B |
//! | free list           |   4 B |   4 B |
//! | index (2 × 8 B, ½ full) | 32 B | 32 B |
//! | **total**           | 164 B | 228 B |
//!
//! The index holds 8-byte entries (tag and slot, not the key) whatever the
//! family, so only the record grows with IPv6's addresses: an IPv6 flow
//! costs 64 B more than an IPv4 one, and IPv4 flows pay nothing for IPv6.

use dataplane::conntrack::{Conntrack, ConntrackConfig, Flow, TcpExt};
use dataplane::flow::{IpFamily, TableHasher};
use std::mem::size_of;
use std::net::{Ipv4Addr, Ipv6Addr};

const FLOWS: u32 = 1 << 20;

/// Bytes per flow of a table of `A` sized for [`FLOWS`].
fn bytes_per_flow<A: IpFamily>() -> usize {
    let ct: Conntrack<A> = Conntrack::new(
        ConntrackConfig::with_capacity(FLOWS),
        TableHasher::from_seed(1),
    )
    .expect("a table of 2^20 flows");
    assert_eq!(ct.capacity(), FLOWS as usize);
    let bytes = ct.memory_bytes();
    assert_eq!(bytes % FLOWS as usize, 0, "{bytes} B for {FLOWS} flows");
    bytes / FLOWS as usize
}

#[test]
fn a_flow_costs_164_bytes_over_ipv4_and_228_over_ipv6() {
    assert_eq!(size_of::<Flow<Ipv4Addr>>(), 64, "IPv4 record: one line");
    assert_eq!(size_of::<Flow<Ipv6Addr>>(), 128, "IPv6 record: two lines");
    assert_eq!(size_of::<TcpExt>(), 64, "TCP tracking: one line");
    let (v4, v6) = (bytes_per_flow::<Ipv4Addr>(), bytes_per_flow::<Ipv6Addr>());
    println!("bytes per flow at {FLOWS} flows: IPv4 {v4}, IPv6 {v6}");
    assert_eq!(v4, 64 + 64 + 4 + 32, "IPv4");
    assert_eq!(v6, 128 + 64 + 4 + 32, "IPv6");
}
