//! One attachment on its own: the planner's verdict type
//! ([`AttachmentOutcome`], why one is left out: [`Exclusion`]) and the
//! checks of what the schema cannot check (names, SNI, namespace length),
//! with the routing table's own validator for SNI names. A bad spec
//! excludes the attachment (`InvalidSpec`, field named).

use std::net::IpAddr;

use oooi_routes::{Route, RouteMatch, RouteTable, Upstream};

use oooi_vocabulary::FieldError;

use crate::crd::{InfraClusterAttachment, Isolation, condition};
use crate::plan::conditions::PlannedCondition;
use crate::plan::infra::observed::HostedClusterKey;
use crate::plan::infra::reservations::{KnownClient, Reservation};
use crate::plan::names::is_dns_label;

/// Why an attachment is left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exclusion {
    /// Another attachment names the same HostedCluster (names listed).
    DuplicateHostedCluster(Vec<String>),
    /// Another attachment has the same domain (names listed).
    DuplicateDomain(Vec<String>),
    /// Another attachment routes the same SNI on the same port (names listed).
    DuplicateSni(Vec<String>),
    /// The spec is invalid.
    InvalidSpec(FieldError),
}

impl Exclusion {
    /// The condition reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Exclusion::DuplicateHostedCluster(_) => "DuplicateHostedCluster",
            Exclusion::DuplicateDomain(_) => "DuplicateDomain",
            Exclusion::DuplicateSni(_) => "DuplicateSNI",
            Exclusion::InvalidSpec(_) => "InvalidSpec",
        }
    }

    /// The condition message.
    pub fn message(&self) -> String {
        match self {
            Exclusion::DuplicateHostedCluster(o) => format!(
                "spec.hostedClusterRef: the same HostedCluster is attached by {}; all are excluded",
                o.join(", ")
            ),
            Exclusion::DuplicateDomain(o) => format!(
                "spec.dns: the same domain is used by {}; all are excluded",
                o.join(", ")
            ),
            Exclusion::DuplicateSni(o) => format!(
                "spec.services: an SNI name on the same port is also routed by {}; all are excluded",
                o.join(", ")
            ),
            Exclusion::InvalidSpec(e) => e.to_string(),
        }
    }
}

/// One exposed service, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedService {
    /// DNS label under the cluster domain.
    pub name: String,
    /// SNI the route matches.
    pub sni: String,
    /// True when `sni` is `<name>.<domain>` (published in DNS).
    pub in_domain: bool,
    /// Listener port.
    pub port: u16,
    /// `<service>.<control-plane namespace>.svc.cluster.local`.
    pub upstream_host: String,
    /// Target port.
    pub upstream_port: u16,
}

/// The planner's verdict on one attachment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachmentOutcome {
    /// Attachment name.
    pub name: String,
    /// The HostedCluster.
    pub hosted_cluster: HostedClusterKey,
    /// `<clusterName>.<baseDomain>`.
    pub domain: String,
    /// Resolved control-plane namespace.
    pub control_plane_namespace: String,
    /// Why it is left out; `None` when accepted.
    pub exclusion: Option<Exclusion>,
    /// Resolved services (empty when excluded).
    pub services: Vec<ResolvedService>,
    /// Worker addresses with source-scoped routes (conflicts removed).
    pub worker_addresses: Vec<IpAddr>,
    /// Worker addresses also claimed by another attachment.
    pub conflicting_addresses: Vec<IpAddr>,
    /// DHCP reservations from the cluster's VMIs.
    pub reservations: Vec<Reservation>,
    /// The cluster's VMIs known by MAC before their address is.
    pub known_clients: Vec<KnownClient>,
    /// The apps VIP, when apps ingress is enabled and a VIP is observed.
    pub apps_vip: Option<IpAddr>,
    /// `appsIngress.publishToPodNetwork`: the DNS pod view answers `*.apps`
    /// with the internal proxy (only once a VIP is known).
    pub apps_to_pods: bool,
    /// Isolation mode.
    pub isolation: Isolation,
    /// Problems with `appsIngress` (pool outside the CIDR, overlapping, …).
    pub apps_ingress_errors: Vec<FieldError>,
}

