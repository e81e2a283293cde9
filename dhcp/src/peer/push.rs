//! The sending side of replication: the window of requests shared by the
//! decision loop and the replication workers, which POST them to the other
//! server on kept-alive connections and release the ACKs that waited for
//! them (ordering rules in [`crate::replication`]).

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::client::Client;
use super::{
    API_PREFIX, PairShared, REPLICATION_IN_FLIGHT, REQUEST_HEADER, Refusal, STREAM_HEADER,
};
use crate::commit::Seq;
use crate::lease_store::RECORD_LEN;
use crate::metrics::metrics;
use crate::replication::{Stream, Window};

/// The sending side of replication, shared by the decision loop (which
/// pushes each written batch's records) and the replication workers.
pub struct Replication {
    window: Mutex<Window>,
    moved: Condvar,
    /// A worker is opening a stream (only one does at a time).
    opening: AtomicBool,
}

impl Replication {
    /// A window with no stream yet (the first is opened with the other
    /// server); requests hold at most `max_records` records.
    pub fn new(max_records: usize) -> Replication {
        Replication {
            window: Mutex::new(Window::new(
                REPLICATION_IN_FLIGHT,
                (max_records / REPLICATION_IN_FLIGHT).max(1) * RECORD_LEN,
            )),
            moved: Condvar::new(),
            opening: AtomicBool::new(false),
        }
    }

    /// Batch `seq` wrote `records` for the other server. Returns a new
    /// watermark when nothing is left to wait for.
    pub fn push(&self, seq: Seq, records: &[u8]) -> Option<Seq> {
        let t = self.window.lock().ok()?.push(seq, records);
        self.moved.notify_one();
        t
    }
}

/// What a replication worker reports.
#[derive(Debug, Default)]
pub struct Replicated {
    /// A new watermark: every batch up to it is stored there (0: none).
    pub through: Seq,
    /// Addresses whose commit the other server refused (their ACKs are
    /// not sent).
    pub refused: Vec<Ipv4Addr>,
    /// Updates were abandoned (the other server counts as down): nothing
    /// sent to it counts as held any more (see [`crate::peer_holds`]).
    pub holds_lost: bool,
    /// A new stream was opened (the first one, or after a failure: the
    /// other server may have restarted): what it acknowledged earlier no
    /// longer counts as held; what is still to be acknowledged goes on the
    /// new stream and counts once acknowledged there.
    pub new_stream: bool,
}

