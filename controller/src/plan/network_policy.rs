//! NetworkPolicies the controller plans.
//!
//! - [`push_api_policy`]: beside each ProxyServer, the Envoy pods' push API
//!   (the routing-table endpoint) is reachable on the pod network only from
//!   the controller's namespace; every other port stays open.
//! - [`proxy_ingress_policy`]: in a hosted cluster's control-plane namespace.
//!
//! HyperShift's own policies in a hosted cluster's control-plane namespace
//! admit only known peers, so each accepted attachment gets one policy there
//! that lets the Infra's Envoy pods in. It lives in another namespace than
//! its Infra, so no owner reference can garbage-collect it: it carries
//! labels naming its Infra (with the Infra's namespace) and its attachment,
//! and the finalizers of both delete it.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use oooi_vocabulary::labels as keys;

use super::attachments::AttachmentOutcome;
use super::labels::{Component, child_meta, instance_of, labels, selector};
use crate::crd::ProxyServer;

/// Label every controller pod of the chart carries.
pub const CONTROLLER_COMPONENT: &str = "controller";

fn port_range(protocol: &str, from: i32, to: i32) -> NetworkPolicyPort {
    NetworkPolicyPort {
        protocol: Some(protocol.to_string()),
        port: Some(IntOrString::Int(from)),
        end_port: (to > from).then_some(to),
    }
}

/// The NetworkPolicy of a ProxyServer's Envoy pods: the push port only from
/// pods labelled `app.kubernetes.io/component=controller` in
/// `controller_namespace` and from the same Infra's DNS pods (their health
/// checks of `GET /ready`), every other TCP and UDP port from anywhere (the
/// listeners behind the internal Service; the VLAN leg is a Multus network,
/// which NetworkPolicy does not cover). Probes come from the node, which
/// NetworkPolicy always admits. Named `<proxy>-push`, owned by the
/// ProxyServer.
pub fn push_api_policy(server: &ProxyServer, controller_namespace: &str) -> NetworkPolicy {
    let name = server.metadata.name.clone().unwrap_or_default();
    let instance = instance_of(&server.metadata);
    let push = i32::from(server.spec.push_port);
    let mut open = Vec::new();
    if push > 1 {
        open.push(port_range("TCP", 1, push - 1));
    }
    if push < 65535 {
        open.push(port_range("TCP", push + 1, 65535));
    }
    open.push(port_range("UDP", 1, 65535));
    NetworkPolicy {
        metadata: child_meta(server, format!("{name}-push"), &instance, Component::Proxy),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(selector(&instance, Component::Proxy)),
                ..LabelSelector::default()
            }),
            policy_types: Some(vec!["Ingress".to_string()]),
            ingress: Some(vec![
                NetworkPolicyIngressRule {
                    ports: Some(open),
                    from: None,
                },
                NetworkPolicyIngressRule {
                    ports: Some(vec![port_range("TCP", push, push)]),
                    from: Some(vec![
                        NetworkPolicyPeer {
                            namespace_selector: Some(LabelSelector {
                                match_labels: Some(BTreeMap::from([(
                                    "kubernetes.io/metadata.name".to_string(),
                                    controller_namespace.to_string(),
                                )])),
                                ..LabelSelector::default()
                            }),
                            pod_selector: Some(LabelSelector {
                                match_labels: Some(BTreeMap::from([(
                                    keys::APP_COMPONENT.to_string(),
                                    CONTROLLER_COMPONENT.to_string(),
                                )])),
                                ..LabelSelector::default()
                            }),
                            ..NetworkPolicyPeer::default()
                        },
                        // The DNS replicas of the same Infra check `/ready`.
                        NetworkPolicyPeer {
                            pod_selector: Some(LabelSelector {
                                match_labels: Some(selector(&instance, Component::Dns)),
                                ..LabelSelector::default()
                            }),
                            ..NetworkPolicyPeer::default()
                        },
                    ]),
                },
            ]),
            ..NetworkPolicySpec::default()
        }),
    }
}

/// Label naming the attachment a cross-namespace object belongs to.
pub const ATTACHMENT_LABEL: &str = keys::ATTACHMENT;
/// Label naming the namespace of the Infra a cross-namespace object belongs
/// to (the Infra label alone is ambiguous across namespaces).
pub const OWNER_NAMESPACE_LABEL: &str = keys::INFRA_NAMESPACE;

