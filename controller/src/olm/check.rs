//! The checks `operator-sdk bundle validate` (with the OperatorHub and good
//! practices suites) makes that apply to oooi's bundle, run offline on every
//! bundle `oooi-controller bundle` writes (it refuses to write one that
//! fails). The ClusterServiceVersion CRD's own schema is checked by the
//! chart and docs test suite.

use std::collections::BTreeSet;

use serde_json::Value;

use super::images::is_digest_ref;

/// One broken rule: which, and what in the bundle breaks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The rule's name.
    pub rule: &'static str,
    /// The field and the bad value.
    pub detail: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.rule, self.detail)
    }
}

/// Capability levels the console knows.
pub const CAPABILITY_LEVELS: &[&str] = &[
    "Basic Install",
    "Seamless Upgrades",
    "Full Lifecycle",
    "Deep Insights",
    "Auto Pilot",
];

/// The `features.operators.openshift.io/*` annotations OpenShift's catalog
/// requires (each `"true"` or `"false"`).
pub const FEATURES: &[&str] = &[
    "disconnected",
    "fips-compliant",
    "proxy-aware",
    "tls-profiles",
    "token-auth-aws",
    "token-auth-azure",
    "token-auth-gcp",
];

/// Every problem of `csv` and the other `manifests` of its bundle.
pub fn check(csv: &Value, manifests: &[Value]) -> Vec<Problem> {
    let mut out = Vec::new();
    requests(csv, &mut out);
    alm_examples(csv, &mut out);
    disruption_budgets(manifests, &mut out);
    semver(csv, &mut out);
    related_images(csv, &mut out);
    presentation(csv, &mut out);
    features(csv, &mut out);
    install_modes(csv, &mut out);
    permissions(csv, &mut out);
    out
}

fn problem(out: &mut Vec<Problem>, rule: &'static str, detail: String) {
    out.push(Problem { rule, detail });
}

fn deployments(csv: &Value) -> impl Iterator<Item = (String, &Value)> {
    csv.pointer("/spec/install/spec/deployments")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|d| (d["name"].as_str().unwrap_or("?").to_string(), &d["spec"]))
}

fn containers(deployment_spec: &Value) -> impl Iterator<Item = &Value> {
    ["containers", "initContainers"]
        .into_iter()
        .flat_map(move |k| {
            deployment_spec
                .pointer(&format!("/template/spec/{k}"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
        })
}

/// Every container of every Deployment requests CPU and memory.
fn requests(csv: &Value, out: &mut Vec<Problem>) {
    for (name, spec) in deployments(csv) {
        for c in containers(spec) {
            for resource in ["cpu", "memory"] {
                let request = c.pointer(&format!("/resources/requests/{resource}"));
                if request.and_then(Value::as_str).is_none_or(str::is_empty) {
                    problem(
                        out,
                        "resource-requests",
                        format!(
                            "deployment {name}, container {}: resources.requests.{resource} is unset",
                            c["name"].as_str().unwrap_or("?")
                        ),
                    );
                }
            }
        }
    }
}

fn owned(csv: &Value) -> Vec<(String, String, String)> {
    csv.pointer("/spec/customresourcedefinitions/owned")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|o| {
            let name = o["name"].as_str().unwrap_or_default().to_string();
            let group = name
                .split_once('.')
                .map(|(_, g)| g)
                .unwrap_or("")
                .to_string();
            (
                format!("{group}/{}", o["version"].as_str().unwrap_or_default()),
                o["kind"].as_str().unwrap_or_default().to_string(),
                name,
            )
        })
        .collect()
}

/// `alm-examples` is a JSON list whose every item is an owned kind; every
/// owned CRD that is not internal has one.
fn alm_examples(csv: &Value, out: &mut Vec<Problem>) {
    const RULE: &str = "alm-examples";
    let annotations = &csv["metadata"]["annotations"];
    let Some(text) = annotations["alm-examples"].as_str() else {
        return problem(
            out,
            RULE,
            "metadata.annotations.alm-examples is unset".into(),
        );
    };
    let examples: Vec<Value> = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return problem(
                out,
                RULE,
                format!("metadata.annotations.alm-examples is not a JSON list: {e}"),
            );
        }
    };
    let owned = owned(csv);
    let internal: BTreeSet<String> = annotations["operators.operatorframework.io/internal-objects"]
        .as_str()
        .and_then(|t| serde_json::from_str::<Vec<String>>(t).ok())
        .unwrap_or_default()
        .into_iter()
        .collect();
    let mut named = BTreeSet::new();
    for (i, e) in examples.iter().enumerate() {
        let api = e["apiVersion"].as_str().unwrap_or_default();
        let kind = e["kind"].as_str().unwrap_or_default();
        match owned.iter().find(|(a, k, _)| a == api && k == kind) {
            Some((_, _, name)) => {
                named.insert(name.clone());
            }
            None => problem(
                out,
                RULE,
                format!("alm-examples[{i}]: {api} {kind:?} is not an owned CRD"),
            ),
        }
        if e.pointer("/metadata/name")
            .and_then(Value::as_str)
            .is_none()
        {
            problem(
                out,
                RULE,
                format!("alm-examples[{i}]: metadata.name is unset"),
            );
        }
    }
    for (_, kind, name) in &owned {
        if !named.contains(name) && !internal.contains(name) {
            problem(
                out,
                RULE,
                format!("owned CRD {name} ({kind}) has no example and is not an internal object"),
            );
        }
    }
}

