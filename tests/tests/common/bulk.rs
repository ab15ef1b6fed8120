//! Bulk transfers through the gateway: a large object that does not
//! compress, and nginx serving it from a backend.

use portico::demo::topology::Topology;
use portico_tests::{Process, TempDir, wait_until};
use std::time::Duration;

/// `len` deterministic bytes that do not compress or repeat within a
/// segment (xorshift).
pub fn object(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// nginx serving `dir/www` on backend 0's `port`, listening when this
/// returns.
pub fn bulk_server(t: &Topology, dir: &TempDir, port: u16) -> Process {
    let b = &t.backends[0];
    let d = dir.path.display();
    let conf = format!(
        "worker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\ndaemon off;\n\
         events {{ worker_connections 64; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d};\n  proxy_temp_path {d};\n  \
         fastcgi_temp_path {d};\n  uwsgi_temp_path {d};\n  scgi_temp_path {d};\n  \
         server {{\n    listen {}:{port};\n    root {d}/www;\n  }}\n}}\n",
        b.addr
    );
    let conf_path = dir.path.join("nginx.conf");
    std::fs::write(&conf_path, conf).expect("write nginx.conf");
    let p =
        b.ns.spawn(
            "nginx",
            &[
                "-c",
                conf_path.to_str().expect("utf-8 path"),
                "-p",
                dir.path.to_str().expect("utf-8 path"),
            ],
        )
        .expect("start nginx");
    listening(t, port);
    p
}

/// Wait (10 s at most) until something listens on backend 0's TCP `port`.
pub fn listening(t: &Topology, port: u16) {
    let b = &t.backends[0];
    let up = wait_until(Duration::from_secs(10), || {
        b.ns.exec("ss", &["-ltnH", &format!("sport = :{port}")])
            .is_ok_and(|o| !o.stdout.is_empty())
    });
    assert!(up, "nothing listened on {port}");
}
