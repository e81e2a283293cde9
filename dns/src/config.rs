//! The `oooi-dns` configuration: the file format ([`RawConfig`], YAML or JSON)
//! and the validated model ([`Config`]) that the answer logic runs on.
//!
//! The file is parsed once, at the edge, into typed values. Every error names
//! the field path (for example `views[1].listen[0]`) and the bad value.
//!
//! Two ways to describe static answers, which can be mixed:
//! - `clusters`: one entry per hosted cluster. It expands, per view `kind`,
//!   into the control-plane names, the `*.apps` wildcard and the
//!   `kubernetes[.default[.svc[.cluster.local]]]` aliases.
//! - `views[].zones`: explicit zones and records, for anything else.
//!
//! ```yaml
//! http: 127.0.0.1:9153
//! upstreams:
//!   servers: ["10.0.0.10:53"]
//! clusters:
//!   - name: c1
//!     base_domain: example.com
//!     proxy: 192.0.2.4
//!     apps_vip: 192.0.2.200
//! views:
//!   - name: vlan
//!     kind: vlan
//!     listen: ["192.0.2.3:53"]
//!   - name: default
//!     kind: pod
//!     listen: ["10.128.0.5:53"]
//! ```

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use hickory_proto::rr::{LowerName, Name};
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// Control-plane names published per cluster when `clusters[].names` is not set.
pub const DEFAULT_CONTROL_PLANE_NAMES: [&str; 5] =
    ["api", "api-int", "oauth", "ignition", "konnectivity"];

/// The Kubernetes service aliases answered in the VLAN view (and, with an
/// internal proxy address, in the pod view).
pub const KUBERNETES_ALIASES: [&str; 4] = [
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];

/// An error in the config file. `field` is the path of the offending field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The text is not valid YAML/JSON for [`RawConfig`].
    #[error("cannot parse config: {0}")]
    Syntax(String),
    /// A field has a bad value.
    #[error("{field}: {message}")]
    Invalid {
        /// Path of the field, e.g. `views[0].listen[1]`.
        field: String,
        /// What is wrong with it.
        message: String,
    },
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

// ---------------------------------------------------------------------------
// File format
// ---------------------------------------------------------------------------

/// The config file as written (YAML or JSON). Unknown fields are rejected.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// Address of the HTTP server for `/healthz` and `/metrics`. None: off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<String>,
    /// TTL in seconds of static answers (default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u32>,
    /// Resolvers for every name that no view owns.
    #[serde(default)]
    pub upstreams: RawUpstreams,
    /// Hosted clusters whose names are published.
    #[serde(default)]
    pub clusters: Vec<RawCluster>,
    /// Views, tried in order. At least one.
    pub views: Vec<RawView>,
}

/// Upstream resolvers and the forwarding cache.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawUpstreams {
    /// `ip:port` (or `ip`, port 53) of each resolver, tried in order.
    #[serde(default)]
    pub servers: Vec<String>,
    /// Time to wait for one upstream, in milliseconds (default 800).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Maximum number of cached answers (default 10000; 0 disables the cache).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_entries: Option<usize>,
    /// Upper bound of the TTL of cached answers, in seconds (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cache_ttl: Option<u32>,
    /// After every upstream failed, answer SERVFAIL at once for this many
    /// milliseconds before trying again (default 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub down_backoff_ms: Option<u64>,
}

/// One hosted cluster.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawCluster {
    /// Cluster name: names live under `<name>.<base_domain>`.
    pub name: String,
    /// Base domain.
    pub base_domain: String,
    /// VLAN address of the proxy (Envoy) for the control-plane names.
    pub proxy: String,
    /// Address of the proxy reachable from the pod network. When set, the
    /// pod view answers the `kubernetes` aliases with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_proxy: Option<String>,
    /// Apps ingress VIP for `*.apps.<name>.<base_domain>`. None: no wildcard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apps_vip: Option<String>,
    /// Also publish `*.apps.<name>.<base_domain>` in the pod view, answered
    /// with `internal_proxy` (which forwards to the VIP). Needs both
    /// `apps_vip` and `internal_proxy`; default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub apps_to_pods: bool,
    /// Control-plane names (default [`DEFAULT_CONTROL_PLANE_NAMES`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<Vec<String>>,
}

