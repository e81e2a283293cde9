//! OpenShift SecurityContextConstraints for the component pods
//! (`run --openshift-scc`).
//!
//! OpenShift admits a pod only under an SCC its ServiceAccount (or the
//! creating user) may `use`. The component pods ([`crate::plan::workload`]) run
//! their programs as a non-root user with every capability dropped, so the
//! built-in `restricted-v2` admits them once [`for_openshift`] has left the
//! UID and fsGroup to it (the namespace's range). Only a pod with an address
//! agent ([`crate::plan::workload::availability`]) asks for more: the agent's container runs
//! as UID 0 with NET_ADMIN and NET_RAW.
//!
//! [`choose`] checks a pod template against models of the SCCs, from the
//! least privileged up, and takes the first that admits it:
//!
//! | SCC | UID | added capabilities | admits |
//! |---|---|---|---|
//! | `restricted-v2` (built in) | the namespace's range | NET_BIND_SERVICE | DHCP, DNS and proxy pods (on OpenShift) |
//! | `nonroot-v2` (built in) | any but 0 | NET_BIND_SERVICE | the same pods with their fixed UID 65532 |
//! | [`ADDRESS_AGENT_SCC`] (made by the install) | any | NET_ADMIN, NET_RAW | DNS and proxy pods with an address agent |
//!
//! No built-in SCC short of `privileged` admits a UID-0 container that adds
//! a capability, so the install creates [`ADDRESS_AGENT_SCC`]
//! ([`address_agent_scc`]: `anyuid` narrowed to the two capabilities, with
//! every other restriction of `restricted-v2`): the chart renders it when
//! the cluster serves `security.openshift.io/v1`, and under OLM, whose
//! bundles cannot carry SCCs, an administrator applies it
//! (`oooi-controller rbac --sccs`). The controller never creates or changes
//! an SCC: an SCC's `users` and `groups` grant its use by themselves, so
//! a controller allowed to write one could grant itself privileged pods. It
//! reads [`ADDRESS_AGENT_SCC`] by name ([`install_scc`]) and reports a
//! component whose pods need it while it is missing, and grants each
//! component's ServiceAccount `use` of the one SCC its pods need through a
//! Role and RoleBinding in the component's namespace ([`scc_rbac`]), owned
//! by the component object so garbage collection removes them with it. A
//! pod `restricted-v2` admits needs no grant: every authenticated user may
//! use it.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PodSpec, SecurityContext, Volume};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

use crate::plan::workload::Children;

/// The SCC the install creates for pods with an address agent.
pub const ADDRESS_AGENT_SCC: &str = "oooi-address-agent";
/// API group of SecurityContextConstraints.
pub const SCC_GROUP: &str = "security.openshift.io";

/// How an SCC constrains the user a container runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UidRule {
    /// A UID from the namespace's allocated range (set by admission): a
    /// fixed UID chosen without knowing the range is refused.
    MustRunAsRange,
    /// Any UID but 0.
    MustRunAsNonRoot,
    /// Any UID.
    RunAsAny,
}

/// The parts of an SCC that decide whether our pods are admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SccModel {
    /// The SCC's name.
    pub name: &'static str,
    /// True for an SCC every OpenShift cluster has.
    pub built_in: bool,
    /// `runAsUser.type`.
    pub run_as_user: UidRule,
    /// `fsGroup.type` is `MustRunAs` (the namespace's range): a fixed
    /// fsGroup is refused.
    pub fs_group_from_range: bool,
    /// `allowedCapabilities` (`*`: any).
    pub allowed_capabilities: &'static [&'static str],
    /// `allowPrivilegeEscalation`.
    pub allow_privilege_escalation: bool,
    /// `allowPrivilegedContainer`.
    pub allow_privileged: bool,
    /// `seccompProfiles` (`*`: any; empty: none may be set).
    pub seccomp_profiles: &'static [&'static str],
    /// `volumes` (`*`: any).
    pub volumes: &'static [&'static str],
    /// `readOnlyRootFilesystem`: containers must set it.
    pub read_only_root_filesystem: bool,
    /// `allowHostNetwork`.
    pub allow_host_network: bool,
    /// `allowHostPID` and `allowHostIPC`.
    pub allow_host_pid_ipc: bool,
}

