//! Several DNS and proxy replicas, one per VLAN address: what the planner
//! derives from `serverIPs` (names, addresses, the DHCP option 6 list, the
//! VLAN view's answers) and what each replica's children look like (its own
//! pod label, a node apart, one budget for all, one pod-network Service).

#![allow(clippy::unwrap_used)]

use crate::plan_support;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use oooi_controller::crd::{DNSServer, Infra, ProxyServer, ReplicaOf};
use oooi_controller::plan::labels::SERVER_LABEL;
use oooi_controller::plan::workload::template_hash::{TEMPLATE_HASH_ANNOTATION, template_hash};
use oooi_controller::plan::{self, Children, Observed, plan_infra};
use plan_support::{attachment, component_infra, ip, match_labels, observed};
use serde_json::{Value, json};

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// An Infra with `dns` and `proxy` as its DNS and proxy address fields
/// (failover `Auto`: address takeover on this NetworkAttachmentDefinition).
fn infra(dns: Value, proxy: Value) -> Infra {
    infra_with(dns, proxy, "Auto")
}

/// [`infra`] with `spec.availability.failover` set to `failover`.
fn infra_with(dns: Value, proxy: Value, failover: &str) -> Infra {
    component_infra()
        .remove("/spec/infraComponents/dns/serverIP")
        .remove("/spec/infraComponents/proxy/serverIP")
        .dns(dns)
        .proxy(proxy)
        .failover(failover)
        .build()
}

fn plan_of(i: &Infra, workers: &[&str]) -> plan::InfraPlan {
    let a = attachment("oooi", "c1", "vlan", "c1");
    let o: Observed = observed(&[("c1", workers)]);
    plan_infra(i, &[a], &o)
}

fn ha() -> plan::DesiredComponents {
    let p = plan_of(
        &infra(
            json!({"serverIPs": ["192.0.2.3", "192.0.2.6"]}),
            json!({"serverIPs": ["192.0.2.4", "192.0.2.7", "192.0.2.8"]}),
        ),
        &["192.0.2.100"],
    );
    assert!(p.errors.is_empty(), "{:?}", p.errors);
    let mut d = p.desired.unwrap();
    for s in &mut d.dns {
        s.metadata.uid = Some(format!("uid-{}", s.metadata.name.clone().unwrap()));
    }
    for s in &mut d.proxy {
        s.metadata.uid = Some(format!("uid-{}", s.metadata.name.clone().unwrap()));
    }
    d
}

fn names<K: kube::Resource>(objs: &[K]) -> Vec<String> {
    objs.iter()
        .map(|o| o.meta().name.clone().unwrap())
        .collect()
}

#[test]
fn each_address_is_one_replica_named_and_placed_in_order() {
    let d = ha();
    assert_eq!(names(&d.dns), ["vlan-dns", "vlan-dns-2"]);
    assert_eq!(
        names(&d.proxy),
        ["vlan-proxy", "vlan-proxy-2", "vlan-proxy-3"]
    );
    let addr = |s: &str| s.to_string();
    assert_eq!(
        d.dns
            .iter()
            .map(|s| s.spec.pod.vlan.address)
            .collect::<Vec<_>>(),
        [addr("192.0.2.3/24"), addr("192.0.2.6/24")]
    );
    assert_eq!(
        d.proxy.iter().map(|s| s.spec.replica).collect::<Vec<_>>(),
        [0, 1, 2].map(|index| Some(ReplicaOf { index, count: 3 }))
    );
    // Every proxy replica holds the same table; one internal Service.
    assert!(
        d.proxy
            .iter()
            .all(|p| p.spec.routes == d.proxy[0].spec.routes)
    );
    assert_eq!(
        d.proxy
            .iter()
            .map(|p| p.spec.internal_service)
            .collect::<Vec<_>>(),
        [true, false, false]
    );
}

#[test]
fn dhcp_hands_out_every_dns_replica_in_order() {
    let d = ha();
    assert_eq!(
        d.dhcp[0].spec.config.0.dns_servers,
        [ip("192.0.2.3"), ip("192.0.2.6")]
    );
}