/// What a view publishes from `clusters`.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ViewKind {
    /// The VLAN: cluster zones, apps wildcard, kubernetes aliases to the proxy.
    Vlan,
    /// The pod network: only the kubernetes aliases (and `*.apps` where
    /// `apps_to_pods` is set), and only to an internal proxy address when one
    /// is configured.
    Pod,
    /// Nothing from `clusters`; only the view's own `zones`.
    #[default]
    Custom,
}

/// One view.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawView {
    /// Name, used in logs and metrics.
    pub name: String,
    /// What it publishes from `clusters`.
    #[serde(default)]
    pub kind: ViewKind,
    /// `ip:port` addresses it serves on (UDP and TCP). At least one.
    pub listen: Vec<String>,
    /// Client subnets (CIDR). Empty: any client on these listeners. A query
    /// goes to the first view that lists its listener and matches its source.
    #[serde(default)]
    pub source_subnets: Vec<String>,
    /// Explicit zones.
    #[serde(default)]
    pub zones: Vec<RawZone>,
}

/// An explicit zone: every name under `origin` is answered here (NXDOMAIN
/// when not listed), never forwarded.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawZone {
    /// Zone apex, e.g. `c1.example.com`.
    pub origin: String,
    /// Records. Names are relative to `origin` (`@` is the apex), or
    /// absolute with a trailing dot. `*.x` is a wildcard matching any depth.
    #[serde(default)]
    pub records: Vec<RawRecord>,
}

/// Addresses of one name.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawRecord {
    /// Owner name.
    pub name: String,
    /// IPv4 addresses.
    #[serde(default)]
    pub a: Vec<String>,
    /// IPv6 addresses.
    #[serde(default)]
    pub aaaa: Vec<String>,
    /// TTL in seconds (default: the top-level `ttl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u32>,
}

// ---------------------------------------------------------------------------
// Validated model
// ---------------------------------------------------------------------------

/// A validated config.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Health and metrics address.
    pub http: Option<SocketAddr>,
    /// Forwarding settings.
    pub upstreams: Upstreams,
    /// Views in selection order.
    pub views: Vec<View>,
}

/// Validated forwarding settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Upstreams {
    /// Resolvers in failover order.
    pub servers: Vec<SocketAddr>,
    /// Per-upstream timeout.
    pub timeout: Duration,
    /// Cache capacity in entries.
    pub cache_entries: usize,
    /// TTL cap of cached answers.
    pub max_cache_ttl: u32,
    /// Fast-SERVFAIL window after all upstreams failed.
    pub down_backoff: Duration,
}

/// A validated view.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    /// Name.
    pub name: String,
    /// Listener addresses.
    pub listen: Vec<SocketAddr>,
    /// Client subnets; empty matches any client.
    pub source_subnets: Vec<IpNet>,
    /// Owned zones, longest origin first.
    pub zones: Vec<Zone>,
    /// Names answered exactly without owning a zone (the kubernetes aliases),
    /// so that their siblings are still forwarded.
    pub hosts: BTreeMap<LowerName, RecordSet>,
}

/// A validated zone.
#[derive(Debug, Clone, PartialEq)]
pub struct Zone {
    /// Apex.
    pub origin: LowerName,
    /// Exact names (wildcards are stored under their `*.` name).
    pub records: BTreeMap<LowerName, RecordSet>,
}

/// Addresses of one owner name.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RecordSet {
    /// IPv4 addresses.
    pub a: Vec<Ipv4Addr>,
    /// IPv6 addresses.
    pub aaaa: Vec<Ipv6Addr>,
    /// TTL in seconds.
    pub ttl: u32,
}

impl View {
    /// Whether this view serves a query that arrived on `local` from `client`.
    pub fn matches(&self, local: SocketAddr, client: IpAddr) -> bool {
        self.listen.contains(&local)
            && (self.source_subnets.is_empty()
                || self.source_subnets.iter().any(|n| n.contains(&client)))
    }
}

