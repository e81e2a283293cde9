//! The route pusher: brings every Envoy replica of a ProxyServer to the
//! routing table the planner rendered.
//!
//! For each replica, concurrently and with a timeout on every request:
//!
//! 1. `GET /v1/routes` reads the loaded generation and digest. The same digest
//!    means the replica is in sync and nothing is sent (a resync costs one
//!    small GET per replica).
//! 2. Otherwise `PUT /v1/routes` with the bearer token. `200` must echo our
//!    digest. `409` means the replica refused a generation that is not newer
//!    than its own: the pusher reads back, and the replica is in sync if a
//!    concurrent push already loaded this very table (same digest).
//! 3. A replica holding a generation at or above ours with a *different*
//!    digest (left there by an earlier controller, or by a table that was
//!    rendered from older state) cannot take our table under its generation.
//!    The pusher then re-stamps the table with a generation above every one
//!    it saw and runs one more round over all replicas, so they converge on a
//!    single generation and digest. The report carries the generation that
//!    was finally pushed; the caller keeps it (ProxyServer status) as the
//!    floor for the next render.
//!
//! 4. When some replica holds the table and others could not take it, the
//!    pusher announces the table to those others (`PUT /v1/routes/expected`,
//!    a small body): a replica behind a live peer then answers `GET /ready`
//!    with 503, so it leaves the Service endpoints, the DNS answers (their
//!    health checks) and its floating addresses (the address agent) instead
//!    of routing by its old table. A table no replica took is never
//!    announced: every replica keeps serving its last one.
//!
//! A new replica and a restarted Envoy both report generation 0 (shared data
//! does not survive an Envoy restart), so step 1 finds them out of sync and
//! step 2 pushes. Replicas to push are pods that are running with an IP, not
//! only Ready ones: Envoy's readiness (`GET /ready`) stays 503 until it holds
//! a table, so waiting for Ready would never push to a restarted pod.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures::future::join_all;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use oooi_routes::RouteTable;
use serde::Deserialize;
use tracing::{debug, info, warn};

use crate::metrics::Metrics;

/// Path of the table API (docs/data-path.md).
pub const ROUTES_PATH: &str = "/v1/routes";
/// Path where the table a replica should hold is announced.
pub const EXPECTED_PATH: &str = "/v1/routes/expected";

/// One Envoy replica to bring in sync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replica {
    /// Pod name, used in status and logs.
    pub name: String,
    /// Pod IP and the table API port.
    pub addr: SocketAddr,
}

/// Settings of the pusher.
#[derive(Debug, Clone)]
pub struct PushConfig {
    /// Bound on each HTTP request (connect, send, answer).
    pub request_timeout: Duration,
}

impl Default for PushConfig {
    fn default() -> Self {
        PushConfig {
            request_timeout: Duration::from_secs(3),
        }
    }
}

/// What happened to one replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It already held the table; nothing was sent.
    InSync,
    /// The table was pushed and accepted.
    Pushed,
    /// The replica could not be brought in sync.
    Failed(Failure),
}

/// Why a replica is not in sync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// No answer within the request timeout.
    Timeout,
    /// Connection refused or broken.
    Connect(String),
    /// The replica answered a status other than 200 or 409 (e.g. 400 with the
    /// entry named, 401/403 for a token mismatch).
    Refused {
        /// The HTTP status.
        status: u16,
        /// The error the replica gave.
        message: String,
    },
    /// The replica holds a different table at a generation at or above ours.
    Stale {
        /// The replica's generation.
        generation: u64,
        /// The replica's digest.
        digest: String,
    },
    /// The replica accepted the table but reports another digest.
    DigestMismatch {
        /// The digest the replica reports.
        digest: String,
    },
    /// The answer was not the JSON the API documents.
    BadResponse(String),
}

impl Failure {
    /// A short label for metrics and conditions.
    pub fn reason(&self) -> String {
        match self {
            Failure::Timeout => "timeout".into(),
            Failure::Connect(_) => "connect".into(),
            Failure::Refused { status, .. } => format!("refused_{status}"),
            Failure::Stale { .. } => "stale".into(),
            Failure::DigestMismatch { .. } => "digest_mismatch".into(),
            Failure::BadResponse(_) => "bad_response".into(),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Timeout => f.write_str("no answer within the request timeout"),
            Failure::Connect(e) => write!(f, "cannot connect: {e}"),
            Failure::Refused { status, message } => write!(f, "refused with {status}: {message}"),
            Failure::Stale { generation, digest } => write!(
                f,
                "holds generation {generation} ({digest}), at or above ours with other routes"
            ),
            Failure::DigestMismatch { digest } => {
                write!(f, "accepted the table but reports digest {digest}")
            }
            Failure::BadResponse(e) => write!(f, "unexpected answer: {e}"),
        }
    }
}

