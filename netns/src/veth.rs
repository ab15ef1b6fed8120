//! veth pairs between two namespaces.
//!
//! Invariants: a [`Veth`] pair is created with each end already in its
//! namespace (no moment in the caller's namespace), so it vanishes with
//! either [`Netns`] guard; a [`HostVeth`] has one end in the
//! caller's namespace and is deleted (by its unique name) when its guard is
//! dropped, or with the namespace of its other end, whichever comes first.

use crate::command::run;
use crate::ns::Netns;
use std::io;

/// A veth pair to create: end `a` in one namespace, end `b` in another,
/// each optionally with an address (CIDR), a MAC and an MTU, both with the
/// same number of queues. [`Veth::create`] makes it and brings both ends up.
#[derive(Debug, Clone, Copy)]
pub struct Veth<'a> {
    a: End<'a>,
    b: End<'a>,
    queues: u32,
}

#[derive(Debug, Clone, Copy)]
struct End<'a> {
    ns: &'a Netns,
    ifname: &'a str,
    addr: Option<&'a str>,
    mac: Option<[u8; 6]>,
    mtu: Option<u32>,
}

impl<'a> End<'a> {
    /// `ip link add` arguments of this end: name, MAC, MTU, namespace, queues.
    fn link_args(&self, queues: u32, out: &mut Vec<String>) {
        out.push(self.ifname.to_owned());
        if let Some(mac) = self.mac {
            out.extend(["address".to_owned(), mac_string(mac)]);
        }
        if let Some(mtu) = self.mtu {
            out.extend(["mtu".to_owned(), mtu.to_string()]);
        }
        out.extend(["netns".to_owned(), self.ns.name.clone()]);
        if queues > 1 {
            for what in ["numtxqueues", "numrxqueues"] {
                out.extend([what.to_owned(), queues.to_string()]);
            }
        }
    }
}

impl<'a> Veth<'a> {
    /// `a_if` in `a` — `b_if` in `b`; no addresses, the kernel's MACs and
    /// MTUs, one queue.
    pub fn new(a: &'a Netns, a_if: &'a str, b: &'a Netns, b_if: &'a str) -> Self {
        let end = |ns, ifname| End {
            ns,
            ifname,
            addr: None,
            mac: None,
            mtu: None,
        };
        Veth {
            a: end(a, a_if),
            b: end(b, b_if),
            queues: 1,
        }
    }

    /// Addresses (`"10.0.0.1/24"`) of the two ends, if any.
    pub fn addrs(mut self, a: Option<&'a str>, b: Option<&'a str>) -> Self {
        (self.a.addr, self.b.addr) = (a, b);
        self
    }

    /// MAC addresses of the two ends.
    pub fn macs(mut self, a: [u8; 6], b: [u8; 6]) -> Self {
        (self.a.mac, self.b.mac) = (Some(a), Some(b));
        self
    }

    /// MTUs (bytes) of the two ends.
    pub fn mtus(mut self, a: u32, b: u32) -> Self {
        (self.a.mtu, self.b.mtu) = (Some(a), Some(b));
        self
    }

    /// RX and TX queues on both ends (at least 1; AF_XDP binds one socket per
    /// RX queue; the sending end's TX queue picks the receiving end's RX
    /// queue).
    pub fn queues(mut self, queues: u32) -> Self {
        self.queues = queues.max(1);
        self
    }

    /// Create the pair, address the ends and bring them up.
    pub fn create(&self) -> io::Result<()> {
        let mut args: Vec<String> = vec!["link".into(), "add".into()];
        self.a.link_args(self.queues, &mut args);
        args.extend(["type", "veth", "peer", "name"].map(str::to_owned));
        self.b.link_args(self.queues, &mut args);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run("ip", &args)?;
        for end in [self.a, self.b] {
            if let Some(addr) = end.addr {
                end.ns
                    .exec("ip", &["addr", "add", addr, "dev", end.ifname])?;
            }
            end.ns.exec("ip", &["link", "set", end.ifname, "up"])?;
        }
        Ok(())
    }
}

fn mac_string(mac: [u8; 6]) -> String {
    let [a, b, c, d, e, f] = mac;
    format!("{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{f:02x}")
}

/// A veth pair with each end moved into a namespace and addressed (see
/// [`Veth`] for MACs, MTUs and queues).
pub fn veth(
    a: &Netns,
    a_if: &str,
    a_addr: Option<&str>,
    b: &Netns,
    b_if: &str,
    b_addr: Option<&str>,
) -> io::Result<()> {
    Veth::new(a, a_if, b, b_if).addrs(a_addr, b_addr).create()
}

/// A veth pair from the caller's namespace (the host end, [`Self::host_if`])
/// into a namespace (the end [`Self::ns_if`]), both addressed and up; the
/// host end is deleted by name on drop, which deletes the pair.
#[derive(Debug)]
pub struct HostVeth {
    pub host_if: String,
    pub ns_if: String,
}

impl HostVeth {
    /// `host_addr` (CIDR, e.g. `"10.254.0.1/30"`) on the host end, `ns_addr`
    /// on the end in `ns`; both ends get [`unique_name`](crate::unique_name)s.
    pub fn new(ns: &Netns, host_addr: &str, ns_addr: &str) -> io::Result<Self> {
        let host_if = crate::unique_name("vh");
        let ns_if = crate::unique_name("vn");
        run(
            "ip",
            &[
                "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if, "netns", &ns.name,
            ],
        )?;
        // From here on the guard deletes the pair.
        let link = HostVeth { host_if, ns_if };
        run("ip", &["addr", "add", host_addr, "dev", &link.host_if])?;
        run("ip", &["link", "set", &link.host_if, "up"])?;
        ns.exec("ip", &["addr", "add", ns_addr, "dev", &link.ns_if])?;
        ns.exec("ip", &["link", "set", &link.ns_if, "up"])?;
        Ok(link)
    }
}

impl Drop for HostVeth {
    fn drop(&mut self) {
        let _ = run("ip", &["link", "del", &self.host_if]);
    }
}
