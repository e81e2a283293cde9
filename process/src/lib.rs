//! What every oooi program does the same way, so that a contract between
//! programs is kept by one piece of code rather than by tests that compare
//! copies:
//!
//! - [`logs`]: the log setup of every binary: `RUST_LOG` over a default
//!   filter, text or JSON lines, colour only on a terminal;
//! - [`duration`]: the one duration syntax of flags and API fields
//!   (`500ms`, `5s`, `1h30m`);
//! - [`ready`]: the readiness GET one program sends another (the address
//!   agent and the proxy's gate ask a component whether it is ready).
//!
//! Not for the proxy-wasm filter: this crate links `tracing-subscriber`
//! and `clap`. What the filter shares lives in `oooi-vocabulary`.

pub mod duration;
pub mod logs;
pub mod ready;
