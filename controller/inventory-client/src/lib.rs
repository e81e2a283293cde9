//! The client side of the DHCP servers' lease inventory API (whose contract
//! is `oooi-dhcp-inventory`), shared by `oooi-controller` (its status poll
//! and its `leases` command) and must-gather:
//!
//! - [`reach`]: the ways to a DHCP pod's API (pod address, port-forward)
//!   and its calls;
//! - [`objects`]: what is read of KubeVirt VMIs and CAPI Machines;
//! - [`join`]: lease rows joined with VMIs, VMs, Machines, NodePools and
//!   hosted clusters (pure);
//! - [`output`]: the tables, JSON and YAML a person reads.
//!
//! No wasmtime, no controller: must-gather links it as it is.

pub mod join;
pub mod objects;
pub mod output;
pub mod reach;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::ObjectMeta;
use oooi_vocabulary::labels as keys;

use reach::PodTarget;

/// The `app.kubernetes.io/component` of the DHCP pods.
const DHCP: &str = "dhcp";

/// The instance a DHCPServer belongs to: the Infra its label names, else
/// its own name (the controller's rule for every component object).
pub fn instance_of(meta: &ObjectMeta) -> String {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(keys::INFRA))
        .cloned()
        .or_else(|| meta.name.clone())
        .unwrap_or_default()
}

/// Label selector of every oooi DHCP pod.
pub fn dhcp_pod_selector() -> String {
    format!(
        "{}={},{}={}",
        keys::APP_NAME,
        keys::APP_NAME_VALUE,
        keys::APP_COMPONENT,
        DHCP
    )
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The pods of DHCPServer `server` (metadata of the server) among `pods`,
/// Ready ones first, then by name: the pods of its instance whose server
/// label names it, or, for a server without a pair, that carry no server
/// label (a single server's pods have none). Pods being deleted are left
/// out.
pub fn pods_of(server: &ObjectMeta, paired: bool, pods: &[Pod]) -> Vec<PodTarget> {
    let name = server.name.clone().unwrap_or_default();
    let ns = server.namespace.clone().unwrap_or_default();
    let instance = instance_of(server);
    let mut mine: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.namespace().as_deref() == Some(ns.as_str()))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.labels().get(keys::APP_INSTANCE) == Some(&instance))
        .filter(|p| p.labels().get(keys::APP_COMPONENT).map(String::as_str) == Some(DHCP))
        .filter(|p| match p.labels().get(keys::SERVER) {
            Some(s) => *s == name,
            None => !paired,
        })
        .collect();
    mine.sort_by_key(|p| (!ready(p), p.name_any()));
    mine.into_iter()
        .map(|p| PodTarget {
            namespace: ns.clone(),
            name: p.name_any(),
            ip: p
                .status
                .as_ref()
                .and_then(|s| s.pod_ip.as_deref())
                .and_then(|ip| ip.parse().ok()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    fn pod(name: &str, instance: &str, server: Option<&str>, ready: bool) -> Pod {
        let mut labels = json!({
            "app.kubernetes.io/name": "oooi",
            "app.kubernetes.io/component": "dhcp",
            "app.kubernetes.io/instance": instance,
        });
        if let Some(s) = server {
            labels["hostedcluster.densityops.com/server"] = json!(s);
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "oooi", "labels": labels},
            "status": {"podIP": "10.128.0.9", "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}]}
        }))
        .unwrap()
    }

    fn meta(name: &str, infra: &str) -> kube::api::ObjectMeta {
        serde_json::from_value(json!({
            "name": name, "namespace": "oooi",
            "labels": {"hostedcluster.densityops.com/infra": infra}
        }))
        .unwrap()
    }

    #[test]
    fn a_servers_pods_are_found_by_instance_and_server_label() {
        let pods = vec![
            pod("vlan-dhcp-b", "vlan", None, true),
            pod("vlan-dhcp-a", "vlan", None, false),
            pod("vlan-dhcp-2-x", "vlan", Some("vlan-dhcp-2"), true),
            pod("vlan-dhcp-p", "vlan", Some("vlan-dhcp"), true),
            pod("other-dhcp-z", "other", None, true),
        ];
        let names = |v: Vec<PodTarget>| v.into_iter().map(|p| p.name).collect::<Vec<_>>();
        // A single server: its instance's pods without a server label or
        // with its own (left from when it was a pair's primary), Ready
        // first.
        assert_eq!(
            names(pods_of(&meta("vlan-dhcp", "vlan"), false, &pods)),
            ["vlan-dhcp-b", "vlan-dhcp-p", "vlan-dhcp-a"]
        );
        // A pair's servers: each its own.
        assert_eq!(
            names(pods_of(&meta("vlan-dhcp", "vlan"), true, &pods)),
            ["vlan-dhcp-p"]
        );
        assert_eq!(
            names(pods_of(&meta("vlan-dhcp-2", "vlan"), true, &pods)),
            ["vlan-dhcp-2-x"]
        );
        let p = &pods_of(&meta("other-dhcp", "other"), false, &pods)[0];
        assert_eq!(p.ip, Some("10.128.0.9".parse().unwrap()));
        assert_eq!(
            dhcp_pod_selector(),
            "app.kubernetes.io/name=oooi,app.kubernetes.io/component=dhcp"
        );
    }
}
