//! The seed inputs: one per kind of step, and whole conversations in both
//! families — a handshake, data and close through NAT, a UDP query, the
//! SYN proxy from the cookie to the splice and data both ways (and a
//! forged cookie), the `reset` policy without a flow and after the backend
//! left, a challenge ACK for an inexact RST, a client port remapped; a SYN
//! flood; the SYN proxy in mode `auto` engaging above its half-open
//! threshold and letting go again once the half-open flows expired; ECN
//! (ECN-setup SYN, ECT and CE codepoints) and SACK blocks through NAT and
//! through the SYN proxy. `dataplane/fuzz` commits them as its seed corpus
//! (`seeds/pipeline_sequence/`).

use crate::wire::tcp::flags::{ACK, CWR, ECE, FIN, PSH, RST, SYN};

/// Bits of a client segment's `to` operand (see the encoding table).
const V6: u8 = 2;
const PROXY: u8 = 1 << 2;
const STRICT: u8 = 2 << 2;
const DIRECT: u8 = 3 << 2;
const DIRECT2: u8 = 4 << 2;
const AUTO: u8 = 5 << 2;
const SYN_OPTIONS: u8 = 0x20;
const TIMESTAMPS: u8 = 0x40;
/// Bits of an answer's `which` operand.
const BACKEND: u8 = 1;
const ANSWER_V6: u8 = 2;

/// A client segment (op 0) without payload.
fn tcp(sport: u8, flags: u8, seq: u32, to: u8) -> Vec<u8> {
    let mut step = vec![0, sport, flags];
    step.extend(seq.to_be_bytes());
    step.extend([0, 0, 0, 0, to]);
    step
}

/// Bits of a marks byte (`segment::Marks`).
const ECT0: u8 = 2;
const CE: u8 = 3;
const SACK_TWO: u8 = 2 << 2;
const DSACK: u8 = 0x10;

/// A client segment with a marks byte (op 0 with bit 3).
fn tcp_marked(sport: u8, flags: u8, seq: u32, to: u8, marks: u8) -> Vec<u8> {
    let mut step = tcp(sport, flags, seq, to);
    step[0] |= 8;
    step.push(marks);
    step
}

/// The peer's answer to the gateway's last segment (op 2 with bit 3).
fn answer(which: u8, flags: u8, dseq: i8, dack: i8, payload: &[u8]) -> Vec<u8> {
    let mut step = vec![0x0a, which | (payload.len() as u8) << 2, flags];
    step.extend([dseq as u8, dack as u8]);
    step.extend(payload);
    step
}

/// [`answer`] with a marks byte (opcode bit 4).
fn answer_marked(which: u8, flags: u8, marks: u8, payload: &[u8]) -> Vec<u8> {
    let mut step = answer(which, flags, 0, 0, payload);
    step[0] |= 0x10;
    step.insert(5, marks);
    step
}

/// A handshake with the backend, then data, a close and the last ACK, in
/// the family `v6` says (`ANSWER_V6` or 0), for a SYN already sent.
fn conversation(v6: u8) -> Vec<u8> {
    [
        answer(BACKEND | v6, SYN | ACK, 0, 0, b""),
        answer(v6, ACK, 0, 0, b""),
        answer(v6, ACK | PSH, 0, 0, b"GET "),
        answer(BACKEND | v6, ACK | PSH, 0, 0, b"200 "),
        answer(v6, FIN | ACK, 0, 0, b""),
        answer(BACKEND | v6, FIN | ACK, 0, 0, b""),
        answer(v6, ACK, 0, 0, b""),
    ]
    .concat()
}

/// The SYN proxy: a SYN with options and timestamps, the ACK of its cookie,
/// the backend's SYN-ACK (the splice), data both ways, a close; then a
/// forged cookie (acknowledging one past it).
fn proxied(to: u8, v6: u8) -> Vec<u8> {
    [
        tcp(4, SYN, 1_000_000, to | PROXY | SYN_OPTIONS | TIMESTAMPS),
        answer(v6, ACK, 0, 0, b""),
        answer(BACKEND | v6, SYN | ACK, 0, 0, b""),
        answer(v6, ACK | PSH, 0, 0, b"GET "),
        answer(BACKEND | v6, ACK | PSH, 0, 0, b"200 "),
        answer(v6, FIN | ACK, 0, 0, b""),
        answer(BACKEND | v6, FIN | ACK, 0, 0, b""),
        tcp(5, SYN, 2_000_000, to | PROXY),
        answer(v6, ACK, 0, 1, b""),
    ]
    .concat()
}

/// The `reset` policy: an ACK without a flow, then a flow whose backends
/// all leave and the client's next segment.
fn reset(to: u8) -> Vec<u8> {
    [
        tcp(6, ACK, 5, to | STRICT),
        tcp(6, SYN, 1_000, to | STRICT),
        vec![6, 0],
        tcp(6, ACK, 1_001, to | STRICT),
        vec![6, 7],
    ]
    .concat()
}

/// An established flow, then a RST from the backend 50 bytes into the
/// window (a challenge ACK), then an exact one.
fn challenge(to: u8, v6: u8) -> Vec<u8> {
    [
        tcp(7, SYN, 1_000, to),
        answer(BACKEND | v6, SYN | ACK, 0, 0, b""),
        answer(v6, ACK, 0, 0, b""),
        answer(BACKEND | v6, RST, 50, 0, b""),
        answer(BACKEND | v6, RST, 0, 0, b""),
    ]
    .concat()
}

