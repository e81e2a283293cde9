//! The driver: one loop runs the [`Machine`] against the adverts arriving
//! from the VLAN, the replica's readiness and a ticker, sends this
//! replica's adverts and changes the interface as the machine says. A
//! readiness poller feeds it.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::time::Duration;

use ipnet::Ipv4Net;
use oooi_process::ready::{ReadyUrl, probe};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::advert::{Advert, Malformed, group_id};
use crate::defend::Held;
use crate::machine::{Machine, NetAction, Rejected, Timing};
use crate::metrics::Metrics;
use crate::plane::Plane;
use crate::tickle::{self, Known, RawSender};

/// How often the held addresses' connections are shared.
const SHARE_EVERY: Duration = Duration::from_secs(1);

/// Gratuitous ARP settings.
#[derive(Debug, Clone, Copy)]
pub struct Announce {
    /// Announcements right after taking an address.
    pub count: u32,
    /// Time between them.
    pub spacing: Duration,
    /// While an address is held, one more announcement this often (a pod
    /// created with the same static address may have announced itself).
    pub every: Duration,
}

impl Default for Announce {
    fn default() -> Announce {
        Announce {
            count: 3,
            spacing: Duration::from_millis(200),
            every: Duration::from_secs(1),
        }
    }
}

/// What one agent runs with.
#[derive(Debug, Clone)]
pub struct Settings {
    /// This replica's name, for logs (the pod name).
    pub identity: String,
    /// The component's group name: only adverts of the same group count.
    pub group: String,
    /// Every floating address of the component, with its prefix, in the
    /// order every replica is given (replica `i`'s home is address `i`).
    pub addresses: Vec<Ipv4Net>,
    /// This replica's index: its home is `addresses[me]`.
    pub me: usize,
    /// Advert timing.
    pub timing: Timing,
    /// Announcements.
    pub announce: Announce,
    /// Where the driver records which addresses are held (read by
    /// [`crate::defend`]).
    pub held: Held,
    /// Share the established connections to held addresses, and end a
    /// lost holder's connections on a taken address ([`crate::tickle`]).
    pub reset: bool,
}

/// How adverts leave: one broadcast frame per call.
pub type SendAdvert = Box<dyn Fn(&[u8]) -> io::Result<()> + Send + Sync>;

/// A received advert frame: its payload and its source MAC.
pub type Frame = (Vec<u8>, [u8; 6]);

/// Polls `url` every `interval`; ready after one 200, not ready after
/// `failures` misses in a row. Sends each change on `tx`.
pub async fn poll_ready(
    url: ReadyUrl,
    interval: Duration,
    failures: u32,
    tx: watch::Sender<bool>,
    metrics: Metrics,
) {
    let timeout = interval.max(Duration::from_millis(100));
    let mut misses = 0u32;
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let u = url.clone();
        let code = tokio::task::spawn_blocking(move || probe(&u, timeout))
            .await
            .ok()
            .and_then(Result::ok);
        let ok = code == Some(200);
        misses = if ok { 0 } else { misses.saturating_add(1) };
        let ready = ok || (*tx.borrow() && misses < failures);
        if ready != *tx.borrow() {
            info!(ready, url = %url, "replica readiness changed");
            metrics.set_ready(ready);
            if tx.send(ready).is_err() {
                return;
            }
        }
    }
}

/// A random incarnation id (the kernel's generator; the time and the
/// process id if that fails).
pub fn incarnation() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: b is valid for 8 bytes.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n == 8 {
        return u64::from_ne_bytes(b);
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ (u64::from(std::process::id()) << 32)
}

struct Driver {
    settings: Settings,
    plane: Arc<dyn Plane>,
    send: SendAdvert,
    metrics: Metrics,
    last_announce: Vec<Option<Instant>>,
    /// Told of every address taken.
    taken: Option<mpsc::UnboundedSender<Ipv4Addr>>,
    /// The connections the peers shared.
    known: Known,
    /// Where tickles leave (when resetting is on and the socket opened).
    raw: Option<Arc<RawSender>>,
    last_shared: Option<Instant>,
}

