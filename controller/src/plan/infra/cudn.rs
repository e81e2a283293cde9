//! The OVN-Kubernetes ClusterUserDefinedNetwork an Infra owns.
//!
//! `spec.networkConfig.clusterUserDefinedNetwork` with `localnet` asks the
//! controller for the VLAN as a ClusterUserDefinedNetwork
//! (`k8s.ovn.org/v1`): localnet topology, secondary role, the physical
//! network, the VLAN id in access mode, the MTU, and IPAM disabled, selecting
//! the Infra's namespace only. OVN-Kubernetes then makes a
//! NetworkAttachmentDefinition named after it in that namespace, which the
//! components attach to with their static addresses in the Multus
//! annotation, as with a NetworkAttachmentDefinition written by hand: on an
//! IPAM-disabled localnet OVN-Kubernetes assigns no address itself and
//! configures the `ips` the network selection element requests.
//!
//! The network is cluster-scoped, so no owner reference can tie it to the
//! Infra: it carries the Infra's name and namespace as labels
//! ([`INFRA_LABEL`], [`OWNER_NAMESPACE_LABEL`]), the reconciler finds its
//! own networks by those labels, and the Infra's finalizer deletes them.
//! A network of the same name without those labels is someone else's and is
//! never written.

use std::collections::BTreeMap;

use kube::api::{ApiResource, DynamicObject};
use kube::core::{GroupVersionKind, ObjectMeta};
use kube::{Resource, ResourceExt};
use serde_json::json;

use oooi_vocabulary::labels as keys;

use crate::crd::Infra;
use crate::plan::labels::{APP_NAME, INFRA_LABEL, MANAGED_BY};
use crate::plan::network_policy::OWNER_NAMESPACE_LABEL;

/// API group of the ClusterUserDefinedNetwork.
pub const GROUP: &str = "k8s.ovn.org";
/// Its version.
pub const VERSION: &str = "v1";
/// Its kind.
pub const KIND: &str = "ClusterUserDefinedNetwork";
/// Its resource (plural).
pub const PLURAL: &str = "clusteruserdefinednetworks";

/// The ClusterUserDefinedNetwork resource, for a dynamic API.
pub fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), PLURAL)
}

/// The labels marking a network as `infra`'s.
pub fn owner_labels(infra: &Infra) -> BTreeMap<String, String> {
    let name = infra.name_any();
    BTreeMap::from([
        (keys::APP_NAME.to_string(), APP_NAME.to_string()),
        (keys::APP_INSTANCE.to_string(), name.clone()),
        (keys::APP_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
        (INFRA_LABEL.to_string(), name),
        (
            OWNER_NAMESPACE_LABEL.to_string(),
            infra.namespace().unwrap_or_default(),
        ),
    ])
}

/// The label selector that lists `infra`'s networks.
pub fn owner_selector(infra: &impl Resource) -> String {
    format!(
        "{INFRA_LABEL}={},{OWNER_NAMESPACE_LABEL}={}",
        infra.name_any(),
        infra.namespace().unwrap_or_default()
    )
}

/// True when `obj` carries `infra`'s labels.
pub fn owned_by(obj: &DynamicObject, infra: &impl Resource) -> bool {
    let l = obj.labels();
    l.get(INFRA_LABEL) == Some(&infra.name_any())
        && l.get(OWNER_NAMESPACE_LABEL) == infra.namespace().as_ref()
}

/// True when the Infra's network is a ClusterUserDefinedNetwork (managed or
/// not): only then may it own one, and only then does the reconciler look.
pub fn names_a_cudn(infra: &Infra) -> bool {
    infra
        .spec
        .network_config
        .cluster_user_defined_network
        .is_some()
}

/// The ClusterUserDefinedNetwork `infra` asks the controller to own, or
/// `None` when it names none or one it does not manage.
pub fn desired_cudn(infra: &Infra) -> Option<DynamicObject> {
    let nc = &infra.spec.network_config;
    let cudn = nc.cluster_user_defined_network.as_ref()?;
    let localnet = cudn.localnet.as_ref()?;
    let mut spec = json!({
        "role": "Secondary",
        "physicalNetworkName": localnet.physical_network_name,
        // Addresses are oooi's: DHCP hands them to workers, and the
        // components carry static ones in their Multus annotation.
        "ipam": {"mode": "Disabled"},
    });
    if let Some(mtu) = localnet.mtu.or(nc.mtu.map(u32::from)) {
        spec["mtu"] = json!(mtu);
    }
    if let Some(id) = localnet.vlan_id {
        spec["vlan"] = json!({"mode": "Access", "access": {"id": id}});
    }
    let ar = api_resource();
    let mut obj = DynamicObject::new(&cudn.name, &ar);
    obj.metadata = ObjectMeta {
        name: Some(cudn.name.clone()),
        labels: Some(owner_labels(infra)),
        ..ObjectMeta::default()
    };
    obj.data = json!({
        "spec": {
            "namespaceSelector": {
                "matchLabels": {
                    "kubernetes.io/metadata.name": infra.namespace().unwrap_or_default(),
                },
            },
            "network": {
                "topology": "Localnet",
                "localnet": spec,
            },
        },
    });
    Some(obj)
}

/// What to do with `infra`'s networks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CudnPlan {
    /// Create this network: none of `infra`'s has its name.
    pub create: Option<DynamicObject>,
    /// Apply this network over the live one of the same name (the apply
    /// sends nothing when the live one already matches).
    pub apply: Option<(DynamicObject, DynamicObject)>,
    /// Delete these networks of `infra`'s: no longer asked for.
    pub delete: Vec<String>,
}

