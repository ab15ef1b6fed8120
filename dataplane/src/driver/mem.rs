//! The in-memory driver: per-port RX and TX rings of pooled buffers. Tests and
//! benches inject frames into RX and collect what the pipeline sent from TX.
//!
//! Invariants: the pool is allocated up front (`pool_frames` buffers of
//! `frame_capacity` bytes); `inject` copies into a pooled buffer and fails
//! when the pool or the RX ring is exhausted; TX rings are bounded and a full
//! ring refuses frames the way a NIC ring does.
//!
//! Rings are `Vec`s in FIFO order (front = oldest) with capacity
//! `ring_frames`, which their length never exceeds, so they never grow.
//! Moving a whole ring (the common case: a burst takes everything pending,
//! a TX ring accepts the whole queue) is one `Vec::append`, a `memcpy` of
//! the frame handles; a partial move drains from the front.

use super::{Driver, Frame, PortCounters};
use crate::packet::PortId;
use std::time::Duration;

/// Largest frame a pooled buffer holds (jumbo frames are out of scope here).
pub const MEM_FRAME_CAPACITY: usize = 2048;
/// How long [`Driver::wait_idle`] sleeps when no RX ring holds a frame
/// (only the owning thread injects, so nothing arrives while it sleeps).
pub const MEM_IDLE_SLEEP_US: u64 = 50;

/// A frame in a pooled buffer.
#[derive(Debug)]
pub struct MemFrame {
    buf: Box<[u8]>,
    len: usize,
    checksum_verified: bool,
}

impl Frame for MemFrame {
    #[inline]
    fn data(&self) -> &[u8] {
        &self.buf[..self.len]
    }
    #[inline]
    fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len]
    }
    #[inline]
    fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
    #[inline]
    fn extend(&mut self, len: usize) -> bool {
        if len > self.buf.len() {
            return false;
        }
        self.len = self.len.max(len);
        true
    }
    fn checksum_verified(&self) -> bool {
        self.checksum_verified
    }
}

/// Sizes of the in-memory rings.
#[derive(Clone, Copy, Debug)]
pub struct MemConfig {
    pub ports: usize,
    /// Buffers in the shared pool.
    pub pool_frames: usize,
    /// Capacity of each RX and each TX ring.
    pub ring_frames: usize,
}

impl Default for MemConfig {
    fn default() -> Self {
        MemConfig {
            ports: 2,
            pool_frames: 4096,
            ring_frames: 1024,
        }
    }
}

#[derive(Debug)]
struct MemPort {
    rx: Vec<MemFrame>,
    tx: Vec<MemFrame>,
}

/// Why an injection was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MemError {
    #[error("port {0} does not exist")]
    NoSuchPort(PortId),
    #[error("frame of {0} bytes exceeds the buffer size {MEM_FRAME_CAPACITY}")]
    FrameTooLarge(usize),
    #[error("buffer pool exhausted")]
    PoolExhausted,
    #[error("rx ring of port {0} is full")]
    RxFull(PortId),
}

/// In-memory ports for one worker.
#[derive(Debug)]
pub struct MemDriver {
    ports: Vec<MemPort>,
    pool: Vec<MemFrame>,
    ring_frames: usize,
    /// Mark injected frames as checksum-verified (like NIC offload).
    pub mark_checksum_verified: bool,
}

impl MemDriver {
    pub fn new(config: MemConfig) -> Self {
        let pool = (0..config.pool_frames)
            .map(|_| MemFrame {
                buf: vec![0u8; MEM_FRAME_CAPACITY].into_boxed_slice(),
                len: 0,
                checksum_verified: false,
            })
            .collect();
        MemDriver {
            ports: (0..config.ports)
                .map(|_| MemPort {
                    rx: Vec::with_capacity(config.ring_frames),
                    tx: Vec::with_capacity(config.ring_frames),
                })
                .collect(),
            pool,
            ring_frames: config.ring_frames,
            mark_checksum_verified: false,
        }
    }

    /// Copy `bytes` into a pooled buffer and queue it on `port`'s RX ring.
    pub fn inject(&mut self, port: PortId, bytes: &[u8]) -> Result<(), MemError> {
        let ring_frames = self.ring_frames;
        let verified = self.mark_checksum_verified;
        if bytes.len() > MEM_FRAME_CAPACITY {
            return Err(MemError::FrameTooLarge(bytes.len()));
        }
        let p = self
            .ports
            .get(port as usize)
            .ok_or(MemError::NoSuchPort(port))?;
        if p.rx.len() >= ring_frames {
            return Err(MemError::RxFull(port));
        }
        let mut frame = self.pool.pop().ok_or(MemError::PoolExhausted)?;
        frame.buf[..bytes.len()].copy_from_slice(bytes);
        frame.len = bytes.len();
        frame.checksum_verified = verified;
        self.ports[port as usize].rx.push(frame);
        Ok(())
    }

