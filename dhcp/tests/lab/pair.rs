//! A pair of servers on the lab's VLAN (see `tests/pair.rs`): server A is
//! the lab's own server (192.0.2.2, primary, the namespace with the
//! bridge); server B (192.0.2.5, secondary) has its own namespace, a leg on
//! the bridge and the pod link 10.99.0.1 ↔ 10.99.0.2 to A.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::{Lab, delete_netns, die_with_test, kill_netns_processes, read_events, sh};
use oooi_dhcp::pair::lb_hash;

pub const TOKEN: &str = "pair-token-0123456789abcdef";
/// Server B's health listener (`--health-addr`, `/healthz` alone) in its
/// namespace, as the pod runs it beside the metrics port.
pub const B_HEALTH: &str = "127.0.0.1:9070";
static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A config for one server of the pair.
pub fn pair_config(
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
pub struct PairLab {
    pub lab: Lab,
    pub b_ns: String,
    pub b_dir: PathBuf,
    b: Option<Child>,
    /// Holds the pair token both servers read; removed after the servers
    /// (fields drop in order).
    _token_dir: tempfile::TempDir,
}

impl PairLab {
    pub fn new() -> PairLab {
        PairLab::with_config(|c| c)
    }

    /// A pair whose two configs are first changed by `edit` (e.g. a
    /// smaller pool).
    pub fn with_config(edit: impl Fn(String) -> String) -> PairLab {
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        // Beside the lab's own directory (which the config must name
        // before the lab exists), removed with the pair.
        let token_dir = tempfile::tempdir().expect("token dir");
        let token = token_dir.path().join("pair-token");
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
        let lab = Lab::new(&edit(a));
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
        std::fs::write(b_dir.join("config.yaml"), edit(bc)).expect("b config");
        PairLab {
            lab,
            b_ns,
            b_dir,
            b: None,
            _token_dir: token_dir,
        }
    }

    pub fn start_b(&mut self) {
        self.start_b_under(&[]);
    }

    /// Starts server B under `wrapper` (e.g. `faketime -f +1h`).
    pub fn start_b_under(&mut self, wrapper: &[&str]) {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.b_dir.join("server.log"))
            .expect("log");
        let child = die_with_test(&mut Command::new("ip"))
            .args(["netns", "exec", &self.b_ns])
            .args(wrapper)
            .arg(env!("CARGO_BIN_EXE_oooi-dhcp"))
            .arg("serve")
            .arg("--config")
            .arg(self.b_dir.join("config.yaml"))
            .arg("--data-dir")
            .arg(self.b_dir.join("data"))
            .args(["--metrics-addr", "127.0.0.1:9067"])
            .args(["--health-addr", B_HEALTH])
            .env("RUST_LOG", "info")
            // A shifted wall clock only (Instant stays the real one).
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start server b");
        self.b = Some(child);
    }

    /// Server B's process id (`ip netns exec` execs the server, so the
    /// child is the server; not so under a wrapper that forks).
    pub fn b_pid(&self) -> Option<u32> {
        self.b.as_ref().map(Child::id)
    }

    /// Kills server B (and anything else in its namespace: a wrapper such
    /// as `faketime` forks the server).
    pub fn kill9_b(&mut self) {
        if let Some(mut c) = self.b.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        kill_netns_processes(&self.b_ns);
    }

    pub fn b_log(&self) -> String {
        std::fs::read_to_string(self.b_dir.join("server.log")).unwrap_or_default()
    }

    pub fn logs(&self) -> String {
        format!("--- A ---\n{}\n--- B ---\n{}", self.lab.log(), self.b_log())
    }

    /// A metric of server `a` (true) or b.
    pub fn metric(&self, a: bool, name: &str) -> f64 {
        if a {
            return self.lab.metric(name);
        }
        let name = name.to_string();
        super::in_netns(&self.b_ns, move || {
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

    /// Whether server B's `/healthz` says its DHCP loop runs (None: no
    /// answer within 2 s).
    pub fn b_healthy(&self) -> Option<bool> {
        super::in_netns(&self.b_ns, move || {
            use std::io::{Read, Write};
            let mut s = std::net::TcpStream::connect_timeout(
                &"127.0.0.1:9067".parse().ok()?,
                Duration::from_secs(2),
            )
            .ok()?;
            s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
            s.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").ok()?;
            let mut out = String::new();
            s.read_to_string(&mut out).ok()?;
            Some(out.lines().next()?.contains(" 200 "))
        })
    }

    /// Waits up to `secs` for `what`, udhcpc's `bound` event in `events`;
    /// the address it bound.
    pub fn wait_bound(&self, secs: u64, what: &str, events: &std::path::Path) -> Ipv4Addr {
        self.wait(secs, what, || last(events, "bound").is_some());
        last(events, "bound")
            .expect("bound")
            .get("ip")
            .parse()
            .expect("ip")
    }

    pub fn wait(&self, secs: u64, what: &str, mut f: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < deadline {
            if f() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("timed out waiting for {what}\n{}", self.logs());
    }

    pub fn both_balancing(&self) {
        self.wait(20, "both servers load balancing", || {
            self.metric(true, "oooi_dhcp_pair_state") == 1.0
                && self.metric(false, "oooi_dhcp_pair_state") == 1.0
        });
    }

    /// (ip, mac, state) rows of a data directory.
    pub fn leases(&self, a: bool) -> Vec<(Ipv4Addr, String, String)> {
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

    /// ip → (mac, expiry) of the active leases of server `a` (true) or b.
    pub fn expiries(&self, a: bool) -> HashMap<Ipv4Addr, (String, u64)> {
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
                (f.get(3) == Some(&"active")).then_some(())?;
                Some((
                    f.first()?.parse().ok()?,
                    (f.get(1)?.to_string(), f.get(2)?.parse().ok()?),
                ))
            })
            .collect()
    }

    /// The MACs that answer ARP for `ip` on the VLAN, asked from the client
    /// namespace `ns` (arping, source 0.0.0.0: the clients' side, not the
    /// servers' stores).
    pub fn arp_holders(&self, ns: &str, ip: Ipv4Addr) -> HashSet<String> {
        let out = Command::new("ip")
            .args(["netns", "exec", ns, "arping", "-0", "-c", "2", "-w", "2"])
            .args(["-i", "c0", &ip.to_string()])
            .output()
            .expect("arping");
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(|w| w.trim_matches(|c: char| !c.is_ascii_hexdigit() && c != ':'))
            .filter(|w| w.len() == 17 && w.split(':').count() == 6)
            .map(str::to_ascii_lowercase)
            .collect()
    }

    /// `arp_holders` for every address of `ips` at once (one `arping` each,
    /// in parallel): the addresses answered by more than one MAC.
    pub fn arp_duplicates(&self, ns: &str, ips: &[Ipv4Addr]) -> Vec<(Ipv4Addr, HashSet<String>)> {
        let children: Vec<(Ipv4Addr, Child)> = ips
            .iter()
            .map(|ip| {
                let c = Command::new("ip")
                    .args(["netns", "exec", ns, "arping", "-0", "-c", "1", "-w", "1"])
                    .args(["-i", "c0", &ip.to_string()])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("arping");
                (*ip, c)
            })
            .collect();
        children
            .into_iter()
            .filter_map(|(ip, c)| {
                let out = c.wait_with_output().ok()?;
                let macs: HashSet<String> = String::from_utf8_lossy(&out.stdout)
                    .split_whitespace()
                    .map(|w| w.trim_matches(|c: char| !c.is_ascii_hexdigit() && c != ':'))
                    .filter(|w| w.len() == 17 && w.split(':').count() == 6)
                    .map(str::to_ascii_lowercase)
                    .collect();
                (macs.len() > 1).then_some((ip, macs))
            })
            .collect()
    }

    /// No address is held (active) by two clients across both stores, and
    /// no client holds two active addresses.
    pub fn duplicate_scan(&self) {
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
        delete_netns(&self.b_ns);
    }
}

/// A MAC whose client's RFC 3074 hash is even (primary) or odd
/// (secondary). udhcpc sends a client identifier (`01` and the MAC), which
/// is what is hashed then; dhclient sends none, so the MAC is.
pub fn mac_for(primary: bool, seed: u8, udhcpc: bool) -> String {
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

pub fn last(events: &std::path::Path, reason: &str) -> Option<super::Event> {
    read_events(events)
        .into_iter()
        .rev()
        .find(|e| e.reason == reason)
}
