//! Configs and lease tables for the crate's tests, benchmarks and fuzz
//! targets (feature `testing`; always on in this crate's unit tests), so
//! that each of them names only the fields it varies over a shared network.

pub mod yaml;

pub use yaml::{DOC_NET, WIDE_NET, WORKER_0, config, yaml};

use crate::leases::LeaseTable;

/// An empty lease table over [`config`]`(net, fields)`.
pub fn table(net: &str, fields: &[&str]) -> LeaseTable {
    LeaseTable::new(config(net, fields))
}
