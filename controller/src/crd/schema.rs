//! Schemas of the component config documents embedded in the derived kinds.
//!
//! The config formats belong to their crates (`oooi-dhcp`, `oooi-dns-config`,
//! `oooi-routes`), which validate them. The DNS config's schema is the config
//! crate's own (generated from its types), so the API server rejects a
//! misspelt or mistyped field at admission; the DHCP config and the routes
//! are still "an object" whose fields are kept
//! (`x-kubernetes-preserve-unknown-fields`). In Rust the fields are the
//! crates' own typed structs.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

fn preserved_object(description: &str) -> Schema {
    json_schema!({
        "type": "object",
        "description": description,
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// The DHCP server's config file (`oooi_dhcp_config::RawConfig`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DhcpConfigDocument(pub oooi_dhcp_config::RawConfig);

impl JsonSchema for DhcpConfigDocument {
    fn schema_name() -> Cow<'static, str> {
        "DhcpConfigDocument".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        preserved_object("The oooi-dhcp config file, validated by oooi-dhcp (see docs/dhcp.md).")
    }
}

/// The DNS server's config file (`oooi_dns_config::RawConfig`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DnsConfigDocument(pub oooi_dns_config::RawConfig);

impl JsonSchema for DnsConfigDocument {
    fn schema_name() -> Cow<'static, str> {
        "DnsConfigDocument".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        // The config crate's own schema: the API server rejects a misspelt
        // or mistyped field at admission.
        let mut schema = oooi_dns_config::RawConfig::json_schema(generator);
        schema.insert(
            "description".into(),
            "The oooi-dns config file, validated by oooi-dns (see docs/dns.md).".into(),
        );
        schema
    }
}

/// The routes of the proxy's routing table (`oooi_routes::Route`). The
/// generation is chosen by the pusher, so the spec holds only the routes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RoutesDocument(pub Vec<oooi_routes::Route>);

impl JsonSchema for RoutesDocument {
    fn schema_name() -> Cow<'static, str> {
        "RoutesDocument".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "array",
            "description": "Routes of the oooi routing table (see docs/data-path.md): each has `port`, exactly one of `sni`, `source` or `alias_source`, `upstream` and an optional `owner`.",
            "items": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
            },
        })
    }
}
