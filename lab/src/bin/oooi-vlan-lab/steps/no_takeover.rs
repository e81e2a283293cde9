//! Node loss with takeover switched off, as on OVN-Kubernetes localnet
//! (port security drops an address a port was not given, so no replica may
//! take another's address). The agents are stopped and every replica keeps
//! only its own address. The DNS replicas check each proxy replica's
//! readiness over the management (pod) network about every second and
//! answer only with the proxies that pass.
//!
//! Then proxy replica 1's node is lost (every IP packet dropped in its
//! namespace). Asserted: from 2 s after the loss no lookup returns its
//! address first, and new connections go to the live replica without
//! waiting. Then DNS replica 1's node is lost, once with the resolv.conf the
//! DHCP lease wrote (no options line: glibc's 5 s timeout) and once with the
//! documented resolver options (`options timeout:1 attempts:2 rotate`), and
//! the lookups are printed per window. The lookup loop is closed (the next
//! lookup starts when one ends), so the share of lookups that waited is the
//! share of a client's time spent waiting.

use std::path::Path;
use std::time::Duration;

use anyhow::{Result, anyhow};
use serde_json::Value;

use super::infra::DataPlane;
use super::node_loss::{LOSSES, poll, spread};
use super::topology::{Namespaces, proxy_pod_ip};
use super::workers::Booted;
use crate::lab::{Lab, run as sh};
use crate::render::{Rendered, publish_config};
use crate::report::Report;
use crate::steady::now_ms;

/// How long a replica stays lost.
const LOST: Duration = Duration::from_millis(6000);
/// The steady state before each loss.
const STEADY: Duration = Duration::from_millis(2000);
/// From the loss on, no lookup may answer the lost proxy first after this.
const HEALTH_BOUND_MS: f64 = 2000.0;
/// The resolver options the docs give for the workers.
pub const RESOLVER_OPTIONS: &str = "options timeout:1 attempts:2 rotate";

