//! One measurement per connection kind and table size: the path check, the
//! rate rounds and the interleaved latency phases.

use super::*;

/// Checks that every path of `kind` answers each name with the right
/// backend before measuring. A wrong or missing answer from the floor fails
/// the run (its listener is this program's own); from the other paths it is
/// reported and the run goes on, its errors counted in the tables, so that
/// experimental filter builds can still be measured.
pub(crate) async fn check_paths(bench: &Bench, kind: Kind, targets: &[Target]) -> Result<()> {
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
pub(crate) struct LatencyPhase {
    pub(crate) fraction: f64,
    pub(crate) offered: f64,
    pub(crate) per_path: usize,
    /// Slowest start rate over the rounds.
    pub(crate) started_rate: f64,
    pub(crate) latencies: HashMap<Path, Vec<Duration>>,
    pub(crate) errors: HashMap<Path, u64>,
    /// p99 of a path minus native's, per round (empty wasm, oooi wasm).
    pub(crate) p99_added_rounds: HashMap<Path, Vec<f64>>,
}

impl LatencyPhase {
    pub(crate) fn p(&self, path: Path, q: f64) -> f64 {
        self.latencies.get(&path).map_or(f64::NAN, |l| pct(l, q))
    }

    pub(crate) fn added(&self, path: Path, q: f64) -> f64 {
        self.p(path, q) - self.p(Path::Native, q)
    }

    pub(crate) fn p99_added_median(&self, path: Path) -> f64 {
        median(
            self.p99_added_rounds
                .get(&path)
                .map_or(&[], |v| v.as_slice()),
        )
    }
}

/// Runs `--rounds` rounds of the interleaved schedule at `fraction` of
/// `native_best`.
pub(crate) async fn latency_phase(
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

pub(crate) async fn measure(
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
pub(crate) async fn measure_kind(
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
