//! NetworkPolicies the controller plans.
//!
//! - [`push_api_policy`]: beside each ProxyServer, each port of the Envoy
//!   pods admits only who needs it: the routing ports anyone, the push API
//!   the controller, readiness the Infra's DNS pods, metrics the
//!   [`MetricsScrapers`]; every other port is closed.
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

/// Who may scrape the metrics ports of the proxy pods: pods matching
/// `pods` in namespaces matching `namespaces` (label selectors, each
/// `key=value` pair required). The default admits every pod of the
/// namespaces OpenShift labels `network.openshift.io/policy-group=monitoring`
/// (the platform and user-workload Prometheus).
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct MetricsScrapers {
    /// Labels of the namespaces whose Prometheus may scrape the proxy pods'
    /// metrics ports, Envoy's and the address agent's (their NetworkPolicy
    /// admits nothing else there), as `key=value[,key=value]`.
    #[arg(
        long = "metrics-scraper-namespace-labels",
        env = "OOOI_METRICS_SCRAPER_NAMESPACE_LABELS",
        value_parser = parse_labels,
        default_value = "network.openshift.io/policy-group=monitoring",
        value_name = "LABELS"
    )]
    pub namespaces: BTreeMap<String, String>,
    /// Labels of the scraping pods inside those namespaces (empty: any pod),
    /// as `key=value[,key=value]`.
    #[arg(
        long = "metrics-scraper-pod-labels",
        env = "OOOI_METRICS_SCRAPER_POD_LABELS",
        value_parser = parse_labels,
        default_value = "",
        value_name = "LABELS"
    )]
    pub pods: BTreeMap<String, String>,
}

impl Default for MetricsScrapers {
    fn default() -> Self {
        MetricsScrapers {
            namespaces: BTreeMap::from([(
                "network.openshift.io/policy-group".to_string(),
                "monitoring".to_string(),
            )]),
            pods: BTreeMap::new(),
        }
    }
}

/// `key=value[,key=value]` as a label map; the error names the bad item.
pub fn parse_labels(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (k, v) = item
            .split_once('=')
            .ok_or_else(|| format!("{item:?}: expected key=value"))?;
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() || k.contains(char::is_whitespace) || v.contains(char::is_whitespace) {
            return Err(format!("{item:?}: not a label key=value"));
        }
        out.insert(k.to_string(), v.to_string());
    }
    Ok(out)
}

impl MetricsScrapers {
    /// The peer these labels select.
    pub fn peer(&self) -> NetworkPolicyPeer {
        NetworkPolicyPeer {
            namespace_selector: Some(LabelSelector {
                match_labels: Some(self.namespaces.clone()),
                ..LabelSelector::default()
            }),
            pod_selector: Some(LabelSelector {
                match_labels: (!self.pods.is_empty()).then(|| self.pods.clone()),
                ..LabelSelector::default()
            }),
            ..NetworkPolicyPeer::default()
        }
    }
}

/// One ingress rule: `ports` (TCP) from `from` (`None`: from anywhere).
fn tcp_rule(ports: &[u16], from: Option<Vec<NetworkPolicyPeer>>) -> NetworkPolicyIngressRule {
    NetworkPolicyIngressRule {
        ports: Some(
            ports
                .iter()
                .map(|p| port_range("TCP", i32::from(*p), i32::from(*p)))
                .collect(),
        ),
        from,
    }
}

/// Pods of component `c` of the same Infra (same namespace).
fn same_infra(instance: &str, c: Component) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        pod_selector: Some(LabelSelector {
            match_labels: Some(selector(instance, c)),
            ..LabelSelector::default()
        }),
        ..NetworkPolicyPeer::default()
    }
}

