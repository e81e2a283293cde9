//! The agent binary end to end (root): two replica network namespaces and a
//! worker namespace on one bridge standing in for the VLAN, and a
//! management bridge on which a stand-in "API server" listens (a TCP
//! listener that counts connections; the agents' KUBECONFIG points at it):
//! the default timing (200 ms adverts, dead after 1.2 s). Each replica runs
//! `python3 -m http.server` as its component (readiness `/ready`, and
//! `/who` naming the replica on any address). The worker probes
//! `http://10.77.0.3:8080/who` every 50 ms over TCP and `arping`s the
//! address all along.
//!
//! Steps: SIGKILL of replica 1 (agent and server); a node loss (replica 1's
//! links down); a gray failure (replica 1's switch port disabled: every
//! frame dropped both ways while both links stay up, and its pod, readiness
//! and management network stay fine); a frozen agent (SIGSTOP); after each,
//! replica 1's return (the address goes home). After each fault replica 2
//! answers on 10.77.0.3 within 2 s (3 s for the gray failure), the
//! worker's neighbour entry moves to replica 2's MAC, and no probe fails
//! during a return. The API stand-in counts no connection: the agent has no
//! API client, so an API outage (stopped, firewalled or slow) changes
//! nothing.

#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oooi_flood::sh;

const HOME1: &str = "10.77.0.3";
const HOME2: &str = "10.77.0.6";
const MAC1: &str = "02:00:00:77:00:01";
const MAC2: &str = "02:00:00:77:00:02";

fn output(cmd: &str) -> String {
    let out = Command::new("sh").args(["-c", cmd]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `f` on a thread that entered network namespace `ns` (sockets made
/// there stay there).
fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: a valid namespace fd; only this thread moves.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .unwrap()
}

/// Namespaces, bridge and links; removed on drop.
struct Net {
    prefix: String,
}

impl Net {
    fn ns(&self, name: &str) -> String {
        format!("{}-{name}", self.prefix)
    }

    /// `tag` keeps the namespaces of the tests in this binary apart.
    fn build(tag: &str) -> Net {
        let prefix = format!("agt{tag}{}", std::process::id() % 100_000);
        let net = Net { prefix };
        let br = net.ns("br");
        sh(&format!("ip netns add {br}"));
        sh(&format!(
            "ip -n {br} link set lo up && ip -n {br} link add br0 type bridge && ip -n {br} link set br0 up && \
             ip -n {br} link add mg0 type bridge && ip -n {br} addr add 10.78.0.1/24 dev mg0 && ip -n {br} link set mg0 up"
        ));
        for (name, vlan, mac, mgmt) in [
            ("r1", HOME1, MAC1, Some("10.78.0.3")),
            ("r2", HOME2, MAC2, Some("10.78.0.6")),
            ("w", "10.77.0.50", "02:00:00:77:00:50", None),
        ] {
            let ns = net.ns(name);
            sh(&format!("ip netns add {ns} && ip -n {ns} link set lo up"));
            // The VLAN interface: its static address as the CNI gives it.
            let vlan_if = if mgmt.is_some() { "net1" } else { "eth0" };
            sh(&format!(
                "ip -n {br} link add v{name} type veth peer name {vlan_if} netns {ns} && \
                 ip -n {br} link set v{name} master br0 up && \
                 ip -n {ns} link set {vlan_if} address {mac} up && \
                 ip -n {ns} addr add {vlan}/24 dev {vlan_if}"
            ));
            if let Some(m) = mgmt {
                sh(&format!(
                    "ip -n {br} link add m{name} type veth peer name eth0 netns {ns} && \
                     ip -n {br} link set m{name} master mg0 up && \
                     ip -n {ns} addr add {m}/24 dev eth0 && ip -n {ns} link set eth0 up"
                ));
            }
        }
        net
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for n in ["r1", "r2", "w", "br"] {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(n)])
                .status();
        }
    }
}

/// One replica: its component stand-in and its agent.
struct Replica {
    name: String,
    ns: String,
    dir: tempfile::TempDir,
    server: Option<Child>,
    agent: Option<Child>,
    stream: Option<Child>,
}

