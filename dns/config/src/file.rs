//! The config file as written (YAML or JSON): each field parsed to its type
//! by serde ([`RawConfig::parse`]), nothing checked across fields yet
//! ([`crate::Config::from_raw`] does that). The JSON schema of these types
//! is what the `DNSServer` CRD embeds.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use oooi_vocabulary::Cidr;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::addresses::{Addresses, IpPort, ListenAddress, quoted};
use crate::error::ConfigError;
use crate::targets::{HostPort, HttpUrl};

/// The config file as written (YAML or JSON). Unknown fields are rejected.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// Address (`ip:port`) of the HTTP server for `/healthz` and `/metrics`.
    /// Unset: off, unless the `--metrics-addr` flag names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<IpPort>,
    /// TTL in seconds of static answers (default 30, at most 86400).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u32>,
    /// Resolvers for every name that no view owns.
    #[serde(default)]
    pub upstreams: RawUpstreams,
    /// Answers to the CHAOS-class identity queries (`version.bind`,
    /// `hostname.bind`, `version.server`, `id.server`). Unset: REFUSED.
    /// These queries are never forwarded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chaos: Option<RawChaos>,
    /// Health checks of answered addresses (the proxy replicas): an address
    /// whose check fails is left out of answers while another address of the
    /// same name passes. Unset: every address is always answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<RawHealth>,
    /// Hosted clusters whose names are published.
    #[serde(default)]
    pub clusters: Vec<RawCluster>,
    /// Views, tried in order. At least one.
    pub views: Vec<RawView>,
}

/// Upstream resolvers and the forwarding cache.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawUpstreams {
    /// `ip:port` (or `ip`, port 53) of each resolver, tried in order.
    #[serde(default)]
    pub servers: Vec<IpPort>,
    /// Then the `nameserver` entries of the server's own `/etc/resolv.conf`
    /// (in a pod: the cluster's DNS), read when the config is loaded.
    /// Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resolv_conf: bool,
    /// Time to wait for one upstream, in milliseconds (default 800, within
    /// 1..=30000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Maximum number of cached answers (default 10000; 0 disables the cache).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_entries: Option<usize>,
    /// Upper bound of the TTL of cached answers, in seconds (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cache_ttl: Option<u32>,
    /// An upstream counts as down once queries for names of 3 unrelated
    /// zones timed out on it while it sent no response to anyone; while
    /// another upstream is up it is then skipped for this many milliseconds
    /// before one query probes it again (default 1000, within 1..=600000).
    /// While every upstream counts as down, each is still asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub down_backoff_ms: Option<u64>,
    /// How long, in seconds, an expired cached answer may still be served
    /// (with TTL 30) when no upstream answers for its name (RFC 8767 serve
    /// stale; default 86400, at most 604800; 0: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serve_stale_s: Option<u32>,
}

/// Health checks of answered addresses.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawHealth {
    /// Time between two checks of one address, in milliseconds (default
    /// 1000, within 100..=60000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_ms: Option<u64>,
    /// Time one check may take, in milliseconds (default 500, at most
    /// `interval_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Failed checks in a row that take an address out of answers
    /// (default 1, within 1..=10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fall: Option<u32>,
    /// Passed checks in a row that bring it back (default 1, within 1..=10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rise: Option<u32>,
    /// One check per address. An address without a check is always
    /// answered.
    #[serde(default)]
    pub checks: Vec<RawHealthCheck>,
}

/// The check of one answered address: exactly one of `tcp` and `http`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawHealthCheck {
    /// The address as it appears in answers (e.g. a proxy replica's VLAN
    /// address).
    #[serde(deserialize_with = "quoted::one")]
    #[schemars(with = "String")]
    pub address: IpAddr,
    /// Passes when a TCP connection to `ip:port` or `host:port` opens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<HostPort>,
    /// Passes when `GET` of this `http://host[:port]/path` URL answers 200.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpUrl>,
}

/// The strings answered to CHAOS-class TXT identity queries. A name left
/// unset is answered REFUSED.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawChaos {
    /// Answer to `version.bind` and `version.server` (at most 255 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Answer to `hostname.bind` and `id.server` (at most 255 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
}

fn default_true() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

/// One hosted cluster.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawCluster {
    /// Cluster name (one DNS label): names live under `<name>.<base_domain>`.
    pub name: String,
    /// Base domain.
    pub base_domain: String,
    /// VLAN address of the proxy (Envoy) for the control-plane names: one
    /// address, or a list with one address per proxy replica. Every name is
    /// answered with all of them (those failing their `health` check left
    /// out while another passes), rotated per query so that clients spread
    /// over the replicas (clients that fail to connect to one try the
    /// next).
    pub proxy: Addresses,
    /// Address of the proxy reachable from the pod network. When set, the
    /// pod view answers the control-plane names (`names`) with it; unset,
    /// the pod view answers none of this cluster's names (they forward).
    #[serde(
        default,
        deserialize_with = "quoted::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<String>")]
    pub internal_proxy: Option<IpAddr>,
    /// Publish the `kubernetes[.default[.svc[.cluster.local]]]` aliases in
    /// the vlan view (default true). The proxy routes them by worker source
    /// address, so the controller sets false while no worker address of the
    /// cluster is known: the names then forward like any other. The pod view
    /// never answers them (on a cluster's pod network they are its own API).
    #[serde(default = "default_true", skip_serializing_if = "is_true")]
    pub aliases: bool,
    /// Apps ingress VIP for `*.apps.<name>.<base_domain>`. Unset: no wildcard.
    #[serde(
        default,
        deserialize_with = "quoted::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<String>")]
    pub apps_vip: Option<IpAddr>,
    /// Also publish `*.apps.<name>.<base_domain>` in the pod view, answered
    /// with `internal_proxy` (which forwards to the VIP). Needs both
    /// `apps_vip` and `internal_proxy`; default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub apps_to_pods: bool,
    /// Control-plane names (default `api`, `api-int`, `oauth`, `ignition`,
    /// `konnectivity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<Vec<String>>,
}

