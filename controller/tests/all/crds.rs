//! The committed CRDs in `charts/oooi/crds/` are exactly what the Rust types
//! generate, and the schemas carry the validation and defaults they promise.

use std::collections::BTreeSet;
use std::path::PathBuf;

use crate::plan_support::schema_of;

use oooi_controller::crd;
use serde_json::Value;

const REGENERATE: &str =
    "regenerate with: cargo run -p oooi-controller -- crds --out charts/oooi/crds";

fn chart_crds() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../charts/oooi/crds")
}

#[test]
fn committed_crds_match_the_types() {
    let dir = chart_crds();
    let generated = crd::crd_files().expect("CRDs serialise");
    let mut expected = BTreeSet::new();
    for (name, yaml) in &generated {
        expected.insert(name.clone());
        let path = dir.join(name);
        let committed = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{} is missing ({e}); {REGENERATE}", path.display()));
        assert!(
            committed == *yaml,
            "{} drifted from the Rust types; {REGENERATE}",
            path.display()
        );
    }
    let present: BTreeSet<String> = std::fs::read_dir(&dir)
        .expect("charts/oooi/crds exists")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    let stale: Vec<&String> = present.difference(&expected).collect();
    assert!(stale.is_empty(), "stale CRD files {stale:?}; {REGENERATE}");
}

#[test]
fn every_kind_is_namespaced_with_status_and_printer_columns() {
    let crds = crd::crds();
    let names: Vec<String> = crds.iter().map(|c| c.spec.names.plural.clone()).collect();
    assert_eq!(
        names,
        [
            "infras",
            "infraclusterattachments",
            "dhcpservers",
            "dnsservers",
            "proxyservers"
        ]
    );
    for c in &crds {
        assert_eq!(c.spec.group, crd::GROUP);
        assert_eq!(c.spec.scope, "Namespaced");
        let v = &c.spec.versions[0];
        assert_eq!(v.name, crd::VERSION);
        assert!(
            v.subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        );
        assert!(
            v.additional_printer_columns
                .as_ref()
                .is_some_and(|p| p.len() >= 3),
            "{} has printer columns",
            c.spec.names.kind
        );
    }
    let ica = &crds[1];
    assert_eq!(ica.spec.names.short_names, Some(vec!["ica".to_string()]));
}

