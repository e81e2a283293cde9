//! Attachments onto their Infra: selection, deterministic order, conflicts,
//! worker addresses and DHCP reservations.
//!
//! Rules:
//! - An attachment belongs to the Infra its `infraRef` names in the same
//!   namespace; one being deleted is left out. Order is by name.
//! - A spec the schema cannot check (service names, SNI, namespace length) is
//!   checked here; a bad one excludes the attachment (`InvalidSpec`, field named).
//! - Two attachments of one HostedCluster, or with one domain, or with one
//!   explicit SNI on one port, are all excluded and reported (naming the others).
//! - Worker addresses: IPv4 addresses of the cluster's Machines inside the
//!   Infra CIDR; for a VMI with no such Machine address (no Machine of that
//!   name, or one without addresses yet), the VMI's interface addresses.
//! - An address claimed by two accepted attachments loses its source-scoped
//!   (alias and no-SNI) routes and its DHCP reservation in both; everything
//!   else of both attachments stays. (With `isolation: Strict` it is not a
//!   worker address either, so it is not allowed on that cluster's names.)
//! - `isolation: Strict` with no worker address known yet is reported as
//!   `StrictIsolationPending` (Degraded); see `proxy` for what the routes do.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use oooi_routes::{Route, RouteMatch, RouteTable, Upstream};

use super::conditions::PlannedCondition;
use super::network::{FieldError, Ipv4Range, Network, field_error};
use super::observed::{HostedClusterKey, Observed};
use crate::crd::{InfraClusterAttachment, Isolation, condition};

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

/// A DHCP reservation derived from a VMI.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Reservation {
    /// MAC, lower case with colons.
    pub mac: String,
    /// Reserved address.
    pub ip: Ipv4Addr,
    /// VMI name, when it is a valid host name.
    pub hostname: Option<String>,
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
    pub worker_addresses: Vec<Ipv4Addr>,
    /// Worker addresses also claimed by another attachment.
    pub conflicting_addresses: Vec<Ipv4Addr>,
    /// DHCP reservations from the cluster's VMIs.
    pub reservations: Vec<Reservation>,
    /// The apps VIP, when apps ingress is enabled and a VIP is observed.
    pub apps_vip: Option<Ipv4Addr>,
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
        vec![accepted, degraded]
    }
}

