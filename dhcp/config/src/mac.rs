//! Ethernet hardware addresses.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A 48-bit Ethernet hardware address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Mac(pub [u8; 6]);

impl Mac {
    /// Parses `aa:bb:cc:dd:ee:ff` or `aa-bb-cc-dd-ee-ff` (case-insensitive).
    pub fn parse(s: &str) -> Option<Mac> {
        let parts: Vec<&str> = s.split([':', '-']).collect();
        if parts.len() != 6 {
            return None;
        }
        let mut out = [0u8; 6];
        for (i, p) in parts.iter().enumerate() {
            if p.len() != 2 {
                return None;
            }
            out[i] = u8::from_str_radix(p, 16).ok()?;
        }
        Some(Mac(out))
    }
}

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

impl FromStr for Mac {
    type Err = String;
    fn from_str(s: &str) -> Result<Mac, String> {
        Mac::parse(s.trim()).ok_or_else(|| format!("`{s}` is not a MAC (aa:bb:cc:dd:ee:ff)"))
    }
}

impl Serialize for Mac {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Mac {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Mac, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for Mac {
    fn schema_name() -> Cow<'static, str> {
        "Mac".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "description": "Ethernet hardware address, `aa:bb:cc:dd:ee:ff` (or with `-`).",
            "pattern": "^[0-9A-Fa-f]{2}([:-][0-9A-Fa-f]{2}){5}$",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_separators_and_prints_colons() {
        let m = Mac::parse("02-00-00-00-00-AB").unwrap();
        assert_eq!(m.to_string(), "02:00:00:00:00:ab");
        assert_eq!(Mac::parse("02:00:00:00:00:ab"), Some(m));
        for bad in [
            "",
            "02:00:00:00:00",
            "02:00:00:00:00:0g",
            "020:00:00:00:00:0",
        ] {
            assert_eq!(Mac::parse(bad), None, "{bad}");
        }
    }
}
