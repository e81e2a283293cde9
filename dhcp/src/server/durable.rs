//! Making decided batches durable: the log writes of the decision loop,
//! the sync workers' `fdatasync`s, compaction beside the loop, and the
//! release of the ACKs that waited for them (and, in a pair, for the other
//! server: see [`crate::commit::AckGate`]).

use std::fs::File;
use std::net::Ipv4Addr;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::socket::Sender4;
use crate::commit::{AckGate, Seq};
use crate::lease_store::{LeaseStore, StoredLease, decode_records, encode_record, is_commit};
use crate::metrics::metrics;
use crate::peer::MergeReport;
use crate::peer_holds::{PeerHolds, for_peer};
use crate::pipeline::{Destination, StoreOp};

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
pub(super) struct Durable {
    pub(super) records: Vec<StoreOp>,
    pub(super) replies: Vec<Pending>,
    /// ACKs of one lease each: in a pair, sent once the lease is durable
    /// here when the other server already holds it that long (a lazy
    /// update, see [`crate::peer_holds`]), else they wait like `replies`.
    pub(super) renewals: Vec<(StoredLease, Pending)>,
    /// Whether the records go to the other server of a pair (not when they
    /// came from it). Its replies then also wait for the other server's
    /// acknowledgement, unless that server counts as down.
    pub(super) replicate: bool,
}

/// Sends released items.
pub(super) fn deliver(items: Vec<Pending>, out: &mut Sender4) {
    for i in items {
        match i {
            Pending::Reply((bytes, dest, kind)) => out.send(&bytes, dest, kind),
            Pending::PeerAck(done, report) => {
                let _ = done.send(report);
            }
        }
    }
}

/// The durable side shared by the decision loop (which writes and starts
/// syncs) and the sync workers (which finish them and send the ACKs).
pub(super) struct CommitState {
    pub(super) store: LeaseStore,
    pub(super) gate: AckGate<Pending>,
    /// Replication to the other server of a pair.
    pub(super) replication: Option<Arc<crate::peer::Replication>>,
    /// Handle on the current log file for the workers' fdatasync.
    pub(super) file: Arc<File>,
    /// Records written since the last sync started (for the batch metric).
    pub(super) unsynced_records: u64,
    /// When an ACK may leave.
    pub(super) durability: Durability,
    /// Set by a failed fdatasync: nothing is released any more (after a
    /// failed fsync the page cache cannot be trusted, so a later successful
    /// sync proves nothing) and the decision loop exits with this error.
    pub(super) failed: Option<String>,
    /// Addresses whose commit the other server of a pair refused: the next
    /// ACK released for each is not sent (the gate releases in decision
    /// order, so that is the refused one).
    pub(super) withheld: std::collections::HashSet<Ipv4Addr>,
    /// What the other server of a pair holds (lazy updates).
    pub(super) holds: PeerHolds,
    /// The lead added to expiries sent to the other server (seconds).
    pub(super) lead: u64,
}

/// The address an encoded reply gives (BOOTP `yiaddr`).
fn reply_yiaddr(bytes: &[u8]) -> Option<Ipv4Addr> {
    let b: [u8; 4] = bytes.get(16..20)?.try_into().ok()?;
    Some(Ipv4Addr::from(b))
}

/// One fdatasync to run: it covers every batch up to `seq`.
pub(super) struct SyncJob {
    file: Arc<File>,
    seq: Seq,
    records: u64,
}

