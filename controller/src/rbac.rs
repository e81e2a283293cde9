//! The Kubernetes permissions the controller needs, kept true to the API
//! calls the code makes: `oooi-controller rbac` prints them as the
//! ClusterRole and Roles the chart installs (the chart test compares each
//! one), `rbac --explain` adds the reason of every rule, and the mocked-API
//! tests check every request they see against [`allows`] through
//! [`request_attributes`].
//!
//! Every rule has a [`Scope`]: where it is granted. Rules whose requests go
//! only to the namespace the controller watches become a namespaced Role
//! there when the controller watches one namespace (`--watch-namespace`),
//! so that, for example, Secrets are written and listed in that namespace
//! only. The OLM bundle splits the same rules into `permissions` and
//! `clusterPermissions` ([`csv_permissions`]); [`olm_layout`] gives the roles
//! OLM makes of them in each [`InstallMode`]. [`privilege_findings`] says
//! whether a layout lets the controller grant itself privilege (a test runs
//! it on every chart setting and install mode).

use serde::Serialize;

/// Where a rule is granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Cluster-wide (ClusterRole): cluster-scoped kinds, or requests into
    /// namespaces the controller cannot know at install time.
    Cluster,
    /// The namespace the controller watches (the Infras' and their
    /// components'): a Role there with `--watch-namespace`, else the
    /// ClusterRole.
    Watched,
    /// The controller's own namespace (the release namespace): a Role.
    Release,
    /// The namespaces of the HostedClusters whose admin kubeconfig the
    /// controller reads: a Role in each when they are listed, else the
    /// ClusterRole.
    HostedClusters,
}

/// One RBAC rule, with where it is granted and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    /// API groups (`""` is the core group).
    pub api_groups: Vec<&'static str>,
    /// Resources, with `/subresource` where one is meant.
    pub resources: Vec<&'static str>,
    /// Names the rule is limited to (empty: every object).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resource_names: Vec<&'static str>,
    /// Verbs.
    pub verbs: Vec<&'static str>,
    /// Where the rule is granted.
    #[serde(skip)]
    pub scope: Scope,
    /// Why the controller needs it (`rbac --explain`).
    #[serde(skip)]
    pub why: &'static str,
}

const OOOI: &str = "hostedcluster.densityops.com";

