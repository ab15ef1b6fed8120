//! SYN cookies (RFC 4987 §3.6): the gateway's initial sequence number
//! towards a client carries, authenticated, everything it must remember
//! about the client's SYN, so a SYN costs no state at all.
//!
//! Layout of the 32-bit cookie:
//!
//! | bits   | field                                                      |
//! |--------|------------------------------------------------------------|
//! | 31..30 | time slice (64 s) modulo 4                                 |
//! | 29..27 | index of the client's MSS in [`MSS_TABLE`] (rounded down)  |
//! | 26..23 | the client's window scale (0..=14; 15: none)               |
//! | 22     | the client offered SACK                                    |
//! | 21..0  | MAC: keyed SipHash of the 4-tuple, the client's ISN, the   |
//! |        | slice and bits 31..22                                      |
//!
//! A cookie is accepted in its own slice and the next one (64–128 s), as
//! Linux accepts two counter values. The key is a per-process random
//! secret ([`CookieSecret::random`]), never a fixed seed; an attacker who
//! sees cookies learns 22 bits of MAC per guess, so a blind ACK is
//! accepted with probability 2^-22 (Linux's cookies have 24 bits).
//!
//! Timestamps (RFC 7323; RFC 4987 §3.6 on cookies and options): when the
//! client's SYN offers them, the gateway's SYN-ACK offers them too, with a
//! TSval whose low 6 bits repeat the client's options as Linux's
//! `cookie_init_timestamp` lays them out ([`timestamp`]: window scale or
//! 15, SACK-permitted, ECN) and whose high bits are the gateway's
//! millisecond clock, never ahead of it. The client echoes it as TSecr in
//! its ACK, where [`timestamp_agrees`] checks the bits against the
//! cookie's (one more check on a forged ACK; the cookie's bits are the
//! MAC-protected ones). SACK is recorded but not offered (the splice would
//! have to rewrite SACK blocks); ECN is recorded in the TSval but not
//! offered either.
//!
//! IPv6 (the Linux-style encoding above, as Linux's `cookie_v6_init_sequence`
//! uses for IPv6 too): the cookie carries no address bits, only what the
//! client's SYN said and a MAC, so nothing in its 32 bits depends on the
//! address width. What changes is the MAC's input, the whole 4-tuple:
//! both 128-bit addresses are hashed whole ([`CookieTuple`] is generic
//! over the family), so a client owning a /64 cannot make a cookie it
//! received at one address valid for another (a truncated or folded
//! address would let it choose colliding addresses); and the MSS table,
//! per family ([`StageFamily::COOKIE_MSS`]: IPv6's starts at 1220, RFC
//! 8200 §5's minimum MTU 1280 less 60 bytes of headers, as Linux's
//! `msstab` for IPv6 does; a smaller MSS rounds up to it).
//!
//! Generation and validation are a handful of integer operations and one
//! SipHash-1-3 over 24 bytes for IPv4, 48 for IPv6 (std's `RandomState`
//! keys): no allocation.

use crate::flow::IpFamily;
use crate::stage::family::StageFamily;
use std::hash::{BuildHasher, Hasher};
use std::net::Ipv4Addr;

/// MSS values an IPv4 cookie can carry; a client's MSS is rounded down
/// to one (IPv6: [`StageFamily::COOKIE_MSS`]).
pub const MSS_TABLE: [u16; 8] = <Ipv4Addr as StageFamily>::COOKIE_MSS;
/// Length of a time slice.
pub const SLICE_MS: u64 = 64_000;
const MAC_BITS: u32 = 22;
const MAC_MASK: u32 = (1 << MAC_BITS) - 1;
/// Window scale field value for "the client sent no window scale option".
pub const WSCALE_NONE: u8 = 15;

/// What a cookie remembers of the client's SYN.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct CookieData {
    /// The client's MSS, rounded down to a [`MSS_TABLE`] value.
    pub mss: u16,
    /// The client's window scale shift, or [`WSCALE_NONE`].
    pub wscale: u8,
    pub sack: bool,
}

impl CookieData {
    /// The data of an IPv4 SYN with these options (absent MSS: RFC
    /// 9293's 536; shifts above 14 are 14, RFC 7323 §2.3).
    pub fn from_options(mss: Option<u16>, wscale: Option<u8>, sack: bool) -> Self {
        Self::from_options_in(&MSS_TABLE, mss, wscale, sack)
    }

