//! Per-packet metadata, filled once by the parse stage and read by every later
//! stage (no stage re-parses the frame), and the verdict each packet ends in.

use crate::counters::DropReason;
use crate::flow::{FlowKey, FlowKey6, Proto};
use std::net::{Ipv4Addr, Ipv6Addr};

pub use crate::wire::vnet::{Gso, Offload};

/// Index of a port (interface) of the gateway, as in the plan's port list.
pub type PortId = u8;
/// Index of a worker (core).
pub type WorkerId = u8;

pub use crate::flow::Family;

/// What the parse stage recognised. The L4 kinds are the same for both
/// families; [`PacketMeta::family`] says which.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PacketKind {
    /// ARP over Ethernet/IPv4 (request or reply).
    Arp,
    /// TCP over IPv4 or IPv6; the key and `tcp_flags` are valid.
    Tcp,
    /// UDP over IPv4 or IPv6; the key is valid.
    Udp,
    /// ICMP or ICMPv6 echo request or reply; the key carries the identifier
    /// as both ports.
    IcmpEcho,
    /// ICMP error (destination unreachable, time exceeded, parameter
    /// problem) with a complete inner IPv4 header and at least 8 bytes of
    /// its payload, or ICMPv6 error (destination unreachable, packet too
    /// big, time exceeded, parameter problem) with a complete inner IPv6
    /// header and 8 bytes of the inner upper layer; the key is the *inner*
    /// packet's 5-tuple, `inner_l3_offset` and `inner_l4_offset` are valid.
    IcmpError,
    /// An NDP message (ICMPv6 types 133..=137) that passed the checks of
    /// RFC 4861 §7.1 (hop limit 255, code 0, well-formed options);
    /// `l4_offset` is the ICMPv6 header, `icmp_type` its type, and `key6`
    /// holds its source and destination (ports 0).
    Ndp,
}

/// Where a packet goes. Every packet of a batch ends in exactly one of these.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Verdict {
    /// Not decided yet (only while the batch is in flight).
    Pending,
    /// Send out of this port.
    Forward(PortId),
    /// Answered locally (ARP reply, ICMP echo reply, TCP RST): send back out of
    /// the port it came in on.
    Reply,
    /// Belongs to a flow owned by another worker: hand it over.
    Handoff(WorkerId),
    /// Dropped and counted under this reason.
    Drop(DropReason),
    /// Absorbed by the gateway (an ARP reply it learned from): released, not
    /// a drop.
    Consumed,
    /// Translated and ready for `port`, but the next hop's MAC is being
    /// resolved: the worker holds it until the neighbour answers.
    AwaitNeighbour(PortId),
    /// Addressed to a host address of the port it came in on (ARP for it,
    /// IPv4 to it): the worker writes it, unchanged, to that port's host
    /// path (the kernel's TAP, see [`crate::driver::hostpath`]).
    Host,
}

/// Parsed metadata of one frame. Offsets are from the start of the frame.
#[derive(Clone, Copy, Debug)]
pub struct PacketMeta {
    pub in_port: PortId,
    pub kind: PacketKind,
    /// Which key is valid: [`Self::key`] (IPv4, and ARP) or [`Self::key6`].
    pub family: Family,
    /// 802.1Q VLAN id if the frame carried one tag.
    pub vlan: Option<u16>,
    /// Start of the ARP, IPv4 or IPv6 header.
    pub l3_offset: u16,
    /// Start of the TCP/UDP/ICMP/ICMPv6 header (after IPv6 extension
    /// headers).
    pub l4_offset: u16,
    /// End of the IP packet (`l3_offset + total length`, IPv6: `l3_offset +
    /// 40 + payload length`); bytes after it are Ethernet padding and are
    /// not forwarded.
    pub l3_end: u16,
    /// For [`PacketKind::IcmpError`]: start of the inner IPv4/IPv6 header.
    pub inner_l3_offset: u16,
    /// For [`PacketKind::IcmpError`]: start of the inner L4 header.
    pub inner_l4_offset: u16,
    /// TCP flags byte (CWR ECE URG ACK PSH RST SYN FIN), 0 for other kinds.
    pub tcp_flags: u8,
    /// ICMP type and code, 0 for other kinds.
    pub icmp_type: u8,
    pub icmp_code: u8,
    /// The IPv4 5-tuple (inner tuple for ICMP errors). Unspecified for ARP
    /// and IPv6.
    pub key: FlowKey,
    /// The IPv6 5-tuple (inner tuple for ICMPv6 errors), when `family` is
    /// [`Family::V6`]; unspecified (possibly a previous packet's) otherwise.
    pub key6: FlowKey6,
    /// The table hash of `key` or `key6` (the worker's keyed
    /// [`TableHasher`](crate::flow::TableHasher)), computed once at parse
    /// and reused by every conntrack lookup of the packet. Not Maglev's
    /// hash: backend selection uses the public `key.stable_hash()`.
    pub hash: u64,
    /// For a packet dropped as `too_big`: the MTU of the port it would have
    /// left by (the next-hop MTU its ICMP error reports); 0 otherwise.
    pub egress_mtu: u16,
    pub verdict: Verdict,
    /// The driver's offload metadata of the frame (GSO/GRO super-packet,
    /// partial checksum), checked by parse against the packet
    /// ([`Offload::NONE`] for most frames and every driver without
    /// offloads). With `needs_csum` the L4 checksum field holds the
    /// pseudo-header seed: stages that rewrite the packet keep it a seed.
    pub offload: Offload,
    /// For a super-packet: the IP length of its largest segment (IP and
    /// L4 headers + `gso_size`), what MTU checks apply to; 0 otherwise.
    pub segment_l3_len: u16,
}

