//! Address defence (RFC 5227, section 2.4): the holder of a floating
//! address keeps the neighbours' ARP caches on itself while another host
//! also answers for the address.
//!
//! Why: a replacement pod gets its static address from the CNI before any
//! of its containers runs. Until its agent starts and drops that address
//! (the Lease is held elsewhere), its kernel answers ARP requests for it,
//! and a CNI that sets `arp_notify` even announces it. A worker whose
//! request the replacement answers first keeps the replacement's MAC for
//! the address (Linux takes the first reply within `locktime`), and its
//! next query is lost once the agent drops the address: glibc waits 5 s
//! for it. Two rules close that window:
//!
//! - **Conflict.** Any ARP packet from another MAC that names a held
//!   address as its sender (an announcement, a reply that was flooded, a
//!   request the other kernel sent) is answered at once by a broadcast
//!   announcement, at most once per [`CONFLICT_HOLDOFF`] per address.
//! - **Answer.** A request for a held address (not a probe) is followed,
//!   [`ANSWER_DELAY`] later, by an announcement sent to the requester
//!   alone. Linux treats an ARP packet whose sender and target address are
//!   equal as gratuitous and takes it even within `locktime`, so the
//!   requester ends on the holder whichever reply came first. Without a
//!   second host this costs one frame per request and changes nothing.
//!
//! Never amplified: a packet whose sender (the frame's source or the ARP
//! sender hardware address) is broadcast, multicast, all zeros or this
//! interface itself is ignored, and answers are limited to one per
//! requester and address per [`ANSWER_HOLDOFF`] (20/s) and
//! [`ANSWER_BURST`] per second in all ([`AnswerLimit`]); conflicts to one
//! broadcast per address per [`CONFLICT_HOLDOFF`] (10/s).
//!
//! Only the holder defends ([`Held`]): a replica handing an address on
//! must not pull the neighbours back to itself.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::Ipv4Addr;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use tokio::io::unix::AsyncFd;
use tracing::{debug, info, warn};

use crate::advert::not_a_host;
use crate::arp::ArpSocket;
use crate::metrics::Metrics;

/// The minimum time between two broadcast announcements of one address
/// in answer to conflicts (a host flooding claims cannot make the holder
/// flood the VLAN).
pub const CONFLICT_HOLDOFF: Duration = Duration::from_millis(100);

/// How long after a request the holder sends its announcement to the
/// requester: after both kernels' replies (microseconds), before the
/// requester's next packet on most paths.
pub const ANSWER_DELAY: Duration = Duration::from_millis(3);

/// The minimum time between two answers to one requester about one
/// address: a host repeating requests gets at most 20 answers a second.
pub const ANSWER_HOLDOFF: Duration = Duration::from_millis(50);

/// Answers in all per second (and the largest burst): many requesters, or
/// forged requester MACs, cannot make the holder send more.
pub const ANSWER_BURST: u32 = 100;

/// Requesters remembered before the oldest are forgotten.
const REQUESTERS: usize = 4096;

/// The addresses this agent holds; the driver keeps it current, the
/// defence reads it. Clones share the set.
#[derive(Debug, Clone, Default)]
pub struct Held(Arc<RwLock<BTreeSet<Ipv4Addr>>>);

impl Held {
    /// Marks `ip` held or not.
    pub fn set(&self, ip: Ipv4Addr, held: bool) {
        let mut s = self.0.write().unwrap_or_else(|p| p.into_inner());
        if held {
            s.insert(ip);
        } else {
            s.remove(&ip);
        }
    }

    /// True while `ip` is held.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        self.0
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&ip)
    }
}

/// The fields of an Ethernet/IPv4 ARP packet the defence looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpPacket {
    /// 1 request, 2 reply.
    pub op: u16,
    /// Sender hardware address.
    pub sender_mac: [u8; 6],
    /// Sender protocol address (0.0.0.0 in a probe).
    pub sender_ip: Ipv4Addr,
    /// Target protocol address.
    pub target_ip: Ipv4Addr,
}

