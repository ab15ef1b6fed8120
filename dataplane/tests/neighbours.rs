//! ARP on the forwarding path: next hops without a known MAC are resolved
//! with ARP requests while their packets wait in a bounded queue; replies
//! are learned; unanswered resolution drops the waiting packets; owned
//! addresses are announced with gratuitous ARP at start and when added,
//! VIPs only while this instance is elected for them;
//! compactions of the table (entries unused for `gc_stale_ms` reclaimed)
//! do not disturb forwarding.

mod common;

use common::*;
use dataplane::counters::DropReason;
use dataplane::neighbour::{NeighbourConfig, NeighbourTable, Resolution};
use dataplane::packet::Verdict;
use dataplane::wire::tcp::flags as F;
use dataplane::wire::{MacAddr, build};
use std::net::Ipv4Addr;
use std::sync::Arc;

fn arp_request_from(sender_mac: MacAddr, sender: Ipv4Addr, target: Ipv4Addr) -> Vec<u8> {
    let mut f = build::arp_request(sender_mac, sender, target);
    f.resize(60, 0);
    f
}

#[test]
fn packets_wait_for_arp_and_leave_once_the_neighbour_answers() {
    let mut gw = gateway_without_neighbour_5();
    let be = backend_ip(5);
    let (v, out) = gw.send(OUTSIDE, &syn(40_000));
    assert_eq!(v, Verdict::AwaitNeighbour(INSIDE));
    assert_eq!(
        out,
        vec![(INSIDE, arp_request_from(IN_MAC, SNAT, be))],
        "one ARP request, from the SNAT address"
    );
    // More packets for the same neighbour wait too, without a second request.
    let (v, out) = gw.send(OUTSIDE, &syn(40_001));
    assert_eq!(v, Verdict::AwaitNeighbour(INSIDE));
    assert!(out.is_empty());
    // The backend answers; both held SYNs leave, exactly translated.
    let reply = build::arp_reply(backend_mac(be), be, IN_MAC, SNAT);
    let (v, out) = gw.send(INSIDE, &reply);
    assert_eq!(v, Verdict::Consumed);
    assert_eq!(out.len(), 2);
    for (sport, (port, frame)) in [40_000u16, 40_001].into_iter().zip(&out) {
        let flow = gw
            .flow(dataplane::flow::Proto::Tcp, CLIENT, sport, VIP, 80)
            .unwrap();
        let r = *flow.reply();
        let expected = with_ttl(
            build::eth_ipv4_tcp(
                IN_MAC,
                backend_mac(be),
                r.dst_ip,
                r.dst_port,
                be,
                8080,
                F::SYN,
                1,
                0,
                b"",
            ),
            63,
        );
        assert_eq!((*port, frame), (INSIDE, &expected));
    }
    let c = gw.counters();
    assert_eq!(
        (c.arp_learned, c.arp_requests_sent, c.neighbour_held_sent),
        (1, 1, 2)
    );
    // Later packets go straight out.
    assert_eq!(gw.send(OUTSIDE, &syn(40_002)).0, Verdict::Forward(INSIDE));
}

#[test]
fn unanswered_resolution_retries_then_drops_the_waiting_packets() {
    let mut gw = gateway_without_neighbour_5();
    gw.send(OUTSIDE, &syn(40_000));
    let mut requests = 1;
    for _ in 0..40 {
        gw.clock.advance_ms(100);
        gw.worker.poll();
        requests += gw.worker.driver_mut().take_tx(INSIDE).len();
    }
    let c = gw.counters();
    assert_eq!(c.dropped(DropReason::NeighbourTimeout), 1);
    assert_eq!(requests as u64, c.arp_requests_sent);
    assert_eq!(
        c.arp_requests_sent, 3,
        "retried once a second while the packet waits, max_probes in all"
    );
    // The entry is failed now (for the hold time): new packets are dropped
    // at once, not held.
    gw.clock.advance_ms(100);
    let (v, _) = gw.send(OUTSIDE, &syn(40_001));
    assert_eq!(v, Verdict::Drop(DropReason::NeighbourUnresolved));
}

#[test]
fn the_hold_queue_is_bounded() {
    let mut gw = gateway_without_neighbour_5();
    let mut held = 0;
    for i in 0..300u16 {
        match gw.send(OUTSIDE, &syn(20_000 + i)).0 {
            Verdict::AwaitNeighbour(_) => held += 1,
            v => panic!("{v:?}"),
        }
    }
    assert_eq!(held, 300);
    assert_eq!(
        gw.counters().dropped(DropReason::NeighbourQueueFull),
        300 - 256
    );
}

