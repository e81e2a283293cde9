//! Lazy updates with a bounded lead: what the other server of a pair holds
//! for each address, and the rule that lets a renewal be ACKed before the
//! other server has its update. No I/O; the server keeps one
//! [`PeerHolds`] beside its commit gate.
//!
//! The DHCP failover protocol's lazy update (draft-ietf-dhc-failover,
//! "lazy updates" and the MCLT): every binding sent to the other server
//! carries a *potential expiration*, the client's expiry plus a lead (here
//! one lease time, [`lead`]). The other server holds the address for that
//! client until then. A later renewal whose new expiry the other server
//! already holds (same client, potential expiration not earlier than the
//! new expiry) may be ACKed once it is durable here: its update goes to the
//! other server lazily, with the next replication request, and is not
//! waited for. Any other commit (a new lease, a renewal beyond what the
//! other server holds) waits for the other server as before.
//!
//! Safety: the other server never gives an address away while its client
//! may still hold it. If this server dies right after a lazily ACKed
//! renewal, the survivor still holds the address until at least the
//! client's real expiry, because it stored a potential expiration not
//! earlier than that before the ACK left. A hold counts only once the other
//! server acknowledged storing it durably. What it acknowledged is
//! forgotten when the replication stream is replaced (it may have
//! restarted); everything is forgotten when updates were abandoned (it
//! counted as down); an address is forgotten when the other server refused
//! it or this server released it.

use std::collections::{HashMap, VecDeque};
use std::net::Ipv4Addr;

use crate::commit::Seq;
use crate::config::Mac;
use crate::lease_store::{DECLINED_MAC, StoredLease};

/// The lead added to a binding's expiry when it is sent to the other
/// server: one lease time.
pub fn lead(lease_seconds: u32) -> u64 {
    u64::from(lease_seconds)
}

/// A binding as the other server is sent it: a client's lease ends `lead`
/// seconds later there (its potential expiration); quarantines
/// ([`DECLINED_MAC`]) and "no expiry" (0) are sent as they are.
pub fn for_peer(l: &StoredLease, lead: u64) -> StoredLease {
    if l.mac == DECLINED_MAC || l.expires_unix == 0 {
        return *l;
    }
    StoredLease {
        expires_unix: l.expires_unix.saturating_add(lead),
        ..*l
    }
}

/// What the other server holds, as far as this server knows for sure.
#[derive(Debug, Default)]
pub struct PeerHolds {
    /// Bindings sent with a replication batch, not acknowledged yet.
    sent: VecDeque<(Seq, Vec<StoredLease>)>,
    /// Bindings the other server stored durably: address → (client,
    /// potential expiration on this server's clock).
    held: HashMap<Ipv4Addr, (Mac, u64)>,
}

impl PeerHolds {
    /// Whether the other server already holds `l.ip` for `l.mac` until at
    /// least `l.expires_unix`: then the commit of `l` may be ACKed before
    /// its update reached the other server.
    pub fn covers(&self, l: &StoredLease) -> bool {
        l.mac != DECLINED_MAC
            && self
                .held
                .get(&l.ip)
                .is_some_and(|(mac, until)| *mac == l.mac && *until >= l.expires_unix)
    }

    /// Batch `seq` sends these bindings (as [`for_peer`] made them) and
    /// releases the addresses in `released`. A release counts at once (the
    /// address may be free there from now on); a binding counts once the
    /// other server acknowledged the batch.
    pub fn sent(&mut self, seq: Seq, bindings: Vec<StoredLease>, released: &[Ipv4Addr]) {
        for ip in released {
            self.held.remove(ip);
            for (_, b) in &mut self.sent {
                b.retain(|l| l.ip != *ip);
            }
        }
        if !bindings.is_empty() {
            self.sent.push_back((seq, bindings));
        }
    }

    /// The other server stored every batch up to `seq`.
    pub fn acknowledged_through(&mut self, seq: Seq) {
        while self.sent.front().is_some_and(|(s, _)| *s <= seq) {
            let Some((_, bindings)) = self.sent.pop_front() else {
                break;
            };
            for l in bindings {
                if l.mac == DECLINED_MAC {
                    self.held.remove(&l.ip);
                } else {
                    self.held.insert(l.ip, (l.mac, l.expires_unix));
                }
            }
        }
    }

    /// The other server refused these addresses (another client holds them
    /// there): nothing is held for them.
    pub fn refused(&mut self, ips: &[Ipv4Addr]) {
        for ip in ips {
            self.held.remove(ip);
            for (_, b) in &mut self.sent {
                b.retain(|l| l.ip != *ip);
            }
        }
    }

    /// Forgets what the other server acknowledged: a new replication stream
    /// (it may have restarted). Bindings still to be acknowledged stay:
    /// they go again on the new stream and count once acknowledged there.
    pub fn forget_acknowledged(&mut self) {
        self.held.clear();
    }

    /// Forgets everything: abandoned updates (never sent, or never
    /// acknowledged).
    pub fn forget(&mut self) {
        self.sent.clear();
        self.held.clear();
    }

    /// Addresses known held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether no address is known held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: u32 = 3600;

