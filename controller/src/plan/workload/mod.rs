//! The child objects of one component and the pod template they share.
//!
//! Security (documented in docs, enforced here):
//! - The programs that parse tenant traffic (oooi-dns, oooi-dhcp, the
//!   proxy's gate, Envoy and the filter) run as a non-root user with every
//!   capability dropped, a read-only root file system, no privilege
//!   escalation and the RuntimeDefault seccomp profile. They bind their low
//!   ports through the pod sysctl `net.ipv4.ip_unprivileged_port_start=0`
//!   and may open unprivileged ICMP echo sockets through
//!   `net.ipv4.ping_group_range` (both "safe" sysctls that the Pod Security
//!   `restricted` profile and OpenShift's `restricted-v2` allow). The pods
//!   carry UID and fsGroup 65532 for plain Kubernetes; on OpenShift the
//!   controller leaves them unset ([`crate::plan::workload::scc::for_openshift`]) so that
//!   `restricted-v2` assigns the namespace's own.
//! - Only the address agent ([`crate::plan::workload::availability`]) adds capabilities
//!   (NET_ADMIN and NET_RAW, to move a VLAN address and announce it), in its
//!   own container, as UID 0: Kubernetes hands added capabilities to a
//!   non-root process only through file capabilities, which
//!   `allowPrivilegeEscalation: false` (no_new_privs) disables. Its
//!   bounding set is those two alone.
//! - One replica with the `Recreate` strategy: the static VLAN address can be
//!   held by one pod at a time (two would fight over ARP). Several replicas
//!   are several Deployments, one per address (see `rolling`).

pub mod availability;
pub mod placement;
pub mod pod_security;
pub mod readiness;
pub mod resources;
pub mod rolling;
pub mod scc;
pub mod template_hash;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, ConfigMap, Container, ContainerPort, EnvVar, EnvVarSource,
    ObjectFieldSelector, PersistentVolumeClaim, PodAffinityTerm, PodAntiAffinity,
    PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile,
    Secret, SecurityContext, Service, ServiceAccount, Sysctl, TopologySpreadConstraint, Volume,
    VolumeMount,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::Resource;
use serde_json::{Value, json};

use oooi_vocabulary::InterfaceAddress;

use crate::crd::{ComponentKind, ComponentPod, ServerAvailability, ServerPod, VlanInterface};
use crate::plan::infra::network::Network;
use crate::plan::labels::{Component, child_meta, labels, selector};
use crate::plan::network_policy::WatchedPorts;

/// Multus annotation naming the pod's extra networks.
pub const MULTUS_ANNOTATION: &str = oooi_vocabulary::labels::MULTUS_NETWORKS;
/// UID of components that need no capability.
pub const NON_ROOT_UID: i64 = 65532;

/// The sysctls of every component pod: any user may bind a port below 1024
/// (DNS 53, DHCP 67, the proxy's 443) and open an ICMP echo socket (the
/// DHCP server's probe of an address before it offers it).
pub const POD_SYSCTLS: [(&str, &str); 2] = [
    ("net.ipv4.ip_unprivileged_port_start", "0"),
    ("net.ipv4.ping_group_range", "0 2147483647"),
];

/// Every object one component needs, ready for server-side apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Children {
    /// The pod's identity (no API access: its token is not mounted).
    pub service_account: ServiceAccount,
    /// The component config file (DHCP, DNS).
    pub config_map: Option<ConfigMap>,
    /// Envoy's config files; a Secret because the listener config holds the push token.
    pub secret: Option<Secret>,
    /// Services (DNS ClusterIP; proxy internal ClusterIP and push API).
    pub services: Vec<Service>,
    /// DHCP lease volume.
    pub pvc: Option<PersistentVolumeClaim>,
    /// The disruption budget over every server of a component with several
    /// (held by the first server's children).
    pub pdb: Option<PodDisruptionBudget>,
    /// The Deployment.
    pub deployment: Deployment,
}

impl Children {
    /// Every object as JSON (with `apiVersion` and `kind`), in apply order:
    /// ServiceAccount, ConfigMap, Secret, PVC, Services,
    /// PodDisruptionBudget, Deployment.
    pub fn to_values(&self) -> Vec<Value> {
        let mut out = vec![to_value(&self.service_account)];
        out.extend(self.config_map.iter().map(to_value));
        out.extend(self.secret.iter().map(to_value));
        out.extend(self.pvc.iter().map(to_value));
        out.extend(self.services.iter().map(to_value));
        out.extend(self.pdb.iter().map(to_value));
        out.push(to_value(&self.deployment));
        out
    }