impl Replica {
    fn new(net: &Net, name: &str) -> Replica {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("who"), name).unwrap();
        std::fs::write(dir.path().join("ready"), "ok").unwrap();
        Replica {
            name: name.to_string(),
            ns: net.ns(name),
            dir,
            server: None,
            agent: None,
            stream: None,
        }
    }

    fn start_server(&mut self) {
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns,
                "/usr/bin/python3",
                "-m",
                "http.server",
                "8080",
            ])
            .args(["--bind", "0.0.0.0", "--directory"])
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.server = Some(child);
    }

    fn start_agent(&mut self, kubeconfig: &std::path::Path, home: &str, log: &std::path::Path) {
        // One replica names the group the way the controller renders it.
        let group = if self.name == "r1" {
            "--lease-prefix"
        } else {
            "--group"
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns,
                env!("CARGO_BIN_EXE_oooi-addr-agent"),
            ])
            .args(["--identity", &self.name, "--namespace", "oooi-system"])
            .args([group, "vlan77-dns", "--interface", "net1"])
            .args([
                "--address",
                &format!("{HOME1}/24,{HOME2}/24"),
                "--home",
                home,
            ])
            .args(["--ready-url", "http://127.0.0.1:8080/ready"])
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.agent = Some(child);
    }

    fn kill(&mut self) {
        for c in [self.agent.take(), self.server.take(), self.stream.take()]
            .into_iter()
            .flatten()
        {
            let mut c = c;
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn signal_agent(&self, sig: &str) {
        if let Some(a) = &self.agent {
            sh(&format!("kill -{sig} {}", a.id()));
        }
    }

    fn has(&self, ip: &str) -> bool {
        output(&format!("ip -n {} -4 -o addr show dev net1", self.ns))
            .contains(&format!("inet {ip}/"))
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One probe of the worker: when, and which replica answered, or why not:
/// `connect` (no connection within 250 ms: nobody answers the address) or
/// `reset` (connected, then reset or no answer: the address moved while
/// the request was in flight).
type Probe = (Instant, Result<String, &'static str>);

/// Probes http://10.77.0.3:8080/who from the worker every 50 ms.
fn start_prober(ns: &str, stop: Arc<AtomicBool>) -> Arc<Mutex<Vec<Probe>>> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let (l, ns) = (log.clone(), ns.to_string());
    std::thread::spawn(move || {
        in_netns(&ns, move || {
            let to: SocketAddr = format!("{HOME1}:8080").parse().unwrap();
            while !stop.load(Ordering::SeqCst) {
                let t = Instant::now();
                let who = (|| {
                    // Short: a SYN to a MAC that is gone is only retried
                    // after 1 s, which would hide when the address moved.
                    let mut s = TcpStream::connect_timeout(&to, Duration::from_millis(250))
                        .map_err(|_| "connect")?;
                    s.set_read_timeout(Some(Duration::from_secs(1)))
                        .map_err(|_| "reset")?;
                    s.write_all(b"GET /who HTTP/1.0\r\n\r\n")
                        .map_err(|_| "reset")?;
                    let mut body = String::new();
                    s.read_to_string(&mut body).map_err(|_| "reset")?;
                    body.rsplit("\r\n\r\n")
                        .next()
                        .map(str::to_string)
                        .ok_or("reset")
                })();
                l.lock().unwrap().push((t, who));
                std::thread::sleep(Duration::from_millis(50).saturating_sub(t.elapsed()));
            }
        })
    });
    log
}

/// From `since`: how long until the first answer by `who`.
fn answered_by(probes: &Arc<Mutex<Vec<Probe>>>, since: Instant, who: &str) -> Option<Duration> {
    let p = probes.lock().unwrap();
    p.iter()
        .find(|(t, w)| *t >= since && w.as_deref() == Ok(who))
        .map(|(t, _)| *t - since)
}

fn failures(probes: &Arc<Mutex<Vec<Probe>>>, since: Instant, kind: &str) -> usize {
    let p = probes.lock().unwrap();
    p.iter()
        .filter(|(t, w)| *t >= since && *w == Err(kind))
        .count()
}

fn neighbour_mac(w: &str) -> String {
    output(&format!("ip -n {w} neigh show {HOME1}"))
}

async fn wait(limit: Duration, mut cond: impl FnMut() -> bool) -> Option<Duration> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if cond() {
            return Some(t0.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// The stand-in API server on the management bridge: a listener that
/// counts the connections made to it, and a kubeconfig naming it (in the
/// returned directory).
fn api_stand_in(
    net: &Net,
) -> (
    Arc<std::sync::atomic::AtomicUsize>,
    tempfile::TempDir,
    std::path::PathBuf,
) {
    let listener = in_netns(&net.ns("br"), || {
        std::net::TcpListener::bind("10.78.0.1:0").unwrap()
    });
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let c = count.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            if conn.is_ok() {
                c.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://10.78.0.1:{port}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    namespace: oooi-system\ncurrent-context: c\n"
        ),
    )
    .unwrap();
    (count, dir, kubeconfig)
}

/// The arping monitor: probes with two MACs answering (from its output).
fn double_answers(arping_out: &str) -> Vec<(String, Vec<String>)> {
    let mut by_index: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for line in arping_out.lines() {
        // "42 bytes from 02:00:00:77:00:01 (10.77.0.3): index=17 time=..."
        let (Some(mac), Some(index)) = (
            line.split("from ").nth(1).and_then(|r| r.split(' ').next()),
            line.split("index=")
                .nth(1)
                .and_then(|r| r.split(' ').next()),
        ) else {
            continue;
        };
        by_index
            .entry(index.to_string())
            .or_default()
            .insert(mac.to_lowercase());
    }
    by_index
        .into_iter()
        .filter(|(_, macs)| macs.len() > 1)
        .map(|(i, m)| (i, m.into_iter().collect()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_replicas_address_moves_to_the_other_and_goes_home_again() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test builds network namespaces: run it as root"
    );
    let net = Net::build("f");
    let (w, r1ns) = (net.ns("w"), net.ns("r1"));
    let (api_connections, dir, kubeconfig) = api_stand_in(&net);
    let logs = (dir.path().join("r1.log"), dir.path().join("r2.log"));
    let mut r1 = Replica::new(&net, "r1");
    let mut r2 = Replica::new(&net, "r2");
    r1.start_server();
    r2.start_server();
    r1.start_agent(&kubeconfig, HOME1, &logs.0);
    r2.start_agent(&kubeconfig, HOME2, &logs.1);
    let show_logs = || {
        format!(
            "r1:\n{}\nr2:\n{}",
            std::fs::read_to_string(&logs.0).unwrap_or_default(),
            std::fs::read_to_string(&logs.1).unwrap_or_default()
        )
    };
    wait(Duration::from_secs(10), || {
        r1.has(HOME1) && r2.has(HOME2) && !r1.has(HOME2) && !r2.has(HOME1)
    })
    .await
    .unwrap_or_else(|| panic!("the homes never took their addresses\n{}", show_logs()));
    let load_from = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let probes = start_prober(&w, stop.clone());
    let arping = Command::new("ip")
        .args([
            "netns", "exec", &w, "arping", "-i", "eth0", "-W", "0.1", "-c", "100000", HOME1,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Steady state: r1 answers (the stand-in server may be slow to start
    // on a loaded machine), then a second of answers.
    let started = Instant::now();
    wait(Duration::from_secs(10), || {
        answered_by(&probes, started, "r1").is_some()
    })
    .await
    .unwrap_or_else(|| panic!("steady state: r1 never answered\n{}", show_logs()));
    let t = Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        answered_by(&probes, t, "r1").is_some(),
        "steady state: r1 answers"
    );
    assert_eq!(
        failures(&probes, t, "connect") + failures(&probes, t, "reset"),
        0
    );
    assert!(neighbour_mac(&w).contains(MAC1), "{}", neighbour_mac(&w));

    let mut figures = Vec::new();
    let br = net.ns("br");
    // (what, how long replica 2 may take, how to cause it, how to end it);
    // an empty cause is a SIGKILL of agent and server, "stop"/"cont" act
    // on the agent alone.
    let losses: [(&str, Duration, String, String); 4] = [
        (
            "SIGKILL of replica 1 (agent and server)",
            Duration::from_millis(2000),
            String::new(),
            String::new(),
        ),
        (
            "node loss (replica 1's links down)",
            Duration::from_millis(2000),
            format!("ip netns exec {r1ns} sh -c 'ip link set net1 down && ip link set eth0 down'"),
            format!("ip netns exec {r1ns} sh -c 'ip link set net1 up && ip link set eth0 up'"),
        ),
        (
            "gray failure (replica 1's switch port disabled: every frame dropped both ways, links up; pod, readiness and management fine)",
            Duration::from_millis(3000),
            format!("ip netns exec {br} bridge link set dev vr1 state 0"),
            format!("ip netns exec {br} bridge link set dev vr1 state 3"),
        ),
        (
            "frozen agent (SIGSTOP of replica 1's agent)",
            Duration::from_millis(2000),
            "stop".to_string(),
            "cont".to_string(),
        ),
    ];
    for (what, limit, cut, restore) in losses {
        let lost = Instant::now();
        match cut.as_str() {
            "" => r1.kill(),
            "stop" => r1.signal_agent("STOP"),
            c => sh(c),
        }
        let added = wait(Duration::from_secs(5), || r2.has(HOME1))
            .await
            .unwrap_or_else(|| panic!("{what}: r2 never added {HOME1}\n{}", show_logs()));
        let took = wait(Duration::from_secs(5), || {
            answered_by(&probes, lost, "r2").is_some()
        })
        .await
        .map(|_| answered_by(&probes, lost, "r2").unwrap())
        .unwrap_or_else(|| panic!("{what}: r2 never answered on {HOME1}\n{}", show_logs()));
        assert!(
            neighbour_mac(&w).contains(MAC2),
            "{what}: {}",
            neighbour_mac(&w)
        );
        figures.push(format!(
            "{what}: {HOME1} added on r2 after {added:?}, first answer by r2 after {took:?}"
        ));
        assert!(added <= limit, "{what}: added after {added:?}");
        assert!(
            took <= limit + Duration::from_millis(300),
            "{what}: answered after {took:?}"
        );
        // The fault lasts a while: nothing moves back meanwhile.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(
            r2.has(HOME1),
            "{what}: {HOME1} left r2 during the fault\n{}",
            show_logs()
        );

        // The owner returns.
        match restore.as_str() {
            "" => {
                r1.start_server();
                r1.start_agent(&kubeconfig, HOME1, &logs.0);
            }
            "cont" => r1.signal_agent("CONT"),
            c => sh(c),
        }
        let back = Instant::now();
        wait(Duration::from_secs(10), || {
            answered_by(&probes, back, "r1").is_some() && r1.has(HOME1) && !r2.has(HOME1)
        })
        .await
        .unwrap_or_else(|| panic!("{what}: {HOME1} never went home\n{}", show_logs()));
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let home = answered_by(&probes, back, "r1").unwrap();
        let (unanswered, reset) = (
            failures(&probes, back, "connect"),
            failures(&probes, back, "reset"),
        );
        let trace = || {
            let p = probes.lock().unwrap();
            p.iter()
                .filter(|(t, _)| *t >= back)
                .map(|(t, w)| format!("{:?} {w:?}", *t - back))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(
            unanswered,
            0,
            "{what}: the address went unanswered while it went home\n{}\n{}",
            trace(),
            show_logs()
        );
        assert!(
            reset <= 1,
            "{what}: {reset} requests in flight were reset by the move home"
        );
        assert!(
            neighbour_mac(&w).contains(MAC1),
            "{what}: {}",
            neighbour_mac(&w)
        );
        figures.push(format!(
            "  owner back: answered by r1 after {home:?}; unanswered connects 0, requests in flight reset by the move {reset}"
        ));
    }
    stop.store(true, Ordering::SeqCst);
    let _ = Command::new("kill").arg(arping.id().to_string()).status();
    let out = arping.wait_with_output().unwrap();
    let arp = String::from_utf8_lossy(&out.stdout);
    let doubles = double_answers(&arp);
    let answered = arp.lines().filter(|l| l.contains("index=")).count();
    figures.push(format!(
        "arping {HOME1} every 100 ms: {answered} answers, {} probes answered by two MACs",
        doubles.len()
    ));
    for f in &figures {
        println!("{f}");
    }
    assert!(answered > 50, "arping answered {answered} times:\n{arp}");
    // Two MACs only in the hand-back's make-before-break window (one
    // advert), and while a frozen agent's address waits for its kernel
    // lifetime to end: at most a few 100 ms probes per fault.
    assert!(doubles.len() <= 4 * 10, "{doubles:?}");
    let p = probes.lock().unwrap();
    println!("{} probes in all", p.len());
    let connections = api_connections.load(Ordering::SeqCst);
    let secs = load_from.elapsed().as_secs_f64();
    println!(
        "API: {connections} connections in {secs:.1} s for 2 addresses and 2 replicas: {:.2} requests/s per address",
        connections as f64 / secs / 2.0
    );
    assert_eq!(connections, 0, "the agent must not depend on the API");
}

/// The MAC the worker's neighbour entry for `ip` names, if any.
fn lladdr(w: &str, ip: &str) -> Option<String> {
    let line = output(&format!("ip -n {w} neigh show {ip}"));
    line.split("lladdr ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .map(str::to_lowercase)
}

/// The window a replacement pod opens: the CNI gives it its static address
/// before its agent runs, while another replica holds that address. Here r1
/// holds 10.77.0.6 (r2's home) with its agent, and r2 stands for the
/// replacement (10.77.0.6 on its interface, no agent; the bridge floods
/// to it first, so its kernel's reply comes first). Both kernels answer the worker's ARP
/// requests; without the defence the first reply stays in the worker's
/// cache (Linux ignores later replies within `locktime`), and the worker's
/// next packet goes to a pod whose agent is about to drop the address.
/// With it, every request ends on r1's MAC, and an announcement by r2 (as
/// a CNI that sets `arp_notify` sends) is undone at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holder_keeps_the_workers_arp_cache_while_a_replacement_has_its_static_address() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test builds network namespaces: run it as root"
    );
    let net = Net::build("d");
    let (w, r2ns) = (net.ns("w"), net.ns("r2"));
    let (_api, dir, kubeconfig) = api_stand_in(&net);
    let log = dir.path().join("r1.log");
    let show_log = || std::fs::read_to_string(&log).unwrap_or_default();
    // r2 is gone (its pod deleted): r1 takes both addresses.
    sh(&format!("ip -n {r2ns} addr del {HOME2}/24 dev net1"));
    let mut r1 = Replica::new(&net, "r1");
    r1.start_server();
    r1.start_agent(&kubeconfig, HOME1, &log);
    wait(Duration::from_secs(15), || r1.has(HOME1) && r1.has(HOME2))
        .await
        .unwrap_or_else(|| panic!("r1 never held both addresses\n{}", show_log()));

    // The replacement comes up with its static address; its agent has not
    // started. Each round: the worker forgets the address, sends one
    // packet (one broadcast ARP request, answered by both kernels), and
    // its cache is read 100 ms later (the packet is a TCP connect: its
    // answer does not matter).
    sh(&format!("ip -n {r2ns} addr add {HOME2}/24 dev net1"));
    let mut ended_on: std::collections::BTreeMap<String, usize> = Default::default();
    for _ in 0..20 {
        sh(&format!("ip -n {w} neigh flush dev eth0"));
        in_netns(&w, || {
            let to: SocketAddr = format!("{HOME2}:8080").parse().unwrap();
            let _ = TcpStream::connect_timeout(&to, Duration::from_millis(200));
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        *ended_on
            .entry(lladdr(&w, HOME2).unwrap_or_else(|| "none".to_string()))
            .or_default() += 1;
    }
    println!("worker's cache after each of 20 requests: {ended_on:?}");
    assert_eq!(
        ended_on.keys().collect::<Vec<_>>(),
        [&MAC1.to_string()],
        "a request ended on another MAC than the holder's\n{}",
        show_log()
    );

    // The replacement announces the address (a CNI with arp_notify): the
    // worker's entry is back on r1 100 ms later, each time. (Its kernel
    // first forgets the worker: the connects above that reached it before
    // r1's answer left it a neighbour entry, whose unicast re-check, sent
    // from the address, reaches the worker alone; r1 cannot see it, and
    // its next periodic announcement, within 1 s, repairs that.)
    sh(&format!("ip -n {r2ns} neigh flush all"));
    for i in 0..5 {
        // (arping exits 1: nobody answers an announcement.)
        let _ = output(&format!(
            "ip netns exec {r2ns} arping -q -U -c 1 -i net1 -S {HOME2} {HOME2}"
        ));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            lladdr(&w, HOME2).as_deref(),
            Some(MAC1),
            "announcement {i} by the replacement kept the worker's cache\n{}",
            show_log()
        );
    }
    assert!(
        show_log().contains("another host claims a held address"),
        "r1 logged no conflict\n{}",
        show_log()
    );
    // Nothing moved meanwhile.
    assert!(r1.has(HOME1) && r1.has(HOME2), "{}", show_log());
}

/// Sends crafted ARP requests for 10.77.0.3 from the worker namespace and
/// counts the holder's announcements seen there meanwhile (and for 0.5 s
/// after). Arguments: count, Ethernet source MAC, ARP sender MAC, holder
/// MAC. Prints `broadcast unicast seconds`: the holder's announcements
/// (ARP requests whose sender and target address are equal) to everyone
/// and to one host, and how long the run took.
const FLOOD: &str = r#"
import socket, sys, threading, time
count, src, sha, holder = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
mac = lambda m: bytes(int(x, 16) for x in m.split(":"))
ip = lambda a: bytes(int(x) for x in a.split("."))
frame = (b"\xff" * 6 + mac(src) + b"\x08\x06" + b"\x00\x01\x08\x00\x06\x04\x00\x01"
         + mac(sha) + ip("10.77.0.50") + b"\x00" * 6 + ip("10.77.0.3"))
rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0806))
rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
rx.bind(("eth0", 0))
rx.settimeout(0.1)
seen = {"b": 0, "u": 0}
done = threading.Event()
def sniff():
    while not done.is_set():
        try:
            f = rx.recv(128)
        except socket.timeout:
            continue
        if f[6:12] == mac(holder) and f[20:22] == b"\x00\x01" and f[28:32] == f[38:42]:
            seen["b" if f[0:6] == b"\xff" * 6 else "u"] += 1
t = threading.Thread(target=sniff)
t.start()
tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
tx.bind(("eth0", 0))
t0 = time.monotonic()
for _ in range(count):
    tx.send(frame)
took = time.monotonic() - t0
time.sleep(0.5)
done.set()
t.join()
print(seen["b"], seen["u"], round(took + 0.5, 3))
"#;

/// The defence under crafted ARP (a host flooding requests for a held
/// address): it never answers a request whose sender MAC (in the frame or
/// in the ARP packet) is broadcast, multicast or its own, and answers one
/// requester at most 20 times a second. Counted on the wire in the worker
/// namespace; the agent's periodic announcement (one a second per held
/// address, broadcast) is all that remains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crafted_arp_requests_get_no_broadcast_answers_and_a_requester_at_most_20_a_second() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test builds network namespaces: run it as root"
    );
    let net = Net::build("a");
    let (w, r2ns) = (net.ns("w"), net.ns("r2"));
    let (_api, dir, kubeconfig) = api_stand_in(&net);
    let log = dir.path().join("r1.log");
    let show_log = || std::fs::read_to_string(&log).unwrap_or_default();
    sh(&format!("ip -n {r2ns} addr del {HOME2}/24 dev net1"));
    let mut r1 = Replica::new(&net, "r1");
    r1.start_server();
    r1.start_agent(&kubeconfig, HOME1, &log);
    wait(Duration::from_secs(15), || r1.has(HOME1) && r1.has(HOME2))
        .await
        .unwrap_or_else(|| panic!("r1 never held both addresses\n{}", show_log()));
    let worker = "02:00:00:77:00:50";
    let flood = |count: usize, src: &str, sha: &str| -> (usize, usize, f64) {
        let out = Command::new("ip")
            .args(["netns", "exec", &w, "python3", "-c", FLOOD])
            .args([&count.to_string(), src, sha, MAC1])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let v: Vec<&str> = text.split_whitespace().collect();
        (
            v[0].parse().unwrap(),
            v[1].parse().unwrap(),
            v[2].parse().unwrap(),
        )
    };
    let mut figures = Vec::new();
    // Periodic announcements of two held addresses, one a second each,
    // and one more for the window's rounding.
    let periodic = |secs: f64| 2 * (secs.ceil() as usize) + 2;
    for (what, src, sha) in [
        ("ARP sender ff:ff:ff:ff:ff:ff", worker, "ff:ff:ff:ff:ff:ff"),
        (
            "ARP sender multicast 01:00:5e:00:00:01",
            worker,
            "01:00:5e:00:00:01",
        ),
        ("frame and ARP sender the holder's own MAC", MAC1, MAC1),
        ("frame source broadcast", "ff:ff:ff:ff:ff:ff", worker),
    ] {
        let (b, u, secs) = flood(5000, src, sha);
        figures.push(format!(
            "5000 requests, {what}: {b} broadcast and {u} unicast announcements by the holder in {secs} s"
        ));
        assert_eq!(u, 0, "{what}: answered to one host\n{}", show_log());
        assert!(
            b <= periodic(secs),
            "{what}: {b} broadcast announcements in {secs} s\n{}",
            show_log()
        );
    }
    // One ordinary requester asking as fast as it can.
    let (b, u, secs) = flood(20_000, worker, worker);
    figures.push(format!(
        "20000 requests from one worker: {u} announcements to it and {b} broadcast in {secs} s"
    ));
    for f in &figures {
        println!("{f}");
    }
    assert!(u >= 1, "the requester was never answered\n{}", show_log());
    assert!(
        u as f64 <= 20.0 * secs + 1.0,
        "{u} answers in {secs} s to one requester"
    );
    assert!(b <= periodic(secs), "{b} broadcast in {secs} s");
    assert!(r1.has(HOME1) && r1.has(HOME2), "{}", show_log());
}

/// A server that only sends: each connection to port 8081 gets a line
/// every 250 ms, as a watch does.
const STREAM: &str = r#"
import socket, threading, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8081))
s.listen(16)
def feed(c):
    try:
        while True:
            c.sendall(b"event\n")
            time.sleep(0.25)
    except OSError:
        pass
while True:
    c, _ = s.accept()
    threading.Thread(target=feed, args=(c,), daemon=True).start()
"#;

/// A stream whose client only listens, through a lost node: the new
/// holder learnt the connection from the old one's shared list and ends it
/// right after taking the address (a bare ACK from the address draws the
/// client's ACK, which the new holder's kernel resets), so the client sees
/// a reset within seconds instead of waiting forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listening_clients_stream_through_a_lost_holder_is_reset_after_the_move() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test builds network namespaces: run it as root"
    );
    let net = Net::build("t");
    let w = net.ns("w");
    let (_api, dir, kubeconfig) = api_stand_in(&net);
    let logs = (dir.path().join("r1.log"), dir.path().join("r2.log"));
    let show_logs = || {
        format!(
            "r1:\n{}\nr2:\n{}",
            std::fs::read_to_string(&logs.0).unwrap_or_default(),
            std::fs::read_to_string(&logs.1).unwrap_or_default()
        )
    };
    let mut r1 = Replica::new(&net, "r1");
    let mut r2 = Replica::new(&net, "r2");
    r1.start_server();
    r2.start_server();
    r1.stream = Some(
        Command::new("ip")
            .args(["netns", "exec", &r1.ns, "python3", "-c", STREAM])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    r1.start_agent(&kubeconfig, HOME1, &logs.0);
    r2.start_agent(&kubeconfig, HOME2, &logs.1);
    wait(Duration::from_secs(10), || r1.has(HOME1) && r2.has(HOME2))
        .await
        .unwrap_or_else(|| panic!("the homes never took their addresses\n{}", show_logs()));
    // The client: connects, reads, never sends. Its thread reports how the
    // stream ended and when.
    let (tx, rx) = std::sync::mpsc::channel();
    let client_ns = w.clone();
    std::thread::spawn(move || {
        in_netns(&client_ns, move || {
            let to: SocketAddr = format!("{HOME1}:8081").parse().unwrap();
            let mut s = (0..50)
                .find_map(|_| {
                    TcpStream::connect_timeout(&to, Duration::from_millis(500))
                        .ok()
                        .or_else(|| {
                            std::thread::sleep(Duration::from_millis(100));
                            None
                        })
                })
                .unwrap();
            s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            let mut buf = [0u8; 256];
            let _ = tx.send(Ok(Instant::now()));
            loop {
                match s.read(&mut buf) {
                    Ok(0) => break tx.send(Err(("closed".to_string(), Instant::now()))),
                    Ok(_) => {}
                    Err(e) => break tx.send(Err((e.kind().to_string(), Instant::now()))),
                }
            }
        })
    });
    let _ = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    // Let the holder share the connection (once a second).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    // The node is lost: its link goes down (a SIGKILL would let its kernel
    // close the stream with a FIN).
    let lost = Instant::now();
    sh(&format!("ip -n {} link set net1 down", r1.ns));
    let moved = wait(Duration::from_secs(5), || r2.has(HOME1))
        .await
        .unwrap_or_else(|| panic!("r2 never took {HOME1}\n{}", show_logs()));
    let (how, at) = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("the stream never ended\n{}", show_logs()))
        .unwrap_err();
    let after_move = at.saturating_duration_since(lost + moved);
    println!(
        "stream through the lost holder: address moved after {moved:?}, stream ended ({how}) {:?} after the loss, {after_move:?} after the move",
        at - lost
    );
    assert_eq!(how, std::io::ErrorKind::ConnectionReset.to_string());
    assert!(after_move <= Duration::from_secs(10), "{after_move:?}");
    assert!(
        show_logs().contains("ending the connections the previous holder had"),
        "{}",
        show_logs()
    );
}
