//! Every oooi manifest the docs show is one `oooi-controller render` accepts:
//! each YAML block on every page (`docs/**/*.md`) that holds an object of our
//! API group renders on its own, and with the other blocks of its page; every
//! attachment a page shows joins an Infra that page shows. The Examples page
//! shows every file of `examples/` verbatim, and nothing else.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const GROUP_API: &str = "apiVersion: hostedcluster.densityops.com/";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// One fenced YAML block of a page.
#[derive(Debug)]
struct Block {
    page: String,
    line: usize,
    body: String,
}

/// The ```` ```yaml ```` blocks of a Markdown text (fences may be indented,
/// as inside list items; the indent is removed from the body).
fn yaml_blocks(page: &str, text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((i, line)) = lines.next() {
        let indent = line.len() - line.trim_start().len();
        let info = line.trim_start();
        if !(info.starts_with("```yaml") || info.starts_with("```yml")) {
            continue;
        }
        let mut body = String::new();
        for (_, l) in lines.by_ref() {
            if l.trim_start().starts_with("```") {
                break;
            }
            body.push_str(l.get(indent..).unwrap_or(l.trim_start()));
            body.push('\n');
        }
        out.push(Block {
            page: page.to_string(),
            line: i + 1,
            body,
        });
    }
    out
}

fn pages() -> Vec<(String, String)> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<(String, String)>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, base, out);
            } else if p.extension().is_some_and(|e| e == "md") {
                let name = p.strip_prefix(base).unwrap_or(&p).display().to_string();
                let text = std::fs::read_to_string(&p).expect("page is UTF-8");
                out.push((name, text));
            }
        }
    }
    let docs = root().join("docs");
    let mut out = Vec::new();
    walk(&docs, &docs, &mut out);
    out
}

/// The blocks that hold oooi objects, on every page.
fn oooi_blocks() -> Vec<Block> {
    pages()
        .iter()
        .flat_map(|(page, text)| yaml_blocks(page, text))
        .filter(|b| b.body.contains(GROUP_API))
        .collect()
}

