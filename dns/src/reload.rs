//! Config reload: watch the directory of the config file (not the file: a
//! Kubernetes ConfigMap update renames a new `..data` symlink into place,
//! which a watch on the file misses), and on any change re-read the file.
//! A valid new file replaces the state and wakes the listener manager; an
//! invalid one is logged with the field at fault and the last good config
//! stays in force.

use std::path::Path;
use std::sync::Arc;

use notify::{RecursiveMode, Watcher};

use crate::config::Config;
use crate::server::Engine;

fn count(result: &str) {
    crate::metrics::metrics()
        .reloads
        .get_or_create(&crate::metrics::ReloadLabels {
            result: result.to_string(),
        })
        .inc();
}

/// Starts watching `path`. Keep the returned watcher alive. `changed` is
/// signalled after every accepted reload.
pub fn watch(
    path: &Path,
    engine: Arc<Engine>,
    changed: tokio::sync::watch::Sender<()>,
) -> notify::Result<notify::RecommendedWatcher> {
    let file = path.to_path_buf();
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let name = file.file_name().map(|n| n.to_os_string());
    let mut last = std::fs::read(&file).unwrap_or_default();
    let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        let Ok(ev) = ev else {
            return;
        };
        // Events come for every file of the directory: only the file itself
        // and the ConfigMap's `..data` swap matter. Reading the file on
        // every event costs CPU when something else writes there.
        let relevant = ev.paths.iter().any(|p| {
            p.file_name()
                .is_some_and(|n| Some(n) == name.as_deref() || n == "..data")
        });
        if !relevant {
            return;
        }
        // Act only when the content we would load differs from what is in
        // force.
        let Ok(now) = std::fs::read(&file) else {
            return;
        };
        if now == last {
            return;
        }
        last = now;
        match Config::load(&file) {
            Ok(c) => {
                engine.replace(c);
                changed.send_replace(());
                count("ok");
                tracing::info!(path = %file.display(), "config reloaded");
            }
            Err(e) => {
                count("rejected");
                tracing::error!(path = %file.display(), error = %e, "config rejected, keeping the last good one");
            }
        }
    })?;
    watcher.watch(&dir, RecursiveMode::NonRecursive)?;
    Ok(watcher)
}
