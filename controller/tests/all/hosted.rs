//! The hosted-cluster side of attachments against two mocked APIs:
//! the management cluster and the hosted cluster. Scenarios drive the real
//! attachment and Infra reconcilers and assert the exact hosted requests,
//! the apps ingress status, the observed VIP, the reconcile triggers and the
//! management-side public DNS Service. Management requests are checked
//! against the controller's RBAC.

#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

use crate::mock_api;
use crate::reconcile_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use mock_api::{MockApi, Recorded, assert_rbac, lines, writes};
use oooi_controller::crd::{Infra, InfraClusterAttachment};
use oooi_controller::hosted::Hosted;
use oooi_controller::observe::{self, Discovered, Observations};
use oooi_controller::reconcile::{Context, Settings, attachment, infra};
use reconcile_support::{
    Caches, G, NS, assert_apply, att_path, base64_encode, condition, context, finalized, fixed_now,
    infra_json, infra_path, reconcile_at,
};
use serde_json::{Value, json};

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const POOL: &str = "/apis/metallb.io/v1beta1/namespaces/metallb-system/ipaddresspools/oooi-apps";
const L2: &str = "/apis/metallb.io/v1beta1/namespaces/metallb-system/l2advertisements/oooi-apps";
const SVC: &str = "/api/v1/namespaces/openshift-ingress/services/oooi-apps-ingress";
const SECRET: &str = "/api/v1/namespaces/clusters/secrets/c1-admin-kubeconfig";

/// The attachment `name` (finalized) with `spec.appsIngress` = `apps`.
fn attachment_json(name: &str, apps: Value) -> Value {
    let mut a = finalized(reconcile_support::attachment_json(name));
    a["spec"]["appsIngress"] = apps;
    a
}

fn apps(mode: &str) -> Value {
    json!({"enabled": true, "metallb": {"mode": mode, "addresses": ["198.51.100.50-198.51.100.59"]}})
}

fn crd_path(name: &str) -> String {
    format!("{CRDS}/{name}")
}

fn hc_resource() -> ApiResource {
    ApiResource {
        group: "hypershift.openshift.io".into(),
        version: "v1beta1".into(),
        api_version: "hypershift.openshift.io/v1beta1".into(),
        kind: "HostedCluster".into(),
        plural: "hostedclusters".into(),
    }
}

fn hosted_cluster(name: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HostedCluster",
        "metadata": {"name": name, "namespace": "clusters"},
        "status": {"kubeconfig": {"name": format!("{name}-admin-kubeconfig")}}
    }))
    .unwrap()
}

fn kubeconfig_secret(content: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": "c1-admin-kubeconfig", "namespace": "clusters"},
           "data": {"kubeconfig": base64_encode(content.as_bytes())}})
}

fn node(name: &str, ready: bool) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
           "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}})
}

struct Harness {
    mgmt: MockApi,
    hosted: MockApi,
    ctx: Arc<Context>,
    caches: Caches,
    hcs: Writer<DynamicObject>,
    /// (kubeconfig, control-plane namespace) of every hosted client built.
    connects: Arc<Mutex<Vec<(String, String)>>>,
    infra_triggers: futures::stream::BoxStream<'static, kube::runtime::reflector::ObjectRef<Infra>>,
}

