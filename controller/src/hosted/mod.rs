//! The hosted-cluster side of an attachment at run time: clients, watches
//! and what they observed. Nothing here plans: the objects oooi makes in a
//! hosted cluster are planned with the other planners (pure, shared with
//! `render`): [`crate::plan::hosted::apps_ingress`] (MetalLB, its pool, the L2
//! advertisement, the apps Service), [`crate::plan::hosted::hosted_objects`] (their
//! kinds and labels) and [`crate::plan::hosted::public_dns`] (the management-side
//! public Services).
//!
//! - [`client`]: a kube client for the hosted cluster, from the admin
//!   kubeconfig the HostedCluster's status names, pointed at the
//!   control-plane API Service inside the management cluster while keeping
//!   the kubeconfig's TLS server name.
//! - The I/O lives with the reconcilers ([`crate::reconcile::hosted`]),
//!   called from the attachment reconciler. Hosted cluster errors never fail
//!   that reconcile: they land in `status.appsIngress` and the rest of the
//!   VLAN stack keeps converging.
//! - [`watch`]: one watch per attachment on the apps Service in the hosted
//!   cluster; a new or changed VIP goes into [`Hosted::vip`] (which
//!   [`crate::observe::Observations::observed`] reads) and triggers the
//!   Infra reconcile at once.
//! - [`Hosted`]: the cached clients, running watches, observed VIPs and
//!   reconcile triggers.

pub mod client;
pub mod watch;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use futures::future::BoxFuture;
use futures::{Stream, StreamExt};
use kube::Client;
use kube::runtime::reflector::ObjectRef;

use crate::crd::{Infra, InfraClusterAttachment};

/// Identifies an attachment: (namespace, name).
pub type AttachmentKey = (String, String);

/// Builds a hosted-cluster client from (admin kubeconfig bytes,
/// control-plane namespace). The default is [`client::connect`]; tests
/// substitute a mocked API.
pub type Connector =
    Arc<dyn Fn(Vec<u8>, String) -> BoxFuture<'static, Result<Client, String>> + Send + Sync>;

/// A cached hosted client and the kubeconfig it was built from.
#[derive(Clone)]
pub(crate) struct CachedClient {
    /// SHA-256 of (kubeconfig, control-plane namespace).
    pub(crate) version: String,
    pub(crate) client: Client,
}

/// A running Service watch.
pub(crate) struct RunningWatch {
    /// What it watches: (client version, namespace, name).
    pub(crate) target: (String, String, String),
    pub(crate) task: tokio::task::JoinHandle<()>,
}

impl Drop for RunningWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Inner {
    vips: Mutex<BTreeMap<AttachmentKey, IpAddr>>,
    clients: Mutex<BTreeMap<AttachmentKey, CachedClient>>,
    watches: Mutex<BTreeMap<AttachmentKey, RunningWatch>>,
    /// Attachments with a retry pending (one at a time each).
    retries: Mutex<std::collections::BTreeSet<AttachmentKey>>,
    infra_tx: UnboundedSender<ObjectRef<Infra>>,
    attachment_tx: UnboundedSender<ObjectRef<InfraClusterAttachment>>,
    #[allow(clippy::type_complexity)]
    triggers: Mutex<
        Option<(
            UnboundedReceiver<ObjectRef<Infra>>,
            UnboundedReceiver<ObjectRef<InfraClusterAttachment>>,
        )>,
    >,
    connector: Connector,
}

/// Runtime state of the hosted-cluster side, shared by the reconcilers and
/// the Service watches: observed apps VIPs, hosted clients (one per
/// attachment, rebuilt when the kubeconfig changes), running watches, and the
/// reconcile triggers.
#[derive(Clone)]
pub struct Hosted {
    inner: Arc<Inner>,
}

impl Default for Hosted {
    fn default() -> Self {
        Hosted::new(Arc::new(|kubeconfig, ns| {
            Box::pin(async move { client::connect(&kubeconfig, &ns).await })
        }))
    }
}