/// Parses an ARP payload (no Ethernet header); `None` unless it is
/// Ethernet/IPv4 with the standard lengths and a request or reply.
pub fn parse(p: &[u8]) -> Option<ArpPacket> {
    if p.len() < 28 || p[0..2] != [0, 1] || p[2..4] != [8, 0] || p[4] != 6 || p[5] != 4 {
        return None;
    }
    let op = u16::from_be_bytes([p[6], p[7]]);
    if op != 1 && op != 2 {
        return None;
    }
    let mut sender_mac = [0u8; 6];
    sender_mac.copy_from_slice(&p[8..14]);
    let ip = |i: usize| Ipv4Addr::new(p[i], p[i + 1], p[i + 2], p[i + 3]);
    Some(ArpPacket {
        op,
        sender_mac,
        sender_ip: ip(14),
        target_ip: ip(24),
    })
}

/// What the holder does about one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Defence {
    /// Another host claims `0`: broadcast an announcement now.
    Conflict(Ipv4Addr),
    /// `to` asked for `ip`: send it an announcement after [`ANSWER_DELAY`].
    Answer {
        /// The held address asked for.
        ip: Ipv4Addr,
        /// The requester's MAC.
        to: [u8; 6],
    },
}

/// The defence for `p`, received in a frame from `src`, on an interface
/// whose MAC is `own`, given which addresses are held. Pure. Nothing for
/// a packet from this interface or from a MAC no single host sends from:
/// an answer to it would go to everyone (or back to us).
pub fn decide(
    p: &ArpPacket,
    src: [u8; 6],
    own: [u8; 6],
    held: impl Fn(Ipv4Addr) -> bool,
) -> Option<Defence> {
    if p.sender_mac == own || src == own || not_a_host(p.sender_mac) || not_a_host(src) {
        return None;
    }
    if !p.sender_ip.is_unspecified() && held(p.sender_ip) {
        return Some(Defence::Conflict(p.sender_ip));
    }
    // A probe (sender 0.0.0.0) is a host checking the address before it
    // takes it: the kernel's reply tells it the address is in use.
    if p.op == 1 && !p.sender_ip.is_unspecified() && held(p.target_ip) {
        return Some(Defence::Answer {
            ip: p.target_ip,
            to: p.sender_mac,
        });
    }
    None
}

/// Rate limit of the broadcast answers to conflicts, per address.
#[derive(Debug, Default)]
pub struct Holdoff(BTreeMap<Ipv4Addr, Instant>);

impl Holdoff {
    /// True when `ip` may be announced at `now` (and records it).
    pub fn allow(&mut self, ip: Ipv4Addr, now: Instant) -> bool {
        match self.0.get(&ip) {
            Some(t) if now < *t + CONFLICT_HOLDOFF => false,
            _ => {
                self.0.insert(ip, now);
                true
            }
        }
    }
}

/// Rate limit of the answers to requests: one per requester and address
/// per [`ANSWER_HOLDOFF`], and [`ANSWER_BURST`] a second in all (a bucket
/// of one second's worth of answers, refilled continuously).
#[derive(Debug, Default)]
pub struct AnswerLimit {
    last: BTreeMap<([u8; 6], Ipv4Addr), Instant>,
    /// Time spent from the bucket (each answer costs 1/[`ANSWER_BURST`]
    /// s); the bucket is full when this lies a second or more back.
    spent_to: Option<Instant>,
}

impl AnswerLimit {
    /// True when `to` may be answered about `ip` at `now` (and records it).
    pub fn allow(&mut self, to: [u8; 6], ip: Ipv4Addr, now: Instant) -> bool {
        if self
            .last
            .get(&(to, ip))
            .is_some_and(|t| now.saturating_duration_since(*t) < ANSWER_HOLDOFF)
        {
            return false;
        }
        let window = Duration::from_secs(1);
        let cost = window / ANSWER_BURST;
        // The bucket: answers may use the time from a second ago to now.
        let floor = now.checked_sub(window).unwrap_or(now);
        let spent = self.spent_to.map_or(floor, |t| t.max(floor));
        if spent + cost > now {
            return false;
        }
        if self.last.len() >= REQUESTERS {
            self.last
                .retain(|_, t| now.saturating_duration_since(*t) < ANSWER_HOLDOFF);
            if self.last.len() >= REQUESTERS {
                return false;
            }
        }
        self.spent_to = Some(spent + cost);
        self.last.insert((to, ip), now);
        true
    }
}

