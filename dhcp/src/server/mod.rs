//! The I/O side: the UDP socket on port 67, the durable store, reloads and
//! periodic work. Everything the protocol decides happens in
//! [`crate::pipeline`], and what the loop does with each decision in
//! [`decide`]; this module only moves bytes and records.
//!
//! Modules by job: [`socket`] (the UDP socket, waiting and sending),
//! [`decide`] (the decision loop's state and steps, no I/O), [`merge`]
//! (lease records from the other server of a pair), [`durable`] (log
//! writes, sync workers, compaction, the release of ACKs) and [`report`]
//! (logs and counters).
//!
//! Deciding never waits for the disk:
//! - the **decision loop** (one thread) waits for datagrams (or 500 ms),
//!   drains up to [`BATCH`] of them, runs each through the pipeline (the
//!   lease table is updated as each is decided, so no two requests can get
//!   the same address), sends the replies that promise nothing durable
//!   (OFFER, NAK, INFORM's ACK) at once, then writes the batch's lease
//!   records to the log in one `write` (one writer: records reach the file in
//!   decision order) and holds the batch's ACKs in the
//!   [`crate::commit::AckGate`];
//! - up to [`SYNCS_IN_FLIGHT`] **sync workers** run `fdatasync`s of the log.
//!   A batch's ACKs leave as soon as a sync that started after the batch was
//!   written has finished, never before; the worker that finished it sends
//!   them. While syncs run, later batches are decided, written and covered by
//!   the next sync (group commit), so a burst costs a few flushes, not one
//!   per client.
//!
//! With [`Durability::Write`] the ACKs leave right after the `write` (Kea
//! memfile's guarantee) and no sync runs.
//!
//! A failed write or sync is fatal: after a failed fsync the page cache can
//! no longer be trusted (PostgreSQL's "fsyncgate"), so the process exits and
//! recovery on restart rebuilds the state from what is really on disk.
//!
//! Socket: UDP `0.0.0.0:67` with
//! SO_REUSEADDR and SO_BROADCAST and SO_BINDTODEVICE on the configured
//! interface (unprivileged since Linux 5.7). No capability is needed: a
//! client without an address gets its reply by broadcast (see
//! [`crate::pipeline::destination`]).

pub mod decide;
pub mod durable;
pub mod merge;
pub mod report;
pub mod socket;

use std::io::Read;
use std::net::{Ipv4Addr, UdpSocket};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::commit::AckGate;
use crate::config::Config;
use crate::lease_store::{LeaseStore, Recovery, encode_leases, is_commit};
use crate::leases::LeaseTable;
use crate::metrics::{self, metrics};
use crate::peer::{Inbox, Pair};
use crate::peer_holds::{PeerHolds, lead};
use crate::pipeline::{Dropped, StoreOp};

pub use decide::{Decisions, Step};
pub use durable::{Durability, Pending, Reply};
pub use merge::on_local_clock;
pub use report::report_recovery;
pub use socket::{CLIENT_PORT, SERVER_PORT, open_socket};

use durable::{CommitState, Durable, SyncJob, deliver, sync_worker, write_batch};
use report::released_for_moved_reservations;
use socket::{Sender4, wait_readable};

/// Most datagrams the decision loop handles per turn.
pub const BATCH: usize = 64;
/// Most fdatasyncs of the lease log running at once (see [`crate::commit`]).
/// Measured at saturation on the 2-vCPU VM: 1 → ~11,500 leases/s, 2 →
/// ~14,200, 4 → ~13,500, 8 → ~11,000 (more syncs, more interrupts and
/// journal commits for the same records).
pub const SYNCS_IN_FLIGHT: usize = 2;
/// How often one conflict (an address, two MACs) is logged at most.
pub(crate) const CONFLICT_LOG_EVERY: Duration = Duration::from_secs(60);
/// Most addresses probed for one DISCOVER: after that many answered
/// probes the client gets no offer this time (its retransmission starts
/// again, and every answered address stays quarantined).
pub const MAX_PROBES_PER_DISCOVER: u8 = 4;
/// Most records from the other server merged in one turn of the decision
/// loop: DHCP datagrams wait behind one slice at most, however large the
/// body (the flood measured in docs/dhcp.md).
pub const MERGE_SLICE: usize = 1024;
/// Most records from the other server merged per second: a flood of
/// records (a valid token is needed) takes at most this share of the
/// loop, and what is beyond waits its turn (the sender's request waits).
pub const MERGE_PER_SECOND: usize = 32_768;

