//! The decision logic for one floating address: a state machine over the
//! Lease as this agent last saw it, the readiness of the replica beside it
//! and the time. It does no I/O: the driver ([`crate::run`]) reads and writes
//! the Lease and changes the interface as the machine says, and feeds back
//! what happened. Time comes in as arguments, so tests drive it with any
//! clock.
//!
//! Rules (see docs/failover.md for the reasoning):
//! - **Expiry is judged locally.** A Lease held by another replica expires
//!   `lease_duration` after this agent *saw its resourceVersion change*, as
//!   client-go's leader election does; wall clocks of other machines are
//!   never compared, so clock skew cannot fence anyone wrongly.
//! - **Fencing.** A holder's right to the address ends `renew_deadline` after
//!   it *sent* its last successful write; every other agent saw that write
//!   no earlier than it was sent and waits `lease_duration` more, so the
//!   holder has dropped the address `lease_duration - renew_deadline` before
//!   anyone may take it.
//! - **Only a ready replica holds.** Not ready: release the Lease (the
//!   address stays until the renew deadline, so workers still sending here
//!   are answered while the next holder's announcement reaches them).
//! - **Home.** Each address has one home replica. A home that has been ready
//!   for `home_ready_for` while another replica holds its address marks the
//!   Lease as wanted; the holder hands the Lease over and keeps answering
//!   until it sees the home's first renewal (make before break), so no
//!   lookup or connect goes unanswered during the move.

use std::fmt;
use std::time::{Duration, Instant};

/// The timing of the Lease loop; every agent of a component uses the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How long after a Lease last changed (as seen locally) another agent
    /// may take it.
    pub lease_duration: Duration,
    /// How long after its last successful write (as sent) a holder keeps
    /// the address without renewing.
    pub renew_deadline: Duration,
    /// How often the Lease is renewed or read.
    pub retry_period: Duration,
    /// How long the home replica must have been ready before it asks for
    /// its address back.
    pub home_ready_for: Duration,
}

/// A timing that cannot fence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimingError {
    /// The renew deadline must end before the Lease can expire.
    #[error(
        "--renew-deadline {renew_deadline:?} must be shorter than --lease-duration {lease_duration:?}: a holder that cannot renew must drop the address before another replica may take it"
    )]
    DeadlineNotBeforeExpiry {
        /// The renew deadline given.
        renew_deadline: Duration,
        /// The lease duration given.
        lease_duration: Duration,
    },
    /// A holder must get at least one retry before its deadline.
    #[error(
        "--retry-period {retry_period:?} must be shorter than --renew-deadline {renew_deadline:?}: a holder needs a second try before it drops the address"
    )]
    RetryNotBeforeDeadline {
        /// The retry period given.
        retry_period: Duration,
        /// The renew deadline given.
        renew_deadline: Duration,
    },
    /// A zero period would spin.
    #[error("--retry-period must be above zero")]
    ZeroRetry,
}

impl Timing {
    /// Checks the fencing rule: `0 < retry_period < renew_deadline <
    /// lease_duration`.
    pub fn new(
        lease_duration: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
        home_ready_for: Duration,
    ) -> Result<Timing, TimingError> {
        if retry_period.is_zero() {
            return Err(TimingError::ZeroRetry);
        }
        if renew_deadline >= lease_duration {
            return Err(TimingError::DeadlineNotBeforeExpiry {
                renew_deadline,
                lease_duration,
            });
        }
        if retry_period >= renew_deadline {
            return Err(TimingError::RetryNotBeforeDeadline {
                retry_period,
                renew_deadline,
            });
        }
        Ok(Timing {
            lease_duration,
            renew_deadline,
            retry_period,
            home_ready_for,
        })
    }

    /// The margin between a holder's latest drop and the earliest takeover.
    pub fn fencing_margin(&self) -> Duration {
        self.lease_duration - self.renew_deadline
    }
}

impl Default for Timing {
    /// 1.4 s lease, 1 s renew deadline, 0.5 s period, 2 s home settle: a
    /// lost holder's address is taken within lease + period = 1.9 s, and
    /// the fencing margin is 0.4 s.
    fn default() -> Timing {
        Timing {
            lease_duration: Duration::from_millis(1400),
            renew_deadline: Duration::from_millis(1000),
            retry_period: Duration::from_millis(500),
            home_ready_for: Duration::from_secs(2),
        }
    }
}

