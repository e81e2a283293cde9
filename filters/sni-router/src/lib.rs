//! The oooi SNI router: a proxy-wasm module for Envoy with two roles, chosen
//! by the plugin configuration.
//!
//! - `{"role":"network","port":443}` on a TLS listener: per new connection it
//!   reads SNI and source address, asks the [`oooi_routes::Router`] and either
//!   names the tcp_proxy upstream through `set_envoy_filter_state` or closes
//!   the connection.
//! - `{"role":"http","port":80}` on a plain-HTTP listener (port 80, `*.apps`
//!   of several hosted clusters): holds the filter chain at connection start,
//!   reads the first request head from the downstream data (bounded by
//!   `max_head_bytes`, 8 KiB by default, within `head_timeout_ms`, 5 s),
//!   routes by its `Host` header through the same [`oooi_routes::Router`]
//!   (names on port 80 match like SNI), then lets tcp_proxy connect and
//!   forward the untouched bytes, or closes the connection.
//! - `{"role":"api","push_token":"…"}` on the table API listener: `PUT
//!   /v1/routes` replaces the table, `GET /v1/routes` reads it back, `PUT
//!   /v1/routes/expected` records the table the controller holds current,
//!   `GET /ready` says whether the replica holds a table at least that new.
//! - `{"role":"ready"}` on the readiness listener: `GET /ready` alone, from
//!   the request head (every other request is answered 404 or 405 at once),
//!   so readiness checks never share the table API's connections.
//!
//! The table lives in proxy-wasm shared data (host side, shared by every worker
//! thread and surviving module swaps) in the compact encoding, with a small
//! generation key beside it. Each worker keeps a compiled `Router` in a
//! thread-local cache and rebuilds it when the generation changes: on a 50 ms
//! tick, at once on the worker that took a push, and on the first connection
//! of a worker that has no table yet (see `cache`).
//!
//! Nothing here panics on input: host errors are handled through `hostcalls::*`
//! results, and the module is built with `panic=abort` so that a bug traps and
//! Envoy (`failure_policy: FAIL_RELOAD`) reloads the VM instead of failing open.

// The native test build has only the pure modules' callers' halves.
#![cfg_attr(test, allow(dead_code))]

// Pure modules, unit-tested natively.
mod config;
mod head;

// Everything below calls the proxy-wasm host, so the native test build
// leaves it out (its imports could not be linked).
#[cfg(not(test))]
mod api;
#[cfg(not(test))]
mod cache;
#[cfg(not(test))]
mod connection;
#[cfg(not(test))]
mod filter_state;
#[cfg(not(test))]
mod metrics;
#[cfg(not(test))]
mod root;

#[cfg(not(test))]
use root::log;

/// Shared-data key holding the table in the compact encoding.
pub const TABLE_KEY: &str = "oooi.routes.table.v1";
/// Shared-data key holding the loaded generation (8 bytes, little endian).
pub const GENERATION_KEY: &str = "oooi.routes.generation.v1";
/// Shared-data key holding the table the controller announced as current
/// ([`oooi_routes::Expected::encode`]).
pub const EXPECTED_KEY: &str = "oooi.routes.expected.v1";

/// The build id slot (see [`oooi_routes::build_id`]): the marker, then the
/// id padded with NUL. Tooling stamps a release id into these bytes.
#[used]
static BUILD_ID_SLOT: [u8; 46] =
    *b"OOOI_BUILD_ID=dev\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0";

/// The build id stamped into this module.
pub fn build_id() -> String {
    // A volatile read of the static, so the optimiser cannot fold the default
    // bytes into the code: the id is whatever the module file holds.
    // SAFETY: the pointer comes from a reference to a live, aligned static.
    let slot: [u8; 46] = unsafe { std::ptr::read_volatile(&raw const BUILD_ID_SLOT) };
    let prefix = oooi_routes::build_id::PREFIX.len();
    oooi_routes::build_id::parse_slot(&slot[prefix..])
}
