//! The top-level planner: Infra + attachments + observed state → the three
//! derived objects and every status condition.

pub mod aggregate;
pub mod apps_pools;
pub mod attachments;
pub mod cudn;
pub mod images;
pub mod legacy;
pub mod network;
pub mod observed;
pub mod reservations;
pub mod workers;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use oooi_vocabulary::FieldError;

use crate::crd::{
    AttachmentTotals, ComponentStatus, ComponentsStatus, DHCPServer, DNSServer, Infra,
    InfraClusterAttachment, InfraClusterAttachmentStatus, InfraStatus, ProxyServer, condition,
};
use crate::plan::conditions::{PlannedCondition, merge_conditions};
use crate::plan::infra::aggregate::aggregate;
use crate::plan::infra::attachments::AttachmentOutcome;
use crate::plan::infra::network::parse_network;
use crate::plan::infra::observed::Observed;
use crate::plan::labels::{Component, INFRA_LABEL, owner_refs};
use crate::plan::{dhcp, dns, proxy};

/// The derived objects of a valid Infra. A `None` component is disabled: its
/// derived object (and so its children) must be deleted.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredComponents {
    /// `<infra>-dhcp`, and `<infra>-dhcp-2` for the second server of a pair
    /// (one per DHCP address; empty when DHCP is disabled).
    pub dhcp: Vec<DHCPServer>,
    /// `<infra>-dns`, and `<infra>-dns-<n>` for further replicas (one per
    /// DNS address; empty when DNS is disabled).
    pub dns: Vec<DNSServer>,
    /// `<infra>-proxy`, and `<infra>-proxy-<n>` for further replicas (one
    /// per proxy address; empty when the proxy is disabled).
    pub proxy: Vec<ProxyServer>,
}

/// Everything the planner decided for one Infra.
#[derive(Debug, Clone, PartialEq)]
pub struct InfraPlan {
    /// The derived objects; `None` when the Infra's spec is invalid, in which
    /// case the reconciler leaves what runs untouched (last good config).
    pub desired: Option<DesiredComponents>,
    /// Every problem with the Infra's spec (field named).
    pub errors: Vec<FieldError>,
    /// The attachments of this Infra, ordered by name, with their verdicts.
    pub attachments: Vec<AttachmentOutcome>,
    /// Attachment totals for the Infra's status.
    pub totals: AttachmentTotals,
    /// Set fields of the older single-cluster API that are ignored, each
    /// with where its meaning lives now (`LegacyFieldsIgnored`).
    pub ignored_fields: Vec<String>,
    /// DNS runs with no upstream resolver (`NoUpstreams`): every name it
    /// does not own is answered SERVFAIL.
    pub no_upstreams: bool,
}

impl InfraPlan {
    /// The Infra's `Degraded` condition: the spec's field errors first, then
    /// excluded attachments.
    pub fn degraded(&self) -> PlannedCondition {
        if !self.errors.is_empty() {
            let msg: Vec<String> = self.errors.iter().map(|e| e.to_string()).collect();
            return PlannedCondition::yes(condition::DEGRADED, "InvalidSpec", msg.join("; "));
        }
        let excluded: Vec<String> = self
            .attachments
            .iter()
            .filter_map(|a| {
                a.exclusion
                    .as_ref()
                    .map(|e| format!("{} ({})", a.name, e.reason()))
            })
            .collect();
        if !excluded.is_empty() {
            return PlannedCondition::yes(
                condition::DEGRADED,
                "AttachmentsExcluded",
                format!("excluded attachments: {}", excluded.join(", ")),
            );
        }
        PlannedCondition::no(condition::DEGRADED, "AsExpected", "")
    }

    /// The Infra's `LegacyFieldsIgnored` and `NoUpstreams` conditions.
    pub fn notices(&self) -> Vec<PlannedCondition> {
        let legacy = if self.ignored_fields.is_empty() {
            PlannedCondition::no(condition::LEGACY_FIELDS_IGNORED, "NoneSet", "")
        } else {
            PlannedCondition::yes(
                condition::LEGACY_FIELDS_IGNORED,
                "LegacyFieldsSet",
                format!(
                    "ignored: {}; remove them from the Infra",
                    self.ignored_fields.join(", ")
                ),
            )
        };
        let upstreams = if self.no_upstreams {
            PlannedCondition::yes(
                condition::NO_UPSTREAMS,
                "EmptyDnsServers",
                format!(
                    "spec.networkConfig.dnsServers is empty: DNS answers SERVFAIL for every name oooi does not own; list resolvers (`ip` or `ip:port`), or `{}` for the DNS pod's own",
                    crate::plan::infra::network::RESOLV_CONF
                ),
            )
        } else {
            PlannedCondition::no(condition::NO_UPSTREAMS, "UpstreamsListed", "")
        };
        vec![legacy, upstreams]
    }

