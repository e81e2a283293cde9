//! Running the health checks of the config (TCP connect or HTTP GET, each
//! bounded by the check timeout) about every interval, feeding the
//! [`Board`], logging and counting each transition, and putting the set of
//! down addresses in force in the [`Engine`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::task::JoinSet;

use crate::config::CheckTarget;
use crate::engine::Engine;
use crate::health::{Board, Transition};

/// How often the loop looks at the config again while it has no checks.
const IDLE: Duration = Duration::from_secs(1);

/// Runs `target`'s check once; `Err` says why it failed.
pub async fn check(target: &CheckTarget, timeout: Duration) -> Result<(), String> {
    match tokio::time::timeout(timeout, attempt(target)).await {
        Ok(r) => r,
        Err(_) => Err(format!("no result within {} ms", timeout.as_millis())),
    }
}

async fn attempt(target: &CheckTarget) -> Result<(), String> {
    match target {
        CheckTarget::Tcp { host, port } => {
            TcpStream::connect((host.as_str(), *port))
                .await
                .map_err(|e| format!("connect: {e}"))?;
            Ok(())
        }
        CheckTarget::Http { host, port, path } => {
            let stream = TcpStream::connect((host.as_str(), *port))
                .await
                .map_err(|e| format!("connect: {e}"))?;
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| format!("http: {e}"))?;
            let conn = tokio::spawn(conn);
            let authority = match host.parse::<std::net::Ipv6Addr>() {
                Ok(_) => format!("[{host}]:{port}"),
                Err(_) => format!("{host}:{port}"),
            };
            let request = http::Request::get(path.as_str())
                .header(http::header::HOST, authority)
                .header(http::header::USER_AGENT, "oooi-dns health check")
                .body(Empty::<Bytes>::new())
                .map_err(|e| format!("request: {e}"))?;
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| format!("http: {e}"));
            conn.abort();
            let status = response?.status();
            if status == http::StatusCode::OK {
                Ok(())
            } else {
                Err(format!("status {}", status.as_u16()))
            }
        }
    }
}

/// Logs and counts one transition.
fn report(t: &Transition) {
    let m = crate::metrics::metrics();
    let labels = crate::metrics::health_labels(t.address, &t.target);
    m.health_up.get_or_create(&labels).set(i64::from(t.up));
    m.health_transitions
        .get_or_create(&crate::metrics::TransitionLabels::new(&labels, t.up))
        .inc();
    let after_ms = t.after.as_millis() as u64;
    if t.up {
        tracing::info!(address = %t.address, check = %t.target, checks = t.streak, after_ms, "address passes its health check: answered again");
    } else {
        tracing::warn!(address = %t.address, check = %t.target, checks = t.streak, after_ms, reason = t.reason.as_deref().unwrap_or(""), "address fails its health check: left out of answers");
    }
}

/// Checks every address of the engine's config about every interval, for
/// ever, and keeps the engine's down set equal to the board's.
pub async fn run(engine: Arc<Engine>) {
    let mut board = Board::default();
    loop {
        let Some(health) = engine.configured().health.clone() else {
            board.sync(&[], Instant::now());
            engine.set_down(board.down());
            tokio::time::sleep(IDLE).await;
            continue;
        };
        let started = tokio::time::Instant::now();
        board.sync(&health.checks, Instant::now());
        let mut round = JoinSet::new();
        for c in health.checks.iter().cloned() {
            let timeout = health.timeout;
            round.spawn(async move {
                let result = check(&c.target, timeout).await;
                (c.address, result)
            });
        }
        while let Some(done) = round.join_next().await {
            let Ok((address, result)) = done else {
                continue;
            };
            if let Err(reason) = &result {
                tracing::debug!(%address, %reason, "health check failed");
            }
            if let Some(t) =
                board.observe(address, result, Instant::now(), health.fall, health.rise)
            {
                report(&t);
            }
        }
        let down = board.down();
        for c in &health.checks {
            crate::metrics::metrics()
                .health_up
                .get_or_create(&crate::metrics::health_labels(c.address, &c.target))
                .set(i64::from(!down.contains(&c.address)));
        }
        engine.set_down(down);
        tokio::time::sleep_until(started + health.interval).await;
    }
}

/// Starts [`run`] in a task of its own.
pub fn spawn(engine: Arc<Engine>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run(engine))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(port: u16) -> CheckTarget {
        CheckTarget::Http {
            host: "127.0.0.1".to_string(),
            port,
            path: "/ready".to_string(),
        }
    }

    /// An endpoint that accepts but never answers fails within the timeout;
    /// a closed port fails at once; any status but 200 fails.
    #[tokio::test]
    async fn a_check_fails_on_silence_refusal_and_other_statuses() {
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = silent.local_addr().expect("addr").port();
        let started = std::time::Instant::now();
        let err = check(&http(port), Duration::from_millis(200))
            .await
            .expect_err("silent");
        assert!(err.contains("no result within 200 ms"), "{err}");
        assert!(started.elapsed() < Duration::from_millis(1000));
        drop(silent);
        let err = check(
            &CheckTarget::Tcp {
                host: "127.0.0.1".to_string(),
                port,
            },
            Duration::from_millis(200),
        )
        .await
        .expect_err("closed");
        assert!(err.starts_with("connect:"), "{err}");

        let server = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = server.local_addr().expect("addr").port();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            for status in ["200 OK", "503 Service Unavailable"] {
                let Ok((mut s, _)) = server.accept().await else {
                    return;
                };
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let reply = format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n");
                let _ = s.write_all(reply.as_bytes()).await;
            }
        });
        assert_eq!(check(&http(port), Duration::from_millis(500)).await, Ok(()));
        let err = check(&http(port), Duration::from_millis(500))
            .await
            .expect_err("503");
        assert_eq!(err, "status 503");
    }
}
