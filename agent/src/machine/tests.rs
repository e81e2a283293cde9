//! Scenario tests of the ownership machine: several machines joined by a
//! simulated VLAN whose links, losses, duplicates and delays each test
//! sets, stepped in 5 ms of simulated time.

use super::*;
use std::collections::BTreeSet;

const GROUP: u64 = 0x0a0b;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn mac(i: usize) -> [u8; 6] {
    [2, 0, 0, 0, 0, i as u8 + 1]
}

/// One simulated replica.
struct Node {
    m: Machine,
    /// Its process runs (false: frozen or gone; its state stays).
    running: bool,
    ready: bool,
    next_tick: Instant,
    /// Addresses on its interface.
    on: BTreeSet<usize>,
    incarnation: u64,
}

/// One step: when, per address who announces it, per address who has it.
type Record = (Instant, Vec<BTreeSet<usize>>, Vec<BTreeSet<usize>>);

struct Sim {
    t0: Instant,
    now: Instant,
    timing: Timing,
    nodes: Vec<Node>,
    /// `link[i][j]`: frames from i reach j.
    link: Vec<Vec<bool>>,
    /// `visible[i]`: frames from i reach the workers (its sending leg works).
    visible: Vec<bool>,
    /// Frames in flight: (delivery time, to, from, advert).
    queue: Vec<(Instant, usize, usize, Advert)>,
    delay: Duration,
    /// Drop one frame in `loss` (0: none), duplicate one in `dup`, both
    /// chosen by a fixed pseudo-random sequence.
    loss: u64,
    dup: u64,
    sent: usize,
    rng: u64,
    /// Per step: per address, who announces it (holds, with a working
    /// sending leg) and who has it on the interface.
    log: Vec<Record>,
}

impl Sim {
    fn new(n: usize) -> Sim {
        let t0 = Instant::now();
        let timing = Timing::default();
        let nodes = (0..n)
            .map(|i| Node {
                m: Machine::new(i, n, GROUP, 100 + i as u64, timing, t0).unwrap(),
                running: true,
                ready: true,
                // Replicas do not tick in step.
                next_tick: t0 + ms(7 * i as u64),
                on: BTreeSet::new(),
                incarnation: 100 + i as u64,
            })
            .collect();
        Sim {
            t0,
            now: t0,
            timing,
            nodes,
            link: vec![vec![true; n]; n],
            visible: vec![true; n],
            queue: Vec::new(),
            delay: ms(1),
            loss: 0,
            dup: 0,
            sent: 0,
            rng: 0x9e37_79b9_7f4a_7c15,
            log: Vec::new(),
        }
    }

    fn apply(&mut self, i: usize, acts: Vec<(usize, NetAction)>) -> bool {
        let changed = !acts.is_empty();
        for (k, a) in acts {
            match a {
                NetAction::Add => {
                    assert!(self.nodes[i].on.insert(k), "{i} added {k} twice");
                }
                NetAction::Announce => assert!(self.nodes[i].on.contains(&k)),
                NetAction::Remove(_) => {
                    self.nodes[i].on.remove(&k);
                }
            }
        }
        changed
    }

    fn send(&mut self, i: usize) {
        let a = self.nodes[i].m.advert(self.now);
        for j in 0..self.nodes.len() {
            if j == i || !self.link[i][j] {
                continue;
            }
            self.sent += 1;
            if self.loss > 0 && self.random().is_multiple_of(self.loss) {
                continue;
            }
            self.queue.push((self.now + self.delay, j, i, a));
            if self.dup > 0 && self.random().is_multiple_of(self.dup) {
                self.queue.push((self.now + self.delay * 3, j, i, a));
            }
        }
    }

