//! The hickory `RequestHandler`, the reference for every answer: TCP goes
//! through it, and so does every UDP query the fast path ([`crate::fast`])
//! does not take. One handler per listener address, so that the view can be
//! chosen by the address a query arrived on (hickory does not say).

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use hickory_proto::op::{Edns, MessageType, Metadata, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, SOA, TXT};
use hickory_proto::rr::{DNSClass, LowerName, Name, RData, Record, RecordType};
use hickory_server::net::runtime::Time;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;

use crate::answer::{Answer, SOA_MNAME, SOA_RNAME, SOA_TIMERS, answer};
use crate::config::{Chaos, Config};
use crate::fast::{FastTables, MAX_REPLY};
use crate::forward::Forwarder;
use crate::metrics::{count_query, qtype_label};

/// One config with everything derived from it, swapped whole on reload.
#[derive(Debug)]
pub struct State {
    /// The validated config.
    pub config: Config,
    /// Fast-path answer tables built from it.
    pub fast: FastTables,
}

impl State {
    /// Derives the fast-path tables of `config`.
    pub fn new(config: Config) -> Self {
        let fast = FastTables::build(&config);
        State { config, fast }
    }
}

/// The live state: read per query without a lock, replaced on reload.
pub type SharedState = Arc<ArcSwap<State>>;

/// Answers queries that arrive on `local`.
#[derive(Clone)]
pub struct Handler {
    local: SocketAddr,
    state: SharedState,
    forwarder: Arc<Forwarder>,
}

impl Handler {
    /// A handler for the listener bound to `local`.
    pub fn new(local: SocketAddr, state: SharedState, forwarder: Arc<Forwarder>) -> Self {
        Self {
            local,
            state,
            forwarder,
        }
    }
}

fn soa_record(owner: &Name, ttl: u32) -> Record {
    let mname = Name::from_str(SOA_MNAME).unwrap_or_else(|_| Name::root());
    let rname = Name::from_str(SOA_RNAME).unwrap_or_else(|_| Name::root());
    let [serial, refresh, retry, expire] = SOA_TIMERS;
    Record::from_rdata(
        owner.clone(),
        ttl,
        RData::SOA(SOA::new(
            mname,
            rname,
            serial,
            refresh as i32,
            retry as i32,
            expire as i32,
            ttl,
        )),
    )
}

/// The reply header of an error answer, for when even sending it failed.
fn failed(request: &Request, rc: ResponseCode) -> ResponseInfo {
    let mut m = Metadata::new(request.metadata.id, MessageType::Response, OpCode::Query);
    m.response_code = rc;
    ResponseInfo::from(hickory_proto::op::Header {
        metadata: m,
        counts: Default::default(),
    })
}

/// Sends an answer with no records and `rc`.
async fn send_error<R: ResponseHandler>(
    request: &Request,
    edns: Option<&Edns>,
    rc: ResponseCode,
    handle: &mut R,
) -> ResponseInfo {
    let mut builder = MessageResponseBuilder::from_message_request(request);
    if let Some(e) = edns {
        builder.edns(e);
    }
    let mut m = Metadata::response_from_request(&request.metadata);
    m.response_code = rc;
    let r = builder.build_no_records(m);
    handle
        .send_response(r)
        .await
        .unwrap_or_else(|_| failed(request, rc))
}

/// The EDNS of our answer to a query with `req` (RFC 6891): our buffer
/// size, the client's capped at [`MAX_REPLY`] (the DNS flag day 2020 size)
/// and never below 512; version 0; the DO bit copied (RFC 3225).
pub fn response_edns(req: &Edns) -> Edns {
    let mut e = Edns::new();
    e.set_max_payload(req.max_payload().clamp(512, MAX_REPLY as u16));
    e.set_version(0);
    e.set_dnssec_ok(req.flags().dnssec_ok);
    e
}

/// Which configured string answers a CHAOS identity name.
type ChaosString = fn(&Chaos) -> Option<&String>;

/// The CHAOS-class identity names and which configured string answers each.
const CHAOS_NAMES: [(&str, ChaosString); 4] = [
    ("version.bind.", |c| c.version.as_ref()),
    ("version.server.", |c| c.version.as_ref()),
    ("hostname.bind.", |c| c.hostname.as_ref()),
    ("id.server.", |c| c.hostname.as_ref()),
];

