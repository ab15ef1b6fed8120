//! Sockets on the other workers' queues, so the steering program
//! (`steer/`) can deliver a frame to the worker that owns its flow
//! whatever queue it arrived on.
//!
//! The kernel keeps one buffer pool per (device, queue): a UMEM with one
//! fill and one completion ring (`xsk_reg_pool_at_qid` refuses a second,
//! `EBUSY`). So worker `w`'s socket on queue `q != w` cannot bring `w`'s
//! own UMEM; it joins the pool of worker `q`'s socket there
//! (`XDP_SHARED_UMEM` with that socket, same device and queue: an RX ring
//! only, sharing `q`'s fill ring, which only worker `q` fills). A frame it
//! receives lies in a chunk of `q`'s UMEM (a multi-buffer packet, with
//! `XDP_USE_SG`, in a chain of them): worker `w` copies it into a chunk
//! (a chain: a span) of its own UMEM at once (one copy, where a handoff makes two and
//! a ring hop), and gives the chunk back to worker `q` through a
//! single-producer single-consumer [`ReturnRing`], which worker `q` drains
//! into its free list before it tops its fill ring up. No lock and no
//! syscall on the packet path; the only lock is [`QueueSockets`]'s, taken
//! when a driver opens and once more when it connects.
//!
//! Wiring: every worker's driver publishes its socket on its own queue
//! (a duplicate of the fd, the UMEM mapping and one return ring per other
//! worker) when it opens, and the publishing thread opens the sockets
//! between it and every worker published before (theirs on its queue, its
//! own on theirs), each into the XSK map at [`XskMap::slot`]`(q, w)`: all
//! of them while the gateway still has its start-up privileges (it opens
//! the drivers one after the other and drops them after; `AF_XDP` sockets
//! need `CAP_NET_RAW`). A driver takes the sockets opened for it when it
//! opens and, for the ones later workers opened, on its first `rx_burst`
//! once every queue is published (cold: moving them over; the workers poll
//! only after all opened). A bind the kernel
//! refuses leaves the slot empty: the program falls back to the queue's
//! own worker, which hands the frame off as before; counted
//! (`queue_socket_failures`) and logged by the gateway.
//!
//! Invariants: a [`ReturnRing`] has one producer (worker `w`) and one
//! consumer (worker `q`), and room for every chunk of `q`'s UMEM, so a
//! push never finds it full; a chunk address travels through it exactly
//! once per buffer received on `w`'s socket on `q`.

use super::port::XdpPort;
use super::ring::Ring;
use super::socket::open_rx_socket;
use super::sys::{self, SharedRegion};
use super::umem::{Umem, XdpFrame};
use super::{AfXdpError, MAX_CHAIN_DESCS, XskMap};
use crate::driver::Frame;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Chunk addresses from one worker back to the UMEM owner (see the module
/// docs): a lock-free SPSC ring.
#[derive(Debug)]
pub struct ReturnRing {
    slots: Box<[AtomicU64]>,
    mask: usize,
    /// Next slot the consumer reads.
    head: AtomicUsize,
    /// Next slot the producer writes.
    tail: AtomicUsize,
}

impl ReturnRing {
    /// Room for at least `capacity` addresses.
    pub fn new(capacity: usize) -> Self {
        let n = capacity.max(2).next_power_of_two();
        ReturnRing {
            slots: (0..n).map(|_| AtomicU64::new(0)).collect(),
            mask: n - 1,
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
        }
    }

    /// Producer: append `addr`; false when full (never, by the invariant).
    #[inline]
    pub fn push(&self, addr: u64) -> bool {
        let tail = self.tail.load(Ordering::Relaxed);
        if tail.wrapping_sub(self.head.load(Ordering::Acquire)) > self.mask {
            return false;
        }
        if let Some(s) = self.slots.get(tail & self.mask) {
            s.store(addr, Ordering::Relaxed);
        }
        self.tail.store(tail.wrapping_add(1), Ordering::Release);
        true
    }

    /// Consumer: take everything queued, oldest first.
    #[inline]
    pub fn drain(&self, mut f: impl FnMut(u64)) {
        let head = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Acquire);
        let mut at = head;
        while at != tail {
            if let Some(s) = self.slots.get(at & self.mask) {
                f(s.load(Ordering::Relaxed));
            }
            at = at.wrapping_add(1);
        }
        self.head.store(tail, Ordering::Release);
    }
}

