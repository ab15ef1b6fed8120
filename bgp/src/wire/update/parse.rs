//! Path attribute parsing of an UPDATE: flag, length and value checks of
//! each known attribute, with the RFC 4271 §6.3 NOTIFICATION and the
//! RFC 7606 action of each error (see the parent module's doc).
//!
//! MP_REACH_NLRI / MP_UNREACH_NLRI (RFC 4760 §3, §4) of IPv4/IPv6
//! unicast:
//! - shorter than AFI+SAFI(+next hop length), a next hop length that
//!   overruns the attribute or does not fit the AFI (4 bytes for IPv4,
//!   or 16 or 32 once the Extended Next Hop capability is negotiated,
//!   RFC 8950 §3; 16 or 32 for IPv6, RFC 2545 §3: an IPv6 next hop for
//!   IPv4 routes without the capability is such a mismatch, since the
//!   length is what says which family the next hop is), or a malformed prefix:
//!   the NLRI cannot be located reliably, so the session is reset
//!   (RFC 7606 §7.11, §5.3) with UPDATE Message Error / Optional Attribute
//!   Error and the attribute as data (RFC 4760 §7);
//! - a repeated MP attribute: Malformed Attribute List, reset (RFC 7606
//!   §3g);
//! - wrong flags: treat-as-withdraw (RFC 7606 §3c), once the attribute
//!   itself parsed (so its prefixes are known);
//! - a next hop that parses but cannot be one (an IPv6 global address
//!   that is unspecified, loopback, multicast, link-local or IPv4-mapped;
//!   a second address that is not link-local, RFC 2545 §3; an IPv4
//!   0.0.0.0, broadcast or multicast): Invalid Next Hop and
//!   treat-as-withdraw, as RFC 4271 §6.3 and RFC 7606 §7.3 say for the
//!   NEXT_HOP attribute;
//! - other AFI/SAFIs are kept raw, not interpreted.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::super::notification::{code, update as sub};
use super::super::prefix::{AFI_IPV4, AFI_IPV6, Prefix, SAFI_UNICAST};
use super::super::{DecodeContext, DecodeError, ErrorAction};
use super::{
    AsPath, MpReach, MpUnreach, OPT_NON_TRANS, OPT_TRANS, Origin, PathAttributes, RawAttribute,
    WELL_KNOWN, attr, flag, malformed,
};

pub(super) struct AttrParser {
    pub ctx: DecodeContext,
    pub attrs: PathAttributes,
    pub seen: [bool; 256],
    /// The first treat-as-withdraw error.
    pub soft: Option<DecodeError>,
    pub discarded: Vec<DecodeError>,
}

impl AttrParser {
    pub fn parse_all(&mut self, mut buf: &[u8]) -> Result<(), DecodeError> {
        while !buf.is_empty() {
            let [flags, type_code, ..] = *buf else {
                return Err(malformed("truncated attribute header".into()));
            };
            let (len, hdr) = if flags & flag::EXTENDED_LENGTH != 0 {
                let [_, _, l0, l1, ..] = *buf else {
                    return Err(malformed("truncated attribute header".into()));
                };
                (usize::from(u16::from_be_bytes([l0, l1])), 4)
            } else {
                let [_, _, l0, ..] = *buf else {
                    return Err(malformed("truncated attribute header".into()));
                };
                (usize::from(l0), 3)
            };
            let Some(value) = buf.get(hdr..hdr + len) else {
                return Err(malformed(format!(
                    "attribute {type_code} of {len} bytes overruns the attribute list"
                )));
            };
            let whole = &buf[..hdr + len];
            buf = &buf[hdr + len..];
            if std::mem::replace(&mut self.seen[usize::from(type_code)], true) {
                // RFC 7606 §3g: a repeated MP attribute resets the session,
                // any other repeat is dropped.
                if matches!(type_code, attr::MP_REACH_NLRI | attr::MP_UNREACH_NLRI) {
                    return Err(malformed(format!("attribute {type_code} repeated")));
                }
                self.discarded.push(
                    malformed(format!("attribute {type_code} repeated"))
                        .with_action(ErrorAction::AttributeDiscard),
                );
                continue;
            }
            self.one(flags, type_code, value, whole)?;
        }
        Ok(())
    }

