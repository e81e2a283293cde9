//! Numbers and encodings of the proxy-wasm ABI 0.2.1.

/// `proxy_status_t` values returned by host functions.
pub(crate) mod status {
    pub const OK: i32 = 0;
    pub const NOT_FOUND: i32 = 1;
    pub const BAD_ARGUMENT: i32 = 2;
    pub const SERIALIZATION_FAILURE: i32 = 3;
    pub const INVALID_MEMORY_ACCESS: i32 = 6;
    pub const CAS_MISMATCH: i32 = 8;
    pub const INTERNAL_FAILURE: i32 = 10;
    pub const UNIMPLEMENTED: i32 = 12;
}

/// WASI preview1 errno values.
pub(crate) mod errno {
    pub const SUCCESS: i32 = 0;
    pub const BADF: i32 = 8;
    pub const FAULT: i32 = 21;
    pub const INVAL: i32 = 28;
    pub const NOSYS: i32 = 52;
}

/// `proxy_buffer_type_t`.
pub(crate) mod buffer {
    pub const HTTP_REQUEST_BODY: u32 = 0;
    pub const VM_CONFIGURATION: u32 = 6;
    pub const PLUGIN_CONFIGURATION: u32 = 7;
}

/// `proxy_header_map_type_t`.
pub(crate) mod map {
    pub const HTTP_REQUEST_HEADERS: u32 = 0;
}

/// `proxy_metric_type_t`.
pub(crate) mod metric {
    pub const COUNTER: u32 = 0;
    pub const GAUGE: u32 = 1;
    pub const HISTOGRAM: u32 = 2;
}

/// Names of every ABI version export this host recognises.
pub(crate) const ABI_VERSIONS: [&str; 3] = [
    "proxy_abi_version_0_1_0",
    "proxy_abi_version_0_2_0",
    "proxy_abi_version_0_2_1",
];

/// The version this host speaks.
pub(crate) const ABI_0_2_1: &str = "proxy_abi_version_0_2_1";

/// Function exports the host calls, with (param count, result count); all
/// params and results are i32.
pub(crate) const REQUIRED_FUNCTIONS: [(&str, usize, usize); 6] = [
    ("proxy_on_context_create", 2, 0),
    ("proxy_on_configure", 2, 1),
    ("proxy_on_new_connection", 1, 1),
    ("proxy_on_request_headers", 3, 1),
    ("proxy_on_request_body", 3, 1),
    ("proxy_on_tick", 1, 0),
];

/// Allocator exports, in order of preference.
pub(crate) const ALLOCATORS: [&str; 2] = ["proxy_on_memory_allocate", "malloc"];

/// Serialize a header map the way proxy-wasm does: u32 count, then per pair
/// u32 key length and u32 value length, then per pair key NUL value NUL.
pub(crate) fn encode_pairs(pairs: &[(String, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(pairs.len() as u32).to_le_bytes());
    for (key, value) in pairs {
        out.extend_from_slice(&(key.len() as u32).to_le_bytes());
        out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    }
    for (key, value) in pairs {
        out.extend_from_slice(key.as_bytes());
        out.push(0);
        out.extend_from_slice(value.as_bytes());
        out.push(0);
    }
    out
}

/// Parse a serialized header map; `None` when it is malformed.
pub(crate) fn decode_pairs(bytes: &[u8]) -> Option<Vec<(String, String)>> {
    if bytes.is_empty() {
        return Some(Vec::new());
    }
    let word = |at: usize| -> Option<usize> {
        let raw: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
        Some(u32::from_le_bytes(raw) as usize)
    };
    let count = word(0)?;
    let mut sizes = Vec::new();
    for i in 0..count {
        let at = 4usize.checked_add(i.checked_mul(8)?)?;
        sizes.push((word(at)?, word(at + 4)?));
    }
    let mut pos = 4usize.checked_add(count.checked_mul(8)?)?;
    let mut text = |len: usize| -> Option<String> {
        let end = pos.checked_add(len)?;
        let s = std::str::from_utf8(bytes.get(pos..end)?).ok()?.to_owned();
        pos = end.checked_add(1)?; // the NUL
        Some(s)
    };
    let mut pairs = Vec::with_capacity(sizes.len());
    for (key_len, value_len) in sizes {
        let key = text(key_len)?;
        let value = text(value_len)?;
        pairs.push((key, value));
    }
    Some(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_pairs_round_trip() {
        let pairs = vec![
            (":status".to_owned(), "200".to_owned()),
            ("content-type".to_owned(), "application/json".to_owned()),
            ("x-empty".to_owned(), String::new()),
        ];
        assert_eq!(decode_pairs(&encode_pairs(&pairs)), Some(pairs));
        assert_eq!(decode_pairs(&[]), Some(Vec::new()));
    }

    #[test]
    fn malformed_pairs_are_rejected() {
        assert_eq!(decode_pairs(&[1, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0]), None);
        assert_eq!(decode_pairs(&[0xff, 0xff, 0xff, 0xff]), None);
    }
}
