//! `InfraClusterAttachment`: binds one HostedCluster to one Infra.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::LocalObjectReference;

/// Attaches one HostedCluster to an Infra: its names, the control-plane
/// services reachable through the proxy, apps ingress and isolation.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "hostedcluster.densityops.com",
    version = "v1alpha1",
    kind = "InfraClusterAttachment",
    plural = "infraclusterattachments",
    shortname = "ica",
    namespaced,
    status = "InfraClusterAttachmentStatus",
    derive = "PartialEq",
    category = "oooi",
    printcolumn(name = "Infra", type_ = "string", json_path = ".spec.infraRef.name"),
    printcolumn(
        name = "HostedCluster",
        type_ = "string",
        json_path = ".spec.hostedClusterRef.name"
    ),
    printcolumn(name = "Domain", type_ = "string", json_path = ".status.domain"),
    printcolumn(
        name = "Accepted",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Accepted\")].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        priority = "1",
        json_path = ".status.conditions[?(@.type==\"Accepted\")].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct InfraClusterAttachmentSpec {
    /// The Infra (same namespace) this cluster joins.
    pub infra_ref: LocalObjectReference,
    /// The HostedCluster.
    pub hosted_cluster_ref: HostedClusterRef,
    /// Names of the cluster: everything lives under `<clusterName>.<baseDomain>`.
    pub dns: ClusterDns,
    /// Namespace of the hosted control plane. Default `<hc-namespace>-<hc-name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(concat!("^", dns_label_re!(), "$")))]
    pub control_plane_namespace: Option<String>,
    /// Control-plane services reachable through the proxy. Default (HyperShift):
    /// `api` and `api-int` on 6443 to `kube-apiserver:6443`; `oauth` on 443 to
    /// `oauth-openshift:6443`; `ignition` on 443 to `ignition-server-proxy:443`;
    /// `konnectivity` on 443 to `konnectivity-server:8091`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub services: Option<Vec<ExposedService>>,
    /// Apps ingress (`*.apps`) through MetalLB in the hosted cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apps_ingress: Option<AppsIngress>,
    /// How far the proxy scopes this cluster's routes to its own workers.
    #[serde(default)]
    pub isolation: Isolation,
    /// Public DNS for the OAuth (and optionally API) names: a LoadBalancer
    /// Service in the management cluster in front of the Infra's Envoy pods,
    /// annotated for ExternalDNS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_dns: Option<PublicDns>,
}

fn default_hc_namespace() -> String {
    "clusters".to_string()
}

/// Names a HostedCluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostedClusterRef {
    /// Name of the HostedCluster.
    #[schemars(length(min = 1, max = 63), pattern(concat!("^", dns_label_re!(), "$")))]
    pub name: String,
    /// Namespace of the HostedCluster. Default `clusters`.
    #[serde(default = "default_hc_namespace")]
    #[schemars(length(min = 1, max = 63), pattern(concat!("^", dns_label_re!(), "$")))]
    pub namespace: String,
}

/// The cluster's DNS names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterDns {
    /// Cluster name: the first label of the cluster domain.
    #[schemars(length(min = 1, max = 63), pattern(concat!("^", dns_label_re!(), "$")))]
    pub cluster_name: String,
    /// Base domain, e.g. `example.com`.
    #[schemars(length(min = 1, max = 253), pattern(concat!("^", dns_subdomain_re!(), "$")))]
    pub base_domain: String,
}

/// One control-plane service reachable through the proxy by SNI.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExposedService {
    /// DNS label under the cluster domain (`api` → `api.<cluster>.<base>`);
    /// published in DNS on the VLAN and used as SNI.
    #[schemars(length(min = 1, max = 63), pattern(concat!("^", dns_label_re!(), "$")))]
    pub name: String,
    /// Full SNI name when it is not `<name>.<cluster domain>` (not published in DNS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), pattern(concat!("^", dns_subdomain_re!(), "$")))]
    pub sni: Option<String>,
    /// Proxy listener port.
    #[schemars(range(min = 1, max = 65535))]
    pub port: u16,
    /// Service in the control-plane namespace.
    #[schemars(length(min = 1, max = 63), pattern(concat!("^", dns_label_re!(), "$")))]
    pub target_service: String,
    /// Port of that Service.
    #[schemars(range(min = 1, max = 65535))]
    pub target_port: u16,
}

