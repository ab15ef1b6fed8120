//! The OCI image `images/container/build.sh` built (plain variant): its
//! configuration as `skopeo inspect` shows it (non-root user, `portico`
//! entrypoint, version and source labels), the docker-archive's tag, and
//! its root filesystem unpacked with `umoci unpack`: `portico --version` and
//! `portico check` on the ConfigMap's portico.toml run in it (chroot, as the
//! image's user), and `portico run` from it forwards traffic as that
//! non-root user with the file capabilities the image gives the binary,
//! then drops them. The `-dpdk` variant carries the DPDK runtime and PMDs.
//! images/k8s/deployment.yaml names the image and runs it as that user.
//!
//! The image must exist (`images/container/build.sh`; tests/run.sh builds
//! it before the suites); `PORTICO_CONTAINER_IMAGE` names another directory.

mod common;

use common::{curl, tally};
use portico::demo::topology::{SNAT_ADDR, ServiceOptions, VIP};
use portico_tests::{TempDir, require_programs, require_root, skip, wait_until};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The image's user and group.
const USER: &str = "65532:65532";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn image_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("PORTICO_CONTAINER_IMAGE") {
        return dir.into();
    }
    std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo().join("target"))
        .join("container-image")
}

/// The image layout, or `None` after a skip.
fn image(test: &str) -> Option<PathBuf> {
    if !require_root(test)
        || !require_programs(
            test,
            &["skopeo", "umoci", "getcap", "chroot"],
            "apt-get install skopeo umoci libcap2-bin coreutils",
        )
    {
        return None;
    }
    let dir = image_dir();
    if !dir.join("oci/index.json").is_file() {
        skip(
            test,
            &format!(
                "no container image in {} (build it with images/container/build.sh; tests/run.sh does)",
                dir.display()
            ),
        );
        return None;
    }
    Some(dir)
}

fn output(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `umoci unpack` of the image `tag` into a fresh directory; the rootfs path.
fn unpack(dir: &Path, tag: &str, into: &TempDir) -> PathBuf {
    let layout = format!("{}:{tag}", dir.join("oci").display());
    let bundle = into.path.join("bundle");
    output(
        "umoci",
        &["unpack", "--image", &layout, bundle.to_str().expect("path")],
    );
    bundle.join("rootfs")
}

/// `/usr/bin/portico` in `root` carries the file capabilities `caps`, and
/// `portico --version` runs there as the image's user (its libraries
/// resolve inside the image).
fn assert_capabilities_and_version(root: &str, caps: &[&str]) {
    let have = output("getcap", &[&format!("{root}/usr/bin/portico")]);
    for cap in caps {
        assert!(have.contains(cap), "{cap} in the file capabilities: {have}");
    }
    let userspec = format!("--userspec={USER}");
    let version = output(
        "chroot",
        &[&userspec, root, "/usr/bin/portico", "--version"],
    );
    assert_eq!(version.trim(), format!("portico {VERSION}"));
}

fn label<'a>(labels: &'a Value, key: &str) -> &'a str {
    labels
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("label {key} in {labels}"))
}

