//! The proxy: the routing table from the attachments, the ProxyServer spec,
//! and its children (Envoy config rendered by `oooi-envoy`).
//!
//! Routes per accepted attachment, in attachment order:
//! - one exact SNI route per exposed service, to
//!   `<service>.<control-plane namespace>.svc.cluster.local:<port>` through
//!   Envoy's dynamic forward proxy (an `address` upstream);
//! - `*.apps.<domain>` on 443 (by SNI) and on 80 (by HTTP Host) to the same
//!   port on the apps VIP, once one is observed;
//! - per worker address (a /32 not claimed by another attachment), the two
//!   paths of the `kubernetes[.default…]` aliases to the cluster's
//!   kube-apiserver: a `source` route on 6443 (connections without SNI, and
//!   the aliases by SNI) and an `alias_source` route on 443 (the aliases by
//!   SNI only). With no worker address known, neither exists: a worker's
//!   alias and no-SNI connections are refused until its first Machine
//!   address is observed.
//!
//! With `isolation: Strict`, the SNI routes above (every exposed service but
//! ignition, and `*.apps`) carry allowed sources ([`strict_sources`]): the
//! cluster's own worker addresses plus every network outside the Infra CIDR.
//! So on the VLAN only that cluster's workers may use its names, while
//! clients that are not on the VLAN (the management cluster's pods through
//! the internal Service and the DNS pod view, a published OAuth
//! LoadBalancer) keep working: none of them is a worker of another cluster,
//! and a VLAN host cannot complete a handshake from an address off the VLAN
//! (the proxy answers such addresses through its pod interface).
//! Before any worker address of the cluster is known, the list holds only
//! the off-VLAN networks: every VLAN host is refused (fail closed), and the
//! attachment reports `StrictIsolationPending`. Ignition stays open to every
//! source: a new worker fetches it from its first boot stage, before any
//! address of it is observed (and HyperShift's ignition server checks the
//! NodePool token on every request); without that, no worker could ever join.

pub mod filter;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

use ipnet::IpNet;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    ConfigMapProjection, EmptyDirVolumeSource, ProjectedVolumeSource, Secret, SecretProjection,
    Service, ServicePort, ServiceSpec, Volume, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use oooi_routes::{Cidr, Route, RouteMatch, RouteTable, Upstream};
use oooi_vocabulary::{addr_bits, mask_bits};

use crate::crd::{
    FilterSource, Infra, Isolation, LocalObjectReference, ProxyServer, ProxyServerSpec, ReplicaOf,
    RoutesDocument,
};
use crate::plan::infra::attachments::{AttachmentOutcome, ResolvedService};
use crate::plan::infra::network::Network;
use crate::plan::labels::{Component, child_meta, instance_of, push_token_secret_name, selector};
use crate::plan::network_policy::{PolicyPeers, push_api_policy};
use crate::plan::proxy::filter::FilterPlan;
use crate::plan::workload::rolling::{replica_placement, server_selector};
use crate::plan::workload::{
    Children, Objects, Program, deployment, http_probe, mount, port, server_pod, service_account,
    tcp_probe, watched_ports,
};

/// Listener port of the source-scoped routes (aliases and no SNI).
pub const ALIAS_PORT: u16 = 6443;
/// Listener port of the aliases by SNI and source (the in-cluster
/// `https://kubernetes.default.svc`).
pub const ALIAS_SNI_PORT: u16 = 443;
/// Listener ports every proxy has, routes or not.
pub const BASE_TLS_PORTS: [u16; 2] = [443, 6443];
/// Prometheus endpoint of Envoy (`GET /metrics`, the admin's
/// `/stats/prometheus`), on all addresses but refused from and to the VLAN
/// leg like the table API; the container port is named `http`, as on the
/// DNS and DHCP pods, for the chart's PodMonitor.
pub const METRICS_PORT: u16 = 9102;
/// Port of the table API (`/v1/routes`, `/ready`) on the pod network.
pub const PUSH_PORT: u16 = 9445;
/// Port of the readiness listener (`GET /ready` alone) on the pod network:
/// the kubelet's probe, the gate, the address agent and the DNS replicas'
/// checks ask here, on a connection budget of its own that nothing sent to
/// the push port can use up.
pub const READY_PORT: u16 = 9446;
/// Where Envoy's bootstrap, LDS and CDS files are mounted.
pub const CONFIG_DIR: &str = "/etc/oooi-envoy";
/// Where `oooi-envoy-gate` writes the listeners Envoy reads (an in-memory
/// emptyDir): the table API and metrics listeners at start, every listener
/// of [`CONFIG_DIR`]'s LDS file once the replica holds its routing table.
pub const LISTENERS_DIR: &str = "/run/oooi-envoy";
/// The proxy container's entrypoint: the gate, which runs Envoy as its child
/// (both in the proxy image, on its `PATH`).
pub const GATE_COMMAND: &str = "oooi-envoy-gate";
/// Where the filter ConfigMap is mounted.
pub const FILTER_DIR: &str = "/etc/oooi-filter";
/// Shortest accepted push token (the filter's own minimum).
pub const MIN_TOKEN_LEN: usize = 16;
/// Module digest rendered while the module is not known yet (offline render
/// without `--filter-wasm`): Envoy then loads whatever the file holds.
pub const UNKNOWN_MODULE_SHA256: &str =
    "0000000000000000000000000000000000000000000000000000000000000000";

