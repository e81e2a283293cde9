//! `oooi-dhcp`: serve DHCPv4 on the VLAN, check a config file, or list the
//! leases in a data directory.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Parser, Subcommand};
use oooi_dhcp::config::Config;
use oooi_dhcp::lease_store::{DECLINED_MAC, LeaseStore};
use oooi_dhcp::metrics::{ResultLabels, metrics, serve_health, serve_http};
use oooi_dhcp::peer::{self, Pair};
use oooi_dhcp::server::{self, Durability, Server};
use oooi_reload::{Outcome, Reloader, Settings};

/// DHCPv4 server for the oooi isolated VLAN.
///
/// Needs no capability: port 67 through the pod sysctl
/// `net.ipv4.ip_unprivileged_port_start=0` (or CAP_NET_BIND_SERVICE),
/// SO_BINDTODEVICE is unprivileged on Linux 5.7 and later, and a reply to a
/// client that has no address yet is broadcast (RFC 2131 §4.1).
#[derive(Parser)]
#[command(version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve DHCP, reloading CONFIG when it (or the Kubernetes `..data`
    /// symlink beside it) changes; a bad new file is rejected and the old
    /// config stays in force.
    Serve(ServeArgs),
    /// Validate CONFIG and print the pool and reservations.
    Check {
        /// Config file (YAML).
        config: PathBuf,
    },
    /// List the leases recorded in a data directory (read-only; safe beside
    /// a running server). With the server's config, the rows are the
    /// inventory API's (states, host names, client ids, last transaction)
    /// as far as the disk knows them: offers, releases and probe conflicts
    /// live in the running server's memory only.
    Leases {
        /// Directory of the lease log.
        #[arg(long, env = "OOOI_DHCP_DATA_DIR")]
        data_dir: PathBuf,
        /// The server's config file: rows as the inventory API builds them.
        #[arg(long)]
        config: Option<PathBuf>,
        /// `table` or `json` (the inventory API's rows; needs `--config`).
        #[arg(long, short = 'o', default_value = "table")]
        output: LeasesOutput,
    },
}

// The flags of `oooi-dhcp serve` (its help text is the variant's).
#[derive(clap::Args)]
struct ServeArgs {
    /// Config file (YAML).
    #[arg(long, env = "OOOI_DHCP_CONFIG")]
    config: PathBuf,
    /// Directory of the lease log (a PVC in the cluster).
    #[arg(long, env = "OOOI_DHCP_DATA_DIR")]
    data_dir: PathBuf,
    /// Address of the /metrics and /healthz endpoint. The default is
    /// loopback: 0.0.0.0 would expose it on the VLAN. In a pod, give the
    /// pod's own address.
    #[arg(long, env = "OOOI_DHCP_METRICS_ADDR", default_value = "127.0.0.1:9067")]
    metrics_addr: SocketAddr,
    /// Address (`ip:port`) of a listener serving `/healthz` alone, with
    /// a connection budget of its own: point readiness and liveness
    /// probes here, so that whatever holds the metrics port's
    /// connections cannot make the pod unready. Unset: no such
    /// listener (`/healthz` is still on the metrics endpoint). In a
    /// pod, give the pod's own address.
    #[arg(long, env = "OOOI_DHCP_HEALTH_ADDR")]
    health_addr: Option<SocketAddr>,
    /// When an ACK may leave: `fsync` (default) after an fdatasync
    /// covering its lease, so an ACKed lease survives kill -9 and power
    /// loss; `write` after the lease record was written to the log, so
    /// it survives kill -9 but not a node crash (Kea memfile's
    /// guarantee).
    #[arg(long, env = "OOOI_DHCP_DURABILITY", value_enum, default_value_t = Durability::Fsync)]
    durability: Durability,
    /// Address of the pair API, in place of the config's `peer.listen`.
    /// In a pod, give the pod's own address: the file cannot know it,
    /// and the wildcard would expose the API on the VLAN.
    #[arg(long, env = "OOOI_DHCP_PAIR_LISTEN")]
    pair_listen: Option<SocketAddr>,
    /// Addresses of the read-only lease inventory API (`/inventory/v1`,
    /// bearer token). Repeat the flag, or give a comma-separated list
    /// (also in the environment variable): in a pod, the pod's own
    /// address and 127.0.0.1 (for `kubectl port-forward`). None: not
    /// served.
    #[arg(long, env = "OOOI_DHCP_INVENTORY_LISTEN", value_delimiter = ',')]
    inventory_listen: Vec<SocketAddr>,
    /// File holding the inventory API's bearer token (at least 16
    /// characters; a mounted Secret). Required with
    /// `--inventory-listen`; read again when it changes.
    #[arg(long, env = "OOOI_DHCP_INVENTORY_TOKEN_FILE")]
    inventory_token_file: Option<PathBuf>,
}

