//! The stateful fuzz harness (issues 15 and 17): a byte string decoded
//! into a sequence of frames and events driven through a whole worker —
//! parse, conntrack, SNAT, NAT, the SYN proxy (modes `on` and `auto`),
//! RSTs, challenge ACKs, neighbours, expiry, with ECN and SACK, in both
//! families — on a small gateway (the mem
//! driver, a manual clock, 16 flows, 32 SNAT ports; `gateway.rs` has its
//! services), with the invariants checked after every step.
//!
//! Used by the libFuzzer target `dataplane/fuzz/fuzz_targets/pipeline_sequence.rs`
//! and by the stable, time-bounded run in CI (`dataplane/tests/fuzz_pipeline.rs`,
//! which also replays the committed seeds). Not on any packet path.
//!
//! Invariants checked after every step ([`Violation`] names the first that
//! breaks; `check.rs` has them):
//! * the conntrack table holds at most its capacity;
//! * every live flow is found by its original key (as `Original`) and by
//!   its reply key (as `Reply`) — the index and the slab agree;
//! * SNAT tuples in use equal live flows that hold one (none leaked, none
//!   released twice);
//! * the same for the IPv6 table and IPv6 SNAT allocator;
//! * frames sent carry valid IPv4 headers and TCP/UDP/ICMP checksums, or
//!   IPv6 packets whose TCP/UDP/ICMPv6 checksum verifies;
//! * every frame received was counted once and got a verdict; it was
//!   counted under exactly one drop reason, the verdict's, if and only if
//!   it was dropped; no more proxied flows spliced than cookies validated;
//!
//! and at the end, once everything has expired: no flow, no SNAT tuple and
//! no frame buffer is left. A panic anywhere is a failure too.
//!
//! Input encoding: steps of one opcode byte and its operand bytes (missing
//! bytes read as zero); the opcode's low 3 bits choose the step:
//!
//! | op | step | operands |
//! |---|---|---|
//! | 0 | client TCP segment | source port (low 4 bits), flags, seq, ack, `to`, with opcode bit 3 a marks byte, payload (as many bytes as the opcode's high 4 bits say); `to` bit 0: the IPv4 NodePort, bit 1: IPv6, bits 2–4: the service (`gateway::TCP_PORTS`), bit 5: SYN options (MSS, SACK-permitted, window scale), bit 6: timestamps |
//! | 1 | client UDP datagram to `dns` | source port, payload (as op 0) |
//! | 2 | backend reply to a live flow | flow pick (bit 7: IPv6), flags, seq, ack |
//! | 2 + bit 3 | the peer's answer to the gateway's last TCP segment | which (bit 0: the backend's, else the client's; bit 1: IPv6; bits 2–4: payload length), flags, seq and ack deltas (signed), with opcode bit 4 a marks byte: with deltas 0, a client's ACK of a SYN-ACK carries a valid SYN cookie (and echoes its timestamp), a backend's SYN-ACK answers the proxied flow's SYN |
//! | 3 | ICMP error about a live flow | flow pick (bit 7: ICMPv6), type, bytes cut |
//! | 4 | raw frame | port, length, bytes |
//! | 5 | time passing | ms (u16), factor |
//! | 6 | backend set change | mask of the three backends |
//! | 7 | ARP | request or reply, backend |
//!
//! A marks byte (`segment::Marks`) adds ECN and SACK: bits 0–1 the IP
//! header's ECN field (Not-ECT, ECT(1), ECT(0), CE; RFC 3168 §5), bits 2–3
//! SACK blocks above the acknowledgment and bit 4 a D-SACK block below it
//! (RFC 2018, RFC 2883; not on a SYN). The flags operands are whole bytes:
//! ECE and CWR (an ECN-setup SYN is SYN + ECE + CWR, its SYN-ACK SYN + ACK
//! + ECE, RFC 3168 §6.1.1) are reached as any other flag.
//!
//! Any byte string is a valid input.