impl Driver {
    fn name(&self, k: usize) -> String {
        self.settings.addresses[k].addr().to_string()
    }

    fn apply(&mut self, k: usize, action: NetAction) {
        let net = self.settings.addresses[k];
        let name = self.name(k);
        let lifetime = self.settings.timing.lifetime;
        match action {
            NetAction::Add => {
                match self.plane.add(net, lifetime) {
                    Ok(()) => info!(address = %net, "address taken"),
                    Err(e) => warn!(address = %net, error = %e, "adding the address failed"),
                }
                self.metrics.acquired(&name);
                self.metrics.set_held(&name, true);
                self.burst(k);
                if let Some(t) = &self.taken {
                    let _ = t.send(net.addr());
                }
                self.tickle(k);
            }
            NetAction::Announce => {
                info!(address = %net, "address announced again: a peer came back or a hand-over was called off");
                self.burst(k);
            }
            NetAction::Remove(reason) => {
                match self.plane.remove(net) {
                    Ok(()) => info!(address = %net, %reason, "address dropped"),
                    Err(e) => {
                        warn!(address = %net, %reason, error = %e, "removing the address failed")
                    }
                }
                self.metrics.dropped(&name, reason.as_str());
                self.metrics.set_held(&name, false);
                self.last_announce[k] = None;
            }
        }
    }

    /// Ends the connections the peers had on address `k`: a tickle to each
    /// client once the first announcement has had time to arrive, and once
    /// more a second later (a client whose neighbour entry was fresh kept
    /// the old MAC for its `locktime`).
    fn tickle(&mut self, k: usize) {
        let Some(raw) = self.raw.clone() else {
            return;
        };
        let now = Instant::now().into_std();
        let conns = self.known.of(k as u16, now);
        if conns.is_empty() {
            return;
        }
        let ip = self.settings.addresses[k].addr();
        info!(address = %ip, connections = conns.len(), "ending the connections the previous holder had");
        self.metrics.tickles(conns.len());
        tokio::spawn(async move {
            for wait in [Duration::from_millis(50), Duration::from_secs(1)] {
                tokio::time::sleep(wait).await;
                for c in &conns {
                    if let Err(e) = raw.tickle(SocketAddrV4::new(ip, c.port), c.client) {
                        debug!(address = %ip, client = %c.client, error = %e, "tickle failed");
                    }
                }
            }
        });
    }

    /// Shares the established connections to the held addresses, once a
    /// second.
    fn share(&mut self, m: &Machine, now: Instant) {
        if self.raw.is_none() || self.last_shared.is_some_and(|t| now < t + SHARE_EVERY) {
            return;
        }
        self.last_shared = Some(now);
        let held: Vec<Ipv4Addr> = self
            .settings
            .addresses
            .iter()
            .enumerate()
            .map(|(k, a)| {
                if m.holds_address(k) {
                    a.addr()
                } else {
                    Ipv4Addr::UNSPECIFIED
                }
            })
            .collect();
        if held.iter().all(|a| a.is_unspecified()) {
            return;
        }
        let Ok(text) = std::fs::read_to_string("/proc/net/tcp") else {
            return;
        };
        let mut conns = tickle::parse_proc_net_tcp(&text, &held);
        conns.truncate(tickle::MAX_SHARED);
        let group = group_id(&self.settings.group);
        for frame in tickle::encode(self.settings.me as u16, group, &conns) {
            if let Err(e) = (self.send)(&frame) {
                debug!(error = %e, "sending connections failed");
            }
        }
    }

