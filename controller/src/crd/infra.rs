//! `Infra`: one VLAN stack.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use oooi_vocabulary::{IpAddress, VlanNetwork};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::ReplicaCounts;
use super::pod::{ComponentPod, DhcpKind, DnsKind, ProxyKind};

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
        name = "Assigned",
        type_ = "integer",
        json_path = ".status.dhcpPools.assigned"
    ),
    printcolumn(name = "Free", type_ = "integer", json_path = ".status.dhcpPools.free"),
    printcolumn(
        name = "Pool%",
        type_ = "integer",
        json_path = ".status.dhcpPools.utilisationPercent"
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
    /// Not supported here: apps ingress is per hosted cluster. Write it as
    /// `spec.appsIngress` of that cluster's InfraClusterAttachment; an Infra
    /// that sets it is reported invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "legacy_object")]
    pub apps_ingress: Option<serde_json::Value>,
    /// How the component pods ride out a lost node.
    #[serde(default, skip_serializing_if = "Availability::is_default")]
    pub availability: Availability,
}

/// How the VLAN services ride out lost nodes and pods.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Availability {
    /// Seconds the DHCP, DNS and proxy pods stay bound to a node that is
    /// unreachable or not ready before Kubernetes evicts and replaces them
    /// (their tolerations of `node.kubernetes.io/unreachable` and
    /// `node.kubernetes.io/not-ready`). Default 15; Kubernetes' own default
    /// is 300.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 3600))]
    pub node_loss_toleration_seconds: Option<u32>,
    /// Whether a live DNS or proxy replica takes over the VLAN address of a
    /// lost one. `Auto` (default): `AddressTakeover` on a
    /// NetworkAttachmentDefinition (a Linux bridge or macvlan lets a pod
    /// announce another address), `Off` on a ClusterUserDefinedNetwork
    /// (OVN-Kubernetes localnet enforces port security, so no pod can take
    /// another's address). `AddressTakeover`: an address agent beside each
    /// DNS and proxy replica (its own container with NET_ADMIN and NET_RAW)
    /// moves the addresses between ready replicas, fenced by one Lease per
    /// address. `Off`: every address stays with its own replica; health
    /// checked DNS answers and short node-loss tolerations carry a loss.
    /// Set `Off` for a NetworkAttachmentDefinition of type
    /// `ovn-k8s-cni-overlay`. `status.failover` says what an Infra runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<FailoverMode>,
}

/// How the VLAN addresses of a lost DNS or proxy replica are served.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum FailoverMode {
    /// `AddressTakeover` on a NetworkAttachmentDefinition, `Off` on a
    /// ClusterUserDefinedNetwork.
    #[default]
    Auto,
    /// A live replica takes over the address of a lost one.
    AddressTakeover,
    /// Addresses stay with their replica.
    Off,
}

impl Availability {
    fn is_default(&self) -> bool {
        *self == Availability::default()
    }
}

/// The VLAN network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkConfig {
    /// IPv4 network of the VLAN in CIDR form, in network form (no host
    /// bits) with a prefix of /29 or shorter, e.g. `192.0.2.0/24`.
    pub cidr: VlanNetwork,
    /// Default gateway of the VLAN, handed out by DHCP; must be a host
    /// address of `cidr`. Default: the first host of `cidr` (`.1` of a /24).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<IpAddress>,
    /// Name of the Multus NetworkAttachmentDefinition of the VLAN. Its IPAM
    /// must accept static addresses (the `ips` key of the network annotation).
    /// Set exactly one of this and `clusterUserDefinedNetwork`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), pattern(concat!("^", dns_subdomain_re!(), "$")))]
    pub network_attachment_definition: Option<String>,
    /// Namespace of the NetworkAttachmentDefinition. Default: the Infra's
    /// namespace. Not allowed with `clusterUserDefinedNetwork`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(concat!("^", dns_label_re!(), "$")))]
    pub network_attachment_namespace: Option<String>,
    /// The VLAN as an OVN-Kubernetes ClusterUserDefinedNetwork
    /// (`k8s.ovn.org/v1`) with a localnet topology, instead of a
    /// NetworkAttachmentDefinition. OVN-Kubernetes makes a
    /// NetworkAttachmentDefinition named after it in every namespace it
    /// selects; the components attach to the one in the Infra's namespace.
    /// Set exactly one of this and `networkAttachmentDefinition`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_user_defined_network: Option<ClusterUserDefinedNetworkConfig>,
    /// Upstream resolvers for every name oooi does not answer itself, as
    /// `ip` or `ip:port`, tried in order; `resolv.conf` stands for the
    /// resolvers of the DNS pod's own `/etc/resolv.conf` (the management
    /// cluster's DNS), in their place in the list. Handed to workers through
    /// DHCP only indirectly: workers use oooi-dns, which forwards here.
    /// Empty: nothing is forwarded (every name oooi does not own is answered
    /// SERVFAIL), which the Infra reports as `NoUpstreams`.
    #[serde(default)]
    #[schemars(schema_with = "dns_servers_schema")]
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

