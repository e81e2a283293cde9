//! Ending the connections a lost holder leaves behind (a "tickle ACK").
//!
//! A client that only listens (a watch: the server sends, the client is
//! silent) never learns that the replica behind its connection is gone:
//! nothing it sends can draw the reset the new holder's kernel would
//! answer. So the replicas share, with their adverts, the established TCP
//! connections to the addresses they hold (the agent shares the pod's
//! network namespace: `/proc/net/tcp`), and right after taking an address
//! the new holder sends each known client of it a bare ACK from the address
//! with a sequence number outside the client's window. The client answers
//! with an ACK of its own (RFC 793 for an unacceptable segment, RFC 5961's
//! challenge ACK), which reaches the new holder, whose kernel has no socket
//! for it and answers with a reset the client accepts: the connection ends
//! at once and the client reconnects.
//!
//! The frame (EtherType [`crate::advert::ETHERTYPE`], broadcast, big
//! endian): magic `OOOC`, version 1, one spare byte, the sender's index
//! (2), the group (8), the number of entries (2), then per entry the
//! address index (2), the local port (2), the client's IPv4 address (4) and
//! port (2), and an FNV-1a check word of everything before it (4). An IPv6
//! entry would be a second frame kind: the address index stays the key.

use std::collections::BTreeMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

const MAGIC: &[u8; 4] = b"OOOC";
const VERSION: u8 = 1;
const HEAD: usize = 18;
const ENTRY: usize = 10;

/// Entries per frame: the frame stays within a 1500-byte MTU.
pub const PER_FRAME: usize = 140;

/// Connections shared per round at most (the rest wait for the next).
pub const MAX_SHARED: usize = 32 * PER_FRAME;

/// How long a shared connection is remembered without being shared again.
pub const REMEMBER: Duration = Duration::from_secs(3);

/// One established connection to a floating address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Conn {
    /// Index of the floating address (the local side).
    pub address: u16,
    /// Local port.
    pub port: u16,
    /// The client.
    pub client: SocketAddrV4,
}

/// The established connections in a `/proc/net/tcp` text whose local
/// address is one of `addresses` (their index in that list).
pub fn parse_proc_net_tcp(text: &str, addresses: &[Ipv4Addr]) -> Vec<Conn> {
    let endpoint = |s: &str| -> Option<(Ipv4Addr, u16)> {
        let (ip, port) = s.split_once(':')?;
        // The address is the in-memory u32 printed in hex: little endian.
        let ip = u32::from_str_radix(ip, 16).ok()?;
        let port = u16::from_str_radix(port, 16).ok()?;
        Some((Ipv4Addr::from(ip.to_le_bytes()), port))
    };
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let (_, local, remote, state) = (f.next()?, f.next()?, f.next()?, f.next()?);
            // 01: ESTABLISHED.
            if state != "01" {
                return None;
            }
            let (lip, lport) = endpoint(local)?;
            let (rip, rport) = endpoint(remote)?;
            let index = addresses.iter().position(|a| *a == lip)?;
            Some(Conn {
                address: u16::try_from(index).ok()?,
                port: lport,
                client: SocketAddrV4::new(rip, rport),
            })
        })
        .collect()
}

fn fnv32(b: &[u8]) -> u32 {
    b.iter().fold(0x811c_9dc5u32, |h, x| {
        (h ^ u32::from(*x)).wrapping_mul(0x0100_0193)
    })
}

/// The frames sharing `conns` (at most [`PER_FRAME`] each).
pub fn encode(from: u16, group: u64, conns: &[Conn]) -> Vec<Vec<u8>> {
    conns
        .chunks(PER_FRAME)
        .map(|chunk| {
            let mut p = Vec::with_capacity(HEAD + chunk.len() * ENTRY + 4);
            p.extend_from_slice(MAGIC);
            p.push(VERSION);
            p.push(0);
            p.extend_from_slice(&from.to_be_bytes());
            p.extend_from_slice(&group.to_be_bytes());
            p.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
            for c in chunk {
                p.extend_from_slice(&c.address.to_be_bytes());
                p.extend_from_slice(&c.port.to_be_bytes());
                p.extend_from_slice(&c.client.ip().octets());
                p.extend_from_slice(&c.client.port().to_be_bytes());
            }
            let check = fnv32(&p);
            p.extend_from_slice(&check.to_be_bytes());
            p
        })
        .collect()
}