impl Config {
    /// Reads and validates a file. `.json` files are JSON, anything else YAML.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text)
    }

    /// Parses YAML (which includes JSON) and validates it.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let raw: RawConfig =
            serde_saphyr::from_str(text).map_err(|e| ConfigError::Syntax(e.to_string()))?;
        raw.validate()
    }

    /// The view for a query that arrived on `local` from `client`.
    pub fn select_view(&self, local: SocketAddr, client: IpAddr) -> Option<&View> {
        self.views.iter().find(|v| v.matches(local, client))
    }

    /// The position in `views` of [`Config::select_view`]'s choice.
    pub fn select_view_index(&self, local: SocketAddr, client: IpAddr) -> Option<usize> {
        self.views.iter().position(|v| v.matches(local, client))
    }

    /// Every distinct listener address, in order of first appearance.
    pub fn listen_addresses(&self) -> Vec<SocketAddr> {
        let mut out = Vec::new();
        for v in &self.views {
            for a in &v.listen {
                if !out.contains(a) {
                    out.push(*a);
                }
            }
        }
        out
    }
}

fn parse_socket(field: &str, s: &str, default_port: u16) -> Result<SocketAddr, ConfigError> {
    if let Ok(a) = SocketAddr::from_str(s) {
        return Ok(a);
    }
    if let Ok(ip) = IpAddr::from_str(s) {
        return Ok(SocketAddr::new(ip, default_port));
    }
    Err(invalid(field, format!("`{s}` is not an ip:port address")))
}

fn parse_v4(field: &str, s: &str) -> Result<Ipv4Addr, ConfigError> {
    Ipv4Addr::from_str(s).map_err(|_| invalid(field, format!("`{s}` is not an IPv4 address")))
}

fn parse_ip(field: &str, s: &str) -> Result<IpAddr, ConfigError> {
    IpAddr::from_str(s).map_err(|_| invalid(field, format!("`{s}` is not an IP address")))
}

fn parse_name(field: &str, s: &str) -> Result<Name, ConfigError> {
    let s = s.trim();
    if s.is_empty() {
        return Err(invalid(field, "empty name"));
    }
    let mut name =
        Name::from_str(s).map_err(|e| invalid(field, format!("`{s}` is not a DNS name: {e}")))?;
    name.set_fqdn(true);
    Ok(name)
}

fn join(field: &str, label: &str, origin: &Name) -> Result<Name, ConfigError> {
    let rel = parse_name(field, label)?;
    rel.append_domain(origin)
        .map_err(|e| invalid(field, format!("`{label}` under `{origin}`: {e}")))
}

fn add_record(
    records: &mut BTreeMap<LowerName, RecordSet>,
    field: &str,
    name: &Name,
    set: RecordSet,
) -> Result<(), ConfigError> {
    let key = LowerName::new(name);
    if let Some(old) = records.get_mut(&key) {
        // The same address twice is fine (several clusters sharing a proxy);
        // different addresses for one name is a conflict.
        if (!old.a.is_empty() && !set.a.is_empty() && old.a != set.a)
            || (!old.aaaa.is_empty() && !set.aaaa.is_empty() && old.aaaa != set.aaaa)
        {
            return Err(invalid(
                field,
                format!("`{name}` already has different addresses"),
            ));
        }
        if old.a.is_empty() {
            old.a = set.a;
        }
        if old.aaaa.is_empty() {
            old.aaaa = set.aaaa;
        }
        return Ok(());
    }
    records.insert(key, set);
    Ok(())
}

fn v4_set(ip: IpAddr, ttl: u32) -> RecordSet {
    match ip {
        IpAddr::V4(a) => RecordSet {
            a: vec![a],
            aaaa: vec![],
            ttl,
        },
        IpAddr::V6(a) => RecordSet {
            a: vec![],
            aaaa: vec![a],
            ttl,
        },
    }
}

