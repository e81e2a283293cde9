//! Gratuitous ARP: an ARP request whose sender and target address are the
//! address just taken (an RFC 5227 announcement), sent through an
//! AF_PACKET socket (CAP_NET_RAW): broadcast, or to one requester. Linux
//! neighbours take it even within their lock time (it is a gratuitous ARP),
//! and so do switches' MAC tables. The same kind of socket, bound to
//! another EtherType, carries the replicas' adverts ([`crate::advert`]).

use std::io;
use std::mem::size_of;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::netlink::Link;

const ETH_P_ARP: u16 = 0x0806;

/// The 28-byte ARP payload announcing `ip` at `mac`.
pub fn announcement(mac: [u8; 6], ip: Ipv4Addr) -> [u8; 28] {
    let mut p = [0u8; 28];
    p[0..2].copy_from_slice(&1u16.to_be_bytes()); // Ethernet
    p[2..4].copy_from_slice(&0x0800u16.to_be_bytes()); // IPv4
    p[4] = 6;
    p[5] = 4;
    p[6..8].copy_from_slice(&1u16.to_be_bytes()); // request
    p[8..14].copy_from_slice(&mac);
    p[14..18].copy_from_slice(&ip.octets());
    // target hardware address stays zero
    p[24..28].copy_from_slice(&ip.octets());
    p
}

/// A packet socket on one interface for one EtherType: frames out, and
/// (opened with `receive`) the interface's frames of that type in. For ARP
/// ([`ArpSocket::open`]): announcements out, and the interface's ARP
/// traffic in, for [`crate::defend`].
pub struct ArpSocket {
    fd: OwnedFd,
    link: Link,
    ethertype: u16,
}

/// `sll_pkttype` of a frame this host sent.
const PACKET_OUTGOING: u8 = 4;

impl ArpSocket {
    /// Opens the socket on `link` (fails without CAP_NET_RAW). With
    /// `receive` it gets every ARP frame of the interface and does not
    /// block (for an async reader); without, it only sends.
    pub fn open(link: &Link, receive: bool) -> io::Result<ArpSocket> {
        ArpSocket::open_for(link, ETH_P_ARP, receive)
    }

    /// Opens a packet socket for `ethertype` on `link` (see [`ArpSocket::open`]).
    pub fn open_for(link: &Link, ethertype: u16, receive: bool) -> io::Result<ArpSocket> {
        let protocol = if receive { ethertype.to_be() } else { 0 };
        let flags =
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | if receive { libc::SOCK_NONBLOCK } else { 0 };
        // SAFETY: plain socket call; the fd is owned right away.
        let fd = unsafe { libc::socket(libc::AF_PACKET, flags, i32::from(protocol)) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh socket.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let at = sockaddr(link, protocol, None);
        // SAFETY: `at` is a valid sockaddr_ll for its length.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&at as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(ArpSocket {
            fd,
            link: link.clone(),
            ethertype,
        })
    }

    /// The interface's MAC.
    pub fn mac(&self) -> [u8; 6] {
        self.link.mac
    }

    /// Sends one announcement of `ip`: broadcast, or to `to` alone.
    pub fn announce(&self, ip: Ipv4Addr, to: Option<[u8; 6]>) -> io::Result<()> {
        self.send(&announcement(self.link.mac, ip), to)
    }

    /// Sends one frame of the socket's EtherType carrying `payload`:
    /// broadcast, or to `to` alone.
    pub fn send(&self, payload: &[u8], to: Option<[u8; 6]>) -> io::Result<()> {
        let to = sockaddr(
            &self.link,
            self.ethertype.to_be(),
            Some(to.unwrap_or([0xff; 6])),
        );
        // SAFETY: payload and `to` are valid for the given lengths.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                payload.as_ptr().cast(),
                payload.len(),
                0,
                (&to as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Reads one ARP payload into `buf`: its length, or `None` for a frame
    /// this host sent. `WouldBlock` when nothing is queued.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        Ok(self.recv_from(buf)?.map(|(n, _)| n))
    }

    /// Reads one payload into `buf`: its length and the frame's source MAC,
    /// or `None` for a frame this host sent. `WouldBlock` when nothing is
    /// queued.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<Option<(usize, [u8; 6])>> {
        // SAFETY: sockaddr_ll is plain old data.
        let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut len = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        // SAFETY: buf and `from` are valid for the given lengths.
        let n = unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                0,
                (&mut from as *mut libc::sockaddr_ll).cast(),
                &mut len,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut mac = [0u8; 6];
        mac.copy_from_slice(&from.sll_addr[..6]);
        Ok((from.sll_pkttype != PACKET_OUTGOING).then_some((n as usize, mac)))
    }
}

impl AsRawFd for ArpSocket {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }
}

fn sockaddr(link: &Link, protocol: u16, mac: Option<[u8; 6]>) -> libc::sockaddr_ll {
    // SAFETY: sockaddr_ll is plain old data.
    let mut a: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    a.sll_family = libc::AF_PACKET as u16;
    a.sll_protocol = protocol;
    a.sll_ifindex = link.index as i32;
    if let Some(mac) = mac {
        a.sll_halen = 6;
        a.sll_addr[..6].copy_from_slice(&mac);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_announcement_names_the_address_as_sender_and_target() {
        let mac = [2, 0, 0, 0, 0, 9];
        let p = announcement(mac, Ipv4Addr::new(192, 0, 2, 3));
        assert_eq!(&p[0..8], &[0, 1, 8, 0, 6, 4, 0, 1]);
        assert_eq!(&p[8..14], &mac);
        assert_eq!(&p[14..18], &[192, 0, 2, 3]);
        assert_eq!(&p[18..24], &[0; 6]);
        assert_eq!(&p[24..28], &[192, 0, 2, 3]);
    }
}
