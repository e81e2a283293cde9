//! oooi-routes (work in progress).
