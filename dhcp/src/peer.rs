//! The pair's I/O: the authenticated HTTP API each server offers the other
//! on the pod network, the heartbeat that moves this server between the
//! [`PairState`]s, and the replicator that sends every committed lease to
//! the other server. The rules (who answers, which half) are in
//! [`crate::pair`].
//!
//! ## Ordering and guarantees
//! 1. A batch of decisions is written to the local log. From there two
//!    things run at once:
//!    - the local `fdatasync` (group commit, [`crate::commit`]);
//!    - replication ([`crate::replication`]): the batch's records (the
//!      exact log records) go to the other server with every other record
//!      written since the last request left, in one POST on a kept-alive
//!      connection (up to [`REPLICATION_IN_FLIGHT`] requests at once). The
//!      other server merges a stream's requests in the order they were
//!      decided, writes them to its own log and answers only after an
//!      `fdatasync` covering them (its group commit covers its own leases
//!      and the replicated ones together).
//! 2. A batch's ACKs leave when BOTH are done: a local sync covering the
//!    batch has finished and the other server has acknowledged a request
//!    covering it.
//!
//! So while both servers are up, every ACKed lease is durable on both: a
//! `kill -9` (or the loss of a node) of either loses no ACKed lease, and the
//! survivor, which takes over the whole pool, never hands an ACKed address
//! to another client. A lease can be durable on the other server before it
//! is here (or without ever being here, if this server dies before its
//! sync): its ACK was never sent, the client retries, and the lease is
//! merged back when this server returns and pulls the other's leases, as
//! if the ACK had been lost on the way. When the other server does not
//! answer, ACKs wait (retrying) until it counts as down (`down_after_ms`, a
//! few heartbeats); from then on ACKs leave after the local sync only and
//! the other server gets those leases when it returns: it answers no client
//! until it has pulled this server's leases (and pushed its own), and only
//! then does the pair go back to load balancing. A network partition
//! between two live servers makes both take over; each then allocates from
//! its own half first, so they collide only after one half is exhausted —
//! the limit of any pair without a third witness.

//! ## API (bearer token, `Authorization: Bearer <token>`)
//! - `GET /pair/v1/state` → `{"role": "primary", "state": "load-balancing"}`;
//! - `POST /pair/v1/leases` with log records (27 bytes each, see
//!   [`crate::lease_store`]) → 204 once they are durable here. With
//!   `X-Oooi-Stream: <id>` and `X-Oooi-Request: <n>` (replication) they are
//!   merged in `n` order within the stream; 409 when the request belongs to
//!   a replaced stream or an earlier one did not arrive within a second;
//! - `GET /pair/v1/leases` → every lease this server holds, as records.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::commit::Seq;
use crate::config::{Peer, Role};
use crate::lease_store::{RECORD_LEN, decode_records};
use crate::metrics::metrics;
use crate::pair::PairState;
use crate::replication::{Admit, Order, Stream, Window};

/// Path prefix of the pair API.
pub const API_PREFIX: &str = "/pair/v1";
/// Most replication requests in flight at once (see [`crate::replication`]).
pub const REPLICATION_IN_FLIGHT: usize = 2;
/// How long a replicated request waits for the earlier ones of its stream.
const ORDER_WAIT: Duration = Duration::from_secs(1);
/// Request headers of replication.
const STREAM_HEADER: &str = "x-oooi-stream";
const REQUEST_HEADER: &str = "x-oooi-request";

/// A message for the decision loop, which owns the lease table.
pub enum Inbox {
    /// Lease records from the other server: merge, make durable, then send
    /// on `done`.
    Records {
        /// Records in the log layout (checksums verified).
        records: Vec<u8>,
        /// Signalled once they are durable here.
        done: Sender<()>,
    },
    /// Every lease this server holds, as records, on `reply`.
    Snapshot {
        /// Where the records go.
        reply: Sender<Vec<u8>>,
    },
}

/// State shared by the decision loop, the heartbeat, the replicator and
/// the API.
pub struct PairShared {
    /// The settings.
    pub peer: Peer,
    state: AtomicU8,
    /// When the other server last answered a heartbeat.
    last_ok: Mutex<Option<Instant>>,
    /// What it said its state was.
    peer_state: Mutex<Option<PairState>>,
    inbox: Mutex<Sender<Inbox>>,
    wake: UnixStream,
    /// The order in which replicated requests are merged.
    order: Mutex<Order>,
    order_moved: Condvar,
}

