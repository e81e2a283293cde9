//! The DHCPServer reconciler: its children and NetworkPolicy
//! ([`crate::plan::dhcp::objects`]) and its status from the Deployment.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;

use super::{
    Context, Result, UndecodableStatus, invalid_server_status, reconcile_server,
    reconcile_undecodable,
};
use crate::cache::Decoded;
use crate::crd::{DHCPServer, ServerStatus};
use crate::plan::PlannedCondition;
use crate::plan::workload::rolling::Gate;

/// Reconciles a DHCPServer.
pub async fn reconcile_dhcp(obj: Arc<Decoded<DHCPServer>>, ctx: Arc<Context>) -> Result<Action> {
    match &obj.object {
        Ok(d) => {
            let d = &ctx.settings.resources.dhcp(d);
            reconcile_server(
                d,
                d.status.as_ref(),
                "DHCPServer",
                crate::plan::dhcp::objects,
                // A DHCP pair's servers restart on their own: each serves
                // the whole pool while the other is down.
                |_, _, _| Gate::Apply,
                &ctx,
            )
            .await
        }
        Err(e) => reconcile_undecodable(&obj, e, &ctx).await,
    }
}

impl UndecodableStatus for DHCPServer {
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