/// The parts of one address's Lease the decision needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// `spec.holderIdentity`; `None` when empty (released).
    pub holder: Option<String>,
    /// `metadata.resourceVersion`: every write changes it.
    pub version: String,
    /// The identity of the home replica asking for the address back.
    pub wanted_by: Option<String>,
    /// `spec.leaseTransitions`.
    pub transitions: i32,
}

/// One read of the Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observation {
    /// There is no Lease for the address yet.
    Missing,
    /// The Lease as read.
    Found(Record),
}

/// Why a Lease is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intent {
    /// Take a Lease that is missing, free or expired.
    Acquire,
    /// Keep a Lease this agent holds.
    Renew,
    /// Give up a Lease (not ready, or stopping).
    Release,
    /// Give a Lease to its home replica, which asked for it.
    HandOver,
    /// Ask the holder for the home address back.
    Want,
    /// Withdraw a request for the home address (home not ready).
    Unwant,
}

impl Intent {
    /// Lower-case name for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Intent::Acquire => "acquire",
            Intent::Renew => "renew",
            Intent::Release => "release",
            Intent::HandOver => "hand_over",
            Intent::Want => "want",
            Intent::Unwant => "unwant",
        }
    }
}

/// A Lease write for the driver to carry out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// Why.
    pub intent: Intent,
    /// The resourceVersion the write is based on; `None` creates the Lease.
    pub base: Option<String>,
    /// The new holder (`None`: empty).
    pub holder: Option<String>,
    /// The new `wanted-by` annotation.
    pub wanted_by: Option<String>,
    /// The new `leaseTransitions`.
    pub transitions: i32,
    /// True when the holder changes: the driver sets `acquireTime`.
    pub new_holder: bool,
    /// True when the holder writes its own renewal: the driver sets
    /// `renewTime` (otherwise it keeps the Lease's).
    pub renews: bool,
}

/// What became of a write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The API stored it; the Lease as stored.
    Written(Record),
    /// 409: the Lease changed (or exists) since it was read; someone else
    /// wrote first.
    Conflict,
    /// No answer in time, or an error: the write may or may not have been
    /// stored.
    Failed,
}

/// Why an address leaves the interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// The renew deadline passed without a successful renewal.
    Fenced,
    /// Another replica holds the Lease.
    Lost,
    /// After a release or hand-over, the next holder showed up (or the
    /// deadline passed).
    Drained,
    /// On the interface without a Lease (at start, e.g. a CNI-assigned
    /// home address another replica holds).
    Unbacked,
}

impl DropReason {
    /// Lower-case name for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Fenced => "fenced",
            DropReason::Lost => "lost",
            DropReason::Drained => "drained",
            DropReason::Unbacked => "unbacked",
        }
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A change of the interface for the driver to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetAction {
    /// Add the address (with a kernel lifetime of the renew deadline) and
    /// announce it by gratuitous ARP.
    Add,
    /// The address is on: push its kernel lifetime out again (after a
    /// renewal).
    Refresh,
    /// Remove the address.
    Remove(DropReason),
}

/// What the driver asks the API next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Read the Lease.
    Read,
    /// Write it.
    Write(Write),
}

/// One step: an interface change to make first (if any), then a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// Made before the request.
    pub before: Option<NetAction>,
    /// The request.
    pub request: Request,
}

/// Where the address stands on this replica.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Address {
    /// Not on the interface.
    Off,
    /// On, backed by a Lease this agent holds; `sent` is when the last
    /// successful write was sent.
    Held { sent: Instant },
    /// On after the Lease was given up at `version`; removed when the Lease
    /// changes from it or at `until`.
    Draining { version: String, until: Instant },
    /// On without a Lease (found at start).
    Unbacked,
}

/// The state of one floating address on this replica.
#[derive(Debug, Clone)]
pub struct Machine {
    identity: String,
    home: bool,
    timing: Timing,
    /// The last observation, with the local time it last changed.
    observed: Option<(Observation, Instant)>,
    /// A write failed or conflicted: read before writing again.
    must_read: bool,
    address: Address,
    /// Since when the replica is ready (`None`: not ready).
    ready_since: Option<Instant>,
}

