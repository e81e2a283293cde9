//! The steady client a worker runs during the failover step: in a loop,
//! each target is looked up with the system resolver (glibc
//! `getaddrinfo`, reading the worker's resolv.conf) and a new TLS
//! connection is opened to it, trying the addresses in order and moving to
//! the next one only when the TCP connect fails, as Go's dialer and curl
//! do. A failure after the connect (a reset during the TLS handshake) fails
//! that connection. Every attempt is one JSON line on stdout.

use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow};
use serde_json::json;
use tokio::net::TcpStream;

/// Milliseconds since the Unix epoch (the lab and its workers share the
/// clock, so the lab can line attempts up with its kills).
pub fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0)
}

/// Runs until `stop` exists: every `interval`, one attempt per target
/// (`host:port`, the host also the SNI).
/// With `lookup_only`, each attempt is the lookup alone (its answer's
/// addresses in order), no connection.
pub fn run(
    targets: &[String],
    interval: Duration,
    connect_timeout: Duration,
    lookup_only: bool,
    stop: &Path,
) -> Result<()> {
    let targets: Vec<(String, u16)> = targets
        .iter()
        .map(|t| {
            let (host, port) = t
                .rsplit_once(':')
                .ok_or_else(|| anyhow!("target `{t}`: expected HOST:PORT"))?;
            Ok((
                host.to_string(),
                port.parse().with_context(|| format!("target `{t}`"))?,
            ))
        })
        .collect::<Result<_>>()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", json!({"started": now_ms()}))?;
    out.flush()?;
    while !stop.exists() {
        for (host, port) in &targets {
            let line = rt.block_on(attempt(host, *port, connect_timeout, lookup_only));
            writeln!(out, "{line}")?;
        }
        out.flush()?;
        std::thread::sleep(interval);
    }
    Ok(())
}

/// One lookup and one new connection to `host:port`.
async fn attempt(
    host: &str,
    port: u16,
    connect_timeout: Duration,
    lookup_only: bool,
) -> serde_json::Value {
    let t = now_ms();
    let l0 = Instant::now();
    // getaddrinfo blocks; nothing else runs on this thread meanwhile.
    let looked_up = (host, port).to_socket_addrs();
    let lookup_ms = l0.elapsed().as_secs_f64() * 1000.0;
    let addrs: Vec<SocketAddr> = match looked_up {
        Ok(a) => a.filter(SocketAddr::is_ipv4).collect(),
        Err(e) => {
            return json!({"t": t, "target": host, "port": port, "lookup_ms": lookup_ms,
                "lookup_error": e.to_string()});
        }
    };
    if lookup_only {
        return json!({"t": t, "target": host, "port": port, "lookup_ms": lookup_ms,
            "addrs": addrs.iter().map(|a| a.ip().to_string()).collect::<Vec<_>>()});
    }
    let c0 = Instant::now();
    let mut tries = Vec::new();
    let mut result = json!({"error": "no address connected"});
    let mut i = None;
    for (n, addr) in addrs.iter().enumerate() {
        let at = now_ms();
        let tcp = match tokio::time::timeout(connect_timeout, TcpStream::connect(addr)).await {
            Ok(Ok(tcp)) => tcp,
            Ok(Err(e)) => {
                tries.push(json!({"addr": addr.ip().to_string(), "at": at, "connect_error": e.to_string()}));
                continue;
            }
            Err(_) => {
                tries.push(
                    json!({"addr": addr.ip().to_string(), "at": at, "connect_error": "timed out"}),
                );
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let connected = now_ms();
        result = match oooi_tests::tls_over(tcp, Some(host)).await {
            Ok((backend, _)) => json!({"addr": addr.ip().to_string(), "connected": connected,
                "backend": backend}),
            Err(e) => json!({"addr": addr.ip().to_string(), "connected": connected,
                "error": format!("{e:#}")}),
        };
        i = Some(n);
        break;
    }
    let ms = c0.elapsed().as_secs_f64() * 1000.0;
    // Go and curl stop after a failure past the connect. What one retry
    // of the next address (a request-level retry) would have got:
    let mut retry = serde_json::Value::Null;
    if result.get("error").is_some()
        && let Some(next) = i.and_then(|n| addrs.get(n + 1))
    {
        retry = match tokio::time::timeout(connect_timeout, TcpStream::connect(next)).await {
            Ok(Ok(tcp)) => match oooi_tests::tls_over(tcp, Some(host)).await {
                Ok((backend, _)) => json!({"addr": next.ip().to_string(), "backend": backend}),
                Err(e) => json!({"addr": next.ip().to_string(), "error": format!("{e:#}")}),
            },
            Ok(Err(e)) => json!({"addr": next.ip().to_string(), "error": e.to_string()}),
            Err(_) => json!({"addr": next.ip().to_string(), "error": "connect timed out"}),
        };
    }
    json!({"t": t, "target": host, "port": port, "lookup_ms": lookup_ms,
        "addrs": addrs.iter().map(|a| a.ip().to_string()).collect::<Vec<_>>(),
        "failed_connects": tries, "result": result, "ms": ms, "end": now_ms(),
        "retry_next": retry})
}
