//! A ConfigMap mount as kubelet lays it out, for programs that watch one.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

/// A directory laid out as Kubernetes mounts a ConfigMap: the files live in
/// a hidden version directory, `..data` is a symlink to it, and each file
/// name at the top is a symlink through `..data`. [`ConfigMapDir::publish`]
/// replaces the whole set at once by renaming a new `..data` into place, the
/// way kubelet does, so a watcher sees one consistent update.
pub struct ConfigMapDir {
    root: PathBuf,
    serial: u64,
    current: Option<String>,
}

impl ConfigMapDir {
    /// An empty mount at `root` (created if missing).
    pub fn new(root: &Path) -> Result<ConfigMapDir> {
        std::fs::create_dir_all(root)?;
        Ok(ConfigMapDir {
            root: root.to_path_buf(),
            serial: 0,
            current: None,
        })
    }

    /// The mount directory.
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// Replaces the mount's contents with `files` (name, bytes) atomically.
    pub fn publish(&mut self, files: &[(String, Vec<u8>)]) -> Result<()> {
        use std::os::unix::fs::symlink;
        self.serial += 1;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let version = format!("..{}_{nanos}", self.serial);
        let version_dir = self.root.join(&version);
        std::fs::create_dir(&version_dir)?;
        for (name, bytes) in files {
            if name.contains('/') || name.starts_with('.') {
                bail!("ConfigMap key {name:?} must be a plain file name");
            }
            std::fs::write(version_dir.join(name), bytes)?;
        }
        let tmp = self.root.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        symlink(&version, &tmp)?;
        std::fs::rename(&tmp, self.root.join("..data"))?;
        // User-visible links: add the new names, drop the names that left.
        for (name, _) in files {
            let link = self.root.join(name);
            if std::fs::symlink_metadata(&link).is_err() {
                symlink(Path::new("..data").join(name), &link)?;
            }
        }
        for entry in std::fs::read_dir(&self.root)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with('.') && !files.iter().any(|(n, _)| *n == name) {
                std::fs::remove_file(entry.path())?;
            }
        }
        if let Some(old) = self.current.replace(version) {
            std::fs::remove_dir_all(self.root.join(old))?;
        }
        Ok(())
    }
}
