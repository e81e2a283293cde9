//! The routing table: validation, digest, compact encoding and decisions.
#![allow(clippy::unwrap_used)]

use std::net::IpAddr;

use oooi_routes::{Decision, MatchKind, Refusal, RouteTable, Router, Upstream, compact};

fn table(json: &str) -> RouteTable {
    RouteTable::from_json(json.as_bytes()).expect("valid table")
}

fn two_clusters() -> Router {
    Router::new(table(
        r#"{"generation": 3, "routes": [
        {"port": 6443, "sni": "api.c1.example.com", "upstream": {"address": {"host": "10.0.0.1", "port": 6443}}, "owner": "clusters/c1"},
        {"port": 443, "sni": "oauth.c1.example.com", "upstream": {"cluster": "c1_oauth"}},
        {"port": 443, "sni": "*.apps.c1.example.com", "upstream": {"cluster": "c1_apps"}},
        {"port": 443, "sni": "*.b.apps.c1.example.com", "upstream": {"cluster": "c1_b"}},
        {"port": 443, "sni": "console.apps.c1.example.com", "upstream": {"cluster": "c1_console"}},
        {"port": 6443, "source": "192.0.2.10/32", "upstream": {"cluster": "c1_api"}},
        {"port": 6443, "source": "192.0.2.0/24", "upstream": {"cluster": "c2_api"}},
        {"port": 6443, "source": "2001:db8::/64", "upstream": {"cluster": "c2_api"}}
    ]}"#,
    ))
}

fn ip(s: &str) -> Option<IpAddr> {
    Some(s.parse().unwrap())
}

fn cluster(d: Decision<'_>) -> String {
    match d {
        Decision::Forward { route, .. } => match &route.upstream {
            Upstream::Cluster(c) => c.clone(),
            other => other.to_string(),
        },
        Decision::Refuse(r) => format!("refused:{r}"),
    }
}

#[test]
fn exact_sni_routes_to_its_upstream() {
    let r = two_clusters();
    assert_eq!(
        cluster(r.decide(6443, Some("api.c1.example.com"), ip("192.0.2.99"))),
        "10.0.0.1:6443"
    );
    assert_eq!(
        cluster(r.decide(443, Some("oauth.c1.example.com"), None)),
        "c1_oauth"
    );
}

#[test]
fn sni_matching_ignores_case_and_trailing_dot() {
    let r = two_clusters();
    assert_eq!(
        cluster(r.decide(443, Some("OAuth.C1.Example.com."), None)),
        "c1_oauth"
    );
}

#[test]
fn the_same_sni_on_another_port_is_refused() {
    let r = two_clusters();
    assert_eq!(
        cluster(r.decide(443, Some("api.c1.example.com"), None)),
        "refused:unknown_sni"
    );
    assert_eq!(
        r.decide(8443, Some("api.c1.example.com"), None),
        Decision::Refuse(Refusal::UnknownPort)
    );
}

#[test]
fn most_specific_wildcard_wins_and_exact_beats_wildcard() {
    let r = two_clusters();
    assert_eq!(
        cluster(r.decide(443, Some("x.apps.c1.example.com"), None)),
        "c1_apps"
    );
    assert_eq!(
        cluster(r.decide(443, Some("deep.x.apps.c1.example.com"), None)),
        "c1_apps"
    );
    assert_eq!(
        cluster(r.decide(443, Some("x.b.apps.c1.example.com"), None)),
        "c1_b"
    );
    assert_eq!(
        cluster(r.decide(443, Some("console.apps.c1.example.com"), None)),
        "c1_console"
    );
    // The wildcard does not match its own base name.
    assert_eq!(
        cluster(r.decide(443, Some("apps.c1.example.com"), None)),
        "refused:unknown_sni"
    );
    match r.decide(443, Some("x.apps.c1.example.com"), None) {
        Decision::Forward { kind, .. } => assert_eq!(kind, MatchKind::WildcardSni),
        d => panic!("{d:?}"),
    }
}

#[test]
fn unknown_sni_is_refused() {
    let r = two_clusters();
    assert_eq!(
        r.decide(443, Some("evil.example.org"), ip("192.0.2.10")),
        Decision::Refuse(Refusal::UnknownSni)
    );
}