impl AttachmentOutcome {
    /// What the spec alone says (names, domain, namespace, isolation), with
    /// nothing resolved or observed yet and no verdict.
    pub fn from_spec(att: &InfraClusterAttachment) -> AttachmentOutcome {
        let spec = &att.spec;
        AttachmentOutcome {
            name: att.metadata.name.clone().unwrap_or_default(),
            hosted_cluster: HostedClusterKey::new(
                spec.hosted_cluster_ref.namespace.trim(),
                spec.hosted_cluster_ref.name.trim(),
            ),
            domain: spec.domain(),
            control_plane_namespace: spec.control_plane_namespace(),
            exclusion: None,
            services: Vec::new(),
            worker_addresses: Vec::new(),
            conflicting_addresses: Vec::new(),
            reservations: Vec::new(),
            known_clients: Vec::new(),
            apps_vip: None,
            apps_to_pods: false,
            isolation: spec.isolation,
            apps_ingress_errors: Vec::new(),
        }
    }

    /// True when the attachment is in the routes, DNS and DHCP config.
    pub fn accepted(&self) -> bool {
        self.exclusion.is_none()
    }

    /// `clusters/c1`: the route owner.
    pub fn owner(&self) -> String {
        self.hosted_cluster.to_string()
    }

    /// The conditions this verdict sets (`Accepted`, `Degraded`).
    /// `infra_valid` is false when the Infra's own spec is invalid: then the
    /// stack keeps its last good config and acceptance is unknown.
    pub fn conditions(&self, infra_valid: bool) -> Vec<PlannedCondition> {
        let accepted = match (&self.exclusion, infra_valid) {
            (Some(e), _) => PlannedCondition::no(condition::ACCEPTED, e.reason(), e.message()),
            (None, false) => PlannedCondition::new(
                condition::ACCEPTED,
                crate::crd::status::UNKNOWN,
                "InfraInvalid",
                "the Infra's spec is invalid; see its Degraded condition",
            ),
            (None, true) => PlannedCondition::yes(
                condition::ACCEPTED,
                "Accepted",
                format!(
                    "{} services, {} worker addresses{}",
                    self.services.len(),
                    self.worker_addresses.len(),
                    match self.isolation {
                        Isolation::Strict =>
                            "; isolation Strict: on the VLAN, only these workers may use the cluster's names (ignition excepted)",
                        Isolation::Standard => "",
                    }
                ),
            ),
        };
        let mut problems = Vec::new();
        if !self.conflicting_addresses.is_empty() {
            let list: Vec<String> = self
                .conflicting_addresses
                .iter()
                .map(|a| a.to_string())
                .collect();
            problems.push((
                "WorkerAddressConflict",
                format!(
                    "worker addresses {} are also claimed by another attachment; their alias and no-SNI routes are dropped{}",
                    list.join(", "),
                    if self.isolation == Isolation::Strict {
                        ", and Strict isolation does not allow them on this cluster's names"
                    } else {
                        ""
                    }
                ),
            ));
        }
        for e in &self.apps_ingress_errors {
            problems.push(("AppsIngressPoolConflict", e.to_string()));
        }
        if self.isolation == Isolation::Strict
            && self.accepted()
            && self.worker_addresses.is_empty()
        {
            problems.push((
                "StrictIsolationPending",
                "spec.isolation: Strict: no worker address of this cluster is known yet, so its names other than ignition refuse every source on the VLAN until one is (its Machines' or VMIs' addresses); ignition stays open, since new workers fetch it before their address is known".to_string(),
            ));
        }
        let degraded = if problems.is_empty() {
            PlannedCondition::no(condition::DEGRADED, "AsExpected", "")
        } else {
            let reason = problems[0].0;
            let message: Vec<String> = problems.into_iter().map(|(_, m)| m).collect();
            PlannedCondition::yes(condition::DEGRADED, reason, message.join("; "))
        };
        let workers = if self.worker_addresses.is_empty() {
            PlannedCondition::no(
                condition::WORKERS_KNOWN,
                "NoWorkerAddress",
                "no worker address of this cluster is known yet: its kubernetes aliases are neither answered on the VLAN nor routed (443 by SNI, 6443 without) until a Machine or VMI reports one",
            )
        } else {
            PlannedCondition::yes(
                condition::WORKERS_KNOWN,
                "WorkerAddressesKnown",
                format!(
                    "{} worker addresses: the kubernetes aliases are answered on the VLAN and routed from them (443 by SNI, 6443 without)",
                    self.worker_addresses.len()
                ),
            )
        };
        vec![accepted, degraded, workers]
    }
}

