//! Watch caches: every kind the controller reads, watched once.
//!
//! Each kind is watched once (a shared reflector); the controllers subscribe
//! to the same streams ([`Streams`]) and read the caches ([`Stores`]), so a
//! reconcile reads the cluster without a request. Nothing here knows the
//! reconcilers: [`crate::controllers`] wires the streams to them. Children are watched by the label
//! `app.kubernetes.io/managed-by=oooi-controller`, Envoy pods by
//! `app.kubernetes.io/name=oooi,app.kubernetes.io/component=proxy`.

use std::borrow::Cow;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{self, ObjectRef, ReflectHandle, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tracing::warn;

use crate::crd::{DHCPServer, DNSServer, Infra, InfraClusterAttachment, ProxyServer};
use crate::observe::{self, Discovered, Observations};

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
    infras: Decoded<Infra>,
    attachments: InfraClusterAttachment,
    dhcp_servers: Decoded<DHCPServer>,
    dns_servers: Decoded<DNSServer>,
    proxy_servers: Decoded<ProxyServer>,
    deployments: Deployment,
    config_maps: ConfigMap,
    secrets: Secret,
    services: Service,
    service_accounts: ServiceAccount,
    pvcs: PersistentVolumeClaim,
    pdbs: PodDisruptionBudget,
    network_policies: NetworkPolicy,
    pods: Pod,
    roles: Role,
    role_bindings: RoleBinding,
}

/// An object of kind `K` as the API server holds it: decoded into `K` when
/// its body fits the type, else why not. The derived kinds (whose embedded
/// configs the API server checks less strictly than the controller does)
/// are watched this way, so one object that cannot be decoded neither stops
/// the watch of its kind nor the reconciles of the other objects: it is
/// reconciled on its own and reports the error in its status.
#[derive(Debug, Clone)]
pub struct Decoded<K> {
    /// The metadata (always decodable: the API server checks it).
    pub metadata: ObjectMeta,
    /// The typed object, or the decode error naming the field.
    pub object: Result<K, String>,
    /// The status as stored, for an object that cannot be decoded.
    pub status: Option<Value>,
}

impl<K> Decoded<K> {
    /// The typed object, when it decoded.
    pub fn get(&self) -> Option<&K> {
        self.object.as_ref().ok()
    }

    /// Decodes `v`; only malformed metadata is an error.
    pub fn from_value(v: Value) -> Result<Decoded<K>, serde_json::Error>
    where
        K: DeserializeOwned,
    {
        let metadata: ObjectMeta =
            serde_json::from_value(v.get("metadata").cloned().unwrap_or(Value::Null))?;
        let status = v.get("status").cloned();
        let object = serde_path_to_error::deserialize(v).map_err(|e| {
            let path = e.path().to_string();
            if path.is_empty() || path == "." {
                e.into_inner().to_string()
            } else {
                format!("{path}: {}", e.into_inner())
            }
        });
        Ok(Decoded {
            metadata,
            object,
            status,
        })
    }
}

impl<K> From<K> for Decoded<K>
where
    K: Resource,
{
    fn from(obj: K) -> Decoded<K> {
        Decoded {
            metadata: obj.meta().clone(),
            object: Ok(obj),
            status: None,
        }
    }
}

impl<'de, K: DeserializeOwned> serde::Deserialize<'de> for Decoded<K> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        Decoded::from_value(v).map_err(serde::de::Error::custom)
    }
}

impl<K> Resource for Decoded<K>
where
    K: Resource<DynamicType = ()>,
{
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Looks an object up in a cache.
pub fn cached<K>(store: &Store<K>, namespace: &str, name: &str) -> Option<Arc<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store.get(&ObjectRef::new(name).within(namespace))
}

/// The decoded Infra `namespace/name` from the cache; an Infra that cannot
/// be decoded counts as absent here (it reports why in its own status).
pub fn cached_infra(
    store: &Store<Decoded<Infra>>,
    namespace: &str,
    name: &str,
) -> Option<Arc<Infra>> {
    cached(store, namespace, name).and_then(|d| d.get().cloned().map(Arc::new))
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

/// Makes a cache that is never watched ready and empty, so that
/// [`Stores::wait_until_ready`] does not wait for it.
fn mark_empty<K>(mut writer: Writer<K>)
where
    K: Resource + Clone,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    writer.apply_watcher_event(&watcher::Event::Init);
    writer.apply_watcher_event(&watcher::Event::InitDone);
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

/// Changes of one optional kind, as a controller input.
pub type DynamicRx =
    futures::channel::mpsc::UnboundedReceiver<Result<DynamicObject, watcher::Error>>;

/// One subscription per cache whose changes trigger reconciles.
pub struct Streams {
    /// Infras.
    pub infras: ReflectHandle<Decoded<Infra>>,
    /// Attachments.
    pub attachments: ReflectHandle<InfraClusterAttachment>,
    /// DHCPServers.
    pub dhcp_servers: ReflectHandle<Decoded<DHCPServer>>,
    /// DNSServers.
    pub dns_servers: ReflectHandle<Decoded<DNSServer>>,
    /// ProxyServers.
    pub proxy_servers: ReflectHandle<Decoded<ProxyServer>>,
    /// Managed Deployments.
    pub deployments: ReflectHandle<Deployment>,
    /// Managed Services.
    pub services: ReflectHandle<Service>,
    /// Managed Secrets.
    pub secrets: ReflectHandle<Secret>,
    /// Envoy pods.
    pub pods: ReflectHandle<Pod>,
    /// Per served optional API: its changes, once for the Infra controller
    /// and once for the attachment controller.
    pub observed: Vec<(observe::OptionalApi, ApiResource, DynamicRx, DynamicRx)>,
}

/// What to watch: the namespace of the oooi kinds.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    /// Watch the oooi kinds only in this namespace.
    pub namespace: Option<String>,
    /// `run --openshift-scc`: the SCC grants (Roles and RoleBindings) are
    /// children, so they are watched; otherwise the controller neither
    /// writes nor reads RBAC objects.
    pub openshift_scc: bool,
}

/// Starts every watch. Children are watched in all namespaces (cleanup finds
/// cross-namespace ones); the oooi kinds in `--watch-namespace` if given.
pub fn start(client: &Client, scope: &Scope, w: StoreWriters, observers: Observers) -> Streams {
    let ns = &scope.namespace;
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
    let _ = spawn_watch(scoped::<PodDisruptionBudget>(client, ns), managed(), w.pdbs);
    let _ = spawn_watch(
        Api::<NetworkPolicy>::all(client.clone()),
        managed(),
        w.network_policies,
    );
    // With --openshift-scc the SCC grants; without it the controller holds
    // no RBAC permission, and these caches stay empty (and ready).
    if scope.openshift_scc {
        let _ = spawn_watch(scoped::<Role>(client, ns), managed(), w.roles);
        let _ = spawn_watch(
            scoped::<RoleBinding>(client, ns),
            managed(),
            w.role_bindings,
        );
    } else {
        mark_empty(w.roles);
        mark_empty(w.role_bindings);
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
