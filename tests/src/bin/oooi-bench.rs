//! Data-path benchmark: Envoy's native SNI routing (`filter_chain_match` +
//! `tcp_proxy`) against the oooi wasm filter with 10 and with 10,000 routes,
//! in one Envoy with the same backends, plus the time from a 10,000-route PUT
//! to its first routed connection and from a module swap to the first
//! connection on the new build. Run with `tools/dev bench datapath`.
//!
//! Two connection kinds, both new TLS connections as the proxy sees them:
//! - `hello`: the client sends a real ClientHello (made by rustls) and the
//!   backend answers with its name as soon as the ClientHello arrives. No
//!   crypto on either end, so the numbers show the proxy's own cost.
//! - `tls`: a full TLS 1.3 handshake with a rustls backend, then its name.
//!
//! Per path, each phase measures:
//! - the connection rate with `--parallel` closed-loop clients for
//!   `--seconds` (best of `--rounds`), and Envoy's CPU time per connection;
//! - the latency (connect to first answer byte) at a fixed offered rate,
//!   open loop, of `--load-fraction` (default 50 %) of native's best rate, so
//!   that neither path is saturated and p50/p99 show what routing adds rather
//!   than queueing. Both proxied paths get the same offered rate.
//!
//! Paths are interleaved within each round, so drifting machine load hits
//! every path alike. Envoy runs `--workers` worker(s) pinned to
//! `--envoy-cpus`, the clients and backends on `--client-cpus`. Traffic stays
//! on loopback. The run ends with one summary table.

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
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

#[derive(Parser, Debug)]
#[command(about = "Benchmark native SNI routing against the oooi wasm filter (loopback only)")]
struct Args {
    /// Seconds per rate measurement.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Concurrent clients during rate measurements.
    #[arg(long, default_value_t = 8)]
    parallel: usize,
    /// Connections per fixed-rate latency measurement (per path and round).
    #[arg(long, default_value_t = 2000)]
    samples: usize,
    /// Offered rate of the latency measurement, as a fraction of native's
    /// best connection rate.
    #[arg(long, default_value_t = 0.5)]
    load_fraction: f64,
    /// Rounds per phase (paths interleaved within a round).
    #[arg(long, default_value_t = 2)]
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
}

const HELLO_BACKENDS: usize = 4;
const TLS_BACKENDS: usize = 2;

/// A name the client asks for, and the backend that must answer.
#[derive(Clone)]
struct Target {
    sni: String,
    backend: String,
    direct: SocketAddr,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
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
    Wasm,
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Path::Direct => "direct (no proxy)",
            Path::Native => "envoy native SNI",
            Path::Wasm => "envoy + wasm filter",
        }
    }
}

#[derive(Default, Clone)]
struct Sample {
    /// Closed-loop connection rates, one per round.
    rates: Vec<f64>,
    cpu_us_per_conn: Vec<f64>,
    latencies: Vec<Duration>,
    errors: u64,
}

/// A backend that answers `backend=<name>\n` once the first TLS record (the
/// ClientHello) has arrived, without doing any TLS itself.
async fn hello_backend(name: String) -> Result<SocketAddr> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
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
    hellos: HashMap<String, Vec<u8>>,
    envoy_pid: u32,
    ticks: f64,
}

impl Bench {
    fn addr(&self, path: Path, t: &Target, native: SocketAddr, wasm: SocketAddr) -> SocketAddr {
        match path {
            Path::Direct => t.direct,
            Path::Native => native,
            Path::Wasm => wasm,
        }
    }

