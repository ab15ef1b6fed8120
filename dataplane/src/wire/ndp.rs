//! Neighbour Discovery (RFC 4861): the Neighbour Solicitation (§4.3) and
//! Advertisement (§4.4) bodies with their link-layer address options
//! (§4.6.1), the receiver's validity checks (§7.1.1, §7.1.2), and the
//! addresses NDP is sent to (solicited-node multicast, RFC 4291 §2.7.1;
//! its Ethernet mapping, RFC 2464 §7). IPv6's replacement of ARP.
//!
//! Layout after the ICMPv6 type/code/checksum (0..4): NS reserved (4..8),
//! NA flags R (0x80), S (0x40), O (0x20) in byte 4, then both: the target
//! address (8..24) and options from 24, each `type (1), length in 8-byte
//! units (1), data`, a length of 0 being invalid.
//!
//! [`parse`] is the one place the checks of §7.1 are made; a message that
//! fails one is silently discarded by the caller and counted by its
//! [`Invalid`] reason (RFC 4861 says "silently discard"; we count).

use super::MacAddr;
use super::field::ipv6_at;
use super::icmpv6::{self, msg_type};
use std::net::Ipv6Addr;

/// The hop limit every NDP message must arrive with (RFC 4861 §7.1): it
/// proves the sender is on the link.
pub const HOP_LIMIT: u8 = 255;
/// NS/NA body before the options: ICMPv6 header (4), reserved/flags (4),
/// target (16).
pub const BODY_LEN: usize = 24;
/// A link-layer address option for Ethernet: 8 bytes (type, length 1, MAC).
pub const LLA_OPTION_LEN: usize = 8;

/// Option types (RFC 4861 §4.6).
pub mod option {
    pub const SOURCE_LLA: u8 = 1;
    pub const TARGET_LLA: u8 = 2;
    pub const PREFIX_INFO: u8 = 3;
    pub const REDIRECTED_HEADER: u8 = 4;
    pub const MTU: u8 = 5;
    pub const NONCE: u8 = 14;
}

/// Advertisement flags (RFC 4861 §4.4).
pub mod flags {
    pub const ROUTER: u8 = 0x80;
    pub const SOLICITED: u8 = 0x40;
    pub const OVERRIDE: u8 = 0x20;
}

/// A valid Neighbour Solicitation.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Solicit {
    pub target: Ipv6Addr,
    /// The Source Link-Layer Address option (absent for duplicate address
    /// detection, whose source is `::`).
    pub source_mac: Option<MacAddr>,
}

/// A valid Neighbour Advertisement.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Advert {
    pub target: Ipv6Addr,
    /// R, S, O ([`flags`]).
    pub flags: u8,
    /// The Target Link-Layer Address option.
    pub target_mac: Option<MacAddr>,
}

/// What [`parse`] found.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Message {
    Solicit(Solicit),
    Advert(Advert),
}

/// Why an NDP message is invalid (RFC 4861 §7.1.1, §7.1.2).
#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
pub enum Invalid {
    #[error("ICMPv6 type {0} is not a neighbour solicitation or advertisement")]
    NotNeighbourDiscovery(u8),
    #[error("hop limit {0}, must be 255: the sender is not on the link")]
    HopLimit(u8),
    #[error("ICMPv6 code {0}, must be 0")]
    Code(u8),
    #[error("{len_bytes} bytes, a solicitation or advertisement has at least 24")]
    Truncated { len_bytes: usize },
    #[error("bad ICMPv6 checksum")]
    Checksum,
    #[error("the target {0} is a multicast address")]
    MulticastTarget(Ipv6Addr),
    #[error("option at byte {at} has length 0 or runs past the message")]
    BadOption { at: usize },
    #[error(
        "a solicitation from :: must go to a solicited-node address and carry no source link-layer address"
    )]
    BadUnspecifiedSource,
    #[error("an advertisement to a multicast address has the Solicited flag")]
    SolicitedToMulticast,
}

