//! Agents in one process against the shared mocked API, each with its own
//! switchable connection to it, and a recording interface that models the
//! kernel's address lifetime, so the tests can measure who answered for an
//! address when.

#![allow(dead_code)]
#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

use std::collections::BTreeMap;
use std::io;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ipnet::Ipv4Net;
use oooi_addr_agent::machine::Timing;
use oooi_addr_agent::metrics::Metrics;
use oooi_addr_agent::plane::Plane;
use oooi_addr_agent::run::{self, Announce, Settings};
use oooi_kube_mock::MockApi;
use tokio::sync::watch;

/// Test timing: 600 ms lease, 400 ms renew deadline, 100 ms period, 300 ms
/// home settle.
pub fn timing() -> Timing {
    Timing::new(
        Duration::from_millis(600),
        Duration::from_millis(400),
        Duration::from_millis(100),
        Duration::from_millis(300),
    )
    .unwrap()
}

/// One time an address was on one replica's interface.
#[derive(Debug, Clone)]
pub struct Interval {
    /// Who.
    pub who: String,
    /// Which address.
    pub ip: Ipv4Addr,
    /// From.
    pub start: Instant,
    /// To (for an open interval: its kernel expiry or now).
    pub end: Instant,
}

#[derive(Default)]
struct WireState {
    open: BTreeMap<(String, Ipv4Addr), (Instant, Instant)>,
    closed: Vec<Interval>,
    announces: Vec<(Instant, String, Ipv4Addr)>,
}

/// Every replica's interface, as one shared record.
#[derive(Clone, Default)]
pub struct Wire(Arc<Mutex<WireState>>);

impl Wire {
    fn close_expired(s: &mut WireState, now: Instant) {
        let expired: Vec<_> = s
            .open
            .iter()
            .filter(|(_, (_, exp))| *exp <= now)
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        for ((who, ip), (start, exp)) in expired {
            s.open.remove(&(who.clone(), ip));
            s.closed.push(Interval {
                who,
                ip,
                start,
                end: exp,
            });
        }
    }

    /// Who has `ip` on the interface now.
    pub fn holders(&self, ip: Ipv4Addr) -> Vec<String> {
        let mut s = self.0.lock().unwrap();
        Self::close_expired(&mut s, Instant::now());
        s.open
            .keys()
            .filter(|(_, i)| *i == ip)
            .map(|(w, _)| w.clone())
            .collect()
    }

    /// Every interval so far (open ones end now or at their expiry).
    pub fn intervals(&self, ip: Ipv4Addr) -> Vec<Interval> {
        self.intervals_at(ip, Instant::now())
    }

    fn intervals_at(&self, ip: Ipv4Addr, now: Instant) -> Vec<Interval> {
        let mut s = self.0.lock().unwrap();
        Self::close_expired(&mut s, now);
        let mut out: Vec<Interval> = s.closed.iter().filter(|i| i.ip == ip).cloned().collect();
        for ((who, i), (start, exp)) in &s.open {
            if *i == ip {
                out.push(Interval {
                    who: who.clone(),
                    ip: *i,
                    start: *start,
                    end: (*exp).min(now),
                });
            }
        }
        out.sort_by_key(|i| i.start);
        out
    }

    /// The longest time two replicas had `ip` at once.
    pub fn longest_overlap(&self, ip: Ipv4Addr) -> Duration {
        let iv = self.intervals(ip);
        let mut worst = Duration::ZERO;
        for a in &iv {
            for b in &iv {
                if a.who < b.who {
                    let start = a.start.max(b.start);
                    let end = a.end.min(b.end);
                    worst = worst.max(end.saturating_duration_since(start));
                }
            }
        }
        worst
    }

    /// The longest time between `from` and now that nobody had `ip`.
    pub fn longest_gap(&self, ip: Ipv4Addr, from: Instant) -> Duration {
        let now = Instant::now();
        let iv = self.intervals_at(ip, now);
        let mut covered_to = from;
        let mut worst = Duration::ZERO;
        for i in iv.iter().filter(|i| i.end > from) {
            if i.start > covered_to {
                worst = worst.max(i.start - covered_to);
            }
            covered_to = covered_to.max(i.end);
        }
        worst.max(now.saturating_duration_since(covered_to))
    }

    /// Gratuitous ARPs sent for `ip` by `who`.
    pub fn announces(&self, who: &str, ip: Ipv4Addr) -> usize {
        let s = self.0.lock().unwrap();
        s.announces
            .iter()
            .filter(|(_, w, i)| w == who && *i == ip)
            .count()
    }
}

/// One replica's interface on the [`Wire`].
pub struct FakePlane {
    who: String,
    wire: Wire,
}

