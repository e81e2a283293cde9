//! The decision loop's state and steps, without sockets or disk: a datagram
//! goes in with the time, and out comes what to do with it ([`Step`]: send
//! now, make records durable first, hold the offer for its conflict probe,
//! or drop it). Finished probes and requests of the other server's scope
//! are handled here too. [`super::Server`] moves the bytes; everything it
//! sends, writes or holds was chosen here, so the loop's behaviour is
//! tested with in-memory requests and a chosen clock.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use super::durable::Reply;
use super::report::observe;
use super::{CONFLICT_LOG_EVERY, MAX_PROBES_PER_DISCOVER};
use std::sync::{Arc, Mutex};

use oooi_dhcp_inventory::RefusalReason;

use crate::config::Mac;
use crate::inventory::{
    self,
    meta::Meta,
    refusals::{self, Refusals},
};
use crate::leases::LeaseTable;
use crate::metrics::{self, metrics};
use crate::pipeline::{self, Decision, Destination, Dropped, Outcome, StoreOp};
use crate::probe::{Found, MAX_HELD_PER_RESPONDER, Prober, Responders, Verdict};

/// Starts conflict probes (the ICMP prober; a recording double in tests).
pub trait StartProbe {
    /// Starts probing `ip`: true when a result will come, false when `ip`
    /// is already being probed, an error when no probe could be sent.
    fn start_probe(&mut self, ip: Ipv4Addr) -> std::io::Result<bool>;
}

impl StartProbe for Prober {
    fn start_probe(&mut self, ip: Ipv4Addr) -> std::io::Result<bool> {
        Prober::start_probe(self, ip)
    }
}

/// What the decision loop does with one datagram.
#[derive(Debug)]
pub enum Step {
    /// Not answered (counted by reason).
    Dropped(Dropped),
    /// Decided, and nothing durable is promised: send this now (when the
    /// decision has a reply).
    SendNow(Option<Reply>),
    /// Decided: the records must be durable (and, in a pair, replicated)
    /// before the reply leaves.
    Durable(Vec<StoreOp>, Option<Reply>),
    /// An offer held until its conflict probe ends (see
    /// [`Decisions::probe_result`]).
    Held,
}

/// An offer waiting for its conflict probe.
struct PendingOffer {
    /// The address offered and probed.
    ip: Ipv4Addr,
    /// The reply to send when nobody answers (the latest retransmission's).
    reply: Option<(Vec<u8>, Destination)>,
    /// The DISCOVER, decided again when the address is in use.
    datagram: Vec<u8>,
    /// When the first probe for this DISCOVER started.
    started: Instant,
    /// Probes answered so far for this DISCOVER.
    answered: u8,
}

/// Most log lines of one kind a second (the counters count every event):
/// a flood of conflicts must cost the decision loop neither the time to
/// write a line each nor a scan of a large map per line.
const LOGS_PER_SECOND: u32 = 20;
/// Most keys a [`LogLimit`] remembers.
const LOG_KEYS: usize = 4096;

/// Logs an event once per key a minute, and at most 20 lines a second
/// (`LOGS_PER_SECOND`).
#[derive(Debug)]
pub struct LogLimit<K> {
    seen: HashMap<K, Instant>,
    second: Instant,
    in_second: u32,
    /// Lines left out by the per-second bound since the last one written.
    pub suppressed: u64,
}

impl<K> Default for LogLimit<K> {
    fn default() -> Self {
        LogLimit {
            seen: HashMap::new(),
            second: Instant::now(),
            in_second: 0,
            suppressed: 0,
        }
    }
}

impl<K: std::hash::Hash + Eq> LogLimit<K> {
    /// Whether to log the event `key` at `now` (remembered when so).
    pub fn allow(&mut self, key: K, now: Instant) -> bool {
        if self
            .seen
            .get(&key)
            .is_some_and(|t| now.duration_since(*t) < CONFLICT_LOG_EVERY)
        {
            return false;
        }
        if now.duration_since(self.second) >= Duration::from_secs(1) {
            self.second = now;
            self.in_second = 0;
        }
        if self.in_second >= LOGS_PER_SECOND {
            self.suppressed += 1;
            return false;
        }
        self.in_second += 1;
        if self.seen.len() >= LOG_KEYS {
            self.seen
                .retain(|_, t| now.duration_since(*t) < CONFLICT_LOG_EVERY);
            if self.seen.len() >= LOG_KEYS {
                self.seen.clear();
            }
        }
        self.seen.insert(key, now);
        true
    }
}

