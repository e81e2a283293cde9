//! The engine driven the way a client drives it: every request is built
//! with dhcproto's encoder, and every reply is decoded from the bytes the
//! engine returns.

use std::net::Ipv6Addr;
use std::sync::Arc;

use dhcproto::v6::{
    DhcpOption, DhcpOptions, IAAddr, IANA, IAPD, IATA, Message, MessageType, ORO, OptionCode,
    Status,
};
use dhcproto::{Decodable, Decoder, Encodable};

use super::config::{Reservation, V6Config};
use super::decide::{Context, Dropped, Store, handle};
use super::duid::server_duid;
use super::leases::{LeaseTable, Record, State};
use crate::config::Mac;

const SERVER_MAC: Mac = Mac([0x02, 0, 0, 0, 0, 0x01]);
const T0: u64 = 1_800_000_000;

fn a(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

fn config() -> V6Config {
    let mut c = V6Config::new(
        SERVER_MAC,
        "2001:db8:1::/64".parse().unwrap(),
        a("2001:db8:1::100"),
        a("2001:db8:1::1ff"),
    );
    c.dns_servers = vec![a("2001:db8:1::53")];
    c.search = vec!["vlan.example".into()];
    c
}

fn table_with(c: V6Config) -> LeaseTable {
    c.validate().unwrap();
    LeaseTable::new(Arc::new(c))
}

fn table() -> LeaseTable {
    table_with(config())
}

fn duid_ll(mac: Mac) -> Vec<u8> {
    let mut d = vec![0, 3, 0, 1];
    d.extend_from_slice(&mac.0);
    d
}

fn duid_llt(mac: Mac) -> Vec<u8> {
    let mut d = vec![0, 1, 0, 1, 0x2e, 0x5f, 0x10, 0x01];
    d.extend_from_slice(&mac.0);
    d
}

fn duid_uuid(n: u8) -> Vec<u8> {
    let mut d = vec![0, 4];
    d.extend_from_slice(&[n; 16]);
    d
}

fn ours() -> Vec<u8> {
    server_duid(SERVER_MAC)
}

fn mac(n: u8) -> Mac {
    Mac([0x52, 0x54, 0, 0, 0, n])
}

fn ia(duid: &[u8], iaid: u32, mac: Option<Mac>) -> super::leases::Ia<'_> {
    super::leases::Ia { duid, iaid, mac }
}

fn at(now: u64) -> Context {
    Context {
        now,
        ..Context::default()
    }
}

/// A client message: type, client DUID, optional server DUID, IA_NAs as
/// (IAID, addresses).
struct Build {
    msg: Message,
}

impl Build {
    fn new(ty: MessageType, duid: Option<&[u8]>) -> Self {
        let mut msg = Message::new_with_id(ty, [0x0a, 0x0b, 0x0c]);
        if let Some(d) = duid {
            msg.opts_mut().insert(DhcpOption::ClientId(d.to_vec()));
        }
        msg.opts_mut().insert(DhcpOption::ElapsedTime(0));
        Build { msg }
    }
    fn server(mut self, d: Vec<u8>) -> Self {
        self.msg.opts_mut().insert(DhcpOption::ServerId(d));
        self
    }
    fn ia(mut self, id: u32, addrs: &[Ipv6Addr]) -> Self {
        let mut opts = DhcpOptions::new();
        for addr in addrs {
            opts.insert(DhcpOption::IAAddr(IAAddr {
                addr: *addr,
                preferred_life: 0,
                valid_life: 0,
                opts: DhcpOptions::new(),
            }));
        }
        self.msg.opts_mut().insert(DhcpOption::IANA(IANA {
            id,
            t1: 0,
            t2: 0,
            opts,
        }));
        self
    }
    fn opt(mut self, o: DhcpOption) -> Self {
        self.msg.opts_mut().insert(o);
        self
    }
    fn oro(self) -> Self {
        self.opt(DhcpOption::ORO(ORO {
            opts: vec![OptionCode::DomainNameServers, OptionCode::DomainSearchList],
        }))
    }
    fn bytes(&self) -> Vec<u8> {
        self.msg.to_vec().unwrap()
    }
}

/// Sends a message; returns the decoded reply and the store list.
fn send(t: &mut LeaseTable, b: &Build, ctx: &Context) -> Result<(Message, Vec<Store>), Dropped> {
    let ans = handle(t, &b.bytes(), ctx)?;
    let decoded = Message::decode(&mut Decoder::new(&ans.bytes)).expect("reply decodes");
    assert_eq!(decoded, ans.reply, "the bytes are the reply");
    assert_eq!(decoded.xid(), [0x0a, 0x0b, 0x0c], "transaction id echoed");
    assert_eq!(
        decoded.opts().get(OptionCode::ServerId),
        Some(&DhcpOption::ServerId(ours()))
    );
    Ok((decoded, ans.store))
}

fn top_status(m: &Message) -> Option<Status> {
    match m.opts().get(OptionCode::StatusCode) {
        Some(DhcpOption::StatusCode(s)) => Some(s.status),
        _ => None,
    }
}

fn ia_nas(m: &Message) -> Vec<&IANA> {
    m.opts()
        .iter()
        .filter_map(|o| match o {
            DhcpOption::IANA(ia) => Some(ia),
            _ => None,
        })
        .collect()
}

/// (address, preferred, valid) of the IA_NA `id`.
fn addrs(m: &Message, id: u32) -> Vec<(Ipv6Addr, u32, u32)> {
    let ia = ia_nas(m)
        .into_iter()
        .find(|ia| ia.id == id)
        .expect("IA_NA in reply");
    ia.opts
        .iter()
        .filter_map(|o| match o {
            DhcpOption::IAAddr(x) => Some((x.addr, x.preferred_life, x.valid_life)),
            _ => None,
        })
        .collect()
}

fn ia_status(opts: &DhcpOptions) -> Option<Status> {
    match opts.get(OptionCode::StatusCode) {
        Some(DhcpOption::StatusCode(s)) => Some(s.status),
        _ => None,
    }
}

fn na_status(m: &Message, id: u32) -> Option<Status> {
    let ia = ia_nas(m)
        .into_iter()
        .find(|ia| ia.id == id)
        .expect("IA_NA in reply");
    ia_status(&ia.opts)
}

/// Solicit then Request; the committed address.
fn sarr(t: &mut LeaseTable, duid: &[u8], ctx: &Context) -> Ipv6Addr {
    let (adv, store) = send(
        t,
        &Build::new(MessageType::Solicit, Some(duid)).ia(1, &[]),
        ctx,
    )
    .unwrap();
    assert_eq!(adv.msg_type(), MessageType::Advertise);
    assert!(store.is_empty(), "an Advertise persists nothing");
    let offered = addrs(&adv, 1)[0].0;
    let req = Build::new(MessageType::Request, Some(duid))
        .server(ours())
        .ia(1, &[offered]);
    let (rep, store) = send(t, &req, ctx).unwrap();
    assert_eq!(rep.msg_type(), MessageType::Reply);
    let got = addrs(&rep, 1);
    assert_eq!(
        got,
        vec![(offered, 3000, 3600)],
        "the advertised address is committed"
    );
    assert!(
        matches!(store.last(), Some(Store::Put(r)) if r.address == offered && r.state == State::Bound)
    );
    offered
}

