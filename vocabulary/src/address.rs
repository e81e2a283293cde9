//! One IP address of either family, as every address field of oooi's
//! custom resources and configs writes it (`192.0.2.2`, `2001:db8::2`), and
//! the one reading of an address as other projects' status reports it.
//!
//! Only the canonical spelling is accepted (for IPv4 four decimal octets
//! without leading zeros, for IPv6 RFC 5952's form: lower case, zeros
//! compressed), so what is read is written back byte for byte and two
//! spellings of one address never compare different. Which family a field
//! takes is the field's rule, not the type's: the VLAN is IPv4 today (see
//! [`crate::VlanNetwork`]), and a component address must be a host of it.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::InterfaceAddress;

/// An IP address of either family in its canonical spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IpAddress(IpAddr);

impl IpAddress {
    /// Parses an address of either family. The error quotes the value; the
    /// caller names the field.
    pub fn parse(s: &str) -> Result<IpAddress, String> {
        let a: IpAddr = s
            .parse()
            .map_err(|_| format!("`{s}` is not an IPv4 or IPv6 address"))?;
        if a.to_string() != s {
            return Err(format!("`{s}` is not written canonically: write `{a}`"));
        }
        Ok(IpAddress(a))
    }

    /// The address.
    pub fn ip(&self) -> IpAddr {
        self.0
    }

    /// The address when it is IPv4: the one conversion a v4-only part (the
    /// DHCPv4 wire, ARP) makes at its boundary.
    pub fn v4(&self) -> Option<Ipv4Addr> {
        match self.0 {
            IpAddr::V4(a) => Some(a),
            IpAddr::V6(_) => None,
        }
    }

    /// The address when it is IPv6.
    pub fn v6(&self) -> Option<Ipv6Addr> {
        match self.0 {
            IpAddr::V4(_) => None,
            IpAddr::V6(a) => Some(a),
        }
    }
}

/// The address of an interface as Multus' network status, a VMI's
/// interfaces or a Machine's addresses report it: bare (`192.0.2.7`,
/// `2001:db8::7`) or with its prefix length (`192.0.2.7/24`), blanks around
/// it ignored. The one reading of such a report; `None` when it is neither.
pub fn observed_address(s: &str) -> Option<IpAddr> {
    let s = s.trim();
    if s.contains('/') {
        InterfaceAddress::parse(s).ok().map(|a| a.addr())
    } else {
        s.parse().ok()
    }
}

impl From<IpAddr> for IpAddress {
    fn from(a: IpAddr) -> IpAddress {
        IpAddress(a)
    }
}

impl From<Ipv4Addr> for IpAddress {
    fn from(a: Ipv4Addr) -> IpAddress {
        IpAddress(IpAddr::V4(a))
    }
}

impl From<Ipv6Addr> for IpAddress {
    fn from(a: Ipv6Addr) -> IpAddress {
        IpAddress(IpAddr::V6(a))
    }
}

impl From<IpAddress> for IpAddr {
    fn from(a: IpAddress) -> IpAddr {
        a.0
    }
}

impl PartialEq<IpAddr> for IpAddress {
    fn eq(&self, other: &IpAddr) -> bool {
        self.0 == *other
    }
}

impl PartialEq<Ipv4Addr> for IpAddress {
    fn eq(&self, other: &Ipv4Addr) -> bool {
        self.0 == *other
    }
}

impl fmt::Display for IpAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for IpAddress {
    type Err = String;
    fn from_str(s: &str) -> Result<IpAddress, String> {
        IpAddress::parse(s)
    }
}

impl Serialize for IpAddress {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for IpAddress {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<IpAddress, D::Error> {
        let s = String::deserialize(d)?;
        IpAddress::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// The longest text of an IPv6 address (six groups and an embedded IPv4
/// address); a canonical one is at most 39 characters. A bound also keeps
/// the API server's cost estimate of rules on the field small.
#[cfg(feature = "schema")]
pub const MAX_ADDRESS_LEN: u64 = 45;

/// The schema of an address of either family: the API server's own
/// `ipv4` and `ipv6` formats (no pattern, and no CEL IP library, which
/// CRD rules lack before Kubernetes 1.31).
#[cfg(feature = "schema")]
impl schemars::JsonSchema for IpAddress {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "IpAddress".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "maxLength": MAX_ADDRESS_LEN,
            "anyOf": [{"format": "ipv4"}, {"format": "ipv6"}],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn either_family_in_its_canonical_spelling_round_trips() {
        for s in [
            "192.0.2.2",
            "0.0.0.0",
            "2001:db8::2",
            "::1",
            "::ffff:192.0.2.1",
        ] {
            let a = IpAddress::parse(s).unwrap();
            assert_eq!(a.to_string(), s);
            let json = serde_json::to_string(&a).unwrap();
            assert_eq!(json, format!("\"{s}\""));
            assert_eq!(serde_json::from_str::<IpAddress>(&json).unwrap(), a);
        }
        let a = IpAddress::parse("192.0.2.2").unwrap();
        assert_eq!(a.v4(), Some(Ipv4Addr::new(192, 0, 2, 2)));
        assert_eq!(a.v6(), None);
        assert_eq!(a, Ipv4Addr::new(192, 0, 2, 2));
        let b = IpAddress::parse("2001:db8::2").unwrap();
        assert_eq!(b.v4(), None);
        assert!(b.v6().is_some());
    }

    #[test]
    fn a_bad_or_non_canonical_address_is_refused_with_the_value() {
        for bad in [
            "10.0.0.300",
            "abc",
            "",
            " 192.0.2.2",
            "192.0.2.2/24",
            "192.0.2",
        ] {
            let e = IpAddress::parse(bad).unwrap_err();
            assert!(e.contains(&format!("`{bad}`")), "{bad}: {e}");
            assert!(e.contains("not an IPv4 or IPv6 address"), "{bad}: {e}");
        }
        // Rust refuses leading zeros in IPv4 outright.
        assert!(IpAddress::parse("192.000.2.2").is_err());
        for (bad, canonical) in [
            ("2001:DB8::2", "2001:db8::2"),
            ("2001:db8:0:0::2", "2001:db8::2"),
        ] {
            let e = IpAddress::parse(bad).unwrap_err();
            assert!(e.contains(bad) && e.contains(canonical), "{e}");
        }
        let e = serde_json::from_str::<IpAddress>("\"10.0.0.300\"").unwrap_err();
        assert!(e.to_string().contains("10.0.0.300"), "{e}");
    }

    #[test]
    fn observed_addresses_are_read_bare_or_with_a_prefix() {
        let v4: IpAddr = "192.0.2.7".parse().unwrap();
        let v6: IpAddr = "2001:db8::7".parse().unwrap();
        assert_eq!(observed_address("192.0.2.7"), Some(v4));
        assert_eq!(observed_address(" 192.0.2.7/24 "), Some(v4));
        assert_eq!(observed_address("2001:db8::7/64"), Some(v6));
        assert_eq!(observed_address("2001:db8::7"), Some(v6));
        for bad in ["", "nope", "192.0.2.7/", "192.0.2.7/40", "nope/24"] {
            assert_eq!(observed_address(bad), None, "{bad}");
        }
    }
}