/// A body of records from the other server being merged slice by slice.
struct MergeJob {
    records: Vec<u8>,
    /// Bytes merged so far.
    offset: usize,
    report: crate::peer::MergeReport,
    done: Sender<crate::peer::MergeReport>,
    /// A replication request (merged first).
    replication: bool,
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The running server.
pub struct Server {
    socket: UdpSocket,
    store: Option<LeaseStore>,
    decisions: Decisions,
    reloads: Receiver<Config>,
    durability: Durability,
    pair: Option<Pair>,
    /// The conflict prober (None when probing is off or unavailable).
    prober: Option<crate::probe::Prober>,
    /// Bodies of records from the other server, merged in slices in the
    /// order they came.
    merging: std::collections::VecDeque<MergeJob>,
    /// Records merged in the current second, and when it began.
    merged_in_second: (Instant, usize),
    /// The inventory API's questions, when it is served.
    inventory: Option<crate::inventory::InventoryLoop>,
    /// Where the lease metadata is saved, and the saver's queue.
    meta_saver: Option<(std::path::PathBuf, Sender<Vec<u8>>)>,
    /// When the lease metadata was last handed to the saver.
    meta_saved: Instant,
}

impl Server {
    /// A server over an open socket and store; `reloads` delivers validated
    /// new configs.
    /// With `pair`, it is one server of a pair (see [`crate::peer`]): it
    /// starts syncing and answers its share of the clients.
    pub fn new(
        socket: UdpSocket,
        store: LeaseStore,
        config: Arc<Config>,
        reloads: Receiver<Config>,
        durability: Durability,
        pair: Option<Pair>,
    ) -> Self {
        let prober = if config.probe_timeout.is_zero() {
            tracing::info!(
                "conflict probe off (probe_timeout_ms: 0): addresses are offered without an ICMP echo first"
            );
            None
        } else {
            match crate::probe::Prober::start(config.interface.as_deref(), config.probe_timeout) {
                Ok(p) => {
                    tracing::info!(
                        timeout_ms = config.probe_timeout.as_millis() as u64,
                        "conflict probe on: an address with no binding of its client is offered after an ICMP echo goes unanswered"
                    );
                    Some(p)
                }
                Err(e) => {
                    metrics().probe_unavailable.set(1);
                    tracing::error!(error = %e, "conflict probe unavailable: addresses are offered without an ICMP echo first");
                    None
                }
            }
        };
        let mut table = LeaseTable::from_store(config, store.leases().values());
        if let Some(p) = &pair {
            table.set_pair(Some((p.shared.peer.role, p.shared.state())));
        }
        // Reservations may have moved while the server was down: those
        // releases are written with the first batch (see `run`).
        Server {
            socket,
            store: Some(store),
            decisions: Decisions::new(table),
            reloads,
            durability,
            pair,
            prober,
            merging: std::collections::VecDeque::new(),
            merged_in_second: (Instant::now(), 0),
            inventory: None,
            meta_saver: None,
            meta_saved: Instant::now(),
        }
    }

    /// The refusals the decision loop records (the inventory API reads
    /// them).
    pub fn refusals(&self) -> Arc<Mutex<crate::inventory::refusals::Refusals>> {
        self.decisions.refusals.clone()
    }

    /// Answers the inventory API's questions (see [`crate::inventory`]).
    pub fn serve_inventory(&mut self, inventory: crate::inventory::InventoryLoop) {
        self.inventory = Some(inventory);
    }

