//! The control-plane NetworkPolicy planner: one policy per accepted
//! attachment, in the attachment's control-plane namespace, and none for an
//! excluded attachment or an invalid Infra.

use crate::plan_support;

use oooi_controller::plan::network_policy::{
    ATTACHMENT_LABEL, OWNER_NAMESPACE_LABEL, control_plane_policy,
};
use oooi_controller::plan::{Observed, plan_infra};
use plan_support::*;

#[test]
fn an_accepted_attachment_gets_a_policy_in_its_control_plane_namespace() {
    let i = infra("oooi", "vlan");
    let atts = [
        attachment("oooi", "c1", "vlan", "c1"),
        attachment_yaml(
            "oooi",
            "c2",
            "vlan",
            "c2",
            "c2",
            "  controlPlaneNamespace: hcp-c2",
        ),
    ];
    let p = plan_infra(&i, &atts, &Observed::default());
    let c1 = control_plane_policy(p.verdict("c1"), "oooi", "vlan").expect("accepted");
    assert_eq!(c1.metadata.namespace.as_deref(), Some("clusters-c1"));
    assert_eq!(c1.metadata.name.as_deref(), Some("oooi-proxy-oooi-vlan"));
    let labels = c1.metadata.labels.unwrap();
    assert_eq!(labels[ATTACHMENT_LABEL], "c1");
    assert_eq!(labels[OWNER_NAMESPACE_LABEL], "oooi");
    let c2 = control_plane_policy(p.verdict("c2"), "oooi", "vlan").expect("accepted");
    assert_eq!(c2.metadata.namespace.as_deref(), Some("hcp-c2"));
}

#[test]
fn excluded_or_unknown_attachments_and_invalid_infras_get_no_policy() {
    let i = infra("oooi", "vlan");
    // Two attachments of one HostedCluster: both excluded.
    let atts = [
        attachment_yaml("oooi", "a", "vlan", "c1", "c1", ""),
        attachment_yaml("oooi", "b", "vlan", "c1", "other", ""),
    ];
    let p = plan_infra(&i, &atts, &Observed::default());
    assert!(control_plane_policy(p.verdict("a"), "oooi", "vlan").is_none());
    assert!(control_plane_policy(p.verdict("b"), "oooi", "vlan").is_none());
    assert!(control_plane_policy(p.verdict("nope"), "oooi", "vlan").is_none());

    let mut bad = infra("oooi", "vlan");
    bad.spec.network_config.gateway = Some("192.0.3.1".parse().unwrap());
    let p = plan_infra(
        &bad,
        &[attachment("oooi", "c1", "vlan", "c1")],
        &Observed::default(),
    );
    assert!(p.desired.is_none());
    assert!(
        control_plane_policy(p.verdict("c1"), "oooi", "vlan").is_none(),
        "an invalid Infra opens nothing"
    );
}

#[test]
fn the_proxy_policy_opens_its_routing_ports_and_the_agents_metrics_port_with_takeover() {
    use oooi_controller::plan::proxy::{READY_PORT, policy_ports};
    let d = plan_infra(&infra("oooi", "vlan"), &[], &Observed::default())
        .desired
        .expect("valid");
    let mut p = d.proxy.first().expect("a proxy").clone();
    let ports = policy_ports(&p);
    assert_eq!(ports.push, p.spec.push_port);
    assert_eq!(ports.ready, READY_PORT);
    assert_eq!(
        ports.watched.metrics,
        vec![9102],
        "no agent without takeover"
    );
    assert!(ports.watched.health.is_empty(), "no agent without takeover");
    assert!(ports.routing.contains(&6443), "{ports:?}");
    p.spec.tls_ports.push(8443);
    p.spec.pod.availability.address_takeover = Some(oooi_controller::crd::AddressTakeover {
        lease_prefix: "vlan-proxy".into(),
        addresses: vec![
            "192.0.2.4/24".parse().unwrap(),
            "192.0.2.7/24".parse().unwrap(),
        ],
    });
    let ports = policy_ports(&p);
    assert_eq!(ports.watched.metrics, vec![9102, 9466]);
    // The agent's liveness probe: its own listener, the node alone.
    assert_eq!(ports.watched.health, vec![9467]);
    assert!(ports.routing.contains(&8443), "{ports:?}");
}

/// An Infra `vlan` with a DHCP pair and two DNS and proxy replicas, the
/// addresses moving between replicas (`failover: Auto`: the agent's
/// metrics port on every DNS and proxy pod).
fn replicated_infra() -> oooi_controller::crd::Infra {
    component_infra()
        .dhcp_servers(&["192.0.2.2", "192.0.2.5"])
        .dns_servers(&["192.0.2.3", "192.0.2.6"])
        .proxy_servers(&["192.0.2.4", "192.0.2.7"])
        .failover("Auto")
        .build()
}

