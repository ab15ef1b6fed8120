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
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::config::Family;
use crate::wire::{
    AsPath, DecodeContext, MAX_MESSAGE_LEN, MpReach, MpUnreach, Origin, PathAttributes, Prefix,
    UpdateRepr,
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
    /// NEXT_HOP for IPv4 routes (our IPv4 address on this session), when
    /// IPv4 unicast was negotiated.
    pub next_hop_v4: Option<Ipv4Addr>,
    /// The global IPv6 next hop of this session (RFC 2545 §2), if it has
    /// one: of IPv6 routes, and of IPv4 routes with RFC 8950.
    pub next_hop_v6: Option<Ipv6Addr>,
    /// The link-local next hop sent after the global one (RFC 2545 §3).
    pub next_hop_v6_link_local: Option<Ipv6Addr>,
    /// IPv6 unicast was negotiated.
    pub ipv6_unicast: bool,
    /// IPv4 unicast was negotiated with the Extended Next Hop Encoding
    /// (RFC 8950) and the session has no IPv4 next hop: IPv4 routes go in
    /// MP_REACH_NLRI (AFI 1) with the IPv6 next hop.
    pub ipv4_over_v6: bool,
}

impl Speaker {
    /// Whether this session carries `family` (negotiated, with a next hop).
    pub fn carries(&self, family: Family) -> bool {
        match family {
            Family::Ipv4Unicast => {
                self.next_hop_v4.is_some() || (self.ipv4_over_v6 && self.next_hop_v6.is_some())
            }
            Family::Ipv6Unicast => self.ipv6_unicast && self.next_hop_v6.is_some(),
        }
    }

    /// The MP_REACH_NLRI next hop field of IPv6 routes and of IPv4 routes
    /// over RFC 8950: 16 bytes, or 32 with the link-local address
    /// (RFC 2545 §3, RFC 8950 §3).
    fn mp_next_hop_v6(&self) -> Vec<u8> {
        let mut nh = self
            .next_hop_v6
            .unwrap_or(Ipv6Addr::UNSPECIFIED)
            .octets()
            .to_vec();
        if let Some(ll) = self.next_hop_v6_link_local {
            nh.extend_from_slice(&ll.octets());
        }
        nh
    }

    /// The full attribute set of a route of `family`: IPv4 routes carry
    /// NEXT_HOP (or, over RFC 8950, an IPv4 MP_REACH_NLRI with the IPv6
    /// next hop), IPv6 routes an MP_REACH_NLRI without prefixes yet
    /// (RFC 4760 §3: NEXT_HOP is for the IPv4 NLRI field only).
    fn path_attributes(&self, a: &RouteAttributes, family: Family) -> PathAttributes {
        let as_path = if self.ibgp {
            AsPath::default()
        } else {
            AsPath::sequence(&[self.my_asn])
        };
        // A 4-octet ASN towards a 2-octet peer: AS_TRANS in AS_PATH and the
        // real path in AS4_PATH (RFC 6793 §4.2.2).
        let as4_path =
            (!self.ctx.four_octet_as && as_path.needs_four_octets()).then(|| as_path.clone());
        let (next_hop, mp_reach) = match (family, self.next_hop_v4) {
            (Family::Ipv4Unicast, Some(nh)) => (Some(nh), None),
            _ => {
                let (afi, safi) = family.afi_safi();
                let mp = MpReach {
                    afi,
                    safi,
                    next_hop: self.mp_next_hop_v6(),
                    nlri: Vec::new(),
                };
                (None, Some(mp))
            }
        };
        PathAttributes {
            origin: Some(Origin::Igp),
            as_path: Some(as_path),
            next_hop,
            med: a.med,
            local_pref: if self.ibgp {
                Some(a.local_pref.unwrap_or(DEFAULT_LOCAL_PREF))
            } else {
                None
            },
            communities: a.communities.clone(),
            as4_path,
            mp_reach,
            ..Default::default()
        }
    }
}

/// The routes of one family the router has from us.
type FamilyRib = BTreeMap<Prefix, RouteAttributes>;

/// The routes the router has from us: one Adj-RIB-Out per family
/// (indexed by [`Family`] as in [`Family::ALL`]), so a ROUTE-REFRESH of
/// one family resends only that family.
#[derive(Debug, Default)]
pub(crate) struct AdjRibOut {
    sent: [FamilyRib; 2],
}

/// A computed difference, ready to send and then commit.
#[derive(Debug)]
pub(crate) struct Delta {
    pub updates: Vec<UpdateRepr>,
    pub announced: usize,
    pub withdrawn: usize,
    /// Desired prefixes of a family this session does not carry.
    pub skipped: usize,
    next: [FamilyRib; 2],
}

fn index(family: Family) -> usize {
    match family {
        Family::Ipv4Unicast => 0,
        Family::Ipv6Unicast => 1,
    }
}

impl AdjRibOut {
    /// Prefixes the router has from us, every family.
    pub fn len(&self) -> usize {
        self.sent.iter().map(BTreeMap::len).sum()
    }

