//! `oooi-addr-agent`: floating VLAN addresses for DNS and proxy replicas.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Parser;
use ipnet::Ipv4Net;
use oooi_addr_agent::arp::ArpSocket;
use oooi_addr_agent::defend::{self, Held};
use oooi_addr_agent::lease::check_prefix;
use oooi_addr_agent::machine::Timing;
use oooi_addr_agent::metrics::{self, Metrics};
use oooi_addr_agent::parse_duration;
use oooi_addr_agent::plane::{LinuxPlane, Plane};
use oooi_addr_agent::run::{self, Announce, Settings};
use oooi_envoy_gate::ReadyUrl;
use tokio::sync::watch;
use tracing::{error, info};

/// Moves a component's VLAN addresses between its ready replicas.
///
/// Runs as its own container beside one DNS or proxy replica, in the pod's
/// network namespace. For every address of the component (--address) it
/// keeps one coordination.k8s.io/v1 Lease, named <--lease-prefix>-a-b-c-d in
/// --namespace: the replica holding the Lease has the address on its VLAN
/// interface (--interface) and announces it by gratuitous ARP. A holder
/// renews every --retry-period and drops the address when it could not
/// renew for --renew-deadline; another replica takes it once the Lease has
/// not changed for --lease-duration (measured on its own clock since it saw
/// the Lease change, never by comparing wall clocks). A taken address gets
/// a kernel lifetime of --renew-deadline, pushed out at every renewal, so
/// it also leaves when the agent is killed or frozen.
///
/// Only a ready replica holds addresses: --ready-url is polled every
/// --ready-interval; not ready (--ready-failures misses in a row) releases
/// every Lease, and each address stays until the next holder shows up or
/// the renew deadline passes. The replica's own address (--home) comes
/// back to it once it has been ready for --home-ready-for: it marks the
/// Lease wanted (annotation hostedcluster.densityops.com/wanted-by), the
/// holder hands the Lease over and drops the address once the home has
/// renewed it.
///
/// The holder defends its addresses (RFC 5227): another host's claim to a
/// held address is answered by an announcement at once, and a request for
/// one by an announcement to the requester; --no-defend turns this off.
///
/// SIGTERM or SIGINT: release every Lease, wait until each address has a
/// new holder (at most the renew deadline), remove them, exit 0.
///
/// Needs CAP_NET_ADMIN (addresses) and CAP_NET_RAW (gratuitous ARP), and
/// get/create/update on coordination.k8s.io leases in --namespace. The
/// Kubernetes client is configured in-cluster, or from KUBECONFIG.
#[derive(Debug, Parser)]
#[command(name = "oooi-addr-agent", version)]
struct Args {
    /// This replica's identity in the Leases: the pod name.
    #[arg(long, env = "POD_NAME")]
    identity: String,
    /// Namespace of the Leases: the pod's namespace.
    #[arg(long, env = "POD_NAMESPACE")]
    namespace: String,
    /// Lease name prefix, e.g. <infra>-dns: Lease <prefix>-192-0-2-3 fences
    /// 192.0.2.3. Every replica of a component uses the same.
    #[arg(long, env = "OOOI_AGENT_LEASE_PREFIX")]
    lease_prefix: String,
    /// Every VLAN address of the component, as IP/prefix (repeat, or
    /// separate with commas), e.g. 192.0.2.3/24,192.0.2.6/24.
    #[arg(
        long = "address",
        env = "OOOI_AGENT_ADDRESSES",
        value_delimiter = ',',
        required = true
    )]
    addresses: Vec<Ipv4Net>,
    /// This replica's own address (one of --address): it returns here when
    /// this replica is ready.
    #[arg(long, env = "OOOI_AGENT_HOME")]
    home: Option<Ipv4Addr>,
    /// The VLAN interface.
    #[arg(long, env = "OOOI_AGENT_INTERFACE", default_value = "net1")]
    interface: String,
    /// The component's readiness URL (200 = ready): oooi-dns
    /// http://$(POD_IP):9153/healthz, the proxy http://127.0.0.1:9445/ready.
    #[arg(long, env = "OOOI_AGENT_READY_URL")]
    ready_url: ReadyUrl,
    /// How often to ask --ready-url.
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    ready_interval: Duration,
    /// Misses in a row before the replica counts as not ready.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    ready_failures: u32,
    /// How long after a Lease last changed (as seen here) it may be taken.
    #[arg(long, default_value = "1400ms", value_parser = parse_duration)]
    lease_duration: Duration,
    /// How long a holder keeps an address it could not renew. Must be
    /// shorter than --lease-duration: the difference is the fencing margin.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    renew_deadline: Duration,
    /// How often Leases are renewed (holder) or read (others).
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    retry_period: Duration,
    /// How long the home replica must be ready before it asks for its
    /// address back.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    home_ready_for: Duration,
    /// Gratuitous ARPs sent when an address is taken.
    #[arg(long, default_value_t = 3)]
    announce_count: u32,
    /// Time between those.
    #[arg(long, default_value = "200ms", value_parser = parse_duration)]
    announce_spacing: Duration,
    /// While an address is held, one more gratuitous ARP this often.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    announce_every: Duration,
    /// Do not defend held addresses: by default the holder answers another
    /// host's claim to a held address with an announcement at once, and
    /// follows every request for one with an announcement to the
    /// requester, so a replacement pod that still has its static address
    /// cannot keep workers' ARP caches (docs/failover.md).
    #[arg(long)]
    no_defend: bool,
    /// Address of the HTTP server for /metrics and /healthz.
    #[arg(
        long,
        env = "OOOI_AGENT_METRICS_ADDR",
        default_value = "127.0.0.1:9466"
    )]
    metrics_addr: SocketAddr,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        // Colour only on a terminal: container logs are read as plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            error!(error = %e, "cannot start the runtime");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run_agent(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!(error = format!("{e:#}"), "oooi-addr-agent failed");
            ExitCode::FAILURE
        }
    }
}