    /// Records a non-reset error per its action.
    fn soft(&mut self, e: DecodeError) -> Result<(), DecodeError> {
        match e.action {
            ErrorAction::SessionReset => return Err(e),
            ErrorAction::TreatAsWithdraw => {
                if self.soft.is_none() {
                    self.soft = Some(e);
                }
            }
            ErrorAction::AttributeDiscard => self.discarded.push(e),
        }
        Ok(())
    }

    fn one(&mut self, flags: u8, t: u8, v: &[u8], whole: &[u8]) -> Result<(), DecodeError> {
        let err = |subcode: u8, why: String, action: ErrorAction| {
            DecodeError::reset(why, code::UPDATE_MESSAGE, subcode, whole.to_vec())
                .with_action(action)
        };
        let local_pref_action = if self.ctx.ibgp {
            ErrorAction::TreatAsWithdraw
        } else {
            ErrorAction::AttributeDiscard
        };
        // (expected optional+transitive bits, action when malformed)
        let known = match t {
            attr::ORIGIN | attr::AS_PATH | attr::NEXT_HOP => {
                Some((WELL_KNOWN, ErrorAction::TreatAsWithdraw))
            }
            attr::LOCAL_PREF => Some((WELL_KNOWN, local_pref_action)),
            attr::ATOMIC_AGGREGATE => Some((WELL_KNOWN, ErrorAction::AttributeDiscard)),
            attr::MULTI_EXIT_DISC => Some((OPT_NON_TRANS, ErrorAction::TreatAsWithdraw)),
            attr::COMMUNITIES => Some((OPT_TRANS, ErrorAction::TreatAsWithdraw)),
            attr::AGGREGATOR | attr::AS4_PATH | attr::AS4_AGGREGATOR => {
                Some((OPT_TRANS, ErrorAction::AttributeDiscard))
            }
            // Their own syntax errors reset the session (`mp_error`).
            attr::MP_REACH_NLRI | attr::MP_UNREACH_NLRI => {
                Some((OPT_NON_TRANS, ErrorAction::TreatAsWithdraw))
            }
            _ => None,
        };
        let Some((expected, action)) = known else {
            if flags & flag::OPTIONAL == 0 {
                return Err(err(
                    sub::UNRECOGNIZED_WELL_KNOWN_ATTRIBUTE,
                    format!("unrecognized well-known attribute {t}"),
                    ErrorAction::SessionReset,
                ));
            }
            self.attrs.other.push(RawAttribute {
                flags: flags & !flag::EXTENDED_LENGTH,
                type_code: t,
                value: v.to_vec(),
            });
            return Ok(());
        };
        let type_bits = flags & (flag::OPTIONAL | flag::TRANSITIVE);
        let partial_ok = expected == OPT_TRANS;
        if type_bits != expected || (!partial_ok && flags & flag::PARTIAL != 0) {
            // An MP attribute is parsed anyway: a syntax error in it resets
            // the session, whatever its flags.
            match t {
                attr::MP_REACH_NLRI => self.mp_reach(flags, v, whole)?,
                attr::MP_UNREACH_NLRI => self.mp_unreach(flags, v, whole)?,
                _ => {}
            }
            return self.soft(err(
                sub::ATTRIBUTE_FLAGS_ERROR,
                format!("attribute {t} with flags {flags:#04x}"),
                action,
            ));
        }
        let length_error = |what: &str| {
            err(
                sub::ATTRIBUTE_LENGTH_ERROR,
                format!("{what} of {} bytes", v.len()),
                action,
            )
        };
        match t {
            attr::ORIGIN => match *v {
                [o @ 0..=2] => {
                    self.attrs.origin = Some(match o {
                        0 => Origin::Igp,
                        1 => Origin::Egp,
                        _ => Origin::Incomplete,
                    })
                }
                [o] => {
                    return self.soft(err(sub::INVALID_ORIGIN, format!("ORIGIN {o}"), action));
                }
                _ => return self.soft(length_error("ORIGIN")),
            },
            attr::AS_PATH => match AsPath::parse(v, self.ctx.four_octet_as) {
                Some(p) => self.attrs.as_path = Some(p),
                None => {
                    return self.soft(err(
                        sub::MALFORMED_AS_PATH,
                        "malformed AS_PATH".into(),
                        action,
                    ));
                }
            },
            attr::NEXT_HOP => match *v {
                [a, b, c, d] => {
                    let nh = Ipv4Addr::new(a, b, c, d);
                    if nh.is_unspecified() || nh.is_broadcast() || nh.is_multicast() {
                        return self.soft(err(
                            sub::INVALID_NEXT_HOP,
                            format!("NEXT_HOP {nh}"),
                            action,
                        ));
                    }
                    self.attrs.next_hop = Some(nh);
                }
                _ => return self.soft(length_error("NEXT_HOP")),
            },
            attr::MULTI_EXIT_DISC | attr::LOCAL_PREF => match *v {
                [a, b, c, d] => {
                    let x = u32::from_be_bytes([a, b, c, d]);
                    if t == attr::LOCAL_PREF {
                        self.attrs.local_pref = Some(x);
                    } else {
                        self.attrs.med = Some(x);
                    }
                }
                _ => {
                    return self.soft(length_error(if t == attr::LOCAL_PREF {
                        "LOCAL_PREF"
                    } else {
                        "MULTI_EXIT_DISC"
                    }));
                }
            },
            attr::ATOMIC_AGGREGATE => {
                if !v.is_empty() {
                    return self.soft(length_error("ATOMIC_AGGREGATE"));
                }
                self.attrs.atomic_aggregate = true;
            }
            attr::COMMUNITIES => {
                if v.is_empty() || !v.len().is_multiple_of(4) {
                    return self.soft(length_error("COMMUNITIES"));
                }
                self.attrs.communities = v
                    .chunks_exact(4)
                    .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
            }
            attr::AGGREGATOR | attr::AS4_AGGREGATOR => {
                let ok_len = if t == attr::AS4_AGGREGATOR || self.ctx.four_octet_as {
                    8
                } else {
                    6
                };
                if v.len() != ok_len {
                    return self.soft(length_error("AGGREGATOR"));
                }
                self.attrs.other.push(RawAttribute {
                    flags: flags & !flag::EXTENDED_LENGTH,
                    type_code: t,
                    value: v.to_vec(),
                });
            }
            attr::AS4_PATH => match AsPath::parse(v, true) {
                Some(p) => self.attrs.as4_path = Some(p),
                None => {
                    return self.soft(err(
                        sub::MALFORMED_AS_PATH,
                        "malformed AS4_PATH".into(),
                        action,
                    ));
                }
            },
            attr::MP_REACH_NLRI => return self.mp_reach(flags, v, whole),
            attr::MP_UNREACH_NLRI => return self.mp_unreach(flags, v, whole),
            _ => {}
        }
        Ok(())
    }