/// The upstream of a Service in a control-plane namespace.
pub fn service_upstream(service: &str, namespace: &str, port: u16) -> Upstream {
    Upstream::Address {
        host: format!("{service}.{namespace}.svc.cluster.local"),
        port,
    }
}

/// Where alias and no-SNI connections of a cluster go: the target of its
/// `api` service when it has one, else `kube-apiserver:6443`.
fn apiserver_upstream(a: &AttachmentOutcome) -> Upstream {
    match a.services.iter().find(|s| s.name == "api") {
        Some(s) => Upstream::Address {
            host: s.upstream_host.clone(),
            port: s.upstream_port,
        },
        None => service_upstream("kube-apiserver", &a.control_plane_namespace, 6443),
    }
}

/// Target Services of HyperShift's ignition endpoint: routes to them stay
/// open under `Strict` (see the module doc).
pub const IGNITION_SERVICES: [&str; 2] = ["ignition-server-proxy", "ignition-server"];

/// True for a service new workers need before their address is known.
fn is_ignition(s: &ResolvedService) -> bool {
    s.name == "ignition"
        || IGNITION_SERVICES
            .iter()
            .any(|t| s.upstream_host.starts_with(&format!("{t}.")))
}

/// Every network of `cidr`'s family outside it, as the shortest list of
/// CIDRs (one per prefix bit: a /24 gives 24 networks). Empty for a /0.
pub fn outside(cidr: IpNet) -> Vec<Cidr> {
    let v4 = matches!(cidr, IpNet::V4(_));
    let width: u32 = if v4 { 32 } else { 128 };
    let base = addr_bits(cidr.network());
    (0..cidr.prefix_len())
        .filter_map(|i| {
            let len = i + 1;
            // The network of `len` bits that agrees with the VLAN on its
            // first `i` bits and differs on bit `i`.
            let net = mask_bits(base ^ (1u128 << (width - 1 - u32::from(i))), v4, len);
            let addr = match u32::try_from(net) {
                Ok(n) if v4 => IpAddr::V4(Ipv4Addr::from(n)),
                _ => IpAddr::V6(Ipv6Addr::from(net)),
            };
            Cidr::new(addr, len).ok()
        })
        .collect()
}

/// The allowed sources of a `Strict` cluster's SNI routes: its worker
/// addresses (/32, shared ones left out), then every network outside the
/// VLAN. Never empty unless the VLAN is 0.0.0.0/0 and no worker is known.
pub fn strict_sources(network: &Network, a: &AttachmentOutcome) -> Vec<Cidr> {
    a.worker_addresses
        .iter()
        .map(|w| Cidr::host(*w))
        .chain(outside(network.cidr.net()))
        .collect()
}

/// The match of one of the cluster's names: open, or restricted to
/// `sources` when the cluster is `Strict`. None (no route, so the name is
/// refused) for a restriction that allows nobody.
fn name_match(sni: String, sources: Option<&Vec<Cidr>>) -> Option<RouteMatch> {
    match sources {
        None => Some(RouteMatch::Sni(sni)),
        Some(list) if list.is_empty() => None,
        Some(list) => Some(RouteMatch::SniFrom {
            sni,
            sources: list.clone(),
        }),
    }
}

