//! Prometheus metrics (`oooi_dns_*`) and the HTTP endpoints: `/metrics`
//! (and `/healthz`) on the metrics listener, `/healthz` alone on the health
//! listener.

use std::sync::OnceLock;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::config::Config;

/// Labels of `oooi_dns_queries_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueryLabels {
    /// View name, or `none` when no view matched.
    pub view: String,
    /// Query type, e.g. `A` (see [`qtype_label`]).
    pub qtype: String,
    /// Response code mnemonic, e.g. `NXDOMAIN` (see [`rcode_label`]).
    pub rcode: String,
}

/// Labels of the upstream metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamLabels {
    /// Upstream `ip:port`.
    pub upstream: String,
}

/// Labels of the health check metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HealthLabels {
    /// The checked address, as answered.
    pub address: String,
    /// The check, e.g. `tcp://10.128.0.7:8443`.
    pub check: String,
}

/// The labels of `address` checked by `target`.
pub fn health_labels(
    address: std::net::IpAddr,
    target: &crate::config::CheckTarget,
) -> HealthLabels {
    HealthLabels {
        address: address.to_string(),
        check: target.to_string(),
    }
}

/// Labels of `oooi_dns_health_transitions_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TransitionLabels {
    /// The checked address, as answered.
    pub address: String,
    /// The check.
    pub check: String,
    /// The state entered: `up` or `down`.
    pub to: String,
}

impl TransitionLabels {
    /// The transition of `labels`' address to up or down.
    pub fn new(labels: &HealthLabels, up: bool) -> Self {
        TransitionLabels {
            address: labels.address.clone(),
            check: labels.check.clone(),
            to: if up { "up" } else { "down" }.to_string(),
        }
    }
}

/// Labels of `oooi_dns_reloads_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    /// `ok` or `rejected`.
    pub result: String,
}

/// Labels of `oooi_dns_listen_failures_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenLabels {
    /// The `ip:port` that could not be bound.
    pub address: String,
}

/// Labels of the forwarding failure-state metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScopeLabels {
    /// `name` (a name and type) or `zone`.
    pub scope: String,
}

/// Labels of `oooi_dns_upstream_unanswered_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BlameLabels {
    /// Upstream `ip:port`.
    pub upstream: String,
    /// `upstream` (it said nothing to anyone since the query was sent) or
    /// `query` (it answered others meanwhile).
    pub blame: String,
}

type HistogramFamily = Family<UpstreamLabels, Histogram, fn() -> Histogram>;

/// All metrics of the process.
pub struct Metrics {
    registry: Registry,
    /// Queries by view, type and rcode.
    pub queries: Family<QueryLabels, Counter>,
    /// Upstream round-trip time in seconds.
    pub upstream_duration: HistogramFamily,
    /// Upstream failures (errors and timeouts).
    pub upstream_failures: Family<UpstreamLabels, Counter>,
    /// Config reloads by result.
    pub reloads: Family<ReloadLabels, Counter>,
    /// Listener addresses of a reloaded config that could not be bound.
    pub listen_failures: Family<ListenLabels, Counter>,
    /// UDP queries dropped because too many were waiting for the handler.
    pub dropped_busy: Counter,
    /// 1 while an upstream counts as up, 0 while down.
    pub upstream_up: Family<UpstreamLabels, Gauge>,
    /// Expired cached answers served because no upstream answered.
    pub stale_answers: Counter,
    /// Upstream queries that got no response, by what it is blamed on.
    pub unanswered: Family<BlameLabels, Counter>,
    /// Forwarded queries answered without asking, their name or zone held.
    pub forward_held: Family<ScopeLabels, Counter>,
    /// Names and zones put on hold.
    pub holds: Family<ScopeLabels, Counter>,
    /// Names and zones in the failure state (bounded).
    pub failure_entries: Family<ScopeLabels, Gauge>,
    /// UDP queries dropped because their client had its share in progress.
    pub client_limited: Counter,
    /// 1 while a checked address passes its health check, 0 while not.
    pub health_up: Family<HealthLabels, Gauge>,
    /// Health state changes of checked addresses.
    pub health_transitions: Family<TransitionLabels, Counter>,
}

