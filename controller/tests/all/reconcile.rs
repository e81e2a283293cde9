//! Reconcilers against a mocked Kubernetes API (kube-rs `tower-test`
//! pattern). Each scenario drives the reconcile functions and asserts the
//! exact requests: method and path, apply bodies and
//! `fieldManager=oooi-controller`, status patches, finalizer add and remove.
//! Every request is also checked against the controller's RBAC rules.

#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

use crate::mock_api;
use crate::reconcile_support;

use std::sync::Arc;

use kube::api::{ApiResource, DynamicObject};
use kube::runtime::controller::Action;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use mock_api::{MockApi, Recorded, assert_rbac, assert_rbac_with, created, lines, writes};
use oooi_controller::crd::ProxyServer;
use oooi_controller::observe::{self, Discovered, Observations};
use oooi_controller::reconcile::{Context, Settings, attachment, component, infra};
use reconcile_support::{
    Caches, G, NS, assert_apply, att_path, attachment_json, base64_encode, condition, context,
    infra_at, infra_json, infra_path, reconcile_at,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The mock, the context over caches the test fills from the mock's store
/// (standing in for the watches), and the caches' writers.
struct Harness {
    mock: MockApi,
    ctx: Arc<Context>,
    caches: Caches,
    machines: Option<Writer<DynamicObject>>,
}

fn machine_resource() -> ApiResource {
    ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "cluster.x-k8s.io/v1beta1".into(),
        kind: "Machine".into(),
        plural: "machines".into(),
    }
}

impl Harness {
    /// With `machines`, the CAPI Machine API is served.
    fn new(machines: bool) -> Harness {
        Harness::with_settings(machines, Settings::default())
    }

    fn with_settings(machines: bool, settings: Settings) -> Harness {
        let mock = MockApi::start();
        let mut discovered = Discovered::default();
        let mut observations = Observations::default();
        let mut machine_writer = None;
        for api in observe::OPTIONAL_APIS {
            if machines && api == observe::MACHINES {
                let w = Writer::new(machine_resource());
                observations.machines = Some(w.as_reader());
                machine_writer = Some(w);
                discovered.present.push((api, machine_resource()));
            } else {
                discovered.missing.push(api);
            }
        }
        let (ctx, caches) = context(&mock, settings, discovered, observations);
        Harness {
            mock,
            ctx,
            caches,
            machines: machine_writer,
        }
    }

    /// Copies the mock's objects into the caches (what the watches do).
    fn sync(&mut self) {
        self.caches.sync(&self.mock);
    }

    /// Runs `reconcile` on the object at `path`; returns its requests.
    async fn run<K: DeserializeOwned, Fut>(
        &mut self,
        path: &str,
        reconcile: impl FnOnce(Arc<K>, Arc<Context>) -> Fut,
    ) -> Vec<Recorded>
    where
        Fut: Future<Output = oooi_controller::reconcile::Result<Action>>,
    {
        reconcile_at(&self.mock, &mut self.caches, &self.ctx, path, reconcile).await;
        self.take()
    }

    async fn reconcile_infra(&mut self) -> Vec<Recorded> {
        self.run(&infra_path(), infra::reconcile).await
    }

    async fn reconcile_attachment(&mut self, name: &str) -> Vec<Recorded> {
        self.run(&att_path(name), attachment::reconcile).await
    }

    async fn reconcile_dhcp(&mut self) -> Vec<Recorded> {
        let path = format!("{G}/dhcpservers/vlan200-dhcp");
        self.run(&path, component::reconcile_dhcp).await
    }

    async fn reconcile_dns(&mut self) -> Vec<Recorded> {
        let path = format!("{G}/dnsservers/vlan200-dns");
        self.run(&path, component::reconcile_dns).await
    }

    async fn reconcile_proxy(&mut self) -> Vec<Recorded> {
        let path = format!("{G}/proxyservers/vlan200-proxy");
        self.run(&path, component::reconcile_proxy).await
    }

    /// The requests since the last call, checked against the RBAC rules of
    /// the harness's settings.
    fn take(&mut self) -> Vec<Recorded> {
        let log = self.mock.take();
        assert_rbac_with(
            &log,
            &oooi_controller::rbac::rules_for(self.ctx.settings.openshift_scc),
        );
        log
    }

    /// Infra with finalizer, all derived objects and the token in place.
    async fn converged(attachments: &[&str]) -> Harness {
        Harness::converged_with(attachments, Settings::default()).await
    }

    async fn converged_with(attachments: &[&str], settings: Settings) -> Harness {
        let mut h = Harness::with_settings(false, settings);
        h.mock.insert(&infra_path(), infra_json(1));
        for a in attachments {
            h.mock.insert(&att_path(a), attachment_json(a));
        }
        h.reconcile_infra().await; // finalizer
        h.reconcile_infra().await; // derived objects, token, status
        h
    }

    fn set_machine(&mut self, ns: &str, name: &str, addresses: &[&str]) {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
            "metadata": {"name": name, "namespace": ns},
            "status": {"addresses": addresses.iter()
                .map(|a| json!({"type": "InternalIP", "address": a})).collect::<Vec<_>>()}
        }))
        .unwrap();
        self.machines
            .as_mut()
            .expect("machines served")
            .apply_watcher_event(&watcher::Event::Apply(obj));
    }
}

fn apply_of<'a>(log: &'a [Recorded], path: &str) -> &'a Recorded {
    log.iter()
        .find(|r| r.method == "PATCH" && r.path() == path)
        .unwrap_or_else(|| panic!("no PATCH {path} in {:#?}", lines(log)))
}

fn owner_uid(body: &Value) -> &str {
    body["metadata"]["ownerReferences"][0]["uid"]
        .as_str()
        .unwrap_or("")
}

