//! Reconcilers of the derived kinds: DHCPServer ([`dhcp`]), DNSServer
//! ([`dns`]), ProxyServer ([`proxy`], its route sync in [`routes`]).
//!
//! Each writes its children (planned from its spec alone by
//! `plan::{dhcp,dns,proxy}::children`) and the NetworkPolicy of its pods
//! (`plan::{dhcp,dns,proxy}::objects`), then its status from the real
//! Deployment. What they share lives here: applying the objects in order,
//! the admission check, the rolling gate of a replica, the status of an
//! object that cannot be decoded and the reconcile of a component whose
//! objects are all there is to it (DHCP, DNS).

mod dhcp;
mod dns;
mod proxy;
mod routes;

pub use dhcp::reconcile_dhcp;
pub use dns::reconcile_dns;
pub use proxy::reconcile_proxy;
pub use routes::replicas;

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::info;

use super::apply::{Applied, apply};
use super::step::{Conditions, namespace, write_status};
use super::{Context, Error, Result};
use crate::cache::{Decoded, cached};
use crate::crd::{ReplicaOf, ServerStatus, condition};
use crate::plan::labels::instance_of;
use crate::plan::network_policy::PolicyPeers;
use crate::plan::workload::Objects;
use crate::plan::workload::readiness::{
    Rollout, invalid_conditions, rollout, rollout_conditions, server_status,
};
use crate::plan::workload::rolling::{self, Gate, ReplicaState};
use crate::plan::workload::template_hash::template_hash;
use crate::plan::{Children, PlannedCondition};

/// Resync period when nothing is pending.
const RESYNC: Duration = Duration::from_secs(300);
/// Retry period while routes are out of sync on some replica.
const RETRY_PUSH: Duration = Duration::from_secs(5);
/// Periodic check of in-sync replicas (catches an Envoy restart the pod
/// watch did not show, e.g. a crash loop between two watch events).
const CHECK_PUSH: Duration = Duration::from_secs(60);

async fn apply_one<K>(ctx: &Context, store: &Store<K>, ns: &str, desired: &K) -> Result<Applied>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Serialize
        + DeserializeOwned
        + Clone
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let api: Api<K> = Api::namespaced(ctx.client.clone(), ns);
    let live = cached(store, ns, &desired.name_any());
    Ok(apply(&api, live.as_deref(), desired.clone()).await?)
}

/// Applies every object (ServiceAccount, with `--openshift-scc` its SCC Role
/// and RoleBinding, ConfigMap, Secret, PVC, Services, PodDisruptionBudget,
/// NetworkPolicy, Deployment, in that order, so the pods find what they
/// mount, are admitted, and never run without their NetworkPolicy);
/// returns how many were written.
///
/// The Deployment waits when `gate` says so (a replica whose restart would
/// take a second replica of its component down, see [`rolling::gate`]);
/// everything else, which the programs reload, is applied at once.
pub async fn apply_objects(ctx: &Context, ns: &str, o: &Objects, gate: &Gate) -> Result<usize> {
    let s = &ctx.stores;
    // On OpenShift the SCC assigns UID and fsGroup. The template hash stays
    // that of the portable plan, so the rolling gate compares like with like.
    let mut platform = o.children.clone();
    if ctx.settings.openshift_scc {
        crate::plan::workload::scc::for_openshift(&mut platform.deployment);
    }
    let c = &platform;
    let mut written = Vec::new();
    written.push(apply_one(ctx, &s.service_accounts, ns, &c.service_account).await?);
    if ctx.settings.openshift_scc {
        let grant = crate::plan::workload::scc::scc_rbac(c)
            .ok_or_else(|| Error::NoAdmittingScc(c.deployment.name_any()))?;
        written.push(apply_one(ctx, &s.roles, ns, &grant.role).await?);
        written.push(apply_one(ctx, &s.role_bindings, ns, &grant.role_binding).await?);
    }
    if let Some(cm) = &c.config_map {
        written.push(apply_one(ctx, &s.config_maps, ns, cm).await?);
    }
    if let Some(sec) = &c.secret {
        written.push(apply_one(ctx, &s.secrets, ns, sec).await?);
    }
    if let Some(pvc) = &c.pvc {
        written.push(apply_one(ctx, &s.pvcs, ns, pvc).await?);
    }
    for svc in &c.services {
        written.push(apply_one(ctx, &s.services, ns, svc).await?);
    }
    if let Some(pdb) = &c.pdb {
        written.push(apply_one(ctx, &s.pdbs, ns, pdb).await?);
    }
    if remove_stale(ctx, ns, c).await? {
        written.push(Applied::Written);
    }
    if let Some(policy) = &o.network_policy {
        written.push(apply_one(ctx, &s.network_policies, ns, policy).await?);
    }
    match gate {
        Gate::Apply => written.push(apply_one(ctx, &s.deployments, ns, &c.deployment).await?),
        Gate::Wait(why) => {
            info!(deployment = %c.deployment.name_any(), namespace = ns, "update held back: {why}");
        }
    }
    Ok(written.iter().filter(|w| **w == Applied::Written).count())
}

