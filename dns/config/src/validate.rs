//! [`RawConfig::validate`]: the rules a config must meet, applied once.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

use hickory_proto::rr::LowerName;
use ipnet::IpNet;

use crate::clusters::Cluster;
use crate::error::{ConfigError, invalid};
use crate::fields::{add_record, ip, join, name, socket, v4, v6};
use crate::file::{RawChaos, RawConfig, RawHealth, RawHealthCheck, RawUpstreams, RawView};
use crate::model::{
    Chaos, CheckTarget, Config, Health, HealthCheck, RecordSet, Upstreams, View, Zone,
};

/// Default TTL of static answers, in seconds.
pub const DEFAULT_TTL: u32 = 30;
/// Largest accepted TTL, in seconds.
pub const MAX_TTL: u32 = 86_400;
/// Default port of the `http` address.
pub const DEFAULT_HTTP_PORT: u16 = 9153;
/// Longest CHAOS identity string (one TXT character-string).
pub const MAX_CHAOS_BYTES: usize = 255;
/// The host part of a listener on the pod's own address: `$(POD_IP):5353`.
pub const POD_IP: &str = "$(POD_IP)";

impl RawConfig {
    /// Validates into a [`Config`]. Errors name the field and the bad value.
    pub fn validate(&self) -> Result<Config, ConfigError> {
        let ttl = self.ttl.unwrap_or(DEFAULT_TTL);
        if ttl > MAX_TTL {
            return Err(invalid("ttl", format!("{ttl} is above {MAX_TTL}")));
        }
        let http = self
            .http
            .as_deref()
            .map(|s| socket("http", s, DEFAULT_HTTP_PORT))
            .transpose()?;
        let upstreams = upstreams(&self.upstreams)?;
        let chaos = chaos(self.chaos.as_ref())?;
        let health = self.health.as_ref().map(health).transpose()?;
        let clusters = self
            .clusters
            .iter()
            .enumerate()
            .map(|(i, c)| Cluster::parse(i, c))
            .collect::<Result<Vec<_>, _>>()?;
        if self.views.is_empty() {
            return Err(invalid("views", "at least one view is required"));
        }
        let mut views: Vec<View> = Vec::new();
        for (i, v) in self.views.iter().enumerate() {
            let f = format!("views[{i}]");
            if views.iter().any(|o| o.name == v.name) {
                return Err(invalid(
                    format!("{f}.name"),
                    format!("`{}` is used twice", v.name),
                ));
            }
            views.push(view(&f, v, &clusters, ttl)?);
        }
        Ok(Config {
            http,
            upstreams,
            chaos,
            health,
            views,
        })
    }
}

/// An upstream resolver, `ip` (port 53) or `ip:port`, surrounding blanks
/// ignored; port 0 is refused (nothing answers there). The controller checks
/// an Infra's resolvers with this same rule.
/// The error is the message for the field.
pub fn upstream_server(s: &str) -> Result<SocketAddr, String> {
    match socket("", s.trim(), 53) {
        Ok(a) if a.port() != 0 => Ok(a),
        _ => Err(format!("`{s}` is not an `ip` or `ip:port`")),
    }
}

fn upstreams(u: &RawUpstreams) -> Result<Upstreams, ConfigError> {
    let mut servers = Vec::new();
    for (i, s) in u.servers.iter().enumerate() {
        servers
            .push(upstream_server(s).map_err(|m| invalid(format!("upstreams.servers[{i}]"), m))?);
    }
    let timeout_ms = u.timeout_ms.unwrap_or(800);
    if timeout_ms == 0 || timeout_ms > 30_000 {
        return Err(invalid(
            "upstreams.timeout_ms",
            format!("{timeout_ms} is not within 1..=30000"),
        ));
    }
    let down_backoff_ms = u.down_backoff_ms.unwrap_or(1000);
    if down_backoff_ms == 0 || down_backoff_ms > 600_000 {
        return Err(invalid(
            "upstreams.down_backoff_ms",
            format!("{down_backoff_ms} is not within 1..=600000"),
        ));
    }
    let serve_stale_s = u.serve_stale_s.unwrap_or(86_400);
    if serve_stale_s > 604_800 {
        return Err(invalid(
            "upstreams.serve_stale_s",
            format!("{serve_stale_s} is above 604800 (7 days)"),
        ));
    }
    Ok(Upstreams {
        servers,
        resolv_conf: u.resolv_conf,
        timeout: Duration::from_millis(timeout_ms),
        cache_entries: u.cache_entries.unwrap_or(10_000),
        max_cache_ttl: u.max_cache_ttl.unwrap_or(300),
        down_backoff: Duration::from_millis(down_backoff_ms),
        serve_stale: Duration::from_secs(u64::from(serve_stale_s)),
    })
}

