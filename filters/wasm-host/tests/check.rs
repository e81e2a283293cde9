//! The pre-rollout check against the real filter module and variants of it
//! that are broken on purpose: each must be refused by the right check.
//! Set `OOOI_FILTER_WASM` to the built module.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use oooi_routes::{Cidr, Route, RouteMatch, RouteTable, Upstream, build_id};
use oooi_wasm_host::check::{Check, CheckLimits, check_module, reference_table};

fn filter_wasm() -> Vec<u8> {
    let Ok(path) = std::env::var("OOOI_FILTER_WASM") else {
        panic!(
            "OOOI_FILTER_WASM is not set: run `tools/dev test` (it builds the filter module and sets it)"
        );
    };
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read OOOI_FILTER_WASM={path}: {e}"))
}

/// `module` with every occurrence of `from` replaced by `to` (same length,
/// so offsets and section sizes stay valid).
fn patched(module: &[u8], from: &str, to: &str) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let (from, to) = (from.as_bytes(), to.as_bytes());
    let mut out = module.to_vec();
    let mut hits = 0;
    let mut i = 0;
    while i + from.len() <= out.len() {
        if &out[i..i + from.len()] == from {
            out[i..i + from.len()].copy_from_slice(to);
            hits += 1;
            i += from.len();
        } else {
            i += 1;
        }
    }
    assert!(hits > 0, "{from:?} not found in the module");
    out
}

/// A live table the way the controller plans one: SNI routes to Services
/// through the dynamic forward proxy, the apps wildcard, worker /32s.
fn live_table() -> RouteTable {
    let mut routes = Vec::new();
    for (i, cluster) in ["c1", "c2", "c3"].iter().enumerate() {
        let ns = format!("clusters-{cluster}");
        let svc = |name: &str, port| Upstream::Address {
            host: format!("{name}.{ns}.svc.cluster.local"),
            port,
        };
        routes.push(Route {
            port: 6443,
            matches: RouteMatch::Sni(format!("api.{cluster}.example.com")),
            upstream: svc("kube-apiserver", 6443),
            owner: Some(format!("oooi/{cluster}")),
        });
        routes.push(Route {
            port: 443,
            matches: RouteMatch::Sni(format!("oauth-openshift.apps.{cluster}.example.com")),
            upstream: svc("oauth-openshift", 6443),
            owner: None,
        });
        routes.push(Route {
            port: 443,
            matches: RouteMatch::Sni(format!("*.apps.{cluster}.example.com")),
            upstream: Upstream::Address {
                host: format!("192.0.2.{}", 200 + i),
                port: 443,
            },
            owner: None,
        });
        for w in 0..4 {
            routes.push(Route {
                port: 6443,
                matches: RouteMatch::Source(
                    format!("192.0.2.{}/32", 10 + 10 * i + w)
                        .parse::<Cidr>()
                        .unwrap(),
                ),
                upstream: svc("kube-apiserver", 6443),
                owner: None,
            });
        }
    }
    let t = RouteTable {
        generation: 7,
        routes,
    };
    t.validate().expect("valid table");
    t
}

#[test]
fn the_real_module_passes_every_check() {
    let module = build_id::stamp(&filter_wasm(), "check-ok").unwrap();
    let report = check_module(&module, &[live_table()], &CheckLimits::default());
    assert_eq!(report.failure, None, "{report:?}");
    assert!(report.passed());
    assert_eq!(report.build_id.as_deref(), Some("check-ok"));
    assert!(
        report
            .abi_versions
            .contains(&"proxy_abi_version_0_2_1".to_owned())
    );
    assert_eq!(report.tables, 2, "the reference table, then the live one");
    // One probe per SNI route, five per source route (no SNI and 4 aliases).
    let probes = |t: &RouteTable| -> usize {
        t.routes
            .iter()
            .map(|r| match r.matches {
                RouteMatch::Sni(_) => 1,
                RouteMatch::SniFrom { ref sources, .. } => sources.len() + 1,
                RouteMatch::Source(_) | RouteMatch::AliasSource(_) => 5,
            })
            .sum()
    };
    assert_eq!(
        report.routes_probed,
        probes(&reference_table()) + probes(&live_table())
    );
    // Three refusal probes per port: 443, 6443 and 22623 (reference), 443
    // and 6443 (live).
    assert_eq!(report.refusals_probed, 15);
    assert_eq!(report.module_sha256.len(), 64);
    eprintln!("check of the real module: {:?}", report.elapsed);
}

