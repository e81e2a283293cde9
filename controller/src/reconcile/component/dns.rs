//! The DNSServer reconciler: its children and NetworkPolicy
//! ([`crate::plan::dns::objects`]) and its status from the Deployment; a
//! replica's restart waits for its siblings ([`super::replica_gate`]).

use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;

use super::{
    Context, Result, UndecodableStatus, invalid_server_status, reconcile_server,
    reconcile_undecodable, replica_gate,
};
use crate::cache::Decoded;
use crate::crd::{DNSServer, ServerStatus};
use crate::plan::PlannedCondition;
use crate::plan::workload::rolling::Gate;
use crate::plan::workload::template_hash::template_hash;

/// Reconciles a DNSServer.
pub async fn reconcile_dns(obj: Arc<Decoded<DNSServer>>, ctx: Arc<Context>) -> Result<Action> {
    match &obj.object {
        Ok(d) => {
            let d = &ctx.settings.resources.dns(d);
            reconcile_server(
                d,
                d.status.as_ref(),
                "DNSServer",
                crate::plan::dns::objects,
                dns_gate,
                &ctx,
            )
            .await
        }
        Err(e) => reconcile_undecodable(&obj, e, &ctx).await,
    }
}

fn dns_gate(ctx: &Context, me: &DNSServer, desired: &Deployment) -> Gate {
    replica_gate(
        ctx,
        &ctx.stores.dns_servers,
        me,
        me.spec.replica,
        desired,
        |d: &DNSServer| {
            let planned = crate::plan::dns::children(&ctx.settings.resources.dns(d)).ok();
            Some((
                d.spec.replica?,
                planned.map(|c| template_hash(&c.deployment)),
                true,
            ))
        },
    )
}

impl UndecodableStatus for DNSServer {
    type Status = ServerStatus;
    fn invalid_status(
        existing: Option<&ServerStatus>,
        generation: Option<i64>,
        planned: &[PlannedCondition],
        now: &Time,
    ) -> ServerStatus {
        invalid_server_status(existing, generation, planned, now)
    }
}
