//! Replicas of a component (one server per VLAN address): how each replica's
//! pod is told apart and placed, the budget they share, and when a replica
//! may take a change that restarts its pod.
//!
//! Every replica is its own derived object with its own Deployment (one pod,
//! `Recreate`: its static address can be held by one pod at a time), so a
//! Deployment's own rolling update cannot keep the others serving. The
//! replicas instead take a pod-template change one at a time, in index
//! order ([`gate`]): a replica restarts only while every other replica is
//! ready and (for the proxy) holds the current routing table, and a later
//! replica waits until every earlier one runs its new template. A change
//! the programs reload (DNS config, routing table, Envoy listeners) is
//! never held back: it restarts nothing.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;

use crate::crd::ReplicaOf;
use crate::plan::labels::{Component, SERVER_LABEL, child_meta, selector};
use crate::plan::workload::readiness::readiness;
use crate::plan::workload::template_hash::stamped_hash;
use crate::plan::workload::{Placement, spread};

/// Whether `replica` makes its server one of several.
pub fn is_replica(replica: Option<ReplicaOf>) -> bool {
    replica.is_some_and(|r| r.count > 1)
}

/// Placement and budget of the server `name` of `instance` (DNS or proxy):
/// its own pod label and a node apart from the other replicas ([`spread`]),
/// and, on the first of several, the budget all of them share
/// ([`replicas_budget`]).
///
/// The pod template is the same whether the server is alone or one of
/// several, so adding or removing replicas never restarts the first one.
/// The first keeps the selector of a single server (a Deployment's selector
/// cannot change, so one server grows into several without being
/// replaced); every other replica's selector also names its own label.
pub(crate) fn replica_placement<K>(
    owner: &K,
    name: &str,
    instance: &str,
    component: Component,
    replica: Option<ReplicaOf>,
) -> (Placement, Option<PodDisruptionBudget>)
where
    K: Resource<DynamicType = ()>,
{
    let own = own_label(name);
    let mut placement = spread(instance, component);
    placement.pod_labels = own.clone();
    let first = replica.is_none_or(|r| r.index == 0);
    if !first {
        placement.selector_labels = own;
    }
    let budget = (first && is_replica(replica))
        .then(|| replicas_budget(owner, &format!("{name}-replicas"), instance, component));
    (placement, budget)
}

/// The label that names the server a pod runs.
pub fn own_label(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(SERVER_LABEL.to_string(), name.to_string())])
}

/// The selector of one server's pods: the component's, plus the server's
/// own label when it is one of several replicas.
pub fn server_selector(
    name: &str,
    instance: &str,
    component: Component,
    replica: Option<ReplicaOf>,
) -> BTreeMap<String, String> {
    let mut s = selector(instance, component);
    if is_replica(replica) {
        s.extend(own_label(name));
    }
    s
}

/// A PodDisruptionBudget over every pod of a component instance that keeps
/// all but one available: a node drain evicts one replica at a time, so
/// the others keep serving. A pod that is not Ready may be evicted anyway
/// (it serves nobody).
pub(crate) fn replicas_budget<K>(
    owner: &K,
    name: &str,
    instance: &str,
    component: Component,
) -> PodDisruptionBudget
where
    K: Resource<DynamicType = ()>,
{
    PodDisruptionBudget {
        metadata: child_meta(owner, name.to_string(), instance, component),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(selector(instance, component)),
                ..LabelSelector::default()
            }),
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".to_string()),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    }
}

/// One replica as the gate sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaState {
    /// The derived object's name.
    pub name: String,
    /// Its index among the replicas.
    pub index: u32,
    /// The template hash of its planned Deployment.
    pub desired: String,
    /// Its live Deployment (`None`: not created yet).
    pub live: Option<LiveReplica>,
}

/// What the live Deployment and the server's status say about a replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveReplica {
    /// The template hash the live Deployment carries.
    pub hash: Option<String>,
    /// The Deployment runs its current template, observed and ready.
    pub ready: bool,
    /// The server holds its current config (the proxy: the current routing
    /// table on every pod; always true for DNS).
    pub in_sync: bool,
}

impl LiveReplica {
    /// From a live Deployment and the server's sync state.
    pub fn of(d: &Deployment, in_sync: bool) -> Self {
        LiveReplica {
            hash: stamped_hash(d).map(str::to_string),
            ready: readiness(d).complete,
            in_sync,
        }
    }
}

impl ReplicaState {
    fn outdated(&self) -> bool {
        self.live
            .as_ref()
            .is_some_and(|l| l.hash.as_deref() != Some(self.desired.as_str()))
    }
}

/// Whether a replica may apply its planned Deployment now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// Apply it.
    Apply,
    /// Keep the live Deployment for now, and why.
    Wait(String),
}

