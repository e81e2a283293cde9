//! The DHCP server: its config from the Infra and attachments, and its children.

pub mod pair;
pub mod pools;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, KeyToPath, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeClaimVolumeSource, SecretVolumeSource, Service, ServicePort, ServiceSpec,
    Volume, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use oooi_dhcp_config::{
    Mac, RawConfig, RawKnownClient, RawPeer, RawRange, RawReservation, Role, Subnet,
};

use crate::crd::{
    DHCPServer, DHCPServerSpec, DhcpConfigDocument, Infra, LeaseStorage, LocalObjectReference,
    UnknownClients,
};
use crate::plan::infra::attachments::AttachmentOutcome;
use crate::plan::infra::network::Network;
use crate::plan::labels::{
    Component, SERVER_LABEL, child_meta, instance_of, inventory_token_secret_name, selector,
};
use crate::plan::network_policy::{DhcpPorts, PolicyPeers, WatchedPorts, dhcp_policy};
use crate::plan::workload::{
    Children, DEFAULT_INTERFACE, Objects, Placement, Program, deployment, http_probe, mount,
    pod_address, port, server_pod, service_account, spread,
};
use pair::{
    PAIR_TOKEN_DIR, PAIR_TOKEN_KEY, PEER_PORT, pair_budget, pair_partner, pair_token_secret_name,
    peer_service_name,
};

/// Where the config file is mounted.
pub const CONFIG_DIR: &str = "/etc/oooi-dhcp";
/// Config file name (ConfigMap key).
pub const CONFIG_FILE: &str = "config.yaml";
/// Lease store directory (the PVC).
pub const DATA_DIR: &str = "/var/lib/oooi-dhcp";
/// Metrics port of oooi-dhcp (`serve --metrics-addr`, on the pod address):
/// `/metrics` for Prometheus (and `/healthz`, for whoever knows only this
/// port).
pub const HTTP_PORT: i32 = 9067;
/// Health port (`serve --health-addr`, on the pod address): `/healthz`
/// alone, with a connection budget of its own, for the kubelet's probes;
/// whatever holds the metrics port's connections cannot make the pod
/// unready. Container port `health`.
pub const HEALTH_PORT: i32 = 9070;
/// Port of the lease inventory API (`--inventory-listen`, on the pod
/// address for the controller and on the pod's loopback for port-forward);
/// the NetworkPolicy admits the controller's pods alone.
pub const INVENTORY_PORT: u16 = oooi_dhcp_inventory::PORT;
/// Where the inventory token Secret is mounted.
pub const INVENTORY_TOKEN_DIR: &str = "/etc/oooi-dhcp-inventory";
/// Key of the inventory token in its Secret (and file name in the mount).
pub const INVENTORY_TOKEN_KEY: &str = "token";

/// The DHCP config for an Infra and its accepted attachments, as the first
/// server runs it (see [`configs`] for every server).
pub fn config(
    infra: &Infra,
    network: &Network,
    attachments: &[AttachmentOutcome],
) -> Option<RawConfig> {
    configs(infra, network, attachments)
        .into_iter()
        .next()
        .map(|(_, cfg)| cfg)
}

