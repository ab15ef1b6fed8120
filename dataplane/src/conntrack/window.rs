//! TCP sequence-window tracking, as Linux's `tcp_in_window`
//! (net/netfilter/nf_conntrack_proto_tcp.c, after Guido van Rooij's "Real
//! Stateful TCP Packet Filtering in IP Filter"), and the RST rules of
//! RFC 5961 §3.2.
//!
//! Per direction the table keeps, for the side that *sends* in it
//! ([`TcpWindow`]): `end`, the highest sequence number it sent plus one;
//! `maxend`, the highest it may send (the peer's acknowledgment plus the
//! peer's window); `maxwin`, the largest window the peer advertised
//! (scaled, RFC 7323 §2.2: a shift applies only when both SYNs carried
//! one); `rcv_nxt`, the last acknowledgment it sent (what it expects next
//! from the peer, RFC 9293 §3.3.1's RCV.NXT).
//!
//! A segment from side S to side R (sequence `seq`, `end = seq + len (+1
//! for SYN, FIN)`, acknowledgment `ack`) is in the window when
//!
//! * `seq <= S.maxend` (not beyond what R allowed),
//! * `end >= S.end - R.maxwin` (not older than one window),
//! * with ACK: `R.end - max(S.maxwin, 66000) <= ack <= R.end` (it
//!   acknowledges nothing R did not send, nor anything too old).
//!
//! The flow's first SYN sets up its sender's side when the flow is created
//! (the flow stage calls [`check`] for it); SYNs (re)initialise their side
//! and are judged by the state machine only. A side not seen yet
//! (`maxwin == 0`) that sends something other than a SYN means the flow
//! was picked up mid-stream (e.g. after an ECMP change moved it to this
//! instance): its history, window scaling included, is lost, so both sides
//! become *liberal* as in Linux's `tcp_new` for such flows
//! (`IP_CT_TCP_FLAG_BE_LIBERAL`): their data and ACKs are accepted and
//! still move the windows; RSTs keep the RFC 5961 rules. The flow stage
//! picks flows up only for services with `tcp_pickup` (no SNAT); elsewhere
//! a TCP flow starts with a SYN.
//!
//! RSTs (RFC 5961 §3.2, R's RCV.NXT = R's last acknowledgment, or S.end
//! before R acknowledged anything): `seq == RCV.NXT` closes the flow;
//! `RCV.NXT < seq <= S.maxend` is answered with a *challenge ACK* (from R:
//! `seq = R.end`, `ack = RCV.NXT`) and changes nothing; anything else is
//! out of the window and dropped.

use super::Dir;
use crate::wire::tcp::flags as tcp_flags;

/// Linux's `MAXACKWCLAMP`: the oldest acknowledgment accepted is at least
/// this far behind.
const MAX_ACK_WINDOW_MIN: u32 = 66_000;

/// One direction's tracking state (see the module docs).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct TcpWindow {
    pub end: u32,
    pub maxend: u32,
    /// 0: not seen yet.
    pub maxwin: u32,
    pub rcv_nxt: u32,
    /// Window scale shift in effect for this side's window fields.
    pub scale: u8,
    /// The shift this side's SYN offered (`NONE_OFFERED`: none).
    pub offered: u8,
    /// `rcv_nxt` is set (this side sent an ACK).
    pub acked: bool,
    /// Picked up mid-stream: data and ACKs are not held to the window.
    pub liberal: bool,
}

/// [`TcpWindow::offered`] when the side's SYN carried no window scale (or
/// was not seen).
pub const NONE_OFFERED: u8 = 0xff;

impl Default for TcpWindow {
    /// A side not seen yet.
    fn default() -> Self {
        Self {
            end: 0,
            maxend: 0,
            maxwin: 0,
            rcv_nxt: 0,
            scale: 0,
            offered: NONE_OFFERED,
            acked: false,
            liberal: false,
        }
    }
}

/// What window tracking needs of a TCP segment.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct SegmentInfo {
    pub seq: u32,
    pub ack: u32,
    /// Payload bytes.
    pub len: u32,
    pub window: u16,
    pub flags: u8,
    /// The window scale option, on SYNs.
    pub wscale: Option<u8>,
}

