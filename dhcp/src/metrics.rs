//! Prometheus metrics (`oooi_dhcp_*`) and the HTTP endpoint serving
//! `/metrics` and `/healthz` (and `/healthz` alone on the health listener).

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of the message counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MessageLabels {
    /// DHCP message type, e.g. `discover`, `ack`.
    pub r#type: String,
}

/// Labels of the dropped-packet counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// Why.
    pub reason: String,
}

/// Labels of `oooi_dhcp_reloads_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// `ok` or `rejected`.
    pub result: String,
}

/// Every metric of the process.
pub struct Metrics {
    registry: Registry,
    /// Requests received, by message type.
    pub received: Family<MessageLabels, Counter>,
    /// Replies sent, by message type.
    pub sent: Family<MessageLabels, Counter>,
    /// Datagrams dropped without a reply, by reason.
    pub dropped: Family<ReasonLabels, Counter>,
    /// NAKs sent.
    pub naks: Counter,
    /// DECLINEs accepted (addresses quarantined).
    pub declines: Counter,
    /// DISCOVERs that got no offer because the pool was exhausted.
    pub pool_exhausted: Counter,
    /// Refusals because a client's reserved address is held by another.
    pub reserved_address_conflicts: Counter,
    /// Bindings released because their MAC's reservation names another address.
    pub reservation_moves: Counter,
    /// Live bound leases.
    pub leases_active: Gauge,
    /// Free pool addresses.
    pub leases_free: Gauge,
    /// Live offers (held, uncommitted).
    pub leases_offered: Gauge,
    /// Quarantined addresses.
    pub leases_declined: Gauge,
    /// Held share of the pool, 0..1.
    pub pool_utilisation: Gauge<f64, AtomicU64>,
    /// Time to make a batch durable (write + fdatasync).
    pub store_sync: Histogram,
    /// Records per durable batch (group commit size).
    pub store_batch: Histogram,
    /// Bytes cut from a torn or corrupt log tail at start.
    pub store_truncated_bytes: Counter,
    /// Damaged lease log records skipped at start.
    pub store_dropped_records: Counter,
    /// Store compactions.
    pub store_compactions: Counter,
    /// Config reloads by result.
    pub reloads: Family<ResultLabels, Counter>,
    /// Send failures.
    pub send_errors: Counter,
    /// State in a pair: 0 syncing, 1 load balancing, 2 partner down, 3
    /// communication recovery, 4 unauthorized.
    pub pair_state: Gauge,
    /// Lease records the other server of the pair stored.
    pub pair_updates_sent: Counter,
    /// Lease records not sent because the other server was down (it pulls them when it returns).
    pub pair_updates_unsent: Counter,
    /// Renewals ACKed before their update reached the other server, which
    /// already held them that long (lazy updates).
    pub pair_lazy_acks: Counter,
    /// Failed attempts to send lease records to the other server.
    pub pair_update_errors: Counter,
    /// Lease records received from the other server.
    pub pair_updates_received: Counter,
    /// Leases of the other server refused because a client of this server holds the address.
    pub pair_conflicts: Counter,
    /// Times this server took over the whole pool.
    pub pair_takeovers: Counter,
    /// Lease exchanges with the other server (after a start or an outage).
    pub pair_syncs: Counter,
    /// Heartbeats the other server did not answer.
    pub pair_heartbeat_failures: Counter,
    /// Pair API requests refused for a bad or missing token.
    pub pair_unauthorized: Counter,
    /// Lease records from the other server refused, by reason.
    pub pair_records_refused: Family<ReasonLabels, Counter>,
    /// The other server's clock minus this one's, as the last heartbeat measured it.
    pub pair_clock_skew: Gauge<f64, AtomicU64>,
    /// 1 while the other server answers heartbeats but has stored none of
    /// this server's lease updates for longer than `down_after_ms`.
    pub pair_updates_stalled: Gauge,
    /// Clients of the other server's scope seen unanswered (communication recovery).
    pub pair_unacked_clients: Gauge,
    /// Takeovers refused, by reason (clock skew).
    pub pair_takeovers_refused: Family<ReasonLabels, Counter>,
    /// Addresses held back because their lease record was lost.
    pub leases_lost: Gauge,
    /// Addresses quarantined at start because the lease log lost their record.
    pub store_lost_addresses: Counter,
    /// Conflict probes (ICMP echo) sent before offering an address.
    pub probes: Counter,
    /// Probes answered: the address was in use, skipped and quarantined.
    pub probe_conflicts: Counter,
    /// Time from a DISCOVER to its OFFER when the offer waited for a probe.
    pub probe_delay: Histogram,
    /// Probes that could not be sent (the offer left unprobed).
    pub probe_errors: Counter,
    /// Offers waiting for their probe now.
    pub probes_pending: Gauge,
    /// 1 when probing is configured but the ICMP socket could not be opened.
    pub probe_unavailable: Gauge,
    /// 1 while the other server's VLAN heartbeats arrive (the VLAN witness).
    pub pair_vlan_alive: Gauge,
    /// VLAN heartbeat datagrams refused, by reason.
    pub pair_vlan_refused: Family<ReasonLabels, Counter>,
    /// 1 while the VLAN witness socket cannot be opened (no takeover meanwhile).
    pub pair_vlan_unavailable: Gauge,
    /// Records from the other server waiting to be merged by the decision loop.
    pub pair_merge_backlog: Gauge,
    /// Hosts (by MAC) that answered probes for more addresses than one host may hold back.
    pub probe_greedy_responders: Gauge,
    /// Probe answers from a greedy responder that quarantined nothing.
    pub probe_answers_ignored: Counter,
    /// Offers of a probe-quarantined address because the free pool ran out.
    pub offers_of_quarantined: Counter,
    /// Refusals and silences toward a client, by
    /// [`oooi_dhcp_inventory::RefusalReason`].
    pub refusals: Family<ReasonLabels, Counter>,
    /// Inventory API requests refused for a bad or missing token.
    pub inventory_unauthorized: Counter,
}

