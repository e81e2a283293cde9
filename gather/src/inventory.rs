//! The DHCP servers' lease inventory, as `oooi-controller leases` shows it:
//! each server's pod asked through a port-forward with its Infra's
//! inventory token (the pod proxy cannot carry the token, and the servers'
//! NetworkPolicy does not admit it), the rows joined with the VMIs and
//! Machines the gather read, written per namespace as `inventory/leases.json`
//! (the joined rows) and `inventory/leases.txt` (the wide table). MACs and
//! addresses are the point and stay; the token is never written (and, being
//! a Secret value, would be redacted anyway).

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DynamicObject, ObjectMeta};
use oooi_dhcp_inventory::{LeaseQuery, LeaseRow};
use oooi_inventory_client::join::{Owners, join, machine_facts, vmi_facts};
use oooi_inventory_client::output::{Inventory, Output, render};
use oooi_inventory_client::reach::{self, Reach};
use oooi_inventory_client::{instance_of, pods_of};
use serde_json::Value;

use crate::tree::{Tree, element};

/// The Secret (namespace, name) each DHCPServer names as its inventory
/// token.
pub fn token_secrets(dhcp: &[Value]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = dhcp
        .iter()
        .filter_map(|d| {
            Some((
                d["metadata"]["namespace"].as_str()?.to_string(),
                d["spec"]["inventoryTokenSecret"]["name"]
                    .as_str()?
                    .to_string(),
            ))
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// What the join needs, from the gathered VMIs and Machines (whole objects)
/// and the attachments (control-plane namespace → hosted cluster).
pub fn owners(vmis: &[Value], machines: &[Value], attachments: &[Value]) -> Owners {
    let dynamic = |v: &Value| serde_json::from_value::<DynamicObject>(v.clone()).ok();
    let mut o = Owners {
        vmis: vmis
            .iter()
            .filter_map(dynamic)
            .map(|v| vmi_facts(&v))
            .collect(),
        machines: machines
            .iter()
            .filter_map(dynamic)
            .map(|m| machine_facts(&m))
            .collect(),
        clusters: BTreeMap::new(),
    };
    for a in attachments {
        let spec = &a["spec"];
        let (Some(name), ns) = (
            spec["hostedClusterRef"]["name"].as_str(),
            spec["hostedClusterRef"]["namespace"]
                .as_str()
                .unwrap_or("clusters"),
        ) else {
            continue;
        };
        let cp = spec["controlPlaneNamespace"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("{ns}-{name}"));
        o.clusters.insert(cp, format!("{ns}/{name}"));
    }
    o
}

/// Per Infra (`namespace/name`), each server's name and rows.
type Answers = BTreeMap<String, Vec<(String, Vec<LeaseRow>)>>;

/// Asks every DHCPServer's pods for their leases and writes the joined
/// inventory of each namespace; a server not reached is an error line.
pub async fn gather<R: Reach>(
    reach: &R,
    tree: &mut Tree,
    dhcp: &[Value],
    pods: &[Value],
    tokens: &BTreeMap<(String, String), String>,
    owners: &Owners,
) {
    let pods: Vec<Pod> = pods
        .iter()
        .filter_map(|p| serde_json::from_value(p.clone()).ok())
        .collect();
    let mut by_ns: BTreeMap<String, Answers> = BTreeMap::new();
    let mut notes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut now: BTreeMap<String, u64> = BTreeMap::new();
    for d in dhcp {
        let Ok(meta) = serde_json::from_value::<ObjectMeta>(d["metadata"].clone()) else {
            continue;
        };
        let (Some(ns), Some(name)) = (meta.namespace.clone(), meta.name.clone()) else {
            continue;
        };
        let Some(secret) = d["spec"]["inventoryTokenSecret"]["name"].as_str() else {
            continue;
        };
        let infra = format!("{ns}/{}", instance_of(&meta));
        let Some(token) = tokens.get(&(ns.clone(), secret.to_string())) else {
            tree.error(
                format!("inventory of DHCPServer {ns}/{name}"),
                format!("no token in Secret {ns}/{secret}"),
            );
            continue;
        };
        let paired = d["spec"]["config"]["peer"].is_object();
        let mut last = String::from("no pod");
        let mut answered = false;
        for p in pods_of(&meta, paired, &pods) {
            match reach::all_leases(reach, &p, token, &LeaseQuery::default()).await {
                Ok((info, rows)) => {
                    let t = now.entry(ns.clone()).or_default();
                    *t = (*t).max(info.now_unix);
                    by_ns
                        .entry(ns.clone())
                        .or_default()
                        .entry(infra.clone())
                        .or_default()
                        .push((name.clone(), rows));
                    answered = true;
                    break;
                }
                Err(e) => last = format!("{e:#}"),
            }
        }
        if !answered {
            let what = format!("inventory of DHCPServer {ns}/{name}");
            notes
                .entry(ns.clone())
                .or_default()
                .push(format!("{infra}: {name} not reached: {last}"));
            tree.error(what, last);
        }
    }
    let namespaces: Vec<String> = by_ns.keys().chain(notes.keys()).cloned().collect();
    for ns in namespaces {
        let mut inv = Inventory {
            now_unix: now.get(&ns).copied().unwrap_or_default(),
            notes: notes.remove(&ns).unwrap_or_default(),
            ..Inventory::default()
        };
        for (infra, answers) in by_ns.remove(&ns).unwrap_or_default() {
            inv.leases.extend(join(&infra, &answers, owners));
        }
        let dir = Path::new("namespaces").join(element(&ns)).join("inventory");
        for (file, output) in [("leases.json", Output::Json), ("leases.txt", Output::Wide)] {
            match render(&inv, output) {
                Ok(text) => tree.write_text(&dir.join(file), &text),
                Err(e) => tree.error(format!("render {}", dir.join(file).display()), e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    #[test]
    fn the_token_secrets_are_the_ones_the_servers_name() {
        let d = |ns: &str, secret: Option<&str>| {
            let mut v = json!({"metadata": {"name": "x", "namespace": ns}, "spec": {}});
            if let Some(s) = secret {
                v["spec"]["inventoryTokenSecret"] = json!({"name": s});
            }
            v
        };
        let got = token_secrets(&[
            d("b", Some("t")),
            d("a", Some("t")),
            d("a", Some("t")),
            d("a", None),
        ]);
        assert_eq!(
            got,
            [
                ("a".to_string(), "t".to_string()),
                ("b".to_string(), "t".to_string())
            ]
        );
    }

    #[test]
    fn owners_come_from_whole_vmis_machines_and_the_attachments() {
        let vmi = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "w1", "namespace": "clusters-c1"},
            "status": {"interfaces": [{"name": "vlan", "mac": "52:54:00:AA:00:01", "ipAddress": "192.0.2.50"}]}});
        let machine = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
            "metadata": {"name": "m1", "namespace": "clusters-c1"},
            "spec": {"infrastructureRef": {"name": "w1"}}});
        let att = json!({"spec": {"hostedClusterRef": {"name": "c1", "namespace": "clusters"}}});
        let o = owners(&[vmi], &[machine], &[att]);
        assert_eq!(o.vmis[0].macs, ["52:54:00:aa:00:01"]);
        assert_eq!(o.machines[0].infrastructure.as_deref(), Some("w1"));
        assert_eq!(o.clusters["clusters-c1"], "clusters/c1");
    }
}

#[cfg(test)]
mod loopback_tests {
    #![allow(clippy::unwrap_used)]

    use std::net::SocketAddr;

    use http::StatusCode;
    use oooi_dhcp_inventory::{LeasePage, LeaseState, ServerInfo, ServerRole};
    use oooi_inventory_client::reach::{Bytes, PodTarget, get_over};
    use serde_json::json;

    use super::*;

    const TOKEN: &str = "loopback-inventory-token";

    /// Pods reached on loopback by name (the port-forward's stand-in).
    struct Loopback(BTreeMap<String, SocketAddr>);

    impl Reach for Loopback {
        async fn get(
            &self,
            pod: &PodTarget,
            path_and_query: &str,
            token: &str,
        ) -> anyhow::Result<(StatusCode, Bytes)> {
            let addr = self
                .0
                .get(&pod.name)
                .ok_or_else(|| anyhow::anyhow!("pod {} does not answer", pod.name))?;
            get_over(
                tokio::net::TcpStream::connect(addr).await?,
                path_and_query,
                token,
            )
            .await
        }
    }

    /// One page of one lease, to the right token only.
    async fn server() -> SocketAddr {
        let page = LeasePage {
            server: ServerInfo {
                role: ServerRole::Single,
                pair_state: None,
                now_unix: 10_000,
            },
            leases: vec![LeaseRow {
                address: "192.0.2.50".parse().unwrap(),
                mac: Some("52:54:00:aa:00:01".into()),
                client_id: None,
                iaid: None,
                hostname: Some("w1".into()),
                state: LeaseState::Active,
                reserved: false,
                cltt_unix: Some(9_700),
                expires_unix: 13_300,
                answered_by: None,
            }],
            next: None,
        };
        let body = serde_json::to_string(&page).unwrap();
        let app = axum::Router::new().route(
            "/inventory/v1/leases",
            axum::routing::get(move |h: http::HeaderMap| {
                let body = body.clone();
                async move {
                    let ok = h.get("authorization").and_then(|v| v.to_str().ok())
                        == Some(&format!("Bearer {TOKEN}"));
                    if ok {
                        (StatusCode::OK, body)
                    } else {
                        (StatusCode::UNAUTHORIZED, String::new())
                    }
                }
            }),
        );
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(l, app).await });
        addr
    }

    #[tokio::test]
    async fn the_inventory_is_written_joined_and_without_the_token() {
        let dir = tempfile::tempdir().unwrap();
        let mut tree = Tree::create(dir.path()).unwrap();
        let dhcp = vec![json!({
            "metadata": {"name": "vlan-dhcp", "namespace": "oooi",
                         "labels": {"hostedcluster.densityops.com/infra": "vlan"}},
            "spec": {"inventoryTokenSecret": {"name": "vlan-dhcp-inventory-token"}, "config": {}}
        })];
        let pods = vec![json!({
            "metadata": {"name": "vlan-dhcp-abc", "namespace": "oooi", "labels": {
                "app.kubernetes.io/name": "oooi", "app.kubernetes.io/component": "dhcp",
                "app.kubernetes.io/instance": "vlan"}},
            "status": {"podIP": "10.128.0.5"}
        })];
        let tokens = BTreeMap::from([(
            ("oooi".to_string(), "vlan-dhcp-inventory-token".to_string()),
            TOKEN.to_string(),
        )]);
        let vmi = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "w1", "namespace": "clusters-c1"},
            "status": {"interfaces": [{"name": "vlan", "mac": "52:54:00:aa:00:01"}]}});
        let att = json!({"spec": {"hostedClusterRef": {"name": "c1", "namespace": "clusters"}}});
        let o = owners(&[vmi], &[], &[att]);
        let reach = Loopback(BTreeMap::from([(
            "vlan-dhcp-abc".to_string(),
            server().await,
        )]));
        gather(&reach, &mut tree, &dhcp, &pods, &tokens, &o).await;
        tree.finish();
        assert!(tree.errors().is_empty(), "{:?}", tree.errors());
        let root = tree.root().to_path_buf();
        let json_text =
            std::fs::read_to_string(root.join("namespaces/oooi/inventory/leases.json")).unwrap();
        let v: Value = serde_json::from_str(&json_text).unwrap();
        assert_eq!(v["leases"][0]["lease"]["mac"], "52:54:00:aa:00:01");
        assert_eq!(v["leases"][0]["vmi"], "w1");
        assert_eq!(v["leases"][0]["hostedCluster"], "clusters/c1");
        let table =
            std::fs::read_to_string(root.join("namespaces/oooi/inventory/leases.txt")).unwrap();
        assert!(table.starts_with("INFRA "), "{table}");
        assert!(
            table.contains("192.0.2.50") && table.contains("5m ago"),
            "{table}"
        );
        for f in [&json_text, &table] {
            assert!(!f.contains(TOKEN));
        }

        // A wrong token: an error line, no rows.
        let dir = tempfile::tempdir().unwrap();
        let mut tree = Tree::create(dir.path()).unwrap();
        let wrong = BTreeMap::from([(
            ("oooi".to_string(), "vlan-dhcp-inventory-token".to_string()),
            "wrong".to_string(),
        )]);
        gather(&reach, &mut tree, &dhcp, &pods, &wrong, &o).await;
        assert_eq!(tree.errors().len(), 1, "{:?}", tree.errors());
        assert!(tree.errors()[0].contains("401"), "{:?}", tree.errors());
    }
}
