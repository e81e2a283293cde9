//! The pod-template hash of a planned Deployment: what tells whether
//! applying a plan would restart its pod. The planner stamps it
//! ([`crate::plan::workload`]); the rolling gate reads it back from the live
//! object ([`crate::plan::workload::rolling`]).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use oooi_vocabulary::labels;
use sha2::{Digest, Sha256};

/// Annotation on a planned Deployment: a digest of its pod template, so the
/// live object tells whether applying the plan would restart its pod
/// (the API server fills in defaults, so templates cannot be compared).
pub const TEMPLATE_HASH_ANNOTATION: &str = labels::TEMPLATE_HASH;

/// The digest of a Deployment's pod template (16 hex digits of SHA-256 of
/// its JSON).
pub fn template_hash(d: &Deployment) -> String {
    let template = d
        .spec
        .as_ref()
        .and_then(|s| serde_json::to_vec(&s.template).ok())
        .unwrap_or_default();
    hex::encode(&Sha256::digest(&template)[..8])
}

/// Sets [`TEMPLATE_HASH_ANNOTATION`] on a planned Deployment.
pub fn stamp_template_hash(d: &mut Deployment) {
    let hash = template_hash(d);
    d.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(TEMPLATE_HASH_ANNOTATION.to_string(), hash);
}

/// The template hash a (live) Deployment carries.
pub fn stamped_hash(d: &Deployment) -> Option<&str> {
    d.metadata
        .annotations
        .as_ref()?
        .get(TEMPLATE_HASH_ANNOTATION)
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_hash_follows_the_template_only() {
        let mut d: Deployment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "d"},
            "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "c", "image": "i:1"}]}}}
        }))
        .unwrap();
        stamp_template_hash(&mut d);
        let first = stamped_hash(&d).unwrap().to_string();
        assert_eq!(first.len(), 16);
        // Restamping is stable; the annotation is outside the template.
        stamp_template_hash(&mut d);
        assert_eq!(stamped_hash(&d), Some(first.as_str()));
        d.spec.as_mut().unwrap().replicas = Some(1);
        assert_eq!(template_hash(&d), first);
        d.spec
            .as_mut()
            .unwrap()
            .template
            .spec
            .as_mut()
            .unwrap()
            .containers[0]
            .image = Some("i:2".into());
        assert_ne!(template_hash(&d), first);
    }
}