/// What a worker publishes about its socket on its own queue.
#[derive(Debug)]
struct Published {
    /// A duplicate of the socket's fd (the pool to join).
    fd: OwnedFd,
    umem: Arc<SharedRegion>,
    frame_size: u32,
    /// Index: the worker that returns through it.
    returns: Vec<Arc<ReturnRing>>,
}

/// The sockets of one port's queues, shared by its workers' drivers (the
/// gateway makes one per port).
#[derive(Debug)]
pub struct QueueSockets {
    queues: u32,
    workers: u32,
    state: Mutex<State>,
    count: AtomicU32,
}

/// What the drivers exchange, by queue (= worker).
#[derive(Debug, Default)]
struct State {
    published: Vec<Option<Published>>,
    /// Sockets opened for a worker on other queues, not taken yet.
    joined: Vec<Vec<RemoteSocket>>,
    /// Why the kernel refused some of them.
    refused: Vec<Vec<AfXdpError>>,
}

/// The interface a [`QueueSockets`] joins queues of.
pub(super) struct Port<'a> {
    pub(super) ifname: &'a str,
    pub(super) ifindex: u32,
    pub(super) rings: &'a super::XdpRingConfig,
    pub(super) map: &'a XskMap,
}

impl QueueSockets {
    /// For a port of `queues` RX queues served by `workers` workers (one
    /// per queue: worker `w` owns queue `w`).
    pub fn new(queues: u32, workers: u32) -> Self {
        let n = queues as usize;
        QueueSockets {
            queues,
            workers,
            state: Mutex::new(State {
                published: (0..n).map(|_| None).collect(),
                joined: (0..n).map(|_| Vec::new()).collect(),
                refused: (0..n).map(|_| Vec::new()).collect(),
            }),
            count: AtomicU32::new(0),
        }
    }

    /// Whether the layout has other queues to join at all.
    pub fn spans_queues(&self) -> bool {
        self.queues > 1 && self.workers == self.queues
    }

    /// Publish worker `queue`'s socket `fd` on its own queue, its UMEM and
    /// `frame_size`, and open the sockets between it and every worker
    /// published before: theirs on this queue, its own on theirs (so every
    /// socket is opened while the opening thread still has the privileges
    /// for it; the gateway opens the drivers one after the other, then
    /// drops them). Returns the rings through which the other workers give
    /// this worker's chunks back (to drain).
    pub(super) fn publish(
        &self,
        queue: u32,
        fd: &OwnedFd,
        umem: &Arc<SharedRegion>,
        frame_size: u32,
        capacity: usize,
        port: &Port<'_>,
    ) -> std::io::Result<Vec<Arc<ReturnRing>>> {
        let returns: Vec<Arc<ReturnRing>> = (0..self.workers)
            .map(|_| Arc::new(ReturnRing::new(capacity)))
            .collect();
        let mine = Published {
            fd: fd.try_clone()?,
            umem: Arc::clone(umem),
            frame_size,
            returns: returns.clone(),
        };
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let state = &mut *guard;
        for (w, other) in state.published.iter().enumerate() {
            let Some(other) = other.as_ref().filter(|_| w as u32 != queue) else {
                continue;
            };
            // Worker `w` on this queue, and this worker on queue `w`.
            for (worker, q, pool) in [(w as u32, queue, &mine), (queue, w as u32, other)] {
                let (joined, refused) = (&mut state.joined, &mut state.refused);
                match join(worker, q, pool, port) {
                    Ok(s) => joined.get_mut(worker as usize).map(|v| v.push(s)),
                    Err(e) => refused.get_mut(worker as usize).map(|v| v.push(e)),
                };
            }
        }
        if let Some(slot) = state.published.get_mut(queue as usize)
            && slot.replace(mine).is_none()
        {
            self.count.fetch_add(1, Ordering::Release);
        }
        Ok(returns)
    }

