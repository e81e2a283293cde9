//! `oooi-controller render`: plans offline from manifest files and prints (or
//! writes) every object and config file the controller would apply.
//!
//! Input: multi-document YAML holding any of
//! - `Infra`, `InfraClusterAttachment` (planned like the controller does);
//! - standalone `DHCPServer`, `DNSServer`, `ProxyServer` (their children);
//! - render-only fixtures standing in for observed cluster state (never
//!   applied to a cluster, same `apiVersion`):
//!
//! ```yaml
//! apiVersion: hostedcluster.densityops.com/v1alpha1
//! kind: ObservedCluster           # what the controller reads from Machines/VMIs
//! hostedCluster: {namespace: clusters, name: c1}
//! machines:
//!   - {name: c1-workers-abcde, addresses: [192.0.2.50]}
//! vmis:
//!   - name: c1-workers-abcde
//!     interfaces: [{mac: "02:00:00:00:00:50", ipAddresses: [192.0.2.50]}]
//! appsVip: 192.0.2.200            # optional
//! ---
//! apiVersion: hostedcluster.densityops.com/v1alpha1
//! kind: ObservedInfra             # optional: the proxy's internal ClusterIP
//! metadata: {name: vlan1, namespace: oooi}
//! internalProxyIP: 172.30.0.10
//! ```
//!
//! Output: the derived objects and their children, the attachments'
//! control-plane NetworkPolicies and public DNS Services, then one
//! `PlanSummary` document per Infra (verdict per attachment, the routing
//! table digest), then one `HostedClusterObjects` document per attachment
//! with apps ingress: the objects the controller applies in that
//! attachment's hosted cluster (MetalLB's install in `Managed` mode, the
//! `IPAddressPool`, the `L2Advertisement`, the apps Service), kept apart
//! because they are never applied to the management cluster.
//! With `--out DIR` every object is a file, and the component configs are
//! written as plain files too (`<ns>/<infra>/dhcp.yaml`, `dns.yaml`,
//! `routes.json`, `envoy/*.json`), for the lab; the hosted clusters'
//! objects go under `hosted/<namespace>-<attachment>/`.
//!
//! With a filter module ([`RenderInput::filter`], `--filter-wasm`) each
//! proxy also gets its `<proxy>-filter` ConfigMap as the filter rollout
//! writes it on a fresh cluster (built by the rollout's own planner,
//! [`crate::plan::proxy::filter`]), and Envoy's config names that module. The
//! module first passes the rollout's wasmtime check against every rendered
//! routing table, as in the controller; a refused module fails the render.
//! Without one, Envoy's projected config volume names a ConfigMap the output
//! lacks, and [`Rendered::notes`] says so.
//!
//! GitOps mode ([`RenderInput::gitops`], `render --gitops`) prints only what
//! a cluster takes as it is, for a GitOps tool to apply: no `PlanSummary`
//! (no such kind exists in the cluster; its verdicts go to the notes), and
//! no Secret, so no push token, placeholder or real, lands in Git. The
//! proxies' Envoy config Secrets (`<proxy>-envoy`, they hold the push
//! token) are written by the running controller from the token Secret
//! `<infra>-proxy-push-token`, which it creates unless it exists (the user
//! may create it, e.g. from a secret store). The notes name each left-out
//! Secret.
//!
//! An attachment whose Infra is not in the input is a problem (render
//! exits non-zero unless told otherwise): nothing can be rendered for it.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::Deserialize;
use serde_json::{Value, json};

use oooi_wasm_host::check::{CheckLimits, check_module};

use crate::crd::{DHCPServer, DNSServer, Infra, InfraClusterAttachment, ProxyServer};
use crate::plan::proxy::filter::{self as rollout_plan, Deployed, FilterPlan, Module, Verdict};
use crate::plan::{self, HostedClusterKey, Observed, ObservedCluster};

/// Push token used when none is given: rendering is deterministic, and the
/// controller makes the real one (a random Secret) in the cluster.
pub const OFFLINE_PUSH_TOKEN: &str = "rendered-offline-not-a-secret";

