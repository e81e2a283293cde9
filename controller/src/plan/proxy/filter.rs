//! The filter rollout's decisions: which module a ProxyServer should run,
//! the derived filter ConfigMap that carries it, and what the status says.
//! No I/O: [`crate::rollout`] hands in what it observed and the verdict of
//! the wasmtime check (run against [`crate::plan::proxy::check_tables`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;

use crate::crd::{ProxyServer, ProxyServerStatus};
use crate::plan::PlannedCondition;
use crate::plan::labels::{Component, child_meta, instance_of};

/// Annotation of the derived ConfigMap: SHA-256 (hex) of the active module.
pub const ACTIVE_ANNOTATION: &str = oooi_vocabulary::labels::FILTER_DIGEST;
/// Annotation of the derived ConfigMap: SHA-256 (hex) of the previous module.
pub const PREVIOUS_ANNOTATION: &str = oooi_vocabulary::labels::FILTER_PREVIOUS_DIGEST;
/// Annotation of the derived ConfigMap: build id of the active module.
pub const BUILD_ANNOTATION: &str = oooi_vocabulary::labels::FILTER_BUILD_ID;
/// Condition type: `True` when a module was refused (the reason names the
/// failed check) and the running filter stays.
pub const FILTER_REJECTED: &str = "FilterRejected";
/// The derived ConfigMap keeps the previous module only while both fit
/// under this size (a ConfigMap holds at most 1 MiB).
pub const MAX_CONFIG_MAP_BYTES: usize = 1_000_000;

/// One filter module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Module {
    /// SHA-256 (hex) of the bytes.
    pub sha256: String,
    /// The stamped build id, if the module carries one.
    pub build_id: Option<String>,
    /// The module.
    pub bytes: Arc<Vec<u8>>,
}

impl Module {
    /// A module from its bytes.
    pub fn new(bytes: Vec<u8>) -> Module {
        Module {
            sha256: oooi_envoy::module_sha256(&bytes),
            build_id: oooi_routes::build_id::read(&bytes),
            bytes: Arc::new(bytes),
        }
    }

    /// Its key in the derived ConfigMap (and file name in Envoy's mount):
    /// versioned, so the old and the new build sit side by side.
    pub fn file_name(&self) -> String {
        oooi_envoy::module_file_name(&self.bytes)
    }

    fn describe(&self) -> String {
        match &self.build_id {
            Some(b) => format!("{} (build {b})", short(&self.sha256)),
            None => short(&self.sha256).to_string(),
        }
    }
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

/// Accepts `sha256:<hex>` as well as plain hex; lowercases.
pub fn normalize_digest(d: &str) -> String {
    d.trim().trim_start_matches("sha256:").to_ascii_lowercase()
}

/// Name of the derived filter ConfigMap of ProxyServer `proxy`.
pub fn config_map_name(proxy: &str) -> String {
    format!("{proxy}-filter")
}

/// What a ProxyServer's derived ConfigMap holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deployed {
    /// The module Envoy runs.
    pub active: Option<Module>,
    /// The one before, kept for rollback.
    pub previous: Option<Module>,
}

impl Deployed {
    /// Reads a derived ConfigMap: the modules its annotations name, each
    /// only if its bytes are there and hash to the named digest.
    pub fn from_config_map(cm: &ConfigMap) -> Deployed {
        let data = cm.binary_data.clone().unwrap_or_default();
        let module = |annotation: &str| -> Option<Module> {
            let want = normalize_digest(cm.annotations().get(annotation)?);
            data.values()
                .map(|b| Module::new(b.0.clone()))
                .find(|m| m.sha256 == want)
        };
        Deployed {
            active: module(ACTIVE_ANNOTATION),
            previous: module(PREVIOUS_ANNOTATION),
        }
    }

    /// The known module with digest `sha256`.
    pub fn find(&self, sha256: &str) -> Option<&Module> {
        [&self.active, &self.previous]
            .into_iter()
            .flatten()
            .find(|m| m.sha256 == sha256)
    }
}

/// What a ProxyServer should move to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Stay on the deployed module.
    Keep,
    /// Check this module, and run it if it passes.
    Switch(Module),
    /// The pinned digest is neither deployed nor the source module.
    PinNotFound(String),
}

