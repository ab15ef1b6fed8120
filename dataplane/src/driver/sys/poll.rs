//! [`PollSet`]: the `pollfd` set of a driver's sockets, built once when the
//! driver opens, and the `poll(2)` sleep of every kernel-socket driver's
//! idle wait. Waiting allocates nothing.

use super::fd;
use std::os::fd::{AsRawFd, BorrowedFd};

/// The sockets of one driver, in port order, waited on together for
/// `POLLIN`.
pub(crate) struct PollSet(Vec<libc::pollfd>);

impl std::fmt::Debug for PollSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.iter().map(|p| p.fd)).finish()
    }
}

/// What the last [`PollSet::wait`] saw on one socket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PollEvents {
    /// `POLLIN`: frames are (probably) waiting.
    pub(crate) readable: bool,
    /// `POLLERR`: the socket has a pending error.
    pub(crate) error: bool,
}

impl PollSet {
    /// A set over `fds` (one per port, in port order). The descriptors must
    /// stay open as long as the set is waited on (the driver owns both).
    pub(crate) fn new<'a>(fds: impl IntoIterator<Item = BorrowedFd<'a>>) -> Self {
        PollSet(
            fds.into_iter()
                .map(|fd| libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect(),
        )
    }

    /// Sleep in `poll(2)` until a socket is readable or has an error, or
    /// `timeout_ms` passes. Returns whether any socket has events; a
    /// timeout, a signal or a poll error count as "nothing yet" (and
    /// [`PollSet::events`] then reports none).
    pub(crate) fn wait(&mut self, timeout_ms: u32) -> bool {
        for p in &mut self.0 {
            p.revents = 0;
        }
        let timeout = i32::try_from(timeout_ms).unwrap_or(i32::MAX);
        matches!(fd::poll(&mut self.0, timeout), Ok(n) if n > 0)
    }

    /// Per socket, in the order of [`PollSet::new`]: what the last wait saw.
    pub(crate) fn events(&self) -> impl Iterator<Item = PollEvents> + '_ {
        self.0.iter().map(|p| PollEvents {
            readable: p.revents & libc::POLLIN != 0,
            error: p.revents & libc::POLLERR != 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn wait_reports_which_socket_is_readable_and_times_out_otherwise() {
        let (a, mut a_peer) = UnixStream::pair().expect("socket pair");
        let (b, _b_peer) = UnixStream::pair().expect("socket pair");
        let mut set = PollSet::new([a.as_fd(), b.as_fd()]);
        assert!(!set.wait(0), "nothing sent yet");
        assert!(set.events().all(|e| e == PollEvents::default()));
        a_peer.write_all(b"x").expect("write");
        assert!(set.wait(1000));
        let events: Vec<PollEvents> = set.events().collect();
        assert_eq!(
            events,
            [
                PollEvents {
                    readable: true,
                    error: false
                },
                PollEvents::default()
            ]
        );
    }
}
