//! SNI routes restricted to allowed sources (`sources`): wire format,
//! validation, digest, compact encoding and the decision.
#![allow(clippy::unwrap_used)]

use std::net::IpAddr;

use oooi_routes::{Cidr, Decision, MatchKind, Refusal, RouteMatch, RouteTable, Router, compact};

fn table(json: &str) -> RouteTable {
    RouteTable::from_json(json.as_bytes()).expect("valid table")
}

fn reject(json: &str) -> String {
    RouteTable::from_json(json.as_bytes())
        .expect_err("must be rejected")
        .to_string()
}

fn ip(s: &str) -> Option<IpAddr> {
    Some(s.parse().unwrap())
}

/// Cluster c1's names are restricted to its workers (two addresses and a
/// network), c2's are open.
fn restricted() -> Router {
    Router::new(table(
        r#"{"generation": 4, "routes": [
        {"port": 6443, "sni": "api.c1.example.com", "sources": ["192.0.2.10", "192.0.2.11/32", "198.51.100.0/24", "2001:db8::7"], "upstream": {"cluster": "c1_api"}},
        {"port": 443, "sni": "*.apps.c1.example.com", "sources": ["192.0.2.10/32", "192.0.2.11/32"], "upstream": {"cluster": "c1_apps"}},
        {"port": 443, "sni": "*.example.com", "upstream": {"cluster": "catch_all"}},
        {"port": 443, "sni": "oauth.c1.example.com", "sources": ["192.0.2.11/32", "192.0.2.10/32"], "upstream": {"cluster": "c1_oauth"}},
        {"port": 6443, "sni": "api.c2.example.com", "upstream": {"cluster": "c2_api"}},
        {"port": 6443, "source": "192.0.2.10/32", "upstream": {"cluster": "c1_api"}}
    ]}"#,
    ))
}

fn outcome(d: Decision<'_>) -> String {
    match d {
        Decision::Forward { route, kind, .. } => format!("{}:{}", route.upstream, kind.as_str()),
        Decision::Refuse(r) => format!("refused:{r}"),
    }
}

#[test]
fn an_allowed_source_is_forwarded_by_name() {
    let r = restricted();
    for src in ["192.0.2.10", "192.0.2.11", "198.51.100.77", "2001:db8::7"] {
        assert_eq!(
            outcome(r.decide(6443, Some("api.c1.example.com"), ip(src))),
            "cluster c1_api:exact_sni",
            "{src}"
        );
    }
    assert_eq!(
        outcome(r.decide(443, Some("console.apps.c1.example.com"), ip("192.0.2.11"))),
        "cluster c1_apps:wildcard_sni"
    );
    // An IPv4 client seen through a dual-stack socket.
    assert_eq!(
        outcome(r.decide(443, Some("oauth.c1.example.com"), ip("::ffff:192.0.2.10"))),
        "cluster c1_oauth:exact_sni"
    );
}

#[test]
fn a_source_outside_the_list_is_refused_never_sent_elsewhere() {
    let r = restricted();
    assert_eq!(
        r.decide(6443, Some("api.c1.example.com"), ip("192.0.2.12")),
        Decision::Refuse(Refusal::SourceNotAllowed)
    );
    assert_eq!(
        r.decide(6443, Some("api.c1.example.com"), ip("2001:db8::8")),
        Decision::Refuse(Refusal::SourceNotAllowed)
    );
    // `*.example.com` also matches, but the most specific name decides: a
    // refused source does not fall through to the wider wildcard.
    assert_eq!(
        r.decide(443, Some("x.apps.c1.example.com"), ip("192.0.2.99")),
        Decision::Refuse(Refusal::SourceNotAllowed)
    );
    assert_eq!(
        outcome(r.decide(443, Some("x.other.example.com"), ip("192.0.2.99"))),
        "cluster catch_all:wildcard_sni"
    );
    // Unknown source address on a restricted route.
    assert_eq!(
        r.decide(443, Some("oauth.c1.example.com"), None),
        Decision::Refuse(Refusal::NoSourceAddress)
    );
    assert_eq!(Refusal::SourceNotAllowed.as_str(), "source_not_allowed");
    assert!(Refusal::ALL.contains(&Refusal::SourceNotAllowed));
}

