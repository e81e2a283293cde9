//! One client message in, one reply (or a drop) out: RFC 8415's server
//! side for IA_NA, pure.

use std::net::Ipv6Addr;

use dhcproto::v6::{
    DhcpOption, DhcpOptions, IAAddr, IANA, IAPD, IATA, Message, MessageType, OptionCode, Status,
    StatusCode,
};
use dhcproto::{Decodable, Decoder, Encodable, Name};

use super::duid::{self, Kind};
use super::leases::{Extend, Ia, LeaseTable, Record};
use crate::config::Mac;

/// What the I/O layer knows about a message besides its bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Context {
    /// Source MAC of the received frame, for a client on the server's own
    /// link (never for a relayed message: that frame is the relay's).
    pub frame_mac: Option<Mac>,
    /// RFC 6939 client link-layer address from the relay nearest the
    /// client ([`super::relay::Relayed::client_link_layer`]).
    pub relay_link_layer: Option<Mac>,
    /// Received on a unicast address: the server sends no Server Unicast
    /// option, so clients must multicast (RFC 8415 §18.4).
    pub unicast: bool,
    /// Unix seconds.
    pub now: u64,
}

/// Why a message got no reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// Not a decodable DHCPv6 message.
    Malformed,
    /// A server's or relay's message type, or one this server does not serve.
    NotAClientMessage,
    /// No Client Identifier where RFC 8415 requires one.
    MissingClientId,
    /// A Client Identifier that is not a DUID (too short, too long, bad body).
    InvalidClientId,
    /// Request, Renew, Release or Decline without a Server Identifier.
    MissingServerId,
    /// A Server Identifier that is not this server's: for another server.
    NotForUs,
    /// Solicit, Confirm or Rebind carrying a Server Identifier, which
    /// RFC 8415 §16 forbids.
    UnexpectedServerId,
    /// A Confirm without any address to confirm (§18.3.3: no reply).
    NothingToConfirm,
    /// An Information-request carrying an IA option (§16.12: discard).
    IaInInformationRequest,
    /// The reply could not be encoded.
    Encode,
}

impl Dropped {
    /// Label for metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Dropped::Malformed => "malformed",
            Dropped::NotAClientMessage => "not_a_client_message",
            Dropped::MissingClientId => "missing_client_id",
            Dropped::InvalidClientId => "invalid_client_id",
            Dropped::MissingServerId => "missing_server_id",
            Dropped::NotForUs => "not_for_us",
            Dropped::UnexpectedServerId => "unexpected_server_id",
            Dropped::NothingToConfirm => "nothing_to_confirm",
            Dropped::IaInInformationRequest => "ia_in_information_request",
            Dropped::Encode => "encode",
        }
    }
}

/// A change the lease log must make durable before the reply is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Store {
    /// A binding committed or extended.
    Put(Record),
    /// A binding ended (released, declined, displaced by the same MAC).
    Remove(Record),
}

/// The reply to send, and what to persist first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The reply, decoded form.
    pub reply: Message,
    /// The reply, encoded.
    pub bytes: Vec<u8>,
    /// Lease changes to make durable before sending.
    pub store: Vec<Store>,
}

/// The client as this message identifies it, and the time.
struct Client {
    duid: Vec<u8>,
    mac: Option<Mac>,
    now: u64,
}

impl Client {
    fn ia(&self, iaid: u32) -> Ia<'_> {
        Ia {
            duid: &self.duid,
            iaid,
            mac: self.mac,
        }
    }
}

/// The reply being built and the lease changes it commits to.
struct Out {
    reply: Message,
    store: Vec<Store>,
}

