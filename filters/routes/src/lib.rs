//! The oooi routing table.
//!
//! One crate computes routing decisions everywhere: inside the proxy-wasm filter
//! (compiled for `wasm32-wasip1`), in the controller (to render and explain
//! routes) and in the tests. It holds:
//!
//! - [`RouteTable`], the versioned document the controller pushes (JSON on the
//!   wire), validated whole by [`RouteTable::from_json`];
//! - [`RouteTable::digest`], a stable SHA-256 over the canonical form;
//! - [`compact`], a small binary encoding the filter keeps in shared data so a
//!   worker thread can rebuild its index without parsing JSON;
//! - [`build_id`], the build id slot filter modules carry and how to stamp it;
//! - [`Readiness`], whether a replica holds the table the controller
//!   announced ([`Expected`]);
//! - [`Router`], the compiled index whose [`Router::decide`] costs the same for
//!   ten routes and for ten thousand (hash maps and suffix walks only).

/// Name of the Envoy dynamic-forward-proxy cluster that `address` upstreams
/// go through; the filter selects it and `oooi-envoy` renders it.
pub const DYNAMIC_CLUSTER: &str = "oooi_dynamic_forward_proxy";

pub mod build_id;
pub mod compact;
mod matcher;
mod readiness;
mod table;

pub use matcher::{Decision, MatchKind, Refusal, Router};
pub use oooi_vocabulary::{Cidr, KUBERNETES_ALIASES, is_kubernetes_alias};
pub use readiness::{Expected, Readiness};
pub use table::{
    MAX_DOCUMENT_BYTES, MAX_GENERATION, MAX_ROUTE_SOURCES, MAX_ROUTES, Route, RouteMatch,
    RouteTable, TableError, Upstream, generation_is_newer, is_valid_hostname, newest_generation,
    next_generation,
};
