//! Data-path benchmark: Envoy's native SNI routing (`filter_chain_match` +
//! `tcp_proxy`) against the oooi wasm filter with 10 and with 10,000 routes,
//! with an empty proxy-wasm filter as the floor, all in one Envoy with the
//! same backends; plus the time from a 10,000-route PUT to its first routed
//! connection and from a module swap to the first connection on the new
//! build. Run with `tools/dev bench datapath` (options after `--`).
//!
//! Paths, each a listener of the same Envoy:
//! - `direct`: no proxy, the client connects to the backend (reference);
//! - `native`: `tls_inspector`, one `filter_chain_match` chain per name,
//!   `tcp_proxy` to the name's static cluster (`oooi_envoy::NativeSniListener`);
//! - `empty wasm`: `tls_inspector`, a proxy-wasm network filter that does
//!   nothing (WAT in [`EMPTY_FILTER_WAT`], its own VM, v8), `tcp_proxy` to
//!   one fixed cluster; every connection asks for a name that cluster's
//!   backend serves. What any proxy-wasm network filter costs in this Envoy:
//!   the VM calls, no host calls;
//! - `oooi wasm`: the listener `oooi-envoy` renders for the module that
//!   `OOOI_FILTER_WASM` names, routing by the pushed table. Its routes name
//!   the static clusters by default; `--upstreams address` and `--upstreams
//!   same-port` name the backends' addresses instead, as the controller does,
//!   through the dynamic forward proxy (three filter-state calls per
//!   connection, or two when the upstream port is the listener's).
//!
//! Two connection kinds, both new TLS connections as the proxy sees them:
//! - `hello`: the client sends a real ClientHello (made by rustls) and the
//!   backend answers with its name as soon as the ClientHello arrives. No
//!   crypto on either end, so the numbers show the proxy's own cost.
//! - `tls`: a full TLS 1.3 handshake with a rustls backend, then its name.
//!
//! Every connection checks which backend answered. Per kind and table size:
//! - connection rate: `--parallel` closed-loop clients for `--seconds` per
//!   path, paths interleaved within each of `--rounds` rounds (best round
//!   reported), and Envoy's CPU time per connection (least over rounds);
//! - latency (connect to first answer byte): one open-loop schedule at a fixed
//!   offered rate, `--load-fractions` of native's best (default 10 %), in
//!   which consecutive connections cycle through direct, native, empty wasm
//!   and oooi wasm, so every path sees the same machine noise and, at low
//!   load, no queueing. `--samples` connections per path and round (fewer
//!   when the phase would outlast `--phase-seconds`; the report says how
//!   many), over `--rounds` rounds; p50/p90/p99/p99.9 per path over all
//!   rounds, and the p99 added over native per round, whose median the
//!   summary shows.
//!
//! Envoy runs `--workers` worker(s) pinned to `--envoy-cpus`, the clients and
//! backends on `--client-cpus`. Traffic stays on loopback. The run ends with
//! one summary table and the target verdict (oooi wasm >= 90 % of native's
//! rate, p99 added <= 100 us; the empty filter is the p99 control: its worst
//! round sets the noise, within which p99 is reported as unresolved). A
//! default run takes about 3 minutes.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use oooi_envoy::{NativeSniListener, StaticCluster};
use oooi_routes::{Cidr, Route, RouteMatch, RouteTable, Upstream, build_id};
use oooi_tests::{Backend, Envoy, EnvoyOptions, filter_wasm, free_port, tls_probe};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

#[derive(Parser, Debug)]
#[command(
    about = "Benchmark native SNI routing, an empty proxy-wasm filter and the oooi wasm filter in one Envoy (loopback only)",
    after_help = "A default run (both kinds, 10 and 10,000 routes, 3 rounds, one load fraction) takes about 3 minutes: per kind and table size 4 paths x 3 rounds x --seconds of rate runs, then at most --phase-seconds of latency per load fraction."
)]
struct Args {
    /// Seconds per closed-loop rate measurement (per path and round).
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Concurrent clients during rate measurements.
    #[arg(long, default_value_t = 8)]
    parallel: usize,
    /// Latency connections per path and round in the interleaved open-loop
    /// run (lowered when the run would exceed --phase-seconds).
    #[arg(long, default_value_t = 2000)]
    samples: usize,
    /// Offered rate(s) of the interleaved latency run, as fractions of
    /// native's best connection rate; a comma-separated list runs one
    /// latency phase per fraction (e.g. 0.1,0.5). Also --load-fraction.
    #[arg(
        long,
        alias = "load-fraction",
        value_delimiter = ',',
        default_value = "0.1"
    )]
    load_fractions: Vec<f64>,
    /// Upper bound on one latency phase (all rounds of one load fraction), in
    /// seconds: at a low offered rate the samples per round are cut to fit.
    #[arg(long, default_value_t = 20.0)]
    phase_seconds: f64,
    /// Rounds of the rate and of the latency measurements.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Envoy worker threads.
    #[arg(long, default_value_t = 1)]
    workers: u32,
    /// CPUs for Envoy (taskset list); empty to leave it unpinned.
    #[arg(long, default_value = "0")]
    envoy_cpus: String,
    /// CPUs for this process (clients and backends); empty to leave it unpinned.
    #[arg(long, default_value = "1")]
    client_cpus: String,
    /// Connection kinds to run: hello, tls or both.
    #[arg(long, default_value = "both")]
    kinds: String,
    /// Envoy's log level.
    #[arg(long, default_value = "error")]
    envoy_log_level: String,
    /// Routes in the large table.
    #[arg(long, default_value_t = 10_000)]
    large: usize,
    /// How the oooi table names its upstreams: `cluster` (a static Envoy
    /// cluster: two filter-state calls per connection), `address` (host and
    /// port through the dynamic forward proxy, as the controller writes them,
    /// to a port other than the listener's, like oauth 443 -> 6443: three
    /// calls) or `same-port` (an address on the listener's own port, like
    /// api 6443 -> 6443 and the apps VIP: two calls; the backends then listen
    /// on 127.0.0.2-7 at the oooi listener's port number).
    #[arg(long, value_enum, default_value_t = Upstreams::Cluster)]
    upstreams: Upstreams,
}

const HELLO_BACKENDS: usize = 4;
const TLS_BACKENDS: usize = 2;
/// Fewest latency connections per path and round, whatever --phase-seconds.
const MIN_SAMPLES: usize = 50;