    async fn rate(
        &self,
        kind: Kind,
        path: Path,
        targets: &[Target],
        native: SocketAddr,
        wasm: SocketAddr,
    ) -> (f64, f64, u64) {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(AtomicU64::new(0));
        let hellos = Arc::new(self.hellos.clone());
        let cpu_before = envoy_cpu_ticks(self.envoy_pid);
        let started = Instant::now();
        let mut tasks = Vec::new();
        for worker in 0..self.args.parallel {
            let (stop, ok, errors, hellos) =
                (stop.clone(), ok.clone(), errors.clone(), hellos.clone());
            let targets: Vec<(Target, SocketAddr)> = targets
                .iter()
                .map(|t| (t.clone(), self.addr(path, t, native, wasm)))
                .collect();
            tasks.push(tokio::spawn(async move {
                let mut i = worker as u64;
                while !stop.load(Ordering::Relaxed) {
                    let (t, addr) = &targets[(i as usize) % targets.len()];
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
        let cpu = match (cpu_before, envoy_cpu_ticks(self.envoy_pid)) {
            (Some(a), Some(b)) if done > 0 && path != Path::Direct => {
                (b - a) as f64 / self.ticks * 1e6 / done as f64
            }
            _ => f64::NAN,
        };
        (done as f64 / elapsed, cpu, errors.load(Ordering::Relaxed))
    }

    /// Latency of `samples` connections started at a fixed `rate` (open
    /// loop: a start never waits for an earlier connection to finish).
    async fn fixed_rate(
        &self,
        kind: Kind,
        path: Path,
        targets: &[Target],
        native: SocketAddr,
        wasm: SocketAddr,
        rate: f64,
    ) -> (Vec<Duration>, u64, f64) {
        let hellos = Arc::new(self.hellos.clone());
        let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(1.0)));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let started = Instant::now();
        let mut tasks = Vec::with_capacity(self.args.samples);
        for i in 0..self.args.samples as u64 {
            ticker.tick().await;
            let t = targets[(i as usize) % targets.len()].clone();
            let addr = self.addr(path, &t, native, wasm);
            let hellos = hellos.clone();
            tasks.push(tokio::spawn(async move {
                once(kind, addr, &t, &hellos, i).await
            }));
        }
        let offered = self.args.samples as f64 / started.elapsed().as_secs_f64();
        let mut out = Vec::with_capacity(tasks.len());
        let mut errors = 0;
        for t in tasks {
            match t.await {
                Ok(Ok(d)) => out.push(d),
                _ => errors += 1,
            }
        }
        (out, errors, offered)
    }
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
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

fn cluster_route(port: u16, sni: &str, cluster: &str) -> Route {
    Route {
        port,
        matches: RouteMatch::Sni(sni.to_owned()),
        upstream: Upstream::Cluster(cluster.to_owned()),
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
) -> Result<RouteTable> {
    let mut routes: Vec<Route> = names
        .iter()
        .map(|(sni, cluster)| cluster_route(port, sni, cluster))
        .collect();
    let first_cluster = names[0].1.clone();
    for i in 0..2u32 {
        routes.push(Route {
            port,
            matches: RouteMatch::Source(
                Cidr::new(IpAddr::from([192, 0, 2, 10 + i as u8]), 32)
                    .map_err(anyhow::Error::msg)?,
            ),
            upstream: Upstream::Cluster(first_cluster.clone()),
            owner: None,
        });
    }
    if let Some((sni, cluster)) = fresh {
        routes.push(cluster_route(port, sni, cluster));
    }
    let mut i = 0u32;
    while routes.len() < total {
        let r = match i % 10 {
            0..=5 => cluster_route(
                port,
                &format!("svc{i}.c{}.filler.test", i % 97),
                &first_cluster,
            ),
            6..=8 => cluster_route(port, &format!("*.apps.c{i}.filler.test"), &first_cluster),
            _ => Route {
                port,
                matches: RouteMatch::Source(
                    Cidr::new(
                        IpAddr::from([10, (i >> 16) as u8, (i >> 8) as u8, i as u8]),
                        32,
                    )
                    .map_err(anyhow::Error::msg)?,
                ),
                upstream: Upstream::Cluster(first_cluster.clone()),
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

async fn run(args: Args, multi_core: bool) -> Result<()> {
    let kinds: Vec<Kind> = match args.kinds.as_str() {
        "hello" => vec![Kind::Hello],
        "tls" => vec![Kind::Tls],
        "both" => vec![Kind::Hello, Kind::Tls],
        other => bail!("--kinds {other:?}: expected hello, tls or both"),
    };
    let lo: IpAddr = "127.0.0.1".parse()?;
    let load_start = load();

    // Backends and the names routed to them.
    let mut clusters = Vec::new();
    let mut names: Vec<(String, String)> = Vec::new();
    let mut targets: HashMap<&'static str, Vec<Target>> = HashMap::new();
    let mut tls_backends = Vec::new();
    for i in 0..HELLO_BACKENDS {
        let name = format!("bench-h{i}");
        let addr = hello_backend(name.clone()).await?;
        let cluster = format!("bench_h{i}");
        clusters.push(StaticCluster {
            name: cluster.clone(),
            endpoints: vec![addr],
        });
        names.push((format!("h{i}.bench.test"), cluster.clone()));
        targets.entry("hello").or_default().push(Target {
            sni: format!("h{i}.bench.test"),
            backend: name.clone(),
            direct: addr,
        });
        if i == 1 {
            names.push(("*.apps.h.bench.test".into(), cluster));
            targets.entry("hello").or_default().push(Target {
                sni: "console.apps.h.bench.test".into(),
                backend: name,
                direct: addr,
            });
        }
    }
    for i in 0..TLS_BACKENDS {
        let name = format!("bench-t{i}");
        let b = Backend::start(&name, lo).await?;
        let cluster = format!("bench_t{i}");
        clusters.push(StaticCluster {
            name: cluster.clone(),
            endpoints: vec![b.addr],
        });
        names.push((format!("t{i}.bench.test"), cluster.clone()));
        targets.entry("tls").or_default().push(Target {
            sni: format!("t{i}.bench.test"),
            backend: name.clone(),
            direct: b.addr,
        });
        if i == 0 {
            names.push(("*.apps.t.bench.test".into(), cluster));
            targets.entry("tls").or_default().push(Target {
                sni: "console.apps.t.bench.test".into(),
                backend: name,
                direct: b.addr,
            });
        }
        tls_backends.push(b);
    }
    let (wasm_port, native_port) = (free_port(lo), free_port(lo));
    let native_routes = names.clone();
    let envoy_cpus = if multi_core && !args.envoy_cpus.is_empty() {
        Some(args.envoy_cpus.clone())
    } else {
        None
    };
    let workers = args.workers;
    let opts = EnvoyOptions {
        concurrency: workers,
        clusters,
        native_sni: vec![NativeSniListener {
            port: native_port,
            routes: native_routes,
        }],
        log_level: args.envoy_log_level.clone(),
        cpus: envoy_cpus.clone(),
        ..EnvoyOptions::new(lo, &[wasm_port])
    };
    let mut envoy = tokio::task::spawn_blocking(move || opts.start()).await??;
    let envoy_log = envoy.log.clone();
    let result = measure(
        &mut envoy,
        args,
        kinds,
        names,
        targets,
        wasm_port,
        native_port,
        workers,
        envoy_cpus,
        multi_core,
        load_start,
    )
    .await;
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
    result
}

#[allow(clippy::too_many_arguments)]
async fn measure(
    envoy: &mut Envoy,
    args: Args,
    kinds: Vec<Kind>,
    names: Vec<(String, String)>,
    targets: HashMap<&'static str, Vec<Target>>,
    wasm_port: u16,
    native_port: u16,
    workers: u32,
    envoy_cpus: Option<String>,
    multi_core: bool,
    load_start: String,
) -> Result<()> {
    let lo: IpAddr = "127.0.0.1".parse()?;
    let mut hellos = HashMap::new();
    for t in targets.values().flatten() {
        hellos.insert(t.sni.clone(), client_hello(&t.sni)?);
    }
    hellos.insert("fresh.bench.test".into(), client_hello("fresh.bench.test")?);
    let native = SocketAddr::new(lo, native_port);
    let wasm = SocketAddr::new(lo, wasm_port);
    let bench = Bench {
        hellos,
        envoy_pid: envoy.pid(),
        ticks: clock_ticks_per_s(),
        args,
    };
    println!("oooi data-path benchmark");
    println!(
        "envoy {} worker(s) on CPUs {}, clients+backends on CPUs {}; {} s per rate run, {} parallel; {} latency samples; {} rounds",
        workers,
        envoy_cpus.as_deref().unwrap_or("any"),
        if multi_core {
            bench.args.client_cpus.as_str()
        } else {
            "any"
        },
        bench.args.seconds,
        bench.args.parallel,
        bench.args.samples,
        bench.args.rounds
    );
    println!("load average at start: {load_start}");

    let small = bench_table(1, wasm_port, &names, 10, None)?;
    let put = Instant::now();
    push(envoy, &small).await?;
    println!("PUT 10 routes: {:.1} ms", put.elapsed().as_secs_f64() * 1e3);

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
                    &bench_table(generation, wasm_port, &names, routes, None)?,
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
                )?;
                let body = table.to_json();
                let fresh = Target {
                    sni: "fresh.bench.test".into(),
                    backend: "bench-h0".into(),
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
            let mut samples: HashMap<Path, Sample> = HashMap::new();
            // Connection rates first: native's best sets the offered rate of
            // the latency runs.
            for _ in 0..bench.args.rounds {
                for path in [Path::Direct, Path::Native, Path::Wasm] {
                    let (rate, cpu, errors) = bench.rate(kind, path, targets, native, wasm).await;
                    let s = samples.entry(path).or_default();
                    s.rates.push(rate);
                    s.cpu_us_per_conn.push(cpu);
                    s.errors += errors;
                }
            }
            let best = |s: &Sample| s.rates.iter().copied().fold(0.0, f64::max);
            let native_best = samples.get(&Path::Native).map_or(0.0, best);
            let offered = (native_best * bench.args.load_fraction).max(10.0);
            let mut achieved = Vec::new();
            for _ in 0..bench.args.rounds {
                for path in [Path::Direct, Path::Native, Path::Wasm] {
                    let (lat, errors, rate) = bench
                        .fixed_rate(kind, path, targets, native, wasm, offered)
                        .await;
                    let s = samples.entry(path).or_default();
                    s.latencies.extend(lat);
                    s.errors += errors;
                    achieved.push(rate);
                }
            }
            let achieved = achieved.iter().copied().fold(f64::INFINITY, f64::min);
            println!();
            println!(
                "{} connections, table of {routes} routes (load {})",
                kind.name(),
                load()
            );
            println!(
                "  {:<22} {:>14} {:>18} {:>10} {:>10} {:>7}",
                "path", "conn/s (best)", "envoy CPU us/conn", "p50 us", "p99 us", "errors"
            );
            let mut rows = HashMap::new();
            for path in [Path::Direct, Path::Native, Path::Wasm] {
                let s = samples.remove(&path).unwrap_or_default();
                let mut lat = s.latencies.clone();
                lat.sort();
                let cpu = s
                    .cpu_us_per_conn
                    .iter()
                    .copied()
                    .filter(|c| c.is_finite())
                    .fold(f64::NAN, f64::min);
                let (p50, p99) = (pct(&lat, 0.5), pct(&lat, 0.99));
                println!(
                    "  {:<22} {:>14.0} {:>18} {:>10.0} {:>10.0} {:>7}",
                    path.name(),
                    best(&s),
                    if cpu.is_finite() {
                        format!("{cpu:.1}")
                    } else {
                        "-".into()
                    },
                    p50,
                    p99,
                    s.errors
                );
                rows.insert(path, (best(&s), p50, p99, cpu));
            }
            println!(
                "  latency at {offered:.0} conn/s offered ({:.0} % of native's best; slowest run started {achieved:.0}/s), {} connections per path and round",
                bench.args.load_fraction * 100.0,
                bench.args.samples
            );
            let (n_rate, n_p50, n_p99, n_cpu) = rows[&Path::Native];
            let (w_rate, w_p50, w_p99, w_cpu) = rows[&Path::Wasm];
            let (_, d_p50, d_p99, _) = rows[&Path::Direct];
            println!(
                "  added by the proxy vs direct: native p50 {:+.0} us p99 {:+.0} us; wasm p50 {:+.0} us p99 {:+.0} us",
                n_p50 - d_p50,
                n_p99 - d_p99,
                w_p50 - d_p50,
                w_p99 - d_p99
            );
            table_rows.push(Row {
                kind: kind.name(),
                routes,
                native_rate: n_rate,
                wasm_rate: w_rate,
                offered,
                native_cpu: n_cpu,
                wasm_cpu: w_cpu,
                p50_added: w_p50 - n_p50,
                p99_added: w_p99 - n_p99,
            });
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
        "summary: envoy {workers} worker(s) on CPUs {}, clients+backends on CPUs {}; load average at start {load_start}, at end {}",
        envoy_cpus.as_deref().unwrap_or("any"),
        if multi_core {
            bench.args.client_cpus.as_str()
        } else {
            "any"
        },
        load()
    );
    print_table(&table_rows);
    println!(
        "  (added = wasm minus native at the same offered rate; target: wasm >= 90 % of native's rate, p99 added <= 100 us)"
    );
    for line in summary {
        println!("  {line}");
    }
    Ok(())
}

/// One line of the summary table.
struct Row {
    kind: &'static str,
    routes: usize,
    native_rate: f64,
    wasm_rate: f64,
    offered: f64,
    native_cpu: f64,
    wasm_cpu: f64,
    p50_added: f64,
    p99_added: f64,
}

fn print_table(rows: &[Row]) {
    println!(
        "  {:<6} {:>7} {:>10} {:>10} {:>8} {:>14} {:>16} {:>11} {:>11}  target",
        "kind",
        "routes",
        "native/s",
        "wasm/s",
        "ratio",
        "CPU us/conn",
        "latency at /s",
        "p50 added",
        "p99 added",
    );
    for r in rows {
        let ratio = r.wasm_rate / r.native_rate * 100.0;
        let met = ratio >= 90.0 && r.p99_added <= 100.0;
        println!(
            "  {:<6} {:>7} {:>10.0} {:>10.0} {:>7.0}% {:>14} {:>16.0} {:>8.0} us {:>8.0} us  {}",
            r.kind,
            r.routes,
            r.native_rate,
            r.wasm_rate,
            ratio,
            format!("{:.0} -> {:.0}", r.native_cpu, r.wasm_cpu),
            r.offered,
            r.p50_added,
            r.p99_added,
            if met { "met" } else { "MISSED" }
        );
    }
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