/// The process-wide metrics.
pub fn metrics() -> &'static Metrics {
    static M: OnceLock<Metrics> = OnceLock::new();
    M.get_or_init(|| {
        let mut r = Registry::default();
        let m = Metrics {
            registry: Registry::default(),
            received: Family::default(),
            sent: Family::default(),
            dropped: Family::default(),
            naks: Counter::default(),
            declines: Counter::default(),
            pool_exhausted: Counter::default(),
            reserved_address_conflicts: Counter::default(),
            reservation_moves: Counter::default(),
            leases_active: Gauge::default(),
            leases_free: Gauge::default(),
            leases_offered: Gauge::default(),
            leases_declined: Gauge::default(),
            pool_utilisation: Gauge::default(),
            store_sync: Histogram::new(exponential_buckets(0.00005, 2.0, 16)),
            store_batch: Histogram::new(exponential_buckets(1.0, 2.0, 10)),
            store_truncated_bytes: Counter::default(),
            store_dropped_records: Counter::default(),
            store_compactions: Counter::default(),
            reloads: Family::default(),
            send_errors: Counter::default(),
            pair_state: Gauge::default(),
            pair_updates_sent: Counter::default(),
            pair_updates_unsent: Counter::default(),
            pair_lazy_acks: Counter::default(),
            pair_update_errors: Counter::default(),
            pair_updates_received: Counter::default(),
            pair_conflicts: Counter::default(),
            pair_takeovers: Counter::default(),
            pair_syncs: Counter::default(),
            pair_heartbeat_failures: Counter::default(),
            pair_unauthorized: Counter::default(),
            pair_records_refused: Family::default(),
            pair_clock_skew: Gauge::default(),
            pair_updates_stalled: Gauge::default(),
            pair_unacked_clients: Gauge::default(),
            pair_takeovers_refused: Family::default(),
            leases_lost: Gauge::default(),
            store_lost_addresses: Counter::default(),
            probes: Counter::default(),
            probe_conflicts: Counter::default(),
            probe_delay: Histogram::new(exponential_buckets(0.001, 2.0, 12)),
            probe_errors: Counter::default(),
            probes_pending: Gauge::default(),
            probe_unavailable: Gauge::default(),
            pair_vlan_alive: Gauge::default(),
            pair_vlan_refused: Family::default(),
            pair_vlan_unavailable: Gauge::default(),
            pair_merge_backlog: Gauge::default(),
            probe_greedy_responders: Gauge::default(),
            probe_answers_ignored: Counter::default(),
            offers_of_quarantined: Counter::default(),
            refusals: Family::default(),
            inventory_unauthorized: Counter::default(),
        };
        // Every reason is exported from the start (at 0), so an alert on
        // one has a series before its first refusal.
        for r in oooi_dhcp_inventory::RefusalReason::ALL {
            let _ = m.refusals.get_or_create(&ReasonLabels {
                reason: r.as_str().to_string(),
            });
        }
        r.register(
            "oooi_dhcp_refusals",
            "Refusals and silences toward a client, by reason (the inventory API's /why keeps the last few per client)",
            m.refusals.clone(),
        );
        r.register(
            "oooi_dhcp_inventory_unauthorized",
            "Inventory API requests refused for a bad or missing token",
            m.inventory_unauthorized.clone(),
        );
        r.register(
            "oooi_dhcp_messages_received",
            "DHCP requests received, by message type",
            m.received.clone(),
        );
        r.register(
            "oooi_dhcp_messages_sent",
            "DHCP replies sent, by message type",
            m.sent.clone(),
        );
        r.register(
            "oooi_dhcp_packets_dropped",
            "Datagrams dropped without a reply, by reason",
            m.dropped.clone(),
        );
        r.register("oooi_dhcp_naks", "NAKs sent", m.naks.clone());
        r.register(
            "oooi_dhcp_declines",
            "DECLINEs accepted (address quarantined)",
            m.declines.clone(),
        );
        r.register(
            "oooi_dhcp_pool_exhausted",
            "DISCOVERs left without an offer because the pool is exhausted",
            m.pool_exhausted.clone(),
        );
        r.register(
            "oooi_dhcp_reserved_address_conflicts",
            "Requests refused because the client's reserved address is held by another client",
            m.reserved_address_conflicts.clone(),
        );
        r.register(
            "oooi_dhcp_reservation_moves",
            "Leases released at once because their client's reservation names another address",
            m.reservation_moves.clone(),
        );
        r.register(
            "oooi_dhcp_leases_active",
            "Live bound leases",
            m.leases_active.clone(),
        );
        r.register(
            "oooi_dhcp_leases_free",
            "Free addresses in the dynamic pool",
            m.leases_free.clone(),
        );
        r.register(
            "oooi_dhcp_leases_offered",
            "Offered addresses held for a client",
            m.leases_offered.clone(),
        );
        r.register(
            "oooi_dhcp_leases_declined",
            "Declined addresses in quarantine",
            m.leases_declined.clone(),
        );
        r.register(
            "oooi_dhcp_pool_utilisation_ratio",
            "Held share of the dynamic pool (0..1)",
            m.pool_utilisation.clone(),
        );
        r.register(
            "oooi_dhcp_store_sync_duration_seconds",
            "Time to make one batch of lease records durable (write + fdatasync)",
            m.store_sync.clone(),
        );
        r.register(
            "oooi_dhcp_store_batch_records",
            "Lease records made durable by one fdatasync (group commit)",
            m.store_batch.clone(),
        );
        r.register(
            "oooi_dhcp_store_truncated_bytes",
            "Bytes cut from a torn or corrupt lease log tail at start",
            m.store_truncated_bytes.clone(),
        );
        r.register(
            "oooi_dhcp_store_dropped_records",
            "Damaged lease log records (checksum failed) skipped at start; the file as found is kept aside",
            m.store_dropped_records.clone(),
        );
        r.register(
            "oooi_dhcp_store_compactions",
            "Lease log compactions",
            m.store_compactions.clone(),
        );
        r.register(
            "oooi_dhcp_reloads",
            "Config reloads by result",
            m.reloads.clone(),
        );
        r.register(
            "oooi_dhcp_send_errors",
            "Replies that could not be sent",
            m.send_errors.clone(),
        );
        r.register(
            "oooi_dhcp_pair_state",
            "State in a pair: 0 syncing, 1 load balancing, 2 partner down, 3 communication recovery, 4 unauthorized (token mismatch)",
            m.pair_state.clone(),
        );
        r.register(
            "oooi_dhcp_pair_updates_sent",
            "Lease records the other server of the pair stored",
            m.pair_updates_sent.clone(),
        );
        r.register(
            "oooi_dhcp_pair_updates_unsent",
            "Lease records not sent because the other server was down (it pulls them when it returns)",
            m.pair_updates_unsent.clone(),
        );
        r.register(
            "oooi_dhcp_pair_lazy_acks",
            "Renewals ACKed once durable here, because the other server already held them that long (their update follows unwaited)",
            m.pair_lazy_acks.clone(),
        );
        r.register(
            "oooi_dhcp_pair_update_errors",
            "Failed attempts to send lease records to the other server",
            m.pair_update_errors.clone(),
        );
        r.register(
            "oooi_dhcp_pair_updates_received",
            "Lease records received from the other server",
            m.pair_updates_received.clone(),
        );
        r.register(
            "oooi_dhcp_pair_conflicts",
            "Leases of the other server refused because a client of this server holds the address",
            m.pair_conflicts.clone(),
        );
        r.register(
            "oooi_dhcp_pair_takeovers",
            "Times this server took over the whole pool",
            m.pair_takeovers.clone(),
        );
        r.register(
            "oooi_dhcp_pair_syncs",
            "Lease exchanges with the other server (after a start or an outage)",
            m.pair_syncs.clone(),
        );
        r.register(
            "oooi_dhcp_pair_heartbeat_failures",
            "Heartbeats the other server did not answer",
            m.pair_heartbeat_failures.clone(),
        );
        r.register(
            "oooi_dhcp_pair_unauthorized",
            "Pair API requests refused for a bad or missing token",
            m.pair_unauthorized.clone(),
        );
        r.register(
            "oooi_dhcp_pair_records_refused",
            "Lease records from the other server refused (not stored, answered non-2xx), by reason",
            m.pair_records_refused.clone(),
        );
        r.register(
            "oooi_dhcp_pair_clock_skew_seconds",
            "The other server's clock minus this server's, measured in the last heartbeat",
            m.pair_clock_skew.clone(),
        );
        r.register(
            "oooi_dhcp_pair_updates_stalled",
            "1 while the other server answers heartbeats but stores none of this server's lease updates",
            m.pair_updates_stalled.clone(),
        );
        r.register(
            "oooi_dhcp_pair_unacked_clients",
            "Clients of the other server's scope seen unanswered while contact is lost",
            m.pair_unacked_clients.clone(),
        );
        r.register(
            "oooi_dhcp_pair_takeovers_refused",
            "Takeovers of the other server's scope refused, by reason",
            m.pair_takeovers_refused.clone(),
        );
        r.register(
            "oooi_dhcp_leases_lost",
            "Addresses held back because the lease log lost their record",
            m.leases_lost.clone(),
        );
        r.register(
            "oooi_dhcp_store_lost_addresses",
            "Addresses quarantined at start because a damaged lease log record named them",
            m.store_lost_addresses.clone(),
        );
        r.register(
            "oooi_dhcp_pair_vlan_alive",
            "1 while the other server's VLAN heartbeats arrive (the VLAN witness)",
            m.pair_vlan_alive.clone(),
        );
        r.register(
            "oooi_dhcp_pair_vlan_refused",
            "VLAN heartbeat datagrams refused, by reason",
            m.pair_vlan_refused.clone(),
        );
        r.register(
            "oooi_dhcp_pair_vlan_unavailable",
            "1 while the VLAN witness socket cannot be opened (no takeover meanwhile)",
            m.pair_vlan_unavailable.clone(),
        );
        r.register(
            "oooi_dhcp_pair_merge_backlog_records",
            "Records from the other server waiting to be merged by the decision loop",
            m.pair_merge_backlog.clone(),
        );
        r.register(
            "oooi_dhcp_probe_greedy_responders",
            "Hosts (by MAC) that answered probes for more addresses than one host may hold back",
            m.probe_greedy_responders.clone(),
        );
        r.register(
            "oooi_dhcp_probe_answers_ignored",
            "Probe answers from a greedy responder that quarantined nothing",
            m.probe_answers_ignored.clone(),
        );
        r.register(
            "oooi_dhcp_offers_of_quarantined_addresses",
            "Offers of a probe-quarantined address because the free pool ran out",
            m.offers_of_quarantined.clone(),
        );
        r.register(
            "oooi_dhcp_probes",
            "ICMP echo probes sent before offering an address",
            m.probes.clone(),
        );
        r.register(
            "oooi_dhcp_probe_conflicts",
            "Probes answered: the address was in use, not offered, quarantined",
            m.probe_conflicts.clone(),
        );
        r.register(
            "oooi_dhcp_probe_delay_seconds",
            "Delay a probe added to an offer",
            m.probe_delay.clone(),
        );
        r.register(
            "oooi_dhcp_probe_errors",
            "Probes that could not be sent (the address was offered unprobed)",
            m.probe_errors.clone(),
        );
        r.register(
            "oooi_dhcp_probes_pending",
            "Offers waiting for their conflict probe",
            m.probes_pending.clone(),
        );
        r.register(
            "oooi_dhcp_probe_unavailable",
            "1 when conflict probing is configured but the ICMP echo socket could not be opened (net.ipv4.ping_group_range)",
            m.probe_unavailable.clone(),
        );
        Metrics { registry: r, ..m }
    })
}