/// A replication worker (run [`REPLICATION_IN_FLIGHT`] of them): takes the
/// next request the window allows, POSTs it on its kept-alive connection
/// and reports each new watermark to `replicated` (which releases the
/// ACKs waiting for it). When the other server answers heartbeats but
/// stores nothing for `down_after_ms`, it is marked stalled (the heartbeat
/// then moves to communication recovery). Runs forever.
pub fn replication_worker(
    shared: Arc<PairShared>,
    rep: Arc<Replication>,
    mut replicated: impl FnMut(Replicated),
) {
    let p = &shared.peer;
    let timeout = Duration::from_millis(u64::from(p.down_after_ms));
    // Replication on one kept-alive connection, stream requests on another.
    let conn = Client::new(&p.api, &p.token, timeout);
    let client = Client::new(&p.api, &p.token, timeout);
    let m = metrics();
    let path = format!("{API_PREFIX}/leases");
    loop {
        let req = {
            let Ok(mut w) = rep.window.lock() else { return };
            loop {
                if w.busy() && !shared.replicating() {
                    // Not waited for (see the module docs).
                    let (t, dropped) = w.abandon();
                    m.pair_updates_unsent.inc_by((dropped / RECORD_LEN) as u64);
                    drop(w);
                    rep.moved.notify_all();
                    replicated(Replicated {
                        through: t,
                        holds_lost: true,
                        ..Replicated::default()
                    });
                    break None;
                }
                if w.needs_stream() && !rep.opening.swap(true, Ordering::SeqCst) {
                    drop(w);
                    let opened = open_stream(&client);
                    let Ok(mut w2) = rep.window.lock() else {
                        return;
                    };
                    rep.opening.store(false, Ordering::SeqCst);
                    match opened {
                        Some(s) if w2.needs_stream() => {
                            w2.set_stream(s);
                            drop(w2);
                            replicated(Replicated {
                                new_stream: true,
                                ..Replicated::default()
                            });
                            rep.moved.notify_all();
                            break None;
                        }
                        Some(_) => {}
                        None => {
                            m.pair_update_errors.inc();
                            note_failure(&shared, timeout);
                            drop(w2);
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    }
                    rep.moved.notify_all();
                    break None;
                }
                if let Some(r) = w.next_request() {
                    break Some(r);
                }
                w = match rep.moved.wait_timeout(w, Duration::from_millis(200)) {
                    Ok((w, _)) => w,
                    Err(_) => return,
                };
            }
        };
        let Some(req) = req else { continue };
        let headers = [
            (STREAM_HEADER, req.stream.header()),
            (REQUEST_HEADER, req.n.to_string()),
        ];
        let result = conn.send("POST", &path, &headers, &req.records);
        let refusal = match &result {
            Ok((409, body)) => Some(Refusal::parse(body)),
            _ => None,
        };
        if let Some(r) = &refusal {
            // Those records are not stored there: merge the bindings it
            // holds (the conflict is settled the same way here), and do
            // not ACK the refused commits.
            if !r.holders.is_empty() {
                let _ = shared.store_records(r.holders.clone(), Duration::from_secs(30));
            }
        }
        let Ok(mut w) = rep.window.lock() else { return };
        let refused_commits = refusal.as_ref().map(|r| r.commits.clone());
        match (result, refusal) {
            (Ok((204, _)), _) | (Ok((409, _)), Some(_)) => {
                clear_failure(&shared);
                m.pair_updates_sent
                    .inc_by((req.records.len() / RECORD_LEN) as u64);
                let t = w.acked(req.stream, req.n);
                drop(w);
                rep.moved.notify_all();
                let refused = refused_commits.unwrap_or_default();
                if t.is_some() || !refused.is_empty() {
                    replicated(Replicated {
                        through: t.unwrap_or(0),
                        refused,
                        ..Replicated::default()
                    });
                }
            }
            (other, _) => {
                m.pair_update_errors.inc();
                match other {
                    Ok((status, _)) => tracing::debug!(
                        status,
                        stream = %req.stream.header(),
                        n = req.n,
                        "pair: a lease update was refused; resending"
                    ),
                    Err(e) => {
                        tracing::debug!(error = %e, "pair: lease update failed; resending")
                    }
                }
                let restarted = w.failed(req.stream);
                drop(w);
                note_failure(&shared, timeout);
                rep.moved.notify_all();
                if restarted {
                    // Not a busy loop while the other server is in trouble.
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }
}

/// Asks the other server for a new replication stream.
fn open_stream(c: &Client) -> Option<Stream> {
    let (status, body) = c.call("POST", &format!("{API_PREFIX}/streams"), &[]).ok()?;
    if status != 200 {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&body).ok()?;
    Stream::parse(v.get("stream")?.as_str()?)
}

/// Since when updates fail (None: the last one went through).
static FAILING_SINCE: Mutex<Option<Instant>> = Mutex::new(None);

/// An update failed: once they have failed for `limit` while heartbeats
/// still answer, the other server counts as stalled.
fn note_failure(shared: &PairShared, limit: Duration) {
    let Ok(mut f) = FAILING_SINCE.lock() else {
        return;
    };
    let since = *f.get_or_insert_with(Instant::now);
    if since.elapsed() >= limit
        && shared.peer_reachable()
        && !shared.stalled.swap(true, Ordering::Relaxed)
    {
        metrics().pair_updates_stalled.set(1);
        tracing::error!(
            failing_ms = since.elapsed().as_millis() as u64,
            "pair: the other server answers heartbeats but stores none of this server's lease updates; no longer waiting for it"
        );
    }
}

fn clear_failure(shared: &PairShared) {
    if let Ok(mut f) = FAILING_SINCE.lock() {
        *f = None;
    }
    if shared.stalled.swap(false, Ordering::Relaxed) {
        metrics().pair_updates_stalled.set(0);
    }
}
