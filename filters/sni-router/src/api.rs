//! The table API: `PUT /v1/routes`, `GET /v1/routes`, `GET /ready`.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;

use oooi_routes::{MAX_DOCUMENT_BYTES, RouteTable, Upstream, compact, generation_is_newer};
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::{Action, BufferType, LogLevel, MapType, Status};

use crate::{GENERATION_KEY, TABLE_KEY, cache, log, metrics};

/// The table API's settings (from the plugin configuration).
pub struct ApiConfig {
    token: String,
    /// The static clusters a `cluster` upstream may name.
    clusters: BTreeSet<String>,
}

impl ApiConfig {
    pub fn new(token: &str, clusters: &[String]) -> ApiConfig {
        ApiConfig {
            token: token.to_string(),
            clusters: clusters.iter().cloned().collect(),
        }
    }
}

/// Why a push was not authorised: HTTP status, the reason label of the log
/// line, and the message of the JSON answer.
#[derive(Clone, Copy)]
struct Denied {
    status: u32,
    reason: &'static str,
    message: &'static str,
}

pub struct ApiRequest {
    config: Option<Rc<ApiConfig>>,
    awaiting_push_body: bool,
    /// An authorisation failure, answered once the body has arrived: a reply
    /// sent while the client is still sending makes Envoy reset the
    /// connection, and the client would never read the status.
    denied: Option<Denied>,
}

impl ApiRequest {
    pub fn new(config: Option<Rc<ApiConfig>>) -> Self {
        ApiRequest {
            config,
            awaiting_push_body: false,
            denied: None,
        }
    }
}

impl Context for ApiRequest {}

fn header(name: &str) -> Option<String> {
    hostcalls::get_map_value(MapType::HttpRequestHeaders, name)
        .ok()
        .flatten()
}

fn respond(status: u32, body: &str) -> Action {
    let _ = hostcalls::send_http_response(
        status,
        vec![
            ("content-type", "application/json"),
            ("cache-control", "no-store"),
        ],
        Some(body.as_bytes()),
    );
    Action::Pause
}

fn error(status: u32, message: &str) -> Action {
    let body = serde_json::json!({ "error": message }).to_string();
    respond(status, &body)
}

/// Constant-time comparison, so the token cannot be guessed byte by byte.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Generation, digest and route count of the published table.
fn loaded() -> Option<(u64, String, usize)> {
    match hostcalls::get_shared_data(TABLE_KEY) {
        Ok((Some(bytes), _)) => compact::decode(&bytes)
            .ok()
            .map(|(t, d)| (t.generation, d, t.routes.len())),
        _ => None,
    }
}

/// The bearer token of an `Authorization` value: the scheme is matched
/// without regard to case (RFC 9110 §11.1), the token is trimmed.
pub fn bearer_token(value: &str) -> Option<&str> {
    let value = value.trim_start();
    let (scheme, rest) = value.split_once([' ', '\t'])?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| rest.trim())
        .filter(|t| !t.is_empty())
}

/// The client's address, for the log line of a refused push.
fn client_address() -> Option<IpAddr> {
    let bytes = hostcalls::get_property(vec!["source", "address"])
        .ok()
        .flatten()?;
    let s = std::str::from_utf8(&bytes).ok()?;
    s.parse::<SocketAddr>()
        .map(|a| a.ip())
        .or_else(|_| s.parse::<IpAddr>())
        .ok()
}

impl ApiRequest {
    fn authorize(&self) -> Result<(), Denied> {
        let Some(config) = &self.config else {
            return Err(Denied {
                status: 403,
                reason: "not_a_push_listener",
                message: "this listener does not accept pushes",
            });
        };
        let Some(value) = header("authorization") else {
            return Err(Denied {
                status: 401,
                reason: "no_token",
                message: "missing bearer token",
            });
        };
        match bearer_token(&value) {
            None => Err(Denied {
                status: 401,
                reason: "not_bearer",
                message: "the authorization header is not `Bearer <token>`",
            }),
            Some(t) if same(t.as_bytes(), config.token.as_bytes()) => Ok(()),
            Some(_) => Err(Denied {
                status: 403,
                reason: "bad_token",
                message: "bad bearer token",
            }),
        }
    }

    /// Counts and logs a refused authorisation (apart from bad tables),
    /// then answers it.
    fn deny(&self, d: Denied) -> Action {
        metrics::inc(metrics::PUSH_UNAUTHORIZED);
        let source = client_address().map_or_else(|| "-".to_string(), |a| a.to_string());
        log(
            LogLevel::Warn,
            &format!(
                "push unauthorized reason={} source={source} status={}",
                d.reason, d.status
            ),
        );
        error(d.status, d.message)
    }

