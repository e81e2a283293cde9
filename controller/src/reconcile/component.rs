//! Reconcilers of the derived kinds: DHCPServer, DNSServer, ProxyServer.
//!
//! Each writes its children (planned from its spec alone by
//! `plan::{dhcp,dns,proxy}::children`) and the NetworkPolicy of its pods
//! (`plan::{dhcp,dns,proxy}::objects`), then its status from the real
//! Deployment. The ProxyServer reconciler also brings every Envoy replica to
//! the routing table of its spec ([`crate::push`]) and reports per-replica
//! sync (`RoutesSynced`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Secret, Service};
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
use super::step::{Announce, Conditions, namespace, write_status};
use super::{Context, Error, Result};
use crate::cache::{Decoded, cached};
use crate::crd::{
    DHCPServer, DNSServer, ProxyReplicaStatus, ProxyServer, ProxyServerStatus, ReplicaOf,
    ServerStatus, condition,
};
use crate::plan::labels::{SERVER_LABEL, instance_of};
use crate::plan::network_policy::PolicyPeers;
use crate::plan::proxy::next_table;
use crate::plan::workload::Objects;
use crate::plan::workload::readiness::{
    Rollout, invalid_conditions, rollout, rollout_conditions, server_status,
};
use crate::plan::workload::rolling::{self, Gate, ReplicaState};
use crate::plan::workload::template_hash::template_hash;
use crate::plan::{Children, PlannedCondition, merge_conditions};
use crate::push::{Outcome, Replica};

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
fn rollout_of(ctx: &Context, ns: &str, name: &str) -> Rollout {
    let d = cached::<Deployment>(&ctx.stores.deployments, ns, name);
    rollout(name, d.as_deref())
}

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

fn invalid_server_status(
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

impl UndecodableStatus for crate::crd::Infra {
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
async fn reconcile_server<K>(
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
fn waiting_conditions(r: &Rollout, why: &str) -> Vec<PlannedCondition> {
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
fn replica_gate<K>(
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

/// Whether a ProxyServer's status says every pod holds the routing table of
/// its current spec.
fn routes_synced(p: &ProxyServer) -> bool {
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
async fn push_token(ctx: &Context, proxy: &ProxyServer) -> Result<String> {
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

/// Pushes the table to every replica; fills the route fields of `st` and
/// returns the `RoutesSynced` condition and when to look again.
async fn sync_routes(
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
