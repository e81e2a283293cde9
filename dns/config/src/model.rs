//! The validated config: typed values the answer logic runs on.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use hickory_proto::rr::LowerName;
use ipnet::IpNet;

use crate::error::ConfigError;
use crate::file::RawConfig;

/// A validated config.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Health and metrics address.
    pub http: Option<SocketAddr>,
    /// Forwarding settings.
    pub upstreams: Upstreams,
    /// CHAOS-class identity answers.
    pub chaos: Chaos,
    /// Views in selection order.
    pub views: Vec<View>,
}

/// Validated forwarding settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Upstreams {
    /// Resolvers in failover order.
    pub servers: Vec<SocketAddr>,
    /// The config asks for the resolvers of the server's own resolv.conf
    /// after `servers` ([`Config::with_resolv_conf`] adds them).
    pub resolv_conf: bool,
    /// Per-upstream timeout.
    pub timeout: Duration,
    /// Cache capacity in entries.
    pub cache_entries: usize,
    /// TTL cap of cached answers.
    pub max_cache_ttl: u32,
    /// Fast-SERVFAIL window after all upstreams failed.
    pub down_backoff: Duration,
}

/// What the CHAOS-class identity names answer; None: REFUSED.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Chaos {
    /// `version.bind` and `version.server`.
    pub version: Option<String>,
    /// `hostname.bind` and `id.server`.
    pub hostname: Option<String>,
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

impl Config {
    /// Reads and validates a file (YAML, which includes JSON).
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text)
    }

    /// Parses YAML (which includes JSON) and validates it.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        RawConfig::parse(text)?.validate()
    }

    /// With `upstreams.resolv_conf` set, appends the `nameserver` entries of
    /// `resolv_conf` (the text of a resolv.conf) to the upstreams, port 53,
    /// skipping duplicates. Unset: unchanged.
    pub fn with_resolv_conf(mut self, resolv_conf: &str) -> Self {
        if !self.upstreams.resolv_conf {
            return self;
        }
        for line in resolv_conf.lines() {
            let mut words = line.split_whitespace();
            if words.next() != Some("nameserver") {
                continue;
            }
            // Scoped IPv6 addresses (`fe80::1%eth0`) cannot be dialled from
            // a socket address string; they are skipped.
            let Some(ip) = words
                .next()
                .and_then(|w| w.parse::<std::net::IpAddr>().ok())
            else {
                continue;
            };
            let addr = SocketAddr::new(ip, 53);
            if !self.upstreams.servers.contains(&addr) {
                self.upstreams.servers.push(addr);
            }
        }
        self
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

impl RawConfig {
    /// Parses YAML (which includes JSON) without validating the values.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        serde_saphyr::from_str(text).map_err(|e| ConfigError::Syntax(e.to_string()))
    }
}