    /// The first announcement at once, the rest spaced.
    fn burst(&mut self, k: usize) {
        let (plane, ip, a) = (
            self.plane.clone(),
            self.settings.addresses[k].addr(),
            self.settings.announce,
        );
        tokio::spawn(async move {
            for i in 0..a.count {
                if i > 0 {
                    tokio::time::sleep(a.spacing).await;
                }
                if let Err(e) = plane.announce(ip) {
                    warn!(address = %ip, error = %e, "gratuitous ARP failed");
                }
            }
        });
        self.last_announce[k] = Some(Instant::now());
    }

    fn send_advert(&self, m: &mut Machine, now: Instant) {
        let a = m.advert(now.into_std());
        match (self.send)(&a.encode()) {
            Ok(()) => self.metrics.advert_sent(),
            Err(e) => debug!(error = %e, "sending an advert failed"),
        }
    }

    /// One machine round; true when an address changed.
    fn round(&mut self, m: &mut Machine, now: Instant, ready: bool) -> bool {
        let acts = m.tick(now.into_std(), ready);
        let changed = !acts.is_empty();
        for (k, a) in acts {
            self.apply(k, a);
        }
        for k in 0..self.settings.addresses.len() {
            self.settings
                .held
                .set(self.settings.addresses[k].addr(), m.holds_address(k));
        }
        self.metrics.set_peers(m.peers_alive(now.into_std()));
        changed
    }

    /// Pushes the kernel lifetime of every address on the interface out,
    /// and announces the held ones every [`Announce::every`].
    fn refresh(&mut self, m: &Machine, now: Instant) {
        for k in 0..self.settings.addresses.len() {
            if !m.address_on(k) {
                continue;
            }
            let net = self.settings.addresses[k];
            if let Err(e) = self.plane.add(net, self.settings.timing.lifetime) {
                warn!(address = %net, error = %e, "refreshing the address failed");
            }
            // Only the holder announces: a replica handing the address on
            // must not pull the neighbours back to itself.
            if m.holds_address(k)
                && self.last_announce[k].is_some_and(|t| now >= t + self.settings.announce.every)
            {
                if let Err(e) = self.plane.announce(net.addr()) {
                    warn!(address = %net, error = %e, "gratuitous ARP failed");
                }
                self.last_announce[k] = Some(now);
            }
        }
    }
}