/// The documents of the input files, by kind.
#[derive(Debug, Clone, Default)]
pub struct RenderInput {
    /// Infras.
    pub infras: Vec<Infra>,
    /// Attachments.
    pub attachments: Vec<InfraClusterAttachment>,
    /// Standalone DHCP servers.
    pub dhcp_servers: Vec<DHCPServer>,
    /// Standalone DNS servers.
    pub dns_servers: Vec<DNSServer>,
    /// Standalone proxies.
    pub proxy_servers: Vec<ProxyServer>,
    /// Observed hosted clusters.
    pub clusters: BTreeMap<HostedClusterKey, ObservedCluster>,
    /// Internal proxy ClusterIP per Infra (namespace, name).
    pub internal_proxy_ips: BTreeMap<(String, String), IpAddr>,
    /// The filter module (`--filter-wasm`): rendered into each proxy's
    /// `<proxy>-filter` ConfigMap and named by its Envoy config.
    pub filter: Option<FilterInput>,
    /// Namespace the controller runs in: the component pods' NetworkPolicies
    /// admit the controller's pods there to the push API and the lease
    /// inventory. Default [`DEFAULT_CONTROLLER_NAMESPACE`].
    pub controller_namespace: Option<String>,
    /// Who may scrape the component pods' metrics ports.
    pub metrics_scrapers: plan::network_policy::MetricsScrapers,
    /// Images of components whose Infra names none (as `run` has them).
    pub images: plan::infra::images::DefaultImages,
    /// Placement of components whose Infra leaves it unset (as `run` has it).
    pub placement: plan::workload::placement::DefaultPlacement,
    /// Resources of components whose server leaves them unset (as `run`
    /// has them).
    pub resources: plan::workload::resources::DefaultResources,
    /// Refuse documents of other kinds instead of skipping them.
    pub strict_kinds: bool,
    /// The documents of other kinds that were skipped, one line each.
    pub skipped: Vec<String>,
    /// GitOps output ([`render`] documents what changes): only objects a
    /// cluster accepts as they are, and no secret value.
    pub gitops: bool,
}

/// The controller's namespace when the input names none (the chart's
/// documented install namespace).
pub const DEFAULT_CONTROLLER_NAMESPACE: &str = "oooi-system";

/// The filter module render rolls out.
#[derive(Debug, Clone)]
pub struct FilterInput {
    /// The module (as the source ConfigMap would hold it).
    pub module: Module,
    /// Run the controller's pre-rollout wasmtime check first (default on;
    /// the controller never skips it).
    pub check: bool,
    /// Bounds of the check.
    pub limits: CheckLimits,
}

impl FilterInput {
    /// A module to check with the controller's default limits.
    pub fn new(bytes: Vec<u8>) -> FilterInput {
        FilterInput {
            module: Module::new(bytes),
            check: true,
            limits: CheckLimits::default(),
        }
    }
}

/// An `ObservedCluster` document. Its fields are spelled out rather than
/// flattened from [`ObservedCluster`]: serde's `flatten` drops unknown keys
/// unseen, and a misspelt `machine:` would silently lose the cluster's
/// workers.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ObservedClusterDoc {
    #[allow(dead_code)]
    api_version: String,
    #[allow(dead_code)]
    kind: String,
    #[serde(default)]
    #[allow(dead_code)]
    metadata: Option<DocMeta>,
    hosted_cluster: HostedClusterKey,
    #[serde(default)]
    machines: Vec<plan::infra::observed::ObservedMachine>,
    #[serde(default)]
    vmis: Vec<plan::infra::observed::ObservedVmi>,
    #[serde(default)]
    apps_vip: Option<IpAddr>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ObservedInfraDoc {
    #[allow(dead_code)]
    api_version: String,
    #[allow(dead_code)]
    kind: String,
    metadata: DocMeta,
    #[serde(rename = "internalProxyIP")]
    internal_proxy_ip: IpAddr,
}

/// The metadata an observed document may carry. Only the name and namespace
/// mean anything to `render`; labels and annotations are allowed so that a
/// document copied from a cluster is accepted, anything else is refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DocMeta {
    name: String,
    namespace: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    labels: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    #[allow(dead_code)]
    annotations: Option<serde_json::Map<String, Value>>,
}

/// Decodes one document, the error naming the field at fault
/// (`spec.networkConfig.cidr: 192.0.2.7/24 has host bits set …`): the
/// typed fields (networks, addresses) apply their rules here, once.
///
/// Strict, as `kubectl apply --validate=strict`: a field the type does not
/// know (`metadata.namespce`, a typo inside `metadata` that kube's open
/// ObjectMeta schema would let through) is an error naming every such path.
fn decode<K: serde::de::DeserializeOwned>(doc: Value) -> anyhow::Result<K> {
    let mut unknown = Vec::new();
    let decoded = serde_path_to_error::deserialize(serde_ignored::Deserializer::new(
        doc,
        &mut |path: serde_ignored::Path<'_>| {
            // kube's derived kinds take their type from the Rust type and
            // skip these two; `add_yaml` has checked them already.
            let path = path.to_string();
            if path != "apiVersion" && path != "kind" {
                unknown.push(path);
            }
        },
    ))
    .map_err(|e| {
        let path = e.path().to_string();
        if path.is_empty() || path == "." {
            anyhow::anyhow!("{}", e.into_inner())
        } else {
            anyhow::anyhow!("{path}: {}", e.into_inner())
        }
    })?;
    if !unknown.is_empty() {
        bail!("{}", unknown_fields_message(&unknown));
    }
    Ok(decoded)
}

