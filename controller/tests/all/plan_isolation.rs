//! Many hosted clusters on one VLAN: `isolation: Strict` (names limited to
//! the cluster's workers on the VLAN, pending before any is known, ignition
//! open), the default left unchanged, shared worker addresses, apps VIP
//! changes and removed attachments, decided with the routing table's own
//! matcher.

#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

use crate::plan_support;

use std::net::IpAddr;

use oooi_controller::crd::{InfraClusterAttachment, condition};
use oooi_controller::plan::{self, HostedClusterKey, Observed, plan_infra};
use oooi_routes::{Cidr, Decision, Refusal, RouteMatch, RouteTable, Router, Upstream};
use plan_support::*;

fn decide(router: &Router, port: u16, sni: Option<&str>, src: &str) -> Result<String, Refusal> {
    let src: IpAddr = src.parse().unwrap();
    match router.decide(port, sni, Some(src)) {
        Decision::Forward { route, .. } => match &route.upstream {
            // A control-plane Service: `<service>.<namespace>`.
            Upstream::Address { host, .. } if host.ends_with(".svc.cluster.local") => {
                Ok(host.split('.').take(2).collect::<Vec<_>>().join("."))
            }
            other => Ok(other.to_string()),
        },
        Decision::Refuse(r) => Err(r),
    }
}

fn strict(name: &str) -> InfraClusterAttachment {
    attachment_yaml("oooi", name, "vlan", name, name, "  isolation: Strict\n")
}

fn apps(name: &str, range: &str, isolation: &str) -> InfraClusterAttachment {
    attachment_yaml(
        "oooi",
        name,
        "vlan",
        name,
        name,
        &format!(
            "  isolation: {isolation}\n  appsIngress:\n    enabled: true\n    metallb: {{mode: External, addresses: [\"{range}\"]}}\n"
        ),
    )
}

fn with_vip(mut o: Observed, hc: &str, vip: &str) -> Observed {
    o.clusters
        .entry(HostedClusterKey::new("clusters", hc))
        .or_default()
        .apps_vip = Some(ip(vip).into());
    o
}

/// Sources of the route for `sni` on `port`; None when it is open.
fn sources_of(t: &RouteTable, port: u16, sni: &str) -> Option<Vec<String>> {
    let r = t
        .routes
        .iter()
        .find(|r| r.port == port && r.matches.sni() == Some(sni))
        .unwrap_or_else(|| panic!("no route for {sni}:{port}"));
    r.matches
        .allowed_sources()
        .map(|s| s.iter().map(Cidr::to_string).collect())
}

