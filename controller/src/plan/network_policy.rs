//! NetworkPolicies the controller plans.
//!
//! - Beside each DHCPServer, DNSServer and ProxyServer, one policy over its
//!   pods ([`per_port_policy`], shared by the three): each port of the pod
//!   network admits only who needs it, every other port is closed.
//!   - [`push_api_policy`]: the proxy's routing ports anyone, the push API
//!     the controller, readiness the Infra's DNS pods, metrics the
//!     [`MetricsScrapers`];
//!   - [`dns_policy`]: the pod view anyone, metrics the scrapers;
//!   - [`dhcp_policy`]: metrics the scrapers, the pair API the other server
//!     of the pair, the lease inventory the controller.
//!
//!   Each is owned by its server, so garbage collection removes it with the
//!   server (and the server with its Infra).
//! - [`proxy_ingress_policy`]: in a hosted cluster's control-plane namespace.
//!
//! What no pod-network policy covers, and why the policies still hold:
//! the kubelet's probes come from the pod's own node, which NetworkPolicy
//! always admits (and cannot name), so a port only the probes use gets no
//! rule at all ([`Admit::NodeOnly`]); a container reaching its own pod
//! address never leaves the pod's network namespace (the kernel routes it
//! over loopback), so the address agent's check of its server's health
//! passes whatever the policy says; and the VLAN leg is a Multus network,
//! which NetworkPolicy does not cover. DHCP (67/udp), the pair's VLAN
//! witness (647/udp), the DNS VLAN view (53) and the proxy's routing ports
//! serve the VLAN by design; what must not is kept off it by the programs
//! (the pair API and the DHCP, DNS and agent metrics listen on the pod
//! address alone; Envoy refuses its table API and metrics to the VLAN).
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
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use oooi_vocabulary::labels as keys;

use crate::crd::{DHCPServer, DNSServer, ProxyServer};
use crate::plan::dhcp::pair::PairPartner;
use crate::plan::infra::attachments::AttachmentOutcome;
use crate::plan::labels::{
    APP_NAME, Component, SERVER_LABEL, child_meta, instance_of, labels, selector,
};

/// Label every controller pod of the chart carries.
pub const CONTROLLER_COMPONENT: &str = "controller";

/// Who may scrape the metrics ports of the component pods: pods matching
/// `pods` in namespaces matching `namespaces` (label selectors, each
/// `key=value` pair required). The default admits every pod of the
/// namespaces OpenShift labels `network.openshift.io/policy-group=monitoring`
/// (the platform and user-workload Prometheus).
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct MetricsScrapers {
    /// Labels of the namespaces whose Prometheus may scrape the component
    /// pods' metrics ports (oooi-dhcp's, oooi-dns', Envoy's and the address
    /// agent's: their NetworkPolicies admit nothing else there), as
    /// `key=value[,key=value]`.
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

/// Who the component policies admit from outside their Infra, from the
/// controller's settings (`run` and `render` take the same flags).
#[derive(Debug, Clone, Copy)]
pub struct PolicyPeers<'a> {
    /// The namespace the controller runs in; its pods there carry
    /// `app.kubernetes.io/component=controller` ([`controller_peer`]).
    /// `None` (a library caller that names none): no component gets a
    /// policy, since one without the controller's rules would lock the
    /// controller out of the push API and the lease inventory.
    pub controller_namespace: Option<&'a str>,
    /// Who may scrape the metrics ports.
    pub scrapers: &'a MetricsScrapers,
}

/// The controller's pods: those labelled
/// `app.kubernetes.io/component=controller` in `namespace`. The chart and
/// the OLM bundle both label their controller pods so (the chart's
/// `podLabels` only add labels, and its `nameOverride` changes
/// `app.kubernetes.io/name`, so that one is not relied on).
pub fn controller_peer(namespace: &str) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        namespace_selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([(
                "kubernetes.io/metadata.name".to_string(),
                namespace.to_string(),
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
    }
}

/// A port of a pod on the pod network: the pod's own port (a Service's port
/// is translated before NetworkPolicy looks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodPort {
    /// A TCP port.
    Tcp(u16),
    /// A UDP port.
    Udp(u16),
}