/// The floor: a proxy-wasm (ABI 0.2.1) network filter that does nothing.
/// Every callback returns at once (new connection and downstream data:
/// Continue; VM start and configure: success) and it calls no host
/// function. It exports only the callbacks a filter needs to see a
/// connection, as the oooi module does after `oooi-filter-finish`, so that
/// Envoy makes the same kind of VM calls per connection. The allocator is a
/// bump pointer: Envoy only allocates in a module for data the module asks
/// for, and this one asks for none.
const EMPTY_FILTER_WAT: &str = r#"
(module
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 1024))
  (func (export "proxy_abi_version_0_2_1"))
  (func (export "proxy_on_memory_allocate") (param $size i32) (result i32)
    (local $ptr i32)
    (local $end i32)
    (if (i32.gt_u (local.get $size) (i32.const 0x10000000))
      (then (return (i32.const 0))))
    (local.set $ptr (global.get $heap))
    (local.set $end
      (i32.and (i32.add (i32.add (local.get $ptr) (local.get $size)) (i32.const 7))
               (i32.const -8)))
    (if (i32.gt_u (local.get $end) (i32.shl (memory.size) (i32.const 16)))
      (then
        (if (i32.eq
              (memory.grow
                (i32.shr_u
                  (i32.add (i32.sub (local.get $end) (i32.shl (memory.size) (i32.const 16)))
                           (i32.const 65535))
                  (i32.const 16)))
              (i32.const -1))
          (then (return (i32.const 0))))))
    (global.set $heap (local.get $end))
    (local.get $ptr))
  (func (export "proxy_on_context_create") (param i32 i32))
  (func (export "proxy_on_vm_start") (param i32 i32) (result i32) (i32.const 1))
  (func (export "proxy_on_configure") (param i32 i32) (result i32) (i32.const 1))
  (func (export "proxy_on_new_connection") (param i32) (result i32) (i32.const 0))
  (func (export "proxy_on_downstream_data") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "proxy_on_delete") (param i32))
)
"#;

/// The empty filter's VM id: a VM of its own, apart from oooi's.
const EMPTY_VM_ID: &str = "bench_empty";

/// A listener for the floor path: `tls_inspector`, the empty filter (inline,
/// code from `module`), `tcp_proxy` to `cluster`.
fn empty_wasm_listener(
    name: &str,
    addr: SocketAddr,
    module: &std::path::Path,
    cluster: &str,
) -> Value {
    json!({
        "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
        "name": name,
        "address": {"socket_address": {"address": addr.ip().to_string(), "port_value": addr.port()}},
        "listener_filters": [{
            "name": "envoy.filters.listener.tls_inspector",
            "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector"},
        }],
        "listener_filters_timeout": "2s",
        "filter_chains": [{"filters": [
            {
                "name": "envoy.filters.network.wasm",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.network.wasm.v3.Wasm",
                    "config": {
                        "name": EMPTY_VM_ID,
                        "root_id": EMPTY_VM_ID,
                        "vm_config": {
                            "vm_id": EMPTY_VM_ID,
                            "runtime": "envoy.wasm.runtime.v8",
                            "code": {"local": {"filename": module.display().to_string()}},
                        },
                        "configuration": {
                            "@type": "type.googleapis.com/google.protobuf.StringValue",
                            "value": "{}",
                        },
                    },
                },
            },
            {
                "name": "envoy.filters.network.tcp_proxy",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
                    "stat_prefix": name,
                    "cluster": cluster,
                },
            },
        ]}],
    })
}

/// A name the client asks for, and the backend that must answer.
#[derive(Clone)]
struct Target {
    sni: String,
    backend: String,
    /// The static cluster of that backend.
    cluster: String,
    direct: SocketAddr,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Kind {
    Hello,
    Tls,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Hello => "hello",
            Kind::Tls => "tls",
        }
    }
}

/// One measured path.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Path {
    Direct,
    Native,
    EmptyWasm,
    OooiWasm,
}

/// Every path, in report order.
const PATHS: [Path; 4] = [Path::Direct, Path::Native, Path::EmptyWasm, Path::OooiWasm];

impl Path {
    fn name(self) -> &'static str {
        match self {
            Path::Direct => "direct (no proxy)",
            Path::Native => "envoy native SNI",
            Path::EmptyWasm => "envoy + empty wasm",
            Path::OooiWasm => "envoy + oooi wasm",
        }
    }

    fn short(self) -> &'static str {
        match self {
            Path::Direct => "direct",
            Path::Native => "native",
            Path::EmptyWasm => "empty wasm",
            Path::OooiWasm => "oooi wasm",
        }
    }
}

/// How the oooi table names its upstreams (see `--upstreams`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Upstreams {
    Cluster,
    Address,
    SamePort,
}

/// Where each proxied path listens.
struct Listeners {
    native: SocketAddr,
    oooi: SocketAddr,
    /// The floor listener of each kind; its fixed cluster is the cluster of
    /// that kind's first name.
    empty_hello: SocketAddr,
    empty_tls: SocketAddr,
}

/// A backend that answers `backend=<name>\n` once the first TLS record (the
/// ClientHello) has arrived, without doing any TLS itself.
async fn hello_backend(name: String, bind: SocketAddr) -> Result<SocketAddr> {
    let listener = TcpListener::bind(bind).await?;
    let addr = listener.local_addr()?;
    let banner = format!("backend={name}\n").into_bytes();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                continue;
            };
            let banner = banner.clone();
            tokio::spawn(async move {
                let mut header = [0u8; 5];
                if s.read_exact(&mut header).await.is_err() || header[0] != 0x16 {
                    return;
                }
                let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
                let mut body = vec![0u8; len];
                if s.read_exact(&mut body).await.is_err() {
                    return;
                }
                if s.write_all(&banner).await.is_err() {
                    return;
                }
                let mut rest = [0u8; 256];
                while let Ok(n) = s.read(&mut rest).await {
                    if n == 0 {
                        break;
                    }
                }
                // Answer Envoy's close with a reset: its upstream socket then
                // ends without TIME_WAIT, so tens of thousands of them do not
                // pile up on Envoy's source ports over a run (the clients
                // reset their side for the same reason).
                let _ = s.set_zero_linger();
            });
        }
    });
    Ok(addr)
}

/// The ClientHello rustls sends for `sni`.
fn client_hello(sni: &str) -> Result<Vec<u8>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.roots.clear();
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(sni.to_owned())?;
    let mut conn = rustls::ClientConnection::new(Arc::new(cfg), name)?;
    let mut out = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut out)?;
    }
    Ok(out)
}

/// Client source addresses, rotated to spread TIME_WAIT over more tuples.
fn source(i: u64) -> IpAddr {
    IpAddr::from([127, 0, 1, 1 + (i % 16) as u8])
}

async fn hello_once(target: SocketAddr, hello: &[u8], want: &str, src: IpAddr) -> Result<Duration> {
    let started = Instant::now();
    let sock = TcpSocket::new_v4()?;
    sock.bind(SocketAddr::new(src, 0))?;
    let mut s: TcpStream = sock.connect(target).await?;
    s.set_nodelay(true)?;
    s.write_all(hello).await?;
    let mut buf = [0u8; 128];
    let mut got = 0;
    loop {
        let n = s.read(&mut buf[got..]).await?;
        if n == 0 {
            bail!("closed before an answer");
        }
        got += n;
        if buf[..got].contains(&b'\n') || got == buf.len() {
            break;
        }
    }
    let elapsed = started.elapsed();
    // Close with a reset: no TIME_WAIT on the client side.
    let _ = s.set_zero_linger();
    let line = std::str::from_utf8(&buf[..got]).unwrap_or("");
    if line.trim_end() != format!("backend={want}") {
        bail!("answered by {line:?}, expected {want}");
    }
    Ok(elapsed)
}