    /// The verdict on attachment `name` of this Infra, when the Infra's spec
    /// is valid: with an invalid spec no attachment is accepted, so what
    /// follows from acceptance (the control-plane policy, apps ingress,
    /// public DNS) is planned from no verdict at all.
    pub fn verdict(&self, name: &str) -> Option<&AttachmentOutcome> {
        self.desired.as_ref()?;
        self.attachments.iter().find(|a| a.name == name)
    }

    /// The planned conditions of one attachment of this Infra, by name.
    pub fn attachment_conditions(&self, name: &str) -> Option<Vec<PlannedCondition>> {
        self.attachments
            .iter()
            .find(|a| a.name == name)
            .map(|a| a.conditions(self.desired.is_some()))
    }
}

/// A derived component config its own validator refused, as an error of
/// the Infra: `derived <config> <field>` (`derived DHCP config of
/// vlan-dhcp range.start`), with the validator's message.
fn derived_config_error(config: &str, e: FieldError) -> FieldError {
    FieldError::new(format!("derived {config} {}", e.field), e.message)
}

/// [`FieldError::new`] under a short name.
fn field_error(field: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError::new(field, message)
}

fn derived_meta_named(infra: &Infra, component: Component, name: String) -> ObjectMeta {
    let infra_name = infra.metadata.name.clone().unwrap_or_default();
    ObjectMeta {
        name: Some(name),
        namespace: infra.metadata.namespace.clone(),
        labels: Some(crate::plan::labels::labels(&infra_name, component)),
        owner_references: owner_refs(infra),
        ..ObjectMeta::default()
    }
}

/// Plans one Infra. `attachments` may hold every attachment of the namespace
/// (or of the cluster): the planner picks those whose `infraRef` names this
/// Infra in its namespace.
pub fn plan_infra(
    infra: &Infra,
    attachments: &[InfraClusterAttachment],
    observed: &Observed,
) -> InfraPlan {
    let namespace = infra.metadata.namespace.clone().unwrap_or_default();
    let name = infra.metadata.name.clone().unwrap_or_default();
    let network = parse_network(infra);
    let (network, mut errors) = match network {
        Ok(n) => (Some(n), Vec::new()),
        Err(e) => (None, e),
    };
    for (field, message) in crate::plan::infra::images::missing(infra) {
        errors.push(FieldError::new(field, message));
    }
    errors.extend(crate::plan::infra::legacy::refused(infra));
    let no_upstreams = infra.spec.infra_components.dns.enabled
        && network
            .as_ref()
            .is_some_and(|n| n.upstreams.is_empty() && !n.resolv_conf);
    let outcomes = aggregate(&namespace, &name, network.as_ref(), attachments, observed);
    let accepted = outcomes.iter().filter(|o| o.accepted()).count() as u32;
    let totals = AttachmentTotals {
        total: outcomes.len() as u32,
        accepted,
        excluded: outcomes.len() as u32 - accepted,
    };

    let desired = network.as_ref().and_then(|net| {
        let internal = proxy::internal_proxy_ip(infra, observed.internal_proxy_ip);
        let dhcp_specs = dhcp::specs(infra, net, &outcomes);
        let dns_specs = dns::specs(infra, net, &outcomes, internal);
        let proxy_specs = proxy::specs(infra, net, &outcomes, observed.filter_sha256.as_deref());
        // Never hand a component a config it would reject: check each with
        // the component's own validator.
        // (The pair token file does not exist here: check the rest.)
        for (name, s) in &dhcp_specs {
            let mut cfg = s.config.0.clone();
            cfg.peer = None;
            if let Err(e) = oooi_dhcp_config::Config::from_raw(&cfg) {
                errors.push(derived_config_error(&format!("DHCP config of {name}"), e));
            }
        }
        for (name, s) in &dns_specs {
            if let Err(e) = oooi_dns_config::Config::from_raw(&s.config.0) {
                errors.push(field_error(
                    format!("derived DNS config of {name} {}", e.field),
                    e.message,
                ));
            }
        }
        // The replicas share one table: check it once.
        if let Some((_, s)) = proxy_specs.first()
            && let Err(e) = proxy::validate(s)
        {
            errors.push(FieldError::new("derived routing table", e));
        }
        if !errors.is_empty() {
            return None;
        }
        Some(DesiredComponents {
            dhcp: dhcp_specs
                .into_iter()
                .map(|(name, spec)| DHCPServer {
                    metadata: derived_meta_named(infra, Component::Dhcp, name),
                    spec,
                    status: None,
                })
                .collect(),
            dns: dns_specs
                .into_iter()
                .map(|(name, spec)| DNSServer {
                    metadata: derived_meta_named(infra, Component::Dns, name),
                    spec,
                    status: None,
                })
                .collect(),
            proxy: proxy_specs
                .into_iter()
                .map(|(name, spec)| ProxyServer {
                    metadata: derived_meta_named(infra, Component::Proxy, name),
                    spec,
                    status: None,
                })
                .collect(),
        })
    });
    InfraPlan {
        desired,
        errors,
        attachments: outcomes,
        totals,
        ignored_fields: crate::plan::infra::legacy::ignored(infra),
        no_upstreams,
    }
}

