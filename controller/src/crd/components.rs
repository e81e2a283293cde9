//! The derived kinds: `DHCPServer`, `DNSServer`, `ProxyServer`.
//!
//! The controller writes one of each per Infra (owned by it, named
//! `<infra>-dhcp`, `<infra>-dns`, `<infra>-proxy`), but each is complete on its
//! own: its spec carries the VLAN attachment, the image and the component's
//! whole config, and the controller derives the Deployment, ConfigMap,
//! Services and the rest from it alone.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::LocalObjectReference;
use super::pod::{DhcpKind, DnsKind, ProxyKind, ServerPod};
use super::schema::{DhcpConfigDocument, DnsConfigDocument, RoutesDocument};

/// Status shared by the DHCP and DNS servers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `Progressing`, `Degraded`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Desired replicas.
    #[serde(default)]
    pub replicas: i32,
    /// Ready replicas.
    #[serde(default)]
    pub ready_replicas: i32,
    /// SHA-256 of the rendered config file the pods run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_digest: Option<String>,
    /// DHCP servers only: the pool figures its lease inventory API last
    /// reported (the controller asks every 30 s; kept while the server does
    /// not answer). Absent until the first answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pools: Option<DhcpPoolsStatus>,
}

/// Pool figures of a DHCP server: totals over its pools, and at most 8
/// pools, the fullest first (a bounded summary: leases themselves are never
/// in a status; `oooi-controller leases` lists them).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DhcpPoolsStatus {
    /// Addresses in every pool (reservations included).
    pub total: i64,
    /// Bound to a client and not expired.
    pub assigned: i64,
    /// Offered, not yet requested.
    #[serde(default)]
    pub offered: i64,
    /// Free to give out now.
    pub free: i64,
    /// Declined, probe-conflicted or lost: out of use for a while.
    pub quarantined: i64,
    /// Reserved for known clients.
    pub reserved: i64,
    /// Held back after a pair split.
    #[serde(default)]
    pub held_back: i64,
    /// The share of the dynamic pools not free, in percent (rounded down;
    /// reservations left out, as in the conditions).
    pub utilisation_percent: i32,
    /// The pools, the fullest first, at most 8.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<DhcpPoolStatus>,
    /// Pools left out of `pools`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more_pools: i32,
    /// Refusals and silences toward clients since the server started, by
    /// reason (`probe_conflict`, `pool_exhausted`, ...; reasons never seen
    /// are absent).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub refusals: BTreeMap<String, i64>,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// Figures of one pool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DhcpPoolStatus {
    /// The range, `first-last`, or `reservations`.
    pub range: String,
    /// Addresses in it.
    pub total: i64,
    /// Bound to a client and not expired.
    pub assigned: i64,
    /// Free to give out now.
    pub free: i64,
    /// Declined, probe-conflicted or lost.
    pub quarantined: i64,
    /// Reserved for known clients.
    pub reserved: i64,
    /// The share not free, in percent (rounded down).
    pub utilisation_percent: i32,
}