/// The configured answer to a CHAOS TXT query for `name`, if any.
pub fn chaos_answer<'c>(chaos: &'c Chaos, name: &LowerName) -> Option<&'c str> {
    CHAOS_NAMES.iter().find_map(|(n, get)| {
        let known = Name::from_ascii(n).ok()?;
        (LowerName::new(&known) == *name)
            .then(|| get(chaos).map(String::as_str))
            .flatten()
    })
}

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        let state = self.state.load_full();
        let config = &state.config;
        let client: IpAddr = request.src().ip();
        let view = crate::views::select(config, self.local, client);
        let view_label = view.map_or("none", |v| v.name.as_str());
        let asked_type = match request.queries.queries() {
            [q] => qtype_label(q.query_type()),
            _ => "unknown",
        };
        let resp_edns = request.edns.as_ref().map(response_edns);
        let mut error = async |rc: ResponseCode, qtype: &str| {
            count_query(view_label, qtype, rc);
            send_error(request, resp_edns.as_ref(), rc, &mut response_handle).await
        };
        if request.metadata.op_code != OpCode::Query
            || request.metadata.message_type != MessageType::Query
        {
            return error(ResponseCode::NotImp, asked_type).await;
        }
        if request.edns.as_ref().is_some_and(|e| e.version() > 0) {
            return error(ResponseCode::BADVERS, asked_type).await;
        }
        let Ok(info) = request.request_info() else {
            return error(ResponseCode::FormErr, asked_type).await;
        };
        let Some(view) = view else {
            return error(ResponseCode::Refused, asked_type).await;
        };
        let original = info.query.original().clone();
        let qname = original.name().clone();
        let qtype = info.query.query_type();
        let mut meta = Metadata::response_from_request(&request.metadata);
        meta.recursion_available = true;
        let mut answers = Vec::new();
        let mut soa = Vec::new();
        let mut authorities = Vec::new();
        let mut additionals = Vec::new();
        if info.query.query_class() != DNSClass::IN {
            // Only class IN is answered or forwarded: another class for an
            // owned name must not get the IN data, and a CHAOS identity
            // query forwarded would tell VLAN clients the upstream's
            // software and host name.
            let text = (info.query.query_class() == DNSClass::CH
                && matches!(qtype, RecordType::TXT | RecordType::ANY))
            .then(|| chaos_answer(&config.chaos, info.query.name()))
            .flatten();
            let Some(text) = text else {
                return error(ResponseCode::Refused, asked_type).await;
            };
            let mut r = Record::from_rdata(
                qname.clone(),
                0,
                RData::TXT(TXT::new(vec![text.to_string()])),
            );
            r.dns_class = DNSClass::CH;
            meta.authoritative = true;
            answers.push(r);
        } else {
            match answer(view, info.query.name(), qtype) {
                Answer::Records { mut addrs, ttl } => {
                    meta.authoritative = true;
                    let rot = crate::spread::rotation(request.metadata.id, client);
                    crate::spread::rotate(&mut addrs, rot);
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
                Answer::Forward => {
                    match self.forwarder.resolve(&config.upstreams, &original).await {
                        Some(mut m) => {
                            meta.response_code = m.metadata.response_code;
                            answers = std::mem::take(&mut m.answers);
                            authorities = std::mem::take(&mut m.authorities);
                            additionals = std::mem::take(&mut m.additionals);
                            // The owner name as this client spelled it (the
                            // cache holds the first asker's spelling).
                            for r in answers
                                .iter_mut()
                                .chain(authorities.iter_mut())
                                .chain(additionals.iter_mut())
                            {
                                if r.name == qname {
                                    r.name = qname.clone();
                                }
                            }
                        }
                        None => meta.response_code = ResponseCode::ServFail,
                    }
                }
            }
        }
        let rc = meta.response_code;
        count_query(&view.name, qtype_label(qtype), rc);
        let mut builder = MessageResponseBuilder::from_message_request(request);
        if let Some(e) = &resp_edns {
            builder.edns(e);
        }
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
                failed(request, rc)
            }
        }
    }
}
