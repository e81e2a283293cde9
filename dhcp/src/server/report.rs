//! What the server logs and counts about its decisions, recovery and
//! reservations (no decision is made here).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;

use crate::config::Mac;
use crate::lease_store::Recovery;
use crate::leases::Refusal;
use crate::metrics::{count, metrics};
use crate::pipeline::{Decision, Outcome};

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

/// Logs and counts bindings released because a reservation moved; returns
/// their addresses.
pub(super) fn released_for_moved_reservations(moved: Vec<crate::leases::Moved>) -> Vec<Ipv4Addr> {
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

/// Counts a decided request and logs its decision.
pub(super) fn observe(o: &Outcome, from: SocketAddr) {
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