/// The verdict of [`check`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum WindowVerdict {
    /// In the window (or a SYN): go on to the state machine.
    Accept,
    /// Data, ACK or RST outside the window: drop, change nothing.
    OutOfWindow,
    /// An RST inside the window but not at RCV.NXT: answer the sender with
    /// an ACK with these numbers and window field (from the receiver),
    /// change nothing.
    Challenge { seq: u32, ack: u32, window: u16 },
}

#[inline(always)]
fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

#[inline(always)]
fn after(a: u32, b: u32) -> bool {
    before(b, a)
}

/// Judge a segment travelling in `dir` and, if accepted, update the
/// windows (`wins[0]`: the original direction's sender, `wins[1]`: the
/// reply direction's).
#[inline]
pub fn check(wins: &mut [TcpWindow; 2], dir: Dir, seg: &SegmentInfo) -> WindowVerdict {
    let [w0, w1] = wins;
    let (sender, receiver) = match dir {
        Dir::Original => (w0, w1),
        Dir::Reply => (w1, w0),
    };
    let syn = seg.flags & tcp_flags::SYN != 0;
    let has_ack = seg.flags & tcp_flags::ACK != 0;
    let fin = seg.flags & tcp_flags::FIN != 0;
    let end = seg
        .seq
        .wrapping_add(seg.len)
        .wrapping_add(u32::from(syn) + u32::from(fin));

    if syn {
        // (Re)initialise the sender from its SYN / SYN-ACK.
        sender.end = end;
        sender.maxend = end;
        sender.maxwin = u32::from(seg.window).max(1);
        sender.offered = seg.wscale.map_or(NONE_OFFERED, |w| w.min(14));
        sender.acked = false;
        sender.liberal = false;
        if has_ack {
            // SYN-ACK: scaling is on only if both offered it.
            if sender.offered != NONE_OFFERED && receiver.offered != NONE_OFFERED {
                sender.scale = sender.offered;
                receiver.scale = receiver.offered;
            } else {
                sender.scale = 0;
                receiver.scale = 0;
            }
            note_ack(sender, receiver, seg.ack, u32::from(seg.window));
        } else {
            sender.scale = 0;
            *receiver = TcpWindow::default();
        }
        return WindowVerdict::Accept;
    }
    let win = u32::from(seg.window) << sender.scale;
    if sender.maxwin == 0 {
        // Picked up mid-stream: believe the first segment, and the rest.
        sender.liberal = true;
        receiver.liberal = true;
        sender.end = end;
        sender.maxwin = win.max(1);
        sender.maxend = end.wrapping_add(sender.maxwin);
        if receiver.maxwin == 0 && has_ack {
            receiver.end = seg.ack;
            receiver.maxend = seg.ack;
        }
    }
    let ack = if has_ack { seg.ack } else { receiver.end };
    let max_ack_window = sender.maxwin.max(MAX_ACK_WINDOW_MIN);
    let in_window = !after(seg.seq, sender.maxend)
        && !before(end, sender.end.wrapping_sub(receiver.maxwin.max(1)))
        && !after(ack, receiver.end)
        && !before(ack, receiver.end.wrapping_sub(max_ack_window));

    if seg.flags & tcp_flags::RST != 0 {
        let rcv_nxt = if receiver.acked {
            receiver.rcv_nxt
        } else {
            sender.end
        };
        if seg.seq == rcv_nxt || (receiver.maxwin == 0 && !receiver.acked) {
            return WindowVerdict::Accept;
        }
        if after(seg.seq, rcv_nxt) && !after(seg.seq, sender.maxend) {
            let window = sender.maxend.wrapping_sub(rcv_nxt) >> receiver.scale;
            return WindowVerdict::Challenge {
                seq: receiver.end,
                ack: rcv_nxt,
                window: u16::try_from(window).unwrap_or(u16::MAX),
            };
        }
        return WindowVerdict::OutOfWindow;
    }
    if !in_window && !sender.liberal {
        return WindowVerdict::OutOfWindow;
    }
    if sender.maxwin < win {
        sender.maxwin = win;
    }
    if after(end, sender.end) {
        sender.end = end;
    }
    if has_ack {
        note_ack(sender, receiver, seg.ack, win);
    }
    WindowVerdict::Accept
}

