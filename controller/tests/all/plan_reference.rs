//! Infras written for the older single-cluster API load: `leaseTime` as a
//! duration, images left to the chart, an unset gateway, `resolv.conf` as an
//! upstream; the fields oooi no longer keeps are reported as ignored (by
//! name) or refused (naming what to write instead); an empty upstream list
//! is reported; and `render` fails on an invalid input unless allowed.

#![allow(clippy::unwrap_used)]

use crate::plan_support;

use std::process::Command;

use oooi_controller::crd::status;
use oooi_controller::plan::infra::images::DefaultImages;
use oooi_controller::plan::{self, Observed, PlannedCondition};
use oooi_controller::testing::InfraBuilder;
use plan_support::{attachment, dhcp_config, dns_config, observed};
use serde_json::json;

/// An Infra as the older API's samples write it: lease time as a duration,
/// no images, the single-cluster DNS and proxy fields.
fn older_api_infra() -> InfraBuilder {
    InfraBuilder::new()
        .named("clusters", "vlan100")
        .remove("/metadata/uid")
        .remove("/metadata/generation")
        .subnet("198.51.100")
        .nad("tenant-vlan-100")
        .set("/spec/networkConfig/networkAttachmentNamespace", "default")
        .upstreams(&["203.0.113.53", "203.0.113.54"])
        .images(None, None, None)
        .dhcp_range("198.51.100.10", "198.51.100.250")
        .dhcp(json!({"enabled": true, "leaseTime": "1h"}))
        .dns(json!({"enabled": true, "baseDomain": "example.com", "clusterName": "mycluster"}))
        .proxy(json!({
            "enabled": true,
            "controlPlaneNamespace": "clusters-mycluster",
            "apiServerService": "kube-apiserver",
            "managerImage": "registry.example.com/manager:1",
        }))
}

fn chart_images() -> DefaultImages {
    DefaultImages {
        dhcp: Some("registry.example.com/oooi/oooi-dhcp:0.1.0".into()),
        dns: Some("registry.example.com/oooi/oooi-dns:0.1.0".into()),
        proxy: Some("registry.example.com/oooi/oooi-proxy:0.1.0".into()),
    }
}

/// The plan's error on `field`.
#[track_caller]
fn error<'a>(p: &'a plan::InfraPlan, field: &str) -> &'a oooi_vocabulary::FieldError {
    p.errors
        .iter()
        .find(|e| e.field == field)
        .unwrap_or_else(|| panic!("no error on {field}: {:?}", p.errors))
}

fn plan_of(infra: InfraBuilder) -> plan::InfraPlan {
    let i = chart_images().apply(&infra.build());
    plan::plan_infra(&i, &[], &Observed::default())
}

fn notice(p: &plan::InfraPlan, type_: &str) -> PlannedCondition {
    p.notices()
        .into_iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} condition"))
}

fn lease_seconds(p: &plan::InfraPlan) -> Option<u32> {
    dhcp_config(p).lease_seconds
}

#[test]
fn an_older_api_infra_plans_with_the_chart_images() {
    let p = plan_of(older_api_infra());
    assert!(p.errors.is_empty(), "{:?}", p.errors);
    let d = p.desired.as_ref().expect("valid");
    assert_eq!(
        d.proxy.first().unwrap().spec.pod.image,
        "registry.example.com/oooi/oooi-proxy:0.1.0"
    );
    assert_eq!(lease_seconds(&p), Some(3600));
}

#[test]
fn lease_time_is_a_duration_or_seconds() {
    for (written, seconds) in [
        (json!("1h"), 3600),
        (json!("30m"), 1800),
        (json!("1h30m"), 5400),
        (json!("90s"), 90),
        (json!("7200"), 7200),
        (json!(7200), 7200),
    ] {
        let p = plan_of(older_api_infra().dhcp(json!({"leaseTime": written})));
        assert!(p.errors.is_empty(), "{written}: {:?}", p.errors);
        assert_eq!(lease_seconds(&p), Some(seconds), "{written}");
    }
}

#[test]
fn a_bad_lease_time_names_the_field_and_the_value() {
    for (written, says) in [
        (json!("1d"), "`1d`"),
        (json!("h"), "`h`"),
        (json!("30m1h"), "`30m1h`"),
        (json!("30s"), "30 seconds is outside 60..=31536000"),
        (json!(30), "30 seconds is outside"),
    ] {
        let p = plan_of(older_api_infra().dhcp(json!({"leaseTime": written})));
        assert!(p.desired.is_none(), "{written} is refused");
        let e = error(&p, "spec.infraComponents.dhcp.leaseTime");
        assert!(e.message.contains(says), "{written}: {}", e.message);
    }
}

#[test]
fn an_unset_lease_time_is_an_hour() {
    let p = plan_of(older_api_infra().remove("/spec/infraComponents/dhcp/leaseTime"));
    assert_eq!(lease_seconds(&p), Some(3600));
}

