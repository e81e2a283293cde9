//! The Kubernetes Pod Security Standards (`baseline` and `restricted`, as of
//! Kubernetes 1.35) as a pure check of a pod spec, so tests can hold every
//! pod the controller plans to the level its namespace is documented to
//! enforce: `restricted` for the DHCP, DNS and proxy pods, `privileged` only
//! where an address agent (NET_ADMIN) runs.
//!
//! [`admission_refusal`] decides, from a component namespace's
//! `pod-security.kubernetes.io/enforce` label and (on OpenShift) whether the
//! address agent's SCC exists, why the API server would refuse the pods the
//! controller plans there: the component then reports `Degraded` with
//! reason [`POD_SECURITY_REFUSED`] or [`SCC_MISSING`] instead of a
//! Deployment that silently never gets a pod.

use k8s_openapi::api::core::v1::{Container, PodSpec};

use crate::plan::workload::scc::{CORE_VOLUMES, volume_kind};

/// A Pod Security Admission level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Everything the baseline and restricted levels ask.
    Restricted,
    /// No known privilege escalation.
    Baseline,
    /// Anything.
    Privileged,
}

impl Level {
    /// The label value (`pod-security.kubernetes.io/enforce`).
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Restricted => "restricted",
            Level::Baseline => "baseline",
            Level::Privileged => "privileged",
        }
    }
}

impl Level {
    /// The level a `pod-security.kubernetes.io/enforce` value names. Pod
    /// Security admission reads a value it does not know as `restricted`.
    pub fn from_label(value: &str) -> Level {
        match value {
            "privileged" => Level::Privileged,
            "baseline" => Level::Baseline,
            _ => Level::Restricted,
        }
    }
}

/// The namespace label Pod Security admission enforces.
pub const ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";
/// `Degraded` reason: the namespace's Pod Security level refuses the pods.
pub const POD_SECURITY_REFUSED: &str = "PodSecurityRefused";
/// `Degraded` reason: the SCC the pods need does not exist.
pub const SCC_MISSING: &str = "SecurityContextConstraintsMissing";

/// What the cluster says about admitting one component's pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission<'a> {
    /// The component's namespace.
    pub namespace: &'a str,
    /// Its `pod-security.kubernetes.io/enforce` label (`None`: unset, the
    /// cluster's default applies, which oooi cannot read).
    pub enforce: Option<&'a str>,
    /// On OpenShift, the SCC the pods need when the install must create it
    /// (the address agent's), and whether it exists.
    pub install_scc: Option<(&'a str, bool)>,
}

/// Why pods of level `needed` would be refused under `a` (reason, message),
/// or `None` when nothing oooi can see refuses them.
pub fn admission_refusal(needed: Level, a: &Admission<'_>) -> Option<(&'static str, String)> {
    if let Some((scc, false)) = a.install_scc {
        return Some((
            SCC_MISSING,
            format!(
                "the pods need the SecurityContextConstraints {scc}, which does not exist: the \
                 install creates it (the chart on OpenShift; under OLM an administrator applies \
                 `oooi-controller rbac --sccs`, docs/installation.md#openshift); the controller \
                 only uses it"
            ),
        ));
    }
    let enforced = Level::from_label(a.enforce?);
    if needed <= enforced {
        return None;
    }
    let why = if needed == Level::Privileged {
        " (the address agent moves the VLAN address as root with NET_ADMIN and NET_RAW)"
    } else {
        ""
    };
    Some((
        POD_SECURITY_REFUSED,
        format!(
            "the pods need Pod Security level {}{why}, but namespace {} enforces {}: label it \
             {ENFORCE_LABEL}={} or give the component a single address (restricted); \
             docs/installation.md#pod-security",
            needed.as_str(),
            a.namespace,
            a.enforce.unwrap_or_default(),
            needed.as_str(),
        ),
    ))
}

/// Sysctls the baseline level allows (the "safe" set).
pub const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];

/// Capabilities the baseline level lets a container add.
const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

fn containers(pod: &PodSpec) -> impl Iterator<Item = &Container> {
    pod.init_containers.iter().flatten().chain(&pod.containers)
}

