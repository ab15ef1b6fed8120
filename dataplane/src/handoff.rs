//! Lock-free frame handoff between workers.
//!
//! A flow is owned by one worker. When a frame arrives on a core that does not
//! own its flow (the driver could not steer it, e.g. a backend's reply whose
//! SNAT port belongs to another core's slice), the worker copies the frame
//! into a single-producer single-consumer channel towards the owner, which
//! processes it in its next poll.
//!
//! Each channel is two wait-free SPSC rings ([`rtrb`], no `unsafe` here):
//!
//! ```text
//!            full ring: HandoffFrame { port, len, buf }
//! HandoffTx ------------------------------------------> HandoffRx
//!           <------------------------------------------
//!            free ring: empty Box<[u8]> buffers
//! ```
//!
//! Invariants:
//!
//! * **Zero allocation after construction.** [`channel`] allocates `capacity`
//!   buffers of `frame_capacity` bytes and both rings. [`HandoffTx::push`] takes
//!   a buffer from the free ring, copies the frame into it and moves it to the
//!   full ring; [`HandoffRx::pop_with`] lends the frame to a closure and puts the
//!   buffer back on the free ring. Buffers only move, they are never created or
//!   dropped, so `free + in flight + queued = capacity` at all times.
//! * **Order.** Frames are popped in the order they were pushed.
//! * **Back pressure, not loss of queued frames.** With no free buffer (the
//!   consumer is `capacity` frames behind) or a frame longer than
//!   `frame_capacity`, `push` returns [`HandoffFull`] and the frame is not
//!   queued (the caller drops it as `DropReason::HandoffFull`); frames
//!   already queued are untouched.
//! * Neither side blocks, locks, makes syscalls or panics.
//!
//! **Doorbells.** A worker with nothing to do sleeps in its driver's idle
//! wait; frames handed to it must not wait for that wait's timeout. Each
//! worker of a [`HandoffMesh`] has a [`Doorbell`]: a flag it raises before
//! it sleeps and a socket pair whose read end its driver's wait also
//! watches. A sender that pushed frames calls [`HandoffTx::ring`] once
//! after its batch; only if the receiver is asleep does that write one
//! byte (one syscall per batch and sleeping receiver, never per frame).
//! The flag and the rings are ordered with `SeqCst` fences on both sides
//! (raise the flag, then look at the rings; push, then look at the flag),
//! so a push is either seen before the receiver sleeps or rings it.

use crate::packet::PortId;
use rtrb::{Consumer, Producer, RingBuffer};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering, fence};

/// A worker's doorbell: wakes it from its idle wait when another worker
/// hands it frames (see the module docs).
#[derive(Debug)]
pub struct Doorbell {
    /// The owner is (about to be) asleep in its driver's wait.
    asleep: AtomicBool,
    /// A byte was written and not yet drained.
    rung: AtomicBool,
    bell: UnixStream,
    /// The read end, watched by the owner's driver.
    listen: UnixStream,
}

impl Doorbell {
    /// A doorbell (a non-blocking socket pair).
    pub fn new() -> io::Result<Self> {
        let (bell, listen) = UnixStream::pair()?;
        bell.set_nonblocking(true)?;
        listen.set_nonblocking(true)?;
        Ok(Doorbell {
            asleep: AtomicBool::new(false),
            rung: AtomicBool::new(false),
            bell,
            listen,
        })
    }

    /// The descriptor that becomes readable when the bell rings (for
    /// [`crate::driver::Driver::wake_on_readable`]).
    pub fn fd(&self) -> RawFd {
        self.listen.as_raw_fd()
    }

