//! How the lab starts the data plane: from the container images (the
//! default, what a cluster runs) or from the cargo-built binaries
//! (`--from-build`, for quick development loops).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Result, anyhow, bail};
use serde_json::Value;

/// One program of the data plane as a pod of it runs.
#[derive(Clone)]
pub struct Program<'a> {
    /// `oooi-dhcp`, `oooi-dns`, `oooi-envoy-gate`, `oooi-addr-agent` or
    /// `envoy`: the cargo-built binary's name (`--from-build`).
    pub binary: &'a str,
    /// Its path inside the image (the container's command).
    pub entrypoint: String,
    /// The image that carries it: `dhcp`, `dns` or `proxy`
    /// (`localhost/oooi-<image>:<version>`).
    pub image: &'a str,
    /// The security context of its container in the pod the controller
    /// rendered ([`RunAs::of_pod`]).
    pub security: RunAs,
    /// Directories it reads or writes, mounted in the container at the same
    /// path, so its arguments name them as they are; each stands in for one
    /// kind of pod volume.
    pub mounts: Vec<(PathBuf, Volume)>,
    /// Environment variables beyond the image's.
    pub env: Vec<(String, String)>,
    /// Its arguments.
    pub args: Vec<String>,
}

/// The kind of pod volume a lab directory stands in for: what the kubelet
/// does to it before the container starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Volume {
    /// A ConfigMap or Secret: read-only, left as the lab wrote it.
    Config,
    /// An `emptyDir`: writable by anyone (mode 0777), owned by the pod's
    /// fsGroup when it has one.
    EmptyDir,
    /// A PersistentVolumeClaim: as its provisioner left it (here root's),
    /// and with an fsGroup every file given to that group, group-writable,
    /// directories set-group-ID (fsGroupChangePolicy `Always`, the default).
    Claim,
}

impl Volume {
    fn writable(self) -> bool {
        !matches!(self, Volume::Config)
    }
}

/// How one container of a rendered pod runs: its pod's and its own
/// `securityContext`, merged as the kubelet merges them (the container's
/// field wins). Every field the controller may render is understood or
/// refused by name ([`RunAs::of_pod`]), so the lab cannot silently run a
/// pod with less (or more) than the controller asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunAs {
    /// `runAsUser`; `None`: the image's user.
    pub user: Option<i64>,
    /// `runAsGroup`; `None`: the image user's group.
    pub group: Option<i64>,
    /// The pod's `fsGroup` (a supplementary group, and the group of its
    /// volumes).
    pub fs_group: Option<i64>,
    /// The pod's `supplementalGroups`.
    pub supplemental_groups: Vec<i64>,
    /// `capabilities.drop`, as written (`ALL` or names).
    pub drop: Vec<String>,
    /// `capabilities.add`.
    pub add: Vec<String>,
    /// `allowPrivilegeEscalation: false`: the process runs with no_new_privs.
    pub no_new_privileges: bool,
    /// `readOnlyRootFilesystem: true`.
    pub read_only_root: bool,
    /// `privileged: true`.
    pub privileged: bool,
    /// `seccompProfile.type: Unconfined` (`RuntimeDefault` is the runtime's
    /// own profile, podman's default).
    pub seccomp_unconfined: bool,
    /// The pod's sysctls, set in the pod's (here the lab namespace's)
    /// network namespace.
    pub sysctls: Vec<(String, String)>,
}

