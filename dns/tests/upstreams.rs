//! Forwarding under upstream trouble, against the `oooi-dns` binary with
//! `dig` and a Rust client on loopback: one slow name does not fail other
//! clients' names, the next upstream is tried and a silent one is then
//! skipped, and cached names are served stale while no upstream answers.
#![allow(clippy::unwrap_used)]

mod support;

use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{Name, RData, Record, RecordType, rdata::A};
use support::{dig, metric, start};

/// A test upstream on loopback: answers A queries with 203.0.113.9 and
/// `ttl`, except names under `slow.test.`, which it never answers (their
/// authority is "unreachable"), and nothing at all while `mute` is set.
struct Upstream {
    addr: String,
    mute: Arc<AtomicBool>,
    asked: Arc<AtomicUsize>,
}

impl Upstream {
    fn spawn(addr: &str, ttl: u32) -> Upstream {
        let sock = UdpSocket::bind(addr).expect("bind upstream");
        let mute = Arc::new(AtomicBool::new(false));
        let asked = Arc::new(AtomicUsize::new(0));
        let (m, a) = (mute.clone(), asked.clone());
        let slow = Name::from_ascii("slow.test.").unwrap();
        thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok((n, from)) = sock.recv_from(&mut buf) {
                let Ok(q) = Message::from_vec(&buf[..n]) else {
                    continue;
                };
                a.fetch_add(1, Ordering::SeqCst);
                if m.load(Ordering::SeqCst) {
                    continue;
                }
                let Some(query) = q.queries.first() else {
                    continue;
                };
                if slow.zone_of(query.name()) {
                    continue;
                }
                let mut r = Message::response(q.metadata.id, q.metadata.op_code);
                r.metadata.recursion_available = true;
                r.add_query(query.clone());
                r.add_answer(Record::from_rdata(
                    query.name().clone(),
                    ttl,
                    RData::A(A::new(203, 0, 113, 9)),
                ));
                if let Ok(bytes) = r.to_vec() {
                    let _ = sock.send_to(&bytes, from);
                }
            }
        });
        Upstream {
            addr: addr.to_string(),
            mute,
            asked,
        }
    }
}

fn config(upstreams: &[&str], extra: &str, listen: &str, http: &str) -> String {
    let servers: Vec<String> = upstreams.iter().map(|u| format!("\"{u}\"")).collect();
    format!(
        "http: {http}\nupstreams:\n  servers: [{}]\n  timeout_ms: 800\n{extra}views:\n  - name: default\n    kind: pod\n    listen: [\"{listen}\"]\n",
        servers.join(", ")
    )
}

/// One A query over UDP with a random ID; the response code, or None when
/// no answer came within `wait`.
fn ask(server: &str, name: &str, wait: Duration) -> Option<(ResponseCode, Message)> {
    let mut m = Message::query();
    m.metadata.id = rand_id();
    m.metadata.recursion_desired = true;
    m.add_query(hickory_proto::op::Query::query(
        Name::from_ascii(name).unwrap(),
        RecordType::A,
    ));
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(wait)).unwrap();
    sock.send_to(&m.to_vec().unwrap(), server).unwrap();
    let mut buf = [0u8; 4096];
    let (n, _) = sock.recv_from(&mut buf).ok()?;
    let r = Message::from_vec(&buf[..n]).ok()?;
    Some((r.metadata.response_code, r))
}

fn rand_id() -> u16 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(Instant::now()) as u16
}

/// The finding this guards: one upstream timeout on any name used to start
/// a backoff for every forwarded name, so a slow name asked every 0.8 s
/// made most other clients' forwarded queries fail at once with SERVFAIL.
/// Now a slow name costs only its own queries.
#[test]
fn a_slow_name_asked_every_800_ms_does_not_fail_other_clients_forwarded_queries() {
    let dir = tempfile::tempdir().unwrap();
    let up = Upstream::spawn("127.0.0.31:25501", 60);
    let server = "127.0.0.30:25500";
    let _s = start(
        dir.path(),
        &config(&[&up.addr], "", server, "127.0.0.30:25590"),
    );
    let stop = Arc::new(AtomicBool::new(false));
    // The slow client: dig, every 0.8 s, for a name the upstream never
    // answers.
    let slow = {
        let stop = stop.clone();
        thread::spawn(move || {
            let mut asked = 0;
            while !stop.load(Ordering::SeqCst) {
                let out = dig("127.0.0.30", 25500, &["x.slow.test", "A"]);
                assert!(!out.contains("status: NOERROR"), "{out}");
                asked += 1;
                thread::sleep(Duration::from_millis(800));
            }
            asked
        })
    };
    // Other clients: new names (never cached) every 25 ms from a Rust
    // client, and dig now and then.
    let started = Instant::now();
    let (mut ok, mut failed) = (0usize, Vec::new());
    let mut i = 0;
    while started.elapsed() < Duration::from_secs(6) {
        i += 1;
        let name = format!("n{i}.fwd.test.");
        match ask(server, &name, Duration::from_secs(2)) {
            Some((ResponseCode::NoError, m)) if m.answers.len() == 1 => ok += 1,
            other => failed.push(format!("{name}: {:?}", other.map(|o| o.0))),
        }
        if i % 20 == 0 {
            let out = dig("127.0.0.30", 25500, &[&format!("d{i}.fwd.test"), "A"]);
            if out.contains("status: NOERROR") && out.contains("203.0.113.9") {
                ok += 1;
            } else {
                failed.push(format!("dig d{i}: {out}"));
            }
        }
        thread::sleep(Duration::from_millis(25));
    }
    stop.store(true, Ordering::SeqCst);
    let slow_asked = slow.join().unwrap();
    assert!(
        slow_asked >= 4,
        "the slow name was asked {slow_asked} times"
    );
    assert!(ok > 100, "only {ok} answers");
    assert!(
        failed.is_empty(),
        "{} of {} other queries failed: {failed:?}",
        failed.len(),
        ok + failed.len()
    );
    let series = format!("oooi_dns_upstream_up{{upstream=\"{}\"}}", up.addr);
    assert_eq!(metric("127.0.0.30:25590", &series), Some(1.0));
}

