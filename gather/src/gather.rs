//! The gather itself: reads through the API server and writes the
//! [`Tree`]. Every request has its own deadline; a failed one is written to
//! `errors.txt` and the gather goes on.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use http_body_util::BodyExt as _;
use kube::Client;
use oooi_vocabulary::labels as keys;
use serde_json::{Value, json};

use crate::components::{self, component_of};
use crate::inventory;
use crate::kinds::{self, APP_SELECTOR, CHILDREN, INFRA_LABEL, OOOI, OOOI_VERSION, OPTIONAL, Res};
use crate::summary::{self, EndpointAnswer, Gathered};
use crate::tree::{self, Tree};

/// What to gather and how.
#[derive(Debug, Clone)]
pub struct Options {
    /// The destination (`/must-gather` under `oc adm must-gather`).
    pub dest: PathBuf,
    /// Deadline of each API request.
    pub request_timeout: Duration,
    /// Most bytes of one container log (its end is kept).
    pub log_limit_bytes: u64,
    /// Namespaces to gather beyond those oooi's resources and pods are in.
    pub extra_namespaces: Vec<String>,
    /// Skip the components' HTTP endpoints.
    pub skip_endpoints: bool,
    /// Only log lines newer than this (`oc adm must-gather --since`,
    /// `--since-time`).
    pub logs_since: Option<LogsSince>,
}

/// Which log lines a gather keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogsSince {
    /// The last this many seconds (`sinceSeconds`).
    Seconds(u64),
    /// From this RFC 3339 time on (`sinceTime`).
    Time(String),
}

impl LogsSince {
    /// From `MUST_GATHER_SINCE` (a Go duration such as `2h0m0s`, what
    /// `oc adm must-gather --since` passes).
    pub fn from_duration(text: &str) -> Result<LogsSince, String> {
        let since = oooi_process::duration::parse(text).map_err(|e| format!("since: {e}"))?;
        // At least one second: the API counts whole seconds.
        let seconds = since.as_secs() + u64::from(since.subsec_nanos() > 0);
        Ok(LogsSince::Seconds(seconds.max(1)))
    }

    /// From `MUST_GATHER_SINCE_TIME` (RFC 3339, what `--since-time` passes).
    pub fn from_time(text: &str) -> Result<LogsSince, String> {
        text.parse::<k8s_openapi::jiff::Timestamp>()
            .map_err(|e| format!("since-time: `{text}` is not an RFC 3339 time: {e}"))?;
        Ok(LogsSince::Time(text.to_string()))
    }

    fn query(&self) -> String {
        match self {
            LogsSince::Seconds(s) => format!("&sinceSeconds={s}"),
            LogsSince::Time(t) => format!("&sinceTime={}", encode(t)),
        }
    }
}

