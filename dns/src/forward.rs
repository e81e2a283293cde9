//! Forwarding to the upstream resolvers: UDP with a timeout per upstream,
//! TCP when the answer is truncated, failover in order, a TTL-bounded cache,
//! and a short window of immediate SERVFAIL after every upstream failed.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, OpCode, Query, ResponseCode};
use hickory_proto::rr::{LowerName, Name, Record};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::Upstreams;

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
    let mut k = crate::fast::wire_name(name).into_vec();
    k.extend_from_slice(&qtype.to_be_bytes());
    k.into_boxed_slice()
}

/// Forwarding state shared by every listener: the answer cache and the time
/// until which all upstreams are considered down.
#[derive(Default)]
pub struct Forwarder {
    cache: Mutex<HashMap<Key, Cached>>,
    down_until: Mutex<Option<Instant>>,
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

    /// Answers from the cache, or asks the upstreams. None means SERVFAIL.
    pub async fn resolve(&self, up: &Upstreams, query: &Query) -> Option<Message> {
        let key = cache_key(&LowerName::new(query.name()), query.query_type().into());
        let now = Instant::now();
        if let Ok(cache) = self.cache.lock()
            && let Some(Cached {
                expires, message, ..
            }) = cache.get(&key)
            && *expires > now
        {
            let left = left(*expires, now);
            let mut m = message.clone();
            for r in m.answers.iter_mut().chain(m.authorities.iter_mut()) {
                r.ttl = r.ttl.min(left);
            }
            return Some(m);
        }
        if let Ok(d) = self.down_until.lock()
            && d.is_some_and(|t| t > now)
        {
            return None;
        }
        let Some(m) = forward(up, query).await else {
            if let Ok(mut d) = self.down_until.lock() {
                *d = Some(Instant::now() + up.down_backoff);
            }
            return None;
        };
        if up.cache_entries > 0 && m.metadata.response_code != ResponseCode::ServFail {
            let ttl = m
                .answers
                .iter()
                .chain(m.authorities.iter())
                .map(|r| r.ttl)
                .min()
                .unwrap_or(0)
                .min(up.max_cache_ttl);
            if ttl > 0
                && let Ok(mut cache) = self.cache.lock()
            {
                if cache.len() >= up.cache_entries {
                    cache.retain(|_, c| c.expires > now);
                    if cache.len() >= up.cache_entries {
                        cache.clear();
                    }
                }
                cache.insert(
                    key,
                    Cached {
                        expires: now + Duration::from_secs(u64::from(ttl)),
                        message: m.clone(),
                        wire: wire_answer(query, &m),
                    },
                );
            }
        }
        Some(m)
    }
}

/// Sends `query` to each upstream in order; first good answer wins.
async fn forward(up: &Upstreams, query: &Query) -> Option<Message> {
    let mut msg = Message::query();
    msg.metadata.id = rand::random();
    msg.metadata.recursion_desired = true;
    msg.add_query(query.clone());
    let bytes = msg.to_vec().ok()?;
    for server in &up.servers {
        let started = std::time::Instant::now();
        let res =
            tokio::time::timeout(up.timeout, exchange(*server, &bytes, msg.metadata.id)).await;
        match res {
            Ok(Ok(m)) => {
                crate::metrics::metrics()
                    .upstream_duration
                    .get_or_create(&crate::metrics::UpstreamLabels {
                        upstream: server.to_string(),
                    })
                    .observe(started.elapsed().as_secs_f64());
                tracing::debug!(%server, ms = started.elapsed().as_millis() as u64, "upstream answered");
                return Some(m);
            }
            Ok(Err(e)) => tracing::warn!(%server, error = %e, "upstream failed"),
            Err(_) => tracing::warn!(%server, "upstream timed out"),
        }
        crate::metrics::metrics()
            .upstream_failures
            .get_or_create(&crate::metrics::UpstreamLabels {
                upstream: server.to_string(),
            })
            .inc();
    }
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