fn new_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 16))
}

/// The process-wide metrics.
pub fn metrics() -> &'static Metrics {
    static M: OnceLock<Metrics> = OnceLock::new();
    M.get_or_init(|| {
        let mut registry = Registry::default();
        let queries = Family::<QueryLabels, Counter>::default();
        let upstream_duration: HistogramFamily = Family::new_with_constructor(new_histogram);
        let upstream_failures = Family::<UpstreamLabels, Counter>::default();
        let reloads = Family::<ReloadLabels, Counter>::default();
        let listen_failures = Family::<ListenLabels, Counter>::default();
        let dropped_busy = Counter::default();
        let upstream_up = Family::<UpstreamLabels, Gauge>::default();
        let stale_answers = Counter::default();
        let health_up = Family::<HealthLabels, Gauge>::default();
        let unanswered = Family::<BlameLabels, Counter>::default();
        let forward_held = Family::<ScopeLabels, Counter>::default();
        let holds = Family::<ScopeLabels, Counter>::default();
        let failure_entries = Family::<ScopeLabels, Gauge>::default();
        let client_limited = Counter::default();
        registry.register(
            "oooi_dns_upstream_unanswered",
            "Upstream queries that got no response, by blame: upstream (it said nothing to anyone since the query was sent) or query (it answered others meanwhile: the name or zone is at fault)",
            unanswered.clone(),
        );
        registry.register(
            "oooi_dns_forward_held",
            "Forwarded queries answered at once (stale or SERVFAIL) without asking, because their name or zone keeps failing, by scope",
            forward_held.clone(),
        );
        registry.register(
            "oooi_dns_forward_holds",
            "Names and zones put on hold after failing while the upstreams answered others, by scope",
            holds.clone(),
        );
        registry.register(
            "oooi_dns_forward_failing_entries",
            "Names and zones remembered as failing (bounded), by scope",
            failure_entries.clone(),
        );
        registry.register(
            "oooi_dns_client_limited_queries",
            "UDP queries dropped because their client already had its share of the queries in progress",
            client_limited.clone(),
        );
        let health_transitions = Family::<TransitionLabels, Counter>::default();
        registry.register(
            "oooi_dns_upstream_up",
            "1 while an upstream counts as up, 0 while it counts as down (silent across unrelated zones; skipped while another upstream is up)",
            upstream_up.clone(),
        );
        registry.register(
            "oooi_dns_stale_answers",
            "Expired cached answers served because no upstream answered (RFC 8767)",
            stale_answers.clone(),
        );
        registry.register(
            "oooi_dns_health_up",
            "1 while a checked address passes its health check and is answered, 0 while not",
            health_up.clone(),
        );
        registry.register(
            "oooi_dns_health_transitions",
            "Health state changes of checked addresses, by the state entered",
            health_transitions.clone(),
        );
        registry.register(
            "oooi_dns_queries",
            "DNS queries by view, type and rcode",
            queries.clone(),
        );
        registry.register(
            "oooi_dns_upstream_duration_seconds",
            "Upstream round-trip time",
            upstream_duration.clone(),
        );
        registry.register(
            "oooi_dns_upstream_failures",
            "Upstream errors and timeouts",
            upstream_failures.clone(),
        );
        registry.register(
            "oooi_dns_reloads",
            "Config reloads by result",
            reloads.clone(),
        );
        registry.register(
            "oooi_dns_listen_failures",
            "Listener addresses of a reloaded config that could not be bound",
            listen_failures.clone(),
        );
        registry.register(
            "oooi_dns_dropped_queries",
            "UDP queries dropped while too many waited for the handler",
            dropped_busy.clone(),
        );
        Metrics {
            registry,
            unanswered,
            forward_held,
            holds,
            failure_entries,
            client_limited,
            listen_failures,
            dropped_busy,
            upstream_up,
            stale_answers,
            health_up,
            health_transitions,
            queries,
            upstream_duration,
            upstream_failures,
            reloads,
        }
    })
}