    /// Digest (`sha256:…`) of the config the children carry (ConfigMap
    /// data, else Secret data): what a server's status reports.
    pub fn config_digest(&self) -> Option<String> {
        use sha2::{Digest, Sha256};
        let data = match (&self.config_map, &self.secret) {
            (Some(cm), _) => serde_json::to_vec(&cm.data).ok()?,
            (None, Some(s)) => serde_json::to_vec(&s.data).ok()?,
            (None, None) => return None,
        };
        Some(format!("sha256:{}", hex::encode(Sha256::digest(&data))))
    }
}

/// A component's children with the NetworkPolicy of its pods: everything
/// its reconciler applies and `render` prints, planned by one function per
/// component (`plan::{dhcp,dns,proxy}::objects`).
#[derive(Debug, Clone, PartialEq)]
pub struct Objects {
    /// The children, planned from the server's spec alone.
    pub children: Children,
    /// Which port of the pods admits whom (`plan::network_policy`); none
    /// when the controller's namespace is unknown.
    pub network_policy: Option<NetworkPolicy>,
}

impl Objects {
    /// Every object as JSON, in apply order: the children's, with the
    /// NetworkPolicy just before the Deployment, so the pods never run
    /// without it.
    pub fn to_values(&self) -> Vec<Value> {
        let mut out = self.children.to_values();
        let at = out.len().saturating_sub(1);
        if let Some(p) = &self.network_policy {
            out.insert(at, to_value(p));
        }
        out
    }
}

fn to_value<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// The Multus network annotation value: the VLAN leg with its static
/// address and the VLAN's own prefix length.
pub fn multus_annotation(vlan: &VlanInterface) -> String {
    json!([{
        "name": vlan.network_attachment_definition,
        "namespace": vlan.network_attachment_namespace,
        "interface": vlan.interface,
        "ips": [vlan.address],
    }])
    .to_string()
}

/// Requests and limits: the spec's, or the component's defaults.
pub fn resources(
    given: Option<&ResourceRequirements>,
    cpu: &str,
    memory: &str,
    memory_limit: &str,
) -> ResourceRequirements {
    given.cloned().unwrap_or_else(|| ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_string(), Quantity(cpu.to_string())),
            ("memory".to_string(), Quantity(memory.to_string())),
        ])),
        limits: Some(BTreeMap::from([(
            "memory".to_string(),
            Quantity(memory_limit.to_string()),
        )])),
        ..ResourceRequirements::default()
    })
}

/// The container security context for a set of added capabilities.
pub fn container_security(caps: &[&str]) -> SecurityContext {
    let needs_root = !caps.is_empty();
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        privileged: Some(false),
        run_as_non_root: Some(!needs_root),
        run_as_user: Some(if needs_root { 0 } else { NON_ROOT_UID }),
        run_as_group: Some(if needs_root { 0 } else { NON_ROOT_UID }),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_string()]),
            add: (!caps.is_empty()).then(|| caps.iter().map(|c| c.to_string()).collect()),
        }),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_string(),
            ..SeccompProfile::default()
        }),
        ..SecurityContext::default()
    }
}

