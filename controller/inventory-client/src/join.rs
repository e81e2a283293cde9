//! The join: a DHCP server's lease rows with the objects that say whose
//! they are. Pure: the objects are read elsewhere and turned into plain
//! facts here ([`vmi_facts`], [`machine_facts`]).
//!
//! - A row's MAC names a KubeVirt VMI (its interfaces' MACs, from the spec
//!   before the guest reported them); a row without a MAC falls back to the
//!   VMI interface that reports its address.
//! - The VMI's owner reference names its VirtualMachine.
//! - The CAPI Machine of a VMI is the one in its namespace whose
//!   `spec.infrastructureRef.name` (the KubevirtMachine, named like the
//!   VMI) or own name is the VMI's; without a VMI, the Machine reporting the
//!   row's address.
//! - The NodePool is the Machine's `hypershift.openshift.io/nodePool`
//!   annotation (`namespace/name`), else its
//!   `cluster.x-k8s.io/deployment-name` label (HyperShift names the
//!   MachineDeployment after the NodePool), else the VMI's
//!   `hypershift.openshift.io/nodePool` label.
//! - The hosted cluster is the Machine's `hypershift.openshift.io/cluster`
//!   annotation, else the cluster whose control-plane namespace holds the
//!   VMI or Machine (from the InfraClusterAttachments).

use std::collections::BTreeMap;
use std::net::IpAddr;

use kube::ResourceExt;
use kube::api::DynamicObject;
use oooi_dhcp_inventory::{LeaseRow, canonical_mac};
use serde::{Deserialize, Serialize};

use crate::objects::{machine_addresses, vmi_interfaces};

/// Label CAPI puts on the Machines of a MachineDeployment; HyperShift names
/// the MachineDeployment after the NodePool.
const DEPLOYMENT_LABEL: &str = oooi_vocabulary::labels::CAPI_DEPLOYMENT_NAME;

/// HyperShift's annotation (and node label) naming a NodePool,
/// `namespace/name` on CAPI objects.
pub const NODE_POOL_ANNOTATION: &str = "hypershift.openshift.io/nodePool";
/// HyperShift's annotation naming the HostedCluster, `namespace/name`.
pub const CLUSTER_ANNOTATION: &str = "hypershift.openshift.io/cluster";

/// What the join needs of a VMI.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VmiFacts {
    /// Its namespace (the hosted cluster's control-plane namespace).
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The VirtualMachine owning it.
    pub vm: Option<String>,
    /// Its interfaces' MACs, canonical.
    pub macs: Vec<String>,
    /// Its interfaces' addresses.
    pub ips: Vec<IpAddr>,
    /// The NodePool its labels name.
    pub node_pool: Option<String>,
}

/// What the join needs of a CAPI Machine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MachineFacts {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// `spec.infrastructureRef.name`: the KubevirtMachine, named like its VMI.
    pub infrastructure: Option<String>,
    /// The NodePool (annotation, else the MachineDeployment label).
    pub node_pool: Option<String>,
    /// The hosted cluster its annotation names (`namespace/name`).
    pub hosted_cluster: Option<String>,
    /// `status.addresses` that are IP addresses.
    pub addresses: Vec<IpAddr>,
}

/// Everything the rows are joined with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owners {
    /// The VMIs.
    pub vmis: Vec<VmiFacts>,
    /// The Machines.
    pub machines: Vec<MachineFacts>,
    /// Control-plane namespace → hosted cluster (`namespace/name`).
    pub clusters: BTreeMap<String, String>,
}

/// The name part of a `namespace/name` value (the value itself without a
/// slash).
fn name_part(v: &str) -> String {
    v.rsplit('/').next().unwrap_or(v).to_string()
}

/// A VMI's facts (interfaces as [`vmi_interfaces`] reads them).
pub fn vmi_facts(obj: &DynamicObject) -> VmiFacts {
    let mut macs = Vec::new();
    let mut ips = Vec::new();
    for i in &vmi_interfaces(obj) {
        if let Some(m) = i.mac.as_deref().and_then(canonical_mac)
            && !macs.contains(&m)
        {
            macs.push(m);
        }
        ips.extend(
            i.ip_addresses
                .iter()
                .filter_map(|s| oooi_vocabulary::observed_address(s)),
        );
    }
    VmiFacts {
        namespace: obj.namespace().unwrap_or_default(),
        name: obj.name_any(),
        vm: obj
            .owner_references()
            .iter()
            .find(|o| o.kind == "VirtualMachine")
            .map(|o| o.name.clone()),
        macs,
        ips,
        node_pool: obj.labels().get(NODE_POOL_ANNOTATION).map(|v| name_part(v)),
    }
}

