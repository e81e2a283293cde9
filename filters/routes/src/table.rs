//! The routing-table document: model, validation and digest.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;

use oooi_vocabulary::{Cidr, is_kubernetes_alias, normalize_name};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Largest accepted document, in bytes. Envoy's push listener buffers the whole
/// body, and its limits are rendered from this constant.
pub const MAX_DOCUMENT_BYTES: usize = 8 * 1024 * 1024;

/// Largest accepted number of routes in one document.
pub const MAX_ROUTES: usize = 50_000;

/// Largest accepted `sources` list on one route (a cluster's workers plus a
/// few networks; thousands of workers still fit).
pub const MAX_ROUTE_SOURCES: usize = 4096;

/// Highest generation a document may carry: 2^53 - 1, the largest integer
/// every JSON reader holds exactly. Generations are compared in sequence
/// space ([`generation_is_newer`]), so reaching it never locks out later
/// pushes: after it comes 1.
pub const MAX_GENERATION: u64 = (1 << 53) - 1;

/// Half the sequence space: a generation is newer than another when it lies
/// less than this far ahead of it, wrapping after [`MAX_GENERATION`].
const GENERATION_HALF: u64 = 1 << 52;

/// Whether `candidate` is newer than `loaded` (0: no table, so every valid
/// generation is newer). Generations run 1..=[`MAX_GENERATION`] and wrap, as
/// serial numbers do in RFC 1982: `candidate` is newer when it is 1 to
/// 2^52 - 1 steps ahead of `loaded`, counting from `MAX_GENERATION` to 1.
/// So from any loaded generation, even the highest, the next 2^52 - 1
/// generations are accepted.
pub fn generation_is_newer(candidate: u64, loaded: u64) -> bool {
    if !(1..=MAX_GENERATION).contains(&candidate) {
        return false;
    }
    if loaded == 0 || loaded > MAX_GENERATION {
        return true;
    }
    // Steps from `loaded` to `candidate` in the ring 1..=MAX_GENERATION.
    let ahead = if candidate >= loaded {
        candidate - loaded
    } else {
        MAX_GENERATION - loaded + candidate
    };
    (1..GENERATION_HALF).contains(&ahead)
}

/// The generation after `g`: `g + 1`, or 1 after [`MAX_GENERATION`] (and
/// for 0 or an out-of-range value).
pub fn next_generation(g: u64) -> u64 {
    if (1..MAX_GENERATION).contains(&g) {
        g + 1
    } else {
        1
    }
}

/// The newest of `generations` by [`generation_is_newer`] (0 for none):
/// what a table must be newer than to replace every one of them.
pub fn newest_generation(generations: impl IntoIterator<Item = u64>) -> u64 {
    generations.into_iter().fold(0, |newest, g| {
        if generation_is_newer(g, newest) {
            g
        } else {
            newest
        }
    })
}

/// The versioned routing document the controller pushes to every Envoy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteTable {
    /// Version, 1..=[`MAX_GENERATION`]. A push whose generation is not newer
    /// than the loaded one ([`generation_is_newer`]) is refused.
    pub generation: u64,
    /// The routes, in any order; matching does not depend on order.
    pub routes: Vec<Route>,
}

/// One routing entry: a listener port, what to match, where to send it.
///
/// On the wire the match is one of three keys: `{"port":443,"sni":"…","upstream":…}`,
/// `{"port":6443,"source":"192.0.2.10/32","upstream":…}` or
/// `{"port":443,"alias_source":"192.0.2.10/32","upstream":…}`. An `sni` route
/// may also carry `"sources":["192.0.2.10/32","198.51.100.0/24"]`, the only
/// source addresses allowed to use it ([`RouteMatch::SniFrom`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "WireRoute", into = "WireRoute")]
pub struct Route {
    /// Listener port the connection arrived on.
    pub port: u16,
    /// What the connection must carry.
    pub matches: RouteMatch,
    /// Where a matching connection goes.
    pub upstream: Upstream,
    /// Who the route belongs to (e.g. `clusters/c1`), for explanations only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// A route as written: exactly one of `sni`, `source` or `alias_source`;
/// `sources` only beside `sni`.
#[derive(Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(rename = "Route"))]
#[serde(deny_unknown_fields)]
struct WireRoute {
    /// Listener port the connection arrived on.
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = 65535)))]
    port: u16,
    /// Server name (exact, or `*.` wildcard).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sni: Option<String>,
    /// Source network the route matches by address (no SNI needed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    source: Option<Cidr>,
    /// The only source networks allowed to use an `sni` route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sources: Option<Vec<Cidr>>,
    /// Source network of a Kubernetes-service alias route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    alias_source: Option<Cidr>,
    /// Where a matching connection goes.
    upstream: Upstream,
    /// Who the route belongs to, for explanations only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner: Option<String>,
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for Route {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Route".into()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        WireRoute::json_schema(generator)
    }
}

