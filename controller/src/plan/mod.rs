//! Pure planners: (Infra, its attachments, observed cluster state) → derived
//! DHCPServer/DNSServer/ProxyServer objects, their child objects, and the
//! status the reconciler writes. No I/O, no clock, no randomness: every
//! input (observed state, push token, current time) is an argument.
//!
//! Two stages, so the derived kinds stay usable on their own:
//! 1. [`plan_infra`]: Infra + attachments + [`Observed`] → [`InfraPlan`]
//!    (the three derived objects, each holding its whole config, plus the
//!    Infra's and every attachment's conditions).
//! 2. [`dhcp::children`], [`dns::children`], [`proxy::children`]: one derived
//!    object → its Deployment, ConfigMap/Secret, ServiceAccount, Services, PVC.
//! 3. [`rolling::gate`]: whether a replica of a component with several may
//!    take a change that restarts its pod now.

pub mod aggregate;
pub mod apps_ingress;
pub mod apps_pools;
pub mod attachments;
pub mod availability;
pub mod conditions;
pub mod cudn;
pub mod dhcp;
pub mod dns;
pub mod filter;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod hosted_objects;
pub mod images;
pub mod infra;
pub mod labels;
pub mod legacy;
pub mod names;
pub mod network;
pub mod network_policy;
pub mod observed;
pub mod placement;
pub mod pod_security;
pub mod pools;
pub mod proxy;
pub mod public_dns;
pub mod readiness;
pub mod reservations;
pub mod resources;
pub mod rolling;
pub mod scc;
pub mod template_hash;
pub mod workers;
pub mod workload;

pub use attachments::{AttachmentOutcome, Exclusion};
pub use conditions::{PlannedCondition, condition_status, merge_conditions};
pub use infra::{DesiredComponents, InfraPlan, plan_infra};
pub use observed::{HostedClusterKey, Observed, ObservedCluster, ObservedMachine, ObservedVmi};
pub use workload::Children;
