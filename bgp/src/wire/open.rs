//! OPEN (RFC 4271 §4.2) with capabilities (RFC 5492): multiprotocol
//! (RFC 4760), route refresh (RFC 2918), extended next hop encoding
//! (RFC 8950 §4), 4-octet ASN (RFC 6793).
//!
//! `parse` checks what the message alone can tell (version, hold time 1 or
//! 2, a zero BGP identifier, the parameter and capability framing); what
//! depends on configuration (the peer's ASN, our own identifier, required
//! capabilities) is the session's check (`session::open_check`).

use std::net::Ipv4Addr;

use super::notification::{code, open};
use super::{AS_TRANS, BGP_VERSION, DecodeError};

/// Optional parameter type: capabilities (RFC 5492).
const PARAM_CAPABILITIES: u8 = 2;

/// Capability codes.
pub mod cap {
    pub const MULTIPROTOCOL: u8 = 1;
    pub const ROUTE_REFRESH: u8 = 2;
    pub const EXTENDED_NEXT_HOP: u8 = 5;
    pub const FOUR_OCTET_AS: u8 = 65;
}

/// One capability of an OPEN.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Capability {
    /// RFC 4760: this AFI/SAFI may be exchanged.
    Multiprotocol { afi: u16, safi: u8 },
    /// RFC 2918.
    RouteRefresh,
    /// RFC 8950 §4: routes of (NLRI AFI, NLRI SAFI) may carry a next hop
    /// of the third AFI; one tuple per such combination.
    ExtendedNextHop(Vec<NextHopTuple>),
    /// RFC 6793: our real ASN.
    FourOctetAs(u32),
    /// Anything else, kept as sent (RFC 5492: ignore what is not known).
    Other { code: u8, value: Vec<u8> },
}

impl Capability {
    fn emit(&self, out: &mut Vec<u8>) {
        match self {
            Capability::Multiprotocol { afi, safi } => {
                out.extend_from_slice(&[cap::MULTIPROTOCOL, 4]);
                out.extend_from_slice(&afi.to_be_bytes());
                out.extend_from_slice(&[0, *safi]);
            }
            Capability::RouteRefresh => out.extend_from_slice(&[cap::ROUTE_REFRESH, 0]),
            Capability::ExtendedNextHop(tuples) => {
                out.extend_from_slice(&[cap::EXTENDED_NEXT_HOP, (tuples.len() * 6) as u8]);
                for t in tuples {
                    out.extend_from_slice(&t.nlri_afi.to_be_bytes());
                    out.extend_from_slice(&t.nlri_safi.to_be_bytes());
                    out.extend_from_slice(&t.next_hop_afi.to_be_bytes());
                }
            }
            Capability::FourOctetAs(asn) => {
                out.extend_from_slice(&[cap::FOUR_OCTET_AS, 4]);
                out.extend_from_slice(&asn.to_be_bytes());
            }
            Capability::Other { code, value } => {
                out.push(*code);
                out.push(value.len() as u8);
                out.extend_from_slice(value);
            }
        }
    }

    fn encoded_len(&self) -> usize {
        2 + match self {
            Capability::Multiprotocol { .. } | Capability::FourOctetAs(_) => 4,
            Capability::RouteRefresh => 0,
            Capability::ExtendedNextHop(tuples) => tuples.len() * 6,
            Capability::Other { value, .. } => value.len(),
        }
    }