#[tokio::test]
async fn first_reconcile_adds_the_finalizer_then_applies_derived_objects_and_status() {
    let mut h = Harness::new(false);
    h.mock.insert(&infra_path(), infra_json(1));
    h.mock.insert(&att_path("c1"), attachment_json("c1"));

    // 1: only the finalizer.
    let log = h.reconcile_infra().await;
    assert_eq!(lines(&log), vec![format!("PATCH {}", infra_path())]);
    assert_eq!(
        log[0].content_type.as_deref(),
        Some("application/json-patch+json")
    );
    let ops = log[0].body.as_ref().unwrap();
    assert_eq!(ops[1]["op"], "add");
    assert_eq!(
        ops[1]["value"],
        json!(["hostedcluster.densityops.com/cleanup"])
    );

    // 2: the token Secrets (push, DHCP inventory), the three derived
    // objects, status, event.
    let log = h.reconcile_infra().await;
    assert_eq!(
        lines(&log),
        vec![
            "POST /api/v1/namespaces/oooi/secrets".to_string(),
            "POST /api/v1/namespaces/oooi/secrets".to_string(),
            format!("PATCH {G}/dhcpservers/vlan200-dhcp"),
            format!("PATCH {G}/dnsservers/vlan200-dns"),
            format!("PATCH {G}/proxyservers/vlan200-proxy"),
            format!("PATCH {G}/infras/vlan200/status"),
            "POST /apis/events.k8s.io/v1/namespaces/oooi/events".to_string(),
        ]
    );
    let secret = log[0].body.as_ref().unwrap();
    assert_eq!(secret["metadata"]["name"], "vlan200-proxy-push-token");
    assert_eq!(owner_uid(secret), "uid-infra");
    assert_eq!(
        secret["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "oooi-controller"
    );
    let inventory = log[1].body.as_ref().unwrap();
    assert_eq!(
        inventory["metadata"]["name"],
        "vlan200-dhcp-inventory-token"
    );
    assert_eq!(owner_uid(inventory), "uid-infra");
    assert_eq!(
        inventory["metadata"]["labels"]["app.kubernetes.io/component"],
        "dhcp"
    );
    let token = reconcile_support::base64_decode(&inventory["data"]["token"]);
    assert_eq!(token.len(), 64, "32 random bytes in hex");
    assert_eq!(
        log[2].body.as_ref().unwrap()["spec"]["inventoryTokenSecret"]["name"],
        "vlan200-dhcp-inventory-token"
    );
    for r in &log[2..5] {
        assert_apply(r);
        let body = r.body.as_ref().unwrap();
        assert_eq!(owner_uid(body), "uid-infra", "{}", r.line());
        assert_eq!(
            body["metadata"]["labels"]["app.kubernetes.io/instance"],
            "vlan200"
        );
        assert_eq!(
            body["metadata"]["labels"]["hostedcluster.densityops.com/infra"],
            "vlan200"
        );
    }
    let proxy = log[4].body.as_ref().unwrap();
    let routes = proxy["spec"]["routes"].as_array().unwrap();
    assert!(
        routes.iter().any(|r| r["sni"] == "api.c1.example.com"),
        "{proxy}"
    );
    let status = &log[5].body.as_ref().unwrap()["status"];
    assert_eq!(status["observedGeneration"], 1);
    assert_eq!(
        status["attachments"],
        json!({"total": 1, "accepted": 1, "excluded": 0})
    );
    assert_eq!(condition(status, "Ready")["status"], "False");
    assert_eq!(condition(status, "Ready")["reason"], "ComponentsNotReady");
    assert_eq!(
        condition(status, "WorkersObserved")["reason"],
        "OptionalAPIsMissing"
    );
    let event = log[6].body.as_ref().unwrap();
    assert_eq!(event["reason"], "ComponentsNotReady");
    assert_eq!(event["regarding"]["name"], "vlan200");

    // 3: nothing changed: no request at all (everything from caches).
    let log = h.reconcile_infra().await;
    assert_eq!(lines(&log), Vec::<String>::new(), "{log:#?}");
}

#[tokio::test]
async fn derived_servers_apply_their_children_then_settle() {
    let mut h = Harness::converged(&["c1"]).await;

    let log = h.reconcile_dhcp().await;
    assert_eq!(
        lines(&log),
        vec![
            "PATCH /api/v1/namespaces/oooi/serviceaccounts/vlan200-dhcp".to_string(),
            "PATCH /api/v1/namespaces/oooi/configmaps/vlan200-dhcp-config".to_string(),
            "PATCH /api/v1/namespaces/oooi/persistentvolumeclaims/vlan200-dhcp-leases".to_string(),
            "PATCH /apis/apps/v1/namespaces/oooi/deployments/vlan200-dhcp".to_string(),
            format!("PATCH {G}/dhcpservers/vlan200-dhcp/status"),
        ]
    );
    for r in &log[..4] {
        assert_apply(r);
        assert_eq!(
            r.body.as_ref().unwrap()["metadata"]["ownerReferences"][0]["kind"],
            "DHCPServer"
        );
    }
    let dep = log[3].body.as_ref().unwrap();
    assert!(
        dep["spec"]["template"]["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"]
            .as_str()
            .unwrap()
            .contains("198.51.100.2/24"),
        "{dep}"
    );
    let status = &log[4].body.as_ref().unwrap()["status"];
    assert_eq!(condition(status, "Ready")["reason"], "DeploymentNotReady");
    assert!(
        status["configDigest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    // The Deployment is now in the cache (as its watch event would bring
    // it): only the status follows, then nothing.
    let log = h.reconcile_dhcp().await;
    assert_eq!(
        lines(&log),
        vec![format!("PATCH {G}/dhcpservers/vlan200-dhcp/status")]
    );
    assert_eq!(
        condition(&log[0].body.as_ref().unwrap()["status"], "Ready")["message"],
        "Deployment vlan200-dhcp: new spec not observed yet"
    );
    assert!(h.reconcile_dhcp().await.is_empty(), "settled");

    // The Deployment becomes ready: only the status changes.
    let dep_path = "/apis/apps/v1/namespaces/oooi/deployments/vlan200-dhcp";
    let mut dep = h.mock.get(dep_path).unwrap();
    dep["status"] =
        json!({"observedGeneration": 1, "replicas": 1, "readyReplicas": 1, "updatedReplicas": 1});
    h.mock.insert(dep_path, dep);
    let log = h.reconcile_dhcp().await;
    assert_eq!(
        lines(&log),
        vec![format!("PATCH {G}/dhcpservers/vlan200-dhcp/status")]
    );
    let status = &log[0].body.as_ref().unwrap()["status"];
    assert_eq!(condition(status, "Ready")["status"], "True");
    assert_eq!(status["readyReplicas"], 1);

    let log = h.reconcile_dns().await;
    assert_eq!(
        lines(&log),
        vec![
            "PATCH /api/v1/namespaces/oooi/serviceaccounts/vlan200-dns".to_string(),
            "PATCH /api/v1/namespaces/oooi/configmaps/vlan200-dns-config".to_string(),
            "PATCH /api/v1/namespaces/oooi/services/vlan200-dns".to_string(),
            "PATCH /apis/apps/v1/namespaces/oooi/deployments/vlan200-dns".to_string(),
            format!("PATCH {G}/dnsservers/vlan200-dns/status"),
        ]
    );
    assert_eq!(
        lines(&h.reconcile_dns().await),
        vec![format!("PATCH {G}/dnsservers/vlan200-dns/status")]
    );
    assert!(h.reconcile_dns().await.is_empty(), "settled");

    // The Infra sees the DHCP Deployment ready.
    let log = h.reconcile_infra().await;
    assert_eq!(
        lines(&log),
        vec![format!("PATCH {G}/infras/vlan200/status")]
    );
    let status = &log[0].body.as_ref().unwrap()["status"];
    assert_eq!(status["components"]["dhcp"]["ready"], true);
    assert_eq!(status["components"]["dns"]["ready"], false);
}

#[tokio::test]
async fn proxy_without_envoy_pods_reports_no_replicas() {
    let mut h = Harness::converged(&["c1"]).await;
    let log = h.reconcile_proxy().await;
    assert_eq!(
        lines(&log),
        vec![
            "PATCH /api/v1/namespaces/oooi/serviceaccounts/vlan200-proxy".to_string(),
            "PATCH /api/v1/namespaces/oooi/secrets/vlan200-proxy-envoy".to_string(),
            "PATCH /api/v1/namespaces/oooi/services/vlan200-proxy".to_string(),
            "PATCH /api/v1/namespaces/oooi/services/vlan200-proxy-push".to_string(),
            "PATCH /apis/apps/v1/namespaces/oooi/deployments/vlan200-proxy".to_string(),
            format!("PATCH {G}/proxyservers/vlan200-proxy/status"),
            "POST /apis/events.k8s.io/v1/namespaces/oooi/events".to_string(),
        ]
    );
    let status = &log[5].body.as_ref().unwrap()["status"];
    assert_eq!(condition(status, "RoutesSynced")["status"], "False");
    assert_eq!(condition(status, "RoutesSynced")["reason"], "NoReplicas");
    assert_eq!(
        lines(&h.reconcile_proxy().await),
        vec![format!("PATCH {G}/proxyservers/vlan200-proxy/status")]
    );
    let log = h.reconcile_proxy().await;
    assert!(log.is_empty(), "settled: {log:#?}");
}

#[tokio::test]
async fn spec_change_reapplies_only_what_changed() {
    let mut h = Harness::converged(&["c1"]).await;
    let mut infra = infra_json(2);
    infra["metadata"]["finalizers"] = json!(["hostedcluster.densityops.com/cleanup"]);
    infra["status"] = h.mock.get(&infra_path()).unwrap()["status"].clone();
    h.mock.insert(&infra_path(), infra);
    let log = h.reconcile_infra().await;
    assert_eq!(
        lines(&log),
        vec![
            format!("PATCH {G}/dhcpservers/vlan200-dhcp"),
            format!("PATCH {G}/infras/vlan200/status"),
        ]
    );
    let config = &log[0].body.as_ref().unwrap()["spec"]["config"];
    assert_eq!(config["lease_seconds"], 7200, "{config}");
    assert_eq!(
        log[1].body.as_ref().unwrap()["status"]["observedGeneration"],
        2
    );
    assert_eq!(lines(&h.reconcile_infra().await), Vec::<String>::new());
}

#[tokio::test]
async fn attachment_added_then_removed_keeps_routes_and_control_plane_policy_in_step() {
    let mut h = Harness::converged(&["c1"]).await;
    h.mock.insert(&att_path("c2"), attachment_json("c2"));

    // The Infra re-plans: c2's names and routes enter DNS and the proxy.
    let log = h.reconcile_infra().await;
    assert_eq!(
        lines(&log),
        vec![
            format!("PATCH {G}/dnsservers/vlan200-dns"),
            format!("PATCH {G}/proxyservers/vlan200-proxy"),
            format!("PATCH {G}/infras/vlan200/status"),
        ]
    );
    let routes = log[1].body.as_ref().unwrap()["spec"]["routes"].clone();
    assert!(
        routes
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["sni"] == "api.c2.example.com")
    );
    assert_eq!(
        log[2].body.as_ref().unwrap()["status"]["attachments"]["total"],
        2
    );

    // The attachment: finalizer, then status and the control-plane policy.
    let log = h.reconcile_attachment("c2").await;
    assert_eq!(lines(&log), vec![format!("PATCH {}", att_path("c2"))]);
    let log = h.reconcile_attachment("c2").await;
    let np =
        "/apis/networking.k8s.io/v1/namespaces/clusters-c2/networkpolicies/oooi-proxy-oooi-vlan200";
    assert_eq!(
        lines(&log),
        vec![
            format!("PATCH {np}"),
            format!("PATCH {}/status", att_path("c2")),
            "POST /apis/events.k8s.io/v1/namespaces/oooi/events".to_string(),
        ]
    );
    assert_apply(&log[0]);
    let policy = log[0].body.as_ref().unwrap();
    assert_eq!(
        policy["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "oooi"
    );
    assert_eq!(
        policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"],
        "proxy"
    );
    let status = &log[1].body.as_ref().unwrap()["status"];
    assert_eq!(status["domain"], "c2.example.com");
    assert_eq!(condition(status, "Accepted")["status"], "True");
    assert_eq!(
        lines(&h.reconcile_attachment("c2").await),
        Vec::<String>::new(),
        "settled"
    );

    // Removal: the finalizer deletes the cross-namespace policy first.
    let mut a = h.mock.get(&att_path("c2")).unwrap();
    a["metadata"]["deletionTimestamp"] = json!("2026-12-03T08:01:00Z");
    h.mock.insert(&att_path("c2"), a);
    let log = h.reconcile_attachment("c2").await;
    assert_eq!(
        lines(&log),
        vec![format!("DELETE {np}"), format!("PATCH {}", att_path("c2"))]
    );
    let ops = log[1].body.as_ref().unwrap();
    assert_eq!(ops[1]["op"], "remove");
    assert!(h.mock.get(&att_path("c2")).is_none(), "attachment gone");
    assert!(h.mock.get(np).is_none(), "policy gone");

    // The Infra drops c2 again.
    let log = h.reconcile_infra().await;
    assert_eq!(
        lines(&log),
        vec![
            format!("PATCH {G}/dnsservers/vlan200-dns"),
            format!("PATCH {G}/proxyservers/vlan200-proxy"),
            format!("PATCH {G}/infras/vlan200/status"),
        ]
    );
    let routes = log[1].body.as_ref().unwrap()["spec"]["routes"].clone();
    assert!(
        !routes
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["sni"] == "api.c2.example.com")
    );
}

#[tokio::test]
async fn missing_optional_apis_are_found_reported_and_not_watched() {
    let mock = MockApi::start();
    // Only the Machine CRD exists.
    mock.insert(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/machines.cluster.x-k8s.io",
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "machines.cluster.x-k8s.io"},
            "spec": {"group": "cluster.x-k8s.io", "scope": "Namespaced",
                     "names": {"plural": "machines", "kind": "Machine"},
                     "versions": [{"name": "v1beta1", "served": true, "storage": true}]}
        }),
    );
    let d = observe::discover(&mock.client).await.unwrap();
    let log = mock.take();
    assert_rbac(&log);
    assert_eq!(
        lines(&log),
        vec![
            "GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions/hostedclusters.hypershift.openshift.io",
            "GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions/nodepools.hypershift.openshift.io",
            "GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions/machines.cluster.x-k8s.io",
            "GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions/virtualmachineinstances.kubevirt.io",
        ]
    );
    assert_eq!(
        d.get(observe::MACHINES).unwrap().api_version,
        "cluster.x-k8s.io/v1beta1"
    );
    assert!(d.get(observe::VMIS).is_none());
    assert_eq!(d.missing.len(), 3);
    let summary = d.summary().unwrap();
    assert!(
        summary.contains("virtualmachineinstances.kubevirt.io"),
        "{summary}"
    );
    assert!(summary.contains("no DHCP reservations"), "{summary}");

    // Without any optional API the Infra still converges and says why it
    // sees no workers.
    let mut h = Harness::converged(&["c1"]).await;
    let infra = h.mock.get(&infra_path()).unwrap();
    let workers = condition(&infra["status"], "WorkersObserved");
    assert_eq!(workers["status"], "False");
    assert!(
        workers["message"]
            .as_str()
            .unwrap()
            .contains("no worker addresses are observed"),
        "{workers}"
    );
    assert_eq!(lines(&h.reconcile_infra().await), Vec::<String>::new());
}

