//! What forwarded queries that got no answer say about their names and
//! zones, kept apart from the upstreams' own health
//! ([`crate::upstream_health`]), as unbound keeps per-zone and per-name
//! state apart from its per-server infra cache.
//!
//! Only failures the caller blamed on the query (the upstream answered
//! others meanwhile, [`crate::upstream_health::Blame::Query`]) are noted
//! here, so an upstream outage never leaves names or zones held after it.
//!
//! - **A name** (name and type) that failed [`NAME_FAILURES_BEFORE_HOLD`]
//!   times in a row is held: its queries get an answer at once (stale or
//!   SERVFAIL) without asking, for [`FIRST_HOLD`], doubling with each new
//!   failure up to [`MAX_HOLD`] (resolution failures cached with backoff,
//!   RFC 9520). Other names are not touched.
//! - **A zone** (here the parent of the name, never a top-level domain or
//!   the root) under which [`ZONE_NAMES_BEFORE_HOLD`] different names
//!   failed with no answer between is held the same way, but only for
//!   names the server has never resolved (random labels): a name with an
//!   answer in the cache is still asked. Once held, one more failure holds
//!   it again, for twice as long.
//! - Any answer for a name clears the name and its zone.
//!
//! The names are chosen by clients, so the state is bounded: at most
//! [`MAX_ENTRIES`] names and as many zones, the least recently touched
//! forgotten first (forgetting only means asking again). No I/O here: the
//! caller passes the time.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Failures in a row of one name before it is held.
pub const NAME_FAILURES_BEFORE_HOLD: u32 = 2;
/// Different names of one zone that must fail, with no answer for the zone
/// between, before the zone is held.
pub const ZONE_NAMES_BEFORE_HOLD: usize = 3;
/// The first hold of a name or zone.
pub const FIRST_HOLD: Duration = Duration::from_secs(1);
/// The longest hold.
pub const MAX_HOLD: Duration = Duration::from_secs(30);
/// Names (and, apart, zones) remembered at most.
pub const MAX_ENTRIES: usize = 8192;

/// Why a query is answered without asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// Its name (and type) keeps failing.
    Name,
    /// Its zone keeps failing and the name was never resolved.
    Zone,
}

impl Held {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Held::Name => "name",
            Held::Zone => "zone",
        }
    }
}

/// A query's keys: hashes of its name and type, and of its zone (None for
/// a top-level domain or the root, which are never held as zones).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keys {
    /// The name and type.
    pub name: u64,
    /// The zone (the parent name).
    pub zone: Option<u64>,
}

#[derive(Debug, Clone, Default)]
struct NameState {
    failures: u32,
    hold_until: Option<Instant>,
}

#[derive(Debug, Clone, Default)]
struct ZoneState {
    /// Different names that failed since the last answer or hold.
    names: Vec<u64>,
    /// Holds since the last answer.
    holds: u32,
    hold_until: Option<Instant>,
}

/// A map of at most about `2 * half` entries that forgets the least
/// recently touched ones first: two generations, the older dropped whole
/// when the younger fills up; touching an old entry moves it to the young.
#[derive(Debug)]
struct Generations<V> {
    young: HashMap<u64, V>,
    old: HashMap<u64, V>,
    half: usize,
}

impl<V> Generations<V> {
    fn new(max: usize) -> Self {
        Generations {
            young: HashMap::new(),
            old: HashMap::new(),
            half: (max / 2).max(1),
        }
    }

    fn len(&self) -> usize {
        self.young.len() + self.old.len()
    }

    fn make_room(&mut self) {
        if self.young.len() >= self.half {
            self.old = std::mem::take(&mut self.young);
        }
    }

    fn get(&self, k: u64) -> Option<&V> {
        self.young.get(&k).or_else(|| self.old.get(&k))
    }

    fn touch(&mut self, k: u64) -> &mut V
    where
        V: Default,
    {
        if !self.young.contains_key(&k) {
            let v = self.old.remove(&k).unwrap_or_default();
            self.make_room();
            self.young.insert(k, v);
        }
        self.young.entry(k).or_default()
    }

    fn remove(&mut self, k: u64) -> bool {
        let young = self.young.remove(&k).is_some();
        self.old.remove(&k).is_some() || young
    }
}

