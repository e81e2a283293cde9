//! Forwarding to the upstream resolvers: UDP with a timeout per upstream,
//! TCP when the answer is truncated, failover in order past upstreams that
//! fail or answer with an error, per-upstream health judged from whether
//! the upstream says anything to anyone ([`crate::upstream_health`]),
//! failures of names and zones kept to those names and zones
//! ([`crate::forward_failures`]), a TTL-bounded cache, and stale answers
//! from it while no upstream answers (RFC 8767).

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, OpCode, Query, ResponseCode};
use hickory_proto::rr::{LowerName, Name, Record};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::Upstreams;
use crate::forward_failures::{Failures, Held, Keys};
use crate::upstream_health::{Blame, Change, DOWN_AFTER_ZONES, UpstreamHealth, Use};

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

/// Forwarding state shared by every listener: the answer cache, what
/// recent responses and silences say about each upstream, and which names
/// and zones keep failing.
#[derive(Default)]
pub struct Forwarder {
    cache: Mutex<AnswerCache>,
    health: Mutex<HashMap<SocketAddr, UpstreamHealth>>,
    failures: Mutex<Failures>,
    /// Keys the name and zone hashes per process, so that clients cannot
    /// choose names that collide.
    hasher: RandomState,
    /// When a zone hold was last logged, and how many were not logged
    /// since (clients choose the zones: one line per interval at most).
    hold_log: Mutex<(Option<Instant>, u64)>,
}

/// The answer cache: two generations, so that a flood of new names (random
/// NXDOMAIN names, say) pushes out the least recently stored or used
/// answers rather than emptying the cache. Stored answers go to the young
/// generation; when it holds half the capacity it becomes the old one and
/// the previous old one is dropped. An answer used (by the fast path or
/// the handler) moves back to the young one.
#[derive(Default)]
struct AnswerCache {
    young: HashMap<Key, Cached>,
    old: HashMap<Key, Cached>,
    /// The configured capacity, as of the last store.
    capacity: usize,
}

impl AnswerCache {
    /// The answer under `key`, moved to the young generation.
    fn get(&mut self, key: &[u8]) -> Option<&Cached> {
        if !self.young.contains_key(key) {
            self.touch(key);
        }
        self.young.get(key)
    }

    fn contains(&self, key: &[u8]) -> bool {
        self.young.contains_key(key) || self.old.contains_key(key)
    }

    /// Room for one more answer in the young generation.
    fn make_room(&mut self) {
        if self.young.len() >= (self.capacity / 2).max(1) {
            self.old = std::mem::take(&mut self.young);
        }
    }

    /// Moves `key` to the young generation, if it is in the old one.
    fn touch(&mut self, key: &[u8]) {
        if let Some((k, c)) = self.old.remove_entry(key) {
            self.make_room();
            self.young.insert(k, c);
        }
    }

    /// Stores `c` under `key`, within `capacity` answers.
    fn insert(&mut self, key: Key, c: Cached, capacity: usize) {
        self.capacity = capacity;
        self.old.remove(&key);
        if !self.young.contains_key(&key) {
            self.make_room();
        }
        self.young.insert(key, c);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.young.len() + self.old.len()
    }
}

/// Shortest time between two log lines about held zones.
const HOLD_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The zone key of `name` for upstream health: its last two labels, so
/// that random labels under one domain, at any depth, are one zone.
fn health_zone(name: &LowerName) -> Name {
    Name::from(name).trim_to(2)
}