#[tokio::test]
async fn deletion_removes_cross_namespace_objects_then_the_finalizer() {
    let mut h = Harness::converged(&["c1"]).await;
    h.reconcile_attachment("c1").await;
    h.reconcile_attachment("c1").await;
    let np =
        "/apis/networking.k8s.io/v1/namespaces/clusters-c1/networkpolicies/oooi-proxy-oooi-vlan200";
    assert!(h.mock.get(np).is_some());
    // The Infra goes first (its attachment stays): its cleanup reaches the
    // policy in the control-plane namespace.
    let mut infra = h.mock.get(&infra_path()).unwrap();
    infra["metadata"]["deletionTimestamp"] = json!("2026-12-03T08:02:00Z");
    h.mock.insert(&infra_path(), infra);
    let log = h.reconcile_infra().await;
    assert_eq!(
        lines(&log),
        vec![
            format!("DELETE {np}"),
            "POST /apis/events.k8s.io/v1/namespaces/oooi/events".to_string(),
            format!("PATCH {}", infra_path()),
        ]
    );
    let ops = log[2].body.as_ref().unwrap();
    assert_eq!(ops[0]["op"], "test");
    assert_eq!(ops[1]["op"], "remove");
    assert!(h.mock.get(&infra_path()).is_none(), "Infra deleted");
    // Nothing the controller made outside the Infra's namespace is left.
    let leftovers: Vec<String> = h
        .mock
        .paths("/")
        .into_iter()
        .filter(|p| !p.contains("/namespaces/oooi/"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[tokio::test]
async fn machine_address_change_reaches_the_proxy_routes() {
    let mut h = Harness::new(true);
    h.mock.insert(&infra_path(), infra_json(1));
    h.mock.insert(&att_path("c1"), attachment_json("c1"));
    h.set_machine("clusters-c1", "c1-w1", &["198.51.100.101", "10.128.0.9"]);
    h.reconcile_infra().await;
    let log = h.reconcile_infra().await;
    let proxy = apply_of(&log, &format!("{G}/proxyservers/vlan200-proxy"));
    let routes = proxy.body.as_ref().unwrap()["spec"]["routes"].clone();
    assert!(
        routes
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["source"] == "198.51.100.101/32"),
        "{routes}"
    );
    let infra = h.mock.get(&infra_path()).unwrap();
    assert_eq!(
        condition(&infra["status"], "WorkersObserved")["status"],
        "False"
    );

    // The Machine moves to another VLAN address: only the proxy (and the
    // status, unchanged here) follow.
    h.set_machine("clusters-c1", "c1-w1", &["198.51.100.105"]);
    let log = h.reconcile_infra().await;
    assert_eq!(
        lines(&log),
        vec![format!("PATCH {G}/proxyservers/vlan200-proxy")]
    );
    let routes = log[0].body.as_ref().unwrap()["spec"]["routes"].clone();
    let sources: Vec<&str> = routes
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["source"].as_str())
        .collect();
    assert!(sources.contains(&"198.51.100.105/32"), "{sources:?}");
    assert!(!sources.contains(&"198.51.100.101/32"), "{sources:?}");
    // The attachment reports the address in use.
    h.reconcile_attachment("c1").await;
    let log = h.reconcile_attachment("c1").await;
    let st = log
        .iter()
        .find(|r| r.path().ends_with("/status"))
        .unwrap()
        .body
        .clone()
        .unwrap();
    assert_eq!(st["status"]["workerAddresses"], json!(["198.51.100.105"]));
}

/// What a reconciliation costs with many attachments (numbers printed for
/// the closing note; the assertions are on request counts, not time).
#[tokio::test]
async fn two_hundred_attachments_plan_apply_and_settle() {
    let names: Vec<String> = (0..200).map(|i| format!("c{i:03}")).collect();
    let mut h = Harness::new(false);
    h.mock.insert(&infra_path(), infra_json(1));
    for n in &names {
        h.mock.insert(&att_path(n), attachment_json(n));
    }
    h.reconcile_infra().await; // finalizer
    let started = std::time::Instant::now();
    let log = h.reconcile_infra().await;
    let first = started.elapsed();
    assert_eq!(writes(&log).len(), 7, "{:#?}", lines(&log));
    assert_eq!(log.len(), 7, "seven writes and no read: {:#?}", lines(&log));
    let proxy = apply_of(&log, &format!("{G}/proxyservers/vlan200-proxy"));
    let routes = proxy.body.as_ref().unwrap()["spec"]["routes"]
        .as_array()
        .unwrap()
        .len();
    let body_bytes = serde_json::to_vec(proxy.body.as_ref().unwrap())
        .unwrap()
        .len();
    let status = &h.mock.get(&infra_path()).unwrap()["status"];
    assert_eq!(status["attachments"]["accepted"], 200);

    let started = std::time::Instant::now();
    let log = h.reconcile_infra().await;
    let again = started.elapsed();
    assert_eq!(
        lines(&log),
        Vec::<String>::new(),
        "re-reconcile with nothing changed"
    );

    // One attachment's status.
    h.reconcile_attachment("c100").await;
    let started = std::time::Instant::now();
    let log = h.reconcile_attachment("c100").await;
    let one_attachment = started.elapsed();
    assert_eq!(writes(&log).len(), 3, "{:#?}", lines(&log));
    eprintln!(
        "scale: 200 attachments, {routes} routes ({body_bytes} bytes ProxyServer apply): \
         first reconcile {first:?} with 6 requests (all writes); re-reconcile {again:?} \
         with no request; one attachment {one_attachment:?}"
    );
}

/// The whole path from a Machine address change to the table loaded in a
/// real Envoy (the real filter): Infra re-plan → ProxyServer apply →
/// ProxyServer reconcile → push. The time is printed, not asserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_address_change_is_pushed_to_a_real_envoy() {
    let lo: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    let envoy = oooi_tests::Envoy::start(lo, &[oooi_tests::free_port(lo)], 1).expect("envoy");
    let mut h = Harness::new(true);
    h.mock.insert(&infra_path(), infra_json(1));
    h.mock.insert(&att_path("c1"), attachment_json("c1"));
    h.set_machine("clusters-c1", "c1-w1", &["198.51.100.101"]);
    h.reconcile_infra().await;
    h.reconcile_infra().await;
    // The Envoy stands in for the one pod: its API port, the harness token.
    let token_path = "/api/v1/namespaces/oooi/secrets/vlan200-proxy-push-token";
    let mut secret = h.mock.get(token_path).unwrap();
    secret["data"]["token"] = base64_encode(oooi_tests::PUSH_TOKEN.as_bytes());
    h.mock.insert(token_path, secret);
    h.mock.insert(
        "/api/v1/namespaces/oooi/pods/vlan200-proxy-0",
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "vlan200-proxy-0", "namespace": NS, "labels": {
                   "app.kubernetes.io/name": "oooi", "app.kubernetes.io/component": "proxy",
                   "app.kubernetes.io/instance": "vlan200"}},
               "status": {"phase": "Running", "podIP": "127.0.0.1"}}),
    );
    let proxy_path = format!("{G}/proxyservers/vlan200-proxy");
    let port = envoy.api.port();
    let reconcile_proxy = |h: &mut Harness| {
        h.sync();
        let mut p: ProxyServer = serde_json::from_value(h.mock.get(&proxy_path).unwrap()).unwrap();
        p.spec.push_port = port;
        let ctx = h.ctx.clone();
        async move {
            component::reconcile_proxy(Arc::new(p.into()), ctx)
                .await
                .unwrap()
        }
    };
    reconcile_proxy(&mut h).await;
    let st = &h.mock.get(&proxy_path).unwrap()["status"];
    assert_eq!(condition(st, "RoutesSynced")["status"], "True", "{st}");
    assert_eq!(st["routesGeneration"], 1);
    assert_eq!(st["replicaStatus"][0]["routesSynced"], true);

    let started = std::time::Instant::now();
    h.set_machine("clusters-c1", "c1-w1", &["198.51.100.105"]);
    h.reconcile_infra().await;
    reconcile_proxy(&mut h).await;
    let took = started.elapsed();
    let st = h.mock.get(&proxy_path).unwrap()["status"].clone();
    assert_eq!(st["routesGeneration"], 2, "{st}");
    let (status, body) =
        oooi_tests::http_blocking(envoy.api, "GET", "/v1/routes", &[], b"").unwrap();
    assert_eq!(status, 200);
    let loaded: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(loaded["generation"], 2);
    assert_eq!(loaded["digest"], st["routesDigest"]);
    eprintln!("machine address change → table loaded in Envoy: {took:?} (watch delivery excluded)");
}

