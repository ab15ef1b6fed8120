//! The sink's echo transform: a received probe becomes its answer in
//! place, in the frame's own buffer.
//!
//! Invariants:
//! * Only a pktgen probe ([`KIND_PROBE`]) is echoed; an echo is never echoed
//!   again, and a frame that is not a probe is left unchanged.
//! * The answer swaps MACs, addresses and ports, keeps the probe's sequence
//!   and timestamp (so the sender can compute the round trip) and carries
//!   valid checksums. A TCP SYN is answered with a SYN-ACK and a TCP data
//!   segment with the sink's next data segment, as the TCP stream
//!   invariant of the `stream` module states.
//! * Parsing never panics on any input: every access is bounds-checked.

use super::frame::{
    ECHO_MAGIC, IP_OFF, KIND_PROBE, PROTO_TCP, Probe, TCP_ACK, TCP_PSH, TCP_SYN, be32_at,
    fill_checksums, layout, read_probe,
};

/// Turn a received probe into its echo in place: swap MACs, addresses and
/// ports, mark the probe [`KIND_ECHO`](super::KIND_ECHO), answer a SYN with a SYN-ACK
/// (ack = seq + 1) and refill the checksums. Returns the probe, or `None`
/// (frame unchanged) if it is not a pktgen probe.
pub fn echo_in_place(frame: &mut [u8]) -> Option<Probe> {
    let l = layout(frame)?;
    let probe = read_probe(frame.get(l.payload_off..l.ip_end)?)?;
    if probe.kind != KIND_PROBE {
        return None;
    }
    let (macs, _) = frame.split_at_mut_checked(12)?;
    let (dst, src) = macs.split_at_mut(6);
    dst.swap_with_slice(src);
    let addrs = frame.get_mut(IP_OFF + 12..IP_OFF + 20)?;
    let (a, b) = addrs.split_at_mut(4);
    a.swap_with_slice(b);
    let ports = frame.get_mut(l.l4_off..l.l4_off + 4)?;
    let (a, b) = ports.split_at_mut(2);
    a.swap_with_slice(b);
    if l.proto == PROTO_TCP {
        let seq = be32_at(frame, l.l4_off + 4)?;
        let flags = *frame.get(l.l4_off + 13)?;
        let (reply_seq, reply_ack, reply_flags) = if flags & TCP_SYN != 0 {
            // SYN-ACK: the sink's ISN is the client's, acking the SYN only.
            (seq, seq.wrapping_add(1), TCP_SYN | TCP_ACK)
        } else {
            // Data of an established-like stream: echo the payload as the
            // sink's next segment, acking the client's payload.
            let ack = be32_at(frame, l.l4_off + 8)?;
            let payload_len = (l.ip_end - l.payload_off) as u32;
            (ack, seq.wrapping_add(payload_len), TCP_ACK | TCP_PSH)
        };
        frame
            .get_mut(l.l4_off + 4..l.l4_off + 8)?
            .copy_from_slice(&reply_seq.to_be_bytes());
        frame
            .get_mut(l.l4_off + 8..l.l4_off + 12)?
            .copy_from_slice(&reply_ack.to_be_bytes());
        *frame.get_mut(l.l4_off + 13)? = reply_flags;
    }
    frame
        .get_mut(l.payload_off..l.payload_off + 4)?
        .copy_from_slice(&ECHO_MAGIC.to_be_bytes());
    fill_checksums(frame, &l)?;
    Some(probe)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pktgen::frame::test_frames::{l4_ok, spec};
    use crate::pktgen::frame::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn stamped_frames_parse_back_and_checksum(
            tcp in any::<bool>(),
            flows in 1u32..100_000,
            extra in 0usize..1400,
            seq in any::<u64>(),
            sent_ns in any::<u64>(),
        ) {
            let proto = if tcp { TrafficProto::TcpSyn } else { TrafficProto::Udp };
            let s = spec(proto, flows, proto.min_frame_bytes() + extra);
            let mut frame = s.template();
            prop_assert_eq!(frame.len(), s.frame_bytes);
            prop_assert!(stamp(&mut frame, &s, seq, sent_ns));
            prop_assert!(l4_ok(&frame));
            prop_assert_eq!(parse_probe(&frame), Some(Probe { kind: KIND_PROBE, seq, sent_ns }));
            let (ip, port) = s.flow_source(seq);
            prop_assert_eq!(&frame[26..30], &ip.octets()[..]);
            prop_assert_eq!(&frame[34..36], &port.to_be_bytes()[..]);

            // The echo swaps everything back and keeps the probe.
            let before = frame.clone();
            let probe = echo_in_place(&mut frame);
            prop_assert_eq!(probe, Some(Probe { kind: KIND_PROBE, seq, sent_ns }));
            prop_assert!(l4_ok(&frame));
            prop_assert_eq!(parse_probe(&frame), Some(Probe { kind: KIND_ECHO, seq, sent_ns }));
            prop_assert_eq!(&frame[0..6], &before[6..12]);
            prop_assert_eq!(&frame[6..12], &before[0..6]);
            prop_assert_eq!(&frame[26..30], &before[30..34]);
            prop_assert_eq!(&frame[30..34], &before[26..30]);
            prop_assert_eq!(&frame[34..36], &before[36..38]);
            if tcp {
                prop_assert_eq!(frame[34 + 13], TCP_SYN | TCP_ACK);
                let ack = u32::from_be_bytes(frame[42..46].try_into().unwrap());
                prop_assert_eq!(ack, (seq as u32).wrapping_add(1));
            }
            // An echo is never echoed again.
            prop_assert_eq!(echo_in_place(&mut frame), None);
        }

        #[test]
        fn parsing_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut b = bytes.clone();
            let _ = parse_probe(&bytes);
            let _ = echo_in_place(&mut b);
            let s = spec(TrafficProto::Udp, 1, 80);
            let _ = stamp(&mut b, &s, 1, 1);
        }
    }
}
