//! Planner rules: defaults, IP checks, aggregation conflicts, worker
//! addresses and alias routes, reservations, label selection, determinism,
//! and that every rendered config passes its component's own validator.

#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

use crate::plan_support;

use std::net::IpAddr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use oooi_controller::crd::{self, condition};
use oooi_controller::plan::{self, Exclusion, HostedClusterKey, Observed, plan_infra};
use oooi_routes::{Decision, MatchKind, Refusal, RouteMatch, RouteTable, Router, Upstream};
use plan_support::*;

fn decide(router: &Router, port: u16, sni: Option<&str>, src: &str) -> Result<Upstream, Refusal> {
    let src: IpAddr = src.parse().unwrap();
    match router.decide(port, sni, Some(src)) {
        Decision::Forward { route, .. } => Ok(route.upstream.clone()),
        Decision::Refuse(r) => Err(r),
    }
}

fn addr(host: &str, port: u16) -> Upstream {
    Upstream::Address {
        host: host.to_string(),
        port,
    }
}

#[test]
fn defaults_follow_hypershift() {
    let i = infra("oooi", "vlan");
    let a = attachment("oooi", "c1", "vlan", "c1");
    assert_eq!(a.spec.hosted_cluster_ref.namespace, "clusters");
    let p = plan_infra(&i, &[a], &Observed::default());
    assert!(p.errors.is_empty(), "{:?}", p.errors);
    let o = &p.attachments[0];
    assert!(o.accepted());
    assert_eq!(o.domain, "c1.example.com");
    assert_eq!(o.control_plane_namespace, "clusters-c1");
    let t = table(&p);
    let got: Vec<(u16, String, Upstream)> = t
        .routes
        .iter()
        .map(|r| match &r.matches {
            RouteMatch::Sni(s) => (r.port, s.clone(), r.upstream.clone()),
            RouteMatch::Source(c) | RouteMatch::AliasSource(c) => {
                (r.port, c.to_string(), r.upstream.clone())
            }
            RouteMatch::SniFrom { sni, .. } => (r.port, sni.clone(), r.upstream.clone()),
        })
        .collect();
    let ns = "clusters-c1.svc.cluster.local";
    assert_eq!(
        got,
        vec![
            (
                6443,
                "api.c1.example.com".into(),
                addr(&format!("kube-apiserver.{ns}"), 6443)
            ),
            (
                6443,
                "api-int.c1.example.com".into(),
                addr(&format!("kube-apiserver.{ns}"), 6443)
            ),
            (
                443,
                "oauth.c1.example.com".into(),
                addr(&format!("oauth-openshift.{ns}"), 6443)
            ),
            (
                443,
                "ignition.c1.example.com".into(),
                addr(&format!("ignition-server-proxy.{ns}"), 443)
            ),
            (
                443,
                "konnectivity.c1.example.com".into(),
                addr(&format!("konnectivity-server.{ns}"), 8091)
            ),
        ]
    );
    assert!(
        t.routes
            .iter()
            .all(|r| r.owner.as_deref() == Some("clusters/c1"))
    );
    let proxy = p.desired.as_ref().unwrap().proxy.first().unwrap();
    assert_eq!(proxy.spec.tls_ports, vec![443, 6443]);
    assert_eq!(proxy.spec.push_token_secret.name, "vlan-proxy-push-token");
}

#[test]
fn derived_objects_are_named_labelled_and_owned_by_the_infra() {
    let i = infra("oooi", "vlan");
    let p = plan_infra(&i, &[], &Observed::default());
    let d = p.desired.unwrap();
    let dhcp = d.dhcp.into_iter().next().unwrap();
    assert_eq!(dhcp.metadata.name.as_deref(), Some("vlan-dhcp"));
    assert_eq!(dhcp.metadata.namespace.as_deref(), Some("oooi"));
    let owner = &dhcp.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("Infra", "vlan", "uid-vlan")
    );
    assert_eq!(owner.controller, Some(true));
    let labels = dhcp.metadata.labels.unwrap();
    assert_eq!(labels["hostedcluster.densityops.com/infra"], "vlan");
    assert_eq!(labels["app.kubernetes.io/component"], "dhcp");
    // NAD namespace defaults to the Infra's; the address carries the CIDR's prefix.
    assert_eq!(dhcp.spec.pod.vlan.network_attachment_namespace, "oooi");
    assert_eq!(dhcp.spec.pod.vlan.address, "192.0.2.2/24");
    assert_eq!(
        d.dns.into_iter().next().unwrap().spec.pod.vlan.address,
        "192.0.2.3/24"
    );
    assert_eq!(
        d.proxy.into_iter().next().unwrap().metadata.name.as_deref(),
        Some("vlan-proxy")
    );
}