/// What a view publishes from `clusters`.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ViewKind {
    /// The VLAN: cluster zones, apps wildcard, kubernetes aliases to the proxy.
    Vlan,
    /// The pod network: the control-plane names (and `*.apps` where
    /// `apps_to_pods` is set) of clusters with an `internal_proxy`, answered
    /// with it; never the kubernetes aliases. Every other name forwards.
    Pod,
    /// Nothing from `clusters`; only the view's own `zones`.
    #[default]
    Custom,
}

/// One view.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawView {
    /// Name, used in logs and metrics.
    pub name: String,
    /// What it publishes from `clusters`.
    #[serde(default)]
    pub kind: ViewKind,
    /// `ip:port` addresses it serves on (UDP and TCP). At least one.
    /// `$(POD_IP):port` is the pod's own address (the server's `--pod-ip`,
    /// or its `POD_IP` environment variable), so that a pod-network view
    /// never answers on the pod's other interfaces.
    pub listen: Vec<ListenAddress>,
    /// Client subnets (CIDR, no host bits; a bare address is that one
    /// address). Empty: any client on these listeners. A query goes to the
    /// first view that lists its listener and matches its source.
    #[serde(default, deserialize_with = "quoted::list")]
    pub source_subnets: Vec<Cidr>,
    /// Bind these listeners even when the address is not (yet) on any
    /// interface (IP_FREEBIND, an unprivileged socket option): a floating
    /// address that an address agent adds later is answered at once. List
    /// every address of the component in `listen`. Off: a listener whose
    /// address is missing fails to bind (a typo shows at start).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub freebind: bool,
    /// Explicit zones.
    #[serde(default)]
    pub zones: Vec<RawZone>,
}

/// An explicit zone: every name under `origin` is answered here (NXDOMAIN
/// when not listed), never forwarded.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, JsonSchema)]
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
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRecord {
    /// Owner name.
    pub name: String,
    /// IPv4 addresses.
    #[serde(default, deserialize_with = "quoted::list")]
    pub a: Vec<Ipv4Addr>,
    /// IPv6 addresses.
    #[serde(default, deserialize_with = "quoted::list")]
    pub aaaa: Vec<Ipv6Addr>,
    /// TTL in seconds (default: the top-level `ttl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u32>,
}

impl RawConfig {
    /// Parses YAML (which includes JSON) into typed fields, checking no rule
    /// across fields. A field that does not parse is named by its path
    /// (`views[1].listen[0]`); a syntax error names `file`.
    pub fn parse(text: &str) -> Result<RawConfig, ConfigError> {
        let mut at_path = None;
        let parsed = serde_saphyr::with_deserializer_from_str(text, |de| {
            let mut track = serde_path_to_error::Track::new();
            let r = RawConfig::deserialize(serde_path_to_error::Deserializer::new(de, &mut track));
            if r.is_err() {
                at_path = Some(track.path());
            }
            r
        });
        parsed.map_err(|e| {
            let at = e
                .location()
                .filter(|l| l.line() > 0)
                .map(|l| format!(" (line {}, column {})", l.line(), l.column()))
                .unwrap_or_default();
            match e.without_snippet() {
                // A value refused by its type (or a missing, unknown or
                // mistyped field): the path names the field.
                serde_saphyr::Error::Message { msg, .. } => ConfigError::new(
                    at_path
                        .map(|p| p.to_string())
                        .filter(|p| p != "." && !p.is_empty())
                        .unwrap_or_else(|| "file".to_string()),
                    format!("{msg}{at}"),
                ),
                // The YAML itself is broken.
                other => {
                    let text = other.to_string();
                    let text = text.strip_prefix("error: ").unwrap_or(&text);
                    ConfigError::new("file", format!("invalid YAML: {text}"))
                }
            }
        })
    }

    /// Reads and parses a file (YAML or JSON).
    pub fn load(path: &Path) -> Result<RawConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError::new("file", format!("cannot read {}: {e}", path.display()))
        })?;
        RawConfig::parse(&text)
    }

    /// The document as YAML (what the controller puts in the ConfigMap).
    pub fn to_yaml(&self) -> Result<String, ConfigError> {
        serde_saphyr::to_string(self)
            .map_err(|e| ConfigError::new("file", format!("cannot write YAML: {e}")))
    }
}