#[test]
fn strict_limits_a_clusters_names_to_its_workers_on_the_vlan() {
    let i = infra("oooi", "vlan");
    let atts = [strict("c1"), attachment("oooi", "c2", "vlan", "c2")];
    let obs = observed(&[
        ("c1", &["192.0.2.101", "192.0.2.102"]),
        ("c2", &["192.0.2.121"]),
    ]);
    let p = plan_infra(&i, &atts, &obs);
    let t = table(&p);

    // Every name but ignition carries the workers, then the off-VLAN networks.
    for (port, name) in [
        (6443, "api"),
        (6443, "api-int"),
        (443, "oauth"),
        (443, "konnectivity"),
    ] {
        let s = sources_of(&t, port, &format!("{name}.c1.example.com")).expect(name);
        assert_eq!(&s[..2], ["192.0.2.101/32", "192.0.2.102/32"], "{name}");
        assert_eq!(s.len(), 2 + 24, "{name}: workers + the complement of a /24");
        assert!(
            s[2..].iter().all(|c| !c.starts_with("192.0.2.")),
            "{name}: no other VLAN address: {s:?}"
        );
    }
    assert_eq!(sources_of(&t, 443, "ignition.c1.example.com"), None);
    // The Standard cluster's routes are open, as before.
    for (port, name) in [(6443, "api"), (443, "oauth"), (443, "ignition")] {
        assert_eq!(
            sources_of(&t, port, &format!("{name}.c2.example.com")),
            None
        );
    }

    let router = Router::new(t);
    let c1_api = Ok("kube-apiserver.clusters-c1".to_string());
    // c1's workers reach their names.
    for w in ["192.0.2.101", "192.0.2.102"] {
        assert_eq!(decide(&router, 6443, Some("api.c1.example.com"), w), c1_api);
        assert_eq!(
            decide(&router, 443, Some("oauth.c1.example.com"), w),
            Ok("oauth-openshift.clusters-c1".into())
        );
    }
    // A worker of c2, and a VLAN host of no cluster, are refused on c1's names.
    for other in ["192.0.2.121", "192.0.2.150", "192.0.2.1"] {
        for (port, name) in [
            (6443, "api.c1.example.com"),
            (6443, "api-int.c1.example.com"),
            (443, "oauth.c1.example.com"),
            (443, "konnectivity.c1.example.com"),
        ] {
            assert_eq!(
                decide(&router, port, Some(name), other),
                Err(Refusal::SourceNotAllowed),
                "{name} from {other}"
            );
        }
    }
    // Ignition stays open: a new worker fetches it before its address is known.
    assert_eq!(
        decide(&router, 443, Some("ignition.c1.example.com"), "192.0.2.150"),
        Ok("ignition-server-proxy.clusters-c1".into())
    );
    // Clients off the VLAN (management pods, a published OAuth LoadBalancer).
    for off in ["10.128.4.7", "203.0.113.9", "192.0.3.1", "192.0.1.255"] {
        assert_eq!(
            decide(&router, 6443, Some("api.c1.example.com"), off),
            c1_api,
            "{off}"
        );
    }
    // c1's worker still reaches c2's open names (c2 is Standard).
    assert_eq!(
        decide(&router, 6443, Some("api.c2.example.com"), "192.0.2.101"),
        Ok("kube-apiserver.clusters-c2".into())
    );

    let c = p.attachment_conditions("c1").unwrap();
    assert_eq!(
        (c[0].status.as_str(), c[1].status.as_str()),
        ("True", "False")
    );
    assert!(
        c[0].message.contains("isolation Strict"),
        "{}",
        c[0].message
    );
}

#[test]
fn strict_before_any_worker_is_known_refuses_the_vlan_but_not_ignition() {
    let i = infra("oooi", "vlan");
    let p = plan_infra(&i, &[strict("c1")], &Observed::default());
    let t = table(&p);
    let s = sources_of(&t, 6443, "api.c1.example.com").unwrap();
    assert_eq!(s.len(), 24, "only the networks off the VLAN: {s:?}");
    assert!(s.iter().all(|c| !c.starts_with("192.0.2.")));
    let router = Router::new(t);
    for host in ["192.0.2.101", "192.0.2.150"] {
        assert_eq!(
            decide(&router, 6443, Some("api.c1.example.com"), host),
            Err(Refusal::SourceNotAllowed)
        );
        assert_eq!(
            decide(&router, 443, Some("ignition.c1.example.com"), host),
            Ok("ignition-server-proxy.clusters-c1".into())
        );
    }
    assert_eq!(
        decide(&router, 6443, Some("api.c1.example.com"), "10.0.0.5"),
        Ok("kube-apiserver.clusters-c1".into())
    );
    let c = p.attachment_conditions("c1").unwrap();
    assert_eq!(
        (
            c[1].type_.as_str(),
            c[1].status.as_str(),
            c[1].reason.as_str()
        ),
        (condition::DEGRADED, "True", "StrictIsolationPending")
    );
    assert!(
        c[1].message.contains("ignition stays open"),
        "{}",
        c[1].message
    );

    // The first worker observed: pending is over and it may use the names.
    let p = plan_infra(&i, &[strict("c1")], &observed(&[("c1", &["192.0.2.101"])]));
    let c = p.attachment_conditions("c1").unwrap();
    assert_eq!(
        (c[1].status.as_str(), c[1].reason.as_str()),
        ("False", "AsExpected")
    );
    let router = Router::new(table(&p));
    assert_eq!(
        decide(&router, 6443, Some("api.c1.example.com"), "192.0.2.101"),
        Ok("kube-apiserver.clusters-c1".into())
    );
}

