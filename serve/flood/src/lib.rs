//! Test support for the components' HTTP listeners (metrics, health, the
//! DHCP pair API): a [`Flood`] of the abuse a bounded listener must
//! survive, and a [`Watch`] on the serving process.
//!
//! The flood is what took the address agent past its container memory
//! limit under an unbounded serve loop: many connections, each sending
//! most of a large request head that never ends, plus connections that
//! send nothing at all. Every connection the server closes is opened again
//! after a short pause, so the listener stays saturated for as long as the
//! flood runs. The watch samples the serving process's resident memory
//! (`VmRSS` in `/proc/<pid>/status`) and its open sockets (`/proc/<pid>/fd`),
//! so a test can bound both: memory below the container's limit, sockets
//! at the listener's connection limit.
//!
//! A [`Siege`] puts the two together the way every component's flood test
//! runs them (baseline, flood, probes of the listener with a budget of its
//! own, peaks), and its [`Outcome::check`] is the one verdict those tests
//! give.
//!
//! Traffic goes only where a test points it: loopback, or a network
//! namespace the test created ([`Flood::start_in_netns`], [`in_netns`]).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What a flood sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Connections that send `head_bytes` of a request head that never
    /// ends, then wait for the server to close them.
    pub unfinished_heads: usize,
    /// Slowloris connections: the start of a request head, then one more
    /// header byte every second, never the end (bytes keep arriving, so
    /// only a bound on the whole head's time ends them).
    pub slow_heads: usize,
    /// Connections that send nothing and wait for the server to close them.
    pub idle: usize,
    /// Bytes of each unfinished head.
    pub head_bytes: usize,
    /// Pause before a closed connection is opened again.
    pub reconnect_after: Duration,
}

impl Shape {
    /// The size of the heads that took the address agent from 24 to 95 MiB
    /// with 1,000 connections.
    pub const HEAD_BYTES: usize = 58 * 1024;
}

/// No connection; [`Shape::HEAD_BYTES`] heads; a closed connection opened
/// again after 250 ms (enough to keep a listener's every slot taken without
/// spending the machine's CPU on connects).
impl Default for Shape {
    fn default() -> Self {
        Shape {
            unfinished_heads: 0,
            slow_heads: 0,
            idle: 0,
            head_bytes: Shape::HEAD_BYTES,
            reconnect_after: Duration::from_millis(250),
        }
    }
}

/// How one flooding connection behaves.
#[derive(Clone)]
enum Kind {
    Unfinished(Arc<Vec<u8>>),
    Slow,
    Idle,
}

/// What a flood's connections saw so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Connections established.
    pub opened: u64,
    /// Established connections the server closed (end of stream or reset).
    pub closed_by_server: u64,
    /// Connection attempts that failed.
    pub failed: u64,
}

#[derive(Default)]
struct Counts {
    opened: AtomicU64,
    closed_by_server: AtomicU64,
    failed: AtomicU64,
}

impl Counts {
    fn tally(&self) -> Tally {
        Tally {
            opened: self.opened.load(Ordering::Relaxed),
            closed_by_server: self.closed_by_server.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }
}

/// A running flood against one listener; stopped (every connection closed)
/// by [`Flood::stop`] or on drop.
pub struct Flood {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    counts: Arc<Counts>,
}

impl Flood {
    /// Starts flooding `target` from this network namespace.
    pub fn start(target: SocketAddr, shape: Shape) -> Flood {
        Flood::spawn(None, target, shape)
    }

    /// Starts flooding `target` from network namespace `netns` (a path such
    /// as `/run/netns/<name>`), for a listener inside a namespace the test
    /// created.
    pub fn start_in_netns(netns: impl Into<PathBuf>, target: SocketAddr, shape: Shape) -> Flood {
        Flood::spawn(Some(netns.into()), target, shape)
    }

    fn spawn(netns: Option<PathBuf>, target: SocketAddr, shape: Shape) -> Flood {
        let counts = Arc::new(Counts::default());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let c = Arc::clone(&counts);
        let thread = std::thread::spawn(move || {
            if let Some(ns) = netns {
                enter_netns(&ns);
            }
            // One thread is enough: every connection waits on the server.
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the flood");
            runtime.block_on(async move {
                let mut head = b"GET /metrics HTTP/1.1\r\nhost: flood\r\nx-pad: ".to_vec();
                head.resize(head.len() + shape.head_bytes, b'a');
                let head = Kind::Unfinished(Arc::new(head));
                let kinds = std::iter::repeat_n(head, shape.unfinished_heads)
                    .chain(std::iter::repeat_n(Kind::Slow, shape.slow_heads))
                    .chain(std::iter::repeat_n(Kind::Idle, shape.idle));
                let mut tasks = tokio::task::JoinSet::new();
                for kind in kinds {
                    tasks.spawn(hold(target, kind, shape.reconnect_after, Arc::clone(&c)));
                }
                let _ = stopped.await;
                tasks.shutdown().await;
            });
        });
        Flood {
            stop: Some(stop),
            thread: Some(thread),
            counts,
        }
    }

