//! [`RawConfig::validate`]: the rules a config must meet, applied once.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use hickory_proto::rr::LowerName;
use ipnet::IpNet;

use crate::clusters::Cluster;
use crate::error::{ConfigError, invalid};
use crate::fields::{add_record, join, name, socket, v4, v6};
use crate::file::{RawChaos, RawConfig, RawUpstreams, RawView};
use crate::model::{Chaos, Config, RecordSet, Upstreams, View, Zone};

/// Default TTL of static answers, in seconds.
pub const DEFAULT_TTL: u32 = 30;
/// Largest accepted TTL, in seconds.
pub const MAX_TTL: u32 = 86_400;
/// Default port of the `http` address.
pub const DEFAULT_HTTP_PORT: u16 = 9153;
/// Longest CHAOS identity string (one TXT character-string).
pub const MAX_CHAOS_BYTES: usize = 255;

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
    Ok(Upstreams {
        servers,
        resolv_conf: u.resolv_conf,
        timeout: Duration::from_millis(timeout_ms),
        cache_entries: u.cache_entries.unwrap_or(10_000),
        max_cache_ttl: u.max_cache_ttl.unwrap_or(300),
        down_backoff: Duration::from_millis(u.down_backoff_ms.unwrap_or(1000)),
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
    for (j, s) in v.listen.iter().enumerate() {
        listen.push(socket(&format!("{f}.listen[{j}]"), s, 53)?);
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
        source_subnets,
        zones,
        hosts,
    })
}
