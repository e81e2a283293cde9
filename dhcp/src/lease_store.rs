//! Durable lease store: an append-only log.
//!
//! Why a log and not an embedded database: the data is tiny (one record per
//! lease change), the only query is "load everything at start", and the one
//! guarantee that matters is that a lease acknowledged to a client is on
//! disk. An append plus `fsync` per committed lease gives exactly that with no
//! dependency, and the failure mode of `kill -9` or power loss is simple: at
//! most the last, unacknowledged records are torn.
//!
//! Record layout (fixed size, [`RECORD_LEN`] bytes): `len: u32 LE (19) |
//! crc32(payload): u32 LE | payload`, the payload being `op: u8 | ip: [u8;4]
//! | mac: [u8;6] | expires_unix: u64 LE`. Every record carries its own
//! checksum and starts at a multiple of [`RECORD_LEN`], so the reader judges
//! each record on its own: a damaged record in the middle of the log (a
//! flipped bit on the disk) is skipped and every good record after it is
//! kept. Logs written before the reader learnt to skip have the same layout
//! and load unchanged.
//!
//! The file is extended with zeros 1 MiB at a time (size made durable
//! then), and records overwrite those zeros: syncing a record is then a
//! data-only `fdatasync`, with no journal commit for a size change.
//!
//! On open ([`LeaseStore::open`]):
//! - the **tail** after the last good record is either preallocated zeros
//!   or a record torn by a crash (the only damage a crash can do, and never
//!   acknowledged: no sync covering it had finished). It is truncated and
//!   its length reported in [`Recovery::truncated_bytes`];
//! - a **damaged record before the last good one** cannot come from a crash
//!   (later records were written after it). It is skipped and listed in
//!   [`Recovery::dropped`] with what it seemed to say; the file as found is
//!   kept aside (`leases.log.damaged-<unix time>`) and the log is rewritten
//!   from the good records, so the next start is clean. The server logs
//!   each dropped record and counts them in a metric.
//!
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
/// Bytes of one record: length, checksum, payload.
pub const RECORD_LEN: usize = 8 + PAYLOAD_LEN;
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

/// A damaged record found before the end of the log and skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DroppedRecord {
    /// Byte offset of the record in the log as found.
    pub offset: u64,
    /// What the record's bytes say, unverified (its checksum failed, so any
    /// field may be the damaged one); None when they do not even decode.
    pub unverified: Option<(u8, StoredLease)>,
}

/// What recovery found when opening the log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Good records replayed.
    pub records: usize,
    /// Bytes cut from a torn tail (0 when the log was clean).
    pub truncated_bytes: u64,
    /// Damaged records before the last good one, skipped.
    pub dropped: Vec<DroppedRecord>,
    /// Where the log as found was kept when records were dropped.
    pub set_aside: Option<PathBuf>,
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

/// What a replay of a log's bytes found.
#[derive(Debug, Default)]
struct Replay {
    leases: BTreeMap<Ipv4Addr, StoredLease>,
    /// Good records.
    records: usize,
    /// End of the last good record: everything after it is the tail.
    valid: usize,
    /// Damaged records before `valid`.
    dropped: Vec<DroppedRecord>,
}

/// A record's contents when its length and checksum hold.
fn check(rec: &[u8]) -> Option<(u8, StoredLease)> {
    let len = u32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]) as usize;
    let crc = u32::from_le_bytes([rec[4], rec[5], rec[6], rec[7]]);
    let p = &rec[8..];
    if len != PAYLOAD_LEN || crc32fast::hash(p) != crc {
        return None;
    }
    decode(p).filter(|(op, _)| matches!(*op, OP_COMMIT | OP_RELEASE))
}