impl PodPort {
    fn to_policy(self) -> NetworkPolicyPort {
        let (protocol, port) = match self {
            PodPort::Tcp(p) => ("TCP", p),
            PodPort::Udp(p) => ("UDP", p),
        };
        NetworkPolicyPort {
            protocol: Some(protocol.to_string()),
            port: Some(IntOrString::Int(i32::from(port))),
            end_port: None,
        }
    }
}

/// TCP ports.
fn tcp(ports: &[u16]) -> Vec<PodPort> {
    ports.iter().copied().map(PodPort::Tcp).collect()
}

/// Who a group of ports admits.
#[derive(Debug, Clone, PartialEq)]
pub enum Admit {
    /// Every source.
    Anyone,
    /// Only these peers (none: nobody but the node).
    Only(Vec<NetworkPolicyPeer>),
    /// Only the pod's own node: the kubelet's probes. NetworkPolicy always
    /// admits the node and cannot name it, so these ports get no rule and
    /// every pod is refused there.
    NodeOnly,
}

/// Some ports of a pod and who they admit.
#[derive(Debug, Clone, PartialEq)]
pub struct PortRule {
    /// The ports (none: the rule opens nothing).
    pub ports: Vec<PodPort>,
    /// Who they admit.
    pub admit: Admit,
}

impl PortRule {
    /// The ingress rule, or none when it admits nobody but the node. An
    /// empty port list or an empty peer list would mean "every port" or
    /// "every source" to Kubernetes, so neither is ever rendered.
    fn to_ingress(&self) -> Option<NetworkPolicyIngressRule> {
        if self.ports.is_empty() {
            return None;
        }
        let from = match &self.admit {
            Admit::Anyone => None,
            Admit::Only(peers) if !peers.is_empty() => Some(peers.clone()),
            Admit::Only(_) | Admit::NodeOnly => return None,
        };
        Some(NetworkPolicyIngressRule {
            ports: Some(self.ports.iter().map(|p| p.to_policy()).collect()),
            from,
        })
    }
}

/// The NetworkPolicy over the pods `pods` selects: ingress only, each port
/// of `rules` admitting whom its rule says, every other port of the pod
/// network closed. Shared by the DHCP, DNS and proxy policies.
pub fn per_port_policy(
    metadata: ObjectMeta,
    pods: BTreeMap<String, String>,
    rules: &[PortRule],
) -> NetworkPolicy {
    NetworkPolicy {
        metadata,
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(pods),
                ..LabelSelector::default()
            }),
            policy_types: Some(vec!["Ingress".to_string()]),
            ingress: Some(rules.iter().filter_map(PortRule::to_ingress).collect()),
            ..NetworkPolicySpec::default()
        }),
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

/// The pods of one server: its component's selector and its own
/// [`SERVER_LABEL`].
fn own_pods(instance: &str, c: Component, server: &str) -> BTreeMap<String, String> {
    let mut s = selector(instance, c);
    s.insert(SERVER_LABEL.to_string(), server.to_string());
    s
}

/// The ports of a ProxyServer's Envoy pods on the pod network, as the
/// proxy's planner knows them ([`push_api_policy`] admits each to whom
/// needs it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyPorts {
    /// The routing listeners (what the internal Service exposes).
    pub routing: Vec<u16>,
    /// The table API.
    pub push: u16,
    /// The readiness listener.
    pub ready: u16,
    /// Envoy's metrics and, with address takeover, the agent's.
    pub metrics: Vec<u16>,
    /// Ports only the kubelet's probes use: with address takeover, the
    /// agent's health listener.
    pub health: Vec<u16>,
}

