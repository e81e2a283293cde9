//! `render` shows what the attachment reconciler would write besides the
//! derived objects: the objects it applies in each hosted cluster (apps
//! ingress), kept apart from the management cluster's, and the
//! management-side public DNS Services.

#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

use crate::plan_support;

use oooi_controller::render::{self, HOSTED_SECTION_KIND, RenderInput};
use plan_support::{attachment_yaml, infra};
use serde_json::Value;

fn kinds(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn input(apps_ingress: &str) -> RenderInput {
    RenderInput {
        infras: vec![infra("oooi", "vlan")],
        attachments: vec![
            attachment_yaml("oooi", "c1", "vlan", "c1", "c1", apps_ingress),
            attachment_yaml("oooi", "c2", "vlan", "c2", "c2", ""),
        ],
        ..RenderInput::default()
    }
}

const MANAGED: &str = "  appsIngress:
    enabled: true
    metallb: {mode: Managed, addresses: [192.0.2.50-192.0.2.59]}";

#[test]
fn render_shows_each_hosted_clusters_apps_ingress_objects_apart_from_the_management_clusters() {
    let out = render::render(&input(MANAGED), render::OFFLINE_PUSH_TOKEN).unwrap();
    assert!(out.problems.is_empty(), "{:?}", out.problems);
    // One section, for the attachment with apps ingress.
    assert_eq!(out.hosted.len(), 1, "{:?}", out.hosted);
    let h = &out.hosted[0];
    assert_eq!(
        (
            h.attachment_namespace.as_str(),
            h.attachment.as_str(),
            h.hosted_cluster.as_str()
        ),
        ("oooi", "c1", "clusters/c1")
    );
    // Managed: MetalLB's install through OLM, then the pool, its L2
    // advertisement and the apps Service, in apply order.
    assert_eq!(
        kinds(&h.objects),
        [
            "Namespace",
            "OperatorGroup",
            "Subscription",
            "MetalLB",
            "IPAddressPool",
            "L2Advertisement",
            "Service"
        ]
    );
    let pool = &h.objects[4];
    assert_eq!(pool["apiVersion"], "metallb.io/v1beta1");
    assert_eq!(pool["metadata"]["namespace"], "metallb-system");
    assert_eq!(pool["spec"]["addresses"][0], "192.0.2.50-192.0.2.59");
    assert_eq!(pool["spec"]["autoAssign"], false);
    let svc = &h.objects[6];
    assert_eq!(svc["metadata"]["name"], "oooi-apps-ingress");
    assert_eq!(svc["metadata"]["namespace"], "openshift-ingress");
    assert_eq!(svc["spec"]["type"], "LoadBalancer");
    assert_eq!(
        svc["metadata"]["annotations"]["metallb.universe.tf/address-pool"],
        "oooi-apps"
    );
    for o in &h.objects {
        assert_eq!(
            o["metadata"]["labels"]["hostedcluster.densityops.com/attachment"], "c1",
            "{o}"
        );
    }
    // None of them is among the management cluster's objects.
    let managed_kinds = kinds(&out.objects);
    for k in [
        "IPAddressPool",
        "L2Advertisement",
        "MetalLB",
        "Subscription",
    ] {
        assert!(
            !managed_kinds.iter().any(|m| m == k),
            "{k} in {managed_kinds:?}"
        );
    }
    assert!(
        !out.objects
            .iter()
            .any(|o| o["metadata"]["name"] == "oooi-apps-ingress"),
        "the apps Service belongs to the hosted cluster"
    );

    // The YAML stream: the management cluster's objects, then one
    // render-only document per section naming where it is applied.
    let yaml = render::to_yaml(&out).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&yaml).unwrap();
    let last = docs.last().unwrap();
    assert_eq!(last["kind"], HOSTED_SECTION_KIND);
    assert_eq!(last["metadata"]["name"], "c1");
    assert_eq!(last["hostedCluster"], "clusters/c1");
    assert!(
        last["appliedIn"]
            .as_str()
            .unwrap()
            .contains("not the management cluster")
    );
    assert_eq!(last["objects"].as_array().unwrap().len(), 7);
    let summary = docs
        .iter()
        .position(|d| d["kind"] == "PlanSummary")
        .unwrap();
    assert_eq!(summary, docs.len() - 2, "the sections come after the plan");

    // `--out`: the sections as files of their own.
    let dir = tempfile::tempdir().unwrap();
    render::write_out(&out, dir.path()).unwrap();
    let section = dir.path().join("hosted").join("oooi-c1");
    let mut files: Vec<String> = std::fs::read_dir(&section)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files.len(), 7, "{files:?}");
    assert_eq!(files[4], "004-ipaddresspool-metallb-system-oooi-apps.yaml");
}

