//! The parts of the `observe → plan → apply → status` step every reconciler
//! shares: what an Infra's plan reads from the caches ([`observe_infra`],
//! used by the Infra, attachment and hosted-cluster reconcilers alike), and
//! the one status writer ([`write_status`]).

use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::{Context, Error, Result};
use crate::cache::cached;
use crate::crd::{
    Infra, InfraClusterAttachment, InfraClusterAttachmentStatus, InfraStatus, ProxyServerStatus,
    ServerStatus, status,
};
use crate::plan::labels::Component;
use crate::plan::{InfraPlan, condition_status, plan_infra};

/// The namespace of a namespaced object.
pub fn namespace<K: Resource>(obj: &K) -> Result<String> {
    obj.meta()
        .namespace
        .clone()
        .ok_or(Error::MissingField("metadata.namespace"))
}

/// The attachments that name `infra`, not being deleted, by name.
pub fn attachments_of(ctx: &Context, ns: &str, infra: &str) -> Vec<InfraClusterAttachment> {
    let mut out: Vec<InfraClusterAttachment> = ctx
        .stores
        .attachments
        .state_filter(|a| {
            a.namespace().as_deref() == Some(ns)
                && a.spec.infra_ref.name == infra
                && a.metadata.deletion_timestamp.is_none()
        })
        .iter()
        .map(|a| (**a).clone())
        .collect();
    out.sort_by_key(|a| a.name_any());
    out
}

/// ClusterIP of the internal proxy Service: the one oooi makes (named like
/// the ProxyServer), or the `name.namespace.svc` the spec names.
async fn internal_proxy_ip(ctx: &Context, infra: &Infra, ns: &str) -> Result<Option<IpAddr>> {
    let proxy = &infra.spec.infra_components.proxy;
    if !proxy.enabled {
        return Ok(None);
    }
    let svc: Option<Service> = match proxy.internal_proxy_service.as_deref() {
        None => cached::<Service>(
            &ctx.stores.services,
            ns,
            &Component::Proxy.derived_name(&infra.name_any()),
        )
        .map(|s| (*s).clone()),
        Some(named) if named.parse::<IpAddr>().is_ok() => return Ok(None),
        Some(named) => {
            let mut parts = named.split('.');
            let name = parts.next().unwrap_or_default();
            let svc_ns = parts.next().unwrap_or(ns);
            Api::<Service>::namespaced(ctx.client.clone(), svc_ns)
                .get_opt(name)
                .await?
        }
    };
    Ok(svc
        .and_then(|s| s.spec)
        .and_then(|s| s.cluster_ip)
        .and_then(|ip| ip.parse().ok()))
}

/// Observes what `infra`'s plan depends on (its attachments, the observed
/// workers and VIPs, the internal proxy Service) and plans it. The filter
/// module is the rollout's business ([`crate::rollout`]), not the plan's.
pub async fn observe_infra(ctx: &Context, infra: &Infra) -> Result<InfraPlan> {
    let ns = infra.namespace().unwrap_or_default();
    let attachments = attachments_of(ctx, &ns, &infra.name_any());
    let mut observed = ctx.observations.observed(&attachments);
    observed.internal_proxy_ip = internal_proxy_ip(ctx, infra, &ns).await?;
    let infra = ctx
        .settings
        .placement
        .apply(&ctx.settings.images.apply(infra));
    Ok(plan_infra(&infra, &attachments, &observed))
}

/// A status with standard conditions.
pub trait Conditions {
    /// The conditions.
    fn conditions(&self) -> &[Condition];
}

macro_rules! conditions {
    ($($ty:ty),*) => {$(
        impl Conditions for $ty {
            fn conditions(&self) -> &[Condition] {
                &self.conditions
            }
        }
    )*};
}
conditions!(
    InfraStatus,
    InfraClusterAttachmentStatus,
    ServerStatus,
    ProxyServerStatus
);

/// An event to record when a condition changes status.
#[derive(Debug, Clone, Copy)]
pub struct Announce<'a> {
    /// The condition type watched.
    pub condition: &'a str,
    /// The event's action.
    pub action: &'a str,
}

