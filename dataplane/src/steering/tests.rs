//! Test helpers for steering (random keys a gateway would see) and the
//! client hash itself.

use super::*;
use std::ops::RangeInclusive;

/// A snapshot of one port with `addresses` and `services`.
pub(crate) fn one_port_snapshot(
    addresses: Vec<(IpAddr, crate::packet::PortId, crate::snapshot::AddrRole)>,
    services: Vec<crate::snapshot::ServiceSpec>,
) -> crate::snapshot::Snapshot {
    use crate::snapshot::{PortSpec, SnapshotBuilder, SnapshotSpec};
    SnapshotBuilder::new()
        .build(&SnapshotSpec {
            ports: vec![PortSpec {
                mac: [2, 0, 0, 0, 0, 1],
                mtu: 1500,
                mss_clamp: None,
            }],
            vip_port: 0,
            addresses,
            routes: Vec::new(),
            neighbours: Vec::new(),
            services,
            maglev_table_size: 251,
        })
        .expect("snapshot")
}

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

    /// A port from `listen`, the SNAT range's edges or anywhere.
    fn port(&mut self, listen: &[u16]) -> u16 {
        match self.next() % 4 {
            0 => self.pick(listen),
            1 => self.pick(&[0, 1023, 1024, 1025, 32767, 32768, 65534, 65535]),
            _ => self.next() as u16,
        }
    }

    fn proto(&mut self) -> Proto {
        if self.next().is_multiple_of(2) {
            Proto::Tcp
        } else {
            Proto::Udp
        }
    }
}

/// The worker counts and SNAT port ranges the steering tests run with:
/// wide, narrow, fewer ports than workers, one off the bottom.
pub(crate) fn shapes() -> [(u8, RangeInclusive<u16>); 5] {
    [
        (2, 1024..=65535),
        (3, 1024..=65535),
        (4, 20000..=20010),
        (7, 1..=5),
        (2, 30000..=40000),
    ]
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
        let proto = rng.proto();
        let (src, dst) = (addr(rng), addr(rng));
        let (sp, dp) = (rng.port(&self.listen), rng.port(&self.listen));
        FlowKey::new(proto, src, sp, dst, dp)
    }
}

/// Random IPv6 TCP/UDP keys, biased as [`KeyPool`]'s, plus addresses next
/// to the owned ones (the edges of the rule's /96 ranges).
pub(crate) struct KeyPool6 {
    pub(crate) owned: Vec<Ipv6Addr>,
    pub(crate) listen: Vec<u16>,
}

impl KeyPool6 {
    pub(crate) fn key(&self, rng: &mut Rng) -> FlowKey6 {
        let addr = |rng: &mut Rng| match rng.next() % 4 {
            0 | 1 => rng.pick(&self.owned),
            2 => {
                let near = rng.pick(&self.owned).to_bits();
                let delta = rng.pick(&[1u128, 2, 1 << 32, 1 << 64, 1 << 96]);
                Ipv6Addr::from_bits(if rng.next().is_multiple_of(2) {
                    near.wrapping_add(delta)
                } else {
                    near.wrapping_sub(delta)
                })
            }
            _ => Ipv6Addr::from_bits(u128::from(rng.next()) << 64 | u128::from(rng.next())),
        };
        let proto = rng.proto();
        let (src, dst) = (addr(rng), addr(rng));
        let (sp, dp) = (rng.port(&self.listen), rng.port(&self.listen));
        FlowKey6::new(proto, src, sp, dst, dp)
    }
}

#[test]
fn client_hash6_is_the_client_hash_of_the_folded_words() {
    let a: Ipv6Addr = "2001:db8:1:2::a".parse().unwrap();
    // 0x20010db8 ^ 0x00010002 ^ 0 ^ 0x0000000a = 0x20000db0.
    assert_eq!(
        client_hash6(a, 7),
        client_hash(Ipv4Addr::new(0x20, 0x00, 0x0d, 0xb0), 7)
    );
    assert_eq!(client_hash6(a, 1), 0);
    let mut count = [0u32; 4];
    for i in 0..4096u128 {
        count[usize::from(client_hash6(Ipv6Addr::from_bits(a.to_bits() + i), 4))] += 1;
    }
    for c in count {
        assert!((900..=1150).contains(&c), "{count:?}");
    }
}

