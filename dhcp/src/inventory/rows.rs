//! The inventory's rows and pool figures, built from the lease table and
//! the metadata beside it ([`super::meta`]). Pure: the time is a parameter.
//!
//! A binding's state as a row:
//! - **offered**: offered, its hold not ended;
//! - **active**: bound, the client's lease not ended;
//! - **held_back**: in a pair, a binding learned from the other server
//!   whose client's lease ended here but which the other server may have
//!   renewed meanwhile (lazy updates: it is held for the client until its
//!   potential expiration, one lease time later, see
//!   [`crate::peer_holds`]); `expires_unix` is when the hold ends;
//! - **expired** / **released**: bound once, ended (by time, or by the
//!   client's RELEASE). The server keeps such a binding until its address
//!   is given to another client (the never-used addresses go first), so
//!   these rows stay as long as the pool has room, at most one per pool or
//!   reserved address. An expired lease survives restarts (it is in the
//!   log); a released one does not (the log records the release as the
//!   end of the binding);
//! - **declined**: quarantined after a client's DECLINE (the row names that
//!   client) or a conflict probe's answer (no client: someone else uses the
//!   address), until `expires_unix`;
//! - **lost**: its log record was damaged; held back until its lease would
//!   have ended (the row names the MAC the damaged record seemed to say).
//!
//! Offers and quarantines that ended are free addresses and have no row.

use std::net::{IpAddr, Ipv4Addr};

use oooi_dhcp_inventory::{LeaseQuery, LeaseRow, LeaseState, PoolFigures, ServerRole};

use super::meta::{Meta, hex};
use crate::config::{Mac, Role};
use crate::lease_store::DECLINED_MAC;
use crate::leases::{Binding, LeaseTable, State};

/// This server's role in the inventory's words.
pub fn role_of(table: &LeaseTable) -> ServerRole {
    match table.share().map(|s| s.role) {
        None => ServerRole::Single,
        Some(Role::Primary) => ServerRole::Primary,
        Some(Role::Secondary) => ServerRole::Secondary,
    }
}

/// The other server's role, in a pair.
pub fn peer_role_of(table: &LeaseTable) -> Option<ServerRole> {
    match table.share().map(|s| s.role) {
        None => None,
        Some(Role::Primary) => Some(ServerRole::Secondary),
        Some(Role::Secondary) => Some(ServerRole::Primary),
    }
}

/// The table, its metadata and the time: everything a row is made of.
pub struct View<'a> {
    /// The lease table.
    pub table: &'a LeaseTable,
    /// The metadata beside it.
    pub meta: &'a Meta,
    /// Unix seconds.
    pub now: u64,
}

