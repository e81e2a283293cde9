//! The Infra reconciler.
//!
//! Apply: make sure the push-token Secret exists, with DHCP the inventory
//! token Secret (the bearer token of the servers' lease inventory API), and
//! for a DHCP pair the pair-token Secret (each created once with a random
//! token, never overwritten), plan the Infra with its attachments and the observed
//! workers, apply the derived DHCPServer(s)/DNSServer/ProxyServer (or delete
//! one whose component was disabled, or the second DHCPServer of a pair that
//! went back to one address), and write the status (per component readiness
//! from the Deployments, attachment totals, conditions).
//!
//! When the Infra's network is a ClusterUserDefinedNetwork it asks the
//! controller to own, that network is created, applied over when it
//! differs, and one it no longer asks for is deleted ([`crate::plan::infra::cudn`]).
//!
//! Cleanup (finalizer `hostedcluster.densityops.com/cleanup`): objects the
//! garbage collector cannot reach because an owner reference cannot cross
//! namespaces or reach a cluster-scoped object: NetworkPolicies labelled for
//! this Infra outside its namespace, and its ClusterUserDefinedNetworks.
//! Everything in the Infra's namespace is owned by it (or by its derived
//! objects) and goes with it: the token Secrets, both DHCPServers of a pair
//! and their children (Deployments, lease PVCs, peer Services, the pair's
//! PodDisruptionBudget).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::{Resource, ResourceExt};

use super::apply::{Applied, apply, delete_if_present, stamp};
use super::component::UndecodableStatus;
use super::step::{Announce, observe_infra, write_status};
use super::{Context, Error, Result};
use crate::cache::{Decoded, cached};
use crate::crd::{
    ComponentsStatus, DHCPServer, DNSServer, DhcpPoolsStatus, FINALIZER, Infra, ProxyServer,
    condition,
};
use crate::plan::dhcp::pair::pair_token_secret_name;
use crate::plan::dhcp::pools;
use crate::plan::infra::cudn;
use crate::plan::infra::network::{MAX_DHCP_SERVERS, MAX_REPLICAS};
use crate::plan::infra::{infra_status, servers_status};
use crate::plan::labels::{
    Component, INFRA_LABEL, inventory_token_secret_name, labels, owner_refs, push_token_secret_name,
};
use crate::plan::{PlannedCondition, merge_conditions};

/// Resync period.
const RESYNC: Duration = Duration::from_secs(300);
/// Condition type saying whether worker addresses can be observed.
pub const WORKERS_OBSERVED: &str = "WorkersObserved";

/// Entry point of the Infra controller. An Infra that cannot be decoded
/// (stored under an older, looser schema) stops neither the watch nor the
/// other Infras: it reports why in its status, and its deletion still
/// completes ([`cleanup_undecodable`]).
pub async fn reconcile(obj: Arc<Decoded<Infra>>, ctx: Arc<Context>) -> Result<Action> {
    let infra = match &obj.object {
        Ok(i) => Arc::new(i.clone()),
        Err(e) if obj.metadata.deletion_timestamp.is_some() => {
            return cleanup_undecodable(&obj, e, &ctx).await;
        }
        Err(e) => return super::component::reconcile_undecodable(&obj, e, &ctx).await,
    };
    let ns = infra
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let api: Api<Infra> = Api::namespaced(ctx.client.clone(), &ns);
    finalizer(&api, FINALIZER, infra, |event| async {
        match event {
            Finalizer::Apply(i) => apply_infra(&i, &ctx).await,
            Finalizer::Cleanup(i) => cleanup(&i, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

/// Creates the token Secret `name` (key `token`, 32 random bytes in hex)
/// when it does not exist. Created, not applied: an existing token is never
/// replaced (running pods hold it: the Envoys' push token, the DHCP pair's).
async fn ensure_token(
    ctx: &Context,
    infra: &Infra,
    ns: &str,
    name: String,
    component: Component,
) -> Result<bool> {
    if cached::<Secret>(&ctx.stores.secrets, ns, &name).is_some() {
        return Ok(false);
    }
    let token = hex::encode(rand::random::<[u8; 32]>());
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(ns.to_string()),
            labels: Some(labels(&infra.name_any(), component)),
            owner_references: owner_refs(infra),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            "token".to_string(),
            ByteString(token.into_bytes()),
        )])),
        type_: Some("Opaque".into()),
        ..Secret::default()
    };
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => Ok(true),
        // Made by an earlier run whose watch event has not arrived yet.
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

async fn apply_derived<K>(
    ctx: &Context,
    store: &kube::runtime::reflector::Store<Decoded<K>>,
    ns: &str,
    name: &str,
    desired: Option<K>,
) -> Result<bool>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + serde::Serialize
        + serde::de::DeserializeOwned
        + Clone
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let api: Api<K> = Api::namespaced(ctx.client.clone(), ns);
    let live = cached(store, ns, name);
    match desired {
        // A live object that cannot be decoded is not up to date: applied over.
        Some(d) => {
            let current = live.as_deref().and_then(Decoded::get);
            Ok(apply(&api, current, d).await? == super::apply::Applied::Written)
        }
        None if live.is_some() => {
            // Disabled component (or invalid spec keeps nothing new): its
            // derived object goes, and its children with it (owned).
            Ok(delete_if_present(&api, name).await?)
        }
        None => Ok(false),
    }
}