/// Checks a name with the routing table's own validator, by validating a
/// one-route table, so the controller never accepts an SNI the proxy refuses.
fn check_route(route: &Route) -> Result<(), String> {
    RouteTable {
        generation: 1,
        routes: vec![route.clone()],
    }
    .validate()
    .map_err(|e| e.message)
}

fn resolve_services(
    att: &InfraClusterAttachment,
    domain: &str,
    cpns: &str,
) -> Result<Vec<ResolvedService>, FieldError> {
    let spec = &att.spec;
    let field = if spec.services.is_some() {
        "spec.services"
    } else {
        "spec.services (defaults)"
    };
    let mut out: Vec<ResolvedService> = Vec::new();
    for (i, s) in spec.services_or_default().iter().enumerate() {
        let f = format!("{field}[{i}]");
        if !is_dns_label(&s.name) {
            return Err(FieldError::new(
                format!("{f}.name"),
                format!("`{}` is not a DNS label", s.name),
            ));
        }
        if !is_dns_label(&s.target_service) {
            return Err(FieldError::new(
                format!("{f}.targetService"),
                format!("`{}` is not a Service name", s.target_service),
            ));
        }
        if s.port == 0 || s.target_port == 0 {
            return Err(FieldError::new(
                format!("{f}.port"),
                "ports must be 1-65535",
            ));
        }
        let (sni, in_domain) = match &s.sni {
            Some(n) => {
                let n = n.trim().trim_end_matches('.').to_ascii_lowercase();
                let in_domain = n == format!("{}.{domain}", s.name);
                (n, in_domain)
            }
            None => (format!("{}.{domain}", s.name), true),
        };
        let upstream_host = format!("{}.{cpns}.svc.cluster.local", s.target_service);
        let route = Route {
            port: s.port,
            matches: RouteMatch::Sni(sni.clone()),
            upstream: Upstream::Address {
                host: upstream_host.clone(),
                port: s.target_port,
            },
            owner: None,
        };
        check_route(&route).map_err(|m| {
            FieldError::new(
                if s.sni.is_some() {
                    format!("{f}.sni")
                } else {
                    format!("{f}.name")
                },
                m,
            )
        })?;
        if let Some(j) = out.iter().position(|o| o.name == s.name) {
            return Err(FieldError::new(
                format!("{f}.name"),
                format!("`{}` is also {field}[{j}]", s.name),
            ));
        }
        if let Some(j) = out.iter().position(|o| o.sni == sni && o.port == s.port) {
            return Err(FieldError::new(
                format!("{f}.sni"),
                format!("{sni} on port {} is also {field}[{j}]", s.port),
            ));
        }
        out.push(ResolvedService {
            name: s.name.clone(),
            sni,
            in_domain,
            port: s.port,
            upstream_host,
            upstream_port: s.target_port,
        });
    }
    Ok(out)
}

