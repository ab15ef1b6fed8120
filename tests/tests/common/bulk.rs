//! Bulk transfers through the gateway: a large object that does not
//! compress, and nginx serving it from a backend (and storing uploads).

use portico::demo::topology::Topology;
use portico_tests::{Process, TempDir, wait_until};
use std::net::{IpAddr, SocketAddr};
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

/// A temporary directory (`name`) holding `object` as `www/big`, for
/// [`bulk_server`].
pub fn www_with(name: &str, object: &[u8]) -> TempDir {
    let dir = TempDir::new(name).expect("temp dir");
    std::fs::create_dir_all(dir.path.join("www")).expect("www dir");
    std::fs::write(dir.path.join("www/big"), object).expect("write the object");
    dir
}

/// nginx on backend 0 serving `dir/www` on `listen`:`port` (either
/// family), `/data/` a WebDAV directory (`PUT` stores, up to 64 MiB);
/// listening when this returns.
pub fn bulk_server(t: &Topology, dir: &TempDir, listen: IpAddr, port: u16) -> Process {
    let b = &t.backends[0];
    let d = dir.path.display();
    let listen = SocketAddr::new(listen, port);
    let conf = format!(
        "user root;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\ndaemon off;\n\
         events {{ worker_connections 64; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d};\n  \
         fastcgi_temp_path {d};\n  uwsgi_temp_path {d};\n  scgi_temp_path {d};\n  \
         client_max_body_size 64m;\n  \
         server {{\n    listen {listen};\n    root {d}/www;\n    \
         location /data/ {{ dav_methods PUT; create_full_put_path on; }}\n  }}\n}}\n"
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

/// curl in the client namespace with `args` (after `-g -sS --max-time 60
/// -w %{http_code}`: an IPv6 URL in brackets works); its HTTP status.
pub fn curl(t: &Topology, args: &[&str]) -> String {
    let mut all = vec!["-g", "-sS", "--max-time", "60", "-w", "%{http_code}"];
    all.extend_from_slice(args);
    let out = t.client_exec("curl", &all).expect("curl runs");
    let code = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "curl {args:?}: {code} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    code
}

/// `PUT` the object (`dir/www/big`) to `base/data/up` (a [`bulk_server`]
/// behind `base`): stored whole (the same SHA-256).
pub fn put(t: &Topology, dir: &TempDir, base: &str) {
    let src = dir.path.join("www/big");
    let code = curl(
        t,
        &[
            "-T",
            src.to_str().expect("utf-8 path"),
            &format!("{base}/data/up"),
        ],
    );
    assert!(code == "201" || code == "204", "PUT answered {code}");
    assert_eq!(
        sha256_hex(&dir.path.join("www/data/up")),
        sha256_hex(&src),
        "the upload arrived whole"
    );
}

/// The SHA-256 (hex) of a file, by `sha256sum`.
pub fn sha256_hex(path: &std::path::Path) -> String {
    let out = std::process::Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum runs");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .expect("a digest")
        .to_owned()
}
