//! Public DNS (no I/O): the management-side LoadBalancer Service in front
//! of the Infra's Envoy pods that ExternalDNS publishes, shared by the
//! attachments that name it.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use oooi_vocabulary::labels as keys;

use crate::crd::{Infra, InfraClusterAttachment};
use crate::plan::labels::{APP_NAME, Component, INFRA_LABEL, MANAGED_BY, owner_refs, selector};

/// ExternalDNS's hostname annotation.
pub const EXTERNAL_DNS_HOSTNAME: &str = keys::EXTERNAL_DNS_HOSTNAME;
/// Label marking a management-side public DNS Service.
pub const PUBLIC_DNS_LABEL: &str = keys::PUBLIC_DNS;
/// The public Service name of an attachment with public DNS enabled.
pub fn public_service_name(att: &InfraClusterAttachment) -> Option<String> {
    let p = att.spec.public_dns.as_ref().filter(|p| p.enabled)?;
    Some(p.service_name.clone().unwrap_or_else(|| {
        let name = format!(
            "oooi-public-{}",
            att.metadata.name.as_deref().unwrap_or_default()
        );
        if name.len() <= 63 {
            name
        } else {
            use sha2::Digest;
            let h = hex::encode(sha2::Sha256::digest(name.as_bytes()));
            format!("oooi-public-{}", &h[..20])
        }
    }))
}

/// The hostnames the members publish: `oauth.<domain>` each, `api.<domain>`
/// with `publishApi`; sorted, without duplicates.
pub fn public_hostnames(members: &[&InfraClusterAttachment]) -> Vec<String> {
    let mut names = BTreeSet::new();
    for a in members {
        let Some(p) = a.spec.public_dns.as_ref().filter(|p| p.enabled) else {
            continue;
        };
        let domain = a.spec.domain();
        names.insert(format!("oauth.{domain}"));
        if p.publish_api {
            names.insert(format!("api.{domain}"));
        }
    }
    names.into_iter().collect()
}

