//! `oooi-dns`: serve split-horizon DNS from a config file, or check one.

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use oooi_dns::config::Config;
use oooi_dns::server::{Engine, serve};

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
    /// `..data` symlink beside it) changes.
    Serve {
        /// Config file (YAML or JSON).
        #[arg(long, env = "OOOI_DNS_CONFIG")]
        config: PathBuf,
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
        Command::Serve { config } => {
            let c = Config::load(&config)?;
            let engine = Arc::new(Engine::new(c));
            let (tx, rx) = tokio::sync::watch::channel(());
            let _watcher = oooi_dns::reload::watch(&config, engine.clone(), tx)?;
            serve(engine, rx).await
        }
    }
}