/// What one component's program adds to the pod every server shares
/// ([`deployment`]): its container's command, arguments, ports, mounts and
/// probes, its volumes, the built-in resources of the kind, and whether an
/// address agent may run beside it.
pub(crate) struct Program {
    pub command: Option<Vec<String>>,
    pub args: Vec<String>,
    pub ports: Vec<ContainerPort>,
    pub volumes: Vec<Volume>,
    pub mounts: Vec<VolumeMount>,
    pub readiness: Probe,
    pub liveness: Probe,
    /// CPU request, memory request and memory limit when the spec names
    /// no resources.
    pub builtin_resources: [&'static str; 3],
    pub fs_group: Option<i64>,
    /// With address takeover, the URL that answers 200 while this
    /// component may hold addresses (`$(POD_IP)` is expanded); `None`: the
    /// component never runs an address agent.
    pub agent_ready_url: Option<String>,
}

/// The part of a derived server's spec every kind shares, from its
/// Infra's section of the kind: the VLAN leg (the Infra's network, the
/// server's `address`), the section's image, resources and placement, and
/// the server's `availability`.
pub fn server_pod<K: ComponentKind>(
    network: &Network,
    address: InterfaceAddress,
    section: &ComponentPod<K>,
    availability: ServerAvailability,
) -> ServerPod<K> {
    ServerPod::new(
        VlanInterface {
            network_attachment_definition: network.nad.clone(),
            network_attachment_namespace: network.nad_namespace.clone(),
            address,
            interface: DEFAULT_INTERFACE.to_string(),
        },
        // Set: plan_infra reports an unset image instead of planning.
        section.image.clone().unwrap_or_default(),
        section.resources.clone(),
        section.placement.clone(),
        availability,
    )
}

/// The metrics and health ports of a server's pods: its program's, then,
/// when an address agent runs beside it (address takeover), the agent's.
pub fn watched_ports<K: ComponentKind>(
    pod: &ServerPod<K>,
    mut metrics: Vec<u16>,
    mut health: Vec<u16>,
) -> WatchedPorts {
    if pod.availability.address_takeover.is_some() {
        metrics.push(AGENT_METRICS_PORT as u16);
        health.push(AGENT_HEALTH_PORT as u16);
    }
    WatchedPorts { metrics, health }
}

/// The pod's name of its VLAN leg.
pub(crate) const DEFAULT_INTERFACE: &str = "net1";

/// oooi's own affinity with the user's added: node affinity and pod
/// affinity as written, pod anti-affinity terms after oooi's (which keep
/// the replicas of a component on different nodes).
pub(crate) fn merge_affinity(own: Option<Affinity>, user: Option<&Affinity>) -> Option<Affinity> {
    let Some(user) = user else {
        return own;
    };
    let mut out = own.unwrap_or_default();
    out.node_affinity = user.node_affinity.clone();
    out.pod_affinity = user.pod_affinity.clone();
    if let Some(theirs) = &user.pod_anti_affinity {
        let mine = out
            .pod_anti_affinity
            .get_or_insert_with(PodAntiAffinity::default);
        if let Some(t) = &theirs.required_during_scheduling_ignored_during_execution {
            mine.required_during_scheduling_ignored_during_execution
                .get_or_insert_with(Vec::new)
                .extend(t.iter().cloned());
        }
        if let Some(t) = &theirs.preferred_during_scheduling_ignored_during_execution {
            mine.preferred_during_scheduling_ignored_during_execution
                .get_or_insert_with(Vec::new)
                .extend(t.iter().cloned());
        }
    }
    Some(out)
}

/// Path of the address agent in the DNS and proxy images.
pub const AGENT_COMMAND: &str = "/bin/oooi-addr-agent";
/// Name of the address agent's container.
pub const AGENT_CONTAINER: &str = "address-agent";
/// Port of the address agent's `/metrics` (and `/healthz`, for whoever
/// knows only this port), on the pod address.
pub const AGENT_METRICS_PORT: i32 = 9466;
/// Port of the address agent's health listener (`--health-addr`, on the
/// pod address): `/healthz` alone, with a connection budget of its own, for
/// the liveness probe; whatever holds the metrics port's connections cannot
/// have the agent restarted. Container port `agent-health`.
pub const AGENT_HEALTH_PORT: i32 = 9467;
/// The capabilities of the address agent: add and remove an address on the
/// VLAN interface (NET_ADMIN), send gratuitous ARP (NET_RAW).
pub const AGENT_CAPABILITIES: [&str; 2] = ["NET_ADMIN", "NET_RAW"];

/// The address agent of one server.
#[derive(Debug, Clone)]
pub(crate) struct AgentPlan {
    /// The component's addresses and group (`leasePrefix`).
    pub takeover: crate::crd::AddressTakeover,
    /// When 200, the component on this pod may hold addresses (an
    /// `http://<ip literal>:<port>/<path>` URL; `$(POD_IP)` is expanded).
    pub ready_url: String,
}

/// The address agent's container: a native sidecar (an init container that
/// keeps running), so it starts before the component (it removes a home
/// address another replica holds before anything announces it) and stops
/// after it (the component goes first, the agent sees it not ready and
/// hands its addresses on).
fn agent_container(image: &str, vlan: &VlanInterface, agent: &AgentPlan) -> Container {
    let home = vlan.address.addr();
    let args = vec![
        "--group".to_string(),
        agent.takeover.lease_prefix.clone(),
        "--address".to_string(),
        agent
            .takeover
            .addresses
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(","),
        "--home".to_string(),
        home.to_string(),
        "--interface".to_string(),
        vlan.interface.clone(),
        "--ready-url".to_string(),
        agent.ready_url.clone(),
        "--metrics-addr".to_string(),
        pod_address(AGENT_METRICS_PORT),
        "--health-addr".to_string(),
        pod_address(AGENT_HEALTH_PORT),
    ];
    Container {
        name: AGENT_CONTAINER.to_string(),
        image: Some(image.to_string()),
        image_pull_policy: Some("IfNotPresent".to_string()),
        command: Some(vec![AGENT_COMMAND.to_string()]),
        args: Some(args),
        restart_policy: Some("Always".to_string()),
        ports: Some(vec![
            port("agent-metrics", AGENT_METRICS_PORT, "TCP"),
            port("agent-health", AGENT_HEALTH_PORT, "TCP"),
        ]),
        // 200 while the process runs; the agent is never a readiness gate.
        liveness_probe: Some(http_probe("/healthz", AGENT_HEALTH_PORT, 10, 3)),
        resources: Some(resources(None, "10m", "16Mi", "64Mi")),
        security_context: Some(container_security(&AGENT_CAPABILITIES)),
        env: Some(vec![
            env_value("RUST_LOG", "info"),
            // Read by the agent for its logs (its --identity and
            // --namespace); it makes no API request.
            env_field("POD_NAME", "metadata.name"),
            env_field("POD_NAMESPACE", "metadata.namespace"),
            env_field(POD_IP_ENV, "status.podIP"),
        ]),
        ..Container::default()
    }
}

fn env_value(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value: Some(value.to_string()),
        ..EnvVar::default()
    }
}

