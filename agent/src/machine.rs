//! The decision logic: who holds which floating address, judged from the
//! adverts the replicas send each other on the VLAN ([`crate::advert`]).
//! It does no I/O: the driver ([`crate::run`]) feeds it the adverts it
//! receives, the readiness of the replica beside it and the time, sends the
//! adverts it writes and changes the interface as it says. Time comes in as
//! arguments, so tests drive it with any clock.
//!
//! Rules (docs/failover.md has the reasoning):
//! - **The VLAN is the witness.** A peer is *alive* while an advert from it
//!   arrived within `dead_after`, judged on the local monotonic clock at
//!   receipt; adverts carry no wall time, so no two clocks are compared.
//! - **Both ways.** A peer is *eligible* when it is alive, says it is ready
//!   and says it hears this replica: a replica that can send but not
//!   receive on its VLAN leg is eligible to nobody, so its peers take its
//!   addresses, and it stays visible to them only as a conflicting claim
//!   the RFC 5227 defence answers.
//! - **One pure owner function.** Every replica computes the owner of each
//!   address with [`Machine::owner`] from its view: the home replica if it
//!   is eligible and either holds it already, or nobody else eligible holds
//!   it, or it has been ready and alive for `home_ready_for`; the home too
//!   when this replica cannot see it but an eligible peer finds it
//!   eligible (a link cut between two replicas only); else the
//!   first eligible replica that already holds it, in rank order after the
//!   home; else the first eligible one in that order. Views that agree give
//!   one holder; views differ only for the time an advert takes, and that
//!   difference is what the make-before-break hand-over covers.
//! - **Make before break.** A holder that is no longer the owner keeps the
//!   address (without announcing or defending it) until the new owner's
//!   advert says it holds it, or for `drain` at most.
//! - **Listen first.** After a start, or a freeze longer than the
//!   address lifetime (the kernel removed the addresses meanwhile), a
//!   replica takes nothing for `dead_after`: its view must first fill. Its
//!   adverts say so, and its peers leave its home address to it meanwhile
//!   (a holder keeps it; nobody else takes it), so a cold start ends with
//!   every address at home and none moved.
//! - **The kernel fences a frozen agent.** A held address has a kernel
//!   lifetime shorter than `dead_after`, pushed out at every tick, so a
//!   frozen agent's addresses leave before its peers take them.

use std::fmt;
use std::time::{Duration, Instant};

use crate::advert::{Advert, MAX_REPLICAS};

/// The timing every replica of a component uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// Time between two adverts (and two ticks).
    pub interval: Duration,
    /// A peer not heard from for this long is dead.
    pub dead_after: Duration,
    /// How long a returning home replica must have been ready and heard
    /// before its address comes back to it from another holder.
    pub home_ready_for: Duration,
    /// How long a former holder keeps an address at most after it stopped
    /// being its owner, when the new owner's advert does not arrive.
    pub drain: Duration,
    /// The kernel lifetime of a held address (whole seconds).
    pub lifetime: Duration,
}

/// A timing that cannot fence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimingError {
    /// A zero interval would spin.
    #[error("--advert-interval must be above zero")]
    ZeroInterval,
    /// A peer must be allowed to miss adverts before it counts as dead, and
    /// the address lifetime (at least 1 s: the kernel counts whole seconds)
    /// must end before the peers take over.
    #[error(
        "--dead-after {dead_after:?} must be at least 1 s plus --advert-interval {interval:?}: a frozen holder's addresses (kernel lifetime, whole seconds) must leave before its peers take them"
    )]
    DeadTooSoon {
        /// The interval given.
        interval: Duration,
        /// The dead-after given.
        dead_after: Duration,
    },
}