/// Counts one message of `kind` in `family`.
pub fn count(family: &Family<MessageLabels, Counter>, kind: &str) {
    family
        .get_or_create(&MessageLabels {
            r#type: kind.to_string(),
        })
        .inc();
}

/// Metric label of a reason in words: lower snake case.
pub fn reason_label(reason: &str) -> String {
    reason
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| w.to_ascii_lowercase())
        .collect::<Vec<_>>()
        .join("_")
}

/// Counts one event of `family` under `reason` (in words or a label).
pub fn count_reason(family: &Family<ReasonLabels, Counter>, reason: &str) {
    family
        .get_or_create(&ReasonLabels {
            reason: reason_label(reason),
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

/// Unix seconds of the DHCP loop's last turn; `/healthz` fails when stale.
pub static HEARTBEAT: AtomicU64 = AtomicU64::new(0);

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// True when the DHCP loop turned within the last `secs` seconds.
pub fn loop_turned_within(secs: u64) -> bool {
    let last = HEARTBEAT.load(Ordering::Relaxed);
    last != 0 && unix_now().saturating_sub(last) <= secs
}

/// Records that the DHCP loop is alive.
pub fn beat() {
    HEARTBEAT.store(unix_now(), Ordering::Relaxed);
}

/// The pair's state and why it is in it, for `/healthz`.
static PAIR_STATUS: std::sync::Mutex<Option<(String, String)>> = std::sync::Mutex::new(None);

/// Records the pair's state and the reason (shown by `/healthz`).
pub fn set_pair_status(state: &str, reason: &str) {
    if let Ok(mut s) = PAIR_STATUS.lock() {
        *s = Some((state.to_string(), reason.to_string()));
    }
}

/// `/healthz`: 200 while the DHCP loop runs (a pair problem does not make
/// the server unhealthy: restarting it would not help), and the body says
/// the pair's state and why.
async fn healthz() -> (axum::http::StatusCode, String) {
    let last = HEARTBEAT.load(Ordering::Relaxed);
    let pair = PAIR_STATUS
        .lock()
        .ok()
        .and_then(|s| s.clone())
        .map(|(state, reason)| format!("pair: {state} ({reason})\n"))
        .unwrap_or_default();
    if last != 0 && unix_now().saturating_sub(last) <= 5 {
        (axum::http::StatusCode::OK, format!("ok\n{pair}"))
    } else {
        (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            format!("dhcp loop not running\n{pair}"),
        )
    }
}

/// Serves `/metrics` and `/healthz` on `addr`, within
/// [`oooi_serve::Limits::SMALL`]. `/healthz` stays here for whoever knows
/// only this port; the kubelet asks the health listener ([`serve_health`]),
/// whose budget nothing sent here can use up.
pub async fn serve_http(addr: SocketAddr) -> anyhow::Result<()> {
    let app = axum::Router::new()
        .route("/metrics", axum::routing::get(|| async { render() }))
        .route("/healthz", axum::routing::get(healthz));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("metrics endpoint {addr}: {e}"))?;
    tracing::info!(%addr, "serving /metrics and /healthz");
    match oooi_serve::serve(listener, app, oooi_serve::Limits::SMALL).await? {}
}

/// Serves `/healthz` alone on `addr`, within [`oooi_serve::Limits::HEALTH`]:
/// a listener with a connection budget of its own, so a flood of the
/// metrics port (idle connections, unfinished heads) cannot make the pod
/// unready or have it restarted.
pub async fn serve_health(addr: SocketAddr) -> anyhow::Result<()> {
    let app = axum::Router::new().route("/healthz", axum::routing::get(healthz));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("health endpoint {addr}: {e}"))?;
    tracing::info!(%addr, "serving /healthz");
    match oooi_serve::serve(listener, app, oooi_serve::Limits::HEALTH).await? {}
}