#[test]
fn an_explicit_ignition_service_on_another_port_stays_open_too() {
    let i = infra("oooi", "vlan");
    let att = attachment_yaml(
        "oooi",
        "c1",
        "vlan",
        "c1",
        "c1",
        "  isolation: Strict\n  services:\n    - {name: api, port: 6443, targetService: kube-apiserver, targetPort: 6443}\n    - {name: mcs, port: 22623, targetService: ignition-server-proxy, targetPort: 443}\n",
    );
    let p = plan_infra(&i, &[att], &observed(&[("c1", &["192.0.2.101"])]));
    let t = table(&p);
    assert_eq!(sources_of(&t, 22623, "mcs.c1.example.com"), None);
    assert!(sources_of(&t, 6443, "api.c1.example.com").is_some());
}

#[test]
fn standard_isolation_leaves_every_name_open() {
    let i = infra("oooi", "vlan");
    let atts = [
        attachment("oooi", "c1", "vlan", "c1"),
        apps("c2", "192.0.2.210-192.0.2.219", "Standard"),
    ];
    let obs = with_vip(
        observed(&[("c1", &["192.0.2.101"]), ("c2", &["192.0.2.121"])]),
        "c2",
        "192.0.2.210",
    );
    let p = plan_infra(&i, &atts, &obs);
    let t = table(&p);
    assert!(
        t.routes
            .iter()
            .all(|r| !matches!(r.matches, RouteMatch::SniFrom { .. })),
        "{t:?}"
    );
    let router = Router::new(t);
    assert_eq!(
        decide(&router, 6443, Some("api.c2.example.com"), "192.0.2.101"),
        Ok("kube-apiserver.clusters-c2".into())
    );
    for a in &p.attachments {
        let c = a.conditions(true);
        assert_eq!(c[1].status, "False", "{}: {c:?}", a.name);
    }
}

#[test]
fn strict_apps_wildcard_follows_the_vip_and_is_limited_to_workers() {
    let i = infra("oooi", "vlan");
    let atts = [
        apps("c1", "192.0.2.200-192.0.2.209", "Strict"),
        attachment("oooi", "c2", "vlan", "c2"),
    ];
    let workers = observed(&[("c1", &["192.0.2.101"]), ("c2", &["192.0.2.121"])]);
    let p = plan_infra(&i, &atts, &with_vip(workers.clone(), "c1", "192.0.2.200"));
    let t = table(&p);
    let s = sources_of(&t, 443, "*.apps.c1.example.com").unwrap();
    assert_eq!(s[0], "192.0.2.101/32");
    let router = Router::new(t);
    let console = "console-openshift-console.apps.c1.example.com";
    assert_eq!(
        decide(&router, 443, Some(console), "192.0.2.101"),
        Ok("192.0.2.200:443".into())
    );
    assert_eq!(
        decide(&router, 443, Some(console), "192.0.2.121"),
        Err(Refusal::SourceNotAllowed)
    );
    // The DNS pod view sends management pods here through the internal Service.
    assert_eq!(
        decide(&router, 443, Some(console), "10.128.3.3"),
        Ok("192.0.2.200:443".into())
    );

    // The VIP moves: the route and the DNS answer follow.
    let p = plan_infra(&i, &atts, &with_vip(workers.clone(), "c1", "192.0.2.205"));
    let router = Router::new(table(&p));
    assert_eq!(
        decide(&router, 443, Some(console), "192.0.2.101"),
        Ok("192.0.2.205:443".into())
    );
    let dns = dns_config(&p);
    assert_eq!(dns.clusters[0].apps_vip, "192.0.2.205".parse().ok());

    // No VIP (MetalLB withdrew it): no apps route and no apps answer.
    let p = plan_infra(&i, &atts, &workers);
    let t = table(&p);
    assert!(
        t.routes
            .iter()
            .all(|r| r.matches.sni() != Some("*.apps.c1.example.com"))
    );
    let dns = dns_config(&p);
    assert_eq!(dns.clusters[0].apps_vip, None);
}