    fn random(&mut self) -> u64 {
        // xorshift64: reproducible, no dependency.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    fn step(&mut self) {
        self.now += ms(5);
        let now = self.now;
        let (due, rest): (Vec<_>, Vec<_>) = self.queue.drain(..).partition(|q| q.0 <= now);
        self.queue = rest;
        for (_, to, from, a) in due {
            if !self.nodes[to].running {
                continue;
            }
            if self.nodes[to].m.receive(now, mac(from), &a).is_ok() {
                let ready = self.nodes[to].ready;
                let acts = self.nodes[to].m.tick(now, ready);
                if self.apply(to, acts) {
                    self.send(to);
                }
            }
        }
        for i in 0..self.nodes.len() {
            if !self.nodes[i].running || now < self.nodes[i].next_tick {
                continue;
            }
            self.nodes[i].next_tick = now + self.timing.interval;
            let ready = self.nodes[i].ready;
            let acts = self.nodes[i].m.tick(now, ready);
            self.apply(i, acts);
            self.send(i);
        }
        let n = self.nodes.len();
        let mut announcing = vec![BTreeSet::new(); n];
        let mut on = vec![BTreeSet::new(); n];
        for (i, node) in self.nodes.iter().enumerate() {
            for &k in &node.on {
                on[k].insert(i);
                if node.running && node.m.holds_address(k) && self.visible[i] {
                    announcing[k].insert(i);
                }
            }
        }
        self.log.push((now, announcing, on));
    }

    fn run(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now < end {
            self.step();
        }
    }

    fn holders(&self, k: usize) -> BTreeSet<usize> {
        self.log.last().map(|l| l.1[k].clone()).unwrap_or_default()
    }

    /// Runs until address `k` is announced by `who` alone; returns the time.
    fn until_held_by(&mut self, k: usize, who: usize, limit: Duration) -> Option<Duration> {
        let start = self.now;
        while self.now < start + limit {
            self.step();
            if self.holders(k) == BTreeSet::from([who]) && self.nodes[who].on.contains(&k) {
                return Some(self.now - start);
            }
        }
        None
    }

    /// From `since`: the longest stretch with two announcers of one address.
    fn longest_double(&self, since: Instant) -> Duration {
        let mut worst = Duration::ZERO;
        for k in 0..self.nodes.len() {
            let mut start: Option<Instant> = None;
            for (t, ann, _) in self.log.iter().filter(|l| l.0 >= since) {
                if ann[k].len() > 1 {
                    let s = *start.get_or_insert(*t);
                    worst = worst.max(*t - s);
                } else {
                    start = None;
                }
            }
        }
        worst
    }

    /// From `since`: the longest stretch with nobody having address `k` on
    /// its interface.
    fn longest_gap(&self, k: usize, since: Instant) -> Duration {
        let mut worst = Duration::ZERO;
        let mut start: Option<Instant> = None;
        for (t, _, on) in self.log.iter().filter(|l| l.0 >= since) {
            if on[k].is_empty() {
                let s = *start.get_or_insert(*t);
                worst = worst.max(*t - s);
            } else {
                start = None;
            }
        }
        worst
    }

    /// Every address held by its home alone.
    fn settled_home(&self) -> bool {
        (0..self.nodes.len()).all(|k| self.holders(k) == BTreeSet::from([k]))
    }

    fn cut(&mut self, i: usize, tx: bool, rx: bool) {
        if tx {
            self.visible[i] = false;
        }
        for j in 0..self.nodes.len() {
            if j != i {
                if tx {
                    self.link[i][j] = false;
                }
                if rx {
                    self.link[j][i] = false;
                }
            }
        }
    }

    fn heal(&mut self) {
        let n = self.nodes.len();
        self.link = vec![vec![true; n]; n];
        self.visible = vec![true; n];
    }

    /// A fresh process for replica `i` (new incarnation, nothing held).
    fn restart(&mut self, i: usize) {
        let n = self.nodes.len();
        self.nodes[i].incarnation += 1000;
        self.nodes[i].m = Machine::new(
            i,
            n,
            GROUP,
            self.nodes[i].incarnation,
            self.timing,
            self.now,
        )
        .unwrap();
        self.nodes[i].on.clear();
        self.nodes[i].running = true;
    }
}

fn started(n: usize) -> Sim {
    let mut s = Sim::new(n);
    s.run(ms(3000));
    assert!(s.settled_home(), "cold start: {:?}", s.log.last());
    s
}

