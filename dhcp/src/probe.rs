//! Conflict probing before an offer (RFC 2131 §4.4.1: "the server SHOULD
//! probe the reused address before allocating the address, e.g., with an
//! ICMP echo request"): an ICMP echo to a pool address that has no binding
//! of the client in the lease table; an answer within the probe timeout
//! means a host this server does not know of uses it.
//!
//! The socket is an unprivileged ICMP echo socket
//! (`socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMP)`): it needs no capability
//! when the process's group is inside the sysctl `net.ipv4.ping_group_range`
//! (a safe sysctl the pod sets), while an ARP probe would need a raw socket
//! and NET_RAW. ICMP misses a host that drops echo requests (a firewall
//! that drops ping); ARP would see it.
//!
//! The decision loop never waits for a probe: [`Prober::start`] sends the
//! echo and returns; a thread collects the answers and the timeouts and
//! reports each probe once, through [`Prober::results`], waking the loop by
//! a byte on [`Prober::wake`]. Every probe has the same timeout, so probes
//! end in the order they started.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// Most probes in flight at once. Each echo to an address nobody holds
/// waits in the kernel for ARP resolution (about 3 s) and is charged to the
/// socket's send buffer and the neighbour table (1,024 entries by default);
/// beyond this many the address is offered unprobed (counted) rather than
/// hold offers back during a burst of new clients.
pub const MAX_IN_FLIGHT: usize = 256;

/// How long the kernel keeps a neighbour entry for an address nobody
/// answers ARP for: three solicitations a second apart (the defaults of
/// `mcast_solicit` and `retrans_time_ms`), long after the probe's own
/// timeout.
pub const NEIGHBOUR_HOLD: Duration = Duration::from_secs(3);

/// Most echoes started within [`NEIGHBOUR_HOLD`]. Each echo to a free
/// address leaves an unresolved entry in the neighbour table, which the
/// node's pods share (`gc_thresh3`, 1,024 entries by default): bounding
/// only the probes in flight (500 ms each) let a burst of new clients start
/// about 1,500 such entries in 3 s, and the kernel logged "neighbor table
/// overflow" and dropped other traffic of the node. A quarter of the
/// default table; beyond it the address is offered unprobed (counted).
pub const MAX_UNRESOLVED: usize = 256;

/// The echoes started within [`NEIGHBOUR_HOLD`], oldest first.
#[derive(Debug, Default)]
pub struct EchoBudget {
    started: VecDeque<Instant>,
}

impl EchoBudget {
    /// Takes one echo at `now` if fewer than [`MAX_UNRESOLVED`] started in
    /// the [`NEIGHBOUR_HOLD`] before it.
    pub fn try_take(&mut self, now: Instant) -> bool {
        while self
            .started
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= NEIGHBOUR_HOLD)
        {
            self.started.pop_front();
        }
        if self.started.len() >= MAX_UNRESOLVED {
            return false;
        }
        self.started.push_back(now);
        true
    }
}

/// Most addresses one responder's answers hold back at once. A host
/// answering probes for more addresses than any one host uses (a host
/// that answers ping for every address, a misconfigured proxy ARP) is
/// recognised by its MAC; its further answers hold nothing back (counted,
/// logged), so it cannot empty the pool.
pub const MAX_HELD_PER_RESPONDER: usize = 4;

/// What to make of an answered probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Hold the address back (a host uses it).
    Hold,
    /// The responder already holds back [`MAX_HELD_PER_RESPONDER`]
    /// addresses: offer the address anyway. `first`: the first such answer
    /// of this responder (log it).
    Ignore {
        /// Whether this responder just became greedy.
        first: bool,
    },
}

/// The addresses each responder's answers hold back, by MAC (None: the
/// neighbour table did not say, counted as one responder).
#[derive(Debug, Default)]
pub struct Responders {
    held: HashMap<Option<crate::config::Mac>, Vec<(Ipv4Addr, u64)>>,
    greedy: std::collections::HashSet<Option<crate::config::Mac>>,
}

/// Most responders remembered (a flood of made-up MACs cannot grow it).
const RESPONDERS_TRACKED: usize = 4096;

