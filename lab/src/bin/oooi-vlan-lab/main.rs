//! The local lab on a simulated VLAN (root).
//!
//! `oooi-vlan-lab up` renders `lab/two-clusters.yaml` with
//! `oooi-controller render`, then builds, out of network namespaces:
//!
//! - `<p>-vlan`: a bridge, the simulated VLAN (192.0.2.0/24 from the manifest);
//! - `<p>-dhcp`, `<p>-dns`, `<p>-dns-2`, `<p>-proxy`, `<p>-proxy-2`: one
//!   per infra pod (two DNS and two proxy replicas, each at its own address:
//!   the Infra's `serverIP` and, while render gives one, a second the lab
//!   adds, see `replicas`), each with `net1` on the bridge, running
//!   `oooi-dhcp`, `oooi-dns` and Envoy with the filter from the rendered
//!   files only: by default the
//!   images `localhost/oooi-{dhcp,dns,proxy}:<version>` under podman in the
//!   namespace's network, each container with the security context render
//!   planned for its pod (`launch::RunAs`: UID 65532, no capability, no
//!   privilege escalation, read-only root, the pod's sysctls; the address
//!   agent UID 0 with NET_ADMIN and NET_RAW only), checked against the
//!   running process; with `--from-build` the cargo-built binaries (as
//!   root) and the `envoy` on PATH;
//! - `<p>-mgmt`: the management pod network (a bridge the proxy and DNS pods
//!   are on, the DNS pod at 10.128.0.3); a management pod there asks the DNS
//!   pod view (port 5353) for `api.<cluster>.<base>`: the internal proxy with
//!   the Infra's `internalProxyService`, forwarded once it is removed, and
//!   never an answer for `kubernetes.default.svc`; TLS servers stand in for each
//!   hosted cluster's kube-apiserver, oauth, ignition and konnectivity at the
//!   Service names the routing table points to (the proxy resolves them
//!   through `/etc/netns/<p>-proxy/hosts`, the lab's stand-in for cluster
//!   DNS). The table is pushed from here to the proxy's pod address, as the
//!   controller does;
//! - `<p>-w-*`: worker VMs; each takes a lease with busybox `udhcpc` (both
//!   DNS addresses; its resolv.conf is written from the lease), resolves
//!   `api.<cluster>.<base>` with `dig` and glibc through oooi-dns (every
//!   proxy address, in order), and opens TLS through
//!   Envoy by SNI and by the `kubernetes.default.svc` alias, then tries the
//!   other clusters' names (refused when that cluster is `isolation: Strict`;
//!   the filter's log must show `source_not_allowed` for each);
//! - `<p>-site`: the site's resolver, unbound at the DNS servers' upstream
//!   (192.0.2.1), answering each cluster's public `api` name and NXDOMAIN
//!   for every other name;
//! - `<p>-apps`: the MetalLB stand-in, a TLS server on each apps VIP (the
//!   observed one and the next address) on the VLAN.
//!
//! Then, while the workers look up and connect in a loop (the `steady`
//! client: glibc's resolver, the next address on a failed connect), the lab
//! kills one proxy replica with SIGKILL and starts it again (not ready and
//! refusing until the table is pushed to it), then one DNS replica, and
//! reports failed connections, latency at the kill, failed lookups and the
//! time until the replica serves again.
//!
//! Then the lab changes the manifests as the cluster would and checks that
//! DNS and routes follow: MetalLB moves an apps VIP (the `ObservedCluster`'s
//! `appsVip`), the last attachment is deleted, and the remaining cluster's
//! workers are first unknown (no alias answer, no alias route), then its
//! Machine reports its address (both appear), and the Infra stops naming its
//! internal proxy Service. Each change is rendered
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

//!
//! Modules: `lab` (namespaces, processes, teardown), `render` (what
//! `oooi-controller render` wrote and the manifest changes), `clients` (what
//! a worker or the management network runs: dig, TLS probes, table pushes),
//! `launch` (how a data-plane program starts: from its image under podman with its
//! pod's security context, or from the cargo build), `replicas` (the DNS and proxy replicas' addresses and configs), `steady`
//! (the workers' loop during the failover),
//! `backends` (the TLS servers standing in for control planes and apps
//! VIPs), `report` (the printed steps), and `steps`, the lab's run in order.

mod backends;
mod clients;
mod lab;
mod launch;
mod render;
mod replicas;
mod report;
mod steady;
mod steps;
mod watch;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Instant;

use crate::launch::Launcher;
use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

use crate::lab::{Lab, down, state_dir};

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
    #[arg(long, global = true, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/two-clusters.yaml"))]
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
    /// (internal) TCP connect to ADDR: print `connected`, `refused` (the
    /// kernel refused it: nothing listens) or the error.
    #[command(hide = true)]
    Connect { addr: SocketAddr },
    /// (internal) Look up and connect to each HOST:PORT in a loop, trying
    /// the next address when a connect fails, until --stop exists; one JSON
    /// line per attempt.
    #[command(hide = true)]
    Steady {
        targets: Vec<String>,
        #[arg(long)]
        stop: PathBuf,
        #[arg(long, default_value_t = 50)]
        interval_ms: u64,
        #[arg(long, default_value_t = 3000)]
        connect_timeout_ms: u64,
        /// Look up only, connect to nothing.
        #[arg(long)]
        lookup_only: bool,
    },
    /// (internal) Hold a long-lived TLS connection (SNI --sni) to each ADDR,
    /// sending a line every --interval-ms and reading its echo, reopened
    /// when it ends, until --stop exists; one JSON line per connection.
    #[command(hide = true)]
    Watch {
        addrs: Vec<SocketAddr>,
        #[arg(long)]
        sni: String,
        #[arg(long)]
        stop: PathBuf,
        #[arg(long, default_value_t = 250)]
        interval_ms: u64,
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
        Some(Cmd::Backends { listen }) => backends::serve(&listen),
        Some(Cmd::Steady {
            targets,
            stop,
            interval_ms,
            connect_timeout_ms,
            lookup_only,
        }) => steady::run(
            &targets,
            std::time::Duration::from_millis(interval_ms),
            std::time::Duration::from_millis(connect_timeout_ms),
            lookup_only,
            &stop,
        ),
        Some(Cmd::Watch {
            addrs,
            sni,
            stop,
            interval_ms,
        }) => watch::run(
            &addrs,
            &sni,
            std::time::Duration::from_millis(interval_ms),
            &stop,
        ),
        Some(Cmd::Connect { addr }) => {
            match std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(3)) {
                Ok(_) => println!("connected"),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => println!("refused"),
                Err(e) => println!("error: {e}"),
            }
            Ok(())
        }
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
    let result = steps::run(&mut lab, args);
    let elapsed = t0.elapsed();
    match &result {
        Ok(r) if r.failures() == 0 => println!(
            "\nsummary: all {} steps passed in {:.1} s (state and logs: {})",
            r.steps,
            elapsed.as_secs_f64(),
            dir.display()
        ),
        Ok(r) => println!(
            "\nsummary: {} of {} steps FAILED in {:.1} s (logs: {}):\n{}",
            r.failures(),
            r.steps,
            elapsed.as_secs_f64(),
            dir.display(),
            r.failed.join("\n")
        ),
        Err(e) => println!(
            "\nsummary: the lab could not be built: {e:#} (logs: {})",
            dir.display()
        ),
    }
    let failed = !matches!(&result, Ok(r) if r.failures() == 0);
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
        Ok(r) if r.failures() == 0 => Ok(()),
        Ok(r) => bail!("{} step(s) failed", r.failures()),
        Err(e) => Err(e),
    }
}