    fn mp_error(why: String, whole: &[u8]) -> DecodeError {
        DecodeError::reset(
            why,
            code::UPDATE_MESSAGE,
            sub::OPTIONAL_ATTRIBUTE_ERROR,
            whole.to_vec(),
        )
    }

    /// Keeps an MP attribute of a family other than IPv4/IPv6 unicast as
    /// received (not ours to interpret); true if it was one.
    fn other_family(&mut self, afi: u16, safi: u8, flags: u8, type_code: u8, v: &[u8]) -> bool {
        if matches!(afi, AFI_IPV4 | AFI_IPV6) && safi == SAFI_UNICAST {
            return false;
        }
        self.attrs.other.push(RawAttribute {
            flags: flags & !flag::EXTENDED_LENGTH,
            type_code,
            value: v.to_vec(),
        });
        true
    }

    fn mp_reach(&mut self, flags: u8, v: &[u8], whole: &[u8]) -> Result<(), DecodeError> {
        let [a0, a1, safi, nh_len, ..] = *v else {
            return Err(Self::mp_error("MP_REACH_NLRI too short".into(), whole));
        };
        let afi = u16::from_be_bytes([a0, a1]);
        if self.other_family(afi, safi, flags, attr::MP_REACH_NLRI, v) {
            return Ok(());
        }
        let nh_len = usize::from(nh_len);
        // IPv4 routes: a 4-byte next hop, or (RFC 8950 §3, once the
        // Extended Next Hop capability is negotiated) a 16- or 32-byte
        // IPv6 one; IPv6 routes: 16 or 32 bytes (RFC 2545 §3).
        let nh_ok = match afi {
            AFI_IPV4 => nh_len == 4 || (self.ctx.extended_next_hop && matches!(nh_len, 16 | 32)),
            _ => matches!(nh_len, 16 | 32),
        };
        let (Some(nh), Some(_reserved)) = (v.get(4..4 + nh_len), v.get(4 + nh_len)) else {
            return Err(Self::mp_error(
                format!("MP_REACH_NLRI next hop of {nh_len} bytes overruns it"),
                whole,
            ));
        };
        if !nh_ok {
            return Err(Self::mp_error(
                format!("MP_REACH_NLRI next hop of {nh_len} bytes for AFI {afi}"),
                whole,
            ));
        }
        let nlri = Prefix::parse_all(&v[5 + nh_len..], afi)
            .ok_or_else(|| Self::mp_error("malformed prefix in MP_REACH_NLRI".into(), whole))?;
        self.attrs.mp_reach = Some(MpReach {
            afi,
            safi,
            next_hop: nh.to_vec(),
            nlri,
        });
        if let Some(why) = bad_mp_next_hop(nh) {
            return self.soft(
                DecodeError::reset(
                    format!("MP_REACH_NLRI next hop {why}"),
                    code::UPDATE_MESSAGE,
                    sub::INVALID_NEXT_HOP,
                    whole.to_vec(),
                )
                .with_action(ErrorAction::TreatAsWithdraw),
            );
        }
        Ok(())
    }