#[test]
fn solicit_is_advertised_an_address_of_the_range_with_configured_timers() {
    let mut t = table();
    let d = duid_ll(mac(1));
    let (adv, store) = send(
        &mut t,
        &Build::new(MessageType::Solicit, Some(&d)).ia(7, &[]),
        &at(T0),
    )
    .unwrap();
    assert_eq!(adv.msg_type(), MessageType::Advertise);
    assert_eq!(
        adv.opts().get(OptionCode::ClientId),
        Some(&DhcpOption::ClientId(d))
    );
    assert_eq!(
        adv.opts().get(OptionCode::Preference),
        Some(&DhcpOption::Preference(255))
    );
    let ia = ia_nas(&adv)[0];
    assert_eq!((ia.id, ia.t1, ia.t2), (7, 1500, 2400));
    let got = addrs(&adv, 7);
    assert_eq!(got.len(), 1);
    assert!(t.config().in_range(got[0].0));
    assert_eq!((got[0].1, got[0].2), (3000, 3600));
    assert!(store.is_empty());
    assert_eq!(t.get(got[0].0).unwrap().state, State::Offered);
    assert!(adv.opts().get(OptionCode::RapidCommit).is_none());
}

#[test]
fn request_commits_the_advertised_address_and_asks_for_it_to_be_stored() {
    let mut t = table();
    let d = duid_ll(mac(1));
    let addr = sarr(&mut t, &d, &at(T0));
    let r = t.binding(&d, 1).unwrap();
    assert_eq!(
        (r.address, r.state, r.expires),
        (addr, State::Bound, T0 + 3600)
    );
    assert_eq!(r.mac, Some(mac(1)));
}

#[test]
fn rapid_commit_is_ignored_when_not_configured() {
    let mut t = table();
    let b = Build::new(MessageType::Solicit, Some(&duid_ll(mac(1))))
        .ia(1, &[])
        .opt(DhcpOption::RapidCommit);
    let (m, store) = send(&mut t, &b, &at(T0)).unwrap();
    assert_eq!(m.msg_type(), MessageType::Advertise);
    assert!(m.opts().get(OptionCode::RapidCommit).is_none());
    assert!(store.is_empty());
}

#[test]
fn rapid_commit_when_configured_and_asked_answers_a_committed_reply() {
    let mut c = config();
    c.rapid_commit = true;
    let mut t = table_with(c);
    let d = duid_ll(mac(1));
    let b = Build::new(MessageType::Solicit, Some(&d))
        .ia(1, &[])
        .opt(DhcpOption::RapidCommit);
    let (m, store) = send(&mut t, &b, &at(T0)).unwrap();
    assert_eq!(m.msg_type(), MessageType::Reply);
    assert_eq!(
        m.opts().get(OptionCode::RapidCommit),
        Some(&DhcpOption::RapidCommit)
    );
    assert!(m.opts().get(OptionCode::Preference).is_none());
    let addr = addrs(&m, 1)[0].0;
    assert_eq!(store, vec![Store::Put(t.binding(&d, 1).unwrap().clone())]);
    assert_eq!(t.get(addr).unwrap().state, State::Bound);
    // Configured but not asked: a normal Advertise.
    let b = Build::new(MessageType::Solicit, Some(&duid_ll(mac(2)))).ia(1, &[]);
    let (m, store) = send(&mut t, &b, &at(T0)).unwrap();
    assert_eq!(m.msg_type(), MessageType::Advertise);
    assert!(store.is_empty());
}

#[test]
fn messages_for_another_server_or_without_server_id_are_dropped() {
    let mut t = table();
    let d = duid_ll(mac(1));
    let other = server_duid(Mac([0x02, 0, 0, 0, 0, 0x99]));
    for ty in [
        MessageType::Request,
        MessageType::Renew,
        MessageType::Release,
        MessageType::Decline,
    ] {
        let b = Build::new(ty, Some(&d))
            .server(other.clone())
            .ia(1, &[a("2001:db8:1::100")]);
        assert_eq!(
            send(&mut t, &b, &at(T0)).unwrap_err(),
            Dropped::NotForUs,
            "{ty:?}"
        );
        let b = Build::new(ty, Some(&d)).ia(1, &[a("2001:db8:1::100")]);
        assert_eq!(
            send(&mut t, &b, &at(T0)).unwrap_err(),
            Dropped::MissingServerId,
            "{ty:?}"
        );
    }
    assert_eq!(t.records().count(), 0, "nothing was bound");
}

#[test]
fn solicit_confirm_and_rebind_must_not_carry_a_server_id() {
    let mut t = table();
    let d = duid_ll(mac(1));
    for ty in [
        MessageType::Solicit,
        MessageType::Confirm,
        MessageType::Rebind,
    ] {
        for sid in [ours(), server_duid(Mac([0x02, 0, 0, 0, 0, 0x99]))] {
            let b = Build::new(ty, Some(&d))
                .server(sid)
                .ia(1, &[a("2001:db8:1::100")]);
            assert_eq!(
                send(&mut t, &b, &at(T0)).unwrap_err(),
                Dropped::UnexpectedServerId,
                "{ty:?}"
            );
        }
    }
}

#[test]
fn information_request_gets_dns_and_search_list_when_asked() {
    let mut t = table();
    // Without a Client Identifier (allowed for Information-request).
    let b = Build::new(MessageType::InformationRequest, None).oro();
    let (m, store) = send(&mut t, &b, &at(T0)).unwrap();
    assert_eq!(m.msg_type(), MessageType::Reply);
    assert!(store.is_empty());
    assert!(m.opts().get(OptionCode::ClientId).is_none());
    assert_eq!(
        m.opts().get(OptionCode::DomainNameServers),
        Some(&DhcpOption::DomainNameServers(vec![a("2001:db8:1::53")]))
    );
    match m.opts().get(OptionCode::DomainSearchList) {
        Some(DhcpOption::DomainSearchList(names)) => {
            assert_eq!(names.len(), 1);
            assert_eq!(names[0].to_ascii().trim_end_matches('.'), "vlan.example");
        }
        other => panic!("no search list: {other:?}"),
    }
    assert!(ia_nas(&m).is_empty());
    // No ORO: nothing asked, nothing sent.
    let (m, _) = send(
        &mut t,
        &Build::new(MessageType::InformationRequest, Some(&duid_uuid(1))),
        &at(T0),
    )
    .unwrap();
    assert!(m.opts().get(OptionCode::DomainNameServers).is_none());
    assert!(m.opts().get(OptionCode::DomainSearchList).is_none());
    // Our server id is accepted, another one is not.
    let b = Build::new(MessageType::InformationRequest, Some(&duid_uuid(1)))
        .server(ours())
        .oro();
    assert!(send(&mut t, &b, &at(T0)).is_ok());
    let b = Build::new(MessageType::InformationRequest, Some(&duid_uuid(1)))
        .server(server_duid(Mac([0x02, 0, 0, 0, 0, 0x99])))
        .oro();
    assert_eq!(send(&mut t, &b, &at(T0)).unwrap_err(), Dropped::NotForUs);
}

