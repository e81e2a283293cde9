//! The local lab: the real oooi data plane on loopback.
//!
//! Starts TLS backends standing in for two hosted control planes, a real
//! Envoy running the oooi filter, pushes the routing table through the table
//! API, then opens connections that must be routed and connections that must
//! be refused, and prints what happened. Exits non-zero if anything differs.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use anyhow::{Result, bail};
use clap::Parser;
use oooi_tests::fixture::{STRANGER, TwoClusters, WORKER_C1, WORKER_C2};
use oooi_tests::{http_blocking, tls_probe};

#[derive(Parser)]
#[command(
    about = "Run the oooi data plane on loopback and show it routing and refusing connections"
)]
struct Args {
    /// Envoy worker threads.
    #[arg(long, default_value_t = 2)]
    concurrency: u32,
    /// Keep everything running after the checks until Ctrl-C, to poke at it
    /// with curl or openssl s_client.
    #[arg(long)]
    hold: bool,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args = Args::parse();
    println!(
        "oooi lab: starting backends and Envoy (concurrency {})",
        args.concurrency
    );
    let lab = TwoClusters::start(args.concurrency).await?;
    for b in &lab.backends {
        println!("  backend {:<20} {}", b.name, b.addr);
    }
    println!(
        "  envoy   kube listener {}  https listener {}  table API {}  admin {}",
        lab.kube, lab.https, lab.envoy.api, lab.envoy.admin
    );

    let (status, _) = http_blocking(lab.envoy.api, "GET", "/ready", &[], b"")?;
    println!("\nbefore the push: GET /ready -> {status}");
    let t = Instant::now();
    lab.envoy.push_table(&lab.table)?;
    let (status, body) = http_blocking(lab.envoy.api, "GET", "/v1/routes", &[], b"")?;
    println!(
        "PUT /v1/routes generation 1 ({} routes) in {:?}; GET /v1/routes -> {status} {body}",
        lab.table.routes.len(),
        t.elapsed()
    );
    let (status, _) = http_blocking(lab.envoy.api, "GET", "/ready", &[], b"")?;
    println!("after the push:  GET /ready -> {status}\n");

    let ip = |s: &str| -> IpAddr { s.parse().expect("literal address") };
    // (what, listener, SNI, source, expected backend or None for refused)
    type Case<'a> = (
        &'a str,
        SocketAddr,
        Option<&'a str>,
        &'a str,
        Option<&'a str>,
    );
    let cases: Vec<Case> = vec![
        (
            "exact SNI",
            lab.kube,
            Some("api.c1.example.com"),
            STRANGER,
            Some("c1-kube-apiserver"),
        ),
        (
            "exact SNI",
            lab.kube,
            Some("api.c2.example.com"),
            STRANGER,
            Some("c2-kube-apiserver"),
        ),
        (
            "exact SNI",
            lab.https,
            Some("oauth.c1.example.com"),
            STRANGER,
            Some("c1-oauth"),
        ),
        (
            "exact SNI",
            lab.https,
            Some("ignition.c1.example.com"),
            STRANGER,
            Some("c1-ignition"),
        ),
        (
            "exact SNI",
            lab.https,
            Some("konnectivity.c1.example.com"),
            STRANGER,
            Some("c1-konnectivity"),
        ),
        (
            "wildcard",
            lab.https,
            Some("console.apps.c2.example.com"),
            STRANGER,
            Some("c2-apps"),
        ),
        (
            "alias by source",
            lab.kube,
            Some("kubernetes.default.svc"),
            WORKER_C1,
            Some("c1-kube-apiserver"),
        ),
        (
            "alias by source",
            lab.kube,
            Some("kubernetes.default.svc"),
            WORKER_C2,
            Some("c2-kube-apiserver"),
        ),
        (
            "no SNI by source",
            lab.kube,
            None,
            WORKER_C2,
            Some("c2-kube-apiserver"),
        ),
        (
            "unknown SNI",
            lab.https,
            Some("evil.example.org"),
            WORKER_C1,
            None,
        ),
        ("unknown source", lab.kube, None, STRANGER, None),
        (
            "foreign alias",
            lab.kube,
            Some("kubernetes"),
            STRANGER,
            None,
        ),
    ];
    let mut failures = 0;
    println!(
        "{:<17} {:<32} {:<12} {:<20} result",
        "case", "SNI", "source", "expected"
    );
    for (what, target, sni, source, want) in cases {
        let got = tls_probe(target, sni, Some(ip(source))).await.ok();
        let ok = got.as_deref() == want;
        failures += usize::from(!ok);
        println!(
            "{:<17} {:<32} {:<12} {:<20} {} {}",
            what,
            sni.unwrap_or("(none)"),
            source,
            want.unwrap_or("refused"),
            got.as_deref().unwrap_or("refused"),
            if ok { "ok" } else { "MISMATCH" }
        );
    }
    let stale = lab.envoy.push(&lab.table.to_json())?;
    println!(
        "\nstale re-push of generation 1 -> {} {}",
        stale.0,
        stale.1.trim()
    );
    if failures > 0 {
        bail!(
            "{failures} case(s) did not behave as expected; Envoy log: {}",
            lab.envoy.log.display()
        );
    }
    println!("all cases behaved as expected");
    if args.hold {
        println!("holding; press Ctrl-C to stop");
        tokio::signal::ctrl_c().await?;
    }
    Ok(())
}