fn unknown_fields_message(paths: &[String]) -> String {
    let mut paths: Vec<&String> = paths.iter().collect();
    paths.sort();
    paths.dedup();
    format!(
        "unknown field(s) {}",
        paths
            .iter()
            .map(|f| format!("`{f}`"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn defaulted_namespace<K: kube::Resource>(mut obj: K) -> K {
    if obj.meta().namespace.is_none() {
        obj.meta_mut().namespace = Some("default".to_string());
    }
    obj
}

impl RenderInput {
    /// Adds the documents of one YAML text. `source` names it in errors.
    pub fn add_yaml(&mut self, source: &str, text: &str) -> anyhow::Result<()> {
        let docs: Vec<Value> = serde_saphyr::from_multiple(text)
            .with_context(|| format!("{source}: not valid YAML"))?;
        for (i, doc) in docs.into_iter().enumerate() {
            if doc.is_null() {
                continue;
            }
            let kind = doc
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let at = || format!("{source}: document {} (kind `{kind}`)", i + 1);
            let api = doc.get("apiVersion").and_then(Value::as_str).unwrap_or("");
            if api != crate::crd::API_VERSION {
                // Not an oooi object (a Namespace, a NetworkAttachmentDefinition
                // in the same file): skipped, said once, unless strict.
                let name = doc
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let line = format!("{}: {api} {kind} `{name}` is not an oooi kind", at());
                if self.strict_kinds {
                    bail!("{line} (--strict-kinds)");
                }
                self.skipped.push(line);
                continue;
            }
            // Strict field validation, as `kubectl apply` does it: a field the
            // CRD does not declare is an error, never dropped in silence.
            if let Some(unknown) = crate::crd::strict::unknown_fields(&kind, &doc)
                && !unknown.is_empty()
            {
                bail!("{}: {}", at(), unknown_fields_message(&unknown));
            }
            match kind.as_str() {
                "Infra" => self
                    .infras
                    .push(defaulted_namespace(decode(doc).with_context(at)?)),
                "InfraClusterAttachment" => self
                    .attachments
                    .push(defaulted_namespace(decode(doc).with_context(at)?)),
                "DHCPServer" => self
                    .dhcp_servers
                    .push(defaulted_namespace(decode(doc).with_context(at)?)),
                "DNSServer" => self
                    .dns_servers
                    .push(defaulted_namespace(decode(doc).with_context(at)?)),
                "ProxyServer" => self
                    .proxy_servers
                    .push(defaulted_namespace(decode(doc).with_context(at)?)),
                "ObservedCluster" => {
                    let d: ObservedClusterDoc = decode(doc).with_context(at)?;
                    let cluster = ObservedCluster {
                        machines: d.machines,
                        vmis: d.vmis,
                        apps_vip: d.apps_vip,
                    };
                    if self
                        .clusters
                        .insert(d.hosted_cluster.clone(), cluster)
                        .is_some()
                    {
                        bail!("{}: {} is observed twice", at(), d.hosted_cluster);
                    }
                }
                "ObservedInfra" => {
                    let d: ObservedInfraDoc = decode(doc).with_context(at)?;
                    let ns = d
                        .metadata
                        .namespace
                        .unwrap_or_else(|| "default".to_string());
                    self.internal_proxy_ips
                        .insert((ns, d.metadata.name), d.internal_proxy_ip);
                }
                other => bail!(
                    "{}: unknown kind `{other}` (expected Infra, InfraClusterAttachment, DHCPServer, DNSServer, ProxyServer, ObservedCluster or ObservedInfra)",
                    at()
                ),
            }
        }
        Ok(())
    }

    /// Reads and adds one file.
    pub fn add_file(&mut self, path: &Path) -> anyhow::Result<()> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        self.add_yaml(&path.display().to_string(), &text)
    }
}

/// The objects the controller would apply in one attachment's hosted
/// cluster (through the HostedCluster's admin kubeconfig), never in the
/// management cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct HostedSection {
    /// The attachment's namespace.
    pub attachment_namespace: String,
    /// The attachment's name.
    pub attachment: String,
    /// Its HostedCluster (`namespace/name`).
    pub hosted_cluster: String,
    /// The objects, in apply order.
    pub objects: Vec<Value>,
}

/// The render-only kind that wraps a [`HostedSection`] in the YAML output:
/// no cluster has it, so applying the whole output fails on it instead of
/// writing hosted-cluster objects into the management cluster.
pub const HOSTED_SECTION_KIND: &str = "HostedClusterObjects";

impl HostedSection {
    /// The section as one render-only document ([`HOSTED_SECTION_KIND`]).
    pub fn to_document(&self) -> Value {
        json!({
            "apiVersion": crate::crd::API_VERSION,
            "kind": HOSTED_SECTION_KIND,
            "metadata": {"name": self.attachment, "namespace": self.attachment_namespace},
            "hostedCluster": self.hosted_cluster,
            "appliedIn": format!(
                "the hosted cluster of HostedCluster {}, through its admin kubeconfig; not the management cluster",
                self.hosted_cluster
            ),
            "objects": self.objects,
        })
    }
}

/// What `render` produces.
#[derive(Debug, Clone, Default)]
pub struct Rendered {
    /// Every object of the management cluster, in apply order per Infra,
    /// then the summaries.
    pub objects: Vec<Value>,
    /// Per attachment with apps ingress, the objects of its hosted cluster
    /// (kept apart from [`Rendered::objects`]: they are applied elsewhere).
    pub hosted: Vec<HostedSection>,
    /// GitOps output: the YAML stream holds only objects a cluster takes,
    /// so no [`HOSTED_SECTION_KIND`] document (`--out` still writes the
    /// hosted objects, under `hosted/`).
    pub gitops: bool,
    /// Plain config files (relative path, content).
    pub files: Vec<(PathBuf, String)>,
    /// What the output lacks or did not check, for the user (stderr).
    pub notes: Vec<String>,
    /// Why the input is not fit to apply: an invalid Infra (each field named)
    /// or an excluded attachment. `render` fails on any unless told not to.
    pub problems: Vec<String>,
}

fn object_of<T: serde::Serialize>(o: &T) -> anyhow::Result<Value> {
    Ok(serde_json::to_value(o)?)
}

/// What every component of one render shares.
struct Common<'a> {
    push_token: &'a str,
    controller_namespace: &'a str,
    metrics_scrapers: &'a plan::network_policy::MetricsScrapers,
    /// Resources of components whose server leaves them unset.
    resources: &'a plan::workload::resources::DefaultResources,
    /// The filter module and the check's verdict on it.
    filter: Option<(&'a Module, &'a Verdict)>,
}

impl Common<'_> {
    /// Who the component pods' NetworkPolicies admit, as `run` has it.
    fn policy_peers(&self) -> plan::network_policy::PolicyPeers<'_> {
        plan::network_policy::PolicyPeers {
            controller_namespace: Some(self.controller_namespace),
            scrapers: self.metrics_scrapers,
        }
    }
}