/// The VLAN as an OVN-Kubernetes ClusterUserDefinedNetwork.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterUserDefinedNetworkConfig {
    /// Name of the ClusterUserDefinedNetwork (cluster-scoped), and so of the
    /// NetworkAttachmentDefinition OVN-Kubernetes makes in the Infra's
    /// namespace.
    #[schemars(length(min = 1, max = 253), pattern(concat!("^", dns_subdomain_re!(), "$")))]
    pub name: String,
    /// Set: the controller creates the ClusterUserDefinedNetwork with this
    /// localnet topology, selecting the Infra's namespace, keeps it as
    /// written here and deletes it with the Infra. Unset: the network exists
    /// already (made by the cluster administrator) and must select the
    /// Infra's namespace; the controller never writes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub localnet: Option<LocalnetConfig>,
}

/// A localnet topology: the VLAN on a physical network of the nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalnetConfig {
    /// The physical network of the nodes (the bridge mapping of the OVS
    /// bridge the VLAN leaves on), `physicalNetworkName` of the localnet.
    #[schemars(length(min = 1, max = 253))]
    pub physical_network_name: String,
    /// VLAN id, in access mode. Unset: untagged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 4094))]
    pub vlan_id: Option<u16>,
    /// MTU of the network. Default: `networkConfig.mtu` when set, else
    /// OVN-Kubernetes' default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 576, max = 65536))]
    pub mtu: Option<u32>,
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

/// The `dnsServers` entry that stands for the DNS pod's own resolvers.
pub const RESOLV_CONF: &str = "resolv.conf";

/// `networkConfig.dnsServers`: each an address of either family by the
/// API server's own formats, `resolv.conf`, or an address with a port (a
/// form no format says: `a.b.c.d:port`, `[v6]:port`). The controller reads
/// each with the DNS server's own rule and names the entry it refuses.
fn dns_servers_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": {
            "type": "string",
            // `[` + the longest address + `]:65535`.
            "maxLength": oooi_vocabulary::MAX_ADDRESS_LEN + 8,
            "anyOf": [
                {"format": "ipv4"},
                {"format": "ipv6"},
                {"enum": [RESOLV_CONF]},
                {"pattern": concat!("^", ipv4_re!(), ":[0-9]{1,5}$")},
                {"pattern": r"^\[[0-9a-fA-F:.]+\]:[0-9]{1,5}$"},
            ],
        },
    })
}

/// Any object, kept as written, for fields oooi reads only to refuse them
/// with a pointer to their replacement.
fn legacy_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

fn default_true() -> bool {
    true
}

fn default_lease_time() -> LeaseTime {
    LeaseTime::Seconds(3600)
}

/// Shortest lease, in seconds.
pub const MIN_LEASE_SECONDS: u32 = 60;
/// Longest lease, in seconds (a year).
pub const MAX_LEASE_SECONDS: u32 = 31_536_000;

/// A lease time: seconds (`3600`) or a duration (`"1h"`, `"30m"`,
/// `"1h30m"`, `"90s"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum LeaseTime {
    /// Whole seconds.
    Seconds(u32),
    /// A duration of hours, minutes and seconds, or a number of seconds.
    Duration(String),
}

