//! What `oooi-controller render` wrote, read the way the lab needs it, and
//! the manifest changes the lab renders again (as the controller would after
//! a change in the cluster).

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::Value;

use crate::launch::RunAs;

use crate::clients::Push;
use crate::lab::{Lab, run, sibling};
use crate::replicas::Replicas;

/// The facts of the first render that the lab builds its topology from and
/// checks against.
pub struct Rendered {
    /// The manifests, changed by the later steps and rendered again.
    pub docs: Vec<Value>,
    /// The DHCP config oooi-dhcp runs with (every DNS replica in option 6).
    pub dhcp_cfg: PathBuf,
    pub routes_file: PathBuf,
    /// The rendered Envoy files, with the pod's mount paths.
    pub envoy_src: PathBuf,
    /// The DHCP config as render wrote it.
    pub dhcp_text: String,
    /// The DNS config as render wrote it (each replica's is
    /// [`Replicas::dns_config`] of it).
    pub dns_text: String,
    pub dhcp_ip: String,
    /// Prefix length of the VLAN subnet.
    pub plen: String,
    /// The DHCP server's VLAN interface.
    pub iface: String,
    /// The first DNS replica (the first nameserver of every lease).
    pub dns_ip: String,
    /// The first proxy replica (the first address of every answer).
    pub proxy_ip: String,
    /// Every DNS and proxy replica's VLAN address.
    pub replicas: Replicas,
    /// The routing table.
    pub routes: Value,
    /// Clusters whose names carry allowed sources (`isolation: Strict`).
    pub strict: BTreeSet<String>,
    /// Apps VIP of each cluster (the observed MetalLB address) and where it
    /// moves to in the VIP-change step: the next address.
    pub apps_vips: BTreeMap<String, (Ipv4Addr, Ipv4Addr)>,
    /// The table API's push token.
    pub token: String,
    pub api_port: u16,
    /// Control-plane Services the table points to: one mgmt address each.
    pub services: BTreeMap<String, (Ipv4Addr, u16)>,
    /// The base domain of the clusters' names.
    pub base: String,
    /// The attached clusters' names.
    pub clusters: Vec<String>,
    /// The address the DNS pod view gives for the control-plane names
    /// (the internal proxy), when the Infra names one.
    pub internal_proxy: Option<String>,
    /// The DNS servers' upstreams (`address[:port]`).
    pub upstreams: Vec<String>,
    /// The pod spec render planned for each component (`dhcp`, `dns`,
    /// `proxy`): its Deployment's `spec.template.spec`.
    pub pods: BTreeMap<String, Value>,
}

