//! The control-plane NetworkPolicy planner: one policy per accepted
//! attachment, in the attachment's control-plane namespace, and none for an
//! excluded attachment or an invalid Infra.

use crate::plan_support;

use oooi_controller::plan::network_policy::{
    ATTACHMENT_LABEL, OWNER_NAMESPACE_LABEL, control_plane_policy,
};
use oooi_controller::plan::{Observed, plan_infra};
use plan_support::*;

#[test]
fn an_accepted_attachment_gets_a_policy_in_its_control_plane_namespace() {
    let i = infra("oooi", "vlan");
    let atts = [
        attachment("oooi", "c1", "vlan", "c1"),
        attachment_yaml(
            "oooi",
            "c2",
            "vlan",
            "c2",
            "c2",
            "  controlPlaneNamespace: hcp-c2",
        ),
    ];
    let p = plan_infra(&i, &atts, &Observed::default());
    let c1 = control_plane_policy(p.verdict("c1"), "oooi", "vlan").expect("accepted");
    assert_eq!(c1.metadata.namespace.as_deref(), Some("clusters-c1"));
    assert_eq!(c1.metadata.name.as_deref(), Some("oooi-proxy-oooi-vlan"));
    let labels = c1.metadata.labels.unwrap();
    assert_eq!(labels[ATTACHMENT_LABEL], "c1");
    assert_eq!(labels[OWNER_NAMESPACE_LABEL], "oooi");
    let c2 = control_plane_policy(p.verdict("c2"), "oooi", "vlan").expect("accepted");
    assert_eq!(c2.metadata.namespace.as_deref(), Some("hcp-c2"));
}

#[test]
fn excluded_or_unknown_attachments_and_invalid_infras_get_no_policy() {
    let i = infra("oooi", "vlan");
    // Two attachments of one HostedCluster: both excluded.
    let atts = [
        attachment_yaml("oooi", "a", "vlan", "c1", "c1", ""),
        attachment_yaml("oooi", "b", "vlan", "c1", "other", ""),
    ];
    let p = plan_infra(&i, &atts, &Observed::default());
    assert!(control_plane_policy(p.verdict("a"), "oooi", "vlan").is_none());
    assert!(control_plane_policy(p.verdict("b"), "oooi", "vlan").is_none());
    assert!(control_plane_policy(p.verdict("nope"), "oooi", "vlan").is_none());

    let mut bad = infra("oooi", "vlan");
    bad.spec.network_config.gateway = Some("bad".into());
    let p = plan_infra(
        &bad,
        &[attachment("oooi", "c1", "vlan", "c1")],
        &Observed::default(),
    );
    assert!(p.desired.is_none());
    assert!(
        control_plane_policy(p.verdict("c1"), "oooi", "vlan").is_none(),
        "an invalid Infra opens nothing"
    );
}

#[test]
fn the_proxy_policy_opens_its_routing_ports_and_the_agents_metrics_port_with_takeover() {
    use oooi_controller::plan::proxy::{READY_PORT, policy_ports};
    let d = plan_infra(&infra("oooi", "vlan"), &[], &Observed::default())
        .desired
        .expect("valid");
    let mut p = d.proxy.first().expect("a proxy").clone();
    let ports = policy_ports(&p);
    assert_eq!(ports.push, p.spec.push_port);
    assert_eq!(ports.ready, READY_PORT);
    assert_eq!(ports.metrics, vec![9102], "no agent without takeover");
    assert!(ports.routing.contains(&6443), "{ports:?}");
    p.spec.tls_ports.push(8443);
    p.spec.availability.address_takeover = Some(oooi_controller::crd::AddressTakeover {
        lease_prefix: "vlan-proxy".into(),
        addresses: vec!["192.0.2.4/24".into(), "192.0.2.7/24".into()],
    });
    let ports = policy_ports(&p);
    assert_eq!(ports.metrics, vec![9102, 9466]);
    assert!(ports.routing.contains(&8443), "{ports:?}");
}
