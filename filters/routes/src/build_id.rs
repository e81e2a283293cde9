//! The build id a filter module carries, and how to stamp one in.
//!
//! The module holds a fixed slot, [`PREFIX`] followed by [`LEN`] bytes padded
//! with NUL, in its data section. The filter reads the slot at start and
//! reports it (log, per-build connection counter, table API answers), so an
//! operator or a test can tell which build served a connection. Release tooling
//! stamps an id by rewriting those bytes in the `.wasm` file: the module's
//! digest changes with it, which is what makes Envoy load it as a new build.

/// The marker in front of the slot.
pub const PREFIX: &[u8; 14] = b"OOOI_BUILD_ID=";
/// Bytes reserved for the id after the marker.
pub const LEN: usize = 32;
/// The id of an unstamped build.
pub const DEFAULT: &str = "dev";

/// The id stored in a slot (the [`LEN`] bytes after the marker): printable
/// ASCII up to the first NUL, anything else mapped to `_`; [`DEFAULT`] when
/// empty.
pub fn parse_slot(slot: &[u8]) -> String {
    let id: String = slot
        .iter()
        .take(LEN)
        .take_while(|b| **b != 0)
        .map(|&b| {
            if b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_' {
                b as char
            } else {
                '_'
            }
        })
        .collect();
    if id.is_empty() {
        DEFAULT.to_owned()
    } else {
        id
    }
}

/// Why a module could not be stamped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StampError {
    /// `id` is empty, longer than [`LEN`], or has characters other than
    /// ASCII letters, digits, `-`, `.` and `_`.
    BadId(String),
    /// The module has no slot, or more than one.
    Slots(usize),
}

impl std::fmt::Display for StampError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StampError::BadId(id) => write!(
                f,
                "build id {id:?}: expected 1-{LEN} characters from [A-Za-z0-9._-]"
            ),
            StampError::Slots(n) => write!(
                f,
                "module has {n} build id slots, expected exactly one (is it an oooi filter module?)"
            ),
        }
    }
}

impl std::error::Error for StampError {}

/// A copy of `module` whose build id slot holds `id`.
pub fn stamp(module: &[u8], id: &str) -> Result<Vec<u8>, StampError> {
    let ok = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_';
    if id.is_empty() || id.len() > LEN || !id.bytes().all(ok) {
        return Err(StampError::BadId(id.to_owned()));
    }
    let hits: Vec<usize> = module
        .windows(PREFIX.len())
        .enumerate()
        .filter(|(i, w)| *w == PREFIX && module.len() >= i + PREFIX.len() + LEN)
        .map(|(i, _)| i + PREFIX.len())
        .collect();
    let [at] = hits.as_slice() else {
        return Err(StampError::Slots(hits.len()));
    };
    let mut out = module.to_vec();
    let slot = &mut out[*at..*at + LEN];
    slot.fill(0);
    slot[..id.len()].copy_from_slice(id.as_bytes());
    Ok(out)
}

/// The id stamped in `module`, if it has exactly one slot.
pub fn read(module: &[u8]) -> Option<String> {
    let mut found = None;
    for (i, w) in module.windows(PREFIX.len()).enumerate() {
        if w == PREFIX {
            let slot = module.get(i + PREFIX.len()..i + PREFIX.len() + LEN)?;
            if found.is_some() {
                return None;
            }
            found = Some(parse_slot(slot));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module_with_slot() -> Vec<u8> {
        let mut m = b"\0asm junk before ".to_vec();
        m.extend_from_slice(PREFIX);
        m.extend_from_slice(b"dev");
        m.extend_from_slice(&[0; LEN - 3]);
        m.extend_from_slice(b" junk after");
        m
    }

    #[test]
    fn stamping_rewrites_only_the_slot() {
        let m = module_with_slot();
        assert_eq!(read(&m).as_deref(), Some("dev"));
        let s = stamp(&m, "v2.abc-1").unwrap();
        assert_eq!(s.len(), m.len());
        assert_eq!(read(&s).as_deref(), Some("v2.abc-1"));
        let diff = m.iter().zip(&s).filter(|(a, b)| a != b).count();
        assert!(diff <= "v2.abc-1".len());
        // Stamping again replaces the id whole.
        assert_eq!(read(&stamp(&s, "b").unwrap()).as_deref(), Some("b"));
    }

    #[test]
    fn bad_ids_and_foreign_modules_are_refused() {
        let m = module_with_slot();
        assert!(matches!(stamp(&m, ""), Err(StampError::BadId(_))));
        assert!(matches!(stamp(&m, "a b"), Err(StampError::BadId(_))));
        assert!(matches!(
            stamp(&m, &"x".repeat(LEN + 1)),
            Err(StampError::BadId(_))
        ));
        assert_eq!(stamp(b"no slot here", "x"), Err(StampError::Slots(0)));
        let mut twice = m.clone();
        twice.extend_from_slice(&m);
        assert_eq!(stamp(&twice, "x"), Err(StampError::Slots(2)));
    }

    #[test]
    fn slot_contents_are_sanitised() {
        assert_eq!(parse_slot(b"a/b\0zzz"), "a_b");
        assert_eq!(parse_slot(&[0; LEN]), DEFAULT);
    }
}
