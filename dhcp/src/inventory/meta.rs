//! What the server knows about each lease beyond the lease log's record
//! (address, MAC, expiry): the client identifier (option 61), the host
//! name the client sent (option 12), the client's last transaction time,
//! which server of a pair answered it, and whether it released the address
//! or a probe found the address in use.
//!
//! Kept by the decision loop, by address, for addresses the lease table
//! binds (so bounded by the pool and the reservations), and saved in a
//! sidecar file beside the log, `lease-meta.json` ([`FILE`]): written whole
//! (temporary file, `fsync`, rename, `fsync` of the directory) at most every
//! [`SAVE_EVERY`] while something changed, by a thread of its own, never
//! before an ACK. The log's record format is untouched, so every existing
//! log reads as before. After a crash, what changed in the last
//! [`SAVE_EVERY`] is rebuilt at the client's next transaction (its
//! renewal); a lease with no saved entry shows no client id, host name
//! (unless its reservation names one) or last transaction time until then.
//! An entry is used only for the MAC it was saved with.

use std::collections::HashMap;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Duration;

use oooi_dhcp_inventory::ServerRole;
use serde::{Deserialize, Serialize};

use crate::config::Mac;

/// The sidecar file's name in the data directory.
pub const FILE: &str = "lease-meta.json";
/// The file format's version (a reader refuses another).
pub const VERSION: u32 = 1;
/// Most often the file is rewritten.
pub const SAVE_EVERY: Duration = Duration::from_secs(5);
/// Longest client identifier kept (option 61 is at most 255 bytes).
const MAX_CLIENT_ID: usize = 255;
/// Longest host name kept (a DNS name).
const MAX_HOSTNAME: usize = 253;

/// What the server knows of one address's client beyond the log record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseMeta {
    /// The client this is about (the entry is ignored for another MAC).
    pub mac: Mac,
    /// Option 61, as sent.
    pub client_id: Option<Vec<u8>>,
    /// Option 12, as sent.
    pub hostname: Option<String>,
    /// The client's last transaction, Unix seconds.
    pub cltt: Option<u64>,
    /// The server that answered it last.
    pub answered_by: ServerRole,
    /// The client released the address (its lease ended then).
    pub released: bool,
    /// A conflict probe found the address in use when it was offered to
    /// `mac`: it is quarantined, not the client's.
    pub probe_conflict: bool,
}

/// The metadata of every address, by address.
#[derive(Debug, Default)]
pub struct Meta {
    by_ip: HashMap<Ipv4Addr, LeaseMeta>,
    dirty: bool,
}

/// The client identifier and host name a request carried.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sent {
    /// Option 61.
    pub client_id: Option<Vec<u8>>,
    /// Option 12.
    pub hostname: Option<String>,
}

impl Meta {
    /// The metadata of `ip` when it is about `mac`.
    pub fn get(&self, ip: Ipv4Addr, mac: Mac) -> Option<&LeaseMeta> {
        self.by_ip.get(&ip).filter(|m| m.mac == mac)
    }

    /// The metadata of `ip`, whoever it is about.
    pub fn any(&self, ip: Ipv4Addr) -> Option<&LeaseMeta> {
        self.by_ip.get(&ip)
    }

    /// `mac` transacted with `by` about `ip` at `now` (offer, ACK): what it
    /// sent replaces what was known, what it did not send is kept when the
    /// entry is about the same client.
    pub fn transacted(&mut self, ip: Ipv4Addr, mac: Mac, sent: &Sent, by: ServerRole, now: u64) {
        let old = self.by_ip.get(&ip).filter(|m| m.mac == mac);
        let client_id = sent
            .client_id
            .clone()
            .filter(|c| c.len() <= MAX_CLIENT_ID)
            .or_else(|| old.and_then(|m| m.client_id.clone()));
        let hostname = sent
            .hostname
            .clone()
            .filter(|h| h.len() <= MAX_HOSTNAME)
            .or_else(|| old.and_then(|m| m.hostname.clone()));
        self.by_ip.insert(
            ip,
            LeaseMeta {
                mac,
                client_id,
                hostname,
                cltt: Some(now),
                answered_by: by,
                released: false,
                probe_conflict: false,
            },
        );
        self.dirty = true;
    }

    /// `mac` released `ip` at `now` (here when `by` is this server, else on
    /// the other server).
    pub fn released(&mut self, ip: Ipv4Addr, mac: Mac, by: ServerRole, now: u64) {
        let e = self.entry(ip, mac, by);
        e.released = true;
        e.cltt = Some(now);
        self.dirty = true;
    }

