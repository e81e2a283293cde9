//! The pair's I/O: the authenticated HTTP API each server offers the other
//! on the pod network, the heartbeat that moves this server between the
//! [`PairState`]s, and the replicator that sends every committed lease to
//! the other server. The rules (who answers, which half) are in
//! [`crate::pair`].
//!
//! ## Ordering and guarantees
//! 1. A batch of decisions is written to the local log and `fdatasync`ed
//!    (group commit, [`crate::commit`]).
//! 2. Its records (the exact log records) are POSTed to the other server,
//!    which merges them into its table, writes them to its own log and
//!    answers only after its own `fdatasync`.
//! 3. Only then are the batch's ACKs sent.
//!
//! So while both servers are up, every ACKed lease is durable on both: a
//! `kill -9` (or the loss of a node) of either loses no ACKed lease, and the
//! survivor, which takes over the whole pool, never hands an ACKed address
//! to another client. When the other server does not answer, ACKs wait
//! (retrying) until it counts as down (`down_after_ms`, a few heartbeats);
//! from then on ACKs leave after the local sync only and the other server
//! gets those leases when it returns: it answers no client until it has
//! pulled this server's leases (and pushed its own), and only then does the
//! pair go back to load balancing. A network partition between two live
//! servers makes both take over; each then allocates from its own half first,
//! so they collide only after one half is exhausted — the limit of any pair
//! without a third witness.
//!
//! ## API (bearer token, `Authorization: Bearer <token>`)
//! - `GET /pair/v1/state` → `{"role": "primary", "state": "load-balancing"}`;
//! - `POST /pair/v1/leases` with log records (27 bytes each, see
//!   [`crate::lease_store`]) → 204 once they are durable here;
//! - `GET /pair/v1/leases` → every lease this server holds, as records.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::{Peer, Role};
use crate::lease_store::decode_records;
use crate::metrics::metrics;
use crate::pair::PairState;

/// Path prefix of the pair API.
pub const API_PREFIX: &str = "/pair/v1";

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

/// What the replicator gets from the sync workers: a durable batch's items
/// in decision order.
pub type Released = Vec<crate::server::Pending>;

/// Sends each durable batch's records to the other server and then its
/// ACKs (see the module docs). Runs until the sending side closes.
pub fn replicator(
    shared: Arc<PairShared>,
    rx: Receiver<Released>,
    mut send: impl FnMut(crate::server::Pending),
) {
    let p = &shared.peer;
    let c = Client::new(
        &p.api,
        &p.token,
        Duration::from_millis(u64::from(p.down_after_ms)),
    );
    while let Ok(first) = rx.recv() {
        let mut items = first;
        // Everything already waiting goes in one update (group replication).
        while let Ok(more) = rx.try_recv() {
            items.extend(more);
        }
        let mut records = Vec::new();
        for i in &items {
            if let crate::server::Pending::Records(r) = i {
                records.extend_from_slice(r);
            }
        }
        if !records.is_empty() {
            replicate(&shared, &c, &records);
        }
        for i in items {
            send(i);
        }
    }
}

/// POSTs `records` until the other server has them durably, or it counts
/// as down.
fn replicate(shared: &PairShared, c: &Client, records: &[u8]) {
    let m = metrics();
    let n = (records.len() / crate::lease_store::RECORD_LEN) as u64;
    loop {
        if !shared.peer_reachable() {
            m.pair_updates_unsent.inc_by(n);
            return;
        }
        match c.call("POST", &format!("{API_PREFIX}/leases"), records) {
            Ok((204, _)) => {
                m.pair_updates_sent.inc_by(n);
                return;
            }
            Ok((status, _)) => {
                m.pair_update_errors.inc();
                tracing::warn!(
                    status,
                    "pair: the other server refused a lease update; retrying"
                );
            }
            Err(e) => {
                m.pair_update_errors.inc();
                tracing::debug!(error = %e, "pair: lease update failed; retrying");
            }
        }
        std::thread::sleep(Duration::from_millis(50));
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
        metrics().pair_updates_received.inc_by(records.len() as u64);
        let s2 = s.clone();
        let body = body.to_vec();
        match tokio::task::spawn_blocking(move || s2.store_records(body, Duration::from_secs(30)))
            .await
        {
            Ok(true) => StatusCode::NO_CONTENT.into_response(),
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