#[test]
fn alias_and_no_sni_route_by_longest_source_prefix() {
    let r = two_clusters();
    for alias in [
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "Kubernetes.Default.Svc.Cluster.Local.",
    ] {
        assert_eq!(
            cluster(r.decide(6443, Some(alias), ip("192.0.2.10"))),
            "c1_api",
            "{alias}"
        );
        assert_eq!(
            cluster(r.decide(6443, Some(alias), ip("192.0.2.11"))),
            "c2_api",
            "{alias}"
        );
    }
    assert_eq!(cluster(r.decide(6443, None, ip("192.0.2.10"))), "c1_api");
    assert_eq!(
        cluster(r.decide(6443, Some(""), ip("192.0.2.200"))),
        "c2_api"
    );
    assert_eq!(cluster(r.decide(6443, None, ip("2001:db8::5"))), "c2_api");
    // An IPv4 client seen through a dual-stack socket.
    assert_eq!(
        cluster(r.decide(6443, None, ip("::ffff:192.0.2.10"))),
        "c1_api"
    );
}

#[test]
fn unknown_source_and_foreign_alias_are_refused() {
    let r = two_clusters();
    assert_eq!(
        r.decide(6443, None, ip("198.51.100.7")),
        Decision::Refuse(Refusal::UnknownSource)
    );
    assert_eq!(
        r.decide(6443, Some("kubernetes.default"), ip("198.51.100.7")),
        Decision::Refuse(Refusal::AliasFromUnknownSource)
    );
    assert_eq!(
        r.decide(6443, None, None),
        Decision::Refuse(Refusal::NoSourceAddress)
    );
    // Source routes exist only on 6443: an alias on 443 is refused.
    assert_eq!(
        r.decide(443, Some("kubernetes"), ip("192.0.2.10")),
        Decision::Refuse(Refusal::AliasFromUnknownSource)
    );
}

fn reject(json: &str) -> String {
    RouteTable::from_json(json.as_bytes())
        .expect_err("must be rejected")
        .to_string()
}

#[test]
fn validation_names_the_bad_entry() {
    let e = reject(
        r#"{"generation":1,"routes":[
        {"port":443,"sni":"a.example.com","upstream":{"cluster":"x"}},
        {"port":443,"sni":"a.example.com","upstream":{"cluster":"y"}}]}"#,
    );
    assert!(
        e.contains("routes[1].sni") && e.contains("conflicts with routes[0]"),
        "{e}"
    );
    let e = reject(
        r#"{"generation":1,"routes":[
        {"port":443,"sni":"a.example.com","upstream":{"cluster":"x"}},
        {"port":443,"sni":"a.example.com","upstream":{"cluster":"x"}}]}"#,
    );
    assert!(e.contains("duplicate of routes[0]"), "{e}");
    let e = reject(
        r#"{"generation":1,"routes":[{"port":6443,"source":"192.0.2.1/24","upstream":{"cluster":"x"}}]}"#,
    );
    assert!(e.contains("host bits"), "{e}");
    let e = reject(
        r#"{"generation":1,"routes":[{"port":6443,"source":"300.1.1.1","upstream":{"cluster":"x"}}]}"#,
    );
    assert!(e.contains("not an IP address"), "{e}");
    let e = reject(
        r#"{"generation":1,"routes":[{"port":443,"sni":"a.example.com","upstream":{"cluster":""}}]}"#,
    );
    assert!(e.contains("routes[0].upstream.cluster"), "{e}");
    let e = reject(
        r#"{"generation":1,"routes":[{"port":443,"sni":"a.example.com","upstream":{"address":{"host":"","port":1}}}]}"#,
    );
    assert!(e.contains("routes[0].upstream.address.host"), "{e}");
    let e = reject(
        r#"{"generation":1,"routes":[{"port":443,"sni":"a.example.com","upstream":{"address":{"host":"h","port":0}}}]}"#,
    );
    assert!(e.contains("upstream.address.port"), "{e}");
    let e = reject(
        r#"{"generation":1,"routes":[{"port":443,"sni":"kubernetes.default","upstream":{"cluster":"x"}}]}"#,
    );
    assert!(e.contains("source"), "{e}");
    let e = reject(
        r#"{"generation":1,"routes":[{"port":443,"sni":"A.example.com","upstream":{"cluster":"x"}}]}"#,
    );
    assert!(e.contains("lower case"), "{e}");
    let e = reject(
        r#"{"generation":1,"routes":[{"port":443,"sni":"a.*.com","upstream":{"cluster":"x"}}]}"#,
    );
    assert!(e.contains("routes[0].sni"), "{e}");
    let e = reject(r#"{"generation":0,"routes":[]}"#);
    assert!(e.starts_with("generation"), "{e}");
    let e = reject(r#"{"generation":1,"routes":[{"port":443,"upstream":{"cluster":"x"}}]}"#);
    assert!(e.contains("exactly one of"), "{e}");
    let e = reject(r#"{"generation":1,"routes":[],"extra":1}"#);
    assert!(e.contains("malformed JSON"), "{e}");
    let big = vec![b' '; oooi_routes::MAX_DOCUMENT_BYTES + 1];
    let e = RouteTable::from_json(&big).unwrap_err().to_string();
    assert!(e.contains("over the limit"), "{e}");
}

#[test]
fn digest_is_independent_of_order_and_changes_with_content() {
    let a = table(
        r#"{"generation":1,"routes":[
        {"port":443,"sni":"a.example.com","upstream":{"cluster":"x"}},
        {"port":443,"sni":"b.example.com","upstream":{"cluster":"y"}}]}"#,
    );
    let b = table(
        r#"{"generation":1,"routes":[
        {"port":443,"sni":"b.example.com","upstream":{"cluster":"y"}},
        {"port":443,"sni":"a.example.com","upstream":{"cluster":"x"}}]}"#,
    );
    let c = table(
        r#"{"generation":1,"routes":[
        {"port":443,"sni":"b.example.com","upstream":{"cluster":"x"}},
        {"port":443,"sni":"a.example.com","upstream":{"cluster":"y"}}]}"#,
    );
    assert_eq!(a.digest(), b.digest());
    assert_ne!(a.digest(), c.digest());
    assert!(a.digest().starts_with("sha256:") && a.digest().len() == 71);
}

