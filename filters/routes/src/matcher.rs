//! The compiled index and the per-connection decision.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::IpAddr;

use oooi_vocabulary::{Cidr, addr_bits, is_kubernetes_alias, mask_bits, normalize_name};

use crate::table::{Route, RouteMatch, RouteTable, Upstream, canonical_sources, is_valid_hostname};

/// How a forwarded connection matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchKind {
    /// The SNI equals a route's name.
    ExactSni,
    /// The SNI lies below a route's `*.` name.
    WildcardSni,
    /// By source address, for a connection without SNI.
    SourceNoSni,
    /// By source address, for a Kubernetes-service alias SNI.
    SourceAlias,
}

impl MatchKind {
    /// A short label for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            MatchKind::ExactSni => "exact_sni",
            MatchKind::WildcardSni => "wildcard_sni",
            MatchKind::SourceNoSni => "source_no_sni",
            MatchKind::SourceAlias => "source_alias",
        }
    }
}

/// Why a connection is refused. No route is ever guessed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No table has been loaded yet.
    NoTable,
    /// The table has no route at all on this listener port.
    UnknownPort,
    /// The SNI matches no exact or wildcard route.
    UnknownSni,
    /// No SNI, and the source address belongs to no cluster.
    UnknownSource,
    /// A Kubernetes-service alias from a source address no cluster owns.
    AliasFromUnknownSource,
    /// The source address could not be read or parsed.
    NoSourceAddress,
    /// The SNI matches a route restricted to other source addresses
    /// (`sources`); the connection is not tried against any other route.
    SourceNotAllowed,
    /// The SNI is not a host name any route could hold (an empty label, a
    /// label over 63 bytes, a name over 253 bytes, a character outside
    /// `[a-z0-9_-]` after lower-casing): it is never tried against a wildcard.
    InvalidSni,
}

impl Refusal {
    /// A short label for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::NoTable => "no_table",
            Refusal::UnknownPort => "unknown_port",
            Refusal::UnknownSni => "unknown_sni",
            Refusal::UnknownSource => "unknown_source",
            Refusal::AliasFromUnknownSource => "alias_from_unknown_source",
            Refusal::NoSourceAddress => "no_source_address",
            Refusal::SourceNotAllowed => "source_not_allowed",
            Refusal::InvalidSni => "invalid_sni",
        }
    }

    /// Every refusal, for metric registration.
    pub const ALL: [Refusal; 8] = [
        Refusal::NoTable,
        Refusal::UnknownPort,
        Refusal::UnknownSni,
        Refusal::UnknownSource,
        Refusal::AliasFromUnknownSource,
        Refusal::NoSourceAddress,
        Refusal::SourceNotAllowed,
        Refusal::InvalidSni,
    ];
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome for one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision<'a> {
    /// Send the connection to an upstream.
    Forward {
        /// Index into [`Router::upstreams`], stable for one table; the filter
        /// keys its precomputed per-upstream data by it.
        upstream: usize,
        /// The route that matched.
        route: &'a Route,
        /// How it matched.
        kind: MatchKind,
    },
    /// Close the connection.
    Refuse(Refusal),
}

#[derive(Debug, Default)]
struct PortIndex {
    exact: HashMap<String, u32>,
    /// Keyed by the suffix below `*.`: `apps.c1.example.com`.
    wildcard: HashMap<String, u32>,
    /// `source` routes (no SNI and aliases): see [`SourceIndex`].
    no_sni: SourceIndex,
    /// `source` and `alias_source` routes: what a Kubernetes-service alias
    /// SNI is matched against.
    alias: SourceIndex,
}

/// Source routes per prefix length, longest first. At most 33 (IPv4) or
/// 129 (IPv6) probes per connection, whatever the number of routes.
#[derive(Debug, Default)]
struct SourceIndex {
    v4: Vec<(u8, HashMap<u128, u32>)>,
    v6: Vec<(u8, HashMap<u128, u32>)>,
}

impl SourceIndex {
    fn insert(&mut self, cidr: &Cidr, route: u32) {
        let by_len = if cidr.addr().is_ipv4() {
            &mut self.v4
        } else {
            &mut self.v6
        };
        let slot = match by_len.iter().position(|(p, _)| *p == cidr.prefix()) {
            Some(pos) => pos,
            None => {
                by_len.push((cidr.prefix(), HashMap::new()));
                by_len.len() - 1
            }
        };
        by_len[slot].1.entry(cidr.network_bits()).or_insert(route);
    }

    fn sort(&mut self) {
        self.v4.sort_by_key(|e| std::cmp::Reverse(e.0));
        self.v6.sort_by_key(|e| std::cmp::Reverse(e.0));
    }

