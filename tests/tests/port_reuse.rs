//! Without SNAT, the backend-side tuple of a flow is the client's own
//! address and port: a client that reuses a source port for another
//! service (here the NodePort after the VIP) that maps to the same backend
//! produces the same reply tuple as the earlier, closed flow.
//!
//! The new flow must be served: a closing flow gives its tuple to the new
//! SYN, a live one makes the gateway remap the client's source port (as
//! Linux NAT picks a unique tuple).

mod common;

use common::{gateway, topology};
use portico::demo::topology::{NODE_ADDR, NODE_PORT, ServiceOptions, VIP};

#[test]
fn without_snat_a_client_port_reused_for_another_service_is_served() {
    let Some(t) = topology(
        "port_reuse::without_snat_a_client_port_reused_for_another_service_is_served",
        1,
    ) else {
        return;
    };
    let options = ServiceOptions {
        snat: false,
        ..ServiceOptions::all(&t)
    };
    let gw = gateway(&t, &options);
    // Whichever side closes first holds TIME_WAIT; when it is the client,
    // its kernel refuses to bind port 40000 again (EADDRINUSE) and the
    // second request never leaves. The client namespace keeps no TIME_WAIT
    // sockets, so the port is reused whoever closed first (the gateway still
    // sees a reused tuple: that is what is tested).
    let out = t
        .client_exec(
            "sh",
            &["-c", "echo 0 > /proc/sys/net/ipv4/tcp_max_tw_buckets"],
        )
        .expect("sh runs");
    assert!(
        out.status.success(),
        "no TIME_WAIT in the client namespace: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for url in [
        format!("http://{VIP}/"),
        format!("http://{NODE_ADDR}:{NODE_PORT}/"),
    ] {
        let out = t
            .client_exec(
                "curl",
                &[
                    "-sS",
                    "--max-time",
                    "5",
                    "--local-port",
                    "40000",
                    "-H",
                    "Connection: close",
                    &url,
                ],
            )
            .expect("curl runs");
        let s = common::stats(&gw);
        assert!(
            out.status.success(),
            "{url} from port 40000: {}; drops {}",
            String::from_utf8_lossy(&out.stderr),
            s["total"]["drops"]
        );
    }
}
