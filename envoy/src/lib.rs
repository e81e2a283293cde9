//! Renders the Envoy configuration of an oooi proxy.
//!
//! Envoy starts from a small bootstrap that reads listeners (LDS) and clusters
//! (CDS) from files in one directory, watched for a `..data` symlink swap as a
//! ConfigMap mount performs. Every TLS listener runs `tls_inspector`, the oooi
//! network filter (wasm, `FAIL_RELOAD`), `sni_dynamic_forward_proxy` and
//! `tcp_proxy` whose default cluster does not exist, so an unrouted connection
//! fails closed. Port 80 ([`HTTP_HOST_PORT`]) gets the same chain without
//! `tls_inspector`, the filter in its plain-HTTP role (routing by `Host`), and
//! a tcp_proxy that lets the filter read the request head before it connects. The table API listener runs the same module as an HTTP
//! filter, followed by Envoy's `buffer` filter so the whole push body arrives
//! in one callback.
//!
//! Both wasm filters reach Envoy through ECDS (`config_discovery`), each from
//! its own file in the same watched directory ([`Rendered::extensions`]). A
//! new module therefore changes only those files: Envoy swaps the filter for
//! new connections without touching the listeners, so established connections
//! keep their filter and are never drained. Each extension file names the
//! module's SHA-256 (in `vm_config`, which is part of Envoy's VM key), so a new
//! module always changes the config, even under an unchanged file name.
//! Nothing is routed without the filter: while no extension config has
//! loaded (at start, a module file that is missing or does not load), Envoy
//! 1.40 activates the listener anyway but resets its connections, and the
//! table API answers 500, so the pod never turns ready. A later module that
//! fails to load is rejected by Envoy and the previous one keeps serving.
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

/// The port whose listener is plain HTTP routed by `Host` (`*.apps` of
/// several hosted clusters on port 80) rather than TLS passthrough. Routes
/// on it are keyed by host name exactly like SNI routes.
pub const HTTP_HOST_PORT: u16 = 80;
/// Longest request head the plain-HTTP listener reads before deciding.
pub const HTTP_MAX_HEAD_BYTES: usize = 8192;
/// Time a plain-HTTP client has to send its first request head.
pub const HTTP_HEAD_TIMEOUT_MS: u64 = 5000;
/// The table API listener's connection read buffer: what Envoy reads from
/// one client before it stops reading (until the stream takes the bytes).
/// The body of a push collects in the stream's buffer
/// ([`API_STREAM_BUFFER_BYTES`]), not here, so this stays small: a
/// connection that sends a body the filter refused from its headers costs
/// at most this much while Envoy closes it.
pub const API_CONNECTION_BUFFER_BYTES: u64 = 256 * 1024;
/// What one table API request may buffer: the largest document plus room
/// for the head, twice over, so the filter's JSON 413 (sent once it has
/// seen more than the largest document) always comes before Envoy's own.
pub const API_STREAM_BUFFER_BYTES: u64 = 2 * (MAX_DOCUMENT_BYTES as u64 + 64 * 1024);
/// Most connections the table API listener holds at once (Envoy's
/// per-listener connection limit; more are closed as they arrive and
/// counted as `listener.<address>.downstream_cx_overflow`). Its own budget:
/// API clients never use up the connections of the routing listeners.
/// High enough that thousands of clients holding unfinished heads (each
/// at most [`API_MAX_REQUEST_HEADERS_KB`] and [`API_REQUEST_HEADERS_TIMEOUT_MS`])
/// or sending refused bodies leave room for the controller's pushes; low
/// enough that all of them together stay far below [`HEAP_CEILING_BYTES`].
pub const API_MAX_CONNECTIONS: u32 = 4096;
/// Time a table API client has to send its whole request head, counted
/// from its first byte (a slowloris head is closed after it).
pub const API_REQUEST_HEADERS_TIMEOUT_MS: u64 = 5000;
/// Time a table API request has to arrive whole, head and body.
pub const API_REQUEST_TIMEOUT_MS: u64 = 30_000;
/// Time a table API request may pass without a byte in either direction.
pub const API_STREAM_IDLE_TIMEOUT_MS: u64 = 10_000;
/// Time a table API connection may stay open without a request (one that
/// never sends a byte included). Clients that pool connections must drop
/// idle ones sooner.
pub const API_IDLE_TIMEOUT_MS: u64 = 15_000;
/// Largest request head of the table API, in KiB (Envoy's default is 60).
pub const API_MAX_REQUEST_HEADERS_KB: u32 = 16;
/// Most connections the readiness listener ([`ProxyConfig::ready`]) holds
/// at once. Its clients are the kubelet, the gate, the address agent and
/// the DNS replicas' checks, each with one request at a time.
pub const READY_MAX_CONNECTIONS: u32 = 128;
/// Most connections the metrics listener holds at once (Prometheus scrapes
/// with one).
pub const METRICS_MAX_CONNECTIONS: u32 = 64;
/// Time a client of the readiness or metrics listener has to send its
/// request head.
pub const SMALL_REQUEST_HEADERS_TIMEOUT_MS: u64 = 2000;
/// Time a readiness or metrics connection may stay open without a request.
pub const SMALL_IDLE_TIMEOUT_MS: u64 = 10_000;
/// Time a readiness or metrics request may pass without a byte either way.
pub const SMALL_STREAM_IDLE_TIMEOUT_MS: u64 = 10_000;
/// Largest request head of the readiness and metrics listeners, in KiB.
pub const SMALL_MAX_REQUEST_HEADERS_KB: u32 = 8;
/// Connection read buffer of the readiness and metrics listeners: a head
/// and nothing more (neither takes a body).
pub const SMALL_CONNECTION_BUFFER_BYTES: u64 = 32 * 1024;
/// Envoy's heap ceiling (its overload manager's `fixed_heap` monitor): at
/// 85% of it the largest API streams are reset, at 90% Envoy returns freed
/// memory to the system, at 95% it stops taking new HTTP requests (the
/// table API and metrics; routing listeners are not HTTP and keep going).
/// The proxy container's memory limit must leave room above it for what
/// the heap does not count: the wasm VMs (one per worker thread), code and
/// stacks (see the data-path docs for the measured figures).
pub const HEAP_CEILING_BYTES: u64 = 256 * 1024 * 1024;
/// The proxy container's memory limit the ceiling above is sized for.
pub const PROXY_MEMORY_LIMIT_BYTES: u64 = 512 * 1024 * 1024;
/// Time a client of a TLS listener has to send its ClientHello; after it the
/// connection is refused as `not_tls`.
pub const CLIENT_HELLO_TIMEOUT_MS: u64 = 5000;
/// tcp_proxy's idle timeout, in seconds: a connection with no bytes in
/// either direction for this long is closed. Two hours, above the longest
/// Kubernetes watch (kube-apiserver ends a watch after a random
/// 1-2 × `--min-request-timeout`, 30-60 min by default, and a watch without
/// bookmarks may carry no byte in that time), so the proxy never cuts a
/// watch the API server would have kept. Clients that ping (HTTP/2 health
/// checks, gRPC keepalives) are never idle that long.
pub const TCP_IDLE_TIMEOUT_S: u64 = 2 * 60 * 60;
/// What tcp_proxy buffers from the client while it connects upstream (the
/// head and whatever was pipelined behind it).
const HTTP_EARLY_DATA_BYTES: u32 = 64 * 1024;

