//! The per-connection decision, on TLS listeners (by SNI or source address,
//! at connection start) and on plain-HTTP listeners (by the Host header of
//! the first request).

use std::cell::{Cell, RefCell};
use std::net::{IpAddr, SocketAddr};
use std::time::UNIX_EPOCH;

use oooi_routes::{Decision, MatchKind, Refusal};
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, StreamContext};
use proxy_wasm::types::{Action, BufferType, LogLevel};

use crate::cache::Compiled;
use crate::head::{self, Head, HeadRefusal};
use crate::metrics::{self, Metric};
use crate::{cache, log};

/// How a listener decides.
#[derive(Debug, Clone, Copy)]
pub enum Mode {
    /// TLS passthrough: SNI (after tls_inspector) or source, at connection start.
    Tls,
    /// Plain HTTP: the Host header of the first request head.
    Http {
        max_head_bytes: usize,
        head_timeout_ms: u64,
    },
    /// A TLS listener's chain for everything that is not TLS: refuse all.
    NotTls,
}

pub struct Connection {
    id: u32,
    port: Option<u16>,
    mode: Mode,
    state: State,
}

/// Where a plain-HTTP connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for the request head.
    Reading,
    Forwarded,
    Refused,
}

impl Connection {
    pub fn new(id: u32, port: Option<u16>, mode: Mode) -> Self {
        Connection {
            id,
            port,
            mode,
            state: State::Reading,
        }
    }
}

impl Context for Connection {}

impl Drop for Connection {
    fn drop(&mut self) {
        if matches!(self.mode, Mode::Http { .. }) && self.state == State::Reading {
            unregister(self.id);
        }
    }
}

fn property(path: Vec<&str>) -> Option<Vec<u8>> {
    hostcalls::get_property(path).ok().flatten()
}

thread_local! {
    /// Whether debug logs are on, refreshed on the tick rather than asked of
    /// the host on every connection.
    static DEBUG: Cell<bool> = const { Cell::new(false) };
    /// Plain-HTTP connections still waiting for their head on this worker:
    /// (context id, deadline in ms since the epoch). Short: a head usually
    /// arrives in the first data chunk.
    static PENDING: RefCell<Vec<(u32, u64)>> = const { RefCell::new(Vec::new()) };
}

/// Re-reads the host's log level (from the root context's tick).
pub fn refresh_log_level() {
    let debug = matches!(
        hostcalls::get_log_level(),
        Ok(LogLevel::Trace) | Ok(LogLevel::Debug)
    );
    DEBUG.with(|d| d.set(debug));
}

fn debug_enabled() -> bool {
    DEBUG.with(Cell::get)
}

fn now_ms() -> u64 {
    hostcalls::get_current_time()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as u64)
}

fn unregister(id: u32) {
    PENDING.with(|p| p.borrow_mut().retain(|(c, _)| *c != id));
}

/// Closes the plain-HTTP connections of this worker whose head did not
/// arrive in time (from the root context's tick).
pub fn expire_heads() {
    if PENDING.with(|p| p.borrow().is_empty()) {
        return;
    }
    let now = now_ms();
    let expired: Vec<u32> = PENDING.with(|p| {
        let mut p = p.borrow_mut();
        let expired = p
            .iter()
            .filter(|(_, d)| *d <= now)
            .map(|(c, _)| *c)
            .collect();
        p.retain(|(_, d)| *d > now);
        expired
    });
    for id in expired {
        if hostcalls::set_effective_context(id).is_ok() {
            metrics::inc(metrics::refuse_head(HeadRefusal::Timeout));
            log(
                LogLevel::Info,
                &format!(
                    "refuse reason=head_timeout host=\"\" source={}",
                    Plain(source_address())
                ),
            );
            let _ = hostcalls::close_downstream();
        }
    }
}

/// An optional value as a log field: the value itself, or `-` when it is
/// unknown (never `Some(…)`).
struct Plain<T>(Option<T>);