fn errors_of(i: &crd::Infra) -> Vec<String> {
    let p = plan_infra(i, &[], &Observed::default());
    assert!(p.desired.is_none(), "an invalid spec plans nothing");
    let d = p.degraded();
    assert_eq!(
        (d.status.as_str(), d.reason.as_str()),
        ("True", "InvalidSpec")
    );
    p.errors.iter().map(|e| e.to_string()).collect()
}

#[test]
fn gateway_outside_the_cidr_is_reported_by_field() {
    let mut i = infra("oooi", "vlan");
    i.spec.network_config.gateway = Some("192.0.3.1".parse().unwrap());
    let e = errors_of(&i);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with("spec.networkConfig.gateway: 192.0.3.1"),
        "{e:?}"
    );
}

#[test]
fn component_addresses_must_be_host_addresses_inside_the_cidr() {
    let mut i = infra("oooi", "vlan");
    i.spec.infra_components.dns.server_ip = Some("10.1.1.1".parse().unwrap());
    i.spec.infra_components.proxy.server_ip = Some("192.0.2.255".parse().unwrap());
    let e = errors_of(&i);
    assert!(
        e.iter()
            .any(|m| m.starts_with("spec.infraComponents.dns.serverIP: 10.1.1.1")),
        "{e:?}"
    );
    assert!(
        e.iter()
            .any(|m| m.starts_with("spec.infraComponents.proxy.serverIP: 192.0.2.255")),
        "{e:?}"
    );
}

#[test]
fn the_pool_must_exclude_infra_addresses() {
    let mut i = infra("oooi", "vlan");
    i.spec.infra_components.dhcp.range_start = "192.0.2.3".parse().unwrap();
    let e = errors_of(&i);
    assert!(
        e.iter()
            .any(|m| m.starts_with("spec.infraComponents.dhcp.rangeStart")
                && m.contains("192.0.2.3")
                && m.contains("dns.serverIP")),
        "{e:?}"
    );
    assert!(
        e.iter().any(|m| m.contains("192.0.2.4")),
        "the proxy address too: {e:?}"
    );
}

#[test]
fn a_reversed_range_and_shared_infra_addresses_are_reported() {
    let mut i = infra("oooi", "vlan");
    i.spec.infra_components.dhcp.range_start = "192.0.2.200".parse().unwrap();
    i.spec.infra_components.proxy.server_ip = Some("192.0.2.3".parse().unwrap());
    let e = errors_of(&i);
    assert!(
        e.iter().any(|m| m.starts_with(
            "spec.infraComponents.dhcp.rangeEnd: 192.0.2.199 is before rangeStart 192.0.2.200"
        )),
        "{e:?}"
    );
    assert!(e.iter().any(|m| m.starts_with("spec.infraComponents.proxy.serverIP: 192.0.2.3 is already used by spec.infraComponents.dns.serverIP")), "{e:?}");
}

/// An Infra as the API server holds it, with `cidr`, decoded as the
/// controller decodes what it reads: the CIDR rule applies then (the field
/// is a `VlanNetwork`), and the error names the field.
fn decode_with_cidr(cidr: &str) -> Result<crd::Infra, String> {
    let mut v = serde_json::to_value(infra("oooi", "vlan")).unwrap();
    v["spec"]["networkConfig"]["cidr"] = cidr.into();
    oooi_controller::cache::Decoded::<crd::Infra>::from_value(v)
        .unwrap()
        .object
}

#[test]
fn cidr_with_host_bits_and_bad_upstreams_are_reported() {
    let e = decode_with_cidr("192.0.2.7/24").unwrap_err();
    assert!(
        e.starts_with("spec.networkConfig.cidr: 192.0.2.7/24 has host bits set"),
        "{e:?}"
    );
    assert!(decode_with_cidr("192.0.2.0/24").is_ok());
    let mut i = infra("oooi", "vlan");
    i.spec.network_config.dns_servers = vec!["resolver".into()];
    let e = errors_of(&i);
    assert!(
        e.iter()
            .any(|m| m.starts_with("spec.networkConfig.dnsServers[0]")),
        "{e:?}"
    );
}

#[test]
fn an_invalid_infra_leaves_attachments_unknown_not_rejected() {
    let mut i = infra("oooi", "vlan");
    i.spec.network_config.gateway = Some("192.0.3.1".parse().unwrap());
    let p = plan_infra(
        &i,
        &[attachment("oooi", "c1", "vlan", "c1")],
        &Observed::default(),
    );
    let c = p.attachment_conditions("c1").unwrap();
    assert_eq!(
        (c[0].status.as_str(), c[0].reason.as_str()),
        ("Unknown", "InfraInvalid")
    );
}

#[test]
fn a_disabled_component_is_not_planned_and_its_address_is_not_checked() {
    let mut i = infra("oooi", "vlan");
    i.spec.infra_components.dhcp.enabled = false;
    i.spec.infra_components.dhcp.server_ip = Some("10.9.9.9".parse().unwrap());
    let p = plan_infra(&i, &[], &Observed::default());
    let d = p.desired.expect("valid");
    assert!(d.dhcp.is_empty());
    assert!(!d.dns.is_empty() && !d.proxy.is_empty());
}

