//! The local lab on a simulated VLAN (root).
//!
//! `oooi-vlan-lab up` renders `tests/lab/two-clusters.yaml` with
//! `oooi-controller render`, then builds, out of network namespaces:
//!
//! - `<p>-vlan`: a bridge, the simulated VLAN (192.0.2.0/24 from the manifest);
//! - `<p>-dhcp`, `<p>-dns`, `<p>-proxy`: one per infra pod, each with `net1`
//!   on the bridge at the Infra's `serverIP`, running `oooi-dhcp`, `oooi-dns`
//!   and Envoy with the filter from the rendered files only: by default the
//!   images `localhost/oooi-{dhcp,dns,proxy}:<version>` under podman (as
//!   their pods run them: UID 0, the pod's capabilities only, read-only root
//!   filesystem, in the namespace's network), with `--from-build` the
//!   cargo-built binaries and the `envoy` on PATH;
//! - `<p>-mgmt`: the management pod network; TLS servers stand in for each
//!   hosted cluster's kube-apiserver, oauth, ignition and konnectivity at the
//!   Service names the routing table points to (the proxy resolves them
//!   through `/etc/netns/<p>-proxy/hosts`, the lab's stand-in for cluster
//!   DNS). The table is pushed from here to the proxy's pod address, as the
//!   controller does;
//! - `<p>-w-*`: worker VMs; each takes a lease with busybox `udhcpc`, resolves
//!   `api.<cluster>.<base>` with `dig` through oooi-dns, and opens TLS through
//!   Envoy by SNI and by the `kubernetes.default.svc` alias, then tries the
//!   other clusters' names (refused when that cluster is `isolation: Strict`;
//!   the filter's log must show `source_not_allowed` for each);
//! - `<p>-apps`: the MetalLB stand-in, a TLS server on each apps VIP (the
//!   observed one and the next address) on the VLAN.
//!
//! Then the lab changes the manifests as the cluster would and checks that
//! DNS and routes follow: MetalLB moves an apps VIP (the `ObservedCluster`'s
//! `appsVip`), and the last attachment is deleted. Each change is rendered
//! again, the DNS config is swapped into its ConfigMap-like mount (`..data`
//! rename, which oooi-dns watches) and the table is pushed with the next
//! generation.
//!
//! Worker source addresses: the manifest's `ObservedCluster` fixtures give
//! each worker's MAC and address, so render emits DHCP reservations and the
//! source-scoped routes before any worker boots, and the workers get exactly
//! those addresses. (In a cluster the controller learns them from VMIs and
//! Machines after boot and pushes a new table.)
//!
//! Every step is printed with its result; the exit code is non-zero if any
//! step failed. `--hold` keeps the lab up until Ctrl-C. `down` removes the
//! namespaces and stops the processes of a lab, also one left by a crash.
//! No traffic leaves the namespaces the lab created.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use clap::{Parser, Subcommand};
use oooi_tests::launch::{Launcher, Program};
use serde_json::Value;

#[derive(Parser)]
#[command(about = "The oooi data plane on a simulated VLAN of network namespaces (root)")]
struct Args {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    up: UpArgs,
}

#[derive(clap::Args, Clone)]
struct UpArgs {
    /// Prefix of every namespace and of the state directory; two labs with
    /// different prefixes can run side by side.
    #[arg(long, default_value = "oooi-lab", global = true)]
    prefix: String,
    /// Manifests to render (Infra, InfraClusterAttachment, observed workers).
    #[arg(long, global = true, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/lab/two-clusters.yaml"))]
    manifests: PathBuf,
    /// Keep everything running after the checks until Ctrl-C.
    #[arg(long, global = true)]
    hold: bool,
    /// Leave the lab up when a step fails (remove it later with `down`).
    #[arg(long, global = true)]
    keep_on_failure: bool,
    /// Run oooi-dhcp, oooi-dns and Envoy from the cargo build instead of the
    /// container images.
    #[arg(long, global = true)]
    from_build: bool,
    /// Tag of the images (`tools/dev images` builds
    /// `localhost/oooi-<name>:<version>`).
    #[arg(long, global = true, env = "OOOI_IMAGE_VERSION", default_value = env!("CARGO_PKG_VERSION"))]
    image_version: String,
}

impl UpArgs {
    fn launcher(&self) -> Launcher {
        if self.from_build {
            Launcher::Build
        } else {
            Launcher::Images {
                version: self.image_version.clone(),
            }
        }
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Build the lab, run the checks (the default).
    Up,
    /// Stop the processes and remove the namespaces of a lab (idempotent).
    Down,
    /// (internal) Serve TLS backends: NAME@IP:PORT ..., print `ready`.
    #[command(hide = true)]
    Backends { listen: Vec<String> },
    /// (internal) Open TLS to ADDR with SNI and print the backend's name.
    #[command(hide = true)]
    Probe {
        addr: SocketAddr,
        #[arg(long)]
        sni: Option<String>,
    },
    /// (internal) HTTP request: METHOD ADDR PATH [--token T] [--body FILE].
    #[command(hide = true)]
    Http {
        method: String,
        addr: SocketAddr,
        path: String,
        #[arg(long)]
        token: Option<String>,
        #[arg(long)]
        body: Option<PathBuf>,
    },
}

fn main() -> Result<()> {
    let args = Args::parse();
    match args.cmd {
        None | Some(Cmd::Up) => up(&args.up),
        Some(Cmd::Down) => {
            down(&args.up.prefix);
            println!("lab `{}` is down", args.up.prefix);
            Ok(())
        }
        Some(Cmd::Backends { listen }) => backends(&listen),
        Some(Cmd::Probe { addr, sni }) => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let name = rt.block_on(oooi_tests::tls_probe(addr, sni.as_deref(), None))?;
            println!("{name}");
            Ok(())
        }
        Some(Cmd::Http {
            method,
            addr,
            path,
            token,
            body,
        }) => {
            let body = match body {
                Some(p) => std::fs::read(&p).with_context(|| format!("--body {}", p.display()))?,
                None => Vec::new(),
            };
            let auth = token.map(|t| format!("Bearer {t}"));
            let headers: Vec<(&str, &str)> = auth
                .as_deref()
                .map(|a| vec![("authorization", a)])
                .unwrap_or_default();
            let (status, text) = oooi_tests::http_blocking(addr, &method, &path, &headers, &body)?;
            println!("{status} {}", text.trim());
            if status == 200 {
                Ok(())
            } else {
                bail!("HTTP {status}")
            }
        }
    }
}

