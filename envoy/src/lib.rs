//! Renders the Envoy configuration of an oooi proxy.
//!
//! Envoy starts from a small bootstrap that reads listeners (LDS) and clusters
//! (CDS) from files in one directory, watched for a `..data` symlink swap as a
//! ConfigMap mount performs. Every TLS listener runs `tls_inspector`, the oooi
//! network filter (wasm, `FAIL_RELOAD`), `sni_dynamic_forward_proxy` and
//! `tcp_proxy` whose default cluster does not exist, so an unrouted connection
//! fails closed. The table API listener runs the same module as an HTTP
//! filter, followed by Envoy's `buffer` filter so the whole push body arrives
//! in one callback.
//!
//! All output is JSON (which Envoy reads as YAML as well).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use oooi_routes::MAX_DOCUMENT_BYTES;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

pub use oooi_routes::DYNAMIC_CLUSTER;
/// tcp_proxy's default cluster. It deliberately does not exist.
pub const UNROUTED_CLUSTER: &str = "oooi_unrouted";
/// The proxy-wasm VM id shared by every plugin of one Envoy: the routing
/// table in shared data is keyed by it.
pub const VM_ID: &str = "oooi";
const DNS_CACHE: &str = "oooi_dns_cache";

/// A named static cluster, for `cluster` upstreams in the table.
#[derive(Debug, Clone)]
pub struct StaticCluster {
    pub name: String,
    pub endpoints: Vec<SocketAddr>,
}

/// Everything that varies between oooi proxies.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// Envoy admin interface; keep it on loopback.
    pub admin: SocketAddr,
    /// Address the TLS listeners bind (the proxy's VLAN address).
    pub listen_address: IpAddr,
    /// TLS passthrough ports, e.g. 6443 and 443.
    pub tls_ports: Vec<u16>,
    /// Table API listener.
    pub api: SocketAddr,
    /// Bearer token a push must carry (at least 16 characters).
    pub push_token: String,
    /// Path of the filter module as Envoy will see it.
    pub wasm_path: PathBuf,
    /// Clusters for `cluster` upstreams.
    pub clusters: Vec<StaticCluster>,
    /// Upstream connect timeout in milliseconds.
    pub connect_timeout_ms: u64,
}

/// The rendered documents.
#[derive(Debug, Clone)]
pub struct Rendered {
    pub bootstrap: Value,
    pub listeners: Value,
    pub clusters: Value,
}

/// File names inside the config directory.
pub const BOOTSTRAP_FILE: &str = "envoy.json";
pub const LDS_FILE: &str = "lds.json";
pub const CDS_FILE: &str = "cds.json";

fn duration_ms(ms: u64) -> String {
    format!("{}.{:03}s", ms / 1000, ms % 1000)
}

fn socket(addr: IpAddr, port: u16) -> Value {
    json!({"socket_address": {"address": addr.to_string(), "port_value": port}})
}

fn wasm_config(cfg: &ProxyConfig, plugin_name: &str, configuration: Value) -> Value {
    json!({
        "name": plugin_name,
        "root_id": "oooi",
        "vm_config": {
            "vm_id": VM_ID,
            "runtime": "envoy.wasm.runtime.v8",
            "code": {"local": {"filename": cfg.wasm_path.display().to_string()}},
        },
        "configuration": {
            "@type": "type.googleapis.com/google.protobuf.StringValue",
            "value": configuration.to_string(),
        },
        // A trap reloads the VM (shared data survives) instead of failing open.
        "failure_policy": "FAIL_RELOAD",
    })
}

fn dns_cache_config() -> Value {
    json!({"name": DNS_CACHE, "dns_lookup_family": "V4_PREFERRED", "max_hosts": 4096})
}

