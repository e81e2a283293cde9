//! How the component pods ride out a lost node: they tolerate an
//! unreachable or not-ready node only briefly (Kubernetes' default is
//! 300 s), so a lost node's DHCP, DNS and proxy pods are replaced in about a
//! minute instead of about six; and, where the VLAN lets a pod announce
//! another pod's address, an address agent beside each DNS and proxy replica
//! moves a lost replica's address to a live one (docs/failover.md).

use oooi_vocabulary::InterfaceAddress;

use k8s_openapi::api::core::v1::Toleration;

use crate::crd::{AddressTakeover, FailoverMode, FailoverStatus, Infra, ServerAvailability};
use crate::plan::labels::Component;

/// The taints a lost node gets, which the component pods tolerate only
/// briefly.
pub const NODE_LOSS_TAINTS: [&str; 2] = [
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/not-ready",
];

/// Seconds the component pods tolerate a lost node.
pub fn toleration_seconds(infra: &Infra) -> u32 {
    infra
        .spec
        .availability
        .node_loss_toleration_seconds
        .unwrap_or(crate::crd::DEFAULT_NODE_LOSS_TOLERATION_SECONDS)
}

/// The failover `infra` runs: `Auto` resolved by the kind of VLAN network
/// (a ClusterUserDefinedNetwork is OVN-Kubernetes localnet, whose port
/// security drops what a pod sends from an address it was not given).
pub fn failover_mode(infra: &Infra) -> FailoverMode {
    match infra.spec.availability.failover.unwrap_or_default() {
        FailoverMode::Auto
            if infra
                .spec
                .network_config
                .cluster_user_defined_network
                .is_some() =>
        {
            FailoverMode::Off
        }
        FailoverMode::Auto => FailoverMode::AddressTakeover,
        other => other,
    }
}

/// What `status.failover` says of `infra`, ending with the Pod Security
/// level its namespace needs ([`namespace_pod_security`]).
pub fn failover_status(infra: &Infra) -> FailoverStatus {
    let mut status = failover_mode_status(infra);
    status.message = format!("{}; {}", status.message, namespace_pod_security(infra));
    status
}

/// The Pod Security level the namespace of `infra` needs, and why: the
/// address agent (root, NET_ADMIN and NET_RAW) runs only where a DNS or
/// proxy server takes over two or more addresses; every other pod meets
/// `restricted`.
pub fn namespace_pod_security(infra: &Infra) -> String {
    let agent =
        failover_mode(infra) == FailoverMode::AddressTakeover && has_several_addresses(infra);
    if agent {
        "Pod Security: the namespace needs level privileged (the address agent moves the DNS or proxy addresses as root with NET_ADMIN and NET_RAW; one address per component, or failover Off, keeps it at restricted)".to_string()
    } else {
        "Pod Security: every pod meets level restricted".to_string()
    }
}

fn failover_mode_status(infra: &Infra) -> FailoverStatus {
    let asked = infra.spec.availability.failover.unwrap_or_default();
    let seconds = toleration_seconds(infra);
    match failover_mode(infra) {
        FailoverMode::AddressTakeover => FailoverStatus {
            mode: "AddressTakeover".to_string(),
            message: format!(
                "{}a live replica takes over a lost DNS or proxy replica's VLAN address within about 2 s (one Lease per address); the lost pod is replaced after {seconds} s",
                match asked {
                    FailoverMode::Auto => "Auto on a NetworkAttachmentDefinition: ",
                    _ => "",
                }
            ),
        },
        _ => FailoverStatus {
            mode: "Off".to_string(),
            message: format!(
                "{}addresses stay with their replica: DNS answers leave out a proxy that fails its check within about 2 s, a lookup sent to a lost DNS replica waits for the resolver's timeout (5 s without resolver options), and the lost pod is replaced after {seconds} s",
                match asked {
                    FailoverMode::Auto =>
                        "Auto on a ClusterUserDefinedNetwork (OVN-Kubernetes localnet: no address takeover): ",
                    _ => "",
                }
            ),
        },
    }
}

