//! Several workers: a flow is owned by one core. Client packets that arrive
//! on the wrong core are handed to the owner (by the client hash); replies
//! reach the owner through the SNAT port slice.

mod common;

use common::*;
use dataplane::clock::ManualClock;
use dataplane::counters::SharedCounters;
use dataplane::driver::mem::{MemConfig, MemDriver};
use dataplane::flow::{FlowKey, Proto};
use dataplane::handoff::HandoffMesh;
use dataplane::snapshot::{Publisher, SnapshotBuilder};
use dataplane::snat::port_slice;
use dataplane::wire::build;
use dataplane::wire::tcp::flags as F;
use dataplane::worker::{IdlePolicy, Worker, WorkerConfig};
use std::sync::Arc;

#[test]
fn flows_are_owned_by_one_worker_and_handoff_delivers_both_directions() {
    const WORKERS: u8 = 2;
    let snapshot = SnapshotBuilder::new()
        .build(&spec(vec![web(&[0, 1, 2])]))
        .unwrap();
    let publisher = Publisher::new(snapshot);
    let clock = ManualClock::new(1_000);
    let neighbours = Arc::new(dataplane::neighbour::NeighbourTable::new(Default::default()));
    let mut meshes = HandoffMesh::new(WORKERS as usize, 256, 2048)
        .expect("doorbells")
        .into_iter();
    let mut workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            Worker::new(
                &WorkerConfig {
                    pipeline: pipeline_config(w, WORKERS),
                    batch_size: 64,
                    idle: IdlePolicy::ADAPTIVE,
                },
                MemDriver::new(MemConfig::default()),
                clock.clone(),
                publisher.reader(),
                Arc::new(SharedCounters::default()),
                meshes.next(),
                neighbours.clone(),
            )
            .unwrap()
        })
        .collect();

    // All client SYNs arrive on worker 0's queue (no steering by the driver).
    let n = 200u16;
    let client = |i: u16| std::net::Ipv4Addr::new(198, 51, 100, 1 + (i % 100) as u8);
    for i in 0..n {
        let syn = build::eth_ipv4_tcp(
            ROUTER_MAC,
            OUT_MAC,
            client(i),
            20_000 + i,
            VIP,
            80,
            F::SYN,
            1,
            0,
            b"",
        );
        workers[0].driver_mut().inject(OUTSIDE, &syn).unwrap();
    }
    let mut sent = 0;
    for _ in 0..8 {
        for w in workers.iter_mut() {
            w.poll();
            // IPv4 only: worker 0 also announces the SNAT address (ARP).
            sent += w
                .driver_mut()
                .take_tx(INSIDE)
                .iter()
                .filter(|f| f[12..14] == [0x08, 0x00])
                .count();
        }
    }
    assert_eq!(sent, n as usize, "every SYN forwarded exactly once");
    let handed = workers[0].pipeline().counters().handoff_out;
    assert!(
        handed > 40 && handed < 160,
        "about half handed over: {handed}"
    );

    // Each flow lives in exactly one table, that of the owner of its
    // client address and port; its SNAT port is in its owner's slice.
    let range = pipeline_config(0, WORKERS).snat.port_range;
    let mut replies = Vec::new();
    for i in 0..n {
        let key = FlowKey::new(Proto::Tcp, client(i), 20_000 + i, VIP, 80);
        let owners: Vec<usize> = (0..WORKERS as usize)
            .filter(|&w| {
                let ct = workers[w].pipeline().conntrack();
                ct.lookup(&key, ct.hash(&key)).is_some()
            })
            .collect();
        assert_eq!(owners.len(), 1, "flow {i} in exactly one table");
        assert_eq!(
            owners[0],
            usize::from(dataplane::steering::client_port_hash(
                client(i),
                20_000 + i,
                WORKERS
            )),
            "owned by client address and port"
        );
        let ct = workers[owners[0]].pipeline().conntrack();
        let (id, _) = ct.lookup(&key, ct.hash(&key)).unwrap();
        let r = *ct.flow(id).reply();
        assert!(port_slice(range.clone(), owners[0], WORKERS as usize).contains(&r.dst_port));
        replies.push(build::eth_ipv4_tcp(
            backend_mac(r.src_ip),
            IN_MAC,
            r.src_ip,
            r.src_port,
            r.dst_ip,
            r.dst_port,
            F::SYN | F::ACK,
            1,
            2,
            b"",
        ));
    }

    // All replies arrive on worker 1's queue; each reaches its flow's owner.
    for f in &replies {
        workers[1].driver_mut().inject(INSIDE, f).unwrap();
    }
    let mut back = 0;
    for _ in 0..8 {
        for w in workers.iter_mut() {
            w.poll();
            back += w
                .driver_mut()
                .take_tx(OUTSIDE)
                .iter()
                .filter(|f| f[12..14] == [0x08, 0x00])
                .count();
        }
    }
    assert_eq!(back, n as usize, "every reply translated exactly once");
    let dropped: u64 = workers
        .iter()
        .map(|w| w.pipeline().counters().total_drops())
        .sum();
    assert_eq!(dropped, 0);
}