impl Harness {
    /// Management cluster with the Infra, hosted cluster `c1` with its
    /// kubeconfig, a Ready node and (`crds`) the MetalLB CRDs.
    fn new(crds: bool) -> Harness {
        let mgmt = MockApi::start();
        let hosted = MockApi::start();
        let mut discovered = Discovered::default();
        for api in observe::OPTIONAL_APIS {
            if api == observe::HOSTED_CLUSTERS {
                discovered.present.push((api, hc_resource()));
            } else {
                discovered.missing.push(api);
            }
        }
        let hcs = Writer::new(hc_resource());
        let connects = Arc::new(Mutex::new(Vec::new()));
        let hosted_client = hosted.client.clone();
        let seen = connects.clone();
        let hosted_state = Hosted::new(Arc::new(move |kubeconfig: Vec<u8>, ns: String| {
            seen.lock()
                .unwrap()
                .push((String::from_utf8_lossy(&kubeconfig).to_string(), ns));
            let c = hosted_client.clone();
            Box::pin(async move { Ok(c) })
        }));
        let observations = Observations {
            hosted_clusters: Some(hcs.as_reader()),
            hosted: hosted_state,
            ..Observations::default()
        };
        let (ctx, caches) = context(&mgmt, Settings::default(), discovered, observations);
        let (infra_triggers, _att_triggers) = ctx.observations.hosted.triggers();
        let mut h = Harness {
            mgmt,
            hosted,
            ctx,
            caches,
            hcs,
            connects,
            infra_triggers: infra_triggers.boxed(),
        };
        h.mgmt.insert(&infra_path(), finalized(infra_json(1)));
        h.mgmt.insert(SECRET, kubeconfig_secret("kubeconfig-v1"));
        h.hcs
            .apply_watcher_event(&watcher::Event::Apply(hosted_cluster("c1")));
        h.hosted.insert("/api/v1/nodes/n1", node("n1", true));
        if crds {
            h.add_crds(&["ipaddresspools.metallb.io", "l2advertisements.metallb.io"]);
        }
        h
    }

    fn add_crds(&self, names: &[&str]) {
        for n in names {
            self.hosted.insert(
                &crd_path(n),
                json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                       "metadata": {"name": n}}),
            );
        }
    }

    /// Reconciles attachment `name`; returns (management, hosted) requests
    /// (the hosted ones without the background Service watch).
    /// (The attachment reconcile never fails on the hosted cluster's
    /// account: `reconcile_at` asserts it succeeds.)
    async fn reconcile(&mut self, name: &str) -> (Vec<Recorded>, Vec<Recorded>) {
        let path = att_path(name);
        reconcile_at(
            &self.mgmt,
            &mut self.caches,
            &self.ctx,
            &path,
            attachment::reconcile,
        )
        .await;
        let m = self.mgmt.take();
        assert_rbac(&m);
        (m, self.hosted.take_reconcile())
    }

    async fn reconcile_infra(&mut self) -> Vec<Recorded> {
        let path = infra_path();
        reconcile_at(
            &self.mgmt,
            &mut self.caches,
            &self.ctx,
            &path,
            infra::reconcile,
        )
        .await;
        let m = self.mgmt.take();
        assert_rbac(&m);
        m
    }

    fn apps_status(&self, name: &str) -> Value {
        self.mgmt.get(&att_path(name)).unwrap()["status"]["appsIngress"].clone()
    }

    /// Attachment `name`'s apps ingress is in `phase` for `reason`.
    #[track_caller]
    fn assert_apps(&self, name: &str, phase: &str, reason: &str) {
        let status = self.apps_status(name);
        assert_eq!(
            phase_reason(&status),
            (phase.to_string(), reason.to_string()),
            "{status}"
        );
    }

    /// Waits for the next Infra trigger.
    async fn next_infra_trigger(&mut self) -> String {
        let r = tokio::time::timeout(Duration::from_secs(5), self.infra_triggers.next())
            .await
            .expect("an Infra reconcile is triggered")
            .expect("trigger stream open");
        format!("{}/{}", r.namespace.unwrap_or_default(), r.name)
    }

    /// Drops queued Infra triggers.
    async fn drain_triggers(&mut self) {
        while let Ok(Some(_)) =
            tokio::time::timeout(Duration::from_millis(50), self.infra_triggers.next()).await
        {
        }
    }
}

fn phase_reason(status: &Value) -> (String, String) {
    (
        status["phase"].as_str().unwrap_or_default().to_string(),
        status["reason"].as_str().unwrap_or_default().to_string(),
    )
}

fn has_event(log: &[Recorded], reason: &str) -> bool {
    log.iter().any(|r| {
        r.method == "POST"
            && r.path().ends_with("/events")
            && r.body.as_ref().is_some_and(|b| b["reason"] == reason)
    })
}

fn install_lines() -> Vec<String> {
    vec![
        format!("GET {}", crd_path("ipaddresspools.metallb.io")),
        format!("GET {}", crd_path("l2advertisements.metallb.io")),
        format!("GET {POOL}"),
        format!("PATCH {POOL}"),
        format!("GET {L2}"),
        format!("PATCH {L2}"),
        format!("GET {SVC}"),
        format!("PATCH {SVC}"),
        "GET /api/v1/services".to_string(),
        "GET /apis/metallb.io/v1beta1/l2advertisements".to_string(),
        "GET /apis/metallb.io/v1beta1/ipaddresspools".to_string(),
    ]
}