/// The sync state of one replica after [`Pusher::sync`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaSync {
    /// Pod name.
    pub name: String,
    /// Table API address.
    pub addr: SocketAddr,
    /// What happened.
    pub outcome: Outcome,
    /// Generation the replica reported before the push (0: none loaded).
    pub previous_generation: u64,
    /// Time of the accepted PUT, when one was sent.
    pub push_latency: Option<Duration>,
}

impl ReplicaSync {
    /// True when the replica holds the table.
    pub fn synced(&self) -> bool {
        matches!(self.outcome, Outcome::InSync | Outcome::Pushed)
    }
}

/// The result of one [`Pusher::sync`] over every replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncReport {
    /// Generation of the table the replicas were brought to (higher than the
    /// rendered one when a replica held a newer generation).
    pub generation: u64,
    /// Digest of that table.
    pub digest: String,
    /// One entry per replica, in the order given.
    pub replicas: Vec<ReplicaSync>,
    /// Wall time of the whole sync.
    pub took: Duration,
}

impl SyncReport {
    /// Number of replicas holding the table.
    pub fn synced(&self) -> usize {
        self.replicas.iter().filter(|r| r.synced()).count()
    }

    /// True when there is at least one replica and all hold the table.
    pub fn all_synced(&self) -> bool {
        !self.replicas.is_empty() && self.synced() == self.replicas.len()
    }

    /// Number of PUTs that were accepted.
    pub fn pushed(&self) -> usize {
        self.replicas
            .iter()
            .filter(|r| r.outcome == Outcome::Pushed)
            .count()
    }

    /// A one-line explanation for the `RoutesSynced` condition message, e.g.
    /// `2/3 replicas at generation 7; envoy-1: timeout`.
    pub fn message(&self) -> String {
        let mut msg = format!(
            "{}/{} replicas at generation {} ({})",
            self.synced(),
            self.replicas.len(),
            self.generation,
            self.digest
        );
        for r in &self.replicas {
            if let Outcome::Failed(f) = &r.outcome {
                msg.push_str(&format!("; {}: {f}", r.name));
            }
        }
        msg
    }
}

/// Generation and digest as the table API reports them.
#[derive(Debug, Clone, Deserialize)]
struct Loaded {
    generation: u64,
    digest: Option<String>,
}

/// Pushes routing tables to Envoy replicas over plain HTTP (the table API is
/// reachable from the controller only; the bearer token authorises).
#[derive(Clone)]
pub struct Pusher {
    client: Client<HttpConnector, Full<Bytes>>,
    config: PushConfig,
    metrics: Metrics,
}

impl std::fmt::Debug for Pusher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pusher")
            .field("config", &self.config)
            .finish()
    }
}

enum Answer {
    Ok(Loaded),
    Conflict,
    Other(u16, String),
}

