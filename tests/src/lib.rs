//! End-to-end harness: a real Envoy with the real filter, TLS backends that
//! stand in for hosted control-plane services, TLS clients bound to chosen
//! source addresses, and a small push client for the table API.
//!
//! The pieces are public for other suites (e.g. a route pusher tested
//! against real Envoy) and for the lab programs (`lab/`, crate `oooi-lab`):
//! - [`EnvoyOptions`] / [`Envoy`]: start Envoy with a config rendered by
//!   `oooi-envoy` into a [`ConfigMapDir`] (a `..data`-swapped mount it
//!   watches), read stats, push tables ([`Envoy::push`], [`Envoy::push_table`])
//!   and roll out a new module ([`Envoy::swap_module`]);
//! - [`Backend`]: a TLS server that announces its name (`backend=<name>\n`);
//! - [`tls_probe`] / [`tls_open`]: TLS clients with a chosen SNI and source;
//! - [`http_blocking`]: a tiny HTTP/1.1 client for the table API and admin;
//! - [`fixture::TwoClusters`]: two simulated hosted clusters behind one Envoy.
//!
//! Everything runs on loopback (127.0.0.0/8).
//!
//! One module per job, re-exported here: `envoy` (the built module, the
//! options, the config mount, the process and the running Envoy),
//! `config_map` (a kubelet-style mount), `backend` (TLS backends),
//! `tls_client` (TLS clients), `http` (the HTTP/1.1 client) and `ports`.

mod backend;
mod config_map;
mod envoy;
pub mod fixture;
mod http;
mod ports;
mod tls_client;

pub use backend::Backend;
pub use config_map::ConfigMapDir;
pub use envoy::{
    DRAIN_TIME_S, Envoy, EnvoyOptions, IMAGE_FILTER_PATH, IMAGE_GATE_PATH, MountFiles, PUSH_TOKEN,
    filter_wasm,
};
pub use http::http_blocking;
pub use ports::free_port;
pub use tls_client::{tls_open, tls_over, tls_probe};