fn state_from(code: u8) -> PairState {
    match code {
        1 => PairState::LoadBalancing,
        2 => PairState::PartnerDown,
        _ => PairState::Syncing,
    }
}

impl PairShared {
    /// This server's state.
    pub fn state(&self) -> PairState {
        state_from(self.state.load(Ordering::SeqCst))
    }

    fn set_state(&self, s: PairState) {
        let old = state_from(self.state.swap(s.code() as u8, Ordering::SeqCst));
        if old != s {
            metrics().pair_state.set(s.code());
            tracing::warn!(from = old.as_str(), to = s.as_str(), role = ?self.peer.role, "pair state changed");
            self.wake();
        }
    }

    /// Whether the other server answered within `down_after_ms`.
    pub fn peer_reachable(&self) -> bool {
        let limit = Duration::from_millis(u64::from(self.peer.down_after_ms));
        self.last_ok
            .lock()
            .ok()
            .and_then(|t| *t)
            .is_some_and(|t| t.elapsed() <= limit)
    }

    fn send(&self, m: Inbox) -> bool {
        let sent = self
            .inbox
            .lock()
            .map(|tx| tx.send(m).is_ok())
            .unwrap_or(false);
        self.wake();
        sent
    }

    fn wake(&self) {
        let _ = (&self.wake).write(&[1]);
    }

    /// Merges `records` through the decision loop and waits until they are
    /// durable here.
    pub fn store_records(&self, records: Vec<u8>, timeout: Duration) -> bool {
        let (tx, rx) = std::sync::mpsc::channel();
        self.send(Inbox::Records { records, done: tx }) && rx.recv_timeout(timeout).is_ok()
    }

    /// Merges request `n` of replication stream `stream` in its order
    /// (see [`crate::replication`]) and waits until it is durable here.
    /// None: out of order (a replaced stream, or an earlier request did not
    /// arrive in time).
    pub fn store_in_order(
        &self,
        stream: Stream,
        n: u64,
        records: Vec<u8>,
        timeout: Duration,
    ) -> Option<bool> {
        let (tx, rx) = std::sync::mpsc::channel();
        let deadline = Instant::now() + ORDER_WAIT;
        let mut order = self.order.lock().ok()?;
        let sent = loop {
            match order.admit(stream, n) {
                Admit::Apply => {
                    // Queued under the lock: the decision loop merges in
                    // queue order.
                    let sent = self.send(Inbox::Records { records, done: tx });
                    drop(order);
                    self.order_moved.notify_all();
                    break sent;
                }
                Admit::Repeat => {
                    drop(order);
                    break self.send(Inbox::Records { records, done: tx });
                }
                Admit::Stale => return None,
                Admit::Wait => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    order = self.order_moved.wait_timeout(order, left).ok()?.0;
                }
            }
        };
        Some(sent && rx.recv_timeout(timeout).is_ok())
    }

    /// Every lease held here, as records.
    pub fn snapshot(&self, timeout: Duration) -> Option<Vec<u8>> {
        let (tx, rx) = std::sync::mpsc::channel();
        if !self.send(Inbox::Snapshot { reply: tx }) {
            return None;
        }
        rx.recv_timeout(timeout).ok()
    }

    /// Whether `header` (an `Authorization` value) carries the token.
    pub fn authorized(&self, header: Option<&str>) -> bool {
        let Some(h) = header else { return false };
        let Some((scheme, token)) = h.trim().split_once(' ') else {
            return false;
        };
        scheme.eq_ignore_ascii_case("bearer")
            && constant_time_eq(token.trim().as_bytes(), self.peer.token.as_bytes())
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The pair of this server: shared state plus the decision loop's end of
/// the inbox.
pub struct Pair {
    /// Shared with the threads and the API.
    pub shared: Arc<PairShared>,
    /// Messages for the decision loop.
    pub inbox: Receiver<Inbox>,
    /// Readable when the inbox has messages (or the state changed).
    pub wake: UnixStream,
}

impl Pair {
    /// A pair in state [`PairState::Syncing`].
    pub fn new(peer: Peer) -> std::io::Result<Pair> {
        let (tx, rx) = std::sync::mpsc::channel();
        let (a, b) = UnixStream::pair()?;
        a.set_nonblocking(true)?;
        b.set_nonblocking(true)?;
        metrics().pair_state.set(PairState::Syncing.code());
        Ok(Pair {
            shared: Arc::new(PairShared {
                peer,
                state: AtomicU8::new(PairState::Syncing.code() as u8),
                last_ok: Mutex::new(None),
                peer_state: Mutex::new(None),
                inbox: Mutex::new(tx),
                wake: a,
                order: Mutex::new(Order::default()),
                order_moved: Condvar::new(),
            }),
            inbox: rx,
            wake: b,
        })
    }
}

/// A minimal HTTP/1.1 client for the pair API (one connection per call).
pub struct Client {
    api: String,
    token: String,
    timeout: Duration,
}

impl Client {
    /// A client of `api` (`host:port`) presenting `token`.
    pub fn new(api: &str, token: &str, timeout: Duration) -> Client {
        Client {
            api: api.to_string(),
            token: token.to_string(),
            timeout,
        }
    }

    /// One request; the status and body.
    pub fn call(&self, method: &str, path: &str, body: &[u8]) -> std::io::Result<(u16, Vec<u8>)> {
        let addr: SocketAddr =
            self.api.to_socket_addrs()?.next().ok_or_else(|| {
                std::io::Error::other(format!("{} resolves to nothing", self.api))
            })?;
        let mut s = TcpStream::connect_timeout(&addr, self.timeout)?;
        s.set_read_timeout(Some(self.timeout))?;
        s.set_write_timeout(Some(self.timeout))?;
        s.set_nodelay(true)?;
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.api,
            self.token,
            body.len()
        );
        let mut req = head.into_bytes();
        req.extend_from_slice(body);
        s.write_all(&req)?;
        let mut out = Vec::new();
        s.read_to_end(&mut out)?;
        let split = out
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or_else(|| std::io::Error::other("no HTTP header end"))?;
        let head = String::from_utf8_lossy(&out[..split]).to_string();
        let status: u16 = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("bad status line: {head}")))?;
        let mut body = out[split + 4..].to_vec();
        if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            body = dechunk(&body).ok_or_else(|| std::io::Error::other("bad chunked body"))?;
        }
        Ok((status, body))
    }
}

