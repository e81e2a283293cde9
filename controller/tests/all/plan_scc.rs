//! `--openshift-scc`: each component's real pod template is granted the
//! least privileged SCC that admits it, through a Role and RoleBinding owned
//! like the Deployment; the pods without an address agent need no more than
//! the built-in `restricted-v2`.

#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

use crate::plan_support;

use oooi_controller::plan::workload::scc::{self, BUILT_IN, least_privileged, scc_rbac};
use oooi_controller::plan::{Children, Observed, dhcp, dns, plan_infra, proxy};
use plan_support::*;

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

fn components() -> (Children, Children, Children) {
    let i = infra("oooi", "vlan");
    let p = plan_infra(
        &i,
        &[attachment("oooi", "c1", "vlan", "c1")],
        &Observed::default(),
    );
    let d = p.desired.expect("valid");
    (
        dhcp::children(&d.dhcp.into_iter().next().unwrap()).unwrap(),
        dns::children(&d.dns.into_iter().next().unwrap()).unwrap(),
        proxy::children(&d.proxy.into_iter().next().unwrap(), TOKEN).unwrap(),
    )
}

fn pod(c: &Children) -> &k8s_openapi::api::core::v1::PodSpec {
    pod_spec(&c.deployment)
}

#[test]
fn every_component_runs_under_restricted_v2_on_openshift() {
    let (dhcp, dns, envoy) = components();
    for c in [&dhcp, &dns, &envoy] {
        let name = c.deployment.metadata.name.clone();
        // Portable: a fixed non-root UID, which nonroot-v2 admits...
        assert_eq!(scc::choose(&c.deployment).unwrap().name, "nonroot-v2");
        assert_eq!(
            least_privileged(&BUILT_IN, pod(c)).unwrap().name,
            "nonroot-v2",
            "{name:?}"
        );
        // ...and on OpenShift the namespace's UID, which restricted-v2 assigns.
        let mut d = c.deployment.clone();
        scc::for_openshift(&mut d);
        assert_eq!(scc::choose(&d).unwrap().name, "restricted-v2", "{name:?}");
    }
}

#[test]
fn the_grant_is_a_role_on_one_scc_bound_to_the_components_service_account() {
    let (dhcp, _, _) = components();
    let r = scc_rbac(&dhcp).expect("admitted");
    assert_eq!(r.scc, "nonroot-v2");
    let role = serde_json::to_value(&r.role).unwrap();
    assert_eq!(role["metadata"]["name"], "vlan-dhcp-scc");
    assert_eq!(role["metadata"]["namespace"], "oooi");
    assert_eq!(
        role["rules"],
        serde_json::json!([{
            "apiGroups": ["security.openshift.io"],
            "resources": ["securitycontextconstraints"],
            "resourceNames": ["nonroot-v2"],
            "verbs": ["use"],
        }])
    );
    let binding = serde_json::to_value(&r.role_binding).unwrap();
    assert_eq!(binding["metadata"]["name"], "vlan-dhcp-scc");
    assert_eq!(
        binding["roleRef"],
        serde_json::json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "vlan-dhcp-scc"})
    );
    assert_eq!(
        binding["subjects"],
        serde_json::json!([{"kind": "ServiceAccount", "name": "vlan-dhcp", "namespace": "oooi"}])
    );
    assert_eq!(
        pod(&dhcp).service_account_name.as_deref(),
        Some("vlan-dhcp"),
        "the pods run as the bound ServiceAccount"
    );
    // Owned and labelled like the Deployment: GC removes them with the component.
    for meta in [&r.role.metadata, &r.role_binding.metadata] {
        assert_eq!(
            meta.owner_references,
            dhcp.deployment.metadata.owner_references
        );
        assert_eq!(meta.labels, dhcp.deployment.metadata.labels);
    }
}

#[test]
fn every_component_pod_meets_the_pod_security_restricted_profile() {
    use oooi_controller::plan::workload::pod_security::{Level, level, restricted_violations};
    let (dhcp, dns, envoy) = components();
    for c in [&dhcp, &dns, &envoy] {
        assert_eq!(
            restricted_violations(pod(c)),
            Vec::<String>::new(),
            "{:?}",
            c.deployment.metadata.name
        );
        let mut d = c.deployment.clone();
        scc::for_openshift(&mut d);
        let p = pod_spec(&d);
        assert_eq!(level(p), Level::Restricted);
    }
}
