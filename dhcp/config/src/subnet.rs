//! The served subnet and the rules for the addresses inside it.
//!
//! One rule for what a subnet may be, used by the server when it loads its
//! file and by the controller when it checks an `Infra`:
//! - written in network form: `192.0.2.0/24`, not `192.0.2.7/24`. A CIDR
//!   with host bits is a typo either of the network or of the prefix;
//!   truncating it would serve a network its writer may not have meant,
//!   so it is refused with the network it would have been;
//! - prefix `/29` or shorter ([`MAX_PREFIX_LEN`]): six host addresses, the
//!   least that holds a gateway, the DHCP, DNS and proxy addresses and one
//!   worker. A `/30` has two host addresses: not even a gateway, a server
//!   and one client.
//!
//! A host address is one inside the subnet other than its network and
//! broadcast addresses; a pool is two host addresses in order.

use std::borrow::Cow;
use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

use ipnet::Ipv4Net;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::ConfigError;

/// The longest prefix a served subnet may have (see the module docs).
pub const MAX_PREFIX_LEN: u8 = 29;

/// A subnet that passed the subnet rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Subnet(Ipv4Net);

impl Subnet {
    /// Parses `a.b.c.d/n` and applies the rule. The error says what is
    /// wrong with the value (the caller names the field).
    pub fn parse(s: &str) -> Result<Subnet, String> {
        let net: Ipv4Net = s
            .trim()
            .parse()
            .map_err(|_| format!("`{s}` is not an IPv4 CIDR"))?;
        Subnet::new(net)
    }

    /// Applies the rule to a parsed network.
    pub fn new(net: Ipv4Net) -> Result<Subnet, String> {
        if net != net.trunc() {
            return Err(format!(
                "{net} has host bits set (the network is {})",
                net.trunc()
            ));
        }
        if net.prefix_len() > MAX_PREFIX_LEN {
            return Err(format!(
                "{net} is too small: the prefix must be /{MAX_PREFIX_LEN} or shorter (a gateway, the servers and a pool)"
            ));
        }
        Ok(Subnet(net))
    }

    /// The network.
    pub fn net(&self) -> Ipv4Net {
        self.0
    }

    /// Whether `a` is a host address of the subnet (inside it, neither the
    /// network nor the broadcast address).
    pub fn is_host(&self, a: Ipv4Addr) -> bool {
        self.0.contains(&a) && a != self.0.network() && a != self.0.broadcast()
    }

    /// [`Subnet::is_host`] as a check of `field`.
    pub fn check_host(&self, field: &str, a: Ipv4Addr) -> Result<(), ConfigError> {
        if self.is_host(a) {
            Ok(())
        } else {
            Err(ConfigError::new(
                field,
                format!("{a} is not a host address of subnet {}", self.0),
            ))
        }
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
        self.check_host(start_field, start)?;
        self.check_host(end_field, end)?;
        if end < start {
            return Err(ConfigError::new(
                end_field,
                format!(
                    "{end} is before {} {start}",
                    start_field.rsplit('.').next().unwrap_or(start_field)
                ),
            ));
        }
        Ok(())
    }
}

impl fmt::Display for Subnet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
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
        s.0
    }
}

impl Serialize for Subnet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Subnet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Subnet, D::Error> {
        let s = String::deserialize(d)?;
        Subnet::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for Subnet {
    fn schema_name() -> Cow<'static, str> {
        "Subnet".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "description": "IPv4 subnet in network form (no host bits), prefix /29 or shorter, e.g. `192.0.2.0/24`.",
            "pattern": r"^([0-9]{1,3}\.){3}[0-9]{1,3}/([0-9]|[12][0-9])$",
        })
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
