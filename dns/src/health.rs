//! Health-aware answers, the pure part: the state of each checked address
//! ([`Board`]), and the config as answered while some addresses are down
//! ([`answered`]). The checks themselves run in [`crate::health_checks`].
//!
//! An address goes down after `fall` failed checks in a row and comes back
//! after `rise` passed ones; a new or changed check starts up, so a config
//! without checks, or before the first result, answers as it always did. A
//! down address is left out of every answer, unless that would leave the
//! answer with no address of its family: then all are answered, since a
//! proxy that only seems down beats no answer.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::config::{CheckTarget, Config, HealthCheck, RecordSet};

/// A change of a checked address's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// The address in answers.
    pub address: IpAddr,
    /// Its check.
    pub target: CheckTarget,
    /// Whether it is up now.
    pub up: bool,
    /// How long it was in the state it left.
    pub after: Duration,
    /// Checks in a row that decided it.
    pub streak: u32,
    /// The last check's failure, when it went down.
    pub reason: Option<String>,
}

#[derive(Debug, Clone)]
struct State {
    target: CheckTarget,
    up: bool,
    /// Results in a row that disagree with `up`.
    streak: u32,
    since: Instant,
}

/// The state of every checked address.
#[derive(Debug, Default)]
pub struct Board {
    states: BTreeMap<IpAddr, State>,
}

impl Board {
    /// Follows the config's checks: new addresses (or addresses whose check
    /// changed) start up, addresses no longer checked are forgotten.
    pub fn sync(&mut self, checks: &[HealthCheck], now: Instant) {
        self.states.retain(|a, s| {
            checks
                .iter()
                .any(|c| c.address == *a && c.target == s.target)
        });
        for c in checks {
            self.states.entry(c.address).or_insert_with(|| State {
                target: c.target.clone(),
                up: true,
                streak: 0,
                since: now,
            });
        }
    }

    /// Records one check of `address` at `now` (`Err` carries why it
    /// failed); returns the transition it causes, if any.
    pub fn observe(
        &mut self,
        address: IpAddr,
        result: Result<(), String>,
        now: Instant,
        fall: u32,
        rise: u32,
    ) -> Option<Transition> {
        let s = self.states.get_mut(&address)?;
        let ok = result.is_ok();
        if ok == s.up {
            s.streak = 0;
            return None;
        }
        s.streak += 1;
        let needed = if s.up { fall } else { rise };
        if s.streak < needed {
            return None;
        }
        let t = Transition {
            address,
            target: s.target.clone(),
            up: ok,
            after: now.saturating_duration_since(s.since),
            streak: s.streak,
            reason: result.err(),
        };
        s.up = ok;
        s.streak = 0;
        s.since = now;
        Some(t)
    }

    /// The addresses that are down.
    pub fn down(&self) -> BTreeSet<IpAddr> {
        self.states
            .iter()
            .filter(|(_, s)| !s.up)
            .map(|(a, _)| *a)
            .collect()
    }
}

/// Keeps the addresses of `set` that are not `down`, per family; a family
/// left with none keeps all of them.
fn live(set: &mut RecordSet, down: &BTreeSet<IpAddr>) {
    let a: Vec<_> = set
        .a
        .iter()
        .copied()
        .filter(|a| !down.contains(&IpAddr::V4(*a)))
        .collect();
    if !a.is_empty() {
        set.a = a;
    }
    let aaaa: Vec<_> = set
        .aaaa
        .iter()
        .copied()
        .filter(|a| !down.contains(&IpAddr::V6(*a)))
        .collect();
    if !aaaa.is_empty() {
        set.aaaa = aaaa;
    }
}