fn check(path: &Path) -> anyhow::Result<()> {
    let c = Config::load(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    println!(
        "ok: subnet {} server {} pool {}-{} ({} addresses)",
        c.subnet,
        c.server_ip,
        c.range_start,
        c.range_end,
        c.pool_size()
    );
    for (mac, r) in &c.reservations {
        println!(
            "reservation {mac} {} {}",
            r.ip,
            r.hostname.as_deref().unwrap_or("-")
        );
    }
    for (mac, hostname) in &c.known_clients {
        println!("known {mac} {}", hostname.as_deref().unwrap_or("-"));
    }
    println!("unknown clients: {:?}", c.unknown_clients);
    Ok(())
}

/// The output of `oooi-dhcp leases`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LeasesOutput {
    Table,
    Json,
}

/// The inventory's rows of a data directory, under `config`: the log's
/// leases, the held-back addresses and the lease metadata file.
fn inventory_rows(dir: &Path, config: &Path) -> anyhow::Result<Vec<oooi_dhcp_inventory::LeaseRow>> {
    use oooi_dhcp::inventory::{meta::Meta, rows::View};
    use oooi_dhcp::leases::LeaseTable;
    let now = server::unix_now();
    let c = Config::load(config).map_err(|e| anyhow::anyhow!("{}: {e}", config.display()))?;
    let leases = LeaseStore::read_only(dir)
        .map_err(|e| anyhow::anyhow!("cannot read leases in {}: {e}", dir.display()))?;
    let mut table = LeaseTable::from_store(Arc::new(c), leases.iter());
    for h in oooi_dhcp::held_back::load(dir)? {
        if h.until > now {
            table.quarantine_lost(h.ip, h.suspected, h.until, now);
        }
    }
    let meta = Meta::load(dir);
    let view = View {
        table: &table,
        meta: &meta,
        now,
    };
    let mut rows: Vec<_> = view.rows().collect();
    rows.sort_by_key(|r| r.address);
    Ok(rows)
}

fn print_rows(rows: &[oooi_dhcp_inventory::LeaseRow], output: LeasesOutput) -> anyhow::Result<()> {
    if output == LeasesOutput::Json {
        println!("{}", serde_json::to_string_pretty(rows)?);
        return Ok(());
    }
    println!(
        "{:<16} {:<18} {:<12} {:<10} {:<8} {:<24} {:<16} {:<12} client_id",
        "ip", "mac", "expires", "state", "reserved", "hostname", "answered_by", "cltt"
    );
    for r in rows {
        let role = r.answered_by.map(|b| {
            serde_json::to_value(b)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        });
        println!(
            "{:<16} {:<18} {:<12} {:<10} {:<8} {:<24} {:<16} {:<12} {}",
            r.address,
            r.mac.as_deref().unwrap_or("-"),
            r.expires_unix,
            r.state.as_str(),
            r.reserved,
            r.hostname.as_deref().unwrap_or("-"),
            role.as_deref().unwrap_or("-"),
            r.cltt_unix
                .map_or_else(|| "-".to_string(), |t| t.to_string()),
            r.client_id.as_deref().unwrap_or("-"),
        );
    }
    Ok(())
}

fn list_leases(dir: &Path) -> anyhow::Result<()> {
    let now = server::unix_now();
    let leases = LeaseStore::read_only(dir)
        .map_err(|e| anyhow::anyhow!("cannot read leases in {}: {e}", dir.display()))?;
    println!("{:<16} {:<18} {:<12} state", "ip", "mac", "expires");
    for l in leases {
        let state = if l.mac == DECLINED_MAC {
            "declined"
        } else if l.expires_unix > now {
            "active"
        } else {
            "expired"
        };
        println!("{:<16} {:<18} {:<12} {state}", l.ip, l.mac, l.expires_unix);
    }
    Ok(())
}

