//! The OLM bundle: built from the same sources as the chart, valid by the
//! rules OLM and OperatorHub check, and every image by digest.

#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

use oooi_controller::olm::check::{self, Problem};
use oooi_controller::olm::{self, BundleImage, BundleImages, BundleInput, csv};
use oooi_controller::plan::infra::images::DefaultImages;
use oooi_controller::render::{self, RenderInput};
use serde_json::{Value, json};

const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn images() -> BundleImages {
    let entries: Vec<String> = BundleImage::ALL
        .iter()
        .map(|i| {
            format!(
                "{}=registry.example.com/oooi/{}@{DIGEST}",
                i.name(),
                i.repository()
            )
        })
        .collect();
    BundleImages::parse(entries.iter().map(String::as_str)).unwrap()
}

fn input() -> BundleInput {
    BundleInput {
        version: "0.2.0".into(),
        images: images(),
        edge: csv::UpgradeEdge {
            replaces: Some("0.1.0".into()),
            skip_range: None,
        },
        filter_wasm: b"\0asm\x01\0\0\0".to_vec(),
    }
}

fn built() -> olm::Bundle {
    olm::bundle(&input()).unwrap_or_else(|e| panic!("{e:#}"))
}

/// The rules `csv` breaks (with the bundle's own other manifests).
fn rules_broken(csv: &Value) -> Vec<&'static str> {
    let mut rules: Vec<&str> = check::check(csv, &built().manifests)
        .into_iter()
        .map(|p: Problem| p.rule)
        .collect();
    rules.dedup();
    rules
}

fn broken(change: impl FnOnce(&mut Value)) -> Vec<Problem> {
    let mut csv = built().csv;
    change(&mut csv);
    check::check(&csv, &built().manifests)
}

fn assert_breaks(rule: &str, change: impl FnOnce(&mut Value)) {
    let problems = broken(change);
    assert!(
        problems.iter().any(|p| p.rule == rule),
        "expected rule {rule} to fail, got {problems:?}"
    );
}

#[test]
fn the_bundle_passes_every_rule() {
    let b = built();
    assert_eq!(rules_broken(&b.csv), Vec::<&str>::new());
    let paths: Vec<String> = b
        .files
        .iter()
        .map(|(p, _)| p.display().to_string())
        .collect();
    for want in [
        "manifests/oooi.clusterserviceversion.yaml",
        "manifests/infras.hostedcluster.densityops.com.yaml",
        "manifests/oooi-sni-router.configmap.yaml",
        "metadata/annotations.yaml",
        "bundle.Containerfile",
    ] {
        assert!(paths.contains(&want.to_string()), "{want} not in {paths:?}");
    }
}

#[test]
fn a_container_without_cpu_or_memory_requests_fails() {
    assert_breaks("resource-requests", |c| {
        c["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"]["containers"][0]
            ["resources"]["requests"]
            .as_object_mut()
            .unwrap()
            .remove("cpu");
    });
    assert_breaks("resource-requests", |c| {
        c["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"]["initContainers"] = json!([{"name": "init", "image": format!("registry.example.com/oooi/oooi-controller@{DIGEST}"), "resources": {"requests": {"cpu": "1m"}}}]);
    });
}

#[test]
fn alm_examples_that_do_not_parse_or_name_no_owned_crd_fail() {
    assert_breaks("alm-examples", |c| {
        c["metadata"]["annotations"]["alm-examples"] = json!("[{not json");
    });
    assert_breaks("alm-examples", |c| {
        c["metadata"]["annotations"]["alm-examples"] = json!(
            r#"[{"apiVersion": "hostedcluster.densityops.com/v1alpha1", "kind": "Widget", "metadata": {"name": "w"}}]"#
        );
    });
    // An owned CRD neither exemplified nor internal.
    assert_breaks("alm-examples", |c| {
        c["metadata"]["annotations"]["operators.operatorframework.io/internal-objects"] =
            json!("[]");
    });
}

