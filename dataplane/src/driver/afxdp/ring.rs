//! The four single-producer/single-consumer rings of an AF_XDP socket
//! (Documentation/networking/af_xdp.rst): user space produces into the
//! fill ring (free UMEM chunks for the kernel to receive into) and the TX
//! ring (descriptors to send), and consumes from the RX ring (received
//! descriptors) and the completion ring (chunks the kernel finished
//! sending).
//!
//! Each ring is a power-of-two array of entries plus a producer and a
//! consumer index, free-running `u32`s that wrap; entry `i` lives at
//! `i & mask`. The side that owns an index publishes it with a `Release`
//! store after writing (or reading) the entries it covers; the other side
//! reads it with `Acquire` before touching those entries. Like libxdp we
//! keep cached copies of both indices and touch the shared words only when
//! the cache runs out, so a burst costs two atomic operations, not two per
//! entry.
//!
//! Invariants: `cached_prod - cached_cons` (wrapping) never exceeds `size`
//! for a consumer ring, and for a producer ring `cached_cons` is kept as
//! the kernel's consumer + `size`, so `cached_cons - cached_prod` is the
//! number of free entries. Out-of-range offsets (a corrupt mapping) read as
//! `None` and end a burst; they never touch memory outside the mapping.

use crate::driver::sys::Region;
use std::sync::atomic::Ordering;

/// Entry layout of a ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Entry {
    /// A `u64` UMEM address (fill and completion rings).
    Addr,
    /// A 16-byte `xdp_desc` (RX and TX rings).
    Desc,
}

impl Entry {
    fn size(self) -> usize {
        match self {
            Entry::Addr => 8,
            Entry::Desc => 16,
        }
    }
}

/// One `struct xdp_desc`: a buffer of a packet. `options` carries
/// `XDP_PKT_CONTD` on every buffer of a multi-buffer packet but its last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Desc {
    pub addr: u64,
    pub len: u32,
    pub options: u32,
}

impl Desc {
    /// A whole packet in one buffer.
    pub(super) const fn single(addr: u64, len: u32) -> Desc {
        Desc {
            addr,
            len,
            options: 0,
        }
    }

    /// More buffers of the same packet follow.
    #[inline]
    pub(super) fn continues(&self) -> bool {
        self.options & libc::XDP_PKT_CONTD != 0
    }
}

/// Where the parts of a ring are in its mapping (`struct xdp_ring_offset`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RingOffsets {
    pub producer: usize,
    pub consumer: usize,
    pub flags: usize,
    pub desc: usize,
}

impl RingOffsets {
    pub(super) fn from_kernel(o: &libc::xdp_ring_offset) -> Self {
        RingOffsets {
            producer: o.producer as usize,
            consumer: o.consumer as usize,
            flags: o.flags as usize,
            desc: o.desc as usize,
        }
    }

    /// Bytes to map for a ring of `size` entries.
    pub(super) fn map_len(&self, size: u32, entry: Entry) -> usize {
        self.desc + size as usize * entry.size()
    }
}

/// The ring layout of unit tests.
#[cfg(test)]
pub(super) const TEST_OFFSETS: RingOffsets = RingOffsets {
    producer: 0,
    consumer: 64,
    flags: 128,
    desc: 192,
};

/// One mapped ring and the cached indices of our side.
#[derive(Debug)]
pub(super) struct Ring {
    map: Region,
    off: RingOffsets,
    entry: Entry,
    size: u32,
    mask: u32,
    cached_prod: u32,
    cached_cons: u32,
}

impl Ring {
    /// A ring over `map`; `size` must be a power of two.
    pub(super) fn new(map: Region, off: RingOffsets, entry: Entry, size: u32) -> Option<Ring> {
        if !size.is_power_of_two() || map.len() < off.map_len(size, entry) {
            return None;
        }
        Some(Ring {
            map,
            off,
            entry,
            size,
            mask: size - 1,
            cached_prod: 0,
            cached_cons: 0,
        })
    }

    /// Start a producer ring (fill, TX): everything is free.
    pub(super) fn init_producer(&mut self) {
        self.cached_prod = self.load_producer_relaxed();
        self.cached_cons = self.load_consumer().wrapping_add(self.size);
    }

    /// Start a consumer ring (RX, completion).
    pub(super) fn init_consumer(&mut self) {
        self.cached_cons = self.load_consumer();
        self.cached_prod = self.load_producer();
    }

    pub(super) fn size(&self) -> u32 {
        self.size
    }

    fn load_producer(&self) -> u32 {
        self.map
            .atomic_u32(self.off.producer)
            .map_or(self.cached_prod, |a| a.load(Ordering::Acquire))
    }

    fn load_producer_relaxed(&self) -> u32 {
        self.map
            .atomic_u32(self.off.producer)
            .map_or(0, |a| a.load(Ordering::Relaxed))
    }

    fn load_consumer(&self) -> u32 {
        self.map
            .atomic_u32(self.off.consumer)
            .map_or(0, |a| a.load(Ordering::Acquire))
    }