/// What the planner derives from [`replicated_infra`].
fn replicated_desired() -> oooi_controller::plan::DesiredComponents {
    plan_infra(&replicated_infra(), &[], &Observed::default())
        .desired
        .expect("valid")
}

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// (protocol, port) of every rule of a policy.
fn policy_ports_of(p: &k8s_openapi::api::networking::v1::NetworkPolicy) -> Vec<(String, i32)> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    p.spec
        .as_ref()
        .and_then(|s| s.ingress.clone())
        .unwrap_or_default()
        .iter()
        .flat_map(|r| r.ports.clone().unwrap_or_default())
        .map(|p| {
            let n = match p.port {
                Some(IntOrString::Int(n)) => n,
                other => panic!("numeric port: {other:?}"),
            };
            (p.protocol.unwrap_or_default(), n)
        })
        .collect()
}

/// (protocol, port) of every container port of the pods.
fn container_ports(c: &oooi_controller::plan::Children) -> Vec<(String, i32)> {
    let pod = c
        .deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("pod spec");
    pod.containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
        .flat_map(|c| c.ports.clone().unwrap_or_default())
        .map(|p| (p.protocol.unwrap_or_default(), p.container_port))
        .collect()
}

/// Every port a component's pods declare is either on the VLAN leg alone
/// or named by its NetworkPolicy (or, for a port only the kubelet probes,
/// by its planner's health list): a port added to the pods without a word
/// on who may reach it fails here.
#[test]
fn every_pod_network_port_of_each_component_is_in_its_policy() {
    use oooi_controller::plan::network_policy::{MetricsScrapers, PolicyPeers};
    use oooi_controller::plan::{dhcp, dns, proxy};
    let d = replicated_desired();
    let scrapers = MetricsScrapers::default();
    let peers = PolicyPeers {
        controller_namespace: Some("oooi-system"),
        scrapers: &scrapers,
    };
    let tcp = |p: u16| ("TCP".to_string(), i32::from(p));
    let mut checked = 0;
    for s in &d.dhcp {
        let o = dhcp::objects(s, peers).unwrap();
        let open = policy_ports_of(o.network_policy.as_ref().expect("a policy"));
        let health: Vec<(String, i32)> = dhcp::policy_ports(s)
            .watched
            .health
            .iter()
            .map(|p| tcp(*p))
            .collect();
        assert_eq!(health, [tcp(dhcp::HEALTH_PORT as u16)]);
        for port in container_ports(&o.children) {
            // DHCP itself: the VLAN leg.
            let vlan = port == ("UDP".to_string(), 67);
            assert!(
                vlan || open.contains(&port) || health.contains(&port),
                "{port:?} of {:?}",
                s.metadata.name
            );
            // A port only the probes use is open to no pod.
            assert!(
                !(health.contains(&port) && open.contains(&port)),
                "{port:?}"
            );
            checked += 1;
        }
        // The pair API and the lease inventory, which the pods' ports list
        // only once they serve it.
        assert!(open.contains(&tcp(dhcp::pair::PEER_PORT)), "{open:?}");
        assert!(open.contains(&tcp(dhcp::INVENTORY_PORT)), "{open:?}");
    }
    for s in &d.dns {
        let o = dns::objects(s, peers).unwrap();
        let open = policy_ports_of(o.network_policy.as_ref().expect("a policy"));
        let health: Vec<(String, i32)> = dns::policy_ports(s)
            .watched
            .health
            .iter()
            .map(|p| tcp(*p))
            .collect();
        for port in container_ports(&o.children) {
            // The VLAN view's port 53: the VLAN leg.
            let vlan = port.1 == 53;
            assert!(
                vlan || open.contains(&port) || health.contains(&port),
                "{port:?} of {:?}: {open:?}",
                s.metadata.name
            );
            assert!(
                !(health.contains(&port) && open.contains(&port)),
                "{port:?}"
            );
            checked += 1;
        }
        assert!(open.contains(&("UDP".to_string(), 5353)), "{open:?}");
        assert!(open.contains(&tcp(9466)), "the agent's metrics: {open:?}");
        assert!(
            health.contains(&tcp(9467)),
            "the agent's health: {health:?}"
        );
    }
    for s in &d.proxy {
        let o = proxy::objects(s, TOKEN, None, peers).unwrap();
        let open = policy_ports_of(o.network_policy.as_ref().expect("a policy"));
        let health: Vec<(String, i32)> = proxy::policy_ports(s)
            .watched
            .health
            .iter()
            .map(|p| tcp(*p))
            .collect();
        assert_eq!(health, [tcp(9467)], "the agent's health");
        for port in container_ports(&o.children) {
            assert!(
                open.contains(&port) || health.contains(&port),
                "{port:?} of {:?}",
                s.metadata.name
            );
            assert!(
                !(health.contains(&port) && open.contains(&port)),
                "{port:?}"
            );
            checked += 1;
        }
    }
    assert!(checked > 10, "{checked} ports checked");
}

