//! The vocabulary every part of oooi speaks, so that a value is parsed once
//! at the edge (an API object, a config file) and travels typed:
//!
//! - [`VlanNetwork`]: the isolated VLAN's network and the one rule for what
//!   it may be. The CRD schema, the controller, `render`, oooi-dhcp and
//!   oooi-dns all accept exactly the networks [`VlanNetwork::parse`]
//!   accepts. It is address-family aware; IPv4 is what is served today, and
//!   [`VlanNetwork::new`] is the one place that refuses IPv6.
//! - [`IpAddress`]: one address of either family, as every address field
//!   writes it; [`InterfaceAddress`]: an address with its prefix length;
//!   [`observed_address`]: the one reading of an address other projects'
//!   status reports.
//! - [`AddressRange`]: an inclusive range of addresses of one family (a
//!   DHCP or MetalLB pool).
//! - [`Cidr`]: any IP network with no host bits, as the routing table
//!   matches source addresses.
//! - [`FieldError`]: a bad value and the dotted path of its field, the one
//!   error shape of every config and API object check.
//! - [`labels`]: the label and annotation keys oooi writes and selects on.
//! - [`KUBERNETES_ALIASES`]: the names a worker uses for its cluster's
//!   Kubernetes service.

mod address;
mod aliases;
mod cidr;
mod error;
mod interface;
pub mod labels;
mod network;
mod range;

#[cfg(feature = "schema")]
pub use address::MAX_ADDRESS_LEN;
pub use address::{IpAddress, observed_address};
pub use aliases::{KUBERNETES_ALIASES, is_kubernetes_alias, normalize_name};
pub use cidr::{Cidr, addr_bits, mask_bits};
pub use error::FieldError;
pub use interface::InterfaceAddress;
pub use network::{IPV6_VLAN_REFUSED, MAX_PREFIX_LEN_V4, VLAN_NETWORK_CEL_RULE, VlanNetwork};
pub use range::AddressRange;
