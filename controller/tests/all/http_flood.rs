//! The real `oooi-controller run` process (against the mocked API over
//! HTTP) with its `/metrics`, `/healthz` and `/readyz` listener flooded:
//! 1,000 connections sending 58 KB of a request head that never ends and
//! 500 silent ones, each opened again as soon as the controller closes it.
//! Its resident memory stays far below the controller's container limit,
//! it never holds more of the flood's connections than its connection
//! limit, its health listener (`--health-addr`, where the chart's probes
//! go) answers `/readyz` all along, and the flooded listener answers
//! `/readyz` and `/metrics` once the flood ends.

#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

use crate::mock_api::MockApi;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use oooi_flood::{Bounds, Shape, Siege};

/// The chart's default memory limit of the controller is 256 MiB
/// (`resources.limits.memory` in charts/oooi/values.yaml).
const RSS_BOUND: u64 = 160 * 1024 * 1024;

/// Kills the process if the test fails before it is done.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn get(addr: SocketAddr, path: &'static str) -> Option<(u16, String)> {
    tokio::task::spawn_blocking(move || oooi_flood::get(addr, path, Duration::from_secs(2)))
        .await
        .unwrap()
}

/// Polls `GET path` until it answers `status`, for at most `secs`.
async fn until_status(addr: SocketAddr, path: &'static str, status: u16, secs: u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if get(addr, path).await.is_some_and(|(s, _)| s == status) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_the_http_port_keeps_the_controllers_memory_and_connections_bounded() {
    let mock = MockApi::start();
    let api = mock.serve_http().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        oooi_kube_mock::kubeconfig(api, "default", None),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let http: SocketAddr = ([127, 0, 0, 1], port).into();
    let health_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let health: SocketAddr = ([127, 0, 0, 1], health_port).into();
    let child = Command::new(env!("CARGO_BIN_EXE_oooi-controller"))
        .args([
            "run",
            &format!("--http-addr={http}"),
            &format!("--health-addr={health}"),
            "--leader-election=false",
            "--log-format=text",
        ])
        .env("KUBECONFIG", &kubeconfig)
        .env("RUST_LOG", "warn")
        .env_remove("OOOI_WATCH_NAMESPACE")
        .env_remove("OOOI_OPENSHIFT_SCC")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("oooi-controller runs");
    let guard = Guard(child);
    let pid = guard.0.id();
    assert!(
        until_status(http, "/readyz", 200, 30).await,
        "the controller never got ready"
    );
    // The flood and the probes block: off the runtime that serves the
    // mocked API.
    let outcome = tokio::task::spawn_blocking(move || {
        let siege = Siege::start(
            "oooi-controller, http port",
            pid,
            None,
            http,
            Shape {
                unfinished_heads: 1000,
                idle: 500,
                ..Shape::default()
            },
        );
        siege.until_closed(3000, Duration::from_secs(60));
        // The kubelet's probes, on the health listener, past the 5 s head
        // timeout: 40 of them, 150 ms apart, and the same on the http port
        // for comparison.
        let ready = |addr| {
            oooi_flood::get(addr, "/readyz", Duration::from_secs(2)).is_some_and(|(s, _)| s == 200)
        };
        let probes = siege.probe(40, Duration::from_millis(150), || {
            (ready(health), ready(http))
        });
        siege.end(probes)
    })
    .await
    .unwrap();
    // Past the limit each connection is closed as it is accepted; allow
    // that one and a connection to the API server opened meanwhile.
    let bounds = Bounds {
        rss: RSS_BOUND,
        connections: oooi_serve::Limits::SMALL.max_connections,
        other_sockets: 2,
    };
    outcome.check(&bounds).unwrap();
    assert!(
        until_status(http, "/readyz", 200, 15).await,
        "/readyz answers again after the flood"
    );
    let (status, metrics) = get(http, "/metrics").await.expect("metrics");
    assert_eq!(status, 200);
    assert!(metrics.contains("oooi_controller_leader 1"), "{metrics}");
    drop(guard);
}