/// Volume types of `restricted-v2`, the same set the Pod Security
/// `restricted` profile allows.
pub(crate) const CORE_VOLUMES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];
/// Volumes of the address agent's SCC: what the components mount, nothing more.
const OOOI_VOLUMES: &[&str] = &[
    "configMap",
    "downwardAPI",
    "emptyDir",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// OpenShift's `restricted-v2`.
pub const RESTRICTED_V2: SccModel = SccModel {
    name: "restricted-v2",
    built_in: true,
    run_as_user: UidRule::MustRunAsRange,
    fs_group_from_range: true,
    allowed_capabilities: &["NET_BIND_SERVICE"],
    allow_privilege_escalation: false,
    allow_privileged: false,
    seccomp_profiles: &["runtime/default"],
    volumes: CORE_VOLUMES,
    read_only_root_filesystem: false,
    allow_host_network: false,
    allow_host_pid_ipc: false,
};
/// OpenShift's `nonroot-v2`.
pub const NONROOT_V2: SccModel = SccModel {
    name: "nonroot-v2",
    built_in: true,
    run_as_user: UidRule::MustRunAsNonRoot,
    fs_group_from_range: false,
    allowed_capabilities: &["NET_BIND_SERVICE"],
    allow_privilege_escalation: false,
    allow_privileged: false,
    seccomp_profiles: &["runtime/default"],
    volumes: CORE_VOLUMES,
    read_only_root_filesystem: false,
    allow_host_network: false,
    allow_host_pid_ipc: false,
};
/// OpenShift's `anyuid`.
pub const ANYUID: SccModel = SccModel {
    name: "anyuid",
    built_in: true,
    run_as_user: UidRule::RunAsAny,
    fs_group_from_range: false,
    allowed_capabilities: &[],
    allow_privilege_escalation: true,
    allow_privileged: false,
    seccomp_profiles: &[],
    volumes: CORE_VOLUMES,
    read_only_root_filesystem: false,
    allow_host_network: false,
    allow_host_pid_ipc: false,
};
/// OpenShift's `hostnetwork-v2` (host network allowed; UIDs from the range).
pub const HOSTNETWORK_V2: SccModel = SccModel {
    name: "hostnetwork-v2",
    built_in: true,
    run_as_user: UidRule::MustRunAsRange,
    fs_group_from_range: true,
    allowed_capabilities: &["NET_BIND_SERVICE"],
    allow_privilege_escalation: false,
    allow_privileged: false,
    seccomp_profiles: &["runtime/default"],
    volumes: CORE_VOLUMES,
    read_only_root_filesystem: false,
    allow_host_network: true,
    allow_host_pid_ipc: false,
};
/// OpenShift's `privileged`.
pub const PRIVILEGED: SccModel = SccModel {
    name: "privileged",
    built_in: true,
    run_as_user: UidRule::RunAsAny,
    fs_group_from_range: false,
    allowed_capabilities: &["*"],
    allow_privilege_escalation: true,
    allow_privileged: true,
    seccomp_profiles: &["*"],
    volumes: &["*"],
    read_only_root_filesystem: false,
    allow_host_network: true,
    allow_host_pid_ipc: true,
};
/// [`ADDRESS_AGENT_SCC`]: what the address agent's container needs (UID 0,
/// NET_ADMIN and NET_RAW) and nothing more.
pub const OOOI_ADDRESS_AGENT: SccModel = SccModel {
    name: ADDRESS_AGENT_SCC,
    built_in: false,
    run_as_user: UidRule::RunAsAny,
    fs_group_from_range: false,
    allowed_capabilities: &["NET_ADMIN", "NET_RAW"],
    allow_privilege_escalation: false,
    allow_privileged: false,
    seccomp_profiles: &["runtime/default"],
    volumes: OOOI_VOLUMES,
    read_only_root_filesystem: true,
    allow_host_network: false,
    allow_host_pid_ipc: false,
};

/// The SCCs the controller may grant, least privileged first.
pub const CANDIDATES: [SccModel; 3] = [RESTRICTED_V2, NONROOT_V2, OOOI_ADDRESS_AGENT];
/// The built-in SCCs, least privileged first (to show which one a pod
/// would need without oooi's own).
pub const BUILT_IN: [SccModel; 5] = [
    RESTRICTED_V2,
    NONROOT_V2,
    HOSTNETWORK_V2,
    ANYUID,
    PRIVILEGED,
];

fn allows(list: &[&str], item: &str) -> bool {
    list.contains(&"*") || list.contains(&item)
}

/// The type of a volume, as SCCs and Pod Security name it.
pub(crate) fn volume_kind(v: &Volume) -> &'static str {
    let kinds = [
        (v.config_map.is_some(), "configMap"),
        (v.secret.is_some(), "secret"),
        (v.empty_dir.is_some(), "emptyDir"),
        (v.persistent_volume_claim.is_some(), "persistentVolumeClaim"),
        (v.projected.is_some(), "projected"),
        (v.downward_api.is_some(), "downwardAPI"),
        (v.csi.is_some(), "csi"),
        (v.ephemeral.is_some(), "ephemeral"),
        (v.host_path.is_some(), "hostPath"),
    ];
    kinds
        .into_iter()
        .find(|(set, _)| *set)
        .map(|(_, k)| k)
        .unwrap_or("other")
}