impl Timing {
    /// Checks that `interval > 0` and that an address lifetime of whole
    /// seconds fits: `lifetime + interval <= dead_after` with the longest
    /// such lifetime.
    pub fn new(
        interval: Duration,
        dead_after: Duration,
        home_ready_for: Duration,
        drain: Duration,
    ) -> Result<Timing, TimingError> {
        if interval.is_zero() {
            return Err(TimingError::ZeroInterval);
        }
        let secs = dead_after.saturating_sub(interval).as_secs();
        if secs == 0 {
            return Err(TimingError::DeadTooSoon {
                interval,
                dead_after,
            });
        }
        Ok(Timing {
            interval,
            dead_after,
            home_ready_for,
            drain,
            lifetime: Duration::from_secs(secs),
        })
    }

    /// How much longer a returning home waits than its peers do, so they
    /// have begun handing its address over when it takes it.
    pub fn home_margin(&self) -> Duration {
        2 * self.interval
    }
}

impl Default for Timing {
    /// 200 ms adverts, dead after 1.2 s (five missed adverts), home after
    /// 2 s, drain 1 s, address lifetime 1 s.
    fn default() -> Timing {
        Timing {
            interval: Duration::from_millis(200),
            dead_after: Duration::from_millis(1200),
            home_ready_for: Duration::from_secs(2),
            drain: Duration::from_secs(1),
            lifetime: Duration::from_secs(1),
        }
    }
}

/// What the driver does to one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetAction {
    /// Add it and announce it (a burst of gratuitous ARPs).
    Add,
    /// It is already on: announce it again (it was being handed over and
    /// stays).
    Announce,
    /// Remove it.
    Remove(DropReason),
}

/// Why an address was removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// The new owner's advert says it holds the address.
    HandedOver,
    /// The drain time ended before the new owner said so (or there is none).
    Drained,
    /// The agent was frozen longer than the address lifetime: the kernel
    /// removed it already; the machine starts over.
    Frozen,
}

impl DropReason {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::HandedOver => "handed_over",
            DropReason::Drained => "drained",
            DropReason::Frozen => "frozen",
        }
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a received advert changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    /// It names this replica's own index: another host runs with the same
    /// home (a configuration error) or the frame looped back.
    #[error("advert with this replica's own index")]
    Own,
    /// It names no configured replica.
    #[error("advert from an unknown replica index")]
    Unknown,
    /// A duplicate or a reordered older advert.
    #[error("duplicate or older advert")]
    Stale,
    /// From an incarnation the sender has already replaced.
    #[error("advert of a replaced incarnation")]
    Retired,
    /// The same incarnation from another MAC.
    #[error("advert from another MAC than its incarnation's")]
    Mac,
    /// From a MAC no single host sends from.
    #[error("advert from a broadcast, multicast or zero MAC")]
    NotAHost,
}

impl Rejected {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Rejected::Own => "own_index",
            Rejected::Unknown => "unknown_index",
            Rejected::Stale => "stale",
            Rejected::Retired => "retired",
            Rejected::Mac => "mac",
            Rejected::NotAHost => "not_a_host",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Off,
    Held,
    Draining { until: Instant },
}

/// What this replica knows of one peer.
#[derive(Debug, Clone, Default)]
struct Peer {
    incarnation: Option<u64>,
    seq: u64,
    mac: [u8; 6],
    heard_at: Option<Instant>,
    alive_since: Option<Instant>,
    ready: bool,
    listening: bool,
    ready_since: Option<Instant>,
    held: u64,
    linked: u64,
    hears_me_since: Option<Instant>,
    /// The incarnation this one replaced, and when: its late frames are
    /// refused for `dead_after`.
    retired: Option<(u64, Instant)>,
}

/// The view and the held addresses of one replica.
#[derive(Debug, Clone)]
pub struct Machine {
    me: usize,
    n: usize,
    timing: Timing,
    group: u64,
    incarnation: u64,
    seq: u64,
    listen_until: Instant,
    last_tick: Option<Instant>,
    ready_since: Option<Instant>,
    peers: Vec<Peer>,
    slots: Vec<Slot>,
    /// A peer came back (or appeared): announce what is held, whatever
    /// neighbours learnt while this replica could not be heard.
    announce_due: bool,
}

