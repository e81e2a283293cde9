//! DHCP pool figures in the status: the bounded summary of a server's
//! inventory report, the pool conditions, and the Infra's figures from its
//! servers'. Pure: the poll that asks the servers is [`crate::inventory`].
//!
//! A status never carries leases: totals, at most [`MAX_POOLS`] pools (the
//! fullest first) with a count of the rest, and the refusal counts (one per
//! reason, a closed set), so its size does not grow with the leases or the
//! pools.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use oooi_dhcp_inventory::{PoolFigures, PoolReport};

use crate::crd::{DhcpPoolStatus, DhcpPoolsStatus, ServerStatus};
use crate::plan::conditions::{PlannedCondition, merge_conditions};

/// Condition type: a dynamic pool is more than [`NEARLY_EXHAUSTED_PERCENT`]
/// used.
pub const POOL_NEARLY_EXHAUSTED: &str = "PoolNearlyExhausted";
/// Condition type: a dynamic pool has no free address.
pub const POOL_EXHAUSTED: &str = "PoolExhausted";
/// Above this share used (in percent) a pool is nearly exhausted (the
/// `OooiDHCPPoolNearlyExhausted` alert's threshold).
pub const NEARLY_EXHAUSTED_PERCENT: f64 = 80.0;
/// Pools listed in a status; the rest are counted in `morePools`.
pub const MAX_POOLS: usize = 8;
/// The `range` of the pool of reserved addresses: each belongs to one
/// known client, so it is never "exhausted" and stays out of the
/// utilisation and the conditions.
pub const RESERVATIONS: &str = "reservations";

/// Whether `type_` is one of the pool conditions (kept by the server
/// reconciler, written by the inventory poll).
pub fn is_pool_condition(type_: &str) -> bool {
    type_ == POOL_NEARLY_EXHAUSTED || type_ == POOL_EXHAUSTED
}

fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn dynamic(p: &PoolFigures) -> bool {
    p.range != RESERVATIONS
}

/// Percent used, rounded down (0 for an empty pool).
fn percent(total: u64, free: u64) -> i32 {
    if total == 0 {
        return 0;
    }
    let used = total.saturating_sub(free.min(total));
    // At most 100, so the cast is exact.
    ((u128::from(used) * 100) / u128::from(total)) as i32
}

/// The status summary of one server's report: totals over every pool,
/// utilisation over the dynamic ones, at most [`MAX_POOLS`] pools, the
/// fullest first (ties by range), and the refusal counts by reason.
pub fn summarize(report: &PoolReport) -> DhcpPoolsStatus {
    let mut s = DhcpPoolsStatus::default();
    let (mut dyn_total, mut dyn_free) = (0u64, 0u64);
    for p in &report.pools {
        s.total = s.total.saturating_add(count(p.total));
        s.assigned = s.assigned.saturating_add(count(p.assigned));
        s.offered = s.offered.saturating_add(count(p.offered));
        s.free = s.free.saturating_add(count(p.free));
        s.quarantined = s.quarantined.saturating_add(count(p.quarantined));
        s.reserved = s.reserved.saturating_add(count(p.reserved));
        s.held_back = s.held_back.saturating_add(count(p.held_back));
        if dynamic(p) {
            dyn_total = dyn_total.saturating_add(p.total);
            dyn_free = dyn_free.saturating_add(p.free);
        }
    }
    s.utilisation_percent = percent(dyn_total, dyn_free);
    let mut pools: Vec<&PoolFigures> = report.pools.iter().collect();
    // Fullest first: exhausted, then by share used; reservations last.
    pools.sort_by(|a, b| {
        let key = |p: &PoolFigures| {
            (
                !dynamic(p),
                !(p.total > 0 && p.free == 0),
                std::cmp::Reverse(percent(p.total, p.free)),
            )
        };
        key(a).cmp(&key(b)).then_with(|| a.range.cmp(&b.range))
    });
    s.more_pools = i32::try_from(pools.len().saturating_sub(MAX_POOLS)).unwrap_or(i32::MAX);
    s.pools = pools
        .into_iter()
        .take(MAX_POOLS)
        .map(|p| DhcpPoolStatus {
            range: p.range.clone(),
            total: count(p.total),
            assigned: count(p.assigned),
            free: count(p.free),
            quarantined: count(p.quarantined),
            reserved: count(p.reserved),
            utilisation_percent: percent(p.total, p.free),
        })
        .collect();
    s.refusals = report
        .refusals
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(r, n)| (r.as_str().to_string(), count(*n)))
        .collect();
    s
}