/// Name of the NetworkPolicy an attachment keeps in its control-plane
/// namespace (one per Infra, so two Infras never share it).
pub fn policy_name(infra_namespace: &str, infra: &str) -> String {
    let name = format!("oooi-proxy-{infra_namespace}-{infra}");
    // A DNS subdomain allows 253; keep to a label's 63 for readability.
    if name.len() <= 63 {
        name
    } else {
        use sha2::Digest;
        let h = hex::encode(sha2::Sha256::digest(name.as_bytes()));
        format!("oooi-proxy-{}", &h[..20])
    }
}

/// The NetworkPolicy letting the Envoy pods of Infra `infra_ns/infra` reach
/// every pod of the control-plane namespace `cp_ns`, on behalf of the
/// attachment `attachment`. Ports are not listed: a Service port (what the
/// attachment names) is not always the pod port.
pub fn proxy_ingress_policy(
    attachment: &str,
    infra_ns: &str,
    infra: &str,
    cp_ns: &str,
) -> NetworkPolicy {
    let mut meta_labels = labels(infra, Component::Proxy);
    meta_labels.insert(OWNER_NAMESPACE_LABEL.to_string(), infra_ns.to_string());
    meta_labels.insert(ATTACHMENT_LABEL.to_string(), attachment.to_string());
    NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(policy_name(infra_ns, infra)),
            namespace: Some(cp_ns.to_string()),
            labels: Some(meta_labels),
            ..ObjectMeta::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector::default()),
            policy_types: Some(vec!["Ingress".to_string()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(vec![NetworkPolicyPeer {
                    namespace_selector: Some(LabelSelector {
                        match_labels: Some(BTreeMap::from([(
                            "kubernetes.io/metadata.name".to_string(),
                            infra_ns.to_string(),
                        )])),
                        ..LabelSelector::default()
                    }),
                    pod_selector: Some(LabelSelector {
                        match_labels: Some(selector(infra, Component::Proxy)),
                        ..LabelSelector::default()
                    }),
                    ..NetworkPolicyPeer::default()
                }]),
                ..NetworkPolicyIngressRule::default()
            }]),
            ..NetworkPolicySpec::default()
        }),
    }
}

