//! The driver: one task per floating address runs its [`Machine`] against
//! the Lease API and the interface; a readiness poller feeds all of them.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use ipnet::Ipv4Net;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use oooi_envoy_gate::{ReadyUrl, probe};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::defend::Held;
use crate::lease::{LeaseClient, lease_name};
use crate::machine::{Intent, Machine, NetAction, Request, Timing, WriteOutcome};
use crate::metrics::Metrics;
use crate::plane::Plane;

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
    /// This replica's identity in the Leases (the pod name).
    pub identity: String,
    /// Namespace of the Leases.
    pub namespace: String,
    /// Lease name prefix (`<prefix>-a-b-c-d`).
    pub lease_prefix: String,
    /// Every floating address of the component, with its prefix.
    pub addresses: Vec<Ipv4Net>,
    /// This replica's own address, if it is one of them.
    pub home: Option<Ipv4Addr>,
    /// Lease timing.
    pub timing: Timing,
    /// Announcements.
    pub announce: Announce,
    /// Where the address loops record which Leases are held (read by
    /// [`crate::defend`]).
    pub held: Held,
}

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
            info!(ready, url = %format!("http://{}{}", url.addr, url.path), "replica readiness changed");
            metrics.set_ready(ready);
            if tx.send(ready).is_err() {
                return;
            }
        }
    }
}

/// Runs every address until `stop` turns true, then releases (each address
/// stays until the next holder shows up or its renew deadline) and returns
/// once nothing is held.
pub async fn run(
    settings: Settings,
    client: kube::Client,
    plane: Arc<dyn Plane>,
    ready: watch::Receiver<bool>,
    stop: watch::Receiver<bool>,
    metrics: Metrics,
) -> anyhow::Result<()> {
    // No address without its Lease: one the interface already has (the
    // pod's static address, configured by the CNI before any container
    // starts, while another replica may hold it; or one left by an earlier
    // run of this container) goes before anything else, and comes back
    // only through its Lease. A replaced pod so never answers beside the
    // holder for the time the agent needs to start and read.
    for net in plane.present()? {
        if settings.addresses.iter().any(|a| a.addr() == net.addr()) {
            match plane.remove(net) {
                Ok(()) => {
                    info!(address = %net, "address on the interface at start dropped until its Lease is held")
                }
                Err(e) => {
                    warn!(address = %net, error = %e, "removing an address found at start failed")
                }
            }
        }
    }
    let present = plane.present()?;
    let api: Api<Lease> = Api::namespaced(client, &settings.namespace);
    let mut tasks = tokio::task::JoinSet::new();
    for net in &settings.addresses {
        let net = *net;
        let home = settings.home == Some(net.addr());
        let on = present.iter().any(|p| p.addr() == net.addr());
        let machine = Machine::new(settings.identity.clone(), home, settings.timing, on);
        if on {
            metrics.set_held(&net.addr().to_string(), true);
        }
        let lease = LeaseClient::new(
            api.clone(),
            lease_name(&settings.lease_prefix, net.addr()),
            net.addr(),
            settings.timing.lease_duration,
            metrics.clone(),
        );
        info!(address = %net, home, on_interface = on, lease = lease.name(), "managing address");
        tasks.spawn(address_loop(
            net,
            machine,
            lease,
            plane.clone(),
            settings.announce,
            settings.held.clone(),
            ready.clone(),
            stop.clone(),
            metrics.clone(),
        ));
    }
    while let Some(done) = tasks.join_next().await {
        done?;
    }
    Ok(())
}

struct Ctx {
    net: Ipv4Net,
    name: String,
    plane: Arc<dyn Plane>,
    announce: Announce,
    lifetime: Duration,
    metrics: Metrics,
    last_announce: Option<Instant>,
}

impl Ctx {
    fn apply(&mut self, action: NetAction) {
        let (net, name) = (self.net, self.name.as_str());
        match action {
            NetAction::Add => {
                match self.plane.add(net, self.lifetime) {
                    Ok(()) => info!(address = %net, "address taken"),
                    Err(e) => warn!(address = %net, error = %e, "adding the address failed"),
                }
                self.metrics.acquired(name);
                self.metrics.set_held(name, true);
                // The first announcement at once, the rest spaced.
                let (plane, ip, a) = (self.plane.clone(), net.addr(), self.announce);
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
                self.last_announce = Some(Instant::now());
            }
            NetAction::Refresh => {
                if let Err(e) = self.plane.add(net, self.lifetime) {
                    warn!(address = %net, error = %e, "refreshing the address failed");
                }
            }
            NetAction::Remove(reason) => {
                match self.plane.remove(net) {
                    Ok(()) => info!(address = %net, %reason, "address dropped"),
                    Err(e) => {
                        warn!(address = %net, %reason, error = %e, "removing the address failed")
                    }
                }
                self.metrics.dropped(name, reason.as_str());
                self.metrics.set_held(name, false);
                self.last_announce = None;
            }
        }
    }

