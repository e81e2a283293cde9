//! Config-file reloading shared by the oooi servers.
//!
//! [`Reloader::start`] loads the file once and starts watching the directory
//! it lives in; [`Reloader::spawn`] then hands every later change, validated,
//! to a callback: [`Outcome::Accepted`] with the new config, or
//! [`Outcome::Rejected`] with the reason (the old config stays in force).
//!
//! What counts as a change:
//! - The directory is watched, not the file: kubelet updates a ConfigMap
//!   mount by renaming a new `..data` symlink into place, which a watch on
//!   the file misses (it sees a remove and then goes silent).
//! - Only events that can change the content are acted on: writes, the end
//!   of a write (close after writing), creations and renames, of the file or
//!   of `..data`. Opens, reads and closes without writing are ignored. Our
//!   own read of the file produces exactly those, so reacting to them made a
//!   watcher re-trigger itself forever, burning a core.
//! - Changes are debounced: the file is read once the directory has been
//!   quiet for [`Settings::debounce`], and not while a writer that started
//!   writing in place has not closed the file yet (up to
//!   [`Settings::max_write`]). A file caught half-written is therefore not
//!   reported as a rejected config.
//! - A file whose bytes equal the last ones read is not loaded again.

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use notify::event::{AccessKind, AccessMode, EventKind, ModifyKind};
use notify::{RecommendedWatcher, RecursiveMode, Watcher};

/// The file name kubelet swaps to update a ConfigMap mount.
pub const CONFIGMAP_DATA: &str = "..data";

/// Timing of reloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Quiet time after the last change before the file is read.
    pub debounce: Duration,
    /// Longest wait for a writer that is writing the file in place to close
    /// it; after that the file is read anyway.
    pub max_write: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            debounce: Duration::from_millis(200),
            max_write: Duration::from_secs(5),
        }
    }
}

/// What became of one change of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome<T> {
    /// The new file is valid: put it in force.
    Accepted(T),
    /// The new file is invalid (the reason, naming the field): keep the old
    /// config.
    Rejected(String),
}

/// Why watching could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The directory of the file cannot be watched.
    #[error("cannot watch {dir}: {source}")]
    Watch {
        /// The directory.
        dir: String,
        /// notify's error.
        source: notify::Error,
    },
    /// The file cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a valid config.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// Why, as the loader said it.
        message: String,
    },
}

type Load<T> = Box<dyn Fn(&str) -> Result<T, String> + Send>;

/// A loaded config file being watched; see [`Reloader::spawn`].
pub struct Reloader<T> {
    file: PathBuf,
    name: std::ffi::OsString,
    settings: Settings,
    load: Load<T>,
    watcher: RecommendedWatcher,
    events: Receiver<notify::Event>,
    last: Vec<u8>,
}

/// Reloads running on their own thread. Dropping it stops them.
pub struct Watch {
    watcher: Option<RecommendedWatcher>,
    thread: Option<JoinHandle<()>>,
    reads: Arc<AtomicU64>,
}

impl Watch {
    /// How many times the file was read after a change. Tests use it to
    /// prove that reads of the file do not feed back into more reads.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // The watcher owns the sending side of the event channel: dropping it
        // ends the reload thread.
        self.watcher.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What an event may mean for the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// Not about the file's content.
    None,
    /// Bytes written in place; more may follow until the writer closes.
    Writing,
    /// A write ended, or the file (or `..data`) was created or renamed.
    Done,
}

fn classify(kind: &EventKind) -> Change {
    match kind {
        EventKind::Modify(ModifyKind::Data(_)) | EventKind::Modify(ModifyKind::Any) => {
            Change::Writing
        }
        EventKind::Access(AccessKind::Close(AccessMode::Write))
        | EventKind::Create(_)
        | EventKind::Modify(ModifyKind::Name(_)) => Change::Done,
        // Opens, reads, closes without writing, attribute changes, removals.
        _ => Change::None,
    }
}

