//! The gate between Envoy and its routing listeners.
//!
//! An oooi proxy replica that starts (or restarts after a crash) holds no
//! routing table until the controller pushes one. If its routing listeners
//! were open meanwhile, a worker's TCP connect would succeed and the filter
//! would reset the connection after the ClientHello: a client that moves to
//! the next proxy address only when the connect fails (Go's dialer, curl)
//! sees a failed request. The gate keeps those ports closed instead, so the
//! kernel refuses the connect and the client moves on at once.
//!
//! It works through Envoy's file-based LDS. The controller renders the full
//! listener set into the config mount ([`oooi_envoy::LDS_FILE`]); Envoy reads
//! its listeners from another directory, which only the gate writes
//! ([`Gate`]): at start the table API, readiness and metrics listeners alone
//! ([`oooi_envoy::listeners_before_table`]), and every listener once
//! `GET /ready` (on the readiness listener) answers 200. A config change is carried
//! over under the same rule. Each write is a rename into the directory,
//! which is what Envoy's `watched_directory` reacts to.
//!
//! The gate runs Envoy as its child (see the binary): it stays in front of
//! every Envoy start, so a stale listener file in the pod's emptyDir never
//! opens the ports of an Envoy that has no table yet.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use serde_json::Value;

/// Why the gate cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The rendered listener file cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: io::Error,
    },
    /// The rendered listener file is not an LDS discovery response.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// The listener file for Envoy cannot be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        source: io::Error,
    },
}

/// Parses an LDS discovery response (JSON with a `resources` array whose
/// entries are named listeners).
pub fn parse_listeners(text: &str) -> Result<Value, String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let resources = doc
        .get("resources")
        .and_then(Value::as_array)
        .ok_or("no `resources` array: not an LDS discovery response")?;
    if let Some(i) = resources
        .iter()
        .position(|l| l.get("name").and_then(Value::as_str).is_none())
    {
        return Err(format!("resources[{i}] has no name"));
    }
    Ok(doc)
}

/// Whether Envoy may see its routing listeners yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// No table yet: only the table API and metrics listeners.
    BeforeTable,
    /// The replica held a table: every listener.
    Open,
    /// Told to stop: every listener but the table API, whose refused port
    /// makes `GET /ready` fail while the routing listeners still serve.
    Draining,
}

/// The listener file Envoy reads, kept in step with the rendered one and
/// the replica's [`Phase`].
#[derive(Debug)]
pub struct Gate {
    out: PathBuf,
    phase: Phase,
    /// Whether the routing listeners were ever opened (a drain before the
    /// table keeps them closed).
    opened: bool,
    source: Value,
    written: Option<Value>,
}

impl Gate {
    /// Starts closed: writes the listeners before the table for `source`
    /// into `out_dir` (created if missing), replacing whatever an earlier
    /// run left there.
    pub fn new(source: Value, out_dir: &Path) -> Result<Gate, Error> {
        std::fs::create_dir_all(out_dir).map_err(|source| Error::Write {
            path: out_dir.display().to_string(),
            source,
        })?;
        let mut gate = Gate {
            out: out_dir.to_path_buf(),
            phase: Phase::BeforeTable,
            opened: false,
            source,
            written: None,
        };
        gate.publish()?;
        Ok(gate)
    }

    /// Where Envoy reads its listeners.
    pub fn path(&self) -> PathBuf {
        self.out.join(oooi_envoy::LDS_FILE)
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The document Envoy should read now.
    pub fn wanted(&self) -> Value {
        match self.phase {
            Phase::BeforeTable => oooi_envoy::listeners_before_table(&self.source),
            Phase::Open => self.source.clone(),
            Phase::Draining if self.opened => oooi_envoy::listeners_while_draining(&self.source),
            Phase::Draining => oooi_envoy::listeners_while_draining(
                &oooi_envoy::listeners_before_table(&self.source),
            ),
        }
    }

    /// The table arrived: opens every listener. Returns whether the file
    /// changed. A draining gate stays draining.
    pub fn open(&mut self) -> Result<bool, Error> {
        if self.phase != Phase::Draining {
            self.phase = Phase::Open;
            self.opened = true;
        }
        self.publish()
    }

    /// Starts draining (final): closes the table API's listener and keeps
    /// the others. Returns whether the file changed.
    pub fn drain(&mut self) -> Result<bool, Error> {
        self.phase = Phase::Draining;
        self.publish()
    }

    /// A new rendered listener file: carried over under the current phase.
    /// Returns whether the file changed.
    pub fn update(&mut self, source: Value) -> Result<bool, Error> {
        self.source = source;
        self.publish()
    }

    /// Writes [`Gate::wanted`] unless it is what Envoy already has: a temp
    /// file in the same directory, fsynced, renamed over the old one.
    fn publish(&mut self) -> Result<bool, Error> {
        let wanted = self.wanted();
        if self.written.as_ref() == Some(&wanted) {
            return Ok(false);
        }
        let path = self.path();
        let tmp = self.out.join(format!(".{}.tmp", oooi_envoy::LDS_FILE));
        let write = |p: &Path| -> io::Result<()> {
            let bytes = serde_json::to_vec_pretty(&wanted).map_err(io::Error::other)?;
            let mut f = std::fs::File::create(p)?;
            f.write_all(&bytes)?;
            f.sync_all()
        };
        write(&tmp)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|source| Error::Write {
                path: path.display().to_string(),
                source,
            })?;
        self.written = Some(wanted);
        Ok(true)
    }
}