/// The sender acknowledged `ack` with window `win` (scaled): the receiver
/// may send up to `ack + win`.
#[inline(always)]
fn note_ack(sender: &mut TcpWindow, receiver: &mut TcpWindow, ack: u32, win: u32) {
    sender.rcv_nxt = ack;
    sender.acked = true;
    let limit = ack.wrapping_add(win.max(1));
    if after(limit, receiver.maxend) || receiver.maxwin == 0 {
        receiver.maxend = limit;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::tcp::flags::{ACK, FIN, PSH, RST, SYN};
    use proptest::prelude::*;

    fn seg(flags: u8, seq: u32, ack: u32, len: u32, window: u16) -> SegmentInfo {
        SegmentInfo {
            seq,
            ack,
            len,
            window,
            flags,
            wscale: None,
        }
    }

    /// Client ISN 100, server ISN 900, windows 1000 both ways.
    fn established() -> [TcpWindow; 2] {
        let mut w = [TcpWindow::default(); 2];
        assert_eq!(
            check(&mut w, Dir::Original, &seg(SYN, 100, 0, 0, 1000)),
            WindowVerdict::Accept
        );
        assert_eq!(
            check(&mut w, Dir::Reply, &seg(SYN | ACK, 900, 101, 0, 1000)),
            WindowVerdict::Accept
        );
        assert_eq!(
            check(&mut w, Dir::Original, &seg(ACK, 101, 901, 0, 1000)),
            WindowVerdict::Accept
        );
        w
    }

    #[test]
    fn in_window_data_passes_and_moves_the_window() {
        let mut w = established();
        let v = check(&mut w, Dir::Original, &seg(ACK | PSH, 101, 901, 500, 1000));
        assert_eq!(v, WindowVerdict::Accept);
        assert_eq!(w[0].end, 601);
        let v = check(&mut w, Dir::Reply, &seg(ACK | PSH, 901, 601, 800, 1000));
        assert_eq!(v, WindowVerdict::Accept);
        // A retransmission of old data is still fine.
        let v = check(&mut w, Dir::Original, &seg(ACK | PSH, 101, 901, 500, 1000));
        assert_eq!(v, WindowVerdict::Accept);
    }

    #[test]
    fn data_beyond_the_window_or_acking_unsent_data_is_out_of_window() {
        let mut w = established();
        // The server allowed 901 + 1000 = 1901: seq 5000 is beyond.
        let v = check(&mut w, Dir::Reply, &seg(ACK, 5000, 101, 10, 1000));
        assert_eq!(v, WindowVerdict::OutOfWindow);
        // Acknowledging bytes the server never sent.
        let v = check(&mut w, Dir::Original, &seg(ACK, 101, 50_000, 0, 1000));
        assert_eq!(v, WindowVerdict::OutOfWindow);
        // Far in the past.
        let v = check(
            &mut w,
            Dir::Original,
            &seg(ACK, 101u32.wrapping_sub(1 << 30), 901, 10, 1000),
        );
        assert_eq!(v, WindowVerdict::OutOfWindow);
    }

    #[test]
    fn rst_exact_closes_inexact_is_challenged_outside_is_dropped() {
        let mut w = established();
        // The server expects 101 next (its SYN-ACK acknowledged 101).
        assert_eq!(
            check(&mut w.clone(), Dir::Original, &seg(RST, 101, 0, 0, 0)),
            WindowVerdict::Accept
        );
        assert_eq!(
            check(&mut w.clone(), Dir::Original, &seg(RST, 150, 0, 0, 0)),
            WindowVerdict::Challenge {
                seq: 901,
                ack: 101,
                window: 1000
            }
        );
        assert_eq!(
            check(&mut w, Dir::Original, &seg(RST | ACK, 100_000, 901, 0, 0)),
            WindowVerdict::OutOfWindow
        );
        // From the server: the client acknowledged 901.
        assert_eq!(
            check(&mut w.clone(), Dir::Reply, &seg(RST, 901, 0, 0, 0)),
            WindowVerdict::Accept
        );
        assert_eq!(
            check(&mut w, Dir::Reply, &seg(RST, 1200, 0, 0, 0)),
            WindowVerdict::Challenge {
                seq: 101,
                ack: 901,
                window: 1000
            }
        );
    }

    #[test]
    fn a_flow_picked_up_mid_stream_carries_on() {
        let mut w = [TcpWindow::default(); 2];
        assert_eq!(
            check(&mut w, Dir::Original, &seg(ACK, 5000, 9000, 100, 500)),
            WindowVerdict::Accept
        );
        assert_eq!(
            check(&mut w, Dir::Reply, &seg(ACK, 9000, 5100, 200, 500)),
            WindowVerdict::Accept
        );
        assert_eq!(
            check(&mut w, Dir::Original, &seg(ACK | FIN, 5100, 9200, 0, 500)),
            WindowVerdict::Accept
        );
    }

    #[test]
    fn a_flow_picked_up_mid_stream_is_liberal_until_a_syn() {
        let mut w = [TcpWindow::default(); 2];
        check(&mut w, Dir::Original, &seg(ACK, 5000, 9000, 100, 500));
        assert!(w[0].liberal && w[1].liberal);
        // The scale is unknown: 60 segments of 1460 bytes past a raw window
        // of 500 still pass, and the windows move.
        for i in 0..60u32 {
            let v = check(
                &mut w,
                Dir::Reply,
                &seg(ACK, 9000 + i * 1460, 5100, 1460, 500),
            );
            assert_eq!(v, WindowVerdict::Accept, "segment {i}");
        }
        assert_eq!(w[1].end, 9000 + 60 * 1460);
        // A new SYN starts a tracked connection again.
        check(&mut w, Dir::Original, &seg(SYN, 100, 0, 0, 1000));
        assert!(!w[0].liberal);
    }

    #[test]
    fn strict_tracking_drops_what_a_liberal_flow_accepts() {
        let mut w = established();
        let v = check(
            &mut w,
            Dir::Reply,
            &seg(ACK, 901 + 10 * 1460, 101, 1460, 1000),
        );
        assert_eq!(v, WindowVerdict::OutOfWindow);
    }

    #[test]
    fn window_scale_applies_only_when_both_sides_offer_it() {
        let mut w = [TcpWindow::default(); 2];
        let syn = SegmentInfo {
            wscale: Some(7),
            ..seg(SYN, 100, 0, 0, 1000)
        };
        check(&mut w, Dir::Original, &syn);
        check(&mut w, Dir::Reply, &seg(SYN | ACK, 900, 101, 0, 1000));
        assert_eq!((w[0].scale, w[1].scale), (0, 0));
        let synack = SegmentInfo {
            wscale: Some(3),
            ..seg(SYN | ACK, 900, 101, 0, 1000)
        };
        check(&mut w, Dir::Original, &syn);
        check(&mut w, Dir::Reply, &synack);
        assert_eq!((w[0].scale, w[1].scale), (7, 3));
    }

    proptest! {
        /// A conversation where each side sends within what the other
        /// acknowledged and allowed is never out of the window.
        #[test]
        fn conforming_conversations_stay_in_window(
            isn_c in any::<u32>(),
            isn_s in any::<u32>(),
            sends in proptest::collection::vec((any::<bool>(), 0u32..1400), 1..40),
        ) {
            let mut w = [TcpWindow::default(); 2];
            let win = 65_535u16;
            check(&mut w, Dir::Original, &seg(SYN, isn_c, 0, 0, win));
            check(&mut w, Dir::Reply, &seg(SYN | ACK, isn_s, isn_c.wrapping_add(1), 0, win));
            let (mut c, mut s) = (isn_c.wrapping_add(1), isn_s.wrapping_add(1));
            for (from_client, len) in sends {
                let (dir, seq, ack) = if from_client { (Dir::Original, c, s) } else { (Dir::Reply, s, c) };
                let v = check(&mut w, dir, &seg(ACK | PSH, seq, ack, len, win));
                prop_assert_eq!(v, WindowVerdict::Accept);
                if from_client { c = c.wrapping_add(len) } else { s = s.wrapping_add(len) }
                // The peer acknowledges at once.
                let (dir, seq, ack) = if from_client { (Dir::Reply, s, c) } else { (Dir::Original, c, s) };
                prop_assert_eq!(check(&mut w, dir, &seg(ACK, seq, ack, 0, win)), WindowVerdict::Accept);
            }
        }
    }
}
