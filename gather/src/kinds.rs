//! The API resources a gather reads.

/// One API resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Res {
    /// API group (`""` for the core group).
    pub group: &'static str,
    /// Version.
    pub version: String,
    /// Kind.
    pub kind: &'static str,
    /// Plural (the URL segment and the tree's folder).
    pub plural: &'static str,
}

impl Res {
    const fn fixed(group: &'static str, kind: &'static str, plural: &'static str) -> FixedRes {
        FixedRes {
            group,
            kind,
            plural,
        }
    }

    /// `group/version`, or `version` in the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The collection's path, in `namespace` or cluster-wide.
    pub fn path(&self, namespace: Option<&str>) -> String {
        let base = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        match namespace {
            Some(ns) => format!("{base}/namespaces/{ns}/{}", self.plural),
            None => format!("{base}/{}", self.plural),
        }
    }

    /// The CRD name, `<plural>.<group>`.
    pub fn crd_name(&self) -> String {
        format!("{}.{}", self.plural, self.group)
    }
}

/// A resource without its version (found at run time, or fixed below).
#[derive(Debug, Clone, Copy)]
pub struct FixedRes {
    /// API group.
    pub group: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Plural.
    pub plural: &'static str,
}

impl FixedRes {
    /// At `version`.
    pub fn at(self, version: &str) -> Res {
        Res {
            group: self.group,
            version: version.to_string(),
            kind: self.kind,
            plural: self.plural,
        }
    }
}

/// The API group of oooi's own resources.
pub const OOOI_GROUP: &str = "hostedcluster.densityops.com";
/// Their version.
pub const OOOI_VERSION: &str = "v1alpha1";

/// oooi's custom resources.
pub const OOOI: [FixedRes; 5] = [
    Res::fixed(OOOI_GROUP, "Infra", "infras"),
    Res::fixed(
        OOOI_GROUP,
        "InfraClusterAttachment",
        "infraclusterattachments",
    ),
    Res::fixed(OOOI_GROUP, "DHCPServer", "dhcpservers"),
    Res::fixed(OOOI_GROUP, "DNSServer", "dnsservers"),
    Res::fixed(OOOI_GROUP, "ProxyServer", "proxyservers"),
];

/// Built-in resources the controller creates for a component, read with
/// the children's label selector (group, version, kind, plural).
pub const CHILDREN: [(&str, &str, &str, &str); 7] = [
    ("apps", "v1", "Deployment", "deployments"),
    ("", "v1", "ConfigMap", "configmaps"),
    ("", "v1", "Service", "services"),
    ("", "v1", "ServiceAccount", "serviceaccounts"),
    ("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
    (
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
    ),
    (
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
    ),
];

/// A built-in resource.
pub fn builtin(
    group: &'static str,
    version: &str,
    kind: &'static str,
    plural: &'static str,
) -> Res {
    Res::fixed(group, kind, plural).at(version)
}

/// Optional APIs and the version assumed when their CRD cannot be read.
pub const OPTIONAL: [(FixedRes, &str); 6] = [
    (
        Res::fixed("hypershift.openshift.io", "HostedCluster", "hostedclusters"),
        "v1beta1",
    ),
    (
        Res::fixed("hypershift.openshift.io", "NodePool", "nodepools"),
        "v1beta1",
    ),
    (
        Res::fixed("cluster.x-k8s.io", "Machine", "machines"),
        "v1beta1",
    ),
    (
        Res::fixed(
            "kubevirt.io",
            "VirtualMachineInstance",
            "virtualmachineinstances",
        ),
        "v1",
    ),
    (
        Res::fixed(
            "k8s.cni.cncf.io",
            "NetworkAttachmentDefinition",
            "network-attachment-definitions",
        ),
        "v1",
    ),
    (
        Res::fixed(
            "k8s.ovn.org",
            "ClusterUserDefinedNetwork",
            "clusteruserdefinednetworks",
        ),
        "v1",
    ),
];

/// The label every oooi child and pod carries.
pub const APP_SELECTOR: &str = "app.kubernetes.io/name=oooi";
/// The label naming an object's Infra (NetworkPolicies in control-plane
/// namespaces, ClusterUserDefinedNetworks).
pub const INFRA_LABEL: &str = oooi_vocabulary::labels::INFRA;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_of_core_group_and_namespaced_resources() {
        let pods = builtin("", "v1", "Pod", "pods");
        assert_eq!(pods.path(None), "/api/v1/pods");
        assert_eq!(pods.path(Some("x")), "/api/v1/namespaces/x/pods");
        let infra = OOOI[0].at(OOOI_VERSION);
        assert_eq!(
            infra.path(Some("oooi")),
            "/apis/hostedcluster.densityops.com/v1alpha1/namespaces/oooi/infras"
        );
        assert_eq!(infra.crd_name(), "infras.hostedcluster.densityops.com");
        assert_eq!(infra.api_version(), "hostedcluster.densityops.com/v1alpha1");
    }
}
