//! Per-upstream health, in the manner of unbound's infra cache: an upstream
//! is judged only by whether it says anything at all, never by whether it
//! can resolve one name or one zone (that state is kept apart, per name and
//! per zone, in [`crate::forward_failures`]).
//!
//! - Any response (NOERROR, NXDOMAIN, SERVFAIL, REFUSED…) to any query,
//!   whoever asked, proves the upstream alive.
//! - A query that gets no response counts against the upstream only if the
//!   upstream has said nothing since that query was sent ([`Blame`]). While
//!   other clients' queries are answered, a timeout is the name's or its
//!   zone's, not the upstream's.
//! - The upstream counts as down once such silent timeouts were seen for
//!   [`DOWN_AFTER_ZONES`] unrelated zones (keys chosen by the caller, coarse
//!   enough that random labels under one domain are one zone) with no
//!   response between. Three simultaneous queries under one dead domain are
//!   one zone, so they never mark it down.
//! - A down upstream is skipped while another upstream counts as up; one
//!   query at a time probes it after the backoff. While every upstream
//!   counts as down, each is still asked ([`UpstreamHealth::plan`] with
//!   `last_resort`): a wrong verdict can then only reorder upstreams, never
//!   fail a query that an upstream would answer.
//!
//! No I/O here: the caller passes the time.

use std::time::{Duration, Instant};

/// Unrelated zones whose queries must time out, with the upstream silent
/// since they were sent, before an upstream counts as down.
pub const DOWN_AFTER_ZONES: usize = 3;

/// Whether a query should ask an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// It is up, or it is down but no other upstream is up: ask it.
    Ask,
    /// It is down and due for a probe: this query is the probe.
    Probe,
    /// It is down and another upstream is up: skip it.
    Skip,
}

/// A change of an upstream's state, for the log and the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// It was up and is now down.
    Down,
    /// It was down and answered.
    Up,
}

/// What a query that got no response tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blame {
    /// The upstream has said nothing since the query was sent: the silence
    /// counts against the upstream.
    Upstream,
    /// The upstream answered other queries after this one was sent: it is
    /// alive, and the failure belongs to the name or its zone.
    Query,
}

#[derive(Debug, Clone, Copy)]
struct Down {
    /// When a query may probe it again.
    retry_at: Instant,
    /// When the probe in flight started (a probe that never reports, e.g.
    /// because its query was cancelled, stops counting after a while).
    probe_since: Option<Instant>,
}

/// What one upstream's recent responses and silences say about it.
#[derive(Debug, Clone, Default)]
pub struct UpstreamHealth {
    /// When it last sent any response.
    last_heard: Option<Instant>,
    /// Zone keys of the queries that timed out while it was silent, since
    /// its last response (at most [`DOWN_AFTER_ZONES`], distinct).
    silent_zones: Vec<u64>,
    down: Option<Down>,
}

impl UpstreamHealth {
    /// Whether it counts as down.
    pub fn is_down(&self) -> bool {
        self.down.is_some()
    }

    /// Whether a query at `now` should ask it. `last_resort`: no other
    /// upstream counts as up, so it is asked even while down. A probe in
    /// flight for less than `probe_timeout` keeps other queries away while
    /// another upstream can answer them.
    pub fn plan(&mut self, now: Instant, probe_timeout: Duration, last_resort: bool) -> Use {
        let Some(down) = &mut self.down else {
            return Use::Ask;
        };
        if last_resort {
            return Use::Ask;
        }
        if down
            .probe_since
            .is_some_and(|t| now.saturating_duration_since(t) < probe_timeout)
        {
            return Use::Skip;
        }
        if now >= down.retry_at {
            down.probe_since = Some(now);
            return Use::Probe;
        }
        Use::Skip
    }

    /// It sent a response (any response code) at `now`.
    pub fn answered(&mut self, now: Instant) -> Option<Change> {
        self.last_heard = Some(self.last_heard.map_or(now, |h| h.max(now)));
        self.silent_zones.clear();
        self.down.take().map(|_| Change::Up)
    }

