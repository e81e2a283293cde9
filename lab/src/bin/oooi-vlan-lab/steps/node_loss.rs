//! Node loss with floating addresses. The same `oooi-addr-agent` the DNS
//! and proxy images ship runs beside every DNS and proxy replica (in the
//! replica's namespace; from the images when the lab runs from them, with
//! the security context render planned for its container: UID 0 with
//! NET_ADMIN and NET_RAW only); the agents judge liveness from the
//! adverts they send each other on the VLAN and make no API request (the
//! lab still serves `oooi-kube-mock` on the management network and prints
//! the requests it got). While the workers run their clients, replica 1 of
//! DNS and of the proxy (every worker's first nameserver and first proxy
//! address) is lost three times: "neighbour answers" (every process in its
//! namespace stopped: its kernel still answers ARP for the address until
//! the address's lifetime ends), a gray failure (its VLAN switch port drops
//! every frame while links, pod and readiness stay fine) and "neighbour
//! silent" (its links down); each time it comes back and its addresses go
//! home. Then the
//! API stops answering for 5 s and for 120 s (the mocked API frozen): every
//! address must stay on its home replica and no lookup take over 1 s.
//!
//! The workers: the steady client (glibc lookups from the resolv.conf the
//! DHCP lease wrote, no options line; a new TLS connection per round,
//! addresses in order, the next one on a failed connect with client-go's
//! 30 s dial timeout, as Go's dialer does), curl with its defaults (one
//! new TLS connection per run), long-lived connections through each proxy
//! address (standing in for watches), and `arping` of both replica-1
//! addresses.
//!
//! Asserted per event: no lookup waited more than 2 s; no new connection
//! took more than 3 s beyond the steady state's slowest; none failed; the
//! long-lived connection through the lost proxy address ended with a reset
//! (never hung) within 3 s of the loss; arping saw two MACs for one address
//! only in a return (the documented hand-over window); each address went
//! home. Printed: p50/p99/max per window and the API load (none).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::launch::{Launcher, Program, Volume};
use anyhow::{Result, anyhow, bail};
use serde_json::Value;

use super::infra::DataPlane;
use super::topology::Namespaces;
use super::workers::Booted;
use crate::UpArgs;
use crate::clients::Push;
use crate::lab::{Lab, sibling};
use crate::render::Rendered;
use crate::report::Report;
use crate::steady::now_ms;

/// The mocked API's address on the management network.
const API: &str = "10.128.0.1:6444";
/// The agents' metrics address inside each replica's namespace.
const AGENT_METRICS: &str = "127.0.0.1:9466";
/// The agents' health listener (the liveness probe's, as in the pod).
const AGENT_HEALTH: &str = "127.0.0.1:9467";
/// The steady state before the first loss.
const STEADY: Duration = Duration::from_millis(3000);
/// How long a replica stays lost.
const LOST: Duration = Duration::from_millis(6000);
/// After the addresses are home again, before the next event.
const SETTLE: Duration = Duration::from_millis(1500);
/// Slowest lookup allowed during an event.
const LOOKUP_LIMIT_MS: f64 = 2000.0;
/// Slowest lookup allowed while the API is down: nothing moves then.
const OUTAGE_LOOKUP_LIMIT_MS: f64 = 1000.0;
/// The API outages: how long the mocked API stays stopped.
const OUTAGES_S: [u64; 2] = [5, 120];
/// A new connection may take this much more than the steady state's slowest.
const CONNECT_EXTRA_MS: f64 = 3000.0;
/// A long-lived connection through a drained proxy's address must end
/// this soon (nothing is lost in a drain: the client's next line after the
/// move reaches replica 2, which resets it).
const RESET_LIMIT_MS: f64 = 3000.0;
/// Scheduling margin of [`reset_limit_ms`] on a loaded machine.
const RESET_MARGIN_MS: f64 = 500.0;

/// How soon a long-lived connection through a lost address must end, when
/// replica 2 took the address `moved_ms` after the loss. The client's
/// segments sent into the loss go unanswered and TCP resends them with a
/// doubling timeout (about 0.2, 0.6, 1.4, 3.0 s after the first one); the
/// first resend after the move reaches replica 2, which resets the
/// connection. That resend comes before twice the move time (the timeout
/// at most doubles past it), so the physics of the client's TCP, not the
/// lab's luck, set the bound: 2 x 1.85 s is 3.7 s where the resends fell
/// at 3.0 + 0.2 s, and a fixed 3 s failed such runs.
fn reset_limit_ms(moved_ms: f64) -> f64 {
    2.0 * moved_ms + RESET_MARGIN_MS
}
/// How long each curl run lasts after its handshake: the backend echoes
/// and never closes, so curl is ended by its low-speed limit (less than
/// 1000 bytes per second for this long; the banner and the echo are about
/// 100 bytes), which runs only after the connection is up; its connect
/// keeps curl's defaults (300 s, addresses in order). The figure is its
/// connect and TLS handshake (`time_appconnect` less its own lookup).
const CURL_IDLE_S: u32 = 1;
/// curl loops side by side (each run lasts about two seconds).
const CURL_LOOPS: u32 = 4;
/// curl's exits for a connection reset while open: 35 (during the TLS
/// handshake), 56 (receiving).
const HAND_BACK_CURL_EXITS: [i32; 2] = [35, 56];
/// How long before the addresses were home a failed attempt may have
/// started and still count as open at the hand-back (attempts take
/// milliseconds; the margin covers a slow handshake under load).
const HAND_BACK_WINDOW_MS: f64 = 2000.0;