/// Too many replicas for the advert's bit sets, or an index out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("replica {me} of {n}: a component has 1 to {max} replicas", max = MAX_REPLICAS)]
pub struct BadReplicas {
    me: usize,
    n: usize,
}

fn bit(i: usize) -> u64 {
    1u64 << i
}

impl Machine {
    /// Replica `me` of `n` (replica `i`'s home is address `i`), of the
    /// component `group`, started at `now` with a random `incarnation`.
    pub fn new(
        me: usize,
        n: usize,
        group: u64,
        incarnation: u64,
        timing: Timing,
        now: Instant,
    ) -> Result<Machine, BadReplicas> {
        if n == 0 || n > MAX_REPLICAS || me >= n {
            return Err(BadReplicas { me, n });
        }
        Ok(Machine {
            me,
            n,
            timing,
            group,
            incarnation,
            seq: 0,
            listen_until: now + timing.dead_after,
            last_tick: None,
            ready_since: None,
            peers: vec![Peer::default(); n],
            slots: vec![Slot::Off; n],
            announce_due: false,
        })
    }

    /// The timing.
    pub fn timing(&self) -> Timing {
        self.timing
    }

    fn alive(&self, j: usize, now: Instant) -> bool {
        self.peers[j]
            .heard_at
            .is_some_and(|t| now.saturating_duration_since(t) < self.timing.dead_after)
    }

    /// Takes in an advert received at `now` from `mac`.
    pub fn receive(&mut self, now: Instant, mac: [u8; 6], a: &Advert) -> Result<(), Rejected> {
        if crate::advert::not_a_host(mac) {
            return Err(Rejected::NotAHost);
        }
        let j = usize::from(a.from);
        if j == self.me {
            return Err(Rejected::Own);
        }
        if j >= self.n {
            return Err(Rejected::Unknown);
        }
        let was_alive = self.alive(j, now);
        let dead_after = self.timing.dead_after;
        let (me, mask) = (self.me, self.mask());
        let p = &mut self.peers[j];
        match p.incarnation {
            Some(inc) if inc == a.incarnation => {
                if a.seq <= p.seq {
                    return Err(Rejected::Stale);
                }
                if mac != p.mac {
                    return Err(Rejected::Mac);
                }
            }
            Some(inc) => {
                if p.retired.is_some_and(|(old, at)| {
                    old == a.incarnation && now.saturating_duration_since(at) < dead_after
                }) {
                    return Err(Rejected::Retired);
                }
                p.retired = Some((inc, now));
            }
            None => {}
        }
        p.incarnation = Some(a.incarnation);
        p.seq = a.seq;
        p.mac = mac;
        if !was_alive {
            p.alive_since = Some(now);
            p.hears_me_since = None;
        }
        p.heard_at = Some(now);
        p.ready = a.ready;
        p.listening = a.listening;
        p.ready_since = a.ready.then(|| {
            now.checked_sub(Duration::from_millis(u64::from(a.ready_for_ms)))
                .unwrap_or(now)
        });
        p.held = a.held & mask;
        p.linked = a.linked & mask;
        p.hears_me_since = if a.heard & bit(me) != 0 {
            p.hears_me_since.or(Some(now))
        } else {
            None
        };
        self.announce_due |= !was_alive;
        Ok(())
    }

    fn mask(&self) -> u64 {
        if self.n == 64 {
            u64::MAX
        } else {
            bit(self.n) - 1
        }
    }

    fn listening(&self, now: Instant) -> bool {
        now < self.listen_until
    }

    /// This replica may hold address `k` (ready, and done listening unless
    /// it holds `k` already).
    fn self_eligible(&self, k: usize, now: Instant) -> bool {
        self.ready_since.is_some() && (!self.listening(now) || self.slots[k] == Slot::Held)
    }

