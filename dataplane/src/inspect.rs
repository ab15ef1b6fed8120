//! Reading a worker's own tables from another thread (`portico flows`,
//! `portico simulate --live`) without locks or shared state on the packet
//! path.
//!
//! Each worker owns one [`InspectServer`]; the admin thread holds the
//! matching [`InspectClient`]. Between them are two wait-free SPSC rings
//! ([`rtrb`]): requests towards the worker, responses back.
//!
//! ```text
//!  admin thread                                 worker (once per poll loop)
//!  InspectClient --- Request{seq, Flows{cursor, filter, buf}} ---> InspectServer
//!                <-- Response{seq, Flows{buf, next_cursor}} -----
//! ```
//!
//! Invariants:
//! * **Nothing per packet.** The worker looks at its request ring once per
//!   poll loop ([`InspectServer::serve`], one atomic load when idle), never
//!   per packet, and nothing it shares with the admin thread is touched by
//!   the pipeline.
//! * **Both families.** A listing walks the IPv4 table, then the IPv6
//!   table when the worker has one ([`Tables::v6`]): the cursor numbers the
//!   IPv4 slab's slots first, then the IPv6 slab's after them. Entries
//!   carry their keys as [`IpAddr`]s; a lookup names its family
//!   ([`Query::Lookup`], [`Query::Lookup6`]).
//! * **Bounded work per poll.** A flow listing walks the conntrack slab at
//!   most [`SCAN_SLOTS_PER_POLL`] slots per poll loop, copying matching flows
//!   into the buffer the request brought (allocated by the admin thread,
//!   filled up to its capacity: the worker never allocates). It answers when
//!   the buffer is full or the walk reached the end of the slab; the client
//!   asks again from `next_cursor`. A listing is therefore consistent per
//!   flow (each record is copied whole, at one instant) but not a snapshot
//!   of the table: flows created or removed during the walk may or may not
//!   appear, as with `conntrack -L`.
//! * **The worker never waits.** A full response ring (a client that went
//!   away) keeps the answer until the ring has room; a client that timed out
//!   discards answers with an old sequence number.

use crate::conntrack::affinity::AffinityTable;
use crate::conntrack::{Conntrack, Dir, Flow, FlowState};
use crate::flow::{FlowKey, FlowKey6, FlowKeyOf, IpFamily};
use crate::packet::WorkerId;
use crate::snapshot::{BackendId, ServiceId};
use rtrb::{Consumer, Producer, RingBuffer};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

/// Conntrack slots a worker examines per poll loop for a flow listing.
pub const SCAN_SLOTS_PER_POLL: usize = 256;
/// Entries per listing chunk a client asks for by default.
pub const DEFAULT_CHUNK_FLOWS: usize = 512;

/// Which flows a listing wants.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowFilter {
    /// Only flows of this service id.
    pub service: Option<ServiceId>,
    /// Only flows whose backend is this address (the reply key's source);
    /// an IPv6 backend matches IPv6 flows only, and an IPv4 one IPv4 flows.
    pub backend: Option<SocketAddr>,
}

impl FlowFilter {
    #[inline]
    fn matches<A: IpFamily>(&self, flow: &Flow<A>) -> bool {
        self.service.is_none_or(|s| flow.service == s)
            && self.backend.is_none_or(|b| {
                flow.reply().src_ip.to_ip() == b.ip() && flow.reply().src_port == b.port()
            })
    }
}

/// A key of either family, with its addresses as [`IpAddr`]s.
pub fn any_key<A: IpFamily>(k: &FlowKeyOf<A>) -> FlowKeyOf<IpAddr> {
    FlowKeyOf {
        src_ip: k.src_ip.to_ip(),
        dst_ip: k.dst_ip.to_ip(),
        src_port: k.src_port,
        dst_port: k.dst_port,
        proto: k.proto,
    }
}

