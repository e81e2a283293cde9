//! `/bin/bash` of the must-gather image.
//!
//! `oc adm must-gather` starts both containers of its pod with
//! `/bin/bash -c …`: the gather container with a disk-usage watcher beside
//! `/usr/bin/gather` (`du`, `df`, `awk`, `sed`, `sleep`), the copy
//! container with `sleep infinity`, and it copies the result out with `tar`.
//! The image carries a static BusyBox for those commands, whose POSIX shell
//! (ash, at `/bin/sh`) runs what oc writes; BusyBox picks its applet by the
//! name it is called under and has none called `bash`, so this program is
//! `/bin/bash`: it runs `/bin/sh` with the same arguments.

use std::os::unix::process::CommandExt as _;
use std::process::ExitCode;

/// The shell that runs in bash's place.
const SHELL: &str = "/bin/sh";

fn main() -> ExitCode {
    let err = std::process::Command::new(SHELL)
        .arg0("sh")
        .args(std::env::args_os().skip(1))
        .exec();
    eprintln!("bash: cannot run {SHELL}: {err}");
    ExitCode::from(127)
}