impl<T: std::fmt::Display> std::fmt::Display for Plain<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(v) => v.fmt(f),
            None => f.write_str("-"),
        }
    }
}

fn source_address() -> Option<IpAddr> {
    let bytes = property(vec!["source", "address"])?;
    let s = std::str::from_utf8(&bytes).ok()?;
    s.parse::<SocketAddr>()
        .map(|a| a.ip())
        .or_else(|_| s.parse::<IpAddr>())
        .ok()
}

/// Names the upstream through `set_envoy_filter_state`, with the calls
/// encoded when the table was compiled, for a connection on `port`. False
/// (and counted) if one failed.
fn select(table: &Compiled, upstream: usize, port: u16) -> bool {
    let calls = table
        .calls
        .get(upstream)
        .map_or(&[][..], |c| c.for_port(port));
    for call in calls {
        if let Err(e) = hostcalls::call_foreign_function("set_envoy_filter_state", Some(call)) {
            metrics::inc(metrics::ROUTE_ERRORS);
            log(
                LogLevel::Error,
                &format!("set_envoy_filter_state failed: {e:?}"),
            );
            return false;
        }
    }
    true
}

/// What [`Connection::route`] did.
enum Routed {
    /// Upstream selected and counted.
    Forwarded,
    /// The decision named an upstream Envoy would not take.
    NotSelected,
    /// Refused, with the source address if the decision fetched it.
    Refused(Refusal, Option<Option<IpAddr>>),
}

/// Refuses the connection: closes it and stops the filter chain, so
/// tcp_proxy never connects anywhere.
fn close() -> Action {
    let _ = hostcalls::close_downstream();
    Action::Pause
}

impl Connection {
    fn on_tls_connection(&mut self) -> Action {
        // The server name exactly as the ClientHello carried it: bytes that
        // are not UTF-8 are an invalid name, never "no SNI".
        let sni = property(vec!["connection", "requested_server_name"]).unwrap_or_default();
        let (refusal, source) = match self.route("sni", &sni, metrics::forward) {
            Routed::Forwarded => return Action::Continue,
            // The upstream could not be set: close rather than fall through
            // to whatever tcp_proxy would pick.
            Routed::NotSelected => return close(),
            Routed::Refused(r, source) => (r, source),
        };
        metrics::refuse(refusal);
        let source = source.unwrap_or_else(source_address);
        log(
            LogLevel::Info,
            &format!(
                "refuse reason={} sni=\"{}\" source={} port={}",
                refusal.as_str(),
                sni.escape_ascii(),
                Plain(source),
                Plain(self.port)
            ),
        );
        close()
    }

    /// A connection on a TLS listener whose transport protocol is not TLS.
    fn on_not_tls_connection(&mut self) -> Action {
        metrics::inc(metrics::REFUSE_NOT_TLS);
        log(
            LogLevel::Info,
            &format!(
                "refuse reason=not_tls source={} port={}",
                Plain(source_address()),
                Plain(self.port)
            ),
        );
        close()
    }

    /// Decides `name` (SNI or HTTP host as bytes, empty when there is none;
    /// `what` names it in the debug log) on this connection's port and
    /// selects the upstream; a forward is counted under `forward_metric`.
    /// The source address is fetched only when the decision needs it: most
    /// connections are decided by name alone.
    fn route(&self, what: &str, name: &[u8], forward_metric: fn(MatchKind) -> Metric) -> Routed {
        let mut source: Option<Option<IpAddr>> = None;
        let (port, table) = match (self.port, cache::current()) {
            (None, _) => return Routed::Refused(Refusal::UnknownPort, None),
            (_, None) => return Routed::Refused(Refusal::NoTable, None),
            (Some(port), Some(table)) => (port, table),
        };
        match table
            .router
            .decide_raw_with(port, name, || *source.get_or_insert_with(source_address))
        {
            Decision::Forward {
                upstream,
                kind,
                route,
            } => {
                if !select(&table, upstream, port) {
                    return Routed::NotSelected;
                }
                metrics::inc(forward_metric(kind));
                if debug_enabled() {
                    log(
                        LogLevel::Debug,
                        &format!(
                            "forward {what}=\"{}\" source={} port={port} match={} upstream={} generation={}",
                            name.escape_ascii(),
                            Plain(source.flatten()),
                            kind.as_str(),
                            route.upstream,
                            table.router.generation()
                        ),
                    );
                }
                Routed::Forwarded
            }
            Decision::Refuse(r) => Routed::Refused(r, source),
        }
    }