fn set_vip(h: &Harness, ip: &str) {
    h.hosted.update(SVC, |s| {
        s["status"] = json!({"loadBalancer": {"ingress": [{"ip": ip}]}});
    });
}

#[tokio::test]
async fn external_mode_installs_pool_advertisement_and_service_then_reports_the_vip() {
    let mut h = Harness::new(true);
    h.mgmt
        .insert(&att_path("c1"), attachment_json("c1", apps("External")));
    let (m, hreq) = h.reconcile("c1").await;

    // The kubeconfig Secret named by the HostedCluster's status, once.
    assert!(
        lines(&m).contains(&format!("GET {SECRET}")),
        "{:#?}",
        lines(&m)
    );
    assert_eq!(
        *h.connects.lock().unwrap(),
        vec![("kubeconfig-v1".to_string(), "clusters-c1".to_string())]
    );
    let mut want = install_lines();
    want.push("GET /api/v1/nodes".to_string());
    assert_eq!(lines(&hreq), want);
    for w in writes(&hreq) {
        assert_apply(w);
    }
    let pool = h.hosted.get(POOL).unwrap();
    assert_eq!(
        pool["spec"],
        json!({"addresses": ["198.51.100.50-198.51.100.59"], "autoAssign": false})
    );
    assert_eq!(
        pool["metadata"]["labels"]["hostedcluster.densityops.com/attachment"],
        "c1"
    );
    let l2 = h.hosted.get(L2).unwrap();
    assert_eq!(l2["spec"]["ipAddressPools"], json!(["oooi-apps"]));
    let svc = h.hosted.get(SVC).unwrap();
    assert_eq!(svc["spec"]["type"], "LoadBalancer");
    assert_eq!(
        svc["spec"]["selector"],
        json!({"ingresscontroller.operator.openshift.io/deployment-ingresscontroller": "default"})
    );
    assert_eq!(
        svc["metadata"]["annotations"]["metallb.universe.tf/address-pool"],
        "oooi-apps"
    );
    h.assert_apps("c1", "Pending", "WaitingForVIP");

    // MetalLB assigns a VIP; the next reconcile reports it (the watch also
    // saw it) and applies nothing.
    set_vip(&h, "198.51.100.50");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (_, hreq) = h.reconcile("c1").await;
    assert!(writes(&hreq).is_empty(), "{:#?}", lines(&hreq));
    let st = h.apps_status("c1");
    assert_eq!(phase_reason(&st), ("Ready".into(), "VIPAssigned".into()));
    assert_eq!(st["vip"], "198.51.100.50");
    assert_eq!(h.connects.lock().unwrap().len(), 1, "the client is cached");
}

