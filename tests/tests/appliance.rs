//! The appliance image (images/appliance/) end to end: the kernel and
//! initramfs `images/appliance/build.sh` built, booted by
//! `images/appliance/run.sh` under QEMU (KVM when it works, else TCG) with
//! its two virtio-net NICs on TAP devices. The TAPs are moved into a client
//! namespace (curl, UDP queries) and a backend namespace (three nginx and
//! three UDP echo servers on 10.1.0.10-12); the guest's `portico run`
//! forwards between them on af_packet, AF_XDP (native XDP on virtio_net) and
//! DPDK (the `net_virtio` PMD on the NICs bound to uio_pci_generic).
//!
//! QEMU runs in its own namespace: its user-mode management NIC forwards
//! the guest's admin page (`/cgi-bin/stats` runs `portico stats`) and
//! `/metrics` to 127.0.0.1:8080 and :9100 of that namespace, so parallel
//! tests never share a port. Each test also powers the appliance off with
//! the ACPI power button (QEMU monitor `system_powerdown`) and checks that
//! `portico run` stopped cleanly before the power went.
//!
//! `images/appliance/demo.sh`, the README's "boot it and see traffic"
//! command, runs too, and its output is checked.
//!
//! The image must exist (`images/appliance/build.sh`; tests/run.sh builds
//! it before the suites); `PORTICO_APPLIANCE_IMAGE` names another directory.

mod common;

use common::{PORTICO, parse_curl, tally};
use portico_tests::{Netns, Process, TempDir, nginx, require_programs, require_root, skip};
use portico_tests::{unique_name, wait_until};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const CLIENT_ADDR: &str = "192.0.2.100/24";
const VIP: &str = "192.0.2.10";
const NODE_ADDR: &str = "192.0.2.1";
const NODE_PORT: u16 = 30080;
const SNAT_ADDR: &str = "10.1.0.1";
const BACKENDS: [(&str, &str); 3] = [
    ("b1", "10.1.0.10"),
    ("b2", "10.1.0.11"),
    ("b3", "10.1.0.12"),
];
/// Ports of QEMU's host forwards, inside the QEMU namespace.
const ADMIN_PORT: u16 = 8080;
const METRICS_PORT: u16 = 9100;
/// Requests per address: with three backends, a backend missing from 30
/// Maglev picks over random client ports has probability 3 * (2/3)^30 ~ 2e-5.
const REQUESTS: usize = 30;
/// Under TCG on a loaded 2-core machine a boot takes tens of seconds.
const BOOT_TIMEOUT: Duration = Duration::from_secs(240);

/// Which driver the guest's ports use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Driver {
    Afpacket,
    Afxdp,
    Dpdk,
}

/// The guest's portico.toml: eth0 (PCI 00:04.0) outside, eth1 (00:05.0)
/// inside, a TCP service on the VIP and a NodePort, a UDP service on the
/// VIP, full NAT from 10.1.0.1.
fn driver_name(driver: Driver) -> &'static str {
    match driver {
        Driver::Afpacket => "afpacket",
        Driver::Afxdp => "afxdp",
        Driver::Dpdk => "dpdk",
    }
}

