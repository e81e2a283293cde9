//! Route push latency against real Envoy replicas running the real filter
//! (`OOOI_FILTER_WASM`), on loopback.
//!
//! `cargo bench -p oooi-controller --bench push_latency [-- ROUNDS]`
//!
//! For tables of 10, 1,000 and 8,000 routes and 1 and 3 replicas it measures
//! a full sync that pushes a new generation to every replica (GET, PUT,
//! digest check), and a sync that finds every replica in sync (GET only).
//! Prints p50, p90 and max per case.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use oooi_controller::metrics::Metrics;
use oooi_controller::push::{PushConfig, Pusher, Replica};
use oooi_routes::{Route, RouteMatch, RouteTable, Upstream};
use oooi_tests::{Envoy, PUSH_TOKEN, free_port};

fn table(generation: u64, n: usize) -> RouteTable {
    RouteTable {
        generation,
        routes: (0..n)
            .map(|i| Route {
                port: 443,
                matches: RouteMatch::Sni(format!("oauth.c{i}.example.com")),
                upstream: Upstream::Address {
                    host: format!("oauth-openshift.clusters-c{i}.svc.cluster.local"),
                    port: 6443,
                },
                owner: Some(format!("clusters/c{i}")),
            })
            .collect(),
    }
}

fn pct(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[i]
}

fn show(name: &str, mut s: Vec<Duration>) {
    let (p50, p90) = (pct(&mut s, 0.5), pct(&mut s, 0.9));
    let max = *s.last().unwrap_or(&Duration::ZERO);
    println!(
        "{name:<40} p50 {:>8.2} ms  p90 {:>8.2} ms  max {:>8.2} ms  (n={})",
        p50.as_secs_f64() * 1e3,
        p90.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3,
        s.len()
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let rounds: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(30);
    let lo: IpAddr = "127.0.0.1".parse()?;
    let envoys: Vec<Envoy> = (0..3)
        .map(|_| Envoy::start(lo, &[free_port(lo)], 1))
        .collect::<anyhow::Result<_>>()?;
    let replicas: Vec<Replica> = envoys
        .iter()
        .enumerate()
        .map(|(i, e)| Replica {
            name: format!("envoy-{i}"),
            addr: e.api,
        })
        .collect();
    let pusher = Pusher::new(
        PushConfig {
            request_timeout: Duration::from_secs(10),
        },
        Metrics::new(),
    );
    println!("load: {}", std::fs::read_to_string("/proc/loadavg")?.trim());
    let mut generation = 1;
    for routes in [10usize, 1_000, 8_000] {
        for count in [1usize, 3] {
            let set = &replicas[..count];
            let mut push = Vec::new();
            let mut put = Vec::new();
            let mut check = Vec::new();
            for _ in 0..rounds {
                generation += 1;
                let t = table(generation, routes);
                let started = Instant::now();
                let report = pusher.sync(&t, set, PUSH_TOKEN).await;
                push.push(started.elapsed());
                anyhow::ensure!(report.all_synced(), "{}", report.message());
                put.extend(report.replicas.iter().filter_map(|r| r.push_latency));
                let started = Instant::now();
                let again = pusher.sync(&t, set, PUSH_TOKEN).await;
                check.push(started.elapsed());
                anyhow::ensure!(again.pushed() == 0, "in-sync replicas were pushed");
            }
            let bytes = table(1, routes).to_json().len();
            show(&format!("sync, {routes} routes ({bytes} B) x{count}"), push);
            show(&format!("  PUT per replica, {routes} routes"), put);
            show(&format!("  in-sync check, {routes} routes x{count}"), check);
        }
    }
    println!("load: {}", std::fs::read_to_string("/proc/loadavg")?.trim());
    Ok(())
}
