//! oooi-dhcp: a DHCPv4 server for the isolated VLAN of oooi.
//!
//! A received datagram flows through the pure stages of [`pipeline`]
//! (parse → classify → decide → reply → destination) over the in-memory
//! [`leases::LeaseTable`]; [`server`] owns the socket, the durable
//! [`lease_store`] (pipelined group commit: no ACK leaves before an fdatasync
//! covering its lease, ordering rule in [`commit`]), and periodic work.
//! [`config`] is the config file (the `oooi-dhcp-config` crate,
//! re-exported; reloaded by `oooi-reload`), [`metrics`] the Prometheus
//! endpoint, [`pair`], [`peer`] and [`replication`] a pair of servers sharing
//! one pool ([`peer_holds`]: which renewals may be ACKed before the
//! other server has them), [`request`] the classified request the pipeline, the lease
//! table and the pair's scope rule read, [`probe`] the ICMP echo sent before
//! offering an address that has no binding of its client, [`held_back`] the
//! addresses of damaged log records, held back across restarts, [`inventory`]
//! the read-only lease inventory API (rows, pool figures, refusals by reason).
//! [`v6`] is the DHCPv6 decision engine (IA_NA, pure); no socket serves it
//! yet.

pub mod commit;
pub mod held_back;
pub mod inventory;
pub mod lease_store;
pub mod leases;
pub mod metrics;
pub mod pair;
pub mod peer;
pub mod peer_holds;
pub mod pipeline;
pub mod probe;
pub mod replication;
pub mod request;
pub mod server;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod testing;
pub mod v6;

/// The config file format and its rules (the `oooi-dhcp-config` crate).
pub use oooi_dhcp_config as config;
