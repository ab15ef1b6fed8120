//! Bytes per flow of each family, from the types' sizes and from what a
//! worker's conntrack table allocates at 2^20 flows — the figures
//! bench/RESULTS.md ("Flow memory: 128 B per IPv4 flow") and DESIGN.md
//! ("Performance") state:
//!
//! | per flow                                   | IPv4     | IPv6     |
//! |--------------------------------------------|----------|----------|
//! | record (`Flow<A>`, free list and scales inside) |  64 B | 128 B |
//! | TCP windows (`TcpExt`)                     |  32 B    |  32 B    |
//! | index (2 × 8 B at ≤ 53 % load, + 64 spare) |  30.19 B |  30.19 B |
//! | splice array (1 in 16 flows × 26 B)        |   1.63 B |   1.63 B |
//! | **total**                                  | 127.81 B | 191.81 B |
//!
//! The splice array is `syn_proxy_flows` entries, by default one per 16
//! flows of capacity, at most 2^16. It was 164 B and 228 B with the SYN
//! proxy's splice state in every flow's 64-byte TCP line, a separate free
//! list and an index rounded up to a power of two (32 B).
//!
//! The index holds 8-byte entries (tag and slot, not the key) whatever the
//! family, so only the record grows with IPv6's addresses: an IPv6 flow
//! costs 64 B more than an IPv4 one, and IPv4 flows pay nothing for IPv6.

use dataplane::conntrack::{Conntrack, ConntrackConfig, Flow, Splice, TcpExt};
use dataplane::flow::{IpFamily, TableHasher};
use std::mem::size_of;
use std::net::{Ipv4Addr, Ipv6Addr};

const FLOWS: u32 = 1 << 20;

/// Bytes a table of `A` sized for [`FLOWS`] allocates.
fn table_bytes<A: IpFamily>() -> usize {
    table_bytes_at::<A>(FLOWS)
}

/// Bytes a table of `A` with `capacity` flows (and the default splice
/// array) allocates.
fn table_bytes_at<A: IpFamily>(capacity: u32) -> usize {
    let ct: Conntrack<A> = Conntrack::new(
        ConntrackConfig::with_capacity(capacity),
        TableHasher::from_seed(1),
    )
    .expect("a table");
    assert_eq!(ct.capacity(), capacity as usize);
    ct.memory_bytes()
}

/// At smaller capacities (index rounding weighs more) an IPv4 flow with
/// the default splice array still fits in 128 B.
#[test]
fn the_default_splice_array_keeps_an_ipv4_flow_within_128_bytes() {
    for capacity in [1u32 << 16, 1 << 18, 1 << 19] {
        let bytes = table_bytes_at::<Ipv4Addr>(capacity);
        let per_flow = bytes as f64 / f64::from(capacity);
        println!("{capacity} flows: {per_flow:.2} B per IPv4 flow");
        assert!(per_flow <= 128.0, "{capacity} flows: {per_flow} B each");
    }
}

#[test]
fn an_ipv4_flow_costs_at_most_128_bytes_and_an_ipv6_flow_64_more() {
    assert_eq!(size_of::<Flow<Ipv4Addr>>(), 64, "IPv4 record: one line");
    assert_eq!(size_of::<Flow<Ipv6Addr>>(), 128, "IPv6 record: two lines");
    assert_eq!(size_of::<TcpExt>(), 32, "TCP windows");
    assert_eq!(size_of::<Splice>(), 24, "a splice state");
    let flows = FLOWS as usize;
    // 2^21 index entries at <= 53 % load: 3,956,896 home entries (whole
    // lines) and 64 overflow entries; 2^16 splice states (one per 16
    // flows) and their 2-byte free stack.
    let index = (3_956_896 + 64) * 8;
    let splices = (1 << 16) * (24 + 2);
    let (v4, v6) = (table_bytes::<Ipv4Addr>(), table_bytes::<Ipv6Addr>());
    println!(
        "bytes per flow at {FLOWS} flows: IPv4 {:.2}, IPv6 {:.2}",
        v4 as f64 / FLOWS as f64,
        v6 as f64 / FLOWS as f64
    );
    assert_eq!(v4, flows * (64 + 32) + index + splices, "IPv4");
    assert_eq!(v6, flows * (128 + 32) + index + splices, "IPv6");
    assert!(v4 <= flows * 128, "IPv4: {v4} B for {FLOWS} flows");
    assert_eq!(v6 - v4, flows * 64, "IPv6 costs one more line");
}
