//! The lease inventory: a read-only HTTP API (the contract is the
//! `oooi-dhcp-inventory` crate) answering who has which address, how full
//! each pool is, and why a client got no address.
//!
//! The decision loop owns the lease table, so the API asks it
//! ([`Inventory::ask`]): a question goes through a channel, a byte on a
//! socket pair wakes the loop, which answers between two datagrams with the
//! rows built from the table and [`meta`] (the per-lease metadata it keeps
//! beside the table). Refusals ([`refusals`]) are recorded by the loop
//! under a mutex the API reads directly. [`api`] serves it all.

pub mod api;
pub mod meta;
pub mod refusals;
pub mod rows;

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oooi_dhcp_inventory::{LeaseQuery, LeaseRow, PoolFigures, RefusalReason, ServerInfo};

use crate::config::Mac;
use crate::lease_store::DECLINED_MAC;
use crate::leases::{Binding, LeaseTable, Refusal, State};
use crate::pipeline::{
    Decision, Dropped, IGNORED_MESSAGE_TYPE, IGNORED_OTHER_SERVER, IGNORED_UNKNOWN_CLIENT,
};
use refusals::Refusals;

/// A question for the decision loop.
#[derive(Debug, Clone)]
pub enum Question {
    /// A page of rows.
    Leases(LeaseQuery),
    /// The pool figures.
    Pools,
    /// One client's row.
    Client(Mac),
}

/// The decision loop's answer.
#[derive(Debug, Clone)]
pub enum Answer {
    /// A page of rows and the next page's `after`.
    Leases(ServerInfo, Vec<LeaseRow>, Option<IpAddr>),
    /// The pool figures.
    Pools(ServerInfo, Vec<PoolFigures>),
    /// One client's row.
    Client(ServerInfo, Option<LeaseRow>),
}

/// A question and where its answer goes.
pub struct Ask {
    /// The question.
    pub question: Question,
    /// Where the answer goes.
    pub reply: Sender<Answer>,
}

/// The inventory's shared end: the API asks through it and reads the
/// refusals.
pub struct Inventory {
    asks: Mutex<Sender<Ask>>,
    wake: UnixStream,
    /// Refusals, recorded by the decision loop.
    pub refusals: Arc<Mutex<Refusals>>,
}

/// The decision loop's end.
pub struct InventoryLoop {
    /// Questions.
    pub asks: Receiver<Ask>,
    /// Readable when questions wait.
    pub wake: UnixStream,
}

impl Inventory {
    /// Both ends, over the refusals the decision loop records.
    pub fn new(refusals: Arc<Mutex<Refusals>>) -> std::io::Result<(Arc<Inventory>, InventoryLoop)> {
        let (tx, rx) = std::sync::mpsc::channel();
        let (wake_tx, wake_rx) = UnixStream::pair()?;
        wake_tx.set_nonblocking(true)?;
        wake_rx.set_nonblocking(true)?;
        Ok((
            Arc::new(Inventory {
                asks: Mutex::new(tx),
                wake: wake_tx,
                refusals,
            }),
            InventoryLoop {
                asks: rx,
                wake: wake_rx,
            },
        ))
    }

    /// Asks the decision loop; None when it does not answer within
    /// `timeout` (it stopped).
    pub fn ask(&self, question: Question, timeout: Duration) -> Option<Answer> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.asks
            .lock()
            .ok()?
            .send(Ask {
                question,
                reply: tx,
            })
            .ok()?;
        // A full socket buffer means a wake-up is already pending.
        let _ = (&self.wake).write(&[1]);
        rx.recv_timeout(timeout).ok()
    }
}

/// Who answers: this server's role, the pair's state and the time.
pub fn server_info(table: &LeaseTable, now: u64) -> ServerInfo {
    ServerInfo {
        role: rows::role_of(table),
        pair_state: table.share().map(|s| s.state.as_str().to_string()),
        now_unix: now,
    }
}

/// The answer to `question` over the table and its metadata at `now`.
pub fn answer(table: &LeaseTable, meta: &meta::Meta, question: &Question, now: u64) -> Answer {
    let view = rows::View { table, meta, now };
    let info = server_info(table, now);
    match question {
        Question::Leases(q) => {
            let (rows, next) = view.page(q);
            Answer::Leases(info, rows, next)
        }
        Question::Pools => Answer::Pools(info, view.pools()),
        Question::Client(mac) => Answer::Client(info, view.client(*mac)),
    }
}

