//! [`Config::from_raw`]: the rules across fields a config must meet,
//! applied once to the typed fields of the file.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::rr::LowerName;

use crate::addresses::{IpPort, ListenAddress};
use crate::clusters::Cluster;
use crate::error::{ConfigError, invalid};
use crate::fields::{add_record, join, name};
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
impl Config {
    /// Checks the rules across fields of a parsed file and builds the
    /// config the server answers from. Errors name the field and the bad
    /// value.
    pub fn from_raw(raw: &RawConfig) -> Result<Config, ConfigError> {
        let ttl = raw.ttl.unwrap_or(DEFAULT_TTL);
        if ttl > MAX_TTL {
            return Err(invalid("ttl", format!("{ttl} is above {MAX_TTL}")));
        }
        let http = raw.http.map(|a| a.or_port(DEFAULT_HTTP_PORT));
        let upstreams = upstreams(&raw.upstreams)?;
        let chaos = chaos(raw.chaos.as_ref())?;
        let health = raw.health.as_ref().map(health).transpose()?;
        let clusters = raw
            .clusters
            .iter()
            .enumerate()
            .map(|(i, c)| Cluster::parse(i, c))
            .collect::<Result<Vec<_>, _>>()?;
        if raw.views.is_empty() {
            return Err(invalid("views", "at least one view is required"));
        }
        let mut views: Vec<View> = Vec::new();
        for (i, v) in raw.views.iter().enumerate() {
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
    s.parse::<IpPort>()
        .ok()
        .and_then(|a| upstream_port(&a).ok())
        .ok_or_else(|| format!("`{s}` is not an `ip` or `ip:port`"))
}

/// The socket address of an upstream: port 53 when none is written, port 0
/// refused (nothing answers there).
fn upstream_port(a: &IpPort) -> Result<SocketAddr, String> {
    match a.or_port(53) {
        s if s.port() == 0 => Err(format!("`{a}` is not an `ip` or `ip:port`: port 0")),
        s => Ok(s),
    }
}

fn upstreams(u: &RawUpstreams) -> Result<Upstreams, ConfigError> {
    let mut servers = Vec::new();
    for (i, a) in u.servers.iter().enumerate() {
        servers.push(upstream_port(a).map_err(|m| invalid(format!("upstreams.servers[{i}]"), m))?);
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
    let target = match (&c.tcp, &c.http) {
        (Some(t), None) => CheckTarget::Tcp {
            host: t.host.clone(),
            port: t.port,
        },
        (None, Some(u)) => CheckTarget::Http {
            host: u.host.clone(),
            port: u.port_or_default(),
            path: u.path.clone(),
        },
        _ => return Err(invalid(f, "needs exactly one of `tcp` and `http`")),
    };
    Ok(HealthCheck {
        address: c.address,
        target,
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
    for a in &v.listen {
        match a {
            ListenAddress::PodIp(port) => {
                let port = port.unwrap_or(53);
                if !pod_ip_ports.contains(&port) {
                    pod_ip_ports.push(port);
                }
            }
            ListenAddress::Ip(a) => listen.push(a.or_port(53)),
        }
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
            set.a.clone_from(&r.a);
            set.aaaa.clone_from(&r.aaaa);
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
        source_subnets: v.source_subnets.clone(),
        zones,
        hosts,
    })
}