#[test]
fn duplicate_hosted_cluster_excludes_both_and_names_the_other() {
    let i = infra("oooi", "vlan");
    let atts = [
        attachment_yaml("oooi", "a", "vlan", "c1", "c1", ""),
        attachment_yaml("oooi", "b", "vlan", "c1", "other", ""),
        attachment("oooi", "c", "vlan", "c3"),
    ];
    let p = plan_infra(&i, &atts, &Observed::default());
    assert_eq!(
        p.attachments[0].exclusion,
        Some(Exclusion::DuplicateHostedCluster(vec!["b".into()]))
    );
    assert_eq!(
        p.attachments[1].exclusion,
        Some(Exclusion::DuplicateHostedCluster(vec!["a".into()]))
    );
    assert!(p.attachments[2].accepted());
    assert_eq!(
        (p.totals.total, p.totals.accepted, p.totals.excluded),
        (3, 1, 2)
    );
    let owners: std::collections::BTreeSet<_> = table(&p)
        .routes
        .iter()
        .map(|r| r.owner.clone().unwrap())
        .collect();
    assert_eq!(owners.into_iter().collect::<Vec<_>>(), ["clusters/c3"]);
    let c = p.attachment_conditions("a").unwrap();
    assert_eq!(
        (
            c[0].type_.as_str(),
            c[0].status.as_str(),
            c[0].reason.as_str()
        ),
        (condition::ACCEPTED, "False", "DuplicateHostedCluster")
    );
    assert!(c[0].message.contains("spec.hostedClusterRef") && c[0].message.contains('b'));
    let d = p.degraded();
    assert_eq!(d.reason, "AttachmentsExcluded");
    assert!(d.message.contains("a (DuplicateHostedCluster)"));
}

#[test]
fn duplicate_domain_excludes_both() {
    let i = infra("oooi", "vlan");
    let atts = [
        attachment_yaml("oooi", "a", "vlan", "c1", "shared", ""),
        attachment_yaml("oooi", "b", "vlan", "c2", "shared", ""),
    ];
    let p = plan_infra(&i, &atts, &Observed::default());
    for o in &p.attachments {
        assert!(
            matches!(o.exclusion, Some(Exclusion::DuplicateDomain(_))),
            "{o:?}"
        );
    }
    assert!(table_or_empty(&p).is_empty());
    let dns = dns_config(&p);
    assert!(
        dns.clusters.is_empty(),
        "excluded clusters get no DNS names"
    );
}

fn table_or_empty(p: &plan::InfraPlan) -> Vec<oooi_routes::Route> {
    p.desired
        .as_ref()
        .unwrap()
        .proxy
        .first()
        .unwrap()
        .spec
        .routes
        .0
        .clone()
}

#[test]
fn invalid_attachment_specs_are_excluded_naming_the_field() {
    let i = infra("oooi", "vlan");
    let long = "x".repeat(60);
    let atts = [
        attachment_yaml(
            "oooi",
            "dup-name",
            "vlan",
            "c1",
            "c1",
            "  services:\n    - {name: api, port: 6443, targetService: kube-apiserver, targetPort: 6443}\n    - {name: api, port: 443, targetService: kube-apiserver, targetPort: 6443}\n",
        ),
        attachment_yaml(
            "oooi",
            "alias-sni",
            "vlan",
            "c2",
            "c2",
            "  services:\n    - {name: api, sni: kubernetes.default.svc, port: 6443, targetService: kube-apiserver, targetPort: 6443}\n",
        ),
        attachment_yaml("oooi", "long-ns", "vlan", &long, "c3", ""),
    ];
    let p = plan_infra(&i, &atts, &Observed::default());
    let field = |n: &str| match &p
        .attachments
        .iter()
        .find(|a| a.name == n)
        .unwrap()
        .exclusion
    {
        Some(Exclusion::InvalidSpec(e)) => e.field.clone(),
        other => panic!("{n}: {other:?}"),
    };
    assert_eq!(field("dup-name"), "spec.services[1].name");
    assert_eq!(field("alias-sni"), "spec.services[0].sni");
    assert!(field("long-ns").starts_with("spec.controlPlaneNamespace"));
}

