//! The Adj-RIB-Out of one session: what the router has from us, the
//! difference to the desired routes, and that difference packed into
//! UPDATEs.
//!
//! Invariants: every UPDATE built here is at most 4096 bytes; prefixes with
//! equal attributes share UPDATEs; announcements (implicit withdraws
//! included) come before withdrawals, so a prefix that moves between
//! attribute sets is never absent; after `commit`, the Adj-RIB-Out equals
//! the desired set restricted to the families the session can carry.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::wire::{
    AFI_IPV4, AFI_IPV6, AsPath, DecodeContext, HEADER_LEN, MAX_MESSAGE_LEN, MpReach, MpUnreach,
    Origin, PathAttributes, Prefix, SAFI_UNICAST, UpdateRepr,
};

use super::Routes;

/// The attributes of a route that the control plane chooses.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct RouteAttributes {
    /// LOCAL_PREF (iBGP only; iBGP routes without one get 100).
    pub local_pref: Option<u32>,
    pub med: Option<u32>,
    /// RFC 1997 communities, sorted and without repeats.
    pub communities: Vec<u32>,
}

/// LOCAL_PREF sent to iBGP peers when the route has none (RFC 4271 §5.1.5
/// requires one; 100 is the common default).
pub const DEFAULT_LOCAL_PREF: u32 = 100;

impl RouteAttributes {
    pub fn new(
        local_pref: Option<u32>,
        med: Option<u32>,
        communities: impl IntoIterator<Item = u32>,
    ) -> Self {
        let mut communities: Vec<u32> = communities.into_iter().collect();
        communities.sort_unstable();
        communities.dedup();
        RouteAttributes {
            local_pref,
            med,
            communities,
        }
    }
}

/// What the session knows when it builds UPDATEs.
#[derive(Debug, Clone)]
pub(crate) struct Speaker {
    pub my_asn: u32,
    pub ibgp: bool,
    pub ctx: DecodeContext,
    /// NEXT_HOP for IPv4 routes (our IPv4 address on this session).
    pub next_hop_v4: Option<Ipv4Addr>,
    /// Next hop for IPv6 routes, when IPv6 unicast was negotiated.
    pub next_hop_v6: Option<Ipv6Addr>,
}

impl Speaker {
    fn carries(&self, p: &Prefix) -> bool {
        match p.addr() {
            IpAddr::V4(_) => self.next_hop_v4.is_some(),
            IpAddr::V6(_) => self.next_hop_v6.is_some(),
        }
    }

    /// The full attribute set of a route.
    fn path_attributes(&self, a: &RouteAttributes, ipv4: bool) -> PathAttributes {
        let as_path = if self.ibgp {
            AsPath::default()
        } else {
            AsPath::sequence(&[self.my_asn])
        };
        // A 4-octet ASN towards a 2-octet peer: AS_TRANS in AS_PATH and the
        // real path in AS4_PATH (RFC 6793 §4.2.2).
        let as4_path =
            (!self.ctx.four_octet_as && as_path.needs_four_octets()).then(|| as_path.clone());
        PathAttributes {
            origin: Some(Origin::Igp),
            as_path: Some(as_path),
            next_hop: if ipv4 { self.next_hop_v4 } else { None },
            med: a.med,
            local_pref: if self.ibgp {
                Some(a.local_pref.unwrap_or(DEFAULT_LOCAL_PREF))
            } else {
                None
            },
            communities: a.communities.clone(),
            as4_path,
            ..Default::default()
        }
    }
}

/// The routes the router has from us.
#[derive(Debug, Default)]
pub(crate) struct AdjRibOut {
    sent: BTreeMap<Prefix, RouteAttributes>,
}

/// A computed difference, ready to send and then commit.
#[derive(Debug)]
pub(crate) struct Delta {
    pub updates: Vec<UpdateRepr>,
    pub announced: usize,
    pub withdrawn: usize,
    /// Desired prefixes of a family this session cannot carry.
    pub skipped: usize,
    next: BTreeMap<Prefix, RouteAttributes>,
}

impl AdjRibOut {
    pub fn len(&self) -> usize {
        self.sent.len()
    }

    /// Forgets everything (the connection is gone, or a ROUTE-REFRESH asks
    /// for all of it again).
    pub fn clear(&mut self) {
        self.sent.clear();
    }

