//! Test helpers for steering (random keys a gateway would see) and the
//! client hash itself.

use super::*;

/// SplitMix64, for reproducible random tuples.
pub(crate) struct Rng(pub u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut x = self.0;
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    }

    pub(crate) fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[(self.next() % from.len() as u64) as usize]
    }
}

/// Random TCP/UDP keys, biased towards what a gateway sees: addresses
/// from its owned ones or anywhere, ports from its listeners, the SNAT
/// range's edges or anywhere.
pub(crate) struct KeyPool {
    pub(crate) owned: Vec<Ipv4Addr>,
    pub(crate) listen: Vec<u16>,
}

impl KeyPool {
    pub(crate) fn key(&self, rng: &mut Rng) -> FlowKey {
        let addr = |rng: &mut Rng| {
            if rng.next().is_multiple_of(2) {
                rng.pick(&self.owned)
            } else {
                Ipv4Addr::from(rng.next() as u32)
            }
        };
        let port = |rng: &mut Rng| match rng.next() % 4 {
            0 => rng.pick(&self.listen),
            1 => rng.pick(&[0, 1023, 1024, 1025, 32767, 32768, 65534, 65535]),
            _ => rng.next() as u16,
        };
        let proto = if rng.next().is_multiple_of(2) {
            Proto::Tcp
        } else {
            Proto::Udp
        };
        let (src, dst) = (addr(rng), addr(rng));
        let (sp, dp) = (port(rng), port(rng));
        FlowKey::new(proto, src, sp, dst, dp)
    }
}

#[test]
fn client_hash_spreads_clients_and_fits_32_bit_arithmetic() {
    let mut count = [0u32; 4];
    for i in 0..4096u32 {
        count[usize::from(client_hash(Ipv4Addr::from(0x0a00_0000 + i), 4))] += 1;
    }
    for c in count {
        assert!((900..=1150).contains(&c), "{count:?}");
    }
    assert_eq!(client_hash(Ipv4Addr::new(1, 2, 3, 4), 1), 0);
    // 0x01020304 * 0x9e3779b1 mod 2^32 = 0xc3acf9c4, >> 16 = 0xc3ac.
    assert_eq!(
        client_hash(Ipv4Addr::new(1, 2, 3, 4), 200),
        (0xc3ac_u32 % 200) as u8
    );
}
