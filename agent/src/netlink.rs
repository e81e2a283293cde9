//! IPv4 addresses on an interface through rtnetlink (`RTM_NEWADDR`,
//! `RTM_DELADDR`, `RTM_GETADDR`), the way `ip address` does it. Adding needs
//! CAP_NET_ADMIN in the network namespace; listing does not.
//!
//! Three message kinds with two or three attributes each: written here
//! rather than pulled in with a general netlink crate. The message layout is
//! built by pure functions (unit tests) and checked against the kernel by
//! the network-namespace tests.

use std::io;
use std::mem::size_of;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use ipnet::Ipv4Net;

const RTM_NEWADDR: u16 = 20;
const RTM_DELADDR: u16 = 21;
const RTM_GETADDR: u16 = 22;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_DUMP: u16 = 0x300;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_CREATE: u16 = 0x400;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFA_CACHEINFO: u16 = 6;
const HEADER: usize = 16;
const IFADDRMSG: usize = 8;
/// `INFINITY_LIFE_TIME`: a permanent address.
const FOREVER: u32 = u32::MAX;

/// An interface in this network namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Its name, e.g. `net1`.
    pub name: String,
    /// Its index.
    pub index: u32,
    /// Its hardware address.
    pub mac: [u8; 6],
}

impl Link {
    /// Looks up `name` (index and hardware address).
    pub fn by_name(name: &str) -> io::Result<Link> {
        let cname = std::ffi::CString::new(name)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in interface name"))?;
        // SAFETY: a valid NUL-terminated string.
        let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        if index == 0 {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("--interface {name}: no such interface in this network namespace"),
            ));
        }
        Ok(Link {
            name: name.to_string(),
            index,
            mac: hardware_address(name)?,
        })
    }
}

