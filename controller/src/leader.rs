//! Leader election over a `coordination.k8s.io/v1` Lease, so that several
//! controller replicas can run and only one reconciles.
//!
//! Built on `kube-lease-manager`: it creates the Lease when absent (get,
//! create), takes it when free or expired and renews it before it expires
//! (patch: server-side apply to take it, strategic merge to renew and
//! release). A replica that loses the lease stops reconciling at once (the
//! caller exits and Kubernetes restarts it as a follower), so two leaders
//! never write at the same time for longer than the lease's grace period.

use std::time::Duration;

use kube::Client;
use kube_lease_manager::{LeaseCreateMode, LeaseManagerBuilder};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::metrics::Metrics;

/// Where the Lease lives and how long it lasts.
#[derive(Debug, Clone)]
pub struct LeaderConfig {
    /// Namespace of the Lease (`--lease-namespace`, env `POD_NAMESPACE`).
    pub namespace: String,
    /// Name of the Lease (`--lease-name`).
    pub name: String,
    /// This replica's identity (the pod name).
    pub identity: String,
    /// Seconds a lease stays valid after its last renewal.
    pub duration_s: u64,
    /// Seconds before expiry at which the holder renews.
    pub grace_s: u64,
}

impl LeaderConfig {
    /// The defaults: 15 s leases renewed 5 s before they expire.
    pub fn new(namespace: &str, name: &str, identity: &str) -> LeaderConfig {
        LeaderConfig {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            duration_s: 15,
            grace_s: 5,
        }
    }
}

/// Errors of the elector.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The Lease could not be read or created.
    #[error("lease {namespace}/{name}: {source}")]
    Lease {
        /// Namespace of the Lease.
        namespace: String,
        /// Name of the Lease.
        name: String,
        /// What the lease manager reported.
        #[source]
        source: kube_lease_manager::LeaseManagerError,
    },
    /// `grace_s` must be above 0 and below `duration_s`.
    #[error("lease timing: grace {grace_s}s must be above 0 and below duration {duration_s}s")]
    Timing {
        /// Lease duration.
        duration_s: u64,
        /// Renewal grace.
        grace_s: u64,
    },
}

/// A running election. Dropping it (or calling [`Leader::release`]) gives
/// the Lease up.
pub struct Leader {
    state: watch::Receiver<bool>,
    task: JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>,
    metrics: Metrics,
    config: LeaderConfig,
}

impl std::fmt::Debug for Leader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leader")
            .field("config", &self.config)
            .field("leading", &*self.state.borrow())
            .finish()
    }
}

impl Leader {
    /// Ensures the Lease exists and starts competing for it in the
    /// background.
    pub async fn start(
        client: Client,
        config: LeaderConfig,
        metrics: Metrics,
    ) -> Result<Leader, LeaderError> {
        if config.grace_s == 0 || config.grace_s >= config.duration_s {
            // kube-lease-manager panics on these; refuse them first.
            return Err(LeaderError::Timing {
                duration_s: config.duration_s,
                grace_s: config.grace_s,
            });
        }
        let builder = LeaseManagerBuilder::new(client, &config.name)
            .with_namespace(&config.namespace)
            .with_identity(&config.identity);
        // Each setter panics unless grace < duration holds against the
        // other's current value (defaults: grace 5 s, duration 30 s).
        let builder = if config.grace_s < 30 {
            builder
                .with_grace(config.grace_s)
                .with_duration(config.duration_s)
        } else {
            builder
                .with_duration(config.duration_s)
                .with_grace(config.grace_s)
        };
        let manager = builder
            .with_create_mode(LeaseCreateMode::AutoCreate)
            .with_field_manager(format!("oooi-controller-lease-{}", config.identity))
            .build()
            .await
            .map_err(|source| LeaderError::Lease {
                namespace: config.namespace.clone(),
                name: config.name.clone(),
                source,
            })?;
        let (state, task) = manager.watch().await;
        metrics.set_leader(false);
        Ok(Leader {
            state,
            task,
            metrics,
            config,
        })
    }

    /// True while this replica holds the Lease.
    pub fn is_leader(&self) -> bool {
        *self.state.borrow()
    }

    /// Waits until this replica holds the Lease.
    pub async fn acquired(&mut self) {
        if self.state.wait_for(|leading| *leading).await.is_ok() {
            self.metrics.set_leader(true);
            info!(
                lease = %format!("{}/{}", self.config.namespace, self.config.name),
                identity = %self.config.identity,
                "leader lease acquired"
            );
        }
    }

    /// Resolves when the Lease is lost (or the elector stopped). Call it
    /// after [`Leader::acquired`].
    pub async fn lost(&mut self) {
        let _ = self.state.wait_for(|leading| !*leading).await;
        self.metrics.set_leader(false);
        warn!(identity = %self.config.identity, "leader lease lost");
    }

    /// Gives the Lease up (on shutdown), so another replica takes over at
    /// once instead of after the lease duration.
    pub async fn release(self) {
        let Leader {
            state,
            task,
            metrics,
            config,
        } = self;
        // Closing the channel makes the manager release the Lease and stop.
        drop(state);
        match tokio::time::timeout(Duration::from_secs(5), task).await {
            Ok(Ok(Ok(_))) => info!(identity = %config.identity, "leader lease released"),
            Ok(Ok(Err(e))) => warn!("releasing the leader lease: {e}"),
            Ok(Err(e)) => warn!("lease task failed: {e}"),
            Err(_) => warn!("releasing the leader lease timed out"),
        }
        metrics.set_leader(false);
    }
}
