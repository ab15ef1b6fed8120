//! Write a seed corpus of valid frames (one per kind, tagged and untagged)
//! for the `parse_frame` target: `cargo run --example write_seeds -- DIR`.
//! Each file is the target's control byte (0) followed by the frame.

use dataplane::wire::tcp::flags::{ACK, PSH, SYN};
use dataplane::wire::icmp::{kind, unreachable};
use dataplane::wire::{MacAddr, build};
use std::net::Ipv4Addr;

fn main() -> std::io::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "corpus/parse_frame".into());
    std::fs::create_dir_all(&dir)?;
    let (a, b) = (MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]));
    let (c, v, be) = (
        Ipv4Addr::new(198, 51, 100, 7),
        Ipv4Addr::new(203, 0, 113, 10),
        Ipv4Addr::new(10, 244, 1, 5),
    );
    let inner_tcp = build::ipv4_tcp(v, 61000, be, 8080, SYN, 1, 0, b"");
    let inner_udp = build::ipv4_udp(v, 61001, be, 53, b"query");
    let frames = [
        build::eth_ipv4_tcp(a, b, c, 40000, v, 443, SYN, 1, 0, b""),
        build::eth_ipv4_tcp(
            a,
            b,
            c,
            40000,
            v,
            443,
            ACK | PSH,
            2,
            3,
            b"GET / HTTP/1.1\r\n",
        ),
        build::eth_ipv4_udp(a, b, c, 5353, v, 53, b"query"),
        build::eth_ipv4_icmp_echo(a, b, c, v, kind::ECHO_REQUEST, 7, 1, b"ping"),
        build::eth_ipv4_icmp_error(
            a,
            b,
            be,
            v,
            kind::DEST_UNREACHABLE,
            unreachable::FRAG_NEEDED,
            &inner_tcp[..28],
        ),
        build::eth_ipv4_icmp_error(a, b, be, v, kind::TIME_EXCEEDED, 0, &inner_udp),
        build::arp_request(a, c, v),
        build::arp_reply(a, c, b, v),
    ];
    let mut n = 0;
    for f in frames
        .iter()
        .flat_map(|f| [f.clone(), build::with_vlan(f, 100)])
    {
        let mut seed = vec![0u8];
        seed.extend_from_slice(&f);
        std::fs::write(format!("{dir}/seed-{n:02}"), seed)?;
        n += 1;
    }
    println!("wrote {n} seeds to {dir}");
    Ok(())
}