/// Renders bootstrap, listeners and clusters. `config_dir` is where Envoy
/// will find the LDS and CDS files.
pub fn render(cfg: &ProxyConfig, config_dir: &Path) -> Rendered {
    let dir = config_dir.display().to_string();
    let watched = |file: &str| {
        json!({
            "resource_api_version": "V3",
            "path_config_source": {
                "path": format!("{dir}/{file}"),
                "watched_directory": {"path": dir},
            },
        })
    };
    let bootstrap = json!({
        "node": {"id": "oooi-proxy", "cluster": "oooi"},
        "admin": {"address": socket(cfg.admin.ip(), cfg.admin.port())},
        "dynamic_resources": {"lds_config": watched(LDS_FILE), "cds_config": watched(CDS_FILE)},
        "layered_runtime": {"layers": [{"name": "static", "static_layer": {
            "overload.global_downstream_max_connections": 50000
        }}]},
    });

    let mut listeners = Vec::new();
    for &port in &cfg.tls_ports {
        let filter_cfg = json!({"role": "network", "port": port});
        listeners.push(json!({
            "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
            "name": format!("tls_{port}"),
            "address": socket(cfg.listen_address, port),
            "listener_filters": [{
                "name": "envoy.filters.listener.tls_inspector",
                "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector"},
            }],
            // Plain TCP (no ClientHello) on 6443 must not wait for one.
            "listener_filters_timeout": "2s",
            "continue_on_listener_filters_timeout": true,
            "filter_chains": [{"filters": [
                {
                    "name": "envoy.filters.network.wasm",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.network.wasm.v3.Wasm",
                        "config": wasm_config(cfg, &format!("oooi_sni_router_{port}"), filter_cfg),
                    },
                },
                {
                    "name": "envoy.filters.network.sni_dynamic_forward_proxy",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.network.sni_dynamic_forward_proxy.v3.FilterConfig",
                        "dns_cache_config": dns_cache_config(),
                        "port_value": port,
                    },
                },
                {
                    "name": "envoy.filters.network.tcp_proxy",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
                        "stat_prefix": format!("tls_{port}"),
                        "cluster": UNROUTED_CLUSTER,
                    },
                },
            ]}],
        }));
    }
    let api_cfg = json!({"role": "api", "push_token": cfg.push_token});
    let body_limit = MAX_DOCUMENT_BYTES as u64 + 64 * 1024;
    listeners.push(json!({
        "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
        "name": "table_api",
        "address": socket(cfg.api.ip(), cfg.api.port()),
        "per_connection_buffer_limit_bytes": body_limit,
        "filter_chains": [{"filters": [{
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                "stat_prefix": "table_api",
                "route_config": {"name": "table_api", "virtual_hosts": [{
                    "name": "all", "domains": ["*"],
                    "routes": [{"match": {"prefix": "/"}, "direct_response": {"status": 404}}],
                }]},
                "http_filters": [
                    {
                        "name": "envoy.filters.http.wasm",
                        "typed_config": {
                            "@type": "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm",
                            "config": wasm_config(cfg, "oooi_table_api", api_cfg),
                        },
                    },
                    {
                        "name": "envoy.filters.http.buffer",
                        "typed_config": {
                            "@type": "type.googleapis.com/envoy.extensions.filters.http.buffer.v3.Buffer",
                            "max_request_bytes": body_limit,
                        },
                    },
                    {
                        "name": "envoy.filters.http.router",
                        "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
                    },
                ],
            },
        }]}],
    }));

    let connect_timeout = duration_ms(cfg.connect_timeout_ms);
    let mut clusters = vec![json!({
        "@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
        "name": DYNAMIC_CLUSTER,
        "connect_timeout": connect_timeout,
        "lb_policy": "CLUSTER_PROVIDED",
        "cluster_type": {
            "name": "envoy.clusters.dynamic_forward_proxy",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.clusters.dynamic_forward_proxy.v3.ClusterConfig",
                "dns_cache_config": dns_cache_config(),
            },
        },
    })];
    for c in &cfg.clusters {
        let endpoints: Vec<Value> = c
            .endpoints
            .iter()
            .map(|e| json!({"endpoint": {"address": socket(e.ip(), e.port())}}))
            .collect();
        clusters.push(json!({
            "@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
            "name": c.name,
            "type": "STATIC",
            "connect_timeout": connect_timeout,
            "load_assignment": {"cluster_name": c.name, "endpoints": [{"lb_endpoints": endpoints}]},
        }));
    }
    Rendered {
        bootstrap,
        listeners: json!({"version_info": digest(&listeners), "resources": listeners}),
        clusters: json!({"version_info": digest(&clusters), "resources": clusters}),
    }
}

