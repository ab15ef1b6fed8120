//! The harness's invariants: of the tables after every step, of every
//! frame the gateway sends, and of the counters around every frame it
//! receives.

use super::gateway::FLOW_CAPACITY;
use crate::conntrack::{Conntrack, Dir};
use crate::counters::{Counters, DropReason};
use crate::flow::IpFamily;
use crate::packet::Verdict;
use crate::wire::{checksum, ethernet, icmp, icmpv6, ipv4, ipv6};

/// A table's invariants: at most its capacity, every live flow found by
/// both keys, `snat_in_use` tuples for the flows holding one.
pub(super) fn table<A: IpFamily>(ct: &Conntrack<A>, snat_in_use: u64) -> Result<(), String> {
    if ct.len() > FLOW_CAPACITY as usize {
        return Err(format!("{} flows in a table of {FLOW_CAPACITY}", ct.len()));
    }
    let mut holding_snat = 0u64;
    for (id, flow) in ct.iter() {
        for (key, dir) in [(flow.orig(), Dir::Original), (flow.reply(), Dir::Reply)] {
            if ct.lookup(key, ct.hash(key)) != Some((id, dir)) {
                return Err(format!("flow {id:?}: {key} not found as {dir:?}"));
            }
        }
        holding_snat += u64::from(flow.snat());
    }
    if snat_in_use != holding_snat {
        return Err(format!(
            "{snat_in_use} SNAT tuples in use for {holding_snat} flows holding one"
        ));
    }
    Ok(())
}

/// Why a frame the gateway sent is not a well-formed ARP, Ethernet/IPv4
/// (header checksum, and the TCP/UDP/ICMP checksum) or Ethernet/IPv6
/// (TCP/UDP/ICMPv6 checksum) frame, if it is not.
pub(super) fn malformed_output(frame: &[u8]) -> Option<String> {
    let Some(ether) = frame.get(12..14) else {
        return Some(format!("sent a frame of {} bytes", frame.len()));
    };
    match u16::from_be_bytes([ether[0], ether[1]]) {
        ethernet::ethertype::ARP => None,
        ethernet::ethertype::IPV6 => {
            let ip = ipv6::Packet::new_checked(frame.get(14..)?).ok()?;
            let upper = ip.payload();
            let ok = match ip.next_header() {
                6 | 17 => {
                    checksum::verify_l4_v6(ip.src_addr(), ip.dst_addr(), ip.next_header(), upper)
                }
                58 => icmpv6::Packet::new_unchecked(upper)
                    .verify_checksum(ip.src_addr(), ip.dst_addr()),
                _ => true,
            };
            (!ok).then(|| "sent an IPv6 packet with a bad checksum".into())
        }
        ethernet::ethertype::IPV4 => {
            let ip = ipv4::Packet::new_checked(frame.get(14..)?).ok();
            let Some(ip) = ip.filter(|ip| ip.verify_checksum()) else {
                return Some("sent an IPv4 packet with a bad header or checksum".into());
            };
            let l4 = ip.payload();
            let first_fragment = ip.frag_offset_bytes() == 0;
            let ok = match ip.protocol() {
                _ if !first_fragment => true,
                6 => checksum::verify_l4(ip.src_addr(), ip.dst_addr(), 6, l4),
                // A zero UDP checksum is "none" over IPv4 (RFC 768).
                17 => {
                    l4.get(6..8) == Some(&[0, 0])
                        || checksum::verify_l4(ip.src_addr(), ip.dst_addr(), 17, l4)
                }
                1 => icmp::Packet::new_unchecked(l4).verify_checksum(),
                _ => true,
            };
            (!ok).then(|| {
                format!(
                    "sent an IPv4 packet (protocol {}) with a bad checksum",
                    ip.protocol()
                )
            })
        }
        other => Some(format!("sent a frame of ethertype {other:#06x}")),
    }
}

/// The counters around one frame the gateway received (`before` and
/// `after` its poll) agree with its verdict: it was received once, got a
/// verdict, and was counted under one drop reason if and only if it was
/// dropped (drops of generated frames, `syn_proxy_outbox_full`, aside);
/// and no proxied flow was spliced without its cookie validating.
pub(super) fn frame_counters(
    before: &Counters,
    after: &Counters,
    verdict: Verdict,
) -> Result<(), String> {
    if after.rx_packets != before.rx_packets + 1 {
        return Err(format!(
            "one frame in, rx_packets {} -> {}",
            before.rx_packets, after.rx_packets
        ));
    }
    let packet_drops = |c: &Counters| c.total_drops() - c.dropped(DropReason::SynProxyOutboxFull);
    let drops = packet_drops(after) - packet_drops(before);
    match verdict {
        Verdict::Pending => return Err("a frame left without a verdict".into()),
        Verdict::Drop(r) if drops != 1 || after.dropped(r) != before.dropped(r) + 1 => {
            return Err(format!("dropped as {r}, but {drops} drops counted"));
        }
        Verdict::Drop(_) => {}
        v if drops != 0 => return Err(format!("verdict {v:?}, but {drops} drops counted")),
        _ => {}
    }
    if after.syn_proxy_spliced > after.syn_cookies_validated {
        return Err(format!(
            "{} proxied flows spliced, {} cookies validated",
            after.syn_proxy_spliced, after.syn_cookies_validated
        ));
    }
    Ok(())
}
