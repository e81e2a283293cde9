//! How the lab starts the data plane: from the container images (the
//! default, what a cluster runs) or from the cargo-built binaries
//! (`--from-build`, for quick development loops).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Result, bail};

/// One program of the data plane as a pod of it runs.
#[derive(Clone)]
pub struct Program<'a> {
    /// `oooi-dhcp`, `oooi-dns`, `oooi-envoy-gate` or `envoy` (in the
    /// images, every one of them is in /usr/local/bin).
    pub binary: &'a str,
    /// The image that carries it: `dhcp`, `dns` or `proxy`
    /// (`localhost/oooi-<image>:<version>`).
    pub image: &'a str,
    /// Capabilities its pod adds (the controller plans UID 0 with these;
    /// every other capability is dropped).
    pub caps: &'a [&'a str],
    /// Directories it reads (or, when `true`, writes), mounted in the
    /// container at the same path, so its arguments name them as they are.
    pub mounts: Vec<(PathBuf, bool)>,
    /// Its arguments.
    pub args: Vec<String>,
}

/// The binaries or the images.
#[derive(Clone, Debug)]
pub enum Launcher {
    /// The cargo-built `oooi-dhcp` and `oooi-dns` beside the lab binary and
    /// the `envoy` on PATH, run with `ip netns exec`.
    Build,
    /// The images `localhost/oooi-<name>:<version>` that `tools/dev images`
    /// builds, run under podman in the namespace's network.
    Images {
        /// Their tag.
        version: String,
    },
}

impl Launcher {
    /// What the lab prints about itself.
    pub fn describe(&self) -> String {
        match self {
            Launcher::Build => "the cargo-built binaries (--from-build)".to_string(),
            Launcher::Images { version } => {
                format!("the images localhost/oooi-{{dhcp,dns,proxy}}:{version} (podman)")
            }
        }
    }

    /// Fails early, naming what is missing, when an image is not built.
    pub fn check(&self) -> Result<()> {
        let Launcher::Images { version } = self else {
            return Ok(());
        };
        for name in ["dhcp", "dns", "proxy"] {
            let image = format!("localhost/oooi-{name}:{version}");
            let found = Command::new("podman")
                .args(["image", "exists", &image])
                .status()
                .is_ok_and(|s| s.success());
            if !found {
                bail!(
                    "image {image} not found: run `tools/dev lab` (it builds the images), or pass --from-build"
                );
            }
        }
        Ok(())
    }

    /// The command line that runs `p` in network namespace `ns` (as the
    /// container named like `ns`, one per replica). `binary` resolves a
    /// cargo-built program's path.
    pub fn argv(
        &self,
        ns: &str,
        p: &Program<'_>,
        binary: impl Fn(&str) -> Result<PathBuf>,
    ) -> Result<Vec<String>> {
        let mut argv: Vec<String> = match self {
            Launcher::Build => {
                let bin = if p.binary == "envoy" {
                    PathBuf::from("envoy")
                } else {
                    binary(p.binary)?
                };
                vec![
                    "ip".into(),
                    "netns".into(),
                    "exec".into(),
                    ns.into(),
                    bin.to_string_lossy().into_owned(),
                ]
            }
            Launcher::Images { version } => {
                let mut argv: Vec<String> = [
                    "podman",
                    "run",
                    "--rm",
                    "--name",
                    ns,
                    "--network",
                    &format!("ns:/run/netns/{ns}"),
                    "--read-only",
                    "--user",
                    "0:0",
                    "--cap-drop",
                    "ALL",
                ]
                .map(String::from)
                .to_vec();
                if !p.caps.is_empty() {
                    argv.extend(["--cap-add".to_string(), p.caps.join(",")]);
                }
                // The program by name, not the image's entrypoint: the proxy
                // image runs Envoy by default, its pods run the gate.
                argv.extend([
                    "--entrypoint".to_string(),
                    format!("/usr/local/bin/{}", p.binary),
                ]);
                for (dir, writable) in &p.mounts {
                    let mode = if *writable { "rw" } else { "ro" };
                    argv.extend(["-v".to_string(), format!("{0}:{0}:{mode}", dir.display())]);
                }
                // What `ip netns exec` does for the binaries: the files in
                // /etc/netns/<ns>/ stand over those in /etc.
                for file in etc_overrides(ns) {
                    let name = file.file_name().unwrap_or_default().to_string_lossy();
                    argv.extend([
                        "-v".to_string(),
                        format!("{}:/etc/{name}:ro", file.display()),
                    ]);
                }
                argv.push(format!("localhost/oooi-{}:{version}", p.image));
                argv
            }
        };
        argv.extend(p.args.iter().cloned());
        Ok(argv)
    }
}

fn etc_overrides(ns: &str) -> Vec<PathBuf> {
    let dir = Path::new("/etc/netns").join(ns);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    files.sort();
    files
}

/// Removes the lab's containers (after a crash they may outlive the lab):
/// every container named `<prefix>-*` (each is named after its namespace).
pub fn remove_containers(prefix: &str) {
    let listed = Command::new("podman")
        .args(["ps", "--all", "--format", "{{.Names}}"])
        .stderr(std::process::Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    for name in listed
        .lines()
        .map(str::trim)
        .filter(|n| n.starts_with(&format!("{prefix}-")))
    {
        let _ = Command::new("podman")
            .args(["rm", "--force", "--time", "0", "--ignore", name])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}
