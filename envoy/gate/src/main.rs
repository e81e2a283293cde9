//! `oooi-envoy-gate`: runs Envoy and opens its routing listeners only once
//! the replica holds its routing table (see the library's documentation).

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use oooi_envoy_gate::{Gate, Phase, exit_code, parse_listeners};
use oooi_process::duration::{parse as duration, parse_nonzero};
use oooi_process::logs::Logs;
use oooi_process::ready::{ReadyUrl, probe};
use oooi_reload::{Outcome, Reloader, Settings};

/// Runs Envoy and keeps its routing listeners closed until the replica holds
/// its routing table.
///
/// Envoy must read its listeners (LDS) from OUT/lds.json (oooi-envoy renders
/// such a bootstrap when `listeners_dir` is set). The gate writes there the
/// table API and metrics listeners of the rendered LDS file at once, then
/// runs the command; as soon as `GET READY` answers 200 it writes every
/// listener. Until then connections to the routing ports are refused by the
/// kernel, so a client moves on to the next proxy address instead of being
/// reset. Changes of the rendered file are carried over as they come.
///
/// SIGTERM or SIGINT drains first: the table API's and the readiness
/// listeners close (so
/// `GET READY` fails: the address agent hands the replica's VLAN addresses
/// to a live replica, the DNS servers stop naming it) while the routing
/// listeners keep serving for --drain; then the signal is passed on to the
/// command. A second SIGTERM or SIGINT is passed on at once, as are SIGHUP
/// and SIGQUIT. The command is killed if the gate dies; the gate exits with
/// the command's exit code (128 + signal if a signal ended it).
#[derive(Debug, Parser)]
#[command(name = "oooi-envoy-gate", version)]
struct Args {
    /// The rendered LDS file (in the config mount; a ConfigMap `..data` swap
    /// is followed).
    #[arg(long, env = "OOOI_GATE_LISTENERS")]
    listeners: PathBuf,
    /// The directory Envoy's bootstrap reads LDS from (an emptyDir).
    #[arg(long, env = "OOOI_GATE_OUT")]
    out: PathBuf,
    /// The readiness URL, e.g. http://127.0.0.1:9446/ready on the
    /// readiness listener (200 once the replica holds a table).
    #[arg(long, env = "OOOI_GATE_READY")]
    ready: ReadyUrl,
    /// How often to ask READY until it answers 200.
    #[arg(long, default_value = "100ms", value_parser = parse_nonzero)]
    poll: Duration,
    /// After SIGTERM or SIGINT, how long the routing listeners keep serving
    /// with the table API closed before the signal reaches the command (0s:
    /// at once). Keep it below the pod's terminationGracePeriodSeconds.
    #[arg(long, env = "OOOI_GATE_DRAIN", default_value = "5s", value_parser = duration)]
    drain: Duration,
    /// The command to run (Envoy and its arguments), after `--`.
    #[arg(last = true, required = true, num_args = 1..)]
    command: Vec<String>,
}

/// Signals passed on to the command.
const FORWARDED: [libc::c_int; 4] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT];

fn signal_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in FORWARDED {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

fn main() -> ExitCode {
    Logs::new("info").to_stderr().init();
    let args = Args::parse();
    match run(args) {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::from(1)
        }
    }
}

fn run(args: Args) -> Result<i32> {
    // Block the forwarded signals in every thread (threads inherit the mask
    // of the thread that spawns them); one thread takes them with sigwait.
    let set = signal_set();
    // SAFETY: changes this thread's signal mask, before any other thread.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        bail!(
            "cannot block signals: {}",
            std::io::Error::from_raw_os_error(rc)
        );
    }

    let (first, reloader) = Reloader::start(&args.listeners, Settings::default(), |text: &str| {
        parse_listeners(text)
    })
    .context("the rendered listeners")?;
    let gate = Arc::new(Mutex::new(Gate::new(first, &args.out)?));
    tracing::info!(
        listeners = %args.listeners.display(),
        out = %args.out.display(),
        ready = ?args.ready,
        "routing listeners closed until the replica holds its table"
    );
    let _watch = reloader.spawn({
        let gate = Arc::clone(&gate);
        move |outcome| match outcome {
            Outcome::Accepted(doc) => {
                let mut g = gate.lock().unwrap_or_else(|p| p.into_inner());
                match g.update(doc) {
                    Ok(true) => tracing::info!(phase = ?g.phase(), "listeners changed"),
                    Ok(false) => {}
                    Err(e) => tracing::error!("{e}"),
                }
            }
            Outcome::Rejected(why) => {
                tracing::warn!("rendered listeners rejected, the previous ones stay: {why}")
            }
        }
    });

    let parent = std::process::id();
    let mut command = Command::new(&args.command[0]);
    command.args(&args.command[1..]);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        command.pre_exec(move || {
            let none = {
                let mut s: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut s);
                s
            };
            libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            // Envoy must not outlive the gate (a SIGKILL of the gate would
            // leave it serving with no one watching its listeners).
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent as libc::pid_t {
                return Err(std::io::Error::other(
                    "the gate exited before the command started",
                ));
            }
            Ok(())
        });
    }
    let mut child = command
        .spawn()
        .with_context(|| format!("cannot run {:?}", args.command[0]))?;
    let pid = child.id() as libc::pid_t;
    tracing::info!(pid, command = ?args.command, "started");

    std::thread::spawn({
        let gate = Arc::clone(&gate);
        let drain = args.drain;
        move || {
            let mut draining = false;
            loop {
                let mut signal: libc::c_int = 0;
                // SAFETY: waits for one of the blocked signals of `set`.
                if unsafe { libc::sigwait(&set, &mut signal) } != 0 {
                    continue;
                }
                let stop = signal == libc::SIGTERM || signal == libc::SIGINT;
                if stop && !draining && !drain.is_zero() {
                    draining = true;
                    let mut g = gate.lock().unwrap_or_else(|p| p.into_inner());
                    match g.drain() {
                        Ok(_) => tracing::info!(
                            signal,
                            drain_ms = drain.as_millis() as u64,
                            "draining: the table API is closed, the routing listeners serve until the drain ends"
                        ),
                        Err(e) => tracing::error!("{e}"),
                    }
                    drop(g);
                    std::thread::spawn(move || {
                        std::thread::sleep(drain);
                        tracing::info!(signal, pid, "drained: passing the signal on");
                        // SAFETY: sends a signal to our own child.
                        unsafe { libc::kill(pid, signal) };
                    });
                    continue;
                }
                tracing::info!(signal, pid, "passing the signal on");
                // SAFETY: sends a signal to our own child.
                unsafe { libc::kill(pid, signal) };
            }
        }
    });

    std::thread::spawn({
        let gate = Arc::clone(&gate);
        let started = Instant::now();
        move || {
            loop {
                if let Ok(200) = probe(&args.ready, Duration::from_secs(1)) {
                    let mut g = gate.lock().unwrap_or_else(|p| p.into_inner());
                    match g.open() {
                        Ok(_) => {
                            tracing::info!(
                                after_ms = started.elapsed().as_millis() as u64,
                                path = %g.path().display(),
                                "the replica holds its table: routing listeners open"
                            );
                            debug_assert_eq!(g.phase(), Phase::Open);
                            return;
                        }
                        Err(e) => tracing::error!("{e}"),
                    }
                }
                std::thread::sleep(args.poll);
            }
        }
    });

    let status = child.wait().context("waiting for the command")?;
    let code = exit_code(status);
    tracing::info!(code, "the command exited");
    Ok(code)
}
