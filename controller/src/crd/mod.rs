//! The custom resources of oooi (group `hostedcluster.densityops.com`,
//! version `v1alpha1`), all namespaced with a status subresource.
//!
//! - [`Infra`]: one VLAN stack (CIDR, gateway, NAD, upstream resolvers, the
//!   three components with their static addresses and images).
//! - [`InfraClusterAttachment`] (`ica`): binds one HostedCluster to an Infra.
//! - [`DHCPServer`], [`DNSServer`], [`ProxyServer`]: derived from an Infra and
//!   its attachments (owned by the Infra), each holding its component's whole
//!   desired config, and usable on their own.
//!
//! The CRD YAML in `charts/oooi/crds/` is generated from these types by
//! [`crds_yaml`] (`oooi-controller crds`); a test fails when it drifts.
//!
//! Schema validation covers what one field can say (patterns, ranges,
//! required fields). Cross-field rules (addresses inside the CIDR, pool
//! excluding infra addresses, disjoint ranges) are checked by the planner
//! and reported as conditions naming the field.

// kube's `printcolumn(...)` repeats `type_ = …` per column, which clippy
// mistakes for duplicated attributes.
#![allow(clippy::duplicated_attributes)]

// Regular expressions for the schemas, as macros so `concat!` can build
// patterns from them at compile time.
macro_rules! ipv4_re {
    () => {
        r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}"
    };
}
macro_rules! dns_label_re {
    () => {
        r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
    };
}
macro_rules! dns_subdomain_re {
    () => {
        r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
    };
}

mod attachment;
mod components;
mod infra;
pub mod pod;
mod schema;
pub mod strict;

pub use attachment::*;
pub use components::*;
pub use infra::*;
pub use pod::*;
pub use schema::{DhcpConfigDocument, DnsConfigDocument, RoutesDocument};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde::{Deserialize, Serialize};

/// The API group of every oooi kind.
pub const GROUP: &str = "hostedcluster.densityops.com";
/// The API version of every oooi kind.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of every oooi object.
pub const API_VERSION: &str = "hostedcluster.densityops.com/v1alpha1";
/// Finalizer on Infras and attachments, for cleanup garbage collection cannot do.
pub const FINALIZER: &str = oooi_vocabulary::labels::FINALIZER;
/// Field manager of every server-side apply.
pub const FIELD_MANAGER: &str = "oooi-controller";

/// Standard condition types used in every status.
pub mod condition {
    /// Everything is in place and serving.
    pub const READY: &str = "Ready";
    /// Something is being rolled out.
    pub const PROGRESSING: &str = "Progressing";
    /// The spec cannot be fully honoured; the reason names why.
    pub const DEGRADED: &str = "Degraded";
    /// The attachment is part of its Infra's routes, DNS and DHCP.
    pub const ACCEPTED: &str = "Accepted";
    /// Every ready Envoy replica holds the current routing table.
    pub const ROUTES_SYNCED: &str = "RoutesSynced";
    /// The Infra sets fields of the older single-cluster API that oooi
    /// ignores; the message names each.
    pub const LEGACY_FIELDS_IGNORED: &str = "LegacyFieldsIgnored";
    /// The Infra lists no upstream resolver: names oooi does not own are
    /// answered SERVFAIL.
    pub const NO_UPSTREAMS: &str = "NoUpstreams";
    /// At least one worker source address of the attachment's cluster is
    /// known, so its `kubernetes` alias paths are published.
    pub const WORKERS_KNOWN: &str = "WorkersKnown";
}

/// Status of a condition (`True`, `False`, `Unknown`) as Kubernetes writes it.
pub mod status {
    /// The condition holds.
    pub const TRUE: &str = "True";
    /// The condition does not hold.
    pub const FALSE: &str = "False";
    /// Not known yet.
    pub const UNKNOWN: &str = "Unknown";
}

/// Names one object in the same namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LocalObjectReference {
    /// Name of the object.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// Every CRD, in a fixed order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        Infra::crd(),
        InfraClusterAttachment::crd(),
        DHCPServer::crd(),
        DNSServer::crd(),
        ProxyServer::crd(),
    ]
}

/// Every CRD as multi-document YAML, exactly what `oooi-controller crds`
/// prints and what `charts/oooi/crds/` holds.
pub fn crds_yaml() -> anyhow::Result<String> {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd)?);
    }
    Ok(out)
}

/// One CRD as YAML, for the per-kind files under `charts/oooi/crds/`.
pub fn crd_files() -> anyhow::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for crd in crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        out.push((format!("{name}.yaml"), serde_saphyr::to_string(&crd)?));
    }
    Ok(out)
}