/// Reads and parses the rendered listener file.
pub fn read_listeners(path: &Path) -> Result<Value, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse_listeners(&text).map_err(|message| Error::Invalid {
        path: path.display().to_string(),
        message,
    })
}

/// The exit code that reports `status` the way a shell would: the child's
/// code, or 128 plus the signal that ended it.
pub fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lds() -> Value {
        json!({"version_info": "v1", "resources": [
            {"name": "tls_6443", "address": {}},
            {"name": oooi_envoy::API_LISTENER, "address": {}},
            {"name": oooi_envoy::METRICS_LISTENER, "address": {}},
            {"name": "tls_443", "address": {}},
        ]})
    }

    fn names(v: &Value) -> Vec<String> {
        v["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["name"].as_str().unwrap().to_string())
            .collect()
    }

    fn on_disk(gate: &Gate) -> Value {
        serde_json::from_slice(&std::fs::read(gate.path()).unwrap()).unwrap()
    }

    #[test]
    fn starts_closed_over_a_stale_file_and_opens_once() {
        let dir = tempfile::tempdir().unwrap();
        // What an earlier container run left in the emptyDir: every listener.
        std::fs::write(dir.path().join(oooi_envoy::LDS_FILE), lds().to_string()).unwrap();
        let mut gate = Gate::new(lds(), dir.path()).unwrap();
        assert_eq!(gate.phase(), Phase::BeforeTable);
        assert_eq!(names(&on_disk(&gate)), ["table_api", "metrics"]);
        assert!(gate.open().unwrap());
        assert_eq!(on_disk(&gate), lds());
        assert!(!gate.open().unwrap(), "opening twice writes nothing");
        assert!(!dir.path().join(".lds.json.tmp").exists());
    }

    #[test]
    fn draining_closes_the_table_api_alone_and_is_final() {
        let dir = tempfile::tempdir().unwrap();
        let mut gate = Gate::new(lds(), dir.path()).unwrap();
        assert!(gate.open().unwrap());
        assert!(gate.drain().unwrap());
        assert_eq!(gate.phase(), Phase::Draining);
        assert_eq!(names(&on_disk(&gate)), ["tls_6443", "metrics", "tls_443"]);
        // A table that arrives late, or a new rendered file, does not reopen it.
        assert!(!gate.open().unwrap());
        let mut next = lds();
        next["version_info"] = json!("v2");
        gate.update(next).unwrap();
        assert!(!names(&on_disk(&gate)).contains(&"table_api".to_string()));
        // Draining before any table: the metrics listener alone.
        let dir = tempfile::tempdir().unwrap();
        let mut early = Gate::new(lds(), dir.path()).unwrap();
        early.drain().unwrap();
        assert_eq!(names(&on_disk(&early)), ["metrics"]);
    }

    #[test]
    fn a_new_config_keeps_the_phase() {
        let dir = tempfile::tempdir().unwrap();
        let mut gate = Gate::new(lds(), dir.path().join("sub").as_path()).unwrap();
        let mut next = lds();
        next["version_info"] = json!("v2");
        next["resources"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "tls_80"}));
        next["resources"][1]["address"] = json!({"port": 1});
        assert!(
            gate.update(next.clone()).unwrap(),
            "the API listener changed"
        );
        assert_eq!(names(&on_disk(&gate)), ["table_api", "metrics"]);
        assert_eq!(
            on_disk(&gate)["resources"][0]["address"],
            json!({"port": 1})
        );
        // Only a routing listener changed: nothing for Envoy before the table.
        let mut routing_only = next.clone();
        routing_only["resources"][0]["address"] = json!({"port": 2});
        assert!(!gate.update(routing_only.clone()).unwrap());
        assert!(gate.open().unwrap());
        assert_eq!(on_disk(&gate), routing_only);
        assert!(gate.update(lds()).unwrap());
        assert_eq!(on_disk(&gate), lds());
    }

    #[test]
    fn rejects_what_is_not_lds() {
        assert!(parse_listeners("{").unwrap_err().contains("not JSON"));
        assert!(parse_listeners("{}").unwrap_err().contains("resources"));
        assert!(
            parse_listeners(r#"{"resources":[{"name":"a"},{}]}"#)
                .unwrap_err()
                .contains("resources[1]")
        );
        assert_eq!(
            names(&parse_listeners(&lds().to_string()).unwrap()),
            ["tls_6443", "table_api", "metrics", "tls_443"]
        );
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("lds.json");
        assert!(matches!(read_listeners(&missing), Err(Error::Read { .. })));
        std::fs::write(&missing, "[]").unwrap();
        assert!(matches!(
            read_listeners(&missing),
            Err(Error::Invalid { .. })
        ));
    }

    #[test]
    fn exit_codes_as_a_shell_reports_them() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
    }
}
