//! A classified client request: the type the pipeline's stages, the lease
//! table and the pair's scope rule share. It lives below all of them so
//! that none of them names another just for this type.

use std::net::Ipv4Addr;

use dhcproto::v4::{DhcpOption, Message, MessageType, OptionCode};

use crate::config::Mac;

/// A client request the server acts on.
#[derive(Debug, Clone)]
pub struct Request {
    /// The decoded message.
    pub msg: Message,
    /// Its DHCP message type (option 53).
    pub kind: MessageType,
    /// The client's hardware address (chaddr).
    pub mac: Mac,
}

impl Request {
    /// The requested address (option 50), if any.
    pub fn requested_ip(&self) -> Option<Ipv4Addr> {
        match self.msg.opts().get(OptionCode::RequestedIpAddress) {
            Some(DhcpOption::RequestedIpAddress(ip)) => Some(*ip),
            _ => None,
        }
    }

    /// The server identifier (option 54), if any.
    pub fn server_id(&self) -> Option<Ipv4Addr> {
        match self.msg.opts().get(OptionCode::ServerIdentifier) {
            Some(DhcpOption::ServerIdentifier(ip)) => Some(*ip),
            _ => None,
        }
    }
}
