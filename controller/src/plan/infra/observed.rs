//! What the reconciler observed in the cluster, as plain data. The planner
//! never reads the API itself; `render` fills the same struct from fixture
//! documents (kind `ObservedCluster`).

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// Identifies a HostedCluster.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HostedClusterKey {
    /// Namespace of the HostedCluster.
    pub namespace: String,
    /// Name of the HostedCluster.
    pub name: String,
}

impl HostedClusterKey {
    /// Builds a key.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        HostedClusterKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for HostedClusterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The observed cluster state the planner needs. Everything is optional:
/// a cluster without the NodePool, Machine or VMI CRDs simply has no workers
/// here, and the planner plans without source-scoped routes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// Per hosted cluster: its workers and apps VIP.
    pub clusters: BTreeMap<HostedClusterKey, ObservedCluster>,
    /// ClusterIP of the proxy's internal Service (or of the Service named in
    /// `internalProxyService`), once the API server assigned it. The DNS pod
    /// view answers the `kubernetes` aliases with it.
    pub internal_proxy_ip: Option<IpAddr>,
    /// SHA-256 (hex) of the filter module in the Infra's filter ConfigMap.
    pub filter_sha256: Option<String>,
}

/// Observed state of one hosted cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedCluster {
    /// CAPI Machines of the cluster's KubeVirt NodePools.
    #[serde(default)]
    pub machines: Vec<ObservedMachine>,
    /// KubeVirt VirtualMachineInstances of those NodePools.
    #[serde(default)]
    pub vmis: Vec<ObservedVmi>,
    /// The apps ingress VIP, once MetalLB assigned one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apps_vip: Option<IpAddr>,
}

/// A CAPI Machine: its name and `status.addresses[].address`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedMachine {
    /// Machine name (KubeVirt VMIs of a NodePool carry the same name).
    pub name: String,
    /// Every address of `status.addresses`, whatever its type; the planner
    /// keeps the IPv4 ones inside the Infra CIDR.
    #[serde(default)]
    pub addresses: Vec<String>,
}

/// A KubeVirt VMI: name and `status.interfaces`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedVmi {
    /// VMI name.
    pub name: String,
    /// `status.interfaces`.
    #[serde(default)]
    pub interfaces: Vec<ObservedInterface>,
}

/// One `status.interfaces[]` entry of a VMI.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedInterface {
    /// Interface name in the VMI spec (e.g. `default`, `vlan`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// MAC address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// `ipAddress` and `ipAddresses` together.
    #[serde(default)]
    pub ip_addresses: Vec<String>,
}
