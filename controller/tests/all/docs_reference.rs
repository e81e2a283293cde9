//! The CR reference pages committed under `docs/reference/` are exactly what
//! `oooi-controller docs-reference` generates from the CRD schemas, so the
//! reference cannot drift from the API; and the generator really lists every
//! field of the schemas with its type, default and validation.

use std::collections::BTreeSet;
use std::path::PathBuf;

use oooi_controller::{crd, docs_reference};
use serde_json::Value;

const REGENERATE: &str =
    "regenerate with: cargo run -p oooi-controller -- docs-reference --out docs/reference";

fn reference_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/reference")
}

#[test]
fn committed_reference_pages_match_the_crds() {
    let dir = reference_dir();
    let generated = docs_reference::pages().expect("pages generate");
    let mut expected = BTreeSet::new();
    for (name, text) in &generated {
        expected.insert(name.clone());
        let path = dir.join(name);
        let committed = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{} is missing ({e}); {REGENERATE}", path.display()));
        if committed != *text {
            let line = committed
                .lines()
                .zip(text.lines())
                .position(|(a, b)| a != b)
                .map_or_else(
                    || committed.lines().count().min(text.lines().count()) + 1,
                    |i| i + 1,
                );
            panic!(
                "{} drifted from the CRD schemas (first difference at line {line}); {REGENERATE}",
                path.display()
            );
        }
    }
    let present: BTreeSet<String> = std::fs::read_dir(&dir)
        .expect("docs/reference exists")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .collect();
    let stale: Vec<&String> = present.difference(&expected).collect();
    assert!(
        stale.is_empty(),
        "stale reference pages {stale:?}; {REGENERATE}"
    );
}

/// Every field path of a schema, as the pages spell them (`a.b[].c`, maps as `.<key>`).
fn field_paths(path: &str, s: &Value, out: &mut Vec<String>) {
    if let Some(props) = s.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            let p = format!("{path}.{k}");
            out.push(p.clone());
            field_paths(&p, v, out);
        }
    }
    if let Some(items) = s.get("items") {
        field_paths(&format!("{path}[]"), items, out);
    }
    if let Some(values) = s.get("additionalProperties").filter(|v| v.is_object()) {
        field_paths(&format!("{path}.<key>"), values, out);
    }
}

#[test]
fn every_schema_field_has_a_row() {
    let pages = docs_reference::pages().expect("pages generate");
    let mut checked = 0;
    for c in crd::crds() {
        let file = docs_reference::page_file(&c.spec.names.kind);
        let page = &pages
            .iter()
            .find(|(n, _)| *n == file)
            .unwrap_or_else(|| panic!("no page {file}"))
            .1;
        let schema = serde_json::to_value(&c.spec.versions[0]).expect("serialises")["schema"]
            ["openAPIV3Schema"]
            .clone();
        let mut paths = Vec::new();
        field_paths("", &schema, &mut paths);
        for p in paths {
            let p = p.trim_start_matches('.');
            assert!(
                page.contains(&format!("| `{p}` | ")),
                "{file}: no row for `{p}`"
            );
            checked += 1;
        }
    }
    assert!(checked > 150, "only {checked} fields in the CRDs?");
}

/// The row of `path` on the page of `kind`, split into its five cells.
fn row(kind: &str, path: &str) -> Vec<String> {
    let text = docs_reference::page(
        &crd::crds()
            .into_iter()
            .find(|c| c.spec.names.kind == kind)
            .expect("kind exists"),
    )
    .expect("page generates");
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("| `{path}` | ")))
        .unwrap_or_else(|| panic!("{kind}: no row for {path}"));
    line.trim_matches('|')
        .split(" | ")
        .map(|c| c.trim().to_string())
        .collect()
}

#[test]
fn rows_carry_type_default_validation_and_description() {
    let lease = row("Infra", "spec.infraComponents.dhcp.leaseTime");
    assert_eq!(lease[1], "`int-or-string`");
    assert_eq!(lease[2], "`3600`");
    assert!(lease[4].contains("a duration (`1h`, `30m`"), "{lease:?}");

    let cidr = row("Infra", "spec.networkConfig.cidr");
    assert!(cidr[3].contains("required"), "{cidr:?}");
    assert!(cidr[3].contains("pattern [P"), "{cidr:?}");

    let mode = row("InfraClusterAttachment", "spec.appsIngress.metallb.mode");
    assert_eq!(mode[2], "`External`");
    assert_eq!(mode[3], "one of `Managed`, `External`");

    let addresses = row(
        "InfraClusterAttachment",
        "spec.appsIngress.metallb.addresses",
    );
    assert_eq!(addresses[1], "`[]string`");
    assert!(
        addresses[3].starts_with("items: pattern [P"),
        "{addresses:?}"
    );

    let name = row("InfraClusterAttachment", "spec.services[].name");
    assert!(name[3].starts_with("required; min length 1"), "{name:?}");
}

#[test]
fn every_named_pattern_is_listed_with_its_expression() {
    for (name, text) in docs_reference::pages().expect("pages generate") {
        // Links `[P<n>](#p<n>)`; other links (`[ProxyServer](…)`) are not patterns.
        let used: BTreeSet<&str> = text
            .match_indices("[P")
            .map(|(i, _)| {
                let rest = &text[i + 1..];
                &rest[..rest.find(']').expect("closed link")]
            })
            .filter(|name| name.len() > 1 && name[1..].bytes().all(|b| b.is_ascii_digit()))
            .collect();
        assert!(
            name == "index.md" || !used.is_empty(),
            "{name}: no field names a pattern"
        );
        for p in used {
            let heading = format!("### {p}\n\n```text\n^");
            assert!(
                text.contains(&heading),
                "{name}: {p} is used but not listed"
            );
        }
    }
}