#[test]
fn a_shared_worker_address_drops_only_its_alias_routes() {
    let i = infra("oooi", "vlan");
    let atts = two_attachments();
    let obs = observed(&[
        ("c1", &["192.0.2.101", "192.0.2.150"]),
        ("c2", &["192.0.2.150", "192.0.2.121"]),
    ]);
    let p = plan_infra(&i, &atts, &obs);
    let (c1, c2) = (&p.attachments[0], &p.attachments[1]);
    assert!(
        c1.accepted() && c2.accepted(),
        "a shared address excludes nobody"
    );
    assert_eq!(c1.worker_addresses, vec![ip("192.0.2.101")]);
    assert_eq!(c1.conflicting_addresses, vec![ip("192.0.2.150")]);
    assert_eq!(c2.worker_addresses, vec![ip("192.0.2.121")]);
    let t = table(&p);
    let sources = source_routes(&t);
    assert_eq!(sources, ["192.0.2.101/32", "192.0.2.121/32"]);
    assert_eq!(
        t.routes
            .iter()
            .filter(|r| matches!(r.matches, RouteMatch::Sni(_)))
            .count(),
        10
    );

    let router = Router::new(t);
    let api1 = addr("kube-apiserver.clusters-c1.svc.cluster.local", 6443);
    let api2 = addr("kube-apiserver.clusters-c2.svc.cluster.local", 6443);
    assert_eq!(
        decide(&router, 6443, Some("kubernetes.default.svc"), "192.0.2.101"),
        Ok(api1.clone())
    );
    assert_eq!(decide(&router, 6443, None, "192.0.2.121"), Ok(api2.clone()));
    // The shared address gets no alias route, for either cluster.
    assert_eq!(
        decide(&router, 6443, Some("kubernetes"), "192.0.2.150"),
        Err(Refusal::AliasFromUnknownSource)
    );
    assert_eq!(
        decide(&router, 6443, None, "192.0.2.150"),
        Err(Refusal::UnknownSource)
    );
    // FQDN routes of both clusters still work from it.
    assert_eq!(
        decide(&router, 6443, Some("api.c2.example.com"), "192.0.2.150"),
        Ok(api2)
    );
    assert_eq!(
        decide(&router, 6443, Some("api.c1.example.com"), "192.0.2.150"),
        Ok(api1)
    );

    let c = p.attachment_conditions("c1").unwrap();
    assert_eq!(
        (
            c[1].type_.as_str(),
            c[1].status.as_str(),
            c[1].reason.as_str()
        ),
        (condition::DEGRADED, "True", "WorkerAddressConflict")
    );
    assert!(c[1].message.contains("192.0.2.150"));
}

#[test]
fn a_worker_never_reaches_another_clusters_api_by_alias() {
    let i = infra("oooi", "vlan");
    let atts = two_attachments();
    let p = plan_infra(
        &i,
        &atts,
        &observed(&[("c1", &["192.0.2.101"]), ("c2", &["192.0.2.121"])]),
    );
    let router = Router::new(table(&p));
    for (src, ns) in [
        ("192.0.2.101", "clusters-c1"),
        ("192.0.2.121", "clusters-c2"),
    ] {
        for alias in oooi_routes::KUBERNETES_ALIASES {
            let got = router.decide(6443, Some(alias), Some(src.parse().unwrap()));
            match got {
                Decision::Forward { route, kind, .. } => {
                    assert_eq!(kind, MatchKind::SourceAlias);
                    assert_eq!(
                        route.upstream,
                        addr(&format!("kube-apiserver.{ns}.svc.cluster.local"), 6443)
                    );
                }
                other => panic!("{src} {alias}: {other:?}"),
            }
        }
    }
    assert_eq!(
        decide(&router, 6443, Some("kubernetes"), "192.0.2.99"),
        Err(Refusal::AliasFromUnknownSource)
    );
}

#[test]
fn worker_addresses_come_from_machines_in_the_cidr_with_vmis_as_fallback() {
    let i = infra("oooi", "vlan");
    let mut obs = Observed::default();
    obs.clusters.insert(
        HostedClusterKey::new("clusters", "c1"),
        plan::ObservedCluster {
            machines: vec![
                plan::ObservedMachine {
                    name: "m0".into(),
                    addresses: vec![
                        "10.128.0.5".into(),
                        "192.0.2.101".into(),
                        "fd00::1".into(),
                        "worker-0".into(),
                    ],
                },
                plan::ObservedMachine {
                    name: "m1".into(),
                    addresses: vec![],
                },
                // An infra address is never a worker address.
                plan::ObservedMachine {
                    name: "m2".into(),
                    addresses: vec!["192.0.2.4".into()],
                },
            ],
            vmis: vec![
                vmi("m0", "02:00:00:00:00:01", &["192.0.2.177"]),
                vmi("m1", "02:00:00:00:00:02", &["192.0.2.102/24"]),
                vmi("orphan", "02:00:00:00:00:03", &["198.51.100.9"]),
            ],
            apps_vip: None,
        },
    );
    let p = plan_infra(&i, &[attachment("oooi", "c1", "vlan", "c1")], &obs);
    assert_eq!(
        p.attachments[0].worker_addresses,
        vec![ip("192.0.2.101"), ip("192.0.2.102")]
    );
}

