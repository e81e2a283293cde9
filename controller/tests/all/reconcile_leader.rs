//! Leader election against the mocked API: the Lease is created when
//! absent, taken by the first replica, refused to a second while held, and
//! handed over when the holder releases it on shutdown.

use crate::mock_api;

use std::time::Duration;

use mock_api::{MockApi, assert_rbac};
use oooi_controller::leader::{Leader, LeaderConfig};
use oooi_controller::metrics::Metrics;

const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/oooi-system/leases/oooi-controller";

fn config(identity: &str) -> LeaderConfig {
    LeaderConfig {
        duration_s: 2,
        grace_s: 1,
        ..LeaderConfig::new("oooi-system", "oooi-controller", identity)
    }
}

fn holder(mock: &MockApi) -> Option<String> {
    mock.get(LEASE)?["spec"]["holderIdentity"]
        .as_str()
        .map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_is_created_taken_refused_to_a_second_and_handed_over() {
    let mock = MockApi::start();
    let client = mock.client.clone();
    let metrics_a = Metrics::new();
    let mut a = Leader::start(client.clone(), config("pod-a"), metrics_a.clone())
        .await
        .expect("elector starts");
    let created = mock.take();
    assert_eq!(created[0].line(), format!("GET {LEASE}"));
    assert_eq!(
        created[1].line(),
        "POST /apis/coordination.k8s.io/v1/namespaces/oooi-system/leases"
    );
    assert_rbac(&created);

    tokio::time::timeout(Duration::from_secs(10), a.acquired())
        .await
        .expect("the only replica becomes leader");
    assert!(a.is_leader());
    assert_eq!(holder(&mock).as_deref(), Some("pod-a"));
    assert!(metrics_a.encode().contains("oooi_controller_leader 1"));

    // A second replica stands by while A renews.
    let mut b = Leader::start(client.clone(), config("pod-b"), Metrics::new())
        .await
        .unwrap();
    let b_won = tokio::time::timeout(Duration::from_secs(3), b.acquired()).await;
    assert!(b_won.is_err(), "B must not lead while A holds the lease");
    assert!(!b.is_leader());
    assert_eq!(holder(&mock).as_deref(), Some("pod-a"));

    // A shuts down and releases: B takes over.
    a.release().await;
    assert!(metrics_a.encode().contains("oooi_controller_leader 0"));
    tokio::time::timeout(Duration::from_secs(10), b.acquired())
        .await
        .expect("B takes over after A released");
    assert_eq!(holder(&mock).as_deref(), Some("pod-b"));
    b.release().await;
    assert_eq!(holder(&mock), None, "released on shutdown");
    assert_rbac(&mock.take());
}

#[tokio::test]
async fn bad_timing_is_refused_before_touching_the_api() {
    let mock = MockApi::start();
    let client = mock.client.clone();
    let cfg = LeaderConfig {
        duration_s: 5,
        grace_s: 5,
        ..LeaderConfig::new("ns", "l", "me")
    };
    let err = Leader::start(client, cfg, Metrics::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("grace 5s"), "{err}");
    assert!(mock.take().is_empty());
}