/// `config` as answered while the `down` addresses are down: every record
/// set without them, unless none of its family would be left.
pub fn answered(config: &Config, down: &BTreeSet<IpAddr>) -> Config {
    let mut c = config.clone();
    if down.is_empty() {
        return c;
    }
    for v in &mut c.views {
        for set in v.hosts.values_mut() {
            live(set, down);
        }
        for z in &mut v.zones {
            for set in z.records.values_mut() {
                live(set, down);
            }
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answer::{Answer, answer};
    use hickory_proto::rr::{LowerName, Name, RecordType};
    use std::str::FromStr;

    fn check(address: &str, port: u16) -> HealthCheck {
        HealthCheck {
            address: address.parse().expect("ip"),
            target: CheckTarget::Tcp {
                host: "127.0.0.1".to_string(),
                port,
            },
        }
    }

    const A: &str = "192.0.2.4";
    const B: &str = "192.0.2.5";

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn an_address_goes_down_after_fall_failures_and_back_after_rise_passes() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut b = Board::default();
        b.sync(&[check(A, 1), check(B, 2)], t0);
        assert!(b.down().is_empty(), "checked addresses start up");
        // fall = 2: one failure is not enough, a pass resets the count.
        assert_eq!(b.observe(ip(A), Err("refused".into()), at(1), 2, 2), None);
        assert_eq!(b.observe(ip(A), Ok(()), at(2), 2, 2), None);
        assert_eq!(b.observe(ip(A), Err("refused".into()), at(3), 2, 2), None);
        let t = b
            .observe(ip(A), Err("refused".into()), at(4), 2, 2)
            .expect("down");
        assert!(!t.up);
        assert_eq!(t.after, Duration::from_secs(4));
        assert_eq!(t.reason.as_deref(), Some("refused"));
        assert_eq!(b.down(), BTreeSet::from([ip(A)]));
        assert_eq!(b.observe(ip(A), Ok(()), at(5), 2, 2), None);
        let t = b.observe(ip(A), Ok(()), at(6), 2, 2).expect("up");
        assert!(t.up);
        assert_eq!(t.after, Duration::from_secs(2), "down since the 4th second");
        assert!(b.down().is_empty());
        // Results for unchecked addresses are ignored.
        assert_eq!(
            b.observe(ip("192.0.2.99"), Err("x".into()), at(7), 1, 1),
            None
        );
    }

    #[test]
    fn a_changed_or_removed_check_forgets_the_old_state() {
        let t0 = Instant::now();
        let mut b = Board::default();
        b.sync(&[check(A, 1)], t0);
        b.observe(ip(A), Err("refused".into()), t0, 1, 1);
        assert_eq!(b.down().len(), 1);
        b.sync(&[check(A, 9)], t0);
        assert!(b.down().is_empty(), "a new target starts up");
        b.observe(ip(A), Err("refused".into()), t0, 1, 1);
        b.sync(&[], t0);
        assert!(b.down().is_empty());
    }

    const CFG: &str = r#"
clusters:
  - name: c1
    base_domain: example.com
    proxy: [192.0.2.4, 192.0.2.5, "2001:db8::4"]
views:
  - name: vlan
    kind: vlan
    listen: ["127.0.0.2:5353"]
"#;

    fn addrs(c: &Config, name: &str, t: RecordType) -> Vec<IpAddr> {
        let n = LowerName::new(&Name::from_str(name).expect("name"));
        match answer(&c.views[0], &n, t) {
            Answer::Records { addrs, .. } => addrs,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn down_addresses_leave_every_answer_but_never_the_last_of_a_family() {
        let c = Config::parse(CFG).expect("config");
        let one_down = answered(&c, &BTreeSet::from([ip(A)]));
        for name in ["api.c1.example.com.", "kubernetes.default.svc."] {
            assert_eq!(addrs(&one_down, name, RecordType::A), vec![ip(B)], "{name}");
        }
        // The AAAA side has one address, down: it stays.
        let all_down = answered(&c, &BTreeSet::from([ip(A), ip(B), ip("2001:db8::4")]));
        assert_eq!(
            addrs(&all_down, "api.c1.example.com.", RecordType::A),
            vec![ip(A), ip(B)],
            "every proxy seems down: all are answered"
        );
        assert_eq!(
            addrs(&all_down, "api.c1.example.com.", RecordType::AAAA),
            vec![ip("2001:db8::4")]
        );
        assert_eq!(answered(&c, &BTreeSet::new()), c);
    }
}
