//! DHCPv6 bindings, keyed by (DUID, IAID), with the client's MAC kept.
//!
//! Allocation ([`LeaseTable::choose`]), first that applies:
//! 1. the address this IA already holds, while it is still allowed to it;
//! 2. the address reserved for the client's MAC — taken over from another
//!    binding of the same MAC under a different DUID (a re-installed VM
//!    gets a new DUID-UUID, same MAC) or from an expired one;
//! 3. the address of another binding of the same MAC under a different DUID
//!    (same re-install case, no reservation), same IAID preferred;
//! 4. a free address of the range, probing linearly from a stable hash of
//!    the MAC (or of the DUID when no MAC is known): the same client gets the
//!    same address after the table is lost, and probing needs at most
//!    (occupied + 1) steps, however large the range.
//!
//! Declined addresses are held back for `decline_hold` and skipped.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv6Addr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::config::V6Config;
use crate::config::Mac;

/// Whether a binding was only advertised or is committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Advertised, set aside for `offer_hold`; never persisted.
    Offered,
    /// Committed by a Reply: what the lease log keeps.
    Bound,
}

/// One binding: the record the lease log will persist.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The leased address.
    pub address: Ipv6Addr,
    /// The client's DUID, raw (hex in serialised form).
    #[serde(with = "hex_bytes")]
    pub duid: Vec<u8>,
    /// The IA_NA's IAID.
    pub iaid: u32,
    /// The client's MAC when known (see [`super::duid::client_mac`]).
    pub mac: Option<Mac>,
    /// Offered or bound.
    pub state: State,
    /// Unix seconds at which the binding ends.
    pub expires: u64,
}

impl Record {
    /// Whether the binding still holds its address at `now`.
    pub fn live(&self, now: u64) -> bool {
        now < self.expires
    }

    fn key(&self) -> (Vec<u8>, u32) {
        (self.duid.clone(), self.iaid)
    }
}

/// DUIDs as hex strings in serialised records: readable in the lease log
/// and the inventory.
mod hex_bytes {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
        let mut out = String::with_capacity(b.len() * 2);
        for x in b {
            out.push_str(&format!("{x:02x}"));
        }
        s.serialize_str(&out)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        if s.len() % 2 != 0 || !s.is_ascii() {
            return Err(D::Error::custom("a DUID is an even number of hex digits"));
        }
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(D::Error::custom))
            .collect()
    }
}

/// Most IA_NA bindings one client (DUID) may hold: a client sending
/// Requests with ever new IAIDs would otherwise drain the range.
pub const MAX_IAS_PER_CLIENT: usize = 4;

/// Pool figures for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Addresses in the dynamic range (a /64 range has 2^64).
    pub range_size: u128,
    /// Live committed bindings.
    pub bound: usize,
    /// Live advertised, uncommitted bindings.
    pub offered: usize,
    /// Addresses held back after a Decline.
    pub declined: usize,
}

/// One IA_NA of one client: what the table's operations act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ia<'a> {
    /// The client's DUID.
    pub duid: &'a [u8],
    /// The IA_NA's IAID.
    pub iaid: u32,
    /// The client's MAC when known.
    pub mac: Option<Mac>,
}

/// Why no address could be given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Every address of the range is bound, offered, reserved or held.
    NoAddrsAvail,
    /// The client already holds [`MAX_IAS_PER_CLIENT`] IA_NA bindings.
    TooManyIas,
}

/// What a Renew or Rebind found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Extend {
    /// Extended: the updated binding.
    Extended(Record),
    /// This IA holds no binding of that address.
    NoBinding,
    /// The address is not one this client may have on this link (off the
    /// prefix, or reserved for another MAC): answered with zero lifetimes.
    NotAppropriate,
}

/// The in-memory DHCPv6 binding table.
#[derive(Debug)]
pub struct LeaseTable {
    config: Arc<V6Config>,
    by_addr: BTreeMap<Ipv6Addr, Record>,
    by_key: HashMap<(Vec<u8>, u32), Ipv6Addr>,
    /// Addresses bound or offered to each MAC: finding a re-installed
    /// machine's binding without scanning the table.
    by_mac: HashMap<Mac, BTreeSet<Ipv6Addr>>,
    /// IA bindings per DUID, for [`MAX_IAS_PER_CLIENT`].
    per_client: HashMap<Vec<u8>, usize>,
    held: BTreeMap<Ipv6Addr, u64>,
}