#[test]
fn solicit_and_request_carry_dns_options_only_when_asked() {
    let mut t = table();
    let d = duid_ll(mac(1));
    let (m, _) = send(
        &mut t,
        &Build::new(MessageType::Solicit, Some(&d)).ia(1, &[]).oro(),
        &at(T0),
    )
    .unwrap();
    assert!(m.opts().get(OptionCode::DomainNameServers).is_some());
    assert!(m.opts().get(OptionCode::DomainSearchList).is_some());
    let (m, _) = send(
        &mut t,
        &Build::new(MessageType::Solicit, Some(&d)).ia(1, &[]),
        &at(T0),
    )
    .unwrap();
    assert!(m.opts().get(OptionCode::DomainNameServers).is_none());
}

#[test]
fn client_id_is_required_and_must_be_a_duid() {
    let mut t = table();
    for ty in [
        MessageType::Solicit,
        MessageType::Request,
        MessageType::Renew,
        MessageType::Rebind,
        MessageType::Release,
        MessageType::Decline,
        MessageType::Confirm,
    ] {
        let b = Build::new(ty, None).ia(1, &[a("2001:db8:1::100")]);
        assert_eq!(
            send(&mut t, &b, &at(T0)).unwrap_err(),
            Dropped::MissingClientId,
            "{ty:?}"
        );
    }
    let b = Build::new(MessageType::Solicit, Some(&[0, 4, 1])).ia(1, &[]);
    assert_eq!(
        send(&mut t, &b, &at(T0)).unwrap_err(),
        Dropped::InvalidClientId
    );
}

#[test]
fn garbage_and_server_messages_are_dropped() {
    let mut t = table();
    assert_eq!(
        handle(&mut t, &[], &at(T0)).unwrap_err(),
        Dropped::Malformed
    );
    assert_eq!(
        handle(&mut t, &[1, 2], &at(T0)).unwrap_err(),
        Dropped::Malformed
    );
    for ty in [
        MessageType::Advertise,
        MessageType::Reply,
        MessageType::Reconfigure,
    ] {
        let b = Build::new(ty, Some(&duid_ll(mac(1)))).server(ours());
        assert_eq!(
            send(&mut t, &b, &at(T0)).unwrap_err(),
            Dropped::NotAClientMessage
        );
    }
}

#[test]
fn temporary_addresses_and_prefixes_are_refused_inside_their_ias() {
    let mut t = table();
    let d = duid_ll(mac(1));
    let b = Build::new(MessageType::Solicit, Some(&d))
        .ia(1, &[])
        .opt(DhcpOption::IATA(IATA {
            id: 2,
            opts: DhcpOptions::new(),
        }))
        .opt(DhcpOption::IAPD(IAPD {
            id: 3,
            t1: 0,
            t2: 0,
            opts: DhcpOptions::new(),
        }));
    let (m, _) = send(&mut t, &b, &at(T0)).unwrap();
    assert_eq!(addrs(&m, 1).len(), 1);
    assert_eq!(top_status(&m), None);
    match m.opts().get(OptionCode::IATA) {
        Some(DhcpOption::IATA(ia)) => {
            assert_eq!(
                (ia.id, ia_status(&ia.opts)),
                (2, Some(Status::NoAddrsAvail))
            )
        }
        o => panic!("{o:?}"),
    }
    match m.opts().get(OptionCode::IAPD) {
        Some(DhcpOption::IAPD(ia)) => {
            assert_eq!(
                (ia.id, ia_status(&ia.opts)),
                (3, Some(Status::NoPrefixAvail))
            )
        }
        o => panic!("{o:?}"),
    }
    // Only an IA_PD: nothing this server would give, §18.3.9's bare status.
    let b = Build::new(MessageType::Solicit, Some(&d)).opt(DhcpOption::IAPD(IAPD {
        id: 3,
        t1: 0,
        t2: 0,
        opts: DhcpOptions::new(),
    }));
    let (m, _) = send(&mut t, &b, &at(T0)).unwrap();
    assert_eq!(top_status(&m), Some(Status::NoAddrsAvail));
    assert!(ia_nas(&m).is_empty() && m.opts().get(OptionCode::IAPD).is_none());
}

#[test]
fn renew_extends_the_binding() {
    let mut t = table();
    let d = duid_ll(mac(1));
    let addr = sarr(&mut t, &d, &at(T0));
    let b = Build::new(MessageType::Renew, Some(&d))
        .server(ours())
        .ia(1, &[addr]);
    let (m, store) = send(&mut t, &b, &at(T0 + 1500)).unwrap();
    assert_eq!(addrs(&m, 1), vec![(addr, 3000, 3600)]);
    assert_eq!(na_status(&m, 1), None);
    assert_eq!(t.binding(&d, 1).unwrap().expires, T0 + 1500 + 3600);
    assert_eq!(store, vec![Store::Put(t.binding(&d, 1).unwrap().clone())]);
}

#[test]
fn renew_of_an_unknown_binding_is_answered_no_binding() {
    let mut t = table();
    let d = duid_ll(mac(1));
    let b = Build::new(MessageType::Renew, Some(&d))
        .server(ours())
        .ia(4, &[a("2001:db8:1::150")]);
    let (m, store) = send(&mut t, &b, &at(T0)).unwrap();
    assert_eq!(na_status(&m, 4), Some(Status::NoBinding));
    assert!(addrs(&m, 4).is_empty());
    assert_eq!(top_status(&m), None, "no Success beside a NoBinding");
    assert!(store.is_empty());
    assert!(t.records().next().is_none(), "Renew creates nothing");
}