/// The attachment as its spec alone resolves it, and the first problem
/// with that spec.
pub fn resolve(att: &InfraClusterAttachment) -> (AttachmentOutcome, Option<FieldError>) {
    let spec = &att.spec;
    let mut outcome = AttachmentOutcome::from_spec(att);
    let (domain, cpns) = (
        outcome.domain.clone(),
        outcome.control_plane_namespace.clone(),
    );
    let check = || -> Result<Vec<ResolvedService>, FieldError> {
        if !is_dns_label(&outcome.hosted_cluster.name) {
            return Err(FieldError::new(
                "spec.hostedClusterRef.name",
                format!("`{}` is not a DNS label", outcome.hosted_cluster.name),
            ));
        }
        if !is_dns_label(&outcome.hosted_cluster.namespace) {
            return Err(FieldError::new(
                "spec.hostedClusterRef.namespace",
                format!("`{}` is not a DNS label", outcome.hosted_cluster.namespace),
            ));
        }
        if !is_dns_label(&cpns) {
            let field = if spec.control_plane_namespace.is_some() {
                "spec.controlPlaneNamespace"
            } else {
                "spec.controlPlaneNamespace (default <hc-namespace>-<hc-name>)"
            };
            return Err(FieldError::new(
                field,
                format!("`{cpns}` is not a namespace name (DNS label of at most 63)"),
            ));
        }
        if !is_dns_label(&spec.dns.cluster_name) {
            return Err(FieldError::new(
                "spec.dns.clusterName",
                format!("`{}` is not a DNS label", spec.dns.cluster_name),
            ));
        }
        let base_ok = !spec.dns.base_domain.is_empty()
            && spec
                .dns
                .base_domain
                .trim_end_matches('.')
                .split('.')
                .all(|l| is_dns_label(&l.to_ascii_lowercase()));
        if !base_ok {
            return Err(FieldError::new(
                "spec.dns.baseDomain",
                format!("`{}` is not a domain name", spec.dns.base_domain),
            ));
        }
        resolve_services(att, &domain, &cpns)
    };
    match check() {
        Ok(services) => {
            outcome.services = services;
            (outcome, None)
        }
        Err(e) => (outcome, Some(e)),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::plan::fixtures::attachment;

    fn error(att: &InfraClusterAttachment) -> String {
        resolve(att).1.map(|e| e.to_string()).unwrap_or_default()
    }

    #[test]
    fn default_services_route_to_the_control_plane_namespace() {
        let (o, err) = resolve(&attachment("a", "c1", json!({})));
        assert!(err.is_none());
        assert_eq!(o.domain, "c1.example.com");
        assert_eq!(o.control_plane_namespace, "clusters-c1");
        let names: Vec<&str> = o.services.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["api", "api-int", "oauth", "ignition", "konnectivity"]
        );
        let oauth = &o.services[2];
        assert_eq!(
            (oauth.sni.as_str(), oauth.port, oauth.in_domain),
            ("oauth.c1.example.com", 443, true)
        );
        assert_eq!(
            (oauth.upstream_host.as_str(), oauth.upstream_port),
            ("oauth-openshift.clusters-c1.svc.cluster.local", 6443)
        );
    }

    #[test]
    fn an_explicit_sni_outside_the_domain_is_not_published() {
        let svc = |sni: &str| {
            json!({"services": [{"name": "api", "sni": sni, "port": 6443,
                "targetService": "kube-apiserver", "targetPort": 6443}]})
        };
        let (o, _) = resolve(&attachment("a", "c1", svc("API.Corp.Example.")));
        assert_eq!(o.services[0].sni, "api.corp.example");
        assert!(!o.services[0].in_domain);
        let (o, _) = resolve(&attachment("a", "c1", svc("api.c1.example.com")));
        assert!(o.services[0].in_domain);
    }

    #[test]
    fn a_bad_spec_names_the_field_and_the_value() {
        let mut bad_cluster = attachment("a", "c1", json!({}));
        bad_cluster.spec.dns.cluster_name = "C_1".into();
        assert_eq!(
            error(&bad_cluster),
            "spec.dns.clusterName: `C_1` is not a DNS label"
        );
        let twice = attachment(
            "a",
            "c1",
            json!({"services": [
                {"name": "api", "port": 6443, "targetService": "kube-apiserver", "targetPort": 6443},
                {"name": "api", "port": 443, "targetService": "kube-apiserver", "targetPort": 6443}
            ]}),
        );
        assert_eq!(
            error(&twice),
            "spec.services[1].name: `api` is also spec.services[0]"
        );
        let long = "x".repeat(60);
        let cp = attachment("a", "c1", json!({"controlPlaneNamespace": long}));
        assert_eq!(error(&cp), "");
        let cp = attachment("a", "c1", json!({"controlPlaneNamespace": "x".repeat(64)}));
        assert!(error(&cp).starts_with("spec.controlPlaneNamespace: "));
    }

    #[test]
    fn an_excluded_attachment_is_not_accepted_and_says_why() {
        let mut o = AttachmentOutcome::from_spec(&attachment("a", "c1", json!({})));
        o.exclusion = Some(Exclusion::DuplicateDomain(vec!["b".into()]));
        let conds = o.conditions(true);
        assert_eq!(conds[0].status, crate::crd::status::FALSE);
        assert_eq!(conds[0].reason, "DuplicateDomain");
        assert_eq!(
            conds[0].message,
            "spec.dns: the same domain is used by b; all are excluded"
        );
        o.exclusion = None;
        assert_eq!(o.conditions(false)[0].reason, "InfraInvalid");
    }
}
