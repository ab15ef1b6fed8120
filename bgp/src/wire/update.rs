//! UPDATE (RFC 4271 §4.3) with the path attributes a VIP announcer sends
//! and must understand: ORIGIN, AS_PATH (2- or 4-octet, RFC 6793), NEXT_HOP,
//! MULTI_EXIT_DISC, LOCAL_PREF, ATOMIC_AGGREGATE, COMMUNITIES (RFC 1997),
//! AS4_PATH, MP_REACH_NLRI / MP_UNREACH_NLRI (RFC 4760, IPv4 and IPv6
//! unicast). Other attributes are kept as [`RawAttribute`]s.
//!
//! Error handling follows RFC 7606 on top of RFC 4271 §6.3: every error
//! names its RFC 4271 NOTIFICATION, and its [`ErrorAction`] says whether
//! the session must be reset (framing, NLRI syntax, MP attribute syntax,
//! unrecognized well-known attributes), the UPDATE's routes treated as
//! withdrawn (ORIGIN, AS_PATH, NEXT_HOP, MED, COMMUNITIES, flags, missing
//! mandatory attributes, an MP next hop that cannot be one: `parse` lists
//! the MP cases with their RFC sections) or the attribute discarded (ATOMIC_AGGREGATE,
//! AGGREGATOR, AS4_*, LOCAL_PREF from eBGP; these land in
//! [`UpdateRepr::discarded`] and parsing succeeds). A session-reset error
//! anywhere in the message wins over a treat-as-withdraw one.

use std::net::{IpAddr, Ipv4Addr};

use super::notification::{code, update as sub};
use super::prefix::{AFI_IPV4, Prefix};
use super::{DecodeContext, DecodeError, ErrorAction, HEADER_LEN};

mod parse;
use parse::AttrParser;
pub use parse::is_global_next_hop_v6;

/// Attribute type codes.
pub mod attr {
    pub const ORIGIN: u8 = 1;
    pub const AS_PATH: u8 = 2;
    pub const NEXT_HOP: u8 = 3;
    pub const MULTI_EXIT_DISC: u8 = 4;
    pub const LOCAL_PREF: u8 = 5;
    pub const ATOMIC_AGGREGATE: u8 = 6;
    pub const AGGREGATOR: u8 = 7;
    pub const COMMUNITIES: u8 = 8;
    pub const MP_REACH_NLRI: u8 = 14;
    pub const MP_UNREACH_NLRI: u8 = 15;
    pub const AS4_PATH: u8 = 17;
    pub const AS4_AGGREGATOR: u8 = 18;
}

/// Attribute flag bits.
pub mod flag {
    pub const OPTIONAL: u8 = 0x80;
    pub const TRANSITIVE: u8 = 0x40;
    pub const PARTIAL: u8 = 0x20;
    pub const EXTENDED_LENGTH: u8 = 0x10;
}

/// AS_PATH segment types (RFC 4271 §4.3, RFC 5065).
pub mod segment {
    pub const AS_SET: u8 = 1;
    pub const AS_SEQUENCE: u8 = 2;
    pub const AS_CONFED_SEQUENCE: u8 = 3;
    pub const AS_CONFED_SET: u8 = 4;
}

/// ORIGIN values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Origin {
    Igp = 0,
    Egp = 1,
    Incomplete = 2,
}

/// One AS_PATH segment.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AsSegment {
    /// One of [`segment`].
    pub kind: u8,
    /// 1..=255 ASNs.
    pub asns: Vec<u32>,
}

/// An AS_PATH (or AS4_PATH): its segments in order. Empty for routes
/// originated inside our AS (iBGP).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct AsPath {
    pub segments: Vec<AsSegment>,
}

impl AsPath {
    /// One AS_SEQUENCE of `asns` (empty path if `asns` is empty).
    pub fn sequence(asns: &[u32]) -> Self {
        AsPath {
            segments: asns
                .chunks(255)
                .map(|c| AsSegment {
                    kind: segment::AS_SEQUENCE,
                    asns: c.to_vec(),
                })
                .collect(),
        }
    }

    /// Whether some ASN does not fit 2 octets.
    pub fn needs_four_octets(&self) -> bool {
        self.segments
            .iter()
            .any(|s| s.asns.iter().any(|&a| a > 0xffff))
    }

