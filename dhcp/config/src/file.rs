//! The file as written: each field parsed to its type, nothing checked
//! across fields yet.

use std::net::Ipv4Addr;
use std::path::Path;

use ipnet::Ipv4Net;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{ConfigError, Mac, Subnet};

/// The config document. The controller renders it with serde; the server
/// reads it with [`RawConfig::from_yaml`] and checks it with
/// [`crate::Config::from_raw`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// Interface to listen on (SO_BINDTODEVICE). Optional: without it the
    /// server listens on every interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// The server's own address on the VLAN; sent as option 54.
    pub server_ip: Ipv4Addr,
    /// The VLAN subnet in network form, e.g. `192.0.2.0/24`.
    pub subnet: Subnet,
    /// Default gateway handed to clients (option 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<Ipv4Addr>,
    /// Dynamic pool, inclusive at both ends, inside `subnet`.
    pub range: RawRange,
    /// Infra addresses never handed out (DNS, proxy, VIPs). The server and
    /// gateway addresses are always excluded as well.
    #[serde(default)]
    pub excluded: Vec<Ipv4Addr>,
    /// DNS servers (option 6).
    #[serde(default)]
    pub dns_servers: Vec<Ipv4Addr>,
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
    /// Clients known by MAC without a fixed address (a VM whose address is
    /// not known yet): they get a pool lease, and their host name (option
    /// 12) from the first DISCOVER.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub known_clients: Vec<RawKnownClient>,
    /// What a client that is neither reserved nor known gets: `pool` (a
    /// pool lease, the default) or `ignore` (no answer at all).
    #[serde(default, skip_serializing_if = "UnknownClients::is_pool")]
    pub unknown_clients: UnknownClients,
    /// How long a DECLINEd address stays out of the pool. Default 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decline_quarantine_seconds: Option<u32>,
    /// How long to wait for an answer to the ICMP echo sent to a pool
    /// address before offering it when no binding of it is known, in
    /// milliseconds. Default 500; 0 turns the conflict probe off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_timeout_ms: Option<u32>,
    /// The other server of a pair, when two servers share the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<RawPeer>,
}

/// Which half of a pair a server is (RFC 3074 load balancing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Answers the clients whose hash is even; allocates from the first
    /// half of the pool.
    Primary,
    /// Answers the clients whose hash is odd; allocates from the second
    /// half of the pool.
    Secondary,
}

impl Role {
    /// The other role.
    pub fn other(self) -> Role {
        match self {
            Role::Primary => Role::Secondary,
            Role::Secondary => Role::Primary,
        }
    }
}

/// The other server of a pair. Both servers hold every reservation; each
/// answers the clients whose RFC 3074 hash falls to it, sends every lease it
/// commits to the other over an authenticated HTTP API on the pod network,
/// and takes over the whole pool when the other stops answering.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawPeer {
    /// This server's role in the pair (the other server has the other one).
    pub role: Role,
    /// The other server's address on the VLAN (its `server_ip`).
    pub server_ip: Ipv4Addr,
    /// The other server's pair API, `host:port` on the pod network.
    pub api: String,
    /// Where this server's pair API listens (`ip:port` on the pod network).
    pub listen: std::net::SocketAddr,
    /// File holding the token both servers present (a mounted Secret).
    pub token_file: std::path::PathBuf,
    /// Heartbeat interval in milliseconds. Default 500.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_ms: Option<u32>,
    /// Silence after which the other server counts as down and this one
    /// takes over the whole pool, in milliseconds. Default 3000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub down_after_ms: Option<u32>,
}

/// Pool bounds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRange {
    /// First address of the pool.
    pub start: Ipv4Addr,
    /// Last address of the pool (inclusive).
    pub end: Ipv4Addr,
}

/// A classless static route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    /// Destination network in CIDR form.
    pub destination: Ipv4Net,
    /// Next hop, inside the subnet.
    pub gateway: Ipv4Addr,
}

/// A reservation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawReservation {
    /// Client hardware address, `aa:bb:cc:dd:ee:ff` (or with `-`).
    pub mac: Mac,
    /// Address always given to this MAC.
    pub ip: Ipv4Addr,
    /// Host name sent as option 12.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
}

/// A client known by MAC, without a fixed address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawKnownClient {
    /// Client hardware address, `aa:bb:cc:dd:ee:ff` (or with `-`).
    pub mac: Mac,
    /// Host name sent as option 12.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
}

/// What the server does for a client that is neither reserved nor known.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum UnknownClients {
    /// A lease from the pool, like any client.
    #[default]
    Pool,
    /// No answer: only reserved and known clients get an address.
    Ignore,
}

impl UnknownClients {
    /// True for the default, [`UnknownClients::Pool`].
    pub fn is_pool(&self) -> bool {
        *self == UnknownClients::Pool
    }
}

impl RawConfig {
    /// Parses YAML text. A field that does not parse is named by its path
    /// (`reservations[1].mac`); a syntax error names `file`.
    pub fn from_yaml(text: &str) -> Result<RawConfig, ConfigError> {
        let mut at = None;
        let parsed = serde_saphyr::with_deserializer_from_str(text, |de| {
            let mut track = serde_path_to_error::Track::new();
            let r = RawConfig::deserialize(serde_path_to_error::Deserializer::new(de, &mut track));
            if r.is_err() {
                at = Some(track.path());
            }
            r
        });
        parsed.map_err(|e| {
            let field = at
                .map(|p| p.to_string())
                .filter(|p| p != "." && !p.is_empty())
                .unwrap_or_else(|| "file".to_string());
            ConfigError::new(field, format!("invalid YAML: {e}"))
        })
    }

    /// Reads and parses a YAML file.
    pub fn load(path: &Path) -> Result<RawConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError::new("file", format!("cannot read {}: {e}", path.display()))
        })?;
        RawConfig::from_yaml(&text)
    }

    /// The document as YAML (what the controller puts in the ConfigMap).
    pub fn to_yaml(&self) -> Result<String, ConfigError> {
        serde_saphyr::to_string(self)
            .map_err(|e| ConfigError::new("file", format!("cannot write YAML: {e}")))
    }
}
