//! The address-like values of the file, parsed once by serde. A value that
//! does not parse is refused with a message quoting it; the reader names the
//! field ([`crate::RawConfig::parse`]).
//!
//! - [`IpPort`]: `ip` or `ip:port` (the port defaulted by the field).
//! - [`ListenAddress`]: an [`IpPort`], or `$(POD_IP)[:port]`.
//! - [`Addresses`]: one IP address or a list of them.
//! - fields of types defined elsewhere (`IpAddr`, `Ipv4Addr`, `Ipv6Addr`,
//!   [`Cidr`]) go through [`quoted`] so that their errors quote the value
//!   as well.

use std::borrow::Cow;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

use oooi_vocabulary::Cidr;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The host part of a listener on the pod's own address: `$(POD_IP):5353`.
pub const POD_IP: &str = "$(POD_IP)";

/// An IP address with an optional port: `192.0.2.3`, `192.0.2.3:53`,
/// `2001:db8::1`, `[2001:db8::1]:53`. Surrounding blanks are ignored. The
/// field that holds it says which port a bare address means
/// ([`IpPort::or_port`]). Written back as read (with or without the port).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpPort {
    /// The address.
    pub ip: IpAddr,
    /// The port, when written.
    pub port: Option<u16>,
}

impl IpPort {
    /// `ip:port`.
    pub fn new(ip: impl Into<IpAddr>, port: u16) -> IpPort {
        IpPort {
            ip: ip.into(),
            port: Some(port),
        }
    }

    /// The socket address, `default_port` when none is written.
    pub fn or_port(&self, default_port: u16) -> SocketAddr {
        SocketAddr::new(self.ip, self.port.unwrap_or(default_port))
    }
}

impl From<SocketAddr> for IpPort {
    fn from(a: SocketAddr) -> IpPort {
        IpPort::new(a.ip(), a.port())
    }
}

impl FromStr for IpPort {
    type Err = String;
    fn from_str(s: &str) -> Result<IpPort, String> {
        let t = s.trim();
        if let Ok(a) = SocketAddr::from_str(t) {
            return Ok(IpPort::from(a));
        }
        match IpAddr::from_str(t) {
            Ok(ip) => Ok(IpPort { ip, port: None }),
            Err(_) => Err(format!("`{s}` is not an `ip` or `ip:port` address")),
        }
    }
}

impl fmt::Display for IpPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(port) => SocketAddr::new(self.ip, port).fmt(f),
            None => self.ip.fmt(f),
        }
    }
}

/// Where a view listens: an [`IpPort`] (port 53 when none is written), or
/// the pod's own address, `$(POD_IP)` or `$(POD_IP):port` (the server's
/// `--pod-ip`, or its `POD_IP` environment variable).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListenAddress {
    /// A fixed address.
    Ip(IpPort),
    /// The pod's own address at this port (53 when None).
    PodIp(Option<u16>),
}

impl FromStr for ListenAddress {
    type Err = String;
    fn from_str(s: &str) -> Result<ListenAddress, String> {
        let Some(rest) = s.trim().strip_prefix(POD_IP) else {
            return s.parse().map(ListenAddress::Ip);
        };
        match rest.strip_prefix(':') {
            None if rest.is_empty() => Ok(ListenAddress::PodIp(None)),
            Some(p) => match p.parse::<u16>() {
                Ok(port) if port != 0 => Ok(ListenAddress::PodIp(Some(port))),
                _ => Err(format!("`{s}`: the port must be within 1..=65535")),
            },
            None => Err(format!("`{s}` is not `{POD_IP}` or `{POD_IP}:port`")),
        }
    }
}

impl fmt::Display for ListenAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddress::Ip(a) => a.fmt(f),
            ListenAddress::PodIp(None) => f.write_str(POD_IP),
            ListenAddress::PodIp(Some(port)) => write!(f, "{POD_IP}:{port}"),
        }
    }
}

/// One address or a list of addresses: `proxy: 192.0.2.10` or
/// `proxy: [192.0.2.10, 192.0.2.11]`. Written back as a plain string when
/// there is one, so single-replica files look as they always did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Addresses(pub Vec<IpAddr>);

impl From<IpAddr> for Addresses {
    fn from(one: IpAddr) -> Self {
        Addresses(vec![one])
    }
}

impl From<Vec<IpAddr>> for Addresses {
    fn from(list: Vec<IpAddr>) -> Self {
        Addresses(list)
    }
}

impl Serialize for Addresses {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.as_slice() {
            [one] => s.collect_str(one),
            list => s.collect_seq(list.iter().map(|ip| ip.to_string())),
        }
    }
}

impl<'de> Deserialize<'de> for Addresses {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Addresses;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an IP address or a list of IP addresses")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Addresses, E> {
                IpAddr::parse_quoted(v)
                    .map(|ip| Addresses(vec![ip]))
                    .map_err(E::custom)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Addresses, A::Error> {
                let mut list = Vec::new();
                while let Some(Quoted(one)) = seq.next_element::<Quoted<IpAddr>>()? {
                    list.push(one);
                }
                Ok(Addresses(list))
            }
        }
        d.deserialize_any(Visit)
    }
}