#[test]
fn an_unset_image_without_a_chart_default_names_the_field_and_the_flag() {
    let i = older_api_infra().build();
    let p = plan::plan_infra(&i, &[], &Observed::default());
    assert!(p.desired.is_none());
    for c in ["dhcp", "dns", "proxy"] {
        let field = format!("spec.infraComponents.{c}.image");
        let e = error(&p, &field);
        assert!(e.message.contains(&format!("--{c}-image")), "{}", e.message);
    }
}

#[test]
fn the_single_cluster_fields_are_reported_as_ignored_by_name() {
    let p = plan_of(older_api_infra());
    let c = notice(&p, "LegacyFieldsIgnored");
    assert_eq!(c.status, status::TRUE);
    for field in [
        "spec.infraComponents.dns.clusterName",
        "spec.infraComponents.dns.baseDomain",
        "spec.infraComponents.proxy.controlPlaneNamespace",
        "spec.infraComponents.proxy.apiServerService",
        "spec.infraComponents.proxy.managerImage",
    ] {
        assert!(c.message.contains(field), "{field} in {}", c.message);
    }
    assert!(
        c.message
            .contains("InfraClusterAttachment's spec.dns.clusterName"),
        "{}",
        c.message
    );
    // They change nothing that is planned.
    let without = plan_of(
        older_api_infra()
            .dns(json!({"baseDomain": null, "clusterName": null}))
            .proxy(json!({"controlPlaneNamespace": null, "apiServerService": null, "managerImage": null})),
    );
    assert_eq!(without.desired, p.desired);
    assert_eq!(
        notice(&without, "LegacyFieldsIgnored").status,
        status::FALSE
    );
}

#[test]
fn the_ignored_fields_reach_the_infra_status() {
    let i = chart_images().apply(&older_api_infra().build());
    let p = plan::plan_infra(&i, &[], &Observed::default());
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default());
    let st = plan::infra::infra_status(&i, &p, Default::default(), &now);
    let c = st
        .conditions
        .iter()
        .find(|c| c.type_ == "LegacyFieldsIgnored")
        .expect("in status");
    assert_eq!(c.status, "True");
    assert!(c.message.contains("spec.infraComponents.dns.clusterName"));
    let n = st
        .conditions
        .iter()
        .find(|c| c.type_ == "NoUpstreams")
        .unwrap();
    assert_eq!(n.status, "False");
}

#[test]
fn proxy_image_is_refused_naming_image_instead() {
    let p = plan_of(older_api_infra().proxy(json!({"proxyImage": "envoyproxy/envoy:v1.36.4"})));
    assert!(p.desired.is_none());
    let e = error(&p, "spec.infraComponents.proxy.proxyImage");
    assert!(
        e.message.contains("envoyproxy/envoy:v1.36.4"),
        "{}",
        e.message
    );
    assert!(
        e.message.contains("spec.infraComponents.proxy.image"),
        "{}",
        e.message
    );
}

#[test]
fn apps_ingress_on_the_infra_is_refused_naming_the_attachment() {
    let p = plan_of(older_api_infra().set(
        "/spec/appsIngress",
        json!({"enabled": true, "metallb": {"addressPoolName": "apps", "ipAddressPoolRange": "198.51.100.180-198.51.100.190"}}),
    ));
    assert!(p.desired.is_none());
    let e = error(&p, "spec.appsIngress");
    assert!(
        e.message.contains("InfraClusterAttachment"),
        "{}",
        e.message
    );
}

#[test]
fn an_unset_gateway_is_the_first_host_of_the_cidr() {
    let p = plan_of(older_api_infra().remove("/spec/networkConfig/gateway"));
    assert!(p.errors.is_empty(), "{:?}", p.errors);
    let dhcp = dhcp_config(&p);
    assert_eq!(dhcp.gateway, Some("198.51.100.1".parse().unwrap()));
}

#[test]
fn a_defaulted_gateway_that_a_component_uses_says_it_was_defaulted() {
    let p = plan_of(
        older_api_infra()
            .remove("/spec/networkConfig/gateway")
            .proxy(json!({"serverIP": "198.51.100.1"})),
    );
    assert!(p.desired.is_none());
    let e = error(&p, "spec.infraComponents.proxy.serverIP");
    assert!(
        e.message.contains("198.51.100.1")
            && e.message
                .contains("spec.networkConfig.gateway (unset: the first host"),
        "{}",
        e.message
    );
}

#[test]
fn resolv_conf_upstream_means_the_dns_pods_own_resolvers() {
    let p = plan_of(older_api_infra().upstreams(&["203.0.113.53", "resolv.conf"]));
    assert!(p.errors.is_empty(), "{:?}", p.errors);
    let up = &dns_config(&p).upstreams;
    assert_eq!(up.servers, vec!["203.0.113.53:53".parse().unwrap()]);
    assert!(up.resolv_conf);
    assert_eq!(notice(&p, "NoUpstreams").status, status::FALSE);

    let only = plan_of(older_api_infra().upstreams(&["resolv.conf"]));
    assert!(dns_config(&only).upstreams.servers.is_empty());
    assert!(dns_config(&only).upstreams.resolv_conf);
    assert_eq!(notice(&only, "NoUpstreams").status, status::FALSE);
}

