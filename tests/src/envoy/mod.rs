//! A real Envoy with the real filter: where the built module is, how Envoy
//! is started ([`EnvoyOptions`]), and the running [`Envoy`] a test reads
//! stats from, pushes tables to and rolls a new module out to.

mod mount;
mod options;
mod process;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

pub use mount::MountFiles;
pub use options::{DRAIN_TIME_S, EnvoyOptions, IMAGE_FILTER_PATH, IMAGE_GATE_PATH};

use crate::config_map::ConfigMapDir;
use crate::http::http_blocking;
use mount::config_map_files;
use process::EnvoyProcess;

/// Path of the built filter module: `OOOI_FILTER_WASM`, else the default
/// output of `tools/dev` (`target/wasm32-wasip1/wasm/oooi_sni_router.wasm`).
pub fn filter_wasm() -> Result<PathBuf> {
    let path = match std::env::var_os("OOOI_FILTER_WASM") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../target/wasm32-wasip1/wasm/oooi_sni_router.wasm"),
    };
    if !path.is_file() {
        bail!(
            "filter module {} not built: run `tools/dev test` (it builds the module and sets OOOI_FILTER_WASM)",
            path.display()
        );
    }
    Ok(path)
}

/// A running Envoy, killed on drop. Its config lives in a [`ConfigMapDir`]
/// Envoy watches, rendered by `oooi-envoy`.
pub struct Envoy {
    child: EnvoyProcess,
    /// Scratch directory holding the config mount and the log.
    pub dir: tempfile::TempDir,
    /// The watched config mount (bootstrap, LDS, CDS, ECDS files, module).
    pub config_map: ConfigMapDir,
    /// Admin interface (loopback).
    pub admin: SocketAddr,
    /// Table API listener (loopback).
    pub api: SocketAddr,
    /// The config as last published.
    pub config: oooi_envoy::ProxyConfig,
    /// The module as last published.
    pub module: Vec<u8>,
    /// Envoy's stderr log.
    pub log: PathBuf,
    /// [`EnvoyOptions::extra_listeners`], kept in LDS on every publish.
    extra_listeners: Vec<serde_json::Value>,
}

/// The bearer token the harness configures.
pub const PUSH_TOKEN: &str = "lab-push-token-0123456789";

impl Envoy {
    /// Starts Envoy with [`EnvoyOptions::new`] defaults and `concurrency` workers.
    pub fn start(listen: IpAddr, tls_ports: &[u16], concurrency: u32) -> Result<Envoy> {
        EnvoyOptions {
            concurrency,
            ..EnvoyOptions::new(listen, tls_ports)
        }
        .start()
    }

    /// Publishes a new version of the config mount carrying `module` (under
    /// its versioned name) and the config re-rendered for it, as a rollout
    /// of a new filter build does. Returns as soon as the `..data` swap is
    /// done; Envoy picks it up asynchronously.
    pub fn swap_module(&mut self, module: &[u8]) -> Result<()> {
        let (config, files) = config_map_files(
            self.config.clone(),
            self.config_map.path(),
            module,
            &self.extra_listeners,
        )?;
        self.config_map.publish(&files)?;
        self.config = config;
        self.module = module.to_vec();
        Ok(())
    }

    fn wait_ready(&mut self, listeners: usize) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.with(|c| c.try_wait())? {
                bail!("envoy exited with {status}: {}", self.log_text());
            }
            if let Ok((200, body)) = http_blocking(self.admin, "GET", "/listeners", &[], b"")
                && body.lines().filter(|l| !l.trim().is_empty()).count() >= listeners
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("envoy not ready after 30 s: {}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Whether the Envoy process is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.with(|c| c.try_wait()), Ok(None))
    }

    /// How Envoy exited, if it did.
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child.with(|c| c.try_wait()).ok().flatten()
    }

    /// Envoy's process id (to show it did not restart).
    pub fn pid(&self) -> u32 {
        self.child.with(|c| c.id())
    }

    /// Envoy's resident memory (`VmRSS` of `/proc/<pid>/status`), in bytes;
    /// `None` once the process is gone.
    pub fn rss_bytes(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .trim()
            .strip_suffix("kB")?
            .trim()
            .parse()
            .ok()?;
        Some(kib * 1024)
    }

    /// Envoy's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A counter or gauge from the admin `/stats` endpoint.
    pub fn stat(&self, name: &str) -> Option<u64> {
        self.stats(name)
            .into_iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
    }

    /// Every numeric stat whose name contains `filter`.
    pub fn stats(&self, filter: &str) -> Vec<(String, u64)> {
        let Ok((_, body)) = http_blocking(self.admin, "GET", "/stats", &[], b"") else {
            return Vec::new();
        };
        body.lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(": ")?;
                (k.contains(filter))
                    .then(|| Some((k.to_owned(), v.trim().parse().ok()?)))
                    .flatten()
            })
            .collect()
    }

    /// How many connections the filter build `build` has seen (its
    /// `oooi_sni_router_connections_build_<id>` counter).
    pub fn build_connections(&self, build: &str) -> u64 {
        let id: String = build
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        self.stat(&format!(
            "wasmcustom.oooi_sni_router_connections_build_{id}"
        ))
        .unwrap_or(0)
    }

    /// `PUT /v1/routes` with the harness token.
    pub fn push(&self, body: &[u8]) -> Result<(u16, String)> {
        let auth = format!("Bearer {PUSH_TOKEN}");
        http_blocking(
            self.api,
            "PUT",
            "/v1/routes",
            &[("authorization", &auth)],
            body,
        )
    }

    /// `PUT /v1/routes` of a table, failing unless Envoy answered 200.
    pub fn push_table(&self, table: &oooi_routes::RouteTable) -> Result<()> {
        let (status, body) = self.push(&table.to_json())?;
        if status != 200 {
            bail!("push refused with {status}: {body}");
        }
        Ok(())
    }
}
