//! The heartbeat: the other server's state and clock skew every
//! `heartbeat_ms`, the moves between the pair's states (decided in
//! [`crate::pair::next_state`]), and the lease exchange that ends a
//! resync.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::client::Client;
use super::{API_PREFIX, PairShared, Refusal};
use crate::lease_store::{RECORD_LEN, decode_records};
use crate::metrics::metrics;
use crate::pair::{Heartbeat, Observation, PairState, SKEW_WARN_SECONDS, Step, next_state};

/// One heartbeat: the other server's state and its clock's skew (other
/// minus this, milliseconds, measured at the middle of the round trip).
fn peer_state(c: &Client) -> (Heartbeat, Option<i64>) {
    let sent = SystemTime::now();
    let Ok((status, body)) = c.call("GET", &format!("{API_PREFIX}/state"), &[]) else {
        return (Heartbeat::Unreachable, None);
    };
    let got = SystemTime::now();
    if status == 401 {
        return (Heartbeat::Unauthorized, None);
    }
    if status != 200 {
        return (Heartbeat::Unreachable, None);
    }
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return (Heartbeat::Unreachable, None);
    };
    let Some(state) = v
        .get("state")
        .and_then(|s| s.as_str())
        .and_then(PairState::parse)
    else {
        return (Heartbeat::Unreachable, None);
    };
    let ms = |t: SystemTime| {
        t.duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    };
    let skew = v
        .get("unix_ms")
        .and_then(|u| u.as_i64())
        .map(|theirs| theirs - (ms(sent) + ms(got)) / 2);
    (Heartbeat::Answered(state), skew)
}

/// Pulls the other server's leases into this one, then pushes this
/// server's leases to it (in bodies of at most `max_records`). True when
/// both went through. Conflicts are settled as in
/// [`crate::leases::LeaseTable::merge_peer_commit`]: the bindings the other
/// server sends back with a 409 are merged here, so the stores converge.
fn exchange(shared: &PairShared, c: &Client) -> bool {
    let wait = Duration::from_secs(30);
    let pulled = match c.call("GET", &format!("{API_PREFIX}/leases"), &[]) {
        Ok((200, body)) if decode_records(&body).is_some() => body,
        Ok((status, _)) => {
            tracing::warn!(status, "pair: the other server refused its lease snapshot");
            return false;
        }
        Err(e) => {
            tracing::warn!(error = %e, "pair: cannot fetch the other server's leases");
            return false;
        }
    };
    let n = pulled.len() / RECORD_LEN;
    let mut refused = 0;
    for chunk in pulled.chunks(shared.max_records * RECORD_LEN) {
        match shared.store_records(chunk.to_vec(), wait) {
            Some(r) => refused += r.refused.len(),
            None => return false,
        }
    }
    let Some(mine) = shared.snapshot(wait) else {
        return false;
    };
    let pushed = mine.len() / RECORD_LEN;
    let mut conflicts = 0;
    for chunk in mine.chunks(shared.max_records * RECORD_LEN) {
        match c.call("POST", &format!("{API_PREFIX}/leases"), chunk) {
            Ok((204, _)) => {}
            Ok((409, body)) => {
                let r = Refusal::parse(&body);
                conflicts += r.commits.len();
                if !r.holders.is_empty() && shared.store_records(r.holders, wait).is_none() {
                    return false;
                }
            }
            Ok((status, _)) => {
                tracing::warn!(
                    status,
                    "pair: the other server refused this server's leases"
                );
                return false;
            }
            Err(e) => {
                tracing::warn!(error = %e, "pair: cannot push leases to the other server");
                return false;
            }
        }
    }
    metrics().pair_syncs.inc();
    tracing::info!(
        pulled = n,
        pushed,
        refused_here = refused,
        refused_there = conflicts,
        "pair: leases exchanged with the other server"
    );
    true
}

