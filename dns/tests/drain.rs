//! SIGTERM drains instead of stopping: `/healthz` turns to 503 `draining`
//! at once (so the address agent hands the VLAN addresses to a live replica
//! and the pod leaves its Services) while every listener keeps answering for
//! `--drain-seconds`; then the server exits 0. A second signal exits at once.
//! Without a handler the server, PID 1 in its container, ignored SIGTERM and
//! was killed at the end of the grace period, its agent with it.

#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

mod support;

use std::process::ExitStatus;
use std::time::{Duration, Instant};

use support::{dig, http_get, start_with, wait_for};

const HTTP: &str = "127.0.0.38:25695";
const PORT: u16 = 25630;

fn config(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("config.yaml");
    std::fs::write(
        &path,
        format!(
            r#"
http: {HTTP}
clusters:
  - name: c1
    base_domain: example.com
    proxy: [192.0.2.10]
views:
  - name: vlan
    kind: vlan
    listen: ["127.0.0.38:{PORT}"]
"#
        ),
    )
    .unwrap();
    path
}

fn answer() -> String {
    dig("127.0.0.38", PORT, &["+short", "api.c1.example.com", "A"])
        .trim()
        .to_string()
}

fn signal(child: &std::process::Child, sig: libc::c_int) {
    // SAFETY: sends a signal to our own child process.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, sig) }, 0);
}

fn exit_within(child: &mut std::process::Child, limit: Duration) -> Option<ExitStatus> {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

#[test]
fn sigterm_keeps_answering_for_the_drain_period_while_healthz_says_draining() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = start_with(&config(dir.path()), &["--drain-seconds", "2"]);
    assert!(
        wait_for(|| http_get(HTTP, "/healthz") == "ok"),
        "never ready"
    );
    assert_eq!(answer(), "192.0.2.10");

    let sent = Instant::now();
    signal(&s.0, libc::SIGTERM);
    assert!(
        wait_for(|| http_get(HTTP, "/healthz") == "draining"),
        "healthz: {}",
        http_get(HTTP, "/healthz")
    );
    // Still answering, over the whole period.
    assert_eq!(answer(), "192.0.2.10");
    std::thread::sleep(Duration::from_millis(1000));
    assert!(sent.elapsed() < Duration::from_millis(1900));
    assert_eq!(
        answer(),
        "192.0.2.10",
        "answers stop before the drain period ends"
    );

    let status =
        exit_within(&mut s.0, Duration::from_secs(5)).expect("still running 5 s after the period");
    let took = sent.elapsed();
    println!("exited {took:?} after SIGTERM: {status}");
    assert!(status.success(), "{status}");
    assert!(
        took >= Duration::from_secs(2),
        "exited before the period: {took:?}"
    );
}

#[test]
fn a_second_signal_exits_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = config(dir.path());
    // Its own addresses: the test above may still be draining.
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("127.0.0.38", "127.0.0.39");
    std::fs::write(&path, text).unwrap();
    let http = HTTP.replace("127.0.0.38", "127.0.0.39");
    let mut s = start_with(&path, &["--drain-seconds", "30"]);
    assert!(
        wait_for(|| http_get(&http, "/healthz") == "ok"),
        "never ready"
    );
    signal(&s.0, libc::SIGTERM);
    assert!(wait_for(|| http_get(&http, "/healthz") == "draining"));
    let sent = Instant::now();
    signal(&s.0, libc::SIGINT);
    let status =
        exit_within(&mut s.0, Duration::from_secs(3)).expect("a second signal did not end it");
    assert!(status.success(), "{status}");
    println!("exited {:?} after the second signal", sent.elapsed());
}
