//! The addresses held back because the lease log lost their record (a
//! damaged record found at start), kept in a file beside the log so that
//! the hold-back outlives later restarts: a compaction drops the damaged
//! record, and without this file a second restart within the lease would
//! offer the address while its holder still uses it.
//!
//! File `held-back` in the data directory, one address a line:
//! `<ip> <mac> <until, Unix seconds>` (the MAC the damaged record seemed to
//! name, `00:00:00:00:00:00` when none). Rewritten whole (temporary file,
//! `fsync`, rename, `fsync` of the directory) at start, after the log's
//! recovery; entries whose time has passed are dropped then.

use std::io::Write;
use std::net::Ipv4Addr;
use std::path::Path;

use crate::config::Mac;

/// The file's name in the data directory.
pub const FILE: &str = "held-back";

/// One held-back address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// The address.
    pub ip: Ipv4Addr,
    /// The MAC the damaged record seemed to name (may have it back).
    pub suspected: Option<Mac>,
    /// Until when, Unix seconds (when its lease would have ended at the
    /// latest).
    pub until: u64,
}

/// Reads the file's text; a line that does not parse is skipped and
/// counted in the second value.
pub fn parse(text: &str) -> (Vec<Held>, usize) {
    let mut out = Vec::new();
    let mut bad = 0;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let mut f = line.split_whitespace();
        let held = (|| {
            let ip = f.next()?.parse().ok()?;
            let mac = Mac::parse(f.next()?)?;
            let until = f.next()?.parse().ok()?;
            f.next().is_none().then_some(Held {
                ip,
                suspected: (mac.0 != [0; 6]).then_some(mac),
                until,
            })
        })();
        match held {
            Some(h) => out.push(h),
            None => bad += 1,
        }
    }
    (out, bad)
}

/// The file's text for `held`.
pub fn render(held: &[Held]) -> String {
    held.iter()
        .map(|h| {
            format!(
                "{} {} {}\n",
                h.ip,
                h.suspected.unwrap_or(Mac([0; 6])),
                h.until
            )
        })
        .collect()
}

/// Merges what the file held with what this start found: one entry per
/// address (the later `until`), only those still running at `now`,
/// ordered by address.
pub fn merge(old: &[Held], found: &[Held], now: u64) -> Vec<Held> {
    let mut by_ip = std::collections::BTreeMap::new();
    for h in old.iter().chain(found).filter(|h| h.until > now) {
        by_ip
            .entry(h.ip)
            .and_modify(|e: &mut Held| {
                if h.until > e.until {
                    *e = *h;
                }
            })
            .or_insert(*h);
    }
    by_ip.into_values().collect()
}

/// Reads the file in `dir` (none: nothing held).
pub fn load(dir: &Path) -> std::io::Result<Vec<Held>> {
    match std::fs::read_to_string(dir.join(FILE)) {
        Ok(text) => {
            let (held, bad) = parse(&text);
            if bad > 0 {
                tracing::warn!(
                    bad_lines = bad,
                    file = %dir.join(FILE).display(),
                    "held-back addresses: lines that do not parse were skipped"
                );
            }
            Ok(held)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Writes `held` to the file in `dir`, durably (see the module docs).
pub fn save(dir: &Path, held: &[Held]) -> std::io::Result<()> {
    let path = dir.join(FILE);
    if held.is_empty() {
        return match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => std::fs::File::open(dir)?.sync_all(),
        };
    }
    let tmp = dir.join(format!("{FILE}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(render(held).as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(ip: u8, mac: Option<u8>, until: u64) -> Held {
        Held {
            ip: Ipv4Addr::new(192, 0, 2, ip),
            suspected: mac.map(|m| Mac([2, 0, 0, 0, 0, m])),
            until,
        }
    }

    #[test]
    fn the_file_round_trips_and_a_bad_line_is_skipped() {
        let h = vec![held(100, Some(1), 1000), held(101, None, 2000)];
        let text = render(&h);
        assert_eq!(parse(&text), (h.clone(), 0));
        let (back, bad) = parse(&format!("{text}garbage\n192.0.2.9 nomac 5\n\n"));
        assert_eq!((back, bad), (h, 2));
    }

    #[test]
    fn a_merge_keeps_the_later_end_per_address_and_drops_ended_ones() {
        let old = [held(100, Some(1), 1000), held(101, None, 50)];
        let found = [held(100, Some(1), 900), held(102, Some(3), 800)];
        assert_eq!(
            merge(&old, &found, 100),
            vec![held(100, Some(1), 1000), held(102, Some(3), 800)]
        );
    }

    #[test]
    fn saving_and_loading_survive_and_an_empty_list_removes_the_file() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(dir.path()).unwrap(), vec![]);
        let h = vec![held(100, Some(1), 1000)];
        save(dir.path(), &h).unwrap();
        assert_eq!(load(dir.path()).unwrap(), h);
        save(dir.path(), &[]).unwrap();
        assert!(!dir.path().join(FILE).exists());
    }
}