#[test]
fn renew_of_an_off_link_address_gets_zero_lifetimes_beside_the_real_one() {
    let mut t = table();
    let d = duid_ll(mac(1));
    let addr = sarr(&mut t, &d, &at(T0));
    let b = Build::new(MessageType::Renew, Some(&d))
        .server(ours())
        .ia(1, &[a("2001:db8:99::5"), addr]);
    let (m, _) = send(&mut t, &b, &at(T0 + 10)).unwrap();
    let mut got = addrs(&m, 1);
    got.sort();
    let mut want = vec![(a("2001:db8:99::5"), 0, 0), (addr, 3000, 3600)];
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn rebind_from_another_link_gets_zero_lifetimes() {
    let mut t = table();
    let d = duid_uuid(3);
    let b = Build::new(MessageType::Rebind, Some(&d)).ia(1, &[a("2001:db8:77::10")]);
    let (m, store) = send(&mut t, &b, &at(T0)).unwrap();
    assert_eq!(addrs(&m, 1), vec![(a("2001:db8:77::10"), 0, 0)]);
    assert!(store.is_empty());
}

#[test]
fn rebind_of_a_lost_binding_recovers_a_free_address_but_not_a_taken_one() {
    let mut t = table();
    let d = duid_uuid(3);
    let free = a("2001:db8:1::1a0");
    let b = Build::new(MessageType::Rebind, Some(&d)).ia(1, &[free]);
    let (m, store) = send(&mut t, &b, &at(T0)).unwrap();
    assert_eq!(addrs(&m, 1), vec![(free, 3000, 3600)]);
    assert_eq!(store.len(), 1);
    assert_eq!(t.binding(&d, 1).unwrap().address, free);
    // Another client's bound address is not handed over.
    let other = duid_uuid(4);
    let b = Build::new(MessageType::Rebind, Some(&other)).ia(1, &[free]);
    let (m, store) = send(&mut t, &b, &at(T0)).unwrap();
    assert_eq!(na_status(&m, 1), Some(Status::NoBinding));
    assert!(store.is_empty());
    assert_eq!(t.get(free).unwrap().duid, d);
}

#[test]
fn release_ends_the_binding_and_answers_success() {
    let mut t = table();
    let d = duid_ll(mac(1));
    let addr = sarr(&mut t, &d, &at(T0));
    let b = Build::new(MessageType::Release, Some(&d))
        .server(ours())
        .ia(1, &[addr]);
    let (m, store) = send(&mut t, &b, &at(T0 + 5)).unwrap();
    assert_eq!(top_status(&m), Some(Status::Success));
    assert!(ia_nas(&m).is_empty());
    assert!(matches!(&store[..], [Store::Remove(r)] if r.address == addr));
    assert!(t.get(addr).is_none());
    // Releasing it again: NoBinding in the IA, Success overall.
    let (m, store) = send(&mut t, &b, &at(T0 + 6)).unwrap();
    assert_eq!(top_status(&m), Some(Status::Success));
    assert_eq!(na_status(&m, 1), Some(Status::NoBinding));
    assert!(store.is_empty());
}

#[test]
fn a_declined_address_is_held_back_and_the_client_gets_another() {
    let mut c = config();
    c.decline_hold = 600;
    let mut t = table_with(c);
    let d = duid_ll(mac(1));
    let addr = sarr(&mut t, &d, &at(T0));
    let b = Build::new(MessageType::Decline, Some(&d))
        .server(ours())
        .ia(1, &[addr]);
    let (m, store) = send(&mut t, &b, &at(T0 + 1)).unwrap();
    assert_eq!(top_status(&m), Some(Status::Success));
    assert!(matches!(&store[..], [Store::Remove(r)] if r.address == addr));
    assert!(t.is_held(addr, T0 + 1));
    let again = sarr(&mut t, &d, &at(T0 + 2));
    assert_ne!(again, addr, "the declined address is not offered again");
    // After the hold the address is free: the client's first choice again.
    t.expire(T0 + 700);
    assert!(!t.is_held(addr, T0 + 700));
    let b = Build::new(MessageType::Release, Some(&d))
        .server(ours())
        .ia(1, &[again]);
    send(&mut t, &b, &at(T0 + 700)).unwrap();
    assert_eq!(sarr(&mut t, &d, &at(T0 + 701)), addr);
}

#[test]
fn confirm_answers_success_on_link_and_not_on_link_off_it() {
    let mut t = table();
    let d = duid_uuid(9);
    let b = Build::new(MessageType::Confirm, Some(&d)).ia(1, &[a("2001:db8:1::123")]);
    let (m, store) = send(&mut t, &b, &at(T0)).unwrap();
    assert_eq!(top_status(&m), Some(Status::Success));
    assert!(store.is_empty());
    let b = Build::new(MessageType::Confirm, Some(&d))
        .ia(1, &[a("2001:db8:1::123"), a("2001:db8:2::1")]);
    let (m, _) = send(&mut t, &b, &at(T0)).unwrap();
    assert_eq!(top_status(&m), Some(Status::NotOnLink));
    let b = Build::new(MessageType::Confirm, Some(&d)).ia(1, &[]);
    assert_eq!(
        send(&mut t, &b, &at(T0)).unwrap_err(),
        Dropped::NothingToConfirm
    );
}

#[test]
fn request_with_an_address_from_another_link_is_not_on_link() {
    let mut t = table();
    let d = duid_ll(mac(1));
    let b = Build::new(MessageType::Request, Some(&d))
        .server(ours())
        .ia(1, &[a("2001:db8:5::1")]);
    let (m, store) = send(&mut t, &b, &at(T0)).unwrap();
    assert_eq!(na_status(&m, 1), Some(Status::NotOnLink));
    assert!(store.is_empty());
}

#[test]
fn unicast_requests_are_told_to_use_multicast() {
    let mut t = table();
    let d = duid_ll(mac(1));
    let ctx = Context {
        unicast: true,
        ..at(T0)
    };
    let b = Build::new(MessageType::Request, Some(&d))
        .server(ours())
        .ia(1, &[]);
    let (m, store) = send(&mut t, &b, &ctx).unwrap();
    assert_eq!(top_status(&m), Some(Status::UseMulticast));
    assert!(ia_nas(&m).is_empty() && store.is_empty());
}

fn reserved(mac: Mac, addr: &str) -> V6Config {
    let mut c = config();
    c.reservations.push(Reservation {
        mac,
        address: a(addr),
    });
    c
}

#[test]
fn reservation_matches_the_mac_of_a_duid_ll() {
    // Outside the dynamic range, inside the prefix.
    let mut t = table_with(reserved(mac(1), "2001:db8:1::10"));
    assert_eq!(sarr(&mut t, &duid_ll(mac(1)), &at(T0)), a("2001:db8:1::10"));
}

#[test]
fn reservation_matches_the_mac_of_a_duid_llt() {
    let mut t = table_with(reserved(mac(1), "2001:db8:1::10"));
    assert_eq!(
        sarr(&mut t, &duid_llt(mac(1)), &at(T0)),
        a("2001:db8:1::10")
    );
}

#[test]
fn reservation_matches_the_frame_mac_of_a_duid_uuid_client() {
    let mut t = table_with(reserved(mac(1), "2001:db8:1::10"));
    let ctx = Context {
        frame_mac: Some(mac(1)),
        ..at(T0)
    };
    assert_eq!(sarr(&mut t, &duid_uuid(1), &ctx), a("2001:db8:1::10"));
    // Without the frame MAC the same DUID-UUID is a stranger.
    let mut t = table_with(reserved(mac(1), "2001:db8:1::10"));
    assert_ne!(sarr(&mut t, &duid_uuid(1), &at(T0)), a("2001:db8:1::10"));
}

#[test]
fn reservation_matches_the_relayed_client_link_layer_address() {
    let mut t = table_with(reserved(mac(1), "2001:db8:1::10"));
    let ctx = Context {
        relay_link_layer: Some(mac(1)),
        // The frame came from the relay.
        frame_mac: Some(mac(200)),
        ..at(T0)
    };
    assert_eq!(sarr(&mut t, &duid_uuid(1), &ctx), a("2001:db8:1::10"));
}

#[test]
fn the_frame_mac_wins_over_a_stale_duid_llt() {
    // A cloned disk kept the DUID-LLT of a NIC that is now another machine's.
    let mut t = table_with(reserved(mac(1), "2001:db8:1::10"));
    let ctx = Context {
        frame_mac: Some(mac(2)),
        ..at(T0)
    };
    assert_ne!(sarr(&mut t, &duid_llt(mac(1)), &ctx), a("2001:db8:1::10"));
}

#[test]
fn a_reserved_address_is_never_given_to_another_mac() {
    let mut c = config();
    c.range_start = a("2001:db8:1::100");
    c.range_end = a("2001:db8:1::101");
    c.reservations.push(Reservation {
        mac: mac(1),
        address: a("2001:db8:1::100"),
    });
    let mut t = table_with(c);
    assert_eq!(
        sarr(&mut t, &duid_ll(mac(2)), &at(T0)),
        a("2001:db8:1::101")
    );
    let (m, _) = send(
        &mut t,
        &Build::new(MessageType::Solicit, Some(&duid_ll(mac(3)))).ia(1, &[]),
        &at(T0),
    )
    .unwrap();
    assert_eq!(top_status(&m), Some(Status::NoAddrsAvail));
    assert_eq!(
        sarr(&mut t, &duid_ll(mac(1)), &at(T0)),
        a("2001:db8:1::100")
    );
}

#[test]
fn a_reinstalled_vm_with_a_new_duid_uuid_gets_its_address_back_by_mac() {
    let mut t = table();
    let m = mac(42);
    let ctx = Context {
        frame_mac: Some(m),
        ..at(T0)
    };
    let first = sarr(&mut t, &duid_uuid(1), &ctx);
    // Re-installed: new DUID-UUID, new IAID, same NIC; the old binding is live.
    let d2 = duid_uuid(2);
    let (adv, _) = send(
        &mut t,
        &Build::new(MessageType::Solicit, Some(&d2)).ia(99, &[]),
        &ctx,
    )
    .unwrap();
    assert_eq!(addrs(&adv, 99)[0].0, first);
    let req = Build::new(MessageType::Request, Some(&d2))
        .server(ours())
        .ia(99, &[first]);
    let (rep, store) = send(&mut t, &req, &ctx).unwrap();
    assert_eq!(addrs(&rep, 99)[0].0, first);
    // The stale binding is dropped from the log, the new one stored.
    assert!(matches!(&store[..], [Store::Remove(old), Store::Put(new)]
        if old.duid == duid_uuid(1) && new.duid == d2 && new.address == first));
    assert!(t.binding(&duid_uuid(1), 1).is_none());
    // The old install's renewal, should it still come, finds no binding.
    let b = Build::new(MessageType::Renew, Some(&duid_uuid(1)))
        .server(ours())
        .ia(1, &[first]);
    let (m, _) = send(&mut t, &b, &ctx).unwrap();
    assert_eq!(na_status(&m, 1), Some(Status::NoBinding));
}

#[test]
fn a_reservation_wins_over_a_stale_duid_binding_of_the_same_mac() {
    let m = mac(42);
    let ctx = Context {
        frame_mac: Some(m),
        ..at(T0)
    };
    // The old install held some range address; then the reservation appears.
    let mut t = table();
    let old = sarr(&mut t, &duid_uuid(1), &ctx);
    let records: Vec<Record> = t.records().cloned().collect();
    let mut t = LeaseTable::from_records(Arc::new(reserved(m, "2001:db8:1::10")), records, T0);
    assert_eq!(t.get(old).unwrap().duid, duid_uuid(1));
    // The new install gets the reserved address, not the stale one.
    assert_eq!(sarr(&mut t, &duid_uuid(2), &ctx), a("2001:db8:1::10"));
    // And the reservation is taken over when the stale DUID holds it.
    let mut t = table_with(reserved(m, "2001:db8:1::10"));
    assert_eq!(sarr(&mut t, &duid_uuid(1), &ctx), a("2001:db8:1::10"));
    assert_eq!(sarr(&mut t, &duid_uuid(2), &ctx), a("2001:db8:1::10"));
    assert!(t.binding(&duid_uuid(1), 1).is_none());
}

#[test]
fn a_binding_the_config_no_longer_allows_is_not_restored() {
    // Bound before the reservation existed, by another machine.
    let mut t = table();
    let ctx_b = Context {
        frame_mac: Some(mac(2)),
        ..at(T0)
    };
    let taken = sarr(&mut t, &duid_uuid(2), &ctx_b);
    let mut c = config();
    c.reservations.push(Reservation {
        mac: mac(1),
        address: taken,
    });
    let records: Vec<Record> = t.records().cloned().collect();
    // A reservation for another MAC makes the old binding not allowed.
    let t2 = LeaseTable::from_records(Arc::new(c), records, T0);
    assert!(
        t2.get(taken).is_none(),
        "a binding the config no longer allows is not restored"
    );
}

#[test]
fn pool_exhaustion_is_no_addrs_avail() {
    let mut c = config();
    c.range_start = a("2001:db8:1::100");
    c.range_end = a("2001:db8:1::101");
    let mut t = table_with(c);
    sarr(&mut t, &duid_ll(mac(1)), &at(T0));
    sarr(&mut t, &duid_ll(mac(2)), &at(T0));
    let d = duid_ll(mac(3));
    let (m, store) = send(
        &mut t,
        &Build::new(MessageType::Solicit, Some(&d)).ia(1, &[]),
        &at(T0),
    )
    .unwrap();
    assert_eq!(m.msg_type(), MessageType::Advertise);
    assert_eq!(top_status(&m), Some(Status::NoAddrsAvail));
    assert!(ia_nas(&m).is_empty() && store.is_empty());
    let b = Build::new(MessageType::Request, Some(&d))
        .server(ours())
        .ia(1, &[]);
    let (m, store) = send(&mut t, &b, &at(T0)).unwrap();
    assert_eq!(na_status(&m, 1), Some(Status::NoAddrsAvail));
    assert!(store.is_empty());
    // An expired binding frees its address.
    assert_eq!(t.expire(T0 + 3600).len(), 2);
    assert_eq!(
        addrs(&send(&mut t, &b, &at(T0 + 3600)).unwrap().0, 1).len(),
        1
    );
}

#[test]
fn allocation_is_deterministic_and_collision_free() {
    let mut c = config();
    c.range_start = a("2001:db8:1::100");
    c.range_end = a("2001:db8:1::131");
    let c = Arc::new(c);
    let mut t = LeaseTable::new(c.clone());
    let mut seen = std::collections::BTreeSet::new();
    for n in 0..50u8 {
        let (r, _) = t.commit(ia(&duid_ll(mac(n)), 1, Some(mac(n))), T0).unwrap();
        assert!(seen.insert(r.address), "address {} given twice", r.address);
        assert!(c.in_range(r.address));
    }
    assert!(
        t.commit(ia(&duid_ll(mac(50)), 1, Some(mac(50))), T0)
            .is_err()
    );
    // The same MAC lands on the same address in a fresh table (lost state).
    let mut a1 = LeaseTable::new(c.clone());
    let mut a2 = LeaseTable::new(c);
    let x = a1
        .commit(ia(&duid_uuid(1), 1, Some(mac(7))), T0)
        .unwrap()
        .0
        .address;
    let y = a2
        .commit(ia(&duid_uuid(2), 5, Some(mac(7))), T0)
        .unwrap()
        .0
        .address;
    assert_eq!(x, y);
}

#[test]
fn several_ia_nas_of_one_client_get_distinct_addresses() {
    let mut t = table();
    let d = duid_ll(mac(1));
    let b = Build::new(MessageType::Request, Some(&d))
        .server(ours())
        .ia(1, &[])
        .ia(2, &[]);
    let (m, store) = send(&mut t, &b, &at(T0)).unwrap();
    let (x, y) = (addrs(&m, 1)[0].0, addrs(&m, 2)[0].0);
    assert_ne!(x, y);
    assert_eq!(store.len(), 2);
    // A second Request keeps both.
    let (m, _) = send(&mut t, &b, &at(T0 + 1)).unwrap();
    assert_eq!((addrs(&m, 1)[0].0, addrs(&m, 2)[0].0), (x, y));
}

#[test]
fn a_large_range_allocates_without_scanning_it() {
    // A whole /64 as the range: probing is bounded by occupied addresses.
    let mut c = config();
    c.range_start = a("2001:db8:1::");
    c.range_end = a("2001:db8:1::ffff:ffff:ffff:ffff");
    let mut t = table_with(c);
    let x = sarr(&mut t, &duid_ll(mac(1)), &at(T0));
    let y = sarr(&mut t, &duid_ll(mac(2)), &at(T0));
    assert_ne!(x, y);
}

#[test]
fn lease_records_round_trip_through_serde_and_restore() {
    let mut t = table();
    let d = duid_ll(mac(1));
    let addr = sarr(&mut t, &d, &at(T0));
    let json = serde_json::to_string(&t.records().cloned().collect::<Vec<_>>()).unwrap();
    let back: Vec<Record> = serde_json::from_str(&json).unwrap();
    let t2 = LeaseTable::from_records(t.config().clone(), back.clone(), T0 + 1);
    assert_eq!(t2.binding(&d, 1).unwrap().address, addr);
    // Expired records are not restored.
    let t3 = LeaseTable::from_records(t.config().clone(), back, T0 + 3600);
    assert!(t3.records().next().is_none());
}

#[test]
fn config_validation_names_what_is_wrong() {
    use super::config::ConfigError;
    let mut c = config();
    c.range_start = a("2001:db8:1::200");
    assert!(matches!(
        c.validate(),
        Err(ConfigError::RangeReversed { .. })
    ));
    let mut c = config();
    c.range_end = a("2001:db8:2::1");
    assert!(matches!(
        c.validate(),
        Err(ConfigError::OutsidePrefix {
            field: "rangeEnd",
            ..
        })
    ));
    let mut c = reserved(mac(1), "2001:db8:1::10");
    c.reservations.push(Reservation {
        mac: mac(1),
        address: a("2001:db8:1::11"),
    });
    assert!(matches!(
        c.validate(),
        Err(ConfigError::DuplicateReservation(_))
    ));
    let mut c = config();
    c.preferred_lifetime = 7200;
    assert_eq!(c.validate(), Err(ConfigError::Lifetimes));
    let mut c = config();
    c.search = vec!["bad..name".into()];
    assert!(matches!(c.validate(), Err(ConfigError::SearchDomain(_))));
    let c: V6Config = serde_json::from_str(
        r#"{"serverMac":"02:00:00:00:00:01","prefix":"2001:db8:1::/64",
            "rangeStart":"2001:db8:1::100","rangeEnd":"2001:db8:1::1ff"}"#,
    )
    .unwrap();
    assert_eq!(
        c,
        V6Config::new(
            SERVER_MAC,
            "2001:db8:1::/64".parse().unwrap(),
            a("2001:db8:1::100"),
            a("2001:db8:1::1ff")
        )
    );
    assert!(!c.rapid_commit);
}

