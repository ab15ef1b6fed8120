//! The end-to-end harness itself: namespaces, veth, a real nginx reached by a
//! real curl (through the kernel, no Portico), and cleanup of everything.

use portico_tests::{Netns, have, nginx, require_root, veth, wait_until};
use std::time::Duration;

#[test]
fn namespaces_veth_nginx_and_curl_work_and_are_cleaned_up() {
    if !require_root("harness::namespaces_veth_nginx_and_curl_work_and_are_cleaned_up") {
        return;
    }
    assert!(
        have("nginx") && have("curl"),
        "nginx and curl are installed by tests/run.sh"
    );
    let (client_name, server_name);
    {
        let client = Netns::new("hc").expect("client netns");
        let server = Netns::new("hs").expect("server netns");
        client_name = client.name.clone();
        server_name = server.name.clone();
        veth(
            &client,
            "c0",
            Some("10.99.0.1/24"),
            &server,
            "s0",
            Some("10.99.0.2/24"),
        )
        .expect("veth");
        let (_nginx, _dir) = nginx(&server, "one", "10.99.0.2:8080").expect("nginx");
        let mut body = String::new();
        let ok = wait_until(Duration::from_secs(10), || {
            let out = client
                .exec_unchecked(
                    "curl",
                    &["-sS", "--max-time", "2", "http://10.99.0.2:8080/"],
                )
                .expect("curl runs");
            body = String::from_utf8_lossy(&out.stdout).into_owned();
            out.status.success()
        });
        assert!(ok, "curl through veth reaches nginx");
        assert_eq!(body.trim(), "backend one saw 10.99.0.1");
    }
    let list = portico_tests::run("ip", &["netns", "list"]).expect("ip netns list");
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(
        !list.contains(&client_name) && !list.contains(&server_name),
        "namespaces removed"
    );
}