/// Replays `buf`, judging each [`RECORD_LEN`] slot on its own.
fn replay(buf: &[u8]) -> Replay {
    let mut r = Replay::default();
    let mut bad: Vec<DroppedRecord> = Vec::new();
    for (i, rec) in buf.chunks_exact(RECORD_LEN).enumerate() {
        let offset = i * RECORD_LEN;
        let Some((op, l)) = check(rec) else {
            bad.push(DroppedRecord {
                offset: offset as u64,
                unverified: (rec.iter().any(|b| *b != 0))
                    .then(|| decode(&rec[8..]))
                    .flatten(),
            });
            continue;
        };
        // A good record after damaged ones: those were not a torn tail.
        r.dropped.append(&mut bad);
        match op {
            OP_COMMIT => {
                r.leases.insert(l.ip, l);
            }
            _ => {
                r.leases.remove(&l.ip);
            }
        }
        r.records += 1;
        r.valid = offset + RECORD_LEN;
    }
    // After the last good record: a full-length record whose checksum
    // fails is damage (a torn write leaves a prefix of its record followed
    // by the zeros it did not overwrite), so it and every bad record
    // before it are dropped, not truncated as a torn tail.
    if let Some(last_full) = bad
        .iter()
        .rposition(|d| full_length(buf, d.offset as usize))
    {
        let end = bad[last_full].offset as usize + RECORD_LEN;
        r.dropped.extend(bad.drain(..=last_full));
        r.valid = end;
    }
    r
}

/// Whether the record slot at `offset` was written whole: its length field
/// says a record, and bytes reach into the expiry's fourth byte (the last
/// non-zero byte of any expiry before 2106). A record torn by a crash
/// stops earlier, or its missing bytes were zeros anyway and its checksum
/// holds.
fn full_length(buf: &[u8], offset: usize) -> bool {
    let Some(rec) = buf.get(offset..offset + RECORD_LEN) else {
        return false;
    };
    rec[..4] == (PAYLOAD_LEN as u32).to_le_bytes() && rec[22..].iter().any(|b| *b != 0)
}

/// What the reader makes of a log's bytes, without touching any file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inspection {
    /// The live leases the good records leave.
    pub leases: Vec<StoredLease>,
    /// Good records.
    pub records: usize,
    /// Length of the log up to the last good record (the rest is the tail).
    pub valid: usize,
    /// Damaged records before the last good one.
    pub dropped: Vec<DroppedRecord>,
}

/// Reads a log's bytes as [`LeaseStore::open`] does.
pub fn inspect(buf: &[u8]) -> Inspection {
    let r = replay(buf);
    Inspection {
        leases: r.leases.into_values().collect(),
        records: r.records,
        valid: r.valid,
        dropped: r.dropped,
    }
}

/// Encodes leases as commit records (the pair API's snapshot body).
/// One record in the log layout: `commit` true for a commit, else a
/// release.
pub fn encode_record(commit: bool, l: &StoredLease) -> Vec<u8> {
    encode(if commit { OP_COMMIT } else { OP_RELEASE }, l)
}

/// Commit records of `leases`, in the log layout.
pub fn encode_leases<'a>(leases: impl IntoIterator<Item = &'a StoredLease>) -> Vec<u8> {
    let mut out = Vec::new();
    for l in leases {
        out.extend_from_slice(&encode(OP_COMMIT, l));
    }
    out
}

/// Encodes the releases of bindings as release records (what a server of a
/// pair sends when its client releases: the binding it ends).
pub fn encode_releases<'a>(leases: impl IntoIterator<Item = &'a StoredLease>) -> Vec<u8> {
    let mut out = Vec::new();
    for l in leases {
        out.extend_from_slice(&encode(OP_RELEASE, l));
    }
    out
}

/// Whether a decoded record is a commit (else a release).
pub fn is_commit(op: u8) -> bool {
    op == OP_COMMIT
}