fn scc_settings() -> Settings {
    Settings {
        openshift_scc: true,
        controller_namespace: Some("oooi-system".into()),
        ..Settings::default()
    }
}

/// The push API of the Envoy pods admits the controller's namespace only:
/// a NetworkPolicy owned by the ProxyServer, applied just before the
/// Deployment, not re-applied when unchanged.
#[tokio::test]
async fn proxy_push_api_is_reachable_from_the_controller_namespace_only() {
    let settings = Settings {
        controller_namespace: Some("oooi-system".into()),
        ..Settings::default()
    };
    let mut h = Harness::converged_with(&["c1"], settings).await;
    let np = "/apis/networking.k8s.io/v1/namespaces/oooi/networkpolicies/vlan200-proxy-push";
    let log = h.reconcile_proxy().await;
    let l = lines(&log);
    let dep = l
        .iter()
        .position(|x| x.ends_with("/deployments/vlan200-proxy"))
        .unwrap();
    assert_eq!(l[dep - 1], format!("PATCH {np}"), "{l:#?}");
    let r = apply_of(&log, np);
    assert_apply(r);
    let body = r.body.as_ref().unwrap();
    assert_eq!(
        body["metadata"]["ownerReferences"][0]["kind"],
        "ProxyServer"
    );
    assert_eq!(
        body["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/instance"],
        "vlan200"
    );
    let push = &body["spec"]["ingress"][1];
    assert_eq!(push["ports"], json!([{"protocol": "TCP", "port": 9445}]));
    assert_eq!(
        push["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "oooi-system"
    );
    // The routing ports from anywhere; readiness and metrics each from
    // their own peers; no other port.
    assert!(body["spec"]["ingress"][0].get("from").is_none());
    assert_eq!(
        body["spec"]["ingress"][2]["ports"],
        json!([{"protocol": "TCP", "port": 9446}])
    );
    assert_eq!(
        body["spec"]["ingress"][3]["ports"][0],
        json!({"protocol": "TCP", "port": 9102})
    );
    assert_eq!(
        body["spec"]["ingress"][3]["from"][0]["namespaceSelector"]["matchLabels"]["network.openshift.io/policy-group"],
        "monitoring"
    );
    let log = h.reconcile_proxy().await;
    assert!(
        !lines(&log).iter().any(|x| x.contains("networkpolicies")),
        "unchanged policy re-applied: {:#?}",
        lines(&log)
    );
}

/// `--openshift-scc`: each component's ServiceAccount is granted the one SCC
/// its pods need, by a Role and RoleBinding applied before the Deployment
/// and owned by the component; a second pass writes nothing.
#[tokio::test]
async fn openshift_scc_grants_each_component_its_scc_before_its_pods() {
    let mut h = Harness::converged_with(&["c1"], scc_settings()).await;
    let rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/oooi";

    let log = h.reconcile_dhcp().await;
    assert_eq!(
        lines(&log),
        vec![
            "PATCH /api/v1/namespaces/oooi/serviceaccounts/vlan200-dhcp".to_string(),
            format!("PATCH {rbac}/roles/vlan200-dhcp-scc"),
            format!("PATCH {rbac}/rolebindings/vlan200-dhcp-scc"),
            "PATCH /api/v1/namespaces/oooi/configmaps/vlan200-dhcp-config".to_string(),
            "PATCH /api/v1/namespaces/oooi/persistentvolumeclaims/vlan200-dhcp-leases".to_string(),
            "PATCH /apis/networking.k8s.io/v1/namespaces/oooi/networkpolicies/vlan200-dhcp-ingress"
                .to_string(),
            "PATCH /apis/apps/v1/namespaces/oooi/deployments/vlan200-dhcp".to_string(),
            format!("PATCH {G}/dhcpservers/vlan200-dhcp/status"),
        ]
    );
    let dhcp_uid = h
        .mock
        .get(&format!("{G}/dhcpservers/vlan200-dhcp"))
        .unwrap()["metadata"]["uid"]
        .clone();
    for r in &log[1..3] {
        assert_apply(r);
        let body = r.body.as_ref().unwrap();
        assert_eq!(body["metadata"]["ownerReferences"][0]["kind"], "DHCPServer");
        assert_eq!(body["metadata"]["ownerReferences"][0]["uid"], dhcp_uid);
        assert_eq!(
            body["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "oooi-controller"
        );
    }
    let role = log[1].body.as_ref().unwrap();
    assert_eq!(role["kind"], "Role");
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": ["security.openshift.io"],
                "resources": ["securitycontextconstraints"],
                "resourceNames": ["restricted-v2"], "verbs": ["use"]}])
    );
    let binding = log[2].body.as_ref().unwrap();
    assert_eq!(binding["kind"], "RoleBinding");
    assert_eq!(
        binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "vlan200-dhcp-scc"})
    );
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "vlan200-dhcp", "namespace": "oooi"}])
    );
    // Settled: the grant is not re-applied (the status follows the
    // Deployment's first observation, then nothing).
    assert_eq!(
        lines(&h.reconcile_dhcp().await),
        vec![format!("PATCH {G}/dhcpservers/vlan200-dhcp/status")]
    );
    assert!(h.reconcile_dhcp().await.is_empty(), "settled");

    // On OpenShift the pods leave UID and fsGroup to restricted-v2.
    let dhcp_pod = &apply_of(
        &log,
        "/apis/apps/v1/namespaces/oooi/deployments/vlan200-dhcp",
    )
    .body
    .as_ref()
    .unwrap()["spec"]["template"]["spec"];
    assert!(dhcp_pod["securityContext"].get("fsGroup").is_none());
    assert!(
        dhcp_pod["containers"][0]["securityContext"]
            .get("runAsUser")
            .is_none()
    );
    assert_eq!(
        dhcp_pod["containers"][0]["securityContext"]["runAsNonRoot"],
        true
    );

    // DNS and Envoy bind ports below 1024 through the pod sysctl: no capability.
    let log = h.reconcile_dns().await;
    let role = apply_of(&log, &format!("{rbac}/roles/vlan200-dns-scc"));
    assert_eq!(
        role.body.as_ref().unwrap()["rules"][0]["resourceNames"],
        json!(["restricted-v2"])
    );
    apply_of(&log, &format!("{rbac}/rolebindings/vlan200-dns-scc"));
    let log = h.reconcile_proxy().await;
    assert_eq!(
        lines(&log)[..4],
        [
            "PATCH /api/v1/namespaces/oooi/serviceaccounts/vlan200-proxy".to_string(),
            format!("PATCH {rbac}/roles/vlan200-proxy-scc"),
            format!("PATCH {rbac}/rolebindings/vlan200-proxy-scc"),
            "PATCH /api/v1/namespaces/oooi/secrets/vlan200-proxy-envoy".to_string(),
        ]
    );
    assert_eq!(
        log[1].body.as_ref().unwrap()["rules"][0]["resourceNames"],
        json!(["restricted-v2"])
    );
}

/// Without the flag no Role or RoleBinding is ever sent (and the rules of
/// `rbac` without `--openshift-scc`, checked on every request, grant none).
#[tokio::test]
async fn without_openshift_scc_no_rbac_object_is_written() {
    let mut h = Harness::converged(&["c1"]).await;
    let mut log = h.reconcile_dhcp().await;
    log.extend(h.reconcile_dns().await);
    log.extend(h.reconcile_proxy().await);
    assert!(
        !log.iter()
            .any(|r| r.path().contains("rbac.authorization.k8s.io")),
        "{:#?}",
        lines(&log)
    );
}

