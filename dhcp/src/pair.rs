//! Two servers sharing one pool (RFC 3074 load balancing), as pure rules:
//! which server answers a request, which half of the pool each allocates
//! from, and the state a server is in. The I/O (heartbeat, lease updates,
//! resync) is in [`crate::peer`].
//!
//! - **Who answers.** The RFC 3074 hash of the client identifier (option
//!   61) or, without one, the hardware address picks the server: even
//!   hashes the primary, odd the secondary. It applies to every request
//!   that does not name a server (DISCOVER, INIT-REBOOT, RENEWING and
//!   REBINDING REQUESTs, INFORM, and RELEASE/DECLINE without option 54);
//!   a request naming a server identifier is that server's (the existing
//!   SELECTING rules). A RENEWING client of the other server that this one
//!   took over during an outage is answered by the other server when it
//!   rebinds at T2.
//! - **Which addresses.** Each server allocates new addresses only from its
//!   half of the pool (the primary the lower half): the two never offer the
//!   same pool address. Both hold every reservation and, through the lease
//!   updates, every lease: a client keeps its address whichever server
//!   answers it.
//! - **States** (moves decided by [`next_state`] from two witnesses: the
//!   pair link, the HTTP heartbeat on the pod network, and the VLAN, an
//!   authenticated heartbeat datagram between the two VLAN addresses, see
//!   [`crate::peer::vlan`]): [`PairState::Syncing`] after start (answers
//!   nothing until it has the other server's leases, or until the pair link
//!   stays silent); [`PairState::LoadBalancing`];
//!   [`PairState::CommunicationRecovery`] when the pair link is lost (no
//!   heartbeat answer for `down_after_ms`, or the other server answers
//!   heartbeats but stores none of this server's lease updates for that
//!   long) while the other server is still heard on the VLAN: it is
//!   serving, so this one answers only its own scope, from its own half,
//!   and its ACKs no longer wait for the other server (what it committed
//!   meanwhile goes over in the exchange when contact returns), for as long
//!   as that lasts; [`PairState::Unauthorized`] when the other server
//!   refuses this server's token (the same service as communication
//!   recovery, its own state so that it is named for what it is);
//!   [`PairState::PartnerDown`] when the other server is silent on both
//!   witnesses for `down_after_ms` (a crash, a lost node, a deleted pod),
//!   whatever the number of clients, and the two clocks agree within
//!   [`SKEW_REFUSE_SECONDS`]: then this one answers every client and
//!   allocates from its own half first, then from the other half,
//!   honouring the other server's leases. Silent on the VLAN but answering
//!   on the pair link changes nothing: the pair link carries every lease.

use std::net::Ipv4Addr;
use std::ops::Bound;

use dhcproto::v4::{DhcpOption, MessageType, OptionCode};

use crate::config::{Config, Role};
use crate::request::Request;

/// The "mixing table" of RFC 3074 section 6.
const MIX: [u8; 256] = [
    251, 175, 119, 215, 81, 14, 79, 191, 103, 49, 181, 143, 186, 157, 0, 232, 31, 32, 55, 60, 152,
    58, 17, 237, 174, 70, 160, 144, 220, 90, 57, 223, 59, 3, 18, 140, 111, 166, 203, 196, 134, 243,
    124, 95, 222, 179, 197, 65, 180, 48, 36, 15, 107, 46, 233, 130, 165, 30, 123, 161, 209, 23, 97,
    16, 40, 91, 219, 61, 100, 10, 210, 109, 250, 127, 22, 138, 29, 108, 244, 67, 207, 9, 178, 204,
    74, 98, 126, 249, 167, 116, 34, 77, 193, 200, 121, 5, 20, 113, 71, 35, 128, 13, 182, 94, 25,
    226, 227, 199, 75, 27, 41, 245, 230, 224, 43, 225, 177, 26, 155, 150, 212, 142, 218, 115, 241,
    73, 88, 105, 39, 114, 62, 255, 192, 201, 145, 214, 168, 158, 221, 148, 154, 122, 12, 84, 82,
    163, 44, 139, 228, 236, 205, 242, 217, 11, 187, 146, 159, 64, 86, 239, 195, 42, 106, 198, 118,
    112, 184, 172, 87, 2, 173, 117, 176, 229, 247, 253, 137, 185, 99, 164, 102, 147, 45, 66, 231,
    52, 141, 211, 194, 206, 246, 238, 56, 110, 78, 248, 63, 240, 189, 93, 92, 51, 53, 183, 19, 171,
    72, 50, 33, 104, 101, 69, 8, 252, 83, 120, 76, 135, 85, 54, 202, 125, 188, 213, 96, 235, 136,
    208, 162, 129, 190, 132, 156, 38, 47, 1, 7, 254, 24, 4, 216, 131, 89, 21, 28, 133, 37, 153,
    149, 80, 170, 68, 6, 169, 234, 151,
];