/// The routes of every accepted attachment, in a deterministic order.
pub fn routes(network: &Network, attachments: &[AttachmentOutcome]) -> Vec<Route> {
    let mut out = Vec::new();
    for a in attachments.iter().filter(|a| a.accepted()) {
        let owner = Some(a.owner());
        let strict = (a.isolation == Isolation::Strict).then(|| strict_sources(network, a));
        for s in &a.services {
            let sources = strict.as_ref().filter(|_| !is_ignition(s));
            let Some(matches) = name_match(s.sni.clone(), sources) else {
                continue;
            };
            out.push(Route {
                port: s.port,
                matches,
                upstream: Upstream::Address {
                    host: s.upstream_host.clone(),
                    port: s.upstream_port,
                },
                owner: owner.clone(),
            });
        }
        if let Some(vip) = a.apps_vip
            && let Some(matches) = name_match(format!("*.apps.{}", a.domain), strict.as_ref())
        {
            // 443 by SNI, 80 by HTTP Host (the filter's http role), both to
            // the same port on the VIP.
            for port in [443, oooi_envoy::HTTP_HOST_PORT] {
                out.push(Route {
                    port,
                    matches: matches.clone(),
                    upstream: Upstream::Address {
                        host: vip.to_string(),
                        port,
                    },
                    owner: owner.clone(),
                });
            }
        }
        let api = apiserver_upstream(a);
        for w in &a.worker_addresses {
            let cidr = Cidr::host(*w);
            out.push(Route {
                port: ALIAS_PORT,
                matches: RouteMatch::Source(cidr),
                upstream: api.clone(),
                owner: owner.clone(),
            });
            out.push(Route {
                port: ALIAS_SNI_PORT,
                matches: RouteMatch::AliasSource(cidr),
                upstream: api.clone(),
                owner: owner.clone(),
            });
        }
    }
    out
}

/// The listener ports: [`BASE_TLS_PORTS`] plus every port a route names, sorted.
pub fn tls_ports(routes: &[Route]) -> Vec<u16> {
    let set: BTreeSet<u16> = BASE_TLS_PORTS
        .iter()
        .copied()
        .chain(routes.iter().map(|r| r.port))
        .collect();
    set.into_iter().collect()
}

/// A routing table of the spec's routes with the pusher's generation.
pub fn table(spec: &ProxyServerSpec, generation: u64) -> RouteTable {
    RouteTable {
        generation,
        routes: spec.routes.0.clone(),
    }
}

/// The table to push to `proxy`'s replicas: its spec's routes under the
/// generation last pushed (from its status) when they are the same routes,
/// else under the next generation (1 on a fresh proxy, and after
/// [`oooi_routes::MAX_GENERATION`]: generations wrap).
pub fn next_table(proxy: &ProxyServer) -> RouteTable {
    let st = proxy.status.clone().unwrap_or_default();
    let last = st.routes_generation.unwrap_or(0).max(0) as u64;
    if last > 0 {
        let same = table(&proxy.spec, last);
        if st.routes_digest.as_deref() == Some(same.digest().as_str()) {
            return same;
        }
    }
    table(&proxy.spec, oooi_routes::next_generation(last))
}

/// The tables a new filter module is checked against before any Envoy may
/// load it: the next table of every proxy, the valid ones, each once.
pub fn check_tables<'a>(proxies: impl IntoIterator<Item = &'a ProxyServer>) -> Vec<RouteTable> {
    let mut seen = BTreeSet::new();
    proxies
        .into_iter()
        .map(next_table)
        .filter(|t| t.validate().is_ok() && seen.insert(t.digest()))
        .collect()
}