#[test]
fn timing_refuses_an_interval_of_zero_and_a_dead_time_the_lifetime_cannot_fit() {
    assert_eq!(
        Timing::new(ms(0), ms(1200), ms(2000), ms(1000)),
        Err(TimingError::ZeroInterval)
    );
    let e = Timing::new(ms(200), ms(1100), ms(2000), ms(1000)).unwrap_err();
    assert!(e.to_string().contains("--dead-after"), "{e}");
    let t = Timing::new(ms(200), ms(1200), ms(2000), ms(1000)).unwrap();
    assert_eq!(t, Timing::default());
    assert_eq!(
        Timing::new(ms(300), ms(2500), ms(2000), ms(1000))
            .unwrap()
            .lifetime,
        ms(2000)
    );
}

#[test]
fn replica_counts_beyond_the_advert_bit_sets_are_refused() {
    let t0 = Instant::now();
    assert!(Machine::new(0, 0, GROUP, 1, Timing::default(), t0).is_err());
    assert!(Machine::new(3, 3, GROUP, 1, Timing::default(), t0).is_err());
    assert!(Machine::new(0, 65, GROUP, 1, Timing::default(), t0).is_err());
    assert!(Machine::new(63, 64, GROUP, 1, Timing::default(), t0).is_ok());
}

#[test]
fn at_cold_start_each_replica_takes_its_home_after_listening_and_nothing_else() {
    let mut s = Sim::new(3);
    s.run(ms(1150));
    assert!(
        s.nodes.iter().all(|n| n.on.is_empty()),
        "nothing taken while listening"
    );
    s.run(ms(300));
    assert!(s.settled_home(), "{:?}", s.log.last());
    assert_eq!(s.longest_double(s.t0), Duration::ZERO);
    for n in &s.nodes {
        assert_eq!(n.on.len(), 1, "never a neighbour's address at start");
    }
}

#[test]
fn a_lost_replicas_address_moves_to_its_successor_within_dead_after_and_an_interval() {
    let mut s = started(3);
    s.nodes[0].running = false; // node loss: nothing more from it
    let took = s.until_held_by(0, 1, ms(3000)).expect("replica 1 takes it");
    assert!(
        took <= s.timing.dead_after + s.timing.interval + ms(10),
        "{took:?}"
    );
    // Replica 2 keeps its own and does not touch address 0.
    s.run(ms(2000));
    assert_eq!(s.holders(0), BTreeSet::from([1]));
    assert_eq!(s.holders(2), BTreeSet::from([2]));
}

#[test]
fn the_second_successor_takes_over_when_the_first_is_lost_too() {
    let mut s = started(3);
    s.nodes[0].running = false;
    s.nodes[1].running = false;
    s.run(ms(2000));
    for k in 0..3 {
        assert_eq!(s.holders(k), BTreeSet::from([2]), "address {k}");
    }
}

#[test]
fn a_returning_replica_gets_its_home_back_make_before_break() {
    let mut s = started(2);
    s.nodes[0].running = false;
    s.until_held_by(0, 1, ms(3000)).unwrap();
    s.run(ms(500));
    s.restart(0);
    let back = s.now;
    let took = s.until_held_by(0, 0, ms(6000)).expect("home again");
    // Listening, then ready for home_ready_for plus its margin.
    assert!(took >= s.timing.home_ready_for, "{took:?}");
    assert!(took <= ms(3500), "{took:?}");
    assert_eq!(
        s.longest_gap(0, back),
        Duration::ZERO,
        "make before break: always on somewhere"
    );
    assert!(
        s.longest_double(back) <= s.timing.interval,
        "{:?}",
        s.longest_double(back)
    );
    s.run(ms(2000));
    assert!(s.settled_home());
}

#[test]
fn an_unready_replica_hands_its_address_on_and_gets_it_back_when_ready() {
    let mut s = started(2);
    let t = s.now;
    s.nodes[0].ready = false;
    let took = s.until_held_by(0, 1, ms(2000)).unwrap();
    assert!(took <= s.timing.interval * 2, "{took:?}");
    s.run(ms(20));
    assert_eq!(s.longest_gap(0, t), Duration::ZERO);
    assert!(!s.nodes[0].on.contains(&0), "handed over, removed");
    let t = s.now;
    s.nodes[0].ready = true;
    let took = s.until_held_by(0, 0, ms(5000)).unwrap();
    assert!(took >= s.timing.home_ready_for, "{took:?}");
    assert_eq!(s.longest_gap(0, t), Duration::ZERO);
}