/// Whether replica `me` may apply its planned Deployment, given the other
/// replicas of its component (in any order). Always yes when that restarts
/// nothing (not created yet, or the live template is the planned one) or
/// when `me` is not serving anyway (not ready: replacing it costs nothing,
/// and a broken template on every replica must be fixable). Otherwise only
/// when every other replica is ready and in sync, and every replica before
/// `me` already runs its planned template: so two replicas are never down
/// for an update at once, and they go in index order.
pub fn gate(me: &ReplicaState, others: &[ReplicaState]) -> Gate {
    let Some(live) = &me.live else {
        return Gate::Apply;
    };
    if !me.outdated() || !live.ready {
        return Gate::Apply;
    }
    let mut others: Vec<&ReplicaState> = others.iter().filter(|o| o.name != me.name).collect();
    others.sort_by_key(|o| o.index);
    for o in others {
        let why = match &o.live {
            None => Some("is not created yet"),
            Some(l) if !l.ready => Some("is not ready"),
            Some(l) if !l.in_sync => Some("does not hold its current config yet"),
            Some(_) if o.index < me.index && o.outdated() => Some("updates first"),
            Some(_) => None,
        };
        if let Some(why) = why {
            return Gate::Wait(format!("replica {} {why}", o.name));
        }
    }
    Gate::Apply
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn state(
        name: &str,
        index: u32,
        desired: &str,
        live: Option<(&str, bool, bool)>,
    ) -> ReplicaState {
        ReplicaState {
            name: name.to_string(),
            index,
            desired: desired.to_string(),
            live: live.map(|(hash, ready, in_sync)| LiveReplica {
                hash: Some(hash.to_string()),
                ready,
                in_sync,
            }),
        }
    }

    #[test]
    fn nothing_to_restart_always_applies() {
        let others = [state("b", 1, "new", Some(("old", false, false)))];
        // Not created yet.
        assert_eq!(gate(&state("a", 0, "new", None), &others), Gate::Apply);
        // Already on the planned template (a label or a budget may change).
        assert_eq!(
            gate(&state("a", 0, "new", Some(("new", true, true))), &others),
            Gate::Apply
        );
        // Down anyway: replacing it costs nothing.
        assert_eq!(
            gate(&state("a", 0, "new", Some(("old", false, true))), &others),
            Gate::Apply
        );
    }

    #[test]
    fn a_restart_waits_for_every_other_replica_to_be_ready_and_in_sync() {
        let me = state("b", 1, "new", Some(("old", true, true)));
        let cases = [
            (state("a", 0, "new", None), "replica a is not created yet"),
            (
                state("a", 0, "new", Some(("new", false, true))),
                "replica a is not ready",
            ),
            (
                state("a", 0, "new", Some(("new", true, false))),
                "replica a does not hold its current config yet",
            ),
        ];
        for (other, why) in cases {
            assert_eq!(gate(&me, &[other]), Gate::Wait(why.to_string()));
        }
        let done = state("a", 0, "new", Some(("new", true, true)));
        assert_eq!(gate(&me, &[done]), Gate::Apply);
        // A later replica that is not ready holds an earlier one too.
        let first = state("a", 0, "new", Some(("old", true, true)));
        let later = state("b", 1, "new", Some(("new", false, true)));
        assert_eq!(
            gate(&first, &[later]),
            Gate::Wait("replica b is not ready".into())
        );
    }

    #[test]
    fn replicas_update_in_index_order_one_at_a_time() {
        // Three replicas on the old template, all serving: only the first
        // may go, whatever order the reconcilers run in.
        let all = |hashes: [(&str, bool); 3]| -> Vec<ReplicaState> {
            ["p0", "p1", "p2"]
                .iter()
                .zip(hashes)
                .enumerate()
                .map(|(i, (n, (h, ready)))| state(n, i as u32, "new", Some((h, ready, true))))
                .collect()
        };
        let may = |set: &[ReplicaState]| -> Vec<String> {
            set.iter()
                .filter(|r| r.outdated() && r.live.as_ref().unwrap().ready)
                .filter(|r| gate(r, set) == Gate::Apply)
                .map(|r| r.name.clone())
                .collect()
        };
        let mut order = Vec::new();
        let mut set = all([("old", true), ("old", true), ("old", true)]);
        while let [next] = may(&set).as_slice() {
            order.push(next.clone());
            // It restarts: on the new template, not ready; nobody else may go.
            let i = set.iter().position(|r| r.name == *next).unwrap();
            set[i].live = Some(LiveReplica {
                hash: Some("new".into()),
                ready: false,
                in_sync: false,
            });
            assert!(may(&set).is_empty(), "{set:?}");
            // Ready with its table again.
            set[i].live = Some(LiveReplica {
                hash: Some("new".into()),
                ready: true,
                in_sync: true,
            });
        }
        assert_eq!(order, ["p0", "p1", "p2"]);
        assert!(set.iter().all(|r| !r.outdated()));
        // Reconcilers evaluated in reverse order decide the same.
        let set = all([("old", true), ("old", true), ("old", true)]);
        let mut reversed = set.clone();
        reversed.reverse();
        assert_eq!(
            gate(&set[2], &reversed),
            Gate::Wait("replica p0 updates first".into())
        );
        assert_eq!(gate(&set[0], &reversed), Gate::Apply);
    }
}
