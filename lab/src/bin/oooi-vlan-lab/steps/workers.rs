//! The worker VMs: one per hosted cluster and a machine of no cluster. Each
//! takes a lease, resolves its cluster's names and reaches them through the
//! proxy; the other clusters' names are refused when they are Strict, and
//! the filter's log and counter account for every such refusal.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, anyhow, bail};

use super::topology::Namespaces;
use crate::clients::{as_set, dig, dig_all, getent_ahostsv4, probe, wait_until};
use crate::lab::{Lab, run};
use crate::render::{Rendered, json_file};
use crate::report::Report;

struct Worker {
    /// Its cluster's name, `none` for a machine of no cluster.
    name: String,
    mac: String,
    /// (namespace, name) of its hosted cluster; None for a stranger.
    cluster: Option<(String, String)>,
    reserved: Option<Ipv4Addr>,
}

/// A booted worker: its cluster's name and its namespace.
pub type Booted = (String, String);

/// Boots every worker and runs its checks; the workers of a cluster that
/// got a lease.
pub fn run_all(
    lab: &Lab,
    r: &Rendered,
    nss: &Namespaces,
    report: &mut Report,
) -> Result<Vec<Booted>> {
    let dir = lab.dir.clone();
    let workers = workers(r)?;
    let script = dir.join("udhcpc.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\ncase \"$1\" in\n  bound|renew) ip addr flush dev \"$interface\"; ip addr add \"$ip/$mask\" dev \"$interface\"; echo \"ip=$ip dns=$(echo $dns | tr ' ' ,) router=$router\" > \"$OOOI_LEASE\" ;;\nesac\nexit 0\n",
    )?;
    run(&["chmod", "+x", script.to_str().unwrap_or_default()])?;
    let range_bound = |k: &str| -> Result<Ipv4Addr> {
        r.dhcp_text
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{k}:")))
            .map(|v| v.trim().trim_matches('"'))
            .ok_or_else(|| anyhow!("dhcp config: no range {k}"))?
            .parse()
            .with_context(|| format!("dhcp config: range {k}"))
    };
    let range = (range_bound("start")?, range_bound("end")?);
    let clusters: Vec<String> = workers
        .iter()
        .filter_map(|w| w.cluster.as_ref().map(|c| c.1.clone()))
        .collect();
    let mut booted: Vec<Booted> = Vec::new();
    // Connections the filter must refuse as `source_not_allowed` (a Strict
    // cluster's name from another source); checked against its counter.
    let mut strict_refusals = 0usize;

    for (i, w) in workers.iter().enumerate() {
        let label = match &w.cluster {
            Some((_, c)) => format!("worker of cluster {c} (isolation {})", r.isolation(c)),
            None => "a machine of no cluster".to_string(),
        };
        println!("\n{label} (MAC {}):", w.mac);
        let ns = lab.add_ns(&format!("w-{}", w.name))?;
        // Bridge port names are short (15 bytes at most).
        lab.plug(&ns, &format!("w{i}"), "eth0", None, Some(&w.mac))?;
        let Some(got_dns) = lease(lab, &ns, w, &script, range, r, report)? else {
            continue;
        };
        match &w.cluster {
            None => strict_refusals += stranger(lab, &ns, r, &clusters, report),
            Some((cns, cluster)) => {
                booted.push((cluster.clone(), ns.clone()));
                strict_refusals += worker(lab, &ns, (cns, cluster), &got_dns, r, &clusters, report);
            }
        }
    }

    if strict_refusals > 0 {
        filter_account(lab, r, &nss.proxy[0], strict_refusals, report)?;
    }
    Ok(booted)
}

