//! The wiring: every controller, what triggers it, and the reconciler it
//! runs. The only module that names every reconciler; it sits above the
//! watch caches ([`crate::cache`]) and the reconcilers
//! ([`crate::reconcile`]), and neither knows it.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::DynamicObject;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use tracing::{info, warn};

use crate::cache::{self, Decoded, Scope, Streams};
use crate::crd::{Infra, InfraClusterAttachment, ProxyServer};
use crate::metrics::Metrics;
use crate::observe;
use crate::plan::labels::{INFRA_LABEL, MANAGED_BY, instance_of};
use crate::reconcile::{Context, Settings, attachment, component, error_policy, infra};

/// Runs every controller until `shutdown` resolves; in-flight
/// reconciliations finish first.
pub async fn run(
    client: Client,
    settings: Settings,
    metrics: Metrics,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let discovered = crate::observe::discover(&client).await?;
    for api in crate::observe::OPTIONAL_APIS {
        metrics.set_optional_api(&api.crd_name(), discovered.get(api).is_some());
    }
    if let Some(summary) = discovered.summary() {
        warn!("{summary}");
    }
    let (stores, writers) = cache::Stores::new();
    let (observations, observers) = cache::observations(&discovered);
    let ctx = Arc::new(Context::new(
        client.clone(),
        metrics,
        settings.clone(),
        stores,
        discovered,
        observations,
    ));
    let scope = Scope {
        namespace: settings.watch_namespace.clone(),
        openshift_scc: settings.openshift_scc,
    };
    let streams = cache::start(&client, &scope, writers, observers);
    info!("waiting for the watch caches");
    ctx.stores.wait_until_ready().await;
    info!("caches ready; reconciling");
    let shutdown = futures::future::FutureExt::shared(Box::pin(shutdown));
    controllers(ctx.clone(), streams, shutdown).await;
    Ok(())
}

/// The ProxyServers whose Envoy `pod` is (same namespace and instance).
pub fn proxy_of_pod(
    store: &Store<Decoded<ProxyServer>>,
    pod: &Pod,
) -> Vec<ObjectRef<Decoded<ProxyServer>>> {
    let ns = pod.namespace().unwrap_or_default();
    let Some(instance) = pod
        .labels()
        .get(oooi_vocabulary::labels::APP_INSTANCE)
        .cloned()
    else {
        return Vec::new();
    };
    store
        .state_filter(|p| {
            p.namespace().as_deref() == Some(ns.as_str()) && instance_of(&p.metadata) == instance
        })
        .iter()
        .map(|p| ObjectRef::from_obj(&**p))
        .collect()
}

/// An Infra as the controller watches it (decoded or not).
type InfraRef = ObjectRef<Decoded<Infra>>;

/// The same Infra, as the hosted-cluster side names it.
fn watched(r: ObjectRef<Infra>) -> InfraRef {
    let o = ObjectRef::new(&r.name);
    match &r.namespace {
        Some(ns) => o.within(ns),
        None => o,
    }
}

/// The Infra a labelled child belongs to.
fn infra_of<K: Resource>(obj: &K) -> Option<InfraRef> {
    let infra = obj.meta().labels.as_ref()?.get(INFRA_LABEL)?;
    let ns = obj.meta().namespace.as_ref()?;
    if obj
        .meta()
        .labels
        .as_ref()?
        .get(oooi_vocabulary::labels::APP_MANAGED_BY)?
        != MANAGED_BY
    {
        return None;
    }
    Some(ObjectRef::new(infra).within(ns))
}

/// Attachments whose hosted cluster lives in control-plane namespace `ns`.
fn attachments_in_cp(
    store: &Store<InfraClusterAttachment>,
    ns: &str,
) -> Vec<Arc<InfraClusterAttachment>> {
    store.state_filter(|a| observe::control_plane_namespace(a) == ns)
}

/// Attachments of the HostedCluster or NodePool `obj` (same namespace as
/// the HostedCluster; a NodePool names it in `spec.clusterName`).
fn attachments_of_hc(
    store: &Store<InfraClusterAttachment>,
    obj: &DynamicObject,
) -> Vec<Arc<InfraClusterAttachment>> {
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.data["spec"]["clusterName"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| obj.name_any());
    store.state_filter(|a| {
        a.spec.hosted_cluster_ref.namespace == ns && a.spec.hosted_cluster_ref.name == name
    })
}

/// The attachments an optional object concerns.
fn attachments_for(
    api: observe::OptionalApi,
    store: &Store<InfraClusterAttachment>,
    obj: &DynamicObject,
) -> Vec<Arc<InfraClusterAttachment>> {
    if api == observe::MACHINES || api == observe::VMIS {
        attachments_in_cp(store, &obj.namespace().unwrap_or_default())
    } else {
        attachments_of_hc(store, obj)
    }
}

fn infra_ref(a: &InfraClusterAttachment) -> Option<InfraRef> {
    Some(ObjectRef::new(&a.spec.infra_ref.name).within(a.namespace().as_ref()?))
}