/// The management-side public Service `name` in the Infra's namespace,
/// shared by `members` (attachments of that Infra naming it, accepted):
/// LoadBalancer, the Infra's Envoy pods, port 443 only, the hostname
/// annotation listing every member's names. Extra labels and annotations of
/// the members merge in member-name order (the last wins on a clash).
pub fn public_service(
    infra_namespace: &str,
    infra: &str,
    owner: Option<Vec<OwnerReference>>,
    name: &str,
    members: &[&InfraClusterAttachment],
) -> Service {
    let mut members: Vec<&InfraClusterAttachment> = members.to_vec();
    members.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut labels = BTreeMap::new();
    let mut annotations = BTreeMap::new();
    for m in &members {
        if let Some(p) = &m.spec.public_dns {
            labels.extend(p.labels.clone());
            annotations.extend(p.annotations.clone());
        }
    }
    labels.extend([
        (keys::APP_NAME.to_string(), APP_NAME.to_string()),
        (keys::APP_COMPONENT.to_string(), "public-dns".to_string()),
        (keys::APP_INSTANCE.to_string(), infra.to_string()),
        (keys::APP_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
        (INFRA_LABEL.to_string(), infra.to_string()),
        (PUBLIC_DNS_LABEL.to_string(), "true".to_string()),
    ]);
    annotations.insert(
        EXTERNAL_DNS_HOSTNAME.to_string(),
        public_hostnames(&members).join(","),
    );
    Service {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(infra_namespace.to_string()),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: owner,
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            selector: Some(selector(infra, Component::Proxy)),
            ports: Some(vec![ServicePort {
                name: Some("tls-443".into()),
                port: 443,
                target_port: Some(IntOrString::Int(443)),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// The public DNS Services of `infra`: one per Service name that its
/// attachments with public DNS enabled name, counting only those that are
/// `accepted` (by name) and not being deleted; in name order, owned by the
/// Infra. What the attachment reconciler converges (a Service no longer
/// planned is deleted) and `render` prints.
pub fn public_services<'a>(
    infra: &Infra,
    attachments: impl IntoIterator<Item = &'a InfraClusterAttachment>,
    accepted: impl Fn(&str) -> bool,
) -> Vec<Service> {
    let ns = infra.metadata.namespace.as_deref().unwrap_or_default();
    let infra_name = infra.metadata.name.as_deref().unwrap_or_default();
    let mut wanted: BTreeMap<String, Vec<&InfraClusterAttachment>> = BTreeMap::new();
    for a in attachments {
        let name = a.metadata.name.as_deref().unwrap_or_default();
        if a.metadata.namespace.as_deref().unwrap_or_default() != ns
            || a.spec.infra_ref.name != infra_name
            || a.metadata.deletion_timestamp.is_some()
            || !accepted(name)
        {
            continue;
        }
        if let Some(service) = public_service_name(a) {
            wanted.entry(service).or_default().push(a);
        }
    }
    wanted
        .into_iter()
        .map(|(name, members)| public_service(ns, infra_name, owner_refs(infra), &name, &members))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn public(
        name: &str,
        domain: &str,
        service: Option<&str>,
        api: bool,
    ) -> InfraClusterAttachment {
        let mut a: InfraClusterAttachment = serde_json::from_value(json!({
            "apiVersion": "hostedcluster.densityops.com/v1alpha1",
            "kind": "InfraClusterAttachment",
            "metadata": {"name": name, "namespace": "oooi"},
            "spec": {
                "infraRef": {"name": "vlan200"},
                "hostedClusterRef": {"name": name},
                "dns": {"clusterName": domain, "baseDomain": "example.com"}
            }
        }))
        .unwrap();
        a.spec.public_dns = Some(crate::crd::PublicDns {
            enabled: true,
            service_name: service.map(str::to_string),
            publish_api: api,
            labels: BTreeMap::from([("l".to_string(), name.to_string())]),
            annotations: BTreeMap::new(),
        });
        a
    }

    #[test]
    fn public_service_merges_hostnames_sorted_and_deduplicated() {
        let a = public("b", "zeta", Some("shared"), true);
        let b = public("a", "alpha", Some("shared"), false);
        let c = public("c", "alpha", Some("shared"), false);
        assert_eq!(public_service_name(&a).as_deref(), Some("shared"));
        assert_eq!(
            public_service_name(&public("c1", "c1", None, false)).as_deref(),
            Some("oooi-public-c1")
        );
        let s1 = public_service("oooi", "vlan200", None, "shared", &[&a, &b, &c]);
        let s2 = public_service("oooi", "vlan200", None, "shared", &[&c, &a, &b]);
        assert_eq!(s1, s2, "order of members does not matter");
        let ann = s1.metadata.annotations.clone().unwrap();
        assert_eq!(
            ann[EXTERNAL_DNS_HOSTNAME],
            "api.zeta.example.com,oauth.alpha.example.com,oauth.zeta.example.com"
        );
        let spec = s1.spec.unwrap();
        assert_eq!(spec.type_.as_deref(), Some("LoadBalancer"));
        let ports = spec.ports.unwrap();
        assert_eq!(ports.len(), 1, "only 443");
        assert_eq!(ports[0].port, 443);
        assert_eq!(
            spec.selector.unwrap(),
            selector("vlan200", Component::Proxy)
        );
        let labels = s1.metadata.labels.unwrap();
        assert_eq!(labels[PUBLIC_DNS_LABEL], "true");
        assert_eq!(labels[INFRA_LABEL], "vlan200");
        assert_eq!(labels["l"], "c", "member labels merge in name order");
        let mut off = public("d", "d", None, false);
        off.spec.public_dns.as_mut().unwrap().enabled = false;
        assert_eq!(public_service_name(&off), None);
    }

    #[test]
    fn one_public_service_per_name_of_the_accepted_attachments_of_the_infra() {
        // Infra `vlan200` in `oooi`, the one the fixtures' attachments name.
        let mut infra = crate::plan::fixtures::infra();
        infra.metadata.name = Some("vlan200".into());
        let shared_a = public("a", "alpha", Some("shared"), false);
        let shared_b = public("b", "beta", Some("shared"), true);
        let own = public("c", "gamma", None, false);
        let excluded = public("d", "delta", Some("other"), false);
        let mut elsewhere = public("e", "eps", Some("elsewhere"), false);
        elsewhere.spec.infra_ref.name = "vlan300".into();
        let mut going = public("f", "phi", Some("going"), false);
        going.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
        );
        let all = [&shared_a, &shared_b, &own, &excluded, &elsewhere, &going];
        let services = public_services(&infra, all, |n| n != "d");
        let names: Vec<&str> = services
            .iter()
            .map(|s| s.metadata.name.as_deref().unwrap())
            .collect();
        assert_eq!(names, ["oooi-public-c", "shared"]);
        let shared = &services[1];
        assert_eq!(
            shared.metadata.annotations.as_ref().unwrap()[EXTERNAL_DNS_HOSTNAME],
            "api.beta.example.com,oauth.alpha.example.com,oauth.beta.example.com"
        );
        let owner = &shared.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Infra", "uid-infra")
        );
        assert!(public_services(&infra, all, |_| false).is_empty());
    }
}