impl Pusher {
    /// A pusher with its own connection pool.
    pub fn new(config: PushConfig, metrics: Metrics) -> Pusher {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(config.request_timeout));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            // Below the table API's 15 s connection idle timeout, so a kept
            // connection is never reused as Envoy closes it.
            .pool_idle_timeout(Duration::from_secs(10))
            .build(connector);
        Pusher {
            client,
            config,
            metrics,
        }
    }

    /// Brings every replica to `table` (see the module docs). Never fails as
    /// a whole: each replica's outcome is in the report.
    pub async fn sync(&self, table: &RouteTable, replicas: &[Replica], token: &str) -> SyncReport {
        let start = Instant::now();
        let body = Bytes::from(table.to_json());
        let digest = table.digest();
        let mut results = join_all(
            replicas
                .iter()
                .map(|r| self.sync_one(r, table.generation, &digest, body.clone(), token)),
        )
        .await;
        let mut generation = table.generation;
        let mut final_digest = digest;
        // One replica ahead of us with other routes: re-stamp above every
        // generation seen and bring all replicas to that single table.
        let highest_stale = results
            .iter()
            .filter_map(|r| match &r.outcome {
                Outcome::Failed(Failure::Stale { generation, .. }) => Some(*generation),
                _ => None,
            })
            .reduce(|a, b| oooi_routes::newest_generation([a, b]));
        if let Some(highest) = highest_stale {
            // Newest in the generations' own order, which wraps after
            // MAX_GENERATION: a replica at the top is followed by 1.
            let highest = oooi_routes::newest_generation(
                results
                    .iter()
                    .map(|r| r.previous_generation)
                    .chain(std::iter::once(highest)),
            );
            let mut restamped = table.clone();
            restamped.generation = oooi_routes::next_generation(highest);
            info!(
                from = table.generation,
                to = restamped.generation,
                "a replica holds a newer generation with other routes; pushing under a new generation"
            );
            let body = Bytes::from(restamped.to_json());
            let digest = restamped.digest();
            let second = join_all(
                replicas
                    .iter()
                    .map(|r| self.sync_one(r, restamped.generation, &digest, body.clone(), token)),
            )
            .await;
            // Keep what the replicas reported before the first round, and
            // count a first-round push that the second round found in sync
            // as pushed.
            results = results
                .iter()
                .zip(second)
                .map(|(first, mut again)| {
                    again.previous_generation = first.previous_generation;
                    if again.push_latency.is_none() {
                        again.push_latency = first.push_latency;
                    }
                    again
                })
                .collect();
            generation = restamped.generation;
            final_digest = digest;
        }
        let behind = to_announce(&results);
        if !behind.is_empty() {
            let body = Bytes::from(
                serde_json::json!({"generation": generation, "digest": final_digest}).to_string(),
            );
            let announced = join_all(
                behind
                    .iter()
                    .map(|&i| self.announce(&replicas[i], body.clone(), token)),
            )
            .await;
            for (i, result) in behind.iter().zip(announced) {
                let r = &replicas[*i];
                match result {
                    Ok(()) => info!(
                        replica = %r.name, addr = %r.addr, generation,
                        "announced the current table to a replica behind its peers (not ready until it holds it)"
                    ),
                    Err(f) => warn!(
                        replica = %r.name, addr = %r.addr, generation,
                        "cannot announce the current table: {f}"
                    ),
                }
            }
        }
        for r in &results {
            match &r.outcome {
                Outcome::InSync => self.metrics.push_outcome("in_sync", false),
                Outcome::Pushed => self.metrics.push_outcome("pushed", false),
                Outcome::Failed(f) => self.metrics.push_outcome(&f.reason(), true),
            }
        }
        SyncReport {
            generation,
            digest: final_digest,
            replicas: results,
            took: start.elapsed(),
        }
    }

    async fn sync_one(
        &self,
        replica: &Replica,
        generation: u64,
        digest: &str,
        body: Bytes,
        token: &str,
    ) -> ReplicaSync {
        let mut out = ReplicaSync {
            name: replica.name.clone(),
            addr: replica.addr,
            outcome: Outcome::InSync,
            previous_generation: 0,
            push_latency: None,
        };
        let before = match self.read(replica.addr).await {
            Ok(l) => l,
            Err(f) => {
                out.outcome = Outcome::Failed(f);
                return self.logged(out);
            }
        };
        out.previous_generation = before.generation;
        if before.digest.as_deref() == Some(digest) {
            return self.logged(out);
        }
        if !oooi_routes::generation_is_newer(generation, before.generation) {
            out.outcome = Outcome::Failed(Failure::Stale {
                generation: before.generation,
                digest: before.digest.unwrap_or_default(),
            });
            return self.logged(out);
        }
        let started = Instant::now();
        let answer = self
            .request(
                replica.addr,
                ROUTES_PATH,
                http::Method::PUT,
                Some(format!("Bearer {token}")),
                body,
            )
            .await;
        let took = started.elapsed();
        out.outcome = match answer {
            Ok(Answer::Ok(after)) => {
                self.metrics.push_took(took);
                out.push_latency = Some(took);
                if after.digest.as_deref() == Some(digest) {
                    Outcome::Pushed
                } else {
                    Outcome::Failed(Failure::DigestMismatch {
                        digest: after.digest.unwrap_or_default(),
                    })
                }
            }
            // Another push got there first: in sync if it was this table.
            Ok(Answer::Conflict) => match self.read(replica.addr).await {
                Ok(now) if now.digest.as_deref() == Some(digest) => Outcome::InSync,
                Ok(now) => Outcome::Failed(Failure::Stale {
                    generation: now.generation,
                    digest: now.digest.unwrap_or_default(),
                }),
                Err(f) => Outcome::Failed(f),
            },
            Ok(Answer::Other(status, message)) => {
                Outcome::Failed(Failure::Refused { status, message })
            }
            Err(f) => Outcome::Failed(f),
        };
        self.logged(out)
    }

    fn logged(&self, r: ReplicaSync) -> ReplicaSync {
        match &r.outcome {
            Outcome::InSync => debug!(replica = %r.name, addr = %r.addr, "routes in sync"),
            Outcome::Pushed => info!(
                replica = %r.name,
                addr = %r.addr,
                previous_generation = r.previous_generation,
                latency_ms = r.push_latency.map(|d| d.as_secs_f64() * 1e3),
                "routes pushed"
            ),
            Outcome::Failed(f) => {
                warn!(replica = %r.name, addr = %r.addr, reason = %f.reason(), "route sync failed: {f}")
            }
        }
        r
    }

    /// Announces the table in `body` (`{"generation", "digest"}`) to
    /// `replica` as the one it should hold.
    pub async fn announce(
        &self,
        replica: &Replica,
        body: Bytes,
        token: &str,
    ) -> Result<(), Failure> {
        match self
            .request(
                replica.addr,
                EXPECTED_PATH,
                http::Method::PUT,
                Some(format!("Bearer {token}")),
                body,
            )
            .await?
        {
            Answer::Ok(_) => Ok(()),
            Answer::Conflict => Err(Failure::Refused {
                status: 409,
                message: "conflict on an announcement".into(),
            }),
            Answer::Other(status, message) => Err(Failure::Refused { status, message }),
        }
    }

    async fn read(&self, addr: SocketAddr) -> Result<Loaded, Failure> {
        match self
            .request(addr, ROUTES_PATH, http::Method::GET, None, Bytes::new())
            .await?
        {
            Answer::Ok(l) => Ok(l),
            Answer::Conflict => Err(Failure::Refused {
                status: 409,
                message: "conflict on a read".into(),
            }),
            Answer::Other(status, message) => Err(Failure::Refused { status, message }),
        }
    }

    async fn request(
        &self,
        addr: SocketAddr,
        path: &str,
        method: http::Method,
        bearer: Option<String>,
        body: Bytes,
    ) -> Result<Answer, Failure> {
        let uri = format!("http://{addr}{path}");
        let mut req = http::Request::builder()
            .method(method)
            .uri(&uri)
            .header(http::header::ACCEPT, "application/json");
        if let Some(b) = bearer {
            req = req
                .header(http::header::AUTHORIZATION, b)
                .header(http::header::CONTENT_TYPE, "application/json");
        }
        let req = req
            .body(Full::new(body))
            .map_err(|e| Failure::BadResponse(format!("cannot build request to {uri}: {e}")))?;
        let exchange = async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|e| Failure::Connect(error_chain(&e)))?;
            let status = resp.status().as_u16();
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| Failure::Connect(format!("reading the answer: {e}")))?
                .to_bytes();
            Ok::<_, Failure>((status, bytes))
        };
        let (status, bytes) = tokio::time::timeout(self.config.request_timeout, exchange)
            .await
            .map_err(|_| Failure::Timeout)??;
        match status {
            200 => serde_json::from_slice::<Loaded>(&bytes)
                .map(Answer::Ok)
                .map_err(|e| {
                    Failure::BadResponse(format!(
                        "{e} in {:?}",
                        String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
                    ))
                }),
            409 => Ok(Answer::Conflict),
            s => Ok(Answer::Other(s, api_error(&bytes))),
        }
    }
}