    /// Prefixes of `family` the router has from us.
    pub fn len_of(&self, family: Family) -> usize {
        self.sent[index(family)].len()
    }

    /// Forgets one family (a ROUTE-REFRESH asks for all of it again).
    pub fn clear_family(&mut self, family: Family) {
        self.sent[index(family)].clear();
    }

    /// The UPDATEs that turn the router's view into `desired`: every
    /// announcement (IPv4 field, then MP_REACH_NLRI) before every
    /// withdrawal (IPv4 field, then MP_UNREACH_NLRI).
    pub fn delta(&self, desired: &Routes, speaker: &Speaker) -> Delta {
        let mut next: [FamilyRib; 2] = Default::default();
        let mut skipped = 0;
        let mut announced = 0;
        let mut updates = Vec::new();
        for family in Family::ALL {
            let i = index(family);
            let carried = speaker.carries(family);
            let mut groups: BTreeMap<&RouteAttributes, Vec<Prefix>> = BTreeMap::new();
            for (p, a) in desired.iter().filter(|(p, _)| Family::of(p) == family) {
                if !carried {
                    skipped += 1;
                    continue;
                }
                next[i].insert(*p, a.clone());
                if self.sent[i].get(p) != Some(a) {
                    groups.entry(a).or_default().push(*p);
                }
            }
            for (attrs, prefixes) in groups {
                announced += prefixes.len();
                let base = speaker.path_attributes(attrs, family);
                pack(
                    &prefixes,
                    fixed_len(&base, speaker.ctx),
                    |chunk| {
                        let mut attributes = base.clone();
                        match attributes.mp_reach.as_mut() {
                            Some(r) => {
                                r.nlri = chunk.to_vec();
                                UpdateRepr {
                                    attributes,
                                    ..Default::default()
                                }
                            }
                            None => UpdateRepr {
                                attributes,
                                nlri: chunk.to_vec(),
                                ..Default::default()
                            },
                        }
                    },
                    &mut updates,
                );
            }
        }
        let mut withdrawn = 0;
        for family in Family::ALL {
            let i = index(family);
            let gone: Vec<Prefix> = self.sent[i]
                .keys()
                .filter(|p| !next[i].contains_key(p))
                .copied()
                .collect();
            withdrawn += gone.len();
            let empty = withdrawal(family, Vec::new());
            pack(
                &gone,
                fixed_len(&empty.attributes, speaker.ctx),
                |chunk| withdrawal(family, chunk.to_vec()),
                &mut updates,
            );
        }
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

/// An UPDATE withdrawing `prefixes` of `family`: the IPv4 Withdrawn
/// Routes field (also for IPv4 routes announced over RFC 8950: the field
/// withdraws IPv4 unicast whatever the next hop was, RFC 4760 §4), or
/// MP_UNREACH_NLRI. With no prefixes it is
/// the family's End-of-RIB marker (RFC 4724 §2).
fn withdrawal(family: Family, prefixes: Vec<Prefix>) -> UpdateRepr {
    match family {
        Family::Ipv4Unicast => UpdateRepr {
            withdrawn: prefixes,
            ..Default::default()
        },
        Family::Ipv6Unicast => {
            let (afi, safi) = family.afi_safi();
            UpdateRepr {
                attributes: PathAttributes {
                    mp_unreach: Some(MpUnreach {
                        afi,
                        safi,
                        withdrawn: prefixes,
                    }),
                    ..Default::default()
                },
                ..Default::default()
            }
        }
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

/// The End-of-RIB marker of a family (RFC 4724 §2): an UPDATE with
/// nothing in it (IPv4 unicast) or with only an empty MP_UNREACH_NLRI.
pub(crate) fn end_of_rib(family: Family) -> UpdateRepr {
    withdrawal(family, Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{AFI_IPV4, AFI_IPV6, Message, SAFI_UNICAST};
    use std::net::IpAddr;

    fn speaker(ibgp: bool) -> Speaker {
        Speaker {
            my_asn: 65001,
            ibgp,
            ctx: DecodeContext::default(),
            next_hop_v4: Some(Ipv4Addr::new(10, 0, 0, 2)),
            next_hop_v6: None,
            next_hop_v6_link_local: None,
            ipv6_unicast: true,
            ipv4_over_v6: false,
        }
    }

    /// `u` encoded (at most 4096 bytes) and decoded again.
    fn on_the_wire(u: &UpdateRepr, ctx: DecodeContext) -> UpdateRepr {
        let bytes = Message::Update(Box::new(u.clone())).to_bytes(ctx);
        assert!(bytes.len() <= MAX_MESSAGE_LEN);
        let Ok(Message::Update(back)) = Message::parse(&bytes, ctx) else {
            panic!("decodes");
        };
        *back
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
            let back = on_the_wire(u, s.ctx);
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

    #[test]
    fn ipv6_routes_carry_the_attributes_and_a_32_byte_next_hop_with_link_local() {
        let mut s = speaker(true);
        s.next_hop_v4 = None;
        s.next_hop_v6 = Some("2001:db8::2".parse().unwrap());
        s.next_hop_v6_link_local = Some("fe80::2".parse().unwrap());
        let a = RouteAttributes::new(Some(300), None, [(65001 << 16) | 7]);
        let mut desired: Routes = (0..1000u32)
            .map(|i| {
                let addr = Ipv6Addr::from(0x2001_0db8_0001_u128 << 80 | u128::from(i));
                (Prefix::host(IpAddr::V6(addr)), a.clone())
            })
            .collect();
        desired.insert("10.0.0.9/32".parse().unwrap(), a.clone());
        let mut rib = AdjRibOut::default();
        let d = rib.delta(&desired, &s);
        assert_eq!((d.announced, d.skipped), (1000, 1), "IPv4 not carried");
        // 17 bytes per /128: several UPDATEs, each within 4096 bytes.
        assert!(d.updates.len() > 1);
        let mut total = 0;
        for u in &d.updates {
            let back = on_the_wire(u, s.ctx);
            let mp = back.attributes.mp_reach.as_ref().expect("MP_REACH_NLRI");
            assert_eq!((mp.afi, mp.safi), (AFI_IPV6, SAFI_UNICAST));
            assert_eq!(mp.next_hop.len(), 32);
            assert_eq!(
                mp.next_hop[16..],
                "fe80::2".parse::<Ipv6Addr>().unwrap().octets()
            );
            assert_eq!(back.attributes.next_hop, None, "no IPv4 NEXT_HOP");
            assert_eq!(back.attributes.local_pref, Some(300));
            assert_eq!(back.attributes.communities, [(65001 << 16) | 7]);
            assert!(back.nlri.is_empty());
            total += mp.nlri.len();
        }
        assert_eq!(total, 1000);
        rib.commit(d);
        assert_eq!(
            (
                rib.len_of(Family::Ipv6Unicast),
                rib.len_of(Family::Ipv4Unicast)
            ),
            (1000, 0)
        );
        // A ROUTE-REFRESH of IPv4 resends nothing; of IPv6, everything.
        rib.clear_family(Family::Ipv4Unicast);
        assert!(rib.delta(&desired, &s).updates.is_empty());
        rib.clear_family(Family::Ipv6Unicast);
        assert_eq!(rib.delta(&desired, &s).announced, 1000);
    }

    #[test]
    fn ipv4_routes_over_rfc8950_go_in_an_ipv4_mp_reach_with_the_ipv6_next_hop() {
        let mut s = speaker(false);
        s.next_hop_v4 = None;
        s.next_hop_v6 = Some("2001:db8::2".parse().unwrap());
        s.next_hop_v6_link_local = Some("fe80::2".parse().unwrap());
        let v6: Prefix = "2001:db8:100::10/128".parse().unwrap();
        let mut desired = hosts(3, &RouteAttributes::default());
        desired.insert(v6, RouteAttributes::default());
        // Not negotiated: IPv4 has no next hop on this session.
        let d = AdjRibOut::default().delta(&desired, &s);
        assert_eq!((d.announced, d.skipped), (1, 3));
        s.ipv4_over_v6 = true;
        let mut rib = AdjRibOut::default();
        let d = rib.delta(&desired, &s);
        assert_eq!((d.announced, d.skipped), (4, 0));
        let ctx = DecodeContext {
            extended_next_hop: true,
            ..s.ctx
        };
        let v4_update = on_the_wire(&d.updates[0], ctx);
        let mp = v4_update
            .attributes
            .mp_reach
            .as_ref()
            .expect("MP_REACH_NLRI");
        assert_eq!((mp.afi, mp.safi), (AFI_IPV4, SAFI_UNICAST));
        assert_eq!(mp.nlri.len(), 3);
        assert_eq!(mp.next_hop.len(), 32, "global + link-local (RFC 8950 §3)");
        assert_eq!(mp.next_hop_addr(), Some("2001:db8::2".parse().unwrap()));
        assert_eq!(v4_update.attributes.next_hop, None);
        assert!(v4_update.nlri.is_empty(), "nothing in the IPv4 NLRI field");
        rib.commit(d);
        // Withdrawn in the IPv4 field.
        let gone = *desired.keys().next().unwrap();
        desired.remove(&gone);
        let d = rib.delta(&desired, &s);
        assert_eq!(d.withdrawn, 1);
        assert_eq!(d.updates[0].withdrawn, [gone]);
    }

    #[test]
    fn end_of_rib_per_family() {
        let v4 = end_of_rib(Family::Ipv4Unicast);
        assert_eq!(v4, UpdateRepr::default(), "an empty UPDATE");
        let v6 = end_of_rib(Family::Ipv6Unicast);
        let bytes = Message::Update(Box::new(v6)).to_bytes(DecodeContext::default());
        // Header, no withdrawn routes, 6 bytes of attributes: flags 0x80,
        // type 15, length 3, AFI 2, SAFI 1 (RFC 4724 §2).
        assert_eq!(bytes[19..], [0, 0, 0, 6, 0x80, 15, 3, 0, 2, 1]);
    }
}
