//! Health-aware and spread answers, against the `oooi-dns` binary with
//! `dig` and a Rust client on loopback: proxy addresses whose check (a TCP
//! listener, an HTTP readiness endpoint) stops passing leave the answers
//! within about 2 s and come back when it passes again; with every check
//! failing every address is answered; answers rotate the addresses so that
//! each replica comes first for about as many queries.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use hickory_proto::op::Message;
use hickory_proto::rr::{Name, RecordType};
use support::{dig, start};

const A: &str = "192.0.2.4";
const B: &str = "192.0.2.5";
const C: &str = "192.0.2.6";

/// A readiness endpoint: answers every request 200 while `ready`, else 503.
fn spawn_ready_endpoint(ready: Arc<AtomicBool>) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut conn) = conn else { continue };
            let ready = ready.load(Ordering::SeqCst);
            thread::spawn(move || {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let status = if ready {
                    "200 OK"
                } else {
                    "503 Service Unavailable"
                };
                let _ = conn.write_all(
                    format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                        .as_bytes(),
                );
            });
        }
    });
    port
}

/// The A addresses `dig` gets for `name`, sorted.
fn answered(port: u16, extra: &[&str]) -> Vec<String> {
    let mut args = vec!["+short", "api.c1.example.com", "A"];
    args.extend_from_slice(extra);
    let mut got: Vec<String> = dig("127.0.0.35", port, &args)
        .lines()
        .map(str::to_string)
        .filter(|l| !l.is_empty())
        .collect();
    got.sort();
    got
}