    /// Owner: about to sleep. Look at the handoff rings after this; sleep
    /// only if they are empty, and call [`Doorbell::awake`] after.
    pub fn going_to_sleep(&self) {
        self.asleep.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// Owner: back from the wait (or did not sleep). Drains the socket if
    /// the bell rang (one `read`).
    pub fn awake(&self) {
        self.asleep.store(false, Ordering::SeqCst);
        if self.rung.swap(false, Ordering::AcqRel) {
            let mut buf = [0u8; 64];
            while matches!((&self.listen).read(&mut buf), Ok(n) if n > 0) {}
        }
    }

    /// Sender, after pushing: wake the owner if it sleeps. A failed write
    /// (the socket buffer full of unread rings) needs no retry: the owner
    /// is woken by the bytes already there.
    pub fn ring(&self) {
        fence(Ordering::SeqCst);
        if self.asleep.swap(false, Ordering::SeqCst) {
            self.rung.store(true, Ordering::Release);
            let _ = (&self.bell).write(&[1]);
        }
    }
}

/// A frame in flight: `buf[..len]` is the frame, received on `port`.
#[derive(Debug)]
pub struct HandoffFrame {
    pub port: PortId,
    pub len: u16,
    pub buf: Box<[u8]>,
}

/// Why [`HandoffTx::push`] did not queue a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HandoffFull {
    /// Every buffer is queued or being processed by the consumer.
    #[error("handoff ring full")]
    NoFreeBuffer,
    /// The frame does not fit in a handoff buffer.
    #[error("frame of {len} bytes exceeds the handoff frame capacity of {frame_capacity} bytes")]
    FrameTooLong { len: usize, frame_capacity: usize },
}

/// The producing end of a handoff channel (owned by the sending worker).
#[derive(Debug)]
pub struct HandoffTx {
    full: Producer<HandoffFrame>,
    free: Consumer<Box<[u8]>>,
    /// A buffer taken from the free ring whose push did not go through. Cannot
    /// happen while the rings are sized to the buffer count; kept so that no
    /// buffer is ever dropped.
    spare: Option<Box<[u8]>>,
    frame_capacity: usize,
    /// The receiving worker's doorbell (channels of a [`HandoffMesh`]).
    doorbell: Option<Arc<Doorbell>>,
}

/// The consuming end of a handoff channel (owned by the receiving worker).
#[derive(Debug)]
pub struct HandoffRx {
    full: Consumer<HandoffFrame>,
    free: Producer<Box<[u8]>>,
}

/// A handoff channel of `capacity` frames (at least 1) of up to
/// `frame_capacity` bytes each (at most `u16::MAX`; larger values are clamped).
/// All buffers are allocated here.
pub fn channel(capacity: usize, frame_capacity: usize) -> (HandoffTx, HandoffRx) {
    let capacity = capacity.max(1);
    let frame_capacity = frame_capacity.min(usize::from(u16::MAX));
    let (full_tx, full_rx) = RingBuffer::new(capacity);
    let (mut free_tx, free_rx) = RingBuffer::new(capacity);
    for _ in 0..capacity {
        // The free ring has room for exactly `capacity` buffers.
        let _ = free_tx.push(vec![0u8; frame_capacity].into_boxed_slice());
    }
    (
        HandoffTx {
            full: full_tx,
            free: free_rx,
            spare: None,
            frame_capacity,
            doorbell: None,
        },
        HandoffRx {
            full: full_rx,
            free: free_tx,
        },
    )
}

impl HandoffTx {
    /// Copies `frame`, received on `in_port`, into the channel.
    pub fn push(&mut self, in_port: PortId, frame: &[u8]) -> Result<(), HandoffFull> {
        let len = frame.len();
        if len > self.frame_capacity {
            return Err(HandoffFull::FrameTooLong {
                len,
                frame_capacity: self.frame_capacity,
            });
        }
        let Some(mut buf) = self.spare.take().or_else(|| self.free.pop().ok()) else {
            return Err(HandoffFull::NoFreeBuffer);
        };
        let (Some(dst), Ok(len16)) = (buf.get_mut(..len), u16::try_from(len)) else {
            self.spare = Some(buf);
            return Err(HandoffFull::FrameTooLong {
                len,
                frame_capacity: self.frame_capacity,
            });
        };
        dst.copy_from_slice(frame);
        match self.full.push(HandoffFrame {
            port: in_port,
            len: len16,
            buf,
        }) {
            Ok(()) => Ok(()),
            Err(rtrb::PushError::Full(f)) => {
                self.spare = Some(f.buf);
                Err(HandoffFull::NoFreeBuffer)
            }
        }
    }

