//! Watch caches shared by every controller, and the controllers' wiring.
//!
//! Each kind is watched once (a shared reflector); the controllers subscribe
//! to the same streams and read the caches, so a reconcile reads the cluster
//! without a request. Children are watched by the label
//! `app.kubernetes.io/managed-by=oooi-controller`, Envoy pods by
//! `app.kubernetes.io/name=oooi,app.kubernetes.io/component=proxy`.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{self, ObjectRef, ReflectHandle, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tracing::warn;

use super::{Context, attachment, component, error_policy, infra};
use crate::crd::{DHCPServer, DNSServer, Infra, InfraClusterAttachment, ProxyServer};
use crate::observe::{self, Discovered, Observations};
use crate::plan::labels::{INFRA_LABEL, MANAGED_BY};

/// Label selecting every child the controller writes.
pub const MANAGED_SELECTOR: &str = "app.kubernetes.io/managed-by=oooi-controller";
/// Label selecting Envoy pods.
pub const PROXY_POD_SELECTOR: &str =
    "app.kubernetes.io/name=oooi,app.kubernetes.io/component=proxy";

const BUFFER: usize = 1024;

macro_rules! caches {
    ($( $field:ident : $ty:ty ),* $(,)?) => {
        /// Read side of every cache.
        #[derive(Clone)]
        pub struct Stores {
            $( #[doc = concat!("Cache of `", stringify!($ty), "`.")] pub $field: Store<$ty>, )*
        }

        /// Write side of every cache: fed by the watches, or by tests.
        pub struct StoreWriters {
            $( #[doc = concat!("Writer of `", stringify!($ty), "`.")] pub $field: Writer<$ty>, )*
        }

        impl Stores {
            /// Empty caches and their writers.
            pub fn new() -> (Stores, StoreWriters) {
                $( let $field = reflector::store_shared::<$ty>(BUFFER); )*
                (
                    Stores { $( $field: $field.0, )* },
                    StoreWriters { $( $field: $field.1, )* },
                )
            }

            /// Waits until every watch has listed once.
            pub async fn wait_until_ready(&self) {
                $( let _ = self.$field.wait_until_ready().await; )*
            }
        }

        impl StoreWriters {
            /// Puts an object (JSON with `apiVersion` and `kind`) into its
            /// cache, as a watch event would. Unknown kinds are ignored.
            pub fn apply_json(&mut self, v: &Value) {
                let kind = v["kind"].as_str().unwrap_or_default();
                $(
                    if kind == <$ty as Resource>::kind(&()) {
                        if let Ok(obj) = serde_json::from_value::<$ty>(v.clone()) {
                            self.$field.apply_watcher_event(&watcher::Event::Apply(obj));
                        }
                        return;
                    }
                )*
            }

            /// Removes an object (JSON with `apiVersion` and `kind`) from its cache.
            pub fn delete_json(&mut self, v: &Value) {
                let kind = v["kind"].as_str().unwrap_or_default();
                $(
                    if kind == <$ty as Resource>::kind(&()) {
                        if let Ok(obj) = serde_json::from_value::<$ty>(v.clone()) {
                            self.$field.apply_watcher_event(&watcher::Event::Delete(obj));
                        }
                        return;
                    }
                )*
            }
        }
    };
}

caches! {
    infras: Infra,
    attachments: InfraClusterAttachment,
    dhcp_servers: DHCPServer,
    dns_servers: DNSServer,
    proxy_servers: ProxyServer,
    deployments: Deployment,
    config_maps: ConfigMap,
    secrets: Secret,
    services: Service,
    service_accounts: ServiceAccount,
    pvcs: PersistentVolumeClaim,
    network_policies: NetworkPolicy,
    pods: Pod,
    roles: Role,
    role_bindings: RoleBinding,
}

/// Looks an object up in a cache.
pub fn cached<K>(store: &Store<K>, namespace: &str, name: &str) -> Option<Arc<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store.get(&ObjectRef::new(name).within(namespace))
}

/// Writers of the optional-object caches, one per served optional API.
pub type Observers = Vec<(observe::OptionalApi, ApiResource, Writer<DynamicObject>)>;

/// Caches for the optional APIs that are served.
pub fn observations(discovered: &Discovered) -> (Observations, Observers) {
    let mut obs = Observations::default();
    let mut observers = Observers::new();
    for (api, ar) in &discovered.present {
        // Dynamic objects cannot use shared streams (those need a
        // `Default` dynamic type): a plain cache, fanned out by hand.
        let writer = Writer::new(ar.clone());
        let reader = writer.as_reader();
        match *api {
            observe::HOSTED_CLUSTERS => obs.hosted_clusters = Some(reader),
            observe::NODE_POOLS => obs.node_pools = Some(reader),
            observe::MACHINES => obs.machines = Some(reader),
            observe::VMIS => obs.vmis = Some(reader),
            _ => {}
        }
        observers.push((*api, ar.clone(), writer));
    }
    (obs, observers)
}

/// Drives one shared watch in the background; returns a subscription.
fn spawn_watch<K>(api: Api<K>, cfg: watcher::Config, writer: Writer<K>) -> ReflectHandle<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default + Send + Sync,
{
    let sub = writer
        .subscribe()
        .expect("caches are created shared, so they can be subscribed");
    let stream = watcher(api, cfg).default_backoff().reflect_shared(writer);
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            if let Err(e) = ev {
                warn!(kind = %K::kind(&Default::default()), "watch error: {e}");
            }
        }
    });
    sub
}