/// The heartbeat: asks the other server for its state every
/// `heartbeat_ms`, measures the clock skew, and moves this server between
/// the states as [`next_state`] decides. Runs forever.
pub fn heartbeat(shared: Arc<PairShared>) {
    let p = &shared.peer;
    let c = Client::new(
        &p.api,
        &p.token,
        Duration::from_millis(u64::from(p.heartbeat_ms).max(200)),
    );
    let every = Duration::from_millis(u64::from(p.heartbeat_ms));
    let down_after = Duration::from_millis(u64::from(p.down_after_ms));
    let started = Instant::now();
    let mut last_answer: Option<Instant> = None;
    // Any answer, a refused token included: the process lives.
    let mut last_reply: Option<Instant> = None;
    let mut vlan_was_alive = true;
    let mut skew_warned: Option<Instant> = None;
    let mut refused_logged: Option<Instant> = None;
    let m = metrics();
    loop {
        let (hb, skew) = peer_state(&c);
        let now = Instant::now();
        match hb {
            Heartbeat::Answered(s) => {
                last_answer = Some(now);
                last_reply = Some(now);
                if let Ok(mut t) = shared.last_ok.lock() {
                    *t = Some(now);
                }
                if let Ok(mut t) = shared.peer_state.lock() {
                    *t = Some(s);
                }
            }
            Heartbeat::Unauthorized => {
                last_reply = Some(now);
                m.pair_heartbeat_failures.inc();
            }
            Heartbeat::Unreachable => {
                m.pair_heartbeat_failures.inc();
            }
        }
        if let Some(ms) = skew {
            shared.skew_ms.store(ms, Ordering::Relaxed);
            shared.skew_known.store(true, Ordering::Relaxed);
            let secs = ms as f64 / 1000.0;
            m.pair_clock_skew.set(secs);
            if secs.abs() > SKEW_WARN_SECONDS
                && skew_warned.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(60))
            {
                skew_warned = Some(now);
                tracing::warn!(
                    skew_seconds = secs,
                    warn_above = SKEW_WARN_SECONDS,
                    refuse_takeover_above = crate::pair::SKEW_REFUSE_SECONDS,
                    "pair: the two servers' clocks differ; lease times from the other server are moved onto this clock, and above 60 s this server will not take over"
                );
            }
        }
        let reference = last_reply.unwrap_or(started);
        let (vlan_alive, vlan_state) = shared.vlan_view();
        m.pair_vlan_alive.set(i64::from(vlan_alive));
        if vlan_alive != vlan_was_alive {
            vlan_was_alive = vlan_alive;
            if vlan_alive {
                tracing::info!("pair: the other server is heard on the VLAN again");
            } else {
                tracing::warn!(
                    pair_link = if last_answer.is_some_and(|t| now.duration_since(t) <= down_after)
                    {
                        "answering"
                    } else {
                        "silent"
                    },
                    "pair: no VLAN heartbeat from the other server for down_after_ms"
                );
            }
        }
        let o = Observation {
            heartbeat: hb,
            in_contact: last_answer.is_some_and(|t| now.duration_since(t) <= down_after),
            silent: now.duration_since(reference) > down_after,
            updates_stalled: shared.stalled.load(Ordering::Relaxed),
            vlan_alive,
            vlan_state,
            skew: shared.skew(),
        };
        match next_state(shared.state(), &o) {
            Step::Stay => {}
            Step::Move(to, reason) => {
                if to == PairState::PartnerDown {
                    m.pair_takeovers.inc();
                }
                shared.set_state(to, reason);
            }
            Step::Exchange => {
                if exchange(&shared, &c) {
                    shared.stalled.store(false, Ordering::Relaxed);
                    m.pair_updates_stalled.set(0);
                    shared.set_state(PairState::LoadBalancing, "leases exchanged");
                }
            }
            Step::RefuseTakeover(reason) => {
                crate::metrics::count_reason(&m.pair_takeovers_refused, "clock skew");
                crate::metrics::set_pair_status(shared.state().as_str(), reason);
                if refused_logged.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(30)) {
                    refused_logged = Some(now);
                    tracing::error!(
                        skew_seconds = o.skew.unwrap_or(0.0),
                        reason,
                        "pair: the other server is silent on the pair link and on the VLAN, but this server refuses to take over"
                    );
                }
            }
        }
        std::thread::sleep(every);
    }
}
