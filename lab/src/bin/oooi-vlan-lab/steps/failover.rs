//! Failover with real clients. While every booted worker runs the steady
//! client (glibc lookups from its lease's resolv.conf, a new TLS connection
//! by SNI and one through the `kubernetes.default.svc` alias, the next
//! address tried when a connect fails), the first proxy replica (the first
//! address every client tries) is killed with SIGKILL and started again,
//! then the first DNS replica (every worker's first nameserver).
//!
//! Asserted: no connection failed on every address, none was misrouted
//! (each names the backend that answered), and none failed outside the two
//! window a crash leaves: connections open at the kill (or still in the
//! dying process's accept queue) are cut. A restarted replica runs behind
//! oooi-envoy-gate as in a pod, so until the push reaches it its routing
//! ports are closed: connects are refused by the kernel and retried on the
//! next address, none is accepted and reset. Its readiness is 503
//! meanwhile; after the push it is 200 and it routes. Reported: those
//! failures, the
//! connect+handshake latency at the kill against the steady state, failed
//! and slow lookups, and the time until each restarted replica serves.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use serde_json::Value;

use super::infra::DataPlane;
use super::workers::Booted;
use crate::clients::{Push, as_set, dig_all, probe};
use crate::lab::Lab;
use crate::render::Rendered;
use crate::report::Report;
use crate::steady::now_ms;

/// The steady state before the first kill.
const STEADY: Duration = Duration::from_millis(2500);
/// How long the proxy replica stays down.
const PROXY_DOWN: Duration = Duration::from_millis(2500);
/// How long the DNS replica stays down: longer than glibc's 5 s timeout,
/// so that lookups that wait it out are seen.
const DNS_DOWN: Duration = Duration::from_millis(6000);
/// After each restart, before the next phase.
const SETTLE: Duration = Duration::from_millis(1500);
/// "At the kill": this long after it.
const AT_KILL_MS: f64 = 1000.0;

/// When each event happened (ms since the Unix epoch).
#[derive(Default)]
struct Timeline {
    start: f64,
    proxy_kill: f64,
    /// The killed Envoy's process was gone (its connections reset).
    proxy_dead: f64,
    proxy_restart: f64,
    /// The restarted Envoy's table API answered.
    proxy_up: f64,
    /// The push to it returned.
    proxy_pushed: f64,
    /// Ready, and a connection through it reached the right backend.
    proxy_serving: f64,
    dns_kill: f64,
    dns_restart: f64,
    /// The restarted oooi-dns answered with every proxy address.
    dns_serving: f64,
    end: f64,
}

