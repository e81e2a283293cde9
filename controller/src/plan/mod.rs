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
//! 3. [`workload::rolling::gate`]: whether a replica of a component with several may
//!    take a change that restarts its pod now.

pub mod conditions;
pub mod dhcp;
pub mod dns;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod hosted;
pub mod infra;
pub mod labels;
pub mod names;
pub mod network_policy;
pub mod proxy;
pub mod workload;

pub use conditions::{PlannedCondition, condition_status, merge_conditions};
pub use infra::attachments::{AttachmentOutcome, Exclusion};
pub use infra::observed::{
    HostedClusterKey, Observed, ObservedCluster, ObservedMachine, ObservedVmi,
};
pub use infra::{DesiredComponents, InfraPlan, plan_infra};
pub use workload::Children;
