//! The hickory `RequestHandler`: one per listener address, so that the view
//! can be chosen by the address a query arrived on (hickory does not say).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, Metadata, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, SOA};
use hickory_proto::rr::{LowerName, Name, RData, Record, RecordType};
use hickory_server::net::runtime::Time;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::answer::{Answer, answer};
use crate::config::{Config, Upstreams};

/// The live config, swapped whole on reload.
pub type SharedConfig = Arc<RwLock<Arc<Config>>>;

/// Answers queries that arrive on `local`.
pub struct Handler {
    local: SocketAddr,
    config: SharedConfig,
    forwarder: Arc<Forwarder>,
}

impl Handler {
    /// A handler for the listener bound to `local`.
    pub fn new(local: SocketAddr, config: SharedConfig, forwarder: Arc<Forwarder>) -> Self {
        Self {
            local,
            config,
            forwarder,
        }
    }

    fn current(&self) -> Arc<Config> {
        match self.config.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }
}

fn soa_record(owner: &Name, ttl: u32) -> Record {
    let mname = Name::from_str("ns.oooi.invalid.").unwrap_or_else(|_| Name::root());
    let rname = Name::from_str("hostmaster.oooi.invalid.").unwrap_or_else(|_| Name::root());
    Record::from_rdata(
        owner.clone(),
        ttl,
        RData::SOA(SOA::new(mname, rname, 1, 3600, 600, 86_400, ttl)),
    )
}

/// Forwarding state shared by every listener: the answer cache and the time
/// until which all upstreams are considered down.
#[derive(Default)]
pub struct Forwarder {
    cache: Mutex<HashMap<(LowerName, RecordType), (Instant, Message)>>,
    down_until: Mutex<Option<Instant>>,
}

