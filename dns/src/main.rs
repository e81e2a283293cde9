//! `oooi-dns`: serve split-horizon DNS from a config file, or check one.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use clap::{Parser, Subcommand};
use notify::{RecursiveMode, Watcher};
use oooi_dns::config::Config;
use oooi_dns::handler::{SharedConfig, serve};

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

fn print_config(c: &Config) {
    for v in &c.views {
        println!(
            "view {} listen {:?} subnets {:?}",
            v.name, v.listen, v.source_subnets
        );
        for z in &v.zones {
            println!("  zone {}", z.origin);
            for (n, r) in &z.records {
                println!("    {n} A {:?} AAAA {:?} ttl {}", r.a, r.aaaa, r.ttl);
            }
        }
        for (n, r) in &v.hosts {
            println!("  host {n} A {:?} AAAA {:?} ttl {}", r.a, r.aaaa, r.ttl);
        }
    }
    println!("upstreams {:?}", c.upstreams.servers);
}

fn reload_metric(result: &str) {
    oooi_dns::metrics::metrics()
        .reloads
        .get_or_create(&oooi_dns::metrics::ReloadLabels {
            result: result.to_string(),
        })
        .inc();
}

/// Watches the directory (not the file: a `..data` swap is a rename that a
/// file watch misses) and reloads, keeping the last good config on error.
fn watch(path: &Path, shared: SharedConfig) -> anyhow::Result<notify::RecommendedWatcher> {
    let file = path.to_path_buf();
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let mut last = std::fs::read(&file).unwrap_or_default();
    let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        if ev.is_err() {
            return;
        }
        let Ok(now) = std::fs::read(&file) else {
            return;
        };
        if now == last {
            return;
        }
        last = now;
        match Config::load(&file) {
            Ok(c) => {
                if let Ok(mut g) = shared.write() {
                    *g = Arc::new(c);
                }
                reload_metric("ok");
                tracing::info!(path = %file.display(), "config reloaded");
            }
            Err(e) => {
                reload_metric("rejected");
                tracing::error!(path = %file.display(), error = %e, "config rejected, keeping the last good one");
            }
        }
    })?;
    watcher.watch(&dir, RecursiveMode::NonRecursive)?;
    Ok(watcher)
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
                print_config(&c);
                Ok(())
            }
            Err(e) => {
                eprintln!("{}: {e}", config.display());
                std::process::exit(1);
            }
        },
        Command::Serve { config } => {
            let c = Config::load(&config)?;
            let shared: SharedConfig = Arc::new(RwLock::new(Arc::new(c)));
            let _watcher = watch(&config, shared.clone())?;
            serve(shared).await
        }
    }
}