fn share(p: &DhcpPoolStatus) -> f64 {
    if p.total <= 0 {
        return 0.0;
    }
    100.0 * (1.0 - (p.free as f64 / p.total as f64))
}

fn describe(p: &DhcpPoolStatus) -> String {
    format!(
        "pool {}: {} of {} free ({} assigned, {} quarantined)",
        p.range, p.free, p.total, p.assigned, p.quarantined
    )
}

/// `PoolNearlyExhausted` (a dynamic pool more than 80% used) and
/// `PoolExhausted` (a dynamic pool with no free address), each `True` or
/// `False`, naming the pools at fault. The listed pools are the fullest, so
/// a pool left out of the list is never worse than the ones named.
pub fn pool_conditions(s: &DhcpPoolsStatus) -> Vec<PlannedCondition> {
    let dynamic: Vec<&DhcpPoolStatus> = s
        .pools
        .iter()
        .filter(|p| p.range != RESERVATIONS && p.total > 0)
        .collect();
    let exhausted: Vec<String> = dynamic
        .iter()
        .filter(|p| p.free == 0)
        .map(|p| describe(p))
        .collect();
    let nearly: Vec<String> = dynamic
        .iter()
        .filter(|p| share(p) > NEARLY_EXHAUSTED_PERCENT)
        .map(|p| describe(p))
        .collect();
    let more = if s.more_pools > 0 {
        format!(" ({} more pools not listed)", s.more_pools)
    } else {
        String::new()
    };
    let nearly = if nearly.is_empty() {
        PlannedCondition::no(
            POOL_NEARLY_EXHAUSTED,
            "BelowThreshold",
            format!("every pool is at most {NEARLY_EXHAUSTED_PERCENT}% used"),
        )
    } else {
        PlannedCondition::yes(
            POOL_NEARLY_EXHAUSTED,
            "AboveThreshold",
            format!(
                "more than {NEARLY_EXHAUSTED_PERCENT}% used: {}{more}",
                nearly.join("; ")
            ),
        )
    };
    let exhausted = if exhausted.is_empty() {
        PlannedCondition::no(
            POOL_EXHAUSTED,
            "FreeAddresses",
            "every pool has a free address",
        )
    } else {
        PlannedCondition::yes(
            POOL_EXHAUSTED,
            "NoFreeAddress",
            format!(
                "no free address: {}; new clients get no lease{more}",
                exhausted.join("; ")
            ),
        )
    };
    vec![nearly, exhausted]
}

/// The figures of the fullest server (highest utilisation, then fewest
/// free): an Infra's servers are one server or a pair serving one pool, so
/// adding them up would count the pool twice.
pub fn fullest<'a>(
    servers: impl IntoIterator<Item = &'a DhcpPoolsStatus>,
) -> Option<DhcpPoolsStatus> {
    servers
        .into_iter()
        .max_by(|a, b| {
            a.utilisation_percent
                .cmp(&b.utilisation_percent)
                .then_with(|| b.free.cmp(&a.free))
        })
        .cloned()
}

/// `conditions` with the pool conditions replaced by `pools`' (merged, so
/// an unchanged condition keeps its transition time); the others kept as
/// they are, in their order.
pub fn with_pool_conditions(
    conditions: &[Condition],
    pools: &DhcpPoolsStatus,
    generation: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    let mut out: Vec<Condition> = conditions
        .iter()
        .filter(|c| !is_pool_condition(&c.type_))
        .cloned()
        .collect();
    out.extend(merge_conditions(
        conditions,
        &pool_conditions(pools),
        generation,
        now,
    ));
    out
}