/// The label of a response code: its IANA mnemonic (`NOERROR`,
/// `NXDOMAIN`, `SERVFAIL`, ...).
pub fn rcode_label(rc: ResponseCode) -> &'static str {
    match u16::from(rc) {
        0 => "NOERROR",
        1 => "FORMERR",
        2 => "SERVFAIL",
        3 => "NXDOMAIN",
        4 => "NOTIMP",
        5 => "REFUSED",
        6 => "YXDOMAIN",
        7 => "YXRRSET",
        8 => "NXRRSET",
        9 => "NOTAUTH",
        10 => "NOTZONE",
        16 => "BADVERS",
        17 => "BADKEY",
        18 => "BADTIME",
        23 => "BADCOOKIE",
        _ => "OTHER",
    }
}

/// The label of a query type: its name for the common types, `OTHER` for
/// the rest (a client choosing arbitrary types cannot grow the label set).
pub fn qtype_label(t: RecordType) -> &'static str {
    match t {
        RecordType::A => "A",
        RecordType::AAAA => "AAAA",
        RecordType::ANY => "ANY",
        RecordType::CAA => "CAA",
        RecordType::CNAME => "CNAME",
        RecordType::DNSKEY => "DNSKEY",
        RecordType::DS => "DS",
        RecordType::HTTPS => "HTTPS",
        RecordType::MX => "MX",
        RecordType::NS => "NS",
        RecordType::PTR => "PTR",
        RecordType::SOA => "SOA",
        RecordType::SRV => "SRV",
        RecordType::SVCB => "SVCB",
        RecordType::TXT => "TXT",
        _ => "OTHER",
    }
}

/// Counts one answered query.
pub fn count_query(view: &str, qtype: &str, rc: ResponseCode) {
    query_counter(view, qtype, rc).inc();
}

/// The counter of queries of `view` and `qtype` answered with `rc`.
pub fn query_counter(view: &str, qtype: &str, rc: ResponseCode) -> Counter {
    metrics()
        .queries
        .get_or_create(&QueryLabels {
            view: view.to_string(),
            qtype: qtype.to_string(),
            rcode: rcode_label(rc).to_string(),
        })
        .clone()
}

/// Creates, at 0, the counters a config will move, so that every series
/// exists from the start: queries per view for the usual types and
/// outcomes, undecodable queries, failures per upstream and per listener,
/// and reloads by result.
pub fn prime(config: &Config) {
    let m = metrics();
    let views = config.views.iter().map(|v| v.name.as_str()).chain(["none"]);
    for view in views {
        for qtype in ["A", "AAAA"] {
            for rc in [
                ResponseCode::NoError,
                ResponseCode::NXDomain,
                ResponseCode::ServFail,
                ResponseCode::Refused,
            ] {
                query_counter(view, qtype, rc);
            }
        }
        query_counter(view, "unknown", ResponseCode::FormErr);
    }
    for server in &config.upstreams.servers {
        let labels = UpstreamLabels {
            upstream: server.to_string(),
        };
        let _ = m.upstream_failures.get_or_create(&labels);
        let _ = m.upstream_duration.get_or_create(&labels);
        for blame in ["upstream", "query"] {
            let _ = m.unanswered.get_or_create(&BlameLabels {
                upstream: server.to_string(),
                blame: blame.to_string(),
            });
        }
    }
    for scope in ["name", "zone"] {
        let labels = ScopeLabels {
            scope: scope.to_string(),
        };
        let _ = m.forward_held.get_or_create(&labels);
        let _ = m.holds.get_or_create(&labels);
        let _ = m.failure_entries.get_or_create(&labels);
    }
    for c in config.health.iter().flat_map(|h| h.checks.iter()) {
        let labels = health_labels(c.address, &c.target);
        let _ = m.health_up.get_or_create(&labels);
        for up in [true, false] {
            let _ = m
                .health_transitions
                .get_or_create(&TransitionLabels::new(&labels, up));
        }
    }
    for addr in config.listen_addresses() {
        let _ = m.listen_failures.get_or_create(&ListenLabels {
            address: addr.to_string(),
        });
    }
    for result in ["ok", "rejected"] {
        let _ = m.reloads.get_or_create(&ReloadLabels {
            result: result.to_string(),
        });
    }
}

