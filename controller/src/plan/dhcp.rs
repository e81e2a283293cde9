//! The DHCP server: its config from the Infra and attachments, and its children.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeClaimVolumeSource, Volume, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use oooi_dhcp_config::{Mac, RawConfig, RawKnownClient, RawRange, RawReservation};

use super::attachments::AttachmentOutcome;
use super::labels::{Component, child_meta, instance_of};
use super::network::Network;
use super::workload::{
    Children, PodPlan, deployment, http_probe, mount, pod_address, port, resources, service_account,
};
use crate::crd::{
    DHCPServer, DHCPServerSpec, DhcpConfigDocument, Infra, LeaseStorage, UnknownClients,
    VlanInterface,
};

/// Where the config file is mounted.
pub const CONFIG_DIR: &str = "/etc/oooi-dhcp";
/// Config file name (ConfigMap key).
pub const CONFIG_FILE: &str = "config.yaml";
/// Lease store directory (the PVC).
pub const DATA_DIR: &str = "/var/lib/oooi-dhcp";
/// Health and metrics port of oooi-dhcp (`serve --metrics-addr`, on the pod
/// address).
pub const HTTP_PORT: i32 = 9067;
/// Capabilities: port 67 and SO_BINDTODEVICE on the VLAN interface.
pub const CAPABILITIES: [&str; 2] = ["NET_BIND_SERVICE", "NET_RAW"];

/// The DHCP config for an Infra and its accepted attachments. Reservations
/// come from the VMIs' MACs; the DNS server (or, without one, the upstream
/// resolvers) is handed out as option 6.
pub fn config(
    infra: &Infra,
    network: &Network,
    attachments: &[AttachmentOutcome],
) -> Option<RawConfig> {
    let (server_ip, pool) = network.dhcp?;
    let mut excluded: Vec<Ipv4Addr> = Vec::new();
    excluded.extend(network.dns);
    excluded.extend(network.proxy);
    let dns_servers = match network.dns {
        Some(dns) => vec![dns],
        None => network
            .upstreams
            .iter()
            .filter(|a| a.port() == 53)
            .filter_map(|a| match a.ip() {
                IpAddr::V4(ip) => Some(ip),
                IpAddr::V6(_) => None,
            })
            .collect(),
    };
    let mut reservations: Vec<RawReservation> = attachments
        .iter()
        .filter(|a| a.accepted())
        .flat_map(|a| a.reservations.iter())
        .filter_map(|r| {
            Some(RawReservation {
                mac: Mac::parse(&r.mac)?,
                ip: r.ip,
                hostname: r.hostname.clone(),
            })
        })
        .collect();
    reservations.sort_by_key(|r| r.mac);
    // VMIs known by MAC only: a MAC listed twice (across clusters) gets no
    // host name from either, and a reserved MAC needs no entry.
    let mut known: BTreeMap<Mac, (usize, Option<String>)> = BTreeMap::new();
    for k in attachments
        .iter()
        .filter(|a| a.accepted())
        .flat_map(|a| a.known_clients.iter())
    {
        let Some(mac) = Mac::parse(&k.mac) else {
            continue;
        };
        let e = known.entry(mac).or_insert((0, k.hostname.clone()));
        e.0 += 1;
    }
    let known_clients: Vec<RawKnownClient> = known
        .into_iter()
        .filter(|(mac, _)| !reservations.iter().any(|r| r.mac == *mac))
        .map(|(mac, (n, hostname))| RawKnownClient {
            mac,
            hostname: hostname.filter(|_| n == 1),
        })
        .collect();
    let nc = &infra.spec.network_config;
    Some(RawConfig {
        interface: Some(default_interface()),
        server_ip,
        subnet: network.cidr,
        gateway: Some(network.gateway),
        range: RawRange {
            start: pool.start,
            end: pool.end,
        },
        excluded,
        dns_servers,
        domain: nc.domain.clone(),
        // Checked by parse_network.
        lease_seconds: infra.spec.infra_components.dhcp.lease_time.seconds().ok(),
        t1_seconds: None,
        t2_seconds: None,
        mtu: nc.mtu,
        classless_routes: Vec::new(),
        reservations,
        known_clients,
        unknown_clients: match infra.spec.infra_components.dhcp.unknown_clients {
            UnknownClients::Pool => oooi_dhcp_config::UnknownClients::Pool,
            UnknownClients::Ignore => oooi_dhcp_config::UnknownClients::Ignore,
        },
        decline_quarantine_seconds: None,
        peer: None,
    })
}

