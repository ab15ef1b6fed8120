//! UPDATE decoding: round trips and the NOTIFICATION / RFC 7606 action of
//! each error.

use super::super::notification::update as sub;
use super::super::prefix::{AFI_IPV6, SAFI_UNICAST};
use super::super::{DecodeContext, ErrorAction, MARKER, Message};
use super::*;

const CTX: DecodeContext = DecodeContext {
    four_octet_as: true,
    ibgp: false,
    extended_next_hop: false,
};

fn p(s: &str) -> Prefix {
    s.parse().unwrap()
}

/// An UPDATE message with raw `attrs` bytes announcing 10.0.0.0/24.
fn update_with_attrs(attrs: &[u8], nlri: &[u8]) -> Vec<u8> {
    let mut m = MARKER.to_vec();
    let len = 19 + 4 + attrs.len() + nlri.len();
    m.extend_from_slice(&(len as u16).to_be_bytes());
    m.push(2);
    m.extend_from_slice(&[0, 0]);
    m.extend_from_slice(&(attrs.len() as u16).to_be_bytes());
    m.extend_from_slice(attrs);
    m.extend_from_slice(nlri);
    m
}

const ORIGIN_IGP: [u8; 4] = [0x40, 1, 1, 0];
const AS_PATH_65001: [u8; 9] = [0x40, 2, 6, 2, 1, 0, 0, 0xfd, 0xe9];
const NEXT_HOP: [u8; 7] = [0x40, 3, 4, 10, 0, 0, 2];
const NLRI: [u8; 4] = [24, 10, 0, 0];

fn good_attrs() -> Vec<u8> {
    [&ORIGIN_IGP[..], &AS_PATH_65001, &NEXT_HOP].concat()
}

fn err(msg: &[u8], ctx: DecodeContext) -> (u8, u8, ErrorAction, Vec<u8>) {
    let e = Message::parse(msg, ctx).unwrap_err();
    (
        e.notification.code,
        e.notification.subcode,
        e.action,
        e.notification.data,
    )
}

#[test]
fn full_update_round_trips() {
    let u = UpdateRepr {
        withdrawn: vec![p("192.0.2.0/24")],
        attributes: PathAttributes {
            origin: Some(Origin::Igp),
            as_path: Some(AsPath::sequence(&[65001, 4_200_000_000])),
            next_hop: Some(Ipv4Addr::new(10, 0, 0, 2)),
            med: Some(10),
            local_pref: Some(200),
            communities: vec![(65001 << 16) | 100, 0xffff_ff01],
            mp_reach: Some(MpReach {
                afi: AFI_IPV6,
                safi: SAFI_UNICAST,
                next_hop: "2001:db8::2"
                    .parse::<std::net::Ipv6Addr>()
                    .unwrap()
                    .octets()
                    .to_vec(),
                nlri: vec![p("2001:db8:1::/48")],
            }),
            ..Default::default()
        },
        nlri: vec![p("10.0.0.0/24"), p("10.0.1.7/32")],
        discarded: vec![],
    };
    let msg = Message::Update(Box::new(u.clone()));
    let bytes = msg.to_bytes(CTX);
    assert_eq!(bytes.len(), u.encoded_len(CTX));
    assert_eq!(Message::parse(&bytes, CTX), Ok(msg));
    assert_eq!(u.announced().count(), 3);
    assert_eq!(u.withdrawals().count(), 1);
}

#[test]
fn two_octet_as_path_uses_as_trans() {
    let ctx = DecodeContext {
        four_octet_as: false,
        ibgp: false,
        extended_next_hop: false,
    };
    let u = UpdateRepr {
        attributes: PathAttributes {
            origin: Some(Origin::Igp),
            as_path: Some(AsPath::sequence(&[4_200_000_000])),
            next_hop: Some(Ipv4Addr::new(10, 0, 0, 2)),
            as4_path: Some(AsPath::sequence(&[4_200_000_000])),
            ..Default::default()
        },
        nlri: vec![p("10.0.0.0/24")],
        ..Default::default()
    };
    let Ok(Message::Update(back)) =
        Message::parse(&Message::Update(Box::new(u)).to_bytes(ctx), ctx)
    else {
        panic!("decodes");
    };
    assert_eq!(back.attributes.as_path, Some(AsPath::sequence(&[23456])));
    assert_eq!(
        back.attributes.as4_path,
        Some(AsPath::sequence(&[4_200_000_000]))
    );
}

