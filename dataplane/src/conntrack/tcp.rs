//! The TCP connection state machine conntrack runs per flow.
//!
//! Simplified from Linux `nf_conntrack_proto_tcp.c` (the `tcp_conntracks`
//! table): states follow the RFC 9293 section 3.3.2 connection states as seen
//! by a middlebox that watches both directions, without sequence-window
//! tracking. A segment is classified by its flags exactly as Linux's
//! `get_conntrack_index` does: RST wins, then SYN (SYN or SYN/ACK), then FIN,
//! then ACK; a segment with none of these is "bare".
//!
//! `X` is the side that sent the first FIN, `Y` the other side. `O` is the
//! original direction (client), `R` the reply direction (backend). "keep"
//! means a valid retransmission or data segment: state unchanged, timer
//! refreshed. "invalid" means state unchanged and timer *not* refreshed (the
//! caller may drop the packet, as kube-proxy drops `ctstate INVALID`).
//!
//! | state        | segment                 | next                          |
//! |--------------|-------------------------|-------------------------------|
//! | any          | RST (either side)       | CLOSE                         |
//! | any          | bare (no SYN/FIN/ACK)   | invalid                       |
//! | SYN_SENT     | O SYN                   | keep (SYN retransmit)         |
//! | SYN_SENT     | R SYN/ACK               | SYN_RECV                      |
//! | SYN_SENT     | anything else           | invalid                       |
//! | SYN_RECV     | O SYN, R SYN/ACK        | keep (handshake retransmit)   |
//! | SYN_RECV     | O ACK                   | ESTABLISHED                   |
//! | SYN_RECV     | FIN from side X         | FIN_WAIT(X) (close before ESTABLISHED) |
//! | SYN_RECV     | anything else           | invalid                       |
//! | ESTABLISHED  | ACK (either side)       | keep                          |
//! | ESTABLISHED  | R SYN/ACK               | keep (client's ACK was lost)  |
//! | ESTABLISHED  | FIN from side X         | FIN_WAIT(X)                   |
//! | ESTABLISHED  | O SYN, O SYN/ACK, R SYN | invalid                       |
//! | FIN_WAIT(X)  | X FIN or X ACK          | keep (retransmit / ACKs)      |
//! | FIN_WAIT(X)  | Y ACK                   | CLOSE_WAIT(X)                 |
//! | FIN_WAIT(X)  | Y FIN                   | LAST_ACK(X) (also simultaneous close) |
//! | CLOSE_WAIT(X)| X FIN, X ACK, Y ACK     | keep (Y may still send data)  |
//! | CLOSE_WAIT(X)| Y FIN                   | LAST_ACK(X)                   |
//! | LAST_ACK(X)  | X ACK                   | TIME_WAIT                     |
//! | LAST_ACK(X)  | X FIN, Y FIN, Y ACK     | keep                          |
//! | TIME_WAIT    | FIN or ACK              | keep                          |
//! | TIME_WAIT, CLOSE | O SYN               | SYN_SENT, *reopened* (new connection on the same tuple) |
//! | CLOSE        | FIN or ACK              | keep                          |
//! | FIN_WAIT .. CLOSE | any SYN not listed | invalid                       |
//!
//! Simultaneous close (both sides send FIN before seeing the other's): the
//! first FIN seen makes its sender X and moves to FIN_WAIT(X), the second (from
//! Y) to LAST_ACK(X), and X's ACK of Y's FIN to TIME_WAIT. Y's ACK in LAST_ACK
//! keeps the state, so the order the two ACKs arrive in does not matter.
//!
//! The first segment of a flow is normally a SYN
//! (SYN_SENT). A flow picked up mid-stream (Linux `nf_conntrack_tcp_loose`,
//! needed when ECMP moves an existing connection to this gateway) starts in
//! ESTABLISHED on an ACK, FIN_WAIT(O) on a FIN, CLOSE on a RST.

use crate::wire::tcp::flags as tcp_flags;

use super::Dir;