fn rule(
    scope: Scope,
    group: &'static str,
    resources: &[&'static str],
    verbs: &[&'static str],
    why: &'static str,
) -> Rule {
    Rule {
        api_groups: vec![group],
        resources: resources.to_vec(),
        resource_names: Vec::new(),
        verbs: verbs.to_vec(),
        scope,
        why,
    }
}

/// Every rule the controller needs, in a fixed order; [`Rule::why`] says
/// why each is there.
pub fn rules() -> Vec<Rule> {
    use Scope::{Cluster, HostedClusters, Release, Watched};
    const READ: &[&str] = &["get", "list", "watch"];
    const WRITE: &[&str] = &["get", "list", "watch", "create", "patch", "delete"];
    vec![
        rule(
            Watched,
            OOOI,
            &["infras", "infraclusterattachments"],
            READ_PATCH,
            "The user's resources: watched and read; the cleanup finalizer is added and removed by JSON patch.",
        ),
        rule(
            Watched,
            OOOI,
            &["dhcpservers", "dnsservers", "proxyservers"],
            WRITE,
            "The derived resources: written by server-side apply (patch, and create because apply creates), watched, deleted when a component is disabled.",
        ),
        rule(
            Watched,
            OOOI,
            &[
                "infras/status",
                "infraclusterattachments/status",
                "dhcpservers/status",
                "dnsservers/status",
                "proxyservers/status",
            ],
            &["get", "patch"],
            "Every status is written through the status subresource.",
        ),
        rule(
            Watched,
            OOOI,
            &["infras/finalizers", "infraclusterattachments/finalizers"],
            &["update"],
            "Children carry owner references with blockOwnerDeletion, which the OwnerReferencesPermissionEnforcement admission plugin (on in OpenShift) allows only with update on the owner's finalizers.",
        ),
        rule(
            Watched,
            "apps",
            &["deployments"],
            WRITE,
            "The components' Deployments: applied, watched for readiness and drift, deleted when a component is disabled.",
        ),
        rule(
            Watched,
            "",
            &[
                "configmaps",
                "services",
                "serviceaccounts",
                "persistentvolumeclaims",
            ],
            WRITE,
            "The components' ConfigMaps (configs, the filter module), Services, ServiceAccounts and the DHCP lease volume: applied, watched, deleted when a component is disabled.",
        ),
        rule(
            Release,
            "",
            &["configmaps"],
            READ,
            "The filter's source ConfigMap (the chart's or the bundle's) in the controller's own namespace: read and watched by name for new modules to roll out.",
        ),
        rule(
            Watched,
            "",
            &["secrets"],
            WRITE,
            "Secrets in the components' namespace only: the push token and the DHCP pair token (created once, random), and each proxy's Envoy config (it holds the push token). Watched by the label app.kubernetes.io/managed-by=oooi-controller; RBAC cannot limit list or watch by label, so with --watch-namespace this rule is a Role in that one namespace.",
        ),
        rule(
            HostedClusters,
            "",
            &["secrets"],
            &["get"],
            "The admin kubeconfig of a HostedCluster whose attachment enables apps ingress: read by the name in its status.kubeconfig, in the HostedCluster's namespace (get only: never listed or watched).",
        ),
        rule(
            Watched,
            "",
            &["pods"],
            READ,
            "The Envoy replicas, to push the routing table to each (found by label).",
        ),
        rule(
            Watched,
            "policy",
            &["poddisruptionbudgets"],
            WRITE,
            "The disruption budget of each replicated component.",
        ),
        rule(
            Cluster,
            "networking.k8s.io",
            &["networkpolicies"],
            WRITE,
            "NetworkPolicies in the hosted control-plane namespaces (clusters-<name>, any namespace) letting the proxy in, and beside each DHCP, DNS and proxy server the policy admitting each port of its pods from who needs it.",
        ),
        rule(
            Cluster,
            crate::plan::infra::cudn::GROUP,
            &[crate::plan::infra::cudn::PLURAL],
            &["list", "create", "patch", "delete"],
            "OVN-Kubernetes ClusterUserDefinedNetworks (cluster-scoped) an Infra asks the controller to own: its own found by label (list), created, applied over, deleted.",
        ),
        rule(
            Cluster,
            "events.k8s.io",
            &["events"],
            &["create", "patch"],
            "Events on transitions, recorded through events.k8s.io/v1 on the objects they concern.",
        ),
        rule(
            Cluster,
            "",
            &["events"],
            &["create", "patch"],
            "Events through the core API (older clients of the event recorder).",
        ),
        rule(
            Release,
            "coordination.k8s.io",
            &["leases"],
            &["get", "create", "patch"],
            "Leader election: the controller's Lease in its own namespace (get, create when absent, patch to take and renew).",
        ),
        rule(
            Cluster,
            "hypershift.openshift.io",
            &["hostedclusters", "nodepools"],
            READ,
            "Observed state (optional API): the hosted clusters and their NodePools, for worker addresses and the kubeconfig Secret's name.",
        ),
        rule(
            Cluster,
            "cluster.x-k8s.io",
            &["machines"],
            READ,
            "Observed state (optional API): CAPI Machines, the workers' addresses.",
        ),
        rule(
            Cluster,
            "kubevirt.io",
            &["virtualmachineinstances"],
            READ,
            "Observed state (optional API): KubeVirt VMIs, the workers' MACs and VLAN addresses.",
        ),
        rule(
            Cluster,
            "",
            &["namespaces"],
            &["get"],
            "The Pod Security label of a component's namespace, read only when its pods need more than the restricted level (an address agent), to report a namespace that refuses them.",
        ),
        rule(
            Cluster,
            "apiextensions.k8s.io",
            &["customresourcedefinitions"],
            READ,
            "Which of the optional APIs (HyperShift, CAPI, KubeVirt, OVN-Kubernetes) exist.",
        ),
    ]
}

const READ_PATCH: &[&str] = &["get", "list", "watch", "patch"];

/// The rules for a controller run with `--openshift-scc` or without.
///
/// Only with the flag does the controller write RBAC objects: one Role and
/// RoleBinding per component granting `use` of its SCC. Without it the
/// controller holds no permission on `roles` or `rolebindings` at all (the
/// address agent makes no API request, so nothing else is granted).
///
/// With the flag the controller only ever *uses* SecurityContextConstraints
/// and reads the address agent's by name: the install creates that SCC (the
/// chart, or an administrator under OLM), because an SCC's `users` and
/// `groups` grant its use by themselves, so a controller allowed to create
/// or patch one could give itself or anyone privileged pods.
pub fn rules_for(openshift_scc: bool) -> Vec<Rule> {
    let mut out = rules();
    if openshift_scc {
        out.push(rule(
            Scope::Watched,
            "rbac.authorization.k8s.io",
            &["roles", "rolebindings"],
            &["get", "list", "watch", "create", "patch"],
            "--openshift-scc: one Role and RoleBinding per component granting use of the one SCC its pods need: applied by server-side apply (patch, and create because apply creates), watched; removed by garbage collection with the component (owner references). No bind or escalate: the controller holds every permission it grants.",
        ));
        let mut names: Vec<&'static str> = crate::plan::workload::scc::CANDIDATES
            .iter()
            .map(|s| s.name)
            .collect();
        names.sort_unstable();
        out.push(Rule {
            resource_names: names,
            ..rule(
                Scope::Cluster,
                crate::plan::workload::scc::SCC_GROUP,
                &["securitycontextconstraints"],
                &["use"],
                "--openshift-scc: a Role can grant only what its author holds: use of exactly the SCCs the controller may grant.",
            )
        });
        out.push(Rule {
            resource_names: vec![crate::plan::workload::scc::ADDRESS_AGENT_SCC],
            ..rule(
                Scope::Cluster,
                crate::plan::workload::scc::SCC_GROUP,
                &["securitycontextconstraints"],
                &["get"],
                "--openshift-scc: whether the address agent's SCC, which the install creates, exists (read by name; a component whose pods need it reports PodsNotAdmitted while it is missing).",
            )
        });
    }
    out
}

/// Verbs that let their holder grant privilege it does not hold, whatever
/// the resource: no rule of any install mode may carry one.
pub const PRIVILEGE_GRANTING_VERBS: &[&str] = &["bind", "escalate", "impersonate", "*"];

/// What is wrong with `roles` for a controller that must not be able to
/// grant itself privilege: a privilege-granting verb, a wildcard, any
/// writing verb on SecurityContextConstraints, cluster-wide roles or
/// bindings, or Secret access beyond `get` in a ClusterRole (the one
/// documented exception: the HostedClusters' kubeconfig, read by name when
/// their namespaces are not listed). Empty: none.
pub fn privilege_findings(roles: &[RoleRules]) -> Vec<String> {
    let mut out = Vec::new();
    for role in roles {
        let at = match &role.namespace {
            Some(ns) => format!("{} in {ns}", role.kind),
            None => role.kind.to_string(),
        };
        for r in &role.rules {
            let what = format!("{at}: {:?} {:?} {:?}", r.api_groups, r.resources, r.verbs);
            for list in [&r.api_groups, &r.resources] {
                if list.contains(&"*") {
                    out.push(format!("{what}: wildcard"));
                }
            }
            for verb in &r.verbs {
                if PRIVILEGE_GRANTING_VERBS.contains(verb) {
                    out.push(format!("{what}: verb {verb}"));
                }
            }
            let writes = r
                .verbs
                .iter()
                .any(|v| !matches!(*v, "get" | "list" | "watch" | "use"));
            if r.resources.contains(&"securitycontextconstraints") && writes {
                out.push(format!("{what}: writes SecurityContextConstraints"));
            }
            if r.api_groups.contains(&"rbac.authorization.k8s.io")
                && r.resources.iter().any(|res| res.starts_with("cluster"))
                && writes
            {
                out.push(format!("{what}: writes cluster-wide RBAC"));
            }
            if role.kind == "ClusterRole"
                && r.api_groups.contains(&"")
                && r.resources.contains(&"secrets")
                && r.verbs.iter().any(|v| *v != "get")
            {
                out.push(format!("{what}: Secrets beyond get, cluster-wide"));
            }
        }
    }
    out
}

/// How the rules are laid out into a ClusterRole and Roles, as the chart
/// installs them.
#[derive(Debug, Clone, Default)]
pub struct Layout {
    /// `run --openshift-scc`.
    pub openshift_scc: bool,
    /// `run --watch-namespace`: the [`Scope::Watched`] rules become a Role
    /// there.
    pub watch_namespace: Option<String>,
    /// The controller's namespace (the leader-election Role).
    pub release_namespace: String,
    /// Namespaces of the HostedClusters whose kubeconfig is read: the
    /// [`Scope::HostedClusters`] rules become a Role in each; empty: the
    /// ClusterRole.
    pub hosted_cluster_namespaces: Vec<String>,
}

/// A ClusterRole (no namespace) or a Role, with its rules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RoleRules {
    /// `ClusterRole` or `Role`.
    pub kind: &'static str,
    /// The Role's namespace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its rules.
    pub rules: Vec<Rule>,
}

/// The ClusterRole and the Roles of `layout`, in a fixed order: the
/// ClusterRole, the watched namespace's Role, the HostedCluster namespaces'
/// Roles, the release namespace's Role. Empty ones are left out.
pub fn layout(layout: &Layout) -> Vec<RoleRules> {
    let all = rules_for(layout.openshift_scc);
    let pick = |f: &dyn Fn(Scope) -> bool| -> Vec<Rule> {
        all.iter().filter(|r| f(r.scope)).cloned().collect()
    };
    let watched_in_cluster = layout.watch_namespace.is_none();
    let hosted_in_cluster = layout.hosted_cluster_namespaces.is_empty();
    let mut out = vec![RoleRules {
        kind: "ClusterRole",
        namespace: None,
        rules: pick(&|s| match s {
            Scope::Cluster => true,
            Scope::Watched => watched_in_cluster,
            Scope::HostedClusters => hosted_in_cluster,
            Scope::Release => false,
        }),
    }];
    if let Some(ns) = &layout.watch_namespace {
        out.push(RoleRules {
            kind: "Role",
            namespace: Some(ns.clone()),
            rules: pick(&|s| s == Scope::Watched),
        });
    }
    let mut hosted = layout.hosted_cluster_namespaces.clone();
    hosted.sort();
    hosted.dedup();
    for ns in hosted {
        out.push(RoleRules {
            kind: "Role",
            namespace: Some(ns),
            rules: pick(&|s| s == Scope::HostedClusters),
        });
    }
    out.push(RoleRules {
        kind: "Role",
        namespace: Some(layout.release_namespace.clone()),
        rules: pick(&|s| s == Scope::Release),
    });
    out.retain(|r| !r.rules.is_empty());
    out
}

/// [`layout`] as multi-document YAML; with `explain`, each rule is preceded
/// by a comment saying why the controller needs it (still valid YAML, the
/// same documents).
pub fn layout_yaml(l: &Layout, explain: bool) -> anyhow::Result<String> {
    roles_yaml(&layout(l), explain)
}

/// ClusterRoles and Roles as multi-document YAML `{kind, namespace, rules}`
/// (see [`layout_yaml`]).
pub fn roles_yaml(roles: &[RoleRules], explain: bool) -> anyhow::Result<String> {
    let mut s = String::new();
    for role in roles {
        s.push_str("---\n");
        s.push_str(&format!("kind: {}\n", role.kind));
        if let Some(ns) = &role.namespace {
            s.push_str(&format!("namespace: {ns}\n"));
        }
        s.push_str("rules:\n");
        for r in &role.rules {
            if explain {
                for line in wrap(r.why, 76) {
                    s.push_str(&format!("  # {line}\n"));
                }
            }
            let body = serde_saphyr::to_string(r)?;
            for (i, line) in body.lines().enumerate() {
                let lead = if i == 0 { "- " } else { "  " };
                s.push_str(&format!("  {lead}{line}\n"));
            }
        }
    }
    Ok(s)
}

/// Every rule as a Markdown table: API group, resources (with the names a
/// rule is limited to), verbs, and where each install grants it: the chart
/// watching every namespace, the chart with `controller.watchNamespace`,
/// and OLM (OwnNamespace or SingleNamespace; AllNamespaces makes a
/// ClusterRole of `permissions`). docs/installation.md carries this table;
/// the docs test compares it with `oooi-controller rbac --markdown`.
pub fn rules_markdown() -> String {
    let plain = rules_for(false);
    let mut out = String::from(
        "| API group | resources | verbs | chart | chart with `controller.watchNamespace` | OLM (`OwnNamespace`, `SingleNamespace`) |\n\
         | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in rules_for(true) {
        let group = match r.api_groups.as_slice() {
            [""] => "core".to_string(),
            groups => groups.join(", "),
        };
        let mut resources = r.resources.join(", ");
        if !r.resource_names.is_empty() {
            resources.push_str(&format!(" ({})", r.resource_names.join(", ")));
        }
        if !plain.contains(&r) {
            resources.push_str(", OpenShift only");
        }
        let (chart, watched, olm) = match r.scope {
            Scope::Cluster => ("ClusterRole", "ClusterRole", "clusterPermissions"),
            Scope::Watched => (
                "ClusterRole",
                "Role in the watched namespace",
                "permissions: Role in the target namespace",
            ),
            Scope::Release => (
                "Role in the release namespace",
                "Role in the release namespace",
                "permissions: Role in the operator's namespace",
            ),
            Scope::HostedClusters => (
                "ClusterRole, or a Role in each of `rbac.hostedClusterNamespaces`",
                "ClusterRole, or a Role in each of `rbac.hostedClusterNamespaces`",
                "clusterPermissions",
            ),
        };
        out.push_str(&format!(
            "| {group} | {resources} | {} | {chart} | {watched} | {olm} |\n",
            r.verbs.join(", ")
        ));
    }
    out
}

/// An OLM install mode the bundle supports (the OperatorGroup's target
/// namespaces). MultiNamespace is not offered: the controller watches one
/// namespace or all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum InstallMode {
    /// Every namespace: OLM turns the CSV's `permissions` into a
    /// ClusterRole, so the component namespaces' rules (Secrets among them)
    /// are cluster-wide.
    #[value(name = "AllNamespaces")]
    AllNamespaces,
    /// The operator's own namespace: Infras and their components live there.
    #[value(name = "OwnNamespace")]
    OwnNamespace,
    /// One other namespace: the component namespaces' rules are Roles there
    /// (and in the operator's namespace, where OLM creates them first).
    #[value(name = "SingleNamespace")]
    SingleNamespace,
}

