//! Foreign functions Envoy offers to wasm modules, as far as oooi uses them.

/// The arguments of Envoy's `set_envoy_filter_state` foreign function:
/// protobuf `SetEnvoyFilterStateArguments { string path = 1; string value = 2; LifeSpan span = 3 }`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FilterStateArguments {
    /// Filter state key, e.g. `envoy.tcp_proxy.cluster`.
    pub path: String,
    /// The value, as a string.
    pub value: String,
    /// Life span (`DownstreamConnection = 2`).
    pub span: i64,
}

fn varint(bytes: &[u8], pos: &mut usize) -> Option<u64> {
    let mut value: u64 = 0;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(*pos)?;
        *pos += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

fn take<'a>(bytes: &'a [u8], pos: &mut usize, len: u64) -> Option<&'a [u8]> {
    let len = usize::try_from(len).ok()?;
    let end = pos.checked_add(len)?;
    let slice = bytes.get(*pos..end)?;
    *pos = end;
    Some(slice)
}

/// Decode `SetEnvoyFilterStateArguments`, skipping unknown fields like
/// protobuf does. `None` when the bytes are not a valid message.
pub fn decode_filter_state_arguments(bytes: &[u8]) -> Option<FilterStateArguments> {
    let mut args = FilterStateArguments::default();
    let mut pos = 0;
    while pos < bytes.len() {
        let key = varint(bytes, &mut pos)?;
        let (field, wire) = (key >> 3, key & 7);
        match wire {
            0 => {
                let value = varint(bytes, &mut pos)?;
                if field == 3 {
                    // int32/enum: negative values are sign-extended to 64 bits.
                    args.span = value as i64;
                }
            }
            1 => {
                take(bytes, &mut pos, 8)?;
            }
            2 => {
                let len = varint(bytes, &mut pos)?;
                let data = take(bytes, &mut pos, len)?;
                let text = || std::str::from_utf8(data).ok().map(str::to_owned);
                match field {
                    1 => args.path = text()?,
                    2 => args.value = text()?,
                    _ => {}
                }
            }
            5 => {
                take(bytes, &mut pos, 4)?;
            }
            _ => return None,
        }
    }
    Some(args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_path_value_and_span() {
        let mut msg = vec![0x0a, 23];
        msg.extend_from_slice(b"envoy.tcp_proxy.cluster");
        msg.extend_from_slice(&[0x12, 3]);
        msg.extend_from_slice(b"c-1");
        msg.extend_from_slice(&[0x18, 2]);
        assert_eq!(
            decode_filter_state_arguments(&msg),
            Some(FilterStateArguments {
                path: "envoy.tcp_proxy.cluster".into(),
                value: "c-1".into(),
                span: 2
            })
        );
    }

    #[test]
    fn truncated_message_is_rejected() {
        assert_eq!(decode_filter_state_arguments(&[0x0a, 5, b'a']), None);
        assert_eq!(decode_filter_state_arguments(&[0x18, 0x80]), None);
        assert_eq!(decode_filter_state_arguments(&[0x0b]), None);
    }

    #[test]
    fn unknown_fields_are_skipped() {
        let msg = [0x20, 7, 0x2a, 1, b'x', 0x12, 1, b'v'];
        let args = decode_filter_state_arguments(&msg).expect("valid");
        assert_eq!(args.value, "v");
        assert_eq!(args.path, "");
    }
}
