//! The lease inventory API of an `oooi-dhcp` server: read-only, on the pod
//! network, authenticated with a bearer token.
//!
//! The server answers it (`oooi-dhcp`), the controller asks it and joins the
//! rows with VMs, Machines and hosted clusters (`oooi-controller leases`,
//! DHCPServer status). Both sides use these types, so the contract is kept
//! equal by the compiler rather than by tests.
//!
//! Routes, all `GET`, all under [`API_PREFIX`], all requiring
//! `Authorization: Bearer <token>`:
//!
//! | route | answer |
//! |---|---|
//! | `/leases?<LeaseQuery>` | [`LeasePage`]: rows matching every given filter, in address order, at most `limit` (≤ [`MAX_PAGE`]); `next` is the `after` of the following page |
//! | `/pools` | [`PoolReport`]: figures per pool and refusal counts by reason |
//! | `/why?mac=<mac>` | [`Why`]: the client's lease, if any, and its last refusals (at most [`EVENTS_PER_CLIENT`]) |
//!
//! Addresses are [`IpAddr`]: a DHCPv6 lease (DUID, IAID) fits the same row.
//! Fields may be added to answers; clients ignore fields they do not know.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// Path prefix of every route.
pub const API_PREFIX: &str = "/inventory/v1";
/// The port the server listens on (pod network).
pub const PORT: u16 = 9069;
/// Rows per page when the query names no limit.
pub const DEFAULT_PAGE: u32 = 100;
/// The most rows one page carries.
pub const MAX_PAGE: u32 = 1000;
/// Refusals kept per client (newest last).
pub const EVENTS_PER_CLIENT: usize = 8;
/// Clients whose recent refusals are kept (the least recently refused is
/// forgotten first), so a flood of made-up MACs cannot grow memory.
pub const CLIENTS_REMEMBERED: usize = 4096;

/// Which server of a pair, or a server alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerRole {
    /// The only server of its DHCPServer.
    Single,
    /// The pair's primary.
    Primary,
    /// The pair's secondary.
    Secondary,
}

/// Where a lease stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseState {
    /// Offered, not yet requested; held for the client briefly.
    Offered,
    /// Bound and not expired.
    Active,
    /// Bound once, expired; the address goes back to the client first.
    Expired,
    /// Released by the client.
    Released,
    /// Declined by a client or found in use by a probe: out of the pool
    /// until `expires_unix`.
    Declined,
    /// Its record was damaged: offered to nobody until its lease would
    /// have ended.
    Lost,
    /// Held back after a pair split until the other server's leases are
    /// known.
    HeldBack,
}

impl LeaseState {
    /// Every state, in display order.
    pub const ALL: [LeaseState; 7] = [
        LeaseState::Offered,
        LeaseState::Active,
        LeaseState::Expired,
        LeaseState::Released,
        LeaseState::Declined,
        LeaseState::Lost,
        LeaseState::HeldBack,
    ];

    /// The wire name (also the `state=` query value).
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseState::Offered => "offered",
            LeaseState::Active => "active",
            LeaseState::Expired => "expired",
            LeaseState::Released => "released",
            LeaseState::Declined => "declined",
            LeaseState::Lost => "lost",
            LeaseState::HeldBack => "held_back",
        }
    }

    /// The state named `s` (its wire name).
    pub fn parse(s: &str) -> Option<LeaseState> {
        LeaseState::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

impl fmt::Display for LeaseState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a client got no address or no answer. Every refusal and every
/// silence toward a client is counted under one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalReason {
    /// The client is not known (no reservation) and the server serves
    /// known clients only.
    UnknownClientIgnored,
    /// No free address in the pool.
    PoolExhausted,
    /// The address to offer answered a probe (ARP/ICMP): someone else
    /// uses it; it was quarantined and not offered.
    ProbeConflict,
    /// The address asked for is quarantined (declined or lost).
    Quarantined,
    /// The address asked for is not one this client may have (outside the
    /// pool, an infrastructure address, someone else's reservation).
    NotAllowed,
    /// The address asked for is live for another client.
    InUse,
    /// The client's reserved address is held by another client.
    ReservedAddressInUse,
    /// Relayed from a relay the server does not accept.
    RelayRefused,
    /// In a pair, the other server answers this client (its half of the
    /// hash space), and this one stayed silent.
    NotThisServersHalf,
    /// Addressed to another server (server identifier), so ignored.
    OtherServerChosen,
    /// A malformed or unsupported message.
    Malformed,
}

