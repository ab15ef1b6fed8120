//! Property tests of the codec: no panic on arbitrary bytes (raw, and
//! behind a valid header so the body parsers see them), and every message
//! the encoder writes decodes back to itself.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::collection::vec;
use proptest::prelude::*;

use super::open::Capability;
use super::update::{RawAttribute, flag};
use super::*;

fn ctx_strategy() -> impl Strategy<Value = DecodeContext> {
    (any::<bool>(), any::<bool>()).prop_map(|(four_octet_as, ibgp)| DecodeContext {
        four_octet_as,
        ibgp,
    })
}

fn v4_prefix() -> impl Strategy<Value = Prefix> {
    (any::<u32>(), 0u8..=32)
        .prop_map(|(a, l)| Prefix::new(IpAddr::V4(Ipv4Addr::from(a)), l).expect("len <= 32"))
}

fn v6_prefix() -> impl Strategy<Value = Prefix> {
    (any::<u128>(), 0u8..=128)
        .prop_map(|(a, l)| Prefix::new(IpAddr::V6(Ipv6Addr::from(a)), l).expect("len <= 128"))
}

fn as_path() -> impl Strategy<Value = AsPath> {
    vec(
        (1u8..=4, vec(any::<u32>(), 1..20)).prop_map(|(kind, asns)| AsSegment { kind, asns }),
        0..3,
    )
    .prop_map(|segments| AsPath { segments })
}

fn next_hop() -> impl Strategy<Value = Ipv4Addr> {
    (1u32..0xe000_0000).prop_map(Ipv4Addr::from)
}

fn mp_reach() -> impl Strategy<Value = MpReach> {
    prop_oneof![
        (next_hop(), vec(v4_prefix(), 0..20)).prop_map(|(nh, nlri)| MpReach {
            afi: AFI_IPV4,
            safi: SAFI_UNICAST,
            next_hop: nh.octets().to_vec(),
            nlri,
        }),
        (any::<bool>(), vec(any::<u8>(), 32), vec(v6_prefix(), 0..20)).prop_map(
            |(two, nh, nlri)| MpReach {
                afi: AFI_IPV6,
                safi: SAFI_UNICAST,
                next_hop: nh[..if two { 32 } else { 16 }].to_vec(),
                nlri,
            }
        ),
    ]
}

fn mp_unreach() -> impl Strategy<Value = MpUnreach> {
    prop_oneof![
        vec(v4_prefix(), 0..20).prop_map(|withdrawn| MpUnreach {
            afi: AFI_IPV4,
            safi: SAFI_UNICAST,
            withdrawn,
        }),
        vec(v6_prefix(), 0..20).prop_map(|withdrawn| MpUnreach {
            afi: AFI_IPV6,
            safi: SAFI_UNICAST,
            withdrawn,
        }),
    ]
}

/// Unknown optional attributes with distinct type codes (some long enough
/// for the extended-length encoding).
fn others() -> impl Strategy<Value = Vec<RawAttribute>> {
    vec(
        (any::<bool>(), any::<bool>(), vec(any::<u8>(), 0..300)),
        0..3,
    )
    .prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (t, p, value))| RawAttribute {
                flags: flag::OPTIONAL
                    | if t { flag::TRANSITIVE } else { 0 }
                    | if p { flag::PARTIAL } else { 0 },
                type_code: 40 + i as u8,
                value,
            })
            .collect()
    })
}

prop_compose! {
    fn update()(
        withdrawn in vec(v4_prefix(), 0..50),
        nlri in vec(v4_prefix(), 0..50),
        origin in prop::option::of(prop_oneof![Just(Origin::Igp), Just(Origin::Egp), Just(Origin::Incomplete)]),
        path in prop::option::of(as_path()),
        nh in prop::option::of(next_hop()),
        med in prop::option::of(any::<u32>()),
        local_pref in prop::option::of(any::<u32>()),
        atomic_aggregate in any::<bool>(),
        communities in vec(any::<u32>(), 0..10),
        as4_path in prop::option::of(as_path()),
        mp_reach in prop::option::of(mp_reach()),
        mp_unreach in prop::option::of(mp_unreach()),
        other in others(),
    ) -> UpdateRepr {
        let announces = !nlri.is_empty() || mp_reach.as_ref().is_some_and(|r| !r.nlri.is_empty());
        UpdateRepr {
            withdrawn,
            attributes: PathAttributes {
                // Announcements carry the mandatory attributes.
                origin: if announces { origin.or(Some(Origin::Igp)) } else { origin },
                as_path: if announces { path.or_else(|| Some(AsPath::default())) } else { path },
                next_hop: if nlri.is_empty() { nh } else { nh.or(Some(Ipv4Addr::new(10, 0, 0, 1))) },
                med,
                local_pref,
                atomic_aggregate,
                communities,
                as4_path,
                mp_reach,
                mp_unreach,
                other,
            },
            nlri,
            discarded: vec![],
        }
    }
}