/// The hold after `n` failures past the threshold (n ≥ 1): doubling.
fn hold(n: u32) -> Duration {
    let doublings = n.saturating_sub(1).min(16);
    FIRST_HOLD.saturating_mul(1 << doublings).min(MAX_HOLD)
}

/// Failure state of names and zones.
#[derive(Debug)]
pub struct Failures {
    names: Generations<NameState>,
    zones: Generations<ZoneState>,
}

impl Default for Failures {
    fn default() -> Self {
        Failures::new(MAX_ENTRIES)
    }
}

impl Failures {
    /// At most `max` names and `max` zones.
    pub fn new(max: usize) -> Self {
        Failures {
            names: Generations::new(max),
            zones: Generations::new(max),
        }
    }

    /// Names and zones remembered.
    pub fn len(&self) -> (usize, usize) {
        (self.names.len(), self.zones.len())
    }

    /// Whether the query keyed `k` is held at `now`. `known`: the name has
    /// an answer in the cache (fresh or expired), so its zone's failures do
    /// not apply to it.
    pub fn held(&self, k: Keys, known: bool, now: Instant) -> Option<Held> {
        let until = |u: Option<Instant>| u.is_some_and(|u| now < u);
        if self.names.get(k.name).is_some_and(|n| until(n.hold_until)) {
            return Some(Held::Name);
        }
        if !known
            && let Some(z) = k.zone
            && self.zones.get(z).is_some_and(|z| until(z.hold_until))
        {
            return Some(Held::Zone);
        }
        None
    }

    /// The query keyed `k` got no answer at `now`, with the upstream alive.
    /// Returns what this failure put on hold (the zone before the name),
    /// for the log.
    pub fn failed(&mut self, k: Keys, now: Instant) -> Option<Held> {
        let mut newly = None;
        let name = self.names.touch(k.name);
        name.failures = name.failures.saturating_add(1);
        if name.failures >= NAME_FAILURES_BEFORE_HOLD {
            name.hold_until = Some(now + hold(name.failures + 1 - NAME_FAILURES_BEFORE_HOLD));
            newly = Some(Held::Name);
        }
        if let Some(z) = k.zone {
            let zone = self.zones.touch(z);
            if !zone.names.contains(&k.name) {
                zone.names.push(k.name);
            }
            let needed = if zone.holds > 0 {
                1
            } else {
                ZONE_NAMES_BEFORE_HOLD
            };
            if zone.names.len() >= needed {
                zone.names.clear();
                zone.holds = zone.holds.saturating_add(1);
                zone.hold_until = Some(now + hold(zone.holds));
                newly = Some(Held::Zone);
            }
        }
        newly
    }