#[test]
fn skopeo_shows_user_entrypoint_and_labels() {
    let Some(dir) = image("container_image::skopeo_shows_user_entrypoint_and_labels") else {
        return;
    };
    let layout = format!("oci:{}:{VERSION}", dir.join("oci").display());
    let config: Value =
        serde_json::from_str(&output("skopeo", &["inspect", "--config", &layout])).expect("JSON");
    let c = &config["config"];
    assert_eq!(c["User"], USER, "{config}");
    assert_eq!(c["Entrypoint"], serde_json::json!(["/usr/bin/portico"]));
    assert_eq!(
        c["Cmd"],
        serde_json::json!(["run", "--config", "/etc/portico/portico.toml"])
    );
    let labels = &c["Labels"];
    assert_eq!(label(labels, "org.opencontainers.image.version"), VERSION);
    let repository = std::fs::read_to_string(repo().join("Cargo.toml")).expect("Cargo.toml");
    let source = label(labels, "org.opencontainers.image.source");
    assert!(
        repository.contains(&format!("repository = \"{source}\"")),
        "the source label is the workspace's repository: {source}"
    );
    assert_eq!(config["architecture"], "amd64");

    // The docker-archive holds the same image under portico:VERSION.
    let archive = dir.join(format!("portico-{VERSION}.docker.tar"));
    let archived: Value = serde_json::from_str(&output(
        "skopeo",
        &["inspect", &format!("docker-archive:{}", archive.display())],
    ))
    .expect("JSON");
    assert_eq!(archived["Labels"], *labels);
    let manifest = output(
        "tar",
        &["-xOf", archive.to_str().expect("path"), "manifest.json"],
    );
    assert!(
        manifest.contains(&format!("/portico:{VERSION}\"")),
        "docker-archive tag: {manifest}"
    );
}

/// The ConfigMap's portico.toml (images/k8s/configmap.yaml).
fn configmap_toml() -> String {
    let text =
        std::fs::read_to_string(repo().join("images/k8s/configmap.yaml")).expect("configmap.yaml");
    let doc: Value = serde_saphyr::from_str(&text).expect("YAML");
    doc["data"]["portico.toml"]
        .as_str()
        .expect("data.portico.toml")
        .to_owned()
}

#[test]
fn unpacked_rootfs_runs_version_and_check_as_the_image_user() {
    const TEST: &str = "container_image::unpacked_rootfs_runs_version_and_check_as_the_image_user";
    let Some(dir) = image(TEST) else {
        return;
    };
    let tmp = TempDir::new("oci").expect("temp dir");
    let rootfs = unpack(&dir, VERSION, &tmp);
    let root = rootfs.to_str().expect("path");
    assert_capabilities_and_version(root, &["cap_net_admin", "cap_net_raw"]);
    let userspec = format!("--userspec={USER}");

    std::fs::write(rootfs.join("etc/portico/portico.toml"), configmap_toml()).expect("write");
    let plan = output(
        "chroot",
        &[
            &userspec,
            root,
            "/usr/bin/portico",
            "check",
            "--config",
            "/etc/portico/portico.toml",
        ],
    );
    assert!(
        plan.contains("dataplane:") && plan.contains("outside"),
        "portico check prints the plan: {plan}"
    );
}

