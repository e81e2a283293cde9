//! A pair of `oooi-dhcp` servers on one VLAN (a bridge), joined by a
//! separate link standing in for the pod network that carries their lease
//! updates, with real clients (busybox `udhcpc`, ISC `dhclient`, `perfdhcp`)
//! in network namespaces: load balancing, `kill -9` of either server,
//! renewals and rebinding through the survivor, a new worker during the
//! outage, the return and resync, and a scan of both lease stores for an
//! address held twice. Needs root.

mod lab;

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lab::{Lab, read_events, sh};
use oooi_dhcp::pair::lb_hash;

const TOKEN: &str = "pair-token-0123456789abcdef";
static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A config for one server of the pair.
fn pair_config(
    iface: &str,
    me: &str,
    other: &str,
    role: &str,
    api: &str,
    listen: &str,
    token: &str,
) -> String {
    format!(
        r#"interface: {iface}
server_ip: {me}
subnet: 192.0.2.0/24
gateway: 192.0.2.1
range: {{ start: 192.0.2.100, end: 192.0.2.199 }}
excluded: [192.0.2.3, 192.0.2.4]
dns_servers: [192.0.2.3]
lease_seconds: 60
t1_seconds: 8
t2_seconds: 14
reservations:
  - {{ mac: "02:00:00:00:00:aa", ip: 192.0.2.50, hostname: worker-0 }}
peer:
  role: {role}
  server_ip: {other}
  api: "{api}"
  listen: "{listen}"
  token_file: {token}
  heartbeat_ms: 200
  down_after_ms: 1500
"#
    )
}

/// Server A is the lab's own server (192.0.2.2, primary, namespace with the
/// bridge); server B (192.0.2.5, secondary) has its own namespace, a leg on
/// the bridge and the pod link 10.99.0.1 ↔ 10.99.0.2 to A.
struct PairLab {
    lab: Lab,
    b_ns: String,
    b_dir: PathBuf,
    b: Option<Child>,
}

impl PairLab {
    fn new() -> PairLab {
        let token = std::env::temp_dir().join(format!(
            "oooi-pair-token-{}-{}",
            std::process::id(),
            NEXT.load(Ordering::SeqCst)
        ));
        std::fs::write(&token, TOKEN).expect("token");
        let token = token.display().to_string();
        let a = pair_config(
            "br0",
            "192.0.2.2",
            "192.0.2.5",
            "primary",
            "10.99.0.2:9068",
            "10.99.0.1:9068",
            &token,
        );
        let lab = Lab::new(&a);
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let b_ns = format!("odp{}x{n}b", std::process::id());
        sh(&["ip", "netns", "add", &b_ns]);
        sh(&["ip", "-n", &b_ns, "link", "set", "lo", "up"]);
        let s = lab.server_ns.clone();
        sh(&[
            "ip", "-n", &s, "link", "add", "pb", "type", "veth", "peer", "name", "vb", "netns",
            &b_ns,
        ]);
        sh(&["ip", "-n", &s, "link", "set", "pb", "master", "br0"]);
        sh(&["ip", "-n", &s, "link", "set", "pb", "up"]);
        sh(&[
            "ip",
            "-n",
            &b_ns,
            "addr",
            "add",
            "192.0.2.5/24",
            "dev",
            "vb",
        ]);
        sh(&["ip", "-n", &b_ns, "link", "set", "vb", "up"]);
        // The pod network: never the VLAN.
        sh(&[
            "ip", "-n", &s, "link", "add", "pa", "type", "veth", "peer", "name", "pod", "netns",
            &b_ns,
        ]);
        sh(&["ip", "-n", &s, "addr", "add", "10.99.0.1/30", "dev", "pa"]);
        sh(&["ip", "-n", &s, "link", "set", "pa", "up"]);
        sh(&[
            "ip",
            "-n",
            &b_ns,
            "addr",
            "add",
            "10.99.0.2/30",
            "dev",
            "pod",
        ]);
        sh(&["ip", "-n", &b_ns, "link", "set", "pod", "up"]);
        let b_dir = lab.dir.path().join("b");
        std::fs::create_dir_all(&b_dir).expect("b dir");
        let bc = pair_config(
            "vb",
            "192.0.2.5",
            "192.0.2.2",
            "secondary",
            "10.99.0.1:9068",
            "10.99.0.2:9068",
            &token,
        );
        std::fs::write(b_dir.join("config.yaml"), bc).expect("b config");
        PairLab {
            lab,
            b_ns,
            b_dir,
            b: None,
        }
    }