impl TryFrom<WireRoute> for Route {
    type Error = String;
    fn try_from(w: WireRoute) -> Result<Self, String> {
        let matches = match (w.sni, w.source, w.sources, w.alias_source) {
            (Some(sni), None, None, None) => RouteMatch::Sni(sni),
            (Some(sni), None, Some(sources), None) => RouteMatch::SniFrom { sni, sources },
            (None, Some(source), None, None) => RouteMatch::Source(source),
            (None, None, None, Some(source)) => RouteMatch::AliasSource(source),
            (None, _, Some(_), _) => {
                return Err(
                    "`sources` restricts `sni` routes only; a `source` or `alias_source` route already matches by address"
                        .into(),
                );
            }
            _ => {
                return Err(
                    "a route needs exactly one of `sni`, `source` or `alias_source`".into(),
                );
            }
        };
        Ok(Route {
            port: w.port,
            matches,
            upstream: w.upstream,
            owner: w.owner,
        })
    }
}

impl From<Route> for WireRoute {
    fn from(r: Route) -> Self {
        let (sni, source, sources, alias_source) = match r.matches {
            RouteMatch::Sni(s) => (Some(s), None, None, None),
            RouteMatch::SniFrom { sni, sources } => (Some(sni), None, Some(sources), None),
            RouteMatch::Source(c) => (None, Some(c), None, None),
            RouteMatch::AliasSource(c) => (None, None, None, Some(c)),
        };
        WireRoute {
            port: r.port,
            sni,
            source,
            sources,
            alias_source,
            upstream: r.upstream,
            owner: r.owner,
        }
    }
}

/// The match half of a route.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RouteMatch {
    /// Exact SNI (`api.c1.example.com`) or a wildcard (`*.apps.c1.example.com`)
    /// matching any depth below it; the most specific match wins.
    Sni(String),
    /// Downstream source address (CIDR, or a bare address meaning /32 or /128).
    /// Applies to connections with no SNI or with a Kubernetes-service alias.
    Source(Cidr),
    /// Downstream source address, for connections whose SNI is one of the
    /// Kubernetes-service aliases ([`KUBERNETES_ALIASES`]) only: a connection
    /// without SNI does not match. It shares its key with [`RouteMatch::Source`]:
    /// one port cannot hold both for the same network.
    AliasSource(Cidr),
    /// An SNI route (exact or wildcard, matched like [`RouteMatch::Sni`])
    /// that only connections from `sources` may use. A connection with the
    /// name from any other address is refused (`source_not_allowed`): it is
    /// never tried against a less specific route.
    SniFrom {
        /// The name, as in [`RouteMatch::Sni`].
        sni: String,
        /// Allowed source networks (bare addresses mean /32 or /128); never empty.
        sources: Vec<Cidr>,
    },
}

impl RouteMatch {
    /// The SNI name of an `Sni` or `SniFrom` match.
    pub fn sni(&self) -> Option<&str> {
        match self {
            RouteMatch::Sni(n) | RouteMatch::SniFrom { sni: n, .. } => Some(n),
            RouteMatch::Source(_) | RouteMatch::AliasSource(_) => None,
        }
    }

    /// The allowed sources of an `SniFrom` match; `None` when any source may
    /// use the route.
    pub fn allowed_sources(&self) -> Option<&[Cidr]> {
        match self {
            RouteMatch::SniFrom { sources, .. } => Some(sources),
            _ => None,
        }
    }