#[test]
fn dhcp_reservations_come_from_vmi_macs_and_conflicts_are_dropped() {
    let i = infra("oooi", "vlan");
    let mut obs = Observed::default();
    let cluster = |vmis| plan::ObservedCluster {
        vmis,
        ..Default::default()
    };
    obs.clusters.insert(
        HostedClusterKey::new("clusters", "c1"),
        cluster(vec![
            vmi("c1-w0", "02:00:00:00:00:01", &["192.0.2.101"]),
            vmi("c1-w1", "02-00-00-00-00-AA", &["192.0.2.102"]),
            vmi("c1-w2", "02:00:00:00:00:0c", &["192.0.2.150"]),
        ]),
    );
    obs.clusters.insert(
        HostedClusterKey::new("clusters", "c2"),
        cluster(vec![
            vmi("c2-w0", "02:00:00:00:00:0c", &["192.0.2.151"]),
            vmi("c2-w1", "02:00:00:00:00:21", &["192.0.2.121"]),
        ]),
    );
    let atts = two_attachments();
    let p = plan_infra(&i, &atts, &obs);
    let dhcp = dhcp_config(&p);
    let got: Vec<(String, String, Option<String>)> = dhcp
        .reservations
        .iter()
        .map(|r| (r.mac.to_string(), r.ip.to_string(), r.hostname.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "02:00:00:00:00:01".into(),
                "192.0.2.101".into(),
                Some("c1-w0".into())
            ),
            (
                "02:00:00:00:00:21".into(),
                "192.0.2.121".into(),
                Some("c2-w1".into())
            ),
            (
                "02:00:00:00:00:aa".into(),
                "192.0.2.102".into(),
                Some("c1-w1".into())
            ),
        ]
    );
    let cfg =
        oooi_dhcp_config::Config::from_raw(dhcp).expect("oooi-dhcp accepts the planned config");
    assert_eq!(cfg.reservations.len(), 3);
}

#[test]
fn rendered_configs_pass_their_components_validators() {
    let mut i = infra("oooi", "vlan");
    i.spec.network_config.domain = Some("vlan.example.com".into());
    i.spec.network_config.mtu = Some(1450);
    // The pod view answers only with an internal proxy the Infra names.
    i.spec.infra_components.proxy.internal_proxy_service = Some("vlan-proxy.oooi.svc".into());
    let atts = two_attachments();
    let mut obs = observed(&[("c1", &["192.0.2.101"]), ("c2", &["192.0.2.121"])]);
    obs.internal_proxy_ip = Some(ip("172.30.0.10").into());
    let p = plan_infra(&i, &atts, &obs);
    let d = p.desired.as_ref().unwrap();

    let dhcp = oooi_dhcp_config::Config::from_raw(&d.dhcp.first().unwrap().spec.config.0).unwrap();
    assert_eq!(dhcp.server_ip, ip("192.0.2.2"));
    assert_eq!(dhcp.gateway, Some(ip("192.0.2.1")));
    assert_eq!(dhcp.dns_servers, vec![ip("192.0.2.3")]);
    assert_eq!(
        (dhcp.range_start, dhcp.range_end),
        (ip("192.0.2.100"), ip("192.0.2.199"))
    );
    assert!(dhcp.excluded.contains(&ip("192.0.2.4")));
    assert_eq!(dhcp.lease_seconds, 3600);
    assert_eq!(dhcp.mtu, Some(1450));
    assert_eq!(dhcp.domain.as_deref(), Some("vlan.example.com"));

    let dns = oooi_dns_config::Config::from_raw(&d.dns.first().unwrap().spec.config.0)
        .expect("oooi-dns accepts the planned config");
    assert_eq!(
        dns.upstreams.servers,
        vec![
            "10.0.0.10:53".parse().unwrap(),
            "10.0.0.11:5353".parse().unwrap()
        ]
    );
    let vlan = &dns.views[0];
    assert_eq!(vlan.listen, vec!["192.0.2.3:53".parse().unwrap()]);
    let origins: Vec<String> = vlan.zones.iter().map(|z| z.origin.to_string()).collect();
    assert!(
        origins.contains(&"c1.example.com.".to_string())
            && origins.contains(&"c2.example.com.".to_string())
    );
    let pod = &dns.views[1];
    assert!(pod.listen.is_empty());
    assert_eq!(pod.pod_ip_ports, vec![5353]);
    assert!(
        !pod.hosts.is_empty(),
        "the pod view answers the control-plane names with the internal proxy"
    );
    let raw = &d.dns.first().unwrap().spec.config.0;
    assert_eq!(raw.clusters[0].internal_proxy, "172.30.0.10".parse().ok());
    assert_eq!(
        raw.clusters[0].names.as_ref().unwrap(),
        &["api", "api-int", "oauth", "ignition", "konnectivity"]
    );

    let t = table(&p);
    // Ten names, and per worker address a source route (6443) and an
    // alias-source route (443).
    assert_eq!(t.routes.len(), 14);
    let json = t.to_json();
    assert_eq!(RouteTable::from_json(&json).unwrap(), t);
}