/// A node-loss variant: how the node is cut and brought back (run in the
/// replica's namespace).
pub struct Loss {
    pub name: &'static str,
    pub cut: &'static str,
    pub restore: &'static str,
}

pub const LOSSES: [Loss; 2] = [
    Loss {
        name: "node loss, neighbour answers (every IP packet dropped)",
        cut: "iptables -A INPUT -i lo -j ACCEPT && iptables -A OUTPUT -o lo -j ACCEPT && iptables -P INPUT DROP && iptables -P OUTPUT DROP",
        restore: "iptables -P INPUT ACCEPT && iptables -P OUTPUT ACCEPT && iptables -F",
    },
    Loss {
        name: "node loss, neighbour silent (links down)",
        cut: "ip link set net1 down && ip link set eth0 down",
        restore: "ip link set net1 up && ip link set eth0 up",
    },
];

/// One replica's agent.
struct Agent {
    ns: String,
    identity: String,
    component: &'static str,
    args: Vec<String>,
}

/// A window of the run (ms since the epoch).
#[derive(Clone)]
struct Window {
    name: String,
    from: f64,
    to: f64,
    /// A loss (the long-lived connections through it must be reset, no two
    /// MACs) or else a return or a drain (hand-overs: two MACs allowed).
    loss: bool,
    /// A drain: the long-lived connection through the drained proxy must be
    /// reset as well.
    drain: bool,
    /// An API outage: no lookup may take more than 1 s.
    outage: bool,
    /// When the addresses were home again (a return or a drain's end): a
    /// connection the old holder had open then is reset by the hand-back.
    hand_back: Option<f64>,
}

/// The losses of this step. A replica whose IP is dropped while its VLAN
/// frames still flow (the first of [`LOSSES`]) is alive to its peers' adverts:
/// the step freezes every process of the node instead, which stops the
/// adverts while the kernel still answers ARP.
pub const TAKEOVER_LOSSES: [Loss; 3] = [
    Loss {
        name: "node frozen, neighbour answers (every process stopped, the kernel answers ARP)",
        cut: r#"ns=$(ip netns identify $$); for p in $(ip netns pids "$ns"); do [ "$p" = "$$" ] || kill -STOP "$p" 2>/dev/null; done; true"#,
        restore: r#"ns=$(ip netns identify $$); for p in $(ip netns pids "$ns"); do [ "$p" = "$$" ] || kill -CONT "$p" 2>/dev/null; done; true"#,
    },
    // The replica's switch port (its veth on the VLAN bridge, named after
    // the replica: `dns`, `proxy`) disabled: every frame dropped both ways
    // while both links stay up and the pod, its readiness and its
    // management network stay fine.
    Loss {
        name: "gray failure (the replica's VLAN port drops every frame, links up)",
        cut: r#"ns=$(ip netns identify $$); bridge -n "${ns%-*}-vlan" link set dev "${ns##*-}" state 0"#,
        restore: r#"ns=$(ip netns identify $$); bridge -n "${ns%-*}-vlan" link set dev "${ns##*-}" state 3"#,
    },
    Loss {
        name: "node loss, neighbour silent (links down)",
        cut: "ip link set net1 down && ip link set eth0 down",
        restore: "ip link set net1 up && ip link set eth0 up",
    },
];

