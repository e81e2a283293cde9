//! Forwarding to the upstream resolvers: UDP with a timeout per upstream,
//! TCP when the answer is truncated, failover in order past upstreams that
//! fail or answer with an error, per-upstream health from many queries
//! ([`crate::upstream_health`]), a TTL-bounded cache, and stale answers
//! from it while no upstream answers (RFC 8767).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, OpCode, Query, ResponseCode};
use hickory_proto::rr::{LowerName, Name, Record};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::Upstreams;
use crate::upstream_health::{Change, DOWN_AFTER_NAMES, UpstreamHealth, Use};

/// A cached upstream answer in wire form, for the fast path: the sections
/// that follow the question, as the handler would encode them.
#[derive(Debug)]
pub struct WireAnswer {
    /// Response code (4 bits).
    pub rcode: u8,
    /// Answer, authority and additional counts.
    pub counts: [u16; 3],
    /// Encoded records. Compression pointers assume the question at offset
    /// 12 (same length whatever the client's case).
    pub body: Box<[u8]>,
    /// Offsets in `body` of the TTLs of the answer and authority records,
    /// which are capped to the time left in the cache.
    pub ttl_offsets: Box<[usize]>,
}

struct Cached {
    expires: Instant,
    message: Message,
    wire: Option<WireAnswer>,
}

/// Cache key: the lowercase wire-format name followed by the query type
/// (big endian), so that the fast path can look it up from a stack buffer.
type Key = Box<[u8]>;

/// The cache key of `name` and `qtype`.
pub fn cache_key(name: &LowerName, qtype: u16) -> Box<[u8]> {
    let mut k = crate::wire::wire_name(name).into_vec();
    k.extend_from_slice(&qtype.to_be_bytes());
    k.into_boxed_slice()
}

/// Forwarding state shared by every listener: the answer cache and what
/// recent queries say about each upstream.
#[derive(Default)]
pub struct Forwarder {
    cache: Mutex<HashMap<Key, Cached>>,
    health: Mutex<HashMap<SocketAddr, UpstreamHealth>>,
}

/// Seconds left until `expires`, for TTL capping.
fn left(expires: Instant, now: Instant) -> u32 {
    u32::try_from((expires - now).as_secs()).unwrap_or(u32::MAX)
}

/// Skips one encoded name at `at`; returns the offset after it.
fn skip_name(b: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let l = *b.get(at)?;
        match l {
            0 => return Some(at + 1),
            l if l & 0xc0 == 0xc0 => return Some(at + 2),
            l if l & 0xc0 == 0 => at += 1 + usize::from(l),
            _ => return None,
        }
    }
}

/// Encodes `m`'s sections as they would follow `query` in a reply.
fn wire_answer(query: &Query, m: &Message) -> Option<WireAnswer> {
    let rcode = u16::from(m.metadata.response_code);
    if rcode > 15 {
        return None;
    }
    let qname = Name::from(&LowerName::new(query.name()));
    // Owners spelled like the question (in any case) are written as a
    // pointer to it, so that each client reads back its own spelling.
    let owned = |r: &Record| {
        let mut r = r.clone();
        if r.name == qname {
            r.name = qname.clone();
        }
        r
    };
    let mut msg = Message::response(0, OpCode::Query);
    msg.add_query(Query::query(qname.clone(), query.query_type()));
    msg.add_answers(m.answers.iter().map(owned));
    msg.add_authorities(m.authorities.iter().map(owned));
    msg.add_additionals(m.additionals.iter().map(owned));
    let bytes = msg.to_vec().ok()?;
    let qend = skip_name(&bytes, 12)? + 4;
    let count = |at: usize| u16::from_be_bytes([bytes[at], bytes[at + 1]]);
    let counts = [count(6), count(8), count(10)];
    let body: Box<[u8]> = bytes.get(qend..)?.into();
    let mut ttl_offsets = Vec::new();
    let mut at = 0;
    for _ in 0..(counts[0] + counts[1]) {
        at = skip_name(&body, at)?;
        ttl_offsets.push(at + 4);
        let rdlen = u16::from_be_bytes([*body.get(at + 8)?, *body.get(at + 9)?]);
        at += 10 + usize::from(rdlen);
    }
    Some(WireAnswer {
        rcode: rcode as u8,
        counts,
        body,
        ttl_offsets: ttl_offsets.into_boxed_slice(),
    })
}

