//! The checked configuration the server runs on.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::Path;

use ipnet::Ipv4Net;

use crate::{ConfigError, Mac, RawConfig, Role, UnknownClients};

/// How long an offer waits for an ICMP echo answer by default, ms: a host
/// on the same link answers within a millisecond or two; half a second
/// leaves room for a busy or sleepy host without making a client retransmit.
pub const DEFAULT_PROBE_TIMEOUT_MS: u32 = 500;
/// Longest probe wait accepted, ms.
pub const MAX_PROBE_TIMEOUT_MS: u32 = 3000;

/// The VLAN witness's port: the port IANA assigned to DHCP failover
/// (`dhcp-failover`, 647), which nothing else on a worker VLAN uses.
pub const DEFAULT_VLAN_PORT: u16 = 647;

/// The checked pair settings.
#[derive(Clone, PartialEq, Eq)]
pub struct Peer {
    /// This server's role.
    pub role: Role,
    /// The other server's VLAN address.
    pub server_ip: Ipv4Addr,
    /// The other server's pair API, `host:port`.
    pub api: String,
    /// Where this server's pair API listens.
    pub listen: std::net::SocketAddr,
    /// The shared token (read from the token file at load).
    pub token: String,
    /// Heartbeat interval.
    pub heartbeat_ms: u32,
    /// Silence after which a witness (the pair link, the VLAN) counts the
    /// other server as unreachable.
    pub down_after_ms: u32,
    /// UDP port of the VLAN witness: each server sends its heartbeat
    /// datagrams from and to this port on the two VLAN addresses.
    pub vlan_port: u16,
    /// How long a client must have been asking (its `secs` field) to count
    /// as unanswered (a metric: it moves no state).
    pub unacked_wait_ms: u32,
}

/// A checked reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    /// Address reserved for the MAC.
    pub ip: Ipv4Addr,
    /// Host name (option 12), when configured.
    pub hostname: Option<String>,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer")
            .field("role", &self.role)
            .field("server_ip", &self.server_ip)
            .field("api", &self.api)
            .field("listen", &self.listen)
            .field("token", &"<redacted>")
            .field("heartbeat_ms", &self.heartbeat_ms)
            .field("down_after_ms", &self.down_after_ms)
            .field("vlan_port", &self.vlan_port)
            .field("unacked_wait_ms", &self.unacked_wait_ms)
            .finish()
    }
}

/// The checked configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Interface for SO_BINDTODEVICE, if any.
    pub interface: Option<String>,
    /// Server identifier and source address.
    pub server_ip: Ipv4Addr,
    /// The subnet every address lives in (passed the subnet rule).
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
    /// Clients known without a fixed address, by MAC, with their host name.
    pub known_clients: BTreeMap<Mac, Option<String>>,
    /// What clients neither reserved nor known get.
    pub unknown_clients: UnknownClients,
    /// Quarantine after DECLINE, seconds.
    pub decline_quarantine_seconds: u32,
    /// How long an offer of an address with no known binding waits for an
    /// ICMP echo answer (someone already using it); zero: no probe.
    pub probe_timeout: std::time::Duration,
    /// The other server of a pair, if any.
    pub peer: Option<Peer>,
}