#[test]
fn good_raw_update_decodes() {
    let m = update_with_attrs(&good_attrs(), &NLRI);
    let Ok(Message::Update(u)) = Message::parse(&m, CTX) else {
        panic!()
    };
    assert_eq!(u.nlri, [p("10.0.0.0/24")]);
    assert_eq!(u.attributes.as_path, Some(AsPath::sequence(&[65001])));
    // An empty UPDATE is the End-of-RIB marker and valid.
    let eor = Message::Update(Box::new(UpdateRepr::end_of_rib())).to_bytes(CTX);
    assert_eq!(eor.len(), 23);
    assert!(Message::parse(&eor, CTX).is_ok());
}

fn kind(msg: &[u8], ctx: DecodeContext) -> (u8, u8, ErrorAction) {
    let (c, s, a, _) = err(msg, ctx);
    (c, s, a)
}

#[test]
fn framing_errors_reset_the_session() {
    use ErrorAction::SessionReset;
    // Withdrawn routes length overruns the message.
    let mut m = update_with_attrs(&good_attrs(), &NLRI);
    m[19..21].copy_from_slice(&[0x10, 0]);
    assert_eq!(
        kind(&m, CTX),
        (3, sub::MALFORMED_ATTRIBUTE_LIST, SessionReset)
    );
    // Total attribute length overruns.
    let mut m = update_with_attrs(&good_attrs(), &NLRI);
    m[21..23].copy_from_slice(&[0x10, 0]);
    assert_eq!(
        kind(&m, CTX),
        (3, sub::MALFORMED_ATTRIBUTE_LIST, SessionReset)
    );
    // An attribute overruns the attribute list.
    let m = update_with_attrs(&[0x40, 1, 9, 0], &[]);
    assert_eq!(
        kind(&m, CTX),
        (3, sub::MALFORMED_ATTRIBUTE_LIST, SessionReset)
    );
    // A /33 in the NLRI, a truncated withdrawn prefix.
    let m = update_with_attrs(&good_attrs(), &[33, 1, 2, 3, 4, 5]);
    assert_eq!(kind(&m, CTX), (3, sub::INVALID_NETWORK_FIELD, SessionReset));
    // An unknown well-known attribute: its bytes are the data.
    let m = update_with_attrs(&[0x40, 99, 1, 7], &[]);
    assert_eq!(
        err(&m, CTX),
        (
            3,
            sub::UNRECOGNIZED_WELL_KNOWN_ATTRIBUTE,
            SessionReset,
            vec![0x40, 99, 1, 7]
        )
    );
    // A repeated MP_REACH_NLRI.
    let mp = [0x80, 14, 5, 0, 1, 1, 0, 0];
    let mp_ok = [0x80, 14, 9, 0, 1, 1, 4, 10, 0, 0, 2, 0];
    let m = update_with_attrs(&[&mp_ok[..], &mp_ok].concat(), &[]);
    assert_eq!(
        kind(&m, CTX),
        (3, sub::MALFORMED_ATTRIBUTE_LIST, SessionReset)
    );
    // MP_REACH_NLRI with a next hop of length 0 for IPv4.
    let m = update_with_attrs(&mp, &[]);
    assert_eq!(
        kind(&m, CTX),
        (3, sub::OPTIONAL_ATTRIBUTE_ERROR, SessionReset)
    );
}