/// A Machine's facts.
pub fn machine_facts(obj: &DynamicObject) -> MachineFacts {
    let node_pool = obj
        .annotations()
        .get(NODE_POOL_ANNOTATION)
        .map(|v| name_part(v))
        .or_else(|| obj.labels().get(DEPLOYMENT_LABEL).cloned());
    MachineFacts {
        namespace: obj.namespace().unwrap_or_default(),
        name: obj.name_any(),
        infrastructure: obj.data["spec"]["infrastructureRef"]["name"]
            .as_str()
            .map(str::to_string),
        node_pool,
        hosted_cluster: obj.annotations().get(CLUSTER_ANNOTATION).cloned(),
        addresses: machine_addresses(obj)
            .iter()
            .filter_map(|s| oooi_vocabulary::observed_address(s))
            .collect(),
    }
}

/// One lease with whose it is, as `oooi-controller leases` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JoinedLease {
    /// The Infra (`namespace/name`).
    pub infra: String,
    /// The DHCPServers that hold the lease (both of a pair, usually).
    pub servers: Vec<String>,
    /// The lease as the server answered it (the freshest of the servers').
    pub lease: LeaseRow,
    /// The namespace of the VMI (or Machine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The VirtualMachineInstance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vmi: Option<String>,
    /// The VirtualMachine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<String>,
    /// The CAPI Machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    /// The HyperShift NodePool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_pool: Option<String>,
    /// The HostedCluster (`namespace/name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosted_cluster: Option<String>,
}

/// The rows each server of `infra` answered (server name, rows), joined:
/// one entry per address and client (a pair's two copies of a lease are
/// one, the one with the later client transaction kept), in address order.
pub fn join(infra: &str, answers: &[(String, Vec<LeaseRow>)], owners: &Owners) -> Vec<JoinedLease> {
    let mut by_key: BTreeMap<(IpAddr, Option<String>), JoinedLease> = BTreeMap::new();
    for (server, rows) in answers {
        for row in rows {
            let key = (row.address, row.mac.clone());
            match by_key.get_mut(&key) {
                Some(e) => {
                    if !e.servers.contains(server) {
                        e.servers.push(server.clone());
                    }
                    if row.cltt_unix > e.lease.cltt_unix {
                        e.lease = row.clone();
                    }
                }
                None => {
                    by_key.insert(
                        key,
                        JoinedLease {
                            infra: infra.to_string(),
                            servers: vec![server.clone()],
                            lease: row.clone(),
                            namespace: None,
                            vmi: None,
                            vm: None,
                            machine: None,
                            node_pool: None,
                            hosted_cluster: None,
                        },
                    );
                }
            }
        }
    }
    by_key
        .into_values()
        .map(|mut e| {
            owner_of(&mut e, owners);
            e.servers.sort();
            e
        })
        .collect()
}