/// The tables a worker serves queries from: its IPv4 conntrack and
/// affinity table, and the IPv6 ones once it has them.
#[derive(Clone, Copy, Debug)]
pub struct Tables<'a> {
    pub ct: &'a Conntrack,
    pub affinity: &'a AffinityTable,
    pub v6: Option<(&'a Conntrack<Ipv6Addr>, &'a AffinityTable<Ipv6Addr>)>,
}

/// One conntrack entry as a listing shows it, copied at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowEntry {
    pub worker: WorkerId,
    /// Client -> service address, as the client sent it (either family).
    pub orig: FlowKeyOf<IpAddr>,
    /// Backend -> SNAT address (or client), as the backend sends it.
    pub reply: FlowKeyOf<IpAddr>,
    pub state: FlowState,
    pub service: ServiceId,
    pub backend: BackendId,
    /// Since the insert (whole seconds of the dataplane clock).
    pub age_s: u64,
    /// Until the flow expires unless a packet refreshes it.
    pub expires_in_ms: u64,
    /// A reply-direction packet was seen (conntrack's ASSURED/seen-reply).
    pub replied: bool,
    /// Replies come back to a gateway SNAT address.
    pub snat: bool,
}

impl FlowEntry {
    /// The entry of `flow` on `worker` at `now_ms`.
    pub fn of<A: IpFamily>(flow: &Flow<A>, worker: WorkerId, now_ms: u64) -> Self {
        FlowEntry {
            worker,
            orig: any_key(flow.orig()),
            reply: any_key(flow.reply()),
            state: flow.state(),
            service: flow.service,
            backend: flow.backend,
            age_s: (now_ms / 1000).saturating_sub(u64::from(flow.created_s)),
            expires_in_ms: flow.expires_ms.saturating_sub(now_ms),
            replied: flow.replied(),
            snat: flow.snat(),
        }
    }
}

/// What the admin thread asks a worker.
#[derive(Debug)]
pub enum Query {
    /// Live flows matching `filter` from slot `cursor` on (IPv4 slots,
    /// then IPv6 slots: see the module docs), into `buf` (up to its
    /// capacity; it should arrive empty).
    Flows {
        cursor: u32,
        filter: FlowFilter,
        buf: Vec<FlowEntry>,
    },
    /// The live flow with this key (either direction), and the ClientIP
    /// affinity pin of `(service, client)` if asked for.
    Lookup {
        key: FlowKey,
        affinity: Option<(ServiceId, Ipv4Addr)>,
    },
    /// [`Query::Lookup`] in the IPv6 tables (no flow when the worker has
    /// none yet).
    Lookup6 {
        key: FlowKey6,
        affinity: Option<(ServiceId, Ipv6Addr)>,
    },
    /// Test hook (`portico run` with `PORTICO_TEST_HOOKS=1` only): the
    /// worker answers, then stops polling for `ms` (at most
    /// [`MAX_STALL_MS`]), as a worker stuck in a driver call would. The
    /// BGP watchdog's end-to-end test uses it.
    Stall { ms: u64 },
}

/// The longest [`Query::Stall`].
pub const MAX_STALL_MS: u64 = 60_000;

/// A worker's answer.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    Flows {
        buf: Vec<FlowEntry>,
        /// Where the next chunk starts; `None` when the walk is complete.
        next_cursor: Option<u32>,
    },
    Lookup {
        /// The live, unexpired flow with the key, and which of its keys it is.
        flow: Option<(FlowEntry, Dir)>,
        /// The backend the client is pinned to, if a live pin exists.
        affinity: Option<BackendId>,
    },
    /// The worker is about to stall for this long.
    Stalling { ms: u64 },
}

#[derive(Debug)]
struct Envelope<T> {
    seq: u64,
    body: T,
}

/// Why a query got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InspectError {
    #[error("worker {worker} is busy with an earlier query")]
    Busy { worker: WorkerId },
    #[error("worker {worker} did not answer within {timeout_ms} ms")]
    Timeout { worker: WorkerId, timeout_ms: u64 },
    #[error("worker {worker} has stopped")]
    Gone { worker: WorkerId },
}

