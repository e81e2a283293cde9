//! A flood of unfinished heads against `oooi_serve::serve`, in a test
//! binary of its own so that the process's resident memory is the
//! server's (and the flooding client's small sockets): 1,000 connections
//! each sending 58 KB of a head that never ends, the pattern that took
//! the address agent from 24 to 95 MiB under `axum::serve`. Memory stays
//! bounded, and once the flood stops the endpoint answers again.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::routing::get;
use oooi_serve::{Limits, serve};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    kib * 1024
}

/// Holds a connection with an unfinished 58 KB head until the server
/// closes it or `hold` passes.
async fn unfinished_head(addr: SocketAddr, hold: Duration) {
    let Ok(mut s) = TcpStream::connect(addr).await else {
        return;
    };
    let mut head = b"GET /metrics HTTP/1.1\r\nhost: x\r\nx-pad: ".to_vec();
    head.extend(std::iter::repeat_n(b'a', 58 * 1024));
    let _ = tokio::time::timeout(hold, async {
        if s.write_all(&head).await.is_ok() {
            let mut buf = [0u8; 1024];
            while let Ok(n) = s.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
        }
    })
    .await;
}

async fn get_metrics(addr: SocketAddr) -> Option<u16> {
    let mut s = TcpStream::connect(addr).await.ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .ok()?;
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out))
        .await
        .ok()?
        .ok()?;
    String::from_utf8_lossy(&out)
        .split(' ')
        .nth(1)?
        .parse()
        .ok()
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
    let baseline = rss_bytes();
    let started = Instant::now();
    let mut peak = baseline;
    let flood: Vec<_> = (0..1000)
        .map(|_| tokio::spawn(unfinished_head(addr, Duration::from_secs(8))))
        .collect();
    while flood.iter().any(|f| !f.is_finished()) {
        peak = peak.max(rss_bytes());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let flooded = started.elapsed();
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    println!(
        "1,000 unfinished 58 KB heads: RSS {:.1} -> peak {:.1} MiB (+{:.1} MiB) in {flooded:?}",
        mib(baseline),
        mib(peak),
        mib(peak.saturating_sub(baseline)),
    );
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
