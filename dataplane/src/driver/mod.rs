//! The driver interface: bursts of frames in and out of the gateway's ports,
//! over buffers the driver owns.
//!
//! One driver instance serves one worker (its queue on every port). The
//! pipeline rewrites frames in place and hands them back to `tx_burst` on
//! the port of their verdict; frames it drops go back with `release`. No
//! call allocates per packet: buffers come from the driver's pool.
//!
//! Besides the bursts, every driver answers the two questions the worker's
//! poll loop ([`crate::worker::Worker::run`]) asks off the packet path:
//! how to wait for work when idle ([`Driver::wait_idle`]) and what its
//! ports counted ([`Driver::port_counters`], one [`PortCounters`] shape
//! for every driver).
//!
//! Layout: [`mem`] (in-memory rings for tests and benches), [`afpacket`],
//! [`afxdp`] and `dpdk` (feature `dpdk`), one folder per driver; `sys`,
//! the Linux calls af_packet and AF_XDP share (sockets, mappings, `poll`,
//! interface ioctls, the host path's TAP); [`stats`], the common port
//! counters; [`hostpath`], the kernel's TAP per port for traffic to the
//! appliance itself, the same for every driver.

#[cfg(target_os = "linux")]
pub mod afpacket;
#[cfg(target_os = "linux")]
pub mod afxdp;
#[cfg(all(target_os = "linux", feature = "dpdk"))]
pub mod dpdk;
#[cfg(target_os = "linux")]
pub mod hostpath;
pub mod mem;
pub mod stats;
#[cfg(target_os = "linux")]
mod sys;
#[cfg(all(test, target_os = "linux"))]
mod test_frames;

pub use stats::{PortCounters, PortStatsCell};

use crate::packet::PortId;
use crate::steering::SteeringRule;

/// A frame in a driver-owned buffer.
pub trait Frame {
    /// The frame bytes, from the Ethernet header on.
    fn data(&self) -> &[u8];
    fn data_mut(&mut self) -> &mut [u8];
    /// Shorten the frame (strip Ethernet padding, drop a payload).
    fn truncate(&mut self, len: usize);
    /// Lengthen the frame to `len` bytes inside its buffer (the new bytes
    /// are whatever the buffer held: the caller writes them). False, and
    /// nothing changes, when the buffer is too small or the driver cannot.
    fn extend(&mut self, len: usize) -> bool {
        let _ = len;
        false
    }
    /// The driver (NIC or kernel) already verified the L3/L4 checksums.
    fn checksum_verified(&self) -> bool {
        false
    }
    /// The frame's offload metadata (GSO/GRO super-packet, partial
    /// checksum) as the driver received it; only a driver with offloads
    /// on reports any. Stages never change a packet's header layout, so a
    /// forwarded frame is sent with the offload it arrived with.
    fn offload(&self) -> crate::packet::Offload {
        crate::packet::Offload::NONE
    }
    /// Forget the offload metadata: the frame was rebuilt into something
    /// else (an ICMP error, a RST, a SYN proxy answer) with complete
    /// checksums.
    fn clear_offload(&mut self) {}
}

/// A set of ports as seen by one worker.
pub trait Driver {
    type Frame: Frame;

    /// Number of ports; port ids are `0..port_count()`.
    fn port_count(&self) -> usize;

    /// Append up to `max` received frames of `port` to `out`; returns how many.
    fn rx_burst(&mut self, port: PortId, out: &mut Vec<Self::Frame>, max: usize) -> usize;

    /// Send frames from the front of `frames` out of `port`, removing the ones
    /// it took; returns how many. Frames left over did not fit (TX ring full):
    /// the caller counts and releases them.
    fn tx_burst(&mut self, port: PortId, frames: &mut Vec<Self::Frame>) -> usize;

    /// Give a frame the pipeline dropped back to the driver's pool.
    fn release(&mut self, frame: Self::Frame);

    /// A pool buffer holding a copy of `bytes` (frames handed over from
    /// another worker), or `None` if the pool is empty or `bytes` too long.
    fn frame_from(&mut self, bytes: &[u8]) -> Option<Self::Frame>;

    /// Sleep until frames may be waiting on a port or the driver's idle
    /// timeout passes (its configuration says how long: `poll(2)` on the
    /// sockets, or a plain sleep for poll-mode devices); returns whether
    /// frames are (probably) waiting. The back-off of the worker's adaptive
    /// idle policy; never called while packets flow.
    fn wait_idle(&mut self) -> bool;

    /// Also end [`Driver::wait_idle`] as soon as one of `fds` is readable
    /// (the worker's host-path TAP queues, [`hostpath`]), so the kernel's
    /// frames wait no longer than the ports' do. Called once, before the
    /// poll loop; the descriptors stay open while the driver waits (the
    /// worker owns both).
    fn wake_on_readable(&mut self, fds: &[std::os::fd::RawFd]);

    /// Each port's counters since the driver opened, into `out` (index =
    /// port id; ports beyond `out.len()` are skipped). Counters the kernel
    /// resets on read are accumulated by the driver. May make a syscall per
    /// port: a few calls a second, never per packet.
    fn port_counters(&mut self, out: &mut [PortCounters]);

    /// Deliver each received frame to the worker that owns its flow by
    /// `rule` (af_packet: the fanout group's steering program, see
    /// `afpacket/steering`), where the driver can. Called by worker 0 when a
    /// snapshot changes the rule; returns whether the driver steers by it
    /// now. Drivers that cannot (the handoff rings carry what arrives on the
    /// wrong worker) keep this default. A syscall per port: never per packet.
    fn install_steering(&mut self, _rule: &SteeringRule) -> std::io::Result<bool> {
        Ok(false)
    }
}
