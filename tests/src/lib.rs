//! oooi-tests (work in progress).
