//! Inputs the planners' unit tests share: the Infra network
//! 192.0.2.0/24 (gateway .1, DHCP .2 with pool .100-.199, DNS .3, proxy .4),
//! the Infra from the tests' one builder ([`crate::testing`]) and
//! attachments built from JSON, so serde defaults apply as in the cluster.

#![allow(clippy::unwrap_used)]

use std::net::{IpAddr, Ipv4Addr};

use oooi_vocabulary::AddressRange;

use serde_json::json;

use crate::crd::InfraClusterAttachment;
use crate::plan::infra::network::Network;
use crate::plan::infra::observed::ObservedInterface;
use crate::plan::infra::observed::{
    HostedClusterKey, ObservedCluster, ObservedMachine, ObservedVmi,
};
use crate::testing::InfraBuilder;

/// An address of 192.0.2.0/24.
pub fn ip(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(192, 0, 2, last)
}

/// [`ip`] as the planners carry it (either family).
pub fn addr(last: u8) -> IpAddr {
    IpAddr::V4(ip(last))
}

/// The Infra network every unit test plans on.
pub fn network() -> Network {
    Network {
        cidr: "192.0.2.0/24".parse().unwrap(),
        gateway: ip(1).into(),
        nad: "vlan".into(),
        nad_namespace: "oooi".into(),
        upstreams: vec!["10.0.0.10:53".parse().unwrap()],
        resolv_conf: false,
        dhcp: Some((
            vec![ip(2).into()],
            AddressRange::new(ip(100).into(), ip(199).into()).unwrap(),
        )),
        dns: vec![ip(3).into()],
        proxy: vec![ip(4).into()],
    }
}

/// Attachment `name` of Infra `vlan200` in namespace `oooi`, for
/// HostedCluster `clusters/<cluster>`, domain `<cluster>.example.com`, with
/// `extra` merged into its spec.
pub fn attachment(name: &str, cluster: &str, extra: serde_json::Value) -> InfraClusterAttachment {
    let mut spec = json!({
        "infraRef": {"name": "vlan200"},
        "hostedClusterRef": {"name": cluster},
        "dns": {"clusterName": cluster, "baseDomain": "example.com"}
    });
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    serde_json::from_value(json!({
        "apiVersion": "hostedcluster.densityops.com/v1alpha1",
        "kind": "InfraClusterAttachment",
        "metadata": {"name": name, "namespace": "oooi"},
        "spec": spec,
    }))
    .unwrap()
}

/// The key of HostedCluster `clusters/<name>`.
pub fn cluster_key(name: &str) -> HostedClusterKey {
    HostedClusterKey::new("clusters", name)
}

/// A Machine with `addresses`.
pub fn machine(name: &str, addresses: &[&str]) -> ObservedMachine {
    ObservedMachine {
        name: name.into(),
        addresses: addresses.iter().map(|a| a.to_string()).collect(),
    }
}

/// A VMI with one interface (`mac`, `addresses`).
pub fn vmi(name: &str, mac: Option<&str>, addresses: &[&str]) -> ObservedVmi {
    ObservedVmi {
        name: name.into(),
        interfaces: vec![ObservedInterface {
            name: Some("vlan".into()),
            mac: mac.map(str::to_string),
            ip_addresses: addresses.iter().map(|a| a.to_string()).collect(),
        }],
    }
}

/// A cluster with these Machines and VMIs.
pub fn cluster(machines: Vec<ObservedMachine>, vmis: Vec<ObservedVmi>) -> ObservedCluster {
    ObservedCluster {
        machines,
        vmis,
        ..ObservedCluster::default()
    }
}

/// The Infra the planners' unit tests start from: the shared builder's
/// Infra `vlan` in `oooi` on [`network`]'s VLAN (a NetworkAttachmentDefinition
/// `vlan`), one server per component, with no upstream resolver listed and
/// no generation.
pub fn infra_builder() -> InfraBuilder {
    InfraBuilder::new()
        .remove("/metadata/generation")
        .remove("/spec/networkConfig/dnsServers")
}

/// [`infra_builder`]'s Infra, named `infra`.
pub fn infra() -> crate::crd::Infra {
    infra_builder().named("oooi", "infra").build()
}

/// [`infra_builder`]'s Infra whose DHCP addresses are `addresses`
/// (`serverIP` and `serverIPs` as given, e.g. `{"serverIPs": [...]}`).
pub fn infra_with_dhcp(addresses: serde_json::Value) -> crate::crd::Infra {
    infra_builder()
        .remove("/spec/infraComponents/dhcp/serverIP")
        .dhcp(addresses)
        .build()
}