    fn announce_again(&mut self, now: Instant) {
        if self
            .last_announce
            .is_some_and(|t| now >= t + self.announce.every)
        {
            if let Err(e) = self.plane.announce(self.net.addr()) {
                warn!(address = %self.net, error = %e, "gratuitous ARP failed");
            }
            self.last_announce = Some(now);
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn address_loop(
    net: Ipv4Net,
    mut machine: Machine,
    mut lease: LeaseClient,
    plane: Arc<dyn Plane>,
    announce: Announce,
    held: Held,
    mut ready: watch::Receiver<bool>,
    mut stop: watch::Receiver<bool>,
    metrics: Metrics,
) {
    let timing = machine.timing();
    let mut ctx = Ctx {
        net,
        name: net.addr().to_string(),
        plane,
        announce,
        lifetime: timing.renew_deadline,
        metrics,
        last_announce: None,
    };
    // Stopping ends at the latest a renew deadline plus two periods after
    // it began, whatever the API does.
    let mut stop_by: Option<Instant> = None;
    loop {
        let stopping = *stop.borrow();
        if stopping && stop_by.is_none() {
            stop_by = Some(Instant::now() + timing.renew_deadline + 2 * timing.retry_period);
        }
        let now = Instant::now().into_std();
        machine.set_ready(now, *ready.borrow() && !stopping);
        if let Some(a) = machine.fence(now) {
            ctx.apply(a);
        }
        let step = machine.next(now);
        if let Some(a) = step.before {
            ctx.apply(a);
        }
        let timeout = machine.request_timeout(now);
        let mut write_now = false;
        match step.request {
            Request::Read => match tokio::time::timeout(timeout, lease.read()).await {
                Ok(Ok(observation)) => {
                    let seen = Instant::now().into_std();
                    if let Some(a) = machine.observe(seen, observation) {
                        ctx.apply(a);
                    }
                    write_now = machine.wants_to_write(seen);
                }
                Ok(Err(e)) => debug!(lease = lease.name(), error = %e, "reading the Lease failed"),
                Err(_) => debug!(lease = lease.name(), "reading the Lease timed out"),
            },
            Request::Write(write) => {
                let sent = Instant::now().into_std();
                let outcome = tokio::time::timeout(timeout, lease.write(&write))
                    .await
                    .unwrap_or(WriteOutcome::Failed);
                if write.intent == Intent::Renew && !matches!(outcome, WriteOutcome::Written(_)) {
                    ctx.metrics.renew_failed(&ctx.name);
                }
                debug!(
                    lease = lease.name(),
                    intent = write.intent.as_str(),
                    ?outcome,
                    "Lease written"
                );
                // Someone else wrote: read again at once, not a period
                // later (a holder's renew deadline would pass meanwhile).
                write_now = outcome == WriteOutcome::Conflict;
                for a in machine.written(sent, Instant::now().into_std(), &write, outcome) {
                    ctx.apply(a);
                }
            }
        }
        let now = Instant::now();
        if let Some(a) = machine.fence(now.into_std()) {
            ctx.apply(a);
        }
        // Only the holder announces: a replica that is handing the
        // address on must not pull the neighbours back to itself.
        if machine.holds() {
            ctx.announce_again(now);
        }
        held.set(net.addr(), machine.holds());
        if stopping && (machine.is_idle() || stop_by.is_some_and(|t| now >= t)) {
            held.set(net.addr(), false);
            if machine.address_on() {
                ctx.apply(NetAction::Remove(crate::machine::DropReason::Drained));
            }
            return;
        }
        if write_now {
            continue;
        }
        // Next round after a period, at the fence deadline, or at once when
        // readiness or stopping changes.
        let mut wake = now + timing.retry_period;
        if let Some(d) = machine.deadline() {
            wake = wake.min(Instant::from_std(d));
        }
        tokio::select! {
            _ = tokio::time::sleep_until(wake) => {}
            r = ready.changed() => { if r.is_err() { tokio::time::sleep_until(wake).await } }
            s = stop.changed() => { if s.is_err() { tokio::time::sleep_until(wake).await } }
        }
    }
}