/// Whether the listener on `port` is plain HTTP routed by `Host`.
pub fn is_plain_http(port: u16) -> bool {
    port == HTTP_HOST_PORT
}

/// A named static cluster, for `cluster` upstreams in the table.
#[derive(Debug, Clone)]
pub struct StaticCluster {
    /// Cluster name, as a `cluster` upstream of the table names it.
    pub name: String,
    /// Its endpoints.
    pub endpoints: Vec<SocketAddr>,
}

/// Everything that varies between oooi proxies.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// Envoy admin interface; keep it on loopback.
    pub admin: SocketAddr,
    /// Address the routing listeners bind (the proxy's VLAN address, or the
    /// unspecified address for all of them). Routing listeners are rendered
    /// with `freebind: true` (IP_FREEBIND, no capability needed): a listener
    /// on an address that is not on an interface yet still binds, and a
    /// floating VLAN address that an address agent adds later is answered
    /// at once.
    pub listen_address: IpAddr,
    /// Routing listener ports, e.g. 6443 and 443: TLS passthrough by SNI or
    /// source, except [`HTTP_HOST_PORT`] (80), which is plain HTTP routed by
    /// the `Host` header ([`is_plain_http`]).
    pub tls_ports: Vec<u16>,
    /// Table API listener.
    pub api: SocketAddr,
    /// The readiness listener: `GET /ready` alone, answered by the filter
    /// from the request head (no body is read), on a port and connection
    /// budget of its own ([`READY_MAX_CONNECTIONS`]), so nothing sent to
    /// the table API can keep a replica from answering its readiness
    /// checks. Like the table API it refuses connections from or to the
    /// VLAN leg. `None` renders no such listener (`GET /ready` is still
    /// answered on the table API).
    pub ready: Option<SocketAddr>,
    /// The proxy's leg on the VLAN. When set, the table API refuses every
    /// connection from that network or addressed to the proxy's VLAN
    /// address (Envoy's network RBAC filter, before any HTTP is read), so
    /// only the pod network reaches it even when it listens on all
    /// addresses. `None` leaves it open to whoever reaches `api`.
    pub vlan: Option<VlanLeg>,
    /// Bearer token a push must carry (at least 16 characters).
    pub push_token: String,
    /// Path of the filter module as Envoy will see it. Prefer a versioned
    /// name (e.g. [`module_file_name`]) so old and new builds can sit side by
    /// side during a swap.
    pub wasm_path: PathBuf,
    /// SHA-256 (hex) of the module at `wasm_path` ([`module_sha256`]).
    pub wasm_sha256: String,
    /// Clusters for `cluster` upstreams.
    pub clusters: Vec<StaticCluster>,
    /// Upstream connect timeout in milliseconds.
    pub connect_timeout_ms: u64,
    /// Listeners routing by Envoy's own `filter_chain_match` (no wasm): a
    /// baseline for the benchmark. Production configs leave this empty.
    pub native_sni: Vec<NativeSniListener>,
    /// Where Prometheus scrapes the proxy: `GET /metrics` on this listener
    /// answers with the admin interface's `/stats/prometheus` (the filter's
    /// counters among Envoy's own); every other path and method gets 404,
    /// so nothing else of the admin interface leaves loopback. Like the
    /// table API it refuses connections from or to the VLAN leg. `None`
    /// renders no such listener.
    pub metrics: Option<SocketAddr>,
    /// Where Envoy reads its listeners (LDS) from. `None`: the config
    /// directory, next to the rendered LDS file, so every listener opens
    /// when Envoy starts. `Some(dir)`: a directory `oooi-envoy-gate` writes
    /// from the rendered LDS file, with only the table API and metrics
    /// listeners until the routing table reached this Envoy
    /// ([`listeners_before_table`]), so a proxy without its table refuses
    /// TCP connections rather than accepting and resetting them.
    pub listeners_dir: Option<PathBuf>,
}

/// The proxy's address on the VLAN and the VLAN's prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlanLeg {
    /// The proxy's own VLAN address.
    pub address: IpAddr,
    /// Prefix length of the VLAN network.
    pub prefix_len: u8,
}

/// A TLS passthrough listener that routes with Envoy's native SNI matching
/// (`filter_chain_match.server_names` + `tcp_proxy` to a static cluster),
/// rendered for comparison with the wasm filter.
#[derive(Debug, Clone)]
pub struct NativeSniListener {
    /// Port on `listen_address`.
    pub port: u16,
    /// (server name, cluster) pairs; the cluster must be in `clusters`.
    pub routes: Vec<(String, String)>,
}

/// The rendered documents.
#[derive(Debug, Clone)]
pub struct Rendered {
    /// Envoy's `-c` file.
    pub bootstrap: Value,
    /// LDS discovery response ([`LDS_FILE`]).
    pub listeners: Value,
    /// CDS discovery response ([`CDS_FILE`]).
    pub clusters: Value,
    /// ECDS discovery responses, one per wasm filter: (file name, document).
    pub extensions: Vec<(String, Value)>,
}

/// Bootstrap file name inside the config directory.
pub const BOOTSTRAP_FILE: &str = "envoy.json";
/// Listeners file name inside the config directory.
pub const LDS_FILE: &str = "lds.json";
/// Name of the table API listener in LDS.
pub const API_LISTENER: &str = "table_api";
/// Name of the metrics listener in LDS.
pub const METRICS_LISTENER: &str = "metrics";
/// Name of the readiness listener in LDS.
pub const READY_LISTENER: &str = "ready";