fn render_children(
    out: &mut Rendered,
    dir: &Path,
    dhcp: &[DHCPServer],
    dns: &[DNSServer],
    proxy: &[ProxyServer],
    common: &Common<'_>,
) -> anyhow::Result<()> {
    for d in dhcp {
        let name = d.metadata.name.clone().unwrap_or_default();
        out.objects.push(object_of(d)?);
        // As the DHCPServer reconcile plans them (the same planner).
        out.objects.extend(
            plan::dhcp::objects(&common.resources.dhcp(d), common.policy_peers())
                .with_context(|| format!("DHCPServer {name}"))?
                .to_values(),
        );
        out.files.push((
            dir.join(format!("{name}.yaml")),
            serde_saphyr::to_string(&d.spec.config.0)?,
        ));
    }
    for d in dns {
        let name = d.metadata.name.clone().unwrap_or_default();
        out.objects.push(object_of(d)?);
        out.objects.extend(
            plan::dns::objects(&common.resources.dns(d), common.policy_peers())
                .with_context(|| format!("DNSServer {name}"))?
                .to_values(),
        );
        out.files.push((
            dir.join(format!("{name}.yaml")),
            serde_saphyr::to_string(&d.spec.config.0)?,
        ));
    }
    for p in proxy {
        let name = p.metadata.name.clone().unwrap_or_default();
        out.objects.push(object_of(p)?);
        // As the ProxyServer reconcile plans them (the same planner).
        let filter = match common.filter {
            Some((module, verdict)) => Some(first_rollout(p, module, verdict)?),
            None => None,
        };
        let objects = plan::proxy::objects(
            &common.resources.proxy(p),
            common.push_token,
            filter.as_ref(),
            common.policy_peers(),
        )
        .with_context(|| format!("ProxyServer {name}"))?;
        out.objects.extend(objects.to_values());
        let child_proxy = match &filter {
            Some(f) => f.proxy_for_children(p),
            None => p.clone(),
        };
        let table = plan::proxy::table(&p.spec, 1);
        out.files.push((
            dir.join(format!("{name}-routes.json")),
            String::from_utf8(table.to_json())?,
        ));
        let envoy_dir = Path::new(plan::proxy::CONFIG_DIR);
        let cfg = plan::proxy::envoy_config(&child_proxy.spec, common.push_token);
        for (file, bytes) in oooi_envoy::files(&cfg, envoy_dir)? {
            out.files.push((
                dir.join(format!("{name}-envoy")).join(file),
                String::from_utf8(bytes)?,
            ));
        }
    }
    Ok(())
}

