//! Sockets and dispatch.
//!
//! UDP: one lean loop per listener address. It answers static names from the
//! precomputed [`crate::fast`] tables in place (no task, no allocation per
//! query) and hands everything else to the hickory [`Handler`] in a task of
//! its own, bounded by [`MAX_SLOW_IN_FLIGHT`]. hickory's own `Server` spawns a
//! task per UDP request and sends every reply through a channel, which halved
//! the rate of static answers in the benchmark; TCP still goes through it.
//!
//! The listener set follows the config: on reload, new addresses are bound and
//! removed ones are closed ([`Listeners::apply`]).

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use hickory_proto::op::{Header, HeaderCounts, Message, ResponseCode};
use hickory_proto::rr::Record;
use hickory_proto::serialize::binary::BinEncoder;
use hickory_server::net::NetError;
use hickory_server::net::runtime::TokioTime;
use hickory_server::net::xfer::Protocol;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponse;
use tokio::net::UdpSocket;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::fast::{self, Fast, MAX_REPLY};
use crate::forward::Forwarder;
use crate::handler::{Handler, SharedState, State};

/// UDP queries for the handler (forwarded names, odd packets) that may be in
/// progress at once; more are dropped, and clients retry.
pub const MAX_SLOW_IN_FLIGHT: usize = 4096;

/// The config as loaded and the addresses whose health check fails: what
/// the answered state is derived from.
struct Source {
    config: Arc<Config>,
    down: BTreeSet<IpAddr>,
}

/// Everything that answers queries: the live state and the forwarder.
pub struct Engine {
    state: SharedState,
    source: Mutex<Source>,
    forwarder: Arc<Forwarder>,
    slow: Arc<Semaphore>,
}

impl Engine {
    /// An engine serving `config`.
    pub fn new(config: Config) -> Self {
        crate::metrics::prime(&config);
        let forwarder = Arc::new(Forwarder::default());
        forwarder.prime_metrics(&config.upstreams.servers);
        Engine {
            state: Arc::new(ArcSwap::from_pointee(State::new(config.clone()))),
            source: Mutex::new(Source {
                config: Arc::new(config),
                down: BTreeSet::new(),
            }),
            forwarder,
            slow: Arc::new(Semaphore::new(MAX_SLOW_IN_FLIGHT)),
        }
    }

    /// Puts `config` in force for every following query.
    pub fn replace(&self, config: Config) {
        crate::metrics::prime(&config);
        self.forwarder.prime_metrics(&config.upstreams.servers);
        let Ok(mut source) = self.source.lock() else {
            return;
        };
        source.config = Arc::new(config);
        self.rebuild(&source);
    }

    /// Leaves the `down` addresses out of answers from now on (see
    /// [`crate::health::answered`]); the others are answered again.
    pub fn set_down(&self, down: BTreeSet<IpAddr>) {
        let Ok(mut source) = self.source.lock() else {
            return;
        };
        if source.down == down {
            return;
        }
        source.down = down;
        self.rebuild(&source);
    }

    /// Derives the answered state: the config without the down addresses,
    /// and its fast-path tables.
    fn rebuild(&self, source: &Source) {
        let answered = crate::health::answered(&source.config, &source.down);
        self.state.store(Arc::new(State::new(answered)));
    }

    /// The config in force, as answered (without the addresses that fail
    /// their health check).
    pub fn config(&self) -> arc_swap::Guard<Arc<State>> {
        self.state.load()
    }

    /// The config as loaded.
    pub fn configured(&self) -> Arc<Config> {
        match self.source.lock() {
            Ok(s) => s.config.clone(),
            Err(_) => Arc::new(self.state.load().config.clone()),
        }
    }

    /// The hickory handler for queries arriving on `local`.
    pub fn handler(&self, local: SocketAddr) -> Handler {
        Handler::new(local, self.state.clone(), self.forwarder.clone())
    }

    /// Tries the fast path for a UDP `query` that arrived on `local` from
    /// `client`, writing the reply into `out`.
    pub fn fast(
        &self,
        local: SocketAddr,
        client: IpAddr,
        query: &[u8],
        out: &mut [u8; MAX_REPLY],
    ) -> Fast {
        if !fast::answerable(query) {
            return Fast::Drop;
        }
        let state = self.state.load();
        match crate::views::select_index(&state.config, local, client) {
            Some(view) => {
                let id = u16::from_be_bytes([query[0], query[1]]);
                let rot = crate::spread::rotation(id, client);
                state.fast.respond(view, query, out, &self.forwarder, rot)
            }
            None => Fast::Slow,
        }
    }

