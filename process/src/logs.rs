//! The log setup of every oooi binary.
//!
//! `RUST_LOG` picks what is logged (tracing's `EnvFilter` directives); when
//! it is unset or not valid the program's default applies (`info`, with
//! chatty libraries turned down). Lines are tracing-subscriber's `fmt`
//! format: text (`<RFC 3339 time>  INFO <target>: <message> <field>=<value>`)
//! or, where a program offers `--log-format json`, one JSON object a line
//! (`timestamp`, `level`, `fields` with the `message`, `target`). Colour
//! only when the output is a terminal: container logs are read as plain
//! text, by people and by the lab's log checks.

use std::io::IsTerminal;

use tracing::Dispatch;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::util::SubscriberInitExt;

/// Log output format (`--log-format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Where the lines go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Standard output: the servers and the controller.
    Stdout,
    /// Standard error: programs whose standard output is their product (a
    /// must-gather report) or another program's (the proxy's gate runs
    /// Envoy).
    Stderr,
}

/// One program's log setup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Logs {
    /// The filter when `RUST_LOG` is unset or not valid, e.g. `info` or
    /// `info,kube=warn`.
    pub default_filter: &'static str,
    /// Where the lines go.
    pub output: Output,
    /// Text or JSON.
    pub format: LogFormat,
}

impl Logs {
    /// Text lines on standard output, `default_filter` unless `RUST_LOG`
    /// says otherwise.
    pub const fn new(default_filter: &'static str) -> Logs {
        Logs {
            default_filter,
            output: Output::Stdout,
            format: LogFormat::Text,
        }
    }

    /// The same on standard error.
    pub const fn to_stderr(self) -> Logs {
        Logs {
            output: Output::Stderr,
            ..self
        }
    }

    /// The same in `format`.
    pub const fn format(self, format: LogFormat) -> Logs {
        Logs { format, ..self }
    }

    /// Installs the process's subscriber (and forwards the `log` crate's
    /// records to it). Call once, first thing in `main`; panics if a
    /// subscriber is already installed.
    pub fn init(self) {
        let rust_log = std::env::var(EnvFilter::DEFAULT_ENV).ok();
        let filter = filter(rust_log.as_deref(), self.default_filter);
        let dispatch = match self.output {
            Output::Stdout => {
                self.dispatch(filter, std::io::stdout, std::io::stdout().is_terminal())
            }
            Output::Stderr => {
                self.dispatch(filter, std::io::stderr, std::io::stderr().is_terminal())
            }
        };
        dispatch.init();
    }

    /// The subscriber writing to `writer`, with colour if `ansi`.
    pub fn dispatch<W>(&self, filter: EnvFilter, writer: W, ansi: bool) -> Dispatch
    where
        W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
    {
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(writer)
            .with_ansi(ansi);
        match self.format {
            LogFormat::Text => builder.into(),
            LogFormat::Json => builder.json().into(),
        }
    }
}

/// The filter of `rust_log` (the `RUST_LOG` value), or of `default` when
/// it is unset or not valid.
pub fn filter(rust_log: Option<&str>, default: &str) -> EnvFilter {
    rust_log
        .and_then(|v| EnvFilter::try_new(v).ok())
        .unwrap_or_else(|| EnvFilter::new(default))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Lines written, shared with the test.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'w> MakeWriter<'w> for Captured {
        type Writer = Captured;
        fn make_writer(&'w self) -> Captured {
            self.clone()
        }
    }

    /// What `emit` logs under `logs` with `RUST_LOG` = `rust_log`.
    fn lines(logs: Logs, rust_log: Option<&str>, emit: impl FnOnce()) -> Vec<String> {
        let out = Captured::default();
        let dispatch = logs.dispatch(filter(rust_log, logs.default_filter), out.clone(), false);
        tracing::dispatcher::with_default(&dispatch, emit);
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        text.lines().map(str::to_string).collect()
    }

    fn events() {
        tracing::info!(target: "oooi_dns::server", port = 53u16, "listening");
        tracing::debug!(target: "oooi_dns::server", "hidden at info");
        tracing::info!(target: "hickory_server::server", "chatty library");
        tracing::warn!(target: "hickory_server::server", "library trouble");
    }

    #[test]
    fn text_lines_carry_time_level_target_message_and_fields() {
        let out = lines(Logs::new("info,hickory_server=warn"), None, events);
        assert_eq!(out.len(), 2, "{out:?}");
        let first = &out[0];
        // `2026-12-07T22:30:00.123456Z  INFO oooi_dns::server: listening port=53`
        let (time, rest) = first.split_once(' ').unwrap();
        assert!(time.ends_with('Z') && time.contains('T'), "{first}");
        assert_eq!(rest, " INFO oooi_dns::server: listening port=53");
        assert!(
            out[1].ends_with(" WARN hickory_server::server: library trouble"),
            "{}",
            out[1]
        );
        assert!(!first.contains('\u{1b}'), "no colour off a terminal");
    }

    #[test]
    fn json_lines_are_objects_with_the_same_fields() {
        let logs = Logs::new("info").format(LogFormat::Json);
        let out = lines(
            logs,
            None,
            || tracing::info!(target: "oooi_controller::run", leader = true, "leading"),
        );
        assert_eq!(out.len(), 1, "{out:?}");
        let v: serde_json::Value = serde_json::from_str(&out[0]).unwrap();
        assert_eq!(v["level"], "INFO");
        assert_eq!(v["target"], "oooi_controller::run");
        assert_eq!(v["fields"]["message"], "leading");
        assert_eq!(v["fields"]["leader"], true);
        assert!(v["timestamp"].as_str().unwrap().ends_with('Z'), "{v}");
    }

    #[test]
    fn rust_log_wins_over_the_default_unless_it_is_not_valid() {
        let debug = lines(Logs::new("info"), Some("debug"), events);
        assert_eq!(debug.len(), 4, "{debug:?}");
        let only_ours = lines(Logs::new("info"), Some("warn,oooi_dns=debug"), events);
        assert_eq!(only_ours.len(), 3, "{only_ours:?}");
        // Not a filter: the program's default applies, as if unset.
        let bad = lines(Logs::new("info,hickory_server=warn"), Some("[{"), events);
        assert_eq!(bad.len(), 2, "{bad:?}");
    }

    #[test]
    fn builders_keep_the_other_settings() {
        let logs = Logs::new("info,kube=warn")
            .to_stderr()
            .format(LogFormat::Json);
        assert_eq!(
            logs,
            Logs {
                default_filter: "info,kube=warn",
                output: Output::Stderr,
                format: LogFormat::Json
            }
        );
        assert_eq!(LogFormat::default(), LogFormat::Text);
    }
}