/// The decision loop's state: the lease table and what it remembers
/// between datagrams.
pub struct Decisions {
    pub(super) table: LeaseTable,
    /// When each conflict was last logged (see `conflict_log`).
    pub(super) conflicts_logged: LogLimit<(Ipv4Addr, Mac, Mac)>,
    /// Clients of the other scope seen unanswered while contact is lost.
    pub(super) unacked: crate::pair::Unacked,
    /// Offers waiting for their probe, by client, and the client of each
    /// probed address.
    probing: HashMap<Mac, PendingOffer>,
    probing_ip: HashMap<Ipv4Addr, Mac>,
    /// When each in-use address found by a probe was last logged.
    probe_conflicts_logged: LogLimit<Ipv4Addr>,
    /// When a failed probe send was last logged.
    probe_error_logged: Option<Instant>,
    /// The addresses each probe responder holds back (see
    /// [`crate::probe::Responders`]).
    responders: Responders,
    /// Addresses held back by a probe answer, oldest conflict first: the
    /// fallback when the free pool is spent.
    probe_held: std::collections::VecDeque<(u64, Ipv4Addr)>,
    /// What the inventory knows of each lease beyond the table.
    pub meta: Meta,
    /// Refusals by reason and the last few per client (read by the
    /// inventory API).
    pub refusals: Arc<Mutex<Refusals>>,
}

/// Most probe-held addresses remembered for the fallback.
const PROBE_HELD_TRACKED: usize = 65_536;

impl Decisions {
    /// The decision state over `table`.
    pub fn new(table: LeaseTable) -> Decisions {
        Decisions {
            table,
            conflicts_logged: LogLimit::default(),
            unacked: crate::pair::Unacked::default(),
            probing: HashMap::new(),
            probing_ip: HashMap::new(),
            probe_conflicts_logged: LogLimit::default(),
            probe_error_logged: None,
            responders: Responders::default(),
            probe_held: std::collections::VecDeque::new(),
            meta: Meta::default(),
            refusals: Arc::new(Mutex::new(Refusals::default())),
        }
    }

    /// Counts a refusal (metric and inventory) and keeps it among `mac`'s
    /// last events when the client is known.
    pub(super) fn refuse(
        &mut self,
        mac: Option<Mac>,
        reason: RefusalReason,
        message: &str,
        address: Option<Ipv4Addr>,
        detail: &str,
        now: u64,
    ) {
        metrics()
            .refusals
            .get_or_create(&metrics::ReasonLabels {
                reason: reason.as_str().to_string(),
            })
            .inc();
        let Ok(mut r) = self.refusals.lock() else {
            return;
        };
        match mac {
            Some(mac) => r.record(
                mac,
                refusals::event(
                    now,
                    reason,
                    message,
                    address.map(std::net::IpAddr::V4),
                    Some(detail),
                ),
            ),
            None => r.count(reason),
        }
    }

    /// What a decided request changes in the inventory: the lease's
    /// metadata, and the refusal it counts as, if any.
    pub(super) fn note(&mut self, o: &Outcome, now: u64) {
        let by = inventory::rows::role_of(&self.table);
        match &o.decision {
            Decision::Offer { ip, .. } => self.meta.transacted(*ip, o.mac, &o.sent, by, now),
            Decision::Ack { commit } => {
                self.meta
                    .transacted(commit.lease.ip, o.mac, &o.sent, by, now)
            }
            Decision::Released { ip } => self.meta.released(*ip, o.mac, by, now),
            Decision::Declined { quarantine } => self.meta.declined(quarantine.ip, o.mac, by, now),
            _ => {}
        }
        let holder = o.asked.and_then(|a| self.table.get(a)).copied();
        if let Some((reason, address, detail)) =
            inventory::refusal_of_decision(&o.decision, o.asked, holder.as_ref())
        {
            self.refuse(
                Some(o.mac),
                reason,
                inventory::message_name(o.kind),
                address,
                detail,
                now,
            );
        }
    }