fn seccomp_name(type_: &str) -> &'static str {
    match type_ {
        "RuntimeDefault" => "runtime/default",
        "Unconfined" => "unconfined",
        _ => "localhost",
    }
}

/// Why `scc` refuses `pod`, or `None` when it admits it.
pub fn refusal(scc: &SccModel, pod: &PodSpec) -> Option<String> {
    if pod.host_network == Some(true) && !scc.allow_host_network {
        return Some("host network is not allowed".into());
    }
    if (pod.host_pid == Some(true) || pod.host_ipc == Some(true)) && !scc.allow_host_pid_ipc {
        return Some("host PID or IPC namespace is not allowed".into());
    }
    for v in pod.volumes.iter().flatten() {
        let kind = volume_kind(v);
        if !allows(scc.volumes, kind) {
            return Some(format!("volume {} ({kind}) is not allowed", v.name));
        }
    }
    let psc = pod.security_context.clone().unwrap_or_default();
    if let Some(g) = psc.fs_group
        && scc.fs_group_from_range
    {
        return Some(format!(
            "fsGroup {g} is fixed; this SCC assigns one from the namespace's range"
        ));
    }
    if let Some(p) = &psc.seccomp_profile
        && !allows(scc.seccomp_profiles, seccomp_name(&p.type_))
    {
        return Some(format!("seccomp profile {} is not allowed", p.type_));
    }
    for c in pod.init_containers.iter().flatten().chain(&pod.containers) {
        let sc: SecurityContext = c.security_context.clone().unwrap_or_default();
        let name = &c.name;
        if sc.privileged == Some(true) && !scc.allow_privileged {
            return Some(format!("container {name}: privileged"));
        }
        // Unset means allowed (the Linux default), so only an explicit false passes.
        if sc.allow_privilege_escalation != Some(false) && !scc.allow_privilege_escalation {
            return Some(format!("container {name}: privilege escalation"));
        }
        if scc.read_only_root_filesystem && sc.read_only_root_filesystem != Some(true) {
            return Some(format!("container {name}: writable root file system"));
        }
        for cap in sc.capabilities.iter().flat_map(|c| c.add.iter().flatten()) {
            if !allows(scc.allowed_capabilities, cap) {
                return Some(format!("container {name}: capability {cap}"));
            }
        }
        let uid = sc.run_as_user.or(psc.run_as_user);
        let non_root = sc.run_as_non_root.or(psc.run_as_non_root) == Some(true);
        match (scc.run_as_user, uid) {
            (UidRule::RunAsAny, _) => {}
            (UidRule::MustRunAsRange, Some(u)) => {
                return Some(format!(
                    "container {name}: UID {u} is fixed; this SCC assigns one from the namespace's range"
                ));
            }
            (UidRule::MustRunAsRange, None) => {}
            (UidRule::MustRunAsNonRoot, Some(0)) => {
                return Some(format!("container {name}: runs as UID 0"));
            }
            (UidRule::MustRunAsNonRoot, Some(_)) => {}
            (UidRule::MustRunAsNonRoot, None) if non_root => {}
            (UidRule::MustRunAsNonRoot, None) => {
                return Some(format!("container {name}: may run as root"));
            }
        }
        if let Some(p) = &sc.seccomp_profile
            && !allows(scc.seccomp_profiles, seccomp_name(&p.type_))
        {
            return Some(format!(
                "container {name}: seccomp profile {} is not allowed",
                p.type_
            ));
        }
    }
    None
}