#[test]
fn a_shared_worker_address_under_strict_loses_its_aliases_and_the_names() {
    let i = infra("oooi", "vlan");
    let atts = [strict("c1"), strict("c2")];
    let obs = observed(&[
        ("c1", &["192.0.2.101", "192.0.2.150"]),
        ("c2", &["192.0.2.150", "192.0.2.121"]),
    ]);
    let p = plan_infra(&i, &atts, &obs);
    assert!(p.attachments.iter().all(|a| a.accepted()));
    let t = table(&p);
    let aliases = source_routes(&t);
    assert_eq!(aliases, ["192.0.2.101/32", "192.0.2.121/32"]);
    let router = Router::new(t);
    // The shared address can use neither cluster's names nor aliases.
    for name in ["api.c1.example.com", "api.c2.example.com"] {
        assert_eq!(
            decide(&router, 6443, Some(name), "192.0.2.150"),
            Err(Refusal::SourceNotAllowed)
        );
    }
    assert_eq!(
        decide(&router, 6443, Some("kubernetes.default.svc"), "192.0.2.150"),
        Err(Refusal::AliasFromUnknownSource)
    );
    // The other workers keep everything of their own cluster only.
    assert_eq!(
        decide(&router, 6443, Some("api.c1.example.com"), "192.0.2.101"),
        Ok("kube-apiserver.clusters-c1".into())
    );
    assert_eq!(
        decide(&router, 6443, Some("api.c1.example.com"), "192.0.2.121"),
        Err(Refusal::SourceNotAllowed)
    );
    let c = p.attachment_conditions("c2").unwrap();
    assert_eq!(c[1].reason, "WorkerAddressConflict");
    assert!(
        c[1].message.contains("192.0.2.150") && c[1].message.contains("Strict"),
        "{}",
        c[1].message
    );
}

#[test]
fn a_worker_never_reaches_another_cluster_by_alias_no_sni_or_name_under_strict() {
    let i = infra("oooi", "vlan");
    let atts = [strict("a"), strict("b")];
    let p = plan_infra(
        &i,
        &atts,
        &observed(&[("a", &["192.0.2.51"]), ("b", &["192.0.2.61"])]),
    );
    let router = Router::new(table(&p));
    for (me, mine, other) in [("192.0.2.51", "a", "b"), ("192.0.2.61", "b", "a")] {
        let own = Ok(format!("kube-apiserver.clusters-{mine}"));
        for alias in oooi_routes::KUBERNETES_ALIASES {
            assert_eq!(decide(&router, 6443, Some(alias), me), own, "{alias}");
        }
        assert_eq!(decide(&router, 6443, None, me), own);
        assert_eq!(
            decide(&router, 6443, Some(&format!("api.{mine}.example.com")), me),
            own
        );
        for (port, svc) in [
            (6443, "api"),
            (6443, "api-int"),
            (443, "oauth"),
            (443, "konnectivity"),
        ] {
            assert_eq!(
                decide(
                    &router,
                    port,
                    Some(&format!("{svc}.{other}.example.com")),
                    me
                ),
                Err(Refusal::SourceNotAllowed),
                "{svc}.{other} from {me}"
            );
        }
    }
}

#[test]
fn removing_an_attachment_removes_its_routes_and_records() {
    let i = infra("oooi", "vlan");
    let obs = with_vip(
        observed(&[("c1", &["192.0.2.101"]), ("c2", &["192.0.2.121"])]),
        "c2",
        "192.0.2.210",
    );
    let both = [
        strict("c1"),
        apps("c2", "192.0.2.210-192.0.2.219", "Strict"),
    ];
    let p = plan_infra(&i, &both, &obs);
    assert!(
        table(&p)
            .routes
            .iter()
            .any(|r| r.owner.as_deref() == Some("clusters/c2"))
    );
    let p = plan_infra(&i, &both[..1], &obs);
    let t = table(&p);
    assert!(
        t.routes
            .iter()
            .all(|r| r.owner.as_deref() == Some("clusters/c1")),
        "{t:?}"
    );
    let dns = dns_config(&p);
    let names: Vec<&str> = dns.clusters.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["c1"]);
    let router = Router::new(t);
    assert_eq!(
        decide(&router, 6443, Some("api.c2.example.com"), "192.0.2.121"),
        Err(Refusal::UnknownSni)
    );
    assert_eq!(
        decide(&router, 6443, None, "192.0.2.121"),
        Err(Refusal::UnknownSource)
    );
}