fn sorted(list: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = list.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

/// Polls until `dig` (UDP and TCP) gives `want`; the time it took.
fn until(port: u16, want: &[&str], limit: Duration) -> Duration {
    let started = Instant::now();
    let want = sorted(want);
    loop {
        if answered(port, &[]) == want && answered(port, &["+tcp"]) == want {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "after {limit:?} still {:?}, want {want:?}",
            answered(port, &[])
        );
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_proxy_failing_its_check_leaves_answers_within_2_s_and_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let a = TcpListener::bind("127.0.0.1:0").unwrap();
    let a_port = a.local_addr().unwrap().port();
    let b_ready = Arc::new(AtomicBool::new(true));
    let b_port = spawn_ready_endpoint(b_ready.clone());
    let c = TcpListener::bind("127.0.0.1:0").unwrap();
    let c_port = c.local_addr().unwrap().port();
    let text = format!(
        r#"
http: 127.0.0.35:25595
health:
  checks:
    - {{ address: {A}, tcp: "127.0.0.1:{a_port}" }}
    - {{ address: {B}, http: "http://127.0.0.1:{b_port}/ready" }}
    - {{ address: {C}, tcp: "localhost:{c_port}" }}
clusters:
  - name: c1
    base_domain: example.com
    proxy: [{A}, {B}, {C}]
views:
  - name: vlan
    kind: vlan
    listen: ["127.0.0.35:25530"]
"#
    );
    let _s = start(dir.path(), &text);
    let http = "127.0.0.35:25595";
    assert_eq!(answered(25530, &[]), sorted(&[A, B, C]));
    let up = |addr: &str| http_series(http, "oooi_dns_health_up", addr);
    assert_eq!(up(A), Some(1.0));

    // A's listener closes: connects are refused.
    drop(a);
    let took = until(25530, &[B, C], Duration::from_secs(4));
    println!("A left the answers after {took:?}");
    assert!(took <= Duration::from_millis(2500), "{took:?}");
    assert_eq!(up(A), Some(0.0));
    assert_eq!(
        http_series(
            http,
            "oooi_dns_health_transitions_total",
            &format!("{A}\",check=\"tcp://127.0.0.1:{a_port}\",to=\"down")
        ),
        Some(1.0)
    );

    // B's readiness endpoint answers 503: only C is left.
    b_ready.store(false, Ordering::SeqCst);
    let took = until(25530, &[C], Duration::from_secs(4));
    println!("B left the answers after {took:?}");
    assert!(took <= Duration::from_millis(2500), "{took:?}");

    // C goes too: every proxy seems down, so every proxy is answered.
    drop(c);
    until(25530, &[A, B, C], Duration::from_secs(4));
    thread::sleep(Duration::from_millis(1500));
    assert_eq!(answered(25530, &[]), sorted(&[A, B, C]));
    assert_eq!(up(C), Some(0.0));

    // A comes back (a new listener on its port): only A is answered.
    let a = TcpListener::bind(format!("127.0.0.1:{a_port}")).unwrap();
    let took = until(25530, &[A], Duration::from_secs(4));
    println!("A came back after {took:?}");
    assert!(took <= Duration::from_millis(2500), "{took:?}");
    b_ready.store(true, Ordering::SeqCst);
    until(25530, &[A, B], Duration::from_secs(4));
    assert_eq!(
        http_series(
            http,
            "oooi_dns_health_transitions_total",
            &format!("{A}\",check=\"tcp://127.0.0.1:{a_port}\",to=\"up")
        ),
        Some(1.0)
    );
    drop(a);
}

/// The value of `name{address="<address…>"}` in the metrics (the address
/// may carry further labels after it, quotes included).
fn http_series(http: &str, name: &str, address: &str) -> Option<f64> {
    let prefix = format!("{name}{{address=\"{address}\"");
    support::http_get(http, "/metrics")
        .lines()
        .find(|l| l.starts_with(&prefix))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Without checks, answers carry every proxy address, rotated per query:
/// over many queries (random IDs, several clients) each of three replicas
/// comes first for about a third of them, over UDP (the fast path) and TCP
/// (the handler), and in dig's answers too.
#[test]
fn each_proxy_replica_comes_first_for_about_a_third_of_the_queries() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        r#"
clusters:
  - name: c1
    base_domain: example.com
    proxy: [{A}, {B}, {C}]
views:
  - name: vlan
    kind: vlan
    listen: ["127.0.0.35:25531"]
"#
    );
    let _s = start(dir.path(), &text);
    let mut first: BTreeMap<String, usize> = BTreeMap::new();
    let clients: Vec<UdpSocket> = (0..3)
        .map(|_| {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            s
        })
        .collect();
    let mut id: u16 = 0x5eed;
    for i in 0..900 {
        // Pseudo-random IDs, as resolvers pick them.
        id = id.wrapping_mul(25173).wrapping_add(13849);
        let mut m = Message::query();
        m.metadata.id = id;
        m.add_query(hickory_proto::op::Query::query(
            Name::from_ascii("api.c1.example.com.").unwrap(),
            RecordType::A,
        ));
        let sock = &clients[i % clients.len()];
        sock.send_to(&m.to_vec().unwrap(), "127.0.0.35:25531")
            .unwrap();
        let mut buf = [0u8; 512];
        let (n, _) = sock.recv_from(&mut buf).unwrap();
        let r = Message::from_vec(&buf[..n]).unwrap();
        let addrs: Vec<String> = r.answers.iter().map(|a| a.data.to_string()).collect();
        let mut all = addrs.clone();
        all.sort();
        assert_eq!(all, sorted(&[A, B, C]), "every replica in every answer");
        *first.entry(addrs[0].clone()).or_default() += 1;
    }
    println!("first address over 900 UDP queries: {first:?}");
    for (addr, n) in &first {
        assert!((240..=360).contains(n), "{addr} first {n} times: {first:?}");
    }
    assert_eq!(first.len(), 3);
    // dig (UDP and TCP): more than one replica comes first.
    let mut dig_first = BTreeMap::<String, usize>::new();
    for i in 0..30 {
        let tcp = if i % 2 == 0 { "+tcp" } else { "+notcp" };
        let out = dig("127.0.0.35", 25531, &["+short", tcp, "api.c1.example.com"]);
        let top = out.lines().next().unwrap_or_default().to_string();
        *dig_first.entry(top).or_default() += 1;
    }
    println!("first address over 30 dig queries: {dig_first:?}");
    assert!(dig_first.len() >= 2, "{dig_first:?}");
    assert!(
        dig_first.keys().all(|k| [A, B, C].contains(&k.as_str())),
        "{dig_first:?}"
    );
}
