//! oooi-controller: turns `Infra` and `InfraClusterAttachment` custom resources
//! into the VLAN stack (DHCP, DNS, Envoy proxy) and keeps it converged.
//!
//! - [`crd`]: the custom resource types; CRD YAML is generated from them.
//! - [`plan`]: pure planners, (CRs + observed state) → desired objects, configs
//!   and the routing table. No I/O.
//! - [`render`]: the offline `render` command over manifest files.

pub mod crd;
pub mod plan;
pub mod render;
