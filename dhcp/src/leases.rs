//! The lease table: which address belongs to which client, and the
//! allocation policy. Pure state, no I/O: the current time is a parameter
//! and persistence is the caller's job (every method that changes a lease
//! returns the [`StoredLease`] to write).
//!
//! Policy:
//! - a MAC with a reservation only ever gets its reserved address;
//! - a returning client gets its previous address when it is still usable;
//! - otherwise a client may get the address it asks for (option 50) when
//!   free, then the lowest never-bound address, then the address whose lease
//!   or hold ended longest ago (expired leases are reclaimed last, so that
//!   their former owners keep the best chance of getting them back);
//! - an OFFERed address is held for [`OFFER_HOLD_SECONDS`] so that two
//!   concurrent DISCOVERs never get the same address;
//! - a RELEASEd address stays bound to its client as an ended lease, so it
//!   is handed to others only after every never-used address (RFC 2131
//!   §4.3.1), and a client that releases and returns gets it back;
//! - a DECLINEd address is quarantined for the configured time;
//! - when a reservation gives a MAC another address than the one it holds
//!   (the reservation moved, or a MAC with a dynamic lease got one), the
//!   held address is released at once ([`LeaseTable::reconfigure`]), not at
//!   the end of the lease.

use std::collections::{BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::sync::Arc;

use crate::config::{Config, Mac};
use crate::lease_store::{DECLINED_MAC, StoredLease};
use crate::pair::{PairState, Share};

/// How long an offered address stays reserved for the client it was offered to.
pub const OFFER_HOLD_SECONDS: u64 = 30;

/// How far past a full lease (or quarantine) from now a record from the
/// other server of a pair may end and still be stored: room for the
/// clocks of the two servers (takeover stops above 60 s of skew) and the
/// time the record spent in transit.
pub const PEER_EXPIRY_SLACK: u64 = 90;

/// How far the expiry named by a release from the other server may be
/// from the binding held here (clocks and rounding).
pub const RELEASE_EXPIRY_TOLERANCE: u64 = 2;

/// State of one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Offered to `mac`, not committed; held until `until`.
    Offered {
        /// End of the hold, Unix seconds.
        until: u64,
    },
    /// Committed (ACKed) to `mac` until `expires`.
    Bound {
        /// Lease expiry, Unix seconds.
        expires: u64,
    },
    /// Declined by a client; out of the pool until `until`.
    Declined {
        /// End of the quarantine, Unix seconds.
        until: u64,
    },
    /// Its lease record was lost (a damaged log record): offered to nobody
    /// until `until`, but given to a client that asks for it by REQUEST
    /// (see [`LeaseTable::quarantine_lost`]).
    Lost {
        /// When the lost lease would have ended at the latest, Unix seconds.
        until: u64,
    },
}

/// An address's owner and state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Binding {
    /// Owner ([`DECLINED_MAC`] for a quarantined address).
    pub mac: Mac,
    /// Offered, bound or declined.
    pub state: State,
}

impl Binding {
    /// The time at which the binding stops holding its address.
    pub fn ends(&self) -> u64 {
        match self.state {
            State::Offered { until } | State::Declined { until } | State::Lost { until } => until,
            State::Bound { expires } => expires,
        }
    }

    /// Whether the binding still holds the address at `now`.
    pub fn live(&self, now: u64) -> bool {
        self.ends() > now
    }
}

/// Why no address could be given or confirmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Every pool address is live (bound, offered or quarantined).
    PoolExhausted,
    /// The client's reserved address `ip` is held by another client.
    ReservedAddressInUse {
        /// The reserved address.
        ip: Ipv4Addr,
        /// Who holds it ([`DECLINED_MAC`] when it is quarantined).
        holder: Mac,
    },
    /// The address is not one this client may have (outside the pool, an
    /// infra address, or not the client's reservation).
    NotAllowed,
    /// The address is live for another client.
    InUse,
}

impl Refusal {
    /// Short, stable text for logs and NAK messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::PoolExhausted => "pool exhausted",
            Refusal::ReservedAddressInUse { .. } => "reserved address held by another client",
            Refusal::NotAllowed => "address not allowed for this client",
            Refusal::InUse => "address in use by another client",
        }
    }
}

/// A committed lease and the address the client held before, if the commit
/// moved it (that one is released).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Commit {
    /// The lease to persist before acknowledging it.
    pub lease: StoredLease,
    /// The client's previous address, now free (persist its release).
    pub superseded: Option<Ipv4Addr>,
}

/// A binding released because a reservation gives its MAC another address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moved {
    /// The client.
    pub mac: Mac,
    /// The address it held, now free (persist its release).
    pub released: Ipv4Addr,
    /// The address its reservation names.
    pub reserved: Ipv4Addr,
}

/// Counts for the metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Dynamic pool size.
    pub pool_size: usize,
    /// Live bound leases (pool and reservations).
    pub active: usize,
    /// Live offers.
    pub offered: usize,
    /// Addresses in quarantine.
    pub declined: usize,
    /// Addresses whose lease record was lost, held back until their lease
    /// would have ended.
    pub lost: usize,
    /// Pool addresses not held by a live binding.
    pub free: usize,
}

/// Every binding, the free part of the pool and the config it follows.
#[derive(Debug, Clone)]
pub struct LeaseTable {
    config: Arc<Config>,
    by_ip: HashMap<Ipv4Addr, Binding>,
    /// The last address of each MAC: a hint for returning clients.
    last_ip: HashMap<Mac, Ipv4Addr>,
    /// Pool addresses with no binding at all.
    never_bound: BTreeSet<Ipv4Addr>,
    /// Every binding by (end, address): the reclaim candidate (the binding
    /// that ended longest ago) and the ended offers are found in O(log n)
    /// instead of a scan of the table.
    by_end: BTreeSet<(u64, Ipv4Addr)>,
    /// Size of the dynamic pool of `config` (cached: counting walks the range).
    pool_size: usize,
    /// This server's part of a pair, if it is one.
    share: Option<Share>,
    /// Addresses of the other server's half this server bound while taking
    /// over (partner down): a record from the other server replaces them
    /// (see `may_be_superseded`). Kept in memory: a restart counts as an
    /// outage, which makes every binding older than it replaceable anyway.
    took_over: std::collections::HashSet<Ipv4Addr>,
    /// Times this server left load balancing (contact with the other
    /// server lost, or a start): the "outage" each binding's last update
    /// is compared with.
    outage: u64,
    /// The `outage` count when each address's binding was last committed
    /// here or merged from the other server.
    touched: HashMap<Ipv4Addr, u64>,
    /// Addresses whose binding was last merged from the other server (a
    /// replica, its expiry carrying the lead of lazy updates).
    replica: std::collections::HashSet<Ipv4Addr>,
}

/// A lease from the other server of a pair that this table refused,
/// because one of this server's clients holds the address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerConflict {
    /// The lease the other server sent.
    pub theirs: StoredLease,
    /// Who holds the address here.
    pub holder: Mac,
    /// Until when it holds it.
    pub held_until: u64,
}

impl PeerConflict {
    /// This server's binding, as a record (sent back to the other server
    /// with the refusal, so that it drops its own).
    pub fn ours(&self) -> StoredLease {
        StoredLease {
            ip: self.theirs.ip,
            mac: self.holder,
            expires_unix: self.held_until,
        }
    }
}

