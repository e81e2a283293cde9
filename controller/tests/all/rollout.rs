//! Filter rollout through the ProxyServer reconcile, against a mocked
//! Kubernetes API (exact requests). The module is the real filter
//! (`OOOI_FILTER_WASM`), stamped with build ids; the wasmtime check runs for
//! real. Each scenario asserts what is written: the derived filter ConfigMap
//! and the Envoy Secret (ECDS files naming the module through `..data`), never
//! the Deployment (Envoy does not restart), and the status.

#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

use crate::mock_api;
use crate::reconcile_support;

use std::sync::Arc;

use mock_api::{MockApi, Recorded, assert_rbac, lines};
use oooi_controller::observe::{Discovered, Observations};
use oooi_controller::reconcile::{Context, Settings, component};
use oooi_controller::rollout::SourceConfig;
use oooi_routes::build_id;
use reconcile_support::{Caches, G, NS, base64_decode, condition, context, reconcile_at};
use serde_json::{Value, json};

const PROXY: &str =
    "/apis/hostedcluster.densityops.com/v1alpha1/namespaces/oooi/proxyservers/vlan200-proxy";
const FILTER_CM: &str = "/api/v1/namespaces/oooi/configmaps/vlan200-proxy-filter";
const ENVOY_SECRET: &str = "/api/v1/namespaces/oooi/secrets/vlan200-proxy-envoy";

fn module(build: &str) -> Vec<u8> {
    let path = oooi_tests::filter_wasm().expect("the filter module is built");
    build_id::stamp(&std::fs::read(path).unwrap(), build).unwrap()
}

fn sha(m: &[u8]) -> String {
    oooi_envoy::module_sha256(m)
}

fn labels() -> Value {
    json!({"app.kubernetes.io/name": "oooi", "app.kubernetes.io/component": "proxy",
           "app.kubernetes.io/instance": "vlan200", "app.kubernetes.io/managed-by": "oooi-controller",
           "hostedcluster.densityops.com/infra": "vlan200"})
}

fn proxy_json(pinned: Option<&str>) -> Value {
    let mut filter = json!({});
    if let Some(p) = pinned {
        filter["pinnedSha256"] = json!(p);
    }
    json!({
        "apiVersion": "hostedcluster.densityops.com/v1alpha1", "kind": "ProxyServer",
        "metadata": {"name": "vlan200-proxy", "namespace": NS, "uid": "uid-proxy",
                     "generation": 1, "labels": labels()},
        "spec": {
            "vlan": {"networkAttachmentDefinition": "vlan200", "networkAttachmentNamespace": "default",
                     "address": "198.51.100.4/24"},
            "image": "docker.io/envoyproxy/envoy:v1.40.0",
            "pushTokenSecret": {"name": "vlan200-proxy-push-token"},
            "filter": filter,
            "routes": [
                {"port": 6443, "sni": "api.c1.example.com",
                 "upstream": {"address": {"host": "kube-apiserver.clusters-c1.svc.cluster.local", "port": 6443}}},
                {"port": 443, "sni": "*.apps.c1.example.com",
                 "upstream": {"address": {"host": "198.51.100.200", "port": 443}}},
                {"port": 6443, "source": "198.51.100.101/32",
                 "upstream": {"address": {"host": "kube-apiserver.clusters-c1.svc.cluster.local", "port": 6443}}}
            ]
        }
    })
}

struct Harness {
    mock: MockApi,
    ctx: Arc<Context>,
    caches: Caches,
}