/// The RFC 3074 hash (a Pearson hash over the key, last byte first,
/// seeded with the key's length).
pub fn lb_hash(key: &[u8]) -> u8 {
    let mut hash = key.len() as u8;
    for b in key.iter().rev() {
        hash = MIX[usize::from(hash ^ b)];
    }
    hash
}

/// The server a request's client belongs to: by client identifier when
/// the client sends a non-empty one, by hardware address otherwise.
pub fn owner(req: &Request) -> Role {
    let hash = match req.msg.opts().get(OptionCode::ClientIdentifier) {
        Some(DhcpOption::ClientIdentifier(id)) if !id.is_empty() => lb_hash(id),
        _ => lb_hash(&req.mac.0),
    };
    if hash.is_multiple_of(2) {
        Role::Primary
    } else {
        Role::Secondary
    }
}

/// What a server of a pair is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairState {
    /// Started, fetching the other server's leases: answers no client.
    Syncing,
    /// Both up: answers its own clients, allocates from its own half.
    LoadBalancing,
    /// The other server is down: answers every client, allocates from its
    /// own half first, then the other's.
    PartnerDown,
    /// Contact lost, the other server may still be serving: answers its
    /// own clients from its own half, ACKs without waiting for the other.
    CommunicationRecovery,
    /// The other server refuses this server's token: served as
    /// [`PairState::CommunicationRecovery`], named for what it is.
    Unauthorized,
}

impl PairState {
    /// Stable name (the pair API and metrics).
    pub fn as_str(self) -> &'static str {
        match self {
            PairState::Syncing => "syncing",
            PairState::LoadBalancing => "load-balancing",
            PairState::PartnerDown => "partner-down",
            PairState::CommunicationRecovery => "communication-recovery",
            PairState::Unauthorized => "unauthorized",
        }
    }

    /// Parses [`PairState::as_str`].
    pub fn parse(s: &str) -> Option<PairState> {
        match s {
            "syncing" => Some(PairState::Syncing),
            "load-balancing" => Some(PairState::LoadBalancing),
            "partner-down" => Some(PairState::PartnerDown),
            "communication-recovery" => Some(PairState::CommunicationRecovery),
            "unauthorized" => Some(PairState::Unauthorized),
            _ => None,
        }
    }

    /// Gauge value (0 syncing, 1 load balancing, 2 partner down,
    /// 3 communication recovery, 4 unauthorized).
    pub fn code(self) -> i64 {
        match self {
            PairState::Syncing => 0,
            PairState::LoadBalancing => 1,
            PairState::PartnerDown => 2,
            PairState::CommunicationRecovery => 3,
            PairState::Unauthorized => 4,
        }
    }

    /// [`PairState::code`] back to a state.
    pub fn from_code(code: i64) -> PairState {
        match code {
            1 => PairState::LoadBalancing,
            2 => PairState::PartnerDown,
            3 => PairState::CommunicationRecovery,
            4 => PairState::Unauthorized,
            _ => PairState::Syncing,
        }
    }

    /// Whether contact is lost and this server serves its own scope only.
    pub fn recovering(self) -> bool {
        matches!(
            self,
            PairState::CommunicationRecovery | PairState::Unauthorized
        )
    }
}