#[test]
fn a_replica_that_nobody_can_replace_drains_and_drops_when_unready() {
    let mut s = started(2);
    s.nodes[1].ready = false;
    s.nodes[0].ready = false;
    s.run(ms(1500));
    assert!(s.nodes.iter().all(|n| n.on.is_empty()));
}

#[test]
fn gray_failure_both_ways_moves_the_address_and_heals_with_one_brief_overlap() {
    let mut s = started(2);
    s.cut(0, true, true);
    let took = s.until_held_by(0, 1, ms(3000)).expect("moved");
    assert!(took <= ms(1500), "{took:?}");
    s.run(ms(5000));
    // Replica 0 cannot be seen: it holds both, invisibly.
    assert_eq!(s.holders(0), BTreeSet::from([1]));
    assert_eq!(s.holders(1), BTreeSet::from([1]));
    let healed = s.now;
    s.heal();
    s.run(ms(3000));
    assert!(s.settled_home(), "{:?}", s.log.last());
    let double = s.longest_double(healed);
    assert!(double <= 2 * s.timing.interval, "{double:?}");
    assert_eq!(s.longest_gap(0, healed), Duration::ZERO);
    assert_eq!(s.longest_gap(1, healed), Duration::ZERO);
}

#[test]
fn a_replica_that_cannot_receive_is_eligible_to_nobody() {
    // Replica 0's leg drops what comes in; what it sends still arrives,
    // so the others hear it but read in its adverts that it hears nobody.
    let mut s = started(2);
    s.cut(0, false, true);
    let took = s.until_held_by(0, 1, ms(3000)).map(|d| d.as_millis());
    // Replica 0 still announces (it cannot learn better): the defence on
    // replica 1 answers each of those; the machine of replica 1 owns both.
    assert!(took.is_none(), "replica 0 still claims, visibly");
    assert!(s.nodes[1].m.holds_address(0) && s.nodes[1].m.holds_address(1));
    assert_eq!(s.nodes[1].m.owner(0, s.now), Some(1));
    s.heal();
    s.run(ms(4000));
    assert!(s.settled_home());
}

#[test]
fn a_replica_that_cannot_send_loses_its_addresses_to_the_others() {
    let mut s = started(2);
    s.cut(0, true, false);
    let took = s.until_held_by(0, 1, ms(3000)).expect("moved");
    assert!(took <= ms(1500), "{took:?}");
    // Replica 0 hears that replica 1 no longer hears it.
    s.run(ms(300));
    assert_eq!(s.nodes[0].m.owner(1, s.now), Some(0));
    s.heal();
    s.run(ms(4000));
    assert!(s.settled_home());
}

#[test]
fn lost_duplicated_and_delayed_adverts_move_nothing() {
    let mut s = started(3);
    let t = s.now;
    s.loss = 3; // one frame in three lost
    s.dup = 4; // one in four twice, the copy late (reordered)
    s.delay = ms(60);
    s.run(ms(30_000));
    assert!(s.settled_home(), "{:?}", s.log.last());
    for k in 0..3 {
        assert_eq!(s.longest_gap(k, t), Duration::ZERO);
    }
    assert_eq!(s.longest_double(t), Duration::ZERO);
}

#[test]
fn a_link_cut_one_way_between_two_of_three_replicas_leaves_one_holder_each() {
    for (from, to) in [(2, 0), (0, 2), (1, 2), (0, 1)] {
        let mut s = started(3);
        let t = s.now;
        s.link[from][to] = false;
        s.run(ms(5000));
        assert!(s.settled_home(), "{from}->{to} cut: {:?}", s.log.last());
        assert!(
            s.longest_double(t) <= 2 * s.timing.interval,
            "{from}->{to} cut: {:?}",
            s.longest_double(t)
        );
        for k in 0..3 {
            assert_eq!(s.longest_gap(k, t), Duration::ZERO);
        }
    }
}