/// Handles one client message (not a Relay-Forward: the caller unwraps it).
pub fn handle(table: &mut LeaseTable, buf: &[u8], ctx: &Context) -> Result<Answer, Dropped> {
    let msg = Message::decode(&mut Decoder::new(buf)).map_err(|_| Dropped::Malformed)?;
    let ty = msg.msg_type();
    use MessageType as T;
    if !matches!(
        ty,
        T::Solicit
            | T::Request
            | T::Confirm
            | T::Renew
            | T::Rebind
            | T::Release
            | T::Decline
            | T::InformationRequest
    ) {
        return Err(Dropped::NotAClientMessage);
    }
    if ty == T::InformationRequest
        && msg.opts().iter().any(|o| {
            matches!(
                o,
                DhcpOption::IANA(_) | DhcpOption::IATA(_) | DhcpOption::IAPD(_)
            )
        })
    {
        return Err(Dropped::IaInInformationRequest);
    }
    let client_id = match msg.opts().get(OptionCode::ClientId) {
        Some(DhcpOption::ClientId(d)) => Some(d.clone()),
        _ => None,
    };
    let kind = match &client_id {
        Some(d) => Some(duid::parse(d).ok_or(Dropped::InvalidClientId)?),
        None if ty == T::InformationRequest => None,
        None => return Err(Dropped::MissingClientId),
    };
    let ours = duid::server_duid(table.config().server_mac);
    let server_id = match msg.opts().get(OptionCode::ServerId) {
        Some(DhcpOption::ServerId(d)) => Some(d.as_slice()),
        _ => None,
    };
    match (ty, server_id) {
        (T::Solicit | T::Confirm | T::Rebind, Some(_)) => return Err(Dropped::UnexpectedServerId),
        (T::Request | T::Renew | T::Release | T::Decline, None) => {
            return Err(Dropped::MissingServerId);
        }
        (_, Some(s)) if s != ours.as_slice() => return Err(Dropped::NotForUs),
        _ => {}
    }

    let reply_type = if ty == T::Solicit && !(rapid_commit(&msg) && table.config().rapid_commit) {
        T::Advertise
    } else {
        T::Reply
    };
    let mut reply = Message::new_with_id(reply_type, msg.xid());
    reply.opts_mut().insert(DhcpOption::ServerId(ours));
    if let Some(d) = &client_id {
        reply.opts_mut().insert(DhcpOption::ClientId(d.clone()));
    }
    if ctx.unicast && matches!(ty, T::Request | T::Renew | T::Release | T::Decline) {
        reply.opts_mut().insert(status(
            Status::UseMulticast,
            "send to All_DHCP_Relay_Agents_and_Servers",
        ));
        return encode(reply, Vec::new());
    }

    let client = client_id.map(|duid| Client {
        mac: duid::client_mac(
            ctx.relay_link_layer,
            ctx.frame_mac,
            kind.unwrap_or(Kind::Other),
        ),
        duid,
        now: ctx.now,
    });
    let mut out = Out {
        reply,
        store: Vec::new(),
    };
    match (ty, client) {
        (T::InformationRequest, _) => {}
        (T::Confirm, _) => confirm(table, &msg, &mut out.reply)?,
        (_, None) => return Err(Dropped::MissingClientId),
        (T::Solicit, Some(c)) => solicit(table, &msg, &c, &mut out),
        (T::Request, Some(c)) => request(table, &msg, &c, &mut out),
        (T::Renew | T::Rebind, Some(c)) => renew(table, &msg, &c, ty == T::Rebind, &mut out),
        (T::Release | T::Decline, Some(c)) => release(table, &msg, &c, ty == T::Decline, &mut out),
        _ => return Err(Dropped::NotAClientMessage),
    }
    if !matches!(ty, T::Release | T::Decline | T::Confirm) {
        requested_options(table, &msg, &mut out.reply);
    }
    encode(out.reply, out.store)
}

fn encode(reply: Message, store: Vec<Store>) -> Result<Answer, Dropped> {
    let bytes = reply.to_vec().map_err(|_| Dropped::Encode)?;
    Ok(Answer {
        reply,
        bytes,
        store,
    })
}

fn rapid_commit(msg: &Message) -> bool {
    msg.opts().get(OptionCode::RapidCommit).is_some()
}

fn status(status: Status, msg: &str) -> DhcpOption {
    DhcpOption::StatusCode(StatusCode {
        status,
        msg: msg.to_string(),
    })
}

fn ia_na(table: &LeaseTable, id: u32, addrs: &[(Ipv6Addr, bool)]) -> DhcpOption {
    let cfg = table.config();
    let mut opts = DhcpOptions::new();
    for (addr, live) in addrs {
        let (preferred_life, valid_life) = if *live {
            (cfg.preferred_lifetime, cfg.valid_lifetime)
        } else {
            (0, 0)
        };
        opts.insert(DhcpOption::IAAddr(IAAddr {
            addr: *addr,
            preferred_life,
            valid_life,
            opts: DhcpOptions::new(),
        }));
    }
    DhcpOption::IANA(IANA {
        id,
        t1: cfg.t1(),
        t2: cfg.t2(),
        opts,
    })
}

