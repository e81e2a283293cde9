//! Envoy-side counters. Envoy exposes them as `wasmcustom.oooi_sni_router_*`
//! (Prometheus: `envoy_wasmcustom_oooi_sni_router_*`).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use proxy_wasm::hostcalls;
use proxy_wasm::types::MetricType;

thread_local! {
    static IDS: RefCell<HashMap<&'static str, u32>> = RefCell::new(HashMap::new());
    static BUILD_CONNECTIONS: Cell<Option<u32>> = const { Cell::new(None) };
}

/// Prefix of the per-build connection counter; the build id follows.
pub const BUILD_CONNECTIONS_PREFIX: &str = "oooi_sni_router_connections_build_";

pub const FORWARD: [&str; 4] = [
    "oooi_sni_router_forward_exact_sni",
    "oooi_sni_router_forward_wildcard_sni",
    "oooi_sni_router_forward_source_no_sni",
    "oooi_sni_router_forward_source_alias",
];
pub const REFUSE: [&str; 6] = [
    "oooi_sni_router_refuse_no_table",
    "oooi_sni_router_refuse_unknown_port",
    "oooi_sni_router_refuse_unknown_sni",
    "oooi_sni_router_refuse_unknown_source",
    "oooi_sni_router_refuse_alias_from_unknown_source",
    "oooi_sni_router_refuse_no_source_address",
];
pub const ROUTE_ERRORS: &str = "oooi_sni_router_route_errors";
pub const PUSH_ACCEPTED: &str = "oooi_sni_router_push_accepted";
pub const PUSH_REJECTED: &str = "oooi_sni_router_push_rejected";
pub const TABLE_RELOADS: &str = "oooi_sni_router_table_reloads";
pub const TABLE_GENERATION: &str = "oooi_sni_router_table_generation";

/// Defines every metric once per VM (defining again returns the same id).
pub fn init() {
    IDS.with(|ids| {
        let mut ids = ids.borrow_mut();
        let counters = FORWARD
            .iter()
            .chain(REFUSE.iter())
            .chain([ROUTE_ERRORS, PUSH_ACCEPTED, PUSH_REJECTED, TABLE_RELOADS].iter());
        for name in counters {
            if let Ok(id) = hostcalls::define_metric(MetricType::Counter, name) {
                ids.insert(name, id);
            }
        }
        if let Ok(id) = hostcalls::define_metric(MetricType::Gauge, TABLE_GENERATION) {
            ids.insert(TABLE_GENERATION, id);
        }
    });
}

pub fn inc(name: &'static str) {
    IDS.with(|ids| {
        if let Some(id) = ids.borrow().get(name) {
            let _ = hostcalls::increment_metric(*id, 1);
        }
    });
}

pub fn set(name: &'static str, value: u64) {
    IDS.with(|ids| {
        if let Some(id) = ids.borrow().get(name) {
            let _ = hostcalls::record_metric(*id, value);
        }
    });
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
        BUILD_CONNECTIONS.with(|c| c.set(Some(id)));
    }
}

/// Counts one connection for this build.
pub fn inc_build_connections() {
    if let Some(id) = BUILD_CONNECTIONS.with(Cell::get) {
        let _ = hostcalls::increment_metric(id, 1);
    }
}