/// A DHCP server on the VLAN.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "hostedcluster.densityops.com",
    version = "v1alpha1",
    kind = "DHCPServer",
    plural = "dhcpservers",
    namespaced,
    status = "ServerStatus",
    derive = "PartialEq",
    category = "oooi",
    printcolumn(name = "Address", type_ = "string", json_path = ".spec.vlan.address"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas"),
    printcolumn(
        name = "Assigned",
        type_ = "integer",
        json_path = ".status.pools.assigned"
    ),
    printcolumn(name = "Free", type_ = "integer", json_path = ".status.pools.free"),
    printcolumn(
        name = "Pool%",
        type_ = "integer",
        json_path = ".status.pools.utilisationPercent"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct DHCPServerSpec {
    /// The VLAN leg, image, resources, placement and availability.
    #[serde(flatten)]
    pub pod: ServerPod<DhcpKind>,
    /// The whole oooi-dhcp config file.
    pub config: DhcpConfigDocument,
    /// Lease volume.
    #[serde(default)]
    pub storage: LeaseStorage,
    /// Secret (key `token`) with the token the two servers of a pair
    /// present to each other; required when `config.peer` is set. Mounted
    /// where `config.peer.token_file` points.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pair_token_secret: Option<LocalObjectReference>,
    /// Secret (key `token`) with the bearer token of the server's read-only
    /// lease inventory API (port 9069, on the pod address and on the pod's
    /// loopback for port-forward). Without it the API is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory_token_secret: Option<LocalObjectReference>,
}

/// The PVC holding DHCP leases.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeaseStorage {
    /// Requested size. Default `1Gi`.
    #[serde(default = "default_storage_size")]
    #[schemars(pattern(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$"))]
    pub size: String,
    /// StorageClass. Default: the cluster default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

fn default_storage_size() -> String {
    "1Gi".to_string()
}

impl Default for LeaseStorage {
    fn default() -> Self {
        LeaseStorage {
            size: default_storage_size(),
            storage_class_name: None,
        }
    }
}

/// A split-horizon DNS server on the VLAN (and, through a ClusterIP Service,
/// on the pod network).
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "hostedcluster.densityops.com",
    version = "v1alpha1",
    kind = "DNSServer",
    plural = "dnsservers",
    namespaced,
    status = "ServerStatus",
    derive = "PartialEq",
    category = "oooi",
    printcolumn(name = "Address", type_ = "string", json_path = ".spec.vlan.address"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct DNSServerSpec {
    /// The VLAN leg, image, resources, placement and availability.
    #[serde(flatten)]
    pub pod: ServerPod<DnsKind>,
    /// The whole oooi-dns config file.
    pub config: DnsConfigDocument,
    /// Set when this server is one of several replicas of an Infra's DNS
    /// (one per VLAN address); unset for a single server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<ReplicaOf>,
}

/// The place of one server among the replicas of an Infra's component (one
/// replica per VLAN address). The replicas run on different nodes, share
/// one PodDisruptionBudget that keeps all but one available, and take a
/// change that restarts pods one at a time, in index order, each only
/// while every other replica is ready (and, for the proxy, holds the
/// current routing table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaOf {
    /// This replica's index, from 0 (the order of the Infra's `serverIPs`).
    pub index: u32,
    /// How many replicas there are.
    #[schemars(range(min = 1))]
    pub count: u32,
}

fn default_push_port() -> u16 {
    9445
}

fn default_admin_port() -> u16 {
    9901
}

fn default_connect_timeout_ms() -> u32 {
    5000
}

/// Envoy with the oooi SNI router on the VLAN.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "hostedcluster.densityops.com",
    version = "v1alpha1",
    kind = "ProxyServer",
    plural = "proxyservers",
    namespaced,
    status = "ProxyServerStatus",
    derive = "PartialEq",
    category = "oooi",
    printcolumn(name = "Address", type_ = "string", json_path = ".spec.vlan.address"),
    printcolumn(
        name = "Synced",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"RoutesSynced\")].status"
    ),
    printcolumn(
        name = "Generation",
        type_ = "integer",
        json_path = ".status.routesGeneration"
    ),
    printcolumn(name = "Filter", type_ = "string", json_path = ".status.filterBuildId"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ProxyServerSpec {
    /// The VLAN leg, image, resources, placement and availability.
    #[serde(flatten)]
    pub pod: ServerPod<ProxyKind>,
    /// TLS passthrough listener ports. Default: every port a route names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(range(min = 1, max = 65535)))]
    pub tls_ports: Vec<u16>,
    /// The routing table (without generation: the pusher numbers each push).
    #[serde(default)]
    pub routes: RoutesDocument,
    /// Port of the table push API (pod network only, token protected).
    #[serde(default = "default_push_port")]
    #[schemars(range(min = 1024, max = 65535))]
    pub push_port: u16,
    /// Envoy admin port, on loopback.
    #[serde(default = "default_admin_port")]
    #[schemars(range(min = 1024, max = 65535))]
    pub admin_port: u16,
    /// Secret (key `token`) with the bearer token a push must carry.
    pub push_token_secret: LocalObjectReference,
    /// The filter module.
    #[serde(default)]
    pub filter: FilterSource,
    /// Upstream connect timeout in milliseconds.
    #[serde(default = "default_connect_timeout_ms")]
    #[schemars(range(min = 100, max = 60_000))]
    pub connect_timeout_ms: u32,
    /// Create the internal ClusterIP Service (pod network → proxy). Default
    /// true. Of several replicas, the first makes it, for all of them.
    #[serde(default = "default_true")]
    pub internal_service: bool,
    /// Set when this proxy is one of several replicas of an Infra's proxy
    /// (one per VLAN address); unset for a single proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<ReplicaOf>,
}

fn default_true() -> bool {
    true
}

fn default_filter_config_map() -> String {
    "oooi-sni-router".to_string()
}

fn default_filter_key() -> String {
    "oooi_sni_router.wasm".to_string()
}

/// Where the filter `.wasm` comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FilterSource {
    /// ConfigMap (same namespace) with the module as binary data.
    #[serde(default = "default_filter_config_map")]
    #[schemars(length(min = 1, max = 253))]
    pub config_map: String,
    /// Key of the module in the ConfigMap.
    #[serde(default = "default_filter_key")]
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
    /// SHA-256 (hex) of the module. Envoy's VM key includes it, so a new
    /// module always changes the filter config. The controller fills it from
    /// the ConfigMap it reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^[0-9a-f]{64}$"))]
    pub sha256: Option<String>,
    /// Pins the filter module: SHA-256 (hex) of the module this proxy keeps
    /// running whatever the source ConfigMap holds. It must be the active or
    /// the previous module (see `status.filterDigest` and
    /// `status.previousFilterDigest`) or the source module; a pin to the
    /// previous one is a rollback. Remove it to follow the source again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^(sha256:)?[0-9a-f]{64}$"))]
    pub pinned_sha256: Option<String>,
}

impl Default for FilterSource {
    fn default() -> Self {
        FilterSource {
            config_map: default_filter_config_map(),
            key: default_filter_key(),
            sha256: None,
            pinned_sha256: None,
        }
    }
}

/// Observed state of a ProxyServer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProxyServerStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `RoutesSynced` (every ready replica holds the current table), `Degraded`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Desired replicas.
    #[serde(default)]
    pub replicas: i32,
    /// Ready replicas.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Generation of the table last pushed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routes_generation: Option<i64>,
    /// Digest (`sha256:…`) of the table last pushed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routes_digest: Option<String>,
    /// SHA-256 (hex) of the filter module the replicas run (the derived
    /// `<name>-filter` ConfigMap's active module).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter_digest: Option<String>,
    /// Build id stamped in the active filter module.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter_build_id: Option<String>,
    /// SHA-256 (hex) of the module that ran before the active one, kept in
    /// the derived ConfigMap for rollback (pin it to roll back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_filter_digest: Option<String>,
    /// Per-replica table sync.
    #[serde(default)]
    pub replica_status: Vec<ProxyReplicaStatus>,
}

/// One Envoy pod's table.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProxyReplicaStatus {
    /// Pod name.
    pub pod: String,
    /// Pod IP on the pod network (where the push API is).
    #[serde(default, rename = "podIP", skip_serializing_if = "Option::is_none")]
    pub pod_ip: Option<String>,
    /// The pod holds the current table (generation and digest read back).
    pub routes_synced: bool,
    /// Generation read back from the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// Digest read back from the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Last successful push.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_push_time: Option<Time>,
    /// Last push error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