/// Whether the SecurityContextConstraints `name` exists (a read by name;
/// the controller never writes SCCs).
pub async fn scc_exists(client: &kube::Client, name: &str) -> Result<bool> {
    use kube::api::DynamicObject;
    use kube::discovery::ApiResource;
    let group = crate::plan::workload::scc::SCC_GROUP;
    let resource = ApiResource {
        group: group.to_string(),
        version: "v1".to_string(),
        api_version: format!("{group}/v1"),
        kind: "SecurityContextConstraints".to_string(),
        plural: "securitycontextconstraints".to_string(),
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    Ok(api.get_opt(name).await?.is_some())
}

/// `Degraded` when the cluster would refuse the pods of `c`: the namespace's
/// Pod Security label below the level they need, or (on OpenShift) the SCC
/// the install provides missing ([`crate::plan::workload::pod_security::admission_refusal`]).
/// Pods that meet `restricted` and need no SCC of the install's cost no
/// request.
pub async fn admission_conditions(
    ctx: &Context,
    ns: &str,
    c: &Children,
) -> Result<Vec<PlannedCondition>> {
    use crate::plan::workload::pod_security::{
        Admission, ENFORCE_LABEL, Level, admission_refusal, level,
    };
    let mut deployment = c.deployment.clone();
    if ctx.settings.openshift_scc {
        crate::plan::workload::scc::for_openshift(&mut deployment);
    }
    let Some(pod) = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
    else {
        return Ok(Vec::new());
    };
    let needed = level(pod);
    let install_scc = if ctx.settings.openshift_scc {
        crate::plan::workload::scc::install_scc(&deployment)
    } else {
        None
    };
    if needed == Level::Restricted && install_scc.is_none() {
        return Ok(Vec::new());
    }
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(ctx.client.clone());
    let labels = namespaces
        .get_opt(ns)
        .await?
        .and_then(|n| n.metadata.labels)
        .unwrap_or_default();
    let scc = match install_scc {
        Some(name) => Some((name, scc_exists(&ctx.client, name).await?)),
        None => None,
    };
    let admission = Admission {
        namespace: ns,
        enforce: labels.get(ENFORCE_LABEL).map(String::as_str),
        install_scc: scc,
    };
    Ok(admission_refusal(needed, &admission)
        .map(|(reason, message)| PlannedCondition::yes(condition::DEGRADED, reason, message))
        .into_iter()
        .collect())
}

/// Deletes the Services and PodDisruptionBudgets the same owner holds that
/// the children no longer plan (a DHCP pair gone back to one server: its
/// peer Service and budget); true when one went.
async fn remove_stale(ctx: &Context, ns: &str, c: &Children) -> Result<bool> {
    let owner = c
        .deployment
        .metadata
        .owner_references
        .as_ref()
        .and_then(|o| o.first())
        .map(|o| o.uid.clone());
    let Some(owner) = owner else {
        return Ok(false);
    };
    let owned = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        meta.namespace.as_deref() == Some(ns)
            && meta
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.uid == owner)
    };
    let keep: Vec<String> = c.services.iter().map(|s| s.name_any()).collect();
    let services = ctx
        .stores
        .services
        .state_filter(|s| owned(&s.metadata) && !keep.contains(&s.name_any()));
    let keep = c.pdb.as_ref().map(|p| p.name_any());
    let budgets = ctx
        .stores
        .pdbs
        .state_filter(|p| owned(&p.metadata) && Some(p.name_any()) != keep);
    let mut removed = false;
    for s in services {
        removed |= delete::<Service>(ctx, ns, &s.name_any()).await?;
    }
    for p in budgets {
        removed |= delete::<PodDisruptionBudget>(ctx, ns, &p.name_any()).await?;
    }
    Ok(removed)
}