/// `value` within `range`, or the error naming `field`.
fn within<T: PartialOrd + std::fmt::Display + Copy>(
    field: &str,
    value: T,
    range: std::ops::RangeInclusive<T>,
) -> Result<T, ConfigError> {
    if range.contains(&value) {
        Ok(value)
    } else {
        Err(invalid(
            field,
            format!("{value} is not within {}..={}", range.start(), range.end()),
        ))
    }
}

fn health(h: &RawHealth) -> Result<Health, ConfigError> {
    let interval_ms = within(
        "health.interval_ms",
        h.interval_ms.unwrap_or(1000),
        100..=60_000,
    )?;
    let timeout_ms = within(
        "health.timeout_ms",
        h.timeout_ms.unwrap_or(500),
        1..=interval_ms,
    )?;
    let fall = within("health.fall", h.fall.unwrap_or(1), 1..=10)?;
    let rise = within("health.rise", h.rise.unwrap_or(1), 1..=10)?;
    let mut checks: Vec<HealthCheck> = Vec::new();
    for (i, c) in h.checks.iter().enumerate() {
        let check = health_check(&format!("health.checks[{i}]"), c)?;
        if checks.iter().any(|o| o.address == check.address) {
            return Err(invalid(
                format!("health.checks[{i}].address"),
                format!("`{}` has a check already", c.address),
            ));
        }
        checks.push(check);
    }
    Ok(Health {
        interval: Duration::from_millis(interval_ms),
        timeout: Duration::from_millis(timeout_ms),
        fall,
        rise,
        checks,
    })
}

fn health_check(f: &str, c: &RawHealthCheck) -> Result<HealthCheck, ConfigError> {
    let address = ip(&format!("{f}.address"), c.address.trim())?;
    let target = match (&c.tcp, &c.http) {
        (Some(t), None) => {
            let field = format!("{f}.tcp");
            let (host, port) = host_port(&field, t.trim(), None)?;
            CheckTarget::Tcp { host, port }
        }
        (None, Some(u)) => http_target(&format!("{f}.http"), u.trim())?,
        _ => return Err(invalid(f, "needs exactly one of `tcp` and `http`")),
    };
    Ok(HealthCheck { address, target })
}

/// `host:port` (host an IP, `[v6]`, or a DNS name); the port may be left out
/// only when `default_port` is given.
fn host_port(
    field: &str,
    s: &str,
    default_port: Option<u16>,
) -> Result<(String, u16), ConfigError> {
    let bad = |why: &str| invalid(field, format!("`{s}` is not a `host:port`: {why}"));
    if let Ok(a) = SocketAddr::from_str(s) {
        if a.port() == 0 {
            return Err(bad("port 0"));
        }
        return Ok((a.ip().to_string(), a.port()));
    }
    let (host, port) = match (s.rsplit_once(':'), default_port) {
        (Some((h, p)), _) if !h.contains(':') || h.ends_with(']') => {
            let port = p
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| bad("the port must be within 1..=65535"))?;
            (h, port)
        }
        (_, Some(port)) => (s, port),
        _ => return Err(bad("no port")),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if IpAddr::from_str(host).is_ok() {
        return Ok((host.to_string(), port));
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    let trimmed = host.strip_suffix('.').unwrap_or(host);
    if trimmed.is_empty() || trimmed.len() > 253 || !trimmed.split('.').all(label_ok) {
        return Err(bad("the host is neither an IP address nor a DNS name"));
    }
    Ok((host.to_string(), port))
}

/// `http://host[:port][/path]`.
fn http_target(field: &str, s: &str) -> Result<CheckTarget, ConfigError> {
    let Some(rest) = s.strip_prefix("http://") else {
        return Err(invalid(
            field,
            format!("`{s}` is not an `http://host[:port]/path` URL (only plain http is checked)"),
        ));
    };
    let (authority, path) = match rest.find('/') {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, "/"),
    };
    if authority.contains('@') {
        return Err(invalid(
            field,
            format!("`{s}`: credentials are not allowed"),
        ));
    }
    if path
        .bytes()
        .any(|b| b.is_ascii_whitespace() || b.is_ascii_control() || b == b'#')
    {
        return Err(invalid(
            field,
            format!("`{s}`: the path has a bad character"),
        ));
    }
    let (host, port) = host_port(field, authority, Some(80))?;
    Ok(CheckTarget::Http {
        host,
        port,
        path: path.to_string(),
    })
}