    /// Loads the lease metadata kept in `data_dir` (see
    /// [`crate::inventory::meta`]) and saves it there while the server
    /// runs, from a thread of its own. Entries of addresses the table no
    /// longer binds are dropped.
    pub fn keep_meta(&mut self, data_dir: &std::path::Path) -> std::io::Result<()> {
        let mut meta = crate::inventory::meta::Meta::load(data_dir);
        let table = &self.decisions.table;
        meta.retain(|ip| table.get(ip).is_some());
        self.decisions.meta = meta;
        let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
        let dir = data_dir.to_path_buf();
        std::thread::Builder::new()
            .name("dhcp-lease-meta".into())
            .spawn(move || {
                while let Ok(mut bytes) = rx.recv() {
                    // Only the newest version matters.
                    while let Ok(newer) = rx.try_recv() {
                        bytes = newer;
                    }
                    if let Err(e) = crate::inventory::meta::save(&dir, &bytes) {
                        tracing::warn!(dir = %dir.display(), error = %e, "lease metadata not saved: client ids and host names of this start return at each client's next transaction after a restart");
                    }
                }
            })?;
        self.meta_saver = Some((data_dir.to_path_buf(), tx));
        Ok(())
    }

    /// Answers the inventory API's waiting questions.
    fn inventory_answers(&mut self) {
        let Some(inv) = &self.inventory else { return };
        let mut drain = [0u8; 256];
        while matches!((&inv.wake).read(&mut drain), Ok(n) if n > 0) {}
        let now = unix_now();
        for ask in inv.asks.try_iter() {
            let a = crate::inventory::answer(
                &self.decisions.table,
                &self.decisions.meta,
                &ask.question,
                now,
            );
            let _ = ask.reply.send(a);
        }
    }

    /// Holds back the addresses of lease records the log lost (damaged
    /// records found at this start, and those of earlier starts kept in
    /// `data_dir`'s [`crate::held_back`] file): none is offered to a new
    /// client until its lease would have ended (a full lease from the start
    /// that found it, at the latest), but a client that asks for it by
    /// REQUEST (its owner) gets it, and so does the MAC the damaged record
    /// seemed to name. Logged and counted; the file is rewritten with what
    /// is still held. An error writing it is returned (the hold-back would
    /// not survive the next restart).
    pub fn quarantine_lost(
        &mut self,
        recovery: &Recovery,
        data_dir: &std::path::Path,
    ) -> std::io::Result<()> {
        use crate::held_back::{self, Held};
        let now = unix_now();
        let until = now + u64::from(self.decisions.table.config().lease_seconds);
        let found: Vec<Held> = recovery
            .dropped
            .iter()
            .filter_map(|d| d.unverified)
            .filter(|(op, _)| is_commit(*op))
            .map(|(_, l)| Held {
                ip: l.ip,
                suspected: (l.mac != crate::lease_store::DECLINED_MAC).then_some(l.mac),
                until,
            })
            .collect();
        let earlier = held_back::load(data_dir)?;
        let held = held_back::merge(&earlier, &found, now);
        for h in &held {
            if self
                .decisions
                .table
                .quarantine_lost(h.ip, h.suspected, h.until, now)
            {
                self.decisions.meta.forget(h.ip);
                metrics().store_lost_addresses.inc();
                tracing::warn!(
                    ip = %h.ip,
                    suspected_mac = %h.suspected.map_or_else(|| "none".to_string(), |m| m.to_string()),
                    until = h.until,
                    "address of a damaged lease record held back: offered to nobody until its lease would have ended, unless its owner asks for it"
                );
            }
        }
        held_back::save(data_dir, &held)
    }