    fn lease(ip: u8, mac: u8, expires_unix: u64) -> StoredLease {
        StoredLease {
            ip: Ipv4Addr::new(192, 0, 2, ip),
            mac: Mac([2, 0, 0, 0, 0, mac]),
            expires_unix,
        }
    }

    /// The bindings of `ls` sent with batch `seq` and acknowledged.
    fn stored(h: &mut PeerHolds, seq: Seq, ls: &[StoredLease]) {
        h.sent(
            seq,
            ls.iter().map(|l| for_peer(l, lead(LEASE))).collect(),
            &[],
        );
        h.acknowledged_through(seq);
    }

    #[test]
    fn the_other_server_is_sent_one_lease_time_more_than_the_client_got() {
        assert_eq!(for_peer(&lease(1, 1, 1000), 3600).expires_unix, 4600);
        let quarantine = StoredLease {
            mac: DECLINED_MAC,
            ..lease(1, 1, 1000)
        };
        assert_eq!(for_peer(&quarantine, 3600), quarantine);
        assert_eq!(for_peer(&lease(1, 1, 0), 3600).expires_unix, 0);
    }

    #[test]
    fn a_renewal_at_t1_is_covered_by_what_the_first_lease_sent() {
        let mut h = PeerHolds::default();
        // Bound at 0 until 3600; the other server holds it until 7200.
        stored(&mut h, 1, &[lease(1, 1, 3600)]);
        // Renewed at T1 (1800) until 5400: covered.
        assert!(h.covers(&lease(1, 1, 5400)));
        // Renewed again at 3800 until 7400: beyond what it holds.
        assert!(!h.covers(&lease(1, 1, 7400)));
    }

    #[test]
    fn a_binding_counts_only_once_the_other_server_acknowledged_it() {
        let mut h = PeerHolds::default();
        h.sent(1, vec![for_peer(&lease(1, 1, 3600), lead(LEASE))], &[]);
        h.sent(2, vec![for_peer(&lease(2, 2, 3600), lead(LEASE))], &[]);
        assert!(!h.covers(&lease(1, 1, 3600)));
        h.acknowledged_through(1);
        assert!(h.covers(&lease(1, 1, 3600)));
        assert!(!h.covers(&lease(2, 2, 3600)));
        h.acknowledged_through(2);
        assert!(h.covers(&lease(2, 2, 3600)));
    }

    #[test]
    fn another_client_or_a_quarantine_is_never_covered() {
        let mut h = PeerHolds::default();
        stored(&mut h, 1, &[lease(1, 1, 3600)]);
        assert!(!h.covers(&lease(1, 2, 100)));
        assert!(!h.covers(&StoredLease {
            mac: DECLINED_MAC,
            ..lease(1, 1, 100)
        }));
        // A quarantine sent later replaces the hold.
        stored(
            &mut h,
            2,
            &[StoredLease {
                mac: DECLINED_MAC,
                ..lease(1, 1, 100)
            }],
        );
        assert!(!h.covers(&lease(1, 1, 100)));
    }

    #[test]
    fn a_release_ends_the_hold_at_once_even_before_it_is_acknowledged() {
        let mut h = PeerHolds::default();
        h.sent(1, vec![for_peer(&lease(1, 1, 3600), lead(LEASE))], &[]);
        stored(&mut h, 2, &[lease(2, 2, 3600)]);
        h.sent(
            3,
            Vec::new(),
            &[Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 2)],
        );
        h.acknowledged_through(3);
        assert!(!h.covers(&lease(1, 1, 100)));
        assert!(!h.covers(&lease(2, 2, 100)));
        assert!(h.is_empty());
    }

    #[test]
    fn a_refused_address_is_not_held() {
        let mut h = PeerHolds::default();
        stored(&mut h, 1, &[lease(1, 1, 3600)]);
        h.sent(2, vec![for_peer(&lease(2, 2, 3600), lead(LEASE))], &[]);
        h.refused(&[Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 2)]);
        h.acknowledged_through(2);
        assert!(!h.covers(&lease(1, 1, 100)));
        assert!(!h.covers(&lease(2, 2, 100)));
    }

    #[test]
    fn a_new_stream_forgets_what_was_acknowledged_but_not_what_waits_for_it() {
        let mut h = PeerHolds::default();
        stored(&mut h, 1, &[lease(1, 1, 3600)]);
        h.sent(2, vec![for_peer(&lease(2, 2, 3600), lead(LEASE))], &[]);
        h.forget_acknowledged();
        assert!(!h.covers(&lease(1, 1, 100)));
        // Batch 2 goes again on the new stream and counts once acknowledged.
        h.acknowledged_through(2);
        assert!(h.covers(&lease(2, 2, 3600)));
    }

    #[test]
    fn abandoned_updates_forget_every_hold() {
        let mut h = PeerHolds::default();
        stored(&mut h, 1, &[lease(1, 1, 3600)]);
        h.sent(2, vec![for_peer(&lease(2, 2, 3600), lead(LEASE))], &[]);
        h.forget();
        // A watermark that jumps over the unsent batch confirms nothing.
        h.acknowledged_through(2);
        assert!(!h.covers(&lease(1, 1, 100)));
        assert!(!h.covers(&lease(2, 2, 100)));
        assert_eq!(h.len(), 0);
    }
}
