//! The order of the addresses in an answer with several (the proxy
//! replicas): rotated per query, so that clients that take the first
//! address (glibc does, among equally preferred ones) spread their new
//! connections over every replica instead of all using the first.
//!
//! The rotation comes from the query itself (its ID, which clients pick at
//! random, and the client's address), not from a counter: the fast path and
//! the handler give the same packet the same order, so each can be checked
//! against the other, and a captured query can be replayed to see what its
//! client got.

use std::net::IpAddr;

/// The rotation of a query with `id` from `client` (any `usize`; callers
/// take it modulo the number of addresses).
pub fn rotation(id: u16, client: IpAddr) -> usize {
    // FNV-1a over the ID and the client's address: cheap, and every input
    // bit moves the result.
    let mut h: u32 = 0x811c_9dc5;
    let mut mix = |b: u8| {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    };
    for b in id.to_be_bytes() {
        mix(b);
    }
    match client {
        IpAddr::V4(a) => a.octets().into_iter().for_each(&mut mix),
        IpAddr::V6(a) => a.octets().into_iter().for_each(&mut mix),
    }
    // The high bits are the best mixed.
    (h >> 8) as usize
}

/// Rotates `addrs` left by `rot` within each address family, keeping the
/// families where they are (an ANY answer lists A then AAAA).
pub fn rotate(addrs: &mut [IpAddr], rot: usize) {
    let split = addrs.iter().take_while(|a| a.is_ipv4()).count();
    let (v4, v6) = addrs.split_at_mut(split);
    for run in [v4, v6] {
        if run.len() > 1 {
            run.rotate_left(rot % run.len());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().expect("ip")).collect()
    }

    #[test]
    fn rotation_keeps_every_address_and_each_family_in_place() {
        let mut a = ips(&[
            "192.0.2.4",
            "192.0.2.5",
            "192.0.2.6",
            "2001:db8::1",
            "2001:db8::2",
        ]);
        rotate(&mut a, 4);
        assert_eq!(
            a,
            ips(&[
                "192.0.2.5",
                "192.0.2.6",
                "192.0.2.4",
                "2001:db8::1",
                "2001:db8::2"
            ])
        );
        let mut one = ips(&["192.0.2.4"]);
        rotate(&mut one, 7);
        assert_eq!(one, ips(&["192.0.2.4"]));
    }

    #[test]
    fn the_same_query_gets_the_same_order() {
        let c: IpAddr = "192.0.2.57".parse().expect("ip");
        assert_eq!(rotation(4711, c), rotation(4711, c));
    }

    /// Random query IDs from many clients put each of three replicas first
    /// for about a third of the queries, and so do the queries of a single
    /// client.
    #[test]
    fn first_addresses_spread_evenly_over_clients_and_queries() {
        let replicas = 3;
        let mut seed: u32 = 12345;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed
        };
        let mut by_many = vec![0usize; replicas];
        for i in 0..30_000u32 {
            let client = IpAddr::from([192, 0, 2, (i % 250) as u8 + 1]);
            by_many[rotation(next() as u16, client) % replicas] += 1;
        }
        let mut by_one = vec![0usize; replicas];
        let client: IpAddr = "192.0.2.57".parse().expect("ip");
        for _ in 0..30_000 {
            by_one[rotation(next() as u16, client) % replicas] += 1;
        }
        for counts in [by_many, by_one] {
            for c in &counts {
                // 10,000 expected each; a fair die strays by ~80.
                assert!((9_400..=10_600).contains(c), "{counts:?}");
            }
        }
        // Every possible ID from one client: close to even.
        let mut all = vec![0usize; replicas];
        for id in 0..=u16::MAX {
            all[rotation(id, client) % replicas] += 1;
        }
        for c in &all {
            assert!((21_300..=22_400).contains(c), "{all:?}");
        }
    }
}