    /// Runs until a store error (fatal, see the module docs).
    pub fn run(mut self) -> anyhow::Result<()> {
        let sender = |socket: UdpSocket| Sender4 { socket };
        let mut out = sender(self.socket.try_clone()?);
        let mut store = self
            .store
            .take()
            .ok_or_else(|| anyhow::anyhow!("server already ran"))?;
        // Reservations may have moved while the server was down.
        for ip in released_for_moved_reservations(self.decisions.table.release_moved_reservations())
        {
            store.release(ip)?;
        }
        let replication = self
            .pair
            .as_ref()
            .map(|p| Arc::new(crate::peer::Replication::new(p.shared.max_records)));
        let mut gate = AckGate::new(SYNCS_IN_FLIGHT);
        if replication.is_some() {
            gate = gate.with_replication();
        }
        let shared = Arc::new(Mutex::new(CommitState {
            file: Arc::new(store.sync_handle()?),
            store,
            replication: replication.clone(),
            gate,
            unsynced_records: 0,
            durability: self.durability,
            failed: None,
            withheld: std::collections::HashSet::new(),
            holds: PeerHolds::default(),
            lead: lead(self.decisions.table.config().lease_seconds),
        }));
        if let (Some(p), Some(rep)) = (&self.pair, &replication) {
            for i in 0..crate::peer::REPLICATION_IN_FLIGHT {
                let mut out = sender(self.socket.try_clone()?);
                let (pair, rep, commit) = (p.shared.clone(), rep.clone(), shared.clone());
                std::thread::Builder::new()
                    .name(format!("dhcp-pair-repl-{i}"))
                    .spawn(move || {
                        crate::peer::replication_worker(pair, rep, |r| {
                            let released = match commit.lock() {
                                Ok(mut d) if d.failed.is_none() => {
                                    if r.holds_lost {
                                        d.holds.forget();
                                    } else {
                                        if r.new_stream {
                                            d.holds.forget_acknowledged();
                                        }
                                        d.holds.acknowledged_through(r.through);
                                    }
                                    d.holds.refused(&r.refused);
                                    // The other server refused these commits:
                                    // their ACKs are not sent.
                                    d.withheld.extend(r.refused);
                                    let t = r.through;
                                    let r = if t > 0 {
                                        d.gate.replicated_through(t)
                                    } else {
                                        Vec::new()
                                    };
                                    d.pass(r)
                                }
                                _ => return,
                            };
                            deliver(released, &mut out);
                        })
                    })?;
            }
            let shared = p.shared.clone();
            std::thread::Builder::new()
                .name("dhcp-pair-heartbeat".into())
                .spawn(move || crate::peer::heartbeat(shared))?;
            let (shared, config) = (p.shared.clone(), self.decisions.table.config().clone());
            std::thread::Builder::new()
                .name("dhcp-pair-vlan".into())
                .spawn(move || {
                    crate::peer::vlan::run(shared, config.server_ip, config.interface.clone())
                })?;
        }
        let (jobs_tx, jobs_rx) = std::sync::mpsc::channel::<SyncJob>();
        let jobs_rx = Arc::new(Mutex::new(jobs_rx));
        for i in 0..SYNCS_IN_FLIGHT {
            let (shared, jobs, out) = (
                shared.clone(),
                jobs_rx.clone(),
                sender(self.socket.try_clone()?),
            );
            std::thread::Builder::new()
                .name(format!("dhcp-sync-{i}"))
                .spawn(move || sync_worker(shared, jobs, out))?;
        }
        // Returning ends the process (a store error is fatal); dropping
        // jobs_tx lets idle workers end.
        self.decide_loop(&mut out, &shared, &jobs_tx)
    }

