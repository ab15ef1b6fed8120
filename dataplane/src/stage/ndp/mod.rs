//! The NDP half of the neighbour stage (RFC 4861): IPv6's ARP. The table
//! is the IPv6 family of the shared [`NeighbourTable`](crate::neighbour::NeighbourTable)
//! (states and timers: [`crate::neighbour`]); holding, releasing and
//! requesting work as for ARP ([`super::neighbour`]). Every message here
//! already passed the parse stage's checks of RFC 4861 §7.1
//! ([`ndp::parse`]: hop limit 255, code 0, checksum, options).
//!
//! * **Neighbour Solicitation in** (§7.2.3, §7.2.4), for a target owned on
//!   the port it came in on:
//!   - a *host* address: the kernel's ([`Verdict::Host`]), as ARP for host
//!     addresses is;
//!   - an address this instance *announces* (node and SNAT addresses, VIPs
//!     the [`AnnounceFilter`](crate::snapshot::AnnounceFilter) elects it
//!     for): answered in place with a solicited advertisement (§7.2.4):
//!     Solicited flag set, Override set (the gateway is the address's owner,
//!     not a proxy), Router flag clear (the gateway is not the hosts'
//!     IPv6 router), the Target Link-Layer Address option with the port's
//!     MAC, sent to the solicitation's source (at the MAC of its Source
//!     Link-Layer Address option, else the frame's source). A duplicate
//!     address detection probe (source `::`, §7.2.4) for an owned address
//!     is answered as the RFC says: Solicited clear, to all-nodes
//!     (`ff02::1`, `33:33:00:00:00:01`), so the prober sees the address is
//!     taken;
//!   - a VIP another instance is elected for: dropped as
//!     `ndp_not_announced` (silence, as for ARP);
//!   - anything else (including duplicate address detection of addresses
//!     the gateway does not own): dropped as `ndp_not_owned`.
//!
//!   The source's link-layer address is learned (§7.2.3) when the target
//!   is ours, the source is not `::` and the neighbour is already in the
//!   table (strangers do not fill it, as for ARP).
//! * **Neighbour Advertisement in** (§7.2.5): the target's link-layer
//!   address is learned when the target is in the table (an answer to our
//!   solicitation, or an unsolicited advertisement of a known neighbour);
//!   the Override, Solicited and Router flags are not distinguished (see
//!   [`crate::neighbour`]). An advertisement to a host address is the
//!   kernel's (learned from all the same); one learned from is consumed;
//!   any other is dropped as `ndp_advert_ignored`.
//! * **Router Solicitation/Advertisement, Redirect**: the gateway is no
//!   IPv6 router or host for them: the kernel's when sent to a host
//!   address, else dropped as `ndp_router_ignored`.
//! * **Solicitations out** (§7.2.2): for an unresolved next hop, to its
//!   solicited-node multicast address (`ff02::1:ffXX:XXXX`, RFC 4291
//!   §2.7.1) at `33:33:ff:XX:XX:XX` (RFC 2464 §7), hop limit 255, from the
//!   port's first node or SNAT IPv6 address (the snapshot's
//!   `ndp_source`) with a Source Link-Layer
//!   Address option; a port without one sends from `::` without the option
//!   (a duplicate address detection probe, which the owner answers to
//!   all-nodes: learned all the same), as ARP sends from 0.0.0.0.
//! * **Unsolicited advertisements out** (§7.2.6): when an IPv6 address
//!   becomes announced (start, a VIP added, this instance elected for it),
//!   worker 0 advertises it to all-nodes with Override set and Solicited
//!   clear, where the gratuitous ARP is sent for IPv4. One advertisement
//!   (§7.2.6 allows up to `MAX_NEIGHBOR_ADVERTISEMENT` = 3; a lost one is
//!   corrected by the next solicitation, as for gratuitous ARP).
//!
//! Not done: the gateway joins no multicast group with Multicast Listener
//! Discovery reports (RFC 4861 §7.2.1). On a link whose switches snoop MLD,
//! solicitations to the gateway's solicited-node groups then reach it only
//! as far as the switch floods unknown groups. On the gateway's side,
//! af_packet and DPDK ports are promiscuous and receive every solicitation;
//! an AF_XDP port gets what its NIC's filter passes (a veth passes all; a
//! hardware NIC passes the solicited-node groups only in all-multicast or
//! promiscuous mode, which the AF_XDP driver does not set yet).
//!
//! Frames are written on the stack or in the received frame: nothing here
//! allocates.

use crate::counters::DropReason;
use crate::driver::Frame;
use crate::neighbour::Neighbours;
use crate::packet::{PacketMeta, PortId, Verdict};
use crate::snapshot::{OwnedAddr, Snapshot};
use crate::wire::icmpv6::{self, msg_type};
use crate::wire::ndp::{self, flags};
use crate::wire::{MacAddr, ethernet, ipv6};
use std::net::Ipv6Addr;