#[test]
fn owned_addresses_are_announced_at_start_and_new_vips_when_added() {
    let mut gw = Gateway::new(vec![web(&[0])]);
    let garp = |mac: MacAddr, addr: Ipv4Addr| arp_request_from(mac, addr, addr);
    let mut got = gw.announcements.clone();
    got.sort();
    let mut want = vec![
        (OUTSIDE, garp(OUT_MAC, VIP)),
        (OUTSIDE, garp(OUT_MAC, EXTERNAL_IP)),
        (OUTSIDE, garp(OUT_MAC, NODE)),
        (INSIDE, garp(IN_MAC, SNAT)),
    ];
    want.sort();
    assert_eq!(got, want);
    // A new service with a new VIP: only that one is announced.
    let new_vip = Ipv4Addr::new(203, 0, 113, 77);
    let extra =
        dataplane::snapshot::ServiceSpec::new("extra", dataplane::flow::Proto::Tcp, new_vip, 80);
    gw.swap(vec![web(&[0]), extra]);
    gw.worker.poll();
    assert_eq!(
        gw.worker.driver_mut().take_tx(OUTSIDE),
        vec![garp(OUT_MAC, new_vip)]
    );
    assert!(gw.worker.driver_mut().take_tx(INSIDE).is_empty());
}

/// Per-VIP election (issue 13): a VIP another instance is elected for is
/// not answered for ARP and not announced, but its traffic is still
/// forwarded; node, SNAT and other VIPs are unaffected; when this instance
/// is elected for it again, one gratuitous ARP goes out at once and ARP is
/// answered again.
#[test]
fn a_vip_not_elected_is_silent_for_arp_but_forwarded_and_announced_when_elected() {
    use dataplane::snapshot::AnnounceFilter;
    let mut gw = Gateway::new(vec![web(&[0])]);
    let asker = MacAddr([0x02, 0xcc, 0, 0, 0, 9]);
    let asker_ip = Ipv4Addr::new(203, 0, 113, 1);
    let who_has = |target| build::arp_request(asker, asker_ip, target);
    let garp = |mac: MacAddr, addr: Ipv4Addr| arp_request_from(mac, addr, addr);

    let snap = gw
        .builder
        .set_announce(AnnounceFilter::only(|vip| vip != VIP))
        .expect("the VIP's flag flips");
    assert!(snap.owned(VIP).is_some_and(|o| o.vip && !o.announce));
    assert!(snap.owned(NODE).is_some_and(|o| o.announce));
    gw.publisher.publish(snap);
    gw.worker.poll();
    assert!(
        gw.worker.driver_mut().take_tx(OUTSIDE).is_empty(),
        "no GARP"
    );
    let (v, out) = gw.send(OUTSIDE, &who_has(VIP));
    assert_eq!(v, Verdict::Drop(DropReason::ArpNotAnnounced));
    assert!(out.is_empty());
    for target in [EXTERNAL_IP, NODE] {
        assert_eq!(
            gw.send(OUTSIDE, &who_has(target)).0,
            Verdict::Reply,
            "{target}"
        );
    }
    assert_eq!(gw.send(INSIDE, &who_has(SNAT)).0, Verdict::Reply);
    // Traffic a stale cache still sends here is forwarded.
    assert_eq!(gw.send(OUTSIDE, &syn(41_000)).0, Verdict::Forward(INSIDE));
    // The same filter again changes nothing: no snapshot to publish.
    assert!(
        gw.builder
            .set_announce(AnnounceFilter::only(|vip| vip != VIP))
            .is_none()
    );

    // Elected again (the owner failed): one GARP at once, ARP answered.
    let garps_before = gw.counters().garp_sent;
    let snap = gw
        .builder
        .set_announce(AnnounceFilter::all())
        .expect("flips back");
    gw.publisher.publish(snap);
    gw.worker.poll();
    assert_eq!(
        gw.worker.driver_mut().take_tx(OUTSIDE),
        vec![garp(OUT_MAC, VIP)]
    );
    assert_eq!(gw.counters().garp_sent, garps_before + 1);
    assert_eq!(gw.send(OUTSIDE, &who_has(VIP)).0, Verdict::Reply);
    // A VIP added while its filter says no is owned, silent, not announced.
    let late_vip = Ipv4Addr::new(203, 0, 113, 78);
    let snap = gw
        .builder
        .set_announce(AnnounceFilter::only(move |vip| vip != late_vip));
    assert!(snap.is_none(), "no owned VIP flips");
    let extra =
        dataplane::snapshot::ServiceSpec::new("extra", dataplane::flow::Proto::Tcp, late_vip, 80);
    gw.swap(vec![web(&[0]), extra]);
    gw.worker.poll();
    assert!(gw.worker.driver_mut().take_tx(OUTSIDE).is_empty());
    assert_eq!(
        gw.send(OUTSIDE, &who_has(late_vip)).0,
        Verdict::Drop(DropReason::ArpNotAnnounced)
    );
}