/// The NetworkPolicy of a ProxyServer's Envoy pods. Each port admits only
/// who needs it:
///
/// - the routing ports (`tls_ports`, what the internal Service exposes):
///   anyone;
/// - the push port: the controller's pods ([`controller_peer`]) of
///   `controller_namespace`;
/// - the readiness port: the same Infra's DNS pods (their checks of `GET
///   /ready`);
/// - the metrics ports (Envoy's and the address agent's): `scrapers`;
/// - the health ports (the address agent's): the node alone
///   ([`Admit::NodeOnly`]).
///
/// Nothing else: every other port of the pod network is closed. The
/// kubelet's probes come from the node (see the module's notes). Named
/// `<proxy>-push`, owned by the ProxyServer.
pub fn push_api_policy(
    server: &ProxyServer,
    ports: &ProxyPorts,
    controller_namespace: &str,
    scrapers: &MetricsScrapers,
) -> NetworkPolicy {
    let name = server.metadata.name.clone().unwrap_or_default();
    let instance = instance_of(&server.metadata);
    per_port_policy(
        child_meta(server, format!("{name}-push"), &instance, Component::Proxy),
        selector(&instance, Component::Proxy),
        &[
            PortRule {
                ports: tcp(&ports.routing),
                admit: Admit::Anyone,
            },
            PortRule {
                ports: tcp(&[ports.push]),
                admit: Admit::Only(vec![controller_peer(controller_namespace)]),
            },
            PortRule {
                ports: tcp(&[ports.ready]),
                admit: Admit::Only(vec![same_infra(&instance, Component::Dns)]),
            },
            PortRule {
                ports: tcp(&ports.metrics),
                admit: Admit::Only(vec![scrapers.peer()]),
            },
            PortRule {
                ports: tcp(&ports.health),
                admit: Admit::NodeOnly,
            },
        ],
    )
}

/// The ports of a DNSServer's pods on the pod network, as the DNS planner
/// knows them ([`dns_policy`]). The VLAN view's port 53 is on the VLAN leg
/// only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsPorts {
    /// The pod view, UDP and TCP (the pod view's Service maps its port 53
    /// to it).
    pub view: u16,
    /// oooi-dns's metrics and, with address takeover, the agent's.
    pub metrics: Vec<u16>,
    /// Ports only the kubelet's probes use: oooi-dns's health listener
    /// and, with address takeover, the agent's.
    pub health: Vec<u16>,
}

/// The NetworkPolicy of a DNSServer's pods (the server's own, by its
/// [`SERVER_LABEL`]). Each port admits only who needs it:
///
/// - the pod view: anyone. Which pods resolve through it is the cluster's
///   choice, not the Infra's: a pod whose `dnsConfig` names the Service, or
///   the cluster DNS forwarding the hosted clusters' zones to it (its
///   queries then come from the cluster DNS pods, in their own namespace);
///   either may be any pod of the management cluster;
/// - the metrics ports: `scrapers`;
/// - the health ports: the node alone ([`Admit::NodeOnly`]), so nothing on
///   the pod network can crowd out the kubelet's probes.
///
/// Named `<server>-ingress`, owned by the DNSServer.
pub fn dns_policy(
    server: &DNSServer,
    ports: &DnsPorts,
    scrapers: &MetricsScrapers,
) -> NetworkPolicy {
    let name = server.metadata.name.clone().unwrap_or_default();
    let instance = instance_of(&server.metadata);
    per_port_policy(
        child_meta(server, format!("{name}-ingress"), &instance, Component::Dns),
        own_pods(&instance, Component::Dns, &name),
        &[
            PortRule {
                ports: vec![PodPort::Udp(ports.view), PodPort::Tcp(ports.view)],
                admit: Admit::Anyone,
            },
            PortRule {
                ports: tcp(&ports.metrics),
                admit: Admit::Only(vec![scrapers.peer()]),
            },
            PortRule {
                ports: tcp(&ports.health),
                admit: Admit::NodeOnly,
            },
        ],
    )
}