impl Rendered {
    /// Renders `manifests` into `<dir>/render` and reads what the lab needs.
    pub fn first(dir: &Path, manifests_path: &Path, wasm: &Path) -> Result<Rendered> {
        println!(
            "render: oooi-controller render -f {}",
            manifests_path.display()
        );
        let manifests = std::fs::read_to_string(manifests_path)
            .with_context(|| format!("cannot read {}", manifests_path.display()))?;
        let docs = yaml_docs(&manifests)?;
        let first = render(&dir.join("render"), manifests_path, wasm)?;
        let pods = first.pods.clone();
        let (dhcp_cfg, dns_cfg, routes_file, envoy_src) = (
            first.dhcp_cfg.clone(),
            first.dns_cfg.clone(),
            first.routes_file.clone(),
            first.envoy_src.clone(),
        );
        let dns_text = std::fs::read_to_string(&dns_cfg)?;
        let dhcp_text = std::fs::read_to_string(&dhcp_cfg)?;
        let replicas = Replicas::of(&dhcp_text, &dns_text)?;
        // The DHCP config that hands out every DNS replica, beside render's.
        let dhcp_cfg = dir.join("render").join("dhcp-replicas.yaml");
        std::fs::write(&dhcp_cfg, replicas.dhcp_config(&dhcp_text)?)?;
        let dhcp_ip = yaml_str(&dhcp_text, "server_ip")
            .ok_or_else(|| anyhow!("dhcp config: no server_ip"))?;
        let subnet =
            yaml_str(&dhcp_text, "subnet").ok_or_else(|| anyhow!("dhcp config: no subnet"))?;
        let plen = subnet
            .split('/')
            .nth(1)
            .ok_or_else(|| anyhow!("dhcp config: subnet `{subnet}` has no prefix length"))?;
        let iface = yaml_str(&dhcp_text, "interface").unwrap_or_else(|| "net1".into());
        let dns_ip = replicas.dns[0].clone();
        let proxy_ip = replicas.proxy[0].clone();
        let routes = json_file(&routes_file)?;
        // Clusters whose names carry allowed sources (`isolation: Strict`).
        let strict: BTreeSet<String> = routes["routes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| r.get("sources").is_some())
            .filter_map(|r| {
                r["owner"]
                    .as_str()?
                    .split_once('/')
                    .map(|o| o.1.to_string())
            })
            .collect();
        // Apps VIPs (the observed MetalLB address) and where each one moves to
        // in the VIP-change phase: the next address.
        let dns_doc: Value = serde_saphyr::from_str(&dns_text).context("rendered DNS config")?;
        let mut apps_vips: BTreeMap<String, (Ipv4Addr, Ipv4Addr)> = BTreeMap::new();
        for c in dns_doc["clusters"].as_array().into_iter().flatten() {
            if let (Some(name), Some(vip)) = (c["name"].as_str(), c["apps_vip"].as_str()) {
                let vip: Ipv4Addr = vip.parse().with_context(|| format!("apps VIP `{vip}`"))?;
                let next = Ipv4Addr::from(u32::from(vip).wrapping_add(1));
                apps_vips.insert(name.to_string(), (vip, next));
            }
        }
        let clusters: Vec<String> = dns_doc["clusters"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str().map(str::to_string))
            .collect();
        let internal_proxy = dns_doc["clusters"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|c| c["internal_proxy"].as_str().map(str::to_string));
        let upstreams: Vec<String> = dns_doc["upstreams"]["servers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect();
        let api_ecds = json_file(&envoy_src.join("ecds_oooi_table_api.json"))?;
        let api_cfg: Value = serde_json::from_str(
            api_ecds["resources"][0]["typed_config"]["config"]["configuration"]["value"]
                .as_str()
                .ok_or_else(|| anyhow!("ecds_oooi_table_api.json: no configuration"))?,
        )?;
        let token = api_cfg["push_token"]
            .as_str()
            .ok_or_else(|| anyhow!("no push_token"))?
            .to_string();
        let lds = std::fs::read_to_string(envoy_src.join("lds.json"))?;
        let api_port = json_listener_port(&lds, "oooi_table_api")?;
        println!(
            "  dhcp {dhcp_ip} (reservations by MAC)  dns {}  proxy {}  table API :{api_port}  {} routes",
            replicas.dns.join(", "),
            replicas.proxy.join(", "),
            routes["routes"].as_array().map_or(0, Vec::len)
        );

        // Control-plane services the table points to: one mgmt address each.
        let mut services: BTreeMap<String, (Ipv4Addr, u16)> = BTreeMap::new();
        for r in routes["routes"].as_array().into_iter().flatten() {
            let host = r["upstream"]["address"]["host"].as_str().unwrap_or("");
            let port = r["upstream"]["address"]["port"].as_u64().unwrap_or(0) as u16;
            if host.ends_with(".svc.cluster.local") && !services.contains_key(host) {
                let index = u8::try_from(services.len() + 10)
                    .ok()
                    .filter(|i| *i < 255)
                    .ok_or_else(|| {
                        anyhow!("more control-plane Services than the lab's 10.128.1.0/24 holds")
                    })?;
                let ip = Ipv4Addr::new(10, 128, 1, index);
                services.insert(host.to_string(), (ip, port));
            }
        }
        let base = dns_text
            .lines()
            .find_map(|l| l.trim().strip_prefix("base_domain:"))
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        Ok(Rendered {
            docs,
            dhcp_cfg,
            routes_file,
            envoy_src,
            dhcp_text,
            dns_text,
            dhcp_ip,
            plen: plen.to_string(),
            iface,
            dns_ip,
            proxy_ip,
            replicas,
            routes,
            strict,
            apps_vips,
            token,
            api_port,
            services,
            base,
            clusters,
            internal_proxy,
            upstreams,
            pods,
        })
    }

    /// The security context render planned for container `container` of
    /// `component`'s pods: what the lab runs it with.
    pub fn security(&self, component: &str, container: &str) -> Result<RunAs> {
        let pod = self
            .pods
            .get(component)
            .ok_or_else(|| anyhow!("render planned no {component} Deployment"))?;
        RunAs::of_pod(pod, container)
            .with_context(|| format!("the rendered {component} pod, container {container}"))
    }

    /// The command of container `container` of `component`'s pods, as
    /// render planned it.
    pub fn command(&self, component: &str, container: &str) -> Result<String> {
        let pod = self
            .pods
            .get(component)
            .ok_or_else(|| anyhow!("render planned no {component} Deployment"))?;
        ["containers", "initContainers"]
            .iter()
            .flat_map(|list| pod[list].as_array().into_iter().flatten())
            .find(|c| c["name"] == container)
            .and_then(|c| c["command"][0].as_str())
            .map(str::to_string)
            .ok_or_else(|| anyhow!("the rendered {component} pod has no command for {container}"))
    }

    /// The isolation of `cluster`'s names, as the lab prints it.
    pub fn isolation(&self, cluster: &str) -> &'static str {
        if self.strict.contains(cluster) {
            "Strict"
        } else {
            "Standard"
        }
    }
}

/// The name a control-plane backend announces for Service `host`:
/// `<namespace>/<service>`.
pub fn backend_name(host: &str) -> String {
    let mut l = host.split('.');
    let svc = l.next().unwrap_or("");
    let ns = l.next().unwrap_or("");
    format!("{ns}/{svc}")
}

/// The JSON document in file `p`.
pub fn json_file(p: &Path) -> Result<Value> {
    let text =
        std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not JSON", p.display()))
}

/// The value of the top-level `key:` line of a config render wrote (its
/// own, flat output format; the lab does not parse general YAML).
fn yaml_str(text: &str, key: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .map(|v| v.trim().trim_matches('"').to_string())
}

/// Port of the listener whose filters name `marker` in the rendered LDS.
fn json_listener_port(lds: &str, marker: &str) -> Result<u16> {
    let v: Value = serde_json::from_str(lds)?;
    for l in v["resources"].as_array().into_iter().flatten() {
        if l.to_string().contains(marker)
            && let Some(p) = l["address"]["socket_address"]["port_value"].as_u64()
        {
            return Ok(p as u16);
        }
    }
    bail!("rendered lds.json has no listener with `{marker}`")
}

/// Every file under `dir`, sorted.
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The component configs one `oooi-controller render --out` wrote.
pub struct RenderedFiles {
    pub dhcp_cfg: PathBuf,
    pub dns_cfg: PathBuf,
    pub routes_file: PathBuf,
    pub envoy_src: PathBuf,
    /// Each component's pod spec (the first of its Deployments; every
    /// other one of the component must run its containers alike).
    pub pods: BTreeMap<String, Value>,
}

/// Runs `oooi-controller render -f manifests --out out`, as a user would.
pub fn render(out: &Path, manifests: &Path, wasm: &Path) -> Result<RenderedFiles> {
    run(&[
        sibling("oooi-controller")?.to_str().unwrap_or_default(),
        "render",
        "-f",
        manifests.to_str().unwrap_or_default(),
        "--filter-wasm",
        wasm.to_str().unwrap_or_default(),
        "--out",
        out.to_str().unwrap_or_default(),
    ])?;
    let files = out.join("files");
    let find = |suffix: &str| -> Result<PathBuf> {
        walk(&files)
            .into_iter()
            .find(|p| p.to_string_lossy().ends_with(suffix))
            .ok_or_else(|| anyhow!("render wrote no *{suffix}"))
    };
    let envoy_src = find("-proxy-envoy/envoy.json")?
        .parent()
        .ok_or_else(|| anyhow!("envoy dir"))?
        .to_path_buf();
    Ok(RenderedFiles {
        dhcp_cfg: find("-dhcp.yaml")?,
        dns_cfg: find("-dns.yaml")?,
        routes_file: find("-proxy-routes.json")?,
        envoy_src,
        pods: pods(&out.join("objects"))?,
    })
}

/// The pod spec of each component's Deployments in render's `objects`
/// directory, by the component label; fails when two Deployments of one
/// component run a container with different security contexts (the lab
/// runs every replica of a component alike).
fn pods(objects: &Path) -> Result<BTreeMap<String, Value>> {
    let mut out: BTreeMap<String, Value> = BTreeMap::new();
    for path in walk(objects) {
        if !path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().contains("-deployment-"))
        {
            continue;
        }
        let text = std::fs::read_to_string(&path)?;
        let d: Value = serde_saphyr::from_str(&text)
            .with_context(|| format!("{} is not YAML", path.display()))?;
        let Some(component) = d["metadata"]["labels"]["app.kubernetes.io/component"].as_str()
        else {
            continue;
        };
        let pod = d["spec"]["template"]["spec"].clone();
        match out.get(component) {
            None => {
                out.insert(component.to_string(), pod);
            }
            Some(first) => {
                let names = |p: &Value| -> Vec<String> {
                    ["containers", "initContainers"]
                        .iter()
                        .flat_map(|l| p[l].as_array().cloned().unwrap_or_default())
                        .filter_map(|c| c["name"].as_str().map(str::to_string))
                        .collect()
                };
                for name in names(&pod) {
                    let (a, b) = (RunAs::of_pod(first, &name)?, RunAs::of_pod(&pod, &name)?);
                    if a != b {
                        bail!(
                            "{}: container {name} runs unlike the first {component} pod's ({a:?} against {b:?})",
                            path.display()
                        );
                    }
                }
            }
        }
    }
    Ok(out)
}