async fn once(
    kind: Kind,
    addr: SocketAddr,
    t: &Target,
    hellos: &HashMap<String, Vec<u8>>,
    i: u64,
) -> Result<Duration> {
    match kind {
        Kind::Hello => hello_once(addr, &hellos[&t.sni], &t.backend, source(i)).await,
        Kind::Tls => {
            let started = Instant::now();
            let who = tls_probe(addr, Some(&t.sni), Some(source(i))).await?;
            let elapsed = started.elapsed();
            if who != t.backend {
                bail!("answered by {who}, expected {}", t.backend);
            }
            Ok(elapsed)
        }
    }
}

fn envoy_cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime); `rest` starts at field 3.
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

fn clock_ticks_per_s() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

struct Bench {
    args: Args,
    hellos: Arc<HashMap<String, Vec<u8>>>,
    envoy_pid: u32,
    ticks: f64,
    listeners: Listeners,
}

/// What one round of the interleaved latency schedule measured.
struct LatencyRound {
    latencies: HashMap<Path, Vec<Duration>>,
    errors: HashMap<Path, u64>,
    /// Connections actually started per second.
    started_rate: f64,
}

impl Bench {
    /// The name and address the `n`th connection of `path` uses: proxied
    /// paths and direct rotate through the kind's names; the floor always
    /// asks for the first name, the one its fixed cluster serves.
    fn route<'t>(
        &self,
        kind: Kind,
        path: Path,
        targets: &'t [Target],
        n: usize,
    ) -> (&'t Target, SocketAddr) {
        let t = match path {
            Path::EmptyWasm => &targets[0],
            _ => &targets[n % targets.len()],
        };
        let addr = match path {
            Path::Direct => t.direct,
            Path::Native => self.listeners.native,
            Path::EmptyWasm => self.listeners.empty(kind),
            Path::OooiWasm => self.listeners.oooi,
        };
        (t, addr)
    }

    /// Closed-loop connection rate of `path` with `--parallel` clients for
    /// `--seconds`: (connections answered per second, Envoy CPU µs per
    /// connection, errors). The CPU is divided by every connection Envoy
    /// handled, answered or failed.
    async fn rate(&self, kind: Kind, path: Path, targets: &[Target]) -> (f64, f64, u64) {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(AtomicU64::new(0));
        let cpu_before = envoy_cpu_ticks(self.envoy_pid);
        let started = Instant::now();
        let mut tasks = Vec::new();
        for worker in 0..self.args.parallel {
            let (stop, ok, errors, hellos) = (
                stop.clone(),
                ok.clone(),
                errors.clone(),
                self.hellos.clone(),
            );
            let routes: Vec<(Target, SocketAddr)> = (0..targets.len())
                .map(|n| {
                    let (t, addr) = self.route(kind, path, targets, n);
                    (t.clone(), addr)
                })
                .collect();
            tasks.push(tokio::spawn(async move {
                let mut i = worker as u64;
                while !stop.load(Ordering::Relaxed) {
                    let (t, addr) = &routes[(i as usize) % routes.len()];
                    match once(kind, *addr, t, &hellos, i).await {
                        Ok(_) => ok.fetch_add(1, Ordering::Relaxed),
                        Err(_) => errors.fetch_add(1, Ordering::Relaxed),
                    };
                    i += 1;
                }
            }));
        }
        tokio::time::sleep(Duration::from_secs_f64(self.args.seconds)).await;
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            let _ = t.await;
        }
        let elapsed = started.elapsed().as_secs_f64();
        let done = ok.load(Ordering::Relaxed);
        let failed = errors.load(Ordering::Relaxed);
        let cpu = match (cpu_before, envoy_cpu_ticks(self.envoy_pid)) {
            (Some(a), Some(b)) if done > 0 && path != Path::Direct => {
                (b - a) as f64 / self.ticks * 1e6 / (done + failed) as f64
            }
            _ => f64::NAN,
        };
        (done as f64 / elapsed, cpu, failed)
    }

    /// One round of the interleaved open-loop schedule: `per_path`
    /// connections for each of [`PATHS`], started at `rate` per second in
    /// all, consecutive connections taking the paths in turn (the order
    /// rotates by one each cycle, so no path always follows the same one).
    /// A start never waits for an earlier connection. Starts are paced by a
    /// thread of its own against absolute deadlines: tokio's timer has 1 ms
    /// granularity and would start connections in bursts above 1000/s,
    /// which is queueing, not routing.
    async fn latency_round(
        &self,
        kind: Kind,
        targets: &[Target],
        rate: f64,
        per_path: usize,
    ) -> Result<LatencyRound> {
        let n = PATHS.len();
        let plan: Vec<(Path, Target, SocketAddr)> = (0..per_path * n)
            .map(|i| {
                let cycle = i / n;
                let path = PATHS[(i % n + cycle) % n];
                let (t, addr) = self.route(kind, path, targets, cycle);
                (path, t.clone(), addr)
            })
            .collect();
        let hellos = self.hellos.clone();
        let runtime = tokio::runtime::Handle::current();
        let gap = 1.0 / rate;
        let (tasks, started_rate) = tokio::task::spawn_blocking(move || {
            let total = plan.len();
            let mut tasks = Vec::with_capacity(total);
            let started = Instant::now();
            for (i, (path, t, addr)) in plan.into_iter().enumerate() {
                let due = started + Duration::from_secs_f64(gap * i as f64);
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
                let hellos = hellos.clone();
                tasks.push((
                    path,
                    runtime.spawn(async move { once(kind, addr, &t, &hellos, i as u64).await }),
                ));
            }
            let span = started.elapsed().as_secs_f64();
            let started_rate = if span > 0.0 {
                total.saturating_sub(1) as f64 / span
            } else {
                f64::NAN
            };
            (tasks, started_rate)
        })
        .await?;
        let mut round = LatencyRound {
            latencies: HashMap::new(),
            errors: HashMap::new(),
            started_rate,
        };
        for (path, task) in tasks {
            match task.await {
                Ok(Ok(d)) => round.latencies.entry(path).or_default().push(d),
                _ => *round.errors.entry(path).or_default() += 1,
            }
        }
        for l in round.latencies.values_mut() {
            l.sort();
        }
        Ok(round)
    }
}

impl Listeners {
    fn empty(&self, kind: Kind) -> SocketAddr {
        match kind {
            Kind::Hello => self.empty_hello,
            Kind::Tls => self.empty_tls,
        }
    }
}

/// The `p` quantile of sorted durations, in µs.
fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

