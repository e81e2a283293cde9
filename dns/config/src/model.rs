//! The validated config: typed values the answer logic runs on.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use hickory_proto::rr::LowerName;
use oooi_vocabulary::Cidr;

use crate::error::{ConfigError, invalid};
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
    /// Health checks of answered addresses; None: every address answered.
    pub health: Option<Health>,
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
    /// How long an upstream marked down is skipped before a probe.
    pub down_backoff: Duration,
    /// How long past its TTL a cached answer may be served when no upstream
    /// answers; zero: never.
    pub serve_stale: Duration,
}

/// Validated health checks.
#[derive(Debug, Clone, PartialEq)]
pub struct Health {
    /// Time between two checks of one address.
    pub interval: Duration,
    /// Time one check may take.
    pub timeout: Duration,
    /// Failed checks in a row that take an address out of answers.
    pub fall: u32,
    /// Passed checks in a row that bring it back.
    pub rise: u32,
    /// One check per address, addresses distinct.
    pub checks: Vec<HealthCheck>,
}

/// The check of one answered address.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HealthCheck {
    /// The address in answers.
    pub address: IpAddr,
    /// What is checked.
    pub target: CheckTarget,
}

/// What a health check does.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CheckTarget {
    /// Open a TCP connection to `host:port` (host: an IP or a DNS name).
    Tcp {
        /// IP address or DNS name.
        host: String,
        /// Port.
        port: u16,
    },
    /// `GET http://host:port/path`, passing on status 200.
    Http {
        /// IP address or DNS name.
        host: String,
        /// Port (80 when the URL names none).
        port: u16,
        /// Path and query, starting with `/`.
        path: String,
    },
}

impl std::fmt::Display for CheckTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let host = |h: &str| match h.parse::<Ipv6Addr>() {
            Ok(_) => format!("[{h}]"),
            Err(_) => h.to_string(),
        };
        match self {
            CheckTarget::Tcp { host: h, port } => write!(f, "tcp://{}:{port}", host(h)),
            CheckTarget::Http {
                host: h,
                port,
                path,
            } => write!(f, "http://{}:{port}{path}", host(h)),
        }
    }
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
    /// Ports listened on at the pod's own address (`$(POD_IP):port` in the
    /// file); [`Config::with_pod_ip`] turns them into `listen` addresses.
    pub pod_ip_ports: Vec<u16>,
    /// Bind the listeners with IP_FREEBIND (addresses that may be added to
    /// an interface later).
    pub freebind: bool,
    /// Client subnets; empty matches any client.
    pub source_subnets: Vec<Cidr>,
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
        Config::from_raw(&RawConfig::load(path)?)
    }

    /// Parses YAML (which includes JSON) and validates it.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        Config::from_raw(&RawConfig::parse(text)?)
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

    /// Binds the `$(POD_IP):port` listeners of every view to `pod_ip`
    /// (appended to `listen`, duplicates skipped).
    pub fn with_pod_ip(mut self, pod_ip: IpAddr) -> Self {
        for v in &mut self.views {
            for port in std::mem::take(&mut v.pod_ip_ports) {
                let addr = SocketAddr::new(pod_ip, port);
                if !v.listen.contains(&addr) {
                    v.listen.push(addr);
                }
            }
        }
        self
    }

    /// The first view that still has `$(POD_IP)` listeners (no pod address
    /// was given), as an error naming it.
    pub fn unbound_pod_ip(&self) -> Result<(), ConfigError> {
        match self.views.iter().position(|v| !v.pod_ip_ports.is_empty()) {
            Some(i) => Err(invalid(
                format!("views[{i}].listen"),
                format!(
                    "`$(POD_IP):{}` needs the pod's address: pass --pod-ip or set POD_IP",
                    self.views[i].pod_ip_ports[0]
                ),
            )),
            None => Ok(()),
        }
    }

    /// Every distinct listener address with whether it binds with
    /// IP_FREEBIND (when any view listing it asks for it), in order of first
    /// appearance.
    pub fn listeners(&self) -> Vec<(SocketAddr, bool)> {
        let mut out: Vec<(SocketAddr, bool)> = Vec::new();
        for v in &self.views {
            for a in &v.listen {
                match out.iter_mut().find(|(b, _)| b == a) {
                    Some((_, freebind)) => *freebind |= v.freebind,
                    None => out.push((*a, v.freebind)),
                }
            }
        }
        out
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