#[test]
fn attribute_errors_are_treat_as_withdraw() {
    use ErrorAction::TreatAsWithdraw;
    let with = |bad: &[u8]| {
        let mut a = good_attrs();
        // Replace the attribute of the same type in the good set.
        let ty = bad[1];
        let (o, ap, nh) = (
            ORIGIN_IGP.to_vec(),
            AS_PATH_65001.to_vec(),
            NEXT_HOP.to_vec(),
        );
        let parts: Vec<Vec<u8>> = [o, ap, nh]
            .into_iter()
            .map(|x| if x[1] == ty { bad.to_vec() } else { x })
            .collect();
        if !parts.iter().any(|x| x[1] == ty) || ty > 3 {
            a.extend_from_slice(bad);
        } else {
            a = parts.concat();
        }
        update_with_attrs(&a, &NLRI)
    };
    // ORIGIN 3; ORIGIN of 2 bytes; ORIGIN marked optional.
    assert_eq!(
        err(&with(&[0x40, 1, 1, 3]), CTX),
        (3, sub::INVALID_ORIGIN, TreatAsWithdraw, vec![0x40, 1, 1, 3])
    );
    assert_eq!(
        kind(&with(&[0x40, 1, 2, 0, 0]), CTX),
        (3, sub::ATTRIBUTE_LENGTH_ERROR, TreatAsWithdraw)
    );
    assert_eq!(
        kind(&with(&[0xc0, 1, 1, 0]), CTX),
        (3, sub::ATTRIBUTE_FLAGS_ERROR, TreatAsWithdraw)
    );
    // AS_PATH segment type 9; segment count 0; segment overrun.
    assert_eq!(
        kind(&with(&[0x40, 2, 6, 9, 1, 0, 0, 0, 1]), CTX),
        (3, sub::MALFORMED_AS_PATH, TreatAsWithdraw)
    );
    assert_eq!(
        kind(&with(&[0x40, 2, 2, 2, 0]), CTX),
        (3, sub::MALFORMED_AS_PATH, TreatAsWithdraw)
    );
    assert_eq!(
        kind(&with(&[0x40, 2, 4, 2, 2, 0, 0]), CTX),
        (3, sub::MALFORMED_AS_PATH, TreatAsWithdraw)
    );
    // NEXT_HOP 0.0.0.0 and of 3 bytes.
    assert_eq!(
        kind(&with(&[0x40, 3, 4, 0, 0, 0, 0]), CTX),
        (3, sub::INVALID_NEXT_HOP, TreatAsWithdraw)
    );
    assert_eq!(
        kind(&with(&[0x40, 3, 3, 1, 2, 3]), CTX),
        (3, sub::ATTRIBUTE_LENGTH_ERROR, TreatAsWithdraw)
    );
    // COMMUNITIES of 5 bytes; MED of 2.
    assert_eq!(
        kind(&with(&[0xc0, 8, 5, 0, 0, 0, 1, 2]), CTX),
        (3, sub::ATTRIBUTE_LENGTH_ERROR, TreatAsWithdraw)
    );
    assert_eq!(
        kind(&with(&[0x80, 4, 2, 0, 1]), CTX),
        (3, sub::ATTRIBUTE_LENGTH_ERROR, TreatAsWithdraw)
    );
    // Missing NEXT_HOP with an IPv4 NLRI: the data is the missing type.
    let m = update_with_attrs(&[&ORIGIN_IGP[..], &AS_PATH_65001].concat(), &NLRI);
    assert_eq!(
        err(&m, CTX),
        (
            3,
            sub::MISSING_WELL_KNOWN_ATTRIBUTE,
            TreatAsWithdraw,
            vec![3]
        )
    );
    // ... but a withdraw-only UPDATE needs none.
    let mut m = update_with_attrs(&[], &[]);
    m[16..18].copy_from_slice(&27u16.to_be_bytes());
    m[19..21].copy_from_slice(&4u16.to_be_bytes());
    m.splice(21..21, NLRI);
    assert!(Message::parse(&m, CTX).is_ok());
    // A session-reset error later in the message wins.
    let m = update_with_attrs(&[&[0x40, 1, 1, 3][..], &[0x40, 99, 0]].concat(), &NLRI);
    assert_eq!(kind(&m, CTX).2, ErrorAction::SessionReset);
}

#[test]
fn discarded_attributes_keep_the_route() {
    // ATOMIC_AGGREGATE with a byte, LOCAL_PREF of 3 bytes from eBGP,
    // a repeated ORIGIN.
    let extra = [
        &[0x40, 6, 1, 0][..],
        &[0x40, 5, 3, 0, 0, 1],
        &[0x40, 1, 1, 2],
    ]
    .concat();
    let m = update_with_attrs(&[good_attrs(), extra].concat(), &NLRI);
    let Ok(Message::Update(u)) = Message::parse(&m, CTX) else {
        panic!()
    };
    assert_eq!(u.discarded.len(), 3);
    assert!(
        u.discarded
            .iter()
            .all(|e| e.action == ErrorAction::AttributeDiscard)
    );
    assert_eq!(u.attributes.origin, Some(Origin::Igp), "first ORIGIN kept");
    assert!(!u.attributes.atomic_aggregate);
    // The same LOCAL_PREF from iBGP withdraws.
    let ibgp = DecodeContext {
        four_octet_as: true,
        ibgp: true,
        extended_next_hop: false,
    };
    let m = update_with_attrs(&[good_attrs(), vec![0x40, 5, 3, 0, 0, 1]].concat(), &NLRI);
    assert_eq!(
        kind(&m, ibgp),
        (3, sub::ATTRIBUTE_LENGTH_ERROR, ErrorAction::TreatAsWithdraw)
    );
}