/// The NetworkPolicy of a ProxyServer's Envoy pods. Each port admits only
/// who needs it:
///
/// - the routing ports (`tls_ports`, what the internal Service exposes):
///   anyone;
/// - the push port: the controller pods (labelled
///   `app.kubernetes.io/component=controller`) of `controller_namespace`;
/// - the readiness port: the same Infra's DNS pods (their checks of `GET
///   /ready`);
/// - the metrics ports (Envoy's and the address agent's): `scrapers`.
///
/// Nothing else: every other port of the pod network is closed. Probes
/// come from the node, which NetworkPolicy always admits; the VLAN leg is a
/// Multus network, which NetworkPolicy does not cover. Named
/// `<proxy>-push`, owned by the ProxyServer.
pub fn push_api_policy(
    server: &ProxyServer,
    controller_namespace: &str,
    scrapers: &MetricsScrapers,
) -> NetworkPolicy {
    let name = server.metadata.name.clone().unwrap_or_default();
    let instance = instance_of(&server.metadata);
    let cfg = super::proxy::envoy_config(&server.spec, "");
    let mut metrics = vec![super::proxy::METRICS_PORT];
    if server.spec.availability.address_takeover.is_some() {
        metrics.push(super::workload::AGENT_METRICS_PORT as u16);
    }
    let controller = NetworkPolicyPeer {
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
    };
    NetworkPolicy {
        metadata: child_meta(server, format!("{name}-push"), &instance, Component::Proxy),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(selector(&instance, Component::Proxy)),
                ..LabelSelector::default()
            }),
            policy_types: Some(vec!["Ingress".to_string()]),
            ingress: Some(vec![
                tcp_rule(&cfg.tls_ports, None),
                tcp_rule(&[server.spec.push_port], Some(vec![controller])),
                tcp_rule(
                    &[super::proxy::READY_PORT],
                    Some(vec![same_infra(&instance, Component::Dns)]),
                ),
                tcp_rule(&metrics, Some(vec![scrapers.peer()])),
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

    /// (ports, from) of each rule, ports as numbers.
    fn rules(p: &NetworkPolicy) -> Vec<(Vec<i32>, Option<Vec<NetworkPolicyPeer>>)> {
        p.spec
            .as_ref()
            .unwrap()
            .ingress
            .as_ref()
            .unwrap()
            .iter()
            .map(|r| {
                let ports = r
                    .ports
                    .as_ref()
                    .unwrap()
                    .iter()
                    .map(|p| {
                        assert_eq!(p.protocol.as_deref(), Some("TCP"));
                        assert_eq!(p.end_port, None);
                        let IntOrString::Int(n) = p.port.clone().unwrap() else {
                            panic!("numeric port")
                        };
                        n
                    })
                    .collect();
                (ports, r.from.clone())
            })
            .collect()
    }

    #[test]
    fn each_proxy_port_admits_only_who_needs_it() {
        let scrapers = MetricsScrapers {
            namespaces: BTreeMap::from([("monitoring".to_string(), "yes".to_string())]),
            pods: BTreeMap::from([("app".to_string(), "prometheus".to_string())]),
        };
        let p = push_api_policy(&proxy(9445), "oooi-system", &scrapers);
        assert_eq!(p.metadata.name.as_deref(), Some("vlan200-proxy-push"));
        assert_eq!(p.metadata.namespace.as_deref(), Some("oooi"));
        let owner = &p.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("ProxyServer", "u1")
        );
        let spec = p.spec.clone().unwrap();
        assert_eq!(
            spec.pod_selector.unwrap().match_labels.unwrap(),
            selector("vlan200", Component::Proxy)
        );
        assert_eq!(spec.policy_types, Some(vec!["Ingress".to_string()]));
        let r = rules(&p);
        assert_eq!(r.len(), 4, "{r:?}");
        // Routing ports (no routes: the base ports) from anywhere.
        assert_eq!(r[0], (vec![443, 6443], None));
        // The push port: the controller pods of the controller's namespace.
        assert_eq!(r[1].0, vec![9445]);
        let push = r[1].1.as_ref().unwrap();
        assert_eq!(push.len(), 1);
        assert_eq!(
            push[0]
                .namespace_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()["kubernetes.io/metadata.name"],
            "oooi-system"
        );
        assert_eq!(
            push[0]
                .pod_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()["app.kubernetes.io/component"],
            "controller"
        );
        // Readiness: the same Infra's DNS pods (no namespace selector: the
        // policy's own namespace).
        assert_eq!(r[2].0, vec![i32::from(super::super::proxy::READY_PORT)]);
        let ready = r[2].1.as_ref().unwrap();
        assert_eq!(ready.len(), 1);
        assert!(ready[0].namespace_selector.is_none());
        assert_eq!(
            ready[0]
                .pod_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref(),
            Some(&selector("vlan200", Component::Dns))
        );
        // Metrics: the scrapers alone (no address agent in this proxy).
        assert_eq!(r[3], (vec![9102], Some(vec![scrapers.peer()])));
        let peer = scrapers.peer();
        assert_eq!(
            peer.namespace_selector.unwrap().match_labels.unwrap()["monitoring"],
            "yes"
        );
        assert_eq!(
            peer.pod_selector.unwrap().match_labels.unwrap()["app"],
            "prometheus"
        );
        // Nothing else: every port of every rule is listed above.
        let all: Vec<i32> = r.iter().flat_map(|(p, _)| p.clone()).collect();
        assert_eq!(all, vec![443, 6443, 9445, 9446, 9102]);
    }

    #[test]
    fn the_address_agents_metrics_port_is_for_scrapers_and_routes_add_ports() {
        let mut p = proxy(9445);
        p.spec.tls_ports = vec![443, 6443, 80];
        p.spec.availability.address_takeover = Some(crate::crd::AddressTakeover {
            lease_prefix: "vlan200-proxy".into(),
            addresses: vec!["198.51.100.4/24".into()],
        });
        let r = rules(&push_api_policy(&p, "c", &MetricsScrapers::default()));
        assert_eq!(r[0], (vec![443, 6443, 80], None));
        assert_eq!(
            r[3],
            (
                vec![9102, 9466],
                Some(vec![MetricsScrapers::default().peer()])
            )
        );
    }

    #[test]
    fn scraper_labels_parse_and_default_to_openshift_monitoring() {
        assert_eq!(
            parse_labels("a=b, c.d/e=f").unwrap(),
            BTreeMap::from([
                ("a".to_string(), "b".to_string()),
                ("c.d/e".to_string(), "f".to_string())
            ])
        );
        assert_eq!(parse_labels("").unwrap(), BTreeMap::new());
        for bad in ["a", "=b", "a b=c"] {
            assert!(parse_labels(bad).unwrap_err().contains(bad), "{bad}");
        }
        let d = MetricsScrapers::default().peer();
        assert_eq!(
            d.namespace_selector.unwrap().match_labels.unwrap()["network.openshift.io/policy-group"],
            "monitoring"
        );
        assert_eq!(d.pod_selector.unwrap().match_labels, None, "any pod there");
        // The command line's defaults are the same.
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            s: MetricsScrapers,
        }
        let cli = <Cli as clap::Parser>::try_parse_from(["x"]).unwrap();
        assert_eq!(cli.s, MetricsScrapers::default());
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