#[test]
fn a_disruption_budget_with_max_unavailable_zero_fails() {
    let csv = built().csv;
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "blocks"}, "spec": {"maxUnavailable": 0}});
    let problems = check::check(&csv, &[pdb]);
    assert!(
        problems
            .iter()
            .any(|p| p.rule == "disruption-budget" && p.detail.contains("blocks")),
        "{problems:?}"
    );
    let all = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "all"}, "spec": {"minAvailable": "100%"}});
    let problems = check::check(&csv, &[all]);
    assert!(
        problems
            .iter()
            .any(|p| p.rule == "disruption-budget" && p.detail.contains("all")),
        "{problems:?}"
    );
    let fine = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "ok"}, "spec": {"maxUnavailable": 1}});
    assert!(check::check(&csv, &[fine]).is_empty());
}

#[test]
fn a_version_or_name_that_is_not_semver_fails() {
    assert_breaks("semver", |c| c["spec"]["version"] = json!("0.2"));
    assert_breaks("semver", |c| c["metadata"]["name"] = json!("oooi-0.2.0"));
    assert_breaks("semver", |c| c["spec"]["replaces"] = json!("oooi.v0.3.0"));
    assert_breaks("semver", |c| {
        c["metadata"]["annotations"]["olm.skipRange"] = json!("<<0.2")
    });
    let e = olm::bundle(&BundleInput {
        version: "v0.2".into(),
        ..input()
    })
    .unwrap_err();
    assert!(format!("{e:#}").contains("\"v0.2\""), "{e:#}");
}

#[test]
fn an_image_not_pinned_by_digest_or_missing_from_related_images_fails() {
    assert_breaks("related-images", |c| {
        c["spec"]["relatedImages"][1]["image"] = json!("registry.example.com/oooi/oooi-dns:0.2.0");
    });
    assert_breaks("related-images", |c| {
        c["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"]["containers"]
            [0]["image"] = json!("registry.example.com/oooi/oooi-controller:0.2.0");
    });
    // A RELATED_IMAGE_* variable whose image is not listed.
    assert_breaks("related-images", |c| {
        c["spec"]["relatedImages"]
            .as_array_mut()
            .unwrap()
            .retain(|r| r["name"] != "must-gather");
    });
}

#[test]
fn missing_icon_maintainers_links_description_or_capabilities_fail() {
    assert_breaks("presentation", |c| c["spec"]["icon"] = json!([]));
    assert_breaks("presentation", |c| {
        c["spec"]["maintainers"] = json!([{"name": "x"}])
    });
    assert_breaks("presentation", |c| {
        c["spec"]["links"] = json!([{"name": "x", "url": "example"}])
    });
    assert_breaks("presentation", |c| c["spec"]["description"] = json!(" "));
    assert_breaks("presentation", |c| {
        c["metadata"]["annotations"]["capabilities"] = json!("Magic")
    });
}