#[test]
fn compact_encoding_round_trips() {
    let t = two_clusters().table().clone();
    let bytes = compact::encode(&t, &t.digest());
    assert_eq!(compact::peek_generation(&bytes), Some(3));
    let (back, digest) = compact::decode(&bytes).unwrap();
    assert_eq!(back, t);
    assert_eq!(digest, t.digest());
    for cut in 0..bytes.len() {
        assert!(
            compact::decode(&bytes[..cut]).is_err(),
            "truncated at {cut} must fail"
        );
    }
}

#[test]
fn ten_thousand_routes_compile_and_match() {
    let mut routes = Vec::new();
    for i in 0..5000u32 {
        routes.push(format!(
            r#"{{"port":443,"sni":"api.c{i}.example.com","upstream":{{"cluster":"c{i}"}}}}"#
        ));
        let (a, b) = (i / 250, i % 250);
        routes.push(format!(
            r#"{{"port":6443,"source":"10.{a}.{b}.1","upstream":{{"cluster":"c{i}"}}}}"#
        ));
    }
    let doc = format!(r#"{{"generation":9,"routes":[{}]}}"#, routes.join(","));
    let r = Router::new(table(&doc));
    assert_eq!(
        cluster(r.decide(443, Some("api.c4321.example.com"), None)),
        "c4321"
    );
    assert_eq!(cluster(r.decide(6443, None, ip("10.17.71.1"))), "c4321");
    assert_eq!(r.upstreams().len(), 5000);
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = compact::decode(&bytes);
        }

        #[test]
        fn from_json_never_panics(s in ".{0,300}") {
            let _ = RouteTable::from_json(s.as_bytes());
        }

        #[test]
        fn decide_never_panics(sni in "[a-zA-Z0-9.*-]{0,80}", a in any::<u32>(), port in any::<u16>()) {
            let r = two_clusters();
            let _ = r.decide(port, Some(&sni), Some(IpAddr::from(a.to_be_bytes())));
        }
    }
}

#[test]
fn invalid_sni_is_refused_before_any_wildcard() {
    let r = two_clusters();
    let long_label = format!("{}.apps.c1.example.com", "a".repeat(64));
    let long_name = format!("{}apps.c1.example.com", "abcdefghi.".repeat(24));
    for sni in [
        "a..apps.c1.example.com",
        ".apps.c1.example.com",
        "x y.apps.c1.example.com",
        "*.apps.c1.example.com",
        "-a.apps.c1.example.com",
        "a-.apps.c1.example.com",
        "é.apps.c1.example.com",
        "a.apps.c1.example.com..",
        ".",
        long_label.as_str(),
        long_name.as_str(),
    ] {
        assert_eq!(
            r.decide(443, Some(sni), ip("192.0.2.10")),
            Decision::Refuse(Refusal::InvalidSni),
            "{sni:?}"
        );
    }
    // Invalid aliases are invalid too, whatever the source.
    assert_eq!(
        r.decide(6443, Some("kubernetes..default"), ip("192.0.2.10")),
        Decision::Refuse(Refusal::InvalidSni)
    );
    // The longest valid forms still match; an empty SNI is no SNI.
    let label63 = format!("{}.apps.c1.example.com", "a".repeat(63));
    assert_eq!(cluster(r.decide(443, Some(&label63), None)), "c1_apps");
    assert_eq!(
        cluster(r.decide(443, Some("under_score.apps.c1.example.com"), None)),
        "c1_apps"
    );
    assert_eq!(
        cluster(r.decide(6443, Some(""), ip("192.0.2.10"))),
        "c1_api"
    );
}

