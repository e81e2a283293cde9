//! Config reload: watch the config file's directory and hand each new valid
//! config to the server loop.
//!
//! The directory, not the file, is watched: kubelet swaps the `..data`
//! symlink by rename, which a watch on the file misses. notify's inotify
//! backend also reports *opens* (`IN_OPEN`), and reading the config to see
//! whether it changed opens it: reacting to those events made the watcher
//! re-trigger itself forever after the first change in the directory (one
//! core at ~75 % for good, found by the benchmark). Only events that can
//! change the file's content are acted on ([`is_change`]).

use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;

use notify::event::EventKind;
use notify::{RecursiveMode, Watcher};

use crate::config::Config;
use crate::metrics::{ResultLabels, metrics};

/// Whether an event of this kind in the config directory may have changed
/// the config (creation, write, rename, removal, attribute change). Accesses
/// (open, read, close without write) never do, and our own read of the file
/// produces them.
pub fn is_change(kind: &EventKind) -> bool {
    !matches!(kind, EventKind::Access(_))
}

fn reload_metric(result: &str) {
    metrics()
        .reloads
        .get_or_create(&ResultLabels {
            result: result.to_string(),
        })
        .inc();
}

/// Watches `path`'s directory and sends each new valid config on `tx`. A
/// file that fails validation is logged and counted; the old config stays
/// in force. Keep the returned watcher alive for as long as reloads should
/// happen. `on_read` is called each time the file is read (tests count it).
pub fn watch(
    path: &Path,
    tx: Sender<Config>,
    on_read: impl Fn() + Send + 'static,
) -> anyhow::Result<notify::RecommendedWatcher> {
    let file: PathBuf = path.to_path_buf();
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let mut last = std::fs::read(&file).unwrap_or_default();
    let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        let Ok(ev) = ev else { return };
        if !is_change(&ev.kind) {
            return;
        }
        on_read();
        let Ok(now) = std::fs::read(&file) else {
            return;
        };
        if now == last {
            return;
        }
        last = now;
        match Config::load(&file) {
            Ok(c) => {
                reload_metric("ok");
                tracing::info!(path = %file.display(), "config reloaded");
                let _ = tx.send(c);
            }
            Err(e) => {
                reload_metric("rejected");
                tracing::error!(path = %file.display(), error = %e, "config rejected, keeping the last good one");
            }
        }
    })?;
    watcher.watch(&dir, RecursiveMode::NonRecursive)?;
    Ok(watcher)
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind, RenameMode};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn only_content_changes_count() {
        assert!(!is_change(&EventKind::Access(AccessKind::Open(
            AccessMode::Any
        ))));
        assert!(!is_change(&EventKind::Access(AccessKind::Close(
            AccessMode::Read
        ))));
        assert!(is_change(&EventKind::Create(CreateKind::File)));
        assert!(is_change(&EventKind::Modify(ModifyKind::Name(
            RenameMode::To
        ))));
    }

    const CONFIG: &str = "server_ip: 192.0.2.2\nsubnet: 192.0.2.0/24\ngateway: 192.0.2.1\nrange: { start: 192.0.2.100, end: 192.0.2.110 }\n";

    /// After one unrelated change in the directory the watcher reads the
    /// file a few times at most, not in an endless loop on its own opens.
    #[test]
    fn a_change_beside_the_config_does_not_make_the_watcher_spin() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("config.yaml");
        std::fs::write(&path, CONFIG).unwrap();
        let reads = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = std::sync::mpsc::channel();
        let r = reads.clone();
        let _w = watch(&path, tx, move || {
            r.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
        std::fs::write(d.path().join("other"), "x").unwrap();
        std::thread::sleep(Duration::from_millis(500));
        let n = reads.load(Ordering::Relaxed);
        assert!(n >= 1, "the change was not seen");
        assert!(
            n <= 4,
            "the watcher read the config {n} times for one change"
        );
        assert!(rx.try_recv().is_err(), "an unchanged config was re-applied");
        // A real change is still applied.
        std::fs::write(&path, CONFIG.replace(".110", ".120")).unwrap();
        let c = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(c.range_end, std::net::Ipv4Addr::new(192, 0, 2, 120));
    }
}
