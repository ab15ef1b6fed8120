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

/// Largest `maxwin`: a 16-bit window shifted by the largest scale (14,
/// RFC 7323 §2.3) is below 2^30, so the top two bits of the stored word
/// hold the side's flags.
const MAXWIN_MASK: u32 = (1 << 30) - 1;
/// [`TcpWindow`]'s flag bit: the side sent an ACK (`rcv_nxt` is set).
const ACKED: u32 = 1 << 31;
/// [`TcpWindow`]'s flag bit: picked up mid-stream (not held to the window).
const LIBERAL: u32 = 1 << 30;

/// One direction's tracking state (see the module docs): 16 B, so a
/// flow's two sides fill half a cache line. The window scales live in the
/// flow record ([`WindowScales`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct TcpWindow {
    pub end: u32,
    pub maxend: u32,
    /// `maxwin` (0: not seen yet) in the low 30 bits, [`ACKED`] and
    /// [`LIBERAL`] above.
    maxwin_flags: u32,
    pub rcv_nxt: u32,
}

impl TcpWindow {
    /// A side that sent up to `end`, may send up to `maxend`, saw windows of
    /// up to `maxwin` (below 2^30; larger values are clamped) and last
    /// acknowledged `rcv_nxt`.
    pub const fn acked(end: u32, maxend: u32, maxwin: u32, rcv_nxt: u32) -> Self {
        let maxwin = if maxwin > MAXWIN_MASK {
            MAXWIN_MASK
        } else {
            maxwin
        };
        TcpWindow {
            end,
            maxend,
            maxwin_flags: maxwin | ACKED,
            rcv_nxt,
        }
    }

    /// The largest window the peer advertised (scaled); 0: not seen yet.
    #[inline(always)]
    pub const fn maxwin(&self) -> u32 {
        self.maxwin_flags & MAXWIN_MASK
    }

    /// `rcv_nxt` is set (this side sent an ACK).
    #[inline(always)]
    pub const fn is_acked(&self) -> bool {
        self.maxwin_flags & ACKED != 0
    }

    /// Picked up mid-stream: data and ACKs are not held to the window.
    #[inline(always)]
    pub const fn is_liberal(&self) -> bool {
        self.maxwin_flags & LIBERAL != 0
    }

    /// Sets `maxwin` (`win < 2^30`: a scaled 16-bit window), keeping the flags.
    #[inline(always)]
    fn set_maxwin(&mut self, win: u32) {
        self.maxwin_flags = (self.maxwin_flags & !MAXWIN_MASK) | (win & MAXWIN_MASK);
    }
}

/// The window scales of a flow's two sides (RFC 7323 §2.2), one byte in
/// the flow record: the shift each side's SYN offered, a nibble per side
/// (original side low, reply side high; [`NONE_OFFERED`]: none, or no SYN
/// seen). A side's windows are scaled by its offer when *both* sides
/// offered one, else not at all.
///
/// That "both offered" is exactly when scaling is in effect: a SYN-ACK
/// turns scaling on iff both offers are set, a SYN (without ACK) clears
/// the peer's offer, and nothing else changes them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct WindowScales(u8);

/// A side's nibble in [`WindowScales`] when its SYN carried no window
/// scale option (or was not seen).
pub const NONE_OFFERED: u8 = 0x0f;

/// [`WindowScales::scale`] of every byte and side.
static SCALES: [[u8; 2]; 256] = {
    let mut t = [[0u8; 2]; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = [
            WindowScales::scale_of(b as u8, 0),
            WindowScales::scale_of(b as u8, 1),
        ];
        b += 1;
    }
    t
};

impl Default for WindowScales {
    fn default() -> Self {
        Self::NONE
    }
}

impl WindowScales {
    /// Neither side offered (no SYN seen).
    pub const NONE: WindowScales = WindowScales(NONE_OFFERED << 4 | NONE_OFFERED);

    /// Scaling in effect with these shifts (each clamped to 14).
    pub const fn both(original: u8, reply: u8) -> Self {
        let o = if original > 14 { 14 } else { original };
        let r = if reply > 14 { 14 } else { reply };
        WindowScales(r << 4 | o)
    }

    #[inline(always)]
    const fn shift(side: Dir) -> u32 {
        4 * side as u32
    }

    /// The shift `side`'s SYN offered (`None`: none).
    #[inline]
    pub const fn offered(self, side: Dir) -> Option<u8> {
        match (self.0 >> Self::shift(side)) & 0x0f {
            NONE_OFFERED => None,
            n => Some(n),
        }
    }

    /// The shift in effect for the windows `side` sends (a table lookup:
    /// it runs for every TCP packet).
    #[inline(always)]
    pub fn scale(self, side: Dir) -> u8 {
        SCALES
            .get(usize::from(self.0))
            .map_or(0, |s| s[side as usize])
    }

