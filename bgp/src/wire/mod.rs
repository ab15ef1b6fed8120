//! The BGP-4 message codec (RFC 4271 §4, RFC 6793, RFC 4760, RFC 1997,
//! RFC 2918), smoltcp style: [`Packet`] is a zero-copy view over a buffer
//! that checks the 19-byte header; the `*Repr` types are the decoded,
//! owned forms, built by `parse` (which validates every field) and written
//! back by `emit`.
//!
//! Invariants:
//! - Decoding never panics and never reads outside the buffer, whatever
//!   the bytes (proptest in this module, the cargo-fuzz target in
//!   `bgp/fuzz/`). Every failure is a [`DecodeError`] that names the exact
//!   NOTIFICATION of RFC 4271 §6 (code, subcode, data) and, for UPDATE
//!   errors, the action of RFC 7606 (session reset, treat-as-withdraw or
//!   attribute discard).
//! - What `emit` writes, `parse` reads back to the same `Repr` (round-trip
//!   proptest), and an emitted message is never longer than
//!   [`MAX_MESSAGE_LEN`]: the session packs prefixes with
//!   [`UpdateRepr::encoded_len`] before emitting.

pub mod notification;
pub mod open;
pub mod prefix;
pub mod update;

#[cfg(test)]
mod proptests;

pub use notification::Notification;
pub use open::{Capability, NextHopTuple, OpenRepr};
pub use prefix::{AFI_IPV4, AFI_IPV6, Prefix, SAFI_UNICAST};
pub use update::{AsPath, AsSegment, MpReach, MpUnreach, Origin, PathAttributes, UpdateRepr};

use notification::{code, header};

/// The all-ones marker that opens every message.
pub const MARKER: [u8; 16] = [0xff; 16];
/// Marker (16) + length (2) + type (1).
pub const HEADER_LEN: usize = 19;
/// The largest message (RFC 4271 §4.1; no RFC 8654 extended messages).
pub const MAX_MESSAGE_LEN: usize = 4096;
/// The only BGP version spoken.
pub const BGP_VERSION: u8 = 4;
/// The 2-octet stand-in for a 4-octet ASN (RFC 6793).
pub const AS_TRANS: u32 = 23456;

/// Message types (RFC 4271 §4.1, RFC 2918).
pub mod msg_type {
    pub const OPEN: u8 = 1;
    pub const UPDATE: u8 = 2;
    pub const NOTIFICATION: u8 = 3;
    pub const KEEPALIVE: u8 = 4;
    pub const ROUTE_REFRESH: u8 = 5;
}

/// What RFC 7606 says to do about a malformed UPDATE (RFC 4271 resets the
/// session for every error; the other messages always do).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ErrorAction {
    /// Ignore the attribute and keep the route (RFC 7606 §2).
    AttributeDiscard,
    /// Treat every prefix of the UPDATE as withdrawn, keep the session.
    TreatAsWithdraw,
    /// Send the NOTIFICATION and close the session.
    SessionReset,
}

/// A message that could not be decoded: the reason, the NOTIFICATION that
/// RFC 4271 §6 prescribes for it, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {notification}")]
pub struct DecodeError {
    pub reason: String,
    pub notification: Notification,
    pub action: ErrorAction,
}

impl DecodeError {
    pub(crate) fn reset(reason: impl Into<String>, code: u8, subcode: u8, data: Vec<u8>) -> Self {
        DecodeError {
            reason: reason.into(),
            notification: Notification::new(code, subcode, data),
            action: ErrorAction::SessionReset,
        }
    }

    pub(crate) fn with_action(mut self, action: ErrorAction) -> Self {
        self.action = action;
        self
    }
}

/// What decoding needs to know from the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeContext {
    /// Both sides sent the 4-octet ASN capability (RFC 6793): AS_PATH
    /// carries 4-byte ASNs.
    pub four_octet_as: bool,
    /// The peer is in our AS (LOCAL_PREF errors are treat-as-withdraw from
    /// iBGP, attribute discard from eBGP: RFC 7606 §7.5).
    pub ibgp: bool,
    /// Both sides sent the Extended Next Hop Encoding capability for IPv4
    /// unicast with IPv6 next hops (RFC 8950 §4): an IPv4 MP_REACH_NLRI
    /// may then carry a 16- or 32-byte next hop (§3); without it only a
    /// 4-byte one is consistent with the AFI.
    pub extended_next_hop: bool,
}

impl Default for DecodeContext {
    fn default() -> Self {
        DecodeContext {
            four_octet_as: true,
            ibgp: false,
            extended_next_hop: false,
        }
    }
}