impl<T: Send + 'static> Reloader<T> {
    /// Starts watching the directory of `path`, then reads and loads the
    /// file with `load` (which parses and validates text). Changes made from
    /// now on are seen by [`Reloader::spawn`].
    pub fn start<E: Display>(
        path: &Path,
        settings: Settings,
        load: impl Fn(&str) -> Result<T, E> + Send + 'static,
    ) -> Result<(T, Self), StartError> {
        let file = path.to_path_buf();
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf();
        let name = file
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_default();
        let (tx, events) = channel();
        let watch_error = |source| StartError::Watch {
            dir: dir.display().to_string(),
            source,
        };
        let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
            if let Ok(ev) = ev {
                let _ = tx.send(ev);
            }
        })
        .map_err(watch_error)?;
        watcher
            .watch(&dir, RecursiveMode::NonRecursive)
            .map_err(watch_error)?;
        let last = std::fs::read(&file).map_err(|source| StartError::Read {
            path: file.display().to_string(),
            source,
        })?;
        let load: Load<T> = Box::new(move |text| load(text).map_err(|e| e.to_string()));
        let first = decode(&last)
            .and_then(&load)
            .map_err(|message| StartError::Invalid {
                path: file.display().to_string(),
                message,
            })?;
        Ok((
            first,
            Reloader {
                file,
                name,
                settings,
                load,
                watcher,
                events,
                last,
            },
        ))
    }

    /// Runs reloads on a thread of their own: `on` gets the outcome of each
    /// change of the file's content. Each outcome is also logged.
    pub fn spawn(self, on: impl FnMut(Outcome<T>) + Send + 'static) -> Watch {
        let reads = Arc::new(AtomicU64::new(0));
        let Reloader {
            file,
            name,
            settings,
            load,
            watcher,
            events,
            last,
        } = self;
        let mut run = Run {
            file,
            name,
            settings,
            load,
            last,
            reads: reads.clone(),
            on,
        };
        let thread = std::thread::Builder::new()
            .name("config-reload".to_string())
            .spawn(move || run.run(&events))
            .ok();
        if thread.is_none() {
            tracing::error!("cannot start the config reload thread; reloads are off");
        }
        Watch {
            watcher: Some(watcher),
            thread,
            reads,
        }
    }
}

fn decode(bytes: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8 text: {e}"))
}

struct Run<T, F> {
    file: PathBuf,
    name: std::ffi::OsString,
    settings: Settings,
    load: Load<T>,
    last: Vec<u8>,
    reads: Arc<AtomicU64>,
    on: F,
}

impl<T, F: FnMut(Outcome<T>)> Run<T, F> {
    fn about_the_file(&self, ev: &notify::Event) -> bool {
        ev.paths.iter().any(|p| {
            p.file_name()
                .is_some_and(|n| n == self.name.as_os_str() || n == CONFIGMAP_DATA)
        })
    }

    fn run(&mut self, events: &Receiver<notify::Event>) {
        // When the last change was seen, and since when a writer has been
        // writing in place without closing.
        let mut changed: Option<Instant> = None;
        let mut writing: Option<Instant> = None;
        loop {
            let next = match changed {
                None => events.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(at) => {
                    let mut due = at + self.settings.debounce;
                    if let Some(since) = writing {
                        due = due.max(since + self.settings.max_write);
                    }
                    events.recv_timeout(due.saturating_duration_since(Instant::now()))
                }
            };
            match next {
                Ok(ev) => {
                    if !self.about_the_file(&ev) {
                        continue;
                    }
                    match classify(&ev.kind) {
                        Change::None => {}
                        Change::Writing => {
                            changed = Some(Instant::now());
                            writing.get_or_insert_with(Instant::now);
                        }
                        Change::Done => {
                            changed = Some(Instant::now());
                            writing = None;
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    changed = None;
                    writing = None;
                    self.check();
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    fn check(&mut self) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let now = match std::fs::read(&self.file) {
            Ok(b) => b,
            Err(e) => {
                // Gone for a moment (a rename in progress); the next event
                // brings it back.
                tracing::debug!(path = %self.file.display(), error = %e, "config not readable");
                return;
            }
        };
        if now == self.last {
            return;
        }
        let outcome = match decode(&now).and_then(&self.load) {
            Ok(c) => {
                tracing::info!(path = %self.file.display(), "config reloaded");
                Outcome::Accepted(c)
            }
            Err(e) => {
                tracing::error!(path = %self.file.display(), error = %e, "config rejected, keeping the last good one");
                Outcome::Rejected(e)
            }
        };
        self.last = now;
        (self.on)(outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{CreateKind, DataChange, RenameMode};

    #[test]
    fn only_writes_creations_and_renames_count() {
        let none = [
            EventKind::Access(AccessKind::Open(AccessMode::Any)),
            EventKind::Access(AccessKind::Read),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
            EventKind::Modify(ModifyKind::Metadata(notify::event::MetadataKind::Any)),
            EventKind::Remove(notify::event::RemoveKind::File),
        ];
        for k in none {
            assert_eq!(classify(&k), Change::None, "{k:?}");
        }
        assert_eq!(
            classify(&EventKind::Modify(ModifyKind::Data(DataChange::Any))),
            Change::Writing
        );
        for k in [
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Create(CreateKind::File),
            EventKind::Modify(ModifyKind::Name(RenameMode::To)),
            EventKind::Modify(ModifyKind::Name(RenameMode::Both)),
        ] {
            assert_eq!(classify(&k), Change::Done, "{k:?}");
        }
    }
}
