//! The DNS server: its config from the Infra and attachments, and its children.
//!
//! Two views: `vlan` on the VLAN address, port 53 (control-plane names,
//! `*.apps`, and the `kubernetes` aliases while a worker address of the
//! cluster is known → the proxy), and `pod` on every address at port 5353,
//! reached through the ClusterIP Service (port 53) from the pod network (with
//! `internalProxyService` set, the control-plane names, and `*.apps` where
//! published to pods → the internal proxy; never the aliases).
//! The pod view cannot bind port 53 on all addresses beside the VLAN view's
//! port 53, so it uses 5353 behind the Service.
//!
//! With several DNS addresses each is one replica (its own DNSServer): the
//! configs differ only in the VLAN view's address, and the first replica
//! makes the pod view's Service, which selects every replica.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Service, ServicePort, ServiceSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use oooi_dns_config::{
    Addresses, HttpUrl, IpPort, ListenAddress, RawCluster, RawConfig, RawHealth, RawHealthCheck,
    RawUpstreams, RawView, ViewKind,
};

use crate::crd::{DNSServer, DNSServerSpec, DnsConfigDocument, Infra, ReplicaOf};
use crate::plan::infra::attachments::AttachmentOutcome;
use crate::plan::infra::network::Network;
use crate::plan::labels::{Component, child_meta, instance_of, selector};
use crate::plan::network_policy::{DnsPorts, PolicyPeers, dns_policy};
use crate::plan::workload::rolling::replica_placement;
use crate::plan::workload::{
    Children, Objects, Program, deployment, http_probe, mount, pod_address, port, server_pod,
    service_account, watched_ports,
};

/// Where the config file is mounted.
pub const CONFIG_DIR: &str = "/etc/oooi-dns";
/// Config file name (ConfigMap key).
pub const CONFIG_FILE: &str = "config.yaml";
/// Metrics port (`serve --metrics-addr`, on the pod address): `/metrics`
/// for Prometheus (and `/healthz`, for whoever knows only this port).
pub const HTTP_PORT: i32 = 9153;
/// Health port (`serve --health-addr`, on the pod address): `/healthz`
/// alone, with a connection budget of its own, for the kubelet's probes and
/// the address agent; whatever holds the metrics port's connections cannot
/// make the pod unready. Container port `health`.
pub const HEALTH_PORT: i32 = 9154;
/// Port of the pod view inside the pod (the Service maps 53 to it).
pub const POD_VIEW_PORT: u16 = 5353;
/// The VLAN view's port.
const VLAN_VIEW_PORT: u16 = 53;

/// The DNS config for an Infra and its accepted attachments.
/// `internal_proxy` is the proxy's address on the pod network, when the
/// Infra names one (`internalProxyService`) and it is known.
pub fn config(
    network: &Network,
    attachments: &[AttachmentOutcome],
    internal_proxy: Option<IpAddr>,
) -> Option<RawConfig> {
    let first = *network.dns.first()?;
    config_for(
        network,
        attachments,
        internal_proxy,
        &Listen {
            vlan: vec![first],
            proxy_checks: Vec::new(),
        },
    )
}

/// Where one DNS replica listens and how it checks the proxies.
#[derive(Debug, Clone, PartialEq)]
pub struct Listen {
    /// The VLAN addresses its VLAN view serves: its own, or every DNS
    /// address when addresses move between replicas (the agent adds a
    /// taken address while the server runs; oooi-dns binds them all in
    /// advance).
    pub vlan: Vec<IpAddr>,
    /// The health check of each proxy address.
    pub proxy_checks: Vec<RawHealthCheck>,
}

/// The health checks of the proxy addresses, over the pod network: each
/// proxy replica's `GET /ready` (200 while it holds the controller's
/// current table) through its own headless push Service, so a DNS replica
/// stops answering with a proxy that is gone or behind. `ready_port` is the
/// proxy's readiness listener, which nothing sent to the table API can
/// crowd out.
pub fn proxy_checks(
    infra_name: &str,
    namespace: &str,
    proxies: &[IpAddr],
    ready_port: u16,
) -> Vec<RawHealthCheck> {
    proxies
        .iter()
        .enumerate()
        .map(|(i, ip)| RawHealthCheck {
            address: *ip,
            tcp: None,
            http: Some(HttpUrl {
                host: format!(
                    "{}.{namespace}.svc",
                    crate::plan::proxy::push_service_name(
                        &Component::Proxy.replica_name(infra_name, i)
                    )
                ),
                port: Some(ready_port),
                path: "/ready".to_string(),
            }),
        })
        .collect()
}