/// The ports of a DHCPServer's pods on the pod network, as the DHCP planner
/// knows them ([`dhcp_policy`]). DHCP itself (67/udp) and the pair's VLAN
/// witness are on the VLAN leg only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DhcpPorts {
    /// oooi-dhcp's metrics.
    pub metrics: Vec<u16>,
    /// Ports only the kubelet's probes use: oooi-dhcp's health listener.
    pub health: Vec<u16>,
    /// The pair API and the server it serves, on a server of a pair.
    pub pair: Option<(u16, PairPartner)>,
    /// The read-only lease inventory the controller queries.
    pub inventory: u16,
}

/// The NetworkPolicy of a DHCPServer's pods (with a pair, the server's own
/// by its [`SERVER_LABEL`]; a single server's pods carry none). Each port
/// admits only who needs it:
///
/// - the metrics port: `scrapers`;
/// - the health port: the node alone ([`Admit::NodeOnly`]), so nothing on
///   the pod network can crowd out the kubelet's probes;
/// - the pair API: the other server of the pair ([`PairPartner`]);
/// - the lease inventory: the controller's pods ([`controller_peer`]) of
///   `controller_namespace`.
///
/// Named `<server>-ingress`, owned by the DHCPServer.
pub fn dhcp_policy(
    server: &DHCPServer,
    ports: &DhcpPorts,
    controller_namespace: &str,
    scrapers: &MetricsScrapers,
) -> NetworkPolicy {
    let name = server.metadata.name.clone().unwrap_or_default();
    let namespace = server.metadata.namespace.clone().unwrap_or_default();
    let instance = instance_of(&server.metadata);
    let c = Component::Dhcp;
    let (pods, pair) = match &ports.pair {
        Some((port, partner)) => (
            own_pods(&instance, c, &name),
            PortRule {
                ports: tcp(&[*port]),
                admit: Admit::Only(vec![partner_peer(partner, &namespace, &name)]),
            },
        ),
        None => (
            selector(&instance, c),
            PortRule {
                ports: Vec::new(),
                admit: Admit::NodeOnly,
            },
        ),
    };
    per_port_policy(
        child_meta(server, format!("{name}-ingress"), &instance, c),
        pods,
        &[
            PortRule {
                ports: tcp(&ports.metrics),
                admit: Admit::Only(vec![scrapers.peer()]),
            },
            PortRule {
                ports: tcp(&ports.health),
                admit: Admit::NodeOnly,
            },
            pair,
            PortRule {
                ports: tcp(&[ports.inventory]),
                admit: Admit::Only(vec![controller_peer(controller_namespace)]),
            },
        ],
    )
}