    /// What makes two routes on one port collide: the name (restricted or
    /// not) or the source network.
    fn key(&self) -> MatchKey<'_> {
        match self {
            RouteMatch::Sni(n) | RouteMatch::SniFrom { sni: n, .. } => MatchKey::Sni(n),
            RouteMatch::Source(c) | RouteMatch::AliasSource(c) => MatchKey::Source(*c),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum MatchKey<'a> {
    Sni(&'a str),
    Source(Cidr),
}

impl fmt::Display for MatchKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MatchKey::Sni(n) => write!(f, "sni {n}"),
            MatchKey::Source(c) => write!(f, "source {c}"),
        }
    }
}

/// Sources in canonical order (IPv4 first, then by network, then prefix):
/// the order of a `sources` list does not change a route's meaning.
pub(crate) fn canonical_sources(sources: &[Cidr]) -> Vec<Cidr> {
    let mut v = sources.to_vec();
    v.sort_by_key(|c| (!c.addr().is_ipv4(), c.network_bits(), c.prefix()));
    v.dedup();
    v
}

/// Where a connection goes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Upstream {
    /// An Envoy cluster that exists in the running config.
    Cluster(String),
    /// A host (DNS name or IP literal) and port, resolved by Envoy's dynamic
    /// forward proxy.
    Address {
        /// DNS name or IP literal.
        host: String,
        /// Upstream port, 1-65535.
        #[cfg_attr(feature = "schema", schemars(range(min = 1, max = 65535)))]
        port: u16,
    },
}

impl fmt::Display for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Upstream::Cluster(name) => write!(f, "cluster {name}"),
            Upstream::Address { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            Upstream::Address { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

/// Why a document was rejected. `entry` is the index in `routes` when the
/// problem belongs to one route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableError {
    /// Index of the route in `routes`, when the problem is one route's.
    pub entry: Option<usize>,
    /// The field at fault (`generation`, `sni`, `upstream.cluster`, …).
    pub field: &'static str,
    /// What is wrong, naming the bad value.
    pub message: String,
}

impl TableError {
    fn doc(field: &'static str, message: impl Into<String>) -> Self {
        TableError {
            entry: None,
            field,
            message: message.into(),
        }
    }
    fn route(i: usize, field: &'static str, message: impl Into<String>) -> Self {
        TableError {
            entry: Some(i),
            field,
            message: message.into(),
        }
    }
}

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.entry {
            Some(i) => write!(f, "routes[{i}].{}: {}", self.field, self.message),
            None => write!(f, "{}: {}", self.field, self.message),
        }
    }
}

impl std::error::Error for TableError {}

impl RouteTable {
    /// Parses and validates a pushed JSON document. Nothing is accepted
    /// partially: any bad entry rejects the whole document.
    pub fn from_json(bytes: &[u8]) -> Result<RouteTable, TableError> {
        if bytes.len() > MAX_DOCUMENT_BYTES {
            return Err(TableError::doc(
                "document",
                format!(
                    "{} bytes is over the limit of {MAX_DOCUMENT_BYTES} bytes",
                    bytes.len()
                ),
            ));
        }
        let table: RouteTable = serde_json::from_slice(bytes).map_err(|e| locate(bytes, e))?;
        table.validate()?;
        Ok(table)
    }