/// The module a ProxyServer should run: the pinned digest when it has one
/// (the active, the previous or the source module), else the source
/// module.
pub fn target(deployed: &Deployed, source: Option<&Module>, pinned: Option<&str>) -> Target {
    let active = deployed.active.as_ref().map(|m| m.sha256.as_str());
    let want = match pinned.map(normalize_digest) {
        Some(pin) => {
            let found = deployed
                .find(&pin)
                .or(source.filter(|s| s.sha256 == pin))
                .cloned();
            match found {
                Some(m) => m,
                None => return Target::PinNotFound(pin),
            }
        }
        None => match source {
            Some(s) => s.clone(),
            None => return Target::Keep,
        },
    };
    if Some(want.sha256.as_str()) == active {
        Target::Keep
    } else {
        Target::Switch(want)
    }
}

/// The wasmtime check's answer for one module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every check passed against every live table.
    Passed,
    /// A check failed.
    Failed {
        /// The failed check (`oooi_wasm_host::check::Check`), CamelCase.
        check: String,
        /// What was seen.
        detail: String,
    },
}

/// The filter half of a ProxyServer's reconcile.
#[derive(Debug, Clone, PartialEq)]
pub struct FilterPlan {
    /// What the derived ConfigMap must hold.
    pub deployed: Deployed,
    /// The `FilterRejected` condition.
    pub condition: PlannedCondition,
    /// The module that was switched to in this plan, if any.
    pub switched: Option<Module>,
}

/// The plan from what is deployed, the target and (for a switch) the
/// check's verdict.
pub fn plan(deployed: Deployed, target: Target, verdict: Option<Verdict>) -> FilterPlan {
    let running = match &deployed.active {
        Some(m) => format!("the running filter {} stays", m.describe()),
        None => "no filter runs yet".to_string(),
    };
    match (target, verdict) {
        (Target::Switch(module), Some(Verdict::Passed)) => {
            let previous = deployed
                .active
                .clone()
                .filter(|a| a.sha256 != module.sha256)
                .filter(|a| a.bytes.len() + module.bytes.len() <= MAX_CONFIG_MAP_BYTES);
            let condition = PlannedCondition::no(
                FILTER_REJECTED,
                "Accepted",
                // The same words as a later Keep, so the status settles.
                format!("filter {} is active", module.describe()),
            );
            FilterPlan {
                deployed: Deployed {
                    active: Some(module.clone()),
                    previous,
                },
                condition,
                switched: Some(module),
            }
        }
        (Target::Switch(module), Some(Verdict::Failed { check, detail })) => FilterPlan {
            condition: PlannedCondition::yes(
                FILTER_REJECTED,
                &check,
                format!(
                    "filter {} failed check {check}: {detail}; {running}",
                    module.describe()
                ),
            ),
            deployed,
            switched: None,
        },
        (Target::Switch(module), None) => FilterPlan {
            condition: PlannedCondition::new(
                FILTER_REJECTED,
                crate::crd::status::UNKNOWN,
                "Checking",
                format!("filter {} is being checked; {running}", module.describe()),
            ),
            deployed,
            switched: None,
        },
        (Target::PinNotFound(pin), _) => FilterPlan {
            condition: PlannedCondition::yes(
                FILTER_REJECTED,
                "PinnedModuleNotFound",
                format!(
                    "spec.filter.pinnedSha256 {pin} is neither the active, the previous nor the source module; {running}"
                ),
            ),
            deployed,
            switched: None,
        },
        (Target::Keep, _) => {
            let message = match &deployed.active {
                Some(m) => format!("filter {} is active", m.describe()),
                None => "no filter module yet (the source ConfigMap was not seen)".to_string(),
            };
            FilterPlan {
                condition: PlannedCondition::no(FILTER_REJECTED, "Accepted", message),
                deployed,
                switched: None,
            }
        }
    }
}

impl FilterPlan {
    /// The derived ConfigMap (owned by the ProxyServer): the active module
    /// and the previous one under their versioned names. `None` until a
    /// module is active.
    pub fn config_map(&self, proxy: &ProxyServer) -> Option<ConfigMap> {
        let active = self.deployed.active.as_ref()?;
        let mut data = BTreeMap::new();
        let mut annotations =
            BTreeMap::from([(ACTIVE_ANNOTATION.to_string(), active.sha256.clone())]);
        if let Some(b) = &active.build_id {
            annotations.insert(BUILD_ANNOTATION.to_string(), b.clone());
        }
        data.insert(active.file_name(), ByteString(active.bytes.to_vec()));
        if let Some(p) = &self.deployed.previous {
            data.insert(p.file_name(), ByteString(p.bytes.to_vec()));
            annotations.insert(PREVIOUS_ANNOTATION.to_string(), p.sha256.clone());
        }
        let name = proxy.name_any();
        let mut meta = child_meta(
            proxy,
            config_map_name(&name),
            &instance_of(&proxy.metadata),
            Component::Proxy,
        );
        meta.annotations
            .get_or_insert_with(BTreeMap::new)
            .extend(annotations);
        Some(ConfigMap {
            metadata: meta,
            binary_data: Some(data),
            ..ConfigMap::default()
        })
    }

