//! Message handling as a pipeline of named, pure stages (no sockets, no
//! disk): [`parse`] → [`classify`] → [`check_relay`] → the pair's share
//! ([`crate::pair::Share::answers`]) → [`decide`] →
//! [`reply_options`] / [`build_reply`] → [`destination`]. [`handle`] runs them all and returns
//! what the I/O layer must do: persist (`store`), then send (`reply`).

use std::net::Ipv4Addr;

use dhcproto::v4::{
    self, DhcpOption, DhcpOptions, Flags, HType, Message, MessageType, Opcode, OptionCode,
};
use dhcproto::{Decodable, Decoder, Encodable, Encoder};
use ipnet::Ipv4Net;

use crate::config::{Config, Mac};
use crate::lease_store::StoredLease;
use crate::leases::{LeaseTable, Refusal};
pub use crate::request::Request;

/// Why a packet was dropped without a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// Not a decodable BOOTP/DHCP message.
    Malformed,
    /// A BOOTREPLY, or no DHCP message type: not for a server.
    NotARequest,
    /// Hardware type or length other than Ethernet's.
    UnsupportedHardware,
    /// Relayed through a relay agent (giaddr) outside the served subnet:
    /// the server has no address to give on that network.
    RelayOutsideSubnet,
    /// A giaddr no relay can have (loopback, `0.x.x.x`, multicast or
    /// broadcast, the subnet's network or broadcast address, the server's
    /// own address): never used as a destination.
    BadRelayAddress,
    /// A client of the other server of the pair (load balancing).
    PeerScope,
    /// The server is fetching the other server's leases after its start.
    PairSyncing,
    /// A chaddr with the group bit set (broadcast or multicast): no client
    /// has one, and answering it would teach neighbours a group address.
    GroupHardwareAddress,
}

impl Dropped {
    /// Label for metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Dropped::Malformed => "malformed",
            Dropped::NotARequest => "not_a_request",
            Dropped::UnsupportedHardware => "unsupported_hardware",
            Dropped::RelayOutsideSubnet => "relay_outside_subnet",
            Dropped::BadRelayAddress => "bad_relay_address",
            Dropped::PeerScope => "peer_scope",
            Dropped::PairSyncing => "pair_syncing",
            Dropped::GroupHardwareAddress => "group_hardware_address",
        }
    }
}

/// Fixed BOOTP header plus the magic cookie.
const HEADER_LEN: usize = 240;

/// Whether an option the server reads has a length it can use.
fn option_len_ok(code: u8, len: usize) -> bool {
    match code {
        53 | 52 => len == 1, // message type, option overload
        50 | 54 => len == 4, // requested address, server identifier
        57 => len == 2,      // maximum message size
        55 | 61 | 82 => len >= 1,
        _ => false,
    }
}

/// Copies the options of `area` the server reads into `out`; returns the
/// option overload value (option 52) when the area holds one, or None when
/// the area is truncated. Stops at the end option or the area's end.
fn copy_options(area: &[u8], out: &mut Vec<u8>) -> Option<Option<u8>> {
    let mut overload = None;
    let mut i = 0;
    while i < area.len() {
        let code = area[i];
        match code {
            0 => {
                i += 1;
                continue;
            }
            255 => break,
            _ => {}
        }
        let len = *area.get(i + 1)? as usize;
        let value = area.get(i + 2..i + 2 + len)?;
        if code == 12 {
            // The host name, kept for the lease inventory only when it is
            // printable ASCII (trailing NULs some clients send dropped):
            // anything else would fail the decoder and drop the request.
            let name = value
                .iter()
                .rposition(|b| *b != 0)
                .map_or(&value[..0], |end| &value[..=end]);
            if !name.is_empty() && name.iter().all(u8::is_ascii_graphic) {
                out.push(code);
                out.push(name.len() as u8);
                out.extend_from_slice(name);
            }
        } else if option_len_ok(code, len) {
            if code == 52 {
                overload = Some(value[0]);
            } else {
                out.push(code);
                out.push(len as u8);
                out.extend_from_slice(value);
            }
        }
        i += 2 + len;
    }
    Some(overload)
}

/// Stage 1a: keeps only the options the server reads (message type,
/// requested address, server identifier, parameter request list, maximum
/// message size, client identifier, relay agent information, and the host
/// name when it is printable ASCII) with valid lengths, and drops every other option before decoding. Unknown or
/// malformed options are thus ignored rather than trusted to a decoder
/// (dhcproto 0.15 asserts on some option lengths in debug builds), and
/// decoding is cheaper. Option overload (52, RFC 2131 §4.1) is read: the
/// `file` field (1), the `sname` field (2) or both (3) hold more options,
/// read after the option area and cleared in the header. Returns None when
/// the option area itself is truncated.
pub fn sanitize(buf: &[u8]) -> Option<Vec<u8>> {
    if buf.len() < HEADER_LEN || buf[236..240] != v4::MAGIC {
        return None;
    }
    let mut out = Vec::with_capacity(buf.len().min(576));
    out.extend_from_slice(&buf[..HEADER_LEN]);
    let overload = copy_options(&buf[HEADER_LEN..], &mut out)?;
    if let Some(v) = overload {
        // sname is bytes 44..108, file 108..236 of the header.
        if v & 1 != 0 {
            copy_options(&buf[108..236], &mut out)?;
            out[108..236].fill(0);
        }
        if v & 2 != 0 {
            copy_options(&buf[44..108], &mut out)?;
            out[44..108].fill(0);
        }
    }
    out.push(255);
    Some(out)
}

/// Stage 1: bytes to a message (after [`sanitize`]).
pub fn parse(buf: &[u8]) -> Result<Message, Dropped> {
    let clean = sanitize(buf).ok_or(Dropped::Malformed)?;
    Message::decode(&mut Decoder::new(&clean)).map_err(|_| Dropped::Malformed)
}

/// Stage 2: keeps requests from Ethernet clients, names the message type.
pub fn classify(msg: Message) -> Result<Request, Dropped> {
    if msg.opcode() != Opcode::BootRequest {
        return Err(Dropped::NotARequest);
    }
    if msg.htype() != HType::Eth || msg.hlen() != 6 || msg.chaddr().len() < 6 {
        return Err(Dropped::UnsupportedHardware);
    }
    let kind = msg.opts().msg_type().ok_or(Dropped::NotARequest)?;
    let mut m = [0u8; 6];
    m.copy_from_slice(&msg.chaddr()[..6]);
    if m == [0; 6] {
        return Err(Dropped::UnsupportedHardware);
    }
    if m[0] & 1 == 1 {
        return Err(Dropped::GroupHardwareAddress);
    }
    Ok(Request {
        msg,
        kind,
        mac: Mac(m),
    })
}

