//! Attachments onto their Infra: selection, deterministic order and
//! conflicts between attachments; the per-attachment checks live in
//! [`crate::plan::infra::attachments`], worker addresses in [`crate::plan::infra::workers`], DHCP
//! reservations in [`crate::plan::infra::reservations`], apps pools in
//! [`crate::plan::infra::apps_pools`].
//!
//! Rules:
//! - An attachment belongs to the Infra its `infraRef` names in the same
//!   namespace; one being deleted is left out. Order is by name.
//! - A spec the schema cannot check (service names, SNI, namespace length) is
//!   checked here; a bad one excludes the attachment (`InvalidSpec`, field named).
//! - Two attachments of one HostedCluster, or with one domain, or with one
//!   explicit SNI on one port, are all excluded and reported (naming the others).
//! - Worker addresses: IPv4 addresses of the cluster's Machines inside the
//!   Infra CIDR; for a VMI with no such Machine address (no Machine of that
//!   name, or one without addresses yet), the VMI's interface addresses.
//! - An address claimed by two accepted attachments loses its source-scoped
//!   (alias and no-SNI) routes and its DHCP reservation in both; everything
//!   else of both attachments stays. (With `isolation: Strict` it is not a
//!   worker address either, so it is not allowed on that cluster's names.)
//! - `isolation: Strict` with no worker address known yet is reported as
//!   `StrictIsolationPending` (Degraded); see `proxy` for what the routes do.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crate::crd::InfraClusterAttachment;
use crate::plan::infra::apps_pools::check_apps_pools;
use crate::plan::infra::attachments::{AttachmentOutcome, Exclusion, resolve};
use crate::plan::infra::network::Network;
use crate::plan::infra::observed::Observed;
use crate::plan::infra::reservations::{known_clients, reservations, retain_unique};
use crate::plan::infra::workers::{split_conflicts, worker_addresses};

/// Marks every member of a group of more than one as excluded.
fn exclude_groups<K: Ord>(
    outcomes: &mut [AttachmentOutcome],
    key: impl Fn(&AttachmentOutcome) -> Vec<K>,
    make: impl Fn(Vec<String>) -> Exclusion,
) {
    let mut groups: BTreeMap<K, Vec<usize>> = BTreeMap::new();
    for (i, o) in outcomes.iter().enumerate() {
        if matches!(o.exclusion, Some(Exclusion::InvalidSpec(_))) {
            continue;
        }
        for k in key(o) {
            groups.entry(k).or_default().push(i);
        }
    }
    let mut others: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    for members in groups.values().filter(|m| m.len() > 1) {
        for &i in members {
            let entry = others.entry(i).or_default();
            for &j in members {
                if j != i {
                    entry.insert(outcomes[j].name.clone());
                }
            }
        }
    }
    for (i, names) in others {
        if outcomes[i].exclusion.is_none() {
            outcomes[i].exclusion = Some(make(names.into_iter().collect()));
        }
    }
}