fn settings(args: &Args) -> Result<Settings> {
    check_prefix(&args.lease_prefix).map_err(anyhow::Error::msg)?;
    let timing = Timing::new(
        args.lease_duration,
        args.renew_deadline,
        args.retry_period,
        args.home_ready_for,
    )?;
    let mut seen = std::collections::BTreeSet::new();
    for a in &args.addresses {
        if !seen.insert(a.addr()) {
            bail!("--address {a}: given twice");
        }
    }
    if let Some(home) = args.home
        && !seen.contains(&home)
    {
        bail!("--home {home}: not one of --address");
    }
    Ok(Settings {
        identity: args.identity.clone(),
        namespace: args.namespace.clone(),
        lease_prefix: args.lease_prefix.clone(),
        addresses: args.addresses.clone(),
        home: args.home,
        timing,
        announce: Announce {
            count: args.announce_count,
            spacing: args.announce_spacing,
            every: args.announce_every,
        },
        held: Held::default(),
    })
}

async fn run_agent(args: Args) -> Result<()> {
    let settings = settings(&args)?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let linux = LinuxPlane::open(&args.interface, settings.timing.renew_deadline)
        .with_context(|| format!("--interface {}", args.interface))?;
    let defence = (!args.no_defend)
        .then(|| ArpSocket::open(linux.link(), true))
        .transpose()
        .with_context(|| format!("--interface {}: ARP socket for the defence", args.interface))?;
    let plane: Arc<dyn Plane> = Arc::new(linux);
    let client = kube::Client::try_default()
        .await
        .context("Kubernetes client (in-cluster or KUBECONFIG)")?;
    let metrics = Metrics::new();
    let listener = tokio::net::TcpListener::bind(args.metrics_addr)
        .await
        .with_context(|| format!("--metrics-addr {}: cannot bind", args.metrics_addr))?;
    tokio::spawn(metrics::serve(listener, metrics.clone()));
    if let Some(socket) = defence {
        let (held, metrics) = (settings.held.clone(), metrics.clone());
        tokio::spawn(async move {
            if let Err(e) = defend::serve(socket, held, metrics).await {
                error!(error = %e, "the ARP defence stopped: held addresses are announced every --announce-every only");
            }
        });
    }
    let (ready_tx, ready_rx) = watch::channel(false);
    tokio::spawn(run::poll_ready(
        args.ready_url.clone(),
        args.ready_interval,
        args.ready_failures,
        ready_tx,
        metrics.clone(),
    ));
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            error!("cannot listen for SIGTERM/SIGINT");
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        info!("stopping: releasing every Lease");
        let _ = stop_tx.send(true);
    });
    info!(
        identity = %settings.identity,
        namespace = %settings.namespace,
        interface = %args.interface,
        addresses = ?settings.addresses,
        home = ?settings.home,
        lease_duration = ?settings.timing.lease_duration,
        renew_deadline = ?settings.timing.renew_deadline,
        retry_period = ?settings.timing.retry_period,
        metrics = %args.metrics_addr,
        "oooi-addr-agent starting"
    );
    run::run(settings, client, plane, ready_rx, stop_rx, metrics).await?;
    info!("stopped");
    Ok(())
}