    fn eligible(&self, j: usize, k: usize, now: Instant) -> bool {
        if j == self.me {
            return self.self_eligible(k, now);
        }
        let p = &self.peers[j];
        self.alive(j, now) && p.ready && !p.listening && p.hears_me_since.is_some()
    }

    /// Peer `j` is not eligible here but an eligible peer finds it
    /// eligible: the link between it and this replica is cut one way or
    /// both, and the VLAN still carries it to others (and to workers).
    fn eligible_elsewhere(&self, j: usize, k: usize, now: Instant) -> bool {
        j != self.me
            && !self.eligible(j, k, now)
            && (0..self.n)
                .filter(|&p| p != self.me && p != j && self.eligible(p, k, now))
                .any(|p| self.peers[p].linked & bit(j) != 0)
    }

    /// Peer `j` is alive, ready and still listening after its start: it
    /// will take its home when done, so nobody else takes that meanwhile.
    fn pending(&self, j: usize, now: Instant) -> bool {
        j != self.me && self.alive(j, now) && self.peers[j].ready && self.peers[j].listening
    }

    fn holds(&self, j: usize, k: usize) -> bool {
        if j == self.me {
            self.slots[k] == Slot::Held
        } else {
            self.peers[j].held & bit(k) != 0
        }
    }

    /// Home `j` has been ready and heard both ways long enough to take its
    /// address back from another holder. The replica itself waits
    /// [`Timing::home_margin`] longer than its peers judge it, so that they
    /// hand over first and it never announces against a defending holder.
    fn settled(&self, j: usize, now: Instant) -> bool {
        let h = self.timing.home_ready_for;
        let since = |t: Option<Instant>, need: Duration| {
            t.is_some_and(|t| now.saturating_duration_since(t) >= need)
        };
        if j == self.me {
            let need = h + self.timing.home_margin();
            since(self.ready_since, need)
                && (0..self.n)
                    .filter(|&p| p != self.me && self.alive(p, now))
                    .all(|p| since(self.peers[p].hears_me_since, need))
        } else {
            let p = &self.peers[j];
            since(p.ready_since, h) && since(p.alive_since, h)
        }
    }

    /// The owner of address `k` in this replica's view at `now`, if any
    /// replica is eligible. Pure: every replica with the same view gets the
    /// same answer.
    pub fn owner(&self, k: usize, now: Instant) -> Option<usize> {
        let home = k;
        let eligible = |j| self.eligible(j, k, now);
        let others_hold = (0..self.n).any(|j| j != home && eligible(j) && self.holds(j, k));
        if eligible(home) && (self.holds(home, k) || !others_hold || self.settled(home, now)) {
            return Some(home);
        }
        // The home is up on the VLAN, only not towards this replica: it
        // takes its address in its own view (to it this replica is not
        // eligible), so this one leaves it.
        if self.eligible_elsewhere(home, k, now) {
            return Some(home);
        }
        let ranked = || (1..self.n).map(|r| (k + r) % self.n);
        let holder = ranked().find(|&j| eligible(j) && self.holds(j, k));
        if holder.is_some() || self.pending(home, now) {
            return holder;
        }
        ranked()
            .find(|&j| eligible(j))
            .or_else(|| eligible(home).then_some(home))
    }