/// The documents of a multi-document YAML manifest.
pub fn yaml_docs(text: &str) -> Result<Vec<Value>> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).context("manifests: not YAML")?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// What MetalLB does when it moves a VIP, as the controller observes it:
/// the `ObservedCluster` of `cluster` gets `appsVip: vip`.
pub fn set_observed_apps_vip(docs: &mut [Value], cluster: &str, vip: Ipv4Addr) -> Result<()> {
    let doc = docs
        .iter_mut()
        .find(|d| d["kind"] == "ObservedCluster" && d["hostedCluster"]["name"] == cluster)
        .ok_or_else(|| anyhow!("no ObservedCluster for cluster {cluster}"))?;
    doc["appsVip"] = Value::String(vip.to_string());
    Ok(())
}

/// `kubectl delete` of the last InfraClusterAttachment; its hosted cluster's
/// name. The observed documents stay: state of an unattached cluster is
/// ignored by the planner.
pub fn remove_last_attachment(docs: &mut Vec<Value>) -> Option<String> {
    let i = docs
        .iter()
        .rposition(|d| d["kind"] == "InfraClusterAttachment")?;
    let gone = docs.remove(i);
    gone["spec"]["hostedClusterRef"]["name"]
        .as_str()
        .map(str::to_string)
}

/// Updates a kubelet-style ConfigMap mount under `mount`: the data in a new
/// `..<n>` directory, the `..data` symlink swapped to it by rename, and
/// `file` a symlink through `..data` (created the first time). Returns the
/// path of `file`.
pub fn publish_config(mount: &Path, file: &str, text: &str) -> Result<PathBuf> {
    std::fs::create_dir_all(mount)?;
    let n = (1..)
        .find(|n| !mount.join(format!("..{n}")).exists())
        .unwrap_or(1);
    let data = mount.join(format!("..{n}"));
    std::fs::create_dir_all(&data)?;
    std::fs::write(data.join(file), text)?;
    let tmp = mount.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(format!("..{n}"), &tmp)?;
    std::fs::rename(&tmp, mount.join("..data"))?;
    let link = mount.join(file);
    if !link.exists() {
        std::os::unix::fs::symlink(format!("..data/{file}"), &link)?;
    }
    Ok(link)
}