    /// `mac` declined `ip` at `now`: the quarantine keeps the MAC that
    /// declined it.
    pub fn declined(&mut self, ip: Ipv4Addr, mac: Mac, by: ServerRole, now: u64) {
        let e = self.entry(ip, mac, by);
        e.cltt = Some(now);
        e.released = false;
        e.probe_conflict = false;
        self.dirty = true;
    }

    /// A probe found `ip`, offered to `mac`, in use.
    pub fn probe_conflict(&mut self, ip: Ipv4Addr, mac: Mac, by: ServerRole) {
        let e = self.entry(ip, mac, by);
        e.probe_conflict = true;
        e.released = false;
        self.dirty = true;
    }

    /// A binding of `ip` to `mac` learned from the other server (`by`), whose
    /// client transacted at `cltt` when known: what this server knew of the
    /// same client is kept.
    pub fn learned(&mut self, ip: Ipv4Addr, mac: Mac, by: ServerRole, cltt: Option<u64>) {
        let e = self.entry(ip, mac, by);
        e.answered_by = by;
        e.released = false;
        e.probe_conflict = false;
        if cltt.is_some() {
            e.cltt = cltt;
        }
        self.dirty = true;
    }

    /// Forgets what was known of `ip` (its binding changed hands without a
    /// client this server saw: a quarantine from the other server, a lost
    /// record).
    pub fn forget(&mut self, ip: Ipv4Addr) {
        if self.by_ip.remove(&ip).is_some() {
            self.dirty = true;
        }
    }

    fn entry(&mut self, ip: Ipv4Addr, mac: Mac, by: ServerRole) -> &mut LeaseMeta {
        let fresh = || LeaseMeta {
            mac,
            client_id: None,
            hostname: None,
            cltt: None,
            answered_by: by,
            released: false,
            probe_conflict: false,
        };
        let e = self.by_ip.entry(ip).or_insert_with(fresh);
        if e.mac != mac {
            *e = fresh();
        }
        e
    }

    /// Keeps only the entries `keep` accepts (the addresses the lease table
    /// still binds).
    pub fn retain(&mut self, mut keep: impl FnMut(Ipv4Addr) -> bool) {
        let before = self.by_ip.len();
        self.by_ip.retain(|ip, _| keep(*ip));
        if self.by_ip.len() != before {
            self.dirty = true;
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.by_ip.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.by_ip.is_empty()
    }

    /// The file's bytes when something changed since the last call.
    pub fn take_changes(&mut self) -> Option<Vec<u8>> {
        if !self.dirty {
            return None;
        }
        self.dirty = false;
        Some(self.encode())
    }

    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut leases: Vec<FileEntry> = self
            .by_ip
            .iter()
            .map(|(ip, m)| FileEntry {
                ip: *ip,
                mac: m.mac.to_string(),
                client_id: m.client_id.as_deref().map(hex),
                hostname: m.hostname.clone(),
                cltt: m.cltt,
                answered_by: m.answered_by,
                released: m.released,
                probe_conflict: m.probe_conflict,
            })
            .collect();
        leases.sort_by_key(|e| e.ip);
        serde_json::to_vec(&File {
            version: VERSION,
            leases,
        })
        .unwrap_or_default()
    }

    /// Reads the file's bytes; an entry that does not parse is skipped and
    /// counted in the second value.
    pub fn decode(bytes: &[u8]) -> Result<(Meta, usize), String> {
        let f: File = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        if f.version != VERSION {
            return Err(format!(
                "version {} (this server reads {VERSION})",
                f.version
            ));
        }
        let mut m = Meta::default();
        let mut bad = 0;
        for e in f.leases {
            let Some(mac) = Mac::parse(&e.mac) else {
                bad += 1;
                continue;
            };
            let client_id = match e.client_id.as_deref().map(unhex) {
                Some(None) => {
                    bad += 1;
                    continue;
                }
                Some(Some(c)) => Some(c),
                None => None,
            };
            m.by_ip.insert(
                e.ip,
                LeaseMeta {
                    mac,
                    client_id,
                    hostname: e.hostname,
                    cltt: e.cltt,
                    answered_by: e.answered_by,
                    released: e.released,
                    probe_conflict: e.probe_conflict,
                },
            );
        }
        Ok((m, bad))
    }

    /// Reads the file in `dir`: empty when there is none; a file that does
    /// not read is logged and ignored (the metadata is rebuilt as clients
    /// return).
    pub fn load(dir: &Path) -> Meta {
        let path = dir.join(FILE);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Meta::default(),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "lease metadata not read: client ids and host names return at each client's next transaction");
                return Meta::default();
            }
        };
        match Meta::decode(&bytes) {
            Ok((m, bad)) => {
                if bad > 0 {
                    tracing::warn!(path = %path.display(), skipped = bad, "lease metadata: entries that do not parse were skipped");
                }
                m
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "lease metadata not read: client ids and host names return at each client's next transaction");
                Meta::default()
            }
        }
    }
}