/// The refusal a dropped datagram counts as, for a client's request (the
/// caller leaves out datagrams that are not requests: a BOOTREPLY is no
/// client's).
pub fn refusal_of_drop(d: Dropped) -> (RefusalReason, &'static str) {
    match d {
        Dropped::Malformed
        | Dropped::NotARequest
        | Dropped::UnsupportedHardware
        | Dropped::GroupHardwareAddress => (RefusalReason::Malformed, d.as_str()),
        Dropped::RelayOutsideSubnet => (
            RefusalReason::RelayRefused,
            "relay agent (giaddr) outside the served subnet",
        ),
        Dropped::BadRelayAddress => (
            RefusalReason::RelayRefused,
            "giaddr no relay agent can have",
        ),
        Dropped::PeerScope => (
            RefusalReason::NotThisServersHalf,
            "the other server of the pair answers this client",
        ),
        Dropped::PairSyncing => (
            RefusalReason::NotThisServersHalf,
            "fetching the other server's leases after start: the other server answers meanwhile",
        ),
    }
}

/// The refusal a decision counts as, with the address concerned and a
/// detail, or None when the client got what it asked for (or asked for
/// nothing a reply answers: RELEASE and DECLINE never get one). `asked` is
/// the address a REQUEST named; `holder` its binding in the table after
/// the decision (which tells a quarantine from another client's lease).
pub fn refusal_of_decision(
    d: &Decision,
    asked: Option<Ipv4Addr>,
    holder: Option<&Binding>,
) -> Option<(RefusalReason, Option<Ipv4Addr>, &'static str)> {
    let quarantined = holder.is_some_and(|b| {
        b.mac == DECLINED_MAC && matches!(b.state, State::Declined { .. } | State::Lost { .. })
    });
    match d {
        Decision::NoAddress { refusal } => Some(of_refusal(*refusal, None, false)),
        Decision::Nak {
            refusal: Some(r), ..
        } => Some(of_refusal(*r, asked, quarantined)),
        Decision::Nak {
            refusal: None,
            reason,
            ..
        } => Some((
            if asked.is_none() {
                RefusalReason::Malformed
            } else {
                RefusalReason::NotAllowed
            },
            asked,
            reason,
        )),
        Decision::Ignore { reason } => match *reason {
            IGNORED_UNKNOWN_CLIENT => Some((RefusalReason::UnknownClientIgnored, None, reason)),
            IGNORED_OTHER_SERVER => Some((RefusalReason::OtherServerChosen, asked, reason)),
            IGNORED_MESSAGE_TYPE => Some((RefusalReason::Malformed, None, reason)),
            _ => None,
        },
        _ => None,
    }
}

fn of_refusal(
    r: Refusal,
    asked: Option<Ipv4Addr>,
    quarantined: bool,
) -> (RefusalReason, Option<Ipv4Addr>, &'static str) {
    match r {
        Refusal::PoolExhausted => (RefusalReason::PoolExhausted, None, r.as_str()),
        Refusal::ReservedAddressInUse { ip, .. } => {
            (RefusalReason::ReservedAddressInUse, Some(ip), r.as_str())
        }
        Refusal::NotAllowed => (RefusalReason::NotAllowed, asked, r.as_str()),
        Refusal::InUse if quarantined => (
            RefusalReason::Quarantined,
            asked,
            "address quarantined (declined, found in use by a probe, or its record lost)",
        ),
        Refusal::InUse => (RefusalReason::InUse, asked, r.as_str()),
    }
}

/// The hardware address in a raw datagram's `chaddr`, when it has an
/// Ethernet one (for a datagram dropped before it was decoded).
pub fn raw_mac(datagram: &[u8]) -> Option<Mac> {
    if datagram.len() < 34 || datagram[1] != 1 || datagram[2] != 6 {
        return None;
    }
    let mut m = [0u8; 6];
    m.copy_from_slice(&datagram[28..34]);
    (m != [0; 6] && m[0] & 1 == 0).then_some(Mac(m))
}

/// The DHCP message type (option 53) in a raw datagram's option area, for
/// a datagram dropped before it was decoded.
pub fn raw_message_type(datagram: &[u8]) -> Option<dhcproto::v4::MessageType> {
    let area = datagram.get(240..)?;
    let mut i = 0;
    while i < area.len() {
        match area[i] {
            0 => i += 1,
            255 => return None,
            code => {
                let len = usize::from(*area.get(i + 1)?);
                if code == 53 && len == 1 {
                    return area.get(i + 2).map(|t| dhcproto::v4::MessageType::from(*t));
                }
                i += 2 + len;
            }
        }
    }
    None
}