    /// A datagram dropped before a decision: a client's request counts as a
    /// refusal (a BOOTREPLY, another server's, does not).
    fn note_drop(&mut self, datagram: &[u8], d: Dropped, now: u64) {
        if datagram.first() == Some(&2) {
            return;
        }
        let (reason, detail) = inventory::refusal_of_drop(d);
        let message =
            inventory::raw_message_type(datagram).map_or("UNKNOWN", inventory::message_name);
        self.refuse(
            inventory::raw_mac(datagram),
            reason,
            message,
            None,
            detail,
            now,
        );
    }

    /// The lease table.
    pub fn table(&self) -> &LeaseTable {
        &self.table
    }

    /// Offers waiting for their probe.
    pub fn probes_pending(&self) -> usize {
        self.probing.len()
    }

    /// Decides one datagram from `from` at `now` (Unix seconds). The lease
    /// table is updated as it is decided, so no later datagram of the same
    /// batch can get the same address.
    pub fn datagram(
        &mut self,
        datagram: &[u8],
        from: SocketAddr,
        now: u64,
        prober: Option<&mut dyn StartProbe>,
    ) -> Step {
        let o = match self.decide_or_fall_back(datagram, now) {
            Ok(o) => o,
            Err(d) => {
                metrics()
                    .dropped
                    .get_or_create(&metrics::ReasonLabels {
                        reason: d.as_str().to_string(),
                    })
                    .inc();
                tracing::debug!(%from, reason = d.as_str(), "datagram dropped");
                self.note_drop(datagram, d, now);
                return Step::Dropped(d);
            }
        };
        observe(&o, from);
        self.note(&o, now);
        if let Decision::Offer { ip, probe } = o.decision
            && self.hold_for_probe(datagram, &o, ip, probe, None, prober)
        {
            return Step::Held;
        }
        let kind = match o.decision {
            Decision::Offer { .. } => "offer",
            Decision::Nak { .. } => "nak",
            _ => "ack",
        };
        let reply = o.reply.map(|(bytes, dest)| (bytes, dest, kind));
        if o.store.is_empty() {
            Step::SendNow(reply)
        } else {
            Step::Durable(o.store, reply)
        }
    }

    /// Holds an offer of `ip` until its conflict probe ends, starting the
    /// probe; returns whether it did (the caller then sends nothing now). A
    /// retransmitted DISCOVER of a client whose offer waits only replaces
    /// the reply to send (it carries the latest transaction id): it never
    /// starts a second probe.
    fn hold_for_probe(
        &mut self,
        datagram: &[u8],
        o: &Outcome,
        ip: Ipv4Addr,
        probe: bool,
        earlier: Option<(Instant, u8)>,
        prober: Option<&mut dyn StartProbe>,
    ) -> bool {
        if let Some(p) = self.probing.get_mut(&o.mac) {
            if p.ip == ip {
                p.reply = o.reply.clone();
                p.datagram = datagram.to_vec();
            }
            return true;
        }
        if !probe {
            return false;
        }
        let Some(prober) = prober else {
            return false;
        };
        match prober.start_probe(ip) {
            Ok(true) => {
                metrics().probes.inc();
                let (started, answered) = earlier.unwrap_or((Instant::now(), 0));
                self.probing.insert(
                    o.mac,
                    PendingOffer {
                        ip,
                        reply: o.reply.clone(),
                        datagram: datagram.to_vec(),
                        started,
                        answered,
                    },
                );
                self.probing_ip.insert(ip, o.mac);
                true
            }
            Ok(false) => false,
            Err(e) => {
                metrics().probe_errors.inc();
                let now = Instant::now();
                if self
                    .probe_error_logged
                    .is_none_or(|t| now.duration_since(t) >= CONFLICT_LOG_EVERY)
                {
                    self.probe_error_logged = Some(now);
                    tracing::warn!(%ip, error = %e, "conflict probe not sent: offering the address unprobed (logged once a minute)");
                }
                false
            }
        }
    }