/// Validate an NS or NA (`icmp`: the whole ICMPv6 message) received with
/// `hop_limit` from `src` to `dst`, as RFC 4861 §7.1.1/§7.1.2 say. The
/// first link-layer address option of the expected kind is returned; other
/// options are skipped (§4.6: "receivers MUST silently ignore" unknown
/// ones) but must be well-formed.
pub fn parse(src: Ipv6Addr, dst: Ipv6Addr, hop_limit: u8, icmp: &[u8]) -> Result<Message, Invalid> {
    let p = icmpv6::Packet::new_unchecked(icmp);
    let kind = p.msg_type();
    if kind != msg_type::NEIGHBOR_SOLICIT && kind != msg_type::NEIGHBOR_ADVERT {
        return Err(Invalid::NotNeighbourDiscovery(kind));
    }
    if hop_limit != HOP_LIMIT {
        return Err(Invalid::HopLimit(hop_limit));
    }
    if p.msg_code() != 0 {
        return Err(Invalid::Code(p.msg_code()));
    }
    if icmp.len() < BODY_LEN {
        return Err(Invalid::Truncated {
            len_bytes: icmp.len(),
        });
    }
    if !p.verify_checksum(src, dst) {
        return Err(Invalid::Checksum);
    }
    let target = ipv6_at(icmp, 8);
    if target.is_multicast() {
        return Err(Invalid::MulticastTarget(target));
    }
    let wanted = if kind == msg_type::NEIGHBOR_SOLICIT {
        option::SOURCE_LLA
    } else {
        option::TARGET_LLA
    };
    let mut mac = None;
    let mut at = BODY_LEN;
    while at < icmp.len() {
        let len = usize::from(icmp.get(at + 1).copied().unwrap_or(0)) * 8;
        if len == 0 || at + len > icmp.len() {
            return Err(Invalid::BadOption { at });
        }
        if icmp[at] == wanted && len == LLA_OPTION_LEN && mac.is_none() {
            let mut m = [0u8; 6];
            m.copy_from_slice(&icmp[at + 2..at + 8]);
            mac = Some(MacAddr(m));
        }
        at += len;
    }
    if kind == msg_type::NEIGHBOR_SOLICIT {
        if src.is_unspecified() && (!is_solicited_node(dst) || mac.is_some()) {
            return Err(Invalid::BadUnspecifiedSource);
        }
        Ok(Message::Solicit(Solicit {
            target,
            source_mac: mac,
        }))
    } else {
        let f = icmp[4];
        if dst.is_multicast() && f & flags::SOLICITED != 0 {
            return Err(Invalid::SolicitedToMulticast);
        }
        Ok(Message::Advert(Advert {
            target,
            flags: f & (flags::ROUTER | flags::SOLICITED | flags::OVERRIDE),
            target_mac: mac,
        }))
    }
}

/// Write an NS (`kind` [`msg_type::NEIGHBOR_SOLICIT`], `flags` 0) or NA
/// body for `target` with a link-layer address option carrying `mac` into
/// the first [`BODY_LEN`] + [`LLA_OPTION_LEN`] bytes of `out`, checksummed
/// for `src` → `dst`. Returns the message length (`None`: `out` is too
/// short).
pub fn write(
    out: &mut [u8],
    kind: u8,
    flags: u8,
    target: Ipv6Addr,
    mac: MacAddr,
    (src, dst): (Ipv6Addr, Ipv6Addr),
) -> Option<usize> {
    let len = BODY_LEN + LLA_OPTION_LEN;
    let msg = out.get_mut(..len)?;
    msg.fill(0);
    msg[0] = kind;
    msg[4] = flags;
    msg[8..24].copy_from_slice(&target.octets());
    msg[24] = if kind == msg_type::NEIGHBOR_SOLICIT {
        option::SOURCE_LLA
    } else {
        option::TARGET_LLA
    };
    msg[25] = 1;
    msg[26..32].copy_from_slice(&mac.0);
    icmpv6::Packet::new_unchecked(msg).fill_checksum(src, dst);
    Some(len)
}

/// The solicited-node multicast address of `addr` (RFC 4291 §2.7.1):
/// `ff02::1:ff00:0/104` with the low 24 bits of `addr`.
pub fn solicited_node(addr: Ipv6Addr) -> Ipv6Addr {
    let o = addr.octets();
    Ipv6Addr::new(
        0xff02,
        0,
        0,
        0,
        0,
        1,
        0xff00 | u16::from(o[13]),
        u16::from_be_bytes([o[14], o[15]]),
    )
}

/// Whether `addr` is a solicited-node multicast address.
pub fn is_solicited_node(addr: Ipv6Addr) -> bool {
    let s = addr.segments();
    s[..5] == [0xff02, 0, 0, 0, 0] && s[5] == 1 && s[6] >> 8 == 0xff
}

