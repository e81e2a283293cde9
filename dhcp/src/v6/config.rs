//! The DHCPv6 section of the server's configuration, typed.

use std::net::Ipv6Addr;

use ipnet::Ipv6Net;
use serde::{Deserialize, Serialize};

use crate::config::Mac;

/// One address kept for one machine, by its MAC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reservation {
    /// The machine's Ethernet address (see [`super::duid::client_mac`] for
    /// how a DHCPv6 client's MAC is known).
    pub mac: Mac,
    /// The address it always gets; inside `prefix`, may be outside the range.
    pub address: Ipv6Addr,
}

/// The DHCPv6 service of one link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct V6Config {
    /// The server's own MAC on the link: its DUID-LL is built from it, so the
    /// Server Identifier stays the same across restarts without any state.
    pub server_mac: Mac,
    /// The on-link prefix: Confirm, Request and Rebind test addresses
    /// against it (NotOnLink, zero lifetimes).
    pub prefix: Ipv6Net,
    /// First address of the dynamic range (inclusive).
    pub range_start: Ipv6Addr,
    /// Last address of the dynamic range (inclusive).
    pub range_end: Ipv6Addr,
    /// Addresses kept for machines by MAC.
    #[serde(default)]
    pub reservations: Vec<Reservation>,
    /// DNS recursive name servers (option 23).
    #[serde(default)]
    pub dns_servers: Vec<Ipv6Addr>,
    /// Domain search list (option 24).
    #[serde(default)]
    pub search: Vec<String>,
    /// Preferred lifetime of an address, seconds.
    #[serde(default = "default_preferred")]
    pub preferred_lifetime: u32,
    /// Valid lifetime of an address, seconds (the binding's length).
    #[serde(default = "default_valid")]
    pub valid_lifetime: u32,
    /// T1 (renew), seconds; 0.5 × preferred when absent (RFC 8415 §21.4).
    #[serde(default)]
    pub t1: Option<u32>,
    /// T2 (rebind), seconds; 0.8 × preferred when absent.
    #[serde(default)]
    pub t2: Option<u32>,
    /// Answer a Solicit carrying Rapid Commit with a committed Reply.
    /// Off by default: with two servers on a link (the pair), both would
    /// commit an address for the same client, and the one the client does not
    /// use stays bound until it expires (RFC 8415 §18.3.1 warns of this).
    #[serde(default)]
    pub rapid_commit: bool,
    /// Server Preference (option 7) in Advertise. 255 makes a client request
    /// at once instead of waiting its first retransmission time for others.
    #[serde(default = "default_preference")]
    pub preference: u8,
    /// How long an advertised address stays set aside for its client, seconds.
    #[serde(default = "default_offer_hold")]
    pub offer_hold: u32,
    /// How long a declined address stays out of the pool, seconds.
    #[serde(default = "default_decline_hold")]
    pub decline_hold: u32,
}

fn default_preferred() -> u32 {
    3000
}
fn default_valid() -> u32 {
    3600
}
fn default_preference() -> u8 {
    255
}
fn default_offer_hold() -> u32 {
    60
}
fn default_decline_hold() -> u32 {
    86_400
}

/// A v6 section that cannot be served, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The range is empty or reversed.
    #[error("rangeStart {start} is after rangeEnd {end}")]
    RangeReversed {
        /// rangeStart
        start: Ipv6Addr,
        /// rangeEnd
        end: Ipv6Addr,
    },
    /// An address outside the on-link prefix.
    #[error("{field} {address} is outside prefix {prefix}")]
    OutsidePrefix {
        /// The field's name.
        field: &'static str,
        /// The address given.
        address: Ipv6Addr,
        /// The prefix.
        prefix: Ipv6Net,
    },
    /// Two reservations for one MAC, or one address for two MACs.
    #[error("reservations: {0} appears twice")]
    DuplicateReservation(String),
    /// Lifetimes that break RFC 8415's ordering T1 ≤ T2 ≤ preferred ≤ valid.
    #[error("lifetimes must satisfy t1 <= t2 <= preferredLifetime <= validLifetime, valid > 0")]
    Lifetimes,
    /// A search domain that is not a DNS name.
    #[error("search: `{0}` is not a domain name")]
    SearchDomain(String),
}