impl Machine {
    /// A machine for an address this replica is (`home`) or is not the
    /// home of; `present` says whether the address is already on the
    /// interface (then it is kept only if the Lease can be had at once).
    pub fn new(identity: impl Into<String>, home: bool, timing: Timing, present: bool) -> Machine {
        Machine {
            identity: identity.into(),
            home,
            timing,
            observed: None,
            must_read: false,
            address: if present {
                Address::Unbacked
            } else {
                Address::Off
            },
            ready_since: None,
        }
    }

    /// The timing.
    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// True while the address is on this replica's interface.
    pub fn address_on(&self) -> bool {
        self.address != Address::Off
    }

    /// True while this agent holds the Lease (as far as it knows).
    pub fn holds(&self) -> bool {
        matches!(self.address, Address::Held { .. })
    }

    /// True when nothing is left to undo: no address, no Lease held.
    pub fn is_idle(&self) -> bool {
        self.address == Address::Off && !self.recorded_holder()
    }

    fn recorded_holder(&self) -> bool {
        matches!(&self.observed, Some((Observation::Found(r), _)) if r.holder.as_deref() == Some(self.identity.as_str()))
    }

    /// Records the replica's readiness at `now`.
    pub fn set_ready(&mut self, now: Instant, ready: bool) {
        match (ready, self.ready_since) {
            (true, None) => self.ready_since = Some(now),
            (false, Some(_)) => self.ready_since = None,
            _ => {}
        }
    }

    /// When the address must be gone unless something changes (the renew
    /// deadline of a held address, the end of a drain).
    pub fn deadline(&self) -> Option<Instant> {
        match &self.address {
            Address::Held { sent } => Some(*sent + self.timing.renew_deadline),
            Address::Draining { until, .. } => Some(*until),
            Address::Off | Address::Unbacked => None,
        }
    }

    /// How long the next request may take: a holder's request ends at its
    /// renew deadline, so the fence is never late because the API is slow.
    pub fn request_timeout(&self, now: Instant) -> Duration {
        let cap = self.timing.renew_deadline;
        match self.deadline() {
            Some(d) => d
                .saturating_duration_since(now)
                .clamp(Duration::from_millis(1), cap),
            None => cap,
        }
    }

    /// The fence: drops the address once its deadline has passed.
    pub fn fence(&mut self, now: Instant) -> Option<NetAction> {
        let reason = match &self.address {
            Address::Held { sent } if now >= *sent + self.timing.renew_deadline => {
                DropReason::Fenced
            }
            Address::Draining { until, .. } if now >= *until => DropReason::Drained,
            _ => return None,
        };
        self.address = Address::Off;
        Some(NetAction::Remove(reason))
    }

    /// Takes in a read of the Lease at `now`; returns an interface change
    /// when the read shows the address must go.
    pub fn observe(&mut self, now: Instant, observation: Observation) -> Option<NetAction> {
        self.must_read = false;
        let changed = match &self.observed {
            Some((old, _)) => *old != observation,
            None => true,
        };
        if changed {
            self.observed = Some((observation, now));
        }
        let mine = self.recorded_holder();
        match &self.address {
            Address::Held { .. } if !mine => {
                self.address = Address::Off;
                Some(NetAction::Remove(DropReason::Lost))
            }
            // A draining address stays until the renew deadline (`fence`),
            // also after the next holder wrote: that one adds the address
            // and announces it, but a worker whose neighbour entry was
            // refreshed less than its `locktime` (1 s on Linux) ago ignores
            // the announcement and keeps sending here until the next one
            // (`--announce-every`). Packets still arriving here then reach
            // the sockets that own them instead of being dropped without a
            // reset.
            Address::Draining { .. } => None,
            _ => None,
        }
    }

    fn write(&self, intent: Intent, r: Option<&Record>, holder: Option<String>) -> Request {
        let me = Some(self.identity.clone());
        let new_holder = r.map(|r| r.holder.clone()) != Some(holder.clone());
        let transitions = r.map(|r| r.transitions).unwrap_or(0);
        let wanted_by = match intent {
            // Taking or keeping the address as its home ends the request.
            Intent::Acquire | Intent::Renew | Intent::HandOver | Intent::Unwant => r
                .and_then(|r| r.wanted_by.clone())
                .filter(|w| Some(w) != me.as_ref() && Some(w) != holder.as_ref()),
            Intent::Want => me.clone(),
            Intent::Release => r
                .and_then(|r| r.wanted_by.clone())
                .filter(|w| Some(w) != me.as_ref()),
        };
        Request::Write(Write {
            intent,
            base: r.map(|r| r.version.clone()),
            renews: matches!(intent, Intent::Acquire | Intent::Renew | Intent::HandOver),
            new_holder: new_holder && holder.is_some(),
            // As client-go counts: every change to a new holder.
            transitions: if new_holder && holder.is_some() && r.is_some() {
                transitions + 1
            } else {
                transitions
            },
            holder,
            wanted_by,
        })
    }

