//! `Infra`: one VLAN stack.

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The shared VLAN stack: network, the three components and their images.
/// DHCPServer, DNSServer and ProxyServer objects are derived from it and its
/// InfraClusterAttachments.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "hostedcluster.densityops.com",
    version = "v1alpha1",
    kind = "Infra",
    plural = "infras",
    namespaced,
    status = "InfraStatus",
    derive = "PartialEq",
    category = "oooi",
    printcolumn(
        name = "CIDR",
        type_ = "string",
        json_path = ".spec.networkConfig.cidr"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Attachments",
        type_ = "integer",
        json_path = ".status.attachments.accepted"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        priority = "1",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct InfraSpec {
    /// The VLAN.
    pub network_config: NetworkConfig,
    /// DHCP, DNS and proxy on the VLAN.
    pub infra_components: InfraComponents,
}

/// The VLAN network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkConfig {
    /// IPv4 network of the VLAN in CIDR form, e.g. `192.0.2.0/24`.
    #[schemars(pattern(concat!("^", ipv4_re!(), "/([0-9]|[12][0-9]|3[0-2])$")))]
    pub cidr: String,
    /// Default gateway of the VLAN; must lie inside `cidr`.
    #[schemars(pattern(concat!("^", ipv4_re!(), "$")))]
    pub gateway: String,
    /// Name of the Multus NetworkAttachmentDefinition of the VLAN. Its IPAM
    /// must accept static addresses (the `ips` key of the network annotation).
    #[schemars(length(min = 1, max = 253), pattern(concat!("^", dns_subdomain_re!(), "$")))]
    pub network_attachment_definition: String,
    /// Namespace of the NetworkAttachmentDefinition. Default: the Infra's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(concat!("^", dns_label_re!(), "$")))]
    pub network_attachment_namespace: Option<String>,
    /// Upstream resolvers for every name oooi does not answer itself, as
    /// `ip` or `ip:port`, tried in order. Handed to workers through DHCP only
    /// indirectly: workers use oooi-dns, which forwards here.
    #[serde(default)]
    #[schemars(inner(pattern(concat!("^", ipv4_re!(), "(:[0-9]{1,5})?$"))))]
    pub dns_servers: Vec<String>,
    /// Search domain handed out by DHCP (option 15).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), pattern(concat!("^", dns_subdomain_re!(), "$")))]
    pub domain: Option<String>,
    /// MTU handed out by DHCP (option 26).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 68, max = 9216))]
    pub mtu: Option<u16>,
}

/// The three components.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InfraComponents {
    /// DHCP server for the worker VMs.
    pub dhcp: DhcpComponent,
    /// Split-horizon DNS server.
    pub dns: DnsComponent,
    /// Envoy with the oooi SNI router.
    pub proxy: ProxyComponent,
}

fn default_true() -> bool {
    true
}

fn default_lease_time() -> u32 {
    3600
}

/// DHCP settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DhcpComponent {
    /// Run the DHCP server. Default true.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Static VLAN address of the DHCP server (inside the CIDR): the
    /// one-server form of `serverIPs`. Set this or `serverIPs`, not both.
    #[schemars(pattern(concat!("^", ipv4_re!(), "$")))]
    #[serde(rename = "serverIP", default, skip_serializing_if = "Option::is_none")]
    pub server_ip: Option<String>,
    /// Static VLAN addresses of the DHCP servers (inside the CIDR), one
    /// server per address. Two addresses make a pair: each server runs on
    /// its own node with its own lease volume, both hold every reservation,
    /// the pool is split between them by a hash of the client (RFC 3074),
    /// every lease is stored on both before it is acknowledged, and either
    /// serves the whole pool while the other is down. Set this or
    /// `serverIP`, not both.
    #[serde(rename = "serverIPs", default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 2), inner(pattern(concat!("^", ipv4_re!(), "$"))))]
    pub server_ips: Vec<String>,
    /// First address of the dynamic pool (inside the CIDR).
    #[schemars(pattern(concat!("^", ipv4_re!(), "$")))]
    pub range_start: String,
    /// Last address of the dynamic pool, inclusive (inside the CIDR, not before rangeStart).
    #[schemars(pattern(concat!("^", ipv4_re!(), "$")))]
    pub range_end: String,
    /// Lease time in seconds. Default 3600.
    #[serde(default = "default_lease_time")]
    #[schemars(range(min = 60, max = 31_536_000))]
    pub lease_time: u32,
    /// Container image of oooi-dhcp. Default: the controller's
    /// (`--dhcp-image`; the chart sets it from `images.dhcp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub image: Option<String>,
    /// Compute resources. Default: requests 10m CPU / 32Mi, limit 128Mi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Size of the lease volume. Default `1Gi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_size: Option<String>,
    /// StorageClass of the lease volume. Default: the cluster default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

/// DNS settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DnsComponent {
    /// Run the DNS server. Default true.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Static VLAN address of the DNS server (inside the CIDR); handed out by DHCP.
    #[schemars(pattern(concat!("^", ipv4_re!(), "$")))]
    #[serde(rename = "serverIP")]
    pub server_ip: String,
    /// Container image of oooi-dns. Default: the controller's
    /// (`--dns-image`; the chart sets it from `images.dns`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub image: Option<String>,
    /// Compute resources. Default: requests 10m CPU / 32Mi, limit 256Mi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
}

/// Proxy (Envoy) settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProxyComponent {
    /// Run the proxy. Default true.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Static VLAN address of Envoy (inside the CIDR); every control-plane
    /// name resolves to it on the VLAN.
    #[schemars(pattern(concat!("^", ipv4_re!(), "$")))]
    #[serde(rename = "serverIP")]
    pub server_ip: String,
    /// How pods on the pod network reach the proxy: a Service DNS name
    /// (`name.namespace.svc[.cluster.local]`) or a ClusterIP. The DNS pod view
    /// answers the `kubernetes` aliases with its address. Default: the
    /// proxy's own internal ClusterIP Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub internal_proxy_service: Option<String>,
    /// Container image of Envoy (1.40 with the V8 wasm runtime). Default:
    /// the controller's (`--proxy-image`; the chart sets it from
    /// `images.proxy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub image: Option<String>,
    /// Compute resources. Default: requests 50m CPU / 128Mi, limit 512Mi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
}

/// Observed state of an Infra.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InfraStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `Progressing`, `Degraded` (the reason names the field or the
    /// component at fault).
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Readiness per component, from the real Deployments.
    #[serde(default)]
    pub components: ComponentsStatus,
    /// Attachment totals.
    #[serde(default)]
    pub attachments: AttachmentTotals,
}

/// Readiness of each component.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComponentsStatus {
    /// DHCP server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhcp: Option<ComponentStatus>,
    /// DNS server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<ComponentStatus>,
    /// Proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ComponentStatus>,
}

/// Readiness of one component's Deployment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComponentStatus {
    /// Whether the component is enabled in the spec.
    pub enabled: bool,
    /// All desired replicas are ready and up to date.
    pub ready: bool,
    /// Desired replicas.
    #[serde(default)]
    pub replicas: i32,
    /// Ready replicas.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Why it is not ready, when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// How many attachments reference the Infra, and how many are in use.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttachmentTotals {
    /// Attachments whose `infraRef` names this Infra.
    pub total: u32,
    /// Attachments in the routes, DNS and DHCP config.
    pub accepted: u32,
    /// Attachments left out (conflict or invalid spec); see their conditions.
    pub excluded: u32,
}
