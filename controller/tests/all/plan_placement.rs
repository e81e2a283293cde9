//! An Infra places its component pods: node selector, extra tolerations,
//! affinity additions, priority class and image pull secrets reach every
//! pod, beside (never instead of) oooi's own anti-affinity and node-loss
//! tolerations; the controller's defaults fill what the Infra leaves unset.

#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

use crate::plan_support::component_infra;

use k8s_openapi::api::core::v1::PodSpec;
use oooi_controller::crd::Infra;
use oooi_controller::plan::workload::placement::{DefaultPlacement, parse_placement};
use oooi_controller::plan::{Children, Observed, dhcp, dns, plan_infra, proxy};
use serde_json::json;

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// Two DNS replicas with every placement field, the DHCP lease volume on
/// a storage class.
fn infra() -> Infra {
    component_infra()
        .dhcp(json!({"storageClassName": "fast", "storageSize": "2Gi"}))
        .dns_servers(&["192.0.2.3", "192.0.2.6"])
        .dns(json!({"placement": {
            "nodeSelector": {"vlan.example.com/trunk": "true"},
            "tolerations": [{"key": "vlan.example.com/dedicated", "operator": "Exists", "effect": "NoSchedule"}],
            "priorityClassName": "system-cluster-critical",
            "imagePullSecrets": [{"name": "dns-pull"}],
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]
                }},
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                    "weight": 50,
                    "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "noisy"}}}
                }]}
            }
        }}))
        .build()
}

fn pods(i: &Infra) -> Vec<(String, PodSpec, Children)> {
    let mut d = plan_infra(i, &[], &Observed::default())
        .desired
        .expect("valid");
    let mut out = Vec::new();
    let mut push = |c: Children| {
        let name = c.deployment.metadata.name.clone().unwrap();
        let pod = c.deployment.spec.clone().unwrap().template.spec.unwrap();
        out.push((name, pod, c));
    };
    for s in &mut d.dhcp {
        s.metadata.uid = Some("u-dhcp".into());
        push(dhcp::children(s).unwrap());
    }
    for s in &mut d.dns {
        s.metadata.uid = Some(format!("u-{}", s.metadata.name.clone().unwrap()));
        push(dns::children(s).unwrap());
    }
    for s in &mut d.proxy {
        s.metadata.uid = Some("u-proxy".into());
        push(proxy::children(s, TOKEN).unwrap());
    }
    out
}

#[test]
fn a_components_placement_reaches_its_pods_beside_oooi_s_own() {
    for (name, pod, _) in pods(&infra()) {
        if !name.starts_with("vlan-dns") {
            assert_eq!(pod.node_selector, None, "{name}");
            assert_eq!(pod.priority_class_name, None, "{name}");
            assert_eq!(pod.image_pull_secrets, None, "{name}");
            continue;
        }
        assert_eq!(
            pod.node_selector.as_ref().unwrap()["vlan.example.com/trunk"],
            "true"
        );
        assert_eq!(
            pod.priority_class_name.as_deref(),
            Some("system-cluster-critical")
        );
        assert_eq!(pod.image_pull_secrets.as_ref().unwrap()[0].name, "dns-pull");
        // The node-loss tolerations stay, the user's come after them.
        let keys: Vec<&str> = pod
            .tolerations
            .iter()
            .flatten()
            .filter_map(|t| t.key.as_deref())
            .collect();
        assert_eq!(
            keys,
            [
                "node.kubernetes.io/unreachable",
                "node.kubernetes.io/not-ready",
                "vlan.example.com/dedicated"
            ]
        );
        let affinity = pod.affinity.as_ref().unwrap();
        assert!(affinity.node_affinity.is_some(), "node affinity as written");
        let anti = affinity.pod_anti_affinity.as_ref().unwrap();
        // oooi's own: never two DNS replicas on one node.
        let required = anti
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .unwrap();
        assert_eq!(required[0].topology_key, "kubernetes.io/hostname");
        assert_eq!(
            anti.preferred_during_scheduling_ignored_during_execution
                .as_ref()
                .unwrap()[0]
                .weight,
            50
        );
    }
}

#[test]
fn the_lease_volume_takes_the_storage_class_and_size() {
    let (_, _, dhcp) = pods(&infra())
        .into_iter()
        .find(|(n, _, _)| n == "vlan-dhcp")
        .unwrap();
    let pvc = dhcp.pvc.unwrap().spec.unwrap();
    assert_eq!(pvc.storage_class_name.as_deref(), Some("fast"));
    assert_eq!(pvc.resources.unwrap().requests.unwrap()["storage"].0, "2Gi");
}

#[test]
fn the_controllers_defaults_fill_what_the_infra_leaves_unset() {
    let defaults = DefaultPlacement {
        placement: Some(
            parse_placement(
                "{nodeSelector: {vlan.example.com/trunk: 'yes'}, imagePullSecrets: [{name: global-pull}]}",
            )
            .unwrap(),
        ),
    };
    for (name, pod, _) in pods(&defaults.apply(&infra())) {
        let selector = pod.node_selector.unwrap();
        let pull = pod.image_pull_secrets.unwrap();
        if name.starts_with("vlan-dns") {
            assert_eq!(
                selector["vlan.example.com/trunk"], "true",
                "the Infra's own"
            );
            assert_eq!(pull[0].name, "dns-pull");
        } else {
            assert_eq!(
                selector["vlan.example.com/trunk"], "yes",
                "{name}: the default"
            );
            assert_eq!(pull[0].name, "global-pull");
        }
    }
}
