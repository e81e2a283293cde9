//! `oooi-controller probe` (the chart's `helm test` command) against HTTP
//! servers on loopback.

#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Command;

/// Serves every connection with `status` until the test ends; returns the
/// base URL.
fn server(status: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut buf = [0u8; 1024];
            let _ = conn.read(&mut buf);
            let body = "ok\n";
            let _ = write!(
                conn,
                "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("http://{addr}")
}

fn probe(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_oooi-controller"))
        .arg("probe")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn probe_passes_when_every_url_answers_2xx() {
    let ok = server("200 OK");
    let out = probe(&[
        "--url",
        &format!("{ok}/healthz"),
        "--url",
        &format!("{ok}/metrics"),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("/healthz 200") && stdout.contains("/metrics 200"),
        "{stdout}"
    );
}

#[test]
fn probe_fails_naming_the_url_and_status_on_a_non_2xx_answer() {
    let ok = server("200 OK");
    let bad = server("503 Service Unavailable");
    let out = probe(&[
        "--url",
        &format!("{ok}/healthz"),
        "--url",
        &format!("{bad}/readyz"),
        "--attempts",
        "2",
        "--interval-seconds",
        "0",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("/readyz") && stderr.contains("status 503"),
        "{stderr}"
    );
    assert!(stderr.contains("2 attempt(s)"), "{stderr}");
}

#[test]
fn probe_fails_when_nothing_listens() {
    // A port that was free a moment ago: connection refused.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = probe(&[
        "--url",
        &format!("http://127.0.0.1:{port}/healthz"),
        "--attempts",
        "1",
        "--timeout-seconds",
        "2",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("127.0.0.1:{port}")), "{stderr}");
}

#[test]
fn probe_refuses_a_url_that_is_not_plain_http() {
    let out = probe(&["--url", "https://127.0.0.1:1/healthz", "--attempts", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("only http://"), "{stderr}");
}