fn valid_label(l: &str) -> bool {
    !l.is_empty() && l.len() <= 63 && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

impl Config {
    /// Reads and checks a YAML file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::from_raw(&RawConfig::load(path)?)
    }

    /// Parses and checks YAML text.
    pub fn from_yaml(text: &str) -> Result<Config, ConfigError> {
        Config::from_raw(&RawConfig::from_yaml(text)?)
    }

    /// Checks a document across its fields.
    pub fn from_raw(raw: &RawConfig) -> Result<Config, ConfigError> {
        let subnet = raw.subnet;
        let server_ip = raw.server_ip;
        subnet.check_host("server_ip", server_ip)?;
        if let Some(g) = raw.gateway {
            subnet.check_host("gateway", g)?;
        }
        let gateway = raw.gateway;
        let (range_start, range_end) = (raw.range.start, raw.range.end);
        subnet.check_pool("range.start", range_start, "range.end", range_end)?;
        let mut excluded: BTreeSet<Ipv4Addr> = raw.excluded.iter().copied().collect();
        excluded.insert(server_ip);
        excluded.extend(gateway);
        let domain = match &raw.domain {
            Some(d) => {
                let d = d.trim().trim_end_matches('.');
                if d.is_empty() || d.len() > 253 || !d.split('.').all(valid_label) {
                    return Err(ConfigError::new(
                        "domain",
                        format!("`{d}` is not a valid domain name"),
                    ));
                }
                Some(d.to_string())
            }
            None => None,
        };
        let lease_seconds = raw.lease_seconds.unwrap_or(3600);
        if lease_seconds < 60 {
            return Err(ConfigError::new(
                "lease_seconds",
                format!("{lease_seconds} is below the minimum of 60"),
            ));
        }
        let t1_seconds = raw.t1_seconds.unwrap_or(lease_seconds / 2);
        let t2_seconds = raw
            .t2_seconds
            .unwrap_or((u64::from(lease_seconds) * 7 / 8) as u32);
        if t1_seconds == 0 || t1_seconds >= lease_seconds {
            return Err(ConfigError::new(
                "t1_seconds",
                format!("{t1_seconds} must be above 0 and below lease_seconds {lease_seconds}"),
            ));
        }
        if t2_seconds <= t1_seconds || t2_seconds >= lease_seconds {
            return Err(ConfigError::new(
                "t2_seconds",
                format!(
                    "{t2_seconds} must be above t1_seconds {t1_seconds} and below lease_seconds {lease_seconds}"
                ),
            ));
        }
        if let Some(m) = raw.mtu
            && m < 68
        {
            return Err(ConfigError::new(
                "mtu",
                format!("{m} is below the minimum of 68"),
            ));
        }
        let mut classless_routes = Vec::new();
        for (i, r) in raw.classless_routes.iter().enumerate() {
            if !subnet.net().contains(&r.gateway) {
                return Err(ConfigError::new(
                    format!("classless_routes[{i}].gateway"),
                    format!("{} is not inside subnet {subnet}", r.gateway),
                ));
            }
            classless_routes.push((r.destination.trunc(), r.gateway));
        }
        let probe_ms = raw.probe_timeout_ms.unwrap_or(DEFAULT_PROBE_TIMEOUT_MS);
        if probe_ms > MAX_PROBE_TIMEOUT_MS {
            return Err(ConfigError::new(
                "probe_timeout_ms",
                format!(
                    "{probe_ms} is above the maximum of {MAX_PROBE_TIMEOUT_MS} (a client retransmits its DISCOVER after about 4 s)"
                ),
            ));
        }
        let reservations = reservations(raw, &excluded)?;
        let known_clients = known_clients(raw, &reservations)?;
        excluded.extend(reservations.values().map(|r| r.ip));
        let peer = match &raw.peer {
            Some(p) => Some(peer(raw, p, &mut excluded)?),
            None => None,
        };
        Ok(Config {
            interface: raw.interface.clone().filter(|s| !s.is_empty()),
            server_ip,
            subnet: subnet.net(),
            gateway,
            range_start,
            range_end,
            excluded,
            dns_servers: raw.dns_servers.clone(),
            domain,
            lease_seconds,
            t1_seconds,
            t2_seconds,
            mtu: raw.mtu,
            classless_routes,
            reservations,
            known_clients,
            unknown_clients: raw.unknown_clients,
            decline_quarantine_seconds: raw.decline_quarantine_seconds.unwrap_or(600),
            probe_timeout: std::time::Duration::from_millis(u64::from(probe_ms)),
            peer,
        })
    }

    /// The host name (option 12) of `mac`: its reservation's, else its
    /// known client entry's.
    pub fn hostname(&self, mac: &Mac) -> Option<&str> {
        match self.reservations.get(mac) {
            Some(r) => r.hostname.as_deref(),
            None => self.known_clients.get(mac)?.as_deref(),
        }
    }

    /// True when `mac` may get an address: always under `unknown_clients:
    /// pool`, else only when it is reserved or known.
    pub fn serves(&self, mac: &Mac) -> bool {
        self.unknown_clients == UnknownClients::Pool
            || self.reservations.contains_key(mac)
            || self.known_clients.contains_key(mac)
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

/// The pair rule: the other server is another host address of the subnet
/// (never leased), its API is `host:port`, the token file holds a token,
/// and the other server counts as down only after several heartbeats.
fn peer(
    raw: &RawConfig,
    p: &crate::RawPeer,
    excluded: &mut BTreeSet<Ipv4Addr>,
) -> Result<Peer, ConfigError> {
    raw.subnet.check_host("peer.server_ip", p.server_ip)?;
    if p.server_ip == raw.server_ip {
        return Err(ConfigError::new(
            "peer.server_ip",
            format!("{} is this server's own address", p.server_ip),
        ));
    }
    if raw.reservations.iter().any(|r| r.ip == p.server_ip) {
        return Err(ConfigError::new(
            "peer.server_ip",
            format!("{} is reserved for a client", p.server_ip),
        ));
    }
    excluded.insert(p.server_ip);
    let api = p.api.trim();
    let port_ok = api
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|n| n > 0));
    if !port_ok || api.contains('/') {
        return Err(ConfigError::new(
            "peer.api",
            format!("`{}` is not `host:port`", p.api),
        ));
    }
    let token = std::fs::read_to_string(&p.token_file)
        .map_err(|e| {
            ConfigError::new(
                "peer.token_file",
                format!("cannot read {}: {e}", p.token_file.display()),
            )
        })?
        .trim()
        .to_string();
    if token.len() < 16 {
        return Err(ConfigError::new(
            "peer.token_file",
            format!(
                "{} holds a token of {} characters; at least 16 are needed",
                p.token_file.display(),
                token.len()
            ),
        ));
    }
    let heartbeat_ms = p.heartbeat_ms.unwrap_or(500);
    let down_after_ms = p.down_after_ms.unwrap_or(3000);
    if heartbeat_ms < 50 {
        return Err(ConfigError::new(
            "peer.heartbeat_ms",
            format!("{heartbeat_ms} is below the minimum of 50"),
        ));
    }
    if down_after_ms < 2 * heartbeat_ms {
        return Err(ConfigError::new(
            "peer.down_after_ms",
            format!("{down_after_ms} must be at least twice heartbeat_ms {heartbeat_ms}"),
        ));
    }
    // Not a setting: both servers must agree on it, and nothing else on a
    // worker VLAN uses it.
    let vlan_port = DEFAULT_VLAN_PORT;
    // Kea's `max-ack-delay` default: a client asking for 10 s went
    // unanswered.
    let unacked_wait_ms = 10_000;
    Ok(Peer {
        vlan_port,
        unacked_wait_ms,
        role: p.role,
        server_ip: p.server_ip,
        api: api.to_string(),
        listen: p.listen,
        token,
        heartbeat_ms,
        down_after_ms,
    })
}

