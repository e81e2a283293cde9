//! Sockets and dispatch.
//!
//! UDP: one lean loop per listener address. It answers static names from the
//! precomputed [`crate::fast`] tables in place (no task, no allocation per
//! query) and hands everything else to the hickory [`Handler`] in a task of
//! its own, bounded by [`crate::engine::MAX_SLOW_IN_FLIGHT`] in total and
//! [`crate::engine::MAX_SLOW_PER_CLIENT`] per client. hickory's own `Server` spawns a
//! task per UDP request and sends every reply through a channel, which halved
//! the rate of static answers in the benchmark; TCP still goes through it.
//!
//! The listener set follows the config: on reload, new addresses are bound and
//! removed ones are closed ([`Listeners::apply`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hickory_server::net::xfer::Protocol;
use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

use crate::engine::Engine;
use crate::fast::{Fast, MAX_REPLY};
use crate::handler::Handler;

fn unrecoverable(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NotConnected | std::io::ErrorKind::ConnectionAborted
    )
}

async fn udp_loop(sock: Arc<UdpSocket>, local: SocketAddr, engine: Arc<Engine>) {
    let mut buf = vec![0u8; 65_535];
    let mut out = [0u8; MAX_REPLY];
    loop {
        let (n, src) = match sock.recv_from(&mut buf).await {
            Ok(r) => r,
            Err(e) if unrecoverable(&e) => {
                tracing::error!(%local, error = %e, "UDP socket closed");
                return;
            }
            Err(e) => {
                tracing::debug!(%local, error = %e, "UDP receive failed");
                continue;
            }
        };
        // Never answer a source that cannot receive (spoofed or broken).
        if src.port() == 0 || src.ip().is_unspecified() {
            continue;
        }
        match engine.fast(local, src.ip(), &buf[..n], &mut out) {
            Fast::Reply(len) => {
                if let Err(e) = sock.send_to(&out[..len], src).await {
                    tracing::debug!(%src, error = %e, "UDP send failed");
                }
            }
            Fast::Drop => {}
            Fast::Slow => {
                let permit = match engine.try_slow_permit(src.ip()) {
                    Ok(p) => p,
                    Err(crate::in_flight::Refused::Full) => {
                        crate::metrics::metrics().dropped_busy.inc();
                        tracing::debug!(%src, "too many queries in progress, dropping");
                        continue;
                    }
                    Err(crate::in_flight::Refused::Client) => {
                        crate::metrics::metrics().client_limited.inc();
                        tracing::debug!(%src, "this client has its share of queries in progress, dropping");
                        continue;
                    }
                };
                let query = buf[..n].to_vec();
                let (sock, engine) = (sock.clone(), engine.clone());
                tokio::spawn(async move {
                    if let Some(reply) = engine.slow(local, src, query, Protocol::Udp).await
                        && let Err(e) = sock.send_to(&reply, src).await
                    {
                        tracing::debug!(%src, error = %e, "UDP send failed");
                    }
                    drop(permit);
                });
            }
        }
    }
}

/// A non-blocking socket of type `ty` bound to `addr` (and listening, for
/// TCP). With `freebind` the bind succeeds while `addr` is on no interface
/// (IP_FREEBIND, no capability needed), and the socket receives for it as
/// soon as it is added.
fn bind_socket<S: From<socket2::Socket>>(
    addr: SocketAddr,
    ty: socket2::Type,
    freebind: bool,
) -> std::io::Result<S> {
    let domain = socket2::Domain::for_address(addr);
    let sock = socket2::Socket::new(domain, ty, None)?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    if ty == socket2::Type::STREAM {
        // As tokio's TcpListener::bind: a restart binds while old
        // connections are in TIME_WAIT.
        sock.set_reuse_address(true)?;
    }
    if freebind {
        if addr.is_ipv4() {
            sock.set_freebind_v4(true)?;
        } else {
            sock.set_freebind_v6(true)?;
        }
    }
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    if ty == socket2::Type::STREAM {
        sock.listen(1024)?;
    }
    Ok(S::from(sock))
}

struct Listener {
    udp: JoinHandle<()>,
    tcp: hickory_server::Server<Handler>,
}

/// The open listeners (UDP and TCP per address), kept equal to the config.
pub struct Listeners {
    engine: Arc<Engine>,
    open: HashMap<SocketAddr, Listener>,
}

impl Listeners {
    /// No listener yet.
    pub fn new(engine: Arc<Engine>) -> Self {
        Listeners {
            engine,
            open: HashMap::new(),
        }
    }