/// Clock skew above which a server warns (log, metric, alert), seconds.
pub const SKEW_WARN_SECONDS: f64 = 30.0;
/// Clock skew above which a server refuses to take over, seconds: lease
/// times of the two servers would no longer mean the same instant.
pub const SKEW_REFUSE_SECONDS: f64 = 60.0;

/// What the last heartbeat got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heartbeat {
    /// The other server answered with its state.
    Answered(PairState),
    /// It refused this server's token (401).
    Unauthorized,
    /// No answer (refused connection, timeout, bad reply).
    Unreachable,
}

/// What the two witnesses know when the heartbeat decides the next state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observation {
    /// The last heartbeat on the pair link.
    pub heartbeat: Heartbeat,
    /// Whether the other server answered a pair-link heartbeat with its
    /// state within `down_after_ms`.
    pub in_contact: bool,
    /// Whether the pair link got no answer at all (not even a refusal of
    /// the token) for `down_after_ms` (since start, in
    /// [`PairState::Syncing`]).
    pub silent: bool,
    /// The other server answers heartbeats but has stored none of this
    /// server's lease updates for `down_after_ms`.
    pub updates_stalled: bool,
    /// Whether a valid VLAN heartbeat of the other server arrived within
    /// `down_after_ms` (it sends them only while its DHCP loop turns).
    pub vlan_alive: bool,
    /// The state the other server announced in its last VLAN heartbeat.
    pub vlan_state: Option<PairState>,
    /// The clock skew last measured, seconds (other minus this).
    pub skew: Option<f64>,
}

impl Observation {
    /// Dead on both witnesses: no answer on the pair link and no VLAN
    /// heartbeat for `down_after_ms`.
    pub fn partner_dead(&self) -> bool {
        self.silent && !self.vlan_alive
    }
}