/// Decodes records in the log layout (the pair API's bodies): every one
/// must be whole and pass its checksum, or None.
pub fn decode_records(buf: &[u8]) -> Option<Vec<(u8, StoredLease)>> {
    if !buf.len().is_multiple_of(RECORD_LEN) {
        return None;
    }
    buf.chunks_exact(RECORD_LEN).map(check).collect()
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
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
        let Replay {
            leases,
            records,
            valid,
            dropped,
        } = replay(&buf);
        // Zeros after the records are preallocated room, not damage: only
        // the bytes up to the last non-zero one were a torn tail.
        let truncated_bytes = buf[valid..]
            .iter()
            .rposition(|b| *b != 0)
            .map_or(0, |i| i as u64 + 1);
        let mut set_aside = None;
        let mut end = valid as u64;
        let mut alloc = buf.len() as u64;
        if !dropped.is_empty() {
            // Keep the file as found, then write the good records anew: the
            // damaged ones are gone from the log, not skipped at every start.
            let aside = dir.join(format!("{LOG_NAME}.damaged-{}", unix_now()));
            std::fs::write(&aside, &buf)?;
            File::open(&aside)?.sync_all()?;
            let tmp = dir.join(format!("{LOG_NAME}.tmp"));
            {
                let mut f = File::create(&tmp)?;
                for l in leases.values() {
                    f.write_all(&encode(OP_COMMIT, l))?;
                }
                f.sync_all()?;
            }
            std::fs::rename(&tmp, &path)?;
            file = OpenOptions::new().read(true).write(true).open(&path)?;
            end = file.metadata()?.len();
            alloc = end;
            set_aside = Some(aside);
        } else if truncated_bytes > 0 {
            file.set_len(valid as u64)?;
            file.sync_all()?;
            alloc = valid as u64;
        }
        sync_dir(dir)?;
        // A rewritten log holds one record per live lease.
        let log_records = if set_aside.is_some() {
            leases.len()
        } else {
            records
        };
        Ok((
            LeaseStore {
                dir: dir.to_path_buf(),
                file,
                end,
                alloc,
                leases,
                records: log_records,
                unsynced: false,
                buf: Vec::new(),
                since: None,
            },
            Recovery {
                records,
                truncated_bytes,
                dropped,
                set_aside,
            },
        ))
    }

    /// Reads the leases in `dir` without modifying anything (for the
    /// `leases` command, which may run beside a live server).
    pub fn read_only(dir: &Path) -> std::io::Result<Vec<StoredLease>> {
        let buf = std::fs::read(dir.join(LOG_NAME))?;
        Ok(inspect(&buf).leases)
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

    /// The records appended since the last [`LeaseStore::write_out`], in
    /// the log layout (what the pair sends to the other server).
    pub fn unwritten(&self) -> &[u8] {
        &self.buf
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
    fn a_flipped_bit_mid_log_drops_that_record_only_and_keeps_the_file_aside() {
        let d = tempfile::tempdir().unwrap();
        {
            let (mut s, _) = LeaseStore::open(d.path()).unwrap();
            for n in 10..16 {
                s.commit(lease(n)).unwrap();
            }
        }
        let path = d.path().join(LOG_NAME);
        let mut b = std::fs::read(&path).unwrap();
        let found = b.clone();
        b[RECORD_LEN * 2 + 14] ^= 0x04; // one bit of the third record's MAC
        std::fs::write(&path, &b).unwrap();
        let (mut s, r) = LeaseStore::open(d.path()).unwrap();
        // Every good record, also those after the damaged one.
        assert_eq!(r.records, 5);
        assert_eq!(r.truncated_bytes, 0);
        let got: Vec<u8> = s.leases().keys().map(|ip| ip.octets()[3]).collect();
        assert_eq!(got, vec![10, 11, 13, 14, 15]);
        // What was dropped, as far as the bytes tell.
        assert_eq!(r.dropped.len(), 1);
        assert_eq!(r.dropped[0].offset, (RECORD_LEN * 2) as u64);
        let (op, seen) = r.dropped[0].unverified.unwrap();
        assert_eq!(op, OP_COMMIT);
        assert_eq!(seen.ip, lease(12).ip);
        // The file as found is kept aside, byte for byte.
        let aside = r.set_aside.clone().unwrap();
        assert_eq!(
            std::fs::read(&aside).unwrap()[..found.len()],
            b[..found.len()]
        );
        assert_ne!(b[..found.len()], found[..]);
        // The log was rewritten: the next start is clean, appends land well.
        s.commit(lease(20)).unwrap();
        drop(s);
        let (s, r) = LeaseStore::open(d.path()).unwrap();
        assert_eq!(r.dropped, Vec::new());
        assert_eq!(r.truncated_bytes, 0);
        assert_eq!(s.leases().len(), 6);
    }

    #[test]
    fn damage_in_the_length_or_checksum_field_is_skipped_too() {
        let d = tempfile::tempdir().unwrap();
        {
            let (mut s, _) = LeaseStore::open(d.path()).unwrap();
            for n in 10..14 {
                s.commit(lease(n)).unwrap();
            }
        }
        let path = d.path().join(LOG_NAME);
        let mut b = std::fs::read(&path).unwrap();
        b[RECORD_LEN] ^= 0x80; // the second record's length
        b[RECORD_LEN * 2 + 5] ^= 0x01; // the third record's checksum
        std::fs::write(&path, &b).unwrap();
        let (s, r) = LeaseStore::open(d.path()).unwrap();
        let got: Vec<u8> = s.leases().keys().map(|ip| ip.octets()[3]).collect();
        assert_eq!(got, vec![10, 13]);
        let offsets: Vec<u64> = r.dropped.iter().map(|x| x.offset).collect();
        assert_eq!(offsets, vec![RECORD_LEN as u64, 2 * RECORD_LEN as u64]);
    }

    #[test]
    fn a_flipped_byte_in_the_newest_record_is_damage_not_a_torn_write() {
        let d = tempfile::tempdir().unwrap();
        {
            let (mut s, _) = LeaseStore::open(d.path()).unwrap();
            for n in 10..14 {
                // Expiries of today's clock (four bytes of the u64).
                s.commit(StoredLease {
                    expires_unix: 1_800_000_000 + u64::from(n),
                    ..lease(n)
                })
                .unwrap();
            }
        }
        let path = d.path().join(LOG_NAME);
        let mut b = std::fs::read(&path).unwrap();
        b[RECORD_LEN * 3 + 17] ^= 0xff; // the newest record (its MAC), whole length
        std::fs::write(&path, &b).unwrap();
        let (s, r) = LeaseStore::open(d.path()).unwrap();
        assert_eq!(r.records, 3);
        assert_eq!(r.truncated_bytes, 0, "not taken for a torn write");
        let offsets: Vec<u64> = r.dropped.iter().map(|x| x.offset).collect();
        assert_eq!(offsets, vec![3 * RECORD_LEN as u64]);
        // What it seemed to say is reported (the address to hold back).
        let (op, l) = r.dropped[0].unverified.unwrap();
        assert_eq!((op, l.ip), (OP_COMMIT, lease(13).ip));
        assert!(r.set_aside.is_some(), "the file as found is kept aside");
        assert_eq!(s.leases().len(), 3);
    }

    #[test]
    fn a_record_cut_short_at_the_end_is_a_torn_tail_and_truncated() {
        let d = tempfile::tempdir().unwrap();
        {
            let (mut s, _) = LeaseStore::open(d.path()).unwrap();
            for n in 10..14 {
                s.commit(lease(n)).unwrap();
            }
        }
        let path = d.path().join(LOG_NAME);
        let mut b = std::fs::read(&path).unwrap();
        // A crash cut the last record's write: its bytes from the expiry
        // on are the zeros it never overwrote.
        b[RECORD_LEN * 3 + 19..RECORD_LEN * 4].fill(0);
        std::fs::write(&path, &b).unwrap();
        let (s, r) = LeaseStore::open(d.path()).unwrap();
        assert_eq!(r.records, 3);
        assert!(r.dropped.is_empty());
        assert!(r.set_aside.is_none());
        // Up to the last non-zero byte (the MAC's last byte).
        assert_eq!(r.truncated_bytes, 19);
        assert_eq!(s.leases().len(), 3);
    }

    /// A log written by the earlier reader's writer (the same layout): three
    /// records, commit 192.0.2.10, commit 192.0.2.11, release 192.0.2.10.
    const EARLIER_LOG: &str = "130000003ac0450101c000020a02000000000af203000000000000\
                               130000000f0f6f6301c000020b02000000000bf30300000000000013000000934613a2\
                               02c000020a02000000000af203000000000000";

    #[test]
    fn logs_written_before_per_record_skipping_load_unchanged() {
        let d = tempfile::tempdir().unwrap();
        let bytes = hex::decode(EARLIER_LOG.replace(' ', "")).unwrap();
        std::fs::write(d.path().join(LOG_NAME), &bytes).unwrap();
        let (s, r) = LeaseStore::open(d.path()).unwrap();
        assert_eq!(
            r,
            Recovery {
                records: 3,
                ..Recovery::default()
            }
        );
        assert_eq!(
            s.leases().values().copied().collect::<Vec<_>>(),
            vec![lease(11)]
        );
        // And what this writer writes is the same bytes.
        let mut want = encode(OP_COMMIT, &lease(10));
        want.extend(encode(OP_COMMIT, &lease(11)));
        want.extend(encode(OP_RELEASE, &lease(10)));
        assert_eq!(want, bytes);
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

    mod damaged {
        use super::*;
        use proptest::prelude::*;

        fn log_of(ops: &[(bool, u8, u64)]) -> (Vec<u8>, Vec<Vec<u8>>) {
            let recs: Vec<Vec<u8>> = ops
                .iter()
                .map(|&(commit, n, exp)| {
                    let mut l = lease(n);
                    l.expires_unix = exp;
                    encode(if commit { OP_COMMIT } else { OP_RELEASE }, &l)
                })
                .collect();
            (recs.concat(), recs)
        }

        proptest! {
            // OOOI_LEASE_LOG_CASES sets a longer run (the short one runs in the test command).
            #![proptest_config(ProptestConfig {
                cases: std::env::var("OOOI_LEASE_LOG_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000),
                ..ProptestConfig::default()
            })]

            /// Damage to one record that is not the last: the replay equals
            /// the replay of the log without that record, and only that
            /// record is reported.
            #[test]
            fn damage_to_one_record_loses_exactly_that_record(
                ops in proptest::collection::vec((any::<bool>(), 1u8..12, 0u64..5000), 2..60),
                victim in any::<prop::sample::Index>(),
                flips in proptest::collection::btree_map(0usize..RECORD_LEN, 1u8..=255, 1..4),
            ) {
                let (mut buf, recs) = log_of(&ops);
                let v = victim.index(recs.len() - 1);
                for (at, mask) in flips {
                    buf[v * RECORD_LEN + at] ^= mask;
                }
                let mut without = recs.clone();
                without.remove(v);
                let want = replay(&without.concat());
                let got = replay(&buf);
                prop_assert_eq!(&got.leases, &want.leases);
                prop_assert_eq!(got.records, recs.len() - 1);
                prop_assert_eq!(got.valid, buf.len());
                let offsets: Vec<u64> = got.dropped.iter().map(|d| d.offset).collect();
                prop_assert_eq!(offsets, vec![(v * RECORD_LEN) as u64]);
            }

            /// Any bytes at all: the reader never panics, and every lease it
            /// returns came from a record whose checksum held.
            #[test]
            fn arbitrary_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..2000)) {
                let r = replay(&buf);
                prop_assert!(r.valid <= buf.len());
                prop_assert!(r.records <= buf.len() / RECORD_LEN);
                for d in &r.dropped {
                    prop_assert!((d.offset as usize) < r.valid);
                }
            }
        }
    }
}
