//! Per-upstream health from many queries, in the manner of unbound's infra
//! cache: an upstream is judged by what queries of different names tell
//! about it, never by one name.
//!
//! An upstream counts as down once queries for [`DOWN_AFTER_NAMES`]
//! different names failed on it in a row (timeout or error) with no answer
//! between. Any answer (even SERVFAIL) shows it alive and clears the count.
//! A name that is slow everywhere (its authority does not answer) fails the
//! same name over and over, which never adds up to a down upstream, so it
//! cannot stop the forwarding of other names.
//!
//! A down upstream is skipped for the backoff, then one query at a time
//! probes it; an answer brings it back, a failure starts a new backoff.
//! No I/O here: the caller passes the time.

use std::time::{Duration, Instant};

/// Different names that must fail in a row before an upstream counts as
/// down.
pub const DOWN_AFTER_NAMES: usize = 3;

/// Whether a query should ask an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// It is up: ask it.
    Ask,
    /// It is down and due for a probe: this query is the probe.
    Probe,
    /// It is down: skip it.
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

#[derive(Debug, Clone, Copy)]
struct Down {
    /// When a query may probe it again.
    retry_at: Instant,
    /// When the probe in flight started (a probe that never reports, e.g.
    /// because its query was cancelled, stops counting after a while).
    probe_since: Option<Instant>,
}

/// What one upstream's recent queries say about it.
#[derive(Debug, Clone, Default)]
pub struct UpstreamHealth {
    /// Hashes of the different names that failed since the last answer.
    failed: Vec<u64>,
    down: Option<Down>,
}

impl UpstreamHealth {
    /// Whether it counts as down.
    pub fn is_down(&self) -> bool {
        self.down.is_some()
    }

    /// Whether a query at `now` should ask it. A probe in flight for less
    /// than `probe_timeout` keeps other queries away.
    pub fn plan(&mut self, now: Instant, probe_timeout: Duration) -> Use {
        let Some(down) = &mut self.down else {
            return Use::Ask;
        };
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

    /// It answered (any response code).
    pub fn answered(&mut self) -> Option<Change> {
        self.failed.clear();
        self.down.take().map(|_| Change::Up)
    }

    /// A query for the name hashed to `name` failed on it at `now` (timeout
    /// or error); a down upstream is skipped for `backoff` from then.
    pub fn failed(&mut self, name: u64, now: Instant, backoff: Duration) -> Option<Change> {
        let retry_at = now + backoff;
        if let Some(down) = &mut self.down {
            down.retry_at = retry_at;
            down.probe_since = None;
            return None;
        }
        if !self.failed.contains(&name) {
            self.failed.push(name);
        }
        if self.failed.len() < DOWN_AFTER_NAMES {
            return None;
        }
        self.failed.clear();
        self.down = Some(Down {
            retry_at,
            probe_since: None,
        });
        Some(Change::Down)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BACKOFF: Duration = Duration::from_secs(1);
    const PROBE: Duration = Duration::from_millis(800);

    #[test]
    fn one_slow_name_failing_again_and_again_never_marks_the_upstream_down() {
        let t0 = Instant::now();
        let mut h = UpstreamHealth::default();
        for i in 0..100 {
            let now = t0 + Duration::from_millis(800 * i);
            assert_eq!(h.plan(now, PROBE), Use::Ask);
            assert_eq!(h.failed(7, now, BACKOFF), None);
        }
        assert!(!h.is_down());
    }

    #[test]
    fn an_answer_between_failures_of_different_names_keeps_the_upstream_up() {
        let t0 = Instant::now();
        let mut h = UpstreamHealth::default();
        for round in 0..50u64 {
            assert_eq!(h.failed(round * 2, t0, BACKOFF), None);
            assert_eq!(h.failed(round * 2 + 1, t0, BACKOFF), None);
            assert_eq!(h.answered(), None);
        }
        assert!(!h.is_down());
    }

    #[test]
    fn three_different_names_failing_in_a_row_mark_it_down_then_one_query_probes() {
        let t0 = Instant::now();
        let mut h = UpstreamHealth::default();
        assert_eq!(h.failed(1, t0, BACKOFF), None);
        assert_eq!(h.failed(1, t0, BACKOFF), None, "the same name again");
        assert_eq!(h.failed(2, t0, BACKOFF), None);
        assert_eq!(h.failed(3, t0, BACKOFF), Some(Change::Down));
        assert!(h.is_down());
        // Skipped during the backoff.
        assert_eq!(h.plan(t0 + Duration::from_millis(999), PROBE), Use::Skip);
        // Then exactly one query probes; the others still skip it.
        let t1 = t0 + BACKOFF;
        assert_eq!(h.plan(t1, PROBE), Use::Probe);
        assert_eq!(h.plan(t1, PROBE), Use::Skip);
        // The probe fails: a new backoff from then.
        let t2 = t1 + Duration::from_millis(300);
        assert_eq!(h.failed(4, t2, BACKOFF), None);
        assert_eq!(h.plan(t2 + Duration::from_millis(999), PROBE), Use::Skip);
        let t3 = t2 + BACKOFF;
        assert_eq!(h.plan(t3, PROBE), Use::Probe);
        // It answers: up again, asked by every query.
        assert_eq!(h.answered(), Some(Change::Up));
        assert_eq!(h.plan(t3, PROBE), Use::Ask);
        assert_eq!(h.plan(t3, PROBE), Use::Ask);
    }

    #[test]
    fn a_probe_that_never_reports_lets_another_query_probe_later() {
        let t0 = Instant::now();
        let mut h = UpstreamHealth::default();
        for n in 0..3 {
            h.failed(n, t0, BACKOFF);
        }
        let t1 = t0 + BACKOFF;
        assert_eq!(h.plan(t1, PROBE), Use::Probe);
        assert_eq!(
            h.plan(t1 + PROBE - Duration::from_millis(1), PROBE),
            Use::Skip
        );
        assert_eq!(h.plan(t1 + PROBE, PROBE), Use::Probe);
    }
}
