//! oooi-wasm-host (work in progress).