/// `securityContext` of a pod, every field the lab can run; any other one
/// fails the parse with its name.
#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PodSecurityContext {
    fs_group: Option<i64>,
    /// The lab's volumes are new on every start: `Always` and
    /// `OnRootMismatch` do the same to them.
    #[allow(dead_code)]
    fs_group_change_policy: Option<String>,
    run_as_user: Option<i64>,
    run_as_group: Option<i64>,
    run_as_non_root: Option<bool>,
    #[serde(default)]
    supplemental_groups: Vec<i64>,
    #[serde(default)]
    sysctls: Vec<Sysctl>,
    seccomp_profile: Option<SeccompProfile>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Sysctl {
    name: String,
    value: String,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SeccompProfile {
    #[serde(rename = "type")]
    type_: String,
    localhost_profile: Option<String>,
}

/// `securityContext` of a container, every field the lab can run.
#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ContainerSecurityContext {
    allow_privilege_escalation: Option<bool>,
    read_only_root_filesystem: Option<bool>,
    privileged: Option<bool>,
    run_as_non_root: Option<bool>,
    run_as_user: Option<i64>,
    run_as_group: Option<i64>,
    capabilities: Option<Capabilities>,
    seccomp_profile: Option<SeccompProfile>,
}

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Capabilities {
    #[serde(default)]
    add: Vec<String>,
    #[serde(default)]
    drop: Vec<String>,
}

impl RunAs {
    /// The security of container `container` (a container or an init
    /// container) of `pod`, a rendered pod spec (a Deployment's
    /// `spec.template.spec`). Fails, naming the field, on a security field
    /// the lab cannot reproduce, and where the kubelet would refuse the
    /// container (`runAsNonRoot` with UID 0).
    pub fn of_pod(pod: &Value, container: &str) -> Result<RunAs> {
        let c = ["containers", "initContainers"]
            .iter()
            .flat_map(|list| pod[list].as_array().into_iter().flatten())
            .find(|c| c["name"] == container)
            .ok_or_else(|| anyhow!("the pod has no container `{container}`"))?;
        let psc: PodSecurityContext = match &pod["securityContext"] {
            Value::Null => PodSecurityContext::default(),
            v => serde_json::from_value(v.clone())
                .map_err(|e| anyhow!("the pod's securityContext: {e}"))?,
        };
        let csc: ContainerSecurityContext = match &c["securityContext"] {
            Value::Null => ContainerSecurityContext::default(),
            v => serde_json::from_value(v.clone())
                .map_err(|e| anyhow!("container `{container}`'s securityContext: {e}"))?,
        };
        let seccomp = csc
            .seccomp_profile
            .as_ref()
            .or(psc.seccomp_profile.as_ref());
        let seccomp_unconfined = match seccomp {
            None => false,
            Some(s) if s.type_ == "RuntimeDefault" => false,
            Some(s) if s.type_ == "Unconfined" => true,
            Some(s) => bail!(
                "container `{container}`: seccompProfile {} {} is not one the lab can run",
                s.type_,
                s.localhost_profile.as_deref().unwrap_or("")
            ),
        };
        let caps = csc.capabilities.unwrap_or_default();
        let run = RunAs {
            user: csc.run_as_user.or(psc.run_as_user),
            group: csc.run_as_group.or(psc.run_as_group),
            fs_group: psc.fs_group,
            supplemental_groups: psc.supplemental_groups,
            drop: caps.drop,
            add: caps.add,
            no_new_privileges: csc.allow_privilege_escalation == Some(false),
            read_only_root: csc.read_only_root_filesystem == Some(true),
            privileged: csc.privileged == Some(true),
            seccomp_unconfined,
            sysctls: psc.sysctls.into_iter().map(|s| (s.name, s.value)).collect(),
        };
        let non_root = csc.run_as_non_root.or(psc.run_as_non_root) == Some(true);
        if non_root && run.user == Some(0) {
            bail!(
                "container `{container}`: runAsNonRoot with runAsUser 0 (the kubelet refuses it)"
            );
        }
        if run.user.is_none() && run.group.is_some() {
            bail!(
                "container `{container}`: runAsGroup without runAsUser (podman names a group only with a user)"
            );
        }
        Ok(run)
    }

