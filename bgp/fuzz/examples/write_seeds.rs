//! Writes the seed corpus of the `decode` target: one file per message
//! kind (a context byte, then the message), valid and broken.
//! `cargo run --example write_seeds -- corpus/decode`

use std::net::Ipv4Addr;

use portico_bgp::wire::update::{AsPath, Origin, PathAttributes};
use portico_bgp::wire::{
    Capability, DecodeContext, Message, Notification, OpenRepr, RouteRefresh, UpdateRepr,
};

fn main() {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "corpus/decode".into());
    std::fs::create_dir_all(&dir).expect("corpus dir");
    let ctx = DecodeContext::default();
    let open = Message::Open(OpenRepr::new(
        65001,
        90,
        Ipv4Addr::new(10, 0, 0, 2),
        vec![
            Capability::Multiprotocol { afi: 1, safi: 1 },
            Capability::Multiprotocol { afi: 2, safi: 1 },
            Capability::RouteRefresh,
        ],
    ));
    let update = Message::Update(Box::new(UpdateRepr {
        withdrawn: vec!["192.0.2.0/24".parse().unwrap()],
        attributes: PathAttributes {
            origin: Some(Origin::Igp),
            as_path: Some(AsPath::sequence(&[65001, 4_200_000_000])),
            next_hop: Some(Ipv4Addr::new(10, 0, 0, 2)),
            med: Some(5),
            local_pref: Some(200),
            communities: vec![(65001 << 16) | 100],
            ..Default::default()
        },
        nlri: vec![
            "10.128.0.10/32".parse().unwrap(),
            "10.129.0.0/24".parse().unwrap(),
        ],
        discarded: vec![],
    }));
    let seeds: Vec<(&str, Vec<u8>)> = vec![
        ("open", open.to_bytes(ctx)),
        ("update", update.to_bytes(ctx)),
        ("keepalive", Message::Keepalive.to_bytes(ctx)),
        (
            "notification",
            Message::Notification(Notification::cease(2, "maintenance")).to_bytes(ctx),
        ),
        (
            "route_refresh",
            Message::RouteRefresh(RouteRefresh { afi: 1, safi: 1 }).to_bytes(ctx),
        ),
        (
            "eor",
            Message::Update(Box::new(UpdateRepr::end_of_rib())).to_bytes(ctx),
        ),
        (
            "open_then_update",
            [open.to_bytes(ctx), update.to_bytes(ctx)].concat(),
        ),
        ("garbage", b"GET / HTTP/1.1\r\n\r\n".to_vec()),
    ];
    for (name, bytes) in seeds {
        // Context byte 1: 4-octet ASNs, eBGP.
        let file = format!("{dir}/{name}");
        std::fs::write(&file, [&[1u8][..], &bytes].concat()).expect("seed");
        println!("{file}: {} bytes", bytes.len() + 1);
    }
}
