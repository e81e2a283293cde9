//! Worker addresses of one hosted cluster on the VLAN: the IPv4 addresses
//! of its Machines inside the Infra CIDR (infra addresses left out); for a
//! VMI with no such Machine address (no Machine of that name, or one without
//! addresses yet), the VMI's interface addresses. An address claimed by two
//! accepted attachments is a conflict: [`split_conflicts`] takes it out of
//! both.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crate::plan::infra::network::Network;
use crate::plan::infra::observed::{HostedClusterKey, Observed};

/// Worker addresses of one cluster inside the VLAN (see the module rules).
pub fn worker_addresses(
    network: &Network,
    observed: &Observed,
    hc: &HostedClusterKey,
) -> Vec<IpAddr> {
    let Some(cluster) = observed.clusters.get(hc) else {
        return Vec::new();
    };
    let usable = |s: &str| network.worker_host(s);
    let mut out = BTreeSet::new();
    let mut covered = BTreeSet::new();
    for m in &cluster.machines {
        let mut any = false;
        for a in m.addresses.iter().filter_map(|s| usable(s)) {
            out.insert(a);
            any = true;
        }
        // Only a Machine with a VLAN address stands in for its VMI.
        if any {
            covered.insert(m.name.as_str());
        }
    }
    for vmi in &cluster.vmis {
        if covered.contains(vmi.name.as_str()) {
            continue;
        }
        for iface in &vmi.interfaces {
            out.extend(iface.ip_addresses.iter().filter_map(|s| usable(s)));
        }
    }
    out.into_iter().collect()
}

/// Splits `addresses` into the ones only this attachment claims and the
/// ones another attachment claims too (`claims`: how many accepted
/// attachments claim each address).
pub fn split_conflicts(
    addresses: &[IpAddr],
    claims: &BTreeMap<IpAddr, usize>,
) -> (Vec<IpAddr>, Vec<IpAddr>) {
    let (shared, own): (Vec<IpAddr>, Vec<IpAddr>) = addresses
        .iter()
        .partition(|a| claims.get(a).copied().unwrap_or(0) > 1);
    (own, shared)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::fixtures::{addr, cluster, cluster_key, machine, network, vmi};

    fn observed(c: crate::plan::ObservedCluster) -> Observed {
        Observed {
            clusters: BTreeMap::from([(cluster_key("c1"), c)]),
            ..Observed::default()
        }
    }

    #[test]
    fn machine_addresses_inside_the_cidr_are_workers_but_infra_addresses_are_not() {
        let o = observed(cluster(
            vec![machine(
                "m1",
                &[
                    "192.0.2.50/24",
                    "10.128.0.7",
                    "192.0.2.4",
                    "fd00::1",
                    "bogus",
                ],
            )],
            vec![],
        ));
        assert_eq!(
            worker_addresses(&network(), &o, &cluster_key("c1")),
            vec![addr(50)]
        );
        assert!(worker_addresses(&network(), &o, &cluster_key("other")).is_empty());
    }

    #[test]
    fn a_vmi_stands_in_only_for_a_machine_without_a_vlan_address() {
        let o = observed(cluster(
            vec![
                machine("with-address", &["192.0.2.51"]),
                machine("pending", &["10.128.0.9"]),
            ],
            vec![
                vmi("with-address", None, &["192.0.2.61"]),
                vmi("pending", None, &["192.0.2.62"]),
                vmi("no-machine", None, &["192.0.2.63", "198.51.100.1"]),
            ],
        ));
        assert_eq!(
            worker_addresses(&network(), &o, &cluster_key("c1")),
            vec![addr(51), addr(62), addr(63)]
        );
    }

    #[test]
    fn an_address_claimed_twice_is_a_conflict() {
        let claims = BTreeMap::from([(addr(50), 1), (addr(51), 2)]);
        assert_eq!(
            split_conflicts(&[addr(50), addr(51)], &claims),
            (vec![addr(50)], vec![addr(51)])
        );
    }
}