fn dechunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n")?;
        let size = usize::from_str_radix(
            std::str::from_utf8(&b[..eol])
                .ok()?
                .split(';')
                .next()?
                .trim(),
            16,
        )
        .ok()?;
        b = &b[eol + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(b.get(..size)?);
        b = b.get(size + 2..)?;
    }
}

/// A kept-alive HTTP/1.1 connection to the pair API (replication): one
/// request at a time, reconnecting when the other end closed it.
struct Conn {
    api: String,
    token: String,
    timeout: Duration,
    stream: Option<TcpStream>,
}

impl Conn {
    fn new(api: &str, token: &str, timeout: Duration) -> Conn {
        Conn {
            api: api.to_string(),
            token: token.to_string(),
            timeout,
            stream: None,
        }
    }

    fn connect(&self) -> std::io::Result<TcpStream> {
        let addr: SocketAddr =
            self.api.to_socket_addrs()?.next().ok_or_else(|| {
                std::io::Error::other(format!("{} resolves to nothing", self.api))
            })?;
        let s = TcpStream::connect_timeout(&addr, self.timeout)?;
        s.set_read_timeout(Some(self.timeout))?;
        s.set_write_timeout(Some(self.timeout))?;
        s.set_nodelay(true)?;
        Ok(s)
    }

    /// POSTs `body` to `path` with `extra` header lines; the status. A
    /// connection that was reused and failed before any answer (the other
    /// end closed it while idle) is replaced once.
    fn post(&mut self, path: &str, extra: &str, body: &[u8]) -> std::io::Result<u16> {
        let mut req = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n{extra}\r\n",
            self.api,
            self.token,
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(body);
        let reused = self.stream.is_some();
        match self.exchange(&req) {
            Err(_) if reused => self.exchange(&req),
            r => r,
        }
    }

    fn exchange(&mut self, req: &[u8]) -> std::io::Result<u16> {
        let mut s = match self.stream.take() {
            Some(s) => s,
            None => self.connect()?,
        };
        s.write_all(req)?;
        let (status, keep) = read_response(&mut s)?;
        if keep {
            self.stream = Some(s);
        }
        Ok(status)
    }
}