/// What merging a lease from the other server did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merged {
    /// Nothing new (this table already had it, or a later expiry).
    Known,
    /// Stored (persist it).
    Stored(StoredLease),
    /// Stored in place of another client's binding on the other server's
    /// half (persist it; `loser` gets a NAK at its next renewal).
    Replaced {
        /// The lease stored.
        lease: StoredLease,
        /// The client whose binding it replaced.
        loser: Mac,
    },
}

impl LeaseTable {
    /// An empty table for `config`.
    pub fn new(config: Arc<Config>) -> Self {
        let mut t = LeaseTable {
            config,
            by_ip: HashMap::new(),
            last_ip: HashMap::new(),
            never_bound: BTreeSet::new(),
            by_end: BTreeSet::new(),
            pool_size: 0,
            share: None,
            took_over: std::collections::HashSet::new(),
            outage: 1,
            touched: HashMap::new(),
            replica: std::collections::HashSet::new(),
        };
        t.rebuild_free();
        t
    }

    /// Makes this table one half of a pair (`role`), in `state`; None
    /// makes it a single server again.
    pub fn set_pair(&mut self, pair: Option<(crate::config::Role, PairState)>) {
        self.share = pair.map(|(role, state)| Share::new(&self.config, role, state));
    }

    /// Changes the pair state (no effect on a single server).
    pub fn set_pair_state(&mut self, state: PairState) {
        if let Some(s) = &mut self.share {
            if s.state == PairState::LoadBalancing && state != PairState::LoadBalancing {
                self.outage += 1;
            }
            s.state = state;
        }
    }

    /// Records that `ip`'s binding was just committed here (`replica`
    /// false) or merged from the other server.
    fn touch(&mut self, ip: Ipv4Addr, replica: bool) {
        if self.share.is_none() {
            return;
        }
        self.touched.insert(ip, self.outage);
        if replica {
            self.replica.insert(ip);
        } else {
            self.replica.remove(&ip);
        }
    }

    /// This server's part of a pair, if any.
    pub fn share(&self) -> Option<Share> {
        self.share
    }

    /// Whether this server may hand `ip` out as a new address now: always
    /// when alone or taking over, otherwise only from its own half.
    fn may_allocate(&self, ip: Ipv4Addr) -> bool {
        self.share.is_none_or(|s| s.mine(ip) || s.takes_over())
    }

    /// Whether `mac` has a binding of `ip` (in any state, ended or not).
    fn bound_to(&self, mac: Mac, ip: Ipv4Addr) -> bool {
        self.by_ip.get(&ip).is_some_and(|b| b.mac == mac)
    }

