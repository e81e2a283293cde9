//! `oooi-addr-agent`: floating VLAN addresses for DNS and proxy replicas.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Parser;
use ipnet::Ipv4Net;
use oooi_addr_agent::advert::{self, MAX_REPLICAS};
use oooi_addr_agent::arp::ArpSocket;
use oooi_addr_agent::defend::{self, Held};
use oooi_addr_agent::machine::Timing;
use oooi_addr_agent::metrics::{self, Metrics};
use oooi_addr_agent::plane::{LinuxPlane, Plane};
use oooi_addr_agent::run::{self, Announce, Settings};
use oooi_process::duration::parse as parse_duration;
use oooi_process::logs::Logs;
use oooi_process::ready::ReadyUrl;
use tokio::sync::{mpsc, watch};
use tracing::{error, info, warn};

/// Moves a component's VLAN addresses between its ready replicas.
///
/// Runs as its own container beside one DNS or proxy replica, in the pod's
/// network namespace. The component has one replica per address
/// (--address, in the same order for every replica); replica i's home is
/// address i (--home names it). Every --advert-interval each agent
/// broadcasts an advert on the VLAN interface (--interface; an Ethernet
/// frame of EtherType 0x88b5, no IP): its index, a random incarnation, a
/// sequence number, whether its component is ready, which addresses it
/// holds and which peers it hears. A peer not heard for --dead-after is
/// dead. From what it hears, every agent computes the owner of each
/// address with the same function: the home replica if it is ready and
/// hears and is heard; else a ready replica that already holds it; else
/// the next ready replica after the home, in address order. The owner adds
/// the address and announces it by gratuitous ARP; a former holder keeps
/// it until the new owner's advert says it holds it (at most --drain).
/// Nothing here uses the Kubernetes API: an API outage changes nothing.
///
/// Only a ready replica holds addresses: --ready-url is polled every
/// --ready-interval; not ready (--ready-failures misses in a row) hands
/// every address on. The home gets its address back once it has been ready
/// and heard both ways for --home-ready-for. A held address has a kernel
/// lifetime shorter than --dead-after, pushed out at every advert, so it
/// also leaves when the agent is killed or frozen.
///
/// The holder defends its addresses (RFC 5227): another host's claim to a
/// held address is answered by an announcement at once, and a request for
/// one by an announcement to the requester, within rate limits; --no-defend
/// turns this off. The holder also ends the established TCP connections its
/// predecessor had on a taken address (--no-reset turns this off): the
/// replicas share them in their adverts, and the new holder sends each
/// client a bare ACK from the address, which the client answers with an
/// ACK that the new holder's kernel resets.
///
/// SIGTERM or SIGINT: hand every address on, wait until each has a new
/// holder (at most --drain), remove them, exit 0.
///
/// Needs CAP_NET_ADMIN (addresses) and CAP_NET_RAW (adverts, gratuitous
/// ARP). No Kubernetes credentials.
#[derive(Debug, Parser)]
#[command(name = "oooi-addr-agent", version)]
struct Args {
    /// This replica's name, for logs: the pod name.
    #[arg(long, env = "POD_NAME")]
    identity: String,
    /// The pod's namespace, for logs.
    #[arg(long, env = "POD_NAMESPACE", default_value = "")]
    namespace: String,
    /// The component's group, e.g. <infra>-dns: only adverts of the same
    /// group count. Every replica of a component uses the same.
    #[arg(long, alias = "lease-prefix", env = "OOOI_AGENT_GROUP")]
    group: String,
    /// Every VLAN address of the component, as IP/prefix (repeat, or
    /// separate with commas), e.g. 192.0.2.3/24,192.0.2.6/24; replica i's
    /// home is the i-th. At most 64.
    #[arg(
        long = "address",
        env = "OOOI_AGENT_ADDRESSES",
        value_delimiter = ',',
        required = true
    )]
    addresses: Vec<Ipv4Net>,
    /// This replica's own address (one of --address): its index there is
    /// this replica's index.
    #[arg(long, env = "OOOI_AGENT_HOME")]
    home: Ipv4Addr,
    /// The VLAN interface.
    #[arg(long, env = "OOOI_AGENT_INTERFACE", default_value = "net1")]
    interface: String,
    /// The component's readiness URL (200 = ready): oooi-dns
    /// http://$(POD_IP):9154/healthz (its health listener), the proxy
    /// http://127.0.0.1:9446/ready.
    #[arg(long, env = "OOOI_AGENT_READY_URL")]
    ready_url: ReadyUrl,
    /// How often to ask --ready-url.
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    ready_interval: Duration,
    /// Misses in a row before the replica counts as not ready.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    ready_failures: u32,
    /// Time between two adverts.
    #[arg(long, default_value = "200ms", value_parser = parse_duration)]
    advert_interval: Duration,
    /// A peer not heard for this long is dead; at least 1 s plus
    /// --advert-interval (a held address's kernel lifetime is the whole
    /// seconds below the difference).
    #[arg(long, default_value = "1200ms", value_parser = parse_duration)]
    dead_after: Duration,
    /// How long the home replica must be ready and heard before its
    /// address comes back to it from another holder.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    home_ready_for: Duration,
    /// How long a former holder keeps an address at most while waiting for
    /// the new owner's advert.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    drain: Duration,
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
    /// Do not share the established connections to held addresses nor end
    /// a lost holder's connections on a taken address (by default the new
    /// holder sends each of their clients a bare ACK, which draws the
    /// reset that ends a connection whose client only listens).
    #[arg(long)]
    no_reset: bool,
    /// Address of the HTTP server for /metrics and /healthz.
    #[arg(
        long,
        env = "OOOI_AGENT_METRICS_ADDR",
        default_value = "127.0.0.1:9466"
    )]
    metrics_addr: SocketAddr,
    /// Address of a listener serving `/healthz` alone, with a connection
    /// budget of its own: point the liveness probe here, so that whatever
    /// holds the metrics port's connections cannot have the agent
    /// restarted. Unset: no such listener (`/healthz` is still on the
    /// metrics endpoint). In a pod, give the pod's own address.
    #[arg(long, env = "OOOI_AGENT_HEALTH_ADDR")]
    health_addr: Option<SocketAddr>,
}