/// The all-nodes multicast address (RFC 4291 §2.7.1).
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
/// An NS or NA with one link-layer address option.
const MSG_LEN: usize = ndp::BODY_LEN + ndp::LLA_OPTION_LEN;
/// Bytes of the NDP frames the gateway sends at most: Ethernet, IPv6, an
/// NS or NA with its link-layer address option.
pub const NDP_FRAME_BYTES: usize = ethernet::HEADER_LEN + ipv6::HEADER_LEN + MSG_LEN;

/// Write an IPv6 header (hop limit 255) and an NS or NA (`kind`, `flags`)
/// for `target` at `out[l3..]`, with a link-layer address option carrying
/// `mac` unless `src` is `::` (RFC 4861 §4.3: a solicitation from `::`
/// carries none), checksummed. Returns the end of the packet (`None`:
/// `out` is too short).
fn write_ndp(
    out: &mut [u8],
    l3: usize,
    (kind, flag_bits): (u8, u8),
    target: Ipv6Addr,
    mac: MacAddr,
    (src, dst): (Ipv6Addr, Ipv6Addr),
) -> Option<usize> {
    let body = l3 + ipv6::HEADER_LEN;
    let msg = out.get_mut(body..body + MSG_LEN)?;
    ndp::write(msg, kind, flag_bits, target, mac, (src, dst))?;
    let len = if src.is_unspecified() {
        // Drop the option and checksum the body alone.
        msg[ndp::BODY_LEN..].fill(0);
        msg[2..4].fill(0);
        icmpv6::Packet::new_unchecked(&mut msg[..ndp::BODY_LEN]).fill_checksum(src, dst);
        ndp::BODY_LEN
    } else {
        MSG_LEN
    };
    let mut ip = ipv6::Packet::new_unchecked(out.get_mut(l3..body)?);
    ip.set_version_tc_flow(0, 0);
    ip.set_payload_len(len as u16);
    ip.set_next_header(ipv6::next_header::ICMPV6);
    ip.set_hop_limit(ndp::HOP_LIMIT);
    ip.set_src_addr(src);
    ip.set_dst_addr(dst);
    Some(body + len)
}

/// Write the Ethernet header of an untagged IPv6 frame.
fn write_eth(out: &mut [u8], src: [u8; 6], dst: MacAddr) {
    let mut eth = ethernet::Packet::new_unchecked(out);
    eth.set_dst_addr(dst);
    eth.set_src_addr(MacAddr(src));
    eth.set_ethertype(ethernet::ethertype::IPV6);
}

/// A Neighbour Solicitation for `target` from `source` (`::`: no source
/// link-layer address) at `port_mac`, to `target`'s solicited-node
/// multicast address (RFC 4861 §7.2.2). Returns the frame's length.
pub fn write_solicit(
    out: &mut [u8; NDP_FRAME_BYTES],
    port_mac: [u8; 6],
    source: Ipv6Addr,
    target: Ipv6Addr,
) -> usize {
    let dst = ndp::solicited_node(target);
    write_eth(out, port_mac, ndp::multicast_mac(dst));
    write_ndp(
        out,
        ethernet::HEADER_LEN,
        (msg_type::NEIGHBOR_SOLICIT, 0),
        target,
        MacAddr(port_mac),
        (source, dst),
    )
    .unwrap_or(0) // cannot happen: the buffer holds the longest frame
}

/// An unsolicited Neighbour Advertisement of `addr` at `port_mac`
/// (RFC 4861 §7.2.6): from `addr` to all-nodes, Override set, Solicited
/// clear. Returns the frame's length.
pub fn write_unsolicited_advert(
    out: &mut [u8; NDP_FRAME_BYTES],
    port_mac: [u8; 6],
    addr: Ipv6Addr,
) -> usize {
    write_eth(out, port_mac, ndp::multicast_mac(ALL_NODES));
    write_ndp(
        out,
        ethernet::HEADER_LEN,
        (msg_type::NEIGHBOR_ADVERT, flags::OVERRIDE),
        addr,
        MacAddr(port_mac),
        (addr, ALL_NODES),
    )
    .unwrap_or(0) // cannot happen: the buffer holds the longest frame
}

