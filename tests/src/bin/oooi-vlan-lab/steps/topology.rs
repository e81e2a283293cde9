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
    pub dns: String,
    pub proxy: String,
}

/// Builds the bridge, the infra pods' namespaces, the management network
/// and the proxy's stand-in for cluster DNS.
pub fn build(lab: &Lab, r: &Rendered) -> Result<Namespaces> {
    let Rendered {
        dhcp_ip,
        plen,
        iface,
        dns_ip,
        proxy_ip,
        services,
        ..
    } = r;
    println!(
        "\ntopology: namespaces {}-{{vlan,mgmt,dhcp,dns,proxy,w-*}}",
        lab.prefix
    );
    let vlan = lab.add_ns("vlan")?;
    run(&["ip", "-n", &vlan, "link", "add", "br0", "type", "bridge"])?;
    run(&["ip", "-n", &vlan, "link", "set", "br0", "up"])?;
    let mgmt = lab.add_ns("mgmt")?;
    let dhcp_ns = lab.add_ns("dhcp")?;
    let dns_ns = lab.add_ns("dns")?;
    let proxy_ns = lab.add_ns("proxy")?;
    lab.plug(
        &dhcp_ns,
        "dhcp",
        iface,
        Some(&format!("{dhcp_ip}/{plen}")),
        None,
    )?;
    lab.plug(
        &dns_ns,
        "dns",
        "net1",
        Some(&format!("{dns_ip}/{plen}")),
        None,
    )?;
    lab.plug(
        &proxy_ns,
        "proxy",
        "net1",
        Some(&format!("{proxy_ip}/{plen}")),
        None,
    )?;
    // The proxy's pod interface to the management network.
    run(&[
        "ip", "-n", &proxy_ns, "link", "add", "eth0", "type", "veth", "peer", "name", "proxy",
        "netns", &mgmt,
    ])?;
    run(&[
        "ip",
        "-n",
        &proxy_ns,
        "addr",
        "add",
        "10.128.0.2/16",
        "dev",
        "eth0",
    ])?;
    run(&["ip", "-n", &proxy_ns, "link", "set", "eth0", "up"])?;
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
    run(&[
        "ip", "-n", &mgmt, "link", "set", "proxy", "master", "pods", "up",
    ])?;
    // Cluster DNS stand-in for the proxy: `ip netns exec` mounts these over /etc.
    let etc = Path::new("/etc/netns").join(&proxy_ns);
    std::fs::create_dir_all(&etc)?;
    let mut hosts = String::from("127.0.0.1 localhost\n");
    for (host, (ip, _)) in services {
        hosts.push_str(&format!("{ip} {host}\n"));
    }
    std::fs::write(etc.join("hosts"), hosts)?;
    std::fs::write(etc.join("resolv.conf"), "nameserver 10.128.0.1\n")?;
    Ok(Namespaces {
        mgmt,
        dhcp: dhcp_ns,
        dns: dns_ns,
        proxy: proxy_ns,
    })
}
