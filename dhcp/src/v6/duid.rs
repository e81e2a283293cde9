//! DUIDs (RFC 8415 §11): the server's own, and which MAC a client is known by.
//!
//! Reservations and lease stability are by MAC, because that is what a
//! KubeVirt VM keeps across re-installs (its DUID-UUID changes with every
//! install). [`client_mac`] picks the MAC in this order:
//!
//! 1. RFC 6939 client link-layer address (option 79) added by the relay
//!    nearest the client ([`super::relay::unwrap`]): the relay saw the client's frame, and the frame
//!    the server sees comes from the relay, not the client.
//! 2. The source MAC of the frame the server received (a client on the
//!    server's own link): the NIC that sent it, whatever its DUID says.
//! 3. The link-layer address inside a DUID-LL or DUID-LLT of Ethernet type.
//!    Last, because a DUID-LLT is generated once and kept (RFC 8415 §11.2
//!    asks clients to keep it even when the interface is replaced): a cloned
//!    disk or a moved NIC carries a MAC that is no longer the machine's.
//!
//! DUID-UUID and DUID-EN carry no MAC: such a client without 1 or 2 has no
//! MAC, gets no reservation, and keeps its address by (DUID, IAID) only.

use crate::config::Mac;

/// DUID type codes (RFC 8415 §11.1).
const DUID_LLT: u16 = 1;
const DUID_EN: u16 = 2;
const DUID_LL: u16 = 3;
const DUID_UUID: u16 = 4;
/// Hardware type of Ethernet (RFC 826), the only one read as a MAC.
const HTYPE_ETHERNET: u16 = 1;
/// RFC 8415 §11.1: a DUID is at most 128 octets (plus its 2-octet type).
const DUID_MAX: usize = 130;

/// What a client's DUID says about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Link-layer address plus time; the MAC when Ethernet.
    Llt(Option<Mac>),
    /// Enterprise number plus identifier.
    En,
    /// Link-layer address; the MAC when Ethernet.
    Ll(Option<Mac>),
    /// A UUID (RFC 6355), what NetworkManager and systemd use by default.
    Uuid,
    /// A type this server does not know (still a valid identity).
    Other,
}

impl Kind {
    /// Label for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Llt(_) => "llt",
            Kind::En => "en",
            Kind::Ll(_) => "ll",
            Kind::Uuid => "uuid",
            Kind::Other => "other",
        }
    }

    /// The MAC inside a DUID-LL or DUID-LLT of Ethernet type.
    pub fn mac(self) -> Option<Mac> {
        match self {
            Kind::Llt(m) | Kind::Ll(m) => m,
            _ => None,
        }
    }
}

/// The MAC in a (hardware type, address) pair, when Ethernet.
pub(super) fn ethernet(htype: &[u8], addr: &[u8]) -> Option<Mac> {
    if u16::from_be_bytes([htype[0], htype[1]]) != HTYPE_ETHERNET {
        return None;
    }
    let mac: [u8; 6] = addr.try_into().ok()?;
    Some(Mac(mac))
}

/// Reads a client's DUID; `None` when it is too short or too long to be one
/// (the message is then treated as carrying no Client Identifier).
pub fn parse(duid: &[u8]) -> Option<Kind> {
    if duid.len() < 3 || duid.len() > DUID_MAX {
        return None;
    }
    let ty = u16::from_be_bytes([duid[0], duid[1]]);
    let body = &duid[2..];
    Some(match ty {
        DUID_LLT if body.len() >= 6 => Kind::Llt(ethernet(&body[..2], &body[6..])),
        DUID_LLT => return None,
        DUID_EN if body.len() >= 5 => Kind::En,
        DUID_EN => return None,
        DUID_LL if body.len() >= 3 => Kind::Ll(ethernet(&body[..2], &body[2..])),
        DUID_LL => return None,
        DUID_UUID if body.len() == 16 => Kind::Uuid,
        DUID_UUID => return None,
        _ => Kind::Other,
    })
}

/// The server's DUID-LL built from its MAC: stable across restarts without
/// storing anything, and the same for the same NIC.
pub fn server_duid(mac: Mac) -> Vec<u8> {
    let mut d = Vec::with_capacity(10);
    d.extend_from_slice(&DUID_LL.to_be_bytes());
    d.extend_from_slice(&HTYPE_ETHERNET.to_be_bytes());
    d.extend_from_slice(&mac.0);
    d
}

/// The client's MAC, in the order of preference documented on this module.
pub fn client_mac(relay_link_layer: Option<Mac>, frame: Option<Mac>, kind: Kind) -> Option<Mac> {
    relay_link_layer.or(frame).or(kind.mac())
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: Mac = Mac([0x52, 0x54, 0, 0x12, 0x34, 0x56]);

    fn ll(mac: Mac) -> Vec<u8> {
        server_duid(mac)
    }

    #[test]
    fn duid_ll_and_llt_carry_the_mac() {
        assert_eq!(parse(&ll(M)), Some(Kind::Ll(Some(M))));
        let mut llt = vec![0, 1, 0, 1, 0x2a, 0x2b, 0x2c, 0x2d];
        llt.extend_from_slice(&M.0);
        assert_eq!(parse(&llt), Some(Kind::Llt(Some(M))));
    }

    #[test]
    fn uuid_en_and_non_ethernet_carry_no_mac() {
        let mut uuid = vec![0, 4];
        uuid.extend_from_slice(&[7; 16]);
        assert_eq!(parse(&uuid), Some(Kind::Uuid));
        assert_eq!(parse(&[0, 2, 0, 0, 0x01, 0x37, 9]), Some(Kind::En));
        // DUID-LL of hardware type 6 (IEEE 802): no Ethernet MAC.
        let mut ieee = vec![0, 3, 0, 6];
        ieee.extend_from_slice(&M.0);
        assert_eq!(parse(&ieee), Some(Kind::Ll(None)));
        // A UUID of the wrong length and an empty DUID are not identities.
        assert_eq!(parse(&[0, 4, 1, 2, 3]), None);
        assert_eq!(parse(&[0, 3]), None);
        assert_eq!(parse(&[0u8; 200]), None);
    }

    #[test]
    fn mac_preference_is_relay_then_frame_then_duid() {
        let (a, b, c) = (Mac([2; 6]), Mac([4; 6]), Mac([6; 6]));
        assert_eq!(client_mac(Some(a), Some(b), Kind::Ll(Some(c))), Some(a));
        assert_eq!(client_mac(None, Some(b), Kind::Ll(Some(c))), Some(b));
        assert_eq!(client_mac(None, None, Kind::Llt(Some(c))), Some(c));
        assert_eq!(client_mac(None, None, Kind::Uuid), None);
    }
}
