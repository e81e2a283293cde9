//! A flood of unfinished heads against `oooi_serve::serve`, in a test
//! binary of its own so that the process's resident memory is the
//! server's (and the flooding client's small sockets): 1,000 connections
//! each sending 58 KB of a head that never ends, opened again as soon as
//! the server closes them, the pattern that took the address agent from 24
//! to 95 MiB under `axum::serve`. Memory stays bounded, and once the flood
//! stops the endpoint answers again. The components' own binaries get the
//! same flood in their crates' tests.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use axum::routing::get;
use oooi_flood::{Flood, Shape, Watch, mib, rss_bytes};
use oooi_serve::{Limits, serve};
use tokio::net::TcpListener;

async fn get_metrics(addr: std::net::SocketAddr) -> Option<u16> {
    tokio::task::spawn_blocking(move || {
        oooi_flood::get(addr, "/metrics", Duration::from_secs(5)).map(|(s, _)| s)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_unfinished_heads_keeps_memory_bounded() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let body = "x".repeat(20_000);
    let router = axum::Router::new().route("/metrics", get(move || async move { body.clone() }));
    tokio::spawn(async move {
        let _ = serve(listener, router, Limits::SMALL).await;
    });
    assert_eq!(get_metrics(addr).await, Some(200));
    let baseline = rss_bytes(std::process::id()).unwrap();
    let watch = Watch::start(std::process::id());
    let flood = Flood::start(
        addr,
        Shape {
            unfinished_heads: 1000,
            ..Shape::default()
        },
    );
    let started = Instant::now();
    // Past the 5 s head timeout, so heads that got a slot are cut.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let tally = flood.stop();
    let peak = watch.stop().rss;
    println!(
        "1,000 unfinished 58 KB heads for {:?} ({tally:?}): RSS {:.1} -> peak {:.1} MiB (+{:.1} MiB)",
        started.elapsed(),
        mib(baseline),
        mib(peak),
        mib(peak.saturating_sub(baseline)),
    );
    assert!(tally.closed_by_server >= 1000, "{tally:?}");
    // 64 connections × a 16 KiB head buffer is 1 MiB; allow the runtime's
    // tasks, the client's buffers and the allocator their share.
    assert!(
        peak.saturating_sub(baseline) < 24 * 1024 * 1024,
        "grew {:.1} MiB",
        mib(peak.saturating_sub(baseline))
    );
    // Served again once the flood is over.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if get_metrics(addr).await == Some(200) {
            break;
        }
        assert!(Instant::now() < deadline, "not served after the flood");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