/// The admin thread's end of one worker's mailbox.
#[derive(Debug)]
pub struct InspectClient {
    worker: WorkerId,
    requests: Producer<Envelope<Query>>,
    answers: Consumer<Envelope<Answer>>,
    seq: u64,
}

/// The worker's end of its mailbox; see the module docs.
#[derive(Debug)]
pub struct InspectServer {
    worker: WorkerId,
    requests: Consumer<Envelope<Query>>,
    answers: Producer<Envelope<Answer>>,
    /// A listing in progress: its sequence number, filter, next slot, buffer.
    listing: Option<Listing>,
    /// An answer the full ring did not take yet.
    unsent: Option<Envelope<Answer>>,
}

#[derive(Debug)]
struct Listing {
    seq: u64,
    filter: FlowFilter,
    cursor: usize,
    buf: Vec<FlowEntry>,
}

/// A mailbox for `worker`: the client for the admin thread, the server for
/// the worker.
pub fn mailbox(worker: WorkerId) -> (InspectClient, InspectServer) {
    let (req_tx, req_rx) = RingBuffer::new(2);
    let (ans_tx, ans_rx) = RingBuffer::new(2);
    (
        InspectClient {
            worker,
            requests: req_tx,
            answers: ans_rx,
            seq: 0,
        },
        InspectServer {
            worker,
            requests: req_rx,
            answers: ans_tx,
            listing: None,
            unsent: None,
        },
    )
}

impl InspectClient {
    pub fn worker(&self) -> WorkerId {
        self.worker
    }