/// Counts one config reload with `result` `ok` or `rejected`.
pub fn count_reload(result: &str) {
    metrics()
        .reloads
        .get_or_create(&ReloadLabels {
            result: result.to_string(),
        })
        .inc();
}

/// Text exposition of every metric.
pub fn render() -> String {
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, &metrics().registry).is_err() {
        out.clear();
    }
    out
}

/// What `/healthz` says: 503 `starting` until every listener of the first
/// config is bound, 200 `ok` while serving, 503 `draining` after SIGTERM
/// (the server still answers DNS then, see `oooi-dns serve --drain-seconds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Listeners not bound yet.
    Starting,
    /// Serving.
    Ready,
    /// Told to stop: still answering while the address agent hands the
    /// VLAN addresses on and the pod leaves its Services.
    Draining,
}

static HEALTH: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Sets what `/healthz` says. Draining is final: a late "ready" (a reload
/// finishing after SIGTERM) does not undo it.
pub fn set_health(h: Health) {
    use std::sync::atomic::Ordering::SeqCst;
    let v = match h {
        Health::Starting => 0,
        Health::Ready => 1,
        Health::Draining => 2,
    };
    let _ = HEALTH.fetch_update(SeqCst, SeqCst, |old| (old != 2).then_some(v));
}

/// What `/healthz` says now.
pub fn health() -> Health {
    match HEALTH.load(std::sync::atomic::Ordering::SeqCst) {
        0 => Health::Starting,
        1 => Health::Ready,
        _ => Health::Draining,
    }
}

async fn healthz() -> (axum::http::StatusCode, &'static str) {
    match health() {
        Health::Ready => (axum::http::StatusCode::OK, "ok"),
        Health::Starting => (axum::http::StatusCode::SERVICE_UNAVAILABLE, "starting"),
        Health::Draining => (axum::http::StatusCode::SERVICE_UNAVAILABLE, "draining"),
    }
}

/// Serves `/metrics` and `/healthz` on `listener`, within
/// [`oooi_serve::Limits::SMALL`]. `/healthz` stays here for whoever knows
/// only this port; the kubelet and the address agent ask the health
/// listener ([`serve_health`]), whose budget nothing sent here can use up.
pub async fn serve_http(listener: tokio::net::TcpListener) -> anyhow::Result<()> {
    let app = axum::Router::new()
        .route("/metrics", axum::routing::get(|| async { render() }))
        .route("/healthz", axum::routing::get(healthz));
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "serving /metrics and /healthz");
    }
    match oooi_serve::serve(listener, app, oooi_serve::Limits::SMALL).await? {}
}

/// Serves `/healthz` alone on `listener`, within
/// [`oooi_serve::Limits::HEALTH`]: a
/// listener with a connection budget of its own, so a flood of the
/// metrics port (idle connections, unfinished heads) cannot make the pod
/// unready.
pub async fn serve_health(listener: tokio::net::TcpListener) -> anyhow::Result<()> {
    let app = axum::Router::new().route("/healthz", axum::routing::get(healthz));
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "serving /healthz");
    }
    match oooi_serve::serve(listener, app, oooi_serve::Limits::HEALTH).await? {}
}
