//! oooi-dns (work in progress).