    /// A finished conflict probe of `ip`: an unanswered one lets its offer
    /// leave (returned, to send now); an answered one holds the address
    /// back (see [`LeaseTable::probe_answered`]), is counted and logged,
    /// and the DISCOVER is decided again for another address (returned
    /// when that one needs no probe).
    pub fn probe_result(
        &mut self,
        ip: Ipv4Addr,
        found: Found,
        responder: Option<Mac>,
        now: u64,
        prober: Option<&mut dyn StartProbe>,
    ) -> Option<(Vec<u8>, Destination)> {
        let mac = self.probing_ip.remove(&ip)?;
        let p = self.probing.remove(&mac)?;
        if found == Found::Nobody {
            metrics()
                .probe_delay
                .observe(p.started.elapsed().as_secs_f64());
            return p.reply;
        }
        metrics().probe_conflicts.inc();
        let until = now + u64::from(self.table.config().decline_quarantine_seconds);
        if let Verdict::Ignore { first } = self.responders.answered(responder, ip, now, until) {
            // A host answering for many addresses: its answer holds
            // nothing back, the offer leaves.
            let m = metrics();
            m.probe_answers_ignored.inc();
            m.probe_greedy_responders
                .set(self.responders.greedy() as i64);
            if first {
                tracing::warn!(
                    responder = %responder.map_or_else(|| "unknown".to_string(), |m| m.to_string()),
                    %ip,
                    held_at_most = MAX_HELD_PER_RESPONDER,
                    "conflict probe: one host answers for many addresses; its answers no longer hold addresses back (counted in oooi_dhcp_probe_answers_ignored)"
                );
            }
            return p.reply;
        }
        metrics()
            .probe_greedy_responders
            .set(self.responders.greedy() as i64);
        self.probe_conflict_log(ip, mac);
        self.refuse(
            Some(mac),
            RefusalReason::ProbeConflict,
            "DISCOVER",
            Some(ip),
            "a host answered the conflict probe: the address is quarantined and another one is tried",
            now,
        );
        if self.table.probe_answered(mac, ip, now) {
            let by = inventory::rows::role_of(&self.table);
            self.meta.probe_conflict(ip, mac, by);
            self.probe_held.push_back((now, ip));
            if self.probe_held.len() > PROBE_HELD_TRACKED {
                self.probe_held.pop_front();
            }
        }
        let answered = p.answered + 1;
        if answered >= MAX_PROBES_PER_DISCOVER {
            tracing::warn!(%mac, answered, "every address probed for this DISCOVER is in use: no offer this time");
            return None;
        }
        // Decide the DISCOVER again: the quarantined address is skipped.
        let o = self.decide_or_fall_back(&p.datagram, now).ok()?;
        self.note(&o, now);
        match o.decision {
            Decision::Offer { ip, probe } => {
                if self.hold_for_probe(
                    &p.datagram,
                    &o,
                    ip,
                    probe,
                    Some((p.started, answered)),
                    prober,
                ) {
                    None
                } else {
                    o.reply
                }
            }
            _ => {
                observe(
                    &o,
                    SocketAddr::from((Ipv4Addr::UNSPECIFIED, super::CLIENT_PORT)),
                );
                None
            }
        }
    }

    /// Decides `datagram`; when it is a DISCOVER that finds the free pool
    /// spent while probe answers hold addresses back, the address whose
    /// conflict is oldest is released and offered instead, unprobed
    /// (counted, logged): clients are still answered when a host answers
    /// probes for much of the pool.
    fn decide_or_fall_back(&mut self, datagram: &[u8], now: u64) -> Result<Outcome, Dropped> {
        let o = pipeline::handle(&mut self.table, datagram, now)?;
        if !matches!(
            o.decision,
            Decision::NoAddress {
                refusal: crate::leases::Refusal::PoolExhausted
            }
        ) {
            return Ok(o);
        }
        while let Some((at, ip)) = self.probe_held.pop_front() {
            if !self.table.clear_probe_held(ip, now) {
                continue;
            }
            let mut again = pipeline::handle(&mut self.table, datagram, now)?;
            if let Decision::Offer { ip: offered, probe } = &mut again.decision {
                // It was answered once already: probing again would only
                // hold it back again.
                *probe = false;
                metrics().offers_of_quarantined.inc();
                tracing::warn!(
                    ip = %offered,
                    conflict_at = at,
                    "free pool spent: offering the probe-quarantined address with the oldest conflict (counted in oooi_dhcp_offers_of_quarantined_addresses)"
                );
            }
            return Ok(again);
        }
        Ok(o)
    }

    /// Forgets offers whose probe result never came (it cannot, but a lost
    /// entry must not hold a client forever): the client's retransmission
    /// starts again.
    pub fn forget_stale_probes(&mut self, stale: Duration) {
        let probing_ip = &mut self.probing_ip;
        self.probing.retain(|_, p| {
            let keep = p.started.elapsed() < stale;
            if !keep {
                probing_ip.remove(&p.ip);
            }
            keep
        });
    }

