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
//! found.
//!
//! GTSM (RFC 5082 §3, `ttl_security_hops`): TTL / hop limit 255 out, and
//! IP_MINTTL / IPV6_MINHOPCOUNT = 255 − (hops − 1) in, both set before
//! connect, so the kernel drops a SYN-ACK (and every later segment) that
//! came from farther away: such a session never leaves Connect.

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
    if let Some(min_ttl) = cfg.min_ttl() {
        let what = if peer.is_ipv4() {
            "IP_MINTTL"
        } else {
            "IPV6_MINHOPCOUNT"
        };
        sys::set_min_ttl(sock.as_fd(), peer.is_ipv6(), min_ttl).map_err(setup(what))?;
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

#[cfg(test)]
mod tests {
    //! GTSM on loopback: the kernel applies IP_MINTTL to the listener's
    //! SYN-ACK, whose TTL is the listener's.
    use super::*;
    use std::net::{Ipv4Addr, TcpListener};
    use std::time::Duration;

    fn gtsm_peer(listener: &TcpListener) -> PeerConfig {
        let mut cfg = PeerConfig::new(
            Ipv4Addr::LOCALHOST.into(),
            65000,
            65001,
            Ipv4Addr::new(10, 0, 0, 2),
        );
        cfg.port = listener.local_addr().unwrap().port();
        cfg.ttl_security_hops = Some(1);
        cfg
    }

    async fn try_connect(cfg: &PeerConfig) -> Option<Result<TcpStream, ConnectError>> {
        tokio::time::timeout(Duration::from_millis(1500), connect(cfg))
            .await
            .ok()
    }

    #[tokio::test]
    async fn gtsm_connects_to_a_router_sending_255_only() {
        // The default TTL (64) is below 255: the SYN-ACK is dropped, the
        // connection never opens.
        let low = TcpListener::bind("127.0.0.1:0").unwrap();
        let r = try_connect(&gtsm_peer(&low)).await;
        assert!(r.is_none(), "connected through IP_MINTTL: {r:?}");
        // A router that sends with 255 (GTSM on its side) is reached, and
        // the connection itself sends with 255.
        let high = TcpListener::bind("127.0.0.1:0").unwrap();
        high.set_ttl(255).unwrap();
        let stream = try_connect(&gtsm_peer(&high))
            .await
            .expect("not timed out")
            .expect("connected");
        assert_eq!(stream.ttl().unwrap(), 255);
        // With 254 (two hops away) only `ttl_security_hops = 2` reaches it.
        let two_hops = TcpListener::bind("127.0.0.1:0").unwrap();
        two_hops.set_ttl(254).unwrap();
        let mut cfg = gtsm_peer(&two_hops);
        assert!(try_connect(&cfg).await.is_none());
        cfg.ttl_security_hops = Some(2);
        try_connect(&cfg)
            .await
            .expect("not timed out")
            .expect("connected");
    }
}