#[test]
fn the_networks_outside_a_vlan_cover_exactly_its_complement() {
    for cidr in [
        "192.0.2.0/24",
        "10.0.0.0/8",
        "198.51.100.128/25",
        "0.0.0.0/1",
    ] {
        let net: ipnet::Ipv4Net = cidr.parse().unwrap();
        let out = plan::proxy::outside(net.into());
        assert_eq!(out.len(), usize::from(net.prefix_len()), "{cidr}");
        // Sample addresses across the space and around the VLAN's edges.
        let edges = [
            u32::from(net.network()),
            u32::from(net.broadcast()),
            u32::from(net.network()).wrapping_sub(1),
            u32::from(net.broadcast()).wrapping_add(1),
        ];
        let samples = (0..4096u32)
            .map(|k| k.wrapping_mul(1_048_573).wrapping_add(k << 7))
            .chain(edges);
        for a in samples {
            let addr = std::net::Ipv4Addr::from(a);
            let hits = out.iter().filter(|c| c.contains(IpAddr::V4(addr))).count();
            let expect = usize::from(!net.contains(&addr));
            assert_eq!(hits, expect, "{addr} against {cidr}: {out:?}");
        }
    }
    assert!(plan::proxy::outside("0.0.0.0/0".parse().unwrap()).is_empty());
    // The same rule for an IPv6 network, within its family only.
    let v6 = plan::proxy::outside("2001:db8::/32".parse().unwrap());
    assert_eq!(v6.len(), 32);
    let hits = |a: &str| {
        let a: IpAddr = a.parse().unwrap();
        v6.iter().filter(|c| c.contains(a)).count()
    };
    assert_eq!(hits("2001:db8::1"), 0);
    assert_eq!(hits("2001:db8:ffff::1"), 0);
    assert_eq!(hits("2001:db9::1"), 1);
    assert_eq!(hits("::1"), 1);
    assert_eq!(hits("192.0.2.1"), 0, "never across families");
}

#[test]
fn render_of_the_lab_manifests_shows_isolation_and_restricted_routes() {
    use oooi_controller::render::{self, RenderInput};
    let f = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../lab/two-clusters.yaml");
    let mut input = RenderInput::default();
    input.add_file(&f).unwrap();
    let out = render::render(&input, render::OFFLINE_PUSH_TOKEN).unwrap();
    let summary = out
        .objects
        .iter()
        .find(|o| o["kind"] == "PlanSummary")
        .expect("a PlanSummary");
    let verdicts = summary["verdicts"].as_array().unwrap();
    let isolation: Vec<(&str, &str)> = verdicts
        .iter()
        .map(|v| {
            (
                v["name"].as_str().unwrap(),
                v["isolation"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(isolation, [("a", "Standard"), ("b", "Strict")]);
    let (_, routes) = out
        .files
        .iter()
        .find(|(p, _)| p.to_string_lossy().ends_with("-routes.json"))
        .expect("routes file");
    let t = RouteTable::from_json(routes.as_bytes()).unwrap();
    let restricted: Vec<&str> = t
        .routes
        .iter()
        .filter(|r| r.matches.allowed_sources().is_some())
        .filter_map(|r| r.matches.sni())
        .collect();
    assert_eq!(
        restricted,
        [
            "api.b.example.com",
            "api-int.b.example.com",
            "oauth.b.example.com",
            "konnectivity.b.example.com",
            // 443 by SNI, then 80 by HTTP Host.
            "*.apps.b.example.com",
            "*.apps.b.example.com"
        ]
    );
    assert_eq!(
        sources_of(&t, 6443, "api.b.example.com").unwrap()[0],
        "192.0.2.61/32"
    );
}
