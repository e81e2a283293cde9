//! The table API: `PUT /v1/routes`, `GET /v1/routes`, `PUT
//! /v1/routes/expected`, `GET /ready`; on the readiness listener `GET /ready`
//! alone.
//!
//! Every write is authorised from the request headers alone, before Envoy
//! buffers any body byte: a request without a valid token is answered at
//! once (401/403, JSON) and Envoy closes the connection after the answer,
//! since the request was not read to its end.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;

use oooi_routes::{
    Expected, MAX_DOCUMENT_BYTES, Readiness, RouteTable, Upstream, compact, generation_is_newer,
};
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::{Action, BufferType, LogLevel, MapType, Status};

use crate::{EXPECTED_KEY, GENERATION_KEY, TABLE_KEY, cache, log, metrics};

/// Largest body of `PUT /v1/routes/expected`.
const MAX_EXPECTED_BYTES: usize = 1024;

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

/// What an authorised request's body is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Awaiting {
    Nothing,
    /// `PUT /v1/routes`: a routing table.
    Table,
    /// `PUT /v1/routes/expected`: the announced table.
    Expected,
}

pub struct ApiRequest {
    config: Option<Rc<ApiConfig>>,
    /// On the readiness listener: `GET /ready` and nothing else.
    ready_only: bool,
    awaiting: Awaiting,
}

impl ApiRequest {
    pub fn new(config: Option<Rc<ApiConfig>>, ready_only: bool) -> Self {
        ApiRequest {
            config,
            ready_only,
            awaiting: Awaiting::Nothing,
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

/// The table the controller announced last, if any.
fn expected() -> Option<Expected> {
    match hostcalls::get_shared_data(EXPECTED_KEY) {
        Ok((Some(bytes), _)) => Expected::decode(&bytes),
        _ => None,
    }
}

/// The replica's verdict, with what it holds and what was announced.
fn readiness() -> (Readiness, Option<(u64, String, usize)>, Option<Expected>) {
    let table = loaded();
    let expected = expected();
    let verdict = Readiness::of(
        table.as_ref().map(|(g, d, _)| (*g, d.as_str())),
        expected.as_ref(),
    );
    (verdict, table, expected)
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

    /// `PUT /v1/routes/expected`: records the table the controller holds
    /// current, so that a replica that did not take it reports not ready.
    fn announce(&self, body: &[u8]) -> Action {
        let announced = match Expected::from_json(body) {
            Ok(e) => e,
            Err(e) => return self.reject(400, &e),
        };
        if let Err(e) = hostcalls::set_shared_data(EXPECTED_KEY, Some(&announced.encode()), None) {
            return self.reject(500, &format!("cannot store the expected table: {e:?}"));
        }
        let (verdict, table, _) = readiness();
        log(
            LogLevel::Info,
            &format!(
                "expected table generation={} digest={} readiness={}",
                announced.generation,
                announced.digest.as_deref().unwrap_or("-"),
                verdict.reason()
            ),
        );
        let body = serde_json::json!({
            "expected": announced,
            "generation": table.as_ref().map_or(0, |t| t.0),
            "ready": verdict.is_ready(),
            "reason": verdict.reason(),
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

impl ApiRequest {
    /// A write (`PUT`): authorised from the headers alone, answered at once
    /// when refused, before any body byte is buffered. Otherwise the body
    /// is awaited (Envoy's buffer filter hands it over whole).
    fn write(&mut self, what: Awaiting, limit: usize, end_of_stream: bool) -> Action {
        if let Err(denied) = self.authorize() {
            return self.deny(denied);
        }
        if end_of_stream {
            return self.reject(400, "empty body: expected a JSON document");
        }
        if let Some(len) = header("content-length").and_then(|v| v.parse::<usize>().ok())
            && len > limit
        {
            return self.reject(
                413,
                &format!("{len} bytes is over the limit of {limit} bytes"),
            );
        }
        self.awaiting = what;
        Action::Continue
    }
}

impl HttpContext for ApiRequest {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let method = header(":method").unwrap_or_default();
        let path = header(":path").unwrap_or_default();
        let path = path.split('?').next().unwrap_or("");
        if self.ready_only && path != "/ready" {
            return error(404, "not found: this listener answers GET /ready only");
        }
        match (method.as_str(), path) {
            ("GET", "/ready") => match readiness() {
                (verdict, Some((generation, digest, _)), expected) if verdict.is_ready() => respond(
                    200,
                    &serde_json::json!({"ready": true, "generation": generation, "digest": digest, "expected": expected, "build": crate::build_id()}).to_string(),
                ),
                (verdict, table, expected) => respond(
                    503,
                    &serde_json::json!({"ready": false, "reason": verdict.reason(), "error": verdict.to_string(), "generation": table.map_or(0, |t| t.0), "expected": expected}).to_string(),
                ),
            },
            ("GET", "/v1/routes") => {
                let (verdict, table, expected) = readiness();
                let body = match table {
                    Some((generation, digest, routes)) => serde_json::json!({"generation": generation, "digest": digest, "routes": routes, "expected": expected, "ready": verdict.is_ready(), "build": crate::build_id()}),
                    None => serde_json::json!({"generation": 0, "digest": null, "routes": 0, "expected": expected, "ready": false, "build": crate::build_id()}),
                };
                respond(200, &body.to_string())
            }
            ("PUT", "/v1/routes") => self.write(Awaiting::Table, MAX_DOCUMENT_BYTES, end_of_stream),
            ("PUT", "/v1/routes/expected") => {
                self.write(Awaiting::Expected, MAX_EXPECTED_BYTES, end_of_stream)
            }
            (_, "/ready") | (_, "/v1/routes") | (_, "/v1/routes/expected") => {
                error(405, "method not allowed")
            }
            _ => error(
                404,
                "not found: use GET /ready, GET /v1/routes, PUT /v1/routes or PUT /v1/routes/expected",
            ),
        }
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        let limit = match self.awaiting {
            Awaiting::Nothing => return Action::Continue,
            Awaiting::Table => MAX_DOCUMENT_BYTES,
            Awaiting::Expected => MAX_EXPECTED_BYTES,
        };
        if body_size > limit {
            self.awaiting = Awaiting::Nothing;
            return self.reject(413, &format!("body is over the limit of {limit} bytes"));
        }
        if !end_of_stream {
            return Action::Pause;
        }
        let what = std::mem::replace(&mut self.awaiting, Awaiting::Nothing);
        match hostcalls::get_buffer(BufferType::HttpRequestBody, 0, body_size) {
            Ok(Some(body)) if what == Awaiting::Table => self.push(&body),
            Ok(Some(body)) => self.announce(&body),
            Ok(None) => self.reject(400, "empty body: expected a JSON document"),
            Err(e) => self.reject(500, &format!("cannot read the body: {e:?}")),
        }
    }
}
