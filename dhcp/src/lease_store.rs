//! Durable lease store: an append-only log.
//!
//! Why a log and not an embedded database: the data is tiny (one record per
//! lease change), the only query is "load everything at start", and the one
//! guarantee that matters is that a lease acknowledged to a client is on
//! disk. An append plus `fsync` per committed lease gives exactly that with no
//! dependency, and the failure mode of `kill -9` or power loss is simple: at
//! most the last, unacknowledged record is torn.
//!
//! Record layout: `len: u32 LE | crc32(payload): u32 LE | payload`. The
//! payload is `op: u8 | ip: [u8;4] | mac: [u8;6] | expires_unix: u64 LE`.
//! The file is extended with zeros 1 MiB at a time (size made durable
//! then), and records overwrite those zeros: syncing a record is then a
//! data-only `fdatasync`, with no journal commit for a size change.
//! On open, records are replayed until the first short, zero-length or
//! CRC-failing record; zeros after that are preallocated room, anything
//! else is a torn or corrupt tail: the file is truncated there and the cut
//! (up to its last non-zero byte) is reported in [`Recovery`] (the server
//! logs it and counts it in a metric).
//! [`LeaseStore::compact`] rewrites the live set into a temporary file,
//! fsyncs it and renames it over the log, so a crash during compaction leaves
//! either the old or the new log, never a mix.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use crate::config::Mac;

const LOG_NAME: &str = "leases.log";
const PAYLOAD_LEN: usize = 19;
const OP_COMMIT: u8 = 1;
const OP_RELEASE: u8 = 2;
/// Zeros added to the log at a time, ahead of the records (1 MiB: ~38,000
/// records).
const PREALLOC: u64 = 1 << 20;

/// The MAC recorded for an address a client DECLINEd: the quarantine then
/// survives a restart like any lease.
pub const DECLINED_MAC: Mac = Mac([0; 6]);

/// One persisted lease. A lease whose MAC is [`DECLINED_MAC`] records a
/// declined (quarantined) address until `expires_unix`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredLease {
    /// Leased address.
    pub ip: Ipv4Addr,
    /// Client hardware address.
    pub mac: Mac,
    /// Expiry, seconds since the Unix epoch.
    pub expires_unix: u64,
}

/// What recovery found when opening the log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Records replayed.
    pub records: usize,
    /// Bytes cut from a corrupt or torn tail (0 when the log was clean).
    pub truncated_bytes: u64,
}

/// The append-only lease log under a data directory.
#[derive(Debug)]
pub struct LeaseStore {
    dir: PathBuf,
    file: File,
    /// Length of the records in the file (where the next one goes).
    end: u64,
    /// Size of the file: records, then zeros preallocated for the next ones.
    alloc: u64,
    leases: BTreeMap<Ipv4Addr, StoredLease>,
    records: usize,
    unsynced: bool,
    /// Encoded records not yet handed to the kernel (one `write` per batch).
    buf: Vec<u8>,
    /// While a background compaction runs: the records appended since its
    /// snapshot (encoded) and their count.
    since: Option<(Vec<u8>, usize)>,
}

fn encode(op: u8, l: &StoredLease) -> Vec<u8> {
    let mut p = Vec::with_capacity(PAYLOAD_LEN);
    p.push(op);
    p.extend_from_slice(&l.ip.octets());
    p.extend_from_slice(&l.mac.0);
    p.extend_from_slice(&l.expires_unix.to_le_bytes());
    let mut rec = Vec::with_capacity(8 + PAYLOAD_LEN);
    rec.extend_from_slice(&(p.len() as u32).to_le_bytes());
    rec.extend_from_slice(&crc32fast::hash(&p).to_le_bytes());
    rec.extend_from_slice(&p);
    rec
}