    fn decide_loop(
        &mut self,
        out: &mut Sender4,
        shared: &Arc<Mutex<CommitState>>,
        jobs: &Sender<SyncJob>,
    ) -> anyhow::Result<()> {
        let mut buf = vec![0u8; 4096];
        let mut next_tick = Instant::now();
        let config = self.decisions.table.config();
        tracing::info!(
            interface = config.interface.as_deref().unwrap_or("*"),
            server_ip = %config.server_ip,
            pool = config.pool_size(),
            durability = self.durability.guarantee(),
            "dhcp server listening on 0.0.0.0:67"
        );
        loop {
            metrics::beat();
            match shared.lock() {
                Ok(d) => {
                    if let Some(e) = &d.failed {
                        return Err(anyhow::anyhow!("{e}"));
                    }
                }
                Err(_) => return Err(anyhow::anyhow!("lease sync worker panicked")),
            }
            let mut released = Vec::new();
            while let Ok(c) = self.reloads.try_recv() {
                released.extend(self.apply_reload(c));
            }
            if !released.is_empty() {
                let batch = Durable {
                    records: released.into_iter().map(StoreOp::Release).collect(),
                    replies: Vec::new(),
                    renewals: Vec::new(),
                    replicate: true,
                };
                write_batch(shared, jobs, batch, out)?;
            }
            if Instant::now() >= next_tick {
                self.tick();
                next_tick = Instant::now() + Duration::from_secs(1);
            }
            let wake = self.pair.as_ref().map(|p| &p.wake);
            let probes = self.prober.as_ref().map(|p| &p.wake);
            let asked = self.inventory.as_ref().map(|i| &i.wake);
            let wait = self.merge_wait();
            let [packets, woken, probed, questions] =
                wait_readable(&self.socket, wake, probes, asked, wait);
            if woken {
                self.pair_inbox(shared)?;
            }
            if questions {
                self.inventory_answers();
            }
            if !self.merging.is_empty() {
                self.merge_slice(shared, jobs, out)?;
            }
            if probed {
                self.probe_results(out);
            }
            if !packets {
                continue;
            }
            let now = unix_now();
            let mut durable = Durable {
                records: Vec::new(),
                replies: Vec::new(),
                renewals: Vec::new(),
                replicate: true,
            };
            for _ in 0..BATCH {
                let (n, from) = match self.socket.recv_from(&mut buf) {
                    Ok(x) => x,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        tracing::debug!(error = %e, "recv failed");
                        break;
                    }
                };
                let prober = self
                    .prober
                    .as_mut()
                    .map(|p| p as &mut dyn decide::StartProbe);
                match self.decisions.datagram(&buf[..n], from, now, prober) {
                    Step::Dropped(Dropped::PeerScope) => self.observe_peer_scope(&buf[..n]),
                    Step::Dropped(_) | Step::Held | Step::SendNow(None) => {}
                    Step::SendNow(Some((bytes, dest, kind))) => out.send(&bytes, dest, kind),
                    Step::Durable(records, reply) => {
                        match (records.as_slice(), reply) {
                            // One lease, ACKed: may go as a lazy update.
                            ([StoreOp::Commit(l)], Some(reply)) if reply.2 == "ack" => {
                                durable.renewals.push((*l, Pending::Reply(reply)));
                            }
                            (_, Some(reply)) => durable.replies.push(Pending::Reply(reply)),
                            (_, None) => {}
                        }
                        durable.records.extend(records);
                    }
                }
            }
            if !durable.records.is_empty() {
                write_batch(shared, jobs, durable, out)?;
            }
        }
    }

    /// Finished conflict probes (see [`Decisions::probe_result`]): the
    /// offers they release are sent.
    fn probe_results(&mut self, out: &mut Sender4) {
        let Some(prober) = &mut self.prober else {
            return;
        };
        prober.drain_wake();
        let results: Vec<_> = prober.results.try_iter().collect();
        for (ip, found) in results {
            let now = unix_now();
            let prober = self
                .prober
                .as_mut()
                .map(|p| p as &mut dyn decide::StartProbe);
            // The host that answered, by the neighbour entry its answer
            // needed (only answered probes read the table).
            let responder = (found == crate::probe::Found::Answered)
                .then(|| crate::probe::neighbour_mac(ip))
                .flatten();
            if let Some((bytes, dest)) = self
                .decisions
                .probe_result(ip, found, responder, now, prober)
            {
                out.send(&bytes, dest, "offer");
            }
        }
    }

    /// A request of the other server's scope, not answered here: while
    /// contact is lost, count its client if its `secs` says it has been
    /// asking for long (see [`crate::pair::Unacked`]).
    fn observe_peer_scope(&mut self, datagram: &[u8]) {
        let Some(pair) = &self.pair else { return };
        let recovering = pair.shared.state().recovering();
        let wait = u64::from(pair.shared.peer.unacked_wait_ms);
        if let Some(n) = self
            .decisions
            .observe_peer_scope(datagram, recovering, wait)
        {
            pair.shared.set_unacked(n);
        }
    }

