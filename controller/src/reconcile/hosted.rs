//! The I/O of the hosted-cluster side ([`crate::hosted`]), called from the
//! attachment reconciler ([`apply`] on every reconcile, [`cleanup`] from the
//! finalizer).
//!
//! Nothing here fails the attachment reconcile: a hosted cluster that is
//! unreachable, lacks MetalLB or has no node ends up in
//! `status.appsIngress` (phase and reason) and an event, and is retried
//! (soon, through the attachment trigger) while the Infra, its components
//! and the other attachments keep reconciling.
//!
//! Writes in the hosted cluster are server-side applies under
//! `oooi-controller` (only the fields oooi sets are owned: a foreign
//! annotation on the apps Service stays), skipped when the live object
//! already matches. Everything created carries the attachment's labels
//! ([`hosted_objects::hosted_labels`]), so cleanup finds it even after a rename.

use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Secret, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::{Client, ResourceExt};
use tracing::{info, warn};

use super::apply::apply as apply_object;
use super::step::observe_infra;
use super::{Context, Error, Result};
use crate::cache::cached;
use crate::crd::{AppsIngressStatus, InfraClusterAttachment, InfraClusterAttachmentStatus};
use crate::hosted::{CachedClient, key_of};
use crate::plan::hosted::apps_ingress::{self, Gate, Resolved, phase, reason};
use crate::plan::hosted::hosted_objects::{
    self, ATTACHMENT_LABEL, ATTACHMENT_NAMESPACE_LABEL, HostedObject,
};
use crate::plan::hosted::public_dns;
use crate::plan::infra::InfraPlan;
use crate::plan::labels::INFRA_LABEL;

/// Delay before retrying an attachment whose hosted cluster failed.
pub const RETRY: Duration = Duration::from_secs(20);

/// Attachment reconcile hook: converges apps ingress in the hosted cluster
/// and the public DNS Service, and returns `st` with `appsIngress` set.
pub async fn apply(
    ctx: &Context,
    att: &InfraClusterAttachment,
    plan: &InfraPlan,
    mut st: InfraClusterAttachmentStatus,
) -> InfraClusterAttachmentStatus {
    let outcome = plan.verdict(&att.name_any());
    st.apps_ingress = apps_ingress(ctx, att, outcome).await;
    if let Err(e) = public_dns(ctx, att, Some(plan)).await {
        warn!(attachment = %att.name_any(), "public DNS Service: {e}");
        ctx.event(att, true, "PublicDNSFailed", "Reconcile", e.to_string())
            .await;
    }
    st
}

/// Finalizer hook: removes what oooi made in the hosted cluster (a hosted
/// cluster or kubeconfig already gone is logged and skipped) and takes the
/// attachment out of its public DNS Service. Errors only while the hosted
/// cluster still exists and cannot be reached, so the finalizer retries.
pub async fn cleanup(ctx: &Context, att: &InfraClusterAttachment) -> Result<()> {
    let enabled = apps_ingress::resolve(att).is_some();
    let had = att
        .status
        .as_ref()
        .is_some_and(|s| s.apps_ingress.is_some());
    if enabled || had {
        if let Err(e) = remove_all(ctx, att).await {
            ctx.event(
                att,
                true,
                reason::HOSTED_API_UNREACHABLE,
                "Cleanup",
                e.clone(),
            )
            .await;
            return Err(Error::HostedCleanup(e));
        }
    } else {
        ctx.observations.hosted.forget(att);
    }
    // The public DNS Services of the Infra, planned without this attachment
    // (it is being deleted); nothing to do when it has none.
    let ns = att.namespace().unwrap_or_default();
    if public_services(ctx, &ns, &att.spec.infra_ref.name).is_empty() {
        return Ok(());
    }
    let infra = crate::cache::cached_infra(&ctx.stores.infras, &ns, &att.spec.infra_ref.name);
    let plan = match &infra {
        Some(i) => Some(observe_infra(ctx, i).await?),
        None => None,
    };
    public_dns(ctx, att, plan.as_ref()).await?;
    Ok(())
}

