//! An nginx backend inside a namespace, for the demo and the suites.

use crate::ns::Netns;
use crate::process::Process;
use crate::temp_dir::TempDir;
use std::io;

/// An nginx serving `GET /` with a body naming the backend (`backend <name>`)
/// on `listen` (address:port) inside `ns`, with its own config and logs in a
/// temporary directory. Returns the process guard and the directory.
pub fn nginx(ns: &Netns, name: &str, listen: &str) -> io::Result<(Process, TempDir)> {
    let dir = TempDir::new("ngx")?;
    let conf = format!(
        "worker_processes 1;\npid {dir}/nginx.pid;\nerror_log {dir}/error.log warn;\ndaemon off;\n\
         events {{ worker_connections 4096; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {dir};\n  proxy_temp_path {dir};\n  fastcgi_temp_path {dir};\n  uwsgi_temp_path {dir};\n  scgi_temp_path {dir};\n  keepalive_requests 1000000;\n\
           server {{\n    listen {listen} reuseport;\n    location / {{ return 200 \"backend {name} saw $remote_addr\\n\"; }}\n  }}\n}}\n",
        dir = dir.path.display()
    );
    let conf_path = dir.path.join("nginx.conf");
    std::fs::write(&conf_path, conf)?;
    let proc = ns.spawn(
        "nginx",
        &[
            "-c",
            conf_path.to_str().unwrap_or_default(),
            "-p",
            dir.path.to_str().unwrap_or_default(),
        ],
    )?;
    Ok((proc, dir))
}
