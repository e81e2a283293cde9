//! The route pusher against real Envoy processes running the real filter
//! (`OOOI_FILTER_WASM`), on loopback: first push, a joining replica, a
//! restarted Envoy, a replica ahead of us, concurrent pushes, and replicas
//! that refuse or do not answer.

#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

use std::net::{IpAddr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use oooi_controller::metrics::Metrics;
use oooi_controller::push::{Failure, Outcome, PushConfig, Pusher, Replica, SyncReport};
use oooi_routes::{Route, RouteMatch, RouteTable, Upstream};
use oooi_tests::{Envoy, PUSH_TOKEN, free_port, http_blocking};

fn lo() -> IpAddr {
    "127.0.0.1".parse().unwrap()
}

/// A table with `n` SNI routes and one source route, at `generation`.
fn table(generation: u64, n: usize) -> RouteTable {
    let mut routes: Vec<Route> = (0..n)
        .map(|i| Route {
            port: 443,
            matches: RouteMatch::Sni(format!("oauth.c{i}.example.com")),
            upstream: Upstream::Address {
                host: format!("oauth-openshift.clusters-c{i}.svc"),
                port: 6443,
            },
            owner: Some(format!("clusters/c{i}")),
        })
        .collect();
    routes.push(Route {
        port: 6443,
        matches: RouteMatch::Source("127.0.0.11/32".parse().unwrap()),
        upstream: Upstream::Address {
            host: "kube-apiserver.clusters-c0.svc".into(),
            port: 6443,
        },
        owner: Some("clusters/c0".into()),
    });
    RouteTable { generation, routes }
}

fn start_envoy() -> Envoy {
    Envoy::start(lo(), &[free_port(lo())], 1).expect("envoy starts")
}

fn replica(name: &str, envoy: &Envoy) -> Replica {
    Replica {
        name: name.into(),
        addr: envoy.api,
    }
}

fn pusher() -> Pusher {
    Pusher::new(
        PushConfig {
            request_timeout: Duration::from_secs(2),
        },
        Metrics::new(),
    )
}

/// Generation and digest the replica reports on `GET /v1/routes`.
fn loaded(api: SocketAddr) -> (u64, String) {
    let (status, body) = http_blocking(api, "GET", "/v1/routes", &[], b"").unwrap();
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    (
        v["generation"].as_u64().unwrap(),
        v["digest"].as_str().unwrap_or_default().to_string(),
    )
}

fn ready(api: SocketAddr) -> u16 {
    http_blocking(api, "GET", "/ready", &[], b"").unwrap().0
}

fn accepted(envoy: &Envoy) -> u64 {
    envoy
        .stat("wasmcustom.oooi_sni_router_push_accepted")
        .unwrap_or(0)
}

fn outcomes(report: &SyncReport) -> Vec<(String, Outcome)> {
    report
        .replicas
        .iter()
        .map(|r| (r.name.clone(), r.outcome.clone()))
        .collect()
}

/// A second Envoy process on the same config (same admin and API ports),
/// standing in for a container restart: same pod IP, empty shared data.
struct Restarted(Child);

impl Drop for Restarted {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn restart(envoy: &Envoy) -> Restarted {
    let status = Command::new("kill")
        .args(["-KILL", &envoy.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    // Wait until the old process has released the API port.
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(envoy.api).is_ok() {
        assert!(Instant::now() < deadline, "old envoy still answers");
        std::thread::sleep(Duration::from_millis(20));
    }
    let bootstrap = envoy.config_map.path().join(oooi_envoy::BOOTSTRAP_FILE);
    let child = Command::new("envoy")
        .arg("-c")
        .arg(&bootstrap)
        .args(["--concurrency", "1", "--use-dynamic-base-id"])
        .args(["--log-level", "warn"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("envoy restarts");
    let restarted = Restarted(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while http_blocking(envoy.api, "GET", "/v1/routes", &[], b"").is_err() {
        assert!(Instant::now() < deadline, "restarted envoy never answered");
        std::thread::sleep(Duration::from_millis(50));
    }
    restarted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_then_joining_replica_then_restarted_replica() {
    let a = start_envoy();
    let pusher = pusher();
    let t = table(3, 20);
    assert_eq!(ready(a.api), 503, "no table before the first push");

    // First push.
    let report = pusher.sync(&t, &[replica("envoy-a", &a)], PUSH_TOKEN).await;
    assert_eq!(outcomes(&report), vec![("envoy-a".into(), Outcome::Pushed)]);
    assert_eq!((report.generation, report.digest.clone()), (3, t.digest()));
    assert!(report.all_synced());
    assert_eq!(report.replicas[0].previous_generation, 0);
    assert!(report.replicas[0].push_latency.is_some());
    assert_eq!(loaded(a.api), (3, t.digest()));
    assert_eq!(ready(a.api), 200);
    assert_eq!(accepted(&a), 1);

    // Nothing changed: one GET, no PUT.
    let report = pusher.sync(&t, &[replica("envoy-a", &a)], PUSH_TOKEN).await;
    assert_eq!(outcomes(&report), vec![("envoy-a".into(), Outcome::InSync)]);
    assert_eq!(accepted(&a), 1, "an in-sync replica is not pushed again");

    // A second replica joins: only it is pushed.
    let b = start_envoy();
    let both = [replica("envoy-a", &a), replica("envoy-b", &b)];
    let report = pusher.sync(&t, &both, PUSH_TOKEN).await;
    assert_eq!(
        outcomes(&report),
        vec![
            ("envoy-a".into(), Outcome::InSync),
            ("envoy-b".into(), Outcome::Pushed)
        ]
    );
    assert_eq!(loaded(b.api), (3, t.digest()));
    assert_eq!((accepted(&a), accepted(&b)), (1, 1));
    assert_eq!(
        report.message(),
        format!("2/2 replicas at generation 3 ({})", t.digest())
    );

    // Envoy A restarts on the same address: its table is gone (readiness 503,
    // generation 0) and the next sync pushes it again.
    let _a2 = restart(&a);
    assert_eq!(ready(a.api), 503);
    assert_eq!(loaded(a.api).0, 0);
    let report = pusher.sync(&t, &both, PUSH_TOKEN).await;
    assert_eq!(
        outcomes(&report),
        vec![
            ("envoy-a".into(), Outcome::Pushed),
            ("envoy-b".into(), Outcome::InSync)
        ]
    );
    assert_eq!(report.replicas[0].previous_generation, 0);
    assert_eq!(loaded(a.api), (3, t.digest()));
    assert_eq!(ready(a.api), 200);

    // A new table reaches both.
    let t2 = table(4, 21);
    let report = pusher.sync(&t2, &both, PUSH_TOKEN).await;
    assert_eq!(report.pushed(), 2);
    assert_eq!(loaded(a.api), (4, t2.digest()));
    assert_eq!(loaded(b.api), (4, t2.digest()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_ahead_of_us_with_other_routes_is_overtaken_with_a_new_generation() {
    let a = start_envoy();
    let b = start_envoy();
    // Left behind by an earlier controller: generation 9, other routes, on A only.
    a.push_table(&table(9, 2)).unwrap();
    let ours = table(5, 20);
    let both = [replica("envoy-a", &a), replica("envoy-b", &b)];
    let report = pusher().sync(&ours, &both, PUSH_TOKEN).await;
    assert!(report.all_synced(), "{}", report.message());
    assert_eq!(
        report.generation, 10,
        "one above the highest generation seen"
    );
    let mut restamped = ours.clone();
    restamped.generation = 10;
    assert_eq!(report.digest, restamped.digest());
    assert_eq!(loaded(a.api), (10, restamped.digest()));
    assert_eq!(loaded(b.api), (10, restamped.digest()));
    assert_eq!(report.replicas[0].previous_generation, 9);
    assert_eq!(report.replicas[1].previous_generation, 0);
}

/// Generations wrap after `MAX_GENERATION`: a replica left at the top (by
/// a bug or a hand-made push) does not lock the controller out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_at_the_top_generation_takes_the_next_tables() {
    use oooi_routes::MAX_GENERATION;
    let a = start_envoy();
    let b = start_envoy();
    a.push_table(&table(MAX_GENERATION, 2)).unwrap();
    b.push_table(&table(MAX_GENERATION - 3, 3)).unwrap();
    let both = [replica("envoy-a", &a), replica("envoy-b", &b)];
    // 5 is newer than the top (it wraps), so it goes straight through.
    let ours = table(5, 20);
    let report = pusher().sync(&ours, &both, PUSH_TOKEN).await;
    assert!(report.all_synced(), "{}", report.message());
    assert_eq!(report.generation, 5);
    assert_eq!(loaded(a.api), (5, ours.digest()));
    assert_eq!(loaded(b.api), (5, ours.digest()));
    // A table behind the top in the ring is re-stamped after the newest
    // generation seen, wrapping to 1 rather than overflowing.
    let c = start_envoy();
    c.push_table(&table(MAX_GENERATION, 2)).unwrap();
    let behind = table(MAX_GENERATION - 10, 4);
    let report = pusher()
        .sync(&behind, &[replica("envoy-c", &c)], PUSH_TOKEN)
        .await;
    assert!(report.all_synced(), "{}", report.message());
    assert_eq!(report.generation, 1);
    let mut restamped = behind.clone();
    restamped.generation = 1;
    assert_eq!(loaded(c.api), (1, restamped.digest()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_syncs_of_one_table_both_end_in_sync() {
    let a = start_envoy();
    let t = table(7, 200);
    let one = [replica("envoy-a", &a)];
    let (p1, p2) = (pusher(), pusher());
    let (r1, r2) = tokio::join!(p1.sync(&t, &one, PUSH_TOKEN), p2.sync(&t, &one, PUSH_TOKEN));
    // One of them may have lost the race (409, or found it loaded): both
    // must still report the replica in sync, and the table was loaded once.
    assert!(r1.all_synced(), "{}", r1.message());
    assert!(r2.all_synced(), "{}", r2.message());
    assert_eq!(loaded(a.api), (7, t.digest()));
    assert_eq!(accepted(&a), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_token_silent_and_closed_replicas_fail_alone() {
    let a = start_envoy();
    // A port where nothing listens, and a listener that never answers.
    let closed = SocketAddr::new(lo(), free_port(lo()));
    let silent = std::net::TcpListener::bind((lo(), 0)).unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let replicas = [
        replica("envoy-a", &a),
        Replica {
            name: "closed".into(),
            addr: closed,
        },
        Replica {
            name: "silent".into(),
            addr: silent_addr,
        },
    ];
    let started = Instant::now();
    let report = pusher()
        .sync(&table(2, 3), &replicas, "not-the-token-0123456789")
        .await;
    let elapsed = started.elapsed();
    assert_eq!(report.synced(), 0);
    match &report.replicas[0].outcome {
        Outcome::Failed(Failure::Refused { status: 403, .. }) => {}
        other => panic!("wrong token must be refused with 403, got {other:?}"),
    }
    assert!(matches!(
        report.replicas[1].outcome,
        Outcome::Failed(Failure::Connect(_))
    ));
    assert_eq!(
        report.replicas[2].outcome,
        Outcome::Failed(Failure::Timeout)
    );
    // The silent replica is cut off by the request timeout, not waited for.
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
    assert_eq!(ready(a.api), 503, "the refused push loaded nothing");
    let msg = report.message();
    assert!(msg.starts_with("0/3 replicas at generation 2"), "{msg}");
    assert!(msg.contains("envoy-a: refused with 403"), "{msg}");
    drop(silent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_told_of_a_newer_table_is_not_ready_until_it_holds_it() {
    let envoy = start_envoy();
    let rep = replica("envoy-0", &envoy);
    let p = pusher();
    let first = table(1, 3);
    assert!(
        p.sync(&first, std::slice::from_ref(&rep), PUSH_TOKEN)
            .await
            .all_synced()
    );
    assert_eq!(ready(envoy.api), 200);
    // The controller's current table is generation 2, which this replica
    // has not taken: announced, the replica leaves service.
    let second = table(2, 4);
    let body = serde_json::json!({"generation": 2, "digest": second.digest()}).to_string();
    p.announce(&rep, body.clone().into(), PUSH_TOKEN)
        .await
        .unwrap();
    assert_eq!(ready(envoy.api), 503, "behind the announced table");
    assert_eq!(loaded(envoy.api).0, 1, "still holds its old table");
    // A wrong token announces nothing.
    let denied = p
        .announce(&rep, body.into(), "wrong-token-wrong-token")
        .await;
    assert!(
        matches!(
            denied,
            Err(Failure::Refused {
                status: 401 | 403,
                ..
            })
        ),
        "{denied:?}"
    );
    // Once it holds the announced table it is ready again.
    assert!(
        p.sync(&second, std::slice::from_ref(&rep), PUSH_TOKEN)
            .await
            .all_synced()
    );
    assert_eq!(ready(envoy.api), 200);
}
