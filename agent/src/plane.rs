//! The interface side of the agent behind one small trait: the driver adds,
//! refreshes, removes and announces addresses through a [`Plane`]. The real
//! one is [`LinuxPlane`] (rtnetlink and a packet socket). An IPv6 plane
//! adds the same four operations: the address with DAD off (`nodad`: a
//! moving address must not wait for duplicate detection), and an
//! unsolicited neighbour advertisement for `announce`.

use std::io;
use std::net::Ipv4Addr;
use std::sync::Mutex;
use std::time::Duration;

use ipnet::Ipv4Net;

use crate::arp::ArpSocket;
use crate::netlink::{self, Link};

/// Where floating addresses go on and off.
pub trait Plane: Send + Sync + 'static {
    /// The IPv4 addresses on the interface now.
    fn present(&self) -> io::Result<Vec<Ipv4Net>>;
    /// Adds `net`, or pushes its kernel lifetime out to `lifetime`: an
    /// address whose agent died or froze leaves by itself.
    fn add(&self, net: Ipv4Net, lifetime: Duration) -> io::Result<()>;
    /// Removes `net` (no error when it is not there).
    fn remove(&self, net: Ipv4Net) -> io::Result<()>;
    /// Broadcasts one gratuitous ARP for `ip`.
    fn announce(&self, ip: Ipv4Addr) -> io::Result<()>;
}

/// The VLAN interface of the pod, through rtnetlink and AF_PACKET.
pub struct LinuxPlane {
    link: Link,
    announcer: ArpSocket,
    lifetime: Duration,
    /// Removal and the put-back of lost secondaries are one step.
    lock: Mutex<()>,
}

impl LinuxPlane {
    /// Opens `interface`; fails without CAP_NET_RAW (the packet socket).
    /// `lifetime` is given to addresses put back after a removal.
    pub fn open(interface: &str, lifetime: Duration) -> io::Result<LinuxPlane> {
        let link = Link::by_name(interface)?;
        let announcer = ArpSocket::open(&link, false).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("packet socket on {interface} (needs CAP_NET_RAW): {e}"),
            )
        })?;
        Ok(LinuxPlane {
            link,
            announcer,
            lifetime,
            lock: Mutex::new(()),
        })
    }

    /// The interface.
    pub fn link(&self) -> &Link {
        &self.link
    }
}

impl Plane for LinuxPlane {
    fn present(&self) -> io::Result<Vec<Ipv4Net>> {
        netlink::addresses(&self.link)
    }

    fn add(&self, net: Ipv4Net, lifetime: Duration) -> io::Result<()> {
        let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        netlink::add(&self.link, net, Some(lifetime))
    }

    fn remove(&self, net: Ipv4Net) -> io::Result<()> {
        let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        // Removing a subnet's primary address also removes its secondaries
        // (promote_secondaries is off by default and a container cannot
        // set it): put back what went with it.
        let before = netlink::addresses(&self.link)?;
        netlink::remove(&self.link, net)?;
        let after = netlink::addresses(&self.link)?;
        for lost in before.iter().filter(|n| **n != net && !after.contains(n)) {
            tracing::info!(address = %lost, removed = %net, "putting back a secondary address removed with its primary");
            netlink::add(&self.link, *lost, Some(self.lifetime))?;
        }
        Ok(())
    }

    fn announce(&self, ip: Ipv4Addr) -> io::Result<()> {
        self.announcer.announce(ip, None)
    }
}