    /// Addresses listened on.
    pub fn addresses(&self) -> Vec<SocketAddr> {
        self.open.keys().copied().collect()
    }

    async fn bind(&self, addr: SocketAddr, freebind: bool) -> std::io::Result<Listener> {
        let udp = Arc::new(UdpSocket::from_std(bind_socket(
            addr,
            socket2::Type::DGRAM,
            freebind,
        )?)?);
        let tcp =
            tokio::net::TcpListener::from_std(bind_socket(addr, socket2::Type::STREAM, freebind)?)?;
        let mut server = hickory_server::Server::new(self.engine.handler(addr));
        server.register_listener(tcp, Duration::from_secs(10), 64);
        let udp = tokio::spawn(udp_loop(udp, addr, self.engine.clone()));
        Ok(Listener { udp, tcp: server })
    }

    /// Closes listeners not in `wanted` and opens the missing ones, each
    /// with IP_FREEBIND when its flag is set. Returns the addresses that
    /// could not be bound, with the reason.
    pub async fn apply(
        &mut self,
        wanted: &[(SocketAddr, bool)],
    ) -> Vec<(SocketAddr, std::io::Error)> {
        let gone: Vec<SocketAddr> = self
            .open
            .keys()
            .filter(|a| !wanted.iter().any(|(w, _)| w == *a))
            .copied()
            .collect();
        for addr in gone {
            if let Some(mut l) = self.open.remove(&addr) {
                l.udp.abort();
                // Let open TCP connections finish their exchange, off this path.
                tokio::spawn(async move {
                    let _ =
                        tokio::time::timeout(Duration::from_secs(10), l.tcp.shutdown_gracefully())
                            .await;
                });
                tracing::info!(%addr, "stopped listening");
            }
        }
        let mut failed = Vec::new();
        for &(addr, freebind) in wanted {
            if self.open.contains_key(&addr) {
                continue;
            }
            match self.bind(addr, freebind).await {
                Ok(l) => {
                    tracing::info!(%addr, freebind, "listening on UDP and TCP");
                    self.open.insert(addr, l);
                }
                Err(e) => {
                    crate::metrics::metrics()
                        .listen_failures
                        .get_or_create(&crate::metrics::ListenLabels {
                            address: addr.to_string(),
                        })
                        .inc();
                    tracing::error!(%addr, error = %e, "cannot listen");
                    failed.push((addr, e));
                }
            }
        }
        failed
    }
}

/// Where the HTTP endpoints listen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HttpAddrs {
    /// `/metrics` and `/healthz`; unset: the config's `http`, if any.
    pub metrics: Option<SocketAddr>,
    /// `/healthz` alone, on a listener of its own (its own connection
    /// budget: a flood of the metrics port leaves the probes alone).
    pub health: Option<SocketAddr>,
}

/// Serves the engine's config: binds every listener (failing if one cannot
/// be bound), serves `/metrics` and `/healthz` on `http.metrics` or else
/// the config's `http` address, `/healthz` on `http.health`, and re-applies
/// the listener set each time `changed` fires (after a reload).
pub async fn serve(
    engine: Arc<Engine>,
    mut changed: tokio::sync::watch::Receiver<()>,
    http: HttpAddrs,
) -> anyhow::Result<()> {
    let (addrs, metrics) = {
        let s = engine.config();
        (s.config.listeners(), http.metrics.or(s.config.http))
    };
    if let Some(addr) = metrics {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| anyhow::anyhow!("metrics endpoint {addr}: {e}"))?;
        tokio::spawn(async move {
            if let Err(e) = crate::metrics::serve_http(listener).await {
                tracing::error!(error = %e, "metrics endpoint failed");
            }
        });
    }
    if let Some(addr) = http.health {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| anyhow::anyhow!("health endpoint {addr}: {e}"))?;
        tokio::spawn(async move {
            if let Err(e) = crate::metrics::serve_health(listener).await {
                tracing::error!(error = %e, "health endpoint failed");
            }
        });
    }
    let mut listeners = Listeners::new(engine.clone());
    if let Some((addr, e)) = listeners.apply(&addrs).await.into_iter().next() {
        anyhow::bail!("cannot listen on {addr}: {e}");
    }
    crate::metrics::set_health(crate::metrics::Health::Ready);
    let _checks = crate::health_checks::spawn(engine.clone());
    while changed.changed().await.is_ok() {
        let addrs = engine.config().config.listeners();
        listeners.apply(&addrs).await;
    }
    // The reload side is gone: keep serving what is open.
    std::future::pending::<()>().await;
    Ok(())
}
