//! Bounded HTTP/1.1 serving for the small listeners of oooi's components:
//! metrics and health endpoints, the DHCP pair API.
//!
//! `axum::serve` puts no bound on anything a client controls: how many
//! connections it holds, how slowly it sends a request head, how long it
//! keeps a connection open without a request. A thousand clients holding
//! unfinished heads took a small process past its container memory limit.
//! [`serve`] runs the same routers with every such bound explicit
//! ([`Limits`]):
//!
//! - at most `max_connections` open at once; one more is closed as soon as
//!   it is accepted (the kernel's backlog never fills with clients waiting
//!   for a slot, and a probe fails fast instead of hanging);
//! - a request head must arrive whole within `head_timeout` and fit
//!   `max_head_bytes` (a larger one is answered 431);
//! - a connection with no byte in either direction for `idle_timeout` is
//!   closed, whether it never sent a request or sits between two;
//! - a request (its body included) must be answered within
//!   `request_timeout` (408 otherwise), and a body is cut at
//!   `max_body_bytes`.
//!
//! So the memory all clients together can pin is about `max_connections ×
//! (max_head_bytes + max_body_bytes + the largest response)`, whatever they
//! send. Who may connect at all is the NetworkPolicy's business.

use std::convert::Infallible;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use http_body_util::Limited;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tower::ServiceExt;

/// The bounds of one listener. [`Limits::SMALL`] suits metrics and health
/// endpoints; override fields for others (the DHCP pair API takes larger
/// bodies), or parse them from text ([`Limits::from_str`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once; more are closed as they are accepted.
    pub max_connections: usize,
    /// Time a client has to send a whole request head.
    pub head_timeout: Duration,
    /// Time a connection may pass without a byte in either direction.
    pub idle_timeout: Duration,
    /// Time from a complete request head to the response (the handler and
    /// the body it reads).
    pub request_timeout: Duration,
    /// Largest request head (hyper's read buffer; at least 8 KiB).
    pub max_head_bytes: usize,
    /// Largest request body.
    pub max_body_bytes: usize,
}

/// Why a [`Limits`] is refused, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitsError {
    /// A field outside its range.
    #[error("{field}: {value} is outside {range}")]
    OutOfRange {
        /// The field's name, as [`Limits::from_str`] spells it.
        field: &'static str,
        /// The value given.
        value: String,
        /// The accepted range.
        range: &'static str,
    },
    /// A `key=value` item that does not parse.
    #[error("{0:?}: expected key=value with a key of {KEYS}")]
    Malformed(String),
}

const KEYS: &str =
    "connections, head-timeout, idle-timeout, request-timeout, head-bytes, body-bytes";

impl Limits {
    /// Metrics and health endpoints: 64 connections (a scraper and a few
    /// probes use one each), heads within 5 s and 16 KiB, idle connections
    /// closed after 30 s (above Prometheus' usual 15-30 s scrape interval,
    /// so its pooled connection survives between scrapes), answers within
    /// 10 s, bodies of 4 KiB at most (nothing there takes one).
    pub const SMALL: Limits = Limits {
        max_connections: 64,
        head_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(30),
        request_timeout: Duration::from_secs(10),
        max_head_bytes: 16 * 1024,
        max_body_bytes: 4 * 1024,
    };

    /// A health listener (`/healthz` alone, for the kubelet's probes and
    /// the address agent's poll): its callers send a whole head at once and
    /// no body, so a head gets 2 s and a quiet connection 10 s; 32
    /// connections leave room for the probes many times over. Being a
    /// listener of its own, nothing sent to the metrics port can use up
    /// its connections.
    pub const HEALTH: Limits = Limits {
        max_connections: 32,
        head_timeout: Duration::from_secs(2),
        idle_timeout: Duration::from_secs(10),
        request_timeout: Duration::from_secs(2),
        max_head_bytes: 8 * 1024,
        max_body_bytes: 0,
    };