impl Forwarder {
    /// Answers from the cache, or asks the upstreams. None means SERVFAIL.
    pub async fn resolve(&self, up: &Upstreams, query: &Query) -> Option<Message> {
        let key = (LowerName::new(query.name()), query.query_type());
        let now = Instant::now();
        if let Ok(cache) = self.cache.lock()
            && let Some((expires, msg)) = cache.get(&key)
            && *expires > now
        {
            let left = u32::try_from((*expires - now).as_secs()).unwrap_or(u32::MAX);
            let mut m = msg.clone();
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
                    cache.retain(|_, (e, _)| *e > now);
                    if cache.len() >= up.cache_entries {
                        cache.clear();
                    }
                }
                cache.insert(key, (now + Duration::from_secs(u64::from(ttl)), m.clone()));
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

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        // Echo EDNS (RFC 6891): advertise our buffer, capped at 1232 bytes
        // (the DNS flag day 2020 size) and never below 512.
        let resp_edns = request.edns.as_ref().map(|req| {
            let mut e = hickory_proto::op::Edns::new();
            e.set_max_payload(req.max_payload().clamp(512, 1232));
            e
        });
        let mut builder = MessageResponseBuilder::from_message_request(request);
        if let Some(e) = &resp_edns {
            builder.edns(e);
        }
        let reply_err = |rc: ResponseCode| {
            let mut m = Metadata::response_from_request(&request.metadata);
            m.response_code = rc;
            m
        };
        let fail = |rc: ResponseCode| {
            let mut m = Metadata::new(request.metadata.id, MessageType::Response, OpCode::Query);
            m.response_code = rc;
            ResponseInfo::from(hickory_proto::op::Header {
                metadata: m,
                counts: Default::default(),
            })
        };
        if request.metadata.op_code != OpCode::Query
            || request.metadata.message_type != MessageType::Query
        {
            let r = builder.build_no_records(reply_err(ResponseCode::NotImp));
            return response_handle
                .send_response(r)
                .await
                .unwrap_or_else(|_| fail(ResponseCode::NotImp));
        }
        let Ok(info) = request.request_info() else {
            let r = builder.build_no_records(reply_err(ResponseCode::FormErr));
            return response_handle
                .send_response(r)
                .await
                .unwrap_or_else(|_| fail(ResponseCode::FormErr));
        };
        let config = self.current();
        let client: IpAddr = request.src().ip();
        let Some(view) = config.select_view(self.local, client) else {
            let r = builder.build_no_records(reply_err(ResponseCode::Refused));
            return response_handle
                .send_response(r)
                .await
                .unwrap_or_else(|_| fail(ResponseCode::Refused));
        };
        let original = info.query.original().clone();
        let qname = original.name().clone();
        let qtype = info.query.query_type();
        let result = answer(view, info.query.name(), qtype);
        let mut meta = Metadata::response_from_request(&request.metadata);
        meta.recursion_available = true;
        let mut answers = Vec::new();
        let mut soa = Vec::new();
        let mut authorities = Vec::new();
        let mut additionals = Vec::new();
        match result {
            Answer::Records { addrs, ttl } => {
                meta.authoritative = true;
                for ip in addrs {
                    let data = match ip {
                        IpAddr::V4(a) => RData::A(A(a)),
                        IpAddr::V6(a) => RData::AAAA(AAAA(a)),
                    };
                    answers.push(Record::from_rdata(qname.clone(), ttl, data));
                }
            }
            Answer::NoData { soa_owner, ttl } => {
                meta.authoritative = true;
                let owner = Name::from(&soa_owner);
                if qtype == RecordType::SOA && owner == qname {
                    answers.push(soa_record(&owner, ttl));
                } else {
                    soa.push(soa_record(&owner, ttl));
                }
            }
            Answer::NxDomain { soa_owner, ttl } => {
                meta.authoritative = true;
                meta.response_code = ResponseCode::NXDomain;
                soa.push(soa_record(&Name::from(&soa_owner), ttl));
            }
            Answer::Forward => match self.forwarder.resolve(&config.upstreams, &original).await {
                Some(mut m) => {
                    meta.response_code = m.metadata.response_code;
                    answers = std::mem::take(&mut m.answers);
                    authorities = std::mem::take(&mut m.authorities);
                    additionals = std::mem::take(&mut m.additionals);
                }
                None => meta.response_code = ResponseCode::ServFail,
            },
        }
        let rc = meta.response_code;
        crate::metrics::metrics()
            .queries
            .get_or_create(&crate::metrics::QueryLabels {
                view: view.name.clone(),
                qtype: qtype.to_string(),
                rcode: rc.to_string(),
            })
            .inc();
        let r = builder.build(
            meta,
            answers.iter(),
            authorities.iter(),
            soa.iter(),
            additionals.iter(),
        );
        match response_handle.send_response(r).await {
            Ok(info) => info,
            Err(e) => {
                tracing::warn!(error = %e, "cannot send response");
                fail(rc)
            }
        }
    }
}

/// Binds UDP and TCP on every listener of `config` and serves until the
/// process ends. One hickory `Server` per address.
pub async fn serve(config: SharedConfig) -> anyhow::Result<()> {
    let (addrs, http) = match config.read() {
        Ok(g) => (g.listen_addresses(), g.http),
        Err(p) => {
            let g = p.into_inner();
            (g.listen_addresses(), g.http)
        }
    };
    if let Some(http) = http {
        tokio::spawn(async move {
            if let Err(e) = crate::metrics::serve_http(http).await {
                tracing::error!(error = %e, "metrics endpoint failed");
            }
        });
    }
    let mut servers = Vec::new();
    let forwarder = Arc::new(Forwarder::default());
    for addr in addrs {
        let mut server =
            hickory_server::Server::new(Handler::new(addr, config.clone(), forwarder.clone()));
        server.register_socket(tokio::net::UdpSocket::bind(addr).await?);
        server.register_listener(
            tokio::net::TcpListener::bind(addr).await?,
            Duration::from_secs(10),
            64,
        );
        tracing::info!(%addr, "listening on UDP and TCP");
        servers.push(server);
    }
    for mut s in servers {
        s.block_until_done().await?;
    }
    Ok(())
}