/// The LDS discovery response a proxy serves before its routing table
/// arrived: only the table API, readiness and metrics listeners of `lds` (a rendered
/// [`LDS_FILE`]), under a version of their own. Every routing listener stays
/// closed, so the kernel refuses connections to its port and a client moves
/// on to the next proxy address at once.
pub fn listeners_before_table(lds: &Value) -> Value {
    let kept: Vec<Value> = lds
        .get("resources")
        .and_then(Value::as_array)
        .map(|resources| {
            resources
                .iter()
                .filter(|l| {
                    let name = l.get("name").and_then(Value::as_str);
                    name == Some(API_LISTENER)
                        || name == Some(READY_LISTENER)
                        || name == Some(METRICS_LISTENER)
                })
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    json!({"version_info": format!("before-table-{}", digest(&kept)), "resources": kept})
}
/// The listeners of a draining replica: every rendered listener but the
/// table API and the readiness listener. The routing listeners keep serving
/// while those ports refuse connections, so the replica's `GET /ready`
/// fails: the address
/// agent hands its VLAN addresses on, the DNS servers' checks drop its
/// address, and pushes go to the live replicas.
pub fn listeners_while_draining(lds: &Value) -> Value {
    let kept: Vec<Value> = lds
        .get("resources")
        .and_then(Value::as_array)
        .map(|resources| {
            resources
                .iter()
                .filter(|l| {
                    let name = l.get("name").and_then(Value::as_str);
                    name != Some(API_LISTENER) && name != Some(READY_LISTENER)
                })
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    json!({"version_info": format!("draining-{}", digest(&kept)), "resources": kept})
}

/// Clusters file name inside the config directory.
pub const CDS_FILE: &str = "cds.json";
/// ECDS resource (and filter) name of the network filter on `port`.
pub fn network_filter_name(port: u16) -> String {
    format!("oooi_sni_router_{port}")
}
/// ECDS resource (and filter) name of the filter that refuses connections
/// on the TLS listener `port` whose transport protocol is not TLS.
pub fn not_tls_filter_name(port: u16) -> String {
    format!("oooi_not_tls_{port}")
}
/// ECDS resource (and filter) name of the table API's HTTP filter.
pub const API_FILTER_NAME: &str = "oooi_table_api";
/// ECDS resource (and filter) name of the readiness listener's HTTP filter.
pub const READY_FILTER_NAME: &str = "oooi_ready";
/// Path of the Prometheus endpoint on the [`ProxyConfig::metrics`] listener.
pub const METRICS_PATH: &str = "/metrics";
/// The static cluster that reaches the admin interface from the metrics
/// listener.
const ADMIN_CLUSTER: &str = "oooi_envoy_admin";
/// ECDS file name of the filter named `name`.
pub fn extension_file(name: &str) -> String {
    format!("ecds_{name}.json")
}
const NETWORK_WASM_TYPE: &str = "type.googleapis.com/envoy.extensions.filters.network.wasm.v3.Wasm";
const HTTP_WASM_TYPE: &str = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm";

/// SHA-256 (hex) of a module, for [`ProxyConfig::wasm_sha256`].
pub fn module_sha256(module: &[u8]) -> String {
    hex::encode(Sha256::digest(module))
}

/// A versioned file name for a module (`oooi-sni-router-<12 hex>.wasm`), so a
/// ConfigMap can carry the new build under a new key.
pub fn module_file_name(module: &[u8]) -> String {
    format!("oooi-sni-router-{}.wasm", &module_sha256(module)[..12])
}

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
            // Part of Envoy's VM key: a new module is a new VM even if the
            // file name did not change.
            "configuration": {
                "@type": "type.googleapis.com/google.protobuf.StringValue",
                "value": json!({"module_sha256": cfg.wasm_sha256}).to_string(),
            },
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
    let watched_in = |dir: &Path, file: &str| {
        let dir = dir.display().to_string();
        json!({
            "resource_api_version": "V3",
            "path_config_source": {
                "path": format!("{dir}/{file}"),
                "watched_directory": {"path": dir},
            },
        })
    };
    let watched = |file: &str| watched_in(config_dir, file);
    let lds_dir = cfg.listeners_dir.as_deref().unwrap_or(config_dir);
    let bootstrap = json!({
        "node": {"id": "oooi-proxy", "cluster": "oooi"},
        "admin": {"address": socket(cfg.admin.ip(), cfg.admin.port())},
        "dynamic_resources": {"lds_config": watched_in(lds_dir, LDS_FILE), "cds_config": watched(CDS_FILE)},
        "layered_runtime": {"layers": [{"name": "static", "static_layer": {
            "overload.global_downstream_max_connections": 50000,
            format!("envoy.resource_limits.listener.{API_LISTENER}.connection_limit"): API_MAX_CONNECTIONS,
            format!("envoy.resource_limits.listener.{READY_LISTENER}.connection_limit"): READY_MAX_CONNECTIONS,
            format!("envoy.resource_limits.listener.{METRICS_LISTENER}.connection_limit"): METRICS_MAX_CONNECTIONS,
        }}]},
        "overload_manager": overload_manager(),
    });

    // A filter delivered by ECDS from its own file in the watched directory.
    let discovered = |name: &str, type_url: &str| {
        json!({
            "name": name,
            "config_discovery": {
                "config_source": watched(&extension_file(name)),
                "type_urls": [type_url],
            },
        })
    };
    let mut listeners = Vec::new();
    let mut extensions = Vec::new();
    for &port in &cfg.tls_ports {
        if is_plain_http(port) {
            let name = network_filter_name(port);
            let filter_cfg = json!({
                "role": "http",
                "port": port,
                "max_head_bytes": HTTP_MAX_HEAD_BYTES,
                "head_timeout_ms": HTTP_HEAD_TIMEOUT_MS,
            });
            extensions.push(extension(
                &name,
                NETWORK_WASM_TYPE,
                wasm_config(cfg, &name, filter_cfg),
            ));
            listeners.push(http_host_listener(
                cfg.listen_address,
                port,
                discovered(&name, NETWORK_WASM_TYPE),
            ));
            continue;
        }
        let name = network_filter_name(port);
        let filter_cfg = json!({"role": "network", "port": port});
        extensions.push(extension(
            &name,
            NETWORK_WASM_TYPE,
            wasm_config(cfg, &name, filter_cfg),
        ));
        let refuse = not_tls_filter_name(port);
        extensions.push(extension(
            &refuse,
            NETWORK_WASM_TYPE,
            wasm_config(cfg, &refuse, json!({"role": "not_tls", "port": port})),
        ));
        listeners.push(tls_listener(
            cfg.listen_address,
            port,
            discovered(&name, NETWORK_WASM_TYPE),
            discovered(&refuse, NETWORK_WASM_TYPE),
        ));
    }
    let static_clusters: Vec<&str> = cfg.clusters.iter().map(|c| c.name.as_str()).collect();
    let api_cfg = json!({"role": "api", "push_token": cfg.push_token, "clusters": static_clusters});
    extensions.push(extension(
        API_FILTER_NAME,
        HTTP_WASM_TYPE,
        wasm_config(cfg, API_FILTER_NAME, api_cfg),
    ));
    let mut api_filters: Vec<Value> = cfg
        .vlan
        .iter()
        .map(|v| vlan_guard(v, "table_api_vlan_guard."))
        .collect();
    api_filters.push(json!({
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                "stat_prefix": "table_api",
                // HTTP/1.1 only: the controller's pusher speaks it, and an
                // h2c client gets an HTTP/1.1 error rather than a stream
                // reset without a status.
                "codec_type": "HTTP1",
                "request_headers_timeout": duration_ms(API_REQUEST_HEADERS_TIMEOUT_MS),
                "request_timeout": duration_ms(API_REQUEST_TIMEOUT_MS),
                "stream_idle_timeout": duration_ms(API_STREAM_IDLE_TIMEOUT_MS),
                "max_request_headers_kb": API_MAX_REQUEST_HEADERS_KB,
                "common_http_protocol_options": {
                    "idle_timeout": duration_ms(API_IDLE_TIMEOUT_MS),
                    "max_headers_count": 64,
                },
                "local_reply_config": api_local_replies(),
                "route_config": {"name": "table_api", "virtual_hosts": [{
                    "name": "all", "domains": ["*"],
                    // The filter answers a body over the limit itself (JSON)
                    // once it has seen more than MAX_DOCUMENT_BYTES; its
                    // answer is sent after its callback returns, when Envoy
                    // has already buffered that chunk. One read may bring up
                    // to `per_connection_buffer_limit_bytes`, so the stream
                    // may buffer twice that: Envoy's own (plain text) 413 can
                    // never come first.
                    "request_body_buffer_limit": API_STREAM_BUFFER_BYTES,
                    "routes": [{"match": {"prefix": "/"}, "direct_response": {"status": 404}}],
                }]},
                "http_filters": [
                    discovered(API_FILTER_NAME, HTTP_WASM_TYPE),
                    {
                        "name": "envoy.filters.http.buffer",
                        "typed_config": {
                            "@type": "type.googleapis.com/envoy.extensions.filters.http.buffer.v3.Buffer",
                            // It sets the stream's buffer limit to this when
                            // the headers pass it: the same as above.
                            "max_request_bytes": API_STREAM_BUFFER_BYTES,
                        },
                    },
                    {
                        "name": "envoy.filters.http.router",
                        "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
                    },
                ],
            },
    }));
    listeners.push(json!({
        "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
        "name": API_LISTENER,
        "address": socket(cfg.api.ip(), cfg.api.port()),
        "per_connection_buffer_limit_bytes": API_CONNECTION_BUFFER_BYTES,
        "filter_chains": [{"filters": api_filters}],
    }));

    if let Some(ready) = cfg.ready {
        extensions.push(extension(
            READY_FILTER_NAME,
            HTTP_WASM_TYPE,
            wasm_config(cfg, READY_FILTER_NAME, json!({"role": "ready"})),
        ));
        listeners.push(ready_listener(
            cfg,
            ready,
            discovered(READY_FILTER_NAME, HTTP_WASM_TYPE),
        ));
    }

    if let Some(metrics) = cfg.metrics {
        listeners.push(metrics_listener(cfg, metrics));
    }
    for native in &cfg.native_sni {
        listeners.push(native_listener(cfg.listen_address, native));
    }

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
    if cfg.metrics.is_some() {
        // Not among the clusters the table API accepts (`cfg.clusters`), so
        // no pushed route can reach the admin interface.
        clusters.push(json!({
            "@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
            "name": ADMIN_CLUSTER,
            "type": "STATIC",
            "connect_timeout": connect_timeout,
            "load_assignment": {"cluster_name": ADMIN_CLUSTER, "endpoints": [{"lb_endpoints": [
                {"endpoint": {"address": socket(cfg.admin.ip(), cfg.admin.port())}},
            ]}]},
        }));
    }
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
        extensions,
    }
}

/// Envoy's own answers on the table API (a malformed or h2c request, a
/// timeout, overload) in the filter's JSON shape: `{"error": "<text>",
/// "details": "<Envoy's response code details>"}`. The filter's answers
/// (already JSON) carry no response code details, Envoy's always do: a CEL
/// expression on them picks Envoy's alone.
fn api_local_replies() -> Value {
    json!({"mappers": [{
        "filter": {"extension_filter": {
            "name": "envoy.access_loggers.extension_filters.cel",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.access_loggers.filters.cel.v3.ExpressionFilter",
                "expression": "response.code_details != ''",
            },
        }},
        "body_format_override": {
            "json_format": {"error": "%LOCAL_REPLY_BODY%", "details": "%RESPONSE_CODE_DETAILS%"},
            "content_type": "application/json",
        },
    }]})
}

