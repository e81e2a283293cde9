//! Places for the UDP queries in progress in the handler (forwarded names
//! waiting for an upstream, odd packets): a total, and a share per client
//! so that one client asking slow names as fast as it can holds at most its
//! share, never every place. A client is an IPv4 address or an IPv6 /64
//! (one host can use a whole /64).
//!
//! [`Slots`] is the pure bookkeeping; [`InFlight`] shares it between the
//! listeners and gives each query a [`Place`] that is returned when
//! dropped.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex};

/// Why a query got no place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Every place is taken.
    Full,
    /// Its client holds its whole share.
    Client,
}

/// The client a source address counts as: the address, or its /64.
pub fn client_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let bits = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(Ipv6Addr::from(bits))
            }
        },
    }
}

/// Places taken, in total and per client. Only clients holding a place
/// are remembered, so the map is never larger than the total.
#[derive(Debug)]
pub struct Slots {
    total: usize,
    per_client: usize,
    used: usize,
    by_client: HashMap<IpAddr, usize>,
}

impl Slots {
    /// `total` places, at most `per_client` per client.
    pub fn new(total: usize, per_client: usize) -> Self {
        Slots {
            total,
            per_client: per_client.max(1),
            used: 0,
            by_client: HashMap::new(),
        }
    }

    /// Places in use.
    pub fn used(&self) -> usize {
        self.used
    }

    /// Takes a place for `client` (see [`client_of`]).
    pub fn take(&mut self, client: IpAddr) -> Result<(), Refused> {
        if self.used >= self.total {
            return Err(Refused::Full);
        }
        let n = self.by_client.entry(client).or_insert(0);
        if *n >= self.per_client {
            return Err(Refused::Client);
        }
        *n += 1;
        self.used += 1;
        Ok(())
    }

    /// Returns a place `client` took.
    pub fn give_back(&mut self, client: IpAddr) {
        if let Some(n) = self.by_client.get_mut(&client) {
            *n -= 1;
            self.used -= 1;
            if *n == 0 {
                self.by_client.remove(&client);
            }
        }
    }
}

/// [`Slots`] shared by the listeners.
#[derive(Debug, Clone)]
pub struct InFlight(Arc<Mutex<Slots>>);

/// A place held by one query, returned when dropped.
#[derive(Debug)]
pub struct Place {
    slots: InFlight,
    client: IpAddr,
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Ok(mut s) = self.slots.0.lock() {
            s.give_back(self.client);
        }
    }
}

impl InFlight {
    /// `total` places, at most `per_client` per client.
    pub fn new(total: usize, per_client: usize) -> Self {
        InFlight(Arc::new(Mutex::new(Slots::new(total, per_client))))
    }

    /// A place for a query from `source`.
    pub fn take(&self, source: IpAddr) -> Result<Place, Refused> {
        let client = client_of(source);
        let mut s = self.0.lock().map_err(|_| Refused::Full)?;
        s.take(client)?;
        Ok(Place {
            slots: self.clone(),
            client,
        })
    }

    /// Places in use.
    pub fn used(&self) -> usize {
        self.0.lock().map_or(0, |s| s.used())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn one_client_holds_at_most_its_share_and_others_still_get_places() {
        let mut s = Slots::new(10, 3);
        let greedy = ip("192.0.2.66");
        for _ in 0..3 {
            assert_eq!(s.take(greedy), Ok(()));
        }
        assert_eq!(s.take(greedy), Err(Refused::Client));
        for i in 1..=7 {
            assert_eq!(s.take(ip(&format!("192.0.2.{i}"))), Ok(()));
        }
        assert_eq!(s.take(ip("192.0.2.100")), Err(Refused::Full));
        s.give_back(greedy);
        assert_eq!(s.take(greedy), Ok(()));
    }

    #[test]
    fn returned_places_are_forgotten_so_the_map_stays_small() {
        let mut s = Slots::new(4, 2);
        for i in 0..1000 {
            let c = ip(&format!("10.0.{}.{}", i / 250, i % 250));
            assert_eq!(s.take(c), Ok(()));
            s.give_back(c);
        }
        assert_eq!(s.used(), 0);
        assert!(s.by_client.is_empty());
    }

    #[test]
    fn a_place_not_taken_cannot_be_given_back() {
        let mut s = Slots::new(4, 2);
        s.take(ip("10.0.0.1")).expect("place");
        s.give_back(ip("10.0.0.2"));
        assert_eq!(s.used(), 1);
    }

    #[test]
    fn an_ipv6_client_is_its_slash_64_and_a_mapped_address_its_ipv4() {
        assert_eq!(client_of(ip("2001:db8:1:2:aaaa::1")), ip("2001:db8:1:2::"));
        assert_eq!(client_of(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
        let mut s = Slots::new(10, 2);
        s.take(client_of(ip("2001:db8::1"))).expect("place");
        s.take(client_of(ip("2001:db8::2"))).expect("place");
        assert_eq!(
            s.take(client_of(ip("2001:db8::3"))),
            Err(Refused::Client),
            "addresses of one /64 share a share"
        );
    }

    #[test]
    fn places_are_returned_when_dropped() {
        let f = InFlight::new(2, 1);
        let a = f.take(ip("10.0.0.1")).expect("place");
        assert_eq!(f.take(ip("10.0.0.1")).err(), Some(Refused::Client));
        let _b = f.take(ip("10.0.0.2")).expect("place");
        assert_eq!(f.take(ip("10.0.0.3")).err(), Some(Refused::Full));
        drop(a);
        assert_eq!(f.used(), 1);
        f.take(ip("10.0.0.1")).expect("place again");
    }
}