/// The reservation rule: one address per MAC, a host address of the
/// subnet, never an infra address (`infra`: server, gateway, excluded), never
/// the same address for two MACs.
fn reservations(
    raw: &RawConfig,
    infra: &BTreeSet<Ipv4Addr>,
) -> Result<BTreeMap<Mac, Reservation>, ConfigError> {
    let mut out = BTreeMap::new();
    let mut reserved_ips = BTreeSet::new();
    for (i, r) in raw.reservations.iter().enumerate() {
        if out.contains_key(&r.mac) {
            return Err(ConfigError::new(
                format!("reservations[{i}].mac"),
                format!("{} is reserved twice", r.mac),
            ));
        }
        let f = format!("reservations[{i}].ip");
        raw.subnet.check_host(&f, r.ip)?;
        if infra.contains(&r.ip) {
            return Err(ConfigError::new(f, format!("{} is an infra address", r.ip)));
        }
        if !reserved_ips.insert(r.ip) {
            return Err(ConfigError::new(
                f,
                format!("{} is reserved for two MACs", r.ip),
            ));
        }
        let hostname = match &r.hostname {
            Some(h) => {
                let h = h.trim();
                if !valid_label(h) {
                    return Err(ConfigError::new(
                        format!("reservations[{i}].hostname"),
                        format!("`{h}` is not a valid host name"),
                    ));
                }
                Some(h.to_string())
            }
            None => None,
        };
        out.insert(r.mac, Reservation { ip: r.ip, hostname });
    }
    Ok(out)
}