/// No PodDisruptionBudget that blocks every eviction.
fn disruption_budgets(manifests: &[Value], out: &mut Vec<Problem>) {
    for m in manifests
        .iter()
        .filter(|m| m["kind"] == "PodDisruptionBudget")
    {
        let name = m["metadata"]["name"].as_str().unwrap_or("?");
        let max = &m["spec"]["maxUnavailable"];
        let min = &m["spec"]["minAvailable"];
        if min == "100%" {
            problem(
                out,
                "disruption-budget",
                format!(
                    "PodDisruptionBudget {name}: spec.minAvailable 100% blocks every eviction (node drains and cluster upgrades)"
                ),
            );
        }
        if max == 0 || max == "0" || max == "0%" {
            problem(
                out,
                "disruption-budget",
                format!(
                    "PodDisruptionBudget {name}: spec.maxUnavailable {max} blocks every eviction (node drains and cluster upgrades)"
                ),
            );
        }
    }
}

/// `spec.version` is semantic, the name is `<package>.v<version>`, and
/// `replaces` names a semantic version too.
fn semver(csv: &Value, out: &mut Vec<Problem>) {
    const RULE: &str = "semver";
    let version = csv["spec"]["version"].as_str().unwrap_or_default();
    if let Err(e) = semver::Version::parse(version) {
        problem(
            out,
            RULE,
            format!("spec.version {version:?} is not semver: {e}"),
        );
    }
    let name = csv["metadata"]["name"].as_str().unwrap_or_default();
    if !name.ends_with(&format!(".v{version}")) {
        problem(
            out,
            RULE,
            format!("metadata.name {name:?} is not <package>.v{version}"),
        );
    }
    if let Some(replaces) = csv["spec"]["replaces"].as_str() {
        let v = replaces
            .split_once(".v")
            .map(|(_, v)| v)
            .unwrap_or_default();
        match semver::Version::parse(v) {
            Err(e) => problem(
                out,
                RULE,
                format!("spec.replaces {replaces:?} is not <package>.v<semver>: {e}"),
            ),
            Ok(prev) => {
                if semver::Version::parse(version).is_ok_and(|cur| prev >= cur) {
                    problem(
                        out,
                        RULE,
                        format!("spec.replaces {replaces:?} is not older than {version}"),
                    );
                }
            }
        }
    }
    if let Some(range) = csv["metadata"]["annotations"]["olm.skipRange"].as_str()
        && let Err(e) = semver::VersionReq::parse(&range.replace(' ', ", "))
    {
        {
            problem(
                out,
                RULE,
                format!("olm.skipRange {range:?} is not a semver range: {e}"),
            );
        }
    }
}

