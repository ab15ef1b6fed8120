//! The bounds the validator checks values against. Where the dataplane has
//! the same limit, the dataplane owns it and the constant here restates it
//! (this crate does not depend on the dataplane); the control plane's tests
//! assert that each restated value equals the dataplane's.

use std::ops::RangeInclusive;

/// Most workers (and pinned cores).
pub const MAX_WORKERS: u64 = 64;
/// Largest receive burst (the dataplane's `MAX_BATCH`).
/// Most idle polls an adaptive worker may spin before it blocks
/// (`dataplane.idle_spin_polls`; tens of milliseconds of spinning).
pub const MAX_IDLE_SPIN_POLLS: u64 = 1_000_000;
pub const MAX_BATCH_SIZE: u64 = 64;
/// Largest Maglev table (the dataplane's `maglev::MAX_TABLE_SIZE`).
pub const MAX_MAGLEV_TABLE_SIZE: u64 = 1 << 24;
/// Most backends per service (the dataplane's `maglev::MAX_BACKENDS`).
pub const MAX_BACKENDS: usize = 65_535;
/// Largest conntrack or affinity table per worker (the dataplane's
/// `conntrack::MAX_CAPACITY`).
pub const MAX_TABLE_CAPACITY: u64 = 1 << 30;
/// Largest `[dataplane.conntrack] syn_proxy_flows` (the dataplane's
/// `conntrack::MAX_SYN_PROXY_FLOWS`: the record's 16-bit splice index).
pub const MAX_SYN_PROXY_FLOWS: u64 = 1 << 16;
/// The default `syn_proxy_flows` is one per this many flows of the
/// conntrack capacity (the dataplane's `conntrack::DEFAULT_SYN_PROXY_SHARE`).
pub const DEFAULT_SYN_PROXY_SHARE: u64 = 16;
/// Largest `[dataplane] new_flows_per_source_per_s`.
pub const MAX_NEW_FLOWS_PER_SOURCE_PER_S: u64 = 1_000_000;
/// SNAT ports each worker needs at least.
pub const MIN_SNAT_PORTS_PER_WORKER: u64 = 64;
/// Longest Linux interface name in bytes (`IFNAMSIZ` - 1).
pub const MAX_INTERFACE_NAME_BYTES: usize = 15;
/// MTU bounds: IPv4's minimum (RFC 791: 68) to the usual jumbo limit.
pub const MTU_RANGE: RangeInclusive<u64> = 68..=9216;
/// `mss_clamp` bounds: Linux's smallest MSS (`TCP_MIN_MSS`) to the
/// largest MTU less 40.
pub const MSS_CLAMP_RANGE: RangeInclusive<u64> = 88..=9176;
/// Kubernetes' bound on `sessionAffinityConfig.clientIP.timeoutSeconds`.
pub const MAX_AFFINITY_TIMEOUT_S: u64 = 86_400;
/// Largest backend weight.
pub const MAX_WEIGHT: u64 = 65_535;
/// EAL memory bounds, in megabytes.
pub const DPDK_MEMORY_MB_RANGE: RangeInclusive<u64> = 64..=1 << 20;
/// Descriptors per DPDK queue.
pub const DPDK_DESC_RANGE: RangeInclusive<u64> = 64..=16_384;

/// Whether this build has the DPDK driver (nic-config's feature `dpdk`).
pub const DPDK_AVAILABLE: bool = cfg!(feature = "dpdk");

/// AF_XDP ring sizes (entries): powers of two in this range.
pub const XDP_RING_RANGE: RangeInclusive<u64> = 64..=32_768;
/// Bounds of the af_packet ring sizes (`[dataplane.afpacket]`): slot
/// counts, block bytes, block counts, the V3 block timeout.
pub const AFPACKET_FRAME_COUNT_RANGE: RangeInclusive<u64> = 64..=262_144;
pub const AFPACKET_BLOCK_SIZE_RANGE: RangeInclusive<u64> = 4096..=(4 << 20);
pub const AFPACKET_BLOCK_COUNT_RANGE: RangeInclusive<u64> = 1..=1024;
pub const AFPACKET_BLOCK_TIMEOUT_MS_RANGE: RangeInclusive<u64> = 1..=1000;
/// Bounds of AF_XDP busy polling: microseconds per call, packets per poll.
pub const BUSY_POLL_US_RANGE: RangeInclusive<u64> = 1..=1000;
pub const BUSY_POLL_BUDGET_RANGE: RangeInclusive<u64> = 1..=1024;
/// The XDP headroom before a received frame in its AF_XDP UMEM frame.
pub const XDP_HEADROOM_BYTES: u64 = 256;
/// What an AF_XDP frame may exceed the MTU by (Ethernet header and one
/// VLAN tag).
pub const XDP_L2_OVERHEAD_BYTES: u64 = 18;
/// Most frames of one AF_XDP UMEM.
pub const MAX_UMEM_FRAMES: u64 = 1 << 20;

/// Bounds of `kubernetes.debounce_ms`.
pub const DEBOUNCE_RANGE_MS: RangeInclusive<u64> = 0..=10_000;
/// Largest `kubernetes.debounce_max_ms`.
pub const MAX_DEBOUNCE_MAX_MS: u64 = 60_000;
/// Default `kubernetes.debounce_max_ms` as a multiple of `debounce_ms`.
pub const DEFAULT_DEBOUNCE_MAX_FACTOR: u64 = 10;
/// Bounds of `kubernetes.status_writes_per_s` and `status_write_burst`.
pub const STATUS_WRITE_RATE_RANGE: RangeInclusive<u64> = 1..=10_000;
/// Bounds of `kubernetes.status_writes_in_flight`.
pub const STATUS_WRITES_IN_FLIGHT_RANGE: RangeInclusive<u64> = 1..=256;
