//! oooi-dhcp: a DHCPv4 server for the isolated VLAN of oooi.
//!
//! Modules: [`config`] (typed, validated configuration).

pub mod config;
