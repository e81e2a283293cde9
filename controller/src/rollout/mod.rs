//! Filter rollout: a new filter build reaches every Envoy only after it
//! passed the wasmtime check.
//!
//! - The source is one ConfigMap (the chart's, `--filter-config-map` in
//!   `--filter-namespace`, key `--filter-key`). [`Rollouts::source_changes`]
//!   watches it; a new module digest triggers every ProxyServer.
//! - The ProxyServer reconcile calls [`prepare`]: it reads what the derived
//!   `<proxy>-filter` ConfigMap holds, picks the target ([`crate::plan::proxy::filter::target`]:
//!   the pinned digest, else the source module), and for a switch runs
//!   [`oooi_wasm_host::check::check_module`] against the next table of every
//!   ProxyServer ([`crate::plan::proxy::check_tables`]) on a blocking thread,
//!   bounded in time and memory. The verdict is cached per module digest (and
//!   per table digest for passes).
//!
//! The decisions themselves are pure and live in [`crate::plan::proxy::filter`]
//! (its types re-exported here); this module holds the I/O around them.
//! - A module that passed is written with the previous one into the derived
//!   ConfigMap, which Envoy's config mount projects beside the ECDS files
//!   that name it; Envoy swaps the filter without a restart. A module that
//!   failed changes nothing and the status says `FilterRejected`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use oooi_routes::RouteTable;
use oooi_wasm_host::check::{CheckLimits, check_module};
use tracing::{info, warn};

use crate::cache::{Stores, cached};
use crate::crd::ProxyServer;
use crate::plan::proxy::filter as plan;
pub use plan::{Deployed, FilterPlan, Module, Target, Verdict};

/// Where the filter module comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceConfig {
    /// Namespace of the source ConfigMap (the chart's release namespace).
    pub namespace: String,
    /// Name of the source ConfigMap.
    pub name: String,
    /// Key of the module in its `binaryData`.
    pub key: String,
}

impl Default for SourceConfig {
    fn default() -> Self {
        SourceConfig {
            namespace: "default".to_string(),
            name: "oooi-sni-router".to_string(),
            key: "oooi_sni_router.wasm".to_string(),
        }
    }
}

#[derive(Debug, Default)]
struct Checked {
    /// Set once a check failed: the module is refused for good.
    failed: Option<(String, String)>,
    /// Digests of the tables the module passed with.
    passed_tables: HashSet<String>,
}

#[derive(Debug, Default)]
struct State {
    source: Option<Module>,
    checked: HashMap<String, Checked>,
}

/// The rollout state shared by the source watch and the reconciles.
#[derive(Debug, Clone)]
pub struct Rollouts {
    /// Where the module comes from.
    pub source: SourceConfig,
    /// Bounds of each check.
    pub limits: CheckLimits,
    state: Arc<Mutex<State>>,
}