    /// Serialises the table as the JSON the push API accepts.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Checks every rule of the document: generation, sizes, names, addresses,
    /// upstreams, and that no two routes share a key.
    pub fn validate(&self) -> Result<(), TableError> {
        if !(1..=MAX_GENERATION).contains(&self.generation) {
            return Err(TableError::doc(
                "generation",
                format!(
                    "{} is out of range: expected 1-{MAX_GENERATION} (0 means no table; after {MAX_GENERATION} comes 1)",
                    self.generation
                ),
            ));
        }
        if self.routes.len() > MAX_ROUTES {
            return Err(TableError::doc(
                "routes",
                format!(
                    "{} routes is over the limit of {MAX_ROUTES}",
                    self.routes.len()
                ),
            ));
        }
        let mut seen: HashMap<(u16, MatchKey<'_>), usize> =
            HashMap::with_capacity(self.routes.len());
        for (i, route) in self.routes.iter().enumerate() {
            if route.port == 0 {
                return Err(TableError::route(i, "port", "must be 1-65535"));
            }
            match &route.matches {
                RouteMatch::Sni(name) => {
                    validate_sni(name).map_err(|m| TableError::route(i, "sni", m))?
                }
                RouteMatch::SniFrom { sni, sources } => {
                    validate_sni(sni).map_err(|m| TableError::route(i, "sni", m))?;
                    validate_sources(sources).map_err(|m| TableError::route(i, "sources", m))?;
                }
                RouteMatch::Source(_) | RouteMatch::AliasSource(_) => {}
            }
            validate_upstream(&route.upstream)
                .map_err(|(field, m)| TableError::route(i, field, m))?;
            if let Some(owner) = &route.owner
                && owner.len() > 253
            {
                return Err(TableError::route(i, "owner", "longer than 253 bytes"));
            }
            let key = route.matches.key();
            if let Some(&first) = seen.get(&(route.port, key)) {
                let other = &self.routes[first];
                let what = if other.upstream == route.upstream && other.matches == route.matches {
                    "duplicate of"
                } else {
                    "conflicts with"
                };
                let field = match key {
                    MatchKey::Sni(_) => "sni",
                    MatchKey::Source(_) => "source",
                };
                return Err(TableError::route(
                    i,
                    field,
                    format!("{what} routes[{first}] (port {} {key})", route.port),
                ));
            }
            seen.insert((route.port, key), i);
        }
        Ok(())
    }

    /// The routes in canonical order (port, then SNI before source, then key).
    pub fn canonical_routes(&self) -> Vec<&Route> {
        let mut routes: Vec<&Route> = self.routes.iter().collect();
        routes.sort_by_key(|a| sort_key(a));
        routes
    }

    /// A stable SHA-256 (`sha256:<hex>`) over the canonical form: equal for two
    /// documents with the same generation and the same routes in any order.
    pub fn digest(&self) -> String {
        let mut h = Sha256::new();
        h.update(b"oooi-routes/v1\n");
        h.update(self.generation.to_string().as_bytes());
        h.update(b"\n");
        for r in self.canonical_routes() {
            // Unrestricted routes hash as they always did, so a table
            // without `sources` keeps its digest.
            let (kind, key) = match &r.matches {
                RouteMatch::Sni(n) => ("sni", n.clone()),
                RouteMatch::SniFrom { sni, sources } => {
                    let list: Vec<String> = canonical_sources(sources)
                        .iter()
                        .map(Cidr::to_string)
                        .collect();
                    ("sni_from", format!("{sni} {}", list.join(",")))
                }
                RouteMatch::Source(c) => ("source", c.to_string()),
                RouteMatch::AliasSource(c) => ("alias_source", c.to_string()),
            };
            let up = match &r.upstream {
                Upstream::Cluster(c) => format!("cluster\t{c}"),
                Upstream::Address { host, port } => format!("address\t{host}\t{port}"),
            };
            let line = format!(
                "{}\t{kind}\t{key}\t{up}\t{}\n",
                r.port,
                r.owner.as_deref().unwrap_or("")
            );
            h.update(line.as_bytes());
        }
        format!("sha256:{}", hex::encode(h.finalize()))
    }
}

fn sort_key(r: &Route) -> (u16, u8, String) {
    match &r.matches {
        RouteMatch::Sni(n) | RouteMatch::SniFrom { sni: n, .. } => (r.port, 0, n.clone()),
        RouteMatch::Source(c) | RouteMatch::AliasSource(c) => (r.port, 1, c.to_string()),
    }
}

fn validate_sources(sources: &[Cidr]) -> Result<(), String> {
    if sources.is_empty() {
        return Err(
            "is empty: list at least one address or CIDR, or omit `sources` to allow every source"
                .into(),
        );
    }
    if sources.len() > MAX_ROUTE_SOURCES {
        return Err(format!(
            "{} entries is over the limit of {MAX_ROUTE_SOURCES}",
            sources.len()
        ));
    }
    let mut seen = std::collections::HashSet::with_capacity(sources.len());
    for (j, c) in sources.iter().enumerate() {
        if !seen.insert(c) {
            return Err(format!("[{j}] {c} is listed twice"));
        }
    }
    Ok(())
}

/// Turns a JSON error into one that names the route entry and field when
/// the problem is inside `routes` (the serde error alone gives a byte
/// position). Only runs on the error path.
fn locate(bytes: &[u8], e: serde_json::Error) -> TableError {
    let whole = || TableError::doc("document", format!("malformed JSON: {e}"));
    let Ok(doc) = serde_json::from_slice::<serde_json::Value>(bytes) else {
        return whole();
    };
    let Some(routes) = doc.get("routes").and_then(|r| r.as_array()) else {
        return whole();
    };
    for (i, r) in routes.iter().enumerate() {
        let Err(route_err) = Route::deserialize(r) else {
            continue;
        };
        if let Some(list) = r.get("sources").and_then(|s| s.as_array()) {
            for (j, c) in list.iter().enumerate() {
                if let Err(ce) = Cidr::deserialize(c) {
                    return TableError::route(i, "sources", format!("[{j}]: {ce}"));
                }
            }
        } else if let Some(bad) = r.get("sources") {
            return TableError::route(i, "sources", format!("{bad} is not a list"));
        }
        for field in ["source", "alias_source"] {
            if let Some(c) = r.get(field)
                && let Err(ce) = Cidr::deserialize(c)
            {
                return TableError::route(i, field, ce.to_string());
            }
        }
        return TableError::route(i, "route", route_err.to_string());
    }
    whole()
}

fn validate_sni(name: &str) -> Result<(), String> {
    if normalize_name(name) != name {
        return Err(format!(
            "{name:?} must be lower case without a trailing dot"
        ));
    }
    let base = name.strip_prefix("*.").unwrap_or(name);
    validate_hostname(base).map_err(|m| format!("{name:?}: {m}"))?;
    if name.starts_with("*.") && !base.contains('.') {
        return Err(format!(
            "{name:?}: a wildcard needs at least two labels below it"
        ));
    }
    if is_kubernetes_alias(base) {
        return Err(format!(
            "{name:?} is a Kubernetes-service alias; it is routed by source address, use a `source` route"
        ));
    }
    Ok(())
}

/// True when `name` could be held by a table entry: a lower-case host name
/// of 1-253 bytes whose labels are 1-63 bytes of `[a-z0-9_-]`, not starting
/// or ending with `-`. The same rules as [`validate_hostname`], without
/// building an error: the filter calls it on every connection's SNI.
pub fn is_valid_hostname(name: &str) -> bool {
    if name.is_empty() || name.len() > 253 {
        return false;
    }
    name.split('.').all(|label| {
        let b = label.as_bytes();
        !b.is_empty()
            && b.len() <= 63
            && b[0] != b'-'
            && b[b.len() - 1] != b'-'
            && b.iter()
                .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'_')
    })
}

