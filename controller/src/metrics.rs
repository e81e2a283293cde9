//! Prometheus metrics of the controller (`oooi_controller_*`), served on
//! `/metrics` by [`crate::run`].
//!
//! One [`Metrics`] value is built at start and shared (it is cheap to clone:
//! every metric is an `Arc` inside). Tests build their own, so two tests never
//! share counters.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels naming the reconciled kind (`Infra`, `ProxyServer`, …).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// Kind of the reconciled object.
    pub kind: String,
}

/// Labels of `oooi_controller_reconcile_errors_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// Kind of the reconciled object.
    pub kind: String,
    /// Error variant, e.g. `Kube` or `InvalidSpec`.
    pub reason: String,
}

/// Labels of the route push counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PushLabels {
    /// `pushed`, `in_sync`, or a failure reason (`timeout`, `connect`,
    /// `refused_<status>`, `stale`, `digest_mismatch`, `bad_response`).
    pub outcome: String,
}

/// Labels of `oooi_controller_optional_api_present`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiLabels {
    /// Plural and group, e.g. `machines.cluster.x-k8s.io`.
    pub api: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

struct Inner {
    registry: Registry,
    reconciles: Family<KindLabels, Counter>,
    reconcile_errors: Family<ErrorLabels, Counter>,
    reconcile_duration: HistogramFamily<KindLabels>,
    push_duration: Histogram,
    push_outcomes: Family<PushLabels, Counter>,
    push_failures: Family<PushLabels, Counter>,
    leader: Gauge,
    optional_apis: Family<ApiLabels, Gauge>,
}

/// Every metric of the controller process.
#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

fn reconcile_histogram() -> Histogram {
    // 1 ms … ~33 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

fn push_histogram() -> Histogram {
    // 0.5 ms … ~16 s: a push is one HTTP round trip plus the filter's parse.
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric registered.
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let reconciles = Family::<KindLabels, Counter>::default();
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        let reconcile_duration: HistogramFamily<KindLabels> =
            Family::new_with_constructor(reconcile_histogram);
        let push_duration = push_histogram();
        let push_outcomes = Family::<PushLabels, Counter>::default();
        let push_failures = Family::<PushLabels, Counter>::default();
        let leader = Gauge::default();
        let optional_apis = Family::<ApiLabels, Gauge>::default();
        registry.register(
            "oooi_controller_reconciles",
            "Reconciliations started, by kind",
            reconciles.clone(),
        );
        registry.register(
            "oooi_controller_reconcile_errors",
            "Reconciliations that failed, by kind and error reason",
            reconcile_errors.clone(),
        );
        registry.register(
            "oooi_controller_reconcile_duration_seconds",
            "Wall time of one reconciliation, by kind",
            reconcile_duration.clone(),
        );
        registry.register(
            "oooi_controller_route_push_duration_seconds",
            "Time of one routing-table PUT to one Envoy replica, answer included",
            push_duration.clone(),
        );
        registry.register(
            "oooi_controller_route_push_replicas",
            "Per-replica outcomes of route synchronisation (pushed, in_sync, or a failure reason)",
            push_outcomes.clone(),
        );
        registry.register(
            "oooi_controller_route_push_failures",
            "Per-replica route synchronisation failures, by reason",
            push_failures.clone(),
        );
        registry.register(
            "oooi_controller_leader",
            "1 while this replica holds the leader lease",
            leader.clone(),
        );
        registry.register(
            "oooi_controller_optional_api_present",
            "1 when an optional API (HyperShift, CAPI, KubeVirt) is served by the cluster",
            optional_apis.clone(),
        );
        Metrics(Arc::new(Inner {
            registry,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            push_duration,
            push_outcomes,
            push_failures,
            leader,
            optional_apis,
        }))
    }

    /// Counts one reconciliation of `kind` and its duration.
    pub fn reconciled(&self, kind: &str, took: Duration) {
        let labels = KindLabels { kind: kind.into() };
        self.0.reconciles.get_or_create(&labels).inc();
        self.0
            .reconcile_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    /// Counts a failed reconciliation of `kind` by error `reason`.
    pub fn reconcile_failed(&self, kind: &str, reason: &str) {
        self.0
            .reconcile_errors
            .get_or_create(&ErrorLabels {
                kind: kind.into(),
                reason: reason.into(),
            })
            .inc();
    }

    /// Records one PUT round trip.
    pub fn push_took(&self, took: Duration) {
        self.0.push_duration.observe(took.as_secs_f64());
    }

    /// Counts one replica's sync outcome; failures are counted twice, once
    /// here and once in `oooi_controller_route_push_failures_total`.
    pub fn push_outcome(&self, outcome: &str, failed: bool) {
        let labels = PushLabels {
            outcome: outcome.into(),
        };
        self.0.push_outcomes.get_or_create(&labels).inc();
        if failed {
            self.0.push_failures.get_or_create(&labels).inc();
        }
    }

    /// Sets the leader gauge.
    pub fn set_leader(&self, leader: bool) {
        self.0.leader.set(i64::from(leader));
    }

    /// Sets whether an optional API is present.
    pub fn set_optional_api(&self, api: &str, present: bool) {
        self.0
            .optional_apis
            .get_or_create(&ApiLabels { api: api.into() })
            .set(i64::from(present));
    }

    /// The OpenMetrics text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.0.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_names_follow_the_project_convention() {
        let m = Metrics::new();
        m.reconciled("Infra", Duration::from_millis(3));
        m.reconcile_failed("Infra", "Kube");
        m.push_took(Duration::from_millis(2));
        m.push_outcome("timeout", true);
        m.set_leader(true);
        m.set_optional_api("machines.cluster.x-k8s.io", false);
        let text = m.encode();
        for needle in [
            "oooi_controller_reconciles_total{kind=\"Infra\"} 1",
            "oooi_controller_reconcile_errors_total{kind=\"Infra\",reason=\"Kube\"} 1",
            "oooi_controller_reconcile_duration_seconds_count{kind=\"Infra\"} 1",
            "oooi_controller_route_push_duration_seconds_count 1",
            "oooi_controller_route_push_failures_total{outcome=\"timeout\"} 1",
            "oooi_controller_leader 1",
            "oooi_controller_optional_api_present{api=\"machines.cluster.x-k8s.io\"} 0",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            assert!(line.starts_with("oooi_controller_"), "bad name: {line}");
        }
    }
}