/// Stage 2b: a relayed request (giaddr set) is answered only through a
/// relay agent on the served subnet (RFC 2131 §4.3.1: the server picks the
/// client's network by giaddr, and it serves only this one). A giaddr that
/// cannot be a relay's address is dropped, so a crafted request can never
/// make the server send to loopback, a broadcast address or itself.
pub fn check_relay(cfg: &Config, req: &Request) -> Result<(), Dropped> {
    let g = req.msg.giaddr();
    if g.is_unspecified() {
        return Ok(());
    }
    let first = g.octets()[0];
    if g.is_loopback()
        || first == 0
        || first >= 224
        || g == cfg.server_ip
        || g == cfg.subnet.network()
        || g == cfg.subnet.broadcast()
    {
        return Err(Dropped::BadRelayAddress);
    }
    if !cfg.subnet.contains(&g) {
        return Err(Dropped::RelayOutsideSubnet);
    }
    Ok(())
}

/// [`Decision::Ignore`]'s reason for a client neither reserved nor known
/// under `unknown_clients: ignore` (the inventory counts it by this).
pub const IGNORED_UNKNOWN_CLIENT: &str = "unknown client (unknown_clients: ignore)";
/// [`Decision::Ignore`]'s reason for a REQUEST naming another server.
pub const IGNORED_OTHER_SERVER: &str = "client selected another server";
/// [`Decision::Ignore`]'s reason for a message type no server handles.
pub const IGNORED_MESSAGE_TYPE: &str = "message type not handled by a server";

/// The lease decision for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// DISCOVER answered: `ip` is held for the client.
    Offer {
        /// Offered address.
        ip: Ipv4Addr,
        /// Whether to check that nobody uses `ip` before the offer leaves
        /// (see [`LeaseTable::offer_probed`]).
        probe: bool,
    },
    /// REQUEST confirmed: persist `commit` first, then ACK.
    Ack {
        /// The lease (and the client's superseded address, if any).
        commit: crate::leases::Commit,
    },
    /// INFORM: configuration only, no lease.
    InformAck,
    /// REQUEST refused.
    Nak {
        /// Why (sent in option 56 and logged).
        reason: &'static str,
        /// The lease table's refusal, when it refused.
        refusal: Option<Refusal>,
        /// The client's own binding that the refusal revoked (persist its release).
        revoked: Option<Ipv4Addr>,
    },
    /// RELEASE of an address the client held.
    Released {
        /// The freed address.
        ip: Ipv4Addr,
    },
    /// DECLINE: the address is quarantined.
    Declined {
        /// The quarantine record to persist.
        quarantine: StoredLease,
    },
    /// DISCOVER with no address to give (pool exhausted or reservation busy).
    NoAddress {
        /// Why.
        refusal: Refusal,
    },
    /// Nothing to do (client chose another server, release of an address it
    /// does not hold, message type a server ignores).
    Ignore {
        /// Why, for the debug log.
        reason: &'static str,
    },
}

impl Decision {
    /// Label for metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            Decision::Offer { .. } => "offer",
            Decision::Ack { .. } => "ack",
            Decision::InformAck => "inform_ack",
            Decision::Nak { .. } => "nak",
            Decision::Released { .. } => "released",
            Decision::Declined { .. } => "declined",
            Decision::NoAddress { .. } => "no_address",
            Decision::Ignore { .. } => "ignored",
        }
    }
}

/// Stage 3: what the lease table says (and changes) for this request.
///
/// REQUEST states (RFC 2131 §4.3.2): SELECTING carries a server identifier
/// (ours: commit the requested address; another server's: withdraw our
/// offer silently); INIT-REBOOT carries option 50 and no ciaddr; RENEWING
/// and REBINDING carry ciaddr. Any state commits only an address this client
/// may hold and nobody else holds, and NAKs otherwise. The server is
/// authoritative for its VLAN: an INIT-REBOOT or REBINDING client asking for
/// a free, allowed address it has no record of gets it (a worker keeps its
/// address even if the store was lost).
pub fn decide(table: &mut LeaseTable, req: &Request, now: u64) -> Decision {
    let server_ip = table.config().server_ip;
    // `unknown_clients: ignore`: a client neither reserved nor known gets
    // nothing (a RELEASE or DECLINE still frees what it holds).
    if !table.config().serves(&req.mac)
        && matches!(
            req.kind,
            MessageType::Discover | MessageType::Request | MessageType::Inform
        )
    {
        return Decision::Ignore {
            reason: IGNORED_UNKNOWN_CLIENT,
        };
    }
    match req.kind {
        MessageType::Discover => match table.offer_probed(req.mac, req.requested_ip(), now) {
            Ok((ip, probe)) => Decision::Offer { ip, probe },
            Err(refusal) => Decision::NoAddress { refusal },
        },
        MessageType::Request => {
            let ciaddr = req.msg.ciaddr();
            let (ip, selecting) = match req.server_id() {
                Some(id) if id != server_ip => {
                    table.withdraw_offer(req.mac);
                    return Decision::Ignore {
                        reason: IGNORED_OTHER_SERVER,
                    };
                }
                Some(_) => (req.requested_ip().unwrap_or(ciaddr), true),
                None if !ciaddr.is_unspecified() => (ciaddr, false),
                None => match req.requested_ip() {
                    Some(ip) => (ip, false),
                    None => {
                        return Decision::Nak {
                            reason: "request names no address",
                            refusal: None,
                            revoked: None,
                        };
                    }
                },
            };
            if ip.is_unspecified() {
                return Decision::Nak {
                    reason: "request names no address",
                    refusal: None,
                    revoked: None,
                };
            }
            if !selecting && !table.config().subnet.contains(&ip) {
                return Decision::Nak {
                    reason: "address is not on this network",
                    refusal: None,
                    revoked: None,
                };
            }
            match table.commit(req.mac, ip, now) {
                Ok(commit) => Decision::Ack { commit },
                // The client holds an address it may no longer have (its
                // reservation moved, the pool shrank): revoke it now, so that
                // it is free for its new owner rather than at lease expiry.
                Err(Refusal::NotAllowed) if table.revoke(req.mac, ip) => Decision::Nak {
                    reason: Refusal::NotAllowed.as_str(),
                    refusal: Some(Refusal::NotAllowed),
                    revoked: Some(ip),
                },
                Err(r) => Decision::Nak {
                    reason: r.as_str(),
                    refusal: Some(r),
                    revoked: None,
                },
            }
        }
        MessageType::Release => {
            if req.server_id().is_some_and(|id| id != server_ip) {
                return Decision::Ignore {
                    reason: "release for another server",
                };
            }
            let ip = req.msg.ciaddr();
            if table.release(req.mac, ip, now) {
                Decision::Released { ip }
            } else {
                Decision::Ignore {
                    reason: "release of an address the client does not hold",
                }
            }
        }
        MessageType::Decline => {
            if req.server_id().is_some_and(|id| id != server_ip) {
                return Decision::Ignore {
                    reason: "decline for another server",
                };
            }
            let Some(ip) = req.requested_ip() else {
                return Decision::Ignore {
                    reason: "decline without requested address",
                };
            };
            match table.decline(req.mac, ip, now) {
                Some(quarantine) => Decision::Declined { quarantine },
                None => Decision::Ignore {
                    reason: "decline of an address the client does not hold",
                },
            }
        }
        MessageType::Inform => Decision::InformAck,
        _ => Decision::Ignore {
            reason: IGNORED_MESSAGE_TYPE,
        },
    }
}

