//! oooi SNI router proxy-wasm module (work in progress).
