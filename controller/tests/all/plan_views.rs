//! The two DNS views the planner gives an Infra, from the product's promise:
//! - with `internalProxyService` set, the pod view answers every owned
//!   control-plane name (`api`, `api-int`, `oauth`, `ignition`,
//!   `konnectivity`, and `*.apps` where the attachment publishes it to pods)
//!   with the internal proxy Service's ClusterIP; without it, none of them;
//! - the pod view never answers the `kubernetes` aliases;
//! - the vlan view answers the aliases only while at least one worker
//!   address is known, as the proxy routes them.

#![allow(clippy::unwrap_used)]

use crate::plan_support;

use std::net::Ipv4Addr;

use oooi_controller::plan::{HostedClusterKey, plan_infra};
use plan_support::{attachment, attachment_yaml, dns_config, infra, ip, observed, two_attachments};

const CONTROL_PLANE: [&str; 5] = ["api", "api-int", "oauth", "ignition", "konnectivity"];
const ALIASES: [&str; 4] = [
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];

fn get<K: std::fmt::Display>(
    records: &std::collections::BTreeMap<K, oooi_dns_config::RecordSet>,
    key: &str,
) -> Option<Ipv4Addr> {
    records
        .iter()
        .find(|(k, _)| k.to_string() == key)
        .and_then(|(_, set)| set.a.first().copied())
}

/// The address a view answers for `name`: an exact host, else a record or
/// the closest wildcard of the zone that owns it; `None` when the view
/// forwards it (or, owned but not listed, answers NXDOMAIN).
fn answer(view: &oooi_dns_config::View, name: &str) -> Option<Ipv4Addr> {
    let fq = format!("{}.", name.trim_end_matches('.')).to_ascii_lowercase();
    if let Some(a) = get(&view.hosts, &fq) {
        return Some(a);
    }
    let zone = view.zones.iter().find(|z| {
        let o = z.origin.to_string();
        fq == o || fq.ends_with(&format!(".{o}"))
    })?;
    let origin = zone.origin.to_string();
    if let Some(a) = get(&zone.records, &fq) {
        return Some(a);
    }
    // Closest enclosing wildcard.
    let mut cur = fq.as_str();
    while cur != origin {
        let parent = cur.split_once('.').map_or("", |(_, p)| p);
        if let Some(a) = get(&zone.records, &format!("*.{parent}")) {
            return Some(a);
        }
        cur = parent;
    }
    None
}

fn views(p: &oooi_controller::plan::InfraPlan) -> oooi_dns_config::Config {
    oooi_dns_config::Config::from_raw(dns_config(p)).expect("oooi-dns accepts the planned config")
}

fn apps_published() -> &'static str {
    "  appsIngress:\n    enabled: true\n    publishToPodNetwork: true\n    metallb: {mode: External, addresses: [\"192.0.2.200-192.0.2.209\"]}\n"
}

#[test]
fn with_internal_proxy_service_the_pod_view_answers_every_control_plane_name() {
    let mut i = infra("oooi", "vlan");
    i.spec.infra_components.proxy.internal_proxy_service =
        Some("vlan-proxy.oooi.svc.cluster.local".into());
    let atts = [
        attachment_yaml("oooi", "c1", "vlan", "c1", "c1", apps_published()),
        attachment("oooi", "c2", "vlan", "c2"),
    ];
    let mut obs = observed(&[("c1", &["192.0.2.101"])]);
    obs.clusters
        .entry(HostedClusterKey::new("clusters", "c1"))
        .or_default()
        .apps_vip = Some(ip("192.0.2.200").into());
    obs.internal_proxy_ip = Some(ip("172.30.0.10").into());
    let c = views(&plan_infra(&i, &atts, &obs));
    let (vlan, pod) = (&c.views[0], &c.views[1]);
    for cluster in ["c1", "c2"] {
        for n in CONTROL_PLANE {
            let name = format!("{n}.{cluster}.example.com");
            assert_eq!(answer(pod, &name), Some(ip("172.30.0.10")), "pod {name}");
            assert_eq!(answer(vlan, &name), Some(ip("192.0.2.4")), "vlan {name}");
        }
    }
    // *.apps only where the attachment publishes it (and a VIP is known).
    assert_eq!(
        answer(pod, "console-openshift-console.apps.c1.example.com"),
        Some(ip("172.30.0.10"))
    );
    assert_eq!(
        answer(pod, "console-openshift-console.apps.c2.example.com"),
        None
    );
    // Never the aliases, even with workers known.
    for alias in ALIASES {
        assert_eq!(answer(pod, alias), None, "pod {alias}");
        assert_eq!(answer(vlan, alias), Some(ip("192.0.2.4")), "vlan {alias}");
    }
}