#[tokio::test]
async fn managed_mode_installs_metallb_through_olm_and_waits_for_its_crds() {
    let mut h = Harness::new(false);
    h.mgmt
        .insert(&att_path("c1"), attachment_json("c1", apps("Managed")));
    let (_, hreq) = h.reconcile("c1").await;
    let ns = "/api/v1/namespaces/metallb-system";
    let og =
        "/apis/operators.coreos.com/v1/namespaces/metallb-system/operatorgroups/metallb-operator";
    let sub = "/apis/operators.coreos.com/v1alpha1/namespaces/metallb-system/subscriptions/metallb-operator-sub";
    assert_eq!(
        lines(&hreq),
        vec![
            format!("GET {}", crd_path("metallbs.metallb.io")),
            format!("GET {ns}"),
            format!("GET {ns}"),
            format!("PATCH {ns}"),
            format!("GET {og}"),
            format!("PATCH {og}"),
            format!("GET {sub}"),
            format!("PATCH {sub}"),
            format!("GET {}", crd_path("ipaddresspools.metallb.io")),
        ]
    );
    for w in writes(&hreq) {
        assert_apply(w);
    }
    let s = h.hosted.get(sub).unwrap();
    assert_eq!(s["spec"]["name"], "metallb-operator");
    assert_eq!(s["spec"]["channel"], "stable");
    assert_eq!(s["spec"]["source"], "redhat-operators");
    let st = h.apps_status("c1");
    assert_eq!(
        phase_reason(&st),
        ("Pending".into(), "MetalLBCRDsMissing".into())
    );
    assert!(h.hosted.get(POOL).is_none(), "no pool before the CRDs");

    // OLM installed the operator: the MetalLB CR, then the pool objects.
    h.add_crds(&[
        "metallbs.metallb.io",
        "ipaddresspools.metallb.io",
        "l2advertisements.metallb.io",
    ]);
    let (_, hreq) = h.reconcile("c1").await;
    let cr = "/apis/metallb.io/v1beta1/namespaces/metallb-system/metallbs/metallb";
    let l = lines(&hreq);
    assert!(l.contains(&format!("PATCH {cr}")), "{l:#?}");
    assert!(l.contains(
        &"GET /apis/operators.coreos.com/v1/namespaces/metallb-system/operatorgroups".to_string()
    ));
    assert!(
        !l.contains(&format!("PATCH {ns}")),
        "unchanged OLM objects are not re-applied"
    );
    for p in [POOL, L2, SVC] {
        assert!(l.contains(&format!("PATCH {p}")), "{p} in {l:#?}");
    }
    h.assert_apps("c1", "Pending", "WaitingForVIP");
}

#[tokio::test]
async fn a_foreign_metallb_namespace_and_operator_group_are_used_not_adopted() {
    let mut h = Harness::new(false);
    h.hosted.insert(
        "/api/v1/namespaces/metallb-system",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "metallb-system"}}),
    );
    h.hosted.insert(
        "/apis/operators.coreos.com/v1/namespaces/metallb-system/operatorgroups/theirs",
        json!({"apiVersion": "operators.coreos.com/v1", "kind": "OperatorGroup",
               "metadata": {"name": "theirs", "namespace": "metallb-system"}}),
    );
    h.mgmt
        .insert(&att_path("c1"), attachment_json("c1", apps("Managed")));
    let (_, hreq) = h.reconcile("c1").await;
    let w: Vec<String> = writes(&hreq).iter().map(|r| r.line()).collect();
    assert_eq!(
        w,
        vec![
            "PATCH /apis/operators.coreos.com/v1alpha1/namespaces/metallb-system/subscriptions/metallb-operator-sub"
        ]
    );
}

#[tokio::test]
async fn external_mode_without_metallb_crds_is_degraded() {
    let mut h = Harness::new(false);
    h.mgmt
        .insert(&att_path("c1"), attachment_json("c1", apps("External")));
    let (_, hreq) = h.reconcile("c1").await;
    assert_eq!(
        lines(&hreq),
        vec![format!("GET {}", crd_path("ipaddresspools.metallb.io"))]
    );
    let st = h.apps_status("c1");
    assert_eq!(
        phase_reason(&st),
        ("Degraded".into(), "MetalLBCRDsMissing".into())
    );
    assert!(st["message"].as_str().unwrap().contains("External"));
}

