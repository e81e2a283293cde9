//! The reconcilers: the I/O half of the controller. They read the watch
//! caches ([`crate::cache`]), decide with the pure planners
//! ([`crate::plan`]) and write; none of them knows the wiring
//! ([`crate::controllers`]).
//!
//! Each one runs the same step: observe (caches, [`step::observe_infra`]) →
//! plan (a pure planner) → apply ([`apply`]) → status
//! ([`step::write_status`], the one status writer).
//!
//! - [`infra`]: Infra → the derived DHCPServer, DNSServer and ProxyServer
//!   (planned by [`crate::plan::plan_infra`], owned by the Infra), the push
//!   token Secret, the ClusterUserDefinedNetwork it asks for
//!   ([`crate::plan::infra::cudn`]), and the Infra's status; cleanup of what
//!   garbage collection cannot reach.
//! - [`attachment`]: InfraClusterAttachment → its status (from the same
//!   plan), its control-plane NetworkPolicy and its finalizer; the hosted
//!   cluster side ([`hosted`]: apps ingress, public DNS).
//! - [`component`]: each derived kind → its children (Deployment, ConfigMap,
//!   Services, …) and status; for ProxyServer also the route push to every
//!   Envoy replica ([`crate::push`]) and the filter rollout
//!   ([`crate::rollout`]).
//!
//! Every write is a server-side apply under `oooi-controller` that is skipped
//! when the live object (from the watch caches) already matches ([`apply`]),
//! and every status is patched only when it changed, so a reconcile with
//! nothing to do sends no write at all.

pub mod apply;
pub mod attachment;
pub mod component;
pub mod hosted;
pub mod infra;
pub mod step;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Resource, ResourceExt};
use tracing::warn;

use crate::cache::Stores;
use crate::metrics::Metrics;
use crate::observe::{Discovered, Observations};
use crate::push::{PushConfig, Pusher};

/// Settings from the command line.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Watch only this namespace.
    pub watch_namespace: Option<String>,
    /// Grant each component's ServiceAccount the OpenShift SCC its pods
    /// need ([`crate::plan::workload::scc`]).
    pub openshift_scc: bool,
    /// The controller's own namespace: the NetworkPolicy of each DHCP, DNS
    /// and proxy server's pods admits the controller's pods there to the
    /// push API and the lease inventory ([`crate::plan::network_policy`]);
    /// `None`: no policy.
    pub controller_namespace: Option<String>,
    /// Who may scrape the metrics ports of the component pods.
    pub metrics_scrapers: crate::plan::network_policy::MetricsScrapers,
    /// Where the filter module comes from (filter rollout).
    pub filter_source: crate::rollout::SourceConfig,
    /// Images of components whose Infra names none.
    pub images: crate::plan::infra::images::DefaultImages,
    /// Placement of components whose Infra leaves it unset.
    pub placement: crate::plan::workload::placement::DefaultPlacement,
    /// Resources of components whose server leaves them unset.
    pub resources: crate::plan::workload::resources::DefaultResources,
}

impl Settings {
    /// Who the component pods' NetworkPolicies admit from outside their
    /// Infra.
    pub fn policy_peers(&self) -> crate::plan::network_policy::PolicyPeers<'_> {
        crate::plan::network_policy::PolicyPeers {
            controller_namespace: self.controller_namespace.as_deref(),
            scrapers: &self.metrics_scrapers,
        }
    }
}

/// Errors of one reconciliation. The variant name is the `reason` label of
/// `oooi_controller_reconcile_errors_total`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API request failed.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// Adding or removing the finalizer, or the cleanup, failed.
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    /// The object lacks a field the API server always sets.
    #[error("{0} is missing")]
    MissingField(&'static str),
    /// The push token Secret is unusable.
    #[error("push token: {0}")]
    PushToken(String),
    /// `--openshift-scc`: no SCC the controller may grant admits the pod.
    #[error("no SecurityContextConstraints admits the pods of Deployment {0}")]
    NoAdmittingScc(String),
    /// What oooi made in a hosted cluster could not be removed while that
    /// cluster still exists (the finalizer retries).
    #[error("hosted cluster cleanup: {0}")]
    HostedCleanup(String),
}

impl Error {
    /// The metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Kube(_) => "Kube",
            Error::Finalizer(_) => "Finalizer",
            Error::MissingField(_) => "MissingField",
            Error::PushToken(_) => "PushToken",
            Error::NoAdmittingScc(_) => "NoAdmittingScc",
            Error::HostedCleanup(_) => "HostedCleanup",
        }
    }
}

/// Result of a reconciliation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a reconciler needs.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// Metrics.
    pub metrics: Metrics,
    /// The route pusher.
    pub pusher: Pusher,
    /// Command-line settings.
    pub settings: Settings,
    /// Watch caches.
    pub stores: Stores,
    /// Optional APIs found at start.
    pub discovered: Discovered,
    /// Caches of the optional objects.
    pub observations: Observations,
    /// Event recorder.
    pub recorder: Recorder,
    /// Filter rollout: the source module and the check verdicts.
    pub rollout: crate::rollout::Rollouts,
    /// The clock (tests fix it so statuses compare equal).
    pub now: fn() -> Time,
}

fn wall_clock() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

impl Context {
    /// A context over the given caches; [`Context::now`] is the wall clock.
    pub fn new(
        client: Client,
        metrics: Metrics,
        settings: Settings,
        stores: Stores,
        discovered: Discovered,
        observations: Observations,
    ) -> Context {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: crate::crd::FIELD_MANAGER.into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        Context {
            rollout: crate::rollout::Rollouts::new(settings.filter_source.clone()),
            pusher: Pusher::new(PushConfig::default(), metrics.clone()),
            client,
            metrics,
            settings,
            stores,
            discovered,
            observations,
            recorder,
            now: wall_clock,
        }
    }

    /// Records an event on `obj`; a failure to record is logged, never fatal.
    pub async fn event<K>(&self, obj: &K, warning: bool, reason: &str, action: &str, note: String)
    where
        K: Resource<DynamicType = ()>,
    {
        let ev = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &obj.object_ref(&())).await {
            warn!("cannot record event {reason}: {e}");
        }
    }
}

/// The error policy of every controller: count, log, retry with a delay.
pub fn error_policy<K>(obj: Arc<K>, error: &Error, ctx: Arc<Context>) -> Action
where
    K: Resource<DynamicType = ()>,
{
    let kind = K::kind(&());
    ctx.metrics.reconcile_failed(&kind, error.reason());
    warn!(
        %kind,
        name = %obj.name_any(),
        namespace = obj.namespace().unwrap_or_default(),
        "reconcile failed: {error}"
    );
    Action::requeue(Duration::from_secs(5))
}