/// Writes `bytes` as the file in `dir`: temporary file, `fsync`, rename,
/// `fsync` of the directory (a crash leaves the old file or the new one).
pub fn save(dir: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!("{FILE}.tmp"));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, dir.join(FILE))?;
    std::fs::File::open(dir)?.sync_all()
}

/// Lower-case hex without separators.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    let h = oooi_dhcp_inventory::canonical_hex(s)?;
    (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).ok())
        .collect()
}

#[derive(Serialize, Deserialize)]
struct File {
    version: u32,
    leases: Vec<FileEntry>,
}

#[derive(Serialize, Deserialize)]
struct FileEntry {
    ip: Ipv4Addr,
    mac: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    client_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cltt: Option<u64>,
    answered_by: ServerRole,
    #[serde(default)]
    released: bool,
    #[serde(default)]
    probe_conflict: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac(n: u8) -> Mac {
        Mac([2, 0, 0, 0, 0, n])
    }

    fn ip(n: u8) -> Ipv4Addr {
        Ipv4Addr::new(192, 0, 2, n)
    }

    #[test]
    fn what_a_client_sent_is_kept_until_it_sends_something_else() {
        let mut m = Meta::default();
        let sent = Sent {
            client_id: Some(vec![1, 2, 0, 0, 0, 0, 1]),
            hostname: Some("worker-a".into()),
        };
        m.transacted(ip(10), mac(1), &sent, ServerRole::Primary, 100);
        // A renewal without option 12 keeps the name.
        let renew = Sent {
            client_id: sent.client_id.clone(),
            hostname: None,
        };
        m.transacted(ip(10), mac(1), &renew, ServerRole::Primary, 200);
        let e = m.get(ip(10), mac(1)).unwrap();
        assert_eq!(e.hostname.as_deref(), Some("worker-a"));
        assert_eq!(e.cltt, Some(200));
        // Another client on the same address starts afresh.
        m.transacted(ip(10), mac(2), &Sent::default(), ServerRole::Primary, 300);
        assert!(m.get(ip(10), mac(1)).is_none());
        assert_eq!(m.get(ip(10), mac(2)).unwrap().hostname, None);
    }

    #[test]
    fn the_file_round_trips_and_skips_bad_entries() {
        let mut m = Meta::default();
        m.transacted(
            ip(10),
            mac(1),
            &Sent {
                client_id: Some(vec![0xff, 0x01]),
                hostname: Some("a".into()),
            },
            ServerRole::Secondary,
            5,
        );
        m.released(ip(11), mac(2), ServerRole::Primary, 6);
        m.probe_conflict(ip(12), mac(3), ServerRole::Single);
        let bytes = m.take_changes().unwrap();
        assert!(m.take_changes().is_none(), "nothing changed since");
        let (back, bad) = Meta::decode(&bytes).unwrap();
        assert_eq!(bad, 0);
        assert_eq!(back.by_ip, m.by_ip);

        let text = r#"{"version":1,"leases":[
            {"ip":"192.0.2.10","mac":"not a mac","answered_by":"single"},
            {"ip":"192.0.2.11","mac":"02:00:00:00:00:01","client_id":"zz","answered_by":"single"},
            {"ip":"192.0.2.12","mac":"02:00:00:00:00:01","answered_by":"single","future":1}]}"#;
        let (m, bad) = Meta::decode(text.as_bytes()).unwrap();
        assert_eq!((m.len(), bad), (1, 2));
        assert!(Meta::decode(br#"{"version":2,"leases":[]}"#).is_err());
        assert!(Meta::decode(b"garbage").is_err());
    }

    #[test]
    fn save_then_load_gives_the_same_entries_and_a_bad_file_gives_none() {
        let d = tempfile::tempdir().unwrap();
        let mut m = Meta::default();
        m.transacted(ip(10), mac(1), &Sent::default(), ServerRole::Single, 7);
        save(d.path(), &m.encode()).unwrap();
        assert_eq!(Meta::load(d.path()).by_ip, m.by_ip);
        std::fs::write(d.path().join(FILE), b"{").unwrap();
        assert!(Meta::load(d.path()).is_empty());
        assert!(Meta::load(&d.path().join("missing")).is_empty());
    }

    #[test]
    fn retain_drops_addresses_no_longer_bound() {
        let mut m = Meta::default();
        m.transacted(ip(10), mac(1), &Sent::default(), ServerRole::Single, 7);
        m.transacted(ip(11), mac(2), &Sent::default(), ServerRole::Single, 7);
        let _ = m.take_changes();
        m.retain(|a| a == ip(10));
        assert_eq!(m.len(), 1);
        assert!(m.take_changes().is_some());
    }
}