/// Options the server holds for `mac`, always sent when held.
const BASIC: [OptionCode; 5] = [
    OptionCode::SubnetMask,
    OptionCode::Router,
    OptionCode::DomainNameServer,
    OptionCode::DomainName,
    OptionCode::Hostname,
];

/// Stage 4a: configuration options for the reply. The basic set (mask,
/// router, DNS, domain, reserved host name) is always sent when held; the
/// interface MTU, broadcast address and classless routes are sent when the
/// client asks for them in its parameter request list (or sends none, like
/// BOOTP-style tools). When option 121 is sent and a gateway is configured,
/// the default route is added to it, because RFC 3442 clients ignore
/// option 3 when option 121 is present.
pub fn reply_options(cfg: &Config, mac: Mac, prl: Option<&[OptionCode]>) -> Vec<DhcpOption> {
    let wanted = |code: OptionCode| match prl {
        None => code != OptionCode::ClasslessStaticRoute,
        Some(list) => BASIC.contains(&code) || list.contains(&code),
    };
    let mut out = Vec::new();
    if wanted(OptionCode::SubnetMask) {
        out.push(DhcpOption::SubnetMask(cfg.subnet.netmask()));
    }
    if let Some(g) = cfg.gateway
        && wanted(OptionCode::Router)
    {
        out.push(DhcpOption::Router(vec![g]));
    }
    if !cfg.dns_servers.is_empty() && wanted(OptionCode::DomainNameServer) {
        out.push(DhcpOption::DomainNameServer(cfg.dns_servers.clone()));
    }
    if let Some(d) = &cfg.domain
        && wanted(OptionCode::DomainName)
    {
        out.push(DhcpOption::DomainName(d.clone()));
    }
    if let Some(h) = cfg.hostname(&mac)
        && wanted(OptionCode::Hostname)
    {
        out.push(DhcpOption::Hostname(h.to_string()));
    }
    if let Some(m) = cfg.mtu
        && wanted(OptionCode::InterfaceMtu)
    {
        out.push(DhcpOption::InterfaceMtu(m));
    }
    if wanted(OptionCode::BroadcastAddr) {
        out.push(DhcpOption::BroadcastAddr(cfg.subnet.broadcast()));
    }
    if !cfg.classless_routes.is_empty() && wanted(OptionCode::ClasslessStaticRoute) {
        let mut routes = cfg.classless_routes.clone();
        if let Some(g) = cfg.gateway
            && !routes.iter().any(|(d, _)| d.prefix_len() == 0)
        {
            routes.push((Ipv4Net::default(), g));
        }
        out.push(DhcpOption::ClasslessStaticRoute(routes));
    }
    out
}

/// Stage 4b: the reply message for a decision, or None when nothing is sent.
pub fn build_reply(cfg: &Config, req: &Request, decision: &Decision) -> Option<Message> {
    let (kind, yiaddr, lease) = match decision {
        Decision::Offer { ip, .. } => (MessageType::Offer, *ip, true),
        Decision::Ack { commit } => (MessageType::Ack, commit.lease.ip, true),
        Decision::InformAck => (MessageType::Ack, Ipv4Addr::UNSPECIFIED, false),
        Decision::Nak { .. } => (MessageType::Nak, Ipv4Addr::UNSPECIFIED, false),
        _ => return None,
    };
    let q = &req.msg;
    let mut r = Message::default();
    r.set_opcode(Opcode::BootReply)
        .set_htype(q.htype())
        .set_xid(q.xid())
        .set_flags(q.flags())
        .set_giaddr(q.giaddr())
        .set_chaddr(q.chaddr())
        .set_yiaddr(yiaddr);
    // RFC 2131 table 3: ciaddr is echoed in ACKs (renewal, INFORM), zero otherwise.
    if kind == MessageType::Ack {
        r.set_ciaddr(q.ciaddr());
    }
    let mut opts = DhcpOptions::new();
    opts.insert(DhcpOption::MessageType(kind));
    opts.insert(DhcpOption::ServerIdentifier(cfg.server_ip));
    if let Decision::Nak { reason, .. } = decision {
        opts.insert(DhcpOption::Message((*reason).to_string()));
    } else {
        if lease {
            opts.insert(DhcpOption::AddressLeaseTime(cfg.lease_seconds));
            opts.insert(DhcpOption::Renewal(cfg.t1_seconds));
            opts.insert(DhcpOption::Rebinding(cfg.t2_seconds));
        }
        let prl = match q.opts().get(OptionCode::ParameterRequestList) {
            Some(DhcpOption::ParameterRequestList(list)) => Some(list.as_slice()),
            _ => None,
        };
        for o in reply_options(cfg, req.mac, prl) {
            opts.insert(o);
        }
    }
    // RFC 6842: echo the client identifier; RFC 3046: echo relay agent info.
    for code in [
        OptionCode::ClientIdentifier,
        OptionCode::RelayAgentInformation,
    ] {
        if let Some(o) = q.opts().get(code) {
            opts.insert(o.clone());
        }
    }
    r.set_opts(opts);
    Some(r)
}

/// Where a reply goes (RFC 2131 §4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destination {
    /// To the relay agent, `giaddr:67`.
    Relay(Ipv4Addr),
    /// To a client that already has its address configured, `ciaddr:68`.
    Client(Ipv4Addr),
    /// `255.255.255.255:68`.
    Broadcast,
}

/// Whether `ip` can be a client's configured address on the served subnet:
/// a unicast host address of the subnet (not its network or broadcast
/// address) that is not a server's address (this one's or the other
/// server's of a pair) nor the gateway.
pub fn client_address(cfg: &Config, ip: Ipv4Addr) -> bool {
    cfg.subnet.contains(&ip)
        && ip != cfg.subnet.network()
        && ip != cfg.subnet.broadcast()
        && ip != cfg.server_ip
        && cfg.gateway != Some(ip)
        && cfg.peer.as_ref().is_none_or(|p| p.server_ip != ip)
        && !ip.is_loopback()
        && !ip.is_multicast()
        && !ip.is_broadcast()
}

/// Stage 5: the reply's destination. A relayed request goes back to the
/// relay; a NAK is broadcast; a client's `ciaddr` is used only when it is
/// a client address of the served subnet ([`client_address`]), else the
/// reply is broadcast; a client without an address (DISCOVER, SELECTING
/// and INIT-REBOOT REQUESTs) gets its reply by broadcast, as RFC 2131
/// §4.1 allows: unicasting to `yiaddr` would need an ARP entry added
/// first (CAP_NET_ADMIN), and the server runs without capabilities.
pub fn destination(cfg: &Config, req: &Request, reply: &Message) -> Destination {
    let q = &req.msg;
    let is_nak = reply.opts().has_msg_type(MessageType::Nak);
    if !q.giaddr().is_unspecified() {
        return Destination::Relay(q.giaddr());
    }
    if is_nak {
        return Destination::Broadcast;
    }
    let ciaddr = q.ciaddr();
    if !ciaddr.is_unspecified() && client_address(cfg, ciaddr) {
        return Destination::Client(ciaddr);
    }
    Destination::Broadcast
}

