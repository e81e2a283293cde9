//! From a Machine address change to every proxy replica holding the new
//! routing table: the controller's reconcilers against the mocked API, the
//! pushes against real Envoys running the real filter (`OOOI_FILTER_WASM`),
//! on loopback.
//!
//! `cargo bench -p oooi-controller --bench replicas_sync [-- ROUNDS]`
//! (or `tools/dev bench replicas`)
//!
//! One Infra with 3 proxy replicas (`serverIPs`) and 200 attachments, each
//! hosted cluster with one worker Machine. Each round moves one worker to a
//! new address, then runs what the watches would trigger: the Infra
//! reconcile (re-plan, apply the three ProxyServers), then the three
//! ProxyServer reconciles at once (each pushes to its Envoy). The time ends
//! when every Envoy reports the new table's digest. Watch delivery is not
//! included (it is the API server's). Prints p50, p90 and max.

#![allow(clippy::unwrap_used)] // a benchmark that cannot set up has nothing to say

#[path = "../tests/all/mock_api/mod.rs"]
mod mock_api;
#[path = "../tests/all/reconcile_support/mod.rs"]
mod reconcile_support;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use oooi_controller::cache::Decoded;
use oooi_controller::crd::ProxyServer;
use oooi_controller::observe::{self, Discovered, Observations};
use oooi_controller::plan::labels::SERVER_LABEL;
use oooi_controller::reconcile::{Settings, component, infra};
use oooi_tests::{Envoy, PUSH_TOKEN, free_port, http_blocking};
use reconcile_support::{G, NS, att_path, attachment_json, base64_encode, infra_json, infra_path};
use serde_json::{Value, json};

const ATTACHMENTS: usize = 200;
const PROXIES: [&str; 3] = ["vlan200-proxy", "vlan200-proxy-2", "vlan200-proxy-3"];

fn machine(ns: &str, name: &str, address: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
        "metadata": {"name": name, "namespace": ns},
        "status": {"addresses": [{"type": "InternalIP", "address": address}]}
    }))
    .unwrap()
}

fn pct(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[i]
}

/// The digest of the table an Envoy has loaded.
fn loaded_digest(envoy: &Envoy) -> String {
    let (status, body) = http_blocking(envoy.api, "GET", "/v1/routes", &[], b"").unwrap();
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v["digest"].as_str().unwrap_or_default().to_string()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let rounds: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20);
    let lo: IpAddr = "127.0.0.1".parse()?;
    let envoys: Vec<Envoy> = (0..PROXIES.len())
        .map(|_| Envoy::start(lo, &[free_port(lo)], 1))
        .collect::<Result<_, _>>()?;

    let mock = mock_api::MockApi::start();
    let machines = ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "cluster.x-k8s.io/v1beta1".into(),
        kind: "Machine".into(),
        plural: "machines".into(),
    };
    let mut discovered = Discovered::default();
    let mut observations = Observations::default();
    let mut machine_writer = Writer::new(machines.clone());
    observations.machines = Some(machine_writer.as_reader());
    for api in observe::OPTIONAL_APIS {
        if api == observe::MACHINES {
            discovered.present.push((api, machines.clone()));
        } else {
            discovered.missing.push(api);
        }
    }
    let (ctx, mut caches) =
        reconcile_support::context(&mock, Settings::default(), discovered, observations);

    let mut infra_obj = infra_json(1);
    let proxy = &mut infra_obj["spec"]["infraComponents"]["proxy"];
    proxy.as_object_mut().unwrap().remove("serverIP");
    proxy["serverIPs"] = json!(["198.51.100.4", "198.51.100.5", "198.51.100.6"]);
    mock.insert(&infra_path(), infra_obj);
    let names: Vec<String> = (0..ATTACHMENTS).map(|i| format!("c{i:03}")).collect();
    for (i, n) in names.iter().enumerate() {
        mock.insert(&att_path(n), attachment_json(n));
        let address = format!("198.51.100.{}", 10 + i % 80);
        machine_writer.apply_watcher_event(&watcher::Event::Apply(machine(
            &format!("clusters-{n}"),
            &format!("{n}-w1"),
            &address,
        )));
    }
    let infra_path = infra_path();
    let run_infra = |caches: &mut reconcile_support::Caches| {
        let ctx = ctx.clone();
        caches.sync(&mock);
        let obj: oooi_controller::crd::Infra =
            serde_json::from_value(mock.get(&infra_path).unwrap()).unwrap();
        async move {
            infra::reconcile(Arc::new(Decoded::from(obj)), ctx)
                .await
                .unwrap()
        }
    };
    run_infra(&mut caches).await; // finalizer
    run_infra(&mut caches).await; // the three ProxyServers, the token
    let token_path = "/api/v1/namespaces/oooi/secrets/vlan200-proxy-push-token";
    let mut secret = mock.get(token_path).unwrap();
    secret["data"]["token"] = base64_encode(PUSH_TOKEN.as_bytes());
    mock.insert(token_path, secret);
    // One Envoy stands in for each replica's pod.
    for p in PROXIES {
        mock.insert(
            &format!("/api/v1/namespaces/oooi/pods/{p}-0"),
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": format!("{p}-0"), "namespace": NS, "labels": {
                       "app.kubernetes.io/name": "oooi", "app.kubernetes.io/component": "proxy",
                       "app.kubernetes.io/instance": "vlan200", SERVER_LABEL: p}},
                   "status": {"phase": "Running", "podIP": "127.0.0.1"}}),
        );
    }
    let run_proxies = |caches: &mut reconcile_support::Caches| {
        caches.sync(&mock);
        let jobs: Vec<_> = PROXIES
            .iter()
            .zip(&envoys)
            .map(|(p, envoy)| {
                let mut obj: ProxyServer =
                    serde_json::from_value(mock.get(&format!("{G}/proxyservers/{p}")).unwrap())
                        .unwrap();
                obj.spec.push_port = envoy.api.port();
                let ctx = ctx.clone();
                tokio::spawn(
                    async move { component::reconcile_proxy(Arc::new(obj.into()), ctx).await },
                )
            })
            .collect();
        async move {
            for j in jobs {
                j.await.unwrap().unwrap();
            }
        }
    };
    run_proxies(&mut caches).await;
    let first = loaded_digest(&envoys[0]);
    assert!(!first.is_empty(), "the first push reached the Envoys");

    let mut samples = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let n = &names[round % ATTACHMENTS];
        let address = format!("198.51.100.{}", 90 + round % 80);
        let before = loaded_digest(&envoys[0]);
        let started = Instant::now();
        machine_writer.apply_watcher_event(&watcher::Event::Apply(machine(
            &format!("clusters-{n}"),
            &format!("{n}-w1"),
            &address,
        )));
        run_infra(&mut caches).await;
        run_proxies(&mut caches).await;
        let took = started.elapsed();
        let digests: Vec<String> = envoys.iter().map(loaded_digest).collect();
        assert!(
            digests.iter().all(|d| *d == digests[0] && *d != before),
            "round {round}: every replica holds the new table: {digests:?} (before {before})"
        );
        samples.push(took);
    }
    let (p50, p90) = (pct(&mut samples, 0.5), pct(&mut samples, 0.9));
    let max = *samples.last().unwrap();
    println!(
        "machine address change -> {} replicas in sync, {ATTACHMENTS} attachments: \
         p50 {:.1} ms  p90 {:.1} ms  max {:.1} ms  (n={rounds})",
        PROXIES.len(),
        p50.as_secs_f64() * 1e3,
        p90.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3,
    );
    Ok(())
}
