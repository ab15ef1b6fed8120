//! The SYN proxy's per-flow state ([`Splice`]) and where the table keeps
//! it ([`SpliceTable`]): a side array of `syn_proxy_flows` entries beside
//! the slab, allocated with the table, because only SYN-proxied flows need
//! one (24 B that every flow would otherwise carry in its TCP line).
//!
//! # Invariants
//! * A live flow with the `SYN_PROXIED` flag owns exactly the entry its
//!   record's `splice_at` names; no other flow owns it, and it is not on
//!   the free stack. Removing the flow (`Conntrack::unlink`, the one place
//!   a live record is freed) returns the entry.
//! * `free.len() + owned entries == entries.len()`, so the free stack never
//!   reallocates; a full array refuses a new splice (the SYN proxy checks
//!   [`SpliceTable::has_room`] first and drops with
//!   `DropReason::SynProxyTableFull`).
//! * At most [`MAX_SYN_PROXY_FLOWS`] entries: an index fits the record's
//!   16-bit `splice_at`.

/// Most splice entries a table may have (`splice_at` is 16 bits).
pub const MAX_SYN_PROXY_FLOWS: u32 = 1 << 16;
/// By default one flow in this many may be SYN-proxied at a time
/// ([`default_syn_proxy_flows`]).
pub const DEFAULT_SYN_PROXY_SHARE: u32 = 16;

/// The default `syn_proxy_flows` of a table of `capacity` flows: one in
/// [`DEFAULT_SYN_PROXY_SHARE`] (at least one, at most
/// [`MAX_SYN_PROXY_FLOWS`]). An entry costs 26 B (state and free-stack
/// slot); one in 16 flows is 1.6 B per flow, what the 128 B per IPv4 flow
/// leaves beside the record (64 B), the TCP line (32 B) and the index
/// (30.2 B). At the default capacity (262,144) that is 16,384 proxied
/// flows per worker, 16 times the default `syn_proxy_half_open_threshold`
/// (1,000): the proxied flows are the clients that complete a cookie
/// handshake while a flood keeps the proxy on, each held for its
/// connection's life (a SYN flood itself takes none: cookies are
/// stateless).
pub const fn default_syn_proxy_flows(capacity: u32) -> u32 {
    let n = capacity.div_ceil(DEFAULT_SYN_PROXY_SHARE);
    if n > MAX_SYN_PROXY_FLOWS {
        MAX_SYN_PROXY_FLOWS
    } else {
        n
    }
}

/// Window scale value meaning "no window scale option".
pub const NO_WSCALE: u8 = 0xff;

/// What the SYN proxy keeps per proxied flow (RFC 9293 sequence spaces):
/// the client's sequence numbers pass unchanged; the gateway answered the
/// client with its own initial sequence number (`our_isn`, the cookie),
/// the backend chose another (`our_isn + delta`), so every later packet's
/// sequence (backend -> client) or acknowledgment (client -> backend)
/// number is shifted by `delta`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Splice {
    /// The client's initial sequence number.
    pub client_isn: u32,
    /// The gateway's initial sequence number towards the client (the cookie).
    pub our_isn: u32,
    /// Backend ISN minus `our_isn` (valid once `spliced`).
    pub delta: u32,
    /// The client's MSS (from the cookie), told to the backend.
    pub client_mss: u16,
    /// The window the client's handshake ACK announced (told to the backend
    /// in the gateway's ACK of its SYN-ACK).
    pub client_window: u16,
    /// The client's window scale ([`NO_WSCALE`]: none; then nobody scales,
    /// and the gateway announced none either).
    pub client_wscale: u8,
    /// The backend's window scale (from its SYN-ACK).
    pub backend_wscale: u8,
    /// The backend's SYN-ACK arrived: `delta` and `backend_wscale` are set.
    pub spliced: bool,
    /// Timestamps (RFC 7323) were negotiated with the client.
    pub timestamps: bool,
    /// With `timestamps`: before the splice, the TSval the gateway sent the
    /// client in its SYN-ACK; after, the backend's TSval minus that (the
    /// offset of nf_synproxy's `tsoff`: backend -> client TSvals minus it,
    /// client -> backend TSecrs plus it).
    pub ts: u32,
}

/// The splice entries and their free stack (see the module docs).
#[derive(Debug)]
pub(super) struct SpliceTable {
    entries: Vec<Splice>,
    /// Free entries (indices below [`MAX_SYN_PROXY_FLOWS`] = 2^16).
    free: Vec<u16>,
}

/// Why a [`SpliceTable`] could not be allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SpliceAllocError;

impl SpliceTable {
    /// `len` entries, all free (`len <= MAX_SYN_PROXY_FLOWS`).
    pub(super) fn new(len: u32) -> Result<Self, SpliceAllocError> {
        let n = len as usize;
        let mut entries = Vec::new();
        entries.try_reserve_exact(n).map_err(|_| SpliceAllocError)?;
        entries.resize(n, Splice::default());
        let mut free = Vec::new();
        free.try_reserve_exact(n).map_err(|_| SpliceAllocError)?;
        // Pop order 0, 1, 2, ... (`len <= 2^16`: every index fits).
        free.extend((0..len).rev().filter_map(|i| u16::try_from(i).ok()));
        Ok(SpliceTable { entries, free })
    }

    /// A new flow could be given an entry.
    #[inline]
    pub(super) fn has_room(&self) -> bool {
        !self.free.is_empty()
    }

    /// Takes a free entry holding `splice`; `None` when all are taken.
    pub(super) fn take(&mut self, splice: Splice) -> Option<u16> {
        let at = self.free.pop()?;
        if let Some(e) = self.entries.get_mut(usize::from(at)) {
            *e = splice;
        }
        Some(at)
    }

    /// Returns entry `at` to the free stack.
    pub(super) fn give_back(&mut self, at: u16) {
        if usize::from(at) < self.entries.len() && self.free.len() < self.entries.len() {
            // Cannot reallocate: `at` was taken, so free.len() < len.
            self.free.push(at);
        }
    }

    #[inline]
    pub(super) fn get(&self, at: u16) -> Option<&Splice> {
        self.entries.get(usize::from(at))
    }

    #[inline]
    pub(super) fn get_mut(&mut self, at: u16) -> Option<&mut Splice> {
        self.entries.get_mut(usize::from(at))
    }

    /// Entries taken (tests, stats).
    pub(super) fn taken(&self) -> usize {
        self.entries.len() - self.free.len()
    }

    /// Bytes allocated.
    pub(super) fn allocation_size(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<Splice>()
            + self.free.capacity() * std::mem::size_of::<u16>()
    }
}
