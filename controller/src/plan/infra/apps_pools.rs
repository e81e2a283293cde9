//! Apps ingress pools of the attachments: each range must lie inside the
//! Infra CIDR, outside the DHCP pool and the infra addresses, and apart from
//! other attachments' ranges. A bad pool is reported on its attachment (it
//! does not exclude the attachment).

use oooi_vocabulary::{AddressRange, FieldError};

use crate::crd::InfraClusterAttachment;
use crate::plan::infra::attachments::AttachmentOutcome;
use crate::plan::infra::network::Network;
use crate::plan::infra::observed::Observed;

/// Checks the pools of `selected` (in the order of `outcomes`): inside the CIDR, outside the DHCP pool and the infra
/// addresses, disjoint from other attachments. A bad pool is reported on its
/// attachment (it does not exclude the attachment). The VIP is used only when
/// apps ingress is enabled and the observed VIP lies inside the CIDR.
pub fn check_apps_pools(
    network: &Network,
    selected: &[&InfraClusterAttachment],
    outcomes: &mut [AttachmentOutcome],
    observed: &Observed,
) {
    let mut taken: Vec<(usize, AddressRange, String)> = Vec::new();
    for (i, att) in selected.iter().enumerate() {
        let Some(apps) = att.spec.apps_ingress.as_ref().filter(|a| a.enabled) else {
            continue;
        };
        if !outcomes[i].accepted() {
            continue;
        }
        let mut errors = Vec::new();
        for (j, s) in apps.metallb.addresses.iter().enumerate() {
            let field = format!("spec.appsIngress.metallb.addresses[{j}]");
            let Some(range) = AddressRange::parse(s) else {
                errors.push(FieldError::new(
                    field,
                    format!("`{s}` is not a range or CIDR"),
                ));
                continue;
            };
            if !network.is_host(range.start()) || !network.is_host(range.end()) {
                errors.push(FieldError::new(
                    field,
                    format!("{range} is not inside {}", network.cidr),
                ));
                continue;
            }
            if let Some((_, pool)) = &network.dhcp
                && pool.overlaps(&range)
            {
                errors.push(FieldError::new(
                    field,
                    format!("{range} overlaps the DHCP pool {pool}"),
                ));
                continue;
            }
            if let Some(a) = network
                .infra_addresses()
                .into_iter()
                .find(|a| range.contains(*a))
            {
                errors.push(FieldError::new(
                    field,
                    format!("{range} contains the infra address {a}"),
                ));
                continue;
            }
            if let Some((k, _, other)) = taken.iter().find(|(_, r, _)| r.overlaps(&range)) {
                let other_name = outcomes[*k].name.clone();
                errors.push(FieldError::new(
                    field,
                    format!("{range} overlaps {other} of attachment {other_name}"),
                ));
                continue;
            }
            taken.push((i, range, format!("{range}")));
        }
        let vip = observed
            .clusters
            .get(&outcomes[i].hosted_cluster)
            .and_then(|c| c.apps_vip)
            .filter(|v| network.is_host(*v));
        outcomes[i].apps_vip = vip;
        outcomes[i].apps_to_pods = vip.is_some() && apps.publish_to_pod_network;
        outcomes[i].apps_ingress_errors = errors;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;
    use crate::plan::fixtures::{attachment, cluster, cluster_key, ip, network};

    fn with_pool(name: &str, addresses: &[&str], to_pods: bool) -> InfraClusterAttachment {
        attachment(
            name,
            name,
            json!({"appsIngress": {
                "enabled": true,
                "publishToPodNetwork": to_pods,
                "metallb": {"addresses": addresses}
            }}),
        )
    }

    fn check(atts: &[InfraClusterAttachment], observed: &Observed) -> Vec<AttachmentOutcome> {
        let selected: Vec<&InfraClusterAttachment> = atts.iter().collect();
        let mut outcomes: Vec<AttachmentOutcome> =
            atts.iter().map(AttachmentOutcome::from_spec).collect();
        check_apps_pools(&network(), &selected, &mut outcomes, observed);
        outcomes
    }

    fn errors(o: &AttachmentOutcome) -> Vec<String> {
        o.apps_ingress_errors
            .iter()
            .map(|e| e.to_string())
            .collect()
    }

    #[test]
    fn a_pool_must_lie_inside_the_cidr_apart_from_dhcp_infra_and_other_pools() {
        let atts = [
            with_pool(
                "a",
                &[
                    "192.0.2.200-192.0.2.209",
                    "198.51.100.0/28",
                    "192.0.2.190-192.0.2.201",
                    "192.0.2.3",
                    "not-a-range",
                ],
                false,
            ),
            with_pool("b", &["192.0.2.205-192.0.2.215", "192.0.2.220/30"], false),
        ];
        let out = check(&atts, &Observed::default());
        assert_eq!(
            errors(&out[0]),
            vec![
                "spec.appsIngress.metallb.addresses[1]: 198.51.100.0-198.51.100.15 is not inside 192.0.2.0/24",
                "spec.appsIngress.metallb.addresses[2]: 192.0.2.190-192.0.2.201 overlaps the DHCP pool 192.0.2.100-192.0.2.199",
                "spec.appsIngress.metallb.addresses[3]: 192.0.2.3-192.0.2.3 contains the infra address 192.0.2.3",
                "spec.appsIngress.metallb.addresses[4]: `not-a-range` is not a range or CIDR",
            ]
        );
        assert_eq!(
            errors(&out[1]),
            vec![
                "spec.appsIngress.metallb.addresses[0]: 192.0.2.205-192.0.2.215 overlaps 192.0.2.200-192.0.2.209 of attachment a"
            ]
        );
    }

    #[test]
    fn only_a_vip_inside_the_cidr_is_used() {
        let atts = [
            with_pool("inside", &["192.0.2.200-192.0.2.209"], true),
            with_pool("outside", &["192.0.2.210-192.0.2.219"], true),
        ];
        let with_vip = |vip| crate::plan::ObservedCluster {
            apps_vip: Some(vip),
            ..cluster(vec![], vec![])
        };
        let observed = Observed {
            clusters: BTreeMap::from([
                (cluster_key("inside"), with_vip(ip(200).into())),
                (
                    cluster_key("outside"),
                    with_vip("198.51.100.7".parse().unwrap()),
                ),
            ]),
            ..Observed::default()
        };
        let out = check(&atts, &observed);
        assert_eq!(
            (out[0].apps_vip, out[0].apps_to_pods),
            (Some(ip(200).into()), true)
        );
        assert_eq!((out[1].apps_vip, out[1].apps_to_pods), (None, false));
    }
}