    /// What the connections saw so far.
    pub fn tally(&self) -> Tally {
        self.counts.tally()
    }

    /// Closes every connection of the flood and returns the tally.
    pub fn stop(mut self) -> Tally {
        self.halt();
        self.counts.tally()
    }

    fn halt(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.halt();
    }
}

/// One flooding connection, opened again each time the server closes it.
async fn hold(target: SocketAddr, kind: Kind, pause: Duration, counts: Arc<Counts>) {
    loop {
        match tokio::net::TcpStream::connect(target).await {
            Ok(s) => {
                counts.opened.fetch_add(1, Ordering::Relaxed);
                talk(s, &kind).await;
                counts.closed_by_server.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                counts.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
        tokio::time::sleep(pause).await;
    }
}

/// Sends what `kind` sends until the server closes the connection.
async fn talk(s: tokio::net::TcpStream, kind: &Kind) {
    let (mut rx, mut tx) = s.into_split();
    let closed = async move {
        let mut buf = [0u8; 512];
        while let Ok(n) = rx.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    };
    let send = async move {
        // A server that closes early resets the rest: that is the close
        // this connection waits for anyway.
        match kind {
            Kind::Unfinished(head) => {
                let _ = tx.write_all(head).await;
            }
            Kind::Slow => {
                if tx
                    .write_all(b"GET /metrics HTTP/1.1\r\nhost: flood\r\nx-slow: ")
                    .await
                    .is_ok()
                {
                    while tx.write_all(b"a").await.is_ok() {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
            Kind::Idle => {}
        }
        std::future::pending::<()>().await
    };
    tokio::select! {
        () = closed => {}
        () = send => {}
    }
}

/// One sample of a process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    /// Resident memory, bytes.
    pub rss: u64,
    /// Open socket descriptors (listeners, connections, UDP sockets).
    pub sockets: usize,
}

/// Resident memory of process `pid` in bytes (`VmRSS`), or `None` when it
/// is gone.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
}

/// Open socket descriptors of process `pid`, or `None` when it is gone.
pub fn open_sockets(pid: u32) -> Option<usize> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    Some(
        fds.filter_map(Result::ok)
            .filter(|e| {
                std::fs::read_link(e.path())
                    .is_ok_and(|t| t.to_string_lossy().starts_with("socket:"))
            })
            .count(),
    )
}

/// Both figures of process `pid` now.
pub fn sample(pid: u32) -> Option<Sample> {
    Some(Sample {
        rss: rss_bytes(pid)?,
        sockets: open_sockets(pid)?,
    })
}

/// Bytes as MiB, for messages.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The peaks a [`Watch`] saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Peaks {
    /// Largest resident memory, bytes.
    pub rss: u64,
    /// Most open sockets.
    pub sockets: usize,
    /// Samples taken (the process was there for each).
    pub samples: usize,
}

/// Samples a process every 20 ms until stopped, keeping the peaks.
pub struct Watch {
    pid: u32,
    stop: Arc<AtomicBool>,
    rss: Arc<AtomicU64>,
    sockets: Arc<AtomicUsize>,
    samples: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl Watch {
    /// Starts watching process `pid`.
    pub fn start(pid: u32) -> Watch {
        let stop = Arc::new(AtomicBool::new(false));
        let rss = Arc::new(AtomicU64::new(0));
        let sockets = Arc::new(AtomicUsize::new(0));
        let samples = Arc::new(AtomicUsize::new(0));
        let thread = {
            let (stop, rss, sockets, samples) = (
                Arc::clone(&stop),
                Arc::clone(&rss),
                Arc::clone(&sockets),
                Arc::clone(&samples),
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Some(s) = sample(pid) {
                        rss.fetch_max(s.rss, Ordering::Relaxed);
                        sockets.fetch_max(s.sockets, Ordering::Relaxed);
                        samples.fetch_add(1, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        Watch {
            pid,
            stop,
            rss,
            sockets,
            samples,
            thread: Some(thread),
        }
    }

    /// The peaks so far.
    pub fn peaks(&self) -> Peaks {
        Peaks {
            rss: self.rss.load(Ordering::Relaxed),
            sockets: self.sockets.load(Ordering::Relaxed),
            samples: self.samples.load(Ordering::Relaxed),
        }
    }

    /// Stops watching; the peaks, with one last sample.
    pub fn stop(mut self) -> Peaks {
        self.halt();
        self.final_peaks()
    }

    /// The peaks with one last sample (after [`Watch::halt`]).
    fn final_peaks(&self) -> Peaks {
        if let Some(s) = sample(self.pid) {
            self.rss.fetch_max(s.rss, Ordering::Relaxed);
            self.sockets.fetch_max(s.sockets, Ordering::Relaxed);
        }
        self.peaks()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.halt();
    }
}

/// A flood of one listener of a process, with the process watched: what
/// every component's flood test runs. Started with the process's figures
/// before the flood ([`Siege::start`]); the flood and the watch stop on
/// drop.
pub struct Siege {
    what: String,
    baseline: Sample,
    watch: Watch,
    flood: Flood,
    started: Instant,
}

/// The probe rounds of a [`Siege`]: each asks the listener with a
/// connection budget of its own (where the kubelet's probes go) and the
/// flooded one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Probes {
    /// Rounds run.
    pub rounds: u32,
    /// Rounds the listener with its own budget answered.
    pub own_listener: u32,
    /// Rounds the flooded listener answered (a comparison only: whether a
    /// probe finds one of the flood's slots free is a race).
    pub flooded_listener: u32,
}

/// The bounds a flooded process must keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Peak resident memory, bytes (below the container's limit, with room
    /// for the kernel's socket buffers).
    pub rss: u64,
    /// The flooded listener's connection limit.
    pub connections: usize,
    /// Other sockets the process may open meanwhile: the connection the
    /// accept loop is closing past the limit, a probe's, a poll's or a
    /// peer's.
    pub other_sockets: usize,
}

/// What a [`Siege`] saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The process and listener, for messages.
    pub what: String,
    /// The process before the flood.
    pub baseline: Sample,
    /// Its peaks during the flood.
    pub peaks: Peaks,
    /// What the flood's connections saw.
    pub tally: Tally,
    /// How long the flood ran.
    pub flooded_for: Duration,
    /// The probe rounds.
    pub probes: Probes,
}

impl Siege {
    /// Samples process `pid` (panics when it is not running), starts
    /// watching it and flooding `target` with `shape`, from network
    /// namespace `from` (a path such as `/run/netns/<name>`) when given.
    pub fn start(
        what: impl Into<String>,
        pid: u32,
        from: Option<&Path>,
        target: SocketAddr,
        shape: Shape,
    ) -> Siege {
        let what = what.into();
        let baseline =
            sample(pid).unwrap_or_else(|| panic!("{what}: process {pid} is not running"));
        let watch = Watch::start(pid);
        let flood = match from {
            Some(ns) => Flood::start_in_netns(ns, target, shape),
            None => Flood::start(target, shape),
        };
        Siege {
            what,
            baseline,
            watch,
            flood,
            started: Instant::now(),
        }
    }

    /// Waits until the server has closed `closed` of the flood's
    /// connections (every slot taken and recycled many times); panics if
    /// that takes longer than `within`.
    pub fn until_closed(&self, closed: u64, within: Duration) {
        while self.flood.tally().closed_by_server < closed {
            assert!(
                self.started.elapsed() < within,
                "{}: the flood never got going: {:?}",
                self.what,
                self.flood.tally()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `rounds` probe rounds, `every` apart: `round` asks the listener
    /// with its own budget and the flooded one, and says which answered.
    pub fn probe(
        &self,
        rounds: u32,
        every: Duration,
        mut round: impl FnMut() -> (bool, bool),
    ) -> Probes {
        let mut probes = Probes::default();
        while probes.rounds < rounds {
            probes.rounds += 1;
            let (own, flooded) = round();
            probes.own_listener += u32::from(own);
            probes.flooded_listener += u32::from(flooded);
            std::thread::sleep(every);
        }
        probes
    }

    /// Stops the flood and the watch; prints and returns what was seen.
    pub fn end(mut self, probes: Probes) -> Outcome {
        let flooded_for = self.started.elapsed();
        self.flood.halt();
        self.watch.halt();
        let outcome = Outcome {
            what: std::mem::take(&mut self.what),
            baseline: self.baseline,
            tally: self.flood.tally(),
            peaks: self.watch.final_peaks(),
            flooded_for,
            probes,
        };
        println!("{outcome}");
        outcome
    }
}

impl Outcome {
    /// The verdict every flood test gives: the listener with its own budget
    /// answered every probe round but one at most, the peak resident
    /// memory stayed below `bounds.rss`, and the process never held more
    /// of the flood's connections than the listener's limit (its sockets
    /// never rose above the baseline by more than the limit and
    /// `bounds.other_sockets`).
    pub fn check(&self, bounds: &Bounds) -> Result<(), String> {
        let Outcome {
            what,
            baseline,
            peaks,
            probes,
            ..
        } = self;
        let mut failed = Vec::new();
        if probes.own_listener + 1 < probes.rounds {
            failed.push(format!(
                "the listener with its own budget answered {} of {} probes",
                probes.own_listener, probes.rounds
            ));
        }
        if peaks.rss >= bounds.rss {
            failed.push(format!(
                "peak RSS {:.1} MiB, bound {:.1} MiB",
                mib(peaks.rss),
                mib(bounds.rss)
            ));
        }
        let most = baseline.sockets + bounds.connections + bounds.other_sockets;
        if peaks.sockets > most {
            failed.push(format!(
                "{} sockets at the peak, {} before the flood, limit {} (+{} others)",
                peaks.sockets, baseline.sockets, bounds.connections, bounds.other_sockets
            ));
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(format!("{what}: {}", failed.join("; ")))
        }
    }
}

/// The one line a flood test prints.
impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} flooded for {:.1} s ({:?}): RSS {:.1} -> peak {:.1} MiB, sockets {} -> peak {}; \
             probes answered by the listener with its own budget {}/{}, by the flooded one {}/{}",
            self.what,
            self.flooded_for.as_secs_f64(),
            self.tally,
            mib(self.baseline.rss),
            mib(self.peaks.rss),
            self.baseline.sockets,
            self.peaks.sockets,
            self.probes.own_listener,
            self.probes.rounds,
            self.probes.flooded_listener,
            self.probes.rounds,
        )
    }
}

/// `GET path` on a new connection to `addr` (`connection: close`): the
/// status and body, or `None` when the connection fails, is closed without
/// an answer, or `wait` passes.
pub fn get(addr: SocketAddr, path: &str, wait: Duration) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, wait).ok()?;
    s.set_read_timeout(Some(wait)).ok()?;
    s.set_write_timeout(Some(wait)).ok()?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nhost: probe\r\nconnection: close\r\n\r\n").as_bytes(),
    )
    .ok()?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).ok()?;
    let text = String::from_utf8_lossy(&out);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// Runs `f` on a thread that joined network namespace `netns` (a path such