/// Runs the node-loss steps; the agents' process ids (they keep running).
pub fn run(
    lab: &mut Lab,
    args: &UpArgs,
    (r, ns): (&Rendered, &Namespaces),
    plane: &mut DataPlane,
    (push, table): (&Push, &Path),
    booted: &[Booted],
    report: &mut Report,
) -> Result<Vec<u32>> {
    let Some((cluster, worker)) = booted.first().cloned() else {
        bail!("node loss: no booted worker");
    };
    let (dns1, proxy1) = (
        plane
            .dns
            .first()
            .map(|d| d.0.clone())
            .ok_or_else(|| anyhow!("no DNS replica"))?,
        plane
            .proxies
            .first()
            .map(|p| p.0.clone())
            .ok_or_else(|| anyhow!("no proxy replica"))?,
    );
    println!(
        "\nnode loss with floating addresses (oooi-addr-agent beside every DNS and proxy replica, adverts on the VLAN; oooi-kube-mock at {API} counts their API requests):"
    );

    // The mocked API on the management network.
    let stats = lab.dir.join("kube-mock-stats.json");
    let mock = sibling("oooi-kube-mock")?;
    let mock = mock.to_string_lossy().into_owned();
    let mock_pid = lab.spawn_in(
        &ns.mgmt,
        "kube-mock",
        &[&mock, "--listen", API, "--stats", &stats.to_string_lossy()],
    )?;
    let mock_log = lab.dir.join("kube-mock.log");
    poll(10, || {
        std::fs::read_to_string(&mock_log)
            .ok()
            .filter(|t| t.contains("listening on"))
    })
    .ok_or_else(|| anyhow!("oooi-kube-mock did not start: see {}", mock_log.display()))?;
    // The API is plain HTTP, but the kube client builds its TLS settings
    // anyway: without a CA in the kubeconfig it loads the system's, which a
    // scratch image has none of (in a pod, the service account's CA is
    // there). A CA of the lab's own, never used, stands in for it.
    let ca = lab.dir.join("kube-ca.pem");
    std::fs::write(
        &ca,
        rcgen::generate_simple_self_signed(vec!["oooi-kube-mock".to_string()])?
            .cert
            .pem(),
    )?;
    let kubeconfig = lab.dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: lab\n\
             clusters: [{{name: lab, cluster: {{server: \"http://{API}\", certificate-authority: \"{}\"}}}}]\n\
             contexts: [{{name: lab, context: {{cluster: lab, user: lab, namespace: oooi-system}}}}]\n\
             users: [{{name: lab, user: {{}}}}]\n",
            ca.display()
        ),
    )?;

    // One agent per replica, each with every address of its component.
    let launcher = args.launcher();
    let mut agents: Vec<Agent> = Vec::new();
    let mut agent_pids: Vec<u32> = Vec::new();
    let components = [
        (
            "dns",
            &ns.dns,
            &r.replicas.dns,
            "http://127.0.0.1:9154/healthz".to_string(),
        ),
        (
            "proxy",
            &ns.proxy,
            &r.replicas.proxy,
            format!("http://127.0.0.1:{}/ready", r.api_port),
        ),
    ];
    for (component, namespaces, ips, ready) in components {
        let all: Vec<String> = ips.iter().map(|ip| format!("{ip}/{}", r.plen)).collect();
        for (i, (rns, home)) in namespaces.iter().zip(ips.iter()).enumerate() {
            let identity = format!("{component}-{}", i + 1);
            let agent_args: Vec<String> = [
                "--identity",
                &identity,
                "--namespace",
                "oooi-system",
                "--group",
                &format!("lab-{component}"),
                "--address",
                &all.join(","),
                "--home",
                home,
                "--interface",
                "net1",
                "--ready-url",
                &ready,
                "--metrics-addr",
                AGENT_METRICS,
                "--health-addr",
                AGENT_HEALTH,
            ]
            .map(String::from)
            .to_vec();
            let pid = spawn_agent(
                lab,
                &launcher,
                r,
                (rns, component),
                &kubeconfig,
                &agent_args,
            )?;
            agent_pids.push(pid);
            agents.push(Agent {
                ns: rns.clone(),
                identity,
                component,
                args: agent_args,
            });
        }
    }
    // Every address held by its home replica.
    let homes = || {
        agents
            .iter()
            .zip(r.replicas.dns.iter().chain(r.replicas.proxy.iter()))
            .all(|(a, ip)| held(lab, &a.ns, ip))
    };
    let t0 = Instant::now();
    let got = poll(20, || homes().then_some(()));
    report.step(
        "every agent holds its home address (address on net1)",
        "yes",
        if got.is_some() { "yes" } else { "no" },
    );
    if got.is_none() {
        bail!("the agents did not take their addresses: see the agent-*.log files");
    }
    for a in &agents {
        super::infra::check_shape(
            &launcher,
            "oooi-addr-agent",
            (&a.ns, &agent_container(&a.ns)),
            &r.security(a.component, AGENT_CONTAINER)?,
            report,
        );
    }
    println!(
        "  agents holding their home addresses after {:.1} s: {}",
        t0.elapsed().as_secs_f64(),
        agents
            .iter()
            .map(|a| a.identity.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );

    // The workers' clients.
    let stop = lab.dir.join("node-loss.stop");
    let _ = std::fs::remove_file(&stop);
    let stop_arg = stop.to_string_lossy().into_owned();
    let me = std::env::current_exe()?.to_string_lossy().into_owned();
    let fqdn = format!("api.{cluster}.{}", r.base);
    let mut pids = Vec::new();
    let mut steady_logs = Vec::new();
    for (c, wns) in booted {
        let log = format!("node-loss-steady-{c}");
        let target = format!("api.{c}.{}:6443", r.base);
        pids.push(lab.spawn_in(
            wns,
            &log,
            &[
                &me,
                "steady",
                "--stop",
                &stop_arg,
                "--connect-timeout-ms",
                "30000",
                "--interval-ms",
                "100",
                &target,
            ],
        )?);
        steady_logs.push((c.clone(), lab.dir.join(format!("{log}.log"))));
    }
    // curl with its defaults (connect timeout 300 s, addresses in order),
    // four loops so that a new connection starts about every half second.
    for k in 0..CURL_LOOPS {
        let script = format!(
            "sleep {delay}; while [ ! -e {stop_arg} ]; do t=$(date +%s%3N); \
             r=$(curl -sk --http0.9 -o /dev/null -Y 1000 -y {CURL_IDLE_S} -w '%{{time_namelookup}} %{{time_connect}} %{{time_appconnect}} %{{remote_ip}}' https://{fqdn}:6443/ 2>/dev/null); \
             echo \"$t $? $r\"; done",
            delay = f64::from(k) * 0.4,
        );
        pids.push(lab.spawn_in(
            &worker,
            &format!("node-loss-curl-{k}"),
            &["sh", "-c", &script],
        )?);
    }
    let watch_addrs: Vec<String> = r
        .replicas
        .proxy
        .iter()
        .map(|ip| format!("{ip}:6443"))
        .collect();
    let mut watch_argv = vec![me.as_str(), "watch", "--sni", &fqdn, "--stop", &stop_arg];
    watch_argv.extend(watch_addrs.iter().map(String::as_str));
    pids.push(lab.spawn_in(&worker, "node-loss-watch", &watch_argv)?);
    std::thread::sleep(Duration::from_millis(500));

    // The run: steady, then each loss and its return.
    let mut windows: Vec<Window> = Vec::new();
    let mut arpings: Vec<(usize, u32, PathBuf)> = Vec::new();
    let start_arping = |lab: &mut Lab, w: usize, arpings: &mut Vec<(usize, u32, PathBuf)>| {
        for ip in [&dns1, &proxy1] {
            let log = format!("node-loss-arping-{w}-{ip}");
            if let Ok(pid) = lab.spawn_in(
                &worker,
                &log,
                &["arping", "-i", "eth0", "-W", "0.1", "-c", "100000", ip],
            ) {
                arpings.push((w, pid, lab.dir.join(format!("{log}.log"))));
            }
        }
    };
    let stop_arpings = |lab: &mut Lab, arpings: &[(usize, u32, PathBuf)], w: usize| {
        for (aw, pid, _) in arpings {
            if *aw == w {
                let _ = crate::lab::run(&["kill", "-INT", &pid.to_string()]);
                let _ = lab.reap(*pid, Duration::from_secs(2));
            }
        }
    };
    let mut from = now_ms();
    start_arping(lab, 0, &mut arpings);
    std::thread::sleep(STEADY);
    stop_arpings(lab, &arpings, 0);
    windows.push(Window {
        name: "steady".into(),
        from,
        to: now_ms(),
        loss: false,
        drain: false,
        outage: false,
        hand_back: None,
    });
    let stats_at_start = (now_ms(), lease_requests(&stats));
    let lost_ns = [ns.dns[0].clone(), ns.proxy[0].clone()];
    let mut moved: Vec<String> = Vec::new();
    // When replica 2 held both addresses, per loss.
    let mut moved_at: Vec<f64> = Vec::new();
    let mut returned: Vec<String> = Vec::new();
    for loss in &TAKEOVER_LOSSES {
        println!(
            "  {}: DNS replica 1 ({dns1}) and proxy replica 1 ({proxy1})",
            loss.name
        );
        let w = windows.len();
        start_arping(lab, w, &mut arpings);
        from = now_ms();
        for n in &lost_ns {
            crate::lab::run(&["ip", "netns", "exec", n, "sh", "-c", loss.cut])?;
        }
        // Replica 2 of each takes the address.
        let taken = poll(10, || {
            (held(lab, &ns.dns[1], &dns1) && held(lab, &ns.proxy[1], &proxy1)).then(now_ms)
        });
        moved.push(match taken {
            Some(t) => format!("{:.2} s", (t - from) / 1000.0),
            None => "not moved within 10 s".into(),
        });
        moved_at.push(taken.unwrap_or(from + 10_000.0));
        let rest = LOST.saturating_sub(Duration::from_millis((now_ms() - from).max(0.0) as u64));
        std::thread::sleep(rest);
        stop_arpings(lab, &arpings, w);
        windows.push(Window {
            name: loss.name.to_string(),
            from,
            to: now_ms(),
            loss: true,
            drain: false,
            outage: false,
            hand_back: None,
        });
        println!("  return: the node is back, its addresses go home");
        let w = windows.len();
        start_arping(lab, w, &mut arpings);
        from = now_ms();
        for n in &lost_ns {
            crate::lab::run(&["ip", "netns", "exec", n, "sh", "-c", loss.restore])?;
        }
        let home = poll(20, || {
            (held(lab, &ns.dns[0], &dns1) && held(lab, &ns.proxy[0], &proxy1)).then(now_ms)
        });
        returned.push(match home {
            Some(t) => format!("{:.2} s", (t - from) / 1000.0),
            None => "not home within 20 s".into(),
        });
        std::thread::sleep(SETTLE);
        stop_arpings(lab, &arpings, w);
        windows.push(Window {
            name: format!("return after {}", loss.name),
            from,
            to: now_ms(),
            loss: false,
            drain: false,
            outage: false,
            hand_back: home,
        });
    }
    // API outages: the mocked API stops answering (SIGSTOP: requests hang,
    // as in an etcd stall or a control-plane upgrade) for 5 s and for
    // 120 s. The agents take liveness from the VLAN: every address stays on
    // its home replica, and nothing moves when the API returns.
    let placed = |lab: &Lab| -> bool {
        [(&ns.dns, &r.replicas.dns), (&ns.proxy, &r.replicas.proxy)]
            .iter()
            .all(|(nss, ips)| {
                nss.iter().enumerate().all(|(i, n)| {
                    ips.iter()
                        .enumerate()
                        .all(|(k, ip)| held(lab, n, ip) == (i == k))
                })
            })
    };
    for secs in OUTAGES_S {
        let name = format!("API stopped {secs} s (oooi-kube-mock frozen)");
        println!("  {name}");
        let w = windows.len();
        start_arping(lab, w, &mut arpings);
        from = now_ms();
        crate::lab::run(&["kill", "-STOP", &mock_pid.to_string()])?;
        let until = Instant::now() + Duration::from_secs(secs);
        let (mut samples, mut off) = (0u32, 0u32);
        while Instant::now() < until {
            samples += 1;
            if !placed(lab) {
                off += 1;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        crate::lab::run(&["kill", "-CONT", &mock_pid.to_string()])?;
        std::thread::sleep(SETTLE);
        // Nothing flaps when the API returns.
        samples += 1;
        if !placed(lab) {
            off += 1;
        }
        stop_arpings(lab, &arpings, w);
        println!(
            "  measured: {name}: {off} of {samples} samples (about every 100 ms) with an address off its home replica"
        );
        report.step(
            &format!("{name}: samples with an address off its home replica"),
            "0",
            &off.to_string(),
        );
        windows.push(Window {
            name,
            from,
            to: now_ms(),
            loss: false,
            drain: false,
            outage: true,
            hand_back: None,
        });
    }
    // A drain: replica 1's pods are deleted, in the kubelet's order: the
    // components get SIGTERM first (DNS and the proxy's gate drain: /ready
    // and /healthz fail while they still answer, so each agent hands its
    // address to replica 2), and the agents, native sidecars, only once the
    // components have exited. The address leaves with the pod; the
    // replacement comes 3 s later with the same static address.
    println!("  drain: replica 1 of DNS and proxy deleted (kubelet order), replaced 3 s later");
    let w = windows.len();
    start_arping(lab, w, &mut arpings);
    from = now_ms();
    let drained: Vec<usize> = agents
        .iter()
        .enumerate()
        .filter(|(_, a)| a.ns == ns.dns[0] || a.ns == ns.proxy[0])
        .map(|(i, _)| i)
        .collect();
    let dns_started = plane.dns[0].1.clone();
    let proxy_started = plane.proxies[0].1.clone();
    let sent = std::time::Instant::now();
    lab.signal_term(&dns_started)?;
    lab.signal_term(&proxy_started)?;
    let taken = poll(10, || {
        (held(lab, &ns.dns[1], &dns1) && held(lab, &ns.proxy[1], &proxy1)).then(now_ms)
    });
    let dns_exit = lab.await_exit(&dns_started, sent, Duration::from_secs(15))?;
    let proxy_exit = lab.await_exit(&proxy_started, sent, Duration::from_secs(15))?;
    println!(
        "  measured: drain: DNS exited {} and the proxy {} after SIGTERM",
        dns_exit.map_or("only when killed after 15 s".into(), |d| format!(
            "{:.2} s",
            d.as_secs_f64()
        )),
        proxy_exit.map_or("only when killed after 15 s".into(), |d| format!(
            "{:.2} s",
            d.as_secs_f64()
        )),
    );
    for &i in &drained {
        let _ = crate::lab::run(&["kill", "-TERM", &agent_pids[i].to_string()]);
    }
    for &i in &drained {
        lab.reap(agent_pids[i], Duration::from_secs(5))?;
    }
    for (n, ip) in [(&ns.dns[0], &dns1), (&ns.proxy[0], &proxy1)] {
        // Gone with the pod (its agent already removed it).
        let _ = crate::lab::run(&[
            "ip",
            "-n",
            n,
            "addr",
            "del",
            &format!("{ip}/{}", r.plen),
            "dev",
            "net1",
        ]);
    }
    std::thread::sleep(Duration::from_millis(3000));
    // The replacement: the CNI gives it its static address; the agent, a
    // native sidecar, starts before the component (the kubelet's order)
    // and drops that address while replica 2 holds it; replica 2 answers
    // the workers' ARP requests meanwhile (its defence); the controller
    // pushes the table to the new proxy.
    for (n, ip) in [(&ns.dns[0], &dns1), (&ns.proxy[0], &proxy1)] {
        crate::lab::run(&[
            "ip",
            "-n",
            n,
            "addr",
            "add",
            &format!("{ip}/{}", r.plen),
            "dev",
            "net1",
        ])?;
    }
    for &i in &drained {
        let a = &agents[i];
        agent_pids[i] = spawn_agent(
            lab,
            &launcher,
            r,
            (&a.ns, a.component),
            &kubeconfig,
            &a.args,
        )?;
    }
    plane.dns[0].1 = lab.restart(&dns_started)?;
    plane.proxies[0].1 = lab.restart(&proxy_started)?;
    let api0 = push
        .apis
        .first()
        .cloned()
        .ok_or_else(|| anyhow!("no table API"))?;
    let pushed = poll(30, || {
        let got = push.put_to(lab, &api0, table);
        got.starts_with("200").then_some(got)
    });
    let home = poll(20, || {
        (held(lab, &ns.dns[0], &dns1) && held(lab, &ns.proxy[0], &proxy1)).then(now_ms)
    });
    std::thread::sleep(SETTLE);
    stop_arpings(lab, &arpings, w);
    println!(
        "  measured: drain: both addresses on replica 2 after {}; replacement pushed: {}; home again {} after the replacement started",
        taken.map_or("never".to_string(), |t| format!(
            "{:.2} s",
            (t - from) / 1000.0
        )),
        if pushed.is_some() { "yes" } else { "no" },
        home.map_or("never".to_string(), |t| format!(
            "{:.2} s",
            (t - from - 3000.0) / 1000.0
        )),
    );
    returned.push(match home {
        Some(t) => format!("{:.2} s", (t - from) / 1000.0),
        None => "not home within 20 s".into(),
    });
    windows.push(Window {
        name: "drain of replica 1 (replaced after 3 s)".into(),
        from,
        to: now_ms(),
        loss: false,
        drain: true,
        outage: false,
        hand_back: home,
    });
    let stats_at_end = (now_ms(), lease_requests(&stats));
    std::fs::write(&stop, b"")?;
    for pid in pids {
        lab.reap(pid, Duration::from_secs(15))?;
    }
    let _ = std::fs::remove_file(&stop);

    // Tally.
    let mut steady_attempts: Vec<Value> = Vec::new();
    for (_, log) in &steady_logs {
        for line in std::fs::read_to_string(log)?.lines() {
            if let Ok(v) = serde_json::from_str::<Value>(line)
                && v.get("t").is_some()
            {
                steady_attempts.push(v);
            }
        }
    }
    let mut curls: Vec<(f64, i32, f64)> = Vec::new();
    for k in 0..CURL_LOOPS {
        let text = std::fs::read_to_string(lab.dir.join(format!("node-loss-curl-{k}.log")))
            .unwrap_or_default();
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() >= 5 {
                let t: f64 = f[0].parse().unwrap_or(0.0);
                let code: i32 = f[1].parse().unwrap_or(-1);
                // curl's times count from its start, its own lookup
                // included: the connection is what follows the lookup.
                let lookup: f64 = f[2].parse::<f64>().unwrap_or(0.0) * 1000.0;
                let appconnect: f64 = f[4].parse::<f64>().unwrap_or(0.0) * 1000.0;
                let connect = if appconnect > 0.0 {
                    (appconnect - lookup).max(0.001)
                } else {
                    0.0
                };
                curls.push((t, code, connect));
            }
        }
    }
    let watches: Vec<Value> = std::fs::read_to_string(lab.dir.join("node-loss-watch.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("addr").is_some())
        .collect();

    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    let within = |x: f64, w: &Window| x >= w.from && x < w.to;
    let steady_w = windows[0].clone();
    let steady_connect_max = steady_attempts
        .iter()
        .filter(|v| within(f(v, "t"), &steady_w) && v["result"].get("backend").is_some())
        .map(|v| f(v, "ms"))
        .chain(
            curls
                .iter()
                .filter(|c| c.0 >= steady_w.from && c.0 < steady_w.to && c.2 > 0.0)
                .map(|c| c.2),
        )
        .fold(0.0, f64::max);
    println!(
        "  measured: address moved to replica 2 after the loss: {}; home again after the return: {}",
        moved.join(", "),
        returned.join(", ")
    );
    let mut loss_index = 0;
    for w in &windows {
        let lookups: Vec<f64> = steady_attempts
            .iter()
            .filter(|v| within(f(v, "t"), w))
            .map(|v| f(v, "lookup_ms"))
            .collect();
        let connects: Vec<f64> = steady_attempts
            .iter()
            .filter(|v| within(f(v, "t"), w) && v["result"].get("backend").is_some())
            .map(|v| f(v, "ms"))
            .collect();
        let failed: Vec<String> = steady_attempts
            .iter()
            .filter(|v| within(f(v, "t"), w))
            .filter(|v| v.get("lookup_error").is_some() || v["result"].get("backend").is_none())
            .map(|v| {
                format!(
                    "+{:.2} s {}",
                    (f(v, "t") - w.from) / 1000.0,
                    v["lookup_error"]
                        .as_str()
                        .or(v["result"]["error"].as_str())
                        .unwrap_or("?")
                )
            })
            .collect();
        let curl_w: Vec<&(f64, i32, f64)> = curls
            .iter()
            .filter(|c| c.0 >= w.from && c.0 < w.to)
            .collect();
        let curl_ms: Vec<f64> = curl_w.iter().filter(|c| c.2 > 0.0).map(|c| c.2).collect();
        let curl_failed: Vec<String> = curl_w
            .iter()
            .filter(|c| c.2 <= 0.0)
            .map(|c| format!("curl exit {} from +{:.2} s", c.1, (c.0 - w.from) / 1000.0))
            .collect();
        println!("  {}:", w.name);
        println!(
            "    glibc lookups {}; new TLS (Go-dialer-like, 30 s dial timeout) {}; curl connect+TLS after its lookup {}",
            spread(&lookups),
            spread(&connects),
            spread(&curl_ms)
        );
        if w.name == "steady" {
            continue;
        }
        if w.outage {
            let slow = lookups
                .iter()
                .filter(|ms| **ms > OUTAGE_LOOKUP_LIMIT_MS)
                .count();
            report.step(
                &format!("{}: lookups slower than 1 s", w.name),
                "0",
                &slow.to_string(),
            );
        }
        // A query sent while the address answered nobody (from the loss
        // until replica 2 held it) is lost; glibc resends it only after its
        // timeout (5 s with the lease's resolv.conf, no options line).
        let gap_end = if w.loss {
            moved_at.get(loss_index).copied().unwrap_or(w.from)
        } else {
            w.from
        };
        let (in_gap, after_gap): (Vec<&Value>, Vec<&Value>) = steady_attempts
            .iter()
            .filter(|v| within(f(v, "t"), w))
            .partition(|v| f(v, "t") < gap_end);
        let slow_after: Vec<String> = after_gap
            .iter()
            .filter(|v| f(v, "lookup_ms") > LOOKUP_LIMIT_MS)
            .map(|v| {
                format!(
                    "{:.0} ms from +{:.2} s",
                    f(v, "lookup_ms"),
                    (f(v, "t") - w.from) / 1000.0
                )
            })
            .collect();
        if w.drain {
            // The components drain in the kubelet's order (SIGTERM first;
            // the agents, native sidecars, after they exit), so the hand-over
            // away from the drained replica loses nothing; the replacement's
            // static address, there before its agent drops it, cannot keep
            // a worker's ARP cache (replica 2 defends the address). No
            // lookup may wait for the resolver's resend.
            println!(
                "    lookups slower than 2 s during the drain's hand-overs: {}",
                if slow_after.is_empty() {
                    "none".to_string()
                } else {
                    slow_after.join(", ")
                }
            );
            report.step(
                &format!("{}: lookups that waited the resolver's timeout", w.name),
                "0",
                &slow_after.len().to_string(),
            );
        } else {
            report.step(
                &format!(
                    "{}: lookups started after the address moved slower than 2 s",
                    w.name
                ),
                "0",
                &slow_after.len().to_string(),
            );
        }
        if w.loss {
            let waited: Vec<String> = in_gap
                .iter()
                .filter(|v| f(v, "lookup_ms") > LOOKUP_LIMIT_MS)
                .map(|v| {
                    format!(
                        "{:.0} ms from +{:.2} s",
                        f(v, "lookup_ms"),
                        (f(v, "t") - w.from) / 1000.0
                    )
                })
                .collect();
            println!(
                "    lookups sent while the address answered nobody (+0 to +{:.2} s): {}; slower than 2 s: {}",
                (gap_end - w.from) / 1000.0,
                in_gap.len(),
                if waited.is_empty() {
                    "none".to_string()
                } else {
                    waited.join(", ")
                }
            );
            // At most one per client: the one query glibc had in flight.
            report.step(
                &format!(
                    "{}: lookups that waited glibc's timeout (in flight before the move; not more than one per client)",
                    w.name
                ),
                &format!("<= {}", steady_logs.len()),
                &if waited.len() <= steady_logs.len() {
                    format!("<= {}", steady_logs.len())
                } else {
                    format!("{}", waited.len())
                },
            );
            loss_index += 1;
        }
        let limit = steady_connect_max + CONNECT_EXTRA_MS;
        let slow = connects
            .iter()
            .chain(curl_ms.iter())
            .filter(|ms| **ms > limit)
            .count();
        report.step(
            &format!(
                "{}: new connections slower than steady max + 3 s ({limit:.0} ms)",
                w.name
            ),
            "0",
            &slow.to_string(),
        );
        // A hand-back (the address going home while the old holder is
        // alive) resets the connections the old holder had open at that
        // instant, as any address move without connection sync does; one
        // per client loop at most. Every other failure counts.
        let (reset_by_hand_back, failed): (Vec<String>, Vec<String>) = match w.hand_back {
            Some(home) => failed.into_iter().partition(|d| {
                d.contains("reset by peer")
                    && d.strip_prefix('+')
                        .and_then(|t| t.split(' ').next())
                        .and_then(|t| t.trim_end_matches('s').trim().parse::<f64>().ok())
                        .is_some_and(|t| {
                            let at = w.from + t * 1000.0;
                            at <= home && at >= home - HAND_BACK_WINDOW_MS
                        })
            }),
            None => (Vec::new(), failed),
        };
        let (curl_reset, curl_failed): (Vec<String>, Vec<String>) = match w.hand_back {
            Some(home) => {
                let reset: Vec<String> = curl_w
                    .iter()
                    .filter(|c| {
                        c.2 <= 0.0
                            && HAND_BACK_CURL_EXITS.contains(&c.1)
                            && c.0 <= home
                            && c.0 >= home - HAND_BACK_WINDOW_MS
                    })
                    .map(|c| format!("curl exit {} from +{:.2} s", c.1, (c.0 - w.from) / 1000.0))
                    .collect();
                curl_failed.into_iter().partition(|d| reset.contains(d))
            }
            None => (Vec::new(), curl_failed),
        };
        if w.hand_back.is_some() {
            let reset: Vec<String> = reset_by_hand_back.into_iter().chain(curl_reset).collect();
            let loops = steady_logs.len() + CURL_LOOPS as usize;
            report.step(
                &format!(
                    "{}: connections open at the hand-back and reset by it (not more than one per client loop)",
                    w.name
                ),
                &format!("<= {loops}"),
                &if reset.len() <= loops {
                    format!("<= {loops}")
                } else {
                    format!("{}: {}", reset.len(), reset.join("; "))
                },
            );
            if !reset.is_empty() {
                println!("    reset by the hand-back: {}", reset.join("; "));
            }
        }
        report.step(
            &format!(
                "{}: failed lookups or connections (glibc/Go-dialer client, curl)",
                w.name
            ),
            "0",
            &if failed.is_empty() && curl_failed.is_empty() {
                "0".to_string()
            } else {
                format!(
                    "{}: {}",
                    failed.len() + curl_failed.len(),
                    failed
                        .iter()
                        .chain(curl_failed.iter())
                        .cloned()
                        .collect::<Vec<_>>()
                        .join("; ")
                )
            },
        );
        if w.loss || w.drain {
            // The long-lived connection through the lost proxy address that
            // was open at the loss: how it ended.
            let through: Vec<&Value> = watches
                .iter()
                .filter(|v| v["addr"] == proxy1.as_str())
                .filter(|v| {
                    f(v, "opened") > 0.0 && f(v, "opened") < w.from && f(v, "ended") >= w.from
                })
                .collect();
            let (limit, want) = if w.loss {
                // (This loss's index: counted on above.)
                let moved = loss_index
                    .checked_sub(1)
                    .and_then(|i| moved_at.get(i))
                    .map_or(10_000.0, |t| (t - w.from).max(0.0));
                (
                    reset_limit_ms(moved),
                    "reset by its first resend after the move",
                )
            } else {
                (RESET_LIMIT_MS, "reset within 3 s")
            };
            let got = match through.first() {
                Some(v) => {
                    let after = f(v, "ended") - w.from;
                    let end = v["end"].as_str().unwrap_or("?");
                    println!(
                        "    long-lived connection through {proxy1}: ended {after:.0} ms after the loss ({end}; limit {limit:.0} ms)"
                    );
                    if end != "hung" && end != "stopped" && after <= limit {
                        want.to_string()
                    } else {
                        format!("{end} after {after:.0} ms")
                    }
                }
                None => "no connection open through it at the loss".to_string(),
            };
            report.step(
                &format!("{}: long-lived connection through {proxy1}", w.name),
                want,
                &got,
            );
        }
        // Two MACs for one address: allowed only in a hand-over (a return).
        let doubles: usize = arpings
            .iter()
            .filter(|(aw, _, _)| windows.get(*aw).is_some_and(|x| x.name == w.name))
            .map(|(_, _, log)| double_answers(&std::fs::read_to_string(log).unwrap_or_default()))
            .sum();
        if w.loss {
            report.step(
                &format!("{}: arping probes answered by two MACs", w.name),
                "0",
                &doubles.to_string(),
            );
        } else {
            println!("    arping probes answered by two MACs during the hand-over: {doubles}");
        }
    }
    report.step(
        "each address went home after each return",
        "yes",
        if returned.iter().all(|s| s.ends_with(" s")) {
            "yes"
        } else {
            "no"
        },
    );
    // The API load: every request the agents sent over the events (none:
    // they take liveness from the VLAN).
    let secs = (stats_at_end.0 - stats_at_start.0) / 1000.0;
    let leases = r.replicas.dns.len() + r.replicas.proxy.len();
    let mut per_lease: BTreeMap<String, u64> = BTreeMap::new();
    for (k, n) in &stats_at_end.1 {
        let before = stats_at_start.1.get(k).copied().unwrap_or(0);
        let name = k.rsplit('/').next().unwrap_or(k).to_string();
        *per_lease.entry(name).or_default() += n.saturating_sub(before);
    }
    let total: u64 = per_lease.values().sum();
    println!(
        "  measured: API load {:.1} requests/s for {leases} addresses ({:.1}/s per address; {} agents): {}",
        total as f64 / secs.max(0.001),
        total as f64 / secs.max(0.001) / leases as f64,
        agents.len(),
        per_lease
            .iter()
            .map(|(k, n)| format!("{k} {:.1}/s", *n as f64 / secs.max(0.001)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(agent_pids)
}

/// Starts the address agent beside the replica in `rns`: from the images,
/// the container `<rns>-agent` with the security context render planned
/// for the `address-agent` container of the component's pod. Its pid (the
/// process the lab started).
fn spawn_agent(
    lab: &mut Lab,
    launcher: &Launcher,
    r: &Rendered,
    (rns, component): (&str, &str),
    kubeconfig: &std::path::Path,
    args: &[String],
) -> Result<u32> {
    let log = format!(
        "agent-{}",
        rns.trim_start_matches(&format!("{}-", lab.prefix))
    );
    let program = Program {
        binary: "oooi-addr-agent",
        entrypoint: r.command(component, AGENT_CONTAINER)?,
        image: image_of(component)?,
        security: r.security(component, AGENT_CONTAINER)?,
        // The kubeconfig and its CA.
        mounts: vec![(lab.dir.clone(), Volume::Config)],
        env: vec![(
            "KUBECONFIG".to_string(),
            kubeconfig.to_string_lossy().into_owned(),
        )],
        args: args.to_vec(),
    };
    let argv = launcher.argv(rns, &agent_container(rns), &program, sibling)?;
    let all: Vec<&str> = argv.iter().map(String::as_str).collect();
    lab.spawn_argv(&log, &all)
}

/// The agent's container in the pod (`address-agent`, as render plans it).
const AGENT_CONTAINER: &str = "address-agent";

/// The lab's container of the agent beside the replica in `rns`.
fn agent_container(rns: &str) -> String {
    format!("{rns}-agent")
}

/// The image of a component with an agent.
fn image_of(component: &str) -> Result<&'static str> {
    match component {
        "dns" => Ok("dns"),
        "proxy" => Ok("proxy"),
        other => bail!("no agent beside {other}"),
    }
}

/// Whether the agent in `rns` holds `ip` (its metric) and the address is
/// on its `net1`.
fn held(lab: &Lab, rns: &str, ip: &str) -> bool {
    let metric = lab
        .me_in(rns, &["http", "GET", AGENT_METRICS, "/metrics"])
        .unwrap_or_default();
    let series = format!("oooi_agent_addresses_held{{address=\"{ip}\"}} 1");
    let on_link = lab
        .run_in(rns, &["ip", "-4", "-o", "addr", "show", "dev", "net1"])
        .unwrap_or_default()
        .contains(&format!("inet {ip}/"));
    metric.lines().any(|l| l.trim() == series) && on_link
}

/// The requests the mocked API served so far, per `VERB path`.
fn lease_requests(stats: &std::path::Path) -> BTreeMap<String, u64> {
    std::fs::read_to_string(stats)
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| {
            v["requests"].as_object().map(|m| {
                m.iter()
                    .filter(|(k, _)| k.contains("/leases/"))
                    .map(|(k, n)| (k.clone(), n.as_u64().unwrap_or(0)))
                    .collect()
            })
        })
        .unwrap_or_default()
}

/// arping probes answered by more than one MAC (from its output:
/// `42 bytes from 02:..:01 (192.0.2.3): index=17 time=...`).
fn double_answers(out: &str) -> usize {
    let mut by_index: BTreeMap<&str, std::collections::BTreeSet<String>> = BTreeMap::new();
    for line in out.lines() {
        let (Some(mac), Some(index)) = (
            line.split("from ").nth(1).and_then(|r| r.split(' ').next()),
            line.split("index=")
                .nth(1)
                .and_then(|r| r.split(' ').next()),
        ) else {
            continue;
        };
        by_index
            .entry(index)
            .or_default()
            .insert(mac.to_lowercase());
    }
    by_index.values().filter(|m| m.len() > 1).count()
}

/// p50, p99 and max of `v` in ms.
pub fn spread(v: &[f64]) -> String {
    if v.is_empty() {
        return "none".to_string();
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    format!(
        "p50 {:.1} / p99 {:.1} / max {:.1} ms (n={})",
        at(0.5),
        at(0.99),
        v[v.len() - 1],
        v.len()
    )
}

/// Calls `f` every 50 ms until it gives a value or `secs` have passed.
pub fn poll<T>(secs: u64, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
