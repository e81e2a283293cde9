//! The I/O side: the UDP socket on port 67, the durable store, reloads and
//! periodic work. Everything the protocol decides happens in
//! [`crate::pipeline`]; this module only moves bytes and records.
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

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use socket2::{Domain, Protocol, Socket, Type};

use crate::commit::{AckGate, Seq};
use crate::config::{Config, Mac};
use crate::lease_store::{LeaseStore, Recovery, decode_records, encode_leases, is_commit};
use crate::leases::{LeaseTable, Merged, Refusal};
use crate::metrics::{self, count, metrics};
use crate::peer::{Inbox, MergeReport, Pair};
use crate::pipeline::{self, Decision, Destination, Outcome, StoreOp};

/// Most datagrams the decision loop handles per turn.
pub const BATCH: usize = 64;
/// Most fdatasyncs of the lease log running at once (see [`crate::commit`]).
/// Measured at saturation on the 2-vCPU VM: 1 → ~11,500 leases/s, 2 →
/// ~14,200, 4 → ~13,500, 8 → ~11,000 (more syncs, more interrupts and
/// journal commits for the same records).
pub const SYNCS_IN_FLIGHT: usize = 2;
/// DHCP server port.
pub const SERVER_PORT: u16 = 67;
/// DHCP client port.
pub const CLIENT_PORT: u16 = 68;
/// How often one conflict (an address, two MACs) is logged at most.
const CONFLICT_LOG_EVERY: Duration = Duration::from_secs(60);
/// Most addresses probed for one DISCOVER: after that many answered
/// probes the client gets no offer this time (its retransmission starts
/// again, and every answered address stays quarantined).
pub const MAX_PROBES_PER_DISCOVER: u8 = 4;

/// An offer waiting for its conflict probe.
struct PendingOffer {
    /// The address offered and probed.
    ip: Ipv4Addr,
    /// The reply to send when nobody answers (the latest retransmission's).
    reply: Option<(Vec<u8>, Destination)>,
    /// The DISCOVER, decided again when the address is in use.
    datagram: Vec<u8>,
    /// When the first probe for this DISCOVER started.
    started: Instant,
    /// Probes answered so far for this DISCOVER.
    answered: u8,
}

/// An expiry on the other server's clock moved onto this server's:
/// `skew` is how far the other clock is ahead, in seconds.
pub fn on_local_clock(expires: u64, skew: i64) -> u64 {
    if expires == 0 {
        return 0;
    }
    u64::try_from(i128::from(expires) - i128::from(skew)).unwrap_or(0)
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Opens the server socket: `0.0.0.0:port`, broadcast allowed, bound to
/// `interface` when given.
pub fn open_socket(interface: Option<&str>, port: u16) -> std::io::Result<UdpSocket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_address(true)?;
    s.set_broadcast(true)?;
    // Room for a burst while the decision loop is busy (the kernel caps it
    // at net.core.rmem_max; a smaller buffer is not an error).
    let _ = s.set_recv_buffer_size(4 << 20);
    let _ = s.set_send_buffer_size(1 << 20);
    tracing::info!(
        rcvbuf = s.recv_buffer_size().unwrap_or(0),
        sndbuf = s.send_buffer_size().unwrap_or(0),
        "socket buffers granted (bytes, as the kernel counts them; raise net.core.rmem_max for more)"
    );
    if let Some(ifname) = interface {
        s.bind_device(Some(ifname.as_bytes())).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("SO_BINDTODEVICE {ifname} (needs CAP_NET_RAW): {e}"),
            )
        })?;
    }
    // Binding the interface address would miss broadcasts: bind the wildcard.
    s.bind(&SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)).into())?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// Waits until the socket, the pair's wake-up end or the prober's is
/// readable, or `timeout`; returns which are (in that order).
fn wait_readable(
    socket: &UdpSocket,
    pair: Option<&UnixStream>,
    probes: Option<&UnixStream>,
    timeout: Duration,
) -> [bool; 3] {
    let fd = |w: Option<&UnixStream>| w.map_or(-1, |w| w.as_raw_fd());
    let mut pfds = [socket.as_raw_fd(), fd(pair), fd(probes)].map(|fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    });
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: three valid pollfds (a negative fd is ignored by poll).
    let rc = unsafe { libc::poll(pfds.as_mut_ptr(), 3, ms) };
    if rc <= 0 {
        return [false; 3];
    }
    pfds.map(|p| p.revents & libc::POLLIN != 0)
}