/// TCP connection states tracked per flow (the Linux conntrack names).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(u8)]
pub enum TcpState {
    SynSent = 0,
    SynRecv = 1,
    Established = 2,
    FinWait = 3,
    CloseWait = 4,
    LastAck = 5,
    TimeWait = 6,
    Close = 7,
}

impl TcpState {
    /// Every state, in `repr` order.
    pub const ALL: [TcpState; 8] = [
        TcpState::SynSent,
        TcpState::SynRecv,
        TcpState::Established,
        TcpState::FinWait,
        TcpState::CloseWait,
        TcpState::LastAck,
        TcpState::TimeWait,
        TcpState::Close,
    ];

    /// The upper-case name Linux conntrack uses (`conntrack -L`).
    pub const fn name(self) -> &'static str {
        match self {
            TcpState::SynSent => "SYN_SENT",
            TcpState::SynRecv => "SYN_RECV",
            TcpState::Established => "ESTABLISHED",
            TcpState::FinWait => "FIN_WAIT",
            TcpState::CloseWait => "CLOSE_WAIT",
            TcpState::LastAck => "LAST_ACK",
            TcpState::TimeWait => "TIME_WAIT",
            TcpState::Close => "CLOSE",
        }
    }
}

impl std::fmt::Display for TcpState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a segment is, for the state machine (Linux `get_conntrack_index`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Segment {
    Syn,
    SynAck,
    Fin,
    Ack,
    Rst,
    Bare,
}

fn classify(flags: u8) -> Segment {
    if flags & tcp_flags::RST != 0 {
        Segment::Rst
    } else if flags & tcp_flags::SYN != 0 {
        if flags & tcp_flags::ACK != 0 {
            Segment::SynAck
        } else {
            Segment::Syn
        }
    } else if flags & tcp_flags::FIN != 0 {
        Segment::Fin
    } else if flags & tcp_flags::ACK != 0 {
        Segment::Ack
    } else {
        Segment::Bare
    }
}

/// The result of one valid transition.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Next {
    pub state: TcpState,
    /// The side that sent the first FIN; meaningful in FIN_WAIT, CLOSE_WAIT
    /// and LAST_ACK only.
    pub first_fin: Dir,
    /// A SYN reopened a TIME_WAIT/CLOSE flow: a new connection on the same
    /// tuple, so per-connection flags (replied) start over.
    pub reopened: bool,
}

/// State of a flow created by a segment with `flags` from the original side.
pub(crate) fn initial_state(flags: u8) -> (TcpState, Dir) {
    let state = match classify(flags) {
        Segment::Rst => TcpState::Close,
        Segment::Fin => TcpState::FinWait,
        Segment::Ack => TcpState::Established,
        Segment::Syn | Segment::SynAck | Segment::Bare => TcpState::SynSent,
    };
    (state, Dir::Original)
}