/// Reads one response with a `Content-Length` body (discarded); the status
/// and whether the connection may be reused.
fn read_response(s: &mut TcpStream) -> std::io::Result<(u16, bool)> {
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 512];
    let end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other("bad status line"))?;
    let length = head.lines().find_map(|l| {
        l.strip_prefix("content-length:")
            .and_then(|v| v.trim().parse::<usize>().ok())
    });
    let mut left = match length {
        Some(n) => n.saturating_sub(buf.len() - end),
        // 204 and 304 have no body; anything else without a length cannot
        // be delimited on a kept connection.
        None if status == 204 || status == 304 => 0,
        None => return Ok((status, false)),
    };
    while left > 0 {
        let n = s.read(&mut chunk[..left.min(512)])?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        left -= n;
    }
    Ok((status, !head.contains("connection: close")))
}

/// The other server's state, as its API reports it.
fn peer_state(c: &Client) -> Option<PairState> {
    let (status, body) = c.call("GET", &format!("{API_PREFIX}/state"), &[]).ok()?;
    if status != 200 {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&body).ok()?;
    PairState::parse(v.get("state")?.as_str()?)
}

/// Pulls the other server's leases into this one, then pushes this
/// server's leases to it. True when both went through.
fn exchange(shared: &PairShared, c: &Client) -> bool {
    let wait = Duration::from_secs(30);
    let pulled = match c.call("GET", &format!("{API_PREFIX}/leases"), &[]) {
        Ok((200, body)) if decode_records(&body).is_some() => body,
        Ok((status, _)) => {
            tracing::warn!(status, "pair: the other server refused its lease snapshot");
            return false;
        }
        Err(e) => {
            tracing::warn!(error = %e, "pair: cannot fetch the other server's leases");
            return false;
        }
    };
    let n = pulled.len() / crate::lease_store::RECORD_LEN;
    if !shared.store_records(pulled, wait) {
        return false;
    }
    let Some(mine) = shared.snapshot(wait) else {
        return false;
    };
    let pushed = mine.len() / crate::lease_store::RECORD_LEN;
    match c.call("POST", &format!("{API_PREFIX}/leases"), &mine) {
        Ok((204, _)) => {
            metrics().pair_syncs.inc();
            tracing::info!(
                pulled = n,
                pushed,
                "pair: leases exchanged with the other server"
            );
            true
        }
        Ok((status, _)) => {
            tracing::warn!(
                status,
                "pair: the other server refused this server's leases"
            );
            false
        }
        Err(e) => {
            tracing::warn!(error = %e, "pair: cannot push leases to the other server");
            false
        }
    }
}

/// The heartbeat: asks the other server for its state every
/// `heartbeat_ms` and moves this server between the states (see
/// [`crate::pair`] and the module docs). Runs forever.
pub fn heartbeat(shared: Arc<PairShared>) {
    let p = &shared.peer;
    let c = Client::new(
        &p.api,
        &p.token,
        Duration::from_millis(u64::from(p.heartbeat_ms).max(200)),
    );
    let every = Duration::from_millis(u64::from(p.heartbeat_ms));
    let down_after = Duration::from_millis(u64::from(p.down_after_ms));
    let started = Instant::now();
    loop {
        let theirs = peer_state(&c);
        if let Some(s) = theirs {
            if let Ok(mut t) = shared.last_ok.lock() {
                *t = Some(Instant::now());
            }
            if let Ok(mut t) = shared.peer_state.lock() {
                *t = Some(s);
            }
        } else {
            metrics().pair_heartbeat_failures.inc();
        }
        match shared.state() {
            PairState::Syncing => {
                if theirs.is_some() {
                    if exchange(&shared, &c) {
                        shared.set_state(PairState::LoadBalancing);
                    }
                } else if started.elapsed() >= down_after {
                    tracing::warn!(api = %p.api, "pair: the other server does not answer since start; taking over the whole pool");
                    metrics().pair_takeovers.inc();
                    shared.set_state(PairState::PartnerDown);
                }
            }
            PairState::LoadBalancing => {
                if !shared.peer_reachable() {
                    tracing::warn!(api = %p.api, "pair: the other server stopped answering; taking over the whole pool");
                    metrics().pair_takeovers.inc();
                    shared.set_state(PairState::PartnerDown);
                }
            }
            PairState::PartnerDown => {
                // Back to load balancing once the other server has synced
                // (it answers no client while syncing) and the leases of
                // the outage are exchanged.
                if matches!(
                    theirs,
                    Some(PairState::LoadBalancing | PairState::PartnerDown)
                ) && exchange(&shared, &c)
                {
                    shared.set_state(PairState::LoadBalancing);
                }
            }
        }
        std::thread::sleep(every);
    }
}