impl CommitState {
    /// Drops the released ACKs of commits the other server refused.
    pub(super) fn pass(&mut self, items: Vec<Pending>) -> Vec<Pending> {
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
    pub(super) fn next_job(&mut self) -> Option<SyncJob> {
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
pub(super) fn sync_worker(
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

/// The records written for the other server of a pair, as it is sent them
/// (each client's expiry `lead` seconds later, see
/// [`crate::peer_holds::for_peer`]), the bindings among them, and the
/// addresses they release.
fn for_peer_records(written: &[u8], lead: u64) -> (Vec<u8>, Vec<StoredLease>, Vec<Ipv4Addr>) {
    let Some(decoded) = decode_records(written) else {
        // Cannot happen (this process encoded them); sent as written, and
        // nothing counts as held.
        return (written.to_vec(), Vec::new(), Vec::new());
    };
    let mut out = Vec::with_capacity(written.len());
    let mut bindings = Vec::new();
    let mut released = Vec::new();
    for (op, l) in decoded {
        let sent = for_peer(&l, lead);
        out.extend_from_slice(&encode_record(is_commit(op), &sent));
        if is_commit(op) {
            bindings.push(sent);
        } else {
            // A release after a commit of the same batch ends that hold too.
            bindings.retain(|b: &StoredLease| b.ip != l.ip);
            released.push(l.ip);
        }
    }
    (out, bindings, released)
}

/// Writes a decided batch's records (decision order), holds its ACKs in the
/// gate and starts syncs the gate allows. Compacts the log when it grew.
pub(super) fn write_batch(
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
    let (records, bindings, released_ips) = match &replication {
        Some(_) if !d.store.unwritten().is_empty() => for_peer_records(d.store.unwritten(), d.lead),
        _ => (Vec::new(), Vec::new(), Vec::new()),
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
            // Renewals the other server already holds: ACKed after the
            // local sync alone, their update goes along unwaited.
            let mut wait = batch.replies;
            let mut lazy = Vec::new();
            for (l, reply) in batch.renewals {
                if d.holds.covers(&l) {
                    lazy.push(reply);
                } else {
                    wait.push(reply);
                }
            }
            if !lazy.is_empty() {
                metrics().pair_lazy_acks.inc_by(lazy.len() as u64);
                d.gate.written(lazy);
            }
            let seq = d.gate.written_replicated(wait);
            d.holds.sent(seq, bindings, &released_ips);
            if let Some(t) = rep.push(seq, &records) {
                released.extend(d.gate.replicated_through(t));
            }
            seq
        }
        _ => {
            let mut replies = batch.replies;
            replies.extend(batch.renewals.into_iter().map(|(_, r)| r));
            d.gate.written(replies)
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Mac;
    use crate::lease_store::DECLINED_MAC;

    fn lease(ip: u8, mac: [u8; 6], expires_unix: u64) -> StoredLease {
        StoredLease {
            ip: Ipv4Addr::new(192, 0, 2, ip),
            mac: Mac(mac),
            expires_unix,
        }
    }

    #[test]
    fn the_other_server_is_sent_each_client_expiry_plus_the_lead_and_the_releases() {
        let client = lease(100, [2, 0, 0, 0, 0, 1], 5000);
        let quarantine = lease(101, DECLINED_MAC.0, 5000);
        let gone = lease(102, [2, 0, 0, 0, 0, 2], 4000);
        let mut written = encode_record(true, &client);
        written.extend(encode_record(true, &quarantine));
        written.extend(encode_record(false, &gone));
        let (sent, bindings, released) = for_peer_records(&written, 60);
        let decoded = decode_records(&sent).expect("whole records");
        let expiries: Vec<_> = decoded
            .iter()
            .map(|(op, l)| (is_commit(*op), l.ip, l.expires_unix))
            .collect();
        assert_eq!(
            expiries,
            vec![
                (true, client.ip, 5060),
                (true, quarantine.ip, 5000),
                (false, gone.ip, 4060),
            ]
        );
        assert_eq!(bindings.len(), 2);
        assert_eq!(released, vec![gone.ip]);
    }

    #[test]
    fn a_commit_released_in_the_same_batch_counts_as_no_binding() {
        let client = lease(100, [2, 0, 0, 0, 0, 1], 5000);
        let mut written = encode_record(true, &client);
        written.extend(encode_record(false, &client));
        let (_, bindings, released) = for_peer_records(&written, 60);
        assert!(bindings.is_empty());
        assert_eq!(released, vec![client.ip]);
    }
}
