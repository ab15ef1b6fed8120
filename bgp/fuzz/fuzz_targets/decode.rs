//! Arbitrary bytes through the BGP decoder. Byte 0 picks the decode
//! context (bit 0: 4-octet ASNs, bit 1: iBGP); the rest is a byte stream
//! split into messages as the session does (`frame_len`, then
//! `Message::parse`). Must never panic; every error names a NOTIFICATION
//! code 1..=7; a decoded message re-encodes to at most 4096 bytes and
//! decodes back to itself (discarded attributes aside, which are never
//! re-emitted).
#![no_main]

use libfuzzer_sys::fuzz_target;
use portico_bgp::wire::{DecodeContext, MAX_MESSAGE_LEN, Message, frame_len};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, mut stream)) = data.split_first() else {
        return;
    };
    let ctx = DecodeContext {
        four_octet_as: flags & 1 != 0,
        ibgp: flags & 2 != 0,
        extended_next_hop: flags & 4 != 0,
    };
    loop {
        let len = match frame_len(stream) {
            Ok(Some(len)) => len,
            Ok(None) => return,
            Err(e) => {
                assert!((1..=7).contains(&e.notification.code));
                return;
            }
        };
        match Message::parse(&stream[..len], ctx) {
            Ok(mut msg) => {
                if let Message::Update(u) = &mut msg {
                    u.discarded.clear();
                }
                let bytes = msg.to_bytes(ctx);
                assert!(bytes.len() <= MAX_MESSAGE_LEN);
                let mut again = Message::parse(&bytes, ctx).expect("re-encoded message decodes");
                if let Message::Update(u) = &mut again {
                    u.discarded.clear();
                }
                assert_eq!(again, msg);
            }
            Err(e) => {
                assert!((1..=7).contains(&e.notification.code), "{e}");
                return;
            }
        }
        stream = &stream[len..];
    }
});