#[test]
fn deployment_runs_this_image_as_its_non_root_user() {
    let text = std::fs::read_to_string(repo().join("images/k8s/deployment.yaml"))
        .expect("deployment.yaml");
    let doc: Value = serde_saphyr::from_str(&text).expect("YAML");
    let container = &doc["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], format!("portico:{VERSION}"));
    let security = &container["securityContext"];
    assert_eq!(security["runAsUser"], 65532, "{security}");
    assert_eq!(security["runAsNonRoot"], true, "{security}");
    // File capabilities are raised at exec only without no_new_privs.
    assert_eq!(security["allowPrivilegeEscalation"], true, "{security}");
}

/// `portico run` from the unpacked image as its non-root user: the file
/// capabilities let it open its af_packet ports, it forwards, and then it
/// holds no capability and no_new_privs.
#[test]
fn non_root_gateway_from_the_image_forwards_then_holds_no_capability() {
    const TEST: &str =
        "container_image::non_root_gateway_from_the_image_forwards_then_holds_no_capability";
    let Some(dir) = image(TEST) else {
        return;
    };
    let Some(t) = common::topology(TEST, 2) else {
        return;
    };
    let tmp = TempDir::new("oci").expect("temp dir");
    let rootfs = unpack(&dir, VERSION, &tmp);
    std::fs::write(
        rootfs.join("etc/portico/portico.toml"),
        t.config_toml(&ServiceOptions::all(&t)),
    )
    .expect("write the config");
    let log = tmp.path.join("portico.log");
    let userspec = format!("--userspec={USER}");
    // A private mount namespace with /proc and /dev in the rootfs (a
    // container runtime mounts them): gone with the process. unshare, sh and chroot
    // exec each other, so the PID is portico's.
    let root = rootfs.to_str().expect("path");
    let gw = t
        .gateway
        .spawn_logged(
            "unshare",
            &[
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                "r=$1 u=$2; shift 2; mount -t proc proc \"$r/proc\" && mount --rbind /dev \"$r/dev\" && exec chroot \"$u\" \"$r\" \"$@\"",
                "sh",
                root,
                &userspec,
                "/usr/bin/portico",
                "run",
                "--config",
                "/etc/portico/portico.toml",
                "--admin-socket",
                "/run/portico/admin.sock",
                "--metrics-addr",
                "off",
            ],
            &log,
        )
        .expect("portico run starts");
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    let url = format!("http://{VIP}/");
    let up = wait_until(Duration::from_secs(30), || {
        curl(&t, &url, 1, true).first().is_some_and(Option::is_some)
    });
    assert!(up, "the VIP never answered; log:\n{}", log_text());
    let (per_backend, per_source, failed) = tally(&curl(&t, &url, 20, true));
    assert_eq!(failed, 0, "{per_backend:?}");
    assert_eq!(per_backend.len(), 2, "{per_backend:?}");
    assert_eq!(
        per_source.keys().collect::<Vec<_>>(),
        vec![&SNAT_ADDR.to_string()]
    );
    // The workers forward from the moment they have opened their rings;
    // `portico run` drops the privileges right after start-up returns,
    // which on a fast path can be after the first answers.
    assert!(
        wait_until(Duration::from_secs(30), || log_text()
            .contains("privileges dropped")),
        "the drop is logged:\n{}",
        log_text()
    );
    let pid = gw.pid().expect("running");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    for line in [
        "Uid:\t65532\t65532\t65532\t65532",
        "CapEff:\t0000000000000000",
        "CapPrm:\t0000000000000000",
        "NoNewPrivs:\t1",
    ] {
        assert!(
            status.contains(line),
            "{line:?} in /proc/{pid}/status:\n{status}\nlog:\n{}",
            log_text()
        );
    }
}

/// The `-dpdk` variant: its label, the PMDs in DPDK's plugin directory, the
/// DPDK capabilities on the binary, and a binary whose DPDK libraries
/// resolve inside the image (`portico --version` runs).
#[test]
fn dpdk_variant_carries_the_dpdk_runtime() {
    const TEST: &str = "container_image::dpdk_variant_carries_the_dpdk_runtime";
    let Some(dir) = image(TEST) else {
        return;
    };
    let tag = format!("{VERSION}-dpdk");
    let layout = format!("oci:{}:{tag}", dir.join("oci").display());
    let config: Value =
        serde_json::from_str(&output("skopeo", &["inspect", "--config", &layout])).expect("JSON");
    assert_eq!(
        label(&config["config"]["Labels"], "dev.portico.variant"),
        "dpdk"
    );
    assert_eq!(config["config"]["User"], USER);
    let tmp = TempDir::new("oci").expect("temp dir");
    let rootfs = unpack(&dir, &tag, &tmp);
    let root = rootfs.to_str().expect("path");
    let pmds: Vec<String> = std::fs::read_dir(rootfs.join("usr/lib/x86_64-linux-gnu/dpdk"))
        .expect("DPDK's plugin directory")
        .flat_map(|d| std::fs::read_dir(d.expect("entry").path()).expect("pmds"))
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    for pmd in [
        "librte_net_virtio.so",
        "librte_bus_pci.so",
        "librte_mempool_ring.so",
    ] {
        assert!(pmds.iter().any(|p| p == pmd), "{pmd} in {pmds:?}");
    }
    assert_capabilities_and_version(root, &["cap_sys_admin", "cap_sys_rawio", "cap_ipc_lock"]);
}