async fn apps_ingress(
    ctx: &Context,
    att: &InfraClusterAttachment,
    outcome: Option<&crate::plan::AttachmentOutcome>,
) -> Option<AppsIngressStatus> {
    let old = att.status.as_ref().and_then(|s| s.apps_ingress.clone());
    let st = match apps_ingress::gate(att, outcome) {
        Gate::Disabled => {
            let key = key_of(att);
            if old.is_none() && !ctx.observations.hosted.watching(&key.0, &key.1) {
                return None;
            }
            match remove_all(ctx, att).await {
                Ok(()) => return None,
                Err(e) => {
                    ctx.observations.hosted.retry(att, RETRY);
                    apps_ingress::apps_status(
                        phase::DEGRADED,
                        reason::HOSTED_API_UNREACHABLE,
                        format!("apps ingress is disabled but its objects cannot be removed: {e}"),
                        None,
                    )
                }
            }
        }
        Gate::Blocked(s) => s,
        Gate::Go(r) => match converge(ctx, att, &r).await {
            Ok(s) => s,
            Err(s) => {
                ctx.observations.hosted.retry(att, RETRY);
                s
            }
        },
    };
    if old.as_ref().map(|o| (&o.phase, &o.reason)) != Some((&st.phase, &st.reason)) {
        let warning = st.phase == phase::DEGRADED;
        let why = st.reason.clone().unwrap_or_default();
        let note = st.message.clone().unwrap_or_else(|| why.clone());
        ctx.event(att, warning, &why, "AppsIngress", note).await;
    }
    Some(st)
}

/// Why the hosted cluster cannot be reached.
enum Unavailable {
    /// No HostedCluster (cleanup finishes).
    NoCluster(String),
    /// No kubeconfig reference or Secret (cleanup finishes).
    NoKubeconfig(String),
    /// The kubeconfig is there but unusable.
    Invalid(String),
    /// The management API failed.
    Api(String),
}

impl Unavailable {
    fn status(&self) -> AppsIngressStatus {
        match self {
            Unavailable::NoCluster(m) => {
                apps_ingress::apps_status(phase::PENDING, reason::HOSTED_CLUSTER_NOT_FOUND, m, None)
            }
            Unavailable::NoKubeconfig(m) => {
                apps_ingress::apps_status(phase::PENDING, reason::KUBECONFIG_NOT_READY, m, None)
            }
            Unavailable::Invalid(m) => {
                apps_ingress::apps_status(phase::DEGRADED, reason::KUBECONFIG_INVALID, m, None)
            }
            Unavailable::Api(m) => {
                apps_ingress::apps_status(phase::DEGRADED, reason::HOSTED_API_UNREACHABLE, m, None)
            }
        }
    }
    fn message(&self) -> &str {
        match self {
            Unavailable::NoCluster(m)
            | Unavailable::NoKubeconfig(m)
            | Unavailable::Invalid(m)
            | Unavailable::Api(m) => m,
        }
    }
}

/// The HostedCluster of an attachment, from the watch cache.
fn hosted_cluster(
    ctx: &Context,
    att: &InfraClusterAttachment,
) -> Result<std::sync::Arc<DynamicObject>, Unavailable> {
    let r = &att.spec.hosted_cluster_ref;
    let Some(store) = &ctx.observations.hosted_clusters else {
        return Err(Unavailable::NoCluster(format!(
            "HostedCluster {}/{}: hostedclusters.hypershift.openshift.io is not served",
            r.namespace, r.name
        )));
    };
    store
        .find(|hc| {
            hc.namespace().as_deref() == Some(r.namespace.as_str()) && hc.name_any() == r.name
        })
        .ok_or_else(|| {
            Unavailable::NoCluster(format!(
                "HostedCluster {}/{} not found",
                r.namespace, r.name
            ))
        })
}

