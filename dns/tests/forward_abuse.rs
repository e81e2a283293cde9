//! Forwarding under abuse from one client, against the `oooi-dns` binary on
//! loopback: a test upstream that answers healthy zones at once, never
//! answers dead zones, answers NXDOMAIN under `nx.test` and answers names
//! under `slow.test` only after the server's timeout; many clients with
//! dnspython (`forward_abuse.py`, each from its own loopback address)
//! asking new names under healthy zones while one client abuses. No
//! healthy query may fail.
//!
//! Needs `python3` with dnspython (`tools/dev setup test` installs it).
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::VecDeque;
use std::net::{SocketAddr, UdpSocket};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::rdata::{A, SOA};
use hickory_proto::rr::{Name, RData, Record};
use support::start;

/// How long the upstream takes to answer names under `slow.test`: past
/// the server's 800 ms timeout.
const SLOW: Duration = Duration::from_millis(1200);

/// Queries the test upstream got, by kind.
#[derive(Default)]
struct Seen {
    healthy: AtomicUsize,
    dead: AtomicUsize,
    nx: AtomicUsize,
    slow: AtomicUsize,
    /// Queries for [`WARM`].
    warm: AtomicUsize,
}

/// A name one client asks every 0.1 s during the NXDOMAIN flood.
const WARM: &str = "warm.ok.test.";

/// Late answers waiting for their time: when, what, to whom; and the
/// signal that one was added.
type Delayed = Arc<(Mutex<VecDeque<(Instant, Vec<u8>, SocketAddr)>>, Condvar)>;

/// The test upstream; stopped and joined when dropped.
struct Upstream {
    addr: SocketAddr,
    seen: Arc<Seen>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    delayed: Delayed,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.delayed.1.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn response(q: &Message) -> Message {
    let mut r = Message::response(q.metadata.id, q.metadata.op_code);
    r.metadata.recursion_available = true;
    r.add_queries(q.queries.iter().cloned());
    r
}

impl Upstream {
    fn spawn(addr: &str) -> Upstream {
        let sock = Arc::new(UdpSocket::bind(addr).unwrap());
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let seen = Arc::new(Seen::default());
        let stop = Arc::new(AtomicBool::new(false));
        let delayed: Delayed = Arc::default();
        let dead = ["dead.test.", "dead1.test.", "dead2.test.", "dead3.test."]
            .map(|z| Name::from_ascii(z).unwrap());
        let nx = Name::from_ascii("nx.test.").unwrap();
        let slow = Name::from_ascii("slow.test.").unwrap();
        let warm = Name::from_ascii(WARM).unwrap();
        let answering = {
            let (sock, seen, stop, delayed) =
                (sock.clone(), seen.clone(), stop.clone(), delayed.clone());
            thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while !stop.load(Ordering::SeqCst) {
                    let Ok((n, from)) = sock.recv_from(&mut buf) else {
                        continue;
                    };
                    let Ok(q) = Message::from_vec(&buf[..n]) else {
                        continue;
                    };
                    let Some(name) = q.queries.first().map(|q| q.name().clone()) else {
                        continue;
                    };
                    let mut r = response(&q);
                    if dead.iter().any(|z| z.zone_of(&name)) {
                        // The zone's authority never answers.
                        seen.dead.fetch_add(1, Ordering::SeqCst);
                        continue;
                    }
                    if nx.zone_of(&name) {
                        seen.nx.fetch_add(1, Ordering::SeqCst);
                        r.metadata.response_code = ResponseCode::NXDomain;
                        r.add_authority(Record::from_rdata(
                            nx.clone(),
                            30,
                            RData::SOA(SOA::new(nx.clone(), nx.clone(), 1, 60, 60, 60, 30)),
                        ));
                    } else {
                        r.add_answer(Record::from_rdata(
                            name.clone(),
                            60,
                            RData::A(A::new(203, 0, 113, 9)),
                        ));
                    }
                    let Ok(bytes) = r.to_vec() else {
                        continue;
                    };
                    if slow.zone_of(&name) {
                        seen.slow.fetch_add(1, Ordering::SeqCst);
                        let (queue, wake) = &*delayed;
                        queue
                            .lock()
                            .unwrap()
                            .push_back((Instant::now() + SLOW, bytes, from));
                        wake.notify_one();
                        continue;
                    }
                    if !nx.zone_of(&name) {
                        seen.healthy.fetch_add(1, Ordering::SeqCst);
                    }
                    if name == warm {
                        seen.warm.fetch_add(1, Ordering::SeqCst);
                    }
                    let _ = sock.send_to(&bytes, from);
                }
            })
        };
        // Late answers of slow names, in order (they all wait as long).
        let late = {
            let (sock, stop, delayed) = (sock.clone(), stop.clone(), delayed.clone());
            thread::spawn(move || {
                let (queue, wake) = &*delayed;
                let mut q = queue.lock().unwrap();
                while !stop.load(Ordering::SeqCst) {
                    match q.front() {
                        Some((at, _, _)) if *at <= Instant::now() => {
                            let (_, bytes, to) = q.pop_front().unwrap();
                            let _ = sock.send_to(&bytes, to);
                        }
                        Some((at, _, _)) => {
                            let wait = at.saturating_duration_since(Instant::now());
                            q = wake.wait_timeout(q, wait).unwrap().0;
                        }
                        None => {
                            q = wake.wait_timeout(q, Duration::from_millis(100)).unwrap().0;
                        }
                    }
                }
            })
        };
        Upstream {
            addr: sock.local_addr().unwrap(),
            seen,
            stop,
            threads: vec![answering, late],
            delayed,
        }
    }
}

