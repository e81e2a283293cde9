//! Schemas of the component config documents embedded in the derived kinds.
//!
//! The config formats belong to their crates (`oooi-dhcp-config`,
//! `oooi-dns-config`, `oooi-routes`), which validate them. Each schema here
//! is the crate's own, generated from its types, so the API server rejects a
//! misspelt or mistyped field at admission instead of the controller failing
//! to decode the object later. In Rust the fields are the crates' own typed
//! structs.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

/// `schema` with its top-level description replaced.
fn described(mut schema: Schema, description: &str) -> Schema {
    schema.insert("description".into(), description.into());
    schema
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
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        described(
            oooi_dhcp_config::RawConfig::json_schema(generator),
            "The oooi-dhcp config file, validated by oooi-dhcp (see docs/dhcp.md).",
        )
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
        described(
            oooi_dns_config::RawConfig::json_schema(generator),
            "The oooi-dns config file, validated by oooi-dns (see docs/dns.md).",
        )
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
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        described(
            Vec::<oooi_routes::Route>::json_schema(generator),
            "Routes of the oooi routing table (see docs/data-path.md): each has `port`, exactly one of `sni`, `source` or `alias_source`, `upstream` and an optional `owner`.",
        )
    }
}