impl Plane for FakePlane {
    fn present(&self) -> io::Result<Vec<Ipv4Net>> {
        let mut s = self.wire.0.lock().unwrap();
        Wire::close_expired(&mut s, Instant::now());
        Ok(s.open
            .keys()
            .filter(|(w, _)| *w == self.who)
            .map(|(_, ip)| Ipv4Net::new(*ip, 24).unwrap())
            .collect())
    }

    fn add(&self, net: Ipv4Net, lifetime: Duration) -> io::Result<()> {
        let mut s = self.wire.0.lock().unwrap();
        let now = Instant::now();
        Wire::close_expired(&mut s, now);
        // The kernel rounds lifetimes up to whole seconds: model the test
        // timing's lifetime exactly instead (stricter).
        let key = (self.who.clone(), net.addr());
        let start = s.open.get(&key).map(|(st, _)| *st).unwrap_or(now);
        s.open.insert(key, (start, now + lifetime));
        Ok(())
    }

    fn remove(&self, net: Ipv4Net) -> io::Result<()> {
        let mut s = self.wire.0.lock().unwrap();
        let now = Instant::now();
        Wire::close_expired(&mut s, now);
        if let Some((start, exp)) = s.open.remove(&(self.who.clone(), net.addr())) {
            s.closed.push(Interval {
                who: self.who.clone(),
                ip: net.addr(),
                start,
                end: exp.min(now),
            });
        }
        Ok(())
    }

    fn announce(&self, ip: Ipv4Addr) -> io::Result<()> {
        let mut s = self.wire.0.lock().unwrap();
        s.announces.push((Instant::now(), self.who.clone(), ip));
        Ok(())
    }
}

/// A running agent.
pub struct Agent {
    /// Its identity.
    pub who: String,
    /// Its readiness.
    pub ready: watch::Sender<bool>,
    /// Stops it gracefully.
    pub stop: watch::Sender<bool>,
    /// False cuts its connection to the API (requests go unanswered).
    pub api: Arc<AtomicBool>,
    /// Its metrics.
    pub metrics: Metrics,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Agent {
    /// Kills it (SIGKILL: nothing released, the kernel lifetime of its
    /// addresses runs out).
    pub fn kill(&self) {
        self.task.abort();
    }

    /// Waits for a graceful stop.
    pub async fn join(self) -> anyhow::Result<()> {
        self.task.await?
    }
}

/// A kube client of `mock` that answers only while `on` is true.
pub fn switched_client(mock: &MockApi, on: Arc<AtomicBool>) -> kube::Client {
    let inner = mock.client.clone();
    let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let inner = inner.clone();
        let on = on.clone();
        async move {
            if !on.load(Ordering::SeqCst) {
                return std::future::pending().await;
            }
            inner.send(req).await
        }
    });
    kube::Client::new(svc, "oooi-system")
}

/// The component's addresses.
pub fn addresses(ips: &[Ipv4Addr]) -> Vec<Ipv4Net> {
    ips.iter()
        .map(|ip| Ipv4Net::new(*ip, 24).unwrap())
        .collect()
}

/// Starts an agent `who` with home `home` over `ips`.
pub fn start(
    mock: &MockApi,
    wire: &Wire,
    who: &str,
    ips: &[Ipv4Addr],
    home: Option<Ipv4Addr>,
    ready: bool,
) -> Agent {
    let api = Arc::new(AtomicBool::new(true));
    let client = switched_client(mock, api.clone());
    let (ready_tx, ready_rx) = watch::channel(ready);
    let (stop_tx, stop_rx) = watch::channel(false);
    let metrics = Metrics::new();
    let settings = Settings {
        identity: who.to_string(),
        namespace: "oooi-system".to_string(),
        lease_prefix: "vlan100-dns".to_string(),
        addresses: addresses(ips),
        home,
        timing: timing(),
        announce: Announce {
            count: 3,
            spacing: Duration::from_millis(20),
            every: Duration::from_millis(200),
        },
        held: Default::default(),
    };
    let plane = Arc::new(FakePlane {
        who: who.to_string(),
        wire: wire.clone(),
    });
    let task = tokio::spawn(run::run(
        settings,
        client,
        plane,
        ready_rx,
        stop_rx,
        metrics.clone(),
    ));
    Agent {
        who: who.to_string(),
        ready: ready_tx,
        stop: stop_tx,
        api,
        metrics,
        task,
    }
}

/// Waits until `cond` holds (polling every 10 ms), at most `limit`;
/// returns how long it took.
pub async fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> Option<Duration> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if cond() {
            return Some(t0.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// Path of the Lease of `ip`.
pub fn lease_path(ip: Ipv4Addr) -> String {
    let [a, b, c, d] = ip.octets();
    format!(
        "/apis/coordination.k8s.io/v1/namespaces/oooi-system/leases/vlan100-dns-{a}-{b}-{c}-{d}"
    )
}