/// The DHCP configs for an Infra and its accepted attachments: one per
/// server address, each with the name of its DHCPServer. Reservations come
/// from the VMIs' MACs, and every server holds all of them; the DNS server
/// replicas (or, without DNS, the upstream resolvers) are handed out as option 6. With
/// two addresses the servers form a pair: each config names the other
/// server (its VLAN address and the pair API behind its peer Service) and
/// this server's role, the first address being the primary.
pub fn configs(
    infra: &Infra,
    network: &Network,
    attachments: &[AttachmentOutcome],
) -> Vec<(String, RawConfig)> {
    let Some((servers, pool)) = &network.dhcp else {
        return Vec::new();
    };
    let infra_name = infra.metadata.name.clone().unwrap_or_default();
    let namespace = infra.metadata.namespace.clone().unwrap_or_default();
    // DHCPv4 carries IPv4 addresses: this is where the VLAN's addresses
    // (every one a host of the VLAN, which `parse_network` let through only
    // when DHCPv4 can serve it) narrow to that family.
    let (Ok(subnet), IpAddr::V4(gateway), IpAddr::V4(start), IpAddr::V4(end)) = (
        Subnet::from_vlan(network.cidr),
        network.gateway,
        pool.start(),
        pool.end(),
    ) else {
        return Vec::new();
    };
    let servers: Vec<Ipv4Addr> = servers.iter().filter_map(|a| v4(*a)).collect();
    let mut excluded: Vec<Ipv4Addr> = Vec::new();
    excluded.extend(network.dns.iter().filter_map(|a| v4(*a)));
    excluded.extend(network.proxy.iter().filter_map(|a| v4(*a)));
    // Every DNS replica, in the Infra's order: a resolver that gets no
    // answer from one asks the next.
    let dns_servers = match network.dns.is_empty() {
        false => network.dns.iter().filter_map(|a| v4(*a)).collect(),
        true => network
            .upstreams
            .iter()
            .filter(|a| a.port() == 53)
            .filter_map(|a| v4(a.ip()))
            .collect(),
    };
    let mut reservations: Vec<RawReservation> = attachments
        .iter()
        .filter(|a| a.accepted())
        .flat_map(|a| a.reservations.iter())
        .filter_map(|r| {
            Some(RawReservation {
                mac: Mac::parse(&r.mac)?,
                ip: v4(r.ip)?,
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
    let base = RawConfig {
        interface: Some(DEFAULT_INTERFACE.to_string()),
        server_ip: servers.first().copied().unwrap_or(gateway),
        subnet,
        gateway: Some(gateway),
        range: RawRange { start, end },
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
        probe_timeout_ms: None,
        peer: None,
    };
    let names: Vec<String> = (0..servers.len())
        .map(|i| Component::Dhcp.replica_name(&infra_name, i))
        .collect();
    servers
        .iter()
        .enumerate()
        .map(|(i, ip)| {
            let mut cfg = base.clone();
            cfg.server_ip = *ip;
            if servers.len() == 2 {
                let other = 1 - i;
                cfg.peer = Some(RawPeer {
                    role: if i == 0 {
                        Role::Primary
                    } else {
                        Role::Secondary
                    },
                    server_ip: servers[other],
                    api: format!(
                        "{}.{namespace}.svc:{PEER_PORT}",
                        peer_service_name(&names[other])
                    ),
                    // The pod runs with `--pair-listen` on its own pod
                    // address; this is the file's fallback.
                    listen: SocketAddr::from((Ipv4Addr::UNSPECIFIED, PEER_PORT)),
                    token_file: PathBuf::from(PAIR_TOKEN_DIR).join(PAIR_TOKEN_KEY),
                    heartbeat_ms: None,
                    down_after_ms: None,
                });
            }
            (names[i].clone(), cfg)
        })
        .collect()
}

/// `a` when it is IPv4: what DHCPv4 can carry.
fn v4(a: IpAddr) -> Option<Ipv4Addr> {
    match a {
        IpAddr::V4(a) => Some(a),
        IpAddr::V6(_) => None,
    }
}

/// The DHCPServer specs derived from an Infra, with their names: one per
/// server address (none when DHCP is disabled).
pub fn specs(
    infra: &Infra,
    network: &Network,
    attachments: &[AttachmentOutcome],
) -> Vec<(String, DHCPServerSpec)> {
    let comp = &infra.spec.infra_components.dhcp;
    if !comp.enabled {
        return Vec::new();
    }
    let infra_name = infra.metadata.name.clone().unwrap_or_default();
    configs(infra, network, attachments)
        .into_iter()
        .map(|(name, cfg)| {
            let pair_token_secret = cfg.peer.as_ref().map(|_| LocalObjectReference {
                name: pair_token_secret_name(&infra_name),
            });
            let pod = server_pod(
                network,
                network.interface_address(IpAddr::V4(cfg.server_ip)),
                &comp.pod,
                crate::plan::workload::availability::server_availability(
                    infra,
                    Component::Dhcp,
                    &[],
                ),
            );
            let spec = DHCPServerSpec {
                pod,
                config: DhcpConfigDocument(cfg),
                storage: LeaseStorage {
                    size: comp
                        .storage_size
                        .clone()
                        .unwrap_or_else(|| LeaseStorage::default().size),
                    storage_class_name: comp.storage_class_name.clone(),
                },
                pair_token_secret,
                inventory_token_secret: Some(LocalObjectReference {
                    name: inventory_token_secret_name(&infra_name),
                }),
            };
            (name, spec)
        })
        .collect()
}

/// The objects of a DHCPServer: its [`children`] and the NetworkPolicy of
/// its pods ([`dhcp_policy`], none without the controller's namespace).
pub fn objects(server: &DHCPServer, peers: PolicyPeers<'_>) -> anyhow::Result<Objects> {
    Ok(Objects {
        children: children(server)?,
        network_policy: peers
            .controller_namespace
            .map(|ns| dhcp_policy(server, &policy_ports(server), ns, peers.scrapers)),
    })
}

/// The ports of a DHCPServer's pods on the pod network, for its
/// NetworkPolicy: metrics, health, the lease inventory and, on a server of
/// a pair, the pair API with the other server as its config reaches it.
pub fn policy_ports(server: &DHCPServer) -> DhcpPorts {
    let namespace = server.metadata.namespace.as_deref().unwrap_or_default();
    DhcpPorts {
        // No agent: DHCP never moves addresses. The health port is the
        // kubelet's alone: the probes' own listener.
        watched: WatchedPorts {
            metrics: vec![HTTP_PORT as u16],
            health: vec![HEALTH_PORT as u16],
        },
        pair: server
            .spec
            .config
            .0
            .peer
            .as_ref()
            .map(|p| (p.listen.port(), pair_partner(&p.api, namespace))),
        inventory: INVENTORY_PORT,
    }
}

/// The children of a DHCPServer: ServiceAccount, ConfigMap, PVC, Deployment.
/// Clients reach the DHCP server only on the VLAN. A server of a pair
/// (`config.peer` set) also gets the pair token mounted, its pair API on its
/// pod address behind a peer Service (the pod network, never the VLAN), a
/// place apart from the other server ([`spread`]) and, on the primary, the
/// pair's PodDisruptionBudget ([`pair_budget`]).
pub fn children(server: &DHCPServer) -> anyhow::Result<Children> {
    let name = server.metadata.name.clone().unwrap_or_default();
    let instance = instance_of(&server.metadata);
    let c = Component::Dhcp;
    let mut cfg = server.spec.config.0.clone();
    // The server binds the interface the pod's VLAN leg has.
    cfg.interface = Some(server.spec.pod.vlan.interface.clone());
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
    let mut volumes = vec![
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
    let mut args = vec![
        "serve".to_string(),
        "--config".to_string(),
        format!("{CONFIG_DIR}/{CONFIG_FILE}"),
        "--data-dir".to_string(),
        DATA_DIR.to_string(),
        "--metrics-addr".to_string(),
        pod_address(HTTP_PORT),
        "--health-addr".to_string(),
        pod_address(HEALTH_PORT),
    ];
    let mut ports = vec![
        port("dhcp", 67, "UDP"),
        port("http", HTTP_PORT, "TCP"),
        port("health", HEALTH_PORT, "TCP"),
    ];
    let mut mounts = vec![
        mount("config", CONFIG_DIR, true),
        mount("leases", DATA_DIR, false),
    ];
    let mut services = Vec::new();
    if let Some(secret) = &server.spec.inventory_token_secret {
        volumes.push(Volume {
            name: "inventory-token".to_string(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.name.clone()),
                items: Some(vec![KeyToPath {
                    key: INVENTORY_TOKEN_KEY.to_string(),
                    path: INVENTORY_TOKEN_KEY.to_string(),
                    ..KeyToPath::default()
                }]),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
        mounts.push(mount("inventory-token", INVENTORY_TOKEN_DIR, true));
        // The pod address for the controller's status poll (the
        // NetworkPolicy admits the controller's pods there); the pod's
        // loopback for `oooi-controller leases`, whose port-forward arrives
        // inside the pod's network namespace. Never the VLAN.
        args.extend([
            "--inventory-listen".to_string(),
            format!(
                "{},127.0.0.1:{INVENTORY_PORT}",
                pod_address(i32::from(INVENTORY_PORT))
            ),
            "--inventory-token-file".to_string(),
            format!("{INVENTORY_TOKEN_DIR}/{INVENTORY_TOKEN_KEY}"),
        ]);
        ports.push(port("inventory", i32::from(INVENTORY_PORT), "TCP"));
    }
    let mut placement = Placement::default();
    let mut pdb = None;
    if let Some(peer) = &cfg.peer {
        let secret = server.spec.pair_token_secret.as_ref().ok_or_else(|| {
            anyhow::anyhow!("spec.pairTokenSecret: required when config.peer is set")
        })?;
        let (Some(dir), Some(file)) = (
            peer.token_file.parent().and_then(|d| d.to_str()),
            peer.token_file.file_name().and_then(|f| f.to_str()),
        ) else {
            anyhow::bail!(
                "spec.config.peer.token_file: `{}` is not a file path",
                peer.token_file.display()
            );
        };
        let api_port = i32::from(peer.listen.port());
        volumes.push(Volume {
            name: "pair-token".to_string(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.name.clone()),
                items: Some(vec![KeyToPath {
                    key: PAIR_TOKEN_KEY.to_string(),
                    path: file.to_string(),
                    ..KeyToPath::default()
                }]),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
        mounts.push(mount("pair-token", dir, true));
        args.extend(["--pair-listen".to_string(), pod_address(api_port)]);
        ports.push(port("peer", api_port, "TCP"));
        let own = BTreeMap::from([(SERVER_LABEL.to_string(), name.clone())]);
        let mut own_selector = selector(&instance, c);
        own_selector.extend(own.clone());
        services.push(Service {
            metadata: child_meta(server, peer_service_name(&name), &instance, c),
            spec: Some(ServiceSpec {
                type_: Some("ClusterIP".to_string()),
                selector: Some(own_selector),
                ports: Some(vec![ServicePort {
                    name: Some("peer".to_string()),
                    port: api_port,
                    target_port: Some(IntOrString::Int(api_port)),
                    protocol: Some("TCP".to_string()),
                    ..ServicePort::default()
                }]),
                // Reachable from the start, before the readiness probe
                // passes: a server that starts pulls the other's leases at
                // once.
                publish_not_ready_addresses: Some(true),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        });
        placement = spread(&instance, c);
        placement.pod_labels = own.clone();
        match peer.role {
            Role::Primary => pdb = Some(pair_budget(server, &name, &instance)),
            // The primary keeps the selector of a single server, so one
            // server grows into a pair without replacing its Deployment (a
            // Deployment's selector cannot change); the secondary's
            // selector names it alone.
            Role::Secondary => placement.selector_labels = own,
        }
    }
    let deployment = deployment(
        server,
        &server.spec.pod,
        c,
        placement,
        Program {
            command: None,
            args,
            ports,
            volumes,
            mounts,
            readiness: http_probe("/healthz", HEALTH_PORT, 5, 3),
            liveness: http_probe("/healthz", HEALTH_PORT, 10, 6),
            builtin_resources: ["10m", "32Mi", "128Mi"],
            fs_group: Some(crate::plan::workload::NON_ROOT_UID),
            // DHCP never moves addresses: a pair has its own failover.
            agent_ready_url: None,
        },
    );
    Ok(Children {
        service_account: service_account(server, &name, &instance, c),
        config_map: Some(config_map),
        secret: None,
        services,
        pvc: Some(pvc),
        pdb,
        deployment,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::pair::PairPartner;
    use super::*;
    use crate::plan::fixtures::infra_with_dhcp;
    use crate::plan::{Observed, plan_infra};
    use serde_json::json;

    fn servers(dhcp: serde_json::Value) -> Vec<DHCPServer> {
        let p = plan_infra(&infra_with_dhcp(dhcp), &[], &Observed::default());
        assert!(p.errors.is_empty(), "{:?}", p.errors);
        let mut servers = p.desired.unwrap().dhcp;
        for s in &mut servers {
            s.metadata.uid = Some(format!("uid-{}", s.metadata.name.clone().unwrap()));
        }
        servers
    }

    fn errors(dhcp: serde_json::Value) -> Vec<String> {
        plan_infra(&infra_with_dhcp(dhcp), &[], &Observed::default())
            .errors
            .iter()
            .map(|e| e.to_string())
            .collect()
    }

    #[test]
    fn two_addresses_make_a_pair_whose_servers_name_each_other() {
        let pair = servers(json!({"serverIPs": ["192.0.2.2", "192.0.2.5"]}));
        let names: Vec<_> = pair
            .iter()
            .map(|s| s.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["vlan-dhcp", "vlan-dhcp-2"]);
        let (a, b) = (&pair[0].spec, &pair[1].spec);
        assert_eq!(a.pod.vlan.address, "192.0.2.2/24");
        assert_eq!(b.pod.vlan.address, "192.0.2.5/24");
        let pa = a.config.0.peer.as_ref().unwrap();
        let pb = b.config.0.peer.as_ref().unwrap();
        assert_eq!((pa.role, pb.role), (Role::Primary, Role::Secondary));
        assert_eq!(pa.server_ip, Ipv4Addr::new(192, 0, 2, 5));
        assert_eq!(pb.server_ip, Ipv4Addr::new(192, 0, 2, 2));
        // Each reaches the other's pair API through the other's peer
        // Service, on the pod network.
        assert_eq!(pa.api, "vlan-dhcp-2-peer.oooi.svc:9068");
        assert_eq!(pb.api, "vlan-dhcp-peer.oooi.svc:9068");
        assert_eq!(pa.token_file, PathBuf::from("/etc/oooi-dhcp-pair/token"));
        for s in [a, b] {
            assert_eq!(
                s.pair_token_secret.as_ref().unwrap().name,
                "vlan-dhcp-pair-token"
            );
        }
        // Apart from its own address and the pair section, both servers run
        // the same config: the same pool, reservations and options.
        let strip = |c: &RawConfig| RawConfig {
            server_ip: Ipv4Addr::UNSPECIFIED,
            peer: None,
            ..c.clone()
        };
        assert_eq!(strip(&a.config.0), strip(&b.config.0));
    }

    #[test]
    fn both_servers_of_a_pair_hold_every_reservation() {
        use crate::plan::fixtures::{attachment, cluster, cluster_key, machine, vmi};
        let mut observed = Observed::default();
        observed.clusters.insert(
            cluster_key("c1"),
            cluster(
                vec![machine("w0", &["192.0.2.50"])],
                vec![vmi("w0", Some("02:00:00:00:00:50"), &["192.0.2.50"])],
            ),
        );
        let mut i = infra_with_dhcp(json!({"serverIPs": ["192.0.2.2", "192.0.2.5"]}));
        i.metadata.name = Some("vlan200".into());
        let p = plan_infra(&i, &[attachment("c1", "c1", json!({}))], &observed);
        assert!(p.errors.is_empty(), "{:?}", p.errors);
        let d = p.desired.unwrap();
        assert_eq!(d.dhcp.len(), 2);
        for s in &d.dhcp {
            let r = &s.spec.config.0.reservations;
            assert_eq!(r.len(), 1, "{:?}", s.metadata.name);
            assert_eq!(r[0].ip, Ipv4Addr::new(192, 0, 2, 50));
        }
    }

    #[test]
    fn one_address_in_either_form_is_one_server_without_a_pair() {
        let one = servers(json!({"serverIP": "192.0.2.2"}));
        let listed = servers(json!({"serverIPs": ["192.0.2.2"]}));
        assert_eq!(one, listed);
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].metadata.name.as_deref(), Some("vlan-dhcp"));
        assert!(one[0].spec.config.0.peer.is_none());
        assert!(one[0].spec.pair_token_secret.is_none());
        let c = children(&one[0]).unwrap();
        assert!(c.pdb.is_none() && c.services.is_empty());
        let pod = c.deployment.spec.unwrap().template.spec.unwrap();
        assert!(pod.affinity.is_none() && pod.topology_spread_constraints.is_none());
    }

    #[test]
    fn server_addresses_are_one_form_at_most_two_and_distinct() {
        assert_eq!(
            errors(json!({"serverIP": "192.0.2.2", "serverIPs": ["192.0.2.5"]})),
            ["spec.infraComponents.dhcp.serverIPs: set serverIP or serverIPs, not both"]
        );
        assert_eq!(
            errors(json!({"serverIPs": ["192.0.2.2", "192.0.2.5", "192.0.2.6"]})),
            ["spec.infraComponents.dhcp.serverIPs: 3 addresses given, at most 2"]
        );
        assert_eq!(
            errors(json!({"serverIPs": ["192.0.2.2", "192.0.2.3"]})),
            [
                "spec.infraComponents.dns.serverIP: 192.0.2.3 is already used by spec.infraComponents.dhcp.serverIPs[1]"
            ]
        );
        let e = errors(json!({"serverIPs": ["192.0.2.2", "192.0.2.150"]}));
        assert!(
            e.iter().any(
                |m| m.contains("contains 192.0.2.150 (spec.infraComponents.dhcp.serverIPs[1])")
            ),
            "{e:?}"
        );
        assert_eq!(
            errors(json!({"serverIPs": []})).len(),
            1,
            "neither form given is refused"
        );
    }

    fn pod_labels(c: &Children) -> BTreeMap<String, String> {
        c.deployment
            .spec
            .as_ref()
            .unwrap()
            .template
            .metadata
            .as_ref()
            .unwrap()
            .labels
            .clone()
            .unwrap()
    }

    fn matches(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
        selector.iter().all(|(k, v)| labels.get(k) == Some(v))
    }

    #[test]
    fn pair_servers_get_the_token_a_peer_service_a_node_each_and_one_budget() {
        let pair = servers(json!({"serverIPs": ["192.0.2.2", "192.0.2.5"]}));
        let a = children(&pair[0]).unwrap();
        let b = children(&pair[1]).unwrap();
        for (c, name) in [(&a, "vlan-dhcp"), (&b, "vlan-dhcp-2")] {
            let dep = c.deployment.spec.as_ref().unwrap();
            let pod = dep.template.spec.as_ref().unwrap();
            let ctr = &pod.containers[0];
            // The pair API listens on the pod address only (never the VLAN).
            let args = ctr.args.clone().unwrap();
            let at = args.iter().position(|a| a == "--pair-listen").unwrap();
            assert_eq!(args[at + 1], "$(POD_IP):9068");
            // The token Secret, mounted where the config reads it.
            let vol = pod
                .volumes
                .as_ref()
                .unwrap()
                .iter()
                .find(|v| v.name == "pair-token")
                .unwrap();
            let secret = vol.secret.as_ref().unwrap();
            assert_eq!(secret.secret_name.as_deref(), Some("vlan-dhcp-pair-token"));
            assert_eq!(secret.items.as_ref().unwrap()[0].path, "token");
            let m = ctr
                .volume_mounts
                .as_ref()
                .unwrap()
                .iter()
                .find(|m| m.name == "pair-token")
                .unwrap();
            assert_eq!(m.mount_path, "/etc/oooi-dhcp-pair");
            assert_eq!(m.read_only, Some(true));
            // Its peer Service selects its own pod and no other.
            let svc = &c.services[0];
            assert_eq!(svc.metadata.name.as_deref(), Some(&*format!("{name}-peer")));
            let sel = svc.spec.as_ref().unwrap().selector.clone().unwrap();
            assert!(matches(&sel, &pod_labels(c)));
            let other = if name == "vlan-dhcp" { &b } else { &a };
            assert!(!matches(&sel, &pod_labels(other)));
            assert_eq!(
                svc.spec.as_ref().unwrap().ports.as_ref().unwrap()[0].port,
                9068
            );
            // Never two servers on one node; spread over zones.
            let anti = pod
                .affinity
                .as_ref()
                .unwrap()
                .pod_anti_affinity
                .as_ref()
                .unwrap()
                .required_during_scheduling_ignored_during_execution
                .clone()
                .unwrap();
            assert_eq!(anti[0].topology_key, "kubernetes.io/hostname");
            let both = anti[0]
                .label_selector
                .clone()
                .unwrap()
                .match_labels
                .unwrap();
            assert!(matches(&both, &pod_labels(&a)) && matches(&both, &pod_labels(&b)));
            let spread = pod.topology_spread_constraints.clone().unwrap();
            assert_eq!(spread[0].topology_key, "topology.kubernetes.io/zone");
            // Every object belongs to its DHCPServer (GC removes it with it).
            for v in c.to_values() {
                assert_eq!(
                    v["metadata"]["ownerReferences"][0]["name"], *name,
                    "{}",
                    v["kind"]
                );
            }
            // The ConfigMap holds exactly the config oooi-dhcp accepts
            // (with a token file where the Secret would be mounted).
            let text = &c.config_map.as_ref().unwrap().data.as_ref().unwrap()["config.yaml"];
            let mut raw = RawConfig::from_yaml(text).unwrap();
            let (_dir, token) = tempfile_token();
            raw.peer.as_mut().unwrap().token_file = token;
            oooi_dhcp_config::Config::from_raw(&raw).unwrap();
        }
        // The secondary's Deployment selects its own pod alone; the primary
        // keeps the one-server selector.
        let sel = |c: &Children| {
            c.deployment
                .spec
                .as_ref()
                .unwrap()
                .selector
                .match_labels
                .clone()
                .unwrap()
        };
        assert_eq!(sel(&a), selector("vlan", Component::Dhcp));
        assert!(!matches(&sel(&b), &pod_labels(&a)));
        // One budget over both pods, held by the primary: a drain takes one
        // server at a time.
        assert!(b.pdb.is_none());
        let pdb = a.pdb.as_ref().unwrap().spec.clone().unwrap();
        assert_eq!(pdb.max_unavailable, Some(IntOrString::Int(1)));
        let budget = pdb.selector.unwrap().match_labels.unwrap();
        assert!(matches(&budget, &pod_labels(&a)) && matches(&budget, &pod_labels(&b)));
    }

    /// A token file, removed with the returned directory.
    fn tempfile_token() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pair-token");
        std::fs::write(&p, "0123456789abcdef0123").unwrap();
        (dir, p)
    }

    #[test]
    fn the_pair_partner_is_the_server_behind_the_peer_service_the_config_names() {
        let server = |name: &str, ns: &str| PairPartner::Server {
            name: name.to_string(),
            namespace: ns.to_string(),
        };
        for (api, want) in [
            (
                "vlan-dhcp-2-peer.oooi.svc:9068",
                server("vlan-dhcp-2", "oooi"),
            ),
            (
                "vlan-dhcp-peer.oooi.svc.cluster.local:9068",
                server("vlan-dhcp", "oooi"),
            ),
            ("b-peer.other.svc:9068", server("b", "other")),
            ("b-peer.other:9068", server("b", "other")),
            ("b-peer:9068", server("b", "mine")),
            // An address, a Service the controller did not name, a name
            // outside the cluster's Service domain.
            ("10.128.3.7:9068", PairPartner::Unnamed),
            ("[fd00::7]:9068", PairPartner::Unnamed),
            ("dhcp-b.oooi.svc:9068", PairPartner::Unnamed),
            ("-peer.oooi.svc:9068", PairPartner::Unnamed),
            ("b-peer.oooi.example.com:9068", PairPartner::Unnamed),
        ] {
            assert_eq!(pair_partner(api, "mine"), want, "{api}");
        }
        // What the planner writes reads back as the other server.
        let pair = servers(json!({"serverIPs": ["192.0.2.2", "192.0.2.5"]}));
        let ports: Vec<_> = pair.iter().map(policy_ports).collect();
        assert_eq!(ports[0].pair, Some((9068, server("vlan-dhcp-2", "oooi"))));
        assert_eq!(ports[1].pair, Some((9068, server("vlan-dhcp", "oooi"))));
        for p in &ports {
            assert_eq!((p.watched.metrics.clone(), p.inventory), (vec![9067], 9069));
        }
        let one = servers(json!({"serverIP": "192.0.2.2"}));
        assert_eq!(policy_ports(&one[0]).pair, None);
    }

    #[test]
    fn a_pair_server_without_its_token_secret_is_refused() {
        let mut pair = servers(json!({"serverIPs": ["192.0.2.2", "192.0.2.5"]}));
        pair[1].spec.pair_token_secret = None;
        let e = children(&pair[1]).unwrap_err().to_string();
        assert!(e.contains("spec.pairTokenSecret"), "{e}");
    }
}
