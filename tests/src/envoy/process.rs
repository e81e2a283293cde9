//! The Envoy child process and the thread that owns it.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use anyhow::{Result, anyhow};

/// The Envoy child process, spawned from a thread of its own that lives as
/// long as the process: Envoy gets SIGTERM when the thread that started it
/// exits (seen here: a tokio `spawn_blocking` thread retiring after 10 s
/// idle took its Envoy with it), so it must not be started from a pooled
/// thread.
pub(super) struct EnvoyProcess {
    child: Arc<std::sync::Mutex<Child>>,
    /// The podman container Envoy runs in, removed on drop (killing the
    /// `podman run` client leaves the container running).
    container: Option<String>,
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl EnvoyProcess {
    pub(super) fn spawn(mut command: Command, container: Option<String>) -> Result<EnvoyProcess> {
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("envoy-parent".into())
            .spawn(move || match command.spawn() {
                Ok(child) => {
                    let child = Arc::new(std::sync::Mutex::new(child));
                    let _ = started_tx.send(Ok(child));
                    // Park until the owner is dropped.
                    let _ = stop_rx.recv();
                }
                Err(e) => {
                    let _ = started_tx.send(Err(e));
                }
            })?;
        let child = started_rx
            .recv()
            .map_err(|_| anyhow!("the envoy parent thread died"))??;
        Ok(EnvoyProcess {
            child,
            container,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    pub(super) fn with<T>(&self, f: impl FnOnce(&mut Child) -> T) -> T {
        let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut child)
    }
}

impl Drop for EnvoyProcess {
    fn drop(&mut self) {
        if let Some(name) = &self.container {
            let _ = Command::new("podman")
                .args(["rm", "--force", "--time", "0", name])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        self.with(|c| {
            let _ = c.kill();
            let _ = c.wait();
        });
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
