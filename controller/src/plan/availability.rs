//! How the DNS and proxy addresses ride out lost nodes: whether an Infra's
//! replicas take over each other's VLAN addresses (an address agent beside
//! each replica, Lease-fenced), and how long the component pods stay bound
//! to a node that stopped answering.
//!
//! Takeover needs a network that lets one pod answer for another pod's
//! address: a Linux bridge or macvlan NetworkAttachmentDefinition does; an
//! OVN-Kubernetes localnet (a ClusterUserDefinedNetwork) enforces port
//! security and answers ARP for a dead pod's port itself, so there the
//! health-aware DNS answers and the fast replacement carry the load.

use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Toleration;

use super::labels::Component;
use super::network::Network;
use crate::crd::{FailoverMode, FloatingAddresses, Infra, ServerAvailability};

/// The taints a lost node gets, which the component pods tolerate only
/// briefly.
pub const NODE_LOSS_TAINTS: [&str; 2] = [
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/not-ready",
];

/// How an Infra's replicas survive the loss of one of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailoverPlan {
    /// Replicas take over each other's addresses (address agents, Leases).
    Takeover,
    /// No takeover: DNS answers with the proxies that serve, and a lost
    /// replica's address is absent until its pod is replaced.
    HealthAwareDns,
}

impl FailoverPlan {
    /// The value shown in the Infra's status.
    pub fn as_str(self) -> &'static str {
        match self {
            FailoverPlan::Takeover => "Takeover",
            FailoverPlan::HealthAwareDns => "HealthAwareDNS",
        }
    }

    /// What a lost node costs the workers in this mode, for the status.
    pub fn node_loss(self, toleration_seconds: u32) -> String {
        match self {
            FailoverPlan::Takeover => format!(
                "a lost replica's VLAN address moves to a live replica within about 2 s; \
                 its pod is replaced about {toleration_seconds} s after its node goes NotReady"
            ),
            FailoverPlan::HealthAwareDns => format!(
                "new lookups skip a lost proxy after about 2 s; clients that resolved it or list \
                 the lost DNS address first wait their own timeouts until the pod is replaced, \
                 about {toleration_seconds} s after its node goes NotReady"
            ),
        }
    }
}

/// The failover mode an Infra runs in.
pub fn failover(infra: &Infra) -> FailoverPlan {
    let on = match infra.spec.availability.failover {
        FailoverMode::Enabled => true,
        FailoverMode::Disabled => false,
        FailoverMode::Auto => infra
            .spec
            .network_config
            .cluster_user_defined_network
            .is_none(),
    };
    match on {
        true => FailoverPlan::Takeover,
        false => FailoverPlan::HealthAwareDns,
    }
}

/// Seconds the component pods tolerate a lost node.
pub fn toleration_seconds(infra: &Infra) -> u32 {
    infra
        .spec
        .availability
        .node_loss_toleration_seconds
        .unwrap_or(crate::crd::DEFAULT_NODE_LOSS_TOLERATION_SECONDS)
}

/// The Lease name prefix of a component's addresses: `<infra>-<component>`.
pub fn lease_prefix(infra_name: &str, component: Component) -> String {
    component.derived_name(infra_name)
}

/// The Lease that fences one address: `<prefix>-<a>-<b>-<c>-<d>`.
pub fn lease_name(prefix: &str, address: Ipv4Addr) -> String {
    let [a, b, c, d] = address.octets();
    format!("{prefix}-{a}-{b}-{c}-{d}")
}

/// The availability of each server of a component whose replicas hold
/// `addresses`: floating addresses only with takeover on and more than one
/// replica (a lone replica has nobody to take its address over).
pub fn server_availability(
    infra: &Infra,
    network: &Network,
    component: Component,
    addresses: &[Ipv4Addr],
) -> ServerAvailability {
    let floating = (component != Component::Dhcp
        && failover(infra) == FailoverPlan::Takeover
        && addresses.len() > 1)
        .then(|| FloatingAddresses {
            addresses: addresses.iter().map(|a| network.with_prefix(*a)).collect(),
            lease_prefix: lease_prefix(
                infra.metadata.name.as_deref().unwrap_or_default(),
                component,
            ),
        });
    ServerAvailability {
        node_loss_toleration_seconds: toleration_seconds(infra),
        floating,
    }
}