    /// The next request (and an interface change to make before it).
    pub fn next(&mut self, now: Instant) -> Step {
        let request = self.decide(now);
        let before = match (&self.address, &request) {
            (Address::Unbacked, Request::Write(w))
                if matches!(w.intent, Intent::Acquire | Intent::Renew) =>
            {
                None
            }
            // An address found on the interface is kept only while the
            // Lease can be had at once; before the first read it waits.
            (Address::Unbacked, _) if self.observed.is_some() => {
                self.address = Address::Off;
                Some(NetAction::Remove(DropReason::Unbacked))
            }
            _ => None,
        };
        Step { before, request }
    }

    /// True when the next step writes: after a read, the driver writes at
    /// once, while the version it read is still current (a holder renews
    /// every period, so a write one period later would always conflict).
    pub fn wants_to_write(&self, now: Instant) -> bool {
        matches!(self.decide(now), Request::Write(_))
    }

    fn decide(&self, now: Instant) -> Request {
        let Some((observation, since)) = &self.observed else {
            return Request::Read;
        };
        if self.must_read {
            return Request::Read;
        }
        let me = self.identity.as_str();
        let ready = self.ready_since.is_some();
        let expired = now >= *since + self.timing.lease_duration;
        let r = match observation {
            Observation::Missing => {
                // At a cold start the home takes its own address at once;
                // the others wait a lease duration for it.
                return if ready && (self.home || expired) {
                    self.write(Intent::Acquire, None, Some(me.to_string()))
                } else {
                    Request::Read
                };
            }
            Observation::Found(r) => r,
        };
        if r.holder.as_deref() == Some(me) {
            if !ready {
                return self.write(Intent::Release, Some(r), None);
            }
            if let Some(home) = r.wanted_by.as_deref().filter(|w| *w != me) {
                return self.write(Intent::HandOver, Some(r), Some(home.to_string()));
            }
            return self.write(Intent::Renew, Some(r), Some(me.to_string()));
        }
        if matches!(self.address, Address::Draining { .. }) {
            return Request::Read;
        }
        if !ready {
            if r.wanted_by.as_deref() == Some(me) {
                return self.write(Intent::Unwant, Some(r), r.holder.clone());
            }
            return Request::Read;
        }
        match &r.holder {
            None => match r.wanted_by.as_deref() {
                // Released for its home: only the home takes it, unless
                // the home does not come for a lease duration.
                Some(w) if w != me && !expired => Request::Read,
                _ => self.write(Intent::Acquire, Some(r), Some(me.to_string())),
            },
            Some(_) if expired => self.write(Intent::Acquire, Some(r), Some(me.to_string())),
            Some(holder) => {
                let settled = self
                    .ready_since
                    .is_some_and(|s| now >= s + self.timing.home_ready_for);
                if self.home && settled && r.wanted_by.as_deref() != Some(me) {
                    self.write(Intent::Want, Some(r), Some(holder.clone()))
                } else {
                    Request::Read
                }
            }
        }
    }