    /// The `podman run` flags of this security context.
    pub fn podman_args(&self) -> Vec<String> {
        let mut out = Vec::new();
        match (self.user, self.group) {
            (Some(u), Some(g)) => out.extend(["--user".to_string(), format!("{u}:{g}")]),
            (Some(u), None) => out.extend(["--user".to_string(), u.to_string()]),
            // Refused by `of_pod`.
            (None, Some(_)) | (None, None) => {}
        }
        for g in self.fs_group.iter().chain(&self.supplemental_groups) {
            out.extend(["--group-add".to_string(), g.to_string()]);
        }
        for d in &self.drop {
            out.extend(["--cap-drop".to_string(), d.clone()]);
        }
        if !self.add.is_empty() {
            out.extend(["--cap-add".to_string(), self.add.join(",")]);
        }
        if self.no_new_privileges {
            out.extend([
                "--security-opt".to_string(),
                "no-new-privileges".to_string(),
            ]);
        }
        if self.seccomp_unconfined {
            out.extend([
                "--security-opt".to_string(),
                "seccomp=unconfined".to_string(),
            ]);
        }
        if self.privileged {
            out.push("--privileged".to_string());
        }
        if self.read_only_root {
            // Nothing writable but the pod's volumes: podman would add
            // tmpfs mounts on /tmp, /var/tmp and /run, a pod has none.
            out.extend([
                "--read-only".to_string(),
                "--read-only-tmpfs=false".to_string(),
            ]);
        }
        for (name, value) in &self.sysctls {
            out.extend(["--sysctl".to_string(), format!("{name}={value}")]);
        }
        out
    }

    /// What the kubelet does to a volume of this pod before its containers
    /// start ([`Volume`]), done to the lab directory `dir`.
    pub fn prepare(&self, dir: &Path, volume: Volume) -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        match volume {
            Volume::Config => Ok(()),
            Volume::EmptyDir => {
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777))?;
                if let Some(g) = self.fs_group {
                    give_to_group(dir, g)?;
                }
                Ok(())
            }
            Volume::Claim => match self.fs_group {
                Some(g) => give_to_group(dir, g),
                None => Ok(()),
            },
        }
    }

    /// The process status this security context gives the container's
    /// main process, as compared with `/proc/<pid>/status` and its mounts
    /// ([`Launcher::running_status`]): `uid U gid G groups [..] caps [..]
    /// no_new_privs N`, then `read-only root` when it is.
    pub fn expected_status(&self) -> String {
        let uid = self.user.unwrap_or(IMAGE_USER);
        let gid = self.group.unwrap_or(IMAGE_USER);
        let mut groups: Vec<i64> = self
            .fs_group
            .iter()
            .chain(&self.supplemental_groups)
            .copied()
            .collect();
        // The primary group is not a supplementary one.
        groups.retain(|g| *g != gid);
        groups.sort_unstable();
        groups.dedup();
        // Added capabilities are effective for UID 0 only: a non-root
        // process gets none (no ambient capabilities in a pod).
        let mut caps: Vec<String> = if uid == 0 && self.drop.iter().any(|d| d == "ALL") {
            self.add.clone()
        } else {
            Vec::new()
        };
        caps.sort();
        let mut line = status_line(uid, gid, &groups, &caps, self.no_new_privileges);
        if self.read_only_root {
            line.push_str(" read-only root");
        }
        line
    }
}

/// The user the lab's images name (`USER 65532:65532`).
const IMAGE_USER: i64 = 65532;

fn status_line(uid: i64, gid: i64, groups: &[i64], caps: &[String], nnp: bool) -> String {
    let groups: Vec<String> = groups.iter().map(i64::to_string).collect();
    format!(
        "uid {uid} gid {gid} groups [{}] caps [{}] no_new_privs {}",
        groups.join(" "),
        caps.join(" "),
        u8::from(nnp)
    )
}

/// Every file under `dir` (and `dir`) to group `gid`, group-readable and
/// writable, directories also group-searchable and set-group-ID: the
/// kubelet's fsGroup ownership change.
fn give_to_group(dir: &Path, gid: i64) -> Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let gid = u32::try_from(gid).map_err(|_| anyhow!("fsGroup {gid} is not a group id"))?;
    let meta = std::fs::symlink_metadata(dir)?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    std::os::unix::fs::lchown(dir, Some(meta.uid()), Some(gid))?;
    let extra = if meta.is_dir() { 0o2070 } else { 0o060 };
    std::fs::set_permissions(
        dir,
        std::fs::Permissions::from_mode((meta.mode() & 0o7777) | extra),
    )?;
    if meta.is_dir() {
        for e in std::fs::read_dir(dir)? {
            give_to_group(&e?.path(), i64::from(gid))?;
        }
    }
    Ok(())
}

