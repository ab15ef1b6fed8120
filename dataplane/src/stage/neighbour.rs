//! The neighbour stage: everything between a packet's next hop and the
//! Ethernet header it leaves with, over the shared [`NeighbourTable`] (see
//! [`crate::neighbour`] for the table's states and timers). IPv4 next hops
//! are resolved by ARP (below), IPv6 ones by NDP ([`super::ndp`]: its
//! messages in, its solicitations and unsolicited advertisements out);
//! resolving, holding, releasing and the static entries work the same way
//! for both families, each in its own table.
//!
//! * **ARP in** (for the local stage): a request for an address the gateway
//!   owns *and announces* on the port it came in on is answered in place
//!   (RFC 826); one for a VIP another instance of the tier is elected to
//!   announce is dropped as `arp_not_announced` (silence, so the upstream
//!   cache holds one MAC per VIP); the
//!   sender's MAC is learned from replies to our requests and from requests
//!   of neighbours already in the table, never from strangers.
//! * **Resolve** (for the NAT and ICMP-error stages): the next hop's MAC in
//!   the table generation loaded once per batch ([`NeighbourCtx`]; the IPv6
//!   table's generation is loaded at the batch's first IPv6 next hop, so
//!   IPv4 traffic never touches it); known:
//!   the Ethernet addresses are rewritten and the packet is forwarded;
//!   pending: the packet's verdict is [`Verdict::AwaitNeighbour`]; failed or
//!   table full: dropped as `neighbour_unresolved`.
//! * **Hold**: a packet awaiting its neighbour waits, translated, in a
//!   bounded queue ([`HeldFrames`], at most [`HELD_FRAMES`]; when full it is
//!   dropped as `neighbour_queue_full`) for one resolution round (every
//!   probe: `retrans_ms × max_probes`).
//! * **Release**: before each batch is sent and once per poll, every held
//!   frame whose neighbour answered gets its Ethernet addresses and is sent;
//!   one whose resolution failed or whose time is up is dropped as
//!   `neighbour_timeout`. Resolving again (not just peeking) re-sends the
//!   request once per retrans period while packets wait, as Linux does.
//!   Order among the frames kept is preserved.
//! * **ARP and NDP out**: the requests the batches asked for (a probe
//!   claimed in the table: at most one per address per `retrans_ms`, from
//!   the port's ARP source address; for IPv6 a Neighbour Solicitation), and
//!   on worker 0 one gratuitous ARP for every announced IPv4 address not
//!   announced yet (RFC 5227 §3 "ARP Announcement"; for IPv6 an unsolicited
//!   Neighbour Advertisement, RFC 4861 §7.2.6),
//!   so VIPs move to this gateway at start, when they are added and when
//!   this instance is elected for them (a failover); an announcement that
//!   could not be sent is retried with the next snapshot. The flag is read
//!   per snapshot, never per forwarded packet.
//! * **Static neighbours**: the snapshot's static entries are applied to the
//!   table on every new snapshot, and again whenever the table publishes a
//!   new generation (a static entry set while a compaction copied the table
//!   may be missing from the copy).
//!
//! Frames enter and leave through the worker's [`Egress`]. Nothing here
//! allocates after construction: the hold queue and the request lists keep
//! their capacity, ARP and NDP frames are built on the stack.

use super::{Egress, L2Next, MAX_BATCH, ndp};
use crate::counters::{Counters, DropReason};
use crate::driver::Frame;
use crate::neighbour::{NeighbourAddr, NeighbourTable, Neighbours, Resolution};
use crate::packet::{PacketMeta, PortId, Verdict};
use crate::snapshot::Snapshot;
use crate::wire::{MacAddr, arp, ethernet};
use std::cell::OnceCell;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// Frames a worker holds for ARP resolution at most.
pub const HELD_FRAMES: usize = 256;

/// Bytes of the ARP frames the gateway sends: the Ethernet minimum (60
/// bytes without FCS), zero-padded after the ARP packet.
const ARP_FRAME_BYTES: usize = 60;

/// Set the Ethernet source and destination.
#[inline]
pub(crate) fn set_l2(frame: &mut [u8], src: [u8; 6], dst: [u8; 6]) {
    let mut eth = ethernet::Packet::new_unchecked(frame);
    eth.set_dst_addr(MacAddr(dst));
    eth.set_src_addr(MacAddr(src));
}

