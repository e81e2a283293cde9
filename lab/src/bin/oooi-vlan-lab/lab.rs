//! A lab's namespaces and processes: creating them, starting programs in
//! them, and removing them (also after a crash).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::launch::{Launcher, Program};
use anyhow::{Context, Result, anyhow, bail};

/// Where a lab keeps its files, pids and the list of its namespaces.
pub fn state_dir(prefix: &str) -> PathBuf {
    PathBuf::from("/run/oooi-vlan-lab").join(prefix)
}

/// Runs a command, failing with its stderr.
pub fn run(args: &[&str]) -> Result<String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .with_context(|| format!("cannot run `{}`", args[0]))?;
    if !out.status.success() {
        bail!(
            "`{}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Stops every process and namespace of lab `prefix`. Safe to call twice,
/// and after a crash: it reads only what the lab wrote to its state dir and
/// the namespace names.
pub fn down(prefix: &str) {
    let dir = state_dir(prefix);
    crate::launch::remove_containers(prefix);
    if let Ok(pids) = std::fs::read_to_string(dir.join("pids")) {
        let pids: Vec<i32> = pids.lines().filter_map(|l| l.trim().parse().ok()).collect();
        for sig in ["-TERM", "-KILL"] {
            for pid in &pids {
                // Only a process still running in one of this lab's namespaces.
                if in_lab_netns(*pid, prefix) {
                    let _ = Command::new("kill")
                        .args([sig, &pid.to_string()])
                        .stderr(Stdio::null())
                        .status();
                }
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }
    let listed = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    for line in listed.lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        if name.starts_with(&format!("{prefix}-")) {
            let _ = Command::new("ip")
                .args(["netns", "pids", name])
                .output()
                .map(|o| {
                    for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                        let _ = Command::new("kill").args(["-KILL", pid]).status();
                    }
                });
            let _ = Command::new("ip").args(["netns", "del", name]).status();
            let _ = std::fs::remove_dir_all(Path::new("/etc/netns").join(name));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether `pid` runs in a network namespace named `<prefix>-*`.
fn in_lab_netns(pid: i32, prefix: &str) -> bool {
    let Ok(out) = Command::new("ip")
        .args(["netns", "identify", &pid.to_string()])
        .output()
    else {
        return false;
    };
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .any(|n| n.starts_with(&format!("{prefix}-")))
}

/// Whether container `name` exists and its process runs.
fn container_running(name: &str) -> bool {
    Command::new("podman")
        .args(["inspect", "--format", "{{.State.Running}}", name])
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "true")
}

/// A data-plane program the lab started (one replica of a pod).
#[derive(Clone)]
pub struct Started {
    pub launcher: Launcher,
    /// Its namespace (and, from the images, its container's name).
    pub ns: String,
    pub log: String,
    pub program: Program<'static>,
    /// The process [`Lab::launch`] started: the program itself with
    /// `--from-build`, `podman run` from the images.
    pub pid: u32,
}

/// A lab being built; tears itself down when dropped unless `keep` is set.
pub struct Lab {
    pub prefix: String,
    pub dir: PathBuf,
    pub keep: bool,
    pub children: Vec<std::process::Child>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        down(&self.prefix);
    }
}

impl Lab {
    pub fn ns(&self, name: &str) -> String {
        format!("{}-{name}", self.prefix)
    }

    pub fn add_ns(&self, name: &str) -> Result<String> {
        let ns = self.ns(name);
        run(&["ip", "netns", "add", &ns])?;
        run(&["ip", "-n", &ns, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Plugs `ns` into the VLAN bridge as `net1`/`eth0` (`ifname`) with
    /// `addr` (None: left to DHCP) and, when given, a fixed MAC.
    pub fn plug(
        &self,
        ns: &str,
        port: &str,
        ifname: &str,
        addr: Option<&str>,
        mac: Option<&str>,
    ) -> Result<()> {
        let vlan = self.ns("vlan");
        run(&[
            "ip", "-n", &vlan, "link", "add", port, "type", "veth", "peer", "name", ifname,
            "netns", ns,
        ])?;
        run(&[
            "ip", "-n", &vlan, "link", "set", port, "master", "br0", "up",
        ])?;
        if let Some(mac) = mac {
            run(&["ip", "-n", ns, "link", "set", ifname, "address", mac])?;
        }
        if let Some(a) = addr {
            run(&["ip", "-n", ns, "addr", "add", a, "dev", ifname])?;
        }
        run(&["ip", "-n", ns, "link", "set", ifname, "up"])?;
        Ok(())
    }

    /// Starts the data-plane program `p` in `ns` with `launcher`, logging to
    /// `<dir>/<log>.log`; what it takes to kill it and start it again.
    pub fn launch(
        &mut self,
        launcher: &Launcher,
        ns: &str,
        log: &str,
        p: &Program<'static>,
    ) -> Result<Started> {
        // Each container is named after its namespace.
        let argv = launcher.argv(ns, ns, p, sibling)?;
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let pid = self.spawn_argv(log, &argv)?;
        Ok(Started {
            launcher: launcher.clone(),
            ns: ns.to_string(),
            log: log.to_string(),
            program: p.clone(),
            pid,
        })
    }

    /// `kill -9` of a program [`Lab::launch`] started: the process itself
    /// (from the images: `podman kill --signal KILL`, which kills the
    /// container's process the same way). Waits until it is gone.
    pub fn kill_9(&mut self, s: &Started) -> Result<()> {
        match &s.launcher {
            Launcher::Build => {
                // Its children first (Envoy under the gate), so that none
                // outlives it even for the moment its parent-death signal
                // takes; `pkill` fails when there are none.
                let _ = run(&["pkill", "-KILL", "-P", &s.pid.to_string()]);
                run(&["kill", "-KILL", &s.pid.to_string()])?;
            }
            Launcher::Images { .. } => {
                // A container that stopped on its own meanwhile needs no
                // kill (podman refuses one that is not running).
                if let Err(e) = run(&["podman", "kill", "--signal", "KILL", &s.ns])
                    && container_running(&s.ns)
                {
                    return Err(e);
                }
            }
        }
        self.reap(s.pid, Duration::from_secs(10))?;
        if matches!(s.launcher, Launcher::Images { .. }) {
            // `podman run --rm` removes it; make sure the name is free.
            let _ = Command::new("podman")
                .args(["rm", "--force", "--time", "0", "--ignore", &s.ns])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        Ok(())
    }

    /// Sends SIGTERM to a started program, as the kubelet does to a deleted
    /// pod's containers.
    pub fn signal_term(&self, s: &Started) -> Result<()> {
        match &s.launcher {
            Launcher::Build => run(&["kill", "-TERM", &s.pid.to_string()])?,
            Launcher::Images { .. } => run(&["podman", "kill", "--signal", "TERM", &s.ns])?,
        };
        Ok(())
    }

    /// Waits up to `within` for a program sent SIGTERM at `sent` to exit
    /// (killed then). Returns how long it took from `sent`, or None when it
    /// had to be killed.
    pub fn await_exit(
        &mut self,
        s: &Started,
        sent: std::time::Instant,
        within: Duration,
    ) -> Result<Option<Duration>> {
        let exited = match &s.launcher {
            Launcher::Build => self.wait_exit(s.pid, within)?,
            // The container's process, not the `podman run --rm` client,
            // which removes the container after it (slow on a loaded
            // machine with the vfs store).
            Launcher::Images { .. } => {
                let deadline = std::time::Instant::now() + within;
                loop {
                    if !container_running(&s.ns) {
                        break true;
                    }
                    if std::time::Instant::now() > deadline {
                        break false;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        };
        let took = sent.elapsed();
        if !exited {
            self.kill_9(s)?;
        } else if matches!(s.launcher, Launcher::Images { .. }) {
            self.reap(s.pid, Duration::from_secs(30))?;
            let _ = Command::new("podman")
                .args(["rm", "--force", "--time", "0", "--ignore", &s.ns])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        Ok(exited.then_some(took))
    }

    /// Waits up to `timeout` for the child `pid` to exit on its own; true
    /// (and forgotten) when it did, false (still tracked) when not.
    fn wait_exit(&mut self, pid: u32, timeout: Duration) -> Result<bool> {
        let Some(i) = self.children.iter().position(|c| c.id() == pid) else {
            return Ok(true);
        };
        let deadline = std::time::Instant::now() + timeout;
        while self.children[i].try_wait()?.is_none() {
            if std::time::Instant::now() > deadline {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // Already reaped by try_wait; wait() returns its status at once.
        let _ = self.children.remove(i).wait();
        Ok(true)
    }

    /// Starts a killed program again, as its pod's restart does: same
    /// namespace, same arguments and mounts, the log appended to.
    pub fn restart(&mut self, s: &Started) -> Result<Started> {
        let (launcher, ns, log, program) = (
            s.launcher.clone(),
            s.ns.clone(),
            s.log.clone(),
            s.program.clone(),
        );
        self.launch(&launcher, &ns, &log, &program)
    }

    /// Starts `argv` in `ns`, logging to `<dir>/<log>.log`.
    /// Returns its pid.
    pub fn spawn_in(&mut self, ns: &str, log: &str, argv: &[&str]) -> Result<u32> {
        let mut all = vec!["ip", "netns", "exec", ns];
        all.extend_from_slice(argv);
        self.spawn_argv(log, &all)
    }

    /// Waits up to `timeout` for the child `pid` (started by this lab) to
    /// exit, then kills it; forgets it either way.
    pub fn reap(&mut self, pid: u32, timeout: Duration) -> Result<()> {
        if let Some(i) = self.children.iter().position(|c| c.id() == pid) {
            let mut child = self.children.remove(i);
            let deadline = std::time::Instant::now() + timeout;
            while child.try_wait()?.is_none() {
                if std::time::Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Ok(())
    }

    /// Starts `argv`, logging to `<dir>/<log>.log` (appended to); records
    /// the pid and returns it.
    pub fn spawn_argv(&mut self, log: &str, argv: &[&str]) -> Result<u32> {
        let logf = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{log}.log")))?;
        let child = Command::new(argv[0])
            .args(&argv[1..])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::from(logf.try_clone()?))
            .stderr(Stdio::from(logf))
            .spawn()
            .with_context(|| format!("cannot start `{}`", argv.join(" ")))?;
        let pid = child.id();
        self.record_pid(pid)?;
        self.children.push(child);
        Ok(pid)
    }

    pub fn record_pid(&self, pid: u32) -> Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("pids"))?;
        writeln!(f, "{pid}")?;
        Ok(())
    }

    /// Runs this binary's internal subcommand `args` in `ns`.
    pub fn me_in(&self, ns: &str, args: &[&str]) -> Result<String> {
        let me = std::env::current_exe()?;
        let me = me
            .to_str()
            .ok_or_else(|| anyhow!("binary path is not UTF-8"))?;
        let mut all = vec!["ip", "netns", "exec", ns, me];
        all.extend_from_slice(args);
        run(&all).map(|s| s.trim().to_string())
    }

    /// Runs `args` in `ns`.
    pub fn run_in(&self, ns: &str, args: &[&str]) -> Result<String> {
        let mut all = vec!["ip", "netns", "exec", ns];
        all.extend_from_slice(args);
        run(&all)
    }
}

/// A sibling binary of this one (cargo puts every workspace binary in the
/// same directory), or `$OOOI_<NAME>_BIN` (`oooi-kube-mock`:
/// `OOOI_KUBE_MOCK_BIN`).
pub fn sibling(name: &str) -> Result<PathBuf> {
    let var = format!(
        "OOOI_{}_BIN",
        name.trim_start_matches("oooi-")
            .to_uppercase()
            .replace('-', "_")
    );
    if let Ok(p) = std::env::var(&var) {
        return Ok(PathBuf::from(p));
    }
    let me = std::env::current_exe()?;
    let dir = me
        .parent()
        .ok_or_else(|| anyhow!("binary has no directory"))?;
    // Integration tests run from target/<profile>/deps.
    for d in [dir, dir.parent().unwrap_or(dir)] {
        let p = d.join(name);
        if p.exists() {
            return Ok(p);
        }
    }
    bail!(
        "{name} not found beside {} (build it: cargo build -p {}; or set {var})",
        dir.display(),
        if name == "oooi-controller" {
            "oooi-controller"
        } else {
            name
        }
    )
}