impl LeaseTime {
    /// The lease in seconds, within [`MIN_LEASE_SECONDS`]..=[`MAX_LEASE_SECONDS`];
    /// the error says what is wrong with the value.
    pub fn seconds(&self) -> Result<u32, String> {
        let secs = match self {
            LeaseTime::Seconds(s) => u64::from(*s),
            LeaseTime::Duration(text) => parse_duration(text).ok_or_else(|| {
                format!(
                    "`{text}` is neither a number of seconds nor a duration such as `1h`, `30m` or `1h30m`"
                )
            })?,
        };
        match u32::try_from(secs) {
            Ok(s) if (MIN_LEASE_SECONDS..=MAX_LEASE_SECONDS).contains(&s) => Ok(s),
            _ => Err(format!(
                "{secs} seconds is outside {MIN_LEASE_SECONDS}..={MAX_LEASE_SECONDS}"
            )),
        }
    }
}

/// `3600` (the field's own form: a number of seconds) or a duration in
/// oooi's one syntax ([`oooi_process::duration`]: `1h`, `30m`, `1h30m`,
/// `90s`, `2h0m10s`) of whole seconds.
fn parse_duration(text: &str) -> Option<u64> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().ok();
    }
    let d = oooi_process::duration::parse(text).ok()?;
    (d.subsec_nanos() == 0).then_some(d.as_secs())
}

impl JsonSchema for LeaseTime {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "LeaseTime".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        // As Kubernetes' own IntOrString: any integer or string passes the
        // API server; the planner checks the value and names the field.
        // Not nullable: the API server prunes a null, and the default applies.
        schemars::json_schema!({
            "x-kubernetes-int-or-string": true,
            "nullable": false,
        })
    }
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
    #[serde(rename = "serverIP", default, skip_serializing_if = "Option::is_none")]
    pub server_ip: Option<IpAddress>,
    /// Static VLAN addresses of the DHCP servers (inside the CIDR), one
    /// server per address. Two addresses make a pair: each server runs on
    /// its own node with its own lease volume, both hold every reservation,
    /// the pool is split between them by a hash of the client (RFC 3074),
    /// every lease is stored on both before it is acknowledged, and either
    /// serves the whole pool while the other is down. Set this or
    /// `serverIP`, not both.
    #[serde(rename = "serverIPs", default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 2))]
    pub server_ips: Vec<IpAddress>,
    /// First address of the dynamic pool (inside the CIDR).
    pub range_start: IpAddress,
    /// Last address of the dynamic pool, inclusive (inside the CIDR, not before rangeStart).
    pub range_end: IpAddress,
    /// Lease time: seconds (`3600`) or a duration (`1h`, `30m`, `1h30m`),
    /// between 60 s and a year. Default 3600 (one hour).
    #[serde(default = "default_lease_time")]
    pub lease_time: LeaseTime,
    /// Which DHCP clients get an address besides the worker VMs of the
    /// attached clusters (reserved or known by their VMI's MAC, with the VMI
    /// name as host name). `Pool` (default): any client gets a pool lease,
    /// so a VM whose VMI the controller cannot see (no KubeVirt access, or
    /// not yet observed) still boots, as does any other machine on the VLAN.
    /// `Ignore`: only MACs of known VMIs get an address, so nothing else on
    /// the VLAN can take pool addresses, at the cost that a worker gets no
    /// answer until the controller has seen its VMI.
    #[serde(default)]
    pub unknown_clients: UnknownClients,
    /// Image, resources and placement of the pods.
    #[serde(flatten)]
    pub pod: ComponentPod<DhcpKind>,
    /// Size of the lease volume. Default `1Gi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_size: Option<String>,
    /// StorageClass of the lease volume. Default: the cluster default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

/// What the DHCP server gives a client whose MAC is no known VMI's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum UnknownClients {
    /// A lease from the pool.
    #[default]
    Pool,
    /// No answer.
    Ignore,
}

