//! The inventory's HTTP listener: read-only `GET` routes under
//! [`oooi_dhcp_inventory::API_PREFIX`], each needing `Authorization: Bearer
//! <token>` (compared in constant time; 401 otherwise, counted in
//! `oooi_dhcp_inventory_unauthorized_total` and logged at most every 10 s),
//! served within [`oooi_serve::Limits::SMALL`].
//!
//! The token is read from a file (a mounted Secret) at start, where it must
//! hold at least 16 characters, and read again when the file changes
//! (checked on each request by its identity and modification time, so a
//! Kubernetes Secret update, which swaps a symlink, is followed). A new
//! file that does not read or is too short is logged and the last good
//! token stays in force.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use axum::extract::{ConnectInfo, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use oooi_dhcp_inventory::{
    API_PREFIX, LeasePage, LeaseQuery, LeaseState, PoolReport, Why, canonical_hex, canonical_mac,
};

use super::{Answer, Inventory, Question};
use crate::config::Mac;
use crate::metrics::metrics;

/// Shortest token accepted.
pub const MIN_TOKEN: usize = 16;
/// How long a request waits for the decision loop.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// The token file and the token last read from it.
pub struct Token {
    path: PathBuf,
    current: Mutex<(Option<FileId>, String)>,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("path", &self.path)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// What tells one version of the file from another.
type FileId = (u64, u64, Option<SystemTime>, u64);

fn file_id(path: &Path) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.modified().ok(), m.len()))
}

fn read_token(path: &Path) -> Result<String, String> {
    let t = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?
        .trim()
        .to_string();
    if t.len() < MIN_TOKEN {
        return Err(format!(
            "{} holds a token of {} characters; at least {MIN_TOKEN} are needed",
            path.display(),
            t.len()
        ));
    }
    Ok(t)
}

impl Token {
    /// Reads the token file; an error names the file and what is wrong.
    pub fn load(path: &Path) -> Result<Token, String> {
        let id = file_id(path);
        let t = read_token(path)?;
        Ok(Token {
            path: path.to_path_buf(),
            current: Mutex::new((id, t)),
        })
    }

    /// Whether `header` (an `Authorization` value) carries the token, read
    /// again first when the file changed.
    pub fn authorized(&self, header: Option<&str>) -> bool {
        let Ok(mut cur) = self.current.lock() else {
            return false;
        };
        let id = file_id(&self.path);
        if id.is_some() && id != cur.0 {
            match read_token(&self.path) {
                Ok(t) => {
                    tracing::info!(path = %self.path.display(), "inventory API: token file changed, new token in force");
                    *cur = (id, t);
                }
                Err(e) => {
                    // Not retried until the file changes again.
                    cur.0 = id;
                    tracing::warn!(error = %e, "inventory API: new token file refused, the last good token stays in force");
                }
            }
        }
        let Some(h) = header else { return false };
        let Some((scheme, token)) = h.trim().split_once(' ') else {
            return false;
        };
        scheme.eq_ignore_ascii_case("bearer")
            && constant_time_eq(token.trim().as_bytes(), cur.1.as_bytes())
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Why a query string is refused.
fn bad(msg: String) -> Response {
    (StatusCode::BAD_REQUEST, format!("{msg}\n")).into_response()
}

/// Parses `/leases`' query string into a [`LeaseQuery`], naming the bad
/// parameter and value.
pub fn parse_query(raw: Option<&str>) -> Result<LeaseQuery, String> {
    let mut q = LeaseQuery::default();
    for (k, v) in form_pairs(raw.unwrap_or(""))? {
        let ip = |what: &str| {
            v.parse()
                .map_err(|_| format!("{what}={v:?} is not an IP address"))
        };
        match k.as_str() {
            "ip" => q.ip = Some(ip("ip")?),
            "after" => q.after = Some(ip("after")?),
            "mac" => {
                canonical_mac(&v).ok_or_else(|| {
                    format!("mac={v:?} is not a hardware address (aa:bb:cc:dd:ee:ff)")
                })?;
                q.mac = Some(v);
            }
            "client_id" => {
                canonical_hex(&v).ok_or_else(|| format!("client_id={v:?} is not hex bytes"))?;
                q.client_id = Some(v);
            }
            "hostname" => q.hostname = Some(v),
            "state" => {
                q.state = Some(LeaseState::parse(&v).ok_or_else(|| {
                    let names: Vec<&str> = LeaseState::ALL.iter().map(|s| s.as_str()).collect();
                    format!("state={v:?} is not one of {}", names.join(", "))
                })?)
            }
            "limit" => {
                q.limit = Some(
                    v.parse()
                        .map_err(|_| format!("limit={v:?} is not a whole number"))?,
                )
            }
            other => return Err(format!("unknown parameter {other:?}")),
        }
    }
    Ok(q)
}

/// `k=v&k=v`, percent-decoded (`+` is a space).
fn form_pairs(raw: &str) -> Result<Vec<(String, String)>, String> {
    raw.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            Ok((decode(k)?, decode(v)?))
        })
        .collect()
}