    /// The data of a SYN with these options, its MSS rounded down to one
    /// of `table` (up to its first).
    pub fn from_options_in(
        table: &[u16; 8],
        mss: Option<u16>,
        wscale: Option<u8>,
        sack: bool,
    ) -> Self {
        let mss = mss.unwrap_or(536);
        let idx = table.iter().rposition(|&m| m <= mss).unwrap_or(0);
        CookieData {
            mss: table[idx],
            wscale: wscale.map_or(WSCALE_NONE, |w| w.min(14)),
            sack,
        }
    }

    fn bits(self, table: &[u16; 8]) -> u32 {
        let idx = table.iter().position(|&m| m == self.mss).unwrap_or(0) as u32;
        idx << 7 | u32::from(self.wscale & 0xf) << 3 | u32::from(self.sack) << 2
    }

    fn from_bits(table: &[u16; 8], bits: u32) -> Self {
        CookieData {
            mss: table[(bits >> 7 & 7) as usize],
            wscale: (bits >> 3 & 0xf) as u8,
            sack: bits >> 2 & 1 == 1,
        }
    }
}

/// Low bits of a cookie timestamp (Linux's `TSBITS`).
const TS_BITS: u32 = 6;
const TS_WSCALE_MASK: u32 = 0xf;
const TS_SACK: u32 = 1 << 4;
const TS_ECN: u32 = 1 << 5;

/// The TSval of the gateway's SYN-ACK at `now_ms` for a SYN with `data`
/// (and ECN setup flags when `ecn`): the clock with its low 6 bits
/// replaced by the options, moved back one step of 64 when that would put
/// it ahead of the clock (later TSvals must not go backwards, RFC 7323
/// §5.3).
pub fn timestamp(now_ms: u64, data: CookieData, ecn: bool) -> u32 {
    let now = now_ms as u32;
    let options = u32::from(data.wscale) & TS_WSCALE_MASK
        | if data.sack { TS_SACK } else { 0 }
        | if ecn { TS_ECN } else { 0 };
    let ts = now >> TS_BITS << TS_BITS | options;
    if ts > now {
        ts.wrapping_sub(1 << TS_BITS)
    } else {
        ts
    }
}

/// Whether a TSecr echoing a [`timestamp`] carries the window scale and
/// SACK bits of the cookie's `data`.
pub fn timestamp_agrees(tsecr: u32, data: CookieData) -> bool {
    tsecr & TS_WSCALE_MASK == u32::from(data.wscale) & TS_WSCALE_MASK
        && (tsecr & TS_SACK != 0) == data.sack
}

/// The connection a cookie is bound to, as the client sent its SYN.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct CookieTuple<A = Ipv4Addr> {
    pub client: A,
    pub client_port: u16,
    pub service: A,
    pub service_port: u16,
}

/// The per-process key of the cookies' MAC.
#[derive(Clone, Debug)]
pub struct CookieSecret {
    keys: std::collections::hash_map::RandomState,
}

impl CookieSecret {
    /// A fresh random key (from the OS, once, when the pipeline is built).
    pub fn random() -> Self {
        CookieSecret {
            keys: std::collections::hash_map::RandomState::new(),
        }
    }

    fn mac<A: IpFamily>(&self, t: &CookieTuple<A>, client_isn: u32, slice: u64, high: u32) -> u32 {
        let mut h = self.keys.build_hasher();
        // The whole addresses (see the module docs on IPv6).
        h.write(t.client.octets().as_ref());
        h.write(t.service.octets().as_ref());
        h.write_u64(
            u64::from(t.client_port) << 48
                | u64::from(t.service_port) << 32
                | u64::from(client_isn),
        );
        h.write_u64(slice << 32 | u64::from(high));
        h.finish() as u32 & MAC_MASK
    }

    /// The cookie (the gateway's ISN) for a SYN with sequence number
    /// `client_isn` at `now_ms`.
    pub fn generate<A: StageFamily>(
        &self,
        t: &CookieTuple<A>,
        client_isn: u32,
        data: CookieData,
        now_ms: u64,
    ) -> u32 {
        let slice = now_ms / SLICE_MS;
        let high = ((slice & 3) as u32) << 30 | data.bits(&A::COOKIE_MSS) << 20;
        high | self.mac(t, client_isn, slice, high)
    }

