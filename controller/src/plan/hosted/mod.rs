//! What oooi writes in a hosted cluster and in front of it, planned without
//! I/O (the reconciler in [`crate::reconcile::hosted`] applies it; `render`
//! prints it too): the apps ingress (MetalLB pool, L2 advertisement, apps
//! Service), the kinds and labels of everything written there, and the
//! management-side public DNS Services.

pub mod apps_ingress;
pub mod hosted_objects;
pub mod public_dns;
