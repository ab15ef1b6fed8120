//! The TCP connection to the router, with the socket options set before
//! connecting: source address, TTL (1 for a directly connected eBGP peer,
//! the multihop TTL otherwise: IP_TTL, or IPV6_UNICAST_HOPS on an IPv6
//! socket), TCP-MD5 (RFC 2385, [`crate::sys`], the key bound to the peer's
//! address of either family) and TCP_NODELAY (a KEEPALIVE must not wait
//! behind Nagle).
//!
//! A link-local peer (fe80::/10) is reached through its `interface`: the
//! interface's index is the scope id of the destination (and of a
//! link-local source address), RFC 4007 §6. The index is looked up at
//! each connect, so an interface that comes later (or is recreated) is
//! found. No GTSM (RFC 5082: IP_MINTTL / IPV6_MINHOPCOUNT): the
//! configuration has no TTL-security option, a multihop TTL is only what
//! we send.

use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV6};
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
    #[error("interface `{interface}` of the link-local peer: {source}")]
    Interface {
        interface: String,
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
    let scope_id = match (&cfg.interface, cfg.is_link_local()) {
        (Some(interface), true) => {
            sys::interface_index(interface).map_err(|source| ConnectError::Interface {
                interface: interface.clone(),
                source,
            })?
        }
        _ => 0,
    };
    let scoped = |a: IpAddr, port: u16| match a {
        IpAddr::V6(v6) if v6.is_unicast_link_local() => {
            SocketAddr::V6(SocketAddrV6::new(v6, port, 0, scope_id))
        }
        a => SocketAddr::new(a, port),
    };
    let peer = scoped(cfg.address, cfg.port);
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
        sock.bind(&scoped(src, 0).into())
            .map_err(setup("bind to the source address"))?;
    }
    let std_stream: std::net::TcpStream = sock.into();
    TcpSocket::from_std_stream(std_stream)
        .connect(peer)
        .await
        .map_err(|source| ConnectError::Connect { peer, source })
}
