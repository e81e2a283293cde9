//! oooi-dhcp: a DHCPv4 server for the isolated VLAN of oooi.
//!
//! A received datagram flows through the pure stages of [`pipeline`]
//! (parse → classify → decide → reply → destination) over the in-memory
//! [`leases::LeaseTable`]; [`server`] owns the socket, the durable
//! [`lease_store`] (pipelined group commit: no ACK leaves before an fdatasync
//! covering its lease, ordering rule in [`commit`]), and periodic work.
//! [`config`] is the typed config file (reloaded by `oooi-reload`),
//! [`metrics`] the Prometheus endpoint.

pub mod commit;
pub mod config;
pub mod lease_store;
pub mod leases;
pub mod metrics;
pub mod pipeline;
pub mod server;