/// The ProxyServer specs derived from an Infra, one per proxy address with
/// the name of its ProxyServer (`<infra>-proxy`, `<infra>-proxy-2`, …), all
/// with the same routing table; empty when the proxy is disabled.
pub fn specs(
    infra: &Infra,
    network: &Network,
    attachments: &[AttachmentOutcome],
    filter_sha256: Option<&str>,
) -> Vec<(String, ProxyServerSpec)> {
    let comp = &infra.spec.infra_components.proxy;
    if !comp.enabled {
        return Vec::new();
    }
    let infra_name = infra.metadata.name.clone().unwrap_or_default();
    let routes = routes(network, attachments);
    let count = network.proxy.len() as u32;
    // oooi makes its own internal Service unless another one is named.
    let internal_service = comp
        .internal_proxy_service
        .as_deref()
        .is_none_or(|named| names_own_service(infra, named));
    let addresses: Vec<_> = network
        .proxy
        .iter()
        .map(|a| network.interface_address(*a))
        .collect();
    let availability = crate::plan::workload::availability::server_availability(
        infra,
        Component::Proxy,
        &addresses,
    );
    network
        .proxy
        .iter()
        .enumerate()
        .map(|(i, proxy_ip)| {
            let spec = ProxyServerSpec {
                pod: server_pod(
                    network,
                    network.interface_address(*proxy_ip),
                    &comp.pod,
                    availability.clone(),
                ),
                tls_ports: tls_ports(&routes),
                routes: RoutesDocument(routes.clone()),
                push_port: PUSH_PORT,
                admin_port: 9901,
                push_token_secret: LocalObjectReference {
                    name: push_token_secret_name(&infra_name),
                },
                filter: FilterSource {
                    sha256: filter_sha256.map(str::to_string),
                    ..FilterSource::default()
                },
                connect_timeout_ms: 5000,
                // One Service for every replica, made by the first.
                internal_service: internal_service && i == 0,
                replica: (count > 1).then_some(ReplicaOf {
                    index: i as u32,
                    count,
                }),
            };
            (Component::Proxy.replica_name(&infra_name, i), spec)
        })
        .collect()
}

/// Whether `internalProxyService` names the proxy's own Service
/// (`<infra>-proxy`, in the Infra's namespace, as `name`,
/// `name.namespace`, `name.namespace.svc` or `….svc.cluster.local`), which
/// oooi makes, rather than an operator's Service or an address.
pub fn names_own_service(infra: &Infra, named: &str) -> bool {
    let own = Component::Proxy.derived_name(&infra.metadata.name.clone().unwrap_or_default());
    let infra_ns = infra.metadata.namespace.as_deref().unwrap_or_default();
    let named = named.trim().trim_end_matches('.');
    let named = named.strip_suffix(".cluster.local").unwrap_or(named);
    let named = named.strip_suffix(".svc").unwrap_or(named);
    let mut parts = named.split('.');
    let (Some(name), ns, None) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    name == own && ns.unwrap_or(infra_ns) == infra_ns
}

/// The address the DNS pod view gives for the internal proxy: an IP literal
/// in `internalProxyService`, else the observed ClusterIP of the Service it
/// names. Unset: none, and the pod view answers no control-plane name.
pub fn internal_proxy_ip(infra: &Infra, observed: Option<IpAddr>) -> Option<IpAddr> {
    let comp = &infra.spec.infra_components.proxy;
    if !comp.enabled {
        return None;
    }
    let named = comp.internal_proxy_service.as_deref()?.trim();
    named.parse::<IpAddr>().ok().or(observed)
}

/// Envoy's configuration for a ProxyServer (what `oooi-envoy` renders).
pub fn envoy_config(spec: &ProxyServerSpec, push_token: &str) -> oooi_envoy::ProxyConfig {
    let any = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    let ports = if spec.tls_ports.is_empty() {
        tls_ports(&spec.routes.0)
    } else {
        spec.tls_ports.clone()
    };
    oooi_envoy::ProxyConfig {
        admin: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), spec.admin_port),
        // All addresses: the VLAN leg for workers and the pod IP for the
        // internal Service and the push API.
        listen_address: any,
        tls_ports: ports,
        api: SocketAddr::new(any, spec.push_port),
        ready: Some(SocketAddr::new(any, READY_PORT)),
        // The table API listens on all addresses (the controller reaches
        // the pod IP) but refuses everything from or to the VLAN leg.
        vlan: Some(oooi_envoy::VlanLeg {
            address: spec.pod.vlan.address.addr(),
            prefix_len: spec.pod.vlan.address.prefix_len(),
        }),
        push_token: push_token.to_string(),
        // Through `..data` of the config mount, which projects the derived
        // filter ConfigMap beside the ECDS files: the module and the files
        // naming it appear in one atomic swap.
        wasm_path: PathBuf::from(CONFIG_DIR)
            .join("..data")
            .join(&spec.filter.key),
        wasm_sha256: spec
            .filter
            .sha256
            .clone()
            .unwrap_or_else(|| UNKNOWN_MODULE_SHA256.to_string()),
        clusters: Vec::new(),
        connect_timeout_ms: u64::from(spec.connect_timeout_ms),
        native_sni: Vec::new(),
        metrics: Some(SocketAddr::new(any, METRICS_PORT)),
        listeners_dir: Some(PathBuf::from(LISTENERS_DIR)),
    }
}

/// The headless Service of one proxy server's table API (the controller's
/// pushes, the DNS replicas' checks of `/ready`).
pub fn push_service_name(server: &str) -> String {
    format!("{server}-push")
}