/// What the driver reports.
#[derive(Debug, serde::Deserialize)]
struct Report {
    ok: usize,
    failed: usize,
    failures: Vec<String>,
    /// Answers for [`WARM`] (in `failed` when not right).
    warm_ok: usize,
    attack_sent: usize,
    attack_answers: std::collections::HashMap<String, usize>,
}

/// One run: the test upstream, the server forwarding to it, and the
/// driver's clients for `duration` while one client runs `attack`.
struct Run {
    report: Report,
    upstream: Upstream,
    /// `/metrics` at the end.
    metrics: String,
}

/// The runs load the machine: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The driver's settings for one run.
struct Clients {
    attack: &'static str,
    clients: usize,
    interval: f64,
    duration: f64,
    /// Extra lines under `upstreams:` in the server's config.
    upstreams: &'static str,
    /// Ask [`WARM`] every 0.1 s too.
    warm: bool,
}

impl Clients {
    fn busy(attack: &'static str) -> Self {
        Clients {
            attack,
            clients: 200,
            interval: 0.5,
            duration: 8.0,
            upstreams: "",
            warm: false,
        }
    }

    fn quiet(attack: &'static str) -> Self {
        Clients {
            clients: 5,
            interval: 1.0,
            ..Clients::busy(attack)
        }
    }
}

fn run(n: u16, c: Clients) -> Run {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::spawn(&format!("127.0.0.41:{}", 25700 + n));
    let listen = format!("127.0.0.40:{}", 25700 + n);
    let http = format!("127.0.0.40:{}", 25750 + n);
    let config = format!(
        "http: {http}\nupstreams:\n  servers: [\"{}\"]\n  timeout_ms: 800\n{}views:\n  - name: default\n    kind: pod\n    listen: [\"{listen}\"]\n",
        upstream.addr, c.upstreams
    );
    let _server = start(dir.path(), &config);
    let mut driver = Command::new("python3");
    driver
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/forward_abuse.py"
        ))
        .args(["--server", &listen, "--attack", c.attack])
        .args(["--clients", &c.clients.to_string()])
        .args(["--interval", &c.interval.to_string()])
        .args(["--duration", &c.duration.to_string()]);
    if c.warm {
        driver.args(["--warm", WARM]);
    }
    let out = driver
        .output()
        .expect("python3 is required, with dnspython (tools/dev setup test)");
    assert!(
        out.status.success(),
        "driver failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    let metrics = support::http_get(&http, "/metrics");
    eprintln!(
        "{}, {} clients: {} ok, {} failed ({} answers for the warm name), attacker sent {} and got {:?}",
        c.attack,
        c.clients,
        report.ok,
        report.failed,
        report.warm_ok,
        report.attack_sent,
        report.attack_answers
    );
    Run {
        report,
        upstream,
        metrics,
    }
}

impl Run {
    fn metric(&self, series: &str) -> f64 {
        self.metrics
            .lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {series} in\n{}", self.metrics))
    }

    /// No healthy query failed, and enough were asked to mean something.
    fn assert_no_healthy_failure(&self, at_least: usize) {
        let r = &self.report;
        assert_eq!(
            r.failed,
            0,
            "{} of {} healthy queries failed, e.g. {:?}",
            r.failed,
            r.ok + r.failed,
            r.failures
        );
        assert!(r.ok >= at_least, "only {} healthy answers", r.ok);
        assert!(
            self.upstream.seen.healthy.load(Ordering::SeqCst) >= r.ok,
            "healthy names were not forwarded"
        );
        let up = format!(
            "oooi_dns_upstream_up{{upstream=\"{}\"}}",
            self.upstream.addr
        );
        assert_eq!(self.metric(&up), 1.0);
    }
}