/// The zone of `name` for the failure state: its parent, unless that is a
/// top-level domain or the root (never held).
fn failure_zone(name: &LowerName) -> Option<Name> {
    let name = Name::from(name);
    (name.num_labels() >= 3).then(|| name.base_name())
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
        let mut cache = self.cache.lock().ok()?;
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
        let mut cache = self.cache.lock().ok()?;
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

    /// Whether the cache holds an answer for `key`, fresh or expired: the
    /// name resolved before, so its zone's failures do not hold it.
    fn known(&self, key: &[u8]) -> bool {
        self.cache.lock().is_ok_and(|c| c.contains(key))
    }

    fn hash(&self, bytes: &[u8]) -> u64 {
        self.hasher.hash_one(bytes)
    }

    /// The failure-state keys of a query for `name` with cache key `key`.
    fn keys(&self, name: &LowerName, key: &[u8]) -> Keys {
        Keys {
            name: self.hash(key),
            zone: failure_zone(name)
                .map(|z| self.hash(&crate::wire::wire_name(&LowerName::new(&z)))),
        }
    }

    /// Answers from the cache, or asks the upstreams: in order, skipping
    /// those that count as down while another counts as up (one query at a
    /// time probes them), trying the next after a timeout, an error or an
    /// answer other than NOERROR and NXDOMAIN. A name or zone that keeps
    /// failing while the upstreams answer others is not asked during its
    /// hold. When no upstream gives an answer, an expired cached answer is
    /// served if it is recent enough (RFC 8767), else the last upstream's
    /// error answer. None means SERVFAIL.
    pub async fn resolve(&self, up: &Upstreams, query: &Query) -> Option<Message> {
        let lower = LowerName::new(query.name());
        let key = cache_key(&lower, query.query_type().into());
        let now = Instant::now();
        if let Some(m) = self.cached(&key, now, Duration::ZERO) {
            return Some(m);
        }
        let keys = self.keys(&lower, &key);
        let known = self.known(&key);
        let held = self
            .failures
            .lock()
            .ok()
            .and_then(|f| f.held(keys, known, now));
        if let Some(held) = held {
            crate::metrics::metrics()
                .forward_held
                .get_or_create(&crate::metrics::ScopeLabels {
                    scope: held.label().to_string(),
                })
                .inc();
            tracing::debug!(name = %query.name(), scope = held.label(), "held: not asking the upstreams");
            return self.stale(&key, up, query);
        }
        let zone = self.hash(&crate::wire::wire_name(&LowerName::new(&health_zone(
            &lower,
        ))));
        let mut msg = Message::query();
        msg.metadata.id = rand::random();
        msg.metadata.recursion_desired = true;
        msg.add_query(query.clone());
        let bytes = msg.to_vec().ok()?;
        let mut fallback = None;
        let mut query_blamed = false;
        for &server in &up.servers {
            // Decided when the upstream's turn comes, so that a probe is
            // claimed only by a query that really sends it.
            let turn = match self.health.lock() {
                Ok(mut health) => {
                    let others_up = up.servers.iter().any(|s| {
                        *s != server && !health.get(s).is_some_and(UpstreamHealth::is_down)
                    });
                    health.entry(server).or_default().plan(
                        Instant::now(),
                        up.timeout.saturating_mul(2),
                        !others_up,
                    )
                }
                Err(_) => Use::Ask,
            };
            if turn == Use::Skip {
                continue;
            }
            let sent = Instant::now();
            match ask(server, &bytes, msg.metadata.id, up.timeout).await {
                Some(m) => {
                    self.note(server, |h| h.answered(Instant::now()));
                    if matches!(
                        m.metadata.response_code,
                        ResponseCode::NoError | ResponseCode::NXDomain
                    ) {
                        let cleared = match self.failures.lock() {
                            Ok(mut f) => f.answered(keys).then(|| f.len()),
                            Err(_) => None,
                        };
                        if let Some(len) = cleared {
                            set_failure_entries(len);
                        }
                        self.store(up, key, query, &m);
                        return Some(m);
                    }
                    tracing::debug!(%server, rcode = %m.metadata.response_code, "upstream gave an error answer, trying the next");
                    fallback = Some(m);
                }
                None => {
                    let mut blame = Blame::Upstream;
                    self.note(server, |h| {
                        let (b, change) = h.failed(zone, sent, Instant::now(), up.down_backoff);
                        blame = b;
                        change
                    });
                    query_blamed |= blame == Blame::Query;
                    crate::metrics::metrics()
                        .unanswered
                        .get_or_create(&crate::metrics::BlameLabels {
                            upstream: server.to_string(),
                            blame: match blame {
                                Blame::Upstream => "upstream",
                                Blame::Query => "query",
                            }
                            .to_string(),
                        })
                        .inc();
                }
            }
        }
        if query_blamed && fallback.is_none() {
            self.query_failed(keys, &lower);
        }
        self.stale(&key, up, query).or(fallback)
    }

    /// The expired cached answer for `key` if recent enough, counted.
    fn stale(&self, key: &[u8], up: &Upstreams, query: &Query) -> Option<Message> {
        let m = self.cached(key, Instant::now(), up.serve_stale)?;
        crate::metrics::metrics().stale_answers.inc();
        tracing::debug!(name = %query.name(), "no upstream answer: serving a stale answer");
        Some(m)
    }

    /// Notes that a query keyed `keys` for `name` got no answer while an
    /// upstream answered others; logs a zone put on hold (rate-limited,
    /// since clients choose the zones).
    fn query_failed(&self, keys: Keys, name: &LowerName) {
        let now = Instant::now();
        let (newly, (names, zones)) = match self.failures.lock() {
            Ok(mut f) => (f.failed(keys, now), f.len()),
            Err(_) => return,
        };
        set_failure_entries((names, zones));
        let m = crate::metrics::metrics();
        let Some(held) = newly else {
            return;
        };
        m.holds
            .get_or_create(&crate::metrics::ScopeLabels {
                scope: held.label().to_string(),
            })
            .inc();
        if held != Held::Zone {
            tracing::debug!(%name, "a name keeps failing: held");
            return;
        }
        let Ok(mut log) = self.hold_log.lock() else {
            return;
        };
        if log
            .0
            .is_some_and(|t| now.saturating_duration_since(t) < HOLD_LOG_INTERVAL)
        {
            log.1 += 1;
            return;
        }
        let zone = failure_zone(name)
            .map(|z| z.to_string())
            .unwrap_or_default();
        tracing::info!(
            %zone,
            not_logged = log.1,
            "names under this zone get no answer while the upstreams answer others: new names under it get SERVFAIL at once for a while"
        );
        *log = (Some(now), 0);
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
                    zones = DOWN_AFTER_ZONES,
                    "upstream down: no response to anyone while queries of unrelated zones timed out; asked only when no other upstream is up, else probed"
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
    /// within its size (see [`AnswerCache`]).
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
        cache.insert(
            key,
            Cached {
                expires: now + Duration::from_secs(u64::from(ttl)),
                message: m.clone(),
                wire: wire_answer(query, m),
            },
            up.cache_entries,
        );
    }
}

