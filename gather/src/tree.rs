//! The tree a gather writes, under `<dest>/oooi/`:
//!
//! ```text
//! summary.txt                                  what was found, one line per object of note
//! errors.txt                                   everything that could not be read (empty: none)
//! cluster-scoped/<resource>/<name>.yaml        CRDs, ClusterUserDefinedNetworks
//! namespaces/<ns>/<resource>/<name>.yaml       oooi resources, children, hosted objects
//! namespaces/<ns>/events.yaml                  the namespace's events, oldest first
//! namespaces/<ns>/logs/<pod>/<container>.log   current log of every container
//! namespaces/<ns>/logs/<pod>/<container>.previous.log   the one before a restart
//! namespaces/<ns>/endpoints/<pod>/<port>-<path>.txt     a component's own HTTP answer
//! ```
//!
//! `<resource>` is the API's plural (`infras`, `deployments`, `leases`).
//! Every byte goes through the [`Redactor`] before it is written.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::redact::Redactor;

/// The folder under the destination that holds everything.
pub const ROOT: &str = "oooi";

/// Writes the tree and keeps the list of what failed.
#[derive(Debug)]
pub struct Tree {
    root: PathBuf,
    /// Everything redacted on the way out.
    pub redactor: Redactor,
    errors: Vec<String>,
    files: usize,
}

/// A path element from a Kubernetes name or a URL path: only
/// `[A-Za-z0-9._-]`, never `.` or `..` alone.
pub fn element(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.chars().all(|c| c == '.') {
        out = format!("_{out}");
    }
    out
}

/// Path (under the root) of an object of `resource` named `name` in
/// `namespace` (`None`: cluster-scoped).
pub fn object_path(namespace: Option<&str>, resource: &str, name: &str) -> PathBuf {
    let base = match namespace {
        Some(ns) => Path::new("namespaces").join(element(ns)),
        None => PathBuf::from("cluster-scoped"),
    };
    base.join(element(resource))
        .join(format!("{}.yaml", element(name)))
}

/// Path of a container's log (`previous`: the terminated one before the
/// current).
pub fn log_path(namespace: &str, pod: &str, container: &str, previous: bool) -> PathBuf {
    let file = if previous {
        format!("{}.previous.log", element(container))
    } else {
        format!("{}.log", element(container))
    };
    Path::new("namespaces")
        .join(element(namespace))
        .join("logs")
        .join(element(pod))
        .join(file)
}

/// Path of a component endpoint's answer: `<port>-<path>.txt`, the path's
/// slashes as `_` (`9445-v1_routes.txt`).
pub fn endpoint_path(namespace: &str, pod: &str, port: u16, path: &str) -> PathBuf {
    let p = element(&path.trim_matches('/').replace('/', "_"));
    Path::new("namespaces")
        .join(element(namespace))
        .join("endpoints")
        .join(element(pod))
        .join(format!("{port}-{p}.txt"))
}

/// Path of a namespace's events.
pub fn events_path(namespace: &str) -> PathBuf {
    Path::new("namespaces")
        .join(element(namespace))
        .join("events.yaml")
}

/// The content of `<dest>/version`: `oooi-must-gather` and the release.
pub fn version_file() -> String {
    format!("oooi-must-gather\n{}\n", env!("CARGO_PKG_VERSION"))
}

impl Tree {
    /// A tree under `<dest>/oooi`, created now, and `<dest>/version`: the
    /// must-gather convention's two lines, the product and its version
    /// ([`version_file`]), which support tooling reads first.
    pub fn create(dest: &Path) -> std::io::Result<Tree> {
        let root = dest.join(ROOT);
        std::fs::create_dir_all(&root)?;
        std::fs::write(dest.join("version"), version_file())?;
        Ok(Tree {
            root,
            redactor: Redactor::default(),
            errors: Vec::new(),
            files: 0,
        })
    }

    /// The tree's root (`<dest>/oooi`).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Records a failure (written to `errors.txt`); gathering goes on.
    pub fn error(&mut self, what: impl std::fmt::Display, err: impl std::fmt::Display) {
        let line = self.redactor.text(&format!("{what}: {err}"));
        tracing::warn!(error = %line, "could not gather");
        self.errors.push(line);
    }

    /// The failures so far.
    pub fn errors(&self) -> &[String] {
        &self.errors
    }

    /// Files written so far.
    pub fn files(&self) -> usize {
        self.files
    }

    /// Writes `text` (redacted) at `rel`.
    pub fn write_text(&mut self, rel: &Path, text: &str) {
        let clean = self.redactor.text(text);
        self.write_raw(rel, clean.as_bytes());
    }

    /// Writes an object (redacted) as YAML at `rel`.
    pub fn write_object(&mut self, rel: &Path, object: &Value) {
        let clean = self.redactor.object(object);
        match serde_saphyr::to_string(&clean) {
            // Every string of the object is clean; the rest are field names,
            // numbers and booleans.
            Ok(yaml) => self.write_raw(rel, yaml.as_bytes()),
            Err(e) => self.error(format!("encode {}", rel.display()), e),
        }
    }

    fn write_raw(&mut self, rel: &Path, bytes: &[u8]) {
        let path = self.root.join(rel);
        let result = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&path, bytes));
        match result {
            Ok(()) => self.files += 1,
            Err(e) => self.error(format!("write {}", path.display()), e),
        }
    }

    /// Writes `errors.txt` (one failure a line; empty when nothing failed).
    pub fn finish(&mut self) {
        let mut text = self.errors.join("\n");
        if !text.is_empty() {
            text.push('\n');
        }
        let path = self.root.join("errors.txt");
        if let Err(e) = std::fs::write(&path, text) {
            tracing::error!(path = %path.display(), error = %e, "cannot write errors.txt");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_destination_holds_the_version_file() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("gather");
        let tree = Tree::create(&dest).unwrap();
        let text = std::fs::read_to_string(dest.join("version")).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines, ["oooi-must-gather", env!("CARGO_PKG_VERSION")]);
        assert!(tree.root().starts_with(&dest));
    }

    #[test]
    fn paths_follow_the_documented_layout() {
        assert_eq!(
            object_path(Some("oooi"), "infras", "lab"),
            Path::new("namespaces/oooi/infras/lab.yaml")
        );
        assert_eq!(
            object_path(None, "clusteruserdefinednetworks", "vlan"),
            Path::new("cluster-scoped/clusteruserdefinednetworks/vlan.yaml")
        );
        assert_eq!(
            log_path("oooi", "lab-dns-1", "dns", true),
            Path::new("namespaces/oooi/logs/lab-dns-1/dns.previous.log")
        );
        assert_eq!(
            endpoint_path("oooi", "p", 9445, "/v1/routes"),
            Path::new("namespaces/oooi/endpoints/p/9445-v1_routes.txt")
        );
    }

    #[test]
    fn names_cannot_escape_the_tree() {
        assert_eq!(element(".."), "_..");
        assert_eq!(element("a/../b"), "a_.._b");
        assert_eq!(element(""), "_");
    }
}
