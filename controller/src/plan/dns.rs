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
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Service, ServicePort, ServiceSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use oooi_dns_config::{RawCluster, RawConfig, RawUpstreams, RawView, ViewKind};

use super::attachments::AttachmentOutcome;
use super::labels::{Component, child_meta, instance_of, selector};
use super::network::Network;
use super::rolling::replica_placement;
use super::workload::{
    Children, PodPlan, deployment, http_probe, mount, pod_address, port, resources, service_account,
};
use crate::crd::{DNSServer, DNSServerSpec, DnsConfigDocument, Infra, ReplicaOf, VlanInterface};

/// Where the config file is mounted.
pub const CONFIG_DIR: &str = "/etc/oooi-dns";
/// Config file name (ConfigMap key).
pub const CONFIG_FILE: &str = "config.yaml";
/// Health and metrics port (`serve --metrics-addr`, on the pod address).
pub const HTTP_PORT: i32 = 9153;
/// Port of the pod view inside the pod (the Service maps 53 to it).
pub const POD_VIEW_PORT: i32 = 5353;

/// The DNS config for an Infra and its accepted attachments.
/// `internal_proxy` is the proxy's address on the pod network, when the
/// Infra names one (`internalProxyService`) and it is known.
pub fn config(
    network: &Network,
    attachments: &[AttachmentOutcome],
    internal_proxy: Option<Ipv4Addr>,
) -> Option<RawConfig> {
    config_for(network, attachments, internal_proxy, *network.dns.first()?)
}

/// The DNS config of the replica on `dns_ip` (the replicas differ only in
/// the address their VLAN view listens on). The VLAN view answers the
/// control-plane names with every proxy replica, in the Infra's order.
pub fn config_for(
    network: &Network,
    attachments: &[AttachmentOutcome],
    internal_proxy: Option<Ipv4Addr>,
    dns_ip: Ipv4Addr,
) -> Option<RawConfig> {
    let proxies: Vec<String> = network.proxy.iter().map(|a| a.to_string()).collect();
    let clusters = match proxies.is_empty() {
        false => attachments
            .iter()
            .filter(|a| a.accepted())
            .filter_map(|a| {
                let (name, base) = a.domain.split_once('.')?;
                Some(RawCluster {
                    name: name.to_string(),
                    base_domain: base.to_string(),
                    proxy: proxies.clone().into(),
                    internal_proxy: internal_proxy.map(|a| a.to_string()),
                    apps_vip: a.apps_vip.map(|v| v.to_string()),
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
        health: None,
        upstreams: RawUpstreams {
            servers: network.upstreams.iter().map(|a| a.to_string()).collect(),
            resolv_conf: network.resolv_conf,
            ..RawUpstreams::default()
        },
        clusters,
        views: vec![
            RawView {
                name: "vlan".to_string(),
                kind: ViewKind::Vlan,
                listen: vec![format!("{dns_ip}:53")],
                ..RawView::default()
            },
            RawView {
                name: "pod".to_string(),
                kind: ViewKind::Pod,
                // The pod's own address only: on 0.0.0.0 the pod view would
                // also answer on the VLAN address.
                listen: vec![format!("{}:{POD_VIEW_PORT}", oooi_dns_config::POD_IP)],
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
    internal_proxy: Option<Ipv4Addr>,
) -> Vec<(String, DNSServerSpec)> {
    let comp = &infra.spec.infra_components.dns;
    if !comp.enabled {
        return Vec::new();
    }
    let infra_name = infra.metadata.name.clone().unwrap_or_default();
    let count = network.dns.len() as u32;
    network
        .dns
        .iter()
        .enumerate()
        .filter_map(|(i, dns_ip)| {
            let spec = DNSServerSpec {
                vlan: VlanInterface {
                    network_attachment_definition: network.nad.clone(),
                    network_attachment_namespace: network.nad_namespace.clone(),
                    address: network.with_prefix(*dns_ip),
                    interface: "net1".to_string(),
                },
                // Set: plan_infra reports an unset image instead of planning.
                image: comp.image.clone().unwrap_or_default(),
                config: DnsConfigDocument(config_for(
                    network,
                    attachments,
                    internal_proxy,
                    *dns_ip,
                )?),
                resources: comp.resources.clone(),
                replica: (count > 1).then_some(ReplicaOf {
                    index: i as u32,
                    count,
                }),
                availability: super::availability::server_availability(infra),
            };
            Some((Component::Dns.replica_name(&infra_name, i), spec))
        })
        .collect()
}

/// The DNSServer spec of the first DNS address (None when DNS is disabled).
pub fn spec(
    infra: &Infra,
    network: &Network,
    attachments: &[AttachmentOutcome],
    internal_proxy: Option<Ipv4Addr>,
) -> Option<DNSServerSpec> {
    specs(infra, network, attachments, internal_proxy)
        .into_iter()
        .next()
        .map(|(_, s)| s)
}

/// The children of a DNSServer: ServiceAccount, ConfigMap, the ClusterIP
/// Service for the pod view, Deployment.
pub fn children(server: &DNSServer) -> anyhow::Result<Children> {
    let name = server.metadata.name.clone().unwrap_or_default();
    let instance = instance_of(&server.metadata);
    let c = Component::Dns;
    let text = serde_saphyr::to_string(&server.spec.config.0)?;
    let config_map = ConfigMap {
        metadata: child_meta(server, format!("{name}-config"), &instance, c),
        data: Some(BTreeMap::from([(CONFIG_FILE.to_string(), text)])),
        ..ConfigMap::default()
    };
    let svc_port = |n: &str, proto: &str| ServicePort {
        name: Some(n.to_string()),
        port: 53,
        protocol: Some(proto.to_string()),
        target_port: Some(IntOrString::Int(POD_VIEW_PORT)),
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
                "--metrics-addr".to_string(),
                pod_address(HTTP_PORT),
            ],
            ports: vec![
                port("dns-udp", 53, "UDP"),
                port("dns-tcp", 53, "TCP"),
                port("pod-dns-udp", POD_VIEW_PORT, "UDP"),
                port("pod-dns-tcp", POD_VIEW_PORT, "TCP"),
                port("http", HTTP_PORT, "TCP"),
            ],
            volumes,
            mounts: vec![mount("config", CONFIG_DIR, true)],
            readiness: http_probe("/healthz", HTTP_PORT, 5, 3),
            liveness: http_probe("/healthz", HTTP_PORT, 10, 6),
            resources: resources(server.spec.resources.as_ref(), "10m", "32Mi", "256Mi"),
            fs_group: None,
            placement,
            tolerations: super::availability::tolerations(
                server.spec.availability.node_loss_toleration_seconds,
            ),
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