fn env_field(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.to_string(),
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

/// How the pod of one server of a component with several servers (one per
/// VLAN address) is told apart and placed. Default: one server, nothing extra.
#[derive(Debug, Clone, Default)]
pub(crate) struct Placement {
    /// Extra pod labels (the server's own, [`crate::plan::labels::SERVER_LABEL`]).
    pub pod_labels: BTreeMap<String, String>,
    /// Extra Deployment selector labels (a subset of `pod_labels`).
    pub selector_labels: BTreeMap<String, String>,
    /// Pod (anti-)affinity.
    pub affinity: Option<Affinity>,
    /// Topology spread constraints.
    pub topology_spread: Option<Vec<TopologySpreadConstraint>>,
}

/// Spreads the servers of a component instance: never two on one node
/// (required anti-affinity: a server that finds no other node stays
/// Pending while the others serve, rather than sharing the fate of a node
/// with them), and across zones where the nodes have them.
pub(crate) fn spread(instance: &str, component: Component) -> Placement {
    let peers = LabelSelector {
        match_labels: Some(selector(instance, component)),
        ..LabelSelector::default()
    };
    Placement {
        affinity: Some(Affinity {
            pod_anti_affinity: Some(PodAntiAffinity {
                required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
                    label_selector: Some(peers.clone()),
                    topology_key: "kubernetes.io/hostname".to_string(),
                    ..PodAffinityTerm::default()
                }]),
                ..PodAntiAffinity::default()
            }),
            ..Affinity::default()
        }),
        topology_spread: Some(vec![TopologySpreadConstraint {
            label_selector: Some(peers),
            max_skew: 1,
            topology_key: "topology.kubernetes.io/zone".to_string(),
            when_unsatisfiable: "ScheduleAnyway".to_string(),
            ..TopologySpreadConstraint::default()
        }]),
        ..Placement::default()
    }
}

/// The environment variable holding the pod's own address on the pod
/// network (downward API `status.podIP`), set in every component.
pub const POD_IP_ENV: &str = "POD_IP";

/// `ip:port` on the pod's pod-network address, as a container argument
/// (kubelet expands `$(POD_IP)`). Metrics and health endpoints bind here:
/// `0.0.0.0` would also bind the VLAN interface and expose them to every
/// VLAN client; the kubelet's probes reach the pod address.
pub fn pod_address(port: i32) -> String {
    format!("$({POD_IP_ENV}):{port}")
}

