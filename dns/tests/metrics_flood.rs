//! The `oooi-dns` binary's metrics and health listener under a flood: 1,000
//! connections at a time each sending 58 KB of a request head that never
//! ends (the pattern that took the address agent past its container limit
//! under an unbounded serve loop). The process's resident memory stays
//! small, DNS keeps answering, and `/healthz` answers again as soon as the
//! flood ends.
#![allow(clippy::unwrap_used)]

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const DNS: &str = "127.0.0.61";
const DNS_PORT: u16 = 25661;
const METRICS: &str = "127.0.0.61:25662";

fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

fn healthz(addr: SocketAddr) -> Option<u16> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .ok()?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).ok()?;
    String::from_utf8_lossy(&out)
        .split(' ')
        .nth(1)?
        .parse()
        .ok()
}

#[test]
fn a_flood_of_unfinished_heads_on_the_metrics_port_keeps_memory_small() {
    let dir = tempfile::tempdir().unwrap();
    let server = support::start_with(
        &{
            let path = dir.path().join("config.yaml");
            std::fs::write(
                &path,
                format!(
                    "views:\n  - name: vlan\n    listen: [\"{DNS}:{DNS_PORT}\"]\n    zones:\n      - origin: c1.example.com\n        records:\n          - name: api\n            a: [\"192.0.2.4\"]\n"
                ),
            )
            .unwrap();
            path
        },
        &["--metrics-addr", METRICS],
    );
    let metrics: SocketAddr = METRICS.parse().unwrap();
    let pid = server.0.id();
    assert!(support::wait_for(|| healthz(metrics) == Some(200)));
    let baseline = rss_bytes(pid);

    let stop = Arc::new(AtomicBool::new(false));
    let flood: Vec<_> = (0..1000)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    let mut head = b"GET /metrics HTTP/1.1\r\nhost: x\r\nx-pad: ".to_vec();
                    head.extend(std::iter::repeat_n(b'a', 58 * 1024));
                    while !stop.load(Ordering::Relaxed) {
                        if let Ok(mut s) = TcpStream::connect(metrics) {
                            let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
                            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                            if s.write_all(&head).is_ok() {
                                let mut buf = [0u8; 256];
                                let _ = s.read(&mut buf);
                            }
                        }
                        std::thread::sleep(Duration::from_millis(50));
                    }
                })
                .unwrap()
        })
        .collect();
    let started = Instant::now();
    let mut peak = baseline;
    let mut answered = 0;
    while started.elapsed() < Duration::from_secs(6) {
        peak = peak.max(rss_bytes(pid));
        if support::dig(DNS, DNS_PORT, &["+short", "api.c1.example.com"]).trim() == "192.0.2.4" {
            answered += 1;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::Relaxed);
    for t in flood {
        t.join().unwrap();
    }
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    println!(
        "oooi-dns under 1,000 looping clients with unfinished 58 KB heads on its metrics port: \
         RSS {:.1} -> peak {:.1} MiB; {answered} DNS answers meanwhile",
        mib(baseline),
        mib(peak)
    );
    // The DNS pod's limit is far above this; an unbounded loop grew by
    // more than 100 MiB under the same flood.
    assert!(
        peak.saturating_sub(baseline) < 32 * 1024 * 1024,
        "grew {:.1} MiB",
        mib(peak.saturating_sub(baseline))
    );
    assert!(answered > 0, "DNS kept answering");
    assert!(
        support::wait_for(|| healthz(metrics) == Some(200)),
        "/healthz answers again after the flood"
    );
}