/// Checks what a ProxyServer spec carries: the routing table (with the
/// routes crate's own validator) and the listener ports.
pub fn validate(spec: &ProxyServerSpec) -> Result<(), String> {
    if !spec.routes.0.is_empty() {
        table(spec, 1).validate().map_err(|e| format!("spec.{e}"))?;
    }
    if [spec.push_port, spec.admin_port, METRICS_PORT, READY_PORT]
        .iter()
        .any(|p| spec.tls_ports.contains(p))
    {
        return Err(format!(
            "spec.tlsPorts: {:?} collides with pushPort {}, adminPort {}, the metrics port {METRICS_PORT} or the readiness port {READY_PORT}",
            spec.tls_ports, spec.push_port, spec.admin_port
        ));
    }
    for fixed in [METRICS_PORT, READY_PORT] {
        if spec.push_port == fixed || spec.admin_port == fixed {
            return Err(format!(
                "spec.pushPort {} or spec.adminPort {} collides with port {fixed} (metrics {METRICS_PORT}, readiness {READY_PORT})",
                spec.push_port, spec.admin_port
            ));
        }
    }
    Ok(())
}

/// The objects of `proxy`: its children planned from the proxy as the
/// filter rollout points it at its module ([`FilterPlan::proxy_for_children`]),
/// the rollout's derived ConfigMap, and the NetworkPolicy of its pods
/// ([`push_api_policy`]).
pub fn objects(
    proxy: &ProxyServer,
    push_token: &str,
    filter: Option<&FilterPlan>,
    peers: PolicyPeers<'_>,
) -> anyhow::Result<Objects> {
    let child_proxy = match filter {
        Some(f) => f.proxy_for_children(proxy),
        None => proxy.clone(),
    };
    let mut children = children(&child_proxy, push_token)?;
    children.config_map = filter.and_then(|f| f.config_map(proxy));
    Ok(Objects {
        children,
        network_policy: peers
            .controller_namespace
            .map(|ns| push_api_policy(proxy, &policy_ports(proxy), ns, peers.scrapers)),
    })
}

/// The ports of `proxy`'s pods on the pod network, for its NetworkPolicy.
pub fn policy_ports(proxy: &ProxyServer) -> crate::plan::network_policy::ProxyPorts {
    crate::plan::network_policy::ProxyPorts {
        routing: envoy_config(&proxy.spec, "").tls_ports,
        push: proxy.spec.push_port,
        ready: READY_PORT,
        // No health port of Envoy's own: its probes ask the readiness
        // port, which the DNS pods' checks share.
        watched: watched_ports(&proxy.spec.pod, vec![METRICS_PORT], Vec::new()),
    }
}