impl std::fmt::Debug for Hosted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hosted")
            .field("vips", &*lock(&self.inner.vips))
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding one of these maps leaves it usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Hosted {
    /// State whose hosted clients come from `connector`.
    pub fn new(connector: Connector) -> Hosted {
        let (infra_tx, infra_rx) = unbounded();
        let (attachment_tx, attachment_rx) = unbounded();
        Hosted {
            inner: Arc::new(Inner {
                vips: Mutex::default(),
                clients: Mutex::default(),
                watches: Mutex::default(),
                retries: Mutex::default(),
                infra_tx,
                attachment_tx,
                triggers: Mutex::new(Some((infra_rx, attachment_rx))),
                connector,
            }),
        }
    }

    /// The observed apps VIP of attachment `namespace/name`.
    pub fn vip(&self, namespace: &str, name: &str) -> Option<IpAddr> {
        lock(&self.inner.vips)
            .get(&(namespace.to_string(), name.to_string()))
            .copied()
    }

    /// Records the apps VIP of an attachment; on a change, triggers the
    /// reconcile of its Infra (DNS and routes follow) and of the attachment
    /// (its status). Returns true when it changed.
    pub fn set_vip(&self, att: &InfraClusterAttachment, vip: Option<IpAddr>) -> bool {
        let key = key_of(att);
        let changed = {
            let mut vips = lock(&self.inner.vips);
            let old = match vip {
                Some(v) => vips.insert(key.clone(), v),
                None => vips.remove(&key),
            };
            old != vip
        };
        if changed {
            tracing::info!(
                attachment = %format!("{}/{}", key.0, key.1),
                vip = ?vip,
                "apps VIP changed; reconciling the Infra"
            );
            self.trigger(att);
        }
        changed
    }

    /// Queues a reconcile of the attachment's Infra and of the attachment.
    pub fn trigger(&self, att: &InfraClusterAttachment) {
        let (ns, name) = key_of(att);
        let _ = self
            .inner
            .infra_tx
            .unbounded_send(ObjectRef::new(&att.spec.infra_ref.name).within(&ns));
        let _ = self
            .inner
            .attachment_tx
            .unbounded_send(ObjectRef::new(&name).within(&ns));
    }

    /// Reconciles the attachment again after `delay` (a hosted cluster that
    /// failed is retried sooner than the resync). At most one retry is
    /// pending per attachment, however many reconciles failed meanwhile.
    pub fn retry(&self, att: &InfraClusterAttachment, delay: std::time::Duration) {
        let key = key_of(att);
        if tokio::runtime::Handle::try_current().is_err()
            || !lock(&self.inner.retries).insert(key.clone())
        {
            return;
        }
        let inner = self.inner.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            lock(&inner.retries).remove(&key);
            let _ = inner
                .attachment_tx
                .unbounded_send(ObjectRef::new(&key.1).within(&key.0));
        });
    }

    /// True while a retry of the attachment is pending.
    pub fn retry_pending(&self, namespace: &str, name: &str) -> bool {
        lock(&self.inner.retries).contains(&(namespace.to_string(), name.to_string()))
    }

    /// The reconcile triggers, for the Infra and the attachment controllers
    /// (`Controller::reconcile_on`). The first call takes them; later calls
    /// get streams that never yield.
    pub fn triggers(
        &self,
    ) -> (
        impl Stream<Item = ObjectRef<Infra>> + Send + 'static,
        impl Stream<Item = ObjectRef<InfraClusterAttachment>> + Send + 'static,
    ) {
        match lock(&self.inner.triggers).take() {
            Some((i, a)) => (i.left_stream(), a.left_stream()),
            None => (
                futures::stream::pending().right_stream(),
                futures::stream::pending().right_stream(),
            ),
        }
    }

    /// Forgets everything about an attachment: VIP (triggering its Infra
    /// when there was one), client, watch.
    pub fn forget(&self, att: &InfraClusterAttachment) {
        let key = key_of(att);
        self.set_vip(att, None);
        lock(&self.inner.clients).remove(&key);
        lock(&self.inner.watches).remove(&key);
    }

    /// True while a Service watch runs for the attachment.
    pub fn watching(&self, namespace: &str, name: &str) -> bool {
        lock(&self.inner.watches).contains_key(&(namespace.to_string(), name.to_string()))
    }

    pub(crate) fn connector(&self) -> Connector {
        self.inner.connector.clone()
    }

    pub(crate) fn cached_client(&self, key: &AttachmentKey) -> Option<CachedClient> {
        lock(&self.inner.clients).get(key).cloned()
    }

    pub(crate) fn cache_client(&self, key: AttachmentKey, c: CachedClient) {
        lock(&self.inner.clients).insert(key, c);
    }

    pub(crate) fn drop_client(&self, key: &AttachmentKey) {
        lock(&self.inner.clients).remove(key);
    }

    /// Runs `start` unless a watch of the same target already runs.
    pub(crate) fn ensure_watch(
        &self,
        key: AttachmentKey,
        target: (String, String, String),
        start: impl FnOnce() -> tokio::task::JoinHandle<()>,
    ) {
        let mut watches = lock(&self.inner.watches);
        if watches
            .get(&key)
            .is_some_and(|w| w.target == target && !w.task.is_finished())
        {
            return;
        }
        // Replacing drops (aborts) the old watch.
        watches.insert(
            key,
            RunningWatch {
                target,
                task: start(),
            },
        );
    }

    pub(crate) fn stop_watch(&self, key: &AttachmentKey) {
        lock(&self.inner.watches).remove(key);
    }
}