/// What the heartbeat does next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Step {
    /// Nothing changes.
    Stay,
    /// Move to a state, for the reason given (logged).
    Move(PairState, &'static str),
    /// Exchange leases with the other server, then load balance.
    Exchange,
    /// The other server is dead on both witnesses but taking over is
    /// refused (logged, counted): the reason.
    RefuseTakeover(&'static str),
}

const DEAD: &str = "the other server is silent on the pair link and on the VLAN";

/// Partner-down unless the clocks disagree by more than
/// [`SKEW_REFUSE_SECONDS`].
fn takeover(o: &Observation) -> Step {
    match o.skew {
        Some(s) if s.abs() > SKEW_REFUSE_SECONDS => {
            Step::RefuseTakeover("clock skew with the other server above 60 s")
        }
        _ => Step::Move(PairState::PartnerDown, DEAD),
    }
}

/// The state machine of a pair, pure: from `state` and what the two
/// witnesses observed, the next step. The other server is judged dead only
/// when both are silent; alive on the VLAN but cut on the pair link is
/// communication recovery for as long as it lasts; alive on the pair link
/// but silent on the VLAN changes nothing (the pair link carries every
/// lease, and a takeover would not reach clients across a broken VLAN leg
/// any better).
pub fn next_state(state: PairState, o: &Observation) -> Step {
    let unauthorized = o.heartbeat == Heartbeat::Unauthorized;
    let answered = matches!(o.heartbeat, Heartbeat::Answered(_));
    let token = "the other server refuses this server's token";
    match state {
        PairState::Syncing => {
            if answered {
                Step::Exchange
            } else if unauthorized {
                Step::Move(PairState::Unauthorized, token)
            } else if !o.silent {
                Step::Stay
            } else if o.vlan_state == Some(PairState::PartnerDown) {
                // The other server serves every client and holds leases
                // this one lacks: wait for the pair link to exchange them.
                Step::Stay
            } else if o.vlan_alive {
                Step::Move(
                    PairState::CommunicationRecovery,
                    "the pair link is silent since start; the other server is alive on the VLAN",
                )
            } else {
                takeover(o)
            }
        }
        PairState::LoadBalancing => {
            if unauthorized {
                Step::Move(PairState::Unauthorized, token)
            } else if o.partner_dead() {
                match takeover(o) {
                    Step::RefuseTakeover(why) => Step::Move(PairState::CommunicationRecovery, why),
                    step => step,
                }
            } else if !o.in_contact {
                Step::Move(
                    PairState::CommunicationRecovery,
                    "the pair link is cut; the other server is alive on the VLAN",
                )
            } else if o.updates_stalled {
                Step::Move(
                    PairState::CommunicationRecovery,
                    "the other server answers heartbeats but stores no lease updates",
                )
            } else {
                Step::Stay
            }
        }
        PairState::CommunicationRecovery | PairState::Unauthorized => {
            // The exchange itself shows whether the other server stores
            // records again.
            if answered && o.in_contact {
                return Step::Exchange;
            }
            if unauthorized && state != PairState::Unauthorized {
                return Step::Move(PairState::Unauthorized, token);
            }
            if o.partner_dead() {
                return takeover(o);
            }
            if !unauthorized && !answered && state == PairState::Unauthorized && o.silent {
                return Step::Move(
                    PairState::CommunicationRecovery,
                    "the pair link is silent; the other server is alive on the VLAN",
                );
            }
            Step::Stay
        }
        PairState::PartnerDown => match o.heartbeat {
            // Back once the other server has synced (it answers no client
            // while syncing) and the leases of the outage are exchanged.
            Heartbeat::Answered(
                PairState::LoadBalancing
                | PairState::PartnerDown
                | PairState::CommunicationRecovery
                | PairState::Unauthorized,
            ) => Step::Exchange,
            Heartbeat::Answered(PairState::Syncing) => Step::Stay,
            // Alive again on the VLAN and serving (not waiting for this
            // server), with the pair link still cut: both would allocate
            // from the other's half. Back to this server's own half.
            _ if o.vlan_alive && o.vlan_state.is_some_and(|s| s != PairState::Syncing) => {
                Step::Move(
                    PairState::CommunicationRecovery,
                    "the other server serves again on the VLAN while the pair link is cut",
                )
            }
            _ => Step::Stay,
        },
    }
}

/// Clients of the other server's scope that truly went unanswered while
/// contact is lost: a client counts once its `secs` field (seconds since
/// it began asking) reaches `wait_ms`, Kea's `max-ack-delay` test. A
/// metric for the operator only: the witnesses decide the state.
#[derive(Debug, Default)]
pub struct Unacked {
    unacked: std::collections::HashSet<crate::config::Mac>,
}

/// Most clients [`Unacked`] tracks (a flood of made-up MACs cannot grow it
/// without bound).
const UNACKED_TRACKED: usize = 4096;

impl Unacked {
    /// A request of the other scope from `mac`, with its `secs` field.
    /// Returns the number of unanswered clients.
    pub fn observe(&mut self, mac: crate::config::Mac, secs: u16, wait_ms: u64) -> usize {
        if u64::from(secs) * 1000 >= wait_ms && self.unacked.len() < UNACKED_TRACKED {
            self.unacked.insert(mac);
        }
        self.unacked.len()
    }

    /// Forgets every client (contact is back, or this server took over).
    pub fn clear(&mut self) {
        self.unacked.clear();
    }

    /// The number of unanswered clients.
    pub fn count(&self) -> usize {
        self.unacked.len()
    }
}

/// This server's part in a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    /// This server's role.
    pub role: Role,
    /// Its state.
    pub state: PairState,
    /// First address of the secondary's half of the pool.
    pub split: Ipv4Addr,
}

impl Share {
    /// The share of `role` in `cfg`'s pool, starting in `state`. The pool
    /// (minus excluded addresses) is cut in two at its middle address.
    pub fn new(cfg: &Config, role: Role, state: PairState) -> Share {
        let n = cfg.pool_size();
        let split = cfg
            .pool()
            .nth(n.div_ceil(2))
            .unwrap_or_else(|| Ipv4Addr::from(u32::from(cfg.range_end).saturating_add(1)));
        Share { role, state, split }
    }

    /// Whether `ip` is in this server's half of the pool.
    pub fn mine(&self, ip: Ipv4Addr) -> bool {
        match self.role {
            Role::Primary => ip < self.split,
            Role::Secondary => ip >= self.split,
        }
    }