/// A client for the attachment's hosted cluster (cached; rebuilt when the
/// kubeconfig Secret's content changes).
async fn hosted_client(ctx: &Context, att: &InfraClusterAttachment) -> Result<Client, Unavailable> {
    let hc = hosted_cluster(ctx, att)?;
    let hc_ns = hc.namespace().unwrap_or_default();
    let status = &hc.data["status"];
    let secret_name = status["kubeconfig"]["name"]
        .as_str()
        .or_else(|| status["kubeConfig"]["name"].as_str())
        .ok_or_else(|| {
            Unavailable::NoKubeconfig(format!(
                "HostedCluster {hc_ns}/{} has no status.kubeconfig yet",
                hc.name_any()
            ))
        })?;
    let secret = Api::<Secret>::namespaced(ctx.client.clone(), &hc_ns)
        .get_opt(secret_name)
        .await
        .map_err(|e| Unavailable::Api(format!("Secret {hc_ns}/{secret_name}: {e}")))?
        .ok_or_else(|| {
            Unavailable::NoKubeconfig(format!(
                "admin kubeconfig Secret {hc_ns}/{secret_name} not found"
            ))
        })?;
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(crate::hosted::client::KUBECONFIG_KEY))
        .map(|b| b.0.clone())
        .ok_or_else(|| {
            Unavailable::Invalid(format!(
                "Secret {hc_ns}/{secret_name} has no key `{}`",
                crate::hosted::client::KUBECONFIG_KEY
            ))
        })?;
    let cp_ns = att.spec.control_plane_namespace();
    let version = {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        h.update(&bytes);
        h.update([0]);
        h.update(cp_ns.as_bytes());
        hex::encode(h.finalize())
    };
    let key = key_of(att);
    let hosted = &ctx.observations.hosted;
    if let Some(c) = hosted.cached_client(&key)
        && c.version == version
    {
        return Ok(c.client);
    }
    let client = (hosted.connector())(bytes, cp_ns)
        .await
        .map_err(|e| Unavailable::Invalid(format!("Secret {hc_ns}/{secret_name}: {e}")))?;
    info!(attachment = %format!("{}/{}", key.0, key.1), "hosted cluster client (re)built");
    hosted.cache_client(
        key,
        CachedClient {
            version,
            client: client.clone(),
        },
    );
    Ok(client)
}

/// A hosted API failure as a status: no answer at all is "unreachable";
/// an answer refusing the request is "rejected".
fn hosted_error(what: &str, e: &kube::Error) -> AppsIngressStatus {
    match e {
        kube::Error::Api(s) => apps_ingress::apps_status(
            phase::DEGRADED,
            reason::HOSTED_API_REJECTED,
            format!("{what}: {} ({})", s.message, s.code),
            None,
        ),
        other => apps_ingress::apps_status(
            phase::DEGRADED,
            reason::HOSTED_API_UNREACHABLE,
            format!("{what}: {other}"),
            None,
        ),
    }
}

fn dynamic_api(client: &Client, ar: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    }
}

async fn crd_served(client: &Client, name: &str) -> Result<bool, AppsIngressStatus> {
    Api::<CustomResourceDefinition>::all(client.clone())
        .get_opt(name)
        .await
        .map(|c| c.is_some())
        .map_err(|e| hosted_error(&format!("reading CRD {name}"), &e))
}

/// Applies one object unless the live one matches; returns the live object
/// read before.
async fn put(
    client: &Client,
    o: &HostedObject,
) -> Result<Option<DynamicObject>, AppsIngressStatus> {
    let api = dynamic_api(client, &o.resource, o.object.metadata.namespace.as_deref());
    let name = o.object.name_any();
    let live = api
        .get_opt(&name)
        .await
        .map_err(|e| hosted_error(&format!("reading {}", o.describe()), &e))?;
    apply_object(&api, live.as_ref(), o.object.clone())
        .await
        .map_err(|e| hosted_error(&format!("applying {}", o.describe()), &e))?;
    Ok(live)
}

/// True when the object carries this attachment's labels.
fn ours(o: &DynamicObject, r: &Resolved) -> bool {
    o.labels().get(ATTACHMENT_LABEL) == Some(&r.attachment.1)
        && o.labels().get(ATTACHMENT_NAMESPACE_LABEL) == Some(&r.attachment.0)
}

/// The OLM objects to apply, minus those that would clash with a MetalLB
/// install oooi did not make: a foreign Namespace is used, not adopted (so
/// cleanup never deletes it), and a foreign OperatorGroup there means no
/// second one (OLM refuses namespaces with two).
async fn install_plan(
    client: &Client,
    r: &Resolved,
    operator_crd: bool,
) -> Result<Vec<HostedObject>, AppsIngressStatus> {
    let mut objects = apps_ingress::install_objects(r, operator_crd);
    if objects.is_empty() {
        return Ok(objects);
    }
    let ns = dynamic_api(client, &hosted_objects::namespaces(), None)
        .get_opt(&r.metallb_namespace)
        .await
        .map_err(|e| hosted_error("reading the MetalLB namespace", &e))?;
    if ns.as_ref().is_some_and(|n| !ours(n, r)) {
        objects.retain(|o| o.resource.kind != "Namespace");
    }
    if ns.is_some() {
        let groups = dynamic_api(
            client,
            &hosted_objects::operator_groups(),
            Some(&r.metallb_namespace),
        )
        .list(&ListParams::default())
        .await
        .map_err(|e| hosted_error("listing OperatorGroups", &e))?;
        if groups.items.iter().any(|g| !ours(g, r)) {
            objects.retain(|o| o.resource.kind != "OperatorGroup");
        }
    }
    Ok(objects)
}

