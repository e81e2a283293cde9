//! What the reconciler tests share around the mocked API
//! ([`crate::mock_api`]): a `Context` on a fixed clock whose caches are
//! filled from the mock's store (standing in for the watches), the Infra and
//! attachment fixtures, and assertions on the controller's requests.

#![allow(dead_code)]
#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

use std::fmt::Debug;
use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use oooi_controller::cache::{StoreWriters, Stores};
use oooi_controller::metrics::Metrics;
use oooi_controller::observe::{Discovered, Observations};
use oooi_controller::reconcile::{Context, Settings};
use oooi_controller::testing::InfraBuilder;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::mock_api::{MockApi, Recorded};

/// The namespace of the Infra and its attachments.
pub const NS: &str = "oooi";
/// The collection prefix of the oooi resources in [`NS`].
pub const G: &str = "/apis/hostedcluster.densityops.com/v1alpha1/namespaces/oooi";
/// The controller's cleanup finalizer.
pub const FINALIZER: &str = "hostedcluster.densityops.com/cleanup";

/// The reconcilers' clock in every scenario.
pub fn fixed_now() -> Time {
    Time("2026-12-03T08:00:00Z".parse().unwrap())
}

/// The caches a [`Context`] reads, filled from a mock's store.
pub struct Caches {
    writers: StoreWriters,
    cached: Vec<Value>,
}

impl Caches {
    /// Copies `mock`'s objects into the caches and drops the ones gone from
    /// it (what the watches do).
    pub fn sync(&mut self, mock: &MockApi) {
        let objects = mock.objects();
        for old in &self.cached {
            let still = objects.iter().any(|o| {
                o["kind"] == old["kind"]
                    && o["metadata"]["name"] == old["metadata"]["name"]
                    && o["metadata"]["namespace"] == old["metadata"]["namespace"]
            });
            if !still {
                self.writers.delete_json(old);
            }
        }
        for o in &objects {
            self.writers.apply_json(o);
        }
        self.cached = objects;
    }
}

/// A [`Context`] over `mock`'s client on [`fixed_now`], and its empty
/// caches.
pub fn context(
    mock: &MockApi,
    settings: Settings,
    discovered: Discovered,
    observations: Observations,
) -> (Arc<Context>, Caches) {
    let (stores, writers) = Stores::new();
    let mut ctx = Context::new(
        mock.client.clone(),
        Metrics::new(),
        settings,
        stores,
        discovered,
        observations,
    );
    ctx.now = fixed_now;
    let caches = Caches {
        writers,
        cached: Vec::new(),
    };
    (Arc::new(ctx), caches)
}

/// Runs `reconcile` (one of the controller's reconcile functions) on the
/// object at `path` in `mock`, after filling `caches` from `mock` (as the
/// controller runs it once its watches caught up); panics when it fails.
pub async fn reconcile_at<K, T, E, Fut>(
    mock: &MockApi,
    caches: &mut Caches,
    ctx: &Arc<Context>,
    path: &str,
    reconcile: impl FnOnce(Arc<K>, Arc<Context>) -> Fut,
) where
    K: DeserializeOwned,
    E: Debug,
    Fut: Future<Output = Result<T, E>>,
{
    caches.sync(mock);
    let object = mock
        .get(path)
        .unwrap_or_else(|| panic!("no object at {path}"));
    let object: K = serde_json::from_value(object).expect(path);
    if let Err(e) = reconcile(Arc::new(object), ctx.clone()).await {
        panic!("the reconcile of {path} failed: {e:?}");
    }
}

/// The path of the Infra `vlan200`.
pub fn infra_path() -> String {
    format!("{G}/infras/vlan200")
}

/// The path of the attachment `name`.
pub fn att_path(name: &str) -> String {
    format!("{G}/infraclusterattachments/{name}")
}

/// The Infra `vlan200` (uid `uid-infra`) the reconciler tests read: on
/// 198.51.100.0/24 with the pool .100-.179, its NetworkAttachmentDefinition
/// `vlan200`, no upstream resolver listed, no generation.
pub fn infra_builder() -> InfraBuilder {
    InfraBuilder::new()
        .named(NS, "vlan200")
        .uid("uid-infra")
        .remove("/metadata/generation")
        .subnet("198.51.100")
        .dhcp_range("198.51.100.100", "198.51.100.179")
        .nad("vlan200")
        .remove("/spec/networkConfig/dnsServers")
}

/// The images of the chart's defaults.
pub const REGISTRY_IMAGES: [Option<&str>; 3] = [
    Some("registry.example.com/oooi/oooi-dhcp:0.1.0"),
    Some("registry.example.com/oooi/oooi-dns:0.1.0"),
    Some("docker.io/envoyproxy/envoy:v1.40.0"),
];

/// The Infra `vlan200` at `generation` (its DHCP lease time is 3600 s times
/// the generation, so each generation plans another DHCP config), with the
/// chart's images, one upstream resolver and the NetworkAttachmentDefinition
/// in namespace `default`.
pub fn infra_json(generation: i64) -> Value {
    infra_at(generation).json()
}

/// [`infra_json`]'s Infra as a builder.
pub fn infra_at(generation: i64) -> InfraBuilder {
    let [dhcp, dns, proxy] = REGISTRY_IMAGES;
    infra_builder()
        .generation(generation)
        .set("/spec/networkConfig/networkAttachmentNamespace", "default")
        .upstreams(&["10.0.0.10"])
        .dhcp(json!({"leaseTime": 3600 * generation}))
        .images(dhcp, dns, proxy)
}

/// The attachment `name` of the hosted cluster `clusters/name` to
/// `vlan200`, its names under `name.example.com`.
pub fn attachment_json(name: &str) -> Value {
    json!({
        "apiVersion": "hostedcluster.densityops.com/v1alpha1", "kind": "InfraClusterAttachment",
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"), "generation": 1},
        "spec": {
            "infraRef": {"name": "vlan200"},
            "hostedClusterRef": {"name": name, "namespace": "clusters"},
            "dns": {"clusterName": name, "baseDomain": "example.com"}
        }
    })
}

/// `object` with the controller's finalizer (as after its first reconcile).
pub fn finalized(mut object: Value) -> Value {
    object["metadata"]["finalizers"] = json!([FINALIZER]);
    object
}

/// Asserts `r` is a forced server-side apply by `oooi-controller` carrying
/// the hash of the applied configuration.
pub fn assert_apply(r: &Recorded) {
    assert_eq!(r.method, "PATCH", "{}", r.line());
    assert_eq!(
        r.content_type.as_deref(),
        Some("application/apply-patch+yaml"),
        "{}",
        r.line()
    );
    assert_eq!(r.query("fieldManager").as_deref(), Some("oooi-controller"));
    assert_eq!(r.query("force").as_deref(), Some("true"));
    let body = r.body.as_ref().unwrap();
    assert!(
        body["metadata"]["annotations"]["hostedcluster.densityops.com/applied-hash"].is_string(),
        "{body}"
    );
}

/// The condition `type_` of `status`; panics naming it when absent.
pub fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no {type_} in {status}"))
}

/// `bytes` as a Secret or ConfigMap carries them (base64).
pub fn base64_encode(bytes: &[u8]) -> Value {
    serde_json::to_value(ByteString(bytes.to_vec())).unwrap()
}

/// The bytes of a base64 Secret or ConfigMap value.
pub fn base64_decode(v: &Value) -> Vec<u8> {
    serde_json::from_value::<ByteString>(v.clone())
        .expect("base64")
        .0
}