/// Runs the takeover-off steps; `agents` are the address agents' process
/// ids (stopped here).
pub fn run(
    lab: &mut Lab,
    r: &Rendered,
    ns: &Namespaces,
    plane: &DataPlane,
    booted: &[Booted],
    agents: &[u32],
    report: &mut Report,
) -> Result<()> {
    println!(
        "\nnode loss with takeover off (OVN-style: the agents stopped; DNS answers only with proxies whose readiness passes over the pod network):"
    );
    // Stop the agents (each hands its addresses on and removes what it holds),
    // then every replica gets its own address back, as its CNI gave it.
    for pid in agents {
        let _ = sh(&["kill", "-TERM", &pid.to_string()]);
    }
    for pid in agents {
        lab.reap(*pid, Duration::from_secs(5))?;
    }
    for (rns, ip) in ns
        .dns
        .iter()
        .zip(&r.replicas.dns)
        .chain(ns.proxy.iter().zip(&r.replicas.proxy))
    {
        sh(&[
            "ip",
            "-n",
            rns,
            "addr",
            "replace",
            &format!("{ip}/{}", r.plen),
            "dev",
            "net1",
        ])?;
    }
    // Health checks of every proxy replica, from the DNS pods over the pod
    // network: its table API's readiness.
    let checks: Vec<Value> = r
        .replicas
        .proxy
        .iter()
        .enumerate()
        .map(|(i, ip)| {
            serde_json::json!({
                "address": ip,
                "http": format!("http://{}:{}/ready", proxy_pod_ip(i), r.api_port),
            })
        })
        .collect();
    for (i, mount) in plane.dns_mounts.iter().enumerate() {
        let mut doc: Value = serde_saphyr::from_str(&r.replicas.dns_config(&r.dns_text, i)?)?;
        doc["health"] = serde_json::json!({
            "interval_ms": 1000, "timeout_ms": 500, "fall": 1, "rise": 1, "checks": checks,
        });
        publish_config(mount, "config.yaml", &serde_saphyr::to_string(&doc)?)?;
    }
    let (cluster, worker) = booted
        .first()
        .cloned()
        .ok_or_else(|| anyhow!("no booted worker"))?;
    let fqdn = format!("api.{cluster}.{}", r.base);
    let proxy1 = r.replicas.proxy[0].clone();
    // Both proxies answered again (the reload applied, both checks pass).
    let every = crate::clients::as_set(&r.replicas.proxy.join(","));
    // Every proxy answered by DNS replica 1 within 15 s.
    let every_answered = |lab: &Lab| {
        poll(15, || {
            let got = crate::clients::as_set(&crate::clients::dig_all(
                lab,
                &worker,
                &r.replicas.dns[0],
                &fqdn,
            ));
            (got == every).then_some(got)
        })
    };
    let got = every_answered(lab);
    report.step(
        &format!("health-checked DNS answers {fqdn} with every proxy"),
        &every,
        got.as_deref().unwrap_or("not every proxy"),
    );

    // Proxy replica 1's node is lost.
    let loss = &LOSSES[0];
    // Lookups in a loop of their own (a connect that waits would stall
    // them); new connections from a client started 2 s after the loss,
    // when the answers must no longer lead to the lost replica.
    let connects_log = lab.dir.join("no-takeover-connects.log");
    let connects_stop = lab.dir.join("no-takeover-connects.stop");
    let _ = std::fs::remove_file(&connects_stop);
    let me = std::env::current_exe()?.to_string_lossy().into_owned();
    let (attempts, lost_at) =
        with_loop(lab, (booted, &r.base), "no-takeover-proxy", true, |lab| {
            std::thread::sleep(STEADY);
            let at = now_ms();
            sh(&["ip", "netns", "exec", &ns.proxy[0], "sh", "-c", loss.cut])?;
            std::thread::sleep(Duration::from_millis(HEALTH_BOUND_MS as u64));
            let target = format!("{fqdn}:6443");
            let pid = lab.spawn_in(
                &worker,
                "no-takeover-connects",
                &[
                    &me,
                    "steady",
                    "--stop",
                    &connects_stop.to_string_lossy(),
                    "--connect-timeout-ms",
                    "30000",
                    "--interval-ms",
                    "100",
                    &target,
                ],
            )?;
            std::thread::sleep(LOST - Duration::from_millis(HEALTH_BOUND_MS as u64));
            std::fs::write(&connects_stop, b"")?;
            lab.reap(pid, Duration::from_secs(35))?;
            sh(&[
                "ip",
                "netns",
                "exec",
                &ns.proxy[0],
                "sh",
                "-c",
                loss.restore,
            ])?;
            Ok(at)
        })?;
    let _ = std::fs::remove_file(&connects_stop);
    let connects: Vec<Value> = std::fs::read_to_string(&connects_log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("t").is_some())
        .collect();
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    let first = |v: &Value| v["addrs"][0].as_str().unwrap_or("").to_string();
    let during: Vec<&Value> = attempts
        .iter()
        .filter(|v| f(v, "t") >= lost_at && f(v, "t") < lost_at + LOST.as_millis() as f64)
        .collect();
    let last_first = during
        .iter()
        .filter(|v| first(v) == proxy1)
        .map(|v| f(v, "t") - lost_at)
        .fold(f64::NAN, f64::max);
    let late: Vec<&&Value> = during
        .iter()
        .filter(|v| f(v, "t") >= lost_at + HEALTH_BOUND_MS)
        .collect();
    let late_first = late.iter().filter(|v| first(v) == proxy1).count();
    let late_any = late
        .iter()
        .filter(|v| {
            v["addrs"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x == proxy1.as_str()))
        })
        .count();
    println!(
        "  {}: proxy replica 1 ({proxy1}); last lookup answering it first started {}; lookups from +2 s: {} ({} still naming it at all)",
        loss.name,
        if last_first.is_nan() {
            "never".to_string()
        } else {
            format!("+{:.2} s", last_first / 1000.0)
        },
        late.len(),
        late_any
    );
    report.step(
        &format!(
            "takeover off, {}: lookups from 2 s after the loss answering {proxy1} first",
            loss.name
        ),
        "0 of more than 0",
        &format!(
            "{late_first} of {}",
            if late.is_empty() {
                "0".to_string()
            } else {
                "more than 0".to_string()
            }
        ),
    );
    let late_connects: Vec<f64> = connects
        .iter()
        .filter(|v| v["result"].get("backend").is_some())
        .map(|v| f(v, "ms"))
        .collect();
    let waited = connects
        .iter()
        .filter(|v| {
            v["result"].get("backend").is_none()
                || v["failed_connects"]
                    .as_array()
                    .is_some_and(|a| !a.is_empty())
                || f(v, "ms") > 1000.0
        })
        .count();
    println!(
        "    lookups while lost {}; new TLS (Go-dialer-like) from +2 s {}",
        spread(&during.iter().map(|v| f(v, "lookup_ms")).collect::<Vec<_>>()),
        spread(&late_connects),
    );
    report.step(
        &format!(
            "takeover off, {}: new connections from +2 s that failed, tried {proxy1} or took over 1 s",
            loss.name
        ),
        "0 of more than 0",
        &format!(
            "{waited} of {}",
            if connects.is_empty() { "0" } else { "more than 0" }
        ),
    );
    // The health checks bring it back.
    let got = every_answered(lab);
    report.step(
        "takeover off: the returned proxy is answered again",
        &every,
        got.as_deref().unwrap_or("not every proxy"),
    );

    // DNS replica 1's node is lost: the default resolv.conf, then the
    // documented options.
    let dns1 = r.replicas.dns[0].clone();
    for options in [None, Some(RESOLVER_OPTIONS)] {
        let saved: Vec<(String, String)> = booted
            .iter()
            .map(|(_, w)| {
                let p = resolv_conf(w);
                (w.clone(), std::fs::read_to_string(&p).unwrap_or_default())
            })
            .collect();
        if let Some(o) = options {
            for (w, text) in &saved {
                // In place: glibc rereads a resolv.conf that changed.
                std::fs::write(resolv_conf(w), format!("{}{o}\n", text))?;
            }
        }
        let label = options.unwrap_or("resolv.conf as the lease wrote it (no options)");
        let (attempts, lost_at) =
            with_loop(lab, (booted, &r.base), "no-takeover-dns", true, |_| {
                std::thread::sleep(STEADY);
                let at = now_ms();
                sh(&["ip", "netns", "exec", &ns.dns[0], "sh", "-c", loss.cut])?;
                std::thread::sleep(LOST);
                sh(&["ip", "netns", "exec", &ns.dns[0], "sh", "-c", loss.restore])?;
                Ok(at)
            })?;
        for (w, text) in &saved {
            std::fs::write(resolv_conf(w), text)?;
        }
        let window = |from: f64, to: f64| -> Vec<f64> {
            attempts
                .iter()
                .filter(|v| f(v, "t") >= from && f(v, "t") < to)
                .map(|v| f(v, "lookup_ms"))
                .collect()
        };
        let steady = window(0.0, lost_at);
        let down = window(lost_at, lost_at + LOST.as_millis() as f64);
        let slow = down.iter().filter(|ms| **ms > 1000.0).count();
        let failed = attempts
            .iter()
            .filter(|v| v.get("lookup_error").is_some())
            .count();
        println!(
            "  DNS replica 1 ({dns1}) lost, takeover off, {label}: lookups steady {}; while lost {}; {slow} of {} waited more than 1 s; {failed} failed",
            spread(&steady),
            spread(&down),
            down.len()
        );
        report.step(
            &format!("takeover off, DNS replica 1 lost ({label}): failed lookups"),
            "0",
            &failed.to_string(),
        );
    }
    Ok(())
}

