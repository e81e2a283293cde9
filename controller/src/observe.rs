//! What the controller observes outside its own kinds: HyperShift
//! HostedClusters and NodePools, CAPI Machines (worker addresses) and
//! KubeVirt VirtualMachineInstances (fallback addresses and MACs).
//!
//! None of these APIs is required. At start [`discover`] reads their CRDs;
//! a missing one is logged, exported as
//! `oooi_controller_optional_api_present{api}=0`, reported in the Infra's
//! conditions, and simply not watched: the Infra is planned without worker
//! source routes. The objects are read as `DynamicObject`s (no typed
//! bindings for those projects), and turned into the planner's plain
//! [`Observed`] data by the pure functions here.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use tracing::{info, warn};

use crate::crd::InfraClusterAttachment;
use crate::plan::infra::observed::ObservedInterface;
use crate::plan::{HostedClusterKey, Observed, ObservedCluster, ObservedMachine, ObservedVmi};

/// One optional API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionalApi {
    /// API group.
    pub group: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Plural resource name.
    pub plural: &'static str,
}

impl OptionalApi {
    /// The CRD name, `<plural>.<group>`.
    pub fn crd_name(&self) -> String {
        format!("{}.{}", self.plural, self.group)
    }
}

/// HyperShift HostedClusters.
pub const HOSTED_CLUSTERS: OptionalApi = OptionalApi {
    group: "hypershift.openshift.io",
    kind: "HostedCluster",
    plural: "hostedclusters",
};
/// HyperShift NodePools.
pub const NODE_POOLS: OptionalApi = OptionalApi {
    group: "hypershift.openshift.io",
    kind: "NodePool",
    plural: "nodepools",
};
/// Cluster API Machines.
pub const MACHINES: OptionalApi = OptionalApi {
    group: "cluster.x-k8s.io",
    kind: "Machine",
    plural: "machines",
};
/// KubeVirt VirtualMachineInstances.
pub const VMIS: OptionalApi = OptionalApi {
    group: "kubevirt.io",
    kind: "VirtualMachineInstance",
    plural: "virtualmachineinstances",
};

/// Every optional API, in a fixed order.
pub const OPTIONAL_APIS: [OptionalApi; 4] = [HOSTED_CLUSTERS, NODE_POOLS, MACHINES, VMIS];

/// The outcome of [`discover`]: the served version of each API found.
#[derive(Debug, Clone, Default)]
pub struct Discovered {
    /// API → resource, for the APIs the cluster serves.
    pub present: Vec<(OptionalApi, ApiResource)>,
    /// APIs the cluster does not serve.
    pub missing: Vec<OptionalApi>,
}

impl Discovered {
    /// The resource of `api`, when served.
    pub fn get(&self, api: OptionalApi) -> Option<&ApiResource> {
        self.present.iter().find(|(a, _)| *a == api).map(|(_, r)| r)
    }

    /// A sentence for conditions and logs, e.g.
    /// `not served: machines.cluster.x-k8s.io; worker source routes come from VMIs only`.
    pub fn summary(&self) -> Option<String> {
        if self.missing.is_empty() {
            return None;
        }
        let names: Vec<String> = self.missing.iter().map(|a| a.crd_name()).collect();
        let effect = match (self.get(MACHINES).is_some(), self.get(VMIS).is_some()) {
            (false, false) => "no worker addresses are observed, so no source-scoped routes",
            (false, true) => "worker addresses come from KubeVirt VMIs only",
            (true, false) => "no DHCP reservations from VMI MACs",
            (true, true) => "worker addresses are observed",
        };
        Some(format!(
            "optional APIs not served: {}; {effect}",
            names.join(", ")
        ))
    }
}

/// The storage version of a CRD, or the first served one.
fn served_version(crd: &CustomResourceDefinition) -> Option<String> {
    let versions = &crd.spec.versions;
    versions
        .iter()
        .find(|v| v.served && v.storage)
        .or_else(|| versions.iter().find(|v| v.served))
        .map(|v| v.name.clone())
}