fn config(driver: Driver) -> String {
    let name = driver_name(driver);
    let (driver_section, dev0, dev1) = match driver {
        Driver::Afpacket => (String::new(), "", ""),
        Driver::Afxdp => ("[dataplane.afxdp]\nmode = \"native\"\n".to_owned(), "", ""),
        Driver::Dpdk => (
            "[dpdk]\nhugepages = true\nmemory_mb = 256\nextra_args = [\"--iova-mode=pa\"]\n"
                .to_owned(),
            "dpdk_device = \"0000:00:04.0\"\n",
            "dpdk_device = \"0000:00:05.0\"\n",
        ),
    };
    let backends = |port: u16| {
        BACKENDS
            .iter()
            .map(|(_, a)| format!("{{ address = \"{a}\", port = {port} }}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "[dataplane]\nworkers = 1\n{driver_section}\n\
         [[port]]\nname = \"outside\"\ndriver = \"{name}\"\ninterface = \"eth0\"\n{dev0}\
         role = \"outside\"\nnode_addresses = [\"{NODE_ADDR}/24\"]\n\n\
         [[port]]\nname = \"inside\"\ndriver = \"{name}\"\ninterface = \"eth1\"\n{dev1}\
         role = \"inside\"\nsnat_addresses = [\"{SNAT_ADDR}/24\"]\n\n\
         [[service]]\nname = \"web\"\nprotocol = \"tcp\"\nvip = \"{VIP}\"\nport = 80\n\
         node_port = {NODE_PORT}\nsnat = true\nbackends = [{}]\n\n\
         [[service]]\nname = \"dns\"\nprotocol = \"udp\"\nvip = \"{VIP}\"\nport = 53\n\
         snat = true\nbackends = [{}]\n",
        backends(8080),
        backends(5353)
    )
}

/// The appliance image directory (kernel + initramfs).
fn image_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("PORTICO_APPLIANCE_IMAGE") {
        return dir.into();
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("appliance-image")
}

/// The appliance image, or `None` after a skip.
fn image_or_skip(test: &str) -> Option<PathBuf> {
    let image = image_dir();
    if image.join("initramfs.img").is_file() {
        return Some(image);
    }
    skip(
        test,
        &format!(
            "no appliance image in {} (build it with images/appliance/build.sh; tests/run.sh does)",
            image.display()
        ),
    );
    None
}

/// A booted appliance with its client and backend namespaces. Field order
/// is drop order: QEMU and the servers stop before their namespaces go.
struct Appliance {
    qemu: Option<Process>,
    _servers: Vec<Process>,
    _nginx_dirs: Vec<TempDir>,
    qemu_ns: Netns,
    client: Netns,
    _backend: Netns,
    dir: TempDir,
    /// From QEMU's start to the first HTTP answer through the VIP.
    boot_to_first_answer: Duration,
}

impl Appliance {
    fn console(&self) -> String {
        std::fs::read_to_string(self.dir.path.join("console.log")).unwrap_or_default()
    }

    fn monitor_path(&self) -> PathBuf {
        self.dir.path.join("monitor.sock")
    }

    /// GET `path` of a forwarded guest port (inside the QEMU namespace).
    fn get(&self, port: u16, path: &str) -> Option<String> {
        let url = format!("http://127.0.0.1:{port}{path}");
        let out = self
            .qemu_ns
            .exec_unchecked("curl", &["-sf", "--max-time", "20", &url])
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The appliance's state line (`/cgi-bin/state`).
    fn state(&self) -> Option<String> {
        self.get(ADMIN_PORT, "/cgi-bin/state")
            .map(|s| s.trim().to_owned())
    }

    /// `count` HTTP GETs of `url` from the client, one connection each.
    fn curl(&self, url: &str, count: usize) -> Vec<Option<String>> {
        let mut args = vec!["-sS", "--max-time", "10", "-H", "Connection: close"];
        args.extend(["-w", "\n== %{http_code}\n"]);
        args.extend(std::iter::repeat_n(url, count));
        let out = self
            .client
            .exec_unchecked("curl", &args)
            .expect("curl runs");
        parse_curl(&String::from_utf8_lossy(&out.stdout), count)
    }

    /// `count` UDP queries to the VIP from the client, each from a new
    /// socket; the answers' `backend NAME saw ADDR` parts.
    fn udp(&self, count: usize) -> Vec<Option<String>> {
        let target = format!("{VIP}:53");
        let count_s = count.to_string();
        let out = self
            .client
            .exec_unchecked(
                PORTICO,
                &[
                    "tool",
                    "udp-query",
                    "--target",
                    &target,
                    "--count",
                    &count_s,
                    "--timeout-ms",
                    "5000",
                ],
            )
            .expect("udp-query runs");
        let mut answers: Vec<Option<String>> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|line| {
                // `ok MICROS TOKEN backend NAME saw ADDR`
                line.strip_prefix("ok ")
                    .and_then(|rest| rest.find(" backend ").map(|i| rest[i + 1..].to_owned()))
            })
            .collect();
        answers.resize(count, None);
        answers
    }

    /// Press the ACPI power button and wait for QEMU to exit.
    fn power_off(&mut self) -> bool {
        let mut monitor = UnixStream::connect(self.monitor_path()).expect("QEMU monitor");
        monitor
            .set_read_timeout(Some(Duration::from_millis(500)))
            .expect("timeout");
        let mut banner = [0u8; 4096];
        let _ = monitor.read(&mut banner);
        monitor
            .write_all(b"system_powerdown\n")
            .expect("monitor command");
        let qemu = self.qemu.as_mut().expect("QEMU running");
        let off = wait_until(Duration::from_secs(120), || qemu.has_exited());
        if off {
            self.qemu = None;
        }
        off
    }
}

/// Boot the appliance with `config` (`hugepages` 2 MB pages) and wire its
/// NICs to a client and a backend namespace; `None` after a skip.
fn boot(test: &str, config: &str, hugepages: u32) -> Option<Appliance> {
    if !require_root(test)
        || !require_programs(
            test,
            &["qemu-system-x86_64", "nginx", "curl"],
            "apt-get install qemu-system-x86 nginx-light curl",
        )
    {
        return None;
    }
    let image = image_or_skip(test)?;
    let dir = TempDir::new("appl").expect("temp dir");
    let config_path = dir.path.join("portico.toml");
    std::fs::write(&config_path, config).expect("write the config");
    let qemu_ns = Netns::new("apq").expect("QEMU namespace");
    let client = Netns::new("apc").expect("client namespace");
    let backend = Netns::new("apb").expect("backend namespace");
    let taps = [unique_name("apt"), unique_name("apt")];
    for tap in &taps {
        qemu_ns
            .exec("ip", &["tuntap", "add", "dev", tap, "mode", "tap"])
            .expect("create the TAP");
        qemu_ns
            .exec("ip", &["link", "set", tap, "up"])
            .expect("TAP up");
    }
    let run_sh = Path::new(env!("CARGO_MANIFEST_DIR")).join("../images/appliance/run.sh");
    let config_s = config_path.to_string_lossy().into_owned();
    let monitor = dir.path.join("monitor.sock").to_string_lossy().into_owned();
    let image_s = image.to_string_lossy().into_owned();
    let (admin, metrics, pages) = (
        ADMIN_PORT.to_string(),
        METRICS_PORT.to_string(),
        hugepages.to_string(),
    );
    let qemu = qemu_ns
        .spawn_logged(
            run_sh.to_str().expect("path"),
            &[
                "--config",
                &config_s,
                "--tap0",
                &taps[0],
                "--tap1",
                &taps[1],
                "--admin-port",
                &admin,
                "--metrics-port",
                &metrics,
                "--monitor",
                &monitor,
                "--hugepages",
                &pages,
                "--memory-mb",
                "1024",
                "--image",
                &image_s,
            ],
            &dir.path.join("console.log"),
        )
        .expect("run.sh starts");
    let mut appliance = Appliance {
        qemu: Some(qemu),
        _servers: Vec::new(),
        _nginx_dirs: Vec::new(),
        qemu_ns,
        client,
        _backend: backend,
        dir,
        boot_to_first_answer: Duration::ZERO,
    };
    // QEMU holds both TAPs once their carrier is up; only then may they
    // move (QEMU looks them up by name in its namespace).
    let attached = wait_until(Duration::from_secs(60), || {
        taps.iter().all(|tap| {
            appliance
                .qemu_ns
                .exec_unchecked("ip", &["link", "show", tap])
                .is_ok_and(|o| !String::from_utf8_lossy(&o.stdout).contains("NO-CARRIER"))
        })
    });
    assert!(
        attached,
        "QEMU never attached the TAPs; console:\n{}",
        appliance.console()
    );
    let sides = [
        (&appliance.client, &taps[0]),
        (&appliance._backend, &taps[1]),
    ];
    for (ns, tap) in sides {
        appliance
            .qemu_ns
            .exec("ip", &["link", "set", tap, "netns", &ns.name])
            .expect("move the TAP");
        ns.exec("ip", &["link", "set", tap, "up"]).expect("TAP up");
    }
    appliance
        .client
        .exec("ip", &["addr", "add", CLIENT_ADDR, "dev", &taps[0]])
        .expect("client address");
    for (name, addr) in BACKENDS {
        let backend = &appliance._backend;
        backend
            .exec(
                "ip",
                &["addr", "add", &format!("{addr}/24"), "dev", &taps[1]],
            )
            .expect("backend address");
        let (server, ngx_dir) = nginx(backend, name, &format!("{addr}:8080")).expect("nginx");
        appliance._servers.push(server);
        appliance._nginx_dirs.push(ngx_dir);
        let udp = format!("{addr}:5353");
        let echo = backend
            .spawn_logged(
                PORTICO,
                &["tool", "udp-echo", "--listen", &udp, "--name", name],
                &appliance.dir.path.join(format!("{name}-udp.log")),
            )
            .expect("udp-echo");
        appliance._servers.push(echo);
    }
    Some(appliance)
}

/// Wait until HTTP through the VIP answers (the guest booted, portico runs,
/// ARP resolved both ways) and note how long that took from QEMU's start.
fn wait_for_first_answer(a: &mut Appliance, started: Instant) {
    let url = format!("http://{VIP}/");
    let answered = wait_until(BOOT_TIMEOUT, || {
        a.curl(&url, 1).first().is_some_and(Option::is_some)
    });
    assert!(
        answered,
        "HTTP through the appliance never answered; state {:?}; console:\n{}",
        a.state(),
        a.console()
    );
    a.boot_to_first_answer = started.elapsed();
    eprintln!(
        "appliance: boot to first answer {:.1} s",
        a.boot_to_first_answer.as_secs_f64()
    );
}

fn assert_every_backend_from_snat(a: &Appliance, label: &str, answers: &[Option<String>]) {
    let (per_backend, per_source, failed) = tally(answers);
    assert_eq!(
        failed,
        0,
        "{label}: failed requests ({per_backend:?}); console:\n{}",
        a.console()
    );
    assert_eq!(
        per_backend.keys().cloned().collect::<Vec<_>>(),
        BACKENDS
            .iter()
            .map(|(n, _)| n.to_string())
            .collect::<Vec<_>>(),
        "{label}: every backend answers"
    );
    assert_eq!(
        per_source.keys().cloned().collect::<Vec<_>>(),
        vec![SNAT_ADDR.to_owned()],
        "{label}: the backends see the SNAT address"
    );
}

/// Boot with `driver`, send HTTP through the VIP and the NodePort and UDP
/// through the VIP, read `portico stats` and /metrics from the host, then
/// power off with the ACPI button.
fn traffic_through_the_appliance(test: &str, driver: Driver) {
    let hugepages = if driver == Driver::Dpdk { 192 } else { 0 };
    let started = Instant::now();
    let Some(mut a) = boot(test, &config(driver), hugepages) else {
        return;
    };
    wait_for_first_answer(&mut a, started);

    let vip = a.curl(&format!("http://{VIP}/"), REQUESTS);
    assert_every_backend_from_snat(&a, "VIP", &vip);
    let node_port = a.curl(&format!("http://{NODE_ADDR}:{NODE_PORT}/"), REQUESTS);
    assert_every_backend_from_snat(&a, "NodePort", &node_port);
    let udp = a.udp(REQUESTS);
    assert_every_backend_from_snat(&a, "UDP via the VIP", &udp);

    // `portico stats` of the guest, from the host (the admin page).
    let text = a.get(ADMIN_PORT, "/cgi-bin/stats").expect("admin page");
    assert!(
        text.contains("outside") && text.contains("eth0") && text.contains("inside"),
        "portico stats through the admin page: {text}"
    );
    let raw = a
        .get(ADMIN_PORT, "/cgi-bin/stats?json")
        .expect("JSON stats");
    let stats: Value = serde_json::from_str(&raw).unwrap_or_else(|e| panic!("{e}: {raw}"));
    let flows = stats
        .pointer("/total/flows_created")
        .and_then(Value::as_u64);
    assert!(
        flows.is_some_and(|n| n >= 3 * REQUESTS as u64),
        "flows created in the guest's stats: {flows:?} in {stats}"
    );
    let metrics = a.get(METRICS_PORT, "/metrics").expect("metrics");
    let rx: u64 = metrics
        .lines()
        .find(|l| l.starts_with("portico_port_rx_packets_total{port=\"outside\""))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("outside rx in /metrics:\n{metrics}"));
    assert!(rx >= 3 * REQUESTS as u64, "outside rx frames {rx}");

    let console = a.console();
    let expect_driver = match driver {
        Driver::Afpacket => "driver=afpacket",
        Driver::Afxdp => "XDP redirect program attached interface=eth0 mode=native",
        Driver::Dpdk => "pmd=net_virtio",
    };
    assert!(
        console.contains(expect_driver),
        "{expect_driver} on the console:\n{console}"
    );
    // afpacket keeps no capability, nor does AF_XDP with the appliance's one
    // worker (no steering program to load); DPDK SYS_ADMIN, IPC_LOCK and
    // SYS_RAWIO (gateway::privileges).
    let kept = match driver {
        Driver::Dpdk => "0x224000",
        _ => "0x0",
    };
    let dropped = format!(
        "privileges dropped (no_new_privs set) driver={}",
        driver_name(driver)
    );
    assert!(
        console.contains(&dropped)
            && console.contains(&format!("effective={kept} permitted={kept}")),
        "{dropped} keeping {kept} on the console:\n{console}"
    );

    assert!(
        a.power_off(),
        "the appliance did not power off:\n{}",
        a.console()
    );
    let console = a.console();
    for line in [
        "state: stopping",
        "portico::gateway::lifecycle: stopped",
        "powering off",
    ] {
        assert!(
            console.contains(line),
            "{line:?} on the console:\n{console}"
        );
    }
}

#[test]
fn appliance_forwards_on_afpacket() {
    traffic_through_the_appliance(
        "appliance::appliance_forwards_on_afpacket",
        Driver::Afpacket,
    );
}

#[test]
fn appliance_forwards_on_afxdp_native_virtio_net() {
    traffic_through_the_appliance(
        "appliance::appliance_forwards_on_afxdp_native_virtio_net",
        Driver::Afxdp,
    );
}

#[test]
fn appliance_forwards_on_dpdk_net_virtio_pmd() {
    traffic_through_the_appliance(
        "appliance::appliance_forwards_on_dpdk_net_virtio_pmd",
        Driver::Dpdk,
    );
}

/// Wait until the appliance reports `state` (`/cgi-bin/state`).
fn wait_for_state(a: &Appliance, state: &str) {
    let mut last = None;
    let reached = wait_until(BOOT_TIMEOUT, || {
        last = a.state();
        last.as_deref().is_some_and(|s| s.starts_with(state))
    });
    assert!(
        reached,
        "state {state:?} never reached (last {last:?}); console:\n{}",
        a.console()
    );
}

#[test]
fn bad_config_prints_every_problem_and_the_appliance_stays_up() {
    const TEST: &str = "appliance::bad_config_prints_every_problem_and_the_appliance_stays_up";
    // Two problems: an interface name too long for Linux and a VIP that
    // is no address.
    let bad = config(Driver::Afpacket)
        .replace(
            "interface = \"eth1\"",
            "interface = \"this-name-is-far-too-long\"",
        )
        .replace(
            &format!("vip = \"{VIP}\"\nport = 53"),
            "vip = \"192.0.2.300\"\nport = 53",
        );
    let Some(mut a) = boot(TEST, &bad, 0) else {
        return;
    };
    wait_for_state(&a, "bad-config");
    let check = a
        .get(ADMIN_PORT, "/check.txt")
        .expect("the admin page serves the check");
    // Let a boot loop show itself if there were one.
    std::thread::sleep(Duration::from_secs(5));
    let console = a.console();
    for problem in [
        "port[1].interface: \"this-name-is-far-too-long\"",
        "service[1].vip: \"192.0.2.300\"",
    ] {
        assert!(check.contains(problem), "{problem} in /check.txt:\n{check}");
        assert!(
            console.contains(problem),
            "{problem} on the console:\n{console}"
        );
    }
    assert_eq!(
        console.matches("state: booting").count(),
        1,
        "booted once:\n{console}"
    );
    assert!(
        !console.contains("state: running"),
        "portico run never starts on a bad config:\n{console}"
    );
    assert_eq!(a.state().as_deref(), Some("bad-config"));
    assert!(
        a.power_off(),
        "the appliance did not power off:\n{}",
        a.console()
    );
}

#[test]
fn a_crashing_gateway_is_restarted_with_backoff() {
    const TEST: &str = "appliance::a_crashing_gateway_is_restarted_with_backoff";
    // Valid for `portico check`, but eth7 does not exist: `portico run` fails.
    let failing = config(Driver::Afpacket).replace("interface = \"eth1\"", "interface = \"eth7\"");
    let Some(mut a) = boot(TEST, &failing, 0) else {
        return;
    };
    let backed_off = wait_until(BOOT_TIMEOUT, || a.console().contains("next start in 4s"));
    let console = a.console();
    assert!(backed_off, "restarts with a growing backoff:\n{console}");
    for line in ["next start in 1s", "next start in 2s", "eth7"] {
        assert!(
            console.contains(line),
            "{line:?} on the console:\n{console}"
        );
    }
    assert!(
        a.get(ADMIN_PORT, "/cgi-bin/state").is_some(),
        "the admin page answers while portico restarts"
    );
    assert!(
        a.power_off(),
        "the appliance did not power off:\n{}",
        a.console()
    );
}

/// The `N text` lines `uniq -c` printed under the demo's heading starting
/// with `heading`, as text -> count.
fn demo_section(out: &str, heading: &str) -> BTreeMap<String, usize> {
    out.lines()
        .skip_while(|l| !l.starts_with(heading))
        .skip(1)
        .take_while(|l| !l.starts_with("=="))
        .filter_map(|l| {
            let (n, text) = l.trim().split_once(' ')?;
            Some((text.to_owned(), n.parse().ok()?))
        })
        .collect()
}

/// images/appliance/demo.sh (the README's command) boots the appliance,
/// shows HTTP and UDP through it from every backend, the guest's stats,
/// and powers it off.
#[test]
fn the_demo_boots_the_appliance_and_shows_traffic_through_it() {
    const TEST: &str = "appliance::the_demo_boots_the_appliance_and_shows_traffic_through_it";
    if !require_root(TEST)
        || !require_programs(
            TEST,
            &["qemu-system-x86_64", "curl", "python3", "timeout"],
            "apt-get install qemu-system-x86 curl python3 coreutils",
        )
    {
        return;
    }
    let Some(image) = image_or_skip(TEST) else {
        return;
    };
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../images/appliance/demo.sh");
    let out = std::process::Command::new("timeout")
        .arg("600")
        .arg(&demo)
        .env("PORTICO", PORTICO)
        .env("PORTICO_APPLIANCE_IMAGE", &image)
        .output()
        .expect("demo.sh runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "demo.sh: {:?}\n{stdout}\n{stderr}",
        out.status
    );
    let every_backend_from_snat = |answers: &BTreeMap<String, usize>, prefix: &str| {
        let want: BTreeMap<String, usize> = BACKENDS
            .iter()
            .map(|(n, _)| (format!("{prefix}{n} saw {SNAT_ADDR}"), 0))
            .collect();
        assert_eq!(
            answers.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>(),
            "{stdout}"
        );
        assert_eq!(answers.values().sum::<usize>(), 30, "{stdout}");
    };
    every_backend_from_snat(
        &demo_section(&stdout, "== 30 HTTP requests to the VIP"),
        "backend ",
    );
    every_backend_from_snat(
        &demo_section(&stdout, "== 30 HTTP requests to the NodePort"),
        "backend ",
    );
    every_backend_from_snat(&demo_section(&stdout, "== 30 UDP queries"), "");
    for line in ["portico pid", "web (tcp)", "powering off"] {
        assert!(
            stdout.contains(line),
            "{line:?} in the demo's output:\n{stdout}"
        );
    }
}