    fn refuse_http(&mut self, reason: &str, metric: Option<Metric>, host: &str) -> Action {
        self.finish_head(State::Refused);
        if let Some(m) = metric {
            metrics::inc(m);
        }
        log(
            LogLevel::Info,
            &format!(
                "refuse reason={reason} host={host:?} source={} port={}",
                Plain(source_address()),
                Plain(self.port)
            ),
        );
        close()
    }

    fn finish_head(&mut self, state: State) {
        self.state = state;
        unregister(self.id);
    }

    fn on_http_head(&mut self, max_head_bytes: usize, data_size: usize, closed: bool) -> Action {
        let len = data_size.min(max_head_bytes);
        let buf = match hostcalls::get_buffer(BufferType::DownstreamData, 0, len) {
            Ok(b) => b.unwrap_or_default(),
            Err(e) => {
                metrics::inc(metrics::ROUTE_ERRORS);
                log(
                    LogLevel::Error,
                    &format!("cannot read downstream data: {e:?}"),
                );
                self.finish_head(State::Refused);
                return close();
            }
        };
        let host = match head::read(&buf, max_head_bytes, closed) {
            Head::Partial => return Action::Pause,
            Head::Refuse(r) => {
                return self.refuse_http(r.as_str(), Some(metrics::refuse_head(r)), "");
            }
            Head::Host(h) => h,
        };
        let refusal = match self.route("host", host.as_bytes(), metrics::forward_host) {
            // The filter chain goes on: tcp_proxy connects now and forwards
            // the buffered bytes, head included.
            Routed::Forwarded => {
                self.finish_head(State::Forwarded);
                return Action::Continue;
            }
            Routed::NotSelected => {
                self.finish_head(State::Refused);
                return close();
            }
            Routed::Refused(r, _) => r,
        };
        let (reason, metric) = if refusal == Refusal::UnknownSni {
            ("unknown_host", Some(metrics::REFUSE_UNKNOWN_HOST))
        } else {
            metrics::refuse(refusal);
            (refusal.as_str(), None)
        };
        self.refuse_http(reason, metric, &host)
    }
}

impl StreamContext for Connection {
    fn on_new_connection(&mut self) -> Action {
        metrics::inc_build_connections();
        match self.mode {
            Mode::Tls => self.on_tls_connection(),
            Mode::NotTls => self.on_not_tls_connection(),
            Mode::Http {
                head_timeout_ms, ..
            } => {
                // Hold the filter chain: tcp_proxy (later in the chain) must
                // not connect before the head has named the host.
                let deadline = now_ms().saturating_add(head_timeout_ms);
                PENDING.with(|p| p.borrow_mut().push((self.id, deadline)));
                Action::Pause
            }
        }
    }

    fn on_downstream_data(&mut self, data_size: usize, end_of_stream: bool) -> Action {
        match (self.mode, self.state) {
            (Mode::Tls, _) | (_, State::Forwarded) => Action::Continue,
            (Mode::NotTls, _) => Action::Pause,
            (Mode::Http { max_head_bytes, .. }, State::Reading) => {
                self.on_http_head(max_head_bytes, data_size, end_of_stream)
            }
            // Closing: nothing may reach tcp_proxy.
            (_, State::Refused) => Action::Pause,
        }
    }
}
