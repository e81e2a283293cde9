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
//! communication recovery, or partner-down when the other server is silent
//! on the VLAN too (see [`crate::pair`]): ACKs leave after the local
//! sync only, this server answers only its own scope from its own half, and
//! the other server gets those leases in the exchange when contact
//! returns (both pull and push every lease before load balancing again).
//! A cut pair link between two live servers thus gives no duplicates: each
//! keeps serving its own scope from its own half, as long as each hears the
//! other on the VLAN ([`vlan`]). A server takes over the other's scope
//! (partner down) only when the other is silent on the pair link and on
//! the VLAN, and never with a clock more than 60 s off the other's.
//!
//! Records from the other server are checked against the config (subnet,
//! pool or that MAC's reservation, never a server or gateway address, an
//! expiry no later than a full lease from now) and their expiries moved
//! onto this server's clock (the skew each heartbeat measures). A request
//! with any record refused (invalid, or a real conflict: another live
//! client holds the address) is answered 409 with what was refused and the
//! bindings held here; the sender does not ACK those leases and merges the
//! bindings it was sent (see [`crate::leases::LeaseTable::merge_peer_commit`]
//! for how a conflict is settled, and
//! [`crate::leases::LeaseTable::check_peer_half`] for the records of the
//! receiver's half). The decision loop merges records in slices between its
//! DHCP turns (see [`crate::server::MERGE_SLICE`]), replication first.

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

//!
//! Modules by job: [`api`] (the pair API this server serves), [`client`]
//! (the HTTP client of the other server's API), [`heartbeat`] (states,
//! clock skew, the lease exchange), [`vlan`] (the VLAN witness) and
//! [`push`] (the replication workers).

pub mod api;
pub mod client;
pub mod heartbeat;
pub mod push;
pub mod vlan;

use std::fs::File;
use std::io::{Read, Write};
use std::net::Ipv4Addr;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::config::{Mac, Peer};
use crate::lease_store::{StoredLease, encode_leases};
use crate::metrics::metrics;
use crate::pair::PairState;
use crate::replication::{Admit, Order, Stream};

pub use api::{router, serve};
pub use client::Client;
pub use heartbeat::heartbeat;
pub use push::{Replicated, Replication, replication_worker};

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
        /// Replication (a stream's request), merged before bodies sent
        /// outside a stream (snapshots, exchanges, anything else), so that
        /// a flood of the latter cannot hold back the ACKs that wait for
        /// replication.
        replication: bool,
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
/// Most of this server's bindings sent back in one answer (the sender
/// merges them; a later exchange sends the rest).
const HOLDERS_LISTED: usize = 1000;

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
            "holders": self.holders.iter().take(HOLDERS_LISTED).map(lease).collect::<Vec<_>>(),
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
    /// Most records one body may hold (both directions).
    pub max_records: usize,
    /// Whether the VLAN witness's socket is open (until it is, the VLAN
    /// counts as alive: no takeover on the pair link alone).
    vlan_open: AtomicBool,
    /// When the last valid VLAN heartbeat arrived, and the state it named.
    vlan_last: Mutex<Option<(Instant, PairState)>>,
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
        metrics().pair_unacked_clients.set(n as i64);
    }

    /// Whether the VLAN witness's socket is open.
    pub fn set_vlan_available(&self, open: bool) {
        self.vlan_open.store(open, Ordering::Relaxed);
    }

    /// A valid VLAN heartbeat of the other server arrived, naming `state`.
    pub fn vlan_heard(&self, state: PairState) {
        if let Ok(mut v) = self.vlan_last.lock() {
            *v = Some((Instant::now(), state));
        }
    }

    /// The VLAN witness: whether the other server was heard within
    /// `down_after_ms` (always true while the witness cannot listen), and
    /// the state it last named then.
    pub fn vlan_view(&self) -> (bool, Option<PairState>) {
        let limit = Duration::from_millis(u64::from(self.peer.down_after_ms));
        let last = self.vlan_last.lock().ok().and_then(|v| *v);
        let heard = last.filter(|(t, _)| t.elapsed() <= limit);
        if !self.vlan_open.load(Ordering::Relaxed) {
            return (true, heard.map(|(_, s)| s));
        }
        (heard.is_some(), heard.map(|(_, s)| s))
    }

    /// Whether the other server says (on either witness, lately) that it
    /// took over: then its records may name addresses of this server's
    /// half that this server never bound.
    pub fn peer_took_over(&self) -> bool {
        let pair = self
            .peer_state
            .lock()
            .ok()
            .and_then(|s| *s)
            .is_some_and(|s| s == PairState::PartnerDown);
        pair || self.vlan_view().1 == Some(PairState::PartnerDown)
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
        if !self.send(Inbox::Records {
            records,
            done: tx,
            replication: false,
        }) {
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
                    let sent = self.send(Inbox::Records {
                        records,
                        done: tx,
                        replication: true,
                    });
                    drop(order);
                    self.order_moved.notify_all();
                    break sent;
                }
                Admit::Repeat => {
                    drop(order);
                    break self.send(Inbox::Records {
                        records,
                        done: tx,
                        replication: true,
                    });
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
        Ok(Pair {
            shared: Arc::new(PairShared {
                peer,
                state: AtomicI64::new(PairState::Syncing.code()),
                skew_ms: AtomicI64::new(0),
                skew_known: AtomicBool::new(false),
                stalled: AtomicBool::new(false),
                max_records: max_records.max(1),
                vlan_open: AtomicBool::new(false),
                vlan_last: Mutex::new(None),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Role;

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
            vlan_port: 647,
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
}