    fn start_b(&mut self) {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.b_dir.join("server.log"))
            .expect("log");
        let child = Command::new("ip")
            .args(["netns", "exec", &self.b_ns])
            .arg(env!("CARGO_BIN_EXE_oooi-dhcp"))
            .arg("serve")
            .arg("--config")
            .arg(self.b_dir.join("config.yaml"))
            .arg("--data-dir")
            .arg(self.b_dir.join("data"))
            .args(["--metrics-addr", "127.0.0.1:9067"])
            .env("RUST_LOG", "info")
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start server b");
        self.b = Some(child);
    }

    fn kill9_b(&mut self) {
        if let Some(mut c) = self.b.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn b_log(&self) -> String {
        std::fs::read_to_string(self.b_dir.join("server.log")).unwrap_or_default()
    }

    fn logs(&self) -> String {
        format!("--- A ---\n{}\n--- B ---\n{}", self.lab.log(), self.b_log())
    }

    /// A metric of server `a` (true) or b.
    fn metric(&self, a: bool, name: &str) -> f64 {
        if a {
            return self.lab.metric(name);
        }
        let name = name.to_string();
        lab::in_netns(&self.b_ns, move || {
            use std::io::{Read, Write};
            let mut s = std::net::TcpStream::connect_timeout(
                &"127.0.0.1:9067".parse().ok()?,
                Duration::from_secs(2),
            )
            .ok()?;
            s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
            s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").ok()?;
            let mut out = String::new();
            s.read_to_string(&mut out).ok()?;
            out.lines()
                .find(|l| l.starts_with(&name) && l[name.len()..].starts_with(' '))
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(-1.0)
    }

    fn wait(&self, secs: u64, what: &str, mut f: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < deadline {
            if f() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("timed out waiting for {what}\n{}", self.logs());
    }

    fn both_balancing(&self) {
        self.wait(20, "both servers load balancing", || {
            self.metric(true, "oooi_dhcp_pair_state") == 1.0
                && self.metric(false, "oooi_dhcp_pair_state") == 1.0
        });
    }

    /// (ip, mac, state) rows of a data directory.
    fn leases(&self, a: bool) -> Vec<(Ipv4Addr, String, String)> {
        let dir = if a {
            self.lab.data_dir()
        } else {
            self.b_dir.join("data")
        };
        let out = Command::new(env!("CARGO_BIN_EXE_oooi-dhcp"))
            .arg("leases")
            .arg("--data-dir")
            .arg(dir)
            .output()
            .expect("leases");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .skip(1)
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                Some((
                    f.first()?.parse().ok()?,
                    f.get(1)?.to_string(),
                    f.get(3)?.to_string(),
                ))
            })
            .collect()
    }

    /// No address is held (active) by two clients across both stores, and
    /// no client holds two active addresses.
    fn duplicate_scan(&self) {
        let mut holder: HashMap<Ipv4Addr, String> = HashMap::new();
        for a in [true, false] {
            for (ip, mac, state) in self.leases(a) {
                if state != "active" {
                    continue;
                }
                if let Some(other) = holder.insert(ip, mac.clone()) {
                    assert_eq!(
                        other,
                        mac,
                        "{ip} held by {other} and {mac}\n{}",
                        self.logs()
                    );
                }
            }
        }
        let macs: HashSet<&String> = holder.values().collect();
        assert_eq!(
            macs.len(),
            holder.len(),
            "a client holds two addresses: {holder:?}"
        );
    }
}

impl Drop for PairLab {
    fn drop(&mut self) {
        self.kill9_b();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.b_ns])
            .status();
    }
}

/// A MAC whose client's RFC 3074 hash is even (primary) or odd
/// (secondary). udhcpc sends a client identifier (`01` and the MAC), which
/// is what is hashed then; dhclient sends none, so the MAC is.
fn mac_for(primary: bool, seed: u8, udhcpc: bool) -> String {
    (0..=255u8)
        .map(|n| [2, 0, 0, 9, seed, n])
        .find(|m| {
            let key: Vec<u8> = if udhcpc {
                std::iter::once(1).chain(m.iter().copied()).collect()
            } else {
                m.to_vec()
            };
            lb_hash(&key).is_multiple_of(2) == primary
        })
        .map(|m| {
            m.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":")
        })
        .expect("a MAC of each kind")
}

fn last(events: &std::path::Path, reason: &str) -> Option<lab::Event> {
    read_events(events)
        .into_iter()
        .rev()
        .find(|e| e.reason == reason)
}

