//! Server B of a DHCP pair (the real `oooi-dhcp`, in the lab's network
//! namespaces; needs root) with its two HTTP listeners flooded in turn:
//! its metrics listener (127.0.0.1:9067 in its namespace), then its pair
//! API (10.99.0.2:9068, flooded from the pod link's other end). Each flood
//! is 1,000 connections sending 58 KB of a request head that never ends
//! and 500 silent ones, each opened again as soon as the server closes it.
//! B's resident memory stays far below the DHCP pod's limit, it never
//! holds more of a flood's connections than the listener's limit, its
//! health listener (`--health-addr`, where the kubelet's probes go)
//! answers the probes all along, and each flooded listener answers once
//! its flood ends.

mod lab;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use lab::pair::PairLab;
use oooi_flood::{Bounds, Shape, Siege, get, in_netns};

/// The DHCP pod's default memory limit is 128 MiB (the controller's DHCP
/// plan); the server must stay well below it with its lease store.
const RSS_BOUND: u64 = 64 * 1024 * 1024;

fn shape() -> Shape {
    Shape {
        unfinished_heads: 1000,
        idle: 500,
        ..Shape::default()
    }
}

/// Floods `target` from namespace `from` for the 5 s head timeout and a
/// bit more, watching B, and gives the verdict.
fn flood_b(p: &PairLab, pid: u32, from: &str, target: SocketAddr, what: &str) {
    let from = format!("/run/netns/{from}");
    let siege = Siege::start(
        format!("oooi-dhcp B, {what}"),
        pid,
        Some(Path::new(&from)),
        target,
        shape(),
    );
    siege.until_closed(3000, Duration::from_secs(60));
    // The kubelet's probes, on the health listener, for the 5 s head
    // timeout and more: 40 of them, 150 ms apart; for comparison, whether
    // the flooded listener answers at all (the pair API wants a token).
    let health: SocketAddr = lab::pair::B_HEALTH.parse().expect("addr");
    let ns = format!("/run/netns/{}", p.b_ns);
    let probes = siege.probe(40, Duration::from_millis(150), || {
        (
            probe(&ns, health),
            in_netns(&from, move || {
                get(target, "/healthz", Duration::from_secs(2))
            })
            .is_some(),
        )
    });
    // Past the limit each connection is closed as it is accepted; allow
    // that one, and the partner's heartbeat and lease connections.
    let bounds = Bounds {
        rss: RSS_BOUND,
        connections: oooi_serve::Limits::SMALL.max_connections,
        other_sockets: 3,
    };
    if let Err(e) = siege.end(probes).check(&bounds) {
        panic!("{e}\n{}", p.logs());
    }
}

/// B's metrics listener in its namespace.
const METRICS: &str = "127.0.0.1:9067";

/// A kubelet-style probe of `/healthz` at `addr` in namespace `ns`: 200
/// within 2 s.
fn probe(ns: &str, addr: SocketAddr) -> bool {
    in_netns(ns, move || get(addr, "/healthz", Duration::from_secs(2)))
        .is_some_and(|(s, _)| s == 200)
}

#[test]
fn floods_of_the_metrics_port_and_the_pair_api_keep_the_servers_memory_and_connections_bounded() {
    let mut p = PairLab::new();
    p.lab.start_server();
    p.start_b();
    p.both_balancing();
    let pid = p.b_pid().expect("server B started");
    let b_ns = p.b_ns.clone();
    let a_ns = p.lab.server_ns.clone();

    let metrics: SocketAddr = METRICS.parse().expect("addr");
    flood_b(&p, pid, &b_ns, metrics, "metrics listener");
    p.wait(15, "B's /metrics after the flood", || {
        in_netns(format!("/run/netns/{b_ns}"), move || {
            get(metrics, "/metrics", Duration::from_secs(2))
        })
        .is_some_and(|(s, body)| s == 200 && body.contains("oooi_dhcp_"))
    });
    assert_eq!(p.b_healthy(), Some(true), "{}", p.logs());

    let api: SocketAddr = "10.99.0.2:9068".parse().expect("addr");
    flood_b(&p, pid, &a_ns, api, "pair API");
    // Answered again: a request without the token is refused by the API
    // itself, not by a full listener.
    p.wait(15, "B's pair API after the flood", || {
        in_netns(format!("/run/netns/{a_ns}"), move || {
            get(api, "/pair/v1/leases", Duration::from_secs(2))
        })
        .is_some_and(|(s, _)| s == 401)
    });
    assert_eq!(p.b_healthy(), Some(true), "{}", p.logs());
    p.both_balancing();
}