#[test]
fn ipv6_ranges_merge_inside_a_slash_96_and_cut_at_the_maxima() {
    let base: u128 = 0x2001_0db8_0000_0000_0000_0000_ffff_fffe;
    let owned: Vec<Ipv6Addr> = (0..4).map(|i| Ipv6Addr::from_bits(base + i)).collect();
    let rule = SteeringRule::new(2, 1024..=65535, Vec::new(), Vec::new(), Vec::new()).with_ipv6(
        owned.clone(),
        Vec::new(),
        Vec::new(),
    );
    // ..fffe, ..ffff | next /96: 0, 1.
    assert_eq!(
        rule.owned6,
        vec![(base, base + 1), (base + 2, base + 3)],
        "split at the /96"
    );
    assert!(!rule.truncated);
    let many: Vec<Ipv6Addr> = (0..=MAX_OWNED_RANGES6 as u128)
        .map(|i| Ipv6Addr::from_bits(i * 2))
        .collect();
    let rule = SteeringRule::new(2, 1024..=65535, Vec::new(), Vec::new(), Vec::new()).with_ipv6(
        many,
        Vec::new(),
        Vec::new(),
    );
    assert!(rule.truncated);
    assert_eq!(rule.owned6.len(), MAX_OWNED_RANGES6);
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

/// The connections of one client (IPv4 and IPv6) spread evenly over 2 to 8
/// workers by their port: ephemeral ports in a row, and even ones only
/// (Linux's `connect` prefers ports of one parity), each worker within
/// 10 % of its fair share; port 0 is the address alone.
#[test]
fn client_port_hash_spreads_one_clients_ports_evenly() {
    let clients = [Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(198, 51, 100, 77)];
    let clients6: [Ipv6Addr; 2] = [
        "fd00::2".parse().unwrap(),
        "2001:db8:5::77".parse().unwrap(),
    ];
    for workers in 2..=8u8 {
        for step in [1usize, 2] {
            let ports = || (32768..61000u16).step_by(step);
            let n = ports().count();
            let spread = |owner: &dyn Fn(u16) -> WorkerId, what: &str| {
                let mut count = vec![0usize; usize::from(workers)];
                for p in ports() {
                    count[usize::from(owner(p))] += 1;
                }
                let fair = n / usize::from(workers);
                for c in &count {
                    assert!(
                        c * 10 >= fair * 9 && c * 10 <= fair * 11,
                        "{what}, {workers} workers, step {step}: {count:?}"
                    );
                }
            };
            for c in clients {
                spread(&|p| client_port_hash(c, p, workers), &c.to_string());
                assert_eq!(client_port_hash(c, 0, workers), client_hash(c, workers));
            }
            for c in clients6 {
                spread(&|p| client_port_hash6(c, p, workers), &c.to_string());
                assert_eq!(client_port_hash6(c, 0, workers), client_hash6(c, workers));
            }
        }
    }
    // (0x01020304 ^ 0x1f90) * 0x9e3779b1 mod 2^32 = 0x3e7c5d14, >> 16.
    let want = (0x0102_1c94_u32.wrapping_mul(CLIENT_HASH_MULTIPLIER) >> 16) % 200;
    assert_eq!(
        client_port_hash(Ipv4Addr::new(1, 2, 3, 4), 8080, 200),
        want as WorkerId
    );
}

/// The address-steered lists are sorted and cut at their maxima.
#[test]
fn affinity_lists_are_sorted_and_cut_at_the_maxima() {
    use crate::snapshot::{AddrRole, ServiceSpec};
    let mut services = Vec::new();
    for i in 0..=MAX_AFFINITY_LISTENERS as u32 {
        let vip = Ipv4Addr::from(0xcb00_7100 + i);
        let mut svc = ServiceSpec::new(&format!("s{i}"), Proto::Tcp, vip, 80)
            .endpoint((Ipv4Addr::from(0x0af4_0000 + i), 8080));
        svc.snat = false;
        svc.affinity_timeout_ms = Some(1000);
        services.push(svc);
    }
    let snap = one_port_snapshot(
        vec![(Ipv4Addr::new(192, 0, 2, 1).into(), 0, AddrRole::Node)],
        services,
    );
    let rule = SteeringRule::new(2, 1024..=65535, Vec::new(), Vec::new(), Vec::new());
    let rule = rule.with_affinity(&snap.affinity);
    assert!(rule.truncated);
    assert_eq!(rule.affinity_listeners.len(), MAX_AFFINITY_LISTENERS);
    // One endpoint per service: fewer than the maximum, all listed.
    assert_eq!(rule.affinity_endpoints.len(), MAX_AFFINITY_LISTENERS + 1);
    assert!(rule.affinity_listeners.is_sorted());
    assert!(rule.affinity_endpoints.is_sorted());
    assert_eq!(
        rule.affinity_listeners.first(),
        Some(&(Proto::Tcp, Ipv4Addr::new(203, 0, 113, 0), 80))
    );
}

/// A remapped client port keeps its owner: every candidate of
/// `remap_candidates` hashes to the original port's worker, the full
/// number of tries is found, all in 1024..=65535; with one worker the
/// candidates are the plain sequence of the seed.
#[test]
fn remap_candidates_keep_the_owner_of_the_client_port() {
    let clients: [IpAddr; 2] = [
        Ipv4Addr::new(198, 51, 100, 7).into(),
        "2001:db8:5::77".parse::<Ipv6Addr>().unwrap().into(),
    ];
    let mut rng = Rng(0x4e3a);
    for workers in 1..=8u8 {
        for client in clients {
            for _ in 0..50 {
                let port = rng.next() as u16;
                let mine = client_port_hash_ip(client, port, workers);
                let ports: Vec<u16> =
                    remap_candidates(client, port, workers, rng.next(), 64).collect();
                assert_eq!(ports.len(), 64, "{client}:{port}, {workers} workers");
                for p in ports {
                    assert!(p >= 1024);
                    assert_eq!(client_port_hash_ip(client, p, workers), mine);
                }
            }
        }
    }
    let mut x = 77u64 | 1;
    x = x.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
    let first = 1024 + (x % (65536 - 1024)) as u16;
    assert_eq!(
        remap_candidates(clients[0], 80, 1, 77, 64).next(),
        Some(first)
    );
}