/// more than MAX_BATCH (64) frames held for one neighbour are released
/// in one poll; release_held drops everything past the tx queue capacity
/// as tx_full instead of flushing.
#[test]
fn more_held_frames_than_a_batch_all_leave_when_the_neighbour_answers() {
    let mut gw = gateway_without_neighbour_5();
    for i in 0..100u16 {
        assert_eq!(
            gw.send(OUTSIDE, &syn(30_000 + i)).0,
            Verdict::AwaitNeighbour(INSIDE)
        );
    }
    let be = backend_ip(5);
    let reply = build::arp_reply(backend_mac(be), be, IN_MAC, SNAT);
    let (_, out) = gw.send(INSIDE, &reply);
    let c = gw.counters();
    assert_eq!(
        (out.len(), c.dropped(DropReason::TxFull)),
        (100, 0),
        "held frames lost to tx_full"
    );
}

/// the entry is Failed the instant the last probe is claimed: a reply
/// to the max_probes-th request can never save the frames waiting for it.
#[test]
fn the_last_probe_gets_its_retrans_period_before_failing() {
    let a = Ipv4Addr::new(10, 1, 0, 99);
    let t = NeighbourTable::new(NeighbourConfig::default());
    for now in [1, 1_001, 2_001] {
        assert_eq!(t.resolve(0, a, now), Resolution::Pending { probe: true });
    }
    assert_eq!(
        t.resolve(0, a, 2_002),
        Resolution::Pending { probe: false },
        "1 ms after the third request was sent"
    );
}

/// worker level, max_probes = 1: the held frame is dropped in the
/// very poll its only ARP request is sent.
#[test]
fn frames_held_when_the_last_probe_is_sent_keep_waiting() {
    let mut gw = gateway_without_neighbour_5();
    gw.send(OUTSIDE, &syn(40_000));
    gw.clock.advance_ms(1_000);
    gw.worker.poll(); // probe 2
    gw.clock.advance_ms(500);
    gw.send(OUTSIDE, &syn(40_001)); // held, deadline +3000
    gw.clock.advance_ms(500);
    gw.worker.poll(); // probe 3 claimed by the first frame; second sees Failed
    gw.worker.driver_mut().take_tx(INSIDE);
    assert_eq!(
        gw.counters().dropped(DropReason::NeighbourTimeout),
        0,
        "frame held 500 ms (deadline 3 s) dropped in the poll that sent the 3rd request"
    );
}

/// a static neighbour removed from the configuration stays static:
/// ARP can never replace it until restart.
#[test]
fn a_static_neighbour_removed_on_reload_is_learned_again() {
    let mut gw = Gateway::new(vec![web(&[5])]);
    let be = backend_ip(5);
    let mut s = spec(vec![web(&[5])]);
    s.neighbours.retain(|n| n.addr != be);
    let snap = gw.builder.build(&s).unwrap();
    gw.publisher.publish(snap);
    gw.worker.poll();
    let new_mac = dataplane::wire::MacAddr([2, 0xcc, 0, 0, 0, 5]);
    // gratuitous ARP from the backend with its new MAC
    let garp = build::arp_request(new_mac, be, be);
    gw.send(INSIDE, &garp);
    assert_eq!(
        gw.worker.pipeline().neighbours().peek(INSIDE, be),
        Some(new_mac.0)
    );
}