impl RefusalReason {
    /// Every reason, in display order.
    pub const ALL: [RefusalReason; 11] = [
        RefusalReason::UnknownClientIgnored,
        RefusalReason::PoolExhausted,
        RefusalReason::ProbeConflict,
        RefusalReason::Quarantined,
        RefusalReason::NotAllowed,
        RefusalReason::InUse,
        RefusalReason::ReservedAddressInUse,
        RefusalReason::RelayRefused,
        RefusalReason::NotThisServersHalf,
        RefusalReason::OtherServerChosen,
        RefusalReason::Malformed,
    ];

    /// The wire name (also a metric label value).
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalReason::UnknownClientIgnored => "unknown_client_ignored",
            RefusalReason::PoolExhausted => "pool_exhausted",
            RefusalReason::ProbeConflict => "probe_conflict",
            RefusalReason::Quarantined => "quarantined",
            RefusalReason::NotAllowed => "not_allowed",
            RefusalReason::InUse => "in_use",
            RefusalReason::ReservedAddressInUse => "reserved_address_in_use",
            RefusalReason::RelayRefused => "relay_refused",
            RefusalReason::NotThisServersHalf => "not_this_servers_half",
            RefusalReason::OtherServerChosen => "other_server_chosen",
            RefusalReason::Malformed => "malformed",
        }
    }
}

impl fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The server that answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerInfo {
    /// Its role.
    pub role: ServerRole,
    /// The pair's state as this server sees it (`None` alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pair_state: Option<String>,
    /// Its clock when it answered, Unix seconds (expiry times are on it).
    pub now_unix: u64,
}

/// One lease (or one quarantined address).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRow {
    /// The address.
    pub address: IpAddr,
    /// The client's hardware address (`aa:bb:cc:dd:ee:ff`); `None` for an
    /// address quarantined without a client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// The client identifier (DHCPv4 option 61, or the DHCPv6 DUID), as
    /// lower-case hex without separators.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// The DHCPv6 IA_NA's IAID (`None` for DHCPv4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iaid: Option<u32>,
    /// The host name: the reservation's, else the one the client sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Where the lease stands.
    pub state: LeaseState,
    /// Whether the address is the client's reservation.
    #[serde(default)]
    pub reserved: bool,
    /// The client's last transaction with either server, Unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cltt_unix: Option<u64>,
    /// When the lease (offer, quarantine) ends or ended, Unix seconds.
    pub expires_unix: u64,
    /// Which server of a pair answered the client last, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_by: Option<ServerRole>,
}

/// The filters of `GET /leases`; every one given must match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseQuery {
    /// The address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<IpAddr>,
    /// The hardware address, any case, `:` or `-` separated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// The client identifier or DUID, hex, separators (`:`) ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// The host name, exact and case-insensitive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// The state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<LeaseState>,
    /// Only rows whose address sorts after this one (the previous page's
    /// `next`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<IpAddr>,
    /// Rows per page ([`DEFAULT_PAGE`] when absent, at most [`MAX_PAGE`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// A MAC in the one spelling rows use (`aa:bb:cc:dd:ee:ff`), from any case
/// and `:`, `-` or no separators; `None` if it is not 6 bytes of hex.
pub fn canonical_mac(s: &str) -> Option<String> {
    let hex = canonical_hex(s)?;
    if hex.len() != 12 {
        return None;
    }
    let pairs: Vec<&str> = (0..6).map(|i| &hex[2 * i..2 * i + 2]).collect();
    Some(pairs.join(":"))
}

/// Hex bytes in the one spelling rows use (lower case, no separators), from
/// any case with `:`, `-` or no separators; `None` if not whole hex bytes.
pub fn canonical_hex(s: &str) -> Option<String> {
    let hex: String = s
        .chars()
        .filter(|c| *c != ':' && *c != '-')
        .map(|c| c.to_ascii_lowercase())
        .collect();
    if hex.is_empty() || !hex.len().is_multiple_of(2) || !hex.chars().all(|c| c.is_ascii_hexdigit())
    {
        return None;
    }
    Some(hex)
}

impl LeaseQuery {
    /// The page size this query asks for, within bounds.
    pub fn page_size(&self) -> usize {
        self.limit.unwrap_or(DEFAULT_PAGE).clamp(1, MAX_PAGE) as usize
    }

