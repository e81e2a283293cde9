//! Gratuitous ARP: an ARP request whose sender and target address are the
//! address just taken (an RFC 5227 announcement), broadcast through an
//! AF_PACKET socket (CAP_NET_RAW). Linux neighbours take it even within
//! their lock time (it is a gratuitous ARP), and so do switches' MAC tables.

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

/// A packet socket on one interface for announcements.
pub struct Announcer {
    fd: OwnedFd,
    link: Link,
}

impl Announcer {
    /// Opens the socket (fails without CAP_NET_RAW).
    pub fn open(link: &Link) -> io::Result<Announcer> {
        // SAFETY: plain socket call; the fd is owned right away.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                i32::from(ETH_P_ARP.to_be()),
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Announcer {
            // SAFETY: fd is a fresh socket.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            link: link.clone(),
        })
    }

    /// Broadcasts one announcement of `ip`.
    pub fn announce(&self, ip: Ipv4Addr) -> io::Result<()> {
        let payload = announcement(self.link.mac, ip);
        // SAFETY: sockaddr_ll is plain old data.
        let mut to: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        to.sll_family = libc::AF_PACKET as u16;
        to.sll_protocol = ETH_P_ARP.to_be();
        to.sll_ifindex = self.link.index as i32;
        to.sll_halen = 6;
        to.sll_addr[..6].copy_from_slice(&[0xff; 6]);
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
