//! `oooi-controller render --filter-wasm`: the `<proxy>-filter` ConfigMap the
//! filter rollout writes on a fresh cluster, after the rollout's wasmtime
//! check, with the real module (`OOOI_FILTER_WASM`), through the library and
//! through the binary.

use std::path::PathBuf;
use std::process::{Command, Output};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use oooi_controller::crd::ProxyServer;
use oooi_controller::plan::proxy::filter::{self as rollout, Deployed, Module, Target, Verdict};
use oooi_controller::render::{self, FilterInput, RenderInput};
use serde_json::Value;

const NS: &str = "oooi";
const PROXY: &str = "vlan200-proxy";

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name)
}

fn module() -> Vec<u8> {
    let path = oooi_tests::filter_wasm().expect("the filter module is built");
    std::fs::read(path).expect("the filter module is readable")
}

/// An empty but valid wasm module: it compiles, and exports nothing.
const EMPTY_MODULE: &[u8] = b"\0asm\x01\0\0\0";

fn input(file: &str, filter: Option<FilterInput>) -> RenderInput {
    let mut input = RenderInput {
        filter,
        ..RenderInput::default()
    };
    input.add_file(&example(file)).expect("example parses");
    input
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

fn typed<T: serde::de::DeserializeOwned>(v: &Value) -> T {
    serde_json::from_value(v.clone()).expect("a valid object")
}

/// `oooi-controller render -f <example> <args>`, without the caller's module.
fn render_bin(file: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_oooi-controller"))
        .env_remove("OOOI_FILTER_WASM")
        .env_remove("OOOI_PUSH_TOKEN")
        .args(["render", "-f"])
        .arg(example(file))
        .args(args)
        .output()
        .expect("oooi-controller runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_checked_module_is_rendered_as_the_rollout_writes_it_and_the_deployment_projects_it() {
    let bytes = module();
    let sha = oooi_envoy::module_sha256(&bytes);
    let key = oooi_envoy::module_file_name(&bytes);
    assert!(key.starts_with("oooi-sni-router-") && key.ends_with(".wasm"));
    let with = render::render(
        &input("two-clusters.yaml", Some(FilterInput::new(bytes.clone()))),
        render::OFFLINE_PUSH_TOKEN,
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
    // The only note is the DHCP inventory token's (no filter note).
    assert_eq!(with.notes.len(), 1, "{:?}", with.notes);
    assert!(
        with.notes[0].starts_with("the DHCP inventory token Secret(s)"),
        "{:?}",
        with.notes
    );

    let cm_value = find(&with.objects, "ConfigMap", &format!("{PROXY}-filter"))
        .expect("the filter ConfigMap is rendered");
    let cm: ConfigMap = typed(cm_value);
    assert_eq!(cm.metadata.namespace.as_deref(), Some(NS));
    // The module under its versioned key, and no previous module.
    let data = cm.binary_data.clone().expect("binaryData");
    assert_eq!(data.keys().collect::<Vec<_>>(), [&key]);
    assert_eq!(data[&key].0, bytes);
    let annotations = cm.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations.get(rollout::ACTIVE_ANNOTATION), Some(&sha));
    assert_eq!(annotations.get(rollout::PREVIOUS_ANNOTATION), None);
    assert_eq!(
        Deployed::from_config_map(&cm),
        Deployed {
            active: Some(Module::new(bytes.clone())),
            previous: None,
        }
    );

    // Exactly what the rollout's planner writes for a first rollout of the
    // module to the ProxyServer render prints.
    let proxy: ProxyServer = typed(find(&with.objects, "ProxyServer", PROXY).expect("proxy"));
    let first = rollout::plan(
        Deployed::default(),
        Target::Switch(Module::new(bytes.clone())),
        Some(Verdict::Passed),
    );
    assert_eq!(first.config_map(&proxy), Some(cm.clone()));

    // The Deployment's config volume projects it, beside the Envoy Secret.
    let deployment: Deployment = typed(find(&with.objects, "Deployment", PROXY).expect("dep"));
    let volumes = deployment
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| s.volumes)
        .expect("volumes");
    let sources = volumes
        .iter()
        .find(|v| v.name == "envoy-config")
        .and_then(|v| v.projected.clone())
        .and_then(|p| p.sources)
        .expect("the projected config volume");
    let projected: Vec<String> = sources
        .iter()
        .filter_map(|s| s.config_map.as_ref().map(|c| c.name.clone()))
        .collect();
    assert_eq!(projected, [format!("{PROXY}-filter")]);
    assert!(sources.iter().any(|s| {
        s.secret
            .as_ref()
            .is_some_and(|x| x.name == format!("{PROXY}-envoy"))
    }));
    // Labels like every other child of the proxy.
    assert_eq!(cm.metadata.labels, deployment.metadata.labels);

    // Envoy's ECDS files (in the Secret and in --out's files) name the
    // module through `..data` of that mount, with its digest.
    let secret: Secret = typed(find(&with.objects, "Secret", &format!("{PROXY}-envoy")).unwrap());
    let path = format!("/etc/oooi-envoy/..data/{key}");
    let ecds: Vec<String> = secret
        .data
        .unwrap_or_default()
        .iter()
        .filter(|(k, _)| k.starts_with("ecds_"))
        .map(|(_, v)| String::from_utf8(v.0.clone()).expect("UTF-8"))
        .collect();
    assert!(!ecds.is_empty());
    for text in &ecds {
        assert!(text.contains(&path), "{path} in {text}");
        assert!(text.contains(&sha), "{sha} in {text}");
    }
    let ecds_files: Vec<&String> = with
        .files
        .iter()
        .filter(|(p, _)| {
            p.to_string_lossy()
                .contains(&format!("{PROXY}-envoy/ecds_"))
        })
        .map(|(_, t)| t)
        .collect();
    assert_eq!(ecds_files.len(), ecds.len());
    assert!(
        ecds_files
            .iter()
            .all(|t| t.contains(&path) && t.contains(&sha))
    );

    // Everything else is what render prints without a module.
    let without = render::render(
        &input("two-clusters.yaml", None),
        render::OFFLINE_PUSH_TOKEN,
    )
    .expect("renders");
    let rest = |objects: &[Value]| -> Vec<Value> {
        objects
            .iter()
            .filter(|o| o != &cm_value && o["kind"] != "Secret")
            .cloned()
            .collect()
    };
    assert_eq!(rest(&with.objects), rest(&without.objects));
    assert_eq!(with.objects.len(), without.objects.len() + 1);
}

#[test]
fn a_module_the_check_refuses_fails_the_render_naming_the_check() {
    let dir = tempfile::tempdir().expect("temp dir");
    let garbage = dir.path().join("garbage.wasm");
    std::fs::write(&garbage, b"\0asm but not a module").expect("write");
    let out = render_bin(
        "two-clusters.yaml",
        &["--filter-wasm", garbage.to_str().expect("UTF-8 path")],
    );
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "nothing is printed on refusal");
    let err = stderr(&out);
    assert!(
        err.contains("refused by the pre-rollout check `Compile`"),
        "{err}"
    );

    // A module that compiles but lacks the ABI fails the next check.
    let e = render::render(
        &input(
            "two-clusters.yaml",
            Some(FilterInput::new(EMPTY_MODULE.to_vec())),
        ),
        render::OFFLINE_PUSH_TOKEN,
    )
    .expect_err("an empty module is refused");
    let e = format!("{e:#}");
    assert!(
        e.contains("refused by the pre-rollout check `AbiVersion`"),
        "{e}"
    );
    assert!(e.contains(&oooi_envoy::module_sha256(EMPTY_MODULE)), "{e}");
}

