//! Conditions as the planner decides them, and their merge into the standard
//! `metav1.Condition` list (which needs the clock, given as an argument).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::crd::status;

/// A condition without timestamps: what the planner decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedCondition {
    /// Condition type (`Ready`, `Accepted`, `Degraded`, …).
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// One CamelCase word.
    pub reason: String,
    /// Human-readable detail; names the field at fault when there is one.
    pub message: String,
}

impl PlannedCondition {
    /// A condition with status `True`.
    pub fn yes(type_: &str, reason: &str, message: impl Into<String>) -> Self {
        Self::new(type_, status::TRUE, reason, message)
    }

    /// A condition with status `False`.
    pub fn no(type_: &str, reason: &str, message: impl Into<String>) -> Self {
        Self::new(type_, status::FALSE, reason, message)
    }

    /// A condition with any status.
    pub fn new(type_: &str, status: &str, reason: &str, message: impl Into<String>) -> Self {
        PlannedCondition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: reason.to_string(),
            message: message.into(),
        }
    }
}

/// Status of condition `type_` in `conditions`, if present.
pub fn condition_status<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a str> {
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.as_str())
}

/// Merges planned conditions into the existing list: a condition whose status
/// did not change keeps its `lastTransitionTime`, so re-applying an unchanged
/// status is a no-op. Conditions not planned are dropped. The result is in
/// the order of `planned`.
pub fn merge_conditions(
    existing: &[Condition],
    planned: &[PlannedCondition],
    observed_generation: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    planned
        .iter()
        .map(|p| {
            let last_transition_time = existing
                .iter()
                .find(|c| c.type_ == p.type_ && c.status == p.status)
                .map(|c| c.last_transition_time.clone())
                .unwrap_or_else(|| now.clone());
            Condition {
                type_: p.type_.clone(),
                status: p.status.clone(),
                reason: p.reason.clone(),
                message: p.message.clone(),
                observed_generation,
                last_transition_time,
            }
        })
        .collect()
}