/// Envoy's overload manager: a heap ceiling ([`HEAP_CEILING_BYTES`]) and
/// what Envoy does as it nears it. Streams are accounted from 1 MiB up
/// (`buffer_factory_config`), so only large request bodies (table pushes)
/// can be reset.
fn overload_manager() -> Value {
    const HEAP: &str = "envoy.resource_monitors.fixed_heap";
    json!({
        "refresh_interval": "0.25s",
        "buffer_factory_config": {"minimum_account_to_track_power_of_two": 20},
        "resource_monitors": [{
            "name": HEAP,
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.resource_monitors.fixed_heap.v3.FixedHeapConfig",
                "max_heap_size_bytes": HEAP_CEILING_BYTES,
            },
        }],
        "actions": [
            {
                "name": "envoy.overload_actions.reset_high_memory_stream",
                "triggers": [{"name": HEAP, "scaled": {"scaling_threshold": 0.85, "saturation_threshold": 0.95}}],
            },
            {
                "name": "envoy.overload_actions.shrink_heap",
                "triggers": [{"name": HEAP, "threshold": {"value": 0.90}}],
            },
            {
                "name": "envoy.overload_actions.stop_accepting_requests",
                "triggers": [{"name": HEAP, "threshold": {"value": 0.95}}],
            },
        ],
    })
}

/// A TLS passthrough listener. `tls_inspector` reads the ClientHello;
/// connections it finds to be TLS take the routing chain (the oooi filter,
/// `sni_dynamic_forward_proxy`, tcp_proxy), everything else (plain bytes,
/// plain HTTP, an SSLv2 hello, or nothing within [`CLIENT_HELLO_TIMEOUT_MS`])
/// takes the default chain, whose filter closes it and counts it as
/// `not_tls`. So the no-SNI path by source address carries TLS only.
fn tls_listener(addr: IpAddr, port: u16, route: Value, refuse: Value) -> Value {
    json!({
        "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
        "name": format!("tls_{port}"),
        "address": socket(addr, port),
        "freebind": true,
        "listener_filters": [{
            "name": "envoy.filters.listener.tls_inspector",
            "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector"},
        }],
        // A client that sends nothing is handed to the default chain (and
        // closed there) after this long, rather than held open.
        "listener_filters_timeout": duration_ms(CLIENT_HELLO_TIMEOUT_MS),
        "continue_on_listener_filters_timeout": true,
        "filter_chains": [{
            "name": "tls",
            "filter_chain_match": {"transport_protocol": "tls"},
            "filters": [
                route,
                {
                    "name": "envoy.filters.network.sni_dynamic_forward_proxy",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.network.sni_dynamic_forward_proxy.v3.FilterConfig",
                        "dns_cache_config": dns_cache_config(),
                        // The default upstream port: the filter names a port
                        // only when it differs from the listener's.
                        "port_value": port,
                    },
                },
                tcp_proxy(&format!("tls_{port}"), Some(65536)),
            ],
        }],
        // Envoy wants a terminal filter last; the refusing filter closes
        // every connection before tcp_proxy (to the unrouted cluster) runs.
        "default_filter_chain": {"name": "not_tls", "filters": [
            refuse,
            tcp_proxy(&format!("not_tls_{port}"), None),
        ]},
    })
}

/// The listener Prometheus scrapes: `GET /metrics` is the admin
/// interface's `/stats/prometheus`, anything else 404.
fn metrics_listener(cfg: &ProxyConfig, addr: SocketAddr) -> Value {
    let mut filters: Vec<Value> = cfg
        .vlan
        .iter()
        .map(|v| vlan_guard(v, "metrics_vlan_guard."))
        .collect();
    filters.push(json!({
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
            "stat_prefix": "metrics",
            "codec_type": "HTTP1",
            "request_headers_timeout": duration_ms(SMALL_REQUEST_HEADERS_TIMEOUT_MS),
            "request_timeout": duration_ms(API_REQUEST_TIMEOUT_MS),
            "stream_idle_timeout": duration_ms(SMALL_STREAM_IDLE_TIMEOUT_MS),
            "max_request_headers_kb": SMALL_MAX_REQUEST_HEADERS_KB,
            "common_http_protocol_options": {
                "idle_timeout": duration_ms(SMALL_IDLE_TIMEOUT_MS),
                "max_headers_count": 32,
            },
            "route_config": {"name": "metrics", "virtual_hosts": [{
                "name": "all", "domains": ["*"],
                "routes": [
                    {
                        "match": {"path": METRICS_PATH, "headers": [
                            {"name": ":method", "string_match": {"exact": "GET"}},
                        ]},
                        "route": {"cluster": ADMIN_CLUSTER, "prefix_rewrite": "/stats/prometheus"},
                    },
                    {"match": {"prefix": "/"}, "direct_response": {"status": 404}},
                ],
            }]},
            "http_filters": [{
                "name": "envoy.filters.http.router",
                "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
            }],
        },
    }));
    small_listener(METRICS_LISTENER, addr, filters)
}