/// Route scoping between hosted clusters on one VLAN.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Isolation {
    /// Kubernetes-service aliases and the no-SNI 6443 path are routed by
    /// worker source address; FQDN routes (`api`, `oauth`, …) accept any source.
    #[default]
    Standard,
    /// Also limits the FQDN routes to this cluster's worker addresses once
    /// they are known. Source addresses are routing, not authentication.
    Strict,
}

/// Apps ingress settings: a MetalLB VIP in the hosted cluster in
/// front of an IngressController, published in DNS and routed by the proxy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppsIngress {
    /// Manage apps ingress for this cluster. Default false.
    #[serde(default)]
    pub enabled: bool,
    /// MetalLB in the hosted cluster.
    #[serde(default)]
    pub metallb: MetalLbSettings,
    /// IngressController in the hosted cluster (namespace
    /// `openshift-ingress-operator`). Default `default`.
    #[serde(default = "default_ingress_controller")]
    #[schemars(length(min = 1, max = 253))]
    pub ingress_controller: String,
    /// The LoadBalancer Service oooi creates in front of the router pods.
    #[serde(default)]
    pub service: AppsService,
    /// Publish the apps VIP to pods on the management cluster's pod network
    /// through the DNS pod view (`*.apps` → internal proxy). Default false.
    #[serde(default)]
    pub publish_to_pod_network: bool,
}

fn default_ingress_controller() -> String {
    "default".to_string()
}

/// How MetalLB gets into the hosted cluster.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum MetalLbMode {
    /// oooi installs MetalLB through OLM (Subscription and `MetalLB` CR).
    Managed,
    /// MetalLB is already installed.
    #[default]
    External,
}

/// MetalLB settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetalLbSettings {
    /// `Managed` or `External` (default).
    #[serde(default)]
    pub mode: MetalLbMode,
    /// Address ranges of the IPAddressPool: `a.b.c.d-e.f.g.h` or a CIDR.
    /// Inside the Infra CIDR, outside the DHCP pool and the infra addresses,
    /// disjoint from other attachments.
    #[serde(default)]
    #[schemars(inner(pattern(concat!(
        "^", ipv4_re!(), "(/([0-9]|[12][0-9]|3[0-2])|-", ipv4_re!(), ")$"
    ))))]
    pub addresses: Vec<String>,
    /// Name of the IPAddressPool and L2Advertisement. Default `oooi-apps`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(concat!("^", dns_label_re!(), "$")))]
    pub pool_name: Option<String>,
    /// Namespace of MetalLB in the hosted cluster. Default `metallb-system`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(concat!("^", dns_label_re!(), "$")))]
    pub namespace: Option<String>,
    /// OLM channel (Managed mode). Default `stable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// OLM catalog source (Managed mode). Default `redhat-operators`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catalog_source: Option<String>,
}

/// The apps LoadBalancer Service in the hosted cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppsService {
    /// Name. Default `oooi-apps-ingress`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(concat!("^", dns_label_re!(), "$")))]
    pub name: Option<String>,
    /// Namespace. Default `openshift-ingress`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(concat!("^", dns_label_re!(), "$")))]
    pub namespace: Option<String>,
    /// Ports. Default 80 (`http`) and 443 (`https`) to the router's same ports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<AppsServicePort>>,
    /// Extra labels (e.g. for ExternalDNS). Foreign keys are preserved.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Extra annotations (e.g. `external-dns.alpha.kubernetes.io/ttl`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Annotate the Service with `external-dns.alpha.kubernetes.io/hostname:
    /// *.apps.<domain>`, so an ExternalDNS in the hosted cluster publishes
    /// the apps wildcard at the VIP. Default false.
    #[serde(default)]
    pub external_dns_hostname: bool,
}

