//! Proxy-wasm shared data, shareable between several VMs.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// Outcome of a failed [`SharedData::set`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetError {
    /// The caller's CAS did not match the stored one.
    CasMismatch,
}

#[derive(Debug, Default)]
struct Inner {
    entries: BTreeMap<String, (Vec<u8>, u32)>,
    last_cas: u32,
}

/// Key → (bytes, cas) store with Envoy's semantics.
///
/// In Envoy it lives outside every VM (keyed by `vm_id`), so all worker
/// threads see it and it survives VM reloads. Clone one `SharedData` into
/// several [`crate::FilterHost`]s to emulate several worker threads, or into a
/// new host after a trap to emulate a reload.
#[derive(Debug, Clone, Default)]
pub struct SharedData(Arc<Mutex<Inner>>);

impl SharedData {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A poisoned lock only means another host thread panicked; the map is still consistent.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The value and CAS stored under `key`.
    pub fn get(&self, key: &str) -> Option<(Vec<u8>, u32)> {
        self.lock().entries.get(key).cloned()
    }

    /// Store `value` under `key`. As in Envoy, `cas == 0` writes
    /// unconditionally, a missing key is always written, and otherwise `cas`
    /// must equal the stored CAS. Every write gets a fresh, non-zero CAS.
    pub fn set(&self, key: &str, value: &[u8], cas: u32) -> Result<u32, SetError> {
        let mut inner = self.lock();
        if let Some((_, stored)) = inner.entries.get(key)
            && cas != 0
            && cas != *stored
        {
            return Err(SetError::CasMismatch);
        }
        inner.last_cas = inner.last_cas.checked_add(1).unwrap_or(1);
        let new_cas = inner.last_cas;
        inner
            .entries
            .insert(key.to_owned(), (value.to_vec(), new_cas));
        Ok(new_cas)
    }

    /// All keys currently stored, sorted.
    pub fn keys(&self) -> Vec<String> {
        self.lock().entries.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cas_zero_is_unconditional_and_stale_cas_is_refused() {
        let shared = SharedData::default();
        let first = shared.set("k", b"a", 0).expect("first write");
        let second = shared.set("k", b"b", first).expect("matching cas");
        assert_ne!(first, second);
        assert_eq!(shared.set("k", b"c", first), Err(SetError::CasMismatch));
        assert_eq!(shared.get("k").map(|(v, _)| v), Some(b"b".to_vec()));
        shared.set("k", b"d", 0).expect("cas 0 always writes");
        assert!(
            shared.set("new", b"x", 12345).is_ok(),
            "missing key ignores cas"
        );
    }
}