    /// [`WindowScales::scale`] computed.
    const fn scale_of(b: u8, side: usize) -> u8 {
        if b & 0x0f == NONE_OFFERED || b >> 4 == NONE_OFFERED {
            0
        } else {
            (b >> (4 * side)) & 0x0f
        }
    }

    #[inline(always)]
    fn set_offered(&mut self, side: Dir, offered: Option<u8>) {
        let n = offered.map_or(NONE_OFFERED, |w| w.min(14));
        let sh = Self::shift(side);
        self.0 = (self.0 & !(0x0f << sh)) | n << sh;
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
/// reply direction's) and the scales a SYN offers. Inlined into the flow
/// stage: the call's register saving measured 14 instructions per TCP
/// packet.
#[inline(always)]
pub fn check(
    wins: &mut [TcpWindow; 2],
    scales: &mut WindowScales,
    dir: Dir,
    seg: &SegmentInfo,
) -> WindowVerdict {
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
        // (Re)initialise the sender from its SYN / SYN-ACK (acked and
        // liberal cleared).
        sender.end = end;
        sender.maxend = end;
        sender.maxwin_flags = u32::from(seg.window).max(1);
        scales.set_offered(dir, seg.wscale);
        if has_ack {
            // SYN-ACK: scaling is on only if both offered it (which
            // `WindowScales::scale` reads off the two offers).
            note_ack(sender, receiver, seg.ack, u32::from(seg.window));
        } else {
            // A SYN: the peer's history (its offer too) is gone.
            *receiver = TcpWindow::default();
            scales.set_offered(dir.reverse(), None);
        }
        return WindowVerdict::Accept;
    }
    let win = u32::from(seg.window) << scales.scale(dir);
    let mut sender_maxwin = sender.maxwin();
    if sender_maxwin == 0 {
        // Picked up mid-stream: believe the first segment, and the rest.
        sender_maxwin = win.max(1);
        sender.maxwin_flags = (sender.maxwin_flags & ACKED) | LIBERAL | sender_maxwin;
        receiver.maxwin_flags |= LIBERAL;
        sender.end = end;
        sender.maxend = end.wrapping_add(sender_maxwin);
        if receiver.maxwin() == 0 && has_ack {
            receiver.end = seg.ack;
            receiver.maxend = seg.ack;
        }
    }
    let receiver_maxwin = receiver.maxwin();
    let ack = if has_ack { seg.ack } else { receiver.end };
    let max_ack_window = sender_maxwin.max(MAX_ACK_WINDOW_MIN);
    let in_window = !after(seg.seq, sender.maxend)
        && !before(end, sender.end.wrapping_sub(receiver_maxwin.max(1)))
        && !after(ack, receiver.end)
        && !before(ack, receiver.end.wrapping_sub(max_ack_window));

    if seg.flags & tcp_flags::RST != 0 {
        let rcv_nxt = if receiver.is_acked() {
            receiver.rcv_nxt
        } else {
            sender.end
        };
        if seg.seq == rcv_nxt || (receiver_maxwin == 0 && !receiver.is_acked()) {
            return WindowVerdict::Accept;
        }
        if after(seg.seq, rcv_nxt) && !after(seg.seq, sender.maxend) {
            let window = sender.maxend.wrapping_sub(rcv_nxt) >> scales.scale(dir.reverse());
            return WindowVerdict::Challenge {
                seq: receiver.end,
                ack: rcv_nxt,
                window: u16::try_from(window).unwrap_or(u16::MAX),
            };
        }
        return WindowVerdict::OutOfWindow;
    }
    if !in_window && !sender.is_liberal() {
        return WindowVerdict::OutOfWindow;
    }
    if sender_maxwin < win {
        sender.set_maxwin(win);
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
    sender.maxwin_flags |= ACKED;
    let limit = ack.wrapping_add(win.max(1));
    if after(limit, receiver.maxend) || receiver.maxwin() == 0 {
        receiver.maxend = limit;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::tcp::flags::{ACK, FIN, PSH, RST, SYN};
    use proptest::prelude::*;

    /// A flow's windows and scales.
    type W = ([TcpWindow; 2], WindowScales);

    fn chk(w: &mut W, dir: Dir, seg: &SegmentInfo) -> WindowVerdict {
        check(&mut w.0, &mut w.1, dir, seg)
    }

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
    fn established() -> W {
        let mut w = W::default();
        assert_eq!(
            chk(&mut w, Dir::Original, &seg(SYN, 100, 0, 0, 1000)),
            WindowVerdict::Accept
        );
        assert_eq!(
            chk(&mut w, Dir::Reply, &seg(SYN | ACK, 900, 101, 0, 1000)),
            WindowVerdict::Accept
        );
        assert_eq!(
            chk(&mut w, Dir::Original, &seg(ACK, 101, 901, 0, 1000)),
            WindowVerdict::Accept
        );
        w
    }

    #[test]
    fn in_window_data_passes_and_moves_the_window() {
        let mut w = established();
        let v = chk(&mut w, Dir::Original, &seg(ACK | PSH, 101, 901, 500, 1000));
        assert_eq!(v, WindowVerdict::Accept);
        assert_eq!(w.0[0].end, 601);
        let v = chk(&mut w, Dir::Reply, &seg(ACK | PSH, 901, 601, 800, 1000));
        assert_eq!(v, WindowVerdict::Accept);
        // A retransmission of old data is still fine.
        let v = chk(&mut w, Dir::Original, &seg(ACK | PSH, 101, 901, 500, 1000));
        assert_eq!(v, WindowVerdict::Accept);
    }

    #[test]
    fn data_beyond_the_window_or_acking_unsent_data_is_out_of_window() {
        let mut w = established();
        // The server allowed 901 + 1000 = 1901: seq 5000 is beyond.
        let v = chk(&mut w, Dir::Reply, &seg(ACK, 5000, 101, 10, 1000));
        assert_eq!(v, WindowVerdict::OutOfWindow);
        // Acknowledging bytes the server never sent.
        let v = chk(&mut w, Dir::Original, &seg(ACK, 101, 50_000, 0, 1000));
        assert_eq!(v, WindowVerdict::OutOfWindow);
        // Far in the past.
        let v = chk(
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
            chk(&mut w.clone(), Dir::Original, &seg(RST, 101, 0, 0, 0)),
            WindowVerdict::Accept
        );
        assert_eq!(
            chk(&mut w.clone(), Dir::Original, &seg(RST, 150, 0, 0, 0)),
            WindowVerdict::Challenge {
                seq: 901,
                ack: 101,
                window: 1000
            }
        );
        assert_eq!(
            chk(&mut w, Dir::Original, &seg(RST | ACK, 100_000, 901, 0, 0)),
            WindowVerdict::OutOfWindow
        );
        // From the server: the client acknowledged 901.
        assert_eq!(
            chk(&mut w.clone(), Dir::Reply, &seg(RST, 901, 0, 0, 0)),
            WindowVerdict::Accept
        );
        assert_eq!(
            chk(&mut w, Dir::Reply, &seg(RST, 1200, 0, 0, 0)),
            WindowVerdict::Challenge {
                seq: 101,
                ack: 901,
                window: 1000
            }
        );
    }

    #[test]
    fn a_flow_picked_up_mid_stream_carries_on() {
        let mut w = W::default();
        assert_eq!(
            chk(&mut w, Dir::Original, &seg(ACK, 5000, 9000, 100, 500)),
            WindowVerdict::Accept
        );
        assert_eq!(
            chk(&mut w, Dir::Reply, &seg(ACK, 9000, 5100, 200, 500)),
            WindowVerdict::Accept
        );
        assert_eq!(
            chk(&mut w, Dir::Original, &seg(ACK | FIN, 5100, 9200, 0, 500)),
            WindowVerdict::Accept
        );
    }

    #[test]
    fn a_flow_picked_up_mid_stream_is_liberal_until_a_syn() {
        let mut w = W::default();
        chk(&mut w, Dir::Original, &seg(ACK, 5000, 9000, 100, 500));
        assert!(w.0[0].is_liberal() && w.0[1].is_liberal());
        // The scale is unknown: 60 segments of 1460 bytes past a raw window
        // of 500 still pass, and the windows move.
        for i in 0..60u32 {
            let v = chk(
                &mut w,
                Dir::Reply,
                &seg(ACK, 9000 + i * 1460, 5100, 1460, 500),
            );
            assert_eq!(v, WindowVerdict::Accept, "segment {i}");
        }
        assert_eq!(w.0[1].end, 9000 + 60 * 1460);
        // A new SYN starts a tracked connection again.
        chk(&mut w, Dir::Original, &seg(SYN, 100, 0, 0, 1000));
        assert!(!w.0[0].is_liberal());
    }

    #[test]
    fn strict_tracking_drops_what_a_liberal_flow_accepts() {
        let mut w = established();
        let v = chk(
            &mut w,
            Dir::Reply,
            &seg(ACK, 901 + 10 * 1460, 101, 1460, 1000),
        );
        assert_eq!(v, WindowVerdict::OutOfWindow);
    }

    #[test]
    fn window_scale_applies_only_when_both_sides_offer_it() {
        let mut w = W::default();
        let syn = SegmentInfo {
            wscale: Some(7),
            ..seg(SYN, 100, 0, 0, 1000)
        };
        chk(&mut w, Dir::Original, &syn);
        chk(&mut w, Dir::Reply, &seg(SYN | ACK, 900, 101, 0, 1000));
        assert_eq!((w.1.scale(Dir::Original), w.1.scale(Dir::Reply)), (0, 0));
        let synack = SegmentInfo {
            wscale: Some(3),
            ..seg(SYN | ACK, 900, 101, 0, 1000)
        };
        chk(&mut w, Dir::Original, &syn);
        chk(&mut w, Dir::Reply, &synack);
        assert_eq!((w.1.scale(Dir::Original), w.1.scale(Dir::Reply)), (7, 3));
    }

    #[test]
    fn the_largest_scaled_window_and_the_flags_share_a_word_exactly() {
        let mut w = W::default();
        let syn = SegmentInfo {
            wscale: Some(15), // clamped to 14 (RFC 7323 §2.3)
            ..seg(SYN, 100, 0, 0, 65_535)
        };
        chk(&mut w, Dir::Original, &syn);
        assert_eq!(w.1.offered(Dir::Original), Some(14));
        assert_eq!(w.1.offered(Dir::Reply), None);
        let synack = SegmentInfo {
            wscale: Some(14),
            ..seg(SYN | ACK, 900, 101, 0, 65_535)
        };
        chk(&mut w, Dir::Reply, &synack);
        assert_eq!((w.1.scale(Dir::Original), w.1.scale(Dir::Reply)), (14, 14));
        assert!(w.0[1].is_acked() && !w.0[0].is_acked());
        chk(&mut w, Dir::Original, &seg(ACK, 101, 901, 0, 65_535));
        let top = 65_535u32 << 14;
        assert_eq!(w.0[0].maxwin(), top, "below 2^30, flags apart");
        assert!(w.0[0].is_acked() && !w.0[0].is_liberal());
        assert_eq!(w.0[1].maxend, 901 + top);
        // The widest window is still in force: data at its far end passes.
        let v = chk(&mut w, Dir::Reply, &seg(ACK, 901 + top - 1, 101, 1, 65_535));
        assert_eq!(v, WindowVerdict::Accept);
    }

    #[test]
    fn a_syn_clears_the_peers_offer_and_scaling_needs_both() {
        let mut s = WindowScales::default();
        assert_eq!((s.scale(Dir::Original), s.scale(Dir::Reply)), (0, 0));
        assert_eq!(s.offered(Dir::Reply), None);
        s = WindowScales::both(3, 20);
        assert_eq!((s.scale(Dir::Original), s.scale(Dir::Reply)), (3, 14));
        // A new SYN from the reply side forgets the original side's offer:
        // nothing is scaled until a SYN-ACK finds both again.
        let mut w: W = ([TcpWindow::acked(1, 2, 3, 4); 2], s);
        let syn = SegmentInfo {
            wscale: Some(5),
            ..seg(SYN, 900, 0, 0, 1000)
        };
        chk(&mut w, Dir::Reply, &syn);
        assert_eq!(w.1.offered(Dir::Reply), Some(5));
        assert_eq!(w.1.offered(Dir::Original), None);
        assert_eq!((w.1.scale(Dir::Original), w.1.scale(Dir::Reply)), (0, 0));
        assert_eq!(w.0[0], TcpWindow::default());
        // Every byte decodes as the computation says.
        for b in 0..=255u8 {
            let s = WindowScales(b);
            let on = s.offered(Dir::Original).is_some() && s.offered(Dir::Reply).is_some();
            for side in [Dir::Original, Dir::Reply] {
                let want = if on { s.offered(side).unwrap_or(0) } else { 0 };
                assert_eq!(s.scale(side), want, "byte {b:#04x}");
            }
        }
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
            let mut w = W::default();
            let win = 65_535u16;
            chk(&mut w, Dir::Original, &seg(SYN, isn_c, 0, 0, win));
            chk(&mut w, Dir::Reply, &seg(SYN | ACK, isn_s, isn_c.wrapping_add(1), 0, win));
            let (mut c, mut s) = (isn_c.wrapping_add(1), isn_s.wrapping_add(1));
            for (from_client, len) in sends {
                let (dir, seq, ack) = if from_client { (Dir::Original, c, s) } else { (Dir::Reply, s, c) };
                let v = chk(&mut w, dir, &seg(ACK | PSH, seq, ack, len, win));
                prop_assert_eq!(v, WindowVerdict::Accept);
                if from_client { c = c.wrapping_add(len) } else { s = s.wrapping_add(len) }
                // The peer acknowledges at once.
                let (dir, seq, ack) = if from_client { (Dir::Reply, s, c) } else { (Dir::Original, c, s) };
                prop_assert_eq!(chk(&mut w, dir, &seg(ACK, seq, ack, 0, win)), WindowVerdict::Accept);
            }
        }
    }
}