/// Handle an NDP message for the gateway (`meta.kind` is
/// [`PacketKind::Ndp`](crate::packet::PacketKind::Ndp): checked by the
/// parse stage; `meta.key6` holds its addresses). Sets the verdict
/// (`Reply`, `Host`, `Consumed` or a drop, see the module docs) and
/// returns whether the table learned.
pub fn answer<F: Frame>(
    table: &Neighbours<'_, Ipv6Addr>,
    now_ms: u64,
    snap: &Snapshot,
    frame: &mut F,
    meta: &mut PacketMeta,
) -> bool {
    let Some(port) = snap.ports.get(meta.in_port as usize) else {
        meta.drop(DropReason::NoRoute);
        return false;
    };
    let (src, dst) = (meta.key6.src_ip, meta.key6.dst_ip);
    let (l3, l4, end) = (
        meta.l3_offset as usize,
        meta.l4_offset as usize,
        meta.l3_end as usize,
    );
    let data = frame.data();
    let hop_limit = data.get(l3 + 7).copied().unwrap_or(0);
    let parsed = ndp::parse(src, dst, hop_limit, data.get(l4..end).unwrap_or(&[]));
    let on_port = |a: Ipv6Addr| snap.owned6(a).filter(|o| o.port == meta.in_port);
    match parsed {
        Ok(ndp::Message::Solicit(ns)) => {
            let owned = on_port(ns.target);
            let learned = owned.is_some()
                && !src.is_unspecified()
                && ns
                    .source_mac
                    .is_some_and(|m| table.learn(meta.in_port, src, m.0, now_ms, true));
            match owned {
                Some(o) if o.host => meta.verdict = Verdict::Host,
                Some(o) if o.announce => {
                    let requester = ns
                        .source_mac
                        .unwrap_or_else(|| ethernet::Packet::new_unchecked(data).src_addr());
                    advertise_in_place(frame, meta, port.mac, ns.target, requester, src);
                }
                _ if learned => meta.verdict = Verdict::Consumed,
                Some(_) => meta.drop(DropReason::NdpNotAnnounced),
                None => meta.drop(DropReason::NdpNotOwned),
            }
            learned
        }
        Ok(ndp::Message::Advert(na)) => {
            let learned = na
                .target_mac
                .is_some_and(|m| table.learn(meta.in_port, na.target, m.0, now_ms, true));
            if on_port(dst).is_some_and(|o| o.host) {
                meta.verdict = Verdict::Host;
            } else if learned {
                meta.verdict = Verdict::Consumed;
            } else {
                meta.drop(DropReason::NdpAdvertIgnored);
            }
            learned
        }
        Err(ndp::Invalid::NotNeighbourDiscovery(_)) => {
            if on_port(dst).is_some_and(|o| o.host) {
                meta.verdict = Verdict::Host;
            } else {
                meta.drop(DropReason::NdpRouterIgnored);
            }
            false
        }
        // The parse stage let through only valid messages.
        Err(_) => {
            meta.drop(DropReason::NdpMalformed);
            false
        }
    }
}

/// Turn the solicitation in `frame` into the advertisement of `target`
/// (RFC 4861 §7.2.4): to `requester_ip` at `requester`, or, for duplicate
/// address detection (`requester_ip` is `::`), to all-nodes without the
/// Solicited flag. The frame keeps what precedes the IPv6 header (a VLAN
/// tag) and is resized to the advertisement.
fn advertise_in_place<F: Frame>(
    frame: &mut F,
    meta: &mut PacketMeta,
    port_mac: [u8; 6],
    target: Ipv6Addr,
    requester: MacAddr,
    requester_ip: Ipv6Addr,
) {
    let l3 = meta.l3_offset as usize;
    let end = l3 + ipv6::HEADER_LEN + MSG_LEN;
    if frame.data().len() < end && !frame.extend(end) {
        return meta.drop(DropReason::NdpNoRoom);
    }
    frame.truncate(end);
    let (dst_ip, dst_mac, flag_bits) = if requester_ip.is_unspecified() {
        (ALL_NODES, ndp::multicast_mac(ALL_NODES), flags::OVERRIDE)
    } else {
        (requester_ip, requester, flags::SOLICITED | flags::OVERRIDE)
    };
    let data = frame.data_mut();
    let mut eth = ethernet::Packet::new_unchecked(&mut data[..]);
    eth.set_dst_addr(dst_mac);
    eth.set_src_addr(MacAddr(port_mac));
    if write_ndp(
        data,
        l3,
        (msg_type::NEIGHBOR_ADVERT, flag_bits),
        target,
        MacAddr(port_mac),
        (target, dst_ip),
    )
    .is_none()
    {
        return meta.drop(DropReason::NdpNoRoom); // cannot happen: extended above
    }
    meta.l4_offset = (l3 + ipv6::HEADER_LEN) as u16;
    meta.l3_end = end as u16;
    meta.verdict = Verdict::Reply;
}

/// The IPv6 addresses of `snap` to advertise (announced, not host
/// addresses), with their port.
pub fn announced(snap: &Snapshot) -> impl Iterator<Item = (PortId, Ipv6Addr)> + '_ {
    snap.owned6
        .iter()
        .filter(|(_, o)| is_announced(o))
        .map(|(addr, o)| (o.port, *addr))
}

/// Whether the gateway advertises this address (announces it, and it is
/// not the kernel's).
pub fn is_announced(o: &OwnedAddr) -> bool {
    o.announce && !o.host
}

#[cfg(test)]
mod tests;
