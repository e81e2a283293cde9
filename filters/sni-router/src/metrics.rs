//! Envoy-side counters. Envoy exposes them as `wasmcustom.oooi_sni_router_*`
//! (Prometheus, `/stats/prometheus`: `oooi_sni_router_*`).
//!
//! Every metric is defined once per VM and its id kept in a thread-local
//! array indexed by [`Metric`], so counting costs one host call and no name
//! lookup on the connection path.

use std::cell::Cell;

use oooi_routes::{MatchKind, Refusal};
use proxy_wasm::hostcalls;
use proxy_wasm::types::MetricType;

use crate::head::HeadRefusal;

/// A metric of this module, by index into [`NAMES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Metric(usize);

/// Prefix of the per-build connection counter; the build id follows.
pub const BUILD_CONNECTIONS_PREFIX: &str = "oooi_sni_router_connections_build_";

/// Every metric name but the routing refusals (see [`refuse`]); the last
/// one is the generation gauge.
const NAMES: [&str; 20] = [
    "oooi_sni_router_forward_exact_sni",
    "oooi_sni_router_forward_wildcard_sni",
    "oooi_sni_router_forward_source_no_sni",
    "oooi_sni_router_forward_source_alias",
    "oooi_sni_router_forward_exact_host",
    "oooi_sni_router_forward_wildcard_host",
    "oooi_sni_router_refuse_unknown_host",
    "oooi_sni_router_refuse_oversized_head",
    "oooi_sni_router_refuse_malformed_head",
    "oooi_sni_router_refuse_no_host",
    "oooi_sni_router_refuse_bad_host",
    "oooi_sni_router_refuse_incomplete_head",
    "oooi_sni_router_refuse_head_timeout",
    "oooi_sni_router_route_errors",
    "oooi_sni_router_push_accepted",
    "oooi_sni_router_push_rejected",
    "oooi_sni_router_table_reloads",
    "oooi_sni_router_refuse_not_tls",
    "oooi_sni_router_push_unauthorized",
    "oooi_sni_router_table_generation",
];
const GAUGES_FROM: usize = NAMES.len() - 1;

pub const ROUTE_ERRORS: Metric = Metric(13);
pub const PUSH_ACCEPTED: Metric = Metric(14);
pub const PUSH_REJECTED: Metric = Metric(15);
pub const TABLE_RELOADS: Metric = Metric(16);
/// A connection on a TLS listener that is not TLS.
pub const REFUSE_NOT_TLS: Metric = Metric(17);
/// A push without a valid bearer token (counted apart from bad tables).
pub const PUSH_UNAUTHORIZED: Metric = Metric(18);
pub const TABLE_GENERATION: Metric = Metric(19);

/// The forward counter of a match on a TLS listener.
pub fn forward(kind: MatchKind) -> Metric {
    Metric(match kind {
        MatchKind::ExactSni => 0,
        MatchKind::WildcardSni => 1,
        MatchKind::SourceNoSni => 2,
        MatchKind::SourceAlias => 3,
    })
}

/// The forward counter of a match on a plain-HTTP listener (by Host).
pub fn forward_host(kind: MatchKind) -> Metric {
    match kind {
        MatchKind::ExactSni => Metric(4),
        MatchKind::WildcardSni => Metric(5),
        other => forward(other),
    }
}

/// The refusal counter of an unknown Host on a plain-HTTP listener.
pub const REFUSE_UNKNOWN_HOST: Metric = Metric(6);

/// The refusal counter of a bad request head.
pub fn refuse_head(r: HeadRefusal) -> Metric {
    Metric(match r {
        HeadRefusal::Oversized => 7,
        HeadRefusal::Malformed => 8,
        HeadRefusal::NoHost => 9,
        HeadRefusal::BadHost => 10,
        HeadRefusal::Incomplete => 11,
        HeadRefusal::Timeout => 12,
    })
}

/// Room for the routing refusals (`oooi_sni_router_refuse_<reason>` for
/// each of [`Refusal::ALL`]), defined from the routes crate's own list.
const MAX_REFUSALS: usize = 16;

/// Counts a routing refusal.
pub fn refuse(r: Refusal) {
    let slot = Refusal::ALL.iter().position(|x| *x == r);
    let id = slot.map_or(UNDEFINED, |i| {
        REFUSALS.with(|ids| ids.get(i).map_or(UNDEFINED, Cell::get))
    });
    if id != UNDEFINED {
        let _ = hostcalls::increment_metric(id, 1);
    }
}

const UNDEFINED: u32 = u32::MAX;

thread_local! {
    static IDS: [Cell<u32>; NAMES.len()] = const { [const { Cell::new(UNDEFINED) }; NAMES.len()] };
    static REFUSALS: [Cell<u32>; MAX_REFUSALS] = const { [const { Cell::new(UNDEFINED) }; MAX_REFUSALS] };
    static BUILD_CONNECTIONS: Cell<u32> = const { Cell::new(UNDEFINED) };
}

/// Defines every metric once per VM (defining again returns the same id).
pub fn init() {
    IDS.with(|ids| {
        for (i, name) in NAMES.iter().enumerate() {
            let kind = if i >= GAUGES_FROM {
                MetricType::Gauge
            } else {
                MetricType::Counter
            };
            if let Ok(id) = hostcalls::define_metric(kind, name) {
                ids[i].set(id);
            }
        }
    });
    REFUSALS.with(|ids| {
        for (slot, r) in ids.iter().zip(Refusal::ALL.iter()) {
            let name = format!("oooi_sni_router_refuse_{}", r.as_str());
            if let Ok(id) = hostcalls::define_metric(MetricType::Counter, &name) {
                slot.set(id);
            }
        }
    });
}

/// Adds one to a counter.
pub fn inc(m: Metric) {
    let id = IDS.with(|ids| ids[m.0].get());
    if id != UNDEFINED {
        let _ = hostcalls::increment_metric(id, 1);
    }
}

/// Sets a gauge.
pub fn set(m: Metric, value: u64) {
    let id = IDS.with(|ids| ids[m.0].get());
    if id != UNDEFINED {
        let _ = hostcalls::record_metric(id, value);
    }
}

/// Defines `oooi_sni_router_connections_build_<id>`: every new connection
/// this module sees counts there, so after a module swap the counters show
/// which build took which connections.
pub fn define_build_counter(build: &str) {
    let name: String = BUILD_CONNECTIONS_PREFIX
        .chars()
        .chain(
            build
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }),
        )
        .collect();
    if let Ok(id) = hostcalls::define_metric(MetricType::Counter, &name) {
        BUILD_CONNECTIONS.with(|c| c.set(id));
    }
}

/// Counts one connection for this build.
pub fn inc_build_connections() {
    let id = BUILD_CONNECTIONS.with(Cell::get);
    if id != UNDEFINED {
        let _ = hostcalls::increment_metric(id, 1);
    }
}