/// Everything the controller created is gone after the user deletes the
/// Infra and its attachments: cross-namespace objects and the finalizers by
/// the controller, the rest by garbage collection through owner references
/// (run here as the API server's collector would). Events are left out: the
/// API server expires them.
#[tokio::test]
async fn deleting_everything_leaves_no_object_the_controller_created() {
    let mut h = Harness::with_settings(false, scc_settings());
    h.mock.insert(&infra_path(), infra_json(1));
    h.mock.insert(&att_path("c1"), attachment_json("c1"));
    h.mock.insert(&att_path("c2"), attachment_json("c2"));
    let mut all = Vec::new();
    for _ in 0..2 {
        // Finalizers first, then the objects.
        all.extend(h.reconcile_infra().await);
        all.extend(h.reconcile_attachment("c1").await);
        all.extend(h.reconcile_attachment("c2").await);
    }
    for _ in 0..2 {
        all.extend(h.reconcile_dhcp().await);
        all.extend(h.reconcile_dns().await);
        all.extend(h.reconcile_proxy().await);
    }
    let made: Vec<String> = created(&all)
        .into_iter()
        .filter(|p| !p.contains("/events/"))
        .collect();
    // Every kind the controller writes is in the run.
    for kind in [
        "/secrets/vlan200-proxy-push-token",
        "/dhcpservers/",
        "/dnsservers/",
        "/proxyservers/",
        "/serviceaccounts/",
        "/configmaps/",
        "/secrets/vlan200-proxy-envoy",
        "/persistentvolumeclaims/",
        "/services/",
        "/deployments/",
        "/roles/",
        "/rolebindings/",
        "/namespaces/clusters-c1/networkpolicies/",
        "/namespaces/clusters-c2/networkpolicies/",
        "/namespaces/oooi/networkpolicies/vlan200-proxy-push",
        "/namespaces/oooi/networkpolicies/vlan200-dns-ingress",
        "/namespaces/oooi/networkpolicies/vlan200-dhcp-ingress",
    ] {
        assert!(made.iter().any(|p| p.contains(kind)), "{kind}: {made:#?}");
    }
    for p in &made {
        assert!(h.mock.get(p).is_some(), "{p} exists before deletion");
    }

    // The user deletes one attachment, then the Infra, then the other.
    let delete = |h: &mut Harness, path: &str| {
        let mut o = h.mock.get(path).unwrap();
        o["metadata"]["deletionTimestamp"] = json!("2026-12-03T08:05:00Z");
        h.mock.insert(path, o);
    };
    delete(&mut h, &att_path("c1"));
    h.reconcile_attachment("c1").await;
    delete(&mut h, &infra_path());
    h.reconcile_infra().await;
    delete(&mut h, &att_path("c2"));
    h.reconcile_attachment("c2").await;
    for p in [infra_path(), att_path("c1"), att_path("c2")] {
        assert!(h.mock.get(&p).is_none(), "{p}: finalizer removed");
    }
    // Before the collector runs, whatever is left is owned by something gone.
    let uids: Vec<Value> = h
        .mock
        .paths("/")
        .iter()
        .filter_map(|p| h.mock.get(p))
        .map(|o| o["metadata"]["uid"].clone())
        .collect();
    for p in made.iter().filter(|p| h.mock.get(p).is_some()) {
        let o = h.mock.get(p).unwrap();
        let owners = o["metadata"]["ownerReferences"].as_array().cloned();
        assert!(
            owners.is_some_and(|o| !o.is_empty()),
            "{p} is left with no owner to collect it"
        );
        assert!(
            !p.contains("/namespaces/clusters-"),
            "{p}: no owner reference crosses namespaces"
        );
    }
    assert!(!uids.is_empty());
    let collected = h.mock.collect_garbage();
    assert!(!collected.is_empty());
    let leaked: Vec<&String> = made.iter().filter(|p| h.mock.get(p).is_some()).collect();
    assert!(leaked.is_empty(), "leaked: {leaked:#?}");
    let left: Vec<String> = h
        .mock
        .paths("/")
        .into_iter()
        .filter(|p| !p.contains("/events/"))
        .collect();
    assert!(left.is_empty(), "left in the cluster: {left:#?}");
}

/// The Infra `vlan200` asking for a DHCP pair.
fn pair_infra_json(generation: i64) -> Value {
    let mut infra = infra_json(generation);
    let dhcp = &mut infra["spec"]["infraComponents"]["dhcp"];
    dhcp.as_object_mut().unwrap().remove("serverIP");
    dhcp["serverIPs"] = json!(["198.51.100.2", "198.51.100.5"]);
    infra
}

/// Two addresses: the pair's token Secret is made once and kept, both
/// DHCPServers are applied and reconcile to their children (the primary
/// with the pair's budget), going back to one address deletes the second
/// server, and deleting the Infra leaves nothing of the pair behind.
#[tokio::test]
async fn a_dhcp_pair_gets_one_token_two_servers_and_their_children_and_leaves_nothing() {
    let mut h = Harness::new(false);
    h.mock.insert(&infra_path(), pair_infra_json(1));
    h.reconcile_infra().await; // finalizer
    let log = h.reconcile_infra().await;
    assert_eq!(
        lines(&log),
        vec![
            "POST /api/v1/namespaces/oooi/secrets".to_string(),
            "POST /api/v1/namespaces/oooi/secrets".to_string(),
            "POST /api/v1/namespaces/oooi/secrets".to_string(),
            format!("PATCH {G}/dhcpservers/vlan200-dhcp"),
            format!("PATCH {G}/dhcpservers/vlan200-dhcp-2"),
            format!("PATCH {G}/dnsservers/vlan200-dns"),
            format!("PATCH {G}/proxyservers/vlan200-proxy"),
            format!("PATCH {G}/infras/vlan200/status"),
            "POST /apis/events.k8s.io/v1/namespaces/oooi/events".to_string(),
        ]
    );
    let secret = log[1].body.as_ref().unwrap();
    assert_eq!(secret["metadata"]["name"], "vlan200-dhcp-pair-token");
    assert_eq!(owner_uid(secret), "uid-infra");
    assert_eq!(
        secret["metadata"]["labels"]["app.kubernetes.io/component"],
        "dhcp"
    );
    let token_path = "/api/v1/namespaces/oooi/secrets/vlan200-dhcp-pair-token";
    let token = reconcile_support::base64_decode(&h.mock.get(token_path).unwrap()["data"]["token"]);
    assert_eq!(token.len(), 64, "32 random bytes in hex");
    for (r, role, other) in [
        (&log[3], "primary", "vlan200-dhcp-2-peer"),
        (&log[4], "secondary", "vlan200-dhcp-peer"),
    ] {
        assert_apply(r);
        let spec = &r.body.as_ref().unwrap()["spec"];
        assert_eq!(spec["pairTokenSecret"]["name"], "vlan200-dhcp-pair-token");
        // One inventory token for both servers of the pair.
        assert_eq!(
            spec["inventoryTokenSecret"]["name"],
            "vlan200-dhcp-inventory-token"
        );
        assert_eq!(spec["config"]["peer"]["role"], role);
        assert_eq!(
            spec["config"]["peer"]["api"],
            format!("{other}.oooi.svc:9068")
        );
    }
    // Kept across reconciles: nothing more is written, the token is the same.
    assert!(h.reconcile_infra().await.is_empty());
    assert_eq!(
        reconcile_support::base64_decode(&h.mock.get(token_path).unwrap()["data"]["token"]),
        token
    );

    let log = h.reconcile_dhcp().await;
    assert_eq!(
        lines(&log),
        vec![
            "PATCH /api/v1/namespaces/oooi/serviceaccounts/vlan200-dhcp".to_string(),
            "PATCH /api/v1/namespaces/oooi/configmaps/vlan200-dhcp-config".to_string(),
            "PATCH /api/v1/namespaces/oooi/persistentvolumeclaims/vlan200-dhcp-leases".to_string(),
            "PATCH /api/v1/namespaces/oooi/services/vlan200-dhcp-peer".to_string(),
            "PATCH /apis/policy/v1/namespaces/oooi/poddisruptionbudgets/vlan200-dhcp-pair"
                .to_string(),
            "PATCH /apis/apps/v1/namespaces/oooi/deployments/vlan200-dhcp".to_string(),
            format!("PATCH {G}/dhcpservers/vlan200-dhcp/status"),
        ]
    );
    let path = format!("{G}/dhcpservers/vlan200-dhcp-2");
    let log = h.run(&path, component::reconcile_dhcp).await;
    assert_eq!(
        lines(&log),
        vec![
            "PATCH /api/v1/namespaces/oooi/serviceaccounts/vlan200-dhcp-2".to_string(),
            "PATCH /api/v1/namespaces/oooi/configmaps/vlan200-dhcp-2-config".to_string(),
            "PATCH /api/v1/namespaces/oooi/persistentvolumeclaims/vlan200-dhcp-2-leases"
                .to_string(),
            "PATCH /api/v1/namespaces/oooi/services/vlan200-dhcp-2-peer".to_string(),
            "PATCH /apis/apps/v1/namespaces/oooi/deployments/vlan200-dhcp-2".to_string(),
            format!("PATCH {G}/dhcpservers/vlan200-dhcp-2/status"),
        ]
    );
    let dep = log[4].body.as_ref().unwrap();
    assert!(
        dep["spec"]["template"]["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"]
            .as_str()
            .unwrap()
            .contains("198.51.100.5/24"),
        "{dep}"
    );
    // The second server's PDB-free children settle like the first's.
    let log = h.run(&path, component::reconcile_dhcp).await;
    assert_eq!(lines(&log), vec![format!("PATCH {path}/status")]);
    assert!(h.run(&path, component::reconcile_dhcp).await.is_empty());
    // The Infra's DHCP status covers both Deployments.
    let log = h.reconcile_infra().await;
    let status = &log[0].body.as_ref().unwrap()["status"];
    assert_eq!(status["components"]["dhcp"]["ready"], false);
    let message = status["components"]["dhcp"]["message"].as_str().unwrap();
    assert!(
        message.contains("vlan200-dhcp:") && message.contains("vlan200-dhcp-2:"),
        "{message}"
    );

    // Back to one address: the second server goes (and with it, through
    // its owner references, its children); the primary runs alone.
    let mut one = pair_infra_json(2);
    one["spec"]["infraComponents"]["dhcp"]["serverIPs"] = json!(["198.51.100.2"]);
    one["metadata"]["finalizers"] = json!([reconcile_support::FINALIZER]);
    h.mock.insert(&infra_path(), one);
    let log = h.reconcile_infra().await;
    let l = lines(&log);
    assert!(
        l.contains(&format!("PATCH {G}/dhcpservers/vlan200-dhcp")),
        "{l:#?}"
    );
    assert!(
        l.contains(&format!("DELETE {G}/dhcpservers/vlan200-dhcp-2")),
        "{l:#?}"
    );
    let primary = apply_of(&log, &format!("{G}/dhcpservers/vlan200-dhcp"));
    assert!(primary.body.as_ref().unwrap()["spec"]["config"]["peer"].is_null());
    h.mock.collect_garbage();
    for gone in [
        "/apis/apps/v1/namespaces/oooi/deployments/vlan200-dhcp-2",
        "/api/v1/namespaces/oooi/persistentvolumeclaims/vlan200-dhcp-2-leases",
        "/api/v1/namespaces/oooi/services/vlan200-dhcp-2-peer",
    ] {
        assert!(h.mock.get(gone).is_none(), "{gone} collected");
    }
    // One server has no peer Service and no budget: the pair's go.
    let log = h.reconcile_dhcp().await;
    let l = lines(&log);
    let budget = "/apis/policy/v1/namespaces/oooi/poddisruptionbudgets/vlan200-dhcp-pair";
    let peer = "/api/v1/namespaces/oooi/services/vlan200-dhcp-peer";
    assert!(l.contains(&format!("DELETE {budget}")), "{l:#?}");
    assert!(l.contains(&format!("DELETE {peer}")), "{l:#?}");
    assert!(h.mock.get(peer).is_none());
    assert!(
        !l.iter()
            .any(|r| r.starts_with("PATCH") && r.contains("poddisruptionbudgets")),
        "{l:#?}"
    );
    assert!(h.mock.get(budget).is_none());

    // Deleting the Infra: everything in its namespace is owned and goes
    // with it, the pair's token and budget included.
    let mut infra = h.mock.get(&infra_path()).unwrap();
    infra["metadata"]["deletionTimestamp"] = json!("2026-12-03T08:05:00Z");
    h.mock.insert(&infra_path(), infra);
    h.reconcile_infra().await;
    assert!(h.mock.get(&infra_path()).is_none(), "finalizer removed");
    h.mock.collect_garbage();
    let left: Vec<String> = h
        .mock
        .paths("/")
        .into_iter()
        .filter(|p| !p.contains("/events/"))
        .collect();
    assert!(left.is_empty(), "left in the cluster: {left:#?}");
}