#[tokio::test]
async fn service_changes_keep_foreign_keys_and_restore_the_pool_annotation() {
    let mut h = Harness::new(true);
    let mut a = apps("External");
    a["service"] = json!({"annotations": {"metallb.universe.tf/address-pool": "other", "team": "a"},
                          "labels": {"l": "1"}, "externalDnsHostname": true});
    h.mgmt.insert(&att_path("c1"), attachment_json("c1", a));
    h.reconcile("c1").await;
    let svc = h.hosted.get(SVC).unwrap();
    let ann = &svc["metadata"]["annotations"];
    assert_eq!(
        ann["metallb.universe.tf/address-pool"], "oooi-apps",
        "managed key wins"
    );
    assert_eq!(ann["team"], "a");
    assert_eq!(
        ann["external-dns.alpha.kubernetes.io/hostname"],
        "*.apps.c1.example.com"
    );
    assert_eq!(svc["metadata"]["labels"]["l"], "1");

    // Someone adds their own annotation: nothing to re-apply, and it stays.
    h.hosted.update(SVC, |s| {
        s["metadata"]["annotations"]["foreign.example.com/x"] = json!("kept");
    });
    let (_, hreq) = h.reconcile("c1").await;
    assert!(writes(&hreq).is_empty(), "{:#?}", lines(&hreq));

    // Someone edits the pool annotation: oooi puts it back, the foreign key stays.
    h.hosted.update(SVC, |s| {
        s["metadata"]["annotations"]["metallb.universe.tf/address-pool"] = json!("hijacked");
    });
    let (_, hreq) = h.reconcile("c1").await;
    assert_eq!(
        writes(&hreq).iter().map(|r| r.line()).collect::<Vec<_>>(),
        vec![format!("PATCH {SVC}")]
    );
    let svc = h.hosted.get(SVC).unwrap();
    assert_eq!(
        svc["metadata"]["annotations"]["metallb.universe.tf/address-pool"],
        "oooi-apps"
    );
    assert_eq!(
        svc["metadata"]["annotations"]["foreign.example.com/x"],
        "kept"
    );

    // A spec change (new annotation, ExternalDNS off) is applied; what oooi
    // stopped setting goes, the foreign key stays.
    h.mgmt.update(&att_path("c1"), |a| {
        a["spec"]["appsIngress"]["service"] = json!({"annotations": {"team": "b"}});
    });
    h.reconcile("c1").await;
    let ann = h.hosted.get(SVC).unwrap()["metadata"]["annotations"].clone();
    assert_eq!(ann["team"], "b");
    assert!(
        ann.get("external-dns.alpha.kubernetes.io/hostname")
            .is_none(),
        "{ann}"
    );
    assert_eq!(ann["foreign.example.com/x"], "kept");
}

