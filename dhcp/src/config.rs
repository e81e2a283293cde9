//! Typed configuration of the DHCP server.
//!
//! The file is YAML (a mounted ConfigMap in the cluster). It is parsed into
//! [`RawConfig`] (plain strings and numbers, exactly what the file says) and
//! then turned into a [`Config`] once, at the edge, by [`Config::from_raw`].
//! Every error names the field and the bad value, so a rejected reload says
//! precisely what to fix. The controller renders [`RawConfig`] with serde.
//!
//! ```yaml
//! interface: net1
//! server_ip: 192.0.2.2
//! subnet: 192.0.2.0/24
//! gateway: 192.0.2.1
//! range: { start: 192.0.2.100, end: 192.0.2.199 }
//! excluded: [192.0.2.3, 192.0.2.4]
//! dns_servers: [192.0.2.3]
//! domain: cluster.example
//! lease_seconds: 3600
//! mtu: 1450
//! classless_routes:
//!   - { destination: 10.0.0.0/8, gateway: 192.0.2.1 }
//! reservations:
//!   - { mac: "02:00:00:00:00:01", ip: 192.0.2.50, hostname: worker-0 }
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::Path;

use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};

/// A validation or parse error. `field` is the dotted path of the offending
/// field (for example `reservations[2].mac`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("config field `{field}`: {message}")]
pub struct ConfigError {
    /// Dotted path of the field at fault (`file` for I/O and YAML syntax errors).
    pub field: String,
    /// What is wrong, including the bad value.
    pub message: String,
}

fn err(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError {
        field: field.into(),
        message: message.into(),
    }
}

/// The file as written: strings and numbers, no meaning checked yet.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// Interface to listen on (SO_BINDTODEVICE). Optional: without it the
    /// server listens on every interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// The server's own address on the VLAN; sent as option 54.
    pub server_ip: String,
    /// The VLAN subnet in CIDR form, e.g. `192.0.2.0/24`.
    pub subnet: String,
    /// Default gateway handed to clients (option 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    /// Dynamic pool, inclusive at both ends, inside `subnet`.
    pub range: RawRange,
    /// Infra addresses never handed out (DNS, proxy, VIPs). The server and
    /// gateway addresses are always excluded as well.
    #[serde(default)]
    pub excluded: Vec<String>,
    /// DNS servers (option 6).
    #[serde(default)]
    pub dns_servers: Vec<String>,
    /// Domain name (option 15).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// Lease time in seconds (option 51). Default 3600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_seconds: Option<u32>,
    /// Renewal time T1 in seconds (option 58). Default half the lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t1_seconds: Option<u32>,
    /// Rebinding time T2 in seconds (option 59). Default 7/8 of the lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t2_seconds: Option<u32>,
    /// Interface MTU (option 26).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u16>,
    /// Classless static routes (option 121, RFC 3442).
    #[serde(default)]
    pub classless_routes: Vec<RawRoute>,
    /// Fixed addresses by MAC.
    #[serde(default)]
    pub reservations: Vec<RawReservation>,
    /// How long a DECLINEd address stays out of the pool. Default 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decline_quarantine_seconds: Option<u32>,
}

/// Pool bounds as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRange {
    /// First address of the pool.
    pub start: String,
    /// Last address of the pool (inclusive).
    pub end: String,
}

/// A classless static route as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    /// Destination network in CIDR form.
    pub destination: String,
    /// Next hop, inside the subnet.
    pub gateway: String,
}

/// A reservation as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReservation {
    /// Client hardware address, `aa:bb:cc:dd:ee:ff` (or with `-`).
    pub mac: String,
    /// Address always given to this MAC.
    pub ip: String,
    /// Host name sent as option 12.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
}

/// A 48-bit Ethernet hardware address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Mac(pub [u8; 6]);