/// FNV-1a: a hash that is the same in every process (std's is seeded).
fn stable_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl LeaseTable {
    /// An empty table over a validated config.
    pub fn new(config: Arc<V6Config>) -> Self {
        LeaseTable {
            config,
            by_addr: BTreeMap::new(),
            by_key: HashMap::new(),
            by_mac: HashMap::new(),
            per_client: HashMap::new(),
            held: BTreeMap::new(),
        }
    }

    /// A table rebuilt from persisted bound records; expired ones and ones
    /// the config no longer allows are left out.
    pub fn from_records(
        config: Arc<V6Config>,
        records: impl IntoIterator<Item = Record>,
        now: u64,
    ) -> Self {
        let mut t = LeaseTable::new(config);
        for r in records {
            if r.state == State::Bound && r.live(now) && t.allowed(r.mac, r.address) {
                t.place(r);
            }
        }
        t
    }

    /// Switches to a new config (reload). Bindings of a MAC whose
    /// reservation now names another address end at once and are returned
    /// (the lease log drops them), so the client's next exchange moves it.
    /// Any other binding the config no longer allows stays until it ends;
    /// its renewal is answered with zero lifetimes.
    pub fn reconfigure(&mut self, config: Arc<V6Config>) -> Vec<Record> {
        self.config = config;
        let moved: Vec<Ipv6Addr> = self
            .by_addr
            .values()
            .filter(|r| {
                r.mac
                    .and_then(|m| self.config.reserved_for(m))
                    .is_some_and(|res| res != r.address)
            })
            .map(|r| r.address)
            .collect();
        self.remove_all(moved)
    }

    /// Removes the bindings of these addresses; the bound ones removed.
    fn remove_all(&mut self, addrs: Vec<Ipv6Addr>) -> Vec<Record> {
        addrs
            .into_iter()
            .filter_map(|a| self.remove(a))
            .filter(|r| r.state == State::Bound)
            .collect()
    }

    /// Adds a record to every index; its address and key must be unused.
    fn insert(&mut self, r: Record) {
        self.by_key.insert(r.key(), r.address);
        if let Some(m) = r.mac {
            self.by_mac.entry(m).or_default().insert(r.address);
        }
        *self.per_client.entry(r.duid.clone()).or_default() += 1;
        self.by_addr.insert(r.address, r);
    }

    /// Removes an address's record from every index.
    fn remove(&mut self, address: Ipv6Addr) -> Option<Record> {
        let r = self.by_addr.remove(&address)?;
        self.by_key.remove(&r.key());
        if let Some(m) = r.mac
            && let Some(set) = self.by_mac.get_mut(&m)
        {
            set.remove(&address);
            if set.is_empty() {
                self.by_mac.remove(&m);
            }
        }
        if let Some(n) = self.per_client.get_mut(r.duid.as_slice()) {
            *n -= 1;
            if *n == 0 {
                self.per_client.remove(r.duid.as_slice());
            }
        }
        Some(r)
    }

    /// Pool figures at `now`.
    pub fn stats(&self, now: u64) -> Stats {
        let live = |st| {
            self.by_addr
                .values()
                .filter(|r| r.state == st && r.live(now))
                .count()
        };
        Stats {
            range_size: self.config.range_size(),
            bound: live(State::Bound),
            offered: live(State::Offered),
            declined: self.held.values().filter(|until| now < **until).count(),
        }
    }

    /// The config the table allocates from.
    pub fn config(&self) -> &Arc<V6Config> {
        &self.config
    }

    /// The binding of an address.
    pub fn get(&self, address: Ipv6Addr) -> Option<&Record> {
        self.by_addr.get(&address)
    }

    /// The binding of an IA.
    pub fn binding(&self, duid: &[u8], iaid: u32) -> Option<&Record> {
        let a = self.by_key.get(&(duid.to_vec(), iaid))?;
        self.by_addr.get(a)
    }

    /// Every binding, by address.
    pub fn records(&self) -> impl Iterator<Item = &Record> {
        self.by_addr.values()
    }

    /// Whether an address is held back (declined) at `now`.
    pub fn is_held(&self, address: Ipv6Addr, now: u64) -> bool {
        self.held.get(&address).is_some_and(|until| now < *until)
    }

    /// Whether a client of this MAC may hold `address` on this link.
    pub fn allowed(&self, mac: Option<Mac>, address: Ipv6Addr) -> bool {
        if !self.config.prefix.contains(&address) {
            return false;
        }
        match self.config.reservation_of(address) {
            Some(owner) => Some(owner) == mac,
            None => self.config.in_range(address),
        }
    }

    fn at_ia_cap(&self, duid: &[u8]) -> bool {
        self.per_client
            .get(duid)
            .is_some_and(|n| *n >= MAX_IAS_PER_CLIENT)
    }

    fn free(&self, address: Ipv6Addr, now: u64) -> bool {
        !self.is_held(address, now)
            && self.config.reservation_of(address).is_none()
            && self.by_addr.get(&address).is_none_or(|r| !r.live(now))
    }

    /// The address the IA `(duid, iaid)` of a client with `mac` gets (rules
    /// on this module). Changes nothing.
    pub fn choose(&self, ia: Ia<'_>, now: u64) -> Result<Ipv6Addr, Refusal> {
        let Ia { duid, iaid, mac } = ia;
        if let Some(r) = self.binding(duid, iaid)
            && self.allowed(mac.or(r.mac), r.address)
            && !self.is_held(r.address, now)
        {
            return Ok(r.address);
        }
        if self.at_ia_cap(duid) {
            return Err(Refusal::TooManyIas);
        }
        if let Some(mac) = mac {
            if let Some(res) = self.config.reserved_for(mac)
                && !self.is_held(res, now)
            {
                let takeable = match self.by_addr.get(&res) {
                    None => true,
                    // Same client, another IA: that IA keeps it.
                    Some(o) if o.duid == duid => false,
                    Some(o) => o.mac == Some(mac) || !o.live(now),
                };
                if takeable {
                    return Ok(res);
                }
            }
            let stale = self
                .by_mac
                .get(&mac)
                .into_iter()
                .flatten()
                .filter_map(|a| self.by_addr.get(a))
                .filter(|o| o.duid != duid)
                .filter(|o| self.allowed(Some(mac), o.address) && !self.is_held(o.address, now))
                .min_by_key(|o| (o.iaid != iaid, o.address));
            if let Some(o) = stale {
                return Ok(o.address);
            }
        }
        let start = u128::from(self.config.range_start);
        let size = self.config.range_size();
        let seed = match mac {
            Some(m) => stable_hash(&m.0),
            None => stable_hash(duid),
        };
        let occupied =
            (self.by_addr.len() + self.held.len() + self.config.reservations.len()) as u128;
        let first = u128::from(seed) % size;
        for step in 0..size.min(occupied + 1) {
            let a = Ipv6Addr::from(start + (first + step) % size);
            if self.free(a, now) {
                return Ok(a);
            }
        }
        Err(Refusal::NoAddrsAvail)
    }

    /// Puts a record at its address, removing what it replaces (the IA's
    /// binding of another address, another IA's binding of this address).
    /// Returns the bound records removed, for the lease log.
    fn place(&mut self, record: Record) -> Vec<Record> {
        let mut gone = Vec::new();
        if let Some(old) = self.remove(record.address)
            && old.key() != record.key()
        {
            gone.push(old);
        }
        if let Some(a) = self.by_key.get(&record.key()).copied()
            && let Some(old) = self.remove(a)
        {
            gone.push(old);
        }
        self.insert(record);
        gone.retain(|r| r.state == State::Bound);
        gone
    }

    /// Sets an address aside for an IA (Advertise). An IA already bound
    /// keeps its binding as it is.
    pub fn offer(&mut self, ia: Ia<'_>, now: u64) -> Result<Record, Refusal> {
        let Ia { duid, iaid, mac } = ia;
        let address = self.choose(ia, now)?;
        if let Some(r) = self.binding(duid, iaid)
            && r.address == address
            && r.state == State::Bound
            && r.live(now)
        {
            return Ok(r.clone());
        }
        let record = Record {
            address,
            duid: duid.to_vec(),
            iaid,
            mac,
            state: State::Offered,
            expires: now + u64::from(self.config.offer_hold),
        };
        // Taken over from a live binding of the same MAC (re-installed
        // machine): that binding stays until the Request commits, so an
        // Advertise alone never ends a lease.
        let bound_elsewhere = self
            .by_addr
            .get(&address)
            .is_some_and(|o| o.key() != record.key() && o.state == State::Bound && o.live(now));
        if !bound_elsewhere {
            self.place(record.clone());
        }
        Ok(record)
    }

    /// Binds an address to an IA for the valid lifetime (Request, Rapid
    /// Commit). Returns the binding and the bound records it displaced (a
    /// stale DUID of the same MAC), which the lease log must drop.
    pub fn commit(&mut self, ia: Ia<'_>, now: u64) -> Result<(Record, Vec<Record>), Refusal> {
        let address = self.choose(ia, now)?;
        Ok(self.bind(ia, address, now))
    }

    fn bind(&mut self, ia: Ia<'_>, address: Ipv6Addr, now: u64) -> (Record, Vec<Record>) {
        let Ia { duid, iaid, mac } = ia;
        let record = Record {
            address,
            duid: duid.to_vec(),
            iaid,
            mac,
            state: State::Bound,
            expires: now + u64::from(self.config.valid_lifetime),
        };
        let gone = self.place(record.clone());
        (record, gone)
    }

    /// Renews the IA's binding of `address` (Renew, Rebind).
    pub fn extend(&mut self, ia: Ia<'_>, address: Ipv6Addr, now: u64) -> Extend {
        let Ia { duid, iaid, mac } = ia;
        // A renewal may come without the MAC the binding was made with (a
        // unicast or relayed message, no frame MAC): the binding's stands.
        let (mac, bound) = match self.binding(duid, iaid) {
            Some(r) if r.address == address && r.state == State::Bound => (mac.or(r.mac), true),
            _ => (mac, false),
        };
        if !self.allowed(mac, address) {
            Extend::NotAppropriate
        } else if bound {
            Extend::Extended(self.bind(Ia { mac, ..ia }, address, now).0)
        } else {
            Extend::NoBinding
        }
    }

    /// A Rebind for an address this table has no binding of (lost lease
    /// table, or the other server's client): binds it again when it is free
    /// and allowed to this client (RFC 8415 §18.3.5 lets a server do so).
    pub fn recover(&mut self, ia: Ia<'_>, address: Ipv6Addr, now: u64) -> Option<Record> {
        let Ia { duid, iaid, mac } = ia;
        if !self.allowed(mac, address)
            || self.is_held(address, now)
            || (self.binding(duid, iaid).is_none() && self.at_ia_cap(duid))
        {
            return None;
        }
        match self.by_addr.get(&address) {
            Some(o) if o.live(now) && o.key() != (duid.to_vec(), iaid) => return None,
            _ => {}
        }
        Some(self.bind(ia, address, now).0)
    }

    /// Ends the IA's binding of `address` (Release); the removed binding.
    pub fn release(&mut self, ia: Ia<'_>, address: Ipv6Addr) -> Option<Record> {
        let Ia { duid, iaid, .. } = ia;
        let key = (duid.to_vec(), iaid);
        if self.by_key.get(&key) != Some(&address) {
            return None;
        }
        self.remove(address)
    }

    /// Ends the IA's binding of `address` and holds the address back
    /// (Decline: another node answers for it).
    pub fn decline(&mut self, ia: Ia<'_>, address: Ipv6Addr, now: u64) -> Option<Record> {
        let r = self.release(ia, address)?;
        self.held
            .insert(address, now + u64::from(self.config.decline_hold));
        Some(r)
    }

    /// Removes bindings and holds that ended by `now`; the bound records
    /// removed (the lease log drops them).
    pub fn expire(&mut self, now: u64) -> Vec<Record> {
        self.held.retain(|_, until| now < *until);
        let ended: Vec<Ipv6Addr> = self
            .by_addr
            .values()
            .filter(|r| !r.live(now))
            .map(|r| r.address)
            .collect();
        self.remove_all(ended)
    }
}