/// A server's status with new pool figures: the rest as it was.
pub fn server_status_with_pools(
    current: &ServerStatus,
    pools: DhcpPoolsStatus,
    now: &Time,
) -> ServerStatus {
    ServerStatus {
        conditions: with_pool_conditions(
            &current.conditions,
            &pools,
            current.observed_generation,
            now,
        ),
        pools: Some(pools),
        ..current.clone()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::BTreeMap;

    use oooi_dhcp_inventory::{LeaseRow, LeaseState, RefusalReason, ServerInfo, ServerRole};

    use super::*;
    use crate::crd::status;

    fn pool(range: &str, total: u64, assigned: u64, quarantined: u64, free: u64) -> PoolFigures {
        PoolFigures {
            range: range.into(),
            total,
            assigned,
            offered: 0,
            quarantined,
            held_back: 0,
            reserved: 0,
            free,
        }
    }

    fn report(pools: Vec<PoolFigures>) -> PoolReport {
        PoolReport {
            server: ServerInfo {
                role: ServerRole::Single,
                pair_state: None,
                now_unix: 1_000,
            },
            pools,
            refusals: BTreeMap::new(),
        }
    }

    fn status_of(conds: &[PlannedCondition], type_: &str) -> String {
        conds
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| c.status.clone())
            .unwrap()
    }

    #[test]
    fn the_conditions_flip_above_80_percent_and_at_exhaustion() {
        // (assigned, quarantined, free) of a 100-address pool →
        // (nearly exhausted, exhausted).
        let table = [
            ((0, 0, 100), (status::FALSE, status::FALSE)),
            ((80, 0, 20), (status::FALSE, status::FALSE)),
            ((80, 1, 19), (status::TRUE, status::FALSE)),
            ((81, 0, 19), (status::TRUE, status::FALSE)),
            ((99, 0, 1), (status::TRUE, status::FALSE)),
            ((95, 5, 0), (status::TRUE, status::TRUE)),
            ((100, 0, 0), (status::TRUE, status::TRUE)),
        ];
        for ((assigned, quarantined, free), (nearly, exhausted)) in table {
            let s = summarize(&report(vec![pool(
                "192.0.2.100-192.0.2.199",
                100,
                assigned,
                quarantined,
                free,
            )]));
            let c = pool_conditions(&s);
            assert_eq!(
                status_of(&c, POOL_NEARLY_EXHAUSTED),
                nearly,
                "{assigned}/{quarantined}/{free}"
            );
            assert_eq!(
                status_of(&c, POOL_EXHAUSTED),
                exhausted,
                "{assigned}/{quarantined}/{free}"
            );
            assert_eq!(s.utilisation_percent, (100 - free) as i32);
        }
    }

    #[test]
    fn reservations_are_counted_but_never_exhausted() {
        let mut r = pool(RESERVATIONS, 4, 4, 0, 0);
        r.reserved = 4;
        let s = summarize(&report(vec![
            pool("192.0.2.100-192.0.2.109", 10, 5, 0, 5),
            r,
        ]));
        assert_eq!((s.total, s.assigned, s.free, s.reserved), (14, 9, 5, 4));
        // Utilisation of the dynamic pool only.
        assert_eq!(s.utilisation_percent, 50);
        let c = pool_conditions(&s);
        assert_eq!(status_of(&c, POOL_EXHAUSTED), status::FALSE);
        assert_eq!(status_of(&c, POOL_NEARLY_EXHAUSTED), status::FALSE);
        // Listed after the dynamic pools.
        assert_eq!(s.pools[1].range, RESERVATIONS);
    }

    #[test]
    fn an_empty_report_is_zero_and_healthy() {
        let s = summarize(&report(vec![]));
        assert_eq!(s, DhcpPoolsStatus::default());
        let c = pool_conditions(&s);
        assert!(c.iter().all(|c| c.status == status::FALSE));
        assert_eq!(percent(0, 0), 0);
    }

    #[test]
    fn the_fullest_pools_are_listed_and_the_rest_counted() {
        let pools: Vec<PoolFigures> = (0..20u64)
            .map(|i| {
                pool(
                    &format!("10.0.{i}.1-10.0.{i}.100"),
                    100,
                    i * 5,
                    0,
                    100 - i * 5,
                )
            })
            .collect();
        let s = summarize(&report(pools));
        assert_eq!(s.pools.len(), MAX_POOLS);
        assert_eq!(s.more_pools, 12);
        let shares: Vec<i32> = s.pools.iter().map(|p| p.utilisation_percent).collect();
        assert_eq!(shares, [95, 90, 85, 80, 75, 70, 65, 60]);
        assert_eq!(s.total, 2000);
        let c = pool_conditions(&s);
        let nearly = c.iter().find(|c| c.type_ == POOL_NEARLY_EXHAUSTED).unwrap();
        assert_eq!(nearly.status, status::TRUE);
        assert!(
            nearly
                .message
                .contains("pool 10.0.19.1-10.0.19.100: 5 of 100 free")
        );
        assert!(
            nearly.message.contains("(12 more pools not listed)"),
            "{}",
            nearly.message
        );
        assert!(
            !nearly.message.contains("10.0.16.1"),
            "80% is not above 80%"
        );
    }

    /// Pool figures counted from lease rows, as a server would.
    fn figures_of(rows: &[LeaseRow], range: &str, total: u64) -> PoolFigures {
        let n = |s: LeaseState| rows.iter().filter(|r| r.state == s).count() as u64;
        let used = n(LeaseState::Active)
            + n(LeaseState::Offered)
            + n(LeaseState::Declined)
            + n(LeaseState::Lost)
            + n(LeaseState::HeldBack);
        PoolFigures {
            range: range.into(),
            total,
            assigned: n(LeaseState::Active),
            offered: n(LeaseState::Offered),
            quarantined: n(LeaseState::Declined) + n(LeaseState::Lost),
            held_back: n(LeaseState::HeldBack),
            reserved: rows.iter().filter(|r| r.reserved).count() as u64,
            free: total - used,
        }
    }

    #[test]
    fn ten_thousand_leases_in_many_pools_make_a_status_of_a_few_kilobytes() {
        // 10,000 leases over 40 pools of 256 addresses (10,240).
        let rows: Vec<LeaseRow> = (0..10_000u32)
            .map(|i| {
                let b = i.to_be_bytes();
                LeaseRow {
                    address: std::net::IpAddr::from([10, 1, b[2], b[3]]),
                    mac: Some(format!("52:54:00:00:{:02x}:{:02x}", b[2], b[3])),
                    client_id: None,
                    iaid: None,
                    hostname: Some(format!("worker-{i}")),
                    state: match i % 50 {
                        0 => LeaseState::Declined,
                        1 => LeaseState::Offered,
                        _ => LeaseState::Active,
                    },
                    reserved: i % 100 == 7,
                    cltt_unix: Some(900),
                    expires_unix: 4_600,
                    answered_by: None,
                }
            })
            .collect();
        let pools: Vec<PoolFigures> = rows
            .chunks(250)
            .enumerate()
            .map(|(i, chunk)| figures_of(chunk, &format!("10.1.{i}.0-10.1.{i}.255"), 256))
            .collect();
        assert_eq!(pools.len(), 40);
        let mut r = report(pools);
        r.refusals = RefusalReason::ALL.iter().map(|r| (*r, 1_000_000)).collect();
        let s = summarize(&r);
        assert_eq!(s.total, 40 * 256);
        assert_eq!(s.assigned + s.offered + s.quarantined, 10_000);
        assert_eq!(s.free, 240);
        assert_eq!(s.pools.len(), MAX_POOLS);
        assert_eq!(s.more_pools, 32);
        let mut st = ServerStatus::default();
        st = server_status_with_pools(&st, s, &Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        let json = serde_json::to_string(&st).unwrap();
        assert!(json.len() < 4096, "{} bytes: {json}", json.len());
        assert!(!json.contains("worker-"), "no lease is in the status");
    }

    #[test]
    fn the_fullest_server_stands_for_the_infra() {
        let a = summarize(&report(vec![pool("p", 100, 50, 0, 50)]));
        let b = summarize(&report(vec![pool("p", 100, 90, 0, 10)]));
        assert_eq!(fullest([&a, &b]), Some(b.clone()));
        assert_eq!(fullest([&b, &a]), Some(b));
        assert_eq!(fullest([]), None);
    }

    #[test]
    fn new_figures_replace_only_the_pool_conditions() {
        let t0 = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let t1 = Time(k8s_openapi::jiff::Timestamp::from_second(60).unwrap());
        let ready = merge_conditions(
            &[],
            &[PlannedCondition::yes("Ready", "RolledOut", "")],
            Some(3),
            &t0,
        );
        let current = ServerStatus {
            observed_generation: Some(3),
            conditions: ready.clone(),
            replicas: 1,
            ready_replicas: 1,
            ..ServerStatus::default()
        };
        let full = summarize(&report(vec![pool("p", 10, 10, 0, 0)]));
        let st = server_status_with_pools(&current, full.clone(), &t0);
        assert_eq!(st.conditions[0], ready[0]);
        assert_eq!(st.conditions.len(), 3);
        assert_eq!(st.replicas, 1);
        // The same figures later: nothing changes (no status write).
        assert_eq!(server_status_with_pools(&st, full, &t1), st);
        // Freed addresses: the conditions flip, at the new time.
        let freed = summarize(&report(vec![pool("p", 10, 5, 0, 5)]));
        let st2 = server_status_with_pools(&st, freed, &t1);
        let ex = st2
            .conditions
            .iter()
            .find(|c| c.type_ == POOL_EXHAUSTED)
            .unwrap();
        assert_eq!(
            (ex.status.as_str(), &ex.last_transition_time),
            (status::FALSE, &t1)
        );
        assert_eq!(
            st2.conditions.iter().filter(|c| c.type_ == "Ready").count(),
            1
        );
    }
}