/// Public DNS publishing of the OAuth (and optionally API) names through a
/// LoadBalancer Service in the management cluster, in the Infra's namespace,
/// selecting that Infra's Envoy pods and exposing only 443. ExternalDNS in the
/// management cluster publishes the names in its hostname annotation at the
/// Service's load-balancer address.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PublicDns {
    /// Create the Service. Default false.
    #[serde(default)]
    pub enabled: bool,
    /// Service name. Default `oooi-public-<attachment>`. Attachments of the
    /// same Infra naming the same Service share it: its hostname annotation
    /// lists all their names, sorted and deduplicated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(concat!("^", dns_label_re!(), "$")))]
    pub service_name: Option<String>,
    /// Also publish `api.<domain>` (clients then reach the API on 443, which
    /// needs an `api` service on port 443 in `spec.services`). Default false.
    #[serde(default)]
    pub publish_api: bool,
    /// Extra labels on the Service (e.g. an ExternalDNS label filter).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Extra annotations on the Service (e.g. `external-dns.alpha.kubernetes.io/ttl`).
    /// The hostname annotation is managed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// One port of the apps Service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppsServicePort {
    /// Port name.
    #[schemars(length(min = 1, max = 15))]
    pub name: String,
    /// Service port.
    #[schemars(range(min = 1, max = 65535))]
    pub port: u16,
    /// Router container port. Default: `port`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub target_port: Option<u16>,
}

/// Observed state of an attachment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InfraClusterAttachmentStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Accepted` (in its Infra's routes, DNS and DHCP; the reason names a
    /// conflict), `Ready`, `Degraded`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The cluster domain, `<clusterName>.<baseDomain>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// Resolved control-plane namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_namespace: Option<String>,
    /// Worker source addresses in use for source-scoped routes.
    #[serde(default)]
    pub worker_addresses: Vec<String>,
    /// Worker addresses also claimed by another attachment: their alias
    /// routes are dropped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicting_addresses: Vec<String>,
    /// Apps ingress progress; absent while apps ingress is off.
    // Serialized as `null` when off, so a merge patch of the status removes it.
    #[serde(default)]
    pub apps_ingress: Option<AppsIngressStatus>,
}

/// Apps ingress progress.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppsIngressStatus {
    /// `Pending`, `Ready` or `Degraded`.
    #[serde(default)]
    pub phase: String,
    /// Why, in one CamelCase word (e.g. `WaitingForVIP`, `PoolConflict`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The VIP MetalLB assigned to the apps Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vip: Option<String>,
}

/// The HyperShift control-plane services exposed when `services` is not set:
/// (name, listener port, target Service, target port).
pub const DEFAULT_SERVICES: [(&str, u16, &str, u16); 5] = [
    ("api", 6443, "kube-apiserver", 6443),
    ("api-int", 6443, "kube-apiserver", 6443),
    ("oauth", 443, "oauth-openshift", 6443),
    ("ignition", 443, "ignition-server-proxy", 443),
    ("konnectivity", 443, "konnectivity-server", 8091),
];

impl InfraClusterAttachmentSpec {
    /// The cluster domain `<clusterName>.<baseDomain>`, lower case, without a trailing dot.
    pub fn domain(&self) -> String {
        format!(
            "{}.{}",
            self.dns.cluster_name.trim(),
            self.dns.base_domain.trim().trim_end_matches('.')
        )
        .to_ascii_lowercase()
    }

    /// The control-plane namespace: explicit, or `<hc-namespace>-<hc-name>`.
    pub fn control_plane_namespace(&self) -> String {
        self.control_plane_namespace.clone().unwrap_or_else(|| {
            format!(
                "{}-{}",
                self.hosted_cluster_ref.namespace, self.hosted_cluster_ref.name
            )
        })
    }

    /// The services to expose: explicit, or [`DEFAULT_SERVICES`].
    pub fn services_or_default(&self) -> Vec<ExposedService> {
        match &self.services {
            Some(s) => s.clone(),
            None => DEFAULT_SERVICES
                .iter()
                .map(|&(name, port, target, target_port)| ExposedService {
                    name: name.to_string(),
                    sni: None,
                    port,
                    target_service: target.to_string(),
                    target_port,
                })
                .collect(),
        }
    }
}
