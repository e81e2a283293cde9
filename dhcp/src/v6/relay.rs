//! Relay-Forward and Relay-Reply (RFC 8415 §9, §19), on raw bytes:
//! dhcproto decodes the Relay Message option's content as another relay
//! message, which the client message inside the innermost relay is not.
//!
//! [`unwrap`] peels a Relay-Forward down to the client message, keeping
//! each relay's header and Interface-ID; [`wrap`] puts the engine's reply
//! into the matching Relay-Reply chain, which the I/O layer sends back to the
//! source of the Relay-Forward.

use std::net::Ipv6Addr;

use super::duid::ethernet;
use crate::config::Mac;

const RELAY_FORW: u8 = 12;
const RELAY_REPL: u8 = 13;
const OPT_RELAY_MSG: u16 = 9;
const OPT_INTERFACE_ID: u16 = 18;
const OPT_CLIENT_LINKLAYER_ADDR: u16 = 79;
/// RFC 8415 §7.6: relays drop messages relayed this many times.
pub const HOP_COUNT_LIMIT: usize = 8;
/// msg-type, hop-count, link-address, peer-address.
const HEADER: usize = 34;

/// One relay the message passed through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hop {
    /// The relay's hop count, echoed in the Relay-Reply.
    pub hop_count: u8,
    /// Link-address: an address on the client's link (or unspecified).
    pub link_addr: Ipv6Addr,
    /// Peer-address: where the relay got the message from.
    pub peer_addr: Ipv6Addr,
    /// Interface-ID, returned unchanged in the Relay-Reply (§19.3).
    pub interface_id: Option<Vec<u8>>,
}

/// A message as received: the relays it came through and the client's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relayed<'a> {
    /// Relays, the one that sent to the server first (empty: direct).
    pub hops: Vec<Hop>,
    /// The client's message.
    pub inner: &'a [u8],
    /// Option 79 of the relay nearest the client, when an Ethernet address.
    pub client_link_layer: Option<Mac>,
}

/// A relay message that cannot be taken apart or built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayError {
    /// Shorter than its header or an option's length says.
    Truncated,
    /// A Relay-Forward without a Relay Message option.
    NoRelayMessage,
    /// More than [`HOP_COUNT_LIMIT`] relays.
    TooDeep,
    /// A reply too long for a Relay Message option.
    TooLong,
}

impl RelayError {
    /// Label for metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            RelayError::Truncated => "relay_truncated",
            RelayError::NoRelayMessage => "relay_without_message",
            RelayError::TooDeep => "relay_too_deep",
            RelayError::TooLong => "relay_reply_too_long",
        }
    }
}

fn addr(b: &[u8]) -> Ipv6Addr {
    let mut o = [0u8; 16];
    o.copy_from_slice(b);
    Ipv6Addr::from(o)
}

/// One relay header and its options: (hop, relay message, option 79).
fn peel(buf: &[u8]) -> Result<(Hop, &[u8], Option<Mac>), RelayError> {
    if buf.len() < HEADER {
        return Err(RelayError::Truncated);
    }
    let mut hop = Hop {
        hop_count: buf[1],
        link_addr: addr(&buf[2..18]),
        peer_addr: addr(&buf[18..34]),
        interface_id: None,
    };
    let (mut inner, mut mac) = (None, None);
    let mut rest = &buf[HEADER..];
    while !rest.is_empty() {
        if rest.len() < 4 {
            return Err(RelayError::Truncated);
        }
        let code = u16::from_be_bytes([rest[0], rest[1]]);
        let len = usize::from(u16::from_be_bytes([rest[2], rest[3]]));
        let data = rest.get(4..4 + len).ok_or(RelayError::Truncated)?;
        match code {
            OPT_RELAY_MSG if inner.is_none() => inner = Some(data),
            OPT_INTERFACE_ID if hop.interface_id.is_none() => {
                hop.interface_id = Some(data.to_vec())
            }
            OPT_CLIENT_LINKLAYER_ADDR if data.len() == 8 => mac = ethernet(&data[..2], &data[2..]),
            _ => {}
        }
        rest = &rest[4 + len..];
    }
    Ok((hop, inner.ok_or(RelayError::NoRelayMessage)?, mac))
}

/// Takes a received message apart; a client message comes back as it is,
/// with no hops.
pub fn unwrap(buf: &[u8]) -> Result<Relayed<'_>, RelayError> {
    let mut out = Relayed {
        hops: Vec::new(),
        inner: buf,
        client_link_layer: None,
    };
    while out.inner.first() == Some(&RELAY_FORW) {
        if out.hops.len() == HOP_COUNT_LIMIT {
            return Err(RelayError::TooDeep);
        }
        let (hop, inner, mac) = peel(out.inner)?;
        out.hops.push(hop);
        out.inner = inner;
        // Deeper relays are nearer the client: theirs wins.
        out.client_link_layer = mac.or(out.client_link_layer);
    }
    Ok(out)
}