impl Forwarder {
    /// Runs `f` on the cached wire answer under `key` (see [`cache_key`]),
    /// with the seconds left in the cache, if there is one.
    pub fn with_cached<R>(&self, key: &[u8], f: impl FnOnce(&WireAnswer, u32) -> R) -> Option<R> {
        let now = Instant::now();
        let cache = self.cache.lock().ok()?;
        let c = cache.get(key)?;
        if c.expires <= now {
            return None;
        }
        Some(f(c.wire.as_ref()?, left(c.expires, now)))
    }

    /// The cached answer under `key`: fresh (TTLs capped to the time left),
    /// or, with `stale` above zero, expired for less than `stale` (TTLs set
    /// to [`STALE_TTL`], RFC 8767).
    fn cached(&self, key: &[u8], now: Instant, stale: Duration) -> Option<Message> {
        let cache = self.cache.lock().ok()?;
        let c = cache.get(key)?;
        let fresh = c.expires > now;
        if !fresh && (stale.is_zero() || now >= c.expires + stale) {
            return None;
        }
        let left = left(c.expires.max(now), now);
        let mut m = c.message.clone();
        for r in m.answers.iter_mut().chain(m.authorities.iter_mut()) {
            r.ttl = if fresh { r.ttl.min(left) } else { STALE_TTL };
        }
        Some(m)
    }

    /// Answers from the cache, or asks the upstreams: in order, skipping
    /// those that count as down (one query at a time probes them), trying
    /// the next after a timeout, an error or an answer other than NOERROR
    /// and NXDOMAIN. When none gives one, an expired cached answer is served
    /// if it is recent enough (RFC 8767), else the last upstream's error
    /// answer. None means SERVFAIL.
    pub async fn resolve(&self, up: &Upstreams, query: &Query) -> Option<Message> {
        let key = cache_key(&LowerName::new(query.name()), query.query_type().into());
        let now = Instant::now();
        if let Some(m) = self.cached(&key, now, Duration::ZERO) {
            return Some(m);
        }
        let name = name_hash(&key);
        let mut msg = Message::query();
        msg.metadata.id = rand::random();
        msg.metadata.recursion_desired = true;
        msg.add_query(query.clone());
        let bytes = msg.to_vec().ok()?;
        let mut fallback = None;
        for &server in &up.servers {
            // Decided when the upstream's turn comes, so that a probe is
            // claimed only by a query that really sends it.
            let turn = match self.health.lock() {
                Ok(mut health) => health
                    .entry(server)
                    .or_default()
                    .plan(Instant::now(), up.timeout.saturating_mul(2)),
                Err(_) => Use::Ask,
            };
            if turn == Use::Skip {
                continue;
            }
            match ask(server, &bytes, msg.metadata.id, up.timeout).await {
                Some(m) => {
                    self.note(server, |h| h.answered());
                    if matches!(
                        m.metadata.response_code,
                        ResponseCode::NoError | ResponseCode::NXDomain
                    ) {
                        self.store(up, key, query, &m);
                        return Some(m);
                    }
                    tracing::debug!(%server, rcode = %m.metadata.response_code, "upstream gave an error answer, trying the next");
                    fallback = Some(m);
                }
                None => self.note(server, |h| h.failed(name, Instant::now(), up.down_backoff)),
            }
        }
        if let Some(m) = self.cached(&key, Instant::now(), up.serve_stale) {
            crate::metrics::metrics().stale_answers.inc();
            tracing::debug!(name = %query.name(), "no upstream answered: serving a stale answer");
            return Some(m);
        }
        fallback
    }

    /// Sets `oooi_dns_upstream_up` of each of `servers` from what is known.
    pub fn prime_metrics(&self, servers: &[SocketAddr]) {
        let Ok(health) = self.health.lock() else {
            return;
        };
        for s in servers {
            let down = health.get(s).is_some_and(UpstreamHealth::is_down);
            crate::metrics::metrics()
                .upstream_up
                .get_or_create(&crate::metrics::UpstreamLabels {
                    upstream: s.to_string(),
                })
                .set(i64::from(!down));
        }
    }