fn proxy_key(p: &ProxyServer) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or_default(),
        p.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The filter rollout's plan for `proxy` in a cluster where nothing runs
/// yet and `module` is the source: the rollout's own pure planner, so the
/// ConfigMap and the Envoy config are exactly what the controller writes.
/// An error when the plan activates no module (a failed check, a pin to
/// another module), with the rollout's own condition words.
fn first_rollout(
    proxy: &ProxyServer,
    module: &Module,
    verdict: &Verdict,
) -> anyhow::Result<FilterPlan> {
    let target = rollout_plan::target(
        &Deployed::default(),
        Some(module),
        proxy.spec.filter.pinned_sha256.as_deref(),
    );
    let planned = rollout_plan::plan(Deployed::default(), target, Some(verdict.clone()));
    if planned.deployed.active.is_none() {
        bail!(
            "ProxyServer {}: the filter rollout would write no module ({}: {})",
            proxy_key(proxy),
            planned.condition.reason,
            planned.condition.message
        );
    }
    Ok(planned)
}

/// The controller's pre-rollout check of the module against every rendered
/// routing table (`oooi_wasm_host::check::check_module`, the same limits).
/// A refused module is an error naming the failed check.
fn check_filter(
    filter: &FilterInput,
    proxies: &[&ProxyServer],
    notes: &mut Vec<String>,
) -> anyhow::Result<Verdict> {
    let m = &filter.module;
    let what = format!(
        "filter module sha256:{}{}",
        m.sha256,
        m.build_id
            .as_deref()
            .map(|b| format!(" (build {b})"))
            .unwrap_or_default()
    );
    if !filter.check {
        notes.push(format!(
            "{what} was not checked (--skip-filter-check): the controller would run the wasmtime check before rolling it out"
        ));
        return Ok(Verdict::Passed);
    }
    let report = check_module(
        &m.bytes,
        &plan::proxy::check_tables(proxies.iter().copied()),
        &filter.limits,
    );
    match report.failure {
        None => Ok(Verdict::Passed),
        Some(f) => bail!(
            "{what} refused by the pre-rollout check `{}`: {} (the controller would not roll it out; no filter ConfigMap rendered)",
            f.check.as_str(),
            f.detail
        ),
    }
}