    fn emit(&self, four: bool, out: &mut Vec<u8>) {
        for s in &self.segments {
            out.push(s.kind);
            out.push(s.asns.len() as u8);
            for &a in &s.asns {
                if four {
                    out.extend_from_slice(&a.to_be_bytes());
                } else {
                    let a = u16::try_from(a).unwrap_or(super::AS_TRANS as u16);
                    out.extend_from_slice(&a.to_be_bytes());
                }
            }
        }
    }

    fn parse(mut v: &[u8], four: bool) -> Option<Self> {
        let width = if four { 4 } else { 2 };
        let mut segments = Vec::new();
        while !v.is_empty() {
            let [kind, count, ..] = *v else { return None };
            if !(segment::AS_SET..=segment::AS_CONFED_SET).contains(&kind) || count == 0 {
                return None;
            }
            let n = usize::from(count) * width;
            let bytes = v.get(2..2 + n)?;
            let asns = bytes
                .chunks_exact(width)
                .map(|c| match *c {
                    [a, b] => u32::from(u16::from_be_bytes([a, b])),
                    [a, b, c, d] => u32::from_be_bytes([a, b, c, d]),
                    _ => 0,
                })
                .collect();
            segments.push(AsSegment { kind, asns });
            v = &v[2 + n..];
        }
        Some(AsPath { segments })
    }
}

/// MP_REACH_NLRI for IPv4 or IPv6 unicast (other families are kept raw).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MpReach {
    pub afi: u16,
    pub safi: u8,
    /// 4 bytes (IPv4), 16 (IPv6 global) or 32 (global + link-local).
    pub next_hop: Vec<u8>,
    pub nlri: Vec<Prefix>,
}

impl MpReach {
    /// The next hop's global address.
    pub fn next_hop_addr(&self) -> Option<IpAddr> {
        match self.next_hop.len() {
            4 => <[u8; 4]>::try_from(&self.next_hop[..])
                .ok()
                .map(IpAddr::from),
            16 | 32 => <[u8; 16]>::try_from(&self.next_hop[..16])
                .ok()
                .map(IpAddr::from),
            _ => None,
        }
    }
}

/// MP_UNREACH_NLRI for IPv4 or IPv6 unicast.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MpUnreach {
    pub afi: u16,
    pub safi: u8,
    pub withdrawn: Vec<Prefix>,
}

/// An attribute this codec does not interpret, as received.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RawAttribute {
    pub flags: u8,
    pub type_code: u8,
    pub value: Vec<u8>,
}

/// The path attributes of an UPDATE.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct PathAttributes {
    pub origin: Option<Origin>,
    pub as_path: Option<AsPath>,
    pub next_hop: Option<Ipv4Addr>,
    pub med: Option<u32>,
    pub local_pref: Option<u32>,
    pub atomic_aggregate: bool,
    /// RFC 1997 communities, `asn << 16 | value`; empty = no attribute.
    pub communities: Vec<u32>,
    pub as4_path: Option<AsPath>,
    pub mp_reach: Option<MpReach>,
    pub mp_unreach: Option<MpUnreach>,
    /// Everything else (AGGREGATOR, unknown optional attributes, MP
    /// attributes of other families), in the order received.
    pub other: Vec<RawAttribute>,
}

fn emit_attr(out: &mut Vec<u8>, flags: u8, type_code: u8, value: &[u8]) {
    if value.len() > 255 {
        out.push(flags | flag::EXTENDED_LENGTH);
        out.push(type_code);
        out.extend_from_slice(&(value.len() as u16).to_be_bytes());
    } else {
        out.push(flags & !flag::EXTENDED_LENGTH);
        out.push(type_code);
        out.push(value.len() as u8);
    }
    out.extend_from_slice(value);
}

const WELL_KNOWN: u8 = flag::TRANSITIVE;
const OPT_TRANS: u8 = flag::OPTIONAL | flag::TRANSITIVE;
const OPT_NON_TRANS: u8 = flag::OPTIONAL;