mod check;
mod gateway;
mod seeds;
mod segment;

pub use gateway::FLOW_CAPACITY;
pub use seeds::seed_inputs;

use crate::clock::ManualClock;
use crate::counters::SharedCounters;
use crate::driver::mem::{MemConfig, MemDriver};
use crate::flow::{FlowKey, FlowKeyOf, Proto};
use crate::neighbour::NeighbourTable;
use crate::snapshot::{Publisher, SnapshotBuilder};
use crate::wire::build;
use crate::worker::{IdlePolicy, Worker, WorkerConfig};
use gateway::*;
use segment::{Marks, Sent, options, tcp_frame};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

/// Steps of one input at most (longer inputs are cut).
pub const MAX_STEPS: usize = 512;

/// The first invariant that broke, with the step it broke at.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("step {step}: {what}")]
pub struct Violation {
    pub step: usize,
    pub what: String,
}

/// What one input did (for the runners' reports).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunStats {
    pub steps: usize,
    pub frames_sent: u64,
    pub flows_created: u64,
}

/// A small gateway on the mem driver, fed one input.
pub struct SequenceHarness {
    worker: Worker<MemDriver, ManualClock>,
    clock: ManualClock,
    builder: SnapshotBuilder,
    publisher: Publisher,
    pool_frames: usize,
    /// The first invariant of a frame (sent or received) broken since the
    /// last check, if one is.
    broken: Option<String>,
    /// The last TCP segment the gateway sent, by port and family (0: IPv4,
    /// 1: IPv6).
    last_sent: [[Option<Sent>; 2]; 2],
}
/// Reads operand bytes; past the end, zeros.
struct Operands<'a>(&'a [u8]);

impl Operands<'_> {
    fn byte(&mut self) -> u8 {
        let (&b, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        b
    }

    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.byte(), self.byte()])
    }

    fn u32(&mut self) -> u32 {
        u32::from_be_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }

    fn take(&mut self, n: usize) -> &[u8] {
        let (head, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        head
    }
}

impl std::fmt::Debug for SequenceHarness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SequenceHarness")
            .field("flows", &self.worker.pipeline().conntrack().len())
            .finish_non_exhaustive()
    }
}

impl Default for SequenceHarness {
    fn default() -> Self {
        Self::new()
    }
}

impl SequenceHarness {
    /// The harness's gateway, with every backend up.
    pub fn new() -> Self {
        let mut builder = SnapshotBuilder::new();
        // The harness's own spec is valid: a failure here is a bug the
        // fuzzer should report, so it panics.
        let snapshot = builder.build(&spec(0b111)).expect("harness spec builds");
        let publisher = Publisher::new(snapshot);
        let clock = ManualClock::new(1_000);
        // A pool of 512 frames (of the default 4096): enough for any step
        // (one batch of 64 and what it generates), and each input builds
        // its gateway afresh, so a smaller pool is many more inputs per
        // second.
        let mem = MemConfig {
            pool_frames: 512,
            ring_frames: 128,
            ..MemConfig::default()
        };
        let pool_frames = mem.pool_frames;
        let worker = Worker::new(
            &WorkerConfig {
                pipeline: pipeline_config(),
                batch_size: 64,
                idle: IdlePolicy::ADAPTIVE,
            },
            MemDriver::new(mem),
            clock.clone(),
            publisher.reader(),
            Arc::new(SharedCounters::default()),
            None,
            Arc::new(NeighbourTable::new(Default::default())),
        )
        .expect("harness pipeline config is valid");
        let mut harness = SequenceHarness {
            worker,
            clock,
            builder,
            publisher,
            pool_frames,
            broken: None,
            last_sent: [[None; 2]; 2],
        };
        harness.poll_and_drain();
        harness
    }