/// The sender's index and connections of a frame of `group`; `None` for
/// anything else (an advert, a corrupt frame, another group).
pub fn decode(p: &[u8], group: u64) -> Option<(u16, Vec<Conn>)> {
    if p.len() < HEAD + 4 || &p[0..4] != MAGIC || p[4] != VERSION {
        return None;
    }
    let from = u16::from_be_bytes([p[6], p[7]]);
    let mut g = [0u8; 8];
    g.copy_from_slice(&p[8..16]);
    if u64::from_be_bytes(g) != group {
        return None;
    }
    let n = usize::from(u16::from_be_bytes([p[16], p[17]]));
    let end = HEAD + n * ENTRY;
    if p.len() < end + 4 {
        return None;
    }
    let mut c = [0u8; 4];
    c.copy_from_slice(&p[end..end + 4]);
    if u32::from_be_bytes(c) != fnv32(&p[..end]) {
        return None;
    }
    let conns = p[HEAD..end]
        .chunks(ENTRY)
        .map(|e| Conn {
            address: u16::from_be_bytes([e[0], e[1]]),
            port: u16::from_be_bytes([e[2], e[3]]),
            client: SocketAddrV4::new(
                Ipv4Addr::new(e[4], e[5], e[6], e[7]),
                u16::from_be_bytes([e[8], e[9]]),
            ),
        })
        .collect();
    Some((from, conns))
}

/// The connections the peers shared, each with when it was last shared.
#[derive(Debug, Default)]
pub struct Known(BTreeMap<Conn, Instant>);

impl Known {
    /// Records what a peer shared at `now`.
    pub fn learn(&mut self, now: Instant, conns: &[Conn]) {
        for c in conns {
            self.0.insert(*c, now);
        }
        self.0
            .retain(|_, t| now.saturating_duration_since(*t) < REMEMBER);
    }

    /// The connections to address `index` shared within [`REMEMBER`].
    pub fn of(&self, index: u16, now: Instant) -> Vec<Conn> {
        self.0
            .iter()
            .filter(|(c, t)| c.address == index && now.saturating_duration_since(**t) < REMEMBER)
            .map(|(c, _)| *c)
            .collect()
    }
}