    /// A query sent at `sent`, for a name under the zone keyed `zone`, got
    /// no response by `now` (timeout or error). A down upstream is skipped
    /// for `backoff` from then.
    pub fn failed(
        &mut self,
        zone: u64,
        sent: Instant,
        now: Instant,
        backoff: Duration,
    ) -> (Blame, Option<Change>) {
        if self.last_heard.is_some_and(|h| h >= sent) {
            return (Blame::Query, None);
        }
        if let Some(down) = &mut self.down {
            down.retry_at = now + backoff;
            down.probe_since = None;
            return (Blame::Upstream, None);
        }
        if !self.silent_zones.contains(&zone) {
            self.silent_zones.push(zone);
        }
        if self.silent_zones.len() < DOWN_AFTER_ZONES {
            return (Blame::Upstream, None);
        }
        self.silent_zones.clear();
        self.down = Some(Down {
            retry_at: now + backoff,
            probe_since: None,
        });
        (Blame::Upstream, Some(Change::Down))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BACKOFF: Duration = Duration::from_secs(1);
    const PROBE: Duration = Duration::from_millis(800);
    const TIMEOUT: Duration = Duration::from_millis(800);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn three_simultaneous_timeouts_under_one_zone_never_mark_it_down() {
        let t0 = Instant::now();
        let mut h = UpstreamHealth::default();
        // Every 0.8 s, three random labels under one dead zone, sent
        // together, time out together, and nothing else is asked.
        for round in 0..100u64 {
            let sent = t0 + ms(800 * round);
            for _ in 0..3 {
                assert_eq!(h.plan(sent, PROBE, false), Use::Ask);
            }
            for _ in 0..3 {
                let (blame, change) = h.failed(7, sent, sent + TIMEOUT, BACKOFF);
                assert_eq!(blame, Blame::Upstream);
                assert_eq!(change, None);
            }
        }
        assert!(!h.is_down());
    }

    #[test]
    fn timeouts_while_it_answers_others_are_blamed_on_the_query() {
        let t0 = Instant::now();
        let mut h = UpstreamHealth::default();
        // Three zones time out together, but another client's query was
        // answered while they were in flight.
        assert_eq!(h.answered(t0 + ms(300)), None);
        for zone in 1..=3 {
            assert_eq!(
                h.failed(zone, t0, t0 + TIMEOUT, BACKOFF),
                (Blame::Query, None)
            );
        }
        assert!(!h.is_down());
        // A query sent after that answer, with silence since, is the
        // upstream's.
        assert_eq!(
            h.failed(1, t0 + ms(400), t0 + ms(1200), BACKOFF),
            (Blame::Upstream, None)
        );
    }

    #[test]
    fn silence_across_three_zones_marks_it_down_and_any_answer_brings_it_back() {
        let t0 = Instant::now();
        let mut h = UpstreamHealth::default();
        h.answered(t0);
        let sent = t0 + ms(10);
        let at = sent + TIMEOUT;
        assert_eq!(h.failed(1, sent, at, BACKOFF), (Blame::Upstream, None));
        assert_eq!(
            h.failed(1, sent, at, BACKOFF),
            (Blame::Upstream, None),
            "the same zone again"
        );
        assert_eq!(h.failed(2, sent, at, BACKOFF), (Blame::Upstream, None));
        assert_eq!(
            h.failed(3, sent, at, BACKOFF),
            (Blame::Upstream, Some(Change::Down))
        );
        assert!(h.is_down());
        // An answer of any kind (the caller does not say which): up again.
        assert_eq!(h.answered(at + ms(5)), Some(Change::Up));
        assert!(!h.is_down());
        assert_eq!(h.plan(at + ms(5), PROBE, false), Use::Ask);
    }

    #[test]
    fn an_answer_between_silences_starts_the_count_again() {
        let t0 = Instant::now();
        let mut h = UpstreamHealth::default();
        for round in 0..50u64 {
            let sent = t0 + ms(1000 * round);
            let at = sent + TIMEOUT;
            assert_eq!(h.failed(round * 2, sent, at, BACKOFF).1, None);
            assert_eq!(h.failed(round * 2 + 1, sent, at, BACKOFF).1, None);
            assert_eq!(h.answered(at + ms(1)), None);
        }
        assert!(!h.is_down());
    }

    #[test]
    fn a_down_upstream_is_skipped_while_another_is_up_then_one_query_probes() {
        let t0 = Instant::now();
        let mut h = UpstreamHealth::default();
        for zone in 1..=3 {
            h.failed(zone, t0, t0, BACKOFF);
        }
        assert!(h.is_down());
        assert_eq!(h.plan(t0 + ms(999), PROBE, false), Use::Skip);
        let t1 = t0 + BACKOFF;
        assert_eq!(h.plan(t1, PROBE, false), Use::Probe);
        assert_eq!(h.plan(t1, PROBE, false), Use::Skip);
        // The probe fails: a new backoff from then.
        let t2 = t1 + ms(300);
        assert_eq!(h.failed(4, t1, t2, BACKOFF), (Blame::Upstream, None));
        assert_eq!(h.plan(t2 + ms(999), PROBE, false), Use::Skip);
        let t3 = t2 + BACKOFF;
        assert_eq!(h.plan(t3, PROBE, false), Use::Probe);
        assert_eq!(h.answered(t3 + ms(2)), Some(Change::Up));
        assert_eq!(h.plan(t3, PROBE, false), Use::Ask);
        assert_eq!(h.plan(t3, PROBE, false), Use::Ask);
    }

    #[test]
    fn a_down_upstream_is_still_asked_when_no_other_is_up() {
        let t0 = Instant::now();
        let mut h = UpstreamHealth::default();
        for zone in 1..=3 {
            h.failed(zone, t0, t0, BACKOFF);
        }
        assert!(h.is_down());
        // During the backoff, and with a probe in flight: still asked.
        assert_eq!(h.plan(t0 + ms(1), PROBE, true), Use::Ask);
        assert_eq!(h.plan(t0 + ms(2), PROBE, true), Use::Ask);
        assert_eq!(h.answered(t0 + ms(3)), Some(Change::Up));
    }

    #[test]
    fn a_probe_that_never_reports_lets_another_query_probe_later() {
        let t0 = Instant::now();
        let mut h = UpstreamHealth::default();
        for n in 0..3 {
            h.failed(n, t0, t0, BACKOFF);
        }
        let t1 = t0 + BACKOFF;
        assert_eq!(h.plan(t1, PROBE, false), Use::Probe);
        assert_eq!(h.plan(t1 + PROBE - ms(1), PROBE, false), Use::Skip);
        assert_eq!(h.plan(t1 + PROBE, PROBE, false), Use::Probe);
    }

    #[test]
    fn a_late_report_of_an_old_answer_does_not_move_last_heard_back() {
        let t0 = Instant::now();
        let mut h = UpstreamHealth::default();
        h.answered(t0 + ms(500));
        h.answered(t0 + ms(100));
        // Sent at 400 ms: the answer at 500 ms came after it.
        assert_eq!(
            h.failed(1, t0 + ms(400), t0 + ms(1200), BACKOFF).0,
            Blame::Query
        );
    }
}