#[tokio::test]
async fn a_vip_that_appears_or_moves_updates_observations_and_triggers_the_infra_at_once() {
    let mut h = Harness::new(true);
    h.mgmt
        .insert(&att_path("c1"), attachment_json("c1", apps("External")));
    h.reconcile("c1").await;
    h.reconcile_infra().await;
    h.drain_triggers().await;
    let a: InfraClusterAttachment =
        serde_json::from_value(h.mgmt.get(&att_path("c1")).unwrap()).unwrap();
    assert!(h.ctx.observations.hosted.watching(NS, "c1"));
    assert_eq!(h.ctx.observations.hosted.vip(NS, "c1"), None);

    // MetalLB assigns the VIP: the watch sees it, no reconcile needed.
    set_vip(&h, "198.51.100.50");
    assert_eq!(h.next_infra_trigger().await, "oooi/vlan200");
    assert_eq!(
        h.ctx.observations.hosted.vip(NS, "c1"),
        "198.51.100.50".parse().ok()
    );
    let observed = h.ctx.observations.observed(std::slice::from_ref(&a));
    let cluster = observed.clusters.values().next().unwrap();
    assert_eq!(cluster.apps_vip, "198.51.100.50".parse().ok());
    // The triggered Infra reconcile routes and publishes `*.apps` at the VIP.
    h.reconcile_infra().await;
    let dns = serde_json::to_string(&h.mgmt.get(&format!("{G}/dnsservers/vlan200-dns")).unwrap())
        .unwrap();
    let proxy = serde_json::to_string(
        &h.mgmt
            .get(&format!("{G}/proxyservers/vlan200-proxy"))
            .unwrap(),
    )
    .unwrap();
    assert!(dns.contains("198.51.100.50"), "{dns}");
    assert!(
        proxy.contains("*.apps.c1.example.com") && proxy.contains("198.51.100.50"),
        "{proxy}"
    );

    // MetalLB moves it.
    set_vip(&h, "198.51.100.51");
    assert_eq!(h.next_infra_trigger().await, "oooi/vlan200");
    h.reconcile_infra().await;
    let dns = serde_json::to_string(&h.mgmt.get(&format!("{G}/dnsservers/vlan200-dns")).unwrap())
        .unwrap();
    assert!(
        dns.contains("198.51.100.51") && !dns.contains("198.51.100.50"),
        "{dns}"
    );

    // An unrelated change to the Service (same VIP) triggers nothing.
    h.hosted.update(SVC, |s| {
        s["metadata"]["annotations"]["foreign.example.com/x"] = json!("y");
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        tokio::time::timeout(Duration::from_millis(100), h.infra_triggers.next())
            .await
            .is_err(),
        "same VIP, no trigger"
    );
}

#[tokio::test]
async fn a_pool_conflict_is_reported_and_nothing_is_applied() {
    let mut h = Harness::new(true);
    // Overlaps the DHCP pool (198.51.100.100-179).
    h.mgmt.insert(
        &att_path("c1"),
        attachment_json(
            "c1",
            json!({"enabled": true, "metallb": {"addresses": ["198.51.100.170-198.51.100.190"]}}),
        ),
    );
    let (m, hreq) = h.reconcile("c1").await;
    assert!(hreq.is_empty(), "{:#?}", lines(&hreq));
    assert!(!lines(&m).contains(&format!("GET {SECRET}")));
    let st = h.apps_status("c1");
    assert_eq!(
        phase_reason(&st),
        ("Degraded".into(), "PoolConflict".into())
    );
    assert!(
        st["message"].as_str().unwrap().contains("DHCP pool"),
        "{st}"
    );
    // The rest of the stack is unaffected: the Infra still reconciles.
    let log = h.reconcile_infra().await;
    assert!(
        lines(&log).iter().any(|l| l.contains("dnsservers")),
        "{:#?}",
        lines(&log)
    );
}

#[tokio::test]
async fn disabling_apps_ingress_removes_everything_oooi_created() {
    let mut h = Harness::new(true);
    h.add_crds(&["metallbs.metallb.io"]);
    h.mgmt
        .insert(&att_path("c1"), attachment_json("c1", apps("Managed")));
    h.reconcile("c1").await;
    set_vip(&h, "198.51.100.50");
    h.next_infra_trigger().await;
    // A Service someone else owns in the same namespace is left alone.
    h.hosted.insert(
        "/api/v1/namespaces/openshift-ingress/services/router-default",
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "router-default", "namespace": "openshift-ingress"}}),
    );
    h.mgmt.update(&att_path("c1"), |a| {
        a["spec"]["appsIngress"]["enabled"] = json!(false);
    });
    let (_, hreq) = h.reconcile("c1").await;
    let deletes: Vec<String> = writes(&hreq).iter().map(|r| r.line()).collect();
    assert_eq!(
        deletes,
        vec![
            format!("DELETE {SVC}"),
            format!("DELETE {L2}"),
            format!("DELETE {POOL}"),
            "DELETE /apis/metallb.io/v1beta1/namespaces/metallb-system/metallbs/metallb".to_string(),
            "DELETE /apis/operators.coreos.com/v1alpha1/namespaces/metallb-system/subscriptions/metallb-operator-sub".to_string(),
            "DELETE /apis/operators.coreos.com/v1/namespaces/metallb-system/operatorgroups/metallb-operator".to_string(),
            "DELETE /api/v1/namespaces/metallb-system".to_string(),
        ]
    );
    for r in hreq.iter().filter(|r| r.method == "GET") {
        assert_eq!(
            r.query("labelSelector").as_deref(),
            Some(
                "app.kubernetes.io/managed-by=oooi-controller,hostedcluster.densityops.com/attachment=c1,hostedcluster.densityops.com/attachment-namespace=oooi"
            ),
            "{}",
            r.line()
        );
    }
    assert!(
        h.hosted
            .get("/api/v1/namespaces/openshift-ingress/services/router-default")
            .is_some()
    );
    assert!(h.apps_status("c1").is_null(), "status.appsIngress removed");
    assert_eq!(h.ctx.observations.hosted.vip(NS, "c1"), None);
    assert!(!h.ctx.observations.hosted.watching(NS, "c1"));
    assert_eq!(
        h.next_infra_trigger().await,
        "oooi/vlan200",
        "routes and DNS drop the VIP"
    );
    // Nothing left: the next reconcile sends nothing to the hosted cluster.
    let (_, hreq) = h.reconcile("c1").await;
    assert!(hreq.is_empty(), "{:#?}", lines(&hreq));
}