/// The DNS and DHCP pods get one NetworkPolicy each, owned by their
/// server, applied just before their Deployment and not again while
/// unchanged: the DNS pod view admits anyone, the metrics ports the
/// scrapers, a pair's API the other server alone and the lease inventory
/// the controller alone. A server that goes takes its policy with it
/// (garbage collection through the owner reference), and deleting the
/// Infra leaves no policy behind.
#[tokio::test]
async fn dns_and_dhcp_pods_get_their_policies_with_their_servers_and_lose_them_with_them() {
    let settings = Settings {
        controller_namespace: Some("oooi-system".into()),
        ..Settings::default()
    };
    let mut h = Harness::with_settings(false, settings);
    h.mock.insert(&infra_path(), pair_infra_json(1));
    h.reconcile_infra().await; // finalizer
    h.reconcile_infra().await; // derived objects
    let nps = "/apis/networking.k8s.io/v1/namespaces/oooi/networkpolicies";
    let uid = |h: &Harness, path: &str| h.mock.get(path).unwrap()["metadata"]["uid"].clone();

    let log = h.reconcile_dns().await;
    let l = lines(&log);
    let np = format!("{nps}/vlan200-dns-ingress");
    let dep = l
        .iter()
        .position(|x| x.ends_with("/deployments/vlan200-dns"))
        .unwrap();
    assert_eq!(l[dep - 1], format!("PATCH {np}"), "{l:#?}");
    let r = apply_of(&log, &np);
    assert_apply(r);
    let body = r.body.as_ref().unwrap();
    assert_eq!(body["metadata"]["ownerReferences"][0]["kind"], "DNSServer");
    assert_eq!(
        body["metadata"]["ownerReferences"][0]["uid"],
        uid(&h, &format!("{G}/dnsservers/vlan200-dns"))
    );
    assert_eq!(
        body["spec"]["podSelector"]["matchLabels"]["hostedcluster.densityops.com/server"],
        "vlan200-dns"
    );
    let ingress = body["spec"]["ingress"].as_array().unwrap();
    assert_eq!(ingress.len(), 2, "{body}");
    assert!(ingress[0].get("from").is_none(), "the pod view: anyone");
    assert_eq!(
        ingress[0]["ports"],
        json!([{"protocol": "UDP", "port": 5353}, {"protocol": "TCP", "port": 5353}])
    );
    assert_eq!(
        ingress[1]["ports"],
        json!([{"protocol": "TCP", "port": 9153}])
    );
    assert_eq!(
        ingress[1]["from"][0]["namespaceSelector"]["matchLabels"]["network.openshift.io/policy-group"],
        "monitoring"
    );
    // Settled: the status follows the Deployment, then nothing.
    let log = h.reconcile_dns().await;
    assert!(
        !lines(&log).iter().any(|x| x.contains("networkpolicies")),
        "unchanged policy re-applied: {:#?}",
        lines(&log)
    );

    for (server, other) in [
        ("vlan200-dhcp", "vlan200-dhcp-2"),
        ("vlan200-dhcp-2", "vlan200-dhcp"),
    ] {
        let path = format!("{G}/dhcpservers/{server}");
        let log = h.run(&path, component::reconcile_dhcp).await;
        let l = lines(&log);
        let np = format!("{nps}/{server}-ingress");
        let dep = l
            .iter()
            .position(|x| x.ends_with(&format!("/deployments/{server}")))
            .unwrap();
        assert_eq!(l[dep - 1], format!("PATCH {np}"), "{l:#?}");
        let body = apply_of(&log, &np).body.clone().unwrap();
        assert_eq!(body["metadata"]["ownerReferences"][0]["kind"], "DHCPServer");
        assert_eq!(
            body["metadata"]["ownerReferences"][0]["uid"],
            uid(&h, &path)
        );
        assert_eq!(
            body["spec"]["podSelector"]["matchLabels"]["hostedcluster.densityops.com/server"],
            server
        );
        let ingress = body["spec"]["ingress"].as_array().unwrap();
        assert_eq!(ingress.len(), 3, "{body}");
        assert_eq!(
            ingress[0]["ports"],
            json!([{"protocol": "TCP", "port": 9067}])
        );
        assert_eq!(
            ingress[1]["ports"],
            json!([{"protocol": "TCP", "port": 9068}])
        );
        assert_eq!(
            ingress[1]["from"],
            json!([{"podSelector": {"matchLabels": {
                "app.kubernetes.io/name": "oooi",
                "app.kubernetes.io/component": "dhcp",
                "hostedcluster.densityops.com/server": other}}}])
        );
        assert_eq!(
            ingress[2]["ports"],
            json!([{"protocol": "TCP", "port": 9069}])
        );
        assert_eq!(
            ingress[2]["from"],
            json!([{
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "oooi-system"}},
                "podSelector": {"matchLabels": {"app.kubernetes.io/component": "controller"}}}])
        );
        let log = h.run(&path, component::reconcile_dhcp).await;
        assert!(
            !lines(&log).iter().any(|x| x.contains("networkpolicies")),
            "{:#?}",
            lines(&log)
        );
    }

    // Back to one DHCP address: the second server goes, and its policy with
    // it; the first server's policy loses the pair API.
    let mut one = pair_infra_json(2);
    one["spec"]["infraComponents"]["dhcp"]["serverIPs"] = json!(["198.51.100.2"]);
    one["metadata"]["finalizers"] = json!([reconcile_support::FINALIZER]);
    h.mock.insert(&infra_path(), one);
    h.reconcile_infra().await;
    h.mock.collect_garbage();
    assert!(
        h.mock
            .get(&format!("{nps}/vlan200-dhcp-2-ingress"))
            .is_none()
    );
    let log = h.reconcile_dhcp().await;
    let body = apply_of(&log, &format!("{nps}/vlan200-dhcp-ingress"))
        .body
        .clone()
        .unwrap();
    let ports: Vec<&Value> = body["spec"]["ingress"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["ports"][0]["port"])
        .collect();
    assert_eq!(ports, [&json!(9067), &json!(9069)], "{body}");
    assert_eq!(
        body["spec"]["podSelector"]["matchLabels"],
        json!({"app.kubernetes.io/name": "oooi", "app.kubernetes.io/component": "dhcp",
               "app.kubernetes.io/instance": "vlan200"}),
        "a single server's pod carries no server label"
    );

    // Deleting the Infra: its servers go, and their policies with them.
    for p in [
        format!("{nps}/vlan200-dns-ingress"),
        format!("{nps}/vlan200-dhcp-ingress"),
    ] {
        assert!(h.mock.get(&p).is_some(), "{p}");
    }
    let mut infra = h.mock.get(&infra_path()).unwrap();
    infra["metadata"]["deletionTimestamp"] = json!("2026-12-03T08:05:00Z");
    h.mock.insert(&infra_path(), infra);
    h.reconcile_infra().await;
    assert!(h.mock.get(&infra_path()).is_none(), "finalizer removed");
    h.mock.collect_garbage();
    let left = h.mock.paths(nps);
    assert!(left.is_empty(), "policies left: {left:#?}");
}