/// One worker per hosted cluster: the first source-scoped route of each
/// owner is a worker address, and its DHCP reservation gives the MAC. Then
/// a machine of no cluster.
fn workers(r: &Rendered) -> Result<Vec<Worker>> {
    let (routes, dhcp_text) = (&r.routes, &r.dhcp_text);
    let mut workers: Vec<Worker> = Vec::new();
    for r in routes["routes"].as_array().into_iter().flatten() {
        let (Some(src), Some(owner)) = (r["source"].as_str(), r["owner"].as_str()) else {
            continue;
        };
        let (ns, name) = owner
            .split_once('/')
            .ok_or_else(|| anyhow!("route owner `{owner}` is not namespace/name"))?;
        if workers
            .iter()
            .any(|w| w.cluster.as_ref().is_some_and(|c| c.1 == name && c.0 == ns))
        {
            continue;
        }
        let ip: Ipv4Addr = src
            .trim_end_matches("/32")
            .parse()
            .with_context(|| format!("route source `{src}`"))?;
        let mac = dhcp_text
            .lines()
            .collect::<Vec<_>>()
            .windows(2)
            .find(|w| w[1].contains(&format!("\"{ip}\"")))
            .and_then(|w| w[0].split("mac:").nth(1))
            .map(|m| m.trim().to_string())
            .ok_or_else(|| anyhow!("no DHCP reservation for worker {ip}"))?;
        workers.push(Worker {
            name: name.to_string(),
            mac,
            cluster: Some((ns.to_string(), name.to_string())),
            reserved: Some(ip),
        });
    }
    workers.push(Worker {
        name: "none".into(),
        mac: "02:00:ee:00:00:01".into(),
        cluster: None,
        reserved: None,
    });
    Ok(workers)
}

/// Takes a lease in `ns` with udhcpc, checks it and writes the worker's
/// resolv.conf from it; the first DNS server it names, None when there was
/// no lease.
fn lease(
    lab: &Lab,
    ns: &str,
    w: &Worker,
    script: &Path,
    range: (Ipv4Addr, Ipv4Addr),
    r: &Rendered,
    report: &mut Report,
) -> Result<Option<String>> {
    let dir = &lab.dir;
    let lease_file = dir.join(format!("lease-{}", w.name));
    let out = Command::new("timeout")
        .args([
            "15", "ip", "netns", "exec", ns, "busybox", "udhcpc", "-f", "-q", "-n", "-i", "eth0",
            "-t", "5", "-T", "1", "-A", "1", "-s",
        ])
        .arg(script)
        .env("OOOI_LEASE", &lease_file)
        .output()?;
    let lease = std::fs::read_to_string(&lease_file).unwrap_or_default();
    let field = |k: &str| {
        lease
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
            .unwrap_or("")
            .to_string()
    };
    let ip = field("ip");
    let got_dns = field("dns");
    if !out.status.success() && ip.is_empty() {
        report.step("udhcpc: lease", "a lease", "no lease");
        return Ok(None);
    }
    match w.reserved {
        Some(r) => report.step("udhcpc: lease (reservation by MAC)", &r.to_string(), &ip),
        None => {
            let in_range = ip
                .parse::<Ipv4Addr>()
                .is_ok_and(|a| a >= range.0 && a <= range.1);
            report.step(
                "udhcpc: lease (dynamic)",
                &format!("in {}-{}", range.0, range.1),
                &if in_range {
                    format!("in {}-{}", range.0, range.1)
                } else {
                    ip.clone()
                },
            )
        }
    };
    report.step(
        "udhcpc: DNS servers (option 6, every replica in order)",
        &r.replicas.dns.join(","),
        &got_dns,
    );
    write_resolv_conf(ns, &got_dns)?;
    Ok(got_dns.split(',').next().map(str::to_string))
}

/// The worker's /etc/resolv.conf from its lease, as NetworkManager writes
/// it on RHCOS: one `nameserver` line per DHCP DNS server in the order of
/// option 6 and no `options` line, so glibc's defaults hold (servers tried
/// in order, 5 s timeout, 2 attempts, no rotate). `ip netns exec` mounts
/// /etc/netns/<ns>/resolv.conf over /etc/resolv.conf for whatever runs in
/// the worker.
fn write_resolv_conf(ns: &str, dns: &str) -> Result<()> {
    let etc = Path::new("/etc/netns").join(ns);
    std::fs::create_dir_all(&etc)?;
    let mut text = String::from("# Generated from the DHCP lease (oooi-vlan-lab)\n");
    for server in dns.split(',').filter(|s| !s.is_empty()) {
        text.push_str(&format!("nameserver {server}\n"));
    }
    std::fs::write(etc.join("resolv.conf"), text)?;
    Ok(())
}