/// A resolved packet leaves on `out_port` with its Ethernet addresses
/// set; an unresolved one keeps its verdict.
#[inline]
fn with_l2(
    resolved: Result<[u8; 6], Verdict>,
    frame: &mut [u8],
    out_port: PortId,
    port_mac: [u8; 6],
) -> Verdict {
    match resolved {
        Ok(mac) => {
            set_l2(frame, port_mac, mac);
            Verdict::Forward(out_port)
        }
        Err(verdict) => verdict,
    }
}

/// A worker's neighbour-stage state, owned by its [`super::Pipeline`].
#[derive(Debug)]
pub struct NeighbourStage {
    /// The table shared by all workers.
    table: Arc<NeighbourTable>,
    /// For a packet of the last batch with verdict `AwaitNeighbour`: the
    /// address it waits for.
    await_addr: Box<[IpAddr; MAX_BATCH]>,
    /// Requests to send `(port, address)`, ARP and NDP; bounded by their
    /// capacity.
    requests: Requests,
    /// Table generation the static neighbours were applied to.
    seen_generation: u64,
    /// Owned addresses already announced with a gratuitous ARP, with their
    /// port (worker 0). A set: with thousands of VIPs, a list made every new
    /// generation quadratic.
    announced: hashbrown::HashSet<(PortId, Ipv4Addr)>,
    /// The same for IPv6 addresses (unsolicited advertisements).
    announced6: hashbrown::HashSet<(PortId, Ipv6Addr)>,
}

/// The requests a worker's batches asked for, per family.
#[derive(Debug)]
struct Requests {
    v4: Vec<(PortId, Ipv4Addr)>,
    v6: Vec<(PortId, Ipv6Addr)>,
}

/// Where probes of a family's next hops are queued.
trait RequestList<A> {
    /// Queue a request for `addr` on `port` (dropped when the list is
    /// full: the next resolve asks again).
    fn push(&mut self, port: PortId, addr: A);
}

impl RequestList<Ipv4Addr> for Requests {
    #[inline]
    fn push(&mut self, port: PortId, addr: Ipv4Addr) {
        if self.v4.len() < self.v4.capacity() {
            self.v4.push((port, addr));
        }
    }
}

impl RequestList<Ipv6Addr> for Requests {
    #[inline]
    fn push(&mut self, port: PortId, addr: Ipv6Addr) {
        if self.v6.len() < self.v6.capacity() {
            self.v6.push((port, addr));
        }
    }
}

/// The neighbour stage over one batch: the table generation loaded for it,
/// and where its probes and awaited addresses go.
#[derive(Debug)]
pub struct NeighbourCtx<'a> {
    table: Neighbours<'a>,
    /// The IPv6 table's generation, loaded at the batch's first use.
    table6: OnceCell<Neighbours<'a, Ipv6Addr>>,
    shared: &'a NeighbourTable,
    now_ms: u64,
    requests: &'a mut Requests,
    await_addr: &'a mut [IpAddr],
}

/// Frames translated and waiting for their next hop's MAC. Owned by the
/// worker (the frames are its driver's), handled only by the stage.
#[derive(Debug)]
pub struct HeldFrames<F> {
    held: Vec<Held<F>>,
    /// Second buffer for `held` (swapped on each release; no allocation).
    spare: Vec<Held<F>>,
}

/// A frame waiting for ARP or NDP resolution of `addr` on `port`.
#[derive(Debug)]
struct Held<F> {
    frame: F,
    port: PortId,
    addr: IpAddr,
    deadline_ms: u64,
}

impl<F> HeldFrames<F> {
    pub fn new() -> Self {
        HeldFrames {
            held: Vec::with_capacity(HELD_FRAMES),
            spare: Vec::with_capacity(HELD_FRAMES),
        }
    }