/// The availability of the servers of `component` derived from `infra`,
/// whose VLAN addresses are `addresses` (`ip/prefix`, in the Infra's
/// order). DHCP never moves addresses (its pair has its own failover), and
/// a component with one address has no replica to take it over.
pub fn server_availability(
    infra: &Infra,
    component: Component,
    addresses: &[InterfaceAddress],
) -> ServerAvailability {
    let takeover = component != Component::Dhcp
        && addresses.len() > 1
        && failover_mode(infra) == FailoverMode::AddressTakeover;
    ServerAvailability {
        node_loss_toleration_seconds: toleration_seconds(infra),
        address_takeover: takeover.then(|| AddressTakeover {
            lease_prefix: component
                .derived_name(infra.metadata.name.as_deref().unwrap_or_default()),
            addresses: addresses.to_vec(),
        }),
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

/// True when a DNS or proxy component of `infra` has two or more
/// addresses: the components whose replicas may run an address agent
/// (one address leaves nobody to take it over).
pub fn has_several_addresses(infra: &Infra) -> bool {
    let c = &infra.spec.infra_components;
    [
        c.dns.server_ip.iter().chain(&c.dns.server_ips),
        c.proxy.server_ip.iter().chain(&c.proxy.server_ips),
    ]
    .into_iter()
    .any(|ips| ips.count() > 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::fixtures;

    fn two_replicas() -> Infra {
        let mut infra = fixtures::infra();
        let c = &mut infra.spec.infra_components;
        c.dns.server_ip = None;
        c.dns.server_ips = vec![fixtures::ip(3).into(), fixtures::ip(6).into()];
        c.proxy.server_ip = None;
        c.proxy.server_ips = vec![fixtures::ip(4).into(), fixtures::ip(7).into()];
        infra
    }

    fn cudn(infra: &mut Infra) {
        infra.spec.network_config.network_attachment_definition = None;
        infra.spec.network_config.cluster_user_defined_network =
            Some(serde_json::from_value(serde_json::json!({"name": "vlan"})).unwrap());
    }

    #[test]
    fn the_status_names_the_pod_security_level_the_namespace_needs() {
        let infra = two_replicas();
        let st = failover_status(&infra);
        assert_eq!(st.mode, "AddressTakeover");
        assert!(
            st.message.ends_with(&namespace_pod_security(&infra)),
            "{}",
            st.message
        );
        assert!(
            st.message.contains("needs level privileged"),
            "{}",
            st.message
        );
        // One address per component: no agent, restricted.
        let single = fixtures::infra();
        assert!(
            failover_status(&single)
                .message
                .contains("every pod meets level restricted"),
            "{}",
            failover_status(&single).message
        );
        // Failover off on a CUDN: restricted, whatever the addresses.
        let mut off = two_replicas();
        cudn(&mut off);
        assert!(namespace_pod_security(&off).contains("restricted"));
        assert!(!namespace_pod_security(&off).contains("privileged"));
    }

    #[test]
    fn pods_tolerate_a_lost_node_for_the_configured_time_only() {
        let mut infra = fixtures::infra();
        assert_eq!(toleration_seconds(&infra), 15);
        let a = server_availability(&infra, Component::Dns, &[]);
        assert_eq!(a.node_loss_toleration_seconds, 15);
        infra.spec.availability.node_loss_toleration_seconds = Some(40);
        let t = tolerations(
            server_availability(&infra, Component::Dns, &[]).node_loss_toleration_seconds,
        );
        assert_eq!(t.len(), 2);
        assert!(t.iter().all(|t| t.toleration_seconds == Some(40)
            && t.effect.as_deref() == Some("NoExecute")
            && t.operator.as_deref() == Some("Exists")));
        let keys: Vec<_> = t.iter().filter_map(|t| t.key.as_deref()).collect();
        assert_eq!(keys, NODE_LOSS_TAINTS);
    }

    #[test]
    fn auto_takes_over_on_a_nad_and_stays_off_on_a_localnet_network() {
        let mut infra = two_replicas();
        assert_eq!(failover_mode(&infra), FailoverMode::AddressTakeover);
        assert_eq!(failover_status(&infra).mode, "AddressTakeover");
        assert!(
            failover_status(&infra)
                .message
                .starts_with("Auto on a NetworkAttachmentDefinition")
        );
        cudn(&mut infra);
        assert_eq!(failover_mode(&infra), FailoverMode::Off);
        let status = failover_status(&infra);
        assert_eq!(status.mode, "Off");
        assert!(
            status.message.contains("ClusterUserDefinedNetwork"),
            "{}",
            status.message
        );
        assert!(
            status.message.contains("replaced after 15 s"),
            "{}",
            status.message
        );
        // Asked for explicitly: taken as written, whatever the network.
        infra.spec.availability.failover = Some(FailoverMode::AddressTakeover);
        assert_eq!(failover_mode(&infra), FailoverMode::AddressTakeover);
        let mut nad = two_replicas();
        nad.spec.availability.failover = Some(FailoverMode::Off);
        assert_eq!(failover_mode(&nad), FailoverMode::Off);
        assert!(!failover_status(&nad).message.starts_with("Auto"));
    }

    #[test]
    fn takeover_names_every_address_of_the_component_and_one_lease_prefix() {
        let infra = two_replicas();
        let addresses = vec![
            "192.0.2.3/24".parse().unwrap(),
            "192.0.2.6/24".parse().unwrap(),
        ];
        let a = server_availability(&infra, Component::Dns, &addresses);
        let t = a
            .address_takeover
            .expect("takeover on a NAD with two replicas");
        assert_eq!(t.lease_prefix, "infra-dns");
        assert_eq!(t.addresses, addresses);
        let p = server_availability(&infra, Component::Proxy, &addresses);
        assert_eq!(p.address_takeover.unwrap().lease_prefix, "infra-proxy");
    }

    #[test]
    fn no_takeover_for_dhcp_for_one_address_or_when_off() {
        let mut infra = two_replicas();
        let two: Vec<InterfaceAddress> = vec![
            "192.0.2.3/24".parse().unwrap(),
            "192.0.2.6/24".parse().unwrap(),
        ];
        assert!(
            server_availability(&infra, Component::Dhcp, &two)
                .address_takeover
                .is_none()
        );
        assert!(
            server_availability(&infra, Component::Dns, &two[..1])
                .address_takeover
                .is_none(),
            "one replica: nobody to take over"
        );
        infra.spec.availability.failover = Some(FailoverMode::Off);
        assert!(
            server_availability(&infra, Component::Dns, &two)
                .address_takeover
                .is_none()
        );
    }

    #[test]
    fn several_addresses_means_two_or_more_for_dns_or_proxy() {
        assert!(has_several_addresses(&two_replicas()));
        assert!(
            !has_several_addresses(&fixtures::infra()),
            "one address each"
        );
        let mut proxy_only = fixtures::infra();
        proxy_only.spec.infra_components.proxy.server_ips = two_replicas()
            .spec
            .infra_components
            .proxy
            .server_ips
            .clone();
        proxy_only.spec.infra_components.proxy.server_ip = None;
        assert!(has_several_addresses(&proxy_only));
    }
}
