//! The oooi SNI router: a proxy-wasm module for Envoy with two roles, chosen
//! by the plugin configuration.
//!
//! - `{"role":"network","port":443}` on a TLS listener: per new connection it
//!   reads SNI and source address, asks the [`oooi_routes::Router`] and either
//!   names the tcp_proxy upstream through `set_envoy_filter_state` or closes
//!   the connection.
//! - `{"role":"api","push_token":"…"}` on the table API listener: `PUT
//!   /v1/routes` replaces the table, `GET /v1/routes` reads it back, `GET
//!   /ready` says whether one is loaded.
//!
//! The table lives in proxy-wasm shared data (host side, shared by every worker
//! thread and surviving module swaps) in the compact encoding, with a small
//! generation key beside it. Each worker keeps a compiled [`Router`] in a
//! thread-local cache and rebuilds it only when the generation changes, on a
//! tick or, if a connection arrives first, on that connection.
//!
//! Nothing here panics on input: host errors are handled through `hostcalls::*`
//! results, and the module is built with `panic=abort` so that a bug traps and
//! Envoy (`failure_policy: FAIL_RELOAD`) reloads the VM instead of failing open.

mod api;
mod cache;
mod config;
mod connection;
mod filter_state;
mod metrics;

use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext, StreamContext};
use proxy_wasm::types::{BufferType, ContextType, LogLevel};

use config::{PluginConfig, Role};

/// Shared-data key holding the table in the compact encoding.
pub const TABLE_KEY: &str = "oooi.routes.table.v1";
/// Shared-data key holding the loaded generation (8 bytes, little endian).
pub const GENERATION_KEY: &str = "oooi.routes.generation.v1";

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

/// How often each worker checks for a new table off the connection path.
const REFRESH_TICK_MS: u64 = 200;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(Root::default()) });
}}

#[derive(Default)]
struct Root {
    config: Option<PluginConfig>,
}

impl Context for Root {}

impl RootContext for Root {
    fn on_configure(&mut self, size: usize) -> bool {
        let raw = match hostcalls::get_buffer(BufferType::PluginConfiguration, 0, size) {
            Ok(Some(b)) => b,
            Ok(None) => Vec::new(),
            Err(e) => {
                log(
                    LogLevel::Error,
                    &format!("cannot read plugin configuration: {e:?}"),
                );
                return false;
            }
        };
        match PluginConfig::parse(&raw) {
            Ok(cfg) => {
                metrics::init();
                let build = build_id();
                if matches!(cfg.role, Role::Network { .. }) {
                    metrics::define_build_counter(&build);
                    connection::refresh_log_level();
                    let _ = hostcalls::set_tick_period(std::time::Duration::from_millis(
                        REFRESH_TICK_MS,
                    ));
                    cache::refresh();
                }
                log(
                    LogLevel::Info,
                    &format!(
                        "oooi-sni-router configured: {} build={build}",
                        cfg.describe()
                    ),
                );
                self.config = Some(cfg);
                true
            }
            Err(e) => {
                log(
                    LogLevel::Error,
                    &format!("rejecting plugin configuration: {e}"),
                );
                false
            }
        }
    }

    fn on_tick(&mut self) {
        cache::refresh();
        connection::refresh_log_level();
    }

    fn get_type(&self) -> Option<ContextType> {
        match self.config.as_ref().map(|c| &c.role) {
            Some(Role::Api { .. }) => Some(ContextType::HttpContext),
            _ => Some(ContextType::StreamContext),
        }
    }

    fn create_stream_context(&self, _context_id: u32) -> Option<Box<dyn StreamContext>> {
        let port = match self.config.as_ref().map(|c| &c.role) {
            Some(Role::Network { port, .. }) => Some(*port),
            _ => None,
        };
        Some(Box::new(connection::Connection::new(port)))
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        let token = match self.config.as_ref().map(|c| &c.role) {
            Some(Role::Api { push_token }) => Some(push_token.clone()),
            _ => None,
        };
        Some(Box::new(api::ApiRequest::new(token)))
    }
}

fn log(level: LogLevel, msg: &str) {
    let _ = hostcalls::log(level, msg);
}