    /// Whether every queue's worker has published.
    #[inline]
    pub(super) fn complete(&self) -> bool {
        self.count.load(Ordering::Acquire) >= self.queues
    }

    /// The sockets opened for `worker` so far, and the refusals.
    pub(super) fn take(&self, worker: u32) -> (Vec<RemoteSocket>, Vec<AfXdpError>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let sockets = state
            .joined
            .get_mut(worker as usize)
            .map(std::mem::take)
            .unwrap_or_default();
        let errors = state
            .refused
            .get_mut(worker as usize)
            .map(std::mem::take)
            .unwrap_or_default();
        (sockets, errors)
    }
}

/// Open `worker`'s socket on queue `q`, joined to the pool of `pool` (the
/// socket of `q`'s own worker), and put it into its map slot.
fn join(
    worker: u32,
    q: u32,
    pool: &Published,
    port: &Port<'_>,
) -> Result<RemoteSocket, AfXdpError> {
    let ifname = port.ifname;
    let returns = pool
        .returns
        .get(worker as usize)
        .ok_or_else(|| super::invalid(ifname, format!("no worker {worker}")))?;
    let (fd, rx) = open_rx_socket(ifname, port.rings)?;
    sys::bind_xdp(
        fd.as_fd(),
        port.ifindex,
        q,
        libc::XDP_SHARED_UMEM,
        Some(pool.fd.as_fd()),
    )
    .map_err(|source| AfXdpError::Bind {
        ifname: ifname.to_string(),
        queue: q,
        flags: super::socket::flag_names(libc::XDP_SHARED_UMEM),
        source,
    })?;
    let slot = port.map.slot(q, worker);
    port.map
        .insert(slot, fd.as_fd())
        .map_err(|source| AfXdpError::MapInsert {
            ifname: ifname.to_string(),
            source,
        })?;
    Ok(RemoteSocket {
        queue: q,
        umem: Arc::clone(&pool.umem),
        frame_size: u64::from(pool.frame_size.max(1)),
        returns: Arc::clone(returns),
        slot,
        rx,
        fd,
    })
}

/// A worker's socket on another worker's queue (see the module docs).
#[derive(Debug)]
pub(super) struct RemoteSocket {
    pub(super) queue: u32,
    /// The queue owner's UMEM, where this socket's frames arrive.
    pub(super) umem: Arc<SharedRegion>,
    pub(super) frame_size: u64,
    pub(super) returns: Arc<ReturnRing>,
    /// Its XSK map slot (cleared when the driver closes).
    pub(super) slot: u32,
    // Field order is drop order: unmap the ring before closing the socket.
    pub(super) rx: Ring,
    pub(super) fd: OwnedFd,
}

/// Take up to `max` frames from `r` (a socket on another worker's queue)
/// into `out` as copies in `umem`, the UMEM of `p` (the worker's socket on
/// the same port, whose counters they count in), giving each received
/// chunk back to its owner. A multi-buffer packet (`XDP_USE_SG`: a chain
/// of `XDP_PKT_CONTD` descriptors) is copied into a span of `umem` as one
/// frame once its last descriptor is in the ring; one cut by the end of
/// the ready descriptors waits for the next burst, one that cannot end
/// (the ring is full) or breaks the chain rules (`chain.rs`) is dropped as
/// a bad chain. Returns how many were taken.
#[inline]
pub(super) fn rx_copy(
    r: &mut RemoteSocket,
    p: &mut XdpPort,
    umem: &mut Umem,
    out: &mut Vec<XdpFrame>,
    max: usize,
) -> usize {
    let ready = r.rx.available(r.rx.size());
    let mut consumed = 0u32;
    let mut got = 0;
    while consumed < ready && got < max {
        let Some(used) = chain_len(&r.rx, consumed, ready) else {
            if ready == r.rx.size() {
                // A chain that cannot end: drop what the ring holds of it.
                let used = ready - consumed;
                give_back(r, p, consumed, used);
                consumed += used;
                p.stats.rx_bad_chain += 1;
            }
            break;
        };
        if let Some(f) = copy_packet(r, p, umem, consumed, used) {
            p.stats.rx_frames += 1;
            p.stats.rx_bytes += u64::from(f.len);
            p.stats.rx_other_queues += 1;
            if used > 1 {
                p.stats.rx_chains += 1;
            }
            out.push(f);
            got += 1;
        }
        give_back(r, p, consumed, used);
        consumed += used;
    }
    r.rx.release(consumed);
    got
}