/// Readiness of a component with one server per address, from each
/// server's Deployment (by name; `None`: not created yet): ready when every
/// server is, replicas summed, the message naming the servers that are not.
pub fn servers_status(enabled: bool, servers: &[(&str, Option<&Deployment>)]) -> ComponentStatus {
    if let [(_, one)] = servers {
        return component_status(enabled, *one);
    }
    if !enabled {
        return component_status(false, None);
    }
    let mut total = ComponentStatus {
        enabled: true,
        ready: true,
        ..ComponentStatus::default()
    };
    let mut waiting = Vec::new();
    for (name, d) in servers {
        let st = component_status(true, *d);
        total.ready &= st.ready;
        total.replicas += st.replicas;
        total.ready_replicas += st.ready_replicas;
        if let Some(m) = st.message {
            waiting.push(format!("{name}: {m}"));
        }
    }
    total.message = (!waiting.is_empty()).then(|| waiting.join("; "));
    total
}

/// Readiness of one component from its Deployment (`None`: not created yet).
pub fn component_status(enabled: bool, deployment: Option<&Deployment>) -> ComponentStatus {
    if !enabled {
        return ComponentStatus {
            enabled: false,
            ready: true,
            ..ComponentStatus::default()
        };
    }
    let Some(d) = deployment else {
        return ComponentStatus {
            enabled: true,
            ready: false,
            message: Some("Deployment not created yet".to_string()),
            ..ComponentStatus::default()
        };
    };
    let r = crate::plan::workload::readiness::readiness(d);
    let (desired, ready_replicas, updated) = (r.replicas, r.ready, r.updated);
    ComponentStatus {
        enabled: true,
        ready: r.complete,
        replicas: desired,
        ready_replicas,
        message: (!r.complete)
            .then(|| format!("{ready_replicas}/{desired} ready, {updated} up to date")),
    }
}

/// The status of an Infra whose spec cannot be decoded: the planned
/// conditions (`InvalidSpec`) merged into the stored ones, the rest of the
/// stored status kept (the components still run what they last got).
pub fn invalid_infra_status(
    existing: Option<&InfraStatus>,
    generation: Option<i64>,
    planned: &[PlannedCondition],
    now: &Time,
) -> InfraStatus {
    let mut st = existing.cloned().unwrap_or_default();
    st.conditions = merge_conditions(&st.conditions, planned, generation, now);
    st.observed_generation = generation;
    st
}

/// The Infra's whole status: conditions merged with the existing ones (so an
/// unchanged status re-applies as a no-op), readiness per component, totals.
pub fn infra_status(
    infra: &Infra,
    plan: &InfraPlan,
    components: ComponentsStatus,
    now: &Time,
) -> InfraStatus {
    let existing = infra
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let not_ready: Vec<&str> = [
        ("dhcp", &components.dhcp),
        ("dns", &components.dns),
        ("proxy", &components.proxy),
    ]
    .into_iter()
    .filter(|(_, c)| c.as_ref().is_some_and(|c| c.enabled && !c.ready))
    .map(|(n, _)| n)
    .collect();
    let ready = if plan.desired.is_none() {
        PlannedCondition::no(
            condition::READY,
            "InvalidSpec",
            "the spec is invalid; see Degraded",
        )
    } else if not_ready.is_empty() {
        PlannedCondition::yes(condition::READY, "AllComponentsReady", "")
    } else {
        PlannedCondition::no(
            condition::READY,
            "ComponentsNotReady",
            format!("not ready: {}", not_ready.join(", ")),
        )
    };
    let progressing = if not_ready.is_empty() || plan.desired.is_none() {
        PlannedCondition::no(condition::PROGRESSING, "AsExpected", "")
    } else {
        PlannedCondition::yes(
            condition::PROGRESSING,
            "RollingOut",
            format!("waiting for {}", not_ready.join(", ")),
        )
    };
    let generation = infra.metadata.generation;
    let mut planned = vec![ready, progressing, plan.degraded()];
    planned.extend(plan.notices());
    InfraStatus {
        observed_generation: generation,
        conditions: merge_conditions(&existing, &planned, generation, now),
        components,
        attachments: plan.totals.clone(),
        failover: Some(crate::plan::workload::availability::failover_status(infra)),
        // The reconciler adds its DHCP servers' figures.
        dhcp_pools: None,
    }
}

