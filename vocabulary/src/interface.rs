//! A VLAN interface's address: one address with the prefix length of its
//! network (`192.0.2.2/24`), as a pod's VLAN leg carries it.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use ipnet::IpNet;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An address and the prefix length of its network. Unlike a CIDR it may
/// (and normally does) have host bits: `192.0.2.2/24` is the host
/// `192.0.2.2` on `192.0.2.0/24`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InterfaceAddress {
    addr: IpAddr,
    prefix: u8,
}

impl InterfaceAddress {
    /// `addr` with prefix length `prefix`, refusing a prefix longer than
    /// the family's width (`/32`, `/128`).
    pub fn new(addr: IpAddr, prefix: u8) -> Result<InterfaceAddress, String> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(format!("{addr}/{prefix}: the prefix is longer than /{max}"));
        }
        Ok(InterfaceAddress { addr, prefix })
    }

    /// `addr` alone: the prefix is the family's width (`/32`, `/128`).
    pub fn host(addr: IpAddr) -> InterfaceAddress {
        let prefix = if addr.is_ipv4() { 32 } else { 128 };
        InterfaceAddress { addr, prefix }
    }

    /// Parses `ip/prefix`. The error quotes the value.
    pub fn parse(s: &str) -> Result<InterfaceAddress, String> {
        let bad = || format!("`{s}` is not an address with a prefix length (`192.0.2.2/24`)");
        let (addr, prefix) = s.trim().split_once('/').ok_or_else(bad)?;
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        // Digits only: `u8::from_str` would take a sign.
        if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let prefix: u8 = prefix.parse().map_err(|_| bad())?;
        InterfaceAddress::new(addr, prefix)
    }

    /// The address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length of its network.
    pub fn prefix_len(&self) -> u8 {
        self.prefix
    }

    /// The network the address is on (`192.0.2.0/24` for `192.0.2.2/24`).
    pub fn network(&self) -> IpNet {
        // `new` bounds the prefix by the family's width.
        IpNet::new(self.addr, self.prefix)
            .map(|n| n.trunc())
            .unwrap_or_else(|_| IpNet::from(self.addr))
    }
}

impl fmt::Display for InterfaceAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl FromStr for InterfaceAddress {
    type Err = String;
    fn from_str(s: &str) -> Result<InterfaceAddress, String> {
        InterfaceAddress::parse(s)
    }
}

/// Equal to its text form (`192.0.2.2/24`).
impl PartialEq<str> for InterfaceAddress {
    fn eq(&self, other: &str) -> bool {
        InterfaceAddress::parse(other).is_ok_and(|o| o == *self)
    }
}

/// Equal to its text form (`192.0.2.2/24`).
impl PartialEq<&str> for InterfaceAddress {
    fn eq(&self, other: &&str) -> bool {
        *self == **other
    }
}

/// Equal to its text form (`192.0.2.2/24`).
impl PartialEq<String> for InterfaceAddress {
    fn eq(&self, other: &String) -> bool {
        *self == *other.as_str()
    }
}

impl Serialize for InterfaceAddress {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for InterfaceAddress {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<InterfaceAddress, D::Error> {
        let s = String::deserialize(d)?;
        InterfaceAddress::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for InterfaceAddress {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "InterfaceAddress".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "An address with the prefix length of its network, e.g. `192.0.2.2/24`.",
            // The API server's `cidr` format is an address of either family
            // with a prefix length, host bits allowed: this type exactly.
            "format": "cidr",
            "maxLength": crate::address::MAX_ADDRESS_LEN + 4,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interface_address_keeps_its_host_bits_and_knows_its_network() {
        let a = InterfaceAddress::parse("192.0.2.2/24").unwrap();
        assert_eq!(a.addr(), "192.0.2.2".parse::<IpAddr>().unwrap());
        assert_eq!(a.prefix_len(), 24);
        assert_eq!(a.network().to_string(), "192.0.2.0/24");
        assert_eq!(a.to_string(), "192.0.2.2/24");
        assert_eq!(a, "192.0.2.2/24");
        assert_eq!(a, "192.0.2.2/24".to_string());
        assert_ne!(a, "192.0.2.2/25");
        let v6 = InterfaceAddress::parse("2001:db8::2/64").unwrap();
        assert_eq!(v6.network().to_string(), "2001:db8::/64");
    }

    #[test]
    fn a_bad_interface_address_is_refused_with_the_value() {
        for bad in [
            "192.0.2.2",
            "192.0.2.2/",
            "192.0.2.2/+4",
            "192.0.2/24",
            "nope/24",
            "192.0.2.2/33",
            "2001:db8::2/129",
        ] {
            let e = InterfaceAddress::parse(bad).unwrap_err();
            assert!(e.contains(bad.split('/').next().unwrap()), "{bad}: {e}");
        }
        let e: Result<InterfaceAddress, _> = serde_json::from_str("\"192.0.2.2/40\"");
        assert!(e.unwrap_err().to_string().contains("/32"));
    }

    #[test]
    fn serde_writes_and_reads_the_text_form() {
        let a: InterfaceAddress = serde_json::from_str("\"198.51.100.4/24\"").unwrap();
        assert_eq!(serde_json::to_string(&a).unwrap(), "\"198.51.100.4/24\"");
    }
}