    /// `proxy` with `spec.filter` pointing at the active module (key and
    /// digest), so the planned Envoy config references it.
    pub fn proxy_for_children(&self, proxy: &ProxyServer) -> ProxyServer {
        let mut p = proxy.clone();
        if let Some(active) = &self.deployed.active {
            p.spec.filter.key = active.file_name();
            p.spec.filter.sha256 = Some(active.sha256.clone());
        }
        p
    }

    /// Fills the filter fields of the status.
    pub fn fill_status(&self, st: &mut ProxyServerStatus) {
        st.filter_digest = self.deployed.active.as_ref().map(|m| m.sha256.clone());
        st.filter_build_id = self
            .deployed
            .active
            .as_ref()
            .and_then(|m| m.build_id.clone());
        st.previous_filter_digest = self.deployed.previous.as_ref().map(|m| m.sha256.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::status;

    fn module(tag: &str) -> Module {
        Module::new(format!("\0asm module {tag}").into_bytes())
    }

    fn deployed(active: &str, previous: Option<&str>) -> Deployed {
        Deployed {
            active: Some(module(active)),
            previous: previous.map(module),
        }
    }

    #[test]
    fn a_new_source_module_is_a_switch_and_the_active_one_a_keep() {
        let d = deployed("a", None);
        assert_eq!(
            target(&d, Some(&module("b")), None),
            Target::Switch(module("b"))
        );
        assert_eq!(target(&d, Some(&module("a")), None), Target::Keep);
        assert_eq!(target(&Deployed::default(), None, None), Target::Keep);
    }

    #[test]
    fn a_pin_selects_the_previous_module_and_ignores_the_source() {
        let d = deployed("b", Some("a"));
        let pin = format!("sha256:{}", module("a").sha256.to_uppercase());
        assert_eq!(
            target(&d, Some(&module("c")), Some(&pin)),
            Target::Switch(module("a"))
        );
        assert_eq!(
            target(&d, Some(&module("c")), Some(&module("b").sha256)),
            Target::Keep
        );
        assert_eq!(
            target(&d, None, Some(&"f".repeat(64))),
            Target::PinNotFound("f".repeat(64))
        );
    }

    #[test]
    fn a_passed_switch_keeps_the_old_module_as_previous() {
        let p = plan(
            deployed("a", Some("z")),
            Target::Switch(module("b")),
            Some(Verdict::Passed),
        );
        assert_eq!(p.deployed, deployed("b", Some("a")));
        assert_eq!(p.condition.status, status::FALSE);
        assert_eq!(p.switched, Some(module("b")));
    }

    #[test]
    fn a_failed_check_keeps_what_runs_and_names_the_check() {
        let p = plan(
            deployed("a", None),
            Target::Switch(module("b")),
            Some(Verdict::Failed {
                check: "RoutingDecision".into(),
                detail: "port 443 …".into(),
            }),
        );
        assert_eq!(p.deployed, deployed("a", None));
        assert_eq!(p.condition.status, status::TRUE);
        assert_eq!(p.condition.reason, "RoutingDecision");
        assert!(p.condition.message.contains("stays"), "{:?}", p.condition);
        assert_eq!(p.switched, None);
    }

    #[test]
    fn the_derived_config_map_round_trips() {
        let p = plan(
            deployed("a", None),
            Target::Switch(module("b")),
            Some(Verdict::Passed),
        );
        let proxy = ProxyServer::new(
            "vlan200-proxy",
            serde_json::from_value(serde_json::json!({
                "vlan": {"networkAttachmentDefinition": "n", "networkAttachmentNamespace": "n",
                         "address": "192.0.2.4/24"},
                "image": "envoy", "pushTokenSecret": {"name": "t"}
            }))
            .unwrap(),
        );
        let cm = p.config_map(&proxy).unwrap();
        assert_eq!(cm.metadata.name.as_deref(), Some("vlan200-proxy-filter"));
        assert_eq!(cm.binary_data.as_ref().unwrap().len(), 2);
        assert_eq!(Deployed::from_config_map(&cm), p.deployed);
        let child = p.proxy_for_children(&proxy);
        assert_eq!(child.spec.filter.key, module("b").file_name());
        assert_eq!(child.spec.filter.sha256, Some(module("b").sha256));
    }
}
