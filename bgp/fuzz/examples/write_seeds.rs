//! Writes the seed corpus of the `decode` target: one file per message
//! kind (a context byte, then the message), valid and broken.
//! `cargo run --example write_seeds -- corpus/decode`

use std::net::{Ipv4Addr, Ipv6Addr};

use portico_bgp::wire::update::{AsPath, Origin, PathAttributes};
use portico_bgp::wire::{
    AFI_IPV6, Capability, DecodeContext, Message, MpReach, MpUnreach, Notification, OpenRepr,
    RouteRefresh, SAFI_UNICAST, UpdateRepr,
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
    // IPv6 unicast (RFC 4760): MP_REACH_NLRI with the 32-byte next hop
    // (global + link-local, RFC 2545 §3), MP_UNREACH_NLRI, End-of-RIB.
    let next_hop: Vec<u8> = ["2001:db8::2", "fe80::2"]
        .iter()
        .flat_map(|a| a.parse::<Ipv6Addr>().unwrap().octets())
        .collect();
    let update_v6 = Message::Update(Box::new(UpdateRepr {
        attributes: PathAttributes {
            origin: Some(Origin::Igp),
            as_path: Some(AsPath::sequence(&[65001])),
            local_pref: Some(200),
            communities: vec![(65001 << 16) | 100],
            mp_reach: Some(MpReach {
                afi: AFI_IPV6,
                safi: SAFI_UNICAST,
                next_hop,
                nlri: vec![
                    "2001:db8:100::10/128".parse().unwrap(),
                    "2001:db8:200::/48".parse().unwrap(),
                ],
            }),
            ..Default::default()
        },
        ..Default::default()
    }));
    let mp_unreach = |withdrawn: Vec<portico_bgp::Prefix>| {
        Message::Update(Box::new(UpdateRepr {
            attributes: PathAttributes {
                mp_unreach: Some(MpUnreach {
                    afi: AFI_IPV6,
                    safi: SAFI_UNICAST,
                    withdrawn,
                }),
                ..Default::default()
            },
            ..Default::default()
        }))
    };
    let seeds: Vec<(&str, Vec<u8>)> = vec![
        ("update_v6", update_v6.to_bytes(ctx)),
        (
            "withdraw_v6",
            mp_unreach(vec!["2001:db8:100::10/128".parse().unwrap()]).to_bytes(ctx),
        ),
        ("eor_v6", mp_unreach(vec![]).to_bytes(ctx)),
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
