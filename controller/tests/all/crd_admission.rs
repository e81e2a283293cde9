//! The API server's admission of the derived kinds, played against the
//! generated CRD schemas: an object as the planner derives it is accepted,
//! and a misspelt field or a wrong type in its embedded config is refused,
//! for DHCPServer, DNSServer and ProxyServer alike.
//!
//! [`admit`] checks what the API server checks of a structural schema with
//! strict field validation (kubectl's default): types, `required`, `enum`,
//! lengths, ranges and patterns, and no field the schema does not name
//! unless `x-kubernetes-preserve-unknown-fields` or `additionalProperties`
//! allows it.

#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

use crate::plan_support;

use oooi_controller::plan::{Observed, plan_infra};
use plan_support::{attachment, infra, schema_of};
use serde_json::{Value, json};

/// The errors the API server would answer `value` with, each naming its
/// path; empty when it admits it.
fn admit(schema: &Value, value: &Value) -> Vec<String> {
    // The API server checks these itself; a CRD's schema leaves them out.
    let mut value = value.clone();
    if let Some(fields) = value.as_object_mut() {
        for implicit in ["apiVersion", "kind", "metadata"] {
            fields.remove(implicit);
        }
    }
    let mut errors = Vec::new();
    check(schema, &value, "", true, &mut errors);
    errors
}

/// `structural`: a node of the schema's tree (where unknown fields are
/// refused), not a branch of `anyOf`/`oneOf`/`allOf` (which only adds
/// value checks).
fn check(schema: &Value, value: &Value, path: &str, structural: bool, errors: &mut Vec<String>) {
    let at = if path.is_empty() { "<root>" } else { path };
    if value.is_null() {
        if schema["nullable"] == true || !structural {
            return;
        }
        if schema.get("type").is_some() {
            errors.push(format!("{at}: null is not allowed"));
        }
        return;
    }
    if schema["x-kubernetes-int-or-string"] == true {
        if !(value.is_i64() || value.is_u64() || value.is_string()) {
            errors.push(format!("{at}: must be an integer or a string"));
        }
    } else if let Some(t) = schema["type"].as_str() {
        let ok = match t {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            other => panic!("{at}: schema type {other} is not handled here"),
        };
        if !ok {
            errors.push(format!("{at}: must be of type {t}, got {value}"));
            return;
        }
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        errors.push(format!("{at}: {value} is not one of {allowed:?}"));
    }
    if let Some(s) = value.as_str() {
        let chars = s.chars().count() as u64;
        if schema["minLength"].as_u64().is_some_and(|m| chars < m) {
            errors.push(format!("{at}: shorter than {}", schema["minLength"]));
        }
        if schema["maxLength"].as_u64().is_some_and(|m| chars > m) {
            errors.push(format!("{at}: longer than {}", schema["maxLength"]));
        }
        if let Some(p) = schema["pattern"].as_str()
            && !regex::Regex::new(p).unwrap().is_match(s)
        {
            errors.push(format!("{at}: `{s}` does not match {p}"));
        }
        if let Some(f) = schema["format"].as_str()
            && !format_admits(f, s)
        {
            errors.push(format!("{at}: `{s}` is not of format {f}"));
        }
    }
    if let Some(n) = value.as_f64() {
        if schema["minimum"].as_f64().is_some_and(|m| n < m) {
            errors.push(format!("{at}: below {}", schema["minimum"]));
        }
        if schema["maximum"].as_f64().is_some_and(|m| n > m) {
            errors.push(format!("{at}: above {}", schema["maximum"]));
        }
    }
    if let Some(items) = value.as_array()
        && let Some(item_schema) = schema.get("items")
    {
        for (i, item) in items.iter().enumerate() {
            check(
                item_schema,
                item,
                &format!("{path}[{i}]"),
                structural,
                errors,
            );
        }
    }
    if let Some(fields) = value.as_object() {
        for required in schema["required"].as_array().into_iter().flatten() {
            let name = required.as_str().unwrap();
            if !fields.contains_key(name) {
                errors.push(format!("{at}: `{name}` is required"));
            }
        }
        let properties = schema["properties"].as_object();
        for (name, field) in fields {
            let field_path = if path.is_empty() {
                name.clone()
            } else {
                format!("{path}.{name}")
            };
            if let Some(s) = properties.and_then(|p| p.get(name)) {
                check(s, field, &field_path, structural, errors);
            } else if let Some(s) = schema.get("additionalProperties").filter(|s| s.is_object()) {
                check(s, field, &field_path, structural, errors);
            } else if structural
                && schema["x-kubernetes-preserve-unknown-fields"] != true
                && schema["additionalProperties"] != true
            {
                errors.push(format!("{field_path}: unknown field"));
            }
        }
    }
    // How many branches must match: all, at least one, exactly one.
    for (junctor, least, most) in [
        ("allOf", usize::MAX, usize::MAX),
        ("anyOf", 1, usize::MAX),
        ("oneOf", 1, 1),
    ] {
        let Some(branches) = schema[junctor].as_array() else {
            continue;
        };
        let passing = branches
            .iter()
            .filter(|b| {
                let mut e = Vec::new();
                check(b, value, path, false, &mut e);
                e.is_empty()
            })
            .count();
        let ok = if least == usize::MAX {
            passing == branches.len()
        } else {
            passing >= least && passing <= most
        };
        if !ok {
            errors.push(format!("{at}: {passing} of the {junctor} branches match"));
        }
    }
}