fn chaos(c: Option<&RawChaos>) -> Result<Chaos, ConfigError> {
    let Some(c) = c else {
        return Ok(Chaos::default());
    };
    let check = |field: &str, s: &Option<String>| match s {
        Some(s) if s.len() > MAX_CHAOS_BYTES => Err(invalid(
            field,
            format!("`{s}` is {} bytes, above {MAX_CHAOS_BYTES}", s.len()),
        )),
        _ => Ok(s.clone()),
    };
    Ok(Chaos {
        version: check("chaos.version", &c.version)?,
        hostname: check("chaos.hostname", &c.hostname)?,
    })
}

fn view(f: &str, v: &RawView, clusters: &[Cluster], ttl: u32) -> Result<View, ConfigError> {
    if v.name.is_empty() {
        return Err(invalid(format!("{f}.name"), "empty"));
    }
    if v.listen.is_empty() {
        return Err(invalid(format!("{f}.listen"), "at least one address"));
    }
    let mut listen = Vec::new();
    let mut pod_ip_ports = Vec::new();
    for (j, s) in v.listen.iter().enumerate() {
        let field = format!("{f}.listen[{j}]");
        match s.trim().strip_prefix(POD_IP) {
            Some(rest) => {
                let port = match rest.strip_prefix(':') {
                    None if rest.is_empty() => 53,
                    Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
                        invalid(&field, format!("`{s}`: the port must be within 1..=65535"))
                    })?,
                    None => {
                        return Err(invalid(
                            &field,
                            format!("`{s}` is not `{POD_IP}` or `{POD_IP}:port`"),
                        ));
                    }
                };
                if !pod_ip_ports.contains(&port) {
                    pod_ip_ports.push(port);
                }
            }
            None => listen.push(socket(&field, s, 53)?),
        }
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
    for c in clusters {
        c.publish(v.kind, ttl, &mut zones, &mut hosts)?;
    }
    for (j, z) in v.zones.iter().enumerate() {
        let zf = format!("{f}.zones[{j}]");
        let origin = name(&format!("{zf}.origin"), &z.origin)?;
        let mut records = BTreeMap::new();
        for (k, r) in z.records.iter().enumerate() {
            let rf = format!("{zf}.records[{k}]");
            let owner = if r.name == "@" {
                origin.clone()
            } else if r.name.ends_with('.') {
                name(&format!("{rf}.name"), &r.name)?
            } else {
                join(&format!("{rf}.name"), &r.name, &origin)?
            };
            if !origin.zone_of(&owner) {
                return Err(invalid(
                    format!("{rf}.name"),
                    format!("`{owner}` is outside the zone `{origin}`"),
                ));
            }
            let mut set = RecordSet {
                ttl: r.ttl.unwrap_or(ttl),
                ..RecordSet::default()
            };
            for (m, s) in r.a.iter().enumerate() {
                set.a.push(v4(&format!("{rf}.a[{m}]"), s)?);
            }
            for (m, s) in r.aaaa.iter().enumerate() {
                set.aaaa.push(v6(&format!("{rf}.aaaa[{m}]"), s)?);
            }
            if set.a.is_empty() && set.aaaa.is_empty() {
                return Err(invalid(&rf, "a record needs `a` or `aaaa` addresses"));
            }
            add_record(&mut records, &rf, &owner, set)?;
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
    Ok(View {
        name: v.name.clone(),
        listen,
        pod_ip_ports,
        freebind: v.freebind,
        source_subnets,
        zones,
        hosts,
    })
}