/// The largest reply a client accepts: 576 bytes (RFC 2131 §2: every
/// client must), or what it asked for in option 57, up to a 1500-byte
/// Ethernet frame less the IP and UDP headers.
pub fn max_reply_len(req: &Request) -> usize {
    match req.msg.opts().get(OptionCode::MaxMessageSize) {
        Some(DhcpOption::MaxMessageSize(n)) => usize::from(*n).clamp(576, 1500) - 28,
        _ => 576 - 28,
    }
}

/// Options dropped, in this order, until a reply fits: the echoed ones
/// first (RFC 3046 and RFC 6842 allow a server to leave them out), then
/// the ones the client did not need to configure its address.
const DROPPABLE: [OptionCode; 6] = [
    OptionCode::RelayAgentInformation,
    OptionCode::ClientIdentifier,
    OptionCode::ClasslessStaticRoute,
    OptionCode::DomainName,
    OptionCode::Hostname,
    OptionCode::DomainNameServer,
];

/// Encodes `m`, dropping options in [`DROPPABLE`] order until it fits `max`
/// bytes of DHCP message.
pub fn encode_within(m: &mut Message, max: usize) -> Option<Vec<u8>> {
    let mut b = encode(m)?;
    for code in DROPPABLE {
        if b.len() <= max {
            break;
        }
        if m.opts_mut().remove(code).is_some() {
            b = encode(m)?;
        }
    }
    (b.len() <= max).then_some(b)
}

/// A store operation the I/O layer must make durable before sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOp {
    /// Append a lease (or quarantine) record.
    Commit(StoredLease),
    /// Append the release of an address.
    Release(Ipv4Addr),
}

/// Everything the I/O layer needs after one request.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The request's message type (for metrics).
    pub kind: MessageType,
    /// The client.
    pub mac: Mac,
    /// The decision (for metrics and logs).
    pub decision: Decision,
    /// Records to make durable before the reply is sent.
    pub store: Vec<StoreOp>,
    /// The encoded reply and where it goes.
    pub reply: Option<(Vec<u8>, Destination)>,
    /// The address a REQUEST named (server-identified or requested address,
    /// else ciaddr), for the inventory's refusal events.
    pub asked: Option<Ipv4Addr>,
    /// The client identifier and host name the client sent.
    pub sent: crate::inventory::meta::Sent,
}

/// BOOTP's minimum message size; some clients drop shorter replies.
const MIN_REPLY_LEN: usize = 300;

/// Encodes a reply, padded to the BOOTP minimum.
pub fn encode(msg: &Message) -> Option<Vec<u8>> {
    let mut buf = Vec::with_capacity(576);
    msg.encode(&mut Encoder::new(&mut buf)).ok()?;
    if buf.len() < MIN_REPLY_LEN {
        buf.resize(MIN_REPLY_LEN, 0);
    }
    Some(buf)
}