/// Aggregates the attachments of Infra `infra_name` in `namespace`.
///
/// `network` is the Infra's parsed network (`None` when its spec is invalid:
/// then attachments are still checked against each other but get no worker
/// addresses). The result holds only the attachments of this Infra, ordered
/// by name.
pub fn aggregate(
    namespace: &str,
    infra_name: &str,
    network: Option<&Network>,
    attachments: &[InfraClusterAttachment],
    observed: &Observed,
) -> Vec<AttachmentOutcome> {
    let mut selected: Vec<&InfraClusterAttachment> = attachments
        .iter()
        .filter(|a| {
            a.metadata.namespace.as_deref() == Some(namespace)
                && a.spec.infra_ref.name == infra_name
                && a.metadata.deletion_timestamp.is_none()
        })
        .collect();
    selected.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));

    let mut outcomes: Vec<AttachmentOutcome> = selected
        .iter()
        .map(|a| {
            let (mut o, err) = resolve(a);
            o.exclusion = err.map(Exclusion::InvalidSpec);
            o
        })
        .collect();

    exclude_groups(
        &mut outcomes,
        |o| vec![o.hosted_cluster.clone()],
        Exclusion::DuplicateHostedCluster,
    );
    exclude_groups(
        &mut outcomes,
        |o| vec![o.domain.clone()],
        Exclusion::DuplicateDomain,
    );
    // Explicit SNI names may leave the domain; two attachments must not share one.
    exclude_groups(
        &mut outcomes,
        |o| {
            let set: BTreeSet<(u16, String)> =
                o.services.iter().map(|s| (s.port, s.sni.clone())).collect();
            set.into_iter().collect()
        },
        Exclusion::DuplicateSni,
    );
    for o in &mut outcomes {
        if !o.accepted() {
            o.services.clear();
        }
    }

    let Some(network) = network else {
        return outcomes;
    };

    // Worker addresses and reservations of accepted attachments, then conflicts.
    let mut claims: BTreeMap<IpAddr, usize> = BTreeMap::new();
    let mut mac_claims: BTreeMap<String, usize> = BTreeMap::new();
    let mut ip_claims: BTreeMap<IpAddr, usize> = BTreeMap::new();
    for o in outcomes.iter_mut().filter(|o| o.accepted()) {
        o.worker_addresses = worker_addresses(network, observed, &o.hosted_cluster);
        o.reservations = reservations(network, observed, &o.hosted_cluster);
        o.known_clients = known_clients(observed, &o.hosted_cluster);
        for a in &o.worker_addresses {
            *claims.entry(*a).or_default() += 1;
        }
        let macs: BTreeSet<&String> = o.reservations.iter().map(|r| &r.mac).collect();
        for m in macs {
            *mac_claims.entry(m.clone()).or_default() += 1;
        }
        let ips: BTreeSet<IpAddr> = o.reservations.iter().map(|r| r.ip).collect();
        for ip in ips {
            *ip_claims.entry(ip).or_default() += 1;
        }
    }
    for o in outcomes.iter_mut().filter(|o| o.accepted()) {
        let (own, shared) = split_conflicts(&o.worker_addresses, &claims);
        o.worker_addresses = own;
        o.conflicting_addresses = shared;
        // A MAC or an address seen twice (across clusters or within one)
        // cannot be reserved: the DHCP config would be rejected whole.
        retain_unique(&mut o.reservations, &mac_claims, &ip_claims, &claims);
    }

    check_apps_pools(network, &selected, &mut outcomes, observed);
    outcomes
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::plan::fixtures::{attachment, network};

    fn names(out: &[AttachmentOutcome]) -> Vec<(&str, Option<&'static str>)> {
        out.iter()
            .map(|o| (o.name.as_str(), o.exclusion.as_ref().map(|e| e.reason())))
            .collect()
    }

    #[test]
    fn only_this_infras_live_attachments_are_selected_in_name_order() {
        let mut other_ns = attachment("x", "cx", json!({}));
        other_ns.metadata.namespace = Some("elsewhere".into());
        let mut other_infra = attachment("y", "cy", json!({}));
        other_infra.spec.infra_ref.name = "vlan300".into();
        let mut deleted = attachment("z", "cz", json!({}));
        deleted.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-12-03T08:00:00Z".parse().unwrap(),
            ));
        let atts = [
            attachment("b", "c2", json!({})),
            other_ns,
            other_infra,
            deleted,
            attachment("a", "c1", json!({})),
        ];
        let out = aggregate(
            "oooi",
            "vlan200",
            Some(&network()),
            &atts,
            &Observed::default(),
        );
        assert_eq!(names(&out), [("a", None), ("b", None)]);
    }

    #[test]
    fn attachments_sharing_a_cluster_or_a_domain_are_all_excluded() {
        let mut same_domain = attachment("c", "c3", json!({}));
        same_domain.spec.dns.cluster_name = "c1".into();
        let atts = [
            attachment("a", "c1", json!({})),
            attachment("b", "c1", json!({})),
            same_domain,
            attachment("d", "c4", json!({})),
        ];
        let out = aggregate("oooi", "vlan200", None, &atts, &Observed::default());
        assert_eq!(
            names(&out),
            [
                ("a", Some("DuplicateHostedCluster")),
                ("b", Some("DuplicateHostedCluster")),
                ("c", Some("DuplicateDomain")),
                ("d", None),
            ]
        );
        assert_eq!(
            out[0]
                .exclusion
                .as_ref()
                .map(Exclusion::message)
                .unwrap_or_default(),
            "spec.hostedClusterRef: the same HostedCluster is attached by b; all are excluded"
        );
        assert!(
            out[0].services.is_empty(),
            "an excluded attachment routes nothing"
        );
    }
}
