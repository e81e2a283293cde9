//! How the component pods ride out a lost node: they tolerate an
//! unreachable or not-ready node only briefly (Kubernetes' default is
//! 300 s), so a lost node's DHCP, DNS and proxy pods are replaced in about a
//! minute instead of about six.

use k8s_openapi::api::core::v1::Toleration;

use crate::crd::{Infra, ServerAvailability};

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

/// The availability of each server derived from `infra`.
pub fn server_availability(infra: &Infra) -> ServerAvailability {
    ServerAvailability {
        node_loss_toleration_seconds: toleration_seconds(infra),
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
    use crate::plan::fixtures;

    #[test]
    fn pods_tolerate_a_lost_node_for_the_configured_time_only() {
        let mut infra = fixtures::infra();
        assert_eq!(toleration_seconds(&infra), 15);
        assert_eq!(server_availability(&infra).node_loss_toleration_seconds, 15);
        infra.spec.availability.node_loss_toleration_seconds = Some(40);
        let t = tolerations(server_availability(&infra).node_loss_toleration_seconds);
        assert_eq!(t.len(), 2);
        assert!(t.iter().all(|t| t.toleration_seconds == Some(40)
            && t.effect.as_deref() == Some("NoExecute")
            && t.operator.as_deref() == Some("Exists")));
        let keys: Vec<_> = t.iter().filter_map(|t| t.key.as_deref()).collect();
        assert_eq!(keys, NODE_LOSS_TAINTS);
    }
}
