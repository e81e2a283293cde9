//! Filter rollout against a real Envoy, the way the controller does it: a
//! new module is checked in wasmtime (`oooi_wasm_host::check`) against the
//! live table, and only then written, beside the previous module, into the
//! watched config mount together with ECDS files whose module reference
//! changes (one `..data` swap, as the projected ConfigMap + Secret volume of
//! the Envoy pod delivers it). A steady stream of new TLS connections runs
//! throughout: none may fail, new connections move to the new build within
//! the promised time, the table survives, and a broken module is refused by
//! the check, so the old one keeps serving.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use oooi_routes::{RouteTable, build_id};
use oooi_tests::fixture::TwoClusters;
use oooi_tests::{filter_wasm, http_blocking, tls_probe};
use oooi_wasm_host::check::{Check, CheckLimits, check_module};

/// What docs/operations.md promises: new connections use the new module
/// within this time after the config mount swapped.
const PROMISED_SWITCH: Duration = Duration::from_secs(5);
/// One new connection every this often (100 connections per second).
const INTERVAL: Duration = Duration::from_millis(10);

fn module(build: &str) -> Vec<u8> {
    let base = std::fs::read(filter_wasm().unwrap()).unwrap();
    build_id::stamp(&base, build).expect("the filter module has a build id slot")
}

/// The controller's rollout step: check, then (only when it passed) write
/// the new module beside the running one, and the config naming it, into
/// the watched mount in one swap. Returns the check's failure, if any.
fn roll_out(lab: &mut TwoClusters, running: &[u8], new: &[u8]) -> Option<Check> {
    let report = check_module(
        new,
        std::slice::from_ref(&lab.table),
        &CheckLimits::default(),
    );
    if let Some(f) = report.failure {
        eprintln!("module refused: {f}");
        return Some(f.check);
    }
    let dir = lab.envoy.config_map.path().to_path_buf();
    let mut config = lab.envoy.config.clone();
    config.wasm_path = dir.join("..data").join(oooi_envoy::module_file_name(new));
    config.wasm_sha256 = oooi_envoy::module_sha256(new);
    let mut files = vec![
        (oooi_envoy::module_file_name(new), new.to_vec()),
        (oooi_envoy::module_file_name(running), running.to_vec()),
    ];
    files.extend(oooi_envoy::files(&config, &dir).expect("render"));
    lab.envoy.config_map.publish(&files).expect("publish");
    lab.envoy.config = config;
    None
}

/// Probes: (SNI, backend that must answer).
const PROBES: [(&str, &str); 4] = [
    ("oauth.c1.example.com", "c1-oauth"),
    ("x.apps.c2.example.com", "c2-apps"),
    ("ignition.c1.example.com", "c1-ignition"),
    ("oauth.c2.example.com", "c2-oauth"),
];

/// Opens a new connection every [`INTERVAL`] until `stop`, each on its own
/// task; returns (connections, failures as text).
async fn stream(https: std::net::SocketAddr, stop: Arc<AtomicBool>) -> (usize, Vec<String>) {
    let mut tasks = Vec::new();
    let mut ticker = tokio::time::interval(INTERVAL);
    let mut i = 0usize;
    while !stop.load(Ordering::Relaxed) {
        ticker.tick().await;
        let (sni, want) = PROBES[i % PROBES.len()];
        i += 1;
        tasks.push(tokio::spawn(async move {
            match tls_probe(https, Some(sni), None).await {
                Ok(who) if who == want => None,
                Ok(who) => Some(format!("{sni}: answered by {who}, expected {want}")),
                Err(e) => Some(format!("{sni}: {e:#}")),
            }
        }));
    }
    let mut failures = Vec::new();
    for t in tasks.iter_mut() {
        if let Some(f) = t.await.expect("probe task") {
            failures.push(f);
        }
    }
    (tasks.len(), failures)
}

fn api(lab: &TwoClusters) -> serde_json::Value {
    let (status, body) = http_blocking(lab.envoy.api, "GET", "/v1/routes", &[], b"").unwrap();
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

async fn wait_for_build(lab: &TwoClusters, build: &str, since: Instant) -> Duration {
    while lab.envoy.build_connections(build) == 0 {
        assert!(
            since.elapsed() < PROMISED_SWITCH,
            "build {build} took no new connection within {PROMISED_SWITCH:?}:\n{}",
            lab.envoy.log_text()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    since.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_under_a_steady_stream_of_connections() {
    let v1 = module("rollout-a");
    let mut lab = TwoClusters::start_with(2, Some(v1.clone()))
        .await
        .expect("lab starts");
    lab.envoy.push_table(&lab.table).expect("first push");
    let table: RouteTable = lab.table.clone();
    let digest = table.digest();
    let pid = lab.envoy.pid();

    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let load = tokio::spawn(stream(lab.https, stop.clone()));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(lab.envoy.build_connections("rollout-a") > 0);

    // A new build: checked, written, and taking new connections in time.
    let v2 = module("rollout-b");
    let checking = Instant::now();
    assert_eq!(roll_out(&mut lab, &v1, &v2), None, "the new build passes");
    let publish_took = checking.elapsed();
    let swapped = Instant::now();
    let switch = wait_for_build(&lab, "rollout-b", swapped).await;
    // Connections opened before the switch may still be counted by the old
    // build for a moment; after a short settle, every new one is the new build's.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let old_after_switch = lab.envoy.build_connections("rollout-a");
    let new_after_switch = lab.envoy.build_connections("rollout-b");
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        lab.envoy.build_connections("rollout-a"),
        old_after_switch,
        "the old build took new connections after the switch"
    );
    assert!(lab.envoy.build_connections("rollout-b") > new_after_switch);

    // A broken build (it no longer knows the longest Kubernetes alias) is
    // refused by the check and never reaches Envoy.
    let good = module("rollout-broken");
    let needle = b"kubernetes.default.svc.cluster.local";
    let at = good
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("alias in the module");
    let mut broken = good;
    broken[at + needle.len() - 1] = b'x';
    assert_eq!(
        roll_out(&mut lab, &v2, &broken),
        Some(Check::RoutingDecision)
    );
    let served = lab.envoy.build_connections("rollout-b");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        lab.envoy.build_connections("rollout-b") > served,
        "the running build keeps serving"
    );
    assert_eq!(lab.envoy.build_connections("rollout-broken"), 0);

    stop.store(true, Ordering::Relaxed);
    let (connections, failures) = load.await.expect("load task");
    let took = started.elapsed();
    assert!(
        failures.is_empty(),
        "{} of {connections} connections failed: {:#?}\n{}",
        failures.len(),
        &failures[..failures.len().min(10)],
        lab.envoy.log_text()
    );
    // The table survived the swap: same generation and digest, no push since.
    let v = api(&lab);
    assert_eq!(v["generation"], table.generation);
    assert_eq!(v["digest"], digest);
    assert_eq!(v["build"], "rollout-b");
    assert_eq!(lab.envoy.pid(), pid);
    assert!(lab.envoy.running(), "Envoy never restarted");
    eprintln!(
        "rollout: {connections} new connections in {took:?} ({:.0}/s), none failed; \
         check + publish {publish_took:?}; new build took new connections {switch:?} after the mount swap",
        connections as f64 / took.as_secs_f64()
    );
}