#[test]
fn skip_filter_check_renders_an_unchecked_module_and_says_so() {
    let dir = tempfile::tempdir().expect("temp dir");
    let empty = dir.path().join("empty.wasm");
    std::fs::write(&empty, EMPTY_MODULE).expect("write");
    let out = render_bin(
        "two-clusters.yaml",
        &[
            "--filter-wasm",
            empty.to_str().expect("UTF-8 path"),
            "--skip-filter-check",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("was not checked"), "{}", stderr(&out));
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&String::from_utf8_lossy(&out.stdout)).expect("YAML");
    let cm: ConfigMap = typed(find(&docs, "ConfigMap", &format!("{PROXY}-filter")).expect("cm"));
    let data = cm.binary_data.expect("binaryData");
    assert_eq!(
        data.get(&oooi_envoy::module_file_name(EMPTY_MODULE))
            .map(|b| b.0.as_slice()),
        Some(EMPTY_MODULE)
    );
}

#[test]
fn a_pin_to_another_module_is_refused_with_the_rollouts_reason() {
    let rendered = render::render(
        &input("two-clusters.yaml", None),
        render::OFFLINE_PUSH_TOKEN,
    )
    .expect("renders");
    let mut proxy: ProxyServer = typed(find(&rendered.objects, "ProxyServer", PROXY).unwrap());
    proxy.spec.filter.pinned_sha256 = Some("f".repeat(64));
    let mut filter = FilterInput::new(EMPTY_MODULE.to_vec());
    // The pin decides before any check would.
    filter.check = false;
    let standalone = RenderInput {
        proxy_servers: vec![proxy],
        filter: Some(filter),
        ..RenderInput::default()
    };
    let e = render::render(&standalone, render::OFFLINE_PUSH_TOKEN).expect_err("pin not found");
    let e = format!("{e:#}");
    assert!(e.contains("oooi/vlan200-proxy"), "{e}");
    assert!(e.contains("PinnedModuleNotFound"), "{e}");
}