fn checksum(parts: &[&[u8]]) -> u16 {
    let mut sum = 0u32;
    for part in parts {
        let mut chunks = part.chunks_exact(2);
        for c in &mut chunks {
            sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
        }
        if let [last] = chunks.remainder() {
            sum += u32::from(*last) << 8;
        }
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The IPv4 packet of a tickle: a bare ACK from `from` to `to`, sequence
/// and acknowledgement number 0 (outside any window but by a 1 in 2^32
/// chance; the client's answer is the same either way).
pub fn tickle_packet(from: SocketAddrV4, to: SocketAddrV4) -> [u8; 40] {
    let mut p = [0u8; 40];
    // IPv4 header.
    p[0] = 0x45;
    p[2..4].copy_from_slice(&40u16.to_be_bytes());
    p[6] = 0x40; // don't fragment
    p[8] = 64; // TTL
    p[9] = 6; // TCP
    p[12..16].copy_from_slice(&from.ip().octets());
    p[16..20].copy_from_slice(&to.ip().octets());
    let ip = checksum(&[&p[0..20]]);
    p[10..12].copy_from_slice(&ip.to_be_bytes());
    // TCP header.
    p[20..22].copy_from_slice(&from.port().to_be_bytes());
    p[22..24].copy_from_slice(&to.port().to_be_bytes());
    p[32] = 0x50; // data offset 5 words
    p[33] = 0x10; // ACK
    p[34..36].copy_from_slice(&1024u16.to_be_bytes()); // window
    let mut pseudo = [0u8; 12];
    pseudo[0..4].copy_from_slice(&from.ip().octets());
    pseudo[4..8].copy_from_slice(&to.ip().octets());
    pseudo[9] = 6;
    pseudo[10..12].copy_from_slice(&20u16.to_be_bytes());
    let tcp = checksum(&[&pseudo, &p[20..40]]);
    p[36..38].copy_from_slice(&tcp.to_be_bytes());
    p
}

/// A raw IPv4 socket for tickles (CAP_NET_RAW).
pub struct RawSender(OwnedFd);

impl RawSender {
    /// Opens the socket.
    pub fn open() -> io::Result<RawSender> {
        // SAFETY: plain socket call; the fd is owned right away.
        let fd = unsafe {
            libc::socket(
                libc::AF_INET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::IPPROTO_RAW,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh socket.
        Ok(RawSender(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Sends one tickle from `from` (an address on this host) to `to`.
    pub fn tickle(&self, from: SocketAddrV4, to: SocketAddrV4) -> io::Result<()> {
        let p = tickle_packet(from, to);
        // SAFETY: sockaddr_in is plain old data.
        let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        sa.sin_family = libc::AF_INET as libc::sa_family_t;
        sa.sin_addr.s_addr = u32::from_ne_bytes(to.ip().octets());
        // SAFETY: p and sa are valid for the given lengths.
        let n = unsafe {
            libc::sendto(
                self.0.as_raw_fd(),
                p.as_ptr().cast(),
                p.len(),
                0,
                (&sa as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
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

    const A: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 3);
    const B: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 6);

    #[test]
    fn established_connections_to_floating_addresses_are_read_from_proc() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 03004D0A:1F90 32004D0A:C350 01 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 100 0 0 10 0
   2: 06004D0A:01BB 33004D0A:D431 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0000000000000000 100 0 0 10 0
   3: 0100007F:1F90 0100007F:C351 01 00000000:00000000 00:00000000 00000000     0        0 4 1 0000000000000000 100 0 0 10 0
   4: 03004D0A:1F90 32004D0A:C352 06 00000000:00000000 00:00000000 00000000     0        0 5 1 0000000000000000 100 0 0 10 0
";
        assert_eq!(
            parse_proc_net_tcp(text, &[A, B]),
            vec![
                Conn {
                    address: 0,
                    port: 8080,
                    client: SocketAddrV4::new(Ipv4Addr::new(10, 77, 0, 50), 50000),
                },
                Conn {
                    address: 1,
                    port: 443,
                    client: SocketAddrV4::new(Ipv4Addr::new(10, 77, 0, 51), 54321),
                },
            ]
        );
        assert!(parse_proc_net_tcp("garbage\nmore garbage", &[A]).is_empty());
    }

    #[test]
    fn shared_connections_read_back_in_frames_that_fit_the_mtu() {
        let conns: Vec<Conn> = (0..300u16)
            .map(|i| Conn {
                address: i % 2,
                port: 443,
                client: SocketAddrV4::new(Ipv4Addr::new(10, 77, 1, (i % 250) as u8), 40000 + i),
            })
            .collect();
        let frames = encode(3, 77, &conns);
        assert_eq!(frames.len(), 3);
        assert!(frames.iter().all(|f| f.len() <= 1500));
        let back: Vec<Conn> = frames
            .iter()
            .flat_map(|f| {
                let (from, c) = decode(f, 77).unwrap();
                assert_eq!(from, 3);
                c
            })
            .collect();
        assert_eq!(back, conns);
        let mut bad = frames[0].clone();
        bad[30] ^= 1;
        assert_eq!(decode(&bad, 77), None);
        assert_eq!(decode(&frames[0], 78), None);
        assert_eq!(decode(&frames[0][..20], 77), None);
        // An advert is not a connection frame.
        assert_eq!(decode(b"OOOI\x01\x00\x00\x00", 77), None);
    }

    #[test]
    fn known_connections_are_forgotten_when_no_longer_shared() {
        let t = Instant::now();
        let c = Conn {
            address: 1,
            port: 443,
            client: SocketAddrV4::new(Ipv4Addr::new(10, 77, 0, 50), 40000),
        };
        let mut k = Known::default();
        k.learn(t, &[c]);
        assert_eq!(k.of(1, t + Duration::from_secs(1)), vec![c]);
        assert!(k.of(0, t).is_empty());
        assert!(k.of(1, t + REMEMBER).is_empty());
    }

    #[test]
    fn a_tickle_is_a_bare_ack_with_valid_checksums() {
        let p = tickle_packet(
            SocketAddrV4::new(A, 443),
            SocketAddrV4::new(Ipv4Addr::new(10, 77, 0, 50), 40000),
        );
        assert_eq!(checksum(&[&p[0..20]]), 0, "IPv4 header checksum");
        let mut pseudo = [0u8; 12];
        pseudo[0..4].copy_from_slice(&p[12..16]);
        pseudo[4..8].copy_from_slice(&p[16..20]);
        pseudo[9] = 6;
        pseudo[10..12].copy_from_slice(&20u16.to_be_bytes());
        assert_eq!(checksum(&[&pseudo, &p[20..40]]), 0, "TCP checksum");
        assert_eq!(p[33], 0x10, "ACK alone");
        assert_eq!(&p[20..24], &[0x01, 0xbb, 0x9c, 0x40]);
    }
}
