//! Naming rules the planners check names against, in a module of their own
//! so that every planner can use them without naming another planner.

/// True for a DNS label: 1-63 of `[a-z0-9-]`, not starting or ending with `-`.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_labels_are_lower_case_and_at_most_63_bytes() {
        assert!(is_dns_label("a-1"));
        assert!(is_dns_label(&"a".repeat(63)));
        for bad in ["", "-a", "a-", "A", "a.b", &"a".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad:?}");
        }
    }
}
