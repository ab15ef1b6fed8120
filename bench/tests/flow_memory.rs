//! Bytes per flow of each family, from the types' sizes and from what a
//! worker's conntrack table allocates at 2^20 flows — the figures
//! bench/RESULTS.md ("Flow memory: 128 B per IPv4 flow") and DESIGN.md
//! ("Performance") state:
//!
//! | per flow                                   | IPv4     | IPv6     |
//! |--------------------------------------------|----------|----------|
//! | record (`Flow<A>`, free list inside)       |  64 B    | 128 B    |
//! | TCP windows (`TcpExt`)                     |  40 B    |  40 B    |
//! | index (2 × 8 B at ≤ 70 % load, + 64 spare) |  22.86 B |  22.86 B |
//! | splice array (1 in 32 flows × 28 B)        |   0.88 B |   0.88 B |
//! | **total**                                  | 127.73 B | 191.73 B |
//!
//! (It was 164 B and 228 B with the SYN proxy's splice state in every
//! flow's 64-byte TCP line, a separate free list and an index rounded up
//! to a power of two: 32 B.)
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
    let ct: Conntrack<A> = Conntrack::new(
        ConntrackConfig::with_capacity(FLOWS),
        TableHasher::from_seed(1),
    )
    .expect("a table of 2^20 flows");
    assert_eq!(ct.capacity(), FLOWS as usize);
    ct.memory_bytes()
}

#[test]
fn an_ipv4_flow_costs_at_most_128_bytes_and_an_ipv6_flow_64_more() {
    assert_eq!(size_of::<Flow<Ipv4Addr>>(), 64, "IPv4 record: one line");
    assert_eq!(size_of::<Flow<Ipv6Addr>>(), 128, "IPv6 record: two lines");
    assert_eq!(size_of::<TcpExt>(), 40, "TCP windows");
    assert_eq!(size_of::<Splice>(), 24, "a splice state");
    let flows = FLOWS as usize;
    // 2^21 index entries at <= 70 % load: 2,995,936 home entries (whole
    // lines) and 64 overflow entries; 2^15 splice states and their free
    // stack.
    let index = (2_995_936 + 64) * 8;
    let splices = (flows / 32) * (24 + 4);
    let (v4, v6) = (table_bytes::<Ipv4Addr>(), table_bytes::<Ipv6Addr>());
    println!(
        "bytes per flow at {FLOWS} flows: IPv4 {:.2}, IPv6 {:.2}",
        v4 as f64 / FLOWS as f64,
        v6 as f64 / FLOWS as f64
    );
    assert_eq!(v4, flows * (64 + 40) + index + splices, "IPv4");
    assert_eq!(v6, flows * (128 + 40) + index + splices, "IPv6");
    assert!(v4 <= flows * 128, "IPv4: {v4} B for {FLOWS} flows");
    assert_eq!(v6 - v4, flows * 64, "IPv6 costs one more line");
}
