//! The ProxyServer reconciler: the filter rollout ([`crate::rollout`]), its
//! children and NetworkPolicy ([`crate::plan::proxy::objects`]), the route
//! sync to every Envoy replica ([`super::routes`]), then its status.

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::runtime::controller::Action;

use super::routes::{push_token, routes_synced, sync_routes};
use super::{
    Context, RETRY_PUSH, Result, UndecodableStatus, admission_conditions, apply_objects,
    reconcile_undecodable, replica_gate, rollout_of, waiting_conditions,
};
use crate::cache::Decoded;
use crate::crd::{ProxyServer, ProxyServerStatus, condition};
use crate::plan::workload::readiness::{invalid_conditions, rollout_conditions};
use crate::plan::workload::rolling::Gate;
use crate::plan::workload::template_hash::template_hash;
use crate::plan::{PlannedCondition, merge_conditions};
use crate::reconcile::step::{Announce, namespace, write_status};

/// Reconciles a ProxyServer: children, then the route push, then status.
pub async fn reconcile_proxy(
    decoded: Arc<Decoded<ProxyServer>>,
    ctx: Arc<Context>,
) -> Result<Action> {
    let obj = match &decoded.object {
        Ok(p) => p,
        Err(e) => return reconcile_undecodable(&decoded, e, &ctx).await,
    };
    let started = Instant::now();
    let ns = namespace(obj)?;
    let generation = obj.metadata.generation;
    let existing = obj.status.clone().unwrap_or_default();
    let now = (ctx.now)();
    let mut st = ProxyServerStatus {
        observed_generation: generation,
        routes_generation: existing.routes_generation,
        routes_digest: existing.routes_digest.clone(),
        filter_digest: existing.filter_digest.clone(),
        replica_status: existing.replica_status.clone(),
        ..ProxyServerStatus::default()
    };
    let mut planned;
    let requeue;
    // Filter rollout: the checked module, its derived ConfigMap, the status.
    let filter = crate::rollout::prepare(&ctx.rollout, &ctx.stores, obj).await;
    let objects = match push_token(&ctx, obj).await {
        Ok(token) => crate::plan::proxy::objects(
            &ctx.settings.resources.proxy(obj),
            &token,
            Some(&filter),
            ctx.settings.policy_peers(),
        )
        .map(|o| (o, token)),
        Err(e) => Err(anyhow::anyhow!(e)),
    };
    match objects {
        Err(e) => {
            planned = invalid_conditions(&e);
            // A missing token Secret or a bad spec: look again later.
            requeue = RETRY_PUSH * 6;
        }
        Ok((objects, token)) => {
            let gate = proxy_gate(&ctx, obj, &objects.children.deployment, &token);
            apply_objects(&ctx, &ns, &objects, &gate).await?;
            let refused = admission_conditions(&ctx, &ns, &objects.children).await?;
            let r = rollout_of(&ctx, &ns, &objects.children.deployment.name_any());
            st.replicas = r.replicas;
            st.ready_replicas = r.ready;
            planned = match &gate {
                Gate::Apply => rollout_conditions(&r),
                Gate::Wait(why) => waiting_conditions(&r, why),
            };
            let (synced, again) = sync_routes(&ctx, obj, &token, &mut st, &now).await;
            requeue = match gate {
                Gate::Apply => again,
                Gate::Wait(_) => again.min(RETRY_PUSH),
            };
            planned.push(synced);
            planned.extend(refused);
        }
    }
    filter.fill_status(&mut st);
    ctx.metrics.set_filter_rejected(
        &format!("{ns}/{}", obj.name_any()),
        filter.condition.status == "True",
    );
    planned.push(filter.condition.clone());
    st.conditions = merge_conditions(&existing.conditions, &planned, generation, &now);
    let announce = Announce {
        condition: condition::ROUTES_SYNCED,
        action: "PushRoutes",
    };
    write_status(&ctx, obj, obj.status.as_ref(), &st, Some(announce)).await?;
    ctx.metrics.reconciled("ProxyServer", started.elapsed());
    Ok(Action::requeue(requeue))
}

fn proxy_gate(ctx: &Context, me: &ProxyServer, desired: &Deployment, token: &str) -> Gate {
    replica_gate(
        ctx,
        &ctx.stores.proxy_servers,
        me,
        me.spec.replica,
        desired,
        |p: &ProxyServer| {
            let planned =
                crate::plan::proxy::children(&ctx.settings.resources.proxy(p), token).ok();
            Some((
                p.spec.replica?,
                planned.map(|c| template_hash(&c.deployment)),
                routes_synced(p),
            ))
        },
    )
}

impl UndecodableStatus for ProxyServer {
    type Status = ProxyServerStatus;
    fn invalid_status(
        existing: Option<&ProxyServerStatus>,
        generation: Option<i64>,
        planned: &[PlannedCondition],
        now: &Time,
    ) -> ProxyServerStatus {
        let old = existing.cloned().unwrap_or_default();
        ProxyServerStatus {
            observed_generation: generation,
            conditions: merge_conditions(&old.conditions, planned, generation, now),
            ..old
        }
    }
}
