//! The component skeleton, checked across the kinds: a pod-level field is
//! set once, in the part of the spec every kind shares
//! ([`crate::crd::ServerPod`]), and every kind's Deployment carries it. A
//! module of its own, so that the planners it reads need not name each other.

#![allow(clippy::unwrap_used)]

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::crd::{AddressTakeover, ComponentKind, ServerPod};
use crate::plan::workload::{AGENT_CONTAINER, resources};
use crate::plan::{Observed, dhcp, dns, fixtures, plan_infra, proxy};

/// A new pod-level field, written once: in the part of the spec every
/// kind shares.
fn set_pod_fields<K: ComponentKind>(pod: &mut ServerPod<K>) {
    pod.placement.priority_class_name = Some("oooi-critical".to_string());
    pod.placement
        .node_selector
        .insert("example.com/vlan".to_string(), "500".to_string());
    pod.availability.node_loss_toleration_seconds = 42;
    pod.availability.address_takeover = Some(AddressTakeover {
        lease_prefix: "infra".to_string(),
        addresses: vec![pod.vlan.address],
    });
    pod.resources = Some(resources(None, "1", "1Gi", "2Gi"));
}

fn pod_spec(d: &Deployment) -> &PodSpec {
    d.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
}

#[test]
fn a_pod_level_field_set_in_the_shared_part_reaches_the_pods_of_every_kind() {
    let plan = plan_infra(&fixtures::infra(), &[], &Observed::default());
    let mut desired = plan.desired.unwrap();
    let mut dhcp = desired.dhcp.remove(0);
    let mut dns = desired.dns.remove(0);
    let mut proxy = desired.proxy.remove(0);
    set_pod_fields(&mut dhcp.spec.pod);
    set_pod_fields(&mut dns.spec.pod);
    set_pod_fields(&mut proxy.spec.pod);
    let deployments = [
        (dhcp::children(&dhcp).unwrap().deployment, "dhcp:1"),
        (dns::children(&dns).unwrap().deployment, "dns:1"),
        (
            proxy::children(&proxy, "0123456789abcdef0123456789abcdef")
                .unwrap()
                .deployment,
            "envoy:1",
        ),
    ];
    for (d, image) in &deployments {
        let name = d.metadata.name.as_deref().unwrap();
        let pod = pod_spec(d);
        assert_eq!(
            pod.priority_class_name.as_deref(),
            Some("oooi-critical"),
            "{name}"
        );
        assert_eq!(
            pod.node_selector.as_ref().unwrap().get("example.com/vlan"),
            Some(&"500".to_string()),
            "{name}"
        );
        let tolerations = pod.tolerations.as_ref().unwrap();
        assert!(!tolerations.is_empty(), "{name}");
        assert!(
            tolerations.iter().all(|t| t.toleration_seconds == Some(42)),
            "{name}: {tolerations:?}"
        );
        let main = &pod.containers[0];
        assert_eq!(main.image.as_deref(), Some(*image), "{name}");
        assert_eq!(
            main.resources.as_ref().unwrap().requests.as_ref().unwrap()["memory"],
            Quantity("1Gi".to_string()),
            "{name}"
        );
    }
    // The address agent rides on the same part; DHCP alone opts out
    // (a pair has its own failover).
    let agents: Vec<bool> = deployments
        .iter()
        .map(|(d, _)| {
            pod_spec(d)
                .init_containers
                .iter()
                .flatten()
                .any(|c| c.name == AGENT_CONTAINER)
        })
        .collect();
    assert_eq!(agents, [false, true, true]);
}

#[test]
fn without_pod_level_fields_every_kind_keeps_its_built_in_resources() {
    let plan = plan_infra(&fixtures::infra(), &[], &Observed::default());
    let desired = plan.desired.unwrap();
    let limits: Vec<Quantity> = [
        dhcp::children(&desired.dhcp[0]).unwrap().deployment,
        dns::children(&desired.dns[0]).unwrap().deployment,
        proxy::children(&desired.proxy[0], "0123456789abcdef0123456789abcdef")
            .unwrap()
            .deployment,
    ]
    .iter()
    .map(|d| {
        pod_spec(d).containers[0]
            .resources
            .as_ref()
            .unwrap()
            .limits
            .as_ref()
            .unwrap()["memory"]
            .clone()
    })
    .collect();
    assert_eq!(
        limits,
        ["128Mi", "256Mi", "512Mi"].map(|q| Quantity(q.to_string()))
    );
}