#[test]
fn duplicates_and_older_adverts_are_refused_and_change_nothing() {
    let t0 = Instant::now();
    let timing = Timing::default();
    let mut a = Machine::new(0, 2, GROUP, 1, timing, t0).unwrap();
    let mut b = Machine::new(1, 2, GROUP, 2, timing, t0).unwrap();
    b.tick(t0, true);
    let first = b.advert(t0);
    let second = b.advert(t0 + ms(200));
    assert_eq!(a.receive(t0 + ms(201), mac(1), &second), Ok(()));
    assert_eq!(
        a.receive(t0 + ms(202), mac(1), &second),
        Err(Rejected::Stale)
    );
    assert_eq!(
        a.receive(t0 + ms(203), mac(1), &first),
        Err(Rejected::Stale)
    );
    // A stale advert does not keep a peer alive.
    assert!(a.alive(1, t0 + ms(201) + timing.dead_after - ms(1)));
    a.receive(t0 + ms(1000), mac(1), &first).unwrap_err();
    assert!(!a.alive(1, t0 + ms(201) + timing.dead_after));
    // Same incarnation from another MAC, own index, unknown index, a
    // broadcast sender.
    let third = b.advert(t0 + ms(400));
    assert_eq!(a.receive(t0 + ms(401), mac(5), &third), Err(Rejected::Mac));
    let mut own = third;
    own.from = 0;
    assert_eq!(a.receive(t0 + ms(401), mac(1), &own), Err(Rejected::Own));
    let mut unknown = third;
    unknown.from = 7;
    assert_eq!(
        a.receive(t0 + ms(401), mac(1), &unknown),
        Err(Rejected::Unknown)
    );
    assert_eq!(
        a.receive(t0 + ms(401), [0xff; 6], &third),
        Err(Rejected::NotAHost)
    );
    assert_eq!(
        a.receive(t0 + ms(401), [0x01, 0, 0x5e, 0, 0, 1], &third),
        Err(Rejected::NotAHost)
    );
}

#[test]
fn a_restarted_peer_is_followed_and_its_old_incarnations_late_frames_are_refused() {
    let t0 = Instant::now();
    let timing = Timing::default();
    let mut a = Machine::new(0, 2, GROUP, 1, timing, t0).unwrap();
    let mut old = Machine::new(1, 2, GROUP, 2, timing, t0).unwrap();
    let mut new = Machine::new(1, 2, GROUP, 3, timing, t0).unwrap();
    let late = old.advert(t0);
    let o2 = old.advert(t0 + ms(1));
    a.receive(t0 + ms(2), mac(1), &o2).unwrap();
    let n1 = new.advert(t0 + ms(10));
    // A new incarnation starts at sequence 1 and may come from a new MAC.
    assert_eq!(a.receive(t0 + ms(11), mac(9), &n1), Ok(()));
    assert_eq!(
        a.receive(t0 + ms(12), mac(1), &late),
        Err(Rejected::Retired)
    );
}

#[test]
fn a_frozen_replica_drops_everything_on_waking_and_listens_before_taking_again() {
    let mut s = started(2);
    s.nodes[0].running = false; // SIGSTOP, or a clock that jumps ahead
    s.until_held_by(0, 1, ms(3000)).unwrap();
    s.run(ms(2000));
    let woke = s.now;
    s.nodes[0].running = true;
    s.nodes[0].next_tick = s.now;
    s.step();
    assert!(s.nodes[0].on.is_empty(), "dropped on waking");
    // Its stale view says replica 1 is dead: it must not take address 1.
    s.run(ms(1500));
    assert!(!s.nodes[0].on.contains(&1));
    assert_eq!(s.holders(1), BTreeSet::from([1]));
    // Then the ordinary return home.
    s.until_held_by(0, 0, ms(5000)).unwrap();
    assert_eq!(s.longest_gap(0, woke), Duration::ZERO);
}