impl Responders {
    /// `responder` answered the probe of `ip` at `now`; a hold-back would
    /// last until `until`.
    pub fn answered(
        &mut self,
        responder: Option<crate::config::Mac>,
        ip: Ipv4Addr,
        now: u64,
        until: u64,
    ) -> Verdict {
        if !self.held.contains_key(&responder) && self.held.len() >= RESPONDERS_TRACKED {
            self.held.retain(|_, v| v.iter().any(|(_, u)| *u > now));
        }
        let held = self.held.entry(responder).or_default();
        held.retain(|(_, u)| *u > now);
        if held.len() >= MAX_HELD_PER_RESPONDER && !held.iter().any(|(a, _)| *a == ip) {
            let first = self.greedy.insert(responder);
            return Verdict::Ignore { first };
        }
        held.retain(|(a, _)| *a != ip);
        held.push((ip, until));
        if held.len() < MAX_HELD_PER_RESPONDER {
            self.greedy.remove(&responder);
        }
        Verdict::Hold
    }

    /// Responders whose answers are being ignored now.
    pub fn greedy(&self) -> usize {
        self.greedy.len()
    }
}

/// The MAC the neighbour table holds for `ip` (`/proc/net/arp`): after an
/// echo was answered, the entry the kernel resolved to send it.
pub fn neighbour_mac(ip: Ipv4Addr) -> Option<crate::config::Mac> {
    let text = std::fs::read_to_string("/proc/net/arp").ok()?;
    neighbour_mac_in(&text, ip)
}

/// [`neighbour_mac`] over the text of `/proc/net/arp`.
pub fn neighbour_mac_in(text: &str, ip: Ipv4Addr) -> Option<crate::config::Mac> {
    text.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 || f[0].parse::<Ipv4Addr>().ok()? != ip {
            return None;
        }
        crate::config::Mac::parse(f[3]).filter(|m| m.0 != [0; 6])
    })
}

/// What a probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// Nobody answered within the timeout.
    Nobody,
    /// A host answered the echo: the address is in use.
    Answered,
}

/// Probes in flight, oldest first.
#[derive(Default)]
struct InFlight {
    order: VecDeque<(Ipv4Addr, Instant)>,
    by_ip: HashMap<Ipv4Addr, Instant>,
}

/// The probing side of the server.
pub struct Prober {
    socket: Socket,
    in_flight: Arc<Mutex<InFlight>>,
    timeout: Duration,
    seq: u16,
    budget: EchoBudget,
    /// Each finished probe, once.
    pub results: Receiver<(Ipv4Addr, Found)>,
    /// Readable when `results` has something.
    pub wake: UnixStream,
}

/// An ICMP echo request: type 8, code 0, identifier (the kernel sets it for
/// a ping socket), sequence, a short payload.
pub fn echo_request(seq: u16) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[0] = 8;
    b[6..8].copy_from_slice(&seq.to_be_bytes());
    b[8..16].copy_from_slice(b"oooiprob");
    let sum = checksum(&b);
    b[2..4].copy_from_slice(&sum.to_be_bytes());
    b
}