/// Advances the state machine by one segment sent from side `dir`.
/// `None`: the segment is invalid in this state (keep state, no refresh).
pub(crate) fn step(state: TcpState, first_fin: Dir, dir: Dir, flags: u8) -> Option<Next> {
    use Dir::{Original as O, Reply as R};
    use Segment::*;
    use TcpState::*;

    let seg = classify(flags);
    let go = |state: TcpState| {
        Some(Next {
            state,
            first_fin,
            reopened: false,
        })
    };
    let keep = go(state);
    // Is the sender the side that sent the first FIN?
    let from_x = dir == first_fin;

    match (state, seg, dir) {
        (_, Rst, _) => go(Close),
        (_, Bare, _) => None,

        (SynSent, Syn, O) => keep,
        (SynSent, SynAck, R) => go(SynRecv),
        // A bare ACK answering a SYN: the backend still holds an older
        // connection on this tuple (typically TIME_WAIT after a gateway
        // restart handed out the same SNAT port) and sends a challenge ACK
        // (RFC 5961 §4, RFC 793's "ACK for a SYN in a synchronized state").
        // Linux passes it without a state change (`sIG`); the client then
        // answers with a RST, which clears the backend's old connection and
        // closes this flow, and its SYN retransmission opens a fresh one.
        // Dropping it would stall the client until TIME_WAIT ends.
        (SynSent, Ack, R) => keep,
        (SynSent, _, _) => None,

        (SynRecv, Syn, O) | (SynRecv, SynAck, R) => keep,
        (SynRecv, Ack, O) => go(Established),
        (SynRecv, Fin, _) | (Established, Fin, _) => Some(Next {
            state: FinWait,
            first_fin: dir,
            reopened: false,
        }),
        (SynRecv, _, _) => None,

        (Established, Ack, _) | (Established, SynAck, R) => keep,
        (Established, _, _) => None,

        (FinWait, Fin | Ack, _) if from_x => keep,
        (FinWait, Ack, _) => go(CloseWait),
        (FinWait, Fin, _) => go(LastAck),

        (CloseWait, Fin, _) if !from_x => go(LastAck),
        (CloseWait, Fin | Ack, _) => keep,

        (LastAck, Ack, _) if from_x => go(TimeWait),
        (LastAck, Fin | Ack, _) => keep,

        (TimeWait | Close, Syn, O) => Some(Next {
            state: SynSent,
            first_fin: O,
            reopened: true,
        }),
        (TimeWait | Close, Fin | Ack, _) => keep,

        (FinWait | CloseWait | LastAck | TimeWait | Close, Syn | SynAck, _) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::tcp::flags::{ACK, FIN, PSH, RST, SYN};
    use Dir::{Original as O, Reply as R};
    use TcpState::*;

    const SYNACK: u8 = SYN | ACK;
    const FINACK: u8 = FIN | ACK;

    /// (from, first_fin, dir, flags, expected next state or None = invalid,
    /// expected first_fin after).
    #[allow(clippy::type_complexity)]
    const TABLE: &[(TcpState, Dir, Dir, u8, Option<TcpState>, Dir)] = &[
        // Handshake.
        (SynSent, O, O, SYN, Some(SynSent), O),
        (SynSent, O, R, SYNACK, Some(SynRecv), O),
        (SynSent, O, R, ACK, Some(SynSent), O),
        (SynSent, O, O, ACK, None, O),
        (SynSent, O, O, FINACK, None, O),
        (SynSent, O, R, SYN, None, O),
        (SynRecv, O, O, ACK, Some(Established), O),
        (SynRecv, O, O, ACK | PSH, Some(Established), O),
        (SynRecv, O, R, SYNACK, Some(SynRecv), O),
        (SynRecv, O, O, SYN, Some(SynRecv), O),
        (SynRecv, O, R, ACK, None, O),
        // FIN before ESTABLISHED.
        (SynRecv, O, O, FINACK, Some(FinWait), O),
        (SynRecv, O, R, FINACK, Some(FinWait), R),
        // Data and retransmits.
        (Established, O, O, ACK, Some(Established), O),
        (Established, O, R, ACK | PSH, Some(Established), O),
        (Established, O, R, SYNACK, Some(Established), O),
        (Established, O, O, SYN, None, O),
        (Established, O, O, PSH, None, O),
        // Close initiated by the client.
        (Established, O, O, FINACK, Some(FinWait), O),
        (FinWait, O, O, FINACK, Some(FinWait), O),
        (FinWait, O, O, ACK, Some(FinWait), O),
        (FinWait, O, R, ACK, Some(CloseWait), O),
        (FinWait, O, R, FINACK, Some(LastAck), O),
        (CloseWait, O, R, ACK | PSH, Some(CloseWait), O),
        (CloseWait, O, O, ACK, Some(CloseWait), O),
        (CloseWait, O, O, FINACK, Some(CloseWait), O),
        (CloseWait, O, R, FINACK, Some(LastAck), O),
        (LastAck, O, O, ACK, Some(TimeWait), O),
        (LastAck, O, R, FINACK, Some(LastAck), O),
        (LastAck, O, R, ACK, Some(LastAck), O),
        // Close initiated by the backend.
        (Established, O, R, FINACK, Some(FinWait), R),
        (FinWait, R, O, ACK, Some(CloseWait), R),
        (FinWait, R, R, FINACK, Some(FinWait), R),
        (FinWait, R, O, FINACK, Some(LastAck), R),
        (CloseWait, R, O, FINACK, Some(LastAck), R),
        (LastAck, R, R, ACK, Some(TimeWait), R),
        (LastAck, R, O, ACK, Some(LastAck), R),
        // TIME_WAIT and CLOSE.
        (TimeWait, O, O, ACK, Some(TimeWait), O),
        (TimeWait, O, R, FINACK, Some(TimeWait), O),
        (TimeWait, O, R, SYN, None, O),
        (TimeWait, O, R, SYNACK, None, O),
        (Close, O, O, ACK, Some(Close), O),
        (Close, O, R, SYNACK, None, O),
        (FinWait, O, O, SYN, None, O),
        (LastAck, O, R, SYNACK, None, O),
    ];

    #[test]
    fn transition_table() {
        for &(from, fin, dir, flags, want, want_fin) in TABLE {
            let got = step(from, fin, dir, flags);
            assert_eq!(
                got.map(|n| n.state),
                want,
                "{from} first_fin={fin:?} {dir:?} flags={flags:#04x}"
            );
            if let Some(n) = got {
                assert_eq!(n.first_fin, want_fin, "{from} {dir:?} {flags:#04x}");
                assert!(!n.reopened);
            }
        }
    }

    #[test]
    fn rst_closes_every_state_from_either_side() {
        for state in TcpState::ALL {
            for dir in [O, R] {
                for extra in [0, ACK, SYN, FIN] {
                    let n = step(state, O, dir, RST | extra).map(|n| n.state);
                    assert_eq!(n, Some(Close), "{state} {dir:?}");
                }
            }
        }
    }

    #[test]
    fn bare_segment_is_invalid_everywhere() {
        for state in TcpState::ALL {
            assert_eq!(step(state, O, O, 0), None);
            assert_eq!(step(state, R, R, PSH), None);
        }
    }

    #[test]
    fn syn_reopens_time_wait_and_close_only() {
        for state in TcpState::ALL {
            let n = step(state, R, O, SYN);
            let reopened = n.is_some_and(|n| n.reopened);
            assert_eq!(reopened, matches!(state, TimeWait | Close), "{state}");
            if reopened {
                assert_eq!(n.map(|n| n.state), Some(SynSent));
            }
        }
    }

    #[test]
    fn simultaneous_close_reaches_time_wait_in_either_ack_order() {
        for (first, second) in [(O, R), (R, O)] {
            let a = step(Established, O, first, FINACK).expect("first FIN");
            assert_eq!((a.state, a.first_fin), (FinWait, first));
            let b = step(a.state, a.first_fin, second, FINACK).expect("second FIN");
            assert_eq!(b.state, LastAck);
            // The second FIN's sender ACKs first: no change yet.
            let c = step(b.state, b.first_fin, second, ACK).expect("Y ACK");
            assert_eq!(c.state, LastAck);
            let d = step(c.state, c.first_fin, first, ACK).expect("X ACK");
            assert_eq!(d.state, TimeWait);
        }
    }

    #[test]
    fn initial_states() {
        assert_eq!(initial_state(SYN).0, SynSent);
        assert_eq!(initial_state(ACK).0, Established);
        assert_eq!(initial_state(ACK | PSH).0, Established);
        assert_eq!(initial_state(FINACK).0, FinWait);
        assert_eq!(initial_state(RST | ACK).0, Close);
    }

    #[test]
    fn names_are_the_linux_ones() {
        let names: Vec<_> = TcpState::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(
            names,
            [
                "SYN_SENT",
                "SYN_RECV",
                "ESTABLISHED",
                "FIN_WAIT",
                "CLOSE_WAIT",
                "LAST_ACK",
                "TIME_WAIT",
                "CLOSE"
            ]
        );
        for (i, s) in TcpState::ALL.iter().enumerate() {
            assert_eq!(*s as usize, i);
        }
    }
}