    /// Run `input`: every step, then the invariants; then expire everything
    /// and check that nothing is left.
    pub fn run(&mut self, input: &[u8]) -> Result<RunStats, Violation> {
        let mut ops = Operands(input);
        let mut stats = RunStats::default();
        while !ops.0.is_empty() && stats.steps < MAX_STEPS {
            let op = ops.byte();
            stats.frames_sent += self.step(op, &mut ops);
            stats.steps += 1;
            self.check(stats.steps)?;
        }
        // Everything expires: nothing may be left.
        self.clock.advance_ms(25 * 3_600_000);
        for _ in 0..(FLOW_CAPACITY as usize * 2) {
            self.poll_and_drain();
        }
        self.check(stats.steps)?;
        let at_end = |what: String| Violation {
            step: stats.steps,
            what,
        };
        let p = self.worker.pipeline();
        stats.flows_created = p.counters().flows_created;
        if !p.conntrack().is_empty() {
            return Err(at_end(format!(
                "{} flows left after expiry",
                p.conntrack().len()
            )));
        }
        if p.snat().stats().in_use != 0 {
            return Err(at_end(format!(
                "{} SNAT tuples left after expiry",
                p.snat().stats().in_use
            )));
        }
        if let Some(v6) = p.ipv6()
            && (!v6.ct.is_empty() || v6.snat.as_ref().is_some_and(|s| s.stats().in_use != 0))
        {
            return Err(at_end(format!(
                "{} IPv6 flows left after expiry",
                v6.ct.len()
            )));
        }
        let free = self.worker.driver_mut().pool_free();
        if free != self.pool_frames {
            return Err(at_end(format!(
                "{} of {} frame buffers never came back",
                self.pool_frames - free,
                self.pool_frames
            )));
        }
        Ok(stats)
    }

    /// The pipeline's counters (for the harness's own tests and runners).
    pub fn counters(&self) -> &crate::counters::Counters {
        self.worker.pipeline().counters()
    }

    /// One step; returns the frames the gateway sent.
    fn step(&mut self, op: u8, ops: &mut Operands<'_>) -> u64 {
        match op & 7 {
            0 => self.client_segment(op, ops),
            1 => {
                let sport = ops.byte() & 15;
                let frame = build::eth_ipv4_udp(
                    ROUTER_MAC,
                    OUT_MAC,
                    client(sport),
                    2_000 + u16::from(sport),
                    VIP,
                    53,
                    ops.take(usize::from(op >> 4)),
                );
                self.send(OUTSIDE, &frame)
            }
            2 if op & 8 != 0 => self.answer_last(op, ops),
            2 => self.backend_reply(ops),
            3 => self.icmp_error(ops),
            4 => {
                let port = ops.byte() & 1;
                let len = usize::from(ops.byte());
                let frame = ops.take(len).to_vec();
                self.send(port, &frame)
            }
            5 => {
                let ms = u64::from(ops.u16()) * u64::from(ops.byte().max(1)) * 10;
                self.clock.advance_ms(ms);
                self.poll_and_drain()
            }
            6 => {
                let mask = ops.byte() & 7;
                if let Ok(snapshot) = self.builder.build(&spec(mask)) {
                    self.publisher.publish(snapshot);
                }
                self.poll_and_drain()
            }
            _ => {
                let frame = if ops.byte() & 1 == 0 {
                    build::arp_request(ROUTER_MAC, client(0), NODE)
                } else {
                    let b = ops.byte() % 3;
                    build::arp_reply(backend_mac(b), backend_ip(b), IN_MAC, SNAT)
                };
                self.send(
                    if frame.len() > 14 && frame[21] == 1 {
                        OUTSIDE
                    } else {
                        INSIDE
                    },
                    &frame,
                )
            }
        }
    }