    /// The route of the longest prefix holding `ip`.
    fn lookup(&self, ip: IpAddr) -> Option<u32> {
        let by_len = if ip.is_ipv4() { &self.v4 } else { &self.v6 };
        let bits = addr_bits(ip);
        by_len
            .iter()
            .find_map(|(prefix, map)| map.get(&mask_bits(bits, ip.is_ipv4(), *prefix)).copied())
    }
}

/// The allowed sources of a restricted SNI route, compiled: single
/// addresses in hash sets (a cluster's workers), networks in a short list.
/// A check is one hash probe plus a scan of the networks, with no allocation.
#[derive(Debug, Default)]
struct SourceSet {
    v4: HashSet<u32>,
    v6: HashSet<u128>,
    nets: Vec<Cidr>,
}

impl SourceSet {
    fn new(sources: &[Cidr]) -> SourceSet {
        let mut set = SourceSet::default();
        for c in sources {
            match c.addr() {
                IpAddr::V4(a) if c.prefix() == 32 => {
                    set.v4.insert(u32::from(a));
                }
                IpAddr::V6(a) if c.prefix() == 128 => {
                    set.v6.insert(u128::from(a));
                }
                _ => set.nets.push(*c),
            }
        }
        // Wider networks first: they catch the most addresses.
        set.nets.sort_by_key(|c| c.prefix());
        set
    }

    fn contains(&self, ip: IpAddr) -> bool {
        let hit = match ip {
            IpAddr::V4(a) => self.v4.contains(&u32::from(a)),
            IpAddr::V6(a) => self.v6.contains(&u128::from(a)),
        };
        hit || self.nets.iter().any(|c| c.contains(ip))
    }
}

/// `route_sources` value of a route any source may use.
const UNRESTRICTED: u32 = u32::MAX;

/// A routing table compiled for lookups.
#[derive(Debug)]
pub struct Router {
    table: RouteTable,
    digest: String,
    ports: HashMap<u16, PortIndex>,
    /// Distinct upstreams; `route_upstream[i]` indexes into it.
    upstreams: Vec<Upstream>,
    route_upstream: Vec<u32>,
    /// Distinct allowed-source sets; `route_sources[i]` indexes into it, or
    /// is [`UNRESTRICTED`]. A cluster's routes share one set.
    source_sets: Vec<SourceSet>,
    route_sources: Vec<u32>,
}

impl Router {
    /// Compiles a validated table. Call [`RouteTable::validate`] (or build the
    /// table with [`RouteTable::from_json`]) first; on duplicate keys the
    /// first route wins.
    pub fn new(table: RouteTable) -> Router {
        Router::with_digest(table.digest(), table)
    }

    /// Compiles a table whose digest is already known (as carried by the
    /// compact encoding), skipping the hash.
    pub fn with_digest(digest: String, table: RouteTable) -> Router {
        let mut ports: HashMap<u16, PortIndex> = HashMap::new();
        let mut upstream_ids: HashMap<&Upstream, u32> = HashMap::new();
        let mut upstreams = Vec::new();
        let mut route_upstream = Vec::with_capacity(table.routes.len());
        let mut set_ids: HashMap<Vec<Cidr>, u32> = HashMap::new();
        let mut source_sets = Vec::new();
        let mut route_sources = Vec::with_capacity(table.routes.len());
        for (i, r) in table.routes.iter().enumerate() {
            let up = *upstream_ids.entry(&r.upstream).or_insert_with(|| {
                upstreams.push(r.upstream.clone());
                (upstreams.len() - 1) as u32
            });
            route_upstream.push(up);
            let restriction = match r.matches.allowed_sources() {
                Some(sources) => *set_ids
                    .entry(canonical_sources(sources))
                    .or_insert_with_key(|canonical| {
                        source_sets.push(SourceSet::new(canonical));
                        (source_sets.len() - 1) as u32
                    }),
                None => UNRESTRICTED,
            };
            route_sources.push(restriction);
            let idx = ports.entry(r.port).or_default();
            let i = i as u32;
            match &r.matches {
                RouteMatch::Sni(name) | RouteMatch::SniFrom { sni: name, .. } => {
                    match name.strip_prefix("*.") {
                        Some(suffix) => {
                            idx.wildcard.entry(suffix.to_string()).or_insert(i);
                        }
                        None => {
                            idx.exact.entry(name.clone()).or_insert(i);
                        }
                    }
                }
                RouteMatch::Source(cidr) => {
                    idx.no_sni.insert(cidr, i);
                    idx.alias.insert(cidr, i);
                }
                RouteMatch::AliasSource(cidr) => idx.alias.insert(cidr, i),
            }
        }
        for idx in ports.values_mut() {
            idx.no_sni.sort();
            idx.alias.sort();
        }
        Router {
            table,
            digest,
            ports,
            upstreams,
            route_upstream,
            source_sets,
            route_sources,
        }
    }

