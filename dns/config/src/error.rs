//! The one error shape of the config: where (the field path) and what.

pub use oooi_vocabulary::FieldError;

/// A parse or validation error: the shared [`FieldError`]. `field` is the
/// path of the offending field (for example `views[0].listen[1]`, `file` for
/// I/O and syntax); `message` says what is wrong, quoting the bad value.
pub type ConfigError = FieldError;

/// A [`ConfigError`] on `field`.
pub(crate) fn invalid(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
    FieldError::new(field, message)
}