/// The Internet checksum (RFC 1071).
fn checksum(b: &[u8]) -> u16 {
    let mut sum: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Whether a datagram read from a ping socket is an echo reply.
pub fn is_echo_reply(b: &[u8]) -> bool {
    b.first() == Some(&0)
}

impl Prober {
    /// Opens the ICMP echo socket (bound to `interface` when given) and
    /// starts the thread that collects answers. Fails when the process may
    /// not open a ping socket (its group is outside
    /// `net.ipv4.ping_group_range`).
    pub fn start(interface: Option<&str>, timeout: Duration) -> std::io::Result<Prober> {
        let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::ICMPV4)).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!(
                    "ICMP echo socket (the process's group must be inside net.ipv4.ping_group_range): {e}"
                ),
            )
        })?;
        // The decision loop must never wait on this socket.
        socket.set_nonblocking(true)?;
        let _ = socket.set_send_buffer_size(1 << 20);
        if let Some(ifname) = interface {
            socket.bind_device(Some(ifname.as_bytes())).map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("ICMP socket SO_BINDTODEVICE {ifname}: {e}"),
                )
            })?;
        }
        let (wake, notify) = UnixStream::pair()?;
        wake.set_nonblocking(true)?;
        notify.set_nonblocking(true)?;
        let (tx, results) = std::sync::mpsc::channel();
        let in_flight = Arc::new(Mutex::new(InFlight::default()));
        let reader = socket.try_clone()?;
        let shared = in_flight.clone();
        std::thread::Builder::new()
            .name("dhcp-probe".into())
            .spawn(move || collect(reader, shared, timeout, tx, notify))?;
        Ok(Prober {
            socket,
            in_flight,
            timeout,
            seq: 0,
            budget: EchoBudget::default(),
            results,
            wake,
        })
    }

    /// Sends an echo to `ip`; its result comes through `results` within the
    /// timeout. False (nothing to wait for) when `ip` is already being
    /// probed; an error when the echo could not be sent now (the socket's
    /// buffer is full, [`MAX_IN_FLIGHT`] probes run, or [`MAX_UNRESOLVED`]
    /// echoes started within [`NEIGHBOUR_HOLD`]).
    pub fn start_probe(&mut self, ip: Ipv4Addr) -> Result<bool, std::io::Error> {
        let Ok(mut f) = self.in_flight.lock() else {
            return Err(std::io::Error::other("probe thread panicked"));
        };
        if f.by_ip.contains_key(&ip) {
            return Ok(false);
        }
        if f.by_ip.len() >= MAX_IN_FLIGHT {
            return Err(std::io::Error::new(
                std::io::ErrorKind::WouldBlock,
                format!("{MAX_IN_FLIGHT} probes in flight"),
            ));
        }
        if !self.budget.try_take(Instant::now()) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::WouldBlock,
                format!(
                    "{MAX_UNRESOLVED} echoes started within {} s (the node's neighbour table)",
                    NEIGHBOUR_HOLD.as_secs()
                ),
            ));
        }
        self.seq = self.seq.wrapping_add(1);
        let to = SockAddr::from(SocketAddrV4::new(ip, 0));
        self.socket.send_to(&echo_request(self.seq), &to)?;
        let deadline = Instant::now() + self.timeout;
        f.order.push_back((ip, deadline));
        f.by_ip.insert(ip, deadline);
        Ok(true)
    }

    /// Empties the wake-up socket.
    pub fn drain_wake(&self) {
        let mut b = [0u8; 256];
        while matches!(std::io::Read::read(&mut &self.wake, &mut b), Ok(n) if n > 0) {}
    }
}