    /// Frames waiting now.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

impl<F> Default for HeldFrames<F> {
    fn default() -> Self {
        Self::new()
    }
}

impl NeighbourCtx<'_> {
    /// The IPv4 table generation of this batch.
    #[inline]
    pub fn table(&self) -> &Neighbours<'_> {
        &self.table
    }

    /// The IPv6 table generation of this batch (loaded at the first call).
    #[inline]
    pub fn table6(&self) -> &Neighbours<'_, Ipv6Addr> {
        self.table6.get_or_init(|| self.shared.load())
    }

    /// The MAC for `next` on `port`, or the verdict for packet `i` when it
    /// has none (held, or dropped).
    #[inline]
    pub fn resolve(&mut self, port: PortId, next: L2Next, i: usize) -> Result<[u8; 6], Verdict> {
        match next {
            L2Next::Mac(mac) => Ok(mac),
            L2Next::Neighbour(addr) => {
                let resolution = self.table.resolve(port, addr, self.now_ms);
                self.conclude(resolution, port, addr, i)
            }
        }
    }

    /// [`Self::resolve`] for an IPv6 next hop (resolved by NDP).
    #[inline]
    pub fn resolve6(&mut self, port: PortId, addr: Ipv6Addr, i: usize) -> Result<[u8; 6], Verdict> {
        let resolution = self.table6().resolve(port, addr, self.now_ms);
        self.conclude(resolution, port, addr, i)
    }

    /// The MAC, or packet `i`'s verdict, for a resolution of `addr`; queue
    /// the request it asked for.
    #[inline]
    fn conclude<A: NeighbourAddr + Into<IpAddr>>(
        &mut self,
        resolution: Resolution,
        port: PortId,
        addr: A,
        i: usize,
    ) -> Result<[u8; 6], Verdict>
    where
        Requests: RequestList<A>,
    {
        let (result, probe) = match resolution {
            Resolution::Known { mac, probe } => (Ok(mac), probe),
            Resolution::Pending { probe } => {
                if let Some(slot) = self.await_addr.get_mut(i) {
                    *slot = addr.into();
                }
                (Err(Verdict::AwaitNeighbour(port)), probe)
            }
            Resolution::Failed | Resolution::TableFull => {
                (Err(Verdict::Drop(DropReason::NeighbourUnresolved)), false)
            }
        };
        if probe {
            self.requests.push(port, addr);
        }
        result
    }

    /// [`Self::forward`] for an IPv6 next hop.
    #[inline]
    pub fn forward6(
        &mut self,
        frame: &mut [u8],
        out_port: PortId,
        port_mac: [u8; 6],
        next: Ipv6Addr,
        i: usize,
    ) -> Verdict {
        let resolved = self.resolve6(out_port, next, i);
        with_l2(resolved, frame, out_port, port_mac)
    }

    /// NDP for the gateway (a [`PacketKind::Ndp`](crate::packet::PacketKind::Ndp)
    /// frame): see [`ndp::answer`]. Returns whether the table learned.
    pub fn answer_ndp<F: Frame>(
        &self,
        snap: &Snapshot,
        frame: &mut F,
        meta: &mut PacketMeta,
    ) -> bool {
        ndp::answer(self.table6(), self.now_ms, snap, frame, meta)
    }

    /// Packet `i`, translated, leaves on `out_port` (whose MAC is
    /// `port_mac`) towards `next`: the Ethernet addresses are set and the
    /// verdict is `Forward`, or the packet awaits its neighbour (or is
    /// dropped) and `frame` is left for the release to finish.
    #[inline]
    pub fn forward(
        &mut self,
        frame: &mut [u8],
        out_port: PortId,
        port_mac: [u8; 6],
        next: L2Next,
        i: usize,
    ) -> Verdict {
        let resolved = self.resolve(out_port, next, i);
        with_l2(resolved, frame, out_port, port_mac)
    }

    /// ARP for the gateway (a parsed ARP frame, `meta.l3_offset` at the ARP
    /// header): answer a request for an address owned on the port it came
    /// in on; learn the sender's MAC from replies to our requests and from
    /// requests of neighbours already in the table (never from strangers:
    /// the table is not theirs to fill). Sets the verdict (`Host` when the
    /// target is a host address of the port, learned from all the same;
    /// `Reply`, `Consumed`, or a drop) and returns whether the table
    /// learned.
    pub fn answer_arp(&self, snap: &Snapshot, frame: &mut [u8], meta: &mut PacketMeta) -> bool {
        let Some(port) = snap.ports.get(meta.in_port as usize) else {
            meta.drop(DropReason::NoRoute);
            return false;
        };
        let l3 = meta.l3_offset as usize;
        let Some(arp_bytes) = frame.get(l3..) else {
            meta.drop(DropReason::ArpMalformed);
            return false;
        };
        let pkt = arp::Packet::new_unchecked(arp_bytes);
        let (sender_ip, sender_mac) = (pkt.sender_proto_addr(), pkt.sender_hw_addr());
        let target = pkt.target_proto_addr();
        let operation = pkt.operation();
        let owned = snap.owned(target).filter(|o| o.port == meta.in_port);
        let ours = owned.is_some();
        let learned = (ours || sender_ip == target)
            && !sender_ip.is_unspecified()
            && self
                .table
                .learn(meta.in_port, sender_ip, sender_mac.0, self.now_ms, true);
        match operation {
            // The kernel answers for (and asked from) its host addresses;
            // the sender is learned all the same.
            _ if owned.is_some_and(|o| o.host) => meta.verdict = Verdict::Host,
            arp::op::REQUEST if owned.is_some_and(|o| o.announce) => {
                match arp::reply_in_place(frame, l3, MacAddr(port.mac)) {
                    Ok(_) => meta.verdict = Verdict::Reply,
                    Err(_) => meta.drop(DropReason::ArpMalformed),
                }
            }
            _ if learned => meta.verdict = Verdict::Consumed,
            arp::op::REQUEST if ours => meta.drop(DropReason::ArpNotAnnounced),
            _ => meta.drop(DropReason::ArpNotOwned),
        }
        learned
    }
}

