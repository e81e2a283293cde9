//! The simulated VLAN: a bridge, one namespace per infra pod plugged into
//! it at the rendered addresses, and the management pod network with an
//! address for each control-plane Service.

use std::path::Path;

use anyhow::Result;

use crate::lab::{Lab, run};
use crate::render::Rendered;

/// The namespaces of the infra pods and of the management network.
pub struct Namespaces {
    pub mgmt: String,
    pub dhcp: String,
    /// One per DNS replica, in replica order (`<p>-dns`, `<p>-dns-2`).
    pub dns: Vec<String>,
    /// One per proxy replica, in replica order (`<p>-proxy`, `<p>-proxy-2`).
    pub proxy: Vec<String>,
}

/// Replica `i`'s suffix: none for the first, `-2` for the second.
pub fn replica_suffix(i: usize) -> String {
    if i == 0 {
        String::new()
    } else {
        format!("-{}", i + 1)
    }
}

/// Proxy replica `i`'s address on the pod network (where the table is
/// pushed to): 10.128.0.2, 10.128.0.12, ...
pub fn proxy_pod_ip(i: usize) -> String {
    format!("10.128.0.{}", 2 + 10 * i)
}

/// Builds the bridge, the infra pods' namespaces (one per replica), the
/// management network and the proxies' stand-in for cluster DNS.
pub fn build(lab: &Lab, r: &Rendered) -> Result<Namespaces> {
    let Rendered {
        dhcp_ip,
        plen,
        iface,
        replicas,
        services,
        ..
    } = r;
    println!(
        "\ntopology: namespaces {}-{{vlan,mgmt,dhcp,dns,dns-2,proxy,proxy-2,w-*}}",
        lab.prefix
    );
    let vlan = lab.add_ns("vlan")?;
    run(&["ip", "-n", &vlan, "link", "add", "br0", "type", "bridge"])?;
    run(&["ip", "-n", &vlan, "link", "set", "br0", "up"])?;
    let mgmt = lab.add_ns("mgmt")?;
    let dhcp_ns = lab.add_ns("dhcp")?;
    lab.plug(
        &dhcp_ns,
        "dhcp",
        iface,
        Some(&format!("{dhcp_ip}/{plen}")),
        None,
    )?;
    // The pod network is a bridge (`pods`): the proxy and DNS pods are on
    // it, and mgmt's own addresses (a management pod, the control-plane
    // Services) sit on the bridge.
    run(&["ip", "-n", &mgmt, "link", "add", "pods", "type", "bridge"])?;
    run(&["ip", "-n", &mgmt, "link", "set", "pods", "up"])?;
    run(&[
        "ip",
        "-n",
        &mgmt,
        "addr",
        "add",
        "10.128.0.1/16",
        "dev",
        "pods",
    ])?;
    for (ip, _) in services.values() {
        run(&[
            "ip",
            "-n",
            &mgmt,
            "addr",
            "add",
            &format!("{ip}/16"),
            "dev",
            "pods",
        ])?;
    }
    let mut dns = Vec::new();
    for (i, ip) in replicas.dns.iter().enumerate() {
        let name = format!("dns{}", replica_suffix(i));
        let ns = lab.add_ns(&name)?;
        lab.plug(&ns, &name, "net1", Some(&format!("{ip}/{plen}")), None)?;
        dns.push(ns);
    }
    let mut proxy = Vec::new();
    for (i, ip) in replicas.proxy.iter().enumerate() {
        let name = format!("proxy{}", replica_suffix(i));
        let ns = lab.add_ns(&name)?;
        lab.plug(&ns, &name, "net1", Some(&format!("{ip}/{plen}")), None)?;
        // The proxy's pod interface to the management network.
        pod_interface(&ns, &mgmt, &name, &proxy_pod_ip(i))?;
        // Cluster DNS stand-in for the proxy: `ip netns exec` mounts these over /etc.
        let etc = Path::new("/etc/netns").join(&ns);
        std::fs::create_dir_all(&etc)?;
        let mut hosts = String::from("127.0.0.1 localhost\n");
        for (host, (ip, _)) in services {
            hosts.push_str(&format!("{ip} {host}\n"));
        }
        std::fs::write(etc.join("hosts"), hosts)?;
        std::fs::write(etc.join("resolv.conf"), "nameserver 10.128.0.1\n")?;
        proxy.push(ns);
    }
    Ok(Namespaces {
        mgmt,
        dhcp: dhcp_ns,
        dns,
        proxy,
    })
}

/// Plugs `ns` into the management pod network as `eth0` at `ip` (the peer
/// in mgmt is `port`, on the `pods` bridge).
pub fn pod_interface(ns: &str, mgmt: &str, port: &str, ip: &str) -> Result<()> {
    run(&[
        "ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", mgmt,
    ])?;
    run(&[
        "ip",
        "-n",
        ns,
        "addr",
        "add",
        &format!("{ip}/16"),
        "dev",
        "eth0",
    ])?;
    run(&["ip", "-n", ns, "link", "set", "eth0", "up"])?;
    run(&[
        "ip", "-n", mgmt, "link", "set", port, "master", "pods", "up",
    ])?;
    Ok(())
}
