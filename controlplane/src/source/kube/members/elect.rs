//! Who announces a VIP: rendezvous (highest-random-weight) hashing of the
//! VIP over the live members of the tier, so every instance that sees the
//! same members picks the same owner without talking to the others.
//!
//! The weight of member `m` for `vip` is xxh3-64 with the fixed seed
//! [`ELECTION_SEED`] over `m`'s name, a `#` and the VIP's octets (four for IPv4, sixteen for IPv6); the
//! owner is the member of highest weight (ties, which need a 64-bit
//! collision, go to the smaller name). xxh3 rather than MetalLB's
//! `sha256(node + "#" + ip)`: the instances only have to agree with each
//! other, xxh3's output is frozen by its specification (the same property
//! Maglev's stable backend hash relies on) and already in the workspace,
//! and a tier of a few members costs a few nanoseconds per VIP.
//!
//! Properties (tested below): the owner depends only on the member *set*
//! (not on order or on who computes it); when a member leaves only its VIPs
//! move (each to the member with the next-highest weight); when a member
//! joins only the VIPs it now wins move, about `1/n` of them.

use std::net::IpAddr;
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Fixed seed of the election hash; changing it moves VIPs between
/// instances of a running tier, so it never changes.
pub const ELECTION_SEED: u64 = 0x706f_7274_6963_6f4c; // "porticoL"

/// The weight of `member` for `vip`.
pub fn weight(member: &str, vip: impl Into<IpAddr>) -> u64 {
    let mut key = Vec::with_capacity(member.len() + 17);
    key.extend_from_slice(member.as_bytes());
    key.push(b'#');
    match vip.into() {
        IpAddr::V4(v) => key.extend_from_slice(&v.octets()),
        IpAddr::V6(v) => key.extend_from_slice(&v.octets()),
    }
    xxh3_64_with_seed(&key, ELECTION_SEED)
}

/// The member that announces `vip` (`None` when there are no members).
pub fn owner<'m>(
    members: impl IntoIterator<Item = &'m str>,
    vip: impl Into<IpAddr>,
) -> Option<&'m str> {
    let vip = vip.into();
    members
        .into_iter()
        .map(|m| (weight(m, vip), m))
        .max_by(|(wa, a), (wb, b)| wa.cmp(wb).then_with(|| b.cmp(a)))
        .map(|(_, m)| m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, HashMap};
    use std::net::Ipv4Addr;

    fn vips(n: u32) -> Vec<Ipv4Addr> {
        (0..n).map(|i| Ipv4Addr::from(0xcb00_7100 + i)).collect()
    }

    fn assignment(members: &[&str], vips: &[Ipv4Addr]) -> HashMap<Ipv4Addr, String> {
        vips.iter()
            .map(|&v| (v, owner(members.iter().copied(), v).unwrap().to_owned()))
            .collect()
    }

    #[test]
    fn the_owner_is_stable_and_independent_of_member_order() {
        let vs = vips(500);
        let a = assignment(&["gw-a", "gw-b", "gw-c"], &vs);
        let b = assignment(&["gw-c", "gw-a", "gw-b"], &vs);
        assert_eq!(
            a, b,
            "every instance agrees whatever order it lists members in"
        );
        // Frozen values: a change of the hash or the key would move VIPs
        // in a running tier across an upgrade.
        assert_eq!(
            weight("gw-a", Ipv4Addr::new(203, 0, 113, 10)),
            xxh3_64_with_seed(b"gw-a#\xcb\x00\x71\x0a", ELECTION_SEED)
        );
        assert_eq!(owner(std::iter::empty(), vs[0]), None);
        assert_eq!(owner(["solo"], vs[0]), Some("solo"));
    }

    #[test]
    fn ipv6_vips_are_elected_by_their_sixteen_octets() {
        let v6: std::net::Ipv6Addr = "2001:db8::10".parse().expect("v6");
        let mut key = b"gw-a#".to_vec();
        key.extend_from_slice(&v6.octets());
        assert_eq!(weight("gw-a", v6), xxh3_64_with_seed(&key, ELECTION_SEED));
        // Spread over the members like IPv4 VIPs.
        let mut per: BTreeMap<&str, usize> = BTreeMap::new();
        for i in 0..3000u128 {
            let vip = std::net::Ipv6Addr::from(u128::from(v6) + i);
            if let Some(m) = owner(["gw-a", "gw-b", "gw-c"], vip) {
                *per.entry(m).or_default() += 1;
            }
        }
        assert_eq!(per.len(), 3);
        for (m, n) in per {
            assert!((800..=1200).contains(&n), "{m} owns {n} of 3000");
        }
    }

    #[test]
    fn vips_spread_over_the_members() {
        let vs = vips(3000);
        let a = assignment(&["gw-a", "gw-b", "gw-c"], &vs);
        let mut per: BTreeMap<&str, usize> = BTreeMap::new();
        for m in a.values() {
            *per.entry(m.as_str()).or_default() += 1;
        }
        assert_eq!(per.len(), 3);
        for (m, n) in per {
            assert!((800..=1200).contains(&n), "{m} owns {n} of 3000");
        }
    }

    #[test]
    fn a_member_leaving_moves_only_its_own_vips() {
        let vs = vips(2000);
        let before = assignment(&["gw-a", "gw-b", "gw-c"], &vs);
        let after = assignment(&["gw-a", "gw-c"], &vs);
        for v in &vs {
            if before[v] == "gw-b" {
                assert_ne!(after[v], "gw-b");
            } else {
                assert_eq!(before[v], after[v], "{v} moved without its owner leaving");
            }
        }
    }

    #[test]
    fn a_member_joining_takes_only_what_it_wins() {
        let vs = vips(3000);
        let before = assignment(&["gw-a", "gw-b"], &vs);
        let after = assignment(&["gw-a", "gw-b", "gw-c"], &vs);
        let mut moved = 0;
        for v in &vs {
            if before[v] != after[v] {
                assert_eq!(after[v], "gw-c", "{v} moved between old members");
                moved += 1;
            }
        }
        assert!(
            (800..=1200).contains(&moved),
            "{moved} of 3000 moved, ~1/3 expected"
        );
    }
}
