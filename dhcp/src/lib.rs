//! oooi-dhcp: a DHCPv4 server for the isolated VLAN of oooi.
//!
//! Modules: [`config`] (typed, validated configuration), [`lease_store`]
//! (durable append-only lease log).

pub mod config;
pub mod lease_store;