fn owner_of(e: &mut JoinedLease, owners: &Owners) {
    let row = &e.lease;
    let vmi = match row.mac.as_deref().and_then(canonical_mac) {
        Some(mac) => owners.vmis.iter().find(|v| v.macs.contains(&mac)),
        None => owners.vmis.iter().find(|v| v.ips.contains(&row.address)),
    };
    let machine = match vmi {
        Some(v) => owners.machines.iter().find(|m| {
            m.namespace == v.namespace
                && (m.infrastructure.as_deref() == Some(v.name.as_str()) || m.name == v.name)
        }),
        // Without a VMI, a Machine with the address — but only for a row
        // with no client or a live one: an expired row's address may be
        // someone else's now.
        None => owners.machines.iter().find(|m| {
            m.addresses.contains(&row.address)
                && matches!(
                    row.state,
                    oooi_dhcp_inventory::LeaseState::Active
                        | oooi_dhcp_inventory::LeaseState::Offered
                )
        }),
    };
    let namespace = vmi
        .map(|v| v.namespace.clone())
        .or_else(|| machine.map(|m| m.namespace.clone()));
    e.vmi = vmi.map(|v| v.name.clone());
    e.vm = vmi.and_then(|v| v.vm.clone());
    e.machine = machine.map(|m| m.name.clone());
    e.node_pool = machine
        .and_then(|m| m.node_pool.clone())
        .or_else(|| vmi.and_then(|v| v.node_pool.clone()));
    e.hosted_cluster = machine.and_then(|m| m.hosted_cluster.clone()).or_else(|| {
        namespace
            .as_ref()
            .and_then(|ns| owners.clusters.get(ns).cloned())
    });
    e.namespace = namespace;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use oooi_dhcp_inventory::{LeaseState, ServerRole};
    use serde_json::json;

    use super::*;

    fn row(ip: &str, mac: Option<&str>, state: LeaseState, cltt: u64) -> LeaseRow {
        LeaseRow {
            address: ip.parse().unwrap(),
            mac: mac.map(str::to_string),
            client_id: None,
            iaid: None,
            hostname: None,
            state,
            reserved: false,
            cltt_unix: Some(cltt),
            expires_unix: cltt + 3600,
            answered_by: Some(ServerRole::Primary),
        }
    }

    fn dynamic(v: serde_json::Value) -> DynamicObject {
        serde_json::from_value(v).unwrap()
    }

    fn owners() -> Owners {
        let vmi_w1 = dynamic(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "c1-workers-abc12", "namespace": "clusters-c1",
                "labels": {"hypershift.openshift.io/nodePool": "c1-workers"},
                "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                    "name": "c1-workers-abc12", "uid": "u1"}]},
            "spec": {"domain": {"devices": {"interfaces": [
                {"name": "vlan", "bridge": {}, "macAddress": "52:54:00:AA:00:01"}]}}},
            "status": {"interfaces": [{"name": "vlan", "mac": "52:54:00:aa:00:01",
                "ipAddress": "192.0.2.50"}]}
        }));
        // Not reported yet: the MAC from the spec only.
        let vmi_w2 = dynamic(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "c2-pool-x", "namespace": "clusters-c2"},
            "spec": {"domain": {"devices": {"interfaces": [
                {"name": "vlan", "bridge": {}, "macAddress": "52-54-00-bb-00-02"}]}}}
        }));
        let m1 = dynamic(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
            "metadata": {"name": "c1-workers-7f9-abc12", "namespace": "clusters-c1",
                "labels": {"cluster.x-k8s.io/cluster-name": "c1-infra-id",
                           "cluster.x-k8s.io/deployment-name": "c1-workers"},
                "annotations": {"hypershift.openshift.io/nodePool": "clusters/c1-workers",
                                "hypershift.openshift.io/cluster": "clusters/c1"}},
            "spec": {"infrastructureRef": {"kind": "KubevirtMachine", "name": "c1-workers-abc12"}},
            "status": {"addresses": [{"type": "InternalIP", "address": "192.0.2.50"}]}
        }));
        let m2 = dynamic(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
            "metadata": {"name": "c2-pool-x", "namespace": "clusters-c2",
                "labels": {"cluster.x-k8s.io/deployment-name": "pool"}}
        }));
        let m3 = dynamic(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
            "metadata": {"name": "metal-0", "namespace": "clusters-c3"},
            "status": {"addresses": [{"type": "InternalIP", "address": "192.0.2.70"}]}
        }));
        Owners {
            vmis: vec![vmi_facts(&vmi_w1), vmi_facts(&vmi_w2)],
            machines: vec![machine_facts(&m1), machine_facts(&m2), machine_facts(&m3)],
            clusters: BTreeMap::from([
                ("clusters-c1".to_string(), "clusters/c1".to_string()),
                ("clusters-c2".to_string(), "clusters/c2".to_string()),
                ("clusters-c3".to_string(), "clusters/c3".to_string()),
            ]),
        }
    }

    /// (vmi, vm, machine, node pool, hosted cluster, namespace) of a row.
    type Who = (
        Option<&'static str>,
        Option<&'static str>,
        Option<&'static str>,
        Option<&'static str>,
        Option<&'static str>,
        Option<&'static str>,
    );

    fn who(e: &JoinedLease) -> [Option<String>; 6] {
        [
            e.vmi.clone(),
            e.vm.clone(),
            e.machine.clone(),
            e.node_pool.clone(),
            e.hosted_cluster.clone(),
            e.namespace.clone(),
        ]
    }

    #[test]
    fn each_row_finds_its_vmi_machine_node_pool_and_cluster() {
        let table: Vec<(LeaseRow, Who)> = vec![
            // By MAC, any spelling; the Machine through its
            // infrastructureRef; NodePool and cluster from its annotations.
            (
                row(
                    "192.0.2.50",
                    Some("52:54:00:aa:00:01"),
                    LeaseState::Active,
                    10,
                ),
                (
                    Some("c1-workers-abc12"),
                    Some("c1-workers-abc12"),
                    Some("c1-workers-7f9-abc12"),
                    Some("c1-workers"),
                    Some("clusters/c1"),
                    Some("clusters-c1"),
                ),
            ),
            // A VMI known by its spec MAC; its Machine by name; the
            // NodePool from the MachineDeployment label; the cluster from
            // the control-plane namespace.
            (
                row(
                    "192.0.2.51",
                    Some("52:54:00:bb:00:02"),
                    LeaseState::Offered,
                    10,
                ),
                (
                    Some("c2-pool-x"),
                    None,
                    Some("c2-pool-x"),
                    Some("pool"),
                    Some("clusters/c2"),
                    Some("clusters-c2"),
                ),
            ),
            // No VMI has the MAC: a live row finds the Machine reporting
            // its address.
            (
                row(
                    "192.0.2.70",
                    Some("52:54:00:cc:00:03"),
                    LeaseState::Active,
                    10,
                ),
                (
                    None,
                    None,
                    Some("metal-0"),
                    None,
                    Some("clusters/c3"),
                    Some("clusters-c3"),
                ),
            ),
            // ... an expired one does not (the address may be another's now).
            (
                row(
                    "192.0.2.70",
                    Some("52:54:00:cc:00:04"),
                    LeaseState::Expired,
                    10,
                ),
                (None, None, None, None, None, None),
            ),
            // A MAC nobody knows.
            (
                row(
                    "192.0.2.80",
                    Some("52:54:00:dd:00:05"),
                    LeaseState::Active,
                    10,
                ),
                (None, None, None, None, None, None),
            ),
            // A quarantined address without a client: by the VMI that
            // reports it.
            (
                row("192.0.2.50", None, LeaseState::Declined, 10),
                (
                    Some("c1-workers-abc12"),
                    Some("c1-workers-abc12"),
                    Some("c1-workers-7f9-abc12"),
                    Some("c1-workers"),
                    Some("clusters/c1"),
                    Some("clusters-c1"),
                ),
            ),
        ];
        let o = owners();
        for (r, want) in table {
            let got = join("oooi/vlan", &[("vlan-dhcp".into(), vec![r.clone()])], &o);
            assert_eq!(got.len(), 1);
            let want =
                [want.0, want.1, want.2, want.3, want.4, want.5].map(|w| w.map(str::to_string));
            assert_eq!(who(&got[0]), want, "{r:?}");
            assert_eq!(got[0].lease, r);
        }
    }

    #[test]
    fn a_pairs_two_copies_are_one_row_with_the_fresher_lease() {
        let a = row(
            "192.0.2.50",
            Some("52:54:00:aa:00:01"),
            LeaseState::Active,
            100,
        );
        let mut b = a.clone();
        b.cltt_unix = Some(200);
        b.answered_by = Some(ServerRole::Secondary);
        let other = row(
            "192.0.2.9",
            Some("52:54:00:aa:00:09"),
            LeaseState::Active,
            1,
        );
        let got = join(
            "oooi/vlan",
            &[
                ("vlan-dhcp-2".into(), vec![b.clone()]),
                ("vlan-dhcp".into(), vec![a, other]),
            ],
            &Owners::default(),
        );
        assert_eq!(got.len(), 2);
        // Address order.
        assert_eq!(got[0].lease.address.to_string(), "192.0.2.9");
        assert_eq!(got[0].servers, ["vlan-dhcp"]);
        assert_eq!(got[1].servers, ["vlan-dhcp", "vlan-dhcp-2"]);
        assert_eq!(got[1].lease, b);
    }

    #[test]
    fn nothing_to_join_with_leaves_the_rows_as_they_are() {
        let r = row("2001:db8::10", None, LeaseState::Active, 1);
        let got = join("ns/i", &[("s".into(), vec![r.clone()])], &Owners::default());
        assert_eq!(got[0].lease, r);
        assert_eq!(who(&got[0]), [None, None, None, None, None, None]);
        let v = serde_json::to_value(&got[0]).unwrap();
        assert_eq!(v["lease"]["address"], "2001:db8::10");
        assert!(v.get("vmi").is_none());
    }
}
