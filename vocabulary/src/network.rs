//! The VLAN's network and the one rule for what it may be.
//!
//! The rule, applied by the CRD schema (pattern and a CEL rule), the
//! controller, `render`, oooi-dhcp and oooi-dns alike:
//! - IPv4 (the servers hand out addresses over DHCPv4). This is the one
//!   place that refuses IPv6 ([`IPV6_VLAN_REFUSED`]): every address field
//!   and type beyond it takes either family, so a dual-stack VLAN starts
//!   here;
//! - written in network form: `192.0.2.0/24`, not `192.0.2.7/24`. A CIDR
//!   with host bits is a typo either of the network or of the prefix;
//!   truncating it would serve a network its writer may not have meant, so
//!   it is refused with the network it would have been;
//! - prefix `/29` or shorter ([`MAX_PREFIX_LEN_V4`]): six host addresses,
//!   the least that holds a gateway, the DHCP, DNS and proxy addresses and
//!   one worker. A `/30` has two host addresses: not even a gateway, a
//!   server and one client.
//!
//! A host address is one inside the network other than its network and
//! broadcast addresses; a pool is two host addresses in order.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::str::FromStr;

use ipnet::{IpNet, Ipv4Net};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::FieldError;

/// Why an IPv6 network is refused as the VLAN: the one place oooi refuses
/// IPv6 (every address type and field beyond it takes either family).
pub const IPV6_VLAN_REFUSED: &str = "IPv6 VLANs are not supported yet: the VLAN must be an IPv4 network (its addresses are handed out over DHCPv4)";

/// The longest prefix an IPv4 VLAN network may have (see the module docs).
pub const MAX_PREFIX_LEN_V4: u8 = 29;

/// A VLAN network that passed the rule (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VlanNetwork(IpNet);

impl VlanNetwork {
    /// Parses `a.b.c.d/n` and applies the rule. The error says what is
    /// wrong with the value; the caller names the field.
    /// Only the canonical spelling is accepted (no leading zeros, no
    /// blanks), as the API server's CEL rule accepts it: what one part
    /// admits, every part admits.
    pub fn parse(s: &str) -> Result<VlanNetwork, String> {
        let net: IpNet = s
            .parse()
            .map_err(|_| format!("`{s}` is not an IPv4 CIDR"))?;
        let vlan = VlanNetwork::new(net)?;
        if net.to_string() != s {
            return Err(format!(
                "`{s}` is not written as the network it names: write `{net}`"
            ));
        }
        Ok(vlan)
    }

    /// Applies the rule to a parsed network.
    pub fn new(net: IpNet) -> Result<VlanNetwork, String> {
        let IpNet::V4(v4) = net else {
            return Err(format!("{IPV6_VLAN_REFUSED}: {net} is an IPv6 network"));
        };
        if v4 != v4.trunc() {
            return Err(format!(
                "{net} has host bits set (the network is {})",
                v4.trunc()
            ));
        }
        if v4.prefix_len() > MAX_PREFIX_LEN_V4 {
            return Err(format!(
                "{net} is too small: the prefix must be /{MAX_PREFIX_LEN_V4} or shorter (a gateway, the servers and a pool)"
            ));
        }
        Ok(VlanNetwork(net))
    }

    /// The network.
    pub fn net(&self) -> IpNet {
        self.0
    }

    /// The network when it is IPv4 (today always: see [`VlanNetwork::new`]).
    pub fn v4(&self) -> Option<Ipv4Net> {
        match self.0 {
            IpNet::V4(n) => Some(n),
            IpNet::V6(_) => None,
        }
    }

    /// The prefix length.
    pub fn prefix_len(&self) -> u8 {
        self.0.prefix_len()
    }

    /// Whether `a` lies inside the network (network and broadcast included).
    pub fn contains(&self, a: IpAddr) -> bool {
        self.0.contains(&a)
    }

    /// Whether `a` is a host address: inside, neither the network nor the
    /// broadcast address.
    pub fn is_host(&self, a: IpAddr) -> bool {
        self.0.contains(&a) && a != self.0.network() && a != self.0.broadcast()
    }