#[test]
fn a_pair_splits_clients_survives_kill_9_rebinds_through_the_survivor_and_resyncs() {
    let mut p = PairLab::new();
    let primaries: Vec<String> = (1..=3).map(|i| mac_for(true, i, true)).collect();
    let secondaries: Vec<String> = (1..=3).map(|i| mac_for(false, i, true)).collect();
    let p_ns: Vec<String> = primaries.iter().map(|m| p.lab.add_client(m)).collect();
    let s_ns: Vec<String> = secondaries.iter().map(|m| p.lab.add_client(m)).collect();
    let late = mac_for(true, 40, true);
    let late_ns = p.lab.add_client(&late);
    let dh = mac_for(false, 50, false);
    let dh_ns = p.lab.add_client(&dh);
    p.lab.start_server();
    p.start_b();
    p.both_balancing();

    // Normal leases split between the servers by the client's hash.
    let mut running = Vec::new();
    for (ns, want) in p_ns
        .iter()
        .map(|n| (n, "192.0.2.2"))
        .chain(s_ns.iter().map(|n| (n, "192.0.2.5")))
    {
        let (events, idx) = p.lab.udhcpc(ns, &[]);
        p.wait(15, "udhcpc bound", || last(&events, "bound").is_some());
        let b = last(&events, "bound").expect("bound");
        assert_eq!(b.get("serverid"), want, "{ns}");
        running.push((events, idx, b.get("ip").to_string(), want));
    }
    let got = p.lab.dhclient(&dh_ns);
    let bound = got
        .iter()
        .rev()
        .find(|e| e.reason == "BOUND")
        .expect("dhclient BOUND");
    assert_eq!(bound.get("serverid"), "192.0.2.5");
    let dh_ip = bound.get("ip").to_string();
    // The primary allocates from the lower half of the pool, the secondary
    // from the upper half.
    for (_, _, ip, server) in &running {
        let last_octet: u8 = ip
            .rsplit('.')
            .next()
            .and_then(|o| o.parse().ok())
            .expect("ip");
        assert_eq!(
            last_octet < 150,
            *server == "192.0.2.2",
            "{ip} from {server}"
        );
    }
    // Every ACKed lease is in both stores (sent to the other server before the ACK).
    for a in [true, false] {
        let have: HashSet<String> = p
            .leases(a)
            .into_iter()
            .map(|(ip, _, _)| ip.to_string())
            .collect();
        for (_, _, ip, _) in &running {
            assert!(
                have.contains(ip),
                "{ip} missing on {}",
                if a { "A" } else { "B" }
            );
        }
        assert!(have.contains(&dh_ip));
    }
    p.duplicate_scan();

    // kill -9 the secondary: its clients rebind through the primary at T2
    // and keep their addresses.
    p.kill9_b();
    // Contact lost: the primary serves its own scope only until clients of
    // the other scope go unanswered, then takes over.
    p.wait(10, "the primary loses contact", || {
        p.metric(true, "oooi_dhcp_pair_state") == 3.0
    });
    for (events, _, ip, server) in running.iter().filter(|r| r.3 == "192.0.2.5") {
        p.wait(75, "rebind through the survivor", || {
            read_events(events)
                .iter()
                .any(|e| e.reason == "renew" && e.get("serverid") == "192.0.2.2")
        });
        let e = read_events(events)
            .into_iter()
            .rev()
            .find(|e| e.reason == "renew" && e.get("serverid") == "192.0.2.2")
            .expect("renew");
        assert_eq!(
            &e.get("ip").to_string(),
            ip,
            "{server} client kept its address"
        );
    }
    assert_eq!(p.metric(true, "oooi_dhcp_pair_state"), 2.0, "took over");
    assert!(p.lab.log().contains("goes unanswered"), "{}", p.lab.log());
    // The primary's own clients renew as usual meanwhile.
    for (events, _, ip, _) in running.iter().filter(|r| r.3 == "192.0.2.2") {
        p.wait(75, "renew", || {
            read_events(events).iter().any(|e| e.reason == "renew")
        });
        assert_eq!(
            &last(events, "renew").expect("renew").get("ip").to_string(),
            ip
        );
    }
    // A new worker boots during the outage (its hash is the primary's, but
    // any client is served now).
    let (events, _) = p.lab.udhcpc(&late_ns, &[]);
    p.wait(15, "new worker bound during the outage", || {
        last(&events, "bound").is_some()
    });
    let late_ip = last(&events, "bound").expect("bound").get("ip").to_string();
    p.duplicate_scan();

    // The secondary returns: it syncs before it answers, and the pair goes
    // back to load balancing.
    p.start_b();
    p.both_balancing();
    assert!(p.b_log().contains("leases exchanged"), "{}", p.b_log());
    let b_has: HashSet<String> = p
        .leases(false)
        .into_iter()
        .map(|(ip, _, _)| ip.to_string())
        .collect();
    assert!(
        b_has.contains(&late_ip),
        "the lease of the outage reached the returning server"
    );
    // The secondary answers its clients again.
    let fresh = mac_for(false, 60, true);
    let fresh_ns = p.lab.add_client(&fresh);
    let (events, idx) = p.lab.udhcpc(&fresh_ns, &["-q", "-n"]);
    assert!(p.lab.wait_child(idx, 15), "{}", p.logs());
    assert_eq!(
        last(&events, "bound").expect("bound").get("serverid"),
        "192.0.2.5"
    );
    p.duplicate_scan();

    // The same the other way round: kill -9 the primary.
    p.lab.kill9_server();
    p.wait(10, "the secondary loses contact", || {
        p.metric(false, "oooi_dhcp_pair_state") == 3.0
    });
    for (events, _, ip, _) in running.iter().filter(|r| r.3 == "192.0.2.2") {
        p.wait(75, "rebind through the secondary", || {
            read_events(events)
                .iter()
                .any(|e| e.reason == "renew" && e.get("serverid") == "192.0.2.5")
        });
        let e = read_events(events)
            .into_iter()
            .rev()
            .find(|e| e.reason == "renew" && e.get("serverid") == "192.0.2.5")
            .expect("renew");
        assert_eq!(&e.get("ip").to_string(), ip);
    }
    p.lab.start_server();
    p.both_balancing();
    p.duplicate_scan();
}