#[test]
fn a_reserved_binding_renews_without_the_frame_mac() {
    let mut t = table_with(reserved(mac(1), "2001:db8:1::10"));
    let d = duid_uuid(1);
    let ctx = Context {
        frame_mac: Some(mac(1)),
        ..at(T0)
    };
    let addr = sarr(&mut t, &d, &ctx);
    assert_eq!(addr, a("2001:db8:1::10"));
    // The renewal arrives with no frame MAC known: the binding's MAC stands.
    let b = Build::new(MessageType::Renew, Some(&d))
        .server(ours())
        .ia(1, &[addr]);
    let (m, _) = send(&mut t, &b, &at(T0 + 1500)).unwrap();
    assert_eq!(addrs(&m, 1), vec![(addr, 3000, 3600)]);
    // Another MAC's client renewing it is told it is not its address.
    let b = Build::new(MessageType::Renew, Some(&duid_ll(mac(2))))
        .server(ours())
        .ia(1, &[addr]);
    let (m, _) = send(&mut t, &b, &at(T0 + 1500)).unwrap();
    assert_eq!(addrs(&m, 1), vec![(addr, 0, 0)]);
}

#[test]
fn information_request_with_an_ia_is_dropped() {
    let mut t = table();
    let b = Build::new(MessageType::InformationRequest, Some(&duid_uuid(1))).ia(1, &[]);
    assert_eq!(
        send(&mut t, &b, &at(T0)).unwrap_err(),
        Dropped::IaInInformationRequest
    );
}

