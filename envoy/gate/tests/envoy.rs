//! The gate in front of a real Envoy (the `envoy` on PATH, as `tools/dev
//! setup` installs it): the routing ports refuse connections until the
//! table is pushed, then route; SIGTERM drains (the table API closes, the
//! routing ports serve on for the drain) before it reaches Envoy; Envoy does
//! not outlive the gate.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use oooi_tests::fixture::TwoClusters;
use oooi_tests::{http_blocking, tls_probe};

/// One test at a time: each checks that ports refuse connections, and a
/// port released by one test's Envoy can be handed to the next test's.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn gate() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_oooi-envoy-gate"))
}

fn refused(addr: SocketAddr) -> bool {
    matches!(
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused
    )
}

/// Sends `signal` (as `kill` names it) to the process `pid`: the gate.
fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

/// Waits until nothing listens on `addr` any more.
fn wait_closed(addr: SocketAddr, within: Duration) -> Duration {
    let start = Instant::now();
    while !refused(addr) {
        assert!(
            start.elapsed() < within,
            "{addr} still open after {within:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_ports_refuse_connections_until_the_table_arrives() {
    let _serial = SERIAL.lock().await;
    let lab = TwoClusters::start_gated(gate(), None)
        .await
        .expect("gated envoy starts");
    let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let (status, _) = http_blocking(lab.envoy.api, "GET", "/ready", &[], b"").expect("ready");
    assert_eq!(status, 503, "no table yet");
    // Refused by the kernel, not accepted and reset: nothing listens yet.
    assert!(refused(lab.kube), "6443 must refuse before the table");
    assert!(refused(lab.https), "443 must refuse before the table");
    let (status, _) = http_blocking(lab.envoy.admin, "GET", "/listeners", &[], b"").expect("admin");
    assert_eq!(status, 200);

    lab.envoy.push_table(&lab.table).expect("push");
    let pushed = Instant::now();
    let deadline = pushed + Duration::from_secs(20);
    let open = loop {
        match tls_probe(lab.https, Some("oauth.c1.example.com"), Some(lo)).await {
            Ok(backend) => {
                assert_eq!(backend, "c1-oauth", "never misrouted");
                break pushed.elapsed();
            }
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "443 not serving 20 s after the push: {e}\n{}",
                    lab.envoy.log_text()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    eprintln!("routing listeners served {open:?} after the push");
    for (target, sni, backend) in [
        (lab.kube, "api.c1.example.com", "c1-kube-apiserver"),
        (lab.kube, "api.c2.example.com", "c2-kube-apiserver"),
        (lab.https, "x.apps.c2.example.com", "c2-apps"),
    ] {
        let got = tls_probe(target, Some(sni), Some(lo))
            .await
            .unwrap_or_else(|e| format!("refused ({e})"));
        assert_eq!(got, backend, "{sni}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_reaches_envoy_and_the_gate_reports_its_exit() {
    let _serial = SERIAL.lock().await;
    let mut lab = TwoClusters::start_gated(gate(), None)
        .await
        .expect("gated envoy starts");
    signal(lab.envoy.pid(), "-TERM");
    let closed = wait_closed(lab.envoy.api, Duration::from_secs(15));
    let deadline = Instant::now() + Duration::from_secs(15);
    let exit = loop {
        if let Some(s) = lab.envoy.exit_status() {
            break s;
        }
        assert!(Instant::now() < deadline, "the gate did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    eprintln!("table API closed {closed:?} after SIGTERM; gate exited with {exit}");
    // Envoy exits 0 on SIGTERM; the gate passes its code on.
    assert_eq!(exit.code(), Some(0), "{}", lab.envoy.log_text());
}

/// The fixture runs the gate with `--drain 2s`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_closes_the_table_api_and_routes_on_until_the_drain_ends() {
    let _serial = SERIAL.lock().await;
    let mut lab = TwoClusters::start_gated(gate(), None)
        .await
        .expect("gated envoy starts");
    lab.envoy.push_table(&lab.table).expect("push");
    let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let deadline = Instant::now() + Duration::from_secs(20);
    while tls_probe(lab.https, Some("oauth.c1.example.com"), Some(lo))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "443 never served");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sent = Instant::now();
    signal(lab.envoy.pid(), "-TERM");
    // The table API (and with it GET /ready) goes first.
    let api_closed = wait_closed(lab.envoy.api, Duration::from_secs(2));
    // The routing listeners still route, with the API closed.
    let got = tls_probe(lab.https, Some("oauth.c1.example.com"), Some(lo))
        .await
        .unwrap_or_else(|e| format!("refused ({e})"));
    assert_eq!(got, "c1-oauth");
    let still = sent.elapsed();
    assert!(
        still < Duration::from_secs(2),
        "checked too late: {still:?}"
    );
    // Then Envoy gets the signal and exits 0.
    let deadline = Instant::now() + Duration::from_secs(15);
    let exit = loop {
        if let Some(s) = lab.envoy.exit_status() {
            break s;
        }
        assert!(Instant::now() < deadline, "the gate did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = sent.elapsed();
    eprintln!(
        "table API closed {api_closed:?} after SIGTERM, routed at {still:?}, exit {exit} at {took:?}"
    );
    assert!(
        took >= Duration::from_secs(2),
        "exited before the drain ended: {took:?}"
    );
    assert_eq!(exit.code(), Some(0), "{}", lab.envoy.log_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_does_not_outlive_a_killed_gate() {
    let _serial = SERIAL.lock().await;
    let lab = TwoClusters::start_gated(gate(), None)
        .await
        .expect("gated envoy starts");
    lab.envoy.push_table(&lab.table).expect("push");
    signal(lab.envoy.pid(), "-KILL");
    // Every port Envoy had closes: its sockets go as the process exits
    // (one by one, so on a busy machine the last may follow the first by
    // a little).
    let closed = [lab.envoy.api, lab.kube, lab.https]
        .map(|a| wait_closed(a, Duration::from_secs(10)))
        .into_iter()
        .max()
        .unwrap_or_default();
    eprintln!("Envoy gone {closed:?} after the gate was killed");
}