fn decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = b
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| format!("bad percent-encoding in {s:?}"))?;
                out.push(hex);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| format!("{s:?} is not UTF-8"))
}

struct Ctx {
    inventory: Arc<Inventory>,
    token: Token,
}

/// The refusal when the request lacks the token (counted; logged with the
/// caller's address, at most every 10 s).
fn auth(ctx: &Ctx, h: &HeaderMap, from: Option<SocketAddr>) -> Result<(), Box<Response>> {
    static LOGGED: Mutex<Option<Instant>> = Mutex::new(None);
    let value = h.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    if ctx.token.authorized(value) {
        return Ok(());
    }
    metrics().inventory_unauthorized.inc();
    if let Ok(mut last) = LOGGED.lock()
        && last.is_none_or(|t| t.elapsed() >= Duration::from_secs(10))
    {
        *last = Some(Instant::now());
        tracing::warn!(
            from = %from.map_or_else(|| "unknown".to_string(), |a| a.to_string()),
            token_sent = value.is_some(),
            "inventory API: request with a wrong or missing token refused"
        );
    }
    Err(Box::new(
        (StatusCode::UNAUTHORIZED, "bad or missing token\n").into_response(),
    ))
}

async fn ask(ctx: &Arc<Ctx>, q: Question) -> Result<Answer, Response> {
    let inv = ctx.inventory.clone();
    match tokio::task::spawn_blocking(move || inv.ask(q, ASK_TIMEOUT)).await {
        Ok(Some(a)) => Ok(a),
        _ => Err((
            StatusCode::SERVICE_UNAVAILABLE,
            "the DHCP loop did not answer\n",
        )
            .into_response()),
    }
}

type From = Option<axum::Extension<ConnectInfo<SocketAddr>>>;