/// Runs the failover step: the steady loops, the kills and restarts, the
/// checks and the measured numbers.
pub fn run(
    lab: &mut Lab,
    r: &Rendered,
    plane: &mut DataPlane,
    (push, table): (&Push, &Path),
    booted: &[Booted],
    report: &mut Report,
) -> Result<()> {
    let Some((first_cluster, first_worker)) = booted.first().cloned() else {
        bail!("failover: no booted worker of a cluster");
    };
    let base = &r.base;
    let alias = "kubernetes.default.svc";
    let every_proxy = as_set(&r.replicas.proxy.join(","));
    let (proxy_ip, proxy) = plane
        .proxies
        .first()
        .cloned()
        .ok_or_else(|| anyhow!("no proxy replica"))?;
    let (dns_ip, dns) = plane
        .dns
        .first()
        .cloned()
        .ok_or_else(|| anyhow!("no DNS replica"))?;
    let api0 = push
        .apis
        .first()
        .ok_or_else(|| anyhow!("no table API"))?
        .clone();

    println!(
        "\nfailover (workers {} loop: glibc lookup, new TLS by SNI and by the {alias} alias, next address on a failed connect):",
        booted
            .iter()
            .map(|(_, w)| w.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let stop = lab.dir.join("steady.stop");
    let _ = std::fs::remove_file(&stop);
    let me = std::env::current_exe()?;
    let me = me
        .to_str()
        .ok_or_else(|| anyhow!("binary path is not UTF-8"))?
        .to_string();
    let stop_arg = stop.to_string_lossy().into_owned();
    let mut loops: Vec<(String, u32, PathBuf)> = Vec::new();
    for (cluster, wns) in booted {
        let log = format!("steady-{cluster}");
        let sni = format!("api.{cluster}.{base}:6443");
        let via_alias = format!("{alias}:443");
        let pid = lab.spawn_in(
            wns,
            &log,
            &[&me, "steady", "--stop", &stop_arg, &sni, &via_alias],
        )?;
        loops.push((cluster.clone(), pid, lab.dir.join(format!("{log}.log"))));
    }
    for (_, _, log) in &loops {
        poll(10, || {
            std::fs::read_to_string(log)
                .ok()
                .filter(|t| t.contains("\"started\""))
                .map(|_| ())
        })
        .ok_or_else(|| anyhow!("the steady client did not start: see {}", log.display()))?;
    }
    let mut t = Timeline {
        start: now_ms(),
        ..Timeline::default()
    };
    std::thread::sleep(STEADY);

    // The proxy replica every client tries first.
    println!("  kill -9 proxy replica 1 ({proxy_ip}, {})", proxy.ns);
    t.proxy_kill = now_ms();
    lab.kill_9(&proxy)?;
    t.proxy_dead = now_ms();
    std::thread::sleep(PROXY_DOWN);
    println!("  start proxy replica 1 again (its table is gone with the process)");
    t.proxy_restart = now_ms();
    let restarted = lab.restart(&proxy)?;
    plane.proxies[0].1 = restarted;
    let first = poll(60, || {
        let s = ready(lab, push, &api0).0;
        (s != "down").then_some(s)
    })
    .unwrap_or_else(|| "down".to_string());
    t.proxy_up = now_ms();
    report.step(
        &format!("restarted Envoy without its table: GET {api0}/ready"),
        "503",
        &first,
    );
    let fqdn = format!("api.{first_cluster}.{base}");
    let own = format!("clusters-{first_cluster}/kube-apiserver");
    let got = lab
        .me_in(&first_worker, &["connect", &format!("{proxy_ip}:6443")])
        .unwrap_or_else(|e| format!("{e:#}"));
    report.step(
        &format!("restarted Envoy without its table: TCP connect to {proxy_ip}:6443"),
        "refused",
        &got,
    );
    let got = probe(lab, &first_worker, &proxy_ip, 6443, Some(&fqdn));
    report.step(
        &format!("restarted Envoy without its table: TLS {fqdn} via {proxy_ip}"),
        "refused",
        &got,
    );
    // What the controller does when a replica comes back: push the current
    // table to it.
    let got = push.put_to(lab, &api0, table);
    t.proxy_pushed = now_ms();
    report.step(
        "push the current table to the restarted replica",
        "200",
        &got,
    );
    let got = ready(lab, push, &api0).0;
    report.step(
        &format!("restarted Envoy after the push: GET {api0}/ready"),
        "200",
        &got,
    );
    // The gate opens the routing listeners once it sees the replica ready
    // (it asks every 100 ms), then Envoy adds them.
    let got = poll(10, || {
        let got = probe(lab, &first_worker, &proxy_ip, 6443, Some(&fqdn));
        (got != "refused").then_some(got)
    })
    .unwrap_or_else(|| "refused".to_string());
    t.proxy_serving = now_ms();
    report.step(
        &format!("restarted Envoy after the push: TLS {fqdn} via {proxy_ip}"),
        &own,
        &got,
    );
    let tables: Vec<String> = push.apis.iter().map(|a| table_id(lab, push, a)).collect();
    let want = tables.last().cloned().unwrap_or_default();
    let mut same = tables.clone();
    same.dedup();
    report.step(
        "every proxy replica has the same table",
        &want,
        &same.join(" | "),
    );
    std::thread::sleep(SETTLE);

    // The DNS replica every worker asks first.
    println!("  kill -9 DNS replica 1 ({dns_ip}, {})", dns.ns);
    t.dns_kill = now_ms();
    lab.kill_9(&dns)?;
    std::thread::sleep(DNS_DOWN);
    println!("  start DNS replica 1 again");
    t.dns_restart = now_ms();
    let restarted = lab.restart(&dns)?;
    plane.dns[0].1 = restarted;
    let got = poll(60, || {
        let got = as_set(&dig_all(lab, &first_worker, &dns_ip, &fqdn));
        (got == every_proxy).then_some(got)
    })
    .unwrap_or_else(|| as_set(&dig_all(lab, &first_worker, &dns_ip, &fqdn)));
    t.dns_serving = now_ms();
    report.step(
        &format!("restarted oooi-dns answers: dig @{dns_ip} {fqdn}"),
        &every_proxy,
        &got,
    );
    std::thread::sleep(SETTLE);

    std::fs::write(&stop, b"")?;
    // A loop may be inside a lookup that waits out glibc's timeout.
    for (_, pid, _) in &loops {
        lab.reap(*pid, Duration::from_secs(15))?;
    }
    t.end = now_ms();
    let _ = std::fs::remove_file(&stop);

    let mut attempts = Vec::new();
    for (cluster, _, log) in &loops {
        let own = format!("clusters-{cluster}/kube-apiserver");
        for line in std::fs::read_to_string(log)?.lines() {
            if let Ok(v) = serde_json::from_str::<Value>(line)
                && v.get("t").is_some()
            {
                attempts.push((own.clone(), v));
            }
        }
    }
    account(&attempts, &t, (&proxy_ip, &dns_ip), report);
    Ok(())
}

/// Calls `f` every 20 ms until it gives a value or `secs` have passed.
fn poll<T>(secs: u64, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `GET /ready` on the table API `api`: the HTTP status (`down` when
/// nothing answers) and the body when it is 200.
fn ready(lab: &Lab, push: &Push, api: &str) -> (String, String) {
    match lab.me_in(&push.from, &["http", "GET", api, "/ready"]) {
        Ok(out) => {
            let (status, body) = out.split_once(' ').unwrap_or((out.as_str(), ""));
            (status.to_string(), body.to_string())
        }
        Err(e) => {
            let text = format!("{e:#}");
            let status = text
                .rsplit("HTTP ")
                .next()
                .filter(|_| text.contains("HTTP "))
                .map(|s| s.chars().take_while(char::is_ascii_digit).collect())
                .unwrap_or_else(|| "down".to_string());
            (status, String::new())
        }
    }
}

/// The generation and digest the replica at `api` serves.
fn table_id(lab: &Lab, push: &Push, api: &str) -> String {
    let (status, body) = ready(lab, push, api);
    match serde_json::from_str::<Value>(&body) {
        Ok(v) if status == "200" => {
            let digest = v["digest"].as_str().unwrap_or("-");
            format!(
                "generation {} {}",
                v["generation"],
                &digest[..digest.len().min(19)]
            )
        }
        _ => format!("not ready ({status})"),
    }
}

/// p50 and max of `v`, as `p50 X ms, max Y ms`.
fn spread(mut v: Vec<f64>) -> String {
    if v.is_empty() {
        return "none".to_string();
    }
    v.sort_by(f64::total_cmp);
    format!(
        "p50 {:.1} ms, max {:.1} ms (n={})",
        v[v.len() / 2],
        v[v.len() - 1],
        v.len()
    )
}

/// Tallies the workers' attempts against the timeline: the asserted
/// guarantees as steps, the rest printed as measured.
fn account(
    attempts: &[(String, Value)],
    t: &Timeline,
    (proxy_ip, dns_ip): (&str, &str),
    report: &mut Report,
) {
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    let in_window = |x: f64, from: f64, to: f64| x >= from && x < to;
    let (mut connections, mut lookups) = (0usize, 0usize);
    let (mut cut, mut unready, mut other, mut unrecovered, mut misrouted) =
        (0usize, 0usize, 0usize, 0usize, 0usize);
    let mut other_examples: Vec<String> = Vec::new();
    let (mut failed_lookups, mut slow_lookups) = (Vec::new(), Vec::new());
    // When each slow lookup started, in seconds from the DNS kill.
    let mut slow_at: Vec<String> = Vec::new();
    let mut down_lookups: Vec<(f64, f64)> = Vec::new();
    let (mut steady_ms, mut at_proxy_kill_ms, mut proxy_down_ms, mut after_ms) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut refused_first, mut refused_ms) = (0usize, Vec::new());
    let (mut steady_lookup, mut at_dns_kill_lookup, mut dns_down_lookup) =
        (Vec::new(), Vec::new(), Vec::new());
    for (own, v) in attempts {
        let at = f(v, "t");
        lookups += 1;
        let lookup_ms = f(v, "lookup_ms");
        if let Some(e) = v["lookup_error"].as_str() {
            failed_lookups.push(format!("{e} at +{:.1} s", (at - t.start) / 1000.0));
            continue;
        }
        if lookup_ms > 1000.0 {
            slow_lookups.push(lookup_ms);
            slow_at.push(format!("{:+.2}", (at - t.dns_kill) / 1000.0));
        }
        if in_window(at, t.start, t.proxy_kill) {
            steady_lookup.push(lookup_ms);
        }
        if in_window(at, t.dns_kill, t.dns_kill + AT_KILL_MS) {
            at_dns_kill_lookup.push(lookup_ms);
        }
        if in_window(at, t.dns_kill, t.dns_restart) {
            dns_down_lookup.push(lookup_ms);
            down_lookups.push((at, lookup_ms));
        }
        connections += 1;
        let result = &v["result"];
        // Connects that failed and were retried on the next address.
        for fc in v["failed_connects"].as_array().into_iter().flatten() {
            if fc["addr"] == proxy_ip {
                refused_first += 1;
            }
        }
        if !v["failed_connects"].as_array().is_none_or(|a| a.is_empty())
            && result.get("backend").is_some()
        {
            refused_ms.push(f(v, "ms"));
        }
        if let Some(backend) = result["backend"].as_str() {
            if backend != own {
                misrouted += 1;
            }
            let ms = f(v, "ms");
            if in_window(at, t.start, t.proxy_kill) {
                steady_ms.push(ms);
            }
            if in_window(at, t.proxy_kill, t.proxy_kill + AT_KILL_MS) {
                at_proxy_kill_ms.push(ms);
            }
            if in_window(at, t.proxy_kill, t.proxy_restart) {
                proxy_down_ms.push(ms);
            }
            if in_window(at, t.proxy_serving, t.dns_kill) {
                after_ms.push(ms);
            }
            continue;
        }
        // Failed: where and when.
        let addr = result["addr"].as_str().unwrap_or("");
        let connected = f(result, "connected");
        let end = f(v, "end");
        // Connected to the killed replica before its process was gone
        // (open, or still in its accept queue): reset by the kill.
        if addr == proxy_ip && connected < t.proxy_dead && end >= t.proxy_kill {
            cut += 1;
        } else if addr == proxy_ip && in_window(connected, t.proxy_restart, t.proxy_pushed) {
            unready += 1;
        } else {
            other += 1;
            if other_examples.len() < 3 {
                other_examples.push(format!(
                    "{} at +{:.1} s: {}",
                    v["target"].as_str().unwrap_or(""),
                    (at - t.start) / 1000.0,
                    result["error"].as_str().unwrap_or("")
                ));
            }
        }
        let retry = &v["retry_next"];
        match retry["backend"].as_str() {
            Some(b) if b == own => {}
            Some(_) => misrouted += 1,
            None => unrecovered += 1,
        }
    }
    down_lookups.sort_by(|a, b| a.0.total_cmp(&b.0));
    let down_lookups: Vec<String> = down_lookups
        .iter()
        .map(|(at, ms)| format!("{:+.2}: {ms:.0}", (at - t.dns_kill) / 1000.0))
        .collect();
    let secs = |x: f64| (x - t.start) / 1000.0;
    println!(
        "  timeline: proxy killed +{:.1} s, restarted +{:.1} s, table API up +{:.2} s, pushed +{:.2} s, serving +{:.2} s; DNS killed +{:.1} s, restarted +{:.1} s, serving +{:.2} s; end +{:.1} s",
        secs(t.proxy_kill),
        secs(t.proxy_restart),
        secs(t.proxy_up),
        secs(t.proxy_pushed),
        secs(t.proxy_serving),
        secs(t.dns_kill),
        secs(t.dns_restart),
        secs(t.dns_serving),
        secs(t.end)
    );
    println!("  measured: {connections} new connections, {lookups} lookups by the workers' loops");
    println!(
        "  measured: connect+handshake steady {}; first {AT_KILL_MS:.0} ms after the proxy kill {}; while it was down {}; after its restart {}",
        spread(steady_ms),
        spread(at_proxy_kill_ms),
        spread(proxy_down_ms),
        spread(after_ms)
    );
    println!(
        "  measured: {refused_first} connects refused by the dead replica {proxy_ip} and retried on the next address (those connections: {})",
        spread(refused_ms)
    );
    println!(
        "  measured: failed as Go's dialer or curl see them: {} ({cut} open or queued at the kill and cut, {unready} accepted and reset by the restarted replica before its push, {other} other)",
        cut + unready + other
    );
    println!(
        "  measured: lookups steady {}; first {AT_KILL_MS:.0} ms after the DNS kill {}; while {dns_ip} was down {}",
        spread(steady_lookup),
        spread(at_dns_kill_lookup),
        spread(dns_down_lookup)
    );
    println!(
        "  measured: lookups failed {}{}; slower than 1 s (glibc waiting out a nameserver): {} ({}; started at {} s from the DNS kill)",
        failed_lookups.len(),
        if failed_lookups.is_empty() {
            String::new()
        } else {
            format!(" ({})", failed_lookups.join("; "))
        },
        slow_lookups.len(),
        spread(slow_lookups.clone()),
        if slow_at.is_empty() {
            "-".to_string()
        } else {
            slow_at.join(", ")
        }
    );
    println!(
        "  measured: lookups while {dns_ip} was down, by start (s from the kill: ms): {}",
        down_lookups.join(", ")
    );
    println!(
        "  measured: restarted Envoy serving {:.2} s after its start (table API up after {:.2} s, push {:.0} ms later); restarted oooi-dns serving {:.2} s after its start",
        (t.proxy_serving - t.proxy_restart) / 1000.0,
        (t.proxy_up - t.proxy_restart) / 1000.0,
        t.proxy_pushed - t.proxy_up,
        (t.dns_serving - t.dns_restart) / 1000.0
    );
    report.step(
        "connections that failed on every address",
        "0",
        &unrecovered.to_string(),
    );
    report.step(
        "connections the restarted replica accepted and reset before its table",
        "0",
        &unready.to_string(),
    );
    report.step(
        "connections failed outside the kill and the unready window",
        "0",
        &if other_examples.is_empty() {
            other.to_string()
        } else {
            format!("{other}: {}", other_examples.join("; "))
        },
    );
    report.step(
        "misrouted connections (the answering backend)",
        "0",
        &misrouted.to_string(),
    );
    // Each phase saw attempts: the loops did not stall or stop.
    let phases = [
        ("steady", t.start, t.proxy_kill),
        ("proxy down", t.proxy_kill, t.proxy_restart),
        ("DNS down", t.dns_kill, t.dns_restart),
    ];
    let idle: Vec<&str> = phases
        .iter()
        .filter(|(_, from, to)| {
            !attempts
                .iter()
                .any(|(_, v)| in_window(f(v, "t"), *from, *to))
        })
        .map(|(name, _, _)| *name)
        .collect();
    report.step(
        "the workers' loops ran in every phase",
        "yes",
        &if idle.is_empty() {
            "yes".to_string()
        } else {
            format!("none while {}", idle.join(", "))
        },
    );
}