/// Descriptors of the packet at consumer position `at` (a single buffer,
/// or a chain up to its last descriptor), or `None` when its end is not
/// among the `ready` ones yet.
fn chain_len(rx: &Ring, at: u32, ready: u32) -> Option<u32> {
    let mut used = 0;
    while at + used < ready {
        let d = rx.peek_desc(at + used)?;
        used += 1;
        if !d.continues() {
            return Some(used);
        }
    }
    None
}

/// The packet of `used` descriptors at `at` as a copy in `umem` (a chunk,
/// or a span for a chain), or `None` (counted) when it is too big, a bad
/// chain or no chunk is free.
fn copy_packet(
    r: &RemoteSocket,
    p: &mut XdpPort,
    umem: &mut Umem,
    at: u32,
    used: u32,
) -> Option<XdpFrame> {
    let mut total = 0u64;
    let mut bad = used > MAX_CHAIN_DESCS;
    for i in 0..used {
        let d = r.rx.peek_desc(at + i)?;
        let end = d.addr.saturating_add(u64::from(d.len));
        // A buffer lies in one chunk of the owner's UMEM.
        bad |= (d.len == 0 && used > 1)
            || end > r.umem.len() as u64
            || (end.max(1) - 1) / r.frame_size != d.addr / r.frame_size;
        total += u64::from(d.len);
    }
    if bad {
        if used > 1 {
            p.stats.rx_bad_chain += 1;
        } else {
            p.stats.rx_ring_errors += 1;
        }
        return None;
    }
    if total > u64::from(p.max_frame) {
        p.stats.rx_too_big += 1;
        return None;
    }
    let Some(mut f) = umem.frame_of_len(p.umem, total as usize) else {
        p.stats.rx_pool_empty += 1;
        return None;
    };
    let mut off = 0usize;
    for i in 0..used {
        let d = r.rx.peek_desc(at + i)?;
        let len = d.len as usize;
        if let Some(dst) = f.data_mut().get_mut(off..off + len) {
            sys::copy_from_umem(&r.umem, d.addr as usize, dst);
        }
        off += len;
    }
    Some(f)
}

/// Hand the chunks of `used` descriptors at `at` back to the queue's
/// worker.
fn give_back(r: &RemoteSocket, p: &mut XdpPort, at: u32, used: u32) {
    for i in 0..used {
        let Some(d) = r.rx.peek_desc(at + i) else {
            continue;
        };
        // Aligned mode: the chunk's base is the address rounded down.
        if !r.returns.push(d.addr - d.addr % r.frame_size) {
            p.stats.rx_ring_errors += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_return_ring_hands_addresses_over_in_order_across_threads() {
        let ring = Arc::new(ReturnRing::new(64));
        let producer = Arc::clone(&ring);
        let sender = std::thread::spawn(move || {
            for a in 0..100_000u64 {
                while !producer.push(a) {
                    std::hint::spin_loop();
                }
            }
        });
        let mut next = 0u64;
        while next < 100_000 {
            ring.drain(|a| {
                assert_eq!(a, next);
                next += 1;
            });
        }
        sender.join().expect("producer");
    }

    #[test]
    fn a_full_return_ring_refuses_rather_than_overwrites() {
        let ring = ReturnRing::new(4);
        assert!((0..4).all(|a| ring.push(a)));
        assert!(!ring.push(9));
        let mut got = Vec::new();
        ring.drain(|a| got.push(a));
        assert_eq!(got, [0, 1, 2, 3]);
        assert!(ring.push(9));
    }
}