    /// Whether `row` passes every filter (paging aside). A filter that
    /// cannot match anything (a malformed MAC) matches nothing.
    pub fn matches(&self, row: &LeaseRow) -> bool {
        if self.ip.is_some_and(|ip| ip != row.address) {
            return false;
        }
        if let Some(mac) = &self.mac
            && canonical_mac(mac).as_deref() != row.mac.as_deref()
        {
            return false;
        }
        if let Some(id) = &self.client_id
            && canonical_hex(id).as_deref() != row.client_id.as_deref()
        {
            return false;
        }
        if let Some(h) = &self.hostname
            && !row
                .hostname
                .as_deref()
                .is_some_and(|rh| rh.eq_ignore_ascii_case(h))
        {
            return false;
        }
        if self.state.is_some_and(|s| s != row.state) {
            return false;
        }
        true
    }

    /// One page of `rows` (any order): those matching, in address order,
    /// after `after`, at most [`Self::page_size`], and the `after` of the
    /// next page when more remain.
    pub fn page<'a>(
        &self,
        rows: impl IntoIterator<Item = &'a LeaseRow>,
    ) -> (Vec<LeaseRow>, Option<IpAddr>) {
        let mut hits: Vec<&LeaseRow> = rows
            .into_iter()
            .filter(|r| self.matches(r))
            .filter(|r| self.after.is_none_or(|a| r.address > a))
            .collect();
        hits.sort_by_key(|r| r.address);
        let size = self.page_size();
        let next = (hits.len() > size).then(|| hits[size - 1].address);
        (hits.into_iter().take(size).cloned().collect(), next)
    }
}

/// The answer to `GET /leases`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeasePage {
    /// Who answered.
    pub server: ServerInfo,
    /// The rows, in address order.
    pub leases: Vec<LeaseRow>,
    /// The `after` of the next page; `None` on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<IpAddr>,
}

/// Figures of one pool (a dynamic range, or the reservations).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolFigures {
    /// The range, `first-last`, or `reservations`.
    pub range: String,
    /// Addresses in it.
    pub total: u64,
    /// Bound to a client and not expired.
    pub assigned: u64,
    /// Offered, not yet requested.
    pub offered: u64,
    /// Declined, probe-conflicted or lost: out of use for a while.
    pub quarantined: u64,
    /// Held back after a pair split.
    #[serde(default)]
    pub held_back: u64,
    /// Reserved for a known client (counted in `total`; a reserved address
    /// is never given to another client).
    pub reserved: u64,
    /// Free to give out now.
    pub free: u64,
}

impl PoolFigures {
    /// The share of the pool not free, 0.0..=1.0 (0 for an empty pool).
    pub fn utilisation(&self) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        1.0 - (self.free as f64 / self.total as f64)
    }
}

/// The answer to `GET /pools`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolReport {
    /// Who answered.
    pub server: ServerInfo,
    /// One entry per pool.
    pub pools: Vec<PoolFigures>,
    /// Refusals and silences toward clients since the server started, by
    /// reason (reasons never seen may be absent).
    pub refusals: BTreeMap<RefusalReason, u64>,
}