/// The sending side of replication, shared by the decision loop (which
/// pushes each written batch's records) and the replication workers.
pub struct Replication {
    window: Mutex<Window>,
    moved: Condvar,
}

impl Replication {
    /// A window whose first stream id comes from the clock, so that a
    /// restarted server's streams replace the ones it sent before.
    pub fn new() -> Replication {
        let stream = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        Replication {
            window: Mutex::new(Window::new(stream, REPLICATION_IN_FLIGHT)),
            moved: Condvar::new(),
        }
    }

    /// Batch `seq` wrote `records` for the other server. Returns a new
    /// watermark when nothing is left to wait for.
    pub fn push(&self, seq: Seq, records: &[u8]) -> Option<Seq> {
        let t = self.window.lock().ok()?.push(seq, records);
        self.moved.notify_one();
        t
    }
}

impl Default for Replication {
    fn default() -> Self {
        Replication::new()
    }
}

/// A replication worker (run [`REPLICATION_IN_FLIGHT`] of them): takes the
/// next request the window allows, POSTs it on its kept-alive connection
/// and reports each new watermark to `replicated` (which releases the
/// ACKs waiting for it). Runs forever.
pub fn replication_worker(
    shared: Arc<PairShared>,
    rep: Arc<Replication>,
    mut replicated: impl FnMut(Seq),
) {
    let p = &shared.peer;
    let mut conn = Conn::new(
        &p.api,
        &p.token,
        Duration::from_millis(u64::from(p.down_after_ms)),
    );
    let m = metrics();
    let path = format!("{API_PREFIX}/leases");
    loop {
        let req = {
            let Ok(mut w) = rep.window.lock() else { return };
            loop {
                if w.busy() && !shared.peer_reachable() {
                    // Down: nothing waits for it any more (see the docs).
                    let (t, dropped) = w.abandon();
                    m.pair_updates_unsent.inc_by((dropped / RECORD_LEN) as u64);
                    drop(w);
                    rep.moved.notify_all();
                    replicated(t);
                    break None;
                }
                if let Some(r) = w.next_request() {
                    break Some(r);
                }
                w = match rep.moved.wait_timeout(w, Duration::from_millis(200)) {
                    Ok((w, _)) => w,
                    Err(_) => return,
                };
            }
        };
        let Some(req) = req else { continue };
        let extra = format!(
            "{STREAM_HEADER}: {}\r\n{REQUEST_HEADER}: {}\r\n",
            req.stream, req.n
        );
        let result = conn.post(&path, &extra, &req.records);
        let Ok(mut w) = rep.window.lock() else { return };
        match result {
            Ok(204) => {
                m.pair_updates_sent
                    .inc_by((req.records.len() / RECORD_LEN) as u64);
                let t = w.acked(req.stream, req.n);
                drop(w);
                rep.moved.notify_all();
                if let Some(t) = t {
                    replicated(t);
                }
            }
            other => {
                m.pair_update_errors.inc();
                match other {
                    Ok(status) => tracing::debug!(
                        status,
                        stream = req.stream,
                        n = req.n,
                        "pair: a lease update was refused; resending"
                    ),
                    Err(e) => {
                        tracing::debug!(error = %e, "pair: lease update failed; resending")
                    }
                }
                let restarted = w.failed(req.stream);
                drop(w);
                rep.moved.notify_all();
                if restarted {
                    // Not a busy loop while the other server is in trouble.
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }
}

/// The pair API (serve it on `peer.listen`).
pub fn router(shared: Arc<PairShared>) -> axum::Router {
    use axum::body::Bytes;
    use axum::extract::State;
    use axum::http::{HeaderMap, StatusCode, header};
    use axum::response::{IntoResponse, Response};
    use axum::routing::get;

    /// The refusal when the request lacks the token.
    fn auth(s: &PairShared, h: &HeaderMap) -> Result<(), Box<Response>> {
        let value = h.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        if s.authorized(value) {
            Ok(())
        } else {
            metrics().pair_unauthorized.inc();
            Err(Box::new(
                (StatusCode::UNAUTHORIZED, "bad or missing token\n").into_response(),
            ))
        }
    }

    async fn state(State(s): State<Arc<PairShared>>, h: HeaderMap) -> Response {
        if let Err(r) = auth(&s, &h) {
            return *r;
        }
        let role = match s.peer.role {
            Role::Primary => "primary",
            Role::Secondary => "secondary",
        };
        axum::Json(serde_json::json!({"role": role, "state": s.state().as_str()})).into_response()
    }

    async fn get_leases(State(s): State<Arc<PairShared>>, h: HeaderMap) -> Response {
        if let Err(r) = auth(&s, &h) {
            return *r;
        }
        let s2 = s.clone();
        match tokio::task::spawn_blocking(move || s2.snapshot(Duration::from_secs(30))).await {
            Ok(Some(body)) => (StatusCode::OK, body).into_response(),
            _ => (StatusCode::SERVICE_UNAVAILABLE, "no snapshot\n").into_response(),
        }
    }

    async fn post_leases(State(s): State<Arc<PairShared>>, h: HeaderMap, body: Bytes) -> Response {
        if let Err(r) = auth(&s, &h) {
            return *r;
        }
        let Some(records) = decode_records(&body) else {
            return (
                StatusCode::BAD_REQUEST,
                "body is not whole lease records with good checksums\n",
            )
                .into_response();
        };
        let number = |name: &str| {
            h.get(name)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        let ordered = match (number(STREAM_HEADER), number(REQUEST_HEADER)) {
            (Some(stream), Some(n)) => Some((stream, n)),
            (None, None) => None,
            _ => {
                return (
                    StatusCode::BAD_REQUEST,
                    "replication needs both the stream and the request number\n",
                )
                    .into_response();
            }
        };
        metrics().pair_updates_received.inc_by(records.len() as u64);
        let s2 = s.clone();
        let body = body.to_vec();
        let wait = Duration::from_secs(30);
        let stored = tokio::task::spawn_blocking(move || match ordered {
            Some((stream, n)) => s2.store_in_order(stream, n, body, wait),
            None => Some(s2.store_records(body, wait)),
        })
        .await;
        match stored {
            Ok(Some(true)) => StatusCode::NO_CONTENT.into_response(),
            Ok(None) => (
                StatusCode::CONFLICT,
                "out of order: a replaced stream, or an earlier request is missing\n",
            )
                .into_response(),
            _ => (StatusCode::SERVICE_UNAVAILABLE, "not stored\n").into_response(),
        }
    }

    axum::Router::new()
        .route(&format!("{API_PREFIX}/state"), get(state))
        .route(
            &format!("{API_PREFIX}/leases"),
            get(get_leases).post(post_leases),
        )
        .layer(axum::extract::DefaultBodyLimit::max(64 << 20))
        .with_state(shared)
}

/// Serves the pair API on `addr`.
pub async fn serve(shared: Arc<PairShared>, addr: SocketAddr) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving the pair API");
    axum::serve(listener, router(shared)).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_checked_whole_and_the_scheme_in_any_case() {
        let peer = Peer {
            role: Role::Primary,
            server_ip: std::net::Ipv4Addr::new(192, 0, 2, 5),
            api: "127.0.0.1:1".into(),
            listen: "127.0.0.1:0".parse().unwrap(),
            token: "0123456789abcdef".into(),
            heartbeat_ms: 100,
            down_after_ms: 300,
        };
        let pair = Pair::new(peer).unwrap();
        let s = &pair.shared;
        assert!(s.authorized(Some("Bearer 0123456789abcdef")));
        assert!(s.authorized(Some("bearer 0123456789abcdef")));
        assert!(!s.authorized(Some("Bearer 0123456789abcde")));
        assert!(!s.authorized(Some("Bearer 0123456789abcdeF")));
        assert!(!s.authorized(Some("Basic 0123456789abcdef")));
        assert!(!s.authorized(None));
    }

    #[test]
    fn chunked_bodies_are_joined() {
        assert_eq!(
            dechunk(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"),
            Some(b"abcde".to_vec())
        );
        assert_eq!(dechunk(b"5\r\nab"), None);
    }
}
