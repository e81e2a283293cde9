//! oooi-dns: a split-horizon DNS server on hickory-server.
//!
//! - [`config`]: the file format and its validated model.
//! - [`answer`]: pure answers for owned names (no sockets).
//! - [`forward`]: upstream forwarding with a cache.
//! - [`handler`]: the hickory `RequestHandler` tying them together.
//! - [`server`]: sockets, one hickory `Server` per listener, reload, metrics.

pub mod answer;
pub mod config;
pub mod handler;
pub mod metrics;