/// How many servers a component asks for (one per address in `serverIPs`;
/// the one-address form and an invalid list count as one).
fn server_count<T>(server_ips: &[T], max: usize) -> usize {
    server_ips.len().clamp(1, max)
}

/// The readiness of a component with one server per address, from the
/// Deployments of its first `count` servers.
fn replicas_status(
    ctx: &Context,
    ns: &str,
    infra: &str,
    component: Component,
    enabled: bool,
    count: usize,
) -> crate::crd::ComponentStatus {
    let servers: Vec<(String, Option<Deployment>)> = (0..count)
        .map(|i| component.replica_name(infra, i))
        .map(|n| {
            let d = deployment(ctx, ns, &n);
            (n, d)
        })
        .collect();
    let refs: Vec<(&str, Option<&Deployment>)> = servers
        .iter()
        .map(|(n, d)| (n.as_str(), d.as_ref()))
        .collect();
    servers_status(enabled, &refs)
}

fn deployment(ctx: &Context, ns: &str, name: &str) -> Option<Deployment> {
    cached::<Deployment>(&ctx.stores.deployments, ns, name).map(|d| (*d).clone())
}

async fn apply_infra(infra: &Infra, ctx: &Context) -> Result<Action> {
    let started = Instant::now();
    let ns = infra.namespace().unwrap_or_default();
    let name = infra.name_any();
    let comps = &infra.spec.infra_components;
    if comps.proxy.enabled {
        let secret = push_token_secret_name(&name);
        ensure_token(ctx, infra, &ns, secret, Component::Proxy).await?;
    }
    if comps.dhcp.enabled && comps.dhcp.server_ips.len() == MAX_DHCP_SERVERS {
        let secret = pair_token_secret_name(&name);
        ensure_token(ctx, infra, &ns, secret, Component::Dhcp).await?;
    }
    if comps.dhcp.enabled {
        let secret = inventory_token_secret_name(&name);
        ensure_token(ctx, infra, &ns, secret, Component::Dhcp).await?;
    }
    let plan = observe_infra(ctx, infra).await?;
    ctx.metrics.set_attachments_excluded(
        &format!(
            "{}/{}",
            infra.namespace().unwrap_or_default(),
            infra.name_any()
        ),
        plan.totals.excluded,
    );
    let mut written = 0;
    // An invalid spec keeps the last good derived objects running: they are
    // neither updated nor deleted until the spec is fixed.
    if let Some(d) = plan.desired.clone() {
        let s = &ctx.stores;
        // One DHCPServer per address; the names of the addresses no longer
        // given go (their children with them).
        for i in 0..MAX_DHCP_SERVERS {
            let server = Component::Dhcp.replica_name(&name, i);
            let desired = d.dhcp.get(i).cloned();
            written += usize::from(
                apply_derived::<DHCPServer>(ctx, &s.dhcp_servers, &ns, &server, desired).await?,
            );
        }
        // One DNSServer and one ProxyServer per replica address, likewise.
        for i in 0..MAX_REPLICAS {
            let server = Component::Dns.replica_name(&name, i);
            let desired = d.dns.get(i).cloned();
            written += usize::from(
                apply_derived::<DNSServer>(ctx, &s.dns_servers, &ns, &server, desired).await?,
            );
            let server = Component::Proxy.replica_name(&name, i);
            let desired = d.proxy.get(i).cloned();
            written += usize::from(
                apply_derived::<ProxyServer>(ctx, &s.proxy_servers, &ns, &server, desired).await?,
            );
        }
        written += apply_cudns(ctx, infra).await?;
    }
    let components = ComponentsStatus {
        dhcp: Some(replicas_status(
            ctx,
            &ns,
            &name,
            Component::Dhcp,
            comps.dhcp.enabled,
            server_count(&comps.dhcp.server_ips, MAX_DHCP_SERVERS),
        )),
        dns: Some(replicas_status(
            ctx,
            &ns,
            &name,
            Component::Dns,
            comps.dns.enabled,
            server_count(&comps.dns.server_ips, MAX_REPLICAS),
        )),
        proxy: Some(replicas_status(
            ctx,
            &ns,
            &name,
            Component::Proxy,
            comps.proxy.enabled,
            server_count(&comps.proxy.server_ips, MAX_REPLICAS),
        )),
    };
    let now = (ctx.now)();
    let mut st = infra_status(infra, &plan, components, &now);
    // Say whether worker addresses can be observed at all.
    let existing = infra
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let workers = match ctx.discovered.summary() {
        None => PlannedCondition::yes(WORKERS_OBSERVED, "AllAPIsServed", ""),
        Some(msg) => PlannedCondition::no(WORKERS_OBSERVED, "OptionalAPIsMissing", msg),
    };
    st.conditions.extend(merge_conditions(
        &existing,
        &[workers],
        infra.metadata.generation,
        &now,
    ));
    // The pool figures of the fullest of its DHCP servers, as their
    // inventory poll last wrote them, and that server's pool conditions.
    if comps.dhcp.enabled {
        let servers: Vec<DhcpPoolsStatus> = (0..MAX_DHCP_SERVERS)
            .filter_map(|i| {
                let server = Component::Dhcp.replica_name(&name, i);
                let d = cached(&ctx.stores.dhcp_servers, &ns, &server)?;
                d.get()?.status.as_ref()?.pools.clone()
            })
            .collect();
        st.dhcp_pools = pools::fullest(servers.iter());
        if let Some(p) = &st.dhcp_pools {
            st.conditions.extend(merge_conditions(
                &existing,
                &pools::pool_conditions(p),
                infra.metadata.generation,
                &now,
            ));
        }
    }
    let had_pools = infra
        .status
        .as_ref()
        .is_some_and(|s| s.dhcp_pools.is_some());
    if had_pools && st.dhcp_pools.is_none() {
        // A merge patch leaves a field it does not name: remove the figures
        // of a DHCP that is gone explicitly, once.
        let api: Api<Infra> = Api::namespaced(ctx.client.clone(), &ns);
        api.patch_status(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"status": {"dhcpPools": null}})),
        )
        .await?;
        written += 1;
    }
    let announce = Announce {
        condition: condition::READY,
        action: "Reconcile",
    };
    if write_status(ctx, infra, infra.status.as_ref(), &st, Some(announce)).await? {
        written += 1;
    }
    tracing::debug!(infra = %name, written, "infra reconciled");
    ctx.metrics.reconciled("Infra", started.elapsed());
    Ok(Action::requeue(RESYNC))
}