    /// Takes in the outcome of `write`, sent at `sent` and answered at
    /// `now`; returns the interface changes to make.
    pub fn written(
        &mut self,
        sent: Instant,
        now: Instant,
        write: &Write,
        outcome: WriteOutcome,
    ) -> Vec<NetAction> {
        let stored = match outcome {
            WriteOutcome::Written(r) => r,
            WriteOutcome::Conflict | WriteOutcome::Failed => {
                self.must_read = true;
                return Vec::new();
            }
        };
        let mine = stored.holder.as_deref() == Some(self.identity.as_str());
        let version = stored.version.clone();
        self.observed = Some((Observation::Found(stored), now));
        match write.intent {
            Intent::Acquire | Intent::Renew if mine => {
                let was = std::mem::replace(&mut self.address, Address::Held { sent });
                match was {
                    Address::Off => vec![NetAction::Add],
                    // An address that was on unbacked is announced again:
                    // it may have been somebody else's until now.
                    Address::Unbacked => vec![NetAction::Add],
                    Address::Held { .. } | Address::Draining { .. } => vec![NetAction::Refresh],
                }
            }
            Intent::Release | Intent::HandOver => {
                if self.address != Address::Off {
                    self.address = Address::Draining {
                        version,
                        until: sent + self.timing.renew_deadline,
                    };
                }
                Vec::new()
            }
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: &str = "dns-2-abc";
    const OTHER: &str = "dns-1-xyz";

    /// 1.5 s lease, 1 s renew deadline, 0.5 s period, 2 s home settle.
    fn timing() -> Timing {
        Timing::new(ms(1500), ms(1000), ms(500), ms(2000)).unwrap()
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn record(holder: Option<&str>, version: &str) -> Record {
        Record {
            holder: holder.map(str::to_string),
            version: version.to_string(),
            wanted_by: None,
            transitions: 0,
        }
    }

    fn found(holder: Option<&str>, version: &str) -> Observation {
        Observation::Found(record(holder, version))
    }

    fn write_of(step: &Step) -> Write {
        match &step.request {
            Request::Write(w) => w.clone(),
            Request::Read => panic!("expected a write, got {step:?}"),
        }
    }

    /// A machine that holds the Lease since `t0` (written at version 2).
    fn holding(t0: Instant, home: bool) -> Machine {
        let mut m = Machine::new(ME, home, timing(), false);
        m.set_ready(t0, true);
        m.observe(t0, found(Some(OTHER), "1"));
        let w = write_of(&m.next(t0 + ms(1600)));
        assert_eq!(w.intent, Intent::Acquire);
        let acts = m.written(t0, t0, &w, WriteOutcome::Written(record(Some(ME), "2")));
        assert_eq!(acts, vec![NetAction::Add]);
        m
    }

    #[test]
    fn timing_refuses_a_deadline_that_does_not_end_before_expiry() {
        let e = Timing::new(ms(1000), ms(1000), ms(200), ms(0)).unwrap_err();
        assert!(e.to_string().contains("--renew-deadline"), "{e}");
        let e = Timing::new(ms(1500), ms(1000), ms(1000), ms(0)).unwrap_err();
        assert!(e.to_string().contains("--retry-period"), "{e}");
        assert_eq!(
            Timing::new(ms(1500), ms(1000), ms(0), ms(0)),
            Err(TimingError::ZeroRetry)
        );
        assert_eq!(Timing::default().fencing_margin(), ms(400));
    }

    #[test]
    fn first_step_is_a_read() {
        let mut m = Machine::new(ME, true, timing(), false);
        m.set_ready(Instant::now(), true);
        assert_eq!(m.next(Instant::now()).request, Request::Read);
    }

    #[test]
    fn home_creates_a_missing_lease_at_once_others_wait_a_lease_duration() {
        let t0 = Instant::now();
        let mut home = Machine::new(ME, true, timing(), false);
        home.set_ready(t0, true);
        home.observe(t0, Observation::Missing);
        let w = write_of(&home.next(t0));
        assert_eq!(
            (w.intent, w.base.as_deref(), w.holder.as_deref()),
            (Intent::Acquire, None, Some(ME))
        );

        let mut other = Machine::new(ME, false, timing(), false);
        other.set_ready(t0, true);
        other.observe(t0, Observation::Missing);
        assert_eq!(other.next(t0 + ms(1400)).request, Request::Read);
        assert_eq!(write_of(&other.next(t0 + ms(1500))).intent, Intent::Acquire);
    }

    #[test]
    fn an_unready_replica_never_takes_an_address() {
        let t0 = Instant::now();
        let mut m = Machine::new(ME, true, timing(), false);
        m.observe(t0, Observation::Missing);
        assert_eq!(m.next(t0 + ms(5000)).request, Request::Read);
        m.observe(t0, found(None, "3"));
        assert_eq!(m.next(t0 + ms(5000)).request, Request::Read);
    }

    #[test]
    fn acquisition_adds_the_address_and_renewal_refreshes_it() {
        let t0 = Instant::now();
        let mut m = holding(t0, false);
        assert!(m.holds() && m.address_on());
        let w = write_of(&m.next(t0 + ms(500)));
        assert_eq!(
            (w.intent, w.base.as_deref(), w.new_holder),
            (Intent::Renew, Some("2"), false)
        );
        let acts = m.written(
            t0 + ms(500),
            t0 + ms(510),
            &w,
            WriteOutcome::Written(record(Some(ME), "3")),
        );
        assert_eq!(acts, vec![NetAction::Refresh]);
        assert_eq!(m.deadline(), Some(t0 + ms(1500)));
    }

    #[test]
    fn a_live_holder_is_left_alone_until_its_lease_expires_by_local_time() {
        let t0 = Instant::now();
        let mut m = Machine::new(ME, false, timing(), false);
        m.set_ready(t0, true);
        m.observe(t0, found(Some(OTHER), "5"));
        // Renewed (new version) at 1 s: the clock starts again.
        m.observe(t0 + ms(1000), found(Some(OTHER), "6"));
        assert_eq!(m.next(t0 + ms(2400)).request, Request::Read);
        // The same version again says nothing new.
        m.observe(t0 + ms(2000), found(Some(OTHER), "6"));
        let w = write_of(&m.next(t0 + ms(2500)));
        assert_eq!(
            (w.intent, w.base.as_deref(), w.new_holder, w.transitions),
            (Intent::Acquire, Some("6"), true, 1)
        );
    }

    #[test]
    fn a_holder_renews_time_in_the_lease_is_never_compared_to_the_local_clock() {
        // The record carries no wall time at all: expiry is only the local
        // time since the version last changed, so a holder whose clock is
        // hours off is judged like any other.
        let t0 = Instant::now();
        let mut m = Machine::new(ME, false, timing(), false);
        m.set_ready(t0, true);
        for i in 0..10u64 {
            m.observe(t0 + ms(500 * i), found(Some(OTHER), &i.to_string()));
            assert_eq!(m.next(t0 + ms(500 * i + 499)).request, Request::Read);
        }
    }

    #[test]
    fn a_holder_that_cannot_renew_drops_the_address_before_anyone_may_take_it() {
        let t0 = Instant::now();
        let mut m = holding(t0, false);
        // Another replica saw the write no earlier than it was sent.
        let mut other = Machine::new(OTHER, false, timing(), false);
        other.set_ready(t0, true);
        other.observe(t0, found(Some(ME), "2"));
        // Every renewal fails from here on.
        let mut dropped_at = None;
        let mut taken_at = None;
        let mut t = t0;
        while t < t0 + ms(3000) {
            if dropped_at.is_none() {
                if let Some(a) = m.fence(t) {
                    assert_eq!(a, NetAction::Remove(DropReason::Fenced));
                    dropped_at = Some(t);
                } else if let Request::Write(w) = m.next(t).request {
                    assert!(m.written(t, t, &w, WriteOutcome::Failed).is_empty());
                }
            }
            if taken_at.is_none()
                && let Request::Write(w) = other.next(t).request
            {
                assert_eq!(w.intent, Intent::Acquire);
                taken_at = Some(t);
            }
            t += ms(10);
        }
        let (dropped, taken) = (dropped_at.unwrap(), taken_at.unwrap());
        assert_eq!(dropped - t0, ms(1000));
        assert_eq!(taken - t0, ms(1500));
        assert!(taken - dropped >= timing().fencing_margin());
    }

    #[test]
    fn request_timeout_ends_at_the_renew_deadline() {
        let t0 = Instant::now();
        let m = holding(t0, false);
        assert_eq!(m.request_timeout(t0 + ms(700)), ms(300));
        assert_eq!(m.request_timeout(t0 + ms(2000)), ms(1));
        let idle = Machine::new(ME, false, timing(), false);
        assert_eq!(idle.request_timeout(t0), ms(1000));
    }

    #[test]
    fn a_conflict_means_read_again_and_a_lost_lease_drops_the_address() {
        let t0 = Instant::now();
        let mut m = holding(t0, false);
        let w = write_of(&m.next(t0 + ms(500)));
        assert!(
            m.written(t0 + ms(500), t0 + ms(510), &w, WriteOutcome::Conflict)
                .is_empty()
        );
        assert!(m.address_on(), "a conflict alone does not drop: read first");
        assert_eq!(m.next(t0 + ms(520)).request, Request::Read);
        let act = m.observe(t0 + ms(530), found(Some(OTHER), "9"));
        assert_eq!(act, Some(NetAction::Remove(DropReason::Lost)));
        assert!(!m.address_on());
    }

    #[test]
    fn unready_holder_releases_and_keeps_answering_until_the_renew_deadline() {
        let t0 = Instant::now();
        let mut m = holding(t0, false);
        m.set_ready(t0 + ms(200), false);
        let w = write_of(&m.next(t0 + ms(200)));
        assert_eq!(
            (w.intent, w.holder.as_deref(), w.renews),
            (Intent::Release, None, false)
        );
        let acts = m.written(
            t0 + ms(200),
            t0 + ms(210),
            &w,
            WriteOutcome::Written(record(None, "3")),
        );
        assert!(acts.is_empty());
        assert!(m.address_on() && !m.holds());
        // Same version: still draining.
        assert_eq!(m.observe(t0 + ms(400), found(None, "3")), None);
        assert_eq!(m.next(t0 + ms(400)).request, Request::Read);
        // The next holder wrote: still here until the renew deadline (1 s
        // after the release was sent), for workers still sending here.
        assert_eq!(m.observe(t0 + ms(600), found(Some(OTHER), "4")), None);
        assert_eq!(m.fence(t0 + ms(1199)), None);
        assert_eq!(
            m.fence(t0 + ms(1200)),
            Some(NetAction::Remove(DropReason::Drained))
        );
        assert!(m.is_idle());
    }

    #[test]
    fn a_drain_ends_at_the_renew_deadline_when_nobody_takes_over() {
        let t0 = Instant::now();
        let mut m = holding(t0, false);
        m.set_ready(t0 + ms(100), false);
        let w = write_of(&m.next(t0 + ms(100)));
        m.written(
            t0 + ms(100),
            t0 + ms(110),
            &w,
            WriteOutcome::Written(record(None, "3")),
        );
        assert_eq!(m.fence(t0 + ms(1099)), None);
        assert_eq!(
            m.fence(t0 + ms(1100)),
            Some(NetAction::Remove(DropReason::Drained))
        );
    }

    #[test]
    fn a_released_lease_is_taken_at_once() {
        let t0 = Instant::now();
        let mut m = Machine::new(ME, false, timing(), false);
        m.set_ready(t0, true);
        m.observe(t0, found(Some(OTHER), "3"));
        m.observe(t0 + ms(100), found(None, "4"));
        let w = write_of(&m.next(t0 + ms(100)));
        assert_eq!(
            (w.intent, w.base.as_deref(), w.new_holder),
            (Intent::Acquire, Some("4"), true)
        );
    }

    #[test]
    fn home_that_is_ready_long_enough_asks_for_its_address() {
        let t0 = Instant::now();
        let mut home = Machine::new(ME, true, timing(), false);
        home.observe(t0, found(Some(OTHER), "3"));
        home.set_ready(t0, true);
        // The holder keeps renewing.
        home.observe(t0 + ms(1000), found(Some(OTHER), "4"));
        assert_eq!(home.next(t0 + ms(1999)).request, Request::Read);
        let w = write_of(&home.next(t0 + ms(2000)));
        assert_eq!(
            (
                w.intent,
                w.holder.as_deref(),
                w.wanted_by.as_deref(),
                w.base.as_deref(),
                w.renews
            ),
            (Intent::Want, Some(OTHER), Some(ME), Some("4"), false)
        );
        // A non-home replica never asks.
        let mut other = Machine::new(ME, false, timing(), false);
        other.observe(t0, found(Some(OTHER), "3"));
        other.set_ready(t0, true);
        other.observe(t0 + ms(4000), found(Some(OTHER), "5"));
        assert_eq!(other.next(t0 + ms(5000)).request, Request::Read);
    }

    #[test]
    fn holder_hands_a_wanted_address_to_its_home_and_drops_it_at_the_renew_deadline() {
        let t0 = Instant::now();
        let mut m = holding(t0, false);
        let mut wanted = record(Some(ME), "3");
        wanted.wanted_by = Some(OTHER.to_string());
        m.observe(t0 + ms(300), Observation::Found(wanted));
        let w = write_of(&m.next(t0 + ms(300)));
        assert_eq!(
            (
                w.intent,
                w.holder.as_deref(),
                w.wanted_by.as_deref(),
                w.new_holder,
                w.transitions
            ),
            (Intent::HandOver, Some(OTHER), None, true, 1)
        );
        m.written(
            t0 + ms(300),
            t0 + ms(310),
            &w,
            WriteOutcome::Written(record(Some(OTHER), "4")),
        );
        assert!(m.address_on(), "make before break: still answering");
        assert_eq!(m.observe(t0 + ms(500), found(Some(OTHER), "4")), None);
        assert_eq!(m.observe(t0 + ms(800), found(Some(OTHER), "5")), None);
        // Kept until the renew deadline of the hand-over write (sent at
        // 300 ms), for workers that still send here.
        assert_eq!(m.fence(t0 + ms(1299)), None);
        assert_eq!(
            m.fence(t0 + ms(1300)),
            Some(NetAction::Remove(DropReason::Drained))
        );
    }

    #[test]
    fn a_lease_released_for_its_home_waits_for_the_home() {
        let t0 = Instant::now();
        let mut m = Machine::new(ME, false, timing(), false);
        m.set_ready(t0, true);
        let mut r = record(None, "4");
        r.wanted_by = Some(OTHER.to_string());
        m.observe(t0, Observation::Found(r));
        assert_eq!(m.next(t0 + ms(1000)).request, Request::Read);
        assert_eq!(write_of(&m.next(t0 + ms(1500))).intent, Intent::Acquire);
    }

    #[test]
    fn an_unready_home_withdraws_its_request() {
        let t0 = Instant::now();
        let mut home = Machine::new(ME, true, timing(), false);
        let mut r = record(Some(OTHER), "4");
        r.wanted_by = Some(ME.to_string());
        home.observe(t0, Observation::Found(r));
        let w = write_of(&home.next(t0));
        assert_eq!(
            (w.intent, w.holder.as_deref(), w.wanted_by),
            (Intent::Unwant, Some(OTHER), None)
        );
    }

    #[test]
    fn home_keeps_its_address_found_on_the_interface_when_the_lease_is_free() {
        let t0 = Instant::now();
        let mut home = Machine::new(ME, true, timing(), true);
        home.set_ready(t0, true);
        assert_eq!(
            home.next(t0).before,
            None,
            "nothing removed before the first read"
        );
        home.observe(t0, Observation::Missing);
        let step = home.next(t0);
        assert_eq!(step.before, None);
        let w = write_of(&step);
        let acts = home.written(t0, t0, &w, WriteOutcome::Written(record(Some(ME), "1")));
        assert_eq!(acts, vec![NetAction::Add]);
    }

    #[test]
    fn an_address_found_on_the_interface_goes_when_another_replica_holds_it() {
        let t0 = Instant::now();
        let mut home = Machine::new(ME, true, timing(), true);
        home.observe(t0, found(Some(OTHER), "7"));
        let step = home.next(t0);
        assert_eq!(step.before, Some(NetAction::Remove(DropReason::Unbacked)));
        assert!(!home.address_on());
    }

    #[test]
    fn after_a_fence_the_holder_takes_its_own_unchanged_lease_back() {
        let t0 = Instant::now();
        let mut m = holding(t0, false);
        assert!(m.fence(t0 + ms(1000)).is_some());
        // The API is back and nobody else wrote: still ours.
        m.observe(t0 + ms(1200), found(Some(ME), "2"));
        let w = write_of(&m.next(t0 + ms(1200)));
        assert_eq!(w.intent, Intent::Renew);
        let acts = m.written(
            t0 + ms(1200),
            t0 + ms(1210),
            &w,
            WriteOutcome::Written(record(Some(ME), "3")),
        );
        assert_eq!(acts, vec![NetAction::Add]);
    }

    #[test]
    fn a_stopping_holder_releases_and_ends_idle() {
        let t0 = Instant::now();
        let mut m = holding(t0, true);
        m.set_ready(t0 + ms(100), false);
        let w = write_of(&m.next(t0 + ms(100)));
        assert_eq!(w.intent, Intent::Release);
        m.written(
            t0 + ms(100),
            t0 + ms(101),
            &w,
            WriteOutcome::Written(record(None, "3")),
        );
        assert!(!m.is_idle());
        m.fence(t0 + ms(1100));
        assert!(m.is_idle());
    }
}