    /// The UPDATEs that turn the router's view into `desired`.
    pub fn delta(&self, desired: &Routes, speaker: &Speaker) -> Delta {
        let mut groups: BTreeMap<(bool, &RouteAttributes), Vec<Prefix>> = BTreeMap::new();
        let mut next = BTreeMap::new();
        let mut skipped = 0;
        for (p, a) in desired {
            if !speaker.carries(p) {
                skipped += 1;
                continue;
            }
            next.insert(*p, a.clone());
            if self.sent.get(p) != Some(a) {
                groups.entry((p.is_ipv4(), a)).or_default().push(*p);
            }
        }
        let (mut gone_v4, mut gone_v6) = (Vec::new(), Vec::new());
        for p in self.sent.keys().filter(|p| !next.contains_key(p)) {
            if p.is_ipv4() {
                gone_v4.push(*p);
            } else {
                gone_v6.push(*p);
            }
        }
        let mut updates = Vec::new();
        let mut announced = 0;
        for ((ipv4, attrs), prefixes) in groups {
            announced += prefixes.len();
            let base = speaker.path_attributes(attrs, ipv4);
            if ipv4 {
                pack(
                    &prefixes,
                    fixed_len(&base, speaker.ctx),
                    |chunk| UpdateRepr {
                        attributes: base.clone(),
                        nlri: chunk.to_vec(),
                        ..Default::default()
                    },
                    &mut updates,
                );
            } else {
                let nh = speaker.next_hop_v6.unwrap_or(Ipv6Addr::UNSPECIFIED);
                let mut with_mp = base.clone();
                with_mp.mp_reach = Some(MpReach {
                    afi: AFI_IPV6,
                    safi: SAFI_UNICAST,
                    next_hop: nh.octets().to_vec(),
                    nlri: Vec::new(),
                });
                pack(
                    &prefixes,
                    fixed_len(&with_mp, speaker.ctx),
                    |chunk| {
                        let mut a = with_mp.clone();
                        if let Some(r) = a.mp_reach.as_mut() {
                            r.nlri = chunk.to_vec();
                        }
                        UpdateRepr {
                            attributes: a,
                            ..Default::default()
                        }
                    },
                    &mut updates,
                );
            }
        }
        let withdrawn = gone_v4.len() + gone_v6.len();
        pack(
            &gone_v4,
            HEADER_LEN + 4,
            |chunk| UpdateRepr {
                withdrawn: chunk.to_vec(),
                ..Default::default()
            },
            &mut updates,
        );
        let unreach = PathAttributes {
            mp_unreach: Some(MpUnreach {
                afi: AFI_IPV6,
                safi: SAFI_UNICAST,
                withdrawn: Vec::new(),
            }),
            ..Default::default()
        };
        pack(
            &gone_v6,
            fixed_len(&unreach, speaker.ctx),
            |chunk| UpdateRepr {
                attributes: PathAttributes {
                    mp_unreach: Some(MpUnreach {
                        afi: AFI_IPV6,
                        safi: SAFI_UNICAST,
                        withdrawn: chunk.to_vec(),
                    }),
                    ..Default::default()
                },
                ..Default::default()
            },
            &mut updates,
        );
        Delta {
            updates,
            announced,
            withdrawn,
            skipped,
            next,
        }
    }

    /// Records that `delta` has been sent.
    pub fn commit(&mut self, delta: Delta) {
        self.sent = delta.next;
    }
}

/// The bytes of an UPDATE with these attributes and no prefixes, plus
/// room for a 2-byte extended attribute length once prefixes are added.
fn fixed_len(attrs: &PathAttributes, ctx: DecodeContext) -> usize {
    let empty = UpdateRepr {
        attributes: attrs.clone(),
        ..Default::default()
    };
    // An MP attribute that grows past 255 bytes gains one length byte.
    empty.encoded_len(ctx) + 1
}

/// Splits `prefixes` into runs that fit an UPDATE of `fixed` bytes plus
/// their own, and builds one UPDATE per run.
fn pack(
    prefixes: &[Prefix],
    fixed: usize,
    build: impl Fn(&[Prefix]) -> UpdateRepr,
    out: &mut Vec<UpdateRepr>,
) {
    let budget = MAX_MESSAGE_LEN.saturating_sub(fixed);
    let mut start = 0;
    let mut used = 0;
    for (i, p) in prefixes.iter().enumerate() {
        let n = p.encoded_len();
        if used + n > budget && i > start {
            out.push(build(&prefixes[start..i]));
            start = i;
            used = 0;
        }
        used += n;
    }
    if start < prefixes.len() {
        out.push(build(&prefixes[start..]));
    }
}