fn mac_text(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Watches the interface's ARP traffic and defends the held addresses
/// until the socket fails. Runs as a task beside the address loops.
pub async fn serve(socket: ArpSocket, held: Held, metrics: Metrics) -> io::Result<()> {
    let own = socket.mac();
    // SAFETY: the ArpSocket owns its fd for its whole life and always
    // returns that same fd; the AsyncFd owns the socket.
    let socket = Arc::new(
        unsafe { AsyncFd::register_with_interest(socket, tokio::io::Interest::READABLE) }
            .map_err(io::Error::from)?,
    );
    let mut holdoff = Holdoff::default();
    let mut limit = AnswerLimit::default();
    let mut buf = [0u8; 128];
    loop {
        let mut guard = socket.readable().await?;
        let got = match guard.try_io(|s| s.get_ref().recv_from(&mut buf)) {
            Ok(r) => r,
            Err(_would_block) => continue,
        };
        let Some((p, src)) = (match got {
            Ok(Some((n, src))) => parse(&buf[..n]).map(|p| (p, src)),
            // Our own frame, or a kind the defence ignores.
            Ok(None) => None,
            // The link is down (ENETDOWN) or flapped: the socket works
            // again once it is up.
            Err(e) => {
                debug!(error = %e, "reading ARP failed; retrying");
                drop(guard);
                tokio::time::sleep(Duration::from_millis(100)).await;
                None
            }
        }) else {
            continue;
        };
        match decide(&p, src, own, |ip| held.contains(ip)) {
            None => {}
            Some(Defence::Conflict(ip)) if holdoff.allow(ip, Instant::now()) => {
                info!(address = %ip, other = %mac_text(p.sender_mac), "another host claims a held address: announcing it again");
                metrics.defended(&ip.to_string(), "conflict");
                if let Err(e) = socket.get_ref().announce(ip, None) {
                    warn!(address = %ip, error = %e, "gratuitous ARP failed");
                }
            }
            Some(Defence::Conflict(_)) => metrics.defence_limited("conflict"),
            Some(Defence::Answer { ip, to }) if !limit.allow(to, ip, Instant::now()) => {
                metrics.defence_limited("answer");
            }
            Some(Defence::Answer { ip, to }) => {
                debug!(address = %ip, requester = %mac_text(to), "answering a request for a held address");
                metrics.defended(&ip.to_string(), "answer");
                let socket = socket.clone();
                let held = held.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(ANSWER_DELAY).await;
                    // Still held: the address may have moved meanwhile.
                    if held.contains(ip)
                        && let Err(e) = socket.get_ref().announce(ip, Some(to))
                    {
                        warn!(address = %ip, error = %e, "gratuitous ARP to a requester failed");
                    }
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arp::announcement;

    const OWN: [u8; 6] = [2, 0, 0, 0, 0, 2];
    const OTHER: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const WORKER: [u8; 6] = [2, 0, 0, 0, 0, 0x50];
    const HELD: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 3);

    fn held(ip: Ipv4Addr) -> bool {
        ip == HELD
    }

    fn request(mac: [u8; 6], from: Ipv4Addr, to: Ipv4Addr) -> ArpPacket {
        ArpPacket {
            op: 1,
            sender_mac: mac,
            sender_ip: from,
            target_ip: to,
        }
    }

    #[test]
    fn an_announcement_parses_back_to_its_fields() {
        let p = parse(&announcement(OTHER, HELD)).expect("parses");
        assert_eq!(p, request(OTHER, HELD, HELD));
    }

    #[test]
    fn other_hardware_protocols_and_ops_are_not_arp_for_the_defence() {
        let mut p = announcement(OTHER, HELD);
        p[1] = 6; // IEEE 802
        assert_eq!(parse(&p), None);
        let mut p = announcement(OTHER, HELD);
        p[7] = 3; // RARP request
        assert_eq!(parse(&p), None);
        assert_eq!(parse(&announcement(OTHER, HELD)[..27]), None);
    }

    #[test]
    fn another_host_announcing_a_held_address_is_a_conflict() {
        let garp = request(OTHER, HELD, HELD);
        assert_eq!(
            decide(&garp, garp.sender_mac, OWN, held),
            Some(Defence::Conflict(HELD))
        );
        // Its kernel asking for a worker from that address is one too.
        let asks = request(OTHER, HELD, Ipv4Addr::new(192, 0, 2, 50));
        assert_eq!(
            decide(&asks, asks.sender_mac, OWN, held),
            Some(Defence::Conflict(HELD))
        );
        // So is a reply, when the switch floods it.
        let reply = ArpPacket { op: 2, ..garp };
        assert_eq!(
            decide(&reply, reply.sender_mac, OWN, held),
            Some(Defence::Conflict(HELD))
        );
    }

    #[test]
    fn a_worker_asking_for_a_held_address_gets_an_answer_of_its_own() {
        let ask = request(WORKER, Ipv4Addr::new(192, 0, 2, 50), HELD);
        assert_eq!(
            decide(&ask, ask.sender_mac, OWN, held),
            Some(Defence::Answer {
                ip: HELD,
                to: WORKER
            })
        );
    }

    #[test]
    fn nothing_for_own_frames_probes_replies_or_addresses_not_held() {
        assert_eq!(decide(&request(OWN, HELD, HELD), OWN, OWN, held), None);
        let probe = request(WORKER, Ipv4Addr::UNSPECIFIED, HELD);
        assert_eq!(decide(&probe, probe.sender_mac, OWN, held), None);
        let reply_to_worker = ArpPacket {
            op: 2,
            ..request(WORKER, Ipv4Addr::new(192, 0, 2, 50), HELD)
        };
        assert_eq!(
            decide(&reply_to_worker, reply_to_worker.sender_mac, OWN, held),
            None
        );
        let elsewhere = request(
            WORKER,
            Ipv4Addr::new(192, 0, 2, 50),
            Ipv4Addr::new(192, 0, 2, 6),
        );
        assert_eq!(decide(&elsewhere, elsewhere.sender_mac, OWN, held), None);
        assert_eq!(
            decide(&request(OTHER, HELD, HELD), OTHER, OWN, |_| false),
            None
        );
    }

    #[test]
    fn conflicts_are_answered_at_most_once_per_holdoff_per_address() {
        let mut h = Holdoff::default();
        let t = Instant::now();
        assert!(h.allow(HELD, t));
        assert!(!h.allow(HELD, t + CONFLICT_HOLDOFF / 2));
        assert!(h.allow(Ipv4Addr::new(192, 0, 2, 6), t));
        assert!(h.allow(HELD, t + CONFLICT_HOLDOFF));
    }

    #[test]
    fn nothing_for_broadcast_multicast_zero_or_own_senders() {
        let ask = request(WORKER, Ipv4Addr::new(192, 0, 2, 50), HELD);
        for bad in [
            [0xff; 6],
            [0x01, 0, 0x5e, 0, 0, 9],
            [0x33, 0x33, 0, 0, 0, 1],
            [0; 6],
            OWN,
        ] {
            // In the ARP sender field...
            let forged = ArpPacket {
                sender_mac: bad,
                ..ask
            };
            assert_eq!(decide(&forged, WORKER, OWN, held), None, "{bad:?}");
            // ...or as the frame's source.
            assert_eq!(decide(&ask, bad, OWN, held), None, "{bad:?}");
            let claim = ArpPacket {
                sender_mac: bad,
                ..request(OTHER, HELD, HELD)
            };
            assert_eq!(decide(&claim, bad, OWN, held), None, "{bad:?}");
        }
    }

    #[test]
    fn answers_are_limited_per_requester_and_in_all() {
        let mut l = AnswerLimit::default();
        let t = Instant::now();
        assert!(l.allow(WORKER, HELD, t));
        assert!(!l.allow(WORKER, HELD, t + ANSWER_HOLDOFF / 2));
        assert!(l.allow(WORKER, HELD, t + ANSWER_HOLDOFF));
        // One requester flooding for 10 s: 20 a second at most.
        let mut l = AnswerLimit::default();
        let answered = (0..10_000u32)
            .filter(|i| l.allow(WORKER, HELD, t + Duration::from_millis(u64::from(*i))))
            .count();
        assert_eq!(answered, 200);
        // Forged requesters, each new: the bucket bounds them all.
        let mut l = AnswerLimit::default();
        let answered = (0..50_000u32)
            .filter(|i| {
                let [_, a, b, c] = i.to_be_bytes();
                let at = t + Duration::from_micros(200 * u64::from(*i));
                l.allow([2, 9, 0, a, b, c], HELD, at)
            })
            .count();
        // 10 s: one full bucket, then the refill rate.
        assert!(
            (1000..=1000 + ANSWER_BURST as usize).contains(&answered),
            "{answered}"
        );
    }

    #[test]
    fn the_held_set_follows_the_loops() {
        let h = Held::default();
        let other = h.clone();
        h.set(HELD, true);
        assert!(other.contains(HELD));
        h.set(HELD, false);
        assert!(!other.contains(HELD));
    }
}
