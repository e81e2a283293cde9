//! The pair API this server serves to the other one (routes and rules in
//! the [`super`] module docs).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::{API_PREFIX, PairShared, REQUEST_HEADER, STREAM_HEADER};
use crate::config::Role;
use crate::lease_store::{RECORD_LEN, decode_records};
use crate::metrics::{self, metrics};
use crate::replication::Stream;

/// The pair API (serve it on `peer.listen`).
pub fn router(shared: Arc<PairShared>) -> axum::Router {
    use axum::body::Bytes;
    use axum::extract::{ConnectInfo, State};
    use axum::http::{HeaderMap, StatusCode, header};
    use axum::response::{IntoResponse, Response};
    use axum::routing::{get, post};

    /// When a bad token was last logged (one line every 10 s at most).
    static UNAUTHORIZED_LOGGED: Mutex<Option<Instant>> = Mutex::new(None);

    /// The refusal when the request lacks the token (counted; logged with
    /// the caller's address, rate-limited).
    fn auth(s: &PairShared, h: &HeaderMap, from: Option<SocketAddr>) -> Result<(), Box<Response>> {
        let value = h.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        if s.authorized(value) {
            return Ok(());
        }
        metrics().pair_unauthorized.inc();
        if let Ok(mut last) = UNAUTHORIZED_LOGGED.lock()
            && last.is_none_or(|t| t.elapsed() >= Duration::from_secs(10))
        {
            *last = Some(Instant::now());
            tracing::warn!(
                from = %from.map_or_else(|| "unknown".to_string(), |a| a.to_string()),
                token_sent = value.is_some(),
                "pair API: request with a wrong or missing token refused (the two servers must share one token)"
            );
        }
        Err(Box::new(
            (StatusCode::UNAUTHORIZED, "bad or missing token\n").into_response(),
        ))
    }

    type From = Option<axum::Extension<ConnectInfo<SocketAddr>>>;

    async fn state(State(s): State<Arc<PairShared>>, from: From, h: HeaderMap) -> Response {
        if let Err(r) = auth(&s, &h, from.map(|c| c.0.0)) {
            return *r;
        }
        let role = match s.peer.role {
            Role::Primary => "primary",
            Role::Secondary => "secondary",
        };
        let unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        axum::Json(
            serde_json::json!({"role": role, "state": s.state().as_str(), "unix_ms": unix_ms}),
        )
        .into_response()
    }

    async fn streams(State(s): State<Arc<PairShared>>, from: From, h: HeaderMap) -> Response {
        if let Err(r) = auth(&s, &h, from.map(|c| c.0.0)) {
            return *r;
        }
        match s.open_stream() {
            Some(st) => axum::Json(serde_json::json!({"stream": st.header()})).into_response(),
            None => (StatusCode::SERVICE_UNAVAILABLE, "no stream\n").into_response(),
        }
    }

    async fn get_leases(State(s): State<Arc<PairShared>>, from: From, h: HeaderMap) -> Response {
        if let Err(r) = auth(&s, &h, from.map(|c| c.0.0)) {
            return *r;
        }
        let s2 = s.clone();
        match tokio::task::spawn_blocking(move || s2.snapshot(Duration::from_secs(30))).await {
            Ok(Some(body)) => (StatusCode::OK, body).into_response(),
            _ => (StatusCode::SERVICE_UNAVAILABLE, "no snapshot\n").into_response(),
        }
    }

    async fn post_leases(
        State(s): State<Arc<PairShared>>,
        from: From,
        h: HeaderMap,
        body: Bytes,
    ) -> Response {
        if let Err(r) = auth(&s, &h, from.map(|c| c.0.0)) {
            return *r;
        }
        if body.len() > s.max_records * RECORD_LEN {
            metrics::count_reason(&metrics().pair_records_refused, "body too large");
            return (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "at most {} records in one body (the pool and reservations twice over)\n",
                    s.max_records
                ),
            )
                .into_response();
        }
        let Some(records) = decode_records(&body) else {
            return (
                StatusCode::BAD_REQUEST,
                "body is not whole lease records with good checksums\n",
            )
                .into_response();
        };
        let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok());
        let ordered = match (text(STREAM_HEADER), text(REQUEST_HEADER)) {
            (Some(stream), Some(n)) => {
                match (Stream::parse(stream), n.trim().parse::<u64>().ok()) {
                    (Some(stream), Some(n)) => Some((stream, n)),
                    _ => {
                        return (
                            StatusCode::BAD_REQUEST,
                            "bad stream (`<16 hex digits>-<n>`) or request number\n",
                        )
                            .into_response();
                    }
                }
            }
            (None, None) => None,
            _ => {
                return (
                    StatusCode::BAD_REQUEST,
                    "replication needs both the stream and the request number\n",
                )
                    .into_response();
            }
        };
        metrics().pair_updates_received.inc_by(records.len() as u64);
        let s2 = s.clone();
        let body = body.to_vec();
        let wait = Duration::from_secs(30);
        let stored = tokio::task::spawn_blocking(move || match ordered {
            Some((stream, n)) => s2.store_in_order(stream, n, body, wait),
            None => Some(s2.store_records(body, wait)),
        })
        .await;
        match stored {
            Ok(Some(Some(report))) if report.refused.is_empty() => {
                StatusCode::NO_CONTENT.into_response()
            }
            Ok(Some(Some(report))) => {
                (StatusCode::CONFLICT, axum::Json(report.to_json())).into_response()
            }
            Ok(None) => (
                StatusCode::PRECONDITION_FAILED,
                "out of order: a stream this server did not issue or replaced, or an earlier request is missing\n",
            )
                .into_response(),
            _ => (StatusCode::SERVICE_UNAVAILABLE, "not stored\n").into_response(),
        }
    }

    // Bodies are bounded by `max_records` in the handler; the extractor's
    // own limit stops a larger body before it is read whole.
    let limit = shared.max_records * RECORD_LEN + 1;
    axum::Router::new()
        .route(&format!("{API_PREFIX}/state"), get(state))
        .route(&format!("{API_PREFIX}/streams"), post(streams))
        .route(
            &format!("{API_PREFIX}/leases"),
            get(get_leases).post(post_leases),
        )
        .layer(axum::extract::DefaultBodyLimit::max(limit))
        .with_state(shared)
}

/// Serves the pair API on `addr`: [`oooi_serve::Limits::SMALL`], but bodies
/// up to the largest batch of records (the router's own limit refuses more
/// with 413) and a longer request time for one such batch.
pub async fn serve(shared: Arc<PairShared>, addr: SocketAddr) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving the pair API");
    let limits = oooi_serve::Limits {
        max_body_bytes: shared.max_records * RECORD_LEN + 1,
        request_timeout: Duration::from_secs(30),
        ..oooi_serve::Limits::SMALL
    };
    match oooi_serve::serve(listener, router(shared), limits).await? {}
}