    /// Handles what the pair sent the decision loop: the state, lease
    /// updates from the other server (queued; merged in slices by
    /// `merge_slice`, then made durable before they are acknowledged) and
    /// snapshot requests.
    fn pair_inbox(&mut self, shared: &Arc<Mutex<CommitState>>) -> anyhow::Result<()> {
        let Some(pair) = &self.pair else {
            return Ok(());
        };
        let mut drain = [0u8; 256];
        while matches!((&pair.wake).read(&mut drain), Ok(n) if n > 0) {}
        let state = pair.shared.state();
        if self
            .decisions
            .table
            .share()
            .is_some_and(|s| s.state != state)
        {
            self.decisions.table.set_pair_state(state);
            if !state.recovering() && self.decisions.unacked.count() > 0 {
                self.decisions.unacked.clear();
                pair.shared.set_unacked(0);
            }
        }
        let msgs: Vec<Inbox> = pair.inbox.try_iter().collect();
        for m in msgs {
            match m {
                Inbox::Records {
                    records,
                    done,
                    replication,
                } => {
                    let n = records.len() / crate::lease_store::RECORD_LEN;
                    let job = MergeJob {
                        records,
                        offset: 0,
                        report: crate::peer::MergeReport::default(),
                        done,
                        replication,
                    };
                    // Replication goes before every body sent outside a
                    // stream (one being merged pauses between slices);
                    // among themselves each kind keeps its order.
                    let at = if replication {
                        self.merging
                            .iter()
                            .position(|j| !j.replication)
                            .unwrap_or(self.merging.len())
                    } else {
                        self.merging.len()
                    };
                    self.merging.insert(at, job);
                    let backlog = self.merge_backlog() as i64;
                    metrics().pair_merge_backlog.set(backlog);
                    tracing::debug!(records = n, backlog, "pair: records queued for merging");
                }
                Inbox::Snapshot { reply } => {
                    let body = match shared.lock() {
                        Ok(d) => encode_leases(d.store.leases().values()),
                        Err(_) => return Err(anyhow::anyhow!("lease sync worker panicked")),
                    };
                    let _ = reply.send(body);
                }
            }
        }
        Ok(())
    }

    /// Records waiting to be merged.
    fn merge_backlog(&self) -> usize {
        self.merging
            .iter()
            .map(|j| (j.records.len() - j.offset) / crate::lease_store::RECORD_LEN)
            .sum()
    }

    /// How long the loop may wait for datagrams: 500 ms, none while records
    /// wait to be merged and this second's budget allows, else until the
    /// next second's budget.
    fn merge_wait(&self) -> Duration {
        let idle = Duration::from_millis(500);
        if self.merging.is_empty() {
            return idle;
        }
        let (start, used) = self.merged_in_second;
        let left = Duration::from_secs(1).saturating_sub(start.elapsed());
        if used < MERGE_PER_SECOND || left.is_zero() {
            Duration::ZERO
        } else {
            left.min(idle)
        }
    }

