//! `driver = "dpdk"`: the port's `dpdk_device` and the `[dpdk]` section.
//! Whether the driver is accepted depends on the build (nic-config's
//! feature `dpdk`); the device and section rules hold in both.

#[cfg(feature = "dpdk")]
use nic_config::DpdkDevicePlan;
use nic_config::{ConfigError, Problem, parse};

const BASE: &str = r#"
[[port]]
name = "outside"
driver = "dpdk"
interface = "out0"
role = "outside"
node_addresses = ["192.0.2.1/24"]
OUTSIDE_DEVICE

[[port]]
name = "inside"
driver = "dpdk"
interface = "in0"
role = "inside"
snat_addresses = ["10.1.0.1/24"]
INSIDE_DEVICE

DPDK_SECTION
"#;

fn file(outside: &str, inside: &str, section: &str) -> String {
    BASE.replace("OUTSIDE_DEVICE", outside)
        .replace("INSIDE_DEVICE", inside)
        .replace("DPDK_SECTION", section)
}

#[cfg_attr(feature = "dpdk", allow(dead_code))]
fn problems(text: &str) -> Vec<Problem> {
    match parse(text) {
        Err(ConfigError::Invalid(problems)) => problems,
        Err(other) => panic!("expected validation problems, got: {other}"),
        Ok(plan) => panic!("expected validation problems, got a plan:\n{plan}"),
    }
}

/// The problems besides "not compiled into this build" (present only
/// without the feature).
fn device_problems(text: &str) -> Vec<Problem> {
    let all = match parse(text) {
        Err(ConfigError::Invalid(problems)) => problems,
        Err(other) => panic!("{other}"),
        Ok(_) => Vec::new(),
    };
    all.into_iter()
        .filter(|p| !p.reason.contains("not compiled into this build"))
        .collect()
}

#[cfg(feature = "dpdk")]
#[test]
fn devices_and_section_become_the_plan() {
    let plan = parse(&file(
        r#"dpdk_device = "03:00.1""#,
        r#"dpdk_device = "net_pcap0,iface=eth1""#,
        "[dpdk]\ncores = [1]\nmemory_mb = 1024\nhugepages = true\nrx_desc = 512\nextra_args = [\"--log-level=lib.eal:debug\"]",
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        plan.ports[0].dpdk_device,
        Some(DpdkDevicePlan::Pci("0000:03:00.1".into()))
    );
    assert_eq!(
        plan.ports[1].dpdk_device,
        Some(DpdkDevicePlan::Vdev {
            name: "net_pcap0".into(),
            args: "iface=eth1".into()
        })
    );
    assert_eq!(plan.dpdk.cores, vec![1]);
    assert_eq!(plan.dpdk.memory_mb, 1024);
    assert!(plan.dpdk.hugepages);
    assert_eq!((plan.dpdk.rx_desc, plan.dpdk.tx_desc), (512, 1024));
    assert_eq!(plan.dpdk.extra_args, ["--log-level=lib.eal:debug"]);

    let plan = parse(&file("", r#"dpdk_device = "net_af_xdp""#, "")).expect("defaults");
    assert_eq!(plan.ports[0].dpdk_device, Some(DpdkDevicePlan::AfPacket));
    assert_eq!(plan.ports[1].dpdk_device, Some(DpdkDevicePlan::AfXdp));
    assert_eq!((plan.dpdk.memory_mb, plan.dpdk.hugepages), (512, false));
}

#[cfg(not(feature = "dpdk"))]
#[test]
fn without_the_feature_the_driver_is_refused_with_how_to_get_it() {
    let p = problems(&file("", "", ""));
    assert_eq!(p.len(), 2, "{p:?}");
    for (i, problem) in p.iter().enumerate() {
        assert_eq!(problem.path, format!("port[{i}].driver"));
        assert!(
            problem.reason.contains("--features dpdk"),
            "{}",
            problem.reason
        );
    }
}

#[test]
fn bad_devices_and_section_values_are_all_reported() {
    let p = device_problems(&file(
        r#"dpdk_device = "0000:03:20.0""#,
        r#"dpdk_device = "eth1""#,
        "[dpdk]\ncores = [0, 0]\nmemory_mb = 16\nrx_desc = 32768\ntx_desc = 8\nextra_args = [\"\"]",
    ));
    let paths: Vec<&str> = p.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "port[0].dpdk_device",
            "port[1].dpdk_device",
            "dpdk.cores[1]",
            "dpdk.memory_mb",
            "dpdk.rx_desc",
            "dpdk.tx_desc",
            "dpdk.extra_args[0]",
        ],
        "{p:?}"
    );
    assert!(p[0].reason.contains("PCI address"), "{}", p[0].reason);
    assert!(p[3].reason.contains("out of range"), "{}", p[3].reason);
}

#[test]
fn unknown_dpdk_keys_are_rejected() {
    let err = parse(&file("", "", "[dpdk]\nmemory = 512")).expect_err("unknown key");
    assert!(err.to_string().contains("memory"), "{err}");
}