#[test]
fn unrestricted_routes_never_ask_for_the_source() {
    let r = restricted();
    let d = r.decide_with(6443, Some("api.c2.example.com"), || {
        panic!("the source is not needed for an unrestricted name")
    });
    assert_eq!(outcome(d), "cluster c2_api:exact_sni");
    // A restricted one asks exactly once.
    let mut calls = 0;
    let d = r.decide_with(6443, Some("api.c1.example.com"), || {
        calls += 1;
        ip("192.0.2.10")
    });
    assert_eq!(outcome(d), "cluster c1_api:exact_sni");
    assert_eq!(calls, 1);
}

#[test]
fn aliases_and_no_sni_keep_routing_by_source() {
    let r = restricted();
    match r.decide(6443, Some("kubernetes.default.svc"), ip("192.0.2.10")) {
        Decision::Forward { kind, .. } => assert_eq!(kind, MatchKind::SourceAlias),
        d => panic!("{d:?}"),
    }
    assert_eq!(
        r.decide(6443, None, ip("192.0.2.11")),
        Decision::Refuse(Refusal::UnknownSource)
    );
}

#[test]
fn wire_format_without_sources_is_unchanged() {
    let json = r#"{"generation":1,"routes":[{"port":443,"sni":"a.example.com","upstream":{"cluster":"x"}}]}"#;
    let t = table(json);
    assert_eq!(t.routes[0].matches, RouteMatch::Sni("a.example.com".into()));
    assert_eq!(String::from_utf8(t.to_json()).unwrap(), json);
    let t = table(
        r#"{"generation":1,"routes":[{"port":443,"sni":"a.example.com","sources":["192.0.2.1"],"upstream":{"cluster":"x"}}]}"#,
    );
    assert_eq!(t.routes[0].matches.sni(), Some("a.example.com"));
    assert_eq!(
        t.routes[0].matches.allowed_sources(),
        Some(&["192.0.2.1/32".parse::<Cidr>().unwrap()][..])
    );
    let back = RouteTable::from_json(&t.to_json()).unwrap();
    assert_eq!(back, t);
    assert!(
        String::from_utf8(t.to_json())
            .unwrap()
            .contains(r#""sources":["192.0.2.1/32"]"#)
    );
}

#[test]
fn validation_names_the_entry_and_the_bad_source() {
    let e = reject(
        r#"{"generation":1,"routes":[
        {"port":443,"sni":"a.example.com","upstream":{"cluster":"x"}},
        {"port":443,"sni":"b.example.com","sources":[],"upstream":{"cluster":"x"}}]}"#,
    );
    assert!(e.starts_with("routes[1].sources: is empty"), "{e}");
    let e = reject(
        r#"{"generation":1,"routes":[
        {"port":443,"sni":"a.example.com","upstream":{"cluster":"x"}},
        {"port":443,"sni":"b.example.com","sources":["192.0.2.1","192.0.3.0/23"],"upstream":{"cluster":"x"}}]}"#,
    );
    assert!(
        e.starts_with("routes[1].sources: [1]") && e.contains("host bits"),
        "{e}"
    );
    let e = reject(
        r#"{"generation":1,"routes":[{"port":443,"sni":"b.example.com","sources":["banana"],"upstream":{"cluster":"x"}}]}"#,
    );
    assert!(
        e.starts_with("routes[0].sources: [0]") && e.contains("not an IP address"),
        "{e}"
    );
    let e = reject(
        r#"{"generation":1,"routes":[{"port":443,"sni":"b.example.com","sources":"192.0.2.1","upstream":{"cluster":"x"}}]}"#,
    );
    assert!(
        e.starts_with("routes[0].sources:") && e.contains("not a list"),
        "{e}"
    );
    let e = reject(
        r#"{"generation":1,"routes":[{"port":443,"sni":"b.example.com","sources":["192.0.2.1","192.0.2.1/32"],"upstream":{"cluster":"x"}}]}"#,
    );
    assert!(
        e.contains("routes[0].sources: [1] 192.0.2.1/32 is listed twice"),
        "{e}"
    );
    let e = reject(
        r#"{"generation":1,"routes":[{"port":6443,"source":"192.0.2.1","sources":["192.0.2.1"],"upstream":{"cluster":"x"}}]}"#,
    );
    assert!(
        e.starts_with("routes[0].route:") && e.contains("`sni` routes only"),
        "{e}"
    );
    // A restricted and an open route for one name on one port collide.
    let e = reject(
        r#"{"generation":1,"routes":[
        {"port":443,"sni":"a.example.com","upstream":{"cluster":"x"}},
        {"port":443,"sni":"a.example.com","sources":["192.0.2.1"],"upstream":{"cluster":"x"}}]}"#,
    );
    assert!(
        e.contains("routes[1].sni") && e.contains("conflicts with routes[0]"),
        "{e}"
    );
    let many: Vec<String> = (0..=oooi_routes::MAX_ROUTE_SOURCES)
        .map(|i| format!("\"10.{}.{}.1\"", i / 256, i % 256))
        .collect();
    let e = reject(&format!(
        r#"{{"generation":1,"routes":[{{"port":443,"sni":"a.example.com","sources":[{}],"upstream":{{"cluster":"x"}}}}]}}"#,
        many.join(",")
    ));
    assert!(
        e.contains("routes[0].sources") && e.contains("over the limit"),
        "{e}"
    );
    // Errors outside the routes still name the document.
    let e = reject(r#"{"generation":1,"routes":[],"extra":1}"#);
    assert!(e.starts_with("document: malformed JSON"), "{e}");
}