/// A listener of small HTTP requests (metrics, readiness): its own small
/// per-connection buffer, one filter chain.
fn small_listener(name: &str, addr: SocketAddr, filters: Vec<Value>) -> Value {
    json!({
        "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
        "name": name,
        "address": socket(addr.ip(), addr.port()),
        "per_connection_buffer_limit_bytes": SMALL_CONNECTION_BUFFER_BYTES,
        "filter_chains": [{"filters": filters}],
    })
}

/// The readiness listener: the filter in its `ready` role answers `GET
/// /ready` from the request head; no body is read or buffered, heads are
/// small and timed, and the listener has its own connection budget
/// ([`READY_MAX_CONNECTIONS`]).
fn ready_listener(cfg: &ProxyConfig, addr: SocketAddr, filter: Value) -> Value {
    let mut filters: Vec<Value> = cfg
        .vlan
        .iter()
        .map(|v| vlan_guard(v, "ready_vlan_guard."))
        .collect();
    filters.push(json!({
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
            "stat_prefix": READY_LISTENER,
            "codec_type": "HTTP1",
            "request_headers_timeout": duration_ms(SMALL_REQUEST_HEADERS_TIMEOUT_MS),
            "request_timeout": duration_ms(SMALL_REQUEST_HEADERS_TIMEOUT_MS),
            "stream_idle_timeout": duration_ms(SMALL_STREAM_IDLE_TIMEOUT_MS),
            "max_request_headers_kb": SMALL_MAX_REQUEST_HEADERS_KB,
            "common_http_protocol_options": {
                "idle_timeout": duration_ms(SMALL_IDLE_TIMEOUT_MS),
                "max_headers_count": 32,
            },
            "local_reply_config": api_local_replies(),
            "route_config": {"name": READY_LISTENER, "virtual_hosts": [{
                "name": "all", "domains": ["*"],
                "request_body_buffer_limit": SMALL_CONNECTION_BUFFER_BYTES,
                "routes": [{"match": {"prefix": "/"}, "direct_response": {"status": 404}}],
            }]},
            "http_filters": [
                filter,
                {
                    "name": "envoy.filters.http.router",
                    "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
                },
            ],
        },
    }));
    small_listener(READY_LISTENER, addr, filters)
}

/// Envoy's network RBAC filter refusing every connection from the VLAN
/// network or addressed to the proxy's VLAN address.
fn vlan_guard(vlan: &VlanLeg, stat_prefix: &str) -> Value {
    let any = json!({"any": true});
    json!({
        "name": "envoy.filters.network.rbac",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.rbac.v3.RBAC",
            "stat_prefix": stat_prefix,
            "rules": {"action": "DENY", "policies": {
                "from_vlan": {
                    "permissions": [any],
                    "principals": [{"direct_remote_ip": {
                        "address_prefix": vlan.address.to_string(),
                        "prefix_len": vlan.prefix_len,
                    }}],
                },
                "to_vlan_address": {
                    "permissions": [{"destination_ip": {
                        "address_prefix": vlan.address.to_string(),
                        "prefix_len": if vlan.address.is_ipv4() { 32 } else { 128 },
                    }}],
                    "principals": [any],
                },
            }},
        },
    })
}

/// tcp_proxy with the unrouted default cluster (the filter names the real
/// one) and the explicit idle timeout.
fn tcp_proxy(stat_prefix: &str, max_early_data_bytes: Option<u32>) -> Value {
    let mut config = json!({
        "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
        "stat_prefix": stat_prefix,
        "cluster": UNROUTED_CLUSTER,
        "idle_timeout": format!("{}s", TCP_IDLE_TIMEOUT_S),
    });
    if let Some(bytes) = max_early_data_bytes {
        config["max_early_data_bytes"] = json!(bytes);
    }
    json!({"name": "envoy.filters.network.tcp_proxy", "typed_config": config})
}

/// The plain-HTTP listener: no TLS inspector; the filter holds the chain
/// until it has read the first request head and chosen the upstream by
/// `Host`. tcp_proxy is configured to receive before it connects
/// (`max_early_data_bytes`): otherwise it would stop reading the client until
/// connected, and the filter would never see the head. It is initialised
/// only when the filter lets the chain continue, so it never connects for a
/// refused connection.
fn http_host_listener(addr: IpAddr, port: u16, filter: Value) -> Value {
    json!({
        "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
        "name": format!("http_{port}"),
        "address": socket(addr, port),
        "freebind": true,
        "filter_chains": [{"filters": [
            filter,
            {
                "name": "envoy.filters.network.sni_dynamic_forward_proxy",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.network.sni_dynamic_forward_proxy.v3.FilterConfig",
                    "dns_cache_config": dns_cache_config(),
                    "port_value": port,
                },
            },
            tcp_proxy(&format!("http_{port}"), Some(HTTP_EARLY_DATA_BYTES)),
        ]}],
    })
}

/// An ECDS discovery response holding one filter config.
fn extension(name: &str, type_url: &str, config: Value) -> (String, Value) {
    let resource = json!({
        "@type": "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig",
        "name": name,
        "typed_config": {"@type": type_url, "config": config},
    });
    let doc = json!({
        "version_info": digest(std::slice::from_ref(&resource)),
        "resources": [resource],
    });
    (extension_file(name), doc)
}

fn native_listener(addr: IpAddr, l: &NativeSniListener) -> Value {
    let chains: Vec<Value> = l
        .routes
        .iter()
        .map(|(server_name, cluster)| {
            json!({
                "filter_chain_match": {"server_names": [server_name]},
                "filters": [{
                    "name": "envoy.filters.network.tcp_proxy",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
                        "stat_prefix": format!("native_sni_{}", l.port),
                        "cluster": cluster,
                    },
                }],
            })
        })
        .collect();
    json!({
        "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
        "name": format!("native_sni_{}", l.port),
        "address": socket(addr, l.port),
        "listener_filters": [{
            "name": "envoy.filters.listener.tls_inspector",
            "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector"},
        }],
        "listener_filters_timeout": "2s",
        // No default chain: a server name without a chain is closed.
        "filter_chains": chains,
    })
}

fn digest(v: &[Value]) -> String {
    let bytes = serde_json::to_vec(v).unwrap_or_default();
    hex::encode(&Sha256::digest(&bytes)[..8])
}

/// Every file of the config directory as (name, contents): bootstrap, CDS,
/// the ECDS files and LDS. This is what a ConfigMap for Envoy holds (plus the
/// module itself, under its versioned name, wherever `wasm_path` points).
pub fn files(cfg: &ProxyConfig, config_dir: &Path) -> io::Result<Vec<(String, Vec<u8>)>> {
    let r = render(cfg, config_dir);
    let mut out = vec![
        (
            BOOTSTRAP_FILE.to_owned(),
            serde_json::to_vec_pretty(&r.bootstrap)?,
        ),
        (CDS_FILE.to_owned(), serde_json::to_vec_pretty(&r.clusters)?),
    ];
    for (name, doc) in &r.extensions {
        out.push((name.clone(), serde_json::to_vec_pretty(doc)?));
    }
    out.push((
        LDS_FILE.to_owned(),
        serde_json::to_vec_pretty(&r.listeners)?,
    ));
    Ok(out)
}