    /// A table holding the leases recovered from the store.
    pub fn from_store<'a>(
        config: Arc<Config>,
        leases: impl IntoIterator<Item = &'a StoredLease>,
    ) -> Self {
        let mut t = LeaseTable::new(config);
        for l in leases {
            let b = if l.mac == DECLINED_MAC {
                Binding {
                    mac: l.mac,
                    state: State::Declined {
                        until: l.expires_unix,
                    },
                }
            } else {
                t.last_ip.insert(l.mac, l.ip);
                Binding {
                    mac: l.mac,
                    state: State::Bound {
                        expires: l.expires_unix,
                    },
                }
            };
            t.set(l.ip, b);
        }
        t
    }

    /// The config in force.
    pub fn config(&self) -> &Arc<Config> {
        &self.config
    }

    /// Switches to a new config (reload). Bindings are kept, except those
    /// of a MAC whose reservation now names another address: they are
    /// released at once and returned (persist their release). Any other
    /// client whose address is no longer allowed gets a NAK at its next
    /// renewal.
    pub fn reconfigure(&mut self, config: Arc<Config>) -> Vec<Moved> {
        self.config = config;
        self.rebuild_free();
        if let Some(s) = self.share {
            self.share = Some(Share::new(&self.config, s.role, s.state));
        }
        self.release_moved_reservations()
    }

    /// Releases every binding of a MAC whose reservation names another
    /// address (also needed after recovery: the config may have changed
    /// while the server was down).
    pub fn release_moved_reservations(&mut self) -> Vec<Moved> {
        let reservations = &self.config.reservations;
        let mut moved: Vec<Moved> = self
            .by_ip
            .iter()
            .filter_map(|(ip, b)| {
                let r = reservations.get(&b.mac)?;
                (r.ip != *ip).then_some(Moved {
                    mac: b.mac,
                    released: *ip,
                    reserved: r.ip,
                })
            })
            .collect();
        moved.sort_by_key(|m| m.released);
        for m in &moved {
            self.remove(m.released);
        }
        moved
    }

    fn rebuild_free(&mut self) {
        self.pool_size = self.config.pool_size();
        let by_ip = &self.by_ip;
        self.never_bound = self
            .config
            .pool()
            .filter(|a| !by_ip.contains_key(a))
            .collect();
    }

    /// Whether `ip` belongs to the dynamic pool.
    pub fn in_pool(&self, ip: Ipv4Addr) -> bool {
        let c = &self.config;
        ip >= c.range_start && ip <= c.range_end && !c.excluded.contains(&ip)
    }

    /// Whether `mac` may hold `ip` under the current config.
    pub fn allowed(&self, mac: Mac, ip: Ipv4Addr) -> bool {
        match self.config.reservations.get(&mac) {
            Some(r) => r.ip == ip,
            None => self.in_pool(ip),
        }
    }

    /// The binding of `ip`, if any (live or not).
    pub fn get(&self, ip: Ipv4Addr) -> Option<&Binding> {
        self.by_ip.get(&ip)
    }

    /// Every binding (live or ended), in no particular order.
    pub fn bindings(&self) -> impl Iterator<Item = (Ipv4Addr, &Binding)> {
        self.by_ip.iter().map(|(ip, b)| (*ip, b))
    }

    /// Whether `ip`'s binding was last merged from the other server of a
    /// pair (its end carries the lead of lazy updates, see
    /// [`crate::peer_holds`]).
    pub fn is_replica(&self, ip: Ipv4Addr) -> bool {
        self.replica.contains(&ip)
    }

    /// The address `mac` was last bound or offered, when that binding is
    /// still its own (live or ended).
    pub fn last_address(&self, mac: Mac) -> Option<Ipv4Addr> {
        let ip = *self.last_ip.get(&mac)?;
        self.bound_to(mac, ip).then_some(ip)
    }

    /// Size of the dynamic pool.
    pub fn pool_size(&self) -> usize {
        self.pool_size
    }

    /// Whether `mac` could take `ip` at `now` without taking it from anyone.
    fn usable_by(&self, mac: Mac, ip: Ipv4Addr, now: u64) -> bool {
        if !self.allowed(mac, ip) {
            return false;
        }
        match self.by_ip.get(&ip) {
            None => true,
            Some(b) if b.mac == mac => true,
            Some(b) => !b.live(now),
        }
    }

    fn set(&mut self, ip: Ipv4Addr, b: Binding) {
        if let Some(old) = self.by_ip.insert(ip, b) {
            self.by_end.remove(&(old.ends(), ip));
        }
        self.by_end.insert((b.ends(), ip));
        self.never_bound.remove(&ip);
        if b.mac != DECLINED_MAC {
            self.last_ip.insert(b.mac, ip);
        }
    }

    fn remove(&mut self, ip: Ipv4Addr) {
        if let Some(old) = self.by_ip.remove(&ip) {
            self.by_end.remove(&(old.ends(), ip));
        }
        if self.in_pool(ip) {
            self.never_bound.insert(ip);
        }
    }

    /// The address `mac` holds now (bound or offered, live), if any.
    pub fn current(&self, mac: Mac, now: u64) -> Option<Ipv4Addr> {
        let ip = *self.last_ip.get(&mac)?;
        let b = self.by_ip.get(&ip)?;
        (b.mac == mac && b.live(now)).then_some(ip)
    }

    /// Chooses an address for a DISCOVER and holds it for the client.
    pub fn offer(
        &mut self,
        mac: Mac,
        requested: Option<Ipv4Addr>,
        now: u64,
    ) -> Result<Ipv4Addr, Refusal> {
        self.offer_probed(mac, requested, now).map(|(ip, _)| ip)
    }

    /// [`LeaseTable::offer`], also saying whether the address should be
    /// probed before it is offered: true unless this table already holds a
    /// binding of it for this client (bound, ended or offered). A pool
    /// address never bound here, bound to another client whose lease ended,
    /// or whose record was lost may be in use by a host this table does not
    /// know of (a restart without the store, a dropped record, a takeover
    /// of the other server's half, a statically configured host).
    pub fn offer_probed(
        &mut self,
        mac: Mac,
        requested: Option<Ipv4Addr>,
        now: u64,
    ) -> Result<(Ipv4Addr, bool), Refusal> {
        let ip = self.choose(mac, requested, now)?;
        let probe = !matches!(
            self.by_ip.get(&ip),
            Some(b) if b.mac == mac && matches!(b.state, State::Bound { .. } | State::Offered { .. })
        );
        let bound_to_client = matches!(
            self.by_ip.get(&ip),
            Some(b) if b.mac == mac && matches!(b.state, State::Bound { .. }) && b.live(now)
        );
        if !bound_to_client {
            self.set(
                ip,
                Binding {
                    mac,
                    state: State::Offered {
                        until: now + OFFER_HOLD_SECONDS,
                    },
                },
            );
        }
        Ok((ip, probe))
    }

    /// Someone answered the conflict probe of `ip`, offered to `mac`: the
    /// address is in use by a host this table does not know of. It is held
    /// back for the DECLINE quarantine time (RFC 2131 §3.1.5: marked not
    /// available) as an address whose binding is unknown
    /// ([`State::Lost`]): offered to nobody, but given to a client that
    /// asks for it by REQUEST, which is most likely the host that answered
    /// (a client whose lease record this server lost). Kept in memory only:
    /// after a restart the address has no binding and is probed again.
    /// Returns whether it did (false when `ip` is no longer offered to
    /// `mac`).
    pub fn probe_answered(&mut self, mac: Mac, ip: Ipv4Addr, now: u64) -> bool {
        match self.by_ip.get(&ip) {
            Some(b) if b.mac == mac && matches!(b.state, State::Offered { .. }) => {
                let until = now + u64::from(self.config.decline_quarantine_seconds);
                self.set(
                    ip,
                    Binding {
                        mac: DECLINED_MAC,
                        state: State::Lost { until },
                    },
                );
                true
            }
            _ => false,
        }
    }

    fn choose(&self, mac: Mac, requested: Option<Ipv4Addr>, now: u64) -> Result<Ipv4Addr, Refusal> {
        if let Some(r) = self.config.reservations.get(&mac) {
            return if self.usable_by(mac, r.ip, now) {
                Ok(r.ip)
            } else {
                Err(self.reserved_in_use(r.ip))
            };
        }
        if let Some(&prev) = self.last_ip.get(&mac)
            && self.usable_by(mac, prev, now)
            && !matches!(self.by_ip.get(&prev), Some(b) if b.mac == DECLINED_MAC)
            && (self.may_allocate(prev) || self.bound_to(mac, prev))
        {
            return Ok(prev);
        }
        if let Some(req) = requested
            && self.usable_by(mac, req, now)
            && (self.may_allocate(req) || self.bound_to(mac, req))
        {
            return Ok(req);
        }
        // Never-bound addresses, then reclaim: the pool address whose
        // binding ended longest ago (the first ended entry of the end index
        // that is in the pool). In a pair, from this server's half; when
        // taking over, then from the other half.
        let halves: &[bool] = match self.share {
            None => &[true],
            Some(s) if s.takes_over() => &[true, false],
            Some(_) => &[true],
        };
        for &own in halves {
            let in_half = |ip: &Ipv4Addr| self.share.is_none_or(|s| s.mine(*ip) == own);
            // A seek into the half, not a scan: the secondary's half starts
            // after every never-bound address of the primary's.
            let first = match self.share {
                None => self.never_bound.first(),
                Some(s) => self.never_bound.range(s.half(own)).next(),
            };
            if let Some(&ip) = first {
                return Ok(ip);
            }
            if let Some(ip) = self
                .by_end
                .iter()
                .take_while(|(end, _)| *end <= now)
                .map(|(_, ip)| *ip)
                .find(|ip| self.in_pool(*ip) && in_half(ip))
            {
                return Ok(ip);
            }
        }
        Err(Refusal::PoolExhausted)
    }

    fn reserved_in_use(&self, ip: Ipv4Addr) -> Refusal {
        Refusal::ReservedAddressInUse {
            ip,
            holder: self.by_ip.get(&ip).map_or(DECLINED_MAC, |b| b.mac),
        }
    }

    /// Commits `ip` to `mac` for the configured lease time (REQUEST in any
    /// state). The caller persists the returned lease before the ACK.
    pub fn commit(&mut self, mac: Mac, ip: Ipv4Addr, now: u64) -> Result<Commit, Refusal> {
        if !self.allowed(mac, ip) {
            return Err(Refusal::NotAllowed);
        }
        let lost = matches!(self.by_ip.get(&ip), Some(b) if matches!(b.state, State::Lost { .. }));
        if !lost && !self.usable_by(mac, ip, now) {
            if self.config.reservations.contains_key(&mac) {
                return Err(self.reserved_in_use(ip));
            }
            return Err(Refusal::InUse);
        }
        // In a pair, a pool address of the other half is committed only to
        // a client that already has it (the other server may be offering
        // it right now).
        if self.in_pool(ip) && !self.may_allocate(ip) && !self.bound_to(mac, ip) {
            return Err(Refusal::NotAllowed);
        }
        let superseded =
            self.last_ip.get(&mac).copied().filter(|&prev| {
                prev != ip && matches!(self.by_ip.get(&prev), Some(b) if b.mac == mac)
            });
        if let Some(prev) = superseded {
            self.remove(prev);
        }
        let expires = now + u64::from(self.config.lease_seconds);
        if self.share.is_some_and(|s| s.takes_over() && !s.mine(ip)) && self.in_pool(ip) {
            self.took_over.insert(ip);
        }
        self.touch(ip, false);
        self.set(
            ip,
            Binding {
                mac,
                state: State::Bound { expires },
            },
        );
        Ok(Commit {
            lease: StoredLease {
                ip,
                mac,
                expires_unix: expires,
            },
            superseded,
        })
    }

    /// RELEASE: ends the lease of `ip` at `now` when `mac` holds it.
    /// Returns whether it did. The address stays the client's as an ended
    /// lease: others get it only after every never-used address, and the
    /// client gets it back when it returns.
    pub fn release(&mut self, mac: Mac, ip: Ipv4Addr, now: u64) -> bool {
        match self.by_ip.get(&ip) {
            Some(b) if b.mac == mac && b.mac != DECLINED_MAC => {
                self.set(
                    ip,
                    Binding {
                        mac,
                        state: State::Bound { expires: now },
                    },
                );
                true
            }
            _ => false,
        }
    }

    /// Frees `ip` when `mac` holds it, forgetting the binding (a refused
    /// address revoked from its client). Returns whether it did.
    pub fn revoke(&mut self, mac: Mac, ip: Ipv4Addr) -> bool {
        match self.by_ip.get(&ip) {
            Some(b) if b.mac == mac => {
                self.remove(ip);
                true
            }
            _ => false,
        }
    }

    /// DECLINE: quarantines `ip` when `mac` holds it (offered or bound).
    /// Returns the quarantine record to persist.
    pub fn decline(&mut self, mac: Mac, ip: Ipv4Addr, now: u64) -> Option<StoredLease> {
        match self.by_ip.get(&ip) {
            Some(b) if b.mac == mac => {
                let until = now + u64::from(self.config.decline_quarantine_seconds);
                self.set(
                    ip,
                    Binding {
                        mac: DECLINED_MAC,
                        state: State::Declined { until },
                    },
                );
                Some(StoredLease {
                    ip,
                    mac: DECLINED_MAC,
                    expires_unix: until,
                })
            }
            _ => None,
        }
    }

    /// The client chose another server (REQUEST with a foreign server id):
    /// drop our uncommitted offer.
    pub fn withdraw_offer(&mut self, mac: Mac) {
        if let Some(&ip) = self.last_ip.get(&mac)
            && matches!(self.by_ip.get(&ip), Some(b) if b.mac == mac && matches!(b.state, State::Offered { .. }))
        {
            self.remove(ip);
        }
    }

    /// Whether a record the other server sent fits this server's config:
    /// a commit names an address the MAC may hold (its reservation, or a
    /// pool address: never the gateway, a server's address, an excluded
    /// address or another client's reservation) and ends no later than a
    /// full lease (a quarantine: no later than a full quarantine) from now,
    /// with [`PEER_EXPIRY_SLACK`] for clocks and transit. The reason when
    /// it does not.
    pub fn check_peer_record(&self, l: &StoredLease, now: u64) -> Result<(), &'static str> {
        let c = &self.config;
        if !c.subnet.contains(&l.ip) {
            return Err("address outside the subnet");
        }
        if l.ip == c.server_ip
            || c.gateway == Some(l.ip)
            || c.peer.as_ref().is_some_and(|p| p.server_ip == l.ip)
        {
            return Err("a server or gateway address");
        }
        if l.mac == DECLINED_MAC {
            if !self.in_pool(l.ip) {
                return Err("quarantine of an address outside the pool");
            }
            let most = u64::from(c.decline_quarantine_seconds) + PEER_EXPIRY_SLACK;
            if l.expires_unix > now.saturating_add(most) {
                return Err("quarantine longer than the configured one");
            }
            return Ok(());
        }
        if l.mac.0[0] & 1 == 1 {
            return Err("group (multicast or broadcast) hardware address");
        }
        if !self.allowed(l.mac, l.ip) {
            return Err(if c.reservations.contains_key(&l.mac) {
                "not the reservation of this MAC"
            } else if c.reservations.values().any(|r| r.ip == l.ip) {
                "reserved for another client"
            } else {
                "outside the pool"
            });
        }
        // A lease plus the lead of lazy updates (see crate::peer_holds).
        let most = u64::from(c.lease_seconds)
            + crate::peer_holds::lead(c.lease_seconds)
            + PEER_EXPIRY_SLACK;
        if l.expires_unix > now.saturating_add(most) {
            return Err("expiry later than two lease times from now");
        }
        Ok(())
    }

    /// The half rule for a record from the other server: a binding of an
    /// address of this server's half is taken only when this table already
    /// binds that address to the same client (a renewal through the other
    /// server), when the other server says it took over (`peer_took_over`),
    /// or while this server syncs after its start (its own bindings may
    /// come back from the other server). While both serve, only this
    /// server hands out its half: anything else is a forgery or a bug.
    pub fn check_peer_half(
        &self,
        l: &StoredLease,
        peer_took_over: bool,
    ) -> Result<(), &'static str> {
        let Some(s) = self.share else { return Ok(()) };
        if !self.in_pool(l.ip) || !s.mine(l.ip) || peer_took_over || s.state == PairState::Syncing {
            return Ok(());
        }
        if self.bound_to(l.mac, l.ip) {
            return Ok(());
        }
        Err("a new binding in the receiving half of the pool")
    }

    /// Whether this server's live binding of `ip` (an address of the other
    /// server's half, ending at `ends`) may have been superseded by the
    /// other server, which alone hands out its half: this server made it
    /// while taking over; or it was last updated before contact was last
    /// lost (the other server may have released and given the address out
    /// meanwhile, a release this server never saw); or it is a replica
    /// whose client's own expiry (its end less the lead of lazy updates)
    /// may have passed. A binding that is none of these belongs to a live
    /// client both servers know of: a record giving it to another client is
    /// refused whoever sends it.
    fn may_be_superseded(&self, ip: Ipv4Addr, ends: u64, now: u64) -> bool {
        let lead = crate::peer_holds::lead(self.config.lease_seconds);
        self.took_over.contains(&ip)
            || self.touched.get(&ip).copied().unwrap_or(0) < self.outage
            || (self.replica.contains(&ip) && ends.saturating_sub(lead) <= now)
    }

    /// Merges a lease the other server of a pair committed (a lease update
    /// or its snapshot), already checked with [`LeaseTable::check_peer_record`].
    /// A renewal by the client that holds the address here moves its
    /// expiry. Returns the lease to persist, None when this table already
    /// knew it (or later), or the conflict when another live client holds
    /// the address here.
    ///
    /// A conflict between two live clients is settled the same way on both
    /// servers, so the two stores converge: the binding made by the server
    /// whose half of the pool holds the address is kept (only that server
    /// allocates it while both are up; the other one can only have given it
    /// out later, during a takeover, so its binding is the younger). On the
    /// other half the other server's binding replaces this one when this
    /// one may have been superseded (see `may_be_superseded`; returned in
    /// [`Merged::Replaced`]: that client gets a NAK at its next renewal); a
    /// record that contradicts the live binding of a client both servers
    /// know of is refused.
    pub fn merge_peer_commit(&mut self, l: StoredLease, now: u64) -> Result<Merged, PeerConflict> {
        let state = if l.mac == DECLINED_MAC {
            State::Declined {
                until: l.expires_unix,
            }
        } else {
            State::Bound {
                expires: l.expires_unix,
            }
        };
        let mut replaced = None;
        match self.by_ip.get(&l.ip).copied() {
            // The same holder: a renewal moves the expiry forward, never back.
            Some(b)
                if b.mac == l.mac
                    && std::mem::discriminant(&b.state) == std::mem::discriminant(&state)
                    && b.ends() >= l.expires_unix =>
            {
                // Both servers agree on it now.
                self.touch(l.ip, self.replica.contains(&l.ip));
                return Ok(Merged::Known);
            }
            Some(b)
                if b.mac != l.mac
                    && b.mac != DECLINED_MAC
                    && matches!(b.state, State::Bound { .. })
                    && b.live(now)
                    && l.expires_unix > now =>
            {
                let theirs_wins = self.share.is_some_and(|s| !s.mine(l.ip))
                    && self.may_be_superseded(l.ip, b.ends(), now);
                if !theirs_wins {
                    return Err(PeerConflict {
                        theirs: l,
                        holder: b.mac,
                        held_until: b.ends(),
                    });
                }
                replaced = Some(b.mac);
            }
            _ => {}
        }
        // The client's other live offer here, if any, is superseded.
        if l.mac != DECLINED_MAC
            && let Some(&prev) = self.last_ip.get(&l.mac)
            && prev != l.ip
            && matches!(self.by_ip.get(&prev), Some(b) if b.mac == l.mac && matches!(b.state, State::Offered { .. }))
        {
            self.remove(prev);
        }
        self.took_over.remove(&l.ip);
        self.touch(l.ip, true);
        self.set(l.ip, Binding { mac: l.mac, state });
        Ok(match replaced {
            Some(loser) => Merged::Replaced { lease: l, loser },
            None => Merged::Stored(l),
        })
    }

    /// Merges a release the other server recorded for `l` (the binding it
    /// held: address, MAC, expiry). It applies only when it names the
    /// binding held here: the same MAC and the same expiry (within
    /// [`RELEASE_EXPIRY_TOLERANCE`] seconds, for the clocks); the lease then
    /// ends now (kept as an ended lease, like a RELEASE here). Returns
    /// whether it changed anything, or why it was refused.
    pub fn merge_peer_release(&mut self, l: StoredLease, now: u64) -> Result<bool, &'static str> {
        let Some(b) = self.by_ip.get(&l.ip).copied() else {
            return Ok(false);
        };
        if b.mac != l.mac {
            return if b.live(now) {
                Err("release of an address another client holds")
            } else {
                Ok(false)
            };
        }
        if b.ends() <= now {
            return Ok(false);
        }
        if b.ends().abs_diff(l.expires_unix) > RELEASE_EXPIRY_TOLERANCE {
            return Err("release names another expiry than the binding held");
        }
        if l.mac == DECLINED_MAC {
            self.remove(l.ip);
        } else {
            self.set(
                l.ip,
                Binding {
                    mac: l.mac,
                    state: State::Bound { expires: now },
                },
            );
        }
        Ok(true)
    }

    /// Quarantines `ip` because the lease log lost the record that said who
    /// held it (a damaged record): it is offered to nobody until `until`
    /// (when that lease would have ended at the latest), but a client that
    /// asks for it by REQUEST (its owner renewing or rebooting) gets it,
    /// and `suspected` (the MAC the damaged record seemed to name) gets it
    /// back on DISCOVER too. Returns whether it did (an address with a live
    /// binding, or outside the pool, is left alone).
    pub fn quarantine_lost(
        &mut self,
        ip: Ipv4Addr,
        suspected: Option<Mac>,
        until: u64,
        now: u64,
    ) -> bool {
        if !self.in_pool(ip) || self.by_ip.get(&ip).is_some_and(|b| b.live(now)) {
            return false;
        }
        let mac = suspected
            .filter(|m| *m != DECLINED_MAC)
            .unwrap_or(DECLINED_MAC);
        self.set(
            ip,
            Binding {
                mac,
                state: State::Lost { until },
            },
        );
        true
    }

    /// Ends the hold-back of `ip` made by a probe answer
    /// ([`LeaseTable::probe_answered`]) when it still holds: the address is
    /// free again (the fallback of a spent pool). Returns whether it did.
    pub fn clear_probe_held(&mut self, ip: Ipv4Addr, now: u64) -> bool {
        if matches!(self.by_ip.get(&ip), Some(b) if b.mac == DECLINED_MAC && matches!(b.state, State::Lost { until } if until > now))
        {
            self.remove(ip);
            return true;
        }
        false
    }

    /// Ends the quarantine of a lost address early (a probe found nobody
    /// answering for it). Returns whether it did.
    pub fn clear_lost(&mut self, ip: Ipv4Addr) -> bool {
        if matches!(self.by_ip.get(&ip), Some(b) if matches!(b.state, State::Lost { .. })) {
            self.remove(ip);
            return true;
        }
        false
    }

    /// Drops offers whose hold ended and quarantines that ran out, so the
    /// addresses return to the never-bound set. Expired leases are kept as
    /// reclaimable bindings (their owner may come back for them).
    pub fn reclaim(&mut self, now: u64) -> usize {
        let done: Vec<Ipv4Addr> = self
            .by_end
            .iter()
            .take_while(|(end, _)| *end <= now)
            .map(|(_, ip)| *ip)
            .filter(|ip| {
                matches!(
                    self.by_ip.get(ip).map(|b| b.state),
                    Some(State::Offered { .. } | State::Declined { .. } | State::Lost { .. })
                )
            })
            .collect();
        for ip in &done {
            self.remove(*ip);
        }
        done.len()
    }

    /// Counts for the metrics.
    pub fn stats(&self, now: u64) -> Stats {
        let pool_size = self.pool_size;
        let mut s = Stats {
            pool_size,
            ..Stats::default()
        };
        let mut held_in_pool = 0;
        for (ip, b) in &self.by_ip {
            if !b.live(now) {
                continue;
            }
            match b.state {
                State::Offered { .. } => s.offered += 1,
                State::Bound { .. } => s.active += 1,
                State::Declined { .. } => s.declined += 1,
                State::Lost { .. } => s.lost += 1,
            }
            if self.in_pool(*ip) {
                held_in_pool += 1;
            }
        }
        s.free = pool_size.saturating_sub(held_in_pool);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::yaml::{self as fixture, DOC_NET, WORKER_0};

    /// Four pool addresses (one excluded) and worker-0's reservation.
    fn yaml() -> String {
        fixture::yaml(
            DOC_NET,
            &[
                "range: { start: 192.0.2.100, end: 192.0.2.103 }",
                "excluded: [192.0.2.101]",
                "lease_seconds: 600",
                "decline_quarantine_seconds: 100",
                WORKER_0,
            ],
        )
    }

    fn table() -> LeaseTable {
        LeaseTable::new(Arc::new(Config::from_yaml(&yaml()).unwrap()))
    }

    fn mac(n: u8) -> Mac {
        Mac([2, 0, 0, 0, 0, n])
    }

    fn ip(n: u8) -> Ipv4Addr {
        Ipv4Addr::new(192, 0, 2, n)
    }

    #[test]
    fn pool_skips_excluded_and_infra_addresses() {
        let mut t = table();
        let got: Vec<_> = (1..=3).map(|n| t.offer(mac(n), None, 0).unwrap()).collect();
        assert_eq!(got, vec![ip(100), ip(102), ip(103)]);
        assert_eq!(t.offer(mac(4), None, 0), Err(Refusal::PoolExhausted));
    }

    #[test]
    fn offers_are_held_so_concurrent_clients_never_share() {
        let mut t = table();
        let a = t.offer(mac(1), None, 0).unwrap();
        let b = t.offer(mac(2), Some(a), 1).unwrap();
        assert_ne!(a, b);
        // The hold ends: the address can be offered to someone else.
        let c = t.offer(mac(3), Some(a), OFFER_HOLD_SECONDS + 1).unwrap();
        assert_eq!(c, a);
        assert_eq!(
            t.commit(mac(1), a, OFFER_HOLD_SECONDS + 2),
            Err(Refusal::InUse)
        );
    }

    #[test]
    fn reserved_mac_gets_its_address_and_nothing_else() {
        let mut t = table();
        let r = Mac::parse("02:00:00:00:00:aa").unwrap();
        assert_eq!(t.offer(r, Some(ip(100)), 0), Ok(ip(50)));
        assert_eq!(t.commit(r, ip(100), 0), Err(Refusal::NotAllowed));
        assert!(t.commit(r, ip(50), 0).is_ok());
        // Nobody else may take the reserved address.
        assert_eq!(t.commit(mac(1), ip(50), 0), Err(Refusal::NotAllowed));
    }

    #[test]
    fn returning_client_gets_its_previous_address_after_expiry() {
        let mut t = table();
        let a = t.offer(mac(1), None, 0).unwrap();
        t.commit(mac(1), a, 0).unwrap();
        // Others take the rest of the pool meanwhile.
        t.offer(mac(2), None, 10).unwrap();
        let now = 10_000; // long after expiry
        assert_eq!(t.offer(mac(1), None, now), Ok(a));
    }

    #[test]
    fn expired_leases_are_reclaimed_when_the_pool_is_full() {
        let mut t = table();
        for n in 1..=3 {
            let a = t.offer(mac(n), None, 0).unwrap();
            t.commit(mac(n), a, 0).unwrap();
        }
        assert_eq!(t.offer(mac(9), None, 599), Err(Refusal::PoolExhausted));
        let got = t.offer(mac(9), None, 601).unwrap();
        assert!(t.in_pool(got));
        assert_eq!(t.stats(601).active, 0);
    }

    /// The end index agrees with the table: after any sequence of offers,
    /// commits, releases, declines and reclaims, the index holds exactly
    /// one entry per binding, and the reclaim choice is the pool address
    /// whose binding ended longest ago (what a scan of the table finds).
    #[test]
    fn end_index_matches_a_scan_of_the_table() {
        use proptest::prelude::*;
        let ops = proptest::collection::vec((0u8..5, 1u8..8, 0u64..2000), 0..80);
        proptest!(ProptestConfig::with_cases(500), |(ops in ops)| {
            let mut t = table();
            let mut now = 0;
            for (op, m, dt) in ops {
                now += dt;
                match op {
                    0 => { let _ = t.offer(mac(m), None, now); }
                    1 => { if let Some(ip) = t.current(mac(m), now) { let _ = t.commit(mac(m), ip, now); } }
                    2 => { if let Some(ip) = t.current(mac(m), now) { t.release(mac(m), ip, now); } }
                    3 => { if let Some(ip) = t.current(mac(m), now) { t.decline(mac(m), ip, now); } }
                    _ => { t.reclaim(now); }
                }
                let want: BTreeSet<(u64, Ipv4Addr)> =
                    t.by_ip.iter().map(|(ip, b)| (b.ends(), *ip)).collect();
                prop_assert_eq!(&t.by_end, &want);
                let scan = t
                    .by_ip
                    .iter()
                    .filter(|(ip, b)| !b.live(now) && t.in_pool(**ip))
                    .min_by_key(|(ip, b)| (b.ends(), **ip))
                    .map(|(ip, _)| *ip);
                let indexed = t
                    .by_end
                    .iter()
                    .take_while(|(end, _)| *end <= now)
                    .map(|(_, ip)| *ip)
                    .find(|ip| t.in_pool(*ip));
                prop_assert_eq!(scan, indexed);
            }
        });
    }

    #[test]
    fn commit_checks_owner_and_pool() {
        let mut t = table();
        assert_eq!(t.commit(mac(1), ip(101), 0), Err(Refusal::NotAllowed));
        assert_eq!(t.commit(mac(1), ip(2), 0), Err(Refusal::NotAllowed));
        assert_eq!(
            t.commit(mac(1), Ipv4Addr::new(10, 0, 0, 1), 0),
            Err(Refusal::NotAllowed)
        );
        let c = t.commit(mac(1), ip(102), 0).unwrap();
        assert_eq!(c.lease.expires_unix, 600);
        assert_eq!(t.commit(mac(2), ip(102), 5), Err(Refusal::InUse));
        // Renewal extends.
        assert_eq!(
            t.commit(mac(1), ip(102), 300).unwrap().lease.expires_unix,
            900
        );
    }

    #[test]
    fn moving_to_a_new_address_releases_the_old_one() {
        let mut t = table();
        t.commit(mac(1), ip(102), 0).unwrap();
        let c = t.commit(mac(1), ip(103), 1).unwrap();
        assert_eq!(c.superseded, Some(ip(102)));
        assert!(t.get(ip(102)).is_none());
    }

    #[test]
    fn release_frees_only_the_owners_address() {
        let mut t = table();
        t.commit(mac(1), ip(100), 0).unwrap();
        assert!(!t.release(mac(2), ip(100), 0));
        assert!(t.release(mac(1), ip(100), 0));
        assert_eq!(t.stats(1).free, 3);
    }

    #[test]
    fn released_address_is_kept_for_its_client_while_never_used_ones_remain() {
        let mut t = table();
        let a = t.offer(mac(1), None, 0).unwrap();
        t.commit(mac(1), a, 0).unwrap();
        assert!(t.release(mac(1), a, 10));
        assert_eq!(t.current(mac(1), 10), None, "released: not held");
        // Other clients get the never-used addresses first.
        let b = t.offer(mac(2), None, 11).unwrap();
        t.commit(mac(2), b, 11).unwrap();
        assert_ne!(b, a);
        // The client that released comes back and gets its address again.
        assert_eq!(t.offer(mac(1), None, 20), Ok(a));
        t.commit(mac(1), a, 20).unwrap();
        assert!(t.release(mac(1), a, 30));
        // With no never-used address left, the released one is reclaimed.
        let c = t.offer(mac(3), None, 31).unwrap();
        t.commit(mac(3), c, 31).unwrap();
        assert_ne!(c, a);
        assert_eq!(t.offer(mac(4), None, 32), Ok(a));
    }

    #[test]
    fn a_moved_reservation_releases_the_old_address_at_once() {
        let mut t = table();
        let r = Mac::parse("02:00:00:00:00:aa").unwrap();
        t.commit(r, ip(50), 0).unwrap();
        let yaml = yaml().replace("ip: 192.0.2.50", "ip: 192.0.2.60");
        let moved = t.reconfigure(Arc::new(Config::from_yaml(&yaml).unwrap()));
        assert_eq!(
            moved,
            vec![Moved {
                mac: r,
                released: ip(50),
                reserved: ip(60)
            }]
        );
        assert!(t.get(ip(50)).is_none());
        assert_eq!(t.offer(r, None, 1), Ok(ip(60)));
    }

    #[test]
    fn a_reservation_for_a_mac_with_a_dynamic_lease_releases_that_lease_at_once() {
        let mut t = table();
        t.commit(mac(1), ip(100), 0).unwrap();
        // The address becomes mac(2)'s reservation, mac(1) gets one elsewhere.
        let yaml = yaml().replace(
            "  - { mac: \"02:00:00:00:00:aa\", ip: 192.0.2.50, hostname: worker-0 }",
            "  - { mac: \"02:00:00:00:00:01\", ip: 192.0.2.51 }\n  - { mac: \"02:00:00:00:00:aa\", ip: 192.0.2.50, hostname: worker-0 }",
        );
        let moved = t.reconfigure(Arc::new(Config::from_yaml(&yaml).unwrap()));
        assert_eq!(moved.len(), 1, "{moved:?}");
        assert_eq!(moved[0].released, ip(100));
        // Another client gets the freed pool address right away.
        assert_eq!(t.offer(mac(2), None, 1), Ok(ip(100)));
    }

    #[test]
    fn a_reserved_address_held_by_another_client_names_the_holder() {
        let mut t = table();
        t.commit(mac(1), ip(100), 0).unwrap();
        // mac(2) gets 192.0.2.100 reserved while mac(1) holds it dynamically.
        let yaml = yaml()
            .replace("02:00:00:00:00:aa", "02:00:00:00:00:02")
            .replace("ip: 192.0.2.50", "ip: 192.0.2.100");
        let moved = t.reconfigure(Arc::new(Config::from_yaml(&yaml).unwrap()));
        assert!(moved.is_empty(), "mac(1) has no reservation: {moved:?}");
        let held = Refusal::ReservedAddressInUse {
            ip: ip(100),
            holder: mac(1),
        };
        assert_eq!(t.offer(mac(2), None, 1), Err(held));
        assert_eq!(t.commit(mac(2), ip(100), 1), Err(held));
    }

    #[test]
    fn an_address_without_a_binding_of_the_client_is_probed_before_it_is_offered() {
        let mut t = table();
        // Never bound: probe.
        let (a, probe) = t.offer_probed(mac(1), None, 0).unwrap();
        assert!(probe);
        // The same client asking again while the offer is held: no probe.
        assert_eq!(t.offer_probed(mac(1), None, 1), Ok((a, false)));
        t.commit(mac(1), a, 2).unwrap();
        // Its own binding, live or ended: no probe.
        assert_eq!(t.offer_probed(mac(1), None, 3), Ok((a, false)));
        assert_eq!(t.offer_probed(mac(1), None, 10_000), Ok((a, false)));
        // Another client's ended lease, reclaimed: probe (its old holder may
        // still use it).
        let mut full = table();
        let held: Vec<_> = (1..=3)
            .map(|n| {
                let ip = full.offer(mac(n), None, 0).unwrap();
                full.commit(mac(n), ip, 0).unwrap();
                ip
            })
            .collect();
        let (b, probe) = full.offer_probed(mac(9), None, 700).unwrap();
        assert!(held.contains(&b));
        assert!(probe);
    }

    #[test]
    fn an_address_whose_probe_was_answered_is_held_back_and_the_client_gets_another() {
        let mut t = table();
        let (a, _) = t.offer_probed(mac(1), None, 0).unwrap();
        assert!(t.probe_answered(mac(1), a, 1));
        assert_eq!(t.stats(2).lost, 1);
        let (b, probe) = t.offer_probed(mac(1), None, 2).unwrap();
        assert_ne!(a, b);
        assert!(probe);
        // Nobody is offered it...
        let (c, _) = t.offer_probed(mac(3), None, 2).unwrap();
        assert_ne!(c, a);
        // ...but the host using it (a client whose record was lost) keeps
        // it when it asks by REQUEST.
        assert!(t.commit(mac(4), a, 3).is_ok());
        // Only an address still offered to that client is held back.
        assert!(!t.probe_answered(mac(2), b, 3));
        t.commit(mac(1), b, 3).unwrap();
        assert!(!t.probe_answered(mac(1), b, 4));
    }

    #[test]
    fn a_held_back_probed_address_returns_after_the_quarantine() {
        let mut t = table();
        let (a, _) = t.offer_probed(mac(1), None, 0).unwrap();
        assert!(t.probe_answered(mac(1), a, 1));
        t.reclaim(100);
        assert_eq!(t.stats(100).lost, 1);
        t.reclaim(101);
        assert_eq!(t.stats(101).lost, 0);
        assert_eq!(t.offer(mac(2), None, 101), Ok(a));
    }

    #[test]
    fn declined_address_is_quarantined_then_returns() {
        let mut t = table();
        let a = t.offer(mac(1), None, 0).unwrap();
        t.commit(mac(1), a, 0).unwrap();
        let q = t.decline(mac(1), a, 10).unwrap();
        assert_eq!(q.mac, DECLINED_MAC);
        assert_eq!(q.expires_unix, 110);
        assert_eq!(t.stats(20).declined, 1);
        // The decliner does not get it back while quarantined.
        assert_ne!(t.offer(mac(1), None, 20).unwrap(), a);
        assert_eq!(t.commit(mac(2), a, 50), Err(Refusal::InUse));
        t.reclaim(111);
        assert_eq!(t.stats(111).declined, 0);
        assert!(t.commit(mac(2), a, 111).is_ok());
    }

    #[test]
    fn store_recovery_restores_bindings_and_quarantine() {
        let cfg = Arc::new(Config::from_yaml(&yaml()).unwrap());
        let stored = [
            StoredLease {
                ip: ip(100),
                mac: mac(1),
                expires_unix: 1000,
            },
            StoredLease {
                ip: ip(102),
                mac: DECLINED_MAC,
                expires_unix: 1000,
            },
        ];
        let mut t = LeaseTable::from_store(cfg, &stored);
        assert_eq!(t.current(mac(1), 10), Some(ip(100)));
        assert_eq!(t.offer(mac(2), None, 10), Ok(ip(103)));
        assert_eq!(t.offer(mac(3), None, 10), Err(Refusal::PoolExhausted));
    }

    #[test]
    fn reload_changes_reservations_and_pool() {
        let mut t = table();
        t.commit(mac(1), ip(100), 0).unwrap();
        let yaml = yaml().replace("02:00:00:00:00:aa", "02:00:00:00:00:01");
        let moved = t.reconfigure(Arc::new(Config::from_yaml(&yaml).unwrap()));
        assert_eq!(moved.len(), 1);
        // The MAC is now reserved: its pool address is refused, the reservation offered.
        assert_eq!(t.commit(mac(1), ip(100), 1), Err(Refusal::NotAllowed));
        assert_eq!(t.offer(mac(1), None, 1), Ok(ip(50)));
    }

    #[test]
    fn withdrawn_offer_frees_the_address() {
        let mut t = table();
        let a = t.offer(mac(1), None, 0).unwrap();
        t.withdraw_offer(mac(1));
        assert_eq!(t.offer(mac(2), None, 1), Ok(a));
    }

    fn pair_table(role: crate::config::Role) -> LeaseTable {
        // The config reads the token when it is parsed: the file may go
        // with its directory right after.
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "0123456789abcdef0123").unwrap();
        let yaml = format!(
            "{}peer:\n  role: primary\n  server_ip: 192.0.2.5\n  api: \"127.0.0.1:1\"\n  listen: \"127.0.0.1:0\"\n  token_file: {}\n",
            yaml(),
            token.display()
        );
        let mut t = LeaseTable::new(Arc::new(Config::from_yaml(&yaml).unwrap()));
        t.set_pair(Some((role, PairState::LoadBalancing)));
        t
    }

    fn stored(n: u8, m: u8, expires: u64) -> StoredLease {
        StoredLease {
            ip: ip(n),
            mac: mac(m),
            expires_unix: expires,
        }
    }

    #[test]
    fn a_renewal_by_the_holder_moves_the_other_servers_expiry() {
        let mut t = table();
        assert_eq!(
            t.merge_peer_commit(stored(100, 1, 600), 0),
            Ok(Merged::Stored(stored(100, 1, 600)))
        );
        // The same client renews on the other server: stored, no conflict.
        assert_eq!(
            t.merge_peer_commit(stored(100, 1, 900), 300),
            Ok(Merged::Stored(stored(100, 1, 900)))
        );
        assert_eq!(t.get(ip(100)).unwrap().ends(), 900);
        // An older copy never moves it back.
        assert_eq!(
            t.merge_peer_commit(stored(100, 1, 600), 301),
            Ok(Merged::Known)
        );
        assert_eq!(t.get(ip(100)).unwrap().ends(), 900);
    }

    #[test]
    fn a_real_conflict_keeps_the_binding_of_the_half_owner_on_both_servers() {
        use crate::config::Role;
        // 192.0.2.100 is in the primary's half, .103 in the secondary's.
        let mut p = pair_table(Role::Primary);
        let mut s = pair_table(Role::Secondary);
        p.commit(mac(1), ip(100), 0).unwrap();
        // The secondary took over (the two could not see each other) and
        // gave the primary's address to another client.
        s.set_pair_state(PairState::PartnerDown);
        s.commit(mac(2), ip(100), 0).unwrap();
        s.set_pair_state(PairState::LoadBalancing);
        // The primary is sent the secondary's client on its own half: refused.
        let c = p.merge_peer_commit(stored(100, 2, 600), 1).unwrap_err();
        assert_eq!((c.holder, c.theirs.mac), (mac(1), mac(2)));
        assert_eq!(c.ours(), stored(100, 1, 600));
        // The secondary is sent the primary's binding back: replaced there.
        assert_eq!(
            s.merge_peer_commit(c.ours(), 1),
            Ok(Merged::Replaced {
                lease: stored(100, 1, 600),
                loser: mac(2)
            })
        );
        assert_eq!(p.get(ip(100)).unwrap().mac, mac(1));
        assert_eq!(s.get(ip(100)).unwrap().mac, mac(1));
        // The loser is refused at its next renewal.
        assert_eq!(s.commit(mac(2), ip(100), 2), Err(Refusal::InUse));
    }

    #[test]
    fn a_record_contradicting_a_live_binding_not_made_in_a_takeover_is_refused_on_either_half() {
        use crate::config::Role;
        // The secondary holds the primary's client on the primary's half
        // (replicated): a record giving it to another client is refused.
        let mut s = pair_table(Role::Secondary);
        // Contact was lost and came back (a start is an outage too).
        s.set_pair_state(PairState::CommunicationRecovery);
        s.set_pair_state(PairState::LoadBalancing);
        // A replica whose client's own expiry (1100 less the lead of 600)
        // is still ahead.
        s.merge_peer_commit(stored(100, 1, 1100), 0).unwrap();
        let c = s.merge_peer_commit(stored(100, 2, 1100), 1).unwrap_err();
        assert_eq!(c.holder, mac(1));
        assert_eq!(s.get(ip(100)).unwrap().mac, mac(1));
        // Once that expiry may have passed, the half's owner may have given
        // the address out again: its binding is taken.
        assert!(matches!(
            s.merge_peer_commit(stored(100, 2, 1700), 600),
            Ok(Merged::Replaced { .. })
        ));
        // A binding last updated before contact was lost gives way too (a
        // release during the outage never reached this server).
        s.merge_peer_commit(stored(102, 3, 1100), 2).unwrap();
        s.set_pair_state(PairState::CommunicationRecovery);
        s.set_pair_state(PairState::LoadBalancing);
        assert!(matches!(
            s.merge_peer_commit(stored(102, 4, 1100), 3),
            Ok(Merged::Replaced { .. })
        ));
    }

    #[test]
    fn a_new_binding_in_this_servers_half_is_refused_unless_the_other_took_over_or_this_one_syncs()
    {
        use crate::config::Role;
        // .100 is the primary's half.
        let mut p = pair_table(Role::Primary);
        let new = stored(100, 2, 600);
        assert!(p.check_peer_half(&new, false).is_err());
        assert_eq!(p.check_peer_half(&new, true), Ok(()));
        // The other half, or a renewal of a binding held here: fine.
        assert_eq!(p.check_peer_half(&stored(103, 2, 600), false), Ok(()));
        p.commit(mac(2), ip(100), 0).unwrap();
        assert_eq!(p.check_peer_half(&new, false), Ok(()));
        // Syncing after a start: its own bindings come back.
        let mut fresh = pair_table(Role::Primary);
        fresh.set_pair_state(PairState::Syncing);
        assert_eq!(fresh.check_peer_half(&new, false), Ok(()));
    }

    #[test]
    fn peer_records_are_checked_against_the_config() {
        let t = pair_table(crate::config::Role::Primary);
        let now = 1000;
        let ok = stored(100, 1, now + 600);
        assert_eq!(t.check_peer_record(&ok, now), Ok(()));
        let reserved_mac = Mac::parse("02:00:00:00:00:aa").unwrap();
        let bad = [
            StoredLease {
                ip: Ipv4Addr::new(10, 0, 0, 1),
                ..ok
            },
            StoredLease { ip: ip(1), ..ok },   // gateway
            StoredLease { ip: ip(2), ..ok },   // this server
            StoredLease { ip: ip(5), ..ok },   // the other server
            StoredLease { ip: ip(101), ..ok }, // excluded
            StoredLease { ip: ip(50), ..ok },  // another client's reservation
            StoredLease { ip: ip(60), ..ok },  // outside the pool
            StoredLease {
                mac: reserved_mac,
                ..ok
            }, // not its reservation
            StoredLease {
                mac: Mac([0xff; 6]),
                ..ok
            }, // broadcast MAC
            // Later than a lease plus the lead of lazy updates (one more
            // lease time, see crate::peer_holds).
            StoredLease {
                expires_unix: now + 600 + 600 + PEER_EXPIRY_SLACK + 1,
                ..ok
            },
            StoredLease {
                mac: DECLINED_MAC,
                expires_unix: now + 100 + PEER_EXPIRY_SLACK + 1,
                ..ok
            },
        ];
        for l in bad {
            assert!(t.check_peer_record(&l, now).is_err(), "{l:?}");
        }
        let r = StoredLease {
            ip: ip(50),
            mac: reserved_mac,
            ..ok
        };
        assert_eq!(t.check_peer_record(&r, now), Ok(()));
        // A binding sent with the lead: the client's lease plus one lease time.
        let lazy = StoredLease {
            expires_unix: now + 600 + 600 + PEER_EXPIRY_SLACK,
            ..ok
        };
        assert_eq!(t.check_peer_record(&lazy, now), Ok(()));
    }

    #[test]
    fn a_peer_release_applies_only_to_the_binding_held() {
        let mut t = table();
        t.commit(mac(1), ip(100), 0).unwrap();
        // Another MAC, or another expiry: refused, the lease stays.
        assert!(t.merge_peer_release(stored(100, 2, 600), 10).is_err());
        assert!(t.merge_peer_release(stored(100, 1, 9999), 10).is_err());
        assert_eq!(t.current(mac(1), 10), Some(ip(100)));
        // The binding held: released.
        assert_eq!(t.merge_peer_release(stored(100, 1, 600), 10), Ok(true));
        assert_eq!(t.current(mac(1), 11), None);
    }

    #[test]
    fn a_lost_address_is_offered_to_nobody_but_its_owner_gets_it_back() {
        let mut t = table();
        assert!(t.quarantine_lost(ip(100), Some(mac(1)), 600, 0));
        // A new client is not offered it.
        assert_eq!(t.offer(mac(2), None, 1), Ok(ip(102)));
        assert_eq!(t.stats(1).lost, 1);
        // The owner's INIT-REBOOT or renewal gets it, even if the damaged
        // record named another MAC.
        assert!(t.commit(mac(3), ip(100), 2).is_ok());
        assert_eq!(t.current(mac(3), 3), Some(ip(100)));
        // When the lease would have ended, the quarantine ends.
        let mut t = table();
        t.quarantine_lost(ip(100), None, 600, 0);
        t.reclaim(601);
        assert_eq!(t.offer(mac(2), None, 601), Ok(ip(100)));
    }
}
