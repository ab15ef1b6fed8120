//! A raw `AF_PACKET` socket on one interface: the peer end of a veth pair in
//! the drivers' namespace tests (it sends exact frames and sees every frame
//! that arrives, whatever its addresses).
//!
//! Invariants: the socket belongs to the namespace of the thread that
//! opened it (open it inside [`in_netns`](crate::in_netns)); it never
//! receives the frames it sends itself; a receive waits at most
//! [`RawSocket::RECV_TIMEOUT`].

use crate::sys;
use std::io;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

/// Largest frame a receive returns whole.
const RECV_BUFFER_BYTES: usize = 65536;

/// A `SOCK_RAW` packet socket bound to one interface, for every protocol.
#[derive(Debug)]
pub struct RawSocket {
    fd: OwnedFd,
    ifname: String,
}

impl RawSocket {
    /// How long one [`RawSocket::recv`] waits for a frame.
    pub const RECV_TIMEOUT: Duration = Duration::from_millis(100);

    /// Open on `ifname` in the calling thread's namespace.
    pub fn open(ifname: &str) -> io::Result<RawSocket> {
        let context = |what: &str, e: io::Error| {
            io::Error::new(e.kind(), format!("raw socket on {ifname}: {what}: {e}"))
        };
        let fd = sys::packet_socket(ifname).map_err(|e| context("socket and bind", e))?;
        sys::ignore_outgoing(&fd).map_err(|e| context("PACKET_IGNORE_OUTGOING", e))?;
        sys::set_recv_timeout(&fd, Self::RECV_TIMEOUT).map_err(|e| context("SO_RCVTIMEO", e))?;
        Ok(RawSocket {
            fd,
            ifname: ifname.to_owned(),
        })
    }

    /// Send `frame` (from the Ethernet header on) as it is; an error unless
    /// the kernel took all of it.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        let sent = sys::send(&self.fd, frame).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("send of {} bytes on {}: {e}", frame.len(), self.ifname),
            )
        })?;
        if sent != frame.len() {
            return Err(io::Error::other(format!(
                "send on {}: {sent} of {} bytes went out",
                self.ifname,
                frame.len()
            )));
        }
        Ok(())
    }

    /// The next frame, or `None` after [`Self::RECV_TIMEOUT`] without one.
    pub fn recv(&self) -> io::Result<Option<Vec<u8>>> {
        let mut buf = vec![0u8; RECV_BUFFER_BYTES];
        Ok(self.recv_into(&mut buf)?.map(<[u8]>::to_vec))
    }

    /// Frames for which `wanted` is true, in arrival order, until `count`
    /// arrived or `timeout` passed (then fewer); other frames are dropped.
    pub fn recv_matching(
        &self,
        count: usize,
        timeout: Duration,
        mut wanted: impl FnMut(&[u8]) -> bool,
    ) -> io::Result<Vec<Vec<u8>>> {
        let end = Instant::now() + timeout;
        let mut buf = vec![0u8; RECV_BUFFER_BYTES];
        let mut got = Vec::new();
        while got.len() < count && Instant::now() < end {
            if let Some(frame) = self.recv_into(&mut buf)?
                && wanted(frame)
            {
                got.push(frame.to_vec());
            }
        }
        Ok(got)
    }

    /// One frame into `buf`; `None` on the receive timeout.
    fn recv_into<'b>(&self, buf: &'b mut [u8]) -> io::Result<Option<&'b [u8]>> {
        match sys::recv(&self.fd, buf) {
            Ok(n) => Ok(buf.get(..n)),
            // SO_RCVTIMEO expired (EAGAIN), or a signal came first.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(io::Error::new(
                e.kind(),
                format!("recv on {}: {e}", self.ifname),
            )),
        }
    }
}
