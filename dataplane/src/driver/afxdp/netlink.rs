//! Just enough rtnetlink (RFC 3549; `<linux/rtnetlink.h>`, `<linux/if_link.h>`)
//! to see which XDP program an interface has (`RTM_GETLINK`, attribute
//! `IFLA_XDP`) and to detach one that was attached through netlink
//! (`RTM_SETLINK` with `IFLA_XDP_FD = -1` and the mode it runs in).
//!
//! Also, for the host path's TAPs ([`crate::driver::hostpath`]), adding an
//! IPv4 address to an interface (`RTM_NEWADDR`, `<linux/if_addr.h>`).
//!
//! Messages are built and parsed as plain bytes; every length read from
//! the kernel is checked against the datagram before use.

use super::sys;
use std::io;
use std::net::IpAddr;
use std::os::fd::OwnedFd;

const RTM_GETLINK: u16 = 18;
const RTM_SETLINK: u16 = 19;
const RTM_NEWADDR: u16 = 20;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_CREATE: u16 = 0x400;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLA_F_NESTED: u16 = 0x8000;
const NLA_TYPE_MASK: u16 = 0x3fff;
const NLMSG_HDRLEN: usize = 16;
const IFINFOMSG_LEN: usize = 16;
const IFADDRMSG_LEN: usize = 8;

const IFLA_XDP: u16 = 43;
const IFLA_XDP_FD: u16 = 1;
const IFLA_XDP_ATTACHED: u16 = 2;
const IFLA_XDP_FLAGS: u16 = 3;
const IFLA_XDP_PROG_ID: u16 = 4;
const IFLA_XDP_DRV_PROG_ID: u16 = 5;
const IFLA_XDP_SKB_PROG_ID: u16 = 6;
const IFLA_XDP_HW_PROG_ID: u16 = 7;

