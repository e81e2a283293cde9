//! The proxy's route sync: which Envoy pods of a ProxyServer take a push,
//! the push token they check, and the push of the spec's routing table to
//! every replica ([`crate::push`]) with the per-replica status and the
//! `RoutesSynced` condition it yields.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::Api;
use tracing::info;

use super::{CHECK_PUSH, Context, Error, RESYNC, RETRY_PUSH, Result};
use crate::cache::cached;
use crate::crd::{ProxyReplicaStatus, ProxyServer, ProxyServerStatus, condition};
use crate::plan::PlannedCondition;
use crate::plan::labels::{SERVER_LABEL, instance_of};
use crate::plan::proxy::next_table;
use crate::plan::workload::rolling;
use crate::push::{Outcome, Replica};
use crate::reconcile::step::namespace;

/// Whether a ProxyServer's status says every pod holds the routing table of
/// its current spec.
pub(crate) fn routes_synced(p: &ProxyServer) -> bool {
    p.status.as_ref().is_some_and(|st| {
        st.observed_generation == p.metadata.generation
            && st
                .conditions
                .iter()
                .any(|c| c.type_ == condition::ROUTES_SYNCED && c.status == "True")
    })
}

/// The Envoy pods of a ProxyServer that can take a push: running, with an
/// IP, not being deleted. Not only Ready ones: an Envoy is not Ready until
/// it holds a table. Of several replicas, each pushes to its own pods.
pub fn replicas(ctx: &Context, proxy: &ProxyServer) -> Vec<Replica> {
    let ns = proxy.namespace().unwrap_or_default();
    let instance = instance_of(&proxy.metadata);
    let own = rolling::is_replica(proxy.spec.replica).then(|| proxy.name_any());
    let mut pods: Vec<Replica> = ctx
        .stores
        .pods
        .state_filter(|p| {
            p.namespace().as_deref() == Some(ns.as_str())
                && p.labels().get(oooi_vocabulary::labels::APP_INSTANCE) == Some(&instance)
                && p.labels()
                    .get(oooi_vocabulary::labels::APP_COMPONENT)
                    .map(String::as_str)
                    == Some("proxy")
                && own
                    .as_ref()
                    .is_none_or(|own| p.labels().get(SERVER_LABEL) == Some(own))
                && p.metadata.deletion_timestamp.is_none()
        })
        .iter()
        .filter_map(|p| {
            let st = p.status.as_ref()?;
            if st.phase.as_deref() != Some("Running") {
                return None;
            }
            let ip: std::net::IpAddr = st.pod_ip.as_deref()?.parse().ok()?;
            Some(Replica {
                name: p.name_any(),
                addr: std::net::SocketAddr::new(ip, proxy.spec.push_port),
            })
        })
        .collect();
    pods.sort_by(|a, b| a.name.cmp(&b.name));
    pods
}

/// The push token from the Secret the spec names (cache first: the
/// reconciler-created Secret carries the managed-by label).
pub(crate) async fn push_token(ctx: &Context, proxy: &ProxyServer) -> Result<String> {
    let ns = namespace(proxy)?;
    let name = &proxy.spec.push_token_secret.name;
    let secret = match cached::<Secret>(&ctx.stores.secrets, &ns, name) {
        Some(s) => Some((*s).clone()),
        None => {
            Api::<Secret>::namespaced(ctx.client.clone(), &ns)
                .get_opt(name)
                .await?
        }
    };
    let secret = secret.ok_or_else(|| Error::PushToken(format!("Secret {ns}/{name} not found")))?;
    let token = secret
        .data
        .as_ref()
        .and_then(|d| d.get("token"))
        .map(|b| String::from_utf8_lossy(&b.0).trim().to_string())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get("token").cloned())
        })
        .filter(|t| !t.is_empty())
        .ok_or_else(|| Error::PushToken(format!("Secret {ns}/{name} has no key `token`")))?;
    Ok(token)
}

/// Pushes the table to every replica; fills the route fields of `st` and
/// returns the `RoutesSynced` condition and when to look again.
pub(crate) async fn sync_routes(
    ctx: &Context,
    proxy: &ProxyServer,
    token: &str,
    st: &mut ProxyServerStatus,
    now: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) -> (PlannedCondition, Duration) {
    let table = next_table(proxy);
    if let Err(e) = table.validate() {
        return (
            PlannedCondition::no(
                condition::ROUTES_SYNCED,
                "InvalidRoutes",
                format!("spec.{e}"),
            ),
            RESYNC,
        );
    }
    let replicas = replicas(ctx, proxy);
    let key = format!(
        "{}/{}",
        proxy.namespace().unwrap_or_default(),
        proxy.name_any()
    );
    if replicas.is_empty() {
        ctx.metrics.set_proxy_replicas(&key, &[]);
        st.replica_status.clear();
        return (
            PlannedCondition::no(
                condition::ROUTES_SYNCED,
                "NoReplicas",
                "no running Envoy pod to push to",
            ),
            RESYNC,
        );
    }
    let report = ctx.pusher.sync(&table, &replicas, token).await;
    let held: Vec<(String, bool, u64)> = report
        .replicas
        .iter()
        .map(|r| {
            let generation = if r.synced() {
                report.generation
            } else {
                r.previous_generation
            };
            (r.name.clone(), r.synced(), generation)
        })
        .collect();
    ctx.metrics.set_proxy_replicas(&key, &held);
    if report.pushed() > 0 {
        info!(
            proxy = %proxy.name_any(),
            generation = report.generation,
            pushed = report.pushed(),
            replicas = report.replicas.len(),
            took_ms = report.took.as_secs_f64() * 1e3,
            "routes pushed"
        );
    }
    let previous = std::mem::take(&mut st.replica_status);
    st.replica_status = report
        .replicas
        .iter()
        .map(|r| {
            let before = previous.iter().find(|p| p.pod == r.name);
            let synced = r.synced();
            ProxyReplicaStatus {
                pod: r.name.clone(),
                pod_ip: Some(r.addr.ip().to_string()),
                routes_synced: synced,
                generation: synced.then_some(report.generation as i64),
                digest: synced.then(|| report.digest.clone()),
                last_push_time: if r.outcome == Outcome::Pushed {
                    Some(now.clone())
                } else {
                    before.and_then(|b| b.last_push_time.clone())
                },
                message: match &r.outcome {
                    Outcome::Failed(f) => Some(f.to_string()),
                    _ => None,
                },
            }
        })
        .collect();
    if report.synced() > 0 {
        st.routes_generation = Some(report.generation as i64);
        st.routes_digest = Some(report.digest.clone());
    }
    if report.all_synced() {
        (
            PlannedCondition::yes(
                condition::ROUTES_SYNCED,
                "AllReplicasSynced",
                report.message(),
            ),
            CHECK_PUSH,
        )
    } else {
        (
            PlannedCondition::no(
                condition::ROUTES_SYNCED,
                "ReplicasOutOfSync",
                report.message(),
            ),
            RETRY_PUSH,
        )
    }
}