    fn parse(code_: u8, value: &[u8]) -> Result<Self, DecodeError> {
        let malformed = |what: &str| {
            DecodeError::reset(
                format!("malformed {what} capability ({} bytes)", value.len()),
                code::OPEN_MESSAGE,
                open::UNSPECIFIC,
                Vec::new(),
            )
        };
        Ok(match code_ {
            cap::MULTIPROTOCOL => match value {
                [a0, a1, _reserved, safi] => Capability::Multiprotocol {
                    afi: u16::from_be_bytes([*a0, *a1]),
                    safi: *safi,
                },
                _ => return Err(malformed("multiprotocol")),
            },
            cap::ROUTE_REFRESH if value.is_empty() => Capability::RouteRefresh,
            cap::ROUTE_REFRESH => return Err(malformed("route refresh")),
            // RFC 8950 §4: one or more 6-byte tuples.
            cap::EXTENDED_NEXT_HOP if !value.is_empty() && value.len().is_multiple_of(6) => {
                Capability::ExtendedNextHop(
                    value
                        .chunks_exact(6)
                        .map(|t| NextHopTuple {
                            nlri_afi: u16::from_be_bytes([t[0], t[1]]),
                            nlri_safi: u16::from_be_bytes([t[2], t[3]]),
                            next_hop_afi: u16::from_be_bytes([t[4], t[5]]),
                        })
                        .collect(),
                )
            }
            cap::EXTENDED_NEXT_HOP => return Err(malformed("extended next hop")),
            cap::FOUR_OCTET_AS => match value {
                [a, b, c, d] => Capability::FourOctetAs(u32::from_be_bytes([*a, *b, *c, *d])),
                _ => return Err(malformed("4-octet AS")),
            },
            _ => Capability::Other {
                code: code_,
                value: value.to_vec(),
            },
        })
    }
}

/// One (NLRI AFI, NLRI SAFI, next hop AFI) of the Extended Next Hop
/// Encoding capability (RFC 8950 §4; the SAFI is two bytes there).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NextHopTuple {
    pub nlri_afi: u16,
    pub nlri_safi: u16,
    pub next_hop_afi: u16,
}

impl NextHopTuple {
    /// IPv4 unicast routes with IPv6 next hops, the tuple this speaker
    /// uses (RFC 8950 §4: AFI 1, SAFI 1, next hop AFI 2).
    pub const IPV4_UNICAST_OVER_IPV6: NextHopTuple = NextHopTuple {
        nlri_afi: super::AFI_IPV4,
        nlri_safi: super::SAFI_UNICAST as u16,
        next_hop_afi: super::AFI_IPV6,
    };
}

/// A decoded OPEN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenRepr {
    /// The 2-octet "My Autonomous System" field ([`AS_TRANS`] for a 4-octet
    /// ASN; see [`Self::asn`]).
    pub my_as: u16,
    pub hold_time_s: u16,
    pub bgp_id: Ipv4Addr,
    pub capabilities: Vec<Capability>,
}

impl OpenRepr {
    /// An OPEN for `asn`: the 2-octet field holds it when it fits, else
    /// AS_TRANS; the 4-octet capability is always sent.
    pub fn new(asn: u32, hold_time_s: u16, bgp_id: Ipv4Addr, mut caps: Vec<Capability>) -> Self {
        if !caps.iter().any(|c| matches!(c, Capability::FourOctetAs(_))) {
            caps.push(Capability::FourOctetAs(asn));
        }
        OpenRepr {
            my_as: u16::try_from(asn).unwrap_or(AS_TRANS as u16),
            hold_time_s,
            bgp_id,
            capabilities: caps,
        }
    }

    /// The sender's ASN: the 4-octet capability if present, else the
    /// 2-octet field.
    pub fn asn(&self) -> u32 {
        self.four_octet_as().unwrap_or(u32::from(self.my_as))
    }

    /// The 4-octet ASN capability's value, if sent.
    pub fn four_octet_as(&self) -> Option<u32> {
        self.capabilities.iter().find_map(|c| match c {
            Capability::FourOctetAs(a) => Some(*a),
            _ => None,
        })
    }