// ---------------------------------------------------------------- topology

/// Where a lab keeps its files, pids and the list of its namespaces.
fn state_dir(prefix: &str) -> PathBuf {
    PathBuf::from("/run/oooi-vlan-lab").join(prefix)
}

/// Runs a command, failing with its stderr.
fn run(args: &[&str]) -> Result<String> {
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
fn down(prefix: &str) {
    let dir = state_dir(prefix);
    oooi_tests::launch::remove_containers(prefix);
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

/// A lab being built; tears itself down when dropped unless `keep` is set.
struct Lab {
    prefix: String,
    dir: PathBuf,
    keep: bool,
    children: Vec<std::process::Child>,
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
    fn ns(&self, name: &str) -> String {
        format!("{}-{name}", self.prefix)
    }

    fn add_ns(&self, name: &str) -> Result<String> {
        let ns = self.ns(name);
        run(&["ip", "netns", "add", &ns])?;
        run(&["ip", "-n", &ns, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Plugs `ns` into the VLAN bridge as `net1`/`eth0` (`ifname`) with
    /// `addr` (None: left to DHCP) and, when given, a fixed MAC.
    fn plug(
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
    /// `<dir>/<log>.log`.
    fn launch(&mut self, launcher: &Launcher, ns: &str, log: &str, p: &Program) -> Result<()> {
        let argv = launcher.argv(&self.prefix, ns, p, sibling)?;
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        self.spawn_argv(log, &argv)
    }

    /// Starts `argv`, logging to `<dir>/<log>.log`; records the pid.
    fn spawn_argv(&mut self, log: &str, argv: &[&str]) -> Result<()> {
        let logf = std::fs::File::create(self.dir.join(format!("{log}.log")))?;
        let child = Command::new(argv[0])
            .args(&argv[1..])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::from(logf.try_clone()?))
            .stderr(Stdio::from(logf))
            .spawn()
            .with_context(|| format!("cannot start `{}`", argv.join(" ")))?;
        self.record_pid(child.id())?;
        self.children.push(child);
        Ok(())
    }

    fn record_pid(&self, pid: u32) -> Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("pids"))?;
        writeln!(f, "{pid}")?;
        Ok(())
    }

    /// Runs this binary's internal subcommand `args` in `ns`.
    fn me_in(&self, ns: &str, args: &[&str]) -> Result<String> {
        let me = std::env::current_exe()?;
        let me = me
            .to_str()
            .ok_or_else(|| anyhow!("binary path is not UTF-8"))?;
        let mut all = vec!["ip", "netns", "exec", ns, me];
        all.extend_from_slice(args);
        run(&all).map(|s| s.trim().to_string())
    }
}

// ---------------------------------------------------------------- binaries

/// A sibling binary of this one (cargo puts every workspace binary in the
/// same directory), or `$OOOI_<NAME>_BIN`.
fn sibling(name: &str) -> Result<PathBuf> {
    let var = format!(
        "OOOI_{}_BIN",
        name.trim_start_matches("oooi-").to_uppercase()
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

// ---------------------------------------------------------------- the run

/// Counts the steps and the failed ones; prints each.
struct Report {
    failures: usize,
    steps: usize,
}

impl Report {
    fn step(&mut self, what: &str, want: &str, got: &str) -> bool {
        let ok = got == want;
        self.steps += 1;
        self.failures += usize::from(!ok);
        println!(
            "  {:<58} {:<28} {}",
            what,
            got,
            if ok {
                "ok".to_string()
            } else {
                format!("FAILED (expected {want})")
            }
        );
        ok
    }
}

struct Worker {
    /// Its cluster's name, `none` for a machine of no cluster.
    name: String,
    mac: String,
    /// (namespace, name) of its hosted cluster; None for a stranger.
    cluster: Option<(String, String)>,
    reserved: Option<Ipv4Addr>,
}

fn up(args: &UpArgs) -> Result<()> {
    let t0 = Instant::now();
    down(&args.prefix);
    let dir = state_dir(&args.prefix);
    std::fs::create_dir_all(&dir)?;
    let mut lab = Lab {
        prefix: args.prefix.clone(),
        dir: dir.clone(),
        keep: false,
        children: Vec::new(),
    };
    let result = run_lab(&mut lab, args);
    let elapsed = t0.elapsed();
    match &result {
        Ok(r) if r.failures == 0 => println!(
            "\nsummary: all {} steps passed in {:.1} s (state and logs: {})",
            r.steps,
            elapsed.as_secs_f64(),
            dir.display()
        ),
        Ok(r) => println!(
            "\nsummary: {} of {} steps FAILED in {:.1} s (logs: {})",
            r.failures,
            r.steps,
            elapsed.as_secs_f64(),
            dir.display()
        ),
        Err(e) => println!(
            "\nsummary: the lab could not be built: {e:#} (logs: {})",
            dir.display()
        ),
    }
    let failed = !matches!(&result, Ok(r) if r.failures == 0);
    if failed && args.keep_on_failure {
        lab.keep = true;
        println!(
            "kept for inspection; remove with: oooi-vlan-lab down --prefix {}",
            args.prefix
        );
    } else if args.hold {
        println!(
            "holding; poke at it with e.g. `ip netns exec {}-w-a dig @192.0.2.3 api.a.example.com` or `ip netns exec {}-w-a bash`; Ctrl-C stops and removes it",
            args.prefix, args.prefix
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(tokio::signal::ctrl_c())?;
    }
    drop(lab);
    match result {
        Ok(r) if r.failures == 0 => Ok(()),
        Ok(r) => bail!("{} step(s) failed", r.failures),
        Err(e) => Err(e),
    }
}

fn wait_until(secs: u64, what: &str, mut f: impl FnMut() -> Result<String>) -> Result<String> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() > deadline => bail!("{what}: {e:#}"),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

fn json_file(p: &Path) -> Result<Value> {
    let text =
        std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not JSON", p.display()))
}

/// The value of the top-level `key:` line of a config render wrote (its
/// own, flat output format; the lab does not parse general YAML).
fn yaml_str(text: &str, key: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .map(|v| v.trim().trim_matches('"').to_string())
}

fn run_lab(lab: &mut Lab, args: &UpArgs) -> Result<Report> {
    let mut report = Report {
        failures: 0,
        steps: 0,
    };
    let dir = lab.dir.clone();
    let wasm = oooi_tests::filter_wasm()?;

    // 1. Render.
    println!(
        "render: oooi-controller render -f {}",
        args.manifests.display()
    );
    let manifests = std::fs::read_to_string(&args.manifests)
        .with_context(|| format!("cannot read {}", args.manifests.display()))?;
    let docs = yaml_docs(&manifests)?;
    let first = render(&dir.join("render"), &args.manifests, &wasm)?;
    let (dhcp_cfg, dns_cfg, routes_file, envoy_src) = (
        first.dhcp_cfg.clone(),
        first.dns_cfg.clone(),
        first.routes_file.clone(),
        first.envoy_src.clone(),
    );
    let dhcp_text = std::fs::read_to_string(&dhcp_cfg)?;
    let dns_text = std::fs::read_to_string(&dns_cfg)?;
    let dhcp_ip =
        yaml_str(&dhcp_text, "server_ip").ok_or_else(|| anyhow!("dhcp config: no server_ip"))?;
    let subnet = yaml_str(&dhcp_text, "subnet").ok_or_else(|| anyhow!("dhcp config: no subnet"))?;
    let plen = subnet
        .split('/')
        .nth(1)
        .ok_or_else(|| anyhow!("dhcp config: subnet `{subnet}` has no prefix length"))?;
    let iface = yaml_str(&dhcp_text, "interface").unwrap_or_else(|| "net1".into());
    let dns_ip = dns_text
        .lines()
        .skip_while(|l| !l.contains("kind: vlan"))
        .find_map(|l| l.trim().strip_prefix("- "))
        .and_then(|a| a.split(':').next())
        .ok_or_else(|| anyhow!("dns config: no vlan view listen address"))?
        .to_string();
    let proxy_ip = yaml_str(
        dns_text
            .lines()
            .find(|l| l.trim_start().starts_with("proxy:"))
            .unwrap_or("")
            .trim(),
        "proxy",
    )
    .ok_or_else(|| anyhow!("dns config: no proxy address"))?;
    let routes = json_file(&routes_file)?;
    // Clusters whose names carry allowed sources (`isolation: Strict`).
    let strict: std::collections::BTreeSet<String> = routes["routes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r.get("sources").is_some())
        .filter_map(|r| {
            r["owner"]
                .as_str()?
                .split_once('/')
                .map(|o| o.1.to_string())
        })
        .collect();
    // Apps VIPs (the observed MetalLB address) and where each one moves to
    // in the VIP-change phase: the next address.
    let dns_doc: Value = serde_saphyr::from_str(&dns_text).context("rendered DNS config")?;
    let mut apps_vips: BTreeMap<String, (Ipv4Addr, Ipv4Addr)> = BTreeMap::new();
    for c in dns_doc["clusters"].as_array().into_iter().flatten() {
        if let (Some(name), Some(vip)) = (c["name"].as_str(), c["apps_vip"].as_str()) {
            let vip: Ipv4Addr = vip.parse().with_context(|| format!("apps VIP `{vip}`"))?;
            let next = Ipv4Addr::from(u32::from(vip).wrapping_add(1));
            apps_vips.insert(name.to_string(), (vip, next));
        }
    }
    let api_ecds = json_file(&envoy_src.join("ecds_oooi_table_api.json"))?;
    let api_cfg: Value = serde_json::from_str(
        api_ecds["resources"][0]["typed_config"]["config"]["configuration"]["value"]
            .as_str()
            .ok_or_else(|| anyhow!("ecds_oooi_table_api.json: no configuration"))?,
    )?;
    let token = api_cfg["push_token"]
        .as_str()
        .ok_or_else(|| anyhow!("no push_token"))?
        .to_string();
    let lds = std::fs::read_to_string(envoy_src.join("lds.json"))?;
    let api_port = json_listener_port(&lds, "oooi_table_api")?;
    println!(
        "  dhcp {dhcp_ip} (reservations by MAC)  dns {dns_ip}  proxy {proxy_ip}  table API :{api_port}  {} routes",
        routes["routes"].as_array().map_or(0, Vec::len)
    );

    // Control-plane services the table points to: one mgmt address each.
    let mut services: BTreeMap<String, (Ipv4Addr, u16)> = BTreeMap::new();
    for r in routes["routes"].as_array().into_iter().flatten() {
        let host = r["upstream"]["address"]["host"].as_str().unwrap_or("");
        let port = r["upstream"]["address"]["port"].as_u64().unwrap_or(0) as u16;
        if host.ends_with(".svc.cluster.local") && !services.contains_key(host) {
            let index = u8::try_from(services.len() + 10)
                .ok()
                .filter(|i| *i < 255)
                .ok_or_else(|| {
                    anyhow!("more control-plane Services than the lab's 10.128.1.0/24 holds")
                })?;
            let ip = Ipv4Addr::new(10, 128, 1, index);
            services.insert(host.to_string(), (ip, port));
        }
    }
    let backend_name = |host: &str| -> String {
        let mut l = host.split('.');
        let svc = l.next().unwrap_or("");
        let ns = l.next().unwrap_or("");
        format!("{ns}/{svc}")
    };

    // 2. Namespaces and the bridge.
    println!(
        "\ntopology: namespaces {}-{{vlan,mgmt,dhcp,dns,proxy,w-*}}",
        lab.prefix
    );
    let vlan = lab.add_ns("vlan")?;
    run(&["ip", "-n", &vlan, "link", "add", "br0", "type", "bridge"])?;
    run(&["ip", "-n", &vlan, "link", "set", "br0", "up"])?;
    let mgmt = lab.add_ns("mgmt")?;
    let dhcp_ns = lab.add_ns("dhcp")?;
    let dns_ns = lab.add_ns("dns")?;
    let proxy_ns = lab.add_ns("proxy")?;
    lab.plug(
        &dhcp_ns,
        "dhcp",
        &iface,
        Some(&format!("{dhcp_ip}/{plen}")),
        None,
    )?;
    lab.plug(
        &dns_ns,
        "dns",
        "net1",
        Some(&format!("{dns_ip}/{plen}")),
        None,
    )?;
    lab.plug(
        &proxy_ns,
        "proxy",
        "net1",
        Some(&format!("{proxy_ip}/{plen}")),
        None,
    )?;
    // The proxy's pod interface to the management network.
    run(&[
        "ip", "-n", &proxy_ns, "link", "add", "eth0", "type", "veth", "peer", "name", "proxy",
        "netns", &mgmt,
    ])?;
    run(&[
        "ip",
        "-n",
        &proxy_ns,
        "addr",
        "add",
        "10.128.0.2/16",
        "dev",
        "eth0",
    ])?;
    run(&["ip", "-n", &proxy_ns, "link", "set", "eth0", "up"])?;
    run(&[
        "ip",
        "-n",
        &mgmt,
        "addr",
        "add",
        "10.128.0.1/16",
        "dev",
        "proxy",
    ])?;
    for (ip, _) in services.values() {
        run(&[
            "ip",
            "-n",
            &mgmt,
            "addr",
            "add",
            &format!("{ip}/16"),
            "dev",
            "proxy",
        ])?;
    }
    run(&["ip", "-n", &mgmt, "link", "set", "proxy", "up"])?;
    // Cluster DNS stand-in for the proxy: `ip netns exec` mounts these over /etc.
    let etc = Path::new("/etc/netns").join(&proxy_ns);
    std::fs::create_dir_all(&etc)?;
    let mut hosts = String::from("127.0.0.1 localhost\n");
    for (host, (ip, _)) in &services {
        hosts.push_str(&format!("{ip} {host}\n"));
    }
    std::fs::write(etc.join("hosts"), hosts)?;
    std::fs::write(etc.join("resolv.conf"), "nameserver 10.128.0.1\n")?;

    // 3. Simulated control planes in mgmt.
    let listen: Vec<String> = services
        .iter()
        .map(|(host, (ip, port))| format!("{}@{ip}:{port}", backend_name(host)))
        .collect();
    start_backends(lab, &mgmt, &listen, "backends")?;
    println!("control planes in {mgmt}:");
    for (host, (ip, port)) in &services {
        println!("  {:<28} {:<52} {ip}:{port}", backend_name(host), host);
    }
    // MetalLB stand-in: every apps VIP, current and next, answered on the
    // VLAN by a TLS server named after its address.
    if !apps_vips.is_empty() {
        let apps_ns = lab.add_ns("apps")?;
        lab.plug(&apps_ns, "apps", "net1", None, None)?;
        let mut listen = Vec::new();
        for (cluster, (old, new)) in &apps_vips {
            for vip in [old, new] {
                run(&[
                    "ip",
                    "-n",
                    &apps_ns,
                    "addr",
                    "add",
                    &format!("{vip}/{plen}"),
                    "dev",
                    "net1",
                ])?;
                listen.push(format!("vip/{vip}@{vip}:443"));
            }
            println!("  apps ingress of {cluster:<14} {apps_ns} {old} (moves to {new})");
        }
        start_backends(lab, &apps_ns, &listen, "apps-backends")?;
    }

    // 4. oooi-dhcp, oooi-dns, Envoy.
    let data = dir.join("dhcp-data");
    let render_dir = dir.join("render");
    std::fs::create_dir_all(&data)?;
    let launcher = args.launcher();
    println!("data plane: {}", launcher.describe());
    launcher.check()?;
    // The lease store stays owned by root: the container runs as UID 0 with
    // every capability but the pod's dropped (no CAP_DAC_OVERRIDE), so it
    // writes only a directory it owns.
    lab.launch(
        &launcher,
        &dhcp_ns,
        "oooi-dhcp",
        &Program {
            binary: "oooi-dhcp",
            image: "dhcp",
            caps: &["NET_BIND_SERVICE", "NET_RAW"],
            mounts: vec![(render_dir.clone(), false), (data.clone(), true)],
            args: vec![
                "serve".into(),
                "--config".into(),
                dhcp_cfg.to_string_lossy().into_owned(),
                "--data-dir".into(),
                data.to_string_lossy().into_owned(),
                "--metrics-addr".into(),
                "127.0.0.1:9067".into(),
            ],
        },
    )?;
    // Like the DNS pod: the ConfigMap is a kubelet mount, updated by the
    // `..data` symlink swap, which oooi-dns watches.
    let dns_mount = dir.join("dns-config");
    let dns_mounted = publish_config(&dns_mount, "config.yaml", &dns_text)?;
    lab.launch(
        &launcher,
        &dns_ns,
        "oooi-dns",
        &Program {
            binary: "oooi-dns",
            image: "dns",
            caps: &["NET_BIND_SERVICE"],
            mounts: vec![(dns_mount.clone(), false)],
            args: vec![
                "serve".into(),
                "--config".into(),
                dns_mounted.to_string_lossy().into_owned(),
                "--metrics-addr".into(),
                "127.0.0.1:9153".into(),
            ],
        },
    )?;
    // The ConfigMap and filter mounts of the proxy pod, as directories.
    let envoy_dir = dir.join("envoy");
    let filter_dir = dir.join("filter");
    std::fs::create_dir_all(&envoy_dir)?;
    std::fs::create_dir_all(&filter_dir)?;
    for e in std::fs::read_dir(&envoy_src)? {
        let e = e?;
        let text = std::fs::read_to_string(e.path())?
            .replace("/etc/oooi-envoy", envoy_dir.to_str().unwrap_or_default())
            .replace("/etc/oooi-filter", filter_dir.to_str().unwrap_or_default());
        std::fs::write(envoy_dir.join(e.file_name()), text)?;
    }
    let module_ref = walk(&envoy_dir)
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .find_map(|t| {
            // The module's file name, wherever the rendered layout puts it
            // (the filter mount, or `..data` of the config mount).
            let end = t.find(".wasm\"")? + ".wasm".len();
            let start = t[..end].rfind('"')? + 1;
            Some(t[start..end].to_string())
        })
        .ok_or_else(|| anyhow!("rendered Envoy config names no filter module"))?;
    if let Some(parent) = std::path::Path::new(&module_ref).parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::copy(&wasm, &module_ref)?;
    lab.launch(
        &launcher,
        &proxy_ns,
        "envoy",
        &Program {
            binary: "envoy",
            image: "proxy",
            caps: &["NET_BIND_SERVICE"],
            mounts: vec![(envoy_dir.clone(), false), (filter_dir.clone(), false)],
            args: [
                "-c",
                envoy_dir.join("envoy.json").to_str().unwrap_or_default(),
                "--use-dynamic-base-id",
                "--concurrency",
                "1",
                "--log-level",
                "warn",
                "--component-log-level",
                "wasm:info",
            ]
            .map(String::from)
            .to_vec(),
        },
    )?;
    let got = wait_until(15, "oooi-dhcp /healthz", || {
        lab.me_in(&dhcp_ns, &["http", "GET", "127.0.0.1:9067", "/healthz"])
    })
    .map(|s| s.split_whitespace().next().unwrap_or("").to_string())
    .unwrap_or_else(|e| format!("{e:#}"));
    println!("\ninfra on the VLAN:");
    report.step(
        &format!("oooi-dhcp serving on {dhcp_ns}/{iface} {dhcp_ip}"),
        "200",
        &got,
    );
    let got = wait_until(15, "oooi-dns /healthz", || {
        lab.me_in(&dns_ns, &["http", "GET", "127.0.0.1:9153", "/healthz"])
    })
    .map(|s| s.split_whitespace().next().unwrap_or("").to_string())
    .unwrap_or_else(|e| format!("{e:#}"));
    report.step(&format!("oooi-dns serving on {dns_ip}:53"), "200", &got);

    // 5. Push the table from the management network, as the controller does.
    let api = format!("10.128.0.2:{api_port}");
    let push = |file: &Path| -> String {
        wait_until(20, "push", || {
            lab.me_in(
                &mgmt,
                &[
                    "http",
                    "PUT",
                    &api,
                    "/v1/routes",
                    "--token",
                    &token,
                    "--body",
                    file.to_str().unwrap_or_default(),
                ],
            )
        })
        .map(|s| s.split_whitespace().next().unwrap_or("").to_string())
        .unwrap_or_else(|e| format!("{e:#}"))
    };
    let got = push(&routes_file);
    report.step(
        &format!("push rendered table (generation 1) from mgmt to {api}"),
        "200",
        &got,
    );

    // 6. Workers.
    // One worker per hosted cluster: the first source-scoped route of each
    // owner is a worker address, and its DHCP reservation gives the MAC.
    let mut workers: Vec<Worker> = Vec::new();
    for r in routes["routes"].as_array().into_iter().flatten() {
        let (Some(src), Some(owner)) = (r["source"].as_str(), r["owner"].as_str()) else {
            continue;
        };
        let (ns, name) = owner
            .split_once('/')
            .ok_or_else(|| anyhow!("route owner `{owner}` is not namespace/name"))?;
        if workers
            .iter()
            .any(|w| w.cluster.as_ref().is_some_and(|c| c.1 == name && c.0 == ns))
        {
            continue;
        }
        let ip: Ipv4Addr = src
            .trim_end_matches("/32")
            .parse()
            .with_context(|| format!("route source `{src}`"))?;
        let mac = dhcp_text
            .lines()
            .collect::<Vec<_>>()
            .windows(2)
            .find(|w| w[1].contains(&format!("\"{ip}\"")))
            .and_then(|w| w[0].split("mac:").nth(1))
            .map(|m| m.trim().to_string())
            .ok_or_else(|| anyhow!("no DHCP reservation for worker {ip}"))?;
        workers.push(Worker {
            name: name.to_string(),
            mac,
            cluster: Some((ns.to_string(), name.to_string())),
            reserved: Some(ip),
        });
    }
    workers.push(Worker {
        name: "none".into(),
        mac: "02:00:ee:00:00:01".into(),
        cluster: None,
        reserved: None,
    });
    let script = dir.join("udhcpc.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\ncase \"$1\" in\n  bound|renew) ip addr flush dev \"$interface\"; ip addr add \"$ip/$mask\" dev \"$interface\"; echo \"ip=$ip dns=$dns router=$router\" > \"$OOOI_LEASE\" ;;\nesac\nexit 0\n",
    )?;
    run(&["chmod", "+x", script.to_str().unwrap_or_default()])?;
    let range_bound = |k: &str| -> Result<Ipv4Addr> {
        dhcp_text
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{k}:")))
            .map(|v| v.trim().trim_matches('"'))
            .ok_or_else(|| anyhow!("dhcp config: no range {k}"))?
            .parse()
            .with_context(|| format!("dhcp config: range {k}"))
    };
    let range = (range_bound("start")?, range_bound("end")?);
    let base = dns_text
        .lines()
        .find_map(|l| l.trim().strip_prefix("base_domain:"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let isolation = |c: &str| {
        if strict.contains(c) {
            "Strict"
        } else {
            "Standard"
        }
    };
    let clusters: Vec<String> = workers
        .iter()
        .filter_map(|w| w.cluster.as_ref().map(|c| c.1.clone()))
        .collect();
    let mut booted: Vec<(String, String)> = Vec::new();
    // Connections the filter must refuse as `source_not_allowed` (a Strict
    // cluster's name from another source); checked against its counter.
    let mut strict_refusals = 0usize;

    for (i, w) in workers.iter().enumerate() {
        let label = match &w.cluster {
            Some((_, c)) => format!("worker of cluster {c} (isolation {})", isolation(c)),
            None => "a machine of no cluster".to_string(),
        };
        println!("\n{label} (MAC {}):", w.mac);
        let ns = lab.add_ns(&format!("w-{}", w.name))?;
        // Bridge port names are short (15 bytes at most).
        lab.plug(&ns, &format!("w{i}"), "eth0", None, Some(&w.mac))?;
        let lease_file = dir.join(format!("lease-{}", w.name));
        let out = Command::new("timeout")
            .args([
                "15", "ip", "netns", "exec", &ns, "busybox", "udhcpc", "-f", "-q", "-n", "-i",
                "eth0", "-t", "5", "-T", "1", "-A", "1", "-s",
            ])
            .arg(&script)
            .env("OOOI_LEASE", &lease_file)
            .output()?;
        let lease = std::fs::read_to_string(&lease_file).unwrap_or_default();
        let field = |k: &str| {
            lease
                .split_whitespace()
                .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
                .unwrap_or("")
                .to_string()
        };
        let ip = field("ip");
        let got_dns = field("dns");
        if !out.status.success() && ip.is_empty() {
            report.step("udhcpc: lease", "a lease", "no lease");
            continue;
        }
        match w.reserved {
            Some(r) => report.step("udhcpc: lease (reservation by MAC)", &r.to_string(), &ip),
            None => {
                let in_range = ip
                    .parse::<Ipv4Addr>()
                    .is_ok_and(|a| a >= range.0 && a <= range.1);
                report.step(
                    "udhcpc: lease (dynamic)",
                    &format!("in {}-{}", range.0, range.1),
                    &if in_range {
                        format!("in {}-{}", range.0, range.1)
                    } else {
                        ip.clone()
                    },
                )
            }
        };
        report.step("udhcpc: DNS server option", &dns_ip, &got_dns);
        let Some((cns, cluster)) = &w.cluster else {
            // A machine on the VLAN that belongs to no cluster.
            let got = probe(lab, &ns, &proxy_ip, 6443, Some("kubernetes.default.svc"));
            report.step(
                "alias kubernetes.default.svc from a non-worker",
                "refused",
                &got,
            );
            let got = probe(lab, &ns, &proxy_ip, 443, Some("kubernetes.default.svc"));
            report.step(
                "alias kubernetes.default.svc:443 from a non-worker",
                "refused",
                &got,
            );
            let got = probe(lab, &ns, &proxy_ip, 6443, None);
            report.step("no SNI to :6443 from a non-worker", "refused", &got);
            for c in &clusters {
                let got = probe(lab, &ns, &proxy_ip, 6443, Some(&format!("api.{c}.{base}")));
                // A Standard cluster's names take any source; a Strict one's
                // only its own workers (and clients off the VLAN).
                strict_refusals += usize::from(strict.contains(c));
                report.step(
                    &format!("api.{c}.{base} by SNI from a non-worker ({})", isolation(c)),
                    &if strict.contains(c) {
                        "refused".to_string()
                    } else {
                        format!("clusters-{c}/kube-apiserver")
                    },
                    &got,
                );
            }
            continue;
        };
        booted.push((cluster.clone(), ns.clone()));
        let fqdn = format!("api.{cluster}.{base}");
        let resolved = dig(lab, &ns, &got_dns, &fqdn);
        report.step(&format!("dig @{got_dns} {fqdn}"), &proxy_ip, &resolved);
        // HyperShift's control-plane namespace is `<namespace>-<name>`.
        let own = format!("{cns}-{cluster}/kube-apiserver");
        let got = probe(lab, &ns, &resolved, 6443, Some(&fqdn));
        report.step(&format!("TLS {fqdn}:6443 by SNI"), &own, &got);
        let got = probe(
            lab,
            &ns,
            &proxy_ip,
            443,
            Some(&format!("oauth.{cluster}.{base}")),
        );
        report.step(
            &format!("TLS oauth.{cluster}.{base}:443 by SNI"),
            &format!("{cns}-{cluster}/oauth-openshift"),
            &got,
        );
        let got = probe(lab, &ns, &proxy_ip, 6443, Some("kubernetes.default.svc"));
        report.step(
            "TLS kubernetes.default.svc:6443 (alias, by source)",
            &own,
            &got,
        );
        let got = probe(lab, &ns, &proxy_ip, 443, Some("kubernetes.default.svc"));
        report.step(
            "TLS kubernetes.default.svc:443 (alias, by SNI and source)",
            &own,
            &got,
        );
        let got = probe(lab, &ns, &proxy_ip, 6443, None);
        report.step("TLS :6443 without SNI (by source)", &own, &got);
        if let Some((old, _)) = apps_vips.get(cluster.as_str()) {
            let console = format!("console-openshift-console.apps.{cluster}.{base}");
            let got = dig(lab, &ns, &got_dns, &console);
            report.step(&format!("dig {console}"), &old.to_string(), &got);
            let got = probe(lab, &ns, &proxy_ip, 443, Some(&console));
            report.step(
                "TLS *.apps:443 through the proxy by SNI",
                &format!("vip/{old}"),
                &got,
            );
        }
        // Cross-cluster: the alias above answered with this worker's own
        // cluster; the other clusters' names are refused when they are Strict.
        for other in clusters.iter().filter(|c| *c != cluster) {
            if strict.contains(other) {
                strict_refusals += 2 + usize::from(apps_vips.contains_key(other.as_str()));
            }
            let want = |svc: &str| {
                if strict.contains(other) {
                    "refused".to_string()
                } else {
                    format!("clusters-{other}/{svc}")
                }
            };
            for (port, name, svc) in [
                (6443, "api", "kube-apiserver"),
                (443, "oauth", "oauth-openshift"),
            ] {
                let got = probe(
                    lab,
                    &ns,
                    &proxy_ip,
                    port,
                    Some(&format!("{name}.{other}.{base}")),
                );
                report.step(
                    &format!(
                        "cross-cluster: {name}.{other}.{base} ({})",
                        isolation(other)
                    ),
                    &want(svc),
                    &got,
                );
            }
            if let Some((old, _)) = apps_vips.get(other.as_str()) {
                let got = probe(
                    lab,
                    &ns,
                    &proxy_ip,
                    443,
                    Some(&format!("console-openshift-console.apps.{other}.{base}")),
                );
                report.step(
                    &format!(
                        "cross-cluster: *.apps.{other}.{base} ({})",
                        isolation(other)
                    ),
                    &if strict.contains(other) {
                        "refused".to_string()
                    } else {
                        format!("vip/{old}")
                    },
                    &got,
                );
            }
        }
    }

    if strict_refusals > 0 {
        // The filter logs every refusal with its reason: those were refused
        // for the source, not for an unknown name or a missing route.
        let want = strict_refusals.to_string();
        let count = || {
            std::fs::read_to_string(dir.join("envoy.log"))
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains("refuse reason=source_not_allowed"))
                .count()
                .to_string()
        };
        let got = wait_until(5, "the filter's log", || {
            let got = count();
            if got == want { Ok(got) } else { bail!("{got}") }
        })
        .unwrap_or_else(|_| count());
        println!("\nthe filter's own account:");
        report.step("refusals logged as reason=source_not_allowed", &want, &got);
        // And the counter an operator alerts on, from Envoy's admin API.
        let envoy_json = json_file(&envoy_src.join("envoy.json"))?;
        let admin = &envoy_json["admin"]["address"]["socket_address"];
        let admin = format!(
            "{}:{}",
            admin["address"].as_str().unwrap_or("127.0.0.1"),
            admin["port_value"].as_u64().unwrap_or(9901)
        );
        let stat = "oooi_sni_router_refuse_source_not_allowed";
        // The value after `<name>: ` (the answer may come chunked).
        let read = || {
            lab.me_in(
                &proxy_ns,
                &["http", "GET", &admin, &format!("/stats?filter={stat}")],
            )
            .map(|s| {
                s.split(&format!("{stat}:"))
                    .nth(1)
                    .and_then(|v| v.split_whitespace().next())
                    .unwrap_or("not listed")
                    .to_string()
            })
            .unwrap_or_else(|e| format!("{e:#}"))
        };
        let got = wait_until(5, "Envoy's counter", || {
            let got = read();
            if got == want { Ok(got) } else { bail!("{got}") }
        })
        .unwrap_or_else(|_| read());
        report.step(&format!("Envoy counter {stat}"), &want, &got);
    }

    // 7. MetalLB moves an apps VIP: the observed state changes, render runs
    // again, the DNS ConfigMap is updated and the new table pushed.
    let mut docs = docs;
    let mut generation = 1;
    for (cluster, (old, new)) in &apps_vips {
        println!("\napps VIP of cluster {cluster} moves {old} -> {new} (observed state changed):");
        set_observed_apps_vip(&mut docs, cluster, *new)?;
        generation += 1;
        let got = rerender(lab, &docs, generation, &wasm, &dns_mount, &push)?;
        report.step(
            &format!("re-render, DNS ConfigMap swap, push generation {generation}"),
            "200",
            &got,
        );
        let Some((_, ns)) = booted.iter().find(|(c, _)| c == cluster) else {
            continue;
        };
        let console = format!("console-openshift-console.apps.{cluster}.{base}");
        let want = new.to_string();
        let got = wait_until(10, "the DNS reload", || {
            let got = dig(lab, ns, &dns_ip, &console);
            if got == want {
                Ok(got)
            } else {
                bail!("still {got}")
            }
        })
        .unwrap_or_else(|_| dig(lab, ns, &dns_ip, &console));
        report.step(&format!("dig {console}"), &want, &got);
        let got = probe(lab, ns, &proxy_ip, 443, Some(&console));
        report.step(
            "TLS *.apps:443 through the proxy by SNI",
            &format!("vip/{new}"),
            &got,
        );
    }

    // 8. The last attachment is deleted: its routes and records go.
    if let Some(gone) = remove_last_attachment(&mut docs) {
        println!("\nattachment of cluster {gone} deleted:");
        generation += 1;
        let got = rerender(lab, &docs, generation, &wasm, &dns_mount, &push)?;
        report.step(
            &format!("re-render, DNS ConfigMap swap, push generation {generation}"),
            "200",
            &got,
        );
        let fqdn = format!("api.{gone}.{base}");
        for (cluster, ns) in &booted {
            let own = format!("clusters-{cluster}/kube-apiserver");
            if *cluster == gone {
                let got = wait_until(10, "the DNS reload", || {
                    let got = dig(lab, ns, &dns_ip, &fqdn);
                    if got == "no answer" {
                        Ok(got)
                    } else {
                        bail!("still {got}")
                    }
                })
                .unwrap_or_else(|_| dig(lab, ns, &dns_ip, &fqdn));
                report.step(&format!("dig {fqdn} from its worker"), "no answer", &got);
                if apps_vips.contains_key(gone.as_str()) {
                    let console = format!("console-openshift-console.apps.{gone}.{base}");
                    let got = dig(lab, ns, &dns_ip, &console);
                    report.step(&format!("dig {console}"), "no answer", &got);
                }
                let got = probe(lab, ns, &proxy_ip, 6443, Some(&fqdn));
                report.step(&format!("TLS {fqdn}:6443 by SNI"), "refused", &got);
                let got = probe(lab, ns, &proxy_ip, 6443, Some("kubernetes.default.svc"));
                report.step("TLS kubernetes.default.svc:6443 (alias)", "refused", &got);
                let got = probe(lab, ns, &proxy_ip, 6443, None);
                report.step("TLS :6443 without SNI", "refused", &got);
            } else {
                let name = format!("api.{cluster}.{base}");
                let got = dig(lab, ns, &dns_ip, &name);
                report.step(&format!("dig {name} (kept)"), &proxy_ip, &got);
                let got = probe(lab, ns, &proxy_ip, 6443, Some(&name));
                report.step(&format!("TLS {name}:6443 by SNI (kept)"), &own, &got);
                let got = probe(lab, ns, &proxy_ip, 6443, Some("kubernetes.default.svc"));
                report.step("TLS kubernetes.default.svc:6443 (alias, kept)", &own, &got);
            }
        }
    }
    Ok(report)
}

impl Lab {
    fn run_in(&self, ns: &str, args: &[&str]) -> Result<String> {
        let mut all = vec!["ip", "netns", "exec", ns];
        all.extend_from_slice(args);
        run(&all)
    }
}

/// TLS from `ns` to `ip:port`; the answering backend's name or `refused`.
fn probe(lab: &Lab, ns: &str, ip: &str, port: u16, sni: Option<&str>) -> String {
    let addr = format!("{ip}:{port}");
    let mut args = vec!["probe", addr.as_str()];
    if let Some(s) = sni {
        args.extend(["--sni", s]);
    }
    lab.me_in(ns, &args)
        .unwrap_or_else(|_| "refused".to_string())
}

/// Port of the listener whose filters name `marker` in the rendered LDS.
fn json_listener_port(lds: &str, marker: &str) -> Result<u16> {
    let v: Value = serde_json::from_str(lds)?;
    for l in v["resources"].as_array().into_iter().flatten() {
        if l.to_string().contains(marker)
            && let Some(p) = l["address"]["socket_address"]["port_value"].as_u64()
        {
            return Ok(p as u16);
        }
    }
    bail!("rendered lds.json has no listener with `{marker}`")
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn start_backends(lab: &mut Lab, ns: &str, listen: &[String], log: &str) -> Result<()> {
    let me = std::env::current_exe()?;
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(me)
        .arg("backends")
        .args(listen)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(
            lab.dir.join(format!("{log}.log")),
        )?))
        .spawn()?;
    lab.record_pid(child.id())?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        BufReader::new(out).read_line(&mut line)?;
    }
    lab.children.push(child);
    if line.trim() != "ready" {
        bail!(
            "control-plane backends did not start: see {}",
            lab.dir.join(format!("{log}.log")).display()
        );
    }
    Ok(())
}

// ---------------------------------------------------------------- render and changes

/// The component configs one `oooi-controller render --out` wrote.
struct RenderedFiles {
    dhcp_cfg: PathBuf,
    dns_cfg: PathBuf,
    routes_file: PathBuf,
    envoy_src: PathBuf,
}

/// Runs `oooi-controller render -f manifests --out out`, as a user would.
fn render(out: &Path, manifests: &Path, wasm: &Path) -> Result<RenderedFiles> {
    run(&[
        sibling("oooi-controller")?.to_str().unwrap_or_default(),
        "render",
        "-f",
        manifests.to_str().unwrap_or_default(),
        "--filter-wasm",
        wasm.to_str().unwrap_or_default(),
        "--out",
        out.to_str().unwrap_or_default(),
    ])?;
    let files = out.join("files");
    let find = |suffix: &str| -> Result<PathBuf> {
        walk(&files)
            .into_iter()
            .find(|p| p.to_string_lossy().ends_with(suffix))
            .ok_or_else(|| anyhow!("render wrote no *{suffix}"))
    };
    let envoy_src = find("-proxy-envoy/envoy.json")?
        .parent()
        .ok_or_else(|| anyhow!("envoy dir"))?
        .to_path_buf();
    Ok(RenderedFiles {
        dhcp_cfg: find("-dhcp.yaml")?,
        dns_cfg: find("-dns.yaml")?,
        routes_file: find("-proxy-routes.json")?,
        envoy_src,
    })
}

/// The documents of a multi-document YAML manifest.
fn yaml_docs(text: &str) -> Result<Vec<Value>> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).context("manifests: not YAML")?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// What MetalLB does when it moves a VIP, as the controller observes it:
/// the `ObservedCluster` of `cluster` gets `appsVip: vip`.
fn set_observed_apps_vip(docs: &mut [Value], cluster: &str, vip: Ipv4Addr) -> Result<()> {
    let doc = docs
        .iter_mut()
        .find(|d| d["kind"] == "ObservedCluster" && d["hostedCluster"]["name"] == cluster)
        .ok_or_else(|| anyhow!("no ObservedCluster for cluster {cluster}"))?;
    doc["appsVip"] = Value::String(vip.to_string());
    Ok(())
}

/// `kubectl delete` of the last InfraClusterAttachment; its hosted cluster's
/// name. The observed documents stay: state of an unattached cluster is
/// ignored by the planner.
fn remove_last_attachment(docs: &mut Vec<Value>) -> Option<String> {
    let i = docs
        .iter()
        .rposition(|d| d["kind"] == "InfraClusterAttachment")?;
    let gone = docs.remove(i);
    gone["spec"]["hostedClusterRef"]["name"]
        .as_str()
        .map(str::to_string)
}

/// Updates a kubelet-style ConfigMap mount under `mount`: the data in a new
/// `..<n>` directory, the `..data` symlink swapped to it by rename, and
/// `file` a symlink through `..data` (created the first time). Returns the
/// path of `file`.
fn publish_config(mount: &Path, file: &str, text: &str) -> Result<PathBuf> {
    std::fs::create_dir_all(mount)?;
    let n = (1..)
        .find(|n| !mount.join(format!("..{n}")).exists())
        .unwrap_or(1);
    let data = mount.join(format!("..{n}"));
    std::fs::create_dir_all(&data)?;
    std::fs::write(data.join(file), text)?;
    let tmp = mount.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(format!("..{n}"), &tmp)?;
    std::fs::rename(&tmp, mount.join("..data"))?;
    let link = mount.join(file);
    if !link.exists() {
        std::os::unix::fs::symlink(format!("..data/{file}"), &link)?;
    }
    Ok(link)
}

/// Renders the changed manifests, swaps the DNS ConfigMap and pushes the
/// table as `generation`, as the controller does after a change; the
/// push's HTTP status.
fn rerender(
    lab: &Lab,
    docs: &[Value],
    generation: u64,
    wasm: &Path,
    dns_mount: &Path,
    push: &impl Fn(&Path) -> String,
) -> Result<String> {
    let manifests = lab.dir.join(format!("manifests-{generation}.yaml"));
    let mut text = String::new();
    for d in docs {
        text.push_str("---\n");
        text.push_str(&serde_saphyr::to_string(d)?);
    }
    std::fs::write(&manifests, text)?;
    let out = render(
        &lab.dir.join(format!("render-{generation}")),
        &manifests,
        wasm,
    )?;
    let mut table = json_file(&out.routes_file)?;
    table["generation"] = generation.into();
    let routes = lab.dir.join(format!("routes-{generation}.json"));
    std::fs::write(&routes, serde_json::to_vec(&table)?)?;
    println!(
        "  render -f {}: {} routes",
        manifests.display(),
        table["routes"].as_array().map_or(0, Vec::len)
    );
    publish_config(
        dns_mount,
        "config.yaml",
        &std::fs::read_to_string(&out.dns_cfg)?,
    )?;
    Ok(push(&routes))
}

/// The first A record `server` gives for `name`, asked from `ns`, or
/// `no answer`.
fn dig(lab: &Lab, ns: &str, server: &str, name: &str) -> String {
    lab.run_in(
        ns,
        &[
            "dig",
            "+short",
            "+time=2",
            "+tries=1",
            &format!("@{server}"),
            name,
            "A",
        ],
    )
    .ok()
    .and_then(|s| {
        s.lines()
            .find(|l| l.parse::<Ipv4Addr>().is_ok())
            .map(str::to_string)
    })
    .unwrap_or_else(|| "no answer".to_string())
}

// ---------------------------------------------------------------- backends

/// Serves one TLS backend per `NAME@IP:PORT` that announces `backend=NAME`.
fn backends(listen: &[String]) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    rt.block_on(async {
        // Held until the process is killed: a Backend stops when dropped.
        let mut running = Vec::new();
        for spec in listen {
            let (name, addr) = spec
                .split_once('@')
                .ok_or_else(|| anyhow!("backend `{spec}`: expected NAME@IP:PORT"))?;
            let addr: SocketAddr = addr
                .parse()
                .with_context(|| format!("backend `{spec}`: address"))?;
            running.push(oooi_tests::Backend::start_on(name, addr).await?);
        }
        println!("ready");
        std::io::stdout().flush()?;
        std::future::pending::<()>().await;
        Ok(())
    })
}
