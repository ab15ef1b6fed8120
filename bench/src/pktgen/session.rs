//! What a send or a sink run shares: its af_packet port, its bounds and
//! the errors that keep it from running.
//!
//! Invariants:
//! * A run is bounded: its duration (`duration_s`) and its frame count
//!   always end it; SIGINT and SIGTERM raise its stop flag, which ends it
//!   early, still with its summary.
//! * A run owns a one-interface af_packet driver, uses its port [`PORT`]
//!   and moves at most [`BURST`] frames per receive or transmit call.
//! * Error messages are the ones the `pktgen` binary prints after
//!   `pktgen: `.

use super::frame::PktgenError;
use dataplane::driver::afpacket::{AfPacketConfig, AfPacketDriver, AfPacketError};
use std::num::TryFromIntError;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, TryFromFloatSecsError};

/// The driver port a run uses (its driver has one interface).
pub(super) const PORT: u8 = 0;
/// Most frames per receive or transmit call.
pub(super) const BURST: usize = 64;

/// Why a send or sink run could not run, or could not print its summary.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The interface's MAC address could not be read.
    #[error(transparent)]
    Interface(AfPacketError),
    /// The af_packet driver could not open the interface.
    #[error("{iface}: {source}")]
    Open {
        iface: String,
        source: AfPacketError,
    },
    /// The frame spec is out of range.
    #[error(transparent)]
    Spec(#[from] PktgenError),
    #[error("--rate must be positive")]
    ZeroRate,
    #[error("--duration-s {seconds}: {source}")]
    Duration {
        seconds: f64,
        source: TryFromFloatSecsError,
    },
    /// The SIGINT/SIGTERM handlers could not be installed.
    #[error(transparent)]
    Signals(std::io::Error),
    /// The flow count does not fit this machine's `usize`.
    #[error(transparent)]
    FlowCount(TryFromIntError),
    /// The summary could not be written as JSON.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// A flag SIGINT and SIGTERM raise.
pub(super) fn stop_flag() -> Result<Arc<AtomicBool>, SessionError> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).map_err(SessionError::Signals)?;
    }
    Ok(stop)
}

/// The af_packet driver of one interface.
pub(super) fn open(iface: &str) -> Result<AfPacketDriver, SessionError> {
    AfPacketDriver::open(&AfPacketConfig::new(&[iface])).map_err(|source| SessionError::Open {
        iface: iface.to_string(),
        source,
    })
}

/// `duration_s` as a [`Duration`].
pub(super) fn duration_of(seconds: f64) -> Result<Duration, SessionError> {
    Duration::try_from_secs_f64(seconds)
        .map_err(|source| SessionError::Duration { seconds, source })
}