#[test]
fn one_client_cannot_drain_the_range_with_new_iaids() {
    let mut t = table();
    let d = duid_uuid(1);
    for iaid in 0..super::leases::MAX_IAS_PER_CLIENT as u32 {
        let b = Build::new(MessageType::Request, Some(&d))
            .server(ours())
            .ia(iaid, &[]);
        let (m, _) = send(&mut t, &b, &at(T0)).unwrap();
        assert_eq!(addrs(&m, iaid).len(), 1);
    }
    let b = Build::new(MessageType::Request, Some(&d))
        .server(ours())
        .ia(100, &[]);
    let (m, store) = send(&mut t, &b, &at(T0)).unwrap();
    assert_eq!(na_status(&m, 100), Some(Status::NoAddrsAvail));
    assert!(store.is_empty());
    // Its existing IAs still renew.
    let b = Build::new(MessageType::Request, Some(&d))
        .server(ours())
        .ia(0, &[]);
    let (m, _) = send(&mut t, &b, &at(T0 + 1)).unwrap();
    assert_eq!(addrs(&m, 0).len(), 1);
}

#[test]
fn a_moved_reservation_ends_the_old_binding_on_reload() {
    let m = mac(1);
    let mut t = table_with(reserved(m, "2001:db8:1::10"));
    let d = duid_ll(m);
    sarr(&mut t, &d, &at(T0));
    let gone = t.reconfigure(Arc::new(reserved(m, "2001:db8:1::20")));
    assert_eq!(gone.len(), 1);
    assert_eq!(gone[0].address, a("2001:db8:1::10"));
    // The renewal finds no binding; the client's next Request gets the new one.
    let b = Build::new(MessageType::Renew, Some(&d))
        .server(ours())
        .ia(1, &[a("2001:db8:1::10")]);
    let (rep, _) = send(&mut t, &b, &at(T0 + 10)).unwrap();
    assert_eq!(addrs(&rep, 1), vec![(a("2001:db8:1::10"), 0, 0)]);
    assert_eq!(sarr(&mut t, &d, &at(T0 + 11)), a("2001:db8:1::20"));
}

#[test]
fn a_new_reservation_waits_for_another_machines_live_binding_to_end() {
    let mut t = table();
    let other = duid_ll(mac(2));
    let taken = sarr(&mut t, &other, &at(T0));
    assert!(
        t.reconfigure(Arc::new(reserved(mac(1), &taken.to_string())))
            .is_empty()
    );
    // The reserved MAC gets another address while the old holder's lease lives.
    let d = duid_ll(mac(1));
    let first = sarr(&mut t, &d, &at(T0 + 1));
    assert_ne!(first, taken);
    // The old holder's renewal is told the address is not its own.
    let b = Build::new(MessageType::Renew, Some(&other))
        .server(ours())
        .ia(1, &[taken]);
    let (m, _) = send(&mut t, &b, &at(T0 + 2)).unwrap();
    assert_eq!(
        addrs(&m, 1).iter().find(|x| x.0 == taken),
        Some(&(taken, 0, 0))
    );
    // Once it ended, the reservation is honoured.
    t.expire(T0 + 3600);
    let b = Build::new(MessageType::Release, Some(&d))
        .server(ours())
        .ia(1, &[first]);
    send(&mut t, &b, &at(T0 + 3600)).unwrap();
    assert_eq!(sarr(&mut t, &d, &at(T0 + 3601)), taken);
}