/// An attachment's whole status. `routes_synced` is the Infra's ProxyServer
/// `RoutesSynced` condition (`None`: unknown); `Ready` needs it and acceptance.
pub fn attachment_status(
    attachment: &InfraClusterAttachment,
    plan: &InfraPlan,
    routes_synced: Option<bool>,
    now: &Time,
) -> InfraClusterAttachmentStatus {
    let name = attachment.metadata.name.clone().unwrap_or_default();
    let existing = attachment
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let outcome = plan.attachments.iter().find(|a| a.name == name);
    let mut planned = match outcome {
        Some(o) => o.conditions(plan.desired.is_some()),
        None => vec![PlannedCondition::no(
            condition::ACCEPTED,
            "InfraNotFound",
            format!(
                "spec.infraRef: no Infra `{}` in this namespace",
                attachment.spec.infra_ref.name
            ),
        )],
    };
    let accepted = outcome.is_some_and(|o| o.accepted()) && plan.desired.is_some();
    let ready = match (accepted, routes_synced) {
        (false, _) => PlannedCondition::no(condition::READY, "NotAccepted", "see Accepted"),
        (true, Some(true)) => PlannedCondition::yes(condition::READY, "RoutesSynced", ""),
        (true, Some(false)) => PlannedCondition::no(
            condition::READY,
            "RoutesNotSynced",
            "the proxy replicas do not all hold the current routing table yet",
        ),
        (true, None) => PlannedCondition::new(
            condition::READY,
            crate::crd::status::UNKNOWN,
            "RoutesUnknown",
            "the proxy has not reported its routing table yet",
        ),
    };
    planned.insert(0, ready);
    let generation = attachment.metadata.generation;
    InfraClusterAttachmentStatus {
        observed_generation: generation,
        conditions: merge_conditions(&existing, &planned, generation, now),
        domain: outcome.map(|o| o.domain.clone()),
        control_plane_namespace: outcome.map(|o| o.control_plane_namespace.clone()),
        worker_addresses: outcome
            .map(|o| o.worker_addresses.iter().map(|a| a.to_string()).collect())
            .unwrap_or_default(),
        conflicting_addresses: outcome
            .map(|o| {
                o.conflicting_addresses
                    .iter()
                    .map(|a| a.to_string())
                    .collect()
            })
            .unwrap_or_default(),
        apps_ingress: attachment
            .status
            .as_ref()
            .and_then(|s| s.apps_ingress.clone()),
    }
}

/// The labels a derived object carries, to find an Infra's derived objects.
pub fn derived_selector(infra_name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(INFRA_LABEL.to_string(), infra_name.to_string())])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn deployment(ready: i32) -> Deployment {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "d", "generation": 1},
            "spec": {"replicas": 1, "selector": {}, "template": {}},
            "status": {"observedGeneration": 1, "replicas": 1, "readyReplicas": ready,
                       "updatedReplicas": 1, "availableReplicas": ready}
        }))
        .unwrap()
    }

    #[test]
    fn a_pair_is_ready_only_when_both_servers_are_and_names_the_one_that_is_not() {
        let (up, down) = (deployment(1), deployment(0));
        let both = servers_status(true, &[("a", Some(&up)), ("b", Some(&up))]);
        assert!(both.ready);
        assert_eq!((both.replicas, both.ready_replicas), (2, 2));
        assert_eq!(both.message, None);
        let one = servers_status(true, &[("a", Some(&up)), ("b", Some(&down))]);
        assert!(!one.ready);
        assert_eq!((one.replicas, one.ready_replicas), (2, 1));
        assert!(
            one.message.as_deref().unwrap().starts_with("b: "),
            "{one:?}"
        );
        let missing = servers_status(true, &[("a", Some(&up)), ("b", None)]);
        assert_eq!(
            missing.message.as_deref(),
            Some("b: Deployment not created yet")
        );
        // One server: exactly the one-Deployment status.
        assert_eq!(
            servers_status(true, &[("a", Some(&down))]),
            component_status(true, Some(&down))
        );
    }
}