/// A machine on the VLAN that belongs to no cluster; the refusals the
/// filter must count as `source_not_allowed`.
fn stranger(lab: &Lab, ns: &str, r: &Rendered, clusters: &[String], report: &mut Report) -> usize {
    let Rendered {
        proxy_ip,
        strict,
        base,
        ..
    } = r;
    let isolation = |c: &str| r.isolation(c);
    let mut strict_refusals = 0;
    let got = probe(lab, ns, proxy_ip, 6443, Some("kubernetes.default.svc"));
    report.step(
        "alias kubernetes.default.svc from a non-worker",
        "refused",
        &got,
    );
    let got = probe(lab, ns, proxy_ip, 443, Some("kubernetes.default.svc"));
    report.step(
        "alias kubernetes.default.svc:443 from a non-worker",
        "refused",
        &got,
    );
    let got = probe(lab, ns, proxy_ip, 6443, None);
    report.step("no SNI to :6443 from a non-worker", "refused", &got);
    for c in clusters {
        let got = probe(lab, ns, proxy_ip, 6443, Some(&format!("api.{c}.{base}")));
        // A Standard cluster's names take any source; a Strict one's
        // only its own workers (and clients off the VLAN).
        strict_refusals += usize::from(strict.contains(c));
        report.step(
            &format!("api.{c}.{base} by SNI from a non-worker ({})", isolation(c)),
            &if strict.contains(c) {
                "refused".to_string()
            } else {
                format!("clusters-{c}/kube-apiserver")
            },
            &got,
        );
    }
    strict_refusals
}

/// A worker of `cluster` (namespace `cns`): its own cluster's names and
/// aliases, then the other clusters'; the refusals the filter must count
/// as `source_not_allowed`.
fn worker(
    lab: &Lab,
    ns: &str,
    (cns, cluster): (&str, &str),
    got_dns: &str,
    r: &Rendered,
    clusters: &[String],
    report: &mut Report,
) -> usize {
    let Rendered {
        proxy_ip,
        strict,
        apps_vips,
        base,
        ..
    } = r;
    let isolation = |c: &str| r.isolation(c);
    let mut strict_refusals = 0;
    let fqdn = format!("api.{cluster}.{base}");
    let every_proxy = as_set(&r.replicas.proxy.join(","));
    let answers = dig_all(lab, ns, got_dns, &fqdn);
    report.step(
        &format!("dig @{got_dns} {fqdn} (every proxy)"),
        &every_proxy,
        &as_set(&answers),
    );
    let resolved = answers.split(',').next().unwrap_or_default().to_string();
    // glibc, with the resolv.conf written from the lease.
    let got = getent_ahostsv4(lab, ns, &fqdn);
    report.step(
        &format!("getent ahostsv4 {fqdn} (glibc, resolv.conf from the lease)"),
        &every_proxy,
        &as_set(&got),
    );
    // HyperShift's control-plane namespace is `<namespace>-<name>`.
    let own = format!("{cns}-{cluster}/kube-apiserver");
    // The alias resolves on the VLAN while a worker of some cluster is
    // known; the proxy picks the cluster by source.
    let alias = "kubernetes.default.svc";
    let got = dig_all(lab, ns, got_dns, alias);
    report.step(
        &format!("dig @{got_dns} {alias} (alias, every proxy)"),
        &every_proxy,
        &as_set(&got),
    );
    let got = probe(lab, ns, &resolved, 6443, Some(&fqdn));
    report.step(&format!("TLS {fqdn}:6443 by SNI"), &own, &got);
    // Every replica has the same table.
    for ip in r.replicas.proxy.iter().skip(1) {
        let got = probe(lab, ns, ip, 6443, Some(&fqdn));
        report.step(&format!("TLS {fqdn}:6443 by SNI via {ip}"), &own, &got);
        let got = probe(lab, ns, ip, 443, Some(alias));
        report.step(&format!("TLS {alias}:443 (alias) via {ip}"), &own, &got);
    }
    let got = probe(
        lab,
        ns,
        proxy_ip,
        443,
        Some(&format!("oauth.{cluster}.{base}")),
    );
    report.step(
        &format!("TLS oauth.{cluster}.{base}:443 by SNI"),
        &format!("{cns}-{cluster}/oauth-openshift"),
        &got,
    );
    let got = probe(lab, ns, proxy_ip, 6443, Some("kubernetes.default.svc"));
    report.step(
        "TLS kubernetes.default.svc:6443 (alias, by source)",
        &own,
        &got,
    );
    let got = probe(lab, ns, proxy_ip, 443, Some("kubernetes.default.svc"));
    report.step(
        "TLS kubernetes.default.svc:443 (alias, by SNI and source)",
        &own,
        &got,
    );
    let got = probe(lab, ns, proxy_ip, 6443, None);
    report.step("TLS :6443 without SNI (by source)", &own, &got);
    if let Some((old, _)) = apps_vips.get(cluster) {
        let console = format!("console-openshift-console.apps.{cluster}.{base}");
        let got = dig(lab, ns, got_dns, &console);
        report.step(&format!("dig {console}"), &old.to_string(), &got);
        let got = probe(lab, ns, proxy_ip, 443, Some(&console));
        report.step(
            "TLS *.apps:443 through the proxy by SNI",
            &format!("vip/{old}"),
            &got,
        );
    }
    // Cross-cluster: the alias above answered with this worker's own
    // cluster; the other clusters' names are refused when they are Strict.
    for other in clusters.iter().filter(|c| *c != cluster) {
        if strict.contains(other) {
            strict_refusals += 2 + usize::from(apps_vips.contains_key(other.as_str()));
        }
        let want = |svc: &str| {
            if strict.contains(other) {
                "refused".to_string()
            } else {
                format!("clusters-{other}/{svc}")
            }
        };
        for (port, name, svc) in [
            (6443, "api", "kube-apiserver"),
            (443, "oauth", "oauth-openshift"),
        ] {
            let got = probe(
                lab,
                ns,
                proxy_ip,
                port,
                Some(&format!("{name}.{other}.{base}")),
            );
            report.step(
                &format!(
                    "cross-cluster: {name}.{other}.{base} ({})",
                    isolation(other)
                ),
                &want(svc),
                &got,
            );
        }
        if let Some((old, _)) = apps_vips.get(other.as_str()) {
            let got = probe(
                lab,
                ns,
                proxy_ip,
                443,
                Some(&format!("console-openshift-console.apps.{other}.{base}")),
            );
            report.step(
                &format!(
                    "cross-cluster: *.apps.{other}.{base} ({})",
                    isolation(other)
                ),
                &if strict.contains(other) {
                    "refused".to_string()
                } else {
                    format!("vip/{old}")
                },
                &got,
            );
        }
    }
    strict_refusals
}