/// as `/run/netns/<name>`): sockets it opens live there.
pub fn in_netns<T: Send + 'static>(
    netns: impl AsRef<Path>,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let ns = netns.as_ref().to_path_buf();
    std::thread::spawn(move || {
        enter_netns(&ns);
        f()
    })
    .join()
    .unwrap_or_else(|e| std::panic::resume_unwind(e))
}

/// Runs shell command `cmd` (namespace and link setup in tests); panics
/// with its stderr when it fails.
pub fn sh(cmd: &str) {
    let out = std::process::Command::new("sh")
        .args(["-c", cmd])
        .output()
        .unwrap_or_else(|e| panic!("cannot run sh -c {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Moves the calling thread into network namespace `ns`; panics when it
/// cannot (a test that floods the wrong namespace must not go on).
fn enter_netns(ns: &Path) {
    let file = std::fs::File::open(ns).unwrap_or_else(|e| panic!("open {}: {e}", ns.display()));
    // SAFETY: setns(2) with a namespace descriptor that is open for the
    // duration of the call; it changes this thread only.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(
        rc,
        0,
        "setns {}: {}",
        ns.display(),
        std::io::Error::last_os_error()
    );
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_flood_is_closed_by_a_listener_that_drops_every_connection_and_the_watch_sees_this_process()
    {
        // A listener that closes each connection as it accepts it.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicU64::new(0));
        let a = Arc::clone(&accepted);
        std::thread::spawn(move || {
            for s in listener.incoming() {
                a.fetch_add(1, Ordering::Relaxed);
                drop(s);
            }
        });
        let watch = Watch::start(std::process::id());
        let flood = Flood::start(
            addr,
            Shape {
                unfinished_heads: 20,
                slow_heads: 5,
                idle: 10,
                reconnect_after: Duration::from_millis(50),
                ..Shape::default()
            },
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while flood.tally().closed_by_server < 60 {
            assert!(std::time::Instant::now() < deadline, "{:?}", flood.tally());
            std::thread::sleep(Duration::from_millis(20));
        }
        let tally = flood.stop();
        let peaks = watch.stop();
        assert!(tally.opened >= tally.closed_by_server, "{tally:?}");
        assert!(accepted.load(Ordering::Relaxed) >= 60);
        assert!(
            peaks.samples > 0 && peaks.rss > 0 && peaks.sockets >= 1,
            "{peaks:?}"
        );
    }

    #[test]
    fn get_reads_status_and_body_and_none_without_an_answer() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for (i, s) in listener.incoming().enumerate() {
                let mut s = s.unwrap();
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf);
                if i == 0 {
                    let _ = s.write_all(
                        b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 8\r\n\r\ndraining",
                    );
                }
            }
        });
        assert_eq!(
            get(addr, "/healthz", Duration::from_secs(5)),
            Some((503, "draining".to_string()))
        );
        assert_eq!(get(addr, "/healthz", Duration::from_secs(5)), None);
    }

    fn outcome(own_listener: u32, rss: u64, sockets: usize) -> Outcome {
        Outcome {
            what: "oooi-test, metrics port".into(),
            baseline: Sample {
                rss: 10 << 20,
                sockets: 5,
            },
            peaks: Peaks {
                rss,
                sockets,
                samples: 100,
            },
            tally: Tally::default(),
            flooded_for: Duration::from_secs(8),
            probes: Probes {
                rounds: 40,
                own_listener,
                flooded_listener: 3,
            },
        }
    }

    #[test]
    fn the_verdict_names_every_bound_broken() {
        let bounds = Bounds {
            rss: 40 << 20,
            connections: 64,
            other_sockets: 2,
        };
        // At the edges: one probe missed, RSS just below, 5 + 64 + 2 sockets.
        assert_eq!(outcome(39, (40 << 20) - 1, 71).check(&bounds), Ok(()));
        let e = outcome(38, 40 << 20, 72).check(&bounds).unwrap_err();
        assert!(e.starts_with("oooi-test, metrics port: "), "{e}");
        assert!(e.contains("answered 38 of 40 probes"), "{e}");
        assert!(e.contains("peak RSS 40.0 MiB, bound 40.0 MiB"), "{e}");
        assert!(
            e.contains("72 sockets at the peak, 5 before the flood, limit 64 (+2 others)"),
            "{e}"
        );
        let e = outcome(40, 1 << 20, 80).check(&bounds).unwrap_err();
        assert!(
            !e.contains("probes") && !e.contains("RSS") && e.contains("80 sockets"),
            "{e}"
        );
        let line = outcome(40, 20 << 20, 60).to_string();
        assert!(
            line.contains("RSS 10.0 -> peak 20.0 MiB, sockets 5 -> peak 60"),
            "{line}"
        );
        assert!(
            line.contains("own budget 40/40, by the flooded one 3/40"),
            "{line}"
        );
    }

    #[test]
    fn a_siege_of_a_bounded_listener_in_this_process() {
        // A listener that keeps at most 4 connections and drops the rest,
        // and a second one the flood leaves alone.
        let flooded = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let own = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (target, own_addr) = (flooded.local_addr().unwrap(), own.local_addr().unwrap());
        std::thread::spawn(move || {
            let mut kept = std::collections::VecDeque::new();
            for s in flooded.incoming().flatten() {
                kept.push_back(s);
                if kept.len() > 4 {
                    kept.pop_front();
                }
            }
        });
        std::thread::spawn(move || {
            for mut s in own.incoming().flatten() {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf);
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
            }
        });
        let siege = Siege::start(
            "this test",
            std::process::id(),
            None,
            target,
            Shape {
                idle: 20,
                reconnect_after: Duration::from_millis(20),
                ..Shape::default()
            },
        );
        siege.until_closed(40, Duration::from_secs(20));
        let probes = siege.probe(3, Duration::from_millis(10), || {
            let ok = |a| get(a, "/healthz", Duration::from_secs(5)).is_some_and(|(s, _)| s == 200);
            (ok(own_addr), false)
        });
        assert_eq!(
            probes,
            Probes {
                rounds: 3,
                own_listener: 3,
                flooded_listener: 0
            }
        );
        let outcome = siege.end(probes);
        assert!(outcome.tally.closed_by_server >= 40, "{outcome}");
        assert!(
            outcome.peaks.samples > 0 && outcome.peaks.sockets > 0,
            "{outcome}"
        );
        // The flood's own sockets are this process's too: only the RSS
        // and probe verdicts are this test's to give.
        let bounds = Bounds {
            rss: u64::MAX,
            connections: usize::MAX / 2,
            other_sockets: 0,
        };
        assert_eq!(outcome.check(&bounds), Ok(()));
    }

    #[test]
    fn rss_and_sockets_of_a_missing_process_are_none() {
        // Above the kernel's pid_max ceiling (2^22).
        assert_eq!(sample(1 << 23), None);
    }
}
