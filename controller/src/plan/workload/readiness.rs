//! Readiness of a component from its Deployment, and the status a derived
//! server (DHCPServer, DNSServer, ProxyServer) reports from it: one verdict
//! for the Infra's per-component status ([`crate::plan::infra::component_status`])
//! and for the servers' own `Ready`/`Progressing` conditions.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::crd::{ServerStatus, condition};
use crate::plan::conditions::{PlannedCondition, merge_conditions};

/// What a Deployment's status says about its rollout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Readiness {
    /// Desired replicas (1 when the spec leaves it out).
    pub replicas: i32,
    /// Ready replicas.
    pub ready: i32,
    /// Replicas running the current template.
    pub updated: i32,
    /// The Deployment controller has seen the current spec.
    pub observed: bool,
    /// Ready: the current spec is observed, and every desired replica (at
    /// least one) is ready and runs the current template.
    pub complete: bool,
}

/// The readiness verdict on one Deployment.
pub fn readiness(d: &Deployment) -> Readiness {
    let replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let st = d.status.clone().unwrap_or_default();
    let ready = st.ready_replicas.unwrap_or(0);
    let updated = st.updated_replicas.unwrap_or(0);
    let observed = st.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0);
    Readiness {
        replicas,
        ready,
        updated,
        observed,
        complete: observed && ready >= replicas && updated >= replicas && replicas > 0,
    }
}

/// The rollout of a derived server's Deployment, as its status reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rollout {
    /// Desired replicas.
    pub replicas: i32,
    /// Ready replicas.
    pub ready: i32,
    /// All desired replicas are ready and run the current template.
    pub complete: bool,
    /// Why not, when not.
    pub message: String,
}

/// The rollout of Deployment `name` (`None`: not created yet).
pub fn rollout(name: &str, deployment: Option<&Deployment>) -> Rollout {
    let Some(d) = deployment else {
        return Rollout {
            message: format!("Deployment {name} not created yet"),
            ..Rollout::default()
        };
    };
    let r = readiness(d);
    let (ready, want, updated) = (r.ready, r.replicas, r.updated);
    let message = if r.complete {
        format!("{ready}/{want} replicas ready")
    } else if !r.observed {
        format!("Deployment {name}: new spec not observed yet")
    } else {
        format!("Deployment {name}: {ready}/{want} ready, {updated}/{want} updated")
    };
    Rollout {
        replicas: want,
        ready,
        complete: r.complete,
        message,
    }
}

/// `Ready` and `Progressing` of a derived server from its rollout.
pub fn rollout_conditions(r: &Rollout) -> Vec<PlannedCondition> {
    if r.complete {
        vec![
            PlannedCondition::yes(condition::READY, "DeploymentReady", r.message.clone()),
            PlannedCondition::no(condition::PROGRESSING, "RolloutComplete", r.message.clone()),
        ]
    } else {
        vec![
            PlannedCondition::no(condition::READY, "DeploymentNotReady", r.message.clone()),
            PlannedCondition::yes(condition::PROGRESSING, "RollingOut", r.message.clone()),
        ]
    }
}

/// `Ready` and `Degraded` of a derived server whose spec cannot be planned.
pub fn invalid_conditions(e: &anyhow::Error) -> Vec<PlannedCondition> {
    vec![
        PlannedCondition::no(condition::READY, "InvalidSpec", format!("{e:#}")),
        PlannedCondition::yes(condition::DEGRADED, "InvalidSpec", format!("{e:#}")),
    ]
}

/// Status of a DHCP or DNS server: the planned conditions merged into the
/// existing ones, the rollout's replica counts and the config digest.
pub fn server_status(
    existing: Option<&ServerStatus>,
    generation: Option<i64>,
    planned: &[PlannedCondition],
    r: &Rollout,
    digest: Option<String>,
    now: &Time,
) -> ServerStatus {
    let old: &[Condition] = existing.map(|s| s.conditions.as_slice()).unwrap_or(&[]);
    let mut conditions = merge_conditions(old, planned, generation, now);
    // The DHCP pool figures and their conditions are the inventory poll's
    // ([`crate::plan::dhcp::pools`]): kept as they are.
    conditions.extend(
        old.iter()
            .filter(|c| crate::plan::dhcp::pools::is_pool_condition(&c.type_))
            .filter(|c| !planned.iter().any(|p| p.type_ == c.type_))
            .cloned(),
    );
    ServerStatus {
        observed_generation: generation,
        conditions,
        replicas: r.replicas,
        ready_replicas: r.ready,
        config_digest: digest,
        pools: existing.and_then(|s| s.pools.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(generation: i64, spec_replicas: i32, status: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "d", "generation": generation},
            "spec": {"replicas": spec_replicas, "selector": {}, "template": {}},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn a_deployment_is_ready_when_every_replica_is_ready_and_current() {
        let d = deployment(
            2,
            2,
            json!({"observedGeneration": 2, "readyReplicas": 2, "updatedReplicas": 2}),
        );
        assert!(readiness(&d).complete);
        let r = rollout("d", Some(&d));
        assert_eq!(r.message, "2/2 replicas ready");
        assert_eq!(rollout_conditions(&r)[0].reason, "DeploymentReady");
    }

    #[test]
    fn an_unobserved_spec_or_a_stale_replica_is_not_ready() {
        let unobserved = deployment(
            3,
            1,
            json!({"observedGeneration": 2, "readyReplicas": 1, "updatedReplicas": 1}),
        );
        assert!(!readiness(&unobserved).complete);
        assert_eq!(
            rollout("d", Some(&unobserved)).message,
            "Deployment d: new spec not observed yet"
        );
        let stale = deployment(
            1,
            2,
            json!({"observedGeneration": 1, "readyReplicas": 2, "updatedReplicas": 1}),
        );
        assert!(!readiness(&stale).complete);
        assert_eq!(
            rollout("d", Some(&stale)).message,
            "Deployment d: 2/2 ready, 1/2 updated"
        );
    }

    #[test]
    fn a_deployment_scaled_to_zero_is_not_ready() {
        let d = deployment(1, 0, json!({"observedGeneration": 1}));
        assert!(!readiness(&d).complete);
    }

    #[test]
    fn a_missing_deployment_is_rolling_out() {
        let r = rollout("d", None);
        assert!(!r.complete);
        assert_eq!(r.message, "Deployment d not created yet");
        let conds = rollout_conditions(&r);
        assert_eq!(conds[0].reason, "DeploymentNotReady");
        assert_eq!(conds[1].reason, "RollingOut");
    }

    #[test]
    fn an_invalid_spec_is_degraded_with_the_error_chain() {
        let e = anyhow::anyhow!("bad value").context("spec.config");
        let conds = invalid_conditions(&e);
        assert_eq!(conds[0].message, "spec.config: bad value");
        assert_eq!(conds[1].type_, condition::DEGRADED);
    }
}