#[tokio::test]
async fn deleting_the_attachment_cleans_up_the_hosted_cluster() {
    let mut h = Harness::new(true);
    h.mgmt
        .insert(&att_path("c1"), attachment_json("c1", apps("External")));
    h.reconcile("c1").await;
    h.mgmt.update(&att_path("c1"), |a| {
        a["metadata"]["deletionTimestamp"] = json!("2026-12-03T08:00:00Z");
    });
    let (m, hreq) = h.reconcile("c1").await;
    let deletes: Vec<String> = writes(&hreq).iter().map(|r| r.line()).collect();
    assert_eq!(
        deletes,
        vec![
            format!("DELETE {SVC}"),
            format!("DELETE {L2}"),
            format!("DELETE {POOL}")
        ]
    );
    assert!(h.hosted.paths("/apis/metallb.io").is_empty());
    assert!(
        h.mgmt.get(&att_path("c1")).is_none(),
        "finalizer removed: {:#?}",
        lines(&m)
    );
}

#[tokio::test]
async fn a_hosted_cluster_already_gone_does_not_block_deletion() {
    let mut h = Harness::new(true);
    h.mgmt
        .insert(&att_path("c1"), attachment_json("c1", apps("External")));
    h.reconcile("c1").await;
    // The HostedCluster and its kubeconfig are gone.
    h.hcs
        .apply_watcher_event(&watcher::Event::Delete(hosted_cluster("c1")));
    h.mgmt.remove(SECRET);
    h.mgmt.update(&att_path("c1"), |a| {
        a["metadata"]["deletionTimestamp"] = json!("2026-12-03T08:00:00Z");
    });
    let (m, hreq) = h.reconcile("c1").await;
    assert!(hreq.is_empty(), "{:#?}", lines(&hreq));
    assert!(
        has_event(&m, "HostedClusterGone"),
        "an event says why nothing was removed"
    );
    assert!(h.mgmt.get(&att_path("c1")).is_none(), "finalizer removed");
}

#[tokio::test]
async fn a_hosted_cluster_being_deleted_and_unreachable_does_not_block_deletion() {
    let mut h = Harness::new(true);
    h.mgmt
        .insert(&att_path("c1"), attachment_json("c1", apps("External")));
    h.reconcile("c1").await;
    let mut hc = hosted_cluster("c1");
    hc.metadata.deletion_timestamp = Some(fixed_now());
    h.hcs.apply_watcher_event(&watcher::Event::Apply(hc));
    h.hosted.set_unreachable(true);
    h.mgmt.update(&att_path("c1"), |a| {
        a["metadata"]["deletionTimestamp"] = json!("2026-12-03T08:00:00Z");
    });
    h.reconcile("c1").await;
    assert!(h.mgmt.get(&att_path("c1")).is_none(), "finalizer removed");
}

#[tokio::test]
async fn an_unreachable_hosted_api_is_reported_without_blocking_the_stack() {
    let mut h = Harness::new(true);
    h.mgmt
        .insert(&att_path("c1"), attachment_json("c1", apps("External")));
    h.hosted.set_unreachable(true);
    let (m, _) = h.reconcile("c1").await;
    let st = h.apps_status("c1");
    assert_eq!(
        phase_reason(&st),
        ("Degraded".into(), "HostedAPIUnreachable".into())
    );
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("ipaddresspools.metallb.io"),
        "{st}"
    );
    assert!(has_event(&m, "HostedAPIUnreachable"));
    // The Accepted condition and the Infra are unaffected.
    let status = &h.mgmt.get(&att_path("c1")).unwrap()["status"];
    assert_eq!(condition(status, "Accepted")["status"], "True");
    let log = h.reconcile_infra().await;
    assert!(lines(&log).iter().any(|l| l.contains("proxyservers")));

    // Retried soon (once, however many reconciles fail meanwhile).
    assert!(h.ctx.observations.hosted.retry_pending(NS, "c1"));
    h.reconcile("c1").await;
    assert!(h.ctx.observations.hosted.retry_pending(NS, "c1"));

    // Back: the next reconcile installs.
    h.hosted.set_unreachable(false);
    h.reconcile("c1").await;
    h.assert_apps("c1", "Pending", "WaitingForVIP");
}