/// Checks a DNS host name: 1-253 bytes, labels of 1-63 `[a-z0-9_-]`, no `*`.
fn validate_hostname(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty name".into());
    }
    if name.len() > 253 {
        return Err("longer than 253 bytes".into());
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(format!("label {label:?} must be 1-63 bytes"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        {
            return Err(format!("label {label:?} has characters outside [a-z0-9_-]"));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!("label {label:?} starts or ends with '-'"));
        }
    }
    Ok(())
}

fn validate_upstream(up: &Upstream) -> Result<(), (&'static str, String)> {
    match up {
        Upstream::Cluster(name) => {
            if name.is_empty() {
                return Err(("upstream.cluster", "empty cluster name".into()));
            }
            if name.len() > 255 || !name.bytes().all(|b| b.is_ascii_graphic()) {
                return Err((
                    "upstream.cluster",
                    format!("{name:?} must be 1-255 printable ASCII bytes without spaces"),
                ));
            }
        }
        Upstream::Address { host, port } => {
            if host.is_empty() {
                return Err(("upstream.address.host", "empty host".into()));
            }
            if host.parse::<IpAddr>().is_err() {
                validate_hostname(host)
                    .map_err(|m| ("upstream.address.host", format!("{host:?}: {m}")))?;
            }
            if *port == 0 {
                return Err(("upstream.address.port", "must be 1-65535".into()));
            }
        }
    }
    Ok(())
}
