//! DHCP reservations from a hosted cluster's VMIs: one per interface with
//! a MAC and an address inside the Infra CIDR (infra addresses left out),
//! named after the VMI when that is a host name. A MAC or an address seen
//! twice (across clusters or within one) is not reserved at all
//! ([`retain_unique`]): the DHCP config would be rejected whole.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::plan::infra::network::Network;
use crate::plan::infra::observed::{HostedClusterKey, Observed};
use crate::plan::names::is_dns_label;

/// A DHCP reservation derived from a VMI.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Reservation {
    /// MAC, lower case with colons.
    pub mac: String,
    /// Reserved address.
    pub ip: IpAddr,
    /// VMI name, when it is a valid host name.
    pub hostname: Option<String>,
}

/// A worker VM known by MAC before its address is: the DHCP server gives it
/// a pool lease with its host name, and a reservation follows once the VMI
/// reports the address.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct KnownClient {
    /// MAC, lower case with colons.
    pub mac: String,
    /// VMI name, when it is a valid host name.
    pub hostname: Option<String>,
}

/// The VMI interfaces of cluster `hc` with a MAC (from the VMI's spec or
/// status) and no address yet, sorted: a VM that has not taken its first
/// lease. Interfaces with an address are reservations (inside the CIDR) or
/// on another network (outside it), never known clients.
pub fn known_clients(observed: &Observed, hc: &HostedClusterKey) -> Vec<KnownClient> {
    let Some(cluster) = observed.clusters.get(hc) else {
        return Vec::new();
    };
    let mut out: Vec<KnownClient> = cluster
        .vmis
        .iter()
        .flat_map(|vmi| {
            vmi.interfaces
                .iter()
                .filter(|i| i.ip_addresses.iter().all(|a| a.trim().is_empty()))
                .filter_map(|i| i.mac.as_deref().and_then(oooi_dhcp_config::Mac::parse))
                .map(|mac| KnownClient {
                    mac: mac.to_string(),
                    hostname: is_dns_label(&vmi.name).then(|| vmi.name.clone()),
                })
        })
        .collect();
    out.sort();
    out
}

/// The reservations of cluster `hc`, sorted.
pub fn reservations(
    network: &Network,
    observed: &Observed,
    hc: &HostedClusterKey,
) -> Vec<Reservation> {
    let Some(cluster) = observed.clusters.get(hc) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for vmi in &cluster.vmis {
        for iface in &vmi.interfaces {
            let Some(mac) = iface.mac.as_deref().and_then(oooi_dhcp_config::Mac::parse) else {
                continue;
            };
            let ip = iface
                .ip_addresses
                .iter()
                .find_map(|s| network.worker_host(s));
            if let Some(ip) = ip {
                let hostname = is_dns_label(&vmi.name).then(|| vmi.name.clone());
                out.push(Reservation {
                    mac: mac.to_string(),
                    ip,
                    hostname,
                });
            }
        }
    }
    out.sort();
    out
}

/// Keeps the reservations whose MAC and address no other reservation (of
/// any attachment, `mac_claims`/`ip_claims`: how many attachments hold
/// each) or worker address claim (`address_claims`) shares.
pub fn retain_unique(
    reservations: &mut Vec<Reservation>,
    mac_claims: &BTreeMap<String, usize>,
    ip_claims: &BTreeMap<IpAddr, usize>,
    address_claims: &BTreeMap<IpAddr, usize>,
) {
    let mut seen_mac: BTreeMap<String, usize> = BTreeMap::new();
    let mut seen_ip: BTreeMap<IpAddr, usize> = BTreeMap::new();
    for r in reservations.iter() {
        *seen_mac.entry(r.mac.clone()).or_default() += 1;
        *seen_ip.entry(r.ip).or_default() += 1;
    }
    reservations.retain(|r| {
        mac_claims.get(&r.mac).copied().unwrap_or(0) == 1
            && ip_claims.get(&r.ip).copied().unwrap_or(0) == 1
            && seen_mac.get(&r.mac).copied().unwrap_or(0) == 1
            && seen_ip.get(&r.ip).copied().unwrap_or(0) == 1
            && address_claims.get(&r.ip).copied().unwrap_or(0) <= 1
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::fixtures::{addr, cluster, cluster_key, network, vmi};

    fn observed(vmis: Vec<crate::plan::ObservedVmi>) -> Observed {
        Observed {
            clusters: BTreeMap::from([(cluster_key("c1"), cluster(vec![], vmis))]),
            ..Observed::default()
        }
    }

    #[test]
    fn each_vmi_interface_with_a_mac_and_a_vlan_address_is_reserved() {
        let o = observed(vec![
            vmi(
                "w-b",
                Some("02:00:00:00:00:0B"),
                &["10.0.0.5", "192.0.2.52/24"],
            ),
            vmi("w-a", Some("02-00-00-00-00-0a"), &["192.0.2.51"]),
            vmi("Not_A_Host", Some("02:00:00:00:00:0c"), &["192.0.2.53"]),
            vmi("no-mac", None, &["192.0.2.54"]),
            vmi("infra", Some("02:00:00:00:00:0d"), &["192.0.2.3"]),
            vmi("bad-mac", Some("zz"), &["192.0.2.55"]),
        ]);
        let got = reservations(&network(), &o, &cluster_key("c1"));
        let want = vec![
            Reservation {
                mac: "02:00:00:00:00:0a".into(),
                ip: addr(51),
                hostname: Some("w-a".into()),
            },
            Reservation {
                mac: "02:00:00:00:00:0b".into(),
                ip: addr(52),
                hostname: Some("w-b".into()),
            },
            Reservation {
                mac: "02:00:00:00:00:0c".into(),
                ip: addr(53),
                hostname: None,
            },
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn a_shared_mac_or_address_is_not_reserved() {
        let r = |mac: &str, last: u8| Reservation {
            mac: mac.into(),
            ip: addr(last),
            hostname: None,
        };
        let mut own = vec![
            r("02:00:00:00:00:01", 51),
            r("02:00:00:00:00:02", 52),
            r("02:00:00:00:00:02", 53),
            r("02:00:00:00:00:04", 54),
            r("02:00:00:00:00:05", 55),
        ];
        let macs: BTreeMap<String, usize> = own.iter().map(|r| (r.mac.clone(), 1)).collect();
        let mut ips: BTreeMap<IpAddr, usize> = own.iter().map(|r| (r.ip, 1)).collect();
        // .54 is reserved by another attachment too; .55 is its worker address.
        ips.insert(addr(54), 2);
        let workers = BTreeMap::from([(addr(55), 2)]);
        retain_unique(&mut own, &macs, &ips, &workers);
        assert_eq!(own, vec![r("02:00:00:00:00:01", 51)]);
    }
}