#[test]
fn the_pair_api_refuses_a_wrong_token() {
    let mut p = PairLab::new();
    p.lab.start_server();
    p.start_b();
    p.both_balancing();
    let ns = p.lab.server_ns.clone();
    let (status, ok) = lab::in_netns(&ns, || {
        let bad = oooi_dhcp::peer::Client::new(
            "10.99.0.2:9068",
            "wrong-token-0123456789",
            Duration::from_secs(2),
        );
        let good = oooi_dhcp::peer::Client::new("10.99.0.2:9068", TOKEN, Duration::from_secs(2));
        (
            bad.call("GET", "/pair/v1/leases", &[])
                .map(|r| r.0)
                .unwrap_or(0),
            good.call("GET", "/pair/v1/state", &[])
                .map(|r| r.0)
                .unwrap_or(0),
        )
    });
    assert_eq!((status, ok), (401, 200));
    assert!(p.metric(false, "oooi_dhcp_pair_unauthorized_total") >= 1.0);
}

/// perfdhcp (relay-style DORAs broadcast to both servers, the same 80
/// clients every round) against the pair, with one server killed with
/// `kill -9` mid-burst, three times (alternating): after each, no address
/// is held twice across both lease stores, and the killed server returns,
/// syncs and balancing resumes.
#[test]
fn perfdhcp_against_the_pair_with_kill_9_mid_burst_three_times_never_holds_an_address_twice() {
    let mut p = PairLab::new();
    let ns = p.lab.add_client("02:00:00:00:0f:01");
    sh(&["ip", "-n", &ns, "addr", "add", "192.0.2.9/24", "dev", "c0"]);
    p.lab.start_server();
    p.start_b();
    p.both_balancing();
    for round in 0..3 {
        let perf = Command::new("ip")
            .args([
                "netns", "exec", &ns, "perfdhcp", "-4", "-l", "c0", "-r", "300", "-R", "80",
            ])
            .args(["-p", "4", "-d", "1", "-b", "mac=02:0f:00:00:00:00"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("perfdhcp");
        std::thread::sleep(Duration::from_millis(1500));
        let kill_a = round % 2 == 1;
        if kill_a {
            p.lab.kill9_server();
        } else {
            p.kill9_b();
        }
        let out = perf.wait_with_output().expect("perfdhcp output");
        let text = String::from_utf8_lossy(&out.stdout);
        let rate = text
            .lines()
            .find(|l| l.trim_start().starts_with("Rate:"))
            .unwrap_or("no rate line")
            .trim()
            .to_string();
        eprintln!(
            "round {round}: killed {} mid-burst; perfdhcp {rate}",
            if kill_a { "A" } else { "B" }
        );
        let exchanges: f64 = rate
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        assert!(exchanges > 0.0, "round {round}: the burst ran: {text}");
        p.duplicate_scan();
        let acked: usize = p.leases(!kill_a).len();
        assert!(
            acked > 0,
            "the survivor holds leases after round {round}\n{text}"
        );
        if kill_a {
            p.lab.start_server();
        } else {
            p.start_b();
        }
        p.both_balancing();
        p.duplicate_scan();
    }
}