fn decode(p: &[u8]) -> Option<(u8, StoredLease)> {
    if p.len() != PAYLOAD_LEN {
        return None;
    }
    let op = p[0];
    let ip = Ipv4Addr::new(p[1], p[2], p[3], p[4]);
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&p[5..11]);
    let mut exp = [0u8; 8];
    exp.copy_from_slice(&p[11..19]);
    Some((
        op,
        StoredLease {
            ip,
            mac: Mac(mac),
            expires_unix: u64::from_le_bytes(exp),
        },
    ))
}

/// Replays `buf`; returns the live set, the record count and the length of
/// the valid prefix.
fn replay(buf: &[u8]) -> (BTreeMap<Ipv4Addr, StoredLease>, usize, usize) {
    let mut leases = BTreeMap::new();
    let mut off = 0usize;
    let mut records = 0usize;
    while buf.len() - off >= 8 {
        let len = u32::from_le_bytes([buf[off], buf[off + 1], buf[off + 2], buf[off + 3]]) as usize;
        let crc = u32::from_le_bytes([buf[off + 4], buf[off + 5], buf[off + 6], buf[off + 7]]);
        if len != PAYLOAD_LEN || buf.len() - off - 8 < len {
            break;
        }
        let p = &buf[off + 8..off + 8 + len];
        if crc32fast::hash(p) != crc {
            break;
        }
        let Some((op, l)) = decode(p) else { break };
        match op {
            OP_COMMIT => {
                leases.insert(l.ip, l);
            }
            OP_RELEASE => {
                leases.remove(&l.ip);
            }
            _ => break,
        }
        records += 1;
        off += 8 + len;
    }
    (leases, records, off)
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

impl LeaseStore {
    /// Opens (creating if needed) the log in `dir`, replays it and truncates
    /// a corrupt tail.
    pub fn open(dir: &Path) -> std::io::Result<(LeaseStore, Recovery)> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(LOG_NAME);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        let mut buf = Vec::new();
        file.read_to_end(&mut buf)?;
        let (leases, records, valid) = replay(&buf);
        // Zeros after the records are preallocated room, not damage: only
        // the bytes up to the last non-zero one were a torn or corrupt tail.
        let truncated_bytes = buf[valid..]
            .iter()
            .rposition(|b| *b != 0)
            .map_or(0, |i| i as u64 + 1);
        let mut alloc = buf.len() as u64;
        if truncated_bytes > 0 {
            file.set_len(valid as u64)?;
            file.sync_all()?;
            alloc = valid as u64;
        }
        sync_dir(dir)?;
        Ok((
            LeaseStore {
                dir: dir.to_path_buf(),
                file,
                end: valid as u64,
                alloc,
                leases,
                records,
                unsynced: false,
                buf: Vec::new(),
                since: None,
            },
            Recovery {
                records,
                truncated_bytes,
            },
        ))
    }

    /// Reads the leases in `dir` without modifying anything (for the
    /// `leases` command, which may run beside a live server).
    pub fn read_only(dir: &Path) -> std::io::Result<Vec<StoredLease>> {
        let buf = std::fs::read(dir.join(LOG_NAME))?;
        Ok(replay(&buf).0.into_values().collect())
    }

    fn append(&mut self, rec: &[u8]) -> std::io::Result<()> {
        self.buf.extend_from_slice(rec);
        if let Some((since, n)) = &mut self.since {
            since.extend_from_slice(rec);
            *n += 1;
        }
        self.records += 1;
        self.unsynced = true;
        Ok(())
    }

    /// Hands the appended records to the kernel in one `write`. From then
    /// on they survive a `kill -9` of the process (the page cache has them),
    /// not a node crash: that takes a sync.
    pub fn write_out(&mut self) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        if self.buf.is_empty() {
            return Ok(());
        }
        let need = self.end + self.buf.len() as u64;
        if need > self.alloc {
            // Extend the file with zeros and make the new size durable now,
            // once per PREALLOC bytes: records then overwrite allocated
            // blocks, and an fdatasync of them flushes only data, without a
            // journal commit (which on a busy ext4 waits for other files'
            // data: 2-8 ms instead of 0.2-0.6 ms measured here).
            let new_alloc = need.max(self.alloc + PREALLOC);
            let zeros = vec![0u8; (new_alloc - self.alloc) as usize];
            self.file.write_all_at(&zeros, self.alloc)?;
            self.file.sync_all()?;
            self.alloc = new_alloc;
        }
        self.file.write_all_at(&self.buf, self.end)?;
        self.end = need;
        self.buf.clear();
        Ok(())
    }

    /// Appends a lease record without waiting for the disk. The record is
    /// written by the next [`LeaseStore::write_out`] and durable only after
    /// the next sync ([`LeaseStore::sync`], or `fdatasync` on a
    /// [`LeaseStore::sync_handle`] started after the write); the server
    /// does that once per batch of messages (group commit) before sending
    /// any ACK.
    pub fn append_commit(&mut self, lease: StoredLease) -> std::io::Result<()> {
        self.append(&encode(OP_COMMIT, &lease))?;
        self.leases.insert(lease.ip, lease);
        Ok(())
    }

    /// Appends the removal of the lease on `ip` (durable after the next sync).
    pub fn append_release(&mut self, ip: Ipv4Addr) -> std::io::Result<()> {
        if let Some(l) = self.leases.get(&ip).copied() {
            self.append(&encode(OP_RELEASE, &l))?;
            self.leases.remove(&ip);
        }
        Ok(())
    }

    /// Makes every appended record durable (`fdatasync`). Returns whether
    /// there was anything to sync.
    pub fn sync(&mut self) -> std::io::Result<bool> {
        self.write_out()?;
        if !self.unsynced {
            return Ok(false);
        }
        self.file.sync_data()?;
        self.unsynced = false;
        Ok(true)
    }

    /// A second handle on the log file, for syncing it from another thread
    /// (`fdatasync` on it makes every record appended before the call
    /// durable). A compaction replaces the file: take a new handle after it.
    pub fn sync_handle(&self) -> std::io::Result<File> {
        self.file.try_clone()
    }

    /// Durably records a lease (fsync before returning).
    pub fn commit(&mut self, lease: StoredLease) -> std::io::Result<()> {
        self.append_commit(lease)?;
        self.sync().map(|_| ())
    }

    /// Durably removes the lease on `ip`.
    pub fn release(&mut self, ip: Ipv4Addr) -> std::io::Result<()> {
        self.append_release(ip)?;
        self.sync().map(|_| ())
    }

    /// The live leases, by address.
    pub fn leases(&self) -> &BTreeMap<Ipv4Addr, StoredLease> {
        &self.leases
    }

    /// Records in the log since the last compaction.
    pub fn record_count(&self) -> usize {
        self.records
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Starts a compaction that runs beside appends: returns the live set
    /// now (write it with [`LeaseStore::write_snapshot`], without holding
    /// the store) and from now on also keeps every appended record for
    /// [`LeaseStore::finish_compaction`].
    pub fn begin_compaction(&mut self) -> Vec<StoredLease> {
        self.since = Some((Vec::new(), 0));
        self.leases.values().copied().collect()
    }

    /// Writes `leases` to the temporary compaction file in `dir` and syncs
    /// it. Touches only that file, so appends to the log go on meanwhile.
    pub fn write_snapshot(dir: &Path, leases: &[StoredLease]) -> std::io::Result<File> {
        let mut f = File::create(dir.join(format!("{LOG_NAME}.tmp")))?;
        let mut buf = Vec::with_capacity(leases.len() * (8 + PAYLOAD_LEN));
        for l in leases {
            buf.extend_from_slice(&encode(OP_COMMIT, l));
        }
        f.write_all(&buf)?;
        f.sync_all()?;
        Ok(f)
    }

    /// Ends a compaction: appends the records written since the snapshot
    /// to `tmp` (from [`LeaseStore::write_snapshot`] of `snapshot_len`
    /// leases), syncs it, renames it over the log and syncs the directory.
    /// A crash before the rename leaves the old log in force; after it, the
    /// new one, which holds everything appended so far (all of it durable).
    pub fn finish_compaction(&mut self, mut tmp: File, snapshot_len: usize) -> std::io::Result<()> {
        self.write_out()?;
        let (since, n) = self.since.take().unwrap_or_default();
        tmp.write_all(&since)?;
        tmp.sync_all()?;
        drop(tmp);
        std::fs::rename(
            self.dir.join(format!("{LOG_NAME}.tmp")),
            self.dir.join(LOG_NAME),
        )?;
        sync_dir(&self.dir)?;
        self.file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.dir.join(LOG_NAME))?;
        self.end = self.file.metadata()?.len();
        self.alloc = self.end;
        self.records = snapshot_len + n;
        self.unsynced = false;
        Ok(())
    }

    /// Whether a background compaction is running.
    pub fn compacting(&self) -> bool {
        self.since.is_some()
    }

    /// Rewrites the log to hold only the live leases (atomic rename).
    pub fn compact(&mut self) -> std::io::Result<()> {
        self.sync()?;
        let tmp = self.dir.join(format!("{LOG_NAME}.tmp"));
        {
            let mut f = File::create(&tmp)?;
            for l in self.leases.values() {
                f.write_all(&encode(OP_COMMIT, l))?;
            }
            f.sync_all()?;
        }
        std::fs::rename(&tmp, self.dir.join(LOG_NAME))?;
        sync_dir(&self.dir)?;
        self.file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.dir.join(LOG_NAME))?;
        self.end = self.file.metadata()?.len();
        self.alloc = self.end;
        self.records = self.leases.len();
        self.unsynced = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(n: u8) -> StoredLease {
        StoredLease {
            ip: Ipv4Addr::new(192, 0, 2, n),
            mac: Mac([2, 0, 0, 0, 0, n]),
            expires_unix: 1_000 + u64::from(n),
        }
    }

    /// `rounds` renewals of leases 10..20, each round's a second later:
    /// the log holds 10 × `rounds` records for 10 live leases.
    fn commit_rounds(s: &mut LeaseStore, rounds: u64) {
        for round in 0..rounds {
            for n in 10..20 {
                let mut l = lease(n);
                l.expires_unix += round;
                s.commit(l).unwrap();
            }
        }
    }

    #[test]
    fn committed_leases_survive_reopen() {
        let d = tempfile::tempdir().unwrap();
        {
            let (mut s, r) = LeaseStore::open(d.path()).unwrap();
            assert_eq!(r, Recovery::default());
            s.commit(lease(10)).unwrap();
            s.commit(lease(11)).unwrap();
            s.release(lease(10).ip).unwrap();
        }
        let (s, r) = LeaseStore::open(d.path()).unwrap();
        assert_eq!(r.records, 3);
        assert_eq!(r.truncated_bytes, 0);
        assert_eq!(
            s.leases().values().copied().collect::<Vec<_>>(),
            vec![lease(11)]
        );
    }

    #[test]
    fn crash_truncated_tail_is_cut_and_earlier_leases_kept() {
        let d = tempfile::tempdir().unwrap();
        {
            let (mut s, _) = LeaseStore::open(d.path()).unwrap();
            s.commit(lease(10)).unwrap();
            s.commit(lease(11)).unwrap();
        }
        let path = d.path().join(LOG_NAME);
        // The records are followed by preallocated zeros.
        assert!(std::fs::metadata(&path).unwrap().len() >= PREALLOC);
        // A torn write into the preallocated room: the last record's final
        // 8 bytes never arrived (zeros remain).
        let mut b = std::fs::read(&path).unwrap();
        b[27 * 2 - 8..27 * 2].fill(0);
        std::fs::write(&path, &b).unwrap();
        let (mut s, r) = LeaseStore::open(d.path()).unwrap();
        assert_eq!(r.records, 1);
        // Counted up to the torn record's last non-zero byte (the last
        // byte of its MAC); the zeros after it are preallocated room.
        assert_eq!(r.truncated_bytes, 27 - 8);
        assert_eq!(s.leases().len(), 1);
        // Appends after recovery land on a clean boundary.
        s.commit(lease(12)).unwrap();
        drop(s);
        let (s, r) = LeaseStore::open(d.path()).unwrap();
        assert_eq!(r.truncated_bytes, 0);
        assert_eq!(s.leases().len(), 2);
    }

    #[test]
    fn corrupt_crc_stops_replay_there() {
        let d = tempfile::tempdir().unwrap();
        {
            let (mut s, _) = LeaseStore::open(d.path()).unwrap();
            for n in 10..14 {
                s.commit(lease(n)).unwrap();
            }
        }
        let path = d.path().join(LOG_NAME);
        let mut b = std::fs::read(&path).unwrap();
        b[27 * 2 + 12] ^= 0xff; // flip a payload byte of the third record
        std::fs::write(&path, &b).unwrap();
        let (s, r) = LeaseStore::open(d.path()).unwrap();
        assert_eq!(r.records, 2);
        // The third record and the fourth up to its last non-zero byte
        // (expiry 1013 = f5 03 00…: 21 bytes into the record).
        assert_eq!(r.truncated_bytes, 27 + 21);
        assert_eq!(s.leases().len(), 2);
    }

    #[test]
    fn background_compaction_keeps_what_was_appended_meanwhile() {
        let d = tempfile::tempdir().unwrap();
        let (mut s, _) = LeaseStore::open(d.path()).unwrap();
        commit_rounds(&mut s, 3);
        let snap = s.begin_compaction();
        assert_eq!(snap.len(), 10);
        // Appends go on while the snapshot is written.
        s.append_commit(lease(30)).unwrap();
        s.append_release(lease(10).ip).unwrap();
        s.write_out().unwrap();
        let tmp = LeaseStore::write_snapshot(s.dir(), &snap).unwrap();
        s.append_commit(lease(31)).unwrap();
        s.sync().unwrap();
        // A crash here keeps the old log (the temporary file is ignored).
        let old = LeaseStore::read_only(d.path()).unwrap();
        assert_eq!(old.len(), 11);
        s.finish_compaction(tmp, snap.len()).unwrap();
        assert!(!s.compacting());
        assert_eq!(s.record_count(), 10 + 3);
        s.commit(lease(32)).unwrap();
        drop(s);
        let (s, r) = LeaseStore::open(d.path()).unwrap();
        assert_eq!(r.truncated_bytes, 0);
        assert_eq!(r.records, 14);
        let mut want: Vec<u8> = (11..20).chain([30, 31, 32]).collect();
        want.sort();
        let got: Vec<u8> = s.leases().keys().map(|ip| ip.octets()[3]).collect();
        assert_eq!(got, want);
        assert_eq!(
            s.leases()[&lease(11).ip].expires_unix,
            lease(11).expires_unix + 2
        );
    }

    #[test]
    fn compaction_keeps_only_live_leases() {
        let d = tempfile::tempdir().unwrap();
        let (mut s, _) = LeaseStore::open(d.path()).unwrap();
        commit_rounds(&mut s, 5);
        s.release(lease(10).ip).unwrap();
        s.compact().unwrap();
        assert_eq!(s.record_count(), 9);
        s.commit(lease(30)).unwrap();
        drop(s);
        let (s, r) = LeaseStore::open(d.path()).unwrap();
        assert_eq!(r.records, 10);
        assert_eq!(
            s.leases()[&lease(11).ip].expires_unix,
            lease(11).expires_unix + 4
        );
        assert_eq!(LeaseStore::read_only(d.path()).unwrap().len(), 10);
    }
}
