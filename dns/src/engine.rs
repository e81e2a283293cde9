//! The answering engine: the config in force (with the addresses that fail
//! their health check left out), the fast path and the hickory handler
//! behind it, and the forwarder they share. No sockets: the server feeds it
//! packets, the health checks feed it the down addresses.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use hickory_proto::op::{Header, HeaderCounts, Message, ResponseCode};
use hickory_proto::rr::Record;
use hickory_proto::serialize::binary::BinEncoder;
use hickory_server::net::NetError;
use hickory_server::net::runtime::TokioTime;
use hickory_server::net::xfer::Protocol;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponse;

use crate::config::Config;
use crate::fast::{self, Fast, MAX_REPLY};
use crate::forward::Forwarder;
use crate::handler::{Handler, SharedState, State};
use crate::in_flight::{InFlight, Place, Refused};

/// UDP queries for the handler (forwarded names, odd packets) that may be in
/// progress at once; more are dropped, and clients retry.
pub const MAX_SLOW_IN_FLIGHT: usize = 4096;

/// Of those, the most one client (an IPv4 address or an IPv6 /64) may
/// hold: a client asking slow names as fast as it can fills its share, not
/// every place. Generous for a VM, or a node whose pods share its address.
pub const MAX_SLOW_PER_CLIENT: usize = MAX_SLOW_IN_FLIGHT / 16;

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
    slow: InFlight,
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
            slow: InFlight::new(MAX_SLOW_IN_FLIGHT, MAX_SLOW_PER_CLIENT),
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

    /// A place among the handler's UDP queries in progress for a query
    /// from `client` (at most [`MAX_SLOW_IN_FLIGHT`], and
    /// [`MAX_SLOW_PER_CLIENT`] per client), or why there is none.
    pub fn try_slow_permit(&self, client: IpAddr) -> Result<Place, Refused> {
        self.slow.take(client)
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
