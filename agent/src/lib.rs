//! `oooi-addr-agent`: runs beside each DNS and proxy replica (its own
//! container, the pod's network namespace) and moves the component's VLAN
//! addresses between ready replicas, the way VRRP does rather than the
//! kube-vip way: the replicas advertise themselves to each other on the
//! VLAN every 200 ms, and each computes the owner of every address from
//! what it hears with one pure function, so the VLAN itself is the witness
//! of who is alive and the Kubernetes API is never asked. The owner adds
//! the address to its VLAN interface and announces it by gratuitous ARP;
//! an address goes back to its home replica once that one is ready again.
//!
//! - [`machine`]: the decision logic (pure, injected time); [`advert`]:
//!   the adverts' wire format;
//! - [`netlink`], [`arp`], [`plane`]: the interface; [`defend`]: the
//!   holder's answer to other hosts claiming its addresses; [`tickle`]:
//!   ending a lost holder's connections; [`run`]: the driver;
//!   [`metrics`]: `oooi_agent_*`.
//!
//! docs/failover.md explains the design, the windows and the settings.

pub mod advert;
pub mod arp;
pub mod defend;
pub mod machine;
pub mod metrics;
pub mod netlink;
pub mod plane;
pub mod run;
pub mod tickle;