/// What `pod` does that the `baseline` level forbids (empty: admitted).
pub fn baseline_violations(pod: &PodSpec) -> Vec<String> {
    let mut out = Vec::new();
    if pod.host_network == Some(true) || pod.host_pid == Some(true) || pod.host_ipc == Some(true) {
        out.push("host namespaces".to_string());
    }
    for v in pod.volumes.iter().flatten() {
        if v.host_path.is_some() {
            out.push(format!("volume {}: hostPath", v.name));
        }
    }
    let psc = pod.security_context.clone().unwrap_or_default();
    for s in psc.sysctls.iter().flatten() {
        if !SAFE_SYSCTLS.contains(&s.name.as_str()) {
            out.push(format!("sysctl {} is not a safe sysctl", s.name));
        }
    }
    if psc
        .seccomp_profile
        .as_ref()
        .is_some_and(|p| p.type_ == "Unconfined")
    {
        out.push("pod seccomp profile Unconfined".to_string());
    }
    for c in containers(pod) {
        let sc = c.security_context.clone().unwrap_or_default();
        let name = &c.name;
        if sc.privileged == Some(true) {
            out.push(format!("container {name}: privileged"));
        }
        for cap in sc.capabilities.iter().flat_map(|c| c.add.iter().flatten()) {
            if !BASELINE_CAPABILITIES.contains(&cap.as_str()) {
                out.push(format!("container {name}: adds capability {cap}"));
            }
        }
        if c.ports
            .iter()
            .flatten()
            .any(|p| p.host_port.unwrap_or(0) != 0)
        {
            out.push(format!("container {name}: host port"));
        }
        if sc
            .seccomp_profile
            .as_ref()
            .is_some_and(|p| p.type_ == "Unconfined")
        {
            out.push(format!("container {name}: seccomp profile Unconfined"));
        }
        if sc.proc_mount.as_deref().is_some_and(|m| m != "Default") {
            out.push(format!("container {name}: procMount"));
        }
    }
    out
}

