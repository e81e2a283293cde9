//! `oooi-dns`: serve split-horizon DNS from a config file, or check one.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use oooi_dns::config::Config;
use oooi_dns::engine::Engine;
use oooi_dns::metrics;
use oooi_dns::server::{HttpAddrs, serve};
use oooi_reload::{Outcome, Reloader, Settings};

/// Split-horizon DNS server for oooi.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve DNS from CONFIG, reloading it when the file (or the Kubernetes
    /// `..data` symlink beside it) changes; a bad new file is rejected and
    /// the old config stays in force.
    Serve {
        /// Config file (YAML or JSON).
        #[arg(long, env = "OOOI_DNS_CONFIG")]
        config: PathBuf,
        /// Address (`ip:port`) of the /metrics and /healthz endpoint; wins
        /// over the config's `http`. Neither set: no endpoint. Bind it to
        /// the pod's own address (or 127.0.0.1), never to 0.0.0.0, which
        /// would expose it on the VLAN.
        #[arg(long, env = "OOOI_DNS_METRICS_ADDR")]
        metrics_addr: Option<SocketAddr>,
        /// Address (`ip:port`) of a listener serving `/healthz` alone, with
        /// a connection budget of its own: point readiness and liveness
        /// probes (and the address agent) here, so that whatever holds the
        /// metrics port's connections cannot make the pod unready. Unset:
        /// no such listener (`/healthz` is still on the metrics endpoint).
        /// Bind it to the pod's own address too.
        #[arg(long, env = "OOOI_DNS_HEALTH_ADDR")]
        health_addr: Option<SocketAddr>,
        /// The pod's own address: listeners written `$(POD_IP):port` in the
        /// config bind it (and nothing else). In a pod, the `POD_IP`
        /// variable from the downward API (`status.podIP`).
        #[arg(long, env = "POD_IP")]
        pod_ip: Option<IpAddr>,
        /// After SIGTERM or SIGINT, keep answering DNS for this many seconds
        /// while `/healthz` answers 503 `draining`, then exit 0 (a second
        /// signal exits at once). In a pod this is the hand-over window: the
        /// address agent sees the replica is not ready and hands its VLAN
        /// addresses to a live replica (about 2 s with its defaults) while
        /// this one still answers, and the pod leaves its Services. Keep it
        /// below the pod's terminationGracePeriodSeconds. 0: exit at once.
        #[arg(long, env = "OOOI_DNS_DRAIN_SECONDS", default_value_t = 5)]
        drain_seconds: u64,
    },
    /// Validate CONFIG and print what each view would answer.
    Check {
        /// Config file (YAML or JSON).
        config: PathBuf,
    },
}

/// The system resolvers `upstreams.resolv_conf` refers to.
const RESOLV_CONF: &str = "/etc/resolv.conf";

/// Parses a config, binds its `$(POD_IP)` listeners to `pod_ip` (an error
/// when they are there and `pod_ip` is not) and, when it asks for them,
/// adds the resolvers of this process's own resolv.conf (read at every load,
/// so a reload sees changes).
fn parse(text: &str, pod_ip: Option<IpAddr>) -> Result<Config, oooi_dns::config::ConfigError> {
    let mut c = Config::parse(text)?;
    if let Some(ip) = pod_ip {
        c = c.with_pod_ip(ip);
    }
    c.unbound_pod_ip()?;
    if !c.upstreams.resolv_conf {
        return Ok(c);
    }
    match std::fs::read_to_string(RESOLV_CONF) {
        Ok(system) => Ok(c.with_resolv_conf(&system)),
        Err(e) => {
            tracing::warn!(path = RESOLV_CONF, error = %e, "upstreams.resolv_conf: cannot read the system resolvers");
            Ok(c)
        }
    }
}

/// An empty upstream list makes every forwarded name SERVFAIL: say so.
fn warn_without_upstreams(c: &Config) {
    if c.upstreams.servers.is_empty() {
        tracing::warn!(
            "no upstream resolvers: every name no view owns is answered SERVFAIL (list upstreams.servers, or set upstreams.resolv_conf)"
        );
    }
}

/// Waits for SIGTERM or SIGINT, then drains: `/healthz` says `draining`
/// while the listeners keep answering for `period` (or until a second
/// signal). Returns when the server should exit.
async fn drain(period: Duration) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    metrics::set_health(metrics::Health::Draining);
    tracing::info!(
        seconds = period.as_secs(),
        "draining: /healthz answers 503 so the address agent hands the VLAN addresses on; still answering DNS until the period ends"
    );
    tokio::select! {
        _ = tokio::time::sleep(period) => tracing::info!("drained, exiting"),
        _ = term.recv() => tracing::info!("second signal, exiting now"),
        _ = int.recv() => tracing::info!("second signal, exiting now"),
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    oooi_process::logs::Logs::new("info,hickory_server=warn").init();
    match Cli::parse().command {
        Command::Check { config } => match Config::load(&config) {
            Ok(c) => {
                print!("{}", oooi_dns::check::report(&c));
                Ok(())
            }
            Err(e) => {
                eprintln!("{}: {e}", config.display());
                std::process::exit(1);
            }
        },
        Command::Serve {
            config,
            metrics_addr,
            health_addr,
            pod_ip,
            drain_seconds,
        } => {
            let (c, reloader) =
                Reloader::start(&config, Settings::default(), move |text: &str| {
                    parse(text, pod_ip)
                })?;
            warn_without_upstreams(&c);
            let engine = Arc::new(Engine::new(c));
            let (tx, rx) = tokio::sync::watch::channel(());
            let reloaded = engine.clone();
            let _watch = reloader.spawn(move |outcome| match outcome {
                Outcome::Accepted(c) => {
                    warn_without_upstreams(&c);
                    reloaded.replace(c);
                    tx.send_replace(());
                    metrics::count_reload("ok");
                }
                Outcome::Rejected(_) => metrics::count_reload("rejected"),
            });
            tokio::select! {
                r = serve(engine, rx, HttpAddrs { metrics: metrics_addr, health: health_addr }) => r,
                r = drain(Duration::from_secs(drain_seconds)) => r,
            }
        }
    }
}