    /// Whether the sender offers this AFI/SAFI. Without any multiprotocol
    /// capability, IPv4 unicast is implied (RFC 4760 §8).
    pub fn supports(&self, afi: u16, safi: u8) -> bool {
        let mut any_mp = false;
        for c in &self.capabilities {
            if let Capability::Multiprotocol { afi: a, safi: s } = c {
                any_mp = true;
                if (*a, *s) == (afi, safi) {
                    return true;
                }
            }
        }
        !any_mp && (afi, safi) == (super::AFI_IPV4, super::SAFI_UNICAST)
    }

    /// Whether the sender takes routes of the tuple's family with next
    /// hops of its next hop AFI (RFC 8950 §4; the tuples of several
    /// capabilities count together).
    pub fn extended_next_hop(&self, tuple: NextHopTuple) -> bool {
        self.capabilities
            .iter()
            .any(|c| matches!(c, Capability::ExtendedNextHop(t) if t.contains(&tuple)))
    }

    pub fn has(&self, wanted: &Capability) -> bool {
        self.capabilities.contains(wanted)
    }

    /// Decodes an OPEN body (after the header; at least 10 bytes).
    pub fn parse(body: &[u8]) -> Result<Self, DecodeError> {
        let unspecific =
            |why: String| DecodeError::reset(why, code::OPEN_MESSAGE, open::UNSPECIFIC, Vec::new());
        let Some(fixed) = body.get(..10) else {
            return Err(unspecific(format!("OPEN body of {} bytes", body.len())));
        };
        let version = fixed[0];
        if version != BGP_VERSION {
            return Err(DecodeError::reset(
                format!("BGP version {version}"),
                code::OPEN_MESSAGE,
                open::UNSUPPORTED_VERSION,
                u16::from(BGP_VERSION).to_be_bytes().to_vec(),
            ));
        }
        let my_as = u16::from_be_bytes([fixed[1], fixed[2]]);
        let hold_time_s = u16::from_be_bytes([fixed[3], fixed[4]]);
        if hold_time_s == 1 || hold_time_s == 2 {
            return Err(DecodeError::reset(
                format!("hold time {hold_time_s} s (0 or at least 3)"),
                code::OPEN_MESSAGE,
                open::UNACCEPTABLE_HOLD_TIME,
                Vec::new(),
            ));
        }
        let bgp_id = Ipv4Addr::new(fixed[5], fixed[6], fixed[7], fixed[8]);
        if bgp_id.is_unspecified() {
            return Err(DecodeError::reset(
                "BGP identifier 0.0.0.0",
                code::OPEN_MESSAGE,
                open::BAD_BGP_IDENTIFIER,
                Vec::new(),
            ));
        }
        let opt_len = usize::from(fixed[9]);
        let rest = &body[10..];
        if rest.len() != opt_len {
            return Err(unspecific(format!(
                "optional parameters length {opt_len} but {} bytes follow",
                rest.len()
            )));
        }
        let mut capabilities = Vec::new();
        let mut params = rest;
        while !params.is_empty() {
            let [ty, len, ..] = *params else {
                return Err(unspecific("truncated optional parameter".into()));
            };
            let Some(value) = params.get(2..2 + usize::from(len)) else {
                return Err(unspecific(format!(
                    "optional parameter {ty} of {len} bytes overruns the message"
                )));
            };
            if ty != PARAM_CAPABILITIES {
                return Err(DecodeError::reset(
                    format!("optional parameter type {ty}"),
                    code::OPEN_MESSAGE,
                    open::UNSUPPORTED_OPTIONAL_PARAMETER,
                    Vec::new(),
                ));
            }
            let mut caps = value;
            while !caps.is_empty() {
                let [c, clen, ..] = *caps else {
                    return Err(unspecific("truncated capability".into()));
                };
                let Some(cval) = caps.get(2..2 + usize::from(clen)) else {
                    return Err(unspecific(format!(
                        "capability {c} of {clen} bytes overruns its parameter"
                    )));
                };
                capabilities.push(Capability::parse(c, cval)?);
                caps = &caps[2 + usize::from(clen)..];
            }
            params = &params[2 + usize::from(len)..];
        }
        Ok(OpenRepr {
            my_as,
            hold_time_s,
            bgp_id,
            capabilities,
        })
    }

