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

mod clients;
mod measure;
mod paths;
mod report;
mod system;

use clients::*;
use measure::*;
use paths::*;
use report::*;
use system::*;

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