/// The replicas (indices into `results`) to announce the table to: those
/// that could not take it, when at least one other holds it. A table that
/// no replica took is not announced, so a table every replica refuses
/// never takes the whole proxy out of service.
pub fn to_announce(results: &[ReplicaSync]) -> Vec<usize> {
    if !results.iter().any(ReplicaSync::synced) {
        return Vec::new();
    }
    results
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.synced())
        .map(|(i, _)| i)
        .collect()
}

/// The `error` field of an API error body, or the body itself.
fn api_error(bytes: &[u8]) -> String {
    #[derive(Deserialize)]
    struct E {
        error: String,
    }
    match serde_json::from_slice::<E>(bytes) {
        Ok(e) => e.error,
        Err(_) => String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned(),
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(name: &str, outcome: Outcome) -> ReplicaSync {
        ReplicaSync {
            name: name.into(),
            addr: "127.0.0.1:9445".parse().unwrap_or_else(|_| unreachable!()),
            outcome,
            previous_generation: 0,
            push_latency: None,
        }
    }

    #[test]
    fn replicas_behind_a_peer_that_holds_the_table_are_announced_to() {
        let results = [
            r("a", Outcome::Pushed),
            r("b", Outcome::Failed(Failure::Timeout)),
            r("c", Outcome::InSync),
            r("d", Outcome::Failed(Failure::Connect("refused".into()))),
        ];
        assert_eq!(to_announce(&results), vec![1, 3]);
    }

    #[test]
    fn a_table_no_replica_took_or_every_replica_holds_is_not_announced() {
        let refused = Outcome::Failed(Failure::Refused {
            status: 400,
            message: "bad".into(),
        });
        assert!(to_announce(&[r("a", refused.clone()), r("b", refused)]).is_empty());
        assert!(to_announce(&[r("a", Outcome::InSync), r("b", Outcome::Pushed)]).is_empty());
        assert!(to_announce(&[]).is_empty());
    }
}
