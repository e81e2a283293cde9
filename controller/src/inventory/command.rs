//! `oooi-controller leases`: who has which address, from where an operator
//! sits. It talks to the cluster as `kubectl` does (kubeconfig or in
//! cluster), finds the DHCPServers (and so the Infras), reads each Infra's
//! inventory token Secret, reaches each server's pod through a [`Reach`]
//! (port-forward from the command line), pages through its leases, joins
//! them with VMIs, Machines and hosted clusters ([`super::join`]) and prints
//! a table, JSON or YAML. `leases why MAC` prints the client's lease and its
//! last refusals from every server.
//!
//! The requests, all namespaced: list `dhcpservers` and
//! `infraclusterattachments`, list `pods` (by label), get the token
//! `secrets`, `pods/portforward` on the DHCP pods; list
//! `virtualmachineinstances` and `machines` in the hosted clusters'
//! control-plane namespaces (a refusal there only leaves the join blank,
//! with a note), and get the CRDs of those optional APIs.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use oooi_dhcp_inventory::{LeaseQuery, LeaseRow, LeaseState, ServerInfo, Why, canonical_mac};

use super::join::{Owners, join, machine_facts, vmi_facts};
use super::output::{Inventory, Output, WhyAnswer, render, render_why};
use super::reach::{self, PodTarget, PortForward, Reach};
use super::{dhcp_pod_selector, pods_of};
use crate::cache::Decoded;
use crate::crd::{DHCPServer, InfraClusterAttachment};
use crate::observe::{self, MACHINES, VMIS, control_plane_namespace};
use crate::plan::dhcp::INVENTORY_TOKEN_KEY;
use crate::plan::labels::instance_of;

/// The long help of `oooi-controller leases`.
pub const LONG_ABOUT: &str = "List the DHCP leases of the Infras, joined with their VMs, Machines, NodePools and hosted clusters.\n\n\
Talks to the cluster as kubectl does (KUBECONFIG, ~/.kube/config, or in cluster). For each DHCPServer it reads the Infra's \
inventory token Secret (<infra>-dhcp-inventory-token) and asks the server's pod through a port-forward (the server's \
inventory API answers on the pod's loopback, port 9069). It needs, in the Infra's namespace: list dhcpservers, \
infraclusterattachments and pods, get secrets, create pods/portforward; and, for the join, list virtualmachineinstances \
and machines in the hosted clusters' control-plane namespaces (without them the VM columns stay empty and a note says why).\n\n\
Examples:\n  oooi-controller leases\n  oooi-controller leases --infra vlan200 -o wide\n  oooi-controller leases --mac 52:54:00:aa:00:01 -o json\n  oooi-controller leases why 52:54:00:aa:00:01";

/// `oooi-controller leases`.
#[derive(clap::Args, Debug, Clone)]
#[command(args_conflicts_with_subcommands = true)]
pub struct LeasesArgs {
    /// `why MAC`.
    #[command(subcommand)]
    pub command: Option<LeasesCommand>,
    /// Only this namespace (default: every namespace you may list).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// Only this Infra (`name` or `namespace/name`).
    #[arg(long, global = true)]
    pub infra: Option<String>,
    /// Only leases of this hosted cluster (`name` or `namespace/name`).
    #[arg(long)]
    pub cluster: Option<String>,
    /// Only this MAC (any case, `:` or `-`).
    #[arg(long)]
    pub mac: Option<String>,
    /// Only this address.
    #[arg(long)]
    pub ip: Option<IpAddr>,
    /// Only this host name (exact, any case).
    #[arg(long)]
    pub hostname: Option<String>,
    /// Only leases in this state (active, offered, expired, released,
    /// declined, lost, held_back).
    #[arg(long, value_parser = parse_state)]
    pub state: Option<LeaseState>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table", global = true)]
    pub output: Output,
    /// Timeout of one request to a DHCP server, in seconds.
    #[arg(long, default_value_t = 15, global = true)]
    pub timeout: u64,
}

