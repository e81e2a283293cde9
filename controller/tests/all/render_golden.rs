//! `render`'s output for every example, byte for byte, against the output
//! checked in under `controller/tests/render-golden/`.
//!
//! A change that only moves code (a new module layout, a shared type in
//! place of a string) must leave every rendered object as it was; this test
//! is how such a change shows it. A change that means to alter the output
//! regenerates the files with `OOOI_BLESS_RENDER=1 cargo test -p
//! oooi-controller --test all render_golden` and commits them, so the
//! review sees the rendered difference beside the code.

#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

use std::path::{Path, PathBuf};
use std::process::Command;

/// Images pinned so the output does not follow the build's revision.
const IMAGES: [&str; 6] = [
    "--dhcp-image",
    "registry.example.com/oooi/oooi-dhcp:golden",
    "--dns-image",
    "registry.example.com/oooi/oooi-dns:golden",
    "--proxy-image",
    "registry.example.com/oooi/oooi-proxy:golden",
];

/// One rendering: the input, the flags beyond the pinned images, and the
/// golden file's suffix.
struct Case {
    input: PathBuf,
    flags: &'static [&'static str],
    suffix: &'static str,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/render-golden")
}

fn inputs() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("examples"))
        .expect("examples/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files.push(root().join("lab/two-clusters.yaml"));
    files
}

const DEFAULTS: &str = r#"{"nodeSelector": {"vlan.example.com/trunk": "true"}, "tolerations": [{"key": "vlan", "operator": "Exists", "effect": "NoSchedule"}], "priorityClassName": "system-cluster-critical"}"#;
const RESOURCES: &str = r#"{"proxy": {"requests": {"cpu": "200m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}, "dhcp": {"requests": {"cpu": "50m", "memory": "64Mi"}}}"#;

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for input in inputs() {
        cases.push(Case {
            input: input.clone(),
            flags: &[],
            suffix: "",
        });
        cases.push(Case {
            input: input.clone(),
            flags: &["--gitops"],
            suffix: ".gitops",
        });
        cases.push(Case {
            input,
            flags: &[
                "--component-placement",
                DEFAULTS,
                "--component-resources",
                RESOURCES,
                "--controller-namespace",
                "platform-oooi",
                "--metrics-scraper-namespace-labels",
                "monitoring=yes,tier=platform",
                "--metrics-scraper-pod-labels",
                "app=prometheus",
            ],
            suffix: ".defaults",
        });
    }
    cases
}

fn golden_name(case: &Case) -> String {
    let stem = case.input.file_stem().unwrap().to_string_lossy();
    let parent = case
        .input
        .parent()
        .and_then(Path::file_name)
        .unwrap()
        .to_string_lossy();
    format!("{parent}-{stem}{}.yaml", case.suffix)
}

fn render(case: &Case) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_oooi-controller"))
        .arg("render")
        .arg("--file")
        .arg(&case.input)
        .args(IMAGES)
        .args(case.flags)
        .env_remove("OOOI_PUSH_TOKEN")
        .env_remove("OOOI_FILTER_WASM")
        .env_remove("OOOI_DHCP_IMAGE")
        .env_remove("OOOI_DNS_IMAGE")
        .env_remove("OOOI_PROXY_IMAGE")
        .env_remove("OOOI_COMPONENT_PLACEMENT")
        .env_remove("OOOI_COMPONENT_RESOURCES")
        .env_remove("OOOI_METRICS_SCRAPER_NAMESPACE_LABELS")
        .env_remove("OOOI_METRICS_SCRAPER_POD_LABELS")
        .output()
        .expect("run oooi-controller render");
    assert!(
        out.status.success(),
        "render {} {:?}: {}",
        case.input.display(),
        case.flags,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("render prints UTF-8")
}

/// The first line where two texts part, with a little of each around it.
fn first_difference(want: &str, got: &str) -> String {
    let (w, g): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
    let at = w
        .iter()
        .zip(&g)
        .position(|(a, b)| a != b)
        .unwrap_or(w.len().min(g.len()));
    let show = |lines: &[&str]| {
        lines[at.saturating_sub(3)..(at + 3).min(lines.len())]
            .iter()
            .map(|l| format!("    {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    format!(
        "first difference at line {} ({} lines checked in, {} rendered)\n  checked in:\n{}\n  rendered:\n{}",
        at + 1,
        w.len(),
        g.len(),
        show(&w),
        show(&g)
    )
}

#[test]
fn render_output_is_unchanged_for_every_example() {
    let bless = std::env::var_os("OOOI_BLESS_RENDER").is_some_and(|v| v == "1");
    let dir = golden_dir();
    let cases = cases();
    assert!(cases.len() >= 9, "{} cases", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let got = render(case);
        let path = dir.join(golden_name(case));
        if bless {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &got).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(want) if want == got => {}
            Ok(want) => failures.push(format!(
                "{} differs from render --file {} {:?}:\n{}",
                path.display(),
                case.input.display(),
                case.flags,
                first_difference(&want, &got)
            )),
            Err(e) => failures.push(format!("{}: {e}", path.display())),
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n\nIf the change means to alter render's output, regenerate with \
         OOOI_BLESS_RENDER=1 and commit the files.",
        failures.join("\n\n")
    );
}

#[test]
fn every_golden_file_belongs_to_a_case() {
    let wanted: Vec<String> = cases().iter().map(golden_name).collect();
    let stale: Vec<String> = std::fs::read_dir(golden_dir())
        .expect("controller/tests/render-golden exists")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| !wanted.contains(name))
        .collect();
    assert!(
        stale.is_empty(),
        "golden files with no example behind them: {stale:?}"
    );
}

#[test]
fn first_difference_names_the_line() {
    let text = first_difference("a\nb\nc\n", "a\nB\nc\n");
    assert!(text.starts_with("first difference at line 2"), "{text}");
    assert!(text.contains("    b") && text.contains("    B"), "{text}");
    let shorter = first_difference("a\nb\n", "a\n");
    assert!(
        shorter.starts_with("first difference at line 2"),
        "{shorter}"
    );
}
