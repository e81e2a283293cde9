//! The server's UDP socket: opening it, waiting on it (and on the pair's
//! and the prober's wake-up sockets), and sending replies without dropping
//! them during a burst.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

use crate::metrics::{count, metrics};
use crate::pipeline::Destination;

/// DHCP server port.
pub const SERVER_PORT: u16 = 67;
/// DHCP client port.
pub const CLIENT_PORT: u16 = 68;

/// Opens the server socket: `0.0.0.0:port`, broadcast allowed, bound to
/// `interface` when given.
pub fn open_socket(interface: Option<&str>, port: u16) -> std::io::Result<UdpSocket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_address(true)?;
    s.set_broadcast(true)?;
    // Room for a burst while the decision loop is busy (the kernel caps it
    // at net.core.rmem_max; a smaller buffer is not an error).
    let _ = s.set_recv_buffer_size(4 << 20);
    let _ = s.set_send_buffer_size(1 << 20);
    tracing::info!(
        rcvbuf = s.recv_buffer_size().unwrap_or(0),
        sndbuf = s.send_buffer_size().unwrap_or(0),
        "socket buffers granted (bytes, as the kernel counts them; raise net.core.rmem_max for more)"
    );
    if let Some(ifname) = interface {
        s.bind_device(Some(ifname.as_bytes())).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("SO_BINDTODEVICE {ifname} (needs CAP_NET_RAW): {e}"),
            )
        })?;
    }
    // Binding the interface address would miss broadcasts: bind the wildcard.
    s.bind(&SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)).into())?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// Waits until the socket, the pair's wake-up end, the prober's or the
/// inventory API's is readable, or `timeout`; returns which are (in that
/// order).
pub(super) fn wait_readable(
    socket: &UdpSocket,
    pair: Option<&UnixStream>,
    probes: Option<&UnixStream>,
    inventory: Option<&UnixStream>,
    timeout: Duration,
) -> [bool; 4] {
    let fd = |w: Option<&UnixStream>| w.map_or(-1, |w| w.as_raw_fd());
    let mut pfds =
        [socket.as_raw_fd(), fd(pair), fd(probes), fd(inventory)].map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: four valid pollfds (a negative fd is ignored by poll).
    let rc = unsafe { libc::poll(pfds.as_mut_ptr(), 4, ms) };
    if rc <= 0 {
        return [false; 4];
    }
    pfds.map(|p| p.revents & libc::POLLIN != 0)
}

/// `send_to` on the non-blocking socket, waiting (up to 200 ms) for room in
/// the send buffer instead of dropping a reply during a burst of ACKs.
fn send_waiting(socket: &UdpSocket, bytes: &[u8], to: SocketAddrV4) -> std::io::Result<usize> {
    let deadline = Instant::now() + Duration::from_millis(200);
    loop {
        match socket.send_to(bytes, to) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                let mut pfd = libc::pollfd {
                    fd: socket.as_raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                };
                // SAFETY: one valid pollfd.
                unsafe { libc::poll(&mut pfd, 1, 10) };
            }
            r => return r,
        }
    }
}

/// Sends replies.
pub(super) struct Sender4 {
    pub(super) socket: UdpSocket,
}

impl Sender4 {
    /// Another sender on the same socket.
    pub(super) fn clone_sender(&self) -> std::io::Result<Sender4> {
        Ok(Sender4 {
            socket: self.socket.try_clone()?,
        })
    }

    pub(super) fn send(&mut self, bytes: &[u8], dest: Destination, kind: &str) {
        let to = match dest {
            Destination::Relay(ip) => SocketAddrV4::new(ip, SERVER_PORT),
            Destination::Client(ip) => SocketAddrV4::new(ip, CLIENT_PORT),
            Destination::Broadcast => SocketAddrV4::new(Ipv4Addr::BROADCAST, CLIENT_PORT),
        };
        match send_waiting(&self.socket, bytes, to) {
            Ok(_) => count(&metrics().sent, kind),
            Err(e) => {
                metrics().send_errors.inc();
                tracing::warn!(%to, error = %e, "send failed");
            }
        }
    }
}
