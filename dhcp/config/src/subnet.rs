//! The served subnet: the VLAN's network ([`VlanNetwork`], whose one rule
//! every part applies) seen as the IPv4 network DHCPv4 serves.
//!
//! A host address is one inside the subnet other than its network and
//! broadcast addresses; a pool is two host addresses in order.

use std::borrow::Cow;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::str::FromStr;

use ipnet::{IpNet, Ipv4Net};
use oooi_vocabulary::VlanNetwork;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::ConfigError;

/// The longest prefix a served subnet may have (the VLAN rule's).
pub const MAX_PREFIX_LEN: u8 = oooi_vocabulary::MAX_PREFIX_LEN_V4;

/// A subnet that passed the VLAN rule, IPv4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Subnet {
    vlan: VlanNetwork,
    v4: Ipv4Net,
}

impl Subnet {
    /// Parses `a.b.c.d/n` and applies the rule. The error says what is
    /// wrong with the value (the caller names the field).
    pub fn parse(s: &str) -> Result<Subnet, String> {
        Subnet::from_vlan(VlanNetwork::parse(s)?)
    }

    /// Applies the rule to a parsed network.
    pub fn new(net: Ipv4Net) -> Result<Subnet, String> {
        Subnet::from_vlan(VlanNetwork::new(IpNet::V4(net))?)
    }

    /// The VLAN's network as DHCPv4 serves it; an IPv6 network is refused.
    pub fn from_vlan(vlan: VlanNetwork) -> Result<Subnet, String> {
        match vlan.v4() {
            Some(v4) => Ok(Subnet { vlan, v4 }),
            None => Err(format!(
                "{vlan} is not an IPv4 network (DHCPv4 serves IPv4)"
            )),
        }
    }

    /// The network.
    pub fn net(&self) -> Ipv4Net {
        self.v4
    }

    /// The VLAN network this subnet is.
    pub fn vlan(&self) -> VlanNetwork {
        self.vlan
    }

    /// Whether `a` is a host address of the subnet (inside it, neither the
    /// network nor the broadcast address).
    pub fn is_host(&self, a: Ipv4Addr) -> bool {
        self.vlan.is_host(IpAddr::V4(a))
    }

    /// [`Subnet::is_host`] as a check of `field`.
    pub fn check_host(&self, field: &str, a: Ipv4Addr) -> Result<(), ConfigError> {
        self.vlan.check_host(field, IpAddr::V4(a))
    }

    /// The pool rule: both ends are host addresses and `end` is not before
    /// `start`. The fields are the caller's paths of the two ends; the
    /// message names the start by the last part of its path.
    pub fn check_pool(
        &self,
        start_field: &str,
        start: Ipv4Addr,
        end_field: &str,
        end: Ipv4Addr,
    ) -> Result<(), ConfigError> {
        self.vlan
            .check_pool(start_field, IpAddr::V4(start), end_field, IpAddr::V4(end))
    }
}

impl fmt::Display for Subnet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.v4.fmt(f)
    }
}

impl FromStr for Subnet {
    type Err = String;
    fn from_str(s: &str) -> Result<Subnet, String> {
        Subnet::parse(s)
    }
}

impl From<Subnet> for Ipv4Net {
    fn from(s: Subnet) -> Ipv4Net {
        s.v4
    }
}

impl Serialize for Subnet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.v4)
    }
}

impl<'de> Deserialize<'de> for Subnet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Subnet, D::Error> {
        let s = String::deserialize(d)?;
        Subnet::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// The VLAN network's schema: the same pattern and CEL rule wherever a
/// subnet is written.
impl JsonSchema for Subnet {
    fn schema_name() -> Cow<'static, str> {
        VlanNetwork::schema_name()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        VlanNetwork::json_schema(g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_bits_and_small_subnets_are_refused_with_the_value() {
        assert_eq!(
            Subnet::parse("192.0.2.0/24").unwrap().to_string(),
            "192.0.2.0/24"
        );
        assert!(Subnet::parse("192.0.2.8/29").is_ok());
        let e = Subnet::parse("192.0.2.7/24").unwrap_err();
        assert!(
            e.contains("192.0.2.7/24") && e.contains("192.0.2.0/24"),
            "{e}"
        );
        let e = Subnet::parse("192.0.2.0/30").unwrap_err();
        assert!(e.contains("192.0.2.0/30") && e.contains("/29"), "{e}");
        let e = Subnet::parse("nope").unwrap_err();
        assert!(e.contains("`nope`"), "{e}");
    }

    #[test]
    fn hosts_exclude_network_and_broadcast() {
        let s = Subnet::parse("192.0.2.0/29").unwrap();
        let a = |n| Ipv4Addr::new(192, 0, 2, n);
        assert!(!s.is_host(a(0)) && !s.is_host(a(7)) && !s.is_host(a(8)));
        assert!((1..=6).all(|n| s.is_host(a(n))));
        assert!(s.check_pool("s", a(2), "e", a(6)).is_ok());
        assert_eq!(s.check_pool("s", a(6), "e", a(2)).unwrap_err().field, "e");
        assert_eq!(s.check_pool("s", a(0), "e", a(2)).unwrap_err().field, "s");
    }
}
