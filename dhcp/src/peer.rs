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
//! answer, or answers heartbeats but stores none of the updates, ACKs wait
//! (retrying) for at most `down_after_ms`; then this server moves to
//! communication recovery (see [`crate::pair`]): ACKs leave after the local
//! sync only, this server answers only its own scope from its own half, and
//! the other server gets those leases in the exchange when contact
//! returns (both pull and push every lease before load balancing again).
//! A cut pair link between two live servers thus gives no duplicates: each
//! keeps serving its own scope from its own half. A server takes over the
//! other's scope (partner down) only when clients of that scope go
//! unanswered, and never with a clock more than 60 s off the other's.
//!
//! Records from the other server are checked against the config (subnet,
//! pool or that MAC's reservation, never a server or gateway address, an
//! expiry no later than a full lease from now) and their expiries moved
//! onto this server's clock (the skew each heartbeat measures). A request
//! with any record refused (invalid, or a real conflict: another live
//! client holds the address) is answered 409 with what was refused and the
//! bindings held here; the sender does not ACK those leases and merges the
//! bindings it was sent (see [`crate::leases::LeaseTable::merge_peer_commit`]
//! for how a conflict is settled the same way on both servers).

//! ## API (bearer token, `Authorization: Bearer <token>`; a wrong token is
//! answered 401, counted and logged with the caller's address)
//! - `GET /pair/v1/state` → `{"role": "primary", "state": "load-balancing",
//!   "unix_ms": …}` (the clock, for the skew);
//! - `POST /pair/v1/streams` → `{"stream": "<epoch>-<n>"}`: a new
//!   replication stream, issued by this server (see [`crate::replication`]);
//! - `POST /pair/v1/leases` with log records (27 bytes each, see
//!   [`crate::lease_store`]; at most the config's pool and reservations
//!   twice over, else 413) → 204 once they are durable here, 409 with a
//!   JSON body when records were refused. With `X-Oooi-Stream: <stream>`
//!   and `X-Oooi-Request: <n>` (replication) they are merged in `n` order
//!   within the stream; 412 when the stream was not issued here, was
//!   replaced, or an earlier request did not arrive within a second;
//! - `GET /pair/v1/leases` → every lease this server holds, as records.

use std::fs::File;
use std::io::{Read, Write};
use std::net::Ipv4Addr;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::commit::Seq;
use crate::config::{Mac, Peer, Role};
use crate::lease_store::{RECORD_LEN, StoredLease, decode_records, encode_leases};
use crate::metrics::{self, metrics};
use crate::pair::{Heartbeat, Limits, Observation, PairState, SKEW_WARN_SECONDS, Step, next_state};
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
        /// Signalled once they are durable here, with what was refused.
        done: Sender<MergeReport>,
    },
    /// Every lease this server holds, as records, on `reply`.
    Snapshot {
        /// Where the records go.
        reply: Sender<Vec<u8>>,
    },
}

/// A record from the other server that was not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// The record (its expiry on this server's clock).
    pub lease: StoredLease,
    /// Whether it was a release (else a commit).
    pub release: bool,
    /// Why.
    pub reason: &'static str,
}

/// What merging one body of records from the other server refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MergeReport {
    /// Records not stored.
    pub refused: Vec<Refused>,
    /// This server's bindings of the addresses refused for a conflict.
    pub holders: Vec<StoredLease>,
}

/// Most refused records named in one answer (the count is always whole).
const REFUSED_LISTED: usize = 100;

impl MergeReport {
    /// Adds a refused record.
    pub fn refuse(&mut self, lease: StoredLease, release: bool, reason: &'static str) {
        self.refused.push(Refused {
            lease,
            release,
            reason,
        });
    }

    /// The JSON body of a 409 answer.
    pub fn to_json(&self) -> serde_json::Value {
        let lease = |l: &StoredLease| serde_json::json!({"ip": l.ip.to_string(), "mac": l.mac.to_string(), "expires": l.expires_unix});
        serde_json::json!({
            "refused": self.refused.len(),
            "records": self.refused.iter().take(REFUSED_LISTED).map(|r| {
                let mut v = lease(&r.lease);
                v["release"] = r.release.into();
                v["reason"] = r.reason.into();
                v
            }).collect::<Vec<_>>(),
            "holders": self.holders.iter().map(lease).collect::<Vec<_>>(),
        })
    }
}

