//! Two hosted clusters behind one proxy: the shared setup of the end-to-end
//! tests, the lab and the benchmark.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use anyhow::Result;
use oooi_routes::{Cidr, Route, RouteMatch, RouteTable, Upstream};

use crate::backend::Backend;
use crate::envoy::{Envoy, EnvoyOptions};
use crate::ports::free_port;

/// Worker source address of hosted cluster c1 (loopback stands in for the VLAN).
pub const WORKER_C1: &str = "127.0.0.11";
/// Worker source address of hosted cluster c2.
pub const WORKER_C2: &str = "127.0.0.21";
/// An address no cluster owns.
pub const STRANGER: &str = "127.0.0.99";

/// Backends standing in for each control-plane service of c1 and c2.
pub const BACKENDS: [&str; 8] = [
    "c1-kube-apiserver",
    "c1-oauth",
    "c1-ignition",
    "c1-konnectivity",
    "c1-apps",
    "c2-kube-apiserver",
    "c2-oauth",
    "c2-apps",
];

/// Two hosted clusters (c1, c2) behind one Envoy: a backend per service, the
/// table routing to them (generation 1, not pushed yet), and the listeners.
pub struct TwoClusters {
    /// The proxy.
    pub envoy: Envoy,
    /// One backend per name in [`BACKENDS`].
    pub backends: Vec<Backend>,
    /// The routing table for these backends (not pushed by `start`).
    pub table: RouteTable,
    /// The listener standing in for 6443.
    pub kube: SocketAddr,
    /// The listener standing in for 443.
    pub https: SocketAddr,
}

impl TwoClusters {
    /// Starts the backends and an Envoy with `concurrency` workers; no table yet.
    pub async fn start(concurrency: u32) -> Result<TwoClusters> {
        TwoClusters::start_with(concurrency, None).await
    }

    /// Like [`TwoClusters::start`], with a given filter module (`None`: the built one).
    pub async fn start_with(concurrency: u32, module: Option<Vec<u8>>) -> Result<TwoClusters> {
        TwoClusters::start_opts(concurrency, module, None, None).await
    }

    /// Like [`TwoClusters::start`], with Envoy and the filter module of the
    /// proxy image `image` (run under podman).
    pub async fn start_image(image: String) -> Result<TwoClusters> {
        TwoClusters::start_opts(1, None, Some(image), None).await
    }

    /// Like [`TwoClusters::start`], with Envoy behind `oooi-envoy-gate` as
    /// the controller deploys it ([`EnvoyOptions::gate`]): the binary `gate`,
    /// or the gate of the proxy image `image`. Only the table API and metrics
    /// listeners are open until a table is pushed.
    pub async fn start_gated(gate: PathBuf, image: Option<String>) -> Result<TwoClusters> {
        TwoClusters::start_opts(1, None, image, Some(gate)).await
    }

    async fn start_opts(
        concurrency: u32,
        module: Option<Vec<u8>>,
        image: Option<String>,
        gate: Option<PathBuf>,
    ) -> Result<TwoClusters> {
        let lo: IpAddr = "127.0.0.1".parse()?;
        let mut addrs = HashMap::new();
        let mut backends = Vec::new();
        for name in BACKENDS {
            let b = Backend::start(name, lo).await?;
            addrs.insert(name, b.addr);
            backends.push(b);
        }
        let (kube_port, https_port) = (free_port(lo), free_port(lo));
        let up = |name: &str| Upstream::Address {
            host: "127.0.0.1".into(),
            port: addrs[name].port(),
        };
        let route = |port, matches, backend: &str| Route {
            port,
            matches,
            upstream: up(backend),
            owner: Some(format!("clusters/{}", &backend[..2])),
        };
        let sni =
            |port, name: &str, backend: &str| route(port, RouteMatch::Sni(name.into()), backend);
        let src = |port, cidr: &str, backend: &str| -> Result<Route> {
            Ok(route(
                port,
                RouteMatch::Source(cidr.parse::<Cidr>().map_err(anyhow::Error::msg)?),
                backend,
            ))
        };
        let alias = |port, cidr: &str, backend: &str| -> Result<Route> {
            Ok(route(
                port,
                RouteMatch::AliasSource(cidr.parse::<Cidr>().map_err(anyhow::Error::msg)?),
                backend,
            ))
        };
        let table = RouteTable {
            generation: 1,
            routes: vec![
                sni(kube_port, "api.c1.example.com", "c1-kube-apiserver"),
                sni(kube_port, "api-int.c1.example.com", "c1-kube-apiserver"),
                sni(kube_port, "api.c2.example.com", "c2-kube-apiserver"),
                src(kube_port, WORKER_C1, "c1-kube-apiserver")?,
                src(kube_port, WORKER_C2, "c2-kube-apiserver")?,
                alias(https_port, WORKER_C1, "c1-kube-apiserver")?,
                alias(https_port, WORKER_C2, "c2-kube-apiserver")?,
                sni(https_port, "oauth.c1.example.com", "c1-oauth"),
                sni(https_port, "ignition.c1.example.com", "c1-ignition"),
                sni(https_port, "konnectivity.c1.example.com", "c1-konnectivity"),
                sni(https_port, "oauth.c2.example.com", "c2-oauth"),
                sni(https_port, "*.apps.c1.example.com", "c1-apps"),
                sni(https_port, "*.apps.c2.example.com", "c2-apps"),
            ],
        };
        table.validate()?;
        let envoy = tokio::task::spawn_blocking(move || {
            EnvoyOptions {
                concurrency,
                module,
                image,
                gate,
                ..EnvoyOptions::new(lo, &[kube_port, https_port])
            }
            .start()
        })
        .await??;
        Ok(TwoClusters {
            envoy,
            backends,
            table,
            kube: SocketAddr::new(lo, kube_port),
            https: SocketAddr::new(lo, https_port),
        })
    }
}