fn scoped<K>(client: &Client, ns: &Option<String>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

type DynamicRx = futures::channel::mpsc::UnboundedReceiver<Result<DynamicObject, watcher::Error>>;

/// One subscription per cache whose changes trigger reconciles.
pub struct Streams {
    infras: ReflectHandle<Infra>,
    attachments: ReflectHandle<InfraClusterAttachment>,
    dhcp_servers: ReflectHandle<DHCPServer>,
    dns_servers: ReflectHandle<DNSServer>,
    proxy_servers: ReflectHandle<ProxyServer>,
    deployments: ReflectHandle<Deployment>,
    services: ReflectHandle<Service>,
    secrets: ReflectHandle<Secret>,
    pods: ReflectHandle<Pod>,
    observed: Vec<(observe::OptionalApi, ApiResource, DynamicRx, DynamicRx)>,
}

/// Starts every watch. Children are watched in all namespaces (cleanup finds
/// cross-namespace ones); the oooi kinds in `--watch-namespace` if given.
pub fn start(
    client: &Client,
    settings: &super::Settings,
    w: StoreWriters,
    observers: Observers,
) -> Streams {
    let ns = &settings.watch_namespace;
    let managed = || watcher::Config::default().labels(MANAGED_SELECTOR);
    let plain = watcher::Config::default;
    // Caches that only answer lookups still need their watch driven.
    let _ = spawn_watch(scoped::<ConfigMap>(client, ns), managed(), w.config_maps);
    let _ = spawn_watch(
        scoped::<ServiceAccount>(client, ns),
        managed(),
        w.service_accounts,
    );
    let _ = spawn_watch(
        scoped::<PersistentVolumeClaim>(client, ns),
        managed(),
        w.pvcs,
    );
    let _ = spawn_watch(
        Api::<NetworkPolicy>::all(client.clone()),
        managed(),
        w.network_policies,
    );
    // The SCC grants exist only with --openshift-scc, and only then does the
    // controller's RBAC let it watch Roles: otherwise the caches stay empty
    // and count as listed.
    let (mut roles, mut role_bindings) = (w.roles, w.role_bindings);
    if settings.openshift_scc {
        let _ = spawn_watch(scoped::<Role>(client, ns), managed(), roles);
        let _ = spawn_watch(scoped::<RoleBinding>(client, ns), managed(), role_bindings);
    } else {
        roles.apply_watcher_event(&watcher::Event::InitDone);
        role_bindings.apply_watcher_event(&watcher::Event::InitDone);
    }
    let observed = observers
        .into_iter()
        .map(|(api, ar, writer)| {
            let (tx_infra, rx_infra) = futures::channel::mpsc::unbounded();
            let (tx_att, rx_att) = futures::channel::mpsc::unbounded();
            let dynapi: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
            // Deleted objects matter too (a Machine gone takes its routes).
            let stream = watcher(dynapi, watcher::Config::default())
                .default_backoff()
                .reflect(writer)
                .touched_objects();
            let name = api.crd_name();
            tokio::spawn(async move {
                let mut stream = std::pin::pin!(stream);
                while let Some(ev) = stream.next().await {
                    match ev {
                        Ok(obj) => {
                            let _ = tx_infra.unbounded_send(Ok(obj.clone()));
                            let _ = tx_att.unbounded_send(Ok(obj));
                        }
                        Err(e) => warn!(api = %name, "watch error: {e}"),
                    }
                }
            });
            (api, ar, rx_infra, rx_att)
        })
        .collect();
    Streams {
        infras: spawn_watch(scoped(client, ns), plain(), w.infras),
        attachments: spawn_watch(scoped(client, ns), plain(), w.attachments),
        dhcp_servers: spawn_watch(scoped(client, ns), plain(), w.dhcp_servers),
        dns_servers: spawn_watch(scoped(client, ns), plain(), w.dns_servers),
        proxy_servers: spawn_watch(scoped(client, ns), plain(), w.proxy_servers),
        deployments: spawn_watch(scoped(client, ns), managed(), w.deployments),
        services: spawn_watch(scoped(client, ns), managed(), w.services),
        secrets: spawn_watch(scoped(client, ns), managed(), w.secrets),
        pods: spawn_watch(
            scoped(client, ns),
            watcher::Config::default().labels(PROXY_POD_SELECTOR),
            w.pods,
        ),
        observed,
    }
}

/// The Infra a labelled child belongs to.
fn infra_of<K: Resource>(obj: &K) -> Option<ObjectRef<Infra>> {
    let infra = obj.meta().labels.as_ref()?.get(INFRA_LABEL)?;
    let ns = obj.meta().namespace.as_ref()?;
    if obj
        .meta()
        .labels
        .as_ref()?
        .get("app.kubernetes.io/managed-by")?
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

fn infra_ref(a: &InfraClusterAttachment) -> Option<ObjectRef<Infra>> {
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
    // Hosted apps VIP changes (issue 7) reconcile the Infra and attachment at once.
    let (infra_trigger, att_trigger) = ctx.observations.hosted.triggers();
    infra_ctl = infra_ctl.reconcile_on(infra_trigger);
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
        .watches_shared_stream(s.pods, move |pod| {
            component::proxy_of_pod(&proxy_store, &pod)
        })
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
    let proxy =
        proxy_ctl
            .graceful_shutdown_on(shutdown)
            .run(component::reconcile_proxy, error_policy, ctx);
    futures::future::join5(
        drain("Infra", infra),
        drain("InfraClusterAttachment", att),
        drain("DHCPServer", dhcp),
        drain("DNSServer", dns),
        drain("ProxyServer", proxy),
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