#[test]
fn external_metallb_renders_only_the_pool_the_advertisement_and_the_service() {
    let external = "  appsIngress:
    enabled: true
    metallb: {mode: External, addresses: [192.0.2.50/31], poolName: apps}";
    let out = render::render(&input(external), render::OFFLINE_PUSH_TOKEN).unwrap();
    assert_eq!(
        kinds(&out.hosted[0].objects),
        ["IPAddressPool", "L2Advertisement", "Service"]
    );
    assert_eq!(
        out.hosted[0].objects[1]["spec"]["ipAddressPools"][0],
        "apps"
    );
}

#[test]
fn apps_ingress_that_would_not_be_applied_is_a_note_not_a_section() {
    // The pool overlaps the DHCP pool: the controller reports it and
    // applies nothing.
    let conflict = "  appsIngress:
    enabled: true
    metallb: {addresses: [192.0.2.150-192.0.2.159]}";
    let out = render::render(&input(conflict), render::OFFLINE_PUSH_TOKEN).unwrap();
    assert!(out.hosted.is_empty(), "{:?}", out.hosted);
    assert!(
        out.notes.iter().any(|n| n.contains("oooi/c1")
            && n.contains("PoolConflict")
            && n.contains("overlaps the DHCP pool")),
        "{:?}",
        out.notes
    );
}

#[test]
fn gitops_leaves_the_hosted_sections_out_of_the_stream_and_says_so() {
    let mut i = input(MANAGED);
    i.gitops = true;
    let out = render::render(&i, render::OFFLINE_PUSH_TOKEN).unwrap();
    assert_eq!(out.hosted.len(), 1);
    let yaml = render::to_yaml(&out).unwrap();
    assert!(!yaml.contains(HOSTED_SECTION_KIND), "{yaml}");
    assert!(
        out.notes
            .iter()
            .any(|n| n.contains("clusters/c1") && n.contains("hosted/")),
        "{:?}",
        out.notes
    );
}

#[test]
fn render_shows_the_public_dns_services_of_the_accepted_attachments() {
    let public = "  publicDns: {enabled: true, publishApi: true}";
    let out = render::render(&input(public), render::OFFLINE_PUSH_TOKEN).unwrap();
    let services: Vec<&Value> = out
        .objects
        .iter()
        .filter(|o| o["kind"] == "Service" && o["spec"]["type"] == "LoadBalancer")
        .collect();
    assert_eq!(services.len(), 1, "{services:?}");
    let s = services[0];
    assert_eq!(s["metadata"]["name"], "oooi-public-c1");
    assert_eq!(s["metadata"]["namespace"], "oooi");
    assert_eq!(
        s["metadata"]["annotations"]["external-dns.alpha.kubernetes.io/hostname"],
        "api.c1.example.com,oauth.c1.example.com"
    );
    assert_eq!(
        s["metadata"]["labels"]["hostedcluster.densityops.com/public-dns"],
        "true"
    );
    assert!(out.hosted.is_empty(), "public DNS is management-side");
}