#[test]
fn with_takeover_every_dns_replica_listens_on_every_dns_address() {
    // The agent adds a taken address while oooi-dns runs: it is bound in
    // advance. Without takeover a replica serves its own address only.
    let all: Vec<std::net::SocketAddr> = vec![
        "192.0.2.3:53".parse().unwrap(),
        "192.0.2.6:53".parse().unwrap(),
    ];
    for dns in &ha().dns {
        let cfg = oooi_dns_config::Config::from_raw(&dns.spec.config.0).unwrap();
        let vlan = cfg.views.iter().find(|v| v.name == "vlan").unwrap();
        assert_eq!(vlan.listen, all);
        let raw = dns
            .spec
            .config
            .0
            .views
            .iter()
            .find(|v| v.name == "vlan")
            .unwrap();
        assert!(raw.freebind, "binds the addresses it does not hold yet");
        let t = dns.spec.pod.availability.address_takeover.as_ref().unwrap();
        assert_eq!(t.addresses, ["192.0.2.3/24", "192.0.2.6/24"]);
        assert_eq!(t.lease_prefix, "vlan-dns");
    }
    let off = plan_of(
        &infra_with(
            json!({"serverIPs": ["192.0.2.3", "192.0.2.6"]}),
            json!({"serverIPs": ["192.0.2.4", "192.0.2.7"]}),
            "Off",
        ),
        &[],
    )
    .desired
    .unwrap();
    for (dns, own) in off.dns.iter().zip(["192.0.2.3:53", "192.0.2.6:53"]) {
        let cfg = oooi_dns_config::Config::from_raw(&dns.spec.config.0).unwrap();
        let vlan = cfg.views.iter().find(|v| v.name == "vlan").unwrap();
        assert_eq!(vlan.listen, [own.parse().unwrap()], "its own address");
        let raw = dns
            .spec
            .config
            .0
            .views
            .iter()
            .find(|v| v.name == "vlan")
            .unwrap();
        assert!(!raw.freebind, "its own address is there at start");
        assert!(dns.spec.pod.availability.address_takeover.is_none());
    }
}

#[test]
fn every_dns_replica_checks_every_proxy_replica_over_the_pod_network() {
    for dns in &ha().dns {
        let health = dns.spec.config.0.health.clone().expect("health checks");
        assert_eq!(health.interval_ms, Some(1000));
        let checks: Vec<(String, Option<String>)> = health
            .checks
            .iter()
            .map(|c| {
                (
                    c.address.to_string(),
                    c.http.as_ref().map(|u| u.to_string()),
                )
            })
            .collect();
        assert_eq!(
            checks,
            [
                ("192.0.2.4", "vlan-proxy-push"),
                ("192.0.2.7", "vlan-proxy-2-push"),
                ("192.0.2.8", "vlan-proxy-3-push"),
            ]
            .map(|(a, svc)| (
                a.to_string(),
                Some(format!("http://{svc}.oooi.svc:9446/ready"))
            ))
        );
        oooi_dns_config::Config::from_raw(&dns.spec.config.0).expect("the DNS server takes it");
    }
    // One proxy: nothing to choose between, no checks.
    let one = plan_of(
        &infra(
            json!({"serverIPs": ["192.0.2.3", "192.0.2.6"]}),
            json!({"serverIP": "192.0.2.4"}),
        ),
        &[],
    )
    .desired
    .unwrap();
    assert!(one.dns[0].spec.config.0.health.is_none());
}

#[test]
fn the_vlan_view_of_every_dns_replica_answers_with_every_proxy() {
    let d = ha();
    let want = [ip("192.0.2.4"), ip("192.0.2.7"), ip("192.0.2.8")];
    for dns in &d.dns {
        let cfg = oooi_dns_config::Config::from_raw(&dns.spec.config.0).unwrap();
        let vlan = cfg.views.iter().find(|v| v.name == "vlan").unwrap();
        let api = vlan.zones[0]
            .records
            .iter()
            .find(|(n, _)| n.to_string() == "api.c1.example.com.")
            .unwrap()
            .1;
        assert_eq!(api.a, want);
        // The aliases (a worker is known) name every proxy too.
        let alias = vlan
            .hosts
            .iter()
            .find(|(n, _)| n.to_string() == "kubernetes.default.svc.")
            .unwrap()
            .1;
        assert_eq!(alias.a, want);
    }
}

fn pod_labels(c: &Children) -> BTreeMap<String, String> {
    let t = &c.deployment.spec.as_ref().unwrap().template;
    t.metadata.as_ref().unwrap().labels.clone().unwrap()
}

fn selector(c: &Children) -> BTreeMap<String, String> {
    match_labels(&c.deployment)
}