impl PathAttributes {
    /// Appends the encoded attributes, in type-code order, then `other`.
    pub fn emit(&self, ctx: DecodeContext, out: &mut Vec<u8>) {
        let mut v = Vec::new();
        if let Some(o) = self.origin {
            emit_attr(out, WELL_KNOWN, attr::ORIGIN, &[o as u8]);
        }
        if let Some(p) = &self.as_path {
            p.emit(ctx.four_octet_as, &mut v);
            emit_attr(out, WELL_KNOWN, attr::AS_PATH, &v);
        }
        if let Some(nh) = self.next_hop {
            emit_attr(out, WELL_KNOWN, attr::NEXT_HOP, &nh.octets());
        }
        if let Some(m) = self.med {
            emit_attr(out, OPT_NON_TRANS, attr::MULTI_EXIT_DISC, &m.to_be_bytes());
        }
        if let Some(lp) = self.local_pref {
            emit_attr(out, WELL_KNOWN, attr::LOCAL_PREF, &lp.to_be_bytes());
        }
        if self.atomic_aggregate {
            emit_attr(out, WELL_KNOWN, attr::ATOMIC_AGGREGATE, &[]);
        }
        if !self.communities.is_empty() {
            v.clear();
            for c in &self.communities {
                v.extend_from_slice(&c.to_be_bytes());
            }
            emit_attr(out, OPT_TRANS, attr::COMMUNITIES, &v);
        }
        if let Some(r) = &self.mp_reach {
            v.clear();
            v.extend_from_slice(&r.afi.to_be_bytes());
            v.push(r.safi);
            v.push(r.next_hop.len() as u8);
            v.extend_from_slice(&r.next_hop);
            v.push(0);
            for p in &r.nlri {
                p.emit(&mut v);
            }
            emit_attr(out, OPT_NON_TRANS, attr::MP_REACH_NLRI, &v);
        }
        if let Some(u) = &self.mp_unreach {
            v.clear();
            v.extend_from_slice(&u.afi.to_be_bytes());
            v.push(u.safi);
            for p in &u.withdrawn {
                p.emit(&mut v);
            }
            emit_attr(out, OPT_NON_TRANS, attr::MP_UNREACH_NLRI, &v);
        }
        if let Some(p) = &self.as4_path {
            v.clear();
            p.emit(true, &mut v);
            emit_attr(out, OPT_TRANS, attr::AS4_PATH, &v);
        }
        for a in &self.other {
            emit_attr(out, a.flags, a.type_code, &a.value);
        }
    }
}

/// A Malformed Attribute List error (session reset).
fn malformed(why: String) -> DecodeError {
    DecodeError::reset(
        why,
        code::UPDATE_MESSAGE,
        sub::MALFORMED_ATTRIBUTE_LIST,
        vec![],
    )
}

/// A decoded UPDATE. `withdrawn` and `nlri` are the IPv4 fields of the
/// message; IPv6 (and MP-encoded IPv4) prefixes are in the MP attributes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UpdateRepr {
    pub withdrawn: Vec<Prefix>,
    pub attributes: PathAttributes,
    pub nlri: Vec<Prefix>,
    /// Attribute-discard errors met while parsing (RFC 7606 §2): those
    /// attributes are not in `attributes`. Never emitted.
    pub discarded: Vec<DecodeError>,
}

impl UpdateRepr {
    /// An End-of-RIB marker for IPv4 unicast (RFC 4724): an empty UPDATE.
    pub fn end_of_rib() -> Self {
        UpdateRepr::default()
    }

    /// Appends the body (after the header).
    pub(crate) fn emit_body(&self, ctx: DecodeContext, out: &mut Vec<u8>) {
        let wpos = out.len();
        out.extend_from_slice(&[0, 0]);
        for p in &self.withdrawn {
            p.emit(out);
        }
        let wlen = (out.len() - wpos - 2) as u16;
        out[wpos..wpos + 2].copy_from_slice(&wlen.to_be_bytes());
        let apos = out.len();
        out.extend_from_slice(&[0, 0]);
        self.attributes.emit(ctx, out);
        let alen = (out.len() - apos - 2) as u16;
        out[apos..apos + 2].copy_from_slice(&alen.to_be_bytes());
        for p in &self.nlri {
            p.emit(out);
        }
    }