/// Deletes `name` (already gone is fine); true when this call deleted it.
async fn delete<K>(ctx: &Context, ns: &str, name: &str) -> Result<bool>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + DeserializeOwned
        + Clone
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(ctx.client.clone(), ns);
    Ok(super::apply::delete_if_present(&api, name).await?)
}

/// The rollout of Deployment `name`, from the cache.
pub(crate) fn rollout_of(ctx: &Context, ns: &str, name: &str) -> Rollout {
    let d = cached::<Deployment>(&ctx.stores.deployments, ns, name);
    rollout(name, d.as_deref())
}

/// The status a derived kind reports while its object cannot be decoded:
/// the planned conditions (`InvalidSpec`) merged into the stored ones, the
/// rest of the stored status kept.
pub(crate) trait UndecodableStatus {
    /// The kind's status.
    type Status: Serialize + DeserializeOwned + PartialEq + Conditions;

    /// The status of an object whose spec cannot be read.
    fn invalid_status(
        existing: Option<&Self::Status>,
        generation: Option<i64>,
        planned: &[PlannedCondition],
        now: &Time,
    ) -> Self::Status;
}

pub(crate) fn invalid_server_status(
    existing: Option<&ServerStatus>,
    generation: Option<i64>,
    planned: &[PlannedCondition],
    now: &Time,
) -> ServerStatus {
    server_status(
        existing,
        generation,
        planned,
        &Rollout::default(),
        None,
        now,
    )
}

/// A derived object whose body does not fit its type: its children stay as
/// they are (last good config) and its status says why (`InvalidSpec`,
/// naming the field); the other objects of the kind reconcile as usual.
pub(crate) async fn reconcile_undecodable<K>(
    obj: &Decoded<K>,
    error: &str,
    ctx: &Context,
) -> Result<Action>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + UndecodableStatus
        + DeserializeOwned
        + Clone
        + std::fmt::Debug,
{
    let started = Instant::now();
    let kind = K::kind(&());
    let generation = obj.metadata.generation;
    let planned = invalid_conditions(&anyhow::anyhow!("{kind} {error}"));
    let now = (ctx.now)();
    tracing::warn!(
        kind = %kind,
        name = %obj.name_any(),
        namespace = obj.namespace().unwrap_or_default(),
        "cannot decode: {error}"
    );
    let existing: Option<K::Status> = decode_status(obj);
    let st = K::invalid_status(existing.as_ref(), generation, &planned, &now);
    write_status(ctx, obj, existing.as_ref(), &st, None).await?;
    ctx.metrics.reconciled(&kind, started.elapsed());
    Ok(Action::requeue(RESYNC))
}

fn decode_status<K, S: DeserializeOwned>(obj: &Decoded<K>) -> Option<S> {
    serde_json::from_value(obj.status.clone()?).ok()
}

