//! An inclusive range of addresses of one family: a DHCP pool, a MetalLB
//! address pool.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;

/// The addresses from `start` to `end`, both included, of one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AddressRange {
    start: IpAddr,
    end: IpAddr,
}

impl AddressRange {
    /// The range from `start` to `end`; `None` when they are of two
    /// families or `end` is before `start`.
    pub fn new(start: IpAddr, end: IpAddr) -> Option<AddressRange> {
        (start.is_ipv4() == end.is_ipv4() && start <= end).then_some(AddressRange { start, end })
    }

    /// One address.
    pub fn single(a: IpAddr) -> AddressRange {
        AddressRange { start: a, end: a }
    }

    /// Parses `start-end` (`192.0.2.200-192.0.2.209`, `2001:db8::10-2001:db8::1f`),
    /// a CIDR (every address of its network, network and broadcast
    /// included) or a single address, of either family. `None` when it is
    /// none of them.
    pub fn parse(s: &str) -> Option<AddressRange> {
        let s = s.trim();
        if let Some((a, b)) = s.split_once('-') {
            return AddressRange::new(a.trim().parse().ok()?, b.trim().parse().ok()?);
        }
        if s.contains('/') {
            let net: IpNet = s.parse().ok()?;
            let net = net.trunc();
            return Some(AddressRange {
                start: net.network(),
                end: net.broadcast(),
            });
        }
        Some(AddressRange::single(s.parse().ok()?))
    }

    /// The first address.
    pub fn start(&self) -> IpAddr {
        self.start
    }

    /// The last address (included).
    pub fn end(&self) -> IpAddr {
        self.end
    }

    /// True when `a` lies in the range (never across families).
    pub fn contains(&self, a: IpAddr) -> bool {
        a.is_ipv4() == self.start.is_ipv4() && self.start <= a && a <= self.end
    }

    /// True when the two ranges share an address.
    pub fn overlaps(&self, other: &AddressRange) -> bool {
        self.start.is_ipv4() == other.start.is_ipv4()
            && self.start <= other.end
            && other.start <= self.end
    }
}

impl fmt::Display for AddressRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.start, self.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_range_is_written_as_two_ends_a_cidr_or_one_address_of_either_family() {
        let r = AddressRange::parse("192.0.2.200-192.0.2.209").unwrap();
        assert_eq!((r.start(), r.end()), (ip("192.0.2.200"), ip("192.0.2.209")));
        assert_eq!(r.to_string(), "192.0.2.200-192.0.2.209");
        let c = AddressRange::parse("192.0.2.208/29").unwrap();
        assert_eq!(c.to_string(), "192.0.2.208-192.0.2.215");
        assert!(r.overlaps(&c) && c.overlaps(&r));
        let one = AddressRange::parse("192.0.2.7").unwrap();
        assert_eq!(one, AddressRange::single(ip("192.0.2.7")));
        assert!(!one.overlaps(&r));
        let v6 = AddressRange::parse("2001:db8::10-2001:db8::1f").unwrap();
        assert!(v6.contains(ip("2001:db8::1a")) && !v6.contains(ip("192.0.2.205")));
        assert_eq!(
            AddressRange::parse("2001:db8::/126").unwrap().to_string(),
            "2001:db8::-2001:db8::3"
        );
        assert!(!v6.overlaps(&r), "never across families");
    }

    #[test]
    fn reversed_mixed_and_junk_ranges_are_none() {
        for bad in [
            "192.0.2.9-192.0.2.1",
            "192.0.2.1-2001:db8::1",
            "apps",
            "192.0.2.1-",
            "192.0.2.0/40",
            "",
        ] {
            assert_eq!(AddressRange::parse(bad), None, "{bad}");
        }
    }
}