#[test]
fn digest_covers_sources_but_not_their_order() {
    let doc = |sources: &str| {
        table(&format!(
            r#"{{"generation":1,"routes":[{{"port":443,"sni":"a.example.com","sources":[{sources}],"upstream":{{"cluster":"x"}}}}]}}"#
        ))
        .digest()
    };
    let open = table(
        r#"{"generation":1,"routes":[{"port":443,"sni":"a.example.com","upstream":{"cluster":"x"}}]}"#,
    )
    .digest();
    let ab = doc(r#""192.0.2.1","192.0.2.2""#);
    assert_eq!(ab, doc(r#""192.0.2.2/32","192.0.2.1""#));
    assert_ne!(ab, doc(r#""192.0.2.1""#));
    assert_ne!(ab, doc(r#""192.0.2.1","192.0.2.3""#));
    assert_ne!(ab, open);
    // A table without `sources` keeps the digest it always had (the
    // canonical line `443\tsni\ta.example.com\tcluster\tx\t`, hashed by hand).
    assert_eq!(
        open,
        "sha256:c63bd0282baf2eb4fdbccd1e2effb471e027815315785e99cb8d8ac80dae28bb"
    );
}

#[test]
fn compact_encoding_round_trips_restricted_routes() {
    let t = restricted().table().clone();
    let bytes = compact::encode(&t, &t.digest());
    let (back, digest) = compact::decode(&bytes).unwrap();
    assert_eq!(back, t);
    assert_eq!(digest, t.digest());
    for cut in 0..bytes.len() {
        assert!(
            compact::decode(&bytes[..cut]).is_err(),
            "truncated at {cut}"
        );
    }
    // The decoded table routes the same way.
    let r = Router::with_digest(digest, back);
    assert_eq!(
        r.decide(6443, Some("api.c1.example.com"), ip("192.0.2.12")),
        Decision::Refuse(Refusal::SourceNotAllowed)
    );
}

#[test]
fn many_names_restricted_to_many_workers_compile_and_decide() {
    // 500 names restricted to the same 300 workers compile and decide.
    let workers: Vec<String> = (0..300)
        .map(|i| format!("\"10.1.{}.{}\"", i / 250, i % 250 + 1))
        .collect();
    let routes: Vec<String> = (0..500)
        .map(|i| {
            format!(
                r#"{{"port":443,"sni":"n{i}.c1.example.com","sources":[{}],"upstream":{{"cluster":"c1"}}}}"#,
                workers.join(",")
            )
        })
        .collect();
    let r = Router::new(table(&format!(
        r#"{{"generation":2,"routes":[{}]}}"#,
        routes.join(",")
    )));
    assert_eq!(
        outcome(r.decide(443, Some("n499.c1.example.com"), ip("10.1.1.50"))),
        "cluster c1:exact_sni"
    );
    assert_eq!(
        r.decide(443, Some("n7.c1.example.com"), ip("10.1.1.51")),
        Decision::Refuse(Refusal::SourceNotAllowed)
    );
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the sources, a restricted name forwards exactly the
        /// connections whose source one of its CIDRs contains, and refuses
        /// the rest with `source_not_allowed`.
        #[test]
        fn restricted_name_forwards_exactly_the_listed_sources(
            nets in proptest::collection::vec((any::<u32>(), 8u8..=32), 1..12),
            probes in proptest::collection::vec(any::<u32>(), 1..32),
            wildcard in any::<bool>(),
        ) {
            let mut cidrs: Vec<Cidr> = Vec::new();
            for (a, p) in nets {
                let bits = if p == 32 { a } else { a & !(u32::MAX >> p) };
                let c = Cidr::new(IpAddr::from(bits.to_be_bytes()), p).unwrap();
                if !cidrs.contains(&c) {
                    cidrs.push(c);
                }
            }
            let name = if wildcard { "*.apps.c1.example.com" } else { "api.c1.example.com" };
            let list: Vec<String> = cidrs.iter().map(|c| format!("\"{c}\"")).collect();
            let r = Router::new(table(&format!(
                r#"{{"generation":1,"routes":[{{"port":443,"sni":"{name}","sources":[{}],"upstream":{{"cluster":"c1"}}}}]}}"#,
                list.join(",")
            )));
            let sni = if wildcard { "x.apps.c1.example.com" } else { "api.c1.example.com" };
            // Probe random addresses and each listed network's own address.
            let addrs = probes.into_iter().map(|a| IpAddr::from(a.to_be_bytes()))
                .chain(cidrs.iter().map(|c| c.addr()));
            for a in addrs {
                let allowed = cidrs.iter().any(|c| c.contains(a));
                let d = r.decide(443, Some(sni), Some(a));
                prop_assert_eq!(
                    matches!(d, Decision::Forward { .. }),
                    allowed,
                    "{} from {}", sni, a
                );
                if !allowed {
                    prop_assert_eq!(d, Decision::Refuse(Refusal::SourceNotAllowed));
                }
            }
        }

        #[test]
        fn compact_round_trips_any_source_list(
            v4 in proptest::collection::vec((any::<u32>(), 0u8..=32), 1..8),
            v6 in proptest::collection::vec((any::<u128>(), 0u8..=128), 0..4),
        ) {
            let mut sources: Vec<Cidr> = Vec::new();
            for (a, p) in v4 {
                let bits = if p == 0 { 0 } else { a & !(u32::MAX.checked_shr(u32::from(p)).unwrap_or(0)) };
                sources.push(Cidr::new(IpAddr::from(bits.to_be_bytes()), p).unwrap());
            }
            for (a, p) in v6 {
                let bits = if p == 0 { 0 } else { a & !(u128::MAX.checked_shr(u32::from(p)).unwrap_or(0)) };
                sources.push(Cidr::new(IpAddr::from(bits.to_be_bytes()), p).unwrap());
            }
            let t = RouteTable {
                generation: 7,
                routes: vec![oooi_routes::Route {
                    port: 443,
                    matches: RouteMatch::SniFrom { sni: "a.example.com".into(), sources },
                    upstream: oooi_routes::Upstream::Cluster("x".into()),
                    owner: None,
                }],
            };
            let (back, _) = compact::decode(&compact::encode(&t, "d")).unwrap();
            prop_assert_eq!(back, t);
        }
    }
}
