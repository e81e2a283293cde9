//! oooi-dns: a split-horizon DNS server on hickory-server.
//!
//! - [`config`]: the file format and its validated model.
//! - [`answer`]: pure answers for owned names (no sockets).
//! - [`check`]: the report of `oooi-dns check`.
//! - [`fast`]: precomputed wire answers for the common UDP case.
//! - [`forward`]: upstream forwarding with a cache.
//! - [`handler`]: the hickory `RequestHandler`, the reference for answers.
//! - [`server`]: sockets, dispatch between the fast path and the handler,
//!   listeners that follow the config.
//! - [`reload`]: watching the config file (and the ConfigMap `..data` swap).
//! - [`metrics`]: Prometheus metrics and the health endpoint.

pub mod answer;
pub mod check;
pub mod config;
pub mod fast;
pub mod forward;
pub mod handler;
pub mod metrics;
pub mod reload;
pub mod server;