/// The children of a ProxyServer: ServiceAccount, the Envoy config Secret
/// (it holds the push token), the internal ClusterIP Service, the headless
/// push API Service (publishing not-ready pods, so the controller can push to
/// a pod before its first table makes it ready), Deployment.
pub fn children(server: &ProxyServer, push_token: &str) -> anyhow::Result<Children> {
    if push_token.len() < MIN_TOKEN_LEN {
        anyhow::bail!("push token: shorter than {MIN_TOKEN_LEN} characters");
    }
    validate(&server.spec).map_err(anyhow::Error::msg)?;
    let name = server.metadata.name.clone().unwrap_or_default();
    let instance = instance_of(&server.metadata);
    let c = Component::Proxy;
    let cfg = envoy_config(&server.spec, push_token);
    let files: BTreeMap<String, ByteString> = oooi_envoy::files(&cfg, Path::new(CONFIG_DIR))?
        .into_iter()
        .map(|(name, bytes)| (name, ByteString(bytes)))
        .collect();
    let secret_name = format!("{name}-envoy");
    let secret = Secret {
        metadata: child_meta(server, secret_name.clone(), &instance, c),
        type_: Some("Opaque".to_string()),
        data: Some(files),
        ..Secret::default()
    };

    let mut services = Vec::new();
    if server.spec.internal_service {
        services.push(Service {
            metadata: child_meta(server, name.clone(), &instance, c),
            spec: Some(ServiceSpec {
                type_: Some("ClusterIP".to_string()),
                selector: Some(selector(&instance, c)),
                ports: Some(
                    cfg.tls_ports
                        .iter()
                        .map(|p| ServicePort {
                            name: Some(format!("tls-{p}")),
                            port: i32::from(*p),
                            protocol: Some("TCP".to_string()),
                            target_port: Some(IntOrString::Int(i32::from(*p))),
                            ..ServicePort::default()
                        })
                        .collect(),
                ),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        });
    }
    let replica = server.spec.replica;
    services.push(Service {
        metadata: child_meta(server, push_service_name(&name), &instance, c),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_string()),
            publish_not_ready_addresses: Some(true),
            selector: Some(server_selector(&name, &instance, c, replica)),
            ports: Some(vec![
                ServicePort {
                    name: Some("push".to_string()),
                    port: i32::from(server.spec.push_port),
                    protocol: Some("TCP".to_string()),
                    target_port: Some(IntOrString::Int(i32::from(server.spec.push_port))),
                    ..ServicePort::default()
                },
                ServicePort {
                    name: Some("ready".to_string()),
                    port: i32::from(READY_PORT),
                    protocol: Some("TCP".to_string()),
                    target_port: Some(IntOrString::Int(i32::from(READY_PORT))),
                    ..ServicePort::default()
                },
            ]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    });

    let volumes = vec![
        // One mount, one `..data` swap: the Envoy files (Secret: the API
        // filter's config holds the push token) and the filter modules they
        // name (the derived ConfigMap the filter rollout writes, absent until
        // a module passed its check) change together.
        Volume {
            name: "envoy-config".to_string(),
            projected: Some(ProjectedVolumeSource {
                sources: Some(vec![
                    VolumeProjection {
                        secret: Some(SecretProjection {
                            name: secret_name,
                            ..SecretProjection::default()
                        }),
                        ..VolumeProjection::default()
                    },
                    VolumeProjection {
                        config_map: Some(ConfigMapProjection {
                            name: crate::plan::proxy::filter::config_map_name(&name),
                            optional: Some(true),
                            ..ConfigMapProjection::default()
                        }),
                        ..VolumeProjection::default()
                    },
                ]),
                ..ProjectedVolumeSource::default()
            }),
            ..Volume::default()
        },
        Volume {
            name: "tmp".to_string(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        },
        Volume {
            name: "listeners".to_string(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".to_string()),
                size_limit: Some(Quantity("16Mi".to_string())),
            }),
            ..Volume::default()
        },
    ];
    let (placement, pdb) = replica_placement(server, &name, &instance, c, replica);
    let push = i32::from(server.spec.push_port);
    let ready = i32::from(READY_PORT);
    let deployment = deployment(
        server,
        &server.spec.pod,
        c,
        placement,
        Program {
            // The gate opens the routing listeners only once this replica
            // holds the table: before that a worker's connect is refused and
            // it moves on to the next proxy address, instead of a connection
            // accepted and reset after its ClientHello.
            command: Some(vec![GATE_COMMAND.to_string()]),
            args: vec![
                "--listeners".to_string(),
                format!("{CONFIG_DIR}/{}", oooi_envoy::LDS_FILE),
                "--out".to_string(),
                LISTENERS_DIR.to_string(),
                "--ready".to_string(),
                format!("http://127.0.0.1:{ready}/ready"),
                "--".to_string(),
                "envoy".to_string(),
                "-c".to_string(),
                format!("{CONFIG_DIR}/{}", oooi_envoy::BOOTSTRAP_FILE),
                "--drain-time-s".to_string(),
                "10".to_string(),
                "--log-level".to_string(),
                "info".to_string(),
            ],
            ports: vec![
                port("push", push, "TCP"),
                port("ready", ready, "TCP"),
                port("http", i32::from(METRICS_PORT), "TCP"),
            ],
            volumes,
            mounts: vec![
                mount("envoy-config", CONFIG_DIR, true),
                mount("tmp", "/tmp", false),
                mount("listeners", LISTENERS_DIR, false),
            ],
            // Not ready until the controller pushed a table (GET /ready is 503 before).
            readiness: http_probe("/ready", ready, 2, 1),
            liveness: tcp_probe(ready, 10, 6),
            builtin_resources: ["50m", "128Mi", "512Mi"],
            fs_group: None,
            // Envoy holds the table the controller last announced.
            agent_ready_url: Some(format!("http://127.0.0.1:{ready}/ready")),
        },
    );
    Ok(Children {
        service_account: service_account(server, &name, &instance, c),
        config_map: None,
        secret: Some(secret),
        services,
        pvc: None,
        pdb,
        deployment,
    })
}