fn matches(sel: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    sel.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn check_replica_children(children: &[Children]) {
    let first = &children[0];
    for (i, c) in children.iter().enumerate() {
        let name = c.deployment.metadata.name.clone().unwrap();
        assert_eq!(pod_labels(c).get(SERVER_LABEL), Some(&name));
        // Its own pods only, except the first, which keeps the one-server
        // selector so a single server grows into replicas in place.
        assert_eq!(selector(c).contains_key(SERVER_LABEL), i > 0, "{name}");
        for (j, other) in children.iter().enumerate() {
            if i != j && i > 0 {
                assert!(!matches(&selector(c), &pod_labels(other)), "{name}");
            }
        }
        // Never two on one node.
        let spec = c.deployment.spec.as_ref().unwrap();
        let pod = spec.template.spec.as_ref().unwrap();
        let anti = pod
            .affinity
            .as_ref()
            .unwrap()
            .pod_anti_affinity
            .as_ref()
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .unwrap();
        assert_eq!(anti[0].topology_key, "kubernetes.io/hostname");
        let peers = anti[0]
            .label_selector
            .as_ref()
            .unwrap()
            .match_labels
            .clone()
            .unwrap();
        assert!(children.iter().all(|o| matches(&peers, &pod_labels(o))));
        assert_eq!(
            spec.strategy.as_ref().unwrap().type_.as_deref(),
            Some("Recreate")
        );
        // The template hash the rollout gate compares.
        let ann = c.deployment.metadata.annotations.as_ref().unwrap();
        assert_eq!(ann[TEMPLATE_HASH_ANNOTATION], template_hash(&c.deployment));
        // One budget, on the first, over every replica: all but one stay up.
        assert_eq!(c.pdb.is_some(), i == 0, "{name}");
    }
    let pdb = first.pdb.as_ref().unwrap().spec.clone().unwrap();
    assert_eq!(pdb.max_unavailable, Some(IntOrString::Int(1)));
    let sel = pdb.selector.unwrap().match_labels.unwrap();
    assert!(children.iter().all(|o| matches(&sel, &pod_labels(o))));
}

#[test]
fn dns_replicas_run_apart_under_one_budget_behind_one_service() {
    let d = ha();
    let children: Vec<Children> = d
        .dns
        .iter()
        .map(|s| plan::dns::children(s).unwrap())
        .collect();
    check_replica_children(&children);
    // The pod view's Service: made once, by the first, for every replica.
    assert_eq!(children[0].services.len(), 1);
    assert!(children[1].services.is_empty());
    let svc = children[0].services[0]
        .spec
        .clone()
        .unwrap()
        .selector
        .unwrap();
    assert!(children.iter().all(|o| matches(&svc, &pod_labels(o))));
}

#[test]
fn proxy_replicas_run_apart_and_each_push_service_names_its_own_pod() {
    let d = ha();
    let children: Vec<Children> = d
        .proxy
        .iter()
        .map(|s| plan::proxy::children(s, TOKEN).unwrap())
        .collect();
    check_replica_children(&children);
    let internal: Vec<usize> = children
        .iter()
        .map(|c| {
            c.services
                .iter()
                .filter(|s| !s.metadata.name.as_ref().unwrap().ends_with("-push"))
                .count()
        })
        .collect();
    assert_eq!(internal, [1, 0, 0]);
    for c in &children {
        let push = c
            .services
            .iter()
            .find(|s| s.metadata.name.as_ref().unwrap().ends_with("-push"))
            .unwrap();
        let sel = push.spec.clone().unwrap().selector.unwrap();
        let own: Vec<bool> = children
            .iter()
            .map(|o| matches(&sel, &pod_labels(o)))
            .collect();
        assert_eq!(own.iter().filter(|m| **m).count(), 1, "{sel:?}");
        assert!(matches(&sel, &pod_labels(c)));
    }
}

#[test]
fn one_address_in_either_form_is_the_single_server_of_before() {
    let one = plan_of(
        &infra(
            json!({"serverIP": "192.0.2.3"}),
            json!({"serverIP": "192.0.2.4"}),
        ),
        &[],
    );
    let listed = plan_of(
        &infra(
            json!({"serverIPs": ["192.0.2.3"]}),
            json!({"serverIPs": ["192.0.2.4"]}),
        ),
        &[],
    );
    let (one, listed) = (one.desired.unwrap(), listed.desired.unwrap());
    assert_eq!(one, listed);
    assert_eq!(names(&one.dns), ["vlan-dns"]);
    assert_eq!(one.dns[0].spec.replica, None);
    assert_eq!(one.proxy[0].spec.replica, None);
    let d: &DNSServer = &one.dns[0];
    let p: &ProxyServer = &one.proxy[0];
    for c in [
        plan::dns::children(d).unwrap(),
        plan::proxy::children(p, TOKEN).unwrap(),
    ] {
        assert!(c.pdb.is_none(), "no budget for one server");
        assert!(!selector(&c).contains_key(SERVER_LABEL));
    }
    assert_eq!(one.dhcp[0].spec.config.0.dns_servers, [ip("192.0.2.3")]);
}

#[test]
fn replica_addresses_are_one_form_at_most_five_and_distinct() {
    let errors = |dns: Value, proxy: Value| -> Vec<String> {
        plan_of(&infra(dns, proxy), &[])
            .errors
            .iter()
            .map(|e| e.to_string())
            .collect()
    };
    assert_eq!(
        errors(
            json!({"serverIP": "192.0.2.3", "serverIPs": ["192.0.2.6"]}),
            json!({"serverIP": "192.0.2.4"})
        ),
        ["spec.infraComponents.dns.serverIPs: set serverIP or serverIPs, not both"]
    );
    assert_eq!(
        errors(
            json!({"serverIP": "192.0.2.3"}),
            json!({"serverIPs": ["192.0.2.4", "192.0.2.5", "192.0.2.6", "192.0.2.7", "192.0.2.8", "192.0.2.9"]})
        ),
        ["spec.infraComponents.proxy.serverIPs: 6 addresses given, at most 5"]
    );
    assert_eq!(
        errors(
            json!({"serverIPs": ["192.0.2.3", "192.0.2.4"]}),
            json!({"serverIP": "192.0.2.4"})
        ),
        [
            "spec.infraComponents.proxy.serverIP: 192.0.2.4 is already used by spec.infraComponents.dns.serverIPs[1]"
        ]
    );
    let e = errors(
        json!({"serverIPs": ["192.0.2.3", "192.0.2.150"]}),
        json!({"serverIP": "192.0.2.4"}),
    );
    assert!(
        e.iter()
            .any(|m| m.contains("contains 192.0.2.150 (spec.infraComponents.dns.serverIPs[1])")),
        "{e:?}"
    );
    // An address that is none is refused when the Infra is read, naming
    // the field, as the controller reads it.
    let value = component_infra()
        .remove("/spec/infraComponents/dns/serverIP")
        .dns(json!({"serverIPs": ["192.0.2.3", "nope"]}))
        .json();
    let read = oooi_controller::cache::Decoded::<Infra>::from_value(value).unwrap();
    assert_eq!(
        read.object.unwrap_err(),
        "spec.infraComponents.dns.serverIPs[1]: `nope` is not an IPv4 or IPv6 address"
    );
    assert_eq!(
        errors(json!({"enabled": true}), json!({"serverIP": "192.0.2.4"})),
        [
            "spec.infraComponents.dns.serverIPs: set serverIP (one server) or serverIPs (one address per server)"
        ]
    );
}

#[test]
fn the_replica_count_changes_no_address_of_the_first() {
    // Growing from one to two keeps the first replica's name, address and,
    // without address takeover, its DNS config. (With takeover the first
    // replica's config and agent name every address, so it is updated
    // after the new one is ready: the rolling gate.)
    let one = plan_of(
        &infra_with(
            json!({"serverIP": "192.0.2.3"}),
            json!({"serverIP": "192.0.2.4"}),
            "Off",
        ),
        &[],
    )
    .desired
    .unwrap();
    let two = plan_of(
        &infra_with(
            json!({"serverIPs": ["192.0.2.3", "192.0.2.6"]}),
            json!({"serverIP": "192.0.2.4"}),
            "Off",
        ),
        &[],
    )
    .desired
    .unwrap();
    assert_eq!(one.dns[0].metadata.name, two.dns[0].metadata.name);
    assert_eq!(one.dns[0].spec.pod.vlan, two.dns[0].spec.pod.vlan);
    assert_eq!(one.dns[0].spec.config, two.dns[0].spec.config);
    assert_eq!(two.dns[1].spec.pod.vlan.address, "192.0.2.6/24");
}

#[test]
fn adding_or_removing_replicas_never_restarts_the_first() {
    // Without address takeover the first replica's pod template (so its
    // pod) is the same alone and among others: growing to three and back
    // restarts nothing that serves.
    let hashes = |dns: Value, proxy: Value| -> (String, String) {
        let d = plan_of(&infra_with(dns, proxy, "Off"), &[])
            .desired
            .unwrap();
        (
            template_hash(&plan::dns::children(&d.dns[0]).unwrap().deployment),
            template_hash(
                &plan::proxy::children(&d.proxy[0], TOKEN)
                    .unwrap()
                    .deployment,
            ),
        )
    };
    let one = hashes(
        json!({"serverIP": "192.0.2.3"}),
        json!({"serverIP": "192.0.2.4"}),
    );
    let three = hashes(
        json!({"serverIPs": ["192.0.2.3", "192.0.2.6", "192.0.2.9"]}),
        json!({"serverIPs": ["192.0.2.4", "192.0.2.7", "192.0.2.8"]}),
    );
    assert_eq!(one, three);
}
