//! oooi-controller: turns `Infra` and `InfraClusterAttachment` custom resources
//! into the VLAN stack (DHCP, DNS, Envoy proxy) and keeps it converged.
//!
//! The modules read top-down, each using only those below it:
//!
//! - [`run`], [`controllers`]: the process (HTTP, leader election) and the
//!   wiring of every controller to its triggers and reconciler.
//! - [`reconcile`]: the reconcilers, one `observe → plan → apply → status`
//!   step each, over the caches and the planners; [`rollout`] (filter
//!   module checks) and [`push`] (route pushes) are the I/O they call.
//! - [`cache`], [`observe`], [`hosted`]: watch caches of the controller's own
//!   kinds, of the optional APIs (HyperShift, CAPI, KubeVirt) and of the
//!   hosted clusters. They know no reconciler.
//! - [`plan`]: pure planners, (CRs + observed state) → desired objects,
//!   configs, routing tables, readiness and conditions. No I/O. [`render`]
//!   (the offline `render` command) calls the same planners.
//! - [`inventory`]: the DHCP servers' lease inventory: pool figures for
//!   the status (pure summary and conditions, and the poll that asks the
//!   servers), the join of leases to VMs, Machines and hosted clusters, and
//!   the `leases` command.
//! - [`crd`]: the custom resource types; CRD YAML is generated from them.
//! - [`metrics`], [`leader`], [`rbac`], [`docs_reference`], [`olm`]: the
//!   metrics registry, leader election, the RBAC the controller needs, the
//!   CR reference pages of the docs, and the OLM bundle and catalog.
//! - `testing` (tests only, feature `testing`): the one `Infra` builder
//!   the tests of every crate share.

pub mod cache;
pub mod controllers;
pub mod crd;
pub mod docs_reference;
pub mod hosted;
pub mod inventory;
pub mod leader;
pub mod metrics;
pub mod observe;
pub mod olm;
pub mod plan;
pub mod probe;
pub mod push;
pub mod rbac;
pub mod reconcile;
pub mod render;
pub mod rollout;
pub mod run;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
