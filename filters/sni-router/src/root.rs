//! The root context: configuration per plugin (role), the refresh tick, and
//! the per-connection and per-request contexts it creates.

use std::rc::Rc;

use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext, StreamContext};
use proxy_wasm::types::{BufferType, ContextType, LogLevel};

use crate::config::{PluginConfig, Role};
use crate::connection::Mode;
use crate::{api, build_id, cache, connection, metrics};

/// How often each worker checks for a new table (and closes plain-HTTP
/// connections past their head timeout). A push reaches the other workers
/// within this time.
const REFRESH_TICK_MS: u64 = 50;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(Root::default()) });
}}

#[derive(Default)]
struct Root {
    config: Option<PluginConfig>,
    /// The table API's settings, shared by its request contexts (`None` on
    /// the readiness listener, which takes no writes).
    api: Option<Rc<api::ApiConfig>>,
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
                if matches!(cfg.role, Role::Network { .. } | Role::Http { .. }) {
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
                self.api = match &cfg.role {
                    Role::Api {
                        push_token,
                        clusters,
                    } => Some(Rc::new(api::ApiConfig::new(push_token, clusters))),
                    _ => None,
                };
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
        // Last: it switches the effective context to the connections it closes.
        connection::expire_heads();
    }

    fn get_type(&self) -> Option<ContextType> {
        match self.config.as_ref().map(|c| &c.role) {
            Some(Role::Api { .. } | Role::Ready) => Some(ContextType::HttpContext),
            _ => Some(ContextType::StreamContext),
        }
    }

    fn create_stream_context(&self, context_id: u32) -> Option<Box<dyn StreamContext>> {
        let (port, mode) = match self.config.as_ref().map(|c| &c.role) {
            Some(Role::Network { port }) => (Some(*port), Mode::Tls),
            Some(Role::NotTls { port }) => (Some(*port), Mode::NotTls),
            Some(Role::Http {
                port,
                max_head_bytes,
                head_timeout_ms,
            }) => (
                Some(*port),
                Mode::Http {
                    max_head_bytes: *max_head_bytes,
                    head_timeout_ms: *head_timeout_ms,
                },
            ),
            _ => (None, Mode::Tls),
        };
        Some(Box::new(connection::Connection::new(
            context_id, port, mode,
        )))
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        let ready_only = matches!(self.config.as_ref().map(|c| &c.role), Some(Role::Ready));
        Some(Box::new(api::ApiRequest::new(self.api.clone(), ready_only)))
    }
}

/// Logs through the host (Envoy's `wasm` log component).
pub fn log(level: LogLevel, msg: &str) {
    let _ = hostcalls::log(level, msg);
}
