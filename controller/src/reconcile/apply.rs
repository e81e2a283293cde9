//! Server-side apply that writes only when something changed.
//!
//! Every object is applied under the field manager `oooi-controller` with
//! `force` (the controller owns these fields). Re-applying an unchanged
//! object would be a no-op on the server but still a write request, and with
//! hundreds of attachments those add up, so before applying the desired
//! object is compared with the live one (from a watch cache or a GET):
//!
//! - the live object carries [`APPLIED_HASH`], the hash of the configuration
//!   last applied; a different hash means the desired object changed
//!   (including fields it no longer sets, which apply then removes);
//! - every field the desired object sets must be present with the same value
//!   in the live object; a difference means someone changed a field the
//!   controller owns, and the apply puts it back.
//!
//! Only when both hold is the write skipped.

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::crd::FIELD_MANAGER;

/// Annotation holding the hash of the last applied configuration.
pub const APPLIED_HASH: &str = oooi_vocabulary::labels::APPLIED_HASH;

/// What [`apply`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The live object already matched; no request was sent.
    Unchanged,
    /// The object was created or updated.
    Written,
}

/// Sets [`APPLIED_HASH`] on `desired` to the hash of its configuration
/// (without that annotation) and returns the hash.
pub fn stamp<K: Resource + Serialize>(desired: &mut K) -> String {
    desired.annotations_mut().remove(APPLIED_HASH);
    let hash = hash_of(&serde_json::to_value(&*desired).unwrap_or(Value::Null));
    desired
        .annotations_mut()
        .insert(APPLIED_HASH.to_string(), hash.clone());
    hash
}

fn hash_of(v: &Value) -> String {
    // serde_json maps are sorted (no preserve_order), so this is canonical.
    let bytes = serde_json::to_vec(v).unwrap_or_default();
    hex::encode(&Sha256::digest(&bytes)[..16])
}

/// True when every field set in `desired` has the same value in `live`.
/// Lists must have the same length and match element by element (the
/// server adds defaults inside elements, never elements).
pub fn is_subset(desired: &Value, live: &Value) -> bool {
    match (desired, live) {
        (Value::Object(d), Value::Object(l)) => d
            .iter()
            .all(|(k, dv)| dv.is_null() || l.get(k).is_some_and(|lv| is_subset(dv, lv))),
        (Value::Array(d), Value::Array(l)) => {
            d.len() == l.len() && d.iter().zip(l).all(|(dv, lv)| is_subset(dv, lv))
        }
        (Value::Number(d), Value::Number(l)) => d.as_f64() == l.as_f64(),
        (d, l) => d == l,
    }
}

/// True when `live` already holds the stamped `desired` object.
pub fn up_to_date<K: Resource + Serialize>(desired: &K, live: &K) -> bool {
    let want = desired.annotations().get(APPLIED_HASH);
    let have = live.annotations().get(APPLIED_HASH);
    if want.is_none() || want != have {
        return false;
    }
    let (Ok(d), Ok(l)) = (serde_json::to_value(desired), serde_json::to_value(live)) else {
        return false;
    };
    // Status is not ours to apply.
    let mut d = d;
    if let Some(o) = d.as_object_mut() {
        o.remove("status");
    }
    is_subset(&d, &l)
}

/// Deletes `name` through `api`: true when a delete went through, false
/// when the object was already gone (404 is the goal reached, not an error).
pub async fn delete_if_present<K>(api: &Api<K>, name: &str) -> kube::Result<bool>
where
    K: Resource + DeserializeOwned + Clone + std::fmt::Debug,
{
    match api.delete(name, &kube::api::DeleteParams::default()).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Applies `desired` (stamped here) unless `live` already matches it.
pub async fn apply<K>(api: &Api<K>, live: Option<&K>, mut desired: K) -> kube::Result<Applied>
where
    K: Resource + Serialize + DeserializeOwned + Clone + std::fmt::Debug,
{
    stamp(&mut desired);
    if let Some(live) = live
        && up_to_date(&desired, live)
    {
        return Ok(Applied::Unchanged);
    }
    let name = desired.name_any();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&desired),
    )
    .await?;
    Ok(Applied::Written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    fn cm(data: &str) -> ConfigMap {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "ns", "labels": {"a": "b"}},
            "data": {"config.yaml": data}
        }))
        .unwrap()
    }

    #[test]
    fn a_live_object_with_server_defaults_is_up_to_date() {
        let mut desired = cm("x");
        stamp(&mut desired);
        let mut live = desired.clone();
        live.metadata.resource_version = Some("7".into());
        live.metadata.uid = Some("u".into());
        live.labels_mut()
            .insert("added-by-someone".into(), "v".into());
        assert!(up_to_date(&desired, &live));
    }

    #[test]
    fn a_changed_or_drifted_object_is_not_up_to_date() {
        let mut desired = cm("x");
        stamp(&mut desired);
        let mut old = cm("old");
        stamp(&mut old);
        assert!(!up_to_date(&desired, &old), "desired changed");
        let mut drifted = desired.clone();
        drifted
            .data
            .as_mut()
            .unwrap()
            .insert("config.yaml".into(), "edited".into());
        assert!(!up_to_date(&desired, &drifted), "owned field edited");
        let unstamped = cm("x");
        assert!(!up_to_date(&desired, &unstamped), "never applied by us");
    }

    #[test]
    fn subset_compares_numbers_by_value_and_lists_by_position() {
        assert!(is_subset(&json!({"a": 1}), &json!({"a": 1.0, "b": 2})));
        assert!(is_subset(
            &json!({"ports": [{"port": 53}]}),
            &json!({"ports": [{"port": 53, "protocol": "UDP"}]})
        ));
        assert!(!is_subset(
            &json!({"ports": [{"port": 53}]}),
            &json!({"ports": [{"port": 53}, {"port": 54}]})
        ));
    }
}
