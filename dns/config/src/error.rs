//! The one error shape of the config: where (the field path) and what.

/// An error in the config file. `field` is the path of the offending field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The text is not valid YAML/JSON for [`crate::RawConfig`].
    #[error("cannot parse config: {0}")]
    Syntax(String),
    /// A field has a bad value.
    #[error("{field}: {message}")]
    Invalid {
        /// Path of the field, e.g. `views[0].listen[1]`.
        field: String,
        /// What is wrong with it, quoting the bad value.
        message: String,
    },
}

/// A [`ConfigError::Invalid`].
pub(crate) fn invalid(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        message: message.into(),
    }
}