/// The first of `sccs` (least privileged first) that admits `pod`.
pub fn least_privileged<'a>(sccs: &'a [SccModel], pod: &PodSpec) -> Option<&'a SccModel> {
    sccs.iter().find(|s| refusal(s, pod).is_none())
}

fn pod_spec(d: &Deployment) -> Option<&PodSpec> {
    d.spec.as_ref()?.template.spec.as_ref()
}

/// The SCC the controller grants to the pods of `deployment`: the least
/// privileged of [`CANDIDATES`] that admits them (`None`: none does).
pub fn choose(deployment: &Deployment) -> Option<&'static SccModel> {
    least_privileged(&CANDIDATES, pod_spec(deployment)?)
}

/// The SCC the pods of `deployment` need that the install, not OpenShift,
/// provides (the address agent's), or `None` when a built-in one admits
/// them.
pub fn install_scc(deployment: &Deployment) -> Option<&'static str> {
    choose(deployment).filter(|s| !s.built_in).map(|s| s.name)
}

/// A Role allowing `use` of one SCC, and the RoleBinding granting it to a
/// component's ServiceAccount.
#[derive(Debug, Clone, PartialEq)]
pub struct SccRbac {
    /// The SCC granted.
    pub scc: &'static str,
    /// `<component>-scc`: `use` on that SCC alone.
    pub role: Role,
    /// `<component>-scc`: the Role to the component's ServiceAccount.
    pub role_binding: RoleBinding,
}

/// The Role and RoleBinding letting the pods of `children` run under the
/// least privileged SCC that admits them. Same namespace, labels and owner
/// as the Deployment, so garbage collection removes them with the
/// component. `None` when no candidate admits the pods (never for the pods
/// oooi plans; a test checks every component).
pub fn scc_rbac(children: &Children) -> Option<SccRbac> {
    let d = &children.deployment;
    let scc = choose(d)?;
    let name = format!("{}-scc", d.metadata.name.clone().unwrap_or_default());
    let meta = ObjectMeta {
        name: Some(name.clone()),
        namespace: d.metadata.namespace.clone(),
        labels: d.metadata.labels.clone(),
        owner_references: d.metadata.owner_references.clone(),
        ..ObjectMeta::default()
    };
    let sa = children.service_account.metadata.name.clone();
    Some(SccRbac {
        scc: scc.name,
        role: Role {
            metadata: meta.clone(),
            rules: Some(vec![PolicyRule {
                api_groups: Some(vec![SCC_GROUP.to_string()]),
                resources: Some(vec!["securitycontextconstraints".to_string()]),
                resource_names: Some(vec![scc.name.to_string()]),
                verbs: vec!["use".to_string()],
                ..PolicyRule::default()
            }]),
        },
        role_binding: RoleBinding {
            metadata: meta,
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".to_string(),
                kind: "Role".to_string(),
                name,
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".to_string(),
                name: sa.unwrap_or_default(),
                namespace: d.metadata.namespace.clone(),
                ..Subject::default()
            }]),
        },
    })
}

