//! Strict field validation of oooi objects against their CRD schemas, as the
//! API server does for `kubectl apply --validate=strict`: a field the schema
//! does not declare is named by its path, never dropped in silence.

use serde_json::Value;

/// The `openAPIV3Schema` of the CRD of `kind`, if it is one of oooi's.
fn schema_of(kind: &str) -> Option<Value> {
    let crd = super::crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)?;
    let version = crd.spec.versions.into_iter().next()?;
    serde_json::to_value(version.schema?.open_api_v3_schema?).ok()
}

/// The paths (`spec.networkConfig.dnsServerz`) of the fields of `doc` that the
/// CRD schema of its `kind` does not declare. `None`: not an oooi CRD kind.
pub fn unknown_fields(kind: &str, doc: &Value) -> Option<Vec<String>> {
    let schema = schema_of(kind)?;
    let mut out = Vec::new();
    walk(&schema, doc, "", &mut out);
    // The API server checks metadata against ObjectMeta; kube's schema
    // leaves it open, so `metadata` is not walked here.
    Some(out)
}

fn join(path: &str, key: &str) -> String {
    match path.is_empty() {
        true => key.to_string(),
        false => format!("{path}.{key}"),
    }
}

fn walk(schema: &Value, value: &Value, path: &str, out: &mut Vec<String>) {
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        return;
    }
    // A value one of several schemas describe (`anyOf`/`oneOf`): the API
    // server prunes by the structural schema, which lists no properties
    // there; leave it to deserialisation.
    if schema.get("anyOf").is_some() || schema.get("oneOf").is_some() {
        return;
    }
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            for (key, v) in map {
                if path.is_empty() && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                let here = join(path, key);
                match (properties.and_then(|p| p.get(key)), additional) {
                    (Some(s), _) => walk(s, v, &here, out),
                    (None, Some(Value::Object(_))) => {
                        if let Some(a) = additional {
                            walk(a, v, &here, out);
                        }
                    }
                    (None, Some(Value::Bool(true))) => {}
                    (None, _) if properties.is_none() && additional.is_none() => {}
                    (None, _) => out.push(here),
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    walk(s, v, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::InfraBuilder;
    use serde_json::json;

    /// The tests' Infra with a label (an open map).
    fn infra() -> InfraBuilder {
        InfraBuilder::new().merge(json!({"metadata": {"labels": {"any": "thing"}}}))
    }

    #[test]
    fn a_misspelt_field_is_named_by_its_path() {
        let doc = infra()
            .set("/spec/networkConfig/dnsServerz", json!(["192.0.2.53"]))
            .dns(json!({"imagee": "x"}))
            .set("/spec/speling", 1)
            .json();
        let mut got = unknown_fields("Infra", &doc).unwrap();
        got.sort();
        assert_eq!(
            got,
            [
                "spec.infraComponents.dns.imagee",
                "spec.networkConfig.dnsServerz",
                "spec.speling"
            ]
        );
    }

    #[test]
    fn declared_fields_maps_and_open_objects_pass() {
        let doc = infra()
            .dhcp(json!({"leaseTime": "1h", "resources": {"requests": {"cpu": "10m"}}}))
            .set("/spec/availability/nodeLossTolerationSeconds", 30)
            .json();
        assert_eq!(unknown_fields("Infra", &doc).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn other_kinds_are_not_checked_here() {
        assert!(unknown_fields("Namespace", &json!({})).is_none());
    }
}
