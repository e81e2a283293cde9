//! oooi-controller: turns `Infra` and `InfraClusterAttachment` custom resources
//! into the VLAN stack (DHCP, DNS, Envoy proxy) and keeps it converged.
//!
//! - [`crd`]: the custom resource types; CRD YAML is generated from them.
//! - [`plan`]: pure planners, (CRs + observed state) → desired objects, configs
//!   and the routing table. No I/O.
//! - [`render`]: the offline `render` command over manifest files.
//! - [`docs_reference`]: the CR reference pages of the docs, from the CRD schemas.

pub mod crd;
pub mod docs_reference;
pub mod plan;
pub mod render;
// ctrl-reconcile: the I/O half (reconcilers, route pusher, observation of
// HyperShift/CAPI/KubeVirt, metrics, leader election, `run` and `rbac`).
pub mod leader;
pub mod metrics;
pub mod observe;
pub mod push;
pub mod rbac;
pub mod reconcile;
pub mod run;
// filter rollout: new filter modules checked in wasmtime, then rolled out.
pub mod rollout;
// hosted-cluster engineer: apps ingress in the hosted cluster, public DNS (issue 7).
pub mod hosted;