fn parse_state(s: &str) -> Result<LeaseState, String> {
    LeaseState::parse(s).ok_or_else(|| {
        let all: Vec<&str> = LeaseState::ALL.iter().map(|s| s.as_str()).collect();
        format!("`{s}` is not a lease state ({})", all.join(", "))
    })
}

/// `leases` subcommands.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum LeasesCommand {
    /// Why a client got no address: its lease (if any) and its last
    /// refusals (pool exhausted, probe conflict, unknown client ignored,
    /// ...) from every DHCP server.
    Why {
        /// The client's MAC (any case, `:` or `-`).
        mac: String,
    },
}

/// Which servers and leases: the command's filters.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only this Infra (`name` or `namespace/name`).
    pub infra: Option<String>,
    /// Only leases of this hosted cluster.
    pub cluster: Option<String>,
    /// Filters the servers apply.
    pub query: LeaseQuery,
}

impl LeasesArgs {
    /// The selection these arguments make.
    pub fn selection(&self) -> anyhow::Result<Selection> {
        let mac = match &self.mac {
            Some(m) => Some(canonical_mac(m).ok_or_else(|| anyhow!("--mac {m}: not a MAC"))?),
            None => None,
        };
        Ok(Selection {
            namespace: self.namespace.clone(),
            infra: self.infra.clone(),
            cluster: self.cluster.clone(),
            query: LeaseQuery {
                ip: self.ip,
                mac,
                hostname: self.hostname.clone(),
                state: self.state,
                ..LeaseQuery::default()
            },
        })
    }
}

/// `namespace/name` or `name` matches `ns`/`name`.
fn names(want: &str, ns: &str, name: &str) -> bool {
    match want.split_once('/') {
        Some((wn, wname)) => wn == ns && wname == name,
        None => want == name,
    }
}

/// One DHCP server to ask, with its Infra, token and pods.
#[derive(Debug, Clone)]
pub struct Server {
    /// The Infra, `namespace/name`.
    pub infra: String,
    /// The DHCPServer's name.
    pub name: String,
    /// The bearer token.
    pub token: String,
    /// Its pods, Ready first.
    pub pods: Vec<PodTarget>,
}

/// The DHCPServers of the selection, with their tokens and pods.
pub async fn servers(
    client: &Client,
    sel: &Selection,
    notes: &mut Vec<String>,
) -> anyhow::Result<Vec<Server>> {
    let api: Api<Decoded<DHCPServer>> = match &sel.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let list = api
        .list(&ListParams::default())
        .await
        .context("listing DHCPServers")?;
    let mut out = Vec::new();
    let mut pods_by_ns: BTreeMap<String, Vec<Pod>> = BTreeMap::new();
    let mut items: Vec<Decoded<DHCPServer>> = list.items;
    items.sort_by_key(|d| (d.metadata.namespace.clone(), d.metadata.name.clone()));
    for d in items {
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let name = d.metadata.name.clone().unwrap_or_default();
        let infra = instance_of(&d.metadata);
        if sel.infra.as_deref().is_some_and(|w| !names(w, &ns, &infra)) {
            continue;
        }
        let Some(server) = d.get() else {
            notes.push(format!("DHCPServer {ns}/{name} cannot be read; skipped"));
            continue;
        };
        let Some(secret) = &server.spec.inventory_token_secret else {
            notes.push(format!(
                "DHCPServer {ns}/{name} has no inventory (spec.inventoryTokenSecret unset)"
            ));
            continue;
        };
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
        let token = match secrets.get_opt(&secret.name).await {
            Ok(Some(s)) => s
                .data
                .as_ref()
                .and_then(|d| d.get(INVENTORY_TOKEN_KEY))
                .and_then(|b| std::str::from_utf8(&b.0).ok())
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty()),
            Ok(None) => None,
            Err(e) => {
                notes.push(format!(
                    "{ns}/{name}: cannot read Secret {}: {e}",
                    secret.name
                ));
                continue;
            }
        };
        let Some(token) = token else {
            notes.push(format!(
                "{ns}/{name}: Secret {} has no `{INVENTORY_TOKEN_KEY}` yet",
                secret.name
            ));
            continue;
        };
        if !pods_by_ns.contains_key(&ns) {
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            let list = pods
                .list(&ListParams::default().labels(&dhcp_pod_selector()))
                .await
                .with_context(|| format!("listing the DHCP pods in {ns}"))?;
            pods_by_ns.insert(ns.clone(), list.items);
        }
        let paired = server.spec.config.0.peer.is_some();
        let pods = pods_of(&d.metadata, paired, &pods_by_ns[&ns]);
        out.push(Server {
            infra: format!("{ns}/{infra}"),
            name,
            token,
            pods,
        });
    }
    Ok(out)
}