/// One refusal or silence toward a client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusalEvent {
    /// When, Unix seconds.
    pub at_unix: u64,
    /// Why.
    pub reason: RefusalReason,
    /// The client's message (`DISCOVER`, `REQUEST`, `SOLICIT`, …).
    pub message: String,
    /// The address concerned, if one was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<IpAddr>,
    /// More words for a person, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// The answer to `GET /why?mac=`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Why {
    /// Who answered.
    pub server: ServerInfo,
    /// The client asked about, canonical.
    pub mac: String,
    /// Its lease on this server, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseRow>,
    /// Its last refusals, oldest first (empty when none is remembered).
    pub events: Vec<RefusalEvent>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(ip: &str, mac: &str, state: LeaseState) -> LeaseRow {
        LeaseRow {
            address: ip.parse().unwrap(),
            mac: Some(mac.to_string()),
            client_id: Some("01525400000001".to_string()),
            iaid: None,
            hostname: Some("worker-a".to_string()),
            state,
            reserved: false,
            cltt_unix: Some(100),
            expires_unix: 200,
            answered_by: Some(ServerRole::Primary),
        }
    }

    #[test]
    fn macs_and_hex_have_one_spelling() {
        assert_eq!(
            canonical_mac("52-54-00-AB-cd-01").as_deref(),
            Some("52:54:00:ab:cd:01")
        );
        assert_eq!(
            canonical_mac("525400abcd01").as_deref(),
            Some("52:54:00:ab:cd:01")
        );
        assert_eq!(canonical_mac("52:54:00:ab:cd"), None);
        assert_eq!(canonical_mac("52:54:00:ab:cd:0g"), None);
        assert_eq!(canonical_hex("01:AB").as_deref(), Some("01ab"));
        assert_eq!(canonical_hex("1ab"), None);
        assert_eq!(canonical_hex(""), None);
    }

    #[test]
    fn every_filter_given_must_match() {
        let r = row("192.0.2.10", "52:54:00:00:00:01", LeaseState::Active);
        assert!(LeaseQuery::default().matches(&r));
        let q = |f: fn(&mut LeaseQuery)| {
            let mut q = LeaseQuery::default();
            f(&mut q);
            q.matches(&r)
        };
        assert!(q(|q| q.ip = Some("192.0.2.10".parse().unwrap())));
        assert!(!q(|q| q.ip = Some("192.0.2.11".parse().unwrap())));
        assert!(q(|q| q.mac = Some("52-54-00-00-00-01".into())));
        assert!(!q(|q| q.mac = Some("52:54:00:00:00:02".into())));
        assert!(!q(|q| q.mac = Some("not a mac".into())));
        assert!(q(|q| q.client_id = Some("01:52:54:00:00:00:01".into())));
        assert!(!q(|q| q.client_id = Some("ff".into())));
        assert!(q(|q| q.hostname = Some("WORKER-A".into())));
        assert!(!q(|q| q.hostname = Some("worker".into())));
        assert!(q(|q| q.state = Some(LeaseState::Active)));
        assert!(!q(|q| q.state = Some(LeaseState::Expired)));
    }

    #[test]
    fn pages_walk_every_match_once_in_address_order() {
        let rows: Vec<LeaseRow> = (1..=25u8)
            .rev()
            .map(|i| {
                let state = if i.is_multiple_of(5) {
                    LeaseState::Declined
                } else {
                    LeaseState::Active
                };
                row(&format!("192.0.2.{i}"), "52:54:00:00:00:01", state)
            })
            .collect();
        let mut q = LeaseQuery {
            state: Some(LeaseState::Active),
            limit: Some(7),
            ..LeaseQuery::default()
        };
        let mut seen = Vec::new();
        loop {
            let (page, next) = q.page(&rows);
            assert!(page.len() <= 7);
            seen.extend(page.iter().map(|r| r.address));
            match next {
                Some(after) => q.after = Some(after),
                None => break,
            }
        }
        let want: Vec<IpAddr> = (1..=25u8)
            .filter(|i| !i.is_multiple_of(5))
            .map(|i| format!("192.0.2.{i}").parse().unwrap())
            .collect();
        assert_eq!(seen, want);
    }

    #[test]
    fn page_size_is_bounded() {
        let q = |limit| LeaseQuery {
            limit,
            ..LeaseQuery::default()
        };
        assert_eq!(q(None).page_size(), DEFAULT_PAGE as usize);
        assert_eq!(q(Some(0)).page_size(), 1);
        assert_eq!(q(Some(1_000_000)).page_size(), MAX_PAGE as usize);
    }

    #[test]
    fn the_wire_shape_is_stable() {
        let r = row("2001:db8::10", "52:54:00:00:00:01", LeaseState::HeldBack);
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["address"], "2001:db8::10");
        assert_eq!(v["state"], "held_back");
        assert_eq!(v["answered_by"], "primary");
        assert!(v.get("iaid").is_none());
        let back: LeaseRow = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);
        // A newer server's extra field does not break an older client.
        let mut v = serde_json::to_value(&r).unwrap();
        v["future_field"] = serde_json::json!(1);
        assert!(serde_json::from_value::<LeaseRow>(v).is_ok());
        for s in LeaseState::ALL {
            assert_eq!(LeaseState::parse(s.as_str()), Some(s));
            assert_eq!(
                serde_json::to_value(s).unwrap(),
                serde_json::json!(s.as_str())
            );
        }
        for r in RefusalReason::ALL {
            assert_eq!(
                serde_json::to_value(r).unwrap(),
                serde_json::json!(r.as_str())
            );
        }
        let report = PoolReport {
            server: ServerInfo {
                role: ServerRole::Single,
                pair_state: None,
                now_unix: 5,
            },
            pools: vec![],
            refusals: [(RefusalReason::PoolExhausted, 3)].into(),
        };
        let v = serde_json::to_value(&report).unwrap();
        assert_eq!(v["refusals"]["pool_exhausted"], 3);
    }

    #[test]
    fn utilisation_counts_everything_not_free() {
        let p = PoolFigures {
            range: "192.0.2.10-192.0.2.19".into(),
            total: 10,
            assigned: 6,
            offered: 1,
            quarantined: 1,
            held_back: 0,
            reserved: 0,
            free: 2,
        };
        assert!((p.utilisation() - 0.8).abs() < 1e-9);
        assert_eq!(PoolFigures::default().utilisation(), 0.0);
    }
}