impl PacketMeta {
    /// Metadata of a packet that has not been parsed yet.
    pub const fn empty(in_port: PortId) -> Self {
        PacketMeta {
            in_port,
            kind: PacketKind::Arp,
            family: Family::V4,
            vlan: None,
            l3_offset: 0,
            l4_offset: 0,
            l3_end: 0,
            inner_l3_offset: 0,
            inner_l4_offset: 0,
            tcp_flags: 0,
            icmp_type: 0,
            icmp_code: 0,
            key: FlowKey::new(
                Proto::Udp,
                Ipv4Addr::UNSPECIFIED,
                0,
                Ipv4Addr::UNSPECIFIED,
                0,
            ),
            key6: FlowKey6::new(
                Proto::Udp,
                Ipv6Addr::UNSPECIFIED,
                0,
                Ipv6Addr::UNSPECIFIED,
                0,
            ),
            hash: 0,
            egress_mtu: 0,
            verdict: Verdict::Pending,
            offload: Offload::NONE,
            segment_l3_len: 0,
        }
    }

    /// Make this meta [`Self::empty`] for a new frame on `in_port`, except
    /// `key6`, which is meaningful only when `family` is [`Family::V6`]
    /// (the parse stage sets it then): left as it was, so IPv4 packets do
    /// not pay for clearing 38 bytes they never read.
    #[inline(always)]
    pub fn reset(&mut self, in_port: PortId) {
        let PacketMeta {
            in_port: p,
            kind,
            family,
            vlan,
            l3_offset,
            l4_offset,
            l3_end,
            inner_l3_offset,
            inner_l4_offset,
            tcp_flags,
            icmp_type,
            icmp_code,
            key,
            key6: _,
            hash,
            egress_mtu,
            verdict,
            offload,
            segment_l3_len,
        } = Self::empty(in_port);
        self.in_port = p;
        self.kind = kind;
        self.family = family;
        self.vlan = vlan;
        self.l3_offset = l3_offset;
        self.l4_offset = l4_offset;
        self.l3_end = l3_end;
        self.inner_l3_offset = inner_l3_offset;
        self.inner_l4_offset = inner_l4_offset;
        self.tcp_flags = tcp_flags;
        self.icmp_type = icmp_type;
        self.icmp_code = icmp_code;
        self.key = key;
        self.hash = hash;
        self.egress_mtu = egress_mtu;
        self.verdict = verdict;
        self.offload = offload;
        self.segment_l3_len = segment_l3_len;
    }

    #[inline]
    pub fn is_pending(&self) -> bool {
        matches!(self.verdict, Verdict::Pending)
    }

    #[inline]
    pub fn drop(&mut self, reason: DropReason) {
        self.verdict = Verdict::Drop(reason);
    }

    /// The IP length MTU checks apply to: a super-packet's largest
    /// segment, else the packet.
    #[inline(always)]
    pub fn wire_l3_len(&self) -> u16 {
        if self.segment_l3_len != 0 {
            self.segment_l3_len
        } else {
            self.l3_end.saturating_sub(self.l3_offset)
        }
    }
}