/// True for a DNS label: 1-63 of `[a-z0-9-]`, not starting or ending with `-`.
pub(crate) fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
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
            return Err(field_error(
                format!("{f}.name"),
                format!("`{}` is not a DNS label", s.name),
            ));
        }
        if !is_dns_label(&s.target_service) {
            return Err(field_error(
                format!("{f}.targetService"),
                format!("`{}` is not a Service name", s.target_service),
            ));
        }
        if s.port == 0 || s.target_port == 0 {
            return Err(field_error(format!("{f}.port"), "ports must be 1-65535"));
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
            field_error(
                if s.sni.is_some() {
                    format!("{f}.sni")
                } else {
                    format!("{f}.name")
                },
                m,
            )
        })?;
        if let Some(j) = out.iter().position(|o| o.name == s.name) {
            return Err(field_error(
                format!("{f}.name"),
                format!("`{}` is also {field}[{j}]", s.name),
            ));
        }
        if let Some(j) = out.iter().position(|o| o.sni == sni && o.port == s.port) {
            return Err(field_error(
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

fn resolve(att: &InfraClusterAttachment) -> (AttachmentOutcome, Option<FieldError>) {
    let spec = &att.spec;
    let mut outcome = AttachmentOutcome::from_spec(att);
    let (domain, cpns) = (
        outcome.domain.clone(),
        outcome.control_plane_namespace.clone(),
    );
    let check = || -> Result<Vec<ResolvedService>, FieldError> {
        if !is_dns_label(&outcome.hosted_cluster.name) {
            return Err(field_error(
                "spec.hostedClusterRef.name",
                format!("`{}` is not a DNS label", outcome.hosted_cluster.name),
            ));
        }
        if !is_dns_label(&outcome.hosted_cluster.namespace) {
            return Err(field_error(
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
            return Err(field_error(
                field,
                format!("`{cpns}` is not a namespace name (DNS label of at most 63)"),
            ));
        }
        if !is_dns_label(&spec.dns.cluster_name) {
            return Err(field_error(
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
            return Err(field_error(
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

/// Marks every member of a group of more than one as excluded.
fn exclude_groups<K: Ord>(
    outcomes: &mut [AttachmentOutcome],
    key: impl Fn(&AttachmentOutcome) -> Vec<K>,
    make: impl Fn(Vec<String>) -> Exclusion,
) {
    let mut groups: BTreeMap<K, Vec<usize>> = BTreeMap::new();
    for (i, o) in outcomes.iter().enumerate() {
        if matches!(o.exclusion, Some(Exclusion::InvalidSpec(_))) {
            continue;
        }
        for k in key(o) {
            groups.entry(k).or_default().push(i);
        }
    }
    let mut others: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    for members in groups.values().filter(|m| m.len() > 1) {
        for &i in members {
            let entry = others.entry(i).or_default();
            for &j in members {
                if j != i {
                    entry.insert(outcomes[j].name.clone());
                }
            }
        }
    }
    for (i, names) in others {
        if outcomes[i].exclusion.is_none() {
            outcomes[i].exclusion = Some(make(names.into_iter().collect()));
        }
    }
}

/// Worker addresses of one cluster inside the VLAN (see the module rules).
fn worker_addresses(
    network: &Network,
    observed: &Observed,
    hc: &HostedClusterKey,
) -> Vec<Ipv4Addr> {
    let Some(cluster) = observed.clusters.get(hc) else {
        return Vec::new();
    };
    let infra = network.infra_addresses();
    let usable = |s: &str| -> Option<Ipv4Addr> {
        let a: Ipv4Addr = s.trim().split('/').next()?.parse().ok()?;
        (network.is_host(a) && !infra.contains(&a)).then_some(a)
    };
    let mut out = BTreeSet::new();
    let mut covered = BTreeSet::new();
    for m in &cluster.machines {
        let mut any = false;
        for a in m.addresses.iter().filter_map(|s| usable(s)) {
            out.insert(a);
            any = true;
        }
        // Only a Machine with a VLAN address stands in for its VMI.
        if any {
            covered.insert(m.name.as_str());
        }
    }
    for vmi in &cluster.vmis {
        if covered.contains(vmi.name.as_str()) {
            continue;
        }
        for iface in &vmi.interfaces {
            out.extend(iface.ip_addresses.iter().filter_map(|s| usable(s)));
        }
    }
    out.into_iter().collect()
}

fn reservations(network: &Network, observed: &Observed, hc: &HostedClusterKey) -> Vec<Reservation> {
    let Some(cluster) = observed.clusters.get(hc) else {
        return Vec::new();
    };
    let infra = network.infra_addresses();
    let mut out = Vec::new();
    for vmi in &cluster.vmis {
        for iface in &vmi.interfaces {
            let Some(mac) = iface.mac.as_deref().and_then(oooi_dhcp::config::Mac::parse) else {
                continue;
            };
            let ip = iface
                .ip_addresses
                .iter()
                .filter_map(|s| s.trim().split('/').next()?.parse::<Ipv4Addr>().ok())
                .find(|a| network.is_host(*a) && !infra.contains(a));
            if let Some(ip) = ip {
                let hostname = is_dns_label(&vmi.name).then(|| vmi.name.clone());
                out.push(Reservation {
                    mac: mac.to_string(),
                    ip,
                    hostname,
                });
            }
        }
    }
    out.sort();
    out
}

/// Aggregates the attachments of Infra `infra_name` in `namespace`.
///
/// `network` is the Infra's parsed network (`None` when its spec is invalid:
/// then attachments are still checked against each other but get no worker
/// addresses). The result holds only the attachments of this Infra, ordered
/// by name.
pub fn aggregate(
    namespace: &str,
    infra_name: &str,
    network: Option<&Network>,
    attachments: &[InfraClusterAttachment],
    observed: &Observed,
) -> Vec<AttachmentOutcome> {
    let mut selected: Vec<&InfraClusterAttachment> = attachments
        .iter()
        .filter(|a| {
            a.metadata.namespace.as_deref() == Some(namespace)
                && a.spec.infra_ref.name == infra_name
                && a.metadata.deletion_timestamp.is_none()
        })
        .collect();
    selected.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));

    let mut outcomes: Vec<AttachmentOutcome> = selected
        .iter()
        .map(|a| {
            let (mut o, err) = resolve(a);
            o.exclusion = err.map(Exclusion::InvalidSpec);
            o
        })
        .collect();

    exclude_groups(
        &mut outcomes,
        |o| vec![o.hosted_cluster.clone()],
        Exclusion::DuplicateHostedCluster,
    );
    exclude_groups(
        &mut outcomes,
        |o| vec![o.domain.clone()],
        Exclusion::DuplicateDomain,
    );
    // Explicit SNI names may leave the domain; two attachments must not share one.
    exclude_groups(
        &mut outcomes,
        |o| {
            let set: BTreeSet<(u16, String)> =
                o.services.iter().map(|s| (s.port, s.sni.clone())).collect();
            set.into_iter().collect()
        },
        Exclusion::DuplicateSni,
    );
    for o in &mut outcomes {
        if !o.accepted() {
            o.services.clear();
        }
    }

    let Some(network) = network else {
        return outcomes;
    };

    // Worker addresses and reservations of accepted attachments, then conflicts.
    let mut claims: BTreeMap<Ipv4Addr, usize> = BTreeMap::new();
    let mut mac_claims: BTreeMap<String, usize> = BTreeMap::new();
    let mut ip_claims: BTreeMap<Ipv4Addr, usize> = BTreeMap::new();
    for o in outcomes.iter_mut().filter(|o| o.accepted()) {
        o.worker_addresses = worker_addresses(network, observed, &o.hosted_cluster);
        o.reservations = reservations(network, observed, &o.hosted_cluster);
        for a in &o.worker_addresses {
            *claims.entry(*a).or_default() += 1;
        }
        let macs: BTreeSet<&String> = o.reservations.iter().map(|r| &r.mac).collect();
        for m in macs {
            *mac_claims.entry(m.clone()).or_default() += 1;
        }
        let ips: BTreeSet<Ipv4Addr> = o.reservations.iter().map(|r| r.ip).collect();
        for ip in ips {
            *ip_claims.entry(ip).or_default() += 1;
        }
    }
    for o in outcomes.iter_mut().filter(|o| o.accepted()) {
        let (shared, own): (Vec<Ipv4Addr>, Vec<Ipv4Addr>) = o
            .worker_addresses
            .iter()
            .partition(|a| claims.get(a).copied().unwrap_or(0) > 1);
        o.worker_addresses = own;
        o.conflicting_addresses = shared;
        // A MAC or an address seen twice (across clusters or within one)
        // cannot be reserved: the DHCP config would be rejected whole.
        let mut seen_mac: BTreeMap<String, usize> = BTreeMap::new();
        let mut seen_ip: BTreeMap<Ipv4Addr, usize> = BTreeMap::new();
        for r in &o.reservations {
            *seen_mac.entry(r.mac.clone()).or_default() += 1;
            *seen_ip.entry(r.ip).or_default() += 1;
        }
        o.reservations.retain(|r| {
            mac_claims.get(&r.mac).copied().unwrap_or(0) == 1
                && ip_claims.get(&r.ip).copied().unwrap_or(0) == 1
                && seen_mac.get(&r.mac).copied().unwrap_or(0) == 1
                && seen_ip.get(&r.ip).copied().unwrap_or(0) == 1
                && claims.get(&r.ip).copied().unwrap_or(0) <= 1
        });
    }

    check_apps_pools(network, &selected, &mut outcomes, observed);
    outcomes
}

/// Apps ingress pools: inside the CIDR, outside the DHCP pool and the infra
/// addresses, disjoint from other attachments. A bad pool is reported on its
/// attachment (it does not exclude the attachment). The VIP is used only when
/// apps ingress is enabled and the observed VIP lies inside the CIDR.
fn check_apps_pools(
    network: &Network,
    selected: &[&InfraClusterAttachment],
    outcomes: &mut [AttachmentOutcome],
    observed: &Observed,
) {
    let mut taken: Vec<(usize, Ipv4Range, String)> = Vec::new();
    for (i, att) in selected.iter().enumerate() {
        let Some(apps) = att.spec.apps_ingress.as_ref().filter(|a| a.enabled) else {
            continue;
        };
        if !outcomes[i].accepted() {
            continue;
        }
        let mut errors = Vec::new();
        for (j, s) in apps.metallb.addresses.iter().enumerate() {
            let field = format!("spec.appsIngress.metallb.addresses[{j}]");
            let Some(range) = Ipv4Range::parse(s) else {
                errors.push(field_error(field, format!("`{s}` is not a range or CIDR")));
                continue;
            };
            if !network.is_host(range.start) || !network.is_host(range.end) {
                errors.push(field_error(
                    field,
                    format!("{range} is not inside {}", network.cidr),
                ));
                continue;
            }
            if let Some((_, pool)) = network.dhcp
                && pool.overlaps(&range)
            {
                errors.push(field_error(
                    field,
                    format!("{range} overlaps the DHCP pool {pool}"),
                ));
                continue;
            }
            if let Some(a) = network
                .infra_addresses()
                .into_iter()
                .find(|a| range.contains(*a))
            {
                errors.push(field_error(
                    field,
                    format!("{range} contains the infra address {a}"),
                ));
                continue;
            }
            if let Some((k, _, other)) = taken.iter().find(|(_, r, _)| r.overlaps(&range)) {
                let other_name = outcomes[*k].name.clone();
                errors.push(field_error(
                    field,
                    format!("{range} overlaps {other} of attachment {other_name}"),
                ));
                continue;
            }
            taken.push((i, range, format!("{range}")));
        }
        let vip = observed
            .clusters
            .get(&outcomes[i].hosted_cluster)
            .and_then(|c| c.apps_vip)
            .filter(|v| network.is_host(*v));
        outcomes[i].apps_vip = vip;
        outcomes[i].apps_to_pods = vip.is_some() && apps.publish_to_pod_network;
        outcomes[i].apps_ingress_errors = errors;
    }
}