/// The collecting thread: reads echo replies and ends probes that timed
/// out, reporting each probe once.
fn collect(
    socket: Socket,
    in_flight: Arc<Mutex<InFlight>>,
    timeout: Duration,
    results: Sender<(Ipv4Addr, Found)>,
    mut notify: UnixStream,
) {
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 1500];
    loop {
        let wait = match in_flight.lock() {
            Ok(f) => f.order.front().map_or(timeout, |(_, d)| {
                d.saturating_duration_since(Instant::now())
            }),
            Err(_) => return,
        };
        let mut pfd = libc::pollfd {
            fd: socket.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // A probe started during this wait ends after it (same timeout).
        let ms = wait.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        let mut done = Vec::new();
        if rc > 0 && pfd.revents & libc::POLLIN != 0 {
            while let Ok((n, from)) = socket.recv_from_with_flags(&mut buf, libc::MSG_DONTWAIT) {
                // SAFETY: recv_from initialised the first n bytes.
                let data: Vec<u8> = buf[..n]
                    .iter()
                    .map(|b| unsafe { b.assume_init() })
                    .collect();
                if !is_echo_reply(&data) {
                    continue;
                }
                if let Some(ip) = from.as_socket_ipv4().map(|a| *a.ip()) {
                    done.push((ip, Found::Answered));
                }
            }
        }
        let Ok(mut f) = in_flight.lock() else { return };
        let mut out = Vec::new();
        for (ip, found) in done {
            if f.by_ip.remove(&ip).is_some() {
                f.order.retain(|(i, _)| *i != ip);
                out.push((ip, found));
            }
        }
        let now = Instant::now();
        while let Some(&(ip, deadline)) = f.order.front() {
            if deadline > now {
                break;
            }
            f.order.pop_front();
            if f.by_ip.remove(&ip).is_some() {
                out.push((ip, Found::Nobody));
            }
        }
        drop(f);
        if out.is_empty() {
            continue;
        }
        for r in out {
            if results.send(r).is_err() {
                return;
            }
        }
        let _ = notify.write(&[1]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_responder_holds_back_a_bounded_number_of_addresses() {
        let evil = Some(crate::config::Mac([2, 0, 0, 0, 0, 0x66]));
        let other = Some(crate::config::Mac([2, 0, 0, 0, 0, 0x77]));
        let mut r = Responders::default();
        let ip = |n: u8| Ipv4Addr::new(192, 0, 2, n);
        for n in 0..MAX_HELD_PER_RESPONDER as u8 {
            assert_eq!(r.answered(evil, ip(100 + n), 0, 60), Verdict::Hold);
        }
        assert_eq!(
            r.answered(evil, ip(120), 1, 61),
            Verdict::Ignore { first: true }
        );
        assert_eq!(
            r.answered(evil, ip(121), 2, 62),
            Verdict::Ignore { first: false }
        );
        assert_eq!(r.greedy(), 1);
        // Another host is judged on its own answers.
        assert_eq!(r.answered(other, ip(130), 2, 62), Verdict::Hold);
        // Once its hold-backs end, the greedy host holds again.
        assert_eq!(r.answered(evil, ip(140), 60, 120), Verdict::Hold);
        assert_eq!(r.greedy(), 0);
    }

    #[test]
    fn the_responders_mac_is_read_from_the_neighbour_table() {
        let text = "IP address       HW type     Flags       HW address            Mask     Device\n\
                    192.0.2.100      0x1         0x2         02:00:00:00:00:66     *        br0\n\
                    192.0.2.101      0x1         0x0         00:00:00:00:00:00     *        br0\n";
        assert_eq!(
            neighbour_mac_in(text, Ipv4Addr::new(192, 0, 2, 100)),
            Some(crate::config::Mac([2, 0, 0, 0, 0, 0x66]))
        );
        assert_eq!(neighbour_mac_in(text, Ipv4Addr::new(192, 0, 2, 101)), None);
        assert_eq!(neighbour_mac_in(text, Ipv4Addr::new(192, 0, 2, 102)), None);
    }

    #[test]
    fn echo_request_carries_a_valid_checksum() {
        let b = echo_request(7);
        assert_eq!(b[0], 8);
        assert_eq!(u16::from_be_bytes([b[6], b[7]]), 7);
        // Summing a packet with its checksum in place gives zero.
        assert_eq!(checksum(&b), 0);
    }

    #[test]
    fn echoes_are_bounded_per_neighbour_hold_not_per_timeout() {
        let mut budget = EchoBudget::default();
        let t0 = Instant::now();
        // A burst: the budget, then nothing more...
        assert!((0..MAX_UNRESOLVED).all(|_| budget.try_take(t0)));
        assert!(!budget.try_take(t0));
        // ...even after the probes' own 500 ms timeout: their neighbour
        // entries are still there.
        assert!(!budget.try_take(t0 + Duration::from_millis(500)));
        assert!(!budget.try_take(t0 + NEIGHBOUR_HOLD - Duration::from_millis(1)));
        // Once the entries are gone, the whole budget again.
        let t1 = t0 + NEIGHBOUR_HOLD;
        assert!((0..MAX_UNRESOLVED).all(|_| budget.try_take(t1)));
        assert!(!budget.try_take(t1));
        // Spread out, a steady rate of budget / hold goes through forever.
        let mut budget = EchoBudget::default();
        let step = NEIGHBOUR_HOLD / MAX_UNRESOLVED as u32;
        assert!((0..4 * MAX_UNRESOLVED as u32).all(|i| budget.try_take(t0 + step * i)));
    }
}