    fn push(&self, body: &[u8]) -> Action {
        let table = match RouteTable::from_json(body) {
            Ok(t) => t,
            Err(e) => return self.reject(400, &e.to_string()),
        };
        let clusters = self.config.as_ref().map(|c| &c.clusters);
        for (i, route) in table.routes.iter().enumerate() {
            if let Upstream::Cluster(name) = &route.upstream
                && !clusters.is_some_and(|c| c.contains(name))
            {
                let known = match clusters {
                    Some(c) if !c.is_empty() => {
                        let names: Vec<&str> = c.iter().map(String::as_str).collect();
                        format!("it has {}", names.join(", "))
                    }
                    _ => "it has none; route by `address` instead".to_string(),
                };
                return self.reject(
                    400,
                    &format!(
                        "routes[{i}].upstream.cluster: {name:?} is not a cluster of this proxy ({known})"
                    ),
                );
            }
        }
        let (current, cas) = match hostcalls::get_shared_data(TABLE_KEY) {
            Ok((bytes, cas)) => (
                bytes
                    .as_deref()
                    .and_then(compact::peek_generation)
                    .unwrap_or(0),
                cas,
            ),
            Err(e) => return self.reject(500, &format!("cannot read shared data: {e:?}")),
        };
        if !generation_is_newer(table.generation, current) {
            return self.reject(
                409,
                &format!(
                    "generation {} is not newer than the loaded generation {current}",
                    table.generation
                ),
            );
        }
        let digest = table.digest();
        let encoded = compact::encode(&table, &digest);
        match hostcalls::set_shared_data(TABLE_KEY, Some(&encoded), cas) {
            Ok(()) => {}
            Err(Status::CasMismatch) => {
                return self.reject(
                    409,
                    "another push landed at the same time; read back and retry",
                );
            }
            Err(e) => return self.reject(500, &format!("cannot store the table: {e:?}")),
        }
        // Publish the generation only after the table is in place: readers
        // that see it always find a table at least that new.
        if let Err(e) =
            hostcalls::set_shared_data(GENERATION_KEY, Some(&table.generation.to_le_bytes()), None)
        {
            return self.reject(500, &format!("cannot publish the generation: {e:?}"));
        }
        cache::refresh();
        metrics::inc(metrics::PUSH_ACCEPTED);
        log(
            LogLevel::Info,
            &format!(
                "push accepted: generation {} ({} routes, {digest})",
                table.generation,
                table.routes.len()
            ),
        );
        let body = serde_json::json!({
            "generation": table.generation,
            "digest": digest,
            "routes": table.routes.len(),
            "build": crate::build_id(),
        });
        respond(200, &body.to_string())
    }

    fn reject(&self, status: u32, message: &str) -> Action {
        metrics::inc(metrics::PUSH_REJECTED);
        log(
            LogLevel::Warn,
            &format!("push rejected ({status}): {message}"),
        );
        error(status, message)
    }
}

impl HttpContext for ApiRequest {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let method = header(":method").unwrap_or_default();
        let path = header(":path").unwrap_or_default();
        let path = path.split('?').next().unwrap_or("");
        match (method.as_str(), path) {
            ("GET", "/ready") => match loaded() {
                Some((generation, digest, _)) => respond(
                    200,
                    &serde_json::json!({"ready": true, "generation": generation, "digest": digest, "build": crate::build_id()}).to_string(),
                ),
                None => respond(503, r#"{"ready":false,"error":"no routing table loaded"}"#),
            },
            ("GET", "/v1/routes") => match loaded() {
                Some((generation, digest, routes)) => respond(
                    200,
                    &serde_json::json!({"generation": generation, "digest": digest, "routes": routes, "build": crate::build_id()})
                        .to_string(),
                ),
                None => respond(
                    200,
                    &serde_json::json!({"generation": 0, "digest": null, "routes": 0, "build": crate::build_id()})
                        .to_string(),
                ),
            },
            ("PUT", "/v1/routes") => {
                if let Err(denied) = self.authorize() {
                    if end_of_stream {
                        return self.deny(denied);
                    }
                    self.denied = Some(denied);
                    self.awaiting_push_body = true;
                    return Action::Continue;
                }
                if end_of_stream {
                    return self.reject(400, "empty body: expected a routing table document");
                }
                if let Some(len) = header("content-length").and_then(|v| v.parse::<usize>().ok())
                    && len > MAX_DOCUMENT_BYTES {
                        return self.reject(
                            413,
                            &format!("{len} bytes is over the limit of {MAX_DOCUMENT_BYTES} bytes"),
                        );
                    }
                self.awaiting_push_body = true;
                Action::Continue
            }
            (_, "/ready") | (_, "/v1/routes") => error(405, "method not allowed"),
            _ => error(404, "not found: use GET /ready, GET /v1/routes or PUT /v1/routes"),
        }
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if !self.awaiting_push_body {
            return Action::Continue;
        }
        if body_size > MAX_DOCUMENT_BYTES {
            self.awaiting_push_body = false;
            if let Some(denied) = self.denied {
                return self.deny(denied);
            }
            return self.reject(
                413,
                &format!("body is over the limit of {MAX_DOCUMENT_BYTES} bytes"),
            );
        }
        if !end_of_stream {
            return Action::Pause;
        }
        self.awaiting_push_body = false;
        if let Some(denied) = self.denied {
            return self.deny(denied);
        }
        match hostcalls::get_buffer(BufferType::HttpRequestBody, 0, body_size) {
            Ok(Some(body)) => self.push(&body),
            Ok(None) => self.reject(400, "empty body: expected a routing table document"),
            Err(e) => self.reject(500, &format!("cannot read the body: {e:?}")),
        }
    }
}