impl ServeArgs {
    /// The inventory API's token file when the API is served, checked
    /// before anything starts.
    fn inventory_token(&self) -> anyhow::Result<Option<PathBuf>> {
        if self.inventory_listen.is_empty() {
            return Ok(None);
        }
        let Some(f) = &self.inventory_token_file else {
            anyhow::bail!(
                "--inventory-listen (OOOI_DHCP_INVENTORY_LISTEN) needs --inventory-token-file (OOOI_DHCP_INVENTORY_TOKEN_FILE)"
            );
        };
        oooi_dhcp::inventory::api::Token::load(f)
            .map_err(|e| anyhow::anyhow!("--inventory-token-file: {e}"))?;
        Ok(Some(f.clone()))
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let inventory_token = args.inventory_token()?;
    let ServeArgs {
        config,
        data_dir,
        metrics_addr,
        health_addr,
        durability,
        pair_listen,
        inventory_listen,
        ..
    } = args;
    let (c, reloader) = Reloader::start(&config, Settings::default(), Config::from_yaml)?;
    let (store, recovery) = LeaseStore::open(&data_dir)
        .map_err(|e| anyhow::anyhow!("cannot open lease store {}: {e}", data_dir.display()))?;
    server::report_recovery(&data_dir, &recovery, store.leases().len());
    let socket = server::open_socket(c.interface.as_deref(), server::SERVER_PORT)
        .map_err(|e| anyhow::anyhow!("cannot open UDP 0.0.0.0:67: {e}"))?;
    let (tx, rx) = std::sync::mpsc::channel();
    let _watch = reloader.spawn(move |outcome| {
        let result = match outcome {
            Outcome::Accepted(c) => {
                let _ = tx.send(c);
                "ok"
            }
            Outcome::Rejected(_) => "rejected",
        };
        metrics()
            .reloads
            .get_or_create(&ResultLabels {
                result: result.to_string(),
            })
            .inc();
    });
    let pair = match &c.peer {
        // A body of records holds at most the pool and reservations twice
        // over (a snapshot with room for ended leases).
        Some(p) => Some(Pair::new(
            p.clone(),
            (2 * (c.pool_size() + c.reservations.len())).max(4096),
        )?),
        None => None,
    };
    let api = pair.as_ref().map(|p| {
        (
            p.shared.clone(),
            pair_listen.unwrap_or(p.shared.peer.listen),
        )
    });
    let mut server = Server::new(socket, store, Arc::new(c), rx, durability, pair);
    // Before the hold-backs: a held-back address forgets what was known.
    server.keep_meta(&data_dir).map_err(|e| {
        anyhow::anyhow!("cannot keep lease metadata in {}: {e}", data_dir.display())
    })?;
    server.quarantine_lost(&recovery, &data_dir).map_err(|e| {
        anyhow::anyhow!(
            "cannot keep the held-back addresses in {}: {e}",
            data_dir.display()
        )
    })?;
    let inventory_api = match inventory_token {
        Some(token_file) => {
            let (shared, end) = oooi_dhcp::inventory::Inventory::new(server.refusals())?;
            server.serve_inventory(end);
            Some((shared, token_file))
        }
        None => None,
    };
    let inventory_addrs = inventory_listen;
    let inventory_api = async move {
        match inventory_api {
            Some((shared, token_file)) => {
                oooi_dhcp::inventory::api::serve(shared, &token_file, &inventory_addrs).await
            }
            None => std::future::pending().await,
        }
    };
    let dhcp = tokio::task::spawn_blocking(move || server.run());
    let pair_api = async move {
        match api {
            Some((shared, addr)) => peer::serve(shared, addr).await,
            None => std::future::pending().await,
        }
    };
    let health = async move {
        match health_addr {
            Some(addr) => serve_health(addr).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        r = dhcp => r?,
        r = serve_http(metrics_addr) => r,
        r = health => r,
        r = pair_api => r,
        r = inventory_api => r,
        r = terminated() => r,
    }
}

/// Waits for SIGTERM or SIGINT. Stopping then is as safe as a crash, which
/// the store is built for: an ACK leaves only after its lease is written
/// (and, with `--durability fsync`, synced), so nothing acknowledged is
/// lost and a request in flight is retried by its client. Without a
/// handler the server, PID 1 in its container, ignored SIGTERM and held its
/// pod in Terminating for the whole grace period.
async fn terminated() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let name = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    };
    tracing::info!(
        signal = name,
        "stopping: every acknowledged lease is already in the lease log"
    );
    Ok(())
}

#[tokio::main]
async fn main() {
    oooi_process::logs::Logs::new("info").init();
    let result = match Cli::parse().command {
        Command::Check { config } => check(&config),
        Command::Leases {
            data_dir,
            config,
            output,
        } => match (config, output) {
            (None, LeasesOutput::Table) => list_leases(&data_dir),
            (None, LeasesOutput::Json) => Err(anyhow::anyhow!(
                "-o json needs --config (the rows are the inventory API's)"
            )),
            (Some(config), output) => {
                inventory_rows(&data_dir, &config).and_then(|rows| print_rows(&rows, output))
            }
        },
        Command::Serve(args) => serve(args).await,
    };
    if let Err(e) = result {
        eprintln!("oooi-dhcp: {e}");
        std::process::exit(1);
    }
    // The decision loop runs on a blocking thread the runtime would wait
    // for: leave now.
    std::process::exit(0);
}