    /// The query keyed `k` got an answer (NOERROR or NXDOMAIN): its name
    /// and zone resolve.
    /// Returns whether any state was cleared.
    pub fn answered(&mut self, k: Keys) -> bool {
        let mut cleared = self.names.remove(k.name);
        if let Some(z) = k.zone {
            cleared |= self.zones.remove(z);
        }
        cleared
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn k(name: u64, zone: u64) -> Keys {
        Keys {
            name,
            zone: Some(zone),
        }
    }

    #[test]
    fn a_name_failing_once_is_not_held_twice_is_held_with_a_doubling_hold() {
        let t0 = Instant::now();
        let mut f = Failures::default();
        let slow = Keys {
            name: 1,
            zone: None,
        };
        assert_eq!(f.failed(slow, t0), None);
        assert_eq!(f.held(slow, false, t0), None, "one failure holds nothing");
        assert_eq!(f.failed(slow, t0), Some(Held::Name));
        assert_eq!(f.held(slow, false, t0 + ms(999)), Some(Held::Name));
        assert_eq!(f.held(slow, true, t0 + ms(999)), Some(Held::Name));
        assert_eq!(f.held(slow, false, t0 + ms(1000)), None);
        // It fails again when asked after the hold: 2 s, then 4 s.
        let t1 = t0 + ms(1000);
        f.failed(slow, t1);
        assert_eq!(f.held(slow, false, t1 + ms(1999)), Some(Held::Name));
        assert_eq!(f.held(slow, false, t1 + ms(2000)), None);
        let t2 = t1 + ms(2000);
        f.failed(slow, t2);
        assert_eq!(f.held(slow, false, t2 + ms(3999)), Some(Held::Name));
        // Other names are untouched.
        assert_eq!(
            f.held(
                Keys {
                    name: 2,
                    zone: None
                },
                false,
                t2
            ),
            None
        );
    }

    #[test]
    fn the_hold_stops_at_its_maximum() {
        let t0 = Instant::now();
        let mut f = Failures::default();
        let slow = Keys {
            name: 1,
            zone: None,
        };
        for _ in 0..100 {
            f.failed(slow, t0);
        }
        assert_eq!(f.held(slow, false, t0 + MAX_HOLD - ms(1)), Some(Held::Name));
        assert_eq!(f.held(slow, false, t0 + MAX_HOLD), None);
    }

    #[test]
    fn an_answer_clears_the_name_and_its_zone() {
        let t0 = Instant::now();
        let mut f = Failures::default();
        for n in 1..=3 {
            f.failed(k(n, 9), t0);
            f.failed(k(n, 9), t0);
        }
        assert_eq!(f.held(k(1, 9), false, t0), Some(Held::Name));
        assert_eq!(f.held(k(50, 9), false, t0), Some(Held::Zone));
        assert!(f.answered(k(1, 9)));
        assert!(!f.answered(k(1, 9)), "nothing left to clear");
        assert_eq!(f.held(k(1, 9), false, t0), None);
        assert_eq!(f.held(k(50, 9), false, t0), None);
    }

    #[test]
    fn three_random_names_under_a_dead_zone_hold_its_unknown_names_only() {
        let t0 = Instant::now();
        let mut f = Failures::default();
        assert_eq!(f.failed(k(1, 9), t0), None);
        assert_eq!(f.failed(k(2, 9), t0), None);
        assert_eq!(f.held(k(4, 9), false, t0), None, "two names hold nothing");
        assert_eq!(f.failed(k(3, 9), t0), Some(Held::Zone));
        // Another random name under it: answered at once.
        assert_eq!(f.held(k(4, 9), false, t0 + ms(999)), Some(Held::Zone));
        // A name the cache knows under it is still asked, and names of
        // other zones are untouched.
        assert_eq!(f.held(k(5, 9), true, t0 + ms(999)), None);
        assert_eq!(f.held(k(4, 8), false, t0 + ms(999)), None);
        // After the hold, one more failure holds it again, for 2 s.
        let t1 = t0 + ms(1000);
        assert_eq!(f.held(k(6, 9), false, t1), None);
        assert_eq!(f.failed(k(6, 9), t1), Some(Held::Zone));
        assert_eq!(f.held(k(7, 9), false, t1 + ms(1999)), Some(Held::Zone));
        assert_eq!(f.held(k(7, 9), false, t1 + ms(2000)), None);
    }

    #[test]
    fn a_zone_is_not_held_when_an_answer_comes_between_its_failures() {
        let t0 = Instant::now();
        let mut f = Failures::default();
        for round in 0..20 {
            f.failed(k(round * 3, 9), t0);
            f.failed(k(round * 3 + 1, 9), t0);
            f.answered(k(round * 3 + 2, 9));
        }
        assert_eq!(f.held(k(1000, 9), false, t0), None);
    }

    #[test]
    fn the_state_stays_bounded_under_endless_new_names_and_zones() {
        let t0 = Instant::now();
        let mut f = Failures::new(100);
        for n in 0..100_000u64 {
            f.failed(k(n, n / 3), t0);
            let (names, zones) = f.len();
            assert!(names <= 100 && zones <= 100, "{names} names, {zones} zones");
        }
        // Recently touched state survives: the last zone is held.
        assert_eq!(f.held(k(1, 99_999 / 3 - 1), false, t0), Some(Held::Zone));
    }

    #[test]
    fn a_touched_entry_survives_the_rotation_of_generations() {
        let t0 = Instant::now();
        let mut f = Failures::new(10);
        let kept = Keys {
            name: 7,
            zone: None,
        };
        f.failed(kept, t0);
        for n in 100..1000u64 {
            f.failed(
                Keys {
                    name: n,
                    zone: None,
                },
                t0,
            );
            if n % 4 == 0 {
                // Asked (and failing) now and then: kept.
                f.failed(kept, t0);
            }
        }
        assert_eq!(f.held(kept, false, t0), Some(Held::Name));
    }
}