/// Sets `oooi_dns_forward_failing_entries` to the failure state's size.
fn set_failure_entries((names, zones): (usize, usize)) {
    let m = crate::metrics::metrics();
    for (scope, n) in [("name", names), ("zone", zones)] {
        m.failure_entries
            .get_or_create(&crate::metrics::ScopeLabels {
                scope: scope.to_string(),
            })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
}

/// TTL of a stale answer (RFC 8767 recommends 30 seconds).
pub const STALE_TTL: u32 = 30;

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

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Cached {
        Cached {
            expires: Instant::now(),
            message: Message::query(),
            wire: None,
        }
    }

    fn key(n: usize) -> Key {
        n.to_be_bytes().to_vec().into_boxed_slice()
    }

    #[test]
    fn a_flood_of_new_answers_keeps_the_cache_bounded_and_the_recently_used() {
        let mut c = AnswerCache::default();
        c.insert(key(0), entry(), 100);
        for n in 1..10_000 {
            c.insert(key(n), entry(), 100);
            assert!(c.len() <= 100, "{} answers", c.len());
            if n % 20 == 0 {
                // Used now and then by the handler: kept.
                assert!(c.get(&key(0)).is_some());
            }
        }
        assert!(c.contains(&key(0)));
        assert!(c.contains(&key(9_999)));
        assert!(!c.contains(&key(1)), "the oldest unused answer is gone");
    }

    #[test]
    fn storing_an_answer_again_keeps_one_copy() {
        let mut c = AnswerCache::default();
        for _ in 0..3 {
            c.insert(key(1), entry(), 4);
            c.insert(key(2), entry(), 4);
        }
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn zones_of_names() {
        let name = |s: &str| LowerName::new(&Name::from_ascii(s).expect("name"));
        // Random labels at any depth under one domain: one zone.
        assert_eq!(
            health_zone(&name("x1.y.dead.example.")).to_ascii(),
            "dead.example."
        );
        assert_eq!(
            health_zone(&name("r.Dead.Example.")).to_ascii(),
            "dead.example."
        );
        assert_eq!(
            failure_zone(&name("r.dead.example.")).map(|z| z.to_ascii()),
            Some("dead.example.".to_string())
        );
        assert_eq!(failure_zone(&name("dead.example.")), None, "never a TLD");
        assert_eq!(failure_zone(&name("com.")), None);
    }
}