#[test]
fn apps_vip_adds_wildcard_route_and_dns_and_bad_pools_are_reported() {
    let i = infra("oooi", "vlan");
    let apps = |range: &str| {
        format!(
            "  appsIngress:\n    enabled: true\n    metallb: {{mode: External, addresses: [\"{range}\"]}}\n"
        )
    };
    let atts = [
        attachment_yaml(
            "oooi",
            "c1",
            "vlan",
            "c1",
            "c1",
            &apps("192.0.2.200-192.0.2.209"),
        ),
        attachment_yaml("oooi", "c2", "vlan", "c2", "c2", &apps("192.0.2.205/30")),
        attachment_yaml(
            "oooi",
            "c3",
            "vlan",
            "c3",
            "c3",
            &apps("192.0.2.150-192.0.2.160"),
        ),
    ];
    let mut obs = observed(&[]);
    obs.clusters
        .entry(HostedClusterKey::new("clusters", "c1"))
        .or_default()
        .apps_vip = Some(ip("192.0.2.200").into());
    let p = plan_infra(&i, &atts, &obs);
    let c1 = &p.attachments[0];
    assert!(c1.apps_ingress_errors.is_empty());
    assert_eq!(c1.apps_vip, Some(ip("192.0.2.200").into()));
    let e2 = &p.attachments[1].apps_ingress_errors;
    assert_eq!(e2[0].field, "spec.appsIngress.metallb.addresses[0]");
    assert!(
        e2[0].message.contains("overlaps") && e2[0].message.contains("c1"),
        "{e2:?}"
    );
    let e3 = &p.attachments[2].apps_ingress_errors;
    assert!(e3[0].message.contains("DHCP pool"), "{e3:?}");
    let c = p.attachment_conditions("c3").unwrap();
    assert_eq!(c[1].reason, "AppsIngressPoolConflict");

    let router = Router::new(table(&p));
    assert_eq!(
        decide(
            &router,
            443,
            Some("console-openshift-console.apps.c1.example.com"),
            "192.0.2.101"
        ),
        Ok(addr("192.0.2.200", 443))
    );
    let dns = dns_config(&p);
    assert_eq!(dns.clusters[0].apps_vip, "192.0.2.200".parse().ok());
    assert_eq!(dns.clusters[1].apps_vip, None);
}

#[test]
fn apps_vip_is_routed_on_80_by_host_and_reaches_pods_only_when_published() {
    let mut i = infra("oooi", "vlan");
    i.spec.infra_components.proxy.internal_proxy_service = Some("vlan-proxy.oooi.svc".into());
    let apps = |publish: bool| {
        format!(
            "  appsIngress:\n    enabled: true\n    publishToPodNetwork: {publish}\n    metallb: {{mode: External, addresses: [\"192.0.2.200-192.0.2.209\"]}}\n"
        )
    };
    let mut obs = observed(&[]);
    obs.internal_proxy_ip = Some(ip("172.30.0.10").into());

    // No VIP yet: nothing on 80, nothing published to pods.
    let atts = [attachment_yaml(
        "oooi",
        "c1",
        "vlan",
        "c1",
        "c1",
        &apps(true),
    )];
    let p = plan_infra(&i, &atts, &obs);
    assert!(table(&p).routes.iter().all(|r| r.port != 80));
    assert!(!dns_config(&p).clusters[0].apps_to_pods);

    obs.clusters
        .entry(HostedClusterKey::new("clusters", "c1"))
        .or_default()
        .apps_vip = Some(ip("192.0.2.200").into());
    let p = plan_infra(&i, &atts, &obs);
    let spec = &p.desired.as_ref().unwrap().proxy.first().unwrap().spec;
    assert!(spec.tls_ports.contains(&80), "{:?}", spec.tls_ports);
    let router = Router::new(table(&p));
    let host = "console-openshift-console.apps.c1.example.com";
    assert_eq!(
        decide(&router, 80, Some(host), "192.0.2.101"),
        Ok(addr("192.0.2.200", 80))
    );
    assert_eq!(
        decide(&router, 443, Some(host), "192.0.2.101"),
        Ok(addr("192.0.2.200", 443))
    );
    assert!(decide(&router, 80, Some("api.c1.example.com"), "192.0.2.101").is_err());
    let dns = dns_config(&p);
    assert!(dns.clusters[0].apps_to_pods);
    // The rendered config is one the DNS server accepts.
    oooi_dns_config::Config::parse(&serde_saphyr::to_string(&dns).unwrap()).expect("dns config");

    // Not published: the pod view keeps forwarding apps names.
    let atts = [attachment_yaml(
        "oooi",
        "c1",
        "vlan",
        "c1",
        "c1",
        &apps(false),
    )];
    assert!(!dns_config(&plan_infra(&i, &atts, &obs)).clusters[0].apps_to_pods);
    // Published but no internal proxy known: nothing to answer with.
    let atts = [attachment_yaml(
        "oooi",
        "c1",
        "vlan",
        "c1",
        "c1",
        &apps(true),
    )];
    obs.internal_proxy_ip = None;
    let p = plan_infra(&i, &atts, &obs);
    let dns = dns_config(&p);
    assert_eq!(
        dns.clusters[0].apps_to_pods,
        dns.clusters[0].internal_proxy.is_some()
    );
}