/// An MP_REACH_NLRI of IPv6 unicast, raw: flags, next hop bytes, NLRI bytes.
fn mp_reach_v6(flags: u8, nh: &[u8], nlri: &[u8]) -> Vec<u8> {
    let mut v = vec![0, 2, 1, nh.len() as u8];
    v.extend_from_slice(nh);
    v.push(0);
    v.extend_from_slice(nlri);
    let mut a = vec![flags, attr::MP_REACH_NLRI, v.len() as u8];
    a.extend_from_slice(&v);
    a
}

fn v6(s: &str) -> [u8; 16] {
    s.parse::<std::net::Ipv6Addr>().unwrap().octets()
}

#[test]
fn mp_reach_v6_errors_follow_rfc7606() {
    use ErrorAction::{SessionReset, TreatAsWithdraw};
    let mandatory = [&ORIGIN_IGP[..], &AS_PATH_65001].concat();
    let vip = [128u8]
        .iter()
        .chain(&v6("2001:db8:100::10"))
        .copied()
        .collect::<Vec<u8>>();
    let with = |mp: &[u8]| update_with_attrs(&[&mandatory[..], mp].concat(), &[]);

    // Good, 16- and 32-byte next hops.
    let good = mp_reach_v6(0x80, &v6("2001:db8::2"), &vip);
    let Ok(Message::Update(u)) = Message::parse(&with(&good), CTX) else {
        panic!("decodes")
    };
    let r = u.attributes.mp_reach.as_ref().unwrap();
    assert_eq!(r.nlri, [p("2001:db8:100::10/128")]);
    assert_eq!(r.next_hop_addr(), Some("2001:db8::2".parse().unwrap()));
    let both = [v6("2001:db8::2"), v6("fe80::2")].concat();
    assert!(Message::parse(&with(&mp_reach_v6(0x80, &both, &vip)), CTX).is_ok());

    // Next hop lengths that do not fit IPv6 (RFC 7606 §7.11): reset,
    // Optional Attribute Error, the attribute as data (RFC 4760 §7).
    for len in [0usize, 4, 20, 33] {
        let bad = mp_reach_v6(0x80, &vec![0x20; len], &vip);
        assert_eq!(
            err(&with(&bad), CTX),
            (3, sub::OPTIONAL_ATTRIBUTE_ERROR, SessionReset, bad.clone()),
            "next hop of {len} bytes"
        );
    }
    // A /129, a truncated prefix (RFC 7606 §5.3).
    for nlri in [&[129u8, 0][..], &vip[..10]] {
        let bad = mp_reach_v6(0x80, &v6("2001:db8::2"), nlri);
        assert_eq!(
            kind(&with(&bad), CTX),
            (3, sub::OPTIONAL_ATTRIBUTE_ERROR, SessionReset)
        );
    }
    // Next hops that cannot be one: Invalid Next Hop, treat-as-withdraw.
    for nh in [
        v6("::").to_vec(),
        v6("ff02::1").to_vec(),
        v6("::1").to_vec(),
        v6("fe80::2").to_vec(),
        v6("::ffff:10.0.0.2").to_vec(),
        [v6("2001:db8::2"), v6("2001:db8::3")].concat(),
    ] {
        let bad = mp_reach_v6(0x80, &nh, &vip);
        assert_eq!(
            err(&with(&bad), CTX),
            (3, sub::INVALID_NEXT_HOP, TreatAsWithdraw, bad.clone()),
            "next hop {nh:?}"
        );
    }
    // Wrong flags (transitive; partial): treat-as-withdraw (RFC 7606 §3c)
    // ... unless the attribute is also malformed, which resets.
    for flags in [0xc0, 0xa0] {
        assert_eq!(
            kind(&with(&mp_reach_v6(flags, &v6("2001:db8::2"), &vip)), CTX),
            (3, sub::ATTRIBUTE_FLAGS_ERROR, TreatAsWithdraw)
        );
    }
    assert_eq!(
        kind(&with(&mp_reach_v6(0xc0, &[1; 5], &vip)), CTX),
        (3, sub::OPTIONAL_ATTRIBUTE_ERROR, SessionReset)
    );
    // Without ORIGIN: treat-as-withdraw (RFC 7606 §3d), the data the type.
    let m = update_with_attrs(&[&AS_PATH_65001[..], &good].concat(), &[]);
    assert_eq!(
        err(&m, CTX),
        (
            3,
            sub::MISSING_WELL_KNOWN_ATTRIBUTE,
            TreatAsWithdraw,
            vec![1]
        )
    );
    // MP_UNREACH alone needs no other attribute; a /129 in it resets.
    let unreach = |nlri: &[u8]| {
        let mut a = vec![0x80, attr::MP_UNREACH_NLRI, 3 + nlri.len() as u8, 0, 2, 1];
        a.extend_from_slice(nlri);
        update_with_attrs(&a, &[])
    };
    let Ok(Message::Update(u)) = Message::parse(&unreach(&vip), CTX) else {
        panic!("decodes")
    };
    assert_eq!(
        u.withdrawals().copied().collect::<Vec<_>>(),
        [p("2001:db8:100::10/128")]
    );
    assert_eq!(
        kind(&unreach(&[129, 0]), CTX),
        (3, sub::OPTIONAL_ATTRIBUTE_ERROR, SessionReset)
    );
}

