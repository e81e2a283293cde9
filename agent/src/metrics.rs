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
    /// `handed_over`, `drained`, `frozen` or `stopped`.
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

/// Labels of `oooi_agent_adverts_received_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdvertLabels {
    /// `accepted`, or why not (`stale`, `other_group`, `check`, ...).
    pub result: String,
}

/// Labels of `oooi_agent_arp_defences_limited_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// `conflict` or `answer`.
    pub kind: String,
}

struct Inner {
    registry: Registry,
    held: Family<AddressLabels, Gauge>,
    acquisitions: Family<AddressLabels, Counter>,
    drops: Family<DropLabels, Counter>,
    defences: Family<DefenceLabels, Counter>,
    limited: Family<KindLabels, Counter>,
    adverts_sent: Counter,
    adverts_received: Family<AdvertLabels, Counter>,
    peers: Gauge,
    tickles: Counter,
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
        let defences = Family::<DefenceLabels, Counter>::default();
        let limited = Family::<KindLabels, Counter>::default();
        let adverts_sent = Counter::default();
        let adverts_received = Family::<AdvertLabels, Counter>::default();
        let peers = Gauge::default();
        let tickles = Counter::default();
        let ready = Gauge::default();
        registry.register(
            "addresses_held",
            "1 while the address is on this replica's interface",
            held.clone(),
        );
        registry.register(
            "acquisitions",
            "Times this replica added the address after it became its owner",
            acquisitions.clone(),
        );
        registry.register(
            "drops",
            "Times this replica removed the address, by reason",
            drops.clone(),
        );
        registry.register(
            "arp_defences_limited",
            "ARP packets about a held address left unanswered by the rate limits",
            limited.clone(),
        );
        registry.register(
            "adverts_sent",
            "Adverts this replica sent on the VLAN",
            adverts_sent.clone(),
        );
        registry.register(
            "adverts_received",
            "Frames of the advert EtherType received on the VLAN, by result",
            adverts_received.clone(),
        );
        registry.register(
            "connections_reset",
            "Connections of a previous holder this replica ended after taking their address (tickle ACKs)",
            tickles.clone(),
        );
        registry.register(
            "peers_heard",
            "Peers of the component whose adverts arrived within the dead time",
            peers.clone(),
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
            defences,
            limited,
            adverts_sent,
            adverts_received,
            peers,
            tickles,
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

    /// The address was added after this replica became its owner.
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

    /// An advert was sent.
    pub fn advert_sent(&self) {
        self.0.adverts_sent.inc();
    }

    /// A frame of the advert EtherType arrived: `accepted` or why not.
    pub fn advert_received(&self, result: &str) {
        self.0
            .adverts_received
            .get_or_create(&AdvertLabels {
                result: result.to_string(),
            })
            .inc();
    }

    /// `n` connections of a previous holder are being ended.
    pub fn tickles(&self, n: usize) {
        self.0.tickles.inc_by(n as u64);
    }

    /// Peers heard now.
    pub fn set_peers(&self, n: usize) {
        self.0.peers.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// A packet the defence would have answered was left alone by a limit.
    pub fn defence_limited(&self, kind: &str) {
        self.0
            .limited
            .get_or_create(&KindLabels {
                kind: kind.to_string(),
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
/// idle timeouts, head and body bytes). `/healthz` stays here for whoever
/// knows only this port; the liveness probe asks the health listener
/// ([`serve_health`]), whose budget nothing sent here can use up.
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

/// Serves `/healthz` alone (200 while the process runs) on `listener`,
/// within [`oooi_serve::Limits::HEALTH`]: a listener with a connection
/// budget of its own, so a flood of the metrics port (idle connections,
/// unfinished heads) cannot fail the liveness probe.
pub async fn serve_health(listener: tokio::net::TcpListener) -> anyhow::Result<()> {
    let app = axum::Router::new().route("/healthz", axum::routing::get(|| async { "ok\n" }));
    match oooi_serve::serve(listener, app, oooi_serve::Limits::HEALTH).await? {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_named_for_the_agent() {
        let m = Metrics::new();
        m.set_held("192.0.2.3", true);
        m.acquired("192.0.2.3");
        m.dropped("192.0.2.3", "handed_over");
        m.advert_sent();
        m.advert_received("stale");
        m.set_peers(2);
        m.defence_limited("answer");
        let text = m.render();
        for name in [
            "oooi_agent_addresses_held{address=\"192.0.2.3\"} 1",
            "oooi_agent_acquisitions_total{address=\"192.0.2.3\"} 1",
            "oooi_agent_drops_total{address=\"192.0.2.3\",reason=\"handed_over\"} 1",
            "oooi_agent_adverts_sent_total 1",
            "oooi_agent_adverts_received_total{result=\"stale\"} 1",
            "oooi_agent_peers_heard 2",
            "oooi_agent_arp_defences_limited_total{kind=\"answer\"} 1",
            "oooi_agent_replica_ready 0",
        ] {
            assert!(text.contains(name), "{name} missing in\n{text}");
        }
    }
}