/// Runs every stage on one received datagram.
pub fn handle(table: &mut LeaseTable, buf: &[u8], now: u64) -> Result<Outcome, Dropped> {
    let req = classify(parse(buf)?)?;
    check_relay(table.config(), &req)?;
    if let Some(share) = table.share()
        && !share.answers(&req)
    {
        return Err(if share.state == crate::pair::PairState::Syncing {
            Dropped::PairSyncing
        } else {
            Dropped::PeerScope
        });
    }
    let decision = decide(table, &req, now);
    let store = match &decision {
        Decision::Ack { commit } => {
            let mut ops = vec![StoreOp::Commit(commit.lease)];
            if let Some(prev) = commit.superseded {
                ops.push(StoreOp::Release(prev));
            }
            ops
        }
        Decision::Released { ip }
        | Decision::Nak {
            revoked: Some(ip), ..
        } => vec![StoreOp::Release(*ip)],
        Decision::Declined { quarantine } => vec![StoreOp::Commit(*quarantine)],
        _ => Vec::new(),
    };
    let cfg = table.config().clone();
    let max = max_reply_len(&req);
    let reply = build_reply(&cfg, &req, &decision).and_then(|mut m| {
        let dest = destination(&cfg, &req, &m);
        // A relayed NAK asks the relay to broadcast it (RFC 2131 §4.3.2).
        if m.opts().has_msg_type(MessageType::Nak) && matches!(dest, Destination::Relay(_)) {
            m.set_flags(Flags::default().set_broadcast());
        }
        encode_within(&mut m, max).map(|b| (b, dest))
    });
    let asked = (req.kind == MessageType::Request)
        .then(|| req.requested_ip().unwrap_or(req.msg.ciaddr()))
        .filter(|ip| !ip.is_unspecified());
    let sent = crate::inventory::meta::Sent {
        client_id: match req.msg.opts().get(OptionCode::ClientIdentifier) {
            Some(DhcpOption::ClientIdentifier(id)) => Some(id.clone()),
            _ => None,
        },
        hostname: match req.msg.opts().get(OptionCode::Hostname) {
            Some(DhcpOption::Hostname(h)) => Some(h.clone()),
            _ => None,
        },
    };
    Ok(Outcome {
        kind: req.kind,
        mac: req.mac,
        decision,
        store,
        reply,
        asked,
        sent,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, DOC_NET, WORKER_0};
    use std::sync::Arc;

    /// Eleven pool addresses, every option and worker-0's reservation.
    fn yaml() -> String {
        testing::yaml(
            DOC_NET,
            &[
                "range: { start: 192.0.2.100, end: 192.0.2.110 }",
                "dns_servers: [192.0.2.3]",
                "domain: cluster.example",
                "lease_seconds: 3600",
                "mtu: 1450",
                "classless_routes: [{ destination: 10.0.0.0/8, gateway: 192.0.2.1 }]",
                WORKER_0,
            ],
        )
    }

    fn table() -> LeaseTable {
        LeaseTable::new(Arc::new(Config::from_yaml(&yaml()).unwrap()))
    }

    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const RESERVED: [u8; 6] = [2, 0, 0, 0, 0, 0xaa];

    fn msg(kind: MessageType, mac: [u8; 6], opts: Vec<DhcpOption>) -> Message {
        let mut m = Message::default();
        m.set_xid(0x1234).set_chaddr(&mac);
        m.opts_mut().insert(DhcpOption::MessageType(kind));
        for o in opts {
            m.opts_mut().insert(o);
        }
        m
    }

    fn bytes(m: &Message) -> Vec<u8> {
        m.to_vec().unwrap()
    }

    fn run(t: &mut LeaseTable, m: &Message) -> (Outcome, Option<Message>) {
        let o = handle(t, &bytes(m), 1000).unwrap();
        let reply = o
            .reply
            .as_ref()
            .map(|(b, _)| Message::decode(&mut Decoder::new(b)).unwrap());
        (o, reply)
    }

    fn ip(n: u8) -> Ipv4Addr {
        Ipv4Addr::new(192, 0, 2, n)
    }

    #[test]
    fn parse_rejects_short_and_bad_magic() {
        assert_eq!(parse(&[0u8; 100]).unwrap_err(), Dropped::Malformed);
        let mut b = bytes(&msg(MessageType::Discover, MAC, vec![]));
        b[236] = 0;
        assert_eq!(parse(&b).unwrap_err(), Dropped::Malformed);
        // An option whose length runs past the end.
        let mut b = bytes(&msg(MessageType::Discover, MAC, vec![]));
        b.truncate(240);
        b.extend_from_slice(&[53, 1, 1, 12, 200, b'x']);
        assert_eq!(parse(&b).unwrap_err(), Dropped::Malformed);
    }

    #[test]
    fn sanitize_drops_unread_and_bad_length_options() {
        let mut b = bytes(&msg(MessageType::Discover, MAC, vec![]));
        b.truncate(240);
        // type, a bad-length server id, an unknown option, a pad, a good requested address.
        b.extend_from_slice(&[
            53, 1, 1, 54, 3, 1, 2, 3, 224, 2, 9, 9, 0, 50, 4, 192, 0, 2, 104, 255,
        ]);
        let m = parse(&b).unwrap();
        assert_eq!(m.opts().msg_type(), Some(MessageType::Discover));
        assert!(m.opts().get(OptionCode::ServerIdentifier).is_none());
        assert!(m.opts().get(OptionCode::Unknown(224)).is_none());
        assert_eq!(
            m.opts().get(OptionCode::RequestedIpAddress),
            Some(&DhcpOption::RequestedIpAddress(ip(104)))
        );
    }

    #[test]
    fn classify_drops_replies_and_non_ethernet() {
        let mut m = msg(MessageType::Discover, MAC, vec![]);
        m.set_opcode(Opcode::BootReply);
        assert_eq!(classify(m).unwrap_err(), Dropped::NotARequest);
        let mut m = msg(MessageType::Discover, MAC, vec![]);
        m.set_htype(HType::IEEE802);
        assert_eq!(classify(m).unwrap_err(), Dropped::UnsupportedHardware);
        let mut m = msg(MessageType::Discover, MAC, vec![]);
        m.opts_mut().remove(OptionCode::MessageType);
        assert_eq!(classify(m).unwrap_err(), Dropped::NotARequest);
        let c = classify(msg(MessageType::Inform, MAC, vec![])).unwrap();
        assert_eq!(c.mac, Mac(MAC));
    }

    #[test]
    fn discover_gets_offer_with_lease_times_and_basic_options() {
        let mut t = table();
        let (o, r) = run(&mut t, &msg(MessageType::Discover, MAC, vec![]));
        let r = r.unwrap();
        assert_eq!(
            o.decision,
            Decision::Offer {
                ip: ip(100),
                probe: true
            }
        );
        assert!(o.store.is_empty(), "an offer is not persisted");
        assert_eq!(r.opts().msg_type(), Some(MessageType::Offer));
        assert_eq!(r.yiaddr(), ip(100));
        assert_eq!(r.ciaddr(), Ipv4Addr::UNSPECIFIED);
        let o = r.opts();
        assert_eq!(
            o.get(OptionCode::ServerIdentifier),
            Some(&DhcpOption::ServerIdentifier(ip(2)))
        );
        assert_eq!(
            o.get(OptionCode::AddressLeaseTime),
            Some(&DhcpOption::AddressLeaseTime(3600))
        );
        assert_eq!(o.get(OptionCode::Renewal), Some(&DhcpOption::Renewal(1800)));
        assert_eq!(
            o.get(OptionCode::Rebinding),
            Some(&DhcpOption::Rebinding(3150))
        );
        assert_eq!(
            o.get(OptionCode::SubnetMask),
            Some(&DhcpOption::SubnetMask(Ipv4Addr::new(255, 255, 255, 0)))
        );
        assert_eq!(
            o.get(OptionCode::Router),
            Some(&DhcpOption::Router(vec![ip(1)]))
        );
        assert_eq!(
            o.get(OptionCode::DomainNameServer),
            Some(&DhcpOption::DomainNameServer(vec![ip(3)]))
        );
        assert_eq!(
            o.get(OptionCode::DomainName),
            Some(&DhcpOption::DomainName("cluster.example".into()))
        );
        // No PRL: MTU sent, option 121 only on request.
        assert_eq!(
            o.get(OptionCode::InterfaceMtu),
            Some(&DhcpOption::InterfaceMtu(1450))
        );
        assert!(o.get(OptionCode::ClasslessStaticRoute).is_none());
    }

    #[test]
    fn parameter_request_list_selects_extra_options_and_121_gets_default_route() {
        let cfg = Config::from_yaml(&yaml()).unwrap();
        let prl = [OptionCode::ClasslessStaticRoute, OptionCode::Unknown(224)];
        let opts = reply_options(&cfg, Mac(MAC), Some(&prl));
        assert!(
            !opts
                .iter()
                .any(|o| matches!(o, DhcpOption::InterfaceMtu(_)))
        );
        let routes = opts
            .iter()
            .find_map(|o| match o {
                DhcpOption::ClasslessStaticRoute(r) => Some(r.clone()),
                _ => None,
            })
            .unwrap();
        assert_eq!(
            routes,
            vec![
                ("10.0.0.0/8".parse().unwrap(), ip(1)),
                ("0.0.0.0/0".parse().unwrap(), ip(1))
            ]
        );
        let opts = reply_options(&cfg, Mac(MAC), Some(&[OptionCode::InterfaceMtu]));
        assert!(opts.contains(&DhcpOption::InterfaceMtu(1450)));
    }

    #[test]
    fn reserved_mac_gets_address_and_hostname() {
        let mut t = table();
        let (_, r) = run(&mut t, &msg(MessageType::Discover, RESERVED, vec![]));
        let r = r.unwrap();
        assert_eq!(r.yiaddr(), ip(50));
        assert_eq!(
            r.opts().get(OptionCode::Hostname),
            Some(&DhcpOption::Hostname("worker-0".into()))
        );
    }

    #[test]
    fn known_client_gets_a_pool_address_and_its_hostname_from_the_first_discover() {
        let yaml = format!(
            "{}known_clients:\n  - {{ mac: \"02:00:00:00:00:bb\", hostname: worker-1 }}\n",
            yaml()
        );
        let mut t = LeaseTable::new(Arc::new(Config::from_yaml(&yaml).unwrap()));
        let (_, r) = run(
            &mut t,
            &msg(MessageType::Discover, [2, 0, 0, 0, 0, 0xbb], vec![]),
        );
        let r = r.unwrap();
        assert_eq!(r.yiaddr(), ip(100));
        assert_eq!(
            r.opts().get(OptionCode::Hostname),
            Some(&DhcpOption::Hostname("worker-1".into()))
        );
        // Any other client gets no host name.
        let (_, r) = run(&mut t, &msg(MessageType::Discover, MAC, vec![]));
        assert_eq!(r.unwrap().opts().get(OptionCode::Hostname), None);
    }

    #[test]
    fn ignore_answers_only_reserved_and_known_clients() {
        let yaml = format!(
            "{}known_clients:\n  - {{ mac: \"02:00:00:00:00:bb\" }}\nunknown_clients: ignore\n",
            yaml()
        );
        let mut t = LeaseTable::new(Arc::new(Config::from_yaml(&yaml).unwrap()));
        for kind in [MessageType::Discover, MessageType::Inform] {
            let (o, r) = run(&mut t, &msg(kind, MAC, vec![]));
            assert!(r.is_none(), "{kind:?}");
            assert_eq!(o.decision.as_str(), "ignored");
        }
        let (_, r) = run(&mut t, &selecting(MAC, ip(100), ip(2)));
        assert!(r.is_none(), "an unknown REQUEST is not answered either");
        let (_, r) = run(&mut t, &msg(MessageType::Discover, RESERVED, vec![]));
        assert_eq!(r.unwrap().yiaddr(), ip(50));
        let (_, r) = run(
            &mut t,
            &msg(MessageType::Discover, [2, 0, 0, 0, 0, 0xbb], vec![]),
        );
        assert_eq!(r.unwrap().yiaddr(), ip(100));
    }

    #[test]
    fn a_known_client_listed_twice_or_also_reserved_is_refused() {
        for extra in [
            "known_clients:\n  - { mac: \"02:00:00:00:00:aa\" }\n",
            "known_clients:\n  - { mac: \"02:00:00:00:00:bb\" }\n  - { mac: \"02-00-00-00-00-BB\" }\n",
        ] {
            let err = Config::from_yaml(&format!("{}{extra}", yaml())).unwrap_err();
            assert!(err.field.starts_with("known_clients["), "{err:?}");
        }
        let err = Config::from_yaml(&format!("{}unknown_clients: drop\n", yaml())).unwrap_err();
        assert_eq!(err.field, "unknown_clients", "{err:?}");
    }

    fn selecting(mac: [u8; 6], want: Ipv4Addr, server: Ipv4Addr) -> Message {
        msg(
            MessageType::Request,
            mac,
            vec![
                DhcpOption::RequestedIpAddress(want),
                DhcpOption::ServerIdentifier(server),
            ],
        )
    }

    #[test]
    fn selecting_request_is_committed_then_acked() {
        let mut t = table();
        run(&mut t, &msg(MessageType::Discover, MAC, vec![]));
        let (o, r) = run(&mut t, &selecting(MAC, ip(100), ip(2)));
        let r = r.unwrap();
        assert_eq!(r.opts().msg_type(), Some(MessageType::Ack));
        assert_eq!(r.yiaddr(), ip(100));
        assert_eq!(
            o.store,
            vec![StoreOp::Commit(StoredLease {
                ip: ip(100),
                mac: Mac(MAC),
                expires_unix: 4600
            })]
        );
    }

    #[test]
    fn request_for_another_server_withdraws_the_offer_silently() {
        let mut t = table();
        run(&mut t, &msg(MessageType::Discover, MAC, vec![]));
        let (o, r) = run(&mut t, &selecting(MAC, ip(100), ip(9)));
        assert!(r.is_none());
        assert!(matches!(o.decision, Decision::Ignore { .. }));
        let (_, r) = run(
            &mut t,
            &msg(MessageType::Discover, [2, 0, 0, 0, 0, 2], vec![]),
        );
        assert_eq!(r.unwrap().yiaddr(), ip(100));
    }

    #[test]
    fn init_reboot_acks_own_address_and_naks_foreign_network_and_taken() {
        let mut t = table();
        let reboot = |mac, want| {
            msg(
                MessageType::Request,
                mac,
                vec![DhcpOption::RequestedIpAddress(want)],
            )
        };
        let (_, r) = run(&mut t, &reboot(MAC, ip(104)));
        assert_eq!(r.unwrap().opts().msg_type(), Some(MessageType::Ack));
        // Another client asking for the same address is refused.
        let (_, r) = run(&mut t, &reboot([2, 0, 0, 0, 0, 2], ip(104)));
        let r = r.unwrap();
        assert_eq!(r.opts().msg_type(), Some(MessageType::Nak));
        assert_eq!(r.yiaddr(), Ipv4Addr::UNSPECIFIED);
        // Wrong network.
        let (o, r) = run(&mut t, &reboot(MAC, Ipv4Addr::new(10, 9, 9, 9)));
        assert_eq!(r.unwrap().opts().msg_type(), Some(MessageType::Nak));
        assert_eq!(
            o.reply.unwrap().1,
            Destination::Broadcast,
            "NAKs are broadcast"
        );
    }

    #[test]
    fn renewing_extends_and_echoes_ciaddr_rebinding_foreign_address_naks() {
        let mut t = table();
        run(&mut t, &selecting(MAC, ip(100), ip(2)));
        let mut renew = msg(MessageType::Request, MAC, vec![]);
        renew.set_ciaddr(ip(100));
        let (o, r) = run(&mut t, &renew);
        let r = r.unwrap();
        assert_eq!(r.opts().msg_type(), Some(MessageType::Ack));
        assert_eq!(r.ciaddr(), ip(100));
        assert_eq!(o.reply.unwrap().1, Destination::Client(ip(100)));
        // Not in the pool (an infra address): NAK.
        let mut rebind = msg(MessageType::Request, MAC, vec![]);
        rebind
            .set_ciaddr(ip(3))
            .set_flags(Flags::default().set_broadcast());
        let (_, r) = run(&mut t, &rebind);
        assert_eq!(r.unwrap().opts().msg_type(), Some(MessageType::Nak));
    }

    #[test]
    fn moved_reservation_releases_the_old_binding_at_reload_and_naks_renewal() {
        let mut t = table();
        run(&mut t, &selecting(MAC, ip(100), ip(2)));
        let yaml = yaml().replace("02:00:00:00:00:aa", "02:00:00:00:00:01");
        let moved = t.reconfigure(Arc::new(Config::from_yaml(&yaml).unwrap()));
        assert_eq!(
            moved.iter().map(|m| m.released).collect::<Vec<_>>(),
            vec![ip(100)]
        );
        assert!(t.get(ip(100)).is_none(), "released at the reload");
        let mut renew = msg(MessageType::Request, MAC, vec![]);
        renew.set_ciaddr(ip(100));
        let (o, r) = run(&mut t, &renew);
        assert_eq!(r.unwrap().opts().msg_type(), Some(MessageType::Nak));
        assert!(o.store.is_empty(), "nothing left to revoke: {:?}", o.store);
        let (_, r) = run(&mut t, &msg(MessageType::Discover, MAC, vec![]));
        assert_eq!(r.unwrap().yiaddr(), ip(50));
    }

    #[test]
    fn shrunk_pool_naks_renewal_and_revokes_the_binding() {
        let mut t = table();
        run(&mut t, &selecting(MAC, ip(110), ip(2)));
        let yaml = yaml().replace("end: 192.0.2.110", "end: 192.0.2.109");
        assert!(
            t.reconfigure(Arc::new(Config::from_yaml(&yaml).unwrap()))
                .is_empty()
        );
        let mut renew = msg(MessageType::Request, MAC, vec![]);
        renew.set_ciaddr(ip(110));
        let (o, r) = run(&mut t, &renew);
        assert_eq!(r.unwrap().opts().msg_type(), Some(MessageType::Nak));
        assert_eq!(o.store, vec![StoreOp::Release(ip(110))]);
        assert!(t.get(ip(110)).is_none());
    }

    #[test]
    fn request_for_a_reserved_address_held_by_another_names_both_clients() {
        let mut t = table();
        let other = [2, 0, 0, 0, 0, 7];
        run(&mut t, &selecting(other, ip(104), ip(2)));
        let yaml = yaml().replace("ip: 192.0.2.50", "ip: 192.0.2.104");
        t.reconfigure(Arc::new(Config::from_yaml(&yaml).unwrap()));
        let reboot = msg(
            MessageType::Request,
            RESERVED,
            vec![DhcpOption::RequestedIpAddress(ip(104))],
        );
        let (o, _) = run(&mut t, &reboot);
        let held = Refusal::ReservedAddressInUse {
            ip: ip(104),
            holder: Mac(other),
        };
        assert!(
            matches!(o.decision, Decision::Nak { refusal: Some(r), .. } if r == held),
            "{:?}",
            o.decision
        );
        let (o, r) = run(&mut t, &msg(MessageType::Discover, RESERVED, vec![]));
        assert!(r.is_none());
        assert_eq!(o.decision, Decision::NoAddress { refusal: held });
    }

    #[test]
    fn relayed_requests_are_answered_only_through_a_relay_on_the_subnet() {
        let relayed = |giaddr: Ipv4Addr| {
            let mut m = msg(MessageType::Discover, MAC, vec![]);
            m.set_giaddr(giaddr).set_hops(1);
            m
        };
        let mut t = table();
        let o = handle(&mut t, &bytes(&relayed(ip(9))), 1000).unwrap();
        assert_eq!(o.reply.unwrap().1, Destination::Relay(ip(9)));
        for outside in [Ipv4Addr::new(198, 51, 100, 1), Ipv4Addr::new(192, 0, 3, 9)] {
            assert_eq!(
                handle(&mut t, &bytes(&relayed(outside)), 1000).unwrap_err(),
                Dropped::RelayOutsideSubnet,
                "{outside}"
            );
        }
        for bad in [
            Ipv4Addr::LOCALHOST,
            Ipv4Addr::new(127, 1, 2, 3),
            Ipv4Addr::new(0, 0, 0, 5),
            Ipv4Addr::BROADCAST,
            Ipv4Addr::new(224, 0, 0, 1),
            ip(255),
            ip(0),
            ip(2),
        ] {
            assert_eq!(
                handle(&mut t, &bytes(&relayed(bad)), 1000).unwrap_err(),
                Dropped::BadRelayAddress,
                "{bad}"
            );
        }
        // Nothing was held for the dropped requests.
        let (_, r) = run(
            &mut t,
            &msg(MessageType::Discover, [2, 0, 0, 0, 0, 9], vec![]),
        );
        assert_eq!(r.unwrap().yiaddr(), ip(101));
    }

    #[test]
    fn release_frees_and_decline_quarantines() {
        let mut t = table();
        run(&mut t, &selecting(MAC, ip(100), ip(2)));
        let mut rel = msg(
            MessageType::Release,
            MAC,
            vec![DhcpOption::ServerIdentifier(ip(2))],
        );
        rel.set_ciaddr(ip(100));
        let (o, r) = run(&mut t, &rel);
        assert!(r.is_none());
        assert_eq!(o.store, vec![StoreOp::Release(ip(100))]);
        assert!(!t.get(ip(100)).unwrap().live(1000), "no longer held");

        run(&mut t, &selecting(MAC, ip(101), ip(2)));
        let dec = msg(
            MessageType::Decline,
            MAC,
            vec![
                DhcpOption::RequestedIpAddress(ip(101)),
                DhcpOption::ServerIdentifier(ip(2)),
            ],
        );
        let (o, r) = run(&mut t, &dec);
        assert!(r.is_none());
        assert!(matches!(o.decision, Decision::Declined { .. }));
        let (_, r) = run(
            &mut t,
            &msg(
                MessageType::Discover,
                [2, 0, 0, 0, 0, 3],
                vec![DhcpOption::RequestedIpAddress(ip(101))],
            ),
        );
        assert_ne!(r.unwrap().yiaddr(), ip(101));
    }

    #[test]
    fn inform_gets_options_without_lease() {
        let mut t = table();
        let mut m = msg(MessageType::Inform, MAC, vec![]);
        m.set_ciaddr(ip(7));
        let (o, r) = run(&mut t, &m);
        let r = r.unwrap();
        assert_eq!(r.opts().msg_type(), Some(MessageType::Ack));
        assert_eq!(r.yiaddr(), Ipv4Addr::UNSPECIFIED);
        assert!(r.opts().get(OptionCode::AddressLeaseTime).is_none());
        assert!(r.opts().get(OptionCode::DomainNameServer).is_some());
        assert!(o.store.is_empty());
        assert_eq!(o.reply.unwrap().1, Destination::Client(ip(7)));
    }

    #[test]
    fn pool_exhaustion_means_no_offer() {
        let mut t = table();
        for n in 0..11u8 {
            let (o, _) = run(
                &mut t,
                &msg(MessageType::Discover, [2, 0, 0, 0, 1, n], vec![]),
            );
            assert!(matches!(o.decision, Decision::Offer { .. }));
        }
        let (o, r) = run(
            &mut t,
            &msg(MessageType::Discover, [2, 0, 0, 0, 2, 0], vec![]),
        );
        assert!(r.is_none());
        assert_eq!(
            o.decision,
            Decision::NoAddress {
                refusal: Refusal::PoolExhausted
            }
        );
    }

    #[test]
    fn unknown_options_are_ignored_not_echoed() {
        let mut t = table();
        let m = msg(
            MessageType::Discover,
            MAC,
            vec![DhcpOption::Unknown(v4::UnknownOption::new(
                OptionCode::Unknown(224),
                vec![1, 2, 3],
            ))],
        );
        let (_, r) = run(&mut t, &m);
        let r = r.unwrap();
        assert!(r.opts().get(OptionCode::Unknown(224)).is_none());
    }

    #[test]
    fn reply_addressing_follows_rfc2131_4_1() {
        let mut t = table();
        let dest =
            |t: &mut LeaseTable, m: &Message| handle(t, &bytes(m), 1000).unwrap().reply.unwrap();
        // Relay: to giaddr:67, whatever else is set.
        let mut m = msg(MessageType::Discover, MAC, vec![]);
        m.set_giaddr(ip(9))
            .set_flags(Flags::default().set_broadcast());
        assert_eq!(dest(&mut t, &m).1, Destination::Relay(ip(9)));
        // Broadcast flag.
        let mut m = msg(MessageType::Discover, MAC, vec![]);
        m.set_flags(Flags::default().set_broadcast());
        assert_eq!(dest(&mut t, &m).1, Destination::Broadcast);
        // Neither: broadcast (no ARP entry without CAP_NET_ADMIN).
        let m = msg(MessageType::Discover, MAC, vec![]);
        assert_eq!(dest(&mut t, &m).1, Destination::Broadcast);
        // A relayed NAK goes to the relay with the broadcast bit set.
        let mut m = msg(
            MessageType::Request,
            MAC,
            vec![DhcpOption::RequestedIpAddress(ip(3))],
        );
        m.set_giaddr(ip(9));
        let (b, d) = dest(&mut t, &m);
        assert_eq!(d, Destination::Relay(ip(9)));
        let r = Message::decode(&mut Decoder::new(&b)).unwrap();
        assert!(r.flags().broadcast());
        assert_eq!(r.giaddr(), ip(9));
        assert!(b.len() >= 300);
    }

    #[test]
    fn ciaddr_is_a_destination_only_when_it_is_a_client_address_here() {
        let mut t = table();
        let renew = |ciaddr: Ipv4Addr| {
            let mut m = msg(MessageType::Inform, MAC, vec![]);
            m.set_ciaddr(ciaddr);
            m
        };
        let dest =
            |t: &mut LeaseTable, m: &Message| handle(t, &bytes(m), 1000).unwrap().reply.unwrap().1;
        assert_eq!(dest(&mut t, &renew(ip(100))), Destination::Client(ip(100)));
        for bad in [
            Ipv4Addr::BROADCAST,
            ip(255),                        // the subnet's broadcast
            ip(0),                          // its network address
            ip(2),                          // this server
            ip(1),                          // the gateway
            Ipv4Addr::new(127, 0, 0, 1),    // loopback
            Ipv4Addr::new(198, 51, 100, 7), // foreign
            Ipv4Addr::new(224, 0, 0, 1),
        ] {
            assert_eq!(dest(&mut t, &renew(bad)), Destination::Broadcast, "{bad}");
        }
    }

    #[test]
    fn a_group_hardware_address_is_refused() {
        let mut t = table();
        for mac in [[0xff; 6], [0x01, 0x00, 0x5e, 0, 0, 1]] {
            let m = msg(MessageType::Discover, mac, vec![]);
            assert_eq!(
                handle(&mut t, &bytes(&m), 1000).unwrap_err(),
                Dropped::GroupHardwareAddress
            );
        }
    }

    #[test]
    fn replies_fit_576_bytes_unless_option_57_allows_more() {
        let mut t = table();
        let big = vec![DhcpOption::ClientIdentifier(vec![7; 250])];
        let mut m = msg(MessageType::Discover, MAC, big.clone());
        // Relay agent information of 250 bytes, echoed by default.
        let mut b = bytes(&m);
        b.pop();
        b.extend_from_slice(&[82, 252, 1, 250]);
        b.extend(std::iter::repeat_n(9u8, 250));
        b.push(255);
        let o = handle(&mut t, &b, 1000).unwrap();
        let (reply, _) = o.reply.unwrap();
        assert!(reply.len() <= 576 - 28, "{} bytes", reply.len());
        let r = Message::decode(&mut Decoder::new(&reply)).unwrap();
        assert!(
            r.opts().get(OptionCode::SubnetMask).is_some(),
            "essentials kept"
        );
        assert!(
            r.opts().get(OptionCode::RelayAgentInformation).is_none(),
            "echo dropped first"
        );
        // With option 57 = 1500 the whole reply goes.
        m.opts_mut().insert(DhcpOption::MaxMessageSize(1500));
        let mut b = bytes(&m);
        b.pop();
        b.extend_from_slice(&[82, 252, 1, 250]);
        b.extend(std::iter::repeat_n(9u8, 250));
        b.push(255);
        let mut t = table();
        let (reply, _) = handle(&mut t, &b, 1000).unwrap().reply.unwrap();
        assert!(reply.len() > 576 - 28);
        let r = Message::decode(&mut Decoder::new(&reply)).unwrap();
        assert!(r.opts().get(OptionCode::RelayAgentInformation).is_some());
    }

    #[test]
    fn options_in_overloaded_file_and_sname_fields_are_read() {
        let mut t = table();
        let mut b = bytes(&msg(MessageType::Discover, MAC, vec![]));
        b.truncate(240);
        // Option area: overload both fields, no message type here.
        b.extend_from_slice(&[52, 1, 3, 255]);
        // file: the message type; sname: a requested address.
        b[108..111].copy_from_slice(&[53, 1, 1]);
        b[111] = 255;
        b[44..50].copy_from_slice(&[50, 4, 192, 0, 2, 105]);
        b[50] = 255;
        let o = handle(&mut t, &b, 1000).expect("answered");
        assert!(matches!(o.decision, Decision::Offer { ip: i, .. } if i == ip(105)));
    }

    mod malformed {
        use super::*;
        use proptest::prelude::*;

        fn valid() -> Vec<u8> {
            let mut m = msg(
                MessageType::Request,
                MAC,
                vec![
                    DhcpOption::RequestedIpAddress(ip(100)),
                    DhcpOption::ServerIdentifier(ip(2)),
                    DhcpOption::ParameterRequestList(vec![
                        OptionCode::SubnetMask,
                        OptionCode::ClasslessStaticRoute,
                    ]),
                    DhcpOption::Hostname("h".into()),
                ],
            );
            m.set_giaddr(ip(9));
            bytes(&m)
        }

        proptest! {
            // OOOI_PACKET_CASES sets a longer run (the short one runs in the test command).
            #![proptest_config(ProptestConfig {
                cases: std::env::var("OOOI_PACKET_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000),
                ..ProptestConfig::default()
            })]

            #[test]
            fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..600)) {
                let mut t = table();
                let _ = handle(&mut t, &b, 1000);
            }

            #[test]
            fn mutated_requests_never_panic(
                flips in proptest::collection::vec((0usize..400, any::<u8>()), 1..8),
                cut in 0usize..400,
            ) {
                let mut t = table();
                let mut b = valid();
                for (i, v) in flips {
                    if i < b.len() {
                        b[i] = v;
                    }
                }
                // Truncated, bad option lengths, wrong op or htype all land here.
                b.truncate(b.len().min(240 + cut));
                if let Ok(o) = handle(&mut t, &b, 1000)
                    && let Some((reply, _)) = o.reply
                {
                    prop_assert!(parse(&reply).is_ok(), "our reply must decode");
                }
            }
        }
    }
}