/// The reconcile of a component whose objects are all there is to it (DHCP,
/// DNS): plan and apply the children and the NetworkPolicy, read the
/// rollout, patch the status.
pub(crate) async fn reconcile_server<K>(
    obj: &K,
    status: Option<&ServerStatus>,
    kind: &'static str,
    plan: fn(&K, PolicyPeers<'_>) -> anyhow::Result<Objects>,
    gate: fn(&Context, &K, &Deployment) -> Gate,
    ctx: &Context,
) -> Result<Action>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + DeserializeOwned
        + Clone
        + std::fmt::Debug,
{
    let started = Instant::now();
    let ns = namespace(obj)?;
    let generation = obj.meta().generation;
    let mut again = RESYNC;
    let (planned, digest, rollout) = match plan(obj, ctx.settings.policy_peers()) {
        Ok(objects) => {
            let children = &objects.children;
            let gate = gate(ctx, obj, &children.deployment);
            apply_objects(ctx, &ns, &objects, &gate).await?;
            let refused = admission_conditions(ctx, &ns, children).await?;
            let r = rollout_of(ctx, &ns, &children.deployment.name_any());
            let mut planned = rollout_conditions(&r);
            if let Gate::Wait(why) = &gate {
                planned = waiting_conditions(&r, why);
                again = RETRY_PUSH;
            }
            planned.extend(refused);
            (planned, children.config_digest(), r)
        }
        Err(e) => (invalid_conditions(&e), None, Rollout::default()),
    };
    let st = server_status(status, generation, &planned, &rollout, digest, &(ctx.now)());
    write_status(ctx, obj, status, &st, None).await?;
    ctx.metrics.reconciled(kind, started.elapsed());
    Ok(Action::requeue(again))
}

/// `Ready` and `Progressing` of a replica whose update waits for the
/// others: ready as its (old) pod is, progressing with the reason.
pub(crate) fn waiting_conditions(r: &Rollout, why: &str) -> Vec<PlannedCondition> {
    let mut planned = rollout_conditions(r);
    planned.retain(|c| c.type_ != condition::PROGRESSING);
    planned.push(PlannedCondition::yes(
        condition::PROGRESSING,
        "WaitingForReplicas",
        format!("the new pod template waits: {why}"),
    ));
    planned
}

/// The gate of a replica's Deployment ([`rolling::gate`]), from the cache:
/// the live Deployments of every replica of the same instance and what
/// `view` says of each sibling (its replica place, the template hash of its
/// planned Deployment, whether it holds its current config). A server that
/// is not one of several replicas always applies.
pub(crate) fn replica_gate<K>(
    ctx: &Context,
    store: &Store<Decoded<K>>,
    me: &K,
    replica: Option<ReplicaOf>,
    desired: &Deployment,
    view: impl Fn(&K) -> Option<(ReplicaOf, Option<String>, bool)>,
) -> Gate
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let Some(mine) = replica.filter(|r| rolling::is_replica(Some(*r))) else {
        return Gate::Apply;
    };
    let ns = me.meta().namespace.clone().unwrap_or_default();
    let instance = instance_of(me.meta());
    let name = me.name_any();
    let live = |server: &str, in_sync: bool| {
        cached::<Deployment>(&ctx.stores.deployments, &ns, server)
            .map(|d| rolling::LiveReplica::of(&d, in_sync))
    };
    let me_state = ReplicaState {
        name: name.clone(),
        index: mine.index,
        desired: template_hash(desired),
        live: live(&name, true),
    };
    let others: Vec<ReplicaState> = store
        .state()
        .iter()
        .filter(|o| {
            o.meta().namespace.as_deref() == Some(ns.as_str())
                && instance_of(o.meta()) == instance
                && o.name_any() != name
        })
        .filter_map(|o| {
            let k = o.get()?;
            let (r, desired, in_sync) = view(k)?;
            let server = o.name_any();
            let live = live(&server, in_sync);
            // A sibling that cannot be planned is judged by its live pod.
            let desired = desired
                .or_else(|| live.as_ref().and_then(|l| l.hash.clone()))
                .unwrap_or_default();
            Some(ReplicaState {
                name: server,
                index: r.index,
                desired,
                live,
            })
        })
        .collect();
    rolling::gate(&me_state, &others)
}