/// Reads the CRD of each optional API (`GET customresourcedefinitions/<name>`).
pub async fn discover(client: &Client) -> kube::Result<Discovered> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut out = Discovered::default();
    for api in OPTIONAL_APIS {
        let found = crds
            .get_opt(&api.crd_name())
            .await?
            .and_then(|crd| served_version(&crd));
        match found {
            Some(version) => {
                info!(api = %api.crd_name(), %version, "optional API found; watching it");
                out.present.push((
                    api,
                    ApiResource {
                        group: api.group.into(),
                        version: version.clone(),
                        api_version: format!("{}/{version}", api.group),
                        kind: api.kind.into(),
                        plural: api.plural.into(),
                    },
                ));
            }
            None => {
                warn!(api = %api.crd_name(), "optional API not served; running without it");
                out.missing.push(api);
            }
        }
    }
    Ok(out)
}

/// Caches of the optional objects (absent when the API is not served).
#[derive(Clone, Default)]
pub struct Observations {
    /// HostedClusters.
    pub hosted_clusters: Option<Store<DynamicObject>>,
    /// NodePools.
    pub node_pools: Option<Store<DynamicObject>>,
    /// CAPI Machines.
    pub machines: Option<Store<DynamicObject>>,
    /// KubeVirt VMIs.
    pub vmis: Option<Store<DynamicObject>>,
    /// The hosted-cluster side: apps VIPs seen by the hosted Service watches.
    pub hosted: crate::hosted::Hosted,
}

/// A Machine's name and `status.addresses[].address`.
pub fn machine(obj: &DynamicObject) -> ObservedMachine {
    ObservedMachine {
        name: obj.name_any(),
        addresses: oooi_inventory_client::objects::machine_addresses(obj),
    }
}

/// A VMI's name and interfaces as
/// [`oooi_inventory_client::objects::vmi_interfaces`] reads them (status
/// and spec merged: a VMI's MAC is known from its creation, its address only
/// once its guest took a lease).
pub fn vmi(obj: &DynamicObject) -> ObservedVmi {
    ObservedVmi {
        name: obj.name_any(),
        interfaces: oooi_inventory_client::objects::vmi_interfaces(obj)
            .into_iter()
            .map(|i| ObservedInterface {
                name: i.name,
                mac: i.mac,
                ip_addresses: i.ip_addresses,
            })
            .collect(),
    }
}

/// The control-plane namespace of an attachment: `spec.controlPlaneNamespace`,
/// else `<hc-namespace>-<hc-name>` (HyperShift's convention). CAPI Machines
/// and KubeVirt VMIs of the hosted cluster live there.
pub fn control_plane_namespace(a: &InfraClusterAttachment) -> String {
    a.spec.control_plane_namespace.clone().unwrap_or_else(|| {
        format!(
            "{}-{}",
            a.spec.hosted_cluster_ref.namespace, a.spec.hosted_cluster_ref.name
        )
    })
}

/// NodePools of one hosted cluster whose platform is not KubeVirt: their
/// Machines are not on the VLAN.
fn foreign_node_pools(
    pools: &[std::sync::Arc<DynamicObject>],
    hc: &HostedClusterKey,
) -> Vec<String> {
    pools
        .iter()
        .filter(|p| p.namespace().as_deref() == Some(hc.namespace.as_str()))
        .filter(|p| p.data["spec"]["clusterName"].as_str() == Some(hc.name.as_str()))
        .filter(|p| {
            p.data["spec"]["platform"]["type"]
                .as_str()
                .is_some_and(|t| t != "KubeVirt")
        })
        .map(|p| p.name_any())
        .collect()
}

/// Label CAPI puts on the Machines of a MachineDeployment; HyperShift names
/// the MachineDeployment after the NodePool.
pub const DEPLOYMENT_LABEL: &str = oooi_vocabulary::labels::CAPI_DEPLOYMENT_NAME;

