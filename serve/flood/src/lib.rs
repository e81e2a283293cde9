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
//! Traffic goes only where a test points it: loopback, or a network
//! namespace the test created ([`Flood::start_in_netns`], [`in_netns`]).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

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

    #[test]
    fn rss_and_sockets_of_a_missing_process_are_none() {
        // Above the kernel's pid_max ceiling (2^22).
        assert_eq!(sample(1 << 23), None);
    }
}
