//! DNS names in wire form, the key both the fast path's tables and the
//! forwarding cache are looked up by.

use hickory_proto::rr::{LowerName, Name};

/// Lowercase wire format of a name (labels with length bytes, root last).
pub fn wire_name(name: &LowerName) -> Box<[u8]> {
    let name = Name::from(name);
    let mut out = Vec::with_capacity(name.len() + 2);
    for label in name.iter() {
        out.push(label.len() as u8);
        out.extend(label.iter().map(u8::to_ascii_lowercase));
    }
    out.push(0);
    out.into_boxed_slice()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_are_lowercase_length_prefixed_labels_ending_at_the_root() {
        let name = Name::from_ascii("Api.C1.example.").expect("name");
        let wire = wire_name(&LowerName::new(&name));
        assert_eq!(&*wire, b"\x03api\x02c1\x07example\x00");
        assert_eq!(&*wire_name(&LowerName::new(&Name::root())), b"\x00");
    }
}