impl Observations {
    /// The planner's view of the hosted clusters of `attachments`, from the
    /// caches (no API request).
    pub fn observed(&self, attachments: &[InfraClusterAttachment]) -> Observed {
        let machines = self
            .machines
            .as_ref()
            .map(|s| s.state())
            .unwrap_or_default();
        let vmis = self.vmis.as_ref().map(|s| s.state()).unwrap_or_default();
        let pools = self
            .node_pools
            .as_ref()
            .map(|s| s.state())
            .unwrap_or_default();
        let mut clusters = BTreeMap::new();
        for a in attachments {
            let key = HostedClusterKey::new(
                a.spec.hosted_cluster_ref.namespace.clone(),
                a.spec.hosted_cluster_ref.name.clone(),
            );
            let ns = control_plane_namespace(a);
            let foreign = foreign_node_pools(&pools, &key);
            let mut cluster = ObservedCluster {
                machines: machines
                    .iter()
                    .filter(|m| m.namespace().as_deref() == Some(ns.as_str()))
                    .filter(|m| {
                        m.labels()
                            .get(DEPLOYMENT_LABEL)
                            .is_none_or(|d| !foreign.contains(d))
                    })
                    .map(|m| machine(m))
                    .collect(),
                vmis: vmis
                    .iter()
                    .filter(|v| v.namespace().as_deref() == Some(ns.as_str()))
                    .map(|v| vmi(v))
                    .collect(),
                apps_vip: self
                    .hosted
                    .vip(&a.namespace().unwrap_or_default(), &a.name_any()),
            };
            // Deterministic order whatever order the cache returns.
            cluster.machines.sort_by(|x, y| x.name.cmp(&y.name));
            cluster.vmis.sort_by(|x, y| x.name.cmp(&y.name));
            clusters.insert(key, cluster);
        }
        Observed {
            clusters,
            ..Observed::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn dynamic(v: Value) -> DynamicObject {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn machine_addresses_are_read_whatever_their_type() {
        let m = dynamic(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
            "metadata": {"name": "w1", "namespace": "clusters-c1"},
            "status": {"addresses": [
                {"type": "InternalIP", "address": "192.0.2.10"},
                {"type": "InternalDNS", "address": "w1"},
                {"type": "ExternalIP", "address": "10.128.0.5"}
            ]}
        }));
        assert_eq!(
            machine(&m),
            ObservedMachine {
                name: "w1".into(),
                addresses: vec!["192.0.2.10".into(), "w1".into(), "10.128.0.5".into()]
            }
        );
        let bare = dynamic(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
            "metadata": {"name": "w2"}}),
        );
        assert!(machine(&bare).addresses.is_empty());
    }

    #[test]
    fn a_vmi_mac_is_known_from_its_spec_before_its_status_reports_it() {
        let fresh: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "w-1", "namespace": "clusters-c1"},
            "spec": {"domain": {"devices": {"interfaces": [
                {"name": "vlan", "bridge": {}, "macAddress": "02:00:00:00:00:01"},
                {"name": "nomac", "bridge": {}}
            ]}}}
        }))
        .unwrap();
        let got = vmi(&fresh);
        assert_eq!(got.interfaces.len(), 1);
        assert_eq!(got.interfaces[0].name.as_deref(), Some("vlan"));
        assert_eq!(got.interfaces[0].mac.as_deref(), Some("02:00:00:00:00:01"));
        assert!(got.interfaces[0].ip_addresses.is_empty());

        // Once the status reports the interface, it is one interface.
        let mut running = fresh.clone();
        running.data["status"] = json!({"interfaces": [
            {"name": "vlan", "mac": "02:00:00:00:00:01", "ipAddress": "192.0.2.10"}
        ]});
        let got = vmi(&running);
        assert_eq!(got.interfaces.len(), 1);
        assert_eq!(
            got.interfaces[0].ip_addresses,
            vec!["192.0.2.10".to_string()]
        );
    }

    #[test]
    fn vmi_interfaces_merge_ip_address_fields() {
        let v = dynamic(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "w1", "namespace": "clusters-c1"},
            "status": {"interfaces": [
                {"name": "vlan", "mac": "02:00:00:00:00:01", "ipAddress": "192.0.2.10",
                 "ipAddresses": ["192.0.2.10", "fe80::1"]},
                {"name": "default", "mac": "02:00:00:00:00:02"}
            ]}
        }));
        let got = vmi(&v);
        assert_eq!(got.interfaces.len(), 2);
        assert_eq!(
            got.interfaces[0].ip_addresses,
            vec!["192.0.2.10", "fe80::1"]
        );
        assert_eq!(got.interfaces[0].mac.as_deref(), Some("02:00:00:00:00:01"));
        assert!(got.interfaces[1].ip_addresses.is_empty());
    }
}