    /// Merges one slice of the records from the other server (at most
    /// [`MERGE_SLICE`] and what is left of [`MERGE_PER_SECOND`]), makes it
    /// durable, and answers each body once all of it is durable here.
    fn merge_slice(
        &mut self,
        shared: &Arc<Mutex<CommitState>>,
        jobs: &Sender<SyncJob>,
        out: &mut Sender4,
    ) -> anyhow::Result<()> {
        use crate::lease_store::RECORD_LEN;
        let Some(pair) = &self.pair else {
            self.merging.clear();
            return Ok(());
        };
        let (start, used) = self.merged_in_second;
        if start.elapsed() >= Duration::from_secs(1) {
            self.merged_in_second = (Instant::now(), 0);
        } else if used >= MERGE_PER_SECOND {
            return Ok(());
        }
        let mut budget = MERGE_SLICE.min(MERGE_PER_SECOND - self.merged_in_second.1);
        let skew = pair.shared.skew_for_records();
        let took_over = pair.shared.peer_took_over();
        let now = unix_now();
        let mut ops = Vec::new();
        let mut finished = Vec::new();
        while budget > 0 {
            let Some(job) = self.merging.front_mut() else {
                break;
            };
            let take = ((job.records.len() - job.offset) / RECORD_LEN).min(budget);
            let end = job.offset + take * RECORD_LEN;
            let (o, r) = self.decisions.merge_peer_records(
                &job.records[job.offset..end],
                skew,
                took_over,
                now,
            );
            job.offset = end;
            budget -= take;
            self.merged_in_second.1 += take;
            ops.extend(o);
            job.report.refused.extend(r.refused);
            job.report.holders.extend(r.holders);
            if job.offset + RECORD_LEN > job.records.len()
                && let Some(job) = self.merging.pop_front()
            {
                finished.push(job);
            }
        }
        metrics()
            .pair_merge_backlog
            .set(self.merge_backlog() as i64);
        let mut replies = Vec::new();
        for job in finished {
            let report = job.report;
            if let Some(first) = report.refused.first() {
                tracing::warn!(
                    records = job.records.len() / RECORD_LEN,
                    refused = report.refused.len(),
                    first_ip = %first.lease.ip,
                    first_mac = %first.lease.mac,
                    first_expires = first.lease.expires_unix,
                    first_reason = first.reason,
                    "pair: refused lease records from the other server"
                );
            }
            replies.push(Pending::PeerAck(job.done, report));
        }
        if ops.is_empty() {
            if !replies.is_empty() {
                // Nothing new, but what it repeats may not be durable yet:
                // answer once it is.
                let released = match shared.lock() {
                    Ok(mut d) => d.gate.after_written(replies),
                    Err(_) => return Err(anyhow::anyhow!("lease sync worker panicked")),
                };
                deliver(released, out);
            }
            return Ok(());
        }
        let batch = Durable {
            records: ops,
            replies,
            renewals: Vec::new(),
            replicate: false,
        };
        write_batch(shared, jobs, batch, out)
    }

    /// Applies a new config; returns the addresses released because a
    /// reservation moved (to persist).
    fn apply_reload(&mut self, c: Config) -> Vec<Ipv4Addr> {
        if c.interface != self.decisions.table.config().interface {
            tracing::warn!(
                old = ?self.decisions.table.config().interface,
                new = ?c.interface,
                "interface change takes effect at the next restart"
            );
        }
        if c.probe_timeout != self.decisions.table.config().probe_timeout {
            tracing::warn!("probe_timeout_ms changes take effect at the next restart");
        }
        if c.peer != self.decisions.table.config().peer {
            tracing::warn!("pair settings changes take effect at the next restart");
        }
        let pool = c.pool_size();
        let reservations = c.reservations.len();
        let moved = self.decisions.table.reconfigure(Arc::new(c));
        tracing::info!(pool, reservations, "config applied");
        released_for_moved_reservations(moved)
    }

    /// Once a second: reclaim ended offers and quarantines, refresh gauges.
    fn tick(&mut self) {
        let timeout = self.decisions.table.config().probe_timeout;
        let stale = timeout * u32::from(MAX_PROBES_PER_DISCOVER) + Duration::from_secs(5);
        self.decisions.forget_stale_probes(stale);
        metrics()
            .probes_pending
            .set(self.decisions.probes_pending() as i64);
        let now = unix_now();
        self.decisions.table.reclaim(now);
        let s = self.decisions.table.stats(now);
        let m = metrics();
        m.leases_active.set(s.active as i64);
        m.leases_free.set(s.free as i64);
        m.leases_offered.set(s.offered as i64);
        m.leases_declined.set(s.declined as i64);
        m.leases_lost.set(s.lost as i64);
        let util = if s.pool_size == 0 {
            0.0
        } else {
            (s.pool_size - s.free) as f64 / s.pool_size as f64
        };
        m.pool_utilisation.set(util);
        if let Some((_, saver)) = &self.meta_saver
            && self.meta_saved.elapsed() >= crate::inventory::meta::SAVE_EVERY
        {
            let table = &self.decisions.table;
            self.decisions.meta.retain(|ip| table.get(ip).is_some());
            if let Some(bytes) = self.decisions.meta.take_changes() {
                let _ = saver.send(bytes);
                self.meta_saved = Instant::now();
            }
        }
    }
}