impl NeighbourStage {
    pub fn new(table: Arc<NeighbourTable>) -> Self {
        NeighbourStage {
            table,
            await_addr: Box::new([IpAddr::V4(Ipv4Addr::UNSPECIFIED); MAX_BATCH]),
            requests: Requests {
                v4: Vec::with_capacity(2 * MAX_BATCH),
                v6: Vec::with_capacity(2 * MAX_BATCH),
            },
            seen_generation: u64::MAX,
            announced: hashbrown::HashSet::new(),
            announced6: hashbrown::HashSet::new(),
        }
    }

    pub fn table(&self) -> &NeighbourTable {
        &self.table
    }

    /// The stage over a batch of `n` packets at `now_ms`: loads the table's
    /// current generation, held until the returned context is dropped.
    #[inline]
    pub fn batch(&mut self, now_ms: u64, n: usize) -> NeighbourCtx<'_> {
        NeighbourCtx {
            table: self.table.load(),
            table6: OnceCell::new(),
            shared: &self.table,
            now_ms,
            requests: &mut self.requests,
            await_addr: &mut self.await_addr[..n.min(MAX_BATCH)],
        }
    }

    /// The address packet `i` of the last batch awaits (valid when its
    /// verdict is `AwaitNeighbour`).
    #[inline]
    pub fn awaited(&self, i: usize) -> IpAddr {
        self.await_addr
            .get(i)
            .copied()
            .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
    }

    /// Hold frame `i` of the last batch (verdict `AwaitNeighbour(port)`)
    /// until its neighbour answers. `Err(frame)`: the queue is full, the
    /// frame was counted as dropped and goes back to the driver.
    pub fn hold<F>(
        &self,
        held: &mut HeldFrames<F>,
        i: usize,
        port: PortId,
        frame: F,
        now_ms: u64,
        counters: &mut Counters,
    ) -> Result<(), F> {
        if held.held.len() >= HELD_FRAMES {
            counters.drop(DropReason::NeighbourQueueFull);
            return Err(frame);
        }
        let addr = self.awaited(i);
        let c = self.table.config();
        let hold_ms = c.retrans_ms.saturating_mul(u64::from(c.max_probes.max(1)));
        held.held.push(Held {
            frame,
            port,
            addr,
            deadline_ms: now_ms.saturating_add(hold_ms),
        });
        Ok(())
    }

    /// Send the held frames whose neighbour is now known; drop the ones
    /// whose resolution failed or whose time is up; keep the rest, in order.
    pub fn release<F: Frame>(
        &mut self,
        held: &mut HeldFrames<F>,
        snap: &Snapshot,
        now_ms: u64,
        counters: &mut Counters,
        out: &mut impl Egress<F>,
    ) {
        if held.held.is_empty() {
            return;
        }
        // One table generation per family for the whole walk (IPv6's
        // loaded only if an IPv6 frame waits).
        let table = self.table.load::<Ipv4Addr>();
        let table6 = OnceCell::new();
        // Walk the frames held so far while the ones kept go back to
        // `held`; both Vecs keep their capacity (moved, not reallocated).
        std::mem::swap(&mut held.held, &mut held.spare);
        let mut waiting = std::mem::take(&mut held.spare);
        for h in waiting.drain(..) {
            let Held {
                mut frame,
                port,
                addr,
                deadline_ms,
            } = h;
            let port_mac = snap.ports.get(port as usize).map(|p| p.mac);
            let resolution = match addr {
                IpAddr::V4(a) => table.resolve(port, a, now_ms),
                IpAddr::V6(a) => table6
                    .get_or_init(|| self.table.load::<Ipv6Addr>())
                    .resolve(port, a, now_ms),
            };
            let (mac, probe) = match resolution {
                Resolution::Known { mac, probe } => (Some(mac), probe),
                Resolution::Pending { probe } => (None, probe),
                Resolution::Failed | Resolution::TableFull => (None, false),
            };
            if probe {
                match addr {
                    IpAddr::V4(a) => self.requests.push(port, a),
                    IpAddr::V6(a) => self.requests.push(port, a),
                }
            }
            let failed = matches!(resolution, Resolution::Failed | Resolution::TableFull);
            match (mac, port_mac) {
                (Some(mac), Some(port_mac)) => {
                    set_l2(frame.data_mut(), port_mac, mac);
                    if out.send(port, frame, counters) {
                        counters.neighbour_held_sent += 1;
                    }
                }
                _ if failed || now_ms >= deadline_ms => {
                    counters.drop(DropReason::NeighbourTimeout);
                    out.release(frame);
                }
                _ => held.held.push(Held {
                    frame,
                    port,
                    addr,
                    deadline_ms,
                }),
            }
        }
        held.spare = waiting;
    }

    /// Send the ARP requests the batches asked for, each from its port's
    /// ARP source address (0.0.0.0 when the port has none), and the NDP
    /// solicitations, each from its port's node or SNAT IPv6 address (`::`
    /// when the port has none).
    pub fn send_requests<F>(
        &mut self,
        snap: &Snapshot,
        counters: &mut Counters,
        out: &mut impl Egress<F>,
    ) {
        for &(port, addr) in &self.requests.v6 {
            let source = snap.ndp_source.get(port as usize).copied().flatten();
            let Some(info) = snap.ports.get(port as usize) else {
                continue;
            };
            let mut buf = [0u8; ndp::NDP_FRAME_BYTES];
            let len = ndp::write_solicit(
                &mut buf,
                info.mac,
                source.unwrap_or(Ipv6Addr::UNSPECIFIED),
                addr,
            );
            if send_frame(port, &buf[..len], counters, out) {
                counters.ndp_solicits_sent += 1;
            }
        }
        self.requests.v6.clear();
        for &(port, addr) in &self.requests.v4 {
            let source = snap.arp_source.get(port as usize).copied().flatten();
            if send_arp(
                snap,
                port,
                source.unwrap_or(Ipv4Addr::UNSPECIFIED),
                addr,
                counters,
                out,
            ) {
                counters.arp_requests_sent += 1;
            }
        }
        self.requests.v4.clear();
    }

    /// A new snapshot generation: apply its static neighbours and, when
    /// `announce` (worker 0), announce every owned address not announced
    /// yet on its port. Cold path.
    pub fn on_snapshot<F>(
        &mut self,
        snap: &Snapshot,
        announce: bool,
        counters: &mut Counters,
        out: &mut impl Egress<F>,
    ) {
        self.apply_static(snap);
        if !announce {
            return;
        }
        // An announcement that could not be sent is retried next generation.
        // An address no longer announced leaves the set, so it is
        // announced again the moment it comes back (a VIP failing back).
        self.announced.retain(|&(port, addr)| {
            snap.owned(addr)
                .is_some_and(|o| o.port == port && o.announce)
        });
        let mut fresh: Vec<(PortId, Ipv4Addr)> = snap
            .owned
            .iter()
            // Host addresses are never announced (the kernel announces
            // them itself); VIPs only where this instance is elected.
            .filter(|(_, o)| o.announce && !o.host)
            .map(|(addr, o)| (o.port, *addr))
            .filter(|k| !self.announced.contains(k))
            .collect();
        fresh.sort_unstable();
        for (port, addr) in fresh {
            if send_arp(snap, port, addr, addr, counters, out) {
                counters.garp_sent += 1;
                self.announced.insert((port, addr));
            }
        }
        self.announce6(snap, counters, out);
    }

    /// [`Self::on_snapshot`]'s announcements for IPv6: one unsolicited
    /// Neighbour Advertisement (RFC 4861 §7.2.6) per address newly
    /// announced. Cold path.
    fn announce6<F>(&mut self, snap: &Snapshot, counters: &mut Counters, out: &mut impl Egress<F>) {
        self.announced6.retain(|&(port, addr)| {
            snap.owned6(addr)
                .is_some_and(|o| o.port == port && ndp::is_announced(o))
        });
        let mut fresh: Vec<(PortId, Ipv6Addr)> = ndp::announced(snap)
            .filter(|k| !self.announced6.contains(k))
            .collect();
        fresh.sort_unstable();
        for (port, addr) in fresh {
            let Some(info) = snap.ports.get(port as usize) else {
                continue;
            };
            let mut buf = [0u8; ndp::NDP_FRAME_BYTES];
            let len = ndp::write_unsolicited_advert(&mut buf, info.mac, addr);
            if send_frame(port, &buf[..len], counters, out) {
                counters.unsolicited_adverts_sent += 1;
                self.announced6.insert((port, addr));
            }
        }
    }

    /// Once per poll without a new snapshot: re-apply the static neighbours
    /// of `snap` when the table published a new generation since.
    #[inline]
    pub fn check_generation(&mut self, snap: &Snapshot) {
        if self.table.generation() != self.seen_generation {
            self.apply_static(snap);
        }
    }

    /// Make the table's static entries those of `snap`, in the table's
    /// current generation. Cold path.
    fn apply_static(&mut self, snap: &Snapshot) {
        // Read before applying: the entries go into this generation or a
        // newer one, and a newer one is noticed next poll.
        self.seen_generation = self.table.generation();
        apply_static_family(&self.table, &snap.static_neighbours);
        apply_static_family(&self.table, &snap.static_neighbours6);
    }
}