#[test]
fn strict_isolation_without_known_workers_is_reported_pending() {
    let i = infra("oooi", "vlan");
    let p = plan_infra(
        &i,
        &[attachment_yaml(
            "oooi",
            "c1",
            "vlan",
            "c1",
            "c1",
            "  isolation: Strict\n",
        )],
        &Observed::default(),
    );
    let c = p.attachment_conditions("c1").unwrap();
    assert_eq!(
        (
            c[0].status.as_str(),
            c[1].status.as_str(),
            c[1].reason.as_str()
        ),
        ("True", "True", "StrictIsolationPending")
    );
}

#[test]
fn two_infras_in_one_namespace_keep_their_attachments_and_pods_apart() {
    let (a, b) = (infra("oooi", "vlan-a"), infra("oooi", "vlan-b"));
    let atts = [
        attachment("oooi", "c1", "vlan-a", "c1"),
        attachment("oooi", "c2", "vlan-b", "c2"),
        attachment("other", "c3", "vlan-a", "c3"),
    ];
    let pa = plan_infra(&a, &atts, &Observed::default());
    let pb = plan_infra(&b, &atts, &Observed::default());
    assert_eq!(
        pa.attachments
            .iter()
            .map(|o| o.name.as_str())
            .collect::<Vec<_>>(),
        ["c1"]
    );
    assert_eq!(
        pb.attachments
            .iter()
            .map(|o| o.name.as_str())
            .collect::<Vec<_>>(),
        ["c2"]
    );

    let da = pa.desired.unwrap();
    let db = pb.desired.unwrap();
    let ca = plan::dns::children(da.dns.first().unwrap()).unwrap();
    let cb = plan::dns::children(db.dns.first().unwrap()).unwrap();
    let sel = |c: &plan::Children| match_labels(&c.deployment);
    assert_ne!(sel(&ca), sel(&cb));
    assert_eq!(sel(&ca)["app.kubernetes.io/instance"], "vlan-a");
    assert_eq!(
        ca.services[0]
            .spec
            .as_ref()
            .unwrap()
            .selector
            .as_ref()
            .unwrap(),
        &sel(&ca)
    );
    assert_ne!(ca.deployment.metadata.name, cb.deployment.metadata.name);
    // The pod labels satisfy only their own selector.
    let pod_labels = ca
        .deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .clone()
        .unwrap();
    assert!(sel(&ca).iter().all(|(k, v)| pod_labels.get(k) == Some(v)));
    assert!(!sel(&cb).iter().all(|(k, v)| pod_labels.get(k) == Some(v)));
}

