//! The controller's inventory poll: every [`EVERY`] (jittered), ask each
//! DHCPServer's pod for `/pools` and write the bounded summary and the pool
//! conditions into its status ([`crate::plan::dhcp::pools`] decides both). A
//! status that would not change is not written, so a quiet pool costs no
//! write. A server that does not answer keeps its last figures (the poll
//! logs and counts why: `oooi_controller_inventory_polls_total`).
//!
//! One LIST of the DHCP pods per round (by label; the controller already
//! reads pods in the watched namespaces), at most [`CONCURRENCY`] servers
//! asked at once, each ask bounded by the transport's timeout.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use tracing::{debug, warn};

use super::reach::{self, Reach};
use super::{dhcp_pod_selector, pods_of};
use crate::cache::cached;
use crate::crd::{DHCPServer, ServerStatus};
use crate::plan::dhcp::INVENTORY_TOKEN_KEY;
use crate::plan::dhcp::pools::{server_status_with_pools, summarize};
use crate::reconcile::Context;
use crate::reconcile::step::write_status;

/// How often each server is asked.
pub const EVERY: Duration = Duration::from_secs(30);
/// Servers asked at once.
pub const CONCURRENCY: usize = 4;
/// Pods of one server tried in a round (a rollout has two for a moment).
const PODS_TRIED: usize = 2;

/// What one round did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Round {
    /// Servers that answered.
    pub answered: usize,
    /// Statuses written (changed figures or conditions).
    pub written: usize,
    /// Servers not asked or not answering.
    pub failed: usize,
}

/// `base` ± 20%, from `r` in 0..1000.
pub fn jittered(base: Duration, r: u32) -> Duration {
    let permille = 800 + u64::from(r % 1000) * 400 / 1000;
    Duration::from_millis(base.as_millis() as u64 * permille / 1000)
}

/// Asks every server once, then again every [`EVERY`] (jittered), until
/// the task is dropped.
pub async fn run<R: Reach>(ctx: Arc<Context>, reach: R) {
    loop {
        let round = poll_once(&ctx, &reach).await;
        debug!(?round, "inventory poll");
        tokio::time::sleep(jittered(EVERY, rand::random::<u32>())).await;
    }
}

/// One round over every DHCPServer with an inventory token.
pub async fn poll_once<R: Reach>(ctx: &Context, reach: &R) -> Round {
    let mut servers: Vec<DHCPServer> = ctx
        .stores
        .dhcp_servers
        .state()
        .iter()
        .filter_map(|d| d.get().cloned())
        .filter(|d| d.metadata.deletion_timestamp.is_none())
        .filter(|d| d.spec.inventory_token_secret.is_some())
        .collect();
    if servers.is_empty() {
        return Round::default();
    }
    servers.sort_by_key(|s| (s.namespace(), s.name_any()));
    let api: Api<Pod> = match &ctx.settings.watch_namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    let pods = match api
        .list(&ListParams::default().labels(&dhcp_pod_selector()))
        .await
    {
        Ok(l) => l.items,
        Err(e) => {
            warn!("inventory poll: cannot list the DHCP pods: {e}");
            return Round {
                failed: servers.len(),
                ..Round::default()
            };
        }
    };
    let mut outcomes: Vec<Outcome> = Vec::with_capacity(servers.len());
    // At most CONCURRENCY at once: a chunk at a time (each ask is bounded
    // by the transport's timeout, so a chunk is too).
    for chunk in servers.chunks(CONCURRENCY) {
        let asks: Vec<_> = chunk
            .iter()
            .map(|s| poll_server(ctx, reach, s, &pods))
            .collect();
        outcomes.extend(futures::future::join_all(asks).await);
    }
    let mut round = Round::default();
    for o in outcomes {
        match o {
            Outcome::Answered { written } => {
                round.answered += 1;
                round.written += usize::from(written);
            }
            Outcome::Failed => round.failed += 1,
        }
    }
    round
}

enum Outcome {
    Answered { written: bool },
    Failed,
}

/// The token of `server` from the Secret cache.
fn token(ctx: &Context, server: &DHCPServer) -> Option<String> {
    let name = &server.spec.inventory_token_secret.as_ref()?.name;
    let ns = server.namespace()?;
    let secret = cached::<Secret>(&ctx.stores.secrets, &ns, name)?;
    let bytes = secret.data.as_ref()?.get(INVENTORY_TOKEN_KEY)?;
    let t = std::str::from_utf8(&bytes.0).ok()?.trim().to_string();
    (!t.is_empty()).then_some(t)
}

async fn poll_server<R: Reach>(
    ctx: &Context,
    reach: &R,
    server: &DHCPServer,
    pods: &[Pod],
) -> Outcome {
    let name = server.name_any();
    let ns = server.namespace().unwrap_or_default();
    let Some(token) = token(ctx, server) else {
        debug!(server = %name, namespace = %ns, "inventory poll: no token Secret yet");
        ctx.metrics.inventory_polled("no_token");
        return Outcome::Failed;
    };
    let paired = server.spec.config.0.peer.is_some();
    let targets = pods_of(&server.metadata, paired, pods);
    if targets.is_empty() {
        ctx.metrics.inventory_polled("no_pod");
        return Outcome::Failed;
    }
    let mut last = None;
    for t in targets.iter().take(PODS_TRIED) {
        match reach::pools(reach, t, &token).await {
            Ok(report) => {
                ctx.metrics.inventory_polled("answered");
                let current = server.status.clone().unwrap_or_default();
                let new = server_status_with_pools(&current, summarize(&report), &(ctx.now)());
                let stored: Option<&ServerStatus> = server.status.as_ref();
                return match write_status(ctx, server, stored, &new, None).await {
                    Ok(written) => Outcome::Answered { written },
                    Err(e) => {
                        warn!(server = %name, namespace = %ns, "inventory poll: status write: {e}");
                        Outcome::Answered { written: false }
                    }
                };
            }
            Err(e) => last = Some(e),
        }
    }
    ctx.metrics.inventory_polled("unreachable");
    if let Some(e) = last {
        warn!(server = %name, namespace = %ns, "inventory poll: {e:#}");
    }
    Outcome::Failed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_period_is_jittered_by_at_most_a_fifth() {
        let base = Duration::from_secs(30);
        assert_eq!(jittered(base, 0), Duration::from_secs(24));
        assert_eq!(jittered(base, 500), Duration::from_secs(30));
        assert_eq!(jittered(base, 999), Duration::from_millis(35_970));
        assert_eq!(jittered(base, 1500), Duration::from_secs(30));
    }
}