#[test]
fn a_bad_upstream_names_the_entry_and_the_accepted_forms() {
    let p = plan_of(older_api_infra().upstreams(&["203.0.113.53", "resolv"]));
    let e = error(&p, "spec.networkConfig.dnsServers[1]");
    assert!(e.message.contains("resolv.conf"), "{}", e.message);
}

#[test]
fn an_empty_upstream_list_is_reported() {
    let p = plan_of(older_api_infra().remove("/spec/networkConfig/dnsServers"));
    assert!(p.errors.is_empty(), "still valid: {:?}", p.errors);
    let c = notice(&p, "NoUpstreams");
    assert_eq!(c.status, status::TRUE);
    assert!(
        c.message.contains("spec.networkConfig.dnsServers") && c.message.contains("SERVFAIL"),
        "{}",
        c.message
    );
    // Without DNS there is nothing to forward.
    let no_dns = plan_of(
        older_api_infra()
            .remove("/spec/networkConfig/dnsServers")
            .dns(json!({"enabled": false})),
    );
    assert_eq!(notice(&no_dns, "NoUpstreams").status, status::FALSE);
}

#[test]
fn status_says_whether_an_attachments_workers_are_known() {
    let i = plan_support::infra("oooi", "vlan200");
    let atts = [
        attachment("oooi", "c1", "vlan200", "c1"),
        attachment("oooi", "c2", "vlan200", "c2"),
    ];
    let p = plan::plan_infra(&i, &atts, &observed(&[("c1", &["192.0.2.150"])]));
    let known = |name: &str| {
        p.attachment_conditions(name)
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == "WorkersKnown")
            .unwrap()
    };
    assert_eq!(known("c1").status, status::TRUE);
    assert!(known("c1").message.starts_with("1 worker addresses"));
    assert_eq!(known("c2").status, status::FALSE);
    assert!(known("c2").message.contains("kubernetes aliases"));
}

// ---- render as a CI gate ----

const ATTACHMENT: &str = r#"
---
apiVersion: hostedcluster.densityops.com/v1alpha1
kind: InfraClusterAttachment
metadata: {name: mycluster, namespace: clusters}
spec:
  infraRef: {name: vlan100}
  hostedClusterRef: {name: mycluster, namespace: clusters}
  dns: {clusterName: mycluster, baseDomain: example.com}
"#;

fn render(text: &str, extra: &[&str]) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("m.yaml");
    std::fs::write(&file, text).unwrap();
    Command::new(env!("CARGO_BIN_EXE_oooi-controller"))
        .arg("render")
        .arg("-f")
        .arg(&file)
        .args(extra)
        .env_remove("OOOI_FILTER_WASM")
        .env("OOOI_DHCP_IMAGE", "r/oooi-dhcp:0.1.0")
        .env("OOOI_DNS_IMAGE", "r/oooi-dns:0.1.0")
        .env("OOOI_PROXY_IMAGE", "r/oooi-proxy:0.1.0")
        .output()
        .unwrap()
}

fn summary(out: &std::process::Output) -> serde_json::Value {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&String::from_utf8_lossy(&out.stdout)).unwrap();
    docs.into_iter()
        .find(|d| d["kind"] == "PlanSummary")
        .expect("a PlanSummary")
}

#[test]
fn render_of_a_valid_input_exits_zero() {
    let out = render(&format!("{}{ATTACHMENT}", older_api_infra().yaml()), &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = summary(&out);
    assert_eq!(s["verdicts"][0]["accepted"], true);
}

#[test]
fn render_of_an_invalid_infra_fails_naming_the_field() {
    let text = format!(
        "{}{ATTACHMENT}",
        older_api_infra().dhcp(json!({"leaseTime": "1d"})).yaml()
    );
    let out = render(&text, &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Infra clusters/vlan100: spec.infraComponents.dhcp.leaseTime"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "nothing printed on failure");

    // --allow-invalid prints what it can, and never calls the attachment
    // accepted while the Infra is invalid (Accepted is Unknown).
    let out = render(&text, &["--allow-invalid"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("spec.infraComponents.dhcp.leaseTime"));
    let s = summary(&out);
    assert_eq!(s["valid"], false);
    assert_eq!(s["verdicts"][0]["accepted"], false);
    assert_eq!(s["attachments"]["accepted"], 0);
    let accepted = s["verdicts"][0]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Accepted")
        .unwrap()
        .clone();
    assert_eq!(accepted["status"], "Unknown");
}

#[test]
fn render_with_an_excluded_attachment_fails_naming_it() {
    let twin = ATTACHMENT.replace(
        "name: mycluster, namespace: clusters}\nspec",
        "name: twin, namespace: clusters}\nspec",
    );
    let infra = older_api_infra().yaml();
    let out = render(&format!("{infra}{ATTACHMENT}{twin}"), &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "InfraClusterAttachment clusters/mycluster: excluded (DuplicateHostedCluster)"
        ),
        "{err}"
    );
    let out = render(&format!("{infra}{ATTACHMENT}{twin}"), &["--allow-invalid"]);
    assert!(out.status.success());
}