    /// Checks each field's range.
    pub fn validate(&self) -> Result<(), LimitsError> {
        fn check<T: PartialOrd + fmt::Debug>(
            field: &'static str,
            value: T,
            min: T,
            max: T,
            range: &'static str,
        ) -> Result<(), LimitsError> {
            if value < min || value > max {
                return Err(LimitsError::OutOfRange {
                    field,
                    value: format!("{value:?}"),
                    range,
                });
            }
            Ok(())
        }
        check("connections", self.max_connections, 1, 100_000, "1-100000")?;
        let (s, m) = (Duration::from_millis(100), Duration::from_secs(3600));
        check("head-timeout", self.head_timeout, s, m, "100ms-3600s")?;
        check("idle-timeout", self.idle_timeout, s, m, "100ms-3600s")?;
        check("request-timeout", self.request_timeout, s, m, "100ms-3600s")?;
        // hyper refuses a read buffer under 8 KiB.
        check(
            "head-bytes",
            self.max_head_bytes,
            8192,
            1 << 20,
            "8192-1048576",
        )?;
        check(
            "body-bytes",
            self.max_body_bytes,
            0,
            1 << 30,
            "0-1073741824",
        )?;
        Ok(())
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::SMALL
    }
}

/// A duration in oooi's one syntax ([`oooi_process::duration`]).
fn duration(field: &'static str, s: &str) -> Result<Duration, LimitsError> {
    oooi_process::duration::parse(s).map_err(|_| LimitsError::OutOfRange {
        field,
        value: s.to_string(),
        range: "a duration such as 500ms or 5s",
    })
}

/// `key=value,key=value` over [`Limits::SMALL`], e.g.
/// `connections=32,head-timeout=2s,idle-timeout=10s,request-timeout=5s,head-bytes=8192,body-bytes=0`.
/// Unknown keys and values out of range are refused, naming the key.
impl FromStr for Limits {
    type Err = LimitsError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut limits = Limits::SMALL;
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| LimitsError::Malformed(item.to_string()))?;
            let number = |field: &'static str| {
                value.parse::<usize>().map_err(|_| LimitsError::OutOfRange {
                    field,
                    value: value.to_string(),
                    range: "a whole number",
                })
            };
            match key.trim() {
                "connections" => limits.max_connections = number("connections")?,
                "head-timeout" => limits.head_timeout = duration("head-timeout", value)?,
                "idle-timeout" => limits.idle_timeout = duration("idle-timeout", value)?,
                "request-timeout" => limits.request_timeout = duration("request-timeout", value)?,
                "head-bytes" => limits.max_head_bytes = number("head-bytes")?,
                "body-bytes" => limits.max_body_bytes = number("body-bytes")?,
                _ => return Err(LimitsError::Malformed(item.to_string())),
            }
        }
        limits.validate()?;
        Ok(limits)
    }
}

/// Serves `router` on `listener` within `limits`, until the task is
/// dropped. Handlers find the client's address as axum's
/// `ConnectInfo<SocketAddr>` extension. Invalid limits are refused before
/// anything is accepted.
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    limits: Limits,
) -> Result<Infallible, LimitsError> {
    limits.validate()?;
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let local = listener.local_addr().ok();
    let refused = RateLimitedLog::default();
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors or a connection aborted before it was
                // taken: transient; pause so a full table is not spun on.
                tracing::warn!(?local, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            refused.note(|n| {
                tracing::warn!(
                    ?local,
                    refused = n,
                    max_connections = limits.max_connections,
                    "connection limit reached: connections closed at accept"
                )
            });
            drop(stream);
            continue;
        };
        let router = router.clone();
        tokio::spawn(async move {
            connection(stream, peer, router, limits).await;
            drop(permit);
        });
    }
}

/// Counts events and logs them at most once every 10 s.
#[derive(Default)]
struct RateLimitedLog(Mutex<(Option<Instant>, u64)>);