#[test]
fn ipv4_routes_with_an_ipv6_next_hop_need_the_extended_next_hop_capability() {
    use ErrorAction::{SessionReset, TreatAsWithdraw};
    let mandatory = [&ORIGIN_IGP[..], &AS_PATH_65001].concat();
    let with = |mp: &[u8]| update_with_attrs(&[&mandatory[..], mp].concat(), &[]);
    // MP_REACH_NLRI of IPv4 unicast (AFI 1) with `nh`, announcing 10.128.0.10/32.
    let mp_reach_v4 = |nh: &[u8]| {
        let mut a = mp_reach_v6(0x80, nh, &[32, 10, 128, 0, 10]);
        a[4] = 1;
        a
    };
    let enh = DecodeContext {
        extended_next_hop: true,
        ..CTX
    };
    // RFC 8950 §3: 16 bytes (global) or 32 (global + link-local).
    for nh in [
        v6("2001:db8::2").to_vec(),
        [v6("2001:db8::2"), v6("fe80::2")].concat(),
    ] {
        let Ok(Message::Update(u)) = Message::parse(&with(&mp_reach_v4(&nh)), enh) else {
            panic!("decodes with the capability")
        };
        let r = u.attributes.mp_reach.as_ref().unwrap();
        assert_eq!((r.afi, r.nlri.as_slice()), (1, &[p("10.128.0.10/32")][..]));
        assert_eq!(r.next_hop_addr(), Some("2001:db8::2".parse().unwrap()));
        // Not negotiated: the length does not fit the AFI (RFC 7606 §7.11).
        let bad = mp_reach_v4(&nh);
        assert_eq!(
            err(&with(&bad), CTX),
            (3, sub::OPTIONAL_ATTRIBUTE_ERROR, SessionReset, bad.clone())
        );
    }
    // A next hop of a length neither family has resets with it too.
    let bad = mp_reach_v4(&[1; 8]);
    assert_eq!(
        kind(&with(&bad), enh),
        (3, sub::OPTIONAL_ATTRIBUTE_ERROR, SessionReset)
    );
    // An IPv6 next hop that cannot be one: Invalid Next Hop,
    // treat-as-withdraw, as for IPv6 routes.
    let bad = mp_reach_v4(&v6("fe80::2"));
    assert_eq!(
        err(&with(&bad), enh),
        (3, sub::INVALID_NEXT_HOP, TreatAsWithdraw, bad.clone())
    );
    // The 4-byte form still decodes either way.
    for ctx in [CTX, enh] {
        assert!(Message::parse(&with(&mp_reach_v4(&[10, 0, 0, 2])), ctx).is_ok());
    }
}
