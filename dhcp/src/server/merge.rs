//! Lease records from the other server of a pair, merged into the table:
//! checked against the config, moved onto this server's clock, conflicts
//! settled (see [`crate::leases::LeaseTable::merge_peer_commit`]) and
//! logged once per address and pair of clients a minute.

use std::net::Ipv4Addr;
use std::time::Instant;

use super::decide::Decisions;
use crate::config::Mac;
use crate::lease_store::{decode_records, is_commit};
use crate::leases::Merged;
use crate::metrics::{self, metrics};
use crate::peer::MergeReport;
use crate::pipeline::StoreOp;

/// An expiry on the other server's clock moved onto this server's:
/// `skew` is how far the other clock is ahead, in seconds.
pub fn on_local_clock(expires: u64, skew: i64) -> u64 {
    if expires == 0 {
        return 0;
    }
    u64::try_from(i128::from(expires) - i128::from(skew)).unwrap_or(0)
}

impl Decisions {
    /// Merges the other server's records into the table: each is checked
    /// against the config, its expiry moved onto this server's clock, and
    /// merged (see [`crate::leases::LeaseTable::merge_peer_commit`]). Returns the store
    /// operations that make the merge durable and what was refused. `skew`
    /// is how far the other server's clock is ahead, in seconds;
    /// `peer_took_over` whether the other server says it took over (see
    /// [`crate::leases::LeaseTable::check_peer_half`]).
    pub fn merge_peer_records(
        &mut self,
        records: &[u8],
        skew: i64,
        peer_took_over: bool,
        now: u64,
    ) -> (Vec<StoreOp>, MergeReport) {
        let mut report = MergeReport::default();
        let Some(recs) = decode_records(records) else {
            return (Vec::new(), report);
        };
        let m = metrics();
        let mut ops = Vec::new();
        let peer = crate::inventory::rows::peer_role_of(&self.table)
            .unwrap_or(oooi_dhcp_inventory::ServerRole::Single);
        for (op, mut l) in recs {
            l.expires_unix = on_local_clock(l.expires_unix, skew);
            let release = !is_commit(op);
            if let Err(reason) = self.table.check_peer_record(&l, now).and_then(|()| {
                if release {
                    Ok(())
                } else {
                    self.table.check_peer_half(&l, peer_took_over)
                }
            }) {
                metrics::count_reason(&m.pair_records_refused, reason);
                report.refuse(l, release, reason);
                continue;
            }
            if release {
                match self.table.merge_peer_release(l, now) {
                    Ok(true) => {
                        self.meta.released(l.ip, l.mac, peer, now);
                        ops.push(StoreOp::Release(l.ip))
                    }
                    Ok(false) => {}
                    Err(reason) => {
                        metrics::count_reason(&m.pair_records_refused, reason);
                        report.refuse(l, true, reason);
                    }
                }
                continue;
            }
            match self.table.merge_peer_commit(l, now) {
                Ok(Merged::Stored(l)) => {
                    self.learned(&l, peer);
                    ops.push(StoreOp::Commit(l))
                }
                Ok(Merged::Known) => {}
                Ok(Merged::Replaced { lease, loser }) => {
                    self.learned(&lease, peer);
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
        (ops, report)
    }

    /// A binding the other server (`peer`) sent, stored here: its
    /// metadata says so. The client's last transaction is its expiry less
    /// the lead and one lease time (when the other server granted or
    /// renewed it); a quarantine has no client.
    fn learned(
        &mut self,
        l: &crate::lease_store::StoredLease,
        peer: oooi_dhcp_inventory::ServerRole,
    ) {
        if l.mac == crate::lease_store::DECLINED_MAC {
            self.meta.forget(l.ip);
            return;
        }
        let lease = u64::from(self.table.config().lease_seconds);
        let lead = crate::peer_holds::lead(self.table.config().lease_seconds);
        let cltt = l.expires_unix.checked_sub(lead + lease);
        self.meta.learned(l.ip, l.mac, peer, cltt);
    }

    /// Logs a conflict between two live clients for one address, once per
    /// address and pair of MACs a minute (the counter counts every one).
    fn conflict_log(&mut self, ip: Ipv4Addr, ours: Mac, theirs: Mac, kept: &'static str) {
        if !self
            .conflicts_logged
            .allow((ip, ours, theirs), Instant::now())
        {
            return;
        }
        tracing::error!(
            %ip,
            this_server_client = %ours,
            other_server_client = %theirs,
            resolution = kept,
            "pair: one address held by two live clients"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease_store::{StoredLease, encode_leases};
    use crate::server::decide::tests::{NOW, decisions};

    fn lease(ip: u8, mac: u8, expires_unix: u64) -> StoredLease {
        StoredLease {
            ip: Ipv4Addr::new(192, 0, 2, ip),
            mac: Mac([2, 0, 0, 0, 0, mac]),
            expires_unix,
        }
    }

    #[test]
    fn an_expiry_on_the_other_clock_is_moved_onto_this_one() {
        assert_eq!(on_local_clock(NOW + 3600, 60), NOW + 3540);
        assert_eq!(on_local_clock(NOW, -60), NOW + 60);
        // "No expiry" stays so, and a skew beyond the epoch stops at zero.
        assert_eq!(on_local_clock(0, 60), 0);
        assert_eq!(on_local_clock(10, 60), 0);
    }

    #[test]
    fn a_record_from_the_other_server_is_stored_on_this_clock() {
        let mut d = decisions();
        let theirs = lease(100, 1, NOW + 3600 + 30);
        let (ops, report) = d.merge_peer_records(&encode_leases([&theirs]), 30, false, NOW);
        assert!(report.refused.is_empty());
        assert_eq!(ops, vec![StoreOp::Commit(lease(100, 1, NOW + 3600))]);
    }

    #[test]
    fn a_renewal_by_the_holder_moves_the_expiry_forward_and_a_repeat_writes_nothing() {
        let mut d = decisions();
        d.merge_peer_records(&encode_leases([&lease(100, 1, NOW + 3600)]), 0, false, NOW);
        let renewed = lease(100, 1, NOW + 1800 + 3600);
        let (ops, report) = d.merge_peer_records(&encode_leases([&renewed]), 0, false, NOW + 1800);
        assert!(report.refused.is_empty());
        assert_eq!(ops, vec![StoreOp::Commit(renewed)]);
        let (again, _) = d.merge_peer_records(&encode_leases([&renewed]), 0, false, NOW + 1800);
        assert!(again.is_empty());
    }

    #[test]
    fn a_record_for_an_address_another_live_client_holds_is_refused_naming_the_holder() {
        let mut d = decisions();
        let ours = lease(100, 1, NOW + 3600);
        d.merge_peer_records(&encode_leases([&ours]), 0, false, NOW);
        let (ops, report) =
            d.merge_peer_records(&encode_leases([&lease(100, 2, NOW + 3600)]), 0, false, NOW);
        assert!(ops.is_empty());
        assert_eq!(report.refused.len(), 1);
        assert_eq!(report.refused[0].reason, "another client holds the address");
        assert_eq!(report.holders, vec![ours]);
    }

    #[test]
    fn records_outside_the_subnet_or_for_the_gateway_are_refused_with_their_reason() {
        let mut d = decisions();
        let outside = StoredLease {
            ip: Ipv4Addr::new(198, 51, 100, 7),
            ..lease(100, 1, NOW + 3600)
        };
        let gateway = lease(1, 2, NOW + 3600);
        let (ops, report) =
            d.merge_peer_records(&encode_leases([&outside, &gateway]), 0, false, NOW);
        assert!(ops.is_empty());
        let reasons: Vec<_> = report.refused.iter().map(|r| r.reason).collect();
        assert_eq!(
            reasons,
            vec!["address outside the subnet", "a server or gateway address"]
        );
    }

    #[test]
    fn a_body_that_is_not_whole_records_stores_nothing() {
        let mut d = decisions();
        let (ops, report) = d.merge_peer_records(&[1, 2, 3], 0, false, NOW);
        assert!(ops.is_empty() && report.refused.is_empty());
    }
}