/// What a 409 answer said: the commits refused (their ACKs are not sent)
/// and the other server's bindings, as records to merge.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Refusal {
    /// Addresses whose commit was refused.
    pub commits: Vec<Ipv4Addr>,
    /// The other server's bindings of those addresses, as records.
    pub holders: Vec<u8>,
}

impl Refusal {
    /// Reads a 409 body ([`MergeReport::to_json`]).
    pub fn parse(body: &[u8]) -> Refusal {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
            return Refusal::default();
        };
        let lease = |x: &serde_json::Value| -> Option<StoredLease> {
            Some(StoredLease {
                ip: x.get("ip")?.as_str()?.parse().ok()?,
                mac: Mac::parse(x.get("mac")?.as_str()?)?,
                expires_unix: x.get("expires")?.as_u64()?,
            })
        };
        let list = |k: &str| {
            v.get(k)
                .and_then(|a| a.as_array())
                .cloned()
                .unwrap_or_default()
        };
        let commits = list("records")
            .iter()
            .filter(|r| r.get("release").and_then(|b| b.as_bool()) == Some(false))
            .filter_map(lease)
            .map(|l| l.ip)
            .collect();
        let holders: Vec<StoredLease> = list("holders").iter().filter_map(lease).collect();
        Refusal {
            commits,
            holders: encode_leases(holders.iter()),
        }
    }
}

/// State shared by the decision loop, the heartbeat, the replicator and
/// the API.
pub struct PairShared {
    /// The settings.
    pub peer: Peer,
    state: AtomicI64,
    /// The other server's clock minus this one's, milliseconds, as the last
    /// heartbeat measured it; `skew_known` once one did.
    skew_ms: AtomicI64,
    skew_known: AtomicBool,
    /// The other server answers heartbeats but stores no lease updates.
    stalled: AtomicBool,
    /// Clients of the other scope seen unanswered (set by the decision loop).
    unacked: AtomicUsize,
    /// Most records one body may hold (both directions).
    pub max_records: usize,
    /// Limits of the state machine.
    pub limits: Limits,
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

impl PairShared {
    /// This server's state.
    pub fn state(&self) -> PairState {
        PairState::from_code(self.state.load(Ordering::SeqCst))
    }

    fn set_state(&self, s: PairState, reason: &str) {
        let old = PairState::from_code(self.state.swap(s.code(), Ordering::SeqCst));
        if old != s {
            metrics().pair_state.set(s.code());
            crate::metrics::set_pair_status(s.as_str(), reason);
            if s == PairState::Unauthorized {
                tracing::error!(from = old.as_str(), to = s.as_str(), role = ?self.peer.role, reason, "pair state changed: the two servers hold different tokens");
            } else {
                tracing::warn!(from = old.as_str(), to = s.as_str(), role = ?self.peer.role, reason, "pair state changed");
            }
            self.wake();
        }
    }

    /// The clock skew (other minus this) for moving the other server's
    /// expiries onto this clock, whole seconds; 0 below 2 s (the
    /// measurement's own error), and 0 until a heartbeat measured one.
    pub fn skew_for_records(&self) -> i64 {
        if !self.skew_known.load(Ordering::Relaxed) {
            return 0;
        }
        let ms = self.skew_ms.load(Ordering::Relaxed);
        if ms.abs() < 2000 {
            0
        } else {
            (ms as f64 / 1000.0).round() as i64
        }
    }

    /// The skew last measured, seconds.
    pub fn skew(&self) -> Option<f64> {
        self.skew_known
            .load(Ordering::Relaxed)
            .then(|| self.skew_ms.load(Ordering::Relaxed) as f64 / 1000.0)
    }

    /// The decision loop's count of unanswered clients of the other scope.
    pub fn set_unacked(&self, n: usize) {
        self.unacked.store(n, Ordering::Relaxed);
        metrics().pair_unacked_clients.set(n as i64);
    }

    /// Whether ACKs wait for the other server now: only while load
    /// balancing and the other server stores updates.
    pub fn replicating(&self) -> bool {
        self.state() == PairState::LoadBalancing && !self.stalled.load(Ordering::Relaxed)
    }