/// The message type's name for an event (`DISCOVER`, …).
pub fn message_name(k: dhcproto::v4::MessageType) -> &'static str {
    use dhcproto::v4::MessageType as T;
    match k {
        T::Discover => "DISCOVER",
        T::Request => "REQUEST",
        T::Decline => "DECLINE",
        T::Release => "RELEASE",
        T::Inform => "INFORM",
        _ => "OTHER",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_drop_of_a_request_has_a_reason() {
        use Dropped::*;
        for d in [
            Malformed,
            NotARequest,
            UnsupportedHardware,
            RelayOutsideSubnet,
            BadRelayAddress,
            PeerScope,
            PairSyncing,
            GroupHardwareAddress,
        ] {
            let (r, _) = refusal_of_drop(d);
            let want = match d {
                RelayOutsideSubnet | BadRelayAddress => RefusalReason::RelayRefused,
                PeerScope | PairSyncing => RefusalReason::NotThisServersHalf,
                _ => RefusalReason::Malformed,
            };
            assert_eq!(r, want, "{d:?}");
        }
    }

    #[test]
    fn a_request_for_a_quarantined_address_is_told_apart_from_one_in_use() {
        let ip = Ipv4Addr::new(192, 0, 2, 10);
        let nak = Decision::Nak {
            reason: Refusal::InUse.as_str(),
            refusal: Some(Refusal::InUse),
            revoked: None,
        };
        let declined = Binding {
            mac: DECLINED_MAC,
            state: State::Declined { until: 5 },
        };
        let other = Binding {
            mac: Mac([2, 0, 0, 0, 0, 9]),
            state: State::Bound { expires: 5 },
        };
        assert_eq!(
            refusal_of_decision(&nak, Some(ip), Some(&declined)).map(|r| r.0),
            Some(RefusalReason::Quarantined)
        );
        assert_eq!(
            refusal_of_decision(&nak, Some(ip), Some(&other)).map(|(r, a, _)| (r, a)),
            Some((RefusalReason::InUse, Some(ip)))
        );
        let ignored = Decision::Ignore {
            reason: IGNORED_UNKNOWN_CLIENT,
        };
        assert_eq!(
            refusal_of_decision(&ignored, None, None).map(|r| r.0),
            Some(RefusalReason::UnknownClientIgnored)
        );
        let exhausted = Decision::NoAddress {
            refusal: Refusal::PoolExhausted,
        };
        assert_eq!(
            refusal_of_decision(&exhausted, None, None).map(|r| r.0),
            Some(RefusalReason::PoolExhausted)
        );
        let release_not_held = Decision::Ignore {
            reason: "release of an address the client does not hold",
        };
        assert_eq!(refusal_of_decision(&release_not_held, None, None), None);
    }

    #[test]
    fn a_busy_reservation_is_its_own_reason() {
        let r = Refusal::ReservedAddressInUse {
            ip: Ipv4Addr::new(192, 0, 2, 50),
            holder: Mac([2, 0, 0, 0, 0, 1]),
        };
        let d = Decision::NoAddress { refusal: r };
        assert_eq!(
            refusal_of_decision(&d, None, None).map(|(r, a, _)| (r, a)),
            Some((
                RefusalReason::ReservedAddressInUse,
                Some(Ipv4Addr::new(192, 0, 2, 50))
            ))
        );
    }

    /// Option 12 is kept only as printable ASCII (trailing NULs dropped),
    /// so a strange host name never costs the client its answer.
    #[test]
    fn a_host_name_is_kept_when_printable_and_never_breaks_decoding() {
        use dhcproto::v4::{DhcpOption, OptionCode};
        let with = |name: &[u8]| {
            let mut m = vec![0u8; 240];
            m[0] = 1;
            m[1] = 1;
            m[2] = 6;
            m[28..34].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
            m[236..240].copy_from_slice(&[99, 130, 83, 99]);
            m.extend_from_slice(&[53, 1, 1, 12, name.len() as u8]);
            m.extend_from_slice(name);
            m.push(255);
            let msg = crate::pipeline::parse(&m).expect("decodes");
            match msg.opts().get(OptionCode::Hostname) {
                Some(DhcpOption::Hostname(h)) => Some(h.clone()),
                _ => None,
            }
        };
        assert_eq!(with(b"vm-a").as_deref(), Some("vm-a"));
        assert_eq!(with(b"vm-a\0\0").as_deref(), Some("vm-a"));
        assert_eq!(with(b"\xff\xfe"), None);
        assert_eq!(with(b"two words"), None);
        assert_eq!(with(b"\0"), None);
    }

    #[test]
    fn the_raw_hardware_address_is_read_only_from_ethernet_requests() {
        let mut d = vec![0u8; 240];
        d[0] = 1;
        d[1] = 1;
        d[2] = 6;
        d[28..34].copy_from_slice(&[2, 0, 0, 0, 0, 7]);
        assert_eq!(raw_mac(&d), Some(Mac([2, 0, 0, 0, 0, 7])));
        d[28] = 1; // group bit
        assert_eq!(raw_mac(&d), None);
        assert_eq!(raw_mac(&d[..20]), None);
    }
}