#[test]
fn an_openshift_feature_annotation_left_unset_fails() {
    assert_breaks("features", |c| {
        c["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove("features.operators.openshift.io/disconnected");
    });
    assert_breaks("features", |c| {
        c["metadata"]["annotations"]["features.operators.openshift.io/fips-compliant"] =
            json!("maybe");
    });
}

#[test]
fn a_bundle_without_the_filter_module_is_refused() {
    // The controller rolls the module out from the bundle's ConfigMap: a
    // bundle without it would install proxies that never route.
    let e = olm::bundle(&BundleInput {
        filter_wasm: Vec::new(),
        ..input()
    })
    .unwrap_err();
    assert!(format!("{e:#}").contains("filter module"), "{e:#}");
}

#[test]
fn permissions_are_exactly_the_rules_of_oooi_controller_rbac() {
    let csv = built().csv;
    let install = &csv["spec"]["install"]["spec"];
    let mut have: Vec<Value> = Vec::new();
    // `permissions`: the component namespace's rules and the controller's
    // own (the leader Lease among them), a Role OLM copies into the target
    // namespace; `clusterPermissions`: the rest.
    for field in ["permissions", "clusterPermissions"] {
        let perms = install[field].as_array().unwrap();
        assert_eq!(perms.len(), 1, "{field}");
        assert_eq!(perms[0]["serviceAccountName"], csv::CONTROLLER);
        have.extend(perms[0]["rules"].as_array().unwrap().iter().cloned());
    }
    let (namespaced, _) = oooi_controller::rbac::csv_permissions();
    assert_eq!(
        install["permissions"][0]["rules"],
        serde_json::to_value(&namespaced).unwrap()
    );
    let want: Vec<Value> = oooi_controller::rbac::rules_for(true)
        .iter()
        .map(|r| serde_json::to_value(r).unwrap())
        .collect();
    let mut have_sorted: Vec<String> = have.iter().map(Value::to_string).collect();
    let mut want_sorted: Vec<String> = want.iter().map(Value::to_string).collect();
    have_sorted.sort();
    want_sorted.sort();
    assert_eq!(have_sorted, want_sorted);
}

#[test]
fn the_bundle_crds_are_those_of_oooi_controller_crds() {
    let b = built();
    let crds: Vec<&Value> = b
        .manifests
        .iter()
        .filter(|m| m["kind"] == "CustomResourceDefinition")
        .collect();
    let want: Vec<Value> = oooi_controller::crd::crds()
        .iter()
        .map(|c| serde_json::to_value(c).unwrap())
        .collect();
    assert_eq!(crds.len(), want.len());
    for (have, want) in crds.iter().zip(&want) {
        assert_eq!(*have, want);
    }
    // Every owned CRD is one of them, with the CRD's served version.
    let owned = b.csv["spec"]["customresourcedefinitions"]["owned"]
        .as_array()
        .unwrap();
    assert_eq!(owned.len(), want.len());
    for o in owned {
        let crd = want
            .iter()
            .find(|c| c["metadata"]["name"] == o["name"])
            .unwrap_or_else(|| panic!("{o}"));
        assert_eq!(crd["spec"]["names"]["kind"], o["kind"]);
        assert!(
            crd["spec"]["versions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v["name"] == o["version"])
        );
        assert!(o["displayName"].as_str().is_some_and(|s| !s.is_empty()));
        assert!(o["description"].as_str().is_some_and(|s| !s.is_empty()));
    }
}

/// The schema of `path` (dotted, under `root`) in an openAPIV3Schema.
fn schema_at<'a>(mut schema: &'a Value, path: &str) -> Option<&'a Value> {
    for part in path.split('.') {
        schema = schema.get("properties")?.get(part)?;
    }
    Some(schema)
}

#[test]
fn every_descriptor_names_a_field_of_its_crd() {
    let b = built();
    for o in b.csv["spec"]["customresourcedefinitions"]["owned"]
        .as_array()
        .unwrap()
    {
        let crd = b
            .manifests
            .iter()
            .find(|m| m["metadata"]["name"] == o["name"])
            .unwrap();
        let root = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        for (list, top) in [("specDescriptors", "spec"), ("statusDescriptors", "status")] {
            let descriptors = o[list].as_array().unwrap();
            assert!(!descriptors.is_empty(), "{}: no {list}", o["kind"]);
            for d in descriptors {
                let path = format!("{top}.{}", d["path"].as_str().unwrap());
                assert!(
                    schema_at(root, &path).is_some(),
                    "{}: {path} is not a field of the CRD",
                    o["kind"]
                );
            }
        }
    }
}

