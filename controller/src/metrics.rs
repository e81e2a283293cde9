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

/// Labels of `oooi_controller_proxy_replicas`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProxyStateLabels {
    /// The ProxyServer, `<namespace>/<name>`.
    pub proxyserver: String,
    /// `in_sync` or `out_of_sync`.
    pub state: String,
}

/// Labels of `oooi_controller_proxy_table_generation`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReplicaLabels {
    /// The ProxyServer, `<namespace>/<name>`.
    pub proxyserver: String,
    /// The Envoy pod.
    pub replica: String,
}

/// Labels of `oooi_controller_filter_rejected`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProxyLabels {
    /// The ProxyServer, `<namespace>/<name>`.
    pub proxyserver: String,
}

/// Labels of `oooi_controller_attachments_excluded`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InfraLabels {
    /// The Infra, `<namespace>/<name>`.
    pub infra: String,
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
    proxy_replicas: Family<ProxyStateLabels, Gauge>,
    table_generation: Family<ReplicaLabels, Gauge>,
    /// Replicas last reported per ProxyServer, to drop pods that are gone.
    replicas_seen: std::sync::Mutex<std::collections::BTreeMap<String, Vec<String>>>,
    filter_rejected: Family<ProxyLabels, Gauge>,
    attachments_excluded: Family<InfraLabels, Gauge>,
    inventory_polls: Family<PushLabels, Counter>,
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
        let proxy_replicas = Family::<ProxyStateLabels, Gauge>::default();
        let table_generation = Family::<ReplicaLabels, Gauge>::default();
        let filter_rejected = Family::<ProxyLabels, Gauge>::default();
        let attachments_excluded = Family::<InfraLabels, Gauge>::default();
        let inventory_polls = Family::<PushLabels, Counter>::default();
        registry.register(
            "oooi_controller_inventory_polls",
            "Asks of a DHCP server's lease inventory for its pool figures, by outcome (answered, unreachable, no_token, no_pod)",
            inventory_polls.clone(),
        );
        registry.register(
            "oooi_controller_proxy_replicas",
            "Envoy replicas of a ProxyServer holding the controller's table (in_sync) or not (out_of_sync: not ready, unreachable or refusing) after its last sync",
            proxy_replicas.clone(),
        );
        registry.register(
            "oooi_controller_proxy_table_generation",
            "Routing-table generation each Envoy replica held after its last sync",
            table_generation.clone(),
        );
        registry.register(
            "oooi_controller_filter_rejected",
            "1 while a ProxyServer's new filter module is refused by the pre-rollout check",
            filter_rejected.clone(),
        );
        registry.register(
            "oooi_controller_attachments_excluded",
            "InfraClusterAttachments of an Infra excluded by a conflict",
            attachments_excluded.clone(),
        );
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
            proxy_replicas,
            table_generation,
            replicas_seen: std::sync::Mutex::default(),
            filter_rejected,
            attachments_excluded,
            inventory_polls,
        }))
    }

    /// Counts one ask of a DHCP server's inventory, by outcome.
    pub fn inventory_polled(&self, outcome: &str) {
        self.0
            .inventory_polls
            .get_or_create(&PushLabels {
                outcome: outcome.into(),
            })
            .inc();
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

    /// Records a ProxyServer's replicas after a sync: (pod, holds the
    /// controller's table, generation it holds). No replica at all counts as
    /// one out of sync: the proxy serves nobody.
    pub fn set_proxy_replicas(&self, proxyserver: &str, replicas: &[(String, bool, u64)]) {
        let in_sync = replicas.iter().filter(|(_, synced, _)| *synced).count();
        let out_of_sync = (replicas.len() - in_sync).max(usize::from(replicas.is_empty()));
        for (state, n) in [("in_sync", in_sync), ("out_of_sync", out_of_sync)] {
            self.0
                .proxy_replicas
                .get_or_create(&ProxyStateLabels {
                    proxyserver: proxyserver.into(),
                    state: state.into(),
                })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        let mut seen = self
            .0
            .replicas_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let now: Vec<String> = replicas.iter().map(|(pod, _, _)| pod.clone()).collect();
        for gone in seen
            .get(proxyserver)
            .into_iter()
            .flatten()
            .filter(|p| !now.contains(p))
        {
            self.0.table_generation.remove(&ReplicaLabels {
                proxyserver: proxyserver.into(),
                replica: gone.clone(),
            });
        }
        for (pod, _, generation) in replicas {
            self.0
                .table_generation
                .get_or_create(&ReplicaLabels {
                    proxyserver: proxyserver.into(),
                    replica: pod.clone(),
                })
                .set(i64::try_from(*generation).unwrap_or(i64::MAX));
        }
        seen.insert(proxyserver.to_string(), now);
    }

    /// Sets whether a ProxyServer's new filter module is refused.
    pub fn set_filter_rejected(&self, proxyserver: &str, rejected: bool) {
        self.0
            .filter_rejected
            .get_or_create(&ProxyLabels {
                proxyserver: proxyserver.into(),
            })
            .set(i64::from(rejected));
    }

    /// Sets how many attachments of an Infra are excluded by a conflict.
    pub fn set_attachments_excluded(&self, infra: &str, excluded: u32) {
        self.0
            .attachments_excluded
            .get_or_create(&InfraLabels {
                infra: infra.into(),
            })
            .set(i64::from(excluded));
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

    #[test]
    fn proxy_replicas_follow_the_last_sync() {
        let m = Metrics::new();
        m.set_proxy_replicas(
            "oooi/v-proxy",
            &[("p-a".into(), true, 7), ("p-b".into(), false, 5)],
        );
        let text = m.encode();
        for needle in [
            "oooi_controller_proxy_replicas{proxyserver=\"oooi/v-proxy\",state=\"in_sync\"} 1",
            "oooi_controller_proxy_replicas{proxyserver=\"oooi/v-proxy\",state=\"out_of_sync\"} 1",
            "oooi_controller_proxy_table_generation{proxyserver=\"oooi/v-proxy\",replica=\"p-b\"} 5",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
        // p-b is gone: its generation goes; no replica counts as one out of sync.
        m.set_proxy_replicas("oooi/v-proxy", &[("p-a".into(), true, 8)]);
        assert!(!m.encode().contains("replica=\"p-b\""));
        m.set_proxy_replicas("oooi/v-proxy", &[]);
        assert!(m.encode().contains(
            "oooi_controller_proxy_replicas{proxyserver=\"oooi/v-proxy\",state=\"out_of_sync\"} 1"
        ));
    }

    /// Every `oooi_controller_*` metric the chart's alerts and Grafana
    /// dashboard query is one this registry exports.
    #[test]
    fn the_charts_alerts_and_dashboard_query_exported_metrics() {
        let m = Metrics::new();
        m.reconciled("Infra", Duration::from_millis(1));
        m.reconcile_failed("Infra", "Kube");
        m.push_took(Duration::from_millis(1));
        m.push_outcome("timeout", true);
        m.set_leader(true);
        m.set_optional_api("x", true);
        m.set_proxy_replicas("n/p", &[("pod".into(), true, 1)]);
        m.set_filter_rejected("n/p", false);
        m.set_attachments_excluded("n/i", 0);
        let text = m.encode();
        let exported: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split(['{', ' ']).next())
            .collect();
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/oooi/monitoring");
        let mut queried = 0;
        for file in ["alerts.yaml", "dashboard.json"] {
            let text = std::fs::read_to_string(dir.join(file)).unwrap();
            for (at, _) in text.match_indices("oooi_controller_") {
                let name: String = text[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                assert!(
                    exported.contains(&name.as_str()),
                    "{file} queries {name}, which the controller does not export: {exported:?}"
                );
                queried += 1;
            }
        }
        assert!(queried >= 5, "only {queried} controller metrics queried");
    }
}