/// Runs every controller until `shutdown` resolves and in-flight
/// reconciliations are done.
pub async fn controllers(
    ctx: Arc<Context>,
    s: Streams,
    shutdown: impl std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
) {
    let stores = ctx.stores.clone();
    // Fresh subscriptions for the second consumer of a stream.
    let infra_sub2 = s.infras.clone();
    let att_sub2 = s.attachments.clone();
    let (dep1, dep2, dep3, dep4) = (
        s.deployments.clone(),
        s.deployments.clone(),
        s.deployments.clone(),
        s.deployments,
    );

    let mut infra_ctl = Controller::for_shared_stream(s.infras, stores.infras.clone())
        .owns_shared_stream(s.dhcp_servers.clone())
        .owns_shared_stream(s.dns_servers.clone())
        .owns_shared_stream(s.proxy_servers.clone())
        .watches_shared_stream(s.attachments, |a| infra_ref(&a))
        .watches_shared_stream(dep1, |d| infra_of(&*d))
        .watches_shared_stream(s.services, |svc| infra_of(&*svc))
        .watches_shared_stream(s.secrets, |sec| infra_of(&*sec));
    let mut att_ctl = Controller::for_shared_stream(att_sub2, stores.attachments.clone())
        .watches_shared_stream(infra_sub2, {
            let store = stores.attachments.clone();
            move |infra| {
                let ns = infra.namespace().unwrap_or_default();
                let name = infra.name_any();
                store
                    .state_filter(|a| {
                        a.namespace().as_deref() == Some(ns.as_str())
                            && a.spec.infra_ref.name == name
                    })
                    .into_iter()
                    .map(|a| ObjectRef::from_obj(&*a))
                    .collect::<Vec<_>>()
            }
        });
    // Hosted apps VIP changes reconcile the Infra and attachment at once.
    let (infra_trigger, att_trigger) = ctx.observations.hosted.triggers();
    infra_ctl = infra_ctl.reconcile_on(infra_trigger.map(watched));
    att_ctl = att_ctl.reconcile_on(att_trigger);
    for (api, ar, rx_infra, rx_att) in s.observed {
        let store = stores.attachments.clone();
        infra_ctl = infra_ctl.watches_stream_with(
            rx_infra,
            move |obj| {
                attachments_for(api, &store, &obj)
                    .iter()
                    .filter_map(|a| infra_ref(a))
                    .collect::<Vec<_>>()
            },
            ar.clone(),
        );
        let store = stores.attachments.clone();
        att_ctl = att_ctl.watches_stream_with(
            rx_att,
            move |obj| {
                attachments_for(api, &store, &obj)
                    .iter()
                    .map(|a| ObjectRef::from_obj(&**a))
                    .collect::<Vec<_>>()
            },
            ar,
        );
    }
    let dhcp_ctl = Controller::for_shared_stream(s.dhcp_servers, stores.dhcp_servers.clone())
        .owns_shared_stream(dep2);
    let dns_ctl = Controller::for_shared_stream(s.dns_servers, stores.dns_servers.clone())
        .owns_shared_stream(dep3);
    let proxy_store = stores.proxy_servers.clone();
    let proxy_ctl = Controller::for_shared_stream(s.proxy_servers, stores.proxy_servers.clone())
        .owns_shared_stream(dep4)
        .watches_shared_stream(s.pods, move |pod| proxy_of_pod(&proxy_store, &pod))
        // A new filter module in the source ConfigMap: every proxy.
        .reconcile_all_on(ctx.rollout.source_changes(ctx.client.clone()));

    let infra = infra_ctl.graceful_shutdown_on(shutdown.clone()).run(
        infra::reconcile,
        error_policy,
        ctx.clone(),
    );
    let att = att_ctl.graceful_shutdown_on(shutdown.clone()).run(
        attachment::reconcile,
        error_policy,
        ctx.clone(),
    );
    let dhcp = dhcp_ctl.graceful_shutdown_on(shutdown.clone()).run(
        component::reconcile_dhcp,
        error_policy,
        ctx.clone(),
    );
    let dns = dns_ctl.graceful_shutdown_on(shutdown.clone()).run(
        component::reconcile_dns,
        error_policy,
        ctx.clone(),
    );
    // The DHCP servers' pool figures, asked on the pod network; stops with
    // the controllers.
    let poll = {
        let ctx = ctx.clone();
        let shutdown = shutdown.clone();
        async move {
            tokio::select! {
                _ = crate::inventory::poll::run(ctx, crate::inventory::reach::Direct::default()) => {}
                _ = shutdown => {}
            }
        }
    };
    let proxy =
        proxy_ctl
            .graceful_shutdown_on(shutdown)
            .run(component::reconcile_proxy, error_policy, ctx);
    futures::future::join(
        futures::future::join5(
            drain("Infra", infra),
            drain("InfraClusterAttachment", att),
            drain("DHCPServer", dhcp),
            drain("DNSServer", dns),
            drain("ProxyServer", proxy),
        ),
        poll,
    )
    .await;
}

/// Runs a controller's result stream to its end (shutdown). Reconcile
/// errors are already logged and counted by [`error_policy`]; what is left
/// here (queue and watch errors) is logged at debug.
async fn drain<T, E: std::fmt::Display>(kind: &'static str, s: impl Stream<Item = Result<T, E>>) {
    let mut s = std::pin::pin!(s);
    while let Some(r) = s.next().await {
        if let Err(e) = r {
            tracing::debug!(kind, "controller: {e}");
        }
    }
}
