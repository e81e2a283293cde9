//! Prometheus metrics (`oooi_agent_*`) and the HTTP endpoint serving them
//! with `/healthz`.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Labels naming one floating address.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AddressLabels {
    /// The address, e.g. `192.0.2.3`.
    pub address: String,
}

/// Labels of `oooi_agent_drops_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DropLabels {
    /// The address.
    pub address: String,
    /// `fenced`, `lost`, `drained` or `unbacked`.
    pub reason: String,
}

/// Labels of `oooi_agent_arp_defences_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DefenceLabels {
    /// The address.
    pub address: String,
    /// `conflict` (another host claimed it) or `answer` (a request for it).
    pub kind: String,
}

/// Labels of `oooi_agent_lease_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `get`, `create` or `replace`.
    pub verb: String,
    /// The HTTP status, or `error` when the API did not answer.
    pub code: String,
}

struct Inner {
    registry: Registry,
    held: Family<AddressLabels, Gauge>,
    acquisitions: Family<AddressLabels, Counter>,
    drops: Family<DropLabels, Counter>,
    renew_failures: Family<AddressLabels, Counter>,
    requests: Family<RequestLabels, Counter>,
    defences: Family<DefenceLabels, Counter>,
    ready: Gauge,
}

/// The agent's metrics; clones share them.
#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("oooi_agent");
        let held = Family::<AddressLabels, Gauge>::default();
        let acquisitions = Family::<AddressLabels, Counter>::default();
        let drops = Family::<DropLabels, Counter>::default();
        let renew_failures = Family::<AddressLabels, Counter>::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let defences = Family::<DefenceLabels, Counter>::default();
        let ready = Gauge::default();
        registry.register(
            "addresses_held",
            "1 while the address is on this replica's interface",
            held.clone(),
        );
        registry.register(
            "acquisitions",
            "Times this replica added the address after taking its Lease",
            acquisitions.clone(),
        );
        registry.register(
            "drops",
            "Times this replica removed the address, by reason",
            drops.clone(),
        );
        registry.register(
            "renew_failures",
            "Renewals of a held Lease that failed or conflicted",
            renew_failures.clone(),
        );
        registry.register(
            "lease_requests",
            "Requests to the Lease API, by verb and status",
            requests.clone(),
        );
        registry.register(
            "arp_defences",
            "ARP packets about a held address this replica answered: conflict (another host claimed it; a broadcast announcement) or answer (a request; an announcement to the requester)",
            defences.clone(),
        );
        registry.register(
            "replica_ready",
            "1 while the component beside the agent answers its readiness URL",
            ready.clone(),
        );
        Metrics(Arc::new(Inner {
            registry,
            held,
            acquisitions,
            drops,
            renew_failures,
            requests,
            defences,
            ready,
        }))
    }

    fn address(address: &str) -> AddressLabels {
        AddressLabels {
            address: address.to_string(),
        }
    }

    /// The address is on (or off) the interface.
    pub fn set_held(&self, address: &str, on: bool) {
        self.0
            .held
            .get_or_create(&Self::address(address))
            .set(i64::from(on));
    }

    /// The address was added after a Lease was taken.
    pub fn acquired(&self, address: &str) {
        self.0
            .acquisitions
            .get_or_create(&Self::address(address))
            .inc();
    }

    /// The address was removed.
    pub fn dropped(&self, address: &str, reason: &str) {
        self.0
            .drops
            .get_or_create(&DropLabels {
                address: address.to_string(),
                reason: reason.to_string(),
            })
            .inc();
    }

    /// A renewal failed.
    pub fn renew_failed(&self, address: &str) {
        self.0
            .renew_failures
            .get_or_create(&Self::address(address))
            .inc();
    }

    /// One Lease API request.
    pub fn api_request(&self, verb: &str, code: String) {
        self.0
            .requests
            .get_or_create(&RequestLabels {
                verb: verb.to_string(),
                code,
            })
            .inc();
    }

    /// An ARP packet about a held address was answered.
    pub fn defended(&self, address: &str, kind: &str) {
        self.0
            .defences
            .get_or_create(&DefenceLabels {
                address: address.to_string(),
                kind: kind.to_string(),
            })
            .inc();
    }

    /// The replica's readiness.
    pub fn set_ready(&self, ready: bool) {
        self.0.ready.set(i64::from(ready));
    }

    /// Every Lease API request so far (all verbs and codes).
    pub fn api_requests_total(&self) -> u64 {
        let text = self.render();
        text.lines()
            .filter(|l| l.starts_with("oooi_agent_lease_requests_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    /// The OpenMetrics text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.0.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// Serves `/metrics` and `/healthz` (200 while the process runs) on
/// `listener`, within [`oooi_serve::Limits::SMALL`] (connections, head and
/// idle timeouts, head and body bytes).
pub async fn serve(listener: tokio::net::TcpListener, metrics: Metrics) -> anyhow::Result<()> {
    let app = axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(move || {
                let m = metrics.clone();
                async move { m.render() }
            }),
        )
        .route("/healthz", axum::routing::get(|| async { "ok\n" }));
    match oooi_serve::serve(listener, app, oooi_serve::Limits::SMALL).await? {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_named_for_the_agent() {
        let m = Metrics::new();
        m.set_held("192.0.2.3", true);
        m.acquired("192.0.2.3");
        m.dropped("192.0.2.3", "fenced");
        m.renew_failed("192.0.2.3");
        m.api_request("get", "200".into());
        m.api_request("replace", "409".into());
        let text = m.render();
        for name in [
            "oooi_agent_addresses_held{address=\"192.0.2.3\"} 1",
            "oooi_agent_acquisitions_total{address=\"192.0.2.3\"} 1",
            "oooi_agent_drops_total{address=\"192.0.2.3\",reason=\"fenced\"} 1",
            "oooi_agent_renew_failures_total{address=\"192.0.2.3\"} 1",
            "oooi_agent_lease_requests_total{verb=\"replace\",code=\"409\"} 1",
            "oooi_agent_replica_ready 0",
        ] {
            assert!(text.contains(name), "{name} missing in\n{text}");
        }
        assert_eq!(m.api_requests_total(), 2);
    }
}