/// NetworkPolicies labelled for this Infra outside its namespace (owner
/// references cannot cross namespaces, so GC will not remove them).
pub fn foreign_policies(ctx: &Context, infra: &impl Resource) -> Vec<Arc<NetworkPolicy>> {
    let ns = infra.namespace().unwrap_or_default();
    let name = infra.name_any();
    let owner_ns = infra.namespace();
    ctx.stores.network_policies.state_filter(|p| {
        p.labels().get(INFRA_LABEL) == Some(&name)
            && p.labels().get(OWNER_NAMESPACE_LABEL) == owner_ns.as_ref()
            && p.namespace().as_deref() != Some(ns.as_str())
    })
}

pub use crate::plan::network_policy::OWNER_NAMESPACE_LABEL;

fn cudn_api(ctx: &Context) -> Api<DynamicObject> {
    Api::all_with(ctx.client.clone(), &cudn::api_resource())
}

/// The ClusterUserDefinedNetworks labelled for `infra` (none when the
/// cluster does not serve the kind).
async fn owned_cudns(ctx: &Context, infra: &impl Resource) -> Result<Vec<DynamicObject>> {
    let lp = ListParams::default().labels(&cudn::owner_selector(infra));
    match cudn_api(ctx).list(&lp).await {
        // The selector is the owner check; this one guards a server that
        // ignored it.
        Ok(list) => Ok(list
            .items
            .into_iter()
            .filter(|c| cudn::owned_by(c, infra))
            .collect()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(Vec::new()),
        Err(e) => Err(e.into()),
    }
}

async fn delete_cudn(ctx: &Context, name: &str) -> Result<bool> {
    Ok(delete_if_present(&cudn_api(ctx), name).await?)
}

/// Creates, applies over or deletes `infra`'s ClusterUserDefinedNetworks as
/// [`cudn::plan_cudns`] says; returns the number of writes. Only an Infra
/// whose network is a ClusterUserDefinedNetwork is looked at, so one on a
/// NetworkAttachmentDefinition sends no request for them.
async fn apply_cudns(ctx: &Context, infra: &Infra) -> Result<usize> {
    if !cudn::names_a_cudn(infra) {
        return Ok(0);
    }
    let owned = owned_cudns(ctx, infra).await?;
    let plan = cudn::plan_cudns(cudn::desired_cudn(infra), &owned);
    let api = cudn_api(ctx);
    let mut written = 0;
    if let Some(mut d) = plan.create {
        // Created, not applied: a network of that name that is not this
        // Infra's (no owner labels) is refused by the server, not taken over.
        stamp(&mut d);
        let pp = PostParams {
            field_manager: Some(crate::crd::FIELD_MANAGER.to_string()),
            ..PostParams::default()
        };
        match api.create(&pp, &d).await {
            Ok(_) => written += 1,
            Err(kube::Error::Api(e)) if e.code == 409 => {
                ctx.event(
                    infra,
                    true,
                    "NetworkNotOwned",
                    "Reconcile",
                    format!(
                        "ClusterUserDefinedNetwork {} exists and is not this Infra's; it is left as it is",
                        d.name_any()
                    ),
                )
                .await;
            }
            Err(e) => return Err(e.into()),
        }
    }
    if let Some((d, live)) = plan.apply
        && apply(&api, Some(&live), d).await? == Applied::Written
    {
        written += 1;
    }
    for name in plan.delete {
        written += usize::from(delete_cudn(ctx, &name).await?);
    }
    Ok(written)
}

/// The deletion of an Infra whose spec cannot be decoded: what cleanup
/// can do from its name alone (NetworkPolicies and ClusterUserDefinedNetworks
/// found by their owner labels), then its
/// finalizer goes, so the deletion never hangs on a spec nobody can read.
async fn cleanup_undecodable(obj: &Decoded<Infra>, error: &str, ctx: &Context) -> Result<Action> {
    if !obj.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let ns = obj
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let name = obj.name_any();
    tracing::warn!(infra = %name, namespace = %ns, "deleting an Infra that cannot be decoded ({error}): cleaning up by name");
    delete_foreign_policies(ctx, obj).await?;
    // Whether it named a ClusterUserDefinedNetwork is in the unreadable
    // spec: look for owned ones anyway.
    delete_owned_cudns(ctx, obj).await?;
    let kept: Vec<&String> = obj
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .collect();
    let api: Api<Decoded<Infra>> = Api::namespaced(ctx.client.clone(), &ns);
    // The resourceVersion makes the API server refuse the patch (409, and
    // the reconcile runs again) when the finalizers changed meanwhile.
    api.patch(
        &name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({
            "metadata": {
                "finalizers": kept,
                "resourceVersion": obj.metadata.resource_version,
            }
        })),
    )
    .await?;
    Ok(Action::await_change())
}