/// Where a change goes: each DNS replica's ConfigMap mount (in replica
/// order) and the table API of every proxy replica.
pub struct Targets<'a> {
    pub replicas: &'a Replicas,
    pub dns_mounts: &'a [PathBuf],
    pub push: &'a Push,
}

/// Renders the changed manifests, swaps every DNS replica's ConfigMap and
/// pushes the table as `generation` to every proxy replica, as the
/// controller does after a change; the pushes' HTTP status.
pub fn rerender(
    lab: &Lab,
    docs: &[Value],
    generation: u64,
    wasm: &Path,
    to: &Targets,
) -> Result<String> {
    let manifests = lab.dir.join(format!("manifests-{generation}.yaml"));
    let mut text = String::new();
    for d in docs {
        text.push_str("---\n");
        text.push_str(&serde_saphyr::to_string(d)?);
    }
    std::fs::write(&manifests, text)?;
    let out = render(
        &lab.dir.join(format!("render-{generation}")),
        &manifests,
        wasm,
    )?;
    let mut table = json_file(&out.routes_file)?;
    table["generation"] = generation.into();
    let routes = lab.dir.join(format!("routes-{generation}.json"));
    std::fs::write(&routes, serde_json::to_vec(&table)?)?;
    println!(
        "  render -f {}: {} routes",
        manifests.display(),
        table["routes"].as_array().map_or(0, Vec::len)
    );
    let dns_text = std::fs::read_to_string(&out.dns_cfg)?;
    for (i, mount) in to.dns_mounts.iter().enumerate() {
        publish_config(mount, "config.yaml", &to.replicas.dns_config(&dns_text, i)?)?;
    }
    Ok(to.push.put(lab, &routes))
}