    /// A client's TCP segment to a service (op 0).
    fn client_segment(&mut self, op: u8, ops: &mut Operands<'_>) -> u64 {
        let (sport, flags, seq, ack) = (ops.byte() & 15, ops.byte(), ops.u32(), ops.u32());
        let to = ops.byte();
        let marks = Marks::from_byte(if op & 8 != 0 { ops.byte() } else { 0 });
        let port = TCP_PORTS[usize::from(to >> 2 & 7)];
        let (src, dst): (IpAddr, (IpAddr, u16)) = if to & 2 != 0 {
            (client6(sport).into(), (VIP6.into(), port))
        } else if to & 1 != 0 && port == 80 {
            (client(sport).into(), (NODE.into(), NODE_PORT))
        } else {
            (client(sport).into(), (VIP.into(), port))
        };
        let ts = (to & 0x40 != 0).then(|| (seq.rotate_left(7), ack));
        let mut opts = options(to & 0x20 != 0, ts);
        marks.add_sack(&mut opts, flags, ack);
        let mut frame = tcp_frame(
            (ROUTER_MAC, OUT_MAC),
            ((src, 1_000 + u16::from(sport)), dst),
            (flags, seq, ack),
            &opts,
            ops.take(usize::from(op >> 4)),
        );
        marks.set_ecn(&mut frame);
        self.send(OUTSIDE, &frame)
    }

    /// A backend's TCP segment (or UDP datagram) on a live flow (op 2).
    fn backend_reply(&mut self, ops: &mut Operands<'_>) -> u64 {
        let (pick, flags, seq, ack) = (ops.byte(), ops.byte(), ops.u32(), ops.u32());
        let reply = if pick & 0x80 != 0 {
            self.live_reply6(pick).map(|r| {
                let ends = ((r.src_ip.into(), r.src_port), (r.dst_ip.into(), r.dst_port));
                (r.proto, ends)
            })
        } else {
            self.live_reply(pick).map(|r| {
                let ends = ((r.src_ip.into(), r.src_port), (r.dst_ip.into(), r.dst_port));
                (r.proto, ends)
            })
        };
        let Some((proto, (src, dst))) = reply else {
            return 0;
        };
        let mac = backend_mac_of(src.0);
        let frame = match (proto, src.0, dst.0) {
            (Proto::Tcp, ..) => tcp_frame((mac, IN_MAC), (src, dst), (flags, seq, ack), &[], b""),
            (_, IpAddr::V4(s), IpAddr::V4(d)) => {
                build::eth_ipv4_udp(mac, IN_MAC, s, src.1, d, dst.1, b"a")
            }
            _ => return 0,
        };
        self.send(INSIDE, &frame)
    }

    /// The peer's answer to the last TCP segment the gateway sent to a
    /// client or a backend (op 2 with bit 3).
    fn answer_last(&mut self, op: u8, ops: &mut Operands<'_>) -> u64 {
        let (which, flags) = (ops.byte(), ops.byte());
        let (dseq, dack) = (ops.byte() as i8, ops.byte() as i8);
        let marks = Marks::from_byte(if op & 0x10 != 0 { ops.byte() } else { 0 });
        let payload = ops.take(usize::from(which >> 2 & 7));
        let port = if which & 1 == 0 { OUTSIDE } else { INSIDE };
        let Some(last) = self.last_sent[usize::from(port)][usize::from(which >> 1 & 1)] else {
            return 0;
        };
        let frame = last.answer((flags, dseq, dack), marks, payload);
        self.send(port, &frame)
    }

