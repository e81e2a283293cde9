//! The OLM registry+v1 bundle and its file-based catalog, from the same
//! sources as the chart: the CRDs from the Rust types ([`crate::crd`]), the
//! permissions from [`crate::rbac::rules_for`], the Deployment the chart
//! renders (compared by `charts/tests/test_olm.py`).
//!
//! - [`images`]: the digests every image is pinned by, and the
//!   `RELATED_IMAGE_*` variables `run` takes its component images from.
//! - [`csv`]: the ClusterServiceVersion (pure).
//! - [`check`]: the rules of `operator-sdk bundle validate` that apply.
//! - here: the bundle's files, its image's labels and the catalog.

pub mod check;
pub mod csv;
pub mod images;

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

pub use images::{BundleImage, BundleImages, with_related_images};

/// What a bundle is made from.
#[derive(Debug, Clone)]
pub struct BundleInput {
    /// Semantic version of the bundle (the CSV's `spec.version`).
    pub version: String,
    /// Every image, by digest.
    pub images: BundleImages,
    /// Where this version sits in the channel.
    pub edge: csv::UpgradeEdge,
    /// The built filter module (shipped as the rollout-source ConfigMap).
    pub filter_wasm: Vec<u8>,
}

/// A bundle: relative path → file content.
#[derive(Debug, Clone, Default)]
pub struct Bundle {
    /// Files in writing order (manifests, metadata, the image's Containerfile).
    pub files: Vec<(PathBuf, String)>,
    /// The ClusterServiceVersion.
    pub csv: Value,
    /// The other manifests (CRDs, the filter ConfigMap).
    pub manifests: Vec<Value>,
}

/// The labels of the bundle image, equal to `metadata/annotations.yaml`.
pub fn bundle_annotations() -> Vec<(&'static str, String)> {
    vec![
        (
            "operators.operatorframework.io.bundle.mediatype.v1",
            "registry+v1".into(),
        ),
        (
            "operators.operatorframework.io.bundle.manifests.v1",
            "manifests/".into(),
        ),
        (
            "operators.operatorframework.io.bundle.metadata.v1",
            "metadata/".into(),
        ),
        (
            "operators.operatorframework.io.bundle.package.v1",
            csv::PACKAGE.into(),
        ),
        (
            "operators.operatorframework.io.bundle.channels.v1",
            csv::CHANNEL.into(),
        ),
        (
            "operators.operatorframework.io.bundle.channel.default.v1",
            csv::CHANNEL.into(),
        ),
        // The OpenShift releases whose catalogs may carry the bundle.
        (
            "com.redhat.openshift.versions",
            csv::OPENSHIFT_VERSIONS.into(),
        ),
    ]
}

fn yaml(value: &impl serde::Serialize) -> anyhow::Result<String> {
    Ok(serde_saphyr::to_string(value)?)
}

/// The filter module as the chart ships it: the ConfigMap the controller
/// rolls the module out from.
pub fn filter_config_map(module: &[u8]) -> Value {
    use base64::Engine as _;
    use sha2::Digest as _;
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": csv::FILTER_CONFIG_MAP,
            "labels": {"app.kubernetes.io/name": "oooi", "app.kubernetes.io/part-of": "oooi", "app.kubernetes.io/component": "filter"},
            "annotations": {
                "hostedcluster.densityops.com/filter-digest": format!("sha256:{}", hex::encode(sha2::Sha256::digest(module))),
                "hostedcluster.densityops.com/filter-bytes": module.len().to_string(),
            },
        },
        "binaryData": {csv::FILTER_KEY: base64::engine::general_purpose::STANDARD.encode(module)},
    })
}

