//! Whether a proxy replica holds the table the controller wants it to hold.
//!
//! A replica is ready when it holds a table and that table is not older than
//! the one the controller last announced to it (the *expected* table, set
//! through the table API even when the full push failed). The same verdict
//! serves the replica's `GET /ready`, the table API's read-back and the
//! controller's explanation of a replica's state.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::table::{MAX_GENERATION, generation_is_newer};

/// The table the controller announced as current: its generation, and the
/// digest when the controller knows it (a replica at this very generation
/// with another digest holds another table).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expected {
    /// Generation, 1..=[`MAX_GENERATION`].
    pub generation: u64,
    /// `sha256:<64 hex>` of the table, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

impl Expected {
    /// Parses and checks the body of `PUT /v1/routes/expected`.
    pub fn from_json(bytes: &[u8]) -> Result<Expected, String> {
        let e: Expected = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        if !(1..=MAX_GENERATION).contains(&e.generation) {
            return Err(format!(
                "generation: {} is outside 1..={MAX_GENERATION}",
                e.generation
            ));
        }
        if let Some(d) = &e.digest {
            let hex = d.strip_prefix("sha256:").unwrap_or("");
            if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!("digest: {d:?} is not sha256:<64 hex digits>"));
            }
        }
        Ok(e)
    }

    /// The stored form: 8 bytes of generation (little endian), then the
    /// digest's bytes (none when unknown).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.generation.to_le_bytes().to_vec();
        if let Some(d) = &self.digest {
            out.extend_from_slice(d.as_bytes());
        }
        out
    }

    /// Reads [`Expected::encode`]'s output; `None` if it is not one.
    pub fn decode(bytes: &[u8]) -> Option<Expected> {
        let (generation, digest) = bytes.split_first_chunk::<8>()?;
        let generation = u64::from_le_bytes(*generation);
        let digest = match digest {
            [] => None,
            d => Some(std::str::from_utf8(d).ok()?.to_string()),
        };
        (1..=MAX_GENERATION)
            .contains(&generation)
            .then_some(Expected { generation, digest })
    }
}

/// The verdict on one replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// It holds a table, and none newer was announced.
    Ready,
    /// It holds no table.
    NoTable,
    /// It holds an older generation than the announced one.
    Behind {
        /// The generation it holds.
        loaded: u64,
        /// The announced generation.
        expected: u64,
    },
    /// It holds the announced generation, but another table under it.
    OtherDigest {
        /// The generation both share.
        generation: u64,
        /// The digest it holds.
        loaded: String,
        /// The announced digest.
        expected: String,
    },
}

impl Readiness {
    /// Decides from the loaded table (generation and digest) and the
    /// announced one. A loaded generation newer than the announced one is
    /// ready: the controller moved on, or another push landed first.
    pub fn of(loaded: Option<(u64, &str)>, expected: Option<&Expected>) -> Readiness {
        let Some((generation, digest)) = loaded else {
            return Readiness::NoTable;
        };
        let Some(expected) = expected else {
            return Readiness::Ready;
        };
        if generation == expected.generation {
            return match &expected.digest {
                Some(d) if d != digest => Readiness::OtherDigest {
                    generation,
                    loaded: digest.to_string(),
                    expected: d.clone(),
                },
                _ => Readiness::Ready,
            };
        }
        if generation_is_newer(expected.generation, generation) {
            Readiness::Behind {
                loaded: generation,
                expected: expected.generation,
            }
        } else {
            Readiness::Ready
        }
    }

    /// Whether the replica may serve as ready.
    pub fn is_ready(&self) -> bool {
        *self == Readiness::Ready
    }

    /// A short label for logs, metrics and the API's answers.
    pub fn reason(&self) -> &'static str {
        match self {
            Readiness::Ready => "ready",
            Readiness::NoTable => "no_table",
            Readiness::Behind { .. } => "behind",
            Readiness::OtherDigest { .. } => "other_digest",
        }
    }
}

impl fmt::Display for Readiness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Readiness::Ready => f.write_str("holds the current routing table"),
            Readiness::NoTable => f.write_str("no routing table loaded"),
            Readiness::Behind { loaded, expected } => write!(
                f,
                "holds generation {loaded}, older than the expected generation {expected}"
            ),
            Readiness::OtherDigest {
                generation,
                loaded,
                expected,
            } => write!(
                f,
                "holds generation {generation} as {loaded}, but the expected table is {expected}"
            ),
        }
    }
}
