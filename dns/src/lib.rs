//! oooi-dns: a split-horizon DNS server on hickory-server.
//!
//! - [`config`]: the file format and its validated model (the
//!   `oooi-dns-config` crate, shared with the controller).
//! - [`views`]: which view answers a query.
//! - [`answer`]: pure answers for owned names (no sockets).
//! - [`check`]: the report of `oooi-dns check`.
//! - [`fast`]: precomputed wire answers for the common UDP case.
//! - [`forward`]: upstream forwarding with a cache and stale answers;
//!   [`upstream_health`]: what responses and silences tell about each
//!   upstream; [`forward_failures`]: names and zones that keep failing,
//!   kept apart from the upstreams.
//! - [`in_flight`]: places for queries in progress, with a share per
//!   client.
//! - [`health`]: health-aware answers (which checked addresses are down,
//!   and the config as answered); [`health_checks`]: running the checks.
//! - [`spread`]: the order of several addresses in an answer.
//! - [`wire`]: names in wire form, the key of the fast path's tables and of
//!   the forwarding cache.
//! - [`handler`]: the hickory `RequestHandler`, the reference for answers.
//! - [`engine`]: the config in force and the dispatch of one query between
//!   the fast path and the handler (no sockets).
//! - [`server`]: sockets and listeners that follow the config.
//! - [`metrics`]: Prometheus metrics and the health endpoint.

pub mod answer;
pub mod check;
pub use oooi_dns_config as config;
pub mod engine;
pub mod fast;
pub mod forward;
pub mod forward_failures;
pub mod handler;
pub mod health;
pub mod health_checks;
pub mod in_flight;
pub mod metrics;
pub mod server;
pub mod spread;
pub mod upstream_health;
pub mod views;
pub mod wire;