/// Deletes this attachment's labelled objects of `ar` not in `keep`
/// (namespace, name). A kind that is not served has nothing to delete.
async fn prune(
    client: &Client,
    ar: &ApiResource,
    selector: &str,
    keep: &[(Option<String>, String)],
) -> Result<(), kube::Error> {
    let api = dynamic_api(client, ar, None);
    let list = match api.list(&ListParams::default().labels(selector)).await {
        Ok(l) => l,
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
        Err(e) => return Err(e),
    };
    for o in list.items {
        let id = (o.namespace(), o.name_any());
        if keep.contains(&id) {
            continue;
        }
        let api = dynamic_api(client, ar, id.0.as_deref());
        if super::apply::delete_if_present(&api, &id.1).await? {
            info!(kind = %ar.kind, name = %id.1, "deleted from the hosted cluster");
        }
    }
    Ok(())
}

/// Steps 2-5 of [`plan`] against the hosted cluster. `Err` carries a
/// status worth a retry.
async fn converge(
    ctx: &Context,
    att: &InfraClusterAttachment,
    r: &Resolved,
) -> Result<AppsIngressStatus, AppsIngressStatus> {
    let client = hosted_client(ctx, att).await.map_err(|u| u.status())?;
    let managed = r.mode == crate::crd::MetalLbMode::Managed;
    let operator_crd = managed && crd_served(&client, hosted_objects::OPERATOR_CRD).await?;
    for o in install_plan(&client, r, operator_crd).await? {
        put(&client, &o).await?;
    }
    let pools_crd = crd_served(&client, hosted_objects::POOLS_CRD).await?
        && crd_served(&client, hosted_objects::ADVERTISEMENTS_CRD).await?;
    if let Some(s) = apps_ingress::crds_missing(r, pools_crd) {
        return if managed { Ok(s) } else { Err(s) };
    }
    let objects = apps_ingress::pool_objects(r);
    let mut live_service = None;
    for o in &objects {
        let live = put(&client, o).await?;
        if o.resource.kind == "Service" {
            live_service = live;
        }
    }
    let selector = hosted_objects::hosted_selector(&r.attachment);
    for ar in [
        hosted_objects::services(),
        hosted_objects::l2_advertisements(),
        hosted_objects::ip_address_pools(),
    ] {
        let keep: Vec<(Option<String>, String)> = objects
            .iter()
            .filter(|o| o.resource.kind == ar.kind)
            .map(|o| (o.object.namespace(), o.object.name_any()))
            .collect();
        prune(&client, &ar, &selector, &keep)
            .await
            .map_err(|e| hosted_error(&format!("removing stale {}s", ar.kind), &e))?;
    }
    let vip: Option<IpAddr> = live_service
        .as_ref()
        .and_then(|s| apps_ingress::vip_of(&serde_json::to_value(s).unwrap_or_default()));
    let hosted = &ctx.observations.hosted;
    hosted.set_vip(att, vip);
    let key = key_of(att);
    let target = (
        hosted
            .cached_client(&key)
            .map(|c| c.version)
            .unwrap_or_default(),
        r.service_namespace.clone(),
        r.service_name.clone(),
    );
    hosted.ensure_watch(key, target, || {
        crate::hosted::watch::start(
            hosted.clone(),
            att.clone(),
            client.clone(),
            r.service_namespace.clone(),
            r.service_name.clone(),
        )
    });
    let ready = if vip.is_some() {
        1
    } else {
        let nodes = Api::<Node>::all(client.clone())
            .list(&ListParams::default())
            .await
            .map_err(|e| hosted_error("listing Nodes", &e))?;
        let values: Vec<serde_json::Value> = nodes
            .items
            .iter()
            .filter_map(|n| serde_json::to_value(n).ok())
            .collect();
        apps_ingress::ready_nodes(&values)
    };
    Ok(apps_ingress::status(r, vip, ready))
}

/// Kinds oooi creates in the hosted cluster, in deletion order: the
/// Service first (MetalLB releases the VIP), the MetalLB namespace last.
fn owned_kinds() -> [ApiResource; 7] {
    [
        hosted_objects::services(),
        hosted_objects::l2_advertisements(),
        hosted_objects::ip_address_pools(),
        hosted_objects::metallbs(),
        hosted_objects::subscriptions(),
        hosted_objects::operator_groups(),
        hosted_objects::namespaces(),
    ]
}