#[test]
fn alm_examples_come_from_the_examples_and_render_cleanly() {
    let examples = csv::alm_examples().unwrap();
    let kinds: Vec<&str> = examples
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["Infra", "InfraClusterAttachment"]);
    let csv = built().csv;
    let annotated: Vec<Value> = serde_json::from_str(
        csv["metadata"]["annotations"]["alm-examples"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(annotated, examples);
    // The console creates them in its current namespace, and the operator's
    // digests apply.
    for e in &examples {
        assert!(e["metadata"].get("namespace").is_none(), "{e}");
        assert!(!e.to_string().contains("\"image\""), "{e}");
    }
    let mut input = RenderInput {
        images: digest_defaults(),
        ..RenderInput::default()
    };
    let text: String = examples
        .iter()
        .map(|e| format!("---\n{}", serde_saphyr::to_string(e).unwrap()))
        .collect();
    input.add_yaml("alm-examples", &text).unwrap();
    let out = render::render(&input, render::OFFLINE_PUSH_TOKEN).unwrap();
    assert!(out.problems.is_empty(), "{:?}", out.problems);
    assert!(out.objects.iter().any(|o| o["kind"] == "Deployment"));
}

fn digest_defaults() -> DefaultImages {
    DefaultImages {
        dhcp: Some(format!("registry.example.com/oooi/oooi-dhcp@{DIGEST}")),
        // As the chart writes a pinned image: tag@digest.
        dns: Some(format!("registry.example.com/oooi/oooi-dns:0.2.0@{DIGEST}")),
        proxy: Some(format!("registry.example.com/oooi/oooi-proxy@{DIGEST}")),
    }
}

/// Every image of every pod template in `objects`.
fn pod_images(objects: &[Value]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for o in objects {
        let Some(spec) = o.pointer("/spec/template/spec") else {
            continue;
        };
        for key in ["containers", "initContainers"] {
            for c in spec[key].as_array().into_iter().flatten() {
                out.push((
                    format!(
                        "{} {}/{}",
                        o["kind"],
                        o["metadata"]["name"].as_str().unwrap_or("?"),
                        c["name"].as_str().unwrap_or("?")
                    ),
                    c["image"].as_str().unwrap_or_default().to_string(),
                ));
            }
        }
    }
    out
}

#[test]
fn every_pod_references_images_by_digest_when_the_defaults_are_digests() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut seen = 0;
    for f in files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
    {
        // The examples name tagged images of their own; leave them to the
        // controller's defaults, as the console's examples do.
        let text = std::fs::read_to_string(f).unwrap();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
        let mut stripped = String::new();
        for mut d in docs.into_iter().filter(|d| !d.is_null()) {
            if d["kind"] != "Infra"
                && d["kind"] != "InfraClusterAttachment"
                && d["kind"] != "ObservedCluster"
                && d["kind"] != "ObservedInfra"
            {
                continue;
            }
            if let Some(c) = d
                .pointer_mut("/spec/infraComponents")
                .and_then(Value::as_object_mut)
            {
                for comp in c.values_mut() {
                    if let Some(comp) = comp.as_object_mut() {
                        comp.remove("image");
                    }
                }
            }
            stripped.push_str(&format!("---\n{}", serde_saphyr::to_string(&d).unwrap()));
        }
        let mut input = RenderInput {
            images: digest_defaults(),
            ..RenderInput::default()
        };
        input.add_yaml(&f.display().to_string(), &stripped).unwrap();
        let out = render::render(&input, render::OFFLINE_PUSH_TOKEN).unwrap();
        for (what, image) in pod_images(&out.objects) {
            seen += 1;
            assert!(
                olm::images::is_digest_ref(&image),
                "{}: {what} runs {image:?}, not an image by digest",
                f.display()
            );
        }
    }
    assert!(seen >= 10, "only {seen} containers rendered");
}

#[test]
fn the_controller_gets_every_image_as_related_image_variables() {
    let csv = built().csv;
    let c = &csv["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"]["containers"]
        [0];
    let env: Vec<(&str, &str)> = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| Some((e["name"].as_str()?, e["value"].as_str()?)))
        .collect();
    for i in BundleImage::ALL {
        let value = env.iter().find(|(n, _)| *n == i.env()).map(|(_, v)| *v);
        assert_eq!(value, Some(images().get(i)), "{}", i.env());
    }
    // And `run` reads them: the component images come from them.
    let defaults = olm::with_related_images(DefaultImages::default(), |k| {
        env.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    });
    assert_eq!(
        defaults.dns.as_deref(),
        Some(images().get(BundleImage::Dns))
    );
    assert_eq!(
        defaults.dhcp.as_deref(),
        Some(images().get(BundleImage::Dhcp))
    );
    assert_eq!(
        defaults.proxy.as_deref(),
        Some(images().get(BundleImage::Proxy))
    );
    assert_eq!(
        csv["metadata"]["annotations"]["operators.openshift.io/must-gather-image"],
        images().get(BundleImage::MustGather)
    );
}