    /// The kernel set `XDP_RING_NEED_WAKEUP` on this ring.
    #[inline]
    pub(super) fn needs_wakeup(&self) -> bool {
        self.map
            .atomic_u32(self.off.flags)
            .is_some_and(|a| a.load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0)
    }

    #[inline]
    fn entry_off(&self, idx: u32) -> usize {
        self.off.desc + (idx & self.mask) as usize * self.entry.size()
    }

    /// The `xdp_desc` at `off`.
    #[inline]
    fn read_desc(&self, off: usize) -> Option<Desc> {
        Some(Desc {
            addr: self.map.read_u64(off)?,
            len: self.map.read_u32(off + 8)?,
            options: self.map.read_u32(off + 12)?,
        })
    }

    /// Store an `xdp_desc` at `off`; false, with nothing written, if it
    /// does not fit the mapping (its last word is written first).
    #[inline]
    fn write_desc(&mut self, off: usize, d: Desc) -> bool {
        self.map.write_u32(off + 12, d.options)
            && self.map.write_u64(off, d.addr)
            && self.map.write_u32(off + 8, d.len)
    }

    // ------------------------------------------------- producer side

    /// Free entries, up to `want` (re-reads the consumer only when the
    /// cache shows fewer than `want`).
    #[inline]
    pub(super) fn free(&mut self, want: u32) -> u32 {
        let free = self.cached_cons.wrapping_sub(self.cached_prod);
        if free >= want {
            return want;
        }
        self.cached_cons = self.load_consumer().wrapping_add(self.size);
        self.cached_cons.wrapping_sub(self.cached_prod).min(want)
    }

    /// Write an address into the next free entry (after [`Ring::free`]
    /// said there is room). False if the entry is out of the mapping.
    #[inline]
    pub(super) fn push_addr(&mut self, addr: u64) -> bool {
        let off = self.entry_off(self.cached_prod);
        if !self.map.write_u64(off, addr) {
            return false;
        }
        self.cached_prod = self.cached_prod.wrapping_add(1);
        true
    }

    /// Write a descriptor into the next free entry.
    #[inline]
    pub(super) fn push_desc(&mut self, d: Desc) -> bool {
        let off = self.entry_off(self.cached_prod);
        if !self.write_desc(off, d) {
            return false;
        }
        self.cached_prod = self.cached_prod.wrapping_add(1);
        true
    }

    /// Publish everything pushed so far to the kernel.
    #[inline]
    pub(super) fn submit(&mut self) {
        if let Some(p) = self.map.atomic_u32(self.off.producer) {
            p.store(self.cached_prod, Ordering::Release);
        }
    }

    /// Entries the kernel has not consumed yet (TX ring: queued, unsent).
    pub(super) fn outstanding(&self) -> u32 {
        self.cached_prod.wrapping_sub(self.load_consumer())
    }

    // ------------------------------------------------- consumer side

    /// Entries ready to consume, up to `want`.
    #[inline]
    pub(super) fn available(&mut self, want: u32) -> u32 {
        let mut avail = self.cached_prod.wrapping_sub(self.cached_cons);
        if avail == 0 {
            self.cached_prod = self.load_producer();
            avail = self.cached_prod.wrapping_sub(self.cached_cons);
        }
        // A corrupt producer index (more than the ring holds) yields at most
        // one ring's worth.
        avail.min(self.size).min(want)
    }

    /// The address at consumer position `cached_cons + i`.
    #[inline]
    pub(super) fn peek_addr(&self, i: u32) -> Option<u64> {
        self.map
            .read_u64(self.entry_off(self.cached_cons.wrapping_add(i)))
    }

    /// The descriptor at consumer position `cached_cons + i`.
    #[inline]
    pub(super) fn peek_desc(&self, i: u32) -> Option<Desc> {
        self.read_desc(self.entry_off(self.cached_cons.wrapping_add(i)))
    }

    /// Hand `n` consumed entries back to the kernel.
    #[inline]
    pub(super) fn release(&mut self, n: u32) {
        if n == 0 {
            return;
        }
        self.cached_cons = self.cached_cons.wrapping_add(n);
        if let Some(c) = self.map.atomic_u32(self.off.consumer) {
            c.store(self.cached_cons, Ordering::Release);
        }
    }

    // ------------------------------------------------- test support

    /// Play the kernel's side in unit tests: set the shared producer index.
    #[cfg(test)]
    pub(super) fn set_shared_producer(&self, v: u32) {
        if let Some(p) = self.map.atomic_u32(self.off.producer) {
            p.store(v, Ordering::Release);
        }
    }

    /// Play the kernel's side in unit tests: set the shared consumer index.
    #[cfg(test)]
    pub(super) fn set_shared_consumer(&self, v: u32) {
        if let Some(c) = self.map.atomic_u32(self.off.consumer) {
            c.store(v, Ordering::Release);
        }
    }