/// Runs the steady client in every booted worker while `events` runs; its
/// attempts and what `events` returned.
fn with_loop(
    lab: &mut Lab,
    (booted, base): (&[Booted], &str),
    log: &str,
    lookup_only: bool,
    events: impl FnOnce(&mut Lab) -> Result<f64>,
) -> Result<(Vec<Value>, f64)> {
    let stop = lab.dir.join(format!("{log}.stop"));
    let _ = std::fs::remove_file(&stop);
    let stop_arg = stop.to_string_lossy().into_owned();
    let me = std::env::current_exe()?.to_string_lossy().into_owned();
    let mut loops = Vec::new();
    for (c, wns) in booted {
        let name = format!("{log}-{c}");
        let target = format!("api.{c}.{base}:6443");
        let mut argv = vec![
            me.as_str(),
            "steady",
            "--stop",
            &stop_arg,
            "--connect-timeout-ms",
            "30000",
            "--interval-ms",
            "100",
            &target,
        ];
        if lookup_only {
            argv.push("--lookup-only");
        }
        let pid = lab.spawn_in(wns, &name, &argv)?;
        loops.push((pid, lab.dir.join(format!("{name}.log"))));
    }
    let at = events(lab);
    std::fs::write(&stop, b"")?;
    for (pid, _) in &loops {
        lab.reap(*pid, Duration::from_secs(15))?;
    }
    let _ = std::fs::remove_file(&stop);
    let at = at?;
    let mut attempts = Vec::new();
    for (_, log) in &loops {
        for line in std::fs::read_to_string(log)?.lines() {
            if let Ok(v) = serde_json::from_str::<Value>(line)
                && v.get("t").is_some()
            {
                attempts.push(v);
            }
        }
        // The next run appends to a fresh file.
        let _ = std::fs::remove_file(log);
    }
    Ok((attempts, at))
}

/// The resolv.conf `ip netns exec` shows the worker `ns`.
fn resolv_conf(ns: &str) -> std::path::PathBuf {
    Path::new("/etc/netns").join(ns).join("resolv.conf")
}