fn default_interface() -> String {
    "net1".to_string()
}

/// The DHCPServer spec derived from an Infra (None when DHCP is disabled).
pub fn spec(
    infra: &Infra,
    network: &Network,
    attachments: &[AttachmentOutcome],
) -> Option<DHCPServerSpec> {
    let comp = &infra.spec.infra_components.dhcp;
    if !comp.enabled {
        return None;
    }
    let cfg = config(infra, network, attachments)?;
    let (server_ip, _) = network.dhcp?;
    Some(DHCPServerSpec {
        vlan: VlanInterface {
            network_attachment_definition: network.nad.clone(),
            network_attachment_namespace: network.nad_namespace.clone(),
            address: network.with_prefix(server_ip),
            interface: default_interface(),
        },
        // Set: plan_infra reports an unset image instead of planning.
        image: comp.image.clone().unwrap_or_default(),
        config: DhcpConfigDocument(cfg),
        resources: comp.resources.clone(),
        storage: LeaseStorage {
            size: comp
                .storage_size
                .clone()
                .unwrap_or_else(|| LeaseStorage::default().size),
            storage_class_name: comp.storage_class_name.clone(),
        },
    })
}

/// The children of a DHCPServer: ServiceAccount, ConfigMap, PVC, Deployment.
/// The DHCP server is reached only on the VLAN, so it has no Service.
pub fn children(server: &DHCPServer) -> anyhow::Result<Children> {
    let name = server.metadata.name.clone().unwrap_or_default();
    let instance = instance_of(&server.metadata);
    let c = Component::Dhcp;
    let mut cfg = server.spec.config.0.clone();
    // The server binds the interface the pod's VLAN leg has.
    cfg.interface = Some(server.spec.vlan.interface.clone());
    let text = serde_saphyr::to_string(&cfg)?;
    let config_map = ConfigMap {
        metadata: child_meta(server, format!("{name}-config"), &instance, c),
        data: Some(BTreeMap::from([(CONFIG_FILE.to_string(), text)])),
        ..ConfigMap::default()
    };
    let pvc_name = format!("{name}-leases");
    let pvc = PersistentVolumeClaim {
        metadata: child_meta(server, pvc_name.clone(), &instance, c),
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_string()]),
            storage_class_name: server.spec.storage.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_string(),
                    Quantity(server.spec.storage.size.clone()),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    };
    let volumes = vec![
        Volume {
            name: "config".to_string(),
            config_map: Some(ConfigMapVolumeSource {
                name: format!("{name}-config"),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        },
        Volume {
            name: "leases".to_string(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: pvc_name,
                read_only: Some(false),
            }),
            ..Volume::default()
        },
    ];
    let deployment = deployment(
        server,
        PodPlan {
            name: name.clone(),
            instance: instance.clone(),
            component: c,
            vlan: server.spec.vlan.clone(),
            image: server.spec.image.clone(),
            command: None,
            args: vec![
                "serve".to_string(),
                "--config".to_string(),
                format!("{CONFIG_DIR}/{CONFIG_FILE}"),
                "--data-dir".to_string(),
                DATA_DIR.to_string(),
                "--metrics-addr".to_string(),
                pod_address(HTTP_PORT),
            ],
            ports: vec![port("dhcp", 67, "UDP"), port("http", HTTP_PORT, "TCP")],
            volumes,
            mounts: vec![
                mount("config", CONFIG_DIR, true),
                mount("leases", DATA_DIR, false),
            ],
            caps: CAPABILITIES.to_vec(),
            readiness: http_probe("/healthz", HTTP_PORT, 5, 3),
            liveness: http_probe("/healthz", HTTP_PORT, 10, 6),
            resources: resources(server.spec.resources.as_ref(), "10m", "32Mi", "128Mi"),
            fs_group: Some(super::workload::NON_ROOT_UID),
        },
    );
    Ok(Children {
        service_account: service_account(server, &name, &instance, c),
        config_map: Some(config_map),
        secret: None,
        services: Vec::new(),
        pvc: Some(pvc),
        deployment,
    })
}