fn digest(v: &[Value]) -> String {
    let bytes = serde_json::to_vec(v).unwrap_or_default();
    hex::encode(&Sha256::digest(&bytes)[..8])
}

/// Writes the three files into `dir` (created if missing) and returns the
/// bootstrap path. LDS and CDS are written to a temporary name and renamed,
/// so Envoy never reads a half-written file.
pub fn write(cfg: &ProxyConfig, dir: &Path) -> io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let r = render(cfg, dir);
    for (name, value) in [
        (CDS_FILE, &r.clusters),
        (LDS_FILE, &r.listeners),
        (BOOTSTRAP_FILE, &r.bootstrap),
    ] {
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, serde_json::to_vec_pretty(value)?)?;
        std::fs::rename(&tmp, dir.join(name))?;
    }
    Ok(dir.join(BOOTSTRAP_FILE))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> ProxyConfig {
        ProxyConfig {
            admin: "127.0.0.1:9901".parse().unwrap(),
            listen_address: "127.0.0.1".parse().unwrap(),
            tls_ports: vec![6443, 443],
            api: "127.0.0.1:9445".parse().unwrap(),
            push_token: "0123456789abcdef".into(),
            wasm_path: "/filters/oooi.wasm".into(),
            clusters: vec![StaticCluster {
                name: "c1_api".into(),
                endpoints: vec!["127.0.0.9:6443".parse().unwrap()],
            }],
            connect_timeout_ms: 2500,
        }
    }

    #[test]
    fn every_tls_listener_fails_closed_and_reloads_on_fault() {
        let r = render(&cfg(), Path::new("/etc/envoy"));
        let listeners = r.listeners["resources"].as_array().unwrap();
        assert_eq!(listeners.len(), 3);
        for l in &listeners[..2] {
            let filters = l["filter_chains"][0]["filters"].as_array().unwrap();
            assert_eq!(filters[0]["name"], "envoy.filters.network.wasm");
            assert_eq!(
                filters[0]["typed_config"]["config"]["failure_policy"],
                "FAIL_RELOAD"
            );
            assert_eq!(
                filters[0]["typed_config"]["config"]["vm_config"]["vm_id"],
                VM_ID
            );
            assert_eq!(filters[2]["typed_config"]["cluster"], UNROUTED_CLUSTER);
        }
        let clusters = r.clusters["resources"].as_array().unwrap();
        assert!(clusters.iter().all(|c| c["name"] != UNROUTED_CLUSTER));
        assert_eq!(clusters[0]["name"], DYNAMIC_CLUSTER);
        assert_eq!(clusters[1]["connect_timeout"], "2.500s");
    }

    #[test]
    fn api_listener_buffers_the_largest_document() {
        let r = render(&cfg(), Path::new("/etc/envoy"));
        let api = &r.listeners["resources"][2];
        let limit = api["per_connection_buffer_limit_bytes"].as_u64().unwrap();
        assert!(limit > MAX_DOCUMENT_BYTES as u64);
        let filters = &api["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"];
        assert_eq!(filters[1]["name"], "envoy.filters.http.buffer");
        assert_eq!(
            filters[1]["typed_config"]["max_request_bytes"]
                .as_u64()
                .unwrap(),
            limit
        );
        let plugin: Value = serde_json::from_str(
            filters[0]["typed_config"]["config"]["configuration"]["value"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(plugin["role"], "api");
    }

    #[test]
    fn bootstrap_watches_the_config_directory() {
        let r = render(&cfg(), Path::new("/etc/envoy"));
        let lds = &r.bootstrap["dynamic_resources"]["lds_config"]["path_config_source"];
        assert_eq!(lds["path"], "/etc/envoy/lds.json");
        assert_eq!(lds["watched_directory"]["path"], "/etc/envoy");
    }
}