fn capability() -> impl Strategy<Value = Capability> {
    prop_oneof![
        (any::<u16>(), any::<u8>()).prop_map(|(afi, safi)| Capability::Multiprotocol { afi, safi }),
        Just(Capability::RouteRefresh),
        any::<u32>().prop_map(Capability::FourOctetAs),
        (70u8..=80, vec(any::<u8>(), 0..8))
            .prop_map(|(code, value)| Capability::Other { code, value }),
    ]
}

fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        Just(Message::Keepalive),
        (any::<u16>(), any::<u8>())
            .prop_map(|(afi, safi)| Message::RouteRefresh(RouteRefresh { afi, safi })),
        (any::<u8>(), any::<u8>(), vec(any::<u8>(), 0..64))
            .prop_map(|(c, s, d)| Message::Notification(Notification::new(c, s, d))),
        (
            any::<u16>(),
            prop_oneof![Just(0u16), 3u16..],
            1u32..,
            vec(capability(), 0..6)
        )
            .prop_map(
                |(my_as, hold_time_s, id, capabilities)| Message::Open(OpenRepr {
                    my_as,
                    hold_time_s,
                    bgp_id: Ipv4Addr::from(id),
                    capabilities,
                })
            ),
        update().prop_map(|u| Message::Update(Box::new(u))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..600), ctx in ctx_strategy()) {
        let _ = frame_len(&bytes);
        let _ = Message::parse(&bytes, ctx);
    }

    #[test]
    fn arbitrary_bodies_never_panic(ty in 1u8..=6, body in vec(any::<u8>(), 0..600), ctx in ctx_strategy()) {
        let mut m = MARKER.to_vec();
        m.extend_from_slice(&((HEADER_LEN + body.len()) as u16).to_be_bytes());
        m.push(ty);
        m.extend_from_slice(&body);
        assert_eq!(frame_len(&m).map(|l| l.is_some()), Ok(true));
        if let Err(e) = Message::parse(&m, ctx) {
            // Every error names a real NOTIFICATION code.
            prop_assert!((1..=7).contains(&e.notification.code), "{e}");
        }
    }

    #[test]
    fn encode_decode_round_trip(msg in message(), four_octet_as in any::<bool>()) {
        // 2-octet AS_PATHs hold only 2-octet ASNs: restrict to those.
        let ctx = DecodeContext { four_octet_as, ibgp: false };
        if let Message::Update(u) = &msg
            && !four_octet_as
            && u.attributes.as_path.as_ref().is_some_and(AsPath::needs_four_octets)
        {
            return Ok(());
        }
        let bytes = msg.to_bytes(ctx);
        prop_assert!(bytes.len() <= MAX_MESSAGE_LEN);
        if let Message::Update(u) = &msg {
            prop_assert_eq!(bytes.len(), u.encoded_len(ctx));
        }
        prop_assert_eq!(frame_len(&bytes), Ok(Some(bytes.len())));
        prop_assert_eq!(Message::parse(&bytes, ctx), Ok(msg));
    }

    #[test]
    fn mutated_messages_never_panic(msg in message(), flips in vec((any::<usize>(), any::<u8>()), 1..8)) {
        let mut bytes = msg.to_bytes(DecodeContext::default());
        for (i, x) in flips {
            let n = bytes.len();
            bytes[i % n] ^= x;
        }
        let _ = Message::parse(&bytes, DecodeContext::default());
    }
}