/// [`ADDRESS_AGENT_SCC`] as the install creates it (the chart's template
/// and `oooi-controller rbac --sccs` print this object).
pub fn address_agent_scc() -> Value {
    [OOOI_ADDRESS_AGENT]
        .iter()
        .map(|s| {
            json!({
                "apiVersion": "security.openshift.io/v1",
                "kind": "SecurityContextConstraints",
                "metadata": {
                    "name": s.name,
                    "annotations": BTreeMap::from([(
                        "kubernetes.io/description",
                        format!(
                            "the oooi address agent, which runs as UID 0 to hold {} and nothing \
                             else (moving a VLAN address between replicas): no privilege \
                             escalation, read-only root file system, seccomp runtime/default, \
                             no host access.",
                            s.allowed_capabilities.join(" and ")
                        ),
                    )]),
                },
                "allowHostDirVolumePlugin": false,
                "allowHostIPC": false,
                "allowHostNetwork": s.allow_host_network,
                "allowHostPID": false,
                "allowHostPorts": false,
                "allowPrivilegeEscalation": s.allow_privilege_escalation,
                "allowPrivilegedContainer": s.allow_privileged,
                "allowedCapabilities": s.allowed_capabilities,
                "defaultAddCapabilities": [],
                "requiredDropCapabilities": ["ALL"],
                "fsGroup": {"type": "RunAsAny"},
                "groups": [],
                "users": [],
                "priority": Value::Null,
                "readOnlyRootFilesystem": s.read_only_root_filesystem,
                "runAsUser": {"type": "RunAsAny"},
                "seLinuxContext": {"type": "MustRunAs"},
                "seccompProfiles": s.seccomp_profiles,
                "supplementalGroups": {"type": "RunAsAny"},
                "volumes": s.volumes,
            })
        })
        .next()
        .unwrap_or(Value::Null)
}