/// How often and how strictly the proxies are checked: every second, out
/// at the first failure (a lookup then gets the live proxies first within
/// about 1.5 s of a loss), back after two passes.
fn health(checks: Vec<RawHealthCheck>) -> Option<RawHealth> {
    (!checks.is_empty()).then_some(RawHealth {
        interval_ms: Some(1000),
        timeout_ms: Some(500),
        fall: Some(1),
        rise: Some(2),
        checks,
    })
}

/// The DNS config of one replica (the replicas differ only in the
/// addresses their VLAN view listens on). The VLAN view answers the
/// control-plane names with every proxy replica, rotated per query.
pub fn config_for(
    network: &Network,
    attachments: &[AttachmentOutcome],
    internal_proxy: Option<IpAddr>,
    listen: &Listen,
) -> Option<RawConfig> {
    let proxies: Vec<IpAddr> = network.proxy.clone();
    let clusters = match proxies.is_empty() {
        false => attachments
            .iter()
            .filter(|a| a.accepted())
            .filter_map(|a| {
                let (name, base) = a.domain.split_once('.')?;
                Some(RawCluster {
                    name: name.to_string(),
                    base_domain: base.to_string(),
                    proxy: Addresses(proxies.clone()),
                    internal_proxy,
                    apps_vip: a.apps_vip,
                    // The pod view can only point at a proxy it knows.
                    apps_to_pods: a.apps_to_pods && internal_proxy.is_some(),
                    // As the proxy's alias routes: only from known workers.
                    aliases: !a.worker_addresses.is_empty(),
                    names: Some(
                        a.services
                            .iter()
                            .filter(|s| s.in_domain)
                            .map(|s| s.name.clone())
                            .collect(),
                    ),
                })
            })
            .collect(),
        // Without a proxy nothing answers on the control-plane names.
        true => Vec::new(),
    };
    Some(RawConfig {
        // The endpoint's address comes from `--metrics-addr` on the pod
        // address (see `children`), never from the shared ConfigMap.
        http: None,
        ttl: None,
        chaos: None,
        health: health(listen.proxy_checks.clone()),
        upstreams: RawUpstreams {
            servers: network
                .upstreams
                .iter()
                .copied()
                .map(IpPort::from)
                .collect(),
            resolv_conf: network.resolv_conf,
            ..RawUpstreams::default()
        },
        clusters,
        views: vec![
            RawView {
                name: "vlan".to_string(),
                kind: ViewKind::Vlan,
                listen: listen
                    .vlan
                    .iter()
                    .map(|ip| ListenAddress::Ip(IpPort::new(*ip, VLAN_VIEW_PORT)))
                    .collect(),
                // Several addresses: the ones this replica does not hold yet
                // (its agent adds a taken one while the server runs).
                freebind: listen.vlan.len() > 1,
                ..RawView::default()
            },
            RawView {
                name: "pod".to_string(),
                kind: ViewKind::Pod,
                // The pod's own address only: on 0.0.0.0 the pod view would
                // also answer on the VLAN address.
                listen: vec![ListenAddress::PodIp(Some(POD_VIEW_PORT))],
                ..RawView::default()
            },
        ],
    })
}

/// The DNSServer specs derived from an Infra, one per DNS address with
/// the name of its DNSServer (`<infra>-dns`, `<infra>-dns-2`, …); empty
/// when DNS is disabled.
pub fn specs(
    infra: &Infra,
    network: &Network,
    attachments: &[AttachmentOutcome],
    internal_proxy: Option<IpAddr>,
) -> Vec<(String, DNSServerSpec)> {
    let comp = &infra.spec.infra_components.dns;
    if !comp.enabled {
        return Vec::new();
    }
    let infra_name = infra.metadata.name.clone().unwrap_or_default();
    let count = network.dns.len() as u32;
    let addresses: Vec<_> = network
        .dns
        .iter()
        .map(|a| network.interface_address(*a))
        .collect();
    let availability =
        crate::plan::workload::availability::server_availability(infra, Component::Dns, &addresses);
    // With one proxy there is nothing to choose between.
    let checks = match network.proxy.len() {
        0 | 1 => Vec::new(),
        _ => proxy_checks(
            &infra_name,
            infra.metadata.namespace.as_deref().unwrap_or_default(),
            &network.proxy,
            crate::plan::proxy::READY_PORT,
        ),
    };
    network
        .dns
        .iter()
        .enumerate()
        .filter_map(|(i, dns_ip)| {
            let spec = DNSServerSpec {
                pod: server_pod(
                    network,
                    network.interface_address(*dns_ip),
                    &comp.pod,
                    availability.clone(),
                ),
                config: DnsConfigDocument(config_for(
                    network,
                    attachments,
                    internal_proxy,
                    &Listen {
                        vlan: match availability.address_takeover {
                            Some(_) => network.dns.clone(),
                            None => vec![*dns_ip],
                        },
                        proxy_checks: checks.clone(),
                    },
                )?),
                replica: (count > 1).then_some(ReplicaOf {
                    index: i as u32,
                    count,
                }),
            };
            Some((Component::Dns.replica_name(&infra_name, i), spec))
        })
        .collect()
}