fn option(out: &mut Vec<u8>, code: u16, data: &[u8]) -> Result<(), RelayError> {
    let len = u16::try_from(data.len()).map_err(|_| RelayError::TooLong)?;
    out.extend_from_slice(&code.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(data);
    Ok(())
}

/// The Relay-Reply chain carrying `reply` back through `hops` (as
/// [`unwrap`] returned them); `reply` itself when there are none.
pub fn wrap(hops: &[Hop], reply: &[u8]) -> Result<Vec<u8>, RelayError> {
    let mut msg = reply.to_vec();
    for hop in hops.iter().rev() {
        let mut out = Vec::with_capacity(HEADER + 8 + msg.len());
        out.push(RELAY_REPL);
        out.push(hop.hop_count);
        out.extend_from_slice(&hop.link_addr.octets());
        out.extend_from_slice(&hop.peer_addr.octets());
        if let Some(id) = &hop.interface_id {
            option(&mut out, OPT_INTERFACE_ID, id)?;
        }
        option(&mut out, OPT_RELAY_MSG, &msg)?;
        msg = out;
    }
    Ok(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forward(hop_count: u8, peer: &str, extra: &[(u16, &[u8])], inner: &[u8]) -> Vec<u8> {
        let mut b = vec![RELAY_FORW, hop_count];
        b.extend_from_slice(&"2001:db8:1::1".parse::<Ipv6Addr>().unwrap().octets());
        b.extend_from_slice(&peer.parse::<Ipv6Addr>().unwrap().octets());
        for (code, data) in extra {
            option(&mut b, *code, data).unwrap();
        }
        option(&mut b, OPT_RELAY_MSG, inner).unwrap();
        b
    }

    #[test]
    fn a_direct_message_has_no_hops() {
        let r = unwrap(&[1, 0, 0, 1]).unwrap();
        assert!(r.hops.is_empty());
        assert_eq!(r.inner, &[1, 0, 0, 1]);
        assert_eq!(wrap(&r.hops, &[7, 0, 0, 1]).unwrap(), vec![7, 0, 0, 1]);
    }

    #[test]
    fn the_nearest_relays_link_layer_address_wins_and_interface_ids_return() {
        let client = [1u8, 9, 9, 9];
        let near = forward(
            0,
            "fe80::5054:ff:fe00:1",
            &[
                (OPT_CLIENT_LINKLAYER_ADDR, &[0, 1, 0x52, 0x54, 0, 0, 0, 1]),
                (OPT_INTERFACE_ID, b"eth1"),
            ],
            &client,
        );
        let far = forward(
            1,
            "2001:db8:9::2",
            &[(OPT_CLIENT_LINKLAYER_ADDR, &[0, 1, 0x52, 0x54, 0, 0, 0, 9])],
            &near,
        );
        let r = unwrap(&far).unwrap();
        assert_eq!(r.inner, &client);
        assert_eq!(r.hops.len(), 2);
        assert_eq!(r.client_link_layer, Some(Mac([0x52, 0x54, 0, 0, 0, 1])));
        assert_eq!(r.hops[1].interface_id.as_deref(), Some(&b"eth1"[..]));
        let back = wrap(&r.hops, &[7, 9, 9, 9]).unwrap();
        assert_eq!(back[0], RELAY_REPL);
        let (outer, inner, _) = peel(&back).unwrap();
        assert_eq!(
            (outer.hop_count, outer.peer_addr),
            (1, "2001:db8:9::2".parse().unwrap())
        );
        assert_eq!(outer.interface_id, None);
        let (near_hop, reply, _) = peel(inner).unwrap();
        assert_eq!(near_hop, r.hops[1]);
        assert_eq!(reply, &[7, 9, 9, 9]);
    }

    #[test]
    fn broken_relay_messages_are_refused() {
        let ok = forward(0, "fe80::1", &[], &[1, 0, 0, 1]);
        assert_eq!(unwrap(&ok[..20]).unwrap_err(), RelayError::Truncated);
        assert_eq!(
            unwrap(&ok[..ok.len() - 1]).unwrap_err(),
            RelayError::Truncated
        );
        let none = forward(0, "fe80::1", &[], &[]);
        let mut no_msg = none[..HEADER].to_vec();
        option(&mut no_msg, OPT_INTERFACE_ID, b"x").unwrap();
        assert_eq!(unwrap(&no_msg).unwrap_err(), RelayError::NoRelayMessage);
        let mut deep = vec![1, 0, 0, 1];
        for i in 0..=HOP_COUNT_LIMIT {
            deep = forward(i as u8, "fe80::1", &[], &deep);
        }
        assert_eq!(unwrap(&deep).unwrap_err(), RelayError::TooDeep);
        // A non-Ethernet option 79 gives no MAC.
        let ieee = forward(
            0,
            "fe80::1",
            &[(OPT_CLIENT_LINKLAYER_ADDR, &[0, 6, 1, 2, 3, 4, 5, 6])],
            &[1, 0, 0, 1],
        );
        assert_eq!(unwrap(&ieee).unwrap().client_link_layer, None);
        assert_eq!(
            wrap(&unwrap(&ok).unwrap().hops, &vec![0u8; 70_000]).unwrap_err(),
            RelayError::TooLong
        );
    }
}