/// Builds the bundle and runs [`check::check`] on it: a bundle that breaks a
/// rule is an error naming every broken rule.
pub fn bundle(input: &BundleInput) -> anyhow::Result<Bundle> {
    semver::Version::parse(&input.version)
        .with_context(|| format!("--version {:?} is not a semantic version", input.version))?;
    if input.filter_wasm.is_empty() {
        bail!("the filter module is empty (build it: tools/dev package or build_filter)");
    }
    let csv = csv::csv(
        &input.version,
        &input.images,
        &input.edge,
        &crate::rbac::rules_for(true),
    )?;
    let mut out = Bundle::default();
    out.files.push((
        PathBuf::from(format!(
            "manifests/{}.clusterserviceversion.yaml",
            csv::PACKAGE
        )),
        yaml(&csv)?,
    ));
    for crd in crate::crd::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let value = serde_json::to_value(&crd)?;
        out.files.push((
            PathBuf::from(format!("manifests/{name}.yaml")),
            yaml(&value)?,
        ));
        out.manifests.push(value);
    }
    let cm = filter_config_map(&input.filter_wasm);
    out.files.push((
        PathBuf::from(format!(
            "manifests/{}.configmap.yaml",
            csv::FILTER_CONFIG_MAP
        )),
        yaml(&cm)?,
    ));
    out.manifests.push(cm);
    let annotations: serde_json::Map<String, Value> = bundle_annotations()
        .into_iter()
        .map(|(k, v)| (k.to_string(), Value::String(v)))
        .collect();
    out.files.push((
        PathBuf::from("metadata/annotations.yaml"),
        yaml(&json!({"annotations": annotations}))?,
    ));
    out.files
        .push((PathBuf::from("bundle.Containerfile"), containerfile()));
    let problems = check::check(&csv, &out.manifests);
    if !problems.is_empty() {
        let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
        bail!(
            "the bundle breaks {} rule(s):\n  {}",
            list.len(),
            list.join("\n  ")
        );
    }
    out.csv = csv;
    Ok(out)
}

/// The bundle image: the two folders and the labels OLM reads.
fn containerfile() -> String {
    let mut out = String::from(
        "# The OLM bundle image (registry+v1); labels equal metadata/annotations.yaml.\nFROM scratch\n",
    );
    for (k, v) in bundle_annotations() {
        out.push_str(&format!("LABEL {k}={v}\n"));
    }
    out.push_str("COPY manifests /manifests/\nCOPY metadata /metadata/\n");
    out
}

/// The file-based catalog of one bundle: `olm.package`, `olm.channel` (the
/// entry `replaces` the previous version when there is one, and skips every
/// older version through `skipRange`) and `olm.bundle` (pulled from
/// `bundle_image`, by digest), as multi-document YAML.
pub fn catalog(bundle: &Bundle, input: &BundleInput, bundle_image: &str) -> anyhow::Result<String> {
    use base64::Engine as _;
    images::DigestRef::parse(bundle_image).map_err(|e| anyhow::anyhow!("--bundle-image: {e}"))?;
    let name = csv::csv_name(&input.version);
    let mut entry = json!({"name": name, "skipRange": input.edge.skip_range_for(&input.version)});
    if let Some(r) = &input.edge.replaces {
        entry["replaces"] = json!(csv::csv_name(r));
    }
    let mut properties = vec![
        json!({"type": "olm.package", "value": {"packageName": csv::PACKAGE, "version": input.version}}),
    ];
    for crd in &bundle.manifests {
        if crd["kind"] != "CustomResourceDefinition" {
            continue;
        }
        for v in crd["spec"]["versions"].as_array().into_iter().flatten() {
            properties.push(json!({"type": "olm.gvk", "value": {
                "group": crd["spec"]["group"], "kind": crd["spec"]["names"]["kind"], "version": v["name"],
            }}));
        }
    }
    // The CSV and the CRDs inline, as `opm render` embeds them: the
    // catalog answers what the package provides without pulling the image.
    let embedded = std::iter::once(&bundle.csv).chain(
        bundle
            .manifests
            .iter()
            .filter(|m| m["kind"] == "CustomResourceDefinition"),
    );
    for obj in embedded {
        properties.push(json!({"type": "olm.bundle.object", "value": {
            "data": base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(obj)?),
        }}));
    }
    let docs = [
        json!({"schema": "olm.package", "name": csv::PACKAGE, "defaultChannel": csv::CHANNEL,
               "icon": bundle.csv["spec"]["icon"][0]}),
        json!({"schema": "olm.channel", "package": csv::PACKAGE, "name": csv::CHANNEL, "entries": [entry]}),
        json!({"schema": "olm.bundle", "package": csv::PACKAGE, "name": name, "image": bundle_image,
               "properties": properties,
               "relatedImages": bundle.csv["spec"]["relatedImages"].as_array().cloned().unwrap_or_default()
                   .into_iter().chain(std::iter::once(json!({"name": "bundle", "image": bundle_image}))).collect::<Vec<_>>()}),
    ];
    let mut out = String::new();
    for d in docs {
        out.push_str("---\n");
        out.push_str(&yaml(&d)?);
    }
    Ok(out)
}

/// Writes `bundle` under `dir` (creating `manifests/` and `metadata/`).
pub fn write(bundle: &Bundle, dir: &Path) -> anyhow::Result<()> {
    for (path, text) in &bundle.files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}