/// The filter's own account of the Strict refusals: its log and the
/// counter an operator alerts on.
fn filter_account(
    lab: &Lab,
    r: &Rendered,
    proxy_ns: &str,
    strict_refusals: usize,
    report: &mut Report,
) -> Result<()> {
    let dir = &lab.dir;
    let envoy_src = &r.envoy_src;
    // The filter logs every refusal with its reason: those were refused
    // for the source, not for an unknown name or a missing route.
    let want = strict_refusals.to_string();
    let count = || {
        std::fs::read_to_string(dir.join("envoy.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("refuse reason=source_not_allowed"))
            .count()
            .to_string()
    };
    let got = wait_until(5, "the filter's log", || {
        let got = count();
        if got == want { Ok(got) } else { bail!("{got}") }
    })
    .unwrap_or_else(|_| count());
    println!("\nthe filter's own account:");
    report.step("refusals logged as reason=source_not_allowed", &want, &got);
    // And the counter an operator alerts on, from Envoy's admin API.
    let envoy_json = json_file(&envoy_src.join("envoy.json"))?;
    let admin = &envoy_json["admin"]["address"]["socket_address"];
    let admin = format!(
        "{}:{}",
        admin["address"].as_str().unwrap_or("127.0.0.1"),
        admin["port_value"].as_u64().unwrap_or(9901)
    );
    let stat = "oooi_sni_router_refuse_source_not_allowed";
    // The value after `<name>: ` (the answer may come chunked).
    let read = || {
        lab.me_in(
            proxy_ns,
            &["http", "GET", &admin, &format!("/stats?filter={stat}")],
        )
        .map(|s| {
            s.split(&format!("{stat}:"))
                .nth(1)
                .and_then(|v| v.split_whitespace().next())
                .unwrap_or("not listed")
                .to_string()
        })
        .unwrap_or_else(|e| format!("{e:#}"))
    };
    let got = wait_until(5, "Envoy's counter", || {
        let got = read();
        if got == want { Ok(got) } else { bail!("{got}") }
    })
    .unwrap_or_else(|_| read());
    report.step(&format!("Envoy counter {stat}"), &want, &got);
    Ok(())
}