#[test]
fn bundle_image_labels_equal_the_metadata_annotations() {
    let b = built();
    let file = |name: &str| {
        b.files
            .iter()
            .find(|(p, _)| p.to_str() == Some(name))
            .unwrap()
            .1
            .clone()
    };
    let annotations: Value = serde_saphyr::from_str(&file("metadata/annotations.yaml")).unwrap();
    let labels: Vec<(String, String)> = file("bundle.Containerfile")
        .lines()
        .filter_map(|l| l.strip_prefix("LABEL "))
        .map(|l| {
            let (k, v) = l.split_once('=').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect();
    let map = annotations["annotations"].as_object().unwrap();
    assert_eq!(labels.len(), map.len());
    for (k, v) in &labels {
        assert_eq!(map[k], Value::String(v.clone()), "{k}");
    }
    assert_eq!(
        map["operators.operatorframework.io.bundle.mediatype.v1"],
        "registry+v1"
    );
    assert_eq!(
        map["operators.operatorframework.io.bundle.package.v1"],
        csv::PACKAGE
    );
    assert!(
        file("bundle.Containerfile").starts_with("# ")
            && file("bundle.Containerfile").contains("\nFROM scratch\n")
    );
}

#[test]
fn the_catalog_has_the_package_a_channel_with_the_upgrade_edge_and_the_bundle() {
    let b = built();
    let text = olm::catalog(
        &b,
        &input(),
        &format!("registry.example.com/oooi/oooi-bundle@{DIGEST}"),
    )
    .unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    let schemas: Vec<&str> = docs.iter().map(|d| d["schema"].as_str().unwrap()).collect();
    assert_eq!(schemas, ["olm.package", "olm.channel", "olm.bundle"]);
    assert_eq!(docs[0]["defaultChannel"], csv::CHANNEL);
    let entry = &docs[1]["entries"][0];
    assert_eq!(entry["name"], "oooi.v0.2.0");
    assert_eq!(entry["replaces"], "oooi.v0.1.0");
    assert_eq!(entry["skipRange"], "<0.2.0");
    assert_eq!(b.csv["spec"]["replaces"], "oooi.v0.1.0");
    assert_eq!(b.csv["metadata"]["annotations"]["olm.skipRange"], "<0.2.0");
    let bundle = &docs[2];
    assert_eq!(bundle["name"], "oooi.v0.2.0");
    let props = bundle["properties"].as_array().unwrap();
    assert!(
        props
            .iter()
            .any(|p| p["type"] == "olm.package" && p["value"]["version"] == "0.2.0")
    );
    let gvks = props.iter().filter(|p| p["type"] == "olm.gvk").count();
    assert_eq!(gvks, 5);
    for r in bundle["relatedImages"].as_array().unwrap() {
        assert!(
            olm::images::is_digest_ref(r["image"].as_str().unwrap()),
            "{r}"
        );
    }
    let e = olm::catalog(&b, &input(), "registry.example.com/oooi/oooi-bundle:0.2.0").unwrap_err();
    assert!(e.to_string().contains("--bundle-image"), "{e}");
}

#[test]
fn no_disruption_budget_the_controller_plans_blocks_every_eviction() {
    // The bundle ships none; the operands' budgets (a DHCP pair's) must not
    // block node drains and cluster upgrades either.
    let csv = built().csv;
    let mut budgets = 0;
    for f in ["dhcp-pair.yaml", "high-availability.yaml"] {
        let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../examples")
            .join(f);
        let mut input = RenderInput::default();
        input.add_file(&path).unwrap();
        let out = render::render(&input, render::OFFLINE_PUSH_TOKEN).unwrap();
        let pdbs: Vec<Value> = out
            .objects
            .into_iter()
            .filter(|o| o["kind"] == "PodDisruptionBudget")
            .collect();
        budgets += pdbs.len();
        let problems = check::check(&csv, &pdbs);
        assert!(problems.is_empty(), "{f}: {problems:?}");
    }
    assert!(budgets > 0, "the examples plan no PodDisruptionBudget");
}