impl Rollouts {
    /// No module seen yet.
    pub fn new(source: SourceConfig) -> Rollouts {
        Rollouts {
            source,
            limits: CheckLimits::default(),
            state: Arc::new(Mutex::new(State::default())),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The module the source ConfigMap holds, once seen.
    pub fn source_module(&self) -> Option<Module> {
        self.lock().source.clone()
    }

    /// Records the source module; true when its digest is new.
    pub fn set_source(&self, bytes: Vec<u8>) -> bool {
        let module = Module::new(bytes);
        let mut st = self.lock();
        if st.source.as_ref().map(|m| &m.sha256) == Some(&module.sha256) {
            return false;
        }
        info!(
            sha256 = %module.sha256,
            build = module.build_id.as_deref().unwrap_or("-"),
            bytes = module.bytes.len(),
            "new filter module in the source ConfigMap"
        );
        st.source = Some(module);
        true
    }

    /// Reads the source module out of a ConfigMap (binaryData, or data for
    /// a module someone put there as text, which cannot be valid wasm but
    /// is then refused by the check like any other bad module).
    pub fn module_of(&self, cm: &ConfigMap) -> Option<Vec<u8>> {
        let key = &self.source.key;
        cm.binary_data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| b.0.clone())
            .or_else(|| {
                cm.data
                    .as_ref()
                    .and_then(|d| d.get(key))
                    .map(|s| s.clone().into_bytes())
            })
    }

    /// Watches the source ConfigMap; yields once per new module digest (the
    /// first sighting included). Meant for `Controller::reconcile_all_on`.
    pub fn source_changes(&self, client: Client) -> futures::channel::mpsc::UnboundedReceiver<()> {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let me = self.clone();
        let api: Api<ConfigMap> = Api::namespaced(client, &self.source.namespace);
        let config =
            watcher::Config::default().fields(&format!("metadata.name={}", self.source.name));
        tokio::spawn(async move {
            let mut events =
                std::pin::pin!(watcher(api, config).default_backoff().applied_objects());
            while let Some(event) = events.next().await {
                match event {
                    Ok(cm) => match me.module_of(&cm) {
                        Some(bytes) => {
                            if me.set_source(bytes) && tx.unbounded_send(()).is_err() {
                                return;
                            }
                        }
                        None => warn!(
                            configmap = %cm.name_any(),
                            key = %me.source.key,
                            "the filter source ConfigMap has no module under this key"
                        ),
                    },
                    Err(e) => warn!("watching the filter source ConfigMap: {e}"),
                }
            }
        });
        rx
    }

    /// The verdict on `module` against `tables`, from the cache or from a
    /// check on a blocking thread (only the tables not passed before).
    pub async fn verdict(&self, module: &Module, tables: &[RouteTable]) -> Verdict {
        let missing: Vec<RouteTable> = {
            let st = self.lock();
            let entry = st.checked.get(&module.sha256);
            if let Some((check, detail)) = entry.and_then(|c| c.failed.clone()) {
                return Verdict::Failed { check, detail };
            }
            let mut seen = HashSet::new();
            let missing: Vec<RouteTable> = tables
                .iter()
                .filter(|t| {
                    let d = t.digest();
                    !entry.is_some_and(|c| c.passed_tables.contains(&d)) && seen.insert(d)
                })
                .cloned()
                .collect();
            if missing.is_empty() && entry.is_some() {
                return Verdict::Passed;
            }
            missing
        };
        let digests: Vec<String> = missing.iter().map(RouteTable::digest).collect();
        let bytes = module.bytes.clone();
        let limits = self.limits;
        // Fuel bounds each call into the module; this bounds the whole run
        // (a little beyond the check's own deadline).
        let wait = limits.deadline + Duration::from_secs(5);
        let run = tokio::task::spawn_blocking(move || check_module(&bytes, &missing, &limits));
        let result = match tokio::time::timeout(wait, run).await {
            Ok(Ok(report)) => {
                info!(
                    sha256 = %module.sha256,
                    build = module.build_id.as_deref().unwrap_or("-"),
                    tables = report.tables,
                    routes = report.routes_probed,
                    refusals = report.refusals_probed,
                    took_ms = report.elapsed.as_secs_f64() * 1e3,
                    passed = report.passed(),
                    "filter module checked"
                );
                report
                    .failure
                    .map(|f| (f.check.as_str().to_string(), f.detail))
            }
            Ok(Err(e)) => Some((
                "Deadline".to_string(),
                format!("the check did not finish: {e}"),
            )),
            Err(_) => Some((
                "Deadline".to_string(),
                format!("the check took longer than {wait:?}"),
            )),
        };
        let mut st = self.lock();
        let entry = st.checked.entry(module.sha256.clone()).or_default();
        match result {
            Some((check, detail)) => {
                warn!(sha256 = %module.sha256, %check, %detail, "filter module refused");
                entry.failed = Some((check.clone(), detail.clone()));
                Verdict::Failed { check, detail }
            }
            None => {
                entry.passed_tables.extend(digests);
                Verdict::Passed
            }
        }
    }
}

/// The filter plan of `proxy`: what its derived ConfigMap holds now (from
/// the cache), the target, and for a switch the verdict of the check
/// against the next table of every ProxyServer.
pub async fn prepare(rollouts: &Rollouts, stores: &Stores, proxy: &ProxyServer) -> FilterPlan {
    let ns = proxy.namespace().unwrap_or_default();
    let deployed = cached::<ConfigMap>(
        &stores.config_maps,
        &ns,
        &plan::config_map_name(&proxy.name_any()),
    )
    .map(|cm| Deployed::from_config_map(&cm))
    .unwrap_or_default();
    let source = rollouts.source_module();
    let target = plan::target(
        &deployed,
        source.as_ref(),
        proxy.spec.filter.pinned_sha256.as_deref(),
    );
    let verdict = match &target {
        Target::Switch(module) => {
            let cached = stores.proxy_servers.state();
            // This proxy as reconciled now (the cache may lag behind).
            let proxies = cached.iter().filter_map(|p| p.get()).chain([proxy]);
            let tables = crate::plan::proxy::check_tables(proxies);
            Some(rollouts.verdict(module, &tables).await)
        }
        _ => None,
    };
    plan::plan(deployed, target, verdict)
}
