//! The bounds of `oooi_serve::serve`, each against a real socket on
//! loopback: the connection limit, the head, idle and request timeouts,
//! head and body sizes, and the client address reaching the handler.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use axum::routing::{get, post};
use oooi_serve::{Limits, serve};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn limits() -> Limits {
    Limits {
        max_connections: 4,
        head_timeout: Duration::from_millis(800),
        idle_timeout: Duration::from_millis(1500),
        request_timeout: Duration::from_millis(800),
        max_head_bytes: 8192,
        max_body_bytes: 1024,
    }
}

async fn start(limits: Limits) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let router = axum::Router::new()
        .route("/metrics", get(|| async { "metric 1\n" }))
        .route(
            "/peer",
            get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.to_string() }),
        )
        .route(
            "/echo",
            post(|body: axum::body::Bytes| async move { body.len().to_string() }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                "late"
            }),
        );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let _ = serve(listener, router, limits).await;
    });
    (addr, task)
}

/// Sends `request` on a new connection and reads until the server closes
/// or `wait` passes: (status, whole answer).
async fn exchange(addr: SocketAddr, request: &[u8], wait: Duration) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(wait, s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, text)
}

/// Whether the server closes `s` within `within` (EOF or reset).
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 512];
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

const GET: &[u8] = b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n";

#[tokio::test]
async fn connections_past_the_limit_are_closed_at_once_and_slots_come_back() {
    let (addr, _task) = start(limits()).await;
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(TcpStream::connect(addr).await.unwrap());
    }
    // Let the server accept all four before the fifth.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut extra = TcpStream::connect(addr).await.unwrap();
    assert!(
        closed_within(&mut extra, Duration::from_millis(500)).await,
        "the fifth connection is closed at accept"
    );
    // The held ones never send: the idle timeout frees their slots.
    for s in &mut held {
        assert!(closed_within(s, Duration::from_secs(5)).await);
    }
    let (status, body) = exchange(addr, GET, Duration::from_secs(5)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.ends_with("metric 1\n"), "{body}");
}

#[tokio::test]
async fn a_head_sent_byte_by_byte_is_cut_at_the_head_timeout() {
    let (addr, _task) = start(limits()).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let started = Instant::now();
    // One byte every 200 ms: never idle, never a whole head.
    let head =
        b"GET /metrics HTTP/1.1\r\nx-pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let mut cut = false;
    for b in head {
        if s.write_all(&[*b]).await.is_err() {
            cut = true;
            break;
        }
        let mut buf = [0u8; 256];
        match tokio::time::timeout(Duration::from_millis(200), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                cut = true;
                break;
            }
            // A 408 before the close is fine too.
            Ok(Ok(_)) => {}
            Err(_) => {}
        }
    }
    let took = started.elapsed();
    assert!(cut, "the slow head was never cut");
    assert!(
        took < Duration::from_secs(6),
        "cut after {took:?}, head timeout 800 ms"
    );
}

#[tokio::test]
async fn a_silent_connection_is_closed_at_the_idle_timeout() {
    let (addr, _task) = start(limits()).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let started = Instant::now();
    assert!(closed_within(&mut s, Duration::from_secs(8)).await);
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(700), "closed after {took:?}");
}

#[tokio::test]
async fn a_kept_alive_connection_is_closed_once_idle_after_its_request() {
    let (addr, _task) = start(limits()).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 1024];
    let n = s.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    assert!(closed_within(&mut s, Duration::from_secs(8)).await);
}

#[tokio::test]
async fn an_oversized_head_is_refused() {
    let (addr, _task) = start(limits()).await;
    let mut req = b"GET /metrics HTTP/1.1\r\nhost: x\r\nx-pad: ".to_vec();
    req.extend(std::iter::repeat_n(b'a', 20_000));
    req.extend(b"\r\n\r\n");
    let (status, text) = exchange(addr, &req, Duration::from_secs(5)).await;
    assert!(
        status == 431 || status == 0,
        "refused or closed, got {status}: {text}"
    );
    assert!(!text.contains("metric 1"), "{text}");
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused_and_one_under_it_read() {
    let (addr, _task) = start(limits()).await;
    let small = b"POST /echo HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: 10\r\n\r\n0123456789";
    let (status, text) = exchange(addr, small, Duration::from_secs(5)).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.ends_with("\r\n10"), "{text}");
    let mut big =
        b"POST /echo HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: 5000\r\n\r\n"
            .to_vec();
    big.extend(std::iter::repeat_n(b'a', 5000));
    let (status, text) = exchange(addr, &big, Duration::from_secs(5)).await;
    assert_eq!(status, 413, "{text}");
}

#[tokio::test]
async fn a_slow_handler_or_body_is_answered_408_at_the_request_timeout() {
    let (addr, _task) = start(limits()).await;
    let (status, text) = exchange(
        addr,
        b"GET /slow HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(status, 408, "{text}");
    // A body announced and never sent.
    let (status, text) = exchange(
        addr,
        b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n0123",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(status, 408, "{text}");
}

#[tokio::test]
async fn handlers_see_the_client_address() {
    let (addr, _task) = start(limits()).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let me = s.local_addr().unwrap();
    s.write_all(b"GET /peer HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    assert!(out.ends_with(&me.to_string()), "{out}");
}

#[tokio::test]
async fn invalid_limits_are_refused_before_serving() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let bad = Limits {
        max_head_bytes: 100,
        ..Limits::SMALL
    };
    let e = serve(listener, axum::Router::new(), bad).await.unwrap_err();
    assert!(e.to_string().contains("head-bytes"), "{e}");
}