/// DNS settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DnsComponent {
    /// Run the DNS server. Default true.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Static VLAN address of the DNS server (inside the CIDR), handed out
    /// by DHCP: the one-replica form of `serverIPs`. Set this or
    /// `serverIPs`, not both.
    #[serde(rename = "serverIP", default, skip_serializing_if = "Option::is_none")]
    pub server_ip: Option<IpAddress>,
    /// Static VLAN addresses of the DNS replicas (inside the CIDR), one
    /// replica per address, each on its own node. DHCP hands out every
    /// address (option 6) in this order, so a worker's resolver tries the
    /// next one while a replica is down. Set this or `serverIP`, not both.
    #[serde(rename = "serverIPs", default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 5))]
    pub server_ips: Vec<IpAddress>,
    /// Image, resources and placement of the pods.
    #[serde(flatten)]
    pub pod: ComponentPod<DnsKind>,
    /// Ignored: a hosted cluster's names come from its InfraClusterAttachment
    /// (`spec.dns.clusterName`). Reported in the `LegacyFieldsIgnored` condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,
    /// Ignored: a hosted cluster's names come from its InfraClusterAttachment
    /// (`spec.dns.baseDomain`). Reported in the `LegacyFieldsIgnored` condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_domain: Option<String>,
}

/// Proxy (Envoy) settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProxyComponent {
    /// Run the proxy. Default true.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Static VLAN address of Envoy (inside the CIDR); every control-plane
    /// name resolves to it on the VLAN: the one-replica form of
    /// `serverIPs`. Set this or `serverIPs`, not both.
    #[serde(rename = "serverIP", default, skip_serializing_if = "Option::is_none")]
    pub server_ip: Option<IpAddress>,
    /// Static VLAN addresses of the Envoy replicas (inside the CIDR), one
    /// replica per address, each on its own node and each holding the same
    /// routing table. On the VLAN every control-plane name resolves to all
    /// of them in this order, so a client that fails to connect to one
    /// tries the next. Set this or `serverIP`, not both.
    #[serde(rename = "serverIPs", default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 5))]
    pub server_ips: Vec<IpAddress>,
    /// How pods on the pod network reach the proxy: a Service DNS name
    /// (`name.namespace.svc[.cluster.local]`) or a ClusterIP. When set, the
    /// DNS pod view answers every control-plane name of the attached
    /// clusters (`api`, `api-int`, `oauth`, `ignition`, `konnectivity`, and
    /// `*.apps` where the attachment publishes it to pods) with its address;
    /// the proxy's own Service is `<infra>-proxy.<namespace>.svc`. Unset:
    /// the pod view answers none of them (they are forwarded upstream). The
    /// `kubernetes` aliases are never answered in the pod view.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub internal_proxy_service: Option<String>,
    /// Image, resources and placement of the pods.
    #[serde(flatten)]
    pub pod: ComponentPod<ProxyKind>,
    /// Ignored: each hosted cluster's control-plane namespace comes from its
    /// InfraClusterAttachment (`spec.controlPlaneNamespace`, default
    /// `<namespace>-<name>` of the HostedCluster). Reported in the
    /// `LegacyFieldsIgnored` condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_namespace: Option<String>,
    /// Ignored: the kube-apiserver Service is named per cluster in its
    /// InfraClusterAttachment (`spec.services`). Reported in the
    /// `LegacyFieldsIgnored` condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_server_service: Option<String>,
    /// Ignored: the proxy has no xDS manager container; the controller pushes
    /// routes to Envoy itself. Reported in the `LegacyFieldsIgnored` condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manager_image: Option<String>,
    /// Not supported: the proxy needs Envoy 1.40 with the V8 wasm runtime.
    /// Write `image` instead (the oooi-proxy image, or unset for the
    /// chart's); an Infra that sets `proxyImage` is reported invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_image: Option<String>,
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
    /// The failover the DNS and proxy replicas run, resolved from
    /// `spec.availability.failover`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<FailoverStatus>,
    /// The DHCP pool figures of the fullest of the Infra's DHCP servers
    /// (the two servers of a pair serve one pool, so their figures are
    /// not added up). Absent until a server's inventory answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhcp_pools: Option<super::DhcpPoolsStatus>,
}

/// The failover an Infra runs and what a lost replica costs there.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailoverStatus {
    /// `AddressTakeover` or `Off` (never `Auto`).
    pub mode: String,
    /// Why this mode, and what a node loss costs the workers in it.
    pub message: String,
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
    /// Desired and ready replicas.
    #[serde(flatten)]
    pub counts: ReplicaCounts,
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