/// The hardware address of `name` (SIOCGIFHWADDR, unprivileged).
fn hardware_address(name: &str) -> io::Result<[u8; 6]> {
    // SAFETY: plain socket call; the fd is owned right away.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh socket.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain old data.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    if name.len() >= req.ifr_name.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "interface name too long",
        ));
    }
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: SIOCGIFHWADDR fills ifr_hwaddr of a valid ifreq.
    // The request's type differs between glibc and musl.
    #[allow(clippy::unnecessary_cast)]
    let request = libc::SIOCGIFHWADDR as libc::Ioctl;
    if unsafe { libc::ioctl(fd.as_raw_fd(), request, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the union member the ioctl wrote.
    let data = unsafe { req.ifr_ifru.ifru_hwaddr.sa_data };
    let mut mac = [0u8; 6];
    for (m, d) in mac.iter_mut().zip(data.iter()) {
        *m = *d as u8;
    }
    Ok(mac)
}

fn push_attr(buf: &mut Vec<u8>, kind: u16, data: &[u8]) {
    let len = 4 + data.len();
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(data);
    buf.resize(buf.len().next_multiple_of(4), 0);
}

fn message(
    kind: u16,
    flags: u16,
    seq: u32,
    ifaddr: [u8; IFADDRMSG],
    attrs: &[(u16, Vec<u8>)],
) -> Vec<u8> {
    let mut buf = vec![0u8; HEADER];
    buf.extend_from_slice(&ifaddr);
    for (k, d) in attrs {
        push_attr(&mut buf, *k, d);
    }
    let len = buf.len() as u32;
    buf[0..4].copy_from_slice(&len.to_ne_bytes());
    buf[4..6].copy_from_slice(&kind.to_ne_bytes());
    buf[6..8].copy_from_slice(&(flags | NLM_F_REQUEST).to_ne_bytes());
    buf[8..12].copy_from_slice(&seq.to_ne_bytes());
    buf
}

fn ifaddrmsg(prefix: u8, index: u32) -> [u8; IFADDRMSG] {
    let mut m = [0u8; IFADDRMSG];
    m[0] = libc::AF_INET as u8;
    m[1] = prefix;
    // flags 0, scope universe (0)
    m[4..8].copy_from_slice(&index.to_ne_bytes());
    m
}

/// `RTM_NEWADDR` adding `net` to interface `index` (or replacing it: the
/// lifetime is pushed out), valid and preferred for `lifetime` (whole
/// seconds, at least 1; `None`: forever).
pub fn add_message(seq: u32, index: u32, net: Ipv4Net, lifetime: Option<Duration>) -> Vec<u8> {
    let secs = match lifetime {
        Some(d) => u32::try_from(d.as_millis().div_ceil(1000).max(1)).unwrap_or(FOREVER - 1),
        None => FOREVER,
    };
    let mut cache = Vec::with_capacity(16);
    cache.extend_from_slice(&secs.to_ne_bytes()); // ifa_prefered
    cache.extend_from_slice(&secs.to_ne_bytes()); // ifa_valid
    cache.extend_from_slice(&[0u8; 8]); // cstamp, tstamp: set by the kernel
    let ip = net.addr().octets().to_vec();
    message(
        RTM_NEWADDR,
        NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE,
        seq,
        ifaddrmsg(net.prefix_len(), index),
        &[
            (IFA_LOCAL, ip.clone()),
            (IFA_ADDRESS, ip),
            (IFA_CACHEINFO, cache),
        ],
    )
}

/// `RTM_DELADDR` removing `net` from interface `index`.
pub fn delete_message(seq: u32, index: u32, net: Ipv4Net) -> Vec<u8> {
    let ip = net.addr().octets().to_vec();
    message(
        RTM_DELADDR,
        NLM_F_ACK,
        seq,
        ifaddrmsg(net.prefix_len(), index),
        &[(IFA_LOCAL, ip.clone()), (IFA_ADDRESS, ip)],
    )
}

/// `RTM_GETADDR` dump of every IPv4 address.
pub fn dump_message(seq: u32) -> Vec<u8> {
    message(RTM_GETADDR, NLM_F_DUMP, seq, ifaddrmsg(0, 0), &[])
}

/// One message of a netlink reply.
#[derive(Debug, PartialEq, Eq)]
enum Reply {
    /// An ack (0) or an error (negative errno).
    Ack(i32),
    /// The end of a dump.
    Done,
    /// An address of a dump: interface index and address.
    Address(u32, Ipv4Net),
    /// Anything else.
    Other,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Splits a datagram from the kernel into its messages.
fn parse(buf: &[u8]) -> Vec<Reply> {
    let mut out = Vec::new();
    let mut at = 0;
    while let (Some(len), Some(kind)) = (u32_at(buf, at), u16_at(buf, at + 4)) {
        let len = len as usize;
        if len < HEADER || at + len > buf.len() {
            break;
        }
        let body = &buf[at + HEADER..at + len];
        out.push(match kind {
            NLMSG_ERROR => Reply::Ack(u32_at(body, 0).map(|e| e as i32).unwrap_or(-libc::EIO)),
            NLMSG_DONE => Reply::Done,
            RTM_NEWADDR => address_of(body).unwrap_or(Reply::Other),
            _ => Reply::Other,
        });
        at += len.next_multiple_of(4);
    }
    out
}

fn address_of(body: &[u8]) -> Option<Reply> {
    if *body.first()? != libc::AF_INET as u8 {
        return Some(Reply::Other);
    }
    let prefix = *body.get(1)?;
    let index = u32_at(body, 4)?;
    let mut at = IFADDRMSG;
    let mut local = None;
    let mut address = None;
    while let (Some(len), Some(kind)) = (u16_at(body, at), u16_at(body, at + 2)) {
        let len = len as usize;
        if len < 4 {
            break;
        }
        let data = body.get(at + 4..at + len)?;
        if let Ok(octets) = <[u8; 4]>::try_from(data) {
            match kind {
                IFA_LOCAL => local = Some(Ipv4Addr::from(octets)),
                IFA_ADDRESS => address = Some(Ipv4Addr::from(octets)),
                _ => {}
            }
        }
        at += len.next_multiple_of(4);
    }
    let ip = local.or(address)?;
    Some(Reply::Address(index, Ipv4Net::new(ip, prefix).ok()?))
}

/// A netlink route socket for one request.
struct Socket(OwnedFd);

impl Socket {
    fn open() -> io::Result<Socket> {
        // SAFETY: plain socket call; the fd is owned right away.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh socket.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let tv = libc::timeval {
            tv_sec: 2,
            tv_usec: 0,
        };
        // SAFETY: a timeval of the right size.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Socket(fd))
    }

    fn send(&self, msg: &[u8]) -> io::Result<()> {
        // SAFETY: sockaddr_nl is plain old data; pid 0 is the kernel.
        let mut to: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        to.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: msg and `to` are valid for the given lengths.
        let n = unsafe {
            libc::sendto(
                self.0.as_raw_fd(),
                msg.as_ptr().cast(),
                msg.len(),
                0,
                (&to as *const libc::sockaddr_nl).cast(),
                size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn recv(&self) -> io::Result<Vec<Reply>> {
        let mut buf = vec![0u8; 32 * 1024];
        // SAFETY: buf is valid for its length.
        let n = unsafe { libc::recv(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        buf.truncate(n as usize);
        Ok(parse(&buf))
    }

    /// Sends a request that is answered by one ack.
    fn request(&self, msg: &[u8]) -> io::Result<()> {
        self.send(msg)?;
        loop {
            for reply in self.recv()? {
                if let Reply::Ack(code) = reply {
                    return if code == 0 {
                        Ok(())
                    } else {
                        Err(io::Error::from_raw_os_error(-code))
                    };
                }
            }
        }
    }
}

/// Adds `net` to `link`, or pushes out its lifetime when it is there.
pub fn add(link: &Link, net: Ipv4Net, lifetime: Option<Duration>) -> io::Result<()> {
    Socket::open()?.request(&add_message(1, link.index, net, lifetime))
}

/// Removes `net` from `link`; `Ok(false)` when it was not there.
pub fn remove(link: &Link, net: Ipv4Net) -> io::Result<bool> {
    match Socket::open()?.request(&delete_message(1, link.index, net)) {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The IPv4 addresses on `link`.
pub fn addresses(link: &Link) -> io::Result<Vec<Ipv4Net>> {
    let socket = Socket::open()?;
    socket.send(&dump_message(1))?;
    let mut out = Vec::new();
    loop {
        for reply in socket.recv()? {
            match reply {
                Reply::Address(index, net) if index == link.index => out.push(net),
                Reply::Done => return Ok(out),
                Reply::Ack(code) if code != 0 => return Err(io::Error::from_raw_os_error(-code)),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> Ipv4Net {
        s.parse().unwrap()
    }

    #[test]
    fn add_message_carries_the_address_prefix_and_lifetime() {
        let m = add_message(7, 3, net("192.0.2.3/24"), Some(Duration::from_millis(1000)));
        assert_eq!(u32_at(&m, 0), Some(m.len() as u32));
        assert_eq!(u16_at(&m, 4), Some(RTM_NEWADDR));
        assert_eq!(
            u16_at(&m, 6),
            Some(NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE)
        );
        assert_eq!(u32_at(&m, 8), Some(7));
        assert_eq!(m[HEADER], libc::AF_INET as u8);
        assert_eq!(m[HEADER + 1], 24);
        assert_eq!(u32_at(&m, HEADER + 4), Some(3));
        // IFA_LOCAL, IFA_ADDRESS (8 bytes each), IFA_CACHEINFO (20 bytes).
        let attrs = HEADER + IFADDRMSG;
        assert_eq!(&m[attrs + 4..attrs + 8], &[192, 0, 2, 3]);
        assert_eq!(u16_at(&m, attrs + 16 + 2), Some(IFA_CACHEINFO));
        assert_eq!(u32_at(&m, attrs + 16 + 4), Some(1), "preferred 1 s");
        assert_eq!(u32_at(&m, attrs + 16 + 8), Some(1), "valid 1 s");
        assert_eq!(m.len(), attrs + 8 + 8 + 20);
        let forever = add_message(1, 3, net("192.0.2.3/24"), None);
        assert_eq!(u32_at(&forever, attrs + 16 + 8), Some(FOREVER));
        let rounded = add_message(1, 3, net("192.0.2.3/24"), Some(Duration::from_millis(1200)));
        assert_eq!(
            u32_at(&rounded, attrs + 16 + 8),
            Some(2),
            "lifetimes round up"
        );
    }

    #[test]
    fn replies_are_parsed_into_acks_addresses_and_done() {
        // An address message as the kernel sends it in a dump.
        let mut addr = message(
            RTM_NEWADDR,
            0,
            1,
            ifaddrmsg(24, 5),
            &[
                (IFA_ADDRESS, vec![192, 0, 2, 9]),
                (IFA_LOCAL, vec![192, 0, 2, 9]),
            ],
        );
        let mut err = vec![0u8; HEADER + 4 + HEADER];
        let n = err.len() as u32;
        err[0..4].copy_from_slice(&n.to_ne_bytes());
        err[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        err[HEADER..HEADER + 4].copy_from_slice(&(-libc::EPERM).to_ne_bytes());
        let mut done = vec![0u8; HEADER + 4];
        let n = done.len() as u32;
        done[0..4].copy_from_slice(&n.to_ne_bytes());
        done[4..6].copy_from_slice(&NLMSG_DONE.to_ne_bytes());
        addr.extend_from_slice(&err);
        addr.extend_from_slice(&done);
        assert_eq!(
            parse(&addr),
            vec![
                Reply::Address(5, net("192.0.2.9/24")),
                Reply::Ack(-libc::EPERM),
                Reply::Done
            ]
        );
        assert!(
            parse(&[1, 2, 3]).is_empty(),
            "a short datagram is no message"
        );
    }
}