impl Mac {
    /// Parses `aa:bb:cc:dd:ee:ff` or `aa-bb-cc-dd-ee-ff` (case-insensitive).
    pub fn parse(s: &str) -> Option<Mac> {
        let parts: Vec<&str> = s.split([':', '-']).collect();
        if parts.len() != 6 {
            return None;
        }
        let mut out = [0u8; 6];
        for (i, p) in parts.iter().enumerate() {
            if p.len() != 2 {
                return None;
            }
            out[i] = u8::from_str_radix(p, 16).ok()?;
        }
        Some(Mac(out))
    }
}

impl std::fmt::Display for Mac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

/// A validated reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    /// Address reserved for the MAC.
    pub ip: Ipv4Addr,
    /// Host name (option 12), when configured.
    pub hostname: Option<String>,
}

/// The validated configuration the server runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Interface for SO_BINDTODEVICE, if any.
    pub interface: Option<String>,
    /// Server identifier and source address.
    pub server_ip: Ipv4Addr,
    /// The subnet every address lives in.
    pub subnet: Ipv4Net,
    /// Default gateway.
    pub gateway: Option<Ipv4Addr>,
    /// First pool address.
    pub range_start: Ipv4Addr,
    /// Last pool address (inclusive).
    pub range_end: Ipv4Addr,
    /// Addresses never leased dynamically: the configured list plus the
    /// server, the gateway and every reserved address.
    pub excluded: BTreeSet<Ipv4Addr>,
    /// DNS servers.
    pub dns_servers: Vec<Ipv4Addr>,
    /// Domain name.
    pub domain: Option<String>,
    /// Lease time, seconds.
    pub lease_seconds: u32,
    /// T1, seconds.
    pub t1_seconds: u32,
    /// T2, seconds.
    pub t2_seconds: u32,
    /// Interface MTU.
    pub mtu: Option<u16>,
    /// Classless static routes.
    pub classless_routes: Vec<(Ipv4Net, Ipv4Addr)>,
    /// Reservations by MAC.
    pub reservations: BTreeMap<Mac, Reservation>,
    /// Quarantine after DECLINE, seconds.
    pub decline_quarantine_seconds: u32,
}

fn ip(field: &str, s: &str) -> Result<Ipv4Addr, ConfigError> {
    s.trim()
        .parse()
        .map_err(|_| err(field, format!("`{s}` is not an IPv4 address")))
}

fn in_subnet(field: &str, subnet: &Ipv4Net, a: Ipv4Addr) -> Result<(), ConfigError> {
    if !subnet.contains(&a) || a == subnet.network() || a == subnet.broadcast() {
        return Err(err(
            field,
            format!("{a} is not a host address of subnet {subnet}"),
        ));
    }
    Ok(())
}