/// The JSON merge patch (RFC 7386) that turns `before` into `after`:
/// `after`'s values, with `null` for every key of an object in `before`
/// that `after` lacks. Arrays are replaced whole, as merge patches do.
pub fn merge_patch(before: &serde_json::Value, after: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            let mut out = serde_json::Map::new();
            for (k, v) in a {
                let p = match b.get(k) {
                    Some(old) => merge_patch(old, v),
                    None => v.clone(),
                };
                out.insert(k.clone(), p);
            }
            for k in b.keys() {
                if !a.contains_key(k) {
                    out.insert(k.clone(), Value::Null);
                }
            }
            Value::Object(out)
        }
        _ => after.clone(),
    }
}

/// The one status writer: patches `new` when it differs from `current`
/// (so an unchanged status sends no request), then, when `announce` names a
/// condition whose status changed, records an event on `obj` (a warning
/// unless it became `True`). Returns whether it patched.
pub async fn write_status<K, S>(
    ctx: &Context,
    obj: &K,
    current: Option<&S>,
    new: &S,
    announce: Option<Announce<'_>>,
) -> Result<bool>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + DeserializeOwned
        + Clone
        + std::fmt::Debug,
    S: Serialize + PartialEq + Conditions,
{
    let patched = current != Some(new);
    if patched {
        let api: Api<K> = Api::namespaced(ctx.client.clone(), &namespace(obj)?);
        // A field the new status leaves out (a message cleared, a component
        // turned off) is removed, not kept: serialising `new` alone would
        // omit it, the API server would keep the old value, and every
        // later reconcile would find a difference and patch again.
        let before = current
            .map_or(Ok(serde_json::Value::Null), serde_json::to_value)
            .map_err(kube::Error::SerdeError)?;
        let after = serde_json::to_value(new).map_err(kube::Error::SerdeError)?;
        api.patch_status(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": merge_patch(&before, &after) })),
        )
        .await?;
    }
    if let Some(a) = announce {
        let before = current.and_then(|s| condition_status(s.conditions(), a.condition));
        let after = new.conditions().iter().find(|c| c.type_ == a.condition);
        if let Some(c) = after
            && before != Some(c.status.as_str())
        {
            let warning = c.status != status::TRUE;
            let note = if c.message.is_empty() {
                c.reason.clone()
            } else {
                c.message.clone()
            };
            ctx.event(obj, warning, &c.reason, a.action, note).await;
        }
    }
    Ok(patched)
}

#[cfg(test)]
mod merge_patch_tests {
    use super::merge_patch;
    use serde_json::json;

    /// RFC 7386's own application rule, to check a patch against.
    fn apply(target: &serde_json::Value, patch: &serde_json::Value) -> serde_json::Value {
        match patch {
            serde_json::Value::Object(p) => {
                let mut out = target.as_object().cloned().unwrap_or_default();
                for (k, v) in p {
                    if v.is_null() {
                        out.remove(k);
                    } else {
                        let cur = out.get(k).cloned().unwrap_or(serde_json::Value::Null);
                        out.insert(k.clone(), apply(&cur, v));
                    }
                }
                serde_json::Value::Object(out)
            }
            _ => patch.clone(),
        }
    }

    #[test]
    fn a_field_the_new_status_leaves_out_is_removed() {
        let before = json!({
            "phase": "Ready",
            "components": {"dhcp": {"ready": false, "message": "pool exhausted"}, "dns": {"ready": true}},
            "conditions": [{"type": "Ready", "status": "False"}],
        });
        let after = json!({
            "phase": "Ready",
            "components": {"dhcp": {"ready": true}},
            "conditions": [{"type": "Ready", "status": "True"}],
        });
        let patch = merge_patch(&before, &after);
        assert_eq!(
            patch["components"]["dhcp"]["message"],
            serde_json::Value::Null
        );
        assert!(patch["components"]["dhcp"].get("message").is_some());
        assert_eq!(patch["components"]["dns"], serde_json::Value::Null);
        assert_eq!(apply(&before, &patch), after);
    }

    #[test]
    fn from_nothing_the_patch_is_the_new_status() {
        let after = json!({"phase": "Pending", "conditions": []});
        assert_eq!(merge_patch(&serde_json::Value::Null, &after), after);
        assert_eq!(
            apply(
                &serde_json::Value::Null,
                &merge_patch(&serde_json::Value::Null, &after)
            ),
            after
        );
    }

    #[test]
    fn scalars_and_arrays_are_replaced() {
        let before = json!({"a": [1, 2], "b": {"c": 1}});
        let after = json!({"a": [3], "b": 7});
        let patch = merge_patch(&before, &after);
        assert_eq!(patch, json!({"a": [3], "b": 7}));
        assert_eq!(apply(&before, &patch), after);
    }
}