    /// The length of the whole message (header included) as emitted.
    pub fn encoded_len(&self, ctx: DecodeContext) -> usize {
        let mut attrs = Vec::new();
        self.attributes.emit(ctx, &mut attrs);
        HEADER_LEN
            + 4
            + attrs.len()
            + self
                .withdrawn
                .iter()
                .chain(&self.nlri)
                .map(Prefix::encoded_len)
                .sum::<usize>()
    }

    /// Every prefix this UPDATE announces (IPv4 field and MP_REACH).
    pub fn announced(&self) -> impl Iterator<Item = &Prefix> {
        self.nlri
            .iter()
            .chain(self.attributes.mp_reach.iter().flat_map(|r| r.nlri.iter()))
    }

    /// Every prefix this UPDATE withdraws (IPv4 field and MP_UNREACH).
    pub fn withdrawals(&self) -> impl Iterator<Item = &Prefix> {
        self.withdrawn.iter().chain(
            self.attributes
                .mp_unreach
                .iter()
                .flat_map(|u| u.withdrawn.iter()),
        )
    }

    /// Decodes an UPDATE body (after the header; at least 4 bytes).
    pub fn parse(body: &[u8], ctx: DecodeContext) -> Result<Self, DecodeError> {
        let invalid_network = |what: &str| {
            DecodeError::reset(
                format!("malformed prefix in {what}"),
                code::UPDATE_MESSAGE,
                sub::INVALID_NETWORK_FIELD,
                vec![],
            )
        };
        let [w0, w1, ..] = *body else {
            return Err(malformed(format!("UPDATE body of {} bytes", body.len())));
        };
        let wlen = usize::from(u16::from_be_bytes([w0, w1]));
        let Some(wbytes) = body.get(2..2 + wlen) else {
            return Err(malformed(format!(
                "withdrawn routes length {wlen} overruns the message"
            )));
        };
        let rest = &body[2 + wlen..];
        let [a0, a1, ..] = *rest else {
            return Err(malformed("no total path attribute length".into()));
        };
        let alen = usize::from(u16::from_be_bytes([a0, a1]));
        let Some(abytes) = rest.get(2..2 + alen) else {
            return Err(malformed(format!(
                "total path attribute length {alen} overruns the message"
            )));
        };
        let nlri_bytes = &rest[2 + alen..];
        let withdrawn = Prefix::parse_all(wbytes, AFI_IPV4)
            .ok_or_else(|| invalid_network("withdrawn routes"))?;
        let nlri =
            Prefix::parse_all(nlri_bytes, AFI_IPV4).ok_or_else(|| invalid_network("NLRI"))?;

        let mut parser = AttrParser {
            ctx,
            attrs: PathAttributes::default(),
            seen: [false; 256],
            soft: None,
            discarded: Vec::new(),
        };
        parser.parse_all(abytes)?;
        let AttrParser {
            attrs,
            mut soft,
            discarded,
            ..
        } = parser;

        // Well-known mandatory attributes, needed only when something is
        // announced (RFC 7606 §3d; NEXT_HOP only for the IPv4 NLRI field,
        // RFC 4760 §3).
        let announces =
            !nlri.is_empty() || attrs.mp_reach.as_ref().is_some_and(|r| !r.nlri.is_empty());
        if announces && soft.is_none() {
            let missing = if attrs.origin.is_none() {
                Some(attr::ORIGIN)
            } else if attrs.as_path.is_none() {
                Some(attr::AS_PATH)
            } else if !nlri.is_empty() && attrs.next_hop.is_none() {
                Some(attr::NEXT_HOP)
            } else {
                None
            };
            if let Some(t) = missing {
                soft = Some(
                    DecodeError::reset(
                        format!("missing well-known attribute {t}"),
                        code::UPDATE_MESSAGE,
                        sub::MISSING_WELL_KNOWN_ATTRIBUTE,
                        vec![t],
                    )
                    .with_action(ErrorAction::TreatAsWithdraw),
                );
            }
        }
        if let Some(e) = soft {
            return Err(e);
        }
        Ok(UpdateRepr {
            withdrawn,
            attributes: attrs,
            nlri,
            discarded,
        })
    }
}

#[cfg(test)]
mod tests;