    /// Issues a replication stream for the other server to send on.
    pub fn open_stream(&self) -> Option<Stream> {
        let s = self.order.lock().ok()?.open();
        self.order_moved.notify_all();
        Some(s)
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
    /// durable here; what was refused, or None when that did not happen in
    /// time.
    pub fn store_records(&self, records: Vec<u8>, timeout: Duration) -> Option<MergeReport> {
        let (tx, rx) = std::sync::mpsc::channel();
        if !self.send(Inbox::Records { records, done: tx }) {
            return None;
        }
        rx.recv_timeout(timeout).ok()
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
    ) -> Option<Option<MergeReport>> {
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
        Some(if sent {
            rx.recv_timeout(timeout).ok()
        } else {
            None
        })
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
    /// A pair in state [`PairState::Syncing`]; `max_records` bounds a body
    /// of records (see the API).
    pub fn new(peer: Peer, max_records: usize) -> std::io::Result<Pair> {
        let (tx, rx) = std::sync::mpsc::channel();
        let (a, b) = UnixStream::pair()?;
        a.set_nonblocking(true)?;
        b.set_nonblocking(true)?;
        metrics().pair_state.set(PairState::Syncing.code());
        crate::metrics::set_pair_status(PairState::Syncing.as_str(), "started");
        let limits = Limits {
            max_unacked_clients: peer.max_unacked_clients as usize,
        };
        Ok(Pair {
            shared: Arc::new(PairShared {
                peer,
                state: AtomicI64::new(PairState::Syncing.code()),
                skew_ms: AtomicI64::new(0),
                skew_known: AtomicBool::new(false),
                stalled: AtomicBool::new(false),
                unacked: AtomicUsize::new(0),
                max_records: max_records.max(1),
                limits,
                last_ok: Mutex::new(None),
                peer_state: Mutex::new(None),
                inbox: Mutex::new(tx),
                wake: a,
                order: Mutex::new(Order::new(random_epoch())),
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
    fn post(&mut self, path: &str, extra: &str, body: &[u8]) -> std::io::Result<(u16, Vec<u8>)> {
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

    fn exchange(&mut self, req: &[u8]) -> std::io::Result<(u16, Vec<u8>)> {
        let mut s = match self.stream.take() {
            Some(s) => s,
            None => self.connect()?,
        };
        s.write_all(req)?;
        let (status, keep, body) = read_response(&mut s)?;
        if keep {
            self.stream = Some(s);
        }
        Ok((status, body))
    }
}

/// Most bytes of a response body read on a replication connection.
const RESPONSE_BODY_MAX: usize = 1 << 20;

/// Reads one response with a `Content-Length` body; the status, whether the
/// connection may be reused, and the body (cut at [`RESPONSE_BODY_MAX`]).
fn read_response(s: &mut TcpStream) -> std::io::Result<(u16, bool, Vec<u8>)> {
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 512];
    let end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        if buf.len() > 64 << 10 {
            return Err(std::io::Error::other("response head too long"));
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
    let mut body = buf[end..].to_vec();
    let mut left = match length {
        Some(n) => n.saturating_sub(body.len()),
        // 204 and 304 have no body; anything else without a length cannot
        // be delimited on a kept connection.
        None if status == 204 || status == 304 => 0,
        None => return Ok((status, false, body)),
    };
    while left > 0 {
        let n = s.read(&mut chunk[..left.min(512)])?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if body.len() < RESPONSE_BODY_MAX {
            body.extend_from_slice(&chunk[..n]);
        }
        left -= n;
    }
    Ok((status, !head.contains("connection: close"), body))
}

/// A random epoch for this process's replication streams (never a clock:
/// see [`crate::replication`]).
fn random_epoch() -> u64 {
    let mut b = [0u8; 8];
    if File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_err()
    {
        // No urandom: the process id and the address of a stack value.
        let x = std::process::id() as u64 ^ ((&b as *const _ as u64) << 17);
        return x ^ Instant::now().elapsed().as_nanos() as u64;
    }
    u64::from_le_bytes(b)
}

/// One heartbeat: the other server's state and its clock's skew (other
/// minus this, milliseconds, measured at the middle of the round trip).
fn peer_state(c: &Client) -> (Heartbeat, Option<i64>) {
    let sent = SystemTime::now();
    let Ok((status, body)) = c.call("GET", &format!("{API_PREFIX}/state"), &[]) else {
        return (Heartbeat::Unreachable, None);
    };
    let got = SystemTime::now();
    if status == 401 {
        return (Heartbeat::Unauthorized, None);
    }
    if status != 200 {
        return (Heartbeat::Unreachable, None);
    }
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return (Heartbeat::Unreachable, None);
    };
    let Some(state) = v
        .get("state")
        .and_then(|s| s.as_str())
        .and_then(PairState::parse)
    else {
        return (Heartbeat::Unreachable, None);
    };
    let ms = |t: SystemTime| {
        t.duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    };
    let skew = v
        .get("unix_ms")
        .and_then(|u| u.as_i64())
        .map(|theirs| theirs - (ms(sent) + ms(got)) / 2);
    (Heartbeat::Answered(state), skew)
}

/// Pulls the other server's leases into this one, then pushes this
/// server's leases to it (in bodies of at most `max_records`). True when
/// both went through. Conflicts are settled as in
/// [`crate::leases::LeaseTable::merge_peer_commit`]: the bindings the other
/// server sends back with a 409 are merged here, so the stores converge.
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
    let n = pulled.len() / RECORD_LEN;
    let mut refused = 0;
    for chunk in pulled.chunks(shared.max_records * RECORD_LEN) {
        match shared.store_records(chunk.to_vec(), wait) {
            Some(r) => refused += r.refused.len(),
            None => return false,
        }
    }
    let Some(mine) = shared.snapshot(wait) else {
        return false;
    };
    let pushed = mine.len() / RECORD_LEN;
    let mut conflicts = 0;
    for chunk in mine.chunks(shared.max_records * RECORD_LEN) {
        match c.call("POST", &format!("{API_PREFIX}/leases"), chunk) {
            Ok((204, _)) => {}
            Ok((409, body)) => {
                let r = Refusal::parse(&body);
                conflicts += r.commits.len();
                if !r.holders.is_empty() && shared.store_records(r.holders, wait).is_none() {
                    return false;
                }
            }
            Ok((status, _)) => {
                tracing::warn!(
                    status,
                    "pair: the other server refused this server's leases"
                );
                return false;
            }
            Err(e) => {
                tracing::warn!(error = %e, "pair: cannot push leases to the other server");
                return false;
            }
        }
    }
    metrics().pair_syncs.inc();
    tracing::info!(
        pulled = n,
        pushed,
        refused_here = refused,
        refused_there = conflicts,
        "pair: leases exchanged with the other server"
    );
    true
}

/// The heartbeat: asks the other server for its state every
/// `heartbeat_ms`, measures the clock skew, and moves this server between
/// the states as [`next_state`] decides. Runs forever.
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
    let mut last_answer: Option<Instant> = None;
    let mut skew_warned: Option<Instant> = None;
    let mut refused_logged: Option<Instant> = None;
    let m = metrics();
    loop {
        let (hb, skew) = peer_state(&c);
        let now = Instant::now();
        match hb {
            Heartbeat::Answered(s) => {
                last_answer = Some(now);
                if let Ok(mut t) = shared.last_ok.lock() {
                    *t = Some(now);
                }
                if let Ok(mut t) = shared.peer_state.lock() {
                    *t = Some(s);
                }
            }
            Heartbeat::Unauthorized | Heartbeat::Unreachable => {
                m.pair_heartbeat_failures.inc();
            }
        }
        if let Some(ms) = skew {
            shared.skew_ms.store(ms, Ordering::Relaxed);
            shared.skew_known.store(true, Ordering::Relaxed);
            let secs = ms as f64 / 1000.0;
            m.pair_clock_skew.set(secs);
            if secs.abs() > SKEW_WARN_SECONDS
                && skew_warned.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(60))
            {
                skew_warned = Some(now);
                tracing::warn!(
                    skew_seconds = secs,
                    warn_above = SKEW_WARN_SECONDS,
                    refuse_takeover_above = crate::pair::SKEW_REFUSE_SECONDS,
                    "pair: the two servers' clocks differ; lease times from the other server are moved onto this clock, and above 60 s this server will not take over"
                );
            }
        }
        let reference = last_answer.unwrap_or(started);
        let o = Observation {
            heartbeat: hb,
            in_contact: last_answer.is_some_and(|t| now.duration_since(t) <= down_after),
            silent: now.duration_since(reference) > down_after,
            updates_stalled: shared.stalled.load(Ordering::Relaxed),
            unacked_clients: shared.unacked.load(Ordering::Relaxed),
            skew: shared.skew(),
        };
        match next_state(shared.state(), &o, &shared.limits) {
            Step::Stay => {}
            Step::Move(to, reason) => {
                if to == PairState::PartnerDown {
                    m.pair_takeovers.inc();
                }
                shared.set_state(to, reason);
            }
            Step::Exchange => {
                if exchange(&shared, &c) {
                    shared.stalled.store(false, Ordering::Relaxed);
                    m.pair_updates_stalled.set(0);
                    shared.set_state(PairState::LoadBalancing, "leases exchanged");
                }
            }
            Step::RefuseTakeover(reason) => {
                crate::metrics::count_reason(&m.pair_takeovers_refused, "clock skew");
                crate::metrics::set_pair_status(shared.state().as_str(), reason);
                if refused_logged.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(30)) {
                    refused_logged = Some(now);
                    tracing::error!(
                        skew_seconds = o.skew.unwrap_or(0.0),
                        unacked_clients = o.unacked_clients,
                        reason,
                        "pair: clients of the other server's scope go unanswered, but this server refuses to take over"
                    );
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
    /// A worker is opening a stream (only one does at a time).
    opening: AtomicBool,
}

impl Replication {
    /// A window with no stream yet (the first is opened with the other
    /// server); requests hold at most `max_records` records.
    pub fn new(max_records: usize) -> Replication {
        Replication {
            window: Mutex::new(Window::new(
                REPLICATION_IN_FLIGHT,
                (max_records / REPLICATION_IN_FLIGHT).max(1) * RECORD_LEN,
            )),
            moved: Condvar::new(),
            opening: AtomicBool::new(false),
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

/// What a replication worker reports: a new watermark, and the addresses
/// whose commit the other server refused (their ACKs are not sent).
pub type Replicated = (Seq, Vec<Ipv4Addr>);

/// A replication worker (run [`REPLICATION_IN_FLIGHT`] of them): takes the
/// next request the window allows, POSTs it on its kept-alive connection
/// and reports each new watermark to `replicated` (which releases the
/// ACKs waiting for it). When the other server answers heartbeats but
/// stores nothing for `down_after_ms`, it is marked stalled (the heartbeat
/// then moves to communication recovery). Runs forever.
pub fn replication_worker(
    shared: Arc<PairShared>,
    rep: Arc<Replication>,
    mut replicated: impl FnMut(Replicated),
) {
    let p = &shared.peer;
    let timeout = Duration::from_millis(u64::from(p.down_after_ms));
    let mut conn = Conn::new(&p.api, &p.token, timeout);
    let client = Client::new(&p.api, &p.token, timeout);
    let m = metrics();
    let path = format!("{API_PREFIX}/leases");
    loop {
        let req = {
            let Ok(mut w) = rep.window.lock() else { return };
            loop {
                if w.busy() && !shared.replicating() {
                    // Not waited for (see the module docs).
                    let (t, dropped) = w.abandon();
                    m.pair_updates_unsent.inc_by((dropped / RECORD_LEN) as u64);
                    drop(w);
                    rep.moved.notify_all();
                    replicated((t, Vec::new()));
                    break None;
                }
                if w.needs_stream() && !rep.opening.swap(true, Ordering::SeqCst) {
                    drop(w);
                    let opened = open_stream(&client);
                    let Ok(mut w2) = rep.window.lock() else {
                        return;
                    };
                    rep.opening.store(false, Ordering::SeqCst);
                    match opened {
                        Some(s) if w2.needs_stream() => w2.set_stream(s),
                        Some(_) => {}
                        None => {
                            m.pair_update_errors.inc();
                            note_failure(&shared, timeout);
                            drop(w2);
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    }
                    rep.moved.notify_all();
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
            req.stream.header(),
            req.n
        );
        let result = conn.post(&path, &extra, &req.records);
        let refusal = match &result {
            Ok((409, body)) => Some(Refusal::parse(body)),
            _ => None,
        };
        if let Some(r) = &refusal {
            // Those records are not stored there: merge the bindings it
            // holds (the conflict is settled the same way here), and do
            // not ACK the refused commits.
            if !r.holders.is_empty() {
                let _ = shared.store_records(r.holders.clone(), Duration::from_secs(30));
            }
        }
        let Ok(mut w) = rep.window.lock() else { return };
        let refused_commits = refusal.as_ref().map(|r| r.commits.clone());
        match (result, refusal) {
            (Ok((204, _)), _) | (Ok((409, _)), Some(_)) => {
                clear_failure(&shared);
                m.pair_updates_sent
                    .inc_by((req.records.len() / RECORD_LEN) as u64);
                let t = w.acked(req.stream, req.n);
                drop(w);
                rep.moved.notify_all();
                let refused = refused_commits.unwrap_or_default();
                if let Some(t) = t {
                    replicated((t, refused));
                } else if !refused.is_empty() {
                    replicated((0, refused));
                }
            }
            (other, _) => {
                m.pair_update_errors.inc();
                match other {
                    Ok((status, _)) => tracing::debug!(
                        status,
                        stream = %req.stream.header(),
                        n = req.n,
                        "pair: a lease update was refused; resending"
                    ),
                    Err(e) => {
                        tracing::debug!(error = %e, "pair: lease update failed; resending")
                    }
                }
                let restarted = w.failed(req.stream);
                drop(w);
                note_failure(&shared, timeout);
                rep.moved.notify_all();
                if restarted {
                    // Not a busy loop while the other server is in trouble.
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }
}

/// Asks the other server for a new replication stream.
fn open_stream(c: &Client) -> Option<Stream> {
    let (status, body) = c.call("POST", &format!("{API_PREFIX}/streams"), &[]).ok()?;
    if status != 200 {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&body).ok()?;
    Stream::parse(v.get("stream")?.as_str()?)
}

/// Since when updates fail (None: the last one went through).
static FAILING_SINCE: Mutex<Option<Instant>> = Mutex::new(None);

/// An update failed: once they have failed for `limit` while heartbeats
/// still answer, the other server counts as stalled.
fn note_failure(shared: &PairShared, limit: Duration) {
    let Ok(mut f) = FAILING_SINCE.lock() else {
        return;
    };
    let since = *f.get_or_insert_with(Instant::now);
    if since.elapsed() >= limit
        && shared.peer_reachable()
        && !shared.stalled.swap(true, Ordering::Relaxed)
    {
        metrics().pair_updates_stalled.set(1);
        tracing::error!(
            failing_ms = since.elapsed().as_millis() as u64,
            "pair: the other server answers heartbeats but stores none of this server's lease updates; no longer waiting for it"
        );
    }
}

fn clear_failure(shared: &PairShared) {
    if let Ok(mut f) = FAILING_SINCE.lock() {
        *f = None;
    }
    if shared.stalled.swap(false, Ordering::Relaxed) {
        metrics().pair_updates_stalled.set(0);
    }
}

/// The pair API (serve it on `peer.listen`).
pub fn router(shared: Arc<PairShared>) -> axum::Router {
    use axum::body::Bytes;
    use axum::extract::{ConnectInfo, State};
    use axum::http::{HeaderMap, StatusCode, header};
    use axum::response::{IntoResponse, Response};
    use axum::routing::{get, post};

    /// When a bad token was last logged (one line every 10 s at most).
    static UNAUTHORIZED_LOGGED: Mutex<Option<Instant>> = Mutex::new(None);

    /// The refusal when the request lacks the token (counted; logged with
    /// the caller's address, rate-limited).
    fn auth(s: &PairShared, h: &HeaderMap, from: Option<SocketAddr>) -> Result<(), Box<Response>> {
        let value = h.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        if s.authorized(value) {
            return Ok(());
        }
        metrics().pair_unauthorized.inc();
        if let Ok(mut last) = UNAUTHORIZED_LOGGED.lock()
            && last.is_none_or(|t| t.elapsed() >= Duration::from_secs(10))
        {
            *last = Some(Instant::now());
            tracing::warn!(
                from = %from.map_or_else(|| "unknown".to_string(), |a| a.to_string()),
                token_sent = value.is_some(),
                "pair API: request with a wrong or missing token refused (the two servers must share one token)"
            );
        }
        Err(Box::new(
            (StatusCode::UNAUTHORIZED, "bad or missing token\n").into_response(),
        ))
    }

    type From = Option<axum::Extension<ConnectInfo<SocketAddr>>>;

    async fn state(State(s): State<Arc<PairShared>>, from: From, h: HeaderMap) -> Response {
        if let Err(r) = auth(&s, &h, from.map(|c| c.0.0)) {
            return *r;
        }
        let role = match s.peer.role {
            Role::Primary => "primary",
            Role::Secondary => "secondary",
        };
        let unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        axum::Json(
            serde_json::json!({"role": role, "state": s.state().as_str(), "unix_ms": unix_ms}),
        )
        .into_response()
    }

    async fn streams(State(s): State<Arc<PairShared>>, from: From, h: HeaderMap) -> Response {
        if let Err(r) = auth(&s, &h, from.map(|c| c.0.0)) {
            return *r;
        }
        match s.open_stream() {
            Some(st) => axum::Json(serde_json::json!({"stream": st.header()})).into_response(),
            None => (StatusCode::SERVICE_UNAVAILABLE, "no stream\n").into_response(),
        }
    }

    async fn get_leases(State(s): State<Arc<PairShared>>, from: From, h: HeaderMap) -> Response {
        if let Err(r) = auth(&s, &h, from.map(|c| c.0.0)) {
            return *r;
        }
        let s2 = s.clone();
        match tokio::task::spawn_blocking(move || s2.snapshot(Duration::from_secs(30))).await {
            Ok(Some(body)) => (StatusCode::OK, body).into_response(),
            _ => (StatusCode::SERVICE_UNAVAILABLE, "no snapshot\n").into_response(),
        }
    }

    async fn post_leases(
        State(s): State<Arc<PairShared>>,
        from: From,
        h: HeaderMap,
        body: Bytes,
    ) -> Response {
        if let Err(r) = auth(&s, &h, from.map(|c| c.0.0)) {
            return *r;
        }
        if body.len() > s.max_records * RECORD_LEN {
            metrics::count_reason(&metrics().pair_records_refused, "body too large");
            return (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "at most {} records in one body (the pool and reservations twice over)\n",
                    s.max_records
                ),
            )
                .into_response();
        }
        let Some(records) = decode_records(&body) else {
            return (
                StatusCode::BAD_REQUEST,
                "body is not whole lease records with good checksums\n",
            )
                .into_response();
        };
        let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok());
        let ordered = match (text(STREAM_HEADER), text(REQUEST_HEADER)) {
            (Some(stream), Some(n)) => {
                match (Stream::parse(stream), n.trim().parse::<u64>().ok()) {
                    (Some(stream), Some(n)) => Some((stream, n)),
                    _ => {
                        return (
                            StatusCode::BAD_REQUEST,
                            "bad stream (`<16 hex digits>-<n>`) or request number\n",
                        )
                            .into_response();
                    }
                }
            }
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
            Ok(Some(Some(report))) if report.refused.is_empty() => {
                StatusCode::NO_CONTENT.into_response()
            }
            Ok(Some(Some(report))) => {
                (StatusCode::CONFLICT, axum::Json(report.to_json())).into_response()
            }
            Ok(None) => (
                StatusCode::PRECONDITION_FAILED,
                "out of order: a stream this server did not issue or replaced, or an earlier request is missing\n",
            )
                .into_response(),
            _ => (StatusCode::SERVICE_UNAVAILABLE, "not stored\n").into_response(),
        }
    }

    // Bodies are bounded by `max_records` in the handler; the extractor's
    // own limit stops a larger body before it is read whole.
    let limit = shared.max_records * RECORD_LEN + 1;
    axum::Router::new()
        .route(&format!("{API_PREFIX}/state"), get(state))
        .route(&format!("{API_PREFIX}/streams"), post(streams))
        .route(
            &format!("{API_PREFIX}/leases"),
            get(get_leases).post(post_leases),
        )
        .layer(axum::extract::DefaultBodyLimit::max(limit))
        .with_state(shared)
}

/// Serves the pair API on `addr`.
pub async fn serve(shared: Arc<PairShared>, addr: SocketAddr) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving the pair API");
    axum::serve(
        listener,
        router(shared).into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
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
            max_unacked_clients: 3,
            unacked_wait_ms: 10_000,
        };
        let pair = Pair::new(peer, 100).unwrap();
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
