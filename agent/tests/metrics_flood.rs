//! The agent binary's `/metrics` and `/healthz` listener under a flood
//! (root; a network namespace of the test's own): 1,000 connections sending
//! 58 KB of a request head that never ends and 500 silent ones, each opened
//! again as soon as the agent closes it (the pattern that took the agent
//! from 24 to 95 MiB, past its 64 MiB container limit, under an unbounded
//! serve loop). Its resident memory stays well below the limit, it never
//! holds more of the flood's connections than its connection limit, its
//! health listener (`--health-addr`, where the liveness probe goes)
//! answers the probes all along, and the metrics listener answers again
//! once the flood ends.

#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use oooi_flood::{Bounds, Shape, Siege, get, in_netns, sh};

/// The agent container's memory limit is 64 MiB (the controller's
/// workload plan); a third of it left for the kernel's socket buffers and
/// the rest of the pod's accounting.
const RSS_BOUND: u64 = 40 * 1024 * 1024;

/// The namespace and the agent in it; both gone on drop.
struct Lab {
    ns: String,
    agent: Option<Child>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(mut a) = self.agent.take() {
            let _ = a.kill();
            let _ = a.wait();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}

#[test]
fn a_flood_of_the_metrics_port_keeps_the_agents_memory_and_connections_bounded() {
    let ns = format!("agflood{}", std::process::id() % 100_000);
    sh(&format!("ip netns add {ns}"));
    let mut lab = Lab { ns, agent: None };
    let ns = lab.ns.clone();
    // The VLAN interface, a veth whose peer stays in the namespace.
    sh(&format!(
        "ip -n {ns} link set lo up && ip -n {ns} link add net1 type veth peer name vlan0 && \
         ip -n {ns} link set vlan0 up && ip -n {ns} link set net1 up && \
         ip -n {ns} addr add 10.79.0.3/24 dev net1"
    ));
    let metrics: SocketAddr = "127.0.0.1:9466".parse().unwrap();
    let health: SocketAddr = "127.0.0.1:9467".parse().unwrap();
    let child = Command::new("ip")
        .args(["netns", "exec", &ns, env!("CARGO_BIN_EXE_oooi-addr-agent")])
        .args(["--identity", "flood", "--group", "vlan79-dns"])
        .args(["--interface", "net1", "--address", "10.79.0.3/24"])
        .args(["--home", "10.79.0.3"])
        // Nothing answers: the agent stays not ready and holds nothing.
        .args(["--ready-url", "http://127.0.0.1:1/ready"])
        .args(["--metrics-addr", &metrics.to_string()])
        .args(["--health-addr", &health.to_string()])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // `ip netns exec` execs the agent: the child's pid is the agent's.
    let pid = child.id();
    lab.agent = Some(child);
    let netns = format!("/run/netns/{ns}");
    let healthz = |netns: &str, addr: SocketAddr| {
        in_netns(netns, move || {
            get(addr, "/healthz", Duration::from_secs(2)).map(|(s, _)| s)
        })
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    while healthz(&netns, metrics) != Some(200) || healthz(&netns, health) != Some(200) {
        assert!(Instant::now() < deadline, "the agent never served /healthz");
        std::thread::sleep(Duration::from_millis(100));
    }
    let siege = Siege::start(
        "oooi-addr-agent, metrics port",
        pid,
        Some(Path::new(&netns)),
        metrics,
        Shape {
            unfinished_heads: 1000,
            idle: 500,
            ..Shape::default()
        },
    );
    siege.until_closed(3000, Duration::from_secs(60));
    // The liveness probe, on the health listener, past the 5 s head
    // timeout: 40 of them, 150 ms apart, and the same on the metrics
    // listener for comparison.
    let probes = siege.probe(40, Duration::from_millis(150), || {
        (
            healthz(&netns, health) == Some(200),
            healthz(&netns, metrics) == Some(200),
        )
    });
    // Past the limit each connection is closed as it is accepted; allow
    // that one and a readiness poll in flight.
    let bounds = Bounds {
        rss: RSS_BOUND,
        connections: oooi_serve::Limits::SMALL.max_connections,
        other_sockets: 2,
    };
    siege.end(probes).check(&bounds).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let m = in_netns(&netns, move || {
            get(metrics, "/metrics", Duration::from_secs(2))
        });
        if m.is_some_and(|(s, body)| s == 200 && body.contains("oooi_agent_")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "/metrics never answered after the flood"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
