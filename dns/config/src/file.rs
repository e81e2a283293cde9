//! The config file as written (YAML or JSON): plain strings and numbers,
//! checked by [`RawConfig::validate`](crate::RawConfig::validate). The JSON
//! schema of these types is what the `DNSServer` CRD embeds.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The config file as written (YAML or JSON). Unknown fields are rejected.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// Address (`ip:port`) of the HTTP server for `/healthz` and `/metrics`.
    /// Unset: off, unless the `--metrics-addr` flag names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<String>,
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
    pub servers: Vec<String>,
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
    /// An upstream counts as down once queries for 3 different names failed
    /// on it in a row (timeouts or errors, no answer between); it is then
    /// skipped for this many milliseconds before one query probes it again
    /// (default 1000, within 1..=600000).
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
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawHealthCheck {
    /// The address as it appears in answers (e.g. a proxy replica's VLAN
    /// address).
    pub address: String,
    /// Passes when a TCP connection to `ip:port` or `host:port` opens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<String>,
    /// Passes when `GET` of this `http://host[:port]/path` URL answers 200.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<String>,
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_proxy: Option<String>,
    /// Publish the `kubernetes[.default[.svc[.cluster.local]]]` aliases in
    /// the vlan view (default true). The proxy routes them by worker source
    /// address, so the controller sets false while no worker address of the
    /// cluster is known: the names then forward like any other. The pod view
    /// never answers them (on a cluster's pod network they are its own API).
    #[serde(default = "default_true", skip_serializing_if = "is_true")]
    pub aliases: bool,
    /// Apps ingress VIP for `*.apps.<name>.<base_domain>`. Unset: no wildcard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apps_vip: Option<String>,
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
    pub listen: Vec<String>,
    /// Client subnets (CIDR). Empty: any client on these listeners. A query
    /// goes to the first view that lists its listener and matches its source.
    #[serde(default)]
    pub source_subnets: Vec<String>,
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
    #[serde(default)]
    pub a: Vec<String>,
    /// IPv6 addresses.
    #[serde(default)]
    pub aaaa: Vec<String>,
    /// TTL in seconds (default: the top-level `ttl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u32>,
}

/// One address or a list of addresses: `proxy: 192.0.2.10` or
/// `proxy: [192.0.2.10, 192.0.2.11]`. Written back as a plain string when
/// there is one, so single-replica files look as they always did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Addresses(pub Vec<String>);

impl From<String> for Addresses {
    fn from(one: String) -> Self {
        Addresses(vec![one])
    }
}

impl From<Vec<String>> for Addresses {
    fn from(list: Vec<String>) -> Self {
        Addresses(list)
    }
}

impl Serialize for Addresses {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.as_slice() {
            [one] => s.serialize_str(one),
            list => list.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Addresses {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Addresses;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an IP address or a list of IP addresses")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Addresses, E> {
                Ok(Addresses(vec![v.to_string()]))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Addresses, A::Error> {
                let mut list = Vec::new();
                while let Some(one) = seq.next_element::<String>()? {
                    list.push(one);
                }
                Ok(Addresses(list))
            }
        }
        d.deserialize_any(Visit)
    }
}

impl JsonSchema for Addresses {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Addresses".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "anyOf": [
                { "type": "string" },
                { "type": "array", "items": { "type": "string" }, "minItems": 1 }
            ]
        })
    }
}
