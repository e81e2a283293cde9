//! Long-lived connections standing in for Kubernetes watches: one TLS
//! connection per proxy address (by SNI, through the proxy to the cluster's
//! backend, which echoes), a line sent every `interval` and its echo read
//! back, as a watch with HTTP/2 pings keeps its connection busy. When the
//! connection ends (reset, closed, or no echo within 10 s: hung) it is
//! logged as one JSON line and opened again. A moved address answers the
//! next packet with a reset, so such a connection ends within a
//! retransmission of the move; one left hanging shows as `hung`.

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::steady::now_ms;

/// How long an echo may take before the connection counts as hung.
const HUNG: Duration = Duration::from_secs(10);

/// Holds one connection to each of `addrs` (SNI `sni`) until `stop` exists.
pub fn run(addrs: &[SocketAddr], sni: &str, interval: Duration, stop: &Path) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    println!("{}", json!({"started": now_ms()}));
    std::io::stdout().flush()?;
    rt.block_on(async {
        let mut tasks = Vec::new();
        for &addr in addrs {
            let (sni, stop) = (sni.to_string(), stop.to_path_buf());
            tasks.push(tokio::spawn(async move {
                while !stop.exists() {
                    let line = hold(addr, &sni, interval, &stop).await;
                    println!("{line}");
                    let _ = std::io::stdout().flush();
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    });
    Ok(())
}

/// One connection from its open to its end: what ended it and when.
async fn hold(addr: SocketAddr, sni: &str, interval: Duration, stop: &Path) -> serde_json::Value {
    let t = now_ms();
    let tcp = match tokio::time::timeout(Duration::from_secs(3), TcpStream::connect(addr)).await {
        Ok(Ok(tcp)) => tcp,
        Ok(Err(e)) => {
            return json!({"addr": addr.ip().to_string(), "t": t, "open_error": e.to_string()});
        }
        Err(_) => {
            return json!({"addr": addr.ip().to_string(), "t": t, "open_error": "timed out"});
        }
    };
    let _ = tcp.set_nodelay(true);
    let (backend, mut tls) = match oooi_tests::tls_over(tcp, Some(sni)).await {
        Ok(ok) => ok,
        Err(e) => {
            return json!({"addr": addr.ip().to_string(), "t": t, "open_error": format!("{e:#}")});
        }
    };
    let opened = now_ms();
    let mut last_echo = opened;
    let mut buf = [0u8; 64];
    let end = loop {
        if stop.exists() {
            break "stopped".to_string();
        }
        if let Err(e) = tls.write_all(b"ping\n").await {
            break format!("write: {e}");
        }
        let _ = tls.flush().await;
        let mut got = 0;
        let read = tokio::time::timeout(HUNG, async {
            while got < 5 {
                match tls.read(&mut buf[got..5]).await {
                    Ok(0) => return Err("closed".to_string()),
                    Ok(n) => got += n,
                    Err(e) => return Err(format!("read: {e}")),
                }
            }
            Ok(())
        })
        .await;
        match read {
            Ok(Ok(())) => last_echo = now_ms(),
            Ok(Err(e)) => break e,
            Err(_) => break "hung".to_string(),
        }
        tokio::time::sleep(interval).await;
    };
    json!({"addr": addr.ip().to_string(), "t": t, "opened": opened, "backend": backend,
        "last_echo": last_echo, "ended": now_ms(), "end": end})
}