    /// Wake the receiving worker if it sleeps (after a batch of pushes;
    /// see [`Doorbell`]). Nothing for a channel without a doorbell.
    pub fn ring(&self) {
        if let Some(d) = &self.doorbell {
            d.ring();
        }
    }

    /// Frames that can be pushed right now (free buffers).
    pub fn free_slots(&self) -> usize {
        self.free.slots() + usize::from(self.spare.is_some())
    }

    /// Longest frame accepted.
    pub fn frame_capacity(&self) -> usize {
        self.frame_capacity
    }

    /// True when the receiving end has been dropped (the worker is gone).
    pub fn is_abandoned(&self) -> bool {
        self.full.is_abandoned()
    }
}

impl HandoffRx {
    /// Pops the oldest frame and calls `f(in_port, frame)` with it; the
    /// buffer goes back to the producer afterwards. `None` when empty.
    pub fn pop_with<R>(&mut self, f: impl FnOnce(PortId, &[u8]) -> R) -> Option<R> {
        let frame = self.full.pop().ok()?;
        let len = usize::from(frame.len);
        let result = f(frame.port, frame.buf.get(..len).unwrap_or(&frame.buf));
        // The free ring has room for every buffer, so this cannot fail; if it
        // did, the buffer would be dropped and the channel one frame smaller.
        let _ = self.free.push(frame.buf);
        Some(result)
    }

    /// Frames waiting.
    pub fn len(&self) -> usize {
        self.full.slots()
    }

    pub fn is_empty(&self) -> bool {
        self.full.is_empty()
    }
}

/// One worker's ends of the handoff mesh.
#[derive(Debug)]
pub struct WorkerHandoff {
    /// `tx[w]` sends to worker `w`; `None` at this worker's own index.
    pub tx: Vec<Option<HandoffTx>>,
    /// One receiving end per other worker, in ascending order of the sending
    /// worker (this worker's own index skipped).
    pub rx: Vec<HandoffRx>,
    /// This worker's doorbell, rung by the senders of `rx`.
    pub doorbell: Arc<Doorbell>,
}

/// Builder of the full mesh of handoff channels between `workers` workers.
#[derive(Debug)]
pub struct HandoffMesh;