/// Plans every Infra of the input and renders every standalone server.
pub fn render(input: &RenderInput, push_token: &str) -> anyhow::Result<Rendered> {
    let mut out = Rendered::default();
    let controller_namespace = input
        .controller_namespace
        .as_deref()
        .unwrap_or(DEFAULT_CONTROLLER_NAMESPACE);
    let mut infras: Vec<&Infra> = input.infras.iter().collect();
    infras.sort_by_key(|i| (i.metadata.namespace.clone(), i.metadata.name.clone()));
    // Every plan first: the filter check runs once, against every proxy.
    let plans: Vec<(String, String, plan::InfraPlan)> = infras
        .into_iter()
        .map(|infra| {
            let ns = infra.metadata.namespace.clone().unwrap_or_default();
            let name = infra.metadata.name.clone().unwrap_or_default();
            let observed = Observed {
                clusters: input.clusters.clone(),
                internal_proxy_ip: input
                    .internal_proxy_ips
                    .get(&(ns.clone(), name.clone()))
                    .copied(),
                // As the Infra reconcile: the module is the rollout's.
                filter_sha256: None,
            };
            let infra = input.placement.apply(&input.images.apply(infra));
            let p = plan::plan_infra(&infra, &input.attachments, &observed);
            (ns, name, p)
        })
        .collect();
    let proxies: Vec<&ProxyServer> = plans
        .iter()
        .filter_map(|(_, _, p)| p.desired.as_ref())
        .flat_map(|d| d.proxy.iter())
        .chain(input.proxy_servers.iter())
        .collect();
    let verdict = match &input.filter {
        Some(f) if !proxies.is_empty() => Some(check_filter(f, &proxies, &mut out.notes)?),
        _ => None,
    };
    if input.filter.is_some() && proxies.is_empty() {
        out.notes.push(
            "--filter-wasm: the input holds no proxy, so no filter ConfigMap is rendered"
                .to_string(),
        );
    }
    if input.filter.is_none() && !proxies.is_empty() {
        let names: Vec<String> = proxies
            .iter()
            .map(|p| rollout_plan::config_map_name(&proxy_key(p)))
            .collect();
        out.notes.push(format!(
            "the filter ConfigMap{} {} (the Wasm module Envoy loads) {} not included: pass --filter-wasm PATH (the built oooi_sni_router.wasm) to render {} as the controller's filter rollout writes {}, after the same check",
            if names.len() == 1 { "" } else { "s" },
            names.join(", "),
            if names.len() == 1 { "is" } else { "are" },
            if names.len() == 1 { "it" } else { "them" },
            if names.len() == 1 { "it" } else { "them" },
        ));
    }
    let mut pair_tokens: Vec<String> = plans
        .iter()
        .filter_map(|(_, _, p)| p.desired.as_ref())
        .flat_map(|d| d.dhcp.iter())
        .chain(input.dhcp_servers.iter())
        .filter_map(|d| d.spec.pair_token_secret.as_ref().map(|s| s.name.clone()))
        .collect();
    pair_tokens.dedup();
    if !pair_tokens.is_empty() {
        out.notes.push(format!(
            "the DHCP pair token Secret(s) {} (key `token`) are not included: the controller creates each once with a random token",
            pair_tokens.join(", ")
        ));
    }
    let mut inventory_tokens: Vec<String> = plans
        .iter()
        .filter_map(|(_, _, p)| p.desired.as_ref())
        .flat_map(|d| d.dhcp.iter())
        .chain(input.dhcp_servers.iter())
        .filter_map(|d| {
            d.spec
                .inventory_token_secret
                .as_ref()
                .map(|s| s.name.clone())
        })
        .collect();
    inventory_tokens.sort();
    inventory_tokens.dedup();
    if !inventory_tokens.is_empty() {
        out.notes.push(format!(
            "the DHCP inventory token Secret(s) {} (key `token`) are not included: the controller creates each once with a random token",
            inventory_tokens.join(", ")
        ));
    }
    let common = Common {
        push_token,
        controller_namespace,
        metrics_scrapers: &input.metrics_scrapers,
        resources: &input.resources,
        filter: input
            .filter
            .as_ref()
            .map(|f| &f.module)
            .zip(verdict.as_ref()),
    };
    for (ns, name, p) in &plans {
        let dir = PathBuf::from(ns);
        if let Some(d) = &p.desired {
            render_children(&mut out, &dir, &d.dhcp, &d.dns, &d.proxy, &common)?;
        }
        // The ClusterUserDefinedNetwork the Infra asks for, as the Infra
        // reconciler creates it (only with a valid spec, as there).
        if p.desired.is_some()
            && let Some(infra) = input.infras.iter().find(|i| {
                i.metadata.namespace.as_deref() == Some(ns.as_str())
                    && i.metadata.name.as_deref() == Some(name.as_str())
            })
            && let Some(c) = plan::infra::cudn::desired_cudn(infra)
        {
            out.objects.push(object_of(&c)?);
        }
        // One NetworkPolicy per accepted attachment in its control-plane
        // namespace, as the attachment reconciler applies it.
        for a in &p.attachments {
            if let Some(np) =
                plan::network_policy::control_plane_policy(p.verdict(&a.name), ns, name)
            {
                out.objects.push(object_of(&np)?);
            }
        }
        if let Some(infra) = find_infra(input, ns, name) {
            // The public DNS Services, as the attachment reconciler plans them.
            for svc in plan::hosted::public_dns::public_services(infra, &input.attachments, |a| {
                p.verdict(a).is_some_and(|o| o.accepted())
            }) {
                out.objects.push(object_of(&svc)?);
            }
            render_hosted(&mut out, input, p, ns, name)?;
        }
        let routes_digest = p
            .desired
            .as_ref()
            .and_then(|d| d.proxy.first())
            .map(|px| plan::proxy::table(&px.spec, 1).digest());
        let attachments: Vec<Value> = p
            .attachments
            .iter()
            .map(|a| {
                let conds: Vec<Value> = a
                    .conditions(p.desired.is_some())
                    .into_iter()
                    .map(|c| {
                        json!({"type": c.type_, "status": c.status, "reason": c.reason, "message": c.message})
                    })
                    .collect();
                json!({
                    "name": a.name,
                    "hostedCluster": a.hosted_cluster.to_string(),
                    // Accepted only when the Infra is valid too (otherwise
                    // its Accepted condition is Unknown).
                    "accepted": a.accepted() && p.desired.is_some(),
                    "domain": a.domain,
                    "controlPlaneNamespace": a.control_plane_namespace,
                    "workerAddresses": a.worker_addresses.iter().map(|x| x.to_string()).collect::<Vec<_>>(),
                    "conflictingAddresses": a.conflicting_addresses.iter().map(|x| x.to_string()).collect::<Vec<_>>(),
                    "isolation": a.isolation,
                    "conditions": conds,
                })
            })
            .collect();
        for e in &p.errors {
            out.problems.push(format!("Infra {ns}/{name}: {e}"));
        }
        for a in &p.attachments {
            if let Some(e) = &a.exclusion {
                out.problems.push(format!(
                    "InfraClusterAttachment {ns}/{}: excluded ({}): {}",
                    a.name,
                    e.reason(),
                    e.message()
                ));
            }
        }
        let degraded = p.degraded();
        // An invalid Infra has no accepted attachment (Accepted is Unknown).
        let accepted_total = if p.desired.is_some() {
            p.totals.accepted
        } else {
            0
        };
        let notices: Vec<Value> = p
            .notices()
            .into_iter()
            .filter(|c| c.status == crate::crd::status::TRUE)
            .map(|c| json!({"type": c.type_, "reason": c.reason, "message": c.message}))
            .collect();
        if input.gitops {
            for v in &attachments {
                out.notes.push(format!(
                    "InfraClusterAttachment {ns}/{}: {}",
                    v["name"].as_str().unwrap_or_default(),
                    if v["accepted"].as_bool() == Some(true) {
                        "accepted"
                    } else {
                        "not accepted"
                    }
                ));
            }
            continue;
        }
        out.objects.push(json!({
            "apiVersion": crate::crd::API_VERSION,
            "kind": "PlanSummary",
            "metadata": {"name": name, "namespace": ns},
            "valid": p.desired.is_some(),
            "degraded": {"status": degraded.status, "reason": degraded.reason, "message": degraded.message},
            "notices": notices,
            "attachments": {
                "total": p.totals.total,
                "accepted": accepted_total,
                "excluded": p.totals.excluded,
            },
            "routesDigestAtGeneration1": routes_digest,
            "verdicts": attachments,
        }));
    }
    let dir = PathBuf::from("standalone");
    for d in &input.dhcp_servers {
        render_children(&mut out, &dir, std::slice::from_ref(d), &[], &[], &common)?;
    }
    for d in &input.dns_servers {
        render_children(&mut out, &dir, &[], std::slice::from_ref(d), &[], &common)?;
    }
    for p in &input.proxy_servers {
        render_children(&mut out, &dir, &[], &[], std::slice::from_ref(p), &common)?;
    }
    out.problems.extend(attachments_without_infra(input));
    if input.gitops {
        out.gitops = true;
        for h in &out.hosted {
            out.notes.push(format!(
                "--gitops: the {} object(s) of the hosted cluster of HostedCluster {} (InfraClusterAttachment {}/{}) are not in the stream: the controller applies them there; `--out DIR` writes them under hosted/",
                h.objects.len(),
                h.hosted_cluster,
                h.attachment_namespace,
                h.attachment
            ));
        }
        let (secrets, kept): (Vec<Value>, Vec<Value>) = std::mem::take(&mut out.objects)
            .into_iter()
            .partition(|o| o["kind"] == "Secret");
        out.objects = kept;
        for s in &secrets {
            out.notes.push(format!(
                "--gitops: Secret {}/{} (Envoy's config with the push token) is left out: the controller writes it at run time from the push token Secret the ProxyServer names",
                s["metadata"]["namespace"].as_str().unwrap_or_default(),
                s["metadata"]["name"].as_str().unwrap_or_default(),
            ));
        }
    }
    Ok(out)
}