/// The pods of `partner`, seen from the server `own` in `namespace`.
fn partner_peer(partner: &PairPartner, namespace: &str, own: &str) -> NetworkPolicyPeer {
    let dhcp = BTreeMap::from([
        (keys::APP_NAME.to_string(), APP_NAME.to_string()),
        (
            keys::APP_COMPONENT.to_string(),
            Component::Dhcp.as_str().to_string(),
        ),
    ]);
    match partner {
        PairPartner::Server {
            name,
            namespace: theirs,
        } => {
            let mut pods = dhcp;
            pods.insert(SERVER_LABEL.to_string(), name.clone());
            NetworkPolicyPeer {
                // A peer without a namespace selector is of the policy's
                // own namespace.
                namespace_selector: (theirs != namespace).then(|| LabelSelector {
                    match_labels: Some(BTreeMap::from([(
                        "kubernetes.io/metadata.name".to_string(),
                        theirs.clone(),
                    )])),
                    ..LabelSelector::default()
                }),
                pod_selector: Some(LabelSelector {
                    match_labels: Some(pods),
                    ..LabelSelector::default()
                }),
                ..NetworkPolicyPeer::default()
            }
        }
        PairPartner::Unnamed => NetworkPolicyPeer {
            pod_selector: Some(LabelSelector {
                match_labels: Some(dhcp),
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: SERVER_LABEL.to_string(),
                    operator: "NotIn".to_string(),
                    values: Some(vec![own.to_string()]),
                }]),
            }),
            ..NetworkPolicyPeer::default()
        },
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

    fn ports() -> ProxyPorts {
        ProxyPorts {
            routing: vec![443, 6443],
            push: 9445,
            ready: 9446,
            metrics: vec![9102],
            health: vec![9467],
        }
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
        let p = push_api_policy(&proxy(9445), &ports(), "oooi-system", &scrapers);
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
        assert_eq!(r[2].0, vec![9446]);
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
        // Nothing else: every port of every rule is listed above; the
        // agent's health port gets no rule (the node alone).
        let all: Vec<i32> = r.iter().flat_map(|(p, _)| p.clone()).collect();
        assert_eq!(all, vec![443, 6443, 9445, 9446, 9102]);
    }

    #[test]
    fn every_metrics_port_is_for_scrapers_and_every_routing_port_for_anyone() {
        let ports = ProxyPorts {
            routing: vec![443, 6443, 80],
            metrics: vec![9102, 9466],
            ..ports()
        };
        let r = rules(&push_api_policy(
            &proxy(9445),
            &ports,
            "c",
            &MetricsScrapers::default(),
        ));
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

    /// (protocol/port of each port, from) of each rule.
    fn rules_with_protocols(
        p: &NetworkPolicy,
    ) -> Vec<(Vec<String>, Option<Vec<NetworkPolicyPeer>>)> {
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
                        assert_eq!(p.end_port, None);
                        let IntOrString::Int(n) = p.port.clone().unwrap() else {
                            panic!("numeric port")
                        };
                        format!("{}/{n}", p.protocol.as_deref().unwrap())
                    })
                    .collect();
                (ports, r.from.clone())
            })
            .collect()
    }

    /// The servers planned from the unit tests' Infra whose DHCP addresses
    /// are `dhcp`, each with a uid (as the API server gives it).
    fn planned(dhcp: serde_json::Value) -> crate::plan::DesiredComponents {
        let infra = crate::plan::fixtures::infra_with_dhcp(dhcp);
        let p = crate::plan::plan_infra(&infra, &[], &crate::plan::Observed::default());
        assert!(p.errors.is_empty(), "{:?}", p.errors);
        let mut d = p.desired.unwrap();
        for m in d
            .dhcp
            .iter_mut()
            .map(|s| &mut s.metadata)
            .chain(d.dns.iter_mut().map(|s| &mut s.metadata))
        {
            m.uid = Some(format!("uid-{}", m.name.clone().unwrap()));
        }
        d
    }

    fn monitoring() -> MetricsScrapers {
        MetricsScrapers {
            namespaces: BTreeMap::from([("monitoring".to_string(), "yes".to_string())]),
            pods: BTreeMap::from([("app".to_string(), "prometheus".to_string())]),
        }
    }

    fn pod_selector(p: &NetworkPolicy) -> BTreeMap<String, String> {
        p.spec
            .as_ref()
            .unwrap()
            .pod_selector
            .clone()
            .unwrap()
            .match_labels
            .unwrap()
    }

    #[test]
    fn rules_without_ports_or_peers_render_nothing_rather_than_everything() {
        let meta = ObjectMeta {
            name: Some("p".to_string()),
            ..ObjectMeta::default()
        };
        let pods = BTreeMap::from([("a".to_string(), "b".to_string())]);
        let p = per_port_policy(
            meta,
            pods.clone(),
            &[
                // To Kubernetes, no ports means every port...
                PortRule {
                    ports: Vec::new(),
                    admit: Admit::Anyone,
                },
                // ...and no peers every source.
                PortRule {
                    ports: vec![PodPort::Tcp(1)],
                    admit: Admit::Only(Vec::new()),
                },
                PortRule {
                    ports: vec![PodPort::Tcp(2)],
                    admit: Admit::NodeOnly,
                },
                PortRule {
                    ports: vec![PodPort::Udp(3)],
                    admit: Admit::Only(vec![MetricsScrapers::default().peer()]),
                },
            ],
        );
        assert_eq!(pod_selector(&p), pods);
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.policy_types, Some(vec!["Ingress".to_string()]));
        assert_eq!(
            rules_with_protocols(&p),
            vec![(
                vec!["UDP/3".to_string()],
                Some(vec![MetricsScrapers::default().peer()])
            )]
        );
        // With nothing to admit the policy still selects the pods: every
        // port closed, not every port open.
        let closed = per_port_policy(ObjectMeta::default(), pods, &[]);
        assert_eq!(closed.spec.unwrap().ingress, Some(Vec::new()));
    }

    #[test]
    fn each_dns_port_admits_only_who_needs_it() {
        let d = planned(serde_json::json!({"serverIP": "192.0.2.2"}));
        let dns = &d.dns[0];
        let ports = DnsPorts {
            view: 5353,
            metrics: vec![9153, 9466],
            health: vec![9154, 9467],
        };
        let scrapers = monitoring();
        let p = dns_policy(dns, &ports, &scrapers);
        assert_eq!(p.metadata.name.as_deref(), Some("vlan-dns-ingress"));
        assert_eq!(p.metadata.namespace.as_deref(), Some("oooi"));
        let owner = &p.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("DNSServer", "vlan-dns", "uid-vlan-dns")
        );
        assert_eq!(
            p.metadata.labels.as_ref().unwrap()["app.kubernetes.io/managed-by"],
            "oooi-controller"
        );
        // The server's own pods: the instance's DNS pods with its label.
        let mut own = selector("vlan", Component::Dns);
        own.insert(SERVER_LABEL.to_string(), "vlan-dns".to_string());
        assert_eq!(pod_selector(&p), own);
        assert_eq!(
            rules_with_protocols(&p),
            vec![
                // The pod view from anywhere, both protocols.
                (vec!["UDP/5353".to_string(), "TCP/5353".to_string()], None),
                // Metrics (oooi-dns' and the agent's): the scrapers alone.
                (
                    vec!["TCP/9153".to_string(), "TCP/9466".to_string()],
                    Some(vec![scrapers.peer()])
                ),
                // The health ports (oooi-dns' and the agent's): no rule,
                // the node alone.
            ]
        );
    }

    #[test]
    fn each_dhcp_pair_port_admits_only_who_needs_it() {
        let d = planned(serde_json::json!({"serverIPs": ["192.0.2.2", "192.0.2.5"]}));
        let scrapers = monitoring();
        for (server, partner) in [(&d.dhcp[0], "vlan-dhcp-2"), (&d.dhcp[1], "vlan-dhcp")] {
            let name = server.metadata.name.clone().unwrap();
            let ports = DhcpPorts {
                metrics: vec![9067],
                health: vec![9070],
                pair: Some((
                    9068,
                    PairPartner::Server {
                        name: partner.to_string(),
                        namespace: "oooi".to_string(),
                    },
                )),
                inventory: 9069,
            };
            let p = dhcp_policy(server, &ports, "oooi-system", &scrapers);
            assert_eq!(p.metadata.name, Some(format!("{name}-ingress")));
            let owner = &p.metadata.owner_references.as_ref().unwrap()[0];
            assert_eq!(
                (owner.kind.as_str(), owner.name.as_str()),
                ("DHCPServer", name.as_str())
            );
            let mut own = selector("vlan", Component::Dhcp);
            own.insert(SERVER_LABEL.to_string(), name.clone());
            assert_eq!(pod_selector(&p), own, "the server's own pod alone");
            let r = rules_with_protocols(&p);
            // The health port gets no rule: the node alone.
            assert_eq!(r.len(), 3, "{r:?}");
            assert_eq!(
                r[0],
                (vec!["TCP/9067".to_string()], Some(vec![scrapers.peer()]))
            );
            // The pair API: the other server's pod, in this namespace.
            assert_eq!(r[1].0, vec!["TCP/9068".to_string()]);
            let from = r[1].1.as_ref().unwrap();
            assert_eq!(from.len(), 1);
            assert!(from[0].namespace_selector.is_none());
            assert_eq!(
                from[0].pod_selector.as_ref().unwrap().match_labels,
                Some(BTreeMap::from([
                    ("app.kubernetes.io/name".to_string(), "oooi".to_string()),
                    (
                        "app.kubernetes.io/component".to_string(),
                        "dhcp".to_string()
                    ),
                    (SERVER_LABEL.to_string(), partner.to_string()),
                ]))
            );
            // The lease inventory: the controller's pods alone.
            assert_eq!(
                r[2],
                (
                    vec!["TCP/9069".to_string()],
                    Some(vec![controller_peer("oooi-system")])
                )
            );
        }
        let c = controller_peer("oooi-system");
        assert_eq!(
            c.namespace_selector.unwrap().match_labels.unwrap()["kubernetes.io/metadata.name"],
            "oooi-system"
        );
        assert_eq!(
            c.pod_selector.unwrap().match_labels.unwrap(),
            BTreeMap::from([(
                "app.kubernetes.io/component".to_string(),
                "controller".to_string()
            )])
        );
    }

    #[test]
    fn a_single_dhcp_server_selects_its_instance_and_opens_no_pair_port() {
        let d = planned(serde_json::json!({"serverIP": "192.0.2.2"}));
        let ports = DhcpPorts {
            metrics: vec![9067],
            health: vec![9070],
            pair: None,
            inventory: 9069,
        };
        let p = dhcp_policy(&d.dhcp[0], &ports, "ctl", &MetricsScrapers::default());
        // A single server's pod carries no server label.
        assert_eq!(pod_selector(&p), selector("vlan", Component::Dhcp));
        let r = rules_with_protocols(&p);
        let ports: Vec<&String> = r.iter().flat_map(|(p, _)| p).collect();
        assert_eq!(ports, ["TCP/9067", "TCP/9069"]);
    }

    #[test]
    fn a_pair_partner_elsewhere_or_unnamed_is_selected_as_narrowly_as_known() {
        let elsewhere = partner_peer(
            &PairPartner::Server {
                name: "b".to_string(),
                namespace: "other".to_string(),
            },
            "oooi",
            "a",
        );
        assert_eq!(
            elsewhere.namespace_selector.unwrap().match_labels.unwrap()["kubernetes.io/metadata.name"],
            "other"
        );
        assert_eq!(
            elsewhere.pod_selector.unwrap().match_labels.unwrap()[SERVER_LABEL],
            "b"
        );
        // By address: every other oooi DHCP pod of the namespace.
        let unnamed = partner_peer(&PairPartner::Unnamed, "oooi", "a");
        assert!(unnamed.namespace_selector.is_none());
        let pods = unnamed.pod_selector.unwrap();
        assert_eq!(
            pods.match_labels.unwrap(),
            BTreeMap::from([
                ("app.kubernetes.io/name".to_string(), "oooi".to_string()),
                (
                    "app.kubernetes.io/component".to_string(),
                    "dhcp".to_string()
                ),
            ])
        );
        assert_eq!(
            pods.match_expressions,
            Some(vec![LabelSelectorRequirement {
                key: SERVER_LABEL.to_string(),
                operator: "NotIn".to_string(),
                values: Some(vec!["a".to_string()]),
            }])
        );
    }
}