async fn leases(
    State(ctx): State<Arc<Ctx>>,
    from: From,
    h: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    if let Err(r) = auth(&ctx, &h, from.map(|c| c.0.0)) {
        return *r;
    }
    let q = match parse_query(raw.as_deref()) {
        Ok(q) => q,
        Err(e) => return bad(e),
    };
    match ask(&ctx, Question::Leases(q)).await {
        Ok(Answer::Leases(server, leases, next)) => axum::Json(LeasePage {
            server,
            leases,
            next,
        })
        .into_response(),
        Ok(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        Err(r) => r,
    }
}

async fn pools(State(ctx): State<Arc<Ctx>>, from: From, h: HeaderMap) -> Response {
    if let Err(r) = auth(&ctx, &h, from.map(|c| c.0.0)) {
        return *r;
    }
    match ask(&ctx, Question::Pools).await {
        Ok(Answer::Pools(server, pools)) => {
            let refusals = ctx
                .inventory
                .refusals
                .lock()
                .map(|r| r.counts())
                .unwrap_or_default();
            axum::Json(PoolReport {
                server,
                pools,
                refusals,
            })
            .into_response()
        }
        Ok(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        Err(r) => r,
    }
}

async fn why(
    State(ctx): State<Arc<Ctx>>,
    from: From,
    h: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    if let Err(r) = auth(&ctx, &h, from.map(|c| c.0.0)) {
        return *r;
    }
    let pairs = match form_pairs(raw.as_deref().unwrap_or("")) {
        Ok(p) => p,
        Err(e) => return bad(e),
    };
    let mut mac = None;
    for (k, v) in pairs {
        if k != "mac" {
            return bad(format!("unknown parameter {k:?} (only mac)"));
        }
        mac = Some(v);
    }
    let Some(text) = mac else {
        return bad("mac is required".to_string());
    };
    let Some(canonical) = canonical_mac(&text) else {
        return bad(format!(
            "mac={text:?} is not a hardware address (aa:bb:cc:dd:ee:ff)"
        ));
    };
    let Some(m) = Mac::parse(&canonical) else {
        return bad(format!("mac={text:?} is not a hardware address"));
    };
    let events = ctx
        .inventory
        .refusals
        .lock()
        .map(|r| r.events(m))
        .unwrap_or_default();
    match ask(&ctx, Question::Client(m)).await {
        Ok(Answer::Client(server, lease)) => axum::Json(Why {
            server,
            mac: canonical,
            lease,
            events,
        })
        .into_response(),
        Ok(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        Err(r) => r,
    }
}

/// The inventory API's routes.
pub fn router(inventory: Arc<Inventory>, token: Token) -> axum::Router {
    let ctx = Arc::new(Ctx { inventory, token });
    axum::Router::new()
        .route(&format!("{API_PREFIX}/leases"), get(leases))
        .route(&format!("{API_PREFIX}/pools"), get(pools))
        .route(&format!("{API_PREFIX}/why"), get(why))
        .with_state(ctx)
}

/// Serves the inventory API on every address of `addrs` (one listener
/// each, all bound before any is served, so a bad address fails the start),
/// within [`oooi_serve::Limits::SMALL`].
pub async fn serve(
    inventory: Arc<Inventory>,
    token_file: &Path,
    addrs: &[SocketAddr],
) -> anyhow::Result<()> {
    let mut listeners = Vec::new();
    for a in addrs {
        let l = tokio::net::TcpListener::bind(a)
            .await
            .map_err(|e| anyhow::anyhow!("inventory API: cannot listen on {a}: {e}"))?;
        tracing::info!(addr = %a, "serving the lease inventory API");
        listeners.push(l);
    }
    let mut tasks = tokio::task::JoinSet::new();
    for l in listeners {
        let token = Token::load(token_file).map_err(|e| anyhow::anyhow!("inventory API: {e}"))?;
        let app = router(inventory.clone(), token);
        tasks.spawn(async move { oooi_serve::serve(l, app, oooi_serve::Limits::SMALL).await });
    }
    match tasks.join_next().await {
        Some(Ok(Err(e))) => Err(e.into()),
        Some(Err(e)) => Err(e.into()),
        _ => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_parse_or_name_the_bad_parameter() {
        let q = parse_query(Some(
            "ip=192.0.2.10&mac=52%3A54%3A00%3A00%3A00%3A01&state=held_back&limit=5&hostname=a+b",
        ))
        .unwrap();
        assert_eq!(q.ip, Some("192.0.2.10".parse().unwrap()));
        assert_eq!(q.mac.as_deref(), Some("52:54:00:00:00:01"));
        assert_eq!(q.state, Some(LeaseState::HeldBack));
        assert_eq!(q.limit, Some(5));
        assert_eq!(q.hostname.as_deref(), Some("a b"));
        assert_eq!(parse_query(None).unwrap(), LeaseQuery::default());
        for (bad, word) in [
            ("ip=192.0.2.999", "ip="),
            ("mac=52:54", "mac="),
            ("state=bound", "state="),
            ("limit=-1", "limit="),
            ("client_id=xyz", "client_id="),
            ("colour=red", "colour"),
            ("ip=%zz", "percent"),
        ] {
            let e = parse_query(Some(bad)).unwrap_err();
            assert!(e.contains(word), "{bad}: {e}");
        }
    }

    #[test]
    fn the_token_is_checked_whole_and_followed_when_its_file_changes() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("token");
        std::fs::write(&p, "0123456789abcdef\n").unwrap();
        let t = Token::load(&p).unwrap();
        assert!(t.authorized(Some("Bearer 0123456789abcdef")));
        assert!(t.authorized(Some("bearer 0123456789abcdef")));
        assert!(!t.authorized(Some("Bearer 0123456789abcde")));
        assert!(!t.authorized(Some("0123456789abcdef")));
        assert!(!t.authorized(None));
        // A Secret update swaps the file: the new token is in force.
        let p2 = d.path().join("token.new");
        std::fs::write(&p2, "fedcba9876543210").unwrap();
        std::fs::rename(&p2, &p).unwrap();
        assert!(t.authorized(Some("Bearer fedcba9876543210")));
        assert!(!t.authorized(Some("Bearer 0123456789abcdef")));
        // A short one is refused and the last good one kept.
        std::fs::write(&p2, "short").unwrap();
        std::fs::rename(&p2, &p).unwrap();
        assert!(t.authorized(Some("Bearer fedcba9876543210")));
        std::fs::write(&p, "short").unwrap();
        assert!(Token::load(&p).unwrap_err().contains("at least 16"));
        assert!(Token::load(&d.path().join("none")).is_err());
    }
}
