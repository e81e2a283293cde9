//! The Pod Security Admission levels docs/installation.md documents per
//! namespace hold for every pod the controller plans: each Deployment that
//! `render` prints for the examples is checked with the Pod Security model
//! (`plan::workload::pod_security`) against the level the docs give its namespace, and
//! the namespace label the prerequisites apply is that level.

#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

use std::path::PathBuf;

use k8s_openapi::api::apps::v1::Deployment;
use oooi_controller::plan::workload::pod_security::{Level, level, restricted_violations};
use oooi_controller::render::{self, RenderInput};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn parse_level(cell: &str) -> Level {
    match cell.trim().trim_matches('`') {
        "restricted" => Level::Restricted,
        "baseline" => Level::Baseline,
        "privileged" => Level::Privileged,
        other => panic!("docs/installation.md: unknown Pod Security level {other:?}"),
    }
}

/// (first cell, level) of each row of the Pod Security Admission table.
fn documented() -> Vec<(String, Level)> {
    let text = std::fs::read_to_string(root().join("docs/installation.md")).unwrap();
    let section = text
        .split("\n### Pod Security Admission\n")
        .nth(1)
        .expect("docs/installation.md has a Pod Security Admission section")
        .split("\n### ")
        .next()
        .unwrap();
    section
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| namespace") && !l.starts_with("| ---"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').collect();
            (cells[0].trim().to_string(), parse_level(cells[1]))
        })
        .collect()
}

fn documented_level(row: &str) -> Level {
    documented()
        .into_iter()
        .find(|(first, _)| first.contains(row))
        .unwrap_or_else(|| panic!("no row for {row:?} in {:?}", documented()))
        .1
}

fn has_net_admin(spec: &k8s_openapi::api::core::v1::PodSpec) -> bool {
    // The address agent is a native sidecar: an init container.
    spec.init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .any(|c| {
            c.security_context
                .as_ref()
                .and_then(|s| s.capabilities.as_ref())
                .and_then(|c| c.add.as_ref())
                .is_some_and(|add| add.iter().any(|a| a == "NET_ADMIN"))
        })
}

#[test]
fn every_planned_pod_meets_the_level_documented_for_its_namespace() {
    let infra_ns = documented_level("each Infra's namespace");
    let agent_ns = documented_level("address agent");
    let mut examples: Vec<PathBuf> = std::fs::read_dir(root().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    examples.sort();
    let mut checked = 0;
    for file in &examples {
        let mut input = RenderInput::default();
        input.add_file(file).unwrap();
        let out = render::render(&input, render::OFFLINE_PUSH_TOKEN).unwrap();
        for obj in out.objects.iter().filter(|o| o["kind"] == "Deployment") {
            let d: Deployment = serde_json::from_value(obj.clone()).unwrap();
            let name = d.metadata.name.clone().unwrap_or_default();
            let spec = d.spec.unwrap().template.spec.unwrap();
            let want = if has_net_admin(&spec) {
                agent_ns
            } else {
                infra_ns
            };
            let have = level(&spec);
            assert!(
                have <= want,
                "{}: Deployment {name} needs Pod Security {}, the docs give its namespace {}: {:?}",
                file.display(),
                have.as_str(),
                want.as_str(),
                restricted_violations(&spec)
            );
            checked += 1;
        }
    }
    assert!(checked >= 10, "only {checked} pods checked");
}

#[test]
fn the_prerequisites_label_the_infra_namespace_with_the_documented_level() {
    let want = documented_level("each Infra's namespace");
    let text = std::fs::read_to_string(root().join("docs/prerequisites.md")).unwrap();
    let label = text
        .lines()
        .find_map(|l| l.split("pod-security.kubernetes.io/enforce=").nth(1))
        .expect("docs/prerequisites.md labels the Infra namespace");
    assert_eq!(parse_level(label.split_whitespace().next().unwrap()), want);
}

#[test]
fn the_documented_table_names_the_three_namespaces() {
    let rows = documented();
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(documented_level("release namespace"), Level::Restricted);
    assert_eq!(
        documented_level("each Infra's namespace"),
        Level::Restricted
    );
    assert_eq!(documented_level("address agent"), Level::Privileged);
}
