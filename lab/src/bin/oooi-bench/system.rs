//! The machine around the run: its load and CPU pinning.

pub(crate) fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

pub(crate) fn pin_self(cpus: &str) {
    if cpus.is_empty() {
        return;
    }
    // Before the runtime starts, so every thread inherits the mask.
    let pid = std::process::id().to_string();
    match std::process::Command::new("taskset")
        .args(["-a", "-p", "-c", cpus, &pid])
        .output()
    {
        Ok(o) if o.status.success() => {}
        _ => eprintln!("warning: could not pin the benchmark to CPUs {cpus}"),
    }
}