/// Runs the agent until `stop` turns true, then hands every address on
/// (each stays until its new owner says it holds it, or the drain time)
/// and returns once nothing is held. `frames` brings the advert frames
/// received on the VLAN; `send` broadcasts one; `taken` (if any) is told
/// of every address this replica takes.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    settings: Settings,
    plane: Arc<dyn Plane>,
    mut frames: mpsc::Receiver<Frame>,
    send: SendAdvert,
    taken: Option<mpsc::UnboundedSender<Ipv4Addr>>,
    mut ready: watch::Receiver<bool>,
    mut stop: watch::Receiver<bool>,
    metrics: Metrics,
) -> anyhow::Result<()> {
    // No address without ownership: one the interface already has (the
    // pod's static address, configured by the CNI before any container
    // starts, while another replica may hold it; or one left by an earlier
    // run of this container) goes before anything else, and comes back
    // only once this replica owns it. A replaced pod so never answers
    // beside the holder for the time the agent needs to start and listen.
    for net in plane.present()? {
        if settings.addresses.iter().any(|a| a.addr() == net.addr()) {
            match plane.remove(net) {
                Ok(()) => {
                    info!(address = %net, "address on the interface at start dropped until this replica owns it")
                }
                Err(e) => {
                    warn!(address = %net, error = %e, "removing an address found at start failed")
                }
            }
        }
    }
    let n = settings.addresses.len();
    let group = group_id(&settings.group);
    let timing = settings.timing;
    let mut m = Machine::new(
        settings.me,
        n,
        group,
        incarnation(),
        timing,
        Instant::now().into_std(),
    )?;
    let raw = if settings.reset {
        match RawSender::open() {
            Ok(r) => Some(Arc::new(r)),
            Err(e) => {
                warn!(error = %e, "no raw socket (CAP_NET_RAW): a lost holder's connections are not ended");
                None
            }
        }
    } else {
        None
    };
    let mut d = Driver {
        settings,
        plane,
        send,
        metrics,
        last_announce: vec![None; n],
        taken,
        known: Known::default(),
        raw,
        last_shared: None,
    };
    let mut ticker = tokio::time::interval(timing.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Stopping ends at the latest a drain time and two intervals after it
    // began, whatever the peers do.
    let mut stop_by: Option<Instant> = None;
    let mut frames_open = true;
    loop {
        let wake = m
            .deadline()
            .map(Instant::from_std)
            .unwrap_or_else(|| Instant::now() + timing.interval);
        let mut send_now = false;
        tokio::select! {
            _ = ticker.tick() => {
                send_now = true;
                let now = Instant::now();
                let is_ready = *ready.borrow() && !*stop.borrow();
                d.round(&mut m, now, is_ready);
                d.refresh(&m, now);
                d.share(&m, now);
            }
            f = frames.recv(), if frames_open => match f {
                Some((payload, src)) => {
                    let now = Instant::now();
                    let accepted = match Advert::decode(&payload, group) {
                        Ok(a) => match m.receive(now.into_std(), src, &a) {
                            Ok(()) => { d.metrics.advert_received("accepted"); true }
                            Err(e) => {
                                d.metrics.advert_received(e.as_str());
                                if e == Rejected::Own {
                                    warn!("an advert from another host names this replica's own index: two replicas run with the same --home");
                                }
                                false
                            }
                        },
                        Err(Malformed::NotAdvert) => {
                            match tickle::decode(&payload, group) {
                                Some((from, conns)) if m.peer_mac(usize::from(from)) == Some(src) => {
                                    d.metrics.advert_received("connections");
                                    d.known.learn(now.into_std(), &conns);
                                }
                                _ => d.metrics.advert_received("not_advert"),
                            }
                            false
                        }
                        Err(e) => {
                            d.metrics.advert_received(match e {
                                Malformed::NotAdvert => "not_advert",
                                Malformed::Version(_) => "version",
                                Malformed::Check => "check",
                                Malformed::OtherGroup => "other_group",
                            });
                            false
                        }
                    };
                    if accepted {
                        let is_ready = *ready.borrow() && !*stop.borrow();
                        send_now = d.round(&mut m, now, is_ready);
                    }
                }
                None => {
                    warn!("the advert receiver stopped: this replica hears no peer");
                    frames_open = false;
                }
            },
            r = ready.changed() => {
                if r.is_err() { tokio::time::sleep_until(wake).await }
                send_now = true;
                let is_ready = *ready.borrow() && !*stop.borrow();
                d.round(&mut m, Instant::now(), is_ready);
            }
            s = stop.changed() => {
                if s.is_err() { tokio::time::sleep_until(wake).await }
                send_now = true;
                d.round(&mut m, Instant::now(), false);
            }
            _ = tokio::time::sleep_until(wake) => {
                send_now = d.round(&mut m, Instant::now(), *ready.borrow() && !*stop.borrow());
            }
        }
        let now = Instant::now();
        if send_now {
            d.send_advert(&mut m, now);
        }
        if *stop.borrow() {
            let by = *stop_by.get_or_insert(now + timing.drain + 2 * timing.interval);
            if m.is_idle() || now >= by {
                for k in 0..n {
                    d.settings.held.set(d.settings.addresses[k].addr(), false);
                    if m.address_on(k) {
                        let net = d.settings.addresses[k];
                        if let Err(e) = d.plane.remove(net) {
                            warn!(address = %net, error = %e, "removing the address failed");
                        }
                        d.metrics.dropped(&d.name(k), "stopped");
                        d.metrics.set_held(&d.name(k), false);
                        info!(address = %net, "address dropped at the stop");
                    }
                }
                return Ok(());
            }
        }
    }
}