/// The Infra `ns/name` of the input.
fn find_infra<'a>(input: &'a RenderInput, ns: &str, name: &str) -> Option<&'a Infra> {
    input.infras.iter().find(|i| {
        i.metadata.namespace.as_deref() == Some(ns) && i.metadata.name.as_deref() == Some(name)
    })
}

/// The hosted-cluster objects of every attachment of the planned Infra
/// `ns/name` with apps ingress, as the attachment reconciler converges them
/// ([`plan::hosted::apps_ingress`]): in `Managed` mode MetalLB's OLM install and its
/// `MetalLB` CR (the controller writes the CR once OLM serves its CRD),
/// then the pool, its L2 advertisement and the apps Service. Apps ingress
/// that would not be applied (attachment not accepted, a pool conflict, no
/// addresses) is a note with the status it would report.
fn render_hosted(
    out: &mut Rendered,
    input: &RenderInput,
    p: &plan::InfraPlan,
    ns: &str,
    name: &str,
) -> anyhow::Result<()> {
    let mut attachments: Vec<&InfraClusterAttachment> = input
        .attachments
        .iter()
        .filter(|a| a.metadata.namespace.as_deref() == Some(ns) && a.spec.infra_ref.name == name)
        .collect();
    attachments.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for att in attachments {
        let att_name = att.metadata.name.clone().unwrap_or_default();
        let r = match plan::hosted::apps_ingress::gate(att, p.verdict(&att_name)) {
            plan::hosted::apps_ingress::Gate::Disabled => continue,
            plan::hosted::apps_ingress::Gate::Blocked(st) => {
                out.notes.push(format!(
                    "InfraClusterAttachment {ns}/{att_name}: apps ingress is not applied in the hosted cluster ({} {}): {}",
                    st.phase,
                    st.reason.unwrap_or_default(),
                    st.message.unwrap_or_default()
                ));
                continue;
            }
            plan::hosted::apps_ingress::Gate::Go(r) => r,
        };
        let objects = plan::hosted::apps_ingress::install_objects(&r, true)
            .into_iter()
            .chain(plan::hosted::apps_ingress::pool_objects(&r))
            .map(|o| object_of(&o.object))
            .collect::<anyhow::Result<Vec<Value>>>()?;
        out.hosted.push(HostedSection {
            attachment_namespace: ns.to_string(),
            attachment: att_name,
            hosted_cluster: format!(
                "{}/{}",
                att.spec.hosted_cluster_ref.namespace, att.spec.hosted_cluster_ref.name
            ),
            objects,
        });
    }
    Ok(())
}