/// `send_to` on the non-blocking socket, waiting (up to 200 ms) for room in
/// the send buffer instead of dropping a reply during a burst of ACKs.
fn send_waiting(socket: &UdpSocket, bytes: &[u8], to: SocketAddrV4) -> std::io::Result<usize> {
    let deadline = Instant::now() + Duration::from_millis(200);
    loop {
        match socket.send_to(bytes, to) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                let mut pfd = libc::pollfd {
                    fd: socket.as_raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                };
                // SAFETY: one valid pollfd.
                unsafe { libc::poll(&mut pfd, 1, 10) };
            }
            r => return r,
        }
    }
}

/// Logs what recovery found and counts truncated bytes and dropped records.
pub fn report_recovery(dir: &Path, r: &Recovery, live: usize) {
    let m = metrics();
    if r.truncated_bytes > 0 {
        m.store_truncated_bytes.inc_by(r.truncated_bytes);
        tracing::warn!(
            dir = %dir.display(),
            records = r.records,
            truncated_bytes = r.truncated_bytes,
            "lease log had a torn tail (a write cut by a crash, never acknowledged); truncated it"
        );
    }
    for d in &r.dropped {
        m.store_dropped_records.inc();
        match d.unverified {
            Some((op, l)) => tracing::error!(
                dir = %dir.display(),
                offset = d.offset,
                op = if op == 1 { "commit" } else if op == 2 { "release" } else { "unknown" },
                ip = %l.ip,
                mac = %l.mac,
                expires = l.expires_unix,
                "lease log record damaged (checksum failed); dropped it: its fields are unverified, check that client"
            ),
            None => tracing::error!(
                dir = %dir.display(),
                offset = d.offset,
                "lease log record damaged beyond decoding; dropped it"
            ),
        }
    }
    if let Some(aside) = &r.set_aside {
        tracing::error!(
            dropped = r.dropped.len(),
            kept = r.records,
            aside = %aside.display(),
            "lease log had damaged records; every good record was kept, the file as found is kept aside and the log was rewritten"
        );
    }
    tracing::info!(dir = %dir.display(), records = r.records, leases = live, "lease store recovered");
}

/// When an ACK may leave, relative to its lease record (`serve
/// --durability`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Durability {
    /// After an `fdatasync` covering the record (group commit): an ACKed
    /// lease survives a process kill and a node crash or power loss.
    #[default]
    Fsync,
    /// After the record was `write`n to the log (in the page cache): an
    /// ACKed lease survives a kill of the process, not a node crash or
    /// power loss (the kernel writes it back within its dirty-page expiry,
    /// 30 s by default). The guarantee of Kea's memfile backend, which
    /// appends to its CSV without fsync. No fdatasync runs (compaction
    /// still syncs its new file before the rename).
    Write,
}

impl Durability {
    /// The guarantee in words (logs and the benchmark).
    pub fn guarantee(self) -> &'static str {
        match self {
            Durability::Fsync => {
                "ACK after fdatasync: an ACKed lease survives kill -9 and power loss"
            }
            Durability::Write => {
                "ACK after write(): an ACKed lease survives kill -9, not a node crash or power loss"
            }
        }
    }
}