/// The API server's string formats that name addresses, as its format
/// checker reads them (Go's `net.ParseIP` and `net.ParseCIDR`: `ipv4` is
/// any address written with dots, `ipv6` any written with colons, `cidr`
/// an address of either family with a prefix length, host bits allowed).
/// A format the API server does not know constrains nothing.
fn format_admits(format: &str, s: &str) -> bool {
    use std::net::IpAddr;
    let ip = |t: &str| t.parse::<IpAddr>().ok();
    match format {
        "ipv4" => ip(s).is_some() && s.contains('.'),
        "ipv6" => ip(s).is_some() && s.contains(':'),
        "cidr" => s.split_once('/').is_some_and(|(a, p)| {
            let width = match ip(a) {
                Some(IpAddr::V4(_)) => 32,
                Some(IpAddr::V6(_)) => 128,
                None => return false,
            };
            !p.is_empty()
                && p.bytes().all(|b| b.is_ascii_digit())
                && p.parse::<u32>().is_ok_and(|n| n <= width)
        }),
        _ => true,
    }
}

/// The three derived objects of an Infra with one attachment, as the
/// planner makes them (so the proxy has routes of every kind).
fn derived() -> [(&'static str, Value); 3] {
    let i = infra("oooi", "vlan");
    let a = attachment("oooi", "c1", "vlan", "c1");
    let plan = plan_infra(&i, &[a], &Observed::default());
    assert!(plan.errors.is_empty(), "{:?}", plan.errors);
    let d = plan.desired.unwrap();
    let [dhcp] = <[_; 1]>::try_from(d.dhcp).expect("one DHCP server");
    [
        ("DHCPServer", serde_json::to_value(dhcp).unwrap()),
        (
            "DNSServer",
            serde_json::to_value(d.dns.into_iter().next().unwrap()).unwrap(),
        ),
        (
            "ProxyServer",
            serde_json::to_value(d.proxy.into_iter().next().unwrap()).unwrap(),
        ),
    ]
}

/// Sets field `pointer` (its parent object exists) to `v`.
fn set(obj: &mut Value, pointer: &str, v: Value) {
    let (parent, name) = pointer.rsplit_once('/').unwrap();
    obj.pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .unwrap_or_else(|| panic!("{parent} is an object"))
        .insert(name.to_string(), v);
}

fn rename(obj: &mut Value, pointer: &str, from: &str, to: &str) {
    let map = obj
        .pointer_mut(pointer)
        .and_then(Value::as_object_mut)
        .unwrap_or_else(|| panic!("{pointer} is an object"));
    let v = map
        .remove(from)
        .unwrap_or_else(|| panic!("{pointer}/{from} exists"));
    map.insert(to.to_string(), v);
}

#[test]
fn derived_objects_are_admitted() {
    for (kind, obj) in derived() {
        let errors = admit(&schema_of(kind), &obj);
        assert!(errors.is_empty(), "{kind}: {errors:?}\n{obj:#}");
    }
}

#[test]
fn a_typo_or_a_wrong_type_in_an_embedded_config_is_refused_at_admission() {
    type Break = fn(&mut Value);
    let cases: [(&str, &str, Break, &str); 8] = [
        (
            "DHCPServer",
            "misspelt field",
            |o| rename(o, "/spec/config", "server_ip", "server_ipp"),
            "spec.config.server_ipp: unknown field",
        ),
        (
            "DHCPServer",
            "wrong type",
            |o| set(o, "/spec/config/lease_seconds", json!("an hour")),
            "spec.config.lease_seconds: must be of type integer",
        ),
        (
            "DHCPServer",
            "misspelt nested field",
            |o| rename(o, "/spec/config/range", "start", "begin"),
            "spec.config.range.begin: unknown field",
        ),
        (
            "DNSServer",
            "misspelt field",
            |o| rename(o, "/spec/config/views/0", "name", "nmae"),
            "spec.config.views[0].nmae: unknown field",
        ),
        (
            "DNSServer",
            "wrong type",
            |o| set(o, "/spec/config/ttl", json!("thirty")),
            "spec.config.ttl: must be of type integer",
        ),
        (
            "ProxyServer",
            "misspelt field",
            |o| rename(o, "/spec/routes/0", "port", "prot"),
            "spec.routes[0].prot: unknown field",
        ),
        (
            "ProxyServer",
            "wrong type",
            |o| set(o, "/spec/routes/0/port", json!("443")),
            "spec.routes[0].port: must be of type integer",
        ),
        (
            "ProxyServer",
            "misspelt upstream",
            |o| rename(o, "/spec/routes/0/upstream", "address", "adress"),
            "spec.routes[0].upstream.adress: unknown field",
        ),
    ];
    let objects = derived();
    for (kind, what, break_it, want) in cases {
        let mut obj = objects.iter().find(|(k, _)| *k == kind).unwrap().1.clone();
        break_it(&mut obj);
        let errors = admit(&schema_of(kind), &obj);
        assert!(
            errors.iter().any(|e| e.starts_with(want)),
            "{kind} with a {what}: expected `{want}`, got {errors:?}"
        );
    }
}

/// Networks on both sides of every part of the VLAN rule: host bits, the
/// /29 bound, the whole range of prefixes, IPv6, junk and odd spellings.
const VLAN_NETWORKS: &[&str] = &[
    "192.0.2.0/24",
    "10.0.0.0/8",
    "0.0.0.0/0",
    "192.0.2.8/29",
    "192.0.2.0/28",
    "192.0.2.7/24",
    "192.0.2.1/29",
    "10.0.0.1/8",
    "1.0.0.0/0",
    "192.0.2.0/30",
    "192.0.2.0/31",
    "192.0.2.0/32",
    "192.0.2.0/33",
    "192.0.2.0/99",
    "192.0.2.0",
    "192.0.2.0/",
    "192.0.2/24",
    "256.0.2.0/24",
    "0192.0.2.0/24",
    "192.0.2.0/024",
    "192.0.2.0/08",
    "2001:db8::/64",
    "::/0",
    "::ffff:192.0.2.0/120",
    "fe80::/10",
    "nope",
    "",
    "192.0.2.0/-1",
    "192.0.2.0/+24",
    "192.0.2.0/24/24",
];

/// Spellings of valid networks other than their canonical form: admission
/// refuses them, and so does the controller's parser.
const NON_CANONICAL: &[&str] = &["192.000.2.0/24", " 192.0.2.0/24", "192.0.2.0/24 "];

/// The Infra CRD's schema of `spec.networkConfig.cidr`.
fn cidr_schema() -> Value {
    schema_of("Infra")["properties"]["spec"]["properties"]["networkConfig"]["properties"]["cidr"]
        .clone()
}

/// Admission of a `cidr` value: the structural checks ([`admit`]: type,
/// pattern, length), then the CEL rules of `x-kubernetes-validations` as the
/// API server runs them (Kubernetes' CEL libraries, by `kube-cel`, built
/// without its IP and CIDR library: API servers before 1.31 lack it for CRD
/// rules, so a rule that calls it is refused here as there).
fn admit_cidr(validator: &kube_cel::Validator, value: &str) -> (bool, bool) {
    let schema = cidr_schema();
    let structural = admit(&schema, &json!(value)).is_empty();
    let cel = validator.validate(&schema, &json!(value), None).is_ok();
    (structural, cel)
}

#[test]
fn admission_accepts_exactly_the_vlan_networks_the_controller_accepts() {
    let schema = cidr_schema();
    let rules = schema["x-kubernetes-validations"].as_array().unwrap();
    assert_eq!(
        rules[0]["rule"],
        oooi_vocabulary::VLAN_NETWORK_CEL_RULE,
        "the CRD carries the vocabulary's rule"
    );
    let validator = kube_cel::Validator::new();
    let mut differ = Vec::new();
    for network in VLAN_NETWORKS.iter().chain(NON_CANONICAL) {
        let (structural, cel) = admit_cidr(&validator, network);
        let controller = oooi_vocabulary::VlanNetwork::parse(network);
        if structural && cel != controller.is_ok() {
            differ.push(format!(
                "{network:?}: pattern and length {structural}, CEL rule {cel}, controller {controller:?}"
            ));
        } else if !structural && controller.is_ok() {
            differ.push(format!(
                "{network:?}: refused by the pattern, controller {controller:?}"
            ));
        }
    }
    // No spelling at all that one side admits and the other refuses.
    let expected: Vec<&str> = Vec::new();
    let found: Vec<&str> = differ
        .iter()
        .map(|d| d.split('"').nth(1).unwrap_or_default())
        .collect();
    assert_eq!(found, expected, "{differ:#?}");
    // Each half does its share: the CEL rule refuses host bits and IPv6 the
    // pattern alone would not (it is really evaluated), the pattern the
    // prefixes past /29 the CEL rule alone would admit.
    assert_eq!(admit_cidr(&validator, "192.0.2.7/24"), (true, false));
    assert_eq!(admit_cidr(&validator, "192.0.2.0/30"), (false, true));
    let v6 = validator.validate(&schema, &json!("2001:db8::/64"), None);
    let said = format!("{v6:?}");
    assert!(
        said.contains(oooi_vocabulary::IPV6_VLAN_REFUSED),
        "the CEL rules refuse IPv6 on their own, saying why: {said}"
    );
    assert!(
        validator
            .validate(&schema, &json!("192.0.2.0/24"), None)
            .is_ok()
    );
}

/// The Infra's address fields (each an address of either family) as the
/// API server admits them: an address of either family passes the schema
/// (the controller then checks it is a host of the VLAN), and what is no
/// address is refused at admission, as the controller refuses it.
#[test]
fn address_fields_admit_either_family_and_refuse_what_is_no_address() {
    let schema = schema_of("Infra");
    let good = serde_json::to_value(infra("oooi", "vlan")).unwrap();
    assert_eq!(admit(&schema, &good), Vec::<String>::new());
    let fields = [
        "/spec/networkConfig/gateway",
        "/spec/infraComponents/dhcp/serverIP",
        "/spec/infraComponents/dhcp/rangeStart",
        "/spec/infraComponents/dhcp/rangeEnd",
        "/spec/infraComponents/dns/serverIP",
        "/spec/infraComponents/proxy/serverIP",
    ];
    for field in fields {
        let path = field.trim_start_matches('/').replace('/', ".");
        for value in ["192.0.2.9", "2001:db8::9", "::ffff:192.0.2.9"] {
            let mut obj = good.clone();
            set(&mut obj, field, json!(value));
            assert_eq!(
                admit(&schema, &obj),
                Vec::<String>::new(),
                "{path} = {value}"
            );
            assert!(oooi_vocabulary::IpAddress::parse(value).is_ok(), "{value}");
        }
        for value in [
            "10.0.0.300",
            "abc",
            "",
            "192.0.2.9/24",
            "192.0.2",
            "192.0.2.09",
        ] {
            let mut obj = good.clone();
            set(&mut obj, field, json!(value));
            let errors = admit(&schema, &obj);
            assert!(
                errors.iter().any(|e| e.starts_with(&format!("{path}: "))),
                "{path} = {value:?} is refused naming the field: {errors:?}"
            );
            assert!(oooi_vocabulary::IpAddress::parse(value).is_err(), "{value}");
        }
    }
    // Upstream resolvers: an address of either family, with or without a
    // port, or `resolv.conf`.
    for (value, admitted) in [
        ("10.0.0.10", true),
        ("10.0.0.10:5353", true),
        ("2001:db8::53", true),
        ("[2001:db8::53]:5353", true),
        ("resolv.conf", true),
        ("10.0.0.300", false),
        ("10.0.0.300:53", false),
        ("abc", false),
        ("resolver:53", false),
    ] {
        let mut obj = good.clone();
        set(&mut obj, "/spec/networkConfig/dnsServers", json!([value]));
        let errors = admit(&schema, &obj);
        assert_eq!(
            errors.is_empty(),
            admitted,
            "dnsServers [{value:?}]: {errors:?}"
        );
        if !admitted {
            assert!(
                errors
                    .iter()
                    .any(|e| e.starts_with("spec.networkConfig.dnsServers[0]: ")),
                "{errors:?}"
            );
        }
    }
    // The list forms take each item as one address.
    let mut obj = good.clone();
    set(
        &mut obj,
        "/spec/infraComponents/dns/serverIPs",
        json!(["192.0.2.3", "abc"]),
    );
    let errors = admit(&schema, &obj);
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("spec.infraComponents.dns.serverIPs[1]: ")),
        "{errors:?}"
    );
}
