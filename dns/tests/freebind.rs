//! Floating addresses (root): in a network namespace of its own, oooi-dns
//! serves a view that lists two addresses of which the interface has only
//! one. With `freebind: true` it starts, answers on the first, and answers
//! on the second as soon as the address is added to the interface (as the
//! address agent does when it takes the address over), without a restart
//! or a reload. Without `freebind` the same config does not start: a missing
//! address still shows at once.
#![allow(clippy::unwrap_used)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use oooi_flood::sh;

const OWN: &str = "10.79.0.3";
const FLOATING: &str = "10.79.0.13";

/// A namespace with a veth pair (`net1` and its peer), `OWN` on `net1`;
/// removed on drop.
struct Netns(String);

impl Netns {
    fn new(tag: &str) -> Netns {
        let name = format!("dnsfb{tag}{}", std::process::id() % 100_000);
        let _ = Command::new("ip").args(["netns", "del", &name]).status();
        sh(&format!("ip netns add {name}"));
        sh(&format!(
            "ip -n {name} link set lo up && ip -n {name} link add net1 type veth peer name peer && \
             ip -n {name} link set net1 up && ip -n {name} link set peer up && \
             ip -n {name} addr add {OWN}/24 dev net1"
        ));
        Netns(name)
    }

    fn spawn_dns(&self, config: &std::path::Path) -> Child {
        Command::new("ip")
            .args(["netns", "exec", &self.0, env!("CARGO_BIN_EXE_oooi-dns")])
            .args(["serve", "--config"])
            .arg(config)
            .env_remove("POD_IP")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// `dig +short` of `name` at `server` from inside the namespace.
    fn dig(&self, server: &str, name: &str) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.0, "dig"])
            .arg(format!("@{server}"))
            .args(["+time=1", "+tries=1", "+short", name])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn config(dir: &std::path::Path, freebind: bool) -> std::path::PathBuf {
    let path = dir.join("config.yaml");
    std::fs::write(
        &path,
        format!(
            "views:\n  - name: vlan\n    freebind: {freebind}\n    listen: [\"{OWN}:53\", \"{FLOATING}:53\"]\n    zones:\n      - origin: c1.example.com\n        records:\n          - name: api\n            a: [\"192.0.2.4\"]\n"
        ),
    )
    .unwrap();
    path
}

fn assert_root() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test builds a network namespace: run it as root"
    );
}

#[test]
fn a_freebind_view_answers_on_an_address_added_after_the_start() {
    assert_root();
    let ns = Netns::new("a");
    let dir = tempfile::tempdir().unwrap();
    let mut child = ns.spawn_dns(&config(dir.path(), true));
    let answered = |server: &str| ns.dig(server, "api.c1.example.com") == "192.0.2.4";
    let deadline = Instant::now() + Duration::from_secs(10);
    while !answered(OWN) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "oooi-dns exited: freebind listeners must bind a missing address"
        );
        assert!(Instant::now() < deadline, "no answer on {OWN}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Not on any interface yet: nothing answers there.
    let before = ns.dig(FLOATING, "api.c1.example.com");
    assert!(!before.contains("192.0.2.4"), "{before}");
    // What the address agent does on a takeover.
    sh(&format!("ip -n {} addr add {FLOATING}/24 dev net1", ns.0));
    let added = Instant::now();
    let deadline = added + Duration::from_secs(3);
    while !answered(FLOATING) {
        assert!(
            Instant::now() < deadline,
            "no answer on {FLOATING} 3 s after it was added"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    println!(
        "answered on the added address {} ms after the add",
        added.elapsed().as_millis()
    );
    // And over TCP (a truncated answer's retry).
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.0, "dig", "+tcp", "+short", "+time=1"])
        .arg(format!("@{FLOATING}"))
        .arg("api.c1.example.com")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "192.0.2.4");
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn without_freebind_a_missing_listener_address_stops_the_start() {
    assert_root();
    let ns = Netns::new("b");
    let dir = tempfile::tempdir().unwrap();
    let mut child = ns.spawn_dns(&config(dir.path(), false));
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("oooi-dns kept running with a listener address no interface has");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success());
    let mut err = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(err.contains(FLOATING), "{err}");
}