const CUDNS: &str = "/apis/k8s.ovn.org/v1/clusteruserdefinednetworks";

/// The Infra on a localnet ClusterUserDefinedNetwork the controller owns,
/// VLAN `vlan_id`.
fn cudn_infra(generation: i64, vlan_id: u16) -> Value {
    infra_at(generation)
        .cudn(json!({"name": "vlan200", "localnet": {
            "physicalNetworkName": "physnet", "vlanId": vlan_id, "mtu": 1400
        }}))
        .json()
}

#[tokio::test]
async fn a_managed_cluster_user_defined_network_is_created_kept_updated_and_deleted() {
    let mut h = Harness::new(false);
    h.mock.insert(&infra_path(), cudn_infra(1, 200));
    h.reconcile_infra().await; // finalizer

    // First reconcile with the finalizer: the network is created.
    let log = h.reconcile_infra().await;
    assert_eq!(
        lines(&log),
        vec![
            "POST /api/v1/namespaces/oooi/secrets".to_string(),
            "POST /api/v1/namespaces/oooi/secrets".to_string(),
            format!("PATCH {G}/dhcpservers/vlan200-dhcp"),
            format!("PATCH {G}/dnsservers/vlan200-dns"),
            format!("PATCH {G}/proxyservers/vlan200-proxy"),
            format!("GET {CUDNS}"),
            format!("POST {CUDNS}"),
            format!("PATCH {G}/infras/vlan200/status"),
            "POST /apis/events.k8s.io/v1/namespaces/oooi/events".to_string(),
        ]
    );
    assert_eq!(
        log[5].query("labelSelector").as_deref(),
        Some(
            "hostedcluster.densityops.com/infra=vlan200,hostedcluster.densityops.com/infra-namespace=oooi"
        )
    );
    assert_eq!(
        log[6].query("fieldManager").as_deref(),
        Some("oooi-controller")
    );
    let cudn = log[6].body.as_ref().unwrap();
    assert_eq!(cudn["apiVersion"], "k8s.ovn.org/v1");
    assert_eq!(cudn["kind"], "ClusterUserDefinedNetwork");
    assert_eq!(cudn["metadata"]["name"], "vlan200");
    let labels = &cudn["metadata"]["labels"];
    assert_eq!(labels["hostedcluster.densityops.com/infra"], "vlan200");
    assert_eq!(
        labels["hostedcluster.densityops.com/infra-namespace"],
        "oooi"
    );
    assert_eq!(
        cudn["spec"],
        json!({
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "oooi"}},
            "network": {"topology": "Localnet", "localnet": {
                "role": "Secondary", "physicalNetworkName": "physnet",
                "ipam": {"mode": "Disabled"}, "mtu": 1400,
                "vlan": {"mode": "Access", "access": {"id": 200}}
            }}
        })
    );
    // The components attach to the NAD OVN-Kubernetes names after the
    // network, in the Infra's namespace, with their static addresses.
    let dns = log[2].body.as_ref().unwrap();
    assert_eq!(
        dns["spec"]["vlan"]["networkAttachmentDefinition"],
        "vlan200"
    );
    assert_eq!(dns["spec"]["vlan"]["networkAttachmentNamespace"], "oooi");
    assert!(h.mock.get(&format!("{CUDNS}/vlan200")).is_some());

    // Unchanged: the list, and no write.
    let log = h.reconcile_infra().await;
    assert_eq!(lines(&log), vec![format!("GET {CUDNS}")]);

    // Another VLAN id: applied over.
    let mut infra = cudn_infra(2, 300);
    infra["metadata"]["finalizers"] = json!(["hostedcluster.densityops.com/cleanup"]);
    infra["status"] = h.mock.get(&infra_path()).unwrap()["status"].clone();
    h.mock.insert(&infra_path(), infra);
    let log = h.reconcile_infra().await;
    assert_eq!(
        lines(&log),
        vec![
            format!("PATCH {G}/dhcpservers/vlan200-dhcp"),
            format!("GET {CUDNS}"),
            format!("PATCH {CUDNS}/vlan200"),
            format!("PATCH {G}/infras/vlan200/status"),
        ]
    );
    assert_apply(&log[2]);
    assert_eq!(
        log[2].body.as_ref().unwrap()["spec"]["network"]["localnet"]["vlan"]["access"]["id"],
        300
    );
    assert_eq!(
        lines(&h.reconcile_infra().await),
        vec![format!("GET {CUDNS}")]
    );

    // Deletion: the cleanup deletes the network, then the finalizer goes.
    let mut infra = h.mock.get(&infra_path()).unwrap();
    infra["metadata"]["deletionTimestamp"] = json!("2026-12-03T08:02:00Z");
    h.mock.insert(&infra_path(), infra);
    let log = h.reconcile_infra().await;
    assert_eq!(
        lines(&log),
        vec![
            format!("GET {CUDNS}"),
            format!("DELETE {CUDNS}/vlan200"),
            "POST /apis/events.k8s.io/v1/namespaces/oooi/events".to_string(),
            format!("PATCH {}", infra_path()),
        ]
    );
    assert!(h.mock.get(&format!("{CUDNS}/vlan200")).is_none());
    assert!(h.mock.get(&infra_path()).is_none(), "Infra deleted");
}

#[tokio::test]
async fn a_network_of_that_name_without_the_infra_labels_is_never_written() {
    let mut h = Harness::new(false);
    let foreign = json!({
        "apiVersion": "k8s.ovn.org/v1", "kind": "ClusterUserDefinedNetwork",
        "metadata": {"name": "vlan200"},
        "spec": {"namespaceSelector": {}, "network": {"topology": "Layer2"}}
    });
    h.mock.insert(&format!("{CUDNS}/vlan200"), foreign.clone());
    h.mock.insert(&infra_path(), cudn_infra(1, 200));
    h.reconcile_infra().await; // finalizer
    let log = h.reconcile_infra().await;
    let cudn_requests: Vec<String> = lines(&log)
        .into_iter()
        .filter(|l| l.contains("clusteruserdefinednetworks"))
        .collect();
    assert_eq!(
        cudn_requests,
        vec![format!("GET {CUDNS}"), format!("POST {CUDNS}")],
        "created, never applied over"
    );
    let events: Vec<&Value> = log
        .iter()
        .filter(|r| r.path().ends_with("/events"))
        .filter_map(|r| r.body.as_ref())
        .collect();
    assert!(
        events.iter().any(|e| e["reason"] == "NetworkNotOwned"),
        "{events:#?}"
    );
    let live = h.mock.get(&format!("{CUDNS}/vlan200")).unwrap();
    assert_eq!(live["spec"], foreign["spec"]);

    // Deleting the Infra leaves it too.
    let mut infra = h.mock.get(&infra_path()).unwrap();
    infra["metadata"]["deletionTimestamp"] = json!("2026-12-03T08:02:00Z");
    h.mock.insert(&infra_path(), infra);
    let log = h.reconcile_infra().await;
    assert!(
        !lines(&log).iter().any(|l| l.starts_with("DELETE")),
        "{log:#?}"
    );
    assert!(h.mock.get(&format!("{CUDNS}/vlan200")).is_some());
}

fn replicas_infra_json(generation: i64, proxy_image: &str) -> Value {
    let mut infra = infra_json(generation);
    let proxy = &mut infra["spec"]["infraComponents"]["proxy"];
    proxy.as_object_mut().unwrap().remove("serverIP");
    proxy["serverIPs"] = json!(["198.51.100.4", "198.51.100.5", "198.51.100.6"]);
    proxy["image"] = json!(proxy_image);
    infra
}

const PROXIES: [&str; 3] = ["vlan200-proxy", "vlan200-proxy-2", "vlan200-proxy-3"];

fn deployment_path(name: &str) -> String {
    format!("/apis/apps/v1/namespaces/oooi/deployments/{name}")
}

impl Harness {
    /// Reconciles the ProxyServer `name`; then, as the pusher would leave
    /// it, its status says whether its pod holds the current table: the
    /// mock has no Envoy pods to push to, so the reconcile itself reports
    /// `NoReplicas` (the push is covered against a real Envoy in
    /// `machine_address_change_is_pushed_to_a_real_envoy`).
    async fn reconcile_proxy_named(&mut self, name: &str) -> Vec<Recorded> {
        let path = format!("{G}/proxyservers/{name}");
        let log = self.run(&path, component::reconcile_proxy).await;
        let serving = self
            .mock
            .get(&deployment_path(name))
            .is_some_and(|d| d["status"]["readyReplicas"] == 1);
        self.set_in_sync(name, serving);
        log
    }

