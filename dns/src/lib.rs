//! oooi-dns: a split-horizon DNS server on hickory-server.
//!
//! - [`config`]: the file format and its validated model (the
//!   `oooi-dns-config` crate, shared with the controller).
//! - [`views`]: which view answers a query.
//! - [`answer`]: pure answers for owned names (no sockets).
//! - [`check`]: the report of `oooi-dns check`.
//! - [`fast`]: precomputed wire answers for the common UDP case.
//! - [`forward`]: upstream forwarding with a cache.
//! - [`handler`]: the hickory `RequestHandler`, the reference for answers.
//! - [`server`]: sockets, dispatch between the fast path and the handler,
//!   listeners that follow the config.
//! - [`metrics`]: Prometheus metrics and the health endpoint.

pub mod answer;
pub mod check;
pub use oooi_dns_config as config;
pub mod fast;
pub mod forward;
pub mod handler;
pub mod metrics;
pub mod server;
pub mod views;
