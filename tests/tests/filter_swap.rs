//! Filter hot swap through ECDS against a real Envoy: a new module delivered
//! by a `..data` swap of the watched config mount takes new connections
//! without an Envoy restart, open connections outlive the drain time, the
//! table survives, and a module that does not load changes nothing.

use std::time::{Duration, Instant};

use oooi_routes::build_id;
use oooi_tests::fixture::{STRANGER, TwoClusters};
use oooi_tests::{DRAIN_TIME_S, filter_wasm, http_blocking, tls_open, tls_probe};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn module(build: &str) -> Vec<u8> {
    let base = std::fs::read(filter_wasm().unwrap()).unwrap();
    build_id::stamp(&base, build).expect("the filter module has a build id slot")
}

async fn started(build: &str) -> TwoClusters {
    let lab = TwoClusters::start_with(1, Some(module(build)))
        .await
        .expect("lab starts");
    lab.envoy.push_table(&lab.table).expect("first push");
    lab
}

fn api_build(lab: &TwoClusters) -> (u64, String) {
    let (status, body) = http_blocking(lab.envoy.api, "GET", "/v1/routes", &[], b"").unwrap();
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    (
        v["generation"].as_u64().unwrap(),
        v["build"].as_str().unwrap().to_owned(),
    )
}

/// Sum of Envoy's ECDS counters named `...<what>` (every wasm filter).
fn ecds(lab: &TwoClusters, what: &str) -> u64 {
    lab.envoy
        .stats("extension_config_discovery.")
        .iter()
        .filter(|(k, _)| k.ends_with(what))
        .map(|(_, v)| v)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_module_takes_new_connections_and_old_ones_outlive_the_drain() {
    let mut lab = started("swap-a").await;
    let pid = lab.envoy.pid();
    let (who, mut held) = tls_open(lab.https, Some("oauth.c1.example.com"), None)
        .await
        .expect("held connection");
    assert_eq!(who, "c1-oauth");
    assert_eq!(lab.envoy.build_connections("swap-a"), 1);
    assert_eq!(api_build(&lab), (1, "swap-a".to_owned()));
    let modified = lab.envoy.stat("listener_manager.listener_modified");
    let lds_updates = lab.envoy.stat("listener_manager.lds.update_success");

    let swapped_at = Instant::now();
    lab.envoy.swap_module(&module("swap-b")).unwrap();
    // Probe until a new connection is counted by the new build.
    let mut probes = 0;
    while lab.envoy.build_connections("swap-b") == 0 {
        assert!(
            swapped_at.elapsed() < Duration::from_secs(10),
            "the new build took no connection within 10 s:\n{}",
            lab.envoy.log_text()
        );
        let who = tls_probe(lab.https, Some("ignition.c1.example.com"), None).await;
        assert!(
            matches!(&who, Ok(w) if w == "c1-ignition"),
            "routed during the swap: {who:?}\n{:?}\n{}",
            lab.envoy.stats("wasmcustom"),
            lab.envoy.log_text()
        );
        probes += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "new build took new connections {:?} after the ..data swap ({probes} probes)",
        swapped_at.elapsed()
    );

    // From now on every new connection is the new build's, routed by the
    // table pushed before the swap (no push since).
    let old_count = lab.envoy.build_connections("swap-a");
    let new_count = lab.envoy.build_connections("swap-b");
    for (sni, want) in [
        ("oauth.c1.example.com", "c1-oauth"),
        ("x.apps.c2.example.com", "c2-apps"),
        ("konnectivity.c1.example.com", "c1-konnectivity"),
    ] {
        assert_eq!(tls_probe(lab.https, Some(sni), None).await.unwrap(), want);
    }
    assert!(
        tls_probe(lab.kube, None, Some(STRANGER.parse().unwrap()))
            .await
            .is_err(),
        "refusals still apply"
    );
    assert_eq!(lab.envoy.build_connections("swap-a"), old_count);
    assert_eq!(lab.envoy.build_connections("swap-b"), new_count + 4);
    assert_eq!(api_build(&lab), (1, "swap-b".to_owned()));

    // ECDS changed the filter; the listeners were not touched or drained.
    assert_eq!(
        lab.envoy.stat("listener_manager.listener_modified"),
        modified
    );
    assert_eq!(
        lab.envoy.stat("listener_manager.total_listeners_draining"),
        Some(0)
    );
    assert!(lab.envoy.stat("listener_manager.lds.update_success") >= lds_updates);

    // The connection opened before the swap outlives the drain time.
    tokio::time::sleep(Duration::from_secs(u64::from(DRAIN_TIME_S) + 1)).await;
    held.write_all(b"still here\n").await.unwrap();
    let mut echo = [0u8; 11];
    tokio::time::timeout(Duration::from_secs(5), held.read_exact(&mut echo))
        .await
        .expect("echo in time")
        .expect("old connection still open");
    assert_eq!(&echo, b"still here\n");
    assert_eq!(lab.envoy.pid(), pid);
    assert!(lab.envoy.running(), "Envoy never restarted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_that_does_not_load_leaves_the_old_one_serving() {
    let mut lab = started("keep-a").await;
    assert_eq!(
        tls_probe(lab.https, Some("oauth.c2.example.com"), None)
            .await
            .unwrap(),
        "c2-oauth"
    );
    let failures = ecds(&lab, ".config_fail");
    let garbage: Vec<u8> = b"\0asm\x01\0\0\0"
        .iter()
        .copied()
        .chain((0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8))
        .collect();
    lab.envoy.swap_module(&garbage).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while ecds(&lab, ".config_fail") == failures {
        assert!(
            Instant::now() < deadline,
            "Envoy did not reject the broken module within 10 s:\n{}",
            lab.envoy.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = lab.envoy.build_connections("keep-a");
    for (sni, want) in [
        ("oauth.c2.example.com", "c2-oauth"),
        ("api.apps.c1.example.com", "c1-apps"),
    ] {
        assert_eq!(tls_probe(lab.https, Some(sni), None).await.unwrap(), want);
    }
    assert!(
        tls_probe(lab.https, Some("evil.example.org"), None)
            .await
            .is_err()
    );
    assert_eq!(lab.envoy.build_connections("keep-a"), before + 3);
    assert_eq!(api_build(&lab), (1, "keep-a".to_owned()));
    assert!(lab.envoy.running());
}