/// The fixture without the static neighbour of backend 5, on a table that
/// reclaims entries unused for 10 s.
fn gateway_collecting_neighbours() -> (Gateway, Arc<NeighbourTable>) {
    let table = Arc::new(NeighbourTable::new(NeighbourConfig {
        gc_stale_ms: 10_000,
        gc_min_entries: 0,
        ..NeighbourConfig::default()
    }));
    let mut s = spec(vec![web(&[5])]);
    s.neighbours.retain(|n| n.addr != backend_ip(5));
    let gw = Gateway::with_neighbours(s, pipeline_config(0, 1), Arc::clone(&table));
    (gw, table)
}

#[test]
fn forwarding_keeps_working_across_compactions_and_an_idle_next_hop_costs_one_re_arp() {
    let (mut gw, table) = gateway_collecting_neighbours();
    let be = backend_ip(5);
    let reply = build::arp_reply(backend_mac(be), be, IN_MAC, SNAT);
    assert_eq!(
        gw.send(OUTSIDE, &syn(41_000)).0,
        Verdict::AwaitNeighbour(INSIDE)
    );
    assert_eq!(gw.send(INSIDE, &reply).1.len(), 1, "the held SYN left");
    // A next hop resolved once and never again: idle.
    let idle = Ipv4Addr::new(10, 1, 0, 200);
    table.resolve(INSIDE, idle, gw.clock_now());
    // Backend 5 carries a new flow every second for 12 s (past gc_stale_ms),
    // answering its re-probes, while the control thread collects.
    let mut compacted = 0;
    for i in 0..12u16 {
        gw.clock.advance_ms(1_000);
        let (v, out) = gw.send(OUTSIDE, &syn(41_001 + i));
        assert_eq!(v, Verdict::Forward(INSIDE), "flow {i}");
        if out.len() > 1 {
            gw.send(INSIDE, &reply);
        }
        if table.collect_garbage(gw.clock_now()).compacted {
            compacted += 1;
        }
    }
    assert_eq!(compacted, 1, "the idle next hop was reclaimed");
    assert_eq!(table.reclaimed(), 1);
    assert_eq!(table.peek(INSIDE, idle), None);
    assert_eq!(
        table.peek(INSIDE, be),
        Some(backend_mac(be).0),
        "in use: kept"
    );
    assert_eq!(
        table.peek(INSIDE, backend_ip(0)),
        Some(backend_mac(backend_ip(0)).0),
        "static: kept"
    );
    // Backend 5 goes quiet past gc_stale_ms and is reclaimed; the next
    // packet for it costs exactly one ARP round trip.
    gw.clock.advance_ms(12_000);
    gw.worker.poll();
    assert!(table.collect_garbage(gw.clock_now()).compacted);
    assert_eq!(table.peek(INSIDE, be), None);
    let requests = gw.counters().arp_requests_sent;
    let (v, out) = gw.send(OUTSIDE, &syn(42_000));
    assert_eq!(v, Verdict::AwaitNeighbour(INSIDE));
    assert_eq!(out, vec![(INSIDE, arp_request_from(IN_MAC, SNAT, be))]);
    let (_, out) = gw.send(INSIDE, &reply);
    assert_eq!(out.len(), 1, "the held SYN left after the reply");
    assert_eq!(gw.counters().arp_requests_sent, requests + 1);
    assert_eq!(gw.send(OUTSIDE, &syn(42_001)).0, Verdict::Forward(INSIDE));
    assert_eq!(table.refused(), 0);
}

/// A static entry missing from a new generation (set in the old one after
/// the compaction copied it: emulated here by demoting every static first)
/// is restored by the worker at its next poll.
#[test]
fn workers_restore_static_neighbours_into_a_new_generation() {
    let (mut gw, table) = gateway_collecting_neighbours();
    assert_eq!(table.stats().statics, 19);
    table.retain_static(|_, _: Ipv4Addr| false);
    table.resolve(INSIDE, Ipv4Addr::new(10, 1, 0, 200), 0);
    gw.clock.advance_ms(20_000);
    let generation = table.generation();
    assert!(table.collect_garbage(gw.clock_now()).compacted);
    assert_eq!(table.generation(), generation + 1);
    assert_eq!(table.stats().statics, 0);
    gw.worker.poll();
    assert_eq!(table.stats().statics, 19, "re-applied from the snapshot");
    let b0 = backend_ip(0);
    assert_eq!(
        table.resolve(INSIDE, b0, gw.clock_now()),
        Resolution::Known {
            mac: backend_mac(b0).0,
            probe: false
        }
    );
}
