//! `oooi-dns`: serve split-horizon DNS from a config file, or check one.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use oooi_dns::config::Config;
use oooi_dns::metrics;
use oooi_dns::server::{Engine, serve};
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
    },
    /// Validate CONFIG and print what each view would answer.
    Check {
        /// Config file (YAML or JSON).
        config: PathBuf,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,hickory_server=warn")),
        )
        .init();
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
        } => {
            let (c, reloader) = Reloader::start(&config, Settings::default(), Config::parse)?;
            let engine = Arc::new(Engine::new(c));
            let (tx, rx) = tokio::sync::watch::channel(());
            let reloaded = engine.clone();
            let _watch = reloader.spawn(move |outcome| match outcome {
                Outcome::Accepted(c) => {
                    reloaded.replace(c);
                    tx.send_replace(());
                    metrics::count_reload("ok");
                }
                Outcome::Rejected(_) => metrics::count_reload("rejected"),
            });
            serve(engine, rx, metrics_addr).await
        }
    }
}
