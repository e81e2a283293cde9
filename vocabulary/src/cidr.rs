//! Any IP network with no host bits: what the routing table matches source
//! addresses against.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// An IP network in CIDR form with no host bits set. A bare address is the
/// network of that one address (`/32`, `/128`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for Cidr {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Cidr".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "An IP network in CIDR form (`192.0.2.10/32`), no host bits set.",
        })
    }
}

impl Cidr {
    /// Builds a CIDR, refusing host bits and out-of-range prefixes.
    pub fn new(addr: IpAddr, prefix: u8) -> Result<Self, String> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(format!("prefix /{prefix} is longer than /{max}"));
        }
        let cidr = Cidr { addr, prefix };
        if cidr.network_bits() != addr_bits(addr) {
            return Err(format!("{addr}/{prefix} has host bits set"));
        }
        Ok(cidr)
    }

    /// The network of one address (`/32` or `/128`).
    pub fn host(addr: IpAddr) -> Cidr {
        let prefix = if addr.is_ipv4() { 32 } else { 128 };
        Cidr { addr, prefix }
    }

    /// The network address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// The network address as a 128-bit number (IPv4 in the low 32 bits),
    /// the key the routing table's matcher indexes by.
    pub fn network_bits(&self) -> u128 {
        mask_bits(addr_bits(self.addr), self.addr.is_ipv4(), self.prefix)
    }

    /// True when `ip` lies inside this network (never across families).
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.addr.is_ipv4()
            && mask_bits(addr_bits(ip), ip.is_ipv4(), self.prefix) == self.network_bits()
    }
}

/// `ip` as a 128-bit number, IPv4 in the low 32 bits.
pub fn addr_bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u32::from(v4) as u128,
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// `bits` (see [`addr_bits`]) with every bit after the first `prefix` of its
/// family's width cleared.
pub fn mask_bits(bits: u128, v4: bool, prefix: u8) -> u128 {
    let width = if v4 { 32 } else { 128 };
    if prefix == 0 {
        0
    } else {
        let host = width - prefix as u32;
        let m = if host >= 128 { 0 } else { u128::MAX << host };
        let m = if v4 { m & 0xffff_ffff } else { m };
        bits & m
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("{s:?} is not an IP address or CIDR"))?;
        let prefix = match prefix {
            Some(p) => p
                .parse::<u8>()
                .map_err(|_| format!("{s:?} has a bad prefix length"))?,
            None if addr.is_ipv4() => 32,
            None => 128,
        };
        Cidr::new(addr, prefix)
    }
}

impl Serialize for Cidr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Cidr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_bits_and_long_prefixes_are_refused() {
        assert_eq!(
            "192.0.2.0/24".parse::<Cidr>().unwrap().to_string(),
            "192.0.2.0/24"
        );
        assert_eq!("192.0.2.7".parse::<Cidr>().unwrap().prefix(), 32);
        assert_eq!("2001:db8::1".parse::<Cidr>().unwrap().prefix(), 128);
        assert!(
            "192.0.2.7/24"
                .parse::<Cidr>()
                .unwrap_err()
                .contains("host bits")
        );
        assert!("192.0.2.0/33".parse::<Cidr>().unwrap_err().contains("/33"));
        assert!("nope".parse::<Cidr>().is_err());
    }

    #[test]
    fn contains_is_per_family() {
        let c: Cidr = "10.0.0.0/8".parse().unwrap();
        assert!(c.contains("10.1.2.3".parse().unwrap()));
        assert!(!c.contains("11.0.0.1".parse().unwrap()));
        assert!(!c.contains("::a00:1".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("203.0.113.9".parse().unwrap()));
        assert_eq!(
            Cidr::host("192.0.2.9".parse().unwrap()).to_string(),
            "192.0.2.9/32"
        );
    }
}