/// The observed state of `cluster` before its workers' addresses are known:
/// its Machines without addresses, its VMIs' interfaces without
/// `ipAddresses` (their MACs stay). The addresses taken away, by Machine.
pub fn forget_worker_addresses(docs: &mut [Value], cluster: &str) -> Result<Vec<(String, Value)>> {
    let doc = observed_cluster(docs, cluster)?;
    let mut taken = Vec::new();
    for m in doc["machines"].as_array_mut().into_iter().flatten() {
        let name = m["name"].as_str().unwrap_or_default().to_string();
        taken.push((name, m["addresses"].take()));
        m["addresses"] = Value::Array(Vec::new());
    }
    for vmi in doc["vmis"].as_array_mut().into_iter().flatten() {
        for iface in vmi["interfaces"].as_array_mut().into_iter().flatten() {
            iface["ipAddresses"] = Value::Array(Vec::new());
        }
    }
    Ok(taken)
}

/// Machine `machine` of `cluster` reports `addresses`.
pub fn set_machine_addresses(
    docs: &mut [Value],
    cluster: &str,
    machine: &str,
    addresses: Value,
) -> Result<()> {
    let doc = observed_cluster(docs, cluster)?;
    let m = doc["machines"]
        .as_array_mut()
        .into_iter()
        .flatten()
        .find(|m| m["name"] == machine)
        .ok_or_else(|| anyhow!("cluster {cluster} has no Machine {machine}"))?;
    m["addresses"] = addresses;
    Ok(())
}

/// The `ObservedCluster` of hosted cluster `cluster`.
fn observed_cluster<'a>(docs: &'a mut [Value], cluster: &str) -> Result<&'a mut Value> {
    docs.iter_mut()
        .find(|d| d["kind"] == "ObservedCluster" && d["hostedCluster"]["name"] == cluster)
        .ok_or_else(|| anyhow!("no ObservedCluster for cluster {cluster}"))
}

/// The clusters the InfraClusterAttachments in `docs` attach.
pub fn attached_clusters(docs: &[Value]) -> Vec<String> {
    docs.iter()
        .filter(|d| d["kind"] == "InfraClusterAttachment")
        .filter_map(|d| d["spec"]["hostedClusterRef"]["name"].as_str())
        .map(str::to_string)
        .collect()
}

/// The Infra's proxy no longer names an internal Service
/// (`internalProxyService` removed).
pub fn remove_internal_proxy_service(docs: &mut [Value]) -> Result<()> {
    let proxy = docs
        .iter_mut()
        .find(|d| d["kind"] == "Infra")
        .and_then(|d| d["spec"]["infraComponents"]["proxy"].as_object_mut())
        .ok_or_else(|| anyhow!("no Infra with a proxy"))?;
    proxy
        .remove("internalProxyService")
        .map(|_| ())
        .ok_or_else(|| anyhow!("the Infra's proxy names no internalProxyService"))
}
