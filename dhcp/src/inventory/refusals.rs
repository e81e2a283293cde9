//! Why a client got no address: every refusal or silence toward a client,
//! counted by [`RefusalReason`], and the last [`EVENTS_PER_CLIENT`] of each
//! client kept for the [`CLIENTS_REMEMBERED`] clients refused most
//! recently (the least recently refused is forgotten first). No I/O; the
//! decision loop records, the inventory API reads.
//!
//! Memory is bounded whatever clients send: a flood of made-up MACs only
//! replaces the oldest entries, so at most `CLIENTS_REMEMBERED ×
//! EVENTS_PER_CLIENT` events are held.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::IpAddr;

use oooi_dhcp_inventory::{CLIENTS_REMEMBERED, EVENTS_PER_CLIENT, RefusalEvent, RefusalReason};

use crate::config::Mac;

/// One client's recent refusals and when it was last refused (the LRU
/// stamp).
#[derive(Debug)]
struct Client {
    stamp: u64,
    events: VecDeque<RefusalEvent>,
}

/// Refusal counts since start, and recent refusals per client (bounded).
#[derive(Debug)]
pub struct Refusals {
    counts: BTreeMap<RefusalReason, u64>,
    clients: HashMap<Mac, Client>,
    /// LRU order: stamp → client; the first entry is forgotten first.
    order: BTreeMap<u64, Mac>,
    next_stamp: u64,
    capacity: usize,
}

impl Default for Refusals {
    fn default() -> Self {
        Refusals::with_capacity(CLIENTS_REMEMBERED)
    }
}

impl Refusals {
    /// Remembers at most `capacity` clients (at least one).
    pub fn with_capacity(capacity: usize) -> Refusals {
        Refusals {
            counts: BTreeMap::new(),
            clients: HashMap::new(),
            order: BTreeMap::new(),
            next_stamp: 0,
            capacity: capacity.max(1),
        }
    }

    /// Counts a refusal with no client to name (a message too damaged to
    /// carry a hardware address).
    pub fn count(&mut self, reason: RefusalReason) {
        *self.counts.entry(reason).or_insert(0) += 1;
    }

    /// Counts a refusal of `mac` and keeps it among that client's last
    /// events (the client becomes the most recently refused).
    pub fn record(&mut self, mac: Mac, event: RefusalEvent) {
        self.count(event.reason);
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        if let Some(c) = self.clients.get_mut(&mac) {
            self.order.remove(&c.stamp);
            c.stamp = stamp;
            if c.events.len() >= EVENTS_PER_CLIENT {
                c.events.pop_front();
            }
            c.events.push_back(event);
            self.order.insert(stamp, mac);
            return;
        }
        while self.clients.len() >= self.capacity {
            let Some((_, old)) = self.order.pop_first() else {
                break;
            };
            self.clients.remove(&old);
        }
        self.clients.insert(
            mac,
            Client {
                stamp,
                events: VecDeque::from([event]),
            },
        );
        self.order.insert(stamp, mac);
    }

    /// The last events of `mac`, oldest first (empty when none is
    /// remembered).
    pub fn events(&self, mac: Mac) -> Vec<RefusalEvent> {
        self.clients
            .get(&mac)
            .map(|c| c.events.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Refusals since start, by reason (reasons never seen are absent).
    pub fn counts(&self) -> BTreeMap<RefusalReason, u64> {
        self.counts.clone()
    }

    /// Clients remembered now.
    pub fn clients(&self) -> usize {
        self.clients.len()
    }

    /// Events held now, over every client.
    pub fn events_held(&self) -> usize {
        self.clients.values().map(|c| c.events.len()).sum()
    }
}

/// A refusal event at `at_unix`.
pub fn event(
    at_unix: u64,
    reason: RefusalReason,
    message: &str,
    address: Option<IpAddr>,
    detail: Option<&str>,
) -> RefusalEvent {
    RefusalEvent {
        at_unix,
        reason,
        message: message.to_string(),
        address,
        detail: detail.map(str::to_string),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac(n: u32) -> Mac {
        let b = n.to_be_bytes();
        Mac([2, 0, b[0], b[1], b[2], b[3]])
    }

    fn ev(at: u64, reason: RefusalReason) -> RefusalEvent {
        event(at, reason, "DISCOVER", None, None)
    }

    #[test]
    fn a_client_keeps_its_last_events_oldest_first() {
        let mut r = Refusals::default();
        for at in 0..(EVENTS_PER_CLIENT as u64 + 3) {
            r.record(mac(1), ev(at, RefusalReason::PoolExhausted));
        }
        let events = r.events(mac(1));
        assert_eq!(events.len(), EVENTS_PER_CLIENT);
        assert_eq!(events[0].at_unix, 3);
        assert_eq!(
            events.last().map(|e| e.at_unix),
            Some(EVENTS_PER_CLIENT as u64 + 2)
        );
        assert_eq!(
            r.counts()[&RefusalReason::PoolExhausted],
            EVENTS_PER_CLIENT as u64 + 3
        );
        assert!(r.events(mac(2)).is_empty());
    }

    #[test]
    fn the_least_recently_refused_client_is_forgotten_first() {
        let mut r = Refusals::with_capacity(3);
        r.record(mac(1), ev(1, RefusalReason::PoolExhausted));
        r.record(mac(2), ev(2, RefusalReason::PoolExhausted));
        r.record(mac(3), ev(3, RefusalReason::PoolExhausted));
        // Client 1 is refused again: client 2 is now the oldest.
        r.record(mac(1), ev(4, RefusalReason::InUse));
        r.record(mac(4), ev(5, RefusalReason::PoolExhausted));
        assert_eq!(r.clients(), 3);
        assert!(r.events(mac(2)).is_empty());
        assert_eq!(r.events(mac(1)).len(), 2);
        assert_eq!(r.events(mac(3)).len(), 1);
        assert_eq!(r.events(mac(4)).len(), 1);
        // Counts are not bounded by the clients remembered.
        assert_eq!(r.counts()[&RefusalReason::PoolExhausted], 4);
        assert_eq!(r.counts()[&RefusalReason::InUse], 1);
    }

    #[test]
    fn a_flood_of_made_up_macs_holds_at_most_the_bound() {
        let mut r = Refusals::default();
        let n = CLIENTS_REMEMBERED as u32 * 5;
        for i in 0..n {
            for _ in 0..3 {
                r.record(
                    mac(i),
                    ev(u64::from(i), RefusalReason::UnknownClientIgnored),
                );
            }
        }
        assert_eq!(r.clients(), CLIENTS_REMEMBERED);
        assert_eq!(r.order.len(), CLIENTS_REMEMBERED);
        assert!(r.events_held() <= CLIENTS_REMEMBERED * EVENTS_PER_CLIENT);
        // The newest are kept, the oldest gone.
        assert_eq!(r.events(mac(n - 1)).len(), 3);
        assert!(r.events(mac(0)).is_empty());
        assert_eq!(
            r.counts()[&RefusalReason::UnknownClientIgnored],
            u64::from(n) * 3
        );
    }

    #[test]
    fn a_refusal_without_a_client_is_only_counted() {
        let mut r = Refusals::default();
        r.count(RefusalReason::Malformed);
        assert_eq!(r.counts()[&RefusalReason::Malformed], 1);
        assert_eq!(r.clients(), 0);
    }
}
