//! Property tests of the codec: no panic on arbitrary bytes (raw, and
//! behind a valid header so the body parsers see them), every message
//! the encoder writes decodes back to itself, and an MP_REACH_NLRI /
//! MP_UNREACH_NLRI cut short anywhere is either fewer whole prefixes or
//! the RFC 7606 §7.11 session reset, never anything else.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::collection::vec;
use proptest::prelude::*;

use super::open::Capability;
use super::update::{RawAttribute, flag};
use super::*;

fn ctx_strategy() -> impl Strategy<Value = DecodeContext> {
    (any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
        |(four_octet_as, ibgp, extended_next_hop)| DecodeContext {
            four_octet_as,
            ibgp,
            extended_next_hop,
        },
    )
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
        // IPv4 routes with an IPv6 next hop (RFC 8950 §3).
        (any::<bool>(), v6_next_hop(), vec(v4_prefix(), 0..20)).prop_map(|(two, nh, nlri)| {
            MpReach {
                afi: AFI_IPV4,
                safi: SAFI_UNICAST,
                next_hop: nh[..if two { 32 } else { 16 }].to_vec(),
                nlri,
            }
        }),
        (any::<bool>(), v6_next_hop(), vec(v6_prefix(), 0..20)).prop_map(|(two, nh, nlri)| {
            MpReach {
                afi: AFI_IPV6,
                safi: SAFI_UNICAST,
                next_hop: nh[..if two { 32 } else { 16 }].to_vec(),
                nlri,
            }
        }),
    ]
}

/// A valid 32-byte IPv6 next hop (RFC 2545 §3): a global address in
/// 2001:db8::/32, then a link-local one; the first 16 bytes alone are the
/// 16-byte form.
fn v6_next_hop() -> impl Strategy<Value = Vec<u8>> {
    (any::<u64>(), any::<u64>()).prop_map(|(g, l)| {
        let global = Ipv6Addr::from((0x2001_0db8_u128 << 96) | u128::from(g));
        let link_local = Ipv6Addr::from((0xfe80_u128 << 112) | u128::from(l));
        [global.octets(), link_local.octets()].concat()
    })
}

/// An UPDATE holding ORIGIN, an empty AS_PATH and `mp` (flags, type,
/// value) as raw bytes.
fn raw_update_with(mp_type: u8, mp_value: &[u8]) -> Vec<u8> {
    let mut attrs = vec![0x40, 1, 1, 0, 0x40, 2, 0];
    attrs.extend_from_slice(&[flag::OPTIONAL | flag::EXTENDED_LENGTH, mp_type]);
    attrs.extend_from_slice(&(mp_value.len() as u16).to_be_bytes());
    attrs.extend_from_slice(mp_value);
    let mut m = MARKER.to_vec();
    m.extend_from_slice(&((HEADER_LEN + 4 + attrs.len()) as u16).to_be_bytes());
    m.push(msg_type::UPDATE);
    m.extend_from_slice(&[0, 0]);
    m.extend_from_slice(&(attrs.len() as u16).to_be_bytes());
    m.extend_from_slice(&attrs);
    m
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
        vec((any::<u16>(), any::<u16>(), any::<u16>()), 1..5).prop_map(|t| {
            Capability::ExtendedNextHop(
                t.into_iter()
                    .map(|(nlri_afi, nlri_safi, next_hop_afi)| NextHopTuple {
                        nlri_afi,
                        nlri_safi,
                        next_hop_afi,
                    })
                    .collect(),
            )
        }),
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
        let ctx = DecodeContext { four_octet_as, ibgp: false, extended_next_hop: true };
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn truncated_mp_reach_is_fewer_prefixes_or_a_reset(
        two in any::<bool>(),
        nh in v6_next_hop(),
        nlri in vec(v6_prefix(), 1..20),
        cut in any::<usize>(),
    ) {
        let nh = &nh[..if two { 32 } else { 16 }];
        let mut value = vec![0, 2, 1, nh.len() as u8];
        value.extend_from_slice(nh);
        value.push(0);
        let fixed = value.len();
        for p in &nlri {
            p.emit(&mut value);
        }
        let cut = cut % value.len();
        let short = &value[..cut];
        let m = raw_update_with(update::attr::MP_REACH_NLRI, short);
        match Message::parse(&m, DecodeContext::default()) {
            Ok(Message::Update(u)) => {
                let r = u.attributes.mp_reach.as_ref().expect("MP_REACH_NLRI");
                prop_assert!(cut >= fixed);
                prop_assert_eq!(&r.next_hop[..], nh);
                prop_assert!(nlri.starts_with(&r.nlri), "whole prefixes of the original");
            }
            Ok(other) => prop_assert!(false, "decoded as {other:?}"),
            Err(e) => {
                prop_assert_eq!(e.action, ErrorAction::SessionReset);
                prop_assert_eq!(
                    (e.notification.code, e.notification.subcode),
                    (notification::code::UPDATE_MESSAGE, notification::update::OPTIONAL_ATTRIBUTE_ERROR)
                );
                // The data is the attribute as received (RFC 4760 §7).
                prop_assert!(m.ends_with(&e.notification.data));
                prop_assert_eq!(e.notification.data.len(), 4 + cut);
            }
        }
    }

    #[test]
    fn truncated_mp_unreach_is_fewer_prefixes_or_a_reset(
        withdrawn in vec(v6_prefix(), 1..20),
        cut in any::<usize>(),
    ) {
        let mut value = vec![0, 2, 1];
        for p in &withdrawn {
            p.emit(&mut value);
        }
        let cut = cut % value.len();
        let m = raw_update_with(update::attr::MP_UNREACH_NLRI, &value[..cut]);
        match Message::parse(&m, DecodeContext::default()) {
            Ok(Message::Update(u)) => {
                let r = u.attributes.mp_unreach.as_ref().expect("MP_UNREACH_NLRI");
                prop_assert!(cut >= 3);
                prop_assert!(withdrawn.starts_with(&r.withdrawn));
            }
            Ok(other) => prop_assert!(false, "decoded as {other:?}"),
            Err(e) => {
                prop_assert_eq!(e.action, ErrorAction::SessionReset);
                prop_assert_eq!(e.notification.subcode, notification::update::OPTIONAL_ATTRIBUTE_ERROR);
            }
        }
    }
}