/// Every image (relatedImages, containers, `RELATED_IMAGE_*`, the
/// must-gather annotation) is pinned by digest, and every one the
/// Deployment or the annotations name is in relatedImages.
fn related_images(csv: &Value, out: &mut Vec<Problem>) {
    const RULE: &str = "related-images";
    let related: Vec<&str> = csv["spec"]["relatedImages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["image"].as_str())
        .collect();
    if related.is_empty() {
        problem(out, RULE, "spec.relatedImages is empty".into());
    }
    for r in &related {
        if !is_digest_ref(r) {
            problem(
                out,
                RULE,
                format!("spec.relatedImages: {r:?} is not pinned by digest"),
            );
        }
    }
    let mut used: Vec<(String, String)> = Vec::new();
    for (name, spec) in deployments(csv) {
        for c in containers(spec) {
            let cname = c["name"].as_str().unwrap_or("?");
            if let Some(i) = c["image"].as_str() {
                used.push((
                    format!("deployment {name}, container {cname}: image"),
                    i.into(),
                ));
            }
            for e in c["env"].as_array().into_iter().flatten() {
                let var = e["name"].as_str().unwrap_or_default();
                if var.starts_with("RELATED_IMAGE_") {
                    let v = e["value"].as_str().unwrap_or_default();
                    used.push((
                        format!("deployment {name}, container {cname}: env {var}"),
                        v.into(),
                    ));
                }
            }
        }
    }
    for key in ["containerImage", "operators.openshift.io/must-gather-image"] {
        if let Some(i) = csv["metadata"]["annotations"][key].as_str() {
            used.push((format!("metadata.annotations.{key}"), i.into()));
        }
    }
    for (what, image) in used {
        if !is_digest_ref(&image) {
            problem(
                out,
                RULE,
                format!("{what}: {image:?} is not pinned by digest"),
            );
        } else if !related.contains(&image.as_str()) {
            problem(
                out,
                RULE,
                format!("{what}: {image:?} is not in spec.relatedImages"),
            );
        }
    }
}

/// What the console and OperatorHub show: icon, maintainers, links,
/// description, a known capability level.
fn presentation(csv: &Value, out: &mut Vec<Problem>) {
    const RULE: &str = "presentation";
    let spec = &csv["spec"];
    let icon_ok = spec["icon"].as_array().is_some_and(|icons| {
        !icons.is_empty()
            && icons.iter().all(|i| {
                i["base64data"].as_str().is_some_and(|d| !d.is_empty())
                    && i["mediatype"]
                        .as_str()
                        .is_some_and(|m| m.starts_with("image/"))
            })
    });
    if !icon_ok {
        problem(
            out,
            RULE,
            "spec.icon needs base64data and an image/* mediatype".into(),
        );
    }
    let maintainers_ok = spec["maintainers"].as_array().is_some_and(|m| {
        !m.is_empty()
            && m.iter().all(|m| {
                m["name"].as_str().is_some() && m["email"].as_str().is_some_and(|e| e.contains('@'))
            })
    });
    if !maintainers_ok {
        problem(
            out,
            RULE,
            "spec.maintainers needs a name and an email each".into(),
        );
    }
    let links_ok = spec["links"].as_array().is_some_and(|l| {
        !l.is_empty()
            && l.iter().all(|l| {
                l["name"].as_str().is_some()
                    && l["url"]
                        .as_str()
                        .is_some_and(|u| u.starts_with("https://") || u.starts_with("http://"))
            })
    });
    if !links_ok {
        problem(
            out,
            RULE,
            "spec.links needs a name and an http(s) url each".into(),
        );
    }
    for (field, value) in [
        ("spec.description", &spec["description"]),
        ("spec.displayName", &spec["displayName"]),
        (
            "metadata.annotations.description",
            &csv["metadata"]["annotations"]["description"],
        ),
    ] {
        if value.as_str().is_none_or(|s| s.trim().is_empty()) {
            problem(out, RULE, format!("{field} is empty"));
        }
    }
    match csv["metadata"]["annotations"]["capabilities"].as_str() {
        Some(c) if CAPABILITY_LEVELS.contains(&c) => {}
        other => problem(
            out,
            RULE,
            format!(
                "metadata.annotations.capabilities {other:?} is not one of {CAPABILITY_LEVELS:?}"
            ),
        ),
    }
}

/// Every `features.operators.openshift.io/*` annotation is set to
/// `"true"` or `"false"`.
fn features(csv: &Value, out: &mut Vec<Problem>) {
    for f in FEATURES {
        let key = format!("features.operators.openshift.io/{f}");
        match csv["metadata"]["annotations"][&key].as_str() {
            Some("true" | "false") => {}
            other => problem(
                out,
                "features",
                format!("metadata.annotations.{key} is {other:?}, want \"true\" or \"false\""),
            ),
        }
    }
}

/// The four install modes, each listed once, at least one supported (OLM
/// refuses an OperatorGroup whose mode the CSV does not list as supported).
fn install_modes(csv: &Value, out: &mut Vec<Problem>) {
    let modes = csv["spec"]["installModes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for want in [
        "OwnNamespace",
        "SingleNamespace",
        "MultiNamespace",
        "AllNamespaces",
    ] {
        let n = modes.iter().filter(|m| m["type"] == want).count();
        if n != 1 {
            problem(
                out,
                "install-modes",
                format!("spec.installModes lists {want} {n} times, want once"),
            );
        }
    }
    if !modes.iter().any(|m| m["supported"] == true) {
        problem(out, "install-modes", "no install mode is supported".into());
    }
}

/// `permissions` and `clusterPermissions` name the Deployment's
/// ServiceAccount and grant no way to gain privilege: no bind, escalate,
/// impersonate or wildcard, no write on SecurityContextConstraints or on
/// cluster-wide RBAC; the leader Lease is namespaced (`permissions`).
fn permissions(csv: &Value, out: &mut Vec<Problem>) {
    let accounts: BTreeSet<String> = deployments(csv)
        .filter_map(|(_, spec)| {
            spec.pointer("/template/spec/serviceAccountName")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .collect();
    for field in ["permissions", "clusterPermissions"] {
        let entries = csv["spec"]["install"]["spec"][field]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for (i, entry) in entries.iter().enumerate() {
            let sa = entry["serviceAccountName"].as_str().unwrap_or_default();
            if !accounts.contains(sa) {
                problem(
                    out,
                    "permissions",
                    format!("{field}[{i}].serviceAccountName {sa:?} is no Deployment's"),
                );
            }
            for (j, rule) in entry["rules"].as_array().into_iter().flatten().enumerate() {
                let list = |k: &str| -> Vec<String> {
                    rule[k]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                };
                let (groups, resources, verbs) =
                    (list("apiGroups"), list("resources"), list("verbs"));
                let at = format!("{field}[{i}].rules[{j}]");
                if [&groups, &resources, &verbs]
                    .iter()
                    .any(|l| l.iter().any(|v| v == "*"))
                {
                    problem(out, "permissions", format!("{at}: wildcard"));
                }
                for v in &verbs {
                    if matches!(v.as_str(), "bind" | "escalate" | "impersonate") {
                        problem(out, "permissions", format!("{at}: verb {v}"));
                    }
                }
                let writes = verbs
                    .iter()
                    .any(|v| !matches!(v.as_str(), "get" | "list" | "watch" | "use"));
                if writes && resources.iter().any(|r| r == "securitycontextconstraints") {
                    problem(
                        out,
                        "permissions",
                        format!("{at}: writes SecurityContextConstraints"),
                    );
                }
                if writes
                    && groups.iter().any(|g| g == "rbac.authorization.k8s.io")
                    && resources.iter().any(|r| r.starts_with("cluster"))
                {
                    problem(
                        out,
                        "permissions",
                        format!("{at}: writes cluster-wide RBAC"),
                    );
                }
                if field == "clusterPermissions"
                    && resources.iter().any(|r| r == "leases")
                    && verbs.iter().any(|v| v == "patch")
                {
                    problem(
                        out,
                        "permissions",
                        format!("{at}: the leader Lease belongs in permissions"),
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn csv_with(modes: Value, permissions: Value, cluster: Value) -> Value {
        json!({"spec": {"installModes": modes, "install": {"spec": {
            "deployments": [{"name": "d", "spec": {"template": {"spec": {"serviceAccountName": "sa"}}}}],
            "permissions": permissions,
            "clusterPermissions": cluster,
        }}}})
    }

    fn modes() -> Value {
        json!([
            {"type": "OwnNamespace", "supported": true},
            {"type": "SingleNamespace", "supported": true},
            {"type": "MultiNamespace", "supported": false},
            {"type": "AllNamespaces", "supported": true},
        ])
    }

    #[test]
    fn install_modes_are_each_listed_once_and_one_is_supported() {
        let mut out = Vec::new();
        install_modes(&csv_with(modes(), json!([]), json!([])), &mut out);
        assert!(out.is_empty(), "{out:?}");
        let mut out = Vec::new();
        install_modes(
            &csv_with(
                json!([{"type": "AllNamespaces", "supported": false}]),
                json!([]),
                json!([]),
            ),
            &mut out,
        );
        assert_eq!(out.len(), 4, "{out:?}");
    }

    #[test]
    fn permissions_that_grant_privilege_are_refused() {
        let rule =
            |g: &str, r: &str, v: &[&str]| json!({"apiGroups": [g], "resources": [r], "verbs": v});
        let mut out = Vec::new();
        let good = csv_with(
            modes(),
            json!([{"serviceAccountName": "sa", "rules": [rule("coordination.k8s.io", "leases", &["get", "create", "patch"])]}]),
            json!([{"serviceAccountName": "sa", "rules": [rule("security.openshift.io", "securitycontextconstraints", &["use", "get"])]}]),
        );
        permissions(&good, &mut out);
        assert!(out.is_empty(), "{out:?}");
        for (bad, want) in [
            (
                rule(
                    "security.openshift.io",
                    "securitycontextconstraints",
                    &["create"],
                ),
                "writes SecurityContextConstraints",
            ),
            (
                rule("rbac.authorization.k8s.io", "roles", &["bind"]),
                "verb bind",
            ),
            (
                rule("rbac.authorization.k8s.io", "clusterroles", &["patch"]),
                "cluster-wide RBAC",
            ),
            (rule("", "*", &["get"]), "wildcard"),
            (
                rule("coordination.k8s.io", "leases", &["patch"]),
                "belongs in permissions",
            ),
        ] {
            let mut out = Vec::new();
            permissions(
                &csv_with(
                    modes(),
                    json!([]),
                    json!([{"serviceAccountName": "sa", "rules": [bad]}]),
                ),
                &mut out,
            );
            assert!(
                out.iter().any(|p| p.detail.contains(want)),
                "{want}: {out:?}"
            );
        }
        let mut out = Vec::new();
        permissions(
            &csv_with(
                modes(),
                json!([{"serviceAccountName": "other", "rules": []}]),
                json!([]),
            ),
            &mut out,
        );
        assert!(out[0].detail.contains("no Deployment's"), "{out:?}");
    }
}
