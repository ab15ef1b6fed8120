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
use crate::flow::FlowKey;
use crate::packet::WorkerId;
use crate::snapshot::{BackendId, ServiceId};
use rtrb::{Consumer, Producer, RingBuffer};
use std::net::{Ipv4Addr, SocketAddrV4};
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
    /// Only flows whose backend is this address (the reply key's source).
    pub backend: Option<SocketAddrV4>,
}

impl FlowFilter {
    #[inline]
    fn matches(&self, flow: &Flow) -> bool {
        self.service.is_none_or(|s| flow.service == s)
            && self
                .backend
                .is_none_or(|b| flow.reply().src_ip == *b.ip() && flow.reply().src_port == b.port())
    }
}

/// One conntrack entry as a listing shows it, copied at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowEntry {
    pub worker: WorkerId,
    /// Client -> service address, as the client sent it.
    pub orig: FlowKey,
    /// Backend -> SNAT address (or client), as the backend sends it.
    pub reply: FlowKey,
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
    pub fn of(flow: &Flow, worker: WorkerId, now_ms: u64) -> Self {
        FlowEntry {
            worker,
            orig: *flow.orig(),
            reply: *flow.reply(),
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
    /// Live flows matching `filter` from slab slot `cursor` on, into `buf`
    /// (up to its capacity; it should arrive empty).
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
    pub fn serve(&mut self, ct: &Conntrack, affinity: &AffinityTable, now_ms: u64) -> usize {
        if let Some(a) = self.unsent.take()
            && let Err(rtrb::PushError::Full(a)) = self.answers.push(a)
        {
            self.unsent = Some(a);
            return 0;
        }
        if let Some(listing) = self.listing.as_mut() {
            let start = listing.cursor;
            let mut next = start.saturating_add(SCAN_SLOTS_PER_POLL);
            for (id, flow) in ct.live_in(start, SCAN_SLOTS_PER_POLL) {
                if !listing.filter.matches(flow) || flow.is_expired(now_ms) {
                    continue;
                }
                if listing.buf.len() >= listing.buf.capacity() {
                    next = id.index();
                    break;
                }
                listing.buf.push(FlowEntry::of(flow, self.worker, now_ms));
            }
            let done = next >= ct.capacity();
            if done || listing.buf.len() >= listing.buf.capacity() {
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
                let flow = ct
                    .lookup(&key, ct.hash(&key))
                    .map(|(id, dir)| (ct.flow(id), dir))
                    .filter(|(f, _)| f.is_live() && !f.is_expired(now_ms))
                    .map(|(f, dir)| (FlowEntry::of(f, self.worker, now_ms), dir));
                let affinity =
                    pin.and_then(|(service, client)| affinity.lookup(service, client, now_ms));
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

    fn table(n: u32, capacity: u32) -> Conntrack {
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
        let (mut client, mut server) = mailbox(3);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let worker = {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let affinity = AffinityTable::new(16, TableHasher::from_seed(9));
                let mut polls = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    server.serve(&ct, &affinity, 7_500);
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
        let backend = SocketAddrV4::new(Ipv4Addr::new(10, 1, 0, 11), 8080);
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
                .all(|e| e.service == 1 && e.backend == 1 && e.reply.src_ip == *backend.ip())
        );
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
                server.serve(&ct, &affinity, 6_000);
                std::thread::yield_now();
            }
            let (c, answer) = asker.join().expect("asker");
            client = c;
            let Ok(Answer::Lookup { flow, affinity }) = answer else {
                panic!("{answer:?}");
            };
            assert_eq!(flow.map(|(_, d)| d), want);
            assert_eq!(flow.map(|(e, _)| e.orig), Some(orig));
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
                if server.serve(&ct, &affinity, 0) > 0 {
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
            while server.serve(&ct, &affinity, 0) == 0 {
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