/// The finding: three simultaneous queries for random labels under a dead
/// zone met "three different names failed in a row" and took the only
/// upstream down, failing 18.8% of 200 busy clients' queries. The upstream
/// answered the other clients all along, so these timeouts are the dead
/// zone's: it is held (its new names get SERVFAIL at once) and nothing else.
#[test]
fn three_dead_zone_names_every_800_ms_fail_no_query_of_200_busy_clients() {
    let r = run(0, Clients::busy("dead-zone"));
    r.assert_no_healthy_failure(1500);
    assert!(r.upstream.seen.dead.load(Ordering::SeqCst) >= 3);
    assert!(
        r.report
            .attack_answers
            .get("SERVFAIL")
            .copied()
            .unwrap_or(0)
            > 0
    );
    let held = "oooi_dns_forward_held_total{scope=\"zone\"}";
    assert!(r.metric(held) > 0.0, "the dead zone was never held");
    let blamed = format!(
        "oooi_dns_upstream_unanswered_total{{upstream=\"{}\",blame=\"query\"}}",
        r.upstream.addr
    );
    assert!(r.metric(&blamed) > 0.0);
}

/// The same on a quiet VLAN (46.7% failed): nobody else speaks to the
/// upstream while the dead zone's queries time out, so the silence cannot
/// be told from a dead upstream's, but it is one zone: the upstream stays
/// up.
#[test]
fn three_dead_zone_names_every_800_ms_fail_no_query_on_a_quiet_vlan() {
    let r = run(1, Clients::quiet("dead-zone"));
    r.assert_no_healthy_failure(25);
    assert!(r.upstream.seen.dead.load(Ordering::SeqCst) >= 9);
}

/// Random labels under three unrelated dead zones at once, on a quiet
/// VLAN: the upstream may well count as down (it is silent across
/// unrelated zones), but as the only upstream it is still asked, so no
/// healthy query fails.
#[test]
fn three_unrelated_dead_zones_on_a_quiet_vlan_fail_no_healthy_query() {
    let r = run(2, Clients::quiet("dead-zones"));
    let rep = &r.report;
    assert_eq!(rep.failed, 0, "{:?}", rep.failures);
    assert!(rep.ok >= 25, "only {} healthy answers", rep.ok);
    assert!(r.upstream.seen.dead.load(Ordering::SeqCst) >= 9);
}

/// Random labels under three unrelated dead zones with 200 busy clients:
/// the upstream answers the others all along, so every timeout is blamed
/// on its query and each dead zone is held on its own; the upstream ends
/// up.
#[test]
fn three_unrelated_dead_zones_fail_no_query_of_200_busy_clients() {
    let r = run(5, Clients::busy("dead-zones"));
    r.assert_no_healthy_failure(1500);
    assert!(r.metric("oooi_dns_forward_holds_total{scope=\"zone\"}") >= 3.0);
}

/// One client asks random names under a zone that answers NXDOMAIN as
/// fast as the answers come: every NXDOMAIN is an answer, so the upstream
/// stays up and nothing is held. The flood overflows the answer cache (1000
/// entries here) many times, yet a name in use stays cached: the upstream
/// is asked for it once (it used to be emptied whole, and every emptying
/// sent the name to the upstream again and lost its stale fallback).
#[test]
fn an_nxdomain_flood_fails_no_query_of_200_busy_clients_and_keeps_used_answers() {
    let r = run(
        3,
        Clients {
            upstreams: "  cache_entries: 1000\n",
            warm: true,
            ..Clients::busy("nxdomain-flood")
        },
    );
    r.assert_no_healthy_failure(1500);
    assert!(
        r.report.warm_ok >= 10,
        "{} answers for {WARM}",
        r.report.warm_ok
    );
    assert_eq!(r.upstream.seen.warm.load(Ordering::SeqCst), 1);
    let nx = r
        .report
        .attack_answers
        .get("NXDOMAIN")
        .copied()
        .unwrap_or(0);
    assert!(nx >= 1500, "the flood got {nx} NXDOMAIN answers");
    assert!(r.upstream.seen.nx.load(Ordering::SeqCst) >= 1500);
    assert_eq!(r.metric("oooi_dns_forward_held_total{scope=\"zone\"}"), 0.0);
}

/// One client sends 400 slow names at once every 0.8 s (answered only
/// after the timeout) and one slow name again and again: it holds at most
/// its share of the queries in progress (the rest are dropped and
/// counted), the slow zone and the slow name are held, and the other
/// clients' names are forwarded and answered.
#[test]
fn a_flood_of_slow_names_from_one_client_fails_no_query_of_200_busy_clients() {
    let r = run(4, Clients::busy("slow-flood"));
    r.assert_no_healthy_failure(1500);
    assert!(r.upstream.seen.slow.load(Ordering::SeqCst) >= 3);
    assert!(
        r.metric("oooi_dns_client_limited_queries_total") > 0.0,
        "the client's share was never full"
    );
    assert!(r.metric("oooi_dns_forward_held_total{scope=\"zone\"}") > 0.0);
    assert!(r.metric("oooi_dns_forward_held_total{scope=\"name\"}") > 0.0);
}