/// Writes [`files`] into `dir` (created if missing) and returns the
/// bootstrap path. Each file is written to a temporary name and renamed, so
/// Envoy never reads a half-written file. (A ConfigMap mount swaps them all
/// at once through `..data` instead.)
pub fn write(cfg: &ProxyConfig, dir: &Path) -> io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    for (name, bytes) in files(cfg, dir)? {
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, bytes)?;
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
            ready: None,
            vlan: None,
            push_token: "0123456789abcdef".into(),
            wasm_path: "/filters/oooi.wasm".into(),
            wasm_sha256: "ab".repeat(32),
            clusters: vec![StaticCluster {
                name: "c1_api".into(),
                endpoints: vec!["127.0.0.9:6443".parse().unwrap()],
            }],
            connect_timeout_ms: 2500,
            native_sni: Vec::new(),
            metrics: None,
            listeners_dir: None,
        }
    }

    #[test]
    fn a_gated_proxy_reads_listeners_from_the_gate_and_opens_only_the_api_before_its_table() {
        let mut c = cfg();
        c.metrics = Some("0.0.0.0:9102".parse().unwrap());
        let ungated = render(&c, Path::new("/etc/envoy"));
        assert_eq!(
            ungated.bootstrap["dynamic_resources"]["lds_config"]["path_config_source"]["path"],
            "/etc/envoy/lds.json"
        );
        c.listeners_dir = Some("/run/oooi-envoy".into());
        let r = render(&c, Path::new("/etc/envoy"));
        let lds = &r.bootstrap["dynamic_resources"]["lds_config"]["path_config_source"];
        assert_eq!(lds["path"], "/run/oooi-envoy/lds.json");
        assert_eq!(lds["watched_directory"]["path"], "/run/oooi-envoy");
        // Everything else still comes from the config directory.
        assert_eq!(
            r.bootstrap["dynamic_resources"]["cds_config"]["path_config_source"]["path"],
            "/etc/envoy/cds.json"
        );
        assert_eq!(r.listeners, ungated.listeners);

        let all: Vec<&str> = r.listeners["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["name"].as_str().unwrap())
            .collect();
        assert!(all.len() > 2, "{all:?}");
        let before = listeners_before_table(&r.listeners);
        let names: Vec<&str> = before["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, [API_LISTENER, METRICS_LISTENER]);
        c.ready = Some("0.0.0.0:9446".parse().unwrap());
        let with_ready = listeners_before_table(&render(&c, Path::new("/etc/envoy")).listeners);
        let names: Vec<&str> = with_ready["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, [API_LISTENER, READY_LISTENER, METRICS_LISTENER]);
        c.ready = None;
        assert_ne!(before["version_info"], r.listeners["version_info"]);
        // A different API port is a different document.
        c.api = "127.0.0.1:9446".parse().unwrap();
        let moved = listeners_before_table(&render(&c, Path::new("/etc/envoy")).listeners);
        assert_ne!(moved["version_info"], before["version_info"]);
        // Nothing to keep from a document that is not LDS.
        assert_eq!(listeners_before_table(&json!({}))["resources"], json!([]));
    }

    fn extension<'a>(r: &'a Rendered, name: &str) -> &'a Value {
        let file = extension_file(name);
        let doc = &r.extensions.iter().find(|(f, _)| *f == file).unwrap().1;
        assert_eq!(doc["resources"].as_array().unwrap().len(), 1);
        let res = &doc["resources"][0];
        assert_eq!(res["name"], name);
        &res["typed_config"]["config"]
    }

    #[test]
    fn the_metrics_listener_exposes_only_prometheus_stats_and_refuses_the_vlan() {
        let mut c = cfg();
        assert!(
            !render(&c, Path::new("/etc/envoy")).listeners["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|l| l["name"] == "metrics"),
            "no metrics listener unless asked for"
        );
        c.metrics = Some("0.0.0.0:9102".parse().unwrap());
        c.vlan = Some(VlanLeg {
            address: "192.0.2.4".parse().unwrap(),
            prefix_len: 24,
        });
        let r = render(&c, Path::new("/etc/envoy"));
        let listeners = r.listeners["resources"].as_array().unwrap();
        let l = listeners.iter().find(|l| l["name"] == "metrics").unwrap();
        assert_eq!(l["address"]["socket_address"]["port_value"], 9102);
        let filters = l["filter_chains"][0]["filters"].as_array().unwrap();
        assert_eq!(filters[0]["name"], "envoy.filters.network.rbac");
        let rules = &filters[0]["typed_config"]["rules"];
        assert_eq!(rules["action"], "DENY");
        assert_eq!(
            rules["policies"]["from_vlan"]["principals"][0]["direct_remote_ip"]["address_prefix"],
            "192.0.2.4"
        );
        let routes = filters[1]["typed_config"]["route_config"]["virtual_hosts"][0]["routes"]
            .as_array()
            .unwrap();
        assert_eq!(routes.len(), 2);
        assert_eq!(routes[0]["match"]["path"], METRICS_PATH);
        assert_eq!(
            routes[0]["match"]["headers"][0]["string_match"]["exact"],
            "GET"
        );
        assert_eq!(routes[0]["route"]["cluster"], ADMIN_CLUSTER);
        assert_eq!(routes[0]["route"]["prefix_rewrite"], "/stats/prometheus");
        assert_eq!(routes[1]["direct_response"]["status"], 404);
        let clusters = r.clusters["resources"].as_array().unwrap();
        let admin = clusters
            .iter()
            .find(|c| c["name"] == ADMIN_CLUSTER)
            .unwrap();
        let ep = &admin["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"];
        assert_eq!(ep["address"]["socket_address"]["port_value"], 9901);
        assert_eq!(ep["address"]["socket_address"]["address"], "127.0.0.1");
        // The table API accepts routes to the configured clusters only, so
        // no pushed route can name the admin cluster.
        let api = extension(&r, API_FILTER_NAME);
        let api_cfg: Value =
            serde_json::from_str(api["configuration"]["value"].as_str().unwrap()).unwrap();
        assert_eq!(api_cfg["clusters"], json!(["c1_api"]));
    }

    #[test]
    fn every_tls_listener_fails_closed_and_reloads_on_fault() {
        let r = render(&cfg(), Path::new("/etc/envoy"));
        let listeners = r.listeners["resources"].as_array().unwrap();
        assert_eq!(listeners.len(), 3);
        for (l, port) in listeners[..2].iter().zip([6443, 443]) {
            let filters = l["filter_chains"][0]["filters"].as_array().unwrap();
            let name = network_filter_name(port);
            assert_eq!(filters[0]["name"], name);
            let wasm = extension(&r, &name);
            assert_eq!(wasm["failure_policy"], "FAIL_RELOAD");
            assert_eq!(wasm["vm_config"]["vm_id"], VM_ID);
            assert_eq!(filters[2]["typed_config"]["cluster"], UNROUTED_CLUSTER);
            assert_eq!(
                filters[2]["typed_config"]["idle_timeout"],
                format!("{TCP_IDLE_TIMEOUT_S}s")
            );
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
        let read = api["per_connection_buffer_limit_bytes"].as_u64().unwrap();
        assert_eq!(read, API_CONNECTION_BUFFER_BYTES);
        assert!(
            read < MAX_DOCUMENT_BYTES as u64 / 8,
            "a refused body costs little"
        );
        let hcm = &api["filter_chains"][0]["filters"][0]["typed_config"];
        let limit = MAX_DOCUMENT_BYTES as u64 + 64 * 1024;
        assert_eq!(
            hcm["route_config"]["virtual_hosts"][0]["request_body_buffer_limit"]
                .as_u64()
                .unwrap(),
            2 * limit,
            "the largest document and a read beyond it fit the stream"
        );
        let filters = &api["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"];
        assert_eq!(filters[0]["name"], API_FILTER_NAME);
        assert_eq!(filters[1]["name"], "envoy.filters.http.buffer");
        assert_eq!(
            filters[1]["typed_config"]["max_request_bytes"]
                .as_u64()
                .unwrap(),
            2 * limit
        );
        let plugin: Value = serde_json::from_str(
            extension(&r, API_FILTER_NAME)["configuration"]["value"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(plugin["role"], "api");
    }

    /// Readiness has a listener of its own: its own connection budget,
    /// small timed heads, no body buffering, the `ready` role of the filter,
    /// and the VLAN guard; draining closes it with the table API.
    #[test]
    fn readiness_has_its_own_small_bounded_listener() {
        let mut c = cfg();
        c.ready = Some("0.0.0.0:9446".parse().unwrap());
        c.metrics = Some("0.0.0.0:9102".parse().unwrap());
        c.vlan = Some(VlanLeg {
            address: "192.0.2.4".parse().unwrap(),
            prefix_len: 24,
        });
        let r = render(&c, Path::new("/etc/envoy"));
        let listeners = r.listeners["resources"].as_array().unwrap();
        let l = listeners
            .iter()
            .find(|l| l["name"] == READY_LISTENER)
            .unwrap();
        assert_eq!(l["address"]["socket_address"]["port_value"], 9446);
        assert_eq!(
            l["per_connection_buffer_limit_bytes"],
            SMALL_CONNECTION_BUFFER_BYTES
        );
        let filters = l["filter_chains"][0]["filters"].as_array().unwrap();
        assert_eq!(filters[0]["name"], "envoy.filters.network.rbac");
        let hcm = &filters[1]["typed_config"];
        assert_eq!(hcm["request_headers_timeout"], "2.000s");
        assert_eq!(hcm["max_request_headers_kb"], SMALL_MAX_REQUEST_HEADERS_KB);
        assert_eq!(
            hcm["common_http_protocol_options"]["idle_timeout"],
            "10.000s"
        );
        let http: Vec<&str> = hcm["http_filters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["name"].as_str().unwrap())
            .collect();
        assert_eq!(http, [READY_FILTER_NAME, "envoy.filters.http.router"]);
        let plugin: Value = serde_json::from_str(
            extension(&r, READY_FILTER_NAME)["configuration"]["value"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(plugin, json!({"role": "ready"}), "no token on this port");
        let layer = &r.bootstrap["layered_runtime"]["layers"][0]["static_layer"];
        assert_eq!(
            layer["envoy.resource_limits.listener.ready.connection_limit"],
            READY_MAX_CONNECTIONS
        );
        assert_eq!(
            layer["envoy.resource_limits.listener.metrics.connection_limit"],
            METRICS_MAX_CONNECTIONS
        );
        let draining = listeners_while_draining(&r.listeners);
        let names: Vec<&str> = draining["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["name"].as_str().unwrap())
            .collect();
        assert!(!names.contains(&READY_LISTENER), "{names:?}");
        assert!(!names.contains(&API_LISTENER), "{names:?}");
        assert!(names.contains(&METRICS_LISTENER), "{names:?}");
    }

    #[test]
    fn the_metrics_listener_bounds_heads_idle_connections_and_buffers() {
        let mut c = cfg();
        c.metrics = Some("0.0.0.0:9102".parse().unwrap());
        let r = render(&c, Path::new("/etc/envoy"));
        let l = r.listeners["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == METRICS_LISTENER)
            .unwrap();
        assert_eq!(
            l["per_connection_buffer_limit_bytes"],
            SMALL_CONNECTION_BUFFER_BYTES
        );
        let hcm = &l["filter_chains"][0]["filters"][0]["typed_config"];
        assert_eq!(hcm["request_headers_timeout"], "2.000s");
        assert_eq!(hcm["stream_idle_timeout"], "10.000s");
        assert_eq!(hcm["max_request_headers_kb"], SMALL_MAX_REQUEST_HEADERS_KB);
        assert_eq!(
            hcm["common_http_protocol_options"]["idle_timeout"],
            "10.000s"
        );
    }

    #[test]
    fn the_table_api_is_bounded_by_envoys_own_settings() {
        let r = render(&cfg(), Path::new("/etc/envoy"));
        let hcm = &r.listeners["resources"][2]["filter_chains"][0]["filters"][0]["typed_config"];
        assert_eq!(hcm["codec_type"], "HTTP1");
        assert_eq!(hcm["request_headers_timeout"], "5.000s");
        assert_eq!(hcm["request_timeout"], "30.000s");
        assert_eq!(hcm["stream_idle_timeout"], "10.000s");
        assert_eq!(
            hcm["common_http_protocol_options"]["idle_timeout"],
            "15.000s"
        );
        assert_eq!(hcm["max_request_headers_kb"], API_MAX_REQUEST_HEADERS_KB);
        let layer = &r.bootstrap["layered_runtime"]["layers"][0]["static_layer"];
        assert_eq!(
            layer["envoy.resource_limits.listener.table_api.connection_limit"],
            API_MAX_CONNECTIONS
        );
        let overload = &r.bootstrap["overload_manager"];
        assert_eq!(
            overload["resource_monitors"][0]["typed_config"]["max_heap_size_bytes"],
            HEAP_CEILING_BYTES
        );
        const { assert!(HEAP_CEILING_BYTES < PROXY_MEMORY_LIMIT_BYTES) };
        assert_eq!(overload["actions"].as_array().unwrap().len(), 3);
        let mapper = &hcm["local_reply_config"]["mappers"][0];
        assert_eq!(
            mapper["body_format_override"]["content_type"],
            "application/json"
        );
    }

    #[test]
    fn wasm_filters_come_from_watched_ecds_files() {
        let r = render(&cfg(), Path::new("/etc/envoy"));
        let filter = &r.listeners["resources"][1]["filter_chains"][0]["filters"][0];
        let source = &filter["config_discovery"]["config_source"]["path_config_source"];
        assert_eq!(source["path"], "/etc/envoy/ecds_oooi_sni_router_443.json");
        assert_eq!(source["watched_directory"]["path"], "/etc/envoy");
        assert_eq!(
            filter["config_discovery"]["type_urls"][0],
            NETWORK_WASM_TYPE
        );
        // The routing and the not-TLS filter of each TLS port, and the API.
        assert_eq!(r.extensions.len(), 5);
    }

    #[test]
    fn only_tls_takes_the_routing_chain() {
        let r = render(&cfg(), Path::new("/etc/envoy"));
        for (l, port) in r.listeners["resources"].as_array().unwrap()[..2]
            .iter()
            .zip([6443, 443])
        {
            let chains = l["filter_chains"].as_array().unwrap();
            assert_eq!(chains.len(), 1, "one chain, for TLS");
            assert_eq!(chains[0]["filter_chain_match"]["transport_protocol"], "tls");
            let default = &l["default_filter_chain"]["filters"];
            assert_eq!(default[0]["name"], not_tls_filter_name(port));
            // The terminal filter Envoy requires leads nowhere.
            assert_eq!(default[1]["typed_config"]["cluster"], UNROUTED_CLUSTER);
            let plugin: Value = serde_json::from_str(
                extension(&r, &not_tls_filter_name(port))["configuration"]["value"]
                    .as_str()
                    .unwrap(),
            )
            .unwrap();
            assert_eq!(plugin, json!({"role": "not_tls", "port": port}));
            assert_eq!(l["listener_filters_timeout"], "5.000s");
            assert_eq!(l["continue_on_listener_filters_timeout"], true);
        }
    }

    #[test]
    fn the_api_knows_the_static_clusters_and_refuses_the_vlan() {
        let mut c = cfg();
        let r = render(&c, Path::new("/etc/envoy"));
        let plugin: Value = serde_json::from_str(
            extension(&r, API_FILTER_NAME)["configuration"]["value"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(plugin["clusters"], json!(["c1_api"]));
        let api = &r.listeners["resources"][2]["filter_chains"][0]["filters"];
        assert_eq!(api.as_array().unwrap().len(), 1, "no guard without a VLAN");
        c.vlan = Some(VlanLeg {
            address: "192.0.2.4".parse().unwrap(),
            prefix_len: 24,
        });
        let r = render(&c, Path::new("/etc/envoy"));
        let api = &r.listeners["resources"][2]["filter_chains"][0]["filters"];
        assert_eq!(api[0]["name"], "envoy.filters.network.rbac");
        let rules = &api[0]["typed_config"]["rules"];
        assert_eq!(rules["action"], "DENY");
        assert_eq!(
            rules["policies"]["from_vlan"]["principals"][0]["direct_remote_ip"],
            json!({"address_prefix": "192.0.2.4", "prefix_len": 24})
        );
        assert_eq!(
            rules["policies"]["to_vlan_address"]["permissions"][0]["destination_ip"],
            json!({"address_prefix": "192.0.2.4", "prefix_len": 32})
        );
        assert_eq!(
            api[1]["name"],
            "envoy.filters.network.http_connection_manager"
        );
    }

    #[test]
    fn a_new_module_changes_only_the_extension_files() {
        let a = cfg();
        let mut b = cfg();
        b.wasm_path = "/filters/other.wasm".into();
        b.wasm_sha256 = "cd".repeat(32);
        let (ra, rb) = (
            render(&a, Path::new("/etc/envoy")),
            render(&b, Path::new("/etc/envoy")),
        );
        assert_eq!(ra.listeners, rb.listeners, "listeners must not drain");
        assert_eq!(ra.clusters, rb.clusters);
        for ((fa, da), (fb, db)) in ra.extensions.iter().zip(&rb.extensions) {
            assert_eq!(fa, fb);
            assert_ne!(da["version_info"], db["version_info"]);
        }
        // Same path, new bytes: the VM key (vm_config) still changes.
        let mut c = cfg();
        c.wasm_sha256 = "ef".repeat(32);
        let rc = render(&c, Path::new("/etc/envoy"));
        assert_ne!(
            extension(&ra, API_FILTER_NAME)["vm_config"],
            extension(&rc, API_FILTER_NAME)["vm_config"]
        );
    }

    #[test]
    fn native_sni_listener_has_one_chain_per_name_and_no_default() {
        let mut c = cfg();
        c.native_sni = vec![NativeSniListener {
            port: 8443,
            routes: vec![("api.c1.example.com".into(), "c1_api".into())],
        }];
        let r = render(&c, Path::new("/etc/envoy"));
        let l = &r.listeners["resources"][3];
        assert_eq!(l["name"], "native_sni_8443");
        let chains = l["filter_chains"].as_array().unwrap();
        assert_eq!(chains.len(), 1);
        assert_eq!(
            chains[0]["filter_chain_match"]["server_names"][0],
            "api.c1.example.com"
        );
        assert!(l.get("default_filter_chain").is_none());
    }

    #[test]
    fn port_80_is_plain_http_routed_by_host() {
        let mut c = cfg();
        c.tls_ports = vec![443, HTTP_HOST_PORT];
        let r = render(&c, Path::new("/etc/envoy"));
        let l = &r.listeners["resources"][1];
        assert_eq!(l["name"], "http_80");
        assert!(l.get("listener_filters").is_none(), "no TLS inspector");
        let filters = l["filter_chains"][0]["filters"].as_array().unwrap();
        assert_eq!(filters[0]["name"], network_filter_name(80));
        let tcp = &filters[2]["typed_config"];
        assert_eq!(tcp["cluster"], UNROUTED_CLUSTER);
        assert!(tcp["max_early_data_bytes"].as_u64().unwrap() as usize > HTTP_MAX_HEAD_BYTES);
        let plugin: Value = serde_json::from_str(
            extension(&r, &network_filter_name(80))["configuration"]["value"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(plugin["role"], "http");
        assert_eq!(plugin["port"], 80);
        assert_eq!(plugin["max_head_bytes"], HTTP_MAX_HEAD_BYTES);
        // The TLS listener beside it is unchanged.
        let tls = &r.listeners["resources"][0];
        assert_eq!(tls["name"], "tls_443");
        assert!(
            tls["listener_filters"][0]["name"]
                .as_str()
                .unwrap()
                .contains("tls_inspector")
        );
    }

    /// A floating VLAN address is answered as soon as it is added: every
    /// routing listener binds with IP_FREEBIND; the table API and metrics
    /// listeners (pod network only) do not.
    #[test]
    fn routing_listeners_bind_with_freebind_for_floating_addresses() {
        let mut c = cfg();
        c.tls_ports = vec![443, 6443, HTTP_HOST_PORT];
        c.metrics = Some("0.0.0.0:9102".parse().unwrap());
        let r = render(&c, Path::new("/etc/envoy"));
        let mut routing = 0;
        for l in r.listeners["resources"].as_array().unwrap() {
            let name = l["name"].as_str().unwrap();
            if name == API_LISTENER || name == METRICS_LISTENER {
                assert!(l.get("freebind").is_none(), "{name}");
            } else {
                assert_eq!(l["freebind"], true, "{name}");
                routing += 1;
            }
        }
        assert_eq!(routing, 3);
    }

    /// The filter leaves `envoy.upstream.dynamic_port` out when the upstream
    /// port is the listener's: sni_dynamic_forward_proxy must default to it.
    #[test]
    fn dynamic_forward_proxy_defaults_to_the_listener_port() {
        let mut c = cfg();
        c.tls_ports = vec![443, 6443, HTTP_HOST_PORT];
        let r = render(&c, Path::new("/etc/envoy"));
        let mut seen = 0;
        for l in r.listeners["resources"].as_array().unwrap() {
            let port = &l["address"]["socket_address"]["port_value"];
            for f in l["filter_chains"][0]["filters"].as_array().unwrap() {
                if f["name"] == "envoy.filters.network.sni_dynamic_forward_proxy" {
                    assert_eq!(&f["typed_config"]["port_value"], port, "{}", l["name"]);
                    seen += 1;
                }
            }
        }
        assert_eq!(seen, 3);
    }

    #[test]
    fn bootstrap_watches_the_config_directory() {
        let r = render(&cfg(), Path::new("/etc/envoy"));
        let lds = &r.bootstrap["dynamic_resources"]["lds_config"]["path_config_source"];
        assert_eq!(lds["path"], "/etc/envoy/lds.json");
        assert_eq!(lds["watched_directory"]["path"], "/etc/envoy");
    }
}