fn documents(source: &str, text: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text)
        .unwrap_or_else(|e| panic!("{source}: not valid YAML: {e}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// Runs the real `oooi-controller render` over `text`; the parsed output.
fn render(source: &str, text: &str) -> Result<Vec<Value>, String> {
    render_with(source, text, &[])
}

/// `render` with extra arguments.
fn render_with(source: &str, text: &str, args: &[&str]) -> Result<Vec<Value>, String> {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("manifests.yaml");
    std::fs::write(&file, text).expect("write manifests");
    let out = Command::new(env!("CARGO_BIN_EXE_oooi-controller"))
        .arg("render")
        .arg("-f")
        .arg(&file)
        .args(args)
        // The rendered filter digest must not depend on the caller's build.
        .env_remove("OOOI_FILTER_WASM")
        // The docs leave component images to the chart, which hands them to the controller.
        .env(
            "OOOI_DHCP_IMAGE",
            "registry.example.com/oooi/oooi-dhcp:0.1.0",
        )
        .env("OOOI_DNS_IMAGE", "registry.example.com/oooi/oooi-dns:0.1.0")
        .env(
            "OOOI_PROXY_IMAGE",
            "registry.example.com/oooi/oooi-proxy:0.1.0",
        )
        .output()
        .expect("oooi-controller runs");
    if !out.status.success() {
        return Err(format!(
            "{source}: `oooi-controller render` refused it:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(documents(
        &format!("render output of {source}"),
        &String::from_utf8_lossy(&out.stdout),
    ))
}

fn key(doc: &Value) -> (String, String) {
    let ns = doc["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_string();
    let name = doc["metadata"]["name"].as_str().unwrap_or("").to_string();
    (ns, name)
}

#[test]
fn the_fence_reader_finds_indented_blocks() {
    let text = "intro\n\n```yaml\na: 1\n```\n\n1. step\n\n    ```yaml\n    b:\n      c: 2\n    ```\n\n```sh\nls\n```\n";
    let blocks = yaml_blocks("t.md", text);
    assert_eq!(blocks.len(), 2, "{blocks:?}");
    assert_eq!(blocks[0].body, "a: 1\n");
    assert_eq!(blocks[0].line, 3);
    assert_eq!(blocks[1].body, "b:\n  c: 2\n");
}

#[test]
fn render_refuses_a_bad_manifest() {
    // Guards the checks below against a render that accepts anything.
    let bad = "apiVersion: hostedcluster.densityops.com/v1alpha1\nkind: Infra\nmetadata: {name: x}\nspec:\n  netwrokConfig: {}\n";
    assert!(render("bad", bad).is_err());
}

#[test]
fn every_docs_manifest_renders_on_its_own() {
    let blocks = oooi_blocks();
    let pages: BTreeSet<&str> = blocks.iter().map(|b| b.page.as_str()).collect();
    for must in ["quickstart.md", "examples.md"] {
        assert!(
            pages.contains(must),
            "{must} shows no oooi manifest: {pages:?}"
        );
    }
    let mut failures = Vec::new();
    for b in &blocks {
        let source = format!("docs/{}:{}", b.page, b.line);
        if let Err(e) = render(&source, &b.body) {
            // An attachment shown in a block apart from its Infra fails a
            // render of that block alone, by design (render names the
            // missing Infra); the page-level test renders it with its Infra.
            let problems: Vec<&str> = e.lines().filter(|l| l.starts_with("invalid: ")).collect();
            let only_missing_infra =
                !problems.is_empty() && problems.iter().all(|l| l.contains("is not in the input"));
            if !(only_missing_infra && render_with(&source, &b.body, &["--allow-invalid"]).is_ok())
            {
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn every_docs_page_renders_as_a_whole_and_attachments_find_their_infra() {
    let blocks = oooi_blocks();
    let mut pages: Vec<&str> = blocks.iter().map(|b| b.page.as_str()).collect();
    pages.dedup();
    let mut attachments_checked = 0;
    for page in pages {
        let text: String = blocks
            .iter()
            .filter(|b| b.page == page)
            .map(|b| format!("---\n{}", b.body))
            .collect();
        // A page may show an attachment excluded on purpose (a duplicate
        // domain, say), which makes the whole page fail the render gate:
        // the Infras' validity is checked below from the summaries instead.
        let rendered = render_with(
            &format!("docs/{page} (all blocks)"),
            &text,
            &["--allow-invalid"],
        )
        .unwrap_or_else(|e| {
            panic!("{e}");
        });
        let input = documents(page, &text);
        let summaries: Vec<&Value> = rendered
            .iter()
            .filter(|d| d["kind"] == "PlanSummary")
            .collect();
        for infra in input.iter().filter(|d| d["kind"] == "Infra") {
            let k = key(infra);
            let summary = summaries
                .iter()
                .find(|s| key(s) == k)
                .unwrap_or_else(|| panic!("docs/{page}: render planned no Infra {k:?}"));
            assert_eq!(
                summary["valid"],
                Value::Bool(true),
                "docs/{page}: Infra {k:?} is invalid: {}",
                summary["degraded"]
            );
        }
        for att in input
            .iter()
            .filter(|d| d["kind"] == "InfraClusterAttachment")
        {
            let (ns, name) = key(att);
            let infra = att["spec"]["infraRef"]["name"].as_str().unwrap_or("");
            let summary = summaries
                .iter()
                .find(|s| key(s) == (ns.clone(), infra.to_string()))
                .unwrap_or_else(|| {
                    panic!(
                        "docs/{page}: attachment {ns}/{name} names Infra {infra}, which the page does not show"
                    )
                });
            let verdicts = summary["verdicts"].as_array().cloned().unwrap_or_default();
            assert!(
                verdicts.iter().any(|v| v["name"] == name.as_str()),
                "docs/{page}: attachment {ns}/{name} is not in the plan of {infra}: {verdicts:?}"
            );
            attachments_checked += 1;
        }
    }
    assert!(
        attachments_checked >= 3,
        "only {attachments_checked} attachments in the docs"
    );
}

#[test]
fn examples_page_shows_every_example_file_verbatim() {
    let dir = root().join("examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("examples/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "examples: {files:?}");
    let page = std::fs::read_to_string(root().join("docs/examples.md")).expect("docs/examples.md");
    let shown: Vec<String> = yaml_blocks("examples.md", &page)
        .into_iter()
        .filter(|b| b.body.contains(GROUP_API))
        .map(|b| b.body)
        .collect();
    let mut matched = BTreeSet::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("example is UTF-8");
        let name = f.file_name().unwrap_or_default().to_string_lossy();
        let i = shown.iter().position(|b| b.trim_end() == text.trim_end());
        let Some(i) = i else {
            panic!(
                "docs/examples.md does not show examples/{name} as it is (copy the file into a ```yaml block)"
            );
        };
        assert!(
            page.contains(&format!("`examples/{name}`")),
            "docs/examples.md shows examples/{name} without naming the file"
        );
        matched.insert(i);
    }
    let stale: Vec<usize> = (0..shown.len()).filter(|i| !matched.contains(i)).collect();
    assert!(
        stale.is_empty(),
        "docs/examples.md shows {} manifest blocks that are no file of examples/ (stale copies?)",
        stale.len()
    );
}