fn host_name(field: String, h: &str) -> Result<String, ConfigError> {
    let h = h.trim();
    if !valid_label(h) {
        return Err(ConfigError::new(
            field,
            format!("`{h}` is not a valid host name"),
        ));
    }
    Ok(h.to_string())
}

/// Known clients: distinct MACs, none of them also reserved (a reservation
/// says everything a known client entry would).
fn known_clients(
    raw: &RawConfig,
    reservations: &BTreeMap<Mac, Reservation>,
) -> Result<BTreeMap<Mac, Option<String>>, ConfigError> {
    let mut out = BTreeMap::new();
    for (i, k) in raw.known_clients.iter().enumerate() {
        if reservations.contains_key(&k.mac) || out.contains_key(&k.mac) {
            return Err(ConfigError::new(
                format!("known_clients[{i}].mac"),
                format!("{} is listed twice (here, or in reservations)", k.mac),
            ));
        }
        let hostname = match &k.hostname {
            Some(h) => Some(host_name(format!("known_clients[{i}].hostname"), h)?),
            None => None,
        };
        out.insert(k.mac, hostname);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"
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

    #[test]
    fn probe_timeout_defaults_to_half_a_second_zero_turns_it_off_and_too_long_is_refused() {
        let c = Config::from_yaml(SAMPLE).unwrap();
        assert_eq!(c.probe_timeout, std::time::Duration::from_millis(500));
        let off = Config::from_yaml(&format!("{SAMPLE}probe_timeout_ms: 0\n")).unwrap();
        assert!(off.probe_timeout.is_zero());
        let e = fails(
            &format!("{SAMPLE}probe_timeout_ms: 10000\n"),
            "probe_timeout_ms",
        );
        assert!(e.to_string().contains("10000"), "{e}");
    }

    fn fails(yaml: &str, field: &str) -> ConfigError {
        let e = Config::from_yaml(yaml).unwrap_err();
        assert_eq!(e.field, field, "{e}");
        e
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
        fails(
            &SAMPLE.replace("dns_servers: [192.0.2.3]", "dns_servers: [192.0.2.3, x]"),
            "dns_servers[1]",
        );
        // An unknown field is named itself.
        fails("bogus: 1", "bogus");
        fails("server_ip: [", "server_ip");
        fails("[1, 2", "file");
    }

    #[test]
    fn errors_carry_the_bad_value() {
        let e = fails(&SAMPLE.replace("192.0.2.0/24", "192.0.2.9/24"), "subnet");
        assert!(e.message.contains("192.0.2.9/24"), "{e}");
        let e = fails(
            &SAMPLE.replace("02:00:00:00:00:01", "zz"),
            "reservations[0].mac",
        );
        assert!(e.message.contains("`zz`"), "{e}");
    }

    #[test]
    fn raw_config_round_trips_through_yaml() {
        let c = Config::from_yaml(SAMPLE).unwrap();
        let raw = RawConfig::from_yaml(SAMPLE).unwrap();
        let text = raw.to_yaml().unwrap();
        assert_eq!(Config::from_yaml(&text).unwrap(), c);
    }

    #[test]
    fn schema_describes_typed_fields_and_refuses_unknown_ones() {
        let s = serde_json::to_value(schemars::schema_for!(RawConfig)).unwrap();
        let props = &s["properties"];
        assert_eq!(props["subnet"]["type"], "string");
        assert_eq!(props["server_ip"]["format"], "ipv4");
        assert_eq!(s["additionalProperties"], false);
        let required: Vec<&str> = s["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(required, vec!["server_ip", "subnet", "range"]);
    }
}