#[test]
fn schemas_carry_patterns_ranges_required_fields_and_defaults() {
    let infra = schema_of("Infra");
    let nc = &infra["properties"]["spec"]["properties"]["networkConfig"];
    assert!(nc["properties"]["cidr"]["pattern"].is_string());
    // An address of either family, by the API server's own formats.
    assert_eq!(
        nc["properties"]["gateway"]["anyOf"],
        serde_json::json!([{"format": "ipv4"}, {"format": "ipv6"}])
    );
    let req: Vec<&str> = nc["required"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    // The gateway defaults to the first host of the CIDR.
    assert!(req.contains(&"cidr") && !req.contains(&"gateway"));
    let dhcp = &infra["properties"]["spec"]["properties"]["infraComponents"]["properties"]["dhcp"];
    // Seconds or a duration such as "1h"; the planner checks the range.
    assert_eq!(dhcp["properties"]["leaseTime"]["default"], 3600);
    assert_eq!(
        dhcp["properties"]["leaseTime"]["x-kubernetes-int-or-string"],
        true
    );
    assert_eq!(dhcp["properties"]["enabled"]["default"], true);

    let ica = schema_of("InfraClusterAttachment");
    let spec = &ica["properties"]["spec"]["properties"];
    assert_eq!(
        spec["hostedClusterRef"]["properties"]["namespace"]["default"],
        "clusters"
    );
    let svc = &spec["services"]["items"]["properties"];
    assert_eq!(svc["port"]["maximum"].as_f64(), Some(65535.0));
    assert_eq!(svc["port"]["minimum"].as_f64(), Some(1.0));
    assert_eq!(spec["isolation"]["default"], "Standard");
    let modes: Vec<&str> = spec["isolation"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(modes, ["Standard", "Strict"]);
    assert!(spec["appsIngress"]["properties"]["metallb"].is_object());

    let proxy = schema_of("ProxyServer");
    let routes = &proxy["properties"]["spec"]["properties"]["routes"];
    assert_eq!(routes["type"], "array");
    let status = &proxy["properties"]["status"]["properties"];
    assert!(status["replicaStatus"]["items"]["properties"]["routesSynced"].is_object());
    assert!(status["filterDigest"].is_object());
}

#[test]
fn the_dhcp_config_schema_is_the_config_crates_so_typos_are_refused_at_admission() {
    let dhcp = schema_of("DHCPServer");
    let config = &dhcp["properties"]["spec"]["properties"]["config"];
    // Structural: no kept unknown fields, every field typed.
    assert!(config.get("x-kubernetes-preserve-unknown-fields").is_none());
    assert_eq!(config["type"], "object");
    let props = config["properties"].as_object().unwrap();
    for field in [
        "interface",
        "server_ip",
        "subnet",
        "gateway",
        "range",
        "excluded",
        "dns_servers",
        "lease_seconds",
        "reservations",
        "peer",
    ] {
        assert!(props.contains_key(field), "config.{field} is in the schema");
    }
    assert_eq!(props["lease_seconds"]["type"], "integer");
    assert_eq!(props["subnet"]["type"], "string");
    let required: BTreeSet<&str> = config["required"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(required, BTreeSet::from(["server_ip", "subnet", "range"]));
    let reservation = &props["reservations"]["items"];
    assert_eq!(reservation["type"], "object");
    assert!(reservation["properties"]["mac"].is_object());
    let text = serde_json::to_string(&dhcp).unwrap();
    assert!(!text.contains("$ref"), "every subschema is inlined");
}

#[test]
fn the_routes_schema_is_the_routes_crates_so_typos_are_refused_at_admission() {
    let proxy = schema_of("ProxyServer");
    let routes = &proxy["properties"]["spec"]["properties"]["routes"];
    assert_eq!(routes["type"], "array");
    let route = &routes["items"];
    assert!(route.get("x-kubernetes-preserve-unknown-fields").is_none());
    assert_eq!(route["type"], "object");
    let props = route["properties"].as_object().unwrap();
    for field in [
        "port",
        "sni",
        "source",
        "sources",
        "alias_source",
        "upstream",
        "owner",
    ] {
        assert!(
            props.contains_key(field),
            "routes[].{field} is in the schema"
        );
    }
    assert_eq!(props["port"]["type"], "integer");
    assert_eq!(props["port"]["minimum"], 1.0);
    let upstream = &props["upstream"];
    assert_eq!(upstream["type"], "object");
    assert!(upstream["properties"]["cluster"].is_object());
    assert!(upstream["properties"]["address"]["properties"]["host"].is_object());
    let text = serde_json::to_string(&proxy).unwrap();
    assert!(!text.contains("$ref"), "every subschema is inlined");
}

#[test]
fn the_dns_config_schema_is_the_config_crates_so_typos_are_refused_at_admission() {
    let dns = schema_of("DNSServer");
    let config = &dns["properties"]["spec"]["properties"]["config"];
    // Structural: no kept unknown fields, every field typed.
    assert!(config.get("x-kubernetes-preserve-unknown-fields").is_none());
    assert_eq!(config["type"], "object");
    let props = config["properties"].as_object().unwrap();
    for field in ["http", "ttl", "upstreams", "chaos", "clusters", "views"] {
        assert!(props.contains_key(field), "config.{field} is in the schema");
    }
    assert_eq!(props["ttl"]["type"], "integer");
    assert_eq!(config["required"], serde_json::json!(["views"]));
    let view = &props["views"]["items"];
    assert_eq!(view["type"], "object");
    assert!(
        view["properties"]
            .as_object()
            .is_some_and(|p| !p.is_empty())
    );
    let text = serde_json::to_string(&dns).unwrap();
    assert!(!text.contains("$ref"), "every subschema is inlined");
}