    /// The Deployment `name` as its controller reports it: ready on its
    /// current template, or restarting (new spec not rolled out yet).
    fn set_ready(&self, name: &str, ready: bool) {
        self.mock.update(&deployment_path(name), |d| {
            let g = d["metadata"]["generation"].as_i64().unwrap();
            let n = i64::from(ready);
            d["status"] = json!({"observedGeneration": g, "replicas": 1,
                "readyReplicas": n, "updatedReplicas": n, "availableReplicas": n});
        });
    }

    /// The ProxyServer `name`'s status as the pusher leaves it when its pod
    /// holds the current table, or not.
    fn set_in_sync(&self, name: &str, synced: bool) {
        self.mock.update(&format!("{G}/proxyservers/{name}"), |p| {
            let g = p["metadata"]["generation"].clone();
            p["status"] = json!({"observedGeneration": g, "conditions": [{
                "type": "RoutesSynced", "status": if synced { "True" } else { "False" },
                "reason": "AllReplicasSynced", "message": "",
                "lastTransitionTime": "2026-12-03T08:00:00Z"}]});
        });
    }

    fn image_of(&self, name: &str) -> String {
        let d = self.mock.get(&deployment_path(name)).unwrap();
        d["spec"]["template"]["spec"]["containers"][0]["image"]
            .as_str()
            .unwrap()
            .to_string()
    }
}

/// Three proxy replicas take a new image one at a time, in index order,
/// whatever order their reconcilers run in: each waits until every other
/// replica is ready and holds the current table, and a later one until the
/// earlier ones run the new template. Never two replicas down at once.
#[tokio::test]
async fn proxy_replicas_roll_a_new_image_one_at_a_time_in_order() {
    let mut h = Harness::new(false);
    h.mock
        .insert(&infra_path(), replicas_infra_json(1, "envoy:old"));
    h.reconcile_infra().await; // finalizer
    let log = h.reconcile_infra().await;
    let applied: Vec<String> = writes(&log).iter().map(|r| r.line()).collect();
    for p in PROXIES {
        assert!(
            applied.contains(&format!("PATCH {G}/proxyservers/{p}")),
            "{applied:?}"
        );
    }
    // First rollout: every Deployment is created at once (nothing serves yet).
    for p in PROXIES {
        let log = h.reconcile_proxy_named(p).await;
        assert!(
            lines(&log).contains(&format!("PATCH {}", deployment_path(p))),
            "{p}: {:?}",
            lines(&log)
        );
        let d = h.mock.get(&deployment_path(p)).unwrap();
        assert!(
            d["metadata"]["annotations"]["hostedcluster.densityops.com/template-hash"].is_string()
        );
    }
    for p in PROXIES {
        h.set_ready(p, true);
        h.set_in_sync(p, true);
    }
    // A new image: the Infra rewrites the three ProxyServers.
    h.mock.insert(
        &infra_path(),
        finalized_infra(replicas_infra_json(2, "envoy:new")),
    );
    h.reconcile_infra().await;
    for p in PROXIES {
        h.set_in_sync(p, true); // their tables did not change
    }
    let mut order = Vec::new();
    for _round in 0..PROXIES.len() {
        // Every reconciler runs, last replica first: exactly one rolls.
        let mut rolled = Vec::new();
        for p in PROXIES.iter().rev() {
            let log = h.reconcile_proxy_named(p).await;
            if lines(&log).contains(&format!("PATCH {}", deployment_path(p))) {
                rolled.push(p.to_string());
            } else if h.image_of(p) == "envoy:old" {
                let status = &writes(&log)
                    .iter()
                    .find(|r| r.path().ends_with("/status"))
                    .map(|r| r.body.clone().unwrap())
                    .unwrap_or_else(|| h.mock.get(&format!("{G}/proxyservers/{p}")).unwrap())["status"];
                if let Some(c) = status["conditions"]
                    .as_array()
                    .and_then(|c| c.iter().find(|c| c["type"] == "Progressing"))
                {
                    assert_eq!(c["reason"], "WaitingForReplicas", "{p}: {c}");
                }
            }
        }
        assert_eq!(rolled.len(), 1, "one replica at a time: {rolled:?}");
        let p = rolled[0].clone();
        assert_eq!(h.image_of(&p), "envoy:new");
        // It restarts: not ready and without its table. Nobody else moves.
        h.set_ready(&p, false);
        h.set_in_sync(&p, false);
        for q in PROXIES {
            let log = h.reconcile_proxy_named(q).await;
            if q != p {
                assert!(
                    !lines(&log).contains(&format!("PATCH {}", deployment_path(q))),
                    "{q} rolled while {p} was down"
                );
            }
        }
        let down: Vec<&str> = PROXIES
            .iter()
            .copied()
            .filter(|q| {
                let d = h.mock.get(&deployment_path(q)).unwrap();
                d["status"]["readyReplicas"] != 1
            })
            .collect();
        assert_eq!(down, [p.as_str()], "never two replicas down at once");
        // Ready again and the push reached it.
        h.set_ready(&p, true);
        h.set_in_sync(&p, true);
        order.push(p);
    }
    assert_eq!(order, PROXIES);
    for p in PROXIES {
        assert_eq!(h.image_of(p), "envoy:new");
        let log = h.reconcile_proxy_named(p).await;
        assert!(!lines(&log).contains(&format!("PATCH {}", deployment_path(p))));
    }
}

/// A replica that is down anyway takes its update at once: replacing it
/// costs no availability, and a broken template on every replica stays
/// fixable.
#[tokio::test]
async fn a_replica_that_is_not_ready_takes_its_update_at_once() {
    let mut h = Harness::new(false);
    h.mock
        .insert(&infra_path(), replicas_infra_json(1, "envoy:broken"));
    h.reconcile_infra().await;
    h.reconcile_infra().await;
    for p in PROXIES {
        h.reconcile_proxy_named(p).await;
        h.set_ready(p, false);
        h.set_in_sync(p, false);
    }
    h.mock.insert(
        &infra_path(),
        finalized_infra(replicas_infra_json(2, "envoy:fixed")),
    );
    h.reconcile_infra().await;
    for p in PROXIES {
        let log = h.reconcile_proxy_named(p).await;
        assert!(
            lines(&log).contains(&format!("PATCH {}", deployment_path(p))),
            "{p}: {:?}",
            lines(&log)
        );
        assert_eq!(h.image_of(p), "envoy:fixed");
    }
}

fn finalized_infra(infra: Value) -> Value {
    reconcile_support::finalized(infra)
}

/// Servers with address takeover get their agent and nothing in the API
/// for it: no Role, no RoleBinding, no Lease request, from their first
/// reconcile to the Infra's deletion. A Lease an agent of an earlier
/// version left is not the controller's (docs/installation.md, Upgrades).
#[tokio::test]
async fn address_takeover_sends_no_rbac_or_lease_request_through_deletion() {
    let mut h = Harness::new(true);
    let mut infra = infra_json(1);
    infra["spec"]["infraComponents"]["dns"] =
        json!({"serverIPs": ["198.51.100.3", "198.51.100.6"], "image": "dns:1"});
    h.mock.insert(&infra_path(), infra);
    let mut log = h.reconcile_infra().await;
    log.extend(h.reconcile_infra().await);
    let leases = "/apis/coordination.k8s.io/v1/namespaces/oooi/leases";
    let old = format!("{leases}/vlan200-dns-198-51-100-3");
    h.mock.insert(
        &old,
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": "vlan200-dns-198-51-100-3", "namespace": "oooi"},
               "spec": {"holderIdentity": "vlan200-dns-abc"}}),
    );
    let mut agents = 0;
    for name in ["vlan200-dns", "vlan200-dns-2"] {
        let path = format!("{G}/dnsservers/{name}");
        assert!(h.mock.get(&path).is_some(), "{name}");
        log.extend(h.run(&path, component::reconcile_dns).await);
        let d = h.mock.get(&deployment_path(name)).expect(name);
        let pod = &d["spec"]["template"]["spec"];
        assert_eq!(pod["automountServiceAccountToken"], json!(false), "{name}");
        assert!(
            pod["volumes"]
                .as_array()
                .into_iter()
                .flatten()
                .all(|v| v["projected"]["sources"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .all(|s| s.get("serviceAccountToken").is_none())),
            "{name}: no token volume"
        );
        agents += usize::from(
            pod["initContainers"]
                .as_array()
                .is_some_and(|c| !c.is_empty()),
        );
    }
    assert_eq!(agents, 2, "both DNS servers run an agent");
    let mut infra = h.mock.get(&infra_path()).unwrap();
    infra["metadata"]["deletionTimestamp"] = json!("2026-12-03T08:02:00Z");
    h.mock.insert(&infra_path(), infra);
    log.extend(h.reconcile_infra().await);
    let touched: Vec<String> = lines(&log)
        .into_iter()
        .filter(|l| l.contains("/leases") || l.contains("rbac.authorization.k8s.io"))
        .collect();
    assert!(touched.is_empty(), "{touched:#?}");
    assert!(h.mock.get(&old).is_some(), "left for the upgrade's cleanup");
    assert!(h.mock.get(&infra_path()).is_none(), "Infra deleted");
}
