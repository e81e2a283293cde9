//! The management pod network's view of DNS, and the site's resolver it
//! forwards to. With `internalProxyService` set, a management pod resolves
//! every cluster's `api` name to the internal proxy; without it the name is
//! forwarded and the site's resolver answers with the public address. The
//! `kubernetes` aliases are never answered there: on the management cluster
//! they belong to its own service network.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use anyhow::{Result, anyhow, bail};

use super::topology::{Namespaces, pod_interface, replica_suffix};
use crate::clients::{dig, dig_port, wait_until};
use crate::lab::Lab;
use crate::render::Rendered;
use crate::report::Report;

/// The DNS pod's address on the pod network.
pub const DNS_POD_IP: &str = "10.128.0.3";
/// The pod view's port in the DNS pod (its ClusterIP Service maps 53 to it).
pub const POD_VIEW_PORT: u16 = 5353;

/// The site's resolver on the VLAN at the DNS servers' upstream address:
/// unbound, answering each cluster's `api` name with a public address
/// (198.51.100.0/24, TEST-NET-2) and NXDOMAIN for every other name. The
/// public answers, by name.
pub fn site_resolver(
    lab: &mut Lab,
    r: &Rendered,
    ns: &Namespaces,
) -> Result<BTreeMap<String, String>> {
    let upstream = r
        .upstreams
        .first()
        .ok_or_else(|| anyhow!("dns config: no upstream"))?;
    let ip: Ipv4Addr = upstream
        .split(':')
        .next()
        .unwrap_or_default()
        .parse()
        .map_err(|e| anyhow!("dns config: upstream `{upstream}`: {e}"))?;
    let site = lab.add_ns("site")?;
    lab.plug(
        &site,
        "site",
        "net1",
        Some(&format!("{ip}/{}", r.plen)),
        None,
    )?;
    let mut public = BTreeMap::new();
    let mut conf = format!(
        "server:\n  interface: {ip}\n  port: 53\n  do-daemonize: no\n  use-syslog: no\n  logfile: \"\"\n  verbosity: 1\n  chroot: \"\"\n  username: \"\"\n  pidfile: \"\"\n  num-threads: 1\n  do-ip6: no\n  module-config: \"iterator\"\n  access-control: 0.0.0.0/0 allow\n  local-zone: \".\" static\n"
    );
    for (i, c) in r.clusters.iter().enumerate() {
        let name = format!("api.{c}.{}", r.base);
        let host = u8::try_from(10 + i)
            .ok()
            .filter(|h| *h < 255)
            .ok_or_else(|| anyhow!("more clusters than the lab's 198.51.100.0/24 holds"))?;
        let addr = Ipv4Addr::new(198, 51, 100, host);
        conf.push_str(&format!("  local-data: \"{name}. 30 IN A {addr}\"\n"));
        public.insert(name, addr.to_string());
    }
    let path = lab.dir.join("site-resolver.conf");
    std::fs::write(&path, conf)?;
    lab.spawn_in(
        &site,
        "site-resolver",
        &["unbound", "-d", "-c", path.to_str().unwrap_or_default()],
    )?;
    let (name, want) = public
        .iter()
        .next()
        .ok_or_else(|| anyhow!("no cluster to resolve"))?;
    let ip = ip.to_string();
    wait_until(10, "the site's resolver", || {
        let got = dig(lab, &ns.dns[0], &ip, name);
        if got == *want {
            Ok(got)
        } else {
            bail!("{got}")
        }
    })?;
    println!("site resolver (unbound) in {site} at {ip}: {public:?}");
    Ok(public)
}

/// Puts each DNS replica's pod on the pod network (`eth0`, the first at
/// [`DNS_POD_IP`], the next at 10.128.0.13, ...), as its pod is: the
/// management network is a bridge the proxy pods are on too.
pub fn plug_dns_pods(ns: &Namespaces) -> Result<()> {
    for (i, dns) in ns.dns.iter().enumerate() {
        let ip = dns_pod_ip(i);
        pod_interface(dns, &ns.mgmt, &format!("dns{}", replica_suffix(i)), &ip)?;
    }
    Ok(())
}

/// The pod-network address of DNS replica `i` (its pod view listens there
/// only, as `$(POD_IP):5353` in a cluster).
pub fn dns_pod_ip(i: usize) -> String {
    format!("10.128.0.{}", 3 + 10 * i)
}

/// A management pod asks the pod view for the `api` name of each of
/// `clusters` and for the `kubernetes.default.svc` alias. `internal`: the
/// internal proxy's address when the Infra names it (the answer), None when
/// the name must be forwarded (the site resolver's `public` answer).
pub fn pod_view(
    lab: &Lab,
    (clusters, base): (&[String], &str),
    ns: &Namespaces,
    internal: Option<&str>,
    public: &BTreeMap<String, String>,
    report: &mut Report,
) {
    let ask = |name: &str| dig_port(lab, &ns.mgmt, DNS_POD_IP, POD_VIEW_PORT, name);
    for c in clusters {
        let name = format!("api.{c}.{base}");
        let (want, how) = match internal {
            Some(ip) => (ip.to_string(), "internal proxy"),
            None => (public.get(&name).cloned().unwrap_or_default(), "forwarded"),
        };
        let got = wait_until(10, "the DNS reload", || {
            let got = ask(&name);
            if got == want {
                Ok(got)
            } else {
                bail!("still {got}")
            }
        })
        .unwrap_or_else(|_| ask(&name));
        report.step(
            &format!("pod view: dig {name} from a management pod ({how})"),
            &want,
            &got,
        );
    }
    let alias = "kubernetes.default.svc";
    let got = ask(alias);
    report.step(
        &format!("pod view: dig {alias} (never answered)"),
        "no answer",
        &got,
    );
}
