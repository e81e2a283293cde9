//! Both ends of a measured connection: the targets and connection kinds, the
//! backends, the clients that open one connection (by ClientHello or full
//! TLS), Envoy's CPU time, and the closed-loop and interleaved runs over
//! every path ([`Bench`]).

use super::*;

/// A name the client asks for, and the backend that must answer.
#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) sni: String,
    pub(crate) backend: String,
    /// The static cluster of that backend.
    pub(crate) cluster: String,
    pub(crate) direct: SocketAddr,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) enum Kind {
    Hello,
    Tls,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Hello => "hello",
            Kind::Tls => "tls",
        }
    }
}

/// A backend that answers `backend=<name>\n` once the first TLS record (the
/// ClientHello) has arrived, without doing any TLS itself.
pub(crate) async fn hello_backend(name: String, bind: SocketAddr) -> Result<SocketAddr> {
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
pub(crate) fn client_hello(sni: &str) -> Result<Vec<u8>> {
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
pub(crate) fn source(i: u64) -> IpAddr {
    IpAddr::from([127, 0, 1, 1 + (i % 16) as u8])
}

pub(crate) async fn hello_once(
    target: SocketAddr,
    hello: &[u8],
    want: &str,
    src: IpAddr,
) -> Result<Duration> {
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

pub(crate) async fn once(
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

pub(crate) fn envoy_cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime); `rest` starts at field 3.
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

pub(crate) fn clock_ticks_per_s() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

pub(crate) struct Bench {
    pub(crate) args: Args,
    pub(crate) hellos: Arc<HashMap<String, Vec<u8>>>,
    pub(crate) envoy_pid: u32,
    pub(crate) ticks: f64,
    pub(crate) listeners: Listeners,
}

/// What one round of the interleaved latency schedule measured.
pub(crate) struct LatencyRound {
    pub(crate) latencies: HashMap<Path, Vec<Duration>>,
    pub(crate) errors: HashMap<Path, u64>,
    /// Connections actually started per second.
    pub(crate) started_rate: f64,
}

impl Bench {
    /// The name and address the `n`th connection of `path` uses: proxied
    /// paths and direct rotate through the kind's names; the floor always
    /// asks for the first name, the one its fixed cluster serves.
    pub(crate) fn route<'t>(
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
    pub(crate) async fn rate(&self, kind: Kind, path: Path, targets: &[Target]) -> (f64, f64, u64) {
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
    pub(crate) async fn latency_round(
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