/// A zero-copy view over one message: the header fields and the body.
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` without checking it: the accessors may panic on a
    /// buffer shorter than the header.
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps `buffer` after checking the header (RFC 4271 §6.1): the marker,
    /// a length within 19..=4096 that the buffer holds, and the minimum
    /// length of the message type. The buffer may be longer than the
    /// message; [`Self::message`] is exactly the message.
    pub fn new_checked(buffer: T) -> Result<Self, DecodeError> {
        let p = Packet { buffer };
        p.check()?;
        Ok(p)
    }

    fn check(&self) -> Result<(), DecodeError> {
        let buf = self.buffer.as_ref();
        let Some(len) = frame_len(buf)? else {
            return Err(DecodeError::reset(
                format!("{} bytes are less than one message", buf.len()),
                code::MESSAGE_HEADER,
                header::BAD_MESSAGE_LENGTH,
                Vec::new(),
            ));
        };
        let ty = buf[18];
        let bad_len = || {
            DecodeError::reset(
                format!("type {ty} message of {len} bytes"),
                code::MESSAGE_HEADER,
                header::BAD_MESSAGE_LENGTH,
                (len as u16).to_be_bytes().to_vec(),
            )
        };
        let ok = match ty {
            msg_type::OPEN => len >= 29,
            msg_type::UPDATE => len >= 23,
            msg_type::NOTIFICATION => len >= 21,
            msg_type::KEEPALIVE => len == HEADER_LEN,
            // A wrong length is a ROUTE-REFRESH error (RFC 7313 §5), below.
            msg_type::ROUTE_REFRESH => true,
            _ => {
                return Err(DecodeError::reset(
                    format!("unknown message type {ty}"),
                    code::MESSAGE_HEADER,
                    header::BAD_MESSAGE_TYPE,
                    vec![ty],
                ));
            }
        };
        if !ok {
            return Err(bad_len());
        }
        Ok(())
    }

    /// The length field.
    pub fn length(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[16], b[17]])
    }

    /// The type field.
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[18]
    }

    /// The whole message (header included).
    pub fn message(&self) -> &[u8] {
        &self.buffer.as_ref()[..usize::from(self.length())]
    }

    /// The message after the header.
    pub fn body(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.length())]
    }
}

/// How long the message at the front of `buf` is: `Ok(None)` while the
/// header or the body is still incomplete; an error for a bad marker or a
/// length outside 19..=4096 (RFC 4271 §6.1), known from the header alone.
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, DecodeError> {
    let Some(head) = buf.get(..HEADER_LEN) else {
        return Ok(None);
    };
    if head[..16] != MARKER {
        return Err(DecodeError::reset(
            "the marker is not all ones",
            code::MESSAGE_HEADER,
            header::CONNECTION_NOT_SYNCHRONIZED,
            Vec::new(),
        ));
    }
    let len = usize::from(u16::from_be_bytes([head[16], head[17]]));
    if !(HEADER_LEN..=MAX_MESSAGE_LEN).contains(&len) {
        return Err(DecodeError::reset(
            format!("message length {len} outside 19..=4096"),
            code::MESSAGE_HEADER,
            header::BAD_MESSAGE_LENGTH,
            vec![head[16], head[17]],
        ));
    }
    Ok((buf.len() >= len).then_some(len))
}

/// ROUTE-REFRESH (RFC 2918): send me the routes of this family again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RouteRefresh {
    pub afi: u16,
    pub safi: u8,
}

/// One decoded message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Open(OpenRepr),
    Update(Box<UpdateRepr>),
    Notification(Notification),
    Keepalive,
    RouteRefresh(RouteRefresh),
}

impl Message {
    /// Decodes the message at the front of `buf` (which [`frame_len`] said
    /// is complete; a shorter buffer is a Bad Message Length).
    pub fn parse(buf: &[u8], ctx: DecodeContext) -> Result<Message, DecodeError> {
        let packet = Packet::new_checked(buf)?;
        let body = packet.body();
        match packet.msg_type() {
            msg_type::OPEN => OpenRepr::parse(body).map(Message::Open),
            msg_type::UPDATE => UpdateRepr::parse(body, ctx).map(|u| Message::Update(Box::new(u))),
            msg_type::NOTIFICATION => Notification::parse(body)
                .map(Message::Notification)
                .ok_or_else(|| {
                    DecodeError::reset(
                        "NOTIFICATION shorter than code and subcode",
                        code::MESSAGE_HEADER,
                        header::BAD_MESSAGE_LENGTH,
                        packet.length().to_be_bytes().to_vec(),
                    )
                }),
            msg_type::KEEPALIVE => Ok(Message::Keepalive),
            msg_type::ROUTE_REFRESH => match body {
                [a0, a1, _reserved, safi] => Ok(Message::RouteRefresh(RouteRefresh {
                    afi: u16::from_be_bytes([*a0, *a1]),
                    safi: *safi,
                })),
                _ => Err(DecodeError::reset(
                    format!("ROUTE-REFRESH of {} bytes", packet.length()),
                    code::ROUTE_REFRESH,
                    notification::route_refresh::INVALID_MESSAGE_LENGTH,
                    packet.message().to_vec(),
                )),
            },
            // new_checked refused every other type.
            ty => Err(DecodeError::reset(
                format!("unknown message type {ty}"),
                code::MESSAGE_HEADER,
                header::BAD_MESSAGE_TYPE,
                vec![ty],
            )),
        }
    }

    /// The message type byte.
    pub fn msg_type(&self) -> u8 {
        match self {
            Message::Open(_) => msg_type::OPEN,
            Message::Update(_) => msg_type::UPDATE,
            Message::Notification(_) => msg_type::NOTIFICATION,
            Message::Keepalive => msg_type::KEEPALIVE,
            Message::RouteRefresh(_) => msg_type::ROUTE_REFRESH,
        }
    }

    /// Appends the encoded message (header included) to `out`. An UPDATE
    /// longer than [`MAX_MESSAGE_LEN`] is the caller's bug: the session
    /// sizes them with [`UpdateRepr::encoded_len`]; a NOTIFICATION's data
    /// is cut to fit.
    pub fn emit(&self, ctx: DecodeContext, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&MARKER);
        out.extend_from_slice(&[0, 0, self.msg_type()]);
        match self {
            Message::Open(o) => o.emit_body(out),
            Message::Update(u) => u.emit_body(ctx, out),
            Message::Notification(n) => {
                n.emit_body(out);
                out.truncate(start + MAX_MESSAGE_LEN);
            }
            Message::Keepalive => {}
            Message::RouteRefresh(r) => {
                out.extend_from_slice(&r.afi.to_be_bytes());
                out.push(0);
                out.push(r.safi);
            }
        }
        debug_assert!(out.len() - start <= MAX_MESSAGE_LEN);
        let len = (out.len() - start) as u16;
        out[start + 16..start + 18].copy_from_slice(&len.to_be_bytes());
    }

    /// [`Self::emit`] into a new buffer.
    pub fn to_bytes(&self, ctx: DecodeContext) -> Vec<u8> {
        let mut out = Vec::new();
        self.emit(ctx, &mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::notification::open;
    use super::*;

    fn header(len: u16, ty: u8) -> Vec<u8> {
        let mut b = MARKER.to_vec();
        b.extend_from_slice(&len.to_be_bytes());
        b.push(ty);
        b
    }

    #[test]
    fn keepalive_round_trip() {
        let bytes = Message::Keepalive.to_bytes(DecodeContext::default());
        assert_eq!(bytes, header(19, 4));
        assert_eq!(
            Message::parse(&bytes, DecodeContext::default()),
            Ok(Message::Keepalive)
        );
    }

    #[test]
    fn header_errors_name_rfc4271_6_1() {
        let ctx = DecodeContext::default();
        let mut bad_marker = header(19, 4);
        bad_marker[3] = 0;
        let e = Message::parse(&bad_marker, ctx).unwrap_err();
        assert_eq!((e.notification.code, e.notification.subcode), (1, 1));

        let e = frame_len(&header(4097, 2)).unwrap_err();
        assert_eq!((e.notification.code, e.notification.subcode), (1, 2));
        assert_eq!(e.notification.data, 4097u16.to_be_bytes());

        // KEEPALIVE must be exactly 19 bytes; the data is the length field.
        let mut long_ka = header(20, 4);
        long_ka.push(0);
        let e = Message::parse(&long_ka, ctx).unwrap_err();
        assert_eq!((e.notification.code, e.notification.subcode), (1, 2));
        assert_eq!(e.notification.data, [0, 20]);

        let e = Message::parse(&header(19, 9), ctx).unwrap_err();
        assert_eq!((e.notification.code, e.notification.subcode), (1, 3));
        assert_eq!(e.notification.data, [9]);

        // Incomplete input is not an error yet.
        assert_eq!(frame_len(&header(40, 2)), Ok(None));
        assert_eq!(frame_len(&MARKER), Ok(None));
    }

    #[test]
    fn route_refresh_length_is_its_own_error() {
        let ctx = DecodeContext::default();
        let rr = Message::RouteRefresh(RouteRefresh { afi: 1, safi: 1 });
        let bytes = rr.to_bytes(ctx);
        assert_eq!(bytes.len(), 23);
        assert_eq!(Message::parse(&bytes, ctx), Ok(rr));
        let mut long = header(24, 5);
        long.extend_from_slice(&[0, 1, 0, 1, 0]);
        let e = Message::parse(&long, ctx).unwrap_err();
        assert_eq!((e.notification.code, e.notification.subcode), (7, 1));
    }

    #[test]
    fn open_version_error_carries_our_version() {
        let ctx = DecodeContext::default();
        let mut m = header(29, 1);
        m.extend_from_slice(&[3, 0xfd, 0xe8, 0, 90, 10, 0, 0, 1, 0]);
        let e = Message::parse(&m, ctx).unwrap_err();
        assert_eq!(
            (e.notification.code, e.notification.subcode),
            (2, open::UNSUPPORTED_VERSION)
        );
        assert_eq!(e.notification.data, [0, 4]);
    }
}