/// Removes everything oooi created in the hosted cluster for `att` and
/// forgets its VIP, client and watch. A hosted cluster that is gone (no
/// HostedCluster, no kubeconfig, or unreachable while being deleted) is
/// logged and recorded as an event; `Err` only when it still exists.
async fn remove_all(ctx: &Context, att: &InfraClusterAttachment) -> Result<(), String> {
    let hosted = &ctx.observations.hosted;
    let key = key_of(att);
    hosted.stop_watch(&key);
    hosted.set_vip(att, None);
    let gone = |why: String| async move {
        warn!(attachment = %att.name_any(), "hosted cluster gone, nothing to clean up there: {why}");
        ctx.event(
            att,
            true,
            "HostedClusterGone",
            "Cleanup",
            format!("apps ingress objects in the hosted cluster were not removed: {why}"),
        )
        .await;
        ctx.observations.hosted.forget(att);
    };
    let client = match hosted_client(ctx, att).await {
        Ok(c) => c,
        Err(Unavailable::Api(m)) => return Err(m),
        Err(u) => {
            gone(u.message().to_string()).await;
            return Ok(());
        }
    };
    let selector = hosted_objects::hosted_selector(&key);
    for ar in owned_kinds() {
        if let Err(e) = prune(&client, &ar, &selector, &[]).await {
            // A hosted cluster being torn down takes its objects with it.
            let deleting = hosted_cluster(ctx, att)
                .map(|hc| hc.metadata.deletion_timestamp.is_some())
                .unwrap_or(true);
            if deleting {
                gone(format!("the HostedCluster is being deleted ({e})")).await;
                return Ok(());
            }
            hosted.drop_client(&key);
            return Err(format!("deleting {}s: {e}", ar.kind));
        }
    }
    info!(attachment = %att.name_any(), "apps ingress removed from the hosted cluster");
    hosted.forget(att);
    Ok(())
}

/// The public DNS Services of Infra `ns/infra` (from the cache).
fn public_services(ctx: &Context, ns: &str, infra: &str) -> Vec<std::sync::Arc<Service>> {
    ctx.stores.services.state_filter(|s| {
        s.namespace().as_deref() == Some(ns)
            && s.labels()
                .get(public_dns::PUBLIC_DNS_LABEL)
                .map(String::as_str)
                == Some("true")
            && s.labels().get(INFRA_LABEL).map(String::as_str) == Some(infra)
    })
}

/// Converges the public DNS Services of the attachment's Infra, as
/// [`public_dns::public_services`] plans them from the Infra's plan (none
/// when the Infra is missing or invalid); a Service no attachment names any
/// longer is deleted. Every member computes the same objects, so whichever
/// reconciles first writes them, once.
async fn public_dns(
    ctx: &Context,
    att: &InfraClusterAttachment,
    plan: Option<&InfraPlan>,
) -> Result<()> {
    let ns = att.namespace().unwrap_or_default();
    let infra_name = att.spec.infra_ref.name.clone();
    let infra = crate::cache::cached_infra(&ctx.stores.infras, &ns, &infra_name);
    let attachments = ctx.stores.attachments.state();
    let wanted = match (&infra, plan) {
        (Some(infra), Some(plan)) => {
            public_dns::public_services(infra, attachments.iter().map(|a| &**a), |name| {
                plan.verdict(name).is_some_and(|o| o.accepted())
            })
        }
        _ => Vec::new(),
    };
    let live = public_services(ctx, &ns, &infra_name);
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), &ns);
    for s in &live {
        if !wanted.iter().any(|w| w.metadata.name == s.metadata.name)
            && super::apply::delete_if_present(&api, &s.name_any()).await?
        {
            info!(service = %s.name_any(), "public DNS Service deleted");
        }
    }
    for desired in wanted {
        let name = desired.name_any();
        let live = cached::<Service>(&ctx.stores.services, &ns, &name);
        if let Some(other) = live
            .as_ref()
            .and_then(|l| l.labels().get(INFRA_LABEL).cloned())
            .filter(|i| *i != infra_name)
        {
            ctx.event(
                att,
                true,
                "PublicDNSConflict",
                "Reconcile",
                format!("public DNS Service {name} belongs to Infra {other}; not changed"),
            )
            .await;
            continue;
        }
        apply_object(&api, live.as_deref(), desired).await?;
    }
    Ok(())
}
