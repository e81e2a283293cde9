//! The oooi-dhcp config file: its format, its typed fields and the one set
//! of rules for what a subnet, a pool and a reservation may be.
//!
//! The server loads its file with [`Config::load`]; the controller builds
//! the same document ([`RawConfig`]) from an `Infra` and checks the Infra's
//! network with the same rules ([`Subnet::parse`], [`Subnet::check_host`],
//! [`Subnet::check_pool`]), so a config the controller accepts is one the
//! server accepts and the other way round. The document types derive
//! [`schemars::JsonSchema`] so that custom resources embedding the config
//! carry its real schema.
//!
//! The file is YAML (a mounted ConfigMap in the cluster). Each field is
//! parsed to its type once, at the edge ([`RawConfig::from_yaml`]); the
//! checks across fields then make a [`Config`] ([`Config::from_raw`]).
//! Every error is a [`ConfigError`] naming the field and the bad value.
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

mod file;
mod mac;
mod subnet;
mod validated;

pub use oooi_vocabulary::FieldError;

pub use file::{
    RawConfig, RawKnownClient, RawPeer, RawRange, RawReservation, RawRoute, Role, UnknownClients,
};
pub use mac::Mac;
pub use subnet::{MAX_PREFIX_LEN, Subnet};
pub use validated::{
    Config, DEFAULT_PROBE_TIMEOUT_MS, DEFAULT_VLAN_PORT, MAX_PROBE_TIMEOUT_MS, Peer, Reservation,
};

/// A parse or validation error: the shared [`FieldError`]. `field` is the
/// dotted path of the offending field (for example `reservations[2].mac`,
/// `file` for I/O and YAML syntax); `message` says what is wrong with which
/// value.
pub type ConfigError = FieldError;
