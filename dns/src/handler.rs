//! The hickory `RequestHandler`, the reference for every answer: TCP goes
//! through it, and so does every UDP query the fast path ([`crate::fast`])
//! does not take. One handler per listener address, so that the view can be
//! chosen by the address a query arrived on (hickory does not say).

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use hickory_proto::op::{MessageType, Metadata, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, SOA};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use hickory_server::net::runtime::Time;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;

use crate::answer::{Answer, SOA_MNAME, SOA_RNAME, SOA_TIMERS, answer};
use crate::config::Config;
use crate::fast::FastTables;
use crate::forward::Forwarder;

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
        let state = self.state.load_full();
        let config = &state.config;
        let client: IpAddr = request.src().ip();
        let Some(view) = config.select_view(self.local, client) else {
            crate::metrics::metrics()
                .queries
                .get_or_create(&crate::metrics::QueryLabels {
                    view: "none".to_string(),
                    qtype: info.query.query_type().to_string(),
                    rcode: ResponseCode::Refused.to_string(),
                })
                .inc();
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