/// The median of finite values (NaN if none).
fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// A signed µs value, or "-" when unknown.
fn signed_us(v: f64) -> String {
    if v.is_finite() {
        format!("{v:+.0}")
    } else {
        "-".into()
    }
}

/// An unsigned µs value, or "-" when unknown.
fn plain(v: f64, decimals: usize) -> String {
    if v.is_finite() {
        format!("{v:.decimals$}")
    } else {
        "-".into()
    }
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn pin_self(cpus: &str) {
    if cpus.is_empty() {
        return;
    }
    // Before the runtime starts, so every thread inherits the mask.
    let pid = std::process::id().to_string();
    match std::process::Command::new("taskset")
        .args(["-a", "-p", "-c", cpus, &pid])
        .output()
    {
        Ok(o) if o.status.success() => {}
        _ => eprintln!("warning: could not pin the benchmark to CPUs {cpus}"),
    }
}

/// The upstream the oooi table names for a bench cluster: the cluster
/// itself, or its backend's address (see `--upstreams`).
struct UpstreamOf(HashMap<String, Upstream>);

impl UpstreamOf {
    fn get(&self, cluster: &str) -> Upstream {
        self.0
            .get(cluster)
            .cloned()
            .unwrap_or_else(|| Upstream::Cluster(cluster.to_owned()))
    }
}

/// The names the bench routes, (SNI, cluster), and how the oooi table
/// names each cluster's upstream.
struct Routing {
    names: Vec<(String, String)>,
    up: UpstreamOf,
}

fn cluster_route(port: u16, sni: &str, cluster: &str, up: &UpstreamOf) -> Route {
    Route {
        port,
        matches: RouteMatch::Sni(sni.to_owned()),
        upstream: up.get(cluster),
        owner: None,
    }
}

/// The benchmark names (8 SNI routes) plus two source routes, then filler
/// routes up to `total`: exact names, wildcards and /32 sources that no
/// client asks for.
fn bench_table(
    generation: u64,
    port: u16,
    names: &[(String, String)],
    total: usize,
    fresh: Option<(&str, &str)>,
    up: &UpstreamOf,
) -> Result<RouteTable> {
    let mut routes: Vec<Route> = names
        .iter()
        .map(|(sni, cluster)| cluster_route(port, sni, cluster, up))
        .collect();
    let first_cluster = names[0].1.clone();
    for i in 0..2u32 {
        routes.push(Route {
            port,
            matches: RouteMatch::Source(
                Cidr::new(IpAddr::from([192, 0, 2, 10 + i as u8]), 32)
                    .map_err(anyhow::Error::msg)?,
            ),
            upstream: up.get(&first_cluster),
            owner: None,
        });
    }
    if let Some((sni, cluster)) = fresh {
        routes.push(cluster_route(port, sni, cluster, up));
    }
    let mut i = 0u32;
    while routes.len() < total {
        let r = match i % 10 {
            0..=5 => cluster_route(
                port,
                &format!("svc{i}.c{}.filler.test", i % 97),
                &first_cluster,
                up,
            ),
            6..=8 => cluster_route(
                port,
                &format!("*.apps.c{i}.filler.test"),
                &first_cluster,
                up,
            ),
            _ => Route {
                port,
                matches: RouteMatch::Source(
                    Cidr::new(
                        IpAddr::from([10, (i >> 16) as u8, (i >> 8) as u8, i as u8]),
                        32,
                    )
                    .map_err(anyhow::Error::msg)?,
                ),
                upstream: up.get(&first_cluster),
                owner: None,
            },
        };
        routes.push(r);
        i += 1;
    }
    let table = RouteTable { generation, routes };
    table.validate()?;
    Ok(table)
}

fn main() -> Result<()> {
    let args = Args::parse();
    let multi_core = std::thread::available_parallelism().map_or(1, |n| n.get()) > 1;
    if multi_core {
        pin_self(&args.client_cpus);
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(run(args, multi_core))
}

/// How this run is laid out, for the report.
struct Setup {
    workers: u32,
    envoy_cpus: Option<String>,
    multi_core: bool,
    load_start: String,
    started: Instant,
}

async fn run(args: Args, multi_core: bool) -> Result<()> {
    let started = Instant::now();
    let kinds: Vec<Kind> = match args.kinds.as_str() {
        "hello" => vec![Kind::Hello],
        "tls" => vec![Kind::Tls],
        "both" => vec![Kind::Hello, Kind::Tls],
        other => bail!("--kinds {other:?}: expected hello, tls or both"),
    };
    if let Some(f) = args
        .load_fractions
        .iter()
        .find(|f| !(f.is_finite() && **f > 0.0))
    {
        bail!("--load-fractions: {f} is not a positive fraction");
    }
    if args.rounds == 0 || args.samples == 0 || args.parallel == 0 {
        bail!("--rounds, --samples and --parallel must be at least 1");
    }
    let lo: IpAddr = "127.0.0.1".parse()?;
    let load_start = load();

    // Backends and the names routed to them.
    let mut clusters = Vec::new();
    let mut names: Vec<(String, String)> = Vec::new();
    let mut targets: HashMap<&'static str, Vec<Target>> = HashMap::new();
    let mut tls_backends = Vec::new();
    // The oooi listener's port comes first: `--upstreams same-port` puts the
    // backends on its port number (on other loopback addresses).
    let oooi_port = free_port(lo);
    let bind = |i: usize| match args.upstreams {
        Upstreams::SamePort => SocketAddr::new(IpAddr::from([127, 0, 0, 2 + i as u8]), oooi_port),
        Upstreams::Cluster | Upstreams::Address => SocketAddr::new(lo, 0),
    };
    let mut upstream_of = HashMap::new();
    let mut name_upstream = |cluster: &str, addr: SocketAddr| {
        if args.upstreams != Upstreams::Cluster {
            upstream_of.insert(
                cluster.to_owned(),
                Upstream::Address {
                    host: addr.ip().to_string(),
                    port: addr.port(),
                },
            );
        }
    };
    for i in 0..HELLO_BACKENDS {
        let name = format!("bench-h{i}");
        let addr = hello_backend(name.clone(), bind(i)).await?;
        let cluster = format!("bench_h{i}");
        name_upstream(&cluster, addr);
        clusters.push(StaticCluster {
            name: cluster.clone(),
            endpoints: vec![addr],
        });
        names.push((format!("h{i}.bench.test"), cluster.clone()));
        targets.entry("hello").or_default().push(Target {
            sni: format!("h{i}.bench.test"),
            backend: name.clone(),
            cluster: cluster.clone(),
            direct: addr,
        });
        if i == 1 {
            names.push(("*.apps.h.bench.test".into(), cluster.clone()));
            targets.entry("hello").or_default().push(Target {
                sni: "console.apps.h.bench.test".into(),
                backend: name,
                cluster,
                direct: addr,
            });
        }
    }
    for i in 0..TLS_BACKENDS {
        let name = format!("bench-t{i}");
        let b = Backend::start_on(&name, bind(HELLO_BACKENDS + i)).await?;
        let cluster = format!("bench_t{i}");
        name_upstream(&cluster, b.addr);
        clusters.push(StaticCluster {
            name: cluster.clone(),
            endpoints: vec![b.addr],
        });
        names.push((format!("t{i}.bench.test"), cluster.clone()));
        targets.entry("tls").or_default().push(Target {
            sni: format!("t{i}.bench.test"),
            backend: name.clone(),
            cluster: cluster.clone(),
            direct: b.addr,
        });
        if i == 0 {
            names.push(("*.apps.t.bench.test".into(), cluster.clone()));
            targets.entry("tls").or_default().push(Target {
                sni: "console.apps.t.bench.test".into(),
                backend: name,
                cluster,
                direct: b.addr,
            });
        }
        tls_backends.push(b);
    }

    // The floor: the empty filter, one listener per kind, each to the
    // cluster of that kind's first name.
    let scratch = tempfile::tempdir()?;
    let empty_module = scratch.path().join("bench-empty-filter.wasm");
    std::fs::write(
        &empty_module,
        wat::parse_str(EMPTY_FILTER_WAT).context("the empty filter's WAT")?,
    )?;
    let listeners = Listeners {
        native: SocketAddr::new(lo, free_port(lo)),
        oooi: SocketAddr::new(lo, oooi_port),
        empty_hello: SocketAddr::new(lo, free_port(lo)),
        empty_tls: SocketAddr::new(lo, free_port(lo)),
    };
    let mut extra_listeners = Vec::new();
    for kind in [Kind::Hello, Kind::Tls] {
        let first = &targets[kind.name()][0];
        extra_listeners.push(empty_wasm_listener(
            &format!("bench_empty_wasm_{}", kind.name()),
            listeners.empty(kind),
            &empty_module,
            &first.cluster,
        ));
    }

    let envoy_cpus = if multi_core && !args.envoy_cpus.is_empty() {
        Some(args.envoy_cpus.clone())
    } else {
        None
    };
    let opts = EnvoyOptions {
        concurrency: args.workers,
        clusters,
        native_sni: vec![NativeSniListener {
            port: listeners.native.port(),
            routes: names.clone(),
        }],
        log_level: args.envoy_log_level.clone(),
        cpus: envoy_cpus.clone(),
        extra_listeners,
        ..EnvoyOptions::new(lo, &[listeners.oooi.port()])
    };
    let mut envoy = tokio::task::spawn_blocking(move || opts.start()).await??;
    let envoy_log = envoy.log.clone();
    let setup = Setup {
        workers: args.workers,
        envoy_cpus,
        multi_core,
        load_start,
        started,
    };
    let routing = Routing {
        names,
        up: UpstreamOf(upstream_of),
    };
    let result = measure(&mut envoy, args, kinds, routing, targets, listeners, setup).await;
    if result.is_err() {
        let mut envoy = envoy;
        let log = std::fs::read_to_string(&envoy_log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        eprintln!(
            "envoy exit status: {:?}; last lines of its log:",
            envoy.exit_status()
        );
        for line in tail.into_iter().rev() {
            eprintln!("  {line}");
        }
    }
    drop(tls_backends);
    drop(scratch);
    result
}

/// Checks that every path of `kind` answers each name with the right
/// backend before measuring. A wrong or missing answer from the floor fails
/// the run (its listener is this program's own); from the other paths it is
/// reported and the run goes on, its errors counted in the tables, so that
/// experimental filter builds can still be measured.
async fn check_paths(bench: &Bench, kind: Kind, targets: &[Target]) -> Result<()> {
    for path in PATHS {
        // One deadline per path: a listener may need a moment after readiness.
        let deadline = Instant::now() + Duration::from_secs(2);
        for n in 0..targets.len() {
            let (t, addr) = bench.route(kind, path, targets, n);
            let mut i = 0;
            loop {
                match once(kind, addr, t, &bench.hellos, i).await {
                    Ok(_) => break,
                    Err(e) if Instant::now() > deadline => {
                        let what = format!(
                            "{} ({addr}) does not route {} {} to {}: {e:#}",
                            path.name(),
                            kind.name(),
                            t.sni,
                            t.backend
                        );
                        if path == Path::EmptyWasm {
                            bail!(what);
                        }
                        println!("warning: {what}; measuring anyway");
                        break;
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
                i += 1;
            }
        }
    }
    Ok(())
}

/// Latency of one phase (one load fraction), per path over all rounds.
struct LatencyPhase {
    fraction: f64,
    offered: f64,
    per_path: usize,
    /// Slowest start rate over the rounds.
    started_rate: f64,
    latencies: HashMap<Path, Vec<Duration>>,
    errors: HashMap<Path, u64>,
    /// p99 of a path minus native's, per round (empty wasm, oooi wasm).
    p99_added_rounds: HashMap<Path, Vec<f64>>,
}

impl LatencyPhase {
    fn p(&self, path: Path, q: f64) -> f64 {
        self.latencies.get(&path).map_or(f64::NAN, |l| pct(l, q))
    }

    fn added(&self, path: Path, q: f64) -> f64 {
        self.p(path, q) - self.p(Path::Native, q)
    }

    fn p99_added_median(&self, path: Path) -> f64 {
        median(
            self.p99_added_rounds
                .get(&path)
                .map_or(&[], |v| v.as_slice()),
        )
    }
}

/// Runs `--rounds` rounds of the interleaved schedule at `fraction` of
/// `native_best`.
async fn latency_phase(
    bench: &Bench,
    kind: Kind,
    targets: &[Target],
    native_best: f64,
    fraction: f64,
) -> Result<LatencyPhase> {
    let args = &bench.args;
    let offered = (native_best * fraction).max(10.0);
    // Fit the phase into --phase-seconds at this rate.
    let fits = (args.phase_seconds * offered / (args.rounds * PATHS.len()) as f64) as usize;
    let per_path = args.samples.min(fits.max(MIN_SAMPLES));
    let mut phase = LatencyPhase {
        fraction,
        offered,
        per_path,
        started_rate: f64::INFINITY,
        latencies: HashMap::new(),
        errors: HashMap::new(),
        p99_added_rounds: HashMap::new(),
    };
    for _ in 0..args.rounds {
        let round = bench
            .latency_round(kind, targets, offered, per_path)
            .await?;
        phase.started_rate = phase.started_rate.min(round.started_rate);
        let p99 = |path: Path| {
            round
                .latencies
                .get(&path)
                .map_or(f64::NAN, |l| pct(l, 0.99))
        };
        for path in [Path::EmptyWasm, Path::OooiWasm] {
            phase
                .p99_added_rounds
                .entry(path)
                .or_default()
                .push(p99(path) - p99(Path::Native));
        }
        for (path, l) in round.latencies {
            phase.latencies.entry(path).or_default().extend(l);
        }
        for (path, e) in round.errors {
            *phase.errors.entry(path).or_default() += e;
        }
    }
    for l in phase.latencies.values_mut() {
        l.sort();
    }
    Ok(phase)
}

async fn measure(
    envoy: &mut Envoy,
    args: Args,
    kinds: Vec<Kind>,
    routing: Routing,
    targets: HashMap<&'static str, Vec<Target>>,
    listeners: Listeners,
    setup: Setup,
) -> Result<()> {
    let Routing { names, up } = routing;
    let up = &up;
    let mut hellos = HashMap::new();
    for t in targets.values().flatten() {
        hellos.insert(t.sni.clone(), client_hello(&t.sni)?);
    }
    hellos.insert("fresh.bench.test".into(), client_hello("fresh.bench.test")?);
    let wasm = listeners.oooi;
    let wasm_port = wasm.port();
    let bench = Bench {
        hellos: Arc::new(hellos),
        envoy_pid: envoy.pid(),
        ticks: clock_ticks_per_s(),
        listeners,
        args,
    };
    let client_cpus = if setup.multi_core {
        bench.args.client_cpus.as_str()
    } else {
        "any"
    };
    println!("oooi data-path benchmark");
    println!(
        "oooi table upstreams: {}",
        match bench.args.upstreams {
            Upstreams::Cluster => "static clusters (2 filter-state calls per connection)",
            Upstreams::Address =>
                "addresses on another port, through the dynamic forward proxy (3 calls)",
            Upstreams::SamePort =>
                "addresses on the listener's port, through the dynamic forward proxy (2 calls)",
        }
    );
    println!(
        "envoy {} worker(s) on CPUs {}, clients+backends on CPUs {client_cpus}; rate: {} s per path and round, {} parallel; latency: interleaved open loop at {} of native's best, up to {} connections per path and round; {} rounds",
        setup.workers,
        setup.envoy_cpus.as_deref().unwrap_or("any"),
        bench.args.seconds,
        bench.args.parallel,
        bench
            .args
            .load_fractions
            .iter()
            .map(|f| format!("{:.0} %", f * 100.0))
            .collect::<Vec<_>>()
            .join(", "),
        bench.args.samples,
        bench.args.rounds
    );
    println!("load average at start: {}", setup.load_start);

    let small = bench_table(1, wasm_port, &names, 10, None, up)?;
    let put = Instant::now();
    push(envoy, &small).await?;
    println!("PUT 10 routes: {:.1} ms", put.elapsed().as_secs_f64() * 1e3);
    for &kind in &kinds {
        check_paths(&bench, kind, &targets[kind.name()]).await?;
    }

    let mut summary = Vec::new();
    let mut table_rows = Vec::new();
    let mut generation = 1;
    for routes in [10usize, bench.args.large] {
        if routes != 10 {
            // PUT of the large table, timed to its first routed connection:
            // a name only the new table has is probed while the PUT runs.
            for _ in 0..3 {
                // The large table without the fresh name, then with it.
                generation += 1;
                push(
                    envoy,
                    &bench_table(generation, wasm_port, &names, routes, None, up)?,
                )
                .await?;
                generation += 1;
                let fresh_cluster = names[0].1.clone();
                let table = bench_table(
                    generation,
                    wasm_port,
                    &names,
                    routes,
                    Some(("fresh.bench.test", &fresh_cluster)),
                    up,
                )?;
                let body = table.to_json();
                let fresh = Target {
                    sni: "fresh.bench.test".into(),
                    backend: "bench-h0".into(),
                    cluster: fresh_cluster,
                    direct: wasm,
                };
                let started = Instant::now();
                let envoy_api = envoy.api;
                let put_task = tokio::task::spawn_blocking(move || {
                    let r = oooi_tests::http_blocking(
                        envoy_api,
                        "PUT",
                        "/v1/routes",
                        &[(
                            "authorization",
                            &format!("Bearer {}", oooi_tests::PUSH_TOKEN),
                        )],
                        &body,
                    );
                    (r, started.elapsed())
                });
                let mut i = 0;
                let first = loop {
                    if once(Kind::Hello, wasm, &fresh, &bench.hellos, i)
                        .await
                        .is_ok()
                    {
                        break started.elapsed();
                    }
                    i += 1;
                    if started.elapsed() > Duration::from_secs(30) {
                        bail!("the {routes}-route table never routed fresh.bench.test");
                    }
                };
                let (put_result, put_time) = put_task.await?;
                let (status, text) = put_result?;
                if status != 200 {
                    bail!("PUT of {routes} routes refused with {status}: {text}");
                }
                println!(
                    "PUT {routes} routes ({} KiB): answered in {:.1} ms, first routed connection after {:.1} ms",
                    table.to_json().len() / 1024,
                    put_time.as_secs_f64() * 1e3,
                    first.as_secs_f64() * 1e3
                );
                summary.push(format!(
                    "PUT {routes} routes -> first routed connection: {:.1} ms",
                    first.as_secs_f64() * 1e3
                ));
            }
        }
        for &kind in &kinds {
            let targets = &targets[kind.name()];
            table_rows.extend(measure_kind(&bench, kind, targets, routes).await?);
        }
    }

    // Module swap through ECDS: time to the first connection on the new build.
    let base = std::fs::read(filter_wasm()?)?;
    for i in 1..=3 {
        let build = format!("bench-swap-{i}");
        let module = build_id::stamp(&base, &build)?;
        let started = Instant::now();
        envoy.swap_module(&module)?;
        let t = &targets["hello"][0];
        let mut n = 0;
        while envoy.build_connections(&build) == 0 {
            let _ = once(Kind::Hello, wasm, t, &bench.hellos, n).await;
            n += 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
            if started.elapsed() > Duration::from_secs(30) {
                bail!("build {build} took no connection within 30 s");
            }
        }
        let line = format!(
            "module swap ({build}) -> first connection on the new build: {:.0} ms",
            started.elapsed().as_secs_f64() * 1e3
        );
        println!("{line}");
        summary.push(line);
    }
    println!();
    println!(
        "summary: oooi upstreams {:?}; envoy {} worker(s) on CPUs {}, clients+backends on CPUs {client_cpus}; load average at start {}, at end {}; run took {:.0} s",
        bench.args.upstreams,
        setup.workers,
        setup.envoy_cpus.as_deref().unwrap_or("any"),
        setup.load_start,
        load(),
        setup.started.elapsed().as_secs_f64()
    );
    print_table(&table_rows, bench.args.rounds);
    for line in summary {
        println!("  {line}");
    }
    Ok(())
}

/// Rates, CPU and latency of every path for one kind and table size; prints
/// the detail and returns the summary rows (one per load fraction).
async fn measure_kind(
    bench: &Bench,
    kind: Kind,
    targets: &[Target],
    routes: usize,
) -> Result<Vec<Row>> {
    let args = &bench.args;
    let mut rates: HashMap<Path, Vec<f64>> = HashMap::new();
    let mut cpus: HashMap<Path, Vec<f64>> = HashMap::new();
    let mut rate_errors: HashMap<Path, u64> = HashMap::new();
    // Connection rates first: native's best sets the offered rate of the
    // latency runs.
    for _ in 0..args.rounds {
        for path in PATHS {
            let (rate, cpu, errors) = bench.rate(kind, path, targets).await;
            rates.entry(path).or_default().push(rate);
            cpus.entry(path).or_default().push(cpu);
            *rate_errors.entry(path).or_default() += errors;
        }
    }
    let best = |path: Path| {
        rates
            .get(&path)
            .map_or(0.0, |r| r.iter().copied().fold(0.0, f64::max))
    };
    let cpu = |path: Path| {
        cpus.get(&path).map_or(f64::NAN, |c| {
            c.iter()
                .copied()
                .filter(|c| c.is_finite())
                .fold(f64::NAN, f64::min)
        })
    };
    let native_best = best(Path::Native);
    println!();
    println!(
        "{} connections, table of {routes} routes (load {})",
        kind.name(),
        load()
    );
    println!(
        "  rate: {} closed-loop clients, {} s per path and round, best of {} rounds",
        args.parallel, args.seconds, args.rounds
    );
    println!(
        "  {:<22} {:>14} {:>10} {:>18} {:>7}",
        "path", "conn/s (best)", "vs native", "envoy CPU us/conn", "errors"
    );
    for path in PATHS {
        println!(
            "  {:<22} {:>14.0} {:>10} {:>18} {:>7}",
            path.name(),
            best(path),
            if path == Path::Direct {
                "-".into()
            } else {
                format!("{:.0} %", best(path) / native_best * 100.0)
            },
            plain(cpu(path), 1),
            rate_errors.get(&path).copied().unwrap_or(0)
        );
    }

    let mut rows = Vec::new();
    for &fraction in &args.load_fractions {
        let phase = latency_phase(bench, kind, targets, native_best, fraction).await?;
        println!(
            "  latency: interleaved open loop at {:.0} conn/s ({:.0} % of native's best; slowest round started {:.0}/s), {} connections per path and round, {} rounds (load {})",
            phase.offered,
            fraction * 100.0,
            phase.started_rate,
            phase.per_path,
            args.rounds,
            load()
        );
        println!(
            "  {:<22} {:>8} {:>8} {:>8} {:>9} {:>10} {:>10} {:>7}",
            "path", "p50 us", "p90 us", "p99 us", "p99.9 us", "p50 added", "p99 added", "errors"
        );
        for path in PATHS {
            let added = |q| match path {
                Path::EmptyWasm | Path::OooiWasm => signed_us(phase.added(path, q)),
                _ => "-".into(),
            };
            println!(
                "  {:<22} {:>8} {:>8} {:>8} {:>9} {:>10} {:>10} {:>7}",
                path.name(),
                plain(phase.p(path, 0.5), 0),
                plain(phase.p(path, 0.9), 0),
                plain(phase.p(path, 0.99), 0),
                plain(phase.p(path, 0.999), 0),
                added(0.5),
                added(0.99),
                phase.errors.get(&path).copied().unwrap_or(0)
            );
        }
        println!(
            "  native over direct: p50 {} us, p99 {} us",
            signed_us(phase.p(Path::Native, 0.5) - phase.p(Path::Direct, 0.5)),
            signed_us(phase.p(Path::Native, 0.99) - phase.p(Path::Direct, 0.99))
        );
        let per_round: Vec<String> = [Path::EmptyWasm, Path::OooiWasm]
            .iter()
            .map(|&path| {
                let rounds = phase
                    .p99_added_rounds
                    .get(&path)
                    .map(|v| v.iter().map(|x| signed_us(*x)).collect::<Vec<_>>())
                    .unwrap_or_default();
                format!(
                    "{} {} (median {})",
                    path.short(),
                    rounds.join(" "),
                    signed_us(phase.p99_added_median(path))
                )
            })
            .collect();
        println!(
            "  p99 added vs native per round, us: {}",
            per_round.join("; ")
        );
        rows.push(Row {
            kind: kind.name(),
            routes,
            fraction: phase.fraction,
            offered: phase.offered,
            native_rate: native_best,
            empty_rate: best(Path::EmptyWasm),
            oooi_rate: best(Path::OooiWasm),
            cpu: [cpu(Path::Native), cpu(Path::EmptyWasm), cpu(Path::OooiWasm)],
            p50_added: [
                phase.added(Path::EmptyWasm, 0.5),
                phase.added(Path::OooiWasm, 0.5),
            ],
            p99_added: [
                phase.p99_added_median(Path::EmptyWasm),
                phase.p99_added_median(Path::OooiWasm),
            ],
            p99_noise: worst_abs(
                phase
                    .p99_added_rounds
                    .get(&Path::EmptyWasm)
                    .map_or(&[], |v| v.as_slice()),
            ),
        });
    }
    Ok(rows)
}

/// One line of the summary table: one kind, table size and load fraction.
struct Row {
    kind: &'static str,
    routes: usize,
    fraction: f64,
    offered: f64,
    native_rate: f64,
    empty_rate: f64,
    oooi_rate: f64,
    /// Envoy CPU µs per connection: native, empty wasm, oooi wasm.
    cpu: [f64; 3],
    /// p50 added over native (pooled over rounds): empty wasm, oooi wasm.
    p50_added: [f64; 2],
    /// p99 added over native, median of the rounds: empty wasm, oooi wasm.
    p99_added: [f64; 2],
    /// How far the control (the empty filter, which adds next to nothing)
    /// strayed from native at p99 in its worst round: the noise floor.
    p99_noise: f64,
}

/// The p99 part of the verdict: the oooi filter's median p99 added, judged
/// against the target with the noise floor the control measured. Met only
/// when even the noise cannot lift it over the target, missed only when
/// even the noise cannot bring it under. A filter cannot make connections
/// faster, so a negative median counts as zero: it shows noise, not a gain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum P99Verdict {
    Met,
    Missed,
    Unresolved,
}

fn p99_verdict(added: f64, noise: f64, target_us: f64) -> P99Verdict {
    if !(added.is_finite() && noise.is_finite()) {
        P99Verdict::Unresolved
    } else if added.max(0.0) + noise <= target_us {
        P99Verdict::Met
    } else if added - noise > target_us {
        P99Verdict::Missed
    } else {
        P99Verdict::Unresolved
    }
}

/// The largest absolute value (the control's worst round), NaN when empty.
fn worst_abs(values: &[f64]) -> f64 {
    values.iter().map(|v| v.abs()).fold(f64::NAN, f64::max)
}

fn print_table(rows: &[Row], rounds: usize) {
    println!(
        "  {:<5} {:>6} {:>9} {:>9} {:>9} {:>6} {:>6} {:>16} {:>14} {:>12} {:>12}  target",
        "kind",
        "routes",
        "native/s",
        "empty/s",
        "oooi/s",
        "empty",
        "oooi",
        "CPU us n/e/o",
        "latency at",
        "p50+ e/o",
        "p99+ e/o",
    );
    for r in rows {
        let ratio = |rate: f64| rate / r.native_rate * 100.0;
        let rate_met = ratio(r.oooi_rate) >= 90.0;
        let p99 = p99_verdict(r.p99_added[1], r.p99_noise, 100.0);
        let noise = format!("p99 unresolved, noise +-{:.0} us", r.p99_noise);
        let verdict = match (rate_met, p99) {
            (true, P99Verdict::Met) => "met".to_owned(),
            (false, P99Verdict::Met) => "MISSED (rate)".to_owned(),
            (true, P99Verdict::Missed) => "MISSED (p99)".to_owned(),
            (false, P99Verdict::Missed) => "MISSED (rate, p99)".to_owned(),
            (true, P99Verdict::Unresolved) => format!("rate met; {noise}"),
            (false, P99Verdict::Unresolved) => format!("MISSED (rate); {noise}"),
        };
        println!(
            "  {:<5} {:>6} {:>9.0} {:>9.0} {:>9.0} {:>5.0}% {:>5.0}% {:>16} {:>14} {:>12} {:>12}  {verdict}",
            r.kind,
            r.routes,
            r.native_rate,
            r.empty_rate,
            r.oooi_rate,
            ratio(r.empty_rate),
            ratio(r.oooi_rate),
            format!(
                "{}/{}/{}",
                plain(r.cpu[0], 0),
                plain(r.cpu[1], 0),
                plain(r.cpu[2], 0)
            ),
            format!("{:.0}% {:.0}/s", r.fraction * 100.0, r.offered),
            format!(
                "{}/{}",
                signed_us(r.p50_added[0]),
                signed_us(r.p50_added[1])
            ),
            format!(
                "{}/{}",
                signed_us(r.p99_added[0]),
                signed_us(r.p99_added[1])
            ),
        );
    }
    println!(
        "  (empty, oooi: rate as % of native's. CPU: Envoy µs per connection for native / empty wasm / oooi wasm. p50+, p99+: µs added over native in the interleaved run, empty wasm / oooi wasm; p99+ is the median of {rounds} rounds. Target: oooi wasm >= 90 % of native's rate and p99 added <= 100 us. The empty filter is the control: its worst round's |p99 added| is the noise; p99 counts as met only if oooi's p99+ (at least 0) plus that noise is <= 100 us, as missed only if minus it is > 100 us)"
    );
}

async fn push(envoy: &Envoy, table: &RouteTable) -> Result<()> {
    let body = table.to_json();
    let api = envoy.api;
    let (status, text) = tokio::task::spawn_blocking(move || {
        oooi_tests::http_blocking(
            api,
            "PUT",
            "/v1/routes",
            &[(
                "authorization",
                &format!("Bearer {}", oooi_tests::PUSH_TOKEN),
            )],
            &body,
        )
    })
    .await?
    .context("PUT /v1/routes")?;
    if status != 200 {
        bail!("PUT refused with {status}: {text}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use oooi_wasm_host::{Action, FilterHost, SharedData};

    #[test]
    fn empty_filter_lets_every_connection_through_untouched() {
        // The harness host (built for the oooi module) insists on its HTTP
        // and tick exports; stubs for them are added here only, and are
        // never called on the network path this test drives.
        let body = EMPTY_FILTER_WAT
            .trim_end()
            .strip_suffix(')')
            .expect("the WAT ends its module");
        let wat = format!(
            r#"{body}
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "proxy_on_request_body") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "proxy_on_tick") (param i32)))"#
        );
        wat::parse_str(EMPTY_FILTER_WAT).expect("the WAT compiles");
        let module = wat::parse_str(&wat).expect("the WAT with host stubs compiles");
        let mut host = FilterHost::load(&module, SharedData::default()).expect("the module loads");
        let report = host.abi_report();
        assert_eq!(report.abi_versions, ["proxy_abi_version_0_2_1"]);
        assert!(
            report.imports.is_empty(),
            "no host calls: {:?}",
            report.imports
        );
        let root = host
            .start_plugin("{}")
            .expect("VM start and configure succeed");
        for sni in [Some("h0.bench.test"), None] {
            let outcome = host
                .new_connection(
                    root,
                    sni,
                    "127.0.1.1:40000".parse().expect("source"),
                    "127.0.0.1:443".parse().expect("local"),
                )
                .expect("the connection callbacks succeed");
            assert_eq!(outcome.action, Action::Continue);
            assert!(!outcome.closed);
            assert!(outcome.filter_state.is_empty());
        }
    }

    #[test]
    fn empty_listener_routes_to_its_fixed_cluster_through_the_empty_vm() {
        let l = empty_wasm_listener(
            "bench_empty_wasm_hello",
            "127.0.0.1:4000".parse().expect("addr"),
            std::path::Path::new("/tmp/x/empty.wasm"),
            "bench_h0",
        );
        let filters = &l["filter_chains"][0]["filters"];
        let wasm = &filters[0]["typed_config"]["config"];
        assert_eq!(wasm["vm_config"]["vm_id"], EMPTY_VM_ID);
        assert_eq!(wasm["vm_config"]["runtime"], "envoy.wasm.runtime.v8");
        assert_eq!(
            wasm["vm_config"]["code"]["local"]["filename"],
            "/tmp/x/empty.wasm"
        );
        assert_eq!(filters[1]["typed_config"]["cluster"], "bench_h0");
        assert_eq!(l["address"]["socket_address"]["port_value"], 4000);
    }

    #[test]
    fn the_p99_verdict_allows_for_the_controls_noise() {
        // Quiet machine: the control stays within 20 us.
        assert_eq!(p99_verdict(60.0, 20.0, 100.0), P99Verdict::Met);
        assert_eq!(p99_verdict(150.0, 20.0, 100.0), P99Verdict::Missed);
        assert_eq!(p99_verdict(90.0, 20.0, 100.0), P99Verdict::Unresolved);
        // This VM: the control strays by milliseconds, so a negative median
        // proves nothing either way.
        assert_eq!(p99_verdict(-357.0, 840.0, 100.0), P99Verdict::Unresolved);
        // A median far below zero is noise too, not a filter that speeds
        // connections up.
        assert_eq!(p99_verdict(-1643.0, 1500.0, 100.0), P99Verdict::Unresolved);
        assert_eq!(p99_verdict(-40.0, 30.0, 100.0), P99Verdict::Met);
        assert_eq!(p99_verdict(5178.0, 840.0, 100.0), P99Verdict::Missed);
        assert_eq!(p99_verdict(f64::NAN, 10.0, 100.0), P99Verdict::Unresolved);
        assert_eq!(p99_verdict(50.0, f64::NAN, 100.0), P99Verdict::Unresolved);
    }

    #[test]
    fn the_noise_is_the_controls_worst_round() {
        assert_eq!(worst_abs(&[69.0, -142.0, -41.0]), 142.0);
        assert!(worst_abs(&[]).is_nan());
    }
}