impl View<'_> {
    /// The lead added to bindings learned from the other server.
    fn lead(&self) -> u64 {
        crate::peer_holds::lead(self.table.config().lease_seconds)
    }

    /// Whether `ip`'s binding to `mac` came from the other server (its end
    /// carries the lead).
    fn replica(&self, ip: Ipv4Addr, mac: Mac) -> bool {
        let Some(peer) = peer_role_of(self.table) else {
            return false;
        };
        self.table.is_replica(ip)
            || self
                .meta
                .get(ip, mac)
                .is_some_and(|m| m.answered_by == peer)
    }

    /// The row of `ip`'s binding `b`, or None when it holds nothing (an
    /// ended offer or quarantine).
    pub fn row(&self, ip: Ipv4Addr, b: &Binding) -> Option<LeaseRow> {
        let (state, expires, mac) = self.classify(ip, b)?;
        self.build(ip, state, expires, mac)
    }

    /// A row's state, end and client, without building it (nothing is
    /// allocated: the pool figures and the filters use this).
    fn classify(&self, ip: Ipv4Addr, b: &Binding) -> Option<(LeaseState, u64, Option<Mac>)> {
        let now = self.now;
        Some(match b.state {
            State::Offered { until } => {
                (until > now).then_some((LeaseState::Offered, until, Some(b.mac)))?
            }
            State::Bound { expires } => {
                let client_end = if self.replica(ip, b.mac) {
                    expires.saturating_sub(self.lead())
                } else {
                    expires
                };
                let released = self.meta.get(ip, b.mac).is_some_and(|m| m.released);
                if client_end > now {
                    (LeaseState::Active, client_end, Some(b.mac))
                } else if expires > now {
                    (LeaseState::HeldBack, expires, Some(b.mac))
                } else if released {
                    (LeaseState::Released, expires, Some(b.mac))
                } else {
                    (LeaseState::Expired, client_end, Some(b.mac))
                }
            }
            State::Declined { until } => {
                let decliner = self
                    .meta
                    .any(ip)
                    .filter(|m| !m.probe_conflict)
                    .map(|m| m.mac);
                (until > now).then_some((LeaseState::Declined, until, decliner))?
            }
            State::Lost { until } => {
                if until <= now {
                    return None;
                }
                let probed =
                    b.mac == DECLINED_MAC && self.meta.any(ip).is_some_and(|m| m.probe_conflict);
                if probed {
                    (LeaseState::Declined, until, None)
                } else {
                    (
                        LeaseState::Lost,
                        until,
                        (b.mac != DECLINED_MAC).then_some(b.mac),
                    )
                }
            }
        })
    }

    /// The host name of `mac`'s row at `ip`.
    fn hostname(&self, ip: Ipv4Addr, mac: Option<Mac>) -> Option<&str> {
        let mac = mac?;
        self.table
            .config()
            .hostname(&mac)
            .or_else(|| self.meta.get(ip, mac)?.hostname.as_deref())
    }

    /// Whether a row of this state and client may match `q` (its filters
    /// that need no row: state, MAC, host name); the row itself is checked
    /// with [`LeaseQuery::matches`] after.
    fn may_match(&self, q: &LeaseQuery, ip: Ipv4Addr, state: LeaseState, mac: Option<Mac>) -> bool {
        if q.state.is_some_and(|s| s != state) {
            return false;
        }
        if let Some(want) = &q.mac {
            let want = oooi_dhcp_inventory::canonical_mac(want).and_then(|m| Mac::parse(&m));
            if want.is_none() || want != mac {
                return false;
            }
        }
        if let Some(h) = &q.hostname
            && !self
                .hostname(ip, mac)
                .is_some_and(|rh| rh.eq_ignore_ascii_case(h))
        {
            return false;
        }
        true
    }

    fn build(
        &self,
        ip: Ipv4Addr,
        state: LeaseState,
        expires: u64,
        mac: Option<Mac>,
    ) -> Option<LeaseRow> {
        let cfg = self.table.config();
        let meta = mac.and_then(|m| self.meta.get(ip, m));
        let reserved = mac.is_some_and(|m| cfg.reservations.get(&m).is_some_and(|r| r.ip == ip));
        let hostname = mac
            .and_then(|m| cfg.hostname(&m).map(str::to_string))
            .or_else(|| meta.and_then(|m| m.hostname.clone()));
        Some(LeaseRow {
            address: IpAddr::V4(ip),
            mac: mac.map(|m| m.to_string()),
            client_id: meta.and_then(|m| m.client_id.as_deref()).map(hex),
            iaid: None,
            hostname,
            state,
            reserved,
            cltt_unix: meta.and_then(|m| m.cltt),
            expires_unix: expires,
            answered_by: meta.map(|m| m.answered_by),
        })
    }

    /// Every row, in no particular order.
    pub fn rows(&self) -> impl Iterator<Item = LeaseRow> + '_ {
        self.table.bindings().filter_map(|(ip, b)| self.row(ip, b))
    }

    /// One page of the rows matching `q` (see [`LeaseQuery::page`]).
    pub fn page(&self, q: &LeaseQuery) -> (Vec<LeaseRow>, Option<IpAddr>) {
        // An address filter needs one binding, not a walk of the table.
        if let Some(IpAddr::V4(ip)) = q.ip {
            let rows: Vec<LeaseRow> = self
                .table
                .get(ip)
                .and_then(|b| self.row(ip, b))
                .into_iter()
                .collect();
            return q.page(&rows);
        }
        if matches!(q.ip, Some(IpAddr::V6(_))) {
            return (Vec::new(), None);
        }
        // Rows are built in address order from `after` on, and only until
        // one more than a page matches (that one tells there is a next
        // page): a page costs a sort of the addresses, not a row of each.
        let after = q.after;
        let mut bindings: Vec<(Ipv4Addr, &Binding)> = self
            .table
            .bindings()
            .filter(|(ip, _)| after.is_none_or(|a| IpAddr::V4(*ip) > a))
            .collect();
        bindings.sort_unstable_by_key(|(ip, _)| *ip);
        let size = q.page_size();
        let mut rows = Vec::with_capacity(size + 1);
        for (ip, b) in bindings {
            let Some((state, expires, mac)) = self.classify(ip, b) else {
                continue;
            };
            if !self.may_match(q, ip, state, mac) {
                continue;
            }
            if let Some(r) = self.build(ip, state, expires, mac)
                && q.matches(&r)
            {
                rows.push(r);
                if rows.len() > size {
                    break;
                }
            }
        }
        q.page(&rows)
    }

    /// The row of `mac`'s binding, if it has one (live or ended; a
    /// quarantine it caused when it has no other).
    pub fn client(&self, mac: Mac) -> Option<LeaseRow> {
        if let Some(ip) = self.table.last_address(mac)
            && let Some(r) = self.table.get(ip).and_then(|b| self.row(ip, b))
        {
            return Some(r);
        }
        let text = mac.to_string();
        self.rows()
            .find(|r| r.mac.as_deref() == Some(text.as_str()))
    }

    /// Figures of the dynamic range and of the reservations. The range's
    /// `free` is what `oooi_dhcp_pool_utilisation_ratio` counts free (its
    /// utilisation is that gauge's value).
    pub fn pools(&self) -> Vec<PoolFigures> {
        let cfg = self.table.config();
        let mut range = PoolFigures {
            range: format!("{}-{}", cfg.range_start, cfg.range_end),
            total: self.table.pool_size() as u64,
            ..PoolFigures::default()
        };
        let reserved_ips: std::collections::HashSet<Ipv4Addr> =
            cfg.reservations.values().map(|r| r.ip).collect();
        let mut reservations = PoolFigures {
            range: "reservations".to_string(),
            total: reserved_ips.len() as u64,
            reserved: reserved_ips.len() as u64,
            ..PoolFigures::default()
        };
        for (ip, b) in self.table.bindings() {
            if !b.live(self.now) {
                continue;
            }
            let figures = if self.table.in_pool(ip) {
                &mut range
            } else if reserved_ips.contains(&ip) {
                &mut reservations
            } else {
                continue;
            };
            match self.classify(ip, b).map(|(state, _, _)| state) {
                Some(LeaseState::Active) => figures.assigned += 1,
                Some(LeaseState::Offered) => figures.offered += 1,
                Some(LeaseState::HeldBack) => figures.held_back += 1,
                Some(LeaseState::Declined | LeaseState::Lost) => figures.quarantined += 1,
                // A live binding is always one of the above.
                Some(LeaseState::Expired | LeaseState::Released) | None => {}
            }
        }
        for f in [&mut range, &mut reservations] {
            f.free = f
                .total
                .saturating_sub(f.assigned + f.offered + f.quarantined + f.held_back);
        }
        vec![range, reservations]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::meta::Sent;
    use crate::lease_store::StoredLease;
    use crate::pair::PairState;
    use crate::testing::{self, DOC_NET, WORKER_0};

    const NOW: u64 = 1_000_000;

    fn table() -> LeaseTable {
        testing::table(
            DOC_NET,
            &[
                "range: { start: 192.0.2.100, end: 192.0.2.109 }",
                "lease_seconds: 600",
                "decline_quarantine_seconds: 100",
                WORKER_0,
            ],
        )
    }

    fn mac(n: u8) -> Mac {
        Mac([2, 0, 0, 0, 0, n])
    }

    fn ip(n: u8) -> Ipv4Addr {
        Ipv4Addr::new(192, 0, 2, n)
    }

    fn rows_of(t: &LeaseTable, m: &Meta, now: u64) -> Vec<LeaseRow> {
        let (rows, next) = View {
            table: t,
            meta: m,
            now,
        }
        .page(&LeaseQuery {
            limit: Some(1000),
            ..LeaseQuery::default()
        });
        assert_eq!(next, None);
        rows
    }

    fn state_of(rows: &[LeaseRow], n: u8) -> Option<LeaseState> {
        rows.iter()
            .find(|r| r.address == IpAddr::V4(ip(n)))
            .map(|r| r.state)
    }

    #[test]
    fn every_binding_shows_its_state() {
        let mut t = table();
        let mut m = Meta::default();
        let sent = Sent {
            client_id: Some(vec![1, 2, 0, 0, 0, 0, 1]),
            hostname: Some("vm-a".into()),
        };
        // Active, with what the client sent.
        let a = t.offer(mac(1), None, NOW).unwrap();
        t.commit(mac(1), a, NOW).unwrap();
        m.transacted(a, mac(1), &sent, ServerRole::Single, NOW);
        // Offered.
        let o = t.offer(mac(2), None, NOW).unwrap();
        // Released.
        let r = t.offer(mac(3), None, NOW).unwrap();
        t.commit(mac(3), r, NOW).unwrap();
        t.release(mac(3), r, NOW + 1);
        m.released(r, mac(3), ServerRole::Single, NOW + 1);
        // Declined by a client.
        let d = t.offer(mac(4), None, NOW).unwrap();
        t.decline(mac(4), d, NOW);
        m.declined(d, mac(4), ServerRole::Single, NOW);
        // A probe found someone on it.
        let p = t.offer(mac(5), None, NOW).unwrap();
        assert!(t.probe_answered(mac(5), p, NOW));
        m.probe_conflict(p, mac(5), ServerRole::Single);
        // A damaged record's address.
        assert!(t.quarantine_lost(ip(109), Some(mac(6)), NOW + 50, NOW));
        // The reserved client.
        t.commit(mac(0xaa), ip(50), NOW).unwrap();
        // Expired.
        let e = t.offer(mac(7), None, NOW - 1000).unwrap();
        t.commit(mac(7), e, NOW - 1000).unwrap();

        let rows = rows_of(&t, &m, NOW + 2);
        let by = |ipa: Ipv4Addr| rows.iter().find(|r| r.address == IpAddr::V4(ipa)).unwrap();
        let ra = by(a);
        assert_eq!(ra.state, LeaseState::Active);
        assert_eq!(ra.mac.as_deref(), Some("02:00:00:00:00:01"));
        assert_eq!(ra.client_id.as_deref(), Some("01020000000001"));
        assert_eq!(ra.hostname.as_deref(), Some("vm-a"));
        assert_eq!(ra.cltt_unix, Some(NOW));
        assert_eq!(ra.expires_unix, NOW + 600);
        assert_eq!(ra.answered_by, Some(ServerRole::Single));
        assert_eq!(by(o).state, LeaseState::Offered);
        assert_eq!(by(r).state, LeaseState::Released);
        let rd = by(d);
        assert_eq!(rd.state, LeaseState::Declined);
        assert_eq!(rd.mac.as_deref(), Some("02:00:00:00:00:04"));
        assert_eq!(rd.expires_unix, NOW + 100);
        let rp = by(p);
        assert_eq!(rp.state, LeaseState::Declined);
        assert_eq!(rp.mac, None);
        let rl = by(ip(109));
        assert_eq!(rl.state, LeaseState::Lost);
        assert_eq!(rl.mac.as_deref(), Some("02:00:00:00:00:06"));
        let rr = by(ip(50));
        assert!(rr.reserved);
        assert_eq!(rr.hostname.as_deref(), Some("worker-0"));
        assert_eq!(by(e).state, LeaseState::Expired);
        // Address order.
        let addrs: Vec<IpAddr> = rows.iter().map(|r| r.address).collect();
        let mut sorted = addrs.clone();
        sorted.sort();
        assert_eq!(addrs, sorted);
        // An ended offer is no row.
        assert_eq!(state_of(&rows_of(&t, &m, NOW + 31), o.octets()[3]), None);
    }

    #[test]
    fn pool_figures_agree_with_the_utilisation_gauge() {
        let mut t = table();
        let mut m = Meta::default();
        for n in 1..=4 {
            let a = t.offer(mac(n), None, NOW).unwrap();
            t.commit(mac(n), a, NOW).unwrap();
        }
        t.offer(mac(5), None, NOW).unwrap();
        let d = t.offer(mac(6), None, NOW).unwrap();
        t.decline(mac(6), d, NOW);
        m.declined(d, mac(6), ServerRole::Single, NOW);
        t.commit(mac(0xaa), ip(50), NOW).unwrap();
        let v = View {
            table: &t,
            meta: &m,
            now: NOW,
        };
        let pools = v.pools();
        let range = &pools[0];
        assert_eq!(range.range, "192.0.2.100-192.0.2.109");
        assert_eq!(
            (
                range.total,
                range.assigned,
                range.offered,
                range.quarantined,
                range.free
            ),
            (10, 4, 1, 1, 4)
        );
        let s = t.stats(NOW);
        let gauge = (s.pool_size - s.free) as f64 / s.pool_size as f64;
        assert!((range.utilisation() - gauge).abs() < 1e-9);
        let res = &pools[1];
        assert_eq!(res.range, "reservations");
        assert_eq!(
            (res.total, res.reserved, res.assigned, res.free),
            (1, 1, 1, 0)
        );
    }

    #[test]
    fn a_binding_learned_from_the_other_server_is_held_back_past_its_clients_expiry() {
        let mut t = table();
        t.set_pair(Some((Role::Primary, PairState::LoadBalancing)));
        let mut m = Meta::default();
        let lead = crate::peer_holds::lead(600);
        // The other server's client, its expiry plus the lead.
        let l = StoredLease {
            ip: ip(108),
            mac: mac(9),
            expires_unix: NOW + 600 + lead,
        };
        t.merge_peer_commit(l, NOW).unwrap();
        m.learned(l.ip, l.mac, ServerRole::Secondary, Some(NOW));
        let row = |now| {
            View {
                table: &t,
                meta: &m,
                now,
            }
            .client(mac(9))
            .unwrap()
        };
        let r = row(NOW + 1);
        assert_eq!((r.state, r.expires_unix), (LeaseState::Active, NOW + 600));
        assert_eq!(r.answered_by, Some(ServerRole::Secondary));
        let r = row(NOW + 601);
        assert_eq!(
            (r.state, r.expires_unix),
            (LeaseState::HeldBack, NOW + 600 + lead)
        );
        assert_eq!(row(NOW + 601 + lead).state, LeaseState::Expired);
        let pools = View {
            table: &t,
            meta: &m,
            now: NOW + 601,
        }
        .pools();
        assert_eq!(pools[0].held_back, 1);
    }

    /// The bounded walk gives what [`LeaseQuery::page`] gives over every
    /// row, whatever the filters, page size and starting point.
    #[test]
    fn a_page_equals_the_contracts_page_over_every_row() {
        use proptest::prelude::*;
        let ops = proptest::collection::vec((0u8..4, 1u8..12), 0..40);
        let query = (
            0u8..4,
            1u32..6,
            proptest::option::of(95u8..112),
            proptest::option::of(1u8..12),
            proptest::option::of(0u8..2),
        );
        proptest!(ProptestConfig::with_cases(300), |(ops in ops, (state, limit, after, by_mac, by_host) in query)| {
            let mut t = table();
            let mut m = Meta::default();
            for (op, n) in ops {
                match op {
                    0 => { let _ = t.offer(mac(n), None, NOW); }
                    1 => if let Ok(a) = t.offer(mac(n), None, NOW) {
                        let _ = t.commit(mac(n), a, NOW);
                        let sent = Sent { client_id: None, hostname: Some(format!("vm-{}", n % 3)) };
                        m.transacted(a, mac(n), &sent, ServerRole::Single, NOW);
                    },
                    2 => if let Some(a) = t.current(mac(n), NOW) { t.release(mac(n), a, NOW); m.released(a, mac(n), ServerRole::Single, NOW); },
                    _ => if let Some(a) = t.current(mac(n), NOW) { t.decline(mac(n), a, NOW); m.declined(a, mac(n), ServerRole::Single, NOW); },
                }
            }
            let q = LeaseQuery {
                state: [None, Some(LeaseState::Active), Some(LeaseState::Offered), Some(LeaseState::Declined)][usize::from(state)],
                limit: Some(limit),
                after: after.map(|n| IpAddr::V4(ip(n))),
                mac: by_mac.map(|n| mac(n).to_string().to_uppercase()),
                hostname: by_host.map(|h| ["vm-1", "VM-2"][usize::from(h)].to_string()),
                ..LeaseQuery::default()
            };
            let v = View { table: &t, meta: &m, now: NOW };
            let all: Vec<LeaseRow> = v.rows().collect();
            prop_assert_eq!(v.page(&q), q.page(&all));
        });
    }

    #[test]
    fn pages_and_filters_walk_the_table() {
        let mut t = table();
        let m = Meta::default();
        for n in 1..=8 {
            let a = t.offer(mac(n), None, NOW).unwrap();
            t.commit(mac(n), a, NOW).unwrap();
        }
        let v = View {
            table: &t,
            meta: &m,
            now: NOW,
        };
        let mut q = LeaseQuery {
            limit: Some(3),
            ..LeaseQuery::default()
        };
        let mut seen = Vec::new();
        loop {
            let (page, next) = v.page(&q);
            seen.extend(page.into_iter().map(|r| r.address));
            match next {
                Some(a) => q.after = Some(a),
                None => break,
            }
        }
        assert_eq!(seen.len(), 8);
        let by_ip = v.page(&LeaseQuery {
            ip: Some(IpAddr::V4(ip(101))),
            ..LeaseQuery::default()
        });
        assert_eq!(by_ip.0.len(), 1);
        let by_mac = v.page(&LeaseQuery {
            mac: Some("02-00-00-00-00-03".into()),
            ..LeaseQuery::default()
        });
        assert_eq!(by_mac.0[0].mac.as_deref(), Some("02:00:00:00:00:03"));
        let v6 = v.page(&LeaseQuery {
            ip: Some("2001:db8::1".parse().unwrap()),
            ..LeaseQuery::default()
        });
        assert!(v6.0.is_empty());
    }
}
