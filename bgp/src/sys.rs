//! What the standard library and socket2 do not wrap: the socket options
//! TCP_MD5SIG (RFC 2385 TCP-MD5 signatures, Linux `tcp(7)`), IP_MINTTL and
//! IPV6_MINHOPCOUNT (the receive check of GTSM, RFC 5082 §3: the kernel
//! drops segments that arrive with a lower TTL / hop limit, `ip(7)`,
//! `ipv6(7)`) and `if_nametoindex(3)` (the scope of a link-local peer, in
//! the calling thread's network namespace). The only `unsafe` of this
//! crate.
//!
//! The kernel's `struct tcp_md5sig` is built as bytes (no layout-sensitive
//! Rust struct): `tcpm_addr` (a 128-byte `sockaddr_storage`), `tcpm_flags`,
//! `tcpm_prefixlen`, `tcpm_keylen` (u16), `tcpm_ifindex` (i32), `tcpm_key`
//! (80 bytes): 216 bytes. The kernel copies it from user memory, so its
//! alignment does not matter.
#![allow(unsafe_code)]

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, BorrowedFd};

/// TCP_MD5SIG_MAXKEYLEN.
pub const MD5_MAX_KEY_LEN: usize = 80;
const SOCKADDR_STORAGE_LEN: usize = 128;
const TCP_MD5SIG_LEN: usize = SOCKADDR_STORAGE_LEN + 1 + 1 + 2 + 4 + MD5_MAX_KEY_LEN;

/// The `struct tcp_md5sig` bytes for `peer` and `key` (native endian where
/// the kernel reads native integers).
fn md5sig_bytes(peer: IpAddr, key: &[u8]) -> io::Result<[u8; TCP_MD5SIG_LEN]> {
    if key.is_empty() || key.len() > MD5_MAX_KEY_LEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a TCP-MD5 key has 1..={MD5_MAX_KEY_LEN} bytes, not {}",
                key.len()
            ),
        ));
    }
    let mut b = [0u8; TCP_MD5SIG_LEN];
    match peer {
        IpAddr::V4(a) => {
            // struct sockaddr_in: family, port (0), address.
            b[0..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
            b[4..8].copy_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            // struct sockaddr_in6: family, port, flowinfo, address, scope.
            b[0..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
            b[8..24].copy_from_slice(&a.octets());
        }
    }
    // tcpm_flags = 0, tcpm_prefixlen = 0 (whole address), then the key.
    let at = SOCKADDR_STORAGE_LEN + 2;
    b[at..at + 2].copy_from_slice(&(key.len() as u16).to_ne_bytes());
    // tcpm_ifindex = 0 (any interface).
    let key_at = at + 2 + 4;
    b[key_at..key_at + key.len()].copy_from_slice(key);
    Ok(b)
}

/// Signs every segment to and from `peer` on `socket` with `key` (set
/// before connect).
pub fn set_tcp_md5sig(socket: BorrowedFd<'_>, peer: IpAddr, key: &[u8]) -> io::Result<()> {
    let sig = md5sig_bytes(peer, key)?;
    // SAFETY: `socket` is an open descriptor borrowed for the call; the
    // option value points to `sig`, a live local of exactly the length
    // passed, which the kernel only reads.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_MD5SIG,
            sig.as_ptr().cast(),
            TCP_MD5SIG_LEN as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Makes the kernel drop every segment on `socket` that arrives with a
/// TTL (IPv4: IP_MINTTL) or hop limit (IPv6: IPV6_MINHOPCOUNT) below
/// `min_ttl`, SYN-ACK included: set before connect (RFC 5082 §3).
pub fn set_min_ttl(socket: BorrowedFd<'_>, ipv6: bool, min_ttl: u8) -> io::Result<()> {
    let (level, name) = if ipv6 {
        (libc::IPPROTO_IPV6, libc::IPV6_MINHOPCOUNT)
    } else {
        (libc::IPPROTO_IP, libc::IP_MINTTL)
    };
    let value = libc::c_int::from(min_ttl);
    // SAFETY: `socket` is an open descriptor borrowed for the call; the
    // option value points to `value`, a live local `c_int` whose size is
    // the length passed, which the kernel only reads.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The index of interface `name` in the caller's network namespace.
pub fn interface_index(name: &str) -> io::Result<u32> {
    let c_name = std::ffi::CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in an interface name"))?;
    // SAFETY: `c_name` is a live NUL-terminated string for the call, which
    // only reads it.
    let index = unsafe { libc::if_nametoindex(c_name.as_ptr()) };
    if index == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_the_kernel_struct() {
        let b = md5sig_bytes("10.0.0.1".parse().unwrap(), b"secret").unwrap();
        assert_eq!(b.len(), 216);
        assert_eq!(u16::from_ne_bytes([b[0], b[1]]), libc::AF_INET as u16);
        assert_eq!(&b[4..8], &[10, 0, 0, 1]);
        assert_eq!(u16::from_ne_bytes([b[130], b[131]]), 6);
        assert_eq!(&b[136..142], b"secret");
        assert!(md5sig_bytes("10.0.0.1".parse().unwrap(), &[0; 81]).is_err());
    }

    #[test]
    fn kernel_accepts_the_option() {
        use std::os::fd::AsFd as _;
        let s = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        set_tcp_md5sig(s.as_fd(), "127.0.0.1".parse().unwrap(), b"secret").unwrap();
        // The kernel checks the family against the socket's.
        set_tcp_md5sig(s.as_fd(), "::1".parse().unwrap(), b"secret").unwrap_err();
        // An IPv6 socket takes an IPv6 peer's key.
        let s6 = std::net::TcpListener::bind("[::1]:0").unwrap();
        set_tcp_md5sig(s6.as_fd(), "2001:db8::1".parse().unwrap(), b"secret").unwrap();
    }

    #[test]
    fn kernel_accepts_the_min_ttl_of_either_family() {
        use std::os::fd::AsFd as _;
        let s = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        set_min_ttl(s.as_fd(), false, 255).unwrap();
        // IPV6_MINHOPCOUNT is an IPv6 socket's option.
        set_min_ttl(s.as_fd(), true, 255).unwrap_err();
        let s6 = std::net::TcpListener::bind("[::1]:0").unwrap();
        set_min_ttl(s6.as_fd(), true, 254).unwrap();
    }

    #[test]
    fn interface_index_of_loopback_and_of_nothing() {
        assert_eq!(interface_index("lo").unwrap(), 1);
        assert!(interface_index("no-such-if0").is_err());
        assert!(interface_index("a\0b").is_err());
    }
}
