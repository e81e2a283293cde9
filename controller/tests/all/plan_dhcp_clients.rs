//! DHCP for KubeVirt workers, from the product's promise: a worker VM gets
//! its VMI name as host name (option 12) from its first DISCOVER, because
//! the VMI's MAC is known as soon as the VMI exists, not once it reports an
//! address; `unknownClients` says whether any other MAC gets a pool lease.

#![allow(clippy::unwrap_used)]

use crate::plan_support;

use oooi_controller::plan::{self, HostedClusterKey, Observed, plan_infra};
use plan_support::*;

fn with_vmis(vmis: Vec<plan::ObservedVmi>) -> Observed {
    let mut obs = Observed::default();
    obs.clusters.insert(
        HostedClusterKey::new("clusters", "c1"),
        plan::ObservedCluster {
            vmis,
            ..plan::ObservedCluster::default()
        },
    );
    obs
}

fn known(cfg: &oooi_dhcp_config::RawConfig) -> Vec<(String, Option<String>)> {
    cfg.known_clients
        .iter()
        .map(|k| (k.mac.to_string(), k.hostname.clone()))
        .collect()
}

#[test]
fn a_new_vmi_is_known_by_its_mac_and_name_before_it_has_an_address() {
    let i = infra("oooi", "vlan");
    let atts = [attachment("oooi", "c1", "vlan", "c1")];
    let p = plan_infra(
        &i,
        &atts,
        &with_vmis(vec![
            vmi("c1-w0", "02:00:00:00:00:01", &[]),
            vmi("c1-w1", "02:00:00:00:00:02", &["192.0.2.102"]),
        ]),
    );
    let cfg = dhcp_config(&p);
    assert_eq!(
        known(cfg),
        vec![("02:00:00:00:00:01".to_string(), Some("c1-w0".to_string()))]
    );
    // The one with an address is reserved instead, with its name too.
    assert_eq!(cfg.reservations.len(), 1);
    assert_eq!(cfg.reservations[0].hostname.as_deref(), Some("c1-w1"));
    // The DHCP server accepts it and names the known client.
    let checked = oooi_dhcp_config::Config::from_raw(cfg).unwrap();
    let mac = oooi_dhcp_config::Mac::parse("02:00:00:00:00:01").unwrap();
    assert_eq!(checked.hostname(&mac), Some("c1-w0"));
}

#[test]
fn a_mac_known_to_two_clusters_is_known_without_a_name() {
    let i = infra("oooi", "vlan");
    let atts = two_attachments();
    let mut obs = with_vmis(vec![vmi("c1-w0", "02:00:00:00:00:01", &[])]);
    obs.clusters.insert(
        HostedClusterKey::new("clusters", "c2"),
        plan::ObservedCluster {
            vmis: vec![vmi("c2-w0", "02:00:00:00:00:01", &[])],
            ..plan::ObservedCluster::default()
        },
    );
    let p = plan_infra(&i, &atts, &obs);
    let cfg = dhcp_config(&p);
    assert_eq!(known(cfg), vec![("02:00:00:00:00:01".to_string(), None)]);
}

#[test]
fn unknown_clients_default_to_the_pool_and_ignore_is_passed_on() {
    let i = infra("oooi", "vlan");
    assert_eq!(
        i.spec.infra_components.dhcp.unknown_clients,
        oooi_controller::crd::UnknownClients::Pool
    );
    let atts = [attachment("oooi", "c1", "vlan", "c1")];
    let p = plan_infra(&i, &atts, &Observed::default());
    assert_eq!(
        dhcp_config(&p).unknown_clients,
        oooi_dhcp_config::UnknownClients::Pool
    );
    let mut strict = i.clone();
    strict.spec.infra_components.dhcp.unknown_clients =
        oooi_controller::crd::UnknownClients::Ignore;
    let p = plan_infra(&strict, &atts, &Observed::default());
    assert_eq!(
        dhcp_config(&p).unknown_clients,
        oooi_dhcp_config::UnknownClients::Ignore
    );
    // The ConfigMap text the server reads says so.
    let text = dhcp_config(&p).to_yaml().unwrap();
    assert!(text.contains("unknown_clients: ignore"), "{text}");
}

#[test]
fn unknown_clients_is_written_pool_or_ignore_in_the_infra() {
    let with = |value: &str| {
        let mut v = serde_json::to_value(infra("oooi", "vlan")).unwrap();
        v["spec"]["infraComponents"]["dhcp"]["unknownClients"] = value.into();
        serde_json::from_value::<oooi_controller::crd::Infra>(v)
    };
    assert_eq!(
        with("Ignore")
            .unwrap()
            .spec
            .infra_components
            .dhcp
            .unknown_clients,
        oooi_controller::crd::UnknownClients::Ignore
    );
    assert!(with("ignore").is_err() && with("Drop").is_err());
}
