//! The TCP connection to the router, with the socket options set before
//! connecting: source address, TTL (1 for a directly connected eBGP peer,
//! the multihop TTL otherwise), TCP-MD5 (RFC 2385, [`crate::sys`]) and
//! TCP_NODELAY (a KEEPALIVE must not wait behind Nagle).

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd as _;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::{TcpSocket, TcpStream};

use crate::config::PeerConfig;
use crate::sys;

/// Why no connection came up.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("cannot set up the socket ({what}): {source}")]
    Setup {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("connect to {peer}: {source}")]
    Connect {
        peer: SocketAddr,
        #[source]
        source: io::Error,
    },
}

fn setup(what: &'static str) -> impl FnOnce(io::Error) -> ConnectError {
    move |source| ConnectError::Setup { what, source }
}

/// Opens the TCP connection for `cfg` (no timeout: the caller bounds it).
pub(crate) async fn connect(cfg: &PeerConfig) -> Result<TcpStream, ConnectError> {
    let peer = SocketAddr::new(cfg.address, cfg.port);
    let sock = Socket::new(Domain::for_address(peer), Type::STREAM, Some(Protocol::TCP))
        .map_err(setup("socket"))?;
    sock.set_nonblocking(true).map_err(setup("non-blocking"))?;
    sock.set_tcp_nodelay(true).map_err(setup("TCP_NODELAY"))?;
    let ttl = u32::from(cfg.ttl());
    if peer.is_ipv4() {
        sock.set_ttl_v4(ttl).map_err(setup("IP_TTL"))?;
    } else {
        sock.set_unicast_hops_v6(ttl)
            .map_err(setup("IPV6_UNICAST_HOPS"))?;
    }
    if let Some(key) = &cfg.md5_password {
        sys::set_tcp_md5sig(sock.as_fd(), cfg.address, key.as_bytes())
            .map_err(setup("TCP_MD5SIG"))?;
    }
    if let Some(src) = cfg.source_address {
        sock.bind(&SocketAddr::new(src, 0).into())
            .map_err(setup("bind to the source address"))?;
    }
    let std_stream: std::net::TcpStream = sock.into();
    TcpSocket::from_std_stream(std_stream)
        .connect(peer)
        .await
        .map_err(|source| ConnectError::Connect { peer, source })
}