/// A failed request: what it was and why.
#[derive(Debug)]
struct Failed {
    code: Option<u16>,
    message: String,
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.code {
            Some(c) => write!(f, "HTTP {c}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// How a request that met its deadline is reported.
const TIMED_OUT: &str = "no answer within";

/// The API client with a deadline per request.
struct Api {
    client: Client,
    timeout: Duration,
}

impl Api {
    /// GET `path`: status and body, whatever the status. A request that
    /// fails before any answer (a kept-alive connection the server had just
    /// closed) is sent once more; one that times out is not.
    async fn raw(&self, path: &str) -> Result<(u16, Vec<u8>), Failed> {
        match self.raw_once(path).await {
            Err(Failed {
                code: None,
                message,
            }) if !message.starts_with(TIMED_OUT) => {
                tracing::debug!(%path, error = %message, "sending once more");
                self.raw_once(path).await
            }
            other => other,
        }
    }

    async fn raw_once(&self, path: &str) -> Result<(u16, Vec<u8>), Failed> {
        let request = http::Request::get(path)
            .body(kube::client::Body::empty())
            .map_err(|e| Failed {
                code: None,
                message: format!("bad request path {path}: {e}"),
            })?;
        let call = async {
            let response = self.client.send(request).await.map_err(|e| Failed {
                code: None,
                message: e.to_string(),
            })?;
            let code = response.status().as_u16();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| Failed {
                    code: Some(code),
                    message: format!("reading the body: {e}"),
                })?
                .to_bytes()
                .to_vec();
            Ok((code, body))
        };
        match tokio::time::timeout(self.timeout, call).await {
            Ok(r) => r,
            Err(_) => Err(Failed {
                code: None,
                message: format!("{TIMED_OUT} {} s", self.timeout.as_secs_f64()),
            }),
        }
    }

    /// GET `path` as JSON; a status other than 2xx is a failure.
    async fn json(&self, path: &str) -> Result<Value, Failed> {
        let (code, body) = self.raw(path).await?;
        if !(200..300).contains(&code) {
            let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let message = v["message"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| String::from_utf8_lossy(&body).trim().to_string());
            return Err(Failed {
                code: Some(code),
                message,
            });
        }
        serde_json::from_slice(&body).map_err(|e| Failed {
            code: Some(code),
            message: format!("not JSON: {e}"),
        })
    }

    /// Every item of a collection (pages of 500), each with its kind and
    /// apiVersion set (a list's items carry neither).
    async fn list(
        &self,
        res: &Res,
        namespace: Option<&str>,
        selector: Option<&str>,
    ) -> Result<Vec<Value>, Failed> {
        let mut items = Vec::new();
        let mut cont: Option<String> = None;
        loop {
            let mut query = vec!["limit=500".to_string()];
            if let Some(s) = selector {
                query.push(format!("labelSelector={}", encode(s)));
            }
            if let Some(c) = &cont {
                query.push(format!("continue={}", encode(c)));
            }
            let page = self
                .json(&format!("{}?{}", res.path(namespace), query.join("&")))
                .await?;
            for mut item in page["items"].as_array().cloned().unwrap_or_default() {
                item["kind"] = json!(res.kind);
                item["apiVersion"] = json!(res.api_version());
                items.push(item);
            }
            cont = page["metadata"]["continue"]
                .as_str()
                .filter(|c| !c.is_empty())
                .map(str::to_string);
            if cont.is_none() {
                return Ok(items);
            }
        }
    }
}

/// Percent-encodes a query value.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn name_of(o: &Value) -> &str {
    o["metadata"]["name"].as_str().unwrap_or("")
}

fn namespace_of(o: &Value) -> Option<&str> {
    o["metadata"]["namespace"].as_str()
}

/// True for a Lease of oooi: the controller's leader Lease or an address
/// agent's.
pub fn is_oooi_lease(lease: &Value) -> bool {
    let labels = &lease["metadata"]["labels"];
    let managed = labels[keys::APP_MANAGED_BY].as_str();
    name_of(lease) == keys::LEADER_LEASE
        || labels[keys::APP_NAME] == keys::APP_NAME_VALUE
        || managed
            .is_some_and(|m| m == keys::MANAGED_BY_VALUE || m == keys::EARLIER_AGENT_LEASE_MANAGER)
}

/// A Machine as its name, phase, node and addresses only.
pub fn machine_addresses(m: &Value) -> Value {
    json!({
        "apiVersion": m["apiVersion"], "kind": m["kind"],
        "metadata": {"name": m["metadata"]["name"], "namespace": m["metadata"]["namespace"],
                     "labels": m["metadata"]["labels"]},
        "status": {"phase": m["status"]["phase"], "nodeRef": m["status"]["nodeRef"],
                   "addresses": m["status"]["addresses"]},
        "note": "must-gather keeps a Machine's addresses only",
    })
}

/// A VMI as its name, phase, node and interfaces only (its spec may carry
/// cloud-init user data with credentials).
pub fn vmi_interfaces(v: &Value) -> Value {
    json!({
        "apiVersion": v["apiVersion"], "kind": v["kind"],
        "metadata": {"name": v["metadata"]["name"], "namespace": v["metadata"]["namespace"],
                     "labels": v["metadata"]["labels"]},
        "status": {"phase": v["status"]["phase"], "nodeName": v["status"]["nodeName"],
                   "interfaces": v["status"]["interfaces"]},
        "note": "must-gather keeps a VMI's interfaces only (its spec may hold cloud-init user data)",
    })
}

/// Runs the gather and writes the tree; returns it (with its failures).
pub async fn run(client: Client, options: &Options) -> std::io::Result<Tree> {
    let reach = oooi_inventory_client::reach::PortForward {
        client: client.clone(),
        timeout: options.request_timeout,
    };
    run_with(client, options, &reach).await
}

/// [`run`], reaching the DHCP servers' lease inventory through `reach`
/// (tests give loopback servers; the mocked API cannot port-forward).
pub async fn run_with<R: oooi_inventory_client::reach::Reach>(
    client: Client,
    options: &Options,
    reach: &R,
) -> std::io::Result<Tree> {
    let mut tree = Tree::create(&options.dest)?;
    let api = Api {
        client,
        timeout: options.request_timeout,
    };
    let mut g = Gathered::default();

    match api.json("/version").await {
        Ok(v) => g.api_server = v["gitVersion"].as_str().map(str::to_string),
        Err(e) => tree.error("GET /version", e),
    }

    // Read first, write after: every Secret value of the namespaces visited
    // must be known before anything is written.
    let mut crs: Vec<(Res, Vec<Value>)> = Vec::new();
    for fixed in OOOI {
        let res = fixed.at(OOOI_VERSION);
        match api.list(&res, None, None).await {
            Ok(items) => crs.push((res, items)),
            Err(e) => tree.error(format!("list {}", res.crd_name()), e),
        }
    }
    let pods_res = kinds::builtin("", "v1", "Pod", "pods");
    let pods = match api.list(&pods_res, None, Some(APP_SELECTOR)).await {
        Ok(p) => p,
        Err(e) => {
            tree.error(format!("list pods -l {APP_SELECTOR}"), e);
            Vec::new()
        }
    };
    let mut namespaces: BTreeSet<String> = crs
        .iter()
        .flat_map(|(_, items)| items.iter())
        .chain(pods.iter())
        .filter_map(|o| namespace_of(o).map(str::to_string))
        .collect();
    namespaces.extend(options.extra_namespaces.iter().cloned());

    // The DHCP servers' inventory tokens, kept in memory to ask them (never
    // written: every Secret value is redacted).
    let token_secrets = inventory::token_secrets(
        &crs.iter()
            .filter(|(r, _)| r.kind == "DHCPServer")
            .flat_map(|(_, items)| items.iter().cloned())
            .collect::<Vec<_>>(),
    );
    let mut tokens: BTreeMap<(String, String), String> = BTreeMap::new();
    let secrets_res = kinds::builtin("", "v1", "Secret", "secrets");
    let mut secrets = Vec::new();
    for ns in &namespaces {
        match api.list(&secrets_res, Some(ns), None).await {
            Ok(items) => {
                for s in &items {
                    tree.redactor.learn_secret(s);
                    let key = (
                        namespace_of(s).unwrap_or("").to_string(),
                        name_of(s).to_string(),
                    );
                    if token_secrets.contains(&key)
                        && let Some(t) = s["data"]["token"].as_str().and_then(|b| {
                            use base64::Engine as _;
                            base64::engine::general_purpose::STANDARD.decode(b).ok()
                        })
                        && let Ok(t) = String::from_utf8(t)
                    {
                        tokens.insert(key, t.trim().to_string());
                    }
                }
                secrets.extend(items);
            }
            Err(e) => tree.error(format!("list secrets in {ns}"), e),
        }
    }
    // Only the summary of a Secret stays in memory from here on.
    for s in &secrets {
        let path = tree::object_path(namespace_of(s), "secrets", name_of(s));
        tree.write_object(&path, s);
    }
    drop(secrets);

    for (res, items) in &crs {
        for o in items {
            tree.write_object(
                &tree::object_path(namespace_of(o), res.plural, name_of(o)),
                o,
            );
        }
        match res.kind {
            "Infra" => g.infras = items.clone(),
            "InfraClusterAttachment" => g.attachments = items.clone(),
            "DHCPServer" => g.dhcp = items.clone(),
            "DNSServer" => g.dns = items.clone(),
            "ProxyServer" => g.proxy = items.clone(),
            _ => {}
        }
    }
    for crd in OOOI {
        let name = crd.at(OOOI_VERSION).crd_name();
        match api
            .json(&format!(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
            ))
            .await
        {
            Ok(o) => tree.write_object(
                &tree::object_path(None, "customresourcedefinitions", &name),
                &o,
            ),
            Err(e) => tree.error(format!("get customresourcedefinition {name}"), e),
        }
    }
    for p in &pods {
        let path = tree::object_path(namespace_of(p), "pods", name_of(p));
        tree.write_object(&path, p);
    }
    g.pods = pods.clone();

    // Optional APIs: the served version from the CRD, or not served.
    let mut optional: BTreeMap<&str, Res> = BTreeMap::new();
    for (fixed, fallback) in OPTIONAL {
        let name = fixed.at(fallback).crd_name();
        match api
            .json(&format!(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
            ))
            .await
        {
            Ok(crd) => {
                let version = served_version(&crd).unwrap_or_else(|| fallback.to_string());
                g.optional_apis.push((name, Some(version.clone())));
                optional.insert(fixed.kind, fixed.at(&version));
            }
            Err(Failed {
                code: Some(404), ..
            }) => g.optional_apis.push((name, None)),
            Err(e) => {
                tree.error(format!("get customresourcedefinition {name}"), e);
                optional.insert(fixed.kind, fixed.at(fallback));
            }
        }
    }

    // Each namespace: the children, oooi's Leases, the events.
    for ns in &namespaces {
        for (group, version, kind, plural) in CHILDREN {
            let res = kinds::builtin(group, version, kind, plural);
            match api.list(&res, Some(ns), Some(APP_SELECTOR)).await {
                Ok(items) => {
                    for o in &items {
                        tree.write_object(&tree::object_path(Some(ns), plural, name_of(o)), o);
                    }
                }
                Err(e) => tree.error(format!("list {plural} in {ns}"), e),
            }
        }
        let leases = kinds::builtin("coordination.k8s.io", "v1", "Lease", "leases");
        match api.list(&leases, Some(ns), None).await {
            Ok(items) => {
                for o in items.iter().filter(|l| is_oooi_lease(l)) {
                    tree.write_object(&tree::object_path(Some(ns), "leases", name_of(o)), o);
                }
            }
            Err(e) => tree.error(format!("list leases in {ns}"), e),
        }
        let events = kinds::builtin("", "v1", "Event", "events");
        match api.list(&events, Some(ns), None).await {
            Ok(mut items) => {
                items.sort_by_key(|e| event_time(e).to_string());
                let list = json!({"apiVersion": "v1", "kind": "EventList", "items": items});
                tree.write_object(&tree::events_path(ns), &list);
            }
            Err(e) => tree.error(format!("list events in {ns}"), e),
        }
    }

    // Objects of an Infra outside its namespaces: the NetworkPolicies in the
    // control-plane namespaces, the ClusterUserDefinedNetworks.
    let policies = kinds::builtin(
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
    );
    match api.list(&policies, None, Some(INFRA_LABEL)).await {
        Ok(items) => {
            for o in &items {
                let path = tree::object_path(namespace_of(o), "networkpolicies", name_of(o));
                tree.write_object(&path, o);
            }
        }
        Err(e) => tree.error(format!("list networkpolicies -l {INFRA_LABEL}"), e),
    }
    if let Some(res) = optional.get("ClusterUserDefinedNetwork") {
        match api.list(res, None, Some(INFRA_LABEL)).await {
            Ok(items) => {
                for o in &items {
                    tree.write_object(&tree::object_path(None, res.plural, name_of(o)), o);
                }
            }
            Err(e) => tree.error(format!("list {} -l {INFRA_LABEL}", res.crd_name()), e),
        }
    }
    if let Some(res) = optional.get("NetworkAttachmentDefinition") {
        for (ns, name) in referenced_nads(&g.infras) {
            match api.json(&format!("{}/{name}", res.path(Some(&ns)))).await {
                Ok(o) => tree.write_object(&tree::object_path(Some(&ns), res.plural, &name), &o),
                Err(e) => tree.error(format!("get {} {ns}/{name}", res.kind), e),
            }
        }
    }

    let (vmis, machines) = gather_hosted(&api, &mut tree, &g, &optional).await;

    let since = options
        .logs_since
        .as_ref()
        .map(LogsSince::query)
        .unwrap_or_default();
    for pod in &pods {
        gather_logs(&api, &mut tree, pod, options.log_limit_bytes, &since).await;
    }
    if !options.skip_endpoints {
        for pod in &pods {
            let answers = gather_endpoints(&api, &mut tree, pod).await;
            if !answers.is_empty() {
                let key = (
                    namespace_of(pod).unwrap_or("").to_string(),
                    name_of(pod).to_string(),
                );
                g.endpoints.insert(key, answers);
            }
        }
        let owners = inventory::owners(&vmis, &machines, &g.attachments);
        inventory::gather(reach, &mut tree, &g.dhcp, &pods, &tokens, &owners).await;
    }

    let text = summary::render(&g, tree.errors());
    tree.write_text(std::path::Path::new("summary.txt"), &text);
    tree.finish();
    Ok(tree)
}

fn event_time(e: &Value) -> &str {
    ["lastTimestamp", "eventTime", "firstTimestamp"]
        .iter()
        .find_map(|k| e[*k].as_str())
        .or_else(|| e["metadata"]["creationTimestamp"].as_str())
        .unwrap_or("")
}

/// The storage version of a CRD, or the first served one.
fn served_version(crd: &Value) -> Option<String> {
    let versions = crd["spec"]["versions"].as_array()?;
    versions
        .iter()
        .find(|v| v["served"] == true && v["storage"] == true)
        .or_else(|| versions.iter().find(|v| v["served"] == true))
        .and_then(|v| v["name"].as_str())
        .map(str::to_string)
}

/// (namespace, name) of the NetworkAttachmentDefinitions the Infras name.
pub fn referenced_nads(infras: &[Value]) -> BTreeSet<(String, String)> {
    infras
        .iter()
        .filter_map(|i| {
            let net = &i["spec"]["networkConfig"];
            let name = net["networkAttachmentDefinition"].as_str()?;
            let ns = net["networkAttachmentNamespace"]
                .as_str()
                .or_else(|| namespace_of(i))?;
            Some((ns.to_string(), name.to_string()))
        })
        .collect()
}

/// The HostedClusters the attachments name, their NodePools, and the
/// Machines' addresses and VMIs' interfaces of their control-plane
/// namespaces.
/// Writes the hosted clusters' objects; returns the whole VMIs and
/// Machines (the inventory's join reads them; only their trimmed form is
/// written).
async fn gather_hosted(
    api: &Api,
    tree: &mut Tree,
    g: &Gathered,
    optional: &BTreeMap<&str, Res>,
) -> (Vec<Value>, Vec<Value>) {
    let (mut vmis, mut machines) = (Vec::new(), Vec::new());
    let mut seen = BTreeSet::new();
    for a in &g.attachments {
        let spec = &a["spec"];
        let Some(hc_name) = spec["hostedClusterRef"]["name"].as_str() else {
            continue;
        };
        let hc_ns = spec["hostedClusterRef"]["namespace"]
            .as_str()
            .unwrap_or("clusters");
        let cp_ns = spec["controlPlaneNamespace"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("{hc_ns}-{hc_name}"));
        if !seen.insert((hc_ns.to_string(), hc_name.to_string())) {
            continue;
        }
        if let Some(res) = optional.get("HostedCluster") {
            match api
                .json(&format!("{}/{hc_name}", res.path(Some(hc_ns))))
                .await
            {
                Ok(o) => {
                    tree.write_object(&tree::object_path(Some(hc_ns), res.plural, hc_name), &o)
                }
                Err(e) => tree.error(format!("get HostedCluster {hc_ns}/{hc_name}"), e),
            }
        }
        if let Some(res) = optional.get("NodePool") {
            match api.list(res, Some(hc_ns), None).await {
                Ok(items) => {
                    for o in items
                        .iter()
                        .filter(|n| n["spec"]["clusterName"].as_str() == Some(hc_name))
                    {
                        tree.write_object(
                            &tree::object_path(Some(hc_ns), res.plural, name_of(o)),
                            o,
                        );
                    }
                }
                Err(e) => tree.error(format!("list NodePools in {hc_ns}"), e),
            }
        }
        type Trim = fn(&Value) -> Value;
        let trimmed: [(&str, Trim); 2] = [
            ("Machine", machine_addresses),
            ("VirtualMachineInstance", vmi_interfaces),
        ];
        for (kind, trim) in trimmed {
            let Some(res) = optional.get(kind) else {
                continue;
            };
            match api.list(res, Some(&cp_ns), None).await {
                Ok(items) => {
                    for o in &items {
                        let path = tree::object_path(Some(&cp_ns), res.plural, name_of(o));
                        tree.write_object(&path, &trim(o));
                    }
                    match kind {
                        "Machine" => machines.extend(items),
                        _ => vmis.extend(items),
                    }
                }
                Err(e) => tree.error(format!("list {kind}s in {cp_ns}"), e),
            }
        }
    }
    (vmis, machines)
}

/// The containers of a pod (init containers first) and whether each has a
/// previous (terminated) instance.
pub fn containers(pod: &Value) -> Vec<(String, bool)> {
    let statuses: BTreeMap<&str, &Value> = ["initContainerStatuses", "containerStatuses"]
        .iter()
        .flat_map(|k| pod["status"][*k].as_array().into_iter().flatten())
        .filter_map(|s| Some((s["name"].as_str()?, s)))
        .collect();
    ["initContainers", "containers"]
        .iter()
        .flat_map(|k| pod["spec"][*k].as_array().into_iter().flatten())
        .filter_map(|c| c["name"].as_str())
        .map(|name| {
            let previous = statuses.get(name).is_some_and(|s| {
                s["restartCount"].as_u64().unwrap_or(0) > 0
                    || !s["lastState"]["terminated"].is_null()
            });
            (name.to_string(), previous)
        })
        .collect()
}

async fn gather_logs(api: &Api, tree: &mut Tree, pod: &Value, limit: u64, since: &str) {
    let (Some(ns), name) = (namespace_of(pod), name_of(pod)) else {
        return;
    };
    for (container, has_previous) in containers(pod) {
        let mut which = vec![false];
        if has_previous {
            which.push(true);
        }
        for previous in which {
            let path = format!(
                "/api/v1/namespaces/{ns}/pods/{name}/log?container={}&limitBytes={limit}{since}{}",
                encode(&container),
                if previous { "&previous=true" } else { "" }
            );
            let what = format!(
                "{} log of {ns}/{name} container {container}",
                if previous { "previous" } else { "current" }
            );
            match api.raw(&path).await {
                Ok((200, body)) => {
                    let text = String::from_utf8_lossy(&body);
                    tree.write_text(&tree::log_path(ns, name, &container, previous), &text);
                }
                Ok((code, body)) => tree.error(
                    what,
                    Failed {
                        code: Some(code),
                        message: status_message(&body),
                    },
                ),
                Err(e) => tree.error(what, e),
            }
        }
    }
}

fn status_message(body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_string())
}