    #[cfg(test)]
    pub(super) fn shared_producer(&self) -> u32 {
        self.load_producer()
    }

    #[cfg(test)]
    pub(super) fn shared_consumer(&self) -> u32 {
        self.load_consumer()
    }

    /// Write an entry at an absolute index, as the kernel would.
    #[cfg(test)]
    pub(super) fn kernel_write_desc(&mut self, idx: u32, d: Desc) {
        let off = self.entry_off(idx);
        assert!(self.write_desc(off, d));
    }

    /// Read an entry at an absolute index, as the kernel would.
    #[cfg(test)]
    pub(super) fn kernel_read_desc(&self, idx: u32) -> Option<Desc> {
        self.read_desc(self.entry_off(idx))
    }

    /// A ring of `size` entries over an anonymous mapping, laid out as
    /// [`TEST_OFFSETS`] (unit tests play the kernel's side).
    #[cfg(test)]
    pub(super) fn anonymous(entry: Entry, size: u32) -> Ring {
        let map = Region::anonymous(TEST_OFFSETS.map_len(size, entry)).expect("anonymous mapping");
        Ring::new(map, TEST_OFFSETS, entry, size).expect("ring")
    }

    #[cfg(test)]
    pub(super) fn kernel_read_addr(&self, idx: u32) -> Option<u64> {
        self.map.read_u64(self.entry_off(idx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OFF: RingOffsets = TEST_OFFSETS;

    fn ring(entry: Entry, size: u32) -> Ring {
        Ring::anonymous(entry, size)
    }

    #[test]
    fn sizes_must_be_powers_of_two_and_fit_the_mapping() {
        let map = Region::anonymous(OFF.map_len(8, Entry::Desc)).expect("map");
        assert!(Ring::new(map, OFF, Entry::Desc, 6).is_none());
        let map = Region::anonymous(OFF.map_len(8, Entry::Addr)).expect("map");
        assert!(Ring::new(map, OFF, Entry::Desc, 8).is_none(), "too short");
    }

    #[test]
    fn producer_ring_counts_free_entries_across_the_u32_wrap() {
        let mut r = ring(Entry::Addr, 8);
        // Both indices just below the wrap point.
        let start = u32::MAX - 2;
        r.set_shared_producer(start);
        r.set_shared_consumer(start);
        r.init_producer();
        assert_eq!(r.free(64), 8);
        for a in 0..8u64 {
            assert!(r.push_addr(0x1000 * a));
        }
        r.submit();
        assert_eq!(r.shared_producer(), start.wrapping_add(8));
        assert_eq!(r.free(1), 0, "full until the kernel consumes");
        // The kernel consumes 3 (across the wrap): entries are where the
        // masked index says.
        for i in 0..3u32 {
            assert_eq!(
                r.kernel_read_addr(start.wrapping_add(i)),
                Some(0x1000 * u64::from(i))
            );
        }
        r.set_shared_consumer(start.wrapping_add(3));
        assert_eq!(r.free(64), 3);
        assert_eq!(r.outstanding(), 5);
    }

    #[test]
    fn consumer_ring_reads_entries_in_order_and_releases_across_the_wrap() {
        let mut r = ring(Entry::Desc, 4);
        let start = u32::MAX - 1;
        r.set_shared_producer(start);
        r.set_shared_consumer(start);
        r.init_consumer();
        assert_eq!(r.available(64), 0);
        for i in 0..3u32 {
            let d = Desc::single(256 + 4096 * u64::from(i), 60 + i);
            r.kernel_write_desc(start.wrapping_add(i), d);
        }
        r.set_shared_producer(start.wrapping_add(3));
        assert_eq!(r.available(2), 2, "bounded by want");
        assert_eq!(r.available(64), 3);
        assert_eq!(r.peek_desc(0), Some(Desc::single(256, 60)));
        assert_eq!(r.peek_desc(2), Some(Desc::single(256 + 8192, 62)));
        r.release(2);
        assert_eq!(r.shared_consumer(), start.wrapping_add(2));
        assert_eq!(r.available(64), 1);
        assert_eq!(r.peek_desc(0), Some(Desc::single(256 + 8192, 62)));
        r.release(1);
        assert_eq!(r.shared_consumer(), 1, "wrapped past u32::MAX");
        assert_eq!(r.available(64), 0);
    }

    #[test]
    fn a_corrupt_producer_index_yields_at_most_one_ring() {
        let mut r = ring(Entry::Addr, 4);
        r.init_consumer();
        r.set_shared_producer(1000);
        assert_eq!(r.available(64), 4);
        for i in 0..4 {
            assert!(r.peek_addr(i).is_some());
        }
    }

    #[test]
    fn need_wakeup_reads_the_flags_word() {
        let r = ring(Entry::Addr, 4);
        assert!(!r.needs_wakeup());
        r.map
            .atomic_u32(OFF.flags)
            .expect("flags")
            .store(libc::XDP_RING_NEED_WAKEUP, Ordering::Relaxed);
        assert!(r.needs_wakeup());
    }
}