/// The Deployment of one server (`owner`, of kind `component`): the
/// pod-level fields from the part of its spec every kind shares
/// ([`ServerPod`]: VLAN leg, image, resources, placement, availability),
/// how its replica is told apart and placed ([`Placement`]), and what its
/// kind's [`Program`] adds.
pub(crate) fn deployment<R, K>(
    owner: &R,
    pod: &ServerPod<K>,
    component: Component,
    placement: Placement,
    program: Program,
) -> Deployment
where
    R: Resource<DynamicType = ()>,
    K: ComponentKind,
{
    let name = owner.meta().name.clone().unwrap_or_default();
    let instance = crate::plan::labels::instance_of(owner.meta());
    let volumes = program.volumes;
    let mut tolerations = crate::plan::workload::availability::tolerations(
        pod.availability.node_loss_toleration_seconds,
    );
    tolerations.extend(pod.placement.tolerations.iter().cloned());
    let agent = program.agent_ready_url.and_then(|ready_url| {
        pod.availability
            .address_takeover
            .clone()
            .map(|takeover| AgentPlan {
                takeover,
                ready_url,
            })
    });
    let init_containers = agent
        .as_ref()
        .map(|agent| vec![agent_container(&pod.image, &pod.vlan, agent)]);
    let mut pod_labels = labels(&instance, component);
    pod_labels.extend(placement.pod_labels.clone());
    let mut match_labels = selector(&instance, component);
    match_labels.extend(placement.selector_labels.clone());
    let [cpu, memory, memory_limit] = program.builtin_resources;
    let container = Container {
        name: component.as_str().to_string(),
        image: Some(pod.image.clone()),
        image_pull_policy: Some("IfNotPresent".to_string()),
        command: program.command,
        args: Some(program.args),
        ports: Some(program.ports),
        volume_mounts: Some(program.mounts),
        readiness_probe: Some(program.readiness),
        liveness_probe: Some(program.liveness),
        resources: Some(resources(pod.resources.as_ref(), cpu, memory, memory_limit)),
        security_context: Some(container_security(&[])),
        env: Some(vec![
            env_value("RUST_LOG", "info"),
            // The pod-network address, for listeners that must not be
            // reachable from the VLAN (see `pod_address`).
            env_field(POD_IP_ENV, "status.podIP"),
        ]),
        ..Container::default()
    };
    let mut d = Deployment {
        metadata: child_meta(owner, name.clone(), &instance, component),
        spec: Some(DeploymentSpec {
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(match_labels),
                ..LabelSelector::default()
            },
            strategy: Some(DeploymentStrategy {
                type_: Some("Recreate".to_string()),
                ..DeploymentStrategy::default()
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: Some(BTreeMap::from([(
                        MULTUS_ANNOTATION.to_string(),
                        multus_annotation(&pod.vlan),
                    )])),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(name.clone()),
                    automount_service_account_token: Some(false),
                    enable_service_links: Some(false),
                    init_containers,
                    containers: vec![container],
                    volumes: Some(volumes),
                    security_context: Some(PodSecurityContext {
                        fs_group: program.fs_group,
                        sysctls: Some(
                            POD_SYSCTLS
                                .iter()
                                .map(|(name, value)| Sysctl {
                                    name: name.to_string(),
                                    value: value.to_string(),
                                })
                                .collect(),
                        ),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".to_string(),
                            ..SeccompProfile::default()
                        }),
                        ..PodSecurityContext::default()
                    }),
                    termination_grace_period_seconds: Some(30),
                    affinity: merge_affinity(placement.affinity, pod.placement.affinity.as_ref()),
                    topology_spread_constraints: placement.topology_spread,
                    tolerations: Some(tolerations),
                    node_selector: (!pod.placement.node_selector.is_empty())
                        .then(|| pod.placement.node_selector.clone()),
                    priority_class_name: pod.placement.priority_class_name.clone(),
                    image_pull_secrets: (!pod.placement.image_pull_secrets.is_empty()).then(|| {
                        pod.placement
                            .image_pull_secrets
                            .iter()
                            .map(|r| k8s_openapi::api::core::v1::LocalObjectReference {
                                name: r.name.clone(),
                            })
                            .collect()
                    }),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    };
    crate::plan::workload::template_hash::stamp_template_hash(&mut d);
    d
}

/// The component's ServiceAccount.
pub(crate) fn service_account<K>(
    owner: &K,
    name: &str,
    instance: &str,
    component: Component,
) -> ServiceAccount
where
    K: Resource<DynamicType = ()>,
{
    ServiceAccount {
        metadata: child_meta(owner, name.to_string(), instance, component),
        automount_service_account_token: Some(false),
        ..ServiceAccount::default()
    }
}

/// A container port.
pub(crate) fn port(name: &str, port: i32, protocol: &str) -> ContainerPort {
    ContainerPort {
        name: Some(name.to_string()),
        container_port: port,
        protocol: Some(protocol.to_string()),
        ..ContainerPort::default()
    }
}

/// An HTTP GET probe.
pub(crate) fn http_probe(path: &str, port: i32, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(k8s_openapi::api::core::v1::HTTPGetAction {
            path: Some(path.to_string()),
            port: k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(port),
            ..Default::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        timeout_seconds: Some(2),
        ..Probe::default()
    }
}

/// A TCP probe.
pub(crate) fn tcp_probe(port: i32, period: i32, failures: i32) -> Probe {
    Probe {
        tcp_socket: Some(k8s_openapi::api::core::v1::TCPSocketAction {
            port: k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(port),
            ..Default::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        timeout_seconds: Some(2),
        ..Probe::default()
    }
}

/// A volume mount.
pub(crate) fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.to_string(),
        mount_path: path.to_string(),
        read_only: Some(read_only),
        ..VolumeMount::default()
    }
}