/// One problem per attachment whose Infra (`spec.infraRef`, in the
/// attachment's namespace) the input does not hold: render plans nothing
/// for it, which would otherwise pass unnoticed.
pub fn attachments_without_infra(input: &RenderInput) -> Vec<String> {
    input
        .attachments
        .iter()
        .filter(|a| {
            !input.infras.iter().any(|i| {
                i.metadata.namespace == a.metadata.namespace
                    && i.metadata.name.as_deref() == Some(a.spec.infra_ref.name.as_str())
            })
        })
        .map(|a| {
            let ns = a.metadata.namespace.as_deref().unwrap_or_default();
            format!(
                "InfraClusterAttachment {ns}/{}: spec.infraRef.name: Infra {ns}/{} is not in the input, so nothing is rendered for this attachment (add the file that holds the Infra)",
                a.metadata.name.as_deref().unwrap_or_default(),
                a.spec.infra_ref.name
            )
        })
        .collect()
}

/// Every object as multi-document YAML: the management cluster's, then
/// one [`HOSTED_SECTION_KIND`] document per hosted section.
pub fn to_yaml(rendered: &Rendered) -> anyhow::Result<String> {
    let mut s = String::new();
    let hosted = rendered
        .hosted
        .iter()
        .filter(|_| !rendered.gitops)
        .map(HostedSection::to_document);
    for o in rendered.objects.iter().cloned().chain(hosted) {
        s.push_str("---\n");
        s.push_str(&serde_saphyr::to_string(&o)?);
    }
    Ok(s)
}

/// Writes every object (`objects/NNN-<kind>-<namespace>-<name>.yaml`) and
/// every config file under `dir`.
pub fn write_out(rendered: &Rendered, dir: &Path) -> anyhow::Result<()> {
    let objects = dir.join("objects");
    std::fs::create_dir_all(&objects)
        .with_context(|| format!("cannot create {}", objects.display()))?;
    for (i, o) in rendered.objects.iter().enumerate() {
        let kind = o["kind"].as_str().unwrap_or("object").to_ascii_lowercase();
        let ns = o["metadata"]["namespace"].as_str().unwrap_or("cluster");
        let name = o["metadata"]["name"].as_str().unwrap_or("unnamed");
        let path = objects.join(format!("{i:03}-{kind}-{ns}-{name}.yaml"));
        std::fs::write(&path, serde_saphyr::to_string(o)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    // Hosted clusters' objects apart: `hosted/<namespace>-<attachment>/`.
    for section in &rendered.hosted {
        let sub = dir.join("hosted").join(format!(
            "{}-{}",
            section.attachment_namespace, section.attachment
        ));
        std::fs::create_dir_all(&sub)
            .with_context(|| format!("cannot create {}", sub.display()))?;
        for (i, o) in section.objects.iter().enumerate() {
            let kind = o["kind"].as_str().unwrap_or("object").to_ascii_lowercase();
            let ns = o["metadata"]["namespace"].as_str().unwrap_or("cluster");
            let name = o["metadata"]["name"].as_str().unwrap_or("unnamed");
            let path = sub.join(format!("{i:03}-{kind}-{ns}-{name}.yaml"));
            std::fs::write(&path, serde_saphyr::to_string(o)?)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
    }
    for (rel, text) in &rendered.files {
        let path = dir.join("files").join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}