/// What `pod` does that the `restricted` level forbids (empty: admitted).
pub fn restricted_violations(pod: &PodSpec) -> Vec<String> {
    let mut out = baseline_violations(pod);
    for v in pod.volumes.iter().flatten() {
        let kind = volume_kind(v);
        if !CORE_VOLUMES.contains(&kind) {
            out.push(format!("volume {}: type {kind}", v.name));
        }
    }
    let psc = pod.security_context.clone().unwrap_or_default();
    let pod_seccomp = psc
        .seccomp_profile
        .as_ref()
        .is_some_and(|p| p.type_ == "RuntimeDefault" || p.type_ == "Localhost");
    for c in containers(pod) {
        let sc = c.security_context.clone().unwrap_or_default();
        let name = &c.name;
        if sc.allow_privilege_escalation != Some(false) {
            out.push(format!(
                "container {name}: allowPrivilegeEscalation is not false"
            ));
        }
        if sc.run_as_non_root.or(psc.run_as_non_root) != Some(true) {
            out.push(format!("container {name}: runAsNonRoot is not true"));
        }
        if sc.run_as_user.or(psc.run_as_user) == Some(0) {
            out.push(format!("container {name}: runAsUser 0"));
        }
        let seccomp = match &sc.seccomp_profile {
            Some(p) => p.type_ == "RuntimeDefault" || p.type_ == "Localhost",
            None => pod_seccomp,
        };
        if !seccomp {
            out.push(format!(
                "container {name}: seccomp profile is not RuntimeDefault or Localhost"
            ));
        }
        let caps = sc.capabilities.clone().unwrap_or_default();
        if !caps.drop.iter().flatten().any(|c| c == "ALL") {
            out.push(format!("container {name}: does not drop ALL capabilities"));
        }
        for cap in caps.add.iter().flatten() {
            if cap != "NET_BIND_SERVICE" {
                out.push(format!("container {name}: adds capability {cap}"));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The least privileged level that admits `pod`.
pub fn level(pod: &PodSpec) -> Level {
    if restricted_violations(pod).is_empty() {
        Level::Restricted
    } else if baseline_violations(pod).is_empty() {
        Level::Baseline
    } else {
        Level::Privileged
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::workload::container_security;
    use k8s_openapi::api::core::v1::{PodSecurityContext, SeccompProfile, Sysctl, Volume};

    fn pod(caps: &[&str]) -> PodSpec {
        PodSpec {
            containers: vec![Container {
                name: "c".into(),
                security_context: Some(container_security(caps)),
                ..Container::default()
            }],
            security_context: Some(PodSecurityContext {
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    ..SeccompProfile::default()
                }),
                sysctls: Some(vec![Sysctl {
                    name: "net.ipv4.ip_unprivileged_port_start".into(),
                    value: "0".into(),
                }]),
                ..PodSecurityContext::default()
            }),
            ..PodSpec::default()
        }
    }

    #[test]
    fn a_namespace_below_the_pods_level_refuses_them_with_the_fix() {
        let ns = |enforce| Admission {
            namespace: "hcp-infra",
            enforce,
            install_scc: None,
        };
        assert_eq!(
            admission_refusal(Level::Restricted, &ns(Some("restricted"))),
            None
        );
        assert_eq!(
            admission_refusal(Level::Privileged, &ns(Some("privileged"))),
            None
        );
        assert_eq!(
            admission_refusal(Level::Privileged, &ns(None)),
            None,
            "cluster default"
        );
        for enforce in ["restricted", "baseline", "strict"] {
            let (reason, msg) =
                admission_refusal(Level::Privileged, &ns(Some(enforce))).expect("refused");
            assert_eq!(reason, POD_SECURITY_REFUSED);
            assert!(msg.contains("hcp-infra enforces"), "{msg}");
            assert!(
                msg.contains("pod-security.kubernetes.io/enforce=privileged"),
                "{msg}"
            );
            assert!(msg.contains("NET_ADMIN"), "{msg}");
        }
        assert!(admission_refusal(Level::Baseline, &ns(Some("restricted"))).is_some());
        assert_eq!(
            admission_refusal(Level::Baseline, &ns(Some("baseline"))),
            None
        );
    }

    #[test]
    fn a_missing_install_scc_is_reported_before_the_namespace_label() {
        let a = Admission {
            namespace: "hcp-infra",
            enforce: Some("privileged"),
            install_scc: Some(("oooi-address-agent", false)),
        };
        let (reason, msg) = admission_refusal(Level::Privileged, &a).expect("refused");
        assert_eq!(reason, SCC_MISSING);
        assert!(
            msg.contains("oooi-address-agent") && msg.contains("rbac --sccs"),
            "{msg}"
        );
        let present = Admission {
            install_scc: Some(("oooi-address-agent", true)),
            ..a
        };
        assert_eq!(admission_refusal(Level::Privileged, &present), None);
    }

    #[test]
    fn a_non_root_pod_without_capabilities_is_restricted() {
        assert_eq!(restricted_violations(&pod(&[])), Vec::<String>::new());
        assert_eq!(level(&pod(&[])), Level::Restricted);
    }

    #[test]
    fn net_admin_as_root_needs_the_privileged_level() {
        let p = pod(&["NET_ADMIN", "NET_RAW"]);
        assert_eq!(level(&p), Level::Privileged);
        let v = restricted_violations(&p);
        assert!(v.iter().any(|v| v.contains("runAsNonRoot")), "{v:?}");
        assert!(v.iter().any(|v| v.contains("NET_ADMIN")), "{v:?}");
        // NET_RAW is not in the baseline set either; CHOWN is, as root it
        // is baseline but not restricted.
        assert_eq!(level(&pod(&["NET_RAW"])), Level::Privileged);
        assert_eq!(level(&pod(&["CHOWN"])), Level::Baseline);
    }

    #[test]
    fn unsafe_sysctls_and_host_paths_break_the_baseline() {
        let mut p = pod(&[]);
        if let Some(psc) = p.security_context.as_mut() {
            psc.sysctls = Some(vec![Sysctl {
                name: "net.ipv4.ip_forward".into(),
                value: "1".into(),
            }]);
        }
        assert_eq!(level(&p), Level::Privileged);
        let mut p = pod(&[]);
        p.volumes = Some(vec![Volume {
            name: "h".into(),
            host_path: Some(Default::default()),
            ..Volume::default()
        }]);
        assert!(
            baseline_violations(&p)
                .iter()
                .any(|v| v.contains("hostPath"))
        );
    }

    #[test]
    fn a_container_that_may_escalate_is_not_restricted() {
        let mut p = pod(&[]);
        if let Some(sc) = p.containers[0].security_context.as_mut() {
            sc.allow_privilege_escalation = None;
        }
        assert_eq!(level(&p), Level::Baseline);
    }
}