#[test]
fn stats_count_bound_offered_and_declined() {
    let mut t = table();
    sarr(&mut t, &duid_ll(mac(1)), &at(T0));
    send(
        &mut t,
        &Build::new(MessageType::Solicit, Some(&duid_ll(mac(2)))).ia(1, &[]),
        &at(T0),
    )
    .unwrap();
    let d = duid_ll(mac(3));
    let addr = sarr(&mut t, &d, &at(T0));
    send(
        &mut t,
        &Build::new(MessageType::Decline, Some(&d))
            .server(ours())
            .ia(1, &[addr]),
        &at(T0),
    )
    .unwrap();
    let s = t.stats(T0 + 1);
    assert_eq!(
        (s.range_size, s.bound, s.offered, s.declined),
        (256, 1, 1, 1)
    );
    // Offers end after offerHold.
    assert_eq!(t.stats(T0 + 61).offered, 0);
}

#[test]
fn records_serialise_the_duid_as_hex() {
    let r = Record {
        address: a("2001:db8:1::100"),
        duid: vec![0, 3, 0, 1, 0xab, 0xcd],
        iaid: 7,
        mac: Some(mac(1)),
        state: State::Bound,
        expires: T0,
    };
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["duid"], "00030001abcd");
    assert_eq!(json["mac"], "52:54:00:00:00:01");
    assert_eq!(serde_json::from_value::<Record>(json).unwrap(), r);
    let bad = serde_json::json!({"address": "2001:db8:1::100", "duid": "abc", "iaid": 1,
        "mac": null, "state": "bound", "expires": 1});
    assert!(serde_json::from_value::<Record>(bad).is_err());
}

mod random {
    use super::*;
    use proptest::prelude::*;

    fn small_table() -> LeaseTable {
        let mut c = reserved(mac(1), "2001:db8:1::10");
        c.range_start = a("2001:db8:1::100");
        c.range_end = a("2001:db8:1::107");
        c.rapid_commit = true;
        c.offer_hold = 30;
        c.decline_hold = 300;
        table_with(c)
    }

    /// Client `n`'s DUID: some LL, some LLT, some UUID, two UUIDs sharing a
    /// MAC (a re-installed machine).
    fn client(n: u8) -> (Vec<u8>, Option<Mac>) {
        match n % 4 {
            0 => (duid_ll(mac(n / 4)), None),
            1 => (duid_llt(mac(n / 4)), None),
            2 => (duid_uuid(n), Some(mac(n / 4))),
            _ => (duid_uuid(n), None),
        }
    }

    proptest! {
        // No regression file: tests write nothing into the source tree.
        #![proptest_config(ProptestConfig {
            cases: 300,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let mut t = small_table();
            if let Ok(ans) = handle(&mut t, &bytes, &at(T0)) {
                prop_assert!(Message::decode(&mut Decoder::new(&ans.bytes)).is_ok());
            }
            t.check_invariants(T0);
        }

        #[test]
        fn damaged_requests_never_panic(flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8), cut in any::<usize>()) {
            let mut t = small_table();
            let d = duid_ll(mac(3));
            let mut bytes = Build::new(MessageType::Request, Some(&d)).server(ours()).ia(1, &[a("2001:db8:1::101")]).oro().bytes();
            for (i, x) in flips {
                let n = bytes.len();
                bytes[i % n] ^= x;
            }
            bytes.truncate(cut % (bytes.len() + 1));
            let _ = handle(&mut t, &bytes, &at(T0));
            t.check_invariants(T0);
        }

        #[test]
        fn random_exchanges_keep_the_table_consistent(
            steps in proptest::collection::vec((0u8..12, 0u8..8, 0u32..3, 0u64..900, any::<bool>()), 1..60)
        ) {
            let mut t = small_table();
            let mut now = T0;
            for (who, op, iaid, dt, rapid) in steps {
                now += dt;
                let (d, frame) = client(who);
                let ctx = Context { frame_mac: frame, ..at(now) };
                let held: Vec<Ipv6Addr> = t.binding(&d, iaid).map(|r| r.address).into_iter().collect();
                let guess = [a("2001:db8:1::103")];
                let addrs_sent: &[Ipv6Addr] = if held.is_empty() { &guess } else { &held };
                let b = match op {
                    0 => {
                        let b = Build::new(MessageType::Solicit, Some(&d)).ia(iaid, &[]);
                        if rapid { b.opt(DhcpOption::RapidCommit) } else { b }
                    }
                    1 => Build::new(MessageType::Request, Some(&d)).server(ours()).ia(iaid, &[]),
                    2 => Build::new(MessageType::Renew, Some(&d)).server(ours()).ia(iaid, addrs_sent),
                    3 => Build::new(MessageType::Rebind, Some(&d)).ia(iaid, addrs_sent),
                    4 => Build::new(MessageType::Release, Some(&d)).server(ours()).ia(iaid, addrs_sent),
                    5 => Build::new(MessageType::Decline, Some(&d)).server(ours()).ia(iaid, addrs_sent),
                    6 => Build::new(MessageType::Confirm, Some(&d)).ia(iaid, addrs_sent),
                    _ => {
                        t.expire(now);
                        t.check_invariants(now);
                        continue;
                    }
                };
                let kind = super::super::duid::parse(&d).expect("a DUID");
                let me = super::super::duid::client_mac(None, frame, kind);
                if let Ok((m, store)) = send(&mut t, &b, &ctx) {
                    // Every address handed out with lifetimes is this IA's
                    // binding; an Advertise may also name one of the same
                    // MAC's stale bindings, which its Request takes over.
                    for ia in ia_nas(&m) {
                        for (addr, pref, _) in addrs(&m, ia.id) {
                            if pref > 0 {
                                let r = t.get(addr).expect("a given address has a binding");
                                let own = (&r.duid, r.iaid) == (&d, ia.id);
                                let takeover = m.msg_type() == MessageType::Advertise
                                    && me.is_some()
                                    && r.mac == me;
                                prop_assert!(own || takeover, "{addr} given to {d:?}/{} but bound to {r:?}", ia.id);
                            }
                        }
                    }
                    // What the log is told to keep is what the table holds.
                    for s in store {
                        if let Store::Put(r) = s {
                            prop_assert_eq!(t.get(r.address), Some(&r));
                        }
                    }
                }
                t.check_invariants(now);
            }
        }
    }
}

#[test]
fn rapid_commit_with_nothing_to_give_is_an_advertise_with_no_addrs_avail() {
    let mut c = config();
    c.rapid_commit = true;
    c.range_end = c.range_start;
    let mut t = table_with(c);
    sarr(&mut t, &duid_ll(mac(1)), &at(T0));
    let b = Build::new(MessageType::Solicit, Some(&duid_ll(mac(2))))
        .ia(1, &[])
        .opt(DhcpOption::RapidCommit);
    let (m, store) = send(&mut t, &b, &at(T0)).unwrap();
    assert_eq!(m.msg_type(), MessageType::Advertise);
    assert_eq!(top_status(&m), Some(Status::NoAddrsAvail));
    assert!(store.is_empty());
}