/// The objects of a DNSServer: its [`children`] and the NetworkPolicy of
/// its pods ([`dns_policy`], none without the controller's namespace).
pub fn objects(server: &DNSServer, peers: PolicyPeers<'_>) -> anyhow::Result<Objects> {
    Ok(Objects {
        children: children(server)?,
        network_policy: peers
            .controller_namespace
            .map(|_| dns_policy(server, &policy_ports(server), peers.scrapers)),
    })
}

/// The ports of a DNSServer's pods on the pod network, for its
/// NetworkPolicy: every container port but the VLAN view's.
pub fn policy_ports(server: &DNSServer) -> DnsPorts {
    DnsPorts {
        view: POD_VIEW_PORT,
        // The health port is the kubelet's alone: the probes' own listener.
        watched: watched_ports(
            &server.spec.pod,
            vec![HTTP_PORT as u16],
            vec![HEALTH_PORT as u16],
        ),
    }
}

/// The children of a DNSServer: ServiceAccount, ConfigMap, the ClusterIP
/// Service for the pod view, Deployment.
pub fn children(server: &DNSServer) -> anyhow::Result<Children> {
    let name = server.metadata.name.clone().unwrap_or_default();
    let instance = instance_of(&server.metadata);
    let c = Component::Dns;
    let text = server.spec.config.0.to_yaml()?;
    let config_map = ConfigMap {
        metadata: child_meta(server, format!("{name}-config"), &instance, c),
        data: Some(BTreeMap::from([(CONFIG_FILE.to_string(), text)])),
        ..ConfigMap::default()
    };
    let svc_port = |n: &str, proto: &str| ServicePort {
        name: Some(n.to_string()),
        port: 53,
        protocol: Some(proto.to_string()),
        target_port: Some(IntOrString::Int(i32::from(POD_VIEW_PORT))),
        ..ServicePort::default()
    };
    // The pod view's Service selects every replica of the instance; with
    // several, the first makes it, for all of them.
    let first = server.spec.replica.is_none_or(|r| r.index == 0);
    let service = first.then(|| Service {
        metadata: child_meta(server, name.clone(), &instance, c),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_string()),
            selector: Some(selector(&instance, c)),
            ports: Some(vec![svc_port("dns-udp", "UDP"), svc_port("dns-tcp", "TCP")]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    });
    let (placement, pdb) = replica_placement(server, &name, &instance, c, server.spec.replica);
    let volumes = vec![Volume {
        name: "config".to_string(),
        config_map: Some(ConfigMapVolumeSource {
            name: format!("{name}-config"),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    }];
    let deployment = deployment(
        server,
        &server.spec.pod,
        c,
        placement,
        Program {
            command: None,
            args: vec![
                "serve".to_string(),
                "--config".to_string(),
                format!("{CONFIG_DIR}/{CONFIG_FILE}"),
                "--metrics-addr".to_string(),
                pod_address(HTTP_PORT),
                "--health-addr".to_string(),
                pod_address(HEALTH_PORT),
            ],
            ports: vec![
                port("dns-udp", i32::from(VLAN_VIEW_PORT), "UDP"),
                port("dns-tcp", i32::from(VLAN_VIEW_PORT), "TCP"),
                port("pod-dns-udp", i32::from(POD_VIEW_PORT), "UDP"),
                port("pod-dns-tcp", i32::from(POD_VIEW_PORT), "TCP"),
                port("http", HTTP_PORT, "TCP"),
                port("health", HEALTH_PORT, "TCP"),
            ],
            volumes,
            mounts: vec![mount("config", CONFIG_DIR, true)],
            readiness: http_probe("/healthz", HEALTH_PORT, 5, 3),
            liveness: http_probe("/healthz", HEALTH_PORT, 10, 6),
            builtin_resources: ["10m", "32Mi", "256Mi"],
            fs_group: None,
            // Every listener of the config is bound.
            agent_ready_url: Some(format!("http://{}/healthz", pod_address(HEALTH_PORT))),
        },
    );
    Ok(Children {
        service_account: service_account(server, &name, &instance, c),
        config_map: Some(config_map),
        secret: None,
        services: service.into_iter().collect(),
        pvc: None,
        pdb,
        deployment,
    })
}
