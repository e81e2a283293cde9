//! The one error shape of every check of a config file or API object.

use std::fmt;

/// A bad value: the dotted path of its field (`spec.networkConfig.cidr`,
/// `views[0].listen[1]`, `file` for I/O and syntax) and what is wrong,
/// quoting the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Path of the field at fault.
    pub field: String,
    /// What is wrong, including the bad value.
    pub message: String,
}

impl FieldError {
    /// An error on `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The same error with `prefix` put before its path (`spec.dhcp` and
    /// `range.start` give `spec.dhcp.range.start`), for a check of a part
    /// whose caller knows where the part sits.
    pub fn under(self, prefix: &str) -> FieldError {
        let field = match (prefix.is_empty(), self.field.is_empty()) {
            (true, _) => self.field,
            (false, true) => prefix.to_owned(),
            (false, false) if self.field.starts_with('[') => format!("{prefix}{}", self.field),
            (false, false) => format!("{prefix}.{}", self.field),
        };
        FieldError { field, ..self }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for FieldError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_path_then_message_and_nests_under_a_prefix() {
        let e = FieldError::new("range.start", "192.0.2.0 is the network address");
        assert_eq!(
            e.to_string(),
            "range.start: 192.0.2.0 is the network address"
        );
        assert_eq!(e.clone().under("spec.dhcp").field, "spec.dhcp.range.start");
        assert_eq!(e.clone().under("").field, "range.start");
        assert_eq!(FieldError::new("[2]", "x").under("views").field, "views[2]");
        assert_eq!(FieldError::new("", "x").under("spec").field, "spec");
    }
}