/// The capabilities a process status names, by bit.
const CAPABILITIES: [&str; 41] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// A process's identity and privileges from the text of its
/// `/proc/<pid>/status`, in the form of [`RunAs::expected_status`]
/// (effective capabilities by name).
pub fn process_status(status: &str) -> Result<String> {
    let field = |name: &str| -> Result<Vec<&str>> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(|v| v.split_whitespace().collect())
            .ok_or_else(|| anyhow!("no {name} in the process status"))
    };
    let first = |name: &str| -> Result<i64> {
        field(name)?
            .first()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| anyhow!("{name} is not a number"))
    };
    let mut groups: Vec<i64> = field("Groups")?
        .iter()
        .filter_map(|g| g.parse().ok())
        .collect();
    let gid = first("Gid")?;
    // The primary group is listed among the groups by some runtimes.
    groups.retain(|g| *g != gid);
    groups.sort_unstable();
    let mask = field("CapEff")?
        .first()
        .and_then(|v| u64::from_str_radix(v, 16).ok())
        .ok_or_else(|| anyhow!("CapEff is not hex"))?;
    let mut caps: Vec<String> = (0..64)
        .filter(|bit| mask & (1 << bit) != 0)
        .map(|bit| {
            CAPABILITIES
                .get(bit)
                .map_or_else(|| format!("CAP_{bit}"), |c| c.to_string())
        })
        .collect();
    caps.sort();
    Ok(status_line(
        first("Uid")?,
        gid,
        &groups,
        &caps,
        first("NoNewPrivs")? == 1,
    ))
}

/// Whether the root of the process's mount namespace is read-only, from
/// the text of its `/proc/<pid>/mountinfo`.
pub fn root_read_only(mountinfo: &str) -> bool {
    mountinfo.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.get(4) == Some(&"/") && f.get(5).is_some_and(|o| o.split(',').any(|o| o == "ro"))
    })
}

/// The binaries or the images.
#[derive(Clone, Debug)]
pub enum Launcher {
    /// The cargo-built `oooi-dhcp` and `oooi-dns` beside the lab binary and
    /// the `envoy` on PATH, run as root with `ip netns exec` (a quick
    /// development loop: not the pods' security).
    Build,
    /// The images `localhost/oooi-<name>:<version>` that `tools/dev images`
    /// builds, run under podman in the namespace's network, each container
    /// with the security context its pod has ([`RunAs`]).
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

