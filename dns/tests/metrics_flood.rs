//! The `oooi-dns` binary's HTTP listeners under a flood of its metrics
//! port: 1,000 connections sending 58 KB of a request head that never
//! ends, 1,000 slowloris connections (a header byte a second) and 500
//! silent ones, each opened again as soon as the server closes it (the
//! pattern that took the address agent past its container limit under an
//! unbounded serve loop). The process's resident memory stays far below
//! the DNS pod's limit, the metrics listener never holds more connections
//! than its limit, DNS keeps answering, the health listener (a budget of
//! its own) answers the probes all along, and `/metrics` answers again
//! once the flood ends.
#![allow(clippy::unwrap_used)]

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use oooi_flood::{Bounds, Shape, Siege, get};

const DNS: &str = "127.0.0.61";
const DNS_PORT: u16 = 25661;
const METRICS: &str = "127.0.0.61:25662";
const HEALTH: &str = "127.0.0.61:25663";

/// The DNS pod's default memory limit is 256 MiB (the controller's DNS
/// plan); the process must stay well below it with room for its caches.
const RSS_BOUND: u64 = 96 * 1024 * 1024;

#[test]
fn a_flood_of_the_metrics_port_keeps_memory_and_connections_bounded_and_the_health_listener_answering()
 {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "views:\n  - name: vlan\n    listen: [\"{DNS}:{DNS_PORT}\"]\n    zones:\n      - origin: c1.example.com\n        records:\n          - name: api\n            a: [\"192.0.2.4\"]\n"
        ),
    )
    .unwrap();
    let server = support::start_with(
        &config,
        &["--metrics-addr", METRICS, "--health-addr", HEALTH],
    );
    let (metrics, health): (SocketAddr, SocketAddr) =
        (METRICS.parse().unwrap(), HEALTH.parse().unwrap());
    let healthz = |addr| get(addr, "/healthz", Duration::from_secs(2)).map(|(s, _)| s);
    assert!(support::wait_for(|| healthz(health) == Some(200)));
    assert_eq!(
        healthz(metrics),
        Some(200),
        "/healthz stays on the metrics port too"
    );
    assert_eq!(
        get(health, "/metrics", Duration::from_secs(2)).map(|(s, _)| s),
        Some(404),
        "the health listener serves /healthz alone"
    );
    let siege = Siege::start(
        "oooi-dns, metrics port",
        server.0.id(),
        None,
        metrics,
        Shape {
            unfinished_heads: 1000,
            slow_heads: 1000,
            idle: 500,
            ..Shape::default()
        },
    );
    // Let the flood take every slot of the metrics listener first.
    siege.until_closed(2500, Duration::from_secs(30));
    // The health listener's probes, the same on the metrics port for
    // comparison (it shares that listener's 64 connections with the
    // flood), and a DNS query every fourth round.
    let (mut round, mut answered) = (0, 0);
    let probes = siege.probe(40, Duration::from_millis(100), || {
        round += 1;
        if round % 4 == 0
            && support::dig(DNS, DNS_PORT, &["+short", "api.c1.example.com"]).trim() == "192.0.2.4"
        {
            answered += 1;
        }
        (healthz(health) == Some(200), healthz(metrics) == Some(200))
    });
    let outcome = siege.end(probes);
    println!("DNS answered {answered}/10 during the flood");
    assert!(answered >= 9, "DNS answered {answered} of 10");
    // Every accepted connection past the limit is closed at once; allow
    // the one the accept loop is closing and the probe's own.
    let bounds = Bounds {
        rss: RSS_BOUND,
        connections: oooi_serve::Limits::SMALL.max_connections,
        other_sockets: 2,
    };
    outcome.check(&bounds).unwrap();
    assert!(
        support::wait_for(|| get(metrics, "/metrics", Duration::from_secs(2))
            .is_some_and(|(s, body)| s == 200 && body.contains("oooi_dns_"))),
        "/metrics answers again after the flood"
    );
}