fn ia_na_status(id: u32, s: Status, text: &str) -> DhcpOption {
    let mut opts = DhcpOptions::new();
    opts.insert(status(s, text));
    DhcpOption::IANA(IANA {
        id,
        t1: 0,
        t2: 0,
        opts,
    })
}

/// IA_TA and IA_PD: this server has neither temporary addresses nor
/// prefixes to delegate, and says so inside each IA.
fn unserved_ias(msg: &Message, ta: Status, pd: Status, reply: &mut Message) {
    for o in msg.opts().iter() {
        let mut opts = DhcpOptions::new();
        match o {
            DhcpOption::IATA(ia) => {
                opts.insert(status(ta, "no temporary addresses on this link"));
                reply
                    .opts_mut()
                    .insert(DhcpOption::IATA(IATA { id: ia.id, opts }));
            }
            DhcpOption::IAPD(ia) => {
                opts.insert(status(pd, "no prefixes to delegate on this link"));
                reply.opts_mut().insert(DhcpOption::IAPD(IAPD {
                    id: ia.id,
                    t1: 0,
                    t2: 0,
                    opts,
                }));
            }
            _ => {}
        }
    }
}

fn ia_nas(msg: &Message) -> impl Iterator<Item = &IANA> {
    msg.opts().iter().filter_map(|o| match o {
        DhcpOption::IANA(ia) => Some(ia),
        _ => None,
    })
}

fn ia_addrs(opts: &DhcpOptions) -> Vec<Ipv6Addr> {
    opts.iter()
        .filter_map(|o| match o {
            DhcpOption::IAAddr(a) => Some(a.addr),
            _ => None,
        })
        .collect()
}

/// Commits the IA's binding; the records it displaced and the binding go to
/// `store` in that order.
fn bind(table: &mut LeaseTable, c: &Client, id: u32, store: &mut Vec<Store>) -> Option<Ipv6Addr> {
    let (record, displaced) = table.commit(c.ia(id), c.now).ok()?;
    let address = record.address;
    store.extend(displaced.into_iter().map(Store::Remove));
    store.push(Store::Put(record));
    Some(address)
}

/// The IA_NA answering one IA: its address, or NoAddrsAvail.
fn granted(table: &LeaseTable, id: u32, address: Option<Ipv6Addr>) -> DhcpOption {
    match address {
        Some(a) => ia_na(table, id, &[(a, true)]),
        None => ia_na_status(id, Status::NoAddrsAvail, "no addresses available"),
    }
}

fn solicit(table: &mut LeaseTable, msg: &Message, c: &Client, out: &mut Out) {
    let Out { reply, store } = out;
    let now = c.now;
    let commit = reply.msg_type() == MessageType::Reply;
    let mut ias = Vec::new();
    let mut any = false;
    for ia in ia_nas(msg) {
        let got = if commit {
            bind(table, c, ia.id, store)
        } else {
            table.offer(c.ia(ia.id), now).ok().map(|r| r.address)
        };
        any |= got.is_some();
        ias.push(granted(table, ia.id, got));
    }
    if !any {
        // §18.3.9: nothing to give in a later Request → only a status, in
        // an Advertise even under Rapid Commit: a client discards a Reply
        // to its Solicit that carries no Rapid Commit option.
        reply.set_msg_type(MessageType::Advertise);
        reply
            .opts_mut()
            .insert(status(Status::NoAddrsAvail, "no addresses available"));
        return;
    }
    for ia in ias {
        reply.opts_mut().insert(ia);
    }
    unserved_ias(msg, Status::NoAddrsAvail, Status::NoPrefixAvail, reply);
    if commit {
        reply.opts_mut().insert(DhcpOption::RapidCommit);
    } else {
        reply
            .opts_mut()
            .insert(DhcpOption::Preference(table.config().preference));
    }
}

fn request(table: &mut LeaseTable, msg: &Message, c: &Client, out: &mut Out) {
    let Out { reply, store } = out;
    let prefix = table.config().prefix;
    for ia in ia_nas(msg) {
        // §18.3.2: an address from another link means the client moved.
        if ia_addrs(&ia.opts).iter().any(|a| !prefix.contains(a)) {
            reply.opts_mut().insert(ia_na_status(
                ia.id,
                Status::NotOnLink,
                "address not on this link",
            ));
            continue;
        }
        let got = bind(table, c, ia.id, store);
        reply.opts_mut().insert(granted(table, ia.id, got));
    }
    unserved_ias(msg, Status::NoAddrsAvail, Status::NoPrefixAvail, reply);
}

