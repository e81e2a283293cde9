//! `render --gitops` (output a GitOps tool applies as it is) and rendering an
//! attachment without its Infra.

#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

use std::path::PathBuf;
use std::process::Command;

use oooi_controller::render::{self, RenderInput};
use serde_json::Value;

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name)
}

fn input(file: &str, gitops: bool) -> RenderInput {
    let mut input = RenderInput {
        gitops,
        ..RenderInput::default()
    };
    input.add_file(&example(file)).unwrap();
    input
}

#[test]
fn gitops_output_has_no_plan_summary_and_no_secret() {
    let full = render::render(
        &input("two-clusters.yaml", false),
        render::OFFLINE_PUSH_TOKEN,
    )
    .unwrap();
    assert!(full.objects.iter().any(|o| o["kind"] == "PlanSummary"));
    assert!(full.objects.iter().any(|o| o["kind"] == "Secret"));
    let out = render::render(
        &input("two-clusters.yaml", true),
        render::OFFLINE_PUSH_TOKEN,
    )
    .unwrap();
    assert!(!out.objects.is_empty());
    for o in &out.objects {
        assert_ne!(o["kind"], "PlanSummary", "{o}");
        assert_ne!(o["kind"], "Secret", "{o}");
    }
    let yaml = render::to_yaml(&out).unwrap();
    assert!(
        !yaml.contains(render::OFFLINE_PUSH_TOKEN),
        "the placeholder token is in the GitOps output"
    );
    // Everything else is what the full render prints, in the same order.
    let kept: Vec<&Value> = full
        .objects
        .iter()
        .filter(|o| o["kind"] != "PlanSummary" && o["kind"] != "Secret")
        .collect();
    assert_eq!(kept, out.objects.iter().collect::<Vec<_>>());
}

#[test]
fn gitops_notes_name_each_left_out_secret_and_the_verdicts() {
    let out = render::render(
        &input("two-clusters.yaml", true),
        render::OFFLINE_PUSH_TOKEN,
    )
    .unwrap();
    let full = render::render(
        &input("two-clusters.yaml", false),
        render::OFFLINE_PUSH_TOKEN,
    )
    .unwrap();
    for s in full.objects.iter().filter(|o| o["kind"] == "Secret") {
        let name = s["metadata"]["name"].as_str().unwrap();
        assert!(
            out.notes
                .iter()
                .any(|n| n.contains(name) && n.contains("controller writes it")),
            "no note names Secret {name}: {:?}",
            out.notes
        );
    }
    assert!(
        out.notes
            .iter()
            .any(|n| n.contains("InfraClusterAttachment") && n.ends_with(": accepted")),
        "{:?}",
        out.notes
    );
    assert!(out.problems.is_empty(), "{:?}", out.problems);
}

fn attachment_only() -> String {
    let text = std::fs::read_to_string(example("single-cluster.yaml")).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    let att: Vec<Value> = docs
        .into_iter()
        .filter(|d| d["kind"] == "InfraClusterAttachment")
        .collect();
    assert!(!att.is_empty(), "single-cluster.yaml has an attachment");
    att.iter()
        .map(|d| format!("---\n{}", serde_saphyr::to_string(d).unwrap()))
        .collect()
}

#[test]
fn attachment_without_its_infra_is_a_problem_naming_the_ref() {
    let mut input = RenderInput::default();
    input
        .add_yaml("attachment.yaml", &attachment_only())
        .unwrap();
    let out = render::render(&input, render::OFFLINE_PUSH_TOKEN).unwrap();
    assert_eq!(
        out.problems.len(),
        input.attachments.len(),
        "{:?}",
        out.problems
    );
    let want = &input.attachments[0].spec.infra_ref.name;
    assert!(
        out.problems[0].contains("spec.infraRef.name") && out.problems[0].contains(want.as_str()),
        "{:?}",
        out.problems
    );
    // With its Infra, no such problem.
    let out = render::render(&input_with_infra(), render::OFFLINE_PUSH_TOKEN).unwrap();
    assert!(out.problems.is_empty(), "{:?}", out.problems);
}

fn input_with_infra() -> RenderInput {
    let mut input = RenderInput::default();
    input.add_file(&example("single-cluster.yaml")).unwrap();
    input
}

#[test]
fn render_binary_exits_non_zero_for_an_attachment_without_its_infra() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("attachment.yaml");
    std::fs::write(&file, attachment_only()).unwrap();
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_oooi-controller"))
            .arg("render")
            .arg("-f")
            .arg(&file)
            .args(extra)
            .output()
            .unwrap()
    };
    let out = run(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("is not in the input"), "{stderr}");
    let out = run(&["--allow-invalid"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("is not in the input"), "{stderr}");
}

#[test]
fn render_binary_gitops_refuses_a_push_token() {
    let out = Command::new(env!("CARGO_BIN_EXE_oooi-controller"))
        .args([
            "render",
            "--gitops",
            "--push-token",
            "abcdefghijklmnopqrstuvwxyz0123456789",
        ])
        .arg("-f")
        .arg(example("single-cluster.yaml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--push-token"), "{stderr}");
}