impl V6Config {
    /// A config with the defaults for everything but the link's facts.
    pub fn new(
        server_mac: Mac,
        prefix: Ipv6Net,
        range_start: Ipv6Addr,
        range_end: Ipv6Addr,
    ) -> Self {
        V6Config {
            server_mac,
            prefix,
            range_start,
            range_end,
            reservations: Vec::new(),
            dns_servers: Vec::new(),
            search: Vec::new(),
            preferred_lifetime: default_preferred(),
            valid_lifetime: default_valid(),
            t1: None,
            t2: None,
            rapid_commit: false,
            preference: default_preference(),
            offer_hold: default_offer_hold(),
            decline_hold: default_decline_hold(),
        }
    }

    /// T1 as sent in IA_NA.
    pub fn t1(&self) -> u32 {
        self.t1.unwrap_or(self.preferred_lifetime / 2)
    }

    /// T2 as sent in IA_NA.
    pub fn t2(&self) -> u32 {
        self.t2
            .unwrap_or((u64::from(self.preferred_lifetime) * 4 / 5) as u32)
    }

    /// Checks the rules a served section must keep.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let (start, end) = (u128::from(self.range_start), u128::from(self.range_end));
        if start > end {
            return Err(ConfigError::RangeReversed {
                start: self.range_start,
                end: self.range_end,
            });
        }
        let inside = |field, address| {
            if self.prefix.contains(&address) {
                Ok(())
            } else {
                Err(ConfigError::OutsidePrefix {
                    field,
                    address,
                    prefix: self.prefix,
                })
            }
        };
        inside("rangeStart", self.range_start)?;
        inside("rangeEnd", self.range_end)?;
        let mut macs = std::collections::BTreeSet::new();
        let mut addrs = std::collections::BTreeSet::new();
        for r in &self.reservations {
            inside("reservations.address", r.address)?;
            if !macs.insert(r.mac) {
                return Err(ConfigError::DuplicateReservation(r.mac.to_string()));
            }
            if !addrs.insert(r.address) {
                return Err(ConfigError::DuplicateReservation(r.address.to_string()));
            }
        }
        if self.valid_lifetime == 0
            || self.t1() > self.t2()
            || self.t2() > self.preferred_lifetime
            || self.preferred_lifetime > self.valid_lifetime
        {
            return Err(ConfigError::Lifetimes);
        }
        for s in &self.search {
            if s.parse::<dhcproto::Name>().is_err() {
                return Err(ConfigError::SearchDomain(s.clone()));
            }
        }
        Ok(())
    }

    /// The address reserved for `mac`, if any.
    pub fn reserved_for(&self, mac: Mac) -> Option<Ipv6Addr> {
        self.reservations
            .iter()
            .find(|r| r.mac == mac)
            .map(|r| r.address)
    }

    /// The MAC an address is reserved for, if any.
    pub fn reservation_of(&self, address: Ipv6Addr) -> Option<Mac> {
        self.reservations
            .iter()
            .find(|r| r.address == address)
            .map(|r| r.mac)
    }

    /// Number of addresses in the dynamic range (saturating: the whole
    /// address space counts one short, which no allocation notices).
    pub fn range_size(&self) -> u128 {
        (u128::from(self.range_end) - u128::from(self.range_start)).saturating_add(1)
    }

    /// Whether `address` is in the dynamic range.
    pub fn in_range(&self, address: Ipv6Addr) -> bool {
        let a = u128::from(address);
        u128::from(self.range_start) <= a && a <= u128::from(self.range_end)
    }
}