#[test]
fn generations_stay_below_2_pow_53_and_wrap() {
    use oooi_routes::{MAX_GENERATION, generation_is_newer, next_generation};
    assert_eq!(MAX_GENERATION, 9_007_199_254_740_991);
    for g in [0, MAX_GENERATION + 1, u64::MAX] {
        let e = reject(&format!(r#"{{"generation": {g}, "routes": []}}"#));
        assert!(e.starts_with("generation:"), "{e}");
        assert!(e.contains(&g.to_string()), "{e}");
    }
    assert!(
        RouteTable::from_json(
            format!(r#"{{"generation": {MAX_GENERATION}, "routes": []}}"#).as_bytes()
        )
        .is_ok()
    );
    // Anything valid is newer than no table.
    assert!(generation_is_newer(1, 0) && generation_is_newer(MAX_GENERATION, 0));
    assert!(generation_is_newer(6, 5) && !generation_is_newer(5, 5) && !generation_is_newer(4, 5));
    // The top is followed by 1, 2, …: it locks nothing out.
    assert_eq!(next_generation(MAX_GENERATION), 1);
    assert_eq!(next_generation(0), 1);
    assert_eq!(next_generation(41), 42);
    assert!(generation_is_newer(1, MAX_GENERATION));
    assert!(generation_is_newer(1000, MAX_GENERATION - 5));
    assert!(!generation_is_newer(MAX_GENERATION, 1));
    // Half the ring ahead is the limit.
    assert!(generation_is_newer((1 << 52) - 1 + 1, 1));
    assert!(!generation_is_newer((1 << 52) + 1, 1));
    assert!(!generation_is_newer(MAX_GENERATION + 1, 1));
    // The newest of several, across the wrap.
    assert_eq!(oooi_routes::newest_generation([3, 9, 4]), 9);
    assert_eq!(
        oooi_routes::newest_generation([MAX_GENERATION - 1, 2, 0]),
        2
    );
    assert_eq!(oooi_routes::newest_generation([]), 0);
}

fn aliases_on_443() -> Router {
    Router::new(table(
        r#"{"generation": 1, "routes": [
        {"port": 443, "alias_source": "192.0.2.10/32", "upstream": {"cluster": "c1_api"}},
        {"port": 443, "alias_source": "192.0.2.0/24", "upstream": {"cluster": "c2_api"}},
        {"port": 443, "sni": "*.apps.c1.example.com", "upstream": {"cluster": "c1_apps"}},
        {"port": 6443, "source": "192.0.2.10/32", "upstream": {"cluster": "c1_api"}}
    ]}"#,
    ))
}

#[test]
fn alias_source_routes_carry_aliases_only() {
    let r = aliases_on_443();
    for alias in oooi_routes::KUBERNETES_ALIASES {
        assert_eq!(
            cluster(r.decide(443, Some(alias), ip("192.0.2.10"))),
            "c1_api"
        );
        assert_eq!(
            cluster(r.decide(443, Some(alias), ip("192.0.2.11"))),
            "c2_api"
        );
        assert_eq!(
            r.decide(443, Some(alias), ip("198.51.100.1")),
            Decision::Refuse(Refusal::AliasFromUnknownSource)
        );
    }
    match r.decide(443, Some("kubernetes.default.svc"), ip("192.0.2.10")) {
        Decision::Forward { kind, .. } => assert_eq!(kind, MatchKind::SourceAlias),
        other => panic!("{other:?}"),
    }
    // No SNI on 443 is not an alias: refused even from a worker.
    assert_eq!(
        r.decide(443, None, ip("192.0.2.10")),
        Decision::Refuse(Refusal::UnknownSource)
    );
    // Names still route by name beside them; 6443 keeps both paths.
    assert_eq!(
        cluster(r.decide(443, Some("x.apps.c1.example.com"), None)),
        "c1_apps"
    );
    assert_eq!(cluster(r.decide(6443, None, ip("192.0.2.10"))), "c1_api");
    assert_eq!(
        cluster(r.decide(6443, Some("kubernetes"), ip("192.0.2.10"))),
        "c1_api"
    );
}

#[test]
fn alias_source_is_on_the_wire_in_the_digest_and_in_the_compact_form() {
    let t = aliases_on_443().table().clone();
    let json = String::from_utf8(t.to_json()).unwrap();
    assert!(json.contains(r#""alias_source":"192.0.2.10/32""#), "{json}");
    assert_eq!(RouteTable::from_json(json.as_bytes()).unwrap(), t);
    let (back, digest) = compact::decode(&compact::encode(&t, &t.digest())).unwrap();
    assert_eq!(back, t);
    assert_eq!(digest, t.digest());
    // A source route of the same network on the same port is a different
    // route with the same key: the digest differs, the table conflicts.
    let mut as_source = t.clone();
    as_source.routes[0].matches = oooi_routes::RouteMatch::Source("192.0.2.10/32".parse().unwrap());
    assert_ne!(as_source.digest(), t.digest());
    let e = reject(
        r#"{"generation": 1, "routes": [
        {"port": 443, "alias_source": "192.0.2.10/32", "upstream": {"cluster": "a"}},
        {"port": 443, "source": "192.0.2.10", "upstream": {"cluster": "b"}}
    ]}"#,
    );
    assert!(
        e.starts_with("routes[1].source: conflicts with routes[0]"),
        "{e}"
    );
    for (json, field) in [
        (
            r#"{"generation":1,"routes":[{"port":443,"alias_source":"192.0.2.10/33","upstream":{"cluster":"a"}}]}"#,
            "routes[0].alias_source",
        ),
        (
            r#"{"generation":1,"routes":[{"port":443,"alias_source":"192.0.2.10","source":"192.0.2.10","upstream":{"cluster":"a"}}]}"#,
            "routes[0].route",
        ),
        (
            r#"{"generation":1,"routes":[{"port":443,"alias_source":"192.0.2.10","sources":["192.0.2.10"],"upstream":{"cluster":"a"}}]}"#,
            "routes[0].route",
        ),
    ] {
        let e = reject(json);
        assert!(e.starts_with(field), "{json}: {e}");
    }
}

mod generation_properties {
    use oooi_routes::{MAX_GENERATION, generation_is_newer, next_generation};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_next_generation_is_always_newer_and_never_both_ways(
            a in 1..=MAX_GENERATION,
            b in 1..=MAX_GENERATION,
        ) {
            prop_assert!(generation_is_newer(next_generation(a), a));
            prop_assert!(!(generation_is_newer(a, b) && generation_is_newer(b, a)));
            prop_assert!(!generation_is_newer(a, a));
        }
    }
}

