//! Per-connection decision cost, open and restricted (`sources`) routes.
//!
//! `cargo bench -p oooi-routes --bench decide` (a plain program, no harness):
//! builds a table shaped like 1,000 hosted clusters on one /16 VLAN, each with
//! five names and `*.apps`, half of them `isolation: Strict` (their names
//! restricted to three worker /32s plus the 16 networks outside the VLAN, as
//! the controller renders it), plus one source route per worker; then times
//! each kind of decision and prints nanoseconds per decision. Note the
//! machine's load next to the numbers: they are wall-clock.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use oooi_routes::{Cidr, Decision, Route, RouteMatch, RouteTable, Router, Upstream};

const CLUSTERS: u32 = 1000;

/// Every IPv4 network outside 10.0.0.0/16, as the planner computes it.
fn outside_vlan() -> Vec<Cidr> {
    let base = u32::from(Ipv4Addr::new(10, 0, 0, 0));
    (0..16u8)
        .map(|i| {
            let len = i + 1;
            let net = (base ^ (1u32 << (31 - i))) & (u32::MAX << (32 - u32::from(len)));
            Cidr::new(IpAddr::V4(Ipv4Addr::from(net)), len).expect("network")
        })
        .collect()
}

fn worker(c: u32, w: u32) -> Ipv4Addr {
    let n = 256 + c * 3 + w;
    Ipv4Addr::new(10, 0, (n >> 8) as u8, n as u8)
}

fn table() -> RouteTable {
    let outside = outside_vlan();
    let mut routes = Vec::new();
    for c in 0..CLUSTERS {
        let up = Upstream::Address {
            host: format!("kube-apiserver.clusters-c{c}.svc.cluster.local"),
            port: 6443,
        };
        let sources: Vec<Cidr> = (0..3)
            .map(|w| Cidr::new(IpAddr::V4(worker(c, w)), 32).expect("/32"))
            .chain(outside.iter().copied())
            .collect();
        let strict = c % 2 == 0;
        let name = |sni: String| {
            if strict {
                RouteMatch::SniFrom {
                    sni,
                    sources: sources.clone(),
                }
            } else {
                RouteMatch::Sni(sni)
            }
        };
        for (port, svc) in [
            (6443, "api"),
            (6443, "api-int"),
            (443, "oauth"),
            (443, "konnectivity"),
        ] {
            routes.push(Route {
                port,
                matches: name(format!("{svc}.c{c}.example.com")),
                upstream: up.clone(),
                owner: None,
            });
        }
        routes.push(Route {
            port: 443,
            matches: RouteMatch::Sni(format!("ignition.c{c}.example.com")),
            upstream: up.clone(),
            owner: None,
        });
        routes.push(Route {
            port: 443,
            matches: name(format!("*.apps.c{c}.example.com")),
            upstream: up.clone(),
            owner: None,
        });
        for w in 0..3 {
            routes.push(Route {
                port: 6443,
                matches: RouteMatch::Source(Cidr::new(IpAddr::V4(worker(c, w)), 32).expect("/32")),
                upstream: up.clone(),
                owner: None,
            });
        }
    }
    RouteTable {
        generation: 1,
        routes,
    }
}

fn time(label: &str, router: &Router, port: u16, sni: Option<&str>, src: Ipv4Addr, forward: bool) {
    let src = Some(IpAddr::V4(src));
    let d = router.decide(port, sni, src);
    assert_eq!(
        matches!(d, Decision::Forward { .. }),
        forward,
        "{label}: {d:?}"
    );
    let rounds = 2_000_000u32;
    let t = Instant::now();
    for _ in 0..rounds {
        black_box(router.decide(black_box(port), black_box(sni), black_box(src)));
    }
    let ns = t.elapsed().as_nanos() as f64 / f64::from(rounds);
    println!("{label:<58} {ns:>7.1} ns/decision");
}

fn main() {
    let t = Instant::now();
    let table = table();
    table.validate().expect("valid table");
    let n = table.routes.len();
    let router = Router::new(table);
    println!(
        "{n} routes ({CLUSTERS} clusters, half Strict) compiled in {:.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    let (strict, open) = (500u32, 501u32); // even: Strict
    let me = worker(strict, 1);
    let other = worker(open, 0);
    let api = |c: u32| format!("api.c{c}.example.com");
    let apps = |c: u32| format!("console.apps.c{c}.example.com");
    time(
        "exact SNI, open route",
        &router,
        6443,
        Some(&api(open)),
        other,
        true,
    );
    time(
        "exact SNI, Strict, own worker (/32 hash hit)",
        &router,
        6443,
        Some(&api(strict)),
        me,
        true,
    );
    time(
        "exact SNI, Strict, other VLAN host (refused)",
        &router,
        6443,
        Some(&api(strict)),
        other,
        false,
    );
    time(
        "exact SNI, Strict, off-VLAN client (network match)",
        &router,
        6443,
        Some(&api(strict)),
        Ipv4Addr::new(192, 168, 7, 7),
        true,
    );
    time(
        "wildcard SNI, open route",
        &router,
        443,
        Some(&apps(open)),
        other,
        true,
    );
    time(
        "wildcard SNI, Strict, own worker",
        &router,
        443,
        Some(&apps(strict)),
        me,
        true,
    );
    time(
        "alias by source",
        &router,
        6443,
        Some("kubernetes.default.svc"),
        me,
        true,
    );
    time(
        "unknown SNI (refused)",
        &router,
        443,
        Some("nope.example.org"),
        me,
        false,
    );
}
