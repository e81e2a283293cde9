//! oooi-envoy (work in progress).