/// `XDP_FLAGS_SKB_MODE`: generic XDP.
pub const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`: native XDP in the driver.
pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
/// `XDP_FLAGS_UPDATE_IF_NOEXIST`.
pub const XDP_FLAGS_UPDATE_IF_NOEXIST: u32 = 1 << 0;

/// `XDP_ATTACHED_*`.
const XDP_ATTACHED_DRV: u8 = 1;
const XDP_ATTACHED_SKB: u8 = 2;
const XDP_ATTACHED_HW: u8 = 3;

/// What an interface runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpState {
    /// Program id in native (driver) mode.
    pub drv_prog_id: Option<u32>,
    /// Program id in generic (skb) mode.
    pub skb_prog_id: Option<u32>,
    /// Offloaded to the NIC (we never touch those).
    pub hw_attached: bool,
}

fn push_attr(buf: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    let len = 4 + payload.len();
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(payload);
    while !buf.len().is_multiple_of(4) {
        buf.push(0);
    }
}

/// A request: `nlmsghdr` + `ifinfomsg` for `ifindex` + `attrs`.
fn link_request(kind: u16, flags: u16, seq: u32, ifindex: u32, attrs: &[u8]) -> Vec<u8> {
    let len = NLMSG_HDRLEN + IFINFOMSG_LEN + attrs.len();
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&kind.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    // ifinfomsg: family AF_UNSPEC, pad, type, index, flags, change.
    m.extend_from_slice(&[0, 0, 0, 0]);
    m.extend_from_slice(&(ifindex as i32).to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(attrs);
    m
}

/// The detach request: `IFLA_XDP { FD = -1, FLAGS = mode }`.
pub fn detach_request(seq: u32, ifindex: u32, mode_flags: u32) -> Vec<u8> {
    let mut inner = Vec::new();
    push_attr(&mut inner, IFLA_XDP_FD, &(-1i32).to_ne_bytes());
    push_attr(&mut inner, IFLA_XDP_FLAGS, &mode_flags.to_ne_bytes());
    let mut attrs = Vec::new();
    push_attr(&mut attrs, IFLA_XDP | NLA_F_NESTED, &inner);
    link_request(RTM_SETLINK, NLM_F_REQUEST | NLM_F_ACK, seq, ifindex, &attrs)
}

/// The attach request (`IFLA_XDP { FD = prog, FLAGS = flags }`), used by
/// tests to leave a program behind the way a crashed process would.
pub fn attach_request(seq: u32, ifindex: u32, prog_fd: i32, flags: u32) -> Vec<u8> {
    let mut inner = Vec::new();
    push_attr(&mut inner, IFLA_XDP_FD, &prog_fd.to_ne_bytes());
    push_attr(&mut inner, IFLA_XDP_FLAGS, &flags.to_ne_bytes());
    let mut attrs = Vec::new();
    push_attr(&mut attrs, IFLA_XDP | NLA_F_NESTED, &inner);
    link_request(RTM_SETLINK, NLM_F_REQUEST | NLM_F_ACK, seq, ifindex, &attrs)
}

fn get_request(seq: u32, ifindex: u32) -> Vec<u8> {
    link_request(RTM_GETLINK, NLM_F_REQUEST, seq, ifindex, &[])
}

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(off..off + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

/// `(type, payload)` of each attribute in `b`.
fn attrs(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        let len = usize::from(u16_at(b, 0)?);
        let kind = u16_at(b, 2)? & NLA_TYPE_MASK;
        if len < 4 || len > b.len() {
            return None;
        }
        let payload = &b[4..len];
        b = b.get(len.next_multiple_of(4)..).unwrap_or(&[]);
        Some((kind, payload))
    })
}

/// `(type, body)` of each message in a datagram.
fn messages(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        let len = u32_at(b, 0)? as usize;
        let kind = u16_at(b, 4)?;
        if len < NLMSG_HDRLEN || len > b.len() {
            return None;
        }
        let body = &b[NLMSG_HDRLEN..len];
        b = b.get(len.next_multiple_of(4)..).unwrap_or(&[]);
        Some((kind, body))
    })
}

/// The XDP state in an `RTM_NEWLINK` body (`ifinfomsg` + attributes).
pub fn parse_xdp_state(body: &[u8]) -> XdpState {
    let mut state = XdpState::default();
    let Some(rest) = body.get(IFINFOMSG_LEN..) else {
        return state;
    };
    let Some((_, xdp)) = attrs(rest).find(|(k, _)| *k == IFLA_XDP) else {
        return state;
    };
    let mut attached = 0u8;
    let mut prog_id = None;
    for (kind, payload) in attrs(xdp) {
        let v = u32_at(payload, 0);
        match kind {
            IFLA_XDP_ATTACHED => attached = payload.first().copied().unwrap_or(0),
            IFLA_XDP_PROG_ID => prog_id = v,
            IFLA_XDP_DRV_PROG_ID => state.drv_prog_id = v,
            IFLA_XDP_SKB_PROG_ID => state.skb_prog_id = v,
            IFLA_XDP_HW_PROG_ID => state.hw_attached = true,
            _ => {}
        }
    }
    // With one program attached the kernel reports PROG_ID and the mode in
    // ATTACHED; with several (XDP_ATTACHED_MULTI) the per-mode ids.
    match attached {
        XDP_ATTACHED_DRV => state.drv_prog_id = state.drv_prog_id.or(prog_id),
        XDP_ATTACHED_SKB => state.skb_prog_id = state.skb_prog_id.or(prog_id),
        XDP_ATTACHED_HW => state.hw_attached = true,
        _ => {}
    }
    state
}

/// The errno of an `NLMSG_ERROR` body (0 is an ACK).
fn error_code(body: &[u8]) -> Option<i32> {
    Some(i32::from_ne_bytes(body.get(0..4)?.try_into().ok()?))
}

/// One request/answer exchange.
fn exchange(sock: &OwnedFd, msg: &[u8], mut on_message: impl FnMut(u16, &[u8])) -> io::Result<()> {
    sys::netlink_send(sock, msg)?;
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        let n = sys::netlink_recv(sock, &mut buf)?;
        let mut done = false;
        for (kind, body) in messages(&buf[..n]) {
            match kind {
                NLMSG_ERROR => {
                    let code = error_code(body).unwrap_or(-libc::EPROTO);
                    if code != 0 {
                        return Err(io::Error::from_raw_os_error(-code));
                    }
                    done = true;
                }
                NLMSG_DONE => done = true,
                _ => {
                    on_message(kind, body);
                    // A non-dump GET answers with one message.
                    done = true;
                }
            }
        }
        if done {
            return Ok(());
        }
    }
}

/// The XDP programs attached to `ifindex`.
pub fn query(ifindex: u32) -> io::Result<XdpState> {
    let sock = sys::netlink_route_socket()?;
    let mut state = XdpState::default();
    exchange(&sock, &get_request(1, ifindex), |_, body| {
        state = parse_xdp_state(body);
    })?;
    Ok(state)
}

/// Detach the netlink-attached program of `ifindex` in `mode_flags`'s mode.
pub fn detach(ifindex: u32, mode_flags: u32) -> io::Result<()> {
    let sock = sys::netlink_route_socket()?;
    exchange(&sock, &detach_request(1, ifindex, mode_flags), |_, _| {})
}

/// Attach `prog_fd` through netlink (not through a BPF link): survives the
/// process. Tests use it to stage a stale program.
pub fn attach_legacy(ifindex: u32, prog_fd: i32, flags: u32) -> io::Result<()> {
    let sock = sys::netlink_route_socket()?;
    exchange(
        &sock,
        &attach_request(1, ifindex, prog_fd, flags),
        |_, _| {},
    )
}

/// `IFA_F_NODAD` (`ifaddrmsg.ifa_flags`): an IPv6 address usable at once,
/// without duplicate address detection (RFC 4862 §5.4).
const IFA_F_NODAD: u8 = 0x02;

/// `RTM_NEWADDR` for `addr/prefix_len` on `ifindex` (created, or replaced
/// if there: adding an address twice is no error). An IPv6 address is
/// added with `IFA_F_NODAD`: see [`add_address`].
pub fn new_address_request(seq: u32, ifindex: u32, addr: IpAddr, prefix_len: u8) -> Vec<u8> {
    let (family, max_len, flags, octets): (u8, u8, u8, Vec<u8>) = match addr {
        IpAddr::V4(a) => (libc::AF_INET as u8, 32, 0, a.octets().to_vec()),
        IpAddr::V6(a) => (libc::AF_INET6 as u8, 128, IFA_F_NODAD, a.octets().to_vec()),
    };
    let mut attrs = Vec::new();
    push_attr(&mut attrs, IFA_LOCAL, &octets);
    push_attr(&mut attrs, IFA_ADDRESS, &octets);
    let len = NLMSG_HDRLEN + IFADDRMSG_LEN + attrs.len();
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&RTM_NEWADDR.to_ne_bytes());
    let nl_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE;
    m.extend_from_slice(&nl_flags.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    // ifaddrmsg: family, prefix length, flags, scope universe, index.
    m.extend_from_slice(&[family, prefix_len.min(max_len), flags, 0]);
    m.extend_from_slice(&ifindex.to_ne_bytes());
    m.extend_from_slice(&attrs);
    m
}

/// Add `addr/prefix_len` to interface `ifindex` (the kernel adds the
/// connected route of the prefix). An IPv6 address skips duplicate
/// address detection (`IFA_F_NODAD`): a tentative address cannot be bound
/// or used as a source for the ~1 s DAD takes, so the BGP sessions started
/// right after would fail their first connect; and its uniqueness is the
/// configuration's (validated distinct from every other address), not
/// something a probe on the wire should be able to revoke.
pub fn add_address(ifindex: u32, addr: IpAddr, prefix_len: u8) -> io::Result<()> {
    let sock = sys::netlink_route_socket()?;
    exchange(
        &sock,
        &new_address_request(1, ifindex, addr, prefix_len),
        |_, _| {},
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn new_address_request_layout() {
        let m = new_address_request(7, 4, Ipv4Addr::new(192, 0, 2, 2).into(), 24);
        // 16 header + 8 ifaddrmsg + two 8-byte address attributes.
        assert_eq!(m.len(), 40);
        assert_eq!(u32_at(&m, 0), Some(40));
        assert_eq!(u16_at(&m, 4), Some(RTM_NEWADDR));
        assert_eq!(
            u16_at(&m, 6),
            Some(NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE)
        );
        assert_eq!(&m[16..20], &[libc::AF_INET as u8, 24, 0, 0]);
        assert_eq!(u32_at(&m, 20), Some(4), "ifindex");
        assert_eq!(u16_at(&m, 24), Some(8));
        assert_eq!(u16_at(&m, 26), Some(IFA_LOCAL));
        assert_eq!(&m[28..32], &[192, 0, 2, 2]);
        assert_eq!(u16_at(&m, 34), Some(IFA_ADDRESS));
        assert_eq!(&m[36..40], &[192, 0, 2, 2]);
    }

    #[test]
    fn new_ipv6_address_request_skips_dad() {
        let a: std::net::Ipv6Addr = "2001:db8::2".parse().unwrap();
        let m = new_address_request(7, 4, a.into(), 64);
        // 16 header + 8 ifaddrmsg + two 20-byte address attributes.
        assert_eq!(m.len(), 64);
        assert_eq!(
            &m[16..20],
            &[libc::AF_INET6 as u8, 64, IFA_F_NODAD, 0],
            "AF_INET6, /64, nodad"
        );
        assert_eq!(u16_at(&m, 24), Some(20));
        assert_eq!(u16_at(&m, 26), Some(IFA_LOCAL));
        assert_eq!(&m[28..44], &a.octets());
        assert_eq!(u16_at(&m, 46), Some(IFA_ADDRESS));
        assert_eq!(&m[48..64], &a.octets());
    }

    #[test]
    fn detach_request_layout() {
        let m = detach_request(9, 3, XDP_FLAGS_SKB_MODE);
        // 16 header + 16 ifinfomsg + 4 nested header + 8 FD + 8 FLAGS.
        assert_eq!(m.len(), 52);
        assert_eq!(u32_at(&m, 0), Some(52));
        assert_eq!(u16_at(&m, 4), Some(RTM_SETLINK));
        assert_eq!(u16_at(&m, 6), Some(NLM_F_REQUEST | NLM_F_ACK));
        assert_eq!(u32_at(&m, 8), Some(9));
        assert_eq!(u32_at(&m, 20), Some(3), "ifindex");
        assert_eq!(u16_at(&m, 32), Some(20), "nested length");
        assert_eq!(u16_at(&m, 34), Some(IFLA_XDP | NLA_F_NESTED));
        assert_eq!(&m[36..44], &[8, 0, 1, 0, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(u16_at(&m, 46), Some(IFLA_XDP_FLAGS));
        assert_eq!(u32_at(&m, 48), Some(XDP_FLAGS_SKB_MODE));
    }

    fn newlink_body(xdp: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; IFINFOMSG_LEN];
        // An unrelated attribute first (IFLA_MTU = 4), then IFLA_XDP.
        push_attr(&mut b, 4, &1500u32.to_ne_bytes());
        push_attr(&mut b, IFLA_XDP | NLA_F_NESTED, xdp);
        b
    }

    #[test]
    fn parses_one_program_in_skb_mode() {
        let mut xdp = Vec::new();
        push_attr(&mut xdp, IFLA_XDP_ATTACHED, &[XDP_ATTACHED_SKB]);
        push_attr(&mut xdp, IFLA_XDP_PROG_ID, &42u32.to_ne_bytes());
        let s = parse_xdp_state(&newlink_body(&xdp));
        assert_eq!(
            s,
            XdpState {
                drv_prog_id: None,
                skb_prog_id: Some(42),
                hw_attached: false
            }
        );
    }

    #[test]
    fn parses_no_program_and_truncated_input() {
        let mut xdp = Vec::new();
        push_attr(&mut xdp, IFLA_XDP_ATTACHED, &[0]);
        assert_eq!(parse_xdp_state(&newlink_body(&xdp)), XdpState::default());
        let body = newlink_body(&xdp);
        for cut in 0..body.len() {
            // Never panics, whatever is cut off.
            let _ = parse_xdp_state(&body[..cut]);
        }
        // An attribute claiming more bytes than there are ends the walk.
        let mut bad = vec![0u8; IFINFOMSG_LEN];
        bad.extend_from_slice(&200u16.to_ne_bytes());
        bad.extend_from_slice(&IFLA_XDP.to_ne_bytes());
        assert_eq!(parse_xdp_state(&bad), XdpState::default());
    }
}
