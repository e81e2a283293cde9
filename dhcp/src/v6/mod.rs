//! The DHCPv6 decision engine (RFC 8415): pure, no sockets, on dhcproto's
//! v6 codec.
//!
//! [`decide::handle`] takes the bytes of one client message (already
//! unwrapped from any Relay-Forward), a [`decide::Context`] with what the
//! I/O layer saw (frame source MAC, RFC 6939 client link-layer address from
//! a relay, unicast or multicast, the time), and the [`leases::LeaseTable`];
//! it returns the reply bytes and the lease records the caller must make
//! durable before sending ([`decide::Answer::store`]), or why the message
//! was dropped.
//!
//! * [`config`]: the typed v6 section (range, reservations by MAC,
//!   lifetimes, DNS options, Rapid Commit).
//! * [`duid`]: DUID parsing, the server's own DUID-LL, and which MAC a
//!   client is known by ([`duid::client_mac`], order of preference there).
//! * [`relay`]: Relay-Forward taken apart, Relay-Reply built (raw bytes).
//! * [`leases`]: the binding table keyed by (DUID, IAID), with the MAC kept
//!   for reservations and for giving a re-installed machine (new DUID, same
//!   MAC) its address back.
//!
//! Only IA_NA is served: IA_TA is answered NoAddrsAvail and IA_PD
//! NoPrefixAvail inside the IA, as RFC 8415 asks of a server that has none.

pub mod config;
pub mod decide;
pub mod duid;
pub mod leases;
pub mod relay;

pub use config::V6Config;
pub use decide::{Answer, Context, Dropped, handle};
pub use leases::{Ia, LeaseTable, Record};

#[cfg(test)]
mod tests;