#[test]
fn an_empty_table_is_checked_too() {
    let report = check_module(
        &filter_wasm(),
        &[RouteTable {
            generation: 1,
            routes: Vec::new(),
        }],
        &CheckLimits::default(),
    );
    assert_eq!(report.failure, None, "{report:?}");
    assert_eq!(report.tables, 2);
}

#[test]
fn garbage_bytes_fail_to_compile() {
    let report = check_module(b"\0asm but not really", &[], &CheckLimits::default());
    let failure = report.failure.expect("refused");
    assert_eq!(failure.check, Check::Compile, "{failure}");
    assert_eq!(report.tables, 0);
}

#[test]
fn a_module_without_a_required_export_is_refused_by_name() {
    let module = patched(
        &filter_wasm(),
        "proxy_on_new_connection",
        "proxy_on_new_connectioX",
    );
    let failure = check_module(&module, &[live_table()], &CheckLimits::default())
        .failure
        .expect("refused");
    assert_eq!(failure.check, Check::Exports, "{failure}");
    assert!(
        failure.detail.contains("proxy_on_new_connection"),
        "{failure}"
    );
}

#[test]
fn a_module_of_another_abi_version_is_refused() {
    let module = patched(
        &filter_wasm(),
        "proxy_abi_version_0_2_1",
        "proxy_abi_version_0_2_9",
    );
    let failure = check_module(&module, &[], &CheckLimits::default())
        .failure
        .expect("refused");
    assert_eq!(failure.check, Check::AbiVersion, "{failure}");
}

#[test]
fn a_module_that_decides_differently_is_refused_naming_the_route() {
    // This build no longer knows the longest Kubernetes alias: it treats
    // `kubernetes.default.svc.cluster.local` as an ordinary SNI and refuses
    // it, where the router sends it by source address.
    let module = patched(
        &filter_wasm(),
        "kubernetes.default.svc.cluster.local",
        "kubernetes.default.svc.cluster.locax",
    );
    let failure = check_module(&module, &[live_table()], &CheckLimits::default())
        .failure
        .expect("refused");
    assert_eq!(failure.check, Check::RoutingDecision, "{failure}");
    assert!(
        failure
            .detail
            .contains("kubernetes.default.svc.cluster.local"),
        "{failure}"
    );
    assert!(failure.detail.contains("routes["), "{failure}");
}

#[test]
fn a_module_routing_through_another_filter_state_key_is_refused() {
    // Envoy would ignore the port under this key: every `address` route breaks.
    let module = patched(
        &filter_wasm(),
        "envoy.upstream.dynamic_port",
        "envoy.upstream.dynamic_porx",
    );
    let failure = check_module(&module, &[], &CheckLimits::default())
        .failure
        .expect("refused");
    assert_eq!(failure.check, Check::RoutingDecision, "{failure}");
}

#[test]
fn a_check_over_its_deadline_fails_as_such() {
    let limits = CheckLimits {
        deadline: Duration::ZERO,
        ..CheckLimits::default()
    };
    let failure = check_module(&filter_wasm(), &[], &limits)
        .failure
        .expect("refused");
    assert_eq!(failure.check, Check::Deadline, "{failure}");
}

#[test]
fn a_module_needing_more_memory_than_allowed_is_refused() {
    let mut limits = CheckLimits::default();
    limits.vm.max_memory_bytes = 64 * 1024;
    let failure = check_module(&filter_wasm(), &[], &limits)
        .failure
        .expect("refused");
    assert!(
        matches!(failure.check, Check::Instantiate | Check::Configure),
        "{failure}"
    );
}