/// A reply ready to send: bytes, destination, metric label.
pub type Reply = (Vec<u8>, Destination, &'static str);

/// What a batch holds until its records are durable.
pub enum Pending {
    /// A reply to send.
    Reply(Reply),
    /// A lease update from the other server is durable here: answer it
    /// (with what was refused).
    PeerAck(Sender<MergeReport>, MergeReport),
}

/// A decided batch waiting to be made durable: its records, then what
/// waits for them.
struct Durable {
    records: Vec<StoreOp>,
    replies: Vec<Pending>,
    /// Whether the records go to the other server of a pair (not when they
    /// came from it). Its replies then also wait for the other server's
    /// acknowledgement, unless that server counts as down.
    replicate: bool,
}

/// Sends released items.
fn deliver(items: Vec<Pending>, out: &mut Sender4) {
    for i in items {
        match i {
            Pending::Reply((bytes, dest, kind)) => out.send(&bytes, dest, kind),
            Pending::PeerAck(done, report) => {
                let _ = done.send(report);
            }
        }
    }
}

/// Sends replies.
struct Sender4 {
    socket: UdpSocket,
}

impl Sender4 {
    /// Another sender on the same socket.
    fn clone_sender(&self) -> std::io::Result<Sender4> {
        Ok(Sender4 {
            socket: self.socket.try_clone()?,
        })
    }

    fn send(&mut self, bytes: &[u8], dest: Destination, kind: &str) {
        let to = match dest {
            Destination::Relay(ip) => SocketAddrV4::new(ip, SERVER_PORT),
            Destination::Client(ip) => SocketAddrV4::new(ip, CLIENT_PORT),
            Destination::Broadcast => SocketAddrV4::new(Ipv4Addr::BROADCAST, CLIENT_PORT),
        };
        match send_waiting(&self.socket, bytes, to) {
            Ok(_) => count(&metrics().sent, kind),
            Err(e) => {
                metrics().send_errors.inc();
                tracing::warn!(%to, error = %e, "send failed");
            }
        }
    }
}

/// The durable side shared by the decision loop (which writes and starts
/// syncs) and the sync workers (which finish them and send the ACKs).
struct CommitState {
    store: LeaseStore,
    gate: AckGate<Pending>,
    /// Replication to the other server of a pair.
    replication: Option<Arc<crate::peer::Replication>>,
    /// Handle on the current log file for the workers' fdatasync.
    file: Arc<File>,
    /// Records written since the last sync started (for the batch metric).
    unsynced_records: u64,
    /// When an ACK may leave.
    durability: Durability,
    /// Set by a failed fdatasync: nothing is released any more (after a
    /// failed fsync the page cache cannot be trusted, so a later successful
    /// sync proves nothing) and the decision loop exits with this error.
    failed: Option<String>,
    /// Addresses whose commit the other server of a pair refused: the next
    /// ACK released for each is not sent (the gate releases in decision
    /// order, so that is the refused one).
    withheld: std::collections::HashSet<Ipv4Addr>,
}

/// The address an encoded reply gives (BOOTP `yiaddr`).
fn reply_yiaddr(bytes: &[u8]) -> Option<Ipv4Addr> {
    let b: [u8; 4] = bytes.get(16..20)?.try_into().ok()?;
    Some(Ipv4Addr::from(b))
}

/// One fdatasync to run: it covers every batch up to `seq`.
struct SyncJob {
    file: Arc<File>,
    seq: Seq,
    records: u64,
}

impl CommitState {
    /// Drops the released ACKs of commits the other server refused.
    fn pass(&mut self, items: Vec<Pending>) -> Vec<Pending> {
        if self.withheld.is_empty() {
            return items;
        }
        items
            .into_iter()
            .filter(|i| match i {
                Pending::Reply((bytes, _, "ack")) => {
                    let Some(ip) = reply_yiaddr(bytes) else {
                        return true;
                    };
                    if self.withheld.remove(&ip) {
                        tracing::warn!(%ip, "ACK not sent: the other server refused the lease (another client holds the address there)");
                        false
                    } else {
                        true
                    }
                }
                _ => true,
            })
            .collect()
    }

    /// Starts a sync job when the gate allows one.
    fn next_job(&mut self) -> Option<SyncJob> {
        let seq = self.gate.next_sync()?;
        Some(SyncJob {
            file: self.file.clone(),
            seq,
            records: std::mem::take(&mut self.unsynced_records),
        })
    }
}

/// A sync worker: runs an fdatasync, releases the ACKs it made durable and
/// sends them itself (no further thread hop), then takes the next sync the
/// gate allows before waiting for a new job.
fn sync_worker(
    shared: Arc<Mutex<CommitState>>,
    jobs: Arc<Mutex<Receiver<SyncJob>>>,
    mut out: Sender4,
) {
    loop {
        let job = match jobs.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(mut job) = job else { return };
        loop {
            let started = Instant::now();
            let result = job.file.sync_data();
            let elapsed = started.elapsed();
            let (released, more) = {
                let Ok(mut d) = shared.lock() else { return };
                if d.failed.is_some() {
                    return;
                }
                if let Err(e) = result {
                    d.failed = Some(format!("lease store fsync failed: {e}"));
                    return;
                }
                let m = metrics();
                m.store_sync.observe(elapsed.as_secs_f64());
                m.store_batch.observe(job.records as f64);
                let released = d.gate.synced(job.seq);
                (d.pass(released), d.next_job())
            };
            deliver(released, &mut out);
            match more {
                Some(j) => job = j,
                None => break,
            }
        }
    }
}

/// Starts compacting the log beside the decision loop: the live set is
/// taken now (under the lock), written and synced to a new file by a
/// thread without the lock, and the records appended meanwhile are added
/// before the new file replaces the log (under the lock again, briefly).
/// The decision loop never waits for the big write. Everything written
/// before the swap is then durable, so the ACKs waiting for it leave.
fn start_compaction(
    shared: &Arc<Mutex<CommitState>>,
    d: &mut CommitState,
    out: &Sender4,
) -> anyhow::Result<()> {
    let snapshot = d.store.begin_compaction();
    let dir = d.store.dir().to_path_buf();
    let shared = shared.clone();
    let mut out = out.clone_sender()?;
    std::thread::Builder::new()
        .name("dhcp-compact".into())
        .spawn(move || {
            let t = Instant::now();
            let written = LeaseStore::write_snapshot(&dir, &snapshot);
            let Ok(mut d) = shared.lock() else { return };
            let result = written.and_then(|tmp| {
                d.store.finish_compaction(tmp, snapshot.len())?;
                d.store.sync_handle()
            });
            match result {
                Ok(file) => {
                    d.file = Arc::new(file);
                    d.unsynced_records = 0;
                    let last = d.gate.last_written();
                    let released = if d.failed.is_none() {
                        let r = d.gate.durable_through(last);
                        d.pass(r)
                    } else {
                        Vec::new()
                    };
                    let leases = d.store.leases().len();
                    drop(d);
                    deliver(released, &mut out);
                    metrics().store_compactions.inc();
                    tracing::info!(
                        leases,
                        ms = t.elapsed().as_millis() as u64,
                        "lease log compacted (beside the decision loop)"
                    );
                }
                Err(e) => {
                    d.failed = Some(format!("lease store compaction failed: {e}"));
                }
            }
        })?;
    Ok(())
}

/// Writes a decided batch's records (decision order), holds its ACKs in the
/// gate and starts syncs the gate allows. Compacts the log when it grew.
fn write_batch(
    shared_arc: &Arc<Mutex<CommitState>>,
    jobs: &Sender<SyncJob>,
    batch: Durable,
    out: &mut Sender4,
) -> anyhow::Result<()> {
    let mut d = shared_arc
        .lock()
        .map_err(|_| anyhow::anyhow!("lease sync worker panicked"))?;
    if let Some(e) = &d.failed {
        return Err(anyhow::anyhow!("{e}"));
    }
    for op in &batch.records {
        match op {
            StoreOp::Commit(l) => d.store.append_commit(*l),
            StoreOp::Release(ip) => d.store.append_release(*ip),
        }
        .map_err(|e| anyhow::anyhow!("lease store write failed: {e}"))?;
    }
    let replication = d.replication.clone().filter(|_| batch.replicate);
    let records = match &replication {
        Some(_) if !d.store.unwritten().is_empty() => d.store.unwritten().to_vec(),
        _ => Vec::new(),
    };
    d.store
        .write_out()
        .map_err(|e| anyhow::anyhow!("lease store write failed: {e}"))?;
    d.unsynced_records += batch.records.len() as u64;
    let mut released = Vec::new();
    let seq = match replication {
        // The records leave for the other server now, beside the local
        // sync; the replies wait for both while the other server is up
        // (once it counts as down, the local sync alone releases them).
        Some(rep) if !records.is_empty() => {
            let seq = d.gate.written_replicated(batch.replies);
            if let Some(t) = rep.push(seq, &records) {
                released.extend(d.gate.replicated_through(t));
            }
            seq
        }
        _ => d.gate.written(batch.replies),
    };
    if d.durability == Durability::Write {
        // The records are in the page cache: Kea memfile's guarantee.
        released.extend(d.gate.durable_through(seq));
    }
    if !d.store.compacting() && d.store.record_count() > 2 * d.store.leases().len() + 1024 {
        start_compaction(shared_arc, &mut d, out)?;
    }
    // In write mode the gate already counts everything as durable, so no
    // sync starts.
    while let Some(job) = d.next_job() {
        jobs.send(job)
            .map_err(|_| anyhow::anyhow!("lease sync workers stopped"))?;
    }
    let released = d.pass(released);
    drop(d);
    deliver(released, out);
    Ok(())
}

/// The running server.
pub struct Server {
    socket: UdpSocket,
    store: Option<LeaseStore>,
    table: LeaseTable,
    reloads: Receiver<Config>,
    durability: Durability,
    pair: Option<Pair>,
    /// When each conflict was last logged (see `conflict_log`).
    conflicts_logged: HashMap<(Ipv4Addr, Mac, Mac), Instant>,
    /// Clients of the other scope seen unanswered while contact is lost.
    unacked: crate::pair::Unacked,
    /// When this server started (the clock of `unacked`).
    started: Instant,
    /// The conflict prober (None when probing is off or unavailable).
    prober: Option<crate::probe::Prober>,
    /// Offers waiting for their probe, by client, and the client of each
    /// probed address.
    probing: HashMap<Mac, PendingOffer>,
    probing_ip: HashMap<Ipv4Addr, Mac>,
    /// When each in-use address found by a probe was last logged.
    probe_conflicts_logged: HashMap<Ipv4Addr, Instant>,
    /// When a failed probe send was last logged.
    probe_error_logged: Option<Instant>,
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
            table,
            reloads,
            durability,
            pair,
            conflicts_logged: HashMap::new(),
            unacked: crate::pair::Unacked::default(),
            started: Instant::now(),
            prober,
            probing: HashMap::new(),
            probing_ip: HashMap::new(),
            probe_conflicts_logged: HashMap::new(),
            probe_error_logged: None,
        }
    }

    /// Holds back the addresses of lease records the log lost (damaged
    /// records found at start): none is offered to a new client until its
    /// lease would have ended (a full lease from now at the latest), but a
    /// client that asks for it by REQUEST (its owner) gets it, and so does
    /// the MAC the damaged record seemed to name. Logged and counted.
    pub fn quarantine_lost(&mut self, recovery: &Recovery) {
        let now = unix_now();
        let until = now + u64::from(self.table.config().lease_seconds);
        for d in &recovery.dropped {
            let Some((op, l)) = d.unverified else {
                continue;
            };
            if !is_commit(op) {
                continue;
            }
            let suspected = (l.mac != crate::lease_store::DECLINED_MAC).then_some(l.mac);
            if self.table.quarantine_lost(l.ip, suspected, until, now) {
                metrics().store_lost_addresses.inc();
                tracing::warn!(
                    ip = %l.ip,
                    suspected_mac = %l.mac,
                    until,
                    "address of a damaged lease record held back: offered to nobody until its lease would have ended, unless its owner asks for it"
                );
            }
        }
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
        for ip in released_for_moved_reservations(self.table.release_moved_reservations()) {
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
        }));
        if let (Some(p), Some(rep)) = (&self.pair, &replication) {
            for i in 0..crate::peer::REPLICATION_IN_FLIGHT {
                let mut out = sender(self.socket.try_clone()?);
                let (pair, rep, commit) = (p.shared.clone(), rep.clone(), shared.clone());
                std::thread::Builder::new()
                    .name(format!("dhcp-pair-repl-{i}"))
                    .spawn(move || {
                        crate::peer::replication_worker(pair, rep, |(t, refused)| {
                            let released = match commit.lock() {
                                Ok(mut d) if d.failed.is_none() => {
                                    // The other server refused these commits:
                                    // their ACKs are not sent.
                                    d.withheld.extend(refused);
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
        tracing::info!(
            interface = self.table.config().interface.as_deref().unwrap_or("*"),
            server_ip = %self.table.config().server_ip,
            pool = self.table.config().pool_size(),
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
            let [packets, woken, probed] =
                wait_readable(&self.socket, wake, probes, Duration::from_millis(500));
            if woken {
                self.pair_inbox(shared, jobs, out)?;
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
                let o = match pipeline::handle(&mut self.table, &buf[..n], now) {
                    Ok(o) => o,
                    Err(d) => {
                        if d == pipeline::Dropped::PeerScope {
                            self.observe_peer_scope(&buf[..n]);
                        }
                        metrics()
                            .dropped
                            .get_or_create(&metrics::ReasonLabels {
                                reason: d.as_str().to_string(),
                            })
                            .inc();
                        tracing::debug!(%from, reason = d.as_str(), "datagram dropped");
                        continue;
                    }
                };
                observe(&o, from);
                if let Decision::Offer { ip, probe } = o.decision
                    && self.hold_for_probe(&buf[..n], &o, ip, probe, None)
                {
                    continue;
                }
                let kind = match o.decision {
                    Decision::Offer { .. } => "offer",
                    Decision::Nak { .. } => "nak",
                    _ => "ack",
                };
                if o.store.is_empty() {
                    // Nothing durable is promised: send now.
                    if let Some((bytes, dest)) = o.reply {
                        out.send(&bytes, dest, kind);
                    }
                } else {
                    durable.records.extend(o.store);
                    if let Some((bytes, dest)) = o.reply {
                        durable.replies.push(Pending::Reply((bytes, dest, kind)));
                    }
                }
            }
            if !durable.records.is_empty() {
                write_batch(shared, jobs, durable, out)?;
            }
        }
    }

    /// Holds an offer of `ip` until its conflict probe ends, starting the
    /// probe; returns whether it did (the caller then sends nothing now). A
    /// retransmitted DISCOVER of a client whose offer waits only replaces
    /// the reply to send (it carries the latest transaction id): it never
    /// starts a second probe.
    fn hold_for_probe(
        &mut self,
        datagram: &[u8],
        o: &Outcome,
        ip: Ipv4Addr,
        probe: bool,
        earlier: Option<(Instant, u8)>,
    ) -> bool {
        if let Some(p) = self.probing.get_mut(&o.mac) {
            if p.ip == ip {
                p.reply = o.reply.clone();
                p.datagram = datagram.to_vec();
            }
            return true;
        }
        if !probe {
            return false;
        }
        let Some(prober) = &mut self.prober else {
            return false;
        };
        match prober.start_probe(ip) {
            Ok(true) => {
                metrics().probes.inc();
                let (started, answered) = earlier.unwrap_or((Instant::now(), 0));
                self.probing.insert(
                    o.mac,
                    PendingOffer {
                        ip,
                        reply: o.reply.clone(),
                        datagram: datagram.to_vec(),
                        started,
                        answered,
                    },
                );
                self.probing_ip.insert(ip, o.mac);
                true
            }
            Ok(false) => false,
            Err(e) => {
                metrics().probe_errors.inc();
                let now = Instant::now();
                if self
                    .probe_error_logged
                    .is_none_or(|t| now.duration_since(t) >= CONFLICT_LOG_EVERY)
                {
                    self.probe_error_logged = Some(now);
                    tracing::warn!(%ip, error = %e, "conflict probe not sent: offering the address unprobed (logged once a minute)");
                }
                false
            }
        }
    }

    /// Finished conflict probes: an unanswered one lets its offer leave; an
    /// answered one holds the address back (see
    /// [`LeaseTable::probe_answered`]), is counted and logged, and the
    /// DISCOVER is decided again for another address.
    fn probe_results(&mut self, out: &mut Sender4) {
        let Some(prober) = &self.prober else {
            return;
        };
        prober.drain_wake();
        let results: Vec<_> = prober.results.try_iter().collect();
        for (ip, found) in results {
            let Some(mac) = self.probing_ip.remove(&ip) else {
                continue;
            };
            let Some(p) = self.probing.remove(&mac) else {
                continue;
            };
            if found == crate::probe::Found::Nobody {
                metrics()
                    .probe_delay
                    .observe(p.started.elapsed().as_secs_f64());
                if let Some((bytes, dest)) = p.reply {
                    out.send(&bytes, dest, "offer");
                }
                continue;
            }
            metrics().probe_conflicts.inc();
            self.probe_conflict_log(ip, mac);
            let now = unix_now();
            self.table.probe_answered(mac, ip, now);
            let answered = p.answered + 1;
            if answered >= MAX_PROBES_PER_DISCOVER {
                tracing::warn!(%mac, answered, "every address probed for this DISCOVER is in use: no offer this time");
                continue;
            }
            // Decide the DISCOVER again: the quarantined address is skipped.
            let Ok(o) = pipeline::handle(&mut self.table, &p.datagram, now) else {
                continue;
            };
            match o.decision {
                Decision::Offer { ip, probe } => {
                    if !self.hold_for_probe(&p.datagram, &o, ip, probe, Some((p.started, answered)))
                        && let Some((bytes, dest)) = o.reply
                    {
                        out.send(&bytes, dest, "offer");
                    }
                }
                _ => observe(&o, SocketAddr::from((Ipv4Addr::UNSPECIFIED, CLIENT_PORT))),
            }
        }
    }

    /// Logs an address found in use by a probe, once per address a minute
    /// (the counter counts every one).
    fn probe_conflict_log(&mut self, ip: Ipv4Addr, mac: Mac) {
        let now = Instant::now();
        if self
            .probe_conflicts_logged
            .get(&ip)
            .is_some_and(|t| now.duration_since(*t) < CONFLICT_LOG_EVERY)
        {
            return;
        }
        if self.probe_conflicts_logged.len() > 4096 {
            self.probe_conflicts_logged
                .retain(|_, t| now.duration_since(*t) < CONFLICT_LOG_EVERY);
        }
        self.probe_conflicts_logged.insert(ip, now);
        tracing::warn!(
            %ip,
            offered_to = %mac,
            quarantine_seconds = self.table.config().decline_quarantine_seconds,
            "conflict probe: a host answered for an address this server has no binding of; it is held back (offered to nobody, given to a client that asks for it by REQUEST) and the client is offered another"
        );
    }

    /// A request of the other server's scope, not answered here: while
    /// contact is lost, count its client if it has been asking for long
    /// (see [`crate::pair::Unacked`]).
    fn observe_peer_scope(&mut self, datagram: &[u8]) {
        let Some(pair) = &self.pair else { return };
        if !pair.shared.state().recovering() {
            return;
        }
        let Ok(req) = pipeline::parse(datagram).and_then(pipeline::classify) else {
            return;
        };
        let wait = u64::from(pair.shared.peer.unacked_wait_ms);
        let now_ms = self.started.elapsed().as_millis() as u64;
        let before = self.unacked.count();
        let n = self.unacked.observe(req.mac, req.msg.secs(), now_ms, wait);
        if n != before {
            tracing::warn!(mac = %req.mac, unacked_clients = n, "pair: a client of the other server's scope goes unanswered");
            pair.shared.set_unacked(n);
        }
    }

    /// Handles what the pair sent the decision loop: the state, lease
    /// updates from the other server (merged, then made durable before they
    /// are acknowledged) and snapshot requests.
    fn pair_inbox(
        &mut self,
        shared: &Arc<Mutex<CommitState>>,
        jobs: &Sender<SyncJob>,
        out: &mut Sender4,
    ) -> anyhow::Result<()> {
        let Some(pair) = &self.pair else {
            return Ok(());
        };
        let mut drain = [0u8; 256];
        while matches!((&pair.wake).read(&mut drain), Ok(n) if n > 0) {}
        let state = pair.shared.state();
        if self.table.share().is_some_and(|s| s.state != state) {
            self.table.set_pair_state(state);
            if !state.recovering() && self.unacked.count() > 0 {
                self.unacked.clear();
                pair.shared.set_unacked(0);
            }
        }
        let now = unix_now();
        let msgs: Vec<Inbox> = pair.inbox.try_iter().collect();
        for m in msgs {
            match m {
                Inbox::Records { records, done } => {
                    let (ops, report) = self.merge_peer_records(&records, now);
                    if ops.is_empty() {
                        // Nothing new, but what it repeats may not be
                        // durable yet: answer once it is.
                        let released = match shared.lock() {
                            Ok(mut d) => d.gate.after_written(vec![Pending::PeerAck(done, report)]),
                            Err(_) => return Err(anyhow::anyhow!("lease sync worker panicked")),
                        };
                        deliver(released, out);
                    } else {
                        let batch = Durable {
                            records: ops,
                            replies: vec![Pending::PeerAck(done, report)],
                            replicate: false,
                        };
                        write_batch(shared, jobs, batch, out)?;
                    }
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

    /// Merges the other server's records into the table: each is checked
    /// against the config, its expiry moved onto this server's clock, and
    /// merged (see [`LeaseTable::merge_peer_commit`]). Returns the store
    /// operations that make the merge durable and what was refused.
    fn merge_peer_records(&mut self, records: &[u8], now: u64) -> (Vec<StoreOp>, MergeReport) {
        let mut report = MergeReport::default();
        let Some(recs) = decode_records(records) else {
            return (Vec::new(), report);
        };
        let skew = self
            .pair
            .as_ref()
            .map_or(0, |p| p.shared.skew_for_records());
        let m = metrics();
        let mut ops = Vec::new();
        for (op, mut l) in recs {
            l.expires_unix = on_local_clock(l.expires_unix, skew);
            let release = !is_commit(op);
            if let Err(reason) = self.table.check_peer_record(&l, now) {
                metrics::count_reason(&m.pair_records_refused, reason);
                report.refuse(l, release, reason);
                continue;
            }
            if release {
                match self.table.merge_peer_release(l, now) {
                    Ok(true) => ops.push(StoreOp::Release(l.ip)),
                    Ok(false) => {}
                    Err(reason) => {
                        metrics::count_reason(&m.pair_records_refused, reason);
                        report.refuse(l, true, reason);
                    }
                }
                continue;
            }
            match self.table.merge_peer_commit(l, now) {
                Ok(Merged::Stored(l)) => ops.push(StoreOp::Commit(l)),
                Ok(Merged::Known) => {}
                Ok(Merged::Replaced { lease, loser }) => {
                    m.pair_conflicts.inc();
                    self.conflict_log(lease.ip, loser, lease.mac, "the other server's half: its binding is kept, this server's client gets a NAK at its next renewal");
                    ops.push(StoreOp::Commit(lease));
                }
                Err(c) => {
                    m.pair_conflicts.inc();
                    metrics::count_reason(&m.pair_records_refused, "conflict");
                    self.conflict_log(
                        c.theirs.ip,
                        c.holder,
                        c.theirs.mac,
                        "this server's half: its binding is kept and the other server's refused",
                    );
                    report.refuse(l, false, "another client holds the address");
                    report.holders.push(c.ours());
                }
            }
        }
        if !report.refused.is_empty() {
            let first = &report.refused[0];
            tracing::warn!(
                refused = report.refused.len(),
                first_ip = %first.lease.ip,
                first_mac = %first.lease.mac,
                first_expires = first.lease.expires_unix,
                first_reason = first.reason,
                "pair: refused lease records from the other server"
            );
        }
        (ops, report)
    }

    /// Logs a conflict between two live clients for one address, once per
    /// address and pair of MACs a minute (the counter counts every one).
    fn conflict_log(&mut self, ip: Ipv4Addr, ours: Mac, theirs: Mac, kept: &'static str) {
        let now = Instant::now();
        let key = (ip, ours, theirs);
        if self
            .conflicts_logged
            .get(&key)
            .is_some_and(|t| now.duration_since(*t) < CONFLICT_LOG_EVERY)
        {
            return;
        }
        if self.conflicts_logged.len() > 4096 {
            self.conflicts_logged
                .retain(|_, t| now.duration_since(*t) < CONFLICT_LOG_EVERY);
        }
        self.conflicts_logged.insert(key, now);
        tracing::error!(
            %ip,
            this_server_client = %ours,
            other_server_client = %theirs,
            resolution = kept,
            "pair: one address held by two live clients"
        );
    }

    /// Applies a new config; returns the addresses released because a
    /// reservation moved (to persist).
    fn apply_reload(&mut self, c: Config) -> Vec<Ipv4Addr> {
        if c.interface != self.table.config().interface {
            tracing::warn!(
                old = ?self.table.config().interface,
                new = ?c.interface,
                "interface change takes effect at the next restart"
            );
        }
        if c.probe_timeout != self.table.config().probe_timeout {
            tracing::warn!("probe_timeout_ms changes take effect at the next restart");
        }
        if c.peer != self.table.config().peer {
            tracing::warn!("pair settings changes take effect at the next restart");
        }
        let pool = c.pool_size();
        let reservations = c.reservations.len();
        let moved = self.table.reconfigure(Arc::new(c));
        tracing::info!(pool, reservations, "config applied");
        released_for_moved_reservations(moved)
    }

    /// Once a second: reclaim ended offers and quarantines, refresh gauges.
    fn tick(&mut self) {
        // An offer whose probe result never came (it cannot, but a lost
        // entry must not hold a client forever): forgotten; the client's
        // retransmission starts again.
        let timeout = self.table.config().probe_timeout;
        let stale = timeout * u32::from(MAX_PROBES_PER_DISCOVER) + Duration::from_secs(5);
        let probing_ip = &mut self.probing_ip;
        self.probing.retain(|_, p| {
            let keep = p.started.elapsed() < stale;
            if !keep {
                probing_ip.remove(&p.ip);
            }
            keep
        });
        metrics().probes_pending.set(self.probing.len() as i64);
        let now = unix_now();
        self.table.reclaim(now);
        let s = self.table.stats(now);
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
    }
}

/// Logs and counts bindings released because a reservation moved; returns
/// their addresses.
fn released_for_moved_reservations(moved: Vec<crate::leases::Moved>) -> Vec<Ipv4Addr> {
    moved
        .into_iter()
        .map(|m| {
            metrics().reservation_moves.inc();
            tracing::info!(
                mac = %m.mac,
                released = %m.released,
                reserved = %m.reserved,
                "reservation gives the client another address: its old one is released now"
            );
            m.released
        })
        .collect()
}

/// Counts and logs a refusal because a reserved address is held by another
/// client, naming both.
fn reserved_conflict(mac: Mac, refusal: &Refusal) {
    if let Refusal::ReservedAddressInUse { ip, holder } = refusal {
        metrics().reserved_address_conflicts.inc();
        tracing::warn!(
            %mac,
            %ip,
            holder = %holder,
            "reserved address is held by another client; refused until it is free"
        );
    }
}

/// Metric label of a request's message type.
fn kind_label(k: dhcproto::v4::MessageType) -> &'static str {
    use dhcproto::v4::MessageType as T;
    match k {
        T::Discover => "discover",
        T::Request => "request",
        T::Decline => "decline",
        T::Release => "release",
        T::Inform => "inform",
        T::Offer => "offer",
        T::Ack => "ack",
        T::Nak => "nak",
        _ => "other",
    }
}

fn observe(o: &Outcome, from: SocketAddr) {
    let m = metrics();
    count(&m.received, kind_label(o.kind));
    match &o.decision {
        Decision::Offer { ip, .. } => tracing::debug!(mac = %o.mac, %ip, "offer"),
        Decision::Ack { commit } => {
            tracing::info!(mac = %o.mac, ip = %commit.lease.ip, expires = commit.lease.expires_unix, "lease committed")
        }
        Decision::InformAck => tracing::debug!(mac = %o.mac, %from, "inform"),
        Decision::Nak {
            reason, refusal, ..
        } => {
            m.naks.inc();
            tracing::info!(mac = %o.mac, %from, reason, "nak");
            if let Some(r) = refusal {
                reserved_conflict(o.mac, r);
            }
        }
        Decision::Released { ip } => tracing::info!(mac = %o.mac, %ip, "lease released"),
        Decision::Declined { quarantine } => {
            m.declines.inc();
            tracing::warn!(mac = %o.mac, ip = %quarantine.ip, until = quarantine.expires_unix, "address declined, quarantined");
        }
        Decision::NoAddress { refusal } => {
            if *refusal == Refusal::PoolExhausted {
                m.pool_exhausted.inc();
            }
            tracing::warn!(mac = %o.mac, reason = refusal.as_str(), "no address to offer");
            reserved_conflict(o.mac, refusal);
        }
        Decision::Ignore { reason } => tracing::debug!(mac = %o.mac, reason, "ignored"),
    }
}