    /// Logs an address found in use by a probe, once per address a minute
    /// (the counter counts every one).
    fn probe_conflict_log(&mut self, ip: Ipv4Addr, mac: Mac) {
        if !self.probe_conflicts_logged.allow(ip, Instant::now()) {
            return;
        }
        tracing::warn!(
            %ip,
            offered_to = %mac,
            quarantine_seconds = self.table.config().decline_quarantine_seconds,
            "conflict probe: a host answered for an address this server has no binding of; it is held back (offered to nobody, given to a client that asks for it by REQUEST) and the client is offered another"
        );
    }

    /// A request of the other server's scope, not answered here: while
    /// contact is lost (`recovering`), counts its client if its `secs`
    /// field says it has been asking for `wait_ms` (see
    /// [`crate::pair::Unacked`]; a metric only).
    /// Returns the new count of unanswered clients when it changed.
    pub fn observe_peer_scope(
        &mut self,
        datagram: &[u8],
        recovering: bool,
        wait_ms: u64,
    ) -> Option<usize> {
        if !recovering {
            return None;
        }
        let req = pipeline::parse(datagram)
            .and_then(pipeline::classify)
            .ok()?;
        let before = self.unacked.count();
        let n = self.unacked.observe(req.mac, req.msg.secs(), wait_ms);
        if n == before {
            return None;
        }
        tracing::warn!(mac = %req.mac, unacked_clients = n, "pair: a client of the other server's scope goes unanswered");
        Some(n)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::testing::{self, DOC_NET};
    use dhcproto::v4::{DhcpOption, Message, MessageType};
    use dhcproto::{Decodable, Decoder, Encodable};

    /// The tests' clock (also the merge tests').
    pub(in crate::server) const NOW: u64 = 1_000_000;

    /// Decisions over a ten-address pool (also the merge tests').
    pub(in crate::server) fn decisions() -> Decisions {
        Decisions::new(testing::table(
            DOC_NET,
            &[
                "range: { start: 192.0.2.100, end: 192.0.2.109 }",
                "dns_servers: [192.0.2.3]",
                "lease_seconds: 3600",
            ],
        ))
    }

    fn mac(n: u8) -> [u8; 6] {
        [2, 0, 0, 0, 0, n]
    }

    fn datagram(kind: MessageType, mac: [u8; 6], opts: Vec<DhcpOption>) -> Vec<u8> {
        let mut m = Message::default();
        m.set_xid(0x1234).set_chaddr(&mac);
        m.opts_mut().insert(DhcpOption::MessageType(kind));
        for o in opts {
            m.opts_mut().insert(o);
        }
        m.to_vec().unwrap()
    }

    fn discover(n: u8) -> Vec<u8> {
        datagram(MessageType::Discover, mac(n), vec![])
    }

    fn request(n: u8, ip: Ipv4Addr) -> Vec<u8> {
        datagram(
            MessageType::Request,
            mac(n),
            vec![
                DhcpOption::RequestedIpAddress(ip),
                DhcpOption::ServerIdentifier(Ipv4Addr::new(192, 0, 2, 2)),
            ],
        )
    }

    fn from() -> SocketAddr {
        SocketAddr::from((Ipv4Addr::UNSPECIFIED, 68))
    }

    fn decode(bytes: &[u8]) -> Message {
        Message::decode(&mut Decoder::new(bytes)).unwrap()
    }

    /// The reply of a step sent now: its kind and the message.
    fn sent_now(step: Step) -> (&'static str, Message) {
        match step {
            Step::SendNow(Some((bytes, _, kind))) => (kind, decode(&bytes)),
            other => panic!("expected a reply sent now, got {other:?}"),
        }
    }

    /// A prober that records the addresses it was asked to probe and
    /// answers as told.
    struct Recording {
        started: Vec<Ipv4Addr>,
        answer: fn() -> std::io::Result<bool>,
    }

    impl Recording {
        fn ok() -> Recording {
            Recording {
                started: Vec::new(),
                answer: || Ok(true),
            }
        }
    }

    impl StartProbe for Recording {
        fn start_probe(&mut self, ip: Ipv4Addr) -> std::io::Result<bool> {
            self.started.push(ip);
            (self.answer)()
        }
    }

    #[test]
    fn refusals_are_recorded_for_their_client_and_leases_keep_what_it_sent() {
        use oooi_dhcp_inventory::RefusalReason;
        let mut d = decisions();
        // A selecting REQUEST for another server: the client took its offer.
        let other = datagram(
            MessageType::Request,
            mac(1),
            vec![
                DhcpOption::RequestedIpAddress(Ipv4Addr::new(192, 0, 2, 100)),
                DhcpOption::ServerIdentifier(Ipv4Addr::new(192, 0, 2, 99)),
            ],
        );
        d.datagram(&other, from(), NOW, None);
        // A REQUEST for an address outside the pool: NAKed, not allowed.
        let outside = Ipv4Addr::new(192, 0, 2, 60);
        sent_now(d.datagram(&request(1, outside), from(), NOW, None));
        // A datagram too short to decode: counted, no client to name.
        d.datagram(&[1, 2, 3], from(), NOW, None);
        let r = d.refusals.lock().unwrap();
        let events = r.events(Mac(mac(1)));
        let reasons: Vec<_> = events.iter().map(|e| e.reason).collect();
        assert_eq!(
            reasons,
            vec![RefusalReason::OtherServerChosen, RefusalReason::NotAllowed]
        );
        assert_eq!(events[1].address, Some(std::net::IpAddr::V4(outside)));
        assert_eq!(events[1].message, "REQUEST");
        assert_eq!(r.counts()[&RefusalReason::Malformed], 1);
        drop(r);
        // A granted lease keeps the client id and host name it sent.
        let hello = datagram(
            MessageType::Discover,
            mac(2),
            vec![
                DhcpOption::ClientIdentifier(vec![1, 2, 0, 0, 0, 0, 2]),
                DhcpOption::Hostname("vm-2".into()),
            ],
        );
        let (_, offer) = sent_now(d.datagram(&hello, from(), NOW, None));
        let meta = d.meta.get(offer.yiaddr(), Mac(mac(2))).expect("metadata");
        assert_eq!(meta.hostname.as_deref(), Some("vm-2"));
        assert_eq!(meta.client_id.as_deref(), Some(&[1, 2, 0, 0, 0, 0, 2][..]));
        assert_eq!(meta.cltt, Some(NOW));
    }

    #[test]
    fn an_offer_is_sent_at_once_and_promises_nothing_durable() {
        let mut d = decisions();
        let (kind, offer) = sent_now(d.datagram(&discover(1), from(), NOW, None));
        assert_eq!(kind, "offer");
        assert_eq!(offer.opts().msg_type(), Some(MessageType::Offer));
        assert!(Ipv4Addr::new(192, 0, 2, 100) <= offer.yiaddr());
        assert!(offer.yiaddr() <= Ipv4Addr::new(192, 0, 2, 109));
    }

    #[test]
    fn an_ack_waits_for_its_lease_record_which_expires_a_lease_time_from_the_decision_clock() {
        let mut d = decisions();
        let (_, offer) = sent_now(d.datagram(&discover(1), from(), NOW, None));
        let ip = offer.yiaddr();
        match d.datagram(&request(1, ip), from(), NOW + 5, None) {
            Step::Durable(records, Some((bytes, _, kind))) => {
                assert_eq!(kind, "ack");
                assert_eq!(decode(&bytes).opts().msg_type(), Some(MessageType::Ack));
                assert_eq!(
                    records,
                    vec![StoreOp::Commit(crate::lease_store::StoredLease {
                        ip,
                        mac: Mac(mac(1)),
                        expires_unix: NOW + 5 + 3600,
                    })]
                );
            }
            other => panic!("expected an ACK held for its record, got {other:?}"),
        }
    }

    #[test]
    fn clients_decided_in_one_batch_never_get_the_same_address() {
        let mut d = decisions();
        let mut given = std::collections::BTreeSet::new();
        for n in 1..=10 {
            let (_, offer) = sent_now(d.datagram(&discover(n), from(), NOW, None));
            assert!(
                given.insert(offer.yiaddr()),
                "{} offered twice",
                offer.yiaddr()
            );
        }
        // The pool (ten addresses) is spent: the eleventh client gets nothing.
        assert!(matches!(
            d.datagram(&discover(11), from(), NOW, None),
            Step::SendNow(None)
        ));
    }

    #[test]
    fn a_nak_is_sent_at_once_without_a_record() {
        let mut d = decisions();
        // An address of another network (a client moved from elsewhere).
        let (kind, nak) = sent_now(d.datagram(
            &request(1, Ipv4Addr::new(198, 51, 100, 5)),
            from(),
            NOW,
            None,
        ));
        assert_eq!(kind, "nak");
        assert_eq!(nak.opts().msg_type(), Some(MessageType::Nak));
    }

    #[test]
    fn a_release_is_recorded_and_answers_nothing() {
        let mut d = decisions();
        let (_, offer) = sent_now(d.datagram(&discover(1), from(), NOW, None));
        let ip = offer.yiaddr();
        assert!(matches!(
            d.datagram(&request(1, ip), from(), NOW, None),
            Step::Durable(_, Some(_))
        ));
        let mut release = Message::default();
        release.set_xid(7).set_chaddr(&mac(1)).set_ciaddr(ip);
        release
            .opts_mut()
            .insert(DhcpOption::MessageType(MessageType::Release));
        release
            .opts_mut()
            .insert(DhcpOption::ServerIdentifier(Ipv4Addr::new(192, 0, 2, 2)));
        match d.datagram(&release.to_vec().unwrap(), from(), NOW + 1, None) {
            Step::Durable(records, None) => assert_eq!(records, vec![StoreOp::Release(ip)]),
            other => panic!("expected a release record and no reply, got {other:?}"),
        }
    }

    #[test]
    fn garbage_is_dropped_with_its_reason() {
        let mut d = decisions();
        assert!(matches!(
            d.datagram(&[1, 2, 3], from(), NOW, None),
            Step::Dropped(Dropped::Malformed)
        ));
    }

    #[test]
    fn an_offer_of_an_unbound_address_waits_for_its_probe_and_leaves_when_nobody_answers() {
        let mut d = decisions();
        let mut p = Recording::ok();
        assert!(matches!(
            d.datagram(&discover(1), from(), NOW, Some(&mut p)),
            Step::Held
        ));
        assert_eq!(p.started.len(), 1);
        assert_eq!(d.probes_pending(), 1);
        let ip = p.started[0];
        let (bytes, _) = d
            .probe_result(ip, Found::Nobody, None, NOW, Some(&mut p))
            .expect("the held offer leaves");
        assert_eq!(decode(&bytes).yiaddr(), ip);
        assert_eq!(d.probes_pending(), 0);
    }

    #[test]
    fn a_retransmitted_discover_while_its_probe_runs_starts_no_second_probe() {
        let mut d = decisions();
        let mut p = Recording::ok();
        d.datagram(&discover(1), from(), NOW, Some(&mut p));
        assert!(matches!(
            d.datagram(&discover(1), from(), NOW + 1, Some(&mut p)),
            Step::Held
        ));
        assert_eq!(p.started.len(), 1);
    }

    #[test]
    fn an_answered_probe_holds_the_address_back_and_probes_another() {
        let mut d = decisions();
        let mut p = Recording::ok();
        d.datagram(&discover(1), from(), NOW, Some(&mut p));
        let first = p.started[0];
        assert_eq!(
            d.probe_result(first, Found::Answered, None, NOW, Some(&mut p)),
            None
        );
        assert_eq!(
            p.started.len(),
            2,
            "the DISCOVER is decided again and probed"
        );
        let second = p.started[1];
        assert_ne!(first, second);
        let (bytes, _) = d
            .probe_result(second, Found::Nobody, None, NOW, Some(&mut p))
            .expect("the second offer leaves");
        assert_eq!(decode(&bytes).yiaddr(), second);
        // The answered address is offered to nobody else while free ones
        // remain: the eight other free addresses go to eight clients...
        for n in 2..=9 {
            let (_, offer) = sent_now(d.datagram(&discover(n), from(), NOW, None));
            assert_ne!(offer.yiaddr(), first);
        }
        // ...then, the free pool spent, the ninth is offered the address
        // with the oldest conflict, unprobed; a tenth gets nothing.
        let (_, offer) = sent_now(d.datagram(&discover(10), from(), NOW, Some(&mut p)));
        assert_eq!(offer.yiaddr(), first);
        assert_eq!(p.started.len(), 2, "not probed again");
        assert!(matches!(
            d.datagram(&discover(11), from(), NOW, None),
            Step::SendNow(None)
        ));
    }

    #[test]
    fn one_responder_answering_every_probe_holds_back_a_bounded_number_of_addresses() {
        let mut d = decisions();
        let mut p = Recording::ok();
        let squatter = Some(Mac([2, 0, 0, 0, 0x66, 0x66]));
        let mut offered = Vec::new();
        for n in 1..=6u8 {
            d.datagram(&discover(n), from(), NOW, Some(&mut p));
            // Every probe is answered by the same host until an offer leaves.
            let mut reply = None;
            while reply.is_none() {
                let Some(&ip) = p.started.last() else { break };
                if d.probes_pending() == 0 {
                    break;
                }
                reply = d.probe_result(ip, Found::Answered, squatter, NOW, Some(&mut p));
            }
            if let Some((bytes, _)) = reply {
                offered.push(decode(&bytes).yiaddr());
            }
        }
        // The first client's four probes hold four addresses back (no offer
        // this time); every later answer of that host holds nothing back.
        assert_eq!(offered.len(), 5, "{offered:?}");
        assert_eq!(
            d.table().stats(NOW).lost,
            crate::probe::MAX_HELD_PER_RESPONDER
        );
    }

    #[test]
    fn after_every_probe_of_a_discover_is_answered_no_offer_leaves() {
        let mut d = decisions();
        let mut p = Recording::ok();
        d.datagram(&discover(1), from(), NOW, Some(&mut p));
        for i in 0..usize::from(MAX_PROBES_PER_DISCOVER) {
            let ip = p.started[i];
            assert_eq!(
                d.probe_result(ip, Found::Answered, None, NOW, Some(&mut p)),
                None
            );
        }
        assert_eq!(p.started.len(), usize::from(MAX_PROBES_PER_DISCOVER));
        assert_eq!(d.probes_pending(), 0);
    }

    #[test]
    fn an_offer_whose_probe_cannot_be_sent_leaves_unprobed() {
        let mut d = decisions();
        let mut p = Recording {
            started: Vec::new(),
            answer: || Err(std::io::Error::other("buffer full")),
        };
        let (kind, _) = sent_now(d.datagram(&discover(1), from(), NOW, Some(&mut p)));
        assert_eq!(kind, "offer");
        assert_eq!(d.probes_pending(), 0);
    }

    #[test]
    fn a_probe_result_for_an_address_nobody_waits_for_sends_nothing() {
        let mut d = decisions();
        assert_eq!(
            d.probe_result(
                Ipv4Addr::new(192, 0, 2, 100),
                Found::Nobody,
                None,
                NOW,
                None
            ),
            None
        );
    }

    #[test]
    fn offers_whose_probe_result_never_came_are_forgotten() {
        let mut d = decisions();
        let mut p = Recording::ok();
        d.datagram(&discover(1), from(), NOW, Some(&mut p));
        d.forget_stale_probes(Duration::from_secs(3600));
        assert_eq!(d.probes_pending(), 1);
        d.forget_stale_probes(Duration::ZERO);
        assert_eq!(d.probes_pending(), 0);
        // The client's retransmission gets the address held for it at once
        // (its own offer: no second probe).
        let (kind, offer) = sent_now(d.datagram(&discover(1), from(), NOW + 4, Some(&mut p)));
        assert_eq!(kind, "offer");
        assert_eq!(offer.yiaddr(), p.started[0]);
        assert_eq!(p.started.len(), 1);
    }

    #[test]
    fn clients_of_the_other_scope_are_counted_only_while_contact_is_lost() {
        let mut d = decisions();
        let mut asking = Message::default();
        asking.set_xid(1).set_chaddr(&mac(1)).set_secs(30);
        asking
            .opts_mut()
            .insert(DhcpOption::MessageType(MessageType::Discover));
        let bytes = asking.to_vec().unwrap();
        assert_eq!(d.observe_peer_scope(&bytes, false, 10_000), None);
        assert_eq!(d.observe_peer_scope(&bytes, true, 10_000), Some(1));
        // The same client again: the count does not change.
        assert_eq!(d.observe_peer_scope(&bytes, true, 10_000), None);
        // A client asking for less than the wait is not counted yet.
        let fresh = discover(2);
        assert_eq!(d.observe_peer_scope(&fresh, true, 10_000), None);
    }
}