    /// The data of `cookie` if it is one this secret made for this tuple
    /// and client ISN in the current or the previous time slice.
    pub fn validate<A: StageFamily>(
        &self,
        t: &CookieTuple<A>,
        client_isn: u32,
        cookie: u32,
        now_ms: u64,
    ) -> Option<CookieData> {
        let now = now_ms / SLICE_MS;
        let high = cookie & !MAC_MASK;
        let slice = [now, now.wrapping_sub(1)]
            .into_iter()
            .find(|s| (s & 3) as u32 == cookie >> 30)?;
        (self.mac(t, client_isn, slice, high) == cookie & MAC_MASK)
            .then(|| CookieData::from_bits(&A::COOKIE_MSS, high >> 20))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const T: CookieTuple = CookieTuple {
        client: Ipv4Addr::new(198, 51, 100, 7),
        client_port: 40_000,
        service: Ipv4Addr::new(203, 0, 113, 10),
        service_port: 80,
    };

    #[test]
    fn options_round_down_to_the_table() {
        let d = CookieData::from_options(Some(1500), Some(7), true);
        assert_eq!((d.mss, d.wscale, d.sack), (1460, 7, true));
        let d = CookieData::from_options(Some(1300), None, false);
        assert_eq!((d.mss, d.wscale, d.sack), (1220, WSCALE_NONE, false));
        assert_eq!(CookieData::from_options(None, Some(20), false).wscale, 14);
        assert_eq!(CookieData::from_options(Some(100), None, false).mss, 536);
    }

    #[test]
    fn a_cookie_is_valid_in_its_slice_and_the_next_only() {
        let s = CookieSecret::random();
        let d = CookieData::from_options(Some(1460), Some(9), false);
        let at = 10 * SLICE_MS + 5;
        let c = s.generate(&T, 1000, d, at);
        assert_eq!(s.validate(&T, 1000, c, at), Some(d));
        assert_eq!(s.validate(&T, 1000, c, at + SLICE_MS), Some(d), "old slice");
        assert_eq!(s.validate(&T, 1000, c, at + 2 * SLICE_MS), None, "too old");
        assert_eq!(s.validate(&T, 1001, c, at), None, "other ISN");
        let other = CookieTuple {
            client_port: 40_001,
            ..T
        };
        assert_eq!(s.validate(&other, 1000, c, at), None, "other tuple");
        assert_eq!(CookieSecret::random().validate(&T, 1000, c, at), None);
    }

    #[test]
    fn a_timestamp_carries_the_options_in_its_low_bits_and_never_runs_ahead() {
        let d = CookieData::from_options(Some(1460), Some(7), true);
        // 1000 ms: 960 | 7 | SACK = 983.
        assert_eq!(timestamp(1_000, d, false), 983);
        assert!(timestamp_agrees(983, d));
        // With ECN, 960 | 0x37 = 1015 would be ahead of the clock: one
        // step back, 951.
        assert_eq!(timestamp(1_000, d, true), 951);
        assert_eq!(timestamp(1_100, d, true), 1024 | 0x37);
        let none = CookieData::from_options(Some(1460), None, false);
        assert_eq!(timestamp(1_000, none, false) & 0x3f, 0xf);
        assert!(!timestamp_agrees(983, none), "other window scale");
        let no_sack = CookieData { sack: false, ..d };
        assert!(!timestamp_agrees(983, no_sack), "SACK bit differs");
    }

    proptest! {
        /// Changing any bit of a cookie invalidates it (the data bits are
        /// under the MAC too), except with the MAC's 2^-22 odds.
        #[test]
        fn flipped_bits_are_rejected(isn in any::<u32>(), bit in 0u32..32, now in 0u64..1 << 40) {
            let s = CookieSecret::random();
            let d = CookieData::from_options(Some(1400), Some(3), true);
            let c = s.generate(&T, isn, d, now);
            prop_assert_eq!(s.validate(&T, isn, c, now), Some(d));
            prop_assert_eq!(s.validate(&T, isn, c ^ (1 << bit), now), None);
        }
    }
}