impl RateLimitedLog {
    fn note(&self, log: impl FnOnce(u64)) {
        let Ok(mut g) = self.0.lock() else { return };
        g.1 += 1;
        if g.0.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
            let n = std::mem::take(&mut g.1);
            g.0 = Some(Instant::now());
            log(n);
        }
    }
}

async fn connection(stream: TcpStream, peer: SocketAddr, router: axum::Router, limits: Limits) {
    let epoch = Instant::now();
    let last = Arc::new(AtomicU64::new(0));
    let io = TokioIo::new(Watched {
        inner: stream,
        last: Arc::clone(&last),
        epoch,
    });
    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        let req = req.map(|b| axum::body::Body::new(Limited::new(b, limits.max_body_bytes)));
        let router = router.clone();
        async move {
            match tokio::time::timeout(limits.request_timeout, router.oneshot(req)).await {
                Ok(Ok(response)) => Ok::<_, Infallible>(response),
                Ok(Err(never)) => match never {},
                Err(_) => Ok(timed_out()),
            }
        }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.head_timeout)
        .max_buf_size(limits.max_head_bytes)
        .serve_connection(io, service);
    tokio::pin!(conn);
    loop {
        let quiet = epoch
            .elapsed()
            .saturating_sub(Duration::from_millis(last.load(Ordering::Relaxed)));
        if quiet >= limits.idle_timeout {
            tracing::debug!(%peer, "closing an idle connection");
            return;
        }
        tokio::select! {
            done = conn.as_mut() => {
                if let Err(e) = done {
                    tracing::debug!(%peer, error = %e, "connection ended");
                }
                return;
            }
            () = tokio::time::sleep(limits.idle_timeout - quiet) => {}
        }
    }
}

fn timed_out() -> Response<axum::body::Body> {
    let mut r = Response::new(axum::body::Body::from("request timeout\n"));
    *r.status_mut() = StatusCode::REQUEST_TIMEOUT;
    r.headers_mut().insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("close"),
    );
    r
}

/// A stream that notes when it last moved a byte (milliseconds since
/// `epoch`), for the idle timeout.
struct Watched {
    inner: TcpStream,
    last: Arc<AtomicU64>,
    epoch: Instant,
}

impl Watched {
    fn touch(&self) {
        self.last
            .store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.touch();
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_preset_limits_are_in_range() {
        Limits::SMALL.validate().unwrap();
        Limits::HEALTH.validate().unwrap();
    }

    #[test]
    fn limits_parse_over_the_small_defaults() {
        assert_eq!("".parse::<Limits>().unwrap(), Limits::SMALL);
        let l: Limits =
            "connections=8, head-timeout=500ms,idle-timeout=2s,request-timeout=3s,head-bytes=8192,body-bytes=0"
                .parse()
                .unwrap();
        assert_eq!(
            l,
            Limits {
                max_connections: 8,
                head_timeout: Duration::from_millis(500),
                idle_timeout: Duration::from_secs(2),
                request_timeout: Duration::from_secs(3),
                max_head_bytes: 8192,
                max_body_bytes: 0,
            }
        );
        // Timeouts take oooi's one duration syntax.
        let l: Limits = "idle-timeout=1m30s,head-timeout=1.5s".parse().unwrap();
        assert_eq!(l.idle_timeout, Duration::from_secs(90));
        assert_eq!(l.head_timeout, Duration::from_millis(1500));
    }

    #[test]
    fn bad_limits_name_the_key() {
        for (text, key) in [
            ("connections=0", "connections"),
            ("connections=many", "connections"),
            ("head-timeout=5", "head-timeout"),
            ("head-timeout=5d", "head-timeout"),
            ("head-timeout=30m1h", "head-timeout"),
            ("idle-timeout=10ms", "idle-timeout"),
            ("request-timeout=2h", "request-timeout"),
            ("head-bytes=1024", "head-bytes"),
            ("body-bytes=-1", "body-bytes"),
            ("bodybytes=1", "bodybytes"),
            ("connections", "connections"),
        ] {
            let e = text.parse::<Limits>().unwrap_err().to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
    }
}