/// The End-of-RIB marker of a family (RFC 4724 §2).
pub(crate) fn end_of_rib(afi: u16) -> UpdateRepr {
    if afi == AFI_IPV4 {
        return UpdateRepr::end_of_rib();
    }
    UpdateRepr {
        attributes: PathAttributes {
            mp_unreach: Some(MpUnreach {
                afi,
                safi: SAFI_UNICAST,
                withdrawn: Vec::new(),
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Message;

    fn speaker(ibgp: bool) -> Speaker {
        Speaker {
            my_asn: 65001,
            ibgp,
            ctx: DecodeContext::default(),
            next_hop_v4: Some(Ipv4Addr::new(10, 0, 0, 2)),
            next_hop_v6: None,
        }
    }

    fn hosts(n: u32, attrs: &RouteAttributes) -> Routes {
        (0..n)
            .map(|i| {
                (
                    Prefix::host(IpAddr::V4(Ipv4Addr::from(0x0a80_0000 + i))),
                    attrs.clone(),
                )
            })
            .collect()
    }

    #[test]
    fn packs_ten_thousand_prefixes_into_full_updates() {
        let s = speaker(false);
        let a = RouteAttributes::new(None, None, [1, 2]);
        let mut rib = AdjRibOut::default();
        let desired = hosts(10_000, &a);
        let d = rib.delta(&desired, &s);
        assert_eq!((d.announced, d.withdrawn, d.skipped), (10_000, 0, 0));
        // 5 bytes per /32: ~810 per UPDATE.
        assert_eq!(d.updates.len(), 13);
        let mut total = 0;
        for u in &d.updates {
            let bytes = Message::Update(Box::new(u.clone())).to_bytes(s.ctx);
            assert!(bytes.len() <= MAX_MESSAGE_LEN);
            let Ok(Message::Update(back)) = Message::parse(&bytes, s.ctx) else {
                panic!("decodes");
            };
            assert_eq!(back.attributes.as_path, Some(AsPath::sequence(&[65001])));
            assert_eq!(back.attributes.local_pref, None, "eBGP");
            total += back.nlri.len();
        }
        assert_eq!(total, 10_000);
        rib.commit(d);
        assert_eq!(rib.len(), 10_000);
        // Nothing changed: nothing to send.
        assert!(rib.delta(&desired, &s).updates.is_empty());
        // Withdraw one, change the attributes of another.
        let mut next = desired.clone();
        let first = *next.keys().next().unwrap();
        next.remove(&first);
        let second = *next.keys().next().unwrap();
        let b = RouteAttributes::new(None, Some(5), []);
        next.insert(second, b);
        let d = rib.delta(&next, &s);
        assert_eq!((d.announced, d.withdrawn), (1, 1));
        assert_eq!(d.updates.len(), 2);
        assert_eq!(d.updates[0].nlri, [second], "announce first");
        assert_eq!(d.updates[1].withdrawn, [first]);
    }

    #[test]
    fn ibgp_gets_local_pref_and_an_empty_as_path() {
        let s = speaker(true);
        let a = RouteAttributes::new(Some(300), None, []);
        let d = AdjRibOut::default().delta(&hosts(1, &a), &s);
        let attrs = &d.updates[0].attributes;
        assert_eq!(attrs.local_pref, Some(300));
        assert_eq!(attrs.as_path, Some(AsPath::default()));
        let d = AdjRibOut::default().delta(&hosts(1, &RouteAttributes::default()), &s);
        assert_eq!(d.updates[0].attributes.local_pref, Some(DEFAULT_LOCAL_PREF));
    }

    #[test]
    fn ipv6_needs_a_next_hop_and_goes_in_mp_attributes() {
        let mut s = speaker(false);
        let v6: Prefix = "2001:db8::10/128".parse().unwrap();
        let mut desired = hosts(1, &RouteAttributes::default());
        desired.insert(v6, RouteAttributes::default());
        let d = AdjRibOut::default().delta(&desired, &s);
        assert_eq!((d.announced, d.skipped), (1, 1));
        s.next_hop_v6 = Some("2001:db8::2".parse().unwrap());
        let mut rib = AdjRibOut::default();
        let d = rib.delta(&desired, &s);
        assert_eq!(d.announced, 2);
        let mp = d
            .updates
            .iter()
            .find_map(|u| u.attributes.mp_reach.as_ref())
            .unwrap();
        assert_eq!(mp.nlri, [v6]);
        rib.commit(d);
        let d = rib.delta(&Routes::new(), &s);
        assert_eq!(d.withdrawn, 2);
        assert!(d.updates.iter().any(|u| {
            u.attributes
                .mp_unreach
                .as_ref()
                .is_some_and(|m| m.withdrawn == [v6])
        }));
    }
}