/// The control-plane policy of an attachment of Infra `infra_ns/infra`,
/// from the planner's verdict on it ([`crate::plan::InfraPlan::verdict`]:
/// none when the Infra is missing or invalid): one while the attachment is
/// accepted, none otherwise (an excluded attachment, or an Infra that is
/// missing or invalid, opens nothing).
pub fn control_plane_policy(
    verdict: Option<&AttachmentOutcome>,
    infra_ns: &str,
    infra: &str,
) -> Option<NetworkPolicy> {
    let outcome = verdict.filter(|o| o.accepted())?;
    Some(proxy_ingress_policy(
        &outcome.name,
        infra_ns,
        infra,
        &outcome.control_plane_namespace,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_admits_only_the_infras_envoy_pods_into_the_control_plane() {
        let p = proxy_ingress_policy("c1", "oooi", "vlan200", "clusters-c1");
        assert_eq!(p.metadata.name.as_deref(), Some("oooi-proxy-oooi-vlan200"));
        assert_eq!(p.metadata.namespace.as_deref(), Some("clusters-c1"));
        let l = p.metadata.labels.as_ref().unwrap();
        assert_eq!(l[ATTACHMENT_LABEL], "c1");
        assert_eq!(l[OWNER_NAMESPACE_LABEL], "oooi");
        assert_eq!(l["hostedcluster.densityops.com/infra"], "vlan200");
        assert_eq!(l["app.kubernetes.io/managed-by"], "oooi-controller");
        let spec = p.spec.unwrap();
        // Every pod of the control-plane namespace, ingress only.
        assert_eq!(spec.pod_selector, Some(LabelSelector::default()));
        assert_eq!(spec.policy_types, Some(vec!["Ingress".to_string()]));
        let rules = spec.ingress.unwrap();
        assert_eq!(rules.len(), 1);
        assert!(rules[0].ports.is_none(), "Service ports are not pod ports");
        let peers = rules[0].from.as_ref().unwrap();
        assert_eq!(peers.len(), 1);
        let ns = peers[0].namespace_selector.as_ref().unwrap();
        assert_eq!(
            ns.match_labels.as_ref().unwrap()["kubernetes.io/metadata.name"],
            "oooi"
        );
        let pods = peers[0].pod_selector.as_ref().unwrap();
        assert_eq!(
            pods.match_labels.as_ref().unwrap(),
            &selector("vlan200", Component::Proxy)
        );
    }

    fn proxy(push_port: u16) -> ProxyServer {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "hostedcluster.densityops.com/v1alpha1", "kind": "ProxyServer",
            "metadata": {"name": "vlan200-proxy", "namespace": "oooi", "uid": "u1",
                         "labels": {"hostedcluster.densityops.com/infra": "vlan200"}},
            "spec": {
                "vlan": {"networkAttachmentDefinition": "v", "networkAttachmentNamespace": "oooi",
                         "address": "198.51.100.4/24", "interface": "net1"},
                "image": "envoy:1", "pushPort": push_port,
                "pushTokenSecret": {"name": "t"}, "routes": []
            }
        }))
        .expect("fixture ProxyServer")
    }

    #[test]
    fn the_push_port_is_open_to_the_controller_and_the_infras_dns_pods_only() {
        let p = push_api_policy(&proxy(9445), "oooi-system");
        assert_eq!(p.metadata.name.as_deref(), Some("vlan200-proxy-push"));
        assert_eq!(p.metadata.namespace.as_deref(), Some("oooi"));
        let owner = &p.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("ProxyServer", "u1")
        );
        let spec = p.spec.unwrap();
        assert_eq!(
            spec.pod_selector.unwrap().match_labels.unwrap(),
            selector("vlan200", Component::Proxy)
        );
        let rules = spec.ingress.unwrap();
        let ranges: Vec<(String, i32, Option<i32>)> = rules[0]
            .ports
            .as_ref()
            .unwrap()
            .iter()
            .map(|p| {
                let IntOrString::Int(from) = p.port.clone().unwrap() else {
                    panic!("numeric port")
                };
                (p.protocol.clone().unwrap(), from, p.end_port)
            })
            .collect();
        assert_eq!(
            ranges,
            vec![
                ("TCP".to_string(), 1, Some(9444)),
                ("TCP".to_string(), 9446, Some(65535)),
                ("UDP".to_string(), 1, Some(65535)),
            ]
        );
        assert!(rules[0].from.is_none(), "other ports from anywhere");
        let push = &rules[1];
        assert_eq!(
            push.ports.as_ref().unwrap()[0],
            NetworkPolicyPort {
                protocol: Some("TCP".into()),
                port: Some(IntOrString::Int(9445)),
                end_port: None
            }
        );
        let peer = &push.from.as_ref().unwrap()[0];
        assert_eq!(
            peer.namespace_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()["kubernetes.io/metadata.name"],
            "oooi-system"
        );
        assert_eq!(
            peer.pod_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()["app.kubernetes.io/component"],
            "controller"
        );
        // The same Infra's DNS pods (same namespace: no namespace selector).
        let dns = &push.from.as_ref().unwrap()[1];
        assert!(dns.namespace_selector.is_none());
        assert_eq!(
            dns.pod_selector.as_ref().unwrap().match_labels.as_ref(),
            Some(&selector("vlan200", Component::Dns))
        );
        assert_eq!(push.from.as_ref().unwrap().len(), 2);
        // A push port at the top of the range leaves no empty range behind.
        let top = push_api_policy(&proxy(65535), "c")
            .spec
            .unwrap()
            .ingress
            .unwrap();
        assert_eq!(top[0].ports.as_ref().unwrap().len(), 2);
    }

    #[test]
    fn long_names_are_hashed_to_a_stable_label_sized_name() {
        let ns = "n".repeat(40);
        let a = policy_name(&ns, "infra-with-a-long-name");
        let b = policy_name(&ns, "infra-with-a-long-name");
        assert_eq!(a, b);
        assert!(a.len() <= 63, "{a}");
        assert!(a.starts_with("oooi-proxy-"));
        assert_ne!(a, policy_name(&ns, "infra-with-a-long-namf"));
        assert_eq!(policy_name("oooi", "v"), "oooi-proxy-oooi-v");
    }
}