    /// [`VlanNetwork::is_host`] as a check of `field`.
    pub fn check_host(&self, field: &str, a: IpAddr) -> Result<(), FieldError> {
        if self.is_host(a) {
            Ok(())
        } else {
            Err(FieldError::new(
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
        start: IpAddr,
        end_field: &str,
        end: IpAddr,
    ) -> Result<(), FieldError> {
        self.check_host(start_field, start)?;
        self.check_host(end_field, end)?;
        if end < start {
            return Err(FieldError::new(
                end_field,
                format!(
                    "{end} is before {} {start}",
                    start_field.rsplit('.').next().unwrap_or(start_field)
                ),
            ));
        }
        Ok(())
    }

    /// The first host address (`.1` of a /24): the default gateway.
    pub fn first_host(&self) -> IpAddr {
        match self.0 {
            IpNet::V4(n) => IpAddr::V4(Ipv4Addr::from(u32::from(n.network()) + 1)),
            IpNet::V6(n) => IpAddr::V6((u128::from(n.network()) + 1).into()),
        }
    }
}

impl fmt::Display for VlanNetwork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for VlanNetwork {
    type Err = String;
    fn from_str(s: &str) -> Result<VlanNetwork, String> {
        VlanNetwork::parse(s)
    }
}

impl Serialize for VlanNetwork {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for VlanNetwork {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<VlanNetwork, D::Error> {
        let s = String::deserialize(d)?;
        VlanNetwork::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// The CEL rule that completes the schema's pattern: a valid IPv4 CIDR in
/// network form (each octet at most 255 and written without leading zeros,
/// no host bits under the prefix). Written with the base language and the
/// strings extension only (`split`, `int`, `string`, `%`, a list of the
/// powers of two), which Kubernetes' CRD validation offered long before 1.29:
/// its CIDR library reaches CRD rules only in 1.31, and an API server
/// without it refuses the whole CRD (plain Kubernetes 1.29 and 1.30). The
/// pattern keeps the prefix to /0–/29.
pub const VLAN_NETWORK_CEL_RULE: &str = concat!(
    "self.split('/').size() == 2 && self.split('/')[0].split('.').size() == 4",
    " && self.split('/')[0].split('.').all(o, int(o) <= 255 && string(int(o)) == o)",
    " && string(int(self.split('/')[1])) == self.split('/')[1]",
    " && (int(self.split('/')[0].split('.')[0]) * 16777216",
    " + int(self.split('/')[0].split('.')[1]) * 65536",
    " + int(self.split('/')[0].split('.')[2]) * 256",
    " + int(self.split('/')[0].split('.')[3]))",
    " % [4294967296, 2147483648, 1073741824, 536870912, 268435456, 134217728, 67108864, 33554432, 16777216, 8388608, 4194304, 2097152, 1048576, 524288, 262144, 131072, 65536, 32768, 16384, 8192, 4096, 2048, 1024, 512, 256, 128, 64, 32, 16, 8, 4, 2, 1][int(self.split('/')[1])] == 0",
);

#[cfg(feature = "schema")]
impl schemars::JsonSchema for VlanNetwork {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "VlanNetwork".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "IPv4 network in network form (no host bits), prefix /29 or shorter, e.g. `192.0.2.0/24`.",
            "pattern": r"^([0-9]{1,3}\.){3}[0-9]{1,3}/([0-9]|[12][0-9])$",
            // The longest value the pattern admits (`255.255.255.255/29`);
            // a bound also keeps the API server's cost estimate of the CEL
            // rule small.
            "maxLength": 18,
            "x-kubernetes-validations": [{
                "rule": VLAN_NETWORK_CEL_RULE,
                "message": "must be an IPv4 network in network form (no host bits), e.g. 192.0.2.0/24",
            }, {
                // Says why an IPv6 network fails the pattern.
                "rule": "!self.contains(':')",
                "message": IPV6_VLAN_REFUSED,
            }],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
    }

    #[test]
    fn host_bits_small_networks_and_ipv6_are_refused_with_the_value() {
        assert_eq!(
            VlanNetwork::parse("192.0.2.0/24").unwrap().to_string(),
            "192.0.2.0/24"
        );
        assert!(VlanNetwork::parse("192.0.2.8/29").is_ok());
        let e = VlanNetwork::parse("192.0.2.7/24").unwrap_err();
        assert!(
            e.contains("192.0.2.7/24") && e.contains("192.0.2.0/24"),
            "{e}"
        );
        let e = VlanNetwork::parse("192.0.2.0/30").unwrap_err();
        assert!(e.contains("192.0.2.0/30") && e.contains("/29"), "{e}");
        let e = VlanNetwork::parse("nope").unwrap_err();
        assert!(e.contains("`nope`"), "{e}");
        // Only the canonical spelling, as admission.
        for spelling in [" 192.0.2.0/24", "192.0.2.0/24 ", "192.000.2.0/24"] {
            let e = VlanNetwork::parse(spelling).unwrap_err();
            assert!(e.contains(&format!("`{spelling}`")), "{e}");
        }
        let e = VlanNetwork::parse("2001:db8::/64").unwrap_err();
        assert!(
            e.contains("2001:db8::/64") && e.starts_with("IPv6 VLANs are not supported yet"),
            "{e}"
        );
    }

    #[test]
    fn hosts_exclude_network_and_broadcast() {
        let s = VlanNetwork::parse("192.0.2.0/29").unwrap();
        let a = |n| v4(192, 0, 2, n);
        assert!(!s.is_host(a(0)) && !s.is_host(a(7)) && !s.is_host(a(8)));
        assert!((1..=6).all(|n| s.is_host(a(n))));
        assert!(s.check_pool("s", a(2), "e", a(6)).is_ok());
        assert_eq!(s.check_pool("s", a(6), "e", a(2)).unwrap_err().field, "e");
        assert_eq!(s.check_pool("s", a(0), "e", a(2)).unwrap_err().field, "s");
        assert_eq!(s.first_host(), a(1));
    }

    #[test]
    fn serde_applies_the_rule() {
        let n: VlanNetwork = serde_json::from_str("\"10.0.0.0/16\"").unwrap();
        assert_eq!(serde_json::to_string(&n).unwrap(), "\"10.0.0.0/16\"");
        assert!(serde_json::from_str::<VlanNetwork>("\"10.0.0.1/16\"").is_err());
    }
}