    /// The table this router was built from.
    pub fn table(&self) -> &RouteTable {
        &self.table
    }

    /// The table's generation.
    pub fn generation(&self) -> u64 {
        self.table.generation
    }

    /// The table's digest (`sha256:<hex>`).
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// Distinct upstreams of the table, indexed by `Decision::Forward::upstream`.
    pub fn upstreams(&self) -> &[Upstream] {
        &self.upstreams
    }

    /// Decides one connection from its listener port, its SNI (None or empty
    /// when the client sent none) and its source address.
    pub fn decide(&self, port: u16, sni: Option<&str>, source: Option<IpAddr>) -> Decision<'_> {
        self.decide_with(port, sni, || source)
    }

    /// Like [`Router::decide`], but asks for the source address only when
    /// the decision depends on it (no SNI, a Kubernetes-service alias, or a
    /// route restricted by `sources`), so the filter does not fetch it for
    /// ordinary SNI connections. `source` is called at most once.
    pub fn decide_with(
        &self,
        port: u16,
        sni: Option<&str>,
        source: impl FnOnce() -> Option<IpAddr>,
    ) -> Decision<'_> {
        let Some(idx) = self.ports.get(&port) else {
            return Decision::Refuse(Refusal::UnknownPort);
        };
        // An empty SNI is none at all; anything else must be a host name
        // some route could hold, or a wildcard might catch it.
        let sni = sni.filter(|s| !s.is_empty()).map(normalize_name);
        if let Some(name) = &sni
            && !is_valid_hostname(name)
        {
            return Decision::Refuse(Refusal::InvalidSni);
        }
        match sni {
            Some(name) if !is_kubernetes_alias(&name) => {
                if let Some(&i) = idx.exact.get(name.as_ref()) {
                    return self.admit(i, MatchKind::ExactSni, source);
                }
                // Walk the suffixes from the longest: the most specific wildcard wins.
                let mut rest: &str = &name;
                while let Some(dot) = rest.find('.') {
                    rest = &rest[dot + 1..];
                    if let Some(&i) = idx.wildcard.get(rest) {
                        return self.admit(i, MatchKind::WildcardSni, source);
                    }
                }
                Decision::Refuse(Refusal::UnknownSni)
            }
            alias => {
                let (kind, unknown, index) = if alias.is_some() {
                    (
                        MatchKind::SourceAlias,
                        Refusal::AliasFromUnknownSource,
                        &idx.alias,
                    )
                } else {
                    (MatchKind::SourceNoSni, Refusal::UnknownSource, &idx.no_sni)
                };
                let Some(ip) = source().map(unmap) else {
                    return Decision::Refuse(Refusal::NoSourceAddress);
                };
                match index.lookup(ip) {
                    Some(i) => self.forward(i, kind),
                    None => Decision::Refuse(unknown),
                }
            }
        }
    }

    /// Forwards on a name match, after the route's source check if it has
    /// one. A refused source is final: the most specific name decides.
    /// Like [`Router::decide_with`], for the SNI as Envoy hands it over: the
    /// raw bytes of the ClientHello's server name (empty when there is
    /// none). Bytes that are not UTF-8 are not "no SNI": they are refused
    /// as [`Refusal::InvalidSni`] on every port that has routes, before any
    /// source route could take the connection.
    pub fn decide_raw_with(
        &self,
        port: u16,
        sni: &[u8],
        source: impl FnOnce() -> Option<IpAddr>,
    ) -> Decision<'_> {
        match std::str::from_utf8(sni) {
            Ok(name) => self.decide_with(port, Some(name), source),
            Err(_) if self.ports.contains_key(&port) => Decision::Refuse(Refusal::InvalidSni),
            Err(_) => Decision::Refuse(Refusal::UnknownPort),
        }
    }

    fn admit(
        &self,
        route: u32,
        kind: MatchKind,
        source: impl FnOnce() -> Option<IpAddr>,
    ) -> Decision<'_> {
        let set = self.route_sources[route as usize];
        if set != UNRESTRICTED {
            let Some(ip) = source().map(unmap) else {
                return Decision::Refuse(Refusal::NoSourceAddress);
            };
            if !self.source_sets[set as usize].contains(ip) {
                return Decision::Refuse(Refusal::SourceNotAllowed);
            }
        }
        self.forward(route, kind)
    }

    fn forward(&self, route: u32, kind: MatchKind) -> Decision<'_> {
        let route = route as usize;
        Decision::Forward {
            upstream: self.route_upstream[route] as usize,
            route: &self.table.routes[route],
            kind,
        }
    }
}

/// An IPv4-mapped IPv6 source is an IPv4 client on a dual-stack socket.
fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}