/// (namespace, name) of an attachment.
pub fn key_of(att: &InfraClusterAttachment) -> AttachmentKey {
    crate::plan::hosted::hosted_objects::attachment_key(att)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn att() -> InfraClusterAttachment {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "hostedcluster.densityops.com/v1alpha1",
            "kind": "InfraClusterAttachment",
            "metadata": {"name": "c1", "namespace": "oooi"},
            "spec": {
                "infraRef": {"name": "vlan200"},
                "hostedClusterRef": {"name": "c1"},
                "dns": {"clusterName": "c1", "baseDomain": "example.com"}
            }
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn a_vip_change_triggers_infra_and_attachment_once() {
        let h = Hosted::default();
        let (infra, atts) = h.triggers();
        let (mut infra, mut atts) = (Box::pin(infra), Box::pin(atts));
        let a = att();
        assert!(h.set_vip(&a, "198.51.100.50".parse().ok()));
        assert!(!h.set_vip(&a, "198.51.100.50".parse().ok()), "same VIP");
        assert_eq!(h.vip("oooi", "c1"), "198.51.100.50".parse().ok());
        let i = infra.next().await.unwrap();
        assert_eq!(
            (i.name.as_str(), i.namespace.as_deref()),
            ("vlan200", Some("oooi"))
        );
        assert_eq!(atts.next().await.unwrap().name, "c1");
        assert!(
            tokio::time::timeout(Duration::from_millis(20), infra.next())
                .await
                .is_err(),
            "one trigger per change"
        );
        h.forget(&a);
        assert_eq!(h.vip("oooi", "c1"), None);
        assert_eq!(infra.next().await.unwrap().name, "vlan200", "VIP gone");
        // The streams are handed out once.
        let (mut again, _) = h.triggers();
        assert!(
            tokio::time::timeout(Duration::from_millis(20), again.next())
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn retries_are_deduplicated_and_fire() {
        let h = Hosted::default();
        let (_, atts) = h.triggers();
        let mut atts = Box::pin(atts);
        let a = att();
        h.retry(&a, Duration::from_millis(30));
        h.retry(&a, Duration::from_millis(30));
        assert!(h.retry_pending("oooi", "c1"));
        assert_eq!(atts.next().await.unwrap().name, "c1");
        assert!(!h.retry_pending("oooi", "c1"));
        assert!(
            tokio::time::timeout(Duration::from_millis(80), atts.next())
                .await
                .is_err(),
            "the second retry was folded into the first"
        );
    }
}