/// Make `statics` the static entries of their family's table.
fn apply_static_family<A: NeighbourAddr>(table: &NeighbourTable, statics: &[(PortId, A, [u8; 6])]) {
    for &(port, addr, mac) in statics {
        table.set_static(port, addr, mac);
    }
    table.retain_static(|port, addr: A| statics.iter().any(|&(p, a, _)| p == port && a == addr));
}

/// Send an ARP request (`sender` asks for `target`) out of `port`, from the
/// port's MAC; a gratuitous ARP has `sender == target`. Returns whether it
/// was queued (false: no such port, no driver buffer, or tx full; the last
/// two counted).
fn send_arp<F>(
    snap: &Snapshot,
    port: PortId,
    sender: Ipv4Addr,
    target: Ipv4Addr,
    counters: &mut Counters,
    out: &mut impl Egress<F>,
) -> bool {
    let Some(info) = snap.ports.get(port as usize) else {
        return false;
    };
    let mut buf = [0u8; ARP_FRAME_BYTES];
    if arp::write_request(&mut buf, MacAddr(info.mac), sender, target).is_err() {
        return false; // cannot happen: the buffer is longer than the frame
    }
    send_frame(port, &buf, counters, out)
}

/// Send a copy of `bytes` out of `port`. Returns whether it was queued
/// (false: no driver buffer, counted, or tx full).
fn send_frame<F>(
    port: PortId,
    bytes: &[u8],
    counters: &mut Counters,
    out: &mut impl Egress<F>,
) -> bool {
    let Some(frame) = out.frame_from(bytes) else {
        counters.drop(DropReason::PoolExhausted);
        return false;
    };
    out.send(port, frame, counters)
}
