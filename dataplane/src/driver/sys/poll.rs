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

    /// Also wait on `fds` (after the sockets of [`PollSet::new`], so their
    /// indices are unchanged): descriptors the caller keeps open as long
    /// as the set is waited on (the host path's TAP queues).
    pub(crate) fn add_raw(&mut self, fds: &[std::os::fd::RawFd]) {
        self.0.extend(fds.iter().map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        }));
    }

    /// Whether the set waits on nothing.
    #[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Sleep in `poll(2)` until a socket is readable or has an error, or
    /// `timeout_ms` passes; then call `on_error(i)` for every socket `i`
    /// (index in the order of [`PollSet::new`]) with a pending error.
    /// Returns whether any socket is readable; a timeout, a signal or a poll
    /// error count as "nothing yet".
    pub(crate) fn wait(&mut self, timeout_ms: u32, mut on_error: impl FnMut(usize)) -> bool {
        for p in &mut self.0 {
            p.revents = 0;
        }
        let timeout = i32::try_from(timeout_ms).unwrap_or(i32::MAX);
        if !matches!(fd::poll(&mut self.0, timeout), Ok(n) if n > 0) {
            return false;
        }
        let mut readable = false;
        for (i, p) in self.0.iter().enumerate() {
            if p.revents & libc::POLLERR != 0 {
                on_error(i);
            }
            readable |= p.revents & libc::POLLIN != 0;
        }
        readable
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn wait_reports_readable_sockets_and_times_out_otherwise() {
        let (a, mut a_peer) = UnixStream::pair().expect("socket pair");
        let (b, _b_peer) = UnixStream::pair().expect("socket pair");
        let mut set = PollSet::new([a.as_fd(), b.as_fd()]);
        let mut errors = Vec::new();
        assert!(!set.wait(0, |i| errors.push(i)), "nothing sent yet");
        a_peer.write_all(b"x").expect("write");
        assert!(set.wait(1000, |i| errors.push(i)));
        assert!(errors.is_empty());
    }

    #[test]
    fn wait_names_the_sockets_with_a_pending_error() {
        let (a, _a_peer) = UnixStream::pair().expect("socket pair");
        // A UDP socket connected to a loopback port nobody listens on: the
        // ICMP port unreachable its datagram draws leaves ECONNREFUSED
        // pending (POLLERR).
        let closed = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let dead_end = closed.local_addr().expect("addr");
        drop(closed);
        let b = UdpSocket::bind("127.0.0.1:0").expect("bind");
        b.connect(dead_end).expect("connect");
        b.send(b"y").expect("send");
        let mut set = PollSet::new([a.as_fd(), b.as_fd()]);
        let mut errors = Vec::new();
        set.wait(1000, |i| errors.push(i));
        assert_eq!(errors, [1], "only the UDP socket has an error");
        assert_eq!(
            b.take_error().expect("SO_ERROR").map(|e| e.kind()),
            Some(std::io::ErrorKind::ConnectionRefused)
        );
    }
}