/// The first upstream is silent (its queries time out): every query is
/// answered by the second; once queries of unrelated zones timed out on
/// the first with no response from it, it counts as down and is skipped
/// while the second is up, so answers come at once, and its metric says
/// so.
#[test]
fn the_next_upstream_answers_and_a_silent_one_is_then_skipped() {
    let dir = tempfile::tempdir().unwrap();
    // Bound and never read: queries to it time out.
    let silent = UdpSocket::bind("127.0.0.32:25512").unwrap();
    let good = Upstream::spawn("127.0.0.31:25511", 60);
    let server = "127.0.0.30:25510";
    let text = config(
        &["127.0.0.32:25512", &good.addr],
        "  down_backoff_ms: 60000\n",
        server,
        "127.0.0.30:25591",
    )
    .replace("timeout_ms: 800", "timeout_ms: 1000");
    let _s = start(dir.path(), &text);
    for i in 0..3 {
        let started = Instant::now();
        let out = dig("127.0.0.30", 25510, &["+short", &format!("a.fwd{i}.test")]);
        assert_eq!(out.trim(), "203.0.113.9", "a{i}");
        assert!(started.elapsed() >= Duration::from_millis(1000), "a{i}");
    }
    let series = "oooi_dns_upstream_up{upstream=\"127.0.0.32:25512\"}";
    assert_eq!(metric("127.0.0.30:25591", series), Some(0.0));
    for i in 0..5 {
        let started = Instant::now();
        let out = dig("127.0.0.30", 25510, &["+short", &format!("b{i}.fwd.test")]);
        assert_eq!(out.trim(), "203.0.113.9", "b{i}");
        // dig itself takes some time on a loaded machine; the timeout is
        // 1 s.
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "b{i} waited {:?}",
            started.elapsed()
        );
    }
    drop(silent);
}

/// A cached name whose TTL ran out is answered stale (TTL 30) while the
/// upstream does not answer, and counted; with `serve_stale_s: 0` it gets
/// SERVFAIL instead. A name never cached gets SERVFAIL.
#[test]
fn cached_names_are_served_stale_while_no_upstream_answers() {
    for (stale, port, http) in [
        (true, 25520, "127.0.0.30:25592"),
        (false, 25521, "127.0.0.30:25593"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let up = Upstream::spawn(&format!("127.0.0.31:{}", port + 10), 1);
        let server = format!("127.0.0.30:{port}");
        let extra = if stale { "" } else { "  serve_stale_s: 0\n" };
        let _s = start(dir.path(), &config(&[&up.addr], extra, &server, http));
        let out = dig("127.0.0.30", port, &["+short", "kept.fwd.test"]);
        assert_eq!(out.trim(), "203.0.113.9");
        up.mute.store(true, Ordering::SeqCst);
        thread::sleep(Duration::from_millis(1500));
        let before = up.asked.load(Ordering::SeqCst);
        let out = dig("127.0.0.30", port, &["kept.fwd.test", "A"]);
        assert!(
            up.asked.load(Ordering::SeqCst) > before,
            "the expired name was not asked again"
        );
        if stale {
            assert!(out.contains("status: NOERROR"), "{out}");
            assert!(out.contains("30\tIN\tA\t203.0.113.9"), "{out}");
            assert_eq!(metric(http, "oooi_dns_stale_answers_total"), Some(1.0));
        } else {
            assert!(out.contains("status: SERVFAIL"), "{out}");
        }
        let out = dig("127.0.0.30", port, &["never.fwd.test", "A"]);
        assert!(out.contains("status: SERVFAIL"), "{out}");
    }
}

/// An upstream that stops answering counts as down once names of three
/// unrelated zones timed out on it; as the only upstream it is still asked
/// (SERVFAIL after the timeout), and the first answer brings it back.
#[test]
fn a_silent_only_upstream_counts_as_down_is_still_asked_and_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let up = Upstream::spawn("127.0.0.31:25541", 60);
    let server = "127.0.0.30:25540";
    let http = "127.0.0.30:25594";
    let text = config(&[&up.addr], "  down_backoff_ms: 60000\n", server, http)
        .replace("timeout_ms: 800", "timeout_ms: 1000");
    let _s = start(dir.path(), &text);
    up.mute.store(true, Ordering::SeqCst);
    for i in 0..3 {
        let out = dig("127.0.0.30", 25540, &[&format!("m.zone{i}.test"), "A"]);
        assert!(out.contains("status: SERVFAIL"), "{out}");
    }
    let series = format!("oooi_dns_upstream_up{{upstream=\"{}\"}}", up.addr);
    assert_eq!(metric(http, &series), Some(0.0));
    let asked = up.asked.load(Ordering::SeqCst);
    let out = dig("127.0.0.30", 25540, &["still.fwd.test", "A"]);
    assert!(out.contains("status: SERVFAIL"), "{out}");
    assert_eq!(
        up.asked.load(Ordering::SeqCst),
        asked + 1,
        "not asked while down"
    );
    up.mute.store(false, Ordering::SeqCst);
    let out = dig("127.0.0.30", 25540, &["+short", "back.fwd.test"]);
    assert_eq!(out.trim(), "203.0.113.9");
    assert_eq!(metric(http, &series), Some(1.0));
}
