//! The Kubernetes permissions the controller needs, kept true to the API
//! calls the code makes: `oooi-controller rbac` prints them as ClusterRole
//! rules (the chart's ClusterRole is compared with them), and the mocked-API
//! tests check every request they see against [`allows`] through
//! [`request_attributes`].

use serde::Serialize;

/// One ClusterRole rule.
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
}

const OOOI: &str = "hostedcluster.densityops.com";

fn rule(group: &'static str, resources: &[&'static str], verbs: &[&'static str]) -> Rule {
    Rule {
        api_groups: vec![group],
        resources: resources.to_vec(),
        resource_names: Vec::new(),
        verbs: verbs.to_vec(),
    }
}

/// Every rule the controller needs, in a fixed order. Why each is there:
///
/// - oooi kinds: watched (get/list/watch); derived kinds written by
///   server-side apply (patch; create because apply creates them);
///   finalizers added and removed by JSON patch on Infras and attachments;
///   every status written through the status subresource; `infras/finalizers`
///   update because children carry owner references with
///   `blockOwnerDeletion`, which OpenShift's admission checks.
/// - children (Deployments, ConfigMaps, Services, ServiceAccounts, PVCs,
///   Secrets, NetworkPolicies): applied, watched for readiness and drift,
///   deleted when a component is disabled or on cleanup. Secrets also hold the
///   push token and, in HostedCluster namespaces, the admin kubeconfig.
/// - ClusterUserDefinedNetworks (OVN-Kubernetes): an Infra's own, found by
///   its labels (list), created, applied over and deleted.
/// - pods: the Envoy replicas to push routes to.
/// - events: transitions are recorded through `events.k8s.io/v1`.
/// - leases: leader election (get, create when absent, patch to take and
///   renew); `update` because the address agents' Role grants it (a Role
///   grants only what its author holds); `delete` of the agents' Leases
///   with their Infra.
/// - Roles and RoleBindings: the address agent's Lease Role per DNS and
///   proxy server (and with `--openshift-scc` the SCC grants below);
///   applied and watched, never deleted by the controller (owner
///   references let garbage collection do it).
/// - HyperShift, CAPI, KubeVirt: optional read-only watches for worker
///   addresses and MACs; CRDs read to find out whether they exist.
///
/// With `--openshift-scc` ([`rules_for`]) also:
/// - `use` of exactly the SCCs it may grant: Kubernetes lets a Role grant
///   only what its author holds (no `escalate` or `bind` needed).
/// - the address agent's SCC: `create` (a rule cannot name an object that
///   does not exist yet), `get` and `patch` of that one name (applied at
///   start; OLM bundles cannot ship SCCs).
pub fn rules() -> Vec<Rule> {
    const READ: &[&str] = &["get", "list", "watch"];
    const WRITE: &[&str] = &["get", "list", "watch", "create", "patch", "delete"];
    vec![
        rule(OOOI, &["infras", "infraclusterattachments"], READ_PATCH),
        rule(
            OOOI,
            &["dhcpservers", "dnsservers", "proxyservers"],
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        rule(
            OOOI,
            &[
                "infras/status",
                "infraclusterattachments/status",
                "dhcpservers/status",
                "dnsservers/status",
                "proxyservers/status",
            ],
            &["get", "patch"],
        ),
        rule(
            OOOI,
            &["infras/finalizers", "infraclusterattachments/finalizers"],
            &["update"],
        ),
        rule("apps", &["deployments"], WRITE),
        rule(
            "",
            &[
                "configmaps",
                "services",
                "serviceaccounts",
                "persistentvolumeclaims",
                "secrets",
            ],
            WRITE,
        ),
        rule("", &["pods"], READ),
        rule("policy", &["poddisruptionbudgets"], WRITE),
        rule("networking.k8s.io", &["networkpolicies"], WRITE),
        rule(
            crate::plan::cudn::GROUP,
            &[crate::plan::cudn::PLURAL],
            &["list", "create", "patch", "delete"],
        ),
        rule("events.k8s.io", &["events"], &["create", "patch"]),
        rule("", &["events"], &["create", "patch"]),
        // Leader election (get, create, patch); the address agents' Role
        // (get, create, update: a Role grants only what its author holds);
        // their Leases deleted with the Infra.
        rule(
            "coordination.k8s.io",
            &["leases"],
            &["get", "create", "update", "patch", "delete"],
        ),
        rule(
            "rbac.authorization.k8s.io",
            &["roles", "rolebindings"],
            &["get", "list", "watch", "create", "patch"],
        ),
        rule(
            "hypershift.openshift.io",
            &["hostedclusters", "nodepools"],
            READ,
        ),
        rule("cluster.x-k8s.io", &["machines"], READ),
        rule("kubevirt.io", &["virtualmachineinstances"], READ),
        rule(
            "apiextensions.k8s.io",
            &["customresourcedefinitions"],
            &["get", "list", "watch"],
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
                crate::plan::scc::SCC_GROUP,
                &["securitycontextconstraints"],
                &["use"],
            )
        });
        // The address agent's SCC, made at start (OLM bundles cannot carry
        // SCCs): `create` cannot be limited to a name, everything else is.
        out.push(rule(
            crate::plan::scc::SCC_GROUP,
            &["securitycontextconstraints"],
            &["create"],
        ));
        out.push(Rule {
            resource_names: vec![crate::plan::scc::ADDRESS_AGENT_SCC],
            ..rule(
                crate::plan::scc::SCC_GROUP,
                &["securitycontextconstraints"],
                &["get", "patch"],
            )
        });
    }
    out
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

/// The rules as a YAML list, the `rules:` of a ClusterRole.
pub fn rules_yaml() -> anyhow::Result<String> {
    rules_yaml_for(false)
}

/// [`rules_for`] as a YAML list.
pub fn rules_yaml_for(openshift_scc: bool) -> anyhow::Result<String> {
    Ok(serde_saphyr::to_string(&rules_for(openshift_scc))?)
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
        assert!(!allows_in(
            &with,
            "rbac.authorization.k8s.io",
            "roles",
            "delete"
        ));
        // The address agents' Lease Roles are made on every cluster.
        assert!(allows("rbac.authorization.k8s.io", "roles", "create"));
        // A Role grants only what its author holds: the agent's verbs.
        for verb in crate::plan::workload::AGENT_LEASE_VERBS {
            assert!(allows("coordination.k8s.io", "leases", verb), "{verb}");
        }
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
        let yaml = rules_yaml_for(true).unwrap();
        assert!(yaml.contains("resourceNames"), "{yaml}");
        assert!(sccs_yaml().unwrap().contains("oooi-address-agent"));
    }
}