/// The Ethernet destination of an IPv6 multicast address (RFC 2464 §7):
/// `33:33` and its low 32 bits.
pub fn multicast_mac(addr: Ipv6Addr) -> MacAddr {
    let o = addr.octets();
    MacAddr([0x33, 0x33, o[12], o[13], o[14], o[15]])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HOST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x7);
    const GW: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0xab, 0xcdef);
    const MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x07]);

    fn solicit(src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
        let mut b = vec![0u8; 32];
        write(&mut b, msg_type::NEIGHBOR_SOLICIT, 0, GW, MAC, (src, dst)).unwrap();
        b
    }

    #[test]
    fn a_solicitation_round_trips() {
        let dst = solicited_node(GW);
        assert_eq!(dst, "ff02::1:ffab:cdef".parse::<Ipv6Addr>().unwrap());
        assert!(is_solicited_node(dst));
        assert_eq!(
            multicast_mac(dst),
            MacAddr([0x33, 0x33, 0xff, 0xab, 0xcd, 0xef])
        );
        let got = parse(HOST, dst, 255, &solicit(HOST, dst)).unwrap();
        assert_eq!(
            got,
            Message::Solicit(Solicit {
                target: GW,
                source_mac: Some(MAC)
            })
        );
    }

    #[test]
    fn an_advertisement_round_trips() {
        let mut b = vec![0u8; 40];
        let n = write(
            &mut b,
            msg_type::NEIGHBOR_ADVERT,
            flags::SOLICITED | flags::OVERRIDE,
            GW,
            MAC,
            (GW, HOST),
        )
        .unwrap();
        let got = parse(GW, HOST, 255, &b[..n]).unwrap();
        assert_eq!(
            got,
            Message::Advert(Advert {
                target: GW,
                flags: flags::SOLICITED | flags::OVERRIDE,
                target_mac: Some(MAC)
            })
        );
    }

    #[test]
    fn each_rule_of_rfc4861_7_1_is_its_own_reason() {
        let dst = solicited_node(GW);
        let good = solicit(HOST, dst);
        assert_eq!(parse(HOST, dst, 64, &good), Err(Invalid::HopLimit(64)));
        let mut bad = good.clone();
        bad[1] = 1;
        icmpv6::Packet::new_unchecked(&mut bad[..]).fill_checksum(HOST, dst);
        assert_eq!(parse(HOST, dst, 255, &bad), Err(Invalid::Code(1)));
        assert_eq!(
            parse(HOST, dst, 255, &good[..20]),
            Err(Invalid::Truncated { len_bytes: 20 })
        );
        let mut bad = good.clone();
        bad[31] ^= 1;
        assert_eq!(parse(HOST, dst, 255, &bad), Err(Invalid::Checksum));
        let mut bad = good.clone();
        bad[25] = 0;
        icmpv6::Packet::new_unchecked(&mut bad[..]).fill_checksum(HOST, dst);
        assert_eq!(
            parse(HOST, dst, 255, &bad),
            Err(Invalid::BadOption { at: 24 })
        );
        let mut bad = good.clone();
        bad[25] = 2;
        icmpv6::Packet::new_unchecked(&mut bad[..]).fill_checksum(HOST, dst);
        assert_eq!(
            parse(HOST, dst, 255, &bad),
            Err(Invalid::BadOption { at: 24 })
        );
        let mut bad = good.clone();
        bad[8..24].copy_from_slice(&dst.octets());
        icmpv6::Packet::new_unchecked(&mut bad[..]).fill_checksum(HOST, dst);
        assert_eq!(
            parse(HOST, dst, 255, &bad),
            Err(Invalid::MulticastTarget(dst))
        );
        // Duplicate address detection: from ::, to the solicited-node
        // address, without a source link-layer address.
        let dad = solicit(Ipv6Addr::UNSPECIFIED, dst);
        assert_eq!(
            parse(Ipv6Addr::UNSPECIFIED, dst, 255, &dad),
            Err(Invalid::BadUnspecifiedSource)
        );
        let mut dad = dad[..24].to_vec();
        icmpv6::Packet::new_unchecked(&mut dad[..]).fill_checksum(Ipv6Addr::UNSPECIFIED, dst);
        assert_eq!(
            parse(Ipv6Addr::UNSPECIFIED, dst, 255, &dad),
            Ok(Message::Solicit(Solicit {
                target: GW,
                source_mac: None
            }))
        );
        // A solicited advertisement to a multicast address.
        let all_nodes: Ipv6Addr = "ff02::1".parse().unwrap();
        let mut na = vec![0u8; 32];
        write(
            &mut na,
            msg_type::NEIGHBOR_ADVERT,
            flags::SOLICITED,
            GW,
            MAC,
            (GW, all_nodes),
        )
        .unwrap();
        assert_eq!(
            parse(GW, all_nodes, 255, &na),
            Err(Invalid::SolicitedToMulticast)
        );
        assert_eq!(
            parse(HOST, GW, 255, &[128, 0, 0, 0, 0, 0, 0, 0]),
            Err(Invalid::NotNeighbourDiscovery(128))
        );
    }

    proptest! {
        /// Any message: parse never panics.
        #[test]
        fn parse_is_total(
            kind in prop_oneof![Just(135u8), Just(136u8), any::<u8>()],
            hop in prop_oneof![Just(255u8), any::<u8>()],
            mut body in proptest::collection::vec(any::<u8>(), 0..80),
        ) {
            if let Some(b) = body.first_mut() {
                *b = kind;
            }
            let _ = parse(HOST, GW, hop, &body);
        }
    }
}