/// Plans `infra`'s networks from the desired one and those that carry its
/// labels now (`owned`).
pub fn plan_cudns(desired: Option<DynamicObject>, owned: &[DynamicObject]) -> CudnPlan {
    let mut plan = CudnPlan::default();
    let desired_name = desired.as_ref().map(ResourceExt::name_any);
    if let Some(d) = desired {
        match owned.iter().find(|o| o.name_any() == d.name_any()) {
            None => plan.create = Some(d),
            Some(live) => plan.apply = Some((d, live.clone())),
        }
    }
    plan.delete = owned
        .iter()
        .map(ResourceExt::name_any)
        .filter(|n| Some(n) != desired_name.as_ref())
        .collect();
    plan.delete.sort();
    plan
}

/// The kind as `apiVersion` writes it.
pub fn api_version() -> String {
    DynamicObject::api_version(&api_resource()).into_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::plan::infra::network::parse_network;
    use serde_json::Value;

    /// Infra `vlan200` in `oooi` without images, its `networkConfig` the
    /// CIDR, one resolver and `network`.
    fn infra(network: Value) -> Infra {
        crate::testing::InfraBuilder::new()
            .named("oooi", "vlan200")
            .remove("/metadata/uid")
            .remove("/metadata/generation")
            .remove("/spec/networkConfig/gateway")
            .remove("/spec/networkConfig/networkAttachmentDefinition")
            .upstreams(&["10.0.0.10"])
            .images(None, None, None)
            .merge(json!({"spec": {"networkConfig": network}}))
            .build()
    }

    fn managed() -> Infra {
        infra(json!({"clusterUserDefinedNetwork": {
            "name": "vlan200",
            "localnet": {"physicalNetworkName": "physnet", "vlanId": 200, "mtu": 1400}
        }}))
    }

    #[test]
    fn a_managed_localnet_is_a_secondary_ipam_less_network_on_the_vlan_in_access_mode() {
        let c = desired_cudn(&managed()).unwrap();
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["apiVersion"], "k8s.ovn.org/v1");
        assert_eq!(v["kind"], "ClusterUserDefinedNetwork");
        assert_eq!(v["metadata"]["name"], "vlan200");
        assert!(v["metadata"].get("namespace").is_none(), "cluster-scoped");
        assert_eq!(
            v["spec"],
            json!({
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "oooi"}},
                "network": {
                    "topology": "Localnet",
                    "localnet": {
                        "role": "Secondary",
                        "physicalNetworkName": "physnet",
                        "ipam": {"mode": "Disabled"},
                        "mtu": 1400,
                        "vlan": {"mode": "Access", "access": {"id": 200}}
                    }
                }
            })
        );
    }

    #[test]
    fn the_network_carries_its_infra_name_and_namespace_as_labels() {
        let i = managed();
        let c = desired_cudn(&i).unwrap();
        assert!(owned_by(&c, &i));
        let l = c.labels();
        assert_eq!(l[INFRA_LABEL], "vlan200");
        assert_eq!(l[OWNER_NAMESPACE_LABEL], "oooi");
        assert_eq!(l["app.kubernetes.io/managed-by"], "oooi-controller");
        assert_eq!(
            owner_selector(&i),
            "hostedcluster.densityops.com/infra=vlan200,hostedcluster.densityops.com/infra-namespace=oooi"
        );
        let mut other = i.clone();
        other.metadata.namespace = Some("elsewhere".into());
        assert!(!owned_by(&c, &other), "same name, other namespace");
    }

    #[test]
    fn untagged_localnet_without_mtu_leaves_both_to_ovn_kubernetes() {
        let i = infra(json!({"clusterUserDefinedNetwork": {
            "name": "flat", "localnet": {"physicalNetworkName": "physnet"}
        }}));
        let v = serde_json::to_value(desired_cudn(&i).unwrap()).unwrap();
        let l = &v["spec"]["network"]["localnet"];
        assert!(l.get("vlan").is_none());
        assert!(l.get("mtu").is_none());
    }

    #[test]
    fn the_mtu_defaults_to_the_one_dhcp_hands_out() {
        let i = infra(json!({"mtu": 1450, "clusterUserDefinedNetwork": {
            "name": "flat", "localnet": {"physicalNetworkName": "physnet"}
        }}));
        let v = serde_json::to_value(desired_cudn(&i).unwrap()).unwrap();
        assert_eq!(v["spec"]["network"]["localnet"]["mtu"], 1450);
    }

    #[test]
    fn a_network_attachment_definition_or_an_unmanaged_network_asks_for_none() {
        let nad = infra(json!({"networkAttachmentDefinition": "vlan"}));
        assert!(desired_cudn(&nad).is_none());
        assert!(!names_a_cudn(&nad));
        let existing = infra(json!({"clusterUserDefinedNetwork": {"name": "admins"}}));
        assert!(desired_cudn(&existing).is_none());
        assert!(names_a_cudn(&existing));
    }

    #[test]
    fn components_attach_to_the_nad_named_after_the_network_in_the_infra_namespace() {
        for i in [
            managed(),
            infra(json!({"clusterUserDefinedNetwork": {"name": "vlan200"}})),
        ] {
            let n = parse_network(&i).unwrap();
            assert_eq!(
                (n.nad.as_str(), n.nad_namespace.as_str()),
                ("vlan200", "oooi")
            );
            // Static addresses are requested the same way as with a NAD.
            assert_eq!(n.with_prefix(n.proxy[0]), "192.0.2.4/24");
        }
        let n = parse_network(&infra(json!({
            "networkAttachmentDefinition": "vlan", "networkAttachmentNamespace": "net"
        })))
        .unwrap();
        assert_eq!((n.nad.as_str(), n.nad_namespace.as_str()), ("vlan", "net"));
    }

    #[test]
    fn the_network_is_named_exactly_once() {
        let both = infra(json!({
            "networkAttachmentDefinition": "vlan",
            "clusterUserDefinedNetwork": {"name": "vlan200"}
        }));
        let e = parse_network(&both).unwrap_err();
        assert!(
            e.iter()
                .any(|e| e.field == "spec.networkConfig.clusterUserDefinedNetwork"),
            "{e:?}"
        );
        let neither = infra(json!({}));
        let e = parse_network(&neither).unwrap_err();
        assert!(
            e.iter()
                .any(|e| e.field == "spec.networkConfig.networkAttachmentDefinition"),
            "{e:?}"
        );
        let foreign_ns = infra(json!({
            "networkAttachmentNamespace": "net",
            "clusterUserDefinedNetwork": {"name": "vlan200"}
        }));
        let e = parse_network(&foreign_ns).unwrap_err();
        assert!(
            e.iter()
                .any(|e| e.field == "spec.networkConfig.networkAttachmentNamespace"),
            "{e:?}"
        );
    }

    #[test]
    fn the_network_is_created_when_absent_and_applied_over_when_present() {
        let i = managed();
        let p = plan_cudns(desired_cudn(&i), &[]);
        let created = p.create.clone().unwrap();
        assert!(p.apply.is_none() && p.delete.is_empty());

        let mut live = created.clone();
        live.metadata.uid = Some("u1".into());
        let p = plan_cudns(desired_cudn(&i), std::slice::from_ref(&live));
        assert!(p.create.is_none() && p.delete.is_empty());
        let (d, l) = p.apply.unwrap();
        assert_eq!((d, l), (created, live));
    }

    #[test]
    fn a_renamed_or_no_longer_managed_network_is_deleted() {
        let i = managed();
        let mut old = desired_cudn(&i).unwrap();
        old.metadata.name = Some("vlan200-old".into());
        let p = plan_cudns(desired_cudn(&i), std::slice::from_ref(&old));
        assert!(p.create.is_some());
        assert_eq!(p.delete, ["vlan200-old"]);
        let p = plan_cudns(None, &[old]);
        assert!(p.create.is_none() && p.apply.is_none());
        assert_eq!(p.delete, ["vlan200-old"]);
    }
}
