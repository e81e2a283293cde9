//! oooi-dhcp (work in progress).
