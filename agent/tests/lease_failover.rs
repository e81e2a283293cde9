//! Lease scenarios: agents run by the real driver against the stateful
//! mocked API (resourceVersions, 409 on a stale replace), with a recorded
//! interface. Timing is scaled down: 600 ms lease, 400 ms renew deadline,
//! 100 ms period (see `support::timing`).

#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

mod support;

use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use oooi_kube_mock::MockApi;
use support::{Wire, lease_path, start, wait_for};

const A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 3);
const B: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 6);

fn holder(mock: &MockApi, ip: Ipv4Addr) -> Option<String> {
    mock.get(&lease_path(ip))?["spec"]["holderIdentity"]
        .as_str()
        .map(str::to_string)
}

fn version(mock: &MockApi, ip: Ipv4Addr) -> u64 {
    mock.get(&lease_path(ip))
        .and_then(|l| l["metadata"]["resourceVersion"].as_str()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_home_replica_acquires_its_address_and_renews_it() {
    let mock = MockApi::start();
    let wire = Wire::default();
    let one = start(&mock, &wire, "dns-1", &[A, B], Some(A), true);
    let two = start(&mock, &wire, "dns-2", &[A, B], Some(B), true);
    let took = wait_for(Duration::from_secs(2), || {
        wire.holders(A) == ["dns-1"] && wire.holders(B) == ["dns-2"]
    })
    .await;
    assert!(
        took.is_some(),
        "A: {:?}, B: {:?}",
        wire.holders(A),
        wire.holders(B)
    );
    assert!(
        took.unwrap() < Duration::from_millis(500),
        "a home takes its missing Lease at once: {took:?}"
    );
    let lease = mock.get(&lease_path(A)).unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "dns-1");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 1);
    assert_eq!(
        lease["metadata"]["labels"]["hostedcluster.densityops.com/address"],
        "192.0.2.3"
    );
    // Renewals move the resourceVersion about every period.
    let v0 = version(&mock, A);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let renewals = version(&mock, A) - v0;
    assert!(
        renewals >= 10,
        "renewed {renewals} times in 1 s (both Leases move the version)"
    );
    assert_eq!(wire.holders(A), ["dns-1"]);
    assert_eq!(wire.holders(B), ["dns-2"]);
    assert!(
        wire.announces("dns-1", A) >= 3,
        "announced on taking it and again while held"
    );
    // The other replica never touched an address it does not hold.
    assert!(wire.intervals(A).iter().all(|i| i.who == "dns-1"));
    drop((one, two));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holders_address_is_taken_after_its_lease_expires_and_never_held_twice() {
    let mock = MockApi::start();
    let wire = Wire::default();
    let one = start(&mock, &wire, "dns-1", &[A, B], Some(A), true);
    let _two = start(&mock, &wire, "dns-2", &[A, B], Some(B), true);
    wait_for(Duration::from_secs(2), || wire.holders(A) == ["dns-1"])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let lost = Instant::now();
    one.kill();
    let took = wait_for(Duration::from_secs(3), || wire.holders(A) == ["dns-2"])
        .await
        .expect("dns-2 takes A");
    // lease 600 ms + up to one period to see the last renewal + one to act.
    assert!(
        took >= Duration::from_millis(400) && took <= Duration::from_millis(900),
        "taken {took:?} after the loss"
    );
    assert_eq!(holder(&mock, A).as_deref(), Some("dns-2"));
    assert_eq!(
        wire.longest_overlap(A),
        Duration::ZERO,
        "the dead holder's address ran out (kernel lifetime) before the takeover"
    );
    let gap = wire.longest_gap(A, lost);
    assert!(gap <= Duration::from_millis(900), "unanswered for {gap:?}");
    println!("killed holder: taken after {took:?}, unanswered for {gap:?}");
    let lease = mock.get(&lease_path(A)).unwrap();
    assert_eq!(lease["spec"]["leaseTransitions"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_loses_the_api_drops_the_address_before_its_lease_can_expire() {
    let mock = MockApi::start();
    let wire = Wire::default();
    let one = start(&mock, &wire, "dns-1", &[A, B], Some(A), true);
    let _two = start(&mock, &wire, "dns-2", &[A, B], Some(B), true);
    wait_for(Duration::from_secs(2), || wire.holders(A) == ["dns-1"])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cut = Instant::now();
    one.api.store(false, Ordering::SeqCst);
    let dropped = wait_for(Duration::from_secs(2), || {
        wire.holders(A).is_empty() || wire.holders(A) == ["dns-2"]
    })
    .await
    .unwrap();
    let taken = wait_for(Duration::from_secs(3), || wire.holders(A) == ["dns-2"])
        .await
        .unwrap();
    let intervals = wire.intervals(A);
    let last_one = intervals
        .iter()
        .filter(|i| i.who == "dns-1")
        .map(|i| i.end)
        .max()
        .unwrap();
    let first_two = intervals
        .iter()
        .filter(|i| i.who == "dns-2")
        .map(|i| i.start)
        .min()
        .unwrap();
    let margin = first_two.saturating_duration_since(last_one);
    println!(
        "API lost: dropped after {dropped:?}, taken {taken:?} after that, fencing margin {margin:?}"
    );
    assert!(
        dropped <= Duration::from_millis(450),
        "dropped {dropped:?} after the cut (deadline 400 ms)"
    );
    assert!(last_one < first_two, "dropped before the takeover");
    assert!(
        margin >= Duration::from_millis(100),
        "fencing margin {margin:?}"
    );
    assert_eq!(wire.longest_overlap(A), Duration::ZERO);
    let drops = one.metrics.render();
    assert!(
        drops.contains("oooi_agent_drops_total{address=\"192.0.2.3\",reason=\"fenced\"} 1"),
        "{drops}"
    );
    // B was dns-1's? No: B is dns-2's home, untouched.
    assert_eq!(wire.holders(B), ["dns-2"]);
    // The API comes back: dns-1 sees it lost A, and as A's home asks for it
    // back (a hand-back: both answer until the old holder's renew deadline,
    // 400 ms here, so that workers still sending to it are answered).
    one.api.store(true, Ordering::SeqCst);
    wait_for(Duration::from_secs(3), || wire.holders(A) == ["dns-1"])
        .await
        .expect("A goes home once the API is back");
    assert!(wire.longest_overlap(A) <= Duration::from_millis(450));
    assert!(cut.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unready_holder_hands_its_address_on_at_once_without_a_gap() {
    let mock = MockApi::start();
    let wire = Wire::default();
    let one = start(&mock, &wire, "dns-1", &[A, B], Some(A), true);
    let _two = start(&mock, &wire, "dns-2", &[A, B], Some(B), true);
    wait_for(Duration::from_secs(2), || wire.holders(A) == ["dns-1"])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = Instant::now();
    one.ready.send(false).unwrap();
    let took = wait_for(Duration::from_secs(2), || wire.holders(A) == ["dns-2"])
        .await
        .unwrap();
    println!(
        "not ready: dns-2 alone on A after {took:?}, overlap {:?}",
        wire.longest_overlap(A)
    );
    assert!(
        took < Duration::from_millis(500),
        "released, not expired: {took:?}"
    );
    assert_eq!(wire.longest_gap(A, t), Duration::ZERO, "make before break");
    assert!(
        wire.longest_overlap(A) <= Duration::from_millis(400),
        "within the renew deadline"
    );
    assert_eq!(wire.holders(B), ["dns-2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_address_goes_home_when_its_owner_is_ready_again_without_a_gap() {
    let mock = MockApi::start();
    let wire = Wire::default();
    // dns-1 is not ready: dns-2 takes A after a lease duration.
    let one = start(&mock, &wire, "dns-1", &[A, B], Some(A), false);
    let _two = start(&mock, &wire, "dns-2", &[A, B], Some(B), true);
    let took = wait_for(Duration::from_secs(3), || wire.holders(A) == ["dns-2"])
        .await
        .expect("dns-2 stands in for the unready home");
    assert!(
        took >= Duration::from_millis(600),
        "others wait a lease duration for a missing Lease: {took:?}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let back = Instant::now();
    one.ready.send(true).unwrap();
    let home = wait_for(Duration::from_secs(3), || wire.holders(A) == ["dns-1"])
        .await
        .expect("A goes home");
    let overlap = wire.longest_overlap(A);
    println!("home ready: A back home after {home:?} (settle 300 ms), overlap {overlap:?}");
    assert!(
        home >= Duration::from_millis(300),
        "the home settles first: {home:?}"
    );
    assert!(home <= Duration::from_millis(1200), "{home:?}");
    assert_eq!(
        wire.longest_gap(A, back),
        Duration::ZERO,
        "never unanswered"
    );
    assert!(
        overlap <= Duration::from_millis(400),
        "overlap {overlap:?} beyond the renew deadline"
    );
    let lease = mock.get(&lease_path(A)).unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "dns-1");
    assert!(
        lease["metadata"]["annotations"]["hostedcluster.densityops.com/wanted-by"].is_null(),
        "the request is cleared once home"
    );
    // And it stays home.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(wire.holders(A), ["dns-1"]);
    assert_eq!(wire.holders(B), ["dns-2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_agent_releases_and_its_address_moves_without_a_gap() {
    let mock = MockApi::start();
    let wire = Wire::default();
    let one = start(&mock, &wire, "dns-1", &[A, B], Some(A), true);
    let _two = start(&mock, &wire, "dns-2", &[A, B], Some(B), true);
    wait_for(Duration::from_secs(2), || wire.holders(A) == ["dns-1"])
        .await
        .unwrap();
    let t = Instant::now();
    one.stop.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(2), one.join())
        .await
        .expect("stops within the renew deadline and two periods")
        .unwrap();
    assert!(
        t.elapsed() <= Duration::from_millis(700),
        "stopped after {:?}",
        t.elapsed()
    );
    wait_for(Duration::from_secs(1), || wire.holders(A) == ["dns-2"])
        .await
        .unwrap();
    assert_eq!(wire.longest_gap(A, t), Duration::ZERO);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_api_load_is_a_few_requests_per_second_per_address() {
    let mock = MockApi::start();
    let wire = Wire::default();
    let agents: Vec<_> = ["dns-1", "dns-2", "dns-3"]
        .iter()
        .zip([Some(A), Some(B), None])
        .map(|(who, home)| start(&mock, &wire, who, &[A, B], home, true))
        .collect();
    wait_for(Duration::from_secs(2), || {
        wire.holders(A).len() == 1 && wire.holders(B).len() == 1
    })
    .await
    .unwrap();
    mock.take();
    let window = Duration::from_secs(2);
    tokio::time::sleep(window).await;
    let log = mock.take();
    let per_address = log.len() as f64 / window.as_secs_f64() / 2.0;
    // 3 replicas, 100 ms period: 10 requests/s per replica per address.
    println!(
        "Lease API: {} requests in {window:?} for 2 addresses and 3 replicas: {per_address:.1}/s per address (100 ms period; 5x fewer at the 500 ms default)",
        log.len()
    );
    assert!(
        per_address <= 3.0 * 10.0 * 1.1,
        "{per_address}/s per address"
    );
    assert!(log.iter().all(|r| {
        r.path()
            .starts_with("/apis/coordination.k8s.io/v1/namespaces/oooi-system/leases/")
    }));
    assert!(
        log.iter()
            .all(|r| matches!(r.method.as_str(), "GET" | "PUT" | "POST")),
        "only get, create, update"
    );
    let counted: u64 = agents.iter().map(|a| a.metrics.api_requests_total()).sum();
    assert!(counted > 0);
}