impl Harness {
    fn new() -> Harness {
        let mock = MockApi::start();
        let settings = Settings {
            filter_source: SourceConfig {
                namespace: "oooi-system".into(),
                ..SourceConfig::default()
            },
            ..Settings::default()
        };
        let (ctx, caches) = context(
            &mock,
            settings,
            Discovered::default(),
            Observations::default(),
        );
        mock.insert(PROXY, proxy_json(None));
        mock.insert(
            "/api/v1/namespaces/oooi/secrets/vlan200-proxy-push-token",
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "vlan200-proxy-push-token", "namespace": NS, "labels": labels()},
                   // "rollout-test-token-0123" in base64
                   "data": {"token": "cm9sbG91dC10ZXN0LXRva2VuLTAxMjM="}}),
        );
        Harness { mock, ctx, caches }
    }

    async fn reconcile(&mut self) -> Vec<Recorded> {
        reconcile_at(
            &self.mock,
            &mut self.caches,
            &self.ctx,
            PROXY,
            component::reconcile_proxy,
        )
        .await;
        let log = self.mock.take();
        assert_rbac(&log);
        log
    }

    /// Reconciles until nothing is written (the Deployment appearing in the
    /// cache changes the Ready message once).
    async fn settle(&mut self) {
        for _ in 0..3 {
            if self.reconcile().await.is_empty() {
                return;
            }
        }
        panic!("the reconcile does not settle");
    }

    fn status(&self) -> Value {
        self.mock.get(PROXY).unwrap()["status"].clone()
    }

    /// The active and previous module digests the derived ConfigMap names,
    /// and its keys.
    fn filter_config_map(&self) -> (Value, Vec<String>) {
        let cm = self.mock.get(FILTER_CM).expect("derived ConfigMap");
        let keys = cm["binaryData"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        (cm["metadata"]["annotations"].clone(), keys)
    }

    /// The module file the ECDS files in the Envoy Secret name.
    fn ecds_module(&self) -> String {
        let secret = self.mock.get(ENVOY_SECRET).expect("Envoy Secret");
        let data = secret["data"].as_object().unwrap();
        let mut refs = std::collections::BTreeSet::new();
        for (name, b64) in data {
            if !name.starts_with("ecds_") {
                continue;
            }
            let text = String::from_utf8(base64_decode(b64)).unwrap();
            let doc: Value = serde_json::from_str(&text).unwrap();
            let vm = &doc["resources"][0]["typed_config"]["config"]["vm_config"];
            refs.insert(
                vm["code"]["local"]["filename"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
        }
        assert_eq!(
            refs.len(),
            1,
            "every wasm filter names the same module: {refs:?}"
        );
        refs.into_iter().next().unwrap()
    }
}

fn file_name(m: &[u8]) -> String {
    oooi_envoy::module_file_name(m)
}

/// Accepted: first module, then a second one (the first kept as previous).
async fn with_two_modules() -> (Harness, Vec<u8>, Vec<u8>) {
    let mut h = Harness::new();
    let v1 = module("rollout-v1");
    assert!(h.ctx.rollout.set_source(v1.clone()));
    h.settle().await;
    let v2 = module("rollout-v2");
    assert!(h.ctx.rollout.set_source(v2.clone()));
    h.settle().await;
    (h, v1, v2)
}

#[tokio::test]
async fn without_a_source_module_no_filter_is_written_and_status_says_so() {
    let mut h = Harness::new();
    let log = h.reconcile().await;
    assert!(
        !lines(&log).iter().any(|l| l.contains("configmaps")),
        "{:#?}",
        lines(&log)
    );
    let st = h.status();
    assert_eq!(condition(&st, "FilterRejected")["status"], "False");
    assert!(st.get("filterDigest").is_none(), "{st}");
}

#[tokio::test]
async fn a_new_digest_that_passes_is_written_to_the_config_map_and_status() {
    let mut h = Harness::new();
    let v1 = module("rollout-v1");
    h.ctx.rollout.set_source(v1.clone());
    let log = h.reconcile().await;
    assert_eq!(
        lines(&log),
        vec![
            "PATCH /api/v1/namespaces/oooi/serviceaccounts/vlan200-proxy".to_string(),
            format!("PATCH {FILTER_CM}"),
            format!("PATCH {ENVOY_SECRET}"),
            "PATCH /api/v1/namespaces/oooi/services/vlan200-proxy".to_string(),
            "PATCH /api/v1/namespaces/oooi/services/vlan200-proxy-push".to_string(),
            "PATCH /apis/apps/v1/namespaces/oooi/deployments/vlan200-proxy".to_string(),
            format!("PATCH {G}/proxyservers/vlan200-proxy/status"),
            "POST /apis/events.k8s.io/v1/namespaces/oooi/events".to_string(),
        ]
    );
    let cm = log.iter().find(|r| r.path() == FILTER_CM).unwrap();
    assert_eq!(cm.query("fieldManager").as_deref(), Some("oooi-controller"));
    let (annotations, keys) = h.filter_config_map();
    assert_eq!(keys, vec![file_name(&v1)]);
    assert_eq!(
        annotations["hostedcluster.densityops.com/filter-digest"],
        sha(&v1)
    );
    assert_eq!(
        annotations["hostedcluster.densityops.com/filter-build-id"],
        "rollout-v1"
    );
    assert_eq!(
        h.ecds_module(),
        format!("/etc/oooi-envoy/..data/{}", file_name(&v1))
    );
    // The config mount projects the Envoy Secret and the derived ConfigMap.
    let dep = h
        .mock
        .get("/apis/apps/v1/namespaces/oooi/deployments/vlan200-proxy")
        .unwrap();
    let sources = &dep["spec"]["template"]["spec"]["volumes"][0]["projected"]["sources"];
    assert_eq!(sources[0]["secret"]["name"], "vlan200-proxy-envoy");
    assert_eq!(sources[1]["configMap"]["name"], "vlan200-proxy-filter");
    let st = h.status();
    assert_eq!(st["filterDigest"], sha(&v1));
    assert_eq!(st["filterBuildId"], "rollout-v1");
    assert!(st.get("previousFilterDigest").is_none(), "{st}");
    let c = condition(&st, "FilterRejected");
    assert_eq!(
        (c["status"].clone(), c["reason"].clone()),
        (json!("False"), json!("Accepted"))
    );

    // Nothing new: nothing but the Deployment's Ready message, then nothing.
    h.settle().await;
    assert_eq!(h.status()["filterDigest"], sha(&v1));
}

#[tokio::test]
async fn a_second_module_keeps_the_first_for_rollback_and_never_touches_the_deployment() {
    let mut h = Harness::new();
    h.ctx.rollout.set_source(module("rollout-v1"));
    h.settle().await;
    let v2 = module("rollout-v2");
    h.ctx.rollout.set_source(v2.clone());
    let log = h.reconcile().await;
    assert_eq!(
        lines(&log),
        vec![
            format!("PATCH {FILTER_CM}"),
            format!("PATCH {ENVOY_SECRET}"),
            format!("PATCH {G}/proxyservers/vlan200-proxy/status"),
        ],
        "no pod-template change: Envoy swaps the filter from its watched mount"
    );
    let (annotations, mut keys) = h.filter_config_map();
    let v1 = module("rollout-v1");
    let mut want = vec![file_name(&v1), file_name(&v2)];
    keys.sort();
    want.sort();
    assert_eq!(keys, want);
    assert_eq!(
        annotations["hostedcluster.densityops.com/filter-digest"],
        sha(&v2)
    );
    assert_eq!(
        annotations["hostedcluster.densityops.com/filter-previous-digest"],
        sha(&v1)
    );
    assert_eq!(
        h.ecds_module(),
        format!("/etc/oooi-envoy/..data/{}", file_name(&v2))
    );
    let st = h.status();
    assert_eq!(st["filterDigest"], sha(&v2));
    assert_eq!(st["filterBuildId"], "rollout-v2");
    assert_eq!(st["previousFilterDigest"], sha(&v1));
}

#[tokio::test]
async fn a_module_that_fails_a_check_is_not_written_and_the_status_names_the_check() {
    let (mut h, _v1, v2) = with_two_modules().await;
    // This build refuses the longest Kubernetes alias the router sends by source.
    let good = module("rollout-bad");
    let needle = b"kubernetes.default.svc.cluster.local";
    let at = good
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("alias in the module");
    let mut bad = good.clone();
    bad[at + needle.len() - 1] = b'x';
    h.ctx.rollout.set_source(bad.clone());
    let log = h.reconcile().await;
    assert_eq!(
        lines(&log),
        vec![format!("PATCH {G}/proxyservers/vlan200-proxy/status")],
        "a refused module writes nothing but the status"
    );
    let st = h.status();
    let c = condition(&st, "FilterRejected");
    assert_eq!(c["status"], "True");
    assert_eq!(c["reason"], "RoutingDecision");
    let message = c["message"].as_str().unwrap();
    assert!(message.contains(&sha(&bad)[..12]), "{message}");
    assert!(message.contains("stays"), "{message}");
    // The running filter stays.
    assert_eq!(st["filterDigest"], sha(&v2));
    assert_eq!(
        h.ecds_module(),
        format!("/etc/oooi-envoy/..data/{}", file_name(&v2))
    );
    // Garbage is refused at the first check.
    h.ctx.rollout.set_source(b"not a wasm module".to_vec());
    let log = h.reconcile().await;
    assert_eq!(
        lines(&log),
        vec![format!("PATCH {G}/proxyservers/vlan200-proxy/status")]
    );
    assert_eq!(
        condition(&h.status(), "FilterRejected")["reason"],
        "Compile"
    );
}

#[tokio::test]
async fn a_pinned_digest_rolls_back_and_stays_whatever_the_source_holds() {
    let (mut h, v1, v2) = with_two_modules().await;
    // Pin the previous module: a rollback.
    h.mock.insert(PROXY, {
        let mut p = proxy_json(Some(&format!("sha256:{}", sha(&v1))));
        p["status"] = h.status();
        p
    });
    let log = h.reconcile().await;
    assert_eq!(
        lines(&log),
        vec![
            format!("PATCH {FILTER_CM}"),
            format!("PATCH {ENVOY_SECRET}"),
            format!("PATCH {G}/proxyservers/vlan200-proxy/status"),
        ]
    );
    let st = h.status();
    assert_eq!(st["filterDigest"], sha(&v1));
    assert_eq!(st["previousFilterDigest"], sha(&v2));
    assert_eq!(
        h.ecds_module(),
        format!("/etc/oooi-envoy/..data/{}", file_name(&v1))
    );
    // A newer source module does not move a pinned proxy.
    let v3 = module("rollout-v3");
    h.ctx.rollout.set_source(v3);
    let log = h.reconcile().await;
    assert_eq!(lines(&log), Vec::<String>::new(), "pinned: nothing to do");
    assert_eq!(h.status()["filterDigest"], sha(&v1));
    // A pin to a module nobody has is reported, and changes nothing.
    h.mock.insert(PROXY, {
        let mut p = proxy_json(Some(&"ab".repeat(32)));
        p["status"] = h.status();
        p
    });
    let log = h.reconcile().await;
    assert_eq!(
        lines(&log),
        vec![format!("PATCH {G}/proxyservers/vlan200-proxy/status")]
    );
    let c = condition(&h.status(), "FilterRejected").clone();
    assert_eq!(
        (c["status"].clone(), c["reason"].clone()),
        (json!("True"), json!("PinnedModuleNotFound"))
    );
    assert_eq!(h.status()["filterDigest"], sha(&v1));
}