    /// Answers `query` through the hickory handler, as hickory's server
    /// would: nothing for packets shorter than a header or for responses,
    /// FORMERR for undecodable ones.
    pub async fn slow(
        &self,
        local: SocketAddr,
        src: SocketAddr,
        query: Vec<u8>,
        protocol: Protocol,
    ) -> Option<Vec<u8>> {
        if !fast::answerable(&query) {
            return None;
        }
        let mut head = [0u8; 12];
        head.copy_from_slice(&query[..12]);
        match Request::from_bytes(query, src, protocol) {
            Ok(request) => {
                let capture = Capture::new(protocol);
                self.handler(local)
                    .handle_request::<_, TokioTime>(&request, capture.clone())
                    .await;
                capture.take()
            }
            Err(e) => {
                tracing::debug!(%src, error = %e, "undecodable query");
                let state = self.state.load();
                let view = crate::views::select(&state.config, local, src.ip())
                    .map_or("none", |v| v.name.as_str());
                crate::metrics::count_query(view, "unknown", ResponseCode::FormErr);
                Some(formerr(&head))
            }
        }
    }

    /// The whole UDP request path: the fast path, else the handler.
    pub async fn respond_udp(
        &self,
        local: SocketAddr,
        src: SocketAddr,
        query: &[u8],
    ) -> Option<Vec<u8>> {
        let mut out = [0u8; MAX_REPLY];
        match self.fast(local, src.ip(), query, &mut out) {
            Fast::Reply(n) => Some(out[..n].to_vec()),
            Fast::Drop => None,
            Fast::Slow => self.slow(local, src, query.to_vec(), Protocol::Udp).await,
        }
    }
}

/// FORMERR for a query whose header is readable but the rest is not: the
/// header echoed (id, opcode, RD, CD), every count zero.
pub fn formerr(head: &[u8; 12]) -> Vec<u8> {
    let mut r = vec![0u8; 12];
    r[0] = head[0];
    r[1] = head[1];
    r[2] = 0x80 | (head[2] & 0x79);
    r[3] = (head[3] & 0x10) | 1;
    r
}

/// The truncated form of a reply too large for the client's UDP buffer:
/// the header with TC set, the question and the OPT record, no records
/// (RFC 2181 section 9: the client retries over TCP).
pub fn truncated(full: &[u8]) -> Result<(Vec<u8>, Header), NetError> {
    let mut m = Message::from_vec(full)?;
    m.answers.clear();
    m.authorities.clear();
    m.additionals.clear();
    m.metadata.truncation = true;
    let bytes = m.to_vec()?;
    let header = Header {
        metadata: m.metadata,
        counts: HeaderCounts {
            queries: u16::try_from(m.queries.len()).unwrap_or(u16::MAX),
            answers: 0,
            authorities: 0,
            additionals: u16::from(m.edns.is_some()),
        },
    };
    Ok((bytes, header))
}

/// A `ResponseHandler` that encodes the response, as hickory's does (the
/// client's UDP buffer, or 64 KiB over TCP), and keeps the bytes.
#[derive(Clone)]
struct Capture {
    protocol: Protocol,
    out: Arc<Mutex<Option<Vec<u8>>>>,
}

impl Capture {
    fn new(protocol: Protocol) -> Self {
        Capture {
            protocol,
            out: Arc::new(Mutex::new(None)),
        }
    }

    fn take(&self) -> Option<Vec<u8>> {
        self.out.lock().ok().and_then(|mut o| o.take())
    }
}

#[async_trait::async_trait]
impl ResponseHandler for Capture {
    async fn send_response<'a>(
        &mut self,
        response: MessageResponse<
            '_,
            'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
        >,
    ) -> Result<ResponseInfo, NetError> {
        let max = match self.protocol {
            Protocol::Udp => response.edns().map_or(512, |e| e.max_payload()),
            _ => u16::MAX,
        };
        let mut bytes = Vec::with_capacity(512);
        let mut encoder = BinEncoder::new(&mut bytes);
        let mut info = response.destructive_emit(&mut encoder)?;
        if bytes.len() > usize::from(max) {
            // hickory's own size limit leaves the bytes of the record that
            // did not fit behind the last one; the answer is rebuilt here.
            let (short, header) = truncated(&bytes)?;
            bytes = short;
            info = ResponseInfo::from(header);
        }
        if let Ok(mut o) = self.out.lock() {
            *o = Some(bytes);
        }
        Ok(info)
    }
}

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
                let Ok(permit) = engine.slow.clone().try_acquire_owned() else {
                    crate::metrics::metrics().dropped_busy.inc();
                    tracing::debug!(%src, "too many queries in progress, dropping");
                    continue;
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

/// Serves the engine's config: binds every listener (failing if one cannot
/// be bound), serves `/metrics` and `/healthz` on `metrics` or else the
/// config's `http` address, and re-applies the listener set each time
/// `changed` fires (after a reload).
pub async fn serve(
    engine: Arc<Engine>,
    mut changed: tokio::sync::watch::Receiver<()>,
    metrics: Option<SocketAddr>,
) -> anyhow::Result<()> {
    let (addrs, http) = {
        let s = engine.config();
        (s.config.listeners(), metrics.or(s.config.http))
    };
    if let Some(http) = http {
        let listener = tokio::net::TcpListener::bind(http).await?;
        tokio::spawn(async move {
            if let Err(e) = crate::metrics::serve_http(listener).await {
                tracing::error!(error = %e, "metrics endpoint failed");
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