impl JsonSchema for Addresses {
    fn schema_name() -> Cow<'static, str> {
        "Addresses".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "anyOf": [
                { "type": "string" },
                { "type": "array", "items": { "type": "string" }, "minItems": 1 }
            ]
        })
    }
}

text_serde!(
    IpPort,
    "IpPort",
    "An IP address, with or without a port: `192.0.2.3`, `192.0.2.3:53`, `[2001:db8::1]:53`."
);
text_serde!(
    ListenAddress,
    "ListenAddress",
    "`ip`, `ip:port` (port 53 by default), or the pod's own address: `$(POD_IP)` or `$(POD_IP):port`."
);

/// An address type whose parse error quotes the value (the standard
/// library's errors do not).
pub(crate) trait ParseQuoted: Sized {
    fn parse_quoted(s: &str) -> Result<Self, String>;
}

impl ParseQuoted for IpAddr {
    fn parse_quoted(s: &str) -> Result<Self, String> {
        s.trim()
            .parse()
            .map_err(|_| format!("`{s}` is not an IP address"))
    }
}

impl ParseQuoted for Ipv4Addr {
    fn parse_quoted(s: &str) -> Result<Self, String> {
        s.trim()
            .parse()
            .map_err(|_| format!("`{s}` is not an IPv4 address"))
    }
}

impl ParseQuoted for Ipv6Addr {
    fn parse_quoted(s: &str) -> Result<Self, String> {
        s.trim()
            .parse()
            .map_err(|_| format!("`{s}` is not an IPv6 address"))
    }
}

impl ParseQuoted for Cidr {
    fn parse_quoted(s: &str) -> Result<Self, String> {
        s.trim()
            .parse()
            .map_err(|e| format!("`{s}` is not a CIDR subnet: {e}"))
    }
}

/// One value read through [`ParseQuoted`].
struct Quoted<T>(T);

impl<'de, T: ParseQuoted> Deserialize<'de> for Quoted<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Cow::<str>::deserialize(d)?;
        T::parse_quoted(&s)
            .map(Quoted)
            .map_err(serde::de::Error::custom)
    }
}

/// `deserialize_with` helpers for address fields of standard types, so
/// that a bad value is quoted in the error. Lists keep their element
/// index in the field path.
pub(crate) mod quoted {
    use super::{ParseQuoted, Quoted};
    use serde::{Deserialize, Deserializer};

    /// A single address.
    pub(crate) fn one<'de, D: Deserializer<'de>, T: ParseQuoted>(d: D) -> Result<T, D::Error> {
        Quoted::<T>::deserialize(d).map(|q| q.0)
    }

    /// An optional address.
    pub(crate) fn option<'de, D: Deserializer<'de>, T: ParseQuoted>(
        d: D,
    ) -> Result<Option<T>, D::Error> {
        Option::<Quoted<T>>::deserialize(d).map(|o| o.map(|q| q.0))
    }

    /// A list of addresses.
    pub(crate) fn list<'de, D: Deserializer<'de>, T: ParseQuoted>(
        d: D,
    ) -> Result<Vec<T>, D::Error> {
        Vec::<Quoted<T>>::deserialize(d).map(|v| v.into_iter().map(|q| q.0).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_port_keeps_whether_a_port_was_written() {
        let bare: IpPort = " 10.0.0.10 ".parse().expect("bare");
        assert_eq!((bare.port, bare.to_string()), (None, "10.0.0.10".into()));
        assert_eq!(bare.or_port(53).to_string(), "10.0.0.10:53");
        let v6: IpPort = "[2001:db8::1]:5353".parse().expect("v6");
        assert_eq!(v6.to_string(), "[2001:db8::1]:5353");
        assert_eq!(v6.or_port(53).port(), 5353);
        let err = "dns.example.com:53".parse::<IpPort>().expect_err("name");
        assert!(err.contains("`dns.example.com:53`"), "{err}");
    }

    #[test]
    fn listen_addresses_are_fixed_or_the_pods_own() {
        for (text, want) in [
            (
                "192.0.2.3:53",
                ListenAddress::Ip(IpPort::new([192, 0, 2, 3], 53)),
            ),
            ("$(POD_IP)", ListenAddress::PodIp(None)),
            ("$(POD_IP):5353", ListenAddress::PodIp(Some(5353))),
        ] {
            let got: ListenAddress = text.parse().expect(text);
            assert_eq!(got, want);
            assert_eq!(got.to_string(), text, "written back as read");
        }
        for bad in ["$(POD_IP):0", "$(POD_IP)5353", "$(POD_IP):x", "nope"] {
            let err = bad.parse::<ListenAddress>().expect_err(bad);
            assert!(err.contains(bad), "{err}");
        }
    }
}