#[test]
fn a_rebind_cannot_grow_a_client_past_its_ia_cap() {
    let mut t = table();
    let d = duid_uuid(1);
    for iaid in 0..super::leases::MAX_IAS_PER_CLIENT as u32 {
        let free = Ipv6Addr::from(u128::from(a("2001:db8:1::180")) + u128::from(iaid));
        let (m, _) = send(
            &mut t,
            &Build::new(MessageType::Rebind, Some(&d)).ia(iaid, &[free]),
            &at(T0),
        )
        .unwrap();
        assert_eq!(addrs(&m, iaid), vec![(free, 3000, 3600)]);
    }
    let b = Build::new(MessageType::Rebind, Some(&d)).ia(50, &[a("2001:db8:1::1f0")]);
    let (m, store) = send(&mut t, &b, &at(T0)).unwrap();
    assert_eq!(na_status(&m, 50), Some(Status::NoBinding));
    assert!(store.is_empty());
}

/// A Relay-Forward, byte by byte as a relay sends it, carrying option 79.
fn relay_forward(client_mac: Mac, inner: &[u8]) -> Vec<u8> {
    let mut b = vec![12, 0];
    b.extend_from_slice(&a("2001:db8:1::1").octets());
    b.extend_from_slice(&a("fe80::5054:ff:fe00:1").octets());
    b.extend_from_slice(&[0, 79, 0, 8, 0, 1]);
    b.extend_from_slice(&client_mac.0);
    b.extend_from_slice(&[0, 18, 0, 4]);
    b.extend_from_slice(b"eth1");
    b.extend_from_slice(&9u16.to_be_bytes());
    b.extend_from_slice(&(inner.len() as u16).to_be_bytes());
    b.extend_from_slice(inner);
    b
}

#[test]
fn a_relayed_duid_uuid_client_gets_its_reservation_through_option_79() {
    use super::relay;
    let mut t = table_with(reserved(mac(1), "2001:db8:1::10"));
    let d = duid_uuid(5);
    let mut exchange = |b: Build| -> Message {
        let received = relay_forward(mac(1), &b.bytes());
        let r = relay::unwrap(&received).unwrap();
        let ctx = Context {
            relay_link_layer: r.client_link_layer,
            // The frame came from the relay, not the client: not passed.
            frame_mac: None,
            ..at(T0)
        };
        let ans = handle(&mut t, r.inner, &ctx).unwrap();
        let sent = relay::wrap(&r.hops, &ans.bytes).unwrap();
        assert_eq!(sent[0], 13, "a Relay-Reply");
        let back = relay::unwrap(&sent[..]);
        // A Relay-Reply is not a Relay-Forward: it comes back whole; read
        // its one option the way the relay does.
        assert_eq!(back.unwrap().inner, &sent[..]);
        let opts = &sent[34..];
        assert_eq!(&opts[..8], &[0, 18, 0, 4, b'e', b't', b'h', b'1']);
        assert_eq!(&opts[8..10], &[0, 9]);
        Message::decode(&mut Decoder::new(&opts[12..])).unwrap()
    };
    let adv = exchange(Build::new(MessageType::Solicit, Some(&d)).ia(1, &[]));
    assert_eq!(addrs(&adv, 1)[0].0, a("2001:db8:1::10"));
    let rep = exchange(
        Build::new(MessageType::Request, Some(&d))
            .server(ours())
            .ia(1, &[a("2001:db8:1::10")]),
    );
    assert_eq!(addrs(&rep, 1), vec![(a("2001:db8:1::10"), 3000, 3600)]);
    assert_eq!(t.binding(&d, 1).unwrap().mac, Some(mac(1)));
}

mod relay_random {
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 500,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn unwrap_never_panics(mut bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Some(b) = bytes.first_mut() {
                *b = 12;
            }
            if let Ok(r) = super::super::relay::unwrap(&bytes) {
                prop_assert!(r.hops.len() <= super::super::relay::HOP_COUNT_LIMIT);
                let _ = super::super::relay::wrap(&r.hops, r.inner);
            }
        }
    }
}

/// Why [`super::relay`] walks raw bytes: dhcproto 0.15 decodes a Relay
/// Message option as another relay header, so the client message inside is
/// misread (its transaction id taken for a hop count and addresses). Should
/// this start failing, dhcproto reads relays correctly and `relay` may use it.
#[test]
fn dhcproto_misreads_the_client_message_inside_a_relay_forward() {
    let inner = Build::new(MessageType::Solicit, Some(&duid_uuid(5)))
        .ia(1, &[])
        .bytes();
    let fwd = relay_forward(mac(1), &inner);
    let r = dhcproto::v6::RelayMessage::decode(&mut Decoder::new(&fwd)).unwrap();
    match r.opts().get(OptionCode::RelayMsg) {
        Some(DhcpOption::RelayMsg(m)) => {
            assert_eq!(m.msg_type(), MessageType::Solicit);
            assert_eq!(
                m.hop_count(),
                0x0a,
                "the xid's first byte read as a hop count"
            );
        }
        other => panic!("{other:?}"),
    }
    // The raw walker finds the client message intact.
    let ours = super::relay::unwrap(&fwd).unwrap();
    assert_eq!(ours.inner, &inner[..]);
    assert_eq!(
        Message::decode(&mut Decoder::new(ours.inner))
            .unwrap()
            .msg_type(),
        MessageType::Solicit
    );
}

/// A DUID-UUID numbered `n` from install `install`.
fn uuid_of(install: u8, n: u32) -> Vec<u8> {
    let mut d = vec![0, 4, install];
    d.extend_from_slice(&[0; 11]);
    d.extend_from_slice(&n.to_be_bytes());
    d
}

#[test]
fn thousands_of_clients_each_get_their_own_address_and_keep_it() {
    // A /64 range: the hash spreads clients, probing resolves collisions.
    let mut c = config();
    c.range_start = a("2001:db8:1::");
    c.range_end = a("2001:db8:1::ffff:ffff:ffff:ffff");
    let mut t = table_with(c);
    let mut given = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for n in 0..3000u32 {
        let m = Mac([0x52, 0x54, 0, (n >> 16) as u8, (n >> 8) as u8, n as u8]);
        let (r, gone) = t.commit(ia(&uuid_of(1, n), 1, Some(m)), T0).unwrap();
        assert!(gone.is_empty());
        assert!(seen.insert(r.address), "{} twice", r.address);
        given.push((n, m, r.address));
    }
    t.check_invariants(T0);
    // Re-installed machines (new DUID, same MAC) get the same addresses.
    for (n, m, addr) in given.iter().take(300) {
        let (r, gone) = t.commit(ia(&uuid_of(2, *n), 7, Some(*m)), T0 + 1).unwrap();
        assert_eq!(r.address, *addr);
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].duid, uuid_of(1, *n));
    }
    t.check_invariants(T0 + 1);
    assert_eq!(t.stats(T0 + 1).bound, 3000);
}