#[test]
fn without_the_flag_a_note_names_the_missing_config_map_and_nothing_else_changes() {
    let out = render_bin("two-clusters.yaml", &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.starts_with("note: the filter ConfigMap oooi/vlan200-proxy-filter "),
        "{err}"
    );
    assert!(err.contains("not included"), "{err}");
    assert!(err.contains("--filter-wasm PATH"), "{err}");
    // ... beside the one every DHCP server brings: its inventory token.
    assert_eq!(err.lines().count(), 2, "{err}");
    assert!(
        err.lines().nth(1).is_some_and(|l| l
            .starts_with("note: the DHCP inventory token Secret(s) vlan200-dhcp-inventory-token")),
        "{err}"
    );
    // stdout is the plain render, with no filter ConfigMap.
    let plain = render::render(
        &input("two-clusters.yaml", None),
        render::OFFLINE_PUSH_TOKEN,
    )
    .expect("renders");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        render::to_yaml(&plain).expect("YAML")
    );
    assert!(find(&plain.objects, "ConfigMap", &format!("{PROXY}-filter")).is_none());
    // Envoy's config still names the default key, with the zero digest.
    let secret: Secret = typed(find(&plain.objects, "Secret", &format!("{PROXY}-envoy")).unwrap());
    let data = secret.data.unwrap_or_default();
    let ecds = data
        .iter()
        .find(|(k, _)| k.starts_with("ecds_"))
        .map(|(_, v)| String::from_utf8_lossy(&v.0).into_owned())
        .expect("an ECDS file");
    assert!(
        ecds.contains("/etc/oooi-envoy/..data/oooi_sni_router.wasm"),
        "{ecds}"
    );
    assert!(
        ecds.contains(oooi_controller::plan::proxy::UNKNOWN_MODULE_SHA256),
        "{ecds}"
    );

    // No proxy, no note.
    let out = render_bin("standalone-dns.yaml", &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
}