impl HandoffMesh {
    /// `workers * (workers - 1)` channels of `capacity` frames of up to
    /// `frame_capacity` bytes and a doorbell per worker; element `w` of the
    /// result belongs to worker `w`. Fails only if a doorbell's socket pair
    /// cannot be made (out of descriptors).
    #[allow(clippy::new_ret_no_self)] // a builder: the mesh is handed out per worker
    pub fn new(
        workers: usize,
        capacity: usize,
        frame_capacity: usize,
    ) -> io::Result<Vec<WorkerHandoff>> {
        let mut mesh: Vec<WorkerHandoff> = (0..workers)
            .map(|_| {
                Ok(WorkerHandoff {
                    tx: (0..workers).map(|_| None).collect(),
                    rx: Vec::with_capacity(workers.saturating_sub(1)),
                    doorbell: Arc::new(Doorbell::new()?),
                })
            })
            .collect::<io::Result<_>>()?;
        for dst in 0..workers {
            for src in 0..workers {
                if src == dst {
                    continue;
                }
                let (mut tx, rx) = channel(capacity, frame_capacity);
                tx.doorbell = mesh.get(dst).map(|w| Arc::clone(&w.doorbell));
                if let Some(slot) = mesh.get_mut(src).and_then(|w| w.tx.get_mut(dst)) {
                    *slot = Some(tx);
                }
                if let Some(w) = mesh.get_mut(dst) {
                    w.rx.push(rx);
                }
            }
        }
        Ok(mesh)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(i: u32, len: usize) -> Vec<u8> {
        (0..len).map(|j| (i as usize * 31 + j * 7) as u8).collect()
    }

    #[test]
    fn frames_come_out_in_order_with_port_and_bytes() {
        let (mut tx, mut rx) = channel(8, 128);
        for i in 0..5u32 {
            assert_eq!(tx.push(i as u8, &payload(i, 10 + i as usize)), Ok(()));
        }
        assert_eq!(rx.len(), 5);
        for i in 0..5u32 {
            let got = rx.pop_with(|port, frame| (port, frame.to_vec()));
            assert_eq!(got, Some((i as u8, payload(i, 10 + i as usize))));
        }
        assert!(rx.pop_with(|_, _| ()).is_none());
        assert!(rx.is_empty());
    }

    #[test]
    fn full_ring_rejects_and_keeps_queued_frames() {
        let (mut tx, mut rx) = channel(4, 64);
        for i in 0..4u32 {
            assert_eq!(tx.push(1, &payload(i, 20)), Ok(()));
        }
        assert_eq!(tx.free_slots(), 0);
        assert_eq!(tx.push(1, &payload(99, 20)), Err(HandoffFull::NoFreeBuffer));
        assert_eq!(rx.len(), 4);
        // Freeing one slot lets exactly one more in.
        assert_eq!(rx.pop_with(|_, f| f.to_vec()), Some(payload(0, 20)));
        assert_eq!(tx.push(1, &payload(4, 20)), Ok(()));
        assert_eq!(tx.push(1, &payload(5, 20)), Err(HandoffFull::NoFreeBuffer));
        for i in 1..=4u32 {
            assert_eq!(rx.pop_with(|_, f| f.to_vec()), Some(payload(i, 20)));
        }
        assert!(rx.is_empty());
    }

    #[test]
    fn too_long_frame_is_rejected_without_losing_a_buffer() {
        let (mut tx, mut rx) = channel(2, 16);
        assert_eq!(
            tx.push(0, &[0u8; 17]),
            Err(HandoffFull::FrameTooLong {
                len: 17,
                frame_capacity: 16
            })
        );
        assert_eq!(tx.free_slots(), 2);
        assert_eq!(tx.push(0, &[1u8; 16]), Ok(()));
        assert_eq!(tx.push(0, &[]), Ok(()));
        assert_eq!(rx.pop_with(|_, f| f.len()), Some(16));
        assert_eq!(rx.pop_with(|_, f| f.len()), Some(0));
    }

    #[test]
    fn buffers_are_recycled() {
        let (mut tx, mut rx) = channel(3, 256);
        let mut next_in = 0u32;
        let mut next_out = 0u32;
        // Push and pop in uneven bursts, 1000x the capacity.
        while next_in < 3000 {
            let burst = 1 + next_in % 3;
            for _ in 0..burst {
                assert_eq!(
                    tx.push(7, &payload(next_in, (next_in % 200) as usize)),
                    Ok(())
                );
                next_in += 1;
            }
            while let Some(frame) = rx.pop_with(|p, f| (p, f.to_vec())) {
                assert_eq!(frame, (7, payload(next_out, (next_out % 200) as usize)));
                next_out += 1;
            }
            assert_eq!(tx.free_slots(), 3);
        }
        assert_eq!(next_out, next_in);
    }

    fn bell_bytes(d: &Doorbell) -> usize {
        let mut buf = [0u8; 64];
        match (&d.listen).read(&mut buf) {
            Ok(n) => n,
            Err(e) => {
                assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
                0
            }
        }
    }

    #[test]
    fn a_doorbell_rings_only_for_a_sleeping_owner_and_is_drained_on_waking() {
        let d = Doorbell::new().expect("doorbell");
        d.ring();
        assert_eq!(bell_bytes(&d), 0, "an awake owner is not woken");
        d.going_to_sleep();
        d.ring();
        d.ring();
        assert!(!d.asleep.load(Ordering::SeqCst));
        d.awake();
        assert_eq!(bell_bytes(&d), 0, "one byte per sleep, drained on waking");
        d.going_to_sleep();
        d.ring();
        assert_eq!(bell_bytes(&d), 1, "readable while the owner sleeps");
    }

    #[test]
    fn mesh_senders_ring_their_receivers_doorbell() {
        let mut mesh = HandoffMesh::new(2, 4, 64).expect("doorbells");
        mesh[1].doorbell.going_to_sleep();
        let tx = mesh[0].tx[1].as_mut().expect("0 -> 1");
        assert_eq!(tx.push(0, &[1, 2, 3]), Ok(()));
        tx.ring();
        assert_eq!(bell_bytes(&mesh[1].doorbell), 1, "worker 1 woken");
        assert_eq!(bell_bytes(&mesh[0].doorbell), 0, "worker 0 not");
    }

    #[test]
    fn mesh_connects_every_ordered_pair() {
        let workers = 4;
        let mut mesh = HandoffMesh::new(workers, 4, 64).expect("doorbells");
        assert_eq!(mesh.len(), workers);
        for (w, h) in mesh.iter().enumerate() {
            assert_eq!(h.tx.len(), workers);
            assert!(h.tx[w].is_none());
            assert_eq!(h.tx.iter().filter(|t| t.is_some()).count(), workers - 1);
            assert_eq!(h.rx.len(), workers - 1);
        }
        // Each source sends its index to each destination; every destination
        // gets one frame per other worker, in ascending source order.
        for (src, h) in mesh.iter_mut().enumerate() {
            for (dst, tx) in h.tx.iter_mut().enumerate() {
                if let Some(tx) = tx.as_mut() {
                    assert_eq!(tx.push(src as u8, &[src as u8, dst as u8]), Ok(()));
                }
            }
        }
        for (dst, h) in mesh.iter_mut().enumerate() {
            let got: Vec<Vec<u8>> =
                h.rx.iter_mut()
                    .filter_map(|rx| rx.pop_with(|_, f| f.to_vec()))
                    .collect();
            let want: Vec<Vec<u8>> = (0..workers)
                .filter(|&s| s != dst)
                .map(|s| vec![s as u8, dst as u8])
                .collect();
            assert_eq!(got, want);
        }
    }

    /// FNV-1a, to check payloads end to end.
    fn checksum(bytes: &[u8]) -> u64 {
        bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    }

    /// Frame `i` carries its index, its length and a checksum of its body.
    fn make_frame(i: u32, out: &mut [u8; 128]) -> usize {
        let len = 16 + (i as usize * 13) % 112;
        out[..4].copy_from_slice(&i.to_le_bytes());
        for (j, b) in out[12..len].iter_mut().enumerate() {
            *b = (i as usize).wrapping_mul(2_654_435_761).wrapping_add(j) as u8;
        }
        let sum = checksum(&out[12..len]);
        out[4..12].copy_from_slice(&sum.to_le_bytes());
        len
    }

    #[test]
    fn two_threads_move_a_million_frames_intact() {
        const FRAMES: u32 = 1_000_000;
        let (mut tx, mut rx) = channel(64, 128);
        let producer = std::thread::spawn(move || {
            let mut buf = [0u8; 128];
            let mut full = 0u64;
            for i in 0..FRAMES {
                let len = make_frame(i, &mut buf);
                loop {
                    match tx.push((i % 4) as u8, &buf[..len]) {
                        Ok(()) => break,
                        Err(HandoffFull::NoFreeBuffer) => {
                            full += 1;
                            std::thread::yield_now();
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            full
        });
        let mut expected = 0u32;
        let mut bad = 0u32;
        while expected < FRAMES {
            let got = rx.pop_with(|port, frame| {
                let index = u32::from_le_bytes([frame[0], frame[1], frame[2], frame[3]]);
                let mut sum = [0u8; 8];
                sum.copy_from_slice(&frame[4..12]);
                let ok = port == (index % 4) as u8
                    && frame.len() == 16 + (index as usize * 13) % 112
                    && u64::from_le_bytes(sum) == checksum(&frame[12..]);
                (index, ok)
            });
            match got {
                Some((index, ok)) => {
                    assert_eq!(index, expected, "frame out of order");
                    bad += u32::from(!ok);
                    expected += 1;
                }
                // A producer that died would leave us waiting forever.
                None if producer.is_finished() && rx.is_empty() => break,
                None => std::thread::yield_now(),
            }
        }
        assert_eq!(expected, FRAMES, "frames lost");
        let _full_events = producer.join().expect("producer thread panicked");
        assert_eq!(bad, 0, "frames with a bad payload");
        assert!(rx.is_empty());
    }
}