/// The first answer of a server's pods.
async fn first_answer<T>(
    server: &Server,
    mut ask: impl AsyncFnMut(&PodTarget) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let mut last = anyhow!("no pod");
    for p in &server.pods {
        match ask(p).await {
            Ok(t) => return Ok(t),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// The join's facts for the hosted clusters attached to `infra`
/// (`namespace/name`).
pub async fn owners(client: &Client, infra: &str, notes: &mut Vec<String>) -> Owners {
    let mut o = Owners::default();
    let Some((ns, name)) = infra.split_once('/') else {
        return o;
    };
    let api: Api<InfraClusterAttachment> = Api::namespaced(client.clone(), ns);
    let attachments = match api.list(&ListParams::default()).await {
        Ok(l) => l.items,
        Err(e) => {
            notes.push(format!("{infra}: cannot list InfraClusterAttachments ({e}): no VM, Machine or cluster joined"));
            return o;
        }
    };
    let mut cps: Vec<String> = Vec::new();
    for a in attachments.iter().filter(|a| a.spec.infra_ref.name == name) {
        let cp = control_plane_namespace(a);
        o.clusters.insert(
            cp.clone(),
            format!(
                "{}/{}",
                a.spec.hosted_cluster_ref.namespace, a.spec.hosted_cluster_ref.name
            ),
        );
        if !cps.contains(&cp) {
            cps.push(cp);
        }
    }
    if cps.is_empty() {
        return o;
    }
    let resources = match observe::discover(client).await {
        Ok(d) => [VMIS, MACHINES].map(|api| d.get(api).cloned()),
        Err(e) => {
            notes.push(format!(
                "cannot read the KubeVirt and CAPI CRDs ({e}): no VM or Machine joined"
            ));
            return o;
        }
    };
    for cp in &cps {
        for (i, ar) in resources.iter().enumerate() {
            let Some(ar) = ar else { continue };
            match list_in(client, ar, cp).await {
                Ok(objs) if i == 0 => o.vmis.extend(objs.iter().map(vmi_facts)),
                Ok(objs) => o.machines.extend(objs.iter().map(machine_facts)),
                Err(e) => notes.push(format!("cannot list {} in {cp}: {e}", ar.plural)),
            }
        }
    }
    o
}

async fn list_in(client: &Client, ar: &ApiResource, ns: &str) -> kube::Result<Vec<DynamicObject>> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, ar);
    Ok(api.list(&ListParams::default()).await?.items)
}

/// The whole inventory of the selection, joined.
pub async fn collect<R: Reach>(
    client: &Client,
    reach: &R,
    sel: &Selection,
) -> anyhow::Result<Inventory> {
    let mut inv = Inventory::default();
    let servers = servers(client, sel, &mut inv.notes).await?;
    let mut by_infra: BTreeMap<String, Vec<(String, Vec<LeaseRow>)>> = BTreeMap::new();
    for s in &servers {
        let got = first_answer::<(ServerInfo, Vec<LeaseRow>)>(s, async |p| {
            reach::all_leases(reach, p, &s.token, &sel.query).await
        })
        .await;
        match got {
            Ok((info, rows)) => {
                inv.now_unix = inv.now_unix.max(info.now_unix);
                by_infra
                    .entry(s.infra.clone())
                    .or_default()
                    .push((s.name.clone(), rows));
            }
            Err(e) => inv
                .notes
                .push(format!("{}: {} not reached: {e:#}", s.infra, s.name)),
        }
    }
    for (infra, answers) in by_infra {
        let owners = owners(client, &infra, &mut inv.notes).await;
        let mut rows = join(&infra, &answers, &owners);
        if let Some(c) = &sel.cluster {
            rows.retain(|r| {
                r.hosted_cluster
                    .as_deref()
                    .is_some_and(|hc| match hc.split_once('/') {
                        Some((ns, name)) => names(c, ns, name),
                        None => hc == c,
                    })
            });
        }
        inv.leases.extend(rows);
    }
    Ok(inv)
}

/// Every selected server's answer about `mac`, and the servers not reached.
pub async fn collect_why<R: Reach>(
    client: &Client,
    reach: &R,
    sel: &Selection,
    mac: &str,
) -> anyhow::Result<(Vec<WhyAnswer>, Vec<String>)> {
    let mac = canonical_mac(mac).ok_or_else(|| anyhow!("{mac}: not a MAC"))?;
    let mut notes = Vec::new();
    let servers = servers(client, sel, &mut notes).await?;
    let mut out = Vec::new();
    for s in &servers {
        match first_answer::<Why>(s, async |p| reach::why(reach, p, &s.token, &mac).await).await {
            Ok(why) => out.push(WhyAnswer {
                infra: s.infra.clone(),
                dhcp_server: s.name.clone(),
                why,
            }),
            Err(e) => notes.push(format!("{}: {} not reached: {e:#}", s.infra, s.name)),
        }
    }
    Ok((out, notes))
}

/// Runs the command against the cluster of the kubeconfig (or in cluster):
/// prints the answer; an error when nothing could be asked.
pub async fn run(args: LeasesArgs) -> anyhow::Result<String> {
    let config = kube::Config::infer()
        .await
        .context("no cluster: neither KUBECONFIG, ~/.kube/config nor in-cluster")?;
    let client = Client::try_from(config).context("building the Kubernetes client")?;
    let reach = PortForward {
        client: client.clone(),
        timeout: Duration::from_secs(args.timeout.max(1)),
    };
    run_with(&client, &reach, &args).await
}

/// The command over a given client and way to the pods (tests give a
/// mocked API and loopback servers).
pub async fn run_with<R: Reach>(
    client: &Client,
    reach: &R,
    args: &LeasesArgs,
) -> anyhow::Result<String> {
    let sel = args.selection()?;
    match &args.command {
        Some(LeasesCommand::Why { mac }) => {
            let (answers, notes) = collect_why(client, reach, &sel, mac).await?;
            render_why(&answers, &notes, args.output)
        }
        None => {
            let inv = collect(client, reach, &sel).await?;
            render(&inv, args.output)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn infra_and_cluster_are_named_with_or_without_namespace() {
        assert!(names("vlan", "oooi", "vlan"));
        assert!(names("oooi/vlan", "oooi", "vlan"));
        assert!(!names("other/vlan", "oooi", "vlan"));
        assert!(!names("vlan2", "oooi", "vlan"));
    }

    #[test]
    fn a_bad_mac_or_state_is_refused_at_the_edge() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            leases: LeasesArgs,
        }
        let a = Cli::try_parse_from(["x", "--mac", "52-54-00-AA-00-01", "--state", "held_back"])
            .unwrap();
        let sel = a.leases.selection().unwrap();
        assert_eq!(sel.query.mac.as_deref(), Some("52:54:00:aa:00:01"));
        assert_eq!(sel.query.state, Some(LeaseState::HeldBack));
        let a = Cli::try_parse_from(["x", "--mac", "52:54"]).unwrap();
        assert!(
            a.leases
                .selection()
                .unwrap_err()
                .to_string()
                .contains("--mac 52:54")
        );
        assert!(Cli::try_parse_from(["x", "--state", "bound"]).is_err());
        let a = Cli::try_parse_from(["x", "why", "52:54:00:aa:00:01", "-o", "json"]).unwrap();
        assert!(matches!(a.leases.command, Some(LeasesCommand::Why { .. })));
        assert_eq!(a.leases.output, Output::Json);
    }
}
