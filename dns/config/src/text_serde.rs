//! Serde and JSON schema for the value types written as one string: parsed
//! with their `FromStr` (whose error quotes the value), written with their
//! `Display`.

/// Implements `Serialize`, `Deserialize` and `JsonSchema` (a string with
/// `$description`) for `$t` through its `FromStr` and `Display`.
macro_rules! text_serde {
    ($t:ty, $name:literal, $description:literal) => {
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'_, str> as serde::Deserialize>::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
        impl schemars::JsonSchema for $t {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                $name.into()
            }
            fn inline_schema() -> bool {
                true
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({ "type": "string", "description": $description })
            }
        }
    };
}