#[test]
fn a_short_stall_below_the_lifetime_changes_nothing() {
    let mut s = started(2);
    s.nodes[0].running = false;
    s.run(ms(700));
    s.nodes[0].running = true;
    let t = s.now;
    s.run(ms(2000));
    assert!(s.settled_home());
    assert_eq!(s.longest_gap(0, t), Duration::ZERO);
}

#[test]
fn a_backwards_clock_is_taken_as_no_time_passing() {
    let t0 = Instant::now() + ms(10_000);
    let timing = Timing::default();
    let mut a = Machine::new(0, 2, GROUP, 1, timing, t0).unwrap();
    a.tick(t0 + ms(1300), true);
    assert!(a.holds_address(0) && a.holds_address(1), "alone: both");
    // Time read earlier than the last tick: nothing moves, nothing panics.
    assert!(a.tick(t0 + ms(100), true).is_empty());
    assert!(a.holds_address(0));
}

#[test]
fn a_vlan_split_serves_each_side_and_heals_to_one_holder_per_address() {
    let mut s = started(3);
    // {0} | {1, 2}
    s.cut(0, true, true);
    s.run(ms(3000));
    // Each side holds every address for its own workers.
    assert_eq!(s.nodes[0].on, BTreeSet::from([0, 1, 2]));
    assert_eq!(s.holders(0), BTreeSet::from([1]));
    assert_eq!(s.holders(1), BTreeSet::from([1]));
    assert_eq!(s.holders(2), BTreeSet::from([2]));
    let healed = s.now;
    s.heal();
    s.run(ms(3000));
    assert!(s.settled_home(), "{:?}", s.log.last());
    assert!(s.longest_double(healed) <= 2 * s.timing.interval);
    for k in 0..3 {
        assert_eq!(s.longest_gap(k, healed), Duration::ZERO);
    }
}

#[test]
fn the_owner_is_the_same_in_every_agreeing_view() {
    let mut s = started(4);
    s.nodes[2].running = false;
    s.run(ms(3000));
    let now = s.now;
    for k in 0..4 {
        let owners: BTreeSet<_> = [0, 1, 3]
            .iter()
            .map(|&i| s.nodes[i].m.owner(k, now))
            .collect();
        assert_eq!(owners.len(), 1, "address {k}: {owners:?}");
    }
    assert_eq!(s.nodes[0].m.owner(2, now), Some(3));
}

#[test]
fn a_successor_keeps_an_address_it_holds_when_a_better_ranked_one_returns() {
    let mut s = started(3);
    s.nodes[0].running = false;
    s.nodes[1].running = false;
    s.run(ms(2000));
    assert_eq!(s.holders(0), BTreeSet::from([2]));
    // Replica 1 returns: address 0 stays with replica 2 (no extra move);
    // address 1 goes home.
    s.restart(1);
    s.run(ms(5000));
    assert_eq!(s.holders(0), BTreeSet::from([2]));
    assert_eq!(s.holders(1), BTreeSet::from([1]));
}

#[test]
fn the_advert_says_what_is_held_and_heard_and_readiness_only_after_listening() {
    let t0 = Instant::now();
    let timing = Timing::default();
    let mut a = Machine::new(0, 2, GROUP, 9, timing, t0).unwrap();
    let mut b = Machine::new(1, 2, GROUP, 8, timing, t0).unwrap();
    a.tick(t0, true);
    let ad = a.advert(t0);
    assert_eq!(
        (ad.ready, ad.listening, ad.held, ad.heard, ad.seq),
        (true, true, 0, 0, 1)
    );
    // Replica 1 is not ready: replica 0 takes both after listening.
    b.tick(t0, false);
    a.receive(t0 + ms(1), mac(1), &b.advert(t0)).unwrap();
    for t in (200..=1400).step_by(200) {
        a.tick(t0 + ms(t), true);
    }
    let ad = a.advert(t0 + ms(1400));
    assert_eq!(
        (ad.ready, ad.listening, ad.held, ad.heard),
        (true, false, 0b11, 0)
    );
    assert_eq!(ad.ready_for_ms, 1400);
    assert_eq!((ad.group, ad.from, ad.incarnation), (GROUP, 0, 9));
}