    /// An ICMP error from a backend about a packet of a live flow (as the
    /// gateway sent it), maybe truncated (op 3).
    fn icmp_error(&mut self, ops: &mut Operands<'_>) -> u64 {
        let (pick, icmp_type, cut) = (ops.byte(), ops.byte(), ops.byte());
        if pick & 0x80 != 0 {
            let Some(r) = self.live_reply6(pick) else {
                return 0;
            };
            let mut l4 = [0u8; 20];
            l4[..2].copy_from_slice(&r.dst_port.to_be_bytes());
            l4[2..4].copy_from_slice(&r.src_port.to_be_bytes());
            let inner = build::ipv6_packet(r.dst_ip, r.src_ip, 6, 63, &l4);
            let keep = inner.len().saturating_sub(usize::from(cut % 24));
            let frame = build::eth_ipv6_icmpv6(
                (backend_mac_of(r.src_ip.into()), IN_MAC),
                (r.src_ip, r.dst_ip),
                (1 + icmp_type % 4, icmp_type >> 4, 1280),
                inner.get(..keep).unwrap_or_default(),
            );
            return self.send(INSIDE, &frame);
        }
        let Some(reply) = self.live_reply(pick) else {
            return 0;
        };
        let inner = build::ipv4_udp(
            reply.dst_ip,
            reply.dst_port,
            reply.src_ip,
            reply.src_port,
            b"x",
        );
        let keep = inner.len().saturating_sub(usize::from(cut % 24));
        let types = [3, 11, 12, 5];
        let frame = build::eth_ipv4_icmp_error(
            backend_mac_of(reply.src_ip.into()),
            IN_MAC,
            reply.src_ip,
            reply.dst_ip,
            types[usize::from(icmp_type % 4)],
            icmp_type >> 4,
            inner.get(..keep).unwrap_or_default(),
        );
        self.send(INSIDE, &frame)
    }

    /// The reply key of the `pick`-th live flow (in slot order), if any.
    fn live_reply(&self, pick: u8) -> Option<FlowKey> {
        let ct = self.worker.pipeline().conntrack();
        let live = ct.len();
        if live == 0 {
            return None;
        }
        ct.iter()
            .nth(usize::from(pick) % live)
            .map(|(_, f)| *f.reply())
    }

    /// The reply key of the `pick`-th live IPv6 flow, if any.
    fn live_reply6(&self, pick: u8) -> Option<FlowKeyOf<Ipv6Addr>> {
        let ct = &self.worker.pipeline().ipv6()?.ct;
        let live = ct.len();
        if live == 0 {
            return None;
        }
        ct.iter()
            .nth(usize::from(pick & 0x7f) % live)
            .map(|(_, f)| *f.reply())
    }

    /// Inject `frame`, poll, and check the frame's verdict against the
    /// counters.
    fn send(&mut self, port: u8, frame: &[u8]) -> u64 {
        // A frame the mem driver cannot take (too long) is not a packet.
        if self.worker.driver_mut().inject(port, frame).is_err() {
            return 0;
        }
        let before = self.worker.pipeline().counters().clone();
        let sent = self.poll_and_drain();
        let p = self.worker.pipeline();
        let verdict = p.metas().first().map(|m| m.verdict);
        let outcome = match verdict {
            Some(v) => check::frame_counters(&before, p.counters(), v),
            None => Err("an injected frame was not processed".into()),
        };
        if let Err(what) = outcome
            && self.broken.is_none()
        {
            self.broken = Some(what);
        }
        sent
    }

    /// Poll once and take every frame sent, remembering the first that is
    /// malformed (reported by the next check) and the last TCP segment per
    /// port and family.
    fn poll_and_drain(&mut self) -> u64 {
        self.worker.poll();
        let mut sent = 0;
        for p in [OUTSIDE, INSIDE] {
            for f in self.worker.driver_mut().take_tx(p) {
                sent += 1;
                if self.broken.is_none() {
                    self.broken = check::malformed_output(&f);
                }
                if let Some(seg) = Sent::read(&f) {
                    self.last_sent[usize::from(p)][usize::from(seg.src.0.is_ipv6())] = Some(seg);
                }
            }
        }
        sent
    }

    fn check(&mut self, step: usize) -> Result<(), Violation> {
        let fail = |what: String| Err(Violation { step, what });
        if let Some(what) = self.broken.take() {
            return fail(what);
        }
        let p = self.worker.pipeline();
        let in_use = p.snat().stats().in_use;
        if let Err(what) = check::table(p.conntrack(), in_use) {
            return fail(what);
        }
        if let Some(v6) = p.ipv6() {
            let in_use = v6.snat.as_ref().map_or(0, |s| s.stats().in_use);
            if let Err(what) = check::table(&v6.ct, in_use) {
                return fail(format!("IPv6: {what}"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