impl InstallMode {
    /// Every mode, in the CSV's order.
    pub const ALL: [InstallMode; 3] = [
        InstallMode::OwnNamespace,
        InstallMode::SingleNamespace,
        InstallMode::AllNamespaces,
    ];

    /// The name in `installModes`.
    pub fn as_str(self) -> &'static str {
        match self {
            InstallMode::AllNamespaces => "AllNamespaces",
            InstallMode::OwnNamespace => "OwnNamespace",
            InstallMode::SingleNamespace => "SingleNamespace",
        }
    }
}

/// The CSV's `permissions` (namespaced: the component namespace's and the
/// controller's own rules) and `clusterPermissions` (the rest) of the
/// controller run with `--openshift-scc`.
pub fn csv_permissions() -> (Vec<Rule>, Vec<Rule>) {
    rules_for(true)
        .into_iter()
        .partition(|r| matches!(r.scope, Scope::Watched | Scope::Release))
}

/// The ClusterRole and Roles OLM creates from the CSV in `mode`, for an
/// operator in `operator_namespace` whose OperatorGroup targets `target`
/// (SingleNamespace; the other modes ignore it). OLM makes a Role of
/// `permissions` in the operator's namespace and copies it into each target
/// namespace; with AllNamespaces it makes a ClusterRole of them instead of
/// the copies.
pub fn olm_layout(mode: InstallMode, operator_namespace: &str, target: &str) -> Vec<RoleRules> {
    let (namespaced, cluster) = csv_permissions();
    let mut cluster_role = cluster;
    let mut roles = Vec::new();
    match mode {
        InstallMode::AllNamespaces => cluster_role.extend(namespaced.iter().cloned()),
        InstallMode::OwnNamespace => {}
        InstallMode::SingleNamespace => roles.push(RoleRules {
            kind: "Role",
            namespace: Some(target.to_string()),
            rules: namespaced.clone(),
        }),
    }
    roles.push(RoleRules {
        kind: "Role",
        namespace: Some(operator_namespace.to_string()),
        rules: namespaced,
    });
    let mut out = vec![RoleRules {
        kind: "ClusterRole",
        namespace: None,
        rules: cluster_role,
    }];
    out.extend(roles);
    out
}

fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in text.split_whitespace() {
        let line = lines.last_mut().expect("never empty");
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(word.to_string());
        } else {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
    }
    lines
}

/// True when some rule of [`rules`] grants `verb` on `resource` (with
/// `/subresource`) in `group`.
pub fn allows(group: &str, resource: &str, verb: &str) -> bool {
    allows_in(&rules(), group, resource, verb)
}

/// True when some rule of `rules` grants `verb` on `resource` in `group`.
pub fn allows_in(rules: &[Rule], group: &str, resource: &str, verb: &str) -> bool {
    rules.iter().any(|r| {
        r.api_groups.contains(&group) && r.resources.contains(&resource) && r.verbs.contains(&verb)
    })
}

/// The authorization attributes Kubernetes derives from a request: API
/// group, resource (with `/subresource`) and verb. `None` for non-resource
/// paths (`/version`, `/apis` discovery), which every authenticated client
/// may read.
pub fn request_attributes(method: &str, path_and_query: &str) -> Option<(String, String, String)> {
    let (path, query) = match path_and_query.split_once('?') {
        Some((p, q)) => (p, q),
        None => (path_and_query, ""),
    };
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", _version, rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return None,
    };
    // namespaces/<ns>/<resource>[/<name>[/<sub>]] or <resource>[/<name>[/<sub>]]
    let rest = match rest {
        ["namespaces", _ns, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let (resource, name, sub) = match rest {
        [resource] => (*resource, None, None),
        [resource, name] => (*resource, Some(*name), None),
        [resource, name, sub] => (*resource, Some(*name), Some(*sub)),
        _ => return None,
    };
    let watch = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    let verb = match (method, name.is_some()) {
        ("GET", _) if watch => "watch",
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => return None,
    };
    let resource = match sub {
        Some(s) => format!("{resource}/{s}"),
        None => resource.to_string(),
    };
    Some((group.to_string(), resource, verb.to_string()))
}

/// Every rule as one YAML list (all scopes together).
pub fn rules_yaml() -> anyhow::Result<String> {
    Ok(serde_saphyr::to_string(&rules_for(false))?)
}

/// The SCC the install creates for pods with an address agent (YAML): what
/// the chart renders on OpenShift and what an administrator applies under
/// OLM (`oooi-controller rbac --sccs | oc apply -f -`).
pub fn sccs_yaml() -> anyhow::Result<String> {
    Ok(format!(
        "---\n{}",
        serde_saphyr::to_string(&crate::plan::workload::scc::address_agent_scc())?
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_attributes_follow_kubernetes_request_info() {
        let cases = [
            (
                "GET",
                "/apis/hostedcluster.densityops.com/v1alpha1/namespaces/ns/infras?&watch=true&timeoutSeconds=290",
                ("hostedcluster.densityops.com", "infras", "watch"),
            ),
            (
                "GET",
                "/apis/hostedcluster.densityops.com/v1alpha1/infras?",
                ("hostedcluster.densityops.com", "infras", "list"),
            ),
            (
                "PATCH",
                "/apis/hostedcluster.densityops.com/v1alpha1/namespaces/ns/proxyservers/p/status?&fieldManager=oooi-controller",
                (
                    "hostedcluster.densityops.com",
                    "proxyservers/status",
                    "patch",
                ),
            ),
            (
                "GET",
                "/api/v1/namespaces/ns/secrets/infra-proxy-push-token",
                ("", "secrets", "get"),
            ),
            (
                "POST",
                "/api/v1/namespaces/ns/secrets?",
                ("", "secrets", "create"),
            ),
            (
                "DELETE",
                "/apis/networking.k8s.io/v1/namespaces/cp/networkpolicies/x",
                ("networking.k8s.io", "networkpolicies", "delete"),
            ),
        ];
        for (method, path, (g, r, v)) in cases {
            assert_eq!(
                request_attributes(method, path),
                Some((g.to_string(), r.to_string(), v.to_string())),
                "{method} {path}"
            );
        }
        assert_eq!(request_attributes("GET", "/apis"), None);
        assert_eq!(request_attributes("GET", "/version"), None);
    }

    #[test]
    fn contract_permissions_are_granted_and_nothing_cluster_wide_is_written() {
        assert!(allows(OOOI, "infras", "patch"));
        assert!(allows(OOOI, "proxyservers/status", "patch"));
        assert!(allows("coordination.k8s.io", "leases", "patch"));
        assert!(!allows("coordination.k8s.io", "leases", "update"));
        assert!(!allows("coordination.k8s.io", "leases", "delete"));
        assert!(allows("cluster.x-k8s.io", "machines", "watch"));
        assert!(!allows("cluster.x-k8s.io", "machines", "patch"));
        assert!(!allows("", "pods", "delete"));
        assert!(allows(
            "k8s.ovn.org",
            "clusteruserdefinednetworks",
            "create"
        ));
        assert!(allows(
            "k8s.ovn.org",
            "clusteruserdefinednetworks",
            "delete"
        ));
        assert!(!allows("k8s.ovn.org", "userdefinednetworks", "create"));
        assert!(!allows(
            "rbac.authorization.k8s.io",
            "clusterroles",
            "create"
        ));
        let yaml = rules_yaml().unwrap();
        assert!(yaml.contains("apiGroups"), "{yaml}");
        assert!(!yaml.contains("securitycontextconstraints"), "{yaml}");
    }

    #[test]
    fn openshift_scc_adds_use_of_the_grantable_sccs_only() {
        let with = rules_for(true);
        assert!(allows_in(
            &with,
            "rbac.authorization.k8s.io",
            "roles",
            "create"
        ));
        assert!(allows_in(
            &with,
            "rbac.authorization.k8s.io",
            "rolebindings",
            "patch"
        ));
        assert!(!allows_in(
            &with,
            "rbac.authorization.k8s.io",
            "clusterroles",
            "create"
        ));
        // Without --openshift-scc no RBAC object is read or written.
        for verb in ["get", "list", "watch", "create", "patch", "delete"] {
            for res in ["roles", "rolebindings"] {
                assert!(
                    !allows("rbac.authorization.k8s.io", res, verb),
                    "{res} {verb}"
                );
            }
        }
        // With it, the SCC grants are applied but never deleted or
        // updated by the controller (garbage collection removes them).
        for verb in ["update", "delete"] {
            assert!(!allows_in(
                &with,
                "rbac.authorization.k8s.io",
                "roles",
                verb
            ));
        }
        assert!(!allows_in(
            &with,
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            "create"
        ));
        let scc = with
            .iter()
            .find(|r| r.resources == ["securitycontextconstraints"])
            .unwrap();
        assert_eq!(scc.verbs, ["use"]);
        assert_eq!(
            scc.resource_names,
            ["nonroot-v2", "oooi-address-agent", "restricted-v2"]
        );
        assert!(!scc.resource_names.contains(&"privileged"));
        // The agent's SCC is read by name, never written: the install makes it.
        let sccs: Vec<&Rule> = with
            .iter()
            .filter(|r| r.resources == ["securitycontextconstraints"])
            .collect();
        assert_eq!(sccs.len(), 2);
        assert_eq!(sccs[1].resource_names, ["oooi-address-agent"]);
        assert_eq!(sccs[1].verbs, ["get"]);
        let yaml = layout_yaml(
            &Layout {
                openshift_scc: true,
                ..Layout::default()
            },
            false,
        )
        .unwrap();
        assert!(yaml.contains("resourceNames"), "{yaml}");
        assert!(sccs_yaml().unwrap().contains("oooi-address-agent"));
    }

    fn layout_of(watch: Option<&str>, hosted: &[&str]) -> Vec<RoleRules> {
        layout(&Layout {
            openshift_scc: false,
            watch_namespace: watch.map(str::to_string),
            release_namespace: "oooi-system".to_string(),
            hosted_cluster_namespaces: hosted.iter().map(|s| s.to_string()).collect(),
        })
    }

    fn grants(role: &RoleRules, resource: &str, verb: &str) -> bool {
        role.rules
            .iter()
            .any(|r| r.resources.contains(&resource) && r.verbs.contains(&verb))
    }

    #[test]
    fn secrets_are_listed_and_written_only_in_the_watched_namespace_when_it_is_set() {
        let roles = layout_of(Some("hcp-infra"), &[]);
        let cluster = &roles[0];
        assert_eq!(cluster.kind, "ClusterRole");
        for verb in ["list", "watch", "create", "patch", "delete"] {
            assert!(
                !grants(cluster, "secrets", verb),
                "ClusterRole grants {verb} on secrets"
            );
        }
        // Only the named kubeconfig read stays cluster-wide.
        assert!(grants(cluster, "secrets", "get"));
        let watched = roles
            .iter()
            .find(|r| r.namespace.as_deref() == Some("hcp-infra"))
            .expect("a Role in the watched namespace");
        for verb in ["get", "list", "watch", "create", "patch", "delete"] {
            assert!(
                grants(watched, "secrets", verb),
                "watched Role lacks {verb} on secrets"
            );
        }
        // Without --watch-namespace the same rules are cluster-wide.
        let all = layout_of(None, &[]);
        assert!(grants(&all[0], "secrets", "list"));
        assert!(
            all.iter()
                .all(|r| r.namespace.as_deref() != Some("hcp-infra"))
        );
    }

    #[test]
    fn kubeconfig_reads_become_a_role_per_listed_hosted_cluster_namespace() {
        let roles = layout_of(Some("hcp-infra"), &["clusters", "clusters", "clusters-b"]);
        assert!(!grants(&roles[0], "secrets", "get"), "{:?}", roles[0]);
        let hosted: Vec<&RoleRules> = roles
            .iter()
            .filter(|r| {
                r.namespace
                    .as_deref()
                    .is_some_and(|n| n.starts_with("clusters"))
            })
            .collect();
        assert_eq!(hosted.len(), 2, "{hosted:?}");
        for role in hosted {
            assert_eq!(role.rules.len(), 1);
            assert_eq!(role.rules[0].resources, ["secrets"]);
            assert_eq!(role.rules[0].verbs, ["get"]);
        }
    }

    #[test]
    fn leader_election_lease_is_a_role_in_the_release_namespace_only() {
        let roles = layout_of(None, &[]);
        let release = roles.last().expect("roles");
        assert_eq!(release.namespace.as_deref(), Some("oooi-system"));
        let leases: Vec<&Rule> = release
            .rules
            .iter()
            .filter(|r| r.resources == ["leases"])
            .collect();
        assert_eq!(leases.len(), 1);
        assert_eq!(leases[0].verbs, ["get", "create", "patch"]);
        // The filter's source ConfigMap is only read there.
        let cms: Vec<&Rule> = release
            .rules
            .iter()
            .filter(|r| r.resources == ["configmaps"])
            .collect();
        assert_eq!(cms.len(), 1);
        assert_eq!(cms[0].verbs, ["get", "list", "watch"]);
        assert!(!grants(&roles[0], "leases", "patch"));
    }

    #[test]
    fn a_watched_namespace_takes_every_namespaced_kind_the_components_use() {
        let roles = layout_of(Some("hcp-infra"), &["clusters"]);
        let cluster = &roles[0];
        for kind in [
            "configmaps",
            "services",
            "serviceaccounts",
            "persistentvolumeclaims",
            "secrets",
            "deployments",
            "pods",
            "roles",
            "rolebindings",
        ] {
            assert!(
                !cluster.rules.iter().any(|r| r.resources.contains(&kind)),
                "{kind} is cluster-wide"
            );
        }
    }

    /// Every layout the chart and the bundle can install: the chart's flag
    /// combinations and OLM's install modes.
    fn every_install() -> Vec<(String, Vec<RoleRules>, bool)> {
        let mut out = Vec::new();
        for scc in [false, true] {
            for watch in [None, Some("hcp-infra")] {
                for hosted in [&[][..], &["clusters"][..]] {
                    let l = Layout {
                        openshift_scc: scc,
                        watch_namespace: watch.map(str::to_string),
                        release_namespace: "oooi-system".to_string(),
                        hosted_cluster_namespaces: hosted.iter().map(|s| s.to_string()).collect(),
                    };
                    out.push((
                        format!("chart scc={scc} watch={watch:?} hosted={hosted:?}"),
                        layout(&l),
                        watch.is_none(),
                    ));
                }
            }
        }
        for mode in InstallMode::ALL {
            out.push((
                format!("OLM {}", mode.as_str()),
                olm_layout(mode, "oooi-system", "hcp-infra"),
                mode == InstallMode::AllNamespaces,
            ));
        }
        out
    }

    #[test]
    fn no_install_mode_lets_the_controller_grant_itself_privilege() {
        for (name, roles, all_namespaces) in every_install() {
            let findings: Vec<String> = privilege_findings(&roles)
                .into_iter()
                // Watching every namespace means writing the components'
                // Secrets in any of them: the documented exception.
                .filter(|f| !(all_namespaces && f.ends_with("Secrets beyond get, cluster-wide")))
                .collect();
            assert!(findings.is_empty(), "{name}: {findings:#?}");
        }
    }

    #[test]
    fn privilege_findings_name_each_way_to_grant_privilege() {
        let bad = |verbs: &[&'static str], group: &'static str, res: &'static str| RoleRules {
            kind: "ClusterRole",
            namespace: None,
            rules: vec![rule(Scope::Cluster, group, &[res], verbs, "test")],
        };
        for (role, want) in [
            (
                bad(
                    &["create"],
                    "security.openshift.io",
                    "securitycontextconstraints",
                ),
                "writes SecurityContextConstraints",
            ),
            (
                bad(
                    &["patch"],
                    "security.openshift.io",
                    "securitycontextconstraints",
                ),
                "writes SecurityContextConstraints",
            ),
            (
                bad(&["bind"], "rbac.authorization.k8s.io", "roles"),
                "verb bind",
            ),
            (
                bad(&["escalate"], "rbac.authorization.k8s.io", "roles"),
                "verb escalate",
            ),
            (
                bad(&["impersonate"], "", "serviceaccounts"),
                "verb impersonate",
            ),
            (bad(&["*"], "", "pods"), "verb *"),
            (
                bad(
                    &["create"],
                    "rbac.authorization.k8s.io",
                    "clusterrolebindings",
                ),
                "writes cluster-wide RBAC",
            ),
            (
                bad(&["list"], "", "secrets"),
                "Secrets beyond get, cluster-wide",
            ),
        ] {
            let found = privilege_findings(&[role]);
            assert!(found.iter().any(|f| f.contains(want)), "{want}: {found:?}");
        }
        assert!(privilege_findings(&[bad(&["get"], "", "secrets")]).is_empty());
        assert!(
            privilege_findings(&[bad(
                &["use"],
                "security.openshift.io",
                "securitycontextconstraints"
            )])
            .is_empty()
        );
    }

    #[test]
    fn namespaced_olm_modes_keep_secrets_and_the_lease_in_roles() {
        let (namespaced, cluster) = csv_permissions();
        assert!(
            namespaced
                .iter()
                .any(|r| r.resources == ["leases"] && r.verbs == ["get", "create", "patch"])
        );
        assert!(!cluster.iter().any(|r| r.resources == ["leases"]));
        for mode in [InstallMode::OwnNamespace, InstallMode::SingleNamespace] {
            let roles = olm_layout(mode, "oooi-system", "hcp-infra");
            assert_eq!(roles[0].kind, "ClusterRole");
            assert!(!grants(&roles[0], "secrets", "list"), "{mode:?}");
            assert!(!grants(&roles[0], "secrets", "create"), "{mode:?}");
            let namespaces: Vec<&str> = roles[1..]
                .iter()
                .filter_map(|r| r.namespace.as_deref())
                .collect();
            match mode {
                InstallMode::SingleNamespace => {
                    assert_eq!(namespaces, ["hcp-infra", "oooi-system"])
                }
                _ => assert_eq!(namespaces, ["oooi-system"]),
            }
            for r in &roles[1..] {
                assert!(grants(r, "secrets", "create"), "{mode:?}");
            }
        }
        let all = olm_layout(InstallMode::AllNamespaces, "oooi-system", "");
        assert!(grants(&all[0], "secrets", "list"));
    }

    #[test]
    fn leases_are_the_controllers_own_alone_in_every_install() {
        // The address agent makes no API request: the controller grants it
        // nothing, so it holds no Lease verb beyond its leader election in
        // its own namespace, in every install mode.
        for (name, roles, _) in every_install() {
            for role in &roles {
                for r in role
                    .rules
                    .iter()
                    .filter(|r| r.resources.contains(&"leases"))
                {
                    // OLM copies `permissions` into the target namespaces
                    // (or a ClusterRole); the chart keeps it in its own.
                    if name.starts_with("chart") {
                        assert_eq!(role.namespace.as_deref(), Some("oooi-system"), "{name}");
                    }
                    assert_eq!(r.scope, Scope::Release, "{name}");
                    assert_eq!(r.verbs, ["get", "create", "patch"], "{name}");
                }
                let scc = name.contains("scc=true") || name.starts_with("OLM");
                for res in ["roles", "rolebindings"] {
                    assert_eq!(
                        grants(role, res, "create"),
                        scc && role.rules.iter().any(|r| r.scope == Scope::Watched),
                        "{name}: {res} in {:?}",
                        role.namespace
                    );
                    for verb in ["update", "delete", "bind", "escalate"] {
                        assert!(!grants(role, res, verb), "{name}: {res} {verb}");
                    }
                }
            }
        }
    }

    #[test]
    fn no_rule_grants_wildcards_bind_escalate_or_impersonate() {
        for r in rules_for(true) {
            for list in [&r.api_groups, &r.resources, &r.verbs] {
                assert!(!list.contains(&"*"), "{r:?}");
            }
            for verb in ["bind", "escalate", "impersonate"] {
                assert!(!r.verbs.contains(&verb), "{r:?}");
            }
        }
    }

    #[test]
    fn explain_gives_a_reason_for_every_rule_and_the_same_documents() {
        for scc in [false, true] {
            let l = Layout {
                openshift_scc: scc,
                watch_namespace: Some("hcp-infra".to_string()),
                release_namespace: "oooi-system".to_string(),
                hosted_cluster_namespaces: vec!["clusters".to_string()],
            };
            let plain = layout_yaml(&l, false).unwrap();
            let explained = layout_yaml(&l, true).unwrap();
            let parse = |s: &str| -> Vec<serde_json::Value> {
                serde_saphyr::from_multiple(s).expect("rbac output is YAML")
            };
            assert_eq!(parse(&plain), parse(&explained));
            // One comment block before every rule.
            let mut rules = 0;
            let mut commented = 0;
            let lines: Vec<&str> = explained.lines().collect();
            for (i, line) in lines.iter().enumerate() {
                if line.starts_with("  - ") {
                    rules += 1;
                    if i > 0 && lines[i - 1].starts_with("  # ") {
                        commented += 1;
                    }
                }
            }
            assert_eq!(rules, rules_for(scc).len(), "{explained}");
            assert_eq!(rules, commented, "{explained}");
        }
        assert!(rules_for(true).iter().all(|r| r.why.len() > 20));
    }
}