#[test]
fn without_the_controllers_namespace_no_component_gets_a_policy() {
    use oooi_controller::plan::network_policy::{MetricsScrapers, PolicyPeers};
    use oooi_controller::plan::{dhcp, dns, proxy};
    let d = replicated_desired();
    let scrapers = MetricsScrapers::default();
    let peers = PolicyPeers {
        controller_namespace: None,
        scrapers: &scrapers,
    };
    let o = dhcp::objects(&d.dhcp[0], peers).unwrap();
    assert!(o.network_policy.is_none());
    assert_eq!(o.children, dhcp::children(&d.dhcp[0]).unwrap());
    assert!(
        dns::objects(&d.dns[0], peers)
            .unwrap()
            .network_policy
            .is_none()
    );
    let p = proxy::objects(&d.proxy[0], TOKEN, None, peers).unwrap();
    assert!(p.network_policy.is_none());
}

/// In the apply order `render` prints and the reconcilers follow, each
/// server's NetworkPolicy comes just before its Deployment: its pods never
/// run unprotected.
#[test]
fn the_policy_comes_before_the_pods_it_protects() {
    use oooi_controller::plan::network_policy::{MetricsScrapers, PolicyPeers};
    use oooi_controller::plan::{dhcp, dns};
    let d = replicated_desired();
    let scrapers = MetricsScrapers::default();
    let peers = PolicyPeers {
        controller_namespace: Some("ctl"),
        scrapers: &scrapers,
    };
    for values in [
        dhcp::objects(&d.dhcp[1], peers).unwrap().to_values(),
        dns::objects(&d.dns[1], peers).unwrap().to_values(),
    ] {
        let kinds: Vec<&str> = values.iter().map(|v| v["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds[kinds.len() - 2..],
            ["NetworkPolicy", "Deployment"],
            "{kinds:?}"
        );
        let policy = &values[kinds.len() - 2];
        assert!(
            policy["metadata"]["name"]
                .as_str()
                .unwrap()
                .ends_with("-2-ingress"),
            "{policy}"
        );
    }
}

#[test]
fn the_dns_policy_lists_the_agents_metrics_port_only_with_takeover() {
    use oooi_controller::plan::dns::{POD_VIEW_PORT, policy_ports};
    let d = plan_infra(&infra("oooi", "vlan"), &[], &Observed::default())
        .desired
        .expect("valid");
    let ports = policy_ports(&d.dns[0]);
    assert_eq!(ports.view, POD_VIEW_PORT);
    assert_eq!(
        ports.watched.metrics,
        vec![9153],
        "no agent without takeover"
    );
    assert_eq!(ports.watched.health, vec![9154], "the probes' own listener");
    let d = replicated_desired();
    for s in &d.dns {
        assert_eq!(policy_ports(s).watched.metrics, vec![9153, 9466]);
        assert_eq!(policy_ports(s).watched.health, vec![9154, 9467]);
    }
}

/// The labels of the pods of `c`.
fn pod_labels(c: &oooi_controller::plan::Children) -> std::collections::BTreeMap<String, String> {
    c.deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .expect("pod labels")
}

/// Each DHCP and DNS server's policy selects its own pods and no other
/// replica's (the proxy's selects every Envoy pod of its Infra), with one
/// server or several.
#[test]
fn each_policy_selects_its_own_servers_pods() {
    use oooi_controller::plan::network_policy::{MetricsScrapers, PolicyPeers};
    use oooi_controller::plan::{Children, dhcp, dns};
    let scrapers = MetricsScrapers::default();
    let peers = PolicyPeers {
        controller_namespace: Some("oooi-system"),
        scrapers: &scrapers,
    };
    let selects = |policy: &k8s_openapi::api::networking::v1::NetworkPolicy, c: &Children| {
        let sel = policy
            .spec
            .as_ref()
            .and_then(|s| s.pod_selector.as_ref())
            .and_then(|s| s.match_labels.clone())
            .expect("matchLabels");
        let labels = pod_labels(c);
        sel.iter().all(|(k, v)| labels.get(k) == Some(v))
    };
    for infra in [infra("oooi", "vlan"), replicated_infra()] {
        let d = plan_infra(&infra, &[], &Observed::default())
            .desired
            .expect("valid");
        let mut all: Vec<(String, oooi_controller::plan::workload::Objects)> = Vec::new();
        for s in &d.dhcp {
            all.push(("dhcp".into(), dhcp::objects(s, peers).unwrap()));
        }
        for s in &d.dns {
            all.push(("dns".into(), dns::objects(s, peers).unwrap()));
        }
        for (i, (kind, o)) in all.iter().enumerate() {
            let policy = o.network_policy.as_ref().expect("a policy");
            assert!(selects(policy, &o.children), "{kind} {i}: own pods");
            for (j, (other_kind, other)) in all.iter().enumerate() {
                if j != i {
                    assert!(
                        !selects(policy, &other.children),
                        "{kind} {i} selects the pods of {other_kind} {j}"
                    );
                }
            }
        }
    }
}