#[test]
fn an_internal_proxy_service_given_as_an_address_needs_no_observation() {
    let mut i = infra("oooi", "vlan");
    i.spec.infra_components.proxy.internal_proxy_service = Some("172.30.40.4".into());
    let c = views(&plan_infra(
        &i,
        &[attachment("oooi", "c1", "vlan", "c1")],
        &observed(&[]),
    ));
    assert_eq!(
        answer(&c.views[1], "api.c1.example.com"),
        Some(ip("172.30.40.4"))
    );
}

#[test]
fn without_internal_proxy_service_the_pod_view_answers_none_of_them() {
    let i = infra("oooi", "vlan");
    let atts = [attachment_yaml(
        "oooi",
        "c1",
        "vlan",
        "c1",
        "c1",
        apps_published(),
    )];
    let mut obs = observed(&[("c1", &["192.0.2.101"])]);
    obs.clusters
        .entry(HostedClusterKey::new("clusters", "c1"))
        .or_default()
        .apps_vip = Some(ip("192.0.2.200").into());
    // The proxy's own internal Service has an address, but the Infra does
    // not name it: the pod view stays out of the way.
    obs.internal_proxy_ip = Some(ip("172.30.0.10").into());
    let c = views(&plan_infra(&i, &atts, &obs));
    let pod = &c.views[1];
    for n in CONTROL_PLANE {
        assert_eq!(answer(pod, &format!("{n}.c1.example.com")), None, "{n}");
    }
    assert_eq!(answer(pod, "x.apps.c1.example.com"), None);
    for alias in ALIASES {
        assert_eq!(answer(pod, alias), None, "{alias}");
    }
    assert!(pod.hosts.is_empty() && pod.zones.is_empty());
}

#[test]
fn the_vlan_view_answers_the_aliases_only_while_a_worker_address_is_known() {
    let i = infra("oooi", "vlan");
    let atts = two_attachments();
    let none = views(&plan_infra(&i, &atts, &observed(&[])));
    for alias in ALIASES {
        assert_eq!(answer(&none.views[0], alias), None, "no workers: {alias}");
    }
    // The clusters' own names do not wait for workers.
    assert_eq!(
        answer(&none.views[0], "api.c1.example.com"),
        Some(ip("192.0.2.4"))
    );

    // The first Machine address of either cluster brings them.
    let one = plan_infra(&i, &atts, &observed(&[("c2", &["192.0.2.121"])]));
    let raw = dns_config(&one);
    assert_eq!(
        raw.clusters
            .iter()
            .map(|c| (c.name.as_str(), c.aliases))
            .collect::<Vec<_>>(),
        vec![("c1", false), ("c2", true)]
    );
    let one = views(&one);
    for alias in ALIASES {
        assert_eq!(
            answer(&one.views[0], alias),
            Some(ip("192.0.2.4")),
            "{alias}"
        );
    }
}

/// Naming the proxy's own Service (in any of its DNS forms) keeps oooi
/// making it; naming another Service or an address leaves the Service to
/// the operator.
#[test]
fn naming_the_proxys_own_service_keeps_oooi_making_it() {
    let internal_service = |named: Option<&str>| {
        let mut i = infra("oooi", "vlan");
        i.spec.infra_components.proxy.internal_proxy_service = named.map(str::to_string);
        let p = plan_infra(
            &i,
            &[attachment("oooi", "c1", "vlan", "c1")],
            &observed(&[]),
        );
        p.desired
            .unwrap()
            .proxy
            .into_iter()
            .next()
            .unwrap()
            .spec
            .internal_service
    };
    assert!(internal_service(None));
    for own in [
        "vlan-proxy",
        "vlan-proxy.oooi",
        "vlan-proxy.oooi.svc",
        "vlan-proxy.oooi.svc.cluster.local",
        "vlan-proxy.oooi.svc.cluster.local.",
    ] {
        assert!(internal_service(Some(own)), "{own}");
    }
    for other in [
        "ingress.oooi.svc",
        "vlan-proxy.other.svc",
        "vlan-proxy-x.oooi.svc",
        "172.30.40.4",
    ] {
        assert!(!internal_service(Some(other)), "{other}");
    }
}
