//! The per-connection decision.

use std::cell::Cell;
use std::net::{IpAddr, SocketAddr};

use oooi_routes::{Decision, MatchKind, Refusal};
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, StreamContext};
use proxy_wasm::types::{Action, LogLevel};

use crate::{cache, log, metrics};

pub struct Connection {
    port: Option<u16>,
}

impl Connection {
    pub fn new(port: Option<u16>) -> Self {
        Connection { port }
    }
}

impl Context for Connection {}

fn property(path: Vec<&str>) -> Option<Vec<u8>> {
    hostcalls::get_property(path).ok().flatten()
}

fn forward_metric(kind: MatchKind) -> &'static str {
    match kind {
        MatchKind::ExactSni => metrics::FORWARD[0],
        MatchKind::WildcardSni => metrics::FORWARD[1],
        MatchKind::SourceNoSni => metrics::FORWARD[2],
        MatchKind::SourceAlias => metrics::FORWARD[3],
    }
}

fn refuse_metric(r: Refusal) -> &'static str {
    match r {
        Refusal::NoTable => metrics::REFUSE[0],
        Refusal::UnknownPort => metrics::REFUSE[1],
        Refusal::UnknownSni => metrics::REFUSE[2],
        Refusal::UnknownSource => metrics::REFUSE[3],
        Refusal::AliasFromUnknownSource => metrics::REFUSE[4],
        Refusal::NoSourceAddress => metrics::REFUSE[5],
    }
}

thread_local! {
    /// Whether debug logs are on, refreshed on the tick rather than asked of
    /// the host on every connection.
    static DEBUG: Cell<bool> = const { Cell::new(false) };
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

fn source_address() -> Option<IpAddr> {
    let bytes = property(vec!["source", "address"])?;
    let s = std::str::from_utf8(&bytes).ok()?;
    s.parse::<SocketAddr>()
        .map(|a| a.ip())
        .or_else(|_| s.parse::<IpAddr>())
        .ok()
}

impl StreamContext for Connection {
    fn on_new_connection(&mut self) -> Action {
        metrics::inc_build_connections();
        let sni_bytes = property(vec!["connection", "requested_server_name"]);
        let sni = sni_bytes
            .as_deref()
            .and_then(|b| std::str::from_utf8(b).ok());
        // The source is fetched only when the decision needs it (or for the
        // refusal log): most connections are decided by SNI alone.
        let mut source: Option<Option<IpAddr>> = None;
        let decision: Result<(), Refusal> = match (self.port, cache::current()) {
            (None, _) => Err(Refusal::UnknownPort),
            (_, None) => Err(Refusal::NoTable),
            (Some(port), Some(table)) => match table
                .router
                .decide_with(port, sni, || *source.get_or_insert_with(source_address))
            {
                Decision::Forward {
                    upstream,
                    kind,
                    route,
                } => {
                    let mut ok = true;
                    for call in table.calls.get(upstream).map(Vec::as_slice).unwrap_or(&[]) {
                        if let Err(e) =
                            hostcalls::call_foreign_function("set_envoy_filter_state", Some(call))
                        {
                            metrics::inc(metrics::ROUTE_ERRORS);
                            log(
                                LogLevel::Error,
                                &format!("set_envoy_filter_state failed: {e:?}"),
                            );
                            ok = false;
                            break;
                        }
                    }
                    if ok {
                        metrics::inc(forward_metric(kind));
                        if debug_enabled() {
                            log(
                                LogLevel::Debug,
                                &format!(
                                    "forward sni={:?} source={:?} port={port} match={} upstream={} generation={}",
                                    sni.unwrap_or(""),
                                    source.flatten(),
                                    kind.as_str(),
                                    route.upstream,
                                    table.router.generation()
                                ),
                            );
                        }
                        return Action::Continue;
                    }
                    // The upstream could not be set: close rather than fall
                    // through to whatever tcp_proxy would pick.
                    let _ = hostcalls::close_downstream();
                    return Action::Pause;
                }
                Decision::Refuse(r) => Err(r),
            },
        };
        let Err(refusal) = decision else {
            return Action::Continue;
        };
        metrics::inc(refuse_metric(refusal));
        let source = source.unwrap_or_else(source_address);
        log(
            LogLevel::Info,
            &format!(
                "refuse reason={} sni={:?} source={:?} port={:?}",
                refusal.as_str(),
                sni.unwrap_or(""),
                source,
                self.port
            ),
        );
        let _ = hostcalls::close_downstream();
        Action::Pause
    }
}