#[test]
fn a_server_name_that_is_not_utf8_is_invalid_not_absent() {
    let r = two_clusters();
    let source = || ip("192.0.2.10");
    // From a worker that owns the no-SNI 6443 route: never taken by source.
    for sni in [
        &b"\xff.apps.c1.example.com"[..],
        b"api.c1.example.com\xc3",
        b"\x80",
        b"caf\xe9.apps.c1.example.com",
    ] {
        assert_eq!(
            r.decide_raw_with(6443, sni, source),
            Decision::Refuse(Refusal::InvalidSni),
            "{}",
            sni.escape_ascii()
        );
        assert_eq!(
            r.decide_raw_with(443, sni, || None),
            Decision::Refuse(Refusal::InvalidSni),
            "{}",
            sni.escape_ascii()
        );
    }
    // A port without routes stays an unknown port, whatever the name.
    assert_eq!(
        r.decide_raw_with(8443, b"\xff", source),
        Decision::Refuse(Refusal::UnknownPort)
    );
    // Empty bytes are no SNI; valid UTF-8 decides as a name.
    assert_eq!(cluster(r.decide_raw_with(6443, b"", source)), "c1_api");
    assert_eq!(
        cluster(r.decide_raw_with(443, b"oauth.c1.example.com", || None)),
        "c1_oauth"
    );
    // Valid UTF-8 outside the host-name alphabet is invalid as before.
    assert_eq!(
        r.decide_raw_with(6443, "é.example.com".as_bytes(), source),
        Decision::Refuse(Refusal::InvalidSni)
    );
}
