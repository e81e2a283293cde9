//! Fixtures for the planner tests: CRs built from YAML (so serde defaults
//! apply exactly as in the cluster) and observed workers in one line.

#![allow(dead_code)]
#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

use std::net::Ipv4Addr;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::PodSpec;
use oooi_controller::crd::{Infra, InfraClusterAttachment};
use oooi_controller::plan::{
    self, HostedClusterKey, Observed, ObservedCluster, ObservedMachine, ObservedVmi,
    infra::observed::ObservedInterface,
};
use oooi_controller::testing::InfraBuilder;
use oooi_routes::RouteTable;

/// The routing table a plan's proxy would get at generation 1, validated
/// whole as the filter would.
pub fn table(p: &plan::InfraPlan) -> RouteTable {
    let proxy = p.desired.as_ref().unwrap().proxy.first().unwrap();
    let t = plan::proxy::table(&proxy.spec, 1);
    t.validate().expect("planned table is valid");
    t
}

/// The pod template's spec of a planned Deployment.
pub fn pod_spec(d: &Deployment) -> &PodSpec {
    d.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
}

/// The pod template's annotations of a planned Deployment.
pub fn pod_annotations(d: &Deployment) -> &std::collections::BTreeMap<String, String> {
    d.spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap()
        .annotations
        .as_ref()
        .unwrap()
}

/// The DHCP config a plan's (first) DHCP server would get.
pub fn dhcp_config(p: &plan::InfraPlan) -> &oooi_dhcp_config::RawConfig {
    &p.desired
        .as_ref()
        .unwrap()
        .dhcp
        .first()
        .unwrap()
        .spec
        .config
        .0
}

/// The sources a table's source-scoped routes match, in order.
pub fn source_routes(t: &RouteTable) -> Vec<String> {
    t.routes
        .iter()
        .filter_map(|r| match &r.matches {
            oooi_routes::RouteMatch::Source(c) => Some(c.to_string()),
            _ => None,
        })
        .collect()
}

/// The DNS config a plan's DNS server would get.
pub fn dns_config(p: &plan::InfraPlan) -> &oooi_dns_config::RawConfig {
    &p.desired
        .as_ref()
        .unwrap()
        .dns
        .first()
        .unwrap()
        .spec
        .config
        .0
}

/// The tests' standard Infra ([`InfraBuilder::new`]: 192.0.2.0/24, every
/// component enabled) named `name` in `ns`.
pub fn infra(ns: &str, name: &str) -> Infra {
    InfraBuilder::new().named(ns, name).build()
}

/// The Infra the component tests vary (`vlan` in `oooi` at generation 1,
/// the gateway left to default, one upstream resolver), as a builder.
pub fn component_infra() -> InfraBuilder {
    InfraBuilder::new()
        .generation(1)
        .remove("/spec/networkConfig/gateway")
        .upstreams(&["10.0.0.10"])
}

/// An attachment `name` of HostedCluster `clusters/<hc>` with domain `<hc>.example.com`.
pub fn attachment(ns: &str, name: &str, infra: &str, hc: &str) -> InfraClusterAttachment {
    attachment_yaml(ns, name, infra, hc, hc, "")
}

/// Attachments `c1` and `c2` of Infra `vlan` in `oooi`, for HostedClusters
/// `clusters/c1` and `clusters/c2`.
pub fn two_attachments() -> [InfraClusterAttachment; 2] {
    [
        attachment("oooi", "c1", "vlan", "c1"),
        attachment("oooi", "c2", "vlan", "c2"),
    ]
}

/// An attachment with a given cluster name and extra spec lines (indent 2).
pub fn attachment_yaml(
    ns: &str,
    name: &str,
    infra: &str,
    hc: &str,
    cluster_name: &str,
    extra: &str,
) -> InfraClusterAttachment {
    let text = format!(
        r#"
apiVersion: hostedcluster.densityops.com/v1alpha1
kind: InfraClusterAttachment
metadata: {{name: {name}, namespace: {ns}, uid: "uid-{name}", generation: 1}}
spec:
  infraRef: {{name: {infra}}}
  hostedClusterRef: {{name: {hc}}}
  dns: {{clusterName: {cluster_name}, baseDomain: example.com}}
{extra}
"#
    );
    serde_saphyr::from_str(&text).expect("fixture attachment parses")
}

/// Observed state: per HostedCluster `clusters/<hc>`, one Machine per address.
pub fn observed(workers: &[(&str, &[&str])]) -> Observed {
    let mut o = Observed::default();
    for (hc, addrs) in workers {
        o.clusters.insert(
            HostedClusterKey::new("clusters", *hc),
            ObservedCluster {
                machines: addrs
                    .iter()
                    .enumerate()
                    .map(|(i, a)| ObservedMachine {
                        name: format!("{hc}-m{i}"),
                        addresses: vec![a.to_string()],
                    })
                    .collect(),
                ..ObservedCluster::default()
            },
        );
    }
    o
}

/// A VMI with one interface.
pub fn vmi(name: &str, mac: &str, ips: &[&str]) -> ObservedVmi {
    ObservedVmi {
        name: name.to_string(),
        interfaces: vec![ObservedInterface {
            name: Some("vlan".to_string()),
            mac: Some(mac.to_string()),
            ip_addresses: ips.iter().map(|s| s.to_string()).collect(),
        }],
    }
}

/// Parses an IPv4 address.
pub fn ip(s: &str) -> Ipv4Addr {
    s.parse().expect("fixture address")
}
