//! The per-worker compiled table.
//!
//! Shared data is host-side and every read copies the value into the VM (a
//! host call and a call back into the VM for the copy). So connections do not
//! read it: the root context's tick reads the 8-byte generation key every
//! 50 ms, and the table API refreshes its own worker at once after a push; a
//! connection reads shared data only while its worker has no table yet (the
//! first connections after a start or a VM reload). The full table is decoded
//! and compiled only when the generation differs from the cached one. A push
//! therefore routes new connections on the worker that took it at once and
//! on the other workers within one tick.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use oooi_routes::{Router, compact};
use proxy_wasm::hostcalls;
use proxy_wasm::types::LogLevel;

use crate::filter_state::{Calls, calls_for};
use crate::{GENERATION_KEY, TABLE_KEY, log, metrics};

/// A compiled table plus, per distinct upstream, the encoded foreign-function
/// calls that select it.
pub struct Compiled {
    pub router: Router,
    pub calls: Vec<Calls>,
}

thread_local! {
    static CACHE: RefCell<Option<Rc<Compiled>>> = const { RefCell::new(None) };
    /// Generation whose load was attempted last; a bad table is not retried
    /// on every connection.
    static SEEN: Cell<u64> = const { Cell::new(0) };
}

/// Reads the published generation (0 when no table is loaded).
pub fn published_generation() -> u64 {
    match hostcalls::get_shared_data(GENERATION_KEY) {
        Ok((Some(b), _)) if b.len() == 8 => {
            u64::from_le_bytes(b.as_slice().try_into().unwrap_or([0; 8]))
        }
        _ => 0,
    }
}

/// The table to route with (loaded first if this worker has none yet).
pub fn current() -> Option<Rc<Compiled>> {
    if let Some(table) = CACHE.with(|c| c.borrow().clone()) {
        return Some(table);
    }
    refresh();
    CACHE.with(|c| c.borrow().clone())
}

/// Rebuilds the cached table when the published generation changed.
pub fn refresh() {
    let published = published_generation();
    if published == 0 || published == SEEN.with(Cell::get) {
        return;
    }
    SEEN.with(|s| s.set(published));
    let bytes = match hostcalls::get_shared_data(TABLE_KEY) {
        Ok((Some(b), _)) => b,
        Ok((None, _)) => return,
        Err(e) => {
            metrics::inc(metrics::ROUTE_ERRORS);
            log(
                LogLevel::Error,
                &format!("cannot read the routing table: {e:?}"),
            );
            return;
        }
    };
    match compact::decode(&bytes) {
        Ok((table, digest)) => {
            let generation = table.generation;
            let router = Router::with_digest(digest, table);
            let calls = router.upstreams().iter().map(calls_for).collect();
            log(
                LogLevel::Info,
                &format!(
                    "routing table generation {generation} loaded ({} routes, {})",
                    router.table().routes.len(),
                    router.digest()
                ),
            );
            CACHE.with(|c| *c.borrow_mut() = Some(Rc::new(Compiled { router, calls })));
            metrics::inc(metrics::TABLE_RELOADS);
            metrics::set(metrics::TABLE_GENERATION, generation);
        }
        Err(e) => {
            metrics::inc(metrics::ROUTE_ERRORS);
            log(
                LogLevel::Error,
                &format!(
                    "routing table generation {published} is unreadable, keeping the old one: {e}"
                ),
            );
        }
    }
}