/// Leaves the user, group and fsGroup of a planned pod to OpenShift: on
/// OpenShift `restricted-v2` assigns them from the namespace's range and
/// refuses fixed ones. Containers that run as UID 0 (the address agent)
/// keep theirs.
pub fn for_openshift(deployment: &mut Deployment) {
    let Some(pod) = deployment
        .spec
        .as_mut()
        .and_then(|s| s.template.spec.as_mut())
    else {
        return;
    };
    if let Some(psc) = pod.security_context.as_mut() {
        psc.fs_group = None;
        psc.run_as_user = None;
        psc.run_as_group = None;
    }
    for c in pod
        .init_containers
        .iter_mut()
        .flatten()
        .chain(pod.containers.iter_mut())
    {
        if let Some(sc) = c.security_context.as_mut()
            && sc.run_as_non_root == Some(true)
        {
            sc.run_as_user = None;
            sc.run_as_group = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::workload::container_security;
    use k8s_openapi::api::core::v1::{Container, PodSecurityContext, SeccompProfile};

    fn pod(caps: &[&str], fs_group: Option<i64>) -> PodSpec {
        PodSpec {
            containers: vec![Container {
                name: "c".into(),
                security_context: Some(container_security(caps)),
                ..Container::default()
            }],
            security_context: Some(PodSecurityContext {
                fs_group,
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    ..SeccompProfile::default()
                }),
                ..PodSecurityContext::default()
            }),
            ..PodSpec::default()
        }
    }

    #[test]
    fn each_security_context_gets_the_least_privileged_scc_that_admits_it() {
        let pick = |p: &PodSpec| least_privileged(&CANDIDATES, p).map(|s| s.name);
        assert_eq!(pick(&pod(&[], None)), Some("nonroot-v2"));
        assert_eq!(pick(&pod(&[], Some(65532))), Some("nonroot-v2"));
        assert_eq!(
            pick(&pod(&["NET_ADMIN", "NET_RAW"], None)),
            Some(ADDRESS_AGENT_SCC)
        );
        assert_eq!(pick(&pod(&["SYS_ADMIN"], None)), None, "never granted");
        assert_eq!(pick(&pod(&["NET_BIND_SERVICE"], None)), None, "never asked");
    }

    #[test]
    fn on_openshift_restricted_v2_admits_a_pod_without_capabilities() {
        let mut d = Deployment {
            spec: Some(k8s_openapi::api::apps::v1::DeploymentSpec {
                template: k8s_openapi::api::core::v1::PodTemplateSpec {
                    spec: Some(pod(&[], Some(65532))),
                    ..Default::default()
                },
                ..Default::default()
            }),
            ..Deployment::default()
        };
        assert!(refusal(&RESTRICTED_V2, pod_spec(&d).unwrap()).is_some());
        for_openshift(&mut d);
        let p = pod_spec(&d).unwrap();
        assert_eq!(refusal(&RESTRICTED_V2, p), None);
        let sc = p.containers[0].security_context.as_ref().unwrap();
        assert_eq!(sc.run_as_user, None);
        assert_eq!(sc.run_as_non_root, Some(true), "still never root");
        assert_eq!(choose(&d).map(|s| s.name), Some("restricted-v2"));
    }

    #[test]
    fn no_built_in_scc_short_of_privileged_admits_a_root_container_with_a_capability() {
        let pick = |p: &PodSpec| least_privileged(&BUILT_IN, p).map(|s| s.name);
        assert_eq!(pick(&pod(&[], None)), Some("nonroot-v2"));
        let agent = pod(&["NET_ADMIN", "NET_RAW"], None);
        assert_eq!(pick(&agent), Some("privileged"));
        assert!(refusal(&ANYUID, &agent).unwrap().contains("seccomp"));
        for scc in [RESTRICTED_V2, NONROOT_V2, HOSTNETWORK_V2] {
            assert!(refusal(&scc, &agent).unwrap().contains("NET_ADMIN"));
        }
    }

    #[test]
    fn refusals_name_what_the_scc_does_not_allow() {
        let mut p = pod(&[], None);
        p.containers[0]
            .security_context
            .as_mut()
            .unwrap()
            .allow_privilege_escalation = None;
        assert!(
            refusal(&NONROOT_V2, &p)
                .unwrap()
                .contains("privilege escalation")
        );
        let mut p = pod(&["NET_ADMIN"], None);
        p.volumes = Some(vec![Volume {
            name: "host".into(),
            host_path: Some(Default::default()),
            ..Volume::default()
        }]);
        assert!(
            refusal(&OOOI_ADDRESS_AGENT, &p)
                .unwrap()
                .contains("hostPath")
        );
        let mut p = pod(&["NET_ADMIN"], None);
        p.containers[0]
            .security_context
            .as_mut()
            .unwrap()
            .read_only_root_filesystem = Some(false);
        assert!(
            refusal(&OOOI_ADDRESS_AGENT, &p)
                .unwrap()
                .contains("writable")
        );
        let p = pod(&["SYS_ADMIN"], None);
        assert!(
            refusal(&OOOI_ADDRESS_AGENT, &p)
                .unwrap()
                .contains("SYS_ADMIN")
        );
        let p = pod(&[], Some(1000));
        assert!(refusal(&RESTRICTED_V2, &p).unwrap().contains("fsGroup"));
        let mut p = pod(&[], None);
        p.host_network = Some(true);
        assert!(refusal(&NONROOT_V2, &p).unwrap().contains("host network"));
        assert!(refusal(&PRIVILEGED, &p).is_none());
    }

    #[test]
    fn the_address_agent_scc_matches_its_model() {
        let s = address_agent_scc();
        assert_eq!(s["metadata"]["name"], ADDRESS_AGENT_SCC);
        assert_eq!(s["allowedCapabilities"], json!(["NET_ADMIN", "NET_RAW"]));
        assert_eq!(s["allowPrivilegeEscalation"], false);
        assert_eq!(s["allowPrivilegedContainer"], false);
        assert_eq!(s["readOnlyRootFilesystem"], true);
        assert_eq!(s["requiredDropCapabilities"], json!(["ALL"]));
        assert_eq!(s["seccompProfiles"], json!(["runtime/default"]));
        assert_eq!(s["allowHostNetwork"], false);
        assert_eq!(s["defaultAddCapabilities"], json!([]));
    }
}