    /// Take every frame sent on `port` so far, as byte vectors (allocates; for
    /// tests). Buffers return to the pool.
    pub fn take_tx(&mut self, port: PortId) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for f in self.ports[port as usize].tx.drain(..) {
            out.push(f.data().to_vec());
            self.pool.push(f);
        }
        out
    }

    /// Return every sent frame of `port` to the pool without looking at it
    /// (benches), returning how many there were.
    pub fn discard_tx(&mut self, port: PortId) -> usize {
        let tx = &mut self.ports[port as usize].tx;
        let n = tx.len();
        // Cannot grow: every frame came from the pool.
        self.pool.append(tx);
        n
    }

    /// Frames waiting in `port`'s RX ring.
    pub fn rx_pending(&self, port: PortId) -> usize {
        self.ports[port as usize].rx.len()
    }

    /// Free buffers in the pool (leak checks in tests).
    pub fn pool_free(&self) -> usize {
        self.pool.len()
    }
}

impl Driver for MemDriver {
    type Frame = MemFrame;

    fn port_count(&self) -> usize {
        self.ports.len()
    }

    fn rx_burst(&mut self, port: PortId, out: &mut Vec<MemFrame>, max: usize) -> usize {
        let Some(p) = self.ports.get_mut(port as usize) else {
            return 0;
        };
        let n = max.min(p.rx.len());
        if n == p.rx.len() {
            out.append(&mut p.rx);
        } else {
            out.extend(p.rx.drain(..n));
        }
        n
    }

    fn tx_burst(&mut self, port: PortId, frames: &mut Vec<MemFrame>) -> usize {
        let Some(p) = self.ports.get_mut(port as usize) else {
            return 0;
        };
        let room = self.ring_frames.saturating_sub(p.tx.len());
        let n = room.min(frames.len());
        if n == frames.len() {
            p.tx.append(frames);
        } else {
            p.tx.extend(frames.drain(..n));
        }
        n
    }

    fn release(&mut self, frame: MemFrame) {
        self.pool.push(frame);
    }

    fn frame_from(&mut self, bytes: &[u8]) -> Option<MemFrame> {
        if bytes.len() > MEM_FRAME_CAPACITY {
            return None;
        }
        let mut frame = self.pool.pop()?;
        frame.buf[..bytes.len()].copy_from_slice(bytes);
        frame.len = bytes.len();
        frame.checksum_verified = false;
        Some(frame)
    }

    fn wait_idle(&mut self) -> bool {
        if self.ports.iter().any(|p| !p.rx.is_empty()) {
            return true;
        }
        std::thread::sleep(Duration::from_micros(MEM_IDLE_SLEEP_US));
        false
    }

    /// The in-memory driver's idle sleep is a short fixed sleep
    /// (`MEM_IDLE_SLEEP_US`): a readable host-path queue is read by the
    /// next poll after it, so nothing is kept to wait on.
    fn wake_on_readable(&mut self, _fds: &[std::os::fd::RawFd]) {}

    /// The in-memory driver keeps no counters (the pipeline's own count
    /// every frame): every port reports zeros.
    fn port_counters(&mut self, out: &mut [PortCounters]) {
        out.fill(PortCounters::default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inject_rx_tx_round_trip_and_pool_accounting() {
        let mut d = MemDriver::new(MemConfig {
            ports: 2,
            pool_frames: 4,
            ring_frames: 2,
        });
        d.inject(0, &[1, 2, 3]).unwrap();
        d.inject(0, &[4]).unwrap();
        assert_eq!(d.inject(0, &[5]), Err(MemError::RxFull(0)));
        assert_eq!(d.inject(9, &[5]), Err(MemError::NoSuchPort(9)));
        let mut batch = Vec::new();
        assert_eq!(d.rx_burst(0, &mut batch, 64), 2);
        assert_eq!(d.pool_free(), 2);
        assert_eq!(d.tx_burst(1, &mut batch), 2);
        assert_eq!(d.take_tx(1), vec![vec![1, 2, 3], vec![4]]);
        assert_eq!(d.pool_free(), 4);
    }

    #[test]
    fn full_tx_ring_leaves_frames_with_the_caller() {
        let mut d = MemDriver::new(MemConfig {
            ports: 1,
            pool_frames: 8,
            ring_frames: 1,
        });
        d.inject(0, &[1]).unwrap();
        let mut batch = Vec::new();
        d.rx_burst(0, &mut batch, 64);
        d.inject(0, &[2]).unwrap();
        d.rx_burst(0, &mut batch, 64);
        assert_eq!(d.tx_burst(0, &mut batch), 1);
        assert_eq!(batch.len(), 1);
        d.release(batch.pop().unwrap());
        d.discard_tx(0);
        assert_eq!(d.pool_free(), 8);
    }
}