    /// The command line that runs `p` in network namespace `ns` (from the
    /// images: as the container `name`), after doing to its volumes what
    /// the kubelet does. `binary` resolves a cargo-built program's path.
    pub fn argv(
        &self,
        ns: &str,
        name: &str,
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
                let mut argv: Vec<String> = ["ip", "netns", "exec", ns, "env"]
                    .map(String::from)
                    .to_vec();
                argv.extend(p.env.iter().map(|(k, v)| format!("{k}={v}")));
                argv.push(bin.to_string_lossy().into_owned());
                argv
            }
            Launcher::Images { version } => {
                for (dir, volume) in &p.mounts {
                    p.security.prepare(dir, *volume)?;
                }
                let mut argv: Vec<String> = [
                    "podman",
                    "run",
                    "--rm",
                    "--name",
                    name,
                    "--network",
                    &format!("ns:/run/netns/{ns}"),
                ]
                .map(String::from)
                .to_vec();
                argv.extend(p.security.podman_args());
                for (k, v) in &p.env {
                    argv.extend(["-e".to_string(), format!("{k}={v}")]);
                }
                // The program by path, not the image's entrypoint: the proxy
                // image runs Envoy by default, its pods run the gate.
                argv.extend(["--entrypoint".to_string(), p.entrypoint.clone()]);
                // Parents before the directories mounted inside them.
                let mut mounts = p.mounts.clone();
                mounts.sort_by(|a, b| a.0.cmp(&b.0));
                for (dir, volume) in &mounts {
                    let mode = if volume.writable() { "rw" } else { "ro" };
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

    /// From the images: how the container `name` runs, as the kernel sees
    /// its main process (in the form of [`RunAs::expected_status`], plus
    /// `read-only root` when its root file system is), once it runs (up to
    /// 15 s). `None` with `--from-build`.
    pub fn running_status(&self, name: &str) -> Result<Option<String>> {
        if matches!(self, Launcher::Build) {
            return Ok(None);
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        let pid = loop {
            let out = Command::new("podman")
                .args(["inspect", "--format", "{{.State.Pid}}", name])
                .stderr(std::process::Stdio::null())
                .output()?;
            let pid = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if out.status.success() && !pid.is_empty() && pid != "0" {
                break pid;
            }
            if std::time::Instant::now() > deadline {
                bail!("container {name} is not running after 15 s");
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        };
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))?;
        let mut got = process_status(&status)?;
        if root_read_only(&mountinfo) {
            got.push_str(" read-only root");
        }
        Ok(Some(got))
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

#[cfg(test)]
mod tests {
    use super::*;
    use oooi_controller::plan::workload::{AGENT_CAPABILITIES, NON_ROOT_UID, POD_SYSCTLS};
    use serde_json::json;

    /// What render plans for the lab's own manifests: every Deployment's
    /// pod spec, by name.
    fn rendered_pods() -> Vec<(String, String, Value)> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/two-clusters.yaml");
        let text = std::fs::read_to_string(path).expect("the lab's manifests");
        let mut input = oooi_controller::render::RenderInput::default();
        input.add_yaml(path, &text).expect("manifests");
        let out =
            oooi_controller::render::render(&input, "a-push-token-of-the-test").expect("render");
        out.objects
            .iter()
            .filter(|o| o["kind"] == "Deployment")
            .map(|d| {
                (
                    d["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    d["metadata"]["labels"]["app.kubernetes.io/component"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    d["spec"]["template"]["spec"].clone(),
                )
            })
            .collect()
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// The podman flags of the controller's promises, written from its own
    /// constants: non-root without capabilities, or UID 0 with exactly the
    /// agent's two; no privilege escalation, read-only root, the sysctls.
    fn promised(agent: bool, fs_group: Option<i64>) -> Vec<String> {
        let mut want = if agent {
            strings(&["--user", "0:0"])
        } else {
            vec!["--user".into(), format!("{NON_ROOT_UID}:{NON_ROOT_UID}")]
        };
        if let Some(g) = fs_group {
            want.extend(["--group-add".to_string(), g.to_string()]);
        }
        want.extend(strings(&["--cap-drop", "ALL"]));
        if agent {
            want.extend(["--cap-add".to_string(), AGENT_CAPABILITIES.join(",")]);
        }
        want.extend(strings(&[
            "--security-opt",
            "no-new-privileges",
            "--read-only",
            "--read-only-tmpfs=false",
        ]));
        for (name, value) in POD_SYSCTLS {
            want.extend(["--sysctl".to_string(), format!("{name}={value}")]);
        }
        want
    }

    #[test]
    fn the_lab_runs_every_rendered_container_with_exactly_its_pods_security() {
        let pods = rendered_pods();
        let mut seen = Vec::new();
        for (deployment, component, pod) in &pods {
            let fs_group = pod["securityContext"]["fsGroup"].as_i64();
            // The lease volume is the only one written to disk and kept:
            // only the DHCP pod asks for the group that owns it.
            assert_eq!(
                fs_group,
                (component == "dhcp").then_some(NON_ROOT_UID),
                "{deployment}"
            );
            for list in ["containers", "initContainers"] {
                for c in pod[list].as_array().into_iter().flatten() {
                    let name = c["name"].as_str().expect("container name");
                    let run = RunAs::of_pod(pod, name).expect("the lab runs it");
                    let agent = name == "address-agent";
                    assert_eq!(
                        run.podman_args(),
                        promised(agent, fs_group),
                        "{deployment}/{name}"
                    );
                    seen.push(format!("{component}/{name}"));
                }
            }
        }
        seen.sort();
        seen.dedup();
        // The containers the lab starts (steps::infra, steps::node_loss).
        assert_eq!(
            seen,
            [
                "dhcp/dhcp",
                "dns/address-agent",
                "dns/dns",
                "proxy/address-agent",
                "proxy/proxy"
            ]
        );
    }

    #[test]
    fn the_expected_process_status_is_what_the_kernel_reports_for_it() {
        let pods = rendered_pods();
        let pod = |c: &str| {
            pods.iter()
                .find(|p| p.1 == c)
                .map(|p| p.2.clone())
                .expect("pod")
        };
        let dhcp = RunAs::of_pod(&pod("dhcp"), "dhcp").unwrap();
        let agent = RunAs::of_pod(&pod("dns"), "address-agent").unwrap();
        // /proc/<pid>/status of such processes under runc.
        let status = |uid: u32, groups: &str, cap_eff: &str| {
            format!(
                "Name:\tx\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\n\
                 Groups:\t{groups}\nCapInh:\t0000000000000000\nCapEff:\t{cap_eff}\n\
                 NoNewPrivs:\t1\nSeccomp:\t2\n"
            )
        };
        assert_eq!(
            process_status(&status(65532, "65532 ", "0000000000000000")).unwrap()
                + " read-only root",
            dhcp.expected_status()
        );
        assert_eq!(
            dhcp.expected_status(),
            "uid 65532 gid 65532 groups [] caps [] no_new_privs 1 read-only root"
        );
        assert_eq!(
            process_status(&status(0, "", "0000000000003000")).unwrap() + " read-only root",
            agent.expected_status()
        );
        assert_eq!(
            agent.expected_status(),
            "uid 0 gid 0 groups [] caps [NET_ADMIN NET_RAW] no_new_privs 1 read-only root"
        );
        // One capability more is seen.
        assert_ne!(
            process_status(&status(0, "", "0000000000003400")).unwrap() + " read-only root",
            agent.expected_status()
        );
    }

    #[test]
    fn supplementary_groups_other_than_the_primary_are_compared() {
        let run = RunAs {
            user: Some(1000),
            group: Some(0),
            fs_group: Some(2000),
            supplemental_groups: vec![3000],
            ..RunAs::default()
        };
        let status = "Uid:\t1000\t1000\t1000\t1000\nGid:\t0\t0\t0\t0\nGroups:\t0 2000 3000\n\
                      CapEff:\t0000000000000000\nNoNewPrivs:\t0\n";
        assert_eq!(process_status(status).unwrap(), run.expected_status());
        assert_eq!(
            run.podman_args(),
            strings(&[
                "--user",
                "1000:0",
                "--group-add",
                "2000",
                "--group-add",
                "3000"
            ])
        );
    }

    fn pod_with(container_sc: Value, pod_sc: Value) -> Value {
        json!({
            "containers": [{"name": "c", "securityContext": container_sc}],
            "securityContext": pod_sc,
        })
    }

    #[test]
    fn a_security_field_the_lab_cannot_run_is_refused_by_name() {
        for (container_sc, pod_sc, field) in [
            (
                json!({"seLinuxOptions": {"level": "s0"}}),
                json!({}),
                "seLinuxOptions",
            ),
            (json!({"procMount": "Unmasked"}), json!({}), "procMount"),
            (
                json!({}),
                json!({"appArmorProfile": {"type": "RuntimeDefault"}}),
                "appArmorProfile",
            ),
            (
                json!({"seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}}),
                json!({}),
                "Localhost",
            ),
        ] {
            let e = RunAs::of_pod(&pod_with(container_sc, pod_sc), "c").unwrap_err();
            assert!(format!("{e:#}").contains(field), "{field}: {e:#}");
        }
    }

    #[test]
    fn a_container_the_kubelet_would_refuse_is_refused() {
        let e = RunAs::of_pod(
            &pod_with(json!({"runAsNonRoot": true, "runAsUser": 0}), json!({})),
            "c",
        )
        .unwrap_err();
        assert!(e.to_string().contains("runAsNonRoot"), "{e}");
        let e = RunAs::of_pod(&pod_with(json!({}), json!({})), "other").unwrap_err();
        assert!(e.to_string().contains("other"), "{e}");
    }

    #[test]
    fn the_containers_fields_win_over_the_pods() {
        let run = RunAs::of_pod(
            &pod_with(
                json!({"runAsUser": 7, "seccompProfile": {"type": "RuntimeDefault"}}),
                json!({"runAsUser": 5, "runAsGroup": 6, "seccompProfile": {"type": "Unconfined"}}),
            ),
            "c",
        )
        .unwrap();
        assert_eq!(
            (run.user, run.group, run.seccomp_unconfined),
            (Some(7), Some(6), false)
        );
    }

    #[test]
    fn on_openshift_the_namespace_assigns_the_user_and_the_image_names_it_here() {
        // The controller leaves UID and fsGroup of the non-root containers
        // to restricted-v2; the lab then runs the image's user.
        let (_, _, pod) = rendered_pods()
            .into_iter()
            .find(|p| p.1 == "dhcp")
            .expect("dhcp");
        let mut d: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(json!({
            "metadata": {"name": "d"},
            "spec": {"selector": {}, "template": {"spec": pod}},
        }))
        .expect("deployment");
        oooi_controller::plan::workload::scc::for_openshift(&mut d);
        let pod = serde_json::to_value(&d.spec.expect("spec").template.spec).expect("pod");
        let run = RunAs::of_pod(&pod, "dhcp").unwrap();
        assert_eq!((run.user, run.group, run.fs_group), (None, None, None));
        assert!(!run.podman_args().contains(&"--user".to_string()));
        assert!(
            run.expected_status()
                .starts_with("uid 65532 gid 65532 groups []")
        );
    }

    #[test]
    fn the_kubelets_fs_group_change_gives_a_claim_to_the_group() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        let claim = dir.path().join("claim");
        std::fs::create_dir_all(claim.join("sub")).unwrap();
        std::fs::write(claim.join("leases.json"), "{}").unwrap();
        std::fs::set_permissions(
            claim.join("leases.json"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        std::fs::set_permissions(&claim, std::fs::Permissions::from_mode(0o755)).unwrap();
        let run = RunAs {
            fs_group: Some(65532),
            ..RunAs::default()
        };
        run.prepare(&claim, Volume::Claim).unwrap();
        let meta = |p: &Path| std::fs::metadata(p).unwrap();
        assert_eq!(meta(&claim).gid(), 65532);
        assert_eq!(meta(&claim).mode() & 0o7777, 0o2775);
        assert_eq!(meta(&claim.join("sub")).mode() & 0o2070, 0o2070);
        assert_eq!(meta(&claim.join("leases.json")).gid(), 65532);
        assert_eq!(meta(&claim.join("leases.json")).mode() & 0o7777, 0o660);
        // Without an fsGroup a claim stays as its provisioner left it.
        let plain = dir.path().join("plain");
        std::fs::create_dir_all(&plain).unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o755)).unwrap();
        RunAs::default().prepare(&plain, Volume::Claim).unwrap();
        assert_eq!(meta(&plain).mode() & 0o7777, 0o755);
        // An emptyDir is anyone's.
        RunAs::default().prepare(&plain, Volume::EmptyDir).unwrap();
        assert_eq!(meta(&plain).mode() & 0o7777, 0o777);
    }

    #[test]
    fn a_read_only_root_is_read_from_mountinfo() {
        let ro = "22 1 0:21 / / ro,relatime - overlay overlay rw\n30 22 0:5 / /dev rw - tmpfs tmpfs rw\n";
        let rw = "22 1 0:21 / / rw,relatime - overlay overlay rw\n";
        assert!(root_read_only(ro));
        assert!(!root_read_only(rw));
    }
}