    /// Applies `f` to `server`'s health and reports a change.
    fn note(&self, server: SocketAddr, f: impl FnOnce(&mut UpstreamHealth) -> Option<Change>) {
        let change = match self.health.lock() {
            Ok(mut health) => f(health.entry(server).or_default()),
            Err(_) => None,
        };
        let up = crate::metrics::metrics()
            .upstream_up
            .get_or_create(&crate::metrics::UpstreamLabels {
                upstream: server.to_string(),
            })
            .clone();
        match change {
            Some(Change::Down) => {
                up.set(0);
                tracing::warn!(
                    upstream = %server,
                    names = DOWN_AFTER_NAMES,
                    "upstream down: queries for different names failed in a row; skipping it, then probing"
                );
            }
            Some(Change::Up) => {
                up.set(1);
                tracing::info!(upstream = %server, "upstream answers again");
            }
            None => {}
        }
    }

    /// Caches a good answer within its TTL (capped), keeping the cache
    /// within its size.
    fn store(&self, up: &Upstreams, key: Key, query: &Query, m: &Message) {
        if up.cache_entries == 0 {
            return;
        }
        let ttl = m
            .answers
            .iter()
            .chain(m.authorities.iter())
            .map(|r| r.ttl)
            .min()
            .unwrap_or(0)
            .min(up.max_cache_ttl);
        if ttl == 0 {
            return;
        }
        let now = Instant::now();
        let Ok(mut cache) = self.cache.lock() else {
            return;
        };
        if cache.len() >= up.cache_entries {
            cache.retain(|_, c| c.expires + up.serve_stale > now);
            if cache.len() >= up.cache_entries {
                cache.clear();
            }
        }
        cache.insert(
            key,
            Cached {
                expires: now + Duration::from_secs(u64::from(ttl)),
                message: m.clone(),
                wire: wire_answer(query, m),
            },
        );
    }
}

/// TTL of a stale answer (RFC 8767 recommends 30 seconds).
pub const STALE_TTL: u32 = 30;

/// A hash of a cache key, naming the query's name and type for the
/// upstream health model.
fn name_hash(key: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    h.finish()
}

/// One exchange with `server` within `timeout`, with its metrics and log.
async fn ask(server: SocketAddr, bytes: &[u8], id: u16, timeout: Duration) -> Option<Message> {
    let started = Instant::now();
    let labels = crate::metrics::UpstreamLabels {
        upstream: server.to_string(),
    };
    match tokio::time::timeout(timeout, exchange(server, bytes, id)).await {
        Ok(Ok(m)) => {
            crate::metrics::metrics()
                .upstream_duration
                .get_or_create(&labels)
                .observe(started.elapsed().as_secs_f64());
            tracing::debug!(%server, ms = started.elapsed().as_millis() as u64, "upstream answered");
            return Some(m);
        }
        // Per query at debug: a client asking for slow names must not
        // flood the log; the upstream's state changes are logged, and the
        // failures counted.
        Ok(Err(e)) => tracing::debug!(%server, error = %e, "upstream failed"),
        Err(_) => tracing::debug!(%server, "upstream timed out"),
    }
    crate::metrics::metrics()
        .upstream_failures
        .get_or_create(&labels)
        .inc();
    None
}

async fn exchange(server: SocketAddr, bytes: &[u8], id: u16) -> std::io::Result<Message> {
    let bind: SocketAddr = if server.is_ipv4() {
        "0.0.0.0:0".parse().map_err(std::io::Error::other)?
    } else {
        "[::]:0".parse().map_err(std::io::Error::other)?
    };
    let sock = tokio::net::UdpSocket::bind(bind).await?;
    sock.connect(server).await?;
    sock.send(bytes).await?;
    let mut buf = vec![0u8; 4096];
    loop {
        let n = sock.recv(&mut buf).await?;
        let Ok(m) = Message::from_vec(&buf[..n]) else {
            continue;
        };
        if m.metadata.id != id {
            continue;
        }
        if m.metadata.truncation {
            return exchange_tcp(server, bytes).await;
        }
        return Ok(m);
    }
}

async fn exchange_tcp(server: SocketAddr, bytes: &[u8]) -> std::io::Result<Message> {
    let mut s = tokio::net::TcpStream::connect(server).await?;
    let len = u16::try_from(bytes.len()).map_err(std::io::Error::other)?;
    s.write_all(&len.to_be_bytes()).await?;
    s.write_all(bytes).await?;
    let mut lb = [0u8; 2];
    s.read_exact(&mut lb).await?;
    let mut buf = vec![0u8; u16::from_be_bytes(lb) as usize];
    s.read_exact(&mut buf).await?;
    Message::from_vec(&buf).map_err(std::io::Error::other)
}