fn renew(table: &mut LeaseTable, msg: &Message, c: &Client, rebind: bool, out: &mut Out) {
    let Out { reply, store } = out;
    let now = c.now;
    for ia in ia_nas(msg) {
        let mut addrs = ia_addrs(&ia.opts);
        // The IA's binding of an address the client left out is theirs too.
        if let Some(b) = table.binding(&c.duid, ia.id)
            && !addrs.contains(&b.address)
        {
            addrs.push(b.address);
        }
        let mut out = Vec::new();
        for a in addrs {
            match table.extend(c.ia(ia.id), a, now) {
                Extend::Extended(r) => {
                    store.push(Store::Put(r));
                    out.push((a, true));
                }
                // §18.3.4/§18.3.5: not for this link or client → lifetimes 0.
                Extend::NotAppropriate => out.push((a, false)),
                Extend::NoBinding if rebind => {
                    if let Some(r) = table.recover(c.ia(ia.id), a, now) {
                        store.push(Store::Put(r));
                        out.push((a, true));
                    }
                }
                Extend::NoBinding => {}
            }
        }
        let opt = if out.is_empty() {
            ia_na_status(ia.id, Status::NoBinding, "no binding for this IA")
        } else {
            ia_na(table, ia.id, &out)
        };
        reply.opts_mut().insert(opt);
    }
    unserved_ias(msg, Status::NoBinding, Status::NoBinding, reply);
}

fn release(table: &mut LeaseTable, msg: &Message, c: &Client, decline: bool, out: &mut Out) {
    let Out { reply, store } = out;
    let now = c.now;
    for ia in ia_nas(msg) {
        let mut found = false;
        for a in ia_addrs(&ia.opts) {
            let gone = if decline {
                table.decline(c.ia(ia.id), a, now)
            } else {
                table.release(c.ia(ia.id), a)
            };
            if let Some(r) = gone {
                found = true;
                store.push(Store::Remove(r));
            }
        }
        if !found {
            reply.opts_mut().insert(ia_na_status(
                ia.id,
                Status::NoBinding,
                "no binding for this IA",
            ));
        }
    }
    reply.opts_mut().insert(status(Status::Success, "done"));
}

fn confirm(table: &LeaseTable, msg: &Message, reply: &mut Message) -> Result<(), Dropped> {
    let mut addrs = Vec::new();
    for o in msg.opts().iter() {
        match o {
            DhcpOption::IANA(ia) => addrs.extend(ia_addrs(&ia.opts)),
            DhcpOption::IATA(ia) => addrs.extend(ia_addrs(&ia.opts)),
            _ => {}
        }
    }
    if addrs.is_empty() {
        return Err(Dropped::NothingToConfirm);
    }
    let prefix = table.config().prefix;
    let opt = if addrs.iter().all(|a| prefix.contains(a)) {
        status(Status::Success, "addresses on link")
    } else {
        status(Status::NotOnLink, "address not on this link")
    };
    reply.opts_mut().insert(opt);
    Ok(())
}

/// DNS servers (23) and the search list (24), when the client's ORO asks
/// for them and the config has them.
fn requested_options(table: &LeaseTable, msg: &Message, reply: &mut Message) {
    let Some(DhcpOption::ORO(oro)) = msg.opts().get(OptionCode::ORO) else {
        return;
    };
    let cfg = table.config();
    if oro.opts.contains(&OptionCode::DomainNameServers) && !cfg.dns_servers.is_empty() {
        reply
            .opts_mut()
            .insert(DhcpOption::DomainNameServers(cfg.dns_servers.clone()));
    }
    if oro.opts.contains(&OptionCode::DomainSearchList) && !cfg.search.is_empty() {
        let names: Vec<Name> = cfg
            .search
            .iter()
            // Absolute names: the wire form has no relative names anyway.
            .filter_map(|s| format!("{}.", s.trim_end_matches('.')).parse::<Name>().ok())
            .collect();
        reply.opts_mut().insert(DhcpOption::DomainSearchList(names));
    }
}