#[cfg(test)]
impl LeaseTable {
    /// The table's own consistency: both indexes agree, and no live binding
    /// sits on a held address or on an address its MAC may not have
    /// (reloads aside, which no caller of this check performs).
    pub(crate) fn check_invariants(&self, now: u64) {
        assert_eq!(self.by_addr.len(), self.by_key.len());
        for (a, r) in &self.by_addr {
            assert_eq!(*a, r.address);
            assert_eq!(self.by_key.get(&r.key()), Some(a));
            if r.live(now) {
                assert!(!self.is_held(*a, now), "{a} bound and held");
                assert!(
                    self.allowed(r.mac, *a),
                    "{a} bound to {:?}, not allowed",
                    r.mac
                );
            }
        }
        let mut per_client: HashMap<Vec<u8>, usize> = HashMap::new();
        let mut by_mac: HashMap<Mac, BTreeSet<Ipv6Addr>> = HashMap::new();
        for r in self.by_addr.values() {
            *per_client.entry(r.duid.clone()).or_default() += 1;
            if let Some(m) = r.mac {
                by_mac.entry(m).or_default().insert(r.address);
            }
        }
        assert_eq!(per_client, self.per_client);
        assert_eq!(by_mac, self.by_mac);
        assert!(per_client.values().all(|n| *n <= MAX_IAS_PER_CLIENT));
    }
}