    fn mp_unreach(&mut self, flags: u8, v: &[u8], whole: &[u8]) -> Result<(), DecodeError> {
        let [a0, a1, safi, ..] = *v else {
            return Err(Self::mp_error("MP_UNREACH_NLRI too short".into(), whole));
        };
        let afi = u16::from_be_bytes([a0, a1]);
        if self.other_family(afi, safi, flags, attr::MP_UNREACH_NLRI, v) {
            return Ok(());
        }
        let withdrawn = Prefix::parse_all(&v[3..], afi)
            .ok_or_else(|| Self::mp_error("malformed prefix in MP_UNREACH_NLRI".into(), whole))?;
        self.attrs.mp_unreach = Some(MpUnreach {
            afi,
            safi,
            withdrawn,
        });
        Ok(())
    }
}

/// Why an MP_REACH_NLRI next hop of a valid length cannot be one (see the
/// module doc), or `None`.
fn bad_mp_next_hop(nh: &[u8]) -> Option<String> {
    let v6 = |b: &[u8]| <[u8; 16]>::try_from(b).ok().map(Ipv6Addr::from);
    match nh.len() {
        4 => {
            let a = Ipv4Addr::new(nh[0], nh[1], nh[2], nh[3]);
            (a.is_unspecified() || a.is_broadcast() || a.is_multicast())
                .then(|| format!("{a} is not a unicast address"))
        }
        16 | 32 => {
            let global = v6(&nh[..16])?;
            if !is_global_next_hop_v6(global) {
                return Some(format!("{global} is not a global unicast address"));
            }
            let link_local = nh.get(16..).and_then(v6)?;
            (!link_local.is_unicast_link_local()).then(|| {
                format!("{link_local} in the link-local slot is not fe80::/10 (RFC 2545 §3)")
            })
        }
        _ => None,
    }
}

/// Whether `a` may be the global IPv6 next hop of a route (RFC 2545 §2):
/// unicast, and not unspecified, loopback, link-local (that goes in the
/// second slot, RFC 2545 §3) or IPv4-mapped.
pub fn is_global_next_hop_v6(a: Ipv6Addr) -> bool {
    !(a.is_unspecified()
        || a.is_loopback()
        || a.is_multicast()
        || a.is_unicast_link_local()
        || a.to_ipv4_mapped().is_some())
}