#[tokio::test]
async fn status_reasons_name_what_is_missing() {
    // No HostedCluster.
    let mut h = Harness::new(true);
    h.hcs
        .apply_watcher_event(&watcher::Event::Delete(hosted_cluster("c1")));
    h.mgmt
        .insert(&att_path("c1"), attachment_json("c1", apps("External")));
    h.reconcile("c1").await;
    h.assert_apps("c1", "Pending", "HostedClusterNotFound");
    // No kubeconfig Secret yet.
    h.hcs
        .apply_watcher_event(&watcher::Event::Apply(hosted_cluster("c1")));
    h.mgmt.remove(SECRET);
    h.reconcile("c1").await;
    h.assert_apps("c1", "Pending", "KubeconfigNotReady");
    // No Ready node.
    h.mgmt.insert(SECRET, kubeconfig_secret("kubeconfig-v1"));
    h.hosted.insert("/api/v1/nodes/n1", node("n1", false));
    h.reconcile("c1").await;
    h.assert_apps("c1", "Pending", "NoReadyNode");
}

#[tokio::test]
async fn a_changed_kubeconfig_rebuilds_the_client() {
    let mut h = Harness::new(true);
    h.mgmt
        .insert(&att_path("c1"), attachment_json("c1", apps("External")));
    h.reconcile("c1").await;
    h.reconcile("c1").await;
    assert_eq!(h.connects.lock().unwrap().len(), 1);
    h.mgmt.insert(SECRET, kubeconfig_secret("kubeconfig-v2"));
    h.reconcile("c1").await;
    let c = h.connects.lock().unwrap().clone();
    assert_eq!(c.len(), 2);
    assert_eq!(c[1].0, "kubeconfig-v2");
}

fn public_dns(service: &str, api: bool) -> Value {
    json!({"enabled": true, "serviceName": service, "publishApi": api})
}

#[tokio::test]
async fn public_dns_services_merge_oauth_names_and_go_with_their_last_attachment() {
    let mut h = Harness::new(true);
    let svc = "/api/v1/namespaces/oooi/services/oauth-public";
    for (name, api) in [("c1", false), ("c2", true)] {
        let mut a = attachment_json(name, Value::Null);
        a["spec"]["publicDns"] = public_dns("oauth-public", api);
        h.mgmt.insert(&att_path(name), a);
    }
    let (m, hreq) = h.reconcile("c1").await;
    assert!(hreq.is_empty(), "apps ingress is off: no hosted request");
    let apply = m
        .iter()
        .find(|r| r.method == "PATCH" && r.path() == svc)
        .unwrap_or_else(|| panic!("{:#?}", lines(&m)));
    assert_apply(apply);
    let body = apply.body.as_ref().unwrap();
    assert_eq!(
        body["metadata"]["annotations"]["external-dns.alpha.kubernetes.io/hostname"],
        "api.c2.example.com,oauth.c1.example.com,oauth.c2.example.com"
    );
    assert_eq!(body["spec"]["type"], "LoadBalancer");
    assert_eq!(
        body["spec"]["ports"],
        json!([{"name": "tls-443", "port": 443, "protocol": "TCP", "targetPort": 443}])
    );
    assert_eq!(
        body["spec"]["selector"],
        json!({"app.kubernetes.io/component": "proxy", "app.kubernetes.io/instance": "vlan200",
               "app.kubernetes.io/name": "oooi"})
    );
    assert_eq!(body["metadata"]["ownerReferences"][0]["uid"], "uid-infra");
    // The other member computes the same Service: no write.
    let (m, _) = h.reconcile("c2").await;
    assert!(
        !lines(&m).contains(&format!("PATCH {svc}")),
        "{:#?}",
        lines(&m)
    );
    // c2 leaves: its names go.
    h.mgmt.update(&att_path("c2"), |a| {
        a["metadata"]["deletionTimestamp"] = json!("2026-12-03T08:00:00Z");
    });
    h.reconcile("c2").await;
    assert_eq!(
        h.mgmt.get(svc).unwrap()["metadata"]["annotations"]["external-dns.alpha.kubernetes.io/hostname"],
        "oauth.c1.example.com"
    );
    // c1 turns it off: the Service goes.
    h.mgmt.update(&att_path("c1"), |a| {
        a["spec"]["publicDns"]["enabled"] = json!(false);
    });
    let (m, _) = h.reconcile("c1").await;
    assert!(
        lines(&m).contains(&format!("DELETE {svc}")),
        "{:#?}",
        lines(&m)
    );
    assert!(h.mgmt.get(svc).is_none());
}