fn main() -> ExitCode {
    Logs::new("info").init();
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
    let timing = Timing::new(
        args.advert_interval,
        args.dead_after,
        args.home_ready_for,
        args.drain,
    )?;
    let mut seen = std::collections::BTreeSet::new();
    for a in &args.addresses {
        if !seen.insert(a.addr()) {
            bail!("--address {a}: given twice");
        }
    }
    if args.addresses.len() > MAX_REPLICAS {
        bail!(
            "--address: {} addresses, at most {MAX_REPLICAS}",
            args.addresses.len()
        );
    }
    let Some(me) = args.addresses.iter().position(|a| a.addr() == args.home) else {
        bail!("--home {}: not one of --address", args.home);
    };
    if args.group.is_empty() {
        bail!("--group: empty");
    }
    Ok(Settings {
        identity: args.identity.clone(),
        group: args.group.clone(),
        addresses: args.addresses.clone(),
        me,
        timing,
        announce: Announce {
            count: args.announce_count,
            spacing: args.announce_spacing,
            every: args.announce_every,
        },
        held: Held::default(),
        reset: !args.no_reset,
    })
}

/// Reads advert frames from `socket` into `tx` until either ends.
async fn receive_adverts(socket: ArpSocket, tx: mpsc::Sender<run::Frame>) -> std::io::Result<()> {
    // SAFETY: the ArpSocket owns its fd for its whole life and always
    // returns that same fd; the AsyncFd owns the socket.
    let socket = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(socket, tokio::io::Interest::READABLE)
    }?;
    let mut buf = [0u8; 1600];
    let mut failing = false;
    loop {
        let mut guard = socket.readable().await?;
        match guard.try_io(|s| s.get_ref().recv_from(&mut buf)) {
            Err(_would_block) => continue,
            Ok(Err(e)) => {
                // The link went down (ENETDOWN) or flapped: the socket
                // works again once it is up. Silence meanwhile is what the
                // machine must see.
                if !failing {
                    warn!(error = %e, "receiving adverts failed; retrying");
                    failing = true;
                }
                drop(guard);
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Ok(Ok(None)) => failing = false,
            Ok(Ok(Some((n, src)))) => {
                failing = false;
                // A full queue drops the frame: the machine is behind, and
                // the next advert says the same again.
                if let Err(mpsc::error::TrySendError::Closed(_)) =
                    tx.try_send((buf[..n].to_vec(), src))
                {
                    return Ok(());
                }
            }
        }
    }
}

async fn run_agent(args: Args) -> Result<()> {
    let settings = settings(&args)?;
    let linux = LinuxPlane::open(&args.interface, settings.timing.lifetime)
        .with_context(|| format!("--interface {}", args.interface))?;
    let defence = (!args.no_defend)
        .then(|| ArpSocket::open(linux.link(), true))
        .transpose()
        .with_context(|| format!("--interface {}: ARP socket for the defence", args.interface))?;
    let advert_rx = ArpSocket::open_for(linux.link(), advert::ETHERTYPE, true)
        .with_context(|| format!("--interface {}: advert socket", args.interface))?;
    let advert_tx = ArpSocket::open_for(linux.link(), advert::ETHERTYPE, false)
        .with_context(|| format!("--interface {}: advert socket", args.interface))?;
    let plane: Arc<dyn Plane> = Arc::new(linux);
    let metrics = Metrics::new();
    let listener = tokio::net::TcpListener::bind(args.metrics_addr)
        .await
        .with_context(|| format!("--metrics-addr {}: cannot bind", args.metrics_addr))?;
    tokio::spawn(metrics::serve(listener, metrics.clone()));
    if let Some(addr) = args.health_addr {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("--health-addr {addr}: cannot bind"))?;
        tokio::spawn(metrics::serve_health(listener));
    }
    if let Some(socket) = defence {
        let (held, metrics) = (settings.held.clone(), metrics.clone());
        tokio::spawn(async move {
            if let Err(e) = defend::serve(socket, held, metrics).await {
                error!(error = %e, "the ARP defence stopped: held addresses are announced every --announce-every only");
            }
        });
    }
    let (frames_tx, frames_rx) = mpsc::channel(256);
    tokio::spawn(async move {
        if let Err(e) = receive_adverts(advert_rx, frames_tx).await {
            error!(error = %e, "receiving adverts failed");
        }
    });
    let send: run::SendAdvert = Box::new(move |p| advert_tx.send(p, None));
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
        info!("stopping: handing every address on");
        let _ = stop_tx.send(true);
    });
    info!(
        identity = %settings.identity,
        namespace = %args.namespace,
        group = %settings.group,
        interface = %args.interface,
        addresses = ?settings.addresses,
        index = settings.me,
        advert_interval = ?settings.timing.interval,
        dead_after = ?settings.timing.dead_after,
        metrics = %args.metrics_addr,
        health = ?args.health_addr,
        "oooi-addr-agent starting"
    );
    run::run(
        settings, plane, frames_rx, send, None, ready_rx, stop_rx, metrics,
    )
    .await?;
    info!("stopped");
    Ok(())
}