/// The pod tolerations of a lost node, bounded by `seconds`.
pub fn tolerations(seconds: u32) -> Vec<Toleration> {
    NODE_LOSS_TAINTS
        .iter()
        .map(|key| Toleration {
            key: Some(key.to_string()),
            operator: Some("Exists".to_string()),
            effect: Some("NoExecute".to_string()),
            toleration_seconds: Some(i64::from(seconds)),
            ..Toleration::default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{Availability, ClusterUserDefinedNetworkConfig};
    use crate::plan::fixtures;

    fn with(failover: FailoverMode, cudn: bool) -> Infra {
        let mut infra = fixtures::infra();
        infra.spec.availability = Availability {
            failover,
            node_loss_toleration_seconds: None,
        };
        if cudn {
            infra.spec.network_config.network_attachment_definition = None;
            infra.spec.network_config.cluster_user_defined_network =
                Some(ClusterUserDefinedNetworkConfig {
                    name: "vlan".to_string(),
                    localnet: None,
                });
        }
        infra
    }

    #[test]
    fn auto_takes_over_on_a_nad_and_not_on_an_ovn_localnet() {
        assert_eq!(
            failover(&with(FailoverMode::Auto, false)),
            FailoverPlan::Takeover
        );
        assert_eq!(
            failover(&with(FailoverMode::Auto, true)),
            FailoverPlan::HealthAwareDns
        );
        assert_eq!(
            failover(&with(FailoverMode::Disabled, false)),
            FailoverPlan::HealthAwareDns
        );
        assert_eq!(
            failover(&with(FailoverMode::Enabled, true)),
            FailoverPlan::Takeover
        );
    }

    #[test]
    fn only_several_dns_or_proxy_replicas_get_floating_addresses() {
        let infra = with(FailoverMode::Auto, false);
        let network = fixtures::network();
        let two = [Ipv4Addr::new(192, 0, 2, 4), Ipv4Addr::new(192, 0, 2, 5)];
        let a = server_availability(&infra, &network, Component::Proxy, &two);
        let floating = a.floating.expect("two proxies float");
        assert_eq!(floating.addresses, vec!["192.0.2.4/24", "192.0.2.5/24"]);
        assert_eq!(floating.lease_prefix, "infra-proxy");
        assert!(
            server_availability(&infra, &network, Component::Proxy, &two[..1])
                .floating
                .is_none()
        );
        assert!(
            server_availability(&infra, &network, Component::Dhcp, &two)
                .floating
                .is_none()
        );
        let off = with(FailoverMode::Disabled, false);
        assert!(
            server_availability(&off, &network, Component::Dns, &two)
                .floating
                .is_none()
        );
    }

    #[test]
    fn pods_tolerate_a_lost_node_for_the_configured_time_only() {
        let mut infra = with(FailoverMode::Auto, false);
        assert_eq!(toleration_seconds(&infra), 15);
        infra.spec.availability.node_loss_toleration_seconds = Some(40);
        let t = tolerations(toleration_seconds(&infra));
        assert_eq!(t.len(), 2);
        assert!(
            t.iter()
                .all(|t| t.toleration_seconds == Some(40)
                    && t.effect.as_deref() == Some("NoExecute"))
        );
        let keys: Vec<_> = t.iter().filter_map(|t| t.key.as_deref()).collect();
        assert_eq!(keys, NODE_LOSS_TAINTS);
    }

    #[test]
    fn lease_names_carry_the_address() {
        assert_eq!(
            lease_name("lab-proxy", Ipv4Addr::new(192, 0, 2, 4)),
            "lab-proxy-192-0-2-4"
        );
    }
}