    /// Send `query` and wait up to `timeout` for its answer (polling every
    /// few hundred microseconds; the worker answers within a few poll
    /// loops). Answers to earlier, timed-out queries are discarded.
    pub fn ask(&mut self, query: Query, timeout: Duration) -> Result<Answer, InspectError> {
        let worker = self.worker;
        while self.answers.pop().is_ok() {}
        if self.requests.is_abandoned() {
            return Err(InspectError::Gone { worker });
        }
        self.seq += 1;
        let seq = self.seq;
        self.requests
            .push(Envelope { seq, body: query })
            .map_err(|_| InspectError::Busy { worker })?;
        let deadline = Instant::now() + timeout;
        loop {
            match self.answers.pop() {
                Ok(a) if a.seq == seq => return Ok(a.body),
                Ok(_) => continue,
                Err(_) if self.answers.is_abandoned() => {
                    return Err(InspectError::Gone { worker });
                }
                Err(_) => {}
            }
            if Instant::now() >= deadline {
                return Err(InspectError::Timeout {
                    worker,
                    timeout_ms: timeout.as_millis() as u64,
                });
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

impl InspectServer {
    /// Once per poll loop: answer a pending query, or advance a listing by
    /// at most [`SCAN_SLOTS_PER_POLL`] slots. Returns the slots examined
    /// (non-zero while a listing is in progress, so an adaptive worker keeps
    /// polling until it is done).
    pub fn serve(&mut self, tables: Tables<'_>, now_ms: u64) -> usize {
        if let Some(a) = self.unsent.take()
            && let Err(rtrb::PushError::Full(a)) = self.answers.push(a)
        {
            self.unsent = Some(a);
            return 0;
        }
        if let Some(listing) = self.listing.as_mut() {
            let cap4 = tables.ct.capacity();
            let end = cap4 + tables.v6.map_or(0, |(ct6, _)| ct6.capacity());
            let start = listing.cursor;
            let (next, full) = match tables.v6 {
                Some((ct6, _)) if start >= cap4 => {
                    let (next, full) = listing.scan(ct6, start - cap4, self.worker, now_ms);
                    (next + cap4, full)
                }
                _ => {
                    let (next, full) = listing.scan(tables.ct, start, self.worker, now_ms);
                    (next.min(cap4), full)
                }
            };
            let done = next >= end;
            if done || full {
                if let Some(l) = self.listing.take() {
                    self.send(Envelope {
                        seq: l.seq,
                        body: Answer::Flows {
                            buf: l.buf,
                            next_cursor: (!done).then_some(next as u32),
                        },
                    });
                }
            } else {
                listing.cursor = next;
            }
            return next.saturating_sub(start).max(1);
        }
        let Ok(request) = self.requests.pop() else {
            return 0;
        };
        match request.body {
            Query::Flows {
                cursor,
                filter,
                mut buf,
            } => {
                buf.clear();
                self.listing = Some(Listing {
                    seq: request.seq,
                    filter,
                    cursor: cursor as usize,
                    buf,
                });
                1
            }
            Query::Lookup { key, affinity: pin } => {
                let flow = find(tables.ct, &key, self.worker, now_ms);
                let affinity = pin
                    .and_then(|(service, client)| tables.affinity.lookup(service, client, now_ms));
                self.send(Envelope {
                    seq: request.seq,
                    body: Answer::Lookup { flow, affinity },
                });
                1
            }
            Query::Lookup6 { key, affinity: pin } => {
                let (flow, affinity) = match tables.v6 {
                    Some((ct6, affinity6)) => (
                        find(ct6, &key, self.worker, now_ms),
                        pin.and_then(|(service, client)| affinity6.lookup(service, client, now_ms)),
                    ),
                    None => (None, None),
                };
                self.send(Envelope {
                    seq: request.seq,
                    body: Answer::Lookup { flow, affinity },
                });
                1
            }
            Query::Stall { ms } => {
                let ms = ms.min(MAX_STALL_MS);
                self.send(Envelope {
                    seq: request.seq,
                    body: Answer::Stalling { ms },
                });
                std::thread::sleep(Duration::from_millis(ms));
                1
            }
        }
    }

    fn send(&mut self, answer: Envelope<Answer>) {
        if let Err(rtrb::PushError::Full(a)) = self.answers.push(answer) {
            self.unsent = Some(a);
        }
    }
}

impl<'a> Tables<'a> {
    /// A worker without IPv6 tables.
    pub fn v4(ct: &'a Conntrack, affinity: &'a AffinityTable) -> Self {
        Tables {
            ct,
            affinity,
            v6: None,
        }
    }
}

/// The live, unexpired flow with `key` in `ct`, and which of its keys it is.
fn find<A: IpFamily>(
    ct: &Conntrack<A>,
    key: &FlowKeyOf<A>,
    worker: WorkerId,
    now_ms: u64,
) -> Option<(FlowEntry, Dir)> {
    ct.lookup(key, ct.hash(key))
        .map(|(id, dir)| (ct.flow(id), dir))
        .filter(|(f, _)| f.is_live() && !f.is_expired(now_ms))
        .map(|(f, dir)| (FlowEntry::of(f, worker, now_ms), dir))
}

impl Listing {
    /// Copy the matching flows of at most [`SCAN_SLOTS_PER_POLL`] slots of
    /// `ct` from `start` into the buffer: the slot to go on from, and
    /// whether the buffer is full.
    fn scan<A: IpFamily>(
        &mut self,
        ct: &Conntrack<A>,
        start: usize,
        worker: WorkerId,
        now_ms: u64,
    ) -> (usize, bool) {
        let mut next = start.saturating_add(SCAN_SLOTS_PER_POLL);
        for (id, flow) in ct.live_in(start, SCAN_SLOTS_PER_POLL) {
            if !self.filter.matches(flow) || flow.is_expired(now_ms) {
                continue;
            }
            if self.buf.len() >= self.buf.capacity() {
                next = id.index();
                break;
            }
            self.buf.push(FlowEntry::of(flow, worker, now_ms));
        }
        (next, self.buf.len() >= self.buf.capacity())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conntrack::{ConntrackConfig, FlowInit};
    use crate::flow::{Proto, TableHasher};

    fn key(i: u32) -> (FlowKey, FlowKey) {
        let client = Ipv4Addr::from(0xc633_6400 + i);
        let orig = FlowKey::new(Proto::Tcp, client, 40000, Ipv4Addr::new(192, 0, 2, 10), 80);
        let reply = FlowKey::new(
            Proto::Tcp,
            Ipv4Addr::new(10, 1, 0, 10 + (i % 3) as u8),
            8080,
            Ipv4Addr::new(10, 1, 0, 1),
            (10000 + i) as u16,
        );
        (orig, reply)
    }

    /// The IPv6 twin of [`key`]: client 2001:db8::c633:6400+i, backend
    /// 2001:db8:1::10+i%3.
    fn key6(i: u32) -> (FlowKey6, FlowKey6) {
        let client = Ipv6Addr::from(0x2001_0db8_0000_0000_0000_0000_c633_6400 + u128::from(i));
        let vip: Ipv6Addr = "2001:db8:ffff::10".parse().expect("vip");
        let backend = Ipv6Addr::from(0x2001_0db8_0001_0000_0000_0000_0000_0010 + u128::from(i % 3));
        let snat: Ipv6Addr = "2001:db8:1::1".parse().expect("snat");
        let orig = FlowKey6::new(Proto::Tcp, client, 40000, vip, 80);
        let reply = FlowKey6::new(Proto::Tcp, backend, 8080, snat, (10000 + i) as u16);
        (orig, reply)
    }

    fn table(n: u32, capacity: u32) -> Conntrack {
        table_of(key, n, capacity)
    }

    fn table_of<A: IpFamily>(
        key: fn(u32) -> (FlowKeyOf<A>, FlowKeyOf<A>),
        n: u32,
        capacity: u32,
    ) -> Conntrack<A> {
        let mut ct = Conntrack::new(
            ConntrackConfig::with_capacity(capacity),
            TableHasher::from_seed(9),
        )
        .expect("table");
        for i in 0..n {
            let (orig, reply) = key(i);
            ct.insert(
                FlowInit {
                    orig,
                    reply,
                    service: i % 2,
                    backend: i % 3,
                    client_mac: [2, 0, 0, 0, 0, 1],
                    client_port: 0,
                    snat: true,
                },
                ct.hash(&orig),
                ct.hash(&reply),
                crate::wire::tcp::flags::SYN,
                5_000,
            )
            .expect("insert");
        }
        ct
    }

    /// Run the server in a thread (as a worker would) until `stop`.
    fn list_all(ct: Conntrack, filter: FlowFilter, chunk: usize) -> Vec<FlowEntry> {
        list_both(ct, None, filter, chunk)
    }

    fn list_both(
        ct: Conntrack,
        ct6: Option<Conntrack<Ipv6Addr>>,
        filter: FlowFilter,
        chunk: usize,
    ) -> Vec<FlowEntry> {
        let (mut client, mut server) = mailbox(3);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let worker = {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let affinity = AffinityTable::new(16, TableHasher::from_seed(9));
                let affinity6 = AffinityTable::new(16, TableHasher::from_seed(9));
                let mut polls = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let tables = Tables {
                        ct: &ct,
                        affinity: &affinity,
                        v6: ct6.as_ref().map(|c| (c, &affinity6)),
                    };
                    server.serve(tables, 7_500);
                    polls += 1;
                    std::thread::yield_now();
                }
                polls
            })
        };
        let mut all = Vec::new();
        let mut cursor = Some(0);
        while let Some(c) = cursor {
            let answer = client
                .ask(
                    Query::Flows {
                        cursor: c,
                        filter,
                        buf: Vec::with_capacity(chunk),
                    },
                    Duration::from_secs(10),
                )
                .expect("answer");
            let Answer::Flows { buf, next_cursor } = answer else {
                panic!("wrong answer");
            };
            assert!(buf.len() <= chunk);
            all.extend(buf);
            cursor = next_cursor;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        worker.join().expect("worker");
        all
    }

    #[test]
    fn a_listing_in_small_chunks_returns_every_matching_flow_once() {
        let ct = table(3000, 4096);
        let all = list_all(ct, FlowFilter::default(), 100);
        assert_eq!(all.len(), 3000);
        let mut keys: Vec<_> = all.iter().map(|e| e.orig.src_ip).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), 3000, "no flow listed twice");
        let e = all.first().expect("one");
        assert_eq!(e.worker, 3);
        assert_eq!(e.age_s, 2, "inserted at 5 s, listed at 7.5 s");
        assert!(e.expires_in_ms > 0 && e.snat && !e.replied);
        assert_eq!(e.state.name(), "SYN_SENT");
    }

    #[test]
    fn filters_by_service_and_backend_address() {
        let ct = table(600, 1024);
        let backend = SocketAddr::new(Ipv4Addr::new(10, 1, 0, 11).into(), 8080);
        let all = list_all(
            ct,
            FlowFilter {
                service: Some(1),
                backend: Some(backend),
            },
            64,
        );
        // i odd and i % 3 == 1: i % 6 == 1.
        assert_eq!(all.len(), 100);
        assert!(
            all.iter()
                .all(|e| e.service == 1 && e.backend == 1 && e.reply.src_ip == backend.ip())
        );
    }

    #[test]
    fn a_listing_walks_the_ipv6_table_after_the_ipv4_one() {
        // Capacities that are not multiples of the scan window: the walk
        // must not skip the first IPv6 slots when it crosses over.
        let all = list_both(
            table(300, 300),
            Some(table_of(key6, 200, 1000)),
            FlowFilter::default(),
            64,
        );
        let v6: Vec<_> = all.iter().filter(|e| e.orig.src_ip.is_ipv6()).collect();
        assert_eq!((all.len(), v6.len()), (500, 200));
        let first_v6 = all.iter().position(|e| e.orig.src_ip.is_ipv6());
        assert_eq!(first_v6, Some(300), "IPv4 flows first, then IPv6");
        let mut clients: Vec<_> = v6.iter().map(|e| e.orig.src_ip).collect();
        clients.sort();
        clients.dedup();
        assert_eq!(clients.len(), 200, "no IPv6 flow listed twice");
        let (orig, reply) = key6(7);
        let e = v6
            .iter()
            .find(|e| e.orig == any_key(&orig))
            .expect("flow 7 listed");
        assert_eq!(e.reply, any_key(&reply));

        // A backend filter of either family finds that family's flows only.
        let backend: SocketAddr = "[2001:db8:1::11]:8080".parse().expect("addr");
        let filter = FlowFilter {
            service: None,
            backend: Some(backend),
        };
        let only = list_both(table(300, 300), Some(table_of(key6, 200, 1000)), filter, 16);
        // i % 3 == 1 of 0..200.
        assert_eq!(only.len(), 67);
        assert!(only.iter().all(|e| e.reply.src_ip == backend.ip()));
    }

    #[test]
    fn an_ipv6_lookup_finds_the_ipv6_flow_and_pin() {
        let ct = table(1, 64);
        let ct6 = table_of(key6, 10, 64);
        let affinity = AffinityTable::new(16, TableHasher::from_seed(9));
        let mut affinity6 = AffinityTable::new(16, TableHasher::from_seed(9));
        let (orig, reply) = key6(4);
        affinity6.upsert(1, orig.src_ip, 2, 60_000, 5_000);
        let (mut client, mut server) = mailbox(0);
        let asker = std::thread::spawn(move || {
            let a = client.ask(
                Query::Lookup6 {
                    key: reply,
                    affinity: Some((1, orig.src_ip)),
                },
                Duration::from_secs(10),
            );
            (client, a)
        });
        while !asker.is_finished() {
            let tables = Tables {
                ct: &ct,
                affinity: &affinity,
                v6: Some((&ct6, &affinity6)),
            };
            server.serve(tables, 6_000);
            std::thread::yield_now();
        }
        let (mut client, answer) = asker.join().expect("asker");
        let Ok(Answer::Lookup {
            flow,
            affinity: pin,
        }) = answer
        else {
            panic!("{answer:?}");
        };
        let (entry, dir) = flow.expect("found");
        assert_eq!((dir, entry.orig), (Dir::Reply, any_key(&orig)));
        assert_eq!(pin, Some(2));
        // A worker without IPv6 tables knows no IPv6 flow.
        let asker = std::thread::spawn(move || {
            client.ask(
                Query::Lookup6 {
                    key: orig,
                    affinity: None,
                },
                Duration::from_secs(10),
            )
        });
        while !asker.is_finished() {
            server.serve(Tables::v4(&ct, &affinity), 6_000);
            std::thread::yield_now();
        }
        let answer = asker.join().expect("asker");
        assert!(matches!(
            answer,
            Ok(Answer::Lookup {
                flow: None,
                affinity: None
            })
        ));
    }

    #[test]
    fn lookups_find_either_direction_and_answer_in_one_poll() {
        let ct = table(10, 64);
        let affinity = AffinityTable::new(16, TableHasher::from_seed(9));
        let (mut client, mut server) = mailbox(0);
        let (orig, reply) = key(4);
        for (k, want) in [(orig, Some(Dir::Original)), (reply, Some(Dir::Reply))] {
            let (tx, rx) = std::sync::mpsc::channel();
            let asker = std::thread::spawn(move || {
                let a = client.ask(
                    Query::Lookup {
                        key: k,
                        affinity: None,
                    },
                    Duration::from_secs(10),
                );
                tx.send(()).expect("send");
                (client, a)
            });
            while rx.try_recv().is_err() {
                server.serve(Tables::v4(&ct, &affinity), 6_000);
                std::thread::yield_now();
            }
            let (c, answer) = asker.join().expect("asker");
            client = c;
            let Ok(Answer::Lookup { flow, affinity }) = answer else {
                panic!("{answer:?}");
            };
            assert_eq!(flow.map(|(_, d)| d), want);
            assert_eq!(flow.map(|(e, _)| e.orig), Some(any_key(&orig)));
            assert_eq!(affinity, None);
        }
    }

    #[test]
    fn a_worker_that_never_polls_times_out_and_a_stopped_one_is_gone() {
        let (mut client, server) = mailbox(1);
        let err = client
            .ask(
                Query::Lookup {
                    key: key(0).0,
                    affinity: None,
                },
                Duration::from_millis(20),
            )
            .unwrap_err();
        assert_eq!(
            err,
            InspectError::Timeout {
                worker: 1,
                timeout_ms: 20
            }
        );
        drop(server);
        let err = client
            .ask(
                Query::Lookup {
                    key: key(0).0,
                    affinity: None,
                },
                Duration::from_millis(20),
            )
            .unwrap_err();
        assert_eq!(err, InspectError::Gone { worker: 1 });
    }

    #[test]
    fn a_stall_answers_first_then_blocks_the_serving_thread() {
        let (mut client, mut server) = mailbox(1);
        let ct = table(0, 64);
        let worker = std::thread::spawn(move || {
            let affinity = AffinityTable::new(16, TableHasher::from_seed(9));
            // Serve until the stall query has been answered and slept.
            loop {
                let start = Instant::now();
                if server.serve(Tables::v4(&ct, &affinity), 0) > 0 {
                    return start.elapsed();
                }
                std::thread::yield_now();
            }
        });
        let answer = client
            .ask(Query::Stall { ms: 300 }, Duration::from_secs(10))
            .expect("answered before the stall");
        assert_eq!(answer, Answer::Stalling { ms: 300 });
        let served_in = worker.join().expect("worker");
        assert!(served_in >= Duration::from_millis(300), "{served_in:?}");
        // Capped.
        let (mut client, mut server) = mailbox(2);
        let ct = table(0, 64);
        let t = std::thread::spawn(move || {
            let affinity = AffinityTable::new(16, TableHasher::from_seed(9));
            while server.serve(Tables::v4(&ct, &affinity), 0) == 0 {
                std::thread::yield_now();
            }
        });
        // Asking for more than the cap is answered with the cap (the worker
        // then sleeps MAX_STALL_MS; the thread is left to finish alone).
        let answer = client
            .ask(Query::Stall { ms: u64::MAX }, Duration::from_secs(10))
            .expect("answer");
        assert_eq!(answer, Answer::Stalling { ms: MAX_STALL_MS });
        drop(t);
    }
}
