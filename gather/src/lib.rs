//! `gather`: oooi's must-gather. Run by `oc adm must-gather --image=<the
//! oooi-must-gather image>`, it reads oooi's resources, their children,
//! events, logs, the hosted-cluster objects they refer to and each
//! component's own state (through the API server's pod proxy) and writes
//! them as a tree under `/must-gather/oooi` ([`tree`] documents the
//! layout). It never writes a Secret's data or a token ([`redact`]).

pub mod components;
pub mod gather;
pub mod inventory;
pub mod kinds;
pub mod redact;
pub mod summary;
pub mod tree;