    /// One round at `now` with the replica's readiness: what to do to each
    /// address, as `(index, action)`.
    pub fn tick(&mut self, now: Instant, ready: bool) -> Vec<(usize, NetAction)> {
        let mut out = Vec::new();
        if let Some(last) = self.last_tick
            && now.saturating_duration_since(last) > self.timing.lifetime
        {
            // Frozen past the addresses' lifetime: the kernel removed them
            // and the peers may have taken them. Start over.
            for (k, s) in self.slots.iter_mut().enumerate() {
                if *s != Slot::Off {
                    *s = Slot::Off;
                    out.push((k, NetAction::Remove(DropReason::Frozen)));
                }
            }
            self.listen_until = now + self.timing.dead_after;
            self.ready_since = None;
        }
        self.last_tick = Some(now);
        if !ready {
            self.ready_since = None;
        } else if self.ready_since.is_none() {
            self.ready_since = Some(now);
        }
        let announce_due = std::mem::take(&mut self.announce_due);
        for k in 0..self.n {
            let owner = self.owner(k, now);
            let mine = owner == Some(self.me);
            match self.slots[k] {
                // Kept through a split or an isolation: the neighbours may
                // have learnt another holder meanwhile.
                Slot::Held if mine && announce_due => {
                    out.push((k, NetAction::Announce));
                }
                Slot::Off if mine => {
                    self.slots[k] = Slot::Held;
                    out.push((k, NetAction::Add));
                }
                Slot::Draining { .. } if mine => {
                    self.slots[k] = Slot::Held;
                    out.push((k, NetAction::Announce));
                }
                Slot::Held if !mine => {
                    self.slots[k] = Slot::Draining {
                        until: now + self.timing.drain,
                    };
                }
                _ => {}
            }
            if let Slot::Draining { until } = self.slots[k] {
                let taken = owner.is_some_and(|o| o != self.me && self.holds(o, k));
                if taken || now >= until {
                    self.slots[k] = Slot::Off;
                    let why = if taken {
                        DropReason::HandedOver
                    } else {
                        DropReason::Drained
                    };
                    out.push((k, NetAction::Remove(why)));
                }
            }
        }
        out
    }

    /// The advert to send now (each call takes the next sequence number).
    pub fn advert(&mut self, now: Instant) -> Advert {
        self.seq += 1;
        let listening = self.listening(now);
        let ready = self.ready_since.is_some();
        let held = (0..self.n)
            .filter(|&k| self.slots[k] == Slot::Held)
            .fold(0, |m, k| m | bit(k));
        let heard = (0..self.n)
            .filter(|&j| j != self.me && self.alive(j, now))
            .fold(0, |m, j| m | bit(j));
        let linked = (0..self.n)
            .filter(|&j| j != self.me && self.eligible(j, j, now))
            .fold(0, |m, j| m | bit(j));
        let ready_for = self
            .ready_since
            .map_or(0, |t| now.saturating_duration_since(t).as_millis());
        Advert {
            group: self.group,
            from: self.me as u16,
            incarnation: self.incarnation,
            seq: self.seq,
            ready,
            listening,
            ready_for_ms: u32::try_from(ready_for).unwrap_or(u32::MAX),
            held,
            heard,
            linked,
        }
    }

    /// True while address `k` is held (owned, announced and defended).
    pub fn holds_address(&self, k: usize) -> bool {
        self.slots[k] == Slot::Held
    }

    /// True while address `k` is on the interface (held or draining).
    pub fn address_on(&self, k: usize) -> bool {
        self.slots[k] != Slot::Off
    }

    /// True when no address is on the interface.
    pub fn is_idle(&self) -> bool {
        self.slots.iter().all(|s| *s == Slot::Off)
    }

    /// The MAC of peer `j`'s current incarnation, once heard.
    pub fn peer_mac(&self, j: usize) -> Option<[u8; 6]> {
        let p = self.peers.get(j).filter(|_| j != self.me)?;
        p.incarnation.map(|_| p.mac)
    }

    /// How many peers are alive at `now`.
    pub fn peers_alive(&self, now: Instant) -> usize {
        (0..self.n)
            .filter(|&j| j != self.me && self.alive(j, now))
            .count()
    }

    /// The next time something may change without an advert arriving: the
    /// earliest drain end (the driver also ticks every interval).
    pub fn deadline(&self) -> Option<Instant> {
        self.slots
            .iter()
            .filter_map(|s| match s {
                Slot::Draining { until } => Some(*until),
                _ => None,
            })
            .min()
    }
}

#[cfg(test)]
mod tests;
