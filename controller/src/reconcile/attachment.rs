//! The InfraClusterAttachment reconciler.
//!
//! Apply: plan the attachment's Infra (the same pure plan the Infra
//! reconciler makes), write this attachment's status from its verdict, and
//! keep one NetworkPolicy in the hosted cluster's control-plane namespace
//! that lets the Infra's Envoy pods in (HyperShift's own policies there
//! admit only known peers). The policy exists only while the attachment is
//! accepted.
//!
//! Cleanup (finalizer): that policy lives in another namespace, so no owner
//! reference can garbage-collect it; the finalizer deletes it before the
//! attachment goes. The Infra re-plans on the attachment's deletion (its
//! routes, DNS names and DHCP reservations leave the derived objects).

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};

use super::apply::apply;
use super::step::{Announce, observe_infra, write_status};
use super::{Context, Error, Result};
use crate::cache::{Decoded, cached};
use crate::crd::{
    AttachmentTotals, FINALIZER, InfraClusterAttachment, ProxyServer, condition, status,
};
use crate::plan::condition_status;
use crate::plan::infra::{InfraPlan, attachment_status};
use crate::plan::labels::Component;
use crate::plan::network_policy::control_plane_policy;
pub use crate::plan::network_policy::{ATTACHMENT_LABEL, OWNER_NAMESPACE_LABEL};

const RESYNC: Duration = Duration::from_secs(300);

/// Entry point of the attachment controller.
pub async fn reconcile(att: Arc<InfraClusterAttachment>, ctx: Arc<Context>) -> Result<Action> {
    let ns = att
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let api: Api<InfraClusterAttachment> = Api::namespaced(ctx.client.clone(), &ns);
    finalizer(&api, FINALIZER, att, |event| async {
        match event {
            Finalizer::Apply(a) => apply_attachment(&a, &ctx).await,
            Finalizer::Cleanup(a) => cleanup(&a, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

/// NetworkPolicies this attachment made (any namespace).
pub fn policies_of(ctx: &Context, att: &InfraClusterAttachment) -> Vec<Arc<NetworkPolicy>> {
    let name = att.name_any();
    let ns = att.namespace();
    ctx.stores.network_policies.state_filter(|p| {
        p.labels().get(ATTACHMENT_LABEL) == Some(&name)
            && p.labels().get(OWNER_NAMESPACE_LABEL) == ns.as_ref()
    })
}

async fn delete_policy(ctx: &Context, p: &NetworkPolicy) -> Result<()> {
    let api: Api<NetworkPolicy> =
        Api::namespaced(ctx.client.clone(), &p.namespace().unwrap_or_default());
    super::apply::delete_if_present(&api, &p.name_any()).await?;
    Ok(())
}

fn empty_plan() -> InfraPlan {
    InfraPlan {
        desired: None,
        errors: Vec::new(),
        attachments: Vec::new(),
        totals: AttachmentTotals::default(),
        ignored_fields: Vec::new(),
        no_upstreams: false,
    }
}

async fn apply_attachment(att: &InfraClusterAttachment, ctx: &Context) -> Result<Action> {
    let started = Instant::now();
    let ns = att.namespace().unwrap_or_default();
    let infra_name = &att.spec.infra_ref.name;
    let infra = crate::cache::cached_infra(&ctx.stores.infras, &ns, infra_name);
    let plan = match &infra {
        Some(i) => observe_infra(ctx, i).await?,
        None => empty_plan(),
    };
    // Every proxy replica must hold the table: unknown while one has not
    // reported, false while one is out of sync.
    let names: Vec<String> = match plan.desired.as_ref() {
        Some(d) if !d.proxy.is_empty() => d.proxy.iter().map(|p| p.name_any()).collect(),
        _ => vec![Component::Proxy.derived_name(infra_name)],
    };
    let per_replica: Vec<Option<bool>> = names
        .iter()
        .map(|name| {
            let p = cached::<Decoded<ProxyServer>>(&ctx.stores.proxy_servers, &ns, name)?;
            let st = p.get()?.status.as_ref()?;
            condition_status(&st.conditions, condition::ROUTES_SYNCED).map(|s| s == status::TRUE)
        })
        .collect();
    let routes_synced = if per_replica.contains(&Some(false)) {
        Some(false)
    } else if per_replica.contains(&None) {
        None
    } else {
        Some(true)
    };
    let st = attachment_status(att, &plan, routes_synced, &(ctx.now)());

    // The control-plane NetworkPolicy, while accepted (planned in
    // `plan::network_policy`; applied or deleted here).
    let desired = control_plane_policy(plan.verdict(&att.name_any()), &ns, infra_name);
    for p in policies_of(ctx, att) {
        let keep = desired.as_ref().is_some_and(|d| {
            d.metadata.name == p.metadata.name && d.metadata.namespace == p.metadata.namespace
        });
        if !keep {
            delete_policy(ctx, &p).await?;
        }
    }
    if let Some(d) = desired {
        let cp_ns = d.metadata.namespace.clone().unwrap_or_default();
        let api: Api<NetworkPolicy> = Api::namespaced(ctx.client.clone(), &cp_ns);
        let live = cached::<NetworkPolicy>(&ctx.stores.network_policies, &cp_ns, &d.name_any());
        apply(&api, live.as_deref(), d).await?;
    }

    // Apps ingress in the hosted cluster and public DNS (never fails the reconcile).
    let st = super::hosted::apply(ctx, att, &plan, st).await;
    let announce = Announce {
        condition: condition::ACCEPTED,
        action: "Reconcile",
    };
    write_status(ctx, att, att.status.as_ref(), &st, Some(announce)).await?;
    ctx.metrics
        .reconciled("InfraClusterAttachment", started.elapsed());
    Ok(Action::requeue(RESYNC))
}

async fn cleanup(att: &InfraClusterAttachment, ctx: &Context) -> Result<Action> {
    for p in policies_of(ctx, att) {
        delete_policy(ctx, &p).await?;
    }
    super::hosted::cleanup(ctx, att).await?;
    Ok(Action::await_change())
}
