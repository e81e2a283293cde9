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
//! only.

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
        // The filter's source ConfigMap lives in the release namespace,
        // which may differ from the watched one: kept cluster-wide.
        rule(
            Cluster,
            "",
            &[
                "configmaps",
                "services",
                "serviceaccounts",
                "persistentvolumeclaims",
            ],
            WRITE,
            "The components' ConfigMaps (configs, the filter module), Services, ServiceAccounts and the DHCP lease volume: applied, watched, deleted when a component is disabled; the filter's source ConfigMap is read in the controller's own namespace.",
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
            "NetworkPolicies in the hosted control-plane namespaces (clusters-<name>, any namespace) letting the proxy in, and the push API's policy beside each proxy.",
        ),
        rule(
            Cluster,
            crate::plan::cudn::GROUP,
            &[crate::plan::cudn::PLURAL],
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
            Watched,
            "coordination.k8s.io",
            &["leases"],
            &["get", "list", "watch", "create", "update", "delete"],
            "The address agent's Lease Role: the controller creates a Role granting the agent get/create/update on leases in the component namespace, and may only grant what it holds; it also watches and removes the agents' Leases.",
        ),
        rule(
            Watched,
            "rbac.authorization.k8s.io",
            &["roles", "rolebindings"],
            &[
                "get", "list", "watch", "create", "patch", "update", "delete",
            ],
            "The address agent's Lease Role and RoleBinding per DNS and proxy server (and with --openshift-scc the SCC grants): applied by server-side apply (patch), watched, deleted with the component (owner references). No bind or escalate: the controller holds every permission it grants.",
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
            "apiextensions.k8s.io",
            &["customresourcedefinitions"],
            READ,
            "Which of the optional APIs (HyperShift, CAPI, KubeVirt, OVN-Kubernetes) exist.",
        ),
    ]
}

const READ_PATCH: &[&str] = &["get", "list", "watch", "patch"];

/// The rules for a controller run with `--openshift-scc` or without.
pub fn rules_for(openshift_scc: bool) -> Vec<Rule> {
    let mut out = rules();
    if openshift_scc {
        let mut names: Vec<&'static str> = crate::plan::scc::CANDIDATES
            .iter()
            .map(|s| s.name)
            .collect();
        names.sort_unstable();
        out.push(Rule {
            resource_names: names,
            ..rule(
                Scope::Cluster,
                crate::plan::scc::SCC_GROUP,
                &["securitycontextconstraints"],
                &["use"],
                "--openshift-scc: a Role can grant only what its author holds: use of exactly the SCCs the controller may grant.",
            )
        });
        out.push(rule(
            Scope::Cluster,
            crate::plan::scc::SCC_GROUP,
            &["securitycontextconstraints"],
            &["create"],
            "--openshift-scc: the address agent's SCC is created at start (an OLM bundle cannot carry SCCs); create cannot be limited to a name.",
        ));
        out.push(Rule {
            resource_names: vec![crate::plan::scc::ADDRESS_AGENT_SCC],
            ..rule(
                Scope::Cluster,
                crate::plan::scc::SCC_GROUP,
                &["securitycontextconstraints"],
                &["get", "patch"],
                "--openshift-scc: the address agent's SCC, read and applied over by name.",
            )
        });
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
    let mut s = String::new();
    for role in layout(l) {
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

/// The SCC the controller creates when it runs with `--openshift-scc`
/// (YAML), for review.
pub fn sccs_yaml() -> anyhow::Result<String> {
    Ok(format!(
        "---\n{}",
        serde_saphyr::to_string(&crate::plan::scc::address_agent_scc())?
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
        // Roles are written without --openshift-scc too (the address
        // agent's Lease Role), but never cluster-wide ones.
        assert!(allows("rbac.authorization.k8s.io", "roles", "create"));
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
        // The agent's SCC: created by name-less `create`, then only its name.
        let sccs: Vec<&Rule> = with
            .iter()
            .filter(|r| r.resources == ["securitycontextconstraints"])
            .collect();
        assert_eq!(sccs.len(), 3);
        assert!(sccs[1].resource_names.is_empty() && sccs[1].verbs == ["create"]);
        assert_eq!(sccs[2].resource_names, ["oooi-address-agent"]);
        assert_eq!(sccs[2].verbs, ["get", "patch"]);
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
        assert_eq!(release.rules.len(), 1);
        assert_eq!(release.rules[0].verbs, ["get", "create", "patch"]);
    }

    #[test]
    fn the_controller_holds_what_the_address_agent_lease_role_grants() {
        for watch in [None, Some("hcp-infra")] {
            let roles = layout_of(watch, &[]);
            let component_ns = match watch {
                Some(ns) => roles
                    .iter()
                    .find(|r| r.namespace.as_deref() == Some(ns))
                    .expect("watched Role"),
                None => &roles[0],
            };
            for verb in crate::plan::workload::AGENT_LEASE_VERBS {
                assert!(grants(component_ns, "leases", verb), "{watch:?}: {verb}");
            }
            for verb in ["create", "update", "delete"] {
                assert!(
                    grants(component_ns, "roles", verb),
                    "{watch:?}: roles {verb}"
                );
                assert!(
                    grants(component_ns, "rolebindings", verb),
                    "{watch:?}: rolebindings {verb}"
                );
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