/// Deletes the NetworkPolicies labelled for `infra` outside its namespace.
async fn delete_foreign_policies(ctx: &Context, infra: &impl Resource) -> Result<()> {
    for p in foreign_policies(ctx, infra) {
        let api: Api<NetworkPolicy> =
            Api::namespaced(ctx.client.clone(), &p.namespace().unwrap_or_default());
        delete_if_present(&api, &p.name_any()).await?;
    }
    Ok(())
}

/// Deletes the ClusterUserDefinedNetworks `infra` owns.
async fn delete_owned_cudns(ctx: &Context, infra: &impl Resource) -> Result<()> {
    for c in owned_cudns(ctx, infra).await? {
        delete_cudn(ctx, &c.name_any()).await?;
    }
    Ok(())
}

async fn cleanup(infra: &Infra, ctx: &Context) -> Result<Action> {
    delete_foreign_policies(ctx, infra).await?;
    if cudn::names_a_cudn(infra) {
        delete_owned_cudns(ctx, infra).await?;
    }
    ctx.event(
        infra,
        false,
        "CleanedUp",
        "Delete",
        "removed cross-namespace objects; the rest is garbage-collected".into(),
    )
    .await;
    Ok(Action::await_change())
}

impl UndecodableStatus for Infra {
    type Status = crate::crd::InfraStatus;
    fn invalid_status(
        existing: Option<&crate::crd::InfraStatus>,
        generation: Option<i64>,
        planned: &[PlannedCondition],
        now: &Time,
    ) -> crate::crd::InfraStatus {
        crate::plan::infra::invalid_infra_status(existing, generation, planned, now)
    }
}