async fn gather_endpoints(api: &Api, tree: &mut Tree, pod: &Value) -> Vec<EndpointAnswer> {
    let (Some(ns), name) = (namespace_of(pod), name_of(pod)) else {
        return Vec::new();
    };
    let Some(component) = component_of(pod) else {
        return Vec::new();
    };
    if pod["status"]["phase"] != "Running" {
        return Vec::new();
    }
    let mut out = Vec::new();
    for ep in components::endpoints(component) {
        let port = components::port_of(pod, ep.port_name).unwrap_or(ep.default_port);
        let path = components::proxy_path(ns, name, port, ep.path);
        let answer = match api.raw(&path).await {
            Ok((code, body)) => {
                let text = String::from_utf8_lossy(&body).into_owned();
                tree.write_text(
                    &tree::endpoint_path(ns, name, port, ep.path),
                    &format!("GET {} on port {port}: HTTP {code}\n\n{text}", ep.path),
                );
                // `/ready` is 503 while a replica waits for its table: an answer.
                let answered = (200..300).contains(&code) || (ep.path == "/ready" && code == 503);
                if !answered {
                    tree.error(
                        format!("GET {} on {ns}/{name}:{port} (pod proxy)", ep.path),
                        Failed {
                            code: Some(code),
                            message: text.lines().next().unwrap_or("").to_string(),
                        },
                    );
                }
                Ok((code, text))
            }
            Err(e) => {
                let message = e.to_string();
                tree.error(
                    format!("GET {} on {ns}/{name}:{port} (pod proxy)", ep.path),
                    e,
                );
                Err(message)
            }
        };
        out.push(EndpointAnswer {
            port,
            path: ep.path.to_string(),
            answer,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previous_logs_are_asked_for_only_after_a_restart() {
        let pod = json!({
            "spec": {"initContainers": [{"name": "init"}],
                     "containers": [{"name": "dns"}, {"name": "agent"}]},
            "status": {"containerStatuses": [
                {"name": "dns", "restartCount": 2},
                {"name": "agent", "restartCount": 0},
            ]},
        });
        assert_eq!(
            containers(&pod),
            vec![
                ("init".to_string(), false),
                ("dns".to_string(), true),
                ("agent".to_string(), false)
            ]
        );
    }

    #[test]
    fn oooi_leases_are_the_controllers_and_the_agents() {
        assert!(is_oooi_lease(
            &json!({"metadata": {"name": "oooi-controller"}})
        ));
        assert!(is_oooi_lease(
            &json!({"metadata": {"name": "lab-dns-192-0-2-3",
            "labels": {"app.kubernetes.io/managed-by": "oooi-addr-agent"}}})
        ));
        assert!(!is_oooi_lease(&json!({"metadata": {"name": "other"}})));
    }

    #[test]
    fn vmis_keep_interfaces_and_never_their_spec() {
        let vmi = json!({"kind": "VirtualMachineInstance", "metadata": {"name": "w"},
            "spec": {"volumes": [{"cloudInitNoCloud": {"userData": "password: x"}}]},
            "status": {"interfaces": [{"mac": "02:00:00:00:00:01", "ipAddress": "192.0.2.51"}]}});
        let out = vmi_interfaces(&vmi);
        assert!(out.get("spec").is_none());
        assert_eq!(out["status"]["interfaces"][0]["ipAddress"], "192.0.2.51");
    }

    #[test]
    fn nads_are_found_in_the_named_namespace_or_the_infras() {
        let infras = vec![
            json!({"metadata": {"namespace": "oooi"}, "spec": {"networkConfig":
                {"networkAttachmentDefinition": "vlan", "networkAttachmentNamespace": "default"}}}),
            json!({"metadata": {"namespace": "oooi"}, "spec": {"networkConfig":
                {"networkAttachmentDefinition": "vlan2"}}}),
        ];
        let nads: Vec<_> = referenced_nads(&infras).into_iter().collect();
        assert_eq!(
            nads,
            vec![
                ("default".to_string(), "vlan".to_string()),
                ("oooi".to_string(), "vlan2".to_string())
            ]
        );
    }

    #[test]
    fn oc_since_values_become_log_parameters() {
        assert_eq!(
            LogsSince::from_duration("2h0m0s"),
            Ok(LogsSince::Seconds(7200))
        );
        assert_eq!(
            LogsSince::from_duration("1m30s"),
            Ok(LogsSince::Seconds(90))
        );
        assert_eq!(LogsSince::from_duration("500ms"), Ok(LogsSince::Seconds(1)));
        assert!(LogsSince::from_duration("2 hours").is_err());
        assert!(LogsSince::from_duration("").is_err());
        let t = LogsSince::from_time("2026-12-06T20:00:00Z").unwrap();
        assert_eq!(t.query(), "&sinceTime=2026-12-06T20%3A00%3A00Z");
        assert!(LogsSince::from_time("yesterday").is_err());
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(
            encode("app.kubernetes.io/name=oooi"),
            "app.kubernetes.io%2Fname%3Doooi"
        );
    }
}