/// One client port towards two services without SNAT on the same backend
/// port: the second flow's client port is remapped; its backend answers.
fn remap(to: u8, v6: u8) -> Vec<u8> {
    [
        tcp(8, SYN, 1_000, to | DIRECT),
        tcp(8, SYN, 1_000, to | DIRECT2),
        answer(BACKEND | v6, SYN | ACK, 0, 0, b""),
        answer(v6, ACK, 0, 0, b""),
    ]
    .concat()
}

/// The SYN proxy in mode `auto`: three SYNs make three half-open flows
/// (the threshold is two), the fourth gets a cookie, its ACK validates;
/// time passes (everything expires) and the next SYN makes a flow again.
fn auto(to: u8, v6: u8) -> Vec<u8> {
    [
        tcp(9, SYN, 1_000, to | AUTO),
        tcp(10, SYN, 1_000, to | AUTO),
        tcp(11, SYN, 1_000, to | AUTO),
        tcp(12, SYN, 1_000, to | AUTO | SYN_OPTIONS | TIMESTAMPS),
        answer(v6, ACK, 0, 0, b""),
        vec![5, 0xff, 0xff, 10],
        tcp(13, SYN, 1_000, to | AUTO),
    ]
    .concat()
}

/// ECN and SACK through NAT: an ECN-setup SYN, the backend's ECN-setup
/// SYN-ACK, data marked ECT(0) both ways, a CE-marked segment and its
/// echo (ECE, then CWR), SACK blocks (and a D-SACK block) both ways, a
/// close.
fn ecn_sack(to: u8, v6: u8) -> Vec<u8> {
    [
        tcp_marked(14, SYN | ECE | CWR, 1_000, to | SYN_OPTIONS | TIMESTAMPS, 0),
        answer(BACKEND | v6, SYN | ACK | ECE, 0, 0, b""),
        answer(v6, ACK, 0, 0, b""),
        answer_marked(v6, ACK | PSH, ECT0, b"GET "),
        answer_marked(BACKEND | v6, ACK | PSH, CE | SACK_TWO, b"200 "),
        answer_marked(v6, ACK | ECE, ECT0 | SACK_TWO | DSACK, b""),
        answer_marked(BACKEND | v6, ACK | PSH | CWR, ECT0, b"ok"),
        answer(v6, FIN | ACK, 0, 0, b""),
        answer(BACKEND | v6, FIN | ACK, 0, 0, b""),
        answer(v6, ACK, 0, 0, b""),
    ]
    .concat()
}

/// ECN and SACK through the SYN proxy: an ECN-setup SYN with SACK
/// offered (the cookie records both, offers neither), the cookie's ACK
/// marked ECT(0), the splice, data with CE and SACK blocks both ways.
fn proxied_ecn_sack(to: u8, v6: u8) -> Vec<u8> {
    [
        tcp_marked(
            15,
            SYN | ECE | CWR,
            3_000_000,
            to | PROXY | SYN_OPTIONS | TIMESTAMPS,
            0,
        ),
        answer_marked(v6, ACK, ECT0, b""),
        answer(BACKEND | v6, SYN | ACK | ECE, 0, 0, b""),
        answer_marked(v6, ACK | PSH, CE | SACK_TWO, b"GET "),
        answer_marked(BACKEND | v6, ACK | PSH | ECE, ECT0 | DSACK, b"200 "),
        answer(v6, FIN | ACK, 0, 0, b""),
    ]
    .concat()
}

/// The seed inputs (see the module docs).
pub fn seed_inputs() -> Vec<Vec<u8>> {
    let reply = |pick: u8, flags: u8| vec![2, pick, flags, 0, 0, 0, 9, 0, 0, 0, 2];
    let mut seeds: Vec<Vec<u8>> = vec![
        [tcp(1, SYN, 1, 0), conversation(0)].concat(),
        [tcp(1, SYN, 1, V6), conversation(ANSWER_V6)].concat(),
        [vec![0x11, 3, b'q'], reply(0, 0), vec![5, 0x75, 0x30, 1]].concat(),
        [
            tcp(2, SYN, 1, 0),
            vec![3, 0, 0, 0],
            vec![6, 0b001],
            tcp(2, ACK, 2, 0),
        ]
        .concat(),
        [
            tcp(2, SYN, 1, V6),
            reply(0x80, SYN | ACK),
            vec![3, 0x80, 1, 0],
            tcp(2, FIN | ACK, 2, V6),
        ]
        .concat(),
        [
            tcp(3, SYN, 1, 1),
            tcp(3, RST, 2, 1),
            vec![7, 0],
            vec![7, 1, 2],
        ]
        .concat(),
        vec![
            4, 0, 20, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x08, 0x00, 0x45, 0, 0,
            20,
        ],
        proxied(0, 0),
        proxied(V6, ANSWER_V6),
        reset(0),
        reset(V6),
        challenge(0, 0),
        challenge(V6, ANSWER_V6),
        remap(0, 0),
        remap(V6, ANSWER_V6),
    ];
    // A SYN flood that fills the table, then time passing.
    let mut flood = Vec::new();
    for sport in 0..16 {
        flood.extend(tcp(sport, SYN, 1, 0));
    }
    flood.extend([5, 0xff, 0xff, 10]);
    seeds.push(flood);
    seeds.extend([
        auto(0, 0),
        auto(V6, ANSWER_V6),
        ecn_sack(0, 0),
        ecn_sack(V6, ANSWER_V6),
        proxied_ecn_sack(0, 0),
        proxied_ecn_sack(V6, ANSWER_V6),
    ]);
    seeds
}