    /// Appends the body: the capabilities in as few optional parameters as
    /// hold them (255 bytes each), so re-encoding a decoded OPEN never
    /// grows it. More than 255 bytes of parameters would need RFC 9072
    /// extended parameters: the capabilities that do not fit are left out
    /// (ours take 20 bytes).
    pub(crate) fn emit_body(&self, out: &mut Vec<u8>) {
        out.push(BGP_VERSION);
        out.extend_from_slice(&self.my_as.to_be_bytes());
        out.extend_from_slice(&self.hold_time_s.to_be_bytes());
        out.extend_from_slice(&self.bgp_id.octets());
        let opt_len_at = out.len();
        out.push(0);
        let mut param_at: Option<usize> = None;
        for c in &self.capabilities {
            let n = c.encoded_len();
            let fits_param = param_at.is_some_and(|at| out.len() - at - 2 + n <= 255);
            let total = out.len() - opt_len_at - 1;
            if fits_param {
                if total + n > 255 {
                    break;
                }
            } else {
                if total + 2 + n > 255 || n > 255 {
                    break;
                }
                param_at = Some(out.len());
                out.extend_from_slice(&[PARAM_CAPABILITIES, 0]);
            }
            c.emit(out);
            if let Some(at) = param_at {
                out[at + 1] = (out.len() - at - 2) as u8;
            }
        }
        out[opt_len_at] = (out.len() - opt_len_at - 1) as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::super::{DecodeContext, Message};
    use super::*;

    fn open_bytes(body: &[u8]) -> Vec<u8> {
        let mut m = super::super::MARKER.to_vec();
        m.extend_from_slice(&((19 + body.len()) as u16).to_be_bytes());
        m.push(1);
        m.extend_from_slice(body);
        m
    }

    #[test]
    fn round_trip_with_four_octet_asn() {
        let o = OpenRepr::new(
            4_200_000_001,
            90,
            Ipv4Addr::new(10, 0, 0, 1),
            vec![
                Capability::Multiprotocol { afi: 1, safi: 1 },
                Capability::RouteRefresh,
            ],
        );
        assert_eq!(o.my_as, 23456);
        assert_eq!(o.asn(), 4_200_000_001);
        let bytes = Message::Open(o.clone()).to_bytes(DecodeContext::default());
        assert_eq!(
            Message::parse(&bytes, DecodeContext::default()),
            Ok(Message::Open(o.clone()))
        );
        assert!(o.supports(1, 1));
        assert!(!o.supports(2, 1));
    }

    #[test]
    fn extended_next_hop_capability_round_trips_and_checks_its_length() {
        let ipv4_over_v6 = NextHopTuple::IPV4_UNICAST_OVER_IPV6;
        let o = OpenRepr::new(
            65001,
            90,
            Ipv4Addr::new(10, 0, 0, 1),
            vec![Capability::ExtendedNextHop(vec![
                NextHopTuple {
                    nlri_afi: 1,
                    nlri_safi: 128,
                    next_hop_afi: 2,
                },
                ipv4_over_v6,
            ])],
        );
        let bytes = Message::Open(o.clone()).to_bytes(DecodeContext::default());
        // Code 5, length 12, then AFI 1 / SAFI 1 / NH AFI 2 as 2 bytes each.
        let at = bytes
            .windows(2)
            .position(|w| w == [5, 12])
            .expect("the capability");
        assert_eq!(bytes[at + 8..at + 14], [0, 1, 0, 1, 0, 2]);
        let Ok(Message::Open(back)) = Message::parse(&bytes, DecodeContext::default()) else {
            panic!("decodes")
        };
        assert_eq!(back, o);
        assert!(back.extended_next_hop(ipv4_over_v6));
        assert!(
            !OpenRepr::new(1, 90, Ipv4Addr::new(1, 1, 1, 1), vec![])
                .extended_next_hop(ipv4_over_v6)
        );
        // Empty, or not whole tuples: OPEN Message Error, Unspecific.
        for value in [&[][..], &[0, 1, 0, 1, 0][..], &[0, 1, 0, 1, 0, 2, 0][..]] {
            let mut body = vec![4, 0, 1, 0, 90, 1, 1, 1, 1];
            body.push(value.len() as u8 + 4);
            body.extend_from_slice(&[2, value.len() as u8 + 2, 5, value.len() as u8]);
            body.extend_from_slice(value);
            let e = Message::parse(&open_bytes(&body), DecodeContext::default()).unwrap_err();
            assert_eq!(
                (e.notification.code, e.notification.subcode),
                (code::OPEN_MESSAGE, open::UNSPECIFIC),
                "{value:?}"
            );
        }
    }

    #[test]
    fn many_capabilities_spread_over_parameters() {
        // 30 capabilities of 10 bytes: two parameters.
        let caps: Vec<Capability> = (0..30)
            .map(|i| Capability::Other {
                code: 100 + i,
                value: vec![i; 8],
            })
            .collect();
        let o = OpenRepr {
            my_as: 1,
            hold_time_s: 90,
            bgp_id: Ipv4Addr::new(1, 1, 1, 1),
            capabilities: caps,
        };
        let bytes = Message::Open(o.clone()).to_bytes(DecodeContext::default());
        let Ok(Message::Open(back)) = Message::parse(&bytes, DecodeContext::default()) else {
            panic!("decodes")
        };
        // 255 bytes of parameters hold 24 of them (two headers + 240 + ...).
        assert!(back.capabilities.len() >= 24 && o.capabilities.starts_with(&back.capabilities));
        let again = Message::Open(back.clone()).to_bytes(DecodeContext::default());
        assert_eq!(again.len(), bytes.len(), "re-encoding does not grow");
    }

    #[test]
    fn errors_name_their_subcode() {
        let sub = |body: &[u8]| {
            Message::parse(&open_bytes(body), DecodeContext::default())
                .unwrap_err()
                .notification
                .subcode
        };
        // Hold time 2.
        assert_eq!(
            sub(&[4, 0, 1, 0, 2, 1, 1, 1, 1, 0]),
            open::UNACCEPTABLE_HOLD_TIME
        );
        // Identifier 0.
        assert_eq!(
            sub(&[4, 0, 1, 0, 90, 0, 0, 0, 0, 0]),
            open::BAD_BGP_IDENTIFIER
        );
        // Parameter length says 4, 2 follow.
        assert_eq!(
            sub(&[4, 0, 1, 0, 90, 1, 1, 1, 1, 4, 2, 0]),
            open::UNSPECIFIC
        );
        // Unknown parameter type 1 (authentication, deprecated).
        assert_eq!(
            sub(&[4, 0, 1, 0, 90, 1, 1, 1, 1, 2, 1, 0]),
            open::UNSUPPORTED_OPTIONAL_PARAMETER
        );
        // 4-octet AS capability of 2 bytes.
        assert_eq!(
            sub(&[4, 0, 1, 0, 90, 1, 1, 1, 1, 6, 2, 4, 65, 2, 0, 1]),
            open::UNSPECIFIC
        );
        // Unknown capabilities are kept, not refused.
        let ok = Message::parse(
            &open_bytes(&[4, 0, 1, 0, 0, 1, 1, 1, 1, 5, 2, 3, 70, 1, 9]),
            DecodeContext::default(),
        )
        .unwrap();
        let Message::Open(o) = ok else { panic!() };
        assert_eq!(
            o.capabilities,
            [Capability::Other {
                code: 70,
                value: vec![9]
            }]
        );
        assert_eq!(o.hold_time_s, 0);
        assert!(o.supports(1, 1), "IPv4 unicast implied without MP");
    }
}