    /// The addresses of one half as a range: this server's half (`own`)
    /// or the other's. The same set as [`Share::mine`] (or its negation),
    /// in a form an ordered set can seek to instead of scanning.
    pub fn half(&self, own: bool) -> (Bound<Ipv4Addr>, Bound<Ipv4Addr>) {
        if (self.role == Role::Primary) == own {
            (Bound::Unbounded, Bound::Excluded(self.split))
        } else {
            (Bound::Included(self.split), Bound::Unbounded)
        }
    }

    /// Whether this server may hand out new addresses of the other half.
    pub fn takes_over(&self) -> bool {
        self.state == PairState::PartnerDown
    }

    /// Whether this server answers `req` now (see the module docs).
    pub fn answers(&self, req: &Request) -> bool {
        match self.state {
            PairState::Syncing => false,
            PairState::PartnerDown => true,
            PairState::LoadBalancing
            | PairState::CommunicationRecovery
            | PairState::Unauthorized => {
                let names_server = matches!(
                    req.kind,
                    MessageType::Request | MessageType::Release | MessageType::Decline
                ) && req.msg.opts().get(OptionCode::ServerIdentifier).is_some();
                names_server || owner(req) == self.role
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Mac;
    use dhcproto::v4::Message;
    use std::ops::RangeBounds;

    fn req(kind: MessageType, mac: [u8; 6], opts: Vec<DhcpOption>) -> Request {
        let mut m = Message::default();
        m.set_chaddr(&mac);
        m.opts_mut().insert(DhcpOption::MessageType(kind));
        for o in opts {
            m.opts_mut().insert(o);
        }
        Request {
            msg: m,
            kind,
            mac: Mac(mac),
        }
    }

    #[test]
    fn the_hash_is_rfc_3074s_and_splits_clients_about_evenly() {
        // The table is a permutation of 0..=255.
        let mut seen = [false; 256];
        for v in MIX {
            assert!(!seen[usize::from(v)]);
            seen[usize::from(v)] = true;
        }
        // One byte key k: MIX[1 ^ k]. Empty key: its length, 0.
        assert_eq!(lb_hash(&[]), 0);
        assert_eq!(lb_hash(&[0]), MIX[1]);
        assert_eq!(lb_hash(&[1, 2]), MIX[usize::from(MIX[2 ^ 2] ^ 1)]);
        let primary = (0..4096u32)
            .filter(|n| {
                let b = n.to_be_bytes();
                lb_hash(&[2, 0, b[0], b[1], b[2], b[3]]).is_multiple_of(2)
            })
            .count();
        assert!((1800..2300).contains(&primary), "{primary} of 4096");
    }

    #[test]
    fn each_client_is_answered_by_exactly_one_server_while_balancing() {
        let cfg = Config::from_yaml(
            "server_ip: 192.0.2.2\nsubnet: 192.0.2.0/24\nrange: { start: 192.0.2.100, end: 192.0.2.199 }\n",
        )
        .unwrap();
        let p = Share::new(&cfg, Role::Primary, PairState::LoadBalancing);
        let s = Share::new(&cfg, Role::Secondary, PairState::LoadBalancing);
        for n in 0..=255u8 {
            let r = req(MessageType::Discover, [2, 0, 0, 0, 1, n], vec![]);
            assert!(p.answers(&r) != s.answers(&r), "client {n}");
        }
        // The client id, when present, decides.
        let id = vec![1, 2, 0, 0, 0, 1, 7];
        let with_id = |mac| {
            req(
                MessageType::Discover,
                mac,
                vec![DhcpOption::ClientIdentifier(id.clone())],
            )
        };
        assert_eq!(
            p.answers(&with_id([2, 0, 0, 0, 0, 1])),
            p.answers(&with_id([2, 0, 0, 0, 0, 2]))
        );
        // A SELECTING request names its server: both look at it (the one
        // not named withdraws its offer).
        let sel = req(
            MessageType::Request,
            [2, 0, 0, 0, 1, 1],
            vec![DhcpOption::ServerIdentifier(Ipv4Addr::new(192, 0, 2, 2))],
        );
        assert!(p.answers(&sel) && s.answers(&sel));
        // Syncing answers nothing; partner-down answers everyone.
        let r = req(MessageType::Discover, [2, 0, 0, 0, 1, 1], vec![]);
        assert!(
            !Share {
                state: PairState::Syncing,
                ..p
            }
            .answers(&r)
        );
        assert!(
            Share {
                state: PairState::PartnerDown,
                ..p
            }
            .answers(&r)
        );
        assert!(
            Share {
                state: PairState::PartnerDown,
                ..s
            }
            .answers(&r)
        );
    }

    #[test]
    fn the_pool_halves_do_not_overlap_and_cover_the_pool() {
        let cfg = Config::from_yaml(
            "server_ip: 192.0.2.2\nsubnet: 192.0.2.0/24\nrange: { start: 192.0.2.100, end: 192.0.2.110 }\nexcluded: [192.0.2.101]\n",
        )
        .unwrap();
        let p = Share::new(&cfg, Role::Primary, PairState::LoadBalancing);
        let s = Share::new(&cfg, Role::Secondary, PairState::LoadBalancing);
        let pool: Vec<Ipv4Addr> = cfg.pool().collect();
        assert_eq!(pool.len(), 10);
        assert!(pool.iter().all(|a| p.mine(*a) != s.mine(*a)));
        assert_eq!(pool.iter().filter(|a| p.mine(**a)).count(), 5);
        // The halves as ranges are the same sets as `mine`.
        for sh in [p, s] {
            for a in &pool {
                assert_eq!(sh.half(true).contains(a), sh.mine(*a), "{a}");
                assert_eq!(sh.half(false).contains(a), !sh.mine(*a), "{a}");
            }
        }
    }

    fn seen(heartbeat: Heartbeat) -> Observation {
        let answered = matches!(heartbeat, Heartbeat::Answered(_));
        Observation {
            heartbeat,
            in_contact: answered,
            silent: false,
            updates_stalled: false,
            vlan_alive: true,
            vlan_state: Some(PairState::LoadBalancing),
            skew: Some(0.0),
        }
    }

    /// Nothing on the pair link for `down_after_ms`; the VLAN as given.
    fn cut(vlan_alive: bool) -> Observation {
        Observation {
            silent: true,
            vlan_alive,
            vlan_state: vlan_alive.then_some(PairState::LoadBalancing),
            ..seen(Heartbeat::Unreachable)
        }
    }

    #[test]
    fn dead_on_both_witnesses_is_partner_down_at_once_whatever_the_clients() {
        use PairState::*;
        for from in [LoadBalancing, CommunicationRecovery, Unauthorized, Syncing] {
            assert!(
                matches!(next_state(from, &cut(false)), Step::Move(PartnerDown, _)),
                "{from:?}"
            );
        }
    }

    #[test]
    fn a_cut_pair_link_with_the_other_alive_on_the_vlan_is_communication_recovery_for_as_long_as_it_lasts()
     {
        use PairState::*;
        let o = cut(true);
        assert!(matches!(
            next_state(LoadBalancing, &o),
            Step::Move(CommunicationRecovery, _)
        ));
        assert!(matches!(
            next_state(Syncing, &o),
            Step::Move(CommunicationRecovery, _)
        ));
        // However long it lasts, and whatever clients of the other scope do.
        assert_eq!(next_state(CommunicationRecovery, &o), Step::Stay);
        // Not yet silent for down_after on the pair link: not even that.
        let short = Observation {
            silent: false,
            in_contact: true,
            ..o
        };
        assert_eq!(next_state(LoadBalancing, &short), Step::Stay);
        // Contact back: exchange, then load balance.
        let back = seen(Heartbeat::Answered(CommunicationRecovery));
        assert_eq!(next_state(CommunicationRecovery, &back), Step::Exchange);
        assert_eq!(next_state(PartnerDown, &back), Step::Exchange);
        // A partner still syncing gets this server's leases first.
        assert_eq!(
            next_state(PartnerDown, &seen(Heartbeat::Answered(Syncing))),
            Step::Stay
        );
    }

    #[test]
    fn silent_on_the_vlan_but_answering_on_the_pair_link_changes_nothing() {
        let o = Observation {
            vlan_alive: false,
            vlan_state: None,
            ..seen(Heartbeat::Answered(PairState::LoadBalancing))
        };
        assert_eq!(next_state(PairState::LoadBalancing, &o), Step::Stay);
        // A refused token is still a live server: no takeover.
        let refused = Observation {
            silent: false,
            ..seen(Heartbeat::Unauthorized)
        };
        let refused = Observation {
            vlan_alive: false,
            ..refused
        };
        assert_eq!(next_state(PairState::Unauthorized, &refused), Step::Stay);
    }

    #[test]
    fn a_partner_back_on_the_vlan_ends_the_takeover_and_one_still_syncing_waits() {
        use PairState::*;
        // Back and serving (its pair link still cut): own half again.
        assert!(matches!(
            next_state(PartnerDown, &cut(true)),
            Step::Move(CommunicationRecovery, _)
        ));
        // Both took over (a double partition, healed on the VLAN first).
        let both = Observation {
            vlan_state: Some(PartnerDown),
            ..cut(true)
        };
        assert!(matches!(
            next_state(PartnerDown, &both),
            Step::Move(CommunicationRecovery, _)
        ));
        // Back but syncing: it waits for this server's leases.
        let syncing = Observation {
            vlan_state: Some(Syncing),
            ..cut(true)
        };
        assert_eq!(next_state(PartnerDown, &syncing), Step::Stay);
        // ...and a syncing server whose partner took over waits for the
        // pair link rather than serve beside it.
        let waits = Observation {
            vlan_state: Some(PartnerDown),
            ..cut(true)
        };
        assert_eq!(next_state(Syncing, &waits), Step::Stay);
        // Still dead on both: stays partner-down.
        assert_eq!(next_state(PartnerDown, &cut(false)), Step::Stay);
    }

    #[test]
    fn a_partner_that_stores_no_updates_is_left_after_a_bounded_time() {
        let stalled = Observation {
            updates_stalled: true,
            ..seen(Heartbeat::Answered(PairState::LoadBalancing))
        };
        assert!(matches!(
            next_state(PairState::LoadBalancing, &stalled),
            Step::Move(PairState::CommunicationRecovery, _)
        ));
    }

    #[test]
    fn a_token_mismatch_is_its_own_state() {
        use PairState::*;
        let o = seen(Heartbeat::Unauthorized);
        for from in [Syncing, LoadBalancing, CommunicationRecovery] {
            assert!(
                matches!(next_state(from, &o), Step::Move(Unauthorized, _)),
                "{from:?}"
            );
        }
        assert_eq!(next_state(Unauthorized, &o), Step::Stay);
        // It serves its own scope only, like communication recovery.
        assert!(Unauthorized.recovering());
    }

    #[test]
    fn clock_skew_above_60_s_refuses_takeover() {
        let o = Observation {
            skew: Some(-3600.0),
            ..cut(false)
        };
        assert!(matches!(
            next_state(PairState::CommunicationRecovery, &o),
            Step::RefuseTakeover(_)
        ));
        // From load balancing it still leaves for communication recovery.
        assert!(matches!(
            next_state(PairState::LoadBalancing, &o),
            Step::Move(PairState::CommunicationRecovery, _)
        ));
        let small = Observation {
            skew: Some(45.0),
            ..o
        };
        assert!(matches!(
            next_state(PairState::CommunicationRecovery, &small),
            Step::Move(PairState::PartnerDown, _)
        ));
    }

    #[test]
    fn a_client_counts_as_unanswered_by_its_secs_only() {
        let mut u = Unacked::default();
        let a = Mac([2, 0, 0, 0, 0, 1]);
        let b = Mac([2, 0, 0, 0, 0, 2]);
        // Retransmissions with secs 0 (a client the other server answers,
        // or one that just began) never count.
        assert_eq!(u.observe(a, 0, 10_000), 0);
        assert_eq!(u.observe(a, 9, 10_000), 0);
        assert_eq!(u.observe(b, 12, 10_000), 1, "secs says 12 s");
        assert_eq!(u.observe(b, 14, 10_000), 1, "counted once");
        u.clear();
        assert_eq!(u.count(), 0);
    }
}