impl RawConfig {
    /// Validates into a [`Config`]. Errors name the field.
    pub fn validate(&self) -> Result<Config, ConfigError> {
        let ttl = self.ttl.unwrap_or(30);
        if ttl > 86_400 {
            return Err(invalid("ttl", format!("{ttl} is above 86400")));
        }
        let http = self
            .http
            .as_deref()
            .map(|s| parse_socket("http", s, 9153))
            .transpose()?;

        let u = &self.upstreams;
        let mut servers = Vec::new();
        for (i, s) in u.servers.iter().enumerate() {
            servers.push(parse_socket(&format!("upstreams.servers[{i}]"), s, 53)?);
        }
        let timeout_ms = u.timeout_ms.unwrap_or(800);
        if timeout_ms == 0 || timeout_ms > 30_000 {
            return Err(invalid(
                "upstreams.timeout_ms",
                format!("{timeout_ms} is not within 1..=30000"),
            ));
        }
        let upstreams = Upstreams {
            servers,
            timeout: Duration::from_millis(timeout_ms),
            cache_entries: u.cache_entries.unwrap_or(10_000),
            max_cache_ttl: u.max_cache_ttl.unwrap_or(300),
            down_backoff: Duration::from_millis(u.down_backoff_ms.unwrap_or(1000)),
        };

        // Clusters, parsed once and reused by every view.
        struct Cluster {
            field: String,
            zone: Name,
            proxy: IpAddr,
            internal_proxy: Option<IpAddr>,
            apps_vip: Option<IpAddr>,
            apps_to_pods: bool,
            names: Vec<String>,
        }
        let mut clusters = Vec::new();
        for (i, c) in self.clusters.iter().enumerate() {
            let f = format!("clusters[{i}]");
            if c.name.is_empty() || c.name.contains('.') {
                return Err(invalid(
                    format!("{f}.name"),
                    format!("`{}` must be one non-empty label", c.name),
                ));
            }
            let base = parse_name(&format!("{f}.base_domain"), &c.base_domain)?;
            let zone = join(&format!("{f}.name"), &c.name, &base)?;
            let proxy = parse_ip(&format!("{f}.proxy"), &c.proxy)?;
            let internal_proxy = c
                .internal_proxy
                .as_deref()
                .map(|s| parse_ip(&format!("{f}.internal_proxy"), s))
                .transpose()?;
            let apps_vip = c
                .apps_vip
                .as_deref()
                .map(|s| parse_ip(&format!("{f}.apps_vip"), s))
                .transpose()?;
            let names = match &c.names {
                Some(n) => n.clone(),
                None => DEFAULT_CONTROL_PLANE_NAMES
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
            };
            for (j, n) in names.iter().enumerate() {
                parse_name(&format!("{f}.names[{j}]"), n)?;
            }
            if c.apps_to_pods && (apps_vip.is_none() || internal_proxy.is_none()) {
                return Err(invalid(
                    format!("{f}.apps_to_pods"),
                    "needs both apps_vip and internal_proxy",
                ));
            }
            clusters.push(Cluster {
                field: f,
                zone,
                proxy,
                internal_proxy,
                apps_vip,
                apps_to_pods: c.apps_to_pods,
                names,
            });
        }

        if self.views.is_empty() {
            return Err(invalid("views", "at least one view is required"));
        }
        let mut views = Vec::new();
        for (i, v) in self.views.iter().enumerate() {
            let f = format!("views[{i}]");
            if v.name.is_empty() {
                return Err(invalid(format!("{f}.name"), "empty"));
            }
            if views.iter().any(|o: &View| o.name == v.name) {
                return Err(invalid(
                    format!("{f}.name"),
                    format!("`{}` is used twice", v.name),
                ));
            }
            if v.listen.is_empty() {
                return Err(invalid(format!("{f}.listen"), "at least one address"));
            }
            let mut listen = Vec::new();
            for (j, s) in v.listen.iter().enumerate() {
                listen.push(parse_socket(&format!("{f}.listen[{j}]"), s, 53)?);
            }
            let mut source_subnets = Vec::new();
            for (j, s) in v.source_subnets.iter().enumerate() {
                let net = IpNet::from_str(s).map_err(|_| {
                    invalid(
                        format!("{f}.source_subnets[{j}]"),
                        format!("`{s}` is not a CIDR subnet"),
                    )
                })?;
                source_subnets.push(net);
            }

            let mut zones: Vec<Zone> = Vec::new();
            let mut hosts = BTreeMap::new();
            for c in &clusters {
                match v.kind {
                    ViewKind::Vlan => {
                        let mut records = BTreeMap::new();
                        for (j, n) in c.names.iter().enumerate() {
                            let name = join(&format!("{}.names[{j}]", c.field), n, &c.zone)?;
                            add_record(&mut records, &c.field, &name, v4_set(c.proxy, ttl))?;
                        }
                        if let Some(vip) = c.apps_vip {
                            let name = join(&format!("{}.apps_vip", c.field), "*.apps", &c.zone)?;
                            // An exact name listed in `names` under apps wins anyway.
                            add_record(&mut records, &c.field, &name, v4_set(vip, ttl))?;
                        }
                        zones.push(Zone {
                            origin: LowerName::new(&c.zone),
                            records,
                        });
                        for alias in KUBERNETES_ALIASES {
                            let name = parse_name(&c.field, alias)?;
                            add_record(
                                &mut hosts,
                                &format!("{}.proxy", c.field),
                                &name,
                                v4_set(c.proxy, ttl),
                            )?;
                        }
                    }
                    ViewKind::Pod => {
                        if let (true, Some(ip)) = (c.apps_to_pods, c.internal_proxy) {
                            // Only the apps zone: every other name of the
                            // cluster stays forwarded in this view.
                            let apps = join(&format!("{}.apps_to_pods", c.field), "apps", &c.zone)?;
                            let wild = join(&format!("{}.apps_to_pods", c.field), "*", &apps)?;
                            let mut records = BTreeMap::new();
                            add_record(&mut records, &c.field, &wild, v4_set(ip, ttl))?;
                            zones.push(Zone {
                                origin: LowerName::new(&apps),
                                records,
                            });
                        }
                        if let Some(ip) = c.internal_proxy {
                            for alias in KUBERNETES_ALIASES {
                                let name = parse_name(&c.field, alias)?;
                                add_record(
                                    &mut hosts,
                                    &format!("{}.internal_proxy", c.field),
                                    &name,
                                    v4_set(ip, ttl),
                                )?;
                            }
                        }
                    }
                    ViewKind::Custom => {}
                }
            }
            for (j, z) in v.zones.iter().enumerate() {
                let zf = format!("{f}.zones[{j}]");
                let origin = parse_name(&format!("{zf}.origin"), &z.origin)?;
                let mut records = BTreeMap::new();
                for (k, r) in z.records.iter().enumerate() {
                    let rf = format!("{zf}.records[{k}]");
                    let name = if r.name == "@" {
                        origin.clone()
                    } else if r.name.ends_with('.') {
                        parse_name(&format!("{rf}.name"), &r.name)?
                    } else {
                        join(&format!("{rf}.name"), &r.name, &origin)?
                    };
                    if !origin.zone_of(&name) {
                        return Err(invalid(
                            format!("{rf}.name"),
                            format!("`{name}` is outside the zone `{origin}`"),
                        ));
                    }
                    let mut set = RecordSet {
                        ttl: r.ttl.unwrap_or(ttl),
                        ..RecordSet::default()
                    };
                    for (m, s) in r.a.iter().enumerate() {
                        set.a.push(parse_v4(&format!("{rf}.a[{m}]"), s)?);
                    }
                    for (m, s) in r.aaaa.iter().enumerate() {
                        set.aaaa.push(Ipv6Addr::from_str(s).map_err(|_| {
                            invalid(
                                format!("{rf}.aaaa[{m}]"),
                                format!("`{s}` is not an IPv6 address"),
                            )
                        })?);
                    }
                    if set.a.is_empty() && set.aaaa.is_empty() {
                        return Err(invalid(&rf, "a record needs `a` or `aaaa` addresses"));
                    }
                    add_record(&mut records, &rf, &name, set)?;
                }
                let origin = LowerName::new(&origin);
                if zones.iter().any(|z| z.origin == origin) {
                    return Err(invalid(
                        format!("{zf}.origin"),
                        format!("zone `{origin}` is defined twice in this view"),
                    ));
                }
                zones.push(Zone { origin, records });
            }
            // Longest origin first, so that the closest enclosing zone wins.
            zones.sort_by_key(|z| std::cmp::Reverse(z.origin.num_labels()));
            views.push(View {
                name: v.name.clone(),
                listen,
                source_subnets,
                zones,
                hosts,
            });
        }
        Ok(Config {
            http,
            upstreams,
            views,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"
upstreams:
  servers: ["127.0.0.1:5399"]
clusters:
  - name: c1
    base_domain: example.com
    proxy: 192.0.2.4
    internal_proxy: 10.0.0.4
    apps_vip: 192.0.2.200
views:
  - name: vlan
    kind: vlan
    listen: ["127.0.0.2:5353"]
  - name: default
    kind: pod
    listen: ["127.0.0.3:5353"]
"#;

    #[test]
    fn sample_config_expands_clusters_per_view_kind() {
        let c = Config::parse(SAMPLE).expect("valid");
        assert_eq!(c.views.len(), 2);
        let vlan = &c.views[0];
        assert_eq!(vlan.zones.len(), 1);
        assert_eq!(vlan.zones[0].records.len(), 6);
        assert_eq!(vlan.hosts.len(), 4);
        let pod = &c.views[1];
        assert!(pod.zones.is_empty());
        assert_eq!(
            pod.hosts.values().next().expect("alias").a.first().copied(),
            Some(Ipv4Addr::new(10, 0, 0, 4))
        );
        assert_eq!(c.upstreams.servers[0].port(), 5399);
    }

    #[test]
    fn json_is_accepted() {
        let c =
            Config::parse(r#"{"views":[{"name":"v","listen":["127.0.0.1:53"]}]}"#).expect("json");
        assert_eq!(c.views[0].name, "v");
    }

    #[test]
    fn bad_listen_address_names_the_field() {
        let text = SAMPLE.replace("127.0.0.3:5353", "nope");
        let err = Config::parse(&text).expect_err("invalid").to_string();
        assert!(err.starts_with("views[1].listen[0]"), "{err}");
        assert!(err.contains("nope"), "{err}");
    }

    #[test]
    fn bad_proxy_names_the_field() {
        let text = SAMPLE.replace("192.0.2.4", "192.0.2.999");
        let err = Config::parse(&text).expect_err("invalid").to_string();
        assert!(err.starts_with("clusters[0].proxy"), "{err}");
    }

    #[test]
    fn unknown_field_is_rejected() {
        let text = SAMPLE.replace("apps_vip:", "apps_vipp:");
        assert!(Config::parse(&text).is_err());
    }

    #[test]
    fn record_outside_zone_is_rejected() {
        let text = r#"
views:
  - name: v
    listen: ["127.0.0.1:53"]
    zones:
      - origin: a.test
        records:
          - { name: "x.b.test.", a: ["1.2.3.4"] }
"#;
        let err = Config::parse(text).expect_err("invalid").to_string();
        assert!(
            err.starts_with("views[0].zones[0].records[0].name"),
            "{err}"
        );
    }

    #[test]
    fn view_selection_uses_listener_then_source_subnet() {
        let text = r#"
views:
  - name: lab
    listen: ["127.0.0.2:53"]
    source_subnets: ["127.0.0.128/25"]
  - name: vlan
    listen: ["127.0.0.2:53"]
  - name: pods
    listen: ["127.0.0.3:53"]
"#;
        let c = Config::parse(text).expect("valid");
        let l2: SocketAddr = "127.0.0.2:53".parse().expect("addr");
        let l3: SocketAddr = "127.0.0.3:53".parse().expect("addr");
        let pick = |l, ip: &str| {
            c.select_view(l, ip.parse().expect("ip"))
                .map(|v| v.name.as_str())
        };
        assert_eq!(pick(l2, "127.0.0.200"), Some("lab"));
        assert_eq!(pick(l2, "127.0.0.1"), Some("vlan"));
        assert_eq!(pick(l3, "127.0.0.1"), Some("pods"));
        let other: SocketAddr = "127.0.0.9:53".parse().expect("addr");
        assert_eq!(pick(other, "127.0.0.1"), None);
        assert_eq!(c.listen_addresses(), vec![l2, l3]);
    }
}
