//! Builds the bindings against the system's DPDK as `pkg-config libdpdk`
//! describes it (Debian's libdpdk-dev 22.11): the same cflags (including
//! `-include rte_config.h` and `-march=...`) go to bindgen and to the C
//! shim, and the libraries are linked dynamically. The PMDs are not linked:
//! the EAL loads them at run time from its plugin directory.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn pkg_config(args: &[&str]) -> Vec<String> {
    let out = Command::new("pkg-config")
        .args(args)
        .arg("libdpdk")
        .output()
        .unwrap_or_else(|e| {
            panic!("running pkg-config {args:?} libdpdk: {e} (install pkg-config)")
        });
    if !out.status.success() {
        panic!(
            "pkg-config {args:?} libdpdk failed: {} (install libdpdk-dev: apt-get install libdpdk-dev)",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// Joins `-include FILE` into one argument each, so that flags can be
/// passed one by one.
fn cflags() -> Vec<String> {
    let mut flags = Vec::new();
    let mut words = pkg_config(&["--cflags"]).into_iter();
    while let Some(w) = words.next() {
        if w == "-include" {
            if let Some(file) = words.next() {
                flags.push(format!("-include{file}"));
            }
        } else {
            flags.push(w);
        }
    }
    flags
}

fn main() {
    println!("cargo:rerun-if-changed=csrc/shim.c");
    println!("cargo:rerun-if-changed=csrc/shim.h");
    println!("cargo:rerun-if-changed=csrc/wrapper.h");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    let cflags = cflags();

    // The shim.
    let mut build = cc::Build::new();
    build.file("csrc/shim.c").include("csrc").warnings(true);
    for f in &cflags {
        build.flag(f);
    }
    build.compile("portico_dpdk_shim");

    // The libraries, dynamically.
    for w in pkg_config(&["--libs"]) {
        if let Some(dir) = w.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
        } else if let Some(lib) = w.strip_prefix("-l") {
            println!("cargo:rustc-link-lib=dylib={lib}");
        } else if w.starts_with("-Wl,") {
            println!("cargo:rustc-link-arg={w}");
        }
    }

    // The bindings: only what Portico calls; every DPDK structure whose
    // fields Portico does not touch is opaque (size and alignment only).
    let bindings = bindgen::Builder::default()
        .header("csrc/wrapper.h")
        .clang_args(&cflags)
        .clang_arg("-Icsrc")
        .allowlist_function("rte_eal_init")
        .allowlist_function("rte_eal_cleanup")
        .allowlist_function("rte_strerror")
        .allowlist_function("rte_thread_register")
        .allowlist_function("rte_thread_unregister")
        .allowlist_function("rte_socket_id")
        .allowlist_function("rte_eth_dev_count_avail")
        .allowlist_function("rte_eth_dev_get_port_by_name")
        .allowlist_function("rte_eth_dev_socket_id")
        .allowlist_function("rte_eth_dev_adjust_nb_rx_tx_desc")
        .allowlist_function("rte_eth_rx_queue_setup")
        .allowlist_function("rte_eth_tx_queue_setup")
        .allowlist_function("rte_eth_dev_start")
        .allowlist_function("rte_eth_dev_stop")
        .allowlist_function("rte_eth_dev_close")
        .allowlist_function("rte_eth_dev_info_get")
        .allowlist_function("rte_eth_stats_get")
        .allowlist_function("rte_eth_macaddr_get")
        .allowlist_function("rte_eth_dev_get_mtu")
        .allowlist_function("rte_eth_dev_set_mtu")
        .allowlist_function("rte_eth_promiscuous_enable")
        .allowlist_function("rte_pktmbuf_pool_create")
        .allowlist_function("rte_mempool_free")
        .allowlist_function("rte_mempool_avail_count")
        .allowlist_function("rte_mempool_in_use_count")
        .allowlist_function("portico_.*")
        .allowlist_type("portico_.*")
        .allowlist_var("RTE_MAX_ETHPORTS")
        .allowlist_var("RTE_MBUF_DEFAULT_BUF_SIZE")
        .allowlist_var("RTE_PKTMBUF_HEADROOM")
        .allowlist_var("SOCKET_ID_ANY")
        .opaque_type("rte_mbuf")
        .opaque_type("rte_mempool")
        .opaque_type("rte_eth_dev_info")
        .opaque_type("rte_eth_conf")
        .opaque_type("rte_eth_rxconf")
        .opaque_type("rte_eth_txconf")
        .derive_default(true)
        .derive_debug(true)
        .layout_tests(true)
        .generate_comments(false)
        .generate()
        .expect("bindgen over csrc/wrapper.h with the libdpdk cflags");
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR")).join("bindings.rs");
    bindings.write_to_file(&out).expect("writing the bindings");
}
