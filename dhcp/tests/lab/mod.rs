//! Test lab: one server network namespace with a bridge standing in for the
//! VLAN, client namespaces joined to it by veth pairs, the real `oooi-dhcp`
//! binary in the server namespace and real clients (busybox `udhcpc`,
//! `dhclient`) or an in-process relay client in the client namespaces.
//! Names carry the test process id and a counter, so parallel tests and runs
//! never collide; everything is removed on drop, also when a test fails.
#![allow(dead_code)]

pub mod pair;

use std::fs::File;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// Runs a command, panicking with its stderr when it fails.
/// Stops a test in one line when the machine lacks what the lab needs.
fn require_tools() {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    let missing: Vec<&str> = ["ip", "busybox", "dhclient"]
        .into_iter()
        .filter(|tool| {
            !std::env::var_os("PATH").is_some_and(|path| {
                std::env::split_paths(&path).any(|dir| dir.join(tool).is_file())
            })
        })
        .collect();
    assert!(
        root && missing.is_empty(),
        "the DHCP namespace tests need root and ip, busybox, dhclient (missing: {missing:?}, root: {root}): run `tools/dev test`, which installs them"
    );
}

pub fn sh(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The pod's sysctl in namespace `ns`: any group may open an ICMP echo
/// socket (the conflict probe's).
pub fn allow_ping_sockets(ns: &str) {
    sh(&[
        "ip",
        "netns",
        "exec",
        ns,
        "sysctl",
        "-q",
        "-w",
        "net.ipv4.ping_group_range=0 2147483647",
    ]);
}

/// Kills every process still running in network namespace `ns` (a server
/// started under a wrapper that forks, such as `faketime`, is not the
/// child the test holds), waits until they are gone, then deletes `ns`.
pub fn delete_netns(ns: &str) {
    kill_netns_processes(ns);
    let _ = Command::new("ip").args(["netns", "del", ns]).status();
}

/// Kills every process running in network namespace `ns` and waits (up to
/// 5 s) until none is left.
pub fn kill_netns_processes(ns: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let pids: Vec<libc::pid_t> = Command::new("ip")
            .args(["netns", "pids", ns])
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        if pids.is_empty() || Instant::now() > deadline {
            return;
        }
        for pid in pids {
            // SAFETY: kill(2) on a process in a namespace this test made.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Makes a spawned process die with the test process (SIGKILL when the
/// thread that spawned it ends), as a second guard beside the Drops.
pub fn die_with_test(c: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl(2) only, between fork and exec.
    unsafe {
        c.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        })
    }
}

/// The base config of the lab (server 192.0.2.2 on br0).
pub fn config(range_end: u8, reservation_ip: u8) -> String {
    format!(
        r#"interface: br0
server_ip: 192.0.2.2
subnet: 192.0.2.0/24
gateway: 192.0.2.1
range: {{ start: 192.0.2.100, end: 192.0.2.{range_end} }}
excluded: [192.0.2.3, 192.0.2.4]
dns_servers: [192.0.2.3]
domain: cluster.example
lease_seconds: 3600
mtu: 1450
classless_routes:
  - {{ destination: 10.0.0.0/8, gateway: 192.0.2.1 }}
reservations:
  - {{ mac: "02:00:00:00:00:aa", ip: 192.0.2.{reservation_ip}, hostname: worker-0 }}
"#
    )
}

/// A running lab. Drop removes every namespace and process.
pub struct Lab {
    /// Server namespace.
    pub server_ns: String,
    prefix: String,
    /// Client namespaces, in creation order.
    pub clients: Vec<String>,
    /// Scratch directory (config, data, logs).
    pub dir: tempfile::TempDir,
    server: Option<Child>,
    children: Vec<Child>,
    pidfiles: Vec<PathBuf>,
    log_seq: usize,
    /// Extra arguments for `oooi-dhcp serve` (e.g. `--durability write`).
    pub serve_args: Vec<String>,
}

impl Lab {
    /// Creates the server namespace and bridge, and writes `yaml` as the
    /// config, mounted the way Kubernetes does it (`config.yaml` →
    /// `..data/config.yaml`, `..data` → a versioned directory).
    pub fn new(yaml: &str) -> Lab {
        require_tools();
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let prefix = format!("odh{}x{n}", std::process::id());
        let server_ns = format!("{prefix}s");
        let lab = Lab {
            server_ns: server_ns.clone(),
            prefix,
            clients: Vec::new(),
            dir: tempfile::tempdir().expect("tempdir"),
            server: None,
            children: Vec::new(),
            pidfiles: Vec::new(),
            log_seq: 0,
            serve_args: Vec::new(),
        };
        sh(&["ip", "netns", "add", &server_ns]);
        sh(&["ip", "-n", &server_ns, "link", "set", "lo", "up"]);
        sh(&[
            "ip",
            "-n",
            &server_ns,
            "link",
            "add",
            "br0",
            "type",
            "bridge",
            "forward_delay",
            "0",
        ]);
        sh(&[
            "ip",
            "-n",
            &server_ns,
            "addr",
            "add",
            "192.0.2.2/24",
            "dev",
            "br0",
        ]);
        sh(&["ip", "-n", &server_ns, "link", "set", "br0", "up"]);
        std::fs::create_dir_all(lab.config_dir()).expect("config dir");
        lab.swap_config(yaml);
        lab
    }

    /// Directory watched by the server (the ConfigMap mount).
    pub fn config_dir(&self) -> PathBuf {
        self.dir.path().join("config")
    }

    /// Lease data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Server log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// Publishes a new config the way kubelet does: a new versioned
    /// directory, then an atomic rename of the `..data` symlink.
    pub fn swap_config(&self, yaml: &str) {
        let d = self.config_dir();
        let version = format!(
            "..v{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|t| t.as_nanos())
                .unwrap_or(0)
        );
        std::fs::create_dir(d.join(&version)).expect("version dir");
        std::fs::write(d.join(&version).join("config.yaml"), yaml).expect("write config");
        let tmp = d.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&version, &tmp).expect("symlink");
        std::fs::rename(&tmp, d.join("..data")).expect("rename ..data");
        let link = d.join("config.yaml");
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink("..data/config.yaml", &link).expect("symlink config");
        }
    }

    /// Adds a client namespace with interface `c0` of hardware address
    /// `mac` on the bridge; returns the namespace name.
    /// A client namespace (MAC `mac`) whose host already uses `addr`/24 on
    /// its link, and so answers the conflict probe's ping for it.
    pub fn add_squatter(&mut self, mac: &str, addr: &str) -> String {
        let ns = self.add_client(mac);
        sh(&[
            "ip",
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{addr}/24"),
            "dev",
            "c0",
        ]);
        ns
    }

    pub fn add_client(&mut self, mac: &str) -> String {
        let i = self.clients.len();
        let ns = format!("{}c{i}", self.prefix);
        sh(&["ip", "netns", "add", &ns]);
        self.clients.push(ns.clone());
        sh(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
        let port = format!("p{i}");
        sh(&[
            "ip",
            "-n",
            &self.server_ns,
            "link",
            "add",
            &port,
            "type",
            "veth",
            "peer",
            "name",
            "c0",
            "netns",
            &ns,
        ]);
        sh(&["ip", "-n", &ns, "link", "set", "c0", "address", mac]);
        sh(&["ip", "-n", &ns, "link", "set", "c0", "up"]);
        sh(&[
            "ip",
            "-n",
            &self.server_ns,
            "link",
            "set",
            &port,
            "master",
            "br0",
        ]);
        sh(&["ip", "-n", &self.server_ns, "link", "set", &port, "up"]);
        ns
    }

    /// Starts `oooi-dhcp serve` in the server namespace and waits for
    /// `/healthz`.
    pub fn start_server(&mut self) {
        assert!(self.server.is_none(), "server already running");
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("log file");
        let child = die_with_test(&mut Command::new("ip"))
            .args(["netns", "exec", &self.server_ns])
            .arg(env!("CARGO_BIN_EXE_oooi-dhcp"))
            .arg("serve")
            .arg("--config")
            .arg(self.config_dir().join("config.yaml"))
            .arg("--data-dir")
            .arg(self.data_dir())
            .args(["--metrics-addr", "127.0.0.1:9067"])
            .args(&self.serve_args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start oooi-dhcp");
        self.server = Some(child);
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if self.http("/healthz").is_some_and(|b| b.starts_with("ok")) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("server not healthy; log:\n{}", self.log());
    }

    /// Stops the server with SIGKILL (no chance to flush anything).
    pub fn kill9_server(&mut self) {
        if let Some(mut c) = self.server.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends SIGTERM to the server (as the kubelet does) and waits up to
    /// `secs` for it to exit: its exit status and how long it took, or
    /// None (then killed) when it did not exit.
    pub fn terminate_server(&mut self, secs: u64) -> Option<(std::process::ExitStatus, Duration)> {
        let mut c = self.server.take()?;
        let sent = Instant::now();
        // SAFETY: sends a signal to our own child (`ip netns exec` execs the server).
        unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
        while sent.elapsed() < Duration::from_secs(secs) {
            if let Ok(Some(status)) = c.try_wait() {
                return Some((status, sent.elapsed()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = c.kill();
        let _ = c.wait();
        None
    }

    /// Whether the server process is still running.
    pub fn server_alive(&mut self) -> bool {
        self.server
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    /// GET `path` from the server's HTTP endpoint inside its namespace
    /// (a plain HTTP/1.0 request from a thread that joined the namespace).
    pub fn http(&self, path: &str) -> Option<String> {
        use std::io::{Read, Write};
        let req = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
        in_netns(&self.server_ns, move || {
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 9067));
            let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
            s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
            s.write_all(req.as_bytes()).ok()?;
            let mut out = String::new();
            s.read_to_string(&mut out).ok()?;
            let (head, body) = out.split_once("\r\n\r\n")?;
            head.starts_with("HTTP/1.0 200")
                .then(|| body.to_string())
                .or_else(|| head.starts_with("HTTP/1.1 200").then(|| body.to_string()))
        })
    }

    /// The value of a metric line starting with `name` (labels included).
    pub fn metric(&self, name: &str) -> f64 {
        let text = self.http("/metrics").unwrap_or_default();
        text.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    }

    /// The server log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// `oooi-dhcp leases` output as (ip, mac, state) rows.
    pub fn leases(&self) -> Vec<(Ipv4Addr, String, String)> {
        let out = Command::new(env!("CARGO_BIN_EXE_oooi-dhcp"))
            .arg("leases")
            .arg("--data-dir")
            .arg(self.data_dir())
            .output()
            .expect("oooi-dhcp leases");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
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

    /// Polls `f` every 50 ms for up to `secs`; panics with the server log
    /// and `what` when it never holds.
    pub fn wait_for(&self, secs: u64, what: &str, mut f: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < deadline {
            if f() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("timed out waiting for {what}; server log:\n{}", self.log());
    }

    fn udhcpc_script(&self) -> PathBuf {
        let p = self.dir.path().join("udhcpc.sh");
        if !p.exists() {
            // Records every event with the options udhcpc exported, and
            // configures the address so that renewal can unicast.
            std::fs::write(
                &p,
                r#"#!/bin/sh
echo "$1|ip=$ip|mask=$mask|subnet=$subnet|router=$router|dns=$dns|domain=$domain|hostname=$hostname|mtu=$mtu|staticroutes=$staticroutes|lease=$lease|serverid=$serverid" >> "$OOOI_EVENTS"
case "$1" in
  bound|renew) ip addr flush dev "$interface"; ip addr add "$ip/$mask" dev "$interface" ;;
  deconfig) ip addr flush dev "$interface" ;;
esac
exit 0
"#,
            )
            .expect("script");
            sh(&["chmod", "+x", p.to_str().unwrap_or_default()]);
        }
        p
    }

    /// Starts busybox `udhcpc` in `ns` (foreground, stays running unless
    /// `extra` has `-q`); returns the events file and the child's index.
    pub fn udhcpc(&mut self, ns: &str, extra: &[&str]) -> (PathBuf, usize) {
        self.log_seq += 1;
        let events = self
            .dir
            .path()
            .join(format!("udhcpc-{}.events", self.log_seq));
        std::fs::write(&events, "").expect("events file");
        let child = die_with_test(&mut Command::new("ip"))
            .args([
                "netns", "exec", ns, "busybox", "udhcpc", "-f", "-i", "c0", "-s",
            ])
            .arg(self.udhcpc_script())
            .args([
                "-t",
                "4",
                "-T",
                "1",
                "-A",
                "1",
                "-O",
                "mtu",
                "-O",
                "staticroutes",
            ])
            .args(extra)
            .env("OOOI_EVENTS", &events)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("busybox udhcpc");
        self.children.push(child);
        (events, self.children.len() - 1)
    }

    /// Sends `signal` to the child started as `index`.
    pub fn signal(&self, index: usize, signal: libc::c_int) {
        let pid = self.children[index].id() as libc::pid_t;
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(pid, signal) };
    }

    /// Waits for the child `index` to exit; returns whether it succeeded.
    pub fn wait_child(&mut self, index: usize, secs: u64) -> bool {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < deadline {
            if let Ok(Some(st)) = self.children[index].try_wait() {
                return st.success();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "client {index} did not exit in {secs}s; server log:\n{}",
            self.log()
        );
    }

    /// Runs `dhclient` once in `ns` (it daemonizes after binding; stopped by
    /// its pid file on drop). Returns the events recorded by its script.
    pub fn dhclient(&mut self, ns: &str) -> Vec<Event> {
        let d = self.dir.path();
        let events = d.join(format!("dhclient-{ns}.events"));
        let script = d.join(format!("dhclient-{ns}.sh"));
        // dhclient gives its script a clean environment: the events path is
        // written into the script (one script per client, so that each
        // keeps reporting to its own file after the next one starts).
        std::fs::write(
            &script,
            format!(
                r#"#!/bin/sh
echo "$reason|ip=$new_ip_address|subnet=$new_subnet_mask|router=$new_routers|dns=$new_domain_name_servers|domain=$new_domain_name|hostname=$new_host_name|mtu=$new_interface_mtu|staticroutes=$new_rfc3442_classless_static_routes|lease=$new_dhcp_lease_time|serverid=$new_dhcp_server_identifier" >> "{}"
case "$reason" in
  BOUND|RENEW|REBOOT) ip addr flush dev "$interface"; ip addr add "$new_ip_address/$new_subnet_mask" dev "$interface" ;;
esac
exit 0
"#,
                events.display()
            ),
        )
        .expect("dhclient script");
        sh(&["chmod", "+x", script.to_str().unwrap_or_default()]);
        let conf = d.join("dhclient.conf");
        std::fs::write(
            &conf,
            "option rfc3442-classless-static-routes code 121 = array of unsigned integer 8;\n\
             request subnet-mask, routers, domain-name-servers, domain-name, host-name, \
             interface-mtu, rfc3442-classless-static-routes, dhcp-lease-time, \
             dhcp-server-identifier;\ntimeout 15;\n",
        )
        .expect("dhclient conf");
        let pidfile = d.join(format!("dhclient-{ns}.pid"));
        self.pidfiles.push(pidfile.clone());
        let status = Command::new("timeout")
            .args([
                "20", "ip", "netns", "exec", ns, "dhclient", "-4", "-1", "-v",
            ])
            .arg("-pf")
            .arg(&pidfile)
            .arg("-lf")
            .arg(d.join(format!("dhclient-{ns}.leases")))
            .arg("-sf")
            .arg(&script)
            .arg("-cf")
            .arg(&conf)
            .arg("c0")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("dhclient");
        assert!(
            status.success(),
            "dhclient failed; server log:\n{}",
            self.log()
        );
        read_events(&events)
    }

    fn stop_pidfiles(&self) {
        for p in &self.pidfiles {
            // The daemon writes its pid file just after the parent exits:
            // give it a moment rather than leak it.
            let deadline = Instant::now() + Duration::from_secs(3);
            loop {
                if let Ok(s) = std::fs::read_to_string(p)
                    && let Ok(pid) = s.trim().parse::<libc::pid_t>()
                {
                    // SAFETY: kill(2) on the dhclient this lab started.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    break;
                }
                if Instant::now() > deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.stop_pidfiles();
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.kill9_server();
        for ns in self.clients.iter().chain(std::iter::once(&self.server_ns)) {
            delete_netns(ns);
        }
    }
}

/// One client script event: the reason and its key=value fields.
#[derive(Debug, Clone)]
pub struct Event {
    /// `bound`, `renew`, `BOUND`, ...
    pub reason: String,
    fields: Vec<(String, String)>,
}

impl Event {
    /// A field's value ("" when absent).
    pub fn get(&self, key: &str) -> &str {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    }
}

/// Parses an events file.
pub fn read_events(path: &Path) -> Vec<Event> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let mut parts = l.split('|');
            let reason = parts.next().unwrap_or_default().to_string();
            let fields = parts
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k.to_string(), v.trim().to_string()))
                .collect();
            Event { reason, fields }
        })
        .collect()
}

/// Starts `f` on a thread that has joined network namespace `ns`.
pub fn spawn_in_netns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let fd = File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
        // SAFETY: setns(2) on this thread only, with a valid namespace fd.
        let rc = unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
}

/// Runs `f` on a thread that has joined network namespace `ns`.
pub fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    spawn_in_netns(ns, f).join().expect("netns thread panicked")
}