#[test]
fn planning_is_deterministic_whatever_the_input_order() {
    let i = infra("oooi", "vlan");
    let mut atts: Vec<_> = (0..12)
        .map(|n| attachment("oooi", &format!("c{n:02}"), "vlan", &format!("c{n:02}")))
        .collect();
    atts.push(attachment_yaml("oooi", "dup", "vlan", "c03", "dup", ""));
    let workers: Vec<(String, Vec<String>)> = (0..12)
        .map(|n| {
            (
                format!("c{n:02}"),
                vec![format!("192.0.2.{}", 10 + n), "192.0.2.60".to_string()],
            )
        })
        .collect();
    let w: Vec<(&str, Vec<&str>)> = workers
        .iter()
        .map(|(h, a)| (h.as_str(), a.iter().map(|s| s.as_str()).collect()))
        .collect();
    let w2: Vec<(&str, &[&str])> = w.iter().map(|(h, a)| (*h, a.as_slice())).collect();
    let obs = observed(&w2);
    let first = plan_infra(&i, &atts, &obs);
    atts.reverse();
    let second = plan_infra(&i, &atts, &obs);
    atts.swap(0, 5);
    let third = plan_infra(&i, &atts, &obs);
    assert_eq!(first, second);
    assert_eq!(first, third);
    let names: Vec<&str> = first.attachments.iter().map(|a| a.name.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
}

#[test]
fn attachments_being_deleted_leave_the_plan() {
    let i = infra("oooi", "vlan");
    let mut gone = attachment("oooi", "c1", "vlan", "c1");
    gone.metadata.deletion_timestamp = Some(Time(Default::default()));
    let p = plan_infra(
        &i,
        &[gone, attachment("oooi", "c2", "vlan", "c2")],
        &Observed::default(),
    );
    assert_eq!(p.attachments.len(), 1);
    assert_eq!(p.attachments[0].name, "c2");
}

#[test]
fn an_attachment_without_its_infra_says_so() {
    let i = infra("oooi", "vlan");
    let orphan = attachment("oooi", "c1", "missing", "c1");
    let p = plan_infra(&i, std::slice::from_ref(&orphan), &Observed::default());
    let now = Time(Default::default());
    let st = plan::infra::attachment_status(&orphan, &p, None, &now);
    let accepted = st
        .conditions
        .iter()
        .find(|c| c.type_ == "Accepted")
        .unwrap();
    assert_eq!(
        (accepted.status.as_str(), accepted.reason.as_str()),
        ("False", "InfraNotFound")
    );
    assert!(accepted.message.contains("spec.infraRef"));
}

// ---- The alias paths, from the product's promise: "The hostname-SNI alias
// path uses port 443; the IP-based Kubernetes Service path uses port 6443
// without SNI. Both are omitted while the address data is unavailable." ----

/// Where a connection from `src` goes on both alias paths: each alias by
/// SNI on 443, and no SNI on 6443.
fn alias_paths(router: &Router, src: &str) -> Vec<Result<Upstream, Refusal>> {
    oooi_routes::KUBERNETES_ALIASES
        .iter()
        .map(|alias| decide(router, 443, Some(alias), src))
        .chain(std::iter::once(decide(router, 6443, None, src)))
        .collect()
}

#[test]
fn both_alias_paths_lead_each_worker_to_its_own_kube_apiserver() {
    let i = infra("oooi", "vlan");
    let atts = two_attachments();
    let p = plan_infra(
        &i,
        &atts,
        &observed(&[("c1", &["192.0.2.101"]), ("c2", &["192.0.2.121"])]),
    );
    let router = Router::new(table(&p));
    for (src, ns) in [
        ("192.0.2.101", "clusters-c1"),
        ("192.0.2.121", "clusters-c2"),
    ] {
        let api = addr(&format!("kube-apiserver.{ns}.svc.cluster.local"), 6443);
        assert_eq!(alias_paths(&router, src), vec![Ok(api); 5], "{src}");
    }
    // Not from an address no cluster owns; and 443 without SNI is no path.
    assert!(
        alias_paths(&router, "192.0.2.99")
            .iter()
            .all(Result::is_err)
    );
    assert_eq!(
        decide(&router, 443, None, "192.0.2.101"),
        Err(Refusal::UnknownSource)
    );
    // The proxy listens on both ports.
    let proxy = p.desired.as_ref().unwrap().proxy.first().unwrap();
    assert_eq!(proxy.spec.tls_ports, vec![443, 6443]);
}

#[test]
fn alias_paths_are_absent_until_a_worker_address_is_known() {
    let i = infra("oooi", "vlan");
    let atts = [attachment("oooi", "c1", "vlan", "c1")];
    // Accepted, but no Machine address yet: neither path exists.
    let before = plan_infra(&i, &atts, &Observed::default());
    assert!(before.attachments[0].accepted());
    let t = table(&before);
    assert!(
        t.routes
            .iter()
            .all(|r| matches!(r.matches, RouteMatch::Sni(_) | RouteMatch::SniFrom { .. })),
        "only name routes: {:?}",
        t.routes
    );
    let router = Router::new(t);
    assert_eq!(
        alias_paths(&router, "192.0.2.101"),
        [
            vec![Err(Refusal::AliasFromUnknownSource); 4],
            vec![Err(Refusal::UnknownSource)]
        ]
        .concat()
    );
    // The first Machine address brings both paths, for that address only.
    let after = plan_infra(&i, &atts, &observed(&[("c1", &["192.0.2.101"])]));
    let t = table(&after);
    let mut paths: Vec<(u16, String, &str)> = t
        .routes
        .iter()
        .filter_map(|r| match &r.matches {
            RouteMatch::Source(c) => Some((r.port, c.to_string(), "source")),
            RouteMatch::AliasSource(c) => Some((r.port, c.to_string(), "alias_source")),
            _ => None,
        })
        .collect();
    paths.sort();
    assert_eq!(
        paths,
        [
            (443, "192.0.2.101/32".to_string(), "alias_source"),
            (6443, "192.0.2.101/32".to_string(), "source"),
        ]
    );
    let api = addr("kube-apiserver.clusters-c1.svc.cluster.local", 6443);
    let router = Router::new(t);
    assert_eq!(alias_paths(&router, "192.0.2.101"), vec![Ok(api); 5]);
    assert!(
        alias_paths(&router, "192.0.2.102")
            .iter()
            .all(Result::is_err)
    );
}
