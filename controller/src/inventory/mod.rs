//! The DHCP servers' lease inventory, from the controller's side.
//!
//! Each `oooi-dhcp` pod serves a read-only inventory API (the contract is
//! the `oooi-dhcp-inventory` crate) with a bearer token the controller
//! creates per Infra. The client side (the ways to a pod, the join, the
//! tables) is `oooi-inventory-client`, shared with must-gather. Here:
//!
//! - [`poll`]: the controller's loop writing each DHCPServer's pool figures
//!   and conditions ([`crate::plan::dhcp::pools`] decides them);
//! - [`command`]: `oooi-controller leases` and `leases why`.

pub mod command;
pub mod poll;

pub use oooi_inventory_client::{dhcp_pod_selector, join, objects, output, pods_of, reach};