impl Config {
    /// Reads and validates a YAML file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| err("file", format!("cannot read {}: {e}", path.display())))?;
        Config::from_yaml(&text)
    }

    /// Parses and validates YAML text.
    pub fn from_yaml(text: &str) -> Result<Config, ConfigError> {
        let raw: RawConfig =
            serde_saphyr::from_str(text).map_err(|e| err("file", format!("invalid YAML: {e}")))?;
        Config::from_raw(&raw)
    }

    /// Validates a [`RawConfig`].
    pub fn from_raw(raw: &RawConfig) -> Result<Config, ConfigError> {
        let subnet: Ipv4Net = raw
            .subnet
            .trim()
            .parse()
            .map_err(|_| err("subnet", format!("`{}` is not an IPv4 CIDR", raw.subnet)))?;
        if subnet.prefix_len() > 30 {
            return Err(err(
                "subnet",
                format!("{subnet} is too small (prefix > 30)"),
            ));
        }
        let subnet = subnet.trunc();
        let server_ip = ip("server_ip", &raw.server_ip)?;
        in_subnet("server_ip", &subnet, server_ip)?;
        let gateway = match &raw.gateway {
            Some(g) => {
                let g = ip("gateway", g)?;
                in_subnet("gateway", &subnet, g)?;
                Some(g)
            }
            None => None,
        };
        let range_start = ip("range.start", &raw.range.start)?;
        in_subnet("range.start", &subnet, range_start)?;
        let range_end = ip("range.end", &raw.range.end)?;
        in_subnet("range.end", &subnet, range_end)?;
        if u32::from(range_end) < u32::from(range_start) {
            return Err(err(
                "range.end",
                format!("{range_end} is before range.start {range_start}"),
            ));
        }
        let mut excluded = BTreeSet::new();
        for (i, e) in raw.excluded.iter().enumerate() {
            excluded.insert(ip(&format!("excluded[{i}]"), e)?);
        }
        excluded.insert(server_ip);
        if let Some(g) = gateway {
            excluded.insert(g);
        }
        let mut dns_servers = Vec::new();
        for (i, d) in raw.dns_servers.iter().enumerate() {
            dns_servers.push(ip(&format!("dns_servers[{i}]"), d)?);
        }
        let domain = match &raw.domain {
            Some(d) => {
                let d = d.trim().trim_end_matches('.');
                if d.is_empty()
                    || d.len() > 253
                    || !d.split('.').all(|l| {
                        !l.is_empty()
                            && l.len() <= 63
                            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                    })
                {
                    return Err(err("domain", format!("`{d}` is not a valid domain name")));
                }
                Some(d.to_string())
            }
            None => None,
        };
        let lease_seconds = raw.lease_seconds.unwrap_or(3600);
        if lease_seconds < 60 {
            return Err(err(
                "lease_seconds",
                format!("{lease_seconds} is below the minimum of 60"),
            ));
        }
        let t1_seconds = raw.t1_seconds.unwrap_or(lease_seconds / 2);
        let t2_seconds = raw
            .t2_seconds
            .unwrap_or((u64::from(lease_seconds) * 7 / 8) as u32);
        if t1_seconds == 0 || t1_seconds >= lease_seconds {
            return Err(err(
                "t1_seconds",
                format!("{t1_seconds} must be above 0 and below lease_seconds {lease_seconds}"),
            ));
        }
        if t2_seconds <= t1_seconds || t2_seconds >= lease_seconds {
            return Err(err(
                "t2_seconds",
                format!(
                    "{t2_seconds} must be above t1_seconds {t1_seconds} and below lease_seconds {lease_seconds}"
                ),
            ));
        }
        if let Some(m) = raw.mtu
            && m < 68
        {
            return Err(err("mtu", format!("{m} is below the minimum of 68")));
        }
        let mut classless_routes = Vec::new();
        for (i, r) in raw.classless_routes.iter().enumerate() {
            let f = format!("classless_routes[{i}].destination");
            let dest: Ipv4Net = r
                .destination
                .trim()
                .parse()
                .map_err(|_| err(&f, format!("`{}` is not an IPv4 CIDR", r.destination)))?;
            let f = format!("classless_routes[{i}].gateway");
            let gw = ip(&f, &r.gateway)?;
            if !subnet.contains(&gw) {
                return Err(err(f, format!("{gw} is not inside subnet {subnet}")));
            }
            classless_routes.push((dest.trunc(), gw));
        }
        let mut reservations = BTreeMap::new();
        let mut reserved_ips = BTreeSet::new();
        for (i, r) in raw.reservations.iter().enumerate() {
            let f = format!("reservations[{i}].mac");
            let mac = Mac::parse(r.mac.trim())
                .ok_or_else(|| err(&f, format!("`{}` is not a MAC", r.mac)))?;
            if reservations.contains_key(&mac) {
                return Err(err(f, format!("{mac} is reserved twice")));
            }
            let f = format!("reservations[{i}].ip");
            let a = ip(&f, &r.ip)?;
            in_subnet(&f, &subnet, a)?;
            if a == server_ip || Some(a) == gateway || excluded.contains(&a) {
                return Err(err(f, format!("{a} is an infra address")));
            }
            if !reserved_ips.insert(a) {
                return Err(err(f, format!("{a} is reserved for two MACs")));
            }
            let hostname = match &r.hostname {
                Some(h) => {
                    let h = h.trim();
                    if h.is_empty()
                        || h.len() > 63
                        || !h.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                    {
                        return Err(err(
                            format!("reservations[{i}].hostname"),
                            format!("`{h}` is not a valid host name"),
                        ));
                    }
                    Some(h.to_string())
                }
                None => None,
            };
            reservations.insert(mac, Reservation { ip: a, hostname });
        }
        excluded.extend(reserved_ips);
        Ok(Config {
            interface: raw.interface.clone().filter(|s| !s.is_empty()),
            server_ip,
            subnet,
            gateway,
            range_start,
            range_end,
            excluded,
            dns_servers,
            domain,
            lease_seconds,
            t1_seconds,
            t2_seconds,
            mtu: raw.mtu,
            classless_routes,
            reservations,
            decline_quarantine_seconds: raw.decline_quarantine_seconds.unwrap_or(600),
        })
    }

    /// Addresses of the dynamic pool, in order, minus the excluded ones.
    pub fn pool(&self) -> impl Iterator<Item = Ipv4Addr> + '_ {
        (u32::from(self.range_start)..=u32::from(self.range_end))
            .map(Ipv4Addr::from)
            .filter(|a| !self.excluded.contains(a))
    }

    /// Number of addresses in the dynamic pool.
    pub fn pool_size(&self) -> usize {
        self.pool().count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const SAMPLE: &str = r#"
interface: net1
server_ip: 192.0.2.2
subnet: 192.0.2.0/24
gateway: 192.0.2.1
range: { start: 192.0.2.100, end: 192.0.2.110 }
excluded: [192.0.2.3, 192.0.2.105]
dns_servers: [192.0.2.3]
domain: cluster.example
lease_seconds: 3600
mtu: 1450
classless_routes:
  - { destination: 10.0.0.0/8, gateway: 192.0.2.1 }
reservations:
  - { mac: "02:00:00:00:00:01", ip: 192.0.2.50, hostname: worker-0 }
"#;

    #[test]
    fn sample_config_parses_with_defaults() {
        let c = Config::from_yaml(SAMPLE).unwrap();
        assert_eq!(c.t1_seconds, 1800);
        assert_eq!(c.t2_seconds, 3150);
        assert_eq!(c.pool_size(), 10);
        assert!(c.excluded.contains(&"192.0.2.50".parse().unwrap()));
        let mac = Mac::parse("02:00:00:00:00:01").unwrap();
        assert_eq!(c.reservations[&mac].hostname.as_deref(), Some("worker-0"));
    }

    fn fails(yaml: &str, field: &str) {
        let e = Config::from_yaml(yaml).unwrap_err();
        assert_eq!(e.field, field, "{e}");
    }

    #[test]
    fn errors_name_the_field() {
        fails(&SAMPLE.replace("192.0.2.0/24", "192.0.2.0/33"), "subnet");
        fails(
            &SAMPLE.replace("server_ip: 192.0.2.2", "server_ip: 10.1.1.1"),
            "server_ip",
        );
        fails(
            &SAMPLE.replace("end: 192.0.2.110", "end: 192.0.2.90"),
            "range.end",
        );
        fails(
            &SAMPLE.replace("02:00:00:00:00:01", "zz"),
            "reservations[0].mac",
        );
        fails(
            &SAMPLE.replace("ip: 192.0.2.50", "ip: 192.0.2.3"),
            "reservations[0].ip",
        );
        fails(&SAMPLE.replace("mtu: 1450", "mtu: 20"), "mtu");
        fails(
            &SAMPLE.replace(
                "lease_seconds: 3600",
                "lease_seconds: 3600\nt1_seconds: 4000",
            ),
            "t1_seconds",
        );
        fails(
            &SAMPLE.replace("domain: cluster.example", "domain: bad_domain!"),
            "domain",
        );
        fails(
            &SAMPLE.replace("10.0.0.0/8", "nope"),
            "classless_routes[0].destination",
        );
        fails("bogus: 1", "file");
    }

    #[test]
    fn raw_config_round_trips_through_yaml() {
        let c = Config::from_yaml(SAMPLE).unwrap();
        let raw: RawConfig = serde_saphyr::from_str(SAMPLE).unwrap();
        let text = serde_saphyr::to_string(&raw).unwrap();
        assert_eq!(Config::from_yaml(&text).unwrap(), c);
    }
}
